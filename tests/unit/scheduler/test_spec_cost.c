/* test_spec_cost.c: the row-cost fit and the draft length that follows from it: the fit
 * recovers a step's fixed and per-row time from noisy steps, forgets old ones, and the
 * draft length grows with the acceptance rate, shrinks as the batch widens, and is zero
 * once a row costs as much as the tokens it may bring. */
#include <criterion/criterion.h>
#include <math.h>

#include "scheduler/spec/spec.h"

/* Steps of t = fixed + per_row * rows, rows cycling through 1..9, with +-2% noise. */
static void feed(spec_cost *c, int n, double fixed, double per_row, int width) {
    for (int i = 0; i < n; i++) {
        int rows = width + i % 9;
        double noise = 1 + 0.02 * ((i * 7919) % 5 - 2) / 2.0;
        spec_cost_observe(c, rows, (fixed + per_row * rows) * noise);
    }
}

Test(spec_cost, the_fit_recovers_fixed_and_per_row_time) {
    spec_cost c = {0};
    feed(&c, 200, 0.0025, 0.001, 1);
    double per_row, fixed;
    cr_assert(spec_cost_fit(&c, &per_row, &fixed));
    cr_assert_float_eq(per_row, 0.001, 0.0001, "per row %g", per_row);
    cr_assert_float_eq(fixed, 0.0025, 0.0005, "fixed %g", fixed);
}

Test(spec_cost, old_steps_are_forgotten) {
    spec_cost c = {0};
    feed(&c, 300, 0.0025, 0.001, 1);
    feed(&c, 400, 0.0025, 0.004, 1); /* rows got dearer (a busier machine, deeper contexts) */
    double per_row, fixed;
    cr_assert(spec_cost_fit(&c, &per_row, &fixed));
    cr_assert_float_eq(per_row, 0.004, 0.0004, "per row %g", per_row);
}

Test(spec_cost, without_variation_the_prior_serves) {
    spec_cost c = {0};
    for (int i = 0; i < 50; i++) spec_cost_observe(&c, 4, 0.008);
    double per_row, fixed;
    cr_assert(!spec_cost_fit(&c, &per_row, &fixed));
    cr_assert_float_eq(per_row, 0.25 * 0.008 / 4, 1e-12);
    cr_assert_gt(fixed, 0);
}

/* Once drafting stops (a dear row measured), the steps stop varying and the line can no
 * longer be fitted: the last fit's share must serve, not the cheap prior, or drafting
 * would start again and lose again. */
Test(spec_cost, a_measured_dear_row_is_not_forgotten_when_steps_stop_varying) {
    spec_cost c = {0};
    feed(&c, 200, 0.0025, 0.004, 1);
    for (int i = 0; i < 400; i++) spec_cost_observe(&c, 4, 0.0025 + 0.004 * 4);
    double per_row, fixed;
    cr_assert(!spec_cost_fit(&c, &per_row, &fixed), "no variation left to fit");
    cr_assert_float_eq(per_row, 0.004, 0.0004, "per row %g: the last fit's share, not the prior's %g", per_row,
                       0.25 * (0.0025 + 0.016) / 4);
    cr_assert_eq(spec_cost_draft_len(&c, 4, 0.8, 8), 0, "a row 86%% of a token's time: no draft at p = 0.8");
}

/* Where a row costs more than the prior acceptance makes worth it, a sequence that has
 * never drafted still tries one token (else it could never learn its own rate); once a
 * draft of it was verified, the cost model alone decides. */
Test(spec_cost, a_sequence_tries_one_draft_before_its_rate_is_known) {
    spec_cost c = {0};
    feed(&c, 200, 0.0025, 0.004, 1);
    cr_assert_eq(spec_cost_draft_len(&c, 1, 0.6, 8), 0, "a row is over 60%% of a token's time here");
    cr_assert_eq(spec_cost_sequence_draft_len(&c, 1, 0.6, 8, false), 1, "never drafted: one token");
    cr_assert_eq(spec_cost_sequence_draft_len(&c, 1, 0.6, 8, true), 0, "its drafts were verified: none");
    cr_assert_eq(spec_cost_sequence_draft_len(&c, 1, 0.6, 0, false), 0, "no room: none");
    cr_assert_eq(spec_cost_sequence_draft_len(&c, 1, 0.95, 8, true), spec_cost_draft_len(&c, 1, 0.95, 8),
                 "where drafting pays, the cost model's length");
}

Test(spec_cost, draft_length_follows_acceptance_and_width) {
    spec_cost c = {0};
    cr_assert_eq(spec_cost_draft_len(&c, 1, 0.9, 8), 2, "nothing measured: a short draft");
    feed(&c, 200, 0.0025, 0.001, 1);
    /* one sequence: a row is 0.001 / 0.0035 = 29% of a token's time */
    int low = spec_cost_draft_len(&c, 1, 0.5, 16), mid = spec_cost_draft_len(&c, 1, 0.8, 16),
        high = spec_cost_draft_len(&c, 1, 0.97, 16);
    cr_assert_eq(low, 1, "0.5 > 0.29 once: %d", low);
    cr_assert_eq(mid, 5, "0.8^5 = 0.33 > 0.29 > 0.8^6: %d", mid);
    cr_assert_eq(high, 16, "capped: %d", high);
    cr_assert(low < mid && mid < high);
    cr_assert_eq(spec_cost_draft_len(&c, 1, 1.0, 7), 7);
    /* 64 sequences: a row is 0.064 / 0.0665 = 96% of a token's time: only near-certain drafts */
    cr_assert_eq(spec_cost_draft_len(&c, 64, 0.9, 16), 0);
    cr_assert_eq(spec_cost_draft_len(&c, 64, 0.99, 16), 3);
    cr_assert_eq(spec_cost_draft_len(&c, 1, 0.9, 0), 0, "no room");
}

/* Steps at 16 sequences whose own slope is cheap (0.8 ms a row over a large fixed cost),
 * against steps of one sequence at 5.5 ms: the line across the buckets makes a row 1.6 ms,
 * and the dearer line serves, whether drafts come in one step in ten (rows vary little)
 * or in every step. Where the bucket's own slope is the dearer (3 ms a row), it serves. */
Test(spec_cost, a_fit_takes_the_dearer_of_its_own_line_and_the_line_across_buckets) {
    const int one = spec_gate_bucket_of(1), wide = spec_gate_bucket_of(16);
    spec_cost thin[SPEC_GATE_BUCKETS] = {0}, dense[SPEC_GATE_BUCKETS] = {0}, dear[SPEC_GATE_BUCKETS] = {0};
    for (int i = 0; i < 60; i++) {
        spec_cost_observe(&thin[one], 1, 0.0055);
        spec_cost_observe(&dense[one], 1, 0.0055);
        spec_cost_observe(&dear[one], 1, 0.0055);
    }
    for (int i = 0; i < 400; i++) {
        int rows = 16 + (i % 10 == 0 ? 1 + i / 10 % 3 : 0);
        spec_cost_observe(&thin[wide], rows, 0.017 + 0.0008 * rows);
        spec_cost_share_across(thin, SPEC_GATE_BUCKETS);
        rows = 16 + i % 4;
        spec_cost_observe(&dense[wide], rows, 0.017 + 0.0008 * rows);
        spec_cost_share_across(dense, SPEC_GATE_BUCKETS);
        spec_cost_observe(&dear[wide], rows, 0.002 + 0.003 * rows);
        spec_cost_share_across(dear, SPEC_GATE_BUCKETS);
    }
    double per_row, fixed;
    cr_assert(spec_cost_fit(&thin[wide], &per_row, &fixed));
    cr_assert_float_eq(per_row, (0.0298 - 0.0055) / 15, 0.0001, "the line across: %g", per_row);
    cr_assert_eq(spec_cost_draft_len(&thin[wide], 16, 0.6, 8), 0);
    cr_assert(spec_cost_fit(&dense[wide], &per_row, &fixed));
    cr_assert_float_eq(per_row, (0.0298 - 0.0055) / 15, 0.0001, "the line across: %g", per_row);
    cr_assert_eq(spec_cost_draft_len(&dense[wide], 16, 0.6, 8), 0);
    cr_assert_gt(spec_cost_draft_len(&dense[wide], 16, 0.95, 8), 0, "a near-certain draft still pays");
    cr_assert(spec_cost_fit(&dear[wide], &per_row, &fixed));
    cr_assert_float_eq(per_row, 0.003, 1e-6, "its own slope: %g", per_row);
}

/* Steps at one sequence and at sixteen: the line across the two buckets makes a row
 * 1.6 ms, 87% of a mean row at sixteen (one sequence keeps its own line). A bucket that cannot
 * fit its own line still starts from the prior: only its own drafted steps can show what
 * its rows cost. */
Test(spec_cost, the_line_across_buckets_goes_through_their_mean_steps) {
    spec_cost costs[SPEC_GATE_BUCKETS] = {0};
    const int one = spec_gate_bucket_of(1), wide = spec_gate_bucket_of(16);
    for (int i = 0; i < 60; i++) spec_cost_observe(&costs[one], 1, 0.0055);
    for (int i = 0; i < 60; i++) spec_cost_observe(&costs[wide], 16, 0.0298);
    spec_cost_share_across(costs, SPEC_GATE_BUCKETS);
    cr_assert_float_eq(costs[wide].cross_share, (0.0298 - 0.0055) / 15 / (0.0298 / 16), 1e-9, "%g",
                       costs[wide].cross_share);
    cr_assert_float_eq(costs[one].cross_share, 0, 1e-12, "one sequence's own line needs no help");
    cr_assert_float_eq(costs[spec_gate_bucket_of(4)].cross_share, 0, 1e-12, "a bucket without steps: none");
    double per_row, fixed;
    cr_assert(!spec_cost_fit(&costs[wide], &per_row, &fixed));
    cr_assert_float_eq(per_row, 0.25 * 0.0298 / 16, 1e-9, "no fit of its own: the prior, %g", per_row);
}

Test(spec_cost, one_bucket_alone_keeps_the_prior) {
    spec_cost costs[SPEC_GATE_BUCKETS] = {0};
    for (int i = 0; i < 60; i++) spec_cost_observe(&costs[0], 1, 0.0055);
    spec_cost_share_across(costs, SPEC_GATE_BUCKETS);
    double per_row, fixed;
    cr_assert_float_eq(costs[0].cross_share, 0, 1e-12, "no line through one bucket");
    cr_assert(!spec_cost_fit(&costs[0], &per_row, &fixed));
    cr_assert_float_eq(per_row, 0.25 * 0.0055, 1e-9, "the prior: nothing to compare with");
}

/* A wider batch whose steps take less time (a line with rows that come out free) and a
 * bucket seen only in a step or two lend nothing: the prior serves. */
Test(spec_cost, a_senseless_or_thin_line_across_buckets_lends_nothing) {
    spec_cost costs[SPEC_GATE_BUCKETS] = {0};
    for (int i = 0; i < 60; i++) spec_cost_observe(&costs[0], 1, 0.0055);
    for (int i = 0; i < 60; i++) spec_cost_observe(&costs[2], 4, 0.0050);
    spec_cost_share_across(costs, SPEC_GATE_BUCKETS);
    cr_assert_float_eq(costs[2].cross_share, 0, 1e-12, "rows that come out free");
    spec_cost thin[SPEC_GATE_BUCKETS] = {0};
    for (int i = 0; i < 60; i++) spec_cost_observe(&thin[0], 1, 0.0055);
    for (int i = 0; i < 2; i++) spec_cost_observe(&thin[4], 16, 0.0298);
    spec_cost_share_across(thin, SPEC_GATE_BUCKETS);
    cr_assert_float_eq(thin[4].cross_share, 0, 1e-12, "two steps are not yet a mean to draw a line through");
}

/* Steps whose time grows with their rows and meets zero rows at or below zero (a
 * compute-bound CPU at 32-64 sequences) price a row at the mean time per row: no draft
 * pays, however sure. The verdict of one bucket alone is not kept
 * once its rows stop varying (a few noisy steps of one sequence draw such a line too):
 * drafting resumes, short. */
Test(spec_cost, a_line_without_fixed_cost_is_compute_bound_while_it_holds) {
    spec_cost c = {0};
    for (int i = 0; i < 200; i++) {
        int rows = 40 + i % 9;
        spec_cost_observe(&c, rows, 0.0068 * rows - 0.004 + 0.002 * (i % 3)); /* noise: a negative intercept */
    }
    double per_row, fixed;
    cr_assert(spec_cost_fit(&c, &per_row, &fixed));
    cr_assert_float_eq(per_row, c.sy / c.sx, 1e-12, "the mean time per row");
    cr_assert_float_eq(fixed, 0, 1e-12);
    cr_assert_eq(spec_cost_draft_len(&c, 40, 0.98, 8), 0, "not even a near-certain draft pays");
    cr_assert_float_eq(c.row_share, 0, 1e-12, "not kept: no line across buckets confirms it");
    for (int i = 0; i < 400; i++) spec_cost_observe(&c, 40, 0.0068 * 40);
    cr_assert(!spec_cost_fit(&c, &per_row, &fixed), "no variation left to fit");
    int len = spec_cost_draft_len(&c, 40, 0.97, 8);
    cr_assert(len >= 1 && len <= 2, "drafting resumes, short: %d", len);
}

/* Two wide buckets, both compute-bound (7 ms a row, nothing fixed): the line across them
 * confirms it, so when a bucket's rows stop varying the dear row is kept, not the prior's
 * cheap one (which let 64 sequences draft again and lose). */
Test(spec_cost, a_compute_bound_verdict_the_line_across_confirms_is_kept) {
    spec_cost costs[SPEC_GATE_BUCKETS] = {0};
    const int b16 = spec_gate_bucket_of(16), b40 = spec_gate_bucket_of(40);
    for (int i = 0; i < 200; i++) {
        int rows = 16 + i % 9;
        spec_cost_observe(&costs[b16], rows, 0.007 * rows - 0.001 + 0.001 * (i % 3));
        rows = 40 + i % 9;
        spec_cost_observe(&costs[b40], rows, 0.007 * rows - 0.001 + 0.001 * (i % 3));
        spec_cost_share_across(costs, SPEC_GATE_BUCKETS);
    }
    cr_assert_float_eq(costs[b40].row_share, 0.95, 0.01, "the line across, at its cap: %g", costs[b40].row_share);
    for (int i = 0; i < 400; i++) spec_cost_observe(&costs[b40], 40, 0.28);
    double per_row, fixed;
    cr_assert(!spec_cost_fit(&costs[b40], &per_row, &fixed), "no variation left to fit");
    cr_assert_eq(spec_cost_draft_len(&costs[b40], 40, 0.9, 8), 0, "the dear row is kept");
}

/* Before a bucket's first fit the prior would let long drafts through for every
 * sequence: they stay at two tokens until the steps have priced a row. */
Test(spec_cost, an_unpriced_bucket_drafts_short) {
    spec_cost c = {0};
    cr_assert_eq(spec_cost_draft_len(&c, 48, 0.97, 8), 2, "nothing measured");
    for (int i = 0; i < 7; i++) spec_cost_observe(&c, 48 + i, 0.02 + 0.001 * (48 + i));
    double per_row, fixed;
    cr_assert(!spec_cost_fit(&c, &per_row, &fixed), "7 steps: no fit yet");
    cr_assert_eq(spec_cost_draft_len(&c, 48, 0.97, 8), 2, "the prior's row is cheap, but unproven");
    cr_assert_eq(spec_cost_draft_len(&c, 48, 0.97, 1), 1, "within the room");
    for (int i = 0; i < 20; i++) spec_cost_observe(&c, 48 + i % 9, 0.02 + 0.001 * (48 + i % 9));
    cr_assert(spec_cost_fit(&c, &per_row, &fixed));
    cr_assert_gt(spec_cost_draft_len(&c, 48, 0.97, 8), 2, "a fitted cheap row allows long drafts");
}

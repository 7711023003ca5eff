/* test_spec_cost.c: the row-cost fit and the draft length that follows from it: the fit
 * recovers a step's fixed and per-row time from noisy steps, forgets old ones, and the
 * draft length grows with the acceptance rate, shrinks as the batch widens, and is zero
 * once a row costs as much as the tokens it may bring. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

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

/* The plain least-squares slope of c's decayed sums. */
static double plain_slope(const spec_cost *c) {
    return (c->sxy - c->sx * c->sy / c->n) / (c->sxx - c->sx * c->sx / c->n);
}

/* A wide batch whose drafts are rare: one step in ten has a draft row or three more than
 * its sixteen, and step times scatter by +-10%, so the slope alone comes out anywhere
 * (below the true row about half the time, letting losing drafts through). The row cost
 * errs dear by the slope's standard error: over twelve such runs, below the true row at
 * most once, and never above SHARE_MAX (0.95) of the mean time per row. Where every step
 * varies in rows and times scatter little, the margin is small. */
Test(spec_cost, a_scattered_fit_errs_dear) {
    const double fixed = 0.004, per_row = 0.0016;
    int plain_low = 0, dear_low = 0;
    for (uint32_t run = 1; run <= 12; run++) {
        spec_cost sparse = {0}, dense = {0};
        uint32_t seed = run * 7777;
        for (int i = 0; i < 400; i++) {
            seed = seed * 1664525u + 1013904223u;
            double noise = (double)(seed >> 8) / (1 << 24) * 2 - 1; /* -1..1 */
            int rows = 16 + (i % 10 == 0 ? 1 + i / 10 % 3 : 0);
            spec_cost_observe(&sparse, rows, (fixed + per_row * rows) * (1 + 0.1 * noise));
            rows = 16 + i % 4;
            spec_cost_observe(&dense, rows, (fixed + per_row * rows) * (1 + 0.02 * noise));
        }
        double row, f;
        cr_assert(spec_cost_fit(&sparse, &row, &f), "run %u", run);
        cr_assert_leq(row, 0.95 * sparse.sy / sparse.sx * (1 + 1e-9), "run %u: at most 0.95 of a mean row", run);
        plain_low += plain_slope(&sparse) < per_row;
        dear_low += row < per_row;
        cr_assert(spec_cost_fit(&dense, &row, &f));
        cr_assert(row > plain_slope(&dense) && row < 1.1 * per_row, "run %u: a small margin, %g", run, row);
    }
    cr_assert_geq(plain_low, 3, "the plain slope comes out low in %d of 12", plain_low);
    cr_assert_leq(dear_low, 1, "the dear row in %d of 12", dear_low);
}

/* Steps at one sequence and at sixteen, neither varying in rows: neither bucket can fit
 * its own line, and the prior's cheap row would let a 60% draft through at sixteen
 * sequences. The line across the two buckets shows a row costs 87% of a token's time
 * there: no draft at the prior acceptance, one where the copy is near certain. */
Test(spec_cost, a_bucket_without_its_own_line_borrows_the_line_across_buckets) {
    spec_cost costs[SPEC_GATE_BUCKETS] = {0};
    const int one = spec_gate_bucket_of(1), wide = spec_gate_bucket_of(16);
    for (int i = 0; i < 60; i++) spec_cost_observe(&costs[one], 1, 0.0055);
    for (int i = 0; i < 60; i++) spec_cost_observe(&costs[wide], 16, 0.0298);
    cr_assert_gt(spec_cost_draft_len(&costs[wide], 16, 0.6, 8), 0, "with the prior alone, a 60%% draft passes");
    spec_cost_share_across(costs, SPEC_GATE_BUCKETS);
    double per_row, fixed;
    cr_assert(!spec_cost_fit(&costs[wide], &per_row, &fixed));
    cr_assert_float_eq(per_row, (0.0298 - 0.0055) / 15, 1e-6, "per row %g", per_row);
    cr_assert_eq(spec_cost_draft_len(&costs[wide], 16, 0.6, 8), 0);
    cr_assert_gt(spec_cost_draft_len(&costs[wide], 16, 0.97, 8), 0, "a near-certain copy still drafts");
    cr_assert_float_eq(costs[spec_gate_bucket_of(4)].cross_share, 0, 1e-12, "a bucket without steps borrows nothing");
}

Test(spec_cost, one_bucket_alone_keeps_the_prior) {
    spec_cost costs[SPEC_GATE_BUCKETS] = {0};
    for (int i = 0; i < 60; i++) spec_cost_observe(&costs[0], 1, 0.0055);
    spec_cost_share_across(costs, SPEC_GATE_BUCKETS);
    double per_row, fixed;
    spec_cost_fit(&costs[0], &per_row, &fixed);
    cr_assert_float_eq(per_row, 0.25 * 0.0055, 1e-9, "the prior: nothing to compare with");
}

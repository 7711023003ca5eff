/* test_spec_accept.c: the acceptance model (spec_accept.c). With nothing seen every class
 * is rated at the prior and an unknown class optimistically above it; counted drafts set a
 * class's rate, apart per proposer and match-length class, with the prior's arithmetic;
 * a sequence's bias moves little when a draft fails that its class predicted to fail,
 * much when one fails that it predicted to pass; on a fresh server a sequence whose
 * short-match drafts failed is still rated high enough at a long match to try a token;
 * the counts forget old drafts; everything stays bounded. */
#include <criterion/criterion.h>
#include <math.h>

#include "scheduler/spec/spec.h"

/* n drafts of k tokens from proposer p with a match of len, each accepted up to `accepted`. */
static void drafts(spec_accept *a, sched_spec_proposer p, int len, int n, int k, int accepted) {
    for (int i = 0; i < n; i++) spec_accept_observe(a, p, len, k, accepted);
}

Test(spec_accept, with_nothing_seen_the_prior_and_optimism) {
    spec_accept a = {0};
    double est = spec_accept_rate(&a, SCHED_SPEC_NGRAM, 3, 0, false);
    double opt = spec_accept_rate(&a, SCHED_SPEC_NGRAM, 3, 0, true);
    cr_assert_float_eq(est, 0.6, 1e-9);
    cr_assert(opt > 0.8 && opt < 0.9, "optimistic %g", opt);
    /* a bias moves the rate in log-odds: +log(1.5) on odds 1.5 makes odds 2.25 */
    cr_assert_float_eq(spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 16, 0.4054651081, false), 2.25 / 3.25, 1e-6);
    cr_assert_float_eq(spec_accept_rate(&a, SCHED_SPEC_DRAFT, 0, 0, false), 0.6, 1e-9, "a drafter model's class");
}

Test(spec_accept, counted_drafts_set_a_class_and_proposers_are_apart) {
    spec_accept a = {0};
    drafts(&a, SCHED_SPEC_SUFFIX, 16, 30, 8, 8); /* long matches: every token accepted */
    drafts(&a, SCHED_SPEC_SUFFIX, 2, 30, 2, 0);  /* short ones: rejected at once */
    cr_assert_gt(spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 16, 0, false), 0.95);
    cr_assert_lt(spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 2, 0, false), 0.15);
    /* 16 and 40 tokens are one class */
    cr_assert_float_eq(spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 40, 0, false),
                       spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 16, 0, false), 1e-12);
    /* the n-gram proposer has seen nothing */
    cr_assert_float_eq(spec_accept_rate(&a, SCHED_SPEC_NGRAM, 16, 0, false), 0.6, 1e-9);
    /* a class never seen keeps the prior, whatever the other classes did */
    double unseen = spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 4, 0, false);
    cr_assert_float_eq(unseen, 0.6, 1e-9);
    /* optimism fades with trials: a counted class gains less from it than an unseen one */
    double lift_seen =
        spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 2, 0, true) - spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 2, 0, false);
    double lift_unseen = spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 4, 0, true) - unseen;
    cr_assert(lift_seen >= 0 && lift_seen < lift_unseen, "lift %g against %g", lift_seen, lift_unseen);
}

Test(spec_accept, the_bias_moves_by_surprise) {
    spec_accept a = {0};
    drafts(&a, SCHED_SPEC_NGRAM, 5, 40, 8, 8);
    drafts(&a, SCHED_SPEC_NGRAM, 2, 40, 2, 0);
    /* a short match failing was expected: the bias hardly moves */
    double after_short = spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 2, 0, 2, 0);
    /* a long match failing at once was not: it drops */
    double after_long = spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 5, 0, 8, 0);
    cr_assert(after_short < 0 && after_short > -0.1, "after a short miss %g", after_short);
    cr_assert_lt(after_long, -0.5, "after a long miss %g", after_long);
    /* a short match accepted was a surprise the other way */
    cr_assert_gt(spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 2, 0, 2, 2), 0.5);
    /* no draft, no change; bounded */
    cr_assert_float_eq(spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 5, 0.3, 0, 0), 0.3, 1e-12);
    double b = 0;
    for (int i = 0; i < 100; i++) b = spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 5, b, 8, 0);
    cr_assert_float_eq(b, -SPEC_BIAS_MAX, 1e-9);
    for (int i = 0; i < 100; i++) b = spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 2, b, 2, 2);
    cr_assert_float_eq(b, SPEC_BIAS_MAX, 1e-9);
}

Test(spec_accept, on_a_fresh_server_a_long_match_is_tried_after_short_ones_failed) {
    spec_accept a = {0};
    double bias = 0;
    /* a sequence's first drafts: short matches in a preamble, all rejected */
    for (int i = 0; i < 3; i++) {
        bias = spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 2, bias, 1, 0);
        spec_accept_observe(&a, SCHED_SPEC_NGRAM, 2, 1, 0);
    }
    /* nothing was known of the short class, so each failure moved the bias */
    cr_assert(bias < -0.6 && bias > -1.0, "bias %g", bias);
    /* the long class's estimate is the prior shifted by that bias: below the prior */
    double long_est = spec_accept_rate(&a, SCHED_SPEC_NGRAM, 5, bias, false);
    cr_assert(long_est > 0.35 && long_est < 0.5, "long estimate %g", long_est);
    /* but, never drafted, it is rated optimistically: enough for one token where a row
     * costs up to 70% of a token's time, where the short class is not */
    cr_assert_gt(spec_accept_rate(&a, SCHED_SPEC_NGRAM, 5, bias, true), 0.7);
    cr_assert_lt(spec_accept_rate(&a, SCHED_SPEC_NGRAM, 2, bias, true), 0.5);
    /* and once long matches are seen to copy, they are rated so */
    drafts(&a, SCHED_SPEC_NGRAM, 5, 10, 8, 8);
    cr_assert_gt(spec_accept_rate(&a, SCHED_SPEC_NGRAM, 5, bias, false), 0.9);
}

Test(spec_accept, once_short_matches_are_known_to_fail_their_failure_hardly_counts) {
    spec_accept a = {0};
    drafts(&a, SCHED_SPEC_NGRAM, 2, 50, 2, 0); /* other sequences taught the short class */
    double bias = 0;
    for (int i = 0; i < 3; i++) {
        bias = spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 2, bias, 2, 0);
        spec_accept_observe(&a, SCHED_SPEC_NGRAM, 2, 2, 0);
    }
    cr_assert(bias < 0 && bias > -0.2, "bias %g", bias);
    cr_assert_geq(spec_accept_rate(&a, SCHED_SPEC_NGRAM, 5, bias, false), 0.55, "the long class keeps about its prior");
}

Test(spec_accept, match_lengths_fall_into_their_classes) {
    spec_accept a = {0};
    /* one class per length up to 5, then 6-7, 8-15, 16 and more; 0 (and less) a drafter's */
    static const int same[][2] = {{6, 7}, {8, 15}, {16, 64}, {0, -3}};
    static const int apart[][2] = {{1, 2}, {4, 5}, {5, 6}, {7, 8}, {15, 16}, {0, 1}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        spec_accept b = a;
        drafts(&b, SCHED_SPEC_NGRAM, same[i][0], 20, 4, 4);
        cr_assert_float_eq(spec_accept_rate(&b, SCHED_SPEC_NGRAM, same[i][1], 0, false),
                           spec_accept_rate(&b, SCHED_SPEC_NGRAM, same[i][0], 0, false), 1e-12, "%d and %d", same[i][0],
                           same[i][1]);
    }
    for (size_t i = 0; i < sizeof apart / sizeof apart[0]; i++) {
        spec_accept b = a;
        drafts(&b, SCHED_SPEC_NGRAM, apart[i][0], 20, 4, 4);
        cr_assert_float_eq(spec_accept_rate(&b, SCHED_SPEC_NGRAM, apart[i][1], 0, false), 0.6, 1e-12, "%d and %d",
                           apart[i][0], apart[i][1]);
    }
}

Test(spec_accept, the_arithmetic_of_one_draft) {
    spec_accept a = {0};
    /* the prior is 4 trials at 60%: one draft of 4 with 2 accepted adds 2 accepted and a miss */
    spec_accept_observe(&a, SCHED_SPEC_SUFFIX, 8, 4, 2);
    cr_assert_float_eq(spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 8, 0, false), 4.4 / 7, 1e-12);
    /* an unseen class: the prior plus one standard error of 4 trials */
    cr_assert_float_eq(spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 4, 0, true), 0.6 + sqrt(0.24 / 4), 1e-12);
    /* a draft accepted whole adds no miss */
    spec_accept_observe(&a, SCHED_SPEC_SUFFIX, 3, 4, 4);
    cr_assert_float_eq(spec_accept_rate(&a, SCHED_SPEC_SUFFIX, 3, 0, false), 6.4 / 8, 1e-12);
    /* the bias step: 0.6 per unit of gradient, (1 - q) per accepted token, -q for the miss */
    cr_assert_float_eq(spec_accept_bias_after(&a, SCHED_SPEC_NGRAM, 2, 0, 3, 1), 0.6 * (0.4 - 0.6), 1e-12);
}

Test(spec_accept, old_drafts_are_forgotten_and_bad_input_ignored) {
    spec_accept a = {0};
    drafts(&a, SCHED_SPEC_NGRAM, 4, 100, 8, 8);
    cr_assert_gt(spec_accept_rate(&a, SCHED_SPEC_NGRAM, 4, 0, false), 0.9);
    drafts(&a, SCHED_SPEC_NGRAM, 4, 300, 8, 0); /* the text stopped being copyable */
    cr_assert_lt(spec_accept_rate(&a, SCHED_SPEC_NGRAM, 4, 0, false), 0.2);
    double hi = spec_accept_rate(&a, SCHED_SPEC_NGRAM, 4, SPEC_BIAS_MAX * 4, true);
    double lo = spec_accept_rate(&a, SCHED_SPEC_NGRAM, 4, -SPEC_BIAS_MAX * 4, false);
    cr_assert(hi <= 0.98 && lo >= 0.02, "bounds %g %g", lo, hi);
    spec_accept before = a;
    spec_accept_observe(&a, SCHED_SPEC_NGRAM, 3, 0, 0);                          /* no draft */
    spec_accept_observe(&a, (sched_spec_proposer)SCHED_SPEC_PROPOSERS, 3, 4, 2); /* no such proposer */
    spec_accept_observe(&a, (sched_spec_proposer)-1, 3, 4, 2);
    cr_assert_arr_eq(&a, &before, sizeof a);
    cr_assert_float_eq(spec_accept_rate(&a, (sched_spec_proposer)SCHED_SPEC_PROPOSERS, 3, 0, false), 0.6, 1e-9);
}

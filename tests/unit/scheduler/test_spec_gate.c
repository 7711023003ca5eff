/* test_spec_gate.c: the speculation gate on synthetic step timings: a proposer that
 * loses is switched off after two losing windows, probed again later with an interval
 * that doubles while it keeps losing, switched back on when it wins; one that wins stays
 * on; buckets are independent; noise within the margin switches nothing; a change of
 * context depth makes an estimate stale. */
#include <criterion/criterion.h>

#include "scheduler/spec/spec.h"

static const bool BOTH[SCHED_SPEC_PROPOSERS] = {true, true};

/* One decode-only step as the scheduler reports it: with drafts from p (or none when
 * p < 0), delivering `rate` tokens per second. */
static void step(spec_gate *g, int width, int p, double rate) {
    int64_t drafts[SCHED_SPEC_PROPOSERS] = {0};
    if (p >= 0) drafts[p] = 4 * width;
    spec_gate_observe(g, width, 100, 100 / rate, 100, drafts);
}

/* Runs n steps at width: each drafts with the first allowed proposer, at on_rate, or
 * without drafts at off_rate. Returns how many steps drafted. */
static int run(spec_gate *g, int width, int n, double off_rate, double on_rate) {
    int drafted = 0;
    for (int i = 0; i < n; i++) {
        bool allowed[SCHED_SPEC_PROPOSERS];
        spec_gate_plan(g, width, 100, allowed);
        int p = allowed[SCHED_SPEC_NGRAM] ? SCHED_SPEC_NGRAM : allowed[SCHED_SPEC_SUFFIX] ? SCHED_SPEC_SUFFIX : -1;
        step(g, width, p, p >= 0 ? on_rate : off_rate);
        drafted += p >= 0;
    }
    return drafted;
}

Test(spec_gate, buckets_are_powers_of_two) {
    cr_assert_eq(spec_gate_bucket_of(1), 0);
    cr_assert_eq(spec_gate_bucket_of(2), 1);
    cr_assert_eq(spec_gate_bucket_of(3), 1);
    cr_assert_eq(spec_gate_bucket_of(4), 2);
    cr_assert_eq(spec_gate_bucket_of(64), 6);
    cr_assert_eq(spec_gate_bucket_of(100000), SPEC_GATE_BUCKETS - 1);
}

Test(spec_gate, a_winning_proposer_stays_on) {
    spec_gate g;
    spec_gate_init(&g, BOTH);
    int drafted = run(&g, 1, 2000, 100, 250);
    cr_assert(spec_gate_enabled(&g, SCHED_SPEC_NGRAM));
    cr_assert_eq(g.switches[SCHED_SPEC_NGRAM], 0);
    /* off is re-measured now and then, ever more rarely while on keeps winning */
    cr_assert_gt(drafted, 2000 * 9 / 10, "drafted %d of 2000 steps", drafted);
    cr_assert_lt(drafted, 2000, "off was measured too");
}

Test(spec_gate, a_losing_proposer_is_switched_off_and_costs_ever_less) {
    spec_gate g;
    spec_gate_init(&g, BOTH);
    /* compute-bound: drafts make each step slower than they pay */
    run(&g, 64, 200, 1000, 700);
    cr_assert(!spec_gate_enabled(&g, SCHED_SPEC_NGRAM), "ngram lost and is off");
    cr_assert(!spec_gate_enabled(&g, SCHED_SPEC_SUFFIX), "suffix lost and is off");
    int early = run(&g, 64, 2000, 1000, 700);
    int late = run(&g, 64, 8000, 1000, 700);
    cr_assert_lt(early, 2000 / 10, "probes only: %d of 2000 steps drafted", early);
    cr_assert_lt(late, 8000 / 50, "the probe interval grew: %d of 8000 steps drafted", late);
    cr_assert_gt(late, 0, "still probed now and then");
}

Test(spec_gate, a_probe_that_wins_switches_it_back_on) {
    spec_gate g;
    spec_gate_init(&g, BOTH);
    run(&g, 8, 200, 1000, 700);
    cr_assert(!spec_gate_enabled(&g, SCHED_SPEC_NGRAM));
    int64_t switches = g.switches[SCHED_SPEC_NGRAM];
    run(&g, 8, 2000, 1000, 2000); /* the workload turned copy-heavy */
    cr_assert(spec_gate_enabled(&g, SCHED_SPEC_NGRAM));
    cr_assert_gt(g.switches[SCHED_SPEC_NGRAM], switches);
}

Test(spec_gate, buckets_decide_independently) {
    spec_gate g;
    spec_gate_init(&g, BOTH);
    run(&g, 64, 300, 1000, 700); /* wide steps lose */
    run(&g, 1, 300, 100, 250);   /* narrow ones win */
    bool allowed[SCHED_SPEC_PROPOSERS];
    spec_gate_plan(&g, 1, 100, allowed);
    cr_assert(spec_gate_enabled(&g, SCHED_SPEC_NGRAM), "on at width 1");
    spec_gate_plan(&g, 64, 100, allowed);
    cr_assert(!spec_gate_enabled(&g, SCHED_SPEC_NGRAM), "off at width 64");
}

Test(spec_gate, noise_within_the_margin_switches_nothing) {
    spec_gate g;
    spec_gate_init(&g, BOTH);
    /* on is 2% slower than off: inside the 5% margin */
    run(&g, 4, 3000, 1000, 980);
    cr_assert(spec_gate_enabled(&g, SCHED_SPEC_NGRAM));
    cr_assert_eq(g.switches[SCHED_SPEC_NGRAM], 0);
}

Test(spec_gate, an_estimate_from_another_depth_is_stale) {
    spec_gate g;
    spec_gate_init(&g, BOTH);
    run(&g, 16, 200, 1000, 700);
    cr_assert(!spec_gate_enabled(&g, SCHED_SPEC_NGRAM));
    /* the contexts grew fourfold: off is measured again, then the loss is re-measured
     * within one probe interval from now */
    int64_t interval = g.buckets[spec_gate_bucket_of(16)].probe_every[SCHED_SPEC_NGRAM];
    int first_draft = -1;
    for (int i = 0; i < interval + 4 * SPEC_GATE_WINDOW && first_draft < 0; i++) {
        bool allowed[SCHED_SPEC_PROPOSERS];
        spec_gate_plan(&g, 16, 400, allowed);
        int p = allowed[SCHED_SPEC_NGRAM] ? SCHED_SPEC_NGRAM : allowed[SCHED_SPEC_SUFFIX] ? SCHED_SPEC_SUFFIX : -1;
        if (p >= 0) first_draft = i;
        int64_t drafts[SCHED_SPEC_PROPOSERS] = {0};
        if (p >= 0) drafts[p] = 64;
        spec_gate_observe(&g, 16, 400, p >= 0 ? 100 / 700.0 : 100 / 1000.0, 100, drafts);
    }
    cr_assert(first_draft >= SPEC_GATE_WINDOW, "off is measured first (%d)", first_draft);
    cr_assert(first_draft >= 0, "a stale loss is probed within one interval");
}

Test(spec_gate, off_is_measured_before_anything_drafts) {
    spec_gate g;
    spec_gate_init(&g, BOTH);
    for (int i = 0; i < SPEC_GATE_WINDOW; i++) {
        bool allowed[SCHED_SPEC_PROPOSERS];
        spec_gate_plan(&g, 2, 100, allowed);
        cr_assert(!allowed[SCHED_SPEC_NGRAM] && !allowed[SCHED_SPEC_SUFFIX], "step %d measures off", i);
        step(&g, 2, -1, 100);
    }
    bool allowed[SCHED_SPEC_PROPOSERS];
    spec_gate_plan(&g, 2, 100, allowed);
    cr_assert(allowed[SCHED_SPEC_NGRAM], "then the proposers draft");
}

Test(spec_gate, unavailable_proposers_never_draft) {
    spec_gate g;
    const bool none[SCHED_SPEC_PROPOSERS] = {false, false};
    spec_gate_init(&g, none);
    cr_assert_eq(run(&g, 1, 500, 100, 1000), 0);
    const bool suffix_only[SCHED_SPEC_PROPOSERS] = {false, true};
    spec_gate_init(&g, suffix_only);
    for (int i = 0; i < 100; i++) {
        bool allowed[SCHED_SPEC_PROPOSERS];
        spec_gate_plan(&g, 1, 100, allowed);
        cr_assert(!allowed[SCHED_SPEC_NGRAM]);
        step(&g, 1, allowed[SCHED_SPEC_SUFFIX] ? SCHED_SPEC_SUFFIX : -1, 200);
    }
}

/* A disabled proposer whose probes never draft (nothing to match) gives up each probe and
 * waits twice as long for the next: the proposer that wins keeps drafting nearly always. */
Test(spec_gate, a_probe_that_cannot_conclude_backs_off) {
    spec_gate g;
    spec_gate_init(&g, BOTH);
    /* ngram loses (it drafts and is slow); suffix wins */
    for (int i = 0; i < 400; i++) {
        bool allowed[SCHED_SPEC_PROPOSERS];
        spec_gate_plan(&g, 1, 100, allowed);
        int p = allowed[SCHED_SPEC_NGRAM] && (i % 2 == 0 || !allowed[SCHED_SPEC_SUFFIX]) ? SCHED_SPEC_NGRAM
                : allowed[SCHED_SPEC_SUFFIX]                                             ? SCHED_SPEC_SUFFIX
                                                                                         : -1;
        step(&g, 1, p, p == SCHED_SPEC_SUFFIX ? 250 : p == SCHED_SPEC_NGRAM ? 50 : 100);
    }
    cr_assert(!spec_gate_enabled(&g, SCHED_SPEC_NGRAM));
    cr_assert(spec_gate_enabled(&g, SCHED_SPEC_SUFFIX));
    /* from now on ngram finds nothing to draft when probed: its probes cannot conclude */
    int suffix_steps = 0, n = 4000;
    for (int i = 0; i < n; i++) {
        bool allowed[SCHED_SPEC_PROPOSERS];
        spec_gate_plan(&g, 1, 100, allowed);
        int p = allowed[SCHED_SPEC_SUFFIX] ? SCHED_SPEC_SUFFIX : -1;
        suffix_steps += p == SCHED_SPEC_SUFFIX;
        step(&g, 1, p, p == SCHED_SPEC_SUFFIX ? 250 : 100);
    }
    cr_assert_gt(suffix_steps, n * 9 / 10, "suffix drafted %d of %d steps", suffix_steps, n);
}

/* A drafter model that wins its measured (decode-only) windows by a little but spends
 * long in the steps the gate does not measure (catch-ups beside prefill chunks) is
 * charged that time and switched off; without the charges it stays on. */
Test(spec_gate, a_drafters_time_in_unmeasured_steps_counts_against_it) {
    static const bool DRAFT_ONLY[SCHED_SPEC_PROPOSERS] = {[SCHED_SPEC_DRAFT] = true};
    for (int charged = 0; charged < 2; charged++) {
        spec_gate g;
        spec_gate_init(&g, DRAFT_ONLY);
        for (int i = 0; i < 400; i++) {
            bool allowed[SCHED_SPEC_PROPOSERS];
            spec_gate_plan(&g, 4, 100, allowed);
            int64_t drafts[SCHED_SPEC_PROPOSERS] = {0};
            if (allowed[SCHED_SPEC_DRAFT]) drafts[SCHED_SPEC_DRAFT] = 8;
            /* 100 tokens a step: 1 s without drafts, 0.9 s with them */
            spec_gate_observe(&g, 4, 100, allowed[SCHED_SPEC_DRAFT] ? 0.9 : 1.0, 100, drafts);
            if (charged && allowed[SCHED_SPEC_DRAFT]) spec_gate_charge(&g, 4, SCHED_SPEC_DRAFT, 0.5);
        }
        double off, on;
        spec_gate_rates(&g, 4, SCHED_SPEC_DRAFT, &off, &on);
        cr_assert_float_eq(off, 100.0, 1e-6);
        if (charged) {
            cr_assert(!spec_gate_enabled(&g, SCHED_SPEC_DRAFT), "charged %.1f tok/s against off's %.1f: still on", on,
                      off);
            cr_assert_lt(on, off);
        } else {
            cr_assert(spec_gate_enabled(&g, SCHED_SPEC_DRAFT));
            cr_assert_float_eq(on, 100 / 0.9, 1e-6);
        }
    }
}

/* test_slo.c: the latency-target policy's decisions on scripted states: how much prefill
 * a tick may take beside decodes with TPOT targets, the order of admission, refusal of
 * what cannot meet its TTFT target, and goodput counting. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_internal.h"

static sched *fake_sched(sp_policy policy) {
    sched *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->cfg = sched_config_default();
    s->cfg.policy = policy;
    s->running = calloc(8, sizeof *s->running);
    return s;
}

static void free_sched(sched *s) {
    free(s->running);
    free(s);
}

/* A decoding sequence: prompt of 10, n generated, its last token at last. */
static sched_request *decoding(int generated, double last, double tpot_ms) {
    sched_request *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    r->params.n_prompt = 10;
    r->n_tokens = 10 + generated;
    r->n_computed = r->n_tokens - 1;
    r->last_token_at = last;
    r->params.tpot_slo_ms = tpot_ms;
    return r;
}

Test(slo, prefill_fits_the_slack_of_the_closest_decode) {
    sched *s = fake_sched(SP_POLICY_SLO);
    s->meter.decode_step_s = 0.010;           /* 10 ms per decode-only step */
    s->meter.prefill_row_s = 0.0005;          /* 0.5 ms per prefill row */
    s->running[0] = decoding(5, 100.000, 50); /* deadline 100.050 */
    s->running[1] = decoding(9, 100.020, 40); /* deadline 100.060 */
    s->n_running = 2;
    /* now 100.010: the closest deadline is 40 ms away; a decode step takes 10, 30 ms are
     * left for 60 prefill rows */
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 2, 100.010), 60);
    cr_assert_eq(atomic_load(&s->meter.stats.slo_prefill_holds), 1);
    /* plenty of slack: the whole budget */
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 2, 99.0), 256);
    /* late even with a decode-only step: holding back gains nothing */
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 2, 100.045), 256);
    /* no decode in this step, or not measured yet: the budget */
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 0, 100.010), 256);
    s->meter.prefill_row_s = 0;
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 2, 100.010), 256);
    /* other policies never hold */
    s->meter.prefill_row_s = 0.0005;
    s->cfg.policy = SP_POLICY_FCFS;
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 2, 100.010), 256);
    /* the scheduler's target applies to requests without one */
    s->cfg.policy = SP_POLICY_SLO;
    s->running[0]->params.tpot_slo_ms = 0;
    s->running[1]->params.tpot_slo_ms = 0;
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 2, 100.010), 256, "no target at all");
    s->cfg.tpot_slo_ms = 30; /* deadlines 100.030 and 100.050 */
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 2, 100.010), 20);
    s->cfg.tpot_slo_ms = 21; /* 1 ms of room: 2 rows, but a tick keeps a block's worth */
    cr_assert_eq(sched__slo_prefill_budget(s, 256, 2, 100.010), s->cfg.block_size);
    free(s->running[0]);
    free(s->running[1]);
    free_sched(s);
}

static sched_request *waiting(int32_t n_tokens) {
    sched_request *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    r->n_tokens = n_tokens;
    return r;
}

Test(slo, the_head_is_seated_first_then_the_shortest) {
    sched *s = fake_sched(SP_POLICY_SLO);
    sched_request *r[4] = {waiting(500), waiting(90), waiting(30), waiting(200)};
    for (int i = 0; i < 4; i++) {
        r[i]->arrival_no = (uint64_t)i;
        sched__waiting_insert(s, r[i]);
    }
    cr_assert_eq(sched__slo_next(s, true), r[0], "the head, however long");
    cr_assert_eq(sched__slo_next(s, false), r[2], "then the shortest");
    sched__waiting_remove(s, r[2]);
    cr_assert_eq(sched__slo_next(s, false), r[1]);
    s->cfg.policy = SP_POLICY_FCFS;
    cr_assert_eq(sched__slo_next(s, false), r[0], "fcfs: the head always");
    for (int i = 0; i < 4; i++) free(r[i]);
    free_sched(s);
}

Test(slo, a_request_that_cannot_meet_its_ttft_target_is_refused) {
    sched *s = fake_sched(SP_POLICY_SLO);
    s->cfg.max_prefill_tokens = 256;
    sched_request *r = waiting(0);
    r->params.ttft_slo_ms = 1000;
    sched_request *reqs[1] = {r};
    /* not measured yet: accepted */
    cr_assert_eq(sched__slo_admission(s, reqs, 1, 100, 100000, 500), SP_OK);
    atomic_store(&s->meter.shared_prefill_row_s, 0.002); /* 500 prompt tokens/s */
    atomic_store(&s->meter.shared_decode_step_s, 0.010);
    /* 400 tokens: 0.8 s + 2 ticks x 10 ms + the first token's 10 ms = 0.83 s <= 1 s */
    cr_assert_eq(sched__slo_admission(s, reqs, 1, 0, 0, 400), SP_OK);
    /* 300 queued ahead + 400: 1.4 s */
    cr_assert_eq(sched__slo_admission(s, reqs, 1, 1, 300, 400), SP_ERR_FULL);
    cr_assert(strstr(sp_last_error(), "target of 1000 ms"), "%s", sp_last_error());
    cr_assert_eq(atomic_load(&s->meter.stats.slo_rejected), 1);
    /* few tokens, but 19 requests queued ahead at 10 admissions/s: 2 s before a slot */
    cr_assert_eq(sched__slo_admission(s, reqs, 1, 19, 100, 50), SP_OK, "admission rate not measured yet");
    atomic_store(&s->queue.shared_admit_rate, 10.0);
    cr_assert_eq(sched__slo_admission(s, reqs, 1, 19, 100, 50), SP_ERR_FULL);
    cr_assert(strstr(sp_last_error(), "20 requests"), "%s", sp_last_error());
    cr_assert_eq(sched__slo_admission(s, reqs, 1, 5, 100, 50), SP_OK, "0.6 s + 0.1 s of its prompt + 20 ms");
    atomic_store(&s->queue.shared_admit_rate, 0.0);
    /* no target: accepted; other policies: accepted */
    r->params.ttft_slo_ms = 0;
    cr_assert_eq(sched__slo_admission(s, reqs, 1, 1, 300, 400), SP_OK);
    r->params.ttft_slo_ms = 1000;
    s->cfg.policy = SP_POLICY_FCFS;
    cr_assert_eq(sched__slo_admission(s, reqs, 1, 1, 300, 400), SP_OK);
    free(r);
    free_sched(s);
}

/* The admission rate counts only windows in which requests waited throughout. */
Test(slo, the_admission_rate_is_measured_while_requests_wait) {
    sched *s = fake_sched(SP_POLICY_SLO);
    sched_request *r = waiting(10);
    sched__waiting_insert(s, r);
    sched__slo_observe_admissions(s, 2, 100.0);
    sched__slo_observe_admissions(s, 3, 100.5);
    sched__slo_observe_admissions(s, 3, 101.0); /* 8 in 1 s */
    cr_assert_float_eq(atomic_load(&s->queue.shared_admit_rate), 8.0, 1e-9);
    sched__waiting_remove(s, r); /* the queue ran empty: arrivals limited the next window */
    sched__slo_observe_admissions(s, 1, 101.5);
    sched__slo_observe_admissions(s, 0, 102.1);
    cr_assert_float_eq(atomic_load(&s->queue.shared_admit_rate), 8.0, 1e-9, "that window does not count");
    free(r);
    free_sched(s);
}

Test(slo, goodput_counts_requests_that_met_every_target) {
    sched *s = fake_sched(SP_POLICY_FCFS);
    sched_request *r = waiting(0);
    r->out.timings = (sched_timings){.arrival = 10, .first_token = 10.5, .finished = 12.5};
    r->out.n_tokens = 21;            /* 20 gaps over 2 s: 100 ms per token */
    sched__slo_finished(s, r, true); /* no target: not counted */
    cr_assert_eq(atomic_load(&s->meter.stats.slo_requests), 0);
    r->params.ttft_slo_ms = 600;
    r->params.tpot_slo_ms = 120;
    sched__slo_finished(s, r, true);
    cr_assert_eq(atomic_load(&s->meter.stats.slo_goodput), 1);
    r->params.tpot_slo_ms = 90; /* 100 ms per token misses it */
    sched__slo_finished(s, r, true);
    r->params.tpot_slo_ms = 0;
    r->params.ttft_slo_ms = 400; /* 500 ms to the first token misses it */
    sched__slo_finished(s, r, true);
    cr_assert_eq(atomic_load(&s->meter.stats.slo_requests), 3);
    cr_assert_eq(atomic_load(&s->meter.stats.slo_goodput), 1);
    r->params.ttft_slo_ms = 600; /* met, but a timeout or error ended it: never good */
    sched__slo_finished(s, r, false);
    cr_assert_eq(atomic_load(&s->meter.stats.slo_requests), 4);
    cr_assert_eq(atomic_load(&s->meter.stats.slo_goodput), 1);
    free(r);
    free_sched(s);
}

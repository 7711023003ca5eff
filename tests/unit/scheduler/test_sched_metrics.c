/* test_sched_metrics.c: the scheduler's histograms (scheduler/sched_metrics.c):
 * bucket placement on Prometheus' `le` (inclusive upper bounds), the +Inf bucket,
 * cumulative snapshots whose count equals the +Inf bucket, the sum, what a finished
 * request observes, and observes from many threads at once losing nothing. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "scheduler/sched_internal.h"

static sched_metrics *metrics_new(void) {
    sched_metrics *m = calloc(1, sizeof *m); /* zeroed memory is empty histograms */
    cr_assert_not_null(m);
    return m;
}

Test(sched_metrics, empty_histogram_is_all_zero) {
    sched_metrics *m = metrics_new();
    for (int id = 0; id < SCHED_HIST_COUNT; id++) {
        sched_hist_snapshot h;
        sched__metrics_snapshot(m, (sched_hist_id)id, &h);
        cr_assert_gt(h.n_bounds, 0);
        cr_assert_leq(h.n_bounds, SCHED_HIST_MAX_BOUNDS);
        for (int i = 1; i < h.n_bounds; i++) cr_assert_lt(h.bounds[i - 1], h.bounds[i], "bounds increase");
        for (int i = 0; i <= h.n_bounds; i++) cr_assert_eq(h.buckets[i], 0);
        cr_assert_eq(h.count, 0);
        cr_assert_eq(h.sum, 0.0);
    }
    free(m);
}

Test(sched_metrics, bounds_are_inclusive_and_buckets_cumulative) {
    sched_metrics *m = metrics_new();
    sched_hist_snapshot h;
    sched__metrics_snapshot(m, SCHED_HIST_TOKENS_PER_TICK, &h); /* 1, 2, 4, ... */
    cr_assert_eq(h.bounds[0], 1);
    cr_assert_eq(h.bounds[1], 2);
    cr_assert_eq(h.bounds[2], 4);
    sched__metrics_observe(m, SCHED_HIST_TOKENS_PER_TICK, 1); /* le="1" */
    sched__metrics_observe(m, SCHED_HIST_TOKENS_PER_TICK, 2); /* le="2" exactly on the bound */
    sched__metrics_observe(m, SCHED_HIST_TOKENS_PER_TICK, 3); /* le="4" */
    sched__metrics_observe(m, SCHED_HIST_TOKENS_PER_TICK, 0); /* below every bound: le="1" */
    sched__metrics_snapshot(m, SCHED_HIST_TOKENS_PER_TICK, &h);
    cr_assert_eq(h.buckets[0], 2);
    cr_assert_eq(h.buckets[1], 3);
    cr_assert_eq(h.buckets[2], 4);
    for (int i = 3; i <= h.n_bounds; i++) cr_assert_eq(h.buckets[i], 4, "cumulative: bucket %d", i);
    cr_assert_eq(h.count, 4);
    cr_assert_float_eq(h.sum, 6.0, 1e-12);
    free(m);
}

Test(sched_metrics, values_above_every_bound_land_in_inf_only) {
    sched_metrics *m = metrics_new();
    sched_hist_snapshot h;
    sched__metrics_snapshot(m, SCHED_HIST_TICK, &h);
    double top = h.bounds[h.n_bounds - 1];
    sched__metrics_observe(m, SCHED_HIST_TICK, top * 10);
    sched__metrics_observe(m, SCHED_HIST_TICK, INFINITY);
    sched__metrics_observe(m, SCHED_HIST_TICK, top); /* on the last bound: not +Inf only */
    sched__metrics_snapshot(m, SCHED_HIST_TICK, &h);
    cr_assert_eq(h.buckets[h.n_bounds - 1], 1);
    cr_assert_eq(h.buckets[h.n_bounds], 3);
    cr_assert_eq(h.count, 3);
    free(m);
}

Test(sched_metrics, nan_is_ignored_and_negative_counts_as_zero) {
    sched_metrics *m = metrics_new();
    sched__metrics_observe(m, SCHED_HIST_E2E, NAN);
    sched__metrics_observe(m, SCHED_HIST_E2E, -0.5);
    sched_hist_snapshot h;
    sched__metrics_snapshot(m, SCHED_HIST_E2E, &h);
    cr_assert_eq(h.count, 1);
    cr_assert_eq(h.buckets[0], 1);
    cr_assert_eq(h.sum, 0.0);
    free(m);
}

Test(sched_metrics, histograms_are_independent) {
    sched_metrics *m = metrics_new();
    sched__metrics_observe(m, SCHED_HIST_TTFT, 0.2);
    sched_hist_snapshot h;
    for (int id = 0; id < SCHED_HIST_COUNT; id++) {
        sched__metrics_snapshot(m, (sched_hist_id)id, &h);
        cr_assert_eq(h.count, id == SCHED_HIST_TTFT ? 1u : 0u, "histogram %d", id);
    }
    free(m);
}

Test(sched_metrics, finished_request_observes_ttft_e2e_prefill_decode) {
    sched_metrics *m = metrics_new();
    sched_timings t = {.arrival = 100.0,
                       .admitted = 100.5,
                       .first_token = 101.0,
                       .finished = 103.0,
                       .prefill_s = 0.25,
                       .decode_s = 1.5};
    sched__metrics_observe_finished(m, &t);
    struct {
        sched_hist_id id;
        double v;
    } want[] = {{SCHED_HIST_TTFT, 1.0}, {SCHED_HIST_E2E, 3.0}, {SCHED_HIST_PREFILL, 0.25}, {SCHED_HIST_DECODE, 1.5}};
    sched_hist_snapshot h;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        sched__metrics_snapshot(m, want[i].id, &h);
        cr_assert_eq(h.count, 1);
        cr_assert_float_eq(h.sum, want[i].v, 1e-9);
    }
    /* queue time is observed at admission (tick.c), not here */
    sched__metrics_snapshot(m, SCHED_HIST_QUEUE, &h);
    cr_assert_eq(h.count, 0);
    /* a request that finished without a token (none can today) observes no TTFT */
    sched_timings none = {.arrival = 1.0, .finished = 2.0};
    sched__metrics_observe_finished(m, &none);
    sched__metrics_snapshot(m, SCHED_HIST_TTFT, &h);
    cr_assert_eq(h.count, 1);
    sched__metrics_snapshot(m, SCHED_HIST_E2E, &h);
    cr_assert_eq(h.count, 2);
    free(m);
}

Test(sched_metrics, observe_is_lock_free) {
    sched_metrics *m = metrics_new();
    cr_assert(atomic_is_lock_free(&m->hist[0].sum));
    cr_assert(atomic_is_lock_free(&m->hist[0].buckets[0]));
    free(m);
}

enum { THREADS = 8, PER_THREAD = 100000 };

typedef struct observer {
    sched_metrics *m;
    int index;
} observer;

/* Each thread observes PER_THREAD values cycling over 0, 1, 2, 3 tokens. */
static void *observe_many(void *arg) {
    observer *o = arg;
    for (int i = 0; i < PER_THREAD; i++) sched__metrics_observe(o->m, SCHED_HIST_TOKENS_PER_TICK, (i + o->index) % 4);
    return NULL;
}

Test(sched_metrics, concurrent_observes_lose_nothing) {
    sched_metrics *m = metrics_new();
    pthread_t threads[THREADS];
    observer obs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        obs[t] = (observer){m, t};
        cr_assert_eq(pthread_create(&threads[t], NULL, observe_many, &obs[t]), 0);
    }
    /* snapshots taken while observing stay coherent: count is the +Inf bucket and
     * the buckets never decrease along the bounds */
    for (int k = 0; k < 1000; k++) {
        sched_hist_snapshot h;
        sched__metrics_snapshot(m, SCHED_HIST_TOKENS_PER_TICK, &h);
        cr_assert_eq(h.count, h.buckets[h.n_bounds]);
        for (int i = 1; i <= h.n_bounds; i++) cr_assert_geq(h.buckets[i], h.buckets[i - 1]);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    sched_hist_snapshot h;
    sched__metrics_snapshot(m, SCHED_HIST_TOKENS_PER_TICK, &h);
    uint64_t total = (uint64_t)THREADS * PER_THREAD;
    cr_assert_eq(h.count, total);
    /* values 0, 1, 2, 3 equally often: 0 and 1 in le="1", 2 in le="2", 3 in le="4" */
    cr_assert_eq(h.buckets[0], total / 2);
    cr_assert_eq(h.buckets[1], total / 4 * 3);
    cr_assert_eq(h.buckets[2], total);
    cr_assert_float_eq(h.sum, 1.5 * (double)total, 1e-6);
    free(m);
}

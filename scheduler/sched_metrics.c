/* sched_metrics.c: the scheduler's latency and batch histograms (sched_hist_id):
 * fixed buckets per histogram, observed lock-free from the scheduler thread and read
 * as consistent-enough snapshots by /metrics on an HTTP thread.
 *
 * What is observed where (each exactly once):
 *   queue time            tick.c, when a request is first admitted (now - arrival)
 *   inter-token latency   end_tick.c, every sampled token after a sequence's first
 *                         (time since that sequence's previous token)
 *   tick duration, tokens per tick
 *                         tick.c, every tick that ran a device step (plan, step and
 *                         sampling; the step's tokens, prefill and decode rows)
 *   TTFT, end-to-end, prefill time, decode time
 *                         end_tick.c, once per request that finished with STOP or
 *                         LENGTH, from its sched_timings (cancelled and failed requests
 *                         are not observed: their counters say how many there were)
 *
 * DESIGN (threads). A histogram is an array of atomic bucket counters plus an atomic
 * sum: observe is a relaxed fetch_add on one bucket and a compare-and-swap loop on
 * the sum, so the scheduler thread never takes a lock for it and any thread may
 * observe. A snapshot reads the buckets one by one; its count is the sum of the
 * buckets it read (so _count always equals the +Inf bucket), and its sum may lag or
 * lead that count by the observations in flight.
 */
#include <math.h>
#include <string.h>

#include "common/assert.h"
#include "scheduler/sched_internal.h"

/* Upper bounds in seconds (tokens for SCHED_HIST_TOKENS_PER_TICK), increasing; the
 * +Inf bucket is implied. */
static const double BOUNDS_TTFT[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                     0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
static const double BOUNDS_ITL[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                    0.3,   0.4,    0.5,   0.75, 1.0,   2.5,  5.0,   7.5, 10.0};
static const double BOUNDS_REQUEST[] = {0.01, 0.025, 0.05, 0.1,  0.25, 0.5,  1.0,   2.5,   5.0,   10.0,
                                        15.0, 20.0,  30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};
static const double BOUNDS_TICK[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0};
static const double BOUNDS_TOKENS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};

#define BOUNDS(a) \
    { a, (int)(sizeof a / sizeof a[0]) }
static const struct {
    const double *bounds;
    int n;
} HIST_BOUNDS[SCHED_HIST_COUNT] = {
    [SCHED_HIST_TTFT] = BOUNDS(BOUNDS_TTFT),       [SCHED_HIST_INTER_TOKEN] = BOUNDS(BOUNDS_ITL),
    [SCHED_HIST_E2E] = BOUNDS(BOUNDS_REQUEST),     [SCHED_HIST_QUEUE] = BOUNDS(BOUNDS_REQUEST),
    [SCHED_HIST_PREFILL] = BOUNDS(BOUNDS_REQUEST), [SCHED_HIST_DECODE] = BOUNDS(BOUNDS_REQUEST),
    [SCHED_HIST_TICK] = BOUNDS(BOUNDS_TICK),       [SCHED_HIST_TOKENS_PER_TICK] = BOUNDS(BOUNDS_TOKENS),
};
#undef BOUNDS

_Static_assert(sizeof BOUNDS_REQUEST / sizeof BOUNDS_REQUEST[0] <= SCHED_HIST_MAX_BOUNDS, "too many buckets");
_Static_assert(sizeof BOUNDS_TTFT / sizeof BOUNDS_TTFT[0] <= SCHED_HIST_MAX_BOUNDS, "too many buckets");
_Static_assert(sizeof BOUNDS_ITL / sizeof BOUNDS_ITL[0] <= SCHED_HIST_MAX_BOUNDS, "too many buckets");
_Static_assert(sizeof BOUNDS_TICK / sizeof BOUNDS_TICK[0] <= SCHED_HIST_MAX_BOUNDS, "too many buckets");
_Static_assert(sizeof BOUNDS_TOKENS / sizeof BOUNDS_TOKENS[0] <= SCHED_HIST_MAX_BOUNDS, "too many buckets");

void sched__metrics_observe(sched_metrics *m, sched_hist_id id, double v) {
    SP_ASSERT(id >= 0 && id < SCHED_HIST_COUNT);
    if (isnan(v)) return;
    if (v < 0) v = 0; /* a clock step cannot make a duration negative */
    const double *bounds = HIST_BOUNDS[id].bounds;
    int n = HIST_BOUNDS[id].n, i = 0;
    while (i < n && v > bounds[i]) i++; /* Prometheus' le: v <= bound */
    sched_histogram *h = &m->hist[id];
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    double sum = atomic_load_explicit(&h->sum, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&h->sum, &sum, sum + v, memory_order_relaxed, memory_order_relaxed)) {
    }
}

void sched__metrics_observe_finished(sched_metrics *m, const sched_timings *t) {
    if (t->first_token > 0) sched__metrics_observe(m, SCHED_HIST_TTFT, t->first_token - t->arrival);
    sched__metrics_observe(m, SCHED_HIST_E2E, t->finished - t->arrival);
    sched__metrics_observe(m, SCHED_HIST_PREFILL, t->prefill_s);
    sched__metrics_observe(m, SCHED_HIST_DECODE, t->decode_s);
}

void sched__metrics_snapshot(const sched_metrics *m, sched_hist_id id, sched_hist_snapshot *out) {
    SP_ASSERT(id >= 0 && id < SCHED_HIST_COUNT);
    const sched_histogram *h = &m->hist[id];
    memset(out, 0, sizeof *out);
    out->bounds = HIST_BOUNDS[id].bounds;
    out->n_bounds = HIST_BOUNDS[id].n;
    uint64_t total = 0;
    for (int i = 0; i <= out->n_bounds; i++) {
        total += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        out->buckets[i] = total;
    }
    out->count = total;
    out->sum = atomic_load_explicit(&h->sum, memory_order_relaxed);
}

void sched_get_histogram(const sched *s, sched_hist_id id, sched_hist_snapshot *out) {
    sched__metrics_snapshot(&s->meter.hist, id, out);
}

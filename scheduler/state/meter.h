/* state/meter.h: what the scheduler measures (struct sched's `meter`): the operational
 * counters behind sched_stats, the latency histograms (sched_metrics.c), the measured step
 * costs the tiers' cost model and the SLO policy read, the heartbeat and the device fault.
 *
 * DESIGN (threads). Written by the scheduler thread (and sched_submit's thread for the
 * submission counters), read by any thread: everything another thread reads is an atomic
 * (relaxed, each value on its own), except the device fault's message, written once
 * before its flag (release) and read after it (acquire). prefill_row_s and decode_step_s
 * are the scheduler thread's own; their shared_ copies are for sched_submit.
 */
#ifndef SP_SCHED_STATE_METER_H
#define SP_SCHED_STATE_METER_H

#include <stdatomic.h>
#include <stdint.h>

#include "scheduler/sched.h"

/* One histogram's buckets, not cumulative: buckets[i] counts observations in
 * (bounds[i-1], bounds[i]], buckets[n_bounds] those above every bound. Zeroed memory
 * is an empty histogram. Any thread observes (atomics only), any thread reads. */
typedef struct sched_histogram {
    _Atomic uint64_t buckets[SCHED_HIST_MAX_BOUNDS + 1];
    _Atomic double sum;
} sched_histogram;

typedef struct sched_metrics {
    sched_histogram hist[SCHED_HIST_COUNT];
} sched_metrics;

/* Adds v to histogram id (NaN ignored, negatives as 0). Lock-free; any thread. */
void sched__metrics_observe(sched_metrics *m, sched_hist_id id, double v);
/* TTFT, end-to-end, prefill and decode time of a request that finished. */
void sched__metrics_observe_finished(sched_metrics *m, const sched_timings *t);
/* Cumulative buckets, count and sum of histogram id. Any thread. */
void sched__metrics_snapshot(const sched_metrics *m, sched_hist_id id, sched_hist_snapshot *out);

/* Operational counters (sched_stats); relaxed atomics, each value on its own. */
typedef struct sched_counters {
    _Atomic int64_t submitted, rejected_queue_requests, rejected_queue_tokens, rejected_shutdown, rejected_invalid,
        finished, cancelled, errors, timeouts, preemptions, ticks, prompt_tokens, generated_tokens, prefix_query_tokens,
        prefix_hit_tokens, tier_reloaded_tokens, swap_resumes, slo_requests, slo_goodput, slo_rejected,
        slo_prefill_holds;
    _Atomic int32_t running;
    _Atomic int32_t swapped;
} sched_counters;

typedef struct sched_meter {
    sched_counters stats;
    sched_metrics hist;   /* histograms, observed lock-free (sched_metrics.c) */
    double prefill_row_s; /* seconds one row of a prefill step took (EWMA; 0: not measured) */
    double decode_step_s; /* seconds a decode-only step took (EWMA; 0: not measured) */
    /* the costs above for sched_submit's TTFT estimate (policy slo), on other threads */
    _Atomic double shared_prefill_row_s, shared_decode_step_s;
    _Atomic int64_t heartbeat_ns; /* clock.c */
    /* a step failed with SP_ERR_DEVICE: the message is written once, before the flag
     * (release), by the scheduler thread; readers check the flag (acquire) first */
    char device_fault_msg[256];
    _Atomic bool device_fault;
} sched_meter;

#endif

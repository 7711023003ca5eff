/* state/queue.h: the scheduler's queue and admission state (struct sched's `queue`): the
 * bounded multi-producer queue, the waiting list behind it, the queue's bounds and the
 * admission rate. queue.c and submit.c have the design; slo.c measures the rate.
 *
 * DESIGN (threads). Three owners, named at each field: under `lock` (sched_submit on any
 * thread, the scheduler thread taking the queue, sched__wake on any thread); the scheduler
 * thread alone (the waiting list, the admission window); atomics that the scheduler thread
 * writes and sched_submit reads without the lock (turns, bounds, the shared rate).
 */
#ifndef SP_SCHED_STATE_QUEUE_H
#define SP_SCHED_STATE_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "scheduler/sched.h"

typedef struct sched_queue_state {
    /* the queue: under lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    sched_request *head, *tail;
    uint64_t next_arrival_no;
    bool shutting_down; /* sched_submit refuses */
    bool stopping;      /* the thread should return */
    bool wake_pending;
    /* the latest turn admitted: written by the scheduler thread at admission, read by
     * sched_submit for the turns of new sequences */
    _Atomic int64_t turn_admitted;
    /* the bounds: changed under lock by sched_submit, lowered by the scheduler thread
     * (atomically, without the lock) when a request is admitted or ends while waiting */
    _Atomic int32_t queued;
    _Atomic int64_t queued_tokens;

    /* the scheduler thread: the waiting list, ordered by sched__policy_before */
    sched_request *wait_head, *wait_tail;
    /* admissions per second while requests waited (slo.c: a window of about a second
     * counts only when the waiting list never ran empty in it); the scheduler thread */
    double admit_window_start;
    int32_t admit_window_count;
    bool admit_window_saturated;
    double admit_rate;
    /* admit_rate for sched_submit's TTFT estimate (policy slo), on other threads */
    _Atomic double shared_admit_rate;
} sched_queue_state;

#endif

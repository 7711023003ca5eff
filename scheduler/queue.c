/* queue.c: the bounded multi-producer queue in front of the scheduler thread, and
 * the scheduler thread's waiting list behind it.
 *
 * Bounds: `queued` counts requests accepted but not yet admitted to run, and
 * `queued_tokens` their prompt tokens. The scheduler thread takes the whole queue under
 * the lock at once (libuv's uv__work_done) onto its waiting list, but the counters drop
 * only when a request is admitted (or ends while still waiting), so the bounds are real
 * back-pressure however fast the thread drains the list. A preempted sequence goes back
 * to the waiting list without counting again: it was admitted once.
 *
 * sched_submit (submit.c) checks the bounds and links requests into the queue; here the
 * scheduler thread takes them, keeps its waiting list in policy order and lowers the
 * bounds, and any thread may wake it.
 *
 * DESIGN (threads). Any thread calls sched__wake; it and sched_submit hold s->queue.lock while
 * they touch the queue. The scheduler thread takes the queue under the same lock; the
 * waiting list is its own.
 */
#include <errno.h>

#include "common/assert.h"
#include "common/thread.h"
#include "scheduler/sched_internal.h"

void sched__wake(sched *s) {
    pthread_mutex_lock(&s->queue.lock);
    s->queue.wake_pending = true;
    pthread_cond_signal(&s->queue.wake);
    pthread_mutex_unlock(&s->queue.lock);
}

bool sched__queue_take(sched *s, bool idle, double timeout_s) {
    pthread_mutex_lock(&s->queue.lock);
    if (idle && !s->queue.head && !s->queue.stopping && !s->queue.wake_pending) {
        int rc = sp_cond_wait_for(&s->queue.wake, &s->queue.lock, timeout_s);
        SP_ASSERT(rc == 0 || rc == ETIMEDOUT);
    }
    s->queue.wake_pending = false;
    sched_request *taken = s->queue.head;
    s->queue.head = s->queue.tail = NULL;
    bool stopping = s->queue.stopping;
    pthread_mutex_unlock(&s->queue.lock);

    while (taken) {
        sched_request *next = taken->next;
        taken->state = SCHED_SEQ_WAITING;
        sched__waiting_insert(s, taken);
        taken = next;
    }
    return stopping;
}

void sched__waiting_insert(sched *s, sched_request *r) {
    /* from the tail: new arrivals usually belong there */
    sched_request *after = s->queue.wait_tail;
    while (after && sched__policy_before(s->cfg.policy, r, after)) after = after->prev;
    r->prev = after;
    r->next = after ? after->next : s->queue.wait_head;
    if (r->next)
        r->next->prev = r;
    else
        s->queue.wait_tail = r;
    if (after)
        after->next = r;
    else
        s->queue.wait_head = r;
}

void sched__waiting_remove(sched *s, sched_request *r) {
    if (r->prev)
        r->prev->next = r->next;
    else
        s->queue.wait_head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        s->queue.wait_tail = r->prev;
    r->next = r->prev = NULL;
}

void sched__queue_uncount(sched *s, sched_request *r) {
    if (!r->in_queue_count) return;
    r->in_queue_count = false;
    atomic_fetch_sub_explicit(&s->queue.queued, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&s->queue.queued_tokens, r->params.n_prompt, memory_order_relaxed);
}

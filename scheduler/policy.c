/* policy.c: the scheduling policies behind one small interface: one order over
 * requests. Admission takes the waiting list in that order; preemption picks the
 * running sequence that comes last in it.
 *   fcfs:     submission order (the oldest first; the youngest is preempted first)
 *   priority: lower `priority` first, then submission order (vLLM's rule); the
 *             victim is the lowest priority, youngest among equals.
 * Within either, requests share fairly by turns: a sequence's turn is the latest turn
 * admitted when it was submitted, plus its place among the sequences its HTTP request
 * submitted together (its prompts times n), and lower turns go first. So one request of
 * a thousand sequences cannot hold every batch slot while a one-sequence request sent
 * after it waits (that one's turn comes right after the turn being served), yet its own
 * later sequences are never starved: turns only grow as they are admitted, so new
 * arrivals queue behind the turns already handed out. The victim is the latest turn.
 * Pure functions of the requests' immutable fields (arrival_no and turn are set before
 * the request reaches the scheduler thread).
 */
#include "common/assert.h"
#include "scheduler/sched_internal.h"

bool sched__policy_before(sched_policy_kind kind, const sched_request *a, const sched_request *b) {
    if (kind == SCHED_POLICY_PRIORITY && a->params.priority != b->params.priority)
        return a->params.priority < b->params.priority;
    if (a->turn != b->turn) return a->turn < b->turn;
    return a->arrival_no < b->arrival_no;
}

int sched__policy_victim(sched_policy_kind kind, sched_request *const *running, int n) {
    SP_ASSERT(n >= 1);
    int victim = 0;
    for (int i = 1; i < n; i++)
        if (sched__policy_before(kind, running[victim], running[i])) victim = i;
    return victim;
}

/* policy.c: the scheduling policies behind one small interface: one order over
 * requests. Admission takes the waiting list in that order; preemption picks the
 * running sequence that comes last in it.
 *   fcfs:     submission order (the oldest first; the youngest is preempted first)
 *   priority: lower `priority` first, then submission order (vLLM's rule); the
 *             victim is the lowest priority, youngest among equals.
 * Pure functions of the requests' immutable fields (arrival_no is set before the
 * request reaches the scheduler thread).
 */
#include "common/assert.h"
#include "scheduler/sched_internal.h"

bool sched__policy_before(sched_policy_kind kind, const sched_request *a, const sched_request *b) {
    if (kind == SCHED_POLICY_PRIORITY && a->params.priority != b->params.priority)
        return a->params.priority < b->params.priority;
    return a->arrival_no < b->arrival_no;
}

int sched__policy_victim(sched_policy_kind kind, sched_request *const *running, int n) {
    SP_ASSERT(n >= 1);
    int victim = 0;
    for (int i = 1; i < n; i++)
        if (sched__policy_before(kind, running[victim], running[i])) victim = i;
    return victim;
}

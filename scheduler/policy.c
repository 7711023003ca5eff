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
 * arrivals queue behind the turns already handed out.
 * The preemption victim comes from the class that goes last (under priority, the highest
 * value) and, within it, from the submission (one HTTP request) with the most running
 * sequences: its latest turn. So the request that fills the KV pool gives back blocks,
 * not a one-sequence request that arrived after it (whose turn may be as late).
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

/* Running sequences of r's submission. O(n): victims are chosen rarely (a preemption
 * costs a recomputation anyway), and n is at most max_batch_size. */
static int group_size(sched_request *const *running, int n, const sched_request *r) {
    int count = 0;
    for (int i = 0; i < n; i++) count += running[i]->group == r->group;
    return count;
}

int sched__policy_victim(sched_policy_kind kind, sched_request *const *running, int n) {
    SP_ASSERT(n >= 1);
    int victim = -1, victim_group = 0;
    for (int i = 0; i < n; i++) {
        const sched_request *r = running[i];
        if (victim >= 0) {
            const sched_request *v = running[victim];
            /* a class that goes earlier is never the victim's */
            if (kind == SCHED_POLICY_PRIORITY && r->params.priority != v->params.priority) {
                if (r->params.priority < v->params.priority) continue;
            } else {
                int size = group_size(running, n, r);
                if (size < victim_group) continue;
                if (size == victim_group && !sched__policy_before(kind, v, r)) continue;
            }
        }
        victim = i;
        victim_group = group_size(running, n, r);
    }
    return victim;
}

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
 * not a one-sequence request that arrived after it (whose turn may be as late). Among
 * the sequences of the submissions of that size (one-sequence requests: all of them) the
 * one with the fewest generated tokens goes (the least work to redo or reload; its
 * computed blocks stay in the prefix cache), then the latest turn. A sequence that came
 * back from a preemption less than SCHED_RESUME_IMMUNITY_TICKS ago is not chosen while
 * another of its class can be, so no sequence thrashes in and out of the pool.
 * Swapped sequences (preempted, waiting to come back) are admitted before any other of
 * their class, the fewest tokens (blocks) first: they were admitted once already and
 * their blocks are likely still in the prefix cache or its tiers.
 * Pure functions of the requests' fields (arrival_no and turn are set before the request
 * reaches the scheduler thread; swapped, n_tokens and resumed_tick are the scheduler
 * thread's, which calls these).
 */
#include "common/assert.h"
#include "scheduler/sched_internal.h"

bool sched__policy_before(sp_policy kind, const sched_request *a, const sched_request *b) {
    if (kind == SP_POLICY_PRIORITY && a->params.priority != b->params.priority)
        return a->params.priority < b->params.priority;
    if (a->swapped != b->swapped) return a->swapped;
    if (a->swapped && a->n_tokens != b->n_tokens) return a->n_tokens < b->n_tokens;
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

static bool immune(const sched_request *r, uint64_t tick) {
    return r->resumed_tick > 0 && tick - r->resumed_tick < SCHED_RESUME_IMMUNITY_TICKS;
}

static int32_t generated(const sched_request *r) {
    return r->n_tokens - r->params.n_prompt;
}

int sched__policy_victim(sp_policy kind, sched_request *const *running, int n, uint64_t tick) {
    SP_ASSERT(n >= 1);
    /* the class that goes last (priority: the highest value); only it gives up a sequence */
    int last_class = running[0]->params.priority;
    for (int i = 1; i < n; i++)
        if (running[i]->params.priority > last_class) last_class = running[i]->params.priority;
    bool prio = kind == SP_POLICY_PRIORITY;
    bool any_open = false; /* a sequence of that class outside its immunity window */
    for (int i = 0; i < n && !any_open; i++)
        any_open = (!prio || running[i]->params.priority == last_class) && !immune(running[i], tick);
    int victim = -1, victim_group = 0;
    for (int i = 0; i < n; i++) {
        const sched_request *r = running[i];
        if (prio && r->params.priority != last_class) continue;
        if (any_open && immune(r, tick)) continue;
        int size = group_size(running, n, r);
        if (victim >= 0) {
            const sched_request *v = running[victim];
            if (size < victim_group) continue;
            if (size == victim_group && generated(r) > generated(v)) continue;
            if (size == victim_group && generated(r) == generated(v) && !sched__policy_before(kind, v, r)) continue;
        }
        victim = i;
        victim_group = size;
    }
    return victim;
}

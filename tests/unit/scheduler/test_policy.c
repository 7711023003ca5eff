/* test_policy.c: the fcfs and priority policies: admission order (the waiting list)
 * and the choice of the preemption victim. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "scheduler/sched_internal.h"

static sched_request *fake(uint64_t arrival, int priority) {
    sched_request *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    r->arrival_no = arrival;
    r->params.priority = priority;
    return r;
}

/* Inserts reqs in the given order; checks the waiting list's arrival numbers. */
static void check_waiting_order(sp_policy kind, sched_request **reqs, int n, const uint64_t *want) {
    sched *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->cfg.policy = kind;
    for (int i = 0; i < n; i++) sched__waiting_insert(s, reqs[i]);
    int i = 0;
    for (sched_request *r = s->queue.wait_head; r; r = r->next, i++) {
        cr_assert_lt(i, n);
        cr_assert_eq(r->arrival_no, want[i], "position %d: arrival %llu, want %llu", i,
                     (unsigned long long)r->arrival_no, (unsigned long long)want[i]);
        if (r->next) cr_assert_eq(r->next->prev, r);
    }
    cr_assert_eq(i, n);
    cr_assert_eq(s->queue.wait_tail->arrival_no, want[n - 1]);
    /* remove the middle one and the head */
    sched__waiting_remove(s, s->queue.wait_head->next);
    sched__waiting_remove(s, s->queue.wait_head);
    cr_assert_eq(s->queue.wait_head->arrival_no, want[2]);
    cr_assert_null(s->queue.wait_head->prev);
    free(s);
}

Test(policy, fcfs_admits_in_arrival_order_and_preempted_go_first) {
    sched_request *r[5] = {fake(3, 0), fake(4, 9), fake(5, -9), fake(1, 0), fake(2, 0)};
    /* 3, 4, 5 arrive; then 1 and 2 come back after preemption: they are older */
    uint64_t want[5] = {1, 2, 3, 4, 5};
    check_waiting_order(SP_POLICY_FCFS, r, 5, want);
    for (int i = 0; i < 5; i++) free(r[i]);
}

Test(policy, priority_admits_lower_values_first_then_arrival) {
    sched_request *r[5] = {fake(1, 5), fake(2, 0), fake(3, 5), fake(4, -1), fake(5, 0)};
    uint64_t want[5] = {4, 2, 5, 1, 3};
    check_waiting_order(SP_POLICY_PRIORITY, r, 5, want);
    for (int i = 0; i < 5; i++) free(r[i]);
}

Test(policy, victim_is_the_youngest_under_fcfs) {
    sched_request *r[4] = {fake(7, 0), fake(9, -5), fake(2, 10), fake(8, 0)};
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 4, 100), 1);
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 1, 100), 0);
    for (int i = 0; i < 4; i++) free(r[i]);
}

Test(policy, victim_is_the_lowest_priority_then_youngest) {
    sched_request *r[4] = {fake(7, 3), fake(9, -5), fake(2, 3), fake(8, 1)};
    cr_assert_eq(sched__policy_victim(SP_POLICY_PRIORITY, r, 4, 100), 0, "priority 3, arrival 7 beats arrival 2");
    cr_assert(sched__policy_before(SP_POLICY_PRIORITY, r[1], r[0]));
    cr_assert(sched__policy_before(SP_POLICY_FCFS, r[0], r[1]));
    for (int i = 0; i < 4; i++) free(r[i]);
}

/* One request of four sequences (arrivals 1..4, turns 0..3) and then two requests of one
 * sequence each (5 and 6) submitted while turn 0 is served: they go second and third,
 * and the big request's last turn is the one preempted. */
static sched_request *fake_in_unit(uint64_t arrival, int priority, int64_t turn) {
    sched_request *r = fake(arrival, priority);
    r->turn = turn;
    return r;
}

Test(policy, requests_take_turns_under_fcfs) {
    sched_request *r[6] = {fake_in_unit(1, 0, 0), fake_in_unit(2, 0, 1), fake_in_unit(3, 0, 2),
                           fake_in_unit(4, 0, 3), fake_in_unit(5, 0, 0), fake_in_unit(6, 0, 0)};
    uint64_t want[6] = {1, 5, 6, 2, 3, 4};
    check_waiting_order(SP_POLICY_FCFS, r, 6, want);
    sched_request *running[3] = {r[0], r[3], r[4]};
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, running, 3, 100), 1, "the big request's last sequence");
    for (int i = 0; i < 6; i++) free(r[i]);
}

Test(policy, requests_take_turns_within_a_priority) {
    /* a lower priority value still goes first, whatever its sequence's index */
    sched_request *r[5] = {fake_in_unit(1, 5, 0), fake_in_unit(2, 5, 1), fake_in_unit(3, 0, 2), fake_in_unit(4, 5, 0),
                           fake_in_unit(5, 0, 0)};
    uint64_t want[5] = {5, 3, 1, 4, 2};
    check_waiting_order(SP_POLICY_PRIORITY, r, 5, want);
    for (int i = 0; i < 5; i++) free(r[i]);
}

/* The KV pool fills while a request of three running sequences (submission 1, turns 3..5)
 * and a one-sequence request that came after it (submission 4, whose turn, 5, ties with
 * the big one's last) run: the big request gives back a sequence, its latest. Under the
 * priority policy the class that goes last still comes first. */
Test(policy, victim_comes_from_the_submission_with_most_running_sequences) {
    sched_request *r[4] = {fake_in_unit(1, 0, 3), fake_in_unit(2, 0, 4), fake_in_unit(3, 0, 5), fake_in_unit(4, 0, 5)};
    for (int i = 0; i < 3; i++) r[i]->group = 1;
    r[3]->group = 4;
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 4, 100), 2,
                 "the big request's latest turn, not the small one");
    cr_assert_eq(sched__policy_victim(SP_POLICY_PRIORITY, r, 4, 100), 2);
    r[3]->params.priority = 1; /* the small one is of a class that goes last */
    cr_assert_eq(sched__policy_victim(SP_POLICY_PRIORITY, r, 4, 100), 3);
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 4, 100), 2, "fcfs ignores priority");
    for (int i = 0; i < 4; i++) free(r[i]);
}

/* Within a submission the sequence with the fewest generated tokens is the victim; one
 * that came back from a preemption within SCHED_RESUME_IMMUNITY_TICKS is passed over
 * while another can go. */
Test(policy, victim_has_fewest_generated_tokens_and_resumed_ones_are_immune) {
    sched_request *r[3] = {fake(1, 0), fake(2, 0), fake(3, 0)};
    int32_t generated[3] = {5, 40, 12};
    for (int i = 0; i < 3; i++) {
        r[i]->params.n_prompt = 10;
        r[i]->n_tokens = 10 + generated[i];
    }
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 3, 100), 0, "5 generated tokens, the fewest");
    r[0]->resumed_tick = 90; /* came back 10 ticks ago */
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 3, 100), 2, "the next fewest while 0 is immune");
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 3, 90 + SCHED_RESUME_IMMUNITY_TICKS), 0, "immunity ends");
    for (int i = 1; i < 3; i++) r[i]->resumed_tick = 95;
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 3, 100), 0, "all immune: the rule alone decides");
    for (int i = 0; i < 3; i++) free(r[i]);
}

/* Swapped sequences come back before new arrivals, the fewest tokens first. */
Test(policy, swapped_sequences_are_admitted_first_fewest_tokens_first) {
    sched_request *r[5] = {fake(3, 0), fake(4, 0), fake(5, 0), fake(6, 0), fake(7, 0)};
    r[3]->swapped = true; /* arrival 6, 300 tokens */
    r[3]->n_tokens = 300;
    r[4]->swapped = true; /* arrival 7, 40 tokens */
    r[4]->n_tokens = 40;
    uint64_t want[5] = {7, 6, 3, 4, 5};
    check_waiting_order(SP_POLICY_FCFS, r, 5, want);
    check_waiting_order(SP_POLICY_PRIORITY, r, 5, want);
    /* under priority, only within a class: a waiting request of a class that goes
     * earlier is still admitted first */
    r[1]->params.priority = -1;
    uint64_t want_prio[5] = {4, 7, 6, 3, 5};
    check_waiting_order(SP_POLICY_PRIORITY, r, 5, want_prio);
    for (int i = 0; i < 5; i++) free(r[i]);
}

/* Under priority, immunity never shields a sequence of the class that goes last at the
 * expense of a class that goes earlier. */
Test(policy, immunity_stays_within_the_priority_class) {
    sched_request *r[3] = {fake(1, 0), fake(2, 0), fake(3, 5)};
    r[2]->resumed_tick = 95; /* the low-priority one just came back */
    cr_assert_eq(sched__policy_victim(SP_POLICY_PRIORITY, r, 3, 100), 2, "its class goes last, immune or not");
    cr_assert_eq(sched__policy_victim(SP_POLICY_FCFS, r, 3, 100), 1, "fcfs: immunity passes it over");
    for (int i = 0; i < 3; i++) free(r[i]);
}

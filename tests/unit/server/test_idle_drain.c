/* test_idle_drain.c: which connection a full table closes (server/http/idle_drain.c): none
 * while within capacity, the one idle the longest first (kept alive, or never used past
 * the grace), never one with a request in progress (nor one found with bytes waiting); a
 * closed one is counted once; the capacity fits the open file limit. The sockets
 * themselves: test_connection_limits.py.
 */
#include <criterion/criterion.h>

#include "server/http/idle_drain.c"

enum { N = 6 };

static srv_idle_table t;
static srv_idle_link c[N];

/* capacity connections, opened a second apart from t = 0 (all past the grace by t = 10) */
static void open_all(int capacity, int n) {
    srv__idle_init(&t, capacity);
    for (int i = 0; i < n; i++) srv__idle_open(&t, &c[i], (double)i);
}

Test(idle_drain, closes_nothing_within_capacity) {
    open_all(N, N);
    cr_expect_null(srv__idle_pick(&t, 100.0));
    cr_expect_eq(t.open, N);
}

Test(idle_drain, closes_the_oldest_idle_first) {
    open_all(4, 5);
    srv__idle_kept(&t, &c[3], 20.0); /* answered at 20 and 21: idle since then */
    srv__idle_kept(&t, &c[1], 21.0);
    srv__idle_busy(&t, &c[0]); /* requests in progress */
    srv__idle_busy(&t, &c[2]);
    /* idle: c[4] fresh since 4, c[3] kept since 20, c[1] kept since 21 */
    cr_expect_eq(srv__idle_pick(&t, 30.0), &c[4]);
    cr_expect_eq(t.open, 4);
    cr_expect_null(srv__idle_pick(&t, 30.0), "within capacity again");
    srv__idle_open(&t, &c[5], 30.0);
    cr_expect_eq(srv__idle_pick(&t, 30.0), &c[3]);
    srv__idle_open(&t, &c[4], 31.0);
    cr_expect_eq(srv__idle_pick(&t, 31.0), &c[1]);
}

Test(idle_drain, never_closes_a_connection_with_a_request_in_progress) {
    open_all(3, 4);
    for (int i = 0; i < 4; i++) srv__idle_busy(&t, &c[i]);
    cr_expect_null(srv__idle_pick(&t, 100.0));
    srv__idle_kept(&t, &c[2], 50.0); /* its answer is out: idle now */
    cr_expect_eq(srv__idle_pick(&t, 100.0), &c[2]);
    cr_expect_eq(c[2].state, SRV_IDLE_CLOSING);
}

Test(idle_drain, a_new_connection_is_idle_only_after_the_grace) {
    open_all(1, 2); /* opened at 0 and 1 */
    cr_expect_null(srv__idle_pick(&t, 0.5 * t.grace_s));
    cr_expect_eq(srv__idle_pick(&t, 1.0 + t.grace_s), &c[0]);
}

Test(idle_drain, a_kept_connection_is_idle_at_once) {
    open_all(1, 2);
    srv__idle_busy(&t, &c[0]);
    srv__idle_kept(&t, &c[0], 1.0);
    cr_expect_eq(srv__idle_pick(&t, 1.0), &c[0], "c[1] is in its grace; c[0] was answered");
}

Test(idle_drain, a_closing_connection_is_counted_once_and_stays_closing) {
    open_all(2, 3);
    srv_idle_link *picked = srv__idle_pick(&t, 100.0);
    cr_assert_eq(picked, &c[0]);
    srv__idle_kept(&t, picked, 101.0); /* its last answer's notice, after the shutdown */
    srv__idle_busy(&t, picked);
    cr_expect_eq(picked->state, SRV_IDLE_CLOSING);
    srv__idle_close(&t, picked);
    cr_expect_eq(t.open, 2);
    srv__idle_close(&t, &c[1]);
    cr_expect_eq(t.open, 1);
    cr_expect_null(srv__idle_pick(&t, 200.0));
}

Test(idle_drain, a_refused_connection_leaves_the_count) {
    open_all(2, 3);
    for (int i = 0; i < 3; i++) srv__idle_busy(&t, &c[i]);
    cr_expect_null(srv__idle_pick(&t, 100.0));
    srv__idle_refuse(&t, &c[2]);
    cr_expect_eq(t.open, 2);
    srv__idle_close(&t, &c[2]);
    cr_expect_eq(t.open, 2);
}

Test(idle_drain, a_connection_closed_by_its_client_leaves_the_lists) {
    open_all(2, 4);
    srv__idle_close(&t, &c[0]);
    srv__idle_close(&t, &c[1]);
    cr_expect_eq(t.open, 2);
    cr_expect_null(srv__idle_pick(&t, 100.0));
    srv__idle_open(&t, &c[0], 50.0);
    cr_expect_eq(srv__idle_pick(&t, 100.0), &c[2]);
}

Test(idle_drain, the_capacity_fits_the_open_file_limit) {
    cr_expect_eq(capacity_within(4096, -1), 4096);
    cr_expect_eq(capacity_within(4096, 20000), 4096);
    int cap = capacity_within(4096, 4096);
    cr_expect_lt(cap, 4096);
    cr_expect_leq(srv__idle_daemon_limit(cap) + IDLE_FD_RESERVE, 4096);
    cr_expect_eq(capacity_within(4096, 10), 1);
    cr_expect_gt(srv__idle_daemon_limit(4096), 4096);
}

Test(idle_drain, an_unpicked_connection_counts_again_as_busy) {
    open_all(2, 3);
    srv__idle_kept(&t, &c[0], 10.0);
    srv__idle_kept(&t, &c[1], 11.0);
    srv__idle_busy(&t, &c[2]);
    srv_idle_link *first = srv__idle_pick(&t, 20.0);
    cr_assert_eq(first, &c[0]);
    srv__idle_unpick(&t, first); /* bytes of its next request were waiting */
    cr_expect_eq(c[0].state, SRV_IDLE_BUSY);
    cr_expect_eq(t.open, 3);
    cr_expect_eq(srv__idle_pick(&t, 20.0), &c[1], "the next oldest idle one instead");
    cr_expect_null(srv__idle_pick(&t, 20.0), "within capacity again");
    srv__idle_unpick(&t, &c[2]); /* not picked: nothing changes */
    cr_expect_eq(t.open, 2);
}

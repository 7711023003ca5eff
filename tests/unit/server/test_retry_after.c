/* test_retry_after.c: the Retry-After of a 429: the queue's length over the drain rate,
 * jittered by up to half either way, within 1..60 seconds; the jitter spreads. */
#include <criterion/criterion.h>

#include "server/http/retry_after.c"

Test(retry_after, is_the_drain_time_jittered_by_half_either_way) {
    cr_expect_eq(retry_after_seconds(100, 10, 0.0), 5);    /* 10 s, times 0.5 */
    cr_expect_eq(retry_after_seconds(100, 10, 0.5), 10);   /* times 1.0 */
    cr_expect_eq(retry_after_seconds(100, 10, 0.999), 15); /* times 1.499, rounded up */
}

Test(retry_after, stays_within_one_and_sixty_seconds) {
    cr_expect_eq(retry_after_seconds(0, 10, 0.0), 1);
    cr_expect_eq(retry_after_seconds(5, -1, 0.9), 2); /* unknown rate: about a second */
    cr_expect_eq(retry_after_seconds(1e6, 1, 0.999), 60);
    cr_expect_eq(retry_after_seconds(1e6, 1, 0.0), 20); /* 40 at most before the jitter */
}

Test(retry_after, nothing_draining_asks_for_the_longest_wait) {
    cr_expect_eq(retry_after_seconds(5, 0, 0.5), 40);
}

Test(retry_after, long_waits_spread_instead_of_piling_up_at_the_cap) {
    int at_cap = 0;
    for (int i = 0; i < 100; i++) at_cap += retry_after_seconds(1e6, 1, i / 100.0) == 60;
    cr_expect_leq(at_cap, 2, "%d of 100 at 60 s", at_cap);
}

Test(retry_after, jitter_spreads_over_the_unit_interval) {
    enum { N = 4000 };
    int bins[4] = {0};
    for (int i = 0; i < N; i++) {
        double u = jitter_uniform();
        cr_assert(u >= 0 && u < 1, "%f", u);
        bins[(int)(u * 4)]++;
    }
    for (int b = 0; b < 4; b++)
        cr_expect(bins[b] > N / 4 - N / 10 && bins[b] < N / 4 + N / 10, "bin %d: %d", b, bins[b]);
}

/* test_threadpool.c: the CPU backend's worker pool runs every share exactly once,
 * back to back, with any thread count. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "gpu/host/host_internal.h"

typedef struct count_task {
    atomic_int calls;
    atomic_int seen[8];
    int64_t n;
    atomic_llong sum;
} count_task;

static void count_share(void *ctx, int ith, int nth) {
    count_task *t = ctx;
    atomic_fetch_add(&t->calls, 1);
    atomic_fetch_add(&t->seen[ith], 1);
    int64_t begin, end;
    host__split(t->n, ith, nth, &begin, &end);
    long long local = 0;
    for (int64_t i = begin; i < end; i++) local += i;
    atomic_fetch_add(&t->sum, local);
}

Test(threadpool, every_share_runs_once_per_task) {
    for (int threads = 1; threads <= 4; threads++) {
        host_pool *pool;
        cr_assert_eq(host__pool_create(threads, &pool), SP_OK);
        for (int round = 0; round < 2000; round++) {
            count_task t = {.n = 1000 + round};
            host__pool_run(pool, count_share, &t);
            cr_assert_eq(atomic_load(&t.calls), threads);
            for (int i = 0; i < threads; i++) cr_assert_eq(atomic_load(&t.seen[i]), 1);
            cr_assert_eq(atomic_load(&t.sum), (long long)t.n * (t.n - 1) / 2);
        }
        host__pool_destroy(pool);
    }
}

Test(threadpool, split_covers_the_range_without_overlap) {
    for (int64_t n = 0; n < 50; n++)
        for (int nth = 1; nth <= 7; nth++) {
            int64_t expect = 0;
            for (int i = 0; i < nth; i++) {
                int64_t b, e;
                host__split(n, i, nth, &b, &e);
                cr_assert_eq(b, expect < n ? expect : n);
                cr_assert_geq(e, b);
                expect = e > expect ? e : expect;
            }
            cr_assert_eq(expect, n);
        }
}

/* test_thread.c: common/thread.c: sp_thread_stop stops one worker and a pool that wait
 * on one condition for a stop flag, each thread returning once; a worker that never
 * started is only flagged; sp_cond_wait_for's timed wait and its immediate return. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "common/thread.h"

typedef struct pool {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool stopping;
    atomic_int running, returned;
} pool;

static void *worker(void *arg) {
    pool *p = arg;
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->running, 1);
    while (!p->stopping) pthread_cond_wait(&p->wake, &p->lock);
    pthread_mutex_unlock(&p->lock);
    atomic_fetch_add(&p->returned, 1);
    return NULL;
}

static void pool_init(pool *p) {
    pthread_mutex_init(&p->lock, NULL);
    sp_cond_init_monotonic(&p->wake);
    p->stopping = false;
    atomic_init(&p->running, 0);
    atomic_init(&p->returned, 0);
}

static void pool_destroy(pool *p) {
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
}

static void check_stop(int n) {
    pool p;
    pool_init(&p);
    pthread_t threads[8];
    for (int i = 0; i < n; i++) cr_assert_eq(sp_thread_start(&threads[i], "test-worker", worker, &p), SP_OK);
    while (atomic_load(&p.running) < n) sched_yield(); /* every one waits (or is about to) */
    sp_thread_stop(&p.lock, &p.wake, &p.stopping, threads, n);
    cr_assert(p.stopping);
    cr_assert_eq(atomic_load(&p.returned), n, "every worker returned before the stop did");
    pool_destroy(&p);
}

Test(thread, stop_one_worker) {
    check_stop(1);
}

Test(thread, stop_a_pool_wakes_every_worker) {
    check_stop(8);
}

Test(thread, stop_with_no_worker_sets_the_flag) {
    pool p;
    pool_init(&p);
    sp_thread_stop(&p.lock, &p.wake, &p.stopping, NULL, 0);
    cr_assert(p.stopping);
    pool_destroy(&p);
}

Test(thread, cond_wait_for_times_out) {
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond;
    cr_assert_eq(sp_cond_init_monotonic(&cond), 0);
    pthread_mutex_lock(&lock);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = sp_cond_wait_for(&cond, &lock, 0.02);
    while (rc == 0) rc = sp_cond_wait_for(&cond, &lock, 0.02); /* a spurious wake: wait again */
    clock_gettime(CLOCK_MONOTONIC, &b);
    cr_assert_eq(rc, ETIMEDOUT);
    cr_assert_geq((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9, 0.019);
    cr_assert_eq(sp_cond_wait_for(&cond, &lock, 0), ETIMEDOUT, "no time: returns at once");
    pthread_mutex_unlock(&lock);
    pthread_cond_destroy(&cond);
}

/* threadpool.c: the CPU backend's worker threads.
 *
 * DESIGN: the pool owner (the thread that runs the forward pass) publishes a task by
 * bumping `generation`; workers notice it by spinning briefly (ops come back to back
 * within a step, so a sleeping handoff would cost more than the op) and fall back to a
 * condition variable when no task arrives for a while (between steps, when idle). Each
 * worker runs its share, then increments `done`; the owner runs share 0 and spins until
 * every worker has finished. Both spins yield the core every POOL_YIELD_EVERY pauses:
 * when the machine has more runnable threads than cores (HTTP threads, a test client,
 * a CI neighbour), a spinner would otherwise burn the slice the thread it waits for
 * needs, and a step could take a hundred times longer. Workers are named "spindle-cpu-N" and block SIGINT/SIGTERM
 * so only the main thread handles signals.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/thread.h"
#include "gpu/host/host_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a worker spins for the next task before sleeping (iterations of pause). */
enum { POOL_SPIN_ITERATIONS = 200000 };
/* Pauses between two sched_yield calls while spinning (a few microseconds). */
enum { POOL_YIELD_EVERY = 64 };

/* One wait iteration of a spin loop. */
static inline void spin_wait(int spins) {
    if (spins % POOL_YIELD_EVERY == 0)
        sched_yield();
    else
        cpu_relax();
}

typedef struct pool_worker {
    host_pool *pool;
    int index;
    pthread_t thread;
} pool_worker;

struct host_pool {
    int n_threads;
    pool_worker *workers; /* n_threads - 1 entries: worker i runs share i + 1 */

    /* task published by the owner; read by workers after seeing a new generation */
    host_task_fn fn;
    void *ctx;
    atomic_uint generation;
    atomic_int done;
    atomic_bool stop;

    pthread_mutex_t lock; /* guards sleeping: workers wait on wake when idle */
    pthread_cond_t wake;
    int sleepers;
};

static void *pool_worker_main(void *arg) {
    pool_worker *w = arg;
    host_pool *pool = w->pool;
    /* generation was 0 when this worker was created; reading it here instead would
     * miss a task the owner published before this thread got to run */
    unsigned seen = 0;

    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load(&pool->stop)) {
            if (++spins < POOL_SPIN_ITERATIONS) {
                spin_wait(spins);
                continue;
            }
            pthread_mutex_lock(&pool->lock);
            pool->sleepers++;
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->wake, &pool->lock);
            pool->sleepers--;
            pthread_mutex_unlock(&pool->lock);
            spins = 0;
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = gen;
        pool->fn(pool->ctx, w->index + 1, pool->n_threads);
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
    }
}

sp_status host__pool_create(int n_threads, host_pool **out) {
    if (n_threads < 1) n_threads = 1;
    host_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return sp_fail(SP_ERR_NOMEM, "thread pool: out of memory");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->done, 0);
    atomic_init(&pool->stop, false);
    pool->workers = calloc((size_t)n_threads, sizeof *pool->workers);
    if (!pool->workers) {
        free(pool);
        return sp_fail(SP_ERR_NOMEM, "thread pool: out of memory");
    }

    int started = 0;
    sp_status st = SP_OK;
    for (int i = 0; i < n_threads - 1; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].index = i;
        char name[16];
        snprintf(name, sizeof name, "spindle-cpu-%u", (unsigned)(i + 1) % 1000u);
        if ((st = sp_thread_start(&pool->workers[i].thread, name, pool_worker_main, &pool->workers[i])) != SP_OK) break;
        started++;
    }
    if (st != SP_OK) {
        pool->n_threads = started + 1;
        host__pool_destroy(pool);
        return sp_fail_prefix(st, "thread pool: %d of %d threads started", started, n_threads - 1);
    }
    *out = pool;
    return SP_OK;
}

void host__pool_destroy(host_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < pool->n_threads - 1; i++) pthread_join(pool->workers[i].thread, NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->wake);
    free(pool->workers);
    free(pool);
}

int host__pool_threads(const host_pool *pool) {
    return pool->n_threads;
}

void host__pool_run(host_pool *pool, host_task_fn fn, void *ctx) {
    if (pool->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_mutex_lock(&pool->lock);
    if (pool->sleepers > 0) pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    fn(ctx, 0, pool->n_threads);
    for (int spins = 1; atomic_load_explicit(&pool->done, memory_order_acquire) != pool->n_threads - 1; spins++)
        spin_wait(spins);
}

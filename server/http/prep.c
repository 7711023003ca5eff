/* prep.c: the preparation workers. Parsing a request body, rendering its chat template
 * and tokenizing it cost up to a second of CPU for a large body; run on libmicrohttpd's
 * threads they would stall every other connection those threads serve, probes included.
 * So a handler that has a whole body suspends its connection and queues the work here;
 * a worker runs it and resumes the connection, and the handler, called again, answers
 * from the prepared result.
 *
 * DESIGN
 * - Threads: `n` workers (--prep-threads). Handlers (libmicrohttpd's threads) submit;
 *   workers take; srv__prep_stop (the main thread, before the daemon stops) ends them.
 * - Order: the smallest queued body first, so small requests keep their latency behind
 *   large ones, unless the oldest job has waited PREP_MAX_WAIT_S: then it goes first, so
 *   no large body waits forever.
 * - Budget: bodies of PREP_LARGE_BYTES or more get at most PREP_LARGE_SHARE of the
 *   workers' time: after one took t seconds the next waits t * (1 / share - 1), small ones
 *   going on meanwhile. A flood of megabyte bodies then costs a fifth of a core, not
 *   one, and the generations beside it keep their pace; a single large body is not
 *   delayed.
 * - Ownership: a queued or running job's srv_conn stays valid, since libmicrohttpd neither
 *   times out nor completes a suspended connection. The job writes the conn's prep_*
 *   fields (and a generation's parsed request); then prep_state is set under conn->lock
 *   and the connection resumed, and the handler reads prep_state under that lock before
 *   the rest. The worker never touches the conn after resuming it.
 * - Shutdown: srv__prep_stop lets running jobs finish and marks queued ones cancelled and
 *   resumes them (their handlers answer 503), so libmicrohttpd is never stopped with a
 *   suspended connection; later submissions are refused; srv__prep_free once the daemon
 *   has stopped and no handler can submit.
 */
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include "common/grow.h"
#include "common/thread.h"
#include "scheduler/sched.h"
#include "server/http/http_internal.h"

enum { PREP_MAX_THREADS = 64, PREP_LARGE_BYTES = 64 * 1024 };
#define PREP_MAX_WAIT_S  1.0
#define PREP_LARGE_SHARE 0.2

typedef struct prep_job {
    srv_conn *conn;
    srv_prep_fn fn;
    double queued_at; /* sched_now() */
} prep_job;

struct srv_prep {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    prep_job *jobs; /* (n_jobs) queued, unordered */
    size_t n_jobs, cap_jobs;
    bool stopping;
    double large_ready_at; /* sched_now() before which no large body starts (Budget) */
    pthread_t threads[PREP_MAX_THREADS];
    int n_threads;
};

static bool is_large(const prep_job *job) {
    return job->conn->body_len >= PREP_LARGE_BYTES;
}

/* The job to run next (the lock held), see Order and Budget above; -1 when none may start
 * before large_ready_at. */
static ptrdiff_t pick(const srv_prep *p, double now) {
    const bool large_ok = now >= p->large_ready_at;
    ptrdiff_t oldest = -1, smallest = -1;
    for (size_t i = 0; i < p->n_jobs; i++) {
        if (!large_ok && is_large(&p->jobs[i])) continue;
        if (oldest < 0 || p->jobs[i].queued_at < p->jobs[oldest].queued_at) oldest = (ptrdiff_t)i;
        if (smallest < 0 || p->jobs[i].conn->body_len < p->jobs[smallest].conn->body_len) smallest = (ptrdiff_t)i;
    }
    if (oldest < 0) return -1;
    return now - p->jobs[oldest].queued_at >= PREP_MAX_WAIT_S ? oldest : smallest;
}

/* Publishes the result state and lets libmicrohttpd call the handler again. */
static void finish(srv_conn *conn, srv_prep_state state) {
    pthread_mutex_lock(&conn->lock);
    conn->prep_state = state;
    pthread_mutex_unlock(&conn->lock);
    MHD_resume_connection(conn->connection);
}

static void *worker(void *arg) {
    srv_prep *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stopping && p->n_jobs == 0) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stopping) break;
        ptrdiff_t i = pick(p, sched_now());
        if (i < 0) { /* only large bodies, over their budget: until it refills or a job comes */
            sp_cond_wait_for(&p->wake, &p->lock, p->large_ready_at - sched_now());
            continue;
        }
        prep_job job = p->jobs[i];
        p->jobs[i] = p->jobs[--p->n_jobs];
        pthread_mutex_unlock(&p->lock);
        const bool large = is_large(&job); /* conn may be gone once resumed */
        double start = sched_now();
        job.fn(job.conn);
        double end = sched_now();
        finish(job.conn, SRV_PREP_DONE);
        pthread_mutex_lock(&p->lock);
        if (large) {
            double ready = end + (end - start) * (1.0 / PREP_LARGE_SHARE - 1.0);
            if (ready > p->large_ready_at) p->large_ready_at = ready;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

sp_status srv__prep_start(int n_threads, srv_prep **out) {
    if (n_threads < 1 || n_threads > PREP_MAX_THREADS)
        return sp_fail(SP_ERR_INVALID_ARG, "prep threads: %d is not in 1..%d", n_threads, PREP_MAX_THREADS);
    srv_prep *p = calloc(1, sizeof *p);
    if (!p) return sp_fail(SP_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&p->lock, NULL);
    sp_cond_init_monotonic(&p->wake);
    for (int i = 0; i < n_threads; i++) {
        char name[16];
        snprintf(name, sizeof name, "spindle-prep-%u", (unsigned)i % 100u); /* i < PREP_MAX_THREADS */
        sp_status st = sp_thread_start(&p->threads[i], name, worker, p);
        if (st != SP_OK) {
            srv__prep_stop(p);
            srv__prep_free(p);
            return st;
        }
        p->n_threads = i + 1;
    }
    *out = p;
    return SP_OK;
}

sp_status srv__prep_submit(srv_prep *p, srv_conn *conn, srv_prep_fn fn) {
    pthread_mutex_lock(&p->lock);
    sp_status st = SP_OK;
    if (p->stopping)
        st = sp_fail(SP_ERR_UNAVAILABLE, "the server is shutting down");
    else if (!sp_grow((void **)&p->jobs, &p->cap_jobs, p->n_jobs + 1, sizeof *p->jobs))
        st = sp_fail(SP_ERR_NOMEM, "out of memory for the preparation queue");
    if (st == SP_OK) {
        conn->prep_state = SRV_PREP_QUEUED;
        /* suspended before any worker can resume it: the lock is held until queued */
        MHD_suspend_connection(conn->connection);
        p->jobs[p->n_jobs++] = (prep_job){.conn = conn, .fn = fn, .queued_at = sched_now()};
        pthread_cond_signal(&p->wake);
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

void srv__prep_stop(srv_prep *p) {
    if (!p) return;
    sp_thread_stop(&p->lock, &p->wake, &p->stopping, p->threads, p->n_threads);
    p->n_threads = 0;
    /* no worker is left, and stopping refuses new jobs: whatever is queued is answered
     * 503 by its handler */
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->n_jobs; i++) finish(p->jobs[i].conn, SRV_PREP_CANCELLED);
    p->n_jobs = 0;
    pthread_mutex_unlock(&p->lock);
}

void srv__prep_free(srv_prep *p) {
    if (!p) return;
    free(p->jobs);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

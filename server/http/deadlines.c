/* deadlines.c: total-time limits on a request's headers and body, so a client that
 * trickles a byte every few seconds cannot keep its connection slot. libmicrohttpd's own
 * timeout (--idle-timeout) starts over with every byte; these do not:
 *   headers: a new connection's first request must have its headers in within
 *            --header-timeout; a kept-alive one's next request within --idle-timeout
 *            plus --header-timeout of the last answer (one idle the whole time is
 *            closed by libmicrohttpd at --idle-timeout already);
 *   body:    once the headers are in, the whole body within --body-timeout.
 * After the body nothing is timed here (preparing and generating have their own limits).
 * A connection past its deadline has its socket shut down, and libmicrohttpd closes it as
 * a client that went away; nginx answers 408 in the same spot, but an answer cannot be
 * queued from outside libmicrohttpd's threads.
 * The same table knows which connections are idle, and a new connection past the capacity
 * closes the oldest of them the same way (idle_drain.c).
 *
 * DESIGN (threads): each connection's entry is made and dropped by libmicrohttpd's
 * connection notifications (its threads), and its deadline set by the handler (also its
 * threads); the reaper thread scans the table twice a second. All under one lock, and
 * libmicrohttpd drops an entry (the "closed" notification) before it closes the socket, so
 * neither the reaper nor a new connection draining an idle one ever shuts down a
 * descriptor that was closed and reused.
 */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "common/grow.h"
#include "common/log.h"
#include "common/thread.h"
#include "scheduler/sched.h"
#include "server/http/http_internal.h"

enum { DEADLINE_PERIOD_MS = 500 };

/* One open connection. */
struct srv_deadline {
    int fd;
    double deadline; /* sched_now() seconds; 0: none */
    int slot;        /* its index in the table */
    bool drainable;  /* counted in idle (the main port's connections) */
    srv_idle_link idle;
};

struct srv_deadlines {
    pthread_mutex_t lock;
    pthread_cond_t stop_cond;
    bool stopping;
    double header_s, body_s, idle_s;
    srv_deadline **entries; /* (n, cap) */
    int n;
    size_t cap;
    srv_idle_table idle; /* the drainable connections, for idle_drain.c */
    pthread_t thread;
    bool started;
};

static void *reaper(void *arg) {
    srv_deadlines *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stopping) {
        sp_cond_wait_for(&d->stop_cond, &d->lock, DEADLINE_PERIOD_MS / 1000.0);
        double now = sched_now();
        for (int i = 0; i < d->n; i++) {
            srv_deadline *e = d->entries[i];
            if (e->deadline > 0 && now > e->deadline) {
                e->deadline = 0; /* once: libmicrohttpd closes it */
                sp_log_debug("http: a request's headers or body took too long; closing its connection");
                shutdown(e->fd, SHUT_RDWR);
            }
        }
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

sp_status srv__deadlines_start(double header_s, double body_s, double idle_s, srv_deadlines **out) {
    srv_deadlines *d = calloc(1, sizeof *d);
    if (!d) return sp_fail(SP_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&d->lock, NULL);
    sp_cond_init_monotonic(&d->stop_cond);
    d->header_s = header_s;
    d->body_s = body_s;
    d->idle_s = idle_s;
    srv__idle_init(&d->idle, INT_MAX);
    sp_status st = sp_thread_start(&d->thread, "spindle-deadln", reaper, d);
    if (st != SP_OK) {
        srv__deadlines_stop(d);
        return st;
    }
    d->started = true;
    *out = d;
    return SP_OK;
}

void srv__deadlines_stop(srv_deadlines *d) {
    if (!d) return;
    sp_thread_stop(&d->lock, &d->stop_cond, &d->stopping, &d->thread, d->started ? 1 : 0);
    for (int i = 0; i < d->n; i++) free(d->entries[i]);
    free(d->entries);
    pthread_cond_destroy(&d->stop_cond);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

void srv__deadlines_drain_at(srv_deadlines *d, int capacity) {
    pthread_mutex_lock(&d->lock);
    d->idle.capacity = capacity;
    pthread_mutex_unlock(&d->lock);
}

/* Whether bytes wait unread in fd's socket: a kept-alive connection's next request that
 * libmicrohttpd has not read yet (closing it would reset a request the client has sent). */
static bool bytes_waiting(int fd) {
    char byte;
    return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* Past capacity: shuts down the oldest idle connections, or e itself when none is idle
 * (libmicrohttpd closes them at its next poll). Counts into *closed the idle ones closed
 * and into *refused whether e was. */
static void drain(srv_deadlines *d, srv_deadline *e, double now, int *closed, bool *refused) {
    for (srv_idle_link *c; (c = srv__idle_pick(&d->idle, now));) {
        srv_deadline *victim = (srv_deadline *)((char *)c - offsetof(srv_deadline, idle));
        if (bytes_waiting(victim->fd)) {
            srv__idle_unpick(&d->idle, c);
            continue;
        }
        victim->deadline = 0; /* the reaper leaves it alone */
        shutdown(victim->fd, SHUT_RDWR);
        (*closed)++;
    }
    if (d->idle.open > d->idle.capacity) { /* every other connection has a request in progress */
        srv__idle_refuse(&d->idle, &e->idle);
        e->deadline = 0;
        shutdown(e->fd, SHUT_RDWR);
        *refused = true;
    }
}

srv_deadline *srv__deadline_open(srv_deadlines *d, int fd, bool drainable) {
    srv_deadline *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->fd = fd;
    e->drainable = drainable;
    int closed = 0;
    bool refused = false;
    pthread_mutex_lock(&d->lock);
    if (!sp_grow((void **)&d->entries, &d->cap, (size_t)d->n + 1, sizeof *d->entries)) {
        pthread_mutex_unlock(&d->lock);
        free(e);
        return NULL; /* untimed; libmicrohttpd's own timeout still applies */
    }
    double now = sched_now();
    e->deadline = now + d->header_s;
    e->slot = d->n;
    d->entries[d->n++] = e;
    if (drainable) {
        srv__idle_open(&d->idle, &e->idle, now);
        drain(d, e, now, &closed, &refused);
    }
    pthread_mutex_unlock(&d->lock);
    if (closed > 0) {
        srv_metrics_count_idle_closed(closed);
        sp_log_debug("http: the connection table is full; closed %d idle connection(s) to admit a new one", closed);
    }
    if (refused) srv_metrics_count_refused();
    return e;
}

void srv__deadline_close(srv_deadlines *d, srv_deadline *e) {
    if (!e) return;
    pthread_mutex_lock(&d->lock);
    if (e->drainable) srv__idle_close(&d->idle, &e->idle);
    srv_deadline *last = d->entries[--d->n];
    d->entries[e->slot] = last;
    last->slot = e->slot;
    pthread_mutex_unlock(&d->lock);
    free(e);
}

void srv__deadline_set(srv_deadlines *d, srv_deadline *e, srv_deadline_phase phase) {
    if (!e) return;
    pthread_mutex_lock(&d->lock);
    double now = sched_now(); /* under the lock: the kept list stays in order of since */
    switch (phase) {
    case SRV_DEADLINE_HEADERS: break;
    case SRV_DEADLINE_BODY: e->deadline = now + d->body_s; break;
    case SRV_DEADLINE_NONE: e->deadline = 0; break;
    case SRV_DEADLINE_NEXT_REQUEST: e->deadline = now + d->idle_s + d->header_s; break;
    }
    if (e->drainable && phase == SRV_DEADLINE_NEXT_REQUEST)
        srv__idle_kept(&d->idle, &e->idle, now);
    else if (e->drainable)
        srv__idle_busy(&d->idle, &e->idle);
    pthread_mutex_unlock(&d->lock);
}

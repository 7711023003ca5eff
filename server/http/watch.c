/* watch.c: notices clients that left while their generation runs, and keeps quiet
 * streams alive.
 *
 * libmicrohttpd does not poll a suspended connection, so a client that closes its
 * socket while its request is queued or prefilling would go unnoticed until the next
 * token. The watcher polls the sockets of every generating request every
 * WATCH_PERIOD_MS (poll with a zero timeout; it never reads, so it takes nothing from
 * libmicrohttpd) and calls on_hangup for a peer that hung up (POLLRDHUP/POLLHUP/
 * POLLERR), once. A client that half-closes its socket (shutdown(SHUT_WR)) after
 * sending the request counts as gone, as nginx's proxy treats it: HTTP clients do not
 * do that and then wait for the answer. For streams quiet for keepalive_s it calls on_quiet, and the stream sends
 * an SSE comment line.
 *
 * DESIGN (threads): the table belongs to the watcher's lock. HTTP threads add and
 * remove entries; the watcher thread calls the callbacks while holding the lock, so
 * once srv_watch_remove returns no callback for that entry is running or will run.
 * Callbacks must be quick and must not call srv_watch_*.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "common/assert.h"
#include "common/thread.h"
#include "server/http/http.h"

enum { WATCH_PERIOD_MS = 50 };

struct srv_watch {
    pthread_mutex_t lock;
    pthread_cond_t stop_cond;
    bool stopping;
    double keepalive_s;
    srv_watched **entries; /* (n, cap) */
    struct pollfd *fds;    /* (cap) scratch for poll */
    int n, cap;
    pthread_t thread;
};

static void watch_tick(srv_watch *wt) {
    if (wt->n == 0) return;
    for (int i = 0; i < wt->n; i++) wt->fds[i] = (struct pollfd){.fd = wt->entries[i]->fd, .events = POLLRDHUP};
    int rc = poll(wt->fds, (nfds_t)wt->n, 0);
    double now = sched_now();
    for (int i = 0; i < wt->n; i++) {
        srv_watched *w = wt->entries[i];
        if (w->hung_up) continue;
        if (rc > 0 && (wt->fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
            w->hung_up = true; /* once: the entry stays until the connection completes */
            w->on_hangup(w->arg);
            continue;
        }
        if (w->streaming && wt->keepalive_s > 0 && now - atomic_load(&w->last_write) >= wt->keepalive_s) {
            atomic_store(&w->last_write, now); /* one nudge per period of quiet */
            w->on_quiet(w->arg);
        }
    }
}

static void *watch_main(void *arg) {
    srv_watch *wt = arg;
    pthread_mutex_lock(&wt->lock);
    while (!wt->stopping) {
        watch_tick(wt);
        sp_cond_wait_for(&wt->stop_cond, &wt->lock, WATCH_PERIOD_MS / 1000.0);
    }
    pthread_mutex_unlock(&wt->lock);
    return NULL;
}

sp_status srv_watch_create(double keepalive_s, srv_watch **out) {
    srv_watch *wt = calloc(1, sizeof *wt);
    if (!wt) return sp_fail(SP_ERR_NOMEM, "watcher: out of memory");
    pthread_mutex_init(&wt->lock, NULL);
    sp_cond_init_monotonic(&wt->stop_cond);
    wt->keepalive_s = keepalive_s;
    sp_status st = sp_thread_start(&wt->thread, "http-watch", watch_main, wt);
    if (st != SP_OK) {
        pthread_mutex_destroy(&wt->lock);
        pthread_cond_destroy(&wt->stop_cond);
        free(wt);
        return sp_fail_prefix(st, "watcher");
    }
    *out = wt;
    return SP_OK;
}

void srv_watch_destroy(srv_watch *wt) {
    if (!wt) return;
    sp_thread_stop(&wt->lock, &wt->stop_cond, &wt->stopping, &wt->thread, 1);
    SP_ASSERT(wt->n == 0); /* every connection removed its entry before the daemon stopped */
    pthread_mutex_destroy(&wt->lock);
    pthread_cond_destroy(&wt->stop_cond);
    free(wt->entries);
    free(wt->fds);
    free(wt);
}

sp_status srv_watch_add(srv_watch *wt, srv_watched *w) {
    pthread_mutex_lock(&wt->lock);
    if (wt->n == wt->cap) {
        int cap = wt->cap ? wt->cap * 2 : 256;
        srv_watched **entries = realloc(wt->entries, sizeof *entries * (size_t)cap);
        if (entries) wt->entries = entries;
        struct pollfd *fds = entries ? realloc(wt->fds, sizeof *fds * (size_t)cap) : NULL;
        if (fds) wt->fds = fds;
        if (!entries || !fds) {
            pthread_mutex_unlock(&wt->lock);
            return sp_fail(SP_ERR_NOMEM, "watcher: out of memory");
        }
        wt->cap = cap;
    }
    atomic_store(&w->last_write, sched_now());
    w->_slot = wt->n;
    wt->entries[wt->n++] = w;
    pthread_mutex_unlock(&wt->lock);
    return SP_OK;
}

void srv_watch_remove(srv_watch *wt, srv_watched *w) {
    pthread_mutex_lock(&wt->lock);
    if (w->_slot >= 0) {
        SP_ASSERT(w->_slot < wt->n && wt->entries[w->_slot] == w);
        /* move the last entry into the hole */
        srv_watched *last = wt->entries[--wt->n];
        wt->entries[w->_slot] = last;
        last->_slot = w->_slot;
        w->_slot = -1;
    }
    pthread_mutex_unlock(&wt->lock);
}

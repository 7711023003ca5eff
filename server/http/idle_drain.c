/* idle_drain.c: which connections a full connection table closes to admit new ones, as
 * nginx reuses its oldest idle keep-alive connections when its table is full
 * (ngx_drain_connections). libmicrohttpd at its limit stops accepting, so without this
 * a client holding --max-connections idle sockets locks every other client out, probes
 * included, until --idle-timeout.
 *
 * A connection is idle when no request is in progress on it: answered and kept alive
 * (between requests), or connected for IDLE_GRACE_S and still without a request line.
 * When the open connections exceed the capacity, the connection idle longest goes
 * first (unless bytes of a next request already wait in its socket); one with a request in progress (headers, body,
 * preparation, generation, stream) never does, and a new connection that finds none idle is refused instead. The table
 * is bookkeeping only (two lists, oldest first, O(1) a change): the caller shuts the picked sockets down and counts
 * them.
 *
 * DESIGN (threads): no lock of its own; deadlines.c calls it under its lock, from
 * libmicrohttpd's threads.
 */
#include <sys/resource.h>

#include "server/http/http_internal.h"

/* A new connection's request line usually arrives within a round trip: one that has sent
 * nothing for this long is idle. */
#define IDLE_GRACE_S 1.0

/* Descriptors kept for everything but the main port's connections (the model, logs,
 * epoll and eventfds, the admin port's 64 connections). */
enum { IDLE_FD_RESERVE = 256, IDLE_HEADROOM_MIN = 64 };

void srv__idle_init(srv_idle_table *t, int capacity) {
    *t = (srv_idle_table){.capacity = capacity, .grace_s = IDLE_GRACE_S};
}

static void list_append(srv_idle_list *l, srv_idle_link *c) {
    c->next = NULL;
    c->prev = l->tail;
    if (l->tail)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

static void list_remove(srv_idle_list *l, srv_idle_link *c) {
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

/* Takes c out of the list its state puts it in (busy and closing ones are in none). */
static void unlink_state(srv_idle_table *t, srv_idle_link *c) {
    if (c->state == SRV_IDLE_FRESH) list_remove(&t->fresh, c);
    if (c->state == SRV_IDLE_KEPT) list_remove(&t->kept, c);
}

void srv__idle_open(srv_idle_table *t, srv_idle_link *c, double now) {
    *c = (srv_idle_link){.since = now, .state = SRV_IDLE_FRESH};
    list_append(&t->fresh, c);
    t->open++;
}

void srv__idle_busy(srv_idle_table *t, srv_idle_link *c) {
    if (c->state == SRV_IDLE_CLOSING || c->state == SRV_IDLE_BUSY) return;
    unlink_state(t, c);
    c->state = SRV_IDLE_BUSY;
}

void srv__idle_kept(srv_idle_table *t, srv_idle_link *c, double now) {
    if (c->state == SRV_IDLE_CLOSING) return; /* its socket is shut down already */
    unlink_state(t, c);
    c->state = SRV_IDLE_KEPT;
    c->since = now;
    list_append(&t->kept, c);
}

void srv__idle_refuse(srv_idle_table *t, srv_idle_link *c) {
    if (c->state == SRV_IDLE_CLOSING) return;
    unlink_state(t, c);
    c->state = SRV_IDLE_CLOSING;
    t->open--;
}

void srv__idle_close(srv_idle_table *t, srv_idle_link *c) {
    srv__idle_refuse(t, c); /* uncounted once, whether it was picked or not */
}

void srv__idle_unpick(srv_idle_table *t, srv_idle_link *c) {
    if (c->state != SRV_IDLE_CLOSING) return;
    c->state = SRV_IDLE_BUSY; /* its next request is on its way: on_request_line will say so */
    t->open++;
}

srv_idle_link *srv__idle_pick(srv_idle_table *t, double now) {
    if (t->open <= t->capacity) return NULL;
    srv_idle_link *kept = t->kept.head, *fresh = t->fresh.head;
    if (fresh && now - fresh->since < t->grace_s) fresh = NULL; /* the oldest fresh one is in its grace: all are */
    srv_idle_link *c = !fresh ? kept : !kept ? fresh : kept->since <= fresh->since ? kept : fresh;
    if (c) srv__idle_refuse(t, c);
    return c;
}

/* The capacity for max_connections within an open file limit of nofile (< 0: none): the
 * table, libmicrohttpd's headroom above it and IDLE_FD_RESERVE must all fit. */
static int capacity_within(int max_connections, long long nofile) {
    long long cap = max_connections;
    if (nofile >= 0) {
        long long room = nofile - IDLE_FD_RESERVE - IDLE_HEADROOM_MIN; /* for cap + cap / 16 */
        if (cap + cap / 16 > room) cap = room * 16 / 17;
    }
    return cap < 1 ? 1 : (int)cap;
}

int srv__idle_capacity(int max_connections) {
    struct rlimit rl;
    long long nofile = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long long)rl.rlim_cur : -1;
    return capacity_within(max_connections, nofile);
}

int srv__idle_daemon_limit(int capacity) {
    return capacity + IDLE_HEADROOM_MIN + capacity / 16;
}

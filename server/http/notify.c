/* notify.c: systemd's notify protocol, written directly (no libsystemd): READY=1 once
 * the model is loaded and the port listens, STOPPING=1 when the drain begins, STATUS=
 * lines with the model and the load, and WATCHDOG=1 from the scheduler's heartbeat.
 *
 * The protocol (sd_notify(3)): one datagram of newline-separated KEY=VALUE lines to the
 * AF_UNIX socket named by $NOTIFY_SOCKET, a file system path or, when it starts with
 * '@', a name in the abstract namespace. Without NOTIFY_SOCKET every call here does
 * nothing, so spindle behaves the same outside systemd. (VSOCK addresses, for VMs, are
 * not supported.) The watchdog runs when $WATCHDOG_USEC is set and $WATCHDOG_PID is
 * absent or names this process.
 *
 * A stuck scheduler stops petting the watchdog: WATCHDOG=1 goes out only while the
 * scheduler's heartbeat is younger than SRV_HEARTBEAT_STALE_S, the same line /health
 * draws, so /health turns 503 and the pets stop at the same moment and systemd
 * restarts the service WatchdogSec later. A device fault (sched_device_fault) stops them
 * too: a faulted GPU context does not heal in-process.
 *
 * DESIGN (threads): the main thread sends READY=1 and STOPPING=1 and owns srv_notify.
 * Its thread ("sd-watchdog", SIGINT/SIGTERM/SIGHUP blocked like every worker) wakes
 * every NOTIFY_POLL_S: it sends STOPPING=1 once when it sees the drain begin, and every
 * period (WATCHDOG_USEC/2, or NOTIFY_STATUS_PERIOD_S without a watchdog) a STATUS= line
 * and, while the heartbeat is fresh, WATCHDOG=1. It reads app->sched only under
 * app->lifecycle's read lock (shutdown clears the pointer under the write lock) and
 * never waits on the scheduler.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/thread.h"
#include "server/http/http.h"

enum { NOTIFY_MESSAGE_MAX = 512 };
static const double NOTIFY_STATUS_PERIOD_S = 5.0; /* STATUS= refresh without a watchdog */
static const double NOTIFY_POLL_S = 0.25;         /* how soon the thread notices the drain */

struct srv_notify {
    srv_app *app;      /* borrowed until srv_notify_stop */
    double watchdog_s; /* WATCHDOG_USEC in seconds; 0: no watchdog */
    double period_s;   /* between two WATCHDOG=1/STATUS= messages */
    pthread_mutex_t lock;
    pthread_cond_t stop_cond; /* CLOCK_MONOTONIC */
    bool stopping;            /* lock: srv_notify_stop asked the thread to end */
    bool sent_stopping;       /* thread: STOPPING=1 went out when the drain began */
    bool send_failed;         /* thread: the last send failed (logged once per streak) */
    pthread_t thread;
};

/* What the thread saw of the server at one moment. */
typedef struct notify_snapshot {
    srv_phase phase;
    bool has_sched;         /* app->sched was set (READY or DRAINING) */
    double heartbeat_age_s; /* seconds since the scheduler's last heartbeat */
    bool device_fault;      /* the device faulted: no more WATCHDOG=1 (systemd restarts us) */
    int32_t running;        /* admitted sequences */
    int32_t waiting;        /* queued, not yet admitted */
} notify_snapshot;

sp_status srv_notify_send(const char *message) {
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !path[0]) return SP_OK;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (path[0] != '/' && path[0] != '@')
        return sp_fail(SP_ERR_UNSUPPORTED, "NOTIFY_SOCKET=%s: not a path or an abstract socket name", path);
    if (len >= sizeof addr.sun_path)
        return sp_fail(SP_ERR_RANGE, "NOTIFY_SOCKET=%s: longer than %zu bytes", path, sizeof addr.sun_path - 1);
    memcpy(addr.sun_path, path, len);
    if (path[0] == '@') addr.sun_path[0] = '\0'; /* abstract: the name is not 0-terminated */
    socklen_t addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sp_fail(SP_ERR_IO, "NOTIFY_SOCKET=%s: socket: %s", path, strerror(errno));
    size_t n = strlen(message);
    ssize_t sent = sendto(fd, message, n, MSG_NOSIGNAL, (const struct sockaddr *)&addr, addr_len);
    int err = errno;
    close(fd);
    if (sent < 0) return sp_fail(SP_ERR_IO, "NOTIFY_SOCKET=%s: %s", path, strerror(err));
    if ((size_t)sent != n) return sp_fail(SP_ERR_IO, "NOTIFY_SOCKET=%s: message cut short", path);
    return SP_OK;
}

/* Sends message; a failure is logged, not returned (systemd's view is advisory). */
static void notify_send_logged(const char *message) {
    if (srv_notify_send(message) != SP_OK) sp_log_warn("systemd notify: %s", sp_last_error());
}

void srv_notify_status(const char *fmt, ...) {
    if (!getenv("NOTIFY_SOCKET")) return;
    char msg[NOTIFY_MESSAGE_MAX];
    int n = snprintf(msg, sizeof msg, "STATUS=");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    for (char *c = msg + n; *c; c++)
        if (*c == '\n') *c = ' '; /* one line: a newline would start another KEY= */
    notify_send_logged(msg);
}

/* The STATUS= line for s (written into buf, at most cap bytes, no newline). */
static void notify_status_text(char *buf, size_t cap, const char *model, const notify_snapshot *s) {
    if (!s->has_sched) {
        snprintf(buf, cap, "STATUS=%s %s", s->phase == SRV_PHASE_LOADING ? "loading" : "shutting down", model);
        return;
    }
    if (s->heartbeat_age_s >= SRV_HEARTBEAT_STALE_S) {
        snprintf(buf, cap, "STATUS=stuck: the scheduler has not ticked for %.0f s (%s: %d running, %d waiting)",
                 s->heartbeat_age_s, model, (int)s->running, (int)s->waiting);
        return;
    }
    snprintf(buf, cap, "STATUS=%s %s: %d running, %d waiting", s->phase == SRV_PHASE_DRAINING ? "draining" : "serving",
             model, (int)s->running, (int)s->waiting);
}

/* The periodic message: WATCHDOG=1 (when the watchdog is on and the scheduler's
 * heartbeat is fresh) and the STATUS= line. */
static void notify_compose(char *buf, size_t cap, const char *model, const notify_snapshot *s, bool watchdog) {
    bool fresh = s->has_sched && s->heartbeat_age_s < SRV_HEARTBEAT_STALE_S && !s->device_fault;
    int n = watchdog && fresh ? snprintf(buf, cap, "WATCHDOG=1\n") : 0;
    notify_status_text(buf + n, cap - (size_t)n, model, s);
}

static notify_snapshot notify_snapshot_take(srv_app *app) {
    notify_snapshot s = {0};
    pthread_rwlock_rdlock(&app->lifecycle);
    s.phase = (srv_phase)atomic_load(&app->phase);
    if (app->sched && (s.phase == SRV_PHASE_READY || s.phase == SRV_PHASE_DRAINING)) {
        sched_stats st;
        sched_get_stats(app->sched, &st);
        s.has_sched = true;
        s.heartbeat_age_s = sched_seconds_since_heartbeat(app->sched);
        char why[256];
        s.device_fault = sched_device_fault(app->sched, why, sizeof why);
        s.running = st.running;
        s.waiting = st.queued;
    }
    pthread_rwlock_unlock(&app->lifecycle);
    return s;
}

void srv_notify_ready(srv_app *app) {
    if (!getenv("NOTIFY_SOCKET")) return;
    char msg[NOTIFY_MESSAGE_MAX];
    int n = snprintf(msg, sizeof msg, "READY=1\nMAINPID=%ld\n", (long)getpid());
    notify_snapshot s = notify_snapshot_take(app);
    notify_status_text(msg + n, sizeof msg - (size_t)n, app->model.served_name, &s);
    notify_send_logged(msg);
}

void srv_notify_stopping(void) {
    notify_send_logged("STOPPING=1\nSTATUS=shutting down");
}

/* WATCHDOG_USEC in seconds when the watchdog is meant for this process (WATCHDOG_PID
 * absent or ours), else 0. */
static double notify_watchdog_s(void) {
    const char *usec = getenv("WATCHDOG_USEC");
    if (!usec || !usec[0]) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(usec, &end, 10);
    if (errno || *end || v == 0) {
        sp_log_warn("systemd notify: WATCHDOG_USEC=%s: not a positive number of microseconds; no watchdog", usec);
        return 0;
    }
    const char *pid = getenv("WATCHDOG_PID");
    if (pid && pid[0] && strtol(pid, NULL, 10) != (long)getpid()) return 0; /* meant for another process */
    return (double)v / 1e6;
}

/* STOPPING=1 once the drain began; each period WATCHDOG=1 and STATUS=. */
static void notify_report(srv_notify *n, bool periodic) {
    bool drain_began = atomic_load(&n->app->phase) >= SRV_PHASE_DRAINING && !n->sent_stopping;
    if (!periodic && !drain_began) return;
    notify_snapshot s = notify_snapshot_take(n->app);
    char msg[NOTIFY_MESSAGE_MAX];
    int len = 0;
    if (drain_began) {
        n->sent_stopping = true;
        len = snprintf(msg, sizeof msg, "STOPPING=1\n");
    }
    notify_compose(msg + len, sizeof msg - (size_t)len, n->app->model.served_name, &s, n->watchdog_s > 0);
    if (srv_notify_send(msg) != SP_OK) {
        if (!n->send_failed) sp_log_warn("systemd notify: %s", sp_last_error());
        n->send_failed = true;
    } else {
        n->send_failed = false;
    }
}

static void *notify_main(void *arg) {
    srv_notify *n = arg;
    double next = sched_now(); /* the first period reports at once */
    pthread_mutex_lock(&n->lock);
    while (!n->stopping) {
        pthread_mutex_unlock(&n->lock);
        double now = sched_now();
        bool periodic = now >= next;
        if (periodic) next += n->period_s * (1 + (int)((now - next) / n->period_s)); /* no burst after a stall */
        notify_report(n, periodic);
        double wait_s = next - sched_now();
        pthread_mutex_lock(&n->lock);
        if (!n->stopping) sp_cond_wait_for(&n->stop_cond, &n->lock, wait_s < NOTIFY_POLL_S ? wait_s : NOTIFY_POLL_S);
    }
    pthread_mutex_unlock(&n->lock);
    return NULL;
}

sp_status srv_notify_start(srv_app *app, srv_notify **out) {
    *out = NULL;
    if (!getenv("NOTIFY_SOCKET")) return SP_OK;
    srv_notify *n = calloc(1, sizeof *n);
    if (!n) return sp_fail(SP_ERR_NOMEM, "systemd notify: out of memory");
    n->app = app;
    n->watchdog_s = notify_watchdog_s();
    n->period_s = n->watchdog_s > 0 ? n->watchdog_s / 2 : NOTIFY_STATUS_PERIOD_S;
    pthread_mutex_init(&n->lock, NULL);
    sp_cond_init_monotonic(&n->stop_cond);
    sp_status st = sp_thread_start(&n->thread, "sd-watchdog", notify_main, n);
    if (st != SP_OK) {
        pthread_mutex_destroy(&n->lock);
        pthread_cond_destroy(&n->stop_cond);
        free(n);
        return sp_fail_prefix(st, "systemd notify");
    }
    if (n->watchdog_s > 0) sp_log_info("systemd watchdog: every %.3g s while the scheduler ticks", n->period_s);
    *out = n;
    return SP_OK;
}

void srv_notify_stop(srv_notify *n) {
    if (!n) return;
    sp_thread_stop(&n->lock, &n->stop_cond, &n->stopping, &n->thread, 1);
    pthread_mutex_destroy(&n->lock);
    pthread_cond_destroy(&n->stop_cond);
    free(n);
}

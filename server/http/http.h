/* http.h: server/http's one public header: the HTTP transport over the API layer
 * (server/api/api.h): libmicrohttpd's daemon that cli/cmd_serve.c starts, routing, auth,
 * limits and deadlines, the preparation workers, the watcher, metrics, the access log,
 * systemd's notify protocol and the chat page. Internal: server/http/http_internal.h (the
 * only header that includes <microhttpd.h>). */
#ifndef SP_SERVER_HTTP_H
#define SP_SERVER_HTTP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/kinds.h"
#include "common/status.h"
#include "scheduler/sched.h"
#include "server/api/api.h"

/* ==== The HTTP transport ====
 * The HTTP transport: libmicrohttpd's daemon, routing,
 * request bodies, streaming over suspended connections, and the watcher that notices
 * clients that went away. The API layer it calls is server/api/api.h.
 *
 * DESIGN (threads and ownership)
 * - The main thread (cmd_serve.c) owns srv_app: it starts the HTTP daemon, loads the
 *   model (while /health answers 503), creates the scheduler, and on a signal shuts
 *   everything down in order.
 * - libmicrohttpd's pool threads (`--http-threads`, epoll) run every handler. A request
 *   whose body must be parsed, rendered or tokenized (chat, completions, tokenize,
 *   detokenize) is suspended and handed to the preparation workers (`--prep-threads`,
 *   prep.c), smallest body first, so a megabyte of text never stalls the probes and small
 *   requests these threads serve; resumed, the handler submits or answers. A
 *   generation's connection is then suspended again and costs no thread until the
 *   scheduler's notify resumes it. That is how thousands of open streams fit on two cores.
 * - The scheduler thread only calls srv_conn's notify (resume the connection); it never
 *   writes to a socket.
 * - The watcher thread (watch.c) polls the sockets of generating requests for hang-ups
 *   (a suspended connection is not polled by libmicrohttpd) and cancels their requests;
 *   it also wakes streams that have been quiet for `keepalive_s` so they send an SSE
 *   comment line during long prefills or queueing.
 * - The deadline thread (deadlines.c, `spindle-deadln`) shuts down connections whose
 *   headers or body are late. The same table, under its lock, is where a new connection
 *   on a full table closes the oldest idle one (idle_drain.c), on libmicrohttpd's thread
 *   that accepted it.
 * - `lifecycle` (a rwlock) guards the phase and the scheduler pointer: handlers hold it
 *   for reading around sched_submit, shutdown takes it for writing, so no handler
 *   submits to a scheduler that is being destroyed.
 */

typedef enum srv_phase {
    SRV_PHASE_LOADING, /* listening; the model is being loaded */
    SRV_PHASE_READY,
    SRV_PHASE_DRAINING,      /* SIGTERM: no new work; accepted work finishes (drain_timeout) */
    SRV_PHASE_SHUTTING_DOWN, /* ending what is left */
    SRV_PHASE_FAILED         /* loading failed; the process is about to exit */
} srv_phase;

typedef struct srv_http_config {
    const char *host;               /* address to bind ("127.0.0.1", "0.0.0.0", "::1") */
    int port;                       /* 0: any free port (srv_http_port tells which) */
    int http_threads;               /* libmicrohttpd pool threads */
    int prep_threads;               /* workers that parse, render and tokenize bodies (prep.c) */
    size_t max_body_bytes;          /* larger bodies: 413 */
    int max_connections;            /* open connections at once */
    double keepalive_s;             /* SSE comment after this much quiet */
    int connection_timeout;         /* seconds an idle connection is kept (not counting suspended ones) */
    int header_timeout;             /* seconds for a request's headers, in all (deadlines.c) */
    int body_timeout;               /* seconds for a request's body, in all, once its headers are in */
    int max_connections_per_client; /* from one address; 0: no limit */
    int admin_port;                 /* probes and metrics only, on the same host; 0: none */
    size_t max_header_bytes;        /* request line + headers per connection (libmicrohttpd's memory limit) */
    /* security (auth.c): API keys from --api-key and --api-key-file (reloaded on SIGHUP) */
    const char *const *api_keys; /* (n_api_keys) from --api-key / the config file's api_keys */
    int n_api_keys;
    const char *api_key_file;        /* one key per line; NULL: none */
    bool metrics_require_key;        /* /metrics needs a key too (default: open) */
    const char *const *cors_origins; /* (n_cors_origins) allowed origins; "*" allows any; none: CORS off */
    int n_cors_origins;
    const char *tls_cert_file; /* PEM; both set: HTTPS */
    const char *tls_key_file;
    /* logging (access log) */
    sp_log_format log_format; /* common/kinds.h */
    bool access_log;          /* one line per request (default on) */
    bool log_prompts;         /* include the prompt text in the access log (default off) */
    /* readiness and drain */
    double drain_timeout_s;      /* SIGTERM: in-flight work gets this long to finish */
    double ready_queue_fraction; /* /ready is 503 when the queue is above this fraction of its bounds */
    /* the other APIs and pages */
    bool metrics_vllm;            /* /metrics also under vLLM's names (--metrics-names vllm) */
    bool ui;                      /* the chat page at / (--no-ui: off) */
    size_t responses_store_bytes; /* stored /v1/responses; 0: none stored */
    int responses_store_max;      /* and their count */
    double responses_store_ttl_s; /* how long each is kept */
    /* each API key's share of the stored responses' bytes; 0: the whole store */
    size_t responses_store_key_bytes;
} srv_http_config;

typedef struct srv_watch srv_watch;

/* What every handler shares. Owned by the main thread; fields marked (ready) are set
 * before phase becomes READY and never change afterwards. */
typedef struct srv_app {
    srv_http_config http;
    pthread_rwlock_t lifecycle; /* guards phase transitions and sched (see DESIGN) */
    _Atomic int phase;          /* srv_phase */
    char load_error[256];       /* SRV_PHASE_FAILED: why */
    srv_model_info model;       /* (ready) */
    sched *sched;               /* (ready) until shutdown */
    srv_watch *watch;
    _Atomic long live_generations;   /* accepted generation requests whose connection is open */
    struct srv_auth *_Atomic auth;   /* security (auth.c): the API keys; NULL until loaded at start */
    struct srv_prep *prep;           /* the preparation workers (prep.c): srv_http_start to srv_http_stop */
    struct srv_deadlines *deadlines; /* header and body deadlines (deadlines.c): the same span */
} srv_app;

typedef struct srv_http srv_http;

/* Binds and starts serving app (borrowed until srv_http_stop). Caller owns *out. */
sp_status srv_http_start(srv_app *app, srv_http **out);
/* The bound port (useful with port 0). */
int srv_http_port(const srv_http *h);
/* The port of the --admin-port daemon (probes and metrics only); 0: none. */
int srv_http_admin_port(const srv_http *h);
/* Stops listening, closes every connection and joins the pool threads. */
void srv_http_stop(srv_http *h);

/* The scheduler is "stuck" for /health when it has not ticked or woken for this long
 * (one step of the largest batch takes well under a second on the default model). */
#define SRV_HEARTBEAT_STALE_S 30.0

/* GET /metrics (metrics.c): Prometheus text; s may be NULL (loading, shutting down).
 * Caller owns the text; free(). NULL on out of memory. */
char *srv_metrics_render(const srv_app *app, const sched *s);

/* ---- the watcher (watch.c) ---- */

/* A connection the watcher looks after while its generation runs. */
typedef struct srv_watched {
    int fd;
    void (*on_hangup)(void *arg); /* the client is gone: cancel */
    void (*on_quiet)(void *arg);  /* nothing sent for keepalive_s: wake the stream */
    void *arg;
    _Atomic double last_write; /* sched_now() of the last bytes handed to the socket */
    bool streaming;
    bool hung_up; /* watcher thread: on_hangup was called */
    int _slot;    /* index in the watcher's table, -1 when not watched */
} srv_watched;

sp_status srv_watch_create(double keepalive_s, srv_watch **out);
void srv_watch_destroy(srv_watch *w);
/* Starts watching w (borrowed until srv_watch_remove returns). */
sp_status srv_watch_add(srv_watch *wt, srv_watched *w);
/* Stops watching; after it returns no callback for w runs or will run. */
void srv_watch_remove(srv_watch *wt, srv_watched *w);

/* ---- security (auth.c) ---- */

/* The API key set (--api-key, --api-key-file), reloaded on SIGHUP. Any thread may
 * call srv_auth_check; srv_auth_reload runs on the main thread. */
typedef struct srv_auth srv_auth;

/* Longest API key accepted, in bytes (keys are compared in fixed slots of this size). */
#define SRV_AUTH_KEY_MAX 256

/* Builds the key set from config->api_keys and config->api_key_file (config borrowed
 * until srv_auth_destroy). No keys configured: the set is empty and every request is
 * authorized. A missing or unreadable file, a file without keys, an empty or too long
 * key, or one with a space or control character is an error naming the file and line.
 * Caller owns *out; free with srv_auth_destroy. */
sp_status srv_auth_create(const srv_http_config *config, srv_auth **out);
void srv_auth_destroy(srv_auth *a);
/* SIGHUP: reads the key file again into a new set and swaps it in atomically
 * (requests in flight finish with the set they started with). On failure the old
 * keys stay in use and the reason is logged and returned. Logs the outcome. */
sp_status srv_auth_reload(srv_auth *a);
/* How many keys are in use (0: authentication is off). */
int srv_auth_key_count(srv_auth *a);
/* Whether `authorization` (the Authorization header's value, or NULL) is
 * `Bearer <one of the keys>`, compared in constant time. When not, fills err with
 * OpenAI's 401 (invalid_request_error, invalid_api_key). Always true with no keys. */
bool srv_auth_check(srv_auth *a, const char *authorization, srv_error *err);
/* Who a request speaks for, for what requests may share (the speculative suffix
 * cache): a hash of its API key; 0 when authentication is off (a is NULL or has no
 * keys). Call after srv_auth_check accepted the header. */
uint64_t srv_auth_tenant(srv_auth *a, const char *authorization);

/* ---- systemd (notify.c) ---- */

/* systemd's notify protocol (sd_notify(3)) without libsystemd. Every function does
 * nothing when $NOTIFY_SOCKET is unset (not started by systemd with Type=notify). */
typedef struct srv_notify srv_notify;

/* Sends one message ("KEY=VALUE" lines) to $NOTIFY_SOCKET (a path, or an abstract
 * name when it starts with '@'). SP_OK when sent or when there is no socket; an error
 * naming the socket otherwise. Any thread. */
sp_status srv_notify_send(const char *message);
/* STATUS=<the formatted text>, newlines turned into spaces; failures are logged. */
void srv_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* READY=1 with MAINPID and the first STATUS= line. Main thread, once the model is
 * loaded, the port listens and app->phase is READY. Failures are logged. */
void srv_notify_ready(srv_app *app);
/* STOPPING=1 (shutdown began). Failures are logged. */
void srv_notify_stopping(void);
/* Starts the "sd-watchdog" thread: STOPPING=1 when it sees the drain begin, and each
 * period (WATCHDOG_USEC/2; 5 s without a watchdog) a STATUS= line with the model and
 * the load, plus WATCHDOG=1 while the scheduler's heartbeat is younger than
 * SRV_HEARTBEAT_STALE_S. Watchdog only when $WATCHDOG_USEC is set and $WATCHDOG_PID is
 * absent or this process. app is borrowed until srv_notify_stop. *out is NULL without
 * NOTIFY_SOCKET. Caller owns *out; free with srv_notify_stop (before the scheduler is
 * destroyed). */
sp_status srv_notify_start(srv_app *app, srv_notify **out);
/* Stops and joins the thread; NULL is a no-op. */
void srv_notify_stop(srv_notify *n);

/* ---- metrics and access log ---- */

/* Counts one HTTP request for /metrics' spindle_http_requests_total. endpoint is the
 * route path, or "other" for unknown paths; static storage (it is kept). status is
 * what was answered (499: the client left before an answer). Lock-free; any thread. */
void srv_metrics_count_http(const char *endpoint, int status);
/* Counts n idle connections closed to admit new ones into a full connection table, for
 * /metrics' spindle_http_idle_connections_closed_total. Lock-free; any thread. */
void srv_metrics_count_idle_closed(int n);
/* Counts a new connection closed at once because the table was full of connections with
 * a request in progress (spindle_http_connections_refused_total). Lock-free; any thread. */
void srv_metrics_count_refused(void);

/* One access log entry (access_log.c): what on_completed knows of a finished HTTP
 * request. Strings are borrowed for the call; NULL ones are left out ("-" in text). */
typedef struct srv_access_entry {
    const char *id; /* the response id (chatcmpl-..., cmpl-...) of a generation */
    const char *method;
    const char *path;
    int status;
    int64_t prompt_tokens, completion_tokens; /* as usage counts them */
    double ttft_s;      /* seconds from arrival to the first token (first choice to get one); < 0: none */
    double duration_s;  /* from the first byte of the request to its end */
    const char *finish; /* the choices' finish reasons, comma-separated (stop, length, cancelled, error) */
    const char *cancel; /* why it ended early: client_gone, timeout, shutdown, error */
    const char *prompt; /* JSON text of the prompt (log_prompts only) */
} srv_access_entry;

/* The entry as one line without the newline: text
 * `spindle: access: id=... method=POST path=/v1/chat/completions status=200 ...` or
 * one JSON object. Caller owns the text; free(). NULL on out of memory. */
char *srv_access_log_format(sp_log_format format, const srv_access_entry *e);
/* Writes the line to stderr (one write) when config->access_log is set. Any thread. */
void srv_access_log_write(const srv_http_config *config, const srv_access_entry *e);

#endif

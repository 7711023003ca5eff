/* http_internal.h: what the files of server/http/ share with each other and nobody
 * else: the per-request connection state, the responses every answer goes through, the
 * preparation workers, deadlines, framing and the daemon's security options. The only
 * header besides server/http/'s .c files that includes <microhttpd.h>. */
#ifndef SP_SERVER_HTTP_INTERNAL_H
#define SP_SERVER_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/strbuf.h"
#include "server/http/http.h"

/* ==== The HTTP transport ====
 * What the transport's files share with each other and nobody else: the per-request
 * connection state (srv_conn) and the few functions that cross between them. http.c
 * owns the daemon, routing, and a request's start and end; http_send.c the responses
 * every answer goes through; http_generation.c owns a generation's
 * connection from submit to the last byte (the suspend/resume handshake, SSE, the
 * non-streaming answer).
 *
 * DESIGN: see server/http/http.h. One srv_conn per HTTP request, created on the first
 * handler call and freed in on_completed (http.c), which libmicrohttpd calls once the
 * request is over (answered, failed, or the client gone). A generation's srv_conn is
 * also reachable from the scheduler thread (notify) and the watcher thread (hang-up,
 * keep-alive) until on_completed detaches it from both; its `lock` orders the
 * suspend/resume handshake described in http_generation.c.
 */

typedef struct srv_conn srv_conn;

/* Where a connection's body preparation stands (prep.c). */
typedef enum srv_prep_state {
    SRV_PREP_NONE,     /* not submitted */
    SRV_PREP_QUEUED,   /* the connection is suspended until a worker is done */
    SRV_PREP_DONE,     /* the prep_* fields hold the result */
    SRV_PREP_CANCELLED /* shutdown came first: answer 503 */
} srv_prep_state;

/* One choice of a generation (http_generation.c). */
typedef struct srv_choice srv_choice;

struct srv_conn {
    srv_app *app;
    struct MHD_Connection *connection;
    /* the body, accumulated across handler calls (HTTP threads only) */
    char *body;
    size_t body_len, body_cap;
    bool body_too_large;
    size_t body_dropped; /* bytes read and dropped past max_body_bytes (lingering, http.c) */
    bool refused;        /* refused from its headers (413, 414, 431): the body is read and dropped, then */
    srv_error refusal;   /* this is the answer (http.c: refuse_lingering) */
    /* the generation, once submitted */
    bool dispatched;
    bool admin;        /* arrived on the --admin-port daemon: /health, /ready, /metrics only */
    int retry_after_s; /* a refused submission's Retry-After (retry_after.c); 0: the default */
    bool have_request;
    srv_request request;
    sched_request **reqs; /* (n_reqs), one reference each */
    srv_choice *choices;  /* (n_reqs) */
    int n_reqs;
    char id[48];
    int64_t created;
    srv_endpoint api;           /* the API of the route (errors take its shape) */
    uint64_t tenant;            /* srv_auth_tenant of the request's key */
    srv_api_stream *api_stream; /* a stream of an API over chat: its translator (api_bridge.c) */
    srv_watched watched;
    bool watching;
    _Atomic bool keepalive_wanted;
    /* the suspend/resume handshake (see http_generation.c) */
    pthread_mutex_t lock;
    bool suspended;
    bool woken;
    /* SSE bytes not yet handed to libmicrohttpd (reader only) */
    char *out;
    size_t out_len, out_off, out_cap;
    bool stream_errored;
    bool stream_done;
    /* copies of new output taken under a request's lock (reader only) */
    char *copy_text;
    size_t copy_text_cap;
    sched_token *copy_tokens, *copy_top;
    size_t copy_tokens_cap, copy_top_cap;
    /* preparation off the HTTP threads (prep.c): written by a worker under lock before it
     * resumes the connection; read by the handler after */
    srv_prep_state prep_state;
    int prep_route;        /* http.c's route kind being prepared */
    char *prep_text;       /* a JSON endpoint's answer, serialized; NULL: prep_err says why */
    sp_status prep_status; /* a generation's srv_request_parse (into request) */
    srv_error prep_err;
    /* metrics and access log (HTTP threads) */
    double started; /* sched_now() at the first handler call */
    int status;     /* the status srv__queue_response answered; 0: none (yet) */
    char method[16];
    char path[256]; /* the URL's path, truncated */
};

/* A request refused from its headers (413 for the body announced, 414, 431) or a body
 * over --max-body-bytes has its body read and dropped up to this many bytes past the
 * limit before the answer, so that the client reads it (http.c: refuse_lingering). */
enum { SRV_LINGER_BYTES = 16 << 20 };

/* libmicrohttpd's per-connection memory is twice --max-header-bytes plus this, so that a
 * request line or headers up to about twice the limit are refused by http.c (an error
 * object, lingering) rather than by libmicrohttpd (its HTML page and a close at once; just
 * under its memory limit it even closes without an answer, having no room for one). */
enum { SRV_HEADER_POOL_SLACK = 4096 };

/* ---- http.c: a request's credentials (HTTP threads) ---- */

/* The request's credentials as an Authorization header value: the header itself, else
 * Anthropic's x-api-key as "Bearer KEY" (written into buf); NULL when neither. */
enum { SRV_AUTHORIZATION_MAX = 1024 };

const char *srv__authorization(srv_conn *conn, char *buf, size_t cap);

/* ---- http_send.c: responses (HTTP threads) ---- */

/* The Access-Control-Allow-Origin value for conn: its Origin when allowed, "*" when "*"
 * is configured; NULL when CORS is off, there is no Origin or it is not allowed. */
const char *srv__cors_allow_origin(const srv_conn *conn);

/* Queues resp (takes ownership of it) with what every answer carries (CORS) and
 * records the status for metrics and the access log. */
enum MHD_Result srv__queue_response(srv_conn *conn, int status, struct MHD_Response *resp);
/* A body of content_type (takes ownership of body, malloc'd; NULL: out of memory,
 * MHD_NO) with one more header when header is not NULL. */
enum MHD_Result srv__send_body(srv_conn *conn, int status, char *body, const char *content_type, const char *header,
                               const char *header_value);
/* A JSON body (takes ownership of body; NULL: out of memory, MHD_NO). */
enum MHD_Result srv__send_json(srv_conn *conn, int status, json_t *body);
/* An OpenAI error object with its status and the headers that go with it. */
enum MHD_Result srv__send_error(srv_conn *conn, const srv_error *err);
enum MHD_Result srv__send_status_error(srv_conn *conn, sp_status st, const char *message);
/* Why the server does not take new work in this phase (static text, or app's). */
const char *srv__phase_refusal(srv_phase phase, const srv_app *app);

/* prep.c: the preparation workers (see its DESIGN). fn runs on a worker and fills conn's
 * prep_* fields. */
typedef struct srv_prep srv_prep;
typedef void (*srv_prep_fn)(srv_conn *conn);
sp_status srv__prep_start(int n_threads, srv_prep **out);
/* From a handler with the whole body: suspends the connection and queues fn(conn). Else
 * nothing is queued nor suspended: SP_ERR_UNAVAILABLE once stopping, SP_ERR_NOMEM. */
sp_status srv__prep_submit(srv_prep *p, srv_conn *conn, srv_prep_fn fn);
/* Joins the workers and resumes queued connections as cancelled; then refuses jobs. */
void srv__prep_stop(srv_prep *p);
/* After the HTTP daemon has stopped. */
void srv__prep_free(srv_prep *p);

/* deadlines.c: total-time limits on a request's headers and body (see its comment). */
typedef struct srv_deadlines srv_deadlines;
typedef struct srv_deadline srv_deadline; /* one connection's */
typedef enum srv_deadline_phase {
    SRV_DEADLINE_HEADERS,     /* a request line is in: the headers' deadline stands (not idle now) */
    SRV_DEADLINE_BODY,        /* the headers are in: the body within body_s */
    SRV_DEADLINE_NONE,        /* the request is in: nothing timed here */
    SRV_DEADLINE_NEXT_REQUEST /* answered: the next request's headers within idle_s + header_s */
} srv_deadline_phase;
sp_status srv__deadlines_start(double header_s, double body_s, double idle_s, srv_deadlines **out);
void srv__deadlines_stop(srv_deadlines *d); /* after the daemons have stopped */
/* Before the daemon starts: past capacity open drainable connections, a new one closes the
 * oldest idle one, or is refused when none is idle (idle_drain.c). Default: no limit. */
void srv__deadlines_drain_at(srv_deadlines *d, int capacity);
/* A new connection (its headers due within header_s); drainable: counted against the
 * capacity, and closed when idle and the oldest (the main port's; not the admin port's).
 * NULL when out of memory (untimed). */
srv_deadline *srv__deadline_open(srv_deadlines *d, int fd, bool drainable);
/* Before libmicrohttpd closes the socket. */
void srv__deadline_close(srv_deadlines *d, srv_deadline *e);
void srv__deadline_set(srv_deadlines *d, srv_deadline *e, srv_deadline_phase phase);

/* idle_drain.c: the idle connections a full table closes, oldest first (see its comment).
 * A connection's link lives in its deadline entry; the table is the deadlines' (its lock). */
typedef enum srv_idle_state {
    SRV_IDLE_FRESH,  /* connected, no request line yet: idle once past the grace */
    SRV_IDLE_BUSY,   /* a request in progress: never closed here */
    SRV_IDLE_KEPT,   /* answered, kept alive: idle */
    SRV_IDLE_CLOSING /* picked or refused: its socket is shut down; no longer counted */
} srv_idle_state;
typedef struct srv_idle_link {
    struct srv_idle_link *prev, *next; /* in the fresh or kept list; unlinked when busy or closing */
    double since;                      /* sched_now() when it connected (fresh) or was answered (kept) */
    srv_idle_state state;
} srv_idle_link;
typedef struct srv_idle_list {
    srv_idle_link *head, *tail; /* oldest first */
} srv_idle_list;
typedef struct srv_idle_table {
    srv_idle_list fresh, kept;
    int open;       /* connections counted: all but the closing ones */
    int capacity;   /* open connections kept before idle ones are closed */
    double grace_s; /* a fresh connection is idle after this long */
} srv_idle_table;
void srv__idle_init(srv_idle_table *t, int capacity);
void srv__idle_open(srv_idle_table *t, srv_idle_link *c, double now); /* counted; fresh */
void srv__idle_busy(srv_idle_table *t, srv_idle_link *c);             /* a request line is in */
void srv__idle_kept(srv_idle_table *t, srv_idle_link *c, double now); /* answered */
/* A new connection past capacity with none idle to close: the caller shuts it down. */
void srv__idle_refuse(srv_idle_table *t, srv_idle_link *c);
void srv__idle_close(srv_idle_table *t, srv_idle_link *c); /* the connection is gone */
/* While more than capacity are open: the connection idle the longest (kept, or fresh past
 * the grace), no longer counted; the caller shuts its socket down. NULL: none to close. */
srv_idle_link *srv__idle_pick(srv_idle_table *t, double now);
/* A picked connection found with bytes waiting in its socket (a request on its way, not
 * idle after all): counted again, as busy. */
void srv__idle_unpick(srv_idle_table *t, srv_idle_link *c);
/* --max-connections within the process's open file limit (with room for the rest). */
int srv__idle_capacity(int max_connections);
/* libmicrohttpd's own connection limit for that capacity: above it by the connections
 * whose sockets are shut down but not yet closed. */
int srv__idle_daemon_limit(int capacity);

/* ui.c: GET /, the built-in chat page (server/http/ui/chat.html, embedded at build time). */
enum MHD_Result srv__ui_page(srv_conn *conn);

/* retry_after.c: the seconds a 429 asks the client to wait: the queue's length over the
 * measured drain rate, jittered by up to half either way, within 1..60. */
int srv__retry_after_s(const sched *s);

/* http_framing.c: whether the request's framing headers are unambiguous (one
 * Content-Length of digits, or Transfer-Encoding exactly "chunked", never both; header
 * names of token characters); when not, a message naming the problem goes into why. */
bool srv__framing_ok(struct MHD_Connection *connection, char *why, size_t cap);
/* The same check header by header (what srv__framing_ok runs, and the fuzz harness):
 * start from a zeroed srv_framing, add every header, then ask for the verdict. */
typedef struct srv_framing {
    int content_lengths;
    int transfer_encodings;
    char why[160]; /* the first problem; empty while none */
} srv_framing;
void srv__framing_add(srv_framing *scan, const char *name, const char *value);
bool srv__framing_verdict(srv_framing *scan, char *why, size_t cap);

/* ---- http_generation.c: a generation's connection (HTTP threads) ---- */

/* POST /v1/chat/completions and /v1/completions, once a preparation worker has parsed
 * conn's body into conn->request (have_request): submits one scheduler request per
 * choice, watches the socket, then answers a stream at once or suspends until the
 * choices are done. */
enum MHD_Result srv__generation_start(srv_conn *conn);
/* A non-streaming generation's handler call after a resume: answers once every
 * choice is done, suspends again otherwise. */
enum MHD_Result srv__generation_continue(srv_conn *conn);

/* ==== The transport's security options (http_security.c) ====
 * The libmicrohttpd daemon options that the
 * security settings add: TLS from two PEM files (libmicrohttpd with GnuTLS) and the
 * per-connection memory limit that bounds the request line and headers.
 * Used once, by srv_http_start on the main thread. */

typedef struct srv_http_security {
    char *tls_cert, *tls_key;         /* the PEM texts (owned; the key wiped on free) */
    struct MHD_OptionItem options[4]; /* an MHD_OPTION_ARRAY, MHD_OPTION_END-terminated */
} srv_http_security;

/* Fills sec->options from cfg and adds to *flags: TLS when both PEM files are set
 * (one without the other, an unreadable file or a non-PEM file is an error naming
 * the flag and path), and libmicrohttpd's per-connection memory limit when
 * max_header_bytes is set (2 x max_header_bytes + SRV_HEADER_POOL_SLACK: http.c answers
 * past max_header_bytes itself; a request line or headers that do not fit even that get
 * libmicrohttpd's own answer: 414 for the request line, 431 for the headers).
 * Free with srv_http_security_free, also after a failure. */
sp_status srv_http_security_init(const srv_http_config *cfg, srv_http_security *sec, unsigned *flags);
void srv_http_security_free(srv_http_security *sec);

#endif

/* http_internal.h: what the transport's two files share with each other and nobody
 * else: the per-request connection state (srv_conn) and the few functions that cross
 * between them. http.c owns the daemon, routing, the responses every answer goes
 * through, and a request's start and end; http_generation.c owns a generation's
 * connection from submit to the last byte (the suspend/resume handshake, SSE, the
 * non-streaming answer).
 *
 * DESIGN: see server/http.h. One srv_conn per HTTP request, created on the first
 * handler call and freed in on_completed (http.c), which libmicrohttpd calls once the
 * request is over (answered, failed, or the client gone). A generation's srv_conn is
 * also reachable from the scheduler thread (notify) and the watcher thread (hang-up,
 * keep-alive) until on_completed detaches it from both; its `lock` orders the
 * suspend/resume handshake described in http_generation.c.
 */
#ifndef SP_SERVER_HTTP_INTERNAL_H
#define SP_SERVER_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/http.h"

typedef struct srv_conn srv_conn;
/* One choice of a generation (http_generation.c). */
typedef struct srv_choice srv_choice;

struct srv_conn {
    srv_app *app;
    struct MHD_Connection *connection;
    /* the body, accumulated across handler calls (HTTP threads only) */
    char *body;
    size_t body_len, body_cap;
    bool body_too_large;
    /* the generation, once submitted */
    bool dispatched;
    bool have_request;
    srv_request request;
    sched_request **reqs; /* (n_reqs), one reference each */
    srv_choice *choices;  /* (n_reqs) */
    int n_reqs;
    char id[48];
    int64_t created;
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
    /* metrics and access log (HTTP threads) */
    double started; /* sched_now() at the first handler call */
    int status;     /* the status srv__queue_response answered; 0: none (yet) */
    char method[16];
    char path[256]; /* the URL's path, truncated */
};

/* ---- http.c: responses (HTTP threads) ---- */

/* Queues resp (takes ownership of it) with what every answer carries (CORS) and
 * records the status for metrics and the access log. */
enum MHD_Result srv__queue_response(srv_conn *conn, int status, struct MHD_Response *resp);
/* A JSON body (takes ownership of body; NULL: out of memory, MHD_NO). */
enum MHD_Result srv__send_json(srv_conn *conn, int status, json_t *body);
/* An OpenAI error object with its status and the headers that go with it. */
enum MHD_Result srv__send_error(srv_conn *conn, const srv_error *err);
enum MHD_Result srv__send_status_error(srv_conn *conn, sp_status st, const char *message);
/* Why the server does not take new work in this phase (static text, or app's). */
const char *srv__phase_refusal(srv_phase phase, const srv_app *app);

/* ---- http_generation.c: a generation's connection (HTTP threads) ---- */

/* POST /v1/chat/completions and /v1/completions: parses conn's body, submits one
 * scheduler request per choice, watches the socket, then answers a stream at once or
 * suspends until the choices are done. */
enum MHD_Result srv__generation_start(srv_conn *conn, srv_endpoint endpoint);
/* A non-streaming generation's handler call after a resume: answers once every
 * choice is done, suspends again otherwise. */
enum MHD_Result srv__generation_continue(srv_conn *conn);
/* Grows *p (of *cap elements of elem bytes) to hold need elements, doubling; false
 * on out of memory (*p and *cap unchanged). */
bool srv__grow(void **p, size_t *cap, size_t need, size_t elem);

#endif

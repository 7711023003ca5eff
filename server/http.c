/* http.c: the HTTP transport on libmicrohttpd: routing, request bodies, and the life
 * of a generation's connection (submit, suspend, resume on the scheduler's notify,
 * stream SSE chunks or send one JSON body, cancel when the client leaves).
 *
 * DESIGN: see server/http.h. One srv_conn per HTTP request, created on the first
 * handler call and freed in on_completed, which libmicrohttpd calls once the request
 * is over (answered, failed, or the client gone). A generation's srv_conn is also
 * reachable from the scheduler thread (notify) and the watcher thread (hang-up,
 * keep-alive) until on_completed detaches it from both; its `lock` orders the
 * suspend/resume handshake:
 *   handler/reader: lock; woken = false; unlock; look at the outputs; nothing new ->
 *                   lock; if woken: look again; else suspended = true, suspend; unlock
 *   notify:         lock; woken = true; if suspended: suspended = false, resume; unlock
 * so a token that lands between the look and the suspend is never missed.
 * Lock order: a request's lock (held by the scheduler during notify) before srv_conn's.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common/log.h"
#include "server/http_security.h"

enum { STREAM_BLOCK_BYTES = 16 * 1024 };

struct srv_http {
    struct MHD_Daemon *daemon;
    srv_app *app;
    int port;
    srv_http_security security; /* TLS and the header limit (http_security.c) */
};

typedef struct srv_conn srv_conn;

/* One choice of a generation: the HTTP side's cursor into its request's output. */
typedef struct srv_choice {
    srv_conn *conn;
    int index;
    size_t text_sent;
    int32_t tokens_sent;
    bool role_sent;
    bool finish_sent;
} srv_choice;

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
    /* the suspend/resume handshake (see DESIGN) */
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
    int status;     /* the status queue_response answered; 0: none (yet) */
    char method[16];
    char path[256]; /* the URL's path, truncated */
};

/* ---- security: CORS (off unless app->http.n_cors_origins > 0) ---- */

/* The Access-Control-Allow-Origin value for this request: its Origin when that is
 * one of the allowed origins, "*" when "*" is configured; NULL when CORS is off, the
 * request has no Origin, or its origin is not allowed. */
static const char *cors_allow_origin(const srv_conn *conn) {
    const srv_http_config *cfg = &conn->app->http;
    if (cfg->n_cors_origins <= 0) return NULL;
    const char *origin = MHD_lookup_connection_value(conn->connection, MHD_HEADER_KIND, "Origin");
    if (!origin) return NULL;
    for (int i = 0; i < cfg->n_cors_origins; i++) {
        if (strcmp(cfg->cors_origins[i], "*") == 0) return "*";
        if (strcasecmp(cfg->cors_origins[i], origin) == 0) return origin;
    }
    return NULL;
}

/* ---- responses ---- */

/* Every response (a body or a stream) is queued here: the one place for what all
 * answers share (headers every response carries, what the access log records). */
static enum MHD_Result queue_response(srv_conn *conn, int status, struct MHD_Response *resp) {
    /* security (CORS): an allowed origin may read every answer; with CORS on, answers
     * depend on the Origin, so caches must key on it */
    if (conn->app->http.n_cors_origins > 0) {
        const char *allow_origin = cors_allow_origin(conn);
        if (allow_origin) MHD_add_response_header(resp, "Access-Control-Allow-Origin", allow_origin);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
    }
    enum MHD_Result r = MHD_queue_response(conn->connection, (unsigned)status, resp);
    MHD_destroy_response(resp);
    if (r == MHD_YES) conn->status = status; /* metrics and access log */
    return r;
}

static enum MHD_Result send_body(srv_conn *conn, int status, char *body, const char *content_type, const char *header,
                                 const char *header_value) {
    if (!body) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (header) MHD_add_response_header(resp, header, header_value);
    return queue_response(conn, status, resp);
}

static enum MHD_Result send_json(srv_conn *conn, int status, json_t *body) {
    char *text = body ? json_dumps(body, SRV_JSON_FLAGS) : NULL;
    json_decref(body);
    return send_body(conn, status, text, "application/json", NULL, NULL);
}

static enum MHD_Result send_error(srv_conn *conn, const srv_error *err) {
    const char *header = NULL, *value = NULL;
    if (err->http_status == 429 || err->http_status == 503) {
        header = MHD_HTTP_HEADER_RETRY_AFTER;
        value = "1";
    } else if (err->http_status == 408 || err->http_status == 500) {
        /* the openai SDKs retry 408 and 5xx: running a timed-out or failed generation
         * again is not what anyone wants (they honour this header) */
        header = "x-should-retry";
        value = "false";
    } else if (err->http_status == 401) {
        /* security (API keys): RFC 6750's challenge */
        header = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
        value = "Bearer";
    }
    return send_body(conn, err->http_status, srv_error_json(err), "application/json", header, value);
}

static enum MHD_Result send_status_error(srv_conn *conn, sp_status st, const char *message) {
    srv_error err;
    srv_error_from_status(&err, st, message);
    return send_error(conn, &err);
}

/* ---- the suspend/resume handshake ---- */

static void conn_wake(srv_conn *conn) {
    pthread_mutex_lock(&conn->lock);
    conn->woken = true;
    if (conn->suspended) {
        conn->suspended = false;
        MHD_resume_connection(conn->connection);
    }
    pthread_mutex_unlock(&conn->lock);
}

static void conn_clear_woken(srv_conn *conn) {
    pthread_mutex_lock(&conn->lock);
    conn->woken = false;
    pthread_mutex_unlock(&conn->lock);
}

/* Suspends unless a wake arrived since conn_clear_woken; true when suspended. */
static bool conn_try_suspend(srv_conn *conn) {
    pthread_mutex_lock(&conn->lock);
    bool suspend = !conn->woken;
    if (suspend) {
        conn->suspended = true;
        MHD_suspend_connection(conn->connection);
    }
    pthread_mutex_unlock(&conn->lock);
    return suspend;
}

/* The scheduler's notify, under the request's lock. A non-streaming request only
 * needs waking once its choice is done. */
static void choice_notify(void *arg) {
    srv_choice *choice = arg;
    srv_conn *conn = choice->conn;
    if (!conn->request.stream && !sched_request_output(conn->reqs[choice->index])->done) return;
    conn_wake(conn);
}

static void conn_on_hangup(void *arg) {
    srv_conn *conn = arg;
    for (int i = 0; i < conn->n_reqs; i++) sched_request_cancel(conn->reqs[i]);
}

static void conn_on_quiet(void *arg) {
    srv_conn *conn = arg;
    atomic_store(&conn->keepalive_wanted, true);
    conn_wake(conn);
}

/* ---- streaming ---- */

static bool out_append(srv_conn *conn, const char *text, size_t len) {
    if (conn->out_len + len > conn->out_cap) {
        size_t cap = conn->out_cap ? conn->out_cap : 4096;
        while (cap < conn->out_len + len) cap *= 2;
        char *p = realloc(conn->out, cap);
        if (!p) return false;
        conn->out = p;
        conn->out_cap = cap;
    }
    memcpy(conn->out + conn->out_len, text, len);
    conn->out_len += len;
    return true;
}

/* Appends an event the API layer built (takes ownership of it). */
static bool out_append_owned(srv_conn *conn, char *event) {
    if (!event) return false;
    bool ok = out_append(conn, event, strlen(event));
    free(event);
    return ok;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

/* What one choice produced since the last look, copied out under its lock. */
typedef struct choice_news {
    size_t text_len;
    int32_t n_tokens;
    int top_logprobs;
    bool done;
    sched_finish finish;
    sp_status error;
    char error_message[256];
} choice_news;

static bool choice_take_news(srv_conn *conn, srv_choice *choice, choice_news *news) {
    sched_request *r = conn->reqs[choice->index];
    bool ok = true;
    sched_request_lock(r);
    const sched_output *out = sched_request_output(r);
    *news = (choice_news){.done = out->done, .finish = out->finish, .top_logprobs = out->top_logprobs};
    news->text_len = out->text_len - choice->text_sent;
    news->n_tokens = conn->request.logprobs ? out->n_tokens - choice->tokens_sent : 0;
    size_t n_top = (size_t)news->n_tokens * (size_t)out->top_logprobs;
    if (!grow((void **)&conn->copy_text, &conn->copy_text_cap, news->text_len + 1, 1) ||
        !grow((void **)&conn->copy_tokens, &conn->copy_tokens_cap, (size_t)news->n_tokens + 1, sizeof(sched_token)) ||
        !grow((void **)&conn->copy_top, &conn->copy_top_cap, n_top + 1, sizeof(sched_token))) {
        ok = false;
    } else {
        /* (the output's arrays may be NULL when empty: copy only what there is) */
        if (news->text_len) memcpy(conn->copy_text, out->text + choice->text_sent, news->text_len);
        if (news->n_tokens)
            memcpy(conn->copy_tokens, out->tokens + choice->tokens_sent, sizeof(sched_token) * (size_t)news->n_tokens);
        if (n_top)
            memcpy(conn->copy_top, out->top + (size_t)choice->tokens_sent * (size_t)out->top_logprobs,
                   sizeof(sched_token) * n_top);
        if (out->done && out->finish == SCHED_FINISH_ERROR) {
            news->error = out->error;
            snprintf(news->error_message, sizeof news->error_message, "%s", out->error_message);
        }
        choice->text_sent = out->text_len;
        if (conn->request.logprobs) choice->tokens_sent = out->n_tokens;
    }
    sched_request_unlock(r);
    return ok;
}

/* Turns whatever the choices produced into SSE events in conn->out. */
static bool stream_collect(srv_conn *conn) {
    const srv_request *rq = &conn->request;
    const srv_model_info *mi = &conn->app->model;
    bool all_finished = true;
    for (int i = 0; i < conn->n_reqs; i++) {
        srv_choice *choice = &conn->choices[i];
        if (choice->finish_sent) continue;
        if (rq->endpoint == SRV_ENDPOINT_CHAT && !choice->role_sent) {
            if (!out_append_owned(conn, srv_sse_role_chunk(rq, mi, conn->id, conn->created, i))) return false;
            choice->role_sent = true;
        }
        choice_news news;
        if (!choice_take_news(conn, choice, &news)) return false;
        bool failed = news.done && (news.finish == SCHED_FINISH_ERROR || news.finish == SCHED_FINISH_CANCELLED);
        const char *finish = news.done && !failed ? srv_finish_reason(news.finish) : NULL;
        if (news.text_len > 0 || news.n_tokens > 0 || finish) {
            char *chunk =
                srv_sse_delta_chunk(rq, mi, conn->id, conn->created, i, conn->copy_text, news.text_len,
                                    conn->copy_tokens, news.n_tokens, conn->copy_top, news.top_logprobs, finish);
            if (!out_append_owned(conn, chunk)) return false;
        }
        if (failed) {
            srv_error err;
            if (news.finish == SCHED_FINISH_CANCELLED)
                srv_error_from_status(&err, SP_ERR_CANCELLED, "the request was cancelled");
            else
                srv_error_from_status(&err, news.error, news.error_message);
            if (!out_append_owned(conn, srv_sse_error_event(&err))) return false;
            conn->stream_errored = true;
        }
        if (news.done)
            choice->finish_sent = true;
        else
            all_finished = false;
    }
    if (!all_finished) return true;
    if (rq->include_usage && !conn->stream_errored) {
        const sched_output *outs[SRV_MAX_N * SRV_MAX_PROMPTS];
        for (int i = 0; i < conn->n_reqs; i++) outs[i] = sched_request_output(conn->reqs[i]); /* done: immutable */
        if (!out_append_owned(conn, srv_sse_usage_chunk(rq, mi, conn->id, conn->created, outs, conn->n_reqs)))
            return false;
    }
    if (!out_append(conn, SRV_SSE_DONE, strlen(SRV_SSE_DONE))) return false;
    conn->stream_done = true;
    return true;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_conn *conn = cls;
    for (;;) {
        if (conn->out_off < conn->out_len) {
            size_t n = conn->out_len - conn->out_off;
            if (n > max) n = max;
            memcpy(buf, conn->out + conn->out_off, n);
            conn->out_off += n;
            atomic_store(&conn->watched.last_write, sched_now());
            return (ssize_t)n;
        }
        conn->out_len = conn->out_off = 0;
        if (conn->stream_done) return MHD_CONTENT_READER_END_OF_STREAM;
        conn_clear_woken(conn);
        if (!stream_collect(conn)) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
        if (conn->out_len > 0) continue;
        if (atomic_exchange(&conn->keepalive_wanted, false)) {
            /* an SSE comment: clients ignore it, proxies see a live connection */
            static const char comment[] = ": keep-alive\n\n";
            if (!out_append(conn, comment, sizeof comment - 1)) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (conn_try_suspend(conn)) return 0;
    }
}

/* ---- non-streaming ---- */

static bool all_done(srv_conn *conn) {
    for (int i = 0; i < conn->n_reqs; i++) {
        sched_request_lock(conn->reqs[i]);
        bool done = sched_request_output(conn->reqs[i])->done;
        sched_request_unlock(conn->reqs[i]);
        if (!done) return false;
    }
    return true;
}

static enum MHD_Result send_completion(srv_conn *conn) {
    const sched_output *outs[SRV_MAX_N * SRV_MAX_PROMPTS];
    for (int i = 0; i < conn->n_reqs; i++) {
        outs[i] = sched_request_output(conn->reqs[i]); /* done: immutable from now on */
        if (outs[i]->finish == SCHED_FINISH_ERROR)
            return send_status_error(conn, outs[i]->error, outs[i]->error_message);
        if (outs[i]->finish == SCHED_FINISH_CANCELLED)
            return send_status_error(conn, SP_ERR_CANCELLED, "the request was cancelled");
    }
    return send_json(
        conn, 200, srv_render_response(&conn->request, &conn->app->model, conn->id, conn->created, outs, conn->n_reqs));
}

/* Called again after every resume until the answer is queued. */
static enum MHD_Result continue_completion(srv_conn *conn) {
    for (;;) {
        conn_clear_woken(conn);
        if (all_done(conn)) return send_completion(conn);
        if (conn_try_suspend(conn)) return MHD_YES;
    }
}

/* Why the server does not take new work in this phase. */
static const char *phase_refusal(srv_phase phase, const srv_app *app) {
    switch (phase) {
    case SRV_PHASE_LOADING: return "Loading model";
    case SRV_PHASE_DRAINING: return "the server is draining (shutting down): retry on another replica";
    case SRV_PHASE_SHUTTING_DOWN: return "the server is shutting down";
    case SRV_PHASE_FAILED: return app->load_error;
    default: return "unavailable";
    }
}

/* ---- generation requests ---- */

static enum MHD_Result start_generation(srv_conn *conn, srv_endpoint endpoint) {
    srv_app *app = conn->app;
    srv_error err;
    if (srv_request_parse(endpoint, conn->body, conn->body_len, &app->model, &conn->request, &err) != SP_OK)
        return send_error(conn, &err);
    conn->have_request = true;
    const srv_request *rq = &conn->request;
    int n = rq->n_prompts * rq->n;
    conn->reqs = calloc((size_t)n, sizeof *conn->reqs);
    conn->choices = calloc((size_t)n, sizeof *conn->choices);
    if (!conn->reqs || !conn->choices) return send_status_error(conn, SP_ERR_NOMEM, "out of memory");
    for (int p = 0; p < rq->n_prompts; p++) {
        for (int c = 0; c < rq->n; c++) {
            int i = p * rq->n + c;
            sched_request_params params = srv_request_choice_params(rq, p, c);
            sp_status st = sched_request_create(&params, &conn->reqs[i]);
            if (st != SP_OK) return send_status_error(conn, st, sp_last_error());
            conn->n_reqs = i + 1;
            conn->choices[i] = (srv_choice){.conn = conn, .index = i};
            sched_request_set_notify(conn->reqs[i], choice_notify, &conn->choices[i]);
        }
    }
    srv_response_id(endpoint, conn->id, sizeof conn->id);
    conn->created = (int64_t)time(NULL);

    pthread_rwlock_rdlock(&app->lifecycle);
    sp_status st = atomic_load(&app->phase) == SRV_PHASE_READY
                       ? sched_submit(app->sched, conn->reqs, n)
                       : sp_fail(SP_ERR_UNAVAILABLE, "%s", phase_refusal((srv_phase)atomic_load(&app->phase), app));
    pthread_rwlock_unlock(&app->lifecycle);
    if (st != SP_OK) return send_status_error(conn, st, sp_last_error());
    conn->dispatched = true;
    atomic_fetch_add(&app->live_generations, 1);

    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn->watched = (srv_watched){.fd = info ? info->connect_fd : -1,
                                  .on_hangup = conn_on_hangup,
                                  .on_quiet = conn_on_quiet,
                                  .arg = conn,
                                  .streaming = rq->stream,
                                  ._slot = -1};
    if (conn->watched.fd >= 0 && srv_watch_add(app->watch, &conn->watched) == SP_OK) conn->watching = true;

    if (!rq->stream) return continue_completion(conn);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK_BYTES, stream_reader, conn, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no"); /* nginx: do not buffer the stream */
    return queue_response(conn, MHD_HTTP_OK, resp);
}

/* ---- the other endpoints ---- */

/* GET /health: liveness. 200 while the scheduler thread is alive (it ticked or woke
 * within SRV_HEARTBEAT_STALE_S), also while draining; 503 with the reason when it is
 * stuck, or before the model is loaded. Reads atomics only, never waits on it. */
static enum MHD_Result handle_health(srv_conn *conn) {
    srv_app *app = conn->app;
    srv_error err;
    pthread_rwlock_rdlock(&app->lifecycle);
    srv_phase phase = (srv_phase)atomic_load(&app->phase);
    bool live = phase == SRV_PHASE_READY || phase == SRV_PHASE_DRAINING;
    double age = live && app->sched ? sched_seconds_since_heartbeat(app->sched) : 0.0;
    char fault[256];
    bool faulted = live && app->sched && sched_device_fault(app->sched, fault, sizeof fault);
    pthread_rwlock_unlock(&app->lifecycle);
    if (faulted)
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "the device faulted: %s", fault);
    else if (live && age < SRV_HEARTBEAT_STALE_S)
        return send_json(conn, 200, json_pack("{s:s}", "status", "ok"));
    else if (live)
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "the scheduler has not ticked for %.0f s (stuck)", age);
    else
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "%s", phase_refusal(phase, app));
    return send_error(conn, &err);
}

/* GET /ready: readiness for a load balancer. 200 when the model is loaded, the server
 * is not draining, and the queue is below ready_queue_fraction of both its bounds;
 * 503 with the reason otherwise. */
static enum MHD_Result handle_ready(srv_conn *conn) {
    srv_app *app = conn->app;
    srv_error err;
    pthread_rwlock_rdlock(&app->lifecycle);
    srv_phase phase = (srv_phase)atomic_load(&app->phase);
    sched_stats st = {0};
    const sched_config *cfg = NULL;
    char fault[256];
    bool faulted = false;
    if (phase == SRV_PHASE_READY && app->sched) {
        sched_get_stats(app->sched, &st);
        cfg = sched_get_config(app->sched);
        faulted = sched_device_fault(app->sched, fault, sizeof fault);
    }
    pthread_rwlock_unlock(&app->lifecycle);
    if (faulted) {
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "the device faulted: %s", fault);
        return send_error(conn, &err);
    }
    if (!cfg) {
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "%s", phase_refusal(phase, app));
        return send_error(conn, &err);
    }
    double f = app->http.ready_queue_fraction > 0 ? app->http.ready_queue_fraction : 1.0;
    if (st.queued >= f * cfg->queue_max_requests || (double)st.queued_tokens >= f * (double)cfg->queue_max_tokens) {
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL,
                       "the queue is near full: %d requests and %lld prompt tokens waiting (high-water mark %.0f%% of "
                       "%d requests / %lld tokens)",
                       st.queued, (long long)st.queued_tokens, f * 100, cfg->queue_max_requests,
                       (long long)cfg->queue_max_tokens);
        return send_error(conn, &err);
    }
    return send_json(conn, 200, json_pack("{s:s}", "status", "ready"));
}

static enum MHD_Result handle_metrics(srv_conn *conn) {
    srv_app *app = conn->app;
    pthread_rwlock_rdlock(&app->lifecycle); /* the scheduler is not destroyed while we read it */
    srv_phase phase = (srv_phase)atomic_load(&app->phase);
    bool serving = phase == SRV_PHASE_READY || phase == SRV_PHASE_DRAINING;
    char *text = srv_metrics_render(app, serving ? app->sched : NULL);
    pthread_rwlock_unlock(&app->lifecycle);
    return send_body(conn, 200, text, "text/plain; version=0.0.4", NULL, NULL);
}

static enum MHD_Result handle_json_endpoint(srv_conn *conn,
                                            json_t *(*fn)(const char *, size_t, const srv_model_info *, srv_error *)) {
    srv_error err;
    json_t *body = fn(conn->body, conn->body_len, &conn->app->model, &err);
    if (!body) return send_error(conn, &err);
    return send_json(conn, 200, body);
}

typedef enum route_kind {
    ROUTE_HEALTH,
    ROUTE_READY,
    ROUTE_METRICS,
    ROUTE_MODELS,
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE
} route_kind;

static const struct route {
    const char *path;
    const char *method;
    route_kind kind;
} ROUTES[] = {
    {"/health", "GET", ROUTE_HEALTH},
    {"/ready", "GET", ROUTE_READY},
    {"/metrics", "GET", ROUTE_METRICS},
    {"/v1/models", "GET", ROUTE_MODELS},
    {"/v1/chat/completions", "POST", ROUTE_CHAT},
    {"/v1/completions", "POST", ROUTE_COMPLETIONS},
    {"/tokenize", "POST", ROUTE_TOKENIZE},
    {"/detokenize", "POST", ROUTE_DETOKENIZE},
};

/* ---- security: API keys (auth.c) and CORS preflight ---- */

/* /health and /ready are open (probes carry no key); /metrics too unless
 * metrics_require_key. */
static bool route_needs_key(const srv_app *app, route_kind kind) {
    if (kind == ROUTE_HEALTH || kind == ROUTE_READY) return false;
    if (kind == ROUTE_METRICS) return app->http.metrics_require_key;
    return true;
}

/* Whether the request carries a valid key; when not, fills err (401, or 503 while
 * the keys are not loaded yet). */
static bool route_authorized(srv_conn *conn, srv_error *err) {
    srv_app *app = conn->app;
    srv_auth *auth = atomic_load(&app->auth);
    if (!auth) {
        /* the keys are loaded with the model: until then keyed routes wait like the rest */
        if (app->http.n_api_keys == 0 && !app->http.api_key_file) return true;
        srv_error_make(err, SRV_ERROR_UNAVAILABLE, NULL, "%s", phase_refusal((srv_phase)atomic_load(&app->phase), app));
        return false;
    }
    const char *authorization =
        MHD_lookup_connection_value(conn->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return srv_auth_check(auth, authorization, err);
}

/* OPTIONS on a known path with CORS on: 204, and to an allowed origin what it may
 * send (queue_response adds Access-Control-Allow-Origin). Needs no key: browsers
 * send preflights without one. */
static enum MHD_Result cors_preflight(srv_conn *conn, const struct route *found) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    if (cors_allow_origin(conn)) {
        bool get = strcmp(found->method, "GET") == 0;
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", get ? "GET, HEAD, OPTIONS" : "POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    return queue_response(conn, MHD_HTTP_NO_CONTENT, resp);
}

static const struct route *find_route(const char *url) {
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (strcmp(url, ROUTES[i].path) == 0) return &ROUTES[i];
    return NULL;
}

/* A CORS preflight: OPTIONS on a known path while CORS is on. */
static bool is_preflight(const srv_conn *conn, const char *method) {
    return conn->app->http.n_cors_origins > 0 && strcmp(method, "OPTIONS") == 0;
}

/* On the first handler call, before any body is read: a keyed route without a valid
 * key is answered 401 at once, so an unauthenticated client cannot make the server
 * read (up to max_body_bytes of) its body. Returns whether the request may go on;
 * when not, *result is the handler's answer. */
static bool admit_key(srv_conn *conn, const char *url, const char *method, enum MHD_Result *result) {
    const struct route *found = find_route(url);
    if (!found || is_preflight(conn, method) || !route_needs_key(conn->app, found->kind)) return true;
    srv_error err;
    if (route_authorized(conn, &err)) return true;
    *result = send_error(conn, &err);
    return false;
}

static enum MHD_Result route(srv_conn *conn, const char *url, const char *method) {
    srv_error err;
    const struct route *found = find_route(url);
    if (!found) {
        srv_error_make(&err, SRV_ERROR_NOT_FOUND, NULL, "Invalid URL (%s %s)", method, url);
        return send_error(conn, &err);
    }
    /* security: CORS preflight (no key); the API key was checked by admit_key */
    if (is_preflight(conn, method)) return cors_preflight(conn, found);
    /* HEAD is GET without a body; libmicrohttpd drops the body itself */
    bool method_ok =
        strcmp(method, found->method) == 0 || (strcmp(found->method, "GET") == 0 && strcmp(method, "HEAD") == 0);
    if (!method_ok) {
        srv_error_make(&err, SRV_ERROR_METHOD_NOT_ALLOWED, NULL, "Method %s is not allowed for %s (use %s)", method,
                       url, found->method);
        return send_body(conn, 405, srv_error_json(&err), "application/json", MHD_HTTP_HEADER_ALLOW, found->method);
    }
    if (found->kind == ROUTE_HEALTH) return handle_health(conn);
    if (found->kind == ROUTE_READY) return handle_ready(conn);
    if (found->kind == ROUTE_METRICS) return handle_metrics(conn);
    if (conn->body_too_large) {
        srv_error_make(&err, SRV_ERROR_TOO_LARGE, NULL, "the request body exceeds the limit of %zu bytes",
                       conn->app->http.max_body_bytes);
        return send_error(conn, &err);
    }
    srv_phase phase = (srv_phase)atomic_load(&conn->app->phase);
    if (phase != SRV_PHASE_READY) {
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "%s", phase_refusal(phase, conn->app));
        return send_error(conn, &err);
    }
    switch (found->kind) {
    case ROUTE_MODELS: return send_json(conn, 200, srv_render_models(&conn->app->model));
    case ROUTE_CHAT: return start_generation(conn, SRV_ENDPOINT_CHAT);
    case ROUTE_COMPLETIONS: return start_generation(conn, SRV_ENDPOINT_COMPLETIONS);
    case ROUTE_TOKENIZE: return handle_json_endpoint(conn, srv_tokenize);
    case ROUTE_DETOKENIZE: return handle_json_endpoint(conn, srv_detokenize);
    default: return MHD_NO;
    }
}

/* ---- libmicrohttpd callbacks ---- */

static bool body_append(srv_conn *conn, const char *data, size_t len) {
    if (conn->body_too_large) return true;
    if (conn->body_len + len > conn->app->http.max_body_bytes) {
        conn->body_too_large = true; /* keep reading (and dropping) so the 413 can be sent */
        free(conn->body);
        conn->body = NULL;
        conn->body_len = conn->body_cap = 0;
        return true;
    }
    return grow((void **)&conn->body, &conn->body_cap, conn->body_len + len + 1, 1) &&
           (memcpy(conn->body + conn->body_len, data, len), conn->body_len += len, true);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    srv_app *app = cls;
    srv_conn *conn = *con_cls;
    if (!conn) {
        conn = calloc(1, sizeof *conn);
        if (!conn) return MHD_NO;
        conn->app = app;
        conn->connection = connection;
        conn->watched._slot = -1;
        pthread_mutex_init(&conn->lock, NULL);
        *con_cls = conn;
        conn->started = sched_now(); /* metrics and access log */
        snprintf(conn->method, sizeof conn->method, "%s", method);
        snprintf(conn->path, sizeof conn->path, "%s", url);
        /* refuse a body announced too large before reading it */
        const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (length && strtoull(length, NULL, 10) > app->http.max_body_bytes) {
            srv_error err;
            srv_error_make(&err, SRV_ERROR_TOO_LARGE, NULL,
                           "the request body of %s bytes exceeds the limit of %zu bytes", length,
                           app->http.max_body_bytes);
            return send_error(conn, &err);
        }
        enum MHD_Result refused;
        if (!admit_key(conn, url, method, &refused)) return refused; /* security: before the body */
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        bool ok = body_append(conn, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return ok ? MHD_YES : MHD_NO;
    }
    if (conn->dispatched) return continue_completion(conn); /* resumed: a non-streaming answer may be ready */
    return route(conn, url, method);
}

/* ---- metrics and access log (on_completed) ---- */

/* The endpoint label of a path: the route's own path string, "other" when unknown. */
static const char *route_endpoint(const char *path) {
    const struct route *found = find_route(path);
    return found ? found->path : "other";
}

/* Why a request ended early, from how it finished or (not finished when the
 * connection ended) how the connection ended; NULL when it did not. */
static const char *cancel_reason(const sched_output *o, enum MHD_RequestTerminationCode toe) {
    if (!o || !o->done) {
        /* (a send that failed because the peer closed is WITH_ERROR) */
        switch (toe) {
        case MHD_REQUEST_TERMINATED_COMPLETED_OK: return o ? "client_gone" : NULL;
        case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "connection_timeout";
        case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
        default: return "client_gone";
        }
    }
    if (o->finish == SCHED_FINISH_CANCELLED) return "client_gone"; /* only a hang-up cancels before the end */
    if (o->finish != SCHED_FINISH_ERROR) return NULL;
    if (o->error == SP_ERR_TIMEOUT) return "timeout";
    if (o->error == SP_ERR_UNAVAILABLE) return "shutdown";
    return "error";
}

/* The prompt as JSON text for the access log (log_prompts): chat's rendered prompt,
 * completions' `prompt` as sent. Caller owns it; free(). */
static char *access_prompt(const srv_conn *conn) {
    json_t *prompt = NULL, *body = NULL;
    if (conn->request.endpoint == SRV_ENDPOINT_CHAT && conn->request.prompt_text) {
        prompt = json_string(conn->request.prompt_text);
    } else if (conn->body) {
        body = json_loadb(conn->body, conn->body_len, 0, NULL);
        prompt = json_incref(json_object_get(body, "prompt"));
    }
    char *text = prompt ? json_dumps(prompt, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(prompt);
    json_decref(body);
    return text;
}

/* Counts the request for /metrics and writes its access log line. Before the
 * choices are cancelled, so an unfinished one is told apart from a finished one.
 * (The per-request histograms are the scheduler's: sched_metrics.c.) */
static void conn_account(srv_conn *conn, enum MHD_RequestTerminationCode toe) {
    srv_app *app = conn->app;
    int status = conn->status ? conn->status : 499; /* nginx's "client closed request" */
    srv_metrics_count_http(route_endpoint(conn->path), status);
    if (!app->http.access_log) return;
    srv_access_entry e = {.id = conn->n_reqs > 0 ? conn->id : NULL,
                          .method = conn->method,
                          .path = conn->path,
                          .status = status,
                          .ttft_s = -1,
                          .duration_s = sched_now() - conn->started,
                          .cancel = conn->status ? NULL : cancel_reason(NULL, toe)};
    char finish[64] = "";
    size_t finish_len = 0;
    int n = conn->have_request && conn->request.n > 0 ? conn->request.n : 1;
    for (int i = 0; i < conn->n_reqs; i++) {
        sched_request_lock(conn->reqs[i]);
        const sched_output *o = sched_request_output(conn->reqs[i]);
        if (i % n == 0) e.prompt_tokens += o->prompt_tokens; /* as usage: a prompt counts once */
        e.completion_tokens += o->completion_tokens;
        double ttft = o->timings.first_token > 0 ? o->timings.first_token - o->timings.arrival : -1;
        if (ttft >= 0 && (e.ttft_s < 0 || ttft < e.ttft_s)) e.ttft_s = ttft;
        const char *f = o->done ? srv_finish_reason(o->finish) : "abort";
        const char *c = cancel_reason(o, toe);
        sched_request_unlock(conn->reqs[i]);
        if (!e.cancel) e.cancel = c;
        if (f && !strstr(finish, f)) /* the distinct reasons, in order */
            finish_len +=
                (size_t)snprintf(finish + finish_len, sizeof finish - finish_len, "%s%s", finish_len ? "," : "", f);
        if (finish_len >= sizeof finish) finish_len = sizeof finish - 1;
    }
    e.finish = finish_len ? finish : NULL;
    char *prompt = app->http.log_prompts && conn->have_request ? access_prompt(conn) : NULL;
    e.prompt = prompt;
    srv_access_log_write(&app->http, &e);
    free(prompt);
}

static void on_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)connection;
    srv_app *app = cls;
    srv_conn *conn = *con_cls;
    if (!conn) return;
    *con_cls = NULL;
    conn_account(conn, toe); /* metrics and access log */
    if (conn->watching) srv_watch_remove(app->watch, &conn->watched);
    for (int i = 0; i < conn->n_reqs; i++) {
        /* after this no notify can reach conn; an unfinished request is the client's
         * loss (it went away or the answer failed): free its work */
        sched_request_set_notify(conn->reqs[i], NULL, NULL);
        sched_request_cancel(conn->reqs[i]);
        sched_request_release(conn->reqs[i]);
    }
    if (conn->dispatched) atomic_fetch_sub(&app->live_generations, 1);
    if (conn->have_request) srv_request_free(&conn->request);
    pthread_mutex_destroy(&conn->lock);
    free(conn->reqs);
    free(conn->choices);
    free(conn->body);
    free(conn->out);
    free(conn->copy_text);
    free(conn->copy_tokens);
    free(conn->copy_top);
    free(conn);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n') msg[--n] = '\0';
    sp_log_warn("http: %s", msg);
}

sp_status srv_http_start(srv_app *app, srv_http **out) {
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *addr = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", app->http.port);
    int gai = getaddrinfo(app->http.host, port, &hints, &addr);
    if (gai != 0) return sp_fail(SP_ERR_INVALID_ARG, "--host %s: %s", app->http.host, gai_strerror(gai));
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(addr);
        return sp_fail(SP_ERR_NOMEM, "out of memory");
    }
    h->app = app;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (addr->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    sp_status sec = srv_http_security_init(&app->http, &h->security, &flags);
    if (sec != SP_OK) {
        freeaddrinfo(addr);
        srv_http_security_free(&h->security);
        free(h);
        return sec;
    }
    h->daemon = MHD_start_daemon(
        flags, (uint16_t)app->http.port, NULL, NULL, on_request, app, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, addr->ai_addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)app->http.http_threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)app->http.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)app->http.connection_timeout, MHD_OPTION_NOTIFY_COMPLETED, on_completed, app,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_ARRAY, h->security.options, MHD_OPTION_END);
    freeaddrinfo(addr);
    if (!h->daemon) {
        srv_http_security_free(&h->security);
        free(h);
        if (flags & MHD_USE_TLS)
            return sp_fail(SP_ERR_IO,
                           "cannot serve HTTPS on %s port %d: the port is in use, or --tls-cert/--tls-key "
                           "were refused (see the http: line above)",
                           app->http.host, app->http.port);
        return sp_fail(SP_ERR_IO, "cannot listen on %s port %d (in use, or not an address of this machine)",
                       app->http.host, app->http.port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : app->http.port;
    *out = h;
    return SP_OK;
}

int srv_http_port(const srv_http *h) {
    return h->port;
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->daemon);
    srv_http_security_free(&h->security);
    free(h);
}

/* http.c: the HTTP transport on libmicrohttpd: the daemon, routing, request bodies,
 * API keys and CORS preflights, the endpoints that are not generations (/health,
 * /ready, /metrics, /v1/models, /tokenize, /detokenize), and a request's end (metrics,
 * access log, freeing). Generations are handed to http_generation.c; the responses
 * every answer goes through (CORS) are http_send.c's.
 *
 * DESIGN: see server/http/http.h (threads) and server/http/http_internal.h (srv_conn's lifetime).
 */

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

#include "common/log.h"
#include "common/assert.h"
#include "common/grow.h"
#include "server/http/http_internal.h"

struct srv_http {
    struct MHD_Daemon *daemon;
    struct MHD_Daemon *admin; /* --admin-port: /health, /ready, /metrics only; NULL: none */
    srv_app *app;
    int port;
    int admin_port;
    srv_http_security security; /* TLS and the header limit (http_security.c) */
};

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
        return srv__send_json(conn, 200, json_pack("{s:s}", "status", "ok"));
    else if (live)
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "the scheduler has not ticked for %.0f s (stuck)", age);
    else
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "%s", srv__phase_refusal(phase, app));
    return srv__send_error(conn, &err);
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
        return srv__send_error(conn, &err);
    }
    if (!cfg) {
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "%s", srv__phase_refusal(phase, app));
        return srv__send_error(conn, &err);
    }
    double f = app->http.ready_queue_fraction > 0 ? app->http.ready_queue_fraction : 1.0;
    if (st.queued >= f * cfg->queue_max_requests || (double)st.queued_tokens >= f * (double)cfg->queue_max_tokens) {
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL,
                       "the queue is near full: %d requests and %lld prompt tokens waiting (high-water mark %.0f%% of "
                       "%d requests / %lld tokens)",
                       st.queued, (long long)st.queued_tokens, f * 100, cfg->queue_max_requests,
                       (long long)cfg->queue_max_tokens);
        return srv__send_error(conn, &err);
    }
    return srv__send_json(conn, 200, json_pack("{s:s}", "status", "ready"));
}

static enum MHD_Result handle_metrics(srv_conn *conn) {
    srv_app *app = conn->app;
    pthread_rwlock_rdlock(&app->lifecycle); /* the scheduler is not destroyed while we read it */
    srv_phase phase = (srv_phase)atomic_load(&app->phase);
    bool serving = phase == SRV_PHASE_READY || phase == SRV_PHASE_DRAINING;
    char *text = srv_metrics_render(app, serving ? app->sched : NULL);
    pthread_rwlock_unlock(&app->lifecycle);
    return srv__send_body(conn, 200, text, "text/plain; version=0.0.4", NULL, NULL);
}

typedef enum route_kind {
    ROUTE_HEALTH,
    ROUTE_READY,
    ROUTE_METRICS,
    ROUTE_UI,
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_RESPONSES,
    ROUTE_RESPONSE,
    ROUTE_MESSAGES,
    ROUTE_COUNT_TOKENS,
    ROUTE_EMBEDDINGS
} route_kind;

/* A route: its path, the methods it answers ("GET, HEAD", "POST", ...: the Allow header), whether it
 * is also served without the leading /v1 (as llama-server and many proxies call it),
 * and whether the path is a prefix followed by an id (/v1/models/{id}). */
static const struct route {
    const char *path;
    const char *methods;
    route_kind kind;
    bool bare;
    bool with_id;
    const char *label; /* the endpoint label in /metrics (the path unless with_id) */
} ROUTES[] = {
    {"/health", "GET, HEAD", ROUTE_HEALTH, false, false, NULL},
    {"/ready", "GET, HEAD", ROUTE_READY, false, false, NULL},
    {"/metrics", "GET, HEAD", ROUTE_METRICS, false, false, NULL},
    {"/", "GET, HEAD", ROUTE_UI, false, false, NULL},
    {"/v1/models", "GET, HEAD", ROUTE_MODELS, true, false, NULL},
    {"/v1/models/", "GET, HEAD", ROUTE_MODEL, true, true, "/v1/models/{id}"},
    {"/v1/chat/completions", "POST", ROUTE_CHAT, true, false, NULL},
    {"/v1/completions", "POST", ROUTE_COMPLETIONS, true, false, NULL},
    {"/tokenize", "POST", ROUTE_TOKENIZE, false, false, NULL},
    {"/detokenize", "POST", ROUTE_DETOKENIZE, false, false, NULL},
    {"/v1/responses", "POST", ROUTE_RESPONSES, true, false, NULL},
    {"/v1/responses/", "GET, HEAD, DELETE", ROUTE_RESPONSE, true, true, "/v1/responses/{id}"},
    {"/v1/messages", "POST", ROUTE_MESSAGES, false, false, NULL},
    {"/v1/messages/count_tokens", "POST", ROUTE_COUNT_TOKENS, false, false, NULL},
    {"/v1/embeddings", "POST", ROUTE_EMBEDDINGS, true, false, NULL},
};

/* The API a route speaks: its errors take that API's shape. */
static srv_endpoint route_api(route_kind kind) {
    switch (kind) {
    case ROUTE_MESSAGES:
    case ROUTE_COUNT_TOKENS: return SRV_ENDPOINT_MESSAGES;
    case ROUTE_RESPONSES:
    case ROUTE_RESPONSE: return SRV_ENDPOINT_RESPONSES;
    case ROUTE_COMPLETIONS: return SRV_ENDPOINT_COMPLETIONS;
    default: return SRV_ENDPOINT_CHAT;
    }
}

/* Whether url is path (or, for a bare route, path without "/v1"); for a with_id route,
 * the id after it goes into *id (one non-empty segment). */
static bool route_matches(const struct route *r, const char *url, const char **id) {
    const char *path = r->path;
    size_t n = strlen(path);
    if (strncmp(url, path, n) != 0) {
        if (!r->bare || strncmp(path, "/v1/", 4) != 0) return false;
        path += 3;
        n -= 3;
        if (strncmp(url, path, n) != 0) return false;
    }
    if (!r->with_id) return url[n] == '\0';
    if (!url[n] || strchr(url + n, '/')) return false;
    *id = url + n;
    return true;
}

static const struct route *find_route(const char *url, const char **id) {
    const char *ignored;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (route_matches(&ROUTES[i], url, id ? id : &ignored)) return &ROUTES[i];
    return NULL;
}

/* Whether method is one of the route's (HEAD where GET is). */
static bool route_allows(const struct route *r, const char *method) {
    size_t n = strlen(method);
    for (const char *p = r->methods; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, method, n) == 0) return true;
        p += len;
        while (*p == ',' || *p == ' ') p++;
    }
    return false;
}

/* ---- security: API keys (auth.c) and CORS preflight ---- */

/* /health and /ready are open (probes carry no key); /metrics too unless
 * metrics_require_key; the chat page too (a browser navigating sends none: the page
 * sends the key itself with its API calls). */
static bool route_needs_key(const srv_app *app, route_kind kind) {
    if (kind == ROUTE_HEALTH || kind == ROUTE_READY || kind == ROUTE_UI) return false;
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
        srv_error_make(err, SRV_ERROR_UNAVAILABLE, NULL, "%s",
                       srv__phase_refusal((srv_phase)atomic_load(&app->phase), app));
        return false;
    }
    char buf[SRV_AUTHORIZATION_MAX];
    return srv_auth_check(auth, srv__authorization(conn, buf, sizeof buf), err);
}

/* OPTIONS on a known path with CORS on: 204, and to an allowed origin what it may
 * send (srv__queue_response adds Access-Control-Allow-Origin). Needs no key: browsers
 * send preflights without one. */
static enum MHD_Result cors_preflight(srv_conn *conn, const struct route *found) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    if (srv__cors_allow_origin(conn)) {
        char methods[64];
        snprintf(methods, sizeof methods, "%s, OPTIONS", found->methods);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, x-api-key, anthropic-version");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    return srv__queue_response(conn, MHD_HTTP_NO_CONTENT, resp);
}

const char *srv__authorization(srv_conn *conn, char *buf, size_t cap) {
    const char *authorization =
        MHD_lookup_connection_value(conn->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (authorization) return authorization;
    const char *api_key = MHD_lookup_connection_value(conn->connection, MHD_HEADER_KIND, "x-api-key");
    if (!api_key) return NULL;
    if ((size_t)snprintf(buf, cap, "Bearer %s", api_key) >= cap) return "Bearer "; /* too long to be a key */
    return buf;
}

/* ---- bodies prepared off the HTTP threads (prep.c) ---- */

/* A preparation worker's job: the body's parsing, template rendering and tokenizing. */
static void prep_work(srv_conn *conn) {
    const srv_model_info *mi = &conn->app->model;
    switch ((route_kind)conn->prep_route) {
    case ROUTE_TOKENIZE:
    case ROUTE_DETOKENIZE: {
        /* serialized here too: a megabyte of ids is a costly json_dumps */
        json_t *answer = conn->prep_route == ROUTE_TOKENIZE
                             ? srv_tokenize(conn->body, conn->body_len, mi, &conn->prep_err)
                             : srv_detokenize(conn->body, conn->body_len, mi, &conn->prep_err);
        if (answer) {
            conn->prep_text = json_dumps(answer, SRV_JSON_FLAGS);
            json_decref(answer);
            if (!conn->prep_text) srv_error_make(&conn->prep_err, SRV_ERROR_INTERNAL, NULL, "out of memory");
        }
        break;
    }
    case ROUTE_COUNT_TOKENS: {
        json_t *answer = srv_messages_count_tokens(conn->body, conn->body_len, mi, &conn->prep_err);
        if (answer) {
            conn->prep_text = json_dumps(answer, SRV_JSON_FLAGS);
            json_decref(answer);
            if (!conn->prep_text) srv_error_make(&conn->prep_err, SRV_ERROR_INTERNAL, NULL, "out of memory");
        }
        break;
    }
    case ROUTE_CHAT:
    case ROUTE_COMPLETIONS:
    case ROUTE_RESPONSES:
    case ROUTE_MESSAGES:
        conn->prep_status = srv_api_parse(route_api((route_kind)conn->prep_route), conn->body, conn->body_len, mi,
                                          conn->tenant, &conn->request, &conn->prep_err);
        conn->have_request = conn->prep_status == SP_OK;
        break;
    case ROUTE_EMBEDDINGS: /* prefill-only prompts, submitted and answered as a completion is (embeddings.c) */
        conn->prep_status = srv_embeddings_parse(conn->body, conn->body_len, mi, &conn->request, &conn->prep_err);
        conn->have_request = conn->prep_status == SP_OK;
        break;
    default: SP_ASSERT(!"not a prepared route");
    }
}

/* Chat, completions, tokenize and detokenize: the first call hands the body to the
 * workers (the connection waits suspended); the call after answers from their result. */
static enum MHD_Result prepared_route(srv_conn *conn, route_kind kind) {
    srv_error err;
    pthread_mutex_lock(&conn->lock);
    srv_prep_state state = conn->prep_state;
    pthread_mutex_unlock(&conn->lock);
    if (state == SRV_PREP_NONE) {
        conn->prep_route = (int)kind;
        sp_status st = srv__prep_submit(conn->app->prep, conn, prep_work);
        if (st == SP_OK) return MHD_YES;
        if (st != SP_ERR_UNAVAILABLE) return srv__send_status_error(conn, st, sp_last_error());
        state = SRV_PREP_CANCELLED; /* the workers are stopping */
    }
    if (state == SRV_PREP_QUEUED) return MHD_YES; /* suspended: not called until resumed */
    if (state == SRV_PREP_CANCELLED) {
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "the server is shutting down");
        return srv__send_error(conn, &err);
    }
    if (kind == ROUTE_TOKENIZE || kind == ROUTE_DETOKENIZE || kind == ROUTE_COUNT_TOKENS) {
        char *text = conn->prep_text;
        conn->prep_text = NULL; /* the response frees it */
        return text ? srv__send_body(conn, 200, text, "application/json", NULL, NULL)
                    : srv__send_error(conn, &conn->prep_err);
    }
    if (conn->prep_status != SP_OK) return srv__send_error(conn, &conn->prep_err);
    return srv__generation_start(conn);
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
    const struct route *found = find_route(url, NULL);
    if (!found || is_preflight(conn, method) || !route_needs_key(conn->app, found->kind)) return true;
    srv_error err;
    if (route_authorized(conn, &err)) return true;
    *result = srv__send_error(conn, &err);
    return false;
}

/* GET and DELETE /v1/responses/{id}: the stored response (server/api/responses.c). */
static enum MHD_Result responses_stored(srv_conn *conn, const char *id, const char *method) {
    const srv_model_info *mi = &conn->app->model;
    srv_error err;
    json_t *body = strcmp(method, "DELETE") == 0 ? srv_responses_delete(mi, id, conn->tenant, &err)
                                                 : srv_responses_get(mi, id, conn->tenant, &err);
    return body ? srv__send_json(conn, 200, body) : srv__send_error(conn, &err);
}

static enum MHD_Result route(srv_conn *conn, const char *url, const char *method) {
    srv_error err;
    const char *id = NULL;
    const struct route *found = find_route(url, &id);
    if (found) conn->api = route_api(found->kind);
    if (!found || (found->kind == ROUTE_UI && !conn->app->http.ui)) { /* --no-ui: / is unknown */
        srv_error_make(&err, SRV_ERROR_NOT_FOUND, NULL, "Invalid URL (%s %s)", method, url);
        return srv__send_error(conn, &err);
    }
    /* security: CORS preflight (no key); the API key was checked by admit_key */
    if (is_preflight(conn, method)) return cors_preflight(conn, found);
    /* HEAD is GET without a body; libmicrohttpd drops the body itself */
    if (!route_allows(found, method)) {
        srv_error_make(&err, SRV_ERROR_METHOD_NOT_ALLOWED, NULL, "Method %s is not allowed for %s (use %s)", method,
                       url, found->methods);
        return srv__send_body(conn, err.http_status, srv_api_error_json(conn->api, &err), "application/json",
                              MHD_HTTP_HEADER_ALLOW, found->methods);
    }
    if (conn->admin && found->kind != ROUTE_HEALTH && found->kind != ROUTE_READY && found->kind != ROUTE_METRICS) {
        srv_error_make(&err, SRV_ERROR_NOT_FOUND, NULL,
                       "%s is not served on the admin port (only /health, /ready and /metrics)", url);
        return srv__send_error(conn, &err);
    }
    if (found->kind == ROUTE_HEALTH) return handle_health(conn);
    if (found->kind == ROUTE_READY) return handle_ready(conn);
    if (found->kind == ROUTE_METRICS) return handle_metrics(conn);
    /* the page is static: served while the model loads too, so a browser opened early
     * gets the page, which says "Loading model" (its /v1/models call's 503) and retries */
    if (found->kind == ROUTE_UI) return srv__ui_page(conn);
    if (conn->body_too_large) {
        srv_error_make(&err, SRV_ERROR_TOO_LARGE, NULL, "the request body exceeds the limit of %zu bytes",
                       conn->app->http.max_body_bytes);
        return srv__send_error(conn, &err);
    }
    srv_phase phase = (srv_phase)atomic_load(&conn->app->phase);
    if (phase != SRV_PHASE_READY) {
        srv_error_make(&err, SRV_ERROR_UNAVAILABLE, NULL, "%s", srv__phase_refusal(phase, conn->app));
        return srv__send_error(conn, &err);
    }
    char authorization[SRV_AUTHORIZATION_MAX]; /* the caller's key, for what is kept per key */
    conn->tenant =
        srv_auth_tenant(atomic_load(&conn->app->auth), srv__authorization(conn, authorization, sizeof authorization));
    switch (found->kind) {
    case ROUTE_MODELS: return srv__send_json(conn, 200, srv_render_models(&conn->app->model));
    case ROUTE_MODEL: {
        json_t *model = srv_render_model(&conn->app->model, id, &err);
        return model ? srv__send_json(conn, 200, model) : srv__send_error(conn, &err);
    }
    case ROUTE_RESPONSE: return responses_stored(conn, id, method);
    case ROUTE_CHAT:
    case ROUTE_COMPLETIONS:
    case ROUTE_RESPONSES:
    case ROUTE_MESSAGES:
    case ROUTE_COUNT_TOKENS:
    case ROUTE_TOKENIZE:
    case ROUTE_DETOKENIZE:
    case ROUTE_EMBEDDINGS: return prepared_route(conn, found->kind);
    default: return MHD_NO;
    }
}

/* ---- libmicrohttpd callbacks ---- */

/* A request refused from its headers (err). An answer queued before the body is read makes
 * libmicrohttpd close the socket with the client's bytes unread, so the kernel resets the
 * connection, and a client that sends its whole body before reading (Python's http.client,
 * requests) sees a broken pipe or a reset instead of the answer. So, as nginx's lingering
 * close does, the body is read and dropped (nothing is kept; --body-timeout bounds the
 * time) and the answer sent after it (serve_request). At once only when the client waits
 * for "100 Continue" before sending its body (no bytes are in flight then), or when the
 * body announced is more than SRV_LINGER_BYTES past the limit (not worth reading). */
static enum MHD_Result refuse_lingering(srv_conn *conn, const srv_error *err, unsigned long long declared) {
    const char *expect = MHD_lookup_connection_value(conn->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    const size_t max_body = conn->app->http.max_body_bytes;
    if ((expect && strcasecmp(expect, "100-continue") == 0) ||
        (declared > max_body && declared - max_body > SRV_LINGER_BYTES))
        return srv__send_error(conn, err);
    conn->refused = true;
    conn->refusal = *err;
    return MHD_YES;
}

static enum MHD_Result header_bytes(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4; /* "key: value\r\n", "key=value&" */
    return MHD_YES;
}

/* Whether the request line or the headers are over --max-header-bytes (err: the 414 or
 * 431). libmicrohttpd's memory limit is about twice that (http_security.c), so that a
 * request up to there is refused here, with an error object and lingering; past it
 * libmicrohttpd answers itself and closes at once. */
static bool headers_too_large(struct MHD_Connection *connection, const char *url, const char *method, size_t max,
                              srv_error *err) {
    if (max == 0) return false;
    size_t line = strlen(method) + strlen(url) + 11; /* " HTTP/1.1\r\n" */
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, header_bytes, &line);
    if (line > max) {
        srv_error_set(err, MHD_HTTP_URI_TOO_LONG, "invalid_request_error", "uri_too_long", NULL,
                      "the request line of about %zu bytes exceeds the limit of %zu bytes (--max-header-bytes)", line,
                      max);
        return true;
    }
    size_t total = line;
    MHD_get_connection_values(connection, MHD_HEADER_KIND, header_bytes, &total);
    if (total <= max) return false;
    srv_error_set(err, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "invalid_request_error",
                  "request_header_fields_too_large", NULL,
                  "the request line and headers of about %zu bytes exceed the limit of %zu bytes (--max-header-bytes)",
                  total, max);
    return true;
}

/* Returns false (close the connection unanswered) only for a body too large to be
 * worth reading through: past max_body_bytes + SRV_LINGER_BYTES. */
static bool body_append(srv_conn *conn, const char *data, size_t len) {
    if (conn->body_too_large || conn->refused) {
        conn->body_dropped += len; /* lingering: read and drop, the answer is sent at the end */
        return conn->body_dropped <= conn->app->http.max_body_bytes + SRV_LINGER_BYTES;
    }
    if (conn->body_len + len > conn->app->http.max_body_bytes) {
        conn->body_too_large = true; /* keep reading (and dropping) so the 413 can be sent */
        conn->body_dropped = conn->body_len + len;
        free(conn->body);
        conn->body = NULL;
        conn->body_len = conn->body_cap = 0;
        return true;
    }
    return sp_grow((void **)&conn->body, &conn->body_cap, conn->body_len + len + 1, 1) &&
           (memcpy(conn->body + conn->body_len, data, len), conn->body_len += len, true);
}

/* libmicrohttpd's connection notifications: a connection's header and body deadlines
 * (deadlines.c) live from its start to just before its socket is closed. The main port's
 * connections are drainable: a full table closes the oldest idle ones (idle_drain.c). */
static void connection_notify(srv_app *app, bool drainable, struct MHD_Connection *connection, void **socket_context,
                              enum MHD_ConnectionNotificationCode code) {
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = info ? srv__deadline_open(app->deadlines, info->connect_fd, drainable) : NULL;
    } else {
        srv__deadline_close(app->deadlines, *socket_context);
        *socket_context = NULL;
    }
}

static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    connection_notify(cls, true, connection, socket_context, code);
}

static void on_admin_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                                enum MHD_ConnectionNotificationCode code) {
    connection_notify(cls, false, connection, socket_context, code);
}

static void deadline_phase(srv_app *app, struct MHD_Connection *connection, srv_deadline_phase phase) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (info) srv__deadline_set(app->deadlines, info->socket_context, phase);
}

/* libmicrohttpd has a request line (its URI logger is the first call of a request): from
 * here until it is answered the connection is not idle, so a full table never closes it.
 * NULL: the handler's *con_cls starts empty. */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *connection) {
    (void)uri;
    deadline_phase(cls, connection, SRV_DEADLINE_HEADERS);
    return NULL;
}

/* Both daemons' request handler; admin: the --admin-port daemon (probes and metrics). */
static enum MHD_Result serve_request(srv_app *app, bool admin, struct MHD_Connection *connection, const char *url,
                                     const char *method, const char *upload_data, size_t *upload_data_size,
                                     void **con_cls) {
    srv_conn *conn = *con_cls;
    if (!conn) {
        conn = calloc(1, sizeof *conn);
        if (!conn) return MHD_NO;
        conn->app = app;
        conn->admin = admin;
        conn->connection = connection;
        conn->watched._slot = -1;
        pthread_mutex_init(&conn->lock, NULL);
        *con_cls = conn;
        conn->started = sched_now();                        /* metrics and access log */
        deadline_phase(app, connection, SRV_DEADLINE_BODY); /* the headers are in */
        snprintf(conn->method, sizeof conn->method, "%s", method);
        snprintf(conn->path, sizeof conn->path, "%s", url);
        const struct route *known = find_route(url, NULL);
        if (known) conn->api = route_api(known->kind); /* the answers before route() (401, 413) take its shape */
        /* refuse ambiguous framing before the body is read, and close the connection so
         * that no byte after these headers is ever parsed as another request */
        char why[200];
        if (!srv__framing_ok(connection, why, sizeof why)) {
            srv_error err;
            srv_error_make(&err, SRV_ERROR_BAD_REQUEST, NULL, "%s", why);
            return srv__send_body(conn, err.http_status, srv_error_json(&err), "application/json",
                                  MHD_HTTP_HEADER_CONNECTION, "close");
        }
        /* headers or a body announced too large: refused, but after the body (refuse_lingering) */
        const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long declared = length ? strtoull(length, NULL, 10) : 0;
        srv_error refusal;
        if (headers_too_large(connection, url, method, app->http.max_header_bytes, &refusal))
            return refuse_lingering(conn, &refusal, declared);
        if (declared > app->http.max_body_bytes) {
            srv_error_make(&refusal, SRV_ERROR_TOO_LARGE, NULL,
                           "the request body of %s bytes exceeds the limit of %zu bytes", length,
                           app->http.max_body_bytes);
            return refuse_lingering(conn, &refusal, declared);
        }
        enum MHD_Result refused;
        if (!admit_key(conn, url, method, &refused)) return refused; /* security: before the body */
        if (admin) {                                                 /* probes have no body: answer at once */
            deadline_phase(app, connection, SRV_DEADLINE_NONE);
            return route(conn, url, method);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        bool ok = body_append(conn, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return ok ? MHD_YES : MHD_NO;
    }
    if (conn->dispatched) return srv__generation_continue(conn);     /* resumed: a non-streaming answer may be ready */
    deadline_phase(app, connection, SRV_DEADLINE_NONE);              /* the body is in */
    if (conn->refused) return srv__send_error(conn, &conn->refusal); /* its body read and dropped */
    return route(conn, url, method);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    return serve_request(cls, false, connection, url, method, upload_data, upload_data_size, con_cls);
}

static enum MHD_Result on_admin_request(void *cls, struct MHD_Connection *connection, const char *url,
                                        const char *method, const char *version, const char *upload_data,
                                        size_t *upload_data_size, void **con_cls) {
    (void)version;
    return serve_request(cls, true, connection, url, method, upload_data, upload_data_size, con_cls);
}

/* ---- metrics and access log (on_completed) ---- */

/* The endpoint label of a path: the route's own path string, "other" when unknown. */
static const char *route_endpoint(const char *path) {
    const struct route *found = find_route(path, NULL);
    return !found ? "other" : found->label ? found->label : found->path;
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
        const char *field = conn->request.endpoint == SRV_ENDPOINT_EMBEDDINGS ? "input" : "prompt";
        prompt = json_incref(json_object_get(body, field));
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
    srv_app *app = cls;
    if (connection) deadline_phase(app, connection, SRV_DEADLINE_NEXT_REQUEST);
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
    free(conn->prep_text); /* prepared, never sent */
    srv_api_stream_destroy(conn->api_stream);
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

/* The probes' own daemon on --admin-port: plain HTTP on the same host, one thread and a
 * few connections of its own (8 per address, 5 s idle), so /health, /ready and /metrics
 * answer however full the main port's connection pool is. */
static sp_status admin_start(srv_http *h, const struct addrinfo *main_addr) {
    srv_app *app = h->app;
    struct addrinfo hints = {
        .ai_family = main_addr->ai_family, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *addr = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", app->http.admin_port);
    int gai = getaddrinfo(app->http.host, port, &hints, &addr);
    if (gai != 0) return sp_fail(SP_ERR_INVALID_ARG, "--admin-port %s: %s", port, gai_strerror(gai));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    if (addr->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* a probe needs one short connection: a few per address and a short timeout keep
     * one client from filling this pool too (no address reuse: the port is its own) */
    h->admin = MHD_start_daemon(flags, (uint16_t)app->http.admin_port, NULL, NULL, on_admin_request, app,
                                MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, addr->ai_addr,
                                MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_PER_IP_CONNECTION_LIMIT, 8u,
                                MHD_OPTION_CONNECTION_TIMEOUT, 5u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, app,
                                MHD_OPTION_NOTIFY_CONNECTION, on_admin_connection, app, MHD_OPTION_END);
    freeaddrinfo(addr);
    if (!h->admin)
        return sp_fail(SP_ERR_IO, "--admin-port %d: cannot listen on %s (in use, or not an address of this machine)",
                       app->http.admin_port, app->http.host);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->admin, MHD_DAEMON_INFO_BIND_PORT);
    h->admin_port = info ? info->port : app->http.admin_port;
    return SP_OK;
}

/* The preparation workers' and the deadlines' end where the daemon never started (no
 * handler ran). */
static void prep_end(srv_app *app) {
    srv__prep_stop(app->prep);
    srv__prep_free(app->prep);
    app->prep = NULL;
    srv__deadlines_stop(app->deadlines);
    app->deadlines = NULL;
}

sp_status srv_http_start(srv_app *app, srv_http **out) {
    if (app->http.admin_port > 0 && app->http.admin_port == app->http.port)
        return sp_fail(SP_ERR_INVALID_ARG, "--admin-port %d is --port's too: give the probes a port of their own",
                       app->http.admin_port);
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
    sp_status prep = srv__prep_start(app->http.prep_threads, &app->prep);
    if (prep == SP_OK) {
        prep = srv__deadlines_start(app->http.header_timeout, app->http.body_timeout, app->http.connection_timeout,
                                    &app->deadlines);
        if (prep != SP_OK) {
            srv__prep_stop(app->prep);
            srv__prep_free(app->prep);
            app->prep = NULL;
        }
    }
    if (prep != SP_OK) {
        freeaddrinfo(addr);
        free(h);
        return prep;
    }
    /* a full table closes idle connections to admit new ones (idle_drain.c): libmicrohttpd's
     * own limit, where it stops accepting, sits above it */
    int capacity = srv__idle_capacity(app->http.max_connections);
    if (capacity < app->http.max_connections)
        sp_log_warn("http: --max-connections %d does not fit the open file limit (ulimit -n): the table "
                    "holds %d connections",
                    app->http.max_connections, capacity);
    srv__deadlines_drain_at(app->deadlines, capacity);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (addr->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    sp_status sec = srv_http_security_init(&app->http, &h->security, &flags);
    if (sec != SP_OK) {
        freeaddrinfo(addr);
        prep_end(app);
        srv_http_security_free(&h->security);
        free(h);
        return sec;
    }
    h->daemon = MHD_start_daemon(
        flags, (uint16_t)app->http.port, NULL, NULL, on_request, app, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, addr->ai_addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)app->http.http_threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)srv__idle_daemon_limit(capacity), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)app->http.max_connections_per_client, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)app->http.connection_timeout, MHD_OPTION_NOTIFY_COMPLETED, on_completed, app,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, app, MHD_OPTION_URI_LOG_CALLBACK, on_request_line, app,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_ARRAY, h->security.options, MHD_OPTION_END);
    if (h->daemon && app->http.admin_port > 0) {
        sp_status st = admin_start(h, addr);
        if (st != SP_OK) {
            freeaddrinfo(addr);
            MHD_stop_daemon(h->daemon);
            prep_end(app);
            srv_http_security_free(&h->security);
            free(h);
            return st;
        }
    }
    freeaddrinfo(addr);
    if (!h->daemon) {
        prep_end(app);
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

int srv_http_admin_port(const srv_http *h) {
    return h->admin ? h->admin_port : 0;
}

void srv_http_stop(srv_http *h) {
    if (!h) return;
    if (h->admin) MHD_stop_daemon(h->admin);
    srv__prep_stop(h->app->prep); /* no suspended preparation may outlive the daemon */
    MHD_stop_daemon(h->daemon);
    srv__prep_free(h->app->prep);
    h->app->prep = NULL;
    srv__deadlines_stop(h->app->deadlines); /* no connection is left to notify it */
    h->app->deadlines = NULL;
    srv_http_security_free(&h->security);
    free(h);
}

/* http_send.c: the responses every answer of server/http goes through: the one queue
 * call that adds what all answers carry (CORS) and records the status for metrics and
 * the access log, JSON bodies, error objects with their headers, and the reason a 503
 * gives in each server phase. A leaf of server/http: http.c, http_generation.c and ui.c
 * call it; it calls none of them. HTTP threads.
 */

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/http/http_internal.h"

/* ---- security: CORS (off unless app->http.n_cors_origins > 0) ---- */

/* The Access-Control-Allow-Origin value for this request: its Origin when that is
 * one of the allowed origins, "*" when "*" is configured; NULL when CORS is off, the
 * request has no Origin, or its origin is not allowed. */
const char *srv__cors_allow_origin(const srv_conn *conn) {
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
enum MHD_Result srv__queue_response(srv_conn *conn, int status, struct MHD_Response *resp) {
    /* security (CORS): an allowed origin may read every answer; with CORS on, answers
     * depend on the Origin, so caches must key on it */
    if (conn->app->http.n_cors_origins > 0) {
        const char *allow_origin = srv__cors_allow_origin(conn);
        if (allow_origin) MHD_add_response_header(resp, "Access-Control-Allow-Origin", allow_origin);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
    }
    enum MHD_Result r = MHD_queue_response(conn->connection, (unsigned)status, resp);
    MHD_destroy_response(resp);
    if (r == MHD_YES) conn->status = status; /* metrics and access log */
    return r;
}

enum MHD_Result srv__send_body(srv_conn *conn, int status, char *body, const char *content_type, const char *header,
                               const char *header_value) {
    if (!body) return MHD_NO;
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (header) MHD_add_response_header(resp, header, header_value);
    return srv__queue_response(conn, status, resp);
}

enum MHD_Result srv__send_json(srv_conn *conn, int status, json_t *body) {
    char *text = body ? json_dumps(body, SRV_JSON_FLAGS) : NULL;
    json_decref(body);
    return srv__send_body(conn, status, text, "application/json", NULL, NULL);
}

enum MHD_Result srv__send_error(srv_conn *conn, const srv_error *err) {
    const char *header = NULL, *value = NULL;
    char seconds[16];
    if (err->http_status == 429 || err->http_status == 503) {
        header = MHD_HTTP_HEADER_RETRY_AFTER;
        /* a full queue: about when it will have drained (jittered); not started yet
         * (loading, draining): at once, elsewhere */
        snprintf(seconds, sizeof seconds, "%d",
                 err->http_status == 429 && conn->retry_after_s > 0 ? conn->retry_after_s : 1);
        value = seconds;
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
    return srv__send_body(conn, err->http_status, srv_api_error_json(conn->api, err), "application/json", header,
                          value);
}

enum MHD_Result srv__send_status_error(srv_conn *conn, sp_status st, const char *message) {
    srv_error err;
    srv_error_from_status(&err, st, message);
    return srv__send_error(conn, &err);
}

/* ---- the server's phase ---- */

/* Why the server does not take new work in this phase. */
const char *srv__phase_refusal(srv_phase phase, const srv_app *app) {
    switch (phase) {
    case SRV_PHASE_LOADING: return "Loading model";
    case SRV_PHASE_DRAINING: return "the server is draining (shutting down): retry on another replica";
    case SRV_PHASE_SHUTTING_DOWN: return "the server is shutting down";
    case SRV_PHASE_FAILED: return app->load_error;
    default: return "unavailable";
    }
}

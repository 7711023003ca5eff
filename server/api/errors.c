/* errors.c: the one place that chooses HTTP statuses. Every failure the API answers
 * becomes OpenAI's error object {"error": {"message", "type", "param", "code"}} with
 * the status of its kind (the table below) or of the status that a lower layer
 * returned (srv_error_from_status).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

/* One row per srv_error_kind, in the enum's order. The types follow what OpenAI
 * answers where it documents one (invalid_request_error for every client mistake,
 * server_error for ours) and llama-server's words elsewhere. `status` is the
 * sp_status that srv_request_parse and friends return for the kind. */
static const struct {
    int http_status;
    const char *type;
    const char *code;
    sp_status status;
} SRV_ERROR_KINDS[] = {
    [SRV_ERROR_BAD_REQUEST] = {400, "invalid_request_error", NULL, SP_ERR_INVALID_ARG},
    [SRV_ERROR_CONTEXT_LENGTH] = {400, "invalid_request_error", "context_length_exceeded", SP_ERR_RANGE},
    [SRV_ERROR_UNAUTHORIZED] = {401, "invalid_request_error", "invalid_api_key", SP_ERR_INVALID_ARG},
    [SRV_ERROR_NOT_FOUND] = {404, "invalid_request_error", "not_found", SP_ERR_NOT_FOUND},
    [SRV_ERROR_MODEL_NOT_FOUND] = {404, "invalid_request_error", "model_not_found", SP_ERR_NOT_FOUND},
    [SRV_ERROR_METHOD_NOT_ALLOWED] = {405, "invalid_request_error", "method_not_allowed", SP_ERR_INVALID_ARG},
    [SRV_ERROR_TIMEOUT] = {408, "timeout_error", "timeout", SP_ERR_TIMEOUT},
    [SRV_ERROR_TOO_LARGE] = {413, "invalid_request_error", "request_too_large", SP_ERR_RANGE},
    [SRV_ERROR_RATE_LIMIT] = {429, "rate_limit_error", "rate_limit_exceeded", SP_ERR_FULL},
    [SRV_ERROR_INTERNAL] = {500, "server_error", NULL, SP_ERR_INTERNAL},
    [SRV_ERROR_UNAVAILABLE] = {503, "unavailable_error", NULL, SP_ERR_UNAVAILABLE},
};
enum { SRV_ERROR_N_KINDS = (int)(sizeof SRV_ERROR_KINDS / sizeof SRV_ERROR_KINDS[0]) };

/* A message cut by the buffer may end inside a UTF-8 sequence; drop that partial
 * character so the JSON text stays readable (srv__json_text would turn it into U+FFFD). */
static void srv_error_trim_partial_utf8(char *s, size_t len) {
    size_t i = len;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80 && len - i < 3) i--;
    if (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0xC0) {
        unsigned char lead = (unsigned char)s[i - 1];
        size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (len - (i - 1) < want) s[i - 1] = '\0';
    }
}

static int srv_error_vset(srv_error *err, int http_status, const char *type, const char *code, const char *param,
                          const char *fmt, va_list ap) {
    err->http_status = http_status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
    if (n < 0) {
        snprintf(err->message, sizeof err->message, "%s", type);
    } else if ((size_t)n >= sizeof err->message) {
        srv_error_trim_partial_utf8(err->message, sizeof err->message - 1);
    }
    return http_status;
}

int srv_error_set(srv_error *err, int http_status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int status = srv_error_vset(err, http_status, type, code, param, fmt, ap);
    va_end(ap);
    return status;
}

int srv_error_make(srv_error *err, srv_error_kind kind, const char *param, const char *fmt, ...) {
    if ((int)kind < 0 || (int)kind >= SRV_ERROR_N_KINDS) kind = SRV_ERROR_INTERNAL;
    va_list ap;
    va_start(ap, fmt);
    int status = srv_error_vset(err, SRV_ERROR_KINDS[kind].http_status, SRV_ERROR_KINDS[kind].type,
                                SRV_ERROR_KINDS[kind].code, param, fmt, ap);
    va_end(ap);
    return status;
}

sp_status srv__fail(srv_error *err, srv_error_kind kind, const char *param, const char *fmt, ...) {
    if ((int)kind < 0 || (int)kind >= SRV_ERROR_N_KINDS) kind = SRV_ERROR_INTERNAL;
    va_list ap;
    va_start(ap, fmt);
    srv_error_vset(err, SRV_ERROR_KINDS[kind].http_status, SRV_ERROR_KINDS[kind].type, SRV_ERROR_KINDS[kind].code,
                   param, fmt, ap);
    va_end(ap);
    return SRV_ERROR_KINDS[kind].status;
}

int srv_error_from_status(srv_error *err, sp_status st, const char *message) {
    srv_error_kind kind;
    switch (st) {
    case SP_ERR_INVALID_ARG:
    case SP_ERR_FORMAT: kind = SRV_ERROR_BAD_REQUEST; break;
    case SP_ERR_RANGE: kind = SRV_ERROR_CONTEXT_LENGTH; break;
    case SP_ERR_NOT_FOUND: kind = SRV_ERROR_NOT_FOUND; break;
    case SP_ERR_FULL: kind = SRV_ERROR_RATE_LIMIT; break;
    case SP_ERR_UNAVAILABLE: kind = SRV_ERROR_UNAVAILABLE; break;
    case SP_ERR_TIMEOUT: kind = SRV_ERROR_TIMEOUT; break;
    default: kind = SRV_ERROR_INTERNAL; break;
    }
    if (!message || !message[0]) message = sp_status_str(st);
    return srv_error_make(err, kind, NULL, "%s", message);
}

/* The {"message", "type", "param", "code"} object; NULL on out of memory. */
static json_t *srv_error_object(const srv_error *err) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = json_object_set_new(o, "message", srv__json_text(err->message, strlen(err->message)));
    bad |= json_object_set_new(
        o, "type",
        srv__json_text(err->type ? err->type : "server_error", strlen(err->type ? err->type : "server_error")));
    bad |=
        json_object_set_new(o, "param", err->param[0] ? srv__json_text(err->param, strlen(err->param)) : json_null());
    bad |= json_object_set_new(o, "code", err->code ? json_string(err->code) : json_null());
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *srv_error_json(const srv_error *err) {
    json_t *root = json_object();
    if (!root || json_object_set_new(root, "error", srv_error_object(err)) != 0) {
        json_decref(root);
        return NULL;
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

/* api_bridge.c: the APIs over chat (/v1/responses, Anthropic's /v1/messages) picked by
 * the API a request speaks, so the transport calls one function for each step: parse,
 * render, stream, error. See server/api/api.h's "APIs over chat". */
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

sp_status srv_api_parse(srv_endpoint api, const char *body, size_t len, const srv_model_info *mi, uint64_t tenant,
                        srv_request *out, srv_error *err) {
    switch (api) {
    case SRV_ENDPOINT_RESPONSES: return srv__responses_parse(body, len, mi, tenant, out, err);
    case SRV_ENDPOINT_MESSAGES: return srv__messages_parse(body, len, mi, out, err);
    default: return srv_request_parse(api, body, len, mi, out, err);
    }
}

json_t *srv_api_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat) {
    if (!chat) return NULL;
    switch (r->api) {
    case SRV_ENDPOINT_RESPONSES: return srv__responses_render(r, mi, a, chat);
    case SRV_ENDPOINT_MESSAGES: return srv__messages_render(r, mi, a, chat);
    default: return chat;
    }
}

srv_api_stream *srv_api_stream_create(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a,
                                      bool *failed) {
    srv_api_stream *s = NULL;
    switch (r->api) {
    case SRV_ENDPOINT_RESPONSES: s = srv__responses_stream(r, mi, a); break;
    case SRV_ENDPOINT_MESSAGES: s = srv__messages_stream(r, mi, a); break;
    default: *failed = false; return NULL;
    }
    *failed = s == NULL;
    return s;
}

void srv_api_stream_event(srv_api_stream *s, const char *chat_event, strbuf *out) {
    if (strcmp(chat_event, SRV_SSE_DONE) == 0) {
        s->event(s, NULL, out);
        return;
    }
    /* "data: {...}\n\n": the object the chat side built (never anything else) */
    const char *json = strncmp(chat_event, "data: ", 6) == 0 ? chat_event + 6 : chat_event;
    /* JSON_ALLOW_NUL: generated text may hold a NUL byte (a byte token), escaped as \u0000 */
    json_t *event = json_loads(json, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, NULL);
    if (!event) {
        out->failed = true;
        return;
    }
    s->event(s, event, out);
    json_decref(event);
}

void srv_api_stream_destroy(srv_api_stream *s) {
    if (s) s->destroy(s);
}

char *srv_api_error_json(srv_endpoint api, const srv_error *err) {
    return api == SRV_ENDPOINT_MESSAGES ? srv__messages_error_json(err) : srv_error_json(err);
}

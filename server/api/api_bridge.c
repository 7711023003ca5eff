/* api_bridge.c: the APIs over chat (/v1/responses, Anthropic's /v1/messages) picked by
 * the API a request speaks from a table of dialects (srv__dialect, one per dialect's
 * file), so the transport calls one function for each step: parse, render, stream,
 * error. See server/api/api.h's "APIs over chat". */
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

/* The APIs over chat, one entry each. */
static const srv__dialect *const dialects[] = {&srv__dialect_responses, &srv__dialect_messages};

/* r->api's dialect; NULL for chat and completions. */
static const srv__dialect *dialect_of(srv_endpoint api) {
    for (size_t i = 0; i < sizeof dialects / sizeof dialects[0]; i++)
        if (dialects[i]->api == api) return dialects[i];
    return NULL;
}

sp_status srv_api_parse(srv_endpoint api, const char *body, size_t len, const srv_model_info *mi, uint64_t tenant,
                        srv_request *out, srv_error *err) {
    const srv__dialect *d = dialect_of(api);
    return d ? d->parse(body, len, mi, tenant, out, err) : srv_request_parse(api, body, len, mi, out, err);
}

json_t *srv_api_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat) {
    if (!chat) return NULL;
    const srv__dialect *d = dialect_of(r->api);
    return d ? d->render(r, mi, a, chat) : chat;
}

srv_api_stream *srv_api_stream_create(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a,
                                      bool *failed) {
    const srv__dialect *d = dialect_of(r->api);
    if (!d) {
        *failed = false;
        return NULL;
    }
    srv_api_stream *s = d->stream(r, mi, a);
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
    const srv__dialect *d = dialect_of(api);
    return d && d->error_json ? d->error_json(err) : srv_error_json(err);
}

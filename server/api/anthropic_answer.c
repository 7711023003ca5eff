/* anthropic_answer.c: Anthropic's Messages API, the way out: errors in Anthropic's
 * shape, the chat answer as a message of content blocks (thinking, text, tool_use) with a
 * stop_reason, and a stream's chat chunks, one at a time, as Anthropic's events
 * (message_start, content_block_start, _delta and _stop, message_delta, message_stop).
 * The request side is anthropic.c.
 *
 * Reentrant: HTTP threads render; a stream's translator belongs to its connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

/* ---- errors ---- */

/* Anthropic's error type for an HTTP status. */
static const char *msg_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

/* {"type": "error", "error": {"type", "message"}}: Anthropic's shape has no param, so the
 * message names the field first where it does not already. New reference or NULL. */
static json_t *msg_error_body(int status, const char *param, const char *message) {
    strbuf b = {0};
    if (param && param[0] && !strstr(message, param)) strbuf_printf(&b, "%s: ", param);
    strbuf_append(&b, message, strlen(message));
    char *text = strbuf_take(&b);
    json_t *body = text ? json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", msg_error_type(status),
                                    "message", srv__json_text(text, strlen(text)))
                        : NULL;
    free(text);
    return body;
}

char *srv__messages_error_json(const srv_error *err) {
    json_t *body = msg_error_body(err->http_status, err->param, err->message);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return text;
}

/* The HTTP status of an OpenAI error object (a stream's error event carries none). */
static int msg_error_status(const json_t *error) {
    const char *type = json_string_value(json_object_get(error, "type"));
    const char *code = json_string_value(json_object_get(error, "code"));
    if (!type) return 500;
    if (code && (strcmp(code, "not_found") == 0 || strcmp(code, "model_not_found") == 0)) return 404;
    if (code && strcmp(code, "invalid_api_key") == 0) return 401;
    if (code && strcmp(code, "request_too_large") == 0) return 413;
    if (strcmp(type, "invalid_request_error") == 0) return 400;
    if (strcmp(type, "rate_limit_error") == 0) return 429;
    if (strcmp(type, "timeout_error") == 0) return 408;
    if (strcmp(type, "unavailable_error") == 0) return 503;
    return 500;
}

/* The model name the answer gives: the one asked for, else the served one. */
static const char *msg_model(const srv_request *r, const srv_model_info *mi) {
    const char *asked = json_string_value(json_object_get(r->api_fields, "model"));
    return asked ? asked : mi->served_name ? mi->served_name : "";
}

/* ---- the answer ---- */

/* The chat machinery's tool call id ("call_<hex>") as Anthropic's ("toolu_<hex>"). */
static json_t *msg_tool_id(const json_t *id) {
    const char *s = json_string_value(id);
    if (!s) return json_string("toolu_");
    strbuf b = {0};
    strbuf_printf(&b, "toolu_%s", strncmp(s, "call_", 5) == 0 ? s + 5 : s);
    char *text = strbuf_take(&b);
    json_t *out = text ? srv__json_text(text, strlen(text)) : NULL;
    free(text);
    return out;
}

/* Anthropic's stop_reason for the chat finish_reason and the stop string that ended it. */
static const char *msg_stop_reason(const char *finish, const json_t *stop_sequence, bool clamped) {
    if (finish && strcmp(finish, "tool_calls") == 0) return "tool_use";
    if (finish && strcmp(finish, "length") == 0) return clamped ? "model_context_window_exceeded" : "max_tokens";
    return json_is_string(stop_sequence) ? "stop_sequence" : "end_turn";
}

/* A tool call's arguments (JSON text) as the tool_use block's input object. */
static json_t *msg_tool_input(const json_t *call) {
    const char *args = json_string_value(json_object_get(json_object_get(call, "function"), "arguments"));
    json_t *input = args ? json_loads(args, 0, NULL) : NULL;
    if (json_is_object(input)) return input;
    json_decref(input);
    return json_object();
}

json_t *srv__messages_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat) {
    const json_t *choice = json_array_get(json_object_get(chat, "choices"), 0);
    const json_t *msg = json_object_get(choice, "message"), *usage = json_object_get(chat, "usage");
    const json_t *reasoning = json_object_get(msg, "reasoning_content"), *text = json_object_get(msg, "content");
    const json_t *calls = json_object_get(msg, "tool_calls");
    json_t *content = json_array();
    int bad = !content;
    if (json_is_string(reasoning))
        bad |= json_array_append_new(
            content, json_pack("{s:s,s:O,s:s}", "type", "thinking", "thinking", reasoning, "signature", ""));
    if (json_is_string(text) && json_string_length(text) > 0)
        bad |= json_array_append_new(content, json_pack("{s:s,s:O}", "type", "text", "text", text));
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *call = json_array_get(calls, k);
        bad |= json_array_append_new(content, json_pack("{s:s,s:o,s:O?,s:o}", "type", "tool_use", "id",
                                                        msg_tool_id(json_object_get(call, "id")), "name",
                                                        json_object_get(json_object_get(call, "function"), "name"),
                                                        "input", msg_tool_input(call)));
    }
    const json_t *stop_sequence = json_object_get(choice, "stop_reason"); /* the stop string (vLLM's field) */
    const char *model = msg_model(r, mi);
    json_t *out =
        bad ? NULL
            : json_pack("{s:s,s:s,s:s,s:o,s:O,s:s,s:O?,s:{s:O?,s:O?}}", "id", a->id, "type", "message", "role",
                        "assistant", "model", srv__json_text(model, strlen(model)), "content", content, "stop_reason",
                        msg_stop_reason(json_string_value(json_object_get(choice, "finish_reason")), stop_sequence,
                                        json_is_true(json_object_get(r->api_fields, "clamped"))),
                        "stop_sequence", json_is_string(stop_sequence) ? stop_sequence : NULL, "usage", "input_tokens",
                        json_object_get(usage, "prompt_tokens"), "output_tokens",
                        json_object_get(usage, "completion_tokens"));
    json_decref(content);
    json_decref(chat);
    return out;
}

/* ---- streams: chat chunks into Anthropic's events ---- */

typedef enum msg_block_kind { MSG_BLOCK_NONE, MSG_BLOCK_TEXT, MSG_BLOCK_THINKING, MSG_BLOCK_TOOL_USE } msg_block_kind;

typedef struct msg_stream {
    srv_api_stream base; /* first: what the transport holds */
    char id[48];
    char *model;
    int64_t input_tokens;
    bool clamped;        /* max_tokens was cut to the context: "length" is the context's */
    bool started, ended; /* message_start sent; message_stop or an error sent */
    msg_block_kind open; /* the block being streamed (index n_blocks - 1) */
    int n_blocks;
    char finish[16];       /* the chat finish_reason; "" until it came */
    json_t *stop_sequence; /* the stop string that ended the answer, or NULL */
    int64_t output_tokens;
} msg_stream;

/* "event: NAME\ndata: {...}\n\n" (takes data; data's "type" is NAME). */
static void msg_event(strbuf *out, const char *name, json_t *data) {
    char *text = data ? json_dumps(data, SRV_JSON_FLAGS) : NULL;
    json_decref(data);
    if (!text) {
        out->failed = true;
        return;
    }
    strbuf_printf(out, "event: %s\ndata: %s\n\n", name, text);
    free(text);
}

static void msg_stream_start(msg_stream *s, strbuf *out) {
    msg_event(out, "message_start",
              json_pack("{s:s,s:{s:s,s:s,s:s,s:o,s:[],s:n,s:n,s:{s:I,s:i}}}", "type", "message_start", "message", "id",
                        s->id, "type", "message", "role", "assistant", "model",
                        srv__json_text(s->model, strlen(s->model)), "content", "stop_reason", "stop_sequence", "usage",
                        "input_tokens", (json_int_t)s->input_tokens, "output_tokens", 0));
    s->started = true;
}

static void msg_block_close(msg_stream *s, strbuf *out) {
    if (s->open == MSG_BLOCK_NONE) return;
    msg_event(out, "content_block_stop",
              json_pack("{s:s,s:i}", "type", "content_block_stop", "index", s->n_blocks - 1));
    s->open = MSG_BLOCK_NONE;
}

/* Closes the open block and starts block (taken) of kind. */
static void msg_block_open(msg_stream *s, strbuf *out, msg_block_kind kind, json_t *block) {
    msg_block_close(s, out);
    msg_event(out, "content_block_start",
              json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", s->n_blocks, "content_block", block));
    s->open = kind;
    s->n_blocks++;
}

/* A delta of the open block: {"type": type, key: value}. */
static void msg_block_delta(msg_stream *s, strbuf *out, const char *type, const char *key, const json_t *value) {
    msg_event(out, "content_block_delta",
              json_pack("{s:s,s:i,s:{s:s,s:O}}", "type", "content_block_delta", "index", s->n_blocks - 1, "delta",
                        "type", type, key, value));
}

/* Text or thinking: a block of that kind (opened when another is open), then the piece. */
static void msg_stream_text(msg_stream *s, strbuf *out, msg_block_kind kind, const json_t *piece) {
    if (!json_is_string(piece) || json_string_length(piece) == 0) return;
    bool thinking = kind == MSG_BLOCK_THINKING;
    if (s->open != kind)
        msg_block_open(s, out, kind,
                       thinking ? json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "")
                                : json_pack("{s:s,s:s}", "type", "text", "text", ""));
    msg_block_delta(s, out, thinking ? "thinking_delta" : "text_delta", thinking ? "thinking" : "text", piece);
}

/* One tool_calls entry: a head (id and name) opens a tool_use block, arguments go out as
 * input_json_delta. */
static void msg_stream_tool(msg_stream *s, strbuf *out, const json_t *call) {
    const json_t *fn = json_object_get(call, "function"), *id = json_object_get(call, "id");
    if (json_is_string(id))
        msg_block_open(s, out, MSG_BLOCK_TOOL_USE,
                       json_pack("{s:s,s:o,s:O?,s:{}}", "type", "tool_use", "id", msg_tool_id(id), "name",
                                 json_object_get(fn, "name"), "input"));
    const json_t *args = json_object_get(fn, "arguments");
    if (s->open == MSG_BLOCK_TOOL_USE && json_is_string(args) && json_string_length(args) > 0)
        msg_block_delta(s, out, "input_json_delta", "partial_json", args);
}

static void msg_stream_end(msg_stream *s, strbuf *out) {
    if (!s->started) msg_stream_start(s, out);
    msg_block_close(s, out);
    const char *reason = msg_stop_reason(s->finish[0] ? s->finish : NULL, s->stop_sequence, s->clamped);
    msg_event(out, "message_delta",
              json_pack("{s:s,s:{s:s,s:O?},s:{s:I}}", "type", "message_delta", "delta", "stop_reason", reason,
                        "stop_sequence", s->stop_sequence, "usage", "output_tokens", (json_int_t)s->output_tokens));
    msg_event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    s->ended = true;
}

static void msg_stream_event(srv_api_stream *base, const json_t *ev, strbuf *out) {
    msg_stream *s = (msg_stream *)base;
    if (s->ended) return;
    if (!ev) {
        msg_stream_end(s, out);
        return;
    }
    const json_t *error = json_object_get(ev, "error");
    if (error) { /* the generation failed: Anthropic's error event ends the stream */
        const char *message = json_string_value(json_object_get(error, "message"));
        msg_event(out, "error", msg_error_body(msg_error_status(error), NULL, message ? message : "error"));
        s->ended = true;
        return;
    }
    if (!s->started) msg_stream_start(s, out);
    const json_t *choices = json_object_get(ev, "choices"), *usage = json_object_get(ev, "usage");
    if (json_is_object(usage) && json_array_size(choices) == 0) { /* the last chunk: usage and the stop string */
        s->output_tokens = json_integer_value(json_object_get(usage, "completion_tokens"));
        const json_t *stop = json_array_get(json_object_get(ev, "stop_reasons"), 0);
        json_decref(s->stop_sequence);
        s->stop_sequence = json_is_string(stop) ? json_incref((json_t *)stop) : NULL;
        return;
    }
    const json_t *choice = json_array_get(choices, 0), *delta = json_object_get(choice, "delta");
    msg_stream_text(s, out, MSG_BLOCK_THINKING, json_object_get(delta, "reasoning_content"));
    msg_stream_text(s, out, MSG_BLOCK_TEXT, json_object_get(delta, "content"));
    const json_t *calls = json_object_get(delta, "tool_calls");
    for (size_t k = 0; k < json_array_size(calls); k++) msg_stream_tool(s, out, json_array_get(calls, k));
    const json_t *finish = json_object_get(choice, "finish_reason");
    if (json_is_string(finish)) {
        snprintf(s->finish, sizeof s->finish, "%s", json_string_value(finish));
        msg_block_close(s, out);
    }
}

static void msg_stream_destroy(srv_api_stream *base) {
    msg_stream *s = (msg_stream *)base;
    json_decref(s->stop_sequence);
    free(s->model);
    free(s);
}

srv_api_stream *srv__messages_stream(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a) {
    msg_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base = (srv_api_stream){.event = msg_stream_event, .destroy = msg_stream_destroy};
    snprintf(s->id, sizeof s->id, "%s", a->id);
    s->model = strdup(msg_model(r, mi));
    s->input_tokens = r->n_prompts > 0 ? r->prompt_lens[0] : 0;
    s->clamped = json_is_true(json_object_get(r->api_fields, "clamped"));
    if (!s->model) {
        free(s);
        return NULL;
    }
    return &s->base;
}

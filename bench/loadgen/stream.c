/* stream.c: what the events of an OpenAI streaming response mean for the metrics.
 *
 * A content chunk is one whose choices[0] carries non-empty text (completions) or
 * delta.content (chat); a chunk with an empty text or only the assistant role is not
 * content, so the time to the first token is not flattered by a role-only first chunk.
 * The first content chunk gives the TTFT and each later one an inter-token gap, as in vLLM.
 * A usage object (include_usage) gives the token counts; [DONE] ends the stream; an
 * error object is the request's failure. Times come from the caller, so this file has no
 * clock and no I/O, and the unit tests drive it directly.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench/loadgen/loadgen.h"

void lg_stream_init(lg_stream *s) {
    *s = (lg_stream){.completion_tokens = -1, .prompt_tokens = -1};
}

void lg_stream_free(lg_stream *s) {
    free(s->itl);
    free(s->error);
    *s = (lg_stream){0};
}

void lg_stream_set_error(lg_stream *s, const char *fmt, ...) {
    if (s->error) return;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&s->error, fmt, ap) < 0) s->error = NULL;
    va_end(ap);
    if (!s->error) s->error = strdup("out of memory");
}

/* The message of an error object: {"error": {"message": ...}}, {"error": "text"}, or
 * vLLM's {"object": "error", "message": ...}. NULL when data is not an error. */
static const char *stream_error_message(json_t *root) {
    json_t *err = json_object_get(root, "error");
    if (json_is_string(err)) return json_string_value(err);
    if (json_is_object(err)) {
        const char *msg = json_string_value(json_object_get(err, "message"));
        return msg ? msg : "error object without a message";
    }
    if (err && !json_is_null(err)) return "error of an unexpected type";
    const char *object = json_string_value(json_object_get(root, "object"));
    if (object && strcmp(object, "error") == 0) {
        const char *msg = json_string_value(json_object_get(root, "message"));
        return msg ? msg : "error object without a message";
    }
    return NULL;
}

static void stream_content(lg_stream *s, double now) {
    s->content_chunks++;
    if (s->t_first == 0) {
        s->t_first = now;
    } else {
        if (s->n_itl == s->itl_cap) {
            size_t cap = s->itl_cap ? 2 * s->itl_cap : 64;
            double *grown = realloc(s->itl, cap * sizeof *grown);
            if (!grown) {
                lg_stream_set_error(s, "out of memory");
                return;
            }
            s->itl = grown;
            s->itl_cap = cap;
        }
        s->itl[s->n_itl++] = now - s->t_last;
    }
    s->t_last = now;
}

void lg_stream_on_data(lg_stream *s, const char *data, size_t len, double now) {
    if (s->t_done != 0) return; /* nothing counts after [DONE] */
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        s->t_done = now;
        return;
    }
    json_error_t jerr;
    json_t *root = json_loadb(data, len, 0, &jerr);
    if (!root) {
        lg_stream_set_error(s, "stream event is not JSON (%s): %.80s", jerr.text, data);
        return;
    }
    s->t_end = now; /* as vLLM: the last chunk (the usage chunk included) ends the request */
    const char *err = stream_error_message(root);
    if (err) {
        lg_stream_set_error(s, "error event in the stream: %s", err);
        json_decref(root);
        return;
    }
    json_t *choice = json_array_get(json_object_get(root, "choices"), 0);
    if (choice) {
        json_t *text = json_object_get(choice, "text");
        if (!text) text = json_object_get(json_object_get(choice, "delta"), "content");
        if (json_is_string(text) && json_string_length(text) > 0) stream_content(s, now);
    }
    json_t *usage = json_object_get(root, "usage");
    if (json_is_object(usage)) {
        json_t *out = json_object_get(usage, "completion_tokens");
        json_t *in = json_object_get(usage, "prompt_tokens");
        if (json_is_integer(out)) s->completion_tokens = (int)json_integer_value(out);
        if (json_is_integer(in)) s->prompt_tokens = (int)json_integer_value(in);
    }
    json_decref(root);
}

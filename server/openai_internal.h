/* openai_internal.h: what the files of the OpenAI layer (errors.c, openai_fields.c,
 * openai_request.c, openai_response.c, chat.c, tokenize.c) share with each other and
 * nobody else: typed readers of request fields that fill an srv_error naming the
 * field, JSON text helpers, and the chat rendering that /v1/chat/completions and
 * /tokenize both use. Same thread rules as openai.h: reentrant, HTTP threads.
 */
#ifndef SP_SERVER_OPENAI_INTERNAL_H
#define SP_SERVER_OPENAI_INTERNAL_H

#include "server/openai.h"

/* ---- errors.c ---- */

/* srv_error_make, returning the sp_status the kind stands for (BAD_REQUEST:
 * SP_ERR_INVALID_ARG, CONTEXT_LENGTH: SP_ERR_RANGE, MODEL_NOT_FOUND: SP_ERR_NOT_FOUND,
 * INTERNAL: SP_ERR_INTERNAL, ...), so a parser can `return srv__fail(...)`. */
sp_status srv__fail(srv_error *err, srv_error_kind kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- openai_fields.c: JSON values and typed field readers ---- */

/* true when len bytes of s are valid UTF-8 as JSON needs it (no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
bool srv__utf8_valid(const char *s, size_t len);
/* A JSON string of len bytes (NULs kept); bytes that are not valid UTF-8 become
 * U+FFFD. New reference; NULL on out of memory. */
json_t *srv__json_text(const char *s, size_t len);
/* "a string", "an integer", "a number", "a boolean", "an object", "an array", "null". */
const char *srv__json_kind(const json_t *v);

/* obj[key], or NULL when it is absent or JSON null (SDKs send null for "not set"). */
json_t *srv__field(const json_t *obj, const char *key);

/* The readers below look up obj[key] (param names it in errors; NULL: key itself).
 * Absent or null: SP_OK with *given false (when given is not NULL) and *out untouched.
 * Wrong type or out of range: fill err (400, param) and return SP_ERR_INVALID_ARG. */
sp_status srv__read_bool(const json_t *obj, const char *key, bool *out, bool *given, srv_error *err);
/* An integer in [lo, hi]; a number with no fraction (3.0) counts as one. */
sp_status srv__read_int(const json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *given,
                        srv_error *err);

/* A number's allowed range; an open end excludes its bound. */
typedef struct srv__range {
    double lo, hi;
    bool lo_open, hi_open;
} srv__range;
sp_status srv__read_number(const json_t *obj, const char *key, srv__range range, double *out, bool *given,
                           srv_error *err);
/* A string: *out borrowed from obj, *len bytes (may hold NULs). */
sp_status srv__read_string(const json_t *obj, const char *key, const char **out, size_t *len, bool *given,
                           srv_error *err);

/* The same checks on a value already in hand (v not NULL), for array elements. */
sp_status srv__want_int(const json_t *v, const char *param, int64_t lo, int64_t hi, int64_t *out, srv_error *err);
/* The "Invalid type for 'param': expected X, but got Y instead." error. */
sp_status srv__type_error(srv_error *err, const char *param, const char *expected, const json_t *got);

/* The request's `model`, when given, must name the served model (served_name or
 * file_name): else 404 model_not_found. */
sp_status srv__check_model(const json_t *body, const srv_model_info *mi, srv_error *err);

/* Parses len bytes as one JSON object; not JSON or not an object is a 400 naming the
 * line and column. Caller owns *out (json_decref). */
sp_status srv__parse_body(const char *body, size_t len, json_t **out, srv_error *err);

/* ---- openai_request.c ---- */

/* 64 random bits for seeds and response ids (getrandom; a clock-and-counter mix when
 * the kernel has no entropy yet). Any thread. */
uint64_t srv__random_u64(void);

/* ---- chat.c: messages to prompt text ---- */

/* Validates body's messages (and tools, chat_template_kwargs) and renders them with
 * mi's chat template (add_generation_prompt true unless chat_template_kwargs says
 * otherwise). Caller owns *text (free(); NUL-terminated, *len bytes). */
sp_status srv__chat_render(const json_t *body, const srv_model_info *mi, char **text, size_t *len, srv_error *err);
/* Tokenizes rendered chat text: special tokens parsed, BOS added by the vocab's rule
 * unless the text already starts with the BOS token's text. Caller owns *ids (free()). */
sp_status srv__chat_tokenize(const srv_model_info *mi, const char *text, size_t len, int32_t **ids, size_t *n_ids,
                             srv_error *err);

#endif

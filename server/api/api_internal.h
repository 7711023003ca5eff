/* api_internal.h: what the files of server/api/ share with each other and nobody else:
 * typed readers of request fields, JSON text helpers, the chat rendering, tools and
 * reasoning helpers, and each dialect's functions that api_bridge.c dispatches to. No
 * transport here either. */
#ifndef SP_SERVER_API_INTERNAL_H
#define SP_SERVER_API_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/strbuf.h"
#include "server/api/api.h"

/* ==== The OpenAI layer ====
 * What the files of the OpenAI layer (errors.c, json_text.c, openai_fields.c,
 * openai_request.c, openai_response.c, chat.c, tokenize.c) share with each other and
 * nobody else: typed readers of request fields that fill an srv_error naming the
 * field, JSON text helpers, and the chat rendering that /v1/chat/completions and
 * /tokenize both use. Same thread rules as the API layer in api.h: reentrant, HTTP threads.
 */

/* ---- errors.c ---- */

/* srv_error_make, returning the sp_status the kind stands for (BAD_REQUEST:
 * SP_ERR_INVALID_ARG, CONTEXT_LENGTH: SP_ERR_RANGE, MODEL_NOT_FOUND: SP_ERR_NOT_FOUND,
 * INTERNAL: SP_ERR_INTERNAL, ...), so a parser can `return srv__fail(...)`. */
sp_status srv__fail(srv_error *err, srv_error_kind kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- json_text.c: JSON strings from any bytes ---- */

/* true when len bytes of s are valid UTF-8 as JSON needs it (no overlong forms, no
 * surrogates, nothing above U+10FFFF). */
bool srv__utf8_valid(const char *s, size_t len);
/* A JSON string of len bytes (NULs kept); bytes that are not valid UTF-8 become
 * U+FFFD. New reference; NULL on out of memory. */
json_t *srv__json_text(const char *s, size_t len);

/* ---- openai_fields.c: JSON values and typed field readers ---- */

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

/* The output constraint of a request (openai_constraint.c): response_format,
 * json_schema, grammar, guided_json / guided_regex / guided_choice / guided_grammar,
 * compiled into r->params.grammar (owned by r); at most one; a bad one is a 400 naming
 * the field with the position in it. */
sp_status srv__request_constraint(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err);
/* GBNF text compiled into r->params.grammar (or the cached grammar of the same text);
 * errors are 400s naming param. */
sp_status srv__compile_grammar(const char *gbnf, const srv_model_info *mi, srv_request *r, const char *param,
                               srv_error *err);

/* ---- reasoning (reasoning.c) ---- */

/* Where an answer's reasoning and content lie (byte offsets into its text). */
typedef struct srv_reasoning_split {
    size_t reasoning, reasoning_len; /* the thinking (blanks after <think> dropped) */
    size_t reasoning_end;            /* just past </think> (or the end when it never closed) */
    size_t content, content_len;     /* the answer after it */
} srv_reasoning_split;

/* max_reasoning_tokens of a chat request into r->params (with the tokens of "</think>" the
 * scheduler forces once the budget is spent); 400s naming it for a template that does not
 * think, or beside an output constraint. After the prompt is rendered. */
sp_status srv__reasoning_budget(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err);
/* Whether a chat template's source uses thinking tags. */
bool srv__reasoning_detect(const char *source, size_t len);
/* Whether a rendered prompt ends inside <think> (the answer starts in the thinking). */
bool srv__reasoning_open_at_start(const srv_model_info *mi, const char *prompt, size_t len);
/* Splits a chat answer; false (all content) when the template has no thinking or the
 * answer does not think. */
bool srv__reasoning_split(const srv_model_info *mi, const srv_request *r, const char *text, size_t len,
                          srv_reasoning_split *out);

/* ---- tool calls (tools.c) ---- */

/* Whether template t prints a request's tools (a probe render), and the format its model
 * writes calls in (markers in its source). */
srv_tool_format srv__tools_detect(const tmpl *t, const json_t *tokens, const char *source, size_t len, bool *renders);
const char *srv__tools_format_name(srv_tool_format f);
/* tools, tool_choice and parallel_tool_calls of a chat request into r (400s naming the
 * field); a required or named choice compiles its grammar. After the constraint fields. */
sp_status srv__request_tools(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err);
/* The template context for r's tools: none for tool_choice none; for a template that
 * ignores tools, the generic format's system block and earlier calls written in it. */
sp_status srv__tools_adjust_context(const srv_model_info *mi, const srv_request *r, json_t *ctx, srv_error *err);
/* The calls srv_tools_scan finds in the whole of text, the last one's arguments as far as
 * they came (OpenAI's tool_calls array; NULL when no call's name came): the calls of a
 * forced tool_choice that max_tokens cut. */
json_t *srv__tools_scan_all(const char *text, size_t len);

/* The request's `model`, when given, must name the served model (served_name, an alias
 * or file_name): else 404 model_not_found. */
sp_status srv__check_model(const json_t *body, const srv_model_info *mi, srv_error *err);
/* The 404 model_not_found for name (len bytes), listing the names served. */
sp_status srv__model_not_found(const srv_model_info *mi, const char *name, size_t len, const char *param,
                               srv_error *err);

/* Parses len bytes as one JSON object; not JSON or not an object is a 400 naming the
 * line and column. Caller owns *out (json_decref). */
sp_status srv__parse_body(const char *body, size_t len, json_t **out, srv_error *err);

/* ---- openai_request.c ---- */

/* srv_request_parse on a body already parsed (chat or completions): what the APIs over
 * chat call with the chat body they translated theirs into. root is borrowed. */
sp_status srv__request_from_json(srv_endpoint endpoint, const json_t *root, const srv_model_info *mi, srv_request *out,
                                 srv_error *err);

/* The request's prompt tokens (its prompts summed, times n) within --max-request-tokens
 * (by default the context length times n): else a 400 naming param, the counts and the
 * flag; what: "messages", "prompts", "inputs" (openai_request.c). */
sp_status srv__request_tokens_bound(const srv_model_info *mi, const srv_request *r, const char *param, const char *what,
                                    srv_error *err);

/* ---- chat.c: messages to prompt text ---- */

/* Validates body's messages (and tools, chat_template_kwargs) and renders them with
 * mi's chat template (add_generation_prompt true unless chat_template_kwargs says
 * otherwise). r (NULL: none, as /tokenize) decides how tools reach the prompt
 * (srv__tools_adjust_context). Caller owns *text (free(); NUL-terminated, *len bytes). */
sp_status srv__chat_render(const json_t *body, const srv_model_info *mi, const srv_request *r, char **text, size_t *len,
                           srv_error *err);
/* Tokenizes rendered chat text: special tokens parsed, BOS added by the vocab's rule
 * unless the text already starts with the BOS token's text. Caller owns *ids (free()). */
sp_status srv__chat_tokenize(const srv_model_info *mi, const char *text, size_t len, int32_t **ids, size_t *n_ids,
                             srv_error *err);

/* openai_refused.c: the known fields spindle does not implement, each a 400 naming it
 * unless given its neutral value (the list in docs/api.md). n: the request's choices. */
sp_status srv__request_refused(const json_t *root, srv_endpoint endpoint, int n, srv_error *err);

/* An API over chat, as api_bridge.c calls it (nginx's module struct): the dialect's
 * file defines one and api_bridge.c lists it, so the next dialect is a file and a line
 * there. Chat and completions are the core itself and have none. */
typedef struct srv__dialect {
    srv_endpoint api; /* the srv_request.api it serves */
    sp_status (*parse)(const char *body, size_t len, const srv_model_info *mi, uint64_t tenant, srv_request *out,
                       srv_error *err);
    json_t *(*render)(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat);
    srv_api_stream *(*stream)(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a);
    char *(*error_json)(const srv_error *err); /* NULL: OpenAI's error object */
} srv__dialect;
extern const srv__dialect srv__dialect_responses; /* responses.c */
extern const srv__dialect srv__dialect_messages;  /* anthropic.c */

/* responses.c: POST /v1/responses, and the stored responses (GET and DELETE by id) */
sp_status srv__responses_parse(const char *body, size_t len, const srv_model_info *mi, uint64_t tenant,
                               srv_request *out, srv_error *err);
json_t *srv__responses_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat);
srv_api_stream *srv__responses_stream(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a);

/* response_store.c (see srv_response_store in api.h). Put takes both references and
 * keeps their compact JSON (false when it cannot be kept: larger than a key's share, none
 * kept); get parses it again, giving the caller's own trees (NULL pointers: not wanted).
 * A missing, expired or other key's id: false. now: the caller's clock in seconds
 * (sched_now(); tests pass their own), which expiry uses. */
bool srv__store_put(srv_response_store *s, const char *id, uint64_t tenant, json_t *response, json_t *conversation,
                    double now);
bool srv__store_get(srv_response_store *s, const char *id, uint64_t tenant, json_t **response, json_t **conversation,
                    double now);
bool srv__store_delete(srv_response_store *s, const char *id, uint64_t tenant, double now);
/* What an entry whose compact JSON texts have these lengths counts against the budgets. */
size_t srv__store_entry_charge(size_t response_len, size_t conversation_len);

/* anthropic.c: POST /v1/messages and /v1/messages/count_tokens */
sp_status srv__messages_parse(const char *body, size_t len, const srv_model_info *mi, srv_request *out, srv_error *err);
json_t *srv__messages_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat);
srv_api_stream *srv__messages_stream(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a);
char *srv__messages_error_json(const srv_error *err);

#endif

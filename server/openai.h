/* openai.h (internal to server/): the OpenAI API layer without any transport:
 * request bodies parsed and validated into scheduler requests, chat messages rendered
 * through the model's chat template, results encoded as OpenAI's JSON shapes and SSE
 * chunks, and every error as one OpenAI error object with its HTTP status.
 *
 * DESIGN (threads): everything here runs on the HTTP threads and is reentrant; the
 * served model's description (srv_model_info) is immutable after start and shared by
 * all of them. Nothing here touches the scheduler's state: outputs are read by the
 * caller under the request's lock and passed in.
 */
#ifndef SP_SERVER_OPENAI_H
#define SP_SERVER_OPENAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "model/template.h"
#include "model/tokenizer.h"
#include "scheduler/sched.h"

/* How response bodies are written: compact, and reals with 9 significant digits (every
 * float32 logprob round-trips; no "-0.10000000149011612"). */
#define SRV_JSON_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

/* ---- errors: the one place HTTP statuses are chosen ---- */

/* An error answer: HTTP status and OpenAI's {"error": {message, type, param, code}}. */
typedef struct srv_error {
    int http_status;  /* 400, 401, 404, 405, 408, 413, 429, 500, 503 ... */
    const char *type; /* "invalid_request_error", "not_found_error", "server_error", ... (static) */
    const char *code; /* "context_length_exceeded", "model_not_found", ... or NULL (static) */
    char param[64];   /* the offending field ("messages[1].content"), or "" */
    char message[512];
} srv_error;

/* What went wrong, as the HTTP answer classifies it. srv_error_make picks the status,
 * type and code of each kind from one table (errors.c):
 *   BAD_REQUEST        400 invalid_request_error
 *   CONTEXT_LENGTH     400 invalid_request_error, code context_length_exceeded
 *   UNAUTHORIZED       401 invalid_request_error, code invalid_api_key (OpenAI's answer)
 *   NOT_FOUND          404 invalid_request_error, code not_found (an unknown URL)
 *   MODEL_NOT_FOUND    404 invalid_request_error, code model_not_found
 *   METHOD_NOT_ALLOWED 405 invalid_request_error, code method_not_allowed
 *   TIMEOUT            408 timeout_error, code timeout
 *   TOO_LARGE          413 invalid_request_error, code request_too_large
 *   RATE_LIMIT         429 rate_limit_error, code rate_limit_exceeded
 *   INTERNAL           500 server_error
 *   UNAVAILABLE        503 unavailable_error */
typedef enum srv_error_kind {
    SRV_ERROR_BAD_REQUEST,
    SRV_ERROR_CONTEXT_LENGTH,
    SRV_ERROR_UNAUTHORIZED,
    SRV_ERROR_NOT_FOUND,
    SRV_ERROR_MODEL_NOT_FOUND,
    SRV_ERROR_METHOD_NOT_ALLOWED,
    SRV_ERROR_TIMEOUT,
    SRV_ERROR_TOO_LARGE,
    SRV_ERROR_RATE_LIMIT,
    SRV_ERROR_INTERNAL,
    SRV_ERROR_UNAVAILABLE
} srv_error_kind;

/* Fills err for kind; param may be NULL or ""; message formatted. Returns err->http_status. */
int srv_error_make(srv_error *err, srv_error_kind kind, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Fills err; message formatted. Returns err->http_status. */
int srv_error_set(srv_error *err, int http_status, const char *type, const char *code, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Maps a status from the layers below (sched_submit, tok_encode, tmpl_render, a
 * finished request's output.error) with its message to the HTTP answer:
 *   SP_ERR_INVALID_ARG/FORMAT -> 400 invalid_request_error; SP_ERR_RANGE -> 400
 *   context_length_exceeded; SP_ERR_NOT_FOUND -> 404; SP_ERR_FULL -> 429
 *   rate_limit_exceeded; SP_ERR_UNAVAILABLE -> 503; SP_ERR_TIMEOUT -> 408 timeout;
 *   anything else -> 500 server_error. */
int srv_error_from_status(srv_error *err, sp_status st, const char *message);
/* {"error": {...}} as compact JSON text; caller owns, free(). NULL on out of memory. */
char *srv_error_json(const srv_error *err);

/* ---- the served model, as the API layer needs it ---- */

typedef struct srv_model_info {
    const char *served_name;   /* the id /v1/models lists ("SmolLM2-135M-Instruct.Q4_1") */
    const char *file_name;     /* the GGUF's file name, also accepted as `model` */
    const tok_vocab *vocab;    /* immutable; tokenizes on any thread */
    const tmpl *chat_template; /* the model's, --chat-template's, or ChatML */
    bool template_takes_parts; /* the template iterates over content parts itself */
    json_t *template_tokens;   /* {"bos_token": ..., "eos_token": ...} added to every render */
    int32_t max_seq_len;       /* prompt + completion limit of one sequence */
    int max_n;                 /* most choices per request (--max-n); 0: SRV_MAX_N */
    int32_t max_tokens;        /* largest max_tokens a request may ask for (--max-tokens); 0: the context */
    int64_t created;           /* unix time the server loaded the model */
} srv_model_info;

/* Fills the template fields of mi: the model's template (or override_path's file, or
 * ChatML with a warning logged when the model has none), the probe that decides
 * template_takes_parts, and the special tokens; the caller sets the other fields. A file
 * that cannot be read or a template that does not parse is an error naming the file
 * (or the GGUF). Caller frees with srv_model_info_free. */
sp_status srv_model_info_init_template(srv_model_info *mi, const gguf_file *f, const char *override_path);
void srv_model_info_free(srv_model_info *mi);

/* ---- requests ---- */

typedef enum srv_endpoint { SRV_ENDPOINT_CHAT, SRV_ENDPOINT_COMPLETIONS } srv_endpoint;

/* A validated /v1/chat/completions or /v1/completions request. Owns everything it
 * points to; free with srv_request_free. */
typedef struct srv_request {
    srv_endpoint endpoint;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    int n;              /* choices per prompt (1..SRV_MAX_N) */
    int n_prompts;      /* chat: 1; completions: 1 or the prompt array's length */
    int32_t **prompts;  /* (n_prompts) token ids, each (prompt_lens[i]) */
    int32_t *prompt_lens;
    int32_t *max_tokens;         /* (n_prompts) the request's max_tokens, or what the context leaves after
                                  * that prompt; srv_request_choice_params puts it into params.max_tokens */
    bool logprobs;               /* chat: logprobs; completions: logprobs given */
    int top_logprobs;            /* alternatives per token (chat top_logprobs, completions logprobs) */
    bool seed_given;             /* a request `seed`: choice i uses seed + i */
    sched_request_params params; /* everything but the prompt; stop and logit_bias point below */
    char **stop;                 /* (params.n_stop) */
    sample_logit_bias *logit_bias;
    char *prompt_text; /* chat: the rendered prompt (for debugging and /tokenize) */
} srv_request;

enum { SRV_MAX_N = 16, SRV_MAX_PROMPTS = 64 };

/* Parses and validates body (len bytes, need not be NUL-terminated) for endpoint:
 * JSON syntax, every known field's type and range (unknown fields ignored), the model
 * name, messages (roles system/user/assistant/tool/developer, content as a string or
 * text parts), the chat template render and tokenization, max_tokens against the
 * context (default: what the context leaves). On failure fills err (400 naming the
 * field, 404 model_not_found, 400 context_length_exceeded) and returns its status. */
sp_status srv_request_parse(srv_endpoint endpoint, const char *body, size_t len, const srv_model_info *mi,
                            srv_request *out, srv_error *err);
void srv_request_free(srv_request *r);

/* The sched_request_params for choice `choice` (0..n-1) of prompt `prompt`: the prompt,
 * and the seed (seed + choice when given, else a fresh random seed per choice). */
sched_request_params srv_request_choice_params(const srv_request *r, int prompt, int choice);

/* ---- responses ---- */

/* The id of a response: "chatcmpl-<hex>" or "cmpl-<hex>"; buf of at least 40 bytes. */
void srv_response_id(srv_endpoint endpoint, char *buf, size_t cap);

/* The finish_reason text of a finished output: STOP "stop", LENGTH "length"; CANCELLED
 * "abort" and ERROR "error" (vLLM's words; those outputs normally end in an error event
 * instead); NONE (still running) NULL. */
const char *srv_finish_reason(sched_finish f);

/* The non-streaming body: one choice per output (index = prompt * n + choice, in the
 * order given), usage summed (prompt tokens once per prompt), a llama-server-style
 * `timings` object. outs are finished (done, not ERROR). Returns a new reference. */
json_t *srv_render_response(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                            const sched_output *const *outs, int n_outs);

/* SSE streaming. Each function returns one complete event ("data: {...}\n\n") as a
 * new string (caller owns, free()) or NULL on out of memory. */
/* chat only: the first chunk of a choice: delta {"role": "assistant", "content": ""}. */
char *srv_sse_role_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created, int index);
/* New content of choice `index`: text (len bytes) and, when logprobs were asked, the
 * tokens (n_tokens) with their alternatives top (n_tokens, out_top_logprobs) from the
 * output; finish_reason NULL, or "stop"/"length" for the choice's last chunk (which may
 * carry text too; without text its chat delta is {}, as OpenAI's last chunk). Streamed
 * completions logprobs have no text_offset (it needs the characters sent before). */
char *srv_sse_delta_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created, int index,
                          const char *text, size_t len, const sched_token *tokens, int32_t n_tokens,
                          const sched_token *top, int out_top_logprobs, const char *finish_reason);
/* include_usage: the last chunk, "choices": [] and the usage of all outputs. */
char *srv_sse_usage_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                          const sched_output *const *outs, int n_outs);
/* An error in the middle of a stream: data: {"error": {...}}. */
char *srv_sse_error_event(const srv_error *err);
/* The end: "data: [DONE]\n\n" (static, do not free). */
extern const char SRV_SSE_DONE[];

/* ---- the other endpoints' bodies ---- */

/* GET /v1/models. New reference. */
json_t *srv_render_models(const srv_model_info *mi);
/* POST /tokenize: {"content" | "prompt": string, or "messages": [...] (with tools and
 * chat_template_kwargs, tokenized exactly as a chat completion would be), "add_special"
 * or "add_special_tokens": bool (BOS by the vocab's rule; default false for content as
 * llama-server, true for prompt as vLLM), "with_pieces": bool} -> {"tokens": [ids] or
 * [{"id", "piece"}], "count": n, "max_model_len": L}. On failure fills err and returns
 * NULL. */
json_t *srv_tokenize(const char *body, size_t len, const srv_model_info *mi, srv_error *err);
/* POST /detokenize: {"tokens": [ids]} -> {"content": text, "prompt": text}, special
 * tokens rendered. On failure fills err and returns NULL. */
json_t *srv_detokenize(const char *body, size_t len, const srv_model_info *mi, srv_error *err);

#endif

/* api.h: server/api's one public header: the OpenAI, Responses and Anthropic API layer
 * without any transport (no libmicrohttpd, no sockets): request bodies parsed and
 * validated into scheduler requests, chat messages rendered, answers encoded as JSON and
 * SSE event text, every error as one OpenAI error object with its HTTP status. The
 * transport over it is server/http/ (server/http/http.h); nothing here calls up into it.
 *
 * One unit per dialect on a shared core (nginx's modules: one job a file):
 *   core         errors.c (statuses), json_text.c (JSON strings from any bytes),
 *                random.c (seeds and ids), openai_fields.c (typed field readers),
 *                openai_request.c (request fields and sampling), openai_refused.c,
 *                openai_constraint.c, chat.c (messages to prompt), tools.c, reasoning.c,
 *                openai_response.c (answers and SSE chunks)
 *   OpenAI       /v1/chat/completions and /v1/completions: the core itself
 *   Responses    responses.c (over chat), response_store.c (previous_response_id, GET/DELETE)
 *   Anthropic    anthropic.c (over chat), anthropic_answer.c
 *   embeddings   embeddings.c
 *   tokenize     tokenize.c (/tokenize, /detokenize)
 * api_bridge.c picks a dialect over chat by srv_request.api: the next dialect is one
 * file with its parse, render and stream functions and a case there.
 * Internal: server/api/api_internal.h. */
#ifndef SP_SERVER_API_H
#define SP_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/strbuf.h"
#include "scheduler/sched.h"
#include "template/template.h"
#include "tokenizer/tokenizer.h"

/* ==== The OpenAI layer ====
 * The OpenAI API layer without any transport:
 * request bodies parsed and validated into scheduler requests, chat messages rendered
 * through the model's chat template, results encoded as OpenAI's JSON shapes and SSE
 * chunks, and every error as one OpenAI error object with its HTTP status.
 *
 * DESIGN (threads): everything here runs on the HTTP threads and is reentrant; the
 * served model's description (srv_model_info) is immutable after start and shared by
 * all of them. Nothing here touches the scheduler's state: outputs are read by the
 * caller under the request's lock and passed in.
 */

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

/* How the model writes tool calls (server/api/tools.c), from its chat template. */
typedef enum srv_tool_format {
    SRV_TOOLS_GENERIC, /* {"tool_calls": [...]}: the template ignores tools, or its format is unknown */
    SRV_TOOLS_HERMES,  /* <tool_call>{...}</tool_call> (Hermes, Qwen 2.5 and 3) */
    SRV_TOOLS_LLAMA3,  /* {"name": ..., "parameters": {...}} (Llama 3.x) */
    SRV_TOOLS_MISTRAL  /* [TOOL_CALLS][{...}] */
} srv_tool_format;

typedef enum srv_tool_choice {
    SRV_TOOL_CHOICE_NONE,     /* no tools in the prompt, none parsed */
    SRV_TOOL_CHOICE_AUTO,     /* the model decides; the answer is parsed for calls */
    SRV_TOOL_CHOICE_REQUIRED, /* a grammar makes the answer one or more calls */
    SRV_TOOL_CHOICE_NAMED     /* a grammar makes the answer a call of that function */
} srv_tool_choice;

typedef struct srv_model_info {
    const char *served_name;    /* the id /v1/models lists ("SmolLM2-135M-Instruct.Q4_1") */
    const char *const *aliases; /* (n_aliases) more names requests may use (--served-model-name) */
    int n_aliases;
    const char *file_name;       /* the GGUF's file name, also accepted as `model` */
    const tok_vocab *vocab;      /* immutable; tokenizes on any thread */
    const tmpl *chat_template;   /* the model's, --chat-template's, or ChatML */
    bool template_takes_parts;   /* the template iterates over content parts itself */
    bool template_renders_tools; /* the template prints the request's tools (probed at start) */
    srv_tool_format tool_format; /* how the answer's tool calls are written and parsed */
    bool reasoning_tags;         /* the template uses <think> ... </think> (reasoning.c) */
    json_t *template_tokens;     /* {"bos_token": ..., "eos_token": ...} added to every render */
    int32_t max_seq_len;         /* prompt + completion limit of one sequence */
    int max_n;                   /* most choices per request (--max-n); 0: SRV_MAX_N */
    int max_sequences;           /* most prompts times n per request (--max-sequences-per-request); 0: none */
    int64_t max_request_tokens;  /* most prompt tokens summed, times n, per request (--max-request-tokens); 0: the
                                    context times n */
    int32_t max_tokens;          /* largest max_tokens a request may ask for (--max-tokens); 0: the context */
    int32_t default_max_tokens;  /* a request without max_tokens (--default-max-tokens); 0: the context */
    int64_t created;             /* unix time the server loaded the model */
    const char *cpu_kernels;     /* the CPU backend's kernel set ("avx512"); NULL on a GPU */
    gram_limits grammar_limits;  /* bounds on a compiled constraint (--grammar-max-*) */
    int32_t schema_max_depth;    /* JSON Schema nesting (--grammar-schema-max-depth) */
    bool json_flexible;          /* JSON with optional whitespace (--grammar-json-whitespace) */
    const sample_params *sampling_defaults; /* what a request's missing sampling fields get (--temperature ...,
                                               the GGUF's general.sampling.*); NULL: the API's defaults */
    struct srv_response_store *responses;   /* stored /v1/responses; NULL: none kept; freed by
                                               srv_model_info_free */
    sp_pooling pooling;                     /* /v1/embeddings (--pooling, auto resolved); NONE: mean */
    struct srv_grammar_cache *grammars;     /* compiled constraints shared by their text; NULL: none (each
                                               request compiles its own); freed by srv_model_info_free */
    const gram_vocab *grammar_vocab;        /* the scheduler's (sched_grammar_vocab): a new grammar's masks are
                                               prepared with it before it is queued; NULL: they walk lazily */
} srv_model_info;

/* The responses /v1/responses stores for previous_response_id (response_store.c):
 * bounded by bytes (what the entries hold in memory), count and age; per API key, each
 * key with its own share. Thread-safe. */
typedef struct srv_response_store srv_response_store;
sp_status srv_response_store_create(size_t max_bytes, int max_count, double ttl_s, srv_response_store **out);
/* Each key's share of the bytes (--responses-store-key-mb): a key past it drops its own
 * oldest first. 0 (or more than the budget): the whole budget, the default. */
void srv_response_store_set_key_bytes(srv_response_store *s, size_t key_max_bytes);
void srv_response_store_destroy(srv_response_store *s);

/* What the store holds now and what it has done (the /metrics gauges and counters). */
typedef struct srv_store_stats {
    size_t bytes;           /* charged by the entries held: their text, struct and malloc's overhead */
    int entries, keys;      /* entries held; API keys holding any */
    uint64_t stored;        /* entries put */
    uint64_t expired;       /* dropped past the TTL */
    uint64_t evicted_own;   /* dropped for a newer entry of the same key (its share, or it held the most) */
    uint64_t evicted_other; /* dropped for another key's entry (the store full and this key holding the most) */
    uint64_t refused;       /* not kept: larger than a key's share */
} srv_store_stats;
void srv_response_store_stats(srv_response_store *s, srv_store_stats *out); /* s NULL: zeros */

/* Compiled grammars kept by their GBNF text (the last SRV_GRAMMAR_CACHE_ENTRIES used), so
 * a schema seen again reuses the grammar and the masks it has cached. Thread-safe. */
typedef struct srv_grammar_cache srv_grammar_cache;
enum { SRV_GRAMMAR_CACHE_ENTRIES = 32 };
sp_status srv_grammar_cache_create(srv_grammar_cache **out);
void srv_grammar_cache_destroy(srv_grammar_cache *c);

/* Fills the template fields of mi: the model's template (or override_path's file, or
 * ChatML with a warning logged when the model has none), the probe that decides
 * template_takes_parts, and the special tokens; the caller sets the other fields. A file
 * that cannot be read or a template that does not parse is an error naming the file
 * (or the GGUF). Caller frees with srv_model_info_free. */
sp_status srv_model_info_init_template(srv_model_info *mi, const gguf_file *f, const char *override_path);
void srv_model_info_free(srv_model_info *mi);

/* ---- requests ---- */

typedef enum srv_endpoint {
    SRV_ENDPOINT_CHAT,        /* /v1/chat/completions */
    SRV_ENDPOINT_COMPLETIONS, /* /v1/completions */
    SRV_ENDPOINT_RESPONSES,   /* /v1/responses: a chat request underneath (responses.c) */
    SRV_ENDPOINT_MESSAGES,    /* /v1/messages (Anthropic): a chat request underneath (anthropic.c) */
    SRV_ENDPOINT_EMBEDDINGS   /* /v1/embeddings: prefill only, pooled */
} srv_endpoint;

/* A validated /v1/chat/completions or /v1/completions request. Owns everything it
 * points to; free with srv_request_free. */
typedef struct srv_request {
    srv_endpoint endpoint; /* the request's kind: a /v1/responses or /v1/messages request is CHAT */
    srv_endpoint api;      /* the API the client speaks: endpoint, or RESPONSES / MESSAGES over chat */
    json_t *api_fields;    /* that API's fields the answer echoes and the store keeps (responses.c,
                              anthropic.c); NULL for chat and completions; owned */
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
    /* tool calls (server/api/tools.c); chat only */
    json_t *tools; /* the request's tools when tool_choice is not none, else NULL (a reference) */
    srv_tool_choice tool_choice;
    char *tool_choice_name; /* SRV_TOOL_CHOICE_NAMED: the function */
    bool parallel_tool_calls;
    bool reasoning_open_at_start; /* the rendered prompt ends inside <think> (reasoning.c) */
    int32_t *think_close;         /* max_reasoning_tokens: the tokens of "</think>" (params points here) */
    char *cache_salt;             /* cache_salt's bytes (params.cache_salt points here); NULL: none */
    bool base64;                  /* embeddings: encoding_format base64 */
} srv_request;

enum { SRV_MAX_N = 16, SRV_MAX_PROMPTS = 64 };
/* Most inputs of one /v1/embeddings request (each is a sequence, like prompts times n). */
enum { SRV_MAX_EMBEDDING_INPUTS = 1024 };

/* Parses and validates body (len bytes, need not be NUL-terminated) for endpoint:
 * JSON syntax, every known field's type and range (unknown fields ignored), the model
 * name, messages (roles system/user/assistant/tool/developer, content as a string or
 * text parts), the chat template render and tokenization, max_tokens against the
 * context (default: what the context leaves). On failure fills err (400 naming the
 * field, 404 model_not_found, 400 context_length_exceeded) and returns its status. */
sp_status srv_request_parse(srv_endpoint endpoint, const char *body, size_t len, const srv_model_info *mi,
                            srv_request *out, srv_error *err);
void srv_request_free(srv_request *r);

/* POST /v1/embeddings (embeddings.c): `input` (a string, strings, token ids, or lists of
 * token ids; text tokenized with BOS by the vocab's rule and special tokens parsed, as
 * llama-server does), `model`, `encoding_format` (float or base64), `user` (ignored);
 * `dimensions` is a 400. Into out: one prompt per input, n 1, max_tokens 0, params.pooling
 * from mi. On failure fills err (400 naming the field, input[i] for one input, 404
 * model_not_found, 400 context_length_exceeded) and returns its status; out holds nothing. */
sp_status srv_embeddings_parse(const char *body, size_t len, const srv_model_info *mi, srv_request *out,
                               srv_error *err);
/* Its answer from the finished outputs (one per input, in order, done with STOP):
 * {"object": "list", "data": [{"object": "embedding", "index", "embedding": floats or
 * base64}], "model", "usage": {prompt_tokens, total_tokens}}. New reference; NULL on out of
 * memory. */
json_t *srv_render_embeddings(const srv_request *r, const srv_model_info *mi, const sched_output *const *outs,
                              int n_outs);

/* The sched_request_params for choice `choice` (0..n-1) of prompt `prompt`: the prompt,
 * and the seed (seed + choice when given, else a fresh random seed per choice). */
sched_request_params srv_request_choice_params(const srv_request *r, int prompt, int choice);

/* ---- responses ---- */

/* The id of an answer of the API endpoint speaks: "chatcmpl-<hex>", "cmpl-<hex>", "resp_<hex>",
 * "msg_<hex>" or "embd-<hex>"; buf of at least 40 bytes. */
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

/* A chat chunk whose delta is a piece of the reasoning (delta.reasoning_content). */
char *srv_sse_reasoning_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                              int index, const char *text, size_t len, const sched_token *tokens, int32_t n_tokens,
                              const sched_token *top, int out_top_logprobs);
/* A chat chunk whose delta is one tool_calls entry (taken: OpenAI's streamed form, an index
 * and either the call's id, type and name or a piece of its arguments). */
char *srv_sse_tool_call_delta(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                              int index, json_t *tool_call);
/* New content of choice `index`: text (len bytes) and, when logprobs were asked, the
 * tokens (n_tokens) with their alternatives top (n_tokens, out_top_logprobs) from the
 * output; finish_reason NULL, or "stop"/"length" for the choice's last chunk (the stream
 * sends it with no text: its chat delta is {}, its completions text "", as OpenAI's).
 * Streamed completions logprobs have no text_offset (it needs the characters sent before). */
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

/* GET /v1/models: the served model with its aliases. New reference. */
json_t *srv_render_models(const srv_model_info *mi);
/* GET /v1/models/{id}: the model under any of its names; else NULL with the 404 in err. */
json_t *srv_render_model(const srv_model_info *mi, const char *id, srv_error *err);
/* Whether name (len bytes) is the served name, an alias or the file name. */
bool srv_model_name_known(const srv_model_info *mi, const char *name, size_t len);
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

/* ==== What the transport calls beyond the answers above ====
 * The APIs over chat, the stored responses, and the pieces of tool-call and reasoning
 * parsing that a stream's text goes through as it comes (server/http/http_generation.c
 * holds a choice's text back with them). Same thread rules as above. */

/* 64 random bits for seeds and ids (getrandom; a clock-and-counter mix when the kernel
 * has no entropy yet; random.c). Any thread. */
uint64_t srv_random_u64(void);

/* ---- APIs over chat (api_bridge.c, responses.c, anthropic.c) ----
 * /v1/responses and Anthropic's /v1/messages are chat requests underneath. Each API's
 * file translates its body into a chat completions body (validated as a chat request;
 * r->api names the API), the chat answer back into its own
 * shape, and a stream's chat events, one at a time, into its own event sequence.
 * api_bridge.c picks the API's functions by r->api, so the transport stays the chat
 * machinery. Prep workers and HTTP threads; reentrant (a stream's translator has one
 * owner, its connection).
 */

/* A stream's translator: the API's state between events. */
typedef struct srv_api_stream srv_api_stream;
struct srv_api_stream {
    /* One chat event: a chunk object, or {"error": {...}} when the generation failed;
     * NULL at the end ([DONE]). The API's events go into out. */
    void (*event)(srv_api_stream *s, const json_t *chat_event, strbuf *out);
    void (*destroy)(srv_api_stream *s);
};

/* What an answer needs beside the request: its id, time and the caller's API key. */
typedef struct srv_api_answer {
    const char *id;
    int64_t created;
    uint64_t tenant; /* who the request speaks for (its API key hashed by the transport; stores are per key) */
} srv_api_answer;

/* The bridge (api_bridge.c): by api. srv_api_parse fills out (out->api = api). */
sp_status srv_api_parse(srv_endpoint api, const char *body, size_t len, const srv_model_info *mi, uint64_t tenant,
                        srv_request *out, srv_error *err);
/* The non-streaming answer: chat (srv_render_response's body, taken) in r->api's shape. */
json_t *srv_api_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat);
/* A stream's translator; NULL for chat and completions (their events go out as they are)
 * and on out of memory (*failed set). */
srv_api_stream *srv_api_stream_create(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a,
                                      bool *failed);
/* One chat SSE event's text ("data: {...}\n\n", or SRV_SSE_DONE) through s into out. */
void srv_api_stream_event(srv_api_stream *s, const char *chat_event, strbuf *out);
void srv_api_stream_destroy(srv_api_stream *s);
/* An error body in api's shape (Anthropic's for MESSAGES, else OpenAI's); free(). */
char *srv_api_error_json(srv_endpoint api, const srv_error *err);

/* POST /v1/messages/count_tokens (anthropic.c): {"input_tokens": n}; on failure NULL
 * and err. */
json_t *srv_messages_count_tokens(const char *body, size_t len, const srv_model_info *mi, srv_error *err);

/* ---- stored responses (responses.c): GET and DELETE /v1/responses/{id} ---- */

/* The response stored under id for tenant (new reference), or NULL with the 404 in err
 * (never stored, expired, deleted or another key's). */
json_t *srv_responses_get(const srv_model_info *mi, const char *id, uint64_t tenant, srv_error *err);
/* Deletes it: {"id", "object": "response", "deleted": true} (new reference), or NULL
 * with the 404 (or a 500 when out of memory) in err. */
json_t *srv_responses_delete(const srv_model_info *mi, const char *id, uint64_t tenant, srv_error *err);

/* ---- a stream's tool calls (tools.c) ---- */

/* The answer's tool calls (OpenAI's tool_calls array, new reference) and the content
 * around them (*content, malloc'd, NULL when none), or NULL when the answer is not calls
 * of r's tools (then it is all content). */
json_t *srv_tools_parse(const srv_model_info *mi, const srv_request *r, const char *text, size_t len, char **content);
/* A stream of forced calls (tool_choice required or named: name before arguments, by the
 * grammar) scanned as it comes, over the held text from its start. */
typedef struct srv_call_scan {
    size_t at;    /* bytes of the held text scanned */
    int index;    /* calls whose head was sent */
    bool in_args; /* inside a call's arguments value */
    int depth;
    bool in_str, esc;
} srv_call_scan;

typedef enum srv_call_event {
    SRV_CALL_WAIT, /* nothing new until more text comes */
    SRV_CALL_HEAD, /* a call's name at text[*from .. + *n) (a JSON string's content) */
    SRV_CALL_ARGS, /* a piece of its arguments at text[*from .. + *n) */
    SRV_CALL_LOST  /* not the shape expected: send the calls when the answer ends instead */
} srv_call_event;

srv_call_event srv_tools_scan(srv_call_scan *sc, const char *text, size_t len, size_t *from, size_t *n);
/* Whether name (n bytes) is one of r's tools. */
bool srv_tools_known(const srv_request *r, const char *name, size_t n);
/* For a stream of tool_choice auto: whether the held text (from where calls may begin)
 * starts a call of one of r's tools in mi's format, so that it can be streamed as it comes
 * (START), is not one (NO: decided when the answer ends), or cannot tell yet (WAIT). */
typedef enum srv_auto_calls { SRV_AUTO_WAIT, SRV_AUTO_START, SRV_AUTO_NO } srv_auto_calls;
srv_auto_calls srv_tools_auto_start(const srv_model_info *mi, const srv_request *r, const char *text, size_t len);

/* For a stream: the offset in the answer's unsent text from which it must be held back
 * because it may still be tool calls (len: nothing to hold). hermes calls may follow
 * text (held from the first <tool_call>, or a tag cut at the end); in the other formats
 * the calls are the whole answer, so once content has flowed (flowed) nothing is held. */
size_t srv_tools_hold_from(const srv_model_info *mi, const char *text, size_t len, bool flowed);

/* ---- a stream's reasoning (reasoning.c) ---- */

/* For streams: the bytes at the end of text that may begin a </think> (held back), the
 * offset of </think> in text (len when absent) and its length, and the length of a
 * leading <think> (0 when none; *maybe when text may still become one). */
size_t srv_reasoning_partial_close(const char *text, size_t len);
size_t srv_reasoning_close_at(const char *text, size_t len);
size_t srv_reasoning_close_len(void);
size_t srv_reasoning_open_len(const char *text, size_t len, bool *maybe);

#endif

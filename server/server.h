/* server.h: the server module's one public header, in two layers:
 * - the OpenAI layer (no transport): request bodies parsed and validated into
 *   scheduler requests, chat rendering, JSON and SSE encoding, errors;
 * - the HTTP transport over it (libmicrohttpd): the daemon cli/cmd_serve.c starts.
 * Internal to both: server/server_internal.h. */
#ifndef SP_SERVER_H
#define SP_SERVER_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
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
    sched_pooling pooling;                  /* /v1/embeddings (--pooling, auto resolved); NONE: mean */
    struct srv_grammar_cache *grammars;     /* compiled constraints shared by their text; NULL: none (each
                                               request compiles its own); freed by srv_model_info_free */
    const gram_vocab *grammar_vocab;        /* the scheduler's (sched_grammar_vocab): a new grammar's masks are
                                               prepared with it before it is queued; NULL: they walk lazily */
} srv_model_info;

/* The responses /v1/responses stores for previous_response_id (response_store.c):
 * bounded by bytes, count and age; per API key. Thread-safe. */
typedef struct srv_response_store srv_response_store;
sp_status srv_response_store_create(size_t max_bytes, int max_count, double ttl_s, srv_response_store **out);
void srv_response_store_destroy(srv_response_store *s);

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

/* ==== The HTTP transport ====
 * The HTTP transport: libmicrohttpd's daemon, routing,
 * request bodies, streaming over suspended connections, and the watcher that notices
 * clients that went away. The OpenAI layer it calls is above.
 *
 * DESIGN (threads and ownership)
 * - The main thread (cmd_serve.c) owns srv_app: it starts the HTTP daemon, loads the
 *   model (while /health answers 503), creates the scheduler, and on a signal shuts
 *   everything down in order.
 * - libmicrohttpd's pool threads (`--http-threads`, epoll) run every handler. A request
 *   whose body must be parsed, rendered or tokenized (chat, completions, tokenize,
 *   detokenize) is suspended and handed to the preparation workers (`--prep-threads`,
 *   prep.c), smallest body first, so a megabyte of text never stalls the probes and small
 *   requests these threads serve; resumed, the handler submits or answers. A
 *   generation's connection is then suspended again and costs no thread until the
 *   scheduler's notify resumes it. That is how thousands of open streams fit on two cores.
 * - The scheduler thread only calls srv_conn's notify (resume the connection); it never
 *   writes to a socket.
 * - The watcher thread (watch.c) polls the sockets of generating requests for hang-ups
 *   (a suspended connection is not polled by libmicrohttpd) and cancels their requests;
 *   it also wakes streams that have been quiet for `keepalive_s` so they send an SSE
 *   comment line during long prefills or queueing.
 * - `lifecycle` (a rwlock) guards the phase and the scheduler pointer: handlers hold it
 *   for reading around sched_submit, shutdown takes it for writing, so no handler
 *   submits to a scheduler that is being destroyed.
 */

typedef enum srv_phase {
    SRV_PHASE_LOADING, /* listening; the model is being loaded */
    SRV_PHASE_READY,
    SRV_PHASE_DRAINING,      /* SIGTERM: no new work; accepted work finishes (drain_timeout) */
    SRV_PHASE_SHUTTING_DOWN, /* ending what is left */
    SRV_PHASE_FAILED         /* loading failed; the process is about to exit */
} srv_phase;

typedef enum srv_log_format { SRV_LOG_TEXT, SRV_LOG_JSON } srv_log_format;

typedef struct srv_http_config {
    const char *host;               /* address to bind ("127.0.0.1", "0.0.0.0", "::1") */
    int port;                       /* 0: any free port (srv_http_port tells which) */
    int http_threads;               /* libmicrohttpd pool threads */
    int prep_threads;               /* workers that parse, render and tokenize bodies (prep.c) */
    size_t max_body_bytes;          /* larger bodies: 413 */
    int max_connections;            /* open connections at once */
    double keepalive_s;             /* SSE comment after this much quiet */
    int connection_timeout;         /* seconds an idle connection is kept (not counting suspended ones) */
    int header_timeout;             /* seconds for a request's headers, in all (deadlines.c) */
    int body_timeout;               /* seconds for a request's body, in all, once its headers are in */
    int max_connections_per_client; /* from one address; 0: no limit */
    int admin_port;                 /* probes and metrics only, on the same host; 0: none */
    size_t max_header_bytes;        /* request line + headers per connection (libmicrohttpd's memory limit) */
    /* security (auth.c): API keys from --api-key and --api-key-file (reloaded on SIGHUP) */
    const char *const *api_keys; /* (n_api_keys) from --api-key / the config file's api_keys */
    int n_api_keys;
    const char *api_key_file;        /* one key per line; NULL: none */
    bool metrics_require_key;        /* /metrics needs a key too (default: open) */
    const char *const *cors_origins; /* (n_cors_origins) allowed origins; "*" allows any; none: CORS off */
    int n_cors_origins;
    const char *tls_cert_file; /* PEM; both set: HTTPS */
    const char *tls_key_file;
    /* logging (access log) */
    srv_log_format log_format;
    bool access_log;  /* one line per request (default on) */
    bool log_prompts; /* include the prompt text in the access log (default off) */
    /* readiness and drain */
    double drain_timeout_s;      /* SIGTERM: in-flight work gets this long to finish */
    double ready_queue_fraction; /* /ready is 503 when the queue is above this fraction of its bounds */
    /* the other APIs and pages */
    bool metrics_vllm;            /* /metrics also under vLLM's names (--metrics-names vllm) */
    bool ui;                      /* the chat page at / (--no-ui: off) */
    size_t responses_store_bytes; /* stored /v1/responses; 0: none stored */
    int responses_store_max;      /* and their count */
    double responses_store_ttl_s; /* how long each is kept */
} srv_http_config;

typedef struct srv_watch srv_watch;

/* What every handler shares. Owned by the main thread; fields marked (ready) are set
 * before phase becomes READY and never change afterwards. */
typedef struct srv_app {
    srv_http_config http;
    pthread_rwlock_t lifecycle; /* guards phase transitions and sched (see DESIGN) */
    _Atomic int phase;          /* srv_phase */
    char load_error[256];       /* SRV_PHASE_FAILED: why */
    srv_model_info model;       /* (ready) */
    sched *sched;               /* (ready) until shutdown */
    srv_watch *watch;
    _Atomic long live_generations;   /* accepted generation requests whose connection is open */
    struct srv_auth *_Atomic auth;   /* security (auth.c): the API keys; NULL until loaded at start */
    struct srv_prep *prep;           /* the preparation workers (prep.c): srv_http_start to srv_http_stop */
    struct srv_deadlines *deadlines; /* header and body deadlines (deadlines.c): the same span */
} srv_app;

typedef struct srv_http srv_http;

/* Binds and starts serving app (borrowed until srv_http_stop). Caller owns *out. */
sp_status srv_http_start(srv_app *app, srv_http **out);
/* The bound port (useful with port 0). */
int srv_http_port(const srv_http *h);
/* The port of the --admin-port daemon (probes and metrics only); 0: none. */
int srv_http_admin_port(const srv_http *h);
/* Stops listening, closes every connection and joins the pool threads. */
void srv_http_stop(srv_http *h);

/* The scheduler is "stuck" for /health when it has not ticked or woken for this long
 * (one step of the largest batch takes well under a second on the default model). */
#define SRV_HEARTBEAT_STALE_S 30.0

/* GET /metrics (metrics.c): Prometheus text; s may be NULL (loading, shutting down).
 * Caller owns the text; free(). NULL on out of memory. */
char *srv_metrics_render(const srv_app *app, const sched *s);

/* ---- the watcher (watch.c) ---- */

/* A connection the watcher looks after while its generation runs. */
typedef struct srv_watched {
    int fd;
    void (*on_hangup)(void *arg); /* the client is gone: cancel */
    void (*on_quiet)(void *arg);  /* nothing sent for keepalive_s: wake the stream */
    void *arg;
    _Atomic double last_write; /* sched_now() of the last bytes handed to the socket */
    bool streaming;
    bool hung_up; /* watcher thread: on_hangup was called */
    int _slot;    /* index in the watcher's table, -1 when not watched */
} srv_watched;

sp_status srv_watch_create(double keepalive_s, srv_watch **out);
void srv_watch_destroy(srv_watch *w);
/* Starts watching w (borrowed until srv_watch_remove returns). */
sp_status srv_watch_add(srv_watch *wt, srv_watched *w);
/* Stops watching; after it returns no callback for w runs or will run. */
void srv_watch_remove(srv_watch *wt, srv_watched *w);

/* ---- security (auth.c) ---- */

/* The API key set (--api-key, --api-key-file), reloaded on SIGHUP. Any thread may
 * call srv_auth_check; srv_auth_reload runs on the main thread. */
typedef struct srv_auth srv_auth;

/* Longest API key accepted, in bytes (keys are compared in fixed slots of this size). */
#define SRV_AUTH_KEY_MAX 256

/* Builds the key set from config->api_keys and config->api_key_file (config borrowed
 * until srv_auth_destroy). No keys configured: the set is empty and every request is
 * authorized. A missing or unreadable file, a file without keys, an empty or too long
 * key, or one with a space or control character is an error naming the file and line.
 * Caller owns *out; free with srv_auth_destroy. */
sp_status srv_auth_create(const srv_http_config *config, srv_auth **out);
void srv_auth_destroy(srv_auth *a);
/* SIGHUP: reads the key file again into a new set and swaps it in atomically
 * (requests in flight finish with the set they started with). On failure the old
 * keys stay in use and the reason is logged and returned. Logs the outcome. */
sp_status srv_auth_reload(srv_auth *a);
/* How many keys are in use (0: authentication is off). */
int srv_auth_key_count(srv_auth *a);
/* Whether `authorization` (the Authorization header's value, or NULL) is
 * `Bearer <one of the keys>`, compared in constant time. When not, fills err with
 * OpenAI's 401 (invalid_request_error, invalid_api_key). Always true with no keys. */
bool srv_auth_check(srv_auth *a, const char *authorization, srv_error *err);
/* Who a request speaks for, for what requests may share (the speculative suffix
 * cache): a hash of its API key; 0 when authentication is off (a is NULL or has no
 * keys). Call after srv_auth_check accepted the header. */
uint64_t srv_auth_tenant(srv_auth *a, const char *authorization);

/* ---- systemd (notify.c) ---- */

/* systemd's notify protocol (sd_notify(3)) without libsystemd. Every function does
 * nothing when $NOTIFY_SOCKET is unset (not started by systemd with Type=notify). */
typedef struct srv_notify srv_notify;

/* Sends one message ("KEY=VALUE" lines) to $NOTIFY_SOCKET (a path, or an abstract
 * name when it starts with '@'). SP_OK when sent or when there is no socket; an error
 * naming the socket otherwise. Any thread. */
sp_status srv_notify_send(const char *message);
/* STATUS=<the formatted text>, newlines turned into spaces; failures are logged. */
void srv_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* READY=1 with MAINPID and the first STATUS= line. Main thread, once the model is
 * loaded, the port listens and app->phase is READY. Failures are logged. */
void srv_notify_ready(srv_app *app);
/* STOPPING=1 (shutdown began). Failures are logged. */
void srv_notify_stopping(void);
/* Starts the "sd-watchdog" thread: STOPPING=1 when it sees the drain begin, and each
 * period (WATCHDOG_USEC/2; 5 s without a watchdog) a STATUS= line with the model and
 * the load, plus WATCHDOG=1 while the scheduler's heartbeat is younger than
 * SRV_HEARTBEAT_STALE_S. Watchdog only when $WATCHDOG_USEC is set and $WATCHDOG_PID is
 * absent or this process. app is borrowed until srv_notify_stop. *out is NULL without
 * NOTIFY_SOCKET. Caller owns *out; free with srv_notify_stop (before the scheduler is
 * destroyed). */
sp_status srv_notify_start(srv_app *app, srv_notify **out);
/* Stops and joins the thread; NULL is a no-op. */
void srv_notify_stop(srv_notify *n);

/* ---- metrics and access log ---- */

/* Counts one HTTP request for /metrics' spindle_http_requests_total. endpoint is the
 * route path, or "other" for unknown paths; static storage (it is kept). status is
 * what was answered (499: the client left before an answer). Lock-free; any thread. */
void srv_metrics_count_http(const char *endpoint, int status);

/* One access log entry (access_log.c): what on_completed knows of a finished HTTP
 * request. Strings are borrowed for the call; NULL ones are left out ("-" in text). */
typedef struct srv_access_entry {
    const char *id; /* the response id (chatcmpl-..., cmpl-...) of a generation */
    const char *method;
    const char *path;
    int status;
    int64_t prompt_tokens, completion_tokens; /* as usage counts them */
    double ttft_s;      /* seconds from arrival to the first token (first choice to get one); < 0: none */
    double duration_s;  /* from the first byte of the request to its end */
    const char *finish; /* the choices' finish reasons, comma-separated (stop, length, cancelled, error) */
    const char *cancel; /* why it ended early: client_gone, timeout, shutdown, error */
    const char *prompt; /* JSON text of the prompt (log_prompts only) */
} srv_access_entry;

/* The entry as one line without the newline: text
 * `spindle: access: id=... method=POST path=/v1/chat/completions status=200 ...` or
 * one JSON object. Caller owns the text; free(). NULL on out of memory. */
char *srv_access_log_format(srv_log_format format, const srv_access_entry *e);
/* Writes the line to stderr (one write) when config->access_log is set. Any thread. */
void srv_access_log_write(const srv_http_config *config, const srv_access_entry *e);

#endif

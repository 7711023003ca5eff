/* server_internal.h: what the files of server/ share with each other and nobody else,
 * one section per layer: the OpenAI layer's helpers, the transport's connection state,
 * and the daemon options the security settings add. */
#ifndef SP_SERVER_INTERNAL_H
#define SP_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/strbuf.h"
#include "server/server.h"

/* ==== The OpenAI layer ====
 * What the files of the OpenAI layer (errors.c, openai_fields.c,
 * openai_request.c, openai_response.c, chat.c, tokenize.c) share with each other and
 * nobody else: typed readers of request fields that fill an srv_error naming the
 * field, JSON text helpers, and the chat rendering that /v1/chat/completions and
 * /tokenize both use. Same thread rules as the OpenAI layer in server.h: reentrant, HTTP threads.
 */

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
/* For streams: the bytes at the end of text that may begin a </think> (held back), the
 * offset of </think> in text (len when absent) and its length, and the length of a
 * leading <think> (0 when none; *maybe when text may still become one). */
size_t srv__reasoning_partial_close(const char *text, size_t len);
size_t srv__reasoning_close_at(const char *text, size_t len);
size_t srv__reasoning_close_len(void);
size_t srv__reasoning_open_len(const char *text, size_t len, bool *maybe);

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
/* The answer's tool calls (OpenAI's tool_calls array, new reference) and the content
 * around them (*content, malloc'd, NULL when none), or NULL when the answer is not calls
 * of r's tools (then it is all content). */
json_t *srv__tools_parse(const srv_model_info *mi, const srv_request *r, const char *text, size_t len, char **content);
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

srv_call_event srv__tools_scan(srv_call_scan *sc, const char *text, size_t len, size_t *from, size_t *n);
/* Whether name (n bytes) is one of r's tools. */
bool srv__tools_known(const srv_request *r, const char *name, size_t n);
/* For a stream of tool_choice auto: whether the held text (from where calls may begin)
 * starts a call of one of r's tools in mi's format, so that it can be streamed as it comes
 * (START), is not one (NO: decided when the answer ends), or cannot tell yet (WAIT). */
typedef enum srv_auto_calls { SRV_AUTO_WAIT, SRV_AUTO_START, SRV_AUTO_NO } srv_auto_calls;
srv_auto_calls srv__tools_auto_start(const srv_model_info *mi, const srv_request *r, const char *text, size_t len);
/* The calls srv__tools_scan finds in the whole of text, the last one's arguments as far as
 * they came (OpenAI's tool_calls array; NULL when no call's name came): the calls of a
 * forced tool_choice that max_tokens cut. */
json_t *srv__tools_scan_all(const char *text, size_t len);

/* For a stream: the offset in the answer's unsent text from which it must be held back
 * because it may still be tool calls (len: nothing to hold). hermes calls may follow
 * text (held from the first <tool_call>, or a tag cut at the end); in the other formats
 * the calls are the whole answer, so once content has flowed (flowed) nothing is held. */
size_t srv__tools_hold_from(const srv_model_info *mi, const char *text, size_t len, bool flowed);

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

/* 64 random bits for seeds and response ids (getrandom; a clock-and-counter mix when
 * the kernel has no entropy yet). Any thread. */
uint64_t srv__random_u64(void);

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

/* ==== APIs over chat (api_bridge.c, responses.c, anthropic.c) ====
 * /v1/responses and Anthropic's /v1/messages are chat requests underneath. Each API's
 * file translates its body into a chat completions body (validated by
 * srv__request_from_json; r->api names the API), the chat answer back into its own
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
    uint64_t tenant; /* srv_auth_tenant of the request's key (stores are per key) */
} srv_api_answer;

/* The bridge (api_bridge.c): by api. srv__api_parse fills out (out->api = api). */
sp_status srv__api_parse(srv_endpoint api, const char *body, size_t len, const srv_model_info *mi, uint64_t tenant,
                         srv_request *out, srv_error *err);
/* The non-streaming answer: chat (srv_render_response's body, taken) in r->api's shape. */
json_t *srv__api_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat);
/* A stream's translator; NULL for chat and completions (their events go out as they are)
 * and on out of memory (*failed set). */
srv_api_stream *srv__api_stream_create(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a,
                                       bool *failed);
/* One chat SSE event's text ("data: {...}\n\n", or SRV_SSE_DONE) through s into out. */
void srv__api_stream_event(srv_api_stream *s, const char *chat_event, strbuf *out);
void srv__api_stream_destroy(srv_api_stream *s);
/* An error body in api's shape (Anthropic's for MESSAGES, else OpenAI's); free(). */
char *srv__api_error_json(srv_endpoint api, const srv_error *err);

/* openai_refused.c: the known fields spindle does not implement, each a 400 naming it
 * unless given its neutral value (the list in docs/api.md). n: the request's choices. */
sp_status srv__request_refused(const json_t *root, srv_endpoint endpoint, int n, srv_error *err);

/* responses.c: POST /v1/responses, and the stored responses (GET and DELETE by id) */
sp_status srv__responses_parse(const char *body, size_t len, const srv_model_info *mi, uint64_t tenant,
                               srv_request *out, srv_error *err);
json_t *srv__responses_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat);
srv_api_stream *srv__responses_stream(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a);

/* response_store.c (see srv_response_store in server.h). Put takes both references (and
 * drops them when the entry cannot be kept: larger than the budget, none kept); get gives
 * copies (NULL pointers: not wanted). A missing, expired or other key's id: false. now:
 * the caller's clock in seconds (sched_now(); tests pass their own), which expiry uses. */
bool srv__store_put(srv_response_store *s, const char *id, uint64_t tenant, json_t *response, json_t *conversation,
                    double now);
bool srv__store_get(srv_response_store *s, const char *id, uint64_t tenant, json_t **response, json_t **conversation,
                    double now);
bool srv__store_delete(srv_response_store *s, const char *id, uint64_t tenant, double now);

/* anthropic.c: POST /v1/messages and /v1/messages/count_tokens */
sp_status srv__messages_parse(const char *body, size_t len, const srv_model_info *mi, srv_request *out, srv_error *err);
json_t *srv__messages_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat);
srv_api_stream *srv__messages_stream(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a);
char *srv__messages_error_json(const srv_error *err);
/* {"input_tokens": n}; on failure NULL and err. */
json_t *srv__messages_count_tokens(const char *body, size_t len, const srv_model_info *mi, srv_error *err);

/* ==== The HTTP transport ====
 * What the transport's two files share with each other and nobody
 * else: the per-request connection state (srv_conn) and the few functions that cross
 * between them. http.c owns the daemon, routing, the responses every answer goes
 * through, and a request's start and end; http_generation.c owns a generation's
 * connection from submit to the last byte (the suspend/resume handshake, SSE, the
 * non-streaming answer).
 *
 * DESIGN: see server/server.h. One srv_conn per HTTP request, created on the first
 * handler call and freed in on_completed (http.c), which libmicrohttpd calls once the
 * request is over (answered, failed, or the client gone). A generation's srv_conn is
 * also reachable from the scheduler thread (notify) and the watcher thread (hang-up,
 * keep-alive) until on_completed detaches it from both; its `lock` orders the
 * suspend/resume handshake described in http_generation.c.
 */

typedef struct srv_conn srv_conn;

/* Where a connection's body preparation stands (prep.c). */
typedef enum srv_prep_state {
    SRV_PREP_NONE,     /* not submitted */
    SRV_PREP_QUEUED,   /* the connection is suspended until a worker is done */
    SRV_PREP_DONE,     /* the prep_* fields hold the result */
    SRV_PREP_CANCELLED /* shutdown came first: answer 503 */
} srv_prep_state;

/* One choice of a generation (http_generation.c). */
typedef struct srv_choice srv_choice;

struct srv_conn {
    srv_app *app;
    struct MHD_Connection *connection;
    /* the body, accumulated across handler calls (HTTP threads only) */
    char *body;
    size_t body_len, body_cap;
    bool body_too_large;
    /* the generation, once submitted */
    bool dispatched;
    bool admin;        /* arrived on the --admin-port daemon: /health, /ready, /metrics only */
    int retry_after_s; /* a refused submission's Retry-After (retry_after.c); 0: the default */
    bool have_request;
    srv_request request;
    sched_request **reqs; /* (n_reqs), one reference each */
    srv_choice *choices;  /* (n_reqs) */
    int n_reqs;
    char id[48];
    int64_t created;
    srv_endpoint api;           /* the API of the route (errors take its shape) */
    uint64_t tenant;            /* srv_auth_tenant of the request's key */
    srv_api_stream *api_stream; /* a stream of an API over chat: its translator (api_bridge.c) */
    srv_watched watched;
    bool watching;
    _Atomic bool keepalive_wanted;
    /* the suspend/resume handshake (see http_generation.c) */
    pthread_mutex_t lock;
    bool suspended;
    bool woken;
    /* SSE bytes not yet handed to libmicrohttpd (reader only) */
    char *out;
    size_t out_len, out_off, out_cap;
    bool stream_errored;
    bool stream_done;
    /* copies of new output taken under a request's lock (reader only) */
    char *copy_text;
    size_t copy_text_cap;
    sched_token *copy_tokens, *copy_top;
    size_t copy_tokens_cap, copy_top_cap;
    /* preparation off the HTTP threads (prep.c): written by a worker under lock before it
     * resumes the connection; read by the handler after */
    srv_prep_state prep_state;
    int prep_route;        /* http.c's route kind being prepared */
    char *prep_text;       /* a JSON endpoint's answer, serialized; NULL: prep_err says why */
    sp_status prep_status; /* a generation's srv_request_parse (into request) */
    srv_error prep_err;
    /* metrics and access log (HTTP threads) */
    double started; /* sched_now() at the first handler call */
    int status;     /* the status srv__queue_response answered; 0: none (yet) */
    char method[16];
    char path[256]; /* the URL's path, truncated */
};

/* ---- http.c: responses (HTTP threads) ---- */

/* The request's credentials as an Authorization header value: the header itself, else
 * Anthropic's x-api-key as "Bearer KEY" (written into buf); NULL when neither. */
enum { SRV_AUTHORIZATION_MAX = 1024 };
const char *srv__authorization(srv_conn *conn, char *buf, size_t cap);

/* Queues resp (takes ownership of it) with what every answer carries (CORS) and
 * records the status for metrics and the access log. */
enum MHD_Result srv__queue_response(srv_conn *conn, int status, struct MHD_Response *resp);

/* prep.c: the preparation workers (see its DESIGN). fn runs on a worker and fills conn's
 * prep_* fields. */
typedef struct srv_prep srv_prep;
typedef void (*srv_prep_fn)(srv_conn *conn);
sp_status srv__prep_start(int n_threads, srv_prep **out);
/* From a handler with the whole body: suspends the connection and queues fn(conn). Else
 * nothing is queued nor suspended: SP_ERR_UNAVAILABLE once stopping, SP_ERR_NOMEM. */
sp_status srv__prep_submit(srv_prep *p, srv_conn *conn, srv_prep_fn fn);
/* Joins the workers and resumes queued connections as cancelled; then refuses jobs. */
void srv__prep_stop(srv_prep *p);
/* After the HTTP daemon has stopped. */
void srv__prep_free(srv_prep *p);

/* deadlines.c: total-time limits on a request's headers and body (see its comment). */
typedef struct srv_deadlines srv_deadlines;
typedef struct srv_deadline srv_deadline; /* one connection's */
typedef enum srv_deadline_phase {
    SRV_DEADLINE_BODY,        /* the headers are in: the body within body_s */
    SRV_DEADLINE_NONE,        /* the request is in: nothing timed here */
    SRV_DEADLINE_NEXT_REQUEST /* answered: the next request's headers within idle_s + header_s */
} srv_deadline_phase;
sp_status srv__deadlines_start(double header_s, double body_s, double idle_s, srv_deadlines **out);
void srv__deadlines_stop(srv_deadlines *d); /* after the daemons have stopped */
/* A new connection (its headers due within header_s); NULL when out of memory (untimed). */
srv_deadline *srv__deadline_open(srv_deadlines *d, int fd);
/* Before libmicrohttpd closes the socket. */
void srv__deadline_close(srv_deadlines *d, srv_deadline *e);
void srv__deadline_set(srv_deadlines *d, srv_deadline *e, srv_deadline_phase phase);

/* ui.c: GET /, the built-in chat page (server/ui/chat.html, embedded at build time). */
enum MHD_Result srv__ui_page(srv_conn *conn);

/* retry_after.c: the seconds a 429 asks the client to wait: the queue's length over the
 * measured drain rate, jittered by up to half either way, within 1..60. */
int srv__retry_after_s(const sched *s);

/* http_framing.c: whether the request's framing headers are unambiguous (one
 * Content-Length of digits, or Transfer-Encoding exactly "chunked", never both; header
 * names of token characters); when not, a message naming the problem goes into why. */
bool srv__framing_ok(struct MHD_Connection *connection, char *why, size_t cap);
/* The same check header by header (what srv__framing_ok runs, and the fuzz harness):
 * start from a zeroed srv_framing, add every header, then ask for the verdict. */
typedef struct srv_framing {
    int content_lengths;
    int transfer_encodings;
    char why[160]; /* the first problem; empty while none */
} srv_framing;
void srv__framing_add(srv_framing *scan, const char *name, const char *value);
bool srv__framing_verdict(srv_framing *scan, char *why, size_t cap);
/* A JSON body (takes ownership of body; NULL: out of memory, MHD_NO). */
enum MHD_Result srv__send_json(srv_conn *conn, int status, json_t *body);
/* An OpenAI error object with its status and the headers that go with it. */
enum MHD_Result srv__send_error(srv_conn *conn, const srv_error *err);
enum MHD_Result srv__send_status_error(srv_conn *conn, sp_status st, const char *message);
/* Why the server does not take new work in this phase (static text, or app's). */
const char *srv__phase_refusal(srv_phase phase, const srv_app *app);

/* ---- responses.c: GET and DELETE /v1/responses/{id} (HTTP threads) ---- */
enum MHD_Result srv__responses_stored(srv_conn *conn, const char *id, const char *method);

/* ---- http_generation.c: a generation's connection (HTTP threads) ---- */

/* POST /v1/chat/completions and /v1/completions, once a preparation worker has parsed
 * conn's body into conn->request (have_request): submits one scheduler request per
 * choice, watches the socket, then answers a stream at once or suspends until the
 * choices are done. */
enum MHD_Result srv__generation_start(srv_conn *conn);
/* A non-streaming generation's handler call after a resume: answers once every
 * choice is done, suspends again otherwise. */
enum MHD_Result srv__generation_continue(srv_conn *conn);

/* ==== The transport's security options (http_security.c) ====
 * The libmicrohttpd daemon options that the
 * security settings add: TLS from two PEM files (libmicrohttpd with GnuTLS) and the
 * per-connection memory limit that bounds the request line and headers.
 * Used once, by srv_http_start on the main thread. */

typedef struct srv_http_security {
    char *tls_cert, *tls_key;         /* the PEM texts (owned; the key wiped on free) */
    struct MHD_OptionItem options[4]; /* an MHD_OPTION_ARRAY, MHD_OPTION_END-terminated */
} srv_http_security;

/* Fills sec->options from cfg and adds to *flags: TLS when both PEM files are set
 * (one without the other, an unreadable file or a non-PEM file is an error naming
 * the flag and path), and libmicrohttpd's per-connection memory limit when
 * max_header_bytes is set (a request line or headers that do not fit get
 * libmicrohttpd's own answer: 414 for the request line, 431 for the headers).
 * Free with srv_http_security_free, also after a failure. */
sp_status srv_http_security_init(const srv_http_config *cfg, srv_http_security *sec, unsigned *flags);
void srv_http_security_free(srv_http_security *sec);

#endif

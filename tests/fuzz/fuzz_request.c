/* fuzz_request.c: libFuzzer harness for the OpenAI API layer (server/api/api.h). Each
 * input is a request body, parsed as a /v1/chat/completions and a /v1/completions body
 * against stories260K's vocabulary (SentencePiece) with two templates: the ChatML
 * fallback (content parts joined) and one that takes content parts. The same bytes
 * also go to /tokenize and /detokenize, and as an Anthropic Messages body to /v1/messages
 * and its count_tokens (server/api/anthropic.c). The layer's contract is checked and traps when
 * broken:
 *   - a rejected body fills an error with a 400, 404 or 500 whose JSON parses back;
 *   - an accepted request has 1..SRV_MAX_N choices, 1..SRV_MAX_PROMPTS non-empty
 *     prompts of ids inside the vocabulary, each within the context with its
 *     max_tokens, and stop strings within the scheduler's limits;
 *   - responses rendered from outputs made of the prompt's own tokens (non-streaming
 *     body, SSE chunks, the usage chunk) are valid JSON, every event "data: ...\n\n";
 *   - an accepted Messages body is one chat prompt whose count_tokens is its length; its
 *     message and its stream's Anthropic events ("event: NAME\ndata: {...}" with that
 *     type) are valid JSON; a refused one also has Anthropic's error shape;
 *   - the same for a Responses body (/v1/responses, server/api/responses.c): one chat prompt,
 *     a response object whose id is the answer's and that the store gives back, and a
 *     stream of events numbered 0, 1, 2, ... that ends in response.completed or
 *     response.incomplete.
 * Everything is freed per input, so LeakSanitizer sees any leak. Built and run by
 * tools/fuzz.sh; tests/unit/server/test_request_regressions.c replays the seeds and
 * tests/fuzz/regressions/request/ through this same function.
 *
 * The model: SPINDLE_FUZZ_MODEL, else $SPINDLE_TESTDATA/models/stories260K.gguf
 * (SPINDLE_TESTDATA defaults to ../shared/testdata); when it is absent the harness says
 * `SKIP fuzz_request: ...` and exits 79 (tests/fuzz/fuzz_skip.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "gguf/gguf.h"
#include "server/api/api.h"
#include "server/api/api_internal.h"
#include "tests/fuzz/fuzz_skip.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

enum { FUZZ_CTX = 512, FUZZ_MAX_OUT_TOKENS = 32, FUZZ_TOP = 2 };

/* Takes content parts: prints each text part, and the tools and a kwarg when given. */
static const char FUZZ_PARTS_TEMPLATE[] =
    "{% if tools %}{{ tools | tojson }}{% endif %}{% if enable_thinking %}<think>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% else %}"
    "{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

static tok_vocab *fuzz_vocab;
static srv_model_info fuzz_models[2];
static int fuzz_n_models;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static void fuzz_model_path(char *buf, size_t cap) {
    const char *m = getenv("SPINDLE_FUZZ_MODEL");
    const char *dir = getenv("SPINDLE_TESTDATA");
    if (m && m[0]) {
        snprintf(buf, cap, "%s", m);
    } else {
        snprintf(buf, cap, "%s/models/stories260K.gguf", dir && dir[0] ? dir : "../shared/testdata");
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (fuzz_n_models) return 0;
    sp_log_set_level(SP_LOG_ERROR);
    char path[1024];
    fuzz_model_path(path, sizeof path);
    if (!fuzz_present(path)) {
        fuzz_skip("fuzz_request", "no model at %s (set SPINDLE_TESTDATA or SPINDLE_FUZZ_MODEL)", path);
        fuzz_skip_all();
    }
    gguf_file *f;
    if (gguf_open(path, &f) != SP_OK || tok_vocab_load(f, &fuzz_vocab) != SP_OK) {
        fprintf(stderr, "fuzz_request: cannot load %s: %s\n", path, sp_last_error());
        abort();
    }
    char tpath[] = "/tmp/fuzz-request-XXXXXX";
    int fd = mkstemp(tpath);
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(write(fd, FUZZ_PARTS_TEMPLATE, strlen(FUZZ_PARTS_TEMPLATE)) == (ssize_t)strlen(FUZZ_PARTS_TEMPLATE));
    close(fd);
    for (int i = 0; i < 2; i++) {
        srv_model_info *mi = &fuzz_models[i];
        *mi = (srv_model_info){.served_name = "stories260K",
                               .file_name = "stories260K.gguf",
                               .vocab = fuzz_vocab,
                               .max_seq_len = FUZZ_CTX,
                               .created = 1700000000};
        /* a small store: a stored response comes back by id (bounded, so it never grows) */
        FUZZ_CHECK(srv_response_store_create(1 << 20, 16, 1e9, &mi->responses) == SP_OK);
        if (srv_model_info_init_template(mi, f, i == 0 ? NULL : tpath) != SP_OK) {
            fprintf(stderr, "fuzz_request: template: %s\n", sp_last_error());
            abort();
        }
    }
    unlink(tpath);
    FUZZ_CHECK(!fuzz_models[0].template_takes_parts && fuzz_models[1].template_takes_parts);
    gguf_close(f);
    fuzz_n_models = 2;
    return 0;
}

/* JSON text that must parse back (len bytes). A completions top_logprobs key may be a
 * token whose text holds a NUL (<0x00>): valid JSON that jansson writes but will not
 * read back, so that one refusal counts as parsed. */
static void fuzz_check_json(const char *text, size_t len) {
    FUZZ_CHECK(text != NULL);
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
    FUZZ_CHECK(j != NULL || strstr(jerr.text, "NUL byte in object key") != NULL);
    json_decref(j);
}

/* One SSE event (taken): "data: <JSON>\n\n". */
static void fuzz_check_event(char *event) {
    FUZZ_CHECK(event != NULL);
    size_t len = strlen(event);
    FUZZ_CHECK(len > 8 && memcmp(event, "data: ", 6) == 0 && memcmp(event + len - 2, "\n\n", 2) == 0);
    fuzz_check_json(event + 6, len - 8);
    free(event);
}

static void fuzz_check_body(json_t *j) {
    FUZZ_CHECK(j != NULL);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    fuzz_check_json(text, text ? strlen(text) : 0);
    free(text);
}

static void fuzz_check_error(const srv_error *err) {
    FUZZ_CHECK(err->http_status == 400 || err->http_status == 404 || err->http_status == 500);
    FUZZ_CHECK(err->type != NULL && err->message[0] != '\0');
    char *text = srv_error_json(err);
    fuzz_check_json(text, text ? strlen(text) : 0);
    free(text);
    fuzz_check_event(srv_sse_error_event(err));
}

static void fuzz_check_request(const srv_request *r, const srv_model_info *mi) {
    int32_t n_vocab = tok_vocab_size(mi->vocab);
    FUZZ_CHECK(r->n >= 1 && r->n <= SRV_MAX_N);
    FUZZ_CHECK(r->n_prompts >= 1 && r->n_prompts <= SRV_MAX_PROMPTS);
    FUZZ_CHECK(r->params.top_logprobs >= -1 && r->params.top_logprobs <= SCHED_MAX_TOP_LOGPROBS);
    FUZZ_CHECK(r->params.n_stop >= 0 && r->params.n_stop <= SCHED_MAX_STOP);
    for (int k = 0; k < r->params.n_stop; k++) {
        size_t len = strlen(r->params.stop[k]);
        FUZZ_CHECK(len >= 1 && len <= SCHED_MAX_STOP_BYTES);
    }
    FUZZ_CHECK(sample_params_validate(&r->params.sampling, n_vocab) == SP_OK);
    for (int k = 0; k < r->n_prompts; k++) {
        FUZZ_CHECK(r->prompt_lens[k] >= 1 && r->max_tokens[k] >= 1);
        FUZZ_CHECK((int64_t)r->prompt_lens[k] + r->max_tokens[k] <= mi->max_seq_len);
        for (int32_t i = 0; i < r->prompt_lens[k]; i++) FUZZ_CHECK(r->prompts[k][i] >= 0 && r->prompts[k][i] < n_vocab);
        for (int c = 0; c < r->n; c++) {
            sched_request_params p = srv_request_choice_params(r, k, c);
            FUZZ_CHECK(p.prompt == r->prompts[k] && p.n_prompt == r->prompt_lens[k]);
            FUZZ_CHECK(p.max_tokens == r->max_tokens[k] && p.min_tokens >= 0 && p.min_tokens <= p.max_tokens);
        }
    }
}

/* An output per prompt made of the prompt's own tokens (byte tokens included, so the
 * text may not be UTF-8), shared by the prompt's choices. */
static void fuzz_make_output(const srv_request *r, int k, sched_output *o) {
    int32_t n = r->prompt_lens[k] < FUZZ_MAX_OUT_TOKENS ? r->prompt_lens[k] : FUZZ_MAX_OUT_TOKENS;
    *o = (sched_output){.n_tokens = n,
                        .top_logprobs = FUZZ_TOP,
                        .prompt_tokens = r->prompt_lens[k],
                        .completion_tokens = n,
                        .done = true,
                        .finish = k % 2 ? SCHED_FINISH_LENGTH : SCHED_FINISH_STOP};
    FUZZ_CHECK(tok_decode(fuzz_vocab, r->prompts[k], (size_t)n, k % 2 == 0, &o->text, &o->text_len) == SP_OK);
    o->tokens = calloc((size_t)n + 1, sizeof *o->tokens);
    o->top = calloc((size_t)n * FUZZ_TOP + 1, sizeof *o->top);
    FUZZ_CHECK(o->tokens && o->top);
    for (int32_t i = 0; i < n; i++) {
        int32_t id = r->prompts[k][i];
        o->tokens[i] = (sched_token){.id = id, .logprob = -(float)i};
        for (int t = 0; t < FUZZ_TOP; t++)
            o->top[(size_t)i * FUZZ_TOP + t] =
                (sched_token){.id = (id + t) % tok_vocab_size(fuzz_vocab), .logprob = -(float)t};
    }
}

static void fuzz_check_responses(const srv_request *r, const srv_model_info *mi) {
    sched_output outs[SRV_MAX_PROMPTS];
    const sched_output *ptrs[SRV_MAX_PROMPTS * SRV_MAX_N];
    for (int k = 0; k < r->n_prompts; k++) fuzz_make_output(r, k, &outs[k]);
    for (int k = 0; k < r->n_prompts * r->n; k++) ptrs[k] = &outs[k / r->n];
    char id[40];
    srv_response_id(r->endpoint, id, sizeof id);
    fuzz_check_body(srv_render_response(r, mi, id, 1700000001, ptrs, r->n_prompts * r->n));
    const sched_output *o = &outs[0];
    if (r->endpoint == SRV_ENDPOINT_CHAT) fuzz_check_event(srv_sse_role_chunk(r, mi, id, 1700000001, 0));
    fuzz_check_event(srv_sse_delta_chunk(r, mi, id, 1700000001, 0, o->text, o->text_len, o->tokens, o->n_tokens, o->top,
                                         o->top_logprobs, NULL));
    fuzz_check_event(
        srv_sse_delta_chunk(r, mi, id, 1700000001, 0, "", 0, NULL, 0, NULL, 0, srv_finish_reason(o->finish)));
    fuzz_check_event(srv_sse_usage_chunk(r, mi, id, 1700000001, ptrs, r->n_prompts * r->n));
    for (int k = 0; k < r->n_prompts; k++) {
        free(outs[k].text);
        free(outs[k].tokens);
        free(outs[k].top);
    }
}

/* A stream's text of "event: NAME\ndata: {\"type\": NAME, ...}\n\n" frames (Anthropic's
 * and the Responses API's); numbered: each data also has sequence_number 0, 1, 2, ...
 * The last frame's type, or "" when there is none. */
static const char *fuzz_check_named_events(const char *text, bool numbered, char *last, size_t last_cap) {
    FUZZ_CHECK(text != NULL);
    last[0] = '\0';
    json_int_t sequence = 0;
    for (const char *at = text; *at;) {
        const char *end = strstr(at, "\n\n"), *data = strstr(at, "\ndata: ");
        FUZZ_CHECK(end && data && data < end && strncmp(at, "event: ", 7) == 0);
        json_t *j = json_loadb(data + 7, (size_t)(end - data - 7), JSON_ALLOW_NUL, NULL);
        const char *type = json_string_value(json_object_get(j, "type"));
        FUZZ_CHECK(type && strlen(type) == (size_t)(data - at - 7) && memcmp(type, at + 7, strlen(type)) == 0);
        if (numbered) FUZZ_CHECK(json_integer_value(json_object_get(j, "sequence_number")) == sequence++);
        snprintf(last, last_cap, "%s", type);
        json_decref(j);
        at = end + 2;
    }
    return last;
}

/* One chat event (taken) through an API's stream translator. */
static void fuzz_feed(srv_api_stream *s, char *event, strbuf *out) {
    FUZZ_CHECK(event != NULL);
    json_t *j = json_loads(event + 6, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, NULL);
    FUZZ_CHECK(j != NULL);
    s->event(s, j, out);
    json_decref(j);
    free(event);
}

/* A chat stream of o through translator s (which it destroys): the role, thinking, text,
 * a tool call's head and arguments, the finish, the usage, the end. */
static void fuzz_feed_stream(srv_api_stream *s, const srv_request *r, const srv_model_info *mi, const srv_api_answer *a,
                             const sched_output *o, const char *finish, strbuf *out) {
    const sched_output *outs[] = {o};
    fuzz_feed(s, srv_sse_role_chunk(r, mi, a->id, a->created, 0), out);
    fuzz_feed(s, srv_sse_reasoning_chunk(r, mi, a->id, a->created, 0, o->text, o->text_len / 2, NULL, 0, NULL, 0), out);
    fuzz_feed(s, srv_sse_delta_chunk(r, mi, a->id, a->created, 0, o->text, o->text_len, NULL, 0, NULL, 0, NULL), out);
    fuzz_feed(s,
              srv_sse_tool_call_delta(r, mi, a->id, a->created, 0,
                                      json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", 0, "id", "call_1", "type",
                                                "function", "function", "name", "f", "arguments", "")),
              out);
    fuzz_feed(
        s,
        srv_sse_tool_call_delta(r, mi, a->id, a->created, 0,
                                json_pack("{s:i,s:{s:s%}}", "index", 0, "function", "arguments", o->text, o->text_len)),
        out);
    fuzz_feed(s, srv_sse_delta_chunk(r, mi, a->id, a->created, 0, NULL, 0, NULL, 0, NULL, 0, finish), out);
    fuzz_feed(s, srv_sse_usage_chunk(r, mi, a->id, a->created, outs, 1), out);
    s->event(s, NULL, out);
    s->destroy(s);
}

static void fuzz_check_messages(const char *body, size_t size, const srv_model_info *mi) {
    srv_request r;
    srv_error err;
    sp_status st = srv__messages_parse(body, size, mi, &r, &err);
    if (st != SP_OK) {
        FUZZ_CHECK(st < 0);
        fuzz_check_error(&err);
        char *text = srv__messages_error_json(&err);
        fuzz_check_json(text, text ? strlen(text) : 0);
        free(text);
        return;
    }
    FUZZ_CHECK(r.api == SRV_ENDPOINT_MESSAGES && r.endpoint == SRV_ENDPOINT_CHAT && r.n == 1 && r.n_prompts == 1);
    fuzz_check_request(&r, mi);
    json_t *count = srv_messages_count_tokens(body, size, mi, &err);
    FUZZ_CHECK(count && json_integer_value(json_object_get(count, "input_tokens")) == r.prompt_lens[0]);
    json_decref(count);
    sched_output o;
    fuzz_make_output(&r, 0, &o);
    o.stop_matched = r.params.n_stop > 0 ? 1 : 0;
    const sched_output *outs[] = {&o};
    srv_api_answer a = {.id = "msg_fuzz", .created = 1700000001};
    fuzz_check_body(srv__messages_render(&r, mi, &a, srv_render_response(&r, mi, a.id, a.created, outs, 1)));
    srv_api_stream *s = srv__messages_stream(&r, mi, &a);
    FUZZ_CHECK(s != NULL);
    strbuf out = {0};
    fuzz_feed_stream(s, &r, mi, &a, &o, "stop", &out);
    char *events = strbuf_take(&out), last[64];
    fuzz_check_named_events(events, false, last, sizeof last);
    free(events);
    free(o.text);
    free(o.tokens);
    free(o.top);
    srv_request_free(&r);
}

static void fuzz_check_responses_api(const char *body, size_t size, const srv_model_info *mi) {
    srv_request r;
    srv_error err;
    sp_status st = srv__responses_parse(body, size, mi, 7, &r, &err);
    if (st != SP_OK) {
        FUZZ_CHECK(st < 0);
        fuzz_check_error(&err);
        return;
    }
    FUZZ_CHECK(r.api == SRV_ENDPOINT_RESPONSES && r.endpoint == SRV_ENDPOINT_CHAT && r.n == 1 && r.n_prompts == 1);
    fuzz_check_request(&r, mi);
    sched_output o;
    fuzz_make_output(&r, 0, &o);
    const sched_output *outs[] = {&o};
    char id[40];
    srv_response_id(SRV_ENDPOINT_RESPONSES, id, sizeof id);
    srv_api_answer a = {.id = id, .created = 1700000001, .tenant = 7};
    json_t *response = srv__responses_render(&r, mi, &a, srv_render_response(&r, mi, a.id, a.created, outs, 1));
    FUZZ_CHECK(response && strcmp(json_string_value(json_object_get(response, "id")), id) == 0);
    /* stored unless the body said store: false; only for its own key */
    json_t *stored = NULL;
    if (srv__store_get(mi->responses, id, 7, &stored, NULL, 0)) FUZZ_CHECK(json_equal(stored, response));
    FUZZ_CHECK(!srv__store_get(mi->responses, id, 8, NULL, NULL, 0));
    json_decref(stored);
    fuzz_check_body(response);
    srv_api_stream *s = srv__responses_stream(&r, mi, &a);
    FUZZ_CHECK(s != NULL);
    strbuf out = {0};
    fuzz_feed_stream(s, &r, mi, &a, &o, "length", &out);
    FUZZ_CHECK(!out.failed);
    char *events = strbuf_take(&out), last[64];
    fuzz_check_named_events(events, true, last, sizeof last);
    FUZZ_CHECK(strcmp(last, "response.incomplete") == 0);
    free(events);
    free(o.text);
    free(o.tokens);
    free(o.top);
    srv_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_n_models) LLVMFuzzerInitialize(NULL, NULL);
    const char *body = (const char *)data;
    for (int m = 0; m < fuzz_n_models; m++) {
        const srv_model_info *mi = &fuzz_models[m];
        for (int ep = 0; ep < 2; ep++) {
            srv_request r;
            srv_error err;
            sp_status st =
                srv_request_parse(ep ? SRV_ENDPOINT_COMPLETIONS : SRV_ENDPOINT_CHAT, body, size, mi, &r, &err);
            if (st == SP_OK) {
                fuzz_check_request(&r, mi);
                fuzz_check_responses(&r, mi);
                srv_request_free(&r);
            } else {
                FUZZ_CHECK(st < 0);
                fuzz_check_error(&err);
            }
        }
        fuzz_check_messages(body, size, mi);
        fuzz_check_responses_api(body, size, mi);
        srv_error err;
        json_t *j = srv_tokenize(body, size, mi, &err);
        if (j) {
            fuzz_check_body(j);
        } else {
            fuzz_check_error(&err);
        }
    }
    srv_error err;
    json_t *j = srv_detokenize(body, size, &fuzz_models[0], &err);
    if (j) {
        fuzz_check_body(j);
    } else {
        fuzz_check_error(&err);
    }
    return 0;
}

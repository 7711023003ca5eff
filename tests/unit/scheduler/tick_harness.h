/* tick_harness.h: what the scheduler tests that run the tiny real model share: the
 * model on the CPU backend, a small scheduler configuration, prompts, requests, and
 * running a set of requests through a fresh scheduler to compare what they produced.
 * Static functions: each test binary includes it once. */
#ifndef SP_TESTS_TICK_HARNESS_H
#define SP_TESTS_TICK_HARNESS_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scheduler/sched_internal.h"
#include "tests/unit/testdata.h"

enum { TICK_MODEL_BATCH = 128, RESULT_MAX_TOKENS = 2048 };

typedef struct tick_env {
    dev_backend *dev;
    model *m;
    const tok_vocab *vocab;
    int32_t n_vocab;
} tick_env;

static inline void env_open(tick_env *e, int threads) {
    char path[512];
    testdata_path(path, sizeof path, "models/stories260K.gguf");
    TESTDATA_REQUIRE(path);
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = threads};
    cr_assert_eq(dev_create(&opts, &e->dev), SP_OK);
    model_options mo = {.max_batch_tokens = TICK_MODEL_BATCH};
    cr_assert_eq(model_load(path, e->dev, &mo, &e->m), SP_OK, "%s", sp_last_error());
    e->vocab = model_vocab(e->m);
    e->n_vocab = tok_vocab_size(e->vocab);
}

static inline void env_close(tick_env *e) {
    model_destroy(e->m);
    dev_destroy(e->dev);
}

static inline sched_config tick_config(void) {
    sched_config c = sched_config_default();
    c.kv_cache_mb = 1; /* 102 blocks of 16 tokens for this model */
    c.max_batch_tokens = TICK_MODEL_BATCH;
    c.max_prefill_tokens = 64;
    c.max_batch_size = 32;
    return c;
}

/* A prompt: BOS, the text's tokens, then `extra` distinct tokens to vary it. */
static inline int32_t make_prompt(tick_env *e, const char *text, int extra, int32_t *out, int32_t cap) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(e->vocab, text, strlen(text), true, false, &ids, &n), SP_OK);
    cr_assert_leq((int64_t)n + extra, cap);
    memcpy(out, ids, sizeof *ids * n);
    free(ids);
    for (int i = 0; i < extra; i++) out[n + (size_t)i] = 260 + (i * 37) % 250;
    return (int32_t)n + extra;
}

static inline sched_request_params base_params(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens) {
    sched_request_params p = {
        .prompt = prompt,
        .n_prompt = n_prompt,
        .max_tokens = max_tokens,
        .ignore_eos = true,
        .top_logprobs = -1,
        .sampling = sample_params_default(),
    };
    p.sampling.temperature = 0;
    return p;
}

static inline sched_request *make_request(const sched_request_params *p) {
    sched_request *r;
    cr_assert_eq(sched_request_create(p, &r), SP_OK, "%s", sp_last_error());
    return r;
}

/* What a test compares, copied out under the request's lock. */
typedef struct result {
    int32_t ids[RESULT_MAX_TOKENS];
    float logprobs[RESULT_MAX_TOKENS];     /* 0 unless asked */
    sched_token top[RESULT_MAX_TOKENS][2]; /* the first two alternatives, when asked */
    int32_t n_tokens;
    char text[16384];
    size_t text_len;
    int32_t completion_tokens;
    int32_t prefilled;
    int32_t preemptions;
    sched_finish finish;
    sp_status error;
    char message[256];
} result;

static inline void capture(sched_request *r, result *out) {
    sched_request_lock(r);
    const sched_output *o = sched_request_output(r);
    cr_assert(o->done);
    cr_assert_leq(o->n_tokens, RESULT_MAX_TOKENS);
    cr_assert_lt(o->text_len, sizeof out->text);
    for (int32_t i = 0; i < o->n_tokens; i++) {
        out->ids[i] = o->tokens[i].id;
        out->logprobs[i] = o->tokens[i].logprob;
        for (int k = 0; k < 2; k++)
            out->top[i][k] =
                k < o->top_logprobs ? o->top[(size_t)i * (size_t)o->top_logprobs + (size_t)k] : (sched_token){-1, 0};
    }
    out->n_tokens = o->n_tokens;
    memcpy(out->text, o->text, o->text_len);
    out->text[o->text_len] = '\0';
    out->text_len = o->text_len;
    out->completion_tokens = o->completion_tokens;
    out->prefilled = o->prefilled;
    out->preemptions = o->preemptions;
    out->finish = o->finish;
    out->error = o->error;
    snprintf(out->message, sizeof out->message, "%s", o->error_message);
    sched_request_unlock(r);
}

static inline bool is_done(sched_request *r) {
    sched_request_lock(r);
    bool done = sched_request_output(r)->done;
    sched_request_unlock(r);
    return done;
}

static inline void wait_done(sched_request *r, double timeout_s) {
    double until = sched_now() + timeout_s;
    while (!is_done(r)) {
        cr_assert_lt(sched_now(), until, "request not done within %g s", timeout_s);
        usleep(500);
    }
}

static inline int32_t n_tokens_now(sched_request *r) {
    sched_request_lock(r);
    int32_t n = sched_request_output(r)->n_tokens;
    sched_request_unlock(r);
    return n;
}

/* Runs n requests (each submitted alone, in order) through a fresh scheduler with
 * config c until all are done; results into out (n), stats into st. */
static inline void run_all(tick_env *e, const sched_config *c, const sched_request_params *params, int n, result *out,
                           sched_stats *st) {
    sched *s;
    cr_assert_eq(sched_create(c, e->m, &s), SP_OK, "%s", sp_last_error());
    sched_request **reqs = calloc((size_t)n, sizeof *reqs);
    for (int i = 0; i < n; i++) {
        reqs[i] = make_request(&params[i]);
        cr_assert_eq(sched_submit(s, &reqs[i], 1), SP_OK, "%s", sp_last_error());
    }
    cr_assert_eq(sched_start(s), SP_OK);
    for (int i = 0; i < n; i++) {
        wait_done(reqs[i], 30);
        capture(reqs[i], &out[i]);
    }
    /* the blocks come back right after the output says done */
    for (double until = sched_now() + 1; sched_now() < until;) {
        sched_get_stats(s, st);
        if (st->kv_blocks_used == 0 && st->running == 0) break;
        usleep(200);
    }
    sched_get_stats(s, st);
    char why[64];
    cr_assert(!sched_device_fault(s, why, sizeof why), "the CPU backend never faults");
    sched_destroy(s);
    for (int i = 0; i < n; i++) sched_request_release(reqs[i]);
    free(reqs);
}

static inline void assert_same_tokens(const result *a, const result *b, const char *what) {
    cr_assert_eq(a->n_tokens, b->n_tokens, "%s: %d vs %d tokens", what, a->n_tokens, b->n_tokens);
    for (int32_t i = 0; i < a->n_tokens; i++)
        cr_assert_eq(a->ids[i], b->ids[i], "%s: token %d: %d vs %d", what, i, a->ids[i], b->ids[i]);
    cr_assert_str_eq(a->text, b->text, "%s: text", what);
}

#endif

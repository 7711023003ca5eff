/* test_spec_tick.c: speculative decoding in the tick with the tiny real model on the CPU
 * backend. The output with speculation on is the output with it off, token for token
 * and logprob for logprob, for each proposer, greedy and seeded (penalties, bias, stop
 * strings, max_tokens cutting an accepted run, n > 1, logprobs), alone and among 31
 * others; KV churn with drafts, cancellations and preemptions ends with every block
 * free; the prefix cache never holds a rejected draft token; per-request opt-out. */
#include "cli/cli.h"
#include "tests/unit/scheduler/tick_harness.h"

enum { SPEC_N = 32, SPEC_PROMPT_CAP = 96 };

static const sample_logit_bias SPEC_BIAS[2] = {{300, 2.5f}, {420, -3.0f}};

/* Proposer sets, by name. */
static sched_config spec_config(bool ngram, bool suffix) {
    sched_config c = tick_config();
    c.spec_ngram = ngram;
    c.spec_suffix = suffix;
    c.spec_k = 6;
    c.spec_suffix_bytes = (int64_t)1 << 20;
    return c;
}

/* 32 requests that repeat themselves (the tiny model loops, which is what drafts
 * catch), with every sampling feature somewhere; pairs with consecutive seeds stand for
 * n = 2 (sched_submit takes each pair together). */
static void spec_params(tick_env *e, int32_t (*prompts)[SPEC_PROMPT_CAP], sched_request_params *p) {
    static const char *texts[4] = {
        "Once upon a time there was a cat. The cat was happy. Once upon a time there was a",
        "Tom had a red ball. Tom liked the red ball. Tom had a",
        "The sun was big and the sky was blue. The sun was big and",
        "Lily and Max went to the park. Lily and Max went to the",
    };
    for (int i = 0; i < SPEC_N; i++) {
        int32_t n = make_prompt(e, texts[i % 4], i % 3, prompts[i], SPEC_PROMPT_CAP);
        p[i] = base_params(prompts[i], n, 24 + (i * 7) % 40);
        switch (i % 4) {
        case 0: break; /* greedy */
        case 1:
            p[i].sampling.temperature = 0.8f;
            p[i].sampling.frequency_penalty = 0.5f;
            p[i].sampling.presence_penalty = 0.3f;
            break;
        case 2:
            p[i].sampling.temperature = 0.7f;
            p[i].sampling.top_k = 40;
            p[i].sampling.top_p = 0.9f;
            p[i].sampling.repetition_penalty = 1.1f;
            p[i].sampling.logit_bias = SPEC_BIAS;
            p[i].sampling.n_logit_bias = 2;
            break;
        case 3:
            p[i].top_logprobs = 2;
            p[i].min_tokens = 3;
            break;
        }
        p[i].sampling.seed = 500 + (uint64_t)i;
        if (i % 5 == 4) p[i].max_tokens = 3; /* cuts an accepted run */
        if (i % 8 == 7) p[i].ignore_eos = false;
        if (i % 6 == 3) {
            static const char *const stops[1] = {"park"};
            p[i].stop = stops;
            p[i].n_stop = 1;
        }
    }
}

/* Runs params through a scheduler driven on this thread (no scheduler thread: the test
 * may read the scheduler's state after), `passes` times in the same scheduler, one pass
 * after the other ends (the suffix cache learns from the first). out: (passes, n). */
static void drive(tick_env *e, const sched_config *c, const sched_request_params *params, int n, int passes,
                  result *out, sched_stats *st, void (*check)(sched *s, sched_request **reqs, int n)) {
    sched *s;
    cr_assert_eq(sched_create(c, e->m, &s), SP_OK, "%s", sp_last_error());
    sched_request **reqs = calloc((size_t)n, sizeof *reqs);
    for (int pass = 0; pass < passes; pass++) {
        for (int i = 0; i < n; i++) reqs[i] = make_request(&params[i]);
        for (int i = 0; i < n; i += 2)
            cr_assert_eq(sched_submit(s, reqs + i, i + 1 < n ? 2 : 1), SP_OK, "%s", sp_last_error());
        for (int guard = 0;; guard++) {
            cr_assert_lt(guard, 200000, "the requests never finished");
            cr_assert(!sched__queue_take(s, false, 0));
            if (!sched__tick(s)) break;
        }
        for (int i = 0; i < n; i++) capture(reqs[i], &out[pass * n + i]);
        if (check) check(s, reqs, n);
        for (int i = 0; i < n; i++) sched_request_release(reqs[i]);
    }
    sched_get_stats(s, st);
    sched_destroy(s);
    free(reqs);
}

static void assert_same_output(const result *a, const result *b, const char *what) {
    assert_same_tokens(a, b, what);
    cr_assert_eq(a->finish, b->finish, "%s: finish", what);
    cr_assert_eq(a->completion_tokens, b->completion_tokens, "%s: completion tokens", what);
    for (int32_t i = 0; i < a->n_tokens; i++) {
        cr_assert(memcmp(&a->logprobs[i], &b->logprobs[i], sizeof(float)) == 0, "%s: logprob %d: %g vs %g", what, i,
                  (double)a->logprobs[i], (double)b->logprobs[i]);
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(a->top[i][k].id, b->top[i][k].id, "%s: token %d alternative %d", what, i, k);
            cr_assert(memcmp(&a->top[i][k].logprob, &b->top[i][k].logprob, sizeof(float)) == 0, "%s: alt logprob",
                      what);
        }
    }
}

static int64_t sum(const int64_t *v, int n) {
    int64_t t = 0;
    for (int i = 0; i < n; i++) t += v[i];
    return t;
}

/* A draft model for the tiny model: its own Q4_1 (spindle quantize), loaded on e's
 * device. Caller destroys it. */
static model *draft_model_for(tick_env *e) {
    char in[512], out[96];
    testdata_path(in, sizeof in, "models/stories260K.gguf");
    snprintf(out, sizeof out, "/tmp/spindle_test_draft_%d.gguf", (int)getpid());
    char *argv[] = {"quantize", in, out, "Q4_1", NULL};
    cr_assert_eq(cmd_quantize(4, argv), 0);
    model *d;
    model_options mo = {.max_batch_tokens = TICK_MODEL_BATCH};
    cr_assert_eq(model_load(out, e->dev, &mo, &d), SP_OK, "%s", sp_last_error());
    unlink(out);
    return d;
}

/* The requests with the given proposers, two passes, among 31 others or alone, against
 * speculation off; asserts drafts were made and accepted (a vacuous pass is a fail). */
static void check_identical_with(bool ngram, bool suffix, bool draft, int self_layers, int batch_size) {
    tick_env e, e2;
    env_open(&e, 1);
    env_open(&e2, 2); /* speculation on two threads: rows are sampled in parallel */
    model *d = draft ? draft_model_for(&e2) : NULL;
    static int32_t prompts[SPEC_N][SPEC_PROMPT_CAP];
    static sched_request_params p[SPEC_N];
    spec_params(&e, prompts, p);
    static result off[2 * SPEC_N], on[2 * SPEC_N];
    sched_stats st_off, st_on;
    sched_config c = spec_config(false, false);
    c.max_batch_size = batch_size;
    drive(&e, &c, p, SPEC_N, 2, off, &st_off, NULL);
    c = spec_config(ngram, suffix);
    c.max_batch_size = batch_size;
    c.spec_draft = draft;
    c.draft_model = d;
    c.self_spec_layers = self_layers;
    c.spec_gate = !draft && self_layers == 0; /* drafter models draft whenever they can: the identity is the point */
    drive(&e2, &c, p, SPEC_N, 2, on, &st_on, NULL);
    for (int i = 0; i < 2 * SPEC_N; i++) {
        char what[64];
        snprintf(what, sizeof what, "pass %d request %d", i / SPEC_N, i % SPEC_N);
        assert_same_output(&off[i], &on[i], what);
    }
    cr_assert_eq(sum(st_off.spec_proposed, SCHED_SPEC_PROPOSERS), 0, "off drafts nothing");
    if (ngram) cr_assert_gt(st_on.spec_accepted[SCHED_SPEC_NGRAM], 0, "ngram drafts were accepted");
    if (suffix) cr_assert_gt(st_on.spec_accepted[SCHED_SPEC_SUFFIX], 0, "suffix drafts were accepted");
    if (draft) cr_assert_gt(st_on.spec_accepted[SCHED_SPEC_DRAFT], 0, "draft model drafts were accepted");
    if (!ngram) cr_assert_eq(st_on.spec_proposed[SCHED_SPEC_NGRAM], 0);
    if (!suffix) cr_assert_eq(st_on.spec_proposed[SCHED_SPEC_SUFFIX], 0);
    if (!draft) cr_assert_eq(st_on.spec_proposed[SCHED_SPEC_DRAFT], 0);
    /* with both drafter models the draft model, ahead in line, may take every sequence */
    if (self_layers > 0 && !draft) cr_assert_gt(st_on.spec_proposed[SCHED_SPEC_SELF], 0, "self-speculation drafted");
    if (self_layers == 0) cr_assert_eq(st_on.spec_proposed[SCHED_SPEC_SELF], 0);
    cr_assert_eq(st_on.generated_tokens, st_off.generated_tokens);
    cr_assert_leq(st_on.ticks, st_off.ticks, "drafts never cost a step (each step delivers a token or more)");
    cr_assert_eq(st_on.kv_blocks_used, 0);
    cr_log_info("ngram %d suffix %d draft %d self %d batch %d: %lld ticks off, %lld on; accepted %lld/%lld ngram, "
                "%lld/%lld suffix, %lld/%lld draft, %lld/%lld self",
                ngram, suffix, draft, self_layers, batch_size, (long long)st_off.ticks, (long long)st_on.ticks,
                (long long)st_on.spec_accepted[0], (long long)st_on.spec_proposed[0], (long long)st_on.spec_accepted[1],
                (long long)st_on.spec_proposed[1], (long long)st_on.spec_accepted[2], (long long)st_on.spec_proposed[2],
                (long long)st_on.spec_accepted[3], (long long)st_on.spec_proposed[3]);
    model_destroy(d);
    env_close(&e2);
    env_close(&e);
}

static void check_identical(bool ngram, bool suffix, int batch_size) {
    check_identical_with(ngram, suffix, false, 0, batch_size);
}

Test(spec_tick, draft_model_output_identical_among_31_others, .timeout = 120) {
    check_identical_with(false, false, true, 0, SPEC_N);
}
Test(spec_tick, draft_model_output_identical_alone, .timeout = 120) {
    check_identical_with(false, false, true, 0, 1);
}
Test(spec_tick, self_speculation_output_identical_among_31_others, .timeout = 120) {
    check_identical_with(false, false, false, 3, SPEC_N);
}
Test(spec_tick, self_speculation_output_identical_alone, .timeout = 120) {
    check_identical_with(false, false, false, 3, 1);
}
Test(spec_tick, every_proposer_output_identical_among_31_others, .timeout = 120) {
    check_identical_with(true, true, true, 3, SPEC_N);
}

Test(spec_tick, more_self_spec_layers_than_the_model_has_are_refused) {
    tick_env e;
    env_open(&e, 1);
    sched_config c = spec_config(true, true);
    c.self_spec_layers = model_get_hparams(e.m)->n_layers;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "--self-spec-layers"), "%s", sp_last_error());
    env_close(&e);
}

Test(spec_tick, a_draft_model_of_another_vocabulary_is_refused) {
    tick_env e;
    env_open(&e, 1);
    const char *other = testdata_default_model();
    if (access(other, R_OK) != 0) {
        env_close(&e);
        cr_skip_test("the default model %s is absent (run tools/setup.sh)", other);
    }
    model *d;
    model_options mo = {.max_batch_tokens = TICK_MODEL_BATCH};
    cr_assert_eq(model_load(other, e.dev, &mo, &d), SP_OK, "%s", sp_last_error());
    sched_config c = spec_config(true, true);
    c.spec_draft = true;
    c.draft_model = d;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "--draft-model") && strstr(sp_last_error(), "vocabulary"), "%s", sp_last_error());
    model_destroy(d);
    env_close(&e);
}

Test(spec_tick, ngram_output_identical_among_31_others, .timeout = 120) {
    check_identical(true, false, SPEC_N);
}
Test(spec_tick, ngram_output_identical_alone, .timeout = 120) {
    check_identical(true, false, 1);
}
Test(spec_tick, suffix_output_identical_among_31_others, .timeout = 120) {
    check_identical(false, true, SPEC_N);
}
Test(spec_tick, suffix_output_identical_alone, .timeout = 120) {
    check_identical(false, true, 1);
}
Test(spec_tick, both_proposers_output_identical_among_31_others, .timeout = 120) {
    check_identical(true, true, SPEC_N);
}

/* Every cached block's chain of tokens, from the root, is a prefix of some request's
 * prompt and output: no rejected draft token was ever registered. */
static void check_cache_holds_only_accepted(sched *s, sched_request **reqs, int n) {
    const kv_blocks *kb = &s->cache.blocks;
    int B = kb->block_size;
    int32_t chain[256];
    int checked = 0;
    for (int32_t id = 0; id < kb->n_total; id++) {
        if (!kb->registered[id]) continue;
        int depth = 0;
        for (int32_t b = id; b >= 0; b = kb->parent[b]) {
            cr_assert_lt(depth, 256);
            chain[depth++] = b;
        }
        bool found = false;
        for (int i = 0; i < n && !found; i++) {
            const sched_request *r = reqs[i];
            if ((int64_t)depth * B > r->n_tokens) continue;
            found = true;
            for (int d = 0; d < depth && found; d++) {
                const int32_t *want = r->tokens + (size_t)d * (size_t)B;
                const int32_t *got = kb->tokens + (size_t)chain[depth - 1 - d] * (size_t)B;
                found = memcmp(want, got, sizeof(int32_t) * (size_t)B) == 0;
            }
        }
        cr_assert(found, "cached block %d (chain of %d) is no request's accepted prefix", id, depth);
        checked++;
    }
    cr_assert_gt(checked, 0, "the prefix cache registered blocks");
}

Test(spec_tick, prefix_cache_never_holds_a_rejected_token, .timeout = 120) {
    tick_env e;
    env_open(&e, 1);
    static int32_t prompts[SPEC_N][SPEC_PROMPT_CAP];
    static sched_request_params p[SPEC_N];
    spec_params(&e, prompts, p);
    for (int i = 0; i < SPEC_N; i++) {
        p[i].max_tokens = 60; /* long enough to fill blocks with output */
        p[i].ignore_eos = true;
        p[i].n_stop = 0;
    }
    static result out[SPEC_N];
    sched_stats st;
    sched_config c = spec_config(true, true);
    drive(&e, &c, p, SPEC_N, 1, out, &st, check_cache_holds_only_accepted);
    int64_t proposed = sum(st.spec_proposed, SCHED_SPEC_PROPOSERS),
            accepted = sum(st.spec_accepted, SCHED_SPEC_PROPOSERS);
    cr_assert_gt(proposed - accepted, 0, "some drafts were rejected (else the test shows nothing)");
    env_close(&e);
}

/* Drafts, random cancellations and a pool small enough to preempt: every request ends,
 * the survivors with their speculation-free tokens, and every block is free after. */
Test(spec_tick, kv_churn_with_drafts_cancellations_and_preemptions_frees_every_block, .timeout = 120) {
    tick_env e;
    env_open(&e, 1);
    static int32_t prompts[SPEC_N][SPEC_PROMPT_CAP];
    static sched_request_params p[SPEC_N];
    spec_params(&e, prompts, p);
    for (int i = 0; i < SPEC_N; i++) p[i].max_tokens = 120;
    static result off[SPEC_N];
    sched_stats st_off;
    sched_config c = spec_config(false, false);
    drive(&e, &c, p, SPEC_N, 1, off, &st_off, NULL);

    c = spec_config(true, true);
    c.kv_cache_mb = 1;
    c.kv_watermark = 0;
    c.spec_draft = true;
    c.draft_model = draft_model_for(&e);
    c.draft_kv_cache_mb = 1; /* small: the drafter's pool runs out too */
    c.spec_gate = false;     /* the drafter runs whenever it can: its blocks churn too */
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK, "%s", sp_last_error());
    /* shrink the pool's usable part: hold most blocks in a dummy sequence */
    kv_seq hog;
    int32_t keep = 30; /* blocks left for the 32 requests: preemption is certain */
    cr_assert_eq(kv_seq_init(&hog, s->cache.blocks.n_total), SP_OK);
    cr_assert(kv_blocks_grow(&s->cache.blocks, &hog, s->cache.blocks.n_total - keep));
    sched_request *reqs[SPEC_N];
    for (int i = 0; i < SPEC_N; i++) reqs[i] = make_request(&p[i]);
    for (int i = 0; i < SPEC_N; i += 2) cr_assert_eq(sched_submit(s, reqs + i, 2), SP_OK);
    uint64_t rng = 12345;
    bool cancelled[SPEC_N] = {0};
    for (int guard = 0;; guard++) {
        cr_assert_lt(guard, 200000);
        cr_assert(!sched__queue_take(s, false, 0));
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int victim = (int)((rng >> 33) % 64);
        if (victim < SPEC_N && victim % 3 == 0 && !cancelled[victim] && guard > 20) {
            sched_request_cancel(reqs[victim]);
            cancelled[victim] = true;
        }
        if (!sched__tick(s)) break;
    }
    sched_stats st;
    sched_get_stats(s, &st);
    for (int i = 0; i < SPEC_N; i++) {
        result got;
        capture(reqs[i], &got);
        if (got.finish == SCHED_FINISH_CANCELLED) continue;
        char what[32];
        snprintf(what, sizeof what, "request %d", i);
        assert_same_output(&off[i], &got, what);
    }
    cr_assert_gt(st.preemptions, 0, "the pool was small enough to preempt");
    cr_assert_gt(sum(st.spec_accepted, SCHED_SPEC_PROPOSERS), 0);
    kv_blocks_release(&s->cache.blocks, &hog);
    kv_seq_free(&hog);
    cr_assert_eq(kv_blocks_used(&s->cache.blocks), 0, "every block is free");
    cr_assert_eq(kv_blocks_available(&s->cache.blocks), s->cache.blocks.n_total);
    cr_assert_eq(kv_blocks_used(&s->spec.draft_blocks), 0, "every draft model block is free");
    cr_assert_gt(st.spec_accepted[SCHED_SPEC_DRAFT], 0);
    sched_destroy(s);
    model_destroy(c.draft_model);
    for (int i = 0; i < SPEC_N; i++) sched_request_release(reqs[i]);
    env_close(&e);
}

Test(spec_tick, a_request_that_opts_out_gets_no_drafts, .timeout = 60) {
    tick_env e;
    env_open(&e, 1);
    static int32_t prompts[SPEC_N][SPEC_PROMPT_CAP];
    static sched_request_params p[SPEC_N];
    spec_params(&e, prompts, p);
    for (int i = 0; i < 4; i++) p[i].no_speculation = true;
    static result out[2 * 4]; /* two passes of 4 */
    sched_stats st;
    sched_config c = spec_config(true, true);
    drive(&e, &c, p, 4, 2, out, &st, NULL);
    cr_assert_eq(sum(st.spec_proposed, SCHED_SPEC_PROPOSERS), 0);
    env_close(&e);
}

/* The draft model catches a sequence up (a prefill of its own over what it has not seen)
 * only when the tokens the sequence has left to generate can repay it: prompts of ~60
 * tokens with 16-token answers get no drafter run with the gate on, while with
 * --no-spec-gate (drafting whenever it can) the same requests are drafted. */
Test(spec_tick, a_draft_model_skips_catch_ups_the_answer_cannot_repay, .timeout = 120) {
    tick_env e;
    env_open(&e, 1);
    static int32_t prompts[4][SPEC_PROMPT_CAP];
    static sched_request_params p[4];
    const char *text = "Once upon a time there was a cat. The cat was happy. Once upon a time there was a";
    static result out[4];
    int64_t proposed[2];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 4; i++) {
            int32_t n = make_prompt(&e, text, 36 + i, prompts[i], SPEC_PROMPT_CAP);
            p[i] = base_params(prompts[i], n, 16);
        }
        sched_config c = spec_config(false, false);
        c.spec_draft = true;
        c.draft_model = draft_model_for(&e);
        c.spec_gate = pass == 0;
        sched_stats st;
        drive(&e, &c, p, 4, 1, out, &st, NULL);
        model_destroy(c.draft_model);
        proposed[pass] = st.spec_proposed[SCHED_SPEC_DRAFT];
        cr_assert_eq(st.generated_tokens, 4 * 16);
    }
    cr_assert_eq(proposed[0], 0, "gated: the drafter drafted %lld tokens", (long long)proposed[0]);
    cr_assert_gt(proposed[1], 0, "ungated: the drafter never drafted");
    env_close(&e);
}

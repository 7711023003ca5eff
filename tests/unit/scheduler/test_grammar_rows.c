/* Tests for grammar-constrained sequences in the scheduler's tick (tick.c's masks,
 * end_tick.c's grammar state): on the tiny real model, sampled output follows its
 * grammar, the request ends as soon as the grammar is complete, the tokens are the same
 * alone and among 31 unconstrained sequences, and preemption (recompute) keeps them. */
#include "tests/unit/scheduler/tick_harness.h"

static const char *GRAMMAR = "root ::= \" Once upon a time\" [ a-z,]{0,40} \".\"\n";

/* At least 150 characters: long enough outputs to fill the pool in the preemption test. */
static const char *LONG_GRAMMAR = "root ::= \" Once upon a time\" [ a-z,]{150,300} \".\"\n";

static gram_grammar *compile_text(const char *text) {
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile(text, strlen(text), NULL, &g), SP_OK, "%s", sp_last_error());
    return g;
}

static gram_grammar *compile(void) {
    return compile_text(GRAMMAR);
}

/* The text is a whole string of the grammar. */
static void assert_in_language(const gram_grammar *g, const result *r) {
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    cr_assert(gram_state_advance(s, (const uint8_t *)r->text, r->text_len), "not in the language: '%s'", r->text);
    cr_assert(gram_state_finished(s), "incomplete: '%s'", r->text);
    gram_state_destroy(s);
}

static sched_request_params grammar_params(const int32_t *prompt, int32_t n, gram_grammar *g, uint64_t seed) {
    sched_request_params p = base_params(prompt, n, 80);
    p.ignore_eos = false;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = seed;
    p.grammar = g;
    return p;
}

Test(sched_grammar, sampled_output_follows_the_grammar_and_ends_when_complete, .timeout = 60) {
    tick_env e;
    env_open(&e, 2);
    gram_grammar *g = compile();
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "Lily had a red ball", 0, prompt, 64);
    enum { N = 6 };
    sched_request_params params[N];
    for (int i = 0; i < N; i++) params[i] = grammar_params(prompt, n, g, 100 + (uint64_t)i);
    result *out = calloc(N, sizeof *out);
    sched_stats st;
    sched_config c = tick_config();
    run_all(&e, &c, params, N, out, &st);
    int distinct = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(out[i].finish, SCHED_FINISH_STOP, "request %d: finish %d (%s)", i, out[i].finish, out[i].message);
        assert_in_language(g, &out[i]);
        /* ended by the grammar: no end-of-generation token was sampled after the "." */
        cr_assert_eq(out[i].completion_tokens, out[i].n_tokens);
        if (i > 0 && strcmp(out[i].text, out[0].text) != 0) distinct++;
    }
    cr_assert_gt(distinct, 0, "seeds gave the same text: sampling is constrained, not replaced");
    cr_assert_eq(st.kv_blocks_used, 0);
    free(out);
    gram_grammar_destroy(g);
    env_close(&e);
}

Test(sched_grammar, same_tokens_alone_or_among_31_unconstrained, .timeout = 60) {
    tick_env e;
    env_open(&e, 2);
    gram_grammar *g = compile();
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "The cat sat", 0, prompt, 64);
    sched_config c = tick_config();
    result *alone = calloc(1, sizeof *alone);
    sched_stats st;
    sched_request_params one = grammar_params(prompt, n, g, 7);
    run_all(&e, &c, &one, 1, alone, &st);

    enum { N = 32 };
    int32_t prompts[N][64];
    sched_request_params params[N];
    for (int i = 0; i < N; i++) {
        int32_t k = make_prompt(&e, "The cat sat", i == 0 ? 0 : 1 + i % 7, prompts[i], 64);
        params[i] = i == 0 ? grammar_params(prompts[i], k, g, 7) : base_params(prompts[i], k, 24);
    }
    result *many = calloc(N, sizeof *many);
    run_all(&e, &c, params, N, many, &st);
    assert_same_tokens(&alone[0], &many[0], "grammar row among 31 others");
    assert_in_language(g, &many[0]);
    free(alone);
    free(many);
    gram_grammar_destroy(g);
    env_close(&e);
}

/* A pool too small for every sequence at once (102 blocks for ~140 wanted): sequences are
 * preempted and recomputed, and each still gets the tokens it gets alone. */
Test(sched_grammar, preemption_keeps_the_grammar_state, .timeout = 120) {
    tick_env e;
    env_open(&e, 2);
    gram_grammar *g = compile_text(LONG_GRAMMAR);
    enum { N = 24 };
    static int32_t prompts[N][64];
    sched_request_params params[N];
    for (int i = 0; i < N; i++) {
        int32_t k = make_prompt(&e, "A little dog", 40 + i % 8, prompts[i], 64);
        params[i] = grammar_params(prompts[i], k, g, 40 + (uint64_t)i);
        params[i].max_tokens = 400;
    }
    static result batched[N], alone[N];
    sched_stats st_batched, st_alone;
    sched_config c = tick_config();
    run_all(&e, &c, params, N, batched, &st_batched);
    c.max_batch_size = 1;
    run_all(&e, &c, params, N, alone, &st_alone);
    cr_assert_gt(st_batched.preemptions, 0, "the pool preempted nobody");
    for (int i = 0; i < N; i++) {
        assert_same_tokens(&batched[i], &alone[i], "with and without preemption");
        assert_in_language(g, &batched[i]);
    }
    cr_assert_eq(st_batched.kv_blocks_used, 0);
    gram_grammar_destroy(g);
    env_close(&e);
}

/* Grammar rows with drafts: the n-gram proposer drafts what the looping model wrote
 * before, each draft row is masked by the state after the drafts before it, drafts the
 * grammar refuses are cut; the output equals the output without speculation. One grammar
 * admits the model's text, one forbids the letter e (so many drafts are cut). */
Test(sched_grammar, drafts_keep_the_output_of_speculation_off, .timeout = 120) {
    tick_env e;
    env_open(&e, 2);
    gram_grammar *plain = compile_text("root ::= [ a-zA-Z,.']{1,400}\n");
    gram_grammar *no_e = compile_text("root ::= [ a-df-zA-Z,.']{1,400}\n");
    static const char *texts[3] = {
        "Once upon a time there was a cat. The cat was happy. Once upon a time there was a",
        "Tom had a red ball. Tom liked the red ball. Tom had a",
        "Lily and Max went to the park. Lily and Max went to the",
    };
    enum { N = 12 };
    static int32_t prompts[N][96];
    sched_request_params params[N];
    for (int i = 0; i < N; i++) {
        int32_t k = make_prompt(&e, texts[i % 3], 0, prompts[i], 96);
        params[i] = grammar_params(prompts[i], k, i % 2 ? no_e : plain, 900 + (uint64_t)i);
        params[i].max_tokens = 60;
        if (i % 4 < 2) params[i].sampling.temperature = 0; /* greedy loops: what drafts catch */
    }
    static result off[N], on[N];
    sched_stats st_off, st_on;
    sched_config c = tick_config();
    c.spec_ngram = c.spec_suffix = false;
    run_all(&e, &c, params, N, off, &st_off);
    c.spec_ngram = true;
    c.spec_k = 6;
    run_all(&e, &c, params, N, on, &st_on);
    cr_assert_eq(st_off.spec_proposed[SCHED_SPEC_NGRAM], 0);
    for (int i = 0; i < N; i++) {
        assert_same_tokens(&off[i], &on[i], "speculation on and off");
        cr_assert_null(i % 2 ? strchr(on[i].text, 'e') : NULL, "an e under the no-e grammar: %s", on[i].text);
    }
    cr_assert_gt(st_on.spec_accepted[SCHED_SPEC_NGRAM], 0, "no draft was accepted: the test proves nothing");
    gram_grammar_destroy(plain);
    gram_grammar_destroy(no_e);
    env_close(&e);
}

/* A mask over its budget (grammar.h, BUDGET; masks.c, BUDGET AND LATE MASKS) ends its own
 * request with an error and a message, its drawn token dropped, and nothing else: the
 * unconstrained neighbour in the same steps gets the tokens it gets alone. */
Test(sched_grammar, a_mask_over_its_budget_ends_only_its_request, .timeout = 60) {
    tick_env e;
    env_open(&e, 2);
    gram_limits lim = gram_limits_default();
    lim.max_mask_fuel = 50; /* a few trie edges: every mask of this grammar is over it */
    const char *text = "root ::= ([a-z ]+){3} \".\"\n";
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile(text, strlen(text), &lim, &g), SP_OK, "%s", sp_last_error());
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "Lily had a red ball", 0, prompt, 64);
    sched_config c = tick_config();
    sched_stats st;
    result *alone = calloc(1, sizeof *alone), *out = calloc(2, sizeof *out);
    sched_request_params free_one = base_params(prompt, n, 20);
    run_all(&e, &c, &free_one, 1, alone, &st);
    sched_request_params params[2] = {grammar_params(prompt, n, g, 5), free_one};
    run_all(&e, &c, params, 2, out, &st);
    cr_assert_eq(out[0].finish, SCHED_FINISH_ERROR, "finish %d", out[0].finish);
    cr_assert(strstr(out[0].message, "too costly"), "%s", out[0].message);
    cr_assert_eq(out[0].n_tokens, 0, "the token drawn without the grammar was emitted");
    cr_assert_eq(out[1].finish, SCHED_FINISH_LENGTH);
    cr_assert_eq(out[1].n_tokens, alone->n_tokens);
    cr_assert_eq(memcmp(out[1].ids, alone->ids, sizeof *alone->ids * (size_t)alone->n_tokens), 0);
    cr_assert_eq(st.kv_blocks_used, 0);
    free(alone);
    free(out);
    gram_grammar_destroy(g);
    env_close(&e);
}

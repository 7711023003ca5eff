/* test_embed.c: embedding requests in the scheduler (embed.c, tick.c): the pooling
 * functions on known vectors; then with stories260K on the CPU backend, a pooled vector
 * equals pooling the model's hidden rows directly, bit for bit, however the prompt is
 * chunked and whatever generates beside it; generation beside embeddings keeps its
 * tokens; the blocks go back to the pool at once and never into the prefix cache.
 */
#include "tests/unit/scheduler/tick_harness.h"

/* ---- the pooling functions ---- */

Test(sched_pool, rows_each_pooling_wants) {
    int32_t first;
    cr_assert_eq(sched__pool_rows(SP_POOLING_MEAN, 16, 8, 30, &first), 8);
    cr_assert_eq(first, 16);
    cr_assert_eq(sched__pool_rows(SP_POOLING_LAST, 16, 8, 30, &first), 0, "the last token is not in 16..23");
    cr_assert_eq(sched__pool_rows(SP_POOLING_LAST, 24, 6, 30, &first), 1);
    cr_assert_eq(first, 29);
    cr_assert_eq(sched__pool_rows(SP_POOLING_CLS, 0, 8, 30, &first), 1);
    cr_assert_eq(first, 0);
    cr_assert_eq(sched__pool_rows(SP_POOLING_CLS, 8, 8, 30, &first), 0);
    cr_assert_eq(sched__pool_rows(SP_POOLING_NONE, 0, 8, 30, &first), 0);
}

Test(sched_pool, mean_last_and_cls_then_l2) {
    const float rows[3][2] = {{3, 0}, {0, 4}, {3, 8}};
    double pool[2] = {0, 0};
    float out[2];
    /* mean of three rows over two chunks: (2, 4), normalized */
    sched__pool_add(SP_POOLING_MEAN, pool, &rows[0][0], 2, 2);
    sched__pool_add(SP_POOLING_MEAN, pool, &rows[2][0], 1, 2);
    sched__pool_finish(SP_POOLING_MEAN, pool, 3, 2, out);
    cr_assert_float_eq(out[0], (float)(2 / sqrt(20.0)), 1e-7);
    cr_assert_float_eq(out[1], (float)(4 / sqrt(20.0)), 1e-7);
    /* last and cls keep one row */
    double one[2] = {0, 0};
    sched__pool_add(SP_POOLING_LAST, one, &rows[1][0], 1, 2);
    sched__pool_finish(SP_POOLING_LAST, one, 3, 2, out);
    cr_assert_eq(out[0], 0.0f);
    cr_assert_eq(out[1], 1.0f);
    sched__pool_add(SP_POOLING_CLS, one, &rows[0][0], 1, 2);
    sched__pool_finish(SP_POOLING_CLS, one, 3, 2, out);
    cr_assert_eq(out[0], 1.0f);
    cr_assert_eq(out[1], 0.0f);
    /* a zero vector stays zero (no division by zero) */
    double zero[2] = {0, 0};
    sched__pool_finish(SP_POOLING_MEAN, zero, 3, 2, out);
    cr_assert(out[0] == 0 && out[1] == 0);
}

Test(sched_pool, an_embedding_generates_nothing) {
    int32_t prompt[1] = {1};
    sched_request_params p = {.prompt = prompt,
                              .n_prompt = 1,
                              .pooling = SP_POOLING_MEAN,
                              .max_tokens = 4,
                              .top_logprobs = -1,
                              .sampling = sample_params_default()};
    sched_request *r;
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "max_tokens"), "%s", sp_last_error());
    p.max_tokens = 0;
    cr_assert_eq(sched_request_create(&p, &r), SP_OK, "%s", sp_last_error());
    sched_request_release(r);
    p.pooling = SP_POOLING_NONE; /* a generation still needs a token to generate */
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);
}

/* ---- through the scheduler, with the model ---- */

static sched_request_params embed_params(const int32_t *prompt, int32_t n, sp_pooling pooling) {
    return (sched_request_params){
        .prompt = prompt, .n_prompt = n, .pooling = pooling, .top_logprobs = -1, .sampling = sample_params_default()};
}

/* The vector straight from the model: every hidden row of the prompt in one step, pooled
 * as embed.c pools (rows added in position order), into out (D). */
static void direct_embedding(tick_env *e, const int32_t *prompt, int32_t n, sp_pooling pooling, float *out) {
    enum { BLOCK = 16, BLOCKS = 8 };
    const int32_t d = model_get_hparams(e->m)->n_embd;
    dev_kv *kv;
    cr_assert_eq(model_kv_create(e->m, BLOCKS, BLOCK, &kv), SP_OK);
    int32_t table[BLOCKS], pos[TICK_MODEL_BATCH], seq[TICK_MODEL_BATCH] = {0}, rows[TICK_MODEL_BATCH];
    cr_assert_leq(n, BLOCK * BLOCKS);
    for (int b = 0; b < BLOCKS; b++) table[b] = b;
    for (int i = 0; i < n; i++) pos[i] = rows[i] = i;
    int32_t seq_len = n;
    dev_step step = {.n_tokens = n,
                     .tokens = prompt,
                     .pos = pos,
                     .seq = seq,
                     .n_seqs = 1,
                     .seq_len = &seq_len,
                     .block_table = table,
                     .max_blocks = BLOCKS,
                     .n_hidden = n,
                     .hidden_rows = rows};
    float *hidden = malloc(sizeof *hidden * (size_t)n * (size_t)d);
    double *pool = calloc((size_t)d, sizeof *pool);
    const dev_sample_vocab vocab = {e->n_vocab, NULL, 0};
    cr_assert_eq(model_forward_sample_hidden(e->m, kv, &step, &vocab, NULL, NULL, hidden, NULL), SP_OK, "%s",
                 sp_last_error());
    int32_t first, k = sched__pool_rows(pooling, 0, n, n, &first);
    sched__pool_add(pooling, pool, hidden + (size_t)first * (size_t)d, k, d);
    sched__pool_finish(pooling, pool, n, d, out);
    free(hidden);
    free(pool);
    dev_kv_destroy(e->dev, kv);
}

/* Copies a finished embedding's vector into out (D); asserts it finished with STOP. */
static void capture_embedding(sched_request *r, float *out, int32_t d, int32_t n_prompt) {
    sched_request_lock(r);
    const sched_output *o = sched_request_output(r);
    cr_assert(o->done);
    cr_assert_eq(o->finish, SCHED_FINISH_STOP, "%s", o->error_message);
    cr_assert_eq(o->n_embd, d);
    cr_assert_eq(o->prompt_tokens, n_prompt);
    cr_assert_eq(o->completion_tokens, 0);
    cr_assert_eq(o->n_tokens, 0);
    cr_assert_eq(o->text_len, 0);
    memcpy(out, o->embedding, sizeof *out * (size_t)d);
    sched_request_unlock(r);
}

static void assert_same_vector(const float *a, const float *b, int32_t d, const char *what) {
    for (int32_t i = 0; i < d; i++) cr_assert_eq(a[i], b[i], "%s: [%d] %.9g vs %.9g", what, i, a[i], b[i]);
}

Test(sched_embed, pooled_in_chunks_equals_the_model_directly) {
    tick_env e;
    env_open(&e, 1);
    const int32_t d = model_get_hparams(e.m)->n_embd;
    int32_t prompt[100];
    int32_t n = make_prompt(&e, "Once upon a time, there was a little girl named Lily.", 50, prompt, 100);
    const sp_pooling poolings[3] = {SP_POOLING_MEAN, SP_POOLING_LAST, SP_POOLING_CLS};
    float want[3][64], got[64];
    cr_assert_leq(d, 64);
    for (int k = 0; k < 3; k++) direct_embedding(&e, prompt, n, poolings[k], want[k]);
    /* chunks of 7 and 64 prompt tokens per tick */
    const int chunks[2] = {7, 64};
    for (int c = 0; c < 2; c++) {
        sched_config cfg = tick_config();
        cfg.max_prefill_tokens = chunks[c];
        sched *s;
        cr_assert_eq(sched_create(&cfg, e.m, &s), SP_OK, "%s", sp_last_error());
        cr_assert_eq(sched_start(s), SP_OK);
        for (int k = 0; k < 3; k++) {
            sched_request_params p = embed_params(prompt, n, poolings[k]);
            sched_request *r = make_request(&p);
            cr_assert_eq(sched_submit(s, &r, 1), SP_OK, "%s", sp_last_error());
            wait_done(r, 30);
            capture_embedding(r, got, d, n);
            char what[64];
            snprintf(what, sizeof what, "pooling %d, chunks of %d", (int)poolings[k], chunks[c]);
            assert_same_vector(got, want[k], d, what);
            sched_request_release(r);
        }
        sched_destroy(s);
    }
    double sq = 0;
    for (int32_t i = 0; i < d; i++) sq += (double)want[0][i] * want[0][i];
    cr_assert_float_eq(sq, 1.0, 1e-5, "L2-normalized");
    env_close(&e);
}

Test(sched_embed, beside_generation_neither_changes_and_blocks_go_back_at_once) {
    tick_env e;
    env_open(&e, 2);
    const int32_t d = model_get_hparams(e.m)->n_embd;
    enum { GEN = 3, EMB = 4 };
    int32_t gen_prompts[GEN][64], emb_prompts[EMB][64], n_gen[GEN], n_emb[EMB];
    for (int i = 0; i < GEN; i++)
        n_gen[i] = make_prompt(&e, "Lily and Tom went to the park.", 3 * i, gen_prompts[i], 64);
    for (int i = 0; i < EMB; i++) n_emb[i] = make_prompt(&e, "The sun was shining.", 11 * i + 20, emb_prompts[i], 64);
    sched_config cfg = tick_config();
    cfg.max_prefill_tokens = 24; /* embeddings take several ticks, beside decode rows */

    /* the vectors alone, straight from the model (before a scheduler owns it) */
    float want[EMB][64];
    for (int i = 0; i < EMB; i++) direct_embedding(&e, emb_prompts[i], n_emb[i], SP_POOLING_MEAN, want[i]);
    /* generation alone */
    sched_request_params gp[GEN];
    for (int i = 0; i < GEN; i++) gp[i] = base_params(gen_prompts[i], n_gen[i], 80);
    result alone[GEN];
    sched_stats st;
    run_all(&e, &cfg, gp, GEN, alone, &st);

    /* the same generations with embeddings submitted while they decode */
    sched *s;
    cr_assert_eq(sched_create(&cfg, e.m, &s), SP_OK, "%s", sp_last_error());
    sched_request *gen[GEN], *emb[EMB];
    for (int i = 0; i < GEN; i++) {
        gen[i] = make_request(&gp[i]);
        cr_assert_eq(sched_submit(s, &gen[i], 1), SP_OK, "%s", sp_last_error());
    }
    cr_assert_eq(sched_start(s), SP_OK);
    while (n_tokens_now(gen[0]) < 4) usleep(200); /* decoding */
    for (int i = 0; i < EMB; i++) {
        sched_request_params p = embed_params(emb_prompts[i], n_emb[i], SP_POOLING_MEAN);
        emb[i] = make_request(&p);
        cr_assert_eq(sched_submit(s, &emb[i], 1), SP_OK, "%s", sp_last_error());
    }
    float got[64];
    bool overlapped = false;
    for (int i = 0; i < EMB; i++) {
        wait_done(emb[i], 30);
        overlapped = overlapped || !is_done(gen[GEN - 1]);
        capture_embedding(emb[i], got, d, n_emb[i]);
        assert_same_vector(got, want[i], d, "beside generation");
    }
    cr_assert(overlapped, "the embeddings ran while generation decoded");
    for (int i = 0; i < GEN; i++) {
        wait_done(gen[i], 30);
        result r;
        capture(gen[i], &r);
        assert_same_tokens(&r, &alone[i], "generation beside embeddings");
    }
    /* every block back, none of the embeddings' in the prefix cache (only full blocks of
     * the generations' prompts and outputs are) */
    for (double until = sched_now() + 1; sched_now() < until;) {
        sched_get_stats(s, &st);
        if (st.kv_blocks_used == 0 && st.running == 0) break;
        usleep(200);
    }
    cr_assert_eq(st.kv_blocks_used, 0);
    cr_assert_eq(st.finished, GEN + EMB);
    sched_destroy(s);
    for (int i = 0; i < GEN; i++) sched_request_release(gen[i]);
    for (int i = 0; i < EMB; i++) sched_request_release(emb[i]);
    env_close(&e);
}

Test(sched_embed, never_enter_nor_use_the_prefix_cache) {
    tick_env e;
    env_open(&e, 1);
    const int32_t d = model_get_hparams(e.m)->n_embd;
    int32_t prompt[100];
    int32_t n = make_prompt(&e, "Once upon a time", 60, prompt, 100);
    sched_config cfg = tick_config();
    sched *s;
    cr_assert_eq(sched_create(&cfg, e.m, &s), SP_OK, "%s", sp_last_error());
    cr_assert_eq(sched_start(s), SP_OK);
    /* the same prompt twice as an embedding: nothing cached, nothing hit */
    float first[64], second[64];
    for (int k = 0; k < 2; k++) {
        sched_request_params p = embed_params(prompt, n, SP_POOLING_MEAN);
        sched_request *r = make_request(&p);
        cr_assert_eq(sched_submit(s, &r, 1), SP_OK);
        wait_done(r, 30);
        capture_embedding(r, k == 0 ? first : second, d, n);
        sched_request_release(r);
    }
    assert_same_vector(first, second, d, "again");
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.kv_blocks_cached, 0, "an embedding's blocks are not kept");
    cr_assert_eq(st.prefix_hit_tokens, 0);
    /* a generation of that prompt caches its blocks; the embedding after it still computes
     * every position and gets the same vector */
    sched_request_params gp = base_params(prompt, n, 2);
    sched_request *g = make_request(&gp);
    cr_assert_eq(sched_submit(s, &g, 1), SP_OK);
    wait_done(g, 30);
    sched_request_release(g);
    sched_get_stats(s, &st);
    cr_assert_gt(st.kv_blocks_cached, 0);
    int64_t hits = st.prefix_hit_tokens;
    sched_request_params p = embed_params(prompt, n, SP_POOLING_MEAN);
    sched_request *r = make_request(&p);
    cr_assert_eq(sched_submit(s, &r, 1), SP_OK);
    wait_done(r, 30);
    capture_embedding(r, second, d, n);
    sched_request_release(r);
    sched_get_stats(s, &st);
    cr_assert_eq(st.prefix_hit_tokens, hits, "the embedding did not start from cached blocks");
    assert_same_vector(first, second, d, "after a generation cached its prompt");
    sched_destroy(s);
    env_close(&e);
}

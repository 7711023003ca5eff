/* test_hidden.c: the step's hidden rows (embeddings) on the CPU backend with stories260K:
 * each is the final hidden state after the output norm, the very vector the logits come
 * from (output.weight times it), the same whatever else the step asks for, and a step
 * with hidden rows keeps generation's logits bit for bit. Bad hidden rows are refused. On a
 * GPU (skipped without one), the CUDA backend's rows match the CPU's, in a prefill step and
 * in a one-token step (a padded decode batch, run as a captured graph from its second time).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "tests/unit/gpu/gpu_test.h"
#include "tests/unit/testdata.h"

enum { T = 12, BLOCK = 16, BLOCKS = 4 };

typedef struct env {
    dev_backend *dev;
    model *m;
    dev_kv *kv;
    int32_t n_vocab, d;
    int32_t tokens[T], pos[T], seq[T], table[BLOCKS], seq_len;
} env;

static void env_open_on(env *e, sp_device kind) {
    char path[512];
    testdata_path(path, sizeof path, "models/stories260K.gguf");
    TESTDATA_REQUIRE(path);
    dev_options opts = {.kind = kind, .n_threads = 1};
    cr_assert_eq(dev_create(&opts, &e->dev), SP_OK);
    model_options mo = {.max_batch_tokens = 64};
    cr_assert_eq(model_load(path, e->dev, &mo, &e->m), SP_OK, "%s", sp_last_error());
    cr_assert_eq(model_kv_create(e->m, BLOCKS, BLOCK, &e->kv), SP_OK);
    e->n_vocab = model_get_hparams(e->m)->n_vocab;
    e->d = model_get_hparams(e->m)->n_embd;
    for (int i = 0; i < T; i++) {
        e->tokens[i] = 1 + (i * 37) % (e->n_vocab - 1);
        e->pos[i] = i;
        e->seq[i] = 0;
    }
    for (int b = 0; b < BLOCKS; b++) e->table[b] = b;
    e->seq_len = T;
}

static void env_open(env *e) {
    env_open_on(e, SP_DEVICE_CPU);
}

static void env_close(env *e) {
    dev_kv_destroy(e->dev, e->kv);
    model_destroy(e->m);
    dev_destroy(e->dev);
}

static dev_step env_step(env *e, int32_t n_logits, const int32_t *logit_rows, int32_t n_hidden,
                         const int32_t *hidden_rows) {
    return (dev_step){.n_tokens = T,
                      .tokens = e->tokens,
                      .pos = e->pos,
                      .seq = e->seq,
                      .n_seqs = 1,
                      .seq_len = &e->seq_len,
                      .block_table = e->table,
                      .max_blocks = BLOCKS,
                      .n_logits = n_logits,
                      .logit_rows = logit_rows,
                      .n_hidden = n_hidden,
                      .hidden_rows = hidden_rows};
}

/* The F32 output matrix (V, D) of stories260K. */
static const float *output_weights(env *e) {
    const gguf_tensor *w = gguf_find_tensor(model_gguf(e->m), "output.weight");
    cr_assert_not_null(w);
    cr_assert_eq(w->type, (uint32_t)QUANT_F32);
    return w->data;
}

Test(model_hidden, rows_are_the_normed_state_the_logits_come_from) {
    env e;
    env_open(&e);
    const int32_t rows[3] = {0, 5, T - 1};
    float *hidden = malloc(sizeof *hidden * 3 * (size_t)e.d);
    float *logits = malloc(sizeof *logits * 3 * (size_t)e.n_vocab);
    dev_step plain = env_step(&e, 3, rows, 0, NULL);
    cr_assert_eq(model_forward(e.m, e.kv, &plain, logits), SP_OK, "%s", sp_last_error());

    dev_step step = env_step(&e, 0, NULL, 3, rows);
    const dev_sample_vocab vocab = {e.n_vocab, NULL, 0};
    cr_assert_eq(model_forward_sample_hidden(e.m, e.kv, &step, &vocab, NULL, NULL, hidden, NULL), SP_OK, "%s",
                 sp_last_error());
    const float *w = output_weights(&e);
    for (int r = 0; r < 3; r++) {
        for (int32_t v = 0; v < e.n_vocab; v += 7) {
            double dot = 0;
            for (int32_t k = 0; k < e.d; k++) dot += (double)hidden[r * e.d + k] * w[(size_t)v * (size_t)e.d + k];
            float want = logits[(size_t)r * (size_t)e.n_vocab + (size_t)v];
            cr_assert(fabs(dot - want) < 1e-4 * (1 + fabs(want)), "row %d token %d: %g vs %g", rows[r], v, dot,
                      (double)want);
        }
    }
    free(hidden);
    free(logits);
    env_close(&e);
}

Test(model_hidden, rows_and_logits_do_not_change_each_other) {
    env e;
    env_open(&e);
    int32_t all[T];
    for (int i = 0; i < T; i++) all[i] = i;
    const int32_t last = T - 1;
    const dev_sample_vocab vocab = {e.n_vocab, NULL, 0};
    dev_sample_row draw = {.params = NULL, .top_logprobs = 0, .rng = 1};
    sample_params sp = sample_params_default();
    sp.temperature = 0;
    draw.params = &sp;

    float *alone = malloc(sizeof *alone * T * (size_t)e.d), *beside = malloc(sizeof *beside * T * (size_t)e.d);
    dev_step hidden_only = env_step(&e, 0, NULL, T, all);
    cr_assert_eq(model_forward_sample_hidden(e.m, e.kv, &hidden_only, &vocab, NULL, NULL, alone, NULL), SP_OK);
    dev_sample_result sampled_alone, sampled_beside;
    dev_step logits_only = env_step(&e, 1, &last, 0, NULL);
    cr_assert_eq(model_forward_sample(e.m, e.kv, &logits_only, &vocab, &draw, &sampled_alone), SP_OK);
    dev_step both = env_step(&e, 1, &last, T, all);
    cr_assert_eq(model_forward_sample_hidden(e.m, e.kv, &both, &vocab, &draw, &sampled_beside, beside, NULL), SP_OK);
    cr_assert_eq(memcmp(alone, beside, sizeof *alone * T * (size_t)e.d), 0, "hidden rows changed beside logits");
    cr_assert_eq(sampled_alone.token, sampled_beside.token);
    cr_assert_eq(sampled_alone.logprob, sampled_beside.logprob, "bit for bit");
    free(alone);
    free(beside);
    env_close(&e);
}

Test(model_hidden, bad_rows_are_refused) {
    env e;
    env_open(&e);
    const dev_sample_vocab vocab = {e.n_vocab, NULL, 0};
    float hidden[2 * 64];
    const int32_t descending[2] = {3, 1}, outside[1] = {T};
    dev_step step = env_step(&e, 0, NULL, 2, descending);
    cr_assert_eq(model_forward_sample_hidden(e.m, e.kv, &step, &vocab, NULL, NULL, hidden, NULL), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "hidden_rows[1]"), "%s", sp_last_error());
    step = env_step(&e, 0, NULL, 1, outside);
    cr_assert_eq(model_forward_sample_hidden(e.m, e.kv, &step, &vocab, NULL, NULL, hidden, NULL), SP_ERR_INVALID_ARG);
    /* hidden rows without a buffer, or through an entry point that hands none back */
    const int32_t one[1] = {0};
    step = env_step(&e, 0, NULL, 1, one);
    cr_assert_eq(model_forward_sample_hidden(e.m, e.kv, &step, &vocab, NULL, NULL, NULL, NULL), SP_ERR_INVALID_ARG);
    cr_assert_eq(model_forward_sample(e.m, e.kv, &step, &vocab, NULL, NULL), SP_ERR_INVALID_ARG);
    cr_assert_eq(model_forward(e.m, e.kv, &step, NULL), SP_ERR_INVALID_ARG);
    env_close(&e);
}

/* Every row of the prefill step, then row 0 of three one-token steps after it. */
static void run_hidden(sp_device kind, float *out) {
    env e;
    env_open_on(&e, kind);
    int32_t all[T];
    for (int i = 0; i < T; i++) all[i] = i;
    const dev_sample_vocab vocab = {e.n_vocab, NULL, 0};
    dev_step prefill = env_step(&e, 0, NULL, T, all);
    cr_assert_eq(model_forward_sample_hidden(e.m, e.kv, &prefill, &vocab, NULL, NULL, out, NULL), SP_OK, "%s",
                 sp_last_error());
    for (int k = 0; k < 3; k++) {
        int32_t token = 3 + k, pos = T + k, seq = 0, len = T + k + 1, row = 0;
        dev_step one = {.n_tokens = 1,
                        .tokens = &token,
                        .pos = &pos,
                        .seq = &seq,
                        .n_seqs = 1,
                        .seq_len = &len,
                        .block_table = e.table,
                        .max_blocks = BLOCKS,
                        .n_hidden = 1,
                        .hidden_rows = &row};
        float *at = out + (size_t)(T + k) * (size_t)e.d;
        cr_assert_eq(model_forward_sample_hidden(e.m, e.kv, &one, &vocab, NULL, NULL, at, NULL), SP_OK, "%s",
                     sp_last_error());
    }
    env_close(&e);
}

Test(model_hidden, cuda_rows_match_the_cpu) {
    skip_without_gpu();
    enum { ROWS = T + 3, D_MAX = 64 };
    float *cpu = malloc(sizeof(float) * ROWS * D_MAX), *gpu = malloc(sizeof(float) * ROWS * D_MAX);
    run_hidden(SP_DEVICE_CPU, cpu);
    run_hidden(SP_DEVICE_CUDA, gpu);
    for (int r = 0; r < ROWS; r++) {
        double e = rel_error(gpu + (size_t)r * D_MAX, cpu + (size_t)r * D_MAX, D_MAX);
        cr_expect(e < 1e-2, "row %d: relative error %.2e", r, e);
    }
    free(cpu);
    free(gpu);
}

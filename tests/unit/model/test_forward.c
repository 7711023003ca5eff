/* test_forward.c: properties of the forward pass over ragged batches on the CPU
 * backend: a sequence's logits are bit-identical alone or mixed with others (prefill
 * chunks and decode rows in one step, scattered KV blocks), with 1 or 2 threads, and
 * in the avx2 and avx512 kernel sets (on stories260K's F32 weights and on the default
 * model's Q4_1/Q8_0 ones, which take the multi-row kernels); model_forward_sample is
 * model_forward then sample/sample.c, bit for bit. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tests/unit/testdata.h"

enum { FWD_BLOCK = 4, FWD_BLOCKS = 64, FWD_SEQS = 3, FWD_MAX_BLOCKS = 16 };

typedef struct fwd_env {
    dev_backend *dev;
    model *model;
    dev_kv *kv;
    int32_t n_vocab;
} fwd_env;

/* path's model on the CPU with kernel set isa; skips when this CPU lacks the set. */
static void env_open_model(fwd_env *e, const char *path, int threads, sp_cpu_isa isa) {
    TESTDATA_REQUIRE(path);
    if (dev_cpu_isa_check(isa) != SP_OK) cr_skip_test("%s", sp_last_error());
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = threads, .cpu_isa = isa};
    cr_assert_eq(dev_create(&opts, &e->dev), SP_OK);
    model_options mo = {.max_batch_tokens = 64};
    cr_assert_eq(model_load(path, e->dev, &mo, &e->model), SP_OK, "%s", sp_last_error());
    cr_assert_eq(model_kv_create(e->model, FWD_BLOCKS, FWD_BLOCK, &e->kv), SP_OK);
    e->n_vocab = model_get_hparams(e->model)->n_vocab;
}

static void env_open(fwd_env *e, int threads) {
    char path[512];
    testdata_path(path, sizeof path, "models/stories260K.gguf");
    env_open_model(e, path, threads, SP_CPU_ISA_AUTO);
}

static void env_close(fwd_env *e) {
    dev_kv_destroy(e->dev, e->kv);
    model_destroy(e->model);
    dev_destroy(e->dev);
}

/* Three sequences of different lengths, each with its own scattered blocks. */
static const int32_t seq_tokens[FWD_SEQS][12] = {
    {1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310},
    {1, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410},
    {1, 260, 270, 280, 290, 300, 310, 320, 330, 340, 350, 360},
};
static int32_t block_tables[FWD_SEQS][FWD_MAX_BLOCKS];

static void make_block_tables(void) {
    /* interleave: sequence s gets blocks s, s+3, s+6, ... in reverse order */
    for (int s = 0; s < FWD_SEQS; s++)
        for (int b = 0; b < FWD_MAX_BLOCKS; b++) block_tables[s][b] = (FWD_MAX_BLOCKS - 1 - b) * FWD_SEQS + s;
}

/* Runs sequence s alone: prefill of its first 8 tokens, then 4 decode steps; stores
 * the logits after each decode step in out (4, V). */
static void run_alone(fwd_env *e, int s, float *out) {
    int32_t pos[8], seq[8] = {0}, last = 7, seq_len;
    for (int i = 0; i < 8; i++) pos[i] = i;
    seq_len = 8;
    dev_step step = {8, seq_tokens[s], pos, seq, 1, &seq_len, block_tables[s], FWD_MAX_BLOCKS, 0, &last, 0, NULL};
    cr_assert_eq(model_forward(e->model, e->kv, &step, NULL), SP_OK, "%s", sp_last_error());
    for (int d = 0; d < 4; d++) {
        int32_t p = 8 + d, row = 0;
        seq_len = p + 1;
        dev_step one = {1, &seq_tokens[s][p], &p, seq, 1, &seq_len, block_tables[s], FWD_MAX_BLOCKS, 1, &row, 0, NULL};
        cr_assert_eq(model_forward(e->model, e->kv, &one, out + (size_t)d * (size_t)e->n_vocab), SP_OK);
    }
}

/* The logits of each sequence alone equal those of the same sequence mixed with the
 * others in every step. */
static void check_batch_invariance(fwd_env *env) {
    fwd_env e = *env;
    make_block_tables();
    float *alone = malloc(sizeof(float) * (size_t)e.n_vocab * 4 * FWD_SEQS);
    for (int s = 0; s < FWD_SEQS; s++) run_alone(&e, s, alone + (size_t)s * 4 * (size_t)e.n_vocab);

    /* Mixed: sequence 0 prefills all 8 tokens in one step while 1 and 2 are chunked; then
     * steps where 0 decodes while 1 and 2 finish prefill, and so on; compare the logits
     * of each decode row. */
    float *mixed = malloc(sizeof(float) * (size_t)e.n_vocab * 4 * FWD_SEQS);
    int progress[FWD_SEQS] = {0, 0, 0};
    int decoded[FWD_SEQS] = {0, 0, 0};
    const int prefill_chunk[FWD_SEQS] = {8, 3, 5};
    while (decoded[0] < 4 || decoded[1] < 4 || decoded[2] < 4) {
        int32_t tokens[32], pos[32], seq[32], seq_len[FWD_SEQS], rows[32], row_seq[32];
        int32_t tables[FWD_SEQS * FWD_MAX_BLOCKS];
        int n = 0, n_rows = 0;
        for (int s = 0; s < FWD_SEQS; s++) {
            memcpy(tables + s * FWD_MAX_BLOCKS, block_tables[s], sizeof block_tables[s]);
            int want = progress[s] < 8 ? prefill_chunk[s] : 1;
            if (progress[s] < 8 && progress[s] + want > 8) want = 8 - progress[s];
            if (progress[s] >= 8 + 4) want = 0;
            for (int i = 0; i < want; i++) {
                tokens[n] = seq_tokens[s][progress[s] + i];
                pos[n] = progress[s] + i;
                seq[n] = s;
                n++;
            }
            progress[s] += want;
            seq_len[s] = progress[s];
            if (want > 0 && progress[s] > 8) { /* a decode row: logits wanted */
                rows[n_rows] = n - 1;
                row_seq[n_rows++] = s;
            }
        }
        float *logits = malloc(sizeof(float) * (size_t)e.n_vocab * (size_t)(n_rows ? n_rows : 1));
        dev_step step = {n, tokens, pos, seq, FWD_SEQS, seq_len, tables, FWD_MAX_BLOCKS, n_rows, rows, 0, NULL};
        cr_assert_eq(model_forward(e.model, e.kv, &step, logits), SP_OK, "%s", sp_last_error());
        for (int r = 0; r < n_rows; r++) {
            int s = row_seq[r];
            memcpy(mixed + ((size_t)s * 4 + (size_t)decoded[s]) * (size_t)e.n_vocab,
                   logits + (size_t)r * (size_t)e.n_vocab, sizeof(float) * (size_t)e.n_vocab);
            decoded[s]++;
        }
        free(logits);
    }
    cr_assert(memcmp(alone, mixed, sizeof(float) * (size_t)e.n_vocab * 4 * FWD_SEQS) == 0,
              "logits differ between solo and batched runs (%s set)", sp_cpu_isa_name(dev_cpu_kernels(e.dev)));
    free(alone);
    free(mixed);
}

Test(forward, sequence_logits_do_not_depend_on_the_batch) {
    fwd_env e;
    env_open(&e, 2);
    check_batch_invariance(&e);
    env_close(&e);
}

Test(forward, quantized_logits_do_not_depend_on_the_batch_with_avx2) {
    fwd_env e;
    env_open_model(&e, testdata_default_model(), 2, SP_CPU_ISA_AVX2);
    check_batch_invariance(&e);
    env_close(&e);
}

Test(forward, quantized_logits_do_not_depend_on_the_batch_with_avx512) {
    fwd_env e;
    env_open_model(&e, testdata_default_model(), 2, SP_CPU_ISA_AVX512);
    check_batch_invariance(&e);
    env_close(&e);
}

Test(forward, quantized_logits_do_not_depend_on_the_batch_with_amx) {
    fwd_env e;
    env_open_model(&e, testdata_default_model(), 2, SP_CPU_ISA_AMX);
    check_batch_invariance(&e);
    env_close(&e);
}

/* One sequence's decode logits under the avx2 and the avx512 set, on the default model
 * (Q4_1 layers, Q8_0 embeddings): the same bits, so results do not depend on the CPU. */
Test(forward, avx512_set_gives_the_avx2_sets_logits) {
    if (dev_cpu_isa_check(SP_CPU_ISA_AVX512) != SP_OK) cr_skip_test("%s", sp_last_error());
    make_block_tables();
    const sp_cpu_isa sets[2] = {SP_CPU_ISA_AVX2, SP_CPU_ISA_AVX512};
    float *out[2];
    size_t bytes = 0;
    for (int i = 0; i < 2; i++) {
        fwd_env e;
        env_open_model(&e, testdata_default_model(), 2, sets[i]);
        bytes = sizeof(float) * (size_t)e.n_vocab * 4;
        out[i] = malloc(bytes);
        run_alone(&e, 0, out[i]);
        env_close(&e);
    }
    cr_assert(memcmp(out[0], out[1], bytes) == 0, "avx2 and avx512 give different logits");
    free(out[0]);
    free(out[1]);
}

Test(forward, thread_count_does_not_change_logits) {
    make_block_tables();
    float *out[2];
    for (int threads = 1; threads <= 2; threads++) {
        fwd_env e;
        env_open(&e, threads);
        out[threads - 1] = malloc(sizeof(float) * (size_t)e.n_vocab * 4);
        run_alone(&e, 1, out[threads - 1]);
        env_close(&e);
    }
    cr_assert(memcmp(out[0], out[1], sizeof(float) * 512 * 4) == 0, "1 and 2 threads give different logits");
    free(out[0]);
    free(out[1]);
}

Test(forward, rejects_a_step_with_bad_positions) {
    fwd_env e;
    env_open(&e, 1);
    make_block_tables();
    int32_t tok = 5, pos = 3, seq = 0, seq_len = 2, row = 0;
    dev_step step = {1, &tok, &pos, &seq, 1, &seq_len, block_tables[0], FWD_MAX_BLOCKS, 0, &row, 0, NULL};
    cr_assert_eq(model_forward(e.model, e.kv, &step, NULL), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "pos[0]") != NULL, "%s", sp_last_error());
    int32_t bad_tok = 100000;
    pos = 0;
    seq_len = 1;
    dev_step step2 = {1, &bad_tok, &pos, &seq, 1, &seq_len, block_tables[0], FWD_MAX_BLOCKS, 0, &row, 0, NULL};
    cr_assert_eq(model_forward(e.model, e.kv, &step2, NULL), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "tokens[0]") != NULL, "%s", sp_last_error());
    env_close(&e);
}

/* What dev_sample promises for one row, written out with sample/sample.c: the raw
 * logits' log-probabilities, the EOG mask, the penalties, then the draw. */
static void expected_draw(const float *raw, int32_t n_vocab, const dev_sample_vocab *vocab, const dev_sample_row *row,
                          dev_sample_result *out) {
    float *edited = malloc(sizeof(float) * (size_t)n_vocab);
    memcpy(edited, raw, sizeof(float) * (size_t)n_vocab);
    double lse = sample_logsumexp(raw, n_vocab);
    if (row->top_logprobs > 0) sample_top_logprobs(raw, n_vocab, lse, row->top_logprobs, out->top);
    if (row->mask_eog)
        for (int32_t i = 0; i < vocab->n_eog; i++) edited[vocab->eog_ids[i]] = -INFINITY;
    sample_state st;
    cr_assert_eq(sample_state_init(&st, n_vocab, row->rng), SP_OK);
    sample_apply_penalties(row->params, &st, row->prompt, row->n_prompt, row->generated, row->n_generated, edited);
    out->token = sample_token(row->params, &st, edited);
    out->rng = st.rng;
    out->logprob = row->top_logprobs >= 0 ? (float)((double)raw[out->token] - lse) : 0.0f;
    sample_state_free(&st);
    free(edited);
}

Test(forward, forward_sample_is_forward_then_sample_c) {
    fwd_env e;
    env_open(&e, 2);
    make_block_tables();
    /* one prefill step of all three sequences' first 8 tokens, a logit row at each end */
    int32_t tokens[24], pos[24], seq[24], seq_len[FWD_SEQS] = {8, 8, 8}, rows[FWD_SEQS] = {7, 15, 23};
    int32_t tables[FWD_SEQS * FWD_MAX_BLOCKS];
    for (int s = 0; s < FWD_SEQS; s++) {
        memcpy(tables + s * FWD_MAX_BLOCKS, block_tables[s], sizeof block_tables[s]);
        for (int i = 0; i < 8; i++) {
            tokens[s * 8 + i] = seq_tokens[s][i];
            pos[s * 8 + i] = i;
            seq[s * 8 + i] = s;
        }
    }
    dev_step step = {24, tokens, pos, seq, FWD_SEQS, seq_len, tables, FWD_MAX_BLOCKS, FWD_SEQS, rows, 0, NULL};
    float *logits = malloc(sizeof(float) * (size_t)e.n_vocab * FWD_SEQS);
    cr_assert_eq(model_forward(e.model, e.kv, &step, logits), SP_OK, "%s", sp_last_error());

    /* three draws that use every part: greedy with alternatives under the EOG mask;
     * top-k and top-p with every penalty and a bias; min-p at a high temperature */
    const int32_t eog[2] = {2, 0};
    const dev_sample_vocab vocab = {e.n_vocab, eog, 2};
    const sample_logit_bias bias[2] = {{7, 5.0f}, {301, -3.0f}};
    const int32_t generated[4] = {300, 301, 300, 7};
    sample_params greedy = sample_params_default(), mixed = sample_params_default(), min_p = sample_params_default();
    greedy.temperature = 0.0f;
    mixed.temperature = 0.8f;
    mixed.top_k = 40;
    mixed.top_p = 0.9f;
    mixed.repetition_penalty = 1.3f;
    mixed.presence_penalty = 0.5f;
    mixed.frequency_penalty = 0.2f;
    mixed.logit_bias = bias;
    mixed.n_logit_bias = 2;
    min_p.temperature = 1.7f;
    min_p.min_p = 0.05f;
    const dev_sample_row draw[FWD_SEQS] = {
        {&greedy, seq_tokens[0], 8, NULL, 0, true, 5, 11, NULL},
        {&mixed, seq_tokens[1], 8, generated, 4, false, 0, 42, NULL},
        {&min_p, seq_tokens[2], 8, generated, 2, true, 3, 0x9E3779B97F4A7C15ull, NULL},
    };
    dev_sample_result got[FWD_SEQS], want[FWD_SEQS];
    memset(got, 0, sizeof got);
    memset(want, 0, sizeof want);
    /* the same step again writes the same K/V: the logits are the ones above */
    cr_assert_eq(model_forward_sample(e.model, e.kv, &step, &vocab, draw, got), SP_OK, "%s", sp_last_error());
    for (int r = 0; r < FWD_SEQS; r++) {
        expected_draw(logits + (size_t)r * (size_t)e.n_vocab, e.n_vocab, &vocab, &draw[r], &want[r]);
        cr_assert_eq(got[r].token, want[r].token, "row %d: token %d, sample.c %d", r, got[r].token, want[r].token);
        cr_assert_eq(got[r].rng, want[r].rng, "row %d: generator state", r);
        cr_assert(memcmp(&got[r].logprob, &want[r].logprob, sizeof(float)) == 0, "row %d: logprob %g vs %g", r,
                  (double)got[r].logprob, (double)want[r].logprob);
        for (int k = 0; k < draw[r].top_logprobs; k++) {
            cr_assert_eq(got[r].top[k].id, want[r].top[k].id, "row %d: alternative %d", r, k);
            cr_assert(memcmp(&got[r].top[k].logprob, &want[r].top[k].logprob, sizeof(float)) == 0,
                      "row %d: alternative %d's logprob", r, k);
        }
    }
    cr_assert_neq(got[0].token, 2, "the EOG mask applies");
    cr_assert_neq(got[0].token, 0, "the EOG mask applies");
    cr_assert_neq(got[1].rng, draw[1].rng, "a draw advances the generator");
    cr_assert_eq(got[0].rng, draw[0].rng, "greedy draws nothing");
    free(logits);
    env_close(&e);
}

/* A step of prefill chunks only brings nothing back, and still completes (it ends with
 * dev_synchronize); the next decode continues from its K/V. */
Test(forward, a_step_without_logit_rows_completes) {
    fwd_env e;
    env_open(&e, 1);
    make_block_tables();
    float *alone = malloc(sizeof(float) * (size_t)e.n_vocab * 4);
    run_alone(&e, 0, alone);
    int32_t pos[8], seq[8] = {0}, seq_len = 8, row = 0;
    for (int i = 0; i < 8; i++) pos[i] = i;
    dev_step prefill = {8, seq_tokens[0], pos, seq, 1, &seq_len, block_tables[0], FWD_MAX_BLOCKS, 0, &row, 0, NULL};
    const dev_sample_vocab vocab = {e.n_vocab, NULL, 0};
    cr_assert_eq(model_forward_sample(e.model, e.kv, &prefill, &vocab, NULL, NULL), SP_OK, "%s", sp_last_error());
    int32_t p = 8;
    seq_len = 9;
    float *logits = malloc(sizeof(float) * (size_t)e.n_vocab);
    dev_step one = {1, &seq_tokens[0][8], &p, seq, 1, &seq_len, block_tables[0], FWD_MAX_BLOCKS, 1, &row, 0, NULL};
    cr_assert_eq(model_forward(e.model, e.kv, &one, logits), SP_OK);
    cr_assert(memcmp(logits, alone, sizeof(float) * (size_t)e.n_vocab) == 0, "the decode after it differs");
    free(logits);
    free(alone);
    env_close(&e);
}

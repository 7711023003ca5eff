/* test_cuda_attention.c: the CUDA backend's attention (gpu/cuda/cuda_attention.cu)
 * against the CPU backend's, on paged KV pools that earlier prefill steps filled.
 * Built always; where no usable GPU is present (or the build has no CUDA backend) every
 * test says so in one line and passes.
 *
 * Each case is a step (tokens with their sequence and position) over sequences of
 * given lengths. Both backends get the same inputs the only way the device interface
 * offers: random F16-exact tables as weights (dev_weight_init), gathered into Q, K and
 * V activations by dev_embed with the token id of a (sequence, position) as the row.
 * Positions before the step are written by prefill steps of up to FILL_TOKENS tokens,
 * then the step writes its own K and V and runs attention. Blocks are handed out in a
 * shuffled order, so that the pages of a sequence are not contiguous. The comparison
 * is the relative error ||gpu - cpu|| / ||cpu|| over the whole output and over each
 * (token, head) row, plus no NaN.
 *
 * The cases reach each of the CUDA kernel's paths: the split decode path (64 sequences
 * of 1 to 3000 positions with GQA, and 4 sequences, which split on any GPU), the
 * tiled path with uniform and mixed tiles (a 200-token chunk after 500 positions
 * between decode rows of other sequences), head widths that are not a multiple of 32
 * or are odd (the rows path only), and the smallest steps.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "tests/unit/gpu/gpu_test.h"
#include "quant/quant.h"

enum { TABLE_ROWS = 2048, FILL_TOKENS = 512, MAX_SEQS = 64 };

/* The pools' element format of the cases run next (the quantized-KV tests set it). */
static sp_kv_type case_kv_type = SP_KV_F16;

/* One attention step over sequences of given lengths. A sequence's tokens in the step
 * are its last positions; the positions before its first one in the step are written
 * by earlier prefill steps. */
typedef struct attn_case {
    const char *name;
    int n_heads, n_kv_heads, head_dim, block_size;
    int layer;       /* of layer + 1 layers */
    int table_width; /* max_blocks; 0: just what the longest sequence needs */
    int n_seqs;
    const int32_t *seq_len; /* (S) each sequence's length once the step is written */
    int n_tokens;
    const int32_t *seq; /* (T) */
    const int32_t *pos; /* (T) */
} attn_case;

/* The table row (token id) of position pos of sequence seq: neighbours differ. */
static int32_t row_of(int32_t seq, int32_t pos) {
    return (int32_t)(((uint32_t)seq * 7919u + (uint32_t)pos * 131u) % TABLE_ROWS);
}

/* The step's block table and pool size: every sequence gets ceil(len / B) blocks, in
 * a shuffled order over the pool. */
typedef struct attn_layout {
    int32_t n_blocks, max_blocks;
    int32_t *table; /* (S, max_blocks) */
} attn_layout;

static attn_layout layout_make(const attn_case *c) {
    attn_layout lay = {0, 0, NULL};
    int32_t widest = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        const int32_t used = (c->seq_len[s] + c->block_size - 1) / c->block_size;
        lay.n_blocks += used;
        if (used > widest) widest = used;
    }
    lay.max_blocks = c->table_width > widest ? c->table_width : widest;
    int32_t *order = malloc(sizeof(int32_t) * (size_t)lay.n_blocks);
    lay.table = calloc((size_t)c->n_seqs * (size_t)lay.max_blocks, sizeof(int32_t));
    cr_assert(order && lay.table);
    for (int32_t b = 0; b < lay.n_blocks; b++) order[b] = b;
    for (int32_t b = lay.n_blocks - 1; b > 0; b--) { /* Fisher-Yates */
        const int32_t other = (int32_t)((gpu_test_next() >> 33) % (uint64_t)(b + 1));
        const int32_t tmp = order[b];
        order[b] = order[other];
        order[other] = tmp;
    }
    int32_t next = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        const int32_t used = (c->seq_len[s] + c->block_size - 1) / c->block_size;
        for (int32_t b = 0; b < used; b++) lay.table[(size_t)s * (size_t)lay.max_blocks + (size_t)b] = order[next++];
    }
    free(order);
    return lay;
}

/* The random tables every backend reads its inputs from. */
typedef struct attn_tables {
    float *q; /* (TABLE_ROWS, H*Dh) */
    float *k; /* (TABLE_ROWS, Hk*Dh) */
    float *v; /* (TABLE_ROWS, Hk*Dh) */
} attn_tables;

/* A prefill step being gathered: up to FILL_TOKENS positions written before the step. */
typedef struct fill_batch {
    dev_backend *dev;
    dev_kv *kv;
    const attn_case *c;
    const attn_layout *lay;
    const dev_tensor *tk, *tv;
    void *ak, *av; /* (FILL_TOKENS, Hk*Dh) activations */
    int n;
    int32_t tokens[FILL_TOKENS], pos[FILL_TOKENS], seq[FILL_TOKENS];
} fill_batch;

/* Writes the gathered positions' K and V (rows of the tables) and empties the batch. */
static void fill_flush(fill_batch *f) {
    const attn_case *c = f->c;
    dev_step step = {f->n,          f->tokens,          f->pos, f->seq, c->n_seqs, c->seq_len,
                     f->lay->table, f->lay->max_blocks, 0,      NULL,   0,         NULL};
    const dev_step *step_dev;
    cr_assert_eq(dev_step_begin(f->dev, &step, TABLE_ROWS, f->kv, &step_dev), SP_OK, "%s", sp_last_error());
    dev_embed(f->dev, f->ak, f->tk, step_dev);
    dev_embed(f->dev, f->av, f->tv, step_dev);
    dev_kv_write(f->dev, f->kv, c->layer, f->ak, f->av, step_dev);
    f->n = 0;
}

/* Runs case c on one backend and returns its attention output (T, H*Dh); caller frees. */
static float *attention_run(sp_device kind, const attn_case *c, const attn_layout *lay, const attn_tables *tab) {
    const int64_t q_width = (int64_t)c->n_heads * c->head_dim, kv_width = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t max_tokens = c->n_tokens > FILL_TOKENS ? c->n_tokens : FILL_TOKENS;
    dev_backend *dev;
    dev_options o = {.kind = kind, .n_threads = 4};
    cr_assert_eq(dev_create(&o, &dev), SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_reserve(dev, max_tokens, q_width), SP_OK, "%s", sp_last_error());
    dev_kv_shape shape = {.n_layers = c->layer + 1,
                          .n_blocks = lay->n_blocks,
                          .block_size = c->block_size,
                          .n_kv_heads = c->n_kv_heads,
                          .head_dim = c->head_dim,
                          .kv_type = case_kv_type};
    dev_kv *kv;
    cr_assert_eq(dev_kv_create(dev, &shape, &kv), SP_OK, "%s", sp_last_error());
    dev_tensor tq, tk, tv;
    cr_assert_eq(dev_weight_init(dev, &tq, QUANT_F32, q_width, TABLE_ROWS, tab->q,
                                 sizeof(float) * (size_t)(TABLE_ROWS * q_width)),
                 SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_weight_init(dev, &tk, QUANT_F32, kv_width, TABLE_ROWS, tab->k,
                                 sizeof(float) * (size_t)(TABLE_ROWS * kv_width)),
                 SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_weight_init(dev, &tv, QUANT_F32, kv_width, TABLE_ROWS, tab->v,
                                 sizeof(float) * (size_t)(TABLE_ROWS * kv_width)),
                 SP_OK, "%s", sp_last_error());
    void *aq, *ak, *av, *aout;
    cr_assert_eq(dev_arena_alloc(dev, sizeof(float) * (size_t)(max_tokens * q_width), &aq), SP_OK);
    cr_assert_eq(dev_arena_alloc(dev, sizeof(float) * (size_t)(max_tokens * kv_width), &ak), SP_OK);
    cr_assert_eq(dev_arena_alloc(dev, sizeof(float) * (size_t)(max_tokens * kv_width), &av), SP_OK);
    cr_assert_eq(dev_arena_alloc(dev, sizeof(float) * (size_t)(max_tokens * q_width), &aout), SP_OK);

    /* the positions before the step, in prefill steps of up to FILL_TOKENS tokens */
    int32_t before[MAX_SEQS];
    cr_assert(c->n_seqs <= MAX_SEQS);
    for (int s = 0; s < c->n_seqs; s++) before[s] = c->seq_len[s];
    for (int t = 0; t < c->n_tokens; t++)
        if (c->pos[t] < before[c->seq[t]]) before[c->seq[t]] = c->pos[t];
    fill_batch fill = {.dev = dev, .kv = kv, .c = c, .lay = lay, .tk = &tk, .tv = &tv, .ak = ak, .av = av};
    for (int s = 0; s < c->n_seqs; s++)
        for (int32_t p = 0; p < before[s]; p++) {
            fill.tokens[fill.n] = row_of(s, p);
            fill.pos[fill.n] = p;
            fill.seq[fill.n] = s;
            if (++fill.n == FILL_TOKENS) fill_flush(&fill);
        }
    if (fill.n > 0) fill_flush(&fill);

    /* the step: its own K and V, then attention */
    int32_t *step_tokens = malloc(sizeof(int32_t) * (size_t)c->n_tokens);
    cr_assert_not_null(step_tokens);
    for (int t = 0; t < c->n_tokens; t++) step_tokens[t] = row_of(c->seq[t], c->pos[t]);
    dev_step step = {c->n_tokens, step_tokens,     c->pos, c->seq, c->n_seqs, c->seq_len,
                     lay->table,  lay->max_blocks, 0,      NULL,   0,         NULL};
    const dev_step *step_dev;
    cr_assert_eq(dev_step_begin(dev, &step, TABLE_ROWS, kv, &step_dev), SP_OK, "%s", sp_last_error());
    dev_embed(dev, aq, &tq, step_dev);
    dev_embed(dev, ak, &tk, step_dev);
    dev_embed(dev, av, &tv, step_dev);
    dev_kv_write(dev, kv, c->layer, ak, av, step_dev);
    dev_attention(dev, aout, aq, kv, c->layer, step_dev, c->n_heads, 1.0f / sqrtf((float)c->head_dim));
    float *out = malloc(sizeof(float) * (size_t)(c->n_tokens * q_width));
    cr_assert_not_null(out);
    cr_assert_eq(dev_copy_to_host(dev, out, aout, sizeof(float) * (size_t)(c->n_tokens * q_width)), SP_OK, "%s",
                 sp_last_error());
    free(step_tokens);
    dev_kv_destroy(dev, kv);
    dev_destroy(dev);
    return out;
}

/* Runs c on both backends and compares: the whole output within 2e-3 (the CPU rounds
 * probabilities to F16, the GPU keeps them in float), every (token, head) row within
 * 1e-2. */
static void check_case(const attn_case *c) {
    const int64_t q_width = (int64_t)c->n_heads * c->head_dim, kv_width = (int64_t)c->n_kv_heads * c->head_dim;
    attn_tables tab = {random_f16(TABLE_ROWS * q_width, 2.0f), random_f16(TABLE_ROWS * kv_width, 1.0f),
                       random_f16(TABLE_ROWS * kv_width, 1.0f)};
    attn_layout lay = layout_make(c);
    float *ref = attention_run(SP_DEVICE_CPU, c, &lay, &tab);
    float *got = attention_run(SP_DEVICE_CUDA, c, &lay, &tab);
    /* quantized pools: the CPU dots a Q8_0 query with K, the GPU an F16 one */
    const bool quantized = case_kv_type != SP_KV_F16;
    const double e = rel_error(got, ref, c->n_tokens * q_width);
    cr_expect(e < (quantized ? 1e-2 : 2e-3), "%s (kv %s): relative error %.2e", c->name, sp_kv_type_name(case_kv_type),
              e);
    double worst = 0;
    int worst_token = 0, worst_head = 0;
    for (int t = 0; t < c->n_tokens; t++)
        for (int h = 0; h < c->n_heads; h++) {
            const int64_t at = (int64_t)t * q_width + (int64_t)h * c->head_dim;
            const double row = rel_error(got + at, ref + at, c->head_dim);
            if (row > worst) worst = row, worst_token = t, worst_head = h;
        }
    cr_expect(worst < (quantized ? 3e-2 : 1e-2), "%s: token %d (sequence %d, position %d) head %d: relative error %.2e",
              c->name, worst_token, c->seq[worst_token], c->pos[worst_token], worst_head, worst);
    free(ref), free(got), free(tab.q), free(tab.k), free(tab.v), free(lay.table);
}

/* ---- decode steps: one token per sequence, the split path ---- */

/* 64 sequences: every eighth long (3000 down to 900 positions), the rest 1 to 400. */
static void decode_64(int head_dim) {
    int32_t seq_len[64], seq[64], pos[64];
    for (int s = 0; s < 64; s++) {
        seq_len[s] = s == 0 ? 1 : s % 8 == 7 ? 3000 - s / 8 * 300 : 1 + (s * 53) % 400;
        seq[s] = s; /* token t in sequence t: a decode batch, as the scheduler builds them */
        pos[s] = seq_len[s] - 1;
    }
    attn_case c = {"decode, 64 sequences", 32, 8, head_dim, 16, 0, 0, 64, seq_len, 64, seq, pos};
    check_case(&c);
}

Test(cuda_attention, decode_of_64_sequences_of_very_different_lengths_matches_the_cpu) {
    skip_without_gpu();
    decode_64(128);
    decode_64(64);
}

Test(cuda_attention, decode_of_a_few_long_sequences_matches_the_cpu) {
    skip_without_gpu();
    /* few rows: this splits on any GPU */
    int32_t seq_len[4] = {3000, 1, 17, 1200}, seq[4] = {0, 1, 2, 3}, pos[4] = {2999, 0, 16, 1199};
    attn_case c = {"decode, 4 sequences", 32, 8, 128, 16, 1, 0, 4, seq_len, 4, seq, pos};
    check_case(&c);
    attn_case wide = {"decode, 4 sequences, 4 heads of width 256", 4, 1, 256, 32, 0, 0, 4, seq_len, 4, seq, pos};
    check_case(&wide);
}

/* ---- prefill: the tiled path, uniform and mixed tiles ---- */

/* Sequence 0: a 200-token chunk at positions 500..699 (500 earlier positions); decode
 * rows of sequences 1..5 before it (step tokens 0..2) and after it (203, 204). Tiles
 * of 16: tokens 0..15 mixed, 16..191 uniform, 192..204 mixed. */
static void prefill_with_decode_rows(const char *name, int n_heads, int n_kv_heads, int head_dim, int block_size) {
    enum { CHUNK = 200, EARLIER = 500, T = CHUNK + 5 };
    int32_t seq_len[6] = {EARLIER + CHUNK, 1, 33, 900, 257, 64};
    int32_t seq[T], pos[T];
    const int32_t decode_before[3] = {1, 2, 3}, decode_after[2] = {4, 5};
    int t = 0;
    for (int i = 0; i < 3; i++, t++) seq[t] = decode_before[i], pos[t] = seq_len[seq[t]] - 1;
    for (int i = 0; i < CHUNK; i++, t++) seq[t] = 0, pos[t] = EARLIER + i;
    for (int i = 0; i < 2; i++, t++) seq[t] = decode_after[i], pos[t] = seq_len[seq[t]] - 1;
    attn_case c = {name, n_heads, n_kv_heads, head_dim, block_size, 1, 0, 6, seq_len, T, seq, pos};
    check_case(&c);
}

Test(cuda_attention, prefill_chunk_beside_decode_rows_matches_the_cpu) {
    skip_without_gpu();
    prefill_with_decode_rows("prefill, GQA 32/8, width 128", 32, 8, 128, 16);
    prefill_with_decode_rows("prefill, GQA 8/2, width 80", 8, 2, 80, 16);
    prefill_with_decode_rows("prefill, 4 heads of width 256", 4, 4, 256, 32);
}

Test(cuda_attention, head_widths_that_are_not_a_multiple_of_32_match_the_cpu) {
    skip_without_gpu();
    prefill_with_decode_rows("prefill, width 50 (an odd number of half2 per K row)", 6, 2, 50, 16);
    prefill_with_decode_rows("prefill, width 33 (odd: the rows path)", 6, 3, 33, 16);
}

/* Head widths 64 and 128 take the tensor-core tiles (cuda_attention_mma.cu): a block
 * holds up to 4 query heads of one KV head, so groups of 3 (smollm2), 7 (two blocks a
 * KV head, the second with 3 warps) and 1 (no GQA) each shape the grid differently. */
Test(cuda_attention, prefill_on_tensor_cores_matches_the_cpu_for_every_head_grouping) {
    skip_without_gpu();
    prefill_with_decode_rows("prefill, GQA 9/3, width 64", 9, 3, 64, 16);
    prefill_with_decode_rows("prefill, GQA 28/4, width 128", 28, 4, 128, 16);
    prefill_with_decode_rows("prefill, 4 heads of width 64, no GQA", 4, 4, 64, 32);
}

/* A whole prompt from position 0 in one step: every tile of 16 queries reads K/V tiles
 * of 64 positions up to its own last one, the causal mask cutting through the last. */
Test(cuda_attention, a_whole_prompt_on_tensor_cores_matches_the_cpu) {
    skip_without_gpu();
    enum { N = 1000 };
    static int32_t seq[N], pos[N];
    for (int i = 0; i < N; i++) seq[i] = 0, pos[i] = i;
    int32_t seq_len[1] = {N};
    attn_case c = {"a prompt of 1000 tokens, GQA 8/2, width 128", 8, 2, 128, 16, 0, 0, 1, seq_len, N, seq, pos};
    check_case(&c);
    attn_case narrow = {"a prompt of 1000 tokens, GQA 6/2, width 64", 6, 2, 64, 16, 0, 0, 1, seq_len, N, seq, pos};
    check_case(&narrow);
}

/* ---- the smallest steps ---- */

Test(cuda_attention, a_single_position_matches_the_cpu) {
    skip_without_gpu();
    /* one token at position 0, with a block table wide enough that the split path makes
     * many splits: all but the first are empty */
    int32_t one_len[1] = {1}, one_seq[1] = {0}, one_pos[1] = {0};
    attn_case one = {"one token at position 0", 32, 8, 128, 16, 0, 256, 1, one_len, 1, one_seq, one_pos};
    check_case(&one);
    /* a two-token prompt: the tiled path with one short tile */
    int32_t two_len[1] = {2}, two_seq[2] = {0, 0}, two_pos[2] = {0, 1};
    attn_case two = {"a two-token prompt", 32, 8, 128, 16, 0, 0, 1, two_len, 2, two_seq, two_pos};
    check_case(&two);
}

/* ---- quantized pools (Q8_0, Q4_0): every path reads the blocks ---- */

Test(cuda_attention, quantized_pools_match_the_cpu_on_every_path) {
    skip_without_gpu();
    const sp_kv_type types[] = {SP_KV_Q8_0, SP_KV_Q4_0};
    for (int i = 0; i < 2; i++) {
        case_kv_type = types[i];
        decode_64(64);
        prefill_with_decode_rows("prefill, GQA 9/3, width 64", 9, 3, 64, 16);
        prefill_with_decode_rows("prefill, GQA 8/2, width 96 (float tiles)", 8, 2, 96, 16);
        int32_t seq_len[4] = {3000, 1, 17, 1200}, seq[4] = {0, 1, 2, 3}, pos[4] = {2999, 0, 16, 1199};
        attn_case c = {"decode, 4 sequences, width 128", 32, 8, 128, 16, 1, 0, 4, seq_len, 4, seq, pos};
        check_case(&c);
    }
    case_kv_type = SP_KV_F16;
}

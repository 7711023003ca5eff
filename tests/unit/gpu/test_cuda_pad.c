/* test_cuda_pad.c: how the CUDA backend stages a step and which steps it pads to a graph
 * bucket (gpu/cuda/cuda_pad.h). Plain host logic, so it runs here without a GPU: decode
 * batches and speculative verify steps (a token and its drafts per sequence, every row
 * with logits) are padded, prefill chunks and steps whose sequences are not one run
 * each, in order, are not; and the staged arrays hold the step, the padding and the
 * scratch block where the layout says. */
#include <criterion/criterion.h>

#include "gpu/cuda/cuda_pad.h"

enum { MAX_T = CUDA_GRAPH_MAX_TOKENS + 8, BLOCK = 4, SCRATCH = 999, MAX_BLOCKS = 16 };

/* A step of n_seqs sequences of run[q] tokens each, in order; logits on every row when
 * all_logits, else on each sequence's last row. Sequence q holds 3 + its run tokens, in
 * blocks 100q, 100q + 1, ... */
typedef struct test_step {
    int32_t tokens[MAX_T], pos[MAX_T], seq[MAX_T], seq_len[MAX_T], table[MAX_T * MAX_BLOCKS], rows[MAX_T];
    dev_step step;
} test_step;

static void make_step(test_step *ts, const int32_t *run, int32_t n_seqs, bool all_logits) {
    int32_t t = 0, n_logits = 0;
    for (int32_t q = 0; q < n_seqs; q++) {
        for (int32_t j = 0; j < run[q]; j++, t++) {
            ts->tokens[t] = 10 * q + j + 1;
            ts->pos[t] = 3 + j;
            ts->seq[t] = q;
            if (all_logits || j == run[q] - 1) ts->rows[n_logits++] = t;
        }
        ts->seq_len[q] = 3 + run[q];
        for (int32_t b = 0; b < MAX_BLOCKS; b++) ts->table[q * MAX_BLOCKS + b] = 100 * q + b;
    }
    ts->step = (dev_step){.n_tokens = t,
                          .tokens = ts->tokens,
                          .pos = ts->pos,
                          .seq = ts->seq,
                          .n_seqs = n_seqs,
                          .seq_len = ts->seq_len,
                          .block_table = ts->table,
                          .max_blocks = MAX_BLOCKS,
                          .n_logits = n_logits,
                          .logit_rows = ts->rows};
}

static bool padded(const int32_t *run, int32_t n_seqs, bool all_logits) {
    static test_step ts;
    make_step(&ts, run, n_seqs, all_logits);
    return cuda_pad_short_runs(&ts.step);
}

Test(cuda_pad, buckets_are_powers_of_two_then_multiples_of_eight) {
    const int32_t t[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 255, 256};
    const int32_t want[] = {1, 2, 4, 4, 8, 8, 16, 16, 24, 256, 256};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        cr_expect_eq(cuda_pad_tokens(t[i]), want[i], "%d tokens: bucket %d, want %d", t[i], cuda_pad_tokens(t[i]),
                     want[i]);
    cr_expect_eq(cuda_pad_width(5), 8);
    cr_expect_eq(cuda_pad_width(1), 1);
}

Test(cuda_pad, decode_batches_and_verify_steps_are_padded) {
    const int32_t decode[] = {1, 1, 1, 1, 1};
    cr_expect(padded(decode, 5, true), "a decode batch");
    const int32_t verify[] = {9, 1, 4, 17}; /* k = 8, none, 3, 16 drafts */
    cr_expect(padded(verify, 4, true), "a verify step");
    const int32_t one[] = {1};
    cr_expect(padded(one, 1, true), "a single decode token");
}

Test(cuda_pad, prefill_chunks_and_disordered_steps_run_op_by_op) {
    const int32_t chunk[] = {1, 6};
    cr_expect_not(padded(chunk, 2, false), "a prefill chunk (logits on its last row) beside a decode token");
    const int32_t chunk_alone[] = {12};
    cr_expect_not(padded(chunk_alone, 1, false), "a prefill chunk");
    const int32_t too_long[] = {1, CUDA_GRAPH_MAX_RUN + 1};
    cr_expect_not(padded(too_long, 2, true), "a run past CUDA_GRAPH_MAX_RUN");
    int32_t wide[CUDA_GRAPH_MAX_TOKENS + 1];
    for (int32_t q = 0; q <= CUDA_GRAPH_MAX_TOKENS; q++) wide[q] = 1;
    cr_expect_not(padded(wide, CUDA_GRAPH_MAX_TOKENS + 1, true), "more tokens than a graph step holds");

    static test_step ts;
    const int32_t three[] = {1, 1, 1};
    const int32_t swapped[] = {1, 0, 2}, split[] = {0, 1, 0}, late[] = {1, 2, 2};
    make_step(&ts, three, 3, true);
    memcpy(ts.seq, swapped, sizeof swapped);
    cr_expect_not(cuda_pad_short_runs(&ts.step), "sequences out of row order");
    memcpy(ts.seq, split, sizeof split);
    cr_expect_not(cuda_pad_short_runs(&ts.step), "a sequence in two runs");
    memcpy(ts.seq, late, sizeof late);
    cr_expect_not(cuda_pad_short_runs(&ts.step), "not starting at sequence 0");
    make_step(&ts, three, 3, true);
    ts.step.n_seqs = 4;
    cr_expect_not(cuda_pad_short_runs(&ts.step), "a sequence without tokens");
}

/* Stages ts with max_tokens rows of activations; checks every array against the step
 * and the padding rules, and returns the layout. */
static cuda_pad_layout check_stage(const test_step *ts, int64_t max_tokens) {
    const dev_step *s = &ts->step;
    const cuda_pad_layout l = cuda_pad_plan(s, BLOCK, max_tokens);
    int32_t *h = malloc(sizeof(int32_t) * (l.total + 1));
    cr_assert(h);
    h[l.total] = -12345; /* nothing past the layout is written */
    cuda_pad_stage(s, &l, BLOCK, SCRATCH, h);
    cr_expect_eq(h[l.total], -12345);
    cr_expect_eq(l.total, l.hidden_rows + (size_t)s->n_hidden);
    for (int32_t t = 0; t < l.tokens; t++) {
        const bool real = t < s->n_tokens;
        cr_expect_eq(h[t], real ? s->tokens[t] : 0, "token %d", t);
        cr_expect_eq(h[l.pos + t], real ? s->pos[t] : 0, "pos %d", t);
        cr_expect_eq(h[l.seq + t], real ? s->seq[t] : s->n_seqs + (t - s->n_tokens), "seq %d", t);
    }
    for (int32_t q = 0; q < l.seqs; q++) {
        const bool real = q < s->n_seqs;
        cr_expect_eq(h[l.seq_len + q], real ? s->seq_len[q] : 1, "seq_len %d", q);
        const int32_t used = real ? cuda_pad_blocks_used(s->seq_len[q], BLOCK) : 0;
        for (int32_t b = 0; b < l.width; b++)
            cr_expect_eq(h[l.table + (size_t)q * l.width + b],
                         b < used ? s->block_table[q * s->max_blocks + b] : SCRATCH, "table[%d][%d]", q, b);
    }
    for (int32_t i = 0; i < s->n_logits; i++) cr_expect_eq(h[l.logit_rows + i], s->logit_rows[i]);
    free(h);
    return l;
}

Test(cuda_pad, a_verify_step_is_staged_as_a_decode_bucket) {
    static test_step ts;
    const int32_t verify[] = {3, 1, 2}; /* 6 tokens, 3 sequences of 6, 4 and 5 tokens (2, 1, 2 blocks) */
    make_step(&ts, verify, 3, true);
    const cuda_pad_layout l = check_stage(&ts, 64);
    cr_expect(l.padded);
    cr_expect_eq(l.tokens, 8);
    cr_expect_eq(l.seqs, 8, "as many sequences as tokens: the padding's, then two without a token");
    cr_expect_eq(l.width, 2);
}

Test(cuda_pad, a_decode_batch_pads_as_before_and_a_chunk_is_staged_as_it_is) {
    static test_step ts;
    const int32_t decode[] = {1, 1, 1, 1, 1};
    make_step(&ts, decode, 5, true);
    cuda_pad_layout l = check_stage(&ts, 64);
    cr_expect(l.padded && l.tokens == 8 && l.seqs == 8 && l.width == 1);
    const int32_t chunk[] = {1, 14}; /* 15 tokens; the chunk's sequence then holds 17: 5 blocks */
    make_step(&ts, chunk, 2, false);
    l = check_stage(&ts, 64);
    cr_expect(!l.padded && l.tokens == 15 && l.seqs == 2 && l.width == 5);
}

Test(cuda_pad, the_bucket_never_passes_the_activations_rows) {
    static test_step ts;
    const int32_t decode[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    make_step(&ts, decode, 9, true);
    cr_expect_eq(check_stage(&ts, 12).tokens, 12, "9 tokens, bucket 16, 12 rows reserved");
    cr_expect_eq(check_stage(&ts, 4).tokens, 9, "never below the step's own tokens");
}

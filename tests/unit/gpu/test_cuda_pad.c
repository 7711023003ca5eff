/* test_cuda_pad.c: which steps the CUDA backend pads to a graph bucket (cuda_pad.h).
 * Plain host logic, so it runs here without a GPU: decode batches and speculative verify
 * steps (a token and its drafts per sequence) qualify, prefill chunks and steps whose
 * sequences are not one run each, in order, do not. */
#include <criterion/criterion.h>

#include "gpu/cuda/cuda_pad.h"

/* seq for n_seqs sequences of run[q] tokens each, in order; returns the token count. */
static int32_t runs(int32_t *seq, const int32_t *run, int32_t n_seqs) {
    int32_t t = 0;
    for (int32_t q = 0; q < n_seqs; q++)
        for (int32_t j = 0; j < run[q]; j++) seq[t++] = q;
    return t;
}

Test(cuda_pad, buckets_are_powers_of_two_then_multiples_of_eight) {
    const int32_t t[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 255, 256};
    const int32_t want[] = {1, 2, 4, 4, 8, 8, 16, 16, 24, 256, 256};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        cr_expect_eq(cuda_pad_tokens(t[i]), want[i], "%d tokens: bucket %d, want %d", t[i], cuda_pad_tokens(t[i]),
                     want[i]);
}

Test(cuda_pad, decode_batches_and_verify_steps_are_short_runs) {
    int32_t seq[CUDA_GRAPH_MAX_TOKENS];
    const int32_t decode[] = {1, 1, 1, 1, 1};
    cr_expect(cuda_pad_short_runs(seq, runs(seq, decode, 5), 5), "a decode batch");
    const int32_t verify[] = {9, 1, 4, 17}; /* k = 8, none, 3, 16 drafts */
    cr_expect(cuda_pad_short_runs(seq, runs(seq, verify, 4), 4), "a verify step");
    const int32_t one[] = {1};
    cr_expect(cuda_pad_short_runs(seq, runs(seq, one, 1), 1), "a single decode token");
    const int32_t longest[] = {CUDA_GRAPH_MAX_RUN, 1};
    cr_expect(cuda_pad_short_runs(seq, runs(seq, longest, 2), 2), "a run of CUDA_GRAPH_MAX_RUN");
}

Test(cuda_pad, prefill_chunks_and_disordered_steps_run_op_by_op) {
    int32_t seq[CUDA_GRAPH_MAX_TOKENS + 8];
    const int32_t chunk[] = {1, CUDA_GRAPH_MAX_RUN + 1};
    cr_expect_not(cuda_pad_short_runs(seq, runs(seq, chunk, 2), 2), "a run past CUDA_GRAPH_MAX_RUN (a prefill chunk)");
    int32_t wide[CUDA_GRAPH_MAX_TOKENS + 1];
    for (int32_t q = 0; q <= CUDA_GRAPH_MAX_TOKENS; q++) wide[q] = 1;
    cr_expect_not(cuda_pad_short_runs(seq, runs(seq, wide, CUDA_GRAPH_MAX_TOKENS + 1), CUDA_GRAPH_MAX_TOKENS + 1),
                  "more tokens than a graph step holds");
    const int32_t swapped[] = {1, 0, 2};
    cr_expect_not(cuda_pad_short_runs(swapped, 3, 3), "sequences out of row order");
    const int32_t split[] = {0, 1, 0};
    cr_expect_not(cuda_pad_short_runs(split, 3, 2), "a sequence in two runs");
    const int32_t gap[] = {0, 2};
    cr_expect_not(cuda_pad_short_runs(gap, 2, 3), "a sequence without tokens");
    const int32_t late[] = {1, 2};
    cr_expect_not(cuda_pad_short_runs(late, 2, 3), "not starting at sequence 0");
    const int32_t short_count[] = {0, 1};
    cr_expect_not(cuda_pad_short_runs(short_count, 2, 3), "fewer sequences used than the step has");
    cr_expect_not(cuda_pad_short_runs(seq, 0, 0), "an empty step");
}

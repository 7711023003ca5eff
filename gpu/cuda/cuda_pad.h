/* cuda_pad.h: which steps the CUDA backend pads to a graph bucket, and to what. Plain C
 * (host code, no CUDA types), so the CPU's unit tests check the decision
 * (tests/unit/gpu/test_cuda_pad.c) on machines without a GPU.
 *
 * A step can be replayed from a captured graph when every step of its bucket launches
 * the same kernels with the same shapes on the same buffers (cuda_graph.cu). The steps
 * that qualify are the short-run batches: each sequence's tokens are one run of
 * consecutive rows, sequences numbered 0, 1, ... in row order, no run longer than
 * CUDA_GRAPH_MAX_RUN. A decode batch is the case of runs of one; a speculative verify
 * step (each sequence's last token and its drafts) is the case of runs of 1 + k. Such a
 * step is padded to Tb = cuda_pad_tokens(T) tokens and Tb sequences: the real
 * sequences first, then one scratch sequence per padding token (cuda_step.cu), so the
 * shapes depend on Tb alone and attention takes the per-row kernels, whose grid is
 * (token, head) whatever the runs are. Longer runs (prefill chunks) run op by op, on
 * the tiled attention kernels.
 */
#ifndef SPINDLE_GPU_CUDA_PAD_H
#define SPINDLE_GPU_CUDA_PAD_H

#include <stdbool.h>
#include <stdint.h>

/* Steps of up to this many tokens may be padded; runs of up to CUDA_GRAPH_MAX_RUN tokens
 * per sequence (a decode token with up to 16 drafts, --spec-k's bound, fits; so does a
 * short prefill chunk); CUDA_GRAPH_CACHE captures are kept. */
enum { CUDA_GRAPH_MAX_TOKENS = 256, CUDA_GRAPH_MAX_RUN = 32, CUDA_GRAPH_CACHE = 64, CUDA_GRAPH_MAX_FAILURES = 3 };

/* T rounded up to its bucket: 1, 2, 4, 8, then multiples of 8 (little padding, few
 * buckets). */
static inline int32_t cuda_pad_tokens(int32_t t) {
    if (t > 8) return (t + 7) / 8 * 8;
    int32_t b = 1;
    while (b < t) b *= 2;
    return b;
}

/* Whether the step of n_tokens tokens (token t in sequence seq[t]) over n_seqs
 * sequences is a short-run batch (see above). */
static inline bool cuda_pad_short_runs(const int32_t *seq, int32_t n_tokens, int32_t n_seqs) {
    if (n_tokens < 1 || n_tokens > CUDA_GRAPH_MAX_TOKENS || seq[0] != 0) return false;
    int32_t run = 1;
    for (int32_t t = 1; t < n_tokens; t++) {
        if (seq[t] == seq[t - 1]) {
            if (++run > CUDA_GRAPH_MAX_RUN) return false;
        } else if (seq[t] == seq[t - 1] + 1) {
            run = 1;
        } else {
            return false;
        }
    }
    return seq[n_tokens - 1] == n_seqs - 1;
}

#endif

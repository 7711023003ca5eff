/* cuda_sample.cuh: dev_sample on the GPU, the contract between the host half
 * (cuda_sample.cu: checks, jobs, edits, rows left to sample/sample.c) and the kernel
 * (cuda_sample_kernel.cu).
 *
 * For each logit row, what sample/sample.c does
 * on the host (gpu/device.h, host_sample.c): log-probabilities of the raw logits, the
 * end-of-generation mask, logit bias and penalties, the draw. Only results come back.
 *
 * Legend: R = rows, V = vocabulary, S = ceil(V / 1024) (a thread's slice), k = top-k or
 * top_logprobs, G = tokens a row's mask, bias and penalties touch, E = their edits.
 *
 * DESIGN. The host makes each row a job: the draw's mode; u, drawn from the row's
 * splitmix64 state by sample_rng_uniform, sample/sample.c's own (so results[].rng is the host's; greedy
 * rows draw nothing); and the edits: every float operation of the EOG mask and
 * sample_apply_penalties, grouped by token in their order (mask, bias entries, the
 * repetition penalty once per distinct prompt or generated token, then - frequency *
 * count and - presence once per distinct generated token). One thread replays a token's
 * edits with the same IEEE operations (__fadd_rn & co, nothing contracted): the edited
 * logits are the CPU's bit for bit. A grammar row's allowed tokens go up as its bitset
 * (V / 8 bytes, no per-token host work). Rows with SORT_MAX < top_k < V go to
 * sample/sample.c on the host (their raw row copied back): the CPU backend's results, bit
 * for bit.
 *
 * One block of 1024 threads per job; thread t owns the slice [t*S, min((t+1)*S, V)), so
 * "in id order" is one block-wide exclusive scan of per-thread totals. In sample_next's
 * order:
 *   1. top_logprobs >= 0: log-sum-exp (max over non-NaN, then expf(l - max) summed in
 *      double); the k best raw logits by select_top_k; logprob = logit - lse.
 *   2. the edits, each token's raw logit kept for the chosen token's logprob; then a
 *      grammar row's bitset: every token it does not allow becomes -inf. The CPU masks
 *      before the penalties; -inf is a fixed point of every edit, so the order does not
 *      change a logit.
 *   3. max. Greedy, or max not finite: the argmax (lowest id among equals, 0 if all NaN).
 *      Else, with floor = min(max + logf(min_p), max) (logf on the host) or -inf:
 *      - top-k <= SORT_MAX: select_top_k sorts the k best in shared memory; thread 0 walks
 *        them as cut_top_k (top-p over the k in double, logit >= floor) and draws among
 *        the kept in rank order, as candidates_draw;
 *      - top-p: radix_select on fixed-point mass finds K*, the largest key whose tokens at
 *        or above it weigh at least target = top_p * total. Kept: the keys above K*, then
 *        K*'s tokens in id order while the mass before them is below target (they weigh
 *        the same: a division), if logit >= floor. That is the shortest rank-order prefix
 *        reaching target, which candidates_cut_by_mass finds;
 *      - min-p alone: logit >= floor; no cut: every token;
 *      the last three draw in id order, weights exp((l - max) / T): per-thread sums, a
 *      scan, and the thread whose range holds u * total walks its slice.
 *   4. token; logprob = its raw logit - lse.
 *
 * Ranking: a token's key is the order-preserving 32-bit image of its logit (-0 as +0,
 * which tie on the CPU too; NaN as 0, below -inf); rank order is key descending, then id
 * ascending (sample.c's ranks_before). radix_select fixes a key 8 bits at a time, high
 * first: 4 passes of a 256-bin histogram of the next digit over the tokens matching the
 * digits fixed so far, weighing tokens by count (top-k) or fixed-point mass (top-p).
 *
 * Determinism: a row's token depends on its logits, job and V only, not on other rows or
 * timing. No float atomics: histograms are integer (counts, or masses in units of 2^-40
 * in 64 bits: exact sums, whatever the order of the atomics), summed per warp
 * (__match_any_sync, __reduce_add_sync) before one shared atomic per digit; float and
 * double sums are fixed trees (shuffle butterflies, then one warp) over fixed slices.
 *
 * Numerics, where they differ from sample.c: CUDA's expf (2 ulp) for exp4, and for
 * libm's double exp in the log-sum-exp (~1e-7 relative); sums in another order
 * (log-sum-exp, draw totals); top-p masses in 2^-40 fixed point (each weight truncated
 * by < 1e-12). A token differs from the CPU's only where u or a running mass is within
 * ~1e-7 (relative) of a boundary. And top-p walks its kept tokens in id order where
 * sample.c walks its candidate list (bins above the cut in id order, then the cut's bin
 * in partition order): the same distribution, not the same token for the same u.
 * Everything else follows the CPU's order.
 *
 * Memory: one cudaMallocAsync on the backend's stream per call (sampling is never in a
 * graph capture) holds jobs, groups, edits and bitsets (one upload), the edited tokens'
 * raw logits, and the results (one download).
 */
#ifndef SP_CUDA_SAMPLE_CUH
#define SP_CUDA_SAMPLE_CUH

#include <stdint.h>

#include "gpu/cuda/cuda_internal.cuh"

enum {
    THREADS = 1024,
    WARPS = THREADS / 32,
    SORT_MAX = 2048, /* the largest top-k the GPU selects: a bitonic sort, a pair per thread */
    RADIX_BITS = 8,
    RADIX_BINS = 1 << RADIX_BITS,
    BINS_PER_LANE = RADIX_BINS / 32,
};

/* ---- a row as the host describes it to the kernel ---------------------------------- */

typedef enum sample_mode { MODE_GREEDY, MODE_ALL, MODE_MIN_P, MODE_TOP_P, MODE_TOP_K } sample_mode;

/* One float operation on one logit, as the EOG mask or sample_apply_penalties does it. */
typedef enum sample_edit_kind {
    EDIT_SET,   /* l = value (the EOG mask's -inf) */
    EDIT_ADD,   /* l += value (a logit bias) */
    EDIT_SUB,   /* l -= value (frequency * count, then presence) */
    EDIT_REPEAT /* l = l > 0 ? l / value : l * value (the repetition penalty) */
} sample_edit_kind;

typedef struct sample_edit {
    int32_t kind;
    float value;
} sample_edit;

/* The edits of one token, in the CPU's order; the groups of a row have distinct ids. */
typedef struct sample_group {
    int32_t id;
    int32_t first_edit; /* into the call's edits */
    int32_t n_edits;
} sample_group;

typedef struct sample_job {
    double u;    /* the draw in [0, 1) (not MODE_GREEDY) */
    int64_t row; /* which row of logits */
    int32_t mode;
    int32_t top_k; /* MODE_TOP_K: 1..SORT_MAX, below V */
    int32_t top_logprobs;
    int32_t first_group; /* into the call's groups (and raw values) */
    int32_t n_groups;
    float inv_t; /* 1 / temperature, as sample_token computes it */
    float top_p;
    float log_min_p; /* logf(min_p) when min_p_on */
    int32_t min_p_on;
    int64_t allowed_at; /* a grammar's bitset: its first word in the call's allowed words; -1: none */
} sample_job;

typedef struct sample_out {
    int32_t token;
    float logprob;
    sample_logprob_entry top[DEV_SAMPLE_MAX_TOP];
} sample_out;

/* Launches one block per job on the backend's stream: outs (n_jobs), raw (the call's
 * groups), logits (R, V) edited in place, jobs (n_jobs), groups, edits, the grammar
 * bitsets (ceil(V / 32) words per masked job), all on the device. False (the backend
 * faulted) when the launch fails. */
bool cuda__sample_launch(cuda_backend *cb, uint32_t n_jobs, sample_out *outs, float *raw, float *logits,
                         const sample_job *jobs, const sample_group *groups, const sample_edit *edits,
                         const uint32_t *allowed, int32_t n_vocab);

#endif

/* cuda_sample.cu: dev_sample on the GPU: for each logit row, what model/sample.c does
 * on the host (gpu/device.h, host_sample.c): log-probabilities of the raw logits, the
 * end-of-generation mask, logit bias and penalties, the draw. Only results come back.
 *
 * Legend: R = rows, V = vocabulary, S = ceil(V / 1024) (a thread's slice), k = top-k or
 * top_logprobs, G = tokens a row's mask, bias and penalties touch, E = their edits.
 *
 * DESIGN. The host makes each row a job: the draw's mode; u, drawn from the row's
 * splitmix64 state as sample.c's rng_uniform (so results[].rng is the host's; greedy
 * rows draw nothing); and the edits: every float operation of the EOG mask and
 * sample_apply_penalties, grouped by token in their order (mask, bias entries, the
 * repetition penalty once per distinct prompt or generated token, then - frequency *
 * count and - presence once per distinct generated token). One thread replays a token's
 * edits with the same IEEE operations (__fadd_rn & co, nothing contracted): the edited
 * logits are the CPU's bit for bit. Rows with SORT_MAX < top_k < V go to model/sample.c
 * on the host (their raw row copied back): the CPU backend's results, bit for bit.
 *
 * One block of 1024 threads per job; thread t owns the slice [t*S, min((t+1)*S, V)), so
 * "in id order" is one block-wide exclusive scan of per-thread totals. In sample_next's
 * order:
 *   1. top_logprobs >= 0: log-sum-exp (max over non-NaN, then expf(l - max) summed in
 *      double); the k best raw logits by select_top_k; logprob = logit - lse.
 *   2. the edits, each token's raw logit kept for the chosen token's logprob.
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
 * graph capture) holds jobs, groups and edits (one upload), the edited tokens' raw
 * logits, and the results (one download).
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "gpu/cuda/cuda_internal.cuh"

enum {
    THREADS = 1024,
    WARPS = THREADS / 32,
    SORT_MAX = 2048, /* the largest top-k the GPU selects: a bitonic sort, a pair per thread */
    RADIX_BITS = 8,
    RADIX_BINS = 1 << RADIX_BITS,
    BINS_PER_LANE = RADIX_BINS / 32,
};

static_assert(WARPS == 32, "block_reduce and block_exclusive_scan finish in one warp of 32 lanes");
static_assert(SORT_MAX <= 2 * THREADS, "bitonic_sort_desc takes one pair per thread");

#define FULL_MASK 0xffffffffu
/* A top-p weight (in [0, 1]) as a multiple of 2^-40: V < 2^24 of them sum below 2^64. */
#define MASS_ONE 1099511627776.0f

typedef unsigned long long u64;

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
} sample_job;

typedef struct sample_out {
    int32_t token;
    float logprob;
    sample_logprob_entry top[DEV_SAMPLE_MAX_TOP];
} sample_out;

/* ---- device helpers ------------------------------------------------------------------ */

typedef struct sample_shared {
    u64 sort[SORT_MAX];    /* candidates: rank key << 32 | (2^32 - 1 - id), best first once sorted */
    double mass[SORT_MAX]; /* the candidates' weights */
    u64 hist[RADIX_BINS];  /* radix_select's histogram of one digit */
    double red_d[WARPS + 1];
    u64 red_u[WARPS + 1];
    float red_f[WARPS + 1];
    int red_i[WARPS + 1];
    uint32_t sel_key; /* radix_select's broadcasts */
    u64 sel_above, sel_need;
    int32_t token, n_keep;
    float token_raw;
} sample_shared;

/* One thread's part of the row: [begin, end), and len = S, the same for every thread
 * (loops that use warp intrinsics run len times in every lane). */
typedef struct row_slice {
    int32_t begin, end, len;
} row_slice;

/* Order-preserving key: larger logit, larger key; -0 as +0; NaN 0, below -inf (0x007fffff). */
__device__ static inline uint32_t rank_key(float l) {
    if (isnan(l)) return 0u;
    const uint32_t u = l == 0.0f ? 0u : __float_as_uint(l);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The logit of a key (NaN for 0; +0 for a zero). */
__device__ static inline float key_logit(uint32_t key) {
    if (key == 0u) return __uint_as_float(0x7fc00000u);
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

/* A candidate sorts as a 64-bit integer, descending: key first, then the lower id. */
__device__ static inline u64 candidate_make(uint32_t key, int32_t id) {
    return ((u64)key << 32) | (u64)(0xffffffffu - (uint32_t)id);
}
__device__ static inline uint32_t candidate_key(u64 c) {
    return (uint32_t)(c >> 32);
}
__device__ static inline int32_t candidate_id(u64 c) {
    return (int32_t)(0xffffffffu - (uint32_t)c);
}

/* exp((l - max) * inv_t) where sample.c's exp4 gives a weight: 0 below -87, for -inf and NaN. */
__device__ static inline float draw_weight(float l, float max, float inv_t) {
    const float x = __fmul_rn(__fsub_rn(l, max), inv_t);
    return x >= -87.0f ? expf(x) : 0.0f;
}

/* The weight at temperature 1 (top-p's mass) in fixed point; l <= max, so at most 2^40. */
__device__ static inline u64 mass_fixed(float l, float max) {
    return __float2ull_rz(__fmul_rn(draw_weight(l, max, 1.0f), MASS_ONE));
}

/* top_p * total rounded up, within [1, total]: a mass before a token is below the
 * target exactly when it is below this integer. */
__device__ static inline u64 mass_target(float top_p, u64 total) {
    const double t = ceil((double)top_p * (double)total);
    if (!(t >= 1.0)) return 1; /* an unvalidated top_p <= 0 keeps the first token, as sample.c */
    if (t >= (double)total) return total;
    return (u64)t;
}

__device__ static inline float edit_apply(float v, sample_edit e) {
    switch (e.kind) {
    case EDIT_SET: return e.value;
    case EDIT_ADD: return __fadd_rn(v, e.value);
    case EDIT_SUB: return __fsub_rn(v, e.value);
    default: return v > 0.0f ? __fdiv_rn(v, e.value) : __fmul_rn(v, e.value);
    }
}

/* The block's reduction of v, in a fixed tree (butterflies within warps, then warp 0):
 * every thread gets the same value on every run. Called by all threads. */
template <typename T, typename Op> __device__ static T block_reduce(T v, T *scratch, Op op) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(FULL_MASK, v, o));
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = scratch[lane];
        for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(FULL_MASK, v, o));
        if (lane == 0) scratch[WARPS] = v;
    }
    __syncthreads();
    v = scratch[WARPS];
    __syncthreads(); /* scratch is free for the next call */
    return v;
}

/* The sum of v over the threads before this one (in thread order, so in id order of
 * the slices), and *total over all, in a fixed order. Called by all threads. */
template <typename T> __device__ static T block_exclusive_scan(T v, T *scratch, T *total) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    T incl = v;
    for (int o = 1; o < 32; o <<= 1) {
        const T t = __shfl_up_sync(FULL_MASK, incl, o);
        if (lane >= o) incl = t + incl;
    }
    T excl = __shfl_up_sync(FULL_MASK, incl, 1);
    if (lane == 0) excl = T(0);
    if (lane == 31) scratch[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        T w = scratch[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const T t = __shfl_up_sync(FULL_MASK, w, o);
            if (lane >= o) w = t + w;
        }
        T before = __shfl_up_sync(FULL_MASK, w, 1);
        if (lane == 0) before = T(0);
        scratch[lane] = before; /* each lane rewrites only the entry it read */
        if (lane == 31) scratch[WARPS] = w;
    }
    __syncthreads();
    const T r = scratch[warp] + excl;
    *total = scratch[WARPS];
    __syncthreads();
    return r;
}

/* The largest non-NaN logit (-inf when there is none): sample.c's logits_max. */
__device__ static float row_max(sample_shared &sh, const float *row, row_slice s) {
    float m = -INFINITY;
    for (int32_t i = s.begin; i < s.end; i++) m = fmaxf(m, row[i]);
    return block_reduce(m, sh.red_f, [](float a, float b) { return fmaxf(a, b); });
}

/* sample_argmax: the lowest id whose logit equals max; 0 when all are NaN. */
__device__ static int32_t row_argmax(sample_shared &sh, const float *row, row_slice s, float max) {
    int first = INT_MAX;
    for (int32_t i = s.begin; i < s.end; i++)
        if (row[i] == max) {
            first = i;
            break;
        }
    first = block_reduce(first, sh.red_i, [](int a, int b) { return a < b ? a : b; });
    return first == INT_MAX ? 0 : first;
}

/* Finds the cut key K with above < need <= above + (weight of the tokens of key K), where
 * above = the weight of the tokens whose key is above K: the key of the need-th token in
 * rank order, counting each token by its weight (1 for counts; mass_fixed for MASS, where
 * need = mass_target(top_p, total) is found in the first pass and tokens of weight 0
 * take no part). The weights are integers, so the invariant above < need <= above +
 * (weight under the fixed digits) holds exactly from pass to pass, and K is the key of
 * a token of positive weight. Returns K, above and need. Called by all threads. */
template <bool MASS>
__device__ static void radix_select(sample_shared &sh, const float *row, row_slice s, float max, float top_p,
                                    u64 need_count, uint32_t *cut, u64 *above_out, u64 *need_out) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint32_t prefix = 0; /* the digits fixed so far */
    u64 above = 0, need = need_count;
    for (int pass = 0; pass < 32 / RADIX_BITS; pass++) {
        const int shift = 32 - RADIX_BITS * (pass + 1); /* of this pass's digit */
        for (int b = threadIdx.x; b < RADIX_BINS; b += THREADS) sh.hist[b] = 0;
        __syncthreads();
        for (int32_t j = 0; j < s.len; j++) {
            const int32_t i = s.begin + j;
            uint32_t key = 0;
            u64 w = 0;
            if (i < s.end) {
                const float l = row[i];
                key = rank_key(l);
                if constexpr (MASS)
                    w = mass_fixed(l, max);
                else
                    w = 1;
            }
            /* pass 0 takes every token; later ones those whose higher digits are the prefix */
            const bool in = w > 0 && (pass == 0 || key >> (shift + RADIX_BITS) == prefix);
            if (!__any_sync(FULL_MASK, in)) continue; /* the same answer in every lane of the warp */
            const uint32_t digit = (key >> shift) & (RADIX_BINS - 1);
            /* the lanes of one digit add their weights and one of them adds the sum */
            const unsigned group = __match_any_sync(FULL_MASK, in ? digit : (uint32_t)RADIX_BINS);
            u64 sum;
            if constexpr (MASS) {
                /* w <= 2^40: 32 lanes' high 17 bits and low 24 bits each fit 32-bit sums */
                const unsigned hi = in ? (unsigned)(w >> 24) : 0u, lo = in ? (unsigned)(w & 0xffffffu) : 0u;
                sum = ((u64)__reduce_add_sync(group, hi) << 24) + (u64)__reduce_add_sync(group, lo);
            } else {
                sum = (u64)__popc(group);
            }
            if (in && lane == __ffs(group) - 1) atomicAdd(&sh.hist[digit], sum);
        }
        __syncthreads();
        if (warp == 0) {
            /* lane q holds digits [8q, 8q + 8); from = their weight and all digits above */
            u64 own = 0;
            for (int q = 0; q < BINS_PER_LANE; q++) own += sh.hist[lane * BINS_PER_LANE + q];
            u64 from = own;
            for (int o = 1; o < 32; o <<= 1) {
                const u64 t = __shfl_down_sync(FULL_MASK, from, o);
                if (lane + o < 32) from += t;
            }
            if constexpr (MASS)
                if (pass == 0) need = mass_target(top_p, __shfl_sync(FULL_MASK, from, 0));
            /* from falls as the lane rises: the lanes that reach need are 0..chosen */
            const unsigned reach = __ballot_sync(FULL_MASK, above + from >= need);
            const int chosen = reach ? 31 - __clz((int)reach) : 0;
            if (lane == chosen) {
                u64 run = above + (from - own); /* the weight of the digits above this lane's */
                int d = lane * BINS_PER_LANE + BINS_PER_LANE - 1;
                for (; d > lane * BINS_PER_LANE; d--) {
                    if (run + sh.hist[d] >= need) break;
                    run += sh.hist[d];
                }
                sh.sel_key = prefix << RADIX_BITS | (uint32_t)d;
                sh.sel_above = run;
                sh.sel_need = need;
            }
        }
        __syncthreads();
        prefix = sh.sel_key;
        above = sh.sel_above;
        need = sh.sel_need;
    }
    *cut = prefix;
    *above_out = above;
    *need_out = need;
}

/* Sorts a[0..n) descending, n a power of two up to 2 * THREADS. Called by all threads. */
__device__ static void bitonic_sort_desc(u64 *a, int n) {
    for (int size = 2; size <= n; size <<= 1)
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < n / 2; t += THREADS) {
                const int i = 2 * t - (t & (stride - 1)), j = i + stride; /* bit `stride` of i is 0 */
                const bool descending = (i & size) == 0;
                const u64 x = a[i], y = a[j];
                if (descending ? x < y : x > y) {
                    a[i] = y;
                    a[j] = x;
                }
            }
            __syncthreads();
        }
}

/* sh.sort[0..k) = the k best tokens of row in rank order, 1 <= k <= min(SORT_MAX, V):
 * those above the k-th token's key K, and the first of K's ties in id order. */
__device__ static void select_top_k(sample_shared &sh, const float *row, row_slice s, int32_t k) {
    uint32_t cut;
    u64 above, need;
    radix_select<false>(sh, row, s, 0.0f, 0.0f, (u64)k, &cut, &above, &need);
    uint32_t n_above = 0, n_tied = 0;
    for (int32_t i = s.begin; i < s.end; i++) {
        const uint32_t key = rank_key(row[i]);
        n_above += key > cut;
        n_tied += key == cut;
    }
    /* both counts in one scan: the ties (below V < 2^31) never carry into the high half */
    u64 total;
    const u64 offset = block_exclusive_scan<u64>(((u64)n_above << 32) | n_tied, sh.red_u, &total);
    uint32_t slot = (uint32_t)(offset >> 32), tie = (uint32_t)offset;
    const uint32_t n_first = (uint32_t)above, n_ties = (uint32_t)k - n_first; /* above < k */
    for (int32_t i = s.begin; i < s.end; i++) {
        const uint32_t key = rank_key(row[i]);
        if (key > cut) {
            sh.sort[slot++] = candidate_make(key, i); /* slots 0..n_first-1 */
        } else if (key == cut) {
            if (tie < n_ties) sh.sort[n_first + tie] = candidate_make(key, i);
            tie++;
        }
    }
    int n = 1;
    while (n < k) n <<= 1;
    for (int j = k + threadIdx.x; j < n; j += THREADS) sh.sort[j] = 0; /* ranks after every token */
    __syncthreads();
    bitonic_sort_desc(sh.sort, n);
}

/* Which tokens a draw in id order keeps; called once per token, in id order, from a fresh copy. */
struct keep_floor {
    float floor;
    __device__ bool operator()(float l) {
        return l >= floor; /* false for NaN */
    }
};
struct keep_top_p {
    float floor;
    uint32_t cut;  /* K* */
    uint32_t tie;  /* rank among K*'s tokens of this thread's next one */
    uint32_t ties; /* how many of K*'s tokens are kept */
    __device__ bool operator()(float l) {
        const uint32_t key = rank_key(l);
        bool in = key > cut;
        if (key == cut) in = tie++ < ties;
        return in && l >= floor;
    }
};

/* One draw among the tokens keep takes, in id order, with weights exp((l - max) * inv_t):
 * the first token where the running weight passes u * total, never one of weight 0.
 * The max token is always kept, so the total is at least 1. Called by all threads. */
template <typename Keep>
__device__ static int32_t draw_in_id_order(sample_shared &sh, const float *row, row_slice s, float max, float inv_t,
                                           double u, Keep keep) {
    double own = 0.0;
    Keep k = keep;
    for (int32_t i = s.begin; i < s.end; i++) {
        const float l = row[i];
        if (k(l)) own += (double)draw_weight(l, max, inv_t);
    }
    double total;
    const double before = block_exclusive_scan<double>(own, sh.red_d, &total);
    const double target = u * total;
    /* the first thread whose range holds target; the last with weight when rounding
     * leaves target past every range */
    int chosen = block_reduce(own > 0.0 && target < before + own ? (int)threadIdx.x : THREADS, sh.red_i,
                              [](int a, int b) { return a < b ? a : b; });
    if (chosen == THREADS)
        chosen = block_reduce(own > 0.0 ? (int)threadIdx.x : -1, sh.red_i, [](int a, int b) { return a > b ? a : b; });
    if (threadIdx.x == 0) sh.token = -1;
    __syncthreads();
    if ((int)threadIdx.x == chosen) {
        const double inside = target - before;
        double running = 0.0;
        int32_t last = -1, pick = -1;
        k = keep;
        for (int32_t i = s.begin; i < s.end; i++) {
            const float l = row[i];
            if (!k(l)) continue;
            const float w = draw_weight(l, max, inv_t);
            if (!(w > 0.0f)) continue;
            running += (double)w;
            last = i;
            if (inside < running) {
                pick = i;
                break;
            }
        }
        sh.token = pick >= 0 ? pick : last;
    }
    __syncthreads();
    const int32_t token = sh.token;
    __syncthreads();
    return token >= 0 ? token : row_argmax(sh, row, s, max); /* no weight at all: cannot happen */
}

/* top-k (with top-p and min-p over the k), as cut_top_k, then the draw among the kept
 * in rank order, as candidates_draw. Called by all threads. */
__device__ static int32_t draw_top_k(sample_shared &sh, const float *row, row_slice s, const sample_job &job, float max,
                                     float floor) {
    const int32_t k = job.top_k;
    select_top_k(sh, row, s, k);
    for (int j = threadIdx.x; j < k; j += THREADS)
        sh.mass[j] = exp((double)key_logit(candidate_key(sh.sort[j])) - (double)max);
    __syncthreads();
    if (threadIdx.x == 0) {
        const bool top_p = job.top_p < 1.0f;
        double total = 0.0; /* the mass at temperature 1 that top-p takes a fraction of */
        if (top_p)
            for (int j = 0; j < k && !isnan(key_logit(candidate_key(sh.sort[j]))); j++) total += sh.mass[j];
        const double target = (double)job.top_p * total;
        double mass = 0.0;
        int n = 0;
        for (int j = 0; j < k && key_logit(candidate_key(sh.sort[j])) >= floor; j++) { /* NaN fails too */
            n = j + 1;
            mass += sh.mass[j];
            if (top_p && mass >= target) break;
        }
        sh.n_keep = n;
    }
    __syncthreads();
    const int n = sh.n_keep; /* >= 1: the max is the first and is never below floor */
    for (int j = threadIdx.x; j < n; j += THREADS)
        sh.mass[j] = (double)draw_weight(key_logit(candidate_key(sh.sort[j])), max, job.inv_t);
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int j = 0; j < n; j++) total += sh.mass[j];
        const double target = job.u * total;
        double running = 0.0;
        int pick = -1, last = 0;
        for (int j = 0; j < n; j++) {
            if (!(sh.mass[j] > 0.0)) continue;
            running += sh.mass[j];
            last = j;
            if (target < running) {
                pick = j;
                break;
            }
        }
        sh.token = candidate_id(sh.sort[pick >= 0 ? pick : last]);
    }
    __syncthreads();
    return sh.token;
}

/* top-p (with min-p): the cut key K* by mass, how many of its tokens stay, then the draw
 * in id order. Called by all threads. */
__device__ static int32_t draw_top_p(sample_shared &sh, const float *row, row_slice s, const sample_job &job, float max,
                                     float floor) {
    uint32_t cut;
    u64 above, need;
    radix_select<true>(sh, row, s, max, job.top_p, 0, &cut, &above, &need);
    /* K*'s tokens all weigh tie_mass > 0: keep the fewest whose mass, added to the mass
     * above K*, reaches need (need - above >= 1) */
    const u64 tie_mass = mass_fixed(key_logit(cut), max);
    uint32_t n_tied = 0;
    for (int32_t i = s.begin; i < s.end; i++) n_tied += rank_key(row[i]) == cut;
    u64 all_tied;
    const u64 tie = block_exclusive_scan<u64>(n_tied, sh.red_u, &all_tied);
    u64 ties = all_tied;
    if (above >= need)
        ties = 1;
    else if (tie_mass > 0 && (need - above + tie_mass - 1) / tie_mass < all_tied)
        ties = (need - above + tie_mass - 1) / tie_mass;
    keep_top_p keep = {floor, cut, (uint32_t)tie, (uint32_t)ties};
    return draw_in_id_order(sh, row, s, max, job.inv_t, job.u, keep);
}

/* One block per job: the log-probabilities, the edits, the draw. */
__global__ static void __launch_bounds__(THREADS, 1)
    sample_kernel(sample_out *outs, float *raw /* (G) */, float *logits /* (R, V) */, const sample_job *jobs,
                  const sample_group *groups /* (G) */, const sample_edit *edits /* (E) */, int32_t n_vocab) {
    __shared__ sample_shared sh;
    const sample_job job = jobs[blockIdx.x];
    float *row = logits + job.row * (int64_t)n_vocab;
    sample_out *out = &outs[blockIdx.x];
    row_slice s;
    s.len = (n_vocab + THREADS - 1) / THREADS;
    s.begin = min(n_vocab, (int32_t)threadIdx.x * s.len);
    s.end = min(n_vocab, s.begin + s.len);

    /* 1. log-probabilities of the raw logits */
    double lse = 0.0;
    if (job.top_logprobs >= 0) {
        const float m = row_max(sh, row, s);
        if (!isfinite(m)) {
            lse = (double)m; /* -inf: nothing has any probability; +inf: an overflow */
        } else {
            double sum = 0.0;
            for (int32_t i = s.begin; i < s.end; i++) {
                const float l = row[i];
                if (!isnan(l)) sum += (double)expf(__fsub_rn(l, m)); /* float exp: FP64 is slow on sm_89 */
            }
            lse = (double)m + log(block_reduce(sum, sh.red_d, [](double a, double b) { return a + b; }));
        }
        if (job.top_logprobs > 0) {
            select_top_k(sh, row, s, job.top_logprobs);
            for (int j = threadIdx.x; j < job.top_logprobs; j += THREADS) {
                const int32_t id = candidate_id(sh.sort[j]);
                out->top[j].id = id;
                out->top[j].logprob = (float)((double)row[id] - lse);
            }
            __syncthreads(); /* sh.sort is read before anything rewrites it */
        }
    }

    /* 2. mask, bias, penalties: one thread per token, its edits in order */
    const sample_group *row_groups = groups + job.first_group;
    float *row_raw = raw + job.first_group;
    for (int32_t g = threadIdx.x; g < job.n_groups; g += THREADS) {
        const sample_group group = row_groups[g];
        float v = row[group.id];
        row_raw[g] = v;
        for (int32_t e = 0; e < group.n_edits; e++) v = edit_apply(v, edits[group.first_edit + e]);
        row[group.id] = v;
    }
    __syncthreads();

    /* 3. the draw */
    const float max = row_max(sh, row, s);
    int32_t token;
    if (job.mode == MODE_GREEDY || !isfinite(max)) {
        token = row_argmax(sh, row, s, max); /* all -inf or NaN, or a +inf: no weights */
    } else {
        /* min-p keeps p >= min_p * p(max): logit >= max + log(min_p); the max always stays */
        float floor = job.min_p_on ? __fadd_rn(max, job.log_min_p) : -INFINITY;
        if (floor > max) floor = max;
        if (job.mode == MODE_TOP_K)
            token = draw_top_k(sh, row, s, job, max, floor);
        else if (job.mode == MODE_TOP_P)
            token = draw_top_p(sh, row, s, job, max, floor);
        else
            token = draw_in_id_order(sh, row, s, max, job.inv_t, job.u, keep_floor{floor});
    }

    /* 4. the token's log-probability under the raw logits */
    if (job.top_logprobs >= 0) {
        if (threadIdx.x == 0) sh.token_raw = row[token];
        __syncthreads();
        for (int32_t g = threadIdx.x; g < job.n_groups; g += THREADS)
            if (row_groups[g].id == token) sh.token_raw = row_raw[g]; /* the ids are distinct: one writer */
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out->token = token;
        out->logprob = job.top_logprobs >= 0 ? (float)((double)sh.token_raw - lse) : 0.0f;
    }
}

/* ---- the host: jobs, edits, the launch, and the rows sampled on the host -------------- */

/* sample.c's generator: splitmix64, and a uniform in [0, 1) with 53 random bits. */
static uint64_t splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *state) {
    return (double)(splitmix64_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* An edit before grouping: token and operation. */
typedef struct sample_pending {
    int32_t id;
    sample_edit edit;
} sample_pending;

/* Everything the call sends, built on the host. */
struct sample_plan {
    std::vector<sample_job> jobs;
    std::vector<int32_t> job_rows; /* the caller's row of each job */
    std::vector<sample_group> groups;
    std::vector<sample_edit> edits;
    std::vector<int32_t> host_rows; /* rows model/sample.c samples on the host */
    std::vector<sample_pending> pending;
    std::vector<int32_t> counts; /* (V) all zero between rows; sized when penalties first need it */
};

static sp_status ids_check(const int32_t *ids, int32_t n, int32_t n_vocab, int32_t row, const char *what) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return sp_fail(SP_ERR_INVALID_ARG, "sample: row %d: %s[%d] = %d is outside the vocabulary (%d tokens)", row,
                           what, i, ids[i], n_vocab);
    return SP_OK;
}

static sp_status row_check(const dev_sample_row *r, int32_t i, int32_t n_vocab) {
    const sample_params *p = r->params;
    sp_status st;
    if ((st = ids_check(r->prompt, r->n_prompt, n_vocab, i, "prompt")) != SP_OK) return st;
    if ((st = ids_check(r->generated, r->n_generated, n_vocab, i, "generated")) != SP_OK) return st;
    for (int32_t b = 0; b < p->n_logit_bias; b++)
        if ((st = ids_check(&p->logit_bias[b].id, 1, n_vocab, i, "logit_bias")) != SP_OK) return st;
    if (r->top_logprobs > DEV_SAMPLE_MAX_TOP)
        return sp_fail(SP_ERR_INVALID_ARG, "sample: row %d: top_logprobs %d is more than %d", i, r->top_logprobs,
                       DEV_SAMPLE_MAX_TOP);
    if (r->top_logprobs > n_vocab)
        return sp_fail(SP_ERR_INVALID_ARG, "sample: row %d: top_logprobs %d is more than the vocabulary (%d tokens)", i,
                       r->top_logprobs, n_vocab);
    return SP_OK;
}

/* The row's edits, grouped by token in the CPU's order (a stable sort keeps the order in
 * which the mask, sample_apply_penalties' passes and the bias list apply them). */
static void plan_edits(sample_plan *plan, const dev_sample_vocab *vocab, const dev_sample_row *r, sample_job *job) {
    const sample_params *p = r->params;
    std::vector<sample_pending> &pending = plan->pending;
    pending.clear();
    if (r->mask_eog)
        for (int32_t i = 0; i < vocab->n_eog; i++) pending.push_back({vocab->eog_ids[i], {EDIT_SET, -INFINITY}});
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        pending.push_back({p->logit_bias[i].id, {EDIT_ADD, p->logit_bias[i].bias}});
    const bool repetition = p->repetition_penalty != 1.0f;
    const bool presence = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if ((repetition || presence) && plan->counts.empty()) plan->counts.assign((size_t)vocab->n_vocab, 0);
    int32_t *counts = plan->counts.data();
    if (repetition) { /* once per distinct token of the prompt and the generated text */
        const int32_t *lists[2] = {r->prompt, r->generated};
        const int32_t lengths[2] = {r->n_prompt, r->n_generated};
        for (int l = 0; l < 2; l++)
            for (int32_t i = 0; i < lengths[l]; i++) {
                const int32_t id = lists[l][i];
                if (counts[id]) continue;
                counts[id] = 1;
                pending.push_back({id, {EDIT_REPEAT, p->repetition_penalty}});
            }
        for (int l = 0; l < 2; l++)
            for (int32_t i = 0; i < lengths[l]; i++) counts[lists[l][i]] = 0;
    }
    if (presence) { /* once per distinct generated token, with its count */
        for (int32_t i = 0; i < r->n_generated; i++) counts[r->generated[i]]++;
        for (int32_t i = 0; i < r->n_generated; i++) {
            const int32_t id = r->generated[i];
            if (!counts[id]) continue;
            pending.push_back({id, {EDIT_SUB, p->frequency_penalty * (float)counts[id]}});
            pending.push_back({id, {EDIT_SUB, p->presence_penalty}});
            counts[id] = 0;
        }
    }
    std::stable_sort(pending.begin(), pending.end(),
                     [](const sample_pending &a, const sample_pending &b) { return a.id < b.id; });
    job->first_group = (int32_t)plan->groups.size();
    for (size_t i = 0; i < pending.size();) {
        sample_group g = {pending[i].id, (int32_t)plan->edits.size(), 0};
        for (; i < pending.size() && pending[i].id == g.id; i++, g.n_edits++) plan->edits.push_back(pending[i].edit);
        plan->groups.push_back(g);
    }
    job->n_groups = (int32_t)plan->groups.size() - job->first_group;
}

/* Jobs for the rows the GPU samples, the draws (u and the generator after them, into
 * results[].rng), and the list of rows left to the host. */
static sp_status plan_build(sample_plan *plan, int32_t n_rows, const dev_sample_vocab *vocab,
                            const dev_sample_row *rows, dev_sample_result *results) {
    const int32_t n_vocab = vocab->n_vocab;
    if (n_vocab <= 0) return sp_fail(SP_ERR_INVALID_ARG, "sample: vocabulary size %d must be positive", n_vocab);
    sp_status st = ids_check(vocab->eog_ids, vocab->n_eog, n_vocab, 0, "eog_ids");
    if (st != SP_OK) return st;
    for (int32_t i = 0; i < n_rows; i++) {
        const dev_sample_row *r = &rows[i];
        const sample_params *p = r->params;
        if ((st = row_check(r, i, n_vocab)) != SP_OK) return st;
        /* sample_token's decisions, in its order: greedy draws nothing */
        const float inv_t = 1.0f / p->temperature;
        const bool greedy = !(p->temperature > 0.0f) || !isfinite(inv_t);
        const bool top_k = p->top_k > 0 && p->top_k < n_vocab;
        if (!greedy && top_k && p->top_k > SORT_MAX) {
            plan->host_rows.push_back(i);
            continue;
        }
        sample_job job = {};
        job.row = i;
        job.top_logprobs = r->top_logprobs;
        job.inv_t = inv_t;
        job.top_p = p->top_p;
        job.top_k = top_k ? p->top_k : 0;
        job.min_p_on = p->min_p > 0.0f;
        job.log_min_p = job.min_p_on ? logf(p->min_p) : -INFINITY;
        uint64_t rng = r->rng;
        if (greedy)
            job.mode = MODE_GREEDY;
        else {
            job.u = rng_uniform(&rng);
            job.mode = top_k ? MODE_TOP_K : p->top_p < 1.0f ? MODE_TOP_P : job.min_p_on ? MODE_MIN_P : MODE_ALL;
        }
        results[i].rng = rng;
        plan_edits(plan, vocab, r, &job);
        plan->jobs.push_back(job);
        plan->job_rows.push_back(i);
    }
    return SP_OK;
}

/* A row sampled by model/sample.c as the CPU backend's host_sample.c does it; raw (V)
 * is the row as the step left it. */
static sp_status sample_on_host(float *raw, int32_t n_vocab, const dev_sample_vocab *vocab, const dev_sample_row *r,
                                dev_sample_result *res) {
    std::vector<float> logits(raw, raw + n_vocab);
    sample_state s;
    sp_status st = sample_state_init(&s, n_vocab, r->rng);
    if (st != SP_OK) return st;
    double lse = 0.0;
    if (r->top_logprobs >= 0) {
        lse = sample_logsumexp(raw, n_vocab);
        if (r->top_logprobs > 0) sample_top_logprobs(raw, n_vocab, lse, r->top_logprobs, res->top);
    }
    if (r->mask_eog)
        for (int32_t i = 0; i < vocab->n_eog; i++) logits[(size_t)vocab->eog_ids[i]] = -INFINITY;
    sample_apply_penalties(r->params, &s, r->prompt, r->n_prompt, r->generated, r->n_generated, logits.data());
    res->token = sample_token(r->params, &s, logits.data());
    res->rng = s.rng;
    res->logprob = r->top_logprobs >= 0 ? (float)((double)raw[res->token] - lse) : 0.0f;
    sample_state_free(&s);
    return SP_OK;
}

static size_t align16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* Copies n bytes of a vector's data to dst (nothing for an empty vector). */
template <typename T> static void blob_put(unsigned char *dst, const std::vector<T> &v) {
    if (!v.empty()) memcpy(dst, v.data(), sizeof(T) * v.size());
}

/* Runs the plan's jobs: one allocation, one upload, the kernel, one download. */
static sp_status jobs_run(cuda_backend *cb, const sample_plan &plan, float *logits, int32_t n_vocab,
                          std::vector<sample_out> &outs) {
    const size_t n_jobs = plan.jobs.size(), n_groups = plan.groups.size();
    const size_t groups_at = align16(sizeof(sample_job) * n_jobs);
    const size_t edits_at = align16(groups_at + sizeof(sample_group) * n_groups);
    const size_t upload = edits_at + sizeof(sample_edit) * plan.edits.size();
    const size_t raw_at = align16(upload);
    const size_t outs_at = align16(raw_at + sizeof(float) * n_groups);
    const size_t bytes = outs_at + sizeof(sample_out) * n_jobs;

    std::vector<unsigned char> blob(upload);
    blob_put(blob.data(), plan.jobs);
    blob_put(blob.data() + groups_at, plan.groups);
    blob_put(blob.data() + edits_at, plan.edits);

    unsigned char *d = NULL;
    cudaError_t err = cudaMallocAsync((void **)&d, bytes, cb->stream);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not a fault: the caller decides */
        return sp_fail(SP_ERR_NOMEM, "cuda: cannot allocate %zu bytes for sampling %zu rows", bytes, n_jobs);
    }
    if (!cuda__ok(cb, err, "cudaMallocAsync(sample)")) return cuda__fault_status(cb);
    outs.resize(n_jobs);
    bool ok = cuda__ok(cb, cudaMemcpyAsync(d, blob.data(), upload, cudaMemcpyHostToDevice, cb->stream),
                       "cudaMemcpyAsync(sample jobs)");
    if (ok) {
        sample_kernel<<<(unsigned)n_jobs, THREADS, 0, cb->stream>>>(
            (sample_out *)(d + outs_at), (float *)(d + raw_at), logits, (const sample_job *)d,
            (const sample_group *)(d + groups_at), (const sample_edit *)(d + edits_at), n_vocab);
        ok = cuda__launched(cb, "sample_kernel");
    }
    if (ok)
        ok = cuda__ok(
            cb,
            cudaMemcpyAsync(outs.data(), d + outs_at, sizeof(sample_out) * n_jobs, cudaMemcpyDeviceToHost, cb->stream),
            "cudaMemcpyAsync(sample results)");
    ok = cuda__ok(cb, cudaFreeAsync(d, cb->stream), "cudaFreeAsync(sample)") && ok;
    ok = ok && cuda__ok(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize(sample)");
    return ok ? SP_OK : cuda__fault_status(cb);
}

sp_status cuda__sample(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                       const dev_sample_row *rows, dev_sample_result *results) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return cuda__fault_status(cb);
    if (n_rows <= 0) return SP_OK;
    const int32_t n_vocab = vocab->n_vocab;
    sample_plan plan;
    sp_status st = plan_build(&plan, n_rows, vocab, rows, results);
    if (st != SP_OK) return st;

    /* rows left to the host: their raw logits, before anything edits them (the kernel
     * leaves them alone; the copy into pageable memory is complete when it returns) */
    std::vector<float> host_logits(plan.host_rows.size() * (size_t)n_vocab);
    for (size_t h = 0; h < plan.host_rows.size(); h++)
        if (!cuda__ok(cb,
                      cudaMemcpyAsync(host_logits.data() + h * (size_t)n_vocab,
                                      logits + (size_t)plan.host_rows[h] * (size_t)n_vocab,
                                      sizeof(float) * (size_t)n_vocab, cudaMemcpyDeviceToHost, cb->stream),
                      "cudaMemcpyAsync(sample row)"))
            return cuda__fault_status(cb);

    if (!plan.jobs.empty()) {
        std::vector<sample_out> outs;
        if ((st = jobs_run(cb, plan, logits, n_vocab, outs)) != SP_OK) return st;
        for (size_t j = 0; j < outs.size(); j++) {
            const int32_t i = plan.job_rows[j];
            dev_sample_result *res = &results[i];
            res->token = outs[j].token;
            res->logprob = outs[j].logprob;
            for (int k = 0; k < rows[i].top_logprobs; k++) res->top[k] = outs[j].top[k];
        }
    }
    for (size_t h = 0; h < plan.host_rows.size(); h++) {
        const int32_t i = plan.host_rows[h];
        st = sample_on_host(host_logits.data() + h * (size_t)n_vocab, n_vocab, vocab, &rows[i], &results[i]);
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

/* cuda_sample_kernel.cu: the sampling kernel, one block of 1024 threads per row (the
 * design, the order of its steps and its numerics: cuda_sample.cuh). */
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "gpu/cuda/cuda_sample.cuh"

static_assert(WARPS == 32, "block_reduce and block_exclusive_scan finish in one warp of 32 lanes");
static_assert(SORT_MAX <= 2 * THREADS, "bitonic_sort_desc takes one pair per thread");

#define FULL_MASK 0xffffffffu
/* A top-p weight (in [0, 1]) as a multiple of 2^-40: V < 2^24 of them sum below 2^64. */
#define MASS_ONE 1099511627776.0f

typedef unsigned long long u64;

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
                  const sample_group *groups /* (G) */, const sample_edit *edits /* (E) */,
                  const uint32_t *allowed /* (masked jobs, ceil(V / 32)) */, int32_t n_vocab) {
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
    /* a grammar's row: what it does not allow is -inf (after the edits: -inf stays -inf) */
    if (job.allowed_at >= 0) {
        const uint32_t *bits = allowed + job.allowed_at;
        for (int32_t i = s.begin; i < s.end; i++)
            if (!((bits[i >> 5] >> (i & 31)) & 1u)) row[i] = -INFINITY;
        __syncthreads();
    }

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

bool cuda__sample_launch(cuda_backend *cb, uint32_t n_jobs, sample_out *outs, float *raw, float *logits,
                         const sample_job *jobs, const sample_group *groups, const sample_edit *edits,
                         const uint32_t *allowed, int32_t n_vocab) {
    sample_kernel<<<n_jobs, THREADS, 0, cb->stream>>>(outs, raw, logits, jobs, groups, edits, allowed, n_vocab);
    return cuda__launched(cb, "sample_kernel");
}

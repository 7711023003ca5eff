/* host_internal.h: shared between the files of the CPU backend (gpu/host/).
 *
 * Kernel legend: n = elements in a row (K of the matmul), rows of weights are stored
 * in their quant format, activation rows are first quantized to the weight type's
 * dot format (quant_vec_dot_type()).
 */
#ifndef SP_HOST_INTERNAL_H
#define SP_HOST_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/assert.h"
#include "common/status.h"
#include "gpu/device_internal.h"
#include "quant/quant.h"

/* w: one weight row (n elements of its type); a: one activation row (n elements in
 * quant_vec_dot_type of the weight type). Returns their dot product. */
typedef float (*host_vec_dot_fn)(const void *w, const void *a, int64_t n);

/* Quantizes a float row (n) into the activation format dst. */
typedef void (*host_quantize_fn)(void *dst, const float *src, int64_t n);

/* ---- kernel sets (host_cpu.c) ---- */
typedef struct host_cpu_features {
    bool avx2;   /* AVX2, FMA, F16C, YMM state saved by the OS */
    bool avx512; /* and AVX-512 F/BW/VL/VNNI, opmask and ZMM state saved */
    bool amx;    /* and AMX tile/int8, tile state saved and offered by Linux */
} host_cpu_features;

host_cpu_features host__cpu_features(void); /* probed once */
/* What the probe reads, for host__cpu_features_decide: CPUID leaf 1's ECX and leaf 7
 * (subleaf 0)'s EBX, ECX, EDX (0 where the CPU has no leaf 7), XCR0 (0 without OSXSAVE),
 * and whether Linux offers the AMX tile data state (ARCH_GET_XCOMP_SUPP). */
typedef struct host_cpuid_words {
    uint32_t leaf1_ecx, leaf7_ebx, leaf7_ecx, leaf7_edx;
    uint64_t xcr0;
    bool tiles_offered;
} host_cpuid_words;
/* The kernel sets those words allow: the probe's whole decision, apart from the
 * instructions that read them (so it can be tested with other CPUs' words). */
host_cpu_features host__cpu_features_decide(const host_cpuid_words *w);
sp_cpu_isa host__isa_best(void);
/* wanted (AUTO: the best) as a set this CPU runs; SP_ERR_UNSUPPORTED naming what lacks. */
sp_status host__isa_resolve(sp_cpu_isa wanted, sp_cpu_isa *out);
/* Asks Linux for the AMX tile state (once per process suffices; repeating is harmless). */
sp_status host__amx_request_tiles(void);

/* The implementation of set isa (never AUTO) for weights of type t; NULL for
 * unsupported types. avx512 and avx2 give the same bits; both equal quant_vec_dot_ref
 * up to float summation order. */
host_vec_dot_fn host__vec_dot_for(sp_cpu_isa isa, quant_type t);
host_quantize_fn host__quantize_for(sp_cpu_isa isa, quant_type act_type);

/* The multi-row kernels (host_quant_dot_rows.c): one weight row w against n_rows
 * activation rows, 2 <= n_rows <= HOST_DOT_ROWS (row r at a + r * a_stride bytes),
 * writing row r's result to out[r * out_stride]. scales: the rows' group in the scale
 * table below (host__rows_scales_group), filled by host__rows_scales_row. Each result
 * is bit for bit host__vec_dot_for(t)'s for that row alone (so batching never changes a
 * token's numbers). */
enum { HOST_DOT_ROWS = 4, HOST_ROWS_SCALES_PER_BLOCK = 2 * HOST_DOT_ROWS };
typedef void (*host_vec_dot_rows_fn)(int n_rows, const void *w, const void *a, size_t a_stride, const float *scales,
                                     int64_t n, float *out, size_t out_stride);
/* The scale table of rows activation rows of width k: for each group of HOST_DOT_ROWS
 * rows (from row 0), per block, the rows' scales as floats. Its bytes; the group that
 * starts at first_row (a multiple of HOST_DOT_ROWS); and row r's entries written from
 * its quantized row (act_type Q8_0 or Q8_1). */
size_t host__rows_scales_bytes(int64_t k, int64_t rows);
float *host__rows_scales_group(float *scales, int64_t k, int64_t first_row);
void host__rows_scales_row(quant_type act_type, const void *act_row, int64_t k, int64_t r, float *scales);
/* NULL when the set or type has none: use the one-row kernel for every row. */
host_vec_dot_rows_fn host__vec_dot_rows_for(sp_cpu_isa isa, quant_type t);

/* The decode-shaped kernels (host_quant_dot_wrows.c): HOST_DOT_WROWS weight rows (row
 * j at w + j * w_stride bytes) against one activation row, out[j] for row j. Each
 * result is bit for bit host__vec_dot_for(isa, t)'s for that weight row alone. */
enum { HOST_DOT_WROWS = 8 };
typedef void (*host_vec_dot_wrows_fn)(const void *w, size_t w_stride, const void *a, int64_t n, float *out);
/* NULL when the set or type has none. */
host_vec_dot_wrows_fn host__vec_dot_wrows_for(sp_cpu_isa isa, quant_type t);

/* The avx512 set's batched kernels (host_quant_dot_pairs.c): the activation rows of a
 * matmul repacked in pairs, two rows to a 512-bit register, against one or two weight
 * rows per call. Each result is bit for bit host__vec_dot_for(isa, t)'s. */
enum {
    HOST_PAIRS_WROWS = 2,    /* weight rows per call */
    HOST_PAIRS_PER_CALL = 5, /* row pairs per call (more spill registers) */
    HOST_PAIRS_MIN_ROWS = 3, /* two rows go faster through the decode-shaped kernels, a row each */
};
typedef struct host_pairs_act {
    int8_t *qs;    /* (n_pairs, nb, 64): block ib of rows 2p and 2p+1, 32 bytes each */
    float *d;      /* (n_pairs, nb, 16): row 2p's block scale in 8 lanes, then 2p+1's */
    float *s;      /* (nb, rows_pad): Q8_1 only (Q4_1 weights): the blocks' sums; else NULL */
    int32_t *bias; /* (n_pairs, nb, 16): Q8_0 only: -offset * each group of 4 bytes' sum; else NULL */
    int64_t nb, n_pairs, rows, rows_pad; /* rows_pad: rows rounded up to 8, + 16 (a call's 16-row loads) */
    quant_type w_type;                   /* the weights' type it was packed for */
} host_pairs_act;
/* Whether set isa has pair kernels for weights of type t (Q4_0, Q4_1, Q8_0 in avx512). */
bool host__pairs_takes(sp_cpu_isa isa, quant_type t);
/* Bytes of scratch a pack of rows rows of width k takes (alignment included). */
size_t host__pairs_bytes(quant_type w_type, int64_t k, int64_t rows);
/* The pack's arrays carved from base (host__pairs_bytes of them). */
host_pairs_act host__pairs_act_init(void *base, quant_type w_type, int64_t k, int64_t rows);
/* Writes row r (quantized to quant_vec_dot_type(w_type)) into the pack; rows may be
 * written in any order and from any thread. */
void host__pairs_act_row(const host_pairs_act *act, const void *row, int64_t r);
/* n_w (1..HOST_PAIRS_WROWS) weight rows (row j at w + j * w_stride) against the n_rows
 * (1..2 * HOST_PAIRS_PER_CALL) rows from row 2 * p0: out[r * out_stride + j]. */
typedef void (*host_vec_dot_pairs_fn)(const void *w, size_t w_stride, int n_w, const host_pairs_act *act, int64_t p0,
                                      int n_rows, float *out, size_t out_stride);
/* NULL where host__pairs_takes is false. */
host_vec_dot_pairs_fn host__vec_dot_pairs_for(sp_cpu_isa isa, quant_type t);

/* ---- the amx set (host_amx.c): Q4_0/Q4_1/Q8_0 weights repacked for AMX tiles ---- */
enum { HOST_AMX_GROUP_ROWS = 16 };  /* weight rows per packed group (host_matmul.c's tiles) */
bool host__amx_takes(quant_type t); /* whether the amx set repacks weights of type t */
size_t host__amx_packed_bytes(quant_type t, int64_t k, int64_t n);
/* Writes group `group` (weight rows 16 group .. 16 group + 15) of the (n, k) weight src,
 * in its file format, into dst, the packed weight's start, zeroed beforehand (the rows
 * past n are left as zeros). */
void host__amx_pack_group(quant_type t, int64_t k, int64_t n, const void *src, int64_t group, void *dst);
/* Bytes of scratch one worker needs for weights of row length k (64-byte aligned). */
size_t host__amx_thread_scratch_bytes(int64_t k);
/* Activation row r (quantized, act_type Q8_0 or Q8_1, k elements) in the tiles' layout:
 * rows in tiles of 16, and per tile and block the 16 rows' 32 quants adjacent (tiled,
 * 512 bytes per tile-block) and their scales adjacent (dx; Q8_1's sums as floats in sx,
 * or Q8_0's integer block sums in xsum; the other unused). Arrays for T rows hold T
 * rounded up to 16 rows. */
void host__amx_act_row(quant_type act_type, const void *act_row, int64_t k, int64_t r, uint8_t *tiled, float *dx,
                       float *sx, int32_t *xsum);
/* The amx arithmetic for one weight row w (file format) and activation row a, in
 * portable C: bit for bit what the tiles give that pair. */
float host__amx_dot(quant_type t, const void *w, const void *a, int64_t n);

/* The activation side of an amx matmul: n_rows rows as host__amx_act_row lays them out
 * (sx: Q8_1 only, xsum: Q8_0 only, else NULL). */
typedef struct host_amx_act {
    const uint8_t *tiled;
    int64_t n_rows;
    const float *dx, *sx;
    const int32_t *xsum;
} host_amx_act;

/* out (T, N) columns 16 group .. 16 group + 15 (those below N) = act . w^T (+ bias),
 * from w->packed. scratch: host__amx_thread_scratch_bytes(w->ne0), this worker's own.
 * *configured_rows tracks this thread's tile configuration (start at 0) and
 * host__amx_release ends it once the worker's share is done. Only in the amx set. */
void host__amx_group(const dev_tensor *w, int64_t group, const host_amx_act *act, float *out, const float *bias,
                     void *scratch, int *configured_rows);
void host__amx_release(int *configured_rows);

/* ---- thread pool (threadpool.c) ----
 * A fixed set of worker threads that run one task function at a time, split by
 * index. The caller is worker 0 and takes part, so n_threads = 1 runs inline. */
typedef void (*host_task_fn)(void *ctx, int ith, int nth);
typedef struct host_pool host_pool;

/* Caller owns *out; free with host__pool_destroy. */
sp_status host__pool_create(int n_threads, host_pool **out);
void host__pool_destroy(host_pool *pool);
int host__pool_threads(const host_pool *pool);
/* Runs fn(ctx, i, n) for every i in 0..n-1 across the workers; returns when all are done.
 * Only the owning thread may call it (not reentrant). */
void host__pool_run(host_pool *pool, host_task_fn fn, void *ctx);

/* Splits [0, n) into nth near-equal ranges; range ith is [*begin, *end). */
static inline void host__split(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t per = (n + nth - 1) / nth;
    *begin = per * ith < n ? per * ith : n;
    *end = *begin + per < n ? *begin + per : n;
}

/* ---- the CPU backend object (host_backend.c) ---- */

typedef struct host_backend {
    dev_backend base; /* must stay first */
    host_pool *pool;
    char name[64];
    void **arenas; /* activation arenas and the amx set's packed weights, freed at destroy */
    int n_arenas;
    /* Scratch for quantized activations and per-thread work, grown only outside steps
     * (see host__scratch_reserve); sized for the largest step at model load. */
    void *scratch;
    size_t scratch_bytes;
    int64_t max_tokens; /* largest step reserved with dev_reserve */
    /* Attention's per-worker buffers (scores and probabilities of a whole context),
     * grown only when a KV cache is created: host__attention_scratch_bytes per thread. */
    void *attn_scratch;
    size_t attn_scratch_bytes;
    /* dev_sample's scratch (host_sample.c), one per worker (rows are sampled in
     * parallel), sized for sampler_vocab entries on first use. */
    sample_state *samplers; /* (n_samplers) */
    float **raw_logits;     /* (n_samplers) each (sampler_vocab) */
    int n_samplers;
    int32_t sampler_vocab;
} host_backend;

typedef struct host_kv {
    dev_kv_common common; /* must stay first */
    unsigned char *data;  /* one allocation: [layer][K|V][block][B][Hk][row] */
    size_t row_bytes;     /* one (token, KV head) row of Dh elements in the pool's type */
    size_t block_bytes;   /* one block of one layer's K (or V) pool: B * Hk rows */
    size_t pool_bytes;    /* one K (or V) pool of one layer */
    size_t layer_bytes;   /* K and V of one layer */
} host_kv;

/* Frees dev_sample's per-worker scratch (host_sample.c). */
void host__sample_free(host_backend *hb);

/* Ensures the scratch area holds at least nbytes (64-byte aligned). */
sp_status host__scratch_reserve(host_backend *hb, size_t nbytes);
/* The amx set: fills w->packed with w's rows in tile order (host_amx.c). */
sp_status host__amx_pack(host_backend *hb, dev_tensor *w);

/* Ops (host_ops.c, host_matmul.c, host_attention.c). */
void host__embed(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step);
void host__rmsnorm(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                   int64_t dim);
sp_status host__sample(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                       const dev_sample_row *rows, dev_sample_result *results);
void host__add_rmsnorm(dev_backend *dev, float *out, float *x, const float *delta, const dev_tensor *w, float eps,
                       int64_t rows, int64_t dim);
void host__rope_apply(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                      int64_t head_dim);
void host__swiglu(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n);
void host__add(dev_backend *dev, float *out, const float *a, const float *b, int64_t n);
void host__gather_rows(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows, int64_t dim);
void host__matmul_group(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows);
void host__kv_write(dev_backend *dev, dev_kv *kv, int layer, const float *k, const float *v, const dev_step *step);
void host__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer, const dev_step *step,
                     int64_t n_heads, float scale);
/* Quantized KV pools (host_attention_quant.c). One row of n floats into a Q8_0 or
 * Q4_0 pool row. */
void host__kv_quantize_row(sp_kv_type type, sp_cpu_isa isa, void *dst, const float *src, int64_t n);
/* A query head (head_dim floats) as Q8_0 blocks, for the scores. */
void host__attention_query_q8(sp_cpu_isa isa, void *q8, const float *q, int64_t head_dim);
/* score[j] = dot(K row j, q8) * scale for positions 0..n_pos-1 of the sequence with
 * these blocks, KV head kv_head of the layer's K pool k_pool. */
void host__attention_scores_quant(float *score, const host_kv *kv, const unsigned char *k_pool, const int32_t *blocks,
                                  int32_t n_pos, int64_t kv_head, const void *q8, float scale, sp_cpu_isa isa);
/* For each of the nh query heads of KV head kv_head: o[h] (Dh) = sum over positions j
 * of p16[h][j] * V row j (the same bits with simd or not, and whatever nh is). */
void host__attention_values_quant(float *const *o, const uint16_t *const *p16, int nh, const host_kv *kv,
                                  const unsigned char *v_pool, const int32_t *blocks, int32_t n_pos, int64_t kv_head,
                                  bool simd);
/* Bytes of attention scratch one worker needs for KV caches of this shape. */
size_t host__attention_scratch_bytes(const dev_kv_shape *shape);

/* ---- arithmetic shared by the kernels (host_ops.c, host_attention.c) ----
 * ggml's rounding, reproduced so that results equal llama.cpp's. Each AVX2 routine has
 * a portable twin that computes the same values in the same order, so a machine
 * without AVX2 gets the same bits. */

/* Adds 8 lanes in hsum_float_8's order (llama.cpp's fold of an 8-lane register):
 * (l0+l4 + l2+l6) + (l1+l5 + l3+l7). */
static inline float host__hsum8(const float l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static inline uint32_t host__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float host__f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e^x rounded as ggml_v_expf rounds it (the "expf" of Arm's optimized routines):
 * x = n ln2 + r with n = round(x / ln2) (found by adding 1.5 * 2^23), r from a
 * two-part ln2, e^r - 1 by a degree-5 polynomial in r, and 2^n put into the exponent
 * bits. When |n| > 126, 2^n is split into two factors (overflow to inf above ~88.38,
 * flush to 0 below ~-103.97). host__avx2_expf is the same on 8 lanes. */
static inline float host__expf(float x) {
    const float shift = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, shift); /* x / ln2 + shift */
    const float n = z - shift;
    const float r_hi = fmaf(-n, 0x1.62e4p-1f, x);
    const float r = fmaf(-n, 0x1.7f7d1cp-20f, r_hi);
    const uint32_t n_bits = host__f32_bits(z) << 23;
    const float two_n = host__f32_from_bits(n_bits + host__f32_bits(1.0f));
    const float abs_n = fabsf(n);
    const float r2 = r * r;
    const float p_hi = fmaf(0x1.0e4020p-7f, r, 0x1.573e2ep-5f);
    const float p_lo = fmaf(0x1.555e66p-3f, r, 0x1.fffdb6p-2f);
    const float p_r = 0x1.ffffecp-1f * r;
    const float poly = fmaf(fmaf(p_hi, r2, p_lo), r2, p_r); /* e^r - 1 */
    if (!(abs_n > 126.0f)) return fmaf(poly, two_n, two_n);
    /* 2^n = s1 * s2, s1 chosen by the sign of n */
    const uint32_t sign_part = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = host__f32_from_bits(sign_part + 0x7f000000u);
    const float s2 = host__f32_from_bits(n_bits - sign_part);
    if (abs_n > 192.0f) return s1 * s1;
    return fmaf(s2, poly, s2) * s1;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HOST_SIMD_AVX2 1
/* Marks functions that use AVX2/FMA/F16C; call them only in the avx2 set or above. */
#define HOST_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
/* And AVX-512 F/BW/VL/VNNI: only in the avx512 set. */
#define HOST_AVX512_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

/* host__hsum8 on a register. */
static HOST_AVX2_TARGET inline float host__avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* l[k] + l[k+4] */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* host__expf on 8 lanes (ggml_v_expf's AVX2 code). */
static HOST_AVX2_TARGET inline __m256 host__avx2_expf(__m256 x) {
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
    const __m256 n = _mm256_sub_ps(z, shift);
    const __m256 r_hi = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x);
    const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), r_hi);
    const __m256i n_bits = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 two_n = _mm256_castsi256_ps(_mm256_add_epi32(n_bits, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 far = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 r2 = _mm256_mul_ps(r, r);
    const __m256 p_hi = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), r, _mm256_set1_ps(0x1.573e2ep-5f));
    const __m256 p_lo = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), r, _mm256_set1_ps(0x1.fffdb6p-2f));
    const __m256 p_r = _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), r);
    const __m256 poly = _mm256_fmadd_ps(_mm256_fmadd_ps(p_hi, r2, p_lo), r2, p_r);
    if (!_mm256_movemask_ps(far)) return _mm256_fmadd_ps(poly, two_n, two_n);
    const __m256i sign_part = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                               _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(sign_part, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(n_bits, sign_part));
    const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 split = _mm256_mul_ps(_mm256_fmadd_ps(s2, poly, s2), s1);
    const __m256 plain = _mm256_fmadd_ps(two_n, poly, two_n);
    const __m256 moderate = _mm256_or_ps(_mm256_and_ps(far, split), _mm256_andnot_ps(far, plain));
    return _mm256_or_ps(_mm256_and_ps(huge, _mm256_mul_ps(s1, s1)), _mm256_andnot_ps(huge, moderate));
}
#else
#define HOST_SIMD_AVX2 0
#endif

/* ---- AVX2 building blocks of the row kernels (host_quant_dot*.c): the integer
 * horizontal sum, F16 scale loads, nibble and bit unpacking, and the 8-bit dot
 * products. Every function carries the target attribute, so the including file is
 * still compiled for plain x86-64 and only calls them in the avx2 set or above. */
#if HOST_SIMD_AVX2

static HOST_AVX2_TARGET inline int avx2_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* Four bytes (two F16 values) as floats in lanes 0 and 1. */
static HOST_AVX2_TARGET inline __m128 avx2_f16_pair(const void *p) {
    uint32_t bits;
    memcpy(&bits, p, sizeof bits);
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)bits));
}

/* f16(*x) * f16(*y) broadcast to 8 lanes (the product of a weight and an activation
 * scale). Each load takes the F16 and the two bytes after it (still inside the block),
 * which lane 1 ignores. */
static HOST_AVX2_TARGET inline __m256 avx2_scale_product(const uint16_t *x, const uint16_t *y) {
    return _mm256_broadcastss_ps(_mm_mul_ss(avx2_f16_pair(x), avx2_f16_pair(y)));
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15) in bytes 0..15,
 * high nibbles (elements 16..31) in bytes 16..31. */
static HOST_AVX2_TARGET inline __m256i avx2_nibbles(const uint8_t *qs) {
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    const __m256i shifted = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes: byte j is 0xFF where bit j is set, else 0. */
static HOST_AVX2_TARGET inline __m256i avx2_bits_to_bytes(const uint8_t bits_le[4]) {
    uint32_t bits;
    memcpy(&bits, bits_le, sizeof bits);
    const __m256i select = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* */
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), select);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

/* Unsigned bytes u times signed bytes s, summed in groups of 4 -> 8 int32. Pairs of
 * products must fit int16 (true for u <= 128 and |s| <= 127). */
static HOST_AVX2_TARGET inline __m256i avx2_dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* avx2_dot_u8s8 in one AVX-512 VNNI instruction (vpdpbusd on 256 bits): the same int32
 * sums wherever maddubs does not saturate, which the callers' formats guarantee. Only in
 * the avx512 set. */
static HOST_AVX512_TARGET inline __m256i avx512_dot_u8s8(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

/* The u8s8 step as a parameter: the multi-row kernel bodies are always inlined into one
 * entry point per set, each passing its own step, so each set's loop has its own
 * instruction in it and the same arithmetic around it. */
typedef __m256i (*host_dot_u8s8_fn)(__m256i u, __m256i s);

/* Signed bytes x times signed bytes y, in groups of 4 -> 8 int32: |x| as unsigned,
 * the sign moved onto y. x may be -128 (|x| reads as 128); y never is (no activation
 * quantizer produces -128). */
static HOST_AVX2_TARGET inline __m256i avx2_dot_s8s8(__m256i x, __m256i y) {
    return avx2_dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

#endif /* HOST_SIMD_AVX2 */

#endif

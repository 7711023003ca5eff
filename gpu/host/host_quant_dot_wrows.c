/* host_quant_dot_wrows.c: decode-shaped dot kernels: HOST_DOT_WROWS weight rows against
 * one activation row at once, for the matmul rows that the multi-activation kernels of
 * host_quant_dot_rows.c do not take (a decode step of one sequence, a batch's lone last
 * row, the avx512 set's two rows, and every row of a type without multi-row kernels).
 *
 * Why: a decode step reads every weight once, and on one core it is bound by how fast
 * the weights arrive, so each call asks for the next call's rows while it computes its
 * own (wrows_prefetch); that alone made decode a third faster. Eight weight rows give
 * eight independent accumulator chains where the one-row kernels of host_quant_dot.c
 * wait on one, and the activation block (its bytes and its F16 scales) is loaded once for
 * the eight. In the avx512 set the 8-bit dot product is one VNNI instruction (vpdpbusd on
 * 256 bits) instead of AVX2's maddubs + madd: the same int32 sums, since no pair of
 * products reaches maddubs's int16 saturation here (4-bit weights times int8, or
 * |int8| <= 128 times |int8| <= 127). The avx2 set runs the eight rows as two passes of
 * four: its 16 registers hold four rows' chains.
 *
 * Batch invariance and set invariance: each weight row keeps its own accumulators and
 * goes through exactly the operations of its one-row kernel, in the same order, so every
 * result is bit for bit host__vec_dot_for's, in either set (test_quant_dot_rows checks it).
 *
 * Legend: n = elements per row (K), nb = blocks per row, ib = block index, j = weight
 * row (0..HOST_DOT_WROWS-1).
 */
#include "gpu/host/host_internal.h"
#include "quant/quant.h"

#if HOST_SIMD_AVX2

/* Every loop over the weight rows is unrolled, so the accumulators live in registers. */
#define UNROLL_WROWS _Pragma("GCC unroll 8")

#define WEIGHT_ROW(type, w, stride, j) ((const type *)((const char *)(w) + (size_t)(j) * (stride)))

#define WROWS_BODY static HOST_AVX2_TARGET inline __attribute__((always_inline))

/* The matmul walks the weights in order, a few rows per call, so the rows of the next
 * call are the next bytes of the matrix. A decode step is bound by how fast one core
 * brings weights in, not by arithmetic: each block of the loop asks for its share of the
 * next call's bytes, so they arrive while this call computes (what it gained:
 * docs/notes/2026-12-03-xeon-kernels.md). Past the matrix's end a prefetch is only a hint. */
typedef struct wrows_prefetch {
    const char *next; /* the first byte after this call's rows */
    size_t bytes;     /* the next call's bytes */
    size_t per_block; /* bytes asked for per block of this call, whole cache lines */
} wrows_prefetch;

static inline wrows_prefetch wrows_prefetch_plan(int rows, const void *w, size_t w_stride, int64_t nb) {
    const size_t bytes = (size_t)rows * w_stride;
    return (wrows_prefetch){(const char *)w + bytes, bytes, nb > 0 ? (bytes / (size_t)nb + 63) & ~(size_t)63 : 0};
}

static inline void wrows_prefetch_step(const wrows_prefetch *p, int64_t ib) {
    const size_t begin = (size_t)ib * p->per_block, end = begin + p->per_block;
    for (size_t off = begin; off < end && off < p->bytes; off += 64) __builtin_prefetch(p->next + off, 0, 3);
}

/* avx2_dot_s8s8 with the set's u8s8 step: |x| as unsigned, x's sign moved onto y. */
#define DOT_S8S8(dot_u8s8, x, y) dot_u8s8(_mm256_sign_epi8((x), (x)), _mm256_sign_epi8((y), (x)))

/* dot_avx2_q4_1 (host_quant_dot.c) for `rows` weight rows: per row the same summs fma,
 * the same dd, the same fma into its own accumulator. */
WROWS_BODY void wrows_q4_1(int rows, const void *w, size_t w_stride, const void *a, int64_t n, float *out,
                           host_dot_u8s8_fn dot_u8s8) {
    const quant_block_q8_1 *ab = a; /* (nb) */
    const quant_block_q4_1 *wb[HOST_DOT_WROWS];
    __m256 acc[HOST_DOT_WROWS];
    __m128 summs[HOST_DOT_WROWS];
    UNROLL_WROWS
    for (int j = 0; j < rows; j++) {
        wb[j] = WEIGHT_ROW(quant_block_q4_1, w, w_stride, j);
        acc[j] = _mm256_setzero_ps();
        summs[j] = _mm_setzero_ps();
    }
    const int64_t nb = n / QUANT_QK;
    const wrows_prefetch ahead = wrows_prefetch_plan(rows, w, w_stride, nb);
    for (int64_t ib = 0; ib < nb; ib++) {
        wrows_prefetch_step(&ahead, ib);
        const __m128 pair_a = avx2_f16_pair(&ab[ib].d);
        const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[ib].qs);
        UNROLL_WROWS
        for (int j = 0; j < rows; j++) {
            const __m128 pair_w = avx2_f16_pair(&wb[j][ib].d);
            summs[j] = _mm_fmadd_ps(pair_w, pair_a, summs[j]);
            const __m256 dd = _mm256_broadcastss_ps(_mm_mul_ss(pair_w, pair_a));
            const __m256 isum = _mm256_cvtepi32_ps(dot_u8s8(avx2_nibbles(wb[j][ib].qs), qa));
            acc[j] = _mm256_fmadd_ps(dd, isum, acc[j]);
        }
    }
    UNROLL_WROWS
    for (int j = 0; j < rows; j++) out[j] = host__avx2_hsum(acc[j]) + _mm_cvtss_f32(_mm_movehdup_ps(summs[j]));
}

/* dot_avx2_q8_0 and dot_avx2_q4_0 for `rows` weight rows (q4: the nibbles minus 8). */
WROWS_BODY void wrows_q8_0_like(int rows, bool q4, const void *w, size_t w_stride, const void *a, int64_t n, float *out,
                                host_dot_u8s8_fn dot_u8s8) {
    const quant_block_q8_0 *ab = a; /* (nb) */
    __m256 acc[HOST_DOT_WROWS];
    UNROLL_WROWS
    for (int j = 0; j < rows; j++) acc[j] = _mm256_setzero_ps();
    const int64_t nb = n / QUANT_QK;
    const wrows_prefetch ahead = wrows_prefetch_plan(rows, w, w_stride, nb);
    for (int64_t ib = 0; ib < nb; ib++) {
        wrows_prefetch_step(&ahead, ib);
        const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[ib].qs);
        UNROLL_WROWS
        for (int j = 0; j < rows; j++) {
            const uint16_t *d_w;
            __m256i qw;
            if (q4) {
                const quant_block_q4_0 *wb = WEIGHT_ROW(quant_block_q4_0, w, w_stride, j) + ib;
                d_w = &wb->d;
                qw = _mm256_sub_epi8(avx2_nibbles(wb->qs), _mm256_set1_epi8(8));
            } else {
                const quant_block_q8_0 *wb = WEIGHT_ROW(quant_block_q8_0, w, w_stride, j) + ib;
                d_w = &wb->d;
                qw = _mm256_loadu_si256((const __m256i *)wb->qs);
            }
            const __m256 isum = _mm256_cvtepi32_ps(DOT_S8S8(dot_u8s8, qw, qa));
            acc[j] = _mm256_fmadd_ps(avx2_scale_product(d_w, &ab[ib].d), isum, acc[j]);
        }
    }
    UNROLL_WROWS
    for (int j = 0; j < rows; j++) out[j] = host__avx2_hsum(acc[j]);
}

/* ---- the avx2 set: two passes of four rows (16 YMM registers hold four rows' chains) */

enum { AVX2_PASS = HOST_DOT_WROWS / 2 };

static HOST_AVX2_TARGET void wrows_avx2_q4_1(const void *w, size_t w_stride, const void *a, int64_t n, float *out) {
    wrows_q4_1(AVX2_PASS, w, w_stride, a, n, out, avx2_dot_u8s8);
    wrows_q4_1(AVX2_PASS, (const char *)w + AVX2_PASS * w_stride, w_stride, a, n, out + AVX2_PASS, avx2_dot_u8s8);
}

static HOST_AVX2_TARGET void wrows_avx2_q8_0(const void *w, size_t w_stride, const void *a, int64_t n, float *out) {
    wrows_q8_0_like(AVX2_PASS, false, w, w_stride, a, n, out, avx2_dot_u8s8);
    wrows_q8_0_like(AVX2_PASS, false, (const char *)w + AVX2_PASS * w_stride, w_stride, a, n, out + AVX2_PASS,
                    avx2_dot_u8s8);
}

static HOST_AVX2_TARGET void wrows_avx2_q4_0(const void *w, size_t w_stride, const void *a, int64_t n, float *out) {
    wrows_q8_0_like(AVX2_PASS, true, w, w_stride, a, n, out, avx2_dot_u8s8);
    wrows_q8_0_like(AVX2_PASS, true, (const char *)w + AVX2_PASS * w_stride, w_stride, a, n, out + AVX2_PASS,
                    avx2_dot_u8s8);
}

static const host_vec_dot_wrows_fn wrows_avx2[QUANT_TYPE_LIMIT] = {
    [QUANT_Q4_0] = wrows_avx2_q4_0,
    [QUANT_Q4_1] = wrows_avx2_q4_1,
    [QUANT_Q8_0] = wrows_avx2_q8_0,
};

/* ---- the avx512 set: all eight rows in one pass (32 registers hold their chains) ---- */

static HOST_AVX512_TARGET void wrows_avx512_q4_1(const void *w, size_t w_stride, const void *a, int64_t n, float *out) {
    wrows_q4_1(HOST_DOT_WROWS, w, w_stride, a, n, out, avx512_dot_u8s8);
}

static HOST_AVX512_TARGET void wrows_avx512_q8_0(const void *w, size_t w_stride, const void *a, int64_t n, float *out) {
    wrows_q8_0_like(HOST_DOT_WROWS, false, w, w_stride, a, n, out, avx512_dot_u8s8);
}

static HOST_AVX512_TARGET void wrows_avx512_q4_0(const void *w, size_t w_stride, const void *a, int64_t n, float *out) {
    wrows_q8_0_like(HOST_DOT_WROWS, true, w, w_stride, a, n, out, avx512_dot_u8s8);
}

static const host_vec_dot_wrows_fn wrows_avx512[QUANT_TYPE_LIMIT] = {
    [QUANT_Q4_0] = wrows_avx512_q4_0,
    [QUANT_Q4_1] = wrows_avx512_q4_1,
    [QUANT_Q8_0] = wrows_avx512_q8_0,
};

host_vec_dot_wrows_fn host__vec_dot_wrows_for(sp_cpu_isa isa, quant_type t) {
    if ((unsigned)t >= QUANT_TYPE_LIMIT || isa < SP_CPU_ISA_AVX2) return NULL;
    if (isa == SP_CPU_ISA_AMX && host__amx_takes(t)) return NULL; /* its own arithmetic: host_amx.c */
    return isa >= SP_CPU_ISA_AVX512 ? wrows_avx512[t] : wrows_avx2[t];
}

#else /* !HOST_SIMD_AVX2 */

host_vec_dot_wrows_fn host__vec_dot_wrows_for(sp_cpu_isa isa, quant_type t) {
    (void)isa;
    (void)t;
    return NULL;
}

#endif

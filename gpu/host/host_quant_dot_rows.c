/* host_quant_dot_rows.c: multi-row dot kernels: one weight row against 2 to
 * HOST_DOT_ROWS activation rows at once, for the matmul's batched case (prefill chunks,
 * decode steps of several sequences, and a speculating sequence's 1 + k verify rows).
 *
 * Why: in the one-row kernels of host_quant_dot.c a third of the work per block is
 * the weight's own (its scales converted from F16, its nibbles unpacked). Done once
 * per block for four activation rows, that work is shared, and the weight row is
 * read from cache once for the four. Two and three rows get their own copies of the
 * loop (the row count is a constant in each, so the accumulators stay in registers):
 * through the one-row kernels a second and third row cost nearly a whole row each,
 * through these less (bench_matmul: docs/notes/2026-12-07-avx2-short-rows.md). That is
 * the price of a draft token at one sequence. The rows' scales come converted to floats,
 * once per row, from the matmul's scale table (host__rows_scales_row), not from their F16
 * for every weight row.
 *
 * The avx2 set's only: the avx512 set batches rows through host_quant_dot_pairs.c,
 * two rows to a 512-bit register.
 *
 * Batch invariance: each activation row keeps its own accumulators (for Q4_1's offset
 * terms, its own lane of one register) and gets exactly the roundings of the one-row
 * kernel, in the same order: the same products of the same values (a float scale is the
 * exact conversion of its F16), so its result is bit for bit what host_vec_dot_fn gives
 * for it alone (test_quant_dot_rows checks this). A token's result therefore does not
 * depend on which rows share its call.
 */
#include "gpu/host/host_internal.h"
#include "quant/quant.h"

/* The activation scales of a group of up to HOST_DOT_ROWS rows, as floats: per block,
 * the rows' d and then their s (Q8_1 only), HOST_ROWS_SCALES_PER_BLOCK floats. Written
 * once per row by the matmul's quantize phase (host__rows_scales_row), read by every
 * weight row's call: the kernels then skip converting each row's F16 scales per weight
 * row, and one multiply-add takes the four rows' s terms. */
enum { SCALES_S = HOST_DOT_ROWS }; /* where a block's s values start */
_Static_assert(HOST_DOT_ROWS == 4, "a group's d (or s) values fill one __m128; one entry case per row count");

size_t host__rows_scales_bytes(int64_t k, int64_t rows) {
    const size_t groups = (size_t)(rows + HOST_DOT_ROWS - 1) / HOST_DOT_ROWS;
    return groups * (size_t)(k / QUANT_QK) * HOST_ROWS_SCALES_PER_BLOCK * sizeof(float);
}

float *host__rows_scales_group(float *scales, int64_t k, int64_t first_row) {
    return scales + (size_t)(first_row / HOST_DOT_ROWS) * (size_t)(k / QUANT_QK) * HOST_ROWS_SCALES_PER_BLOCK;
}

void host__rows_scales_row(quant_type act_type, const void *act_row, int64_t k, int64_t r, float *scales) {
    float *group = host__rows_scales_group(scales, k, r);
    const int lane = (int)(r % HOST_DOT_ROWS);
    const int64_t nb = k / QUANT_QK;
    for (int64_t ib = 0; ib < nb; ib++) {
        float *block = group + ib * HOST_ROWS_SCALES_PER_BLOCK;
        if (act_type == QUANT_Q8_1) {
            const quant_block_q8_1 *ab = (const quant_block_q8_1 *)act_row + ib;
            block[lane] = quant_f16_to_f32(ab->d);
            block[SCALES_S + lane] = quant_f16_to_f32(ab->s);
        } else {
            block[lane] = quant_f16_to_f32(((const quant_block_q8_0 *)act_row + ib)->d);
            block[SCALES_S + lane] = 0.0f;
        }
    }
}

#if HOST_SIMD_AVX2

/* Every loop over the rows (r < n_rows, a constant in each entry point) is unrolled,
 * so the accumulators live in registers (a rolled loop keeps them in memory, and each
 * fma then waits on a store). */
#define UNROLL_ROWS _Pragma("GCC unroll 4")

#define ACT_ROW(type, a, stride, r) ((const type *)((const char *)(a) + (size_t)(r) * (stride)))

#define ROWS_BODY static HOST_AVX2_TARGET inline __attribute__((always_inline))

/* dot_avx2_q4_1 of host_quant_dot.c for n_rows rows (see there for the summation
 * order): row r's d_w * d_a and its running sum of m_w * s_a are the same single
 * roundings as there, taken from the float scales (exact conversions of the same F16). */
ROWS_BODY void rows_q4_1(const int n_rows, const void *w, const void *a, size_t a_stride, const float *scales,
                         int64_t n, float *out, size_t out_stride) {
    const quant_block_q4_1 *wb = w; /* (nb) */
    const quant_block_q8_1 *ab[HOST_DOT_ROWS];
    UNROLL_ROWS
    for (int r = 0; r < n_rows; r++) ab[r] = ACT_ROW(quant_block_q8_1, a, a_stride, r);
    const int64_t nb = n / QUANT_QK;
    __m256 acc[HOST_DOT_ROWS];
    __m128 summs = _mm_setzero_ps(); /* lane r: row r's sum of m_w * s_a */
    UNROLL_ROWS
    for (int r = 0; r < n_rows; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        __builtin_prefetch(&wb[nb + ib], 0, 3); /* the next weight row: the matmul's next call */
        const __m128 pair_w = avx2_f16_pair(&wb[ib].d);
        const __m256 d_w = _mm256_broadcastss_ps(pair_w);
        const float *block = scales + ib * HOST_ROWS_SCALES_PER_BLOCK;
        summs = _mm_fmadd_ps(_mm_shuffle_ps(pair_w, pair_w, 0x55), _mm_loadu_ps(block + SCALES_S), summs);
        const __m256i qw = avx2_nibbles(wb[ib].qs);
        UNROLL_ROWS
        for (int r = 0; r < n_rows; r++) {
            const __m256 dd = _mm256_mul_ps(d_w, _mm256_broadcast_ss(block + r));
            const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[r][ib].qs);
            const __m256 isum = _mm256_cvtepi32_ps(avx2_dot_u8s8(qw, qa));
            acc[r] = _mm256_fmadd_ps(dd, isum, acc[r]);
        }
    }
    float summ[HOST_DOT_ROWS]; /* the four lanes of summs */
    _mm_storeu_ps(summ, summs);
    UNROLL_ROWS
    for (int r = 0; r < n_rows; r++) out[(size_t)r * out_stride] = host__avx2_hsum(acc[r]) + summ[r];
}

/* The Q8_0 activation side of dot_avx2_q8_0 / dot_avx2_q4_0 for one block of n_rows
 * rows, given the block's signed weight bytes qw and its scale d_w (broadcast): |qw|
 * once, its sign moved onto each activation (avx2_dot_s8s8 split in its two halves). */
ROWS_BODY void rows_block_q8_0(const int n_rows, __m256 d_w, __m256i qw, const quant_block_q8_0 *const *ab,
                               const float *block, int64_t ib, __m256 *acc) {
    const __m256i qw_abs = _mm256_sign_epi8(qw, qw);
    UNROLL_ROWS
    for (int r = 0; r < n_rows; r++) {
        const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[r][ib].qs);
        const __m256 isum = _mm256_cvtepi32_ps(avx2_dot_u8s8(qw_abs, _mm256_sign_epi8(qa, qw)));
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d_w, _mm256_broadcast_ss(block + r)), isum, acc[r]);
    }
}

/* Q8_0 and Q4_0 weights (both paired with Q8_0 activations); q4 unpacks q - 8. */
ROWS_BODY void rows_q8_0_like(const int n_rows, bool q4, const void *w, const void *a, size_t a_stride,
                              const float *scales, int64_t n, float *out, size_t out_stride) {
    const quant_block_q8_0 *ab[HOST_DOT_ROWS];
    UNROLL_ROWS
    for (int r = 0; r < n_rows; r++) ab[r] = ACT_ROW(quant_block_q8_0, a, a_stride, r);
    const int64_t nb = n / QUANT_QK;
    __m256 acc[HOST_DOT_ROWS];
    UNROLL_ROWS
    for (int r = 0; r < n_rows; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *block = scales + ib * HOST_ROWS_SCALES_PER_BLOCK;
        if (q4) {
            __builtin_prefetch((const quant_block_q4_0 *)w + nb + ib, 0, 3); /* the next weight row */
            const quant_block_q4_0 *wb = (const quant_block_q4_0 *)w + ib;
            rows_block_q8_0(n_rows, _mm256_broadcastss_ps(avx2_f16_pair(&wb->d)),
                            _mm256_sub_epi8(avx2_nibbles(wb->qs), _mm256_set1_epi8(8)), ab, block, ib, acc);
        } else {
            __builtin_prefetch((const quant_block_q8_0 *)w + nb + ib, 0, 3); /* the next weight row */
            const quant_block_q8_0 *wb = (const quant_block_q8_0 *)w + ib;
            rows_block_q8_0(n_rows, _mm256_broadcastss_ps(avx2_f16_pair(&wb->d)),
                            _mm256_loadu_si256((const __m256i *)wb->qs), ab, block, ib, acc);
        }
    }
    UNROLL_ROWS
    for (int r = 0; r < n_rows; r++) out[(size_t)r * out_stride] = host__avx2_hsum(acc[r]);
}

/* ---- the entry points (the avx2 set; the avx512 set batches rows through the pair
 * kernels of host_quant_dot_pairs.c instead) ---- */

/* One entry per type; each count is its own inlined copy of the loop. */
#define ROWS_ENTRY(name, call)                                                                                        \
    static HOST_AVX2_TARGET void name(int n_rows, const void *w, const void *a, size_t a_stride, const float *scales, \
                                      int64_t n, float *out, size_t out_stride) {                                     \
        switch (n_rows) {                                                                                             \
        case 2: call(2); break;                                                                                       \
        case 3: call(3); break;                                                                                       \
        case 4: call(4); break;                                                                                       \
        default: SP_ASSERT(!"n_rows is 2 to HOST_DOT_ROWS");                                                          \
        }                                                                                                             \
    }

#define CALL_Q4_1(rows) rows_q4_1(rows, w, a, a_stride, scales, n, out, out_stride)
#define CALL_Q8_0(rows) rows_q8_0_like(rows, false, w, a, a_stride, scales, n, out, out_stride)
#define CALL_Q4_0(rows) rows_q8_0_like(rows, true, w, a, a_stride, scales, n, out, out_stride)
ROWS_ENTRY(dot_rows_avx2_q4_1, CALL_Q4_1)
ROWS_ENTRY(dot_rows_avx2_q8_0, CALL_Q8_0)
ROWS_ENTRY(dot_rows_avx2_q4_0, CALL_Q4_0)

static const host_vec_dot_rows_fn dot_rows_avx2[QUANT_TYPE_LIMIT] = {
    [QUANT_Q4_0] = dot_rows_avx2_q4_0,
    [QUANT_Q4_1] = dot_rows_avx2_q4_1,
    [QUANT_Q8_0] = dot_rows_avx2_q8_0,
};

host_vec_dot_rows_fn host__vec_dot_rows_for(sp_cpu_isa isa, quant_type t) {
    if ((unsigned)t >= QUANT_TYPE_LIMIT || isa != SP_CPU_ISA_AVX2) return NULL;
    return dot_rows_avx2[t];
}

#else /* !HOST_SIMD_AVX2 */

host_vec_dot_rows_fn host__vec_dot_rows_for(sp_cpu_isa isa, quant_type t) {
    (void)isa;
    (void)t;
    return NULL;
}

#endif

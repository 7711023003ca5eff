/* host_quant_dot.c: the CPU backend's row kernels: dot products of a weight row with
 * an activation row, and the quantization of float activations into the 8-bit (or
 * half) format each weight type pairs with. AVX2+FMA+F16C versions are chosen at run
 * time (this file is compiled for plain x86-64; the SIMD functions carry a target
 * attribute); portable fallbacks call the plain-C reference of quant/quant.c.
 *
 * Legend: n = elements in the row (K of the matmul); ib = block index, nb = blocks in
 * the row; QK = 32 elements per block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1); QK_K = 256
 * elements per super-block (Q4_K, Q5_K, Q6_K, Q8_K); sb = sub-block of a super-block.
 * w = weight row (its own type), a = activation row (quant_vec_dot_type of w's type).
 *
 * Every kernel computes exactly the integers of quant_vec_dot_ref (per-block sums of
 * q_w * q_a) and the same per-block scale products; only the order in which the
 * float terms are added differs. The 32-element AVX2 kernels add them in exactly
 * ggml's AVX2 order (see below), so their results equal llama.cpp's bit for bit. The
 * quantizers produce the reference's bytes exactly (same scale arithmetic, same
 * rounding: half to even everywhere, as ggml's AVX2 quantizers round).
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "gpu/host/host_internal.h"
#include "quant/quant.h"

/* ---- portable fallbacks -------------------------------------------------------------- */

#define HOST_GENERIC_DOT(name, type)                             \
    static float name(const void *w, const void *a, int64_t n) { \
        return quant_vec_dot_ref(type, w, a, n);                 \
    }

HOST_GENERIC_DOT(dot_generic_f32, QUANT_F32)
HOST_GENERIC_DOT(dot_generic_f16, QUANT_F16)
HOST_GENERIC_DOT(dot_generic_bf16, QUANT_BF16)
HOST_GENERIC_DOT(dot_generic_q4_0, QUANT_Q4_0)
HOST_GENERIC_DOT(dot_generic_q4_1, QUANT_Q4_1)
HOST_GENERIC_DOT(dot_generic_q5_0, QUANT_Q5_0)
HOST_GENERIC_DOT(dot_generic_q5_1, QUANT_Q5_1)
HOST_GENERIC_DOT(dot_generic_q8_0, QUANT_Q8_0)
HOST_GENERIC_DOT(dot_generic_q4_k, QUANT_Q4_K)
HOST_GENERIC_DOT(dot_generic_q5_k, QUANT_Q5_K)
HOST_GENERIC_DOT(dot_generic_q6_k, QUANT_Q6_K)

#define HOST_GENERIC_QUANTIZE(name, type)                      \
    static void name(void *dst, const float *src, int64_t n) { \
        quant_quantize_row(type, dst, src, n);                 \
    }

HOST_GENERIC_QUANTIZE(quantize_generic_f32, QUANT_F32)
HOST_GENERIC_QUANTIZE(quantize_generic_f16, QUANT_F16)
HOST_GENERIC_QUANTIZE(quantize_generic_bf16, QUANT_BF16)
HOST_GENERIC_QUANTIZE(quantize_generic_q8_0, QUANT_Q8_0)
HOST_GENERIC_QUANTIZE(quantize_generic_q8_1, QUANT_Q8_1)
HOST_GENERIC_QUANTIZE(quantize_generic_q8_k, QUANT_Q8_K)

static const host_vec_dot_fn dot_generic[QUANT_TYPE_LIMIT] = {
    [QUANT_F32] = dot_generic_f32,   [QUANT_F16] = dot_generic_f16,   [QUANT_BF16] = dot_generic_bf16,
    [QUANT_Q4_0] = dot_generic_q4_0, [QUANT_Q4_1] = dot_generic_q4_1, [QUANT_Q5_0] = dot_generic_q5_0,
    [QUANT_Q5_1] = dot_generic_q5_1, [QUANT_Q8_0] = dot_generic_q8_0, [QUANT_Q4_K] = dot_generic_q4_k,
    [QUANT_Q5_K] = dot_generic_q5_k, [QUANT_Q6_K] = dot_generic_q6_k,
};

static const host_quantize_fn quantize_generic[QUANT_TYPE_LIMIT] = {
    [QUANT_F32] = quantize_generic_f32,   [QUANT_F16] = quantize_generic_f16,   [QUANT_BF16] = quantize_generic_bf16,
    [QUANT_Q8_0] = quantize_generic_q8_0, [QUANT_Q8_1] = quantize_generic_q8_1, [QUANT_Q8_K] = quantize_generic_q8_k,
};

#if HOST_SIMD_AVX2

/* ---- AVX2 dot products: 32-element formats ------------------------------------------- */

/* These follow ggml's AVX2 kernels operation for operation (llama.cpp's CPU results are
 * what spindle is compared against, and this model family amplifies 1-ulp differences):
 * ONE 8-lane accumulator, acc = fma(d_w*d_a, isum_lanes, acc) block by block, the
 * minimum terms summed separately in a scalar with fma(m_w, s_a, summs) in block order,
 * and the result hsum(acc) + summs with avx2_hsum's order. */

/* Q4_1/Q5_1 blocks start with (d, m) and Q8_1 blocks with (d, s): one conversion
 * each gives both. Lane 0 of their product is d_w*d_a; lane 1 of
 * fma(pair_w, pair_a, summs) is ggml's compiled `summs += m * s` (one rounding), so
 * the sum of the min terms lives in lane 1 of a vector (lane 0 is ignored). */
static HOST_AVX2_TARGET float dot_avx2_q4_1(const void *w, const void *a, int64_t n) {
    const quant_block_q4_1 *wb = w; /* (nb) */
    const quant_block_q8_1 *ab = a; /* (nb) */
    const int64_t nb = n / QUANT_QK;
    __m256 acc = _mm256_setzero_ps();
    __m128 summs = _mm_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m128 pair_w = avx2_f16_pair(&wb[ib].d);
        const __m128 pair_a = avx2_f16_pair(&ab[ib].d);
        summs = _mm_fmadd_ps(pair_w, pair_a, summs);
        const __m256 dd = _mm256_broadcastss_ps(_mm_mul_ss(pair_w, pair_a));
        const __m256i qw = avx2_nibbles(wb[ib].qs);
        const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[ib].qs);
        const __m256 isum = _mm256_cvtepi32_ps(avx2_dot_u8s8(qw, qa));
        acc = _mm256_fmadd_ps(dd, isum, acc);
    }
    return host__avx2_hsum(acc) + _mm_cvtss_f32(_mm_movehdup_ps(summs));
}

static HOST_AVX2_TARGET float dot_avx2_q8_0(const void *w, const void *a, int64_t n) {
    const quant_block_q8_0 *wb = w; /* (nb) */
    const quant_block_q8_0 *ab = a; /* (nb) */
    const int64_t nb = n / QUANT_QK;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i qw = _mm256_loadu_si256((const __m256i *)wb[ib].qs);
        const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[ib].qs);
        const __m256 isum = _mm256_cvtepi32_ps(avx2_dot_s8s8(qw, qa));
        acc = _mm256_fmadd_ps(avx2_scale_product(&wb[ib].d, &ab[ib].d), isum, acc);
    }
    return host__avx2_hsum(acc);
}

/* Q4_0: q - 8 as signed bytes, then a signed dot with Q8_0. */
static HOST_AVX2_TARGET float dot_avx2_q4_0(const void *w, const void *a, int64_t n) {
    const quant_block_q4_0 *wb = w; /* (nb) */
    const quant_block_q8_0 *ab = a; /* (nb) */
    const int64_t nb = n / QUANT_QK;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i qw = _mm256_sub_epi8(avx2_nibbles(wb[ib].qs), _mm256_set1_epi8(8));
        const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[ib].qs);
        const __m256 isum = _mm256_cvtepi32_ps(avx2_dot_s8s8(qw, qa));
        acc = _mm256_fmadd_ps(avx2_scale_product(&wb[ib].d, &ab[ib].d), isum, acc);
    }
    return host__avx2_hsum(acc);
}

/* Q5_0: q - 16 = nibble when the fifth bit is set, nibble - 16 (= nibble | 0xF0 as a
 * signed byte) when it is clear. */
static HOST_AVX2_TARGET float dot_avx2_q5_0(const void *w, const void *a, int64_t n) {
    const quant_block_q5_0 *wb = w; /* (nb) */
    const quant_block_q8_0 *ab = a; /* (nb) */
    const int64_t nb = n / QUANT_QK;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i high_set = avx2_bits_to_bytes(wb[ib].qh);
        const __m256i minus16 = _mm256_andnot_si256(high_set, _mm256_set1_epi8((char)0xF0));
        const __m256i qw = _mm256_or_si256(avx2_nibbles(wb[ib].qs), minus16);
        const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[ib].qs);
        const __m256 isum = _mm256_cvtepi32_ps(avx2_dot_s8s8(qw, qa));
        acc = _mm256_fmadd_ps(avx2_scale_product(&wb[ib].d, &ab[ib].d), isum, acc);
    }
    return host__avx2_hsum(acc);
}

static HOST_AVX2_TARGET float dot_avx2_q5_1(const void *w, const void *a, int64_t n) {
    const quant_block_q5_1 *wb = w; /* (nb) */
    const quant_block_q8_1 *ab = a; /* (nb) */
    const int64_t nb = n / QUANT_QK;
    __m256 acc = _mm256_setzero_ps();
    __m128 summs = _mm_setzero_ps(); /* lane 1, as in Q4_1 */
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m128 pair_w = avx2_f16_pair(&wb[ib].d);
        const __m128 pair_a = avx2_f16_pair(&ab[ib].d);
        summs = _mm_fmadd_ps(pair_w, pair_a, summs);
        const __m256 dd = _mm256_broadcastss_ps(_mm_mul_ss(pair_w, pair_a));
        const __m256i high = _mm256_and_si256(avx2_bits_to_bytes(wb[ib].qh), _mm256_set1_epi8(0x10));
        const __m256i qw = _mm256_or_si256(avx2_nibbles(wb[ib].qs), high);
        const __m256i qa = _mm256_loadu_si256((const __m256i *)ab[ib].qs);
        const __m256 isum = _mm256_cvtepi32_ps(avx2_dot_u8s8(qw, qa));
        acc = _mm256_fmadd_ps(isum, dd, acc);
    }
    return host__avx2_hsum(acc) + _mm_cvtss_f32(_mm_movehdup_ps(summs));
}

/* ---- AVX2 dot products: K-quants ------------------------------------------------------ */

/* The 8 six-bit scales (bytes 0..7) and mins (bytes 8..15) of a Q4_K/Q5_K block, the
 * same values quant_k4_scale_min() reads one at a time. */
static HOST_AVX2_TARGET inline __m128i avx2_k4_scales_mins(const uint8_t packed[QUANT_K_SCALE_BYTES]) {
    uint32_t word[3];
    memcpy(word, packed, sizeof word);
    const uint32_t low6 = 0x3F3F3F3F, low4 = 0x0F0F0F0F, low2 = 0x03030303;
    const uint32_t scales_0_3 = word[0] & low6;
    const uint32_t mins_0_3 = word[1] & low6;
    const uint32_t scales_4_7 = (word[2] & low4) | (((word[0] >> 6) & low2) << 4);
    const uint32_t mins_4_7 = ((word[2] >> 4) & low4) | (((word[1] >> 6) & low2) << 4);
    return _mm_setr_epi32((int)scales_0_3, (int)scales_4_7, (int)mins_0_3, (int)mins_4_7);
}

/* Broadcasts int16 lane sb (0..7) of each 128-bit half of v to the whole half. */
static HOST_AVX2_TARGET inline __m256i avx2_broadcast_i16(__m256i v, int sb) {
    const short pick = (short)(0x0100 + 0x0202 * sb);
    return _mm256_shuffle_epi8(v, _mm256_set1_epi16(pick));
}

/* sum over sb of mn[sb] * (bsums[2sb] + bsums[2sb+1]), as 8 int32 lanes. */
static HOST_AVX2_TARGET inline __m256i avx2_k4_min_sums(__m128i scales_mins, const int16_t *bsums) {
    const __m128i dup = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scales_mins, dup));
    const __m256i sums16 = _mm256_loadu_si256((const __m256i *)bsums);
    return _mm256_madd_epi16(sums16, mins16);
}

/* Q4_K/Q5_K x Q8_K share the loop; qh is NULL for Q4_K. In chunk c (64 elements) the
 * low nibbles are sub-block 2c and the high nibbles sub-block 2c+1. */
static HOST_AVX2_TARGET inline void avx2_k4_superblock(__m256 *acc, __m256 *min_acc, const quant_block_q8_k *a,
                                                       uint16_t d_w, uint16_t dmin_w, const uint8_t *scales,
                                                       const uint8_t *qs, const uint8_t *qh) {
    const __m128i scales_mins = avx2_k4_scales_mins(scales);
    const __m256i scales16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scales_mins));
    const __m256i low_mask = _mm256_set1_epi8(0x0F);
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    __m256i high_bits = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int chunk = 0; chunk < QUANT_QK_K / 64; chunk++) {
        const int sb_low = 2 * chunk;
        const int sb_high = 2 * chunk + 1;
        const __m256i packed = _mm256_loadu_si256((const __m256i *)(qs + 32 * chunk));
        __m256i q_low = _mm256_and_si256(packed, low_mask);
        __m256i q_high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
        if (qh) {
            /* bit 0 of each byte -> 0x10 of the low values, bit 1 -> the high values */
            q_low = _mm256_or_si256(q_low, _mm256_and_si256(_mm256_slli_epi16(high_bits, 4), bit4));
            q_high = _mm256_or_si256(q_high, _mm256_and_si256(_mm256_slli_epi16(high_bits, 3), bit4));
            high_bits = _mm256_srli_epi16(high_bits, 2);
        }
        const __m256i a_low = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * chunk));
        const __m256i a_high = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * chunk + 32));
        const __m256i p_low = _mm256_maddubs_epi16(q_low, a_low);
        const __m256i p_high = _mm256_maddubs_epi16(q_high, a_high);
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p_low, avx2_broadcast_i16(scales16, sb_low)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p_high, avx2_broadcast_i16(scales16, sb_high)));
    }
    const float d = _cvtsh_ss(d_w) * a->d;
    const float dmin = _cvtsh_ss(dmin_w) * a->d;
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), *acc);
    const __m256i msum = avx2_k4_min_sums(scales_mins, a->bsums);
    *min_acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), *min_acc);
}

static HOST_AVX2_TARGET float dot_avx2_q4_k(const void *w, const void *a, int64_t n) {
    const quant_block_q4_k *wb = w; /* (nb) */
    const quant_block_q8_k *ab = a; /* (nb) */
    const int64_t nb = n / QUANT_QK_K;
    __m256 acc = _mm256_setzero_ps(), min_acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const quant_block_q4_k *b = &wb[ib];
        avx2_k4_superblock(&acc, &min_acc, &ab[ib], b->d, b->dmin, b->scales, b->qs, NULL);
    }
    return host__avx2_hsum(acc) - host__avx2_hsum(min_acc);
}

static HOST_AVX2_TARGET float dot_avx2_q5_k(const void *w, const void *a, int64_t n) {
    const quant_block_q5_k *wb = w; /* (nb) */
    const quant_block_q8_k *ab = a; /* (nb) */
    const int64_t nb = n / QUANT_QK_K;
    __m256 acc = _mm256_setzero_ps(), min_acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const quant_block_q5_k *b = &wb[ib];
        avx2_k4_superblock(&acc, &min_acc, &ab[ib], b->d, b->dmin, b->scales, b->qs, b->qh);
    }
    return host__avx2_hsum(acc) - host__avx2_hsum(min_acc);
}

/* Q6_K x Q8_K: q in 0..63 (unsigned) times q_a, scaled per 16 elements by madd with
 * the int16 scales; the bias of 32 is taken out once per super-block as
 * 32 * sum(sc * bsums). In half h, quarter k (32 elements) covers sub-blocks
 * 8h + 2k (bytes 0..15) and 8h + 2k + 1 (bytes 16..31). */
/* A Q6_K value 0..63 from its low nibble (bits 0-3 of low) and top two bits (bits 4-5
 * of high, already shifted into place). */
static HOST_AVX2_TARGET inline __m256i avx2_q6_join(__m256i low, __m256i high) {
    const __m256i low_part = _mm256_and_si256(low, _mm256_set1_epi8(0x0F));
    const __m256i high_part = _mm256_and_si256(high, _mm256_set1_epi8(0x30));
    return _mm256_or_si256(low_part, high_part);
}

static HOST_AVX2_TARGET float dot_avx2_q6_k(const void *w, const void *a, int64_t n) {
    const quant_block_q6_k *wb = w; /* (nb) */
    const quant_block_q8_k *ab = a; /* (nb) */
    const int64_t nb = n / QUANT_QK_K;
    /* picks scale bytes 2s (first 8 int16) and 2s+1 (last 8) once widened */
    const __m128i pick_pair = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const quant_block_q6_k *b = &wb[ib];
        const int8_t *qa = ab[ib].qs;
        const __m128i scales8 = _mm_loadu_si128((const __m128i *)b->scales);
        __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int half = 0; half < 2; half++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * half));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * half + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * half));
            __m256i q[4];
            q[0] = avx2_q6_join(ql0, _mm256_slli_epi16(qh, 4));
            q[1] = avx2_q6_join(ql1, _mm256_slli_epi16(qh, 2));
            q[2] = avx2_q6_join(_mm256_srli_epi16(ql0, 4), qh);
            q[3] = avx2_q6_join(_mm256_srli_epi16(ql1, 4), _mm256_srli_epi16(qh, 2));
#pragma GCC unroll 4
            for (int quarter = 0; quarter < 4; quarter++) {
                const int pair = 4 * half + quarter; /* sub-blocks 2*pair, 2*pair + 1 */
                const int e0 = 128 * half + 32 * quarter;
                const __m128i pick = _mm_add_epi8(pick_pair, _mm_set1_epi8((char)(2 * pair)));
                const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales8, pick));
                const __m256i qa_v = _mm256_loadu_si256((const __m256i *)(qa + e0));
                const __m256i prod = _mm256_maddubs_epi16(q[quarter], qa_v);
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(prod, sc16));
            }
        }
        /* minus 32 * sum over sub-blocks of sc * bsums */
        const __m256i bsums = _mm256_loadu_si256((const __m256i *)ab[ib].bsums);
        const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(scales8)), 5);
        isum = _mm256_sub_epi32(isum, bias);
        const float d = _cvtsh_ss(b->d) * ab[ib].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), acc);
    }
    return host__avx2_hsum(acc);
}

/* ---- AVX2 dot products: float formats ------------------------------------------------- */

static HOST_AVX2_TARGET float dot_avx2_f32(const void *w, const void *a, int64_t n) {
    const float *x = w; /* (n) */
    const float *y = a; /* (n) */
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const int64_t at = i + 8 * k;
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + at), _mm256_loadu_ps(y + at), acc[k]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    }
    float sum = host__avx2_hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += x[i] * y[i];
    return sum;
}

/* F16 and BF16 rows share one loop that differs only in how 8 (load8) or 1 (to_f32)
 * 16-bit values become floats; always_inline with constant arguments, so each entry
 * point compiles to its own loop with the conversion inlined. x, y: (n). */
typedef __m256 (*avx2_half_load8_fn)(const uint16_t *p);
typedef float (*avx2_half_to_f32_fn)(uint16_t h);

static HOST_AVX2_TARGET inline __attribute__((always_inline)) float
avx2_dot_half(const uint16_t *x, const uint16_t *y, int64_t n, avx2_half_load8_fn load8, avx2_half_to_f32_fn to_f32) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const int64_t at = i + 8 * k;
            acc[k] = _mm256_fmadd_ps(load8(x + at), load8(y + at), acc[k]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        acc[0] = _mm256_fmadd_ps(load8(x + i), load8(y + i), acc[0]);
    }
    float sum = host__avx2_hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += to_f32(x[i]) * to_f32(y[i]);
    return sum;
}

static HOST_AVX2_TARGET inline __m256 avx2_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static HOST_AVX2_TARGET inline float avx2_f16_to_f32(uint16_t h) {
    return _cvtsh_ss(h);
}

static HOST_AVX2_TARGET float dot_avx2_f16(const void *w, const void *a, int64_t n) {
    return avx2_dot_half(w, a, n, avx2_load_f16, avx2_f16_to_f32);
}

static HOST_AVX2_TARGET inline __m256 avx2_load_bf16(const uint16_t *p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

static HOST_AVX2_TARGET float dot_avx2_bf16(const void *w, const void *a, int64_t n) {
    return avx2_dot_half(w, a, n, avx2_load_bf16, quant_bf16_to_f32);
}

/* ---- AVX2 activation quantizers -------------------------------------------------------- */

static HOST_AVX2_TARGET inline float avx2_hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Packs 4 x 8 int32 (each in -128..127) into 32 int8 in element order. */
static HOST_AVX2_TARGET inline __m256i avx2_pack_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i p01 = _mm256_packs_epi32(i0, i1); /* 0-3 8-11 | 4-7 12-15 */
    const __m256i p23 = _mm256_packs_epi32(i2, i3);
    const __m256i bytes = _mm256_packs_epi16(p01, p23);
    return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One block of 32 floats -> scale d = amax / 127 and 32 int8 in qs, as ggml's AVX2
 * quantize_row_q8_0/q8_1: multiplier 127 / amax, round half to even; returns the
 * 8-lane int32 values for sums. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) __m256i avx2_q8_block(const float *x, uint16_t *d_out,
                                                                                    int8_t *qs, float *d_value) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[k]));
    }
    const float max = avx2_hmax(amax);
    const float d = max / 127.0f;
    const float id = max != 0.0f ? 127.0f / max : 0.0f;
    *d_out = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    *d_value = d;
    const __m256 scale = _mm256_set1_ps(id);
    __m256i q[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256 rounded =
            _mm256_round_ps(_mm256_mul_ps(v[k], scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_cvtps_epi32(rounded);
    }
    _mm256_storeu_si256((__m256i *)qs, avx2_pack_i8(q[0], q[1], q[2], q[3]));
    return _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
}

static HOST_AVX2_TARGET void quantize_avx2_q8_0(void *dst, const float *src, int64_t n) {
    quant_block_q8_0 *y = dst; /* (nb) */
    const int64_t nb = n / QUANT_QK;
    for (int64_t ib = 0; ib < nb; ib++) {
        float d;
        avx2_q8_block(src + ib * QUANT_QK, &y[ib].d, y[ib].qs, &d);
    }
}

static HOST_AVX2_TARGET void quantize_avx2_q8_1(void *dst, const float *src, int64_t n) {
    quant_block_q8_1 *y = dst; /* (nb) */
    const int64_t nb = n / QUANT_QK;
    for (int64_t ib = 0; ib < nb; ib++) {
        float d;
        const __m256i sums = avx2_q8_block(src + ib * QUANT_QK, &y[ib].d, y[ib].qs, &d);
        y[ib].s = _cvtss_sh((float)avx2_hsum_i32(sums) * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* Q8_K: d = max / -127 with max the first element of largest magnitude, q rounded
 * half to even and clamped at 127, bsums over 16 elements. */
static HOST_AVX2_TARGET void quantize_avx2_q8_k(void *dst, const float *src, int64_t n) {
    quant_block_q8_k *y = dst; /* (nb) */
    const int64_t nb = n / QUANT_QK_K;
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK_K;
        __m256 amax_v = _mm256_setzero_ps();
        for (int e = 0; e < QUANT_QK_K; e += 8) {
            amax_v = _mm256_max_ps(amax_v, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + e)));
        }
        const float amax = avx2_hmax(amax_v);
        if (amax == 0.0f) {
            memset(&y[ib], 0, sizeof y[ib]);
            continue;
        }
        float max = 0.0f;
        for (int e = 0; e < QUANT_QK_K; e++) {
            if (fabsf(x[e]) == amax) {
                max = x[e];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 scale = _mm256_set1_ps(iscale);
        const __m256i limit = _mm256_set1_epi32(127);
        for (int e0 = 0; e0 < QUANT_QK_K; e0 += 32) {
            __m256i q[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x + e0 + 8 * k), scale);
                const __m256 rounded = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(rounded), limit);
            }
            _mm256_storeu_si256((__m256i *)(y[ib].qs + e0), avx2_pack_i8(q[0], q[1], q[2], q[3]));
            const int group = e0 / 16;
            y[ib].bsums[group] = (int16_t)avx2_hsum_i32(_mm256_add_epi32(q[0], q[1]));
            y[ib].bsums[group + 1] = (int16_t)avx2_hsum_i32(_mm256_add_epi32(q[2], q[3]));
        }
        y[ib].d = 1.0f / iscale;
    }
}

static HOST_AVX2_TARGET void quantize_avx2_f16(void *dst, const float *src, int64_t n) {
    uint16_t *y = dst; /* (n) */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(y + i), h);
    }
    for (; i < n; i++) y[i] = quant_f32_to_f16(src[i]);
}

static HOST_AVX2_TARGET void quantize_avx2_bf16(void *dst, const float *src, int64_t n) {
    uint16_t *y = dst; /* (n) */
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i half[2];
#pragma GCC unroll 4
        for (int k = 0; k < 2; k++) {
            const __m256 v = _mm256_loadu_ps(src + i + 8 * k);
            const __m256i bits = _mm256_castps_si256(v);
            const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
            const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd);
            const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
            const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
            const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            half[k] = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
        }
        const __m256i packed = _mm256_packus_epi32(half[0], half[1]); /* 0-3 8-11 | 4-7 12-15 */
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    for (; i < n; i++) y[i] = quant_f32_to_bf16(src[i]);
}

static HOST_AVX2_TARGET void quantize_avx2_f32(void *dst, const float *src, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static const host_vec_dot_fn dot_avx2[QUANT_TYPE_LIMIT] = {
    [QUANT_F32] = dot_avx2_f32,   [QUANT_F16] = dot_avx2_f16,   [QUANT_BF16] = dot_avx2_bf16,
    [QUANT_Q4_0] = dot_avx2_q4_0, [QUANT_Q4_1] = dot_avx2_q4_1, [QUANT_Q5_0] = dot_avx2_q5_0,
    [QUANT_Q5_1] = dot_avx2_q5_1, [QUANT_Q8_0] = dot_avx2_q8_0, [QUANT_Q4_K] = dot_avx2_q4_k,
    [QUANT_Q5_K] = dot_avx2_q5_k, [QUANT_Q6_K] = dot_avx2_q6_k,
};

static const host_quantize_fn quantize_avx2[QUANT_TYPE_LIMIT] = {
    [QUANT_F32] = quantize_avx2_f32,   [QUANT_F16] = quantize_avx2_f16,   [QUANT_BF16] = quantize_avx2_bf16,
    [QUANT_Q8_0] = quantize_avx2_q8_0, [QUANT_Q8_1] = quantize_avx2_q8_1, [QUANT_Q8_K] = quantize_avx2_q8_k,
};

#else /* !HOST_SIMD_AVX2 */

static const host_vec_dot_fn dot_avx2[QUANT_TYPE_LIMIT] = {0};
static const host_quantize_fn quantize_avx2[QUANT_TYPE_LIMIT] = {0};

#endif

/* ---- dispatch ------------------------------------------------------------------------- */

/* avx512 runs the avx2 one-row kernels: its own instructions pay in the multi-row
 * kernels (host_quant_dot_wrows.c), and the numbers stay the same. amx runs avx512's
 * except for the types it repacks. */
static float dot_amx_q4_0(const void *w, const void *a, int64_t n) {
    return host__amx_dot(QUANT_Q4_0, w, a, n);
}
static float dot_amx_q4_1(const void *w, const void *a, int64_t n) {
    return host__amx_dot(QUANT_Q4_1, w, a, n);
}
static float dot_amx_q8_0(const void *w, const void *a, int64_t n) {
    return host__amx_dot(QUANT_Q8_0, w, a, n);
}

host_vec_dot_fn host__vec_dot_for(sp_cpu_isa isa, quant_type t) {
    SP_ASSERT(isa != SP_CPU_ISA_AUTO);
    if ((unsigned)t >= QUANT_TYPE_LIMIT) return NULL;
    /* the amx set's own arithmetic for the types it repacks (host_amx.c) */
    if (isa == SP_CPU_ISA_AMX && t == QUANT_Q4_0) return dot_amx_q4_0;
    if (isa == SP_CPU_ISA_AMX && t == QUANT_Q4_1) return dot_amx_q4_1;
    if (isa == SP_CPU_ISA_AMX && t == QUANT_Q8_0) return dot_amx_q8_0;
    return isa >= SP_CPU_ISA_AVX2 ? dot_avx2[t] : dot_generic[t];
}

host_quantize_fn host__quantize_for(sp_cpu_isa isa, quant_type act_type) {
    SP_ASSERT(isa != SP_CPU_ISA_AUTO);
    if ((unsigned)act_type >= QUANT_TYPE_LIMIT) return NULL;
    return isa >= SP_CPU_ISA_AVX2 ? quantize_avx2[act_type] : quantize_generic[act_type];
}

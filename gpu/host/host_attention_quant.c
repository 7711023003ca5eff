/* host_attention_quant.c: the parts of attention that read quantized KV pools (Q8_0,
 * Q4_0: sp_kv_type), for host_attention.c, which keeps the softmax and the task split.
 *
 * Legend: Dh = head width (a multiple of 32 here), B = tokens per block, Hk = KV heads,
 * P = positions a token attends to, a "row" = one (token, KV head)'s Dh elements in
 * Dh/32 blocks of the pool's type.
 *
 * Arithmetic (not llama.cpp's: its quantized-KV attention is a flash-attention path of
 * its own; spindle keeps its non-flash order and changes only the two reads):
 *   - writing: each row is quantized on its own, Q8_0 as the activation quantizer does
 *     (host__quantize_for: amax/127, ties to even), Q4_0 as quant_quantize_row does
 *     (ggml's reference), so a token's blocks never depend on its batch;
 *   - scores: the query is quantized to Q8_0 and dotted with the K rows by the integer
 *     kernels the matmuls use (avx2 and avx512 give the same bits; the amx set uses
 *     avx512's here, its tiles only pay for matrices); times the scale;
 *   - values: out[d] = sum over positions j in order of p16[j] * V[j][d], each product
 *     one fused multiply-add of the stored integer (Q4_0: minus 8) by p16[j] times the
 *     block's scale. The AVX2 path converts each V block once for all the query heads
 *     of its KV head (up to 3 a pass, in registers) and makes the same operations in the
 *     same order as the portable one, so both give the same bits, however the heads are
 *     grouped. Positions are walked block by block (no division per position).
 * Every token reads only its own rows, so results do not depend on the batch.
 */
#include <string.h>

#include "gpu/host/host_internal.h"

/* The kernel set whose dot products the scores use (see the arithmetic above). */
static sp_cpu_isa scores_isa(sp_cpu_isa isa) {
    return isa == SP_CPU_ISA_AMX ? SP_CPU_ISA_AVX512 : isa;
}

void host__kv_quantize_row(sp_kv_type type, sp_cpu_isa isa, void *dst, const float *src, int64_t n) {
    if (type == SP_KV_Q8_0)
        host__quantize_for(isa, QUANT_Q8_0)(dst, src, n);
    else
        quant_quantize_row(dev_kv_quant_type(type), dst, src, n);
}

void host__attention_query_q8(sp_cpu_isa isa, void *q8, const float *q, int64_t head_dim) {
    host__quantize_for(isa, QUANT_Q8_0)(q8, q, head_dim);
}

/* Row of position j for KV head kv_head, from the layer's K or V pool. */
static inline const unsigned char *pool_row(const host_kv *kv, const unsigned char *pool, const int32_t *blocks,
                                            int32_t j, int64_t kv_head) {
    const dev_kv_shape *s = &kv->common.shape;
    return pool + (size_t)blocks[j / s->block_size] * kv->block_bytes +
           ((size_t)(j % s->block_size) * (size_t)s->n_kv_heads + (size_t)kv_head) * kv->row_bytes;
}

void host__attention_scores_quant(float *score, const host_kv *kv, const unsigned char *k_pool, const int32_t *blocks,
                                  int32_t n_pos, int64_t kv_head, const void *q8, float scale, sp_cpu_isa isa) {
    const dev_kv_shape *s = &kv->common.shape;
    const quant_type type = dev_kv_quant_type(s->kv_type);
    const host_vec_dot_fn dot = host__vec_dot_for(scores_isa(isa), type);
    const host_vec_dot_wrows_fn wrows = host__vec_dot_wrows_for(scores_isa(isa), type);
    const size_t stride = (size_t)s->n_kv_heads * kv->row_bytes; /* between positions of one block */
    int32_t j = 0;
    while (j < n_pos) {
        /* the positions of j's block: rows `stride` apart */
        const int32_t end =
            (j / s->block_size + 1) * s->block_size < n_pos ? (j / s->block_size + 1) * s->block_size : n_pos;
        const unsigned char *row = pool_row(kv, k_pool, blocks, j, kv_head);
        if (wrows)
            for (; j + HOST_DOT_WROWS <= end; j += HOST_DOT_WROWS, row += HOST_DOT_WROWS * stride) {
                wrows(row, stride, q8, s->head_dim, score + j);
                for (int r = 0; r < HOST_DOT_WROWS; r++) score[j + r] *= scale;
            }
        for (; j < end; j++, row += stride) score[j] = dot(row, q8, s->head_dim) * scale;
    }
}

/* ---- values: portable ---- */

/* The row of the first position of the block holding position `first` (a multiple of
 * B); the block's next positions follow kv_row_stride bytes apart. */
static inline const unsigned char *block_first_row(const host_kv *kv, const unsigned char *pool, const int32_t *blocks,
                                                   int32_t first, int64_t kv_head) {
    return pool + (size_t)blocks[first / kv->common.shape.block_size] * kv->block_bytes +
           (size_t)kv_head * kv->row_bytes;
}

static inline size_t kv_row_stride(const host_kv *kv) {
    return (size_t)kv->common.shape.n_kv_heads * kv->row_bytes;
}

/* acc (32) += w * block b of a row, element by element. */
static void values_block_generic(float *acc, sp_kv_type type, const unsigned char *row, int64_t b, float p) {
    if (type == SP_KV_Q8_0) {
        const quant_block_q8_0 *blk = (const quant_block_q8_0 *)row + b;
        const float w = p * quant_f16_to_f32(blk->d);
        for (int i = 0; i < QUANT_QK; i++) acc[i] = fmaf((float)blk->qs[i], w, acc[i]);
    } else {
        const quant_block_q4_0 *blk = (const quant_block_q4_0 *)row + b;
        const float w = p * quant_f16_to_f32(blk->d);
        for (int i = 0; i < QUANT_QK / 2; i++) {
            acc[i] = fmaf((float)((blk->qs[i] & 0x0F) - 8), w, acc[i]);
            acc[i + QUANT_QK / 2] = fmaf((float)((blk->qs[i] >> 4) - 8), w, acc[i + QUANT_QK / 2]);
        }
    }
}

static void values_generic(float *const *o, const uint16_t *const *p16, int nh, const host_kv *kv,
                           const unsigned char *v_pool, const int32_t *blocks, int32_t n_pos, int64_t kv_head) {
    const dev_kv_shape *s = &kv->common.shape;
    for (int h = 0; h < nh; h++) memset(o[h], 0, sizeof(float) * (size_t)s->head_dim);
    for (int32_t first = 0; first < n_pos; first += s->block_size) {
        const unsigned char *row = block_first_row(kv, v_pool, blocks, first, kv_head);
        const int32_t end = first + s->block_size < n_pos ? first + s->block_size : n_pos;
        for (int32_t j = first; j < end; j++, row += kv_row_stride(kv))
            for (int h = 0; h < nh; h++)
                for (int64_t b = 0; b < s->head_dim / QUANT_QK; b++)
                    values_block_generic(o[h] + b * QUANT_QK, s->kv_type, row, b, quant_f16_to_f32(p16[h][j]));
    }
}

/* ---- values: AVX2 (the portable path's operations, 8 widths at a time) ---- */

#if HOST_SIMD_AVX2

/* Block b of a row as four registers of 8 floats (widths 0..7, 8..15, ...) and its scale. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
block_values_avx2(sp_kv_type type, const unsigned char *row, int64_t b, __m256 out[4], float *scale) {
    __m128i lo, hi; /* widths 0..15 and 16..31 as int8 */
    if (type == SP_KV_Q8_0) {
        const quant_block_q8_0 *blk = (const quant_block_q8_0 *)row + b;
        *scale = _cvtsh_ss(blk->d);
        lo = _mm_loadu_si128((const __m128i *)blk->qs);
        hi = _mm_loadu_si128((const __m128i *)(blk->qs + 16));
    } else {
        const quant_block_q4_0 *blk = (const quant_block_q4_0 *)row + b;
        *scale = _cvtsh_ss(blk->d);
        const __m128i packed = _mm_loadu_si128((const __m128i *)blk->qs);
        const __m128i nibble = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        lo = _mm_sub_epi8(_mm_and_si128(packed, nibble), eight);
        hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), nibble), eight);
    }
    out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
    out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
    out[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
    out[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

/* Widths [32 b, 32 b + 32) of the NH heads' outputs: every position's block b is
 * converted once and added into each head's 4 registers. Always inlined with a constant
 * NH and type, so the accumulators stay in registers. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
values_block_heads_avx2(const int nh, const sp_kv_type type, float *const *o, const uint16_t *const *p16,
                        const host_kv *kv, const unsigned char *v_pool, const int32_t *blocks, int32_t n_pos,
                        int64_t kv_head, int64_t b) {
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int h = 0; h < nh; h++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) acc[h][c] = _mm256_setzero_ps();
    const int32_t block_size = kv->common.shape.block_size;
    for (int32_t first = 0; first < n_pos; first += block_size) {
        const unsigned char *row = block_first_row(kv, v_pool, blocks, first, kv_head);
        const int32_t end = first + block_size < n_pos ? first + block_size : n_pos;
        for (int32_t j = first; j < end; j++, row += kv_row_stride(kv)) {
            __m256 x[4];
            float d;
            block_values_avx2(type, row, b, x, &d);
#pragma GCC unroll 4
            for (int h = 0; h < nh; h++) {
                const __m256 w = _mm256_set1_ps(_cvtsh_ss(p16[h][j]) * d);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) acc[h][c] = _mm256_fmadd_ps(x[c], w, acc[h][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < nh; h++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) _mm256_storeu_ps(o[h] + b * QUANT_QK + 8 * c, acc[h][c]);
}

/* One instance per (heads, type): constants for the inlined loop above. */
#define VALUES_HEADS(NAME, NH, TYPE)                                                                     \
    static HOST_AVX2_TARGET void NAME(float *const *o, const uint16_t *const *p16, const host_kv *kv,    \
                                      const unsigned char *v_pool, const int32_t *blocks, int32_t n_pos, \
                                      int64_t kv_head) {                                                 \
        for (int64_t b = 0; b < kv->common.shape.head_dim / QUANT_QK; b++)                               \
            values_block_heads_avx2(NH, TYPE, o, p16, kv, v_pool, blocks, n_pos, kv_head, b);            \
    }
VALUES_HEADS(values_q8_0_1, 1, SP_KV_Q8_0)
VALUES_HEADS(values_q8_0_2, 2, SP_KV_Q8_0)
VALUES_HEADS(values_q8_0_3, 3, SP_KV_Q8_0)
VALUES_HEADS(values_q4_0_1, 1, SP_KV_Q4_0)
VALUES_HEADS(values_q4_0_2, 2, SP_KV_Q4_0)
VALUES_HEADS(values_q4_0_3, 3, SP_KV_Q4_0)

typedef void (*values_fn)(float *const *o, const uint16_t *const *p16, const host_kv *kv, const unsigned char *v_pool,
                          const int32_t *blocks, int32_t n_pos, int64_t kv_head);

#endif

void host__attention_values_quant(float *const *o, const uint16_t *const *p16, int nh, const host_kv *kv,
                                  const unsigned char *v_pool, const int32_t *blocks, int32_t n_pos, int64_t kv_head,
                                  bool simd) {
#if HOST_SIMD_AVX2
    if (simd) {
        /* up to 3 heads a pass (4 registers each, plus the 4 of the row, in 16) */
        static const values_fn q8[3] = {values_q8_0_1, values_q8_0_2, values_q8_0_3};
        static const values_fn q4[3] = {values_q4_0_1, values_q4_0_2, values_q4_0_3};
        const values_fn *fns = kv->common.shape.kv_type == SP_KV_Q8_0 ? q8 : q4;
        for (int h0 = 0; h0 < nh; h0 += 3) {
            const int n = nh - h0 < 3 ? nh - h0 : 3;
            fns[n - 1](o + h0, p16 + h0, kv, v_pool, blocks, n_pos, kv_head);
        }
        return;
    }
#else
    (void)simd;
#endif
    values_generic(o, p16, nh, kv, v_pool, blocks, n_pos, kv_head);
}

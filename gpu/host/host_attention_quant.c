/* host_attention_quant.c: the parts of attention that read quantized KV pools (Q8_0,
 * Q4_0: dev_kv_type), for host_attention.c, which keeps the softmax and the task split.
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
 *     block's scale. The AVX2 path makes the same operations in the same order as the
 *     portable one, so both give the same bits.
 * Every token reads only its own rows, so results do not depend on the batch.
 */
#include <string.h>

#include "gpu/host/host_internal.h"

/* The kernel set whose dot products the scores use (see the arithmetic above). */
static dev_cpu_isa scores_isa(dev_cpu_isa isa) {
    return isa == DEV_CPU_ISA_AMX ? DEV_CPU_ISA_AVX512 : isa;
}

void host__kv_quantize_row(dev_kv_type type, dev_cpu_isa isa, void *dst, const float *src, int64_t n) {
    if (type == DEV_KV_Q8_0)
        host__quantize_for(isa, QUANT_Q8_0)(dst, src, n);
    else
        quant_quantize_row(dev_kv_quant_type(type), dst, src, n);
}

void host__attention_query_q8(dev_cpu_isa isa, void *q8, const float *q, int64_t head_dim) {
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
                                  int32_t n_pos, int64_t kv_head, const void *q8, float scale, dev_cpu_isa isa) {
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

/* acc (Dh) += w_j * V[j] for one row, block by block. */
static void values_row_generic(float *acc, dev_kv_type type, const unsigned char *row, float p, int64_t head_dim) {
    for (int64_t b = 0; b < head_dim / QUANT_QK; b++) {
        float *a = acc + b * QUANT_QK;
        if (type == DEV_KV_Q8_0) {
            const quant_block_q8_0 *blk = (const quant_block_q8_0 *)row + b;
            const float w = p * quant_f16_to_f32(blk->d);
            for (int i = 0; i < QUANT_QK; i++) a[i] = fmaf((float)blk->qs[i], w, a[i]);
        } else {
            const quant_block_q4_0 *blk = (const quant_block_q4_0 *)row + b;
            const float w = p * quant_f16_to_f32(blk->d);
            for (int i = 0; i < QUANT_QK / 2; i++) {
                a[i] = fmaf((float)((blk->qs[i] & 0x0F) - 8), w, a[i]);
                a[i + QUANT_QK / 2] = fmaf((float)((blk->qs[i] >> 4) - 8), w, a[i + QUANT_QK / 2]);
            }
        }
    }
}

/* ---- values: AVX2 (the portable path's operations, 8 widths at a time) ---- */

#if HOST_SIMD_AVX2

/* The 32 values of a block as four registers of 8 floats, widths 0..7, 8..15, ... */
static HOST_AVX2_TARGET inline void block_values_avx2(dev_kv_type type, const unsigned char *row, int64_t b,
                                                      __m256 out[4], float *scale) {
    __m128i lo, hi; /* widths 0..15 and 16..31 as int8 */
    if (type == DEV_KV_Q8_0) {
        const quant_block_q8_0 *blk = (const quant_block_q8_0 *)row + b;
        *scale = quant_f16_to_f32(blk->d);
        lo = _mm_loadu_si128((const __m128i *)blk->qs);
        hi = _mm_loadu_si128((const __m128i *)(blk->qs + 16));
    } else {
        const quant_block_q4_0 *blk = (const quant_block_q4_0 *)row + b;
        *scale = quant_f16_to_f32(blk->d);
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

/* o (Dh) = sum over positions of p16[j] * V[j], two blocks (64 widths) at a time in
 * registers over all positions. */
static HOST_AVX2_TARGET void values_avx2(float *o, const host_kv *kv, const unsigned char *v_pool,
                                         const int32_t *blocks, int32_t n_pos, int64_t kv_head, const uint16_t *p16) {
    const dev_kv_shape *s = &kv->common.shape;
    const dev_kv_type type = s->kv_type;
    const int64_t n_blocks = s->head_dim / QUANT_QK;
    for (int64_t b0 = 0; b0 < n_blocks; b0 += 2) {
        const int nb = n_blocks - b0 >= 2 ? 2 : 1;
        __m256 acc[8];
        for (int c = 0; c < 8; c++) acc[c] = _mm256_setzero_ps();
        for (int32_t j = 0; j < n_pos; j++) {
            const unsigned char *row = pool_row(kv, v_pool, blocks, j, kv_head);
            const float p = _cvtsh_ss(p16[j]);
            for (int b = 0; b < nb; b++) {
                __m256 x[4];
                float d;
                block_values_avx2(type, row, b0 + b, x, &d);
                const __m256 w = _mm256_set1_ps(p * d);
                for (int c = 0; c < 4; c++) acc[4 * b + c] = _mm256_fmadd_ps(x[c], w, acc[4 * b + c]);
            }
        }
        for (int c = 0; c < 4 * nb; c++) _mm256_storeu_ps(o + b0 * QUANT_QK + 8 * c, acc[c]);
    }
}

#endif

void host__attention_values_quant(float *o, const host_kv *kv, const unsigned char *v_pool, const int32_t *blocks,
                                  int32_t n_pos, int64_t kv_head, const uint16_t *p16, bool simd) {
    const dev_kv_shape *s = &kv->common.shape;
#if HOST_SIMD_AVX2
    if (simd) {
        values_avx2(o, kv, v_pool, blocks, n_pos, kv_head, p16);
        return;
    }
#else
    (void)simd;
#endif
    memset(o, 0, sizeof(float) * (size_t)s->head_dim);
    for (int32_t j = 0; j < n_pos; j++)
        values_row_generic(o, s->kv_type, pool_row(kv, v_pool, blocks, j, kv_head), quant_f16_to_f32(p16[j]),
                           s->head_dim);
}

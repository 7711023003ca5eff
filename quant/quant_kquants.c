/* quant_kquants.c: plain-C reference code of the K-quants (Q4_K, Q5_K, Q6_K as
 * weights, Q8_K as their activation format): dequantize, quantize, dot product.
 *
 * Legend: n = elements in a row, QK_K = 256 elements per super-block, ib = super-block
 * index, e = element index inside a super-block (0..255), sb = sub-block index
 * (32 elements for Q4_K/Q5_K, 16 for Q6_K and for the Q8_K bsums groups).
 *
 * Dequantization and Q8_K quantization give ggml's floats and bytes bit for bit
 * (Q8_K rounds half to even, like ggml). The dot product uses ggml's integers and
 * scale products: per super-block isum = sum over sub-blocks of sc * sum(q_w * q_a),
 * then d_w * d_a * isum minus dmin_w * d_a * sum(mn * bsums); only the order in which
 * float terms are added may differ from ggml's.
 * Weight quantization here is a simple min/max fit, good enough for tests and tools;
 * it does not reproduce llama-quantize's searched scales.
 */
#include <math.h>
#include <string.h>

#include "common/assert.h"
#include "quant/quant_internal.h"

enum {
    K_SUB32 = QUANT_QK_K / 32, /* Q4_K/Q5_K sub-blocks of 32 */
    K_SUB16 = QUANT_QK_K / 16, /* Q6_K sub-blocks and Q8_K bsums groups of 16 */
};

/* Round to nearest, ties to even (ggml's nearest_int, for |v| < 2^22). */
static int round_even(float v) {
    return (int)nearbyintf(v);
}

static int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- element access ------------------------------------------------------------------ */

/* Q4_K/Q5_K: 64-element chunk c shares 32 bytes of qs: low nibbles are elements
 * 64c..64c+31, high nibbles 64c+32..64c+63. */
static int q4k_nibble(const uint8_t *qs, int e) {
    const int chunk = e / 64;
    const int within = e % 64;
    const uint8_t byte = qs[32 * chunk + within % 32];
    return within < 32 ? (byte & 0x0F) : (byte >> 4);
}

/* Q5_K fifth bit: qh[l] bit 2c is element 64c+l, bit 2c+1 is element 64c+32+l. */
static int q5k_high(const uint8_t *qh, int e) {
    const int chunk = e / 64;
    const int within = e % 64;
    const int bit = 2 * chunk + within / 32;
    return (qh[within % 32] >> bit) & 1;
}

/* Q6_K: half h of 128 elements uses ql[64h..64h+63] and qh[32h..32h+31]. In a half,
 * quarter k (32 elements, l = 0..31) takes the low (k < 2) or high (k >= 2) nibble of
 * ql[64h + 32*(k%2) + l] and bits 2k, 2k+1 of qh[32h + l]. Returns q in 0..63. */
static int q6k_value(const quant_block_q6_k *b, int e) {
    const int half = e / 128;
    const int quarter = (e % 128) / 32;
    const int l = e % 32;
    const uint8_t low_byte = b->ql[64 * half + 32 * (quarter % 2) + l];
    const int low = quarter < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
    const int high = (b->qh[32 * half + l] >> (2 * quarter)) & 3;
    return low | (high << 4);
}

/* ---- dequantization ------------------------------------------------------------------ */

static void dequantize_q4_k(float *dst, const quant_block_q4_k *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const quant_block_q4_k *b = &src[ib];
        const float d = quant_f16_to_f32(b->d);
        const float dmin = quant_f16_to_f32(b->dmin);
        float *out = dst + ib * QUANT_QK_K;
        for (int sb = 0; sb < K_SUB32; sb++) {
            uint8_t sc, mn;
            quant_k4_scale_min(sb, b->scales, &sc, &mn);
            const float scale = d * sc;
            const float min = dmin * mn;
            for (int l = 0; l < 32; l++) {
                const int e = 32 * sb + l;
                out[e] = scale * q4k_nibble(b->qs, e) - min;
            }
        }
    }
}

static void dequantize_q5_k(float *dst, const quant_block_q5_k *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const quant_block_q5_k *b = &src[ib];
        const float d = quant_f16_to_f32(b->d);
        const float dmin = quant_f16_to_f32(b->dmin);
        float *out = dst + ib * QUANT_QK_K;
        for (int sb = 0; sb < K_SUB32; sb++) {
            uint8_t sc, mn;
            quant_k4_scale_min(sb, b->scales, &sc, &mn);
            const float scale = d * sc;
            const float min = dmin * mn;
            for (int l = 0; l < 32; l++) {
                const int e = 32 * sb + l;
                const int q = q4k_nibble(b->qs, e) + 16 * q5k_high(b->qh, e);
                out[e] = scale * q - min;
            }
        }
    }
}

static void dequantize_q6_k(float *dst, const quant_block_q6_k *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const quant_block_q6_k *b = &src[ib];
        const float d = quant_f16_to_f32(b->d);
        float *out = dst + ib * QUANT_QK_K;
        for (int e = 0; e < QUANT_QK_K; e++) {
            const int sb = e / 16;
            out[e] = d * b->scales[sb] * (q6k_value(b, e) - 32);
        }
    }
}

static void dequantize_q8_k(float *dst, const quant_block_q8_k *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        float *out = dst + ib * QUANT_QK_K;
        for (int e = 0; e < QUANT_QK_K; e++) out[e] = src[ib].d * src[ib].qs[e];
    }
}

void quant__kquants_dequantize_row(quant_type type, float *dst, const void *src, int64_t n) {
    const int64_t nb = n / QUANT_QK_K;
    switch (type) {
    case QUANT_Q4_K: dequantize_q4_k(dst, src, nb); return;
    case QUANT_Q5_K: dequantize_q5_k(dst, src, nb); return;
    case QUANT_Q6_K: dequantize_q6_k(dst, src, nb); return;
    case QUANT_Q8_K: dequantize_q8_k(dst, src, nb); return;
    default: SP_ASSERT(!"quant: dequantize of an unsupported type");
    }
}

/* ---- quantization -------------------------------------------------------------------- */

/* Packs 8 six-bit scales and mins into the 12 bytes quant_k4_scale_min() reads. */
static void k4_pack_scales(uint8_t scales[QUANT_K_SCALE_BYTES], const uint8_t *sc, const uint8_t *mn) {
    memset(scales, 0, QUANT_K_SCALE_BYTES);
    for (int sb = 0; sb < K_SUB32; sb++) {
        if (sb < 4) {
            scales[sb] = sc[sb];
            scales[sb + 4] = mn[sb];
        } else {
            scales[sb + 4] = (uint8_t)((sc[sb] & 0x0F) | ((mn[sb] & 0x0F) << 4));
            scales[sb - 4] |= (uint8_t)((sc[sb] >> 4) << 6);
            scales[sb] |= (uint8_t)((mn[sb] >> 4) << 6);
        }
    }
}

/* Q4_K (nmax 15) and Q5_K (nmax 31): per sub-block of 32 a scale (max - min) / nmax
 * and a min (-min, min clipped to <= 0), both quantized to 6 bits against the
 * super-block's largest; then each element is rounded against the stored values.
 * Writes d, dmin, scales and the levels L (0..nmax) of the 256 elements. */
static void k4_fit(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t scales[QUANT_K_SCALE_BYTES],
                   uint8_t L[QUANT_QK_K]) {
    float sub_scale[K_SUB32], sub_min[K_SUB32];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int sb = 0; sb < K_SUB32; sb++) {
        const float *xs = x + 32 * sb;
        float lo = 0.0f, hi = xs[0];
        for (int l = 0; l < 32; l++) {
            if (xs[l] < lo) lo = xs[l];
            if (xs[l] > hi) hi = xs[l];
        }
        sub_scale[sb] = hi > lo ? (hi - lo) / nmax : 0.0f;
        sub_min[sb] = -lo;
        if (sub_scale[sb] > max_scale) max_scale = sub_scale[sb];
        if (sub_min[sb] > max_min) max_min = sub_min[sb];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t sc[K_SUB32], mn[K_SUB32];
    for (int sb = 0; sb < K_SUB32; sb++) {
        /* a sub-block with any spread keeps a nonzero scale */
        const int low = sub_scale[sb] > 0 ? 1 : 0;
        sc[sb] = (uint8_t)clamp_int(round_even(inv_scale * sub_scale[sb]), low, 63);
        mn[sb] = (uint8_t)clamp_int(round_even(inv_min * sub_min[sb]), 0, 63);
    }
    k4_pack_scales(scales, sc, mn);
    *d_out = quant_f32_to_f16(max_scale / 63.0f);
    *dmin_out = quant_f32_to_f16(max_min / 63.0f);
    const float d = quant_f16_to_f32(*d_out);
    const float dmin = quant_f16_to_f32(*dmin_out);
    for (int sb = 0; sb < K_SUB32; sb++) {
        const float scale = d * sc[sb];
        const float min = dmin * mn[sb];
        for (int l = 0; l < 32; l++) {
            const int e = 32 * sb + l;
            L[e] = scale > 0 ? (uint8_t)clamp_int(round_even((x[e] + min) / scale), 0, nmax) : 0;
        }
    }
}

static void quantize_q4_k(quant_block_q4_k *dst, const float *src, int64_t nb) {
    uint8_t L[QUANT_QK_K];
    for (int64_t ib = 0; ib < nb; ib++) {
        quant_block_q4_k *b = &dst[ib];
        k4_fit(src + ib * QUANT_QK_K, 15, &b->d, &b->dmin, b->scales, L);
        for (int chunk = 0; chunk < QUANT_QK_K / 64; chunk++) {
            for (int l = 0; l < 32; l++) {
                const int e = 64 * chunk + l;
                b->qs[32 * chunk + l] = (uint8_t)(L[e] | (L[e + 32] << 4));
            }
        }
    }
}

static void quantize_q5_k(quant_block_q5_k *dst, const float *src, int64_t nb) {
    uint8_t L[QUANT_QK_K];
    for (int64_t ib = 0; ib < nb; ib++) {
        quant_block_q5_k *b = &dst[ib];
        k4_fit(src + ib * QUANT_QK_K, 31, &b->d, &b->dmin, b->scales, L);
        memset(b->qh, 0, sizeof b->qh);
        for (int chunk = 0; chunk < QUANT_QK_K / 64; chunk++) {
            for (int l = 0; l < 32; l++) {
                const int e_low = 64 * chunk + l;
                const int e_high = e_low + 32;
                b->qs[32 * chunk + l] = (uint8_t)((L[e_low] & 0x0F) | ((L[e_high] & 0x0F) << 4));
                b->qh[l] |= (uint8_t)((L[e_low] >> 4) << (2 * chunk));
                b->qh[l] |= (uint8_t)((L[e_high] >> 4) << (2 * chunk + 1));
            }
        }
    }
}

/* Q6_K: per sub-block of 16 a signed scale that maps the element of largest magnitude
 * to -32; the 16 scales quantized to int8 against the largest; elements rounded
 * against the stored scales to -32..31 and stored biased by 32. */
static void quantize_q6_k(quant_block_q6_k *dst, const float *src, int64_t nb) {
    int L[QUANT_QK_K];
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK_K;
        quant_block_q6_k *b = &dst[ib];
        float sub_scale[K_SUB16];
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int sb = 0; sb < K_SUB16; sb++) {
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++) {
                const float v = x[16 * sb + l];
                if (fabsf(v) > amax) {
                    amax = fabsf(v);
                    max = v;
                }
            }
            sub_scale[sb] = max / -32.0f;
            if (fabsf(sub_scale[sb]) > max_abs_scale) {
                max_abs_scale = fabsf(sub_scale[sb]);
                max_scale = sub_scale[sb];
            }
        }
        memset(b, 0, sizeof *b);
        if (max_abs_scale == 0.0f) continue; /* all zero: d = 0 */
        const float iscale = -128.0f / max_scale;
        b->d = quant_f32_to_f16(1.0f / iscale);
        const float d = quant_f16_to_f32(b->d);
        for (int sb = 0; sb < K_SUB16; sb++) {
            b->scales[sb] = (int8_t)clamp_int(round_even(iscale * sub_scale[sb]), -128, 127);
            const float scale = d * b->scales[sb];
            for (int l = 0; l < 16; l++) {
                const int e = 16 * sb + l;
                const int q = scale != 0.0f ? clamp_int(round_even(x[e] / scale), -32, 31) : 0;
                L[e] = q + 32;
            }
        }
        for (int e = 0; e < QUANT_QK_K; e++) {
            const int half = e / 128;
            const int quarter = (e % 128) / 32;
            const int l = e % 32;
            const int low_index = 64 * half + 32 * (quarter % 2) + l;
            const int low_shift = quarter < 2 ? 0 : 4;
            b->ql[low_index] |= (uint8_t)((L[e] & 0x0F) << low_shift);
            b->qh[32 * half + l] |= (uint8_t)((L[e] >> 4) << (2 * quarter));
        }
    }
}

/* Q8_K: d = max / -127 with max the signed element of largest magnitude (so that
 * element becomes -127), q = round_half_even(x / d), and 16-element sums. */
static void quantize_q8_k(quant_block_q8_k *dst, const float *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK_K;
        quant_block_q8_k *b = &dst[ib];
        float amax = 0.0f, max = 0.0f;
        for (int e = 0; e < QUANT_QK_K; e++) {
            if (fabsf(x[e]) > amax) {
                amax = fabsf(x[e]);
                max = x[e];
            }
        }
        if (amax == 0.0f) {
            memset(b, 0, sizeof *b);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int e = 0; e < QUANT_QK_K; e++) {
            const int q = round_even(iscale * x[e]);
            b->qs[e] = (int8_t)(q < 127 ? q : 127);
        }
        for (int g = 0; g < K_SUB16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += b->qs[16 * g + l];
            b->bsums[g] = (int16_t)sum;
        }
        b->d = 1.0f / iscale;
    }
}

void quant__kquants_quantize_row(quant_type type, void *dst, const float *src, int64_t n) {
    const int64_t nb = n / QUANT_QK_K;
    switch (type) {
    case QUANT_Q4_K: quantize_q4_k(dst, src, nb); return;
    case QUANT_Q5_K: quantize_q5_k(dst, src, nb); return;
    case QUANT_Q6_K: quantize_q6_k(dst, src, nb); return;
    case QUANT_Q8_K: quantize_q8_k(dst, src, nb); return;
    default: SP_ASSERT(!"quant: quantize to an unsupported type");
    }
}

/* ---- dot products with Q8_K ---------------------------------------------------------- */

/* Q4_K/Q5_K share the shape: isum = sum over sub-blocks of sc * sum(q_w * q_a), and
 * msum = sum over sub-blocks of mn * (the two bsums that cover it). */
static float dot_q4_k_q8_k(const quant_block_q4_k *w, const quant_block_q8_k *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        int isum = 0, msum = 0;
        for (int sb = 0; sb < K_SUB32; sb++) {
            uint8_t sc, mn;
            quant_k4_scale_min(sb, w[ib].scales, &sc, &mn);
            int sub = 0;
            for (int l = 0; l < 32; l++) {
                const int e = 32 * sb + l;
                sub += q4k_nibble(w[ib].qs, e) * a[ib].qs[e];
            }
            isum += sc * sub;
            msum += mn * (a[ib].bsums[2 * sb] + a[ib].bsums[2 * sb + 1]);
        }
        sum += quant_f16_to_f32(w[ib].d) * a[ib].d * (float)isum;
        sum -= quant_f16_to_f32(w[ib].dmin) * a[ib].d * (float)msum;
    }
    return sum;
}

static float dot_q5_k_q8_k(const quant_block_q5_k *w, const quant_block_q8_k *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        int isum = 0, msum = 0;
        for (int sb = 0; sb < K_SUB32; sb++) {
            uint8_t sc, mn;
            quant_k4_scale_min(sb, w[ib].scales, &sc, &mn);
            int sub = 0;
            for (int l = 0; l < 32; l++) {
                const int e = 32 * sb + l;
                const int q = q4k_nibble(w[ib].qs, e) + 16 * q5k_high(w[ib].qh, e);
                sub += q * a[ib].qs[e];
            }
            isum += sc * sub;
            msum += mn * (a[ib].bsums[2 * sb] + a[ib].bsums[2 * sb + 1]);
        }
        sum += quant_f16_to_f32(w[ib].d) * a[ib].d * (float)isum;
        sum -= quant_f16_to_f32(w[ib].dmin) * a[ib].d * (float)msum;
    }
    return sum;
}

static float dot_q6_k_q8_k(const quant_block_q6_k *w, const quant_block_q8_k *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        int isum = 0;
        for (int sb = 0; sb < K_SUB16; sb++) {
            int sub = 0;
            for (int l = 0; l < 16; l++) {
                const int e = 16 * sb + l;
                sub += (q6k_value(&w[ib], e) - 32) * a[ib].qs[e];
            }
            isum += w[ib].scales[sb] * sub;
        }
        sum += quant_f16_to_f32(w[ib].d) * a[ib].d * (float)isum;
    }
    return sum;
}

float quant__kquants_vec_dot_ref(quant_type type, const void *w, const void *a, int64_t n) {
    const int64_t nb = n / QUANT_QK_K;
    switch (type) {
    case QUANT_Q4_K: return dot_q4_k_q8_k(w, a, nb);
    case QUANT_Q5_K: return dot_q5_k_q8_k(w, a, nb);
    case QUANT_Q6_K: return dot_q6_k_q8_k(w, a, nb);
    default: SP_ASSERT(!"quant: no dot product for this type"); return 0.0f;
    }
}

/* quant.c: the type table (names, block sizes), half-precision conversions, and the
 * plain-C reference code of the float formats and the 32-element block formats
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1). The K-quants live in quant_kquants.c; the
 * public entry points here dispatch to them.
 *
 * Legend: n = elements in a row, QK = 32 elements per block, ib = block index,
 * j = element index inside a block. The arithmetic follows ggml's reference code
 * (ggml-quants.c, ggml-cpu/quants.c) so files and logits match llama.cpp's:
 * activations are rounded the same way, blocks are summed in integers, then scaled.
 */
#include "quant/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "common/assert.h"
#include "quant/quant_internal.h"

/* ---- the type table -------------------------------------------------------------- */

typedef struct quant_type_info {
    const char *name;
    uint32_t block_size;  /* elements per block; 0 = not a known type */
    uint32_t block_bytes; /* bytes per block */
    bool supported;
} quant_type_info;

static const quant_type_info quant_types[QUANT_TYPE_LIMIT] = {
    [QUANT_F32] = {"F32", 1, 4, true},
    [QUANT_F16] = {"F16", 1, 2, true},
    [QUANT_Q4_0] = {"Q4_0", QUANT_QK, sizeof(quant_block_q4_0), true},
    [QUANT_Q4_1] = {"Q4_1", QUANT_QK, sizeof(quant_block_q4_1), true},
    [QUANT_Q5_0] = {"Q5_0", QUANT_QK, sizeof(quant_block_q5_0), true},
    [QUANT_Q5_1] = {"Q5_1", QUANT_QK, sizeof(quant_block_q5_1), true},
    [QUANT_Q8_0] = {"Q8_0", QUANT_QK, sizeof(quant_block_q8_0), true},
    [QUANT_Q8_1] = {"Q8_1", QUANT_QK, sizeof(quant_block_q8_1), true},
    /* Known to GGUF but not computed with: sizes let readers skip such tensors. */
    [QUANT_Q2_K] = {"Q2_K", QUANT_QK_K, 84, false},
    [QUANT_Q3_K] = {"Q3_K", QUANT_QK_K, 110, false},
    [QUANT_Q4_K] = {"Q4_K", QUANT_QK_K, sizeof(quant_block_q4_k), true},
    [QUANT_Q5_K] = {"Q5_K", QUANT_QK_K, sizeof(quant_block_q5_k), true},
    [QUANT_Q6_K] = {"Q6_K", QUANT_QK_K, sizeof(quant_block_q6_k), true},
    [QUANT_Q8_K] = {"Q8_K", QUANT_QK_K, sizeof(quant_block_q8_k), true},
    [QUANT_BF16] = {"BF16", 1, 2, true},
    /* The rest of ggml's types, by id: named and sized so a file holding them opens
     * (inspect lists it) and a model load names the type it cannot compute with. */
    [16] = {"IQ2_XXS", 256, 66, false},
    [17] = {"IQ2_XS", 256, 74, false},
    [18] = {"IQ3_XXS", 256, 98, false},
    [19] = {"IQ1_S", 256, 50, false},
    [20] = {"IQ4_NL", 32, 18, false},
    [21] = {"IQ3_S", 256, 110, false},
    [22] = {"IQ2_S", 256, 82, false},
    [23] = {"IQ4_XS", 256, 136, false},
    [24] = {"I8", 1, 1, false},
    [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},
    [27] = {"I64", 1, 8, false},
    [28] = {"F64", 1, 8, false},
    [29] = {"IQ1_M", 256, 56, false},
    [34] = {"TQ1_0", 256, 54, false},
    [35] = {"TQ2_0", 256, 66, false},
    [39] = {"MXFP4", 32, 17, false},
};

static const quant_type_info *quant_info(uint32_t type) {
    if (type >= QUANT_TYPE_LIMIT || quant_types[type].block_size == 0) return NULL;
    return &quant_types[type];
}

bool quant_type_supported(uint32_t type) {
    const quant_type_info *info = quant_info(type);
    return info != NULL && info->supported;
}

const char *quant_type_name(uint32_t type) {
    const quant_type_info *info = quant_info(type);
    return info ? info->name : "unknown";
}

size_t quant_block_size(uint32_t type) {
    const quant_type_info *info = quant_info(type);
    return info ? info->block_size : 0;
}

size_t quant_block_bytes(uint32_t type) {
    const quant_type_info *info = quant_info(type);
    return info ? info->block_bytes : 0;
}

bool quant_row_valid(quant_type type, int64_t n) {
    const int64_t block_size = (int64_t)quant_block_size(type);
    return block_size > 0 && n > 0 && n % block_size == 0;
}

size_t quant_row_bytes(quant_type type, int64_t n) {
    const int64_t block_size = (int64_t)quant_block_size(type);
    SP_ASSERT(block_size > 0 && n >= 0 && n % block_size == 0);
    const size_t blocks = (size_t)(n / block_size);
    const size_t block_bytes = quant_block_bytes(type);
    SP_ASSERT(blocks <= SIZE_MAX / block_bytes); /* callers bound n (file dimensions) first */
    return blocks * block_bytes;
}

quant_type quant_vec_dot_type(quant_type type) {
    switch (type) {
    case QUANT_Q4_0:
    case QUANT_Q5_0:
    case QUANT_Q8_0: return QUANT_Q8_0;
    case QUANT_Q4_1:
    case QUANT_Q5_1: return QUANT_Q8_1;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K: return QUANT_Q8_K;
    default: return type; /* float types pair with themselves; others have no dot */
    }
}

/* ---- half precision ---------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float quant_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1F;
    const uint32_t mantissa = h & 0x3FF;
    if (exponent == 0x1F) return f32_from_bits(sign | 0x7F800000 | (mantissa << 13));
    if (exponent == 0) {
        /* zero or subnormal: mantissa * 2^-24, exact in float */
        const float magnitude = (float)mantissa * 0x1p-24f;
        return f32_from_bits(sign | f32_bits(magnitude));
    }
    /* rebias 15 -> 127 */
    return f32_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t quant_f32_to_f16(float f) {
    const uint32_t x = f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    const uint32_t ax = x & 0x7FFFFFFF;
    if (ax > 0x7F800000) {
        /* NaN: keep the top payload bits, force quiet (what F16C's vcvtps2ph does) */
        return (uint16_t)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
    }
    if (ax >= 0x477FF000) return sign | 0x7C00; /* >= 65520 rounds to infinity */
    if (ax >= 0x38800000) {
        /* normal half: rebias, then round the 13 dropped bits to nearest even */
        const uint32_t rebased = ax - (112u << 23);
        const uint32_t odd = (rebased >> 13) & 1;
        return (uint16_t)(sign | ((rebased + 0xFFF + odd) >> 13));
    }
    /* subnormal half (or zero): the result counts units of 2^-24 */
    const uint32_t exponent = ax >> 23;
    if (exponent < 102) return sign; /* below 2^-25: rounds to zero */
    const uint32_t mantissa = (ax & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exponent; /* 14..24 */
    uint32_t units = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (units & 1))) units++;
    return (uint16_t)(sign | units);
}

float quant_bf16_to_f32(uint16_t h) {
    return f32_from_bits((uint32_t)h << 16);
}

uint16_t quant_f32_to_bf16(float f) {
    const uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    const uint32_t odd = (x >> 16) & 1;
    return (uint16_t)((x + 0x7FFF + odd) >> 16);
}

/* ---- dequantization ---------------------------------------------------------------- */

static void dequantize_q4_0(float *dst, const quant_block_q4_0 *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float d = quant_f16_to_f32(src[ib].d);
        float *out = dst + ib * QUANT_QK;
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const int lo = (src[ib].qs[j] & 0x0F) - 8;
            const int hi = (src[ib].qs[j] >> 4) - 8;
            out[j] = lo * d;
            out[j + QUANT_QK / 2] = hi * d;
        }
    }
}

static void dequantize_q4_1(float *dst, const quant_block_q4_1 *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float d = quant_f16_to_f32(src[ib].d);
        const float m = quant_f16_to_f32(src[ib].m);
        float *out = dst + ib * QUANT_QK;
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const int lo = src[ib].qs[j] & 0x0F;
            const int hi = src[ib].qs[j] >> 4;
            out[j] = lo * d + m;
            out[j + QUANT_QK / 2] = hi * d + m;
        }
    }
}

/* The 5-bit value of element j (0..31) of a Q5_0/Q5_1 block. */
static int q5_value(const uint8_t *qs, uint32_t qh, int j) {
    const int half = QUANT_QK / 2;
    const int byte = j % half;
    const int nibble = j < half ? (qs[byte] & 0x0F) : (qs[byte] >> 4);
    const int high = (int)((qh >> j) & 1) << 4;
    return nibble | high;
}

static void dequantize_q5_0(float *dst, const quant_block_q5_0 *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float d = quant_f16_to_f32(src[ib].d);
        uint32_t qh;
        memcpy(&qh, src[ib].qh, sizeof qh);
        float *out = dst + ib * QUANT_QK;
        for (int j = 0; j < QUANT_QK; j++) out[j] = (q5_value(src[ib].qs, qh, j) - 16) * d;
    }
}

static void dequantize_q5_1(float *dst, const quant_block_q5_1 *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float d = quant_f16_to_f32(src[ib].d);
        const float m = quant_f16_to_f32(src[ib].m);
        uint32_t qh;
        memcpy(&qh, src[ib].qh, sizeof qh);
        float *out = dst + ib * QUANT_QK;
        for (int j = 0; j < QUANT_QK; j++) out[j] = q5_value(src[ib].qs, qh, j) * d + m;
    }
}

static void dequantize_q8_0(float *dst, const quant_block_q8_0 *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float d = quant_f16_to_f32(src[ib].d);
        float *out = dst + ib * QUANT_QK;
        for (int j = 0; j < QUANT_QK; j++) out[j] = src[ib].qs[j] * d;
    }
}

static void dequantize_q8_1(float *dst, const quant_block_q8_1 *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float d = quant_f16_to_f32(src[ib].d);
        float *out = dst + ib * QUANT_QK;
        for (int j = 0; j < QUANT_QK; j++) out[j] = src[ib].qs[j] * d;
    }
}

void quant_dequantize_row(quant_type type, float *dst, const void *src, int64_t n) {
    SP_ASSERT(quant_type_supported(type) && quant_row_valid(type, n));
    const int64_t nb = n / (int64_t)quant_block_size(type);
    const uint16_t *halves = src;
    switch (type) {
    case QUANT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case QUANT_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_f16_to_f32(halves[i]);
        return;
    case QUANT_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32(halves[i]);
        return;
    case QUANT_Q4_0: dequantize_q4_0(dst, src, nb); return;
    case QUANT_Q4_1: dequantize_q4_1(dst, src, nb); return;
    case QUANT_Q5_0: dequantize_q5_0(dst, src, nb); return;
    case QUANT_Q5_1: dequantize_q5_1(dst, src, nb); return;
    case QUANT_Q8_0: dequantize_q8_0(dst, src, nb); return;
    case QUANT_Q8_1: dequantize_q8_1(dst, src, nb); return;
    default: quant__kquants_dequantize_row(type, dst, src, n); return;
    }
}

/* ---- quantization (ggml's reference rounding, so files match llama.cpp's) ---------- */

/* The element of largest magnitude, with its sign (the first one on ties). */
static float block_signed_absmax(const float *x, int count) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < count; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void block_min_max(const float *x, int count, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < count; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

static int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static void quantize_q4_0(quant_block_q4_0 *dst, const float *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK;
        const float d = block_signed_absmax(x, QUANT_QK) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[ib].d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const int lo = clamp_int((int8_t)(x[j] * id + 8.5f), 0, 15);
            const int hi = clamp_int((int8_t)(x[j + QUANT_QK / 2] * id + 8.5f), 0, 15);
            dst[ib].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

static void quantize_q4_1(quant_block_q4_1 *dst, const float *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK;
        float min, max;
        block_min_max(x, QUANT_QK, &min, &max);
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[ib].d = quant_f32_to_f16(d);
        dst[ib].m = quant_f32_to_f16(min);
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const int lo = clamp_int((int8_t)((x[j] - min) * id + 0.5f), 0, 15);
            const int hi = clamp_int((int8_t)((x[j + QUANT_QK / 2] - min) * id + 0.5f), 0, 15);
            dst[ib].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* Packs 32 five-bit values: low nibbles into qs (elements j and j+16 share a byte),
 * fifth bits into the 32-bit qh (bit j = element j). */
static void q5_pack(uint8_t *qs, uint8_t qh_bytes[4], const int *values) {
    uint32_t qh = 0;
    for (int j = 0; j < QUANT_QK / 2; j++) {
        const int lo = values[j];
        const int hi = values[j + QUANT_QK / 2];
        qs[j] = (uint8_t)((lo & 0x0F) | ((hi & 0x0F) << 4));
        qh |= (uint32_t)((lo >> 4) & 1) << j;
        qh |= (uint32_t)((hi >> 4) & 1) << (j + QUANT_QK / 2);
    }
    memcpy(qh_bytes, &qh, sizeof qh);
}

static void quantize_q5_0(quant_block_q5_0 *dst, const float *src, int64_t nb) {
    int values[QUANT_QK];
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK;
        const float d = block_signed_absmax(x, QUANT_QK) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[ib].d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK; j++) values[j] = clamp_int((int8_t)(x[j] * id + 16.5f), 0, 31);
        q5_pack(dst[ib].qs, dst[ib].qh, values);
    }
}

static void quantize_q5_1(quant_block_q5_1 *dst, const float *src, int64_t nb) {
    int values[QUANT_QK];
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK;
        float min, max;
        block_min_max(x, QUANT_QK, &min, &max);
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        dst[ib].d = quant_f32_to_f16(d);
        dst[ib].m = quant_f32_to_f16(min);
        for (int j = 0; j < QUANT_QK; j++) {
            values[j] = clamp_int((int)(uint8_t)((x[j] - min) * id + 0.5f), 0, 31);
        }
        q5_pack(dst[ib].qs, dst[ib].qh, values);
    }
}

/* Q8_0/Q8_1 are activation formats only (no file stores them), so they follow what
 * llama.cpp runs on x86 (ggml's AVX2 quantize_row_q8_0/q8_1), not ggml's scalar
 * reference: the multiplier is 127 / amax (not 1 / d), values round half to even, and
 * the Q8_1 sum is d times the sum of the rounded values. */

/* x rounded to the nearest integer, ties to even, for |x| <= 2^23 (as the AVX2
 * vroundps does in the default rounding mode, independent of the current mode). */
static float round_half_even(float x) {
    const float magnitude = fabsf(x);
    if (!(magnitude < 0x1p23f)) return x; /* already an integer (or NaN) */
    const float big = 0x1p23f;            /* adding 2^23 drops the fraction, ties to even */
    const float rounded = (magnitude + big) - big;
    return copysignf(rounded, x);
}

/* The scale of a Q8_0/Q8_1 block (amax / 127) and the multiplier 127 / amax. */
static float q8_block_scale(const float *x, float *multiplier) {
    float amax = 0.0f;
    for (int j = 0; j < QUANT_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    *multiplier = amax != 0.0f ? 127.0f / amax : 0.0f;
    return amax / 127.0f;
}

static void quantize_q8_0(quant_block_q8_0 *dst, const float *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK;
        float id;
        const float d = q8_block_scale(x, &id);
        dst[ib].d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK; j++) dst[ib].qs[j] = (int8_t)round_half_even(x[j] * id);
    }
}

static void quantize_q8_1(quant_block_q8_1 *dst, const float *src, int64_t nb) {
    for (int64_t ib = 0; ib < nb; ib++) {
        const float *x = src + ib * QUANT_QK;
        float id;
        const float d = q8_block_scale(x, &id);
        int sum = 0;
        for (int j = 0; j < QUANT_QK; j++) {
            dst[ib].qs[j] = (int8_t)round_half_even(x[j] * id);
            sum += dst[ib].qs[j];
        }
        dst[ib].d = quant_f32_to_f16(d);
        dst[ib].s = quant_f32_to_f16((float)sum * d);
    }
}

void quant_quantize_row(quant_type type, void *dst, const float *src, int64_t n) {
    SP_ASSERT(quant_type_supported(type) && quant_row_valid(type, n));
    const int64_t nb = n / (int64_t)quant_block_size(type);
    uint16_t *halves = dst;
    switch (type) {
    case QUANT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case QUANT_F16:
        for (int64_t i = 0; i < n; i++) halves[i] = quant_f32_to_f16(src[i]);
        return;
    case QUANT_BF16:
        for (int64_t i = 0; i < n; i++) halves[i] = quant_f32_to_bf16(src[i]);
        return;
    case QUANT_Q4_0: quantize_q4_0(dst, src, nb); return;
    case QUANT_Q4_1: quantize_q4_1(dst, src, nb); return;
    case QUANT_Q5_0: quantize_q5_0(dst, src, nb); return;
    case QUANT_Q5_1: quantize_q5_1(dst, src, nb); return;
    case QUANT_Q8_0: quantize_q8_0(dst, src, nb); return;
    case QUANT_Q8_1: quantize_q8_1(dst, src, nb); return;
    default: quant__kquants_quantize_row(type, dst, src, n); return;
    }
}

/* ---- dot products ------------------------------------------------------------------ */

/* Float formats: the activation row is in the weight's own type, products summed in
 * double (as ggml's scalar path does). */
static float dot_f32(const float *w, const float *a, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)w[i] * (double)a[i];
    return (float)sum;
}

static float dot_f16(const uint16_t *w, const uint16_t *a, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)(quant_f16_to_f32(w[i]) * quant_f16_to_f32(a[i]));
    }
    return (float)sum;
}

static float dot_bf16(const uint16_t *w, const uint16_t *a, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)(quant_bf16_to_f32(w[i]) * quant_bf16_to_f32(a[i]));
    }
    return (float)sum;
}

/* 32-element formats: per block an integer sum of q_w * q_a, then
 * sum += d_w * d_a * isum (+ m_w * s_a for the formats with a min). */
static float dot_q4_0_q8_0(const quant_block_q4_0 *w, const quant_block_q8_0 *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        int isum = 0;
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const int lo = (w[ib].qs[j] & 0x0F) - 8;
            const int hi = (w[ib].qs[j] >> 4) - 8;
            isum += lo * a[ib].qs[j] + hi * a[ib].qs[j + QUANT_QK / 2];
        }
        sum += quant_f16_to_f32(w[ib].d) * quant_f16_to_f32(a[ib].d) * (float)isum;
    }
    return sum;
}

static float dot_q4_1_q8_1(const quant_block_q4_1 *w, const quant_block_q8_1 *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        int isum = 0;
        for (int j = 0; j < QUANT_QK / 2; j++) {
            const int lo = w[ib].qs[j] & 0x0F;
            const int hi = w[ib].qs[j] >> 4;
            isum += lo * a[ib].qs[j] + hi * a[ib].qs[j + QUANT_QK / 2];
        }
        const float dd = quant_f16_to_f32(w[ib].d) * quant_f16_to_f32(a[ib].d);
        sum += dd * (float)isum + quant_f16_to_f32(w[ib].m) * quant_f16_to_f32(a[ib].s);
    }
    return sum;
}

static float dot_q5_0_q8_0(const quant_block_q5_0 *w, const quant_block_q8_0 *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        uint32_t qh;
        memcpy(&qh, w[ib].qh, sizeof qh);
        int isum = 0;
        for (int j = 0; j < QUANT_QK; j++) isum += (q5_value(w[ib].qs, qh, j) - 16) * a[ib].qs[j];
        sum += quant_f16_to_f32(w[ib].d) * quant_f16_to_f32(a[ib].d) * (float)isum;
    }
    return sum;
}

static float dot_q5_1_q8_1(const quant_block_q5_1 *w, const quant_block_q8_1 *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        uint32_t qh;
        memcpy(&qh, w[ib].qh, sizeof qh);
        int isum = 0;
        for (int j = 0; j < QUANT_QK; j++) isum += q5_value(w[ib].qs, qh, j) * a[ib].qs[j];
        const float dd = quant_f16_to_f32(w[ib].d) * quant_f16_to_f32(a[ib].d);
        sum += dd * (float)isum + quant_f16_to_f32(w[ib].m) * quant_f16_to_f32(a[ib].s);
    }
    return sum;
}

static float dot_q8_0_q8_0(const quant_block_q8_0 *w, const quant_block_q8_0 *a, int64_t nb) {
    float sum = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        int isum = 0;
        for (int j = 0; j < QUANT_QK; j++) isum += w[ib].qs[j] * a[ib].qs[j];
        sum += quant_f16_to_f32(w[ib].d) * quant_f16_to_f32(a[ib].d) * (float)isum;
    }
    return sum;
}

float quant_vec_dot_ref(quant_type type, const void *w, const void *a, int64_t n) {
    SP_ASSERT(quant_type_supported(type) && quant_row_valid(type, n));
    const int64_t nb = n / (int64_t)quant_block_size(type);
    switch (type) {
    case QUANT_F32: return dot_f32(w, a, n);
    case QUANT_F16: return dot_f16(w, a, n);
    case QUANT_BF16: return dot_bf16(w, a, n);
    case QUANT_Q4_0: return dot_q4_0_q8_0(w, a, nb);
    case QUANT_Q4_1: return dot_q4_1_q8_1(w, a, nb);
    case QUANT_Q5_0: return dot_q5_0_q8_0(w, a, nb);
    case QUANT_Q5_1: return dot_q5_1_q8_1(w, a, nb);
    case QUANT_Q8_0: return dot_q8_0_q8_0(w, a, nb);
    default: return quant__kquants_vec_dot_ref(type, w, a, n);
    }
}

float quant_vec_dot_f32_ref(quant_type type, const void *w, const float *x, int64_t n) {
    SP_ASSERT(quant_type_supported(type) && quant_row_valid(type, n));
    /* Dequantize in chunks of CHUNK elements (a multiple of every block size). */
    enum { CHUNK = QUANT_QK_K };
    const int64_t block_size = (int64_t)quant_block_size(type);
    const size_t block_bytes = quant_block_bytes(type);
    const uint8_t *w_bytes = w;
    float buf[CHUNK];
    double sum = 0.0;
    for (int64_t start = 0; start < n; start += CHUNK) {
        const int64_t count = n - start < CHUNK ? n - start : CHUNK;
        const size_t offset = (size_t)(start / block_size) * block_bytes;
        quant_dequantize_row(type, buf, w_bytes + offset, count);
        for (int64_t i = 0; i < count; i++) sum += (double)buf[i] * (double)x[start + i];
    }
    return (float)sum;
}

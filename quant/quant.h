/* quant.h: tensor element formats (GGUF/ggml type ids) and their plain-C reference
 * code: sizes, dequantization, and dot products.
 *
 * Legend: a row of K elements is stored as K / block_size blocks of block_bytes each.
 * The reference functions here define the numbers; SIMD kernels in gpu/host/ and
 * CUDA kernels are tested against them.
 *
 * Dot products follow the scheme fast CPU engines use: the activation row is first
 * quantized per block to 8 bits (quant_vec_dot_type() says which 8-bit format pairs
 * with a weight type: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants,
 * the float type itself for F32/F16/BF16), then weight row and activation row are
 * multiplied block by block in integers and scaled.
 */
#ifndef SP_QUANT_H
#define SP_QUANT_H

#include <assert.h> /* static_assert, in C11 and C++ alike: CUDA files include this header too */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Values are ggml's type ids, as stored in GGUF tensor infos. */
typedef enum quant_type {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q8_1 = 9,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,
    QUANT_BF16 = 30,
    QUANT_TYPE_LIMIT = 64 /* ids at or above this are never valid */
} quant_type;

/* true for the types spindle can compute with (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, plus the activation formats Q8_1 and Q8_K). */
bool quant_type_supported(uint32_t type);

/* Name as ggml spells it ("Q4_1"); "unknown(N)" style text never needed: returns
 * "unknown" for ids it does not know. */
const char *quant_type_name(uint32_t type);

/* Elements per block (1 for float types) and bytes per block; 0 for unknown types. */
size_t quant_block_size(uint32_t type);
size_t quant_block_bytes(uint32_t type);

/* Bytes of a row of n elements; n must be a multiple of the block size (check with
 * quant_row_valid first). */
size_t quant_row_bytes(quant_type type, int64_t n);
bool quant_row_valid(quant_type type, int64_t n);

/* The 8-bit (or float) activation format that pairs with weights of this type. */
quant_type quant_vec_dot_type(quant_type type);

/* Half-precision conversions (IEEE binary16 and bfloat16), round to nearest even. */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* Dequantizes n elements of one row: dst (n) from src (row bytes). */
void quant_dequantize_row(quant_type type, float *dst, const void *src, int64_t n);

/* Quantizes one row of n floats into dst in the given type (used for activations:
 * Q8_0, Q8_1, Q8_K; and for F16/BF16/F32 and the weight types in tests and tools). */
void quant_quantize_row(quant_type type, void *dst, const float *src, int64_t n);

/* Dot product of a weight row w (type, n elements) with an activation row a that is
 * already in quant_vec_dot_type(type). Plain C; the reference the SIMD kernels match. */
float quant_vec_dot_ref(quant_type type, const void *w, const void *a, int64_t n);

/* Dot product of a weight row with a float row, by dequantizing: the exact meaning
 * the quantized dot approximates. */
float quant_vec_dot_f32_ref(quant_type type, const void *w, const float *x, int64_t n);

/* ---- Block layouts: the byte layouts of ggml's block formats, shared by the reference
 * code (quant/quant*.c) and the kernels that read blocks (gpu/host/, gpu/cuda/).
 *
 * Legend: QUANT_QK = 32 elements per block of the 32-element formats (Q4_0 ... Q8_1),
 * QUANT_QK_K = 256 elements per super-block of the K-quants (Q4_K, Q5_K, Q6_K, Q8_K).
 * Half-precision fields (d, m, s, dmin) are IEEE binary16 bit patterns; convert them
 * with quant_f16_to_f32(). Every layout is byte-identical to ggml's (ggml-common.h),
 * so GGUF tensor data is read in place.
 *
 * How a block decodes (q = the stored integer of element j):
 *   Q4_0: x = d * (q - 8),   q = nibble; qs[i] holds elements i (low) and i+16 (high)
 *   Q4_1: x = d * q + m,     same nibble order
 *   Q5_0: x = d * (q - 16),  q = nibble | bit j of qh << 4
 *   Q5_1: x = d * q + m,     same 5-bit order
 *   Q8_0: x = d * q
 *   Q8_1: x = d * q,         s = d * sum(q) (both F16): the activation format of Q4_1/Q5_1
 *   Q4_K: 8 sub-blocks of 32 with 6-bit scale sc and min mn (12 packed bytes):
 *         x = d*sc * q - dmin*mn; qs[32*c + l] holds elements 64c+l (low) and 64c+32+l (high)
 *   Q5_K: as Q4_K plus a fifth bit: qh[l] bit 2c is element 64c+l, bit 2c+1 is 64c+32+l
 *   Q6_K: 16 sub-blocks of 16 with int8 scale; x = d * sc * (q - 32), q 6 bits split into
 *         ql (low 4) and qh (high 2), in two halves of 128 (see quant_kquants.c)
 *   Q8_K: x = d * q with float d; bsums[g] = sum of q over elements 16g..16g+15
 */

#define QUANT_QK            32
#define QUANT_QK_K          256
#define QUANT_K_SCALE_BYTES 12

typedef struct quant_block_q4_0 {
    uint16_t d;
    uint8_t qs[QUANT_QK / 2];
} quant_block_q4_0;

typedef struct quant_block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[QUANT_QK / 2];
} quant_block_q4_1;

typedef struct quant_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QUANT_QK / 2];
} quant_block_q5_0;

typedef struct quant_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QUANT_QK / 2];
} quant_block_q5_1;

typedef struct quant_block_q8_0 {
    uint16_t d;
    int8_t qs[QUANT_QK];
} quant_block_q8_0;

typedef struct quant_block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[QUANT_QK];
} quant_block_q8_1;

typedef struct quant_block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[QUANT_K_SCALE_BYTES];
    uint8_t qs[QUANT_QK_K / 2];
} quant_block_q4_k;

typedef struct quant_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[QUANT_K_SCALE_BYTES];
    uint8_t qh[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 2];
} quant_block_q5_k;

typedef struct quant_block_q6_k {
    uint8_t ql[QUANT_QK_K / 2];
    uint8_t qh[QUANT_QK_K / 4];
    int8_t scales[QUANT_QK_K / 16];
    uint16_t d;
} quant_block_q6_k;

typedef struct quant_block_q8_k {
    float d;
    int8_t qs[QUANT_QK_K];
    int16_t bsums[QUANT_QK_K / 16];
} quant_block_q8_k;

static_assert(sizeof(quant_block_q4_0) == 18, "q4_0 block layout");
static_assert(sizeof(quant_block_q4_1) == 20, "q4_1 block layout");
static_assert(sizeof(quant_block_q5_0) == 22, "q5_0 block layout");
static_assert(sizeof(quant_block_q5_1) == 24, "q5_1 block layout");
static_assert(sizeof(quant_block_q8_0) == 34, "q8_0 block layout");
static_assert(sizeof(quant_block_q8_1) == 36, "q8_1 block layout");
static_assert(sizeof(quant_block_q4_k) == 144, "q4_K block layout");
static_assert(sizeof(quant_block_q5_k) == 176, "q5_K block layout");
static_assert(sizeof(quant_block_q6_k) == 210, "q6_K block layout");
static_assert(sizeof(quant_block_q8_k) == 292, "q8_K block layout");

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. Bytes 0-3 hold
 * the scales of sub-blocks 0-3 and bytes 4-7 their mins (low 6 bits each); sub-blocks
 * 4-7 keep their low 4 bits in bytes 8-11 (scale low nibble, min high nibble) and
 * their top 2 bits in the top bits of bytes 0-3 (scales) and 4-7 (mins). */
static inline void quant_k4_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *mn = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
        *mn = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

#endif

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

#endif

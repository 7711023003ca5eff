/* host_avx2.h: the AVX2 building blocks the CPU backend's row kernels share
 * (host_quant_dot.c, host_quant_dot_rows.c): the integer horizontal sum, F16 scale
 * loads, nibble and bit unpacking, and the 8-bit dot products (the float horizontal
 * sum and the target attribute come from host_internal.h). Every function carries the target
 * attribute, so the including file is still compiled for plain x86-64 and only calls
 * them after host__cpu_has_avx2().
 */
#ifndef SP_HOST_AVX2_H
#define SP_HOST_AVX2_H

#include <stdint.h>
#include <string.h>

#include "gpu/host/host_internal.h" /* HOST_SIMD_AVX2, HOST_AVX2_TARGET, host__avx2_hsum */

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

/* Signed bytes x times signed bytes y, in groups of 4 -> 8 int32: |x| as unsigned,
 * the sign moved onto y. x may be -128 (|x| reads as 128); y never is (no activation
 * quantizer produces -128). */
static HOST_AVX2_TARGET inline __m256i avx2_dot_s8s8(__m256i x, __m256i y) {
    return avx2_dot_u8s8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

#endif /* HOST_SIMD_AVX2 */

#endif

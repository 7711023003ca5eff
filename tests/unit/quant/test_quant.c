/* test_quant.c: the reference code of the tensor formats (quant/quant.c,
 * quant/quant_kquants.c): type table and sizes, F16/BF16 conversion, blocks built by
 * hand that must decode to values worked out here, quantize/dequantize round trips,
 * and the quantized dot products against float dot products.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant.h"

/* F16 bit patterns used below. */
enum {
    H_ZERO = 0x0000,
    H_ONE = 0x3C00,
    H_HALF = 0x3800,      /* 0.5 */
    H_QUARTER = 0x3400,   /* 0.25 */
    H_EIGHTH = 0x3000,    /* 0.125 */
    H_TWO = 0x4000,       /* 2.0 */
    H_MINUS_1_5 = 0xBE00, /* -1.5 */
    H_MINUS_8 = 0xC800,   /* -8.0 */
};

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- type table ------------------------------------------------------------------------ */

typedef struct type_row {
    quant_type type;
    const char *name;
    size_t block_size;
    size_t block_bytes;
    bool supported;
} type_row;

static const type_row type_rows[] = {
    {QUANT_F32, "F32", 1, 4, true},       {QUANT_F16, "F16", 1, 2, true},        {QUANT_BF16, "BF16", 1, 2, true},
    {QUANT_Q4_0, "Q4_0", 32, 18, true},   {QUANT_Q4_1, "Q4_1", 32, 20, true},    {QUANT_Q5_0, "Q5_0", 32, 22, true},
    {QUANT_Q5_1, "Q5_1", 32, 24, true},   {QUANT_Q8_0, "Q8_0", 32, 34, true},    {QUANT_Q8_1, "Q8_1", 32, 36, true},
    {QUANT_Q2_K, "Q2_K", 256, 84, false}, {QUANT_Q3_K, "Q3_K", 256, 110, false}, {QUANT_Q4_K, "Q4_K", 256, 144, true},
    {QUANT_Q5_K, "Q5_K", 256, 176, true}, {QUANT_Q6_K, "Q6_K", 256, 210, true},  {QUANT_Q8_K, "Q8_K", 256, 292, true},
};
enum { TYPE_ROWS = sizeof type_rows / sizeof type_rows[0] };

Test(quant, type_table_gives_ggml_names_block_sizes_and_bytes) {
    for (int i = 0; i < TYPE_ROWS; i++) {
        const type_row *r = &type_rows[i];
        cr_expect_str_eq(quant_type_name(r->type), r->name);
        cr_expect_eq(quant_block_size(r->type), r->block_size, "%s", r->name);
        cr_expect_eq(quant_block_bytes(r->type), r->block_bytes, "%s", r->name);
        cr_expect_eq(quant_type_supported(r->type), r->supported, "%s", r->name);
    }
}

Test(quant, other_ggml_types_are_named_and_sized_but_unsupported) {
    cr_expect_str_eq(quant_type_name(20), "IQ4_NL");
    cr_expect_eq(quant_block_size(20), 32);
    cr_expect_eq(quant_block_bytes(20), 18);
    cr_expect_str_eq(quant_type_name(29), "IQ1_M");
    cr_expect_eq(quant_block_bytes(29), 56);
    for (uint32_t id = 16; id <= 29; id++) cr_expect_not(quant_type_supported(id), "type %u", id);
    cr_expect_not(quant_type_supported(QUANT_Q2_K));
}

Test(quant, unknown_type_ids_have_no_size_or_name) {
    const uint32_t unknown[] = {4, 5, 31, 32, 33, 36, 63, 64, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        cr_expect_str_eq(quant_type_name(unknown[i]), "unknown");
        cr_expect_eq(quant_block_size(unknown[i]), 0);
        cr_expect_eq(quant_block_bytes(unknown[i]), 0);
        cr_expect_not(quant_type_supported(unknown[i]));
        cr_expect_not(quant_row_valid((quant_type)unknown[i], 256));
    }
}

Test(quant, row_bytes_for_every_type) {
    /* rows of 4096 and 1536 (multiples of every block size), and the block size itself */
    for (int i = 0; i < TYPE_ROWS; i++) {
        const type_row *r = &type_rows[i];
        cr_expect_eq(quant_row_bytes(r->type, 4096), 4096 / r->block_size * r->block_bytes, "%s", r->name);
        cr_expect_eq(quant_row_bytes(r->type, 1536), 1536 / r->block_size * r->block_bytes, "%s", r->name);
        cr_expect_eq(quant_row_bytes(r->type, (int64_t)r->block_size), r->block_bytes, "%s", r->name);
    }
    /* spot values worked out by hand */
    cr_expect_eq(quant_row_bytes(QUANT_Q4_1, 576), 360);   /* 18 blocks * 20 */
    cr_expect_eq(quant_row_bytes(QUANT_Q8_0, 576), 612);   /* 18 * 34 */
    cr_expect_eq(quant_row_bytes(QUANT_Q6_K, 1536), 1260); /* 6 * 210 */
    cr_expect_eq(quant_row_bytes(QUANT_F16, 3), 6);
    cr_expect_eq(quant_row_bytes(QUANT_F32, 0), 0);
}

Test(quant, row_valid_needs_a_positive_multiple_of_the_block_size) {
    cr_expect(quant_row_valid(QUANT_F32, 1));
    cr_expect(quant_row_valid(QUANT_BF16, 7));
    cr_expect(quant_row_valid(QUANT_Q4_1, 576));
    cr_expect_not(quant_row_valid(QUANT_Q4_1, 577));
    cr_expect_not(quant_row_valid(QUANT_Q4_1, 16));
    cr_expect(quant_row_valid(QUANT_Q4_K, 1536));
    cr_expect_not(quant_row_valid(QUANT_Q4_K, 576));
    cr_expect_not(quant_row_valid(QUANT_Q8_0, 0));
    cr_expect_not(quant_row_valid(QUANT_F32, 0));
    cr_expect_not(quant_row_valid(QUANT_Q8_0, -32));
}

Test(quant, vec_dot_type_pairs_weights_with_their_activation_format) {
    cr_expect_eq(quant_vec_dot_type(QUANT_Q4_0), QUANT_Q8_0);
    cr_expect_eq(quant_vec_dot_type(QUANT_Q5_0), QUANT_Q8_0);
    cr_expect_eq(quant_vec_dot_type(QUANT_Q8_0), QUANT_Q8_0);
    cr_expect_eq(quant_vec_dot_type(QUANT_Q4_1), QUANT_Q8_1);
    cr_expect_eq(quant_vec_dot_type(QUANT_Q5_1), QUANT_Q8_1);
    cr_expect_eq(quant_vec_dot_type(QUANT_Q4_K), QUANT_Q8_K);
    cr_expect_eq(quant_vec_dot_type(QUANT_Q5_K), QUANT_Q8_K);
    cr_expect_eq(quant_vec_dot_type(QUANT_Q6_K), QUANT_Q8_K);
    cr_expect_eq(quant_vec_dot_type(QUANT_F32), QUANT_F32);
    cr_expect_eq(quant_vec_dot_type(QUANT_F16), QUANT_F16);
    cr_expect_eq(quant_vec_dot_type(QUANT_BF16), QUANT_BF16);
}

/* ---- F16 -------------------------------------------------------------------------------- */

Test(quant, f16_converts_exact_values_both_ways) {
    const struct {
        uint16_t h;
        float f;
    } exact[] = {
        {0x0000, 0.0f},        {0x8000, -0.0f},    {0x3C00, 1.0f},      {0xC000, -2.0f},        {0x3800, 0.5f},
        {0x7BFF, 65504.0f},    {0x0400, 0x1p-14f}, {0x0001, 0x1p-24f},  {0x03FF, 0x1.ff8p-15f}, {0x8001, -0x1p-24f},
        {0x3555, 0x1.554p-2f}, {0x7C00, INFINITY}, {0xFC00, -INFINITY},
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        const float f = quant_f16_to_f32(exact[i].h);
        cr_expect(f == exact[i].f && signbit(f) == signbit(exact[i].f), "%04x -> %a, want %a", exact[i].h, f,
                  exact[i].f);
        cr_expect_eq(quant_f32_to_f16(exact[i].f), exact[i].h, "%a -> %04x, want %04x", exact[i].f,
                     quant_f32_to_f16(exact[i].f), exact[i].h);
    }
}

Test(quant, f16_rounds_to_nearest_even) {
    /* halves near 1.0 are 2^-10 apart */
    cr_expect_eq(quant_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);            /* tie: down to even */
    cr_expect_eq(quant_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);        /* tie: up to even */
    cr_expect_eq(quant_f32_to_f16(1.0f + 0x1p-11f + 0x1p-23f), 0x3C01); /* just above a tie */
    cr_expect_eq(quant_f32_to_f16(1.0f + 0x1p-11f - 0x1p-23f), 0x3C00); /* just below a tie */
    cr_expect_eq(quant_f32_to_f16(-(1.0f + 3 * 0x1p-11f)), 0xBC02);
    /* carry out of the mantissa into the exponent: 2 - 2^-11 ties up to 2.0 */
    cr_expect_eq(quant_f32_to_f16(2.0f - 0x1p-11f), 0x4000);
}

Test(quant, f16_overflows_to_infinity_from_65520) {
    cr_expect_eq(quant_f32_to_f16(65519.996f), 0x7BFF);
    cr_expect_eq(quant_f32_to_f16(65520.0f), 0x7C00); /* tie with odd 65504: rounds up */
    cr_expect_eq(quant_f32_to_f16(1e10f), 0x7C00);
    cr_expect_eq(quant_f32_to_f16(-FLT_MAX), 0xFC00);
}

Test(quant, f16_rounds_into_subnormals_and_to_zero) {
    cr_expect_eq(quant_f32_to_f16(0x1p-25f), 0x0000);           /* tie between 0 and 1 unit: even */
    cr_expect_eq(quant_f32_to_f16(0x1.000002p-25f), 0x0001);    /* just above half a unit */
    cr_expect_eq(quant_f32_to_f16(3 * 0x1p-25f), 0x0002);       /* 1.5 units: tie, even is 2 */
    cr_expect_eq(quant_f32_to_f16(5 * 0x1p-25f), 0x0002);       /* 2.5 units: tie, even is 2 */
    cr_expect_eq(quant_f32_to_f16(1023.5f * 0x1p-24f), 0x0400); /* into the smallest normal */
    cr_expect_eq(quant_f32_to_f16(1e-30f), 0x0000);
    cr_expect_eq(quant_f32_to_f16(-1e-30f), 0x8000);
    cr_expect_eq(quant_f32_to_f16(bits_to_f32(0x00000001)), 0x0000); /* float subnormal */
}

Test(quant, f16_keeps_nan_and_its_sign) {
    cr_expect(isnan(quant_f16_to_f32(0x7E00)));
    cr_expect(isnan(quant_f16_to_f32(0x7C01)));
    const uint16_t h = quant_f32_to_f16(NAN);
    cr_expect((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0, "NAN -> %04x", h);
    const uint16_t negative = quant_f32_to_f16(-NAN);
    cr_expect((negative & 0x8000) != 0 && isnan(quant_f16_to_f32(negative)));
    /* a signalling float NaN whose payload sits in the low bits still stays a NaN */
    const uint16_t low_payload = quant_f32_to_f16(bits_to_f32(0x7F800001));
    cr_expect(isnan(quant_f16_to_f32(low_payload)), "-> %04x", low_payload);
}

Test(quant, f16_round_trip_of_every_non_nan_half_is_exact) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0) continue; /* NaN */
        cr_assert_eq(quant_f32_to_f16(quant_f16_to_f32((uint16_t)h)), h, "%04x", h);
    }
}

/* ---- BF16 ------------------------------------------------------------------------------- */

Test(quant, bf16_converts_exact_values_both_ways) {
    cr_expect_eq(quant_f32_to_bf16(1.0f), 0x3F80);
    cr_expect_eq(quant_f32_to_bf16(-2.0f), 0xC000);
    cr_expect_eq(quant_f32_to_bf16(INFINITY), 0x7F80);
    cr_expect_eq(quant_f32_to_bf16(-0.0f), 0x8000);
    cr_expect(quant_bf16_to_f32(0x3F80) == 1.0f);
    cr_expect(quant_bf16_to_f32(0x4049) == 3.140625f);
    cr_expect(quant_bf16_to_f32(0x0001) == bits_to_f32(0x00010000)); /* subnormal kept */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7F80) == 0x7F80 && (h & 0x007F) != 0) continue; /* NaN */
        cr_assert_eq(quant_f32_to_bf16(quant_bf16_to_f32((uint16_t)h)), h, "%04x", h);
    }
}

Test(quant, bf16_rounds_to_nearest_even) {
    /* bfloat16 values near 1.0 are 2^-7 apart */
    cr_expect_eq(quant_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);     /* tie: down to even */
    cr_expect_eq(quant_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82); /* tie: up to even */
    cr_expect_eq(quant_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3F81);
    cr_expect_eq(quant_f32_to_bf16(FLT_MAX), 0x7F80);                 /* rounds up to infinity */
    cr_expect_eq(quant_f32_to_bf16(bits_to_f32(0x00018000)), 0x0002); /* subnormal tie: up to even */
}

Test(quant, bf16_keeps_nan_and_makes_it_quiet) {
    cr_expect_eq(quant_f32_to_bf16(bits_to_f32(0x7F800001)), 0x7FC0); /* signalling -> quiet */
    cr_expect_eq(quant_f32_to_bf16(bits_to_f32(0xFFC00000)), 0xFFC0);
    cr_expect(isnan(quant_bf16_to_f32(0x7FC0)));
}

/* ---- crafted blocks --------------------------------------------------------------------- */

static void expect_floats(const float *got, const float *want, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        cr_expect(got[i] == want[i], "%s element %d: %g, want %g", what, i, got[i], want[i]);
    }
}

Test(quant, q4_0_dequantizes_crafted_block) {
    /* d = 0.5; byte j holds element j (low nibble j) and element j+16 (high nibble 15-j) */
    quant_block_q4_0 b = {.d = H_HALF};
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float want[32], got[32];
    for (int j = 0; j < 16; j++) {
        want[j] = 0.5f * (j - 8);
        want[j + 16] = 0.5f * (15 - j - 8);
    }
    quant_dequantize_row(QUANT_Q4_0, got, &b, 32);
    expect_floats(got, want, 32, "q4_0");
    cr_expect(got[0] == -4.0f && got[16] == 3.5f && got[15] == 3.5f && got[31] == -4.0f);
}

Test(quant, q4_1_dequantizes_crafted_block) {
    /* d = 0.25, m = -1.5; low nibbles count up 0..15, high nibbles are all 15 */
    quant_block_q4_1 b = {.d = H_QUARTER, .m = H_MINUS_1_5};
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | 0xF0);
    float got[32];
    quant_dequantize_row(QUANT_Q4_1, got, &b, 32);
    for (int j = 0; j < 16; j++) {
        cr_expect(got[j] == 0.25f * j - 1.5f, "element %d: %g", j, got[j]);
        cr_expect(got[j + 16] == 0.25f * 15 - 1.5f, "element %d: %g", j + 16, got[j + 16]);
    }
    cr_expect(got[0] == -1.5f && got[6] == 0.0f && got[31] == 2.25f);
}

Test(quant, q5_0_dequantizes_crafted_block) {
    /* d = 1; nibble of element j is j % 16; fifth bits qh = 0xF0F0F0F0 little-endian:
     * set for elements 4-7, 12-15, 20-23, 28-31 */
    quant_block_q5_0 b = {.d = H_ONE, .qh = {0xF0, 0xF0, 0xF0, 0xF0}};
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (j << 4));
    float got[32];
    quant_dequantize_row(QUANT_Q5_0, got, &b, 32);
    for (int j = 0; j < 32; j++) {
        const int fifth = (j % 8) >= 4 ? 16 : 0;
        const float want = (float)((j % 16) + fifth - 16);
        cr_expect(got[j] == want, "element %d: %g, want %g", j, got[j], want);
    }
    cr_expect(got[0] == -16.0f && got[4] == 4.0f && got[31] == 15.0f);
}

Test(quant, q5_1_dequantizes_crafted_block) {
    /* d = 0.5, m = 2; all nibbles 15; fifth bit only for element 0 and element 31 */
    quant_block_q5_1 b = {.d = H_HALF, .m = H_TWO, .qh = {0x01, 0x00, 0x00, 0x80}};
    memset(b.qs, 0xFF, sizeof b.qs);
    float got[32];
    quant_dequantize_row(QUANT_Q5_1, got, &b, 32);
    for (int j = 0; j < 32; j++) {
        const float want = (j == 0 || j == 31) ? 0.5f * 31 + 2.0f : 0.5f * 15 + 2.0f;
        cr_expect(got[j] == want, "element %d: %g, want %g", j, got[j], want);
    }
}

Test(quant, q8_0_dequantizes_crafted_block) {
    quant_block_q8_0 b = {.d = H_EIGHTH};
    for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)(j * 8 - 127);
    float got[32];
    quant_dequantize_row(QUANT_Q8_0, got, &b, 32);
    for (int j = 0; j < 32; j++) cr_expect(got[j] == 0.125f * (j * 8 - 127), "element %d: %g", j, got[j]);
    cr_expect(got[0] == -15.875f);
}

Test(quant, q8_1_dequantizes_crafted_block_ignoring_the_sum) {
    quant_block_q8_1 b = {.d = H_TWO, .s = H_MINUS_8};
    for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)(j - 16);
    float got[32];
    quant_dequantize_row(QUANT_Q8_1, got, &b, 32);
    for (int j = 0; j < 32; j++) cr_expect(got[j] == 2.0f * (j - 16));
}

/* Q4_K/Q5_K: scales 1, 2, 3, 4, 33, 34, 35, 63 and mins 0, 1, 2, 3, 40, 41, 42, 63 for
 * sub-blocks 0..7, packed by hand: bytes 0-3 = scales 0-3 plus the top two bits of
 * scales 4-7 in bits 6-7 (33 = 0b10'0001 -> 0x80 | 1); bytes 4-7 = mins 0-3 plus the
 * top bits of mins 4-7 (40 = 0b10'1000 -> 0x80); bytes 8-11 = low nibble of scale 4-7 |
 * low nibble of min 4-7 << 4 (33, 40 -> 0x81). */
static const uint8_t k4_scales[12] = {0x81, 0x82, 0x83, 0xC4, 0x80, 0x81, 0x82, 0xC3, 0x81, 0x92, 0xA3, 0xFF};
static const int k4_sc[8] = {1, 2, 3, 4, 33, 34, 35, 63};
static const int k4_mn[8] = {0, 1, 2, 3, 40, 41, 42, 63};

/* Nibble pattern of the crafted K blocks: in each 64-element chunk, element l < 32 takes
 * the low nibble of byte l (set to l % 16), element 32 + l the high nibble (15 - l % 16). */
static int k4_crafted_nibble(int e) {
    const int l = e % 64;
    return l < 32 ? l % 16 : 15 - (l - 32) % 16;
}

static void k4_crafted_qs(uint8_t qs[128]) {
    for (int chunk = 0; chunk < 4; chunk++) {
        for (int l = 0; l < 32; l++) qs[32 * chunk + l] = (uint8_t)((l % 16) | ((15 - l % 16) << 4));
    }
}

Test(quant, k4_scale_min_unpacks_hand_packed_bytes) {
    for (int sb = 0; sb < 8; sb++) {
        uint8_t sc, mn;
        quant_k4_scale_min(sb, k4_scales, &sc, &mn);
        cr_expect_eq(sc, k4_sc[sb], "scale %d", sb);
        cr_expect_eq(mn, k4_mn[sb], "min %d", sb);
    }
}

Test(quant, q4_k_dequantizes_crafted_block) {
    quant_block_q4_k b = {.d = H_HALF, .dmin = H_QUARTER};
    memcpy(b.scales, k4_scales, 12);
    k4_crafted_qs(b.qs);
    float got[256];
    quant_dequantize_row(QUANT_Q4_K, got, &b, 256);
    for (int e = 0; e < 256; e++) {
        const int sb = e / 32;
        const float want = 0.5f * k4_sc[sb] * k4_crafted_nibble(e) - 0.25f * k4_mn[sb];
        cr_expect(got[e] == want, "element %d: %g, want %g", e, got[e], want);
    }
    cr_expect(got[255] == 0.5f * 63 * 0 - 0.25f * 63); /* last element: high nibble 0 */
}

Test(quant, q5_k_dequantizes_crafted_block) {
    /* fifth bits: qh[l] = 0x55 for even l (bits 0, 2, 4, 6: the low-nibble half of every
     * chunk), 0xAA for odd l (bits 1, 3, 5, 7: the high-nibble half) */
    quant_block_q5_k b = {.d = H_ONE, .dmin = H_HALF};
    memcpy(b.scales, k4_scales, 12);
    k4_crafted_qs(b.qs);
    for (int l = 0; l < 32; l++) b.qh[l] = l % 2 == 0 ? 0x55 : 0xAA;
    float got[256];
    quant_dequantize_row(QUANT_Q5_K, got, &b, 256);
    for (int e = 0; e < 256; e++) {
        const int sb = e / 32;
        const int l = e % 32;
        const bool low_half = (e % 64) < 32;
        const int fifth = (low_half == (l % 2 == 0)) ? 16 : 0;
        const float want = 1.0f * k4_sc[sb] * (k4_crafted_nibble(e) + fifth) - 0.5f * k4_mn[sb];
        cr_expect(got[e] == want, "element %d: %g, want %g", e, got[e], want);
    }
}

Test(quant, q6_k_dequantizes_crafted_block) {
    /* d = 0.5; sub-block scales sb - 8 (negative ones too). Each half of 128 elements:
     * ql[l] = 0x21 (element l: low 1; element 64+l: high 2), ql[32+l] = 0x43 (element
     * 32+l: 3; element 96+l: 4); qh[l] = 0b11'10'01'00 (top bits 0, 1, 2, 3 for
     * elements l, 32+l, 64+l, 96+l). So q = {1, 3+16, 2+32, 4+48} - 32 per quarter. */
    quant_block_q6_k b = {.d = H_HALF};
    memset(b.ql, 0, sizeof b.ql);
    for (int half = 0; half < 2; half++) {
        for (int l = 0; l < 32; l++) {
            b.ql[64 * half + l] = 0x21;
            b.ql[64 * half + 32 + l] = 0x43;
            b.qh[32 * half + l] = 0xE4;
        }
    }
    for (int sb = 0; sb < 16; sb++) b.scales[sb] = (int8_t)(sb - 8);
    const int quarter_q[4] = {1 - 32, 19 - 32, 34 - 32, 52 - 32};
    float got[256];
    quant_dequantize_row(QUANT_Q6_K, got, &b, 256);
    for (int e = 0; e < 256; e++) {
        const int quarter = (e % 128) / 32;
        const float want = 0.5f * (e / 16 - 8) * quarter_q[quarter];
        cr_expect(got[e] == want, "element %d: %g, want %g", e, got[e], want);
    }
}

Test(quant, q8_k_dequantizes_with_its_float_scale) {
    quant_block_q8_k b = {.d = -0.03125f};
    for (int e = 0; e < 256; e++) b.qs[e] = (int8_t)(e % 255 - 127);
    float got[256];
    quant_dequantize_row(QUANT_Q8_K, got, &b, 256);
    for (int e = 0; e < 256; e++) cr_expect(got[e] == -0.03125f * (e % 255 - 127));
}

Test(quant, float_rows_dequantize_to_their_values) {
    const float x[5] = {1.0f, -2.5f, 0.1f, 65504.0f, -0.0f};
    uint16_t h[5], bf[5];
    float got[5];
    quant_quantize_row(QUANT_F16, h, x, 5);
    quant_dequantize_row(QUANT_F16, got, h, 5);
    for (int i = 0; i < 5; i++) cr_expect(got[i] == quant_f16_to_f32(quant_f32_to_f16(x[i])));
    quant_quantize_row(QUANT_BF16, bf, x, 5);
    quant_dequantize_row(QUANT_BF16, got, bf, 5);
    for (int i = 0; i < 5; i++) cr_expect(got[i] == quant_bf16_to_f32(quant_f32_to_bf16(x[i])));
    quant_dequantize_row(QUANT_F32, got, x, 5);
    expect_floats(got, x, 5, "f32");
}

/* ---- crafted activation quantization ----------------------------------------------------- */

Test(quant, q8_0_rounds_halfway_to_even_like_ggml_avx2) {
    /* amax 127 gives d = 1 and multiplier 127 / 127 = 1, so x.5 values are exact ties */
    float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49f, -126.5f, 3.5f, -3.5f};
    quant_block_q8_0 b;
    quant_quantize_row(QUANT_Q8_0, &b, x, 32);
    cr_expect_eq(b.d, H_ONE);
    const int want[9] = {127, 2, -2, 0, 0, 1, -126, 4, -4};
    for (int j = 0; j < 9; j++) cr_expect_eq(b.qs[j], want[j], "element %d: %d", j, b.qs[j]);
    for (int j = 9; j < 32; j++) cr_expect_eq(b.qs[j], 0);
}

Test(quant, q8_0_scales_by_127_over_amax) {
    /* the multiplier is 127 / amax (ggml's AVX2 quantizer), not 1 / d */
    float x[32] = {3.0f};
    for (int j = 1; j < 32; j++) x[j] = (float)j * 0.09375f;
    quant_block_q8_0 b;
    quant_quantize_row(QUANT_Q8_0, &b, x, 32);
    const float id = 127.0f / 3.0f;
    for (int j = 0; j < 32; j++) {
        const float v = x[j] * id;
        const int want = (int)nearbyintf(v);
        cr_expect_eq(b.qs[j], want, "element %d: %g -> %d, want %d", j, v, b.qs[j], want);
    }
}

Test(quant, q8_1_stores_d_times_the_sum_of_quants) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = j < 16 ? 127.0f : -1.0f; /* d = 1 */
    quant_block_q8_1 b;
    quant_quantize_row(QUANT_Q8_1, &b, x, 32);
    cr_expect_eq(b.d, H_ONE);
    cr_expect(quant_f16_to_f32(b.s) == 16 * 127 - 16, "s = %g", quant_f16_to_f32(b.s));
}

Test(quant, q8_k_maps_the_largest_magnitude_to_minus_127_and_sums_groups_of_16) {
    float x[256];
    for (int e = 0; e < 256; e++) x[e] = (float)(e % 16) - 7.5f;
    x[100] = 12.7f; /* the largest magnitude, positive: d = 12.7 / -127 = -0.1 */
    quant_block_q8_k b;
    quant_quantize_row(QUANT_Q8_K, &b, x, 256);
    cr_expect(fabsf(b.d + 0.1f) < 1e-7f, "d = %g", b.d);
    cr_expect_eq(b.qs[100], -127);
    for (int g = 0; g < 16; g++) {
        int sum = 0;
        for (int l = 0; l < 16; l++) sum += b.qs[16 * g + l];
        cr_expect_eq(b.bsums[g], sum, "group %d", g);
    }
    /* ties: x = -7.5 -> 75 exactly representable? -7.5 / -0.1 = 75 (not a tie); the
     * dequantized block is within half a step of x */
    float back[256];
    quant_dequantize_row(QUANT_Q8_K, back, &b, 256);
    for (int e = 0; e < 256; e++) cr_expect(fabsf(back[e] - x[e]) <= 0.05f + 1e-6f, "element %d", e);
}

/* ---- random rows: round trips and dot products ------------------------------------------- */

static uint64_t rng_state = 12345;

static float rng_uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    const uint64_t r = rng_state * 0x2545F4914F6CDD1DULL;
    return (float)(r >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* Roughly Gaussian values (sum of three uniforms) with a per-32 magnitude and offset. */
static void fill_row(float *x, int64_t n) {
    float magnitude = 1.0f, offset = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) {
            magnitude = 0.1f + fabsf(rng_uniform());
            offset = 0.3f * magnitude * rng_uniform();
        }
        x[i] = magnitude * (rng_uniform() + rng_uniform() + rng_uniform()) + offset;
    }
}

static const quant_type weight_types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_Q8_0, QUANT_Q4_K,
                                          QUANT_Q5_K, QUANT_Q6_K, QUANT_F16,  QUANT_BF16, QUANT_F32};
enum { WEIGHT_TYPES = sizeof weight_types / sizeof weight_types[0], ROW = 1536 };

/* Per-block bound on |x - dequantize(quantize(x))| for the 32-element formats:
 * the block's step d (amax/8, amax/16, range/15, range/31, amax/127) times a factor. */
static float block_error_bound(quant_type t, const float *x) {
    float amax = 0.0f, min = x[0], max = x[0];
    for (int j = 0; j < 32; j++) {
        amax = fmaxf(amax, fabsf(x[j]));
        min = fminf(min, x[j]);
        max = fmaxf(max, x[j]);
    }
    const float f16_slack = 2e-3f * amax; /* d, m stored as F16 */
    switch (t) {
    case QUANT_Q4_0: return amax / 8 + f16_slack; /* the far side of the signed max may clamp one step */
    case QUANT_Q5_0: return amax / 16 + f16_slack;
    case QUANT_Q4_1: return 0.5f * (max - min) / 15 + f16_slack;
    case QUANT_Q5_1: return 0.5f * (max - min) / 31 + f16_slack;
    case QUANT_Q8_0: return 0.5f * amax / 127 + f16_slack;
    default: return 0.0f;
    }
}

Test(quant, round_trip_of_32_element_formats_stays_within_half_a_step) {
    static float x[ROW], back[ROW];
    static uint8_t q[ROW * 4];
    const quant_type types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_Q8_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int trial = 0; trial < 20; trial++) {
            fill_row(x, ROW);
            quant_quantize_row(types[t], q, x, ROW);
            quant_dequantize_row(types[t], back, q, ROW);
            for (int ib = 0; ib < ROW / 32; ib++) {
                const float bound = block_error_bound(types[t], x + 32 * ib);
                for (int j = 0; j < 32; j++) {
                    const int i = 32 * ib + j;
                    cr_assert(fabsf(back[i] - x[i]) <= bound, "%s element %d: %g -> %g (bound %g)",
                              quant_type_name(types[t]), i, x[i], back[i], bound);
                }
            }
        }
    }
}

/* K-quants and half formats: relative RMS error over whole rows. */
Test(quant, round_trip_of_k_quants_and_halves_keeps_rms_error_small) {
    static float x[ROW], back[ROW];
    static uint8_t q[ROW * 4];
    const struct {
        quant_type type;
        double max_rel_rms;
    } cases[] = {
        {QUANT_Q4_K, 0.10}, {QUANT_Q5_K, 0.05}, {QUANT_Q6_K, 0.025},
        {QUANT_F16, 5e-4},  {QUANT_BF16, 4e-3}, {QUANT_F32, 0.0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double err2 = 0.0, x2 = 0.0;
        for (int trial = 0; trial < 20; trial++) {
            fill_row(x, ROW);
            quant_quantize_row(cases[c].type, q, x, ROW);
            quant_dequantize_row(cases[c].type, back, q, ROW);
            for (int i = 0; i < ROW; i++) {
                err2 += (double)(back[i] - x[i]) * (back[i] - x[i]);
                x2 += (double)x[i] * x[i];
            }
        }
        const double rel = sqrt(err2 / x2);
        cr_expect(rel <= cases[c].max_rel_rms, "%s: relative RMS error %.4f > %.4f", quant_type_name(cases[c].type),
                  rel, cases[c].max_rel_rms);
    }
}

Test(quant, quantized_zero_rows_dequantize_to_zero) {
    static const float zeros[512];
    static float back[512];
    static uint8_t q[512 * 4];
    const quant_type types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_Q8_0,
                                QUANT_Q8_1, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K, QUANT_Q8_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        quant_quantize_row(types[t], q, zeros, 512);
        quant_dequantize_row(types[t], back, q, 512);
        for (int i = 0; i < 512; i++) cr_assert(back[i] == 0.0f, "%s element %d", quant_type_name(types[t]), i);
    }
}

/* The integer dot products with their scales must equal the float dot product of the
 * two dequantized rows up to float rounding: this checks block pairing, bsums and the
 * min terms without any quantization error in the way. */
Test(quant, vec_dot_ref_equals_float_dot_of_dequantized_rows) {
    static float x[ROW], wf[ROW], af[ROW];
    static uint8_t w[ROW * 4], a[ROW * 4];
    for (int t = 0; t < WEIGHT_TYPES; t++) {
        const quant_type wt = weight_types[t];
        const quant_type at = quant_vec_dot_type(wt);
        for (int trial = 0; trial < 10; trial++) {
            fill_row(x, ROW);
            quant_quantize_row(wt, w, x, ROW);
            fill_row(x, ROW);
            quant_quantize_row(at, a, x, ROW);
            quant_dequantize_row(wt, wf, w, ROW);
            quant_dequantize_row(at, af, a, ROW);
            double want = 0.0, magnitude = 0.0, min_terms = 0.0;
            for (int i = 0; i < ROW; i++) {
                want += (double)wf[i] * af[i];
                magnitude += fabs((double)wf[i] * af[i]);
                min_terms += fabs((double)af[i]);
            }
            const float got = quant_vec_dot_ref(wt, w, a, ROW);
            /* Q4_1/Q5_1 use the stored s = F16(d * sum q): allow its rounding */
            const double s_slack = (at == QUANT_Q8_1) ? 2e-3 * min_terms : 0.0;
            const double tolerance = 1e-5 * magnitude + s_slack + 1e-6;
            cr_expect(fabs(got - want) <= tolerance, "%s trial %d: %.8g vs %.8g (tolerance %.3g)", quant_type_name(wt),
                      trial, got, want, tolerance);
        }
    }
}

/* Against the exact float activations the error is the activation format's rounding:
 * 8 bits per block for Q8_*, 11 bits for F16, 8 for BF16. */
Test(quant, vec_dot_ref_approximates_vec_dot_f32_ref_within_the_activation_precision) {
    static float x[ROW];
    static uint8_t w[ROW * 4], a[ROW * 4];
    for (int t = 0; t < WEIGHT_TYPES; t++) {
        const quant_type wt = weight_types[t];
        const quant_type at = quant_vec_dot_type(wt);
        const double rel = at == QUANT_F32 ? 1e-6 : at == QUANT_F16 ? 1e-3 : at == QUANT_BF16 ? 4e-3 : 1e-2;
        for (int trial = 0; trial < 10; trial++) {
            fill_row(x, ROW);
            quant_quantize_row(wt, w, x, ROW);
            fill_row(x, ROW);
            quant_quantize_row(at, a, x, ROW);
            static float wf[ROW];
            quant_dequantize_row(wt, wf, w, ROW);
            double magnitude = 0.0;
            for (int i = 0; i < ROW; i++) magnitude += fabs((double)wf[i] * x[i]);
            const float exact = quant_vec_dot_f32_ref(wt, w, x, ROW);
            const float got = quant_vec_dot_ref(wt, w, a, ROW);
            cr_expect(fabs(got - exact) <= rel * magnitude, "%s trial %d: %.6g vs %.6g (magnitude %.3g)",
                      quant_type_name(wt), trial, got, exact, magnitude);
        }
    }
}

Test(quant, vec_dot_f32_ref_with_a_unit_vector_picks_one_dequantized_weight) {
    static float x[ROW], wf[ROW], unit[ROW];
    static uint8_t w[ROW * 4];
    for (int t = 0; t < WEIGHT_TYPES; t++) {
        const quant_type wt = weight_types[t];
        fill_row(x, ROW);
        quant_quantize_row(wt, w, x, ROW);
        quant_dequantize_row(wt, wf, w, ROW);
        const int picks[] = {0, 31, 255, 256, 777, ROW - 1};
        for (size_t p = 0; p < sizeof picks / sizeof picks[0]; p++) {
            memset(unit, 0, sizeof unit);
            unit[picks[p]] = 1.0f;
            cr_expect(quant_vec_dot_f32_ref(wt, w, unit, ROW) == wf[picks[p]], "%s element %d", quant_type_name(wt),
                      picks[p]);
        }
    }
}

Test(quant, q4_1_dot_of_crafted_blocks_uses_min_times_stored_sum) {
    /* weights: d = 0.5, m = -8, nibbles: element j is j % 16 (both halves) */
    quant_block_q4_1 w = {.d = H_HALF, .m = H_MINUS_8};
    for (int j = 0; j < 16; j++) w.qs[j] = (uint8_t)(j | (j << 4));
    /* activations: d = 0.25, q = 1 for the first half and -2 for the second,
     * s = d * sum(q) = 0.25 * (16 - 32) = -4 */
    quant_block_q8_1 a = {.d = H_QUARTER, .s = quant_f32_to_f16(-4.0f)};
    for (int j = 0; j < 32; j++) a.qs[j] = (int8_t)(j < 16 ? 1 : -2);
    /* isum = sum(j) * 1 + sum(j) * -2 = 120 - 240 = -120 over j = 0..15 */
    const float want = 0.5f * 0.25f * -120.0f + -8.0f * -4.0f; /* = -15 + 32 = 17 */
    cr_expect(quant_vec_dot_ref(QUANT_Q4_1, &w, &a, 32) == want, "got %g, want %g",
              quant_vec_dot_ref(QUANT_Q4_1, &w, &a, 32), want);
}

Test(quant, q6_k_dot_of_crafted_blocks_scales_each_sub_block) {
    /* every q = 33 (value +1), scales sb + 1, d = 1; activations all 2 with d = 0.5:
     * sum over sub-blocks of (sb + 1) * 16 * 2 = 32 * 136 = 4352, times 1 * 0.5 */
    quant_block_q6_k w = {.d = H_ONE};
    memset(w.ql, 0x11, sizeof w.ql); /* low nibbles 1 */
    memset(w.qh, 0xAA, sizeof w.qh); /* top bits 0b10 = 2 -> q = 1 + 32 */
    for (int sb = 0; sb < 16; sb++) w.scales[sb] = (int8_t)(sb + 1);
    quant_block_q8_k a = {.d = 0.5f};
    memset(a.qs, 2, sizeof a.qs);
    for (int g = 0; g < 16; g++) a.bsums[g] = 32;
    cr_expect(quant_vec_dot_ref(QUANT_Q6_K, &w, &a, 256) == 2176.0f, "got %g",
              quant_vec_dot_ref(QUANT_Q6_K, &w, &a, 256));
}

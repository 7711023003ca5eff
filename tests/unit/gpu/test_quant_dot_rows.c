/* test_quant_dot_rows.c: the multi-row kernels give every row the exact bits of the
 * one-row kernel, whatever the other rows in the call are: that is what keeps a token's
 * result independent of its batch. Two kinds: several activation rows against one
 * weight row (gpu/host/host_quant_dot_rows.c), and several weight rows against one
 * activation row (host_quant_dot_wrows.c, in the avx2 and the avx512 set; avx512's must
 * also equal avx2's one-row kernel, so the two sets compute the same numbers). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/host/host_internal.h"

static const int64_t row_sizes[] = {32, 576, 1536, 4096};
static const quant_type row_types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q8_0};

static uint64_t rng = 0x1234;
static float rng_uniform(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* n floats with a magnitude that changes per block and an offset in some blocks. */
static void fill(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) {
        float scale = 0.01f + 4.0f * (rng_uniform() + 1.0f), offset = rng_uniform() > 0.5f ? rng_uniform() : 0.0f;
        for (int64_t j = i; j < i + 32 && j < n; j++) x[j] = offset + scale * rng_uniform();
    }
}

/* One weight row of type t and HOST_DOT_ROWS activation rows: set isa's multi-row
 * results, written with out_stride, equal the avx2 one-row kernel's bit for bit. */
static void check_type(dev_cpu_isa isa, quant_type t, int64_t n, size_t out_stride) {
    host_vec_dot_rows_fn rows = host__vec_dot_rows_for(isa, t);
    host_vec_dot_fn one = host__vec_dot_for(DEV_CPU_ISA_AVX2, t);
    cr_assert_not_null(rows, "%s: no multi-row kernel", quant_type_name(t));
    cr_assert_not_null(one);
    quant_type at = quant_vec_dot_type(t);
    host_quantize_fn quantize = host__quantize_for(DEV_CPU_ISA_AVX2, at);
    size_t w_bytes = quant_row_bytes(t, n), a_bytes = quant_row_bytes(at, n);
    float *x = malloc(sizeof *x * (size_t)n);
    void *w = malloc(w_bytes), *a = malloc(a_bytes * HOST_DOT_ROWS);
    float *out = calloc(out_stride * HOST_DOT_ROWS, sizeof *out);
    cr_assert(x && w && a && out);
    fill(x, n);
    quant_quantize_row(t, w, x, n);
    for (int r = 0; r < HOST_DOT_ROWS; r++) {
        fill(x, n);
        quantize((char *)a + (size_t)r * a_bytes, x, n);
    }
    rows(w, a, a_bytes, n, out, out_stride);
    for (int r = 0; r < HOST_DOT_ROWS; r++) {
        float alone = one(w, (char *)a + (size_t)r * a_bytes, n);
        float got = out[(size_t)r * out_stride];
        cr_expect(memcmp(&alone, &got, sizeof got) == 0, "%s n=%lld row %d: %.9g from the multi-row kernel, %.9g alone",
                  quant_type_name(t), (long long)n, r, (double)got, (double)alone);
    }
    free(x);
    free(w);
    free(a);
    free(out);
}

Test(quant_dot_rows, every_row_matches_the_one_row_kernel_bit_for_bit) {
    if (!host__cpu_features().avx2) cr_skip_test("this CPU has no AVX2/FMA/F16C");
    for (size_t i = 0; i < sizeof row_types / sizeof row_types[0]; i++)
        for (size_t j = 0; j < sizeof row_sizes / sizeof row_sizes[0]; j++)
            for (int seed = 0; seed < 20; seed++)
                check_type(DEV_CPU_ISA_AVX2, row_types[i], row_sizes[j], seed % 2 ? 1 : 1536);
}

Test(quant_dot_rows, avx512_multi_row_kernel_matches_avx2_bit_for_bit) {
    if (!host__cpu_features().avx512) cr_skip_test("this CPU (or its OS) has no AVX-512 F/BW/VL/VNNI");
    for (size_t i = 0; i < sizeof row_types / sizeof row_types[0]; i++)
        for (size_t j = 0; j < sizeof row_sizes / sizeof row_sizes[0]; j++)
            for (int seed = 0; seed < 20; seed++)
                check_type(DEV_CPU_ISA_AVX512, row_types[i], row_sizes[j], seed % 2 ? 1 : 1536);
}

/* HOST_DOT_WROWS weight rows of type t (with a gap between them, as rows of a bigger
 * matrix) and one activation row: set isa's results equal the avx2 one-row kernel's. */
static void check_wrows(dev_cpu_isa isa, quant_type t, int64_t n) {
    host_vec_dot_wrows_fn wrows = host__vec_dot_wrows_for(isa, t);
    host_vec_dot_fn one = host__vec_dot_for(DEV_CPU_ISA_AVX2, t);
    cr_assert_not_null(wrows, "%s %s: no decode-shaped kernel", dev_cpu_isa_name(isa), quant_type_name(t));
    quant_type at = quant_vec_dot_type(t);
    size_t w_bytes = quant_row_bytes(t, n), a_bytes = quant_row_bytes(at, n);
    size_t w_stride = w_bytes + (size_t)(n % 3) * w_bytes; /* 1 or 2 rows apart */
    float *x = malloc(sizeof *x * (size_t)n), out[HOST_DOT_WROWS];
    char *w = malloc(w_stride * HOST_DOT_WROWS);
    void *a = malloc(a_bytes);
    cr_assert(x && w && a);
    for (int j = 0; j < HOST_DOT_WROWS; j++) {
        fill(x, n);
        quant_quantize_row(t, w + (size_t)j * w_stride, x, n);
    }
    fill(x, n);
    host__quantize_for(DEV_CPU_ISA_AVX2, at)(a, x, n);
    wrows(w, w_stride, a, n, out);
    for (int j = 0; j < HOST_DOT_WROWS; j++) {
        float alone = one(w + (size_t)j * w_stride, a, n);
        cr_expect(memcmp(&alone, &out[j], sizeof alone) == 0,
                  "%s %s n=%lld weight row %d: %.9g from the decode kernel, %.9g from avx2's one-row kernel",
                  dev_cpu_isa_name(isa), quant_type_name(t), (long long)n, j, (double)out[j], (double)alone);
    }
    free(x);
    free(w);
    free(a);
}

static void check_wrows_set(dev_cpu_isa isa) {
    for (size_t i = 0; i < sizeof row_types / sizeof row_types[0]; i++)
        for (size_t j = 0; j < sizeof row_sizes / sizeof row_sizes[0]; j++)
            for (int seed = 0; seed < 20; seed++) check_wrows(isa, row_types[i], row_sizes[j]);
}

Test(quant_dot_rows, avx2_decode_kernel_matches_the_one_row_kernel_bit_for_bit) {
    if (!host__cpu_features().avx2) cr_skip_test("this CPU has no AVX2/FMA/F16C");
    check_wrows_set(DEV_CPU_ISA_AVX2);
}

Test(quant_dot_rows, avx512_decode_kernel_matches_avx2_bit_for_bit) {
    if (!host__cpu_features().avx512) cr_skip_test("this CPU (or its OS) has no AVX-512 F/BW/VL/VNNI");
    check_wrows_set(DEV_CPU_ISA_AVX512);
}

/* Extremes of the 8-bit products: weights of -128 (Q8_0's |x| = 128 case) and 15
 * (Q4's largest nibble) against activations of +-127, where AVX2's maddubs would
 * saturate if a pair of products could pass 32767. */
Test(quant_dot_rows, avx512_decode_kernel_matches_avx2_at_the_extremes) {
    if (!host__cpu_features().avx512) cr_skip_test("this CPU (or its OS) has no AVX-512 F/BW/VL/VNNI");
    enum { N = 64 };
    quant_block_q8_0 w8[HOST_DOT_WROWS][N / QUANT_QK], a8[N / QUANT_QK];
    for (int j = 0; j < HOST_DOT_WROWS; j++)
        for (int b = 0; b < N / QUANT_QK; b++) {
            w8[j][b].d = quant_f32_to_f16(0.5f + (float)j);
            for (int i = 0; i < QUANT_QK; i++) w8[j][b].qs[i] = (int8_t)(i % 2 ? -128 : 127 - j);
        }
    for (int b = 0; b < N / QUANT_QK; b++) {
        a8[b].d = quant_f32_to_f16(0.25f);
        for (int i = 0; i < QUANT_QK; i++) a8[b].qs[i] = (int8_t)(i % 3 ? -127 : 127);
    }
    float out[HOST_DOT_WROWS];
    host__vec_dot_wrows_for(DEV_CPU_ISA_AVX512, QUANT_Q8_0)(w8, sizeof w8[0], a8, N, out);
    for (int j = 0; j < HOST_DOT_WROWS; j++) {
        float alone = host__vec_dot_for(DEV_CPU_ISA_AVX2, QUANT_Q8_0)(w8[j], a8, N);
        cr_expect(memcmp(&alone, &out[j], sizeof alone) == 0, "row %d: %.9g vs %.9g", j, (double)out[j], (double)alone);
    }
}

Test(quant_dot_rows, types_without_one_use_the_one_row_kernel) {
    cr_expect_null(host__vec_dot_rows_for(DEV_CPU_ISA_AVX2, QUANT_Q6_K));
    cr_expect_null(host__vec_dot_rows_for(DEV_CPU_ISA_AVX2, QUANT_F32));
    cr_expect_null(host__vec_dot_rows_for(DEV_CPU_ISA_AVX2, (quant_type)QUANT_TYPE_LIMIT));
    cr_expect_null(host__vec_dot_rows_for(DEV_CPU_ISA_GENERIC, QUANT_Q4_1));
    cr_expect_null(host__vec_dot_wrows_for(DEV_CPU_ISA_AVX512, QUANT_Q6_K));
    cr_expect_null(host__vec_dot_wrows_for(DEV_CPU_ISA_GENERIC, QUANT_Q4_1));
}

/* test_quant_dot_rows.c: the multi-row kernels give every row the exact bits of the
 * one-row kernel, whatever the other rows in the call are: that is what keeps a token's
 * result independent of its batch. Three kinds: several activation rows against one
 * weight row (gpu/host/host_quant_dot_rows.c, the avx2 set), activation rows in pairs
 * against one or two weight rows (host_quant_dot_pairs.c, the avx512 set), and several
 * weight rows against one activation row (host_quant_dot_wrows.c, both sets). The
 * avx512 set's must equal avx2's one-row kernel, so the two sets compute the same
 * numbers. */
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

/* Skips the calling test, saying why, when this CPU (or build) cannot run set isa. */
static void require_set(sp_cpu_isa isa) {
    if (dev_cpu_isa_check(isa) != SP_OK) cr_skip_test("%s", sp_last_error());
}

/* One weight row of type t and n_rows activation rows (2..HOST_DOT_ROWS): set isa's
 * multi-row results, written with out_stride, equal the avx2 one-row kernel's bit for
 * bit, and the slots of rows past n_rows are left alone. */
static void check_type(sp_cpu_isa isa, quant_type t, int64_t n, int n_rows, size_t out_stride) {
    host_vec_dot_rows_fn rows = host__vec_dot_rows_for(isa, t);
    host_vec_dot_fn one = host__vec_dot_for(SP_CPU_ISA_AVX2, t);
    cr_assert_not_null(rows, "%s: no multi-row kernel", quant_type_name(t));
    cr_assert_not_null(one);
    quant_type at = quant_vec_dot_type(t);
    host_quantize_fn quantize = host__quantize_for(SP_CPU_ISA_AVX2, at);
    size_t w_bytes = quant_row_bytes(t, n), a_bytes = quant_row_bytes(at, n);
    float *x = malloc(sizeof *x * (size_t)n);
    void *w = malloc(w_bytes), *a = malloc(a_bytes * HOST_DOT_ROWS);
    float *out = calloc(out_stride * HOST_DOT_ROWS, sizeof *out);
    float *scales = malloc(host__rows_scales_bytes(n, HOST_DOT_ROWS));
    cr_assert(x && w && a && out && scales);
    fill(x, n);
    quant_quantize_row(t, w, x, n);
    for (int r = 0; r < HOST_DOT_ROWS; r++) {
        fill(x, n);
        quantize((char *)a + (size_t)r * a_bytes, x, n);
        host__rows_scales_row(at, (char *)a + (size_t)r * a_bytes, n, r, scales);
    }
    rows(n_rows, w, a, a_bytes, host__rows_scales_group(scales, n, 0), n, out, out_stride);
    for (int r = 0; r < n_rows; r++) {
        float alone = one(w, (char *)a + (size_t)r * a_bytes, n);
        float got = out[(size_t)r * out_stride];
        cr_expect(memcmp(&alone, &got, sizeof got) == 0,
                  "%s n=%lld row %d of %d: %.9g from the multi-row kernel, %.9g alone", quant_type_name(t),
                  (long long)n, r, n_rows, (double)got, (double)alone);
    }
    for (int r = n_rows; r < HOST_DOT_ROWS; r++)
        cr_expect(out[(size_t)r * out_stride] == 0.0f, "%s: a call of %d rows wrote row %d", quant_type_name(t), n_rows,
                  r);
    free(x);
    free(w);
    free(a);
    free(out);
    free(scales);
}

Test(quant_dot_rows, every_row_matches_the_one_row_kernel_bit_for_bit) {
    require_set(SP_CPU_ISA_AVX2);
    for (size_t i = 0; i < sizeof row_types / sizeof row_types[0]; i++)
        for (size_t j = 0; j < sizeof row_sizes / sizeof row_sizes[0]; j++)
            for (int seed = 0; seed < 24; seed++)
                check_type(SP_CPU_ISA_AVX2, row_types[i], row_sizes[j], 2 + seed % (HOST_DOT_ROWS - 1),
                           seed % 2 ? 1 : 1536);
}

/* Activation scales at the F16 edges (zero, minus zero, subnormals, the largest finite
 * values, either sign) through the avx2 multi-row kernels: the float scale table must
 * carry the exact value the one-row kernel converts, for 2, 3 and 4 rows. */
Test(quant_dot_rows, avx2_multi_row_kernels_keep_the_bits_at_f16_edge_scales) {
    require_set(SP_CPU_ISA_AVX2);
    static const uint16_t edges[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00, 0xB555};
    enum { N_EDGES = sizeof edges / sizeof edges[0], K = 576 };
    for (size_t ti = 0; ti < sizeof row_types / sizeof row_types[0]; ti++) {
        const quant_type t = row_types[ti], at = quant_vec_dot_type(t);
        host_vec_dot_rows_fn rows = host__vec_dot_rows_for(SP_CPU_ISA_AVX2, t);
        host_vec_dot_fn one = host__vec_dot_for(SP_CPU_ISA_AVX2, t);
        const size_t w_bytes = quant_row_bytes(t, K), a_bytes = quant_row_bytes(at, K);
        float x[K], out[HOST_DOT_ROWS];
        char *w = malloc(w_bytes), *a = malloc(a_bytes * HOST_DOT_ROWS);
        float *scales = malloc(host__rows_scales_bytes(K, HOST_DOT_ROWS));
        cr_assert(rows && one && w && a && scales);
        fill(x, K);
        quant_quantize_row(t, w, x, K);
        for (int r = 0; r < HOST_DOT_ROWS; r++) {
            char *row = a + (size_t)r * a_bytes;
            fill(x, K);
            host__quantize_for(SP_CPU_ISA_AVX2, at)(row, x, K);
            for (int b = 0; b < K / QUANT_QK; b++) { /* every edge in every lane over the blocks */
                uint16_t d = edges[(b + r) % N_EDGES], s = edges[(b + 3 * r + 1) % N_EDGES];
                if (at == QUANT_Q8_1) {
                    ((quant_block_q8_1 *)row)[b].d = d;
                    ((quant_block_q8_1 *)row)[b].s = s;
                } else {
                    ((quant_block_q8_0 *)row)[b].d = d;
                }
            }
            host__rows_scales_row(at, row, K, r, scales);
        }
        for (int n_rows = 2; n_rows <= HOST_DOT_ROWS; n_rows++) {
            rows(n_rows, w, a, a_bytes, host__rows_scales_group(scales, K, 0), K, out, 1);
            for (int r = 0; r < n_rows; r++) {
                float alone = one(w, a + (size_t)r * a_bytes, K);
                cr_expect(memcmp(&alone, &out[r], sizeof alone) == 0, "%s row %d of %d: %.9g, alone %.9g",
                          quant_type_name(t), r, n_rows, (double)out[r], (double)alone);
            }
        }
        free(w);
        free(a);
        free(scales);
    }
}

/* rows activation rows packed in pairs (written last row first, as the matmul's threads
 * may) and HOST_PAIRS_WROWS weight rows of type t, one or two rows apart: every result
 * of the avx512 set's pair kernel, for each group of pairs and one or two weight rows,
 * equals avx2's one-row kernel, and nothing outside the call's rows and columns is
 * written. */
static void check_pairs(quant_type t, int64_t n, int64_t rows) {
    enum { MAX_ROWS = 2 * HOST_PAIRS_PER_CALL };
    host_vec_dot_pairs_fn pairs = host__vec_dot_pairs_for(SP_CPU_ISA_AVX512, t);
    host_vec_dot_fn one = host__vec_dot_for(SP_CPU_ISA_AVX2, t);
    cr_assert_not_null(pairs, "%s: no pair kernel", quant_type_name(t));
    const quant_type at = quant_vec_dot_type(t);
    const size_t w_bytes = quant_row_bytes(t, n), a_bytes = quant_row_bytes(at, n);
    const size_t w_stride = w_bytes + (size_t)(n % 3) * w_bytes; /* 1 or 2 rows apart */
    float *x = malloc(sizeof *x * (size_t)n);
    char *w = malloc(w_stride * HOST_PAIRS_WROWS), *a = malloc(a_bytes * (size_t)rows);
    void *pack = malloc(host__pairs_bytes(t, n, rows));
    cr_assert(x && w && a && pack);
    for (int j = 0; j < HOST_PAIRS_WROWS; j++) {
        fill(x, n);
        quant_quantize_row(t, w + (size_t)j * w_stride, x, n);
    }
    for (int64_t r = 0; r < rows; r++) {
        fill(x, n);
        host__quantize_for(SP_CPU_ISA_AVX2, at)(a + (size_t)r * a_bytes, x, n);
    }
    const host_pairs_act act = host__pairs_act_init(pack, t, n, rows);
    for (int64_t r = rows - 1; r >= 0; r--) host__pairs_act_row(&act, a + (size_t)r * a_bytes, r);
    for (int64_t p0 = 0; p0 < act.n_pairs; p0 += HOST_PAIRS_PER_CALL) {
        const int n_rows = rows - 2 * p0 < MAX_ROWS ? (int)(rows - 2 * p0) : MAX_ROWS;
        for (int n_w = 1; n_w <= HOST_PAIRS_WROWS; n_w++) {
            float out[MAX_ROWS][HOST_PAIRS_WROWS + 1];
            for (int r = 0; r < MAX_ROWS; r++)
                for (int j = 0; j <= HOST_PAIRS_WROWS; j++) out[r][j] = -7.0f;
            pairs(w, w_stride, n_w, &act, p0, n_rows, &out[0][0], HOST_PAIRS_WROWS + 1);
            for (int r = 0; r < MAX_ROWS; r++)
                for (int j = 0; j <= HOST_PAIRS_WROWS; j++) {
                    if (r >= n_rows || j >= n_w) {
                        cr_expect(out[r][j] == -7.0f, "%s: [%d][%d] written outside the call", quant_type_name(t), r,
                                  j);
                        continue;
                    }
                    const float alone = one(w + (size_t)j * w_stride, a + (size_t)(2 * p0 + r) * a_bytes, n);
                    cr_expect(memcmp(&alone, &out[r][j], sizeof alone) == 0,
                              "%s n=%lld rows=%lld: row %lld weight %d: %.9g from the pair kernel, %.9g alone",
                              quant_type_name(t), (long long)n, (long long)rows, (long long)(2 * p0 + r), j,
                              (double)out[r][j], (double)alone);
                }
        }
    }
    free(x);
    free(w);
    free(a);
    free(pack);
}

Test(quant_dot_rows, avx512_pair_kernel_matches_avx2_bit_for_bit) {
    require_set(SP_CPU_ISA_AVX512);
    for (size_t i = 0; i < sizeof row_types / sizeof row_types[0]; i++)
        for (size_t j = 0; j < sizeof row_sizes / sizeof row_sizes[0]; j++)
            for (int64_t rows = 1; rows <= 2 * HOST_PAIRS_PER_CALL + 3; rows++)
                check_pairs(row_types[i], row_sizes[j], rows);
}

/* HOST_DOT_WROWS weight rows of type t (with a gap between them, as rows of a bigger
 * matrix) and one activation row: set isa's results equal the avx2 one-row kernel's. */
static void check_wrows(sp_cpu_isa isa, quant_type t, int64_t n) {
    host_vec_dot_wrows_fn wrows = host__vec_dot_wrows_for(isa, t);
    host_vec_dot_fn one = host__vec_dot_for(SP_CPU_ISA_AVX2, t);
    cr_assert_not_null(wrows, "%s %s: no decode-shaped kernel", sp_cpu_isa_name(isa), quant_type_name(t));
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
    host__quantize_for(SP_CPU_ISA_AVX2, at)(a, x, n);
    wrows(w, w_stride, a, n, out);
    for (int j = 0; j < HOST_DOT_WROWS; j++) {
        float alone = one(w + (size_t)j * w_stride, a, n);
        cr_expect(memcmp(&alone, &out[j], sizeof alone) == 0,
                  "%s %s n=%lld weight row %d: %.9g from the decode kernel, %.9g from avx2's one-row kernel",
                  sp_cpu_isa_name(isa), quant_type_name(t), (long long)n, j, (double)out[j], (double)alone);
    }
    free(x);
    free(w);
    free(a);
}

static void check_wrows_set(sp_cpu_isa isa) {
    for (size_t i = 0; i < sizeof row_types / sizeof row_types[0]; i++)
        for (size_t j = 0; j < sizeof row_sizes / sizeof row_sizes[0]; j++)
            for (int seed = 0; seed < 20; seed++) check_wrows(isa, row_types[i], row_sizes[j]);
}

Test(quant_dot_rows, avx2_decode_kernel_matches_the_one_row_kernel_bit_for_bit) {
    require_set(SP_CPU_ISA_AVX2);
    check_wrows_set(SP_CPU_ISA_AVX2);
}

Test(quant_dot_rows, avx512_decode_kernel_matches_avx2_bit_for_bit) {
    require_set(SP_CPU_ISA_AVX512);
    check_wrows_set(SP_CPU_ISA_AVX512);
}

/* Extremes of the 8-bit products, where AVX2's maddubs would saturate if a pair of
 * products could pass 32767 and VNNI would then differ: Q8_0 weights of -128 and 127,
 * Q4_0 nibbles 0 and 15 (-8 and 7), Q4_1 nibbles 15, against activations of +-127; through
 * the avx512 set's decode and pair kernels, each row against avx2's one-row kernel. */
static void fill_extreme(quant_type t, void *row, int64_t n, int j) {
    for (int64_t b = 0; b < n / QUANT_QK; b++) {
        if (t == QUANT_Q8_0) {
            quant_block_q8_0 *blk = (quant_block_q8_0 *)row + b;
            blk->d = quant_f32_to_f16(0.5f + (float)j);
            for (int i = 0; i < QUANT_QK; i++) blk->qs[i] = (int8_t)(i % 2 ? -128 : 127 - j);
        } else if (t == QUANT_Q4_0) {
            quant_block_q4_0 *blk = (quant_block_q4_0 *)row + b;
            blk->d = quant_f32_to_f16(0.25f + (float)j);
            for (int i = 0; i < QUANT_QK / 2; i++) blk->qs[i] = (uint8_t)(i % 2 ? 0x0F : 0xF0);
        } else {
            quant_block_q4_1 *blk = (quant_block_q4_1 *)row + b;
            blk->d = quant_f32_to_f16(0.125f + (float)j);
            blk->m = quant_f32_to_f16(-1.5f);
            memset(blk->qs, 0xFF, sizeof blk->qs);
        }
    }
}

static void fill_extreme_activation(quant_type at, void *row, int64_t n, int r) {
    for (int64_t b = 0; b < n / QUANT_QK; b++) {
        int8_t *qs;
        if (at == QUANT_Q8_1) {
            quant_block_q8_1 *blk = (quant_block_q8_1 *)row + b;
            blk->d = quant_f32_to_f16(0.25f);
            blk->s = quant_f32_to_f16(3.0f + (float)r);
            qs = blk->qs;
        } else {
            quant_block_q8_0 *blk = (quant_block_q8_0 *)row + b;
            blk->d = quant_f32_to_f16(0.25f);
            qs = blk->qs;
        }
        for (int i = 0; i < QUANT_QK; i++) qs[i] = (int8_t)((i + r) % 3 ? -127 : 127);
    }
}

Test(quant_dot_rows, avx512_kernels_match_avx2_at_the_extremes) {
    require_set(SP_CPU_ISA_AVX512);
    enum { N = 64 };
    for (size_t ti = 0; ti < sizeof row_types / sizeof row_types[0]; ti++) {
        const quant_type t = row_types[ti], at = quant_vec_dot_type(t);
        char w[HOST_DOT_WROWS][sizeof(quant_block_q8_0) * (N / QUANT_QK)];
        char a[HOST_DOT_ROWS][sizeof(quant_block_q8_1) * (N / QUANT_QK)];
        for (int j = 0; j < HOST_DOT_WROWS; j++) fill_extreme(t, w[j], N, j);
        for (int r = 0; r < HOST_DOT_ROWS; r++) fill_extreme_activation(at, a[r], N, r);
        host_vec_dot_fn one = host__vec_dot_for(SP_CPU_ISA_AVX2, t);
        float out[HOST_DOT_WROWS];
        host__vec_dot_wrows_for(SP_CPU_ISA_AVX512, t)(w, sizeof w[0], a[0], N, out);
        for (int j = 0; j < HOST_DOT_WROWS; j++) {
            float alone = one(w[j], a[0], N);
            cr_expect(memcmp(&alone, &out[j], sizeof alone) == 0, "%s decode row %d: %.9g vs %.9g", quant_type_name(t),
                      j, (double)out[j], (double)alone);
        }
        char pack_mem[4096];
        cr_assert(host__pairs_bytes(t, N, HOST_DOT_ROWS) <= sizeof pack_mem);
        const host_pairs_act act = host__pairs_act_init(pack_mem, t, N, HOST_DOT_ROWS);
        for (int r = 0; r < HOST_DOT_ROWS; r++) host__pairs_act_row(&act, a[r], r);
        float batch[HOST_DOT_ROWS][HOST_PAIRS_WROWS];
        host__vec_dot_pairs_for(SP_CPU_ISA_AVX512, t)(w[1], sizeof w[0], HOST_PAIRS_WROWS, &act, 0, HOST_DOT_ROWS,
                                                      &batch[0][0], HOST_PAIRS_WROWS);
        for (int r = 0; r < HOST_DOT_ROWS; r++)
            for (int j = 0; j < HOST_PAIRS_WROWS; j++) {
                float alone = one(w[1 + j], a[r], N);
                cr_expect(memcmp(&alone, &batch[r][j], sizeof alone) == 0, "%s prefill row %d weight %d: %.9g vs %.9g",
                          quant_type_name(t), r, j, (double)batch[r][j], (double)alone);
            }
    }
}

/* The whole CPU matmul in each set, with a bias and weight row counts that leave tails
 * (N not a multiple of the eight-row kernel or of the 16-row tile) and token counts that
 * leave rows outside the four-row kernel and the pair kernels' groups: every element
 * equals the avx2 one-row kernel plus the bias, bit for bit. Rows of width K whose
 * T * K reaches 4096 are quantized (and packed) by both threads of the pool. */
static void check_matmul(sp_cpu_isa isa, quant_type t, int64_t n_out, int64_t rows, int64_t K) {
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = 2, .cpu_isa = isa};
    dev_backend *dev;
    cr_assert_eq(dev_create(&opts, &dev), SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_reserve(dev, rows, n_out > K ? n_out : K), SP_OK, "%s", sp_last_error());
    const size_t w_bytes = quant_row_bytes(t, K);
    char *w_data = malloc(w_bytes * (size_t)n_out);
    float *bias_data = malloc(sizeof(float) * (size_t)n_out), *x = malloc(sizeof(float) * (size_t)(rows * K));
    float *y = malloc(sizeof(float) * (size_t)(rows * n_out)), *row = malloc(sizeof(float) * (size_t)K);
    char *act = malloc(quant_row_bytes(QUANT_Q8_1, K));
    cr_assert(w_data && bias_data && x && y && row && act);
    for (int64_t j = 0; j < n_out; j++) {
        fill(row, K);
        quant_quantize_row(t, w_data + (size_t)j * w_bytes, row, K);
        bias_data[j] = rng_uniform();
    }
    fill(x, rows * K);
    dev_tensor w, bias;
    cr_assert_eq(dev_weight_init(dev, &w, t, K, n_out, w_data, w_bytes * (size_t)n_out), SP_OK);
    cr_assert_eq(dev_weight_init(dev, &bias, QUANT_F32, n_out, 1, bias_data, sizeof(float) * (size_t)n_out), SP_OK);
    dev_matmul_part part = {.out = y, .w = &w, .bias = &bias};
    dev_matmul_group(dev, &part, 1, x, rows);
    const quant_type at = quant_vec_dot_type(t);
    for (int64_t r = 0; r < rows; r++) {
        host__quantize_for(SP_CPU_ISA_AVX2, at)(act, x + r * K, K);
        for (int64_t j = 0; j < n_out; j++) {
            float want = host__vec_dot_for(SP_CPU_ISA_AVX2, t)(w_data + (size_t)j * w_bytes, act, K) + bias_data[j];
            float got = y[r * n_out + j];
            cr_expect(memcmp(&want, &got, sizeof got) == 0, "%s %s N=%lld T=%lld: [%lld][%lld] %.9g, want %.9g",
                      sp_cpu_isa_name(isa), quant_type_name(t), (long long)n_out, (long long)rows, (long long)r,
                      (long long)j, (double)got, (double)want);
        }
    }
    dev_destroy(dev);
    free(w_data);
    free(bias_data);
    free(x);
    free(y);
    free(row);
    free(act);
}

static void check_matmul_set(sp_cpu_isa isa) {
    const int64_t n_outs[] = {1, 7, 8, 9, 23, 40};
    const int64_t token_counts[] = {1, 2, 3, 4, 5, 6, 7, 9, 11, 12, 17}; /* every group size after full groups */
    for (size_t ti = 0; ti < sizeof row_types / sizeof row_types[0]; ti++)
        for (size_t ni = 0; ni < sizeof n_outs / sizeof n_outs[0]; ni++)
            for (size_t ri = 0; ri < sizeof token_counts / sizeof token_counts[0]; ri++)
                check_matmul(isa, row_types[ti], n_outs[ni], token_counts[ri], 96);
    for (size_t ti = 0; ti < sizeof row_types / sizeof row_types[0]; ti++) /* packed by both threads */
        for (size_t ri = 0; ri < 4; ri++)
            check_matmul(isa, row_types[ti], 40, (const int64_t[]){8, 10, 11, 17}[ri], 576);
}

Test(quant_dot_rows, avx2_matmul_with_bias_and_tails_matches_the_one_row_kernel) {
    require_set(SP_CPU_ISA_AVX2);
    check_matmul_set(SP_CPU_ISA_AVX2);
}

Test(quant_dot_rows, avx512_matmul_with_bias_and_tails_matches_avx2) {
    require_set(SP_CPU_ISA_AVX512);
    check_matmul_set(SP_CPU_ISA_AVX512);
}

Test(quant_dot_rows, types_without_one_use_the_one_row_kernel) {
    cr_expect_null(host__vec_dot_rows_for(SP_CPU_ISA_AVX2, QUANT_Q6_K));
    cr_expect_null(host__vec_dot_rows_for(SP_CPU_ISA_AVX2, QUANT_F32));
    cr_expect_null(host__vec_dot_rows_for(SP_CPU_ISA_AVX2, (quant_type)QUANT_TYPE_LIMIT));
    cr_expect_null(host__vec_dot_rows_for(SP_CPU_ISA_GENERIC, QUANT_Q4_1));
    cr_expect_null(host__vec_dot_rows_for(SP_CPU_ISA_AVX512, QUANT_Q4_1)); /* it batches through pairs */
    cr_expect_null(host__vec_dot_pairs_for(SP_CPU_ISA_AVX2, QUANT_Q4_1));
    cr_expect_null(host__vec_dot_pairs_for(SP_CPU_ISA_AVX512, QUANT_Q6_K));
    cr_expect_null(host__vec_dot_pairs_for(SP_CPU_ISA_AMX, QUANT_Q4_1)); /* its tiles take these types */
    cr_expect_null(host__vec_dot_wrows_for(SP_CPU_ISA_AVX512, QUANT_Q6_K));
    cr_expect_null(host__vec_dot_wrows_for(SP_CPU_ISA_GENERIC, QUANT_Q4_1));
}

/* test_amx.c: the amx kernel set (gpu/host/host_amx.c). Every output of its matmul, on
 * the tile path (4+ rows) and the VNNI path (1-3 rows), equals host__amx_dot of that
 * weight row and activation row bit for bit, whatever the number of rows, the thread
 * count, a ragged last group of weight rows or a bias: so a token's numbers never depend
 * on its batch. host__amx_dot itself is the quantized rows' dot product, nearer its exact
 * value than the avx2 kernels' (llama.cpp's arithmetic). Tests skip (saying why) where the CPU or OS has no AMX. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/host/host_internal.h"

static uint64_t rng = 0xa3c59ac2;
static float rng_uniform(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* n floats whose magnitude and offset change per block, as activations and weights do. */
static void fill(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) {
        float scale = 0.01f + 4.0f * (rng_uniform() + 1.0f), offset = rng_uniform() > 0.5f ? rng_uniform() : 0.0f;
        for (int64_t j = i; j < i + 32 && j < n; j++) x[j] = offset + scale * rng_uniform();
    }
}

static void require_amx(void) {
    if (dev_cpu_isa_check(SP_CPU_ISA_AMX) != SP_OK) cr_skip_test("%s", sp_last_error());
}

typedef struct shape {
    int64_t rows, n, k; /* T, N, K */
} shape;

/* One (N, K) weight of type t against T rows through dev_matmul on an amx backend; every
 * output compared with host__amx_dot (+ the bias) of the same quantized rows. When
 * weights_raw is set, the weight's bytes are random (Q8_0's -128 included), not the
 * output of a quantizer. */
static void check_matmul(quant_type t, shape s, int threads, bool with_bias, bool weights_raw) {
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = threads, .cpu_isa = SP_CPU_ISA_AMX};
    dev_backend *dev = NULL;
    cr_assert_eq(dev_create(&opts, &dev), SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_cpu_kernels(dev), SP_CPU_ISA_AMX);
    const quant_type at = quant_vec_dot_type(t);
    const size_t w_row = quant_row_bytes(t, s.k), a_row = quant_row_bytes(at, s.k);
    uint8_t *w_data = malloc(w_row * (size_t)s.n);
    float *row = malloc(sizeof(float) * (size_t)s.k), *in = malloc(sizeof(float) * (size_t)(s.rows * s.k));
    float *bias_data = malloc(sizeof(float) * (size_t)s.n), *out = malloc(sizeof(float) * (size_t)(s.rows * s.n));
    uint8_t *act = malloc(a_row * (size_t)s.rows);
    cr_assert(w_data && row && in && bias_data && out && act);
    for (int64_t j = 0; j < s.n; j++) {
        fill(row, s.k);
        quant_quantize_row(t, w_data + (size_t)j * w_row, row, s.k);
        if (weights_raw) /* random quant bytes, keeping the quantizer's (finite) scales */
            for (size_t i = 0; i < w_row; i++)
                if (i % (w_row / (size_t)(s.k / 32)) >= (t == QUANT_Q4_1 ? 4u : 2u))
                    w_data[(size_t)j * w_row + i] = (uint8_t)(rng_uniform() * 128.0f + 128.0f);
        bias_data[j] = rng_uniform();
    }
    fill(in, s.rows * s.k);
    host_quantize_fn quantize = host__quantize_for(SP_CPU_ISA_AMX, at);
    for (int64_t r = 0; r < s.rows; r++) quantize(act + (size_t)r * a_row, in + r * s.k, s.k);

    dev_tensor w, bias;
    cr_assert_eq(dev_weight_init(dev, &w, t, s.k, s.n, w_data, w_row * (size_t)s.n), SP_OK);
    cr_assert_not_null(w.packed, "the amx set repacks %s weights", quant_type_name(t));
    cr_assert_eq(dev_weight_init(dev, &bias, QUANT_F32, s.n, 1, bias_data, sizeof(float) * (size_t)s.n), SP_OK);
    cr_assert_eq(dev_reserve(dev, s.rows, s.k > s.n ? s.k : s.n), SP_OK);
    dev_matmul(dev, out, in, &w, with_bias ? &bias : NULL, s.rows);

    for (int64_t r = 0; r < s.rows; r++) {
        for (int64_t j = 0; j < s.n; j++) {
            float want = host__amx_dot(t, w_data + (size_t)j * w_row, act + (size_t)r * a_row, s.k);
            if (with_bias) want += bias_data[j];
            float got = out[r * s.n + j];
            cr_assert(memcmp(&got, &want, sizeof got) == 0,
                      "%s %s, T=%lld N=%lld K=%lld, %d threads: row %lld, output %lld is %a, host__amx_dot %a",
                      quant_type_name(t), weights_raw ? "(raw bytes)" : "", (long long)s.rows, (long long)s.n,
                      (long long)s.k, threads, (long long)r, (long long)j, got, want);
        }
    }
    dev_destroy(dev);
    free(w_data);
    free(row);
    free(in);
    free(bias_data);
    free(out);
    free(act);
}

static const quant_type amx_types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q8_0};

/* T of 1-3 takes the VNNI path, 4+ the tiles; 17 and 37 end on a partial tile. */
Test(amx, matmul_equals_the_scalar_arithmetic_for_every_row_count) {
    require_amx();
    static const int64_t row_counts[] = {1, 2, 3, 4, 15, 16, 17, 37};
    for (size_t ti = 0; ti < sizeof amx_types / sizeof amx_types[0]; ti++)
        for (size_t ri = 0; ri < sizeof row_counts / sizeof row_counts[0]; ri++)
            check_matmul(amx_types[ti], (shape){row_counts[ri], 48, 576}, 2, false, false);
}

Test(amx, matmul_handles_ragged_groups_widths_bias_and_threads) {
    require_amx();
    static const shape shapes[] = {{5, 40, 32}, {1, 40, 1536}, {20, 7, 96}, {33, 200, 64}, {2, 16, 4096}};
    for (size_t ti = 0; ti < sizeof amx_types / sizeof amx_types[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int threads = 1; threads <= 3; threads += 2)
                check_matmul(amx_types[ti], shapes[si], threads, si % 2 == 0, false);
}

/* Bytes no quantizer writes (Q8_0's -128, every nibble) still give the same bits on
 * both paths: the unsigned bias trick is exact for every byte. */
Test(amx, matmul_is_exact_for_every_weight_byte) {
    require_amx();
    for (size_t ti = 0; ti < sizeof amx_types / sizeof amx_types[0]; ti++) {
        check_matmul(amx_types[ti], (shape){2, 32, 256}, 1, false, true);
        check_matmul(amx_types[ti], (shape){21, 32, 256}, 2, true, true);
    }
}

/* The quantized rows' dot product in double: the value both arithmetics approximate; and
 * in *magnitude the sum of its terms' magnitudes (what float rounding scales with). */
static double exact_dot(quant_type t, const uint8_t *w, const uint8_t *a, int64_t k, double *magnitude) {
    const size_t wb = quant_row_bytes(t, k) / (size_t)(k / 32),
                 ab = quant_row_bytes(quant_vec_dot_type(t), k) / (size_t)(k / 32);
    const size_t qs = t == QUANT_Q4_1 ? 4 : 2;
    double sum = 0.0;
    *magnitude = 0.0;
    for (int64_t b = 0; b < k / 32; b++, w += wb, a += ab) {
        long isum = 0;
        for (int i = 0; i < 32; i++) {
            int q = t == QUANT_Q8_0 ? (int8_t)w[qs + i] : i < 16 ? (w[qs + i] & 0x0F) : (w[qs + i - 16] >> 4);
            if (t == QUANT_Q4_0) q -= 8;
            isum += q * (int8_t)a[qs + i];
        }
        uint16_t dw, dx, mw, sx;
        memcpy(&dw, w, 2);
        memcpy(&dx, a, 2);
        const double scaled = (double)quant_f16_to_f32(dw) * quant_f16_to_f32(dx) * (double)isum;
        sum += scaled;
        *magnitude += fabs(scaled);
        if (t == QUANT_Q4_1) {
            memcpy(&mw, w + 2, 2);
            memcpy(&sx, a + 2, 2);
            const double min_term = (double)quant_f16_to_f32(mw) * quant_f16_to_f32(sx);
            sum += min_term;
            *magnitude += fabs(min_term);
        }
    }
    return sum;
}

/* host__amx_dot is the quantized rows' dot product, and a more precise one than the avx2
 * kernel's (llama.cpp's arithmetic): over activations with a few large outliers, as real
 * ones have, its total distance from the exact value is smaller. host__amx_dot is
 * portable C; the avx2 kernel needs AVX2. */
Test(amx, scalar_arithmetic_is_the_dot_product_and_nearer_exact_than_avx2) {
    if (dev_cpu_isa_check(SP_CPU_ISA_AVX2) != SP_OK) cr_skip_test("%s", sp_last_error());
    const int64_t k = 1536;
    float *x = malloc(sizeof(float) * (size_t)k);
    for (size_t ti = 0; ti < sizeof amx_types / sizeof amx_types[0]; ti++) {
        quant_type t = amx_types[ti], at = quant_vec_dot_type(t);
        void *w = malloc(quant_row_bytes(t, k)), *a = malloc(quant_row_bytes(at, k));
        double err_amx = 0.0, err_avx2 = 0.0;
        for (int trial = 0; trial < 200; trial++) {
            fill(x, k);
            quant_quantize_row(t, w, x, k);
            fill(x, k);
            for (int64_t i = 0; i < k; i += 97) x[i] *= 60.0f; /* outliers */
            host__quantize_for(SP_CPU_ISA_AVX2, at)(a, x, k);
            double magnitude;
            const double exact = exact_dot(t, w, a, k, &magnitude);
            const float ours = host__amx_dot(t, w, a, k), avx2 = host__vec_dot_for(SP_CPU_ISA_AVX2, t)(w, a, k);
            /* 2 k / 32 roundings of at most half an ulp of the running sum */
            cr_assert(fabs(ours - exact) <= 1e-5 * magnitude, "%s: %g, exact %g (terms' magnitude %g)",
                      quant_type_name(t), ours, exact, magnitude);
            err_amx += fabs(ours - exact);
            err_avx2 += fabs(avx2 - exact);
        }
        cr_log_info("%s: mean |error| amx %.3g, avx2 %.3g", quant_type_name(t), err_amx / 200, err_avx2 / 200);
        cr_assert_leq(err_amx, err_avx2, "%s: amx's total error %g above avx2's %g", quant_type_name(t), err_amx,
                      err_avx2);
        free(w);
        free(a);
    }
    free(x);
}

/* Types the set does not repack run the avx512 kernels, so their numbers are avx2's. */
Test(amx, other_types_keep_the_avx512_kernels) {
    cr_assert_null(host__vec_dot_rows_for(SP_CPU_ISA_AMX, QUANT_Q4_1), "Q4_1 has the amx arithmetic");
    cr_assert_eq((void *)host__vec_dot_rows_for(SP_CPU_ISA_AMX, QUANT_Q5_0),
                 (void *)host__vec_dot_rows_for(SP_CPU_ISA_AVX512, QUANT_Q5_0));
    cr_assert_eq((void *)host__vec_dot_for(SP_CPU_ISA_AMX, QUANT_Q6_K),
                 (void *)host__vec_dot_for(SP_CPU_ISA_AVX2, QUANT_Q6_K));
    cr_assert(!host__amx_takes(QUANT_Q4_K) && host__amx_takes(QUANT_Q8_0));
}

/* Several weights sharing one input (Q/K/V, gate/up) go through one dispatch of groups:
 * each part's outputs equal host__amx_dot too. */
Test(amx, grouped_parts_equal_the_scalar_arithmetic) {
    require_amx();
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = 2, .cpu_isa = SP_CPU_ISA_AMX};
    dev_backend *dev = NULL;
    cr_assert_eq(dev_create(&opts, &dev), SP_OK, "%s", sp_last_error());
    enum { PARTS = 3, K = 576 };
    const int64_t ns[PARTS] = {576, 192, 200}, rows_list[] = {1, 8, 19};
    const quant_type t = QUANT_Q4_1, at = QUANT_Q8_1;
    const size_t w_row = quant_row_bytes(t, K), a_row = quant_row_bytes(at, K);
    uint8_t *w_data[PARTS];
    dev_tensor w[PARTS];
    float row[K];
    for (int p = 0; p < PARTS; p++) {
        w_data[p] = malloc(w_row * (size_t)ns[p]);
        for (int64_t j = 0; j < ns[p]; j++) {
            fill(row, K);
            quant_quantize_row(t, w_data[p] + (size_t)j * w_row, row, K);
        }
        cr_assert_eq(dev_weight_init(dev, &w[p], t, K, ns[p], w_data[p], w_row * (size_t)ns[p]), SP_OK);
    }
    cr_assert_eq(dev_reserve(dev, 19, K), SP_OK);
    for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
        const int64_t rows = rows_list[ri];
        float *in = malloc(sizeof(float) * (size_t)(rows * K));
        uint8_t *act = malloc(a_row * (size_t)rows);
        fill(in, rows * K);
        for (int64_t r = 0; r < rows; r++)
            host__quantize_for(SP_CPU_ISA_AMX, at)(act + (size_t)r * a_row, in + r * K, K);
        dev_matmul_part parts[PARTS];
        for (int p = 0; p < PARTS; p++)
            parts[p] = (dev_matmul_part){.out = malloc(sizeof(float) * (size_t)(rows * ns[p])), .w = &w[p]};
        dev_matmul_group(dev, parts, PARTS, in, rows);
        for (int p = 0; p < PARTS; p++) {
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < ns[p]; j++) {
                    float want = host__amx_dot(t, w_data[p] + (size_t)j * w_row, act + (size_t)r * a_row, K);
                    float got = parts[p].out[r * ns[p] + j];
                    cr_assert(memcmp(&got, &want, sizeof got) == 0, "T=%lld part %d row %lld output %lld: %a vs %a",
                              (long long)rows, p, (long long)r, (long long)j, got, want);
                }
            free(parts[p].out);
        }
        free(in);
        free(act);
    }
    dev_destroy(dev);
    for (int p = 0; p < PARTS; p++) free(w_data[p]);
}

/* test_quant_dot_rows.c: the multi-row kernels (gpu/host/host_quant_dot_rows.c) give
 * every activation row the exact bits of the one-row kernel, whatever the other rows
 * in the call are: that is what keeps a token's result independent of its batch. */
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

/* One weight row of type t and HOST_DOT_ROWS activation rows: the multi-row results,
 * written with out_stride, equal the one-row kernel's bit for bit. */
static void check_type(quant_type t, int64_t n, size_t out_stride) {
    host_vec_dot_rows_fn rows = host__vec_dot_rows_for(t);
    host_vec_dot_fn one = host__vec_dot_for(t);
    cr_assert_not_null(rows, "%s: no multi-row kernel", quant_type_name(t));
    cr_assert_not_null(one);
    quant_type at = quant_vec_dot_type(t);
    host_quantize_fn quantize = host__quantize_for(at);
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
    if (!host__cpu_has_avx2()) {
        cr_assert_null(host__vec_dot_rows_for(QUANT_Q4_1), "a multi-row kernel without AVX2");
        cr_log_info("no AVX2 on this CPU: the multi-row kernels are not used (checked that none is offered)");
        return;
    }
    for (size_t i = 0; i < sizeof row_types / sizeof row_types[0]; i++)
        for (size_t j = 0; j < sizeof row_sizes / sizeof row_sizes[0]; j++)
            for (int seed = 0; seed < 20; seed++) check_type(row_types[i], row_sizes[j], seed % 2 ? 1 : 1536);
}

Test(quant_dot_rows, types_without_one_use_the_one_row_kernel) {
    cr_expect_null(host__vec_dot_rows_for(QUANT_Q6_K));
    cr_expect_null(host__vec_dot_rows_for(QUANT_F32));
    cr_expect_null(host__vec_dot_rows_for((quant_type)QUANT_TYPE_LIMIT));
}

/* test_host_ops.c: the CPU backend's fused residual add and RMSNorm (dev_add_rmsnorm)
 * gives the bits of dev_add then dev_rmsnorm, at widths that do and do not fill its
 * vector lanes, with 1 and 2 threads: the forward pass uses the fused op, and the
 * reference parity and batch-independence tests rest on it being the same arithmetic. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"

static uint64_t rng = 0x51ed270b;
static float rng_uniform(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (float)((rng * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

static void check(int threads, int64_t rows, int64_t dim) {
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = threads};
    dev_backend *dev = NULL;
    cr_assert_eq(dev_create(&opts, &dev), SP_OK);
    size_t n = (size_t)(rows * dim);
    float *w_data = malloc(sizeof(float) * (size_t)dim);
    float *x_fused = malloc(sizeof(float) * n), *x_plain = malloc(sizeof(float) * n),
          *delta = malloc(sizeof(float) * n);
    float *out_fused = malloc(sizeof(float) * n), *out_plain = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < dim; i++) w_data[i] = 1.0f + 0.5f * rng_uniform();
    for (size_t i = 0; i < n; i++) {
        x_fused[i] = x_plain[i] = 3.0f * rng_uniform();
        delta[i] = rng_uniform();
    }
    dev_tensor w;
    cr_assert_eq(dev_weight_init(dev, &w, QUANT_F32, dim, 1, w_data, sizeof(float) * (size_t)dim), SP_OK);

    dev_add_rmsnorm(dev, out_fused, x_fused, delta, &w, 1e-5f, rows, dim);
    dev_add(dev, x_plain, x_plain, delta, (int64_t)n);
    dev_rmsnorm(dev, out_plain, x_plain, &w, 1e-5f, rows, dim);

    cr_assert(memcmp(x_fused, x_plain, sizeof(float) * n) == 0, "%d threads, %lld x %lld: the sums differ", threads,
              (long long)rows, (long long)dim);
    cr_assert(memcmp(out_fused, out_plain, sizeof(float) * n) == 0, "%d threads, %lld x %lld: the norms differ",
              threads, (long long)rows, (long long)dim);
    int nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += out_fused[i] != 0.0f;
    cr_assert_gt(nonzero, (int)(n / 2), "the norm wrote its output");
    dev_destroy(dev); /* w_data is borrowed until here */
    free(w_data);
    free(x_fused);
    free(x_plain);
    free(delta);
    free(out_fused);
    free(out_plain);
}

Test(host_ops, add_rmsnorm_is_add_then_rmsnorm_bit_for_bit) {
    static const int64_t shapes[][2] = {{1, 64}, {3, 576}, {7, 33}, {64, 2048}, {5, 4095}};
    for (int threads = 1; threads <= 2; threads++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) check(threads, shapes[s][0], shapes[s][1]);
}

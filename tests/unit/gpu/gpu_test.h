/* gpu_test.h: what the CUDA backend's tests share: the skip where no GPU is usable (skip_without_gpu), a
 * seeded generator, F16-exact random inputs and the relative error they are judged by.
 * Header-only (static inline functions, so a test need not use them all): each test binary is one translation unit. */
#ifndef SP_TESTS_GPU_TEST_H
#define SP_TESTS_GPU_TEST_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu/device.h"
#include "quant/quant.h"

/* Ends the calling test as skipped (Criterion counts it apart from passes) when the
 * CUDA backend cannot run here, saying why in one line; returns when it can. */
static inline void skip_without_gpu(void) {
    char why[256];
    if (dev_cuda_available(why, sizeof why)) return;
    cr_skip_test("no usable CUDA GPU (%s)", why);
}

static uint64_t gpu_test_rng = 0x5eed;
static inline uint64_t gpu_test_next(void) { /* a 64-bit LCG: the same inputs on every run */
    gpu_test_rng = gpu_test_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return gpu_test_rng;
}

static inline float uniform(void) { /* [-1, 1) */
    return (float)(gpu_test_next() >> 40) / (float)(1u << 23) - 1.0f;
}

/* n values in [-scale, scale), rounded to F16 (what both backends then hold exactly). */
static inline float *random_f16(int64_t n, float scale) {
    float *x = malloc(sizeof *x * (size_t)n);
    cr_assert_not_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = quant_f16_to_f32(quant_f32_to_f16(scale * uniform()));
    return x;
}

/* ||got - ref|| / ||ref||; every element of got must be finite. */
static inline double rel_error(const float *got, const float *ref, int64_t n) {
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; i++) {
        cr_assert(isfinite(got[i]), "element %lld is %f", (long long)i, (double)got[i]);
        diff += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        norm += (double)ref[i] * ref[i];
    }
    return sqrt(diff / (norm > 0 ? norm : 1));
}

#endif

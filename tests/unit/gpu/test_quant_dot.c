/* test_quant_dot.c: the CPU backend's row kernels (gpu/host/host_quant_dot.c) against
 * the plain-C references of quant/quant.c, on random rows of the sizes models use.
 *
 * The .c is included so both kernel tables (AVX2 and the portable fallback) are tested
 * whatever this CPU would pick. Dot products must match the reference up to float
 * summation order; activation quantizers must produce the reference's bytes exactly.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/host/host_quant_dot.c"
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

static bool cpu_has_avx2(void) {
    return host__cpu_features().avx2;
}

static const int64_t row_sizes[] = {32, 256, 576, 1536, 4096};
enum { ROW_SIZES = sizeof row_sizes / sizeof row_sizes[0], MAX_ROW = 4096 };

static const quant_type weight_types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1, QUANT_Q8_0, QUANT_Q4_K,
                                          QUANT_Q5_K, QUANT_Q6_K, QUANT_F16,  QUANT_F32,  QUANT_BF16};
enum { WEIGHT_TYPES = sizeof weight_types / sizeof weight_types[0] };

/* xorshift64*: deterministic across runs. */
static uint64_t rng_state;

static void rng_seed(uint64_t seed) {
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
}

static float rng_uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    const uint64_t r = rng_state * 0x2545F4914F6CDD1DULL;
    return (float)(r >> 40) / (float)(1u << 24) * 2.0f - 1.0f; /* [-1, 1) */
}

/* Values like model rows: uniform noise, a magnitude that changes every 32 elements,
 * an offset in some blocks (so min-based formats have work), and a rare outlier. */
static void fill_row(float *x, int64_t n) {
    float magnitude = 1.0f, offset = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0) {
            magnitude = 0.05f + 2.0f * fabsf(rng_uniform());
            offset = rng_uniform() > 0.5f ? 0.5f * magnitude * rng_uniform() : 0.0f;
        }
        x[i] = magnitude * rng_uniform() + offset;
        if (rng_uniform() > 0.995f) x[i] *= 8.0f;
    }
}

/* The scale of the float error a reordered sum may have: sum of |w_i * a_i| over the
 * dequantized rows, plus the min terms of the formats that have one. */
static double dot_magnitude(quant_type wt, const void *w, const void *a, int64_t n) {
    static float wf[MAX_ROW], af[MAX_ROW];
    quant_dequantize_row(wt, wf, w, n);
    quant_dequantize_row(quant_vec_dot_type(wt), af, a, n);
    double sum = 0.0, wsum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        sum += fabs((double)wf[i] * af[i]);
        wsum += fabs((double)wf[i]) * fabs((double)af[i]) + fabs((double)af[i]);
    }
    return sum + 1e-3 * wsum;
}

typedef struct dot_case {
    quant_type type;
    int64_t n;
    void *w;
    void *a;
    float ref;
    double magnitude;
} dot_case;

static bool dot_case_make(dot_case *c, quant_type wt, int64_t n, uint64_t seed) {
    if (n % (int64_t)quant_block_size(wt) != 0) return false;
    static float x[MAX_ROW];
    const quant_type at = quant_vec_dot_type(wt);
    c->type = wt;
    c->n = n;
    c->w = malloc(quant_row_bytes(wt, n));
    c->a = malloc(quant_row_bytes(at, n));
    cr_assert(c->w && c->a);
    rng_seed(seed);
    fill_row(x, n);
    quant_quantize_row(wt, c->w, x, n);
    fill_row(x, n);
    quant_quantize_row(at, c->a, x, n);
    c->ref = quant_vec_dot_ref(wt, c->w, c->a, n);
    c->magnitude = dot_magnitude(wt, c->w, c->a, n);
    return true;
}

static void dot_case_free(dot_case *c) {
    free(c->w);
    free(c->a);
}

static void expect_close(const dot_case *c, float got, const char *path) {
    const double tolerance = 2e-6 * c->magnitude + 1e-6;
    cr_expect(fabs((double)got - c->ref) <= tolerance, "%s %s n=%lld: got %.9g, reference %.9g (tolerance %.3g)", path,
              quant_type_name(c->type), (long long)c->n, got, c->ref, tolerance);
}

static void check_table(const host_vec_dot_fn *table, const char *path) {
    for (int t = 0; t < WEIGHT_TYPES; t++) {
        for (int s = 0; s < ROW_SIZES; s++) {
            dot_case c;
            if (!dot_case_make(&c, weight_types[t], row_sizes[s], 1000u * t + s)) continue;
            const host_vec_dot_fn fn = table[weight_types[t]];
            cr_assert(fn != NULL, "%s has no kernel for %s", path, quant_type_name(weight_types[t]));
            expect_close(&c, fn(c.w, c.a, c.n), path);
            dot_case_free(&c);
        }
    }
}

Test(quant_dot, generic_kernels_match_reference) {
    check_table(dot_generic, "generic");
}

Test(quant_dot, avx2_kernels_match_reference) {
    if (!cpu_has_avx2()) cr_skip_test("this CPU has no AVX2/FMA/F16C");
    check_table(dot_avx2, "avx2");
}

Test(quant_dot, avx2_kernels_match_reference_on_many_seeds) {
    if (!cpu_has_avx2()) cr_skip_test("this CPU has no AVX2/FMA/F16C");
    for (uint64_t seed = 0; seed < 50; seed++) {
        for (int t = 0; t < WEIGHT_TYPES; t++) {
            dot_case c;
            if (!dot_case_make(&c, weight_types[t], 1536, 77777u + seed)) continue;
            expect_close(&c, dot_avx2[weight_types[t]](c.w, c.a, c.n), "avx2");
            dot_case_free(&c);
        }
    }
}

Test(quant_dot, float_kernels_handle_lengths_that_are_not_multiples_of_eight) {
    const quant_type float_types[] = {QUANT_F32, QUANT_F16, QUANT_BF16};
    for (int t = 0; t < 3; t++) {
        for (int64_t n = 1; n < 80; n += 3) {
            dot_case c;
            cr_assert(dot_case_make(&c, float_types[t], n, 4242u + (uint64_t)n));
            expect_close(&c, dot_generic[float_types[t]](c.w, c.a, n), "generic");
            if (cpu_has_avx2()) expect_close(&c, dot_avx2[float_types[t]](c.w, c.a, n), "avx2");
            dot_case_free(&c);
        }
    }
}

Test(quant_dot, kernels_of_a_zero_row_return_zero) {
    for (int t = 0; t < WEIGHT_TYPES; t++) {
        const quant_type wt = weight_types[t];
        const int64_t n = 1536;
        static float zeros[1536];
        uint8_t *w = malloc(quant_row_bytes(wt, n));
        uint8_t *a = malloc(quant_row_bytes(quant_vec_dot_type(wt), n));
        quant_quantize_row(wt, w, zeros, n);
        quant_quantize_row(quant_vec_dot_type(wt), a, zeros, n);
        cr_expect_eq(dot_generic[wt](w, a, n), 0.0f, "generic %s", quant_type_name(wt));
        if (cpu_has_avx2()) cr_expect_eq(dot_avx2[wt](w, a, n), 0.0f, "avx2 %s", quant_type_name(wt));
        free(w);
        free(a);
    }
}

/* ---- activation quantizers: identical bytes ------------------------------------------ */

static const quant_type activation_types[] = {QUANT_Q8_0, QUANT_Q8_1, QUANT_Q8_K, QUANT_F16, QUANT_BF16, QUANT_F32};
enum { ACTIVATION_TYPES = sizeof activation_types / sizeof activation_types[0] };

static void expect_same_bytes(quant_type at, host_quantize_fn fn, const float *x, int64_t n, const char *path) {
    const size_t bytes = quant_row_bytes(at, n);
    uint8_t *want = calloc(1, bytes);
    uint8_t *got = calloc(1, bytes);
    quant_quantize_row(at, want, x, n);
    fn(got, x, n);
    size_t first = bytes;
    for (size_t i = 0; i < bytes; i++) {
        if (want[i] != got[i]) {
            first = i;
            break;
        }
    }
    cr_expect(first == bytes, "%s quantize %s n=%lld: byte %zu differs (%u, reference %u)", path, quant_type_name(at),
              (long long)n, first, first < bytes ? got[first] : 0, first < bytes ? want[first] : 0);
    free(want);
    free(got);
}

static void check_quantizers(const host_quantize_fn *table, const char *path) {
    static float x[MAX_ROW];
    for (int t = 0; t < ACTIVATION_TYPES; t++) {
        for (int s = 0; s < ROW_SIZES; s++) {
            const quant_type at = activation_types[t];
            const int64_t n = row_sizes[s];
            if (n % (int64_t)quant_block_size(at) != 0) continue;
            cr_assert(table[at] != NULL, "%s has no quantizer for %s", path, quant_type_name(at));
            rng_seed(31u * t + s);
            fill_row(x, n);
            expect_same_bytes(at, table[at], x, n, path);
        }
    }
}

Test(quant_dot, generic_quantizers_match_reference_bytes) {
    check_quantizers(quantize_generic, "generic");
}

Test(quant_dot, avx2_quantizers_match_reference_bytes) {
    if (!cpu_has_avx2()) cr_skip_test("this CPU has no AVX2/FMA/F16C");
    check_quantizers(quantize_avx2, "avx2");
}

Test(quant_dot, avx2_q8_rounds_halfway_cases_to_even_like_reference) {
    if (!cpu_has_avx2()) cr_skip_test("this CPU has no AVX2/FMA/F16C");
    /* amax 127 makes d = 1 exactly, so every x.5 is a tie. */
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)((i % 64) - 32) + 0.5f;
    for (int b = 0; b < 256; b += 32) x[b] = 127.0f;
    x[2] = 0x1.fffffep-2f; /* the float just below 0.5 rounds to 0 */
    x[3] = -0x1.fffffep-2f;
    x[4] = 0x1.000002p-1f; /* just above 0.5 rounds to 1 */
    expect_same_bytes(QUANT_Q8_0, quantize_avx2[QUANT_Q8_0], x, 256, "avx2");
    expect_same_bytes(QUANT_Q8_1, quantize_avx2[QUANT_Q8_1], x, 256, "avx2");
    /* Q8_K rounds ties to even; with max = -127, iscale = -127 / max = 1. */
    x[0] = -127.0f;
    expect_same_bytes(QUANT_Q8_K, quantize_avx2[QUANT_Q8_K], x, 256, "avx2");
    quant_block_q8_0 q;
    quantize_avx2[QUANT_Q8_0](&q, x + 32, 32);
    cr_expect_eq(q.qs[1], (int8_t)nearbyintf(x[33]), "x=%g -> %d", x[33], q.qs[1]);
    quantize_avx2[QUANT_Q8_0](&q, x, 32);
    cr_expect(q.qs[2] == 0 && q.qs[3] == 0 && q.qs[4] == 1, "%d %d %d", q.qs[2], q.qs[3], q.qs[4]);
}

Test(quant_dot, avx2_half_quantizers_match_reference_on_special_values) {
    if (!cpu_has_avx2()) cr_skip_test("this CPU has no AVX2/FMA/F16C");
    const float special[32] = {
        0.0f,     -0.0f,          INFINITY,       -INFINITY,  NAN,         -NAN,     65504.0f, 65519.0f,
        65520.0f, 1e30f,          -1e30f,         6.0e-8f,    3.0e-8f,     2.98e-8f, 5.96e-8f, 1e-40f,
        -1e-40f,  1.00048828125f, 1.00146484375f, 3.0f,       -3.0f,       0x1p-14f, 0x1p-15f, 0x1.8p-25f,
        0x1p-25f, 0x1p-24f,       1.0039062f,     1.0117188f, 1.01171875f, 0.1f,     -0.1f,    1.0f};
    expect_same_bytes(QUANT_F16, quantize_avx2[QUANT_F16], special, 32, "avx2");
    expect_same_bytes(QUANT_BF16, quantize_avx2[QUANT_BF16], special, 32, "avx2");
}

/* ---- dispatch ------------------------------------------------------------------------ */

static const sp_cpu_isa all_sets[] = {SP_CPU_ISA_GENERIC, SP_CPU_ISA_AVX2, SP_CPU_ISA_AVX512};

Test(quant_dot, dispatch_has_a_kernel_for_every_weight_type) {
    for (size_t s = 0; s < sizeof all_sets / sizeof all_sets[0]; s++) {
        const sp_cpu_isa isa = all_sets[s];
        if (dev_cpu_isa_check(isa) != SP_OK) continue; /* a set this build or CPU has not */
        for (int t = 0; t < WEIGHT_TYPES; t++) {
            cr_expect(host__vec_dot_for(isa, weight_types[t]) != NULL, "%s %s", sp_cpu_isa_name(isa),
                      quant_type_name(weight_types[t]));
        }
        cr_expect_null(host__vec_dot_for(isa, QUANT_Q8_1));
        cr_expect_null(host__vec_dot_for(isa, QUANT_Q8_K));
        cr_expect_null(host__vec_dot_for(isa, QUANT_Q2_K));
        cr_expect_null(host__vec_dot_for(isa, (quant_type)63));
        cr_expect_null(host__vec_dot_for(isa, (quant_type)1000));
    }
}

Test(quant_dot, dispatch_has_a_quantizer_for_every_activation_format) {
    for (size_t s = 0; s < sizeof all_sets / sizeof all_sets[0]; s++) {
        const sp_cpu_isa isa = all_sets[s];
        if (dev_cpu_isa_check(isa) != SP_OK) continue;
        for (int t = 0; t < WEIGHT_TYPES; t++) {
            const quant_type at = quant_vec_dot_type(weight_types[t]);
            cr_expect(host__quantize_for(isa, at) != NULL, "%s %s", sp_cpu_isa_name(isa), quant_type_name(at));
        }
        cr_expect_null(host__quantize_for(isa, QUANT_Q4_1));
        cr_expect_null(host__quantize_for(isa, (quant_type)1000));
    }
}

Test(quant_dot, dispatch_follows_the_kernel_set) {
    if (!cpu_has_avx2()) cr_skip_test("this CPU has no AVX2/FMA/F16C");
    cr_expect(host__vec_dot_for(SP_CPU_ISA_GENERIC, QUANT_Q4_1) == dot_generic[QUANT_Q4_1]);
    cr_expect(host__vec_dot_for(SP_CPU_ISA_AVX2, QUANT_Q4_1) == dot_avx2[QUANT_Q4_1]);
    /* avx512's one-row kernels are avx2's: the same numbers by construction */
    cr_expect(host__vec_dot_for(SP_CPU_ISA_AVX512, QUANT_Q4_1) == dot_avx2[QUANT_Q4_1]);
}

Test(quant_dot, auto_picks_the_best_set_the_cpu_runs) {
    const host_cpu_features f = host__cpu_features();
    sp_cpu_isa isa;
    cr_assert_eq(host__isa_resolve(SP_CPU_ISA_AUTO, &isa), SP_OK);
    cr_expect_eq(isa, f.amx      ? SP_CPU_ISA_AMX
                      : f.avx512 ? SP_CPU_ISA_AVX512
                      : f.avx2   ? SP_CPU_ISA_AVX2
                                 : SP_CPU_ISA_GENERIC);
    cr_expect(!f.avx512 || f.avx2, "AVX-512 without AVX2");
    cr_expect(!f.amx || f.avx512, "AMX without AVX-512");
    cr_expect_eq(dev_cpu_isa_check(SP_CPU_ISA_AMX) == SP_OK, f.amx);
    if (!f.amx) cr_expect(strstr(sp_last_error(), "amx") != NULL, "%s", sp_last_error());
    cr_expect_eq(dev_cpu_isa_check(SP_CPU_ISA_AVX512) == SP_OK, f.avx512);
    if (!f.avx512) cr_expect(strstr(sp_last_error(), "avx512") != NULL, "%s", sp_last_error());
    cr_expect_eq(dev_cpu_isa_check(SP_CPU_ISA_AVX2) == SP_OK, f.avx2);
    cr_expect_eq(dev_cpu_isa_check(SP_CPU_ISA_GENERIC), SP_OK);
#if defined(__x86_64__) && defined(__GNUC__)
    /* the probe's CPUID and XCR0 reading against the compiler's own (which also checks
     * that the OS saves the registers) */
    __builtin_cpu_init();
    cr_expect_eq(f.avx2, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), "avx2");
    cr_expect_eq(f.avx512,
                 __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512f") &&
                     __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                     __builtin_cpu_supports("avx512vnni"),
                 "avx512");
    /* gcc 12 knows no "amx-tile" for __builtin_cpu_supports: CPUID leaf 7's EDX bits 24/25 */
    unsigned eax, ebx, ecx, edx;
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    if (!(edx & (1u << 24)) || !(edx & (1u << 25))) cr_expect(!f.amx, "amx without CPUID's AMX tile/int8 bits");
#endif
    cr_log_info("this CPU: avx2 %d, avx512 %d, amx %d", f.avx2, f.avx512, f.amx);
}

Test(quant_dot, set_names_parse_and_print) {
    for (int i = SP_CPU_ISA_AUTO; i <= SP_CPU_ISA_AMX; i++) {
        sp_cpu_isa back;
        cr_expect_eq(sp_cpu_isa_parse(sp_cpu_isa_name((sp_cpu_isa)i), &back), SP_OK);
        cr_expect_eq(back, (sp_cpu_isa)i);
    }
    sp_cpu_isa out;
    cr_expect_eq(sp_cpu_isa_parse("avx1024", &out), SP_ERR_INVALID_ARG);
    cr_expect(strstr(sp_last_error(), "avx1024") != NULL);
    cr_expect_str_eq(dev_cpu_isa_rounding(SP_CPU_ISA_AVX512), "avx2");
    cr_expect_str_eq(dev_cpu_isa_rounding(SP_CPU_ISA_AVX2), "avx2");
    cr_expect_str_eq(dev_cpu_isa_rounding(SP_CPU_ISA_GENERIC), "generic");
    cr_expect_str_eq(dev_cpu_isa_rounding(SP_CPU_ISA_AMX), "amx");
}

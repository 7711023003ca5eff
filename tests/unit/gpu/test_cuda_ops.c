/* test_cuda_ops.c: the CUDA backend against the CPU backend, op by op on fresh random
 * inputs and end to end on stories260K. Built always; where no usable GPU is present
 * (or the build has no CUDA backend) every test says so in one line and passes.
 *
 * Inputs reach a backend the only way the device interface offers: as weights
 * (dev_weight_init) gathered into activations by dev_embed. They are rounded to F16
 * first, since the CUDA backend stores float matrices as F16. Each comparison is the
 * relative error ||gpu - cpu|| / ||cpu|| against a bound fit to the precision involved
 * (the CPU quantizes activations to 8 bits for quantized weights, the GPU rounds them
 * to F16), plus no NaN.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "tests/unit/gpu/gpu_test.h"
#include "model/model.h"
#include "tests/unit/testdata.h"

enum { T = 24, DH = 64, HK = 2, H = 6, BLOCK = 16, N_BLOCKS = 16, MAX_WIDTH = 1024 };

/* One backend with a small KV pool and the step every op test uses: two sequences,
 * tokens 0..T-1 (the first 10 in sequence 0 at positions 0..9, the rest in sequence 1
 * at positions 3..16, after 3 positions an earlier step wrote). */
typedef struct side {
    dev_backend *dev;
    dev_kv *kv;
    dev_step host_step;   /* the CPU backend's "device" step is this very struct */
    const dev_step *step; /* as the backend reads it */
} side;

static int32_t step_tokens[T], step_pos[T], step_seq[T], step_seq_len[2] = {10, 17};
static int32_t step_table[2 * 4] = {3, 0, 0, 0, 7, 1, 12, 0};
static int32_t step_logit_rows[2] = {9, T - 1};

static dev_step the_step(void) {
    for (int t = 0; t < T; t++) {
        step_tokens[t] = t;
        step_seq[t] = t < 10 ? 0 : 1;
        step_pos[t] = t < 10 ? t : t - 10 + 3;
    }
    return (dev_step){T, step_tokens, step_pos, step_seq, 2, step_seq_len, step_table, 4, 2, step_logit_rows, 0, NULL};
}

static void side_open_with(side *s, dev_options o) {
    cr_assert_eq(dev_create(&o, &s->dev), SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_reserve(s->dev, T, MAX_WIDTH), SP_OK, "%s", sp_last_error());
    dev_kv_shape shape = {.n_layers = 1, .n_blocks = N_BLOCKS, .block_size = BLOCK, .n_kv_heads = HK, .head_dim = DH};
    cr_assert_eq(dev_kv_create(s->dev, &shape, &s->kv), SP_OK, "%s", sp_last_error());
    s->host_step = the_step();
    cr_assert_eq(dev_step_begin(s->dev, &s->host_step, T, s->kv, &s->step), SP_OK, "%s", sp_last_error());
}

static void side_open(side *s, sp_device kind) {
    side_open_with(s, (dev_options){.kind = kind, .n_threads = 2});
}

static void side_close(side *s) {
    dev_kv_destroy(s->dev, s->kv);
    dev_destroy(s->dev);
}

/* Device activations (T, dim) holding host rows x (T, dim) of F16-exact values. */
static float *side_input(side *s, dev_tensor *table, const float *x, int64_t dim) {
    cr_assert_eq(dev_weight_init(s->dev, table, QUANT_F32, dim, T, x, sizeof(float) * (size_t)(T * dim)), SP_OK, "%s",
                 sp_last_error());
    void *act;
    cr_assert_eq(dev_arena_alloc(s->dev, sizeof(float) * (size_t)(T * dim), &act), SP_OK);
    dev_embed(s->dev, act, table, s->step);
    return act;
}

static float *side_buffer(side *s, int64_t n) {
    void *p;
    cr_assert_eq(dev_arena_alloc(s->dev, sizeof(float) * (size_t)n, &p), SP_OK);
    return p;
}

static void side_read(side *s, float *host, const float *device, int64_t n) {
    cr_assert_eq(dev_copy_to_host(s->dev, host, device, sizeof(float) * (size_t)n), SP_OK, "%s", sp_last_error());
}

/* ---- matmul, every weight type ---- */

/* rows (<= T) activation rows; gemv: how the GPU side may read block weights */
static void check_matmul_rows(quant_type type, int64_t k, int64_t n, int64_t rows, sp_cuda_gemv gemv, double bound) {
    side cpu, gpu;
    side_open(&cpu, SP_DEVICE_CPU);
    side_open_with(&gpu, (dev_options){.kind = SP_DEVICE_CUDA, .quant_gemv = gemv});
    float *x = random_f16(T * k, 1.0f), *wf = random_f16(n * k, 0.5f);
    size_t row = quant_row_bytes(type, k);
    char *w = malloc(row * (size_t)n);
    for (int64_t r = 0; r < n; r++) quant_quantize_row(type, w + (size_t)r * row, wf + r * k, k);
    float *bias = random_f16(n, 0.1f);
    float *ref = malloc(sizeof(float) * (size_t)(T * n)), *got = malloc(sizeof(float) * (size_t)(T * n));
    side *sides[2] = {&cpu, &gpu};
    float *outs[2] = {ref, got};
    for (int i = 0; i < 2; i++) {
        side *s = sides[i];
        dev_tensor table, wt, bt;
        float *in = side_input(s, &table, x, k);
        cr_assert_eq(dev_weight_init(s->dev, &wt, type, k, n, w, row * (size_t)n), SP_OK, "%s", sp_last_error());
        cr_assert_eq(dev_weight_init(s->dev, &bt, QUANT_F32, n, 1, bias, sizeof(float) * (size_t)n), SP_OK);
        float *out = side_buffer(s, T * n);
        dev_matmul(s->dev, out, in, &wt, &bt, rows);
        side_read(s, outs[i], out, rows * n);
    }
    double e = rel_error(got, ref, rows * n);
    cr_expect(e < bound, "matmul %s K=%lld N=%lld rows %lld gemv mode %d: relative error %.2e (bound %.0e)",
              quant_type_name(type), (long long)k, (long long)n, (long long)rows, (int)gemv, e, bound);
    free(x), free(wf), free(w), free(bias), free(ref), free(got);
    side_close(&cpu);
    side_close(&gpu);
}

static void check_matmul(quant_type type, int64_t k, int64_t n, double bound) {
    check_matmul_rows(type, k, n, T, SP_CUDA_GEMV_AUTO, bound);
}

Test(cuda_ops, matmul_matches_the_cpu_for_every_weight_type) {
    skip_without_gpu();
    check_matmul(QUANT_F16, 512, 96, 2e-3);
    check_matmul(QUANT_BF16, 512, 96, 1e-2);
    check_matmul(QUANT_F32, 256, 64, 2e-3);
    check_matmul(QUANT_Q8_0, 512, 96, 1e-2);
    check_matmul(QUANT_Q4_0, 512, 96, 2e-2);
    check_matmul(QUANT_Q4_1, 1024, 80, 2e-2);
}

/* Activations past F16's 65,504 (qwen2's feed-forward inputs reach that): silu(gate) *
 * up with rows of magnitude up to about 10^6, 64 and 1/4 side by side, into a quantized
 * weight through cuBLAS (F16 inputs: rows past 2^15 are scaled by a power of two) and
 * through the GEMV (F32 inputs). The CPU quantizes activations per block, so it never
 * saturates: every row, small or large, must match it, and none may be infinite. */
static void check_large_activations(quant_type type, sp_cuda_gemv gemv, int rows, double bound) {
    enum { K = 512, N = 64 };
    side cpu, gpu;
    side_open(&cpu, SP_DEVICE_CPU);
    side_open_with(&gpu, (dev_options){.kind = SP_DEVICE_CUDA, .quant_gemv = gemv});
    float *gate = random_f16(T * K, 1.0f), *up = random_f16(T * K, 1.0f), *wf = random_f16(N * K, 0.5f);
    float *bias = random_f16(N, 0.1f);
    for (int t = 0; t < T; t++) { /* powers of two keep the values F16-exact */
        const float f = t % 3 == 0 ? 1024.0f : t % 3 == 1 ? 8.0f : 0.5f;
        for (int i = 0; i < K; i++) {
            gate[t * K + i] = fabsf(gate[t * K + i]) * f; /* silu(g) ~ g: large products */
            up[t * K + i] *= f;
        }
    }
    size_t row = quant_row_bytes(type, K);
    char *w = malloc(row * N);
    for (int r = 0; r < N; r++) quant_quantize_row(type, w + (size_t)r * row, wf + r * K, K);
    float *ref = malloc(sizeof(float) * T * N), *got = malloc(sizeof(float) * T * N);
    side *sides[2] = {&cpu, &gpu};
    float *outs[2] = {ref, got};
    for (int i = 0; i < 2; i++) {
        side *s = sides[i];
        dev_tensor gate_table, up_table, wt, bt;
        float *g = side_input(s, &gate_table, gate, K), *u = side_input(s, &up_table, up, K);
        float *act = side_buffer(s, T * K), *out = side_buffer(s, T * N);
        dev_swiglu(s->dev, act, g, u, T * K);
        cr_assert_eq(dev_weight_init(s->dev, &wt, type, K, N, w, row * N), SP_OK, "%s", sp_last_error());
        cr_assert_eq(dev_weight_init(s->dev, &bt, QUANT_F32, N, 1, bias, sizeof(float) * N), SP_OK);
        dev_matmul(s->dev, out, act, &wt, &bt, rows);
        side_read(s, outs[i], out, (int64_t)rows * N);
    }
    for (int t = 0; t < rows; t++) { /* row by row: a small row beside a large one must hold too */
        double e = rel_error(got + t * N, ref + t * N, N);
        cr_expect(e < bound, "%s gemv mode %d, %d rows, row %d (scale %s): relative error %.2e (bound %.0e)",
                  quant_type_name(type), (int)gemv, rows, t,
                  t % 3 == 0   ? "2^20"
                  : t % 3 == 1 ? "2^6"
                               : "2^-2",
                  e, bound);
    }
    free(gate), free(up), free(wf), free(bias), free(w), free(ref), free(got);
    side_close(&cpu);
    side_close(&gpu);
}

Test(cuda_ops, matmul_of_activations_past_the_f16_range_matches_the_cpu) {
    skip_without_gpu();
    /* cuBLAS at T rows and at 5; the GEMV (F32 inputs) at 5, the most rows it takes being 8 */
    const struct {
        sp_cuda_gemv gemv;
        int rows;
    } runs[3] = {{SP_CUDA_GEMV_NEVER, T}, {SP_CUDA_GEMV_NEVER, 5}, {SP_CUDA_GEMV_ALWAYS, 5}};
    for (int r = 0; r < 3; r++) {
        /* the CPU's 8-bit activations: about 0.75% at worst; a saturated row is off by O(1) */
        check_large_activations(QUANT_Q8_0, runs[r].gemv, runs[r].rows, 2e-2);
        check_large_activations(QUANT_Q4_1, runs[r].gemv, runs[r].rows, 3e-2);
    }
}

/* A matmul group of three weights of smollm2's Q/K/V shapes (N 576, 192, 192 of K 576;
 * a bias on K) takes one GEMV launch on the GPU: each part must get the bits it gets
 * alone, at every row count the GEMV takes, and match the CPU; block and half types. */
static void check_grouped_gemv(quant_type type, double bound) {
    enum { K = 576, PARTS = 3 };
    static const int64_t NS[PARTS] = {576, 192, 192};
    side cpu, gpu;
    side_open(&cpu, SP_DEVICE_CPU);
    side_open_with(&gpu, (dev_options){.kind = SP_DEVICE_CUDA, .quant_gemv = SP_CUDA_GEMV_ALWAYS});
    float *x = random_f16(T * K, 1.0f), *bias = random_f16(192, 0.1f);
    const size_t row = quant_row_bytes(type, K);
    char *w[PARTS];
    for (int p = 0; p < PARTS; p++) {
        float *wf = random_f16(NS[p] * K, 0.5f);
        w[p] = malloc(row * (size_t)NS[p]);
        for (int64_t r = 0; r < NS[p]; r++) quant_quantize_row(type, w[p] + (size_t)r * row, wf + r * K, K);
        free(wf);
    }
    side *sides[2] = {&cpu, &gpu};
    float *grouped[2][PARTS], *alone[PARTS];
    for (int rows = 1; rows <= 8; rows++) {
        for (int i = 0; i < 2; i++) {
            side *s = sides[i];
            dev_tensor table, wt[PARTS], bt;
            float *in = side_input(s, &table, x, K);
            cr_assert_eq(dev_weight_init(s->dev, &bt, QUANT_F32, 192, 1, bias, sizeof(float) * 192), SP_OK);
            dev_matmul_part parts[PARTS];
            for (int p = 0; p < PARTS; p++) {
                cr_assert_eq(dev_weight_init(s->dev, &wt[p], type, K, NS[p], w[p], row * (size_t)NS[p]), SP_OK, "%s",
                             sp_last_error());
                parts[p] = (dev_matmul_part){side_buffer(s, T * NS[p]), &wt[p], p == 1 ? &bt : NULL};
            }
            dev_matmul_group(s->dev, parts, PARTS, in, rows);
            for (int p = 0; p < PARTS; p++) {
                grouped[i][p] = malloc(sizeof(float) * (size_t)(rows * NS[p]));
                side_read(s, grouped[i][p], parts[p].out, rows * NS[p]);
            }
            if (i == 1)
                for (int p = 0; p < PARTS; p++) { /* each part alone, on the GPU */
                    float *out = side_buffer(s, T * NS[p]);
                    dev_matmul(s->dev, out, in, &wt[p], parts[p].bias, rows);
                    alone[p] = malloc(sizeof(float) * (size_t)(rows * NS[p]));
                    side_read(s, alone[p], out, rows * NS[p]);
                }
        }
        for (int p = 0; p < PARTS; p++) {
            cr_expect(memcmp(grouped[1][p], alone[p], sizeof(float) * (size_t)(rows * NS[p])) == 0,
                      "%s, %d rows, part %d: grouped and alone differ", quant_type_name(type), rows, p);
            double e = rel_error(grouped[1][p], grouped[0][p], rows * NS[p]);
            cr_expect(e < bound, "%s, %d rows, part %d: relative error %.2e against the CPU", quant_type_name(type),
                      rows, p, e);
            free(grouped[0][p]), free(grouped[1][p]), free(alone[p]);
        }
    }
    side_close(&cpu); /* the backends borrow the host weights until here */
    side_close(&gpu);
    for (int p = 0; p < PARTS; p++) free(w[p]);
    free(x), free(bias);
}

Test(cuda_ops, a_grouped_gemv_gives_each_part_the_bits_it_gets_alone) {
    skip_without_gpu();
    check_grouped_gemv(QUANT_Q4_1, 2e-2);
    check_grouped_gemv(QUANT_Q8_0, 2e-2);
    check_grouped_gemv(QUANT_BF16, 1e-2);
    check_grouped_gemv(QUANT_F16, 2e-3);
}

/* The fused dequantize-GEMV (forced on) and cuBLAS (forced) at every row count it
 * takes, on row lengths that exercise each copy width (K = 32 x odd blocks too). */
Test(cuda_ops, small_batch_matmul_on_blocks_matches_the_cpu_on_both_paths) {
    skip_without_gpu();
    static const quant_type TYPES[] = {QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_1};
    static const int64_t KS[] = {32, 96, 256, 1024};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t ki = 0; ki < 4; ki++)
            for (int64_t rows = 1; rows <= 8; rows++) {
                check_matmul_rows(TYPES[ti], KS[ki], 77, rows, SP_CUDA_GEMV_ALWAYS, 2e-2);
                if (rows == 1 || rows == 8) check_matmul_rows(TYPES[ti], KS[ki], 77, rows, SP_CUDA_GEMV_NEVER, 2e-2);
            }
}

/* The GEMV on F16/BF16 weights (cuda_gemv_half.cu, forced on) at every row count, on
 * row lengths of one 16-byte piece per lane and less, of several, and one it does not
 * take (K not a multiple of 8: cuBLAS); the CPU rounds the inputs to the weights' type,
 * the GEMV keeps them F32. */
Test(cuda_ops, small_batch_matmul_on_half_weights_matches_the_cpu) {
    skip_without_gpu();
    static const quant_type TYPES[] = {QUANT_F16, QUANT_BF16};
    static const double BOUNDS[] = {2e-3, 1e-2};
    static const int64_t KS[] = {8, 96, 256, 1000, 1024, 100};
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t ki = 0; ki < 6; ki++)
            for (int64_t rows = 1; rows <= 8; rows++)
                check_matmul_rows(TYPES[ti], KS[ki], 77, rows, SP_CUDA_GEMV_ALWAYS, BOUNDS[ti]);
}

/* ---- row ops: RMSNorm, RoPE (both styles, with factors), SwiGLU, add, gather ---- */

Test(cuda_ops, row_ops_match_the_cpu) {
    skip_without_gpu();
    side cpu, gpu;
    side_open(&cpu, SP_DEVICE_CPU);
    side_open(&gpu, SP_DEVICE_CUDA);
    const int64_t d = H * DH;
    float *x = random_f16(T * d, 2.0f), *y = random_f16(T * d, 2.0f), *w = random_f16(d, 1.0f);
    float *factors = malloc(sizeof(float) * DH / 2);
    for (int i = 0; i < DH / 2; i++) factors[i] = 1.0f + (float)i / 4.0f;
    enum { OPS = 7 };
    float *res[2][OPS];
    side *sides[2] = {&cpu, &gpu};
    for (int i = 0; i < 2; i++) {
        side *s = sides[i];
        dev_tensor tx, ty, tw, tf;
        float *ax = side_input(s, &tx, x, d), *ay = side_input(s, &ty, y, d);
        cr_assert_eq(dev_weight_init(s->dev, &tw, QUANT_F32, d, 1, w, sizeof(float) * (size_t)d), SP_OK);
        cr_assert_eq(dev_weight_init(s->dev, &tf, QUANT_F32, DH / 2, 1, factors, sizeof(float) * DH / 2), SP_OK);
        float *outs[OPS];
        for (int o = 0; o < OPS; o++) outs[o] = side_buffer(s, T * d);
        dev_rmsnorm(s->dev, outs[0], ax, &tw, 1e-5f, T, d);
        dev_add(s->dev, outs[1], ax, ay, T * d);
        dev_swiglu(s->dev, outs[2], ax, ay, T * d);
        dev_rope normal = {DEV_ROPE_NORMAL, DH, 10000.0f, 1.0f, NULL};
        dev_rope neox = {DEV_ROPE_NEOX, DH, 500000.0f, 0.5f, &tf};
        dev_add(s->dev, outs[3], ax, outs[3], T * d); /* outs[3] = x (the arena starts zeroed) */
        dev_rope_apply(s->dev, outs[3], s->step, &normal, H, DH);
        dev_add(s->dev, outs[4], ay, outs[4], T * d);
        dev_rope_apply(s->dev, outs[4], s->step, &neox, H, DH);
        dev_gather_rows(s->dev, outs[5], ax, s->step->logit_rows, 2, d);
        float *residual = side_buffer(s, T * d);
        dev_add(s->dev, residual, ax, residual, T * d); /* residual = x */
        dev_add_rmsnorm(s->dev, outs[6], residual, ay, &tw, 1e-5f, T, d);
        for (int o = 0; o < OPS; o++) {
            res[i][o] = malloc(sizeof(float) * (size_t)(T * d));
            side_read(s, res[i][o], outs[o], o == 5 ? 2 * d : T * d);
        }
    }
    static const char *NAMES[OPS] = {"rmsnorm", "add", "swiglu", "rope normal", "rope neox", "gather", "add_rmsnorm"};
    for (int o = 0; o < OPS; o++) {
        double e = rel_error(res[1][o], res[0][o], o == 5 ? 2 * d : T * d);
        cr_expect(e < 1e-5 || (o >= 3 && o <= 4 && e < 1e-4), "%s: relative error %.2e", NAMES[o], e);
        free(res[0][o]);
        free(res[1][o]);
    }
    free(x), free(y), free(w), free(factors);
    side_close(&cpu);
    side_close(&gpu);
}

/* ---- KV write and attention: two sequences, one with earlier positions ---- */

/* Sequence 1's positions 0..2, which the step's attention reads, come from an earlier
 * step: writes them (rows 0..2 of k, v), then makes the main step current again. */
static void write_earlier_positions(side *s, const float *k, const float *v) {
    int32_t tokens[3] = {0, 1, 2}, pos[3] = {0, 1, 2}, seq[3] = {1, 1, 1};
    dev_step early = {3, tokens, pos, seq, 2, step_seq_len, step_table, 4, 0, NULL, 0, NULL};
    const dev_step *early_dev;
    cr_assert_eq(dev_step_begin(s->dev, &early, T, s->kv, &early_dev), SP_OK, "%s", sp_last_error());
    dev_kv_write(s->dev, s->kv, 0, k, v, early_dev);
    cr_assert_eq(dev_step_begin(s->dev, &s->host_step, T, s->kv, &s->step), SP_OK, "%s", sp_last_error());
}

Test(cuda_ops, attention_over_the_paged_pool_matches_the_cpu) {
    skip_without_gpu();
    side cpu, gpu;
    side_open(&cpu, SP_DEVICE_CPU);
    side_open(&gpu, SP_DEVICE_CUDA);
    float *q = random_f16(T * H * DH, 1.0f), *k = random_f16(T * HK * DH, 1.0f), *v = random_f16(T * HK * DH, 1.0f);
    float *res[2];
    side *sides[2] = {&cpu, &gpu};
    for (int i = 0; i < 2; i++) {
        side *s = sides[i];
        dev_tensor tq, tk, tv;
        float *aq = side_input(s, &tq, q, H * DH), *ak = side_input(s, &tk, k, HK * DH),
              *av = side_input(s, &tv, v, HK * DH);
        write_earlier_positions(s, ak, av);
        dev_kv_write(s->dev, s->kv, 0, ak, av, s->step);
        float *out = side_buffer(s, T * H * DH);
        dev_attention(s->dev, out, aq, s->kv, 0, s->step, H, 0.125f);
        res[i] = malloc(sizeof(float) * T * H * DH);
        side_read(s, res[i], out, T * H * DH);
    }
    double e = rel_error(res[1], res[0], T * H * DH);
    cr_expect(e < 2e-3, "attention: relative error %.2e", e); /* the CPU rounds probabilities to F16 */
    free(res[0]), free(res[1]), free(q), free(k), free(v);
    side_close(&cpu);
    side_close(&gpu);
}

/* dev_rope_kv_write, one kernel on the GPU, against the three ops it fuses on the GPU
 * (bit for bit: the same arithmetic) and against the CPU (which runs the three ops):
 * q as rotated, and the attention over the pools it wrote. A partial rotation (n_rot 48
 * of 64: the widths past it go to the pool as they are) in both styles, frequency
 * factors on the NeoX one. */
static void rope_kv_run(side *s, const float *q, const float *k, const float *v, const dev_rope *rope, bool fused,
                        float *q_out, float *attn_out) {
    dev_tensor tq, tk, tv;
    float *aq = side_input(s, &tq, q, H * DH), *ak = side_input(s, &tk, k, HK * DH),
          *av = side_input(s, &tv, v, HK * DH);
    write_earlier_positions(s, ak, av);
    if (fused) {
        dev_rope_kv_write(s->dev, s->kv, 0, aq, ak, av, s->step, rope, H);
    } else {
        dev_rope_apply(s->dev, aq, s->step, rope, H, DH);
        dev_rope_apply(s->dev, ak, s->step, rope, HK, DH);
        dev_kv_write(s->dev, s->kv, 0, ak, av, s->step);
    }
    float *out = side_buffer(s, T * H * DH);
    dev_attention(s->dev, out, aq, s->kv, 0, s->step, H, 0.125f);
    side_read(s, q_out, aq, T * H * DH);
    side_read(s, attn_out, out, T * H * DH);
}

Test(cuda_ops, fused_rope_and_kv_write_equal_the_separate_ops) {
    skip_without_gpu();
    float *q = random_f16(T * H * DH, 1.0f), *k = random_f16(T * HK * DH, 1.0f), *v = random_f16(T * HK * DH, 1.0f);
    float factors[24];
    for (int i = 0; i < 24; i++) factors[i] = 1.0f + 1.5f * (uniform() + 1.0f);
    const size_t n = (size_t)T * H * DH;
    float *qs[3], *outs[3];
    for (int style = 0; style < 2; style++) {
        for (int run = 0; run < 3; run++) { /* GPU fused, GPU separate, CPU */
            side s;
            side_open(&s, run < 2 ? SP_DEVICE_CUDA : SP_DEVICE_CPU);
            dev_tensor ft;
            cr_assert_eq(dev_weight_init(s.dev, &ft, QUANT_F32, 24, 1, factors, sizeof factors), SP_OK);
            const dev_rope rope = style == 0 ? (dev_rope){DEV_ROPE_NORMAL, 48, 10000.0f, 1.0f, NULL}
                                             : (dev_rope){DEV_ROPE_NEOX, 48, 500000.0f, 0.5f, &ft};
            qs[run] = malloc(sizeof(float) * n);
            outs[run] = malloc(sizeof(float) * n);
            rope_kv_run(&s, q, k, v, &rope, run != 1, qs[run], outs[run]);
            side_close(&s);
        }
        cr_expect(memcmp(qs[0], qs[1], sizeof(float) * n) == 0, "style %d: fused q differs from rope_apply's", style);
        cr_expect(memcmp(outs[0], outs[1], sizeof(float) * n) == 0,
                  "style %d: attention over the fused write differs from the separate ops'", style);
        double eq = rel_error(qs[0], qs[2], (int64_t)n), eo = rel_error(outs[0], outs[2], (int64_t)n);
        cr_expect(eq < 1e-5, "style %d: rotated q against the CPU: relative error %.2e", style, eq);
        cr_expect(eo < 2e-3, "style %d: attention against the CPU: relative error %.2e", style, eo);
        for (int run = 0; run < 3; run++) free(qs[run]), free(outs[run]);
    }
    free(q), free(k), free(v);
}

/* stories260K on a backend of kind (2 threads), with a 4-block KV pool of 16 tokens. */
static void open_stories(const char *path, sp_device kind, dev_backend **dev, model **m, dev_kv **kv) {
    dev_options o = {.kind = kind, .n_threads = 2};
    cr_assert_eq(dev_create(&o, dev), SP_OK, "%s", sp_last_error());
    model_options mo = {.max_batch_tokens = 16};
    cr_assert_eq(model_load(path, *dev, &mo, m), SP_OK, "%s", sp_last_error());
    cr_assert_eq(model_kv_create(*m, 4, 16, kv), SP_OK, "%s", sp_last_error());
}

/* ---- end to end: stories260K, greedy, the GPU fed the CPU's tokens ---- */

Test(cuda_ops, stories260k_greedy_tokens_and_logits_match_the_cpu) {
    skip_without_gpu();
    char path[512];
    TESTDATA_REQUIRE(testdata_path(path, sizeof path, "models/stories260K.gguf"));
    enum { STEPS = 24, V_MAX = 512 };
    int32_t tokens[2][STEPS], n_vocab = 0;
    float *logits[2];
    sp_device kinds[2] = {SP_DEVICE_CPU, SP_DEVICE_CUDA};
    for (int i = 0; i < 2; i++) {
        dev_backend *dev;
        model *m;
        dev_kv *kv;
        open_stories(path, kinds[i], &dev, &m, &kv);
        n_vocab = model_get_hparams(m)->n_vocab;
        cr_assert(n_vocab <= V_MAX);
        logits[i] = malloc(sizeof(float) * STEPS * V_MAX);
        int32_t table[4] = {2, 0, 3, 1};
        for (int t = 0; t < STEPS; t++) {
            /* teacher forcing: both backends see the CPU's greedy tokens, so a near-tie
             * the GPU breaks the other way does not change every later step */
            int32_t token = t == 0 ? 1 : tokens[0][t - 1];
            int32_t pos = t, seq = 0, len = t + 1, row = 0;
            dev_step step = {1, &token, &pos, &seq, 1, &len, table, 4, 1, &row, 0, NULL};
            float *l = logits[i] + (size_t)t * V_MAX;
            cr_assert_eq(model_forward(m, kv, &step, l), SP_OK, "%s", sp_last_error());
            int32_t best = 0;
            for (int32_t j = 1; j < n_vocab; j++)
                if (l[j] > l[best]) best = j;
            tokens[i][t] = best;
        }
        dev_kv_destroy(dev, kv);
        model_destroy(m);
        dev_destroy(dev);
    }
    for (int t = 0; t < STEPS; t++) {
        const float *ref = logits[0] + (size_t)t * V_MAX;
        double e = rel_error(logits[1] + (size_t)t * V_MAX, ref, n_vocab);
        cr_expect(e < 2e-2, "step %d: logits relative error %.2e", t, e);
        /* the same greedy token wherever the CPU's choice is not a near-tie */
        float second = -INFINITY;
        for (int32_t j = 0; j < n_vocab; j++)
            if (j != tokens[0][t] && ref[j] > second) second = ref[j];
        if (ref[tokens[0][t]] - second > 0.1f)
            cr_expect_eq(tokens[1][t], tokens[0][t], "step %d: greedy token %d on the GPU, %d on the CPU", t,
                         tokens[1][t], tokens[0][t]);
    }
    free(logits[0]);
    free(logits[1]);
}

/* ---- embeddings: a prompt's final hidden states (after the output norm) ---- */

/* The rows /v1/embeddings pools, from the CUDA backend as from the CPU: a 12-token
 * prompt in one step, every row's hidden state (model_forward_sample_hidden), no logits. */
Test(cuda_ops, stories260k_hidden_rows_match_the_cpu) {
    skip_without_gpu();
    char path[512];
    TESTDATA_REQUIRE(testdata_path(path, sizeof path, "models/stories260K.gguf"));
    enum { N = 12 };
    float *hidden[2] = {NULL, NULL};
    int32_t d = 0;
    sp_device kinds[2] = {SP_DEVICE_CPU, SP_DEVICE_CUDA};
    for (int i = 0; i < 2; i++) {
        dev_backend *dev;
        model *m;
        dev_kv *kv;
        open_stories(path, kinds[i], &dev, &m, &kv);
        d = model_get_hparams(m)->n_embd;
        int32_t tokens[N], pos[N], seq[N], rows[N], len = N, table[4] = {1, 0, 2, 3};
        for (int t = 0; t < N; t++) {
            tokens[t] = 1 + (t * 37) % 400;
            pos[t] = t;
            seq[t] = 0;
            rows[t] = t;
        }
        dev_step step = {N, tokens, pos, seq, 1, &len, table, 4, 0, NULL, N, rows};
        const dev_sample_vocab vocab = {model_get_hparams(m)->n_vocab, NULL, 0};
        hidden[i] = malloc(sizeof(float) * N * (size_t)d);
        cr_assert_eq(model_forward_sample_hidden(m, kv, &step, &vocab, NULL, NULL, hidden[i], NULL), SP_OK, "%s",
                     sp_last_error());
        dev_kv_destroy(dev, kv);
        model_destroy(m);
        dev_destroy(dev);
    }
    for (int t = 0; t < N; t++) {
        double e = rel_error(hidden[1] + (size_t)t * d, hidden[0] + (size_t)t * d, d);
        cr_expect(e < 2e-2, "row %d: hidden state relative error %.2e", t, e);
    }
    free(hidden[0]);
    free(hidden[1]);
}

/* ---- end to end on synthetic models: decode batches, every path ---- */

/* Writes a synthetic model with build/mkmodel (SPINDLE_MKMODEL overrides) into /tmp. */
static void synthetic_model(char *path, size_t cap, const char *shape, const char *type) {
    const char *tool = getenv("SPINDLE_MKMODEL") ? getenv("SPINDLE_MKMODEL") : "build/mkmodel";
    snprintf(path, cap, "/tmp/spindle-test-%s-%s-%d.gguf", shape, type, (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --shape %s --type %s --ctx 512 -o %s", tool, shape, type, path);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

enum { E2E_SEQS = 3, E2E_STEPS = 12, E2E_PROMPT = 5 };

/* Runs E2E_SEQS sequences: a prompt of E2E_PROMPT tokens each as one prefill step,
 * then E2E_STEPS decode steps of all of them together, fed fixed tokens. Returns the
 * decode steps' logits (E2E_STEPS, E2E_SEQS, V); *n_vocab gets V. */
static float *run_decode(const char *path, const dev_options *o, int32_t *n_vocab) {
    dev_backend *dev;
    cr_assert_eq(dev_create(o, &dev), SP_OK, "%s", sp_last_error());
    model *m;
    model_options mo = {.max_batch_tokens = 32};
    cr_assert_eq(model_load(path, dev, &mo, &m), SP_OK, "%s", sp_last_error());
    const int32_t v = model_get_hparams(m)->n_vocab;
    dev_kv *kv;
    cr_assert_eq(model_kv_create(m, 8, 16, &kv), SP_OK, "%s", sp_last_error());
    int32_t table[E2E_SEQS * 2] = {0, 1, 2, 3, 4, 5};
    int32_t tokens[E2E_SEQS * E2E_PROMPT], pos[E2E_SEQS * E2E_PROMPT], seq[E2E_SEQS * E2E_PROMPT];
    int32_t len[E2E_SEQS], rows[E2E_SEQS];
    for (int q = 0; q < E2E_SEQS; q++) {
        for (int i = 0; i < E2E_PROMPT; i++) {
            tokens[q * E2E_PROMPT + i] = (17 * q + 31 * i + 1) % v;
            pos[q * E2E_PROMPT + i] = i;
            seq[q * E2E_PROMPT + i] = q;
        }
        len[q] = E2E_PROMPT;
        rows[q] = q * E2E_PROMPT + E2E_PROMPT - 1;
    }
    float *prefill = malloc(sizeof(float) * E2E_SEQS * (size_t)v);
    dev_step step = {E2E_SEQS * E2E_PROMPT, tokens, pos, seq, E2E_SEQS, len, table, 2, E2E_SEQS, rows, 0, NULL};
    cr_assert_eq(model_forward(m, kv, &step, prefill), SP_OK, "%s", sp_last_error());
    free(prefill);
    float *logits = malloc(sizeof(float) * E2E_STEPS * E2E_SEQS * (size_t)v);
    for (int t = 0; t < E2E_STEPS; t++) {
        for (int q = 0; q < E2E_SEQS; q++) {
            tokens[q] = (7 * t + 13 * q + 3) % v;
            pos[q] = E2E_PROMPT + t;
            seq[q] = q;
            len[q] = E2E_PROMPT + t + 1;
            rows[q] = q;
        }
        dev_step d = {E2E_SEQS, tokens, pos, seq, E2E_SEQS, len, table, 2, E2E_SEQS, rows, 0, NULL};
        cr_assert_eq(model_forward(m, kv, &d, logits + (size_t)t * E2E_SEQS * (size_t)v), SP_OK, "%s", sp_last_error());
    }
    dev_kv_destroy(dev, kv);
    model_destroy(m);
    dev_destroy(dev);
    *n_vocab = v;
    return logits;
}

/* The GPU's logits against the CPU's, step by step. */
static void expect_close(const float *gpu, const float *cpu, int32_t v, double bound, const char *what) {
    for (int t = 0; t < E2E_STEPS; t++) {
        size_t off = (size_t)t * E2E_SEQS * (size_t)v;
        double e = rel_error(gpu + off, cpu + off, (int64_t)E2E_SEQS * v);
        cr_expect(e < bound, "%s, decode step %d: logits relative error %.2e (bound %.0e)", what, t, e, bound);
    }
}

Test(cuda_ops, synthetic_models_decode_like_the_cpu_with_and_without_the_gemv) {
    skip_without_gpu();
    static const char *TYPES[] = {"Q4_1", "Q8_0", "Q4_0", "BF16"};
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) {
        char path[256];
        synthetic_model(path, sizeof path, "smollm2-135m", TYPES[i]);
        int32_t v;
        dev_options cpu = {.kind = SP_DEVICE_CPU, .n_threads = 2};
        float *ref = run_decode(path, &cpu, &v);
        sp_cuda_gemv modes[3] = {SP_CUDA_GEMV_AUTO, SP_CUDA_GEMV_ALWAYS, SP_CUDA_GEMV_NEVER};
        for (int mode = 0; mode < 3; mode++) {
            dev_options gpu = {.kind = SP_DEVICE_CUDA, .quant_gemv = modes[mode]};
            float *got = run_decode(path, &gpu, &v);
            char what[64];
            snprintf(what, sizeof what, "smollm2-135m %s, gemv mode %d", TYPES[i], mode);
            expect_close(got, ref, v, 3e-2, what);
            free(got);
        }
        free(ref);
        remove(path);
    }
}

Test(cuda_ops, decode_graphs_give_the_same_logits_as_op_by_op) {
    skip_without_gpu();
    char path[256];
    synthetic_model(path, sizeof path, "smollm2-135m", "Q4_1");
    int32_t v;
    /* the GEMV forced on in both: a measured choice could differ between the two backends */
    dev_options graphs = {.kind = SP_DEVICE_CUDA, .quant_gemv = SP_CUDA_GEMV_ALWAYS},
                eager = {.kind = SP_DEVICE_CUDA, .no_graphs = true, .quant_gemv = SP_CUDA_GEMV_ALWAYS};
    float *a = run_decode(path, &graphs, &v), *b = run_decode(path, &eager, &v);
    /* the same kernels on the same padded shapes: bit for bit */
    for (int t = 0; t < E2E_STEPS; t++) {
        size_t off = (size_t)t * E2E_SEQS * (size_t)v;
        cr_expect(memcmp(a + off, b + off, sizeof(float) * E2E_SEQS * (size_t)v) == 0,
                  "decode step %d: graph replay and op-by-op logits differ", t);
    }
    free(a);
    free(b);
    remove(path);
}

/* ---- graphs across buckets: batches that grow, shrink and come back ---- */

enum { SCHED_SEQS = 20, SCHED_BLOCK = 4, SCHED_WIDTH = 8, SCHED_STEPS = 28 };
/* Each step's batch (at most SCHED_SEQS: one token per sequence). As (bucket, table
 * width) shapes, each is run op by op on its first step, captured on its second and
 * replayed after: 9 replays, some with other real token counts than the one captured
 * ((24, 4) captured at 18 tokens, replayed at 20 and 18); the widths grow 2, 4, 8. */
static const int32_t sched_sizes[SCHED_STEPS] = {1, 1,  1,  3, 3, 4,  3, 17, 20, 19, 18, 5, 1,  1,
                                                 9, 16, 20, 4, 3, 18, 1, 1,  1,  7,  11, 6, 19, 2};

/* Draft rows of the i-th sequence of step s in a verify schedule (0, 1 or 2; the
 * longest sequence then holds 26 tokens of the 32 its blocks do), else 0. */
static int32_t sched_drafts(bool verify, int s, int i) {
    static const int32_t pattern[5] = {0, 2, 0, 1, 0};
    return verify ? pattern[(s + i) % 5] : 0;
}

/* SCHED_SEQS sequences prefilled with 4 tokens each (one block), then batches of
 * sched_sizes sequences, each a different run of sequences, so the block tables widen
 * while buckets are captured, replayed and left. A decode schedule gives each sequence
 * one token a step; a verify schedule gives it 1 + sched_drafts rows, as speculative
 * verify steps do (the drafts all kept), so one bucket holds steps of other sequence
 * counts and runs. Returns every row's logits, step after step (*n_rows rows of V). */
static float *run_schedule(const char *path, const dev_options *o, bool verify, int32_t *n_vocab, int32_t *n_rows) {
    dev_backend *dev;
    cr_assert_eq(dev_create(o, &dev), SP_OK, "%s", sp_last_error());
    model *m;
    model_options mo = {.max_batch_tokens = 96};
    cr_assert_eq(model_load(path, dev, &mo, &m), SP_OK, "%s", sp_last_error());
    const int32_t v = model_get_hparams(m)->n_vocab;
    dev_kv *kv;
    cr_assert_eq(model_kv_create(m, SCHED_SEQS * SCHED_WIDTH, SCHED_BLOCK, &kv), SP_OK, "%s", sp_last_error());
    int32_t blocks[SCHED_SEQS * SCHED_WIDTH]; /* sequence q owns blocks q, q + 20, ... */
    for (int q = 0; q < SCHED_SEQS; q++)
        for (int b = 0; b < SCHED_WIDTH; b++) blocks[q * SCHED_WIDTH + b] = q + SCHED_SEQS * b;
    int32_t len[SCHED_SEQS], tokens[SCHED_SEQS * 4], pos[SCHED_SEQS * 4], seq[SCHED_SEQS * 4], rows[SCHED_SEQS * 4];
    for (int q = 0; q < SCHED_SEQS; q++) {
        for (int i = 0; i < 4; i++) {
            tokens[q * 4 + i] = (29 * q + 11 * i + 5) % v;
            pos[q * 4 + i] = i;
            seq[q * 4 + i] = q;
        }
        len[q] = 4;
        rows[q] = q * 4 + 3;
    }
    dev_step prefill = {SCHED_SEQS * 4, tokens, pos, seq, SCHED_SEQS, len, blocks, SCHED_WIDTH, 0, rows, 0, NULL};
    cr_assert_eq(model_forward(m, kv, &prefill, NULL), SP_OK, "%s", sp_last_error());

    int total = 0;
    for (int s = 0; s < SCHED_STEPS; s++)
        for (int i = 0; i < sched_sizes[s]; i++) total += 1 + sched_drafts(verify, s, i);
    float *logits = malloc(sizeof(float) * (size_t)total * (size_t)v), *at = logits;
    for (int s = 0; s < SCHED_STEPS; s++) {
        const int32_t n = sched_sizes[s];
        int32_t table[SCHED_SEQS * SCHED_WIDTH], step_len[SCHED_SEQS], width = 1, t = 0;
        for (int i = 0; i < n; i++) { /* a run of sequences that starts somewhere new each step */
            const int q = (7 * s + i) % SCHED_SEQS;
            for (int j = 0; j <= sched_drafts(verify, s, i); j++, t++) { /* its token, then its drafts */
                tokens[t] = (13 * s + 3 * q + 5 * j + 1) % v;
                pos[t] = len[q]++;
                seq[t] = i;
                rows[t] = t;
            }
            step_len[i] = len[q];
            const int32_t need = (len[q] + SCHED_BLOCK - 1) / SCHED_BLOCK;
            cr_assert(need <= SCHED_WIDTH, "sequence %d outgrew its blocks", q);
            if (need > width) width = need;
        }
        for (int i = 0; i < n; i++) /* the step's table is as wide as its longest sequence needs */
            memcpy(table + i * width, blocks + ((7 * s + i) % SCHED_SEQS) * SCHED_WIDTH, sizeof(int32_t) * width);
        dev_step d = {t, tokens, pos, seq, n, step_len, table, width, t, rows, 0, NULL};
        cr_assert_eq(model_forward(m, kv, &d, at), SP_OK, "step %d: %s", s, sp_last_error());
        at += (size_t)t * (size_t)v;
    }
    dev_kv_destroy(dev, kv);
    model_destroy(m);
    dev_destroy(dev);
    *n_vocab = v;
    *n_rows = total;
    return logits;
}

/* Graph replay against op by op (bit for bit) and the CPU, for a decode or a verify
 * schedule (run_schedule). */
static void check_schedule(bool verify) {
    skip_without_gpu();
    char path[256];
    synthetic_model(path, sizeof path, "smollm2-135m", "Q8_0");
    int32_t v, rows_a, rows_b, rows_ref;
    dev_options graphs = {.kind = SP_DEVICE_CUDA, .quant_gemv = SP_CUDA_GEMV_ALWAYS},
                eager = {.kind = SP_DEVICE_CUDA, .no_graphs = true, .quant_gemv = SP_CUDA_GEMV_ALWAYS},
                cpu = {.kind = SP_DEVICE_CPU};
    float *a = run_schedule(path, &graphs, verify, &v, &rows_a), *b = run_schedule(path, &eager, verify, &v, &rows_b),
          *ref = run_schedule(path, &cpu, verify, &v, &rows_ref);
    cr_assert(rows_a == rows_b && rows_b == rows_ref);
    size_t off = 0;
    for (int s = 0; s < SCHED_STEPS; s++) {
        int32_t step_rows = 0;
        for (int i = 0; i < sched_sizes[s]; i++) step_rows += 1 + sched_drafts(verify, s, i);
        const size_t n = (size_t)step_rows * (size_t)v;
        cr_expect(memcmp(a + off, b + off, sizeof(float) * n) == 0,
                  "%s step %d (%d rows): graph replay and op-by-op logits differ", verify ? "verify" : "decode", s,
                  step_rows);
        double e = rel_error(b + off, ref + off, (int64_t)n);
        cr_expect(e < 3e-2, "%s step %d (%d rows): relative error %.2e against the CPU", verify ? "verify" : "decode",
                  s, step_rows, e);
        off += n;
    }
    free(a);
    free(b);
    free(ref);
    remove(path);
}

Test(cuda_ops, graphs_across_buckets_and_table_widths_match_op_by_op_and_the_cpu) {
    check_schedule(false);
}

/* Speculative verify steps (a token and 0-2 drafts per sequence) are padded into the
 * decode buckets and replayed from their graphs (gpu/cuda/cuda_pad.h). */
Test(cuda_ops, verify_step_graphs_match_op_by_op_and_the_cpu) {
    check_schedule(true);
}

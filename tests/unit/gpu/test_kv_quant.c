/* test_kv_quant.c: KV pools in Q8_0 and Q4_0 (sp_kv_type). The bytes a pool holds per
 * token and block; a row written is ggml's quantization of it; attention over the
 * quantized pool equals attention computed in double over the rows the pool holds
 * (dequantized), within the error of the query's own Q8_0 rounding; the avx2, avx512 and
 * amx kernel sets give the same bits; a token's result does not depend on its batch;
 * head widths the blocks do not divide are refused by name. The bytes a pool's blocks
 * hold (as the tiers save them) are ggml's blocks of the rows written, on the CPU and,
 * where a GPU is usable, the CUDA backend (the same bytes as the CPU's: tier files move
 * between backends). The CUDA backend's quantized attention is checked against the
 * CPU's in test_cuda_attention.c. */
#include <math.h>
#include <string.h>

#include "tests/unit/gpu/gpu_test.h"

enum { LAYERS = 1, BLOCKS = 12, B = 4, HK = 2, DH = 64, H = 4, P = 37 /* positions of sequence 0 */ };

static dev_backend *cpu_backend(sp_cpu_isa isa) {
    dev_backend *dev;
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = 2, .cpu_isa = isa};
    cr_assert_eq(dev_create(&opts, &dev), SP_OK, "%s", sp_last_error());
    return dev;
}

static dev_kv_shape shape_of(sp_kv_type type) {
    return (dev_kv_shape){
        .n_layers = LAYERS, .n_blocks = BLOCKS, .block_size = B, .n_kv_heads = HK, .head_dim = DH, .kv_type = type};
}

/* The inputs: sequence 0 of P positions (blocks 0..9), and in the batched step a
 * second sequence of 5 positions (blocks 10, 11) beside it. */
typedef struct inputs {
    float *k, *v, *q; /* (P + 5, HK*DH), (P + 5, HK*DH), (P + 5, H*DH) */
} inputs;

static inputs make_inputs(void) {
    gpu_test_rng = 0x6b76;
    inputs in = {random_f16((P + 5) * HK * DH, 2.0f), random_f16((P + 5) * HK * DH, 1.0f),
                 random_f16((P + 5) * H * DH, 1.0f)};
    return in;
}

static void free_inputs(inputs *in) {
    free(in->k);
    free(in->v);
    free(in->q);
}

/* Writes the rows and runs attention for every token: sequence 0 alone, or (batched)
 * with the second sequence's tokens interleaved into the same step. out (tokens of
 * sequence 0, H*DH) in sequence 0's order either way. */
static void run(dev_backend *dev, sp_kv_type type, const inputs *in, bool batched, float *out, dev_kv **kv_out) {
    dev_kv_shape shape = shape_of(type);
    dev_kv *kv;
    cr_assert_eq(dev_kv_create(dev, &shape, &kv), SP_OK, "%s", sp_last_error());
    enum { T_MAX = P + 5, MAXB = 10 };
    int32_t tokens[T_MAX] = {0}, pos[T_MAX], seq[T_MAX], row_of[T_MAX], seq_len[2] = {P, 5};
    int32_t table[2 * MAXB];
    for (int i = 0; i < MAXB; i++) table[i] = i;
    table[MAXB] = 10;
    table[MAXB + 1] = 11;
    for (int i = 2; i < MAXB; i++) table[MAXB + i] = 11;
    int n = 0;
    for (int j = 0; j < P; j++) {
        if (batched && j % 8 == 3 && j / 8 < 5) { /* a token of the second sequence first */
            pos[n] = j / 8;
            seq[n] = 1;
            row_of[n++] = P + j / 8;
        }
        pos[n] = j;
        seq[n] = 0;
        row_of[n++] = j;
    }
    float *k = malloc(sizeof(float) * (size_t)n * HK * DH), *v = malloc(sizeof(float) * (size_t)n * HK * DH);
    float *q = malloc(sizeof(float) * (size_t)n * H * DH), *o = malloc(sizeof(float) * (size_t)n * H * DH);
    for (int t = 0; t < n; t++) {
        memcpy(k + (size_t)t * HK * DH, in->k + (size_t)row_of[t] * HK * DH, sizeof(float) * HK * DH);
        memcpy(v + (size_t)t * HK * DH, in->v + (size_t)row_of[t] * HK * DH, sizeof(float) * HK * DH);
        memcpy(q + (size_t)t * H * DH, in->q + (size_t)row_of[t] * H * DH, sizeof(float) * H * DH);
    }
    dev_step step = {.n_tokens = n,
                     .tokens = tokens,
                     .pos = pos,
                     .seq = seq,
                     .n_seqs = batched ? 2 : 1,
                     .seq_len = seq_len,
                     .block_table = table,
                     .max_blocks = MAXB};
    const dev_step *ds;
    cr_assert_eq(dev_step_begin(dev, &step, 1, kv, &ds), SP_OK, "%s", sp_last_error());
    dev_kv_write(dev, kv, 0, k, v, ds);
    dev_attention(dev, o, q, kv, 0, ds, H, 1.0f / sqrtf((float)DH));
    cr_assert_eq(dev_synchronize(dev), SP_OK);
    for (int t = 0; t < n; t++)
        if (seq[t] == 0) memcpy(out + (size_t)pos[t] * H * DH, o + (size_t)t * H * DH, sizeof(float) * H * DH);
    free(k);
    free(v);
    free(q);
    free(o);
    *kv_out = kv;
}

/* K and V of sequence 0 as the pool holds them, dequantized: (P, HK*DH) each. */
static void pool_rows(dev_backend *dev, dev_kv *kv, sp_kv_type type, float *k, float *v) {
    dev_kv_shape shape = shape_of(type);
    size_t block_bytes = dev_kv_block_bytes(&shape), row_bytes = dev_kv_row_bytes(&shape);
    uint8_t *bytes = malloc(block_bytes);
    for (int32_t b = 0; b * B < P; b++) {
        cr_assert_eq(dev_kv_blocks_save(dev, kv, &b, 1, bytes), SP_OK);
        for (int o = 0; o < B && b * B + o < P; o++)
            for (int h = 0; h < HK; h++) {
                size_t at = ((size_t)o * HK + (size_t)h) * row_bytes; /* K rows, then (B*HK rows on) V rows */
                float *kd = k + ((size_t)(b * B + o) * HK + (size_t)h) * DH;
                float *vd = v + ((size_t)(b * B + o) * HK + (size_t)h) * DH;
                quant_dequantize_row(dev_kv_quant_type(type), kd, bytes + at, DH);
                quant_dequantize_row(dev_kv_quant_type(type), vd, bytes + (size_t)B * HK * row_bytes + at, DH);
            }
    }
    free(bytes);
}

/* Causal attention in double over k, v (P, HK*DH) for q (P, H*DH). */
static void reference(float *out, const float *k, const float *v, const float *q) {
    const double scale = 1.0 / sqrt((double)DH);
    double score[P];
    for (int t = 0; t < P; t++)
        for (int h = 0; h < H; h++) {
            const int kvh = h / (H / HK);
            const float *qt = q + ((size_t)t * H + (size_t)h) * DH;
            double max = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) {
                double s = 0;
                for (int d = 0; d < DH; d++) s += (double)qt[d] * k[((size_t)j * HK + (size_t)kvh) * DH + (size_t)d];
                score[j] = s * scale;
                max = score[j] > max ? score[j] : max;
            }
            for (int j = 0; j <= t; j++) sum += score[j] = exp(score[j] - max);
            for (int d = 0; d < DH; d++) {
                double acc = 0;
                for (int j = 0; j <= t; j++) acc += score[j] * v[((size_t)j * HK + (size_t)kvh) * DH + (size_t)d];
                out[((size_t)t * H + (size_t)h) * DH + (size_t)d] = (float)(acc / sum);
            }
        }
}

Test(kv_quant, bytes_per_row_and_block) {
    dev_kv_shape f16 = shape_of(SP_KV_F16), q8 = shape_of(SP_KV_Q8_0), q4 = shape_of(SP_KV_Q4_0);
    cr_assert_eq(dev_kv_row_bytes(&f16), (size_t)DH * 2);
    cr_assert_eq(dev_kv_row_bytes(&q8), (size_t)DH / 32 * 34, "Q8_0: an F16 scale and 32 int8 per 32");
    cr_assert_eq(dev_kv_row_bytes(&q4), (size_t)DH / 32 * 18, "Q4_0: an F16 scale and 16 bytes of nibbles per 32");
    cr_assert_eq(dev_kv_block_bytes(&q8), (size_t)LAYERS * 2 * B * HK * DH / 32 * 34);
    cr_assert_eq(dev_kv_bytes(&q4), (size_t)BLOCKS * dev_kv_block_bytes(&q4));
    sp_kv_type t;
    cr_assert_eq(sp_kv_type_parse("q8_0", &t), SP_OK);
    cr_assert_eq(t, SP_KV_Q8_0);
    cr_assert_str_eq(sp_kv_type_name(SP_KV_Q4_0), "q4_0");
    cr_assert_eq(sp_kv_type_parse("q5_0", &t), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "q5_0") && strstr(sp_last_error(), "f16, q8_0 or q4_0"), "%s", sp_last_error());
}

Test(kv_quant, head_width_the_blocks_do_not_divide_is_refused) {
    dev_backend *dev = cpu_backend(SP_CPU_ISA_AUTO);
    dev_kv_shape shape = shape_of(SP_KV_Q8_0);
    shape.head_dim = 48;
    dev_kv *kv = NULL;
    cr_assert_eq(dev_kv_create(dev, &shape, &kv), SP_ERR_UNSUPPORTED);
    cr_assert(strstr(sp_last_error(), "q8_0") && strstr(sp_last_error(), "multiple of 32") &&
                  strstr(sp_last_error(), "48"),
              "%s", sp_last_error());
    cr_assert_null(kv);
    dev_destroy(dev);
}

Test(kv_quant, written_rows_are_ggml_quantization) {
    inputs in = make_inputs();
    const sp_kv_type types[] = {SP_KV_Q8_0, SP_KV_Q4_0};
    for (size_t ti = 0; ti < 2; ti++) {
        dev_backend *dev = cpu_backend(SP_CPU_ISA_AUTO);
        dev_kv *kv;
        float *out = malloc(sizeof(float) * P * H * DH);
        run(dev, types[ti], &in, false, out, &kv);
        float *k = malloc(sizeof(float) * P * HK * DH), *v = malloc(sizeof(float) * P * HK * DH);
        pool_rows(dev, kv, types[ti], k, v);
        /* each row equals quant_quantize_row's blocks of it, dequantized */
        uint8_t blocks[DH / 32 * 34];
        float want[DH];
        for (int r = 0; r < P * HK; r++) {
            quant_quantize_row(dev_kv_quant_type(types[ti]), blocks, in.k + (size_t)r * DH, DH);
            quant_dequantize_row(dev_kv_quant_type(types[ti]), want, blocks, DH);
            cr_assert(memcmp(want, k + (size_t)r * DH, sizeof want) == 0, "%s K row %d", sp_kv_type_name(types[ti]), r);
            quant_quantize_row(dev_kv_quant_type(types[ti]), blocks, in.v + (size_t)r * DH, DH);
            quant_dequantize_row(dev_kv_quant_type(types[ti]), want, blocks, DH);
            cr_assert(memcmp(want, v + (size_t)r * DH, sizeof want) == 0, "%s V row %d", sp_kv_type_name(types[ti]), r);
        }
        free(k);
        free(v);
        free(out);
        dev_kv_destroy(dev, kv);
        dev_destroy(dev);
    }
    free_inputs(&in);
}

/* Sequence 0's P rows of k and v (P, HK*DH, F16-exact: the CUDA backend keeps an F32
 * table of more than one row as F16, so only such values reach both pools alike) written by the
 * backend of this kind through the device path (a weight table, dev_embed, dev_kv_write),
 * then its full blocks saved as the tiers keep them: (P / B) * dev_kv_block_bytes. */
static uint8_t *written_blocks(sp_device kind, sp_kv_type type, const float *k, const float *v) {
    dev_backend *dev;
    dev_options opts = {.kind = kind, .n_threads = 2};
    cr_assert_eq(dev_create(&opts, &dev), SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_reserve(dev, P, HK * DH), SP_OK, "%s", sp_last_error());
    dev_kv_shape shape = shape_of(type);
    dev_kv *kv;
    cr_assert_eq(dev_kv_create(dev, &shape, &kv), SP_OK, "%s", sp_last_error());
    dev_tensor tk, tv;
    const size_t table_bytes = sizeof(float) * P * HK * DH;
    cr_assert_eq(dev_weight_init(dev, &tk, QUANT_F32, HK * DH, P, k, table_bytes), SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_weight_init(dev, &tv, QUANT_F32, HK * DH, P, v, table_bytes), SP_OK, "%s", sp_last_error());
    void *ak, *av;
    cr_assert_eq(dev_arena_alloc(dev, table_bytes, &ak), SP_OK);
    cr_assert_eq(dev_arena_alloc(dev, table_bytes, &av), SP_OK);
    enum { MAXB = 10 };
    int32_t tokens[P], pos[P], seq[P], seq_len = P, table[MAXB];
    for (int j = 0; j < P; j++) tokens[j] = pos[j] = j, seq[j] = 0;
    for (int b = 0; b < MAXB; b++) table[b] = b;
    dev_step step = {.n_tokens = P,
                     .tokens = tokens,
                     .pos = pos,
                     .seq = seq,
                     .n_seqs = 1,
                     .seq_len = &seq_len,
                     .block_table = table,
                     .max_blocks = MAXB};
    const dev_step *ds;
    cr_assert_eq(dev_step_begin(dev, &step, P, kv, &ds), SP_OK, "%s", sp_last_error());
    dev_embed(dev, ak, &tk, ds);
    dev_embed(dev, av, &tv, ds);
    dev_kv_write(dev, kv, 0, ak, av, ds);
    int32_t ids[P / B];
    for (int b = 0; b < P / B; b++) ids[b] = b;
    uint8_t *bytes = malloc((size_t)(P / B) * dev_kv_block_bytes(&shape));
    cr_assert_not_null(bytes);
    cr_assert_eq(dev_kv_blocks_save(dev, kv, ids, P / B, bytes), SP_OK, "%s", sp_last_error());
    dev_kv_destroy(dev, kv);
    dev_destroy(dev);
    return bytes;
}

/* Rows with a magnitude per 32 values from 1e-3 to 1e3 and some all-zero blocks, so the
 * scales and the rounding of every format are exercised; each value F16-exact (see
 * written_blocks), which still leaves Q8_0's and Q4_0's rounding of x * 127 / amax (or
 * x / d) to the kernels. */
static float *awkward_rows(void) {
    float *x = malloc(sizeof(float) * P * HK * DH);
    cr_assert_not_null(x);
    for (int i = 0; i < P * HK * DH; i += 32) {
        const float scale = (gpu_test_next() % 7 == 0) ? 0.0f : powf(10.0f, 3.0f * uniform());
        for (int j = i; j < i + 32; j++) x[j] = quant_f16_to_f32(quant_f32_to_f16(scale * uniform()));
    }
    return x;
}

/* Every saved row equals ggml's blocks of it (F16: the F16 rounding of each value). */
static void check_ggml_bytes(sp_kv_type type, const uint8_t *bytes, const float *k, const float *v,
                             const char *backend) {
    dev_kv_shape shape = shape_of(type);
    const size_t row_bytes = dev_kv_row_bytes(&shape), block_bytes = dev_kv_block_bytes(&shape);
    uint8_t want[DH * 2];
    for (int j = 0; j < P / B * B; j++)
        for (int h = 0; h < HK; h++)
            for (int kv_i = 0; kv_i < 2; kv_i++) {
                const float *src = (kv_i ? v : k) + ((size_t)j * HK + (size_t)h) * DH;
                if (type == SP_KV_F16)
                    for (int d = 0; d < DH; d++) {
                        uint16_t h16 = quant_f32_to_f16(src[d]);
                        memcpy(want + 2 * d, &h16, 2);
                    }
                else
                    quant_quantize_row(dev_kv_quant_type(type), want, src, DH);
                const size_t at = (size_t)(j / B) * block_bytes + (size_t)kv_i * B * HK * row_bytes +
                                  ((size_t)(j % B) * HK + (size_t)h) * row_bytes;
                cr_assert(memcmp(bytes + at, want, row_bytes) == 0, "%s %s: %s row of position %d, head %d", backend,
                          sp_kv_type_name(type), kv_i ? "V" : "K", j, h);
            }
}

Test(kv_quant, cpu_pool_bytes_are_ggml_blocks) {
    gpu_test_rng = 0x6279;
    float *k = awkward_rows(), *v = awkward_rows();
    for (sp_kv_type type = SP_KV_F16; type <= SP_KV_Q4_0; type++) {
        uint8_t *bytes = written_blocks(SP_DEVICE_CPU, type, k, v);
        check_ggml_bytes(type, bytes, k, v, "cpu");
        free(bytes);
    }
    free(k);
    free(v);
}

/* Tier files move between backends: the CUDA write must produce the CPU's bytes. */
Test(kv_quant, cuda_pool_bytes_equal_the_cpu_pool_and_ggml) {
    skip_without_gpu();
    gpu_test_rng = 0x6279;
    float *k = awkward_rows(), *v = awkward_rows();
    for (sp_kv_type type = SP_KV_F16; type <= SP_KV_Q4_0; type++) {
        dev_kv_shape shape = shape_of(type);
        uint8_t *cuda = written_blocks(SP_DEVICE_CUDA, type, k, v), *cpu = written_blocks(SP_DEVICE_CPU, type, k, v);
        check_ggml_bytes(type, cuda, k, v, "cuda");
        cr_assert(memcmp(cuda, cpu, (size_t)(P / B) * dev_kv_block_bytes(&shape)) == 0,
                  "%s: cuda and cpu blocks differ", sp_kv_type_name(type));
        free(cuda);
        free(cpu);
    }
    free(k);
    free(v);
}

Test(kv_quant, attention_equals_the_double_reference_over_the_pool) {
    inputs in = make_inputs();
    const sp_kv_type types[] = {SP_KV_F16, SP_KV_Q8_0, SP_KV_Q4_0};
    /* errors against the pool's own rows: the query's rounding (F16, or Q8_0) and the
     * probabilities' F16; against the unquantized rows, the pool's rounding too */
    const double own_bound[] = {1e-3, 5e-3, 5e-3};
    const double exact_bound[] = {1e-3, 1e-2, 1.2e-1};
    for (size_t ti = 0; ti < 3; ti++) {
        dev_backend *dev = cpu_backend(SP_CPU_ISA_AUTO);
        dev_kv *kv;
        float *out = malloc(sizeof(float) * P * H * DH), *ref = malloc(sizeof(float) * P * H * DH);
        run(dev, types[ti], &in, false, out, &kv);
        float *k = malloc(sizeof(float) * P * HK * DH), *v = malloc(sizeof(float) * P * HK * DH);
        pool_rows(dev, kv, types[ti], k, v);
        reference(ref, k, v, in.q);
        double own = rel_error(out, ref, P * H * DH);
        reference(ref, in.k, in.v, in.q);
        double exact = rel_error(out, ref, P * H * DH);
        cr_log_info("kv %s: relative error %.2e against its rows, %.2e against the unquantized rows",
                    sp_kv_type_name(types[ti]), own, exact);
        cr_assert_lt(own, own_bound[ti], "%s: %.3e", sp_kv_type_name(types[ti]), own);
        cr_assert_lt(exact, exact_bound[ti], "%s: %.3e", sp_kv_type_name(types[ti]), exact);
        free(k);
        free(v);
        free(out);
        free(ref);
        dev_kv_destroy(dev, kv);
        dev_destroy(dev);
    }
    free_inputs(&in);
}

/* The result of every kernel set this CPU runs, for one type. */
Test(kv_quant, avx2_avx512_amx_bits_and_batch_invariance) {
    inputs in = make_inputs();
    const sp_kv_type types[] = {SP_KV_Q8_0, SP_KV_Q4_0};
    const sp_cpu_isa isas[] = {SP_CPU_ISA_AVX2, SP_CPU_ISA_AVX512, SP_CPU_ISA_AMX};
    int ran = 0;
    for (size_t ti = 0; ti < 2; ti++) {
        float *first = NULL;
        for (size_t ii = 0; ii < 3; ii++) {
            if (dev_cpu_isa_check(isas[ii]) != SP_OK) continue;
            dev_backend *dev = cpu_backend(isas[ii]);
            dev_kv *kv;
            float *alone = malloc(sizeof(float) * P * H * DH), *batched = malloc(sizeof(float) * P * H * DH);
            run(dev, types[ti], &in, false, alone, &kv);
            dev_kv_destroy(dev, kv);
            run(dev, types[ti], &in, true, batched, &kv);
            dev_kv_destroy(dev, kv);
            cr_assert(memcmp(alone, batched, sizeof(float) * P * H * DH) == 0, "%s on %s: batch changed a result",
                      sp_kv_type_name(types[ti]), sp_cpu_isa_name(isas[ii]));
            if (!first)
                first = alone;
            else {
                cr_assert(memcmp(first, alone, sizeof(float) * P * H * DH) == 0, "%s: %s differs from avx2",
                          sp_kv_type_name(types[ti]), sp_cpu_isa_name(isas[ii]));
                free(alone);
            }
            free(batched);
            dev_destroy(dev);
            ran++;
        }
        free(first);
    }
    free_inputs(&in);
    if (ran == 0) cr_skip_test("this CPU runs none of avx2, avx512, amx");
}

Test(kv_quant, generic_set_within_float_tolerance) {
    inputs in = make_inputs();
    if (dev_cpu_isa_check(SP_CPU_ISA_AVX2) != SP_OK) cr_skip_test("no avx2 set to compare the generic one with");
    for (sp_kv_type type = SP_KV_Q8_0; type <= SP_KV_Q4_0; type++) {
        float *a = malloc(sizeof(float) * P * H * DH), *g = malloc(sizeof(float) * P * H * DH);
        dev_kv *kv;
        dev_backend *dev = cpu_backend(SP_CPU_ISA_AVX2);
        run(dev, type, &in, false, a, &kv);
        dev_kv_destroy(dev, kv);
        dev_destroy(dev);
        dev = cpu_backend(SP_CPU_ISA_GENERIC);
        run(dev, type, &in, false, g, &kv);
        dev_kv_destroy(dev, kv);
        dev_destroy(dev);
        double err = rel_error(g, a, P * H * DH);
        cr_assert_lt(err, 1e-5, "%s generic vs avx2: %.3e", sp_kv_type_name(type), err);
        free(a);
        free(g);
    }
    free_inputs(&in);
}

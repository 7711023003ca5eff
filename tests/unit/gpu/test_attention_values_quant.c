/* test_attention_values_quant.c: the weighted sum of quantized V rows
 * (host__attention_values_quant) gives the same bits with the SIMD path and without,
 * for Q8_0 and Q4_0 pools, every head count (the SIMD path takes up to 3 heads a pass),
 * partial last blocks and scattered block tables; and a head's result does not depend
 * on how many heads share the call. test_kv_quant.c checks the whole attention against
 * a double reference; this pins the values step to the bit. */
#include <string.h>

#include "gpu/host/host_internal.h"
#include "tests/unit/gpu/gpu_test.h"

enum { BLOCK = 16, KV_HEADS = 2, HEAD_DIM = 128, N_BLOCKS = 9, MAX_HEADS = 7 };

/* A one-layer pool of the type whose V rows are random values quantized as the
 * backend writes them. */
static host_kv make_pool(sp_kv_type type) {
    host_kv kv = {.common.shape = {.n_layers = 1,
                                   .n_blocks = N_BLOCKS,
                                   .block_size = BLOCK,
                                   .n_kv_heads = KV_HEADS,
                                   .head_dim = HEAD_DIM,
                                   .kv_type = type}};
    kv.row_bytes = dev_kv_row_bytes(&kv.common.shape);
    kv.block_bytes = (size_t)BLOCK * KV_HEADS * kv.row_bytes;
    kv.pool_bytes = (size_t)N_BLOCKS * kv.block_bytes;
    kv.layer_bytes = 2 * kv.pool_bytes;
    kv.data = malloc(kv.pool_bytes);
    cr_assert_not_null(kv.data);
    float row[HEAD_DIM];
    for (size_t r = 0; r < (size_t)N_BLOCKS * BLOCK * KV_HEADS; r++) {
        float scale = 0.05f + 3.0f * (uniform() + 1.0f);
        for (int i = 0; i < HEAD_DIM; i++) row[i] = scale * uniform();
        host__kv_quantize_row(type, SP_CPU_ISA_GENERIC, kv.data + r * kv.row_bytes, row, HEAD_DIM);
    }
    return kv;
}

/* Probabilities as the attention keeps them (F16), one list per head. */
static uint16_t *make_probs(int n_pos) {
    uint16_t *p = malloc(sizeof *p * (size_t)MAX_HEADS * (size_t)n_pos);
    cr_assert_not_null(p);
    for (int i = 0; i < MAX_HEADS * n_pos; i++) p[i] = quant_f32_to_f16(0.5f * (uniform() + 1.0f) / (float)n_pos);
    return p;
}

static void values(const host_kv *kv, const int32_t *blocks, int n_pos, const uint16_t *probs, int first_head, int nh,
                   int64_t kv_head, bool simd, float *out /* (nh, HEAD_DIM) */) {
    float *o[MAX_HEADS];
    const uint16_t *p16[MAX_HEADS];
    for (int h = 0; h < nh; h++) {
        o[h] = out + (size_t)h * HEAD_DIM;
        p16[h] = probs + (size_t)(first_head + h) * (size_t)n_pos;
    }
    host__attention_values_quant(o, p16, nh, kv, kv->data, blocks, n_pos, kv_head, simd);
}

Test(attention_values_quant, simd_and_portable_paths_give_the_same_bits) {
#if !HOST_SIMD_AVX2
    cr_skip_test("this build has no SIMD path");
#else
    if (dev_cpu_isa_check(SP_CPU_ISA_AVX2) != SP_OK) cr_skip_test("this CPU has no AVX2");
    static const int32_t blocks[] = {7, 2, 5, 0, 8, 1, 4, 3, 6};
    static const int n_pos_cases[] = {1, 15, 16, 17, 77, N_BLOCKS * BLOCK};
    int checked = 0;
    for (sp_kv_type type = SP_KV_Q8_0; type <= SP_KV_Q4_0; type++) {
        host_kv kv = make_pool(type);
        for (size_t c = 0; c < sizeof n_pos_cases / sizeof *n_pos_cases; c++) {
            const int n_pos = n_pos_cases[c];
            uint16_t *probs = make_probs(n_pos);
            for (int nh = 1; nh <= MAX_HEADS; nh++)
                for (int64_t kv_head = 0; kv_head < KV_HEADS; kv_head++) {
                    float simd[MAX_HEADS * HEAD_DIM], portable[MAX_HEADS * HEAD_DIM];
                    values(&kv, blocks, n_pos, probs, 0, nh, kv_head, true, simd);
                    values(&kv, blocks, n_pos, probs, 0, nh, kv_head, false, portable);
                    cr_assert_eq(memcmp(simd, portable, sizeof(float) * (size_t)nh * HEAD_DIM), 0,
                                 "%s, %d positions, %d heads, kv head %ld: the SIMD path's bits differ",
                                 sp_kv_type_name(type), n_pos, nh, (long)kv_head);
                    checked++;
                }
            free(probs);
        }
        free(kv.data);
    }
    cr_assert_eq(checked, 2 * 6 * MAX_HEADS * KV_HEADS);
#endif
}

Test(attention_values_quant, a_head_does_not_depend_on_the_heads_beside_it) {
    static const int32_t blocks[] = {3, 8, 0, 6, 1, 7, 2, 5, 4};
    const int n_pos = 101;
    for (sp_kv_type type = SP_KV_Q8_0; type <= SP_KV_Q4_0; type++) {
        host_kv kv = make_pool(type);
        uint16_t *probs = make_probs(n_pos);
        /* the SIMD path only where this build has it and this CPU runs it */
        const int last = HOST_SIMD_AVX2 && dev_cpu_isa_check(SP_CPU_ISA_AVX2) == SP_OK ? 1 : 0;
        for (int simd = 0; simd <= last; simd++) {
            float all[MAX_HEADS * HEAD_DIM];
            values(&kv, blocks, n_pos, probs, 0, MAX_HEADS, 1, simd, all);
            for (int h = 0; h < MAX_HEADS; h++) {
                float one[HEAD_DIM];
                values(&kv, blocks, n_pos, probs, h, 1, 1, simd, one);
                cr_assert_eq(memcmp(one, all + (size_t)h * HEAD_DIM, sizeof one), 0,
                             "%s, simd %d: head %d alone differs from head %d of %d", sp_kv_type_name(type), simd, h, h,
                             MAX_HEADS);
            }
            /* and the sum is not trivially zero */
            float norm = 0;
            for (int i = 0; i < MAX_HEADS * HEAD_DIM; i++) norm += all[i] * all[i];
            cr_assert_gt(norm, 1e-3f);
        }
        free(probs);
        free(kv.data);
    }
}

/* test_kv_copy.c: dev_kv_blocks_save and dev_kv_blocks_load, the KV tiers' way in and
 * out of a pool: bytes come back as they went in, for any order of block ids, and a
 * block's load leaves the other blocks alone. On the CPU backend and, where a GPU is
 * usable, the CUDA backend (skipped otherwise). */
#include <string.h>

#include "tests/unit/gpu/gpu_test.h"

static void check_round_trip(dev_backend *dev) {
    dev_kv_shape shape = {.n_layers = 3, .n_blocks = 7, .block_size = 4, .n_kv_heads = 2, .head_dim = 8};
    dev_kv *kv;
    cr_assert_eq(dev_kv_create(dev, &shape, &kv), SP_OK, "%s", sp_last_error());
    size_t bytes = dev_kv_block_bytes(&shape);
    cr_assert_eq(bytes, (size_t)3 * 2 * 4 * 2 * 8 * 2, "layers x K,V x B x Hk x Dh x F16");
    enum { N = 3 };
    int32_t ids[N] = {5, 0, 3};
    uint8_t *in = malloc(N * bytes), *out = malloc(N * bytes), *other = malloc(bytes), *other_after = malloc(bytes);
    for (size_t i = 0; i < N * bytes; i++) in[i] = (uint8_t)(gpu_test_next() >> 56);
    for (size_t i = 0; i < bytes; i++) other[i] = (uint8_t)(i * 13 + 1);
    int32_t other_id = 4;
    cr_assert_eq(dev_kv_blocks_load(dev, kv, &other_id, 1, other), SP_OK);
    cr_assert_eq(dev_kv_blocks_load(dev, kv, ids, N, in), SP_OK, "%s", sp_last_error());
    cr_assert_eq(dev_kv_blocks_save(dev, kv, ids, N, out), SP_OK, "%s", sp_last_error());
    cr_assert(memcmp(in, out, N * bytes) == 0, "blocks come back byte for byte");
    int32_t reversed[N] = {3, 0, 5};
    cr_assert_eq(dev_kv_blocks_save(dev, kv, reversed, N, out), SP_OK);
    for (int i = 0; i < N; i++)
        cr_assert(memcmp(out + (size_t)i * bytes, in + (size_t)(N - 1 - i) * bytes, bytes) == 0,
                  "block %d in the order asked for", reversed[i]);
    cr_assert_eq(dev_kv_blocks_save(dev, kv, &other_id, 1, other_after), SP_OK);
    cr_assert(memcmp(other, other_after, bytes) == 0, "the loads left block 4 alone");
    free(in);
    free(out);
    free(other);
    free(other_after);
    dev_kv_destroy(dev, kv);
}

Test(kv_copy, cpu_round_trip) {
    dev_backend *dev;
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = 1};
    cr_assert_eq(dev_create(&opts, &dev), SP_OK);
    check_round_trip(dev);
    dev_destroy(dev);
}

Test(kv_copy, cuda_round_trip) {
    skip_without_gpu();
    dev_backend *dev;
    dev_options opts = {.kind = SP_DEVICE_CUDA};
    cr_assert_eq(dev_create(&opts, &dev), SP_OK, "%s", sp_last_error());
    check_round_trip(dev);
    dev_destroy(dev);
}

/* device_internal.h: what a backend provides (a table of functions) and the parts of
 * dev_backend every backend shares. Only gpu/ includes this. */
#ifndef SP_DEVICE_INTERNAL_H
#define SP_DEVICE_INTERNAL_H

#include "gpu/device.h"

typedef struct dev_backend_ops {
    const char *(*name)(const dev_backend *dev);
    void (*destroy)(dev_backend *dev);
    sp_status (*weight_init)(dev_backend *dev, dev_tensor *out, const void *host_data, size_t nbytes);
    sp_status (*arena_alloc)(dev_backend *dev, size_t nbytes, void **out);
    sp_status (*reserve)(dev_backend *dev, int64_t max_tokens, int64_t max_width);
    sp_status (*kv_create)(dev_backend *dev, const dev_kv_shape *shape, dev_kv **out);
    void (*kv_destroy)(dev_backend *dev, dev_kv *kv);
    /* copies every layer's K and V of n blocks to or from host, in dev_kv_blocks_save's layout */
    sp_status (*kv_save)(dev_backend *dev, const dev_kv *kv, const int32_t *ids, int32_t n, void *host);
    sp_status (*kv_load)(dev_backend *dev, dev_kv *kv, const int32_t *ids, int32_t n, const void *host);
    /* kv: the pool the step's block ids index */
    sp_status (*step_upload)(dev_backend *dev, const dev_step *host, const dev_kv *kv, const dev_step **device_step);
    void (*embed)(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step);
    void (*rmsnorm)(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                    int64_t dim);
    void (*add_rmsnorm)(dev_backend *dev, float *out, float *x, const float *delta, const dev_tensor *w, float eps,
                        int64_t rows, int64_t dim);
    void (*matmul_group)(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows);
    void (*rope_apply)(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                       int64_t head_dim);
    void (*kv_write)(dev_backend *dev, dev_kv *kv, int layer, const float *k, const float *v, const dev_step *step);
    /* NULL: dev_rope_kv_write runs rope_apply twice and kv_write */
    void (*rope_kv_write)(dev_backend *dev, dev_kv *kv, int layer, float *q, float *k, const float *v,
                          const dev_step *step, const dev_rope *rope, int64_t n_heads);
    void (*attention)(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer, const dev_step *step,
                      int64_t n_heads, float scale);
    void (*swiglu)(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n);
    void (*add)(dev_backend *dev, float *out, const float *a, const float *b, int64_t n);
    void (*gather_rows)(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows,
                        int64_t dim);
    sp_status (*record)(dev_backend *dev, const dev_step *step, dev_record_fn fn, const void *ctx, size_t ctx_bytes);
    sp_status (*sample)(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                        const dev_sample_row *rows, dev_sample_result *results);
    sp_status (*copy_to_host)(dev_backend *dev, void *host, const void *device, size_t nbytes);
    /* waits for queued ops; NULL for backends whose ops complete before they return (the CPU) */
    sp_status (*synchronize)(dev_backend *dev);
    /* free and total device memory; NULL for backends without their own (the CPU) */
    sp_status (*memory_info)(dev_backend *dev, size_t *free_bytes, size_t *total_bytes);
} dev_backend_ops;

/* Every backend struct starts with this. */
struct dev_backend {
    const dev_backend_ops *ops;
    int n_threads;
    sp_cpu_isa cpu_isa; /* the CPU backend's kernel set; AUTO on a GPU backend */
};

/* The KV pool description every backend's dev_kv starts with. */
typedef struct dev_kv_common {
    dev_kv_shape shape;
} dev_kv_common;

/* Backends' constructors. */
sp_status host_backend_create(const dev_options *opts, dev_backend **out);

#endif

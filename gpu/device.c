/* device.c: backend selection, step validation, and dispatch of the ops to the
 * backend's function table. */
#include "gpu/device.h"

#include <stdint.h>

#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "common/log.h"
#include "gpu/device_internal.h"
#ifdef SP_HAVE_CUDA
#include "gpu/cuda/cuda_backend.h"
#endif

bool dev_cuda_available(char *why, size_t cap) {
#ifdef SP_HAVE_CUDA
    return cuda_backend_probe(why, cap);
#else
    snprintf(why, cap, "this build has no CUDA backend (nvcc was not found when it was built)");
    return false;
#endif
}

sp_status dev_create(const dev_options *opts, dev_backend **out) {
    char why[256];
    switch (opts->kind) {
    case SP_DEVICE_CPU: return host_backend_create(opts, out);
    case SP_DEVICE_CUDA:
#ifdef SP_HAVE_CUDA
        return cuda_backend_create(opts, out);
#else
        dev_cuda_available(why, sizeof why);
        return sp_fail(SP_ERR_UNSUPPORTED, "device cuda: %s", why);
#endif
    case SP_DEVICE_AUTO:
        if (dev_cuda_available(why, sizeof why)) {
#ifdef SP_HAVE_CUDA
            if (cuda_backend_create(opts, out) == SP_OK) return SP_OK;
            snprintf(why, sizeof why, "%s", sp_last_error());
#endif
        }
        sp_log_info("device auto: no usable CUDA GPU (%s); running on the CPU", why);
        return host_backend_create(opts, out);
    }
    return sp_fail(SP_ERR_INVALID_ARG, "device kind %d unknown", (int)opts->kind);
}

void dev_destroy(dev_backend *dev) {
    if (dev) dev->ops->destroy(dev);
}

const char *dev_name(const dev_backend *dev) {
    return dev->ops->name(dev);
}

int dev_threads(const dev_backend *dev) {
    return dev->n_threads;
}

sp_cpu_isa dev_cpu_kernels(const dev_backend *dev) {
    return dev->cpu_isa;
}

sp_status dev_weight_init(dev_backend *dev, dev_tensor *out, quant_type type, int64_t ne0, int64_t ne1,
                          const void *host_data, size_t nbytes) {
    if (!quant_type_supported(type)) return sp_fail(SP_ERR_UNSUPPORTED, "tensor type %s", quant_type_name(type));
    if (ne0 <= 0 || ne1 <= 0 || !quant_row_valid(type, ne0))
        return sp_fail(SP_ERR_INVALID_ARG, "tensor shape [%lld, %lld] invalid for type %s", (long long)ne0,
                       (long long)ne1, quant_type_name(type));
    size_t row = quant_row_bytes(type, ne0);
    size_t want;
    if (__builtin_mul_overflow(row, (size_t)ne1, &want) || want != nbytes)
        return sp_fail(SP_ERR_INVALID_ARG, "tensor of %zu bytes does not hold [%lld, %lld] %s", nbytes, (long long)ne0,
                       (long long)ne1, quant_type_name(type));
    out->type = type;
    out->ne0 = ne0;
    out->ne1 = ne1;
    out->nbytes = nbytes;
    out->data = NULL;
    return dev->ops->weight_init(dev, out, host_data, nbytes);
}

sp_status dev_arena_alloc(dev_backend *dev, size_t nbytes, void **out) {
    return dev->ops->arena_alloc(dev, nbytes, out);
}

sp_status dev_reserve(dev_backend *dev, int64_t max_tokens, int64_t max_width) {
    if (max_tokens <= 0 || max_width <= 0)
        return sp_fail(SP_ERR_INVALID_ARG, "reserve: max_tokens %lld and max_width %lld must be positive",
                       (long long)max_tokens, (long long)max_width);
    return dev->ops->reserve(dev, max_tokens, max_width);
}

quant_type dev_kv_quant_type(sp_kv_type type) {
    switch (type) {
    case SP_KV_Q8_0: return QUANT_Q8_0;
    case SP_KV_Q4_0: return QUANT_Q4_0;
    case SP_KV_F16: break;
    }
    return QUANT_F16;
}

size_t dev_kv_row_bytes(const dev_kv_shape *s) {
    return quant_row_bytes(dev_kv_quant_type(s->kv_type), s->head_dim);
}

size_t dev_kv_bytes(const dev_kv_shape *s) {
    /* K and V */
    return (size_t)2 * (size_t)s->n_layers * (size_t)s->n_blocks * (size_t)s->block_size * (size_t)s->n_kv_heads *
           dev_kv_row_bytes(s);
}

size_t dev_kv_block_bytes(const dev_kv_shape *s) {
    dev_kv_shape one = *s;
    one.n_blocks = 1;
    return dev_kv_bytes(&one);
}

/* Block ids in range of the pool; a programmer error otherwise. */
static void kv_check_ids(const dev_kv *kv, const int32_t *ids, int32_t n) {
    const dev_kv_common *c = (const dev_kv_common *)kv;
    for (int32_t i = 0; i < n; i++) SP_ASSERT(ids[i] >= 0 && ids[i] < c->shape.n_blocks);
}

sp_status dev_kv_blocks_save(dev_backend *dev, const dev_kv *kv, const int32_t *ids, int32_t n, void *host) {
    kv_check_ids(kv, ids, n);
    return n > 0 ? dev->ops->kv_save(dev, kv, ids, n, host) : SP_OK;
}

sp_status dev_kv_blocks_load(dev_backend *dev, dev_kv *kv, const int32_t *ids, int32_t n, const void *host) {
    kv_check_ids(kv, ids, n);
    return n > 0 ? dev->ops->kv_load(dev, kv, ids, n, host) : SP_OK;
}

sp_status dev_kv_shape_check(const dev_kv_shape *shape) {
    if (shape->n_layers <= 0 || shape->n_blocks <= 0 || shape->block_size <= 0 || shape->n_kv_heads <= 0 ||
        shape->head_dim <= 0)
        return sp_fail(SP_ERR_INVALID_ARG, "kv shape: every dimension must be positive");
    if ((unsigned)shape->kv_type >= SP_KV_TYPE_COUNT)
        return sp_fail(SP_ERR_INVALID_ARG, "kv shape: kv type %d unknown", (int)shape->kv_type);
    if (!quant_row_valid(dev_kv_quant_type(shape->kv_type), shape->head_dim))
        return sp_fail(
            SP_ERR_UNSUPPORTED, "kv type %s needs a head width that is a multiple of %zu; this model's is %d (use f16)",
            sp_kv_type_name(shape->kv_type), quant_block_size(dev_kv_quant_type(shape->kv_type)), shape->head_dim);
    return SP_OK;
}

sp_status dev_kv_create(dev_backend *dev, const dev_kv_shape *shape, dev_kv **out) {
    sp_status st = dev_kv_shape_check(shape);
    return st != SP_OK ? st : dev->ops->kv_create(dev, shape, out);
}

void dev_kv_destroy(dev_backend *dev, dev_kv *kv) {
    if (kv) dev->ops->kv_destroy(dev, kv);
}

sp_status dev_step_begin(dev_backend *dev, const dev_step *s, int32_t n_vocab, const dev_kv *kv,
                         const dev_step **device_step) {
    const dev_kv_shape *shape = &((const dev_kv_common *)kv)->shape;
    if (s->n_tokens <= 0) return sp_fail(SP_ERR_INVALID_ARG, "step: n_tokens %d must be positive", s->n_tokens);
    if (s->n_seqs <= 0 || s->max_blocks <= 0)
        return sp_fail(SP_ERR_INVALID_ARG, "step: n_seqs %d and max_blocks %d must be positive", s->n_seqs,
                       s->max_blocks);
    int64_t capacity = (int64_t)s->max_blocks * shape->block_size;
    for (int32_t t = 0; t < s->n_tokens; t++) {
        if (s->tokens[t] < 0 || s->tokens[t] >= n_vocab)
            return sp_fail(SP_ERR_INVALID_ARG, "step: tokens[%d] = %d outside the vocabulary (0..%d)", t, s->tokens[t],
                           n_vocab - 1);
        if (s->seq[t] < 0 || s->seq[t] >= s->n_seqs)
            return sp_fail(SP_ERR_INVALID_ARG, "step: seq[%d] = %d outside 0..%d", t, s->seq[t], s->n_seqs - 1);
        if (s->pos[t] < 0 || s->pos[t] >= s->seq_len[s->seq[t]] || s->pos[t] >= capacity)
            return sp_fail(SP_ERR_INVALID_ARG, "step: pos[%d] = %d outside its sequence's KV length %d", t, s->pos[t],
                           s->seq_len[s->seq[t]]);
    }
    for (int32_t q = 0; q < s->n_seqs; q++) {
        if (s->seq_len[q] < 0 || s->seq_len[q] > capacity)
            return sp_fail(SP_ERR_INVALID_ARG, "step: seq_len[%d] = %d exceeds its block table (%lld tokens)", q,
                           s->seq_len[q], (long long)capacity);
        int32_t used_blocks = (s->seq_len[q] + shape->block_size - 1) / shape->block_size;
        for (int32_t b = 0; b < used_blocks; b++) {
            int32_t id = s->block_table[(int64_t)q * s->max_blocks + b];
            if (id < 0 || id >= shape->n_blocks)
                return sp_fail(SP_ERR_INVALID_ARG, "step: block_table[%d][%d] = %d outside the pool (0..%d)", q, b, id,
                               shape->n_blocks - 1);
        }
    }
    for (int32_t i = 0; i < s->n_logits; i++) {
        if (s->logit_rows[i] < 0 || s->logit_rows[i] >= s->n_tokens ||
            (i > 0 && s->logit_rows[i] <= s->logit_rows[i - 1]))
            return sp_fail(SP_ERR_INVALID_ARG, "step: logit_rows[%d] = %d not ascending within 0..%d", i,
                           s->logit_rows[i], s->n_tokens - 1);
    }
    if (s->n_hidden < 0 || s->n_hidden > s->n_tokens)
        return sp_fail(SP_ERR_INVALID_ARG, "step: n_hidden %d outside 0..%d", s->n_hidden, s->n_tokens);
    for (int32_t i = 0; i < s->n_hidden; i++) {
        if (s->hidden_rows[i] < 0 || s->hidden_rows[i] >= s->n_tokens ||
            (i > 0 && s->hidden_rows[i] <= s->hidden_rows[i - 1]))
            return sp_fail(SP_ERR_INVALID_ARG, "step: hidden_rows[%d] = %d not ascending within 0..%d", i,
                           s->hidden_rows[i], s->n_tokens - 1);
    }
    return dev->ops->step_upload(dev, s, kv, device_step);
}

void dev_embed(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step) {
    dev->ops->embed(dev, x, emb, step);
}

void dev_rmsnorm(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                 int64_t dim) {
    dev->ops->rmsnorm(dev, out, in, w, eps, rows, dim);
}

void dev_add_rmsnorm(dev_backend *dev, float *out, float *x, const float *delta, const dev_tensor *w, float eps,
                     int64_t rows, int64_t dim) {
    SP_ASSERT(out != x && out != delta);
    dev->ops->add_rmsnorm(dev, out, x, delta, w, eps, rows, dim);
}

void dev_matmul_group(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows) {
    SP_ASSERT(n_parts > 0);
    for (int i = 1; i < n_parts; i++) SP_ASSERT(parts[i].w->ne0 == parts[0].w->ne0); /* one input width */
    dev->ops->matmul_group(dev, parts, n_parts, in, rows);
}

void dev_matmul(dev_backend *dev, float *out, const float *in, const dev_tensor *w, const dev_tensor *bias,
                int64_t rows) {
    dev_matmul_part part = {out, w, bias};
    dev->ops->matmul_group(dev, &part, 1, in, rows);
}

void dev_rope_apply(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                    int64_t head_dim) {
    dev->ops->rope_apply(dev, x, step, rope, heads, head_dim);
}

void dev_kv_write(dev_backend *dev, dev_kv *kv, int layer, const float *k, const float *v, const dev_step *step) {
    dev->ops->kv_write(dev, kv, layer, k, v, step);
}

void dev_rope_kv_write(dev_backend *dev, dev_kv *kv, int layer, float *q, float *k, const float *v,
                       const dev_step *step, const dev_rope *rope, int64_t n_heads) {
    if (dev->ops->rope_kv_write) {
        dev->ops->rope_kv_write(dev, kv, layer, q, k, v, step, rope, n_heads);
        return;
    }
    const dev_kv_shape *shape = &((const dev_kv_common *)kv)->shape;
    dev->ops->rope_apply(dev, q, step, rope, n_heads, shape->head_dim);
    dev->ops->rope_apply(dev, k, step, rope, shape->n_kv_heads, shape->head_dim);
    dev->ops->kv_write(dev, kv, layer, k, v, step);
}

void dev_attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer, const dev_step *step,
                   int64_t n_heads, float scale) {
    dev->ops->attention(dev, out, q, kv, layer, step, n_heads, scale);
}

void dev_swiglu(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n) {
    dev->ops->swiglu(dev, out, gate, up, n);
}

void dev_add(dev_backend *dev, float *out, const float *a, const float *b, int64_t n) {
    dev->ops->add(dev, out, a, b, n);
}

void dev_gather_rows(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows, int64_t dim) {
    dev->ops->gather_rows(dev, out, in, rows, n_rows, dim);
}

sp_status dev_memory_info(dev_backend *dev, size_t *free_bytes, size_t *total_bytes) {
    if (!dev->ops->memory_info) return sp_fail(SP_ERR_UNSUPPORTED, "%s has no device memory of its own", dev_name(dev));
    return dev->ops->memory_info(dev, free_bytes, total_bytes);
}

sp_status dev_sample(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                     const dev_sample_row *rows, dev_sample_result *results) {
    for (int32_t i = 0; i < n_rows; i++)
        if (rows[i].top_logprobs < -1 || rows[i].top_logprobs > DEV_SAMPLE_MAX_TOP)
            return sp_fail(SP_ERR_INVALID_ARG, "sample: top_logprobs %d outside -1..%d", rows[i].top_logprobs,
                           DEV_SAMPLE_MAX_TOP);
    return dev->ops->sample(dev, logits, n_rows, vocab, rows, results);
}

sp_status dev_record(dev_backend *dev, const dev_step *step, dev_record_fn fn, const void *ctx, size_t ctx_bytes) {
    SP_ASSERT(ctx_bytes <= DEV_RECORD_CTX_MAX);
    return dev->ops->record(dev, step, fn, ctx, ctx_bytes);
}

sp_status dev_copy_to_host(dev_backend *dev, void *host, const void *device, size_t nbytes) {
    return dev->ops->copy_to_host(dev, host, device, nbytes);
}

sp_status dev_synchronize(dev_backend *dev) {
    return dev->ops->synchronize ? dev->ops->synchronize(dev) : SP_OK;
}

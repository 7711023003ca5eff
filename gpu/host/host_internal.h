/* host_internal.h: shared between the files of the CPU backend (gpu/host/).
 *
 * Kernel legend: n = elements in a row (K of the matmul), rows of weights are stored
 * in their quant format, activation rows are first quantized to the weight type's
 * dot format (quant_vec_dot_type()).
 */
#ifndef SP_HOST_INTERNAL_H
#define SP_HOST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/assert.h"
#include "common/status.h"
#include "gpu/device_internal.h"
#include "model/quant.h"

/* w: one weight row (n elements of its type); a: one activation row (n elements in
 * quant_vec_dot_type of the weight type). Returns their dot product. */
typedef float (*host_vec_dot_fn)(const void *w, const void *a, int64_t n);

/* Quantizes a float row (n) into the activation format dst. */
typedef void (*host_quantize_fn)(void *dst, const float *src, int64_t n);

/* The fastest implementation this CPU runs (AVX2/FMA chosen at run time, portable C
 * otherwise) for weights of type t; NULL for unsupported types. Results equal
 * quant_vec_dot_ref up to float summation order. */
host_vec_dot_fn host__vec_dot_for(quant_type t);
host_quantize_fn host__quantize_for(quant_type act_type);

/* "avx2" or "generic": what host__vec_dot_for picks on this CPU. */
const char *host__simd_name(void);

/* True when this CPU runs the AVX2+FMA+F16C kernels (probed once). */
bool host__cpu_has_avx2(void);

#endif

/* ---- thread pool (threadpool.c) ----
 * A fixed set of worker threads that run one task function at a time, split by
 * index. The caller is worker 0 and takes part, so n_threads = 1 runs inline. */
typedef void (*host_task_fn)(void *ctx, int ith, int nth);
typedef struct host_pool host_pool;

/* Caller owns *out; free with host__pool_destroy. */
sp_status host__pool_create(int n_threads, host_pool **out);
void host__pool_destroy(host_pool *pool);
int host__pool_threads(const host_pool *pool);
/* Runs fn(ctx, i, n) for every i in 0..n-1 across the workers; returns when all are done.
 * Only the owning thread may call it (not reentrant). */
void host__pool_run(host_pool *pool, host_task_fn fn, void *ctx);

/* Splits [0, n) into nth near-equal ranges; range ith is [*begin, *end). */
static inline void host__split(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    int64_t per = (n + nth - 1) / nth;
    *begin = per * ith < n ? per * ith : n;
    *end = *begin + per < n ? *begin + per : n;
}

/* ---- the CPU backend object (host_backend.c) ---- */

/* How attention's F16 dot products add their products (see host_attention.c). llama.cpp
 * itself uses ggml_vec_dot_f16's layout for 1-token steps and tinyBLAS's for larger
 * ones, so its results depend on the batch; the first two keep spindle's independent
 * of it, the third reproduces llama.cpp exactly at that price. */
typedef enum host_attn_sums {
    HOST_ATTN_SUMS_GEMM,          /* 8 lanes: llama.cpp's prompt (2+ token) steps */
    HOST_ATTN_SUMS_VEC_DOT,       /* 32 lanes: llama.cpp's 1-token steps */
    HOST_ATTN_SUMS_LLAMA_BATCHED, /* VEC_DOT for 1-token steps, GEMM otherwise */
} host_attn_sums;

typedef struct host_backend {
    dev_backend base;     /* must stay first */
    host_pool *pool;
    char name[64];
    void **arenas;        /* activation allocations, freed at destroy */
    int n_arenas;
    /* Scratch for quantized activations and per-thread work, grown only outside steps
     * (see host__scratch_reserve); sized for the largest step at model load. */
    void *scratch;
    size_t scratch_bytes;
    int64_t max_tokens;   /* largest step reserved with dev_reserve */
    /* Attention's per-worker buffers (scores and probabilities of a whole context),
     * grown only when a KV cache is created: host__attention_scratch_bytes per thread. */
    char *attn_scratch;
    size_t attn_scratch_bytes;
    host_attn_sums attn_sums; /* fixed at creation */
} host_backend;

typedef struct host_kv {
    dev_kv_common common; /* must stay first */
    uint16_t *data;       /* one allocation: [layer][K|V][block][B][Hk][Dh] F16 */
    size_t layer_stride;  /* elements per layer (K and V) */
    size_t pool_stride;   /* elements per K (or V) pool of one layer */
} host_kv;

/* Ensures the scratch area holds at least nbytes (64-byte aligned). */
sp_status host__scratch_reserve(host_backend *hb, size_t nbytes);

/* Ops (host_ops.c, host_matmul.c, host_attention.c). */
void host__embed(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step);
void host__rmsnorm(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                   int64_t dim);
void host__rope_apply(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                      int64_t head_dim);
void host__swiglu(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n);
void host__add(dev_backend *dev, float *out, const float *a, const float *b, int64_t n);
void host__gather_rows(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows,
                       int64_t dim);
void host__matmul(dev_backend *dev, float *out, const float *in, const dev_tensor *w, const dev_tensor *bias,
                  int64_t rows);
void host__kv_write(dev_backend *dev, dev_kv *kv, int layer, const float *k, const float *v, const dev_step *step);
void host__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer,
                     const dev_step *step, int64_t n_heads, float scale);
/* Bytes of attention scratch one worker needs for KV caches of this shape. */
size_t host__attention_scratch_bytes(const dev_kv_shape *shape);

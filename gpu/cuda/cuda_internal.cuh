/* cuda_internal.cuh: shared between the files of the CUDA backend (gpu/cuda/).
 *
 * Legend: T = tokens in the step, D = row width, N/K = matmul output/input width,
 * H = query heads, Hk = KV heads, Dh = head width, B = tokens per KV block.
 *
 * Memory: weights are uploaded once at load; quantized GGUF weights are dequantized on
 * the host and stored as F16 (BF16 weights stay BF16), vectors (norms, biases, RoPE
 * factors) as F32. Activations live in device arenas; the KV pools are F16
 * [layer][K|V][block][B][Hk][Dh], the CPU backend's layout.
 *
 * Errors: every CUDA and cuBLAS call is checked. The ops return nothing, so the first
 * failure is kept in the backend (`fault`, with the call and the message); later ops
 * do nothing, and the next call that returns a status (dev_copy_to_host, step upload,
 * allocation) reports it. A fault is sticky: the backend is unusable afterwards.
 *
 * Threads: a backend belongs to one thread at a time (the scheduler thread after
 * load); all work goes to its one stream, in order.
 */
#ifndef SP_CUDA_INTERNAL_CUH
#define SP_CUDA_INTERNAL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gpu/cuda/cuda_backend.h"

typedef struct cuda_kv {
    dev_kv_common common; /* first: the shape */
    __half *data;         /* (layers, 2, blocks, B, Hk, Dh) */
    size_t pool_stride;   /* elements of one K or V pool of one layer */
} cuda_kv;

/* The step as the device reads it: the caller's dev_step with its arrays copied to
 * one device buffer (dev_step's pointers then point into it). */
typedef struct cuda_step_buffers {
    int32_t *host;   /* pinned staging, cap int32s */
    int32_t *device; /* cap int32s */
    size_t cap;
    dev_step step;
} cuda_step_buffers;

typedef struct cuda_backend {
    dev_backend base; /* first: the ops table */
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
    char name[512];
    char gpu_name[256];
    int sm;             /* compute capability, e.g. 90 */
    void **allocations; /* everything cudaMalloc'd here (weights, arenas), freed at destroy */
    int n_allocations, cap_allocations;
    size_t weight_bytes;        /* on the device */
    size_t weight_source_bytes; /* in the GGUF */
    void *act_half;             /* F16/BF16 copy of a matmul input, act_half_bytes */
    size_t act_half_bytes;
    cuda_step_buffers steps;
    bool faulted;
    char fault[320]; /* "cudaMemcpyAsync: an illegal memory access was encountered" */
} cuda_backend;

/* Records the first failure of call (later ones are consequences). Returns false on a
 * failure, so `if (!cuda__ok(cb, cudaFoo(...), "cudaFoo")) return;` reads naturally. */
bool cuda__ok(cuda_backend *cb, cudaError_t err, const char *call);
bool cuda__blas_ok(cuda_backend *cb, cublasStatus_t st, const char *call);
/* After a kernel launch: the launch's own error (bad configuration), if any. */
bool cuda__launched(cuda_backend *cb, const char *kernel);
/* Records a fault that is not a CUDA status (a shape a kernel cannot take). */
void cuda__fault(cuda_backend *cb, const char *what);
/* The fault as a status for the caller (SP_ERR_DEVICE with the message). */
sp_status cuda__fault_status(const cuda_backend *cb);

/* The widest head the attention kernel takes (checked at KV pool creation). */
enum { CUDA_ATTN_MAX_DH = 256 };

/* Device storage type of a weight: F32 for vectors, BF16 for BF16 matrices, F16 for the
 * rest (dequantized at upload). */
quant_type cuda__storage_type(quant_type source, int64_t rows);

/* ---- ops (cuda_ops.cu, cuda_attention.cu, cuda_matmul.cu) ---- */

void cuda__embed(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step);
void cuda__rmsnorm(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                   int64_t dim);
void cuda__rope_apply(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                      int64_t head_dim);
void cuda__swiglu(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n);
void cuda__add(dev_backend *dev, float *out, const float *a, const float *b, int64_t n);
void cuda__gather_rows(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows, int64_t dim);
void cuda__kv_write(dev_backend *dev, dev_kv *kv, int layer, const float *k, const float *v, const dev_step *step);
void cuda__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer, const dev_step *step,
                     int64_t n_heads, float scale);
void cuda__matmul_group(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows);

/* Grid size for n elements at `block` threads each, capped (kernels loop with a stride). */
static inline unsigned cuda__grid(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g < 1 ? 1 : g > 65535 * 8 ? 65535 * 8 : g);
}

#endif

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
#include "gpu/cuda/cuda_pad.h"

/* The widest head the attention kernel takes (checked at KV pool creation), and the
 * scratch split-context decode attention keeps its per-split results in (allocated by
 * dev_reserve, so nothing allocates during a step or a graph capture). */
enum { CUDA_ATTN_MAX_DH = 256 };
#define CUDA_ATTN_PARTIAL_BYTES ((size_t)32 << 20)

/* Activation rows up to which a matmul on a Q8_0/Q4_0/Q4_1 weight may read the blocks
 * directly (cuda_gemv.cu) instead of the F16 copy through cuBLAS. */
enum { CUDA_GEMV_MAX_ROWS = 8 };

typedef struct cuda_kv {
    dev_kv_common common;  /* first: the shape */
    unsigned char *data;   /* (layers, 2, blocks + 1, B, Hk) rows of Dh elements in shape.kv_type */
    size_t row_bytes;      /* one (token, KV head) row: dev_kv_row_bytes */
    size_t pool_bytes;     /* one K or V pool of one layer */
    int32_t scratch_block; /* = shape.n_blocks: the extra block padding tokens write to */
} cuda_kv;

/* The layer's K pool; its V pool follows at + pool_bytes. */
static inline unsigned char *cuda__kv_pool(const cuda_kv *kv, int layer) {
    return kv->data + (size_t)layer * 2 * kv->pool_bytes;
}

/* The step as the device reads it: the caller's dev_step with its arrays copied to
 * one device buffer (dev_step's pointers then point into it). A generation step of short
 * runs (decode and speculative verify steps) is padded to its graph bucket: see
 * cuda_pad.h. */
typedef struct cuda_step_buffers {
    int32_t *host;   /* pinned staging, cap int32s */
    int32_t *device; /* cap int32s */
    size_t cap;
    dev_step step;
    bool padded; /* this step is padded to its bucket: its ops may be captured as a graph */
} cuda_step_buffers;

/* One captured decode step: the ops dev_record's fn issued for one (bucket, block-table
 * width, fn, ctx), instantiated for replay; exec is NULL until the shape's second step
 * (the first runs op by op as a warm-up) or after a failed capture. */
typedef struct cuda_graph_entry {
    int32_t n_tokens, max_blocks;
    dev_record_fn fn;
    unsigned char ctx[DEV_RECORD_CTX_MAX];
    size_t ctx_bytes;
    cudaGraphExec_t exec;
    uint64_t last_used;
} cuda_graph_entry;

/* A weight shape whose matmuls may take the fused GEMV, and up to how many rows it does
 * (measured at dev_reserve, or CUDA_GEMV_MAX_ROWS with SP_CUDA_GEMV_ALWAYS). */
typedef struct cuda_gemv_shape {
    quant_type type;
    int64_t n, k;
    dev_tensor example; /* a weight of this shape, to time both paths on */
    int max_rows;       /* 0: cuBLAS always */
    float gemv_us[CUDA_GEMV_MAX_ROWS], cublas_us[CUDA_GEMV_MAX_ROWS];
} cuda_gemv_shape;

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
    float *act_row_scale; /* (act_row_scale_rows) the power of two each F16 input row was divided by */
    int64_t act_row_scale_rows;
    cuda_step_buffers steps;
    int64_t max_tokens;     /* the largest dev_reserve: activation rows a (padded) step may use */
    void *cublas_workspace; /* set once, so cuBLAS never allocates inside a graph capture */
    bool use_graphs;
    bool capturing;     /* inside graph_capture's fn: no synchronisation allowed */
    int graph_failures; /* captures that failed with the device fine; graphs go off at CUDA_GRAPH_MAX_FAILURES */
    bool sync_ops;      /* SP_CUDA_SYNC_OPS=1: wait after every op outside a capture, so a fault names its op */
    cuda_graph_entry graphs[CUDA_GRAPH_CACHE];
    int n_graphs;
    uint64_t graph_clock;
    sp_cuda_gemv quant_gemv;
    cuda_gemv_shape gemv_shapes[16];
    int n_gemv_shapes;
    bool gemv_measured;
    size_t packed_bytes; /* block copies kept for the GEMV, included in weight_bytes */
    int n_sms;           /* streaming multiprocessors: how many blocks fill the GPU */
    float *attn_partial; /* split-context attention's partial results, CUDA_ATTN_PARTIAL_BYTES */
    bool faulted;
    cudaError_t fault_error; /* the CUDA status of the fault; cudaSuccess for one of ours (a shape check) */
    char fault[320];         /* "cudaMemcpyAsync: an illegal memory access was encountered" */
} cuda_backend;

/* Records the first failure of call (later ones are consequences). Returns false on a
 * failure, so `if (!cuda__ok(cb, cudaFoo(...), "cudaFoo")) return;` reads naturally. */
bool cuda__ok(cuda_backend *cb, cudaError_t err, const char *call);
bool cuda__blas_ok(cuda_backend *cb, cublasStatus_t st, const char *call);
/* After a kernel launch: the launch's own error (bad configuration), if any; with
 * sync_ops (and not capturing), also waits and reports a fault of the kernel itself. */
bool cuda__launched(cuda_backend *cb, const char *kernel);
/* For calls whose failure changes nothing (teardown): clears the runtime's last error,
 * so it is not reported later against an unrelated kernel. */
void cuda__ignore(cudaError_t err);
/* Records a fault that is not a CUDA status (a shape a kernel cannot take). */
void cuda__fault(cuda_backend *cb, const char *what);
/* The fault as a status for the caller (SP_ERR_DEVICE with the message). */
sp_status cuda__fault_status(const cuda_backend *cb);

/* Device storage type of a weight: F32 for vectors, BF16 for BF16 matrices, F16 for the
 * rest (dequantized at upload). */
quant_type cuda__storage_type(quant_type source, int64_t rows);

/* ---- ops (cuda_ops.cu, cuda_attention.cu, cuda_matmul.cu) ---- */

void cuda__embed(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step);
void cuda__rmsnorm(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                   int64_t dim);
void cuda__add_rmsnorm(dev_backend *dev, float *out, float *x, const float *delta, const dev_tensor *w, float eps,
                       int64_t rows, int64_t dim);
void cuda__rope_apply(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                      int64_t head_dim);
void cuda__swiglu(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n);
void cuda__add(dev_backend *dev, float *out, const float *a, const float *b, int64_t n);
void cuda__gather_rows(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows, int64_t dim);
void cuda__kv_write(dev_backend *dev, dev_kv *kv, int layer, const float *k, const float *v, const dev_step *step);
void cuda__rope_kv_write(dev_backend *dev, dev_kv *kv, int layer, float *q, float *k, const float *v,
                         const dev_step *step, const dev_rope *rope, int64_t n_heads);
void cuda__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer, const dev_step *step,
                     int64_t n_heads, float scale);
void cuda__matmul_group(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows);

/* out (rows, n) = in (rows, k) . W (n, k)^T [+ bias (n)], W in GGUF blocks of type
 * (Q8_0, Q4_0 or Q4_1) on the device, rows <= CUDA_GEMV_MAX_ROWS; F32 arithmetic.
 * Faults (cuda__fault) on a type or row count it does not take. */
void cuda__gemv_quant(cuda_backend *cb, float *out, const float *in, const void *w, quant_type type, int64_t n,
                      int64_t k, int64_t rows, const float *bias);

/* One weight of a GEMV group: out (rows, n) = in . w^T [+ bias]. */
typedef struct cuda_gemv_part {
    float *out;
    const void *w;
    int64_t n;
    const float *bias;
} cuda_gemv_part;
enum { CUDA_GEMV_MAX_PARTS = 4 };

/* cuda__gemv_quant for up to CUDA_GEMV_MAX_PARTS weights of one type that read the same
 * input (Q/K/V, gate/up), in one launch: each part's results are the bits it gets alone. */
void cuda__gemv_quant_group(cuda_backend *cb, const cuda_gemv_part *parts, int n_parts, const float *in,
                            quant_type type, int64_t k, int64_t rows);

/* cuda_gemv_half.cu: the same for weights stored as F16 or BF16 (w: the device copy),
 * F32 inputs, rows <= CUDA_GEMV_MAX_ROWS; in 16-byte aligned. */
void cuda__gemv_half_group(cuda_backend *cb, const cuda_gemv_part *parts, int n_parts, const float *in, quant_type type,
                           int64_t k, int64_t rows);
/* Whether cuda__gemv_half_group takes a weight: F16/BF16, K a multiple of 8, w 16-byte aligned. */
bool cuda__gemv_half_takes(quant_type type, int64_t k, const void *w);

/* cuda_sample.cu: dev_sample on the GPU. */
sp_status cuda__sample(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                       const dev_sample_row *rows, dev_sample_result *results);

/* cuda_step.cu: the step's upload (with decode padding); cuda_graph.cu: dev_record. */
sp_status cuda__step_upload(dev_backend *dev, const dev_step *host, const dev_kv *kv, const dev_step **device_step);
sp_status cuda__record(dev_backend *dev, const dev_step *step, dev_record_fn fn, const void *ctx, size_t ctx_bytes);
void cuda__graphs_clear(cuda_backend *cb);

/* cuda_matmul.cu: notes a block-format weight the GEMV may read, and measures at
 * dev_reserve up to how many rows the GEMV beats cuBLAS for each such shape. */
void cuda__gemv_note_weight(cuda_backend *cb, const dev_tensor *w);
sp_status cuda__gemv_measure(cuda_backend *cb);

/* Grid size for n elements at `block` threads each, capped (kernels loop with a stride). */
static inline unsigned cuda__grid(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    return (unsigned)(g < 1 ? 1 : g > 65535 * 8 ? 65535 * 8 : g);
}

#endif

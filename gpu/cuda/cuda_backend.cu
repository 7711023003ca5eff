/* cuda_backend.cu: the CUDA backend object: device selection, memory (weights uploaded
 * once, activation arenas, F16 KV pools), the step's upload, the copy of results to
 * the host, error bookkeeping, and the function table that routes the device ops to
 * the kernels of this folder. See cuda_internal.cuh for the memory and error rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

#include "gpu/cuda/cuda_internal.cuh"

extern "C" {
#include "common/log.h"
}

/* ---- errors ---- */

bool cuda__ok(cuda_backend *cb, cudaError_t err, const char *call) {
    if (err == cudaSuccess) return true;
    if (!cb->faulted) {
        cb->faulted = true;
        cb->fault_error = err;
        snprintf(cb->fault, sizeof cb->fault, "%s: %s", call, cudaGetErrorString(err));
        sp_log_error("cuda: %s", cb->fault);
    }
    return false;
}

bool cuda__blas_ok(cuda_backend *cb, cublasStatus_t st, const char *call) {
    if (st == CUBLAS_STATUS_SUCCESS)
        return !cb->sync_ops || cb->capturing || cuda__ok(cb, cudaStreamSynchronize(cb->stream), call);
    if (!cb->faulted) {
        cb->faulted = true;
        cb->fault_error = cudaErrorUnknown; /* a cuBLAS status */
        snprintf(cb->fault, sizeof cb->fault, "%s: %s", call, cublasGetStatusString(st));
        sp_log_error("cuda: %s", cb->fault);
    }
    return false;
}

bool cuda__launched(cuda_backend *cb, const char *kernel) {
    if (!cuda__ok(cb, cudaGetLastError(), kernel)) return false;
    if (!cb->sync_ops || cb->capturing) return true;
    char what[96];
    snprintf(what, sizeof what, "%s (SP_CUDA_SYNC_OPS)", kernel);
    return cuda__ok(cb, cudaStreamSynchronize(cb->stream), what);
}

void cuda__ignore(cudaError_t err) {
    if (err != cudaSuccess) (void)cudaGetLastError();
}

void cuda__fault(cuda_backend *cb, const char *what) {
    if (cb->faulted) return;
    cb->faulted = true;
    cb->fault_error = cudaSuccess;
    snprintf(cb->fault, sizeof cb->fault, "%s", what);
    sp_log_error("cuda: %s", cb->fault);
}

sp_status cuda__fault_status(const cuda_backend *cb) {
    return sp_fail(SP_ERR_DEVICE, "cuda: %s", cb->fault);
}

quant_type cuda__storage_type(quant_type source, int64_t rows) {
    if (rows == 1 && source == QUANT_F32) return QUANT_F32; /* norms, biases, RoPE factors */
    return source == QUANT_BF16 ? QUANT_BF16 : QUANT_F16;
}

/* ---- memory ---- */

/* cudaMalloc that the backend frees at destroy. */
static sp_status cuda_alloc(cuda_backend *cb, size_t nbytes, const char *what, void **out) {
    if (cb->faulted) return cuda__fault_status(cb);
    if (cb->n_allocations == cb->cap_allocations) {
        int cap = cb->cap_allocations ? 2 * cb->cap_allocations : 64;
        void **grown = (void **)realloc(cb->allocations, sizeof *grown * (size_t)cap);
        if (!grown) return sp_fail(SP_ERR_NOMEM, "cuda backend: out of host memory");
        cb->allocations = grown;
        cb->cap_allocations = cap;
    }
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, nbytes ? nbytes : 1);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not a fault: the caller decides */
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return sp_fail(SP_ERR_NOMEM, "cuda: cannot allocate %zu MiB for %s (%zu MiB free of %zu): %s", nbytes >> 20,
                       what, free_b >> 20, total_b >> 20, cudaGetErrorString(err));
    }
    cb->allocations[cb->n_allocations++] = p;
    *out = p;
    return SP_OK;
}

/* Rows 0..n of a block-quantized weight (src, src_row bytes each) as stored (F16 or
 * BF16) into dst (n, k), the rows split over the host's cores: an 8B model has 7e9
 * weights, minutes on one core. */
static void dequantize_rows(quant_type source, quant_type stored, const char *src, size_t src_row, int64_t k, int64_t n,
                            uint16_t *dst) {
    auto work = [=](int64_t begin, int64_t end) {
        std::vector<float> row((size_t)k);
        for (int64_t r = begin; r < end; r++) {
            quant_dequantize_row(source, row.data(), src + (size_t)r * src_row, k);
            uint16_t *out = dst + (size_t)r * (size_t)k;
            for (int64_t i = 0; i < k; i++)
                out[i] = stored == QUANT_BF16 ? quant_f32_to_bf16(row[(size_t)i]) : quant_f32_to_f16(row[(size_t)i]);
        }
    };
    const int64_t threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), 32);
    const int64_t per = (n + threads - 1) / threads;
    std::vector<std::thread> pool;
    int64_t begin = per; /* the calling thread takes [0, per) */
    try {
        for (; threads > 1 && begin < n; begin += per) pool.emplace_back(work, begin, std::min(n, begin + per));
    } catch (const std::system_error &) { /* no more threads: the rest on this one */
    }
    work(0, std::min(n, per));
    if (begin < n) work(begin, n);
    for (std::thread &t : pool) t.join();
}

/* Dequantizes a weight on the host, row block by row block, into its storage type
 * and uploads it. */
static sp_status cuda_weight_init(dev_backend *dev, dev_tensor *out, const void *host_data, size_t nbytes) {
    cuda_backend *cb = (cuda_backend *)dev;
    const quant_type source = out->type;
    const int64_t k = out->ne0, rows = out->ne1;
    const quant_type stored = cuda__storage_type(source, rows);
    const size_t elem = stored == QUANT_F32 ? 4 : 2;
    const size_t bytes = (size_t)k * (size_t)rows * elem;
    void *device = NULL;
    sp_status st = cuda_alloc(cb, bytes, "weights", &device);
    if (st != SP_OK) return st;
    if (source == stored) {
        if (!cuda__ok(cb, cudaMemcpyAsync(device, host_data, nbytes, cudaMemcpyHostToDevice, cb->stream),
                      "cudaMemcpyAsync(weights)"))
            return cuda__fault_status(cb);
    } else {
        /* tens of MiB at a time through a host buffer, dequantized on every core */
        const size_t src_row = quant_row_bytes(source, k);
        const int64_t chunk = (int64_t)(((size_t)64 << 20) / ((size_t)k * elem)) + 1;
        std::vector<uint16_t> half((size_t)(chunk < rows ? chunk : rows) * (size_t)k);
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
            dequantize_rows(source, stored, (const char *)host_data + (size_t)r0 * src_row, src_row, k, n, half.data());
            /* pageable source: the copy is staged before the call returns, so half is reusable */
            if (!cuda__ok(cb,
                          cudaMemcpyAsync((char *)device + (size_t)r0 * (size_t)k * elem, half.data(),
                                          (size_t)n * (size_t)k * elem, cudaMemcpyHostToDevice, cb->stream),
                          "cudaMemcpyAsync(weights)"))
                return cuda__fault_status(cb);
        }
    }
    /* the blocks as they are, for the fused GEMV of small batches */
    const bool gemv_type = source == QUANT_Q8_0 || source == QUANT_Q4_0 || source == QUANT_Q4_1;
    if (gemv_type && rows > 1 && cb->quant_gemv != SP_CUDA_GEMV_NEVER) {
        void *packed = NULL;
        if ((st = cuda_alloc(cb, nbytes, "weight blocks", &packed)) != SP_OK) return st;
        if (!cuda__ok(cb, cudaMemcpyAsync(packed, host_data, nbytes, cudaMemcpyHostToDevice, cb->stream),
                      "cudaMemcpyAsync(weight blocks)"))
            return cuda__fault_status(cb);
        out->packed = packed;
        out->packed_type = source;
        cb->packed_bytes += nbytes;
        cb->weight_bytes += nbytes;
    }
    /* ordered with the ops on the stream; waiting here also keeps host_data's lifetime simple */
    if (!cuda__ok(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize")) return cuda__fault_status(cb);
    out->type = stored; /* the ops read the device copy in this type */
    out->nbytes = bytes;
    out->data = device;
    cb->weight_bytes += bytes;
    cb->weight_source_bytes += nbytes;
    if (rows > 1) cuda__gemv_note_weight(cb, out); /* a shape our GEMV may take (it decides) */
    return SP_OK;
}

static sp_status cuda_arena_alloc(dev_backend *dev, size_t nbytes, void **out) {
    cuda_backend *cb = (cuda_backend *)dev;
    void *p = NULL;
    sp_status st = cuda_alloc(cb, nbytes, "activations", &p);
    if (st != SP_OK) return st;
    /* on the ops' stream (it does not wait for the legacy default stream) */
    if (!cuda__ok(cb, cudaMemsetAsync(p, 0, nbytes, cb->stream), "cudaMemsetAsync(activations)"))
        return cuda__fault_status(cb);
    *out = p;
    return SP_OK;
}

static sp_status cuda_reserve(dev_backend *dev, int64_t max_tokens, int64_t max_width) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (!cb->attn_partial) {
        sp_status st = cuda_alloc(cb, CUDA_ATTN_PARTIAL_BYTES, "attention partials", (void **)&cb->attn_partial);
        if (st != SP_OK) return st;
    }
    cuda__graphs_clear(cb);            /* captures hold the buffers of the model they were made for */
    if (max_tokens > cb->max_tokens) { /* the smaller one stays in allocations until destroy */
        void *p = NULL;
        /* rows of any step, and of the GEMV measurement (up to CUDA_GEMV_MAX_ROWS) */
        const int64_t scale_rows = std::max<int64_t>(max_tokens, CUDA_GEMV_MAX_ROWS);
        sp_status st = cuda_alloc(cb, sizeof(float) * (size_t)scale_rows, "matmul row scales", &p);
        if (st != SP_OK) return st;
        cb->act_row_scale = (float *)p;
        cb->act_row_scale_rows = scale_rows;
    }
    size_t bytes = (size_t)max_tokens * (size_t)max_width * sizeof(__half);
    if (bytes > cb->act_half_bytes) {
        void *p = NULL;
        sp_status st = cuda_alloc(cb, bytes, "matmul inputs", &p);
        if (st != SP_OK) return st;
        cb->act_half = p; /* the smaller one stays in allocations until destroy */
        cb->act_half_bytes = bytes;
    }
    if (max_tokens > cb->max_tokens) cb->max_tokens = max_tokens; /* only once its scratch exists */
    return cuda__gemv_measure(cb);                                /* once the weights are in: the GEMV's row counts */
}

static sp_status cuda_kv_create(dev_backend *dev, const dev_kv_shape *shape, dev_kv **out) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return cuda__fault_status(cb);
    if (shape->head_dim > CUDA_ATTN_MAX_DH)
        return sp_fail(SP_ERR_UNSUPPORTED, "cuda backend: head width %d is more than the %d its attention handles",
                       shape->head_dim, CUDA_ATTN_MAX_DH);
    cuda_kv *kv = (cuda_kv *)calloc(1, sizeof *kv);
    if (!kv) return sp_fail(SP_ERR_NOMEM, "kv cache: out of memory");
    kv->common.shape = *shape;
    kv->scratch_block = shape->n_blocks; /* one block more than asked for: decode padding's */
    kv->row_bytes = dev_kv_row_bytes(shape);
    kv->pool_bytes =
        (size_t)(shape->n_blocks + 1) * (size_t)shape->block_size * (size_t)shape->n_kv_heads * kv->row_bytes;
    dev_kv_shape with_scratch = *shape;
    with_scratch.n_blocks += 1;
    size_t bytes = dev_kv_bytes(&with_scratch);
    cudaError_t err = cudaMalloc((void **)&kv->data, bytes);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        free(kv);
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        return sp_fail(SP_ERR_NOMEM, "kv cache: cannot allocate %zu MiB on the GPU (%zu MiB free of %zu)", bytes >> 20,
                       free_b >> 20, total_b >> 20);
    }
    /* not cleared: attention reads only positions a step has written */
    *out = (dev_kv *)kv;
    return SP_OK;
}

static void cuda_kv_destroy(dev_backend *dev, dev_kv *kv) {
    cuda_backend *cb = (cuda_backend *)dev;
    cuda__graphs_clear(cb); /* a later pool may get this one's address: no capture may outlive it */
    cuda__ignore(cudaStreamSynchronize(cb->stream)); /* the pool may still be in use by queued work */
    cuda_kv *ck = (cuda_kv *)kv;
    cuda__ignore(cudaFree(ck->data));
    free(ck);
}

/* One block's K and V of every layer is one strided copy: the (2 * layers) pools are
 * pool_bytes apart, and the block is a run of B*Hk rows in each. A
 * pitch beyond what cudaMemcpy2D takes (memPitch, 2^31 - 1 bytes on current GPUs: a
 * pool of more than 2 GiB per layer's K) is copied one run at a time instead. */
enum { CUDA_KV_MAX_PITCH = 0x7fffffff };
static sp_status cuda_kv_copy(cuda_backend *cb, const cuda_kv *ck, const int32_t *ids, int32_t n, void *host,
                              bool to_host) {
    if (cb->faulted) return cuda__fault_status(cb);
    const dev_kv_shape *sh = &ck->common.shape;
    size_t run = (size_t)sh->block_size * (size_t)sh->n_kv_heads * ck->row_bytes;
    size_t pitch = ck->pool_bytes, rows = 2 * (size_t)sh->n_layers;
    for (int32_t i = 0; i < n; i++) {
        char *dev_at = (char *)ck->data + (size_t)ids[i] * run;
        char *host_at = (char *)host + (size_t)i * run * rows;
        if (pitch <= CUDA_KV_MAX_PITCH) {
            cudaError_t err =
                to_host ? cudaMemcpy2DAsync(host_at, run, dev_at, pitch, run, rows, cudaMemcpyDeviceToHost, cb->stream)
                        : cudaMemcpy2DAsync(dev_at, pitch, host_at, run, run, rows, cudaMemcpyHostToDevice, cb->stream);
            if (!cuda__ok(cb, err, "cudaMemcpy2DAsync")) return cuda__fault_status(cb);
            continue;
        }
        for (size_t r = 0; r < rows; r++) {
            char *d = dev_at + r * pitch, *h = host_at + r * run;
            cudaError_t err = to_host ? cudaMemcpyAsync(h, d, run, cudaMemcpyDeviceToHost, cb->stream)
                                      : cudaMemcpyAsync(d, h, run, cudaMemcpyHostToDevice, cb->stream);
            if (!cuda__ok(cb, err, "cudaMemcpyAsync")) return cuda__fault_status(cb);
        }
    }
    if (!cuda__ok(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize")) return cuda__fault_status(cb);
    return SP_OK;
}

static sp_status cuda_kv_save(dev_backend *dev, const dev_kv *kv, const int32_t *ids, int32_t n, void *host) {
    return cuda_kv_copy((cuda_backend *)dev, (const cuda_kv *)kv, ids, n, host, true);
}

static sp_status cuda_kv_load(dev_backend *dev, dev_kv *kv, const int32_t *ids, int32_t n, const void *host) {
    return cuda_kv_copy((cuda_backend *)dev, (const cuda_kv *)kv, ids, n, (void *)host, false);
}

static sp_status cuda_copy_to_host(dev_backend *dev, void *host, const void *device, size_t nbytes) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return cuda__fault_status(cb);
    if (!cuda__ok(cb, cudaMemcpyAsync(host, device, nbytes, cudaMemcpyDeviceToHost, cb->stream), "cudaMemcpyAsync") ||
        !cuda__ok(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize"))
        return cuda__fault_status(cb);
    return SP_OK;
}

static sp_status cuda_synchronize(dev_backend *dev) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return cuda__fault_status(cb);
    if (!cuda__ok(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize")) return cuda__fault_status(cb);
    return SP_OK;
}

static sp_status cuda_memory_info(dev_backend *dev, size_t *free_bytes, size_t *total_bytes) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (!cuda__ok(cb, cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo")) return cuda__fault_status(cb);
    return SP_OK;
}

/* ---- lifecycle ---- */

/* cuBLAS's own workspace, given to it so that it never allocates during a graph
 * capture (32 MiB: what NVIDIA suggests for Hopper). */
#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)

static const char *cuda_name(const dev_backend *dev) {
    cuda_backend *cb = (cuda_backend *)dev;
    snprintf(cb->name, sizeof cb->name,
             "cuda (%s, sm_%d; weights %.1f MiB on the GPU, %.1f MiB of them block copies for the GEMV, from %.1f MiB "
             "in the file; graphs %s)",
             cb->gpu_name, cb->sm, (double)cb->weight_bytes / (1 << 20), (double)cb->packed_bytes / (1 << 20),
             (double)cb->weight_source_bytes / (1 << 20), cb->use_graphs ? "on" : "off");
    return cb->name;
}

static void cuda_destroy(dev_backend *dev) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    cuda__graphs_clear(cb);
    for (int i = 0; i < cb->n_allocations; i++) cudaFree(cb->allocations[i]);
    free(cb->allocations);
    cudaFreeHost(cb->steps.host);
    cudaFree(cb->steps.device);
    if (cb->cublas) cublasDestroy(cb->cublas);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb);
}

static const dev_backend_ops cuda_ops = {
    .name = cuda_name,
    .destroy = cuda_destroy,
    .weight_init = cuda_weight_init,
    .arena_alloc = cuda_arena_alloc,
    .reserve = cuda_reserve,
    .kv_create = cuda_kv_create,
    .kv_destroy = cuda_kv_destroy,
    .kv_save = cuda_kv_save,
    .kv_load = cuda_kv_load,
    .step_upload = cuda__step_upload,
    .embed = cuda__embed,
    .rmsnorm = cuda__rmsnorm,
    .add_rmsnorm = cuda__add_rmsnorm,
    .matmul_group = cuda__matmul_group,
    .rope_apply = cuda__rope_apply,
    .kv_write = cuda__kv_write,
    .rope_kv_write = cuda__rope_kv_write,
    .attention = cuda__attention,
    .swiglu = cuda__swiglu,
    .add = cuda__add,
    .gather_rows = cuda__gather_rows,
    .record = cuda__record,
    .sample = cuda__sample,
    .copy_to_host = cuda_copy_to_host,
    .synchronize = cuda_synchronize,
    .memory_info = cuda_memory_info,
};

extern "C" bool cuda_backend_probe(char *why, size_t cap) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, cap, "%s", cudaGetErrorString(err));
        return false;
    }
    if (count == 0) {
        snprintf(why, cap, "no CUDA device");
        return false;
    }
    cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
        snprintf(why, cap, "%s", cudaGetErrorString(err));
        return false;
    }
    if (prop.major < 8) {
        snprintf(why, cap, "%s has compute capability %d.%d; spindle needs 8.0 or newer", prop.name, prop.major,
                 prop.minor);
        return false;
    }
    return true;
}

extern "C" sp_status cuda_backend_create(const dev_options *opts, dev_backend **out) {
    char why[256];
    if (!cuda_backend_probe(why, sizeof why)) return sp_fail(SP_ERR_UNSUPPORTED, "device cuda: no usable GPU: %s", why);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) return sp_fail(SP_ERR_NOMEM, "cuda backend: out of memory");
    cb->base.ops = &cuda_ops;
    cb->base.n_threads = 1;
    cb->device = 0;
    cb->use_graphs = !opts->no_graphs;
    cb->quant_gemv = opts->quant_gemv;
    const char *sync_ops = getenv("SP_CUDA_SYNC_OPS"); /* a debugging aid: a fault names the op that made it */
    cb->sync_ops = sync_ops && strcmp(sync_ops, "1") == 0;
    if (cb->sync_ops) { /* a graph's kernels cannot be waited for one by one */
        cb->use_graphs = false;
        sp_log_warn("cuda: SP_CUDA_SYNC_OPS=1: graphs off, waiting after every op (slow; for finding a fault)");
    }
    cudaDeviceProp prop;
    if (!cuda__ok(cb, cudaSetDevice(cb->device), "cudaSetDevice") ||
        !cuda__ok(cb, cudaGetDeviceProperties(&prop, cb->device), "cudaGetDeviceProperties") ||
        !cuda__ok(cb, cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !cuda__blas_ok(cb, cublasCreate(&cb->cublas), "cublasCreate") ||
        !cuda__blas_ok(cb, cublasSetStream(cb->cublas, cb->stream), "cublasSetStream")) {
        sp_status st = cuda__fault_status(cb);
        cuda_destroy(&cb->base);
        return st;
    }
    sp_status st = cuda_alloc(cb, CUBLAS_WORKSPACE_BYTES, "cuBLAS workspace", &cb->cublas_workspace);
    if (st == SP_OK && !cuda__blas_ok(cb, cublasSetWorkspace(cb->cublas, cb->cublas_workspace, CUBLAS_WORKSPACE_BYTES),
                                      "cublasSetWorkspace"))
        st = cuda__fault_status(cb);
    if (st != SP_OK) {
        cuda_destroy(&cb->base);
        return st;
    }
    /* sampling allocates per call from the stream-ordered pool (cudaMallocAsync): keep
     * up to 64 MiB in the pool between calls instead of going to the driver each time */
    cudaMemPool_t pool = NULL;
    uint64_t keep = (uint64_t)64 << 20;
    if (!cuda__ok(cb, cudaDeviceGetDefaultMemPool(&pool, cb->device), "cudaDeviceGetDefaultMemPool") ||
        !cuda__ok(cb, cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                  "cudaMemPoolSetAttribute(release threshold)")) {
        st = cuda__fault_status(cb);
        cuda_destroy(&cb->base);
        return st;
    }
    snprintf(cb->gpu_name, sizeof cb->gpu_name, "%s", prop.name);
    cb->sm = prop.major * 10 + prop.minor;
    cb->n_sms = prop.multiProcessorCount;
    *out = &cb->base;
    return SP_OK;
}

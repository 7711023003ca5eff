/* cuda_matmul.cu: out_i (T, N_i) = in (T, K) . W_i (N_i, K)^T + bias_i on the GPU, for
 * one or several weights that share an input (Q/K/V, gate/up).
 *
 * Legend: T = activation rows (tokens), N = weight rows (outputs), K = row length.
 *
 * The input is converted once to the weights' storage type (F16, or BF16 for BF16
 * models) and each weight goes through cuBLAS's GEMM with F32 accumulation and F32
 * output. F16 tops out at 65,504, and activations can pass that (qwen2's feed-forward
 * inputs do): a row whose largest magnitude is past 2^15 is scaled down by a power of
 * two before the conversion and its outputs scaled back after the GEMM (both exact), so
 * nothing saturates; other rows are converted as they are. A quantized weight on the
 * CPU backend gets 8-bit activations with a scale per block, so it never saturated
 * there either. In cuBLAS's column-major terms: C (N x T, ld N) = W^T-as-stored (op T on the
 * K x N matrix the row-major W is) times in (K x T, ld K); C in column-major is `out`
 * in row-major (T, N).
 *
 * Small batches may instead go through our own GEMV: on Q8_0/Q4_0/Q4_1 weights it reads
 * the file's blocks directly (cuda_gemv.cu): decode is bound by reading the weights, and
 * the blocks are 1.9x (Q8_0) to 3.6x (Q4_0) smaller than F16; on F16/BF16 weights it
 * reads them with F32 inputs (cuda_gemv_half.cu), which saves the conversion launch.
 * Whether that is faster depends on the GPU and the shape, so dev_reserve times both
 * paths for every such weight shape (on a slice of at most MEASURE_SLICE_BYTES of it)
 * and keeps, per shape, the row count up to which the GEMV won (cuda__gemv_measure;
 * logged). The two paths round differently (F32 against F16 inputs), so a token's
 * result can depend on which one its batch took. The GEMV parts of a group share a
 * launch.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include <algorithm>

#include "gpu/cuda/cuda_internal.cuh"

extern "C" {
#include "common/log.h"
}

enum { BLOCK = 256 };

/* The largest magnitude an F16 input row keeps as it is; past it, the row is scaled. */
#define HALF_ROW_MAX 32768.0f

/* One block per row: dst (T, K) = src * 2^-e as F16 and row_scale[r] = 2^e, where e is
 * 0 unless the row's largest finite magnitude m is past HALF_ROW_MAX, then the
 * smallest e with m * 2^-e <= HALF_ROW_MAX. Infinities and NaN pass through as they
 * are (so a broken row shows, as on the CPU). */
__global__ static void to_half_rows_kernel(__half *dst, float *row_scale, const float *src, int64_t k) {
    __shared__ float warp_max[BLOCK / 32];
    const float *row = src + blockIdx.x * k;
    __half *out = dst + blockIdx.x * k;
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < k; i += BLOCK) {
        const float a = fabsf(row[i]);
        if (a > m && a <= FLT_MAX) m = a; /* finite ones only (NaN compares false) */
    }
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    m = warp_max[0];
    for (int w = 1; w < BLOCK / 32; w++) m = fmaxf(m, warp_max[w]);
    int e = 0;
    if (m > HALF_ROW_MAX) e = (int)ceilf(log2f(m / HALF_ROW_MAX));
    while (e > 0 && ldexpf(m, -e) > HALF_ROW_MAX) e++; /* log2f's rounding, one step at most */
    const float down = ldexpf(1.0f, -e);
    for (int64_t i = threadIdx.x; i < k; i += BLOCK)
        out[i] = __float2half_rn(row[i] * down); /* at most 2^15 in magnitude, unless not finite */
    if (threadIdx.x == 0) row_scale[blockIdx.x] = ldexpf(1.0f, e);
}

__global__ static void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* out (T, N) += bias (N) */
__global__ static void bias_kernel(float *out, const float *bias, int64_t rows, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] += bias[i % n];
}

/* Row blockIdx.x of out (T, N) = out * row_scale[r] (+ bias): what to_half_rows_kernel
 * scaled down, scaled back. Rows it left alone, without a bias, return at once. */
__global__ static void unscale_bias_kernel(float *out, const float *row_scale, const float *bias, int64_t n) {
    const float up = row_scale[blockIdx.x];
    if (up == 1.0f && !bias) return;
    float *row = out + blockIdx.x * n;
    for (int64_t i = blockIdx.y * (int64_t)BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.y * BLOCK) {
        const float v = __fmul_rn(row[i], up);
        row[i] = bias ? __fadd_rn(v, bias[i]) : v;
    }
}

/* What our GEMV reads for a weight: its blocks when it has a copy of them, else the
 * F16/BF16 weights as stored (cuda_gemv_half.cu). */
static quant_type gemv_type(const dev_tensor *w) {
    return w->packed ? w->packed_type : w->type;
}
static const void *gemv_weights(const dev_tensor *w) {
    return w->packed ? w->packed : w->data;
}

static cuda_gemv_shape *gemv_shape_of(cuda_backend *cb, const dev_tensor *w) {
    for (int i = 0; i < cb->n_gemv_shapes; i++) {
        cuda_gemv_shape *g = &cb->gemv_shapes[i];
        if (g->type == gemv_type(w) && g->n == w->ne1 && g->k == w->ne0) return g;
    }
    return NULL;
}

void cuda__gemv_note_weight(cuda_backend *cb, const dev_tensor *w) {
    if (cb->quant_gemv == SP_CUDA_GEMV_NEVER || gemv_shape_of(cb, w)) return;
    if (!w->packed && !cuda__gemv_half_takes(w->type, w->ne0, w->data)) return;
    const int cap = (int)(sizeof cb->gemv_shapes / sizeof cb->gemv_shapes[0]);
    if (cb->n_gemv_shapes == cap) return; /* more shapes than any llama-family model has: cuBLAS for the rest */
    cuda_gemv_shape *g = &cb->gemv_shapes[cb->n_gemv_shapes++];
    *g = cuda_gemv_shape{};
    g->type = gemv_type(w);
    g->n = w->ne1;
    g->k = w->ne0;
    g->example = *w;
    g->max_rows = cb->quant_gemv == SP_CUDA_GEMV_ALWAYS ? CUDA_GEMV_MAX_ROWS : 0;
    cb->gemv_measured = false;
}

/* Whether this product of rows rows of in goes through our GEMV. */
static bool use_gemv(cuda_backend *cb, const dev_tensor *w, const float *in, int64_t rows) {
    if (rows > CUDA_GEMV_MAX_ROWS || cb->quant_gemv == SP_CUDA_GEMV_NEVER) return false;
    if (!w->packed && (!cuda__gemv_half_takes(w->type, w->ne0, w->data) || ((uintptr_t)in & 15) != 0)) return false;
    const cuda_gemv_shape *g = gemv_shape_of(cb, w);
    return g && rows <= g->max_rows;
}

/* One GEMV launch for parts of one gemv_type. */
static void gemv_run(cuda_backend *cb, const cuda_gemv_part *parts, int n_parts, const float *in, quant_type type,
                     int64_t k, int64_t rows) {
    if (type == QUANT_F16 || type == QUANT_BF16)
        cuda__gemv_half_group(cb, parts, n_parts, in, type, k, rows);
    else
        cuda__gemv_quant_group(cb, parts, n_parts, in, type, k, rows);
}

static void cublas_product(cuda_backend *cb, const dev_matmul_part *part, const float *in, int64_t rows,
                           quant_type *converted);

void cuda__matmul_group(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    /* the parts that take our GEMV, one launch per type it reads (a model's Q/K/V or
     * gate/up usually share one): a decode step of a small model is launch-bound */
    bool done[CUDA_GEMV_MAX_PARTS] = {false};
    for (int p = 0; p < n_parts && p < CUDA_GEMV_MAX_PARTS && !cb->faulted; p++) {
        const dev_tensor *w = parts[p].w;
        if (done[p] || !use_gemv(cb, w, in, rows)) continue;
        cuda_gemv_part launch[CUDA_GEMV_MAX_PARTS];
        int n_launch = 0;
        for (int o = p; o < n_parts && o < CUDA_GEMV_MAX_PARTS; o++) {
            const dev_tensor *wo = parts[o].w;
            if (done[o] || !use_gemv(cb, wo, in, rows) || gemv_type(wo) != gemv_type(w)) continue;
            launch[n_launch++] = {parts[o].out, gemv_weights(wo), wo->ne1,
                                  parts[o].bias ? (const float *)parts[o].bias->data : NULL};
            done[o] = true;
        }
        gemv_run(cb, launch, n_launch, in, gemv_type(w), w->ne0, rows);
    }
    quant_type converted = QUANT_F32; /* the storage type act_half holds now */
    for (int p = 0; p < n_parts && !cb->faulted; p++)
        if (p >= CUDA_GEMV_MAX_PARTS || !done[p]) cublas_product(cb, &parts[p], in, rows, &converted);
}

/* One product through cuBLAS; the input is converted into act_half unless *converted
 * says it already holds it in the weight's type. */
static void cublas_product(cuda_backend *cb, const dev_matmul_part *part, const float *in, int64_t rows,
                           quant_type *converted) {
    const int64_t k = part->w->ne0;
    const size_t need = (size_t)rows * (size_t)k * sizeof(__half);
    /* dev_reserve sized both for max_tokens rows x the widest input */
    if (need > cb->act_half_bytes || rows > cb->act_row_scale_rows) {
        char what[160];
        snprintf(what, sizeof what, "matmul: input of %lld x %lld exceeds what dev_reserve set aside", (long long)rows,
                 (long long)k);
        cuda__fault(cb, what);
        return;
    }
    const dev_tensor *w = part->w;
    if (w->type != QUANT_F16 && w->type != QUANT_BF16) { /* a one-row F32 "matrix" stays F32 */
        cuda__fault(cb, "matmul: a weight of one row is stored as F32; matmuls need F16/BF16 storage");
        return;
    }
    const bool bf16 = w->type == QUANT_BF16;
    if (*converted != w->type) {
        if (bf16)
            to_bf16_kernel<<<cuda__grid(rows * k, BLOCK), BLOCK, 0, cb->stream>>>((__nv_bfloat16 *)cb->act_half, in,
                                                                                  rows * k);
        else
            to_half_rows_kernel<<<(unsigned)rows, BLOCK, 0, cb->stream>>>((__half *)cb->act_half, cb->act_row_scale, in,
                                                                          k);
        if (!cuda__launched(cb, bf16 ? "to_bf16_kernel" : "to_half_rows_kernel")) return;
        *converted = w->type;
    }
    const float alpha = 1.0f, beta = 0.0f;
    const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    if (!cuda__blas_ok(cb,
                       cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->ne1, (int)rows, (int)k, &alpha,
                                    w->data, type, (int)k, cb->act_half, type, (int)k, &beta, part->out, CUDA_R_32F,
                                    (int)w->ne1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx"))
        return;
    const float *bias = part->bias ? (const float *)part->bias->data : NULL;
    if (!bf16) { /* the rows scaled down, scaled back, with the bias */
        const dim3 grid((unsigned)rows, (unsigned)std::min<int64_t>((w->ne1 + BLOCK - 1) / BLOCK, 64));
        unscale_bias_kernel<<<grid, BLOCK, 0, cb->stream>>>(part->out, cb->act_row_scale, bias, w->ne1);
        cuda__launched(cb, "unscale_bias_kernel");
    } else if (bias) {
        bias_kernel<<<cuda__grid(rows * w->ne1, BLOCK), BLOCK, 0, cb->stream>>>(part->out, bias, rows, w->ne1);
        cuda__launched(cb, "bias_kernel");
    }
}

/* ---- which path for small batches: measured once the weights are in ---- */

/* Timed runs per path and row count, and the most weight bytes (as F16) one run reads:
 * an 8B model's output matrix is 1 GiB, and timing all of it at every row count would
 * add a minute to every load. A slice of rows gives the same per-row costs once it
 * fills the GPU. */
enum { MEASURE_REPS = 7 };
#define MEASURE_SLICE_BYTES ((int64_t)32 << 20)

/* Median microseconds of MEASURE_REPS runs of launch on cb->stream; < 0 on a fault. */
template <class Launch> static float median_us(cuda_backend *cb, Launch launch) {
    cudaEvent_t start = NULL, stop = NULL;
    float times[MEASURE_REPS];
    float result = -1.0f;
    if (!cuda__ok(cb, cudaEventCreate(&start), "cudaEventCreate") ||
        !cuda__ok(cb, cudaEventCreate(&stop), "cudaEventCreate"))
        goto done;
    launch(); /* warm-up: first-launch costs, cuBLAS's heuristics */
    for (int r = 0; r < MEASURE_REPS; r++) {
        if (!cuda__ok(cb, cudaEventRecord(start, cb->stream), "cudaEventRecord")) goto done;
        launch();
        if (!cuda__ok(cb, cudaEventRecord(stop, cb->stream), "cudaEventRecord") ||
            !cuda__ok(cb, cudaEventSynchronize(stop), "cudaEventSynchronize") ||
            !cuda__ok(cb, cudaEventElapsedTime(&times[r], start, stop), "cudaEventElapsedTime"))
            goto done;
    }
    if (cb->faulted) goto done;
    std::sort(times, times + MEASURE_REPS);
    result = times[MEASURE_REPS / 2] * 1000.0f;
done:
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    return result;
}

sp_status cuda__gemv_measure(cuda_backend *cb) {
    if (cb->faulted) return cuda__fault_status(cb);
    if (cb->gemv_measured || cb->quant_gemv != SP_CUDA_GEMV_AUTO || cb->n_gemv_shapes == 0) return SP_OK;
    if (cb->act_half_bytes == 0) return SP_OK; /* measured at the reserve that sizes act_half */
    int64_t widest_n = 0, widest_k = 0;        /* of the slices timed */
    for (int i = 0; i < cb->n_gemv_shapes; i++) {
        const cuda_gemv_shape *g = &cb->gemv_shapes[i];
        widest_n = std::max(widest_n, std::min(g->n, std::max<int64_t>(64, MEASURE_SLICE_BYTES / (2 * g->k))));
        widest_k = std::max(widest_k, g->k);
    }
    const bool sync_ops = cb->sync_ops; /* waits would skew the timings */
    cb->sync_ops = false;
    float *in = NULL, *out = NULL; /* scratch for the measurement only */
    if (!cuda__ok(cb, cudaMalloc((void **)&in, sizeof(float) * CUDA_GEMV_MAX_ROWS * (size_t)widest_k), "cudaMalloc") ||
        !cuda__ok(cb, cudaMalloc((void **)&out, sizeof(float) * CUDA_GEMV_MAX_ROWS * (size_t)widest_n), "cudaMalloc") ||
        !cuda__ok(cb, cudaMemsetAsync(in, 0, sizeof(float) * CUDA_GEMV_MAX_ROWS * (size_t)widest_k, cb->stream),
                  "cudaMemsetAsync")) {
        cudaFree(in);
        cudaFree(out);
        cb->sync_ops = sync_ops;
        return cuda__fault_status(cb);
    }
    for (int i = 0; i < cb->n_gemv_shapes && !cb->faulted; i++) {
        cuda_gemv_shape *g = &cb->gemv_shapes[i];
        dev_tensor w = g->example; /* its first slice_n rows: the same K, the same row costs */
        const int64_t slice_n = std::min(g->n, std::max<int64_t>(64, MEASURE_SLICE_BYTES / (2 * g->k)));
        w.ne1 = slice_n;
        /* whether the GEMV is at least as fast as cuBLAS at `rows` rows (false on a fault) */
        auto gemv_wins = [&](int rows) {
            const cuda_gemv_part ours = {out, gemv_weights(&w), slice_n, NULL};
            g->gemv_us[rows - 1] = median_us(cb, [&] { gemv_run(cb, &ours, 1, in, g->type, g->k, rows); });
            const dev_matmul_part part = {out, &w, NULL};
            g->cublas_us[rows - 1] = median_us(cb, [&] {
                quant_type converted = QUANT_F32;
                cublas_product(cb, &part, in, rows, &converted);
            });
            return g->gemv_us[rows - 1] >= 0 && g->cublas_us[rows - 1] >= 0 &&
                   g->gemv_us[rows - 1] <= g->cublas_us[rows - 1];
        };
        /* the GEMV's time grows with the rows and cuBLAS's barely does at so few, so the
         * row counts where the GEMV wins are 1..m: find m by bisection (at most 5 counts
         * timed), within what the scratch holds */
        int lo = 0, hi = 1; /* the GEMV wins at lo (0: none), loses at hi (or hi is past the range) */
        while (hi <= CUDA_GEMV_MAX_ROWS && (size_t)hi * (size_t)g->k * 2 <= cb->act_half_bytes) hi++;
        const int top = hi - 1; /* the most rows timed */
        if (top >= 1 && gemv_wins(1)) {
            lo = 1;
            if (top > 1 && gemv_wins(top))
                lo = top;
            else if (top > 1)
                hi = top;
            while (hi - lo > 1 && !cb->faulted) {
                const int mid = (lo + hi) / 2;
                if (gemv_wins(mid))
                    lo = mid;
                else
                    hi = mid;
            }
        }
        if (cb->faulted) break; /* reported below */
        g->max_rows = lo;
        sp_log_info("cuda: %s [%lld x %lld]: our GEMV for up to %d rows (timed on %lld rows of it; 1 row: GEMV %.1f "
                    "us, cuBLAS %.1f us)",
                    quant_type_name(g->type), (long long)g->n, (long long)g->k, g->max_rows, (long long)slice_n,
                    (double)g->gemv_us[0], (double)g->cublas_us[0]);
    }
    cuda__ok(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize(measure)");
    cuda__ok(cb, cudaFree(in), "cudaFree(measure)");
    cuda__ok(cb, cudaFree(out), "cudaFree(measure)");
    cb->sync_ops = sync_ops;
    if (cb->faulted) return cuda__fault_status(cb);
    cb->gemv_measured = true;
    return SP_OK;
}

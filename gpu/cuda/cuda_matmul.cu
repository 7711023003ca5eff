/* cuda_matmul.cu: out_i (T, N_i) = in (T, K) . W_i (N_i, K)^T + bias_i on the GPU, for
 * one or several weights that share an input (Q/K/V, gate/up).
 *
 * Legend: T = activation rows (tokens), N = weight rows (outputs), K = row length.
 *
 * The input is converted once to the weights' storage type (F16, or BF16 for BF16
 * models) and each weight goes through cuBLAS's GEMM with F32 accumulation and F32
 * output. In cuBLAS's column-major terms: C (N x T, ld N) = W^T-as-stored (op T on the
 * K x N matrix the row-major W is) times in (K x T, ld K); C in column-major is `out`
 * in row-major (T, N).
 */
#include <stdio.h>

#include "gpu/cuda/cuda_internal.cuh"

enum { BLOCK = 256 };

__global__ static void to_half_kernel(__half *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(fminf(fmaxf(src[i], -65504.0f), 65504.0f)); /* saturate: F16 tops out at 65504 */
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

void cuda__matmul_group(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    const int64_t k = parts[0].w->ne0;
    const size_t need = (size_t)rows * (size_t)k * sizeof(__half);
    if (need > cb->act_half_bytes) { /* dev_reserve sized it for max_tokens x the widest input */
        char what[160];
        snprintf(what, sizeof what, "matmul: input of %lld x %lld exceeds what dev_reserve set aside", (long long)rows,
                 (long long)k);
        cuda__fault(cb, what);
        return;
    }
    quant_type converted = QUANT_F32; /* the storage type the buffer holds now */
    const float alpha = 1.0f, beta = 0.0f;
    for (int p = 0; p < n_parts; p++) {
        const dev_tensor *w = parts[p].w;
        if (w->type != QUANT_F16 && w->type != QUANT_BF16) { /* a one-row F32 "matrix" stays F32 */
            cuda__fault(cb, "matmul: a weight of one row is stored as F32; matmuls need F16/BF16 storage");
            return;
        }
        const bool bf16 = w->type == QUANT_BF16;
        if (converted != w->type) {
            if (bf16)
                to_bf16_kernel<<<cuda__grid(rows * k, BLOCK), BLOCK, 0, cb->stream>>>((__nv_bfloat16 *)cb->act_half, in,
                                                                                      rows * k);
            else
                to_half_kernel<<<cuda__grid(rows * k, BLOCK), BLOCK, 0, cb->stream>>>((__half *)cb->act_half, in,
                                                                                      rows * k);
            if (!cuda__launched(cb, "to_half_kernel")) return;
            converted = w->type;
        }
        const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
        if (!cuda__blas_ok(cb,
                           cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->ne1, (int)rows, (int)k, &alpha,
                                        w->data, type, (int)k, cb->act_half, type, (int)k, &beta, parts[p].out,
                                        CUDA_R_32F, (int)w->ne1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "cublasGemmEx"))
            return;
        if (parts[p].bias) {
            bias_kernel<<<cuda__grid(rows * w->ne1, BLOCK), BLOCK, 0, cb->stream>>>(
                parts[p].out, (const float *)parts[p].bias->data, rows, w->ne1);
            if (!cuda__launched(cb, "bias_kernel")) return;
        }
    }
}

/* cuda_gemv_half.cu: out (R, N) = in (R, K) . W (N, K)^T [+ bias (N)] for a few
 * activation rows on F16 or BF16 weights as the GPU stores them, in F32: the decode path
 * of BF16 and F16 models. Through cuBLAS, each product of a decode step first converts
 * its input to the weights' type (a launch) and then runs a GEMM launch per weight; here
 * the input stays F32 (so no conversion, and no rounding of it), and the weights of a
 * matmul group (Q/K/V, gate/up) share one launch. Decode is bound by reading the
 * weights once; a small model's decode step by its launches.
 *
 * Legend: R = activation rows (1..CUDA_GEMV_MAX_ROWS), N = weight rows, K = row length
 * (a multiple of 8: a weight row is read 16 bytes, 8 halves, at a time), RW = weight
 * rows per warp (2).
 *
 * Work split: a block is 4 warps, a warp takes RW consecutive weight rows of one part.
 * Lane l reads 16-byte pieces l, l + 32, ... of each of its rows (coalesced: a warp
 * reads 512 contiguous bytes of a row per step) and the 8 matching activations of every
 * row (two float4, through the read-only cache; every warp of the GPU reads the same
 * vectors, which stay in L2), and keeps RW x R sums. The sums are then added across the
 * warp by a butterfly (each value reduced on its own, in the same order on every run),
 * and lane 0 writes the RW x R results, adding the bias. No atomics: the same bits
 * every run, and a part of a group gets the bits it gets alone (its blocks do not
 * depend on the other parts).
 *
 * Accuracy: products of exact F16/BF16 weights and F32 inputs, summed in F32 per lane
 * (K/32 products) and then across lanes: closer to the exact product than the cuBLAS path,
 * whose inputs are rounded to F16/BF16.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpu/cuda/cuda_internal.cuh"

enum {
    HGEMV_WARPS = 4,
    HGEMV_THREADS = HGEMV_WARPS * 32,
    HGEMV_RW = 2,                             /* weight rows per warp */
    HGEMV_BLOCK_ROWS = HGEMV_WARPS * HGEMV_RW /* weight rows per block */
};

/* The weights of one launch: blocks [first_block[p], first_block[p + 1]) take part p. */
typedef struct hgemv_parts {
    int count;
    int64_t first_block[CUDA_GEMV_MAX_PARTS + 1];
    const uint4 *w[CUDA_GEMV_MAX_PARTS]; /* (N, K) halves, 16-byte aligned rows */
    float *out[CUDA_GEMV_MAX_PARTS];
    const float *bias[CUDA_GEMV_MAX_PARTS];
    int64_t n[CUDA_GEMV_MAX_PARTS];
} hgemv_parts;

/* The two halves of a 32-bit word as floats (the lower-addressed one first). */
template <bool BF16> __device__ static inline float2 halves_to_float2(uint32_t bits);
template <> __device__ inline float2 halves_to_float2<true>(uint32_t bits) {
    return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
}
template <> __device__ inline float2 halves_to_float2<false>(uint32_t bits) {
    __half2 h;
    memcpy(&h, &bits, sizeof h);
    return __half22float2(h);
}

/* sum += w (8 halves) . x (8 floats), in element order. */
template <bool BF16> __device__ static inline float dot8(uint4 w, float4 x0, float4 x1, float sum) {
    const float2 a = halves_to_float2<BF16>(w.x), b = halves_to_float2<BF16>(w.y);
    const float2 c = halves_to_float2<BF16>(w.z), d = halves_to_float2<BF16>(w.w);
    sum = fmaf(a.x, x0.x, sum);
    sum = fmaf(a.y, x0.y, sum);
    sum = fmaf(b.x, x0.z, sum);
    sum = fmaf(b.y, x0.w, sum);
    sum = fmaf(c.x, x1.x, sum);
    sum = fmaf(c.y, x1.y, sum);
    sum = fmaf(d.x, x1.z, sum);
    return fmaf(d.y, x1.w, sum);
}

template <bool BF16, int R>
__global__ static void __launch_bounds__(HGEMV_THREADS)
    hgemv_kernel(const __grid_constant__ hgemv_parts parts, const float *in, int64_t k) {
    int part = 0; /* this block's weight */
    while (part + 1 < parts.count && (int64_t)blockIdx.x >= parts.first_block[part + 1]) part++;
    const int64_t n = parts.n[part];
    const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
    const int64_t row0 = ((int64_t)blockIdx.x - parts.first_block[part]) * HGEMV_BLOCK_ROWS + warp * HGEMV_RW;
    if (row0 >= n) return; /* no block barrier below: a warp past the last row just leaves */

    const int64_t pieces = k / 8; /* 16-byte pieces per weight row */
    const uint4 *w_rows[HGEMV_RW];
#pragma unroll
    for (int i = 0; i < HGEMV_RW; i++) /* a row past the last repeats it: summed, never stored */
        w_rows[i] = parts.w[part] + (row0 + i < n ? row0 + i : n - 1) * pieces;
    const float4 *x = (const float4 *)in; /* row r's piece c: x[r * 2 * pieces + 2c], +1 */

    float sum[HGEMV_RW][R];
#pragma unroll
    for (int i = 0; i < HGEMV_RW; i++)
#pragma unroll
        for (int r = 0; r < R; r++) sum[i][r] = 0.0f;

#pragma unroll 4
    for (int64_t c = lane; c < pieces; c += 32) {
        uint4 wv[HGEMV_RW];
#pragma unroll
        for (int i = 0; i < HGEMV_RW; i++) wv[i] = __ldg(w_rows[i] + c);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float4 x0 = __ldg(x + (r * pieces + c) * 2), x1 = __ldg(x + (r * pieces + c) * 2 + 1);
#pragma unroll
            for (int i = 0; i < HGEMV_RW; i++) sum[i][r] = dot8<BF16>(wv[i], x0, x1, sum[i][r]);
        }
    }

#pragma unroll
    for (int i = 0; i < HGEMV_RW; i++)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int o = 16; o > 0; o /= 2) sum[i][r] += __shfl_xor_sync(0xffffffffu, sum[i][r], o);
    if (lane != 0) return;
    float *out = parts.out[part];
    const float *bias = parts.bias[part];
#pragma unroll
    for (int i = 0; i < HGEMV_RW; i++) {
        const int64_t row = row0 + i;
        if (row >= n) break;
#pragma unroll
        for (int r = 0; r < R; r++) out[r * n + row] = bias ? sum[i][r] + bias[row] : sum[i][r];
    }
}

template <bool BF16, int R>
static void hgemv_launch(cuda_backend *cb, const hgemv_parts &parts, const float *in, int64_t k, int64_t grid) {
    hgemv_kernel<BF16, R><<<(unsigned)grid, HGEMV_THREADS, 0, cb->stream>>>(parts, in, k);
    cuda__launched(cb, "hgemv_kernel");
}

template <bool BF16>
static void hgemv_launch_rows(cuda_backend *cb, const hgemv_parts &parts, const float *in, int64_t k, int64_t rows,
                              int64_t grid) {
    switch (rows) {
    case 1: hgemv_launch<BF16, 1>(cb, parts, in, k, grid); break;
    case 2: hgemv_launch<BF16, 2>(cb, parts, in, k, grid); break;
    case 3: hgemv_launch<BF16, 3>(cb, parts, in, k, grid); break;
    case 4: hgemv_launch<BF16, 4>(cb, parts, in, k, grid); break;
    case 5: hgemv_launch<BF16, 5>(cb, parts, in, k, grid); break;
    case 6: hgemv_launch<BF16, 6>(cb, parts, in, k, grid); break;
    case 7: hgemv_launch<BF16, 7>(cb, parts, in, k, grid); break;
    default: hgemv_launch<BF16, 8>(cb, parts, in, k, grid); break;
    }
}

bool cuda__gemv_half_takes(quant_type type, int64_t k, const void *w) {
    return (type == QUANT_F16 || type == QUANT_BF16) && k >= 8 && k % 8 == 0 && ((uintptr_t)w & 15) == 0;
}

void cuda__gemv_half_group(cuda_backend *cb, const cuda_gemv_part *group, int n_parts, const float *in, quant_type type,
                           int64_t k, int64_t rows) {
    if (cb->faulted) return;
    char what[200];
    if (rows < 1 || rows > CUDA_GEMV_MAX_ROWS || n_parts < 1 || n_parts > CUDA_GEMV_MAX_PARTS ||
        ((uintptr_t)in & 15) != 0) {
        snprintf(what, sizeof what, "gemv (half): %lld rows, %d weights, input at %p: outside 1..%d, 1..%d, 16-byte",
                 (long long)rows, n_parts, (const void *)in, (int)CUDA_GEMV_MAX_ROWS, (int)CUDA_GEMV_MAX_PARTS);
        cuda__fault(cb, what);
        return;
    }
    hgemv_parts parts = {};
    parts.count = n_parts;
    int64_t grid = 0;
    for (int p = 0; p < n_parts; p++) {
        if (!cuda__gemv_half_takes(type, k, group[p].w) || group[p].n < 1) {
            snprintf(what, sizeof what,
                     "gemv (half): a %s weight of %lld x %lld at %p (F16/BF16, K a multiple of 8, "
                     "16-byte aligned)",
                     quant_type_name(type), (long long)group[p].n, (long long)k, group[p].w);
            cuda__fault(cb, what);
            return;
        }
        parts.w[p] = (const uint4 *)group[p].w;
        parts.out[p] = group[p].out;
        parts.bias[p] = group[p].bias;
        parts.n[p] = group[p].n;
        parts.first_block[p] = grid;
        grid += (group[p].n + HGEMV_BLOCK_ROWS - 1) / HGEMV_BLOCK_ROWS;
    }
    parts.first_block[n_parts] = grid;
    if (grid > 0x7FFFFFFF) {
        cuda__fault(cb, "gemv (half): too many weight rows for one launch");
        return;
    }
    if (type == QUANT_BF16)
        hgemv_launch_rows<true>(cb, parts, in, k, rows, grid);
    else
        hgemv_launch_rows<false>(cb, parts, in, k, rows, grid);
}

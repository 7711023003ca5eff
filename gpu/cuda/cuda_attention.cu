/* cuda_attention.cu: causal attention over the paged F16 KV pools, for decode rows and
 * prefill chunks alike (each token attends to positions 0..pos of its own sequence).
 *
 * Legend: T = tokens in the step, H = query heads, Hk = KV heads, Dh = head width
 * (<= ATTN_MAX_DH), B = tokens per block, P = positions a token attends to (pos + 1).
 *
 * One thread block per (token, head), ATTN_WARPS warps. Warp w takes positions w,
 * w + ATTN_WARPS, ...; for each it computes the score (lanes split Dh, a shuffle sum)
 * and folds it into its own online softmax (running max m, sum l, and the weighted sum
 * of V, each lane holding Dh/32 of it). The warps' partial results are then merged
 * through shared memory. Every position is read once per (token, head); the query is
 * rounded to F16 first, as the CPU backend and llama.cpp do.
 */
#include <stdio.h>

#include "gpu/cuda/cuda_internal.cuh"

enum { ATTN_WARPS = 4, ATTN_MAX_DH = CUDA_ATTN_MAX_DH, ATTN_PER_LANE = ATTN_MAX_DH / 32 };

__global__ static void attention_kernel(float *out, const float *q, const __half *k_pool, const __half *v_pool,
                                        const int32_t *pos, const int32_t *seq, const int32_t *block_table,
                                        int32_t max_blocks, int32_t block_size, int n_heads, int n_kv_heads,
                                        int head_dim, float scale) {
    __shared__ float q_sh[ATTN_MAX_DH];
    __shared__ float m_sh[ATTN_WARPS], l_sh[ATTN_WARPS];
    __shared__ float acc_sh[ATTN_WARPS][ATTN_MAX_DH];

    const int token = blockIdx.x / n_heads, head = blockIdx.x % n_heads;
    const int kv_head = head / (n_heads / n_kv_heads);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n_pos = pos[token] + 1;
    const int32_t *blocks = block_table + (int64_t)seq[token] * max_blocks;
    const float *qt = q + ((int64_t)token * n_heads + head) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) q_sh[d] = __half2float(__float2half_rn(qt[d]));
    __syncthreads();

    float m = -INFINITY, l = 0.0f, acc[ATTN_PER_LANE];
#pragma unroll
    for (int i = 0; i < ATTN_PER_LANE; i++) acc[i] = 0.0f;
    const size_t row_stride = (size_t)n_kv_heads * (size_t)head_dim; /* one position of the pool */
    for (int j = warp; j < n_pos; j += ATTN_WARPS) {
        const size_t row =
            ((size_t)blocks[j / block_size] * (size_t)block_size + (size_t)(j % block_size)) * row_stride +
            (size_t)kv_head * (size_t)head_dim;
        const __half *k = k_pool + row;
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < ATTN_PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < head_dim) s = fmaf(__half2float(k[d]), q_sh[d], s);
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= scale;
        const float m_new = fmaxf(m, s);
        const float correction = __expf(m - m_new); /* 0 on the first position (m = -inf) */
        const float p = __expf(s - m_new);
        l = l * correction + p;
        const __half *v = v_pool + row;
#pragma unroll
        for (int i = 0; i < ATTN_PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < head_dim) acc[i] = fmaf(p, __half2float(v[d]), acc[i] * correction);
        }
        m = m_new;
    }
    if (lane == 0) {
        m_sh[warp] = m;
        l_sh[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ATTN_PER_LANE; i++) {
        const int d = lane + 32 * i;
        if (d < head_dim) acc_sh[warp][d] = acc[i];
    }
    __syncthreads();
    /* merge the warps: out = sum_w acc_w e^(m_w - M) / sum_w l_w e^(m_w - M) */
    float m_all = -INFINITY;
    for (int w = 0; w < ATTN_WARPS; w++) m_all = fmaxf(m_all, m_sh[w]);
    float l_all = 0.0f;
    for (int w = 0; w < ATTN_WARPS; w++)
        if (m_sh[w] > -INFINITY) l_all += l_sh[w] * __expf(m_sh[w] - m_all);
    float *o = out + ((int64_t)token * n_heads + head) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++)
            if (m_sh[w] > -INFINITY) sum += acc_sh[w][d] * __expf(m_sh[w] - m_all);
        o[d] = sum / l_all;
    }
}

void cuda__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv_base, int layer,
                     const dev_step *step, int64_t n_heads, float scale) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    const cuda_kv *kv = (const cuda_kv *)kv_base;
    const dev_kv_shape *s = &kv->common.shape;
    if (s->head_dim > ATTN_MAX_DH || n_heads % s->n_kv_heads != 0) {
        char what[160];
        snprintf(what, sizeof what, "attention: head width %d (max %d) or %lld heads over %d KV heads", s->head_dim,
                 ATTN_MAX_DH, (long long)n_heads, s->n_kv_heads);
        cuda__fault(cb, what);
        return;
    }
    const __half *k_pool = kv->data + (size_t)layer * 2 * kv->pool_stride;
    const __half *v_pool = k_pool + kv->pool_stride;
    const unsigned blocks = (unsigned)((int64_t)step->n_tokens * n_heads);
    attention_kernel<<<blocks, ATTN_WARPS * 32, 0, cb->stream>>>(out, q, k_pool, v_pool, step->pos, step->seq,
                                                                 step->block_table, step->max_blocks, s->block_size,
                                                                 (int)n_heads, s->n_kv_heads, s->head_dim, scale);
    cuda__launched(cb, "attention_kernel");
}

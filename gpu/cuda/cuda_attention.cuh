/* cuda_attention.cuh: what the attention kernels share: cuda_attention.cu (the rows
 * path for decode, the float tile path for prefill) and cuda_attention_mma.cu (the
 * tensor-core tile path for head widths 64 and 128). */
#ifndef SP_CUDA_ATTENTION_CUH
#define SP_CUDA_ATTENTION_CUH

#include <stdint.h>

#include "gpu/cuda/cuda_internal.cuh"

/* QT: step tokens per query tile. A tile whose tokens all belong to one sequence
 * ("uniform") is taken by a tile kernel, the tokens of the others by the rows kernel. */
enum { ATTN_TILE_Q = 16 };

/* Element offset, in a K or V pool [blocks][B][Hk][Dh], of position j of a sequence
 * whose block table row is `blocks`, for KV head kv_head. */
__device__ static inline size_t kv_offset(const int32_t *blocks, int j, int block_size, int n_kv_heads, int head_dim,
                                          int kv_head) {
    const size_t slot = (size_t)blocks[j / block_size] * (size_t)block_size + (size_t)(j % block_size);
    return (slot * (size_t)n_kv_heads + (size_t)kv_head) * (size_t)head_dim;
}

/* Row index, in a K or V pool [blocks][B][Hk] of rows, of position j of a sequence
 * whose block table row is `blocks`, for KV head kv_head: times the row's bytes, its
 * byte offset. */
__device__ static inline size_t kv_row_index(const int32_t *blocks, int j, int block_size, int n_kv_heads,
                                             int kv_head) {
    const size_t slot = (size_t)blocks[j / block_size] * (size_t)block_size + (size_t)(j % block_size);
    return slot * (size_t)n_kv_heads + (size_t)kv_head;
}

/* Element d of a pool row of type KV (sp_kv_type), as a float: F16 as stored, Q8_0
 * and Q4_0 as quant/quant.h decodes their blocks. */
template <int KV> __device__ static inline float kv_load(const unsigned char *row, int d) {
    if (KV == SP_KV_F16) return __half2float(((const __half *)row)[d]);
    const int i = d % QUANT_QK;
    if (KV == SP_KV_Q8_0) {
        const quant_block_q8_0 *blk = (const quant_block_q8_0 *)row + d / QUANT_QK;
        return __half2float(__ushort_as_half(blk->d)) * (float)blk->qs[i];
    }
    const quant_block_q4_0 *blk = (const quant_block_q4_0 *)row + d / QUANT_QK;
    const int q = i < QUANT_QK / 2 ? blk->qs[i] & 0x0F : blk->qs[i - QUANT_QK / 2] >> 4;
    return __half2float(__ushort_as_half(blk->d)) * (float)(q - 8);
}

/* Elements 2 d2 and 2 d2 + 1 of a pool row, as an F16 pair (the tile kernels' shared
 * memory form; F16 rows are read as they are). */
template <int KV> __device__ static inline __half2 kv_load_half2(const unsigned char *row, int d2) {
    if (KV == SP_KV_F16) return ((const __half2 *)row)[d2];
    return __floats2half2_rn(kv_load<KV>(row, 2 * d2), kv_load<KV>(row, 2 * d2 + 1));
}

/* Whether the step tokens [first, first + n) all belong to one sequence. The tile of
 * token t is [t / QT * QT, + min(QT, T - that)); tile_kernel takes the uniform tiles,
 * rows_kernel (mixed_tiles_only) the tokens of the others. */
__device__ static inline bool tile_is_uniform(const int32_t *seq, int first, int n) {
    const int32_t s0 = seq[first];
    for (int i = 1; i < n; i++)
        if (seq[first + i] != s0) return false;
    return true;
}

/* The uniform tiles of a prefill step on tensor cores (cuda_attention_mma.cu), for
 * q and out (T, H*Dh) and one layer's pools; false, with nothing launched, for a head
 * width it does not take (anything but 64 and 128). */
bool cuda__attention_mma(cuda_backend *cb, float *out, const float *q, const __half *k_pool, const __half *v_pool,
                         const dev_step *step, const dev_kv_shape *s, int n_heads, float scale);

#endif

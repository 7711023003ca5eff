/* cuda_attention_mma.cu: the uniform tiles of prefill attention on tensor cores, for
 * head widths of 64 and 128 (llama, qwen2, qwen3, smollm2): what attention_tile_kernel
 * (cuda_attention.cu) computes, with the two products (scores Q.K^T, output P.V) as
 * mma.sync m16n8k16 instructions on F16 with F32 sums instead of float FMAs. A prompt of
 * 2,048 tokens on an 8B model is ~1.1 TFLOP of attention; on CUDA cores that is most of
 * the prefill's time, on tensor cores a small part.
 *
 * Legend as in cuda_attention.cu: T tokens, H heads, Hk KV heads, G = H/Hk, Dh the head
 * width, B tokens per KV block, QT = 16 step tokens per query tile, PT = 64 positions
 * per K/V tile here. g = lane / 4 and t = lane % 4 (a lane's place in a fragment).
 *
 * One thread block per (query tile, KV head, group of up to 4 of its G query heads),
 * one warp per query head: the warps share each K/V tile, since their heads read the
 * same KV head of the same sequence. Only uniform tiles (every token of the 16 in one
 * sequence: tile_is_uniform, as attention_tile_kernel decides it) are taken; the rows
 * kernel takes the others, so each token is written by exactly one kernel.
 *
 * A warp holds its 16 queries as F16 A fragments (rounded as the other kernels round
 * them). Per K/V tile (loaded to shared memory by the whole block, 16 bytes a copy,
 * zeros past the tile's last position): S (16 x PT) = Q . K^T in registers (PT/8 score
 * fragments); the causal mask (position > the query's pos: -inf); an online softmax per
 * query row (a row's values are in the 4 lanes of a quad: two shuffles for its max; the
 * sum stays per lane until the end); the probabilities, rounded to F16, are already in
 * the A layout of the next product (the m16n8k16 accumulator of two adjacent 8-position
 * fragments is the A fragment of one 16-position chunk), so O (16 x Dh) += P . V needs
 * no shared memory for P. O lives in registers as Dh/8 accumulator fragments, whose rows
 * (g and g + 8) are known, so the softmax's rescaling is a multiply per register.
 *
 * Fragment layout (PTX ISA, mma.m16n8k16 with .f16 inputs and .f32 sums), per lane:
 *   A (16 x 16, row major): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
 *                           a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
 *   B (16 x 8, column major): b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]
 *   C (16 x 8): c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]
 * with the lower-indexed half of a pair in the low 16 bits of its register.
 *
 * Shared memory rows are Dh + 8 halves: the B fragments' 32-bit reads of K (rows g,
 * words t) and 16-bit reads of V (rows 2t, 2t+1, 2t+8, 2t+9, column g) fall in distinct
 * banks. Dh 128: 34 KiB, under the 48 KiB static limit.
 *
 * Arithmetic: scores are F16 x F16 products summed in F32 (tensor cores), then scaled;
 * probabilities F32, rounded to F16 for P.V (as the CPU backend rounds them); the
 * softmax's sums in F32 over the unrounded probabilities. Within the tolerance the
 * other kernels meet against the CPU, not bit for bit.
 */
#include <math.h>
#include <stdint.h>

#include "gpu/cuda/cuda_attention.cuh"

enum {
    MMA_POS = 64,  /* PT: positions per K/V tile */
    MMA_WARPS = 4, /* query heads per block at most */
};

__device__ static inline uint32_t pack_floats(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi); /* .x (lo) in the low 16 bits */
    return *(const uint32_t *)&h;
}

__device__ static inline uint32_t pack_halves(__half lo, __half hi) {
    return (uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16);
}

/* d (16 x 8) += a (16 x 16) . b (16 x 8), in the fragment layout above. */
__device__ static inline void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The largest of a quad's values (the 4 lanes holding one row of a fragment). */
__device__ static inline float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ static inline float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* e^(s - m) for a score s of a row whose running max is m (0 for a row that has no
 * position yet, m = -inf: a tile row past the step's end). */
__device__ static inline float prob(float s, float m) {
    return m == -INFINITY ? 0.0f : __expf(s - m);
}

template <int DH>
__global__ static void __launch_bounds__(MMA_WARPS * 32)
    attention_mma_kernel(float *out, const float *q, const __half *k_pool, const __half *v_pool, const int32_t *pos,
                         const int32_t *seq, const int32_t *block_table, int32_t max_blocks, int32_t block_size,
                         int n_tokens, int n_heads, int group, int n_kv_heads, float scale) {
    /* out (T, H*Dh), q (T, H*Dh); blockDim.x = 32 x (warps: min(G, MMA_WARPS)) */
    constexpr int STRIDE = DH + 8;  /* halves per shared row */
    constexpr int KC = DH / 16;     /* 16-wide chunks of a head: the k steps of Q.K^T */
    constexpr int DN = DH / 8;      /* 8-wide column fragments of O */
    constexpr int PN = MMA_POS / 8; /* 8-position fragments of S */
    constexpr int CHUNKS = DH / 8;  /* 16-byte copies per K or V row */
    __shared__ __align__(16) __half k_sh[MMA_POS * STRIDE];
    __shared__ __align__(16) __half v_sh[MMA_POS * STRIDE];

    const int first = (int)blockIdx.x * ATTN_TILE_Q; /* the tile's first step token */
    const int n_queries = min(ATTN_TILE_Q, n_tokens - first);
    if (!tile_is_uniform(seq, first, n_queries)) return; /* rows_kernel takes these tokens */

    const int n_warps = (int)blockDim.x / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int groups_per_kv = (group + n_warps - 1) / n_warps;
    const int kv_head = (int)blockIdx.y / groups_per_kv;
    const int in_group = (int)blockIdx.y % groups_per_kv * n_warps + warp;
    const bool active = in_group < group; /* a warp past the group's heads only loads tiles */
    const int head = kv_head * group + (active ? in_group : 0);
    const int32_t *blocks = block_table + (int64_t)seq[first] * max_blocks;

    int n_pos = 0; /* positions the tile reads: 0 .. the largest pos */
    for (int r = 0; r < n_queries; r++) n_pos = max(n_pos, pos[first + r] + 1);
    const bool has0 = g < n_queries, has1 = g + 8 < n_queries; /* this lane's rows g, g + 8 */
    const int last0 = has0 ? pos[first + g] : -1, last1 = has1 ? pos[first + g + 8] : -1;

    /* the warp's 16 queries as A fragments, rounded to F16 (zeros past the step's end) */
    uint32_t qa[KC][4];
    {
        const float *q0 = q + ((int64_t)(first + g) * n_heads + head) * DH;
        const float *q1 = q + ((int64_t)(first + g + 8) * n_heads + head) * DH;
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            const int c = kc * 16 + 2 * t;
            qa[kc][0] = has0 ? pack_floats(q0[c], q0[c + 1]) : 0u;
            qa[kc][1] = has1 ? pack_floats(q1[c], q1[c + 1]) : 0u;
            qa[kc][2] = has0 ? pack_floats(q0[c + 8], q0[c + 9]) : 0u;
            qa[kc][3] = has1 ? pack_floats(q1[c + 8], q1[c + 9]) : 0u;
        }
    }

    float m0 = -INFINITY, m1 = -INFINITY; /* running max of rows g, g + 8 */
    float l0 = 0.0f, l1 = 0.0f;           /* this lane's share of their sums of e^(s - m) */
    float o[DN][4];                       /* O's fragments: rows g, g + 8, columns 8 dn + 2t, +1 */
#pragma unroll
    for (int dn = 0; dn < DN; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;

    for (int tile0 = 0; tile0 < n_pos; tile0 += MMA_POS) {
        const int tile_n = min(MMA_POS, n_pos - tile0);
        __syncthreads(); /* every warp is done with the last tile */
        for (int i = threadIdx.x; i < MMA_POS * CHUNKS; i += blockDim.x) {
            const int p = i / CHUNKS, c = i % CHUNKS;
            uint4 k8 = make_uint4(0u, 0u, 0u, 0u), v8 = k8;
            if (p < tile_n) { /* a K/V row is 16-byte aligned: Dh and the pools' bases are */
                const size_t at = kv_offset(blocks, tile0 + p, block_size, n_kv_heads, DH, kv_head);
                k8 = ((const uint4 *)(k_pool + at))[c];
                v8 = ((const uint4 *)(v_pool + at))[c];
            }
            *(uint4 *)(k_sh + p * STRIDE + c * 8) = k8;
            *(uint4 *)(v_sh + p * STRIDE + c * 8) = v8;
        }
        __syncthreads();
        if (!active) continue;

        /* S = Q . K^T: B[k][n] = K[position 8 pn + n][width 16 kc + k] */
        float s[PN][4];
#pragma unroll
        for (int pn = 0; pn < PN; pn++) s[pn][0] = s[pn][1] = s[pn][2] = s[pn][3] = 0.0f;
#pragma unroll
        for (int kc = 0; kc < KC; kc++)
#pragma unroll
            for (int pn = 0; pn < PN; pn++) {
                const __half *kr = k_sh + (pn * 8 + g) * STRIDE + kc * 16 + 2 * t;
                const uint32_t b[2] = {*(const uint32_t *)kr, *(const uint32_t *)(kr + 8)};
                mma_16x8x16(s[pn], qa[kc], b);
            }

        /* scale and mask: s[pn][e] is row g at position tile0 + 8 pn + 2t + e, s[pn][2 + e] row g + 8 */
        float max0 = -INFINITY, max1 = -INFINITY;
#pragma unroll
        for (int pn = 0; pn < PN; pn++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int p = tile0 + pn * 8 + 2 * t + e;
                s[pn][e] = p <= last0 ? s[pn][e] * scale : -INFINITY;
                s[pn][2 + e] = p <= last1 ? s[pn][2 + e] * scale : -INFINITY;
                max0 = fmaxf(max0, s[pn][e]);
                max1 = fmaxf(max1, s[pn][2 + e]);
            }
        const float new0 = fmaxf(m0, quad_max(max0)), new1 = fmaxf(m1, quad_max(max1));
        const float c0 = new0 == -INFINITY ? 1.0f : __expf(m0 - new0); /* 0 on a row's first positions */
        const float c1 = new1 == -INFINITY ? 1.0f : __expf(m1 - new1);
        m0 = new0;
        m1 = new1;
        l0 *= c0;
        l1 *= c1;
#pragma unroll
        for (int dn = 0; dn < DN; dn++) {
            o[dn][0] *= c0;
            o[dn][1] *= c0;
            o[dn][2] *= c1;
            o[dn][3] *= c1;
        }

        /* O += P . V, 16 positions at a time: P's A fragment for positions 16 kc .. +15 is
         * the score fragments 2 kc (columns 2t, 2t+1) and 2 kc + 1 (columns 2t+8, 2t+9);
         * B[k][n] = V[position 16 kc + k][width 8 dn + n] */
#pragma unroll
        for (int kc = 0; kc < PN / 2; kc++) {
            const float p00 = prob(s[2 * kc][0], m0), p01 = prob(s[2 * kc][1], m0);
            const float p10 = prob(s[2 * kc][2], m1), p11 = prob(s[2 * kc][3], m1);
            const float p20 = prob(s[2 * kc + 1][0], m0), p21 = prob(s[2 * kc + 1][1], m0);
            const float p30 = prob(s[2 * kc + 1][2], m1), p31 = prob(s[2 * kc + 1][3], m1);
            l0 += (p00 + p01) + (p20 + p21);
            l1 += (p10 + p11) + (p30 + p31);
            const uint32_t pa[4] = {pack_floats(p00, p01), pack_floats(p10, p11), pack_floats(p20, p21),
                                    pack_floats(p30, p31)};
            const __half *vr = v_sh + (kc * 16 + 2 * t) * STRIDE + g;
#pragma unroll
            for (int dn = 0; dn < DN; dn++) {
                const __half *v = vr + dn * 8;
                const uint32_t b[2] = {pack_halves(v[0], v[STRIDE]), pack_halves(v[8 * STRIDE], v[9 * STRIDE])};
                mma_16x8x16(o[dn], pa, b);
            }
        }
    }
    if (!active) return;

    l0 = quad_sum(l0); /* l > 0 for a real row: position 0 is always attended to */
    l1 = quad_sum(l1);
    float *o0 = out + ((int64_t)(first + g) * n_heads + head) * DH;
    float *o1 = out + ((int64_t)(first + g + 8) * n_heads + head) * DH;
#pragma unroll
    for (int dn = 0; dn < DN; dn++) {
        const int c = dn * 8 + 2 * t;
        if (has0) {
            o0[c] = o[dn][0] / l0;
            o0[c + 1] = o[dn][1] / l0;
        }
        if (has1) {
            o1[c] = o[dn][2] / l1;
            o1[c + 1] = o[dn][3] / l1;
        }
    }
}

bool cuda__attention_mma(cuda_backend *cb, float *out, const float *q, const __half *k_pool, const __half *v_pool,
                         const dev_step *step, const dev_kv_shape *s, int n_heads, float scale) {
    if (s->head_dim != 64 && s->head_dim != 128) return false;
    const int group = n_heads / s->n_kv_heads;
    const int warps = group < MMA_WARPS ? group : MMA_WARPS;
    const dim3 grid((unsigned)((step->n_tokens + ATTN_TILE_Q - 1) / ATTN_TILE_Q),
                    (unsigned)(s->n_kv_heads * ((group + warps - 1) / warps)));
    if (s->head_dim == 64)
        attention_mma_kernel<64><<<grid, (unsigned)(32 * warps), 0, cb->stream>>>(
            out, q, k_pool, v_pool, step->pos, step->seq, step->block_table, step->max_blocks, s->block_size,
            step->n_tokens, n_heads, group, s->n_kv_heads, scale);
    else
        attention_mma_kernel<128><<<grid, (unsigned)(32 * warps), 0, cb->stream>>>(
            out, q, k_pool, v_pool, step->pos, step->seq, step->block_table, step->max_blocks, s->block_size,
            step->n_tokens, n_heads, group, s->n_kv_heads, scale);
    cuda__launched(cb, "attention_mma_kernel");
    return true;
}

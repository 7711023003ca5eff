/* cuda_attention.cu: causal attention over the paged KV pools, for decode rows and
 * prefill chunks alike (each token attends to positions 0..pos of its own sequence).
 * Pools in F16, Q8_0 or Q4_0 (sp_kv_type): every kernel is a template on the type and
 * reads a row's elements through kv_load (cuda_attention.cuh), so the quantized blocks
 * are read directly, dequantized in registers (rows path) or into the F16 shared-memory
 * tiles (tiles path); the tensor-core path takes F16 pools only.
 *
 * Legend: T = tokens in the step, H = query heads, Hk = KV heads, G = H/Hk (query heads
 * per KV head), Dh = head width (<= CUDA_ATTN_MAX_DH), B = tokens per KV block,
 * P = positions a token attends to (pos + 1), S = splits of a token's positions,
 * QT = step tokens per query tile, PT = positions per K/V tile. A "row" is one
 * (token, head) pair: T*H of them, row r = token * H + head.
 *
 * Two paths, chosen on the host from values a captured decode graph keeps fixed (T, the
 * number of sequences, H, Dh, the block table's width, the GPU's SM count), never from
 * pos or seq: those live on the device and change between replays of a graph.
 *
 * 1. Rows (steps of no more tokens than sequences, as decode batches are: no query
 *    tile would share its K/V): rows_kernel, one thread block per (row, split).
 *    Split s takes positions [s*c, min((s+1)*c, P)) with c = ceil(P/S), P read on the
 *    device, so an empty range (short sequences, s*c >= P) is possible. Warp w takes
 *    positions w, w + 4, ... of the range; for each it computes the score (lanes split
 *    Dh, a shuffle sum) and folds it into its own online softmax (running max m, sum l,
 *    and the weighted sum of V, each lane holding Dh/32 of it); the warps are merged
 *    through shared memory. With S = 1 the block writes the normalized output;
 *    otherwise it writes its partial (m, l, unnormalized acc; an empty range gives
 *    m = -inf, l = 0, acc = 0) to cb->attn_partial, and merge_kernel, one block per
 *    row, combines the S partials: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M),
 *    M = max_s m_s, skipping empty splits. Splits (flash-decoding) keep a long
 *    sequence from being one long serial loop while the rest of the GPU idles: see
 *    attention_splits for S.
 * 2. Tiles (steps with prefill chunks): for head widths 64 and 128 on tensor cores
 *    (cuda_attention_mma.cu: the same tiles, the products as mma instructions);
 *    otherwise tile_kernel, one thread block per (QT
 *    consecutive step tokens, head). When the QT tokens all belong to one sequence (a
 *    "uniform" tile: the inside of a prefill chunk) the block loads K and V tiles of PT
 *    positions of that sequence into shared memory once for all QT queries: lane j
 *    scores position j of the tile for the 4 queries of its warp (no shuffles), each
 *    query keeps its own online softmax (masking the positions past its own pos), and
 *    lane j then accumulates widths j, j + 32, ... of the 4 queries' weighted sums of V.
 *    Tokens of mixed tiles (a chunk's edges, decode rows beside it) are taken by
 *    rows_kernel with S = 1 in a second launch; both kernels decide "uniform" with
 *    tile_is_uniform, so each token is written by exactly one of them. The tile path
 *    needs an even Dh (half2 loads); an odd Dh takes the rows path.
 *
 * Arithmetic: the query is rounded to F16 first, as the CPU backend and llama.cpp do;
 * scores are F16 K times that query with float sums, times the scale; probabilities
 * stay in float (the CPU rounds them to F16), so results match the CPU backend
 * (gpu/host/host_attention.c) within float tolerance, not bit for bit. Positions past
 * the largest pos of a tile are never read (the pools are not cleared), their shared
 * memory is zeroed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "gpu/cuda/cuda_attention.cuh"

enum {
    ATTN_WARPS = 4,                               /* warps per thread block, every kernel */
    ATTN_THREADS = ATTN_WARPS * 32,               /* threads per thread block */
    ATTN_MAX_DH = CUDA_ATTN_MAX_DH,               /* widest head */
    ATTN_PER_LANE = ATTN_MAX_DH / 32,             /* widths of one head a lane holds: d = lane + 32 i */
    ATTN_MAX_SPLITS = 64,                         /* S at most */
    ATTN_SPLIT_POSITIONS = 256,                   /* S aims at no more positions per split than this */
    ATTN_SPLIT_BLOCKS_PER_SM = 64,                /* and at no more (row, split) blocks per SM than this */
    ATTN_TILE_P = 32,                             /* PT: positions per K/V tile, one per lane */
    ATTN_ROWS_PER_WARP = ATTN_TILE_Q / ATTN_WARPS /* queries of a tile each warp keeps */
};

/* ---- shared by the kernels ---- */

__device__ static inline float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ static inline float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* The split path's partial results, carved from cb->attn_partial for R rows of S
 * splits: entry e = row * S + split. */
typedef struct attn_partials {
    float *acc; /* (R*S, Dh) unnormalized weighted sums of V */
    float *m;   /* (R*S) running max of the scores; -inf for an empty split */
    float *l;   /* (R*S) sum of e^(score - m); 0 for an empty split */
} attn_partials;

/* ---- rows path: one thread block per (row, split) ---- */

template <int KV>
__global__ static void __launch_bounds__(ATTN_THREADS)
    attention_rows_kernel(float *out, attn_partials partials, const float *q, const unsigned char *k_pool,
                          const unsigned char *v_pool, size_t row_bytes, const int32_t *pos, const int32_t *seq,
                          const int32_t *block_table, int32_t max_blocks, int32_t block_size, int n_tokens, int n_heads,
                          int group, int n_kv_heads, int head_dim, int n_splits, bool mixed_tiles_only, float scale) {
    /* out (T, H*Dh) when n_splits == 1, else partials; q (T, H*Dh) */
    __shared__ float q_sh[ATTN_MAX_DH];
    __shared__ float m_sh[ATTN_WARPS], l_sh[ATTN_WARPS];
    __shared__ float acc_sh[ATTN_WARPS][ATTN_MAX_DH];

    /* blockIdx.x = (token * S + split) * H + head: the heads of one KV head are neighbours
     * and read the same K/V rows at about the same time */
    const int head = (int)blockIdx.x % n_heads;
    const int split = (int)blockIdx.x / n_heads % n_splits;
    const int token = (int)blockIdx.x / n_heads / n_splits;
    if (mixed_tiles_only) {
        const int first = token / ATTN_TILE_Q * ATTN_TILE_Q;
        if (tile_is_uniform(seq, first, min(ATTN_TILE_Q, n_tokens - first))) return; /* tile_kernel's token */
    }
    const int kv_head = head / group;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n_pos = pos[token] + 1;                    /* P */
    const int chunk = (n_pos + n_splits - 1) / n_splits; /* c = ceil(P/S) >= 1 */
    const int begin = split * chunk;                     /* >= P for an empty split */
    const int end = min(begin + chunk, n_pos);
    const int32_t *blocks = block_table + (int64_t)seq[token] * max_blocks;
    const int64_t row = (int64_t)token * n_heads + head;
    const float *qt = q + row * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += ATTN_THREADS) q_sh[d] = __half2float(__float2half_rn(qt[d]));
    __syncthreads();

    float m = -INFINITY, l = 0.0f, acc[ATTN_PER_LANE];
#pragma unroll
    for (int i = 0; i < ATTN_PER_LANE; i++) acc[i] = 0.0f;
    for (int j = begin + warp; j < end; j += ATTN_WARPS) {
        const size_t at = kv_row_index(blocks, j, block_size, n_kv_heads, kv_head) * row_bytes;
        const unsigned char *k = k_pool + at;
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < ATTN_PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < head_dim) s = fmaf(kv_load<KV>(k, d), q_sh[d], s);
        }
        s = warp_sum(s) * scale;
        const float m_new = fmaxf(m, s);
        const float correction = __expf(m - m_new); /* 0 on the first position (m = -inf) */
        const float p = __expf(s - m_new);
        l = l * correction + p;
        const unsigned char *v = v_pool + at;
#pragma unroll
        for (int i = 0; i < ATTN_PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < head_dim) acc[i] = fmaf(p, kv_load<KV>(v, d), acc[i] * correction);
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
    /* merge the warps: acc = sum_w acc_w e^(m_w - M), l = sum_w l_w e^(m_w - M); a warp
     * that saw no position (m_w = -inf) adds nothing, and if none did (an empty split)
     * M = -inf, l = 0, acc = 0 */
    float m_all = -INFINITY;
    for (int w = 0; w < ATTN_WARPS; w++) m_all = fmaxf(m_all, m_sh[w]);
    float l_all = 0.0f;
    for (int w = 0; w < ATTN_WARPS; w++)
        if (m_sh[w] > -INFINITY) l_all += l_sh[w] * __expf(m_sh[w] - m_all);
    const int64_t entry = row * n_splits + split; /* partials entry, when S > 1 */
    for (int d = threadIdx.x; d < head_dim; d += ATTN_THREADS) {
        float sum = 0.0f;
        for (int w = 0; w < ATTN_WARPS; w++)
            if (m_sh[w] > -INFINITY) sum += acc_sh[w][d] * __expf(m_sh[w] - m_all);
        if (n_splits == 1)
            out[row * head_dim + d] = sum / l_all; /* S = 1: the range is 0..P-1, never empty */
        else
            partials.acc[entry * head_dim + d] = sum;
    }
    if (n_splits > 1 && threadIdx.x == 0) {
        partials.m[entry] = m_all;
        partials.l[entry] = l_all;
    }
}

/* One thread block per row: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M). */
__global__ static void __launch_bounds__(ATTN_THREADS)
    attention_merge_kernel(float *out, attn_partials partials, int head_dim, int n_splits) {
    /* out (T, H*Dh) */
    __shared__ float w_sh[ATTN_MAX_SPLITS]; /* e^(m_s - M), 0 for an empty split */
    const int64_t row = blockIdx.x;
    const int64_t first = row * n_splits; /* the row's first entry */
    float m_all = -INFINITY;              /* M; split 0 is never empty, so finite */
    for (int s = 0; s < n_splits; s++) m_all = fmaxf(m_all, partials.m[first + s]);
    for (int s = threadIdx.x; s < n_splits; s += ATTN_THREADS) {
        const float m = partials.m[first + s];
        w_sh[s] = m > -INFINITY ? __expf(m - m_all) : 0.0f;
    }
    __syncthreads();
    float l_all = 0.0f;
    for (int s = 0; s < n_splits; s++)
        if (w_sh[s] != 0.0f) l_all += partials.l[first + s] * w_sh[s];
    for (int d = threadIdx.x; d < head_dim; d += ATTN_THREADS) {
        float sum = 0.0f;
        for (int s = 0; s < n_splits; s++)
            if (w_sh[s] != 0.0f) sum += partials.acc[(first + s) * head_dim + d] * w_sh[s];
        out[row * head_dim + d] = sum / l_all;
    }
}

/* ---- tiles path: one thread block per (QT step tokens, head) ---- */

/* Halfs per K row in the tile's shared memory: lane j reads 4-byte word
 * j * stride / 2 + d/2 of it, so an odd stride / 2 puts the 32 lanes in 32 banks. */
__host__ __device__ constexpr int tile_k_stride(int head_dim) {
    return (head_dim / 2) % 2 == 1 ? head_dim : head_dim + 2;
}

/* tile_kernel's dynamic shared memory, in this order:
 *   k (PT, k_stride) F16, v (PT, Dh) F16, q (QT, Dh) F16, p (QT, PT) F32.
 * With an even Dh every part starts 4-byte aligned. */
__host__ __device__ constexpr size_t tile_smem_bytes(int head_dim) {
    return sizeof(__half) * ((size_t)ATTN_TILE_P * (size_t)tile_k_stride(head_dim) +
                             (size_t)ATTN_TILE_P * (size_t)head_dim + (size_t)ATTN_TILE_Q * (size_t)head_dim) +
           sizeof(float) * (size_t)ATTN_TILE_Q * (size_t)ATTN_TILE_P;
}
static_assert(tile_smem_bytes(ATTN_MAX_DH) <= 48 * 1024, "tile_kernel: shared memory past the 48 KiB default");
static_assert(ATTN_TILE_P == 32 && ATTN_TILE_Q == ATTN_WARPS * ATTN_ROWS_PER_WARP, "tile_kernel's thread layout");

template <int KV>
__global__ static void __launch_bounds__(ATTN_THREADS)
    attention_tile_kernel(float *out, const float *q, const unsigned char *k_pool, const unsigned char *v_pool,
                          size_t row_bytes, const int32_t *pos, const int32_t *seq, const int32_t *block_table,
                          int32_t max_blocks, int32_t block_size, int n_tokens, int n_heads, int group, int n_kv_heads,
                          int head_dim, float scale) {
    /* out (T, H*Dh), q (T, H*Dh) */
    extern __shared__ __align__(16) unsigned char tile_sh[];
    const int first = (int)blockIdx.x * ATTN_TILE_Q; /* the tile's first step token */
    const int n_queries = min(ATTN_TILE_Q, n_tokens - first);
    if (!tile_is_uniform(seq, first, n_queries)) return; /* rows_kernel takes these tokens */

    const int head = (int)blockIdx.y;
    const int kv_head = head / group;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int half_dh = head_dim / 2; /* Dh is even on this path */
    const int k_stride = tile_k_stride(head_dim);
    __half *k_sh = (__half *)tile_sh;                       /* (PT, k_stride) */
    __half *v_sh = k_sh + ATTN_TILE_P * k_stride;           /* (PT, Dh) */
    __half *q_sh = v_sh + ATTN_TILE_P * head_dim;           /* (QT, Dh) */
    float *p_sh = (float *)(q_sh + ATTN_TILE_Q * head_dim); /* (QT, PT) */
    const int32_t *blocks = block_table + (int64_t)seq[first] * max_blocks;

    /* the queries, rounded to F16; zeros for tile rows past the step's end */
    for (int i = threadIdx.x; i < ATTN_TILE_Q * head_dim; i += ATTN_THREADS) {
        const int r = i / head_dim, d = i % head_dim;
        const float x = r < n_queries ? q[((int64_t)(first + r) * n_heads + head) * head_dim + d] : 0.0f;
        q_sh[i] = __float2half_rn(x);
    }
    /* positions the tile reads: 0..n_pos-1, n_pos = the largest pos + 1 */
    int n_pos = 0;
    for (int r = 0; r < n_queries; r++) n_pos = max(n_pos, pos[first + r] + 1);

    /* this warp's queries: tile row warp * 4 + i; a row past the step's end gets
     * last = -1, so every position is masked for it and it is never written */
    int last[ATTN_ROWS_PER_WARP]; /* the last position the query attends to: its pos */
    float m[ATTN_ROWS_PER_WARP], l[ATTN_ROWS_PER_WARP], acc[ATTN_ROWS_PER_WARP][ATTN_PER_LANE];
#pragma unroll
    for (int i = 0; i < ATTN_ROWS_PER_WARP; i++) {
        const int r = warp * ATTN_ROWS_PER_WARP + i;
        last[i] = r < n_queries ? pos[first + r] : -1;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < ATTN_PER_LANE; c++) acc[i][c] = 0.0f;
    }

    for (int tile0 = 0; tile0 < n_pos; tile0 += ATTN_TILE_P) {
        const int tile_n = min(ATTN_TILE_P, n_pos - tile0); /* positions of this tile anyone attends to */
        /* q_sh is written (first tile); every warp is done with the last tile's k_sh, v_sh, p_sh */
        __syncthreads();
        for (int i = threadIdx.x; i < ATTN_TILE_P * half_dh; i += ATTN_THREADS) {
            const int p = i / half_dh, d2 = i % half_dh; /* position tile0 + p, widths 2 d2, 2 d2 + 1 */
            __half2 k2 = __float2half2_rn(0.0f), v2 = __float2half2_rn(0.0f);
            if (p < tile_n) {
                const size_t at = kv_row_index(blocks, tile0 + p, block_size, n_kv_heads, kv_head) * row_bytes;
                k2 = kv_load_half2<KV>(k_pool + at, d2);
                v2 = kv_load_half2<KV>(v_pool + at, d2);
            }
            ((__half2 *)(k_sh + p * k_stride))[d2] = k2;
            ((__half2 *)(v_sh + p * head_dim))[d2] = v2;
        }
        __syncthreads();

        /* scores of position tile0 + lane for the warp's queries */
        const __half2 *k_row = (const __half2 *)(k_sh + lane * k_stride);
        float s[ATTN_ROWS_PER_WARP];
#pragma unroll
        for (int i = 0; i < ATTN_ROWS_PER_WARP; i++) s[i] = 0.0f;
        for (int d2 = 0; d2 < half_dh; d2++) {
            const float2 k = __half22float2(k_row[d2]);
#pragma unroll
            for (int i = 0; i < ATTN_ROWS_PER_WARP; i++) {
                const __half2 *q_row = (const __half2 *)(q_sh + (warp * ATTN_ROWS_PER_WARP + i) * head_dim);
                const float2 qv = __half22float2(q_row[d2]);
                s[i] = fmaf(k.x, qv.x, s[i]);
                s[i] = fmaf(k.y, qv.y, s[i]);
            }
        }

        /* online softmax: fold the tile's scores into each query's (m, l); p to p_sh */
        float correction[ATTN_ROWS_PER_WARP];
#pragma unroll
        for (int i = 0; i < ATTN_ROWS_PER_WARP; i++) {
            const float score = tile0 + lane <= last[i] ? s[i] * scale : -INFINITY;
            const float m_new = fmaxf(m[i], warp_max(score));
            /* m_new = -inf: the query has no position yet (a row past the step's end) */
            const float p = m_new == -INFINITY ? 0.0f : __expf(score - m_new);
            correction[i] = m_new == -INFINITY ? 1.0f : __expf(m[i] - m_new); /* 0 on its first tile */
            l[i] = l[i] * correction[i] + warp_sum(p);
            m[i] = m_new;
            p_sh[(warp * ATTN_ROWS_PER_WARP + i) * ATTN_TILE_P + lane] = p;
        }
        __syncwarp(); /* the warp's p_sh rows, written by all its lanes, read by all its lanes */

        /* acc += p . V over the tile; lane holds widths lane + 32 c */
#pragma unroll
        for (int i = 0; i < ATTN_ROWS_PER_WARP; i++)
#pragma unroll
            for (int c = 0; c < ATTN_PER_LANE; c++) acc[i][c] *= correction[i];
        for (int p = 0; p < tile_n; p++) {
#pragma unroll
            for (int c = 0; c < ATTN_PER_LANE; c++) {
                const int d = lane + 32 * c;
                if (d < head_dim) {
                    const float v = __half2float(v_sh[p * head_dim + d]);
#pragma unroll
                    for (int i = 0; i < ATTN_ROWS_PER_WARP; i++)
                        acc[i][c] = fmaf(p_sh[(warp * ATTN_ROWS_PER_WARP + i) * ATTN_TILE_P + p], v, acc[i][c]);
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < ATTN_ROWS_PER_WARP; i++) {
        const int r = warp * ATTN_ROWS_PER_WARP + i;
        if (r >= n_queries) continue;
        float *o = out + ((int64_t)(first + r) * n_heads + head) * head_dim;
#pragma unroll
        for (int c = 0; c < ATTN_PER_LANE; c++) {
            const int d = lane + 32 * c;
            if (d < head_dim) o[d] = acc[i][c] / l[i]; /* l > 0: every query attends to position 0 */
        }
    }
}

/* ---- the op ---- */

/* S for the rows path, from values a captured graph keeps (never pos or seq): enough
 * splits that none takes more than ATTN_SPLIT_POSITIONS positions of the longest
 * sequence the block table holds (capacity), but at most ATTN_MAX_SPLITS, at most
 * ATTN_SPLIT_BLOCKS_PER_SM (row, split) blocks per SM (past that the GPU is busy
 * anyway and more splits only add partials to merge), and partials that fit
 * cb->attn_partial. 1 (no partials) without that scratch (dev_reserve not called). */
static int attention_splits(const cuda_backend *cb, int64_t n_rows, int64_t capacity, int head_dim) {
    if (!cb->attn_partial) return 1;
    int64_t splits = (capacity + ATTN_SPLIT_POSITIONS - 1) / ATTN_SPLIT_POSITIONS;
    const int64_t by_blocks = (int64_t)ATTN_SPLIT_BLOCKS_PER_SM * cb->n_sms / n_rows;
    const int64_t by_bytes =
        (int64_t)(CUDA_ATTN_PARTIAL_BYTES / ((size_t)n_rows * (size_t)(head_dim + 2) * sizeof(float)));
    if (splits > ATTN_MAX_SPLITS) splits = ATTN_MAX_SPLITS;
    if (splits > by_blocks) splits = by_blocks;
    if (splits > by_bytes) splits = by_bytes;
    return splits < 1 ? 1 : (int)splits;
}

/* attn_partial carved for n_rows rows of n_splits splits (attn_partials); the whole
 * takes n_rows * n_splits * (Dh + 2) floats, which attention_splits keeps in bounds. */
static attn_partials attention_partials(const cuda_backend *cb, int64_t n_rows, int n_splits, int head_dim) {
    const size_t entries = (size_t)n_rows * (size_t)n_splits;
    attn_partials p;
    p.acc = cb->attn_partial;
    p.m = p.acc + entries * (size_t)head_dim;
    p.l = p.m + entries;
    return p;
}

/* The kernels for pools of type KV (the shapes checked by cuda__attention). */
template <int KV>
static void attention_launch(cuda_backend *cb, float *out, const float *q, const cuda_kv *kv,
                             const unsigned char *k_pool, const unsigned char *v_pool, const dev_step *step,
                             int64_t n_heads, float scale) {
    const dev_kv_shape *s = &kv->common.shape;
    const int64_t n_rows = (int64_t)step->n_tokens * n_heads; /* (token, head) pairs */
    const int group = (int)n_heads / s->n_kv_heads;           /* G */
    const int head_dim = s->head_dim;
    const size_t row_bytes = kv->row_bytes;

    /* no more tokens than sequences (decode batches, the graphs' padded ones among
     * them): no K/V tile to share, so rows, split; an odd Dh too (tiles load half2) */
    if (step->n_tokens <= step->n_seqs || head_dim % 2 != 0) {
        const int64_t capacity = (int64_t)step->max_blocks * s->block_size;
        const int n_splits = attention_splits(cb, n_rows, capacity, head_dim);
        const attn_partials partials =
            n_splits > 1 ? attention_partials(cb, n_rows, n_splits, head_dim) : attn_partials{NULL, NULL, NULL};
        attention_rows_kernel<KV><<<(unsigned)(n_rows * n_splits), ATTN_THREADS, 0, cb->stream>>>(
            out, partials, q, k_pool, v_pool, row_bytes, step->pos, step->seq, step->block_table, step->max_blocks,
            s->block_size, step->n_tokens, (int)n_heads, group, s->n_kv_heads, head_dim, n_splits, false, scale);
        if (!cuda__launched(cb, "attention_rows_kernel") || n_splits == 1) return;
        attention_merge_kernel<<<(unsigned)n_rows, ATTN_THREADS, 0, cb->stream>>>(out, partials, head_dim, n_splits);
        cuda__launched(cb, "attention_merge_kernel");
        return;
    }

    /* prefill chunks: uniform tiles on tensor cores (F16 pools, Dh 64, 128) or through
     * tile_kernel, the tokens of mixed tiles through rows_kernel (one split) */
    if (KV != SP_KV_F16 || !cuda__attention_mma(cb, out, q, (const __half *)k_pool, (const __half *)v_pool, step, s,
                                                (int)n_heads, scale)) {
        const dim3 tiles((unsigned)((step->n_tokens + ATTN_TILE_Q - 1) / ATTN_TILE_Q), (unsigned)n_heads);
        attention_tile_kernel<KV><<<tiles, ATTN_THREADS, tile_smem_bytes(head_dim), cb->stream>>>(
            out, q, k_pool, v_pool, row_bytes, step->pos, step->seq, step->block_table, step->max_blocks, s->block_size,
            step->n_tokens, (int)n_heads, group, s->n_kv_heads, head_dim, scale);
    }
    if (!cuda__launched(cb, "attention tiles")) return;
    attention_rows_kernel<KV><<<(unsigned)n_rows, ATTN_THREADS, 0, cb->stream>>>(
        out, attn_partials{NULL, NULL, NULL}, q, k_pool, v_pool, row_bytes, step->pos, step->seq, step->block_table,
        step->max_blocks, s->block_size, step->n_tokens, (int)n_heads, group, s->n_kv_heads, head_dim, 1, true, scale);
    cuda__launched(cb, "attention_rows_kernel");
}

void cuda__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv_base, int layer,
                     const dev_step *step, int64_t n_heads, float scale) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    const cuda_kv *kv = (const cuda_kv *)kv_base;
    const dev_kv_shape *s = &kv->common.shape;
    const int64_t n_rows = (int64_t)step->n_tokens * n_heads; /* (token, head) pairs */
    /* the grids: tiles (T/QT, H), rows up to T*H*S blocks in x */
    if (s->head_dim > ATTN_MAX_DH || n_heads < s->n_kv_heads || n_heads % s->n_kv_heads != 0 || n_heads > 65535 ||
        n_rows > INT32_MAX) {
        char what[240];
        snprintf(what, sizeof what,
                 "attention: %d tokens of %lld heads over %d KV heads of width %d (the width at most %d, the heads a "
                 "multiple of the KV heads and at most 65535)",
                 step->n_tokens, (long long)n_heads, s->n_kv_heads, s->head_dim, ATTN_MAX_DH);
        cuda__fault(cb, what);
        return;
    }
    const unsigned char *k_pool = cuda__kv_pool(kv, layer), *v_pool = k_pool + kv->pool_bytes;
    switch (s->kv_type) {
    case SP_KV_F16: attention_launch<SP_KV_F16>(cb, out, q, kv, k_pool, v_pool, step, n_heads, scale); break;
    case SP_KV_Q8_0: attention_launch<SP_KV_Q8_0>(cb, out, q, kv, k_pool, v_pool, step, n_heads, scale); break;
    case SP_KV_Q4_0: attention_launch<SP_KV_Q4_0>(cb, out, q, kv, k_pool, v_pool, step, n_heads, scale); break;
    }
}

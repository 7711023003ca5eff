/* cuda_ops.cu: the CUDA backend's row and elementwise ops: embedding gather, RMSNorm,
 * RoPE, SwiGLU, add, row gather, and the write of K and V into the paged pools.
 *
 * The residual add and the next RMSNorm are one kernel (add_rmsnorm).
 *
 * Legend: T = tokens in the step, D = row width, H = heads, Dh = head width,
 * B = tokens per KV block, Hk = KV heads.
 *
 * The arithmetic follows the CPU backend's (gpu/host/host_ops.c), which follows
 * ggml's; the GPU tests compare the two within float tolerance, not bit for bit (sums
 * run in another order here).
 */
#include "gpu/cuda/cuda_internal.cuh"

enum { BLOCK = 256 };

/* A weight element as float, whatever its storage type. */
__device__ static inline float load_weight(const void *w, quant_type type, size_t i) {
    if (type == QUANT_F32) return ((const float *)w)[i];
    if (type == QUANT_BF16) return __bfloat162float(((const __nv_bfloat16 *)w)[i]);
    return __half2float(((const __half *)w)[i]);
}

/* ---- embedding: x[t] = emb[tokens[t]] ---- */

__global__ static void embed_kernel(float *x, const void *emb, quant_type type, const int32_t *tokens, int64_t t_count,
                                    int64_t dim) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t_count * dim;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / dim, d = i % dim;
        x[i] = load_weight(emb, type, (size_t)tokens[t] * (size_t)dim + (size_t)d);
    }
}

void cuda__embed(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    const int64_t n = (int64_t)step->n_tokens * emb->ne0;
    embed_kernel<<<cuda__grid(n, BLOCK), BLOCK, 0, cb->stream>>>(x, emb->data, emb->type, step->tokens, step->n_tokens,
                                                                 emb->ne0);
    cuda__launched(cb, "embed_kernel");
}

/* ---- RMSNorm: one block per row; y = x / sqrt(mean(x^2) + eps) * w ---- */

__device__ static inline float block_sum(float v, float *shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0f;
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    return shared[0];
}

__global__ static void rmsnorm_kernel(float *out, const float *in, const float *w, float eps, int64_t dim) {
    __shared__ float shared[32];
    const float *x = in + blockIdx.x * dim;
    float *y = out + blockIdx.x * dim;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += x[i] * x[i];
    sum = block_sum(sum, shared);
    const float scale = rsqrtf(sum / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[i] = (x[i] * scale) * w[i];
}

void cuda__rmsnorm(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                   int64_t dim) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted || rows <= 0) return;
    /* rows can exceed the 65535 limit of grid.y but not grid.x's 2^31 - 1 */
    rmsnorm_kernel<<<(unsigned)rows, BLOCK, 0, cb->stream>>>(out, in, (const float *)w->data, eps, dim);
    cuda__launched(cb, "rmsnorm_kernel");
}

/* x += delta, then y = x / sqrt(mean(x^2) + eps) * w: one block per row, x read once */
__global__ static void add_rmsnorm_kernel(float *out, float *x_rows, const float *delta, const float *w, float eps,
                                          int64_t dim) {
    __shared__ float shared[32];
    float *x = x_rows + blockIdx.x * dim;
    const float *d = delta + blockIdx.x * dim;
    float *y = out + blockIdx.x * dim;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = x[i] + d[i];
        x[i] = v; /* each thread rereads only its own elements below */
        sum += v * v;
    }
    sum = block_sum(sum, shared);
    const float scale = rsqrtf(sum / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[i] = (x[i] * scale) * w[i];
}

void cuda__add_rmsnorm(dev_backend *dev, float *out, float *x, const float *delta, const dev_tensor *w, float eps,
                       int64_t rows, int64_t dim) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted || rows <= 0) return;
    add_rmsnorm_kernel<<<(unsigned)rows, BLOCK, 0, cb->stream>>>(out, x, delta, (const float *)w->data, eps, dim);
    cuda__launched(cb, "add_rmsnorm_kernel");
}

/* ---- RoPE: one thread per rotated pair ---- */

/* How a step rotates: the model's settings, flattened for the kernels. */
typedef struct rope_args {
    int n_rot;
    bool neox;
    float freq_base, freq_scale;
    const float *freq_factors; /* (n_rot/2) or NULL */
} rope_args;

static rope_args rope_args_of(const dev_rope *rope) {
    return rope_args{rope->n_rot, rope->style == DEV_ROPE_NEOX, rope->freq_base, rope->freq_scale,
                     rope->freq_factors ? (const float *)rope->freq_factors->data : NULL};
}

/* Rotates pair p of one head's row v (Dh) by position pos; the widths of the pair go
 * to *a and *b. The one place the rotation is computed, so the fused kernel below gives
 * rope_kernel's bits. */
__device__ static inline void rope_pair(float *v, int64_t p, int32_t pos, const rope_args &r, int64_t *a, int64_t *b) {
    const int64_t pairs = r.n_rot / 2;
    const float ff = r.freq_factors ? r.freq_factors[p] : 1.0f;
    const float theta = (float)pos * powf(r.freq_base, -2.0f * (float)p / (float)r.n_rot);
    const float angle = r.freq_scale * (theta / ff);
    float s, c;
    sincosf(angle, &s, &c);
    *a = r.neox ? p : 2 * p;
    *b = r.neox ? p + pairs : 2 * p + 1;
    const float x0 = v[*a], x1 = v[*b];
    v[*a] = fmaf(c, x0, -(s * x1));
    v[*b] = fmaf(s, x0, c * x1);
}

__global__ static void rope_kernel(float *x, const int32_t *pos, int64_t t_count, int64_t heads, int64_t head_dim,
                                   rope_args r) {
    const int64_t pairs = r.n_rot / 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t_count * heads * pairs;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t p = i % pairs, th = i / pairs; /* th = token * heads + head */
        int64_t a, b;
        rope_pair(x + th * head_dim, p, pos[th / heads], r, &a, &b);
    }
}

void cuda__rope_apply(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                      int64_t head_dim) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    const int64_t n = (int64_t)step->n_tokens * heads * (rope->n_rot / 2);
    rope_kernel<<<cuda__grid(n, BLOCK), BLOCK, 0, cb->stream>>>(x, step->pos, step->n_tokens, heads, head_dim,
                                                                rope_args_of(rope));
    cuda__launched(cb, "rope_kernel");
}

/* ---- elementwise ---- */

__global__ static void swiglu_kernel(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void cuda__swiglu(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    swiglu_kernel<<<cuda__grid(n, BLOCK), BLOCK, 0, cb->stream>>>(out, gate, up, n);
    cuda__launched(cb, "swiglu_kernel");
}

__global__ static void add_kernel(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

void cuda__add(dev_backend *dev, float *out, const float *a, const float *b, int64_t n) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    add_kernel<<<cuda__grid(n, BLOCK), BLOCK, 0, cb->stream>>>(out, a, b, n);
    cuda__launched(cb, "add_kernel");
}

/* out[r] = in[rows[r]]; rows is a device array (the step's logit rows). */
__global__ static void gather_kernel(float *out, const float *in, const int32_t *rows, int64_t n_rows, int64_t dim) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_rows * dim;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = in[(int64_t)rows[i / dim] * dim + i % dim];
}

void cuda__gather_rows(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows,
                       int64_t dim) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    gather_kernel<<<cuda__grid(n_rows * dim, BLOCK), BLOCK, 0, cb->stream>>>(out, in, rows, n_rows, dim);
    cuda__launched(cb, "gather_kernel");
}

/* ---- KV write: token t's K and V rows (Hk*Dh) into its block slot, as F16 ---- */

/* Where token t's K/V row (width Hk*Dh) starts in a pool. */
__device__ static inline size_t kv_row(const int32_t *pos, const int32_t *seq, const int32_t *block_table,
                                       int32_t max_blocks, int32_t block_size, int64_t t, int64_t width) {
    const int32_t p = pos[t];
    const int32_t block = block_table[(int64_t)seq[t] * max_blocks + p / block_size];
    return ((size_t)block * (size_t)block_size + (size_t)(p % block_size)) * (size_t)width;
}

__global__ static void kv_write_kernel(__half *k_pool, __half *v_pool, const float *k, const float *v,
                                       const int32_t *pos, const int32_t *seq, const int32_t *block_table,
                                       int32_t max_blocks, int32_t block_size, int64_t t_count, int64_t width) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t_count * width;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / width, e = i % width;
        const size_t slot = kv_row(pos, seq, block_table, max_blocks, block_size, t, width) + (size_t)e;
        k_pool[slot] = __float2half_rn(k[i]);
        v_pool[slot] = __float2half_rn(v[i]);
    }
}

/* ---- KV write into quantized pools (Q8_0, Q4_0): one warp per 32-element block ----
 *
 * Lane l holds element l of the block. The block is quantized as quant/quant.c does
 * (Q8_0: the activation rule, multiplier 127 / amax, ties to even; Q4_0: ggml's
 * reference, d = the element of largest magnitude (the first on ties) / -8), with
 * products kept out of fused multiply-adds, so the blocks equal the CPU backend's. */

__device__ static inline void quantize_block_q8_0(quant_block_q8_0 *blk, float x, int lane) {
    float amax = fabsf(x);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    blk->qs[lane] = (int8_t)__float2int_rn(__fmul_rn(x, id));
    if (lane == 0) blk->d = __half_as_ushort(__float2half_rn(amax / 127.0f));
}

__device__ static inline void quantize_block_q4_0(quant_block_q4_0 *blk, float x, int lane) {
    float a = fabsf(x), val = x;
    int at = lane;
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, a, o), ov = __shfl_xor_sync(0xffffffffu, val, o);
        const int oat = __shfl_xor_sync(0xffffffffu, at, o);
        if (oa > a || (oa == a && oat < at)) a = oa, val = ov, at = oat;
    }
    if (a == 0.0f) val = 0.0f; /* the reference starts from +0 */
    const float d = val / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int q = min(15, max(0, (int)(int8_t)(__fmul_rn(x, id) + 8.5f)));
    const int high = __shfl_down_sync(0xffffffffu, q, 16); /* element lane + 16 */
    if (lane < QUANT_QK / 2) blk->qs[lane] = (uint8_t)(q | (high << 4));
    if (lane == 0) blk->d = __half_as_ushort(__float2half_rn(d));
}

template <int KV_TYPE>
__global__ static void kv_write_quant_kernel(unsigned char *k_pool, unsigned char *v_pool, const float *k,
                                             const float *v, const int32_t *pos, const int32_t *seq,
                                             const int32_t *block_table, int32_t max_blocks, int32_t block_size,
                                             int64_t t_count, int64_t n_kv_heads, int64_t head_dim, size_t row_bytes) {
    const int lane = (int)threadIdx.x % 32;
    const int64_t per_row = head_dim / QUANT_QK, width = n_kv_heads * head_dim;
    const int64_t n = t_count * n_kv_heads * per_row * 2; /* (token, head, block, K|V) */
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    /* w is the same on every lane of a warp, so the shuffles see all 32 */
    for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < n; w += warps) {
        const int which = (int)(w % 2);
        const int64_t b = w / 2 % per_row, head = w / 2 / per_row % n_kv_heads, t = w / 2 / per_row / n_kv_heads;
        const float x = (which ? v : k)[t * width + head * head_dim + b * QUANT_QK + lane];
        const size_t slot = kv_row(pos, seq, block_table, max_blocks, block_size, t, 1); /* block * B + offset */
        unsigned char *row = (which ? v_pool : k_pool) + (slot * (size_t)n_kv_heads + (size_t)head) * row_bytes;
        if (KV_TYPE == SP_KV_Q8_0)
            quantize_block_q8_0((quant_block_q8_0 *)row + b, x, lane);
        else
            quantize_block_q4_0((quant_block_q4_0 *)row + b, x, lane);
    }
}

/* dev_rope_kv_write in one launch. Per token, in this order, one thread each: the q
 * pairs (H * n_rot/2), the k pairs (Hk * n_rot/2: rotated, then both widths to the K
 * pool), k's unrotated widths (Hk * (Dh - n_rot), to the K pool as they are), v's widths
 * (Hk * Dh, to the V pool). The rotation is rope_pair, the conversion kv_write_kernel's:
 * the same bits as the three separate launches. */
__global__ static void rope_kv_write_kernel(float *q, float *k, const float *v, __half *k_pool, __half *v_pool,
                                            const int32_t *pos, const int32_t *seq, const int32_t *block_table,
                                            int32_t max_blocks, int32_t block_size, int64_t t_count, int64_t n_heads,
                                            int64_t n_kv_heads, int64_t head_dim, rope_args r) {
    const int64_t pairs = r.n_rot / 2, width = n_kv_heads * head_dim, plain = head_dim - r.n_rot;
    const int64_t q_items = n_heads * pairs, k_items = n_kv_heads * pairs, k_plain = n_kv_heads * plain;
    const int64_t per_token = q_items + k_items + k_plain + width;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < t_count * per_token;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / per_token;
        int64_t j = i % per_token, a, b;
        if (j < q_items) {
            rope_pair(q + (t * n_heads + j / pairs) * head_dim, j % pairs, pos[t], r, &a, &b);
            continue;
        }
        const size_t row = kv_row(pos, seq, block_table, max_blocks, block_size, t, width);
        float *k_row = k + t * width;
        if ((j -= q_items) < k_items) {
            const int64_t head = j / pairs;
            float *kh = k_row + head * head_dim;
            rope_pair(kh, j % pairs, pos[t], r, &a, &b);
            k_pool[row + (size_t)(head * head_dim + a)] = __float2half_rn(kh[a]);
            k_pool[row + (size_t)(head * head_dim + b)] = __float2half_rn(kh[b]);
        } else if ((j -= k_items) < k_plain) {
            const int64_t e = j / plain * head_dim + r.n_rot + j % plain; /* widths n_rot.. of a head */
            k_pool[row + (size_t)e] = __float2half_rn(k_row[e]);
        } else {
            j -= k_plain;
            v_pool[row + (size_t)j] = __float2half_rn(v[t * width + j]);
        }
    }
}

void cuda__kv_write(dev_backend *dev, dev_kv *kv_base, int layer, const float *k, const float *v,
                    const dev_step *step) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    cuda_kv *kv = (cuda_kv *)kv_base;
    const dev_kv_shape *s = &kv->common.shape;
    const int64_t width = (int64_t)s->n_kv_heads * s->head_dim;
    unsigned char *k_pool = cuda__kv_pool(kv, layer), *v_pool = k_pool + kv->pool_bytes;
    if (s->kv_type != SP_KV_F16) {
        const int64_t threads = (int64_t)step->n_tokens * width * 2; /* a lane per element of K and V */
        if (s->kv_type == SP_KV_Q8_0)
            kv_write_quant_kernel<SP_KV_Q8_0><<<cuda__grid(threads, BLOCK), BLOCK, 0, cb->stream>>>(
                k_pool, v_pool, k, v, step->pos, step->seq, step->block_table, step->max_blocks, s->block_size,
                step->n_tokens, s->n_kv_heads, s->head_dim, kv->row_bytes);
        else
            kv_write_quant_kernel<SP_KV_Q4_0><<<cuda__grid(threads, BLOCK), BLOCK, 0, cb->stream>>>(
                k_pool, v_pool, k, v, step->pos, step->seq, step->block_table, step->max_blocks, s->block_size,
                step->n_tokens, s->n_kv_heads, s->head_dim, kv->row_bytes);
        cuda__launched(cb, "kv_write_quant_kernel");
        return;
    }
    const int64_t n = (int64_t)step->n_tokens * width;
    kv_write_kernel<<<cuda__grid(n, BLOCK), BLOCK, 0, cb->stream>>>((__half *)k_pool, (__half *)v_pool, k, v, step->pos,
                                                                    step->seq, step->block_table, step->max_blocks,
                                                                    s->block_size, step->n_tokens, width);
    cuda__launched(cb, "kv_write_kernel");
}

void cuda__rope_kv_write(dev_backend *dev, dev_kv *kv_base, int layer, float *q, float *k, const float *v,
                         const dev_step *step, const dev_rope *rope, int64_t n_heads) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return;
    cuda_kv *kv = (cuda_kv *)kv_base;
    const dev_kv_shape *s = &kv->common.shape;
    if (s->kv_type != SP_KV_F16) {
        /* quantized pools: the rotations, then the blocks (a warp per block) */
        cuda__rope_apply(dev, q, step, rope, n_heads, s->head_dim);
        cuda__rope_apply(dev, k, step, rope, s->n_kv_heads, s->head_dim);
        cuda__kv_write(dev, kv_base, layer, k, v, step);
        return;
    }
    __half *k_pool = (__half *)cuda__kv_pool(kv, layer);
    __half *v_pool = (__half *)(cuda__kv_pool(kv, layer) + kv->pool_bytes);
    const int64_t per_token = (n_heads + s->n_kv_heads) * (rope->n_rot / 2) +
                              (int64_t)s->n_kv_heads * (s->head_dim - rope->n_rot) +
                              (int64_t)s->n_kv_heads * s->head_dim;
    const int64_t n = (int64_t)step->n_tokens * per_token;
    rope_kv_write_kernel<<<cuda__grid(n, BLOCK), BLOCK, 0, cb->stream>>>(
        q, k, v, k_pool, v_pool, step->pos, step->seq, step->block_table, step->max_blocks, s->block_size,
        step->n_tokens, n_heads, s->n_kv_heads, s->head_dim, rope_args_of(rope));
    cuda__launched(cb, "rope_kv_write_kernel");
}

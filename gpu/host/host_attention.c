/* host_attention.c: KV writes into the paged pools and causal attention over them. This
 * comment describes F16 pools; quantized ones (Q8_0, Q4_0) share the task split and
 * the softmax and read their blocks as host_attention_quant.c describes.
 *
 * Legend: T = tokens in the step, H = query heads, Hk = KV heads, Dh = head width,
 * B = tokens per block, P = positions a token attends to (pos + 1). Pools per layer:
 * K and V each [n_blocks][B][Hk][Dh] F16.
 *
 * Attention runs one task per (token, head), in llama.cpp's non-flash arithmetic so
 * that results equal its CPU results bit for bit:
 *   1. the query is rounded to F16; score[j] = dot(K[j], q16) (F16 dot, float sums),
 *      then times the scale;
 *   2. softmax over the P scores: max, e[j] = e^(score[j] - max) with ggml's vectorized
 *      e^x in groups of 8 positions, the sum of each group's 8 values (in float) added
 *      up in double, then p[j] = e[j] * (float)(1 / sum), rounded to F16;
 *   3. out[d] = dot over j of V[j][d] and p16[j] (F16 dot, float sums).
 * llama.cpp adds the products of its F16 dots in a lane layout that depends on its
 * batch: for 1-token steps ggml_vec_dot_f16 (4 accumulators of 8 lanes, index i in
 * lane i % 32), for steps of 2+ tokens llamafile's tinyBLAS F16 gemm (one 8-lane
 * accumulator, index i in lane i % 8, folded as hsum_float_8). Its own results
 * therefore depend on the batch. spindle always uses the latter, so that a token's
 * result never depends on its batch; this reproduces llama.cpp's prompt pass (and its
 * teacher-forced logits) bit for bit. Positions past pos would add exact zeros in
 * llama.cpp (masked probabilities, zero-padded n_kv), so stopping at pos changes
 * nothing. The portable path makes the same sums in the same order as the AVX2 one.
 *
 * Every token reads only its own sequence, so results do not depend on the batch.
 *
 * Grouped-query attention: the query heads that share a KV head (up to
 * ATTN_HEAD_TILE of them) are one task, so each K row is read and converted
 * from F16 once for all of them; every head still makes exactly its own sums in its
 * own order (the query is kept as the floats of its F16 rounding, which is exact).
 * The weighted sum of V stays per head (see weighted_values_avx2).
 * When the step has too few (token, KV head) pairs to keep the workers busy (a single
 * decode token), each query head is its own task instead.
 * Each pool worker uses its own slice of the backend's attention scratch (sized when
 * a KV cache is created): per head of a task P scores, P F16 probabilities, 8 x Dh
 * accumulators and the query.
 */
#include <math.h>
#include <string.h>

#include "gpu/host/host_internal.h"

enum {
    ATTN_MAX_HEAD_DIM = 512,
    ATTN_LANES = 8,     /* lanes of tinyBLAS's accumulator (one AVX2 register) */
    ATTN_HEAD_TILE = 4, /* query heads of one KV head handled by one task */
};

/* The layer's K (which = 0) or V (1) pool. */
static inline const unsigned char *kv_pool(const host_kv *kv, int layer, int which) {
    return kv->data + (size_t)layer * kv->layer_bytes + (size_t)which * kv->pool_bytes;
}

/* An F16 pool's row of (block, offset, kv_head). */
static inline const uint16_t *kv_row(const host_kv *kv, int layer, int which, int32_t block, int32_t offset,
                                     int64_t kv_head) {
    const dev_kv_shape *s = &kv->common.shape;
    return (const uint16_t *)(kv_pool(kv, layer, which) + (size_t)block * kv->block_bytes +
                              ((size_t)offset * (size_t)s->n_kv_heads + (size_t)kv_head) * kv->row_bytes);
}

void host__kv_write(dev_backend *dev, dev_kv *kv_base, int layer, const float *k, const float *v,
                    const dev_step *step) {
    host_kv *kv = (host_kv *)kv_base;
    const dev_kv_shape *s = &kv->common.shape;
    int64_t width = (int64_t)s->n_kv_heads * s->head_dim; /* Hk*Dh */
    for (int32_t t = 0; t < step->n_tokens; t++) {
        int32_t pos = step->pos[t];
        int32_t block = step->block_table[(int64_t)step->seq[t] * step->max_blocks + pos / s->block_size];
        int32_t offset = pos % s->block_size;
        /* the token's Hk rows are adjacent: one K run and one V run of Hk rows */
        uint16_t *kdst = (uint16_t *)kv_row(kv, layer, 0, block, offset, 0);
        uint16_t *vdst = (uint16_t *)kv_row(kv, layer, 1, block, offset, 0);
        const float *ksrc = k + (int64_t)t * width;
        const float *vsrc = v + (int64_t)t * width;
        if (s->kv_type != DEV_KV_F16) {
            for (int64_t h = 0; h < s->n_kv_heads; h++) {
                host__kv_quantize_row(s->kv_type, dev->cpu_isa, (unsigned char *)kdst + h * kv->row_bytes,
                                      ksrc + h * s->head_dim, s->head_dim);
                host__kv_quantize_row(s->kv_type, dev->cpu_isa, (unsigned char *)vdst + h * kv->row_bytes,
                                      vsrc + h * s->head_dim, s->head_dim);
            }
            continue;
        }
        for (int64_t i = 0; i < width; i++) {
            kdst[i] = quant_f32_to_f16(ksrc[i]);
            vdst[i] = quant_f32_to_f16(vsrc[i]);
        }
    }
}

/* Bytes of one head's buffers in a worker's slice (see attention_buffers). */
static size_t head_scratch_bytes(const dev_kv_shape *shape) {
    size_t positions = (size_t)shape->n_blocks * (size_t)shape->block_size + ATTN_LANES;
    size_t bytes = positions * (sizeof(float) + sizeof(uint16_t)) +
                   (size_t)(ATTN_LANES + 1) * (size_t)shape->head_dim * sizeof(float);
    return (bytes + 63) & ~(size_t)63;
}

size_t host__attention_scratch_bytes(const dev_kv_shape *shape) {
    return head_scratch_bytes(shape) * ATTN_HEAD_TILE;
}

typedef struct attention_task {
    float *out;     /* (T, H*Dh) */
    const float *q; /* (T, H*Dh) */
    const host_kv *kv;
    int layer;
    const dev_step *step;
    int64_t n_heads;
    int64_t heads_per_task; /* query heads of one KV head per task (1..ATTN_HEAD_TILE) */
    float scale;
    dev_cpu_isa isa; /* the backend's kernel set */
    bool simd;       /* AVX2 present and Dh % 8 == 0 */
    char *scratch;   /* nth slices of thread_bytes */
    size_t thread_bytes;
} attention_task;

/* One head's buffers, carved from its worker's slice of the scratch. */
typedef struct attention_buffers {
    float *score;  /* (P rounded up to 8) scores, then e^(score - max) */
    uint16_t *p16; /* (P rounded up to 8) probabilities in F16 */
    float *acc;    /* (8, Dh) accumulator rows: row l holds lane l */
    float *q;      /* (Dh) the query rounded to F16, as floats */
} attention_buffers;

/* K (which = 0) or V (1) of position j, for KV head kv_head of a sequence with these blocks. */
static inline const uint16_t *position_row(const attention_task *t, int which, const int32_t *blocks, int32_t j,
                                           int64_t kv_head) {
    const int32_t block_size = t->kv->common.shape.block_size;
    return kv_row(t->kv, t->layer, which, blocks[j / block_size], j % block_size, kv_head);
}

/* ---- portable path: the AVX2 path's sums, one lane at a time ---- */

/* tinyBLAS's F16 dot: element i in lane i % 8 (fused multiply-adds), lanes folded in
 * host__hsum8's order. */
static float dot_f16_generic(const uint16_t *x, const uint16_t *y, int64_t n) {
    float lane[ATTN_LANES] = {0};
    for (int64_t i = 0; i < n; i++)
        lane[i % ATTN_LANES] = fmaf(quant_f16_to_f32(x[i]), quant_f16_to_f32(y[i]), lane[i % ATTN_LANES]);
    return host__hsum8(lane);
}

/* score[j] = dot(K[j], q16) * scale for the n_pos positions. */
static void scores_generic(float *score, const attention_task *t, const uint16_t *q16, const int32_t *blocks,
                           int32_t n_pos, int64_t kv_head) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    for (int32_t j = 0; j < n_pos; j++)
        score[j] = dot_f16_generic(position_row(t, 0, blocks, j, kv_head), q16, head_dim) * t->scale;
}

/* Softmax of score[0..n_pos) into p16, in groups of 8 positions as softmax_avx2. */
static void softmax_generic(uint16_t *p16, float *score, int32_t n_pos) {
    float max_score = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) max_score = score[j] > max_score ? score[j] : max_score;
    const int32_t padded = (n_pos + ATTN_LANES - 1) & ~(ATTN_LANES - 1);
    for (int32_t j = n_pos; j < padded; j++) score[j] = -INFINITY;
    double sum = 0.0;
    for (int32_t j = 0; j < padded; j += ATTN_LANES) {
        for (int l = 0; l < ATTN_LANES; l++) score[j + l] = host__expf(score[j + l] - max_score);
        sum += (double)host__hsum8(score + j);
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t j = 0; j < n_pos; j++) p16[j] = quant_f32_to_f16(score[j] * inv);
}

/* out[d] = tinyBLAS's F16 dot over positions of V[.][d] and p16: position j adds into
 * accumulator row j % 8, and the 8 rows are folded in host__hsum8's order. */
static void weighted_values_generic(float *o, const attention_task *t, const int32_t *blocks, int32_t n_pos,
                                    int64_t kv_head, const attention_buffers *buf) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    float *acc = buf->acc; /* (8, Dh) */
    memset(acc, 0, sizeof(float) * ATTN_LANES * (size_t)head_dim);
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *v = position_row(t, 1, blocks, j, kv_head);
        const float p = quant_f16_to_f32(buf->p16[j]);
        float *row = acc + (size_t)(j % ATTN_LANES) * (size_t)head_dim;
        for (int64_t d = 0; d < head_dim; d++) row[d] = fmaf(quant_f16_to_f32(v[d]), p, row[d]);
    }
    for (int64_t d = 0; d < head_dim; d++) {
        float lane[ATTN_LANES];
        for (int l = 0; l < ATTN_LANES; l++) lane[l] = acc[(size_t)l * (size_t)head_dim + (size_t)d];
        o[d] = host__hsum8(lane);
    }
}

/* ---- AVX2 path: ggml's AVX2 arithmetic ---- */

#if HOST_SIMD_AVX2

static HOST_AVX2_TARGET inline __m256 avx2_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* score[h][j] = dot(K[j], q_h) * scale for the nh heads of a task, each dot as
 * llamafile's tinyBLAS F16 gemm makes it: one accumulator, element i in lane i % 8,
 * folded in hsum_float_8's order. K[j] is converted once for all nh heads. Always
 * inlined with a constant nh, so the accumulators stay in registers. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
scores_avx2_heads(const int nh, const attention_buffers *buf, const attention_task *t, const int32_t *blocks,
                  int32_t n_pos, int64_t kv_head) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *k = position_row(t, 0, blocks, j, kv_head);
        __m256 sum[ATTN_HEAD_TILE];
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++) sum[h] = _mm256_setzero_ps();
        for (int64_t d = 0; d < head_dim; d += ATTN_LANES) {
            const __m256 kv = avx2_load_f16(k + d);
#pragma GCC unroll 4
            for (int h = 0; h < nh; h++) sum[h] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(buf[h].q + d), sum[h]);
        }
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++) buf[h].score[j] = host__avx2_hsum(sum[h]) * t->scale;
    }
}

static HOST_AVX2_TARGET void scores_avx2(int nh, const attention_buffers *buf, const attention_task *t,
                                         const int32_t *blocks, int32_t n_pos, int64_t kv_head) {
    switch (nh) {
    case 1: scores_avx2_heads(1, buf, t, blocks, n_pos, kv_head); break;
    case 2: scores_avx2_heads(2, buf, t, blocks, n_pos, kv_head); break;
    case 3: scores_avx2_heads(3, buf, t, blocks, n_pos, kv_head); break;
    default: scores_avx2_heads(ATTN_HEAD_TILE, buf, t, blocks, n_pos, kv_head); break;
    }
}

/* Softmax of score[0..n_pos) into p16, as ggml_compute_forward_soft_max_f32 with
 * ggml_vec_soft_max_f32: groups of 8 by position, the masked lanes past n_pos -inf
 * (e^-inf = 0, as llama.cpp's mask gives). */
static HOST_AVX2_TARGET void softmax_avx2(uint16_t *p16, float *score, int32_t n_pos) {
    float max_score = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) max_score = score[j] > max_score ? score[j] : max_score;
    const int32_t padded = (n_pos + ATTN_LANES - 1) & ~(ATTN_LANES - 1);
    for (int32_t j = n_pos; j < padded; j++) score[j] = -INFINITY;
    const __m256 max_v = _mm256_set1_ps(max_score);
    double sum = 0.0;
    for (int32_t j = 0; j < padded; j += ATTN_LANES) {
        const __m256 e = host__avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(score + j), max_v));
        _mm256_storeu_ps(score + j, e);
        sum += (double)host__avx2_hsum(e);
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (int32_t j = 0; j < padded; j += ATTN_LANES) {
        const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(score + j), inv), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(p16 + j), h);
    }
}

/* Accumulator row `lane` (positions lane, lane + 8, ...) over widths [d0, d0 + 8 * NC)
 * of V, kept in NC registers for the whole pass, then stored once. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
values_lane_avx2(const int nc, float *acc_row, const attention_task *t, const int32_t *blocks, int32_t n_pos,
                 int64_t kv_head, const uint16_t *p16, int lane, int64_t d0) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) acc[c] = _mm256_setzero_ps();
    for (int32_t j = lane; j < n_pos; j += ATTN_LANES) {
        const uint16_t *v = position_row(t, 1, blocks, j, kv_head) + d0;
        const __m256 p = _mm256_set1_ps(_cvtsh_ss(p16[j]));
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) acc[c] = _mm256_fmadd_ps(avx2_load_f16(v + c * ATTN_LANES), p, acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(acc_row + d0 + c * ATTN_LANES, acc[c]);
}

/* out[d] = tinyBLAS's F16 dot over positions of V[.][d] and p16: position j adds into
 * accumulator row j % 8 (lane j % 8 of the register), vectorized over d; the 8 rows
 * are then folded in hsum_float_8's order, again over d. Each accumulator row is made
 * in registers in its own pass over its positions (64 widths at a time), so the sums
 * are those of the row-by-row order without a load and store per position. One head
 * at a time: sharing V's conversion across heads costs more than it saves. */
static HOST_AVX2_TARGET void weighted_values_avx2(float *o, const attention_task *t, const int32_t *blocks,
                                                  int32_t n_pos, int64_t kv_head, const attention_buffers *buf) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    float *acc = buf->acc; /* (8, Dh) */
    for (int lane = 0; lane < ATTN_LANES; lane++) {
        float *acc_row = acc + (size_t)lane * (size_t)head_dim;
        int64_t d0 = 0;
        for (; d0 + 8 * ATTN_LANES <= head_dim; d0 += 8 * ATTN_LANES)
            values_lane_avx2(8, acc_row, t, blocks, n_pos, kv_head, buf->p16, lane, d0);
        for (; d0 < head_dim; d0 += ATTN_LANES)
            values_lane_avx2(1, acc_row, t, blocks, n_pos, kv_head, buf->p16, lane, d0);
    }
    for (int64_t d = 0; d < head_dim; d += ATTN_LANES) {
        __m256 lane[ATTN_LANES];
#pragma GCC unroll 8
        for (int l = 0; l < ATTN_LANES; l++) lane[l] = _mm256_loadu_ps(acc + (size_t)l * (size_t)head_dim + d);
        const __m256 s0 = _mm256_add_ps(lane[0], lane[4]);
        const __m256 s1 = _mm256_add_ps(lane[1], lane[5]);
        const __m256 s2 = _mm256_add_ps(lane[2], lane[6]);
        const __m256 s3 = _mm256_add_ps(lane[3], lane[7]);
        _mm256_storeu_ps(o + d, _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
    }
}

#endif

/* One task: query heads [head0, head0 + nh) of one token, all of KV head kv_head. */
static void attention_task_heads(const attention_task *t, const attention_buffers *buf, int64_t token, int64_t head0,
                                 int nh, int64_t kv_head) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    const int32_t n_pos = t->step->pos[token] + 1;
    const int32_t *blocks = t->step->block_table + (int64_t)t->step->seq[token] * t->step->max_blocks;
    float *o[ATTN_HEAD_TILE];
    for (int h = 0; h < nh; h++) {
        const float *q = t->q + (token * t->n_heads + head0 + h) * head_dim;
        o[h] = t->out + (token * t->n_heads + head0 + h) * head_dim;
        if (t->kv->common.shape.kv_type == DEV_KV_F16)
            for (int64_t d = 0; d < head_dim; d++) buf[h].q[d] = quant_f16_to_f32(quant_f32_to_f16(q[d]));
    }
    if (t->kv->common.shape.kv_type != DEV_KV_F16) {
        /* quantized pools (host_attention_quant.c): the query as Q8_0 blocks */
        quant_block_q8_0 q8[ATTN_MAX_HEAD_DIM / QUANT_QK];
        for (int h = 0; h < nh; h++) {
            host__attention_query_q8(t->isa, q8, t->q + (token * t->n_heads + head0 + h) * head_dim, head_dim);
            host__attention_scores_quant(buf[h].score, t->kv, kv_pool(t->kv, t->layer, 0), blocks, n_pos, kv_head, q8,
                                         t->scale, t->isa);
#if HOST_SIMD_AVX2
            if (t->simd)
                softmax_avx2(buf[h].p16, buf[h].score, n_pos);
            else
#endif
                softmax_generic(buf[h].p16, buf[h].score, n_pos);
        }
        const uint16_t *p16[ATTN_HEAD_TILE];
        for (int h = 0; h < nh; h++) p16[h] = buf[h].p16;
        host__attention_values_quant(o, p16, nh, t->kv, kv_pool(t->kv, t->layer, 1), blocks, n_pos, kv_head, t->simd);
        return;
    }
#if HOST_SIMD_AVX2
    if (t->simd) {
        scores_avx2(nh, buf, t, blocks, n_pos, kv_head);
        for (int h = 0; h < nh; h++) {
            softmax_avx2(buf[h].p16, buf[h].score, n_pos);
            weighted_values_avx2(o[h], t, blocks, n_pos, kv_head, &buf[h]);
        }
        return;
    }
#endif
    uint16_t q16[ATTN_MAX_HEAD_DIM];
    for (int h = 0; h < nh; h++) {
        for (int64_t d = 0; d < head_dim; d++) q16[d] = quant_f32_to_f16(buf[h].q[d]);
        scores_generic(buf[h].score, t, q16, blocks, n_pos, kv_head);
        softmax_generic(buf[h].p16, buf[h].score, n_pos);
        weighted_values_generic(o[h], t, blocks, n_pos, kv_head, &buf[h]);
    }
}

static void attention_heads(void *ctx, int ith, int nth) {
    attention_task *t = ctx;
    const dev_kv_shape *s = &t->kv->common.shape;
    const int64_t group = t->n_heads / s->n_kv_heads;                           /* query heads per KV head */
    const int64_t chunks = (group + t->heads_per_task - 1) / t->heads_per_task; /* tasks per KV head */
    const size_t positions = (size_t)s->n_blocks * (size_t)s->block_size + ATTN_LANES;
    const size_t head_bytes = head_scratch_bytes(s);
    char *slice = t->scratch + (size_t)ith * t->thread_bytes;
    attention_buffers buf[ATTN_HEAD_TILE];
    for (int h = 0; h < ATTN_HEAD_TILE; h++) {
        char *b = slice + (size_t)h * head_bytes;
        buf[h] = (attention_buffers){
            .score = (float *)b,
            .p16 = (uint16_t *)(b + positions * sizeof(float)),
            .acc = (float *)(b + positions * (sizeof(float) + sizeof(uint16_t))),
            .q = (float *)(b + positions * (sizeof(float) + sizeof(uint16_t))) + ATTN_LANES * s->head_dim,
        };
    }
    int64_t begin, end;
    host__split((int64_t)t->step->n_tokens * s->n_kv_heads * chunks, ith, nth, &begin, &end);
    for (int64_t item = begin; item < end; item++) {
        const int64_t token = item / (s->n_kv_heads * chunks);
        const int64_t kv_head = item / chunks % s->n_kv_heads;
        const int64_t first = item % chunks * t->heads_per_task; /* within the group */
        const int nh = (int)(group - first < t->heads_per_task ? group - first : t->heads_per_task);
        SP_ASSERT((size_t)t->step->pos[token] + 1 + ATTN_LANES <= positions);
        attention_task_heads(t, buf, token, kv_head * group + first, nh, kv_head);
    }
}

void host__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer, const dev_step *step,
                     int64_t n_heads, float scale) {
    host_backend *hb = (host_backend *)dev;
    const host_kv *hk = (const host_kv *)kv;
    const dev_kv_shape *shape = &hk->common.shape;
    SP_ASSERT(shape->head_dim <= ATTN_MAX_HEAD_DIM && n_heads % shape->n_kv_heads == 0);
    size_t thread_bytes = host__attention_scratch_bytes(shape);
    SP_ASSERT(hb->attn_scratch != NULL &&
              thread_bytes * (size_t)host__pool_threads(hb->pool) <= hb->attn_scratch_bytes); /* see host_kv_create */
    /* group the heads of a KV head unless that leaves fewer than 4 tasks per worker */
    const int64_t group = n_heads / shape->n_kv_heads;
    const int nth = host__pool_threads(hb->pool);
    int64_t heads_per_task = group < ATTN_HEAD_TILE ? group : ATTN_HEAD_TILE;
    if ((int64_t)step->n_tokens * shape->n_kv_heads < 4 * (int64_t)nth) heads_per_task = 1;
    attention_task task = {.out = out,
                           .q = q,
                           .kv = hk,
                           .layer = layer,
                           .step = step,
                           .n_heads = n_heads,
                           .heads_per_task = heads_per_task,
                           .scale = scale,
                           .isa = hb->base.cpu_isa,
                           .scratch = hb->attn_scratch,
                           .thread_bytes = thread_bytes};
#if HOST_SIMD_AVX2
    task.simd = hb->base.cpu_isa >= DEV_CPU_ISA_AVX2 && shape->head_dim % ATTN_LANES == 0;
#endif
    host__pool_run(hb->pool, attention_heads, &task);
}

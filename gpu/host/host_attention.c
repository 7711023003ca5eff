/* host_attention.c: KV writes into the paged F16 pools and causal attention over them.
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
 * The F16 dots add their products in a fixed lane layout over the position (or
 * element) index, chosen once per backend (host_attn_sums):
 *   GEMM     llamafile's tinyBLAS F16 gemm, llama.cpp's path for steps of 2+ tokens:
 *            one 8-lane accumulator (index i in lane i % 8), folded as hsum_float_8;
 *   VEC_DOT  ggml_vec_dot_f16, llama.cpp's path for 1-token steps: 4 accumulators
 *            of 8 lanes (lane i % 32), folded with GGML_F32x8_REDUCE.
 * llama.cpp's own results therefore depend on its batch; spindle's default (GEMM)
 * keeps one layout whatever the batch, which reproduces llama.cpp's prompt pass (and
 * its teacher-forced logits) bit for bit. Positions past pos would add exact zeros in
 * llama.cpp (masked probabilities, zero-padded n_kv), so stopping at pos changes
 * nothing.
 *
 * Every token reads only its own sequence, so results do not depend on the batch.
 * Each pool worker uses its own slice of the backend's attention scratch (sized when
 * a KV cache is created): P scores, P F16 probabilities, 32 x Dh accumulators.
 */
#include <math.h>
#include <string.h>

#include "gpu/host/host_internal.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HOST_ATTN_HAVE_AVX2 1
#define HOST_ATTN_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define HOST_ATTN_HAVE_AVX2 0
#endif

enum {
    ATTN_MAX_HEAD_DIM = 512,
    ATTN_LANES = 8,                              /* floats per AVX2 register */
    ATTN_ACCS = 4,                               /* accumulators of ggml_vec_dot_f16 */
    ATTN_STRIPE = ATTN_LANES * ATTN_ACCS,        /* 32 positions per round of the dot */
};

static inline const uint16_t *kv_row(const host_kv *kv, int layer, int which, int32_t block, int32_t offset,
                                     int64_t kv_head) {
    const dev_kv_shape *s = &kv->common.shape;
    size_t index = (size_t)layer * kv->layer_stride + (size_t)which * kv->pool_stride +
                   (((size_t)block * (size_t)s->block_size + (size_t)offset) * (size_t)s->n_kv_heads + (size_t)kv_head) *
                       (size_t)s->head_dim;
    return kv->data + index;
}

void host__kv_write(dev_backend *dev, dev_kv *kv_base, int layer, const float *k, const float *v,
                    const dev_step *step) {
    (void)dev;
    host_kv *kv = (host_kv *)kv_base;
    const dev_kv_shape *s = &kv->common.shape;
    int64_t width = (int64_t)s->n_kv_heads * s->head_dim; /* Hk*Dh */
    for (int32_t t = 0; t < step->n_tokens; t++) {
        int32_t pos = step->pos[t];
        int32_t block = step->block_table[(int64_t)step->seq[t] * step->max_blocks + pos / s->block_size];
        int32_t offset = pos % s->block_size;
        uint16_t *kdst = (uint16_t *)kv_row(kv, layer, 0, block, offset, 0);
        uint16_t *vdst = (uint16_t *)kv_row(kv, layer, 1, block, offset, 0);
        const float *ksrc = k + (int64_t)t * width;
        const float *vsrc = v + (int64_t)t * width;
        for (int64_t i = 0; i < width; i++) {
            kdst[i] = quant_f32_to_f16(ksrc[i]);
            vdst[i] = quant_f32_to_f16(vsrc[i]);
        }
    }
}

size_t host__attention_scratch_bytes(const dev_kv_shape *shape) {
    size_t positions = (size_t)shape->n_blocks * (size_t)shape->block_size + ATTN_STRIPE;
    size_t bytes = positions * (sizeof(float) + sizeof(uint16_t)) +
                   (size_t)ATTN_STRIPE * (size_t)shape->head_dim * sizeof(float);
    return (bytes + 63) & ~(size_t)63;
}

typedef struct attention_task {
    float *out;     /* (T, H*Dh) */
    const float *q; /* (T, H*Dh) */
    const host_kv *kv;
    int layer;
    const dev_step *step;
    int64_t n_heads;
    float scale;
    bool simd;
    bool gemm_layout; /* tinyBLAS's 8-lane sums instead of ggml_vec_dot_f16's 32 */
    char *scratch; /* nth slices of thread_bytes */
    size_t thread_bytes;
} attention_task;

/* Per-worker buffers, carved from its slice of the scratch. */
typedef struct attention_buffers {
    float *score;    /* (P rounded up to 32) scores, then e^(score - max) */
    uint16_t *p16;   /* (P rounded up to 32) probabilities in F16 */
    float *acc;      /* (32, Dh) accumulator rows: row r holds lane r % 8 of register r / 8 */
} attention_buffers;

/* ---- portable path: ggml's scalar code (sums in double) ---- */

static float dot_f16_generic(const uint16_t *x, const uint16_t *y, int64_t n) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(quant_f16_to_f32(x[i]) * quant_f16_to_f32(y[i]));
    return (float)sum;
}

static void attend_generic(float *o, const uint16_t *q16, const attention_task *t, const int32_t *blocks,
                           int32_t n_pos, int64_t kv_head, attention_buffers *buf) {
    const dev_kv_shape *s = &t->kv->common.shape;
    const int64_t head_dim = s->head_dim;
    float max_score = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *k = kv_row(t->kv, t->layer, 0, blocks[j / s->block_size], j % s->block_size, kv_head);
        buf->score[j] = dot_f16_generic(k, q16, head_dim) * t->scale;
        if (buf->score[j] > max_score) max_score = buf->score[j];
    }
    double sum = 0.0;
    for (int32_t j = 0; j < n_pos; j++) {
        buf->score[j] = expf(buf->score[j] - max_score);
        sum += (double)buf->score[j];
    }
    const float inv = (float)(1.0 / sum);
    for (int32_t j = 0; j < n_pos; j++) buf->p16[j] = quant_f32_to_f16(buf->score[j] * inv);
    for (int64_t d = 0; d < head_dim; d++) {
        double acc = 0.0;
        for (int32_t j = 0; j < n_pos; j++) {
            const uint16_t *v = kv_row(t->kv, t->layer, 1, blocks[j / s->block_size], j % s->block_size, kv_head);
            acc += (double)(quant_f16_to_f32(v[d]) * quant_f16_to_f32(buf->p16[j]));
        }
        o[d] = (float)acc;
    }
}

/* ---- AVX2 path: ggml's AVX2 arithmetic ---- */

#if HOST_ATTN_HAVE_AVX2

static HOST_ATTN_AVX2 inline __m256 avx2_load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* ggml's GGML_F32x8_REDUCE tail: lanes folded as (l0+l4 + l1+l5) + (l2+l6 + l3+l7). */
static HOST_ATTN_AVX2 inline float avx2_reduce_hadd(__m256 v) {
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

/* hsum_float_8's order: (l0+l4 + l2+l6) + (l1+l5 + l3+l7). */
static HOST_ATTN_AVX2 inline float avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ggml_vec_dot_f16: element i goes to lane i % 8 of accumulator (i / 8) % 4; the four
 * are folded 0+2, 1+3, then together, then across lanes; a tail past the last full
 * 32 is added in double. */
static HOST_ATTN_AVX2 float dot_f16_avx2(const uint16_t *x, const uint16_t *y, int64_t n) {
    __m256 sum[ATTN_ACCS] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const int64_t np = n & ~(int64_t)(ATTN_STRIPE - 1);
    for (int64_t i = 0; i < np; i += ATTN_STRIPE) {
        #pragma GCC unroll 4
        for (int r = 0; r < ATTN_ACCS; r++) {
            const int64_t at = i + r * ATTN_LANES;
            sum[r] = _mm256_fmadd_ps(avx2_load_f16(x + at), avx2_load_f16(y + at), sum[r]);
        }
    }
    sum[0] = _mm256_add_ps(sum[0], sum[2]);
    sum[1] = _mm256_add_ps(sum[1], sum[3]);
    sum[0] = _mm256_add_ps(sum[0], sum[1]);
    double total = avx2_reduce_hadd(sum[0]);
    for (int64_t i = np; i < n; i++) total += (double)(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
    return (float)total;
}

/* llamafile's tinyBLAS F16 gemm (llama.cpp's path for steps of 2+ tokens): one
 * accumulator, element i in lane i % 8, folded in hsum_float_8's order. n % 8 == 0. */
static HOST_ATTN_AVX2 float dot_f16_gemm_avx2(const uint16_t *x, const uint16_t *y, int64_t n) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += ATTN_LANES) sum = _mm256_fmadd_ps(avx2_load_f16(x + i), avx2_load_f16(y + i), sum);
    return avx2_hsum(sum);
}

/* ggml_v_expf (see host_ops.c for the derivation; repeated here to stay inline). */
static HOST_ATTN_AVX2 inline __m256 avx2_expf(__m256 x) {
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
    const __m256 n = _mm256_sub_ps(z, shift);
    const __m256 r_hi = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x);
    const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), r_hi);
    const __m256i n_bits = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 two_n = _mm256_castsi256_ps(_mm256_add_epi32(n_bits, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 far = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 r2 = _mm256_mul_ps(r, r);
    const __m256 p_hi = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), r, _mm256_set1_ps(0x1.573e2ep-5f));
    const __m256 p_lo = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), r, _mm256_set1_ps(0x1.fffdb6p-2f));
    const __m256 p_r = _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), r);
    const __m256 poly = _mm256_fmadd_ps(_mm256_fmadd_ps(p_hi, r2, p_lo), r2, p_r);
    if (!_mm256_movemask_ps(far)) return _mm256_fmadd_ps(poly, two_n, two_n);
    const __m256i sign_part =
        _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                         _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(sign_part, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(n_bits, sign_part));
    const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 split = _mm256_mul_ps(_mm256_fmadd_ps(s2, poly, s2), s1);
    const __m256 plain = _mm256_fmadd_ps(two_n, poly, two_n);
    const __m256 moderate = _mm256_or_ps(_mm256_and_ps(far, split), _mm256_andnot_ps(far, plain));
    return _mm256_or_ps(_mm256_and_ps(huge, _mm256_mul_ps(s1, s1)), _mm256_andnot_ps(huge, moderate));
}

/* Softmax of score[0..n_pos) into p16, as ggml_compute_forward_soft_max_f32 with
 * ggml_vec_soft_max_f32: groups of 8 by position, the masked lanes past n_pos -inf
 * (e^-inf = 0, as llama.cpp's mask gives). */
static HOST_ATTN_AVX2 void softmax_avx2(uint16_t *p16, float *score, int32_t n_pos) {
    float max_score = -INFINITY;
    for (int32_t j = 0; j < n_pos; j++) max_score = score[j] > max_score ? score[j] : max_score;
    const int32_t padded = (n_pos + ATTN_LANES - 1) & ~(ATTN_LANES - 1);
    for (int32_t j = n_pos; j < padded; j++) score[j] = -INFINITY;
    const __m256 max_v = _mm256_set1_ps(max_score);
    double sum = 0.0;
    for (int32_t j = 0; j < padded; j += ATTN_LANES) {
        const __m256 e = avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(score + j), max_v));
        _mm256_storeu_ps(score + j, e);
        sum += (double)avx2_hsum(e);
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
    for (int32_t j = 0; j < padded; j += ATTN_LANES) {
        const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(score + j), inv), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(p16 + j), h);
    }
}

/* out[d] = ggml_vec_dot_f16 over positions of V[.][d] and p16: position j adds into
 * accumulator row j % 32 (= lane j % 8 of register (j / 8) % 4), vectorized over d;
 * the 32 rows are then folded in ggml's reduction order, again over d. */
static HOST_ATTN_AVX2 void weighted_values_avx2(float *o, const attention_task *t, const int32_t *blocks,
                                                int32_t n_pos, int64_t kv_head, const attention_buffers *buf) {
    const dev_kv_shape *s = &t->kv->common.shape;
    const int64_t head_dim = s->head_dim;
    float *acc = buf->acc; /* (32, Dh) */
    const int32_t rows = t->gemm_layout ? ATTN_LANES : ATTN_STRIPE;
    memset(acc, 0, sizeof(float) * (size_t)rows * (size_t)head_dim);
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *v = kv_row(t->kv, t->layer, 1, blocks[j / s->block_size], j % s->block_size, kv_head);
        const __m256 p = _mm256_set1_ps(_cvtsh_ss(buf->p16[j]));
        float *row = acc + (size_t)(j % rows) * (size_t)head_dim;
        for (int64_t d = 0; d < head_dim; d += ATTN_LANES) {
            _mm256_storeu_ps(row + d, _mm256_fmadd_ps(avx2_load_f16(v + d), p, _mm256_loadu_ps(row + d)));
        }
    }
    if (t->gemm_layout) {
        /* 8 rows (lane j % 8 of one register), folded in hsum_float_8's order */
        for (int64_t d = 0; d < head_dim; d += ATTN_LANES) {
            __m256 lane[ATTN_LANES];
            #pragma GCC unroll 8
            for (int l = 0; l < ATTN_LANES; l++) lane[l] = _mm256_loadu_ps(acc + (size_t)l * (size_t)head_dim + d);
            const __m256 s0 = _mm256_add_ps(lane[4], lane[0]);
            const __m256 s1 = _mm256_add_ps(lane[5], lane[1]);
            const __m256 s2 = _mm256_add_ps(lane[6], lane[2]);
            const __m256 s3 = _mm256_add_ps(lane[7], lane[3]);
            _mm256_storeu_ps(o + d, _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
        }
        return;
    }
    /* fold: register r lane l is row 8r + l; registers 0+2, 1+3, then 0+1 */
    for (int64_t d = 0; d < head_dim; d += ATTN_LANES) {
        __m256 lane[ATTN_LANES];
        #pragma GCC unroll 8
        for (int l = 0; l < ATTN_LANES; l++) {
            const __m256 r0 = _mm256_loadu_ps(acc + (size_t)(0 * ATTN_LANES + l) * (size_t)head_dim + d);
            const __m256 r1 = _mm256_loadu_ps(acc + (size_t)(1 * ATTN_LANES + l) * (size_t)head_dim + d);
            const __m256 r2 = _mm256_loadu_ps(acc + (size_t)(2 * ATTN_LANES + l) * (size_t)head_dim + d);
            const __m256 r3 = _mm256_loadu_ps(acc + (size_t)(3 * ATTN_LANES + l) * (size_t)head_dim + d);
            lane[l] = _mm256_add_ps(_mm256_add_ps(r0, r2), _mm256_add_ps(r1, r3));
        }
        /* across lanes: t[k] = l[k] + l[k+4]; then (t0 + t1) + (t2 + t3) */
        const __m256 t0 = _mm256_add_ps(lane[0], lane[4]);
        const __m256 t1 = _mm256_add_ps(lane[1], lane[5]);
        const __m256 t2 = _mm256_add_ps(lane[2], lane[6]);
        const __m256 t3 = _mm256_add_ps(lane[3], lane[7]);
        _mm256_storeu_ps(o + d, _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)));
    }
}

static HOST_ATTN_AVX2 void attend_avx2(float *o, const uint16_t *q16, const attention_task *t, const int32_t *blocks,
                                       int32_t n_pos, int64_t kv_head, attention_buffers *buf) {
    const dev_kv_shape *s = &t->kv->common.shape;
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *k = kv_row(t->kv, t->layer, 0, blocks[j / s->block_size], j % s->block_size, kv_head);
        const float dot = t->gemm_layout ? dot_f16_gemm_avx2(k, q16, s->head_dim) : dot_f16_avx2(k, q16, s->head_dim);
        buf->score[j] = dot * t->scale;
    }
    softmax_avx2(buf->p16, buf->score, n_pos);
    weighted_values_avx2(o, t, blocks, n_pos, kv_head, buf);
}

#endif

static void attention_heads(void *ctx, int ith, int nth) {
    attention_task *t = ctx;
    const dev_kv_shape *s = &t->kv->common.shape;
    int64_t head_dim = s->head_dim;
    int64_t group = t->n_heads / s->n_kv_heads; /* query heads per KV head */
    size_t positions = (size_t)s->n_blocks * (size_t)s->block_size + ATTN_STRIPE;
    char *slice = t->scratch + (size_t)ith * t->thread_bytes;
    attention_buffers buf = {
        .score = (float *)slice,
        .p16 = (uint16_t *)(slice + positions * sizeof(float)),
        .acc = (float *)(slice + positions * (sizeof(float) + sizeof(uint16_t))),
    };
    int64_t begin, end;
    host__split((int64_t)t->step->n_tokens * t->n_heads, ith, nth, &begin, &end);

    uint16_t q16[ATTN_MAX_HEAD_DIM];
    for (int64_t item = begin; item < end; item++) {
        int64_t token = item / t->n_heads;
        int64_t head = item % t->n_heads;
        int64_t kv_head = head / group;
        int32_t seq = t->step->seq[token];
        int32_t n_pos = t->step->pos[token] + 1;
        SP_ASSERT((size_t)n_pos + ATTN_STRIPE <= positions);
        const int32_t *blocks = t->step->block_table + (int64_t)seq * t->step->max_blocks;
        const float *q = t->q + (token * t->n_heads + head) * head_dim;
        float *o = t->out + (token * t->n_heads + head) * head_dim;
        for (int64_t d = 0; d < head_dim; d++) q16[d] = quant_f32_to_f16(q[d]);
#if HOST_ATTN_HAVE_AVX2
        if (t->simd) {
            attend_avx2(o, q16, t, blocks, n_pos, kv_head, &buf);
            continue;
        }
#endif
        attend_generic(o, q16, t, blocks, n_pos, kv_head, &buf);
    }
}

void host__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer,
                     const dev_step *step, int64_t n_heads, float scale) {
    host_backend *hb = (host_backend *)dev;
    const host_kv *hk = (const host_kv *)kv;
    const dev_kv_shape *shape = &hk->common.shape;
    SP_ASSERT(shape->head_dim <= ATTN_MAX_HEAD_DIM && n_heads % shape->n_kv_heads == 0);
    size_t thread_bytes = host__attention_scratch_bytes(shape);
    SP_ASSERT(hb->attn_scratch != NULL &&
              thread_bytes * (size_t)host__pool_threads(hb->pool) <= hb->attn_scratch_bytes); /* see host_kv_create */
    attention_task task = {out, q, hk, layer, step, n_heads, scale, false, false, hb->attn_scratch, thread_bytes};
#if HOST_ATTN_HAVE_AVX2
    task.simd = host__cpu_has_avx2() && shape->head_dim % ATTN_LANES == 0;
    task.gemm_layout = hb->attn_sums == HOST_ATTN_SUMS_GEMM ||
                       (hb->attn_sums == HOST_ATTN_SUMS_LLAMA_BATCHED && step->n_tokens >= 2);
#endif
    host__pool_run(hb->pool, attention_heads, &task);
}

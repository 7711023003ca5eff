/* host_attention.c: KV writes into the paged F16 pools and causal attention over them.
 *
 * Legend: T = tokens in the step, H = query heads, Hk = KV heads, Dh = head width,
 * B = tokens per block. Pools per layer: K and V each [n_blocks][B][Hk][Dh] F16.
 *
 * Attention runs one task per (token, head): the query is rounded to F16 first (as
 * llama.cpp's CPU path does before its F16 dot), then the token's context positions
 * 0..pos are visited block by block through its sequence's block table with an online
 * softmax in F32. Every token reads only its own sequence, so results do not depend
 * on the batch.
 */
#include <math.h>
#include <string.h>

#include "gpu/host/host_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define HOST_HAVE_X86 1
#else
#define HOST_HAVE_X86 0
#endif

enum { ATTN_MAX_HEAD_DIM = 512 };

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

/* ---- dot and axpy against F16 rows ---- */

static float dot_f16_generic(const float *q, const uint16_t *k, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += q[i] * quant_f16_to_f32(k[i]);
    return sum;
}

static void axpy_f16_generic(float *acc, float a, const uint16_t *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) acc[i] += a * quant_f16_to_f32(v[i]);
}

static void scale_generic(float *acc, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) acc[i] *= a;
}

#if HOST_HAVE_X86
__attribute__((target("avx2,fma,f16c"))) static float dot_f16_avx2(const float *q, const uint16_t *k, int64_t n) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i)));
        sum = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, sum);
    }
    __m128 lo = _mm256_castps256_ps128(sum), hi = _mm256_extractf128_ps(sum, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_hadd_ps(lo, lo);
    lo = _mm_hadd_ps(lo, lo);
    return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma,f16c"))) static void axpy_f16_avx2(float *acc, float a, const uint16_t *v, int64_t n) {
    __m256 av = _mm256_set1_ps(a);
    for (int64_t i = 0; i < n; i += 8) {
        __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(av, vv, _mm256_loadu_ps(acc + i)));
    }
}
#endif

typedef struct attention_task {
    float *out;             /* (T, H*Dh) */
    const float *q;         /* (T, H*Dh) */
    const host_kv *kv;
    int layer;
    const dev_step *step;
    int64_t n_heads;
    float scale;
    bool simd;
} attention_task;

static void attention_heads(void *ctx, int ith, int nth) {
    attention_task *t = ctx;
    const dev_kv_shape *s = &t->kv->common.shape;
    int64_t head_dim = s->head_dim;
    int64_t group = t->n_heads / s->n_kv_heads; /* query heads per KV head */
    int64_t begin, end;
    host__split((int64_t)t->step->n_tokens * t->n_heads, ith, nth, &begin, &end);

    float q16[ATTN_MAX_HEAD_DIM];
    float acc[ATTN_MAX_HEAD_DIM];
    for (int64_t item = begin; item < end; item++) {
        int64_t token = item / t->n_heads;
        int64_t head = item % t->n_heads;
        int64_t kv_head = head / group;
        int32_t seq = t->step->seq[token];
        int32_t pos = t->step->pos[token];
        const int32_t *blocks = t->step->block_table + (int64_t)seq * t->step->max_blocks;
        const float *q = t->q + (token * t->n_heads + head) * head_dim;
        for (int64_t d = 0; d < head_dim; d++) q16[d] = quant_f16_to_f32(quant_f32_to_f16(q[d]));
        memset(acc, 0, sizeof(float) * (size_t)head_dim);

        float max_score = -INFINITY, denom = 0.0f;
        for (int32_t j = 0; j <= pos; j++) {
            int32_t block = blocks[j / s->block_size];
            int32_t offset = j % s->block_size;
            const uint16_t *k = kv_row(t->kv, t->layer, 0, block, offset, kv_head);
            const uint16_t *v = kv_row(t->kv, t->layer, 1, block, offset, kv_head);
#if HOST_HAVE_X86
            float score = (t->simd ? dot_f16_avx2(q16, k, head_dim) : dot_f16_generic(q16, k, head_dim)) * t->scale;
#else
            float score = dot_f16_generic(q16, k, head_dim) * t->scale;
#endif
            if (score > max_score) {
                float correction = expf(max_score - score); /* 0 on the first position */
                scale_generic(acc, correction, head_dim);
                denom *= correction;
                max_score = score;
            }
            float weight = expf(score - max_score);
            denom += weight;
#if HOST_HAVE_X86
            if (t->simd)
                axpy_f16_avx2(acc, weight, v, head_dim);
            else
#endif
                axpy_f16_generic(acc, weight, v, head_dim);
        }
        float *o = t->out + (token * t->n_heads + head) * head_dim;
        float inv = 1.0f / denom;
        for (int64_t d = 0; d < head_dim; d++) o[d] = acc[d] * inv;
    }
}

void host__attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer,
                     const dev_step *step, int64_t n_heads, float scale) {
    host_backend *hb = (host_backend *)dev;
    const host_kv *hk = (const host_kv *)kv;
    SP_ASSERT(hk->common.shape.head_dim <= ATTN_MAX_HEAD_DIM && n_heads % hk->common.shape.n_kv_heads == 0);
    attention_task task = {out, q, hk, layer, step, n_heads, scale, false};
#if HOST_HAVE_X86
    task.simd = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && hk->common.shape.head_dim % 8 == 0;
#endif
    host__pool_run(hb->pool, attention_heads, &task);
}

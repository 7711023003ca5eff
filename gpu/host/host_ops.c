/* host_ops.c: the CPU backend's elementwise and row ops: embedding gather, RMSNorm,
 * RoPE, SwiGLU, add, row gather.
 *
 * Legend: T = tokens in the step, D = row width, H = heads, Dh = head width.
 * The arithmetic mirrors ggml's CPU ops (RMSNorm sums squares in double, RoPE builds
 * its angles by repeated multiplication in float, SiLU is x / (1 + e^-x)) so that
 * results track llama.cpp's closely.
 *
 * Small ops run on the calling thread: handing them to the pool costs more than
 * they do. Larger ones split rows across the pool.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "gpu/host/host_internal.h"

/* Below this many elements an op runs inline on the calling thread. */
enum { HOST_INLINE_ELEMENTS = 16384 };

/* ---- embedding ---- */

typedef struct embed_task {
    float *x;              /* (T, D) */
    const dev_tensor *emb; /* (V, D) */
    const dev_step *step;
} embed_task;

static void embed_rows(void *ctx, int ith, int nth) {
    embed_task *t = ctx;
    int64_t begin, end;
    host__split(t->step->n_tokens, ith, nth, &begin, &end);
    int64_t dim = t->emb->ne0;
    size_t row_bytes = quant_row_bytes(t->emb->type, dim);
    for (int64_t i = begin; i < end; i++) {
        const char *row = (const char *)t->emb->data + (size_t)t->step->tokens[i] * row_bytes;
        quant_dequantize_row(t->emb->type, t->x + i * dim, row, dim);
    }
}

void host__embed(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step) {
    host_backend *hb = (host_backend *)dev;
    embed_task task = {x, emb, step};
    if (step->n_tokens * emb->ne0 < HOST_INLINE_ELEMENTS)
        embed_rows(&task, 0, 1);
    else
        host__pool_run(hb->pool, embed_rows, &task);
}

/* ---- RMSNorm ---- */

typedef struct rmsnorm_task {
    float *out;
    const float *in;
    float *residual;    /* add_rmsnorm: the x that delta is added to (in == residual); else NULL */
    const float *delta; /* add_rmsnorm only */
    const float *w;     /* (D) */
    float eps;
    int64_t rows, dim;
} rmsnorm_task;

static void rmsnorm_rows(void *ctx, int ith, int nth) {
    rmsnorm_task *t = ctx;
    int64_t begin, end;
    host__split(t->rows, ith, nth, &begin, &end);
    for (int64_t r = begin; r < end; r++) {
        if (t->residual) { /* the same float adds dev_add makes, before the row is read */
            float *x = t->residual + r * t->dim;
            const float *d = t->delta + r * t->dim;
            for (int64_t i = 0; i < t->dim; i++) x[i] = x[i] + d[i];
        }
        const float *x = t->in + r * t->dim;
        float *y = t->out + r * t->dim;
        double sum = 0.0;
        for (int64_t i = 0; i < t->dim; i++) sum += (double)(x[i] * x[i]);
        float mean = (float)(sum / (double)t->dim);
        float scale = 1.0f / sqrtf(mean + t->eps);
        for (int64_t i = 0; i < t->dim; i++) y[i] = (x[i] * scale) * t->w[i];
    }
}

static void rmsnorm_run(host_backend *hb, rmsnorm_task *task) {
    if (task->rows * task->dim < HOST_INLINE_ELEMENTS)
        rmsnorm_rows(task, 0, 1);
    else
        host__pool_run(hb->pool, rmsnorm_rows, task);
}

void host__rmsnorm(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                   int64_t dim) {
    rmsnorm_task task = {out, in, NULL, NULL, (const float *)w->data, eps, rows, dim};
    rmsnorm_run((host_backend *)dev, &task);
}

void host__add_rmsnorm(dev_backend *dev, float *out, float *x, const float *delta, const dev_tensor *w, float eps,
                       int64_t rows, int64_t dim) {
    rmsnorm_task task = {out, x, x, delta, (const float *)w->data, eps, rows, dim};
    rmsnorm_run((host_backend *)dev, &task);
}

/* ---- RoPE ---- */

typedef struct rope_task {
    float *x; /* (T, H, Dh) */
    const dev_step *step;
    const dev_rope *rope;
    int64_t heads, head_dim;
} rope_task;

enum { ROPE_MAX_ROT = 1024 };

static void rope_rows(void *ctx, int ith, int nth) {
    rope_task *t = ctx;
    const dev_rope *rope = t->rope;
    int n_rot = rope->n_rot;
    const float *freq_factors = rope->freq_factors ? (const float *)rope->freq_factors->data : NULL;
    float theta_scale = powf(rope->freq_base, -2.0f / (float)n_rot);
    float cos_sin[ROPE_MAX_ROT]; /* (n_rot/2) pairs of cos, sin */
    int64_t begin, end;
    host__split(t->step->n_tokens, ith, nth, &begin, &end);
    for (int64_t i = begin; i < end; i++) {
        float theta = (float)t->step->pos[i];
        for (int i0 = 0; i0 < n_rot; i0 += 2) {
            float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
            float angle = rope->freq_scale * (theta / ff);
            cos_sin[i0] = cosf(angle);
            cos_sin[i0 + 1] = sinf(angle);
            theta *= theta_scale;
        }
        for (int64_t h = 0; h < t->heads; h++) {
            float *v = t->x + (i * t->heads + h) * t->head_dim;
            for (int i0 = 0; i0 < n_rot; i0 += 2) {
                float c = cos_sin[i0], s = cos_sin[i0 + 1];
                int a, b;
                if (rope->style == DEV_ROPE_NORMAL) {
                    a = i0;
                    b = i0 + 1;
                } else {
                    a = i0 / 2;
                    b = i0 / 2 + n_rot / 2;
                }
                /* as ggml's compiled rotate_pairs rounds it (its x0*c - x1*s and
                 * x0*s + x1*c are contracted to these fused multiply-adds) */
                float x0 = v[a], x1 = v[b];
                v[a] = fmaf(c, x0, -(s * x1));
                v[b] = fmaf(s, x0, c * x1);
            }
        }
    }
}

void host__rope_apply(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                      int64_t head_dim) {
    host_backend *hb = (host_backend *)dev;
    SP_ASSERT(rope->n_rot <= ROPE_MAX_ROT && rope->n_rot <= head_dim && rope->n_rot % 2 == 0);
    rope_task task = {x, step, rope, heads, head_dim};
    if (step->n_tokens * heads * head_dim < HOST_INLINE_ELEMENTS)
        rope_rows(&task, 0, 1);
    else
        host__pool_run(hb->pool, rope_rows, &task);
}

/* ---- elementwise ---- */

typedef struct elementwise_task {
    float *out;
    const float *a, *b;
    int64_t n;
    bool simd; /* AVX2+FMA present (SwiGLU only) */
} elementwise_task;

/* SiLU as llama.cpp computes it on AVX2 (ggml's vec_swiglu): x / (1 + e^-x) through
 * ggml's vectorized e^x (host__avx2_expf), 8 elements at a time. Each lane's result
 * depends only on its own input, so a tail of fewer than 8 goes through the same code
 * padded to 8 lanes, and an element's result never depends on where it sits in the
 * batch. ggml sends the tail of each row (row width % 8 elements) through expf
 * instead; for widths that are multiples of 8 (every model of interest) the results
 * are identical. Without AVX2 the same e^x runs one element at a time (host__expf),
 * with the same result. */
static float silu_scalar(float x) {
    return x / (1.0f + host__expf(0.0f - x));
}

#if HOST_SIMD_AVX2

/* x / (1 + e^-x) on 8 lanes. */
static HOST_AVX2_TARGET inline __m256 avx2_silu(__m256 x) {
    const __m256 e = host__avx2_expf(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static HOST_AVX2_TARGET void swiglu_avx2(float *out, const float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 s = avx2_silu(_mm256_loadu_ps(gate + i));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    if (i < n) {
        float g[8] = {0}, u[8] = {0}, y[8];
        memcpy(g, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u, up + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(y, _mm256_mul_ps(avx2_silu(_mm256_loadu_ps(g)), _mm256_loadu_ps(u)));
        memcpy(out + i, y, sizeof(float) * (size_t)(n - i));
    }
}

#endif

static void swiglu_range(void *ctx, int ith, int nth) {
    elementwise_task *t = ctx;
    int64_t chunk_begin, chunk_end; /* in groups of 8 elements */
    host__split((t->n + 7) / 8, ith, nth, &chunk_begin, &chunk_end);
    int64_t end = chunk_end * 8 < t->n ? chunk_end * 8 : t->n;
    int64_t begin = chunk_begin * 8 < end ? chunk_begin * 8 : end;
#if HOST_SIMD_AVX2
    if (t->simd) {
        swiglu_avx2(t->out + begin, t->a + begin, t->b + begin, end - begin);
        return;
    }
#endif
    for (int64_t i = begin; i < end; i++) t->out[i] = silu_scalar(t->a[i]) * t->b[i];
}

void host__swiglu(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n) {
    host_backend *hb = (host_backend *)dev;
    elementwise_task task = {out, gate, up, n, false};
#if HOST_SIMD_AVX2
    task.simd = hb->base.cpu_isa >= SP_CPU_ISA_AVX2;
#endif
    if (n < HOST_INLINE_ELEMENTS)
        swiglu_range(&task, 0, 1);
    else
        host__pool_run(hb->pool, swiglu_range, &task);
}

static void add_range(void *ctx, int ith, int nth) {
    elementwise_task *t = ctx;
    int64_t begin, end;
    host__split(t->n, ith, nth, &begin, &end);
    for (int64_t i = begin; i < end; i++) t->out[i] = t->a[i] + t->b[i];
}

void host__add(dev_backend *dev, float *out, const float *a, const float *b, int64_t n) {
    host_backend *hb = (host_backend *)dev;
    elementwise_task task = {out, a, b, n, false};
    if (n < HOST_INLINE_ELEMENTS)
        add_range(&task, 0, 1);
    else
        host__pool_run(hb->pool, add_range, &task);
}

void host__gather_rows(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows,
                       int64_t dim) {
    (void)dev;
    for (int64_t r = 0; r < n_rows; r++)
        if (out + r * dim != in + (int64_t)rows[r] * dim)
            memmove(out + r * dim, in + (int64_t)rows[r] * dim, (size_t)dim * sizeof(float));
}

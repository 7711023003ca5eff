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
 * Tiling: a task is one run of consecutive tokens of one sequence (a prefill chunk's
 * tokens, a speculating sequence's verify rows; up to ATTN_TOKEN_TILE of them) and the
 * query heads that share a KV head (up to ATTN_HEAD_TILE). In the AVX2 path over F16
 * pools each K row is read and converted once for all of the run's (token, head) pairs
 * (up to ATTN_PAIRS of them: the positions every token of the run sees, then each
 * token's few later ones alone), and the pairs' sums of 8 positions are folded together
 * (fold8_avx2: hsum_float_8's additions, transposed). Every pair still makes exactly its
 * own sums in its own order (the query is kept as the floats of its F16 rounding, which
 * is exact), so a token's result does not depend on its run. Likewise each V row is
 * converted once for all pairs (values_pairs_avx2: 16 widths a pass, so the pairs' sums
 * stay in registers), each pair adding its positions into its own accumulator rows in
 * the one-pair order; a lone pair (one token's decode, head by head) keeps the whole
 * width in registers instead (weighted_values_avx2). On the 2-core AVX2 EPYC this cut
 * attention's time in a 1024-token prompt by about a quarter. When the step has too few
 * tasks to keep the workers busy (one sequence's decode or verify rows), each query
 * head is its own task instead.
 * Each pool worker uses its own slice of the backend's attention scratch (sized when
 * a KV cache is created): P scores per pair of a task (then its probabilities, as
 * floats), P F16 probabilities per head, and per pair its query and 8 x Dh accumulators.
 */
#include <math.h>
#include <string.h>

#include "gpu/host/host_internal.h"

enum {
    ATTN_MAX_HEAD_DIM = 512,
    ATTN_LANES = 8,      /* lanes of tinyBLAS's accumulator (one AVX2 register) */
    ATTN_HEAD_TILE = 4,  /* query heads of one KV head handled by one task */
    ATTN_TOKEN_TILE = 4, /* consecutive tokens of one sequence handled by one task */
    ATTN_PAIRS = 8,      /* (token, head) pairs of one task: their sums fit in registers */
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
        if (s->kv_type != SP_KV_F16) {
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

/* Positions a score or probability buffer holds: the whole pool, and a group of 8 past it. */
static size_t buffer_positions(const dev_kv_shape *shape) {
    return (size_t)shape->n_blocks * (size_t)shape->block_size + ATTN_LANES;
}

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* One worker's slice (see attention_worker). */
size_t host__attention_scratch_bytes(const dev_kv_shape *shape) {
    const size_t positions = buffer_positions(shape), dh = (size_t)shape->head_dim;
    return ATTN_PAIRS * align64(positions * sizeof(float)) + ATTN_HEAD_TILE * align64(positions * sizeof(uint16_t)) +
           ATTN_PAIRS * (align64(dh * sizeof(float)) + align64(ATTN_LANES * dh * sizeof(float))) +
           align64(positions * sizeof(const unsigned char *));
}

typedef struct attention_task {
    float *out;     /* (T, H*Dh) */
    const float *q; /* (T, H*Dh) */
    const host_kv *kv;
    int layer;
    const dev_step *step;
    int64_t n_heads;
    int64_t heads_per_task; /* query heads of one KV head per task (1..ATTN_HEAD_TILE) */
    int run_tokens;         /* most tokens of a run (a task's tokens) */
    int64_t n_runs;         /* runs of the step: a task is (run, KV head, chunk of heads) */
    float scale;
    sp_cpu_isa isa; /* the backend's kernel set */
    bool simd;      /* AVX2 present and Dh % 8 == 0 */
    char *scratch;  /* nth slices of thread_bytes */
    size_t thread_bytes;
} attention_task;

/* A worker's buffers, carved from its slice of the scratch. Pair i of a task is its
 * token i / nh and head i % nh. */
typedef struct attention_worker {
    float *score[ATTN_PAIRS];      /* (P rounded up to 8) scores, then e^(score - max) */
    uint16_t *p16[ATTN_HEAD_TILE]; /* (P rounded up to 8) probabilities in F16 */
    float *q[ATTN_PAIRS];          /* (Dh) the query rounded to F16, as floats */
    float *acc[ATTN_PAIRS];        /* (8, Dh) accumulator rows: row l holds lane l */
    const unsigned char **rows;    /* (P) the task's K row of each position (fill_rows) */
} attention_worker;

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
                                    int64_t kv_head, const uint16_t *p16, float *acc) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    memset(acc, 0, sizeof(float) * ATTN_LANES * (size_t)head_dim);
    for (int32_t j = 0; j < n_pos; j++) {
        const uint16_t *v = position_row(t, 1, blocks, j, kv_head);
        const float p = quant_f16_to_f32(p16[j]);
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

/* hsum_float_8 of each of the 8 registers v[0..7], as 8 lanes: lane j is
 * host__avx2_hsum(v[j]), the same additions of the same values (((l0 + l4) + (l2 + l6))
 * + ((l1 + l5) + (l3 + l7))), done for the 8 at once. */
static HOST_AVX2_TARGET inline __m256 fold8_avx2(const __m256 *v) {
    __m256 s[4]; /* s[j]: v[j]'s l[k] + l[k+4] in its low half, v[j + 4]'s in its high half */
    for (int j = 0; j < 4; j++)
        s[j] =
            _mm256_add_ps(_mm256_permute2f128_ps(v[j], v[j + 4], 0x20), _mm256_permute2f128_ps(v[j], v[j + 4], 0x31));
    /* (s0 + s2, s1 + s3) of registers j, j + 1 (and j + 4, j + 5) */
    const __m256 t01 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], 0x44), _mm256_shuffle_ps(s[0], s[1], 0xee));
    const __m256 t23 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], 0x44), _mm256_shuffle_ps(s[2], s[3], 0xee));
    return _mm256_add_ps(_mm256_shuffle_ps(t01, t23, 0x88), _mm256_shuffle_ps(t01, t23, 0xdd));
}

/* The K row of position j (the V row: offset by the pool's bytes), from the task's
 * table of its positions' rows (fill_rows). */
static inline const uint16_t *row_at(const unsigned char *const *rows, int32_t j, size_t offset) {
    return (const uint16_t *)(rows[j] + offset);
}

/* Positions whose dots one pass makes for np pairs: enough independent sums to hide the
 * latency of each sum's chain of multiply-adds (8 of them at Dh = 64), within the
 * registers. */
#define SCORE_POSITIONS(np) ((np) == 1 ? 8 : (np) == 2 ? 4 : (np) <= 4 ? 2 : 1)

/* The dots of positions jb + l0 .. jb + l0 + npos - 1 for the np pairs, into part. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
scores_positions_avx2(const int np, const int npos, __m256 (*part)[ATTN_LANES], float *const *q, int64_t head_dim,
                      const unsigned char *const *rows, int32_t jb, int l0) {
    const uint16_t *k[8];
    __m256 sum[8][ATTN_PAIRS];
#pragma GCC unroll 8
    for (int l = 0; l < npos; l++) {
        k[l] = row_at(rows, jb + l0 + l, 0);
#pragma GCC unroll 8
        for (int i = 0; i < np; i++) sum[l][i] = _mm256_setzero_ps();
    }
    for (int64_t d = 0; d < head_dim; d += ATTN_LANES) {
#pragma GCC unroll 8
        for (int l = 0; l < npos; l++) {
            const __m256 kv = avx2_load_f16(k[l] + d);
#pragma GCC unroll 8
            for (int i = 0; i < np; i++) sum[l][i] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q[i] + d), sum[l][i]);
        }
    }
#pragma GCC unroll 8
    for (int l = 0; l < npos; l++)
#pragma GCC unroll 8
        for (int i = 0; i < np; i++) part[i][l0 + l] = sum[l][i];
}

/* score[i][j] = dot(K[j], q[i]) * scale for the np = nt * nh pairs of a run and the
 * positions [j0, j1), each dot as llamafile's tinyBLAS F16 gemm makes it: one
 * accumulator, element i in lane i % 8, folded in hsum_float_8's order. K[j] is read and
 * converted once for all np pairs, a few positions at a time (SCORE_POSITIONS); each
 * pair's accumulators of 8 positions are kept and folded together (fold8_avx2). Always
 * inlined with a constant np, so the sums stay in registers. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
scores_pairs_avx2(const int np, float *const *score, float *const *q, const attention_task *t,
                  const unsigned char *const *rows, int32_t j0, int32_t j1) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    const int npos = SCORE_POSITIONS(np);
    const __m256 scale = _mm256_set1_ps(t->scale);
    __m256 part[ATTN_PAIRS][ATTN_LANES]; /* pair i's sums of the group's positions */
    for (int32_t jb = j0; jb < j1; jb += ATTN_LANES) {
        const int n = j1 - jb < ATTN_LANES ? (int)(j1 - jb) : ATTN_LANES;
        int l = 0;
        for (; l + npos <= n; l += npos) scores_positions_avx2(np, npos, part, q, head_dim, rows, jb, l);
        for (; l < n; l++) scores_positions_avx2(np, 1, part, q, head_dim, rows, jb, l);
        if (n == ATTN_LANES) {
#pragma GCC unroll 8
            for (int i = 0; i < np; i++) _mm256_storeu_ps(score[i] + jb, _mm256_mul_ps(fold8_avx2(part[i]), scale));
        } else {
            for (int i = 0; i < np; i++)
                for (int m = 0; m < n; m++) score[i][jb + m] = host__avx2_hsum(part[i][m]) * t->scale;
        }
    }
}

/* scores_pairs_avx2 for a run's np pairs (1..ATTN_PAIRS), each count its own copy. */
static HOST_AVX2_TARGET void scores_avx2(int np, float *const *score, float *const *q, const attention_task *t,
                                         const unsigned char *const *rows, int32_t j0, int32_t j1) {
    switch (np) {
    case 1: scores_pairs_avx2(1, score, q, t, rows, j0, j1); break;
    case 2: scores_pairs_avx2(2, score, q, t, rows, j0, j1); break;
    case 3: scores_pairs_avx2(3, score, q, t, rows, j0, j1); break;
    case 4: scores_pairs_avx2(4, score, q, t, rows, j0, j1); break;
    case 5: scores_pairs_avx2(5, score, q, t, rows, j0, j1); break;
    case 6: scores_pairs_avx2(6, score, q, t, rows, j0, j1); break;
    case 7: scores_pairs_avx2(7, score, q, t, rows, j0, j1); break;
    case 8: scores_pairs_avx2(8, score, q, t, rows, j0, j1); break;
    default: SP_ASSERT(!"np is 1 to ATTN_PAIRS");
    }
}

/* Softmax of score[0..n_pos), as ggml_compute_forward_soft_max_f32 with
 * ggml_vec_soft_max_f32: groups of 8 by position, the masked lanes past n_pos -inf
 * (e^-inf = 0, as llama.cpp's mask gives). Leaves e^(score - max) in score (padded to
 * a group of 8) and returns 1 / their sum, broadcast; softmax_avx2 and
 * softmax_float_avx2 round the probabilities to F16 from it. */
static HOST_AVX2_TARGET __m256 softmax_exp_avx2(float *score, int32_t n_pos) {
    const int32_t padded = (n_pos + ATTN_LANES - 1) & ~(ATTN_LANES - 1);
    for (int32_t j = n_pos; j < padded; j++) score[j] = -INFINITY;
    /* the largest score, 8 lanes at a time (a maximum is exact in any order) */
    __m256 max8 = _mm256_set1_ps(-INFINITY);
    for (int32_t j = 0; j < padded; j += ATTN_LANES) max8 = _mm256_max_ps(max8, _mm256_loadu_ps(score + j));
    __m128 max4 = _mm_max_ps(_mm256_castps256_ps128(max8), _mm256_extractf128_ps(max8, 1));
    max4 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
    max4 = _mm_max_ss(max4, _mm_movehdup_ps(max4));
    const __m256 max_v = _mm256_broadcastss_ps(max4);
    double sum = 0.0;
    for (int32_t j = 0; j < padded; j += ATTN_LANES) {
        const __m256 e = host__avx2_expf(_mm256_sub_ps(_mm256_loadu_ps(score + j), max_v));
        _mm256_storeu_ps(score + j, e);
        sum += (double)host__avx2_hsum(e);
    }
    return _mm256_set1_ps((float)(1.0 / sum));
}

/* The probabilities in F16, into p16. */
static HOST_AVX2_TARGET void softmax_avx2(uint16_t *p16, float *score, int32_t n_pos) {
    const __m256 inv = softmax_exp_avx2(score, n_pos);
    for (int32_t j = 0; j < n_pos; j += ATTN_LANES) {
        const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(score + j), inv), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(p16 + j), h);
    }
}

/* The probabilities rounded to F16, as floats (exact), in place in score. */
static HOST_AVX2_TARGET void softmax_float_avx2(float *score, int32_t n_pos) {
    const __m256 inv = softmax_exp_avx2(score, n_pos);
    for (int32_t j = 0; j < n_pos; j += ATTN_LANES) {
        const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(score + j), inv), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(score + j, _mm256_cvtph_ps(h));
    }
}

/* Accumulator row `lane` (positions lane, lane + 8, ...) over widths [d0, d0 + 8 * NC)
 * of V, kept in NC registers for the whole pass, then stored once. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
values_lane_avx2(const int nc, float *acc_row, const attention_task *t, const unsigned char *const *rows, int32_t n_pos,
                 const uint16_t *p16, int lane, int64_t d0) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) acc[c] = _mm256_setzero_ps();
    for (int32_t j = lane; j < n_pos; j += ATTN_LANES) {
        const uint16_t *v = row_at(rows, j, t->kv->pool_bytes) + d0;
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
static HOST_AVX2_TARGET void weighted_values_avx2(float *o, const attention_task *t, const unsigned char *const *rows,
                                                  int32_t n_pos, const uint16_t *p16, float *acc) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    for (int lane = 0; lane < ATTN_LANES; lane++) {
        float *acc_row = acc + (size_t)lane * (size_t)head_dim;
        int64_t d0 = 0;
        for (; d0 + 8 * ATTN_LANES <= head_dim; d0 += 8 * ATTN_LANES)
            values_lane_avx2(8, acc_row, t, rows, n_pos, p16, lane, d0);
        for (; d0 < head_dim; d0 += ATTN_LANES) values_lane_avx2(1, acc_row, t, rows, n_pos, p16, lane, d0);
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

/* Accumulator rows `lane` of the np pairs of a run over widths [d0, d0 + 8 * nc): the
 * positions every token of the run sees (j < common), then each token's own later ones
 * (pair i sees j < common + i / nh). Each V chunk is converted once for all pairs; pair
 * i's probabilities are pf[i] (F16-rounded floats). Always inlined with constant np
 * and nc, so the np * nc sums stay in registers. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
values_pairs_lane_avx2(const int np, const int nc, float *const *acc, const float *const *pf, int nh,
                       const attention_task *t, const unsigned char *const *rows, int32_t common, int32_t end, int lane,
                       int64_t d0) {
    __m256 sum[ATTN_PAIRS][2];
#pragma GCC unroll 8
    for (int i = 0; i < np; i++)
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) sum[i][c] = _mm256_setzero_ps();
    int32_t j = lane;
    for (; j < common; j += ATTN_LANES) {
        const uint16_t *v = row_at(rows, j, t->kv->pool_bytes) + d0;
        __m256 vc[2];
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) vc[c] = avx2_load_f16(v + c * ATTN_LANES);
#pragma GCC unroll 8
        for (int i = 0; i < np; i++) {
            const __m256 p = _mm256_broadcast_ss(pf[i] + j);
#pragma GCC unroll 2
            for (int c = 0; c < nc; c++) sum[i][c] = _mm256_fmadd_ps(vc[c], p, sum[i][c]);
        }
    }
    for (; j < end; j += ATTN_LANES) { /* a later token's own positions */
        const uint16_t *v = row_at(rows, j, t->kv->pool_bytes) + d0;
        for (int i = 0; i < np; i++) {
            if (common + i / nh <= j) continue;
            const __m256 p = _mm256_broadcast_ss(pf[i] + j);
            for (int c = 0; c < nc; c++) sum[i][c] = _mm256_fmadd_ps(avx2_load_f16(v + c * ATTN_LANES), p, sum[i][c]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < np; i++)
#pragma GCC unroll 2
        for (int c = 0; c < nc; c++) _mm256_storeu_ps(acc[i] + d0 + c * ATTN_LANES, sum[i][c]);
}

/* weighted_values_avx2 for the np pairs of a run at once: the same sums (position j
 * into accumulator row j % 8, in order, then the rows folded), with each V row
 * converted once for all pairs rather than once a pair. acc[i] is pair i's (8, Dh)
 * accumulator rows; o[i] its output. */
static HOST_AVX2_TARGET inline __attribute__((always_inline)) void
values_pairs_avx2(const int np, float *const *o, float *const *acc, const float *const *pf, int nh,
                  const attention_task *t, const unsigned char *const *rows, int32_t common, int32_t end) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    float *acc_rows[ATTN_PAIRS];
    for (int lane = 0; lane < ATTN_LANES; lane++) {
        for (int i = 0; i < np; i++) acc_rows[i] = acc[i] + (size_t)lane * (size_t)head_dim;
        int64_t d0 = 0;
        if (np <= 6) /* two registers a pair */
            for (; d0 + 2 * ATTN_LANES <= head_dim; d0 += 2 * ATTN_LANES)
                values_pairs_lane_avx2(np, 2, acc_rows, pf, nh, t, rows, common, end, lane, d0);
        for (; d0 < head_dim; d0 += ATTN_LANES)
            values_pairs_lane_avx2(np, 1, acc_rows, pf, nh, t, rows, common, end, lane, d0);
    }
    for (int i = 0; i < np; i++)
        for (int64_t d = 0; d < head_dim; d += ATTN_LANES) {
            __m256 lane[ATTN_LANES];
#pragma GCC unroll 8
            for (int l = 0; l < ATTN_LANES; l++) lane[l] = _mm256_loadu_ps(acc[i] + (size_t)l * (size_t)head_dim + d);
            const __m256 s0 = _mm256_add_ps(lane[0], lane[4]);
            const __m256 s1 = _mm256_add_ps(lane[1], lane[5]);
            const __m256 s2 = _mm256_add_ps(lane[2], lane[6]);
            const __m256 s3 = _mm256_add_ps(lane[3], lane[7]);
            _mm256_storeu_ps(o[i] + d, _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
        }
}

static HOST_AVX2_TARGET void values_avx2(int np, float *const *o, float *const *acc, const float *const *pf, int nh,
                                         const attention_task *t, const unsigned char *const *rows, int32_t common,
                                         int32_t end) {
    switch (np) {
    case 2: values_pairs_avx2(2, o, acc, pf, nh, t, rows, common, end); break;
    case 3: values_pairs_avx2(3, o, acc, pf, nh, t, rows, common, end); break;
    case 4: values_pairs_avx2(4, o, acc, pf, nh, t, rows, common, end); break;
    case 5: values_pairs_avx2(5, o, acc, pf, nh, t, rows, common, end); break;
    case 6: values_pairs_avx2(6, o, acc, pf, nh, t, rows, common, end); break;
    case 7: values_pairs_avx2(7, o, acc, pf, nh, t, rows, common, end); break;
    case 8: values_pairs_avx2(8, o, acc, pf, nh, t, rows, common, end); break;
    default: SP_ASSERT(!"np is 2 to ATTN_PAIRS");
    }
}

#endif

/* Query heads [head0, head0 + nh) of one token, all of KV head kv_head, over a
 * quantized pool (host_attention_quant.c) or without SIMD: buffers 0..nh-1. */
static void attention_token(const attention_task *t, const attention_worker *w, int64_t token, int64_t head0, int nh,
                            int64_t kv_head) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    const int32_t n_pos = t->step->pos[token] + 1;
    const int32_t *blocks = t->step->block_table + (int64_t)t->step->seq[token] * t->step->max_blocks;
    float *o[ATTN_HEAD_TILE];
    for (int h = 0; h < nh; h++) o[h] = t->out + (token * t->n_heads + head0 + h) * head_dim;
    if (t->kv->common.shape.kv_type != SP_KV_F16) {
        /* the query as Q8_0 blocks */
        quant_block_q8_0 q8[ATTN_MAX_HEAD_DIM / QUANT_QK];
        for (int h = 0; h < nh; h++) {
            host__attention_query_q8(t->isa, q8, t->q + (token * t->n_heads + head0 + h) * head_dim, head_dim);
            host__attention_scores_quant(w->score[h], t->kv, kv_pool(t->kv, t->layer, 0), blocks, n_pos, kv_head, q8,
                                         t->scale, t->isa);
#if HOST_SIMD_AVX2
            if (t->simd)
                softmax_avx2(w->p16[h], w->score[h], n_pos);
            else
#endif
                softmax_generic(w->p16[h], w->score[h], n_pos);
        }
        host__attention_values_quant(o, (const uint16_t *const *)w->p16, nh, t->kv, kv_pool(t->kv, t->layer, 1), blocks,
                                     n_pos, kv_head, t->simd);
        return;
    }
    uint16_t q16[ATTN_MAX_HEAD_DIM];
    for (int h = 0; h < nh; h++) {
        const float *q = t->q + (token * t->n_heads + head0 + h) * head_dim;
        for (int64_t d = 0; d < head_dim; d++) q16[d] = quant_f32_to_f16(q[d]);
        scores_generic(w->score[h], t, q16, blocks, n_pos, kv_head);
        softmax_generic(w->p16[h], w->score[h], n_pos);
        weighted_values_generic(o[h], t, blocks, n_pos, kv_head, w->p16[h], w->acc[0]);
    }
}

#if HOST_SIMD_AVX2
/* rows[j] = the K row of position j < n_pos of KV head kv_head in a sequence with these
 * blocks: the kernels then find a row without a division by the block size. */
static void fill_rows(const attention_task *t, const unsigned char **rows, const int32_t *blocks, int32_t n_pos,
                      int64_t kv_head) {
    const int32_t block_size = t->kv->common.shape.block_size;
    const size_t position_bytes = (size_t)t->kv->common.shape.n_kv_heads * t->kv->row_bytes;
    const unsigned char *pool = kv_pool(t->kv, t->layer, 0) + (size_t)kv_head * t->kv->row_bytes;
    for (int32_t b = 0, j = 0; j < n_pos; b++) {
        const unsigned char *row = pool + (size_t)blocks[b] * t->kv->block_bytes;
        for (int32_t o = 0; o < block_size && j < n_pos; o++, j++, row += position_bytes) rows[j] = row;
    }
}

/* Query heads [head0, head0 + nh) of the run's nt tokens (consecutive positions of one
 * sequence), all of KV head kv_head, over an F16 pool: the scores of every pair over the
 * positions the first token sees in one pass, each later token's own last positions
 * after it, then each pair's softmax and values. */
static void attention_run_avx2(const attention_task *t, const attention_worker *w, int64_t token0, int nt,
                               int64_t head0, int nh, int64_t kv_head) {
    const int64_t head_dim = t->kv->common.shape.head_dim;
    const int32_t pos0 = t->step->pos[token0];
    const int32_t *blocks = t->step->block_table + (int64_t)t->step->seq[token0] * t->step->max_blocks;
    fill_rows(t, w->rows, blocks, pos0 + nt, kv_head);
    const unsigned char *const *rows = w->rows;
    for (int i = 0; i < nt * nh; i++) {
        const float *q = t->q + ((token0 + i / nh) * t->n_heads + head0 + i % nh) * head_dim;
        for (int64_t d = 0; d < head_dim; d++) w->q[i][d] = quant_f16_to_f32(quant_f32_to_f16(q[d]));
    }
    scores_avx2(nt * nh, w->score, w->q, t, rows, 0, pos0 + 1);
    for (int i = 1; i < nt; i++) /* token i also sees positions pos0 + 1 .. pos0 + i */
        scores_avx2(nh, w->score + i * nh, w->q + i * nh, t, rows, pos0 + 1, pos0 + i + 1);
    const int np = nt * nh;
    if (np == 1) { /* one token's one head: weighted_values_avx2 keeps the whole width in registers */
        softmax_avx2(w->p16[0], w->score[0], pos0 + 1);
        weighted_values_avx2(t->out + (token0 * t->n_heads + head0) * head_dim, t, rows, pos0 + 1, w->p16[0],
                             w->acc[0]);
        return;
    }
    float *o[ATTN_PAIRS];
    for (int i = 0; i < np; i++) {
        softmax_float_avx2(w->score[i], pos0 + i / nh + 1);
        o[i] = t->out + ((token0 + i / nh) * t->n_heads + head0 + i % nh) * head_dim;
    }
    values_avx2(np, o, w->acc, (const float *const *)w->score, nh, t, rows, pos0 + 1, pos0 + nt);
}
#endif

/* The end of the run of tokens from `token`: the following tokens of its sequence at
 * the following positions, at most max_tokens in all. */
static int32_t run_end(const dev_step *step, int32_t token, int max_tokens) {
    int32_t end = token + 1;
    while (end < step->n_tokens && end - token < max_tokens && step->seq[end] == step->seq[token] &&
           step->pos[end] == step->pos[end - 1] + 1)
        end++;
    return end;
}

/* Tokens per run for tasks of this many heads: as many as keep the pairs within ATTN_PAIRS. */
static int run_tokens(int64_t heads_per_task) {
    const int64_t n = ATTN_PAIRS / heads_per_task;
    return n < ATTN_TOKEN_TILE ? (int)n : ATTN_TOKEN_TILE;
}

static int64_t count_runs(const dev_step *step, int max_tokens) {
    int64_t runs = 0;
    for (int32_t token = 0; token < step->n_tokens; token = run_end(step, token, max_tokens)) runs++;
    return runs;
}

static void attention_heads(void *ctx, int ith, int nth) {
    attention_task *t = ctx;
    const dev_kv_shape *s = &t->kv->common.shape;
    const int64_t group = t->n_heads / s->n_kv_heads;                           /* query heads per KV head */
    const int64_t chunks = (group + t->heads_per_task - 1) / t->heads_per_task; /* tasks per KV head */
    const size_t positions = buffer_positions(s), dh = (size_t)s->head_dim;
    char *b = t->scratch + (size_t)ith * t->thread_bytes;
    attention_worker w;
    for (int i = 0; i < ATTN_PAIRS; i++, b += align64(positions * sizeof(float))) w.score[i] = (float *)b;
    for (int h = 0; h < ATTN_HEAD_TILE; h++, b += align64(positions * sizeof(uint16_t))) w.p16[h] = (uint16_t *)b;
    for (int i = 0; i < ATTN_PAIRS; i++, b += align64(dh * sizeof(float))) w.q[i] = (float *)b;
    for (int i = 0; i < ATTN_PAIRS; i++, b += align64(ATTN_LANES * dh * sizeof(float))) w.acc[i] = (float *)b;
    w.rows = (const unsigned char **)(void *)b;
    const int64_t per_run = s->n_kv_heads * chunks;
    int64_t begin, end;
    host__split(t->n_runs * per_run, ith, nth, &begin, &end);
    /* walk the runs to the first of this worker's items */
    int64_t run = 0;
    int32_t token = 0, next = run_end(t->step, 0, t->run_tokens);
    for (; run < begin / per_run; run++) {
        token = next;
        next = run_end(t->step, token, t->run_tokens);
    }
    for (int64_t item = begin; item < end; item++) {
        if (item / per_run != run) {
            run++;
            token = next;
            next = run_end(t->step, token, t->run_tokens);
        }
        const int64_t kv_head = item / chunks % s->n_kv_heads;
        const int64_t first = item % chunks * t->heads_per_task; /* within the group */
        const int nh = (int)(group - first < t->heads_per_task ? group - first : t->heads_per_task);
        SP_ASSERT((size_t)t->step->pos[next - 1] + 1 + ATTN_LANES <= positions);
#if HOST_SIMD_AVX2
        if (t->simd && s->kv_type == SP_KV_F16) {
            attention_run_avx2(t, &w, token, (int)(next - token), kv_head * group + first, nh, kv_head);
            continue;
        }
#endif
        for (int32_t tok = token; tok < next; tok++) attention_token(t, &w, tok, kv_head * group + first, nh, kv_head);
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
    int64_t n_runs = count_runs(step, run_tokens(heads_per_task));
    if (n_runs * shape->n_kv_heads < 4 * (int64_t)nth && heads_per_task > 1) {
        heads_per_task = 1;
        n_runs = count_runs(step, run_tokens(1));
    }
    attention_task task = {.out = out,
                           .q = q,
                           .kv = hk,
                           .layer = layer,
                           .step = step,
                           .n_heads = n_heads,
                           .heads_per_task = heads_per_task,
                           .run_tokens = run_tokens(heads_per_task),
                           .n_runs = n_runs,
                           .scale = scale,
                           .isa = hb->base.cpu_isa,
                           .scratch = hb->attn_scratch,
                           .thread_bytes = thread_bytes};
#if HOST_SIMD_AVX2
    task.simd = hb->base.cpu_isa >= SP_CPU_ISA_AVX2 && shape->head_dim % ATTN_LANES == 0;
#endif
    host__pool_run(hb->pool, attention_heads, &task);
}

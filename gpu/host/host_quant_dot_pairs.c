/* host_quant_dot_pairs.c: the avx512 set's batched dot kernels: two activation rows in
 * each 512-bit register, against one or two weight rows, for every matmul of
 * HOST_PAIRS_MIN_ROWS rows or more (prefill chunks, speculative verify rows, decode
 * steps of several sequences).
 *
 * Why: the one-row kernels spend about ten instructions per 32-element block and row
 * (F16 scales converted, the scale product broadcast, the 8-bit dot, its conversion and
 * the fma), and a batch of rows cost nearly that much per row again. Here one register
 * holds block ib of rows 2p and 2p+1 (the lower and upper 256 bits), the activations'
 * scales are floats already (host__pairs_act_row, once per row), and a weight block is
 * unpacked once for all the rows of a call: about four instructions per block and row.
 *
 * Batch invariance: each 256-bit half goes through exactly the operations of the
 * avx2 one-row kernel (host_quant_dot.c) on its row: the same int32 block sums (exact
 * integers however they are formed), their conversion, the same rounded scale product
 * (an F16 converted to float is exact, so converting early changes nothing), the same
 * fma into the same accumulator lanes in block order, and the same final horizontal
 * sum. So every result is bit for bit host__vec_dot_for's (test_quant_dot_rows checks
 * it), and a token's numbers never depend on its batch.
 *
 * The 8-bit dot products: vpdpbusd multiplies unsigned by signed bytes. Q4_1 nibbles
 * are unsigned already. Q4_0's weights are nibble - 8 and Q8_0's are signed bytes, so
 * their unsigned forms (the nibble, the byte + 128) are used, and the accumulator
 * starts at -8 or -128 times each group of four activation bytes' sum (the pack's
 * bias), which leaves the exact sum of weight times activation.
 *
 * Legend: nb = blocks per row, ib = block index, p = row pair, h = half (0: row 2p,
 * 1: row 2p+1), j = weight row of the call (0..HOST_PAIRS_WROWS-1).
 */
#include <string.h>

#include "gpu/host/host_internal.h"
#include "quant/quant.h"

static size_t pairs_align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

bool host__pairs_takes(sp_cpu_isa isa, quant_type t) {
    return HOST_SIMD_AVX2 && isa == SP_CPU_ISA_AVX512 && (t == QUANT_Q4_0 || t == QUANT_Q4_1 || t == QUANT_Q8_0);
}

/* The pack's arrays, each 64-byte aligned, in this order: qs, d, s (Q8_1), bias (Q8_0);
 * offsets[] receives where each starts (an absent one takes no bytes). */
static size_t pairs_layout(quant_type w_type, int64_t k, int64_t rows, host_pairs_act *act, size_t offsets[4]) {
    const int64_t nb = k / QUANT_QK, n_pairs = (rows + 1) / 2, rows_pad = (rows + 7) / 8 * 8 + 16;
    const size_t pair_blocks = (size_t)(n_pairs * nb);
    const bool sums = w_type == QUANT_Q4_1;
    *act = (host_pairs_act){.nb = nb, .n_pairs = n_pairs, .rows = rows, .rows_pad = rows_pad, .w_type = w_type};
    size_t used = 0;
    offsets[0] = used;
    used += pairs_align64(pair_blocks * 64);
    offsets[1] = used;
    used += pairs_align64(pair_blocks * 16 * sizeof(float));
    offsets[2] = used;
    if (sums) used += pairs_align64((size_t)(nb * rows_pad) * sizeof(float));
    offsets[3] = used;
    if (!sums) used += pairs_align64(pair_blocks * 16 * sizeof(int32_t));
    return used;
}

size_t host__pairs_bytes(quant_type w_type, int64_t k, int64_t rows) {
    host_pairs_act act;
    size_t offsets[4];
    return pairs_layout(w_type, k, rows, &act, offsets) + 64; /* + 64: the base is aligned up */
}

host_pairs_act host__pairs_act_init(void *base, quant_type w_type, int64_t k, int64_t rows) {
    host_pairs_act act;
    size_t offsets[4];
    pairs_layout(w_type, k, rows, &act, offsets);
    char *p = (char *)(((uintptr_t)base + 63) & ~(uintptr_t)63);
    act.qs = (int8_t *)(p + offsets[0]);
    act.d = (float *)(p + offsets[1]);
    if (w_type == QUANT_Q4_1)
        act.s = (float *)(p + offsets[2]);
    else
        act.bias = (int32_t *)(p + offsets[3]);
    return act;
}

/* Row r's part of the pack, from its quantized row (Q8_1 for Q4_1 weights, else Q8_0).
 * The last row of an odd count also zeroes the empty half, and the last row of all the
 * sums' columns past the rows, so every byte the kernels read is written. */
void host__pairs_act_row(const host_pairs_act *act, const void *row, int64_t r) {
    const int64_t nb = act->nb, p = r / 2, h = r % 2;
    const bool last = r == act->rows - 1, fill_other = last && h == 0;
    for (int64_t ib = 0; ib < nb; ib++) {
        const size_t at = (size_t)(p * nb + ib);
        const int8_t *src;
        uint16_t d_bits;
        if (act->w_type == QUANT_Q4_1) {
            const quant_block_q8_1 *b = (const quant_block_q8_1 *)row + ib;
            src = b->qs;
            d_bits = b->d;
            act->s[ib * act->rows_pad + r] = quant_f16_to_f32(b->s);
            if (last)
                for (int64_t c = r + 1; c < act->rows_pad; c++) act->s[ib * act->rows_pad + c] = 0.0f;
        } else {
            const quant_block_q8_0 *b = (const quant_block_q8_0 *)row + ib;
            src = b->qs;
            d_bits = b->d;
            /* the unsigned weight's offset times each group of four activation bytes */
            const int32_t offset = act->w_type == QUANT_Q8_0 ? 128 : 8;
            int32_t *bias = act->bias + at * 16 + h * 8;
            for (int g = 0; g < 8; g++)
                bias[g] = -offset * (src[4 * g] + src[4 * g + 1] + src[4 * g + 2] + src[4 * g + 3]);
            if (fill_other) memset(bias + 8, 0, 8 * sizeof(int32_t));
        }
        int8_t *qs = act->qs + at * 64 + h * 32;
        memcpy(qs, src, 32);
        if (fill_other) memset(qs + 32, 0, 32);
        /* the scale in each of the half's eight lanes: the kernels multiply it as it lies */
        float *d = act->d + at * 16 + h * 8;
        const float scale = quant_f16_to_f32(d_bits);
        for (int l = 0; l < 8; l++) {
            d[l] = scale;
            if (fill_other) d[8 + l] = 0.0f;
        }
    }
}

#if HOST_SIMD_AVX2

#define PAIRS_BODY static HOST_AVX512_TARGET inline __attribute__((always_inline))
#define UNROLL     _Pragma("GCC unroll 4")

/* 16 bytes of packed nibbles -> 64 bytes: avx2_nibbles's 32 bytes in both halves. */
PAIRS_BODY __m512i pairs_nibbles(const uint8_t *qs) {
    const __m512i four = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qs));
    const __m512i shifted = _mm512_srlv_epi64(four, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
    return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

/* Weight row j's block ib: its unsigned bytes in both halves, its scale in every lane,
 * and (Q4_1) its minimum in every lane of *m. */
PAIRS_BODY __m512i pairs_weight_block(quant_type wt, const char *w, int64_t ib, __m512 *d, __m512 *m) {
    if (wt == QUANT_Q4_1) {
        const quant_block_q4_1 *b = (const quant_block_q4_1 *)w + ib;
        const __m128 pair = avx2_f16_pair(&b->d);
        *d = _mm512_broadcastss_ps(pair);
        *m = _mm512_broadcastss_ps(_mm_movehdup_ps(pair));
        return pairs_nibbles(b->qs);
    }
    if (wt == QUANT_Q4_0) {
        const quant_block_q4_0 *b = (const quant_block_q4_0 *)w + ib;
        *d = _mm512_broadcastss_ps(avx2_f16_pair(&b->d));
        return pairs_nibbles(b->qs);
    }
    const quant_block_q8_0 *b = (const quant_block_q8_0 *)w + ib;
    *d = _mm512_broadcastss_ps(avx2_f16_pair(&b->d));
    const __m512i both = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qs));
    return _mm512_xor_si512(both, _mm512_set1_epi8((char)0x80));
}

/* host__avx2_hsum of one half of v. */
PAIRS_BODY float pairs_hsum_half(__m512 v, int h) {
    const __m512d bits = _mm512_castps_pd(v);
    return host__avx2_hsum(_mm256_castpd_ps(h ? _mm512_extractf64x4_pd(bits, 1) : _mm512_extractf64x4_pd(bits, 0)));
}

/* W weight rows (row j at w + j * w_stride) against the P pairs from p0 (n_rows rows,
 * 2P - 1 or 2P of them): out[r * out_stride + j] for row 2 * p0 + r. */
PAIRS_BODY void pairs_body(const int W, const int P, quant_type wt, const char *w, size_t w_stride,
                           const host_pairs_act *act, int64_t p0, int n_rows, float *out, size_t out_stride) {
    const int64_t nb = act->nb;
    const size_t block_bytes = quant_row_bytes(wt, QUANT_QK);
    __m512 acc[2][HOST_PAIRS_PER_CALL];
    __m512 summs[2];
    UNROLL
    for (int j = 0; j < W; j++) {
        summs[j] = _mm512_setzero_ps();
        UNROLL
        for (int p = 0; p < P; p++) acc[j][p] = _mm512_setzero_ps();
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        __m512i qw[2];
        __m512 dw[2];
        __m512 mw[2];
        UNROLL
        for (int j = 0; j < W; j++) {
            const char *wj = w + (size_t)j * w_stride;
            __builtin_prefetch(wj + (size_t)W * w_stride + (size_t)ib * block_bytes, 0, 3); /* the next call's */
            qw[j] = pairs_weight_block(wt, wj, ib, &dw[j], &mw[j]);
        }
        UNROLL
        for (int p = 0; p < P; p++) {
            const size_t at = (size_t)((p0 + p) * nb + ib);
            const __m512i qa = _mm512_load_si512(act->qs + at * 64);
            const __m512 da = _mm512_load_ps(act->d + at * 16); /* row 2p's scale, then 2p+1's */
            const __m512i start = wt == QUANT_Q4_1 ? _mm512_setzero_si512() : _mm512_load_si512(act->bias + at * 16);
            UNROLL
            for (int j = 0; j < W; j++) {
                const __m512 isum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, qw[j], qa));
                acc[j][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw[j], da), isum, acc[j][p]);
            }
        }
        if (wt == QUANT_Q4_1) {
            const __m512 s16 = _mm512_loadu_ps(act->s + ib * act->rows_pad + 2 * p0); /* the call's rows' sums */
            UNROLL
            for (int j = 0; j < W; j++) summs[j] = _mm512_fmadd_ps(mw[j], s16, summs[j]);
        }
    }
    UNROLL
    for (int j = 0; j < W; j++) {
        float sums[16];
        _mm512_storeu_ps(sums, summs[j]);
        UNROLL
        for (int p = 0; p < P; p++)
            for (int h = 0; h < 2; h++) {
                const int r = 2 * p + h;
                if (r >= n_rows) break;
                float v = pairs_hsum_half(acc[j][p], h);
                if (wt == QUANT_Q4_1) v += sums[r];
                out[(size_t)r * out_stride + j] = v;
            }
    }
}

/* One entry point per weight type: the register blocking fixed by (W, P), so each
 * combination's accumulators live in registers. */
#define PAIRS_ENTRY(name, wt)                                                                               \
    static HOST_AVX512_TARGET void name(const void *w, size_t w_stride, int n_w, const host_pairs_act *act, \
                                        int64_t p0, int n_rows, float *out, size_t out_stride) {            \
        const char *wc = w;                                                                                 \
        _Static_assert(HOST_PAIRS_WROWS == 2 && HOST_PAIRS_PER_CALL == 5, "one case per (W, P)");           \
        switch ((n_w - 1) * HOST_PAIRS_PER_CALL + (n_rows + 1) / 2 - 1) {                                   \
        case 0: pairs_body(1, 1, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        case 1: pairs_body(1, 2, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        case 2: pairs_body(1, 3, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        case 3: pairs_body(1, 4, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        case 4: pairs_body(1, 5, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        case 5: pairs_body(2, 1, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        case 6: pairs_body(2, 2, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        case 7: pairs_body(2, 3, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        case 8: pairs_body(2, 4, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;               \
        default: pairs_body(2, 5, wt, wc, w_stride, act, p0, n_rows, out, out_stride); return;              \
        }                                                                                                   \
    }

PAIRS_ENTRY(pairs_q4_0, QUANT_Q4_0)
PAIRS_ENTRY(pairs_q4_1, QUANT_Q4_1)
PAIRS_ENTRY(pairs_q8_0, QUANT_Q8_0)

host_vec_dot_pairs_fn host__vec_dot_pairs_for(sp_cpu_isa isa, quant_type t) {
    if (!host__pairs_takes(isa, t)) return NULL;
    return t == QUANT_Q4_1 ? pairs_q4_1 : t == QUANT_Q4_0 ? pairs_q4_0 : pairs_q8_0;
}

#else /* !HOST_SIMD_AVX2 */

host_vec_dot_pairs_fn host__vec_dot_pairs_for(sp_cpu_isa isa, quant_type t) {
    (void)isa;
    (void)t;
    return NULL;
}

#endif

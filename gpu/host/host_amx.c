/* host_amx.c: the amx kernel set's matmul for Q4_0, Q4_1 and Q8_0 weights. The weights
 * are repacked at load into groups of 16 rows in AMX tile order; each 32-element block of
 * a group meets up to 16 activation rows in one tile multiply (TDPBSSD: int8 x int8 summed
 * into int32), and the exact integer sums are then scaled in float.
 *
 * THE ARITHMETIC (the amx set's own: no llama.cpp build computes it). For activation row t
 * (quantized to Q8_0, or Q8_1 for Q4_1 weights) and weight row j:
 *     acc = 0
 *     for each 32-element block b, in order:
 *         isum = sum over the block of x[t] * q[j]            exact in int32
 *         acc  = fma(dw[j][b] * dx[t][b], (float)isum, acc)
 *         Q4_1 only: acc = fma(mw[j][b], sx[t][b], acc)
 * where q is the weight's integer (Q4_0: nibble - 8, Q4_1: nibble, Q8_0: the byte) and
 * dw, mw, dx, sx are the F16 scale, min, activation scale and activation sum as floats.
 * Each output is the same chain of roundings however many rows share its tile, so a
 * token's numbers never depend on its batch. host__amx_dot computes the same chain in
 * portable C: the tests' reference, and the set's one-row kernel for these types.
 *
 * HOW isum IS FORMED. The weights are kept unsigned, u = q + bias (Q8_0: bias 128, the
 * byte with its top bit flipped; Q4_0: bias 8, the nibble; Q4_1: bias 0), and
 *     isum = sum(x * u) - bias * sum(x)
 * with sum(x) of each activation block computed once per row (host__amx_act_row).
 * Tiles form sum(x * u) with TDPBSUD (signed activations, unsigned weights); rows of a
 * step too few to fill a tile use AVX-512 VNNI (vpdpbusd: unsigned weights, signed
 * activations) over the same packed bytes. Both are exact, so both give the same isum.
 *
 * THE PACKED LAYOUT. Group g holds weight rows 16g..16g+15 (rows past N are zeros). Per
 * block b, in order: the 16 rows' F16 scales (32 bytes), for Q4_1 their F16 mins (32
 * bytes), then the unsigned quants in the tile's "VNNI" order, byte [k4][4r + i] of row r:
 *   Q8_0: k4 = 0..7, element 4k4 + i plus 128: 512 bytes, read by the tile as they are;
 *   Q4_0/Q4_1: k4 = 0..3, the file's qs byte 4k4 + i, whose low nibble is element
 *   4k4 + i and high nibble element 16 + 4k4 + i: low nibbles give tile rows 0..3 and high
 *   nibbles rows 4..7 (for the tiles, unpacked once per group into the worker's scratch).
 * A group takes exactly the bytes of its 16 rows in the file, so decoding reads no more.
 *
 * Tiles are configured per worker thread as the row count changes, and released when
 * the worker's share of a matmul is done.
 */
#include "gpu/host/host_internal.h"

enum {
    AMX_GROUP_ROWS = HOST_AMX_GROUP_ROWS,     /* weight rows per group: one tile's columns */
    AMX_TILE_ROWS = 16,                       /* activation rows per tile */
    AMX_ACT_TILE_BLOCK = AMX_TILE_ROWS * 32,  /* bytes of one block of a tile of activations */
    AMX_QK = 32,                              /* elements per block: one tile multiply */
    AMX_UNPACKED_BLOCK = AMX_GROUP_ROWS * 32, /* bytes of one block's quants as int8 */
    AMX_C_BYTES = 16 * 64,                    /* one 16 x 16 int32 result tile */
};

bool host__amx_takes(quant_type t) {
    return t == QUANT_Q4_0 || t == QUANT_Q4_1 || t == QUANT_Q8_0;
}

/* Bytes of one block of one group: scales, mins, quants. */
static size_t group_block_bytes(quant_type t) {
    switch (t) {
    case QUANT_Q4_0: return 32 + 256;
    case QUANT_Q4_1: return 64 + 256;
    case QUANT_Q8_0: return 32 + 512;
    default: return 0;
    }
}

/* Offset of the quants within a group's block. */
static size_t group_quants_offset(quant_type t) {
    return t == QUANT_Q4_1 ? 64 : 32;
}

size_t host__amx_packed_bytes(quant_type t, int64_t k, int64_t n) {
    int64_t groups = (n + AMX_GROUP_ROWS - 1) / AMX_GROUP_ROWS;
    return (size_t)groups * (size_t)(k / AMX_QK) * group_block_bytes(t);
}

size_t host__amx_thread_scratch_bytes(int64_t k) {
    return (size_t)(k / AMX_QK) * AMX_UNPACKED_BLOCK + 2 * AMX_C_BYTES;
}

void host__amx_pack_group(quant_type t, int64_t k, int64_t n, const void *src, int64_t group, void *dst) {
    const int64_t nb = k / AMX_QK;
    const size_t gbb = group_block_bytes(t), row_bytes = quant_row_bytes(t, k);
    const size_t src_block = row_bytes / (size_t)nb, src_qs = t == QUANT_Q4_1 ? 4 : 2;
    const int k4_rows = t == QUANT_Q8_0 ? 8 : 4;
    uint8_t *out = (uint8_t *)dst + (size_t)group * (size_t)nb * gbb; /* zeroed: rows past n stay 0 */
    for (int r = 0; r < AMX_GROUP_ROWS; r++) {
        int64_t row = group * AMX_GROUP_ROWS + r;
        if (row >= n) break;
        const uint8_t *s = (const uint8_t *)src + (size_t)row * row_bytes;
        for (int64_t b = 0; b < nb; b++, s += src_block) {
            uint8_t *blk = out + (size_t)b * gbb;
            memcpy(blk + 2 * r, s, 2);                               /* d */
            if (t == QUANT_Q4_1) memcpy(blk + 32 + 2 * r, s + 2, 2); /* m */
            uint8_t *q = blk + group_quants_offset(t);
            const uint8_t flip = t == QUANT_Q8_0 ? 0x80 : 0x00; /* Q8_0's bias of 128 */
            for (int k4 = 0; k4 < k4_rows; k4++)
                for (int i = 0; i < 4; i++) q[k4 * 64 + 4 * r + i] = s[src_qs + 4 * k4 + i] ^ flip;
        }
    }
}

void host__amx_act_row(quant_type act_type, const void *act_row, int64_t k, int64_t r, uint8_t *tiled, float *dx,
                       float *sx, int32_t *xsum) {
    const int64_t nb = k / AMX_QK;
    const size_t block = quant_row_bytes(act_type, k) / (size_t)nb, qs = act_type == QUANT_Q8_1 ? 4 : 2;
    /* tile r / 16, row r % 16 of each block's 16 x 32 bytes */
    const size_t tile = (size_t)(r / AMX_TILE_ROWS) * (size_t)nb * AMX_TILE_ROWS, row = (size_t)(r % AMX_TILE_ROWS);
    const uint8_t *a = act_row;
    for (int64_t b = 0; b < nb; b++, a += block) {
        const size_t at = tile + (size_t)b * AMX_TILE_ROWS + row;
        memcpy(tiled + at * AMX_QK, a + qs, AMX_QK);
        uint16_t d;
        memcpy(&d, a, 2);
        dx[at] = quant_f16_to_f32(d);
        if (act_type == QUANT_Q8_1) {
            uint16_t s;
            memcpy(&s, a + 2, 2);
            sx[at] = quant_f16_to_f32(s);
        } else {
            const int8_t *x = (const int8_t *)(a + qs);
            int32_t sum = 0;
            for (int i = 0; i < AMX_QK; i++) sum += x[i];
            xsum[at] = sum;
        }
    }
}

float host__amx_dot(quant_type t, const void *w, const void *a, int64_t n) {
    const int64_t nb = n / AMX_QK;
    const size_t w_block = quant_row_bytes(t, n) / (size_t)nb;
    const size_t a_block = quant_row_bytes(quant_vec_dot_type(t), n) / (size_t)nb;
    const size_t w_qs = t == QUANT_Q4_1 ? 4 : 2, a_qs = t == QUANT_Q4_1 ? 4 : 2;
    const uint8_t *wb = w, *ab = a;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, wb += w_block, ab += a_block) {
        const int8_t *x = (const int8_t *)(ab + a_qs);
        const uint8_t *q = wb + w_qs;
        int32_t isum = 0;
        for (int i = 0; i < AMX_QK; i++) {
            int32_t qi;
            if (t == QUANT_Q8_0)
                qi = (int8_t)q[i];
            else
                qi = i < 16 ? (q[i] & 0x0F) : (q[i - 16] >> 4);
            if (t == QUANT_Q4_0) qi -= 8;
            isum += qi * x[i];
        }
        uint16_t dw, dx;
        memcpy(&dw, wb, 2);
        memcpy(&dx, ab, 2);
        acc = fmaf(quant_f16_to_f32(dw) * quant_f16_to_f32(dx), (float)isum, acc);
        if (t == QUANT_Q4_1) {
            uint16_t mw, sx;
            memcpy(&mw, wb + 2, 2);
            memcpy(&sx, ab + 2, 2);
            acc = fmaf(quant_f16_to_f32(mw), quant_f16_to_f32(sx), acc);
        }
    }
    return acc;
}

typedef struct pack_task {
    const dev_tensor *w;
    void *dst;
    int64_t groups;
} pack_task;

static void pack_groups(void *ctx, int ith, int nth) {
    const pack_task *t = ctx;
    int64_t begin, end;
    host__split(t->groups, ith, nth, &begin, &end);
    for (int64_t g = begin; g < end; g++) host__amx_pack_group(t->w->type, t->w->ne0, t->w->ne1, t->w->data, g, t->dst);
}

sp_status host__amx_pack(host_backend *hb, dev_tensor *w) {
    void *dst;
    /* an arena: owned by the backend, freed at destroy, and zeroed (what pack_group needs) */
    sp_status st = dev_arena_alloc(&hb->base, host__amx_packed_bytes(w->type, w->ne0, w->ne1), &dst);
    if (st != SP_OK) return st;
    pack_task task = {.w = w, .dst = dst, .groups = (w->ne1 + AMX_GROUP_ROWS - 1) / AMX_GROUP_ROWS};
    host__pool_run(hb->pool, pack_groups, &task);
    w->packed = dst;
    w->packed_type = w->type;
    return SP_OK;
}

#if HOST_SIMD_AVX2 && defined(__linux__)

#define HOST_AMX_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))

/* Steps of fewer rows than this take the VNNI path: a tile multiply costs the same for
 * 1 row as for 16, and unpacking a Q4 group for the tiles costs as much again. Measured on
 * a 2-core Sapphire Rapids with SmolLM2-135M Q4_1 (spindle bench --pp N, ms per step):
 * VNNI 4.9 / 5.7 / 9.5 / 10.5 / 15.2 for 3 / 4 / 8 / 9 / 15 rows, tiles 8.9 / 11.6 /
 * 12.5 for 4 / 8 / 9 rows and 16.2 for 16: the tiles win only from a full tile on.
 * Speculative decoding's verify steps (a few rows per sequence) live below that. */
enum { AMX_MIN_TILE_ROWS = 16 };
/* How far ahead the VNNI path asks for weight bytes: enough lines in flight for one core
 * to approach the memory's streaming rate. */
enum { AMX_PREFETCH_BYTES = 4096 };

/* LDTILECFG's 64-byte operand (palette 1). */
typedef struct amx_tile_config {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tile_config;
_Static_assert(sizeof(amx_tile_config) == 64, "LDTILECFG operand");

/* Two sets of three tiles, so block b + 1's multiply is issued while block b is scaled:
 * C (m rows of 16 int32), A (m activation rows of one block), B (one block of 16 weight
 * rows, 8 rows of 64 bytes). Macros, not an enum: the tile intrinsics paste the number
 * into the instruction's text. */
#define TILE_C0 0
#define TILE_A0 1
#define TILE_B0 2
#define TILE_C1 3
#define TILE_A1 4
#define TILE_B1 5

static HOST_AMX_TARGET void amx_configure(int m_rows) {
    amx_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int set = 0; set < 2; set++) {
        int c = set ? TILE_C1 : TILE_C0, a = set ? TILE_A1 : TILE_A0, b = set ? TILE_B1 : TILE_B0;
        cfg.rows[c] = (uint8_t)m_rows;
        cfg.colsb[c] = 64;
        cfg.rows[a] = (uint8_t)m_rows;
        cfg.colsb[a] = AMX_QK;
        cfg.rows[b] = AMX_QK / 4;
        cfg.colsb[b] = 64;
    }
    _tile_loadconfig(&cfg);
}

/* The 8 rows of 64 unsigned bytes of a group's block: Q4's low nibbles then high nibbles,
 * or Q8_0's as stored. */
static HOST_AMX_TARGET inline void block_quants(const uint8_t *q, bool nibbles, __m512i v[8]) {
    if (!nibbles) {
        for (int i = 0; i < 8; i++) v[i] = _mm512_loadu_si512(q + 64 * i);
        return;
    }
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int i = 0; i < 4; i++) {
        const __m512i packed = _mm512_loadu_si512(q + 64 * i);
        v[i] = _mm512_and_si512(packed, low);
        v[4 + i] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
    }
}

/* What one call multiplies: one tile of up to 16 activation rows (their block b at act +
 * b * 512, row m 32 bytes further each; scales at b * 16 + m) against one group. */
typedef struct amx_operands {
    const uint8_t *act;
    const float *dx, *sx; /* sx: Q4_1 only, else NULL */
    const int32_t *xsum;  /* bias != 0 only */
    int32_t bias;
    const uint8_t *group; /* the group's packed blocks */
    size_t gbb, quants;   /* bytes per block; offset of the quants in one */
    bool nibbles;
    const uint8_t *unpacked; /* the tile path's unpacked quants (Q4), else NULL */
    int64_t nb;
    int32_t *c[2]; /* two result buffers of AMX_C_BYTES */
} amx_operands;

/* acc[m] = fma(dw * dx, (float)isum, acc[m]) (+ the min term): one block of the chain for
 * row m, lane j = weight row j. */
static HOST_AMX_TARGET inline __attribute__((always_inline)) __m512
scale_block(const amx_operands *o, int m, int64_t b, __m512i usum, __m512 dw, __m512 mw, __m512 acc) {
    const size_t at = (size_t)b * AMX_TILE_ROWS + (size_t)m;
    if (o->bias) usum = _mm512_sub_epi32(usum, _mm512_set1_epi32(o->bias * o->xsum[at]));
    const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(o->dx[at]));
    acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(usum), acc);
    if (o->sx) acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(o->sx[at]), acc);
    return acc;
}

static HOST_AMX_TARGET inline __m512 block_mins(const amx_operands *o, const uint8_t *blk) {
    return o->sx ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32))) : _mm512_setzero_ps();
}

/* The VNNI path, for a few rows: per block, each row's 8 groups of 4 activation bytes
 * against the 8 tile rows of weights, two chains summed at the end (exact). */
static HOST_AMX_TARGET void vnni_rows(const amx_operands *o, int m_rows, __m512 *acc) {
    for (int m = 0; m < m_rows; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < o->nb; b++) {
        const uint8_t *blk = o->group + (size_t)b * o->gbb;
        /* decoding streams the weights once: ask for them well ahead (the next groups'
         * blocks are next in memory) */
        for (size_t line = 0; line < o->gbb; line += 64)
            _mm_prefetch((const char *)blk + AMX_PREFETCH_BYTES + line, _MM_HINT_T0);
        __m512i w[8];
        block_quants(blk + o->quants, o->nibbles, w);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk)), mw = block_mins(o, blk);
        for (int m = 0; m < m_rows; m++) {
            const int32_t *x = (const int32_t *)(o->act + (size_t)b * AMX_ACT_TILE_BLOCK + (size_t)m * AMX_QK);
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int k4 = 0; k4 < 8; k4 += 2) {
                s0 = _mm512_dpbusd_epi32(s0, w[k4], _mm512_set1_epi32(x[k4]));
                s1 = _mm512_dpbusd_epi32(s1, w[k4 + 1], _mm512_set1_epi32(x[k4 + 1]));
            }
            acc[m] = scale_block(o, m, b, _mm512_add_epi32(s0, s1), dw, mw, acc[m]);
        }
    }
}

/* A group's Q4 quants as tile rows, one 512-byte block after another. */
static HOST_AMX_TARGET void unpack_q4_group(const amx_operands *o, uint8_t *out) {
    for (int64_t b = 0; b < o->nb; b++) {
        __m512i v[8];
        block_quants(o->group + (size_t)b * o->gbb + o->quants, true, v);
        for (int i = 0; i < 8; i++) _mm512_store_si512(out + (size_t)b * AMX_UNPACKED_BLOCK + 64 * i, v[i]);
    }
}

static HOST_AMX_TARGET inline const uint8_t *tile_weights(const amx_operands *o, int64_t b) {
    return o->unpacked ? o->unpacked + (size_t)b * AMX_UNPACKED_BLOCK : o->group + (size_t)b * o->gbb + o->quants;
}

/* Block b's tile multiply, into tile set (b & 1). */
#define AMX_MULTIPLY(o, b)                                             \
    do {                                                               \
        const uint8_t *a_ = (o)->act + (size_t)(b)*AMX_ACT_TILE_BLOCK; \
        if ((b)&1) {                                                   \
            _tile_loadd(TILE_A1, a_, AMX_QK);                          \
            _tile_loadd(TILE_B1, tile_weights((o), (b)), 64);          \
            _tile_zero(TILE_C1);                                       \
            _tile_dpbsud(TILE_C1, TILE_A1, TILE_B1);                   \
        } else {                                                       \
            _tile_loadd(TILE_A0, a_, AMX_QK);                          \
            _tile_loadd(TILE_B0, tile_weights((o), (b)), 64);          \
            _tile_zero(TILE_C0);                                       \
            _tile_dpbsud(TILE_C0, TILE_A0, TILE_B0);                   \
        }                                                              \
    } while (0)

/* TILESTORED of one result tile (64-byte rows) to dst, with the bytes it writes as the
 * asm's output. The compiler header's form clobbers all memory, which would keep the
 * accumulators below out of registers. Two levels so the tile number is expanded. */
#define AMX_STORE_TILE(tile, dst) AMX_STORE_TILE_(tile, dst)
#define AMX_STORE_TILE_(tile, dst)                               \
    __asm__ volatile("tilestored %%tmm" #tile ", (%1,%2,1)"      \
                     : "=m"(*(int32_t(*)[AMX_C_BYTES / 4])(dst)) \
                     : "r"(dst), "r"((long)64))

/* Block b's sums, from tile set (b & 1) to c[b & 1]. */
#define AMX_STORE(o, b)                         \
    do {                                        \
        if ((b)&1)                              \
            AMX_STORE_TILE(TILE_C1, (o)->c[1]); \
        else                                    \
            AMX_STORE_TILE(TILE_C0, (o)->c[0]); \
    } while (0)

/* Where one call's results go: row m of the call at out + m * stride, the lanes in mask,
 * plus bias_v when has_bias. */
typedef struct amx_dest {
    float *out;
    size_t stride;
    __mmask16 mask;
    bool has_bias;
    __m512 bias_v;
} amx_dest;

enum amx_kind { AMX_WITH_MIN, AMX_WITH_BIAS }; /* Q4_1; Q4_0 and Q8_0 */

/* The tile path: block b + 1 multiplies while block b is scaled, and its sums are stored
 * only after, so the store does not wait on the multiply in front of the scaling. Always
 * inlined into wrappers with constant m_rows and kind, so acc stays in registers; the
 * operands are copied into locals so nothing is reloaded around the tile asm. */
static HOST_AMX_TARGET inline __attribute__((always_inline)) void
tile_rows(const amx_operands *op, const int m_rows, const enum amx_kind kind, const amx_dest *d) {
    const amx_operands o = *op;
    const int64_t nb = o.nb;
    __m512 acc[16];
    for (int m = 0; m < m_rows; m++) acc[m] = _mm512_setzero_ps();
    AMX_MULTIPLY(&o, 0);
    AMX_STORE(&o, 0);
    for (int64_t b = 0; b < nb; b++) {
        if (b + 1 < nb) AMX_MULTIPLY(&o, b + 1);
        const uint8_t *blk = o.group + (size_t)b * o.gbb;
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
        const int32_t *c = o.c[b & 1];
        const float *dx = o.dx + b * AMX_TILE_ROWS;
        if (kind == AMX_WITH_MIN) {
            const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)));
            const float *sx = o.sx + b * AMX_TILE_ROWS;
#pragma GCC unroll 16
            for (int m = 0; m < m_rows; m++) {
                const __m512 isum = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m));
                acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[m])), isum, acc[m]);
                acc[m] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx[m]), acc[m]);
            }
        } else {
            const int32_t *xsum = o.xsum + b * AMX_TILE_ROWS;
#pragma GCC unroll 16
            for (int m = 0; m < m_rows; m++) {
                const __m512i usum = _mm512_load_si512(c + 16 * m);
                const __m512 isum = _mm512_cvtepi32_ps(_mm512_sub_epi32(usum, _mm512_set1_epi32(o.bias * xsum[m])));
                acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx[m])), isum, acc[m]);
            }
        }
        if (b + 1 < nb) AMX_STORE(&o, b + 1);
    }
#pragma GCC unroll 16
    for (int m = 0; m < m_rows; m++)
        _mm512_mask_storeu_ps(d->out + (size_t)m * d->stride, d->mask,
                              d->has_bias ? _mm512_add_ps(acc[m], d->bias_v) : acc[m]);
}

static HOST_AMX_TARGET __attribute__((noinline)) void tile_rows_16_min(const amx_operands *o, const amx_dest *d) {
    tile_rows(o, 16, AMX_WITH_MIN, d);
}

static HOST_AMX_TARGET __attribute__((noinline)) void tile_rows_16_bias(const amx_operands *o, const amx_dest *d) {
    tile_rows(o, 16, AMX_WITH_BIAS, d);
}

static HOST_AMX_TARGET __attribute__((noinline)) void tile_rows_few(const amx_operands *o, int m_rows,
                                                                    const amx_dest *d) {
    if (o->sx)
        tile_rows(o, m_rows, AMX_WITH_MIN, d);
    else
        tile_rows(o, m_rows, AMX_WITH_BIAS, d);
}

HOST_AMX_TARGET void host__amx_group(const dev_tensor *w, int64_t group, const host_amx_act *act, float *out,
                                     const float *bias, void *scratch, int *configured_rows) {
    const int64_t k = w->ne0, n = w->ne1, nb = k / AMX_QK, n0 = group * AMX_GROUP_ROWS;
    uint8_t *unpacked = scratch;
    amx_operands o = {
        .bias = w->type == QUANT_Q8_0   ? 128
                : w->type == QUANT_Q4_0 ? 8
                                        : 0,
        .gbb = group_block_bytes(w->type),
        .quants = group_quants_offset(w->type),
        .nibbles = w->type != QUANT_Q8_0,
        .nb = nb,
        .c = {(int32_t *)(unpacked + (size_t)nb * AMX_UNPACKED_BLOCK),
              (int32_t *)(unpacked + (size_t)nb * AMX_UNPACKED_BLOCK + AMX_C_BYTES)},
    };
    o.group = (const uint8_t *)w->packed + (size_t)group * (size_t)nb * o.gbb;
    if (o.nibbles && act->n_rows >= AMX_MIN_TILE_ROWS) {
        unpack_q4_group(&o, unpacked);
        o.unpacked = unpacked;
        __asm__ volatile("" ::: "memory"); /* the tile loads' asm does not say it reads them */
    }
    const int64_t valid = n - n0 < AMX_GROUP_ROWS ? n - n0 : AMX_GROUP_ROWS;
    const __mmask16 mask = (__mmask16)((1u << valid) - 1u);
    const __m512 bias_v = bias ? _mm512_maskz_loadu_ps(mask, bias + n0) : _mm512_setzero_ps();
    for (int64_t m0 = 0; m0 < act->n_rows; m0 += 16) {
        const int m_rows = act->n_rows - m0 < 16 ? (int)(act->n_rows - m0) : 16;
        o.act = act->tiled + (size_t)m0 * (size_t)nb * AMX_QK;
        o.dx = act->dx + (size_t)m0 * (size_t)nb;
        o.sx = act->sx ? act->sx + (size_t)m0 * (size_t)nb : NULL;
        o.xsum = act->xsum ? act->xsum + (size_t)m0 * (size_t)nb : NULL;
        const amx_dest d = {.out = out + (size_t)m0 * (size_t)n + (size_t)n0,
                            .stride = (size_t)n,
                            .mask = mask,
                            .has_bias = bias != NULL,
                            .bias_v = bias_v};
        if (m_rows < AMX_MIN_TILE_ROWS) {
            __m512 acc[AMX_MIN_TILE_ROWS];
            vnni_rows(&o, m_rows, acc);
            for (int m = 0; m < m_rows; m++)
                _mm512_mask_storeu_ps(d.out + (size_t)m * d.stride, mask,
                                      bias ? _mm512_add_ps(acc[m], bias_v) : acc[m]);
            continue;
        }
        if (*configured_rows != m_rows) {
            amx_configure(m_rows);
            *configured_rows = m_rows;
        }
        if (m_rows == 16 && o.sx)
            tile_rows_16_min(&o, &d);
        else if (m_rows == 16)
            tile_rows_16_bias(&o, &d);
        else
            tile_rows_few(&o, m_rows, &d);
    }
}

HOST_AMX_TARGET void host__amx_release(int *configured_rows) {
    if (*configured_rows) _tile_release();
    *configured_rows = 0;
}

#else /* no AMX in this build: the set is never resolved, so these are never called */

void host__amx_group(const dev_tensor *w, int64_t group, const host_amx_act *act, float *out, const float *bias,
                     void *scratch, int *configured_rows) {
    (void)w, (void)group, (void)act, (void)out, (void)bias, (void)scratch, (void)configured_rows;
    SP_ASSERT(!"amx kernels called in a build without them");
}

void host__amx_release(int *configured_rows) {
    *configured_rows = 0;
}

#endif

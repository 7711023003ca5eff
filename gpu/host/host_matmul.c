/* host_matmul.c: out_i (T, N_i) = in (T, K) . W_i (N_i, K)^T on the CPU, for one or
 * several weights that share an input (Q/K/V, gate/up).
 *
 * Legend: T = activation rows (tokens), N = weight rows (outputs), K = row length.
 *
 * Two phases, each split across the pool: (1) every activation row is quantized once
 * to the weights' dot format (Q8_0/Q8_1/Q8_K, or kept as floats), however many weights
 * read it; (2) the weight rows of all the parts are cut into tiles of MATMUL_TILE_N rows,
 * handed out as one range, and each tile is multiplied against every activation row
 * before the next tile is read, so one pass over the weights serves the whole batch.
 * In the avx2 set rows go through the multi-row kernel two to HOST_DOT_ROWS at a time
 * (one read of a weight row serves up to four tokens); in the avx512 set a batch of
 * HOST_PAIRS_MIN_ROWS rows or more goes through the pair kernels (host_quant_dot_pairs.c:
 * phase (1) also packs the quantized rows in pairs, two to a 512-bit register, and a
 * weight block is unpacked once for up to HOST_PAIRS_PER_CALL pairs). The rest (a decode
 * step of one sequence, the avx512 set's two rows, the avx2 set's last lone row) go through the
 * decode-shaped kernel, HOST_DOT_WROWS weight rows per call, and the leftover weight
 * rows one by one. All give each output element the same bits, so a token's result
 * never depends on T or on the rest of the batch.
 *
 * In the amx set, weights the set repacked (w->packed) take the tile kernel instead
 * (host_amx.c): a tile is one group of 16 weight rows against every activation row, in
 * tiles of 16 rows, and phase (1) also copies each quantized row into tile order with
 * its block scales as floats (host__amx_act_row).
 */
#include <string.h>

#include "gpu/host/host_internal.h"

/* Weight rows per tile: 16 rows of 576 Q4_1 elements are 5.6 KiB, well inside L1. */
enum { MATMUL_TILE_N = 16, MATMUL_MAX_PARTS = 8 };
_Static_assert((int)MATMUL_TILE_N == (int)HOST_AMX_GROUP_ROWS, "the amx set's tiles are its packed groups");

typedef struct matmul_task {
    const dev_matmul_part *parts; /* n_parts weights of one type and width K */
    int n_parts;
    int64_t first_tile[MATMUL_MAX_PARTS + 1]; /* part p owns tiles [first_tile[p], first_tile[p+1]) */
    const float *in;                          /* (T, K) */
    int64_t rows;                             /* T */
    int64_t k;
    size_t act_row_bytes;
    const void *act; /* (T, act_row_bytes) activations in the dot format */
    host_quantize_fn quantize;
    host_vec_dot_fn dot;
    host_vec_dot_rows_fn dot_rows;   /* NULL: none for this type, every row through dot */
    float *rows_scales;              /* with dot_rows and 2+ rows: their scale table, else NULL */
    host_vec_dot_wrows_fn dot_wrows; /* NULL: none for this type */
    /* the avx512 set with HOST_PAIRS_MIN_ROWS rows or more: the rows packed in pairs, else NULL */
    host_vec_dot_pairs_fn dot_pairs;
    host_pairs_act pairs;
    /* the amx set with repacked weights: the tile kernel's inputs, else amx.tiled == NULL */
    host_amx_act amx;
    uint8_t *amx_tiled;       /* the writable arrays behind amx (host__amx_act_row) */
    float *amx_dx, *amx_sx;   /* sx only for Q8_1 activations */
    int32_t *amx_xsum;        /* only for Q8_0 activations */
    char *amx_worker_scratch; /* one amx_worker_bytes slice per worker */
    size_t amx_worker_bytes;
    quant_type act_type;
} matmul_task;

static void matmul_quantize_rows(void *ctx, int ith, int nth) {
    matmul_task *t = ctx;
    int64_t begin, end;
    host__split(t->rows, ith, nth, &begin, &end);
    for (int64_t r = begin; r < end; r++) {
        char *row = (char *)t->act + (size_t)r * t->act_row_bytes;
        t->quantize(row, t->in + r * t->k, t->k);
        if (t->rows_scales) host__rows_scales_row(t->act_type, row, t->k, r, t->rows_scales);
        if (t->dot_pairs) host__pairs_act_row(&t->pairs, row, r);
        if (t->amx.tiled) host__amx_act_row(t->act_type, row, t->k, r, t->amx_tiled, t->amx_dx, t->amx_sx, t->amx_xsum);
    }
}

/* The amx set's tiles: each is one group of 16 packed weight rows. */
static void matmul_amx_tiles(matmul_task *t, int ith, int nth) {
    int64_t tile_begin, tile_end;
    host__split(t->first_tile[t->n_parts], ith, nth, &tile_begin, &tile_end);
    void *scratch = t->amx_worker_scratch + (size_t)ith * t->amx_worker_bytes;
    int configured_rows = 0;
    int p = 0;
    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        while (tile >= t->first_tile[p + 1]) p++;
        const float *bias = t->parts[p].bias ? (const float *)t->parts[p].bias->data : NULL;
        host__amx_group(t->parts[p].w, tile - t->first_tile[p], &t->amx, t->parts[p].out, bias, scratch,
                        &configured_rows);
    }
    host__amx_release(&configured_rows);
}

/* One tile's weight rows [n0, n1) of part p against every row, through the pair
 * kernels: each group of rows reads the tile (in L1 after the first group). */
static void matmul_pairs_tile(const matmul_task *t, int p, int64_t n0, int64_t n1) {
    const dev_tensor *w = t->parts[p].w;
    const float *bias = t->parts[p].bias ? (const float *)t->parts[p].bias->data : NULL;
    const int64_t n = w->ne1;
    const size_t w_row_bytes = quant_row_bytes(w->type, t->k);
    /* the pairs in equal groups of at most HOST_PAIRS_PER_CALL: each group unpacks the
     * weights again, so 6 pairs go as 3 + 3, not 5 + 1 */
    const int64_t n_pairs = t->pairs.n_pairs, groups = (n_pairs + HOST_PAIRS_PER_CALL - 1) / HOST_PAIRS_PER_CALL;
    const int64_t per_group = (n_pairs + groups - 1) / groups;
    for (int64_t p0 = 0; p0 < n_pairs; p0 += per_group) {
        const int64_t first_row = 2 * p0, left = t->rows - first_row;
        const int n_rows = left < 2 * per_group ? (int)left : (int)(2 * per_group);
        float *y = t->parts[p].out + first_row * n;
        for (int64_t j = n0; j < n1; j += HOST_PAIRS_WROWS) {
            const int n_w = n1 - j < HOST_PAIRS_WROWS ? (int)(n1 - j) : HOST_PAIRS_WROWS;
            t->dot_pairs((const char *)w->data + (size_t)j * w_row_bytes, w_row_bytes, n_w, &t->pairs, p0, n_rows,
                         y + j, (size_t)n);
            if (bias)
                for (int r = 0; r < n_rows; r++)
                    for (int i = 0; i < n_w; i++) y[r * n + j + i] += bias[j + i];
        }
    }
}

static void matmul_tiles(void *ctx, int ith, int nth) {
    matmul_task *t = ctx;
    if (t->amx.tiled) {
        matmul_amx_tiles(t, ith, nth);
        return;
    }
    int64_t tile_begin, tile_end;
    host__split(t->first_tile[t->n_parts], ith, nth, &tile_begin, &tile_end);
    int p = 0;
    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        while (tile >= t->first_tile[p + 1]) p++;
        const dev_tensor *w = t->parts[p].w;
        const float *bias = t->parts[p].bias ? (const float *)t->parts[p].bias->data : NULL;
        float *out = t->parts[p].out;
        int64_t n = w->ne1;
        size_t w_row_bytes = quant_row_bytes(w->type, t->k);
        int64_t n0 = (tile - t->first_tile[p]) * MATMUL_TILE_N;
        int64_t n1 = n0 + MATMUL_TILE_N < n ? n0 + MATMUL_TILE_N : n;
        if (t->dot_pairs) {
            matmul_pairs_tile(t, p, n0, n1);
            continue;
        }
        int64_t r = 0;
        /* Up to HOST_DOT_ROWS activation rows per weight row read; a lone row (one
         * sequence's decode, or a batch's last) goes to the decode-shaped kernel below. */
        while (t->rows_scales && t->rows - r >= 2) {
            const int n_rows = t->rows - r < HOST_DOT_ROWS ? (int)(t->rows - r) : HOST_DOT_ROWS;
            const void *a = (const char *)t->act + (size_t)r * t->act_row_bytes;
            const float *scales = host__rows_scales_group(t->rows_scales, t->k, r);
            float *y = out + r * n;
            for (int64_t j = n0; j < n1; j++) {
                const void *wrow = (const char *)w->data + (size_t)j * w_row_bytes;
                t->dot_rows(n_rows, wrow, a, t->act_row_bytes, scales, t->k, y + j, (size_t)n);
                if (bias)
                    for (int i = 0; i < n_rows; i++) y[i * n + j] += bias[j];
            }
            r += n_rows;
        }
        for (; r < t->rows; r++) {
            const void *a = (const char *)t->act + (size_t)r * t->act_row_bytes;
            float *y = out + r * n;
            int64_t j = n0;
            if (t->dot_wrows) { /* HOST_DOT_WROWS weight rows per activation row read */
                for (; j + HOST_DOT_WROWS <= n1; j += HOST_DOT_WROWS) {
                    const void *wrow = (const char *)w->data + (size_t)j * w_row_bytes;
                    t->dot_wrows(wrow, w_row_bytes, a, t->k, y + j);
                    if (bias)
                        for (int i = 0; i < HOST_DOT_WROWS; i++) y[j + i] += bias[j + i];
                }
            }
            for (; j < n1; j++) {
                const void *wrow = (const char *)w->data + (size_t)j * w_row_bytes;
                float v = t->dot(wrow, a, t->k);
                y[j] = bias ? v + bias[j] : v;
            }
        }
    }
}

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Carves the amx kernel's buffers from the scratch after the quantized activations
 * (host_reserve sized it for them). */
static void amx_prepare(host_backend *hb, matmul_task *t) {
    const size_t nb = (size_t)(t->k / QUANT_QK), tiled_rows = (size_t)(t->rows + 15) / 16 * 16;
    const size_t scale_bytes = tiled_rows * nb * sizeof(float);
    char *base = hb->scratch;
    size_t used = align64(t->act_row_bytes * (size_t)t->rows);
    t->amx_tiled = (uint8_t *)(base + used);
    used = align64(used + tiled_rows * nb * QUANT_QK);
    t->amx_dx = (float *)(base + used);
    used = align64(used + scale_bytes);
    t->amx_sx = t->act_type == QUANT_Q8_1 ? (float *)(base + used) : NULL;
    t->amx_xsum = t->act_type == QUANT_Q8_1 ? NULL : (int32_t *)(base + used); /* the same size */
    used = align64(used + scale_bytes);
    t->amx_worker_scratch = base + used;
    t->amx_worker_bytes = align64(host__amx_thread_scratch_bytes(t->k));
    used += t->amx_worker_bytes * (size_t)host__pool_threads(hb->pool);
    SP_ASSERT(used <= hb->scratch_bytes); /* see host_reserve */
    t->amx =
        (host_amx_act){.tiled = t->amx_tiled, .n_rows = t->rows, .dx = t->amx_dx, .sx = t->amx_sx, .xsum = t->amx_xsum};
}

/* Carves the pair pack from the scratch after the quantized activations (host_reserve
 * sized it for them). */
static void pairs_prepare(host_backend *hb, matmul_task *t, quant_type w_type) {
    const size_t used = align64(t->act_row_bytes * (size_t)t->rows);
    SP_ASSERT(used + host__pairs_bytes(w_type, t->k, t->rows) <= hb->scratch_bytes); /* see host_reserve */
    t->pairs = host__pairs_act_init((char *)hb->scratch + used, w_type, t->k, t->rows);
    t->dot_pairs = host__vec_dot_pairs_for(hb->base.cpu_isa, w_type);
}

/* Carves the multi-row kernels' scale table from the scratch after the quantized
 * activations (host_reserve sized it for them). The last group's lanes past the last row
 * are zeroed: the kernels load a group's four lanes at once (and use only their rows'),
 * so no stale bytes become NaNs or denormals in the arithmetic. */
static void rows_scales_prepare(host_backend *hb, matmul_task *t) {
    const size_t used = align64(t->act_row_bytes * (size_t)t->rows);
    const size_t bytes = host__rows_scales_bytes(t->k, t->rows);
    SP_ASSERT(used + bytes <= hb->scratch_bytes); /* see host_reserve */
    t->rows_scales = (float *)((char *)hb->scratch + used);
    if (t->rows % HOST_DOT_ROWS != 0) {
        float *last = host__rows_scales_group(t->rows_scales, t->k, t->rows - t->rows % HOST_DOT_ROWS);
        memset(last, 0, bytes - (size_t)((char *)last - (char *)t->rows_scales));
    }
}

/* Parts of one weight type: one quantization of the input, one dispatch of tiles. */
static void matmul_same_type(host_backend *hb, const dev_matmul_part *parts, int n_parts, const float *in,
                             int64_t rows) {
    const dev_tensor *w0 = parts[0].w;
    quant_type act_type = quant_vec_dot_type(w0->type);
    matmul_task task = {
        .parts = parts,
        .n_parts = n_parts,
        .in = in,
        .rows = rows,
        .k = w0->ne0,
        .dot = host__vec_dot_for(hb->base.cpu_isa, w0->type),
        .dot_rows = host__vec_dot_rows_for(hb->base.cpu_isa, w0->type),
        .dot_wrows = host__vec_dot_wrows_for(hb->base.cpu_isa, w0->type),
    };
    SP_ASSERT(task.dot != NULL && n_parts <= MATMUL_MAX_PARTS);
    for (int p = 0; p < n_parts; p++)
        task.first_tile[p + 1] = task.first_tile[p] + (parts[p].w->ne1 + MATMUL_TILE_N - 1) / MATMUL_TILE_N;
    if (act_type == QUANT_F32) {
        task.act = in;
        task.act_row_bytes = (size_t)task.k * sizeof(float);
    } else {
        task.quantize = host__quantize_for(hb->base.cpu_isa, act_type);
        SP_ASSERT(task.quantize != NULL);
        task.act_row_bytes = quant_row_bytes(act_type, task.k);
        SP_ASSERT(task.act_row_bytes * (size_t)rows <= hb->scratch_bytes); /* see dev_reserve */
        task.act = hb->scratch;
        task.act_type = act_type;
        if (hb->base.cpu_isa == SP_CPU_ISA_AMX && w0->packed) amx_prepare(hb, &task);
        if (rows >= HOST_PAIRS_MIN_ROWS && host__pairs_takes(hb->base.cpu_isa, w0->type))
            pairs_prepare(hb, &task, w0->type);
        if (rows >= 2 && task.dot_rows) rows_scales_prepare(hb, &task);
        if (rows * task.k < 4096)
            matmul_quantize_rows(&task, 0, 1);
        else
            host__pool_run(hb->pool, matmul_quantize_rows, &task);
    }
    host__pool_run(hb->pool, matmul_tiles, &task);
}

void host__matmul_group(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows) {
    host_backend *hb = (host_backend *)dev;
    /* consecutive parts of the same weight type share the prepared input */
    for (int first = 0; first < n_parts;) {
        int end = first + 1;
        while (end < n_parts && end - first < MATMUL_MAX_PARTS && parts[end].w->type == parts[first].w->type) end++;
        matmul_same_type(hb, parts + first, end - first, in, rows);
        first = end;
    }
}

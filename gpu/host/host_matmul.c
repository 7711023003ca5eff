/* host_matmul.c: out (T, N) = in (T, K) . W (N, K)^T on the CPU.
 *
 * Legend: T = activation rows (tokens), N = weight rows (outputs), K = row length.
 *
 * Two phases, each split across the pool: (1) every activation row is quantized once
 * to the weight type's dot format (Q8_0/Q8_1/Q8_K, or kept as floats); (2) the weight
 * rows are cut into tiles of MATMUL_TILE_N rows, and each tile is multiplied against
 * every activation row before the next tile is read, so one pass over the weights
 * serves the whole batch. Each output element is one call of the same dot kernel
 * whatever T is, so a token's result never depends on the rest of the batch.
 */
#include <string.h>

#include "gpu/host/host_internal.h"

/* Weight rows per tile: 16 rows of 576 Q4_1 elements are 5.6 KiB, well inside L1. */
enum { MATMUL_TILE_N = 16 };

typedef struct matmul_task {
    float *out;          /* (T, N) */
    const float *in;     /* (T, K) */
    const dev_tensor *w; /* (N, K) */
    const float *bias;   /* (N) or NULL */
    int64_t rows;        /* T */
    quant_type act_type;
    size_t act_row_bytes;
    void *act; /* (T, act_row_bytes) quantized activations */
    host_quantize_fn quantize;
    host_vec_dot_fn dot;
} matmul_task;

static void matmul_quantize_rows(void *ctx, int ith, int nth) {
    matmul_task *t = ctx;
    int64_t begin, end;
    host__split(t->rows, ith, nth, &begin, &end);
    int64_t k = t->w->ne0;
    for (int64_t r = begin; r < end; r++) t->quantize((char *)t->act + (size_t)r * t->act_row_bytes, t->in + r * k, k);
}

static void matmul_tiles(void *ctx, int ith, int nth) {
    matmul_task *t = ctx;
    int64_t n = t->w->ne1, k = t->w->ne0;
    int64_t n_tiles = (n + MATMUL_TILE_N - 1) / MATMUL_TILE_N;
    int64_t tile_begin, tile_end;
    host__split(n_tiles, ith, nth, &tile_begin, &tile_end);
    size_t w_row_bytes = quant_row_bytes(t->w->type, k);
    for (int64_t tile = tile_begin; tile < tile_end; tile++) {
        int64_t n0 = tile * MATMUL_TILE_N;
        int64_t n1 = n0 + MATMUL_TILE_N < n ? n0 + MATMUL_TILE_N : n;
        for (int64_t r = 0; r < t->rows; r++) {
            const void *a = (const char *)t->act + (size_t)r * t->act_row_bytes;
            float *y = t->out + r * n;
            for (int64_t j = n0; j < n1; j++) {
                const void *wrow = (const char *)t->w->data + (size_t)j * w_row_bytes;
                float v = t->dot(wrow, a, k);
                y[j] = t->bias ? v + t->bias[j] : v;
            }
        }
    }
}

void host__matmul(dev_backend *dev, float *out, const float *in, const dev_tensor *w, const dev_tensor *bias,
                  int64_t rows) {
    host_backend *hb = (host_backend *)dev;
    matmul_task task = {
        .out = out,
        .in = in,
        .w = w,
        .bias = bias ? (const float *)bias->data : NULL,
        .rows = rows,
        .act_type = quant_vec_dot_type(w->type),
        .dot = host__vec_dot_for(w->type),
    };
    SP_ASSERT(task.dot != NULL);
    if (task.act_type == QUANT_F32) {
        task.act = (void *)in;
        task.act_row_bytes = (size_t)w->ne0 * sizeof(float);
    } else {
        task.quantize = host__quantize_for(task.act_type);
        SP_ASSERT(task.quantize != NULL);
        task.act_row_bytes = quant_row_bytes(task.act_type, w->ne0);
        SP_ASSERT(task.act_row_bytes * (size_t)rows <= hb->scratch_bytes); /* see dev_reserve */
        task.act = hb->scratch;
        if (rows * w->ne0 < 4096)
            matmul_quantize_rows(&task, 0, 1);
        else
            host__pool_run(hb->pool, matmul_quantize_rows, &task);
    }
    host__pool_run(hb->pool, matmul_tiles, &task);
}

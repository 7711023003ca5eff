/* embed.c: embedding requests in the tick: which rows of a prompt chunk a pooling wants,
 * the running pool (mean: a sum; last and cls: the one row), and the end: the vector,
 * L2-normalized, into the output, the request finished and its KV blocks back to the
 * pool at once.
 *
 * The vector is what llama.cpp's embeddings are for a decoder model: the final hidden
 * state after the output norm (model_forward_sample_hidden), pooled over the prompt's
 * tokens as its --pooling mean|last|cls, normalized as its embd_normalize 2 (L2, the sum
 * of squares in double). An embedding is prefill-only work: tick.c gives its chunks
 * hidden rows instead of logits, never matches it against the prefix cache nor registers
 * its blocks there, so every position is computed and nothing of it outlives the request.
 * A chunked prompt pools across steps; a preempted one starts again from a zeroed pool
 * (tick.c's admit).
 *
 * DESIGN (threads). The scheduler thread, except sched__embed_prepare (the submitting
 * thread, before the request is queued) and the pooling functions, which are pure.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "scheduler/sched_internal.h"

sp_status sched__embed_prepare(sched_request *r, int32_t n_embd) {
    if (r->params.pooling == SP_POOLING_NONE) return SP_OK;
    free(r->pool); /* a retried submission allocates again */
    r->pool = calloc((size_t)n_embd, sizeof *r->pool);
    float *vec = calloc((size_t)n_embd, sizeof *vec);
    pthread_mutex_lock(&r->lock);
    free(r->out.embedding);
    r->out.embedding = vec;
    pthread_mutex_unlock(&r->lock);
    if (!r->pool || !vec) return sp_fail(SP_ERR_NOMEM, "embedding of %d dimensions: out of memory", n_embd);
    return SP_OK;
}

int32_t sched__pool_rows(sp_pooling pooling, int32_t first, int32_t chunk, int32_t n_prompt, int32_t *first_row) {
    *first_row = first;
    switch (pooling) {
    case SP_POOLING_MEAN: return chunk;
    case SP_POOLING_LAST:
        *first_row = n_prompt - 1;
        return first <= n_prompt - 1 && n_prompt - 1 < first + chunk ? 1 : 0;
    case SP_POOLING_CLS: *first_row = 0; return first == 0 && chunk > 0 ? 1 : 0;
    case SP_POOLING_NONE: break;
    }
    return 0;
}

void sched__pool_add(sp_pooling pooling, double *pool, const float *rows, int32_t n_rows, int32_t dim) {
    if (pooling != SP_POOLING_MEAN) { /* last, cls: the one row asked for */
        SP_ASSERT(n_rows <= 1);
        for (int32_t i = 0; i < dim && n_rows == 1; i++) pool[i] = rows[i];
        return;
    }
    for (int32_t t = 0; t < n_rows; t++) {
        const float *row = rows + (size_t)t * (size_t)dim;
        for (int32_t i = 0; i < dim; i++) pool[i] += row[i];
    }
}

void sched__pool_finish(sp_pooling pooling, const double *pool, int32_t n_prompt, int32_t dim, float *out) {
    const double scale = pooling == SP_POOLING_MEAN && n_prompt > 0 ? 1.0 / n_prompt : 1.0;
    double sum = 0;
    for (int32_t i = 0; i < dim; i++) sum += pool[i] * scale * (pool[i] * scale);
    const double norm = sqrt(sum);
    const double inv = norm > 0 ? 1.0 / norm : 0.0;
    for (int32_t i = 0; i < dim; i++) out[i] = (float)(pool[i] * scale * inv);
}

bool sched__embed_step(sched *s, sched_request *r, const float *hidden, int32_t n_rows) {
    if (n_rows > 0) sched__pool_add(r->params.pooling, r->pool, hidden, n_rows, s->n_embd);
    if (r->n_computed < r->params.n_prompt) return true;
    pthread_mutex_lock(&r->lock);
    sched__pool_finish(r->params.pooling, r->pool, r->params.n_prompt, s->n_embd, r->out.embedding);
    r->out.n_embd = s->n_embd;
    pthread_mutex_unlock(&r->lock);
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            sched__running_remove(s, i);
            break;
        }
    sched__request_end(s, r, SCHED_FINISH_STOP, SP_OK, NULL); /* blocks back to the pool */
    return false;
}

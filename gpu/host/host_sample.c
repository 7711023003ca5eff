/* host_sample.c: dev_sample on the CPU: each logit row goes through sample/sample.c
 * exactly as the scheduler's host sampling did (see dev_sample in gpu/device.h), so
 * the CPU backend's tokens and log-probabilities are those functions' bit for bit.
 *
 * Rows are split across the thread pool's workers, each with its own scratch: a row's
 * result depends only on its logits and its row description (its generator comes from
 * its position), so which worker takes it changes nothing. Speculative decoding makes
 * steps with many sampled rows (every draft row), where this matters.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/host/host_internal.h"

void host__sample_free(host_backend *hb) {
    for (int i = 0; i < hb->n_samplers; i++) {
        sample_state_free(&hb->samplers[i]);
        free(hb->raw_logits[i]);
    }
    free(hb->samplers);
    free(hb->raw_logits);
    hb->samplers = NULL;
    hb->raw_logits = NULL;
    hb->n_samplers = 0;
    hb->sampler_vocab = 0;
}

/* The samplers' scratch, one per worker, sized for the vocabulary on first use and kept. */
static sp_status sampler_fit(host_backend *hb, int32_t n_vocab) {
    if (hb->sampler_vocab == n_vocab) return SP_OK;
    host__sample_free(hb);
    int n = host__pool_threads(hb->pool);
    hb->samplers = calloc((size_t)n, sizeof *hb->samplers);
    hb->raw_logits = calloc((size_t)n, sizeof *hb->raw_logits);
    if (!hb->samplers || !hb->raw_logits) {
        host__sample_free(hb);
        return sp_fail(SP_ERR_NOMEM, "sampling: out of memory");
    }
    for (int i = 0; i < n; i++) {
        hb->n_samplers = i + 1;
        hb->raw_logits[i] = malloc(sizeof(float) * (size_t)n_vocab);
        sp_status st = hb->raw_logits[i] ? sample_state_init(&hb->samplers[i], n_vocab, 0)
                                         : sp_fail(SP_ERR_NOMEM, "sampling: out of memory for %d logits", n_vocab);
        if (st != SP_OK) {
            host__sample_free(hb);
            return st;
        }
    }
    hb->sampler_vocab = n_vocab;
    return SP_OK;
}

static void sample_row(sample_state *sampler, float *raw_logits, float *logits, const dev_sample_vocab *vocab,
                       const dev_sample_row *row, dev_sample_result *res) {
    const int32_t n_vocab = vocab->n_vocab;
    double lse = 0;
    if (row->top_logprobs >= 0) {
        lse = sample_logsumexp(logits, n_vocab);
        if (row->top_logprobs > 0) sample_top_logprobs(logits, n_vocab, lse, row->top_logprobs, res->top);
        memcpy(raw_logits, logits, sizeof *logits * (size_t)n_vocab);
    }
    if (row->mask_eog)
        for (int32_t i = 0; i < vocab->n_eog; i++) logits[vocab->eog_ids[i]] = -INFINITY;
    if (row->allowed) sample_apply_allowed(row->allowed, n_vocab, logits);
    sample_apply_penalties(row->params, sampler, row->prompt, row->n_prompt, row->generated, row->n_generated, logits);
    sampler->rng = row->rng;
    res->token = sample_token(row->params, sampler, logits);
    res->rng = sampler->rng;
    res->logprob = row->top_logprobs >= 0 ? (float)((double)raw_logits[res->token] - lse) : 0.0f;
}

/* One dev_sample call, for the workers. */
typedef struct sample_task {
    host_backend *hb;
    float *logits;
    int32_t n_rows;
    const dev_sample_vocab *vocab;
    const dev_sample_row *rows;
    dev_sample_result *results;
} sample_task;

/* Worker ith takes rows ith, ith + nth, ...: neighbouring rows (a sequence's drafts,
 * alike in cost) go to different workers. */
static void sample_rows_task(void *ctx, int ith, int nth) {
    const sample_task *t = ctx;
    for (int32_t i = ith; i < t->n_rows; i += nth)
        sample_row(&t->hb->samplers[ith], t->hb->raw_logits[ith], t->logits + (size_t)i * (size_t)t->vocab->n_vocab,
                   t->vocab, &t->rows[i], &t->results[i]);
}

sp_status host__sample(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                       const dev_sample_row *rows, dev_sample_result *results) {
    host_backend *hb = (host_backend *)dev;
    sp_status st = sampler_fit(hb, vocab->n_vocab);
    if (st != SP_OK) return st;
    sample_task task = {hb, logits, n_rows, vocab, rows, results};
    if (n_rows == 1)
        sample_rows_task(&task, 0, 1);
    else
        host__pool_run(hb->pool, sample_rows_task, &task);
    return SP_OK;
}

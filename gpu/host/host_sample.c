/* host_sample.c: dev_sample on the CPU: each logit row goes through sample/sample.c
 * exactly as the scheduler's host sampling did (see dev_sample in gpu/device.h), so
 * the CPU backend's tokens and log-probabilities are those functions' bit for bit.
 *
 * Rows run one after another on the calling thread: a row is O(V) and a step has at
 * most a few dozen, next to the step's matrix products.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/host/host_internal.h"

/* The sampler's scratch, sized for the vocabulary on first use and kept. */
static sp_status sampler_fit(host_backend *hb, int32_t n_vocab) {
    if (hb->sampler_vocab == n_vocab) return SP_OK;
    sample_state_free(&hb->sampler);
    free(hb->raw_logits);
    hb->sampler_vocab = 0;
    hb->raw_logits = malloc(sizeof(float) * (size_t)n_vocab);
    if (!hb->raw_logits) return sp_fail(SP_ERR_NOMEM, "sampling: out of memory for %d logits", n_vocab);
    sp_status st = sample_state_init(&hb->sampler, n_vocab, 0);
    if (st != SP_OK) return st;
    hb->sampler_vocab = n_vocab;
    return SP_OK;
}

static void sample_row(host_backend *hb, float *logits, const dev_sample_vocab *vocab, const dev_sample_row *row,
                       dev_sample_result *res) {
    const int32_t n_vocab = vocab->n_vocab;
    double lse = 0;
    if (row->top_logprobs >= 0) {
        lse = sample_logsumexp(logits, n_vocab);
        if (row->top_logprobs > 0) sample_top_logprobs(logits, n_vocab, lse, row->top_logprobs, res->top);
        memcpy(hb->raw_logits, logits, sizeof *logits * (size_t)n_vocab);
    }
    if (row->mask_eog)
        for (int32_t i = 0; i < vocab->n_eog; i++) logits[vocab->eog_ids[i]] = -INFINITY;
    sample_apply_penalties(row->params, &hb->sampler, row->prompt, row->n_prompt, row->generated, row->n_generated,
                           logits);
    hb->sampler.rng = row->rng;
    res->token = sample_token(row->params, &hb->sampler, logits);
    res->rng = hb->sampler.rng;
    res->logprob = row->top_logprobs >= 0 ? (float)((double)hb->raw_logits[res->token] - lse) : 0.0f;
}

sp_status host__sample(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                       const dev_sample_row *rows, dev_sample_result *results) {
    host_backend *hb = (host_backend *)dev;
    sp_status st = sampler_fit(hb, vocab->n_vocab);
    if (st != SP_OK) return st;
    for (int32_t i = 0; i < n_rows; i++)
        sample_row(hb, logits + (size_t)i * (size_t)vocab->n_vocab, vocab, &rows[i], &results[i]);
    return SP_OK;
}

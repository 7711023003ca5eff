/* sample.c: token selection. The chain follows llama.cpp's order: top-k, top-p and
 * min-p on the untempered distribution, then temperature, then one draw from a
 * splitmix64 stream seeded per sequence. */
#include "model/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

sample_params sample_params_default(void) {
    return (sample_params){.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
}

sp_status sample_params_validate(const sample_params *p) {
    if (!isfinite(p->temperature) || p->temperature < 0.0f || p->temperature > 100.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "temperature %g must be between 0 and 100", (double)p->temperature);
    if (p->top_k < 0) return sp_fail(SP_ERR_INVALID_ARG, "top_k %d must not be negative", p->top_k);
    if (!isfinite(p->top_p) || p->top_p <= 0.0f || p->top_p > 1.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "top_p %g must be in (0, 1]", (double)p->top_p);
    if (!isfinite(p->min_p) || p->min_p < 0.0f || p->min_p > 1.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "min_p %g must be in [0, 1]", (double)p->min_p);
    return SP_OK;
}

sp_status sample_state_init(sample_state *s, int32_t n_vocab, uint64_t seed) {
    s->candidates = malloc(sizeof *s->candidates * (size_t)n_vocab);
    if (!s->candidates) return sp_fail(SP_ERR_NOMEM, "sampler: out of memory");
    s->n_vocab = n_vocab;
    s->rng = seed;
    return SP_OK;
}

void sample_state_free(sample_state *s) {
    free(s->candidates);
    s->candidates = NULL;
}

static uint64_t splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t *state) {
    return (double)(splitmix64_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

int32_t sample_argmax(const float *logits, int32_t n_vocab) {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

float sample_logprob(const float *logits, int32_t n_vocab, int32_t id) {
    float max = logits[sample_argmax(logits, n_vocab)];
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - (double)max);
    return (float)((double)logits[id] - (double)max - log(sum));
}

static int candidate_by_logit_desc(const void *a, const void *b) {
    const sample_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* Turns the first n candidates' logits into probabilities at temperature temp. */
static void softmax(sample_candidate *c, int32_t n, float temp) {
    float max = c[0].logit;
    for (int32_t i = 1; i < n; i++)
        if (c[i].logit > max) max = c[i].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double e = exp(((double)c[i].logit - (double)max) / (double)temp);
        c[i].logit = (float)e;
        sum += e;
    }
    for (int32_t i = 0; i < n; i++) c[i].logit = (float)((double)c[i].logit / sum);
}

int32_t sample_token(const sample_params *p, sample_state *s, const float *logits) {
    int32_t n = s->n_vocab;
    if (p->temperature <= 0.0f) return sample_argmax(logits, n);
    sample_candidate *c = s->candidates;
    /* a NaN (from broken weights) would make the ordering inconsistent: rank it last */
    for (int32_t i = 0; i < n; i++) c[i] = (sample_candidate){i, isnan(logits[i]) ? -INFINITY : logits[i]};
    qsort(c, (size_t)n, sizeof *c, candidate_by_logit_desc);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;

    if (p->top_p < 1.0f || p->min_p > 0.0f) {
        /* probabilities at temperature 1 decide the cut, as llama.cpp does */
        float max = c[0].logit;
        double sum = 0.0;
        for (int32_t i = 0; i < n; i++) sum += exp((double)c[i].logit - (double)max);
        double cumulative = 0.0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            double prob = exp((double)c[i].logit - (double)max) / sum;
            if (p->min_p > 0.0f && i > 0 && prob < (double)p->min_p * (1.0 / sum)) {
                keep = i;
                break;
            }
            cumulative += prob;
            if (p->top_p < 1.0f && cumulative >= (double)p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    softmax(c, n, p->temperature);
    double r = rng_uniform(&s->rng);
    double cumulative = 0.0;
    for (int32_t i = 0; i < n; i++) {
        cumulative += (double)c[i].logit;
        if (r < cumulative) return c[i].id;
    }
    return c[n - 1].id;
}

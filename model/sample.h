/* sample.h: choosing the next token from logits: greedy, or temperature with top-k,
 * top-p and min-p, drawn from a per-sequence seeded generator so the same seed gives
 * the same tokens whatever else runs beside it.
 *
 * Thread rules: a sample_state belongs to one sequence; functions are reentrant.
 */
#ifndef SP_SAMPLE_H
#define SP_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"

typedef struct sample_params {
    float temperature; /* <= 0: greedy */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;
} sample_params;

/* Defaults: temperature 1, no top-k/top-p/min-p, seed 0. */
sample_params sample_params_default(void);

/* Checks ranges; SP_ERR_INVALID_ARG naming the field. */
sp_status sample_params_validate(const sample_params *p);

typedef struct sample_candidate {
    int32_t id;
    float logit; /* then probability, once normalized */
} sample_candidate;

typedef struct sample_state {
    uint64_t rng;                 /* splitmix64 state */
    sample_candidate *candidates; /* (V) scratch, owned */
    int32_t n_vocab;
} sample_state;

/* Caller owns the state's buffer; free with sample_state_free. */
sp_status sample_state_init(sample_state *s, int32_t n_vocab, uint64_t seed);
void sample_state_free(sample_state *s);

/* Index of the largest logit (the lowest id among equals). */
int32_t sample_argmax(const float *logits, int32_t n_vocab);

/* Picks a token from logits (V); greedy when p->temperature <= 0. */
int32_t sample_token(const sample_params *p, sample_state *s, const float *logits);

/* log-softmax of logits[id] (V entries), computed in double. */
float sample_logprob(const float *logits, int32_t n_vocab, int32_t id);

#endif

/* sample.h: choosing the next token from logits: greedy, or temperature with top-k,
 * top-p and min-p, drawn from a per-sequence seeded generator so the same seed gives
 * the same tokens whatever else runs beside it; the OpenAI penalties and logit bias
 * applied to the logits before that; log-probabilities for `logprobs`.
 *
 * NaN logits (broken weights) have probability 0 and rank below every other token.
 *
 * Thread rules: a sample_state is used by one thread at a time; functions are
 * reentrant. Its scratch carries nothing from one call to the next, so only rng ties
 * a state to a sequence (one state may serve many by swapping rng).
 */
#ifndef SP_SAMPLE_H
#define SP_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"

/* One logit_bias entry: added to the token's logit before anything else. */
typedef struct sample_logit_bias {
    int32_t id;
    float bias; /* [-100, 100] */
} sample_logit_bias;

typedef struct sample_params {
    float temperature; /* <= 0: greedy */
    int top_k;         /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;
    float presence_penalty;   /* [-2, 2], 0 = off: minus this once for each token already generated */
    float frequency_penalty;  /* [-2, 2], 0 = off: minus this times the token's count in the generated text */
    float repetition_penalty; /* (0, 2], 1 = off: tokens in the prompt or generated text have positive
                               * logits divided by it and negative ones multiplied (CTRL / HF / vLLM) */
    const sample_logit_bias *logit_bias; /* (n_logit_bias), borrowed; NULL when none */
    int32_t n_logit_bias;
} sample_params;

/* Defaults: temperature 1, no top-k/top-p/min-p, no penalties or bias, seed 0. */
sample_params sample_params_default(void);

/* Checks ranges (penalties, bias values, and bias ids below n_vocab);
 * SP_ERR_INVALID_ARG naming the field as the OpenAI API calls it. */
sp_status sample_params_validate(const sample_params *p, int32_t n_vocab);

typedef struct sample_candidate {
    int32_t id;
    float logit; /* then probability, once normalized */
} sample_candidate;

typedef struct sample_state {
    uint64_t rng;                 /* splitmix64 state */
    sample_candidate *candidates; /* (V) scratch, owned */
    int32_t n_vocab;
    float *_weights;    /* (V) scratch, owned: token weights for the draw and the top-p cut */
    float *_block_mass; /* (V / 32 + 1) scratch, owned: sums of _weights per 32 entries */
    int32_t *_counts;   /* (V) scratch, owned: all zero between calls of sample_apply_penalties */
} sample_state;

/* Allocates the scratch buffers, about 16 bytes per vocabulary entry (786 KB for
 * V = 49,152), so that nothing allocates per token. Caller owns them; free with
 * sample_state_free, which also accepts a zeroed or already freed state. */
sp_status sample_state_init(sample_state *s, int32_t n_vocab, uint64_t seed);
void sample_state_free(sample_state *s);

/* The sampler's generator: advances the splitmix64 state and returns a uniform in
 * [0, 1) with 53 random bits. Every backend draws with it, so a seed gives the same
 * draws wherever the logits are. */
double sample_rng_uniform(uint64_t *state);

/* The generator state for the draw of the token at `position` (its index in the
 * sequence, prompt included) of a sequence seeded with seed: a pure function of the two
 * (counter-based randomness). A token's draw therefore never depends on how many draws
 * came before it, which lets speculative decoding sample several positions of one
 * sequence in one step and still choose exactly what one-at-a-time decoding chooses. */
uint64_t sample_rng_at(uint64_t seed, int64_t position);

/* Index of the largest logit (the lowest id among equals); 0 when all are NaN. */
int32_t sample_argmax(const float *logits, int32_t n_vocab);

/* Picks a token from logits (V); greedy when p->temperature <= 0 (or so small that
 * 1 / temperature overflows), and when no logit is finite. Otherwise one draw from
 * s->rng, whose result depends only on p, s->rng and logits. O(V) for every setting,
 * plus O(k log k) for top-k and, for top-p, expected time linear in the tokens of the
 * 1/8-nat bin of logits the cut ends in. */
int32_t sample_token(const sample_params *p, sample_state *s, const float *logits);

/* log-softmax of logits[id] (V entries), computed in double. */
float sample_logprob(const float *logits, int32_t n_vocab, int32_t id);

/* log(sum(exp(logits))) over V entries, in double: logprob(id) = logits[id] - this.
 * NaN entries count as probability 0; -inf when all are -inf or NaN, +inf when one
 * is +inf. */
double sample_logsumexp(const float *logits, int32_t n_vocab);

typedef struct sample_logprob_entry {
    int32_t id;
    float logprob;
} sample_logprob_entry;

/* The k most likely tokens (0 <= k <= n_vocab), most likely first, ties by lower id,
 * NaN logits last, with their log-probabilities (logits[id] - logsumexp; NaN for a NaN
 * logit). Fills out[0..k). O(V + k log k) in practice: a k-entry heap that most
 * tokens pass with one comparison (O(V log k) when logits rise with the id). */
void sample_top_logprobs(const float *logits, int32_t n_vocab, double logsumexp, int k, sample_logprob_entry *out);

/* Applies, in place on logits (V): logit bias, then the repetition penalty over
 * prompt and generated tokens, then presence and frequency penalties over generated
 * tokens (vLLM's order). Uses s's scratch; no allocation; O(n_logit_bias + n_prompt +
 * n_generated). A no-op when all are off. Token ids must be in [0, V) (asserted): the
 * params must have passed sample_params_validate. */
void sample_apply_penalties(const sample_params *p, sample_state *s, const int32_t *prompt, int32_t n_prompt,
                            const int32_t *generated, int32_t n_generated, float *logits);

/* Sets to -inf, in place on logits (V), every token whose bit in allowed is clear (bit
 * i % 32 of allowed[i / 32]: a grammar's mask). */
void sample_apply_allowed(const uint32_t *allowed, int32_t n_vocab, float *logits);

#endif

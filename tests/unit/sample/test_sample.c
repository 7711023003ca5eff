/* test_sample.c: token selection, penalties and log-probabilities.
 *
 * The .c is included so the pieces the fast paths are built from (the vectorized exp,
 * the block draw, the top-p cut) can be checked against plain references on their own.
 * The sampling tests compare empirical frequencies with the distribution the plain
 * algorithm defines (sort everything, cut, softmax), which the fast paths must keep.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.c"

enum { BIG_VOCAB = 49152 };

/* ---- helpers ------------------------------------------------------------------- */

/* xorshift64*: deterministic across runs. */
static uint64_t test_rng = 1;

static void test_seed(uint64_t seed) {
    test_rng = seed * 0x9E3779B97F4A7C15ull + 1;
}

static double test_uniform(void) {
    test_rng ^= test_rng >> 12;
    test_rng ^= test_rng << 25;
    test_rng ^= test_rng >> 27;
    return (double)((test_rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

/* Roughly normal (sum of four uniforms), mean 0 and standard deviation sd. */
static float test_normal(double sd) {
    double u = test_uniform() + test_uniform() + test_uniform() + test_uniform() - 2.0;
    return (float)(u * sd * 1.7320508);
}

/* Logits shaped like a language model's: a bulk around 0 and a few tokens far above. */
static void lm_like_logits(float *logits, int32_t n, uint64_t seed) {
    test_seed(seed);
    for (int32_t i = 0; i < n; i++) logits[i] = test_normal(2.5);
    for (int32_t i = 0; i < 30; i++) logits[(i * 7919 + 13) % n] = 16.0f - 0.4f * (float)i;
}

/* Rank order of the plain algorithm: larger logit first, lower id among equals, NaN last. */
static int reference_rank_cmp(const void *a, const void *b) {
    const sample_candidate *x = a, *y = b;
    bool xn = isnan(x->logit), yn = isnan(y->logit);
    if (xn != yn) return xn ? 1 : -1;
    if (!xn && x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static sample_candidate *reference_sorted(const float *logits, int32_t n) {
    sample_candidate *c = malloc(sizeof *c * (size_t)n);
    cr_assert_not_null(c);
    for (int32_t i = 0; i < n; i++) c[i] = (sample_candidate){i, logits[i]};
    qsort(c, (size_t)n, sizeof *c, reference_rank_cmp);
    return c;
}

/* The distribution sample_token must draw from, the slow way: sort the vocabulary,
 * take the top k, walk it for min-p and top-p at temperature 1, softmax at T. */
static void reference_distribution(const sample_params *p, const float *logits, int32_t n_vocab, double *prob) {
    sample_candidate *c = reference_sorted(logits, n_vocab);
    int32_t n = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : n_vocab;
    double max = (double)c[0].logit;
    if (p->top_p < 1.0f || p->min_p > 0.0f) {
        double sum = 0.0;
        for (int32_t i = 0; i < n && !isnan(c[i].logit); i++) sum += exp((double)c[i].logit - max);
        float floor = p->min_p > 0.0f ? c[0].logit + logf(p->min_p) : -INFINITY; /* as sample.c states it */
        double cumulative = 0.0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            if (!(c[i].logit >= floor)) {
                keep = i;
                break;
            }
            cumulative += exp((double)c[i].logit - max) / sum;
            if (p->top_p < 1.0f && cumulative >= (double)p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    memset(prob, 0, sizeof *prob * (size_t)n_vocab);
    double z = 0.0;
    for (int32_t i = 0; i < n; i++) {
        if (isnan(c[i].logit)) continue;
        prob[c[i].id] = exp(((double)c[i].logit - max) / (double)p->temperature);
        z += prob[c[i].id];
    }
    for (int32_t i = 0; i < n_vocab; i++) prob[i] /= z;
    free(c);
}

/* Draws n_draws tokens and checks them against prob (counter_based: each draw with the
 * generator of its own position, sample_rng_at(seed, d), as the scheduler draws): never a token of probability 0,
 * and a chi-square over the tokens expected at least 5 times (the rest pooled) within
 * about five standard deviations of its mean. The seed is fixed, so this is exact. */
static void check_frequencies(const sample_params *p, const float *logits, int32_t n_vocab, int n_draws,
                              bool counter_based) {
    double *prob = malloc(sizeof *prob * (size_t)n_vocab);
    int *count = calloc((size_t)n_vocab, sizeof *count);
    cr_assert(prob && count);
    reference_distribution(p, logits, n_vocab, prob);
    sample_state s;
    cr_assert_eq(sample_state_init(&s, n_vocab, p->seed), SP_OK);
    for (int d = 0; d < n_draws; d++) {
        if (counter_based) s.rng = sample_rng_at(p->seed, d);
        int32_t id = sample_token(p, &s, logits);
        cr_assert(id >= 0 && id < n_vocab);
        count[id]++;
    }
    double chi2 = 0.0, pooled_expected = 0.0;
    int df = -1, pooled_count = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (prob[i] == 0.0) {
            cr_assert_eq(count[i], 0, "token %d is outside the cut but was drawn %d times", i, count[i]);
            continue;
        }
        double expected = prob[i] * n_draws;
        if (expected < 5.0) {
            pooled_expected += expected;
            pooled_count += count[i];
            continue;
        }
        chi2 += (count[i] - expected) * (count[i] - expected) / expected;
        df++;
    }
    if (pooled_expected >= 5.0) {
        chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
        df++;
    } else {
        cr_assert_leq(pooled_count, 20, "rare tokens drawn %d times, expected %.2f", pooled_count, pooled_expected);
    }
    double limit = df + 5.0 * sqrt(2.0 * (df > 1 ? df : 1)) + 5.0;
    cr_log_info("chi2 %.1f over %d degrees of freedom (limit %.1f)", chi2, df, limit);
    cr_assert_lt(chi2, limit, "chi2 %.1f over %d degrees of freedom", chi2, df);
    sample_state_free(&s);
    free(prob);
    free(count);
}

static sample_params params_with(float temperature, int top_k, float top_p, float min_p, uint64_t seed) {
    sample_params p = sample_params_default();
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    return p;
}

/* ---- parameters ------------------------------------------------------------------ */

Test(sample_params, defaults_turn_everything_off) {
    sample_params p = sample_params_default();
    cr_assert_eq(p.temperature, 1.0f);
    cr_assert_eq(p.top_k, 0);
    cr_assert_eq(p.top_p, 1.0f);
    cr_assert_eq(p.min_p, 0.0f);
    cr_assert_eq(p.presence_penalty, 0.0f);
    cr_assert_eq(p.frequency_penalty, 0.0f);
    cr_assert_eq(p.repetition_penalty, 1.0f);
    cr_assert_null(p.logit_bias);
    cr_assert_eq(p.n_logit_bias, 0);
    cr_assert_eq(sample_params_validate(&p, 10), SP_OK);
}

Test(sample_params, accepts_the_bounds) {
    sample_logit_bias bias[2] = {{0, -100.0f}, {9, 100.0f}};
    sample_params p = sample_params_default();
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.repetition_penalty = 2.0f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    cr_assert_eq(sample_params_validate(&p, 10), SP_OK, "%s", sp_last_error());
    p.presence_penalty = 2.0f;
    p.frequency_penalty = -2.0f;
    p.repetition_penalty = 0.01f;
    cr_assert_eq(sample_params_validate(&p, 10), SP_OK, "%s", sp_last_error());
}

static void expect_invalid(const sample_params *p, int32_t n_vocab, const char *message) {
    cr_assert_eq(sample_params_validate(p, n_vocab), SP_ERR_INVALID_ARG, "accepted; expected \"%s\"", message);
    cr_assert(strstr(sp_last_error(), message) != NULL, "\"%s\" does not say \"%s\"", sp_last_error(), message);
}

Test(sample_params, validation_names_the_field) {
    sample_params p = sample_params_default();
    p.top_p = 1.5f;
    expect_invalid(&p, 10, "top_p");
    p = sample_params_default();
    p.temperature = -1.0f;
    expect_invalid(&p, 10, "temperature");
    p = sample_params_default();
    p.presence_penalty = 3.0f;
    expect_invalid(&p, 10, "presence_penalty 3 must be between -2 and 2");
    p = sample_params_default();
    p.frequency_penalty = -2.5f;
    expect_invalid(&p, 10, "frequency_penalty -2.5 must be between -2 and 2");
    p = sample_params_default();
    p.frequency_penalty = NAN;
    expect_invalid(&p, 10, "frequency_penalty");
    p = sample_params_default();
    p.repetition_penalty = 0.0f;
    expect_invalid(&p, 10, "repetition_penalty 0 must be in (0, 2]");
    p.repetition_penalty = 2.5f;
    expect_invalid(&p, 10, "repetition_penalty 2.5");
}

Test(sample_params, logit_bias_is_checked_entry_by_entry) {
    sample_logit_bias bias[2] = {{5, 1.0f}, {99999, 2.0f}};
    sample_params p = sample_params_default();
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    expect_invalid(&p, BIG_VOCAB, "logit_bias: token 99999 is outside the vocabulary (49152 tokens)");
    bias[1] = (sample_logit_bias){-1, 2.0f};
    expect_invalid(&p, BIG_VOCAB, "logit_bias: token -1 is outside the vocabulary");
    bias[1] = (sample_logit_bias){7, 150.0f};
    expect_invalid(&p, BIG_VOCAB, "logit_bias: bias 150 for token 7 must be between -100 and 100");
    bias[1] = (sample_logit_bias){7, NAN};
    expect_invalid(&p, BIG_VOCAB, "logit_bias: bias nan for token 7");
    bias[1] = (sample_logit_bias){BIG_VOCAB - 1, -100.0f};
    cr_assert_eq(sample_params_validate(&p, BIG_VOCAB), SP_OK, "%s", sp_last_error());
}

/* ---- penalties -------------------------------------------------------------------- */

Test(sample_penalties, all_off_is_a_no_op) {
    float logits[100], before[100];
    test_seed(3);
    for (int i = 0; i < 100; i++) logits[i] = before[i] = test_normal(3.0);
    int32_t prompt[6] = {1, 2, 3, 3, 50, 99}, generated[4] = {3, 7, 7, 0};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 100, 1), SP_OK);
    sample_params p = sample_params_default();
    sample_apply_penalties(&p, &s, prompt, 6, generated, 4, logits);
    cr_assert_eq(memcmp(logits, before, sizeof logits), 0);
    sample_state_free(&s);
}

Test(sample_penalties, repetition_divides_positive_and_multiplies_negative_once) {
    float logits[6] = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, 0.0f};
    /* token 1 occurs three times, still penalized once; 2 and 4 never occur */
    int32_t prompt[3] = {0, 1, 1}, generated[3] = {1, 3, 5};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 6, 1), SP_OK);
    sample_params p = sample_params_default();
    p.repetition_penalty = 2.0f;
    sample_apply_penalties(&p, &s, prompt, 3, generated, 3, logits);
    float expected[6] = {1.0f, -4.0f, 1.0f, 0.25f, 3.0f, 0.0f};
    for (int i = 0; i < 6; i++) cr_assert_float_eq(logits[i], expected[i], 1e-6, "token %d: %g", i, logits[i]);
    sample_state_free(&s);
}

Test(sample_penalties, presence_once_frequency_per_occurrence_generated_only) {
    float logits[6] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    int32_t prompt[3] = {0, 1, 0}, generated[5] = {2, 4, 2, 2, 1};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 6, 1), SP_OK);
    sample_params p = sample_params_default();
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    sample_apply_penalties(&p, &s, prompt, 3, generated, 5, logits);
    /* 0: prompt only; 1: once generated; 2: three times; 4: once; 3, 5: never */
    float expected[6] = {1.0f, 0.25f, -0.25f, 1.0f, 0.25f, 1.0f};
    for (int i = 0; i < 6; i++) cr_assert_float_eq(logits[i], expected[i], 1e-6, "token %d: %g", i, logits[i]);
    sample_state_free(&s);
}

Test(sample_penalties, negative_penalties_encourage) {
    float logits[3] = {0.0f, 0.0f, 0.0f};
    int32_t generated[3] = {1, 1, 2};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 3, 1), SP_OK);
    sample_params p = sample_params_default();
    p.presence_penalty = -1.0f;
    p.frequency_penalty = -0.5f;
    sample_apply_penalties(&p, &s, NULL, 0, generated, 3, logits);
    cr_assert_float_eq(logits[0], 0.0f, 1e-6);
    cr_assert_float_eq(logits[1], 2.0f, 1e-6);
    cr_assert_float_eq(logits[2], 1.5f, 1e-6);
    sample_state_free(&s);
}

Test(sample_penalties, bias_then_repetition_then_presence_and_frequency) {
    float logits[4] = {-1.0f, 2.0f, 2.0f, 0.5f};
    sample_logit_bias bias[2] = {{0, 4.0f}, {3, -100.0f}};
    int32_t prompt[1] = {0}, generated[3] = {0, 1, 0};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 4, 1), SP_OK);
    sample_params p = sample_params_default();
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.125f;
    sample_apply_penalties(&p, &s, prompt, 1, generated, 3, logits);
    /* 0: (-1 + 4) / 2 - 0.5 - 2 * 0.125 (bias before the repetition penalty: 1.5 - 0.75;
     * the other order would give (-1 * 2 + 4) - 0.75) */
    cr_assert_float_eq(logits[0], 0.75f, 1e-6, "%g", logits[0]);
    cr_assert_float_eq(logits[1], 2.0f / 2.0f - 0.5f - 0.125f, 1e-6, "%g", logits[1]);
    cr_assert_float_eq(logits[2], 2.0f, 1e-6);
    cr_assert_float_eq(logits[3], -99.5f, 1e-6);
    sample_state_free(&s);
}

Test(sample_penalties, scratch_is_clean_after_each_call) {
    enum { V = 1000 };
    float *a = malloc(sizeof *a * V), *b = malloc(sizeof *b * V);
    int32_t prompt[300], generated[200];
    test_seed(11);
    for (int i = 0; i < 300; i++) prompt[i] = (int32_t)(test_uniform() * 400);
    for (int i = 0; i < 200; i++) generated[i] = (int32_t)(test_uniform() * 600);
    for (int i = 0; i < V; i++) a[i] = b[i] = test_normal(2.0);
    sample_state s;
    cr_assert_eq(sample_state_init(&s, V, 1), SP_OK);
    sample_params p = sample_params_default();
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.1f;
    sample_apply_penalties(&p, &s, prompt, 300, generated, 200, a);
    for (int i = 0; i < V; i++) cr_assert_eq(s._counts[i], 0, "count %d left at %d", i, s._counts[i]);
    sample_apply_penalties(&p, &s, prompt, 300, generated, 200, b);
    cr_assert_eq(memcmp(a, b, sizeof *a * V), 0);
    sample_state_free(&s);
    free(a);
    free(b);
}

/* ---- log-probabilities -------------------------------------------------------------- */

Test(sample_logprobs, logprob_is_log_softmax) {
    float logits[3] = {1.0f, 2.0f, 3.0f};
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    cr_assert_float_eq(sample_logprob(logits, 3, 0), (float)(1.0 - log(z)), 1e-6);
    cr_assert_float_eq(sample_logprob(logits, 3, 2), (float)(3.0 - log(z)), 1e-6);
}

Test(sample_logprobs, logsumexp_matches_brute_force) {
    enum { V = 5000 };
    float *logits = malloc(sizeof *logits * V);
    for (uint64_t seed = 1; seed <= 5; seed++) {
        test_seed(seed);
        for (int i = 0; i < V; i++) logits[i] = test_normal(4.0) + (float)seed * 10.0f;
        long double sum = 0.0L;
        for (int i = 0; i < V; i++) sum += expl((long double)logits[i]);
        double expected = (double)logl(sum);
        cr_assert_float_eq(sample_logsumexp(logits, V), expected, 1e-9 * fabs(expected) + 1e-12);
    }
    /* large logits would overflow a plain sum of exp */
    for (int i = 0; i < V; i++) logits[i] = 1000.0f;
    cr_assert_float_eq(sample_logsumexp(logits, V), 1000.0 + log((double)V), 1e-9);
    free(logits);
}

Test(sample_logprobs, logsumexp_skips_nan_and_handles_nothing_finite) {
    float logits[4] = {NAN, 0.0f, -INFINITY, 0.0f};
    cr_assert_float_eq(sample_logsumexp(logits, 4), log(2.0), 1e-12);
    float none[3] = {-INFINITY, NAN, -INFINITY};
    cr_assert(isinf(sample_logsumexp(none, 3)) && sample_logsumexp(none, 3) < 0);
}

/* top_logprobs against a full sort, with ties, NaN and -inf, for k from 1 to V. */
static void check_top_logprobs(const float *logits, int32_t n_vocab) {
    sample_candidate *sorted = reference_sorted(logits, n_vocab);
    double lse = sample_logsumexp(logits, n_vocab);
    sample_logprob_entry *out = malloc(sizeof *out * (size_t)n_vocab);
    int ks[] = {1, 2, 5, 20, 100, n_vocab / 2, n_vocab};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        int k = ks[t] < n_vocab ? ks[t] : n_vocab;
        sample_top_logprobs(logits, n_vocab, lse, k, out);
        for (int j = 0; j < k; j++) {
            cr_assert_eq(out[j].id, sorted[j].id, "k %d, rank %d: id %d, expected %d", k, j, out[j].id, sorted[j].id);
            float expected = (float)((double)sorted[j].logit - lse);
            if (isnan(expected))
                cr_assert(isnan(out[j].logprob));
            else
                cr_assert_eq(out[j].logprob, expected, "k %d, rank %d", k, j);
        }
    }
    free(out);
    free(sorted);
}

Test(sample_logprobs, top_logprobs_match_a_full_sort) {
    enum { V = 3000 };
    float *logits = malloc(sizeof *logits * V);
    test_seed(21);
    /* a quarter-nat grid makes many ties */
    for (int i = 0; i < V; i++) logits[i] = roundf(test_normal(3.0) * 4.0f) / 4.0f;
    logits[17] = logits[2999] = NAN;
    logits[5] = logits[6] = -INFINITY;
    check_top_logprobs(logits, V);
    /* rising logits: every token enters the heap */
    for (int i = 0; i < V; i++) logits[i] = (float)i * 0.01f;
    check_top_logprobs(logits, V);
    /* NaN first, then all equal */
    logits[0] = NAN;
    for (int i = 1; i < V; i++) logits[i] = 1.0f;
    check_top_logprobs(logits, V);
    free(logits);
}

Test(sample_logprobs, top_logprobs_probabilities_sum_to_one_over_all) {
    enum { V = 500 };
    float logits[V];
    test_seed(5);
    for (int i = 0; i < V; i++) logits[i] = test_normal(2.0);
    sample_logprob_entry out[V];
    sample_top_logprobs(logits, V, sample_logsumexp(logits, V), V, out);
    double total = 0.0;
    for (int i = 0; i < V; i++) total += exp((double)out[i].logprob);
    cr_assert_float_eq(total, 1.0, 1e-5);
}

/* ---- building blocks ---------------------------------------------------------------- */

Test(sample_internals, exp4_is_within_float_rounding_of_exp) {
    double worst = 0.0;
    for (double x = -87.0; x <= 0.0; x += 1.0 / 1024.0 + 1e-7) {
        f32x4 v = {(float)x, (float)x * 0.5f, (float)x * 0.25f, (float)x * 0.125f};
        f32x4 e = exp4(v);
        for (int lane = 0; lane < 4; lane++) {
            double ref = exp((double)v[lane]);
            double rel = fabs((double)e[lane] - ref) / ref;
            if (rel > worst) worst = rel;
        }
    }
    cr_log_info("exp4: worst relative error %.3g", worst);
    cr_assert_lt(worst, 2e-7);
    f32x4 edge = {0.0f, -INFINITY, NAN, -100.0f};
    f32x4 e = exp4(edge);
    cr_assert_eq(e[0], 1.0f);
    cr_assert_eq(e[1], 0.0f);
    cr_assert_eq(e[2], 0.0f);
    cr_assert_eq(e[3], 0.0f);
}

Test(sample_internals, bins_in_the_exp_pass_match_cut_bin) {
    enum { N = 1000 };
    float x[N], w[N], block_mass[N / WEIGHT_BLOCK + 1];
    test_seed(8);
    for (int i = 0; i < N; i++) x[i] = test_normal(10.0);
    x[3] = NAN;
    x[4] = -INFINITY;
    float max = logits_max(x, N);
    static cut_bins bins;
    memset(&bins, 0, sizeof bins);
    bins.floor = max - 20.0f; /* tokens further down may be left out, four at a time */
    double total = weights_exp(w, x, N, max, 1.0f, block_mass, &bins);
    double expected[CUT_BINS] = {0.0}, sum = 0.0;
    for (int i = 0; i < N; i++) {
        expected[cut_bin(x[i], max)] += (double)w[i];
        sum += (double)w[i];
    }
    for (int b = 0; b < cut_bin(bins.floor, max); b++) {
        double got = bins.mass[0][b] + bins.mass[1][b] + bins.mass[2][b] + bins.mass[3][b];
        cr_assert_float_eq(got, expected[b], 1e-12, "bin %d", b);
    }
    cr_assert_float_eq(total, sum, 1e-6 * sum);
    cr_assert_eq(w[3], 0.0f);
    cr_assert_eq(w[4], 0.0f);
}

Test(sample_internals, block_draw_follows_the_weights) {
    enum { N = 100, STEPS = 1000000 }; /* three whole blocks and a tail of 4 */
    float w[N], block_mass[N / WEIGHT_BLOCK + 1];
    test_seed(9);
    for (int i = 0; i < N; i++) w[i] = i % 7 == 0 ? 0.0f : (float)test_uniform();
    for (int b = 32; b < 64; b++) w[b] = 0.0f; /* a block with no weight at all */
    double total = 0.0;
    int32_t n_blocks = (N + WEIGHT_BLOCK - 1) / WEIGHT_BLOCK;
    for (int32_t b = 0; b < n_blocks; b++) {
        block_mass[b] = 0.0f;
        for (int32_t i = b * WEIGHT_BLOCK; i < N && i < (b + 1) * WEIGHT_BLOCK; i++) block_mass[b] += w[i];
        total += (double)block_mass[b];
    }
    static int hits[N];
    memset(hits, 0, sizeof hits);
    /* u on an even grid: the share of the grid each index gets is its probability */
    for (int k = 0; k < STEPS; k++) hits[weights_pick(w, N, block_mass, total, (k + 0.5) / STEPS)]++;
    for (int i = 0; i < N; i++) {
        double expected = (double)w[i] / total;
        cr_assert_float_eq((double)hits[i] / STEPS, expected, 2e-6, "index %d: %d hits, p %.6f", i, hits[i], expected);
        if (w[i] == 0.0f) cr_assert_eq(hits[i], 0);
    }
    /* the very top of [0, 1) lands on the last index with weight */
    int32_t last = weights_pick(w, N, block_mass, total, 1.0 - 1.0 / 9007199254740992.0);
    cr_assert_eq(last, N - 1 - ((N - 1) % 7 == 0));
}

/* The top-p cut over the whole vocabulary against the walk down the sorted list, with
 * the same weights, on distributions from peaked to flat and tie-heavy. */
static void check_top_p_cut(const float *logits, int32_t n_vocab, float top_p, float min_p) {
    sample_state s;
    cr_assert_eq(sample_state_init(&s, n_vocab, 1), SP_OK);
    sample_params p = params_with(1.0f, 0, top_p, min_p, 0);
    float max = logits_max(logits, n_vocab);
    float floor = min_p > 0.0f ? max + logf(min_p) : -INFINITY;
    int32_t n = cut_top_p(&p, &s, logits, max, floor);

    sample_candidate *sorted = reference_sorted(logits, n_vocab);
    double total = 0.0; /* as cut_top_p added it up: the block masses in order */
    for (int32_t b = 0; b < (n_vocab + WEIGHT_BLOCK - 1) / WEIGHT_BLOCK; b++) total += (double)s._block_mass[b];
    double mass = 0.0;
    int32_t keep = n_vocab;
    for (int32_t j = 0; j < n_vocab; j++) {
        if (!(sorted[j].logit >= floor)) {
            keep = j;
            break;
        }
        mass += (double)s._weights[sorted[j].id];
        if (mass >= (double)top_p * total) {
            keep = j + 1;
            break;
        }
    }
    cr_assert_eq(n, keep, "top_p %g min_p %g: kept %d tokens, the sorted walk %d", top_p, min_p, n, keep);
    char *in = calloc((size_t)n_vocab, 1);
    for (int32_t j = 0; j < n; j++) in[s.candidates[j].id] = 1;
    for (int32_t j = 0; j < keep; j++) cr_assert(in[sorted[j].id], "rank %d (token %d) missing", j, sorted[j].id);
    free(in);
    free(sorted);
    sample_state_free(&s);
}

Test(sample_internals, top_p_cut_matches_the_sorted_walk) {
    float *logits = malloc(sizeof *logits * BIG_VOCAB);
    float top_ps[] = {0.05f, 0.5f, 0.9f, 0.95f, 0.999f};
    for (int shape = 0; shape < 4; shape++) {
        test_seed(100 + shape);
        for (int32_t i = 0; i < BIG_VOCAB; i++) {
            switch (shape) {
            case 0: logits[i] = test_normal(2.5); break;                       /* flat bulk */
            case 1: logits[i] = (float)(i % 7) * 0.01f; break;                 /* 7 values: one bin */
            case 2: logits[i] = roundf(test_normal(3.0) * 2.0f) / 2.0f; break; /* ties across bins */
            default: logits[i] = test_normal(1.0) - 40.0f; break;              /* bulk past 32 nats */
            }
        }
        if (shape != 1) lm_like_logits(logits, 50, 7 + shape); /* a few high tokens at the front */
        if (shape == 3) logits[60] = logits[61] = NAN;
        for (size_t t = 0; t < sizeof top_ps / sizeof top_ps[0]; t++) {
            check_top_p_cut(logits, BIG_VOCAB, top_ps[t], 0.0f);
            check_top_p_cut(logits, BIG_VOCAB, top_ps[t], 0.01f);
        }
    }
    /* The deepest a cut can end: one token of weight 1 and the rest just heavy enough
     * (about 2.2 (1 - top_p) / 2V each) for the cut to end among them, under a nat
     * above the bins cut_top_p leaves unfilled. */
    for (size_t t = 1; t < sizeof top_ps / sizeof top_ps[0]; t++) {
        double eps = (1.0 - (double)top_ps[t]) / (2.0 * BIG_VOCAB);
        test_seed(200 + t);
        for (int32_t i = 0; i < BIG_VOCAB; i++) logits[i] = (float)log(2.2 * eps) + test_normal(0.05);
        logits[BIG_VOCAB / 2] = 0.0f;
        check_top_p_cut(logits, BIG_VOCAB, top_ps[t], 0.0f);
    }
    free(logits);
}

Test(sample_internals, cut_by_mass_matches_the_sorted_walk) {
    enum { N = 3000 };
    sample_candidate *c = malloc(sizeof *c * N);
    float *w = malloc(sizeof *w * N);
    for (uint64_t seed = 1; seed <= 40; seed++) {
        test_seed(seed);
        int32_t n = 1 + (int32_t)(test_uniform() * (N - 1));
        for (int32_t i = 0; i < n; i++) {
            /* ids shuffled in steps; logits on a coarse grid for ties */
            int32_t id = (int32_t)((i * 7919) % N);
            c[i] = (sample_candidate){id, roundf(test_normal(2.0) * 3.0f) / 3.0f};
            w[id] = expf(c[i].logit);
        }
        double total = 0.0;
        for (int32_t i = 0; i < n; i++) total += (double)w[c[i].id];
        double target = test_uniform() * total;
        sample_candidate *sorted = malloc(sizeof *sorted * (size_t)n);
        memcpy(sorted, c, sizeof *c * (size_t)n);
        qsort(sorted, (size_t)n, sizeof *sorted, reference_rank_cmp);
        double mass = 0.0;
        int32_t keep = n;
        for (int32_t j = 0; j < n; j++) {
            mass += (double)w[sorted[j].id];
            if (mass >= target) {
                keep = j + 1;
                break;
            }
        }
        int32_t got = candidates_cut_by_mass(c, n, w, target);
        cr_assert_eq(got, keep, "seed %d, n %d: %d kept, expected %d", (int)seed, n, got, keep);
        qsort(c, (size_t)got, sizeof *c, reference_rank_cmp);
        for (int32_t j = 0; j < got; j++) cr_assert_eq(c[j].id, sorted[j].id);
        free(sorted);
    }
    free(c);
    free(w);
}

/* ---- sampling ------------------------------------------------------------------------ */

Test(sample_token, greedy_picks_the_largest_logit_lowest_id_on_ties) {
    float logits[6] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 6, 1), SP_OK);
    sample_params p = sample_params_default();
    p.temperature = 0.0f;
    cr_assert_eq(sample_token(&p, &s, logits), 1);
    sample_state_free(&s);
}

Test(sample_token, argmax_skips_nan_and_finds_the_first_maximum) {
    enum { V = 1000 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)(i % 10);
    logits[0] = NAN;
    logits[613] = logits[977] = 50.0f;
    cr_assert_eq(sample_argmax(logits, V), 613);
    logits[613] = NAN;
    cr_assert_eq(sample_argmax(logits, V), 977);
    for (int i = 0; i < V; i++) logits[i] = NAN;
    cr_assert_eq(sample_argmax(logits, V), 0);
    logits[998] = -INFINITY;
    cr_assert_eq(sample_argmax(logits, V), 998);
}

Test(sample_token, top_k_one_is_greedy) {
    float logits[10] = {0, 1, 2, 3, 9, 5, 6, 7, 8, 4};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 10, 99), SP_OK);
    sample_params p = sample_params_default();
    p.top_k = 1;
    for (int i = 0; i < 20; i++) cr_assert_eq(sample_token(&p, &s, logits), 4);
    sample_state_free(&s);
}

Test(sample_token, top_k_ties_keep_the_lower_ids) {
    enum { V = 100 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = i % 10 == 3 ? 2.0f : 1.0f; /* 10 tokens at 2, the rest tied at 1 */
    sample_params p = params_with(1.0f, 15, 1.0f, 0.0f, 12);
    sample_state s;
    cr_assert_eq(sample_state_init(&s, V, 12), SP_OK);
    for (int i = 0; i < 2000; i++) {
        int32_t id = sample_token(&p, &s, logits);
        cr_assert(id % 10 == 3 || id < 6, "token %d is not among the 15 best", id); /* ties: ids 0, 1, 2, 4, 5 */
    }
    sample_state_free(&s);
    check_frequencies(&p, logits, V, 50000, false);
}

Test(sample_token, top_p_and_min_p_cut_the_tail) {
    /* probabilities about 0.64, 0.24, 0.09, 0.03 */
    float logits[4] = {3.0f, 2.0f, 1.0f, 0.0f};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 4, 7), SP_OK);
    sample_params p = sample_params_default();
    p.top_p = 0.85f; /* keeps ids 0 and 1 */
    for (int i = 0; i < 200; i++) cr_assert_leq(sample_token(&p, &s, logits), 1);
    p = sample_params_default();
    p.min_p = 0.2f; /* keeps tokens with p >= 0.2 * 0.64: ids 0, 1 */
    for (int i = 0; i < 200; i++) cr_assert_leq(sample_token(&p, &s, logits), 1);
    sample_state_free(&s);
}

Test(sample_token, frequencies_without_a_cut) {
    enum { V = 200 };
    float logits[V];
    test_seed(31);
    for (int i = 0; i < V; i++) logits[i] = test_normal(2.0);
    sample_params p = params_with(0.7f, 0, 1.0f, 0.0f, 1);
    check_frequencies(&p, logits, V, 100000, false);
    p = params_with(1.6f, 0, 1.0f, 0.0f, 2);
    check_frequencies(&p, logits, V, 100000, false);
}

Test(sample_token, frequencies_with_top_k) {
    enum { V = 200 };
    float logits[V];
    test_seed(32);
    for (int i = 0; i < V; i++) logits[i] = test_normal(2.0);
    sample_params p = params_with(0.9f, 10, 1.0f, 0.0f, 3);
    check_frequencies(&p, logits, V, 100000, false);
    p = params_with(1.3f, 50, 0.9f, 0.02f, 4);
    check_frequencies(&p, logits, V, 100000, false);
}

Test(sample_token, frequencies_with_top_p) {
    enum { V = 200 };
    float logits[V];
    test_seed(33);
    for (int i = 0; i < V; i++) logits[i] = test_normal(2.0);
    sample_params p = params_with(1.0f, 0, 0.8f, 0.0f, 5);
    check_frequencies(&p, logits, V, 100000, false);
    p = params_with(0.5f, 0, 0.95f, 0.0f, 6);
    check_frequencies(&p, logits, V, 100000, false);
}

Test(sample_token, frequencies_with_min_p) {
    enum { V = 200 };
    float logits[V];
    test_seed(34);
    for (int i = 0; i < V; i++) logits[i] = test_normal(2.0);
    sample_params p = params_with(1.0f, 0, 1.0f, 0.1f, 7);
    check_frequencies(&p, logits, V, 100000, false);
    p = params_with(0.8f, 0, 0.9f, 0.05f, 8);
    check_frequencies(&p, logits, V, 100000, false);
}

Test(sample_token, frequencies_over_a_full_vocabulary) {
    float *logits = malloc(sizeof *logits * BIG_VOCAB);
    lm_like_logits(logits, BIG_VOCAB, 35);
    sample_params p = params_with(0.8f, 0, 0.95f, 0.0f, 9);
    check_frequencies(&p, logits, BIG_VOCAB, 4000, false);
    p = params_with(0.8f, 40, 1.0f, 0.0f, 10);
    check_frequencies(&p, logits, BIG_VOCAB, 4000, false);
    p = params_with(1.0f, 0, 1.0f, 0.0f, 11);
    check_frequencies(&p, logits, BIG_VOCAB, 4000, false);
    free(logits);
}

Test(sample_token, same_seed_same_tokens_whatever_the_scratch_held) {
    float *logits = malloc(sizeof *logits * BIG_VOCAB), *other = malloc(sizeof *other * BIG_VOCAB);
    lm_like_logits(logits, BIG_VOCAB, 36);
    test_seed(37);
    for (int32_t i = 0; i < BIG_VOCAB; i++) other[i] = test_normal(1.0); /* flat: fills the scratch */
    sample_params modes[] = {params_with(1.5f, 0, 1.0f, 0.0f, 1234), params_with(0.8f, 40, 1.0f, 0.0f, 5),
                             params_with(0.8f, 0, 0.95f, 0.0f, 6), params_with(0.8f, 0, 1.0f, 0.05f, 7),
                             params_with(1.2f, 100, 0.9f, 0.01f, 8)};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        sample_state fresh, used;
        cr_assert_eq(sample_state_init(&fresh, BIG_VOCAB, modes[m].seed), SP_OK);
        cr_assert_eq(sample_state_init(&used, BIG_VOCAB, 999), SP_OK);
        for (size_t o = 0; o < sizeof modes / sizeof modes[0]; o++) (void)sample_token(&modes[o], &used, other);
        used.rng = modes[m].seed;
        int distinct = 0;
        int32_t first = -1;
        for (int i = 0; i < 32; i++) {
            int32_t a = sample_token(&modes[m], &fresh, logits), b = sample_token(&modes[m], &used, logits);
            cr_assert_eq(a, b, "mode %d, draw %d: %d vs %d", (int)m, i, a, b);
            if (i == 0) first = a;
            distinct += a != first;
        }
        cr_assert_gt(distinct, 0, "mode %d drew one token 32 times", (int)m);
        sample_state_free(&fresh);
        sample_state_free(&used);
    }
    free(logits);
    free(other);
}

Test(sample_token, nan_logits_are_never_drawn) {
    enum { V = 300 };
    float logits[V];
    test_seed(38);
    for (int i = 0; i < V; i++) logits[i] = i % 3 == 0 ? NAN : test_normal(1.0);
    sample_params modes[] = {params_with(1.0f, 0, 1.0f, 0.0f, 1), params_with(1.0f, 250, 1.0f, 0.0f, 2),
                             params_with(1.0f, 0, 0.99f, 0.0f, 3), params_with(1.0f, 0, 1.0f, 0.01f, 4),
                             params_with(1.0f, 290, 0.999f, 0.0f, 5)};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        sample_state s;
        cr_assert_eq(sample_state_init(&s, V, modes[m].seed), SP_OK);
        for (int i = 0; i < 3000; i++) {
            int32_t id = sample_token(&modes[m], &s, logits);
            cr_assert(id % 3 != 0, "mode %d drew NaN token %d", (int)m, id);
        }
        sample_state_free(&s);
    }
}

Test(sample_token, nothing_finite_or_a_tiny_temperature_falls_back_to_argmax) {
    float logits[5] = {NAN, -INFINITY, NAN, -INFINITY, NAN};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 5, 1), SP_OK);
    sample_params p = params_with(1.0f, 0, 0.9f, 0.0f, 1);
    cr_assert_eq(sample_token(&p, &s, logits), 1);
    float ordinary[5] = {0.0f, 1.0f, 3.0f, 2.0f, 3.0f};
    p = params_with(1e-39f, 0, 1.0f, 0.0f, 1); /* 1 / temperature overflows */
    for (int i = 0; i < 10; i++) cr_assert_eq(sample_token(&p, &s, ordinary), 2);
    sample_state_free(&s);
}

Test(sample_token, vocabulary_not_a_multiple_of_the_block) {
    enum { V = 37 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = -5.0f;
    logits[36] = 5.0f; /* in the tail past the only whole block */
    sample_params p = params_with(0.5f, 0, 1.0f, 0.0f, 3);
    sample_state s;
    cr_assert_eq(sample_state_init(&s, V, 3), SP_OK);
    int hits = 0;
    for (int i = 0; i < 1000; i++) hits += sample_token(&p, &s, logits) == 36;
    cr_assert_geq(hits, 995);
    sample_state_free(&s);
    check_frequencies(&p, logits, V, 20000, false);
}

/* Counter-based draws (what speculative decoding relies on): one generator per position,
 * derived from (seed, position), still samples the target distribution, and a position's
 * draw does not depend on the draws before it. */
Test(sample_token, counter_based_draws_follow_the_distribution) {
    float *logits = malloc(sizeof *logits * BIG_VOCAB);
    cr_assert(logits);
    for (int32_t i = 0; i < BIG_VOCAB; i++) logits[i] = (float)(-0.0004 * i) + (i % 97 == 0 ? 3.0f : 0.0f);
    sample_params p = params_with(0.9f, 0, 0.95f, 0, 77);
    check_frequencies(&p, logits, BIG_VOCAB, 20000, true);
    p = params_with(1.0f, 50, 1.0f, 0, 78);
    check_frequencies(&p, logits, BIG_VOCAB, 20000, true);
    free(logits);
}

Test(sample_token, a_position_s_draw_is_a_pure_function_of_seed_and_position) {
    cr_assert_eq(sample_rng_at(5, 100), sample_rng_at(5, 100));
    cr_assert_neq(sample_rng_at(5, 100), sample_rng_at(5, 101));
    cr_assert_neq(sample_rng_at(5, 100), sample_rng_at(6, 100));
    /* neighbouring seeds (n > 1 choices use seed + i) give unrelated streams */
    int same_low_bit = 0;
    for (int64_t pos = 0; pos < 1000; pos++)
        same_low_bit += (sample_rng_at(9, pos) & 1) == (sample_rng_at(10, pos) & 1);
    cr_assert(same_low_bit > 400 && same_low_bit < 600, "%d of 1000 agree", same_low_bit);
}

Test(sample_allowed, clears_exactly_the_tokens_outside_the_mask) {
    enum { V = 70 }; /* a partial last word */
    float logits[V];
    uint32_t allowed[3] = {0xFFFFFFFFu, 0x00000005u, 0x20u};
    for (int i = 0; i < V; i++) logits[i] = (float)i;
    sample_apply_allowed(allowed, V, logits);
    for (int i = 0; i < V; i++) {
        bool in = (allowed[i / 32] >> (i % 32)) & 1;
        if (in)
            cr_assert_eq(logits[i], (float)i, "token %d kept", i);
        else
            cr_assert(isinf(logits[i]) && logits[i] < 0, "token %d cleared", i);
    }
    /* a masked draw only picks allowed tokens, greedy or sampled */
    sample_state s;
    cr_assert_eq(sample_state_init(&s, V, 5), SP_OK);
    sample_params p = sample_params_default();
    p.temperature = 1.5f;
    for (int k = 0; k < 200; k++) {
        float l[V];
        for (int i = 0; i < V; i++) l[i] = (float)((i * 7919 + k * 104729) % 97) / 10.0f;
        sample_apply_allowed(allowed, V, l);
        int32_t t = sample_token(&p, &s, l);
        cr_assert((allowed[t / 32] >> (t % 32)) & 1, "drew %d", t);
    }
    sample_state_free(&s);
}

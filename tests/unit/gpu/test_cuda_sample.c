/* test_cuda_sample.c: dev_sample on the CUDA backend against the CPU backend, whose
 * dev_sample is sample/sample.c itself. Built always; where no usable GPU is present
 * (or the build has no CUDA backend) every test says so in one line and passes.
 *
 * Logits reach a backend as a one-row F32 weight (F32 on both backends, so bit for bit)
 * that one step token gathers into activations (dev_embed).
 *
 * What must be identical: greedy tokens (ties, NaN, infinities), the top_logprobs ids,
 * tokens under the penalties, bias and EOG mask, the generator states, and every draw
 * with a single survivor. The top-k, min-p and no-cut draws walk their tokens in the
 * CPU's order, so they match too except where u lands within float rounding of a
 * boundary (at most one row in a test). Top-p draws walk the kept tokens in id order
 * (see cuda_sample.cu), so they are checked by their kept set and their frequencies.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "tests/unit/gpu/gpu_test.h"

static double uniform01(void) { /* [0, 1) */
    return (double)(gpu_test_next() >> 11) / 9007199254740992.0;
}

/* A backend and the one-block KV pool a step needs. */
typedef struct side {
    dev_backend *dev;
    dev_kv *kv;
} side;

static void side_open(side *s, sp_device kind) {
    dev_options o = {.kind = kind, .n_threads = 2};
    cr_assert_eq(dev_create(&o, &s->dev), SP_OK, "%s", sp_last_error());
    dev_kv_shape shape = {.n_layers = 1, .n_blocks = 1, .block_size = 16, .n_kv_heads = 1, .head_dim = 64};
    cr_assert_eq(dev_kv_create(s->dev, &shape, &s->kv), SP_OK, "%s", sp_last_error());
}

static void side_close(side *s) {
    dev_kv_destroy(s->dev, s->kv);
    dev_destroy(s->dev);
}

/* Device logits holding host[0..n): host is borrowed until side_close. */
static float *side_logits(side *s, const float *host, int64_t n) {
    dev_tensor table;
    cr_assert_eq(dev_weight_init(s->dev, &table, QUANT_F32, n, 1, host, sizeof(float) * (size_t)n), SP_OK, "%s",
                 sp_last_error());
    void *act;
    cr_assert_eq(dev_arena_alloc(s->dev, sizeof(float) * (size_t)n, &act), SP_OK, "%s", sp_last_error());
    int32_t token = 0, pos = 0, seq = 0, seq_len = 1, block = 0;
    dev_step step = {1, &token, &pos, &seq, 1, &seq_len, &block, 1, 0, NULL, 0, NULL};
    const dev_step *device_step;
    cr_assert_eq(dev_step_begin(s->dev, &step, 1, s->kv, &device_step), SP_OK, "%s", sp_last_error());
    dev_embed(s->dev, act, &table, device_step);
    return act;
}

/* dev_sample of rows over logits (n_rows, V) on a fresh backend of kind. */
static void sample_on(sp_device kind, const float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                      const dev_sample_row *rows, dev_sample_result *out) {
    side s;
    side_open(&s, kind);
    float *d = side_logits(&s, logits, (int64_t)n_rows * vocab->n_vocab);
    cr_assert_eq(dev_sample(s.dev, d, n_rows, vocab, rows, out), SP_OK, "%s", sp_last_error());
    side_close(&s);
}

static void sample_both(const float *logits, int32_t n_rows, const dev_sample_vocab *vocab, const dev_sample_row *rows,
                        dev_sample_result *cpu, dev_sample_result *gpu) {
    memset(cpu, 0, sizeof *cpu * (size_t)n_rows);
    memset(gpu, 0, sizeof *gpu * (size_t)n_rows);
    sample_on(SP_DEVICE_CPU, logits, n_rows, vocab, rows, cpu);
    sample_on(SP_DEVICE_CUDA, logits, n_rows, vocab, rows, gpu);
}

static bool close_or_both_nan(float a, float b, float tol) {
    return (isnan(a) && isnan(b)) || a == b || fabsf(a - b) <= tol;
}

static dev_sample_row row_of(const sample_params *p, int top_logprobs, uint64_t state) {
    return (dev_sample_row){.params = p, .top_logprobs = top_logprobs, .rng = state};
}

/* ---- greedy ---- */

Test(cuda_sample, greedy_matches_the_cpu_with_ties_nan_and_infinities) {
    skip_without_gpu();
    enum { R = 8 };
    const int32_t sizes[3] = {16, 1000, 50003};
    for (int v = 0; v < 3; v++) {
        const int32_t n_vocab = sizes[v];
        float *l = malloc(sizeof *l * (size_t)R * (size_t)n_vocab);
        for (int r = 0; r < R; r++)
            for (int32_t i = 0; i < n_vocab; i++) {
                float x = (float)(uniform01() * 10 - 5);
                if (r == 1) x = (float)(int)(uniform01() * 4); /* thousands of ties at the max */
                if (r == 2) x = NAN;
                if (r == 3) x = -INFINITY;
                if (r == 4 && i % 3 == 0) x = NAN;
                if (r == 5 && i == n_vocab / 2) x = INFINITY;
                if (r == 6) x = i % 2 ? -INFINITY : NAN;
                if (r == 7) x = i >= n_vocab - 2 ? 100.0f : i % 5 == 0 ? -0.0f : 0.0f; /* the last two tie */
                l[(size_t)r * (size_t)n_vocab + (size_t)i] = x;
            }
        sample_params p = sample_params_default();
        p.temperature = 0.0f;
        dev_sample_row rows[R];
        for (int r = 0; r < R; r++) rows[r] = row_of(&p, r % 2 ? 0 : -1, 777u + (uint64_t)r);
        dev_sample_vocab vocab = {n_vocab, NULL, 0};
        dev_sample_result cpu[R], gpu[R];
        sample_both(l, R, &vocab, rows, cpu, gpu);
        for (int r = 0; r < R; r++) {
            cr_expect_eq(gpu[r].token, cpu[r].token, "V %d row %d: gpu %d, cpu %d", n_vocab, r, gpu[r].token,
                         cpu[r].token);
            cr_expect_eq(gpu[r].rng, rows[r].rng, "V %d row %d: a greedy row draws nothing", n_vocab, r);
            cr_expect(close_or_both_nan(gpu[r].logprob, cpu[r].logprob, 1e-4f), "V %d row %d: logprob %g, cpu %g",
                      n_vocab, r, (double)gpu[r].logprob, (double)cpu[r].logprob);
        }
        free(l);
    }
}

/* ---- log-probabilities ---- */

Test(cuda_sample, top_logprobs_match_the_cpu) {
    skip_without_gpu();
    enum { R = 6, V = 50000 };
    float *l = malloc(sizeof *l * R * V);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < V; i++) {
            float x = (float)(uniform01() * 20 - 10);
            if (r == 1) x = (float)(int)(uniform01() * 8) - 4; /* ties across the 20 best */
            if (r == 2 && i % 7 == 0) x = NAN;
            if (r == 3 && i % 2) x = -INFINITY;
            if (r == 4) x = i < V / 2 ? NAN : -INFINITY;
            l[(size_t)r * V + (size_t)i] = x;
        }
    sample_params p = sample_params_default();
    p.temperature = 0.0f;
    const int tops[R] = {20, 20, 20, 7, 3, 0};
    dev_sample_row rows[R];
    for (int r = 0; r < R; r++) rows[r] = row_of(&p, tops[r], 1);
    dev_sample_vocab vocab = {V, NULL, 0};
    dev_sample_result cpu[R], gpu[R];
    sample_both(l, R, &vocab, rows, cpu, gpu);
    for (int r = 0; r < R; r++) {
        cr_expect_eq(gpu[r].token, cpu[r].token, "row %d: gpu %d, cpu %d", r, gpu[r].token, cpu[r].token);
        cr_expect(close_or_both_nan(gpu[r].logprob, cpu[r].logprob, 1e-4f), "row %d: logprob %g, cpu %g", r,
                  (double)gpu[r].logprob, (double)cpu[r].logprob);
        for (int k = 0; k < tops[r]; k++) {
            cr_expect_eq(gpu[r].top[k].id, cpu[r].top[k].id, "row %d, alternative %d: gpu %d, cpu %d", r, k,
                         gpu[r].top[k].id, cpu[r].top[k].id);
            cr_expect(close_or_both_nan(gpu[r].top[k].logprob, cpu[r].top[k].logprob, 1e-4f),
                      "row %d, alternative %d: %g, cpu %g", r, k, (double)gpu[r].top[k].logprob,
                      (double)cpu[r].top[k].logprob);
        }
    }
    free(l);
}

/* ---- penalties, logit bias, the EOG mask ---- */

Test(cuda_sample, penalties_bias_and_eog_mask_match_the_cpu) {
    skip_without_gpu();
    enum { R = 6, V = 2000 };
    float *l = malloc(sizeof *l * R * V);
    for (int i = 0; i < R * V; i++) l[i] = (float)(uniform01() * 6 - 3);
    for (int r = 0; r < R; r++) { /* 5 leads, then 17: the mask and penalties decide */
        l[r * V + 5] = 9.0f;
        l[r * V + 17] = 8.5f;
        l[r * V + 40] = -2.0f;
    }
    int32_t eog[3] = {5, 17, 5};
    int32_t prompt[6] = {17, 40, 17, 3, 99, 40}, generated[7] = {5, 5, 99, 17, 5, 1999, 0};
    sample_logit_bias bias[4] = {{40, 12.0f}, {1999, -3.0f}, {40, -0.75f}, {0, 5.5f}};
    sample_params ps[R];
    for (int r = 0; r < R; r++) {
        ps[r] = sample_params_default();
        ps[r].temperature = 0.0f;
    }
    ps[0].repetition_penalty = 1.3f;
    ps[1].presence_penalty = 1.5f;
    ps[1].frequency_penalty = 0.7f;
    ps[2].logit_bias = bias;
    ps[2].n_logit_bias = 4;
    ps[3] = ps[2];
    ps[3].repetition_penalty = 0.6f;
    ps[3].presence_penalty = -2.0f;
    ps[3].frequency_penalty = 2.0f;
    ps[4].repetition_penalty = 2.0f;
    ps[4].frequency_penalty = 1.0f;
    ps[5] = ps[3];
    dev_sample_row rows[R];
    for (int r = 0; r < R; r++)
        rows[r] = (dev_sample_row){.params = &ps[r],
                                   .prompt = prompt,
                                   .n_prompt = 6,
                                   .generated = generated,
                                   .n_generated = 7,
                                   .mask_eog = r % 2 == 0,
                                   .top_logprobs = r == 5 ? -1 : 5,
                                   .rng = 9};
    dev_sample_vocab vocab = {V, eog, 3};
    dev_sample_result cpu[R], gpu[R];
    sample_both(l, R, &vocab, rows, cpu, gpu);
    for (int r = 0; r < R; r++) {
        cr_expect_eq(gpu[r].token, cpu[r].token, "row %d: gpu %d, cpu %d", r, gpu[r].token, cpu[r].token);
        cr_expect(close_or_both_nan(gpu[r].logprob, cpu[r].logprob, 1e-4f),
                  "row %d: logprob of the raw logit %g, cpu %g", r, (double)gpu[r].logprob, (double)cpu[r].logprob);
    }
    free(l);
}

/* ---- draws ---- */

/* R rows of one random row of V logits, each with its own generator state; tokens
 * compared with the CPU's: all equal (exact) or all but one (at most one u within
 * rounding of a boundary). */
static void check_draws(const char *what, const sample_params *p, int32_t n_vocab, bool exact) {
    enum { R = 40 };
    float *l = malloc(sizeof *l * (size_t)R * (size_t)n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) l[i] = (float)(uniform01() * uniform01() * 16 - 4);
    for (int r = 1; r < R; r++) memcpy(l + (size_t)r * (size_t)n_vocab, l, sizeof *l * (size_t)n_vocab);
    dev_sample_row rows[R];
    for (int r = 0; r < R; r++) rows[r] = row_of(p, -1, 0x1234567ull * (uint64_t)(r + 1));
    dev_sample_vocab vocab = {n_vocab, NULL, 0};
    dev_sample_result cpu[R], gpu[R];
    sample_both(l, R, &vocab, rows, cpu, gpu);
    int same = 0;
    for (int r = 0; r < R; r++) {
        same += gpu[r].token == cpu[r].token;
        cr_expect_eq(gpu[r].rng, cpu[r].rng, "%s, row %d: the generator after the draw", what, r);
    }
    cr_expect(same >= (exact ? R : R - 1), "%s: %d of %d tokens equal the cpu's", what, same, R);
    free(l);
}

Test(cuda_sample, draws_with_one_survivor_match_the_cpu) {
    skip_without_gpu();
    sample_params p = sample_params_default();
    p.temperature = 0.8f;
    p.top_k = 1;
    check_draws("top-k 1", &p, 50000, true);
    p = sample_params_default();
    p.temperature = 0.8f;
    p.top_p = 1e-6f;
    check_draws("top-p 1e-6", &p, 50000, true);
    p = sample_params_default();
    p.temperature = 0.8f;
    p.min_p = 1.0f;
    check_draws("min-p 1", &p, 50000, true);
    p = sample_params_default();
    p.top_k = 3000; /* past what the GPU selects: sample/sample.c on the host */
    check_draws("top-k 3000", &p, 20000, true);
}

Test(cuda_sample, top_k_min_p_and_plain_draws_match_the_cpu) {
    skip_without_gpu();
    sample_params p = sample_params_default();
    p.temperature = 1.2f;
    p.top_k = 40;
    check_draws("top-k 40", &p, 32000, false);
    p.top_p = 0.8f;
    p.min_p = 0.02f;
    check_draws("top-k 40, top-p 0.8, min-p 0.02", &p, 32000, false);
    p = sample_params_default();
    p.top_k = 2048;
    p.top_p = 0.95f;
    check_draws("top-k 2048, top-p 0.95", &p, 32000, false);
    p = sample_params_default();
    p.temperature = 0.8f;
    p.min_p = 0.05f;
    check_draws("min-p 0.05", &p, 32000, false);
    p.min_p = 0.0f;
    check_draws("no cut", &p, 32000, false);
}

/* 64 tokens: 5 and 50 lead, then six ties at ids 3, 10, 20, 33, 47, 60; top-p ends among
 * the ties (the mass before the third is below 0.553 of the total, before the fourth
 * above), so exactly 5, 50, 3, 10 and 20 are kept, whatever the backend. At temperature
 * 100 they are nearly equally likely: 400 draws see every one of them. */
Test(cuda_sample, top_p_cut_inside_ties_keeps_the_first_ids) {
    skip_without_gpu();
    enum { R = 400, V = 64 };
    float *l = malloc(sizeof *l * R * V);
    for (int i = 0; i < V; i++) l[i] = -1.0f + 0.001f * (float)i;
    const int ties[6] = {3, 10, 20, 33, 47, 60};
    for (int t = 0; t < 6; t++) l[ties[t]] = 2.0f;
    l[5] = l[50] = 3.0f;
    for (int r = 1; r < R; r++) memcpy(l + r * V, l, sizeof *l * V);
    sample_params p = sample_params_default();
    p.temperature = 100.0f;
    p.top_p = 0.553f;
    dev_sample_row rows[R];
    for (int r = 0; r < R; r++) rows[r] = row_of(&p, -1, 0xabcdefull * (uint64_t)(r + 1));
    dev_sample_vocab vocab = {V, NULL, 0};
    dev_sample_result *cpu = malloc(sizeof *cpu * R), *gpu = malloc(sizeof *gpu * R);
    sample_both(l, R, &vocab, rows, cpu, gpu);
    const bool kept[V] = {[3] = true, [5] = true, [10] = true, [20] = true, [50] = true};
    int seen[2][V] = {{0}};
    for (int r = 0; r < R; r++) {
        seen[0][cpu[r].token]++;
        seen[1][gpu[r].token]++;
    }
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < V; i++)
            cr_expect(kept[i] ? seen[side][i] > 0 : seen[side][i] == 0, "%s: token %d drawn %d times (kept: %d)",
                      side ? "gpu" : "cpu", i, seen[side][i], kept[i]);
    free(l), free(cpu), free(gpu);
}

/* The expected probabilities of a top-p draw at temperature t: the shortest rank-order
 * prefix whose mass (at temperature 1) reaches top_p, renormalized at t. Asserts that no
 * boundary is within margin of top_p, where rounding could move the cut. */
static void expected_top_p(const float *l, int n, float top_p, float t, double *q) {
    int order[64];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by logit, descending, ties by id */
        for (int j = i; j > 0 && l[order[j]] > l[order[j - 1]]; j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    const double max = l[order[0]];
    double total = 0.0, mass = 0.0, sum = 0.0;
    for (int i = 0; i < n; i++) total += exp(l[i] - max);
    for (int i = 0; i < n; i++) q[i] = 0.0;
    for (int j = 0; j < n && mass < top_p * total; j++) {
        mass += exp(l[order[j]] - max);
        cr_assert(fabs(mass / total - top_p) > 1e-3, "the test's cut is too close to top_p");
        q[order[j]] = exp((l[order[j]] - max) / t);
        sum += q[order[j]];
    }
    for (int i = 0; i < n; i++) q[i] /= sum;
}

Test(cuda_sample, draws_follow_the_distribution) {
    skip_without_gpu();
    enum { V = 16, R = 20, CALLS = 200, N = R * CALLS };
    static const float logits[V] = {-1.0f, 1.2f,  2.0f, -3.0f, 0.3f, 1.5f,  -0.5f, 0.0f,
                                    0.8f,  -2.0f, 1.0f, -4.0f, 0.5f, -0.2f, -1.5f, -5.0f};
    float *l = malloc(sizeof *l * R * V);
    for (int r = 0; r < R; r++) memcpy(l + r * V, logits, sizeof logits);
    sample_params p = sample_params_default();
    p.temperature = 0.7f;
    p.top_p = 0.9f;
    double q[V];
    expected_top_p(logits, V, p.top_p, p.temperature, q);
    dev_sample_vocab vocab = {V, NULL, 0};
    const sp_device kinds[2] = {SP_DEVICE_CPU, SP_DEVICE_CUDA};
    for (int k = 0; k < 2; k++) {
        side s;
        side_open(&s, kinds[k]);
        float *d = side_logits(&s, l, R * V);
        int count[V] = {0};
        uint64_t state = 42;
        for (int c = 0; c < CALLS; c++) {
            dev_sample_row rows[R];
            dev_sample_result res[R];
            for (int r = 0; r < R; r++) rows[r] = row_of(&p, -1, state += 0x9E3779B97F4A7C15ull);
            cr_assert_eq(dev_sample(s.dev, d, R, &vocab, rows, res), SP_OK, "%s", sp_last_error());
            for (int r = 0; r < R; r++) count[res[r].token]++;
        }
        for (int i = 0; i < V; i++) {
            const double f = (double)count[i] / N, sd = sqrt(q[i] * (1.0 - q[i]) / N);
            cr_expect(fabs(f - q[i]) <= 4.5 * sd + 1e-3, "%s: token %d drawn %.4f of the time, expected %.4f",
                      k ? "gpu" : "cpu", i, f, q[i]);
        }
        side_close(&s);
    }
    free(l);
}

/* A row draws the same token alone and as the 7th of 20 rows whose logits and settings
 * (greedy, top-k, min-p, penalties, log-probabilities) all differ. */
Test(cuda_sample, a_row_draws_the_same_alone_or_in_a_batch) {
    skip_without_gpu();
    enum { R = 20, AT = 6, V = 8000, STATES = 24 };
    float *l = malloc(sizeof *l * R * V);
    for (int i = 0; i < R * V; i++) l[i] = (float)(uniform01() * uniform01() * 14 - 4);
    sample_params target = sample_params_default();
    target.temperature = 0.7f;
    target.top_p = 0.9f;
    int32_t generated[4] = {1, 2, 2, 7};
    sample_params others[4];
    for (int o = 0; o < 4; o++) others[o] = sample_params_default();
    others[0].temperature = 0.0f;
    others[1].top_k = 50;
    others[2].min_p = 0.1f;
    others[3].repetition_penalty = 1.2f;
    others[3].presence_penalty = 0.5f;
    side alone, batch;
    side_open(&alone, SP_DEVICE_CUDA);
    side_open(&batch, SP_DEVICE_CUDA);
    float *d_alone = side_logits(&alone, l + AT * V, V);
    dev_sample_vocab vocab = {V, NULL, 0};
    for (int s = 0; s < STATES; s++) {
        const uint64_t state = 0x5151ull * (uint64_t)(s + 1);
        dev_sample_row row = row_of(&target, s % 2 ? 5 : -1, state);
        dev_sample_result one;
        cr_assert_eq(dev_sample(alone.dev, d_alone, 1, &vocab, &row, &one), SP_OK, "%s", sp_last_error());
        dev_sample_row rows[R];
        for (int r = 0; r < R; r++) {
            rows[r] = row_of(&others[r % 4], r % 3 ? -1 : 20, state ^ (uint64_t)r);
            rows[r].generated = generated;
            rows[r].n_generated = 4;
        }
        rows[AT] = row;
        dev_sample_result res[R];
        float *d_batch = side_logits(&batch, l, R * V); /* fresh: the penalties edit their rows */
        cr_assert_eq(dev_sample(batch.dev, d_batch, R, &vocab, rows, res), SP_OK, "%s", sp_last_error());
        cr_expect_eq(res[AT].token, one.token, "state %d: alone %d, in the batch %d", s, one.token, res[AT].token);
        cr_expect_eq(res[AT].rng, one.rng, "state %d: the generator after the draw", s);
        cr_expect(res[AT].logprob == one.logprob, "state %d: logprob %g alone, %g in the batch", s, (double)one.logprob,
                  (double)res[AT].logprob);
    }
    side_close(&alone);
    side_close(&batch);
    free(l);
}

/* ---- grammar masks ---- */

/* A grammar row's bitset goes up and the kernel masks (no host sampling): greedy, top-k and
 * min-p draws equal the CPU's; a top-p draw (the same distribution, walked in another
 * order: cuda_sample.cuh) stays inside the mask. */
Test(cuda_sample, allowed_masks_match_the_cpu) {
    skip_without_gpu();
    enum { R = 4, V = 5000 };
    float *l = malloc(sizeof *l * (size_t)R * V);
    for (int i = 0; i < R * V; i++) l[i] = (float)(uniform01() * 10 - 5);
    uint32_t mask[R][(V + 31) / 32];
    memset(mask, 0, sizeof mask);
    for (int r = 0; r < R; r++)
        for (int i = r; i < V; i += 7 + r) mask[r][i / 32] |= 1u << (i % 32);
    sample_params p[R];
    for (int r = 0; r < R; r++) p[r] = sample_params_default();
    p[0].temperature = 0.0f; /* greedy */
    p[1].temperature = 0.9f;
    p[1].top_k = 40;
    p[2].temperature = 0.9f;
    p[2].min_p = 0.05f;
    p[3].temperature = 0.9f;
    p[3].top_p = 0.9f;
    dev_sample_row rows[R];
    for (int r = 0; r < R; r++) {
        rows[r] = row_of(&p[r], 2, 31u + (uint64_t)r);
        rows[r].allowed = mask[r];
    }
    dev_sample_vocab vocab = {V, NULL, 0};
    dev_sample_result cpu[R], gpu[R];
    sample_both(l, R, &vocab, rows, cpu, gpu);
    for (int r = 0; r < R; r++) {
        if (r < 3) cr_expect_eq(gpu[r].token, cpu[r].token, "row %d", r);
        cr_expect((mask[r][gpu[r].token / 32] >> (gpu[r].token % 32)) & 1, "row %d: a token outside its mask", r);
        /* the chosen token's log-probability is under the raw logits (the mask does not touch them) */
        const float *row = l + (size_t)r * V;
        const float lse = row[cpu[r].token] - cpu[r].logprob;
        cr_expect(close_or_both_nan(gpu[r].logprob, row[gpu[r].token] - lse, 1e-4f), "row %d: logprob %g", r,
                  (double)gpu[r].logprob);
    }
    free(l);
}

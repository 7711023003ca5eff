/* test_kv_quant_quality.c: what a quantized KV cache (--kv-type q8_0, q4_0) costs on the
 * default model. A fixed English text is run teacher-forced in chunks (every row's
 * logits kept) once with F16 pools and once with each quantized type; the figures are
 * the mean |delta| of the log-probability each run gives the text's next token, and
 * greedy agreement: the share of positions where both runs' most likely token is the
 * same. Both are logged (docs/benchmarks.md quotes them) and bounded. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "tests/unit/testdata.h"
#include "tokenizer/tokenizer.h"

enum { CHUNK = 64, BLOCK = 16, MAX_TOKENS = 512 };

static const char TEXT[] =
    "The lighthouse stood at the end of a long stone pier, and for a hundred years its keepers had climbed the "
    "same spiral stairs every evening to light the lamp. The last keeper was a woman named Ada, who kept a "
    "logbook of every ship that passed. In winter the storms came from the north, and the waves broke over the "
    "pier so hard that the whole tower shook. Ada would sit by the window with a cup of tea and watch the beam "
    "sweep across the water, counting the seconds between each flash. One night a small fishing boat lost its "
    "engine near the rocks. The crew could see the light, but the current was pulling them toward the shore. "
    "Ada saw their flare, picked up the radio, and called the harbour station in the town. Then she went down "
    "to the pier with a rope and a lantern. The wind was so strong she had to hold on to the railing with both "
    "hands. When the rescue boat arrived an hour later, the fishermen were already safe on the pier, wrapped in "
    "blankets from the keeper's cottage. The next morning the storm had passed. The sea was calm and grey, and "
    "the gulls were back on the rocks. Ada wrote one more line in her logbook: four men, one boat, all home. "
    "Years later, when the lighthouse was automated and the keepers were no longer needed, the town turned the "
    "cottage into a small museum. Her logbook lies open in a glass case by the window, at the page of that "
    "night, and children who visit still ask to climb the stairs and see the lamp.";

typedef struct quality {
    double mean_abs_dlogprob; /* over positions 1..n-1: |log p_q(next) - log p_f16(next)| */
    double agreement;         /* share of positions whose argmax is the same */
    int positions;
} quality;

/* log-softmax of row at index `token`, and the row's argmax. */
static double log_prob(const float *row, int32_t n_vocab, int32_t token, int32_t *argmax) {
    float max = row[0];
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (row[i] > max) max = row[i], best = i;
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)row[i] - max);
    *argmax = best;
    return (double)row[token] - max - log(sum);
}

/* Every position's logits (n, V) for tokens ids with pools of type `type`. */
static float *run_text(model *m, sp_kv_type type, const int32_t *ids, int32_t n) {
    const int32_t n_vocab = model_get_hparams(m)->n_vocab;
    dev_kv *kv;
    cr_assert_eq(model_kv_create_typed(m, MAX_TOKENS / BLOCK, BLOCK, type, &kv), SP_OK, "%s", sp_last_error());
    int32_t table[MAX_TOKENS / BLOCK];
    for (int i = 0; i < MAX_TOKENS / BLOCK; i++) table[i] = MAX_TOKENS / BLOCK - 1 - i; /* scattered */
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    cr_assert_not_null(logits);
    int32_t pos[CHUNK], seq[CHUNK] = {0}, rows[CHUNK];
    for (int32_t start = 0; start < n; start += CHUNK) {
        const int32_t len = n - start < CHUNK ? n - start : CHUNK;
        for (int32_t i = 0; i < len; i++) pos[i] = start + i, rows[i] = i;
        int32_t seq_len = start + len;
        dev_step step = {len, ids + start, pos, seq, 1, &seq_len, table, MAX_TOKENS / BLOCK, len, rows, 0, NULL};
        cr_assert_eq(model_forward(m, kv, &step, logits + (size_t)start * (size_t)n_vocab), SP_OK, "%s",
                     sp_last_error());
    }
    dev_kv_destroy(model_device(m), kv);
    return logits;
}

static quality compare(const float *ref, const float *got, const int32_t *ids, int32_t n, int32_t n_vocab) {
    quality q = {0, 0, 0};
    int agree = 0;
    for (int32_t t = 0; t + 1 < n; t++) {
        int32_t a_ref, a_got;
        const double lp_ref = log_prob(ref + (size_t)t * (size_t)n_vocab, n_vocab, ids[t + 1], &a_ref);
        const double lp_got = log_prob(got + (size_t)t * (size_t)n_vocab, n_vocab, ids[t + 1], &a_got);
        q.mean_abs_dlogprob += fabs(lp_got - lp_ref);
        agree += a_ref == a_got;
        q.positions++;
    }
    q.mean_abs_dlogprob /= q.positions;
    q.agreement = (double)agree / q.positions;
    return q;
}

Test(kv_quant_quality, q8_0_and_q4_0_against_f16_on_the_default_model, .timeout = 300) {
    const char *path = testdata_default_model();
    TESTDATA_REQUIRE(path);
    dev_backend *dev;
    dev_options opts = {.kind = SP_DEVICE_CPU};
    cr_assert_eq(dev_create(&opts, &dev), SP_OK);
    model_options mo = {.max_batch_tokens = CHUNK};
    model *m;
    cr_assert_eq(model_load(path, dev, &mo, &m), SP_OK, "%s", sp_last_error());
    int32_t *ids;
    size_t n_ids;
    cr_assert_eq(tok_encode(model_vocab(m), TEXT, strlen(TEXT), false, false, &ids, &n_ids), SP_OK);
    cr_assert(n_ids > 200 && n_ids <= MAX_TOKENS, "%zu tokens", n_ids);
    const int32_t n_vocab = model_get_hparams(m)->n_vocab;
    float *f16 = run_text(m, SP_KV_F16, ids, (int32_t)n_ids);
    /* the bounds leave room above what this model measured (docs/benchmarks.md) */
    const struct {
        sp_kv_type type;
        double max_dlogprob, min_agreement;
    } cases[] = {{SP_KV_Q8_0, 0.12, 0.92}, {SP_KV_Q4_0, 0.6, 0.65}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *got = run_text(m, cases[c].type, ids, (int32_t)n_ids);
        quality q = compare(f16, got, ids, (int32_t)n_ids, n_vocab);
        cr_log_info("kv %s against f16 on %s, %d positions: mean |dlogprob| %.4f, greedy agreement %.4f",
                    sp_kv_type_name(cases[c].type), path, q.positions, q.mean_abs_dlogprob, q.agreement);
        cr_expect_lt(q.mean_abs_dlogprob, cases[c].max_dlogprob, "%s", sp_kv_type_name(cases[c].type));
        cr_expect_gt(q.agreement, cases[c].min_agreement, "%s", sp_kv_type_name(cases[c].type));
        free(got);
    }
    free(f16);
    free(ids);
    model_destroy(m);
    dev_destroy(dev);
}

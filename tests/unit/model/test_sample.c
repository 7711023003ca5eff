/* test_sample.c: token selection. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "model/sample.h"

Test(sample, greedy_picks_the_largest_logit_lowest_id_on_ties) {
    float logits[6] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 6, 1), SP_OK);
    sample_params p = sample_params_default();
    p.temperature = 0.0f;
    cr_assert_eq(sample_token(&p, &s, logits), 1);
    sample_state_free(&s);
}

Test(sample, same_seed_gives_same_tokens) {
    float logits[50];
    for (int i = 0; i < 50; i++) logits[i] = sinf((float)i) * 3.0f;
    sample_params p = sample_params_default();
    p.temperature = 1.5f;
    int32_t first[64];
    for (int run = 0; run < 2; run++) {
        sample_state s;
        cr_assert_eq(sample_state_init(&s, 50, 1234), SP_OK);
        for (int i = 0; i < 64; i++) {
            int32_t id = sample_token(&p, &s, logits);
            if (run == 0)
                first[i] = id;
            else
                cr_assert_eq(id, first[i], "draw %d differs", i);
        }
        sample_state_free(&s);
    }
}

Test(sample, top_k_one_is_greedy) {
    float logits[10] = {0, 1, 2, 3, 9, 5, 6, 7, 8, 4};
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 10, 99), SP_OK);
    sample_params p = sample_params_default();
    p.top_k = 1;
    for (int i = 0; i < 20; i++) cr_assert_eq(sample_token(&p, &s, logits), 4);
    sample_state_free(&s);
}

Test(sample, top_p_and_min_p_cut_the_tail) {
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

Test(sample, frequencies_follow_the_distribution) {
    float logits[2] = {0.0f, logf(3.0f)}; /* 1:3 */
    sample_state s;
    cr_assert_eq(sample_state_init(&s, 2, 42), SP_OK);
    sample_params p = sample_params_default();
    int count1 = 0;
    for (int i = 0; i < 20000; i++) count1 += sample_token(&p, &s, logits) == 1;
    cr_assert(count1 > 14500 && count1 < 15500, "token 1 drawn %d of 20000 times (expected ~15000)", count1);
    sample_state_free(&s);
}

Test(sample, logprob_is_log_softmax) {
    float logits[3] = {1.0f, 2.0f, 3.0f};
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    cr_assert_float_eq(sample_logprob(logits, 3, 0), (float)(1.0 - log(z)), 1e-6);
    cr_assert_float_eq(sample_logprob(logits, 3, 2), (float)(3.0 - log(z)), 1e-6);
}

Test(sample, validation_names_the_field) {
    sample_params p = sample_params_default();
    p.top_p = 1.5f;
    cr_assert_eq(sample_params_validate(&p), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "top_p") != NULL);
    p = sample_params_default();
    p.temperature = -1.0f;
    cr_assert_eq(sample_params_validate(&p), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "temperature") != NULL);
}

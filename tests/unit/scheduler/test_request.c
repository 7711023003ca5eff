/* test_request.c: sched_request on its own: what creation copies and refuses, the
 * reference count, the output before submission, notify and cancel. */
#include <criterion/criterion.h>
#include <string.h>

#include "scheduler/sched_internal.h"

static sched_request_params params_basic(const int32_t *prompt, int32_t n) {
    return (sched_request_params){
        .prompt = prompt,
        .n_prompt = n,
        .max_tokens = 8,
        .top_logprobs = -1,
        .sampling = sample_params_default(),
    };
}

Test(sched_request, creation_copies_prompt_stops_and_bias) {
    int32_t prompt[3] = {1, 2, 3};
    char stop0[] = "END", stop1[] = "\n\n";
    const char *stops[2] = {stop0, stop1};
    sample_logit_bias bias[2] = {{5, 1.5f}, {7, -100.0f}};
    sched_request_params p = params_basic(prompt, 3);
    p.stop = stops;
    p.n_stop = 2;
    p.sampling.logit_bias = bias;
    p.sampling.n_logit_bias = 2;
    sched_request *r;
    cr_assert_eq(sched_request_create(&p, &r), SP_OK, "%s", sp_last_error());
    /* the caller's buffers may change or go away */
    prompt[0] = 99;
    stop0[0] = 'X';
    bias[0].id = 0;
    cr_assert_neq(r->params.prompt, prompt);
    cr_assert_eq(r->params.prompt[0], 1);
    cr_assert_eq(r->params.n_prompt, 3);
    cr_assert_eq(r->params.n_stop, 2);
    cr_assert_str_eq(r->params.stop[0], "END");
    cr_assert_str_eq(r->params.stop[1], "\n\n");
    cr_assert_eq(r->stop_lens[1], 2);
    cr_assert_eq(r->params.sampling.logit_bias[0].id, 5);
    cr_assert_eq(r->params.sampling.logit_bias[1].bias, -100.0f);
    sched_request_release(r);
}

Test(sched_request, a_cache_salt_and_a_tenant_choose_the_chain_root) {
    int32_t prompt[1] = {1};
    sched_request_params p = params_basic(prompt, 1);
    sched_request *plain, *a, *b, *salted_a, *salted_a2, *salted_b;
    cr_assert_eq(sched_request_create(&p, &plain), SP_OK);
    p.tenant = 11;
    cr_assert_eq(sched_request_create(&p, &a), SP_OK);
    p.tenant = 22;
    cr_assert_eq(sched_request_create(&p, &b), SP_OK);
    char salt[] = "user-1";
    p.cache_salt = salt;
    p.cache_salt_len = 6;
    cr_assert_eq(sched_request_create(&p, &salted_b), SP_OK);
    p.tenant = 11;
    cr_assert_eq(sched_request_create(&p, &salted_a), SP_OK);
    cr_assert_eq(sched_request_create(&p, &salted_a2), SP_OK);
    salt[0] = 'X'; /* only its hash is kept */
    cr_assert_null(salted_a->params.cache_salt);

    /* scope global: the salt alone */
    cr_assert_eq(sched__request_root(plain, false), KV_CHAIN_ROOT);
    cr_assert_eq(sched__request_root(a, false), KV_CHAIN_ROOT, "keys share without a salt");
    cr_assert_eq(sched__request_root(salted_a, false), kv_chain_root("user-1", 6));
    cr_assert_eq(sched__request_root(salted_a, false), sched__request_root(salted_b, false));
    /* scope key: the tenant too (none: nothing to scope) */
    cr_assert_eq(sched__request_root(plain, true), KV_CHAIN_ROOT);
    cr_assert_neq(sched__request_root(a, true), KV_CHAIN_ROOT);
    cr_assert_neq(sched__request_root(a, true), sched__request_root(b, true));
    cr_assert_neq(sched__request_root(a, true), sched__request_root(salted_a, true));
    cr_assert_neq(sched__request_root(salted_a, true), sched__request_root(salted_b, true));
    cr_assert_eq(sched__request_root(salted_a, true), sched__request_root(salted_a2, true));
    /* the suffix cache: the tenant, salted */
    cr_assert_eq(a->suffix_tenant, 11);
    cr_assert_neq(salted_a->suffix_tenant, 11);
    cr_assert_neq(salted_a->suffix_tenant, salted_b->suffix_tenant);
    cr_assert_eq(salted_a->suffix_tenant, salted_a2->suffix_tenant);

    p.cache_salt_len = SCHED_MAX_CACHE_SALT_BYTES + 1;
    sched_request *r = (sched_request *)1;
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);
    cr_assert_null(r);
    sched_request *all[] = {plain, a, b, salted_a, salted_a2, salted_b};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sched_request_release(all[i]);
}

Test(sched_request, refuses_bad_parameters) {
    int32_t prompt[1] = {1};
    sched_request *r = (sched_request *)1;
    sched_request_params p = params_basic(prompt, 1);
    p.max_tokens = 0;
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);
    cr_assert_null(r);
    cr_assert(strstr(sp_last_error(), "max_tokens"), "%s", sp_last_error());

    p = params_basic(prompt, 1);
    p.min_tokens = 9;
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "min_tokens"), "%s", sp_last_error());

    p = params_basic(prompt, 1);
    const char *empty[1] = {""};
    p.stop = empty;
    p.n_stop = 1;
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "stop[0]"), "%s", sp_last_error());

    p = params_basic(prompt, 1);
    const char *many[SCHED_MAX_STOP + 1];
    for (int i = 0; i <= SCHED_MAX_STOP; i++) many[i] = "x";
    p.stop = many;
    p.n_stop = SCHED_MAX_STOP + 1;
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);

    p = params_basic(prompt, 1);
    char long_stop[SCHED_MAX_STOP_BYTES + 2];
    memset(long_stop, 'a', sizeof long_stop - 1);
    long_stop[sizeof long_stop - 1] = '\0';
    const char *too_long[1] = {long_stop};
    p.stop = too_long;
    p.n_stop = 1;
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);

    p = params_basic(prompt, 1);
    p.top_logprobs = SCHED_MAX_TOP_LOGPROBS + 1;
    cr_assert_eq(sched_request_create(&p, &r), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "top_logprobs"), "%s", sp_last_error());
}

Test(sched_request, output_starts_empty) {
    int32_t prompt[4] = {1, 2, 3, 4};
    sched_request_params p = params_basic(prompt, 4);
    p.top_logprobs = 3;
    sched_request *r;
    cr_assert_eq(sched_request_create(&p, &r), SP_OK);
    sched_request_lock(r);
    const sched_output *o = sched_request_output(r);
    cr_assert_eq(o->prompt_tokens, 4);
    cr_assert_eq(o->top_logprobs, 3);
    cr_assert_eq(o->n_tokens, 0);
    cr_assert_eq(o->text_len, 0);
    cr_assert(!o->done);
    cr_assert_eq(o->finish, SCHED_FINISH_NONE);
    cr_assert_gt(o->timings.arrival, 0);
    sched_request_unlock(r);
    sched_request_release(r);
}

Test(sched_request, reference_count_keeps_it_alive) {
    int32_t prompt[1] = {1};
    sched_request_params p = params_basic(prompt, 1);
    sched_request *r;
    cr_assert_eq(sched_request_create(&p, &r), SP_OK);
    sched_request_retain(r);
    sched_request_retain(r);
    cr_assert_eq(atomic_load(&r->refs), 3);
    sched_request_release(r);
    sched_request_release(r);
    cr_assert_eq(atomic_load(&r->refs), 1);
    cr_assert_eq(r->params.prompt[0], 1);
    sched_request_release(r); /* frees it: ASan checks the rest */
}

static void count_notify(void *arg) {
    (*(int *)arg)++;
}

Test(sched_request, notify_and_cancel_before_submission) {
    int32_t prompt[1] = {1};
    sched_request_params p = params_basic(prompt, 1);
    sched_request *r;
    cr_assert_eq(sched_request_create(&p, &r), SP_OK);
    int calls = 0;
    sched_request_set_notify(r, count_notify, &calls);
    cr_assert_eq(r->notify, count_notify);
    sched_request_set_notify(r, NULL, &calls);
    cr_assert_null(r->notify);
    cr_assert_null(r->notify_arg);
    sched_request_cancel(r); /* no scheduler yet: only the flag */
    sched_request_cancel(r);
    cr_assert(atomic_load(&r->cancel));
    cr_assert_eq(calls, 0);
    sched_request_release(r);
}

Test(sched_request, text_grows_under_the_lock) {
    int32_t prompt[1] = {1};
    sched_request_params p = params_basic(prompt, 1);
    p.max_tokens = 1;
    sched_request *r;
    cr_assert_eq(sched_request_create(&p, &r), SP_OK);
    cr_assert_eq(sched__request_prepare(r, 16), SP_OK);
    cr_assert_eq(r->kv.cap, 1);
    cr_assert_str_eq(r->out.text, "");
    sched_request_lock(r);
    for (int i = 0; i < 100; i++) {
        cr_assert_eq(sched__output_reserve_text(r, 10), SP_OK);
        memcpy(r->out.text + r->out.text_len, "0123456789", 10);
        r->out.text_len += 10;
        r->out.text[r->out.text_len] = '\0';
    }
    sched_request_unlock(r);
    cr_assert_eq(strlen(r->out.text), 1000);
    cr_assert_geq(r->text_cap, 1001);
    /* a second prepare (an earlier submit refused) starts over without leaking */
    cr_assert_eq(sched__request_prepare(r, 4), SP_OK);
    cr_assert_eq(r->out.text_len, 0);
    cr_assert_str_eq(r->out.text, "");
    cr_assert_eq(r->kv.cap, 1);
    sched_request_release(r);
}

/* test_queue.c: sched_submit's validation and bounded queue (by requests and by
 * prompt tokens, all or none for the n choices of one request, shutdown), the counters
 * behind it, and the configuration checks of sched_create. Uses the tiny real model
 * for its vocabulary and KV shape; the scheduler thread is mostly not started, so
 * what is queued stays queued. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "scheduler/sched_internal.h"
#include "tests/unit/testdata.h"

typedef struct queue_env {
    dev_backend *dev;
    model *m;
} queue_env;

static void env_open(queue_env *e) {
    char path[512];
    testdata_path(path, sizeof path, "models/stories260K.gguf");
    TESTDATA_REQUIRE(path);
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = 1};
    cr_assert_eq(dev_create(&opts, &e->dev), SP_OK);
    model_options mo = {.max_batch_tokens = 64};
    cr_assert_eq(model_load(path, e->dev, &mo, &e->m), SP_OK, "%s", sp_last_error());
}

static void env_close(queue_env *e) {
    model_destroy(e->m);
    dev_destroy(e->dev);
}

static sched_config small_config(void) {
    sched_config c = sched_config_default();
    c.kv_cache_mb = 1; /* 102 blocks of 16 tokens for this model */
    c.max_batch_tokens = 64;
    c.max_prefill_tokens = 32;
    c.max_batch_size = 8;
    return c;
}

static sched_request *make_request(int32_t n_prompt, int32_t max_tokens) {
    int32_t prompt[2048];
    cr_assert_leq(n_prompt, 2048);
    for (int32_t i = 0; i < n_prompt; i++) prompt[i] = i == 0 ? 1 : 300 + i % 200;
    sched_request_params p = {
        .prompt = prompt,
        .n_prompt = n_prompt,
        .max_tokens = max_tokens,
        .top_logprobs = -1,
        .sampling = sample_params_default(),
    };
    p.sampling.temperature = 0;
    sched_request *r;
    cr_assert_eq(sched_request_create(&p, &r), SP_OK, "%s", sp_last_error());
    return r;
}

static void wait_done(sched_request *r, double timeout_s) {
    double until = sched_now() + timeout_s;
    for (;;) {
        sched_request_lock(r);
        bool done = sched_request_output(r)->done;
        sched_request_unlock(r);
        if (done) return;
        cr_assert_lt(sched_now(), until, "request not done within %g s", timeout_s);
        usleep(1000);
    }
}

Test(sched_queue, rejects_when_full_by_count) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    c.queue_max_requests = 3;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK, "%s", sp_last_error());
    sched_request *r[4];
    for (int i = 0; i < 4; i++) r[i] = make_request(5, 4);
    for (int i = 0; i < 3; i++) cr_assert_eq(sched_submit(s, &r[i], 1), SP_OK, "%s", sp_last_error());
    cr_assert_eq(sched_submit(s, &r[3], 1), SP_ERR_FULL);
    cr_assert(strstr(sp_last_error(), "queue_max_requests is 3"), "%s", sp_last_error());
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.queued, 3);
    cr_assert_eq(st.queued_tokens, 15);
    cr_assert_eq(st.submitted, 3);
    cr_assert_eq(st.rejected_queue_requests, 1);
    cr_assert_eq(st.rejected_queue_tokens, 0);
    sched_destroy(s);
    for (int i = 0; i < 4; i++) sched_request_release(r[i]);
    env_close(&e);
}

Test(sched_queue, rejects_when_full_by_tokens) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    c.queue_max_tokens = 20;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request *a = make_request(8, 4), *b = make_request(8, 4), *d = make_request(8, 4),
                  *small = make_request(4, 4);
    cr_assert_eq(sched_submit(s, &a, 1), SP_OK);
    cr_assert_eq(sched_submit(s, &b, 1), SP_OK);
    cr_assert_eq(sched_submit(s, &d, 1), SP_ERR_FULL);
    cr_assert(strstr(sp_last_error(), "queue_max_tokens is 20"), "%s", sp_last_error());
    cr_assert_eq(sched_submit(s, &small, 1), SP_OK, "16 + 4 tokens fit");
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.queued, 3);
    cr_assert_eq(st.queued_tokens, 20);
    cr_assert_eq(st.rejected_queue_tokens, 1);
    sched_destroy(s);
    sched_request_release(a);
    sched_request_release(b);
    sched_request_release(d);
    sched_request_release(small);
    env_close(&e);
}

Test(sched_queue, all_or_none_for_n_requests) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    c.queue_max_requests = 4;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request *first[3], *pair[2];
    for (int i = 0; i < 3; i++) first[i] = make_request(5, 4);
    for (int i = 0; i < 2; i++) pair[i] = make_request(5, 4);
    cr_assert_eq(sched_submit(s, first, 3), SP_OK);
    cr_assert_eq(sched_submit(s, pair, 2), SP_ERR_FULL, "3 + 2 > 4");
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.queued, 3, "neither of the pair was queued");
    cr_assert_eq(st.rejected_queue_requests, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(pair[i]->state, SCHED_SEQ_NEW);
        cr_assert_eq(atomic_load(&pair[i]->refs), 1, "no reference taken");
    }
    cr_assert_eq(sched_submit(s, pair, 1), SP_OK, "one of them still fits");
    /* a batch with one invalid request is refused whole */
    sched_request *mixed[2] = {make_request(5, 4), make_request(0, 4)};
    cr_assert_eq(sched_submit(s, mixed, 2), SP_ERR_INVALID_ARG);
    cr_assert_eq(mixed[0]->state, SCHED_SEQ_NEW);
    sched_destroy(s);
    for (int i = 0; i < 3; i++) sched_request_release(first[i]);
    for (int i = 0; i < 2; i++) {
        sched_request_release(pair[i]);
        sched_request_release(mixed[i]);
    }
    env_close(&e);
}

/* The turns sched_submit hands out (policy.c's fair share): a request's sequences take
 * consecutive turns from the latest turn admitted, so a later request's first sequence
 * comes right after the turn being served, and once turns have been admitted, new
 * arrivals start behind them (a many-sequence request is never starved). */
Test(sched_queue, submit_hands_out_turns_from_the_latest_admitted) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request *big[4], *later[2];
    for (int i = 0; i < 4; i++) big[i] = make_request(5, 4);
    cr_assert_eq(sched_submit(s, big, 4), SP_OK);
    for (int i = 0; i < 4; i++) cr_expect_eq(big[i]->turn, i);
    later[0] = make_request(5, 4);
    cr_assert_eq(sched_submit(s, later, 1), SP_OK);
    cr_expect_eq(later[0]->turn, 0, "the turn being served");
    cr_expect(sched__policy_before(SP_POLICY_FCFS, later[0], big[1]), "before the big request's second");
    atomic_store(&s->queue.turn_admitted, 3); /* as if the big request's turns up to 3 were admitted */
    later[1] = make_request(5, 4);
    cr_assert_eq(sched_submit(s, &later[1], 1), SP_OK);
    cr_expect_eq(later[1]->turn, 3);
    cr_expect(sched__policy_before(SP_POLICY_FCFS, big[3], later[1]), "an older sequence of the same turn first");
    sched_destroy(s);
    for (int i = 0; i < 4; i++) sched_request_release(big[i]);
    for (int i = 0; i < 2; i++) sched_request_release(later[i]);
    env_close(&e);
}

Test(sched_queue, validates_prompt_and_context) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    c.max_seq_len = 256;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request *empty = make_request(0, 4);
    cr_assert_eq(sched_submit(s, &empty, 1), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "empty"), "%s", sp_last_error());

    int32_t bad_ids[2] = {1, 512};
    sched_request_params p = {
        .prompt = bad_ids, .n_prompt = 2, .max_tokens = 4, .top_logprobs = -1, .sampling = sample_params_default()};
    sched_request *bad;
    cr_assert_eq(sched_request_create(&p, &bad), SP_OK);
    cr_assert_eq(sched_submit(s, &bad, 1), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "512"), "%s", sp_last_error());

    sched_request *too_long = make_request(200, 100);
    cr_assert_eq(sched_submit(s, &too_long, 1), SP_ERR_RANGE);
    cr_assert_str_eq(
        sp_last_error(),
        "this model's maximum context length is 256 tokens; the prompt has 200 tokens and max_tokens is 100");
    sched_request *fits = make_request(200, 56);
    cr_assert_eq(sched_submit(s, &fits, 1), SP_OK, "%s", sp_last_error());

    sample_logit_bias bias = {600, 1.0f};
    p.prompt = (int32_t[]){1, 2};
    p.sampling.logit_bias = &bias;
    p.sampling.n_logit_bias = 1;
    sched_request *bad_bias;
    cr_assert_eq(sched_request_create(&p, &bad_bias), SP_OK);
    cr_assert_eq(sched_submit(s, &bad_bias, 1), SP_ERR_INVALID_ARG, "logit_bias id beyond the vocabulary");

    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.rejected_invalid, 4);
    cr_assert_eq(st.submitted, 1);
    sched_destroy(s);
    sched_request_release(empty);
    sched_request_release(bad);
    sched_request_release(too_long);
    sched_request_release(fits);
    sched_request_release(bad_bias);
    env_close(&e);
}

Test(sched_queue, context_shrinks_to_what_the_kv_pool_holds) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config(); /* the model's 2048-token context, a 1632-token pool */
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.kv_blocks_total, 102);
    cr_assert_eq(sched_get_config(s)->max_seq_len, 1632, "one sequence can never outgrow the pool");
    sched_request *r = make_request(10, 1700);
    cr_assert_eq(sched_submit(s, &r, 1), SP_ERR_RANGE);
    cr_assert(strstr(sp_last_error(), "maximum context length is 1632 tokens"), "%s", sp_last_error());
    sched_destroy(s);
    sched_request_release(r);
    env_close(&e);
}

Test(sched_queue, refuses_after_shutdown_begins) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request *r = make_request(5, 4);
    sched_begin_shutdown(s);
    cr_assert_eq(sched_submit(s, &r, 1), SP_ERR_UNAVAILABLE);
    cr_assert_str_eq(sp_last_error(), "the server is shutting down");
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.rejected_shutdown, 1);
    sched_destroy(s);
    sched_request_release(r);
    env_close(&e);
}

Test(sched_queue, destroy_ends_queued_requests) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request *r[2] = {make_request(5, 4), make_request(6, 4)};
    cr_assert_eq(sched_submit(s, r, 2), SP_OK);
    sched_destroy(s); /* never started */
    for (int i = 0; i < 2; i++) {
        const sched_output *o = sched_request_output(r[i]);
        cr_assert(o->done);
        cr_assert_eq(o->finish, SCHED_FINISH_ERROR);
        cr_assert_eq(o->error, SP_ERR_UNAVAILABLE);
        cr_assert_str_eq(o->error_message, "the server is shutting down");
        cr_assert_eq(atomic_load(&r[i]->refs), 1, "the scheduler's reference is gone");
        sched_request_release(r[i]);
    }
    env_close(&e);
}

Test(sched_queue, admission_lowers_the_counters) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request *r[3] = {make_request(5, 3), make_request(7, 3), make_request(9, 3)};
    cr_assert_eq(sched_submit(s, r, 3), SP_OK);
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.queued, 3);
    cr_assert_eq(st.queued_tokens, 21);
    cr_assert_eq(sched_start(s), SP_OK);
    for (int i = 0; i < 3; i++) wait_done(r[i], 10);
    sched_get_stats(s, &st);
    cr_assert_eq(st.queued, 0);
    cr_assert_eq(st.queued_tokens, 0);
    cr_assert_eq(st.finished, 3);
    cr_assert_eq(st.generated_tokens, 9);
    cr_assert_eq(st.prompt_tokens, 21);
    sched_destroy(s);
    for (int i = 0; i < 3; i++) sched_request_release(r[i]);
    env_close(&e);
}

Test(sched_config, defaults_and_validation) {
    sched_config c = sched_config_default();
    cr_assert_eq(c.kv_cache_mb, 512);
    cr_assert_eq(c.block_size, 16);
    cr_assert_eq(c.max_batch_size, 64);
    cr_assert_eq(c.max_batch_tokens, 512);
    cr_assert_eq(c.max_prefill_tokens, 256);
    cr_assert_eq(c.queue_max_requests, 4096);
    cr_assert_eq(c.queue_max_tokens, 4000000);
    cr_assert_eq(c.policy, SP_POLICY_FCFS);
    cr_assert_eq(c.max_seq_len, 0);
    cr_assert_eq(sched_config_validate(&c), SP_OK);
    c.max_prefill_tokens = 1024;
    cr_assert_eq(sched_config_validate(&c), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "max_prefill_tokens"), "%s", sp_last_error());
    c = sched_config_default();
    c.kv_watermark = 1.0;
    cr_assert_eq(sched_config_validate(&c), SP_ERR_INVALID_ARG);
    c = sched_config_default();
    c.block_size = 0;
    cr_assert_eq(sched_config_validate(&c), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "block_size"), "%s", sp_last_error());
    c = sched_config_default(); /* a decode row for every running sequence must fit a step */
    c.max_batch_tokens = c.max_batch_size - 1;
    c.max_prefill_tokens = 16;
    cr_assert_eq(sched_config_validate(&c), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "max_batch_tokens"), "%s", sp_last_error());
}

Test(sched_config, batch_beyond_the_model_is_refused) {
    queue_env e;
    env_open(&e);
    sched_config c = small_config();
    c.max_batch_tokens = 128; /* the model was loaded for 64 */
    sched *s = (sched *)1;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_ERR_INVALID_ARG);
    cr_assert_null(s);
    cr_assert(strstr(sp_last_error(), "max_batch_tokens 128"), "%s", sp_last_error());
    env_close(&e);
}

/* test_tick.c: the scheduler thread and its tick with the tiny real model on the CPU
 * backend: outputs equal driving the model directly, a sequence's tokens do not depend
 * on what runs beside it, on prefill chunking or on preemption; cancel, timeouts,
 * finishes (length, end-of-generation, stop strings, min_tokens), logprobs, shutdown
 * with work in flight, the priority policy and the idle heartbeat. */
#include "tests/unit/scheduler/tick_harness.h"

Test(sched_tick, greedy_output_equals_driving_the_model_directly) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n_prompt = make_prompt(&e, "Once upon a time, there was a little girl", 0, prompt, 64);
    enum { N = 40, BLOCKS = 8, BLOCK = 16 };

    /* the reference: one sequence straight through model_forward, as cli_session does */
    int32_t want[N];
    {
        dev_kv *kv;
        cr_assert_eq(model_kv_create(e.m, BLOCKS, BLOCK, &kv), SP_OK);
        int32_t table[BLOCKS], pos[64], seq[64] = {0};
        for (int b = 0; b < BLOCKS; b++) table[b] = b;
        float *logits = malloc(sizeof *logits * (size_t)e.n_vocab);
        for (int i = 0; i < n_prompt; i++) pos[i] = i;
        int32_t seq_len = n_prompt, last = n_prompt - 1;
        dev_step step = {n_prompt, prompt, pos, seq, 1, &seq_len, table, BLOCKS, 1, &last, 0, NULL};
        cr_assert_eq(model_forward(e.m, kv, &step, logits), SP_OK, "%s", sp_last_error());
        for (int t = 0; t < N; t++) {
            want[t] = sample_argmax(logits, e.n_vocab);
            int32_t p1 = n_prompt + t, z = 0;
            seq_len = p1 + 1;
            dev_step dec = {1, &want[t], &p1, seq, 1, &seq_len, table, BLOCKS, 1, &z, 0, NULL};
            cr_assert_eq(model_forward(e.m, kv, &dec, logits), SP_OK, "%s", sp_last_error());
        }
        free(logits);
        dev_kv_destroy(e.dev, kv);
    }
    char want_text[4096];
    size_t want_len = 0;
    tok_decoder d;
    tok_decoder_init(&d, false);
    d.at_start = false;
    for (int t = 0; t < N; t++) want_len += tok_decoder_push(e.vocab, &d, want[t], want_text + want_len, 256);
    want_len += tok_decoder_flush(&d, want_text + want_len, 256);
    want_text[want_len] = '\0';

    sched_config c = tick_config();
    sched_request_params p = base_params(prompt, n_prompt, N);
    result got;
    sched_stats st;
    run_all(&e, &c, &p, 1, &got, &st);
    cr_assert_eq(got.finish, SCHED_FINISH_LENGTH);
    cr_assert_eq(got.n_tokens, N);
    cr_assert_eq(got.completion_tokens, N);
    cr_assert_eq(got.prefilled, n_prompt);
    for (int t = 0; t < N; t++) cr_assert_eq(got.ids[t], want[t], "token %d: %d vs %d", t, got.ids[t], want[t]);
    cr_assert_str_eq(got.text, want_text);
    cr_log_info("greedy: %s", got.text);
    cr_assert_eq(st.kv_blocks_used, 0);
    cr_assert_eq(st.finished, 1);
    cr_assert_eq(st.generated_tokens, N);
    cr_assert_eq(st.prompt_tokens, n_prompt);
    env_close(&e);
}

enum { MIX_N = 32 };

/* 32 different requests: prompts, seeds, and a few with penalties and logprobs. */
static void mixed_params(tick_env *e, int32_t (*prompts)[64], sched_request_params *p, int32_t max_tokens) {
    static const char *openers[4] = {"Once upon a time", "The little dog", "Lily wanted to", "One day, Tom"};
    for (int i = 0; i < MIX_N; i++) {
        int32_t n = make_prompt(e, openers[i % 4], i % 9, prompts[i], 64);
        p[i] = base_params(prompts[i], n, max_tokens - (i % 5));
        p[i].sampling.temperature = 0.8f;
        p[i].sampling.seed = 1000 + (uint64_t)i;
        if (i % 3 == 1) p[i].sampling.top_p = 0.9f;
        if (i % 4 == 2) p[i].sampling.frequency_penalty = 0.5f;
        if (i % 6 == 5) p[i].top_logprobs = 2;
    }
}

Test(sched_tick, same_seed_gives_the_same_tokens_alone_or_among_31_others, .timeout = 60) {
    tick_env e;
    env_open(&e, 1);
    static int32_t prompts[MIX_N][64];
    sched_request_params p[MIX_N];
    mixed_params(&e, prompts, p, 48);
    static result together[MIX_N], alone[MIX_N];
    sched_stats st_together, st_alone;
    sched_config c = tick_config();
    run_all(&e, &c, p, MIX_N, together, &st_together);
    c.max_batch_size = 1; /* one sequence at a time: each runs alone */
    run_all(&e, &c, p, MIX_N, alone, &st_alone);
    for (int i = 0; i < MIX_N; i++) {
        char what[32];
        snprintf(what, sizeof what, "request %d", i);
        assert_same_tokens(&together[i], &alone[i], what);
        cr_assert_eq(together[i].finish, SCHED_FINISH_LENGTH);
    }
    cr_log_info("32 requests: %lld ticks batched, %lld alone", (long long)st_together.ticks, (long long)st_alone.ticks);
    cr_assert_lt(st_together.ticks * 4, st_alone.ticks, "the batch ran together");
    cr_assert_eq(st_together.kv_blocks_used, 0);
    env_close(&e);
}

Test(sched_tick, chunked_prefill_gives_the_same_tokens) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[128];
    int32_t n = make_prompt(&e, "Once upon a time, there was a big red ball. The ball liked to roll and play.", 90,
                            prompt, 128);
    cr_assert_gt(n, 100);
    sched_request_params p = base_params(prompt, n, 32);
    p.sampling.temperature = 0.8f;
    p.sampling.seed = 5;
    result whole, chunked;
    sched_stats st_whole, st_chunked;
    sched_config c = tick_config();
    c.max_prefill_tokens = TICK_MODEL_BATCH; /* the prompt in one step */
    run_all(&e, &c, &p, 1, &whole, &st_whole);
    c.max_prefill_tokens = 7;
    run_all(&e, &c, &p, 1, &chunked, &st_chunked);
    assert_same_tokens(&whole, &chunked, "chunked");
    cr_assert_eq(chunked.prefilled, n);
    cr_assert_eq(st_whole.ticks, 32, "one prefill step, then 31 decode steps");
    cr_assert_eq(st_chunked.ticks, (n + 6) / 7 + 31);
    env_close(&e);
}

/* A pool too small for all sequences at once (102 blocks): every request must still
 * complete with the tokens it gets alone, under both policies. */
static void check_preemption(sp_policy policy) {
    tick_env e;
    env_open(&e, 1);
    enum { N = 16 };
    static int32_t prompts[N][64];
    sched_request_params p[N];
    for (int i = 0; i < N; i++) {
        int32_t n = make_prompt(&e, "The cat sat", i, prompts[i], 64);
        p[i] = base_params(prompts[i], n, 120 + 7 * i); /* 9 to 15 blocks each: ~190 in all */
        p[i].sampling.temperature = 0.8f;
        p[i].sampling.seed = 77 + (uint64_t)i;
        p[i].priority = i % 3;
        if (i % 2) p[i].top_logprobs = 1;
        if (i % 5 == 3) p[i].sampling.presence_penalty = 1.0f;
    }
    static result batched[N], alone[N];
    sched_stats st_batched, st_alone;
    sched_config c = tick_config();
    c.policy = policy;
    run_all(&e, &c, p, N, batched, &st_batched);
    c.max_batch_size = 1;
    run_all(&e, &c, p, N, alone, &st_alone);
    int preempted = 0;
    for (int i = 0; i < N; i++) {
        char what[32];
        snprintf(what, sizeof what, "request %d", i);
        assert_same_tokens(&batched[i], &alone[i], what);
        cr_assert_eq(batched[i].finish, SCHED_FINISH_LENGTH);
        cr_assert_eq(batched[i].prefilled, p[i].n_prompt);
        preempted += batched[i].preemptions;
    }
    cr_log_info("policy %d: %lld preemptions, %lld prompt tokens prefilled (%lld alone), %lld ticks", (int)policy,
                (long long)st_batched.preemptions, (long long)st_batched.prompt_tokens,
                (long long)st_alone.prompt_tokens, (long long)st_batched.ticks);
    cr_assert_gt(st_batched.preemptions, 0);
    cr_assert_eq(preempted, st_batched.preemptions);
    cr_assert_eq(st_alone.preemptions, 0);
    cr_assert_gt(st_batched.prompt_tokens, st_alone.prompt_tokens, "recomputation counts as prefill");
    cr_assert_eq(st_batched.kv_blocks_used, 0);
    cr_assert_eq(st_batched.finished, N);
    env_close(&e);
}

Test(sched_tick, preemption_keeps_every_request_s_tokens_fcfs) {
    check_preemption(SP_POLICY_FCFS);
}

Test(sched_tick, preemption_keeps_every_request_s_tokens_priority) {
    check_preemption(SP_POLICY_PRIORITY);
}

Test(sched_tick, cancel_while_queued_ends_it_without_running) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "Once upon a time", 0, prompt, 64);
    sched_config c = tick_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request_params p = base_params(prompt, n, 8);
    sched_request *keep = make_request(&p), *gone = make_request(&p);
    cr_assert_eq(sched_submit(s, &keep, 1), SP_OK);
    cr_assert_eq(sched_submit(s, &gone, 1), SP_OK);
    sched_request_cancel(gone);
    cr_assert_eq(sched_start(s), SP_OK);
    wait_done(gone, 5);
    wait_done(keep, 5);
    result rg, rk;
    capture(gone, &rg);
    capture(keep, &rk);
    cr_assert_eq(rg.finish, SCHED_FINISH_CANCELLED);
    cr_assert_eq(rg.completion_tokens, 0);
    cr_assert_eq(rg.prefilled, 0);
    cr_assert_eq(rk.finish, SCHED_FINISH_LENGTH);
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.cancelled, 1);
    cr_assert_eq(st.queued, 0);
    sched_request_cancel(gone); /* after the end: a no-op */
    sched_destroy(s);
    sched_request_release(keep);
    sched_request_release(gone);
    env_close(&e);
}

Test(sched_tick, cancel_while_running_frees_its_blocks) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "Once upon a time", 0, prompt, 64);
    sched_config c = tick_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    cr_assert_eq(sched_start(s), SP_OK);
    sched_request_params p = base_params(prompt, n, 1500);
    sched_request *r = make_request(&p);
    cr_assert_eq(sched_submit(s, &r, 1), SP_OK);
    double until = sched_now() + 5;
    while (n_tokens_now(r) < 3) {
        cr_assert_lt(sched_now(), until);
        usleep(100);
    }
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_gt(st.kv_blocks_used, 0);
    sched_request_cancel(r);
    double t0 = sched_now();
    wait_done(r, 1);
    result got;
    capture(r, &got);
    cr_assert_eq(got.finish, SCHED_FINISH_CANCELLED);
    cr_assert_lt(got.n_tokens, 1500);
    for (until = sched_now() + 0.5;; usleep(100)) {
        sched_get_stats(s, &st);
        if (st.kv_blocks_used == 0 && st.running == 0) break;
        cr_assert_lt(sched_now(), until, "blocks still used: %d", st.kv_blocks_used);
    }
    cr_log_info("cancel took effect after %.2f ms, at %d tokens", (sched_now() - t0) * 1e3, got.n_tokens);
    sched_destroy(s);
    sched_request_release(r);
    env_close(&e);
}

Test(sched_tick, max_tokens_ends_with_length) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "The sun", 0, prompt, 64);
    sched_config c = tick_config();
    sched_request_params p = base_params(prompt, n, 5);
    result got;
    sched_stats st;
    run_all(&e, &c, &p, 1, &got, &st);
    cr_assert_eq(got.finish, SCHED_FINISH_LENGTH);
    cr_assert_eq(got.n_tokens, 5);
    cr_assert_eq(got.completion_tokens, 5);
    /* max_seq_len as the limit: prompt + max_tokens exactly fills it */
    c.max_seq_len = n + 3;
    p.max_tokens = 3;
    run_all(&e, &c, &p, 1, &got, &st);
    cr_assert_eq(got.finish, SCHED_FINISH_LENGTH);
    cr_assert_eq(got.n_tokens, 3);
    env_close(&e);
}

Test(sched_tick, end_of_generation_stops_and_min_tokens_delays_it) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "The end", 0, prompt, 64);
    int32_t eos = tok_eos(e.vocab);
    cr_assert(tok_is_eog(e.vocab, eos));
    sample_logit_bias bias = {eos, 100.0f};
    sched_request_params p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = base_params(prompt, n, 10);
        p[i].ignore_eos = false;
        p[i].sampling.logit_bias = &bias;
        p[i].sampling.n_logit_bias = 1;
    }
    p[1].min_tokens = 4;
    p[2].ignore_eos = true;
    p[2].max_tokens = 6;
    result got[3];
    sched_stats st;
    sched_config c = tick_config();
    run_all(&e, &c, p, 3, got, &st);
    /* the first token is end-of-generation: counted, no text, not in tokens */
    cr_assert_eq(got[0].finish, SCHED_FINISH_STOP);
    cr_assert_eq(got[0].completion_tokens, 1);
    cr_assert_eq(got[0].n_tokens, 0);
    cr_assert_eq(got[0].text_len, 0);
    /* min_tokens 4: masked for 4 tokens, then it ends */
    cr_assert_eq(got[1].finish, SCHED_FINISH_STOP);
    cr_assert_eq(got[1].completion_tokens, 5);
    cr_assert_eq(got[1].n_tokens, 4);
    for (int i = 0; i < 4; i++) cr_assert(!tok_is_eog(e.vocab, got[1].ids[i]));
    /* ignore_eos: it is an ordinary token (rendering as nothing) */
    cr_assert_eq(got[2].finish, SCHED_FINISH_LENGTH);
    cr_assert_eq(got[2].n_tokens, 6);
    for (int i = 0; i < 6; i++) cr_assert_eq(got[2].ids[i], eos);
    cr_assert_eq(got[2].text_len, 0);
    env_close(&e);
}

Test(sched_tick, stop_string_across_tokens_ends_before_it) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "Once upon a time, there was a little girl", 0, prompt, 64);
    sched_config c = tick_config();
    sched_request_params p = base_params(prompt, n, 60);
    result free_run, stopped;
    sched_stats st;
    run_all(&e, &c, &p, 1, &free_run, &st);

    /* text offsets after each token; a stop from the 2nd byte of one token's text to
     * the 1st byte of the next one's */
    size_t end[RESULT_MAX_TOKENS + 1];
    char buf[512];
    tok_decoder d;
    tok_decoder_init(&d, false);
    d.at_start = false;
    end[0] = 0;
    for (int32_t i = 0; i < free_run.n_tokens; i++)
        end[i + 1] = end[i] + tok_decoder_push(e.vocab, &d, free_run.ids[i], buf, sizeof buf);
    int32_t k = -1;
    for (int32_t i = 3; i + 1 < free_run.n_tokens && k < 0; i++)
        if (end[i + 1] - end[i] >= 2 && end[i + 2] > end[i + 1]) k = i;
    cr_assert_geq(k, 0, "no token to cut in %s", free_run.text);
    size_t from = end[k] + 1, to = end[k + 1] + 1;
    char stop[64];
    cr_assert_lt(to - from, sizeof stop);
    memcpy(stop, free_run.text + from, to - from);
    stop[to - from] = '\0';
    size_t first = (size_t)(strstr(free_run.text, stop) - free_run.text);
    cr_log_info("stop \"%s\" (tokens %d-%d) first at byte %zu", stop, k, k + 1, first);

    const char *stops[2] = {"never appears in this story", stop};
    p.stop = stops;
    p.n_stop = 2;
    run_all(&e, &c, &p, 1, &stopped, &st);
    cr_assert_eq(stopped.finish, SCHED_FINISH_STOP);
    cr_assert_eq(stopped.text_len, first);
    cr_assert_eq(strncmp(stopped.text, free_run.text, first), 0);
    cr_assert_leq(stopped.n_tokens, k + 2);
    for (int32_t i = 0; i < stopped.n_tokens; i++) cr_assert_eq(stopped.ids[i], free_run.ids[i]);
    env_close(&e);
}

Test(sched_tick, timeout_ends_with_an_error) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "Once upon a time", 0, prompt, 64);
    sched_config c = tick_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request_params p = base_params(prompt, n, 8);
    p.timeout_s = 0.02;
    sched_request *waiting = make_request(&p);
    cr_assert_eq(sched_submit(s, &waiting, 1), SP_OK);
    usleep(40000); /* past its deadline before the thread even starts */
    cr_assert_eq(sched_start(s), SP_OK);
    wait_done(waiting, 5);
    result got;
    capture(waiting, &got);
    cr_assert_eq(got.finish, SCHED_FINISH_ERROR);
    cr_assert_eq(got.error, SP_ERR_TIMEOUT);
    cr_assert_str_eq(got.message, "the request exceeded its timeout of 0.02 s");
    cr_assert_eq(got.completion_tokens, 0);

    /* one that times out while it runs */
    p.max_tokens = 1500;
    p.timeout_s = 0.05;
    sched_request *running = make_request(&p);
    cr_assert_eq(sched_submit(s, &running, 1), SP_OK);
    wait_done(running, 5);
    capture(running, &got);
    cr_log_info("running request: %d tokens before its timeout", got.n_tokens);
    if (got.finish == SCHED_FINISH_LENGTH) cr_skip_test("1500 tokens took less than 50 ms on this machine");
    cr_assert_eq(got.finish, SCHED_FINISH_ERROR);
    cr_assert_eq(got.error, SP_ERR_TIMEOUT);
    cr_assert_gt(got.n_tokens, 0);
    sched_stats st;
    for (double until = sched_now() + 1; sched_now() < until; usleep(100)) {
        sched_get_stats(s, &st);
        if (st.kv_blocks_used == 0) break;
    }
    cr_assert_eq(st.timeouts, 2);
    cr_assert_eq(st.errors, 2);
    cr_assert_eq(st.kv_blocks_used, 0);
    sched_destroy(s);
    sched_request_release(waiting);
    sched_request_release(running);
    env_close(&e);
}

Test(sched_tick, destroy_with_work_in_flight_ends_everything) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "Once upon a time", 0, prompt, 64);
    sched_config c = tick_config();
    c.max_batch_size = 2;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    cr_assert_eq(sched_start(s), SP_OK);
    enum { N = 6 };
    sched_request *r[N];
    sched_request_params p = base_params(prompt, n, 1500);
    for (int i = 0; i < N; i++) {
        r[i] = make_request(&p);
        cr_assert_eq(sched_submit(s, &r[i], 1), SP_OK);
    }
    double until = sched_now() + 5;
    while (n_tokens_now(r[0]) < 2) {
        cr_assert_lt(sched_now(), until);
        usleep(100);
    }
    sched_destroy(s);
    for (int i = 0; i < N; i++) {
        const sched_output *o = sched_request_output(r[i]);
        cr_assert(o->done, "request %d has an end", i);
        cr_assert_eq(o->finish, SCHED_FINISH_ERROR, "request %d: finish %d", i, o->finish);
        cr_assert_eq(o->error, SP_ERR_UNAVAILABLE);
        cr_assert_str_eq(o->error_message, "the server is shutting down");
        cr_assert_eq(atomic_load(&r[i]->refs), 1);
        sched_request_release(r[i]);
    }
    env_close(&e);
}

Test(sched_tick, logprobs_come_from_the_raw_logits) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "Lily wanted to", 0, prompt, 64);
    sched_config c = tick_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    cr_assert_eq(sched_start(s), SP_OK);
    sched_request_params p = base_params(prompt, n, 12);
    p.top_logprobs = 3;
    p.sampling.frequency_penalty = 2.0f; /* changes the choice, not the reported logprobs */
    sched_request *r = make_request(&p);
    cr_assert_eq(sched_submit(s, &r, 1), SP_OK);
    wait_done(r, 5);
    sched_request_lock(r);
    const sched_output *o = sched_request_output(r);
    cr_assert_eq(o->top_logprobs, 3);
    cr_assert_eq(o->n_tokens, 12);
    for (int32_t i = 0; i < o->n_tokens; i++) {
        const sched_token *top = o->top + (size_t)i * 3;
        cr_assert_leq(o->tokens[i].logprob, 0.0f);
        cr_assert_geq(top[0].logprob, top[1].logprob);
        cr_assert_geq(top[1].logprob, top[2].logprob);
        cr_assert_geq(top[0].logprob, o->tokens[i].logprob);
        for (int k = 0; k < 3; k++)
            if (top[k].id == o->tokens[i].id) cr_assert_float_eq(top[k].logprob, o->tokens[i].logprob, 1e-6);
    }
    sched_request_unlock(r);
    sched_destroy(s);
    sched_request_release(r);
    env_close(&e);
}

Test(sched_tick, priority_policy_runs_lower_values_first) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "One day", 0, prompt, 64);
    sched_config c = tick_config();
    c.policy = SP_POLICY_PRIORITY;
    c.max_batch_size = 1;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request_params p = base_params(prompt, n, 4);
    sched_request *r[3];
    int prio[3] = {5, 0, 5};
    for (int i = 0; i < 3; i++) {
        p.priority = prio[i];
        r[i] = make_request(&p);
        cr_assert_eq(sched_submit(s, &r[i], 1), SP_OK);
    }
    cr_assert_eq(sched_start(s), SP_OK);
    for (int i = 0; i < 3; i++) wait_done(r[i], 5);
    double admitted[3];
    for (int i = 0; i < 3; i++) admitted[i] = sched_request_output(r[i])->timings.admitted;
    cr_assert_lt(admitted[1], admitted[0], "priority 0 first");
    cr_assert_lt(admitted[0], admitted[2], "then arrival order");
    sched_destroy(s);
    for (int i = 0; i < 3; i++) sched_request_release(r[i]);
    env_close(&e);
}

static void notify_count(void *arg) {
    atomic_fetch_add((atomic_int *)arg, 1);
}

Test(sched_tick, notify_is_called_for_every_token_and_the_end) {
    tick_env e;
    env_open(&e, 1);
    int32_t prompt[64];
    int32_t n = make_prompt(&e, "The little dog", 0, prompt, 64);
    sched_config c = tick_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request_params p = base_params(prompt, n, 7);
    sched_request *r = make_request(&p);
    atomic_int calls = 0;
    sched_request_set_notify(r, notify_count, &calls);
    cr_assert_eq(sched_submit(s, &r, 1), SP_OK);
    cr_assert_eq(sched_start(s), SP_OK);
    wait_done(r, 5);
    cr_assert_eq(atomic_load(&calls), 7, "one per token, the last one with done");
    const sched_output *o = sched_request_output(r);
    cr_assert_gt(o->timings.admitted, 0);
    cr_assert_geq(o->timings.first_token, o->timings.admitted);
    cr_assert_geq(o->timings.finished, o->timings.first_token);
    cr_assert_gt(o->timings.prefill_s, 0);
    cr_assert_gt(o->timings.decode_s, 0);
    sched_destroy(s);
    sched_request_release(r);
    env_close(&e);
}

Test(sched_tick, heartbeat_stays_fresh_when_idle) {
    tick_env e;
    env_open(&e, 1);
    sched_config c = tick_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    cr_assert_eq(sched_start(s), SP_OK);
    usleep(350000);
    double since = sched_seconds_since_heartbeat(s);
    cr_assert_lt(since, 0.25, "heartbeat %g s old", since);
    sched_stats st;
    sched_get_stats(s, &st);
    cr_assert_eq(st.ticks, 0);
    sched_destroy(s);
    env_close(&e);
}

/* tick.c's fair share of decode rows: beside a submission of 24 sequences, a one-sequence
 * request gets a row every step while the 24 take turns at SCHED_FAIR_DECODE_ROWS rows,
 * so it ends well before any of them; and every sequence's tokens are those it makes
 * alone (waiting a tick changes nothing). */
Test(sched_tick, one_request_cannot_fill_every_decode_row, .timeout = 60) {
    enum { BIG = 24, TOKENS = 24 };
    tick_env e;
    env_open(&e, 2);
    int32_t prompts[BIG + 1][64];
    sched_request_params p[BIG + 1];
    for (int i = 0; i <= BIG; i++) {
        int32_t n = make_prompt(&e, i == BIG ? "The small one" : "Once upon a time", i, prompts[i], 64);
        p[i] = base_params(prompts[i], n, TOKENS);
    }
    sched_config c = tick_config();
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK);
    sched_request *r[BIG + 1];
    for (int i = 0; i <= BIG; i++) r[i] = make_request(&p[i]);
    cr_assert_eq(sched_submit(s, r, BIG), SP_OK, "%s", sp_last_error()); /* one submission of 24 */
    cr_assert_eq(sched_submit(s, &r[BIG], 1), SP_OK);
    cr_assert_eq(sched_start(s), SP_OK);
    for (int i = 0; i <= BIG; i++) wait_done(r[i], 30);
    double small_done = sched_request_output(r[BIG])->timings.finished, first_big_done = 1e300;
    for (int i = 0; i < BIG; i++)
        if (sched_request_output(r[i])->timings.finished < first_big_done)
            first_big_done = sched_request_output(r[i])->timings.finished;
    cr_assert_lt(small_done, first_big_done, "the one-sequence request ended after a sequence of the 24");
    result together[BIG + 1];
    for (int i = 0; i <= BIG; i++) capture(r[i], &together[i]);
    sched_destroy(s);
    for (int i = 0; i <= BIG; i++) sched_request_release(r[i]);

    /* the same tokens as alone, for the small one and two of the 24 */
    const int check[3] = {0, BIG - 1, BIG};
    for (int k = 0; k < 3; k++) {
        result alone;
        sched_stats st;
        run_all(&e, &c, &p[check[k]], 1, &alone, &st);
        assert_same_tokens(&alone, &together[check[k]], "fair share against alone");
        cr_assert_eq(together[check[k]].completion_tokens, TOKENS);
    }
    env_close(&e);
}

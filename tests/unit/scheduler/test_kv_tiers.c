/* test_kv_tiers.c: the prefix cache's host and disk tiers under the real scheduler and
 * the tiny real model: blocks the pool evicted come back from a tier bit for bit (the
 * outputs equal computing everything), preempted sequences come back with their blocks,
 * and a churn of preemptions, cancellations and timeouts leaves every account at zero. */
#include <dirent.h>
#include <sys/stat.h>

#include "tests/unit/scheduler/tick_harness.h"

enum { N_PROMPTS = 8, PROMPT_LEN = 200 };

/* Prompt i: distinct from its second token on, PROMPT_LEN tokens. */
static int32_t tier_prompt(tick_env *e, int i, int32_t *out) {
    int32_t n = make_prompt(e, "The cat sat", PROMPT_LEN - 4, out, PROMPT_LEN + 8);
    out[1] = 300 + i;
    return n;
}

/* Every prompt twice (all of them, then all again), one at a time: by the second round
 * the pool (102 blocks) has evicted the first round's blocks (13 each). */
static void two_rounds(tick_env *e, sched_request_params *p, int32_t (*prompts)[PROMPT_LEN + 8]) {
    for (int i = 0; i < N_PROMPTS; i++) {
        int32_t n = tier_prompt(e, i, prompts[i]);
        p[i] = base_params(prompts[i], n, 24);
        p[i].sampling.temperature = 0.7f;
        p[i].sampling.seed = 5 + (uint64_t)i;
        p[i].top_logprobs = 2;
        p[N_PROMPTS + i] = p[i];
    }
}

static char *make_dir(void) {
    char *d = strdup("/tmp/test_kv_tiers_XXXXXX");
    cr_assert_not_null(mkdtemp(d));
    return d;
}

static void rm_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static void assert_same_logprobs(const result *a, const result *b, const char *what) {
    assert_same_tokens(a, b, what);
    for (int32_t t = 0; t < a->n_tokens; t++) {
        cr_assert_eq(a->logprobs[t], b->logprobs[t], "%s: token %d's logprob, bit for bit", what, t);
        for (int k = 0; k < 2; k++) cr_assert_eq(a->top[t][k].id, b->top[t][k].id);
    }
}

/* tiers: a configuration with some tier on; the second round must reload from it. */
static void check_round_trip(sched_config tiers, bool want_disk) {
    tick_env e;
    env_open(&e, 1);
    static int32_t prompts[N_PROMPTS][PROMPT_LEN + 8];
    sched_request_params p[2 * N_PROMPTS];
    two_rounds(&e, p, prompts);
    static result computed[2 * N_PROMPTS], reloaded[2 * N_PROMPTS];
    sched_stats st_computed, st_reloaded;
    sched_config c = tick_config();
    c.max_batch_size = 1;
    c.prefix_cache = false;
    run_all(&e, &c, p, 2 * N_PROMPTS, computed, &st_computed);
    tiers.max_batch_size = 1;
    run_all(&e, &tiers, p, 2 * N_PROMPTS, reloaded, &st_reloaded);
    for (int i = 0; i < 2 * N_PROMPTS; i++) {
        char what[32];
        snprintf(what, sizeof what, "request %d", i);
        assert_same_logprobs(&computed[i], &reloaded[i], what);
    }
    const kvt_stats *t = &st_reloaded.tiers;
    cr_log_info("tiers: %lld tokens reloaded; host hits %lld, disk hits %lld; stored %lld",
                (long long)st_reloaded.tier_reloaded_tokens, (long long)t->host_hits, (long long)t->disk_hits,
                (long long)t->stored);
    /* every second-round prompt finds its 12 full prompt blocks: its head still in the
     * pool (a sequence gives back its tail first, so the tail is evicted first), the rest
     * in a tier */
    cr_assert_geq(st_reloaded.prefix_hit_tokens, (int64_t)N_PROMPTS * 12 * 16);
    cr_assert_geq(st_reloaded.tier_reloaded_tokens, (int64_t)N_PROMPTS * 16, "at least a block per prompt");
    cr_assert_gt(want_disk ? t->disk_hits : t->host_hits, 0);
    /* computed: the first round, then at most the last partial block of each prompt */
    cr_assert_leq(st_reloaded.prompt_tokens - st_reloaded.prefix_hit_tokens,
                  st_computed.prompt_tokens / 2 + N_PROMPTS * 16, "the second round computes little");
    cr_assert_eq(st_reloaded.kv_blocks_used, 0);
    env_close(&e);
}

Test(kv_tiers, host_tier_reload_equals_computing, .timeout = 120) {
    sched_config c = tick_config();
    c.kv_host_mb = 4;
    check_round_trip(c, false);
}

Test(kv_tiers, disk_tier_reload_equals_computing, .timeout = 120) {
    char *dir = make_dir();
    sched_config c = tick_config();
    c.kv_disk_dir = dir;
    c.kv_disk_gb = 0.05;
    check_round_trip(c, true);
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int entries = 0;
    for (struct dirent *de; (de = readdir(d));) entries += de->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(entries, 0, "the scheduler's own disk directory is gone after sched_destroy");
    rm_tree(dir);
    free(dir);
}

Test(kv_tiers, persist_needs_a_directory) {
    tick_env e;
    env_open(&e, 1);
    sched_config c = tick_config();
    c.kv_disk_persist = true;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "kv_disk_dir"), "%s", sp_last_error());
    env_close(&e);
}

/* Many long sequences in a pool too small for them: preemptions, a cancellation now and
 * then and short deadlines. Every request ends, the ones that complete have the tokens
 * they get alone, and the accounts come back to zero: no block held, nothing swapped,
 * the tiers' counts equal to what they hold. */
Test(kv_tiers, churn_with_preemptions_cancels_and_timeouts_ends_at_zero, .timeout = 180) {
    tick_env e;
    env_open(&e, 1);
    enum { N = 24 };
    static int32_t prompts[N][64];
    sched_request_params p[N];
    for (int i = 0; i < N; i++) {
        int32_t n = make_prompt(&e, "The cat sat", 20 + i, prompts[i], 64);
        p[i] = base_params(prompts[i], n, 200 + 20 * (i % 5));
        p[i].sampling.temperature = 0.8f;
        p[i].sampling.seed = 300 + (uint64_t)i;
        if (i % 7 == 5) p[i].timeout_s = 0.05; /* ends with an error, wherever it is */
    }
    char *dir = make_dir();
    sched_config c = tick_config();
    c.kv_host_mb = 1;
    c.kv_disk_dir = dir;
    c.kv_disk_gb = 0.002;
    sched *s;
    cr_assert_eq(sched_create(&c, e.m, &s), SP_OK, "%s", sp_last_error());
    sched_request *reqs[N];
    for (int i = 0; i < N; i++) {
        reqs[i] = make_request(&p[i]);
        cr_assert_eq(sched_submit(s, &reqs[i], 1), SP_OK, "%s", sp_last_error());
    }
    cr_assert_eq(sched_start(s), SP_OK);
    unsigned seed = 11;
    for (int round = 0; round < 40; round++) {
        usleep(5000);
        int i = rand_r(&seed) % N;
        if (i % 4 == 1) sched_request_cancel(reqs[i]);
    }
    static result out[N];
    for (int i = 0; i < N; i++) {
        wait_done(reqs[i], 60);
        capture(reqs[i], &out[i]);
    }
    sched_stats st;
    for (double until = sched_now() + 1; sched_now() < until;) {
        sched_get_stats(s, &st);
        if (st.kv_blocks_used == 0 && st.running == 0) break;
        usleep(200);
    }
    sched_get_stats(s, &st);
    cr_log_info("churn: %lld preemptions, %lld swap resumes, %lld reloaded tokens, %lld cancelled, %lld timeouts",
                (long long)st.preemptions, (long long)st.swap_resumes, (long long)st.tier_reloaded_tokens,
                (long long)st.cancelled, (long long)st.timeouts);
    cr_assert_gt(st.preemptions, 0);
    cr_assert_gt(st.swap_resumes, 0);
    cr_assert_eq(st.kv_blocks_used, 0);
    cr_assert_eq(st.running, 0);
    cr_assert_eq(st.swapped, 0);
    cr_assert_eq(st.queued, 0);
    const kvt_stats *t = &st.tiers;
    cr_assert_eq(t->host_blocks + t->disk_blocks,
                 t->stored - t->disk_evictions - t->disk_write_errors - t->disk_rejected,
                 "every block a tier took is held or counted as gone");
    cr_assert_leq(t->host_blocks, t->host_capacity);
    cr_assert_leq(t->disk_blocks, t->disk_capacity);
    sched_destroy(s);

    /* the requests that completed have the tokens they get alone */
    sched_config alone = tick_config();
    alone.max_batch_size = 1;
    for (int i = 0; i < N; i++) {
        if (out[i].finish != SCHED_FINISH_LENGTH) continue;
        result ref;
        sched_stats st_ref;
        sched_request_params q = p[i];
        q.timeout_s = 0;
        run_all(&e, &alone, &q, 1, &ref, &st_ref);
        char what[32];
        snprintf(what, sizeof what, "request %d", i);
        assert_same_tokens(&out[i], &ref, what);
    }
    for (int i = 0; i < N; i++) sched_request_release(reqs[i]);
    rm_tree(dir);
    free(dir);
    env_close(&e);
}

/* sched.c: the scheduler's life cycle: configuration, creation (the KV pool and every
 * per-step array sized once), the thread and its loop, shutdown, and the counters.
 *
 * DESIGN (threads). sched_create runs on the caller's thread; from sched_start on the
 * model, the device, the KV pool and all sequence state belong to the thread named
 * "sched", which loops: take the queue (sleeping on the condition variable, at most
 * SCHED_IDLE_WAIT_S, only when it has nothing to run), then one tick. It blocks
 * SIGINT, SIGTERM and SIGHUP so only the main thread handles them. sched_destroy
 * stops and joins it, then (as the owner again) ends every request it still holds.
 * Stats and the heartbeat are atomics that any thread reads.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/log.h"
#include "common/sched_defaults.h"
#include "common/thread.h"
#include "scheduler/sched_internal.h"

enum { SCHED_MAX_BLOCK_SIZE = 1024 };
static const double SCHED_IDLE_WAIT_S = 0.1;

sched_config sched_config_default(void) {
    /* the knobs `spindle serve` also takes: common/sched_defaults.h, which
     * config/cfg.c's defaults read too */
    return (sched_config){
        SP_SCHED_DEFAULT_FIELDS,
        .request_timeout_s = SP_SCHED_DEFAULT_REQUEST_TIMEOUT_S,
        .max_seq_len = 0, /* the model's training context */
        .kv_watermark = 0.01,
        .spec_ngram = true, /* SP_SCHED_DEFAULT_SPECULATIVE: auto */
        .spec_suffix = true,
        .spec_suffix_bytes = (int64_t)SP_SCHED_DEFAULT_SPEC_SUFFIX_MB << 20,
        .draft_kv_cache_mb = SP_SCHED_DEFAULT_DRAFT_KV_CACHE_MB,
    };
}

sp_status sched_config_validate(const sched_config *c) {
    if (c->kv_cache_mb < 1 || c->kv_cache_mb > ((int64_t)1 << 30))
        return sp_fail(SP_ERR_INVALID_ARG, "kv_cache_mb %lld must be between 1 and 2^30", (long long)c->kv_cache_mb);
    if (c->block_size < 1 || c->block_size > SCHED_MAX_BLOCK_SIZE)
        return sp_fail(SP_ERR_INVALID_ARG, "block_size %d must be between 1 and %d", c->block_size,
                       SCHED_MAX_BLOCK_SIZE);
    if (c->max_batch_size < 1 || c->max_batch_size > 65536)
        return sp_fail(SP_ERR_INVALID_ARG, "max_batch_size %d must be between 1 and 65536", c->max_batch_size);
    /* every running sequence must fit its decode row into one step, or the tail of the
     * running list would never decode */
    if (c->max_batch_tokens < c->max_batch_size)
        return sp_fail(SP_ERR_INVALID_ARG, "max_batch_tokens %d must be at least max_batch_size (%d)",
                       c->max_batch_tokens, c->max_batch_size);
    if (c->max_prefill_tokens < 1 || c->max_prefill_tokens > c->max_batch_tokens)
        return sp_fail(SP_ERR_INVALID_ARG, "max_prefill_tokens %d must be between 1 and max_batch_tokens (%d)",
                       c->max_prefill_tokens, c->max_batch_tokens);
    if (c->queue_max_requests < 1)
        return sp_fail(SP_ERR_INVALID_ARG, "queue_max_requests %d must be at least 1", c->queue_max_requests);
    if (c->queue_max_tokens < 1)
        return sp_fail(SP_ERR_INVALID_ARG, "queue_max_tokens %lld must be at least 1", (long long)c->queue_max_tokens);
    if (c->policy != SP_POLICY_FCFS && c->policy != SP_POLICY_PRIORITY && c->policy != SP_POLICY_SLO)
        return sp_fail(SP_ERR_INVALID_ARG, "policy %d is not fcfs, priority or slo", (int)c->policy);
    if (!isfinite(c->ttft_slo_ms) || c->ttft_slo_ms < 0 || !isfinite(c->tpot_slo_ms) || c->tpot_slo_ms < 0)
        return sp_fail(SP_ERR_INVALID_ARG, "ttft_slo_ms %g and tpot_slo_ms %g must be 0 (none) or positive",
                       c->ttft_slo_ms, c->tpot_slo_ms);
    if (!isfinite(c->request_timeout_s) || c->request_timeout_s < 0)
        return sp_fail(SP_ERR_INVALID_ARG, "request_timeout_s %g must be 0 (none) or positive", c->request_timeout_s);
    if (c->max_seq_len < 0)
        return sp_fail(SP_ERR_INVALID_ARG, "max_seq_len %d must be 0 (the model's context) or positive",
                       c->max_seq_len);
    if (c->kv_host_mb < 0 || c->kv_host_mb > ((int64_t)1 << 30))
        return sp_fail(SP_ERR_INVALID_ARG, "kv_host_mb %lld must be between 0 and 2^30", (long long)c->kv_host_mb);
    if (!isfinite(c->kv_disk_gb) || c->kv_disk_gb < 0)
        return sp_fail(SP_ERR_INVALID_ARG, "kv_disk_gb %g must be 0 or positive", c->kv_disk_gb);
    if (c->kv_disk_persist && !(c->kv_disk_dir && c->kv_disk_dir[0]))
        return sp_fail(SP_ERR_INVALID_ARG, "kv_disk_persist needs kv_disk_dir");
    if (!(c->kv_watermark >= 0 && c->kv_watermark < 1))
        return sp_fail(SP_ERR_INVALID_ARG, "kv_watermark %g must be in [0, 1)", c->kv_watermark);
    if (c->spec_k < 1 || c->spec_k > SCHED_SPEC_MAX_K)
        return sp_fail(SP_ERR_INVALID_ARG, "spec_k %d must be between 1 and %d", c->spec_k, SCHED_SPEC_MAX_K);
    if (c->spec_ngram_min < 1 || c->spec_ngram_max < c->spec_ngram_min || c->spec_ngram_max > 64)
        return sp_fail(SP_ERR_INVALID_ARG, "spec_ngram_min %d and spec_ngram_max %d must satisfy 1 <= min <= max <= 64",
                       c->spec_ngram_min, c->spec_ngram_max);
    if (c->spec_suffix && c->spec_suffix_bytes < ((int64_t)64 << 10))
        return sp_fail(SP_ERR_INVALID_ARG, "spec_suffix_bytes %lld must be at least 64 KiB",
                       (long long)c->spec_suffix_bytes);
    if (!(c->gpu_memory_fraction > 0 && c->gpu_memory_fraction <= 1))
        return sp_fail(SP_ERR_INVALID_ARG, "gpu_memory_fraction %g must be in (0, 1]", c->gpu_memory_fraction);
    return SP_OK;
}

/* Every per-step array and scratch buffer, sized from the configuration. */
static sp_status sched_alloc_arrays(sched *s) {
    size_t t = (size_t)s->cfg.max_batch_tokens, b = (size_t)s->cfg.max_batch_size;
    s->step_tokens = malloc(sizeof(int32_t) * t);
    s->step_pos = malloc(sizeof(int32_t) * t);
    s->step_seq = malloc(sizeof(int32_t) * t);
    s->step_seq_len = malloc(sizeof(int32_t) * b);
    s->step_block_table = calloc(b * (size_t)s->max_blocks_per_seq, sizeof(int32_t));
    s->cache.match_ids = malloc(sizeof(int32_t) * (size_t)s->max_blocks_per_seq);
    s->step_logit_rows = malloc(sizeof(int32_t) * t); /* every row of a draft wants logits */
    s->step_reqs = malloc(sizeof(sched_request *) * b);
    s->decode_candidates = malloc(sizeof(sched_request *) * b);
    s->step_chunk = malloc(sizeof(int32_t) * b);
    s->step_prefill = malloc(sizeof(bool) * b);
    s->step_logit_of = malloc(sizeof(int32_t) * b);
    /* embeddings are prefill only: their rows fit the prefill budget */
    size_t hidden_rows = (size_t)s->cfg.max_prefill_tokens;
    s->step_hidden_rows = malloc(sizeof(int32_t) * hidden_rows);
    s->step_hidden_of = malloc(sizeof(int32_t) * b);
    s->step_hidden_n = malloc(sizeof(int32_t) * b);
    s->step_hidden = malloc(sizeof(float) * hidden_rows * (size_t)s->n_embd);
    s->running = malloc(sizeof(sched_request *) * b);
    s->sample_rows = malloc(sizeof(dev_sample_row) * t);
    s->sample_results = malloc(sizeof(dev_sample_result) * t);
    s->step_n_draft = malloc(sizeof(int32_t) * b);
    s->step_proposer = malloc(sizeof(int8_t) * b);
    s->grammar.mask_words = ((size_t)s->n_vocab + 31) / 32;
    /* grammar rows: a decode row and its drafts per sequence */
    s->grammar.max_mask_rows = b * (size_t)(1 + s->cfg.spec_k);
    if (s->grammar.max_mask_rows > t) s->grammar.max_mask_rows = t;
    s->grammar.step_masks = malloc(sizeof(uint32_t) * s->grammar.mask_words * s->grammar.max_mask_rows);
    s->piece_cap = tok_max_token_bytes(s->vocab) + 64;
    s->piece = malloc(2 * s->piece_cap);
    s->text_work = malloc(SCHED_MAX_STOP_BYTES + 2 * s->piece_cap);
    int n_eog = 0;
    for (int32_t id = 0; id < s->n_vocab; id++) n_eog += tok_is_eog(s->vocab, id);
    s->eog_ids = malloc(sizeof(int32_t) * (size_t)(n_eog > 0 ? n_eog : 1));
    if (!s->step_tokens || !s->step_pos || !s->step_seq || !s->step_seq_len || !s->step_block_table ||
        !s->cache.match_ids || !s->step_logit_rows || !s->step_reqs || !s->decode_candidates || !s->step_chunk ||
        !s->step_prefill || !s->step_logit_of || !s->running || !s->sample_rows || !s->sample_results || !s->piece ||
        !s->text_work || !s->eog_ids || !s->step_n_draft || !s->step_proposer || !s->grammar.step_masks ||
        !s->step_hidden_rows || !s->step_hidden_of || !s->step_hidden_n || !s->step_hidden)
        return sp_fail(SP_ERR_NOMEM, "scheduler: out of memory for its step arrays");
    sp_status st = gram_vocab_create(s->vocab, &s->grammar.vocab);
    if (st != SP_OK) return st;
    if ((st = sched__masks_init(s, (int)b)) != SP_OK) return st;
    for (int32_t id = 0; id < s->n_vocab; id++)
        if (tok_is_eog(s->vocab, id)) s->eog_ids[s->n_eog++] = id;
    return SP_OK;
}

static void sched_free_arrays(sched *s) {
    free(s->step_tokens);
    free(s->step_pos);
    free(s->step_seq);
    free(s->step_seq_len);
    free(s->step_block_table);
    free(s->cache.match_ids);
    free(s->step_logit_rows);
    free(s->step_reqs);
    free(s->decode_candidates);
    free(s->step_chunk);
    free(s->step_prefill);
    free(s->step_logit_of);
    free(s->step_hidden_rows);
    free(s->step_hidden_of);
    free(s->step_hidden_n);
    free(s->step_hidden);
    free(s->running);
    free(s->sample_rows);
    free(s->sample_results);
    free(s->piece);
    free(s->text_work);
    free(s->eog_ids);
    free(s->step_n_draft);
    free(s->step_proposer);
    sched__masks_destroy(s);
    free(s->grammar.step_masks);
    gram_vocab_destroy(s->grammar.vocab);
}

/* What a GPU backend still allocates after the pool: decode padding's scratch KV block
 * (dev_kv_create adds it), sampling's per-call buffers and the captured graphs. Kept
 * out of the pool's share, so gpu_memory_fraction 1.0 still leaves room for them. */
#define SCHED_GPU_HEADROOM_BYTES ((size_t)256 << 20)

/* The pool's size in blocks: kv_cache_mb MiB over the bytes of one block. */
static sp_status sched_pool_blocks(const sched *s, int32_t *out) {
    dev_kv_shape one = model_kv_shape(s->m, 1, s->cfg.block_size, sched__kv_type(&s->cfg));
    sp_status st = dev_kv_shape_check(&one);
    if (st != SP_OK) return sp_fail_prefix(st, "--kv-type");
    size_t block_bytes = dev_kv_bytes(&one);
    int64_t n = s->cfg.kv_cache_mb * ((int64_t)1 << 20) / (int64_t)block_bytes;
    size_t free_b = 0, total_b = 0;
    if (dev_memory_info(model_device(s->m), &free_b, &total_b) == SP_OK) {
        /* a GPU: the weights and activations are in place; the pool takes its share of
         * the rest, less the headroom and the scratch block */
        size_t headroom = SCHED_GPU_HEADROOM_BYTES + block_bytes;
        size_t usable = free_b > headroom ? free_b - headroom : 0;
        n = (int64_t)(s->cfg.gpu_memory_fraction * (double)usable) / (int64_t)block_bytes;
        sp_log_info("KV cache on the GPU: %lld blocks, %.0f MiB (gpu_memory_fraction %.2f of %zu MiB free less %zu MiB "
                    "headroom; %zu MiB in all)",
                    (long long)n, (double)n * (double)block_bytes / (1 << 20), s->cfg.gpu_memory_fraction, free_b >> 20,
                    headroom >> 20, total_b >> 20);
        if (n < 1)
            return sp_fail(SP_ERR_NOMEM, "the GPU has %zu MiB free after loading the model: no room for a KV block",
                           free_b >> 20);
    } else {
        sp_error_clear(); /* the CPU: kv_cache_mb decides */
    }
    if (n < 1)
        return sp_fail(SP_ERR_INVALID_ARG, "kv_cache_mb %lld holds no KV block (a block of %d tokens is %zu bytes)",
                       (long long)s->cfg.kv_cache_mb, s->cfg.block_size, block_bytes);
    *out = n > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)n;
    return SP_OK;
}

sp_status sched_create(const sched_config *config, model *m, sched **out) {
    *out = NULL;
    sp_status st = sched_config_validate(config);
    if (st != SP_OK) return st;
    if (config->max_batch_tokens > model_max_batch_tokens(m))
        return sp_fail(SP_ERR_INVALID_ARG, "max_batch_tokens %d exceeds the model's largest step of %d tokens",
                       config->max_batch_tokens, model_max_batch_tokens(m));
    sched *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(SP_ERR_NOMEM, "scheduler: out of memory");
    s->cfg = *config;
    s->m = m;
    s->vocab = model_vocab(m);
    s->n_vocab = tok_vocab_size(s->vocab);
    s->n_embd = model_get_hparams(m)->n_embd;
    if (s->cfg.max_seq_len == 0) s->cfg.max_seq_len = model_get_hparams(m)->n_ctx_train;
    atomic_init(&s->queue.queued, 0);
    atomic_init(&s->queue.queued_tokens, 0);

    if (sp_cond_init_monotonic(&s->queue.wake) != 0) {
        free(s);
        return sp_fail(SP_ERR_NOMEM, "scheduler: cannot create its condition variable");
    }
    if (pthread_mutex_init(&s->queue.lock, NULL) != 0) {
        pthread_cond_destroy(&s->queue.wake);
        free(s);
        return sp_fail(SP_ERR_NOMEM, "scheduler: cannot create its lock");
    }

    int32_t n_blocks = 0;
    /* the draft model's pool first: on a GPU the target's takes its share of what is left */
    if ((st = sched__draft_init(s)) != SP_OK) goto fail;
    if ((st = sched_pool_blocks(s, &n_blocks)) != SP_OK) goto fail;
    if ((st = kv_blocks_init(&s->cache.blocks, n_blocks, s->cfg.block_size, s->cfg.prefix_cache)) != SP_OK) goto fail;
    /* one sequence can never be longer than the whole pool: say so once, and make the
     * context (what clients see as max_model_len) what the pool can hold */
    if ((int64_t)n_blocks * s->cfg.block_size < s->cfg.max_seq_len) {
        int32_t fits = n_blocks * s->cfg.block_size;
        sp_log_warn("the KV cache (%lld MiB) holds %d tokens, less than the context of %d: one sequence is limited "
                    "to %d tokens (raise --kv-cache-mb for more)",
                    (long long)s->cfg.kv_cache_mb, fits, s->cfg.max_seq_len, fits);
        s->cfg.max_seq_len = fits;
    }
    s->max_blocks_per_seq = kv_blocks_for_tokens(s->cfg.max_seq_len, s->cfg.block_size);
    s->cache.watermark_blocks = (int32_t)(s->cfg.kv_watermark * n_blocks);
    if ((st = sched_alloc_arrays(s)) != SP_OK) goto fail;
    if ((st = sched__spec_init(s)) != SP_OK) goto fail;
    if ((st = model_kv_create_typed(m, n_blocks, s->cfg.block_size, sched__kv_type(&s->cfg), &s->cache.pool)) !=
        SP_OK) {
        sp_fail_prefix(st, "KV cache of %d blocks", n_blocks);
        goto fail;
    }
    if ((st = sched__tiers_init(s)) != SP_OK) goto fail;
    sched__heartbeat(s);
    *out = s;
    return SP_OK;
fail:
    sched_destroy(s);
    return st;
}

static void *sched_thread_main(void *arg) {
    sched *s = arg;
    bool idle = false;
    for (;;) {
        sched__heartbeat(s);
        if (sched__queue_take(s, idle, SCHED_IDLE_WAIT_S)) break;
        sched__heartbeat(s);
        idle = !sched__tick(s);
    }
    return NULL;
}

sp_status sched_start(sched *s) {
    if (s->started) return sp_fail(SP_ERR_INVALID_ARG, "the scheduler thread is already running");
    sp_status st = sp_thread_start(&s->thread, "sched", sched_thread_main, s);
    if (st != SP_OK) return sp_fail_prefix(st, "scheduler");
    s->started = true;
    return SP_OK;
}

void sched_destroy(sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->queue.lock);
    s->queue.shutting_down = true;
    s->queue.stopping = true;
    pthread_cond_signal(&s->queue.wake);
    pthread_mutex_unlock(&s->queue.lock);
    if (s->started) pthread_join(s->thread, NULL);
    s->started = false;

    /* this thread owns everything now: end what is left, running first */
    sched__queue_take(s, false, 0);
    while (s->n_running > 0) {
        sched_request *r = s->running[s->n_running - 1];
        sched__running_remove(s, s->n_running - 1);
        sched__request_end(s, r, SCHED_FINISH_ERROR, SP_ERR_UNAVAILABLE, "the server is shutting down");
    }
    while (s->queue.wait_head) {
        sched_request *r = s->queue.wait_head;
        sched__waiting_remove(s, r);
        sched__request_end(s, r, SCHED_FINISH_ERROR, SP_ERR_UNAVAILABLE, "the server is shutting down");
    }

    sched__tiers_free(s);
    if (s->cache.pool) dev_kv_destroy(model_device(s->m), s->cache.pool);
    kv_blocks_free(&s->cache.blocks);
    sched__spec_free(s);
    sched__draft_free(s);
    sched_free_arrays(s);
    pthread_mutex_destroy(&s->queue.lock);
    pthread_cond_destroy(&s->queue.wake);
    free(s);
}

void sched_get_stats(const sched *s, sched_stats *out) {
    const sched_counters *c = &s->meter.stats;
#define LOAD(x) atomic_load_explicit(&c->x, memory_order_relaxed)
    *out = (sched_stats){
        .submitted = LOAD(submitted),
        .rejected_queue_requests = LOAD(rejected_queue_requests),
        .rejected_queue_tokens = LOAD(rejected_queue_tokens),
        .rejected_shutdown = LOAD(rejected_shutdown),
        .rejected_invalid = LOAD(rejected_invalid),
        .finished = LOAD(finished),
        .cancelled = LOAD(cancelled),
        .errors = LOAD(errors),
        .timeouts = LOAD(timeouts),
        .preemptions = LOAD(preemptions),
        .ticks = LOAD(ticks),
        .prompt_tokens = LOAD(prompt_tokens),
        .generated_tokens = LOAD(generated_tokens),
        .prefix_query_tokens = LOAD(prefix_query_tokens),
        .prefix_hit_tokens = LOAD(prefix_hit_tokens),
        .tier_reloaded_tokens = LOAD(tier_reloaded_tokens),
        .swap_resumes = LOAD(swap_resumes),
        .slo_requests = LOAD(slo_requests),
        .slo_goodput = LOAD(slo_goodput),
        .slo_rejected = LOAD(slo_rejected),
        .slo_prefill_holds = LOAD(slo_prefill_holds),
        .running = LOAD(running),
        .swapped = LOAD(swapped),
    };
#undef LOAD
    out->queued = atomic_load_explicit(&s->queue.queued, memory_order_relaxed);
    out->queued_tokens = atomic_load_explicit(&s->queue.queued_tokens, memory_order_relaxed);
    out->kv_blocks_used = kv_blocks_used(&s->cache.blocks);
    out->kv_blocks_total = s->cache.blocks.n_total;
    out->kv_blocks_cached = kv_blocks_cached(&s->cache.blocks);
    dev_kv_shape one_token = model_kv_shape(s->m, 1, 1, sched__kv_type(&s->cfg));
    out->kv_bytes_per_token = (int64_t)dev_kv_bytes(&one_token);
    dev_kv_shape one_block = model_kv_shape(s->m, 1, s->cfg.block_size, sched__kv_type(&s->cfg));
    out->kv_bytes_per_sequence = (int64_t)s->max_blocks_per_seq * (int64_t)dev_kv_bytes(&one_block);
    kvt_stats_get(s->cache.tiers, &out->tiers);
    sched__spec_stats(s, out);
}

const sched_config *sched_get_config(const sched *s) {
    return &s->cfg;
}

const gram_vocab *sched_grammar_vocab(const sched *s) {
    return s->grammar.vocab;
}

bool sched_device_fault(const sched *s, char *why, size_t cap) {
    if (!atomic_load_explicit(&s->meter.device_fault, memory_order_acquire)) return false;
    snprintf(why, cap, "%s", s->meter.device_fault_msg);
    return true;
}

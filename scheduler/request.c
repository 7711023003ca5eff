/* request.c: the sched_request object: a copy of what was asked (prompt, stop
 * strings, logit bias), a reference count, the cancel flag, and the output the HTTP
 * side reads under the request's lock.
 *
 * DESIGN (threads). Any thread creates, retains, releases, cancels and reads a
 * request. The scheduler thread alone writes the output (under the lock) and the
 * sequence state (without a lock: nothing else reads it). sched_submit allocates the
 * sequence's arrays on the submitting thread before the request becomes visible to the
 * scheduler thread (sched__request_prepare), sized for max_tokens so the tick rarely
 * allocates (only the text buffer grows).
 * Cancel touches the scheduler only while the output is not done, holding the
 * request's lock: ending a request takes that lock too, so the scheduler cannot have
 * been destroyed under a cancel (sched_destroy ends every request it still holds).
 */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "scheduler/sched_internal.h"

static sp_status request_check(const sched_request_params *p) {
    if (p->n_prompt < 0 || (p->n_prompt > 0 && !p->prompt))
        return sp_fail(SP_ERR_INVALID_ARG, "prompt: %d tokens without a token array", p->n_prompt);
    if (p->pooling < SP_POOLING_NONE || p->pooling > SP_POOLING_CLS)
        return sp_fail(SP_ERR_INVALID_ARG, "pooling %d unknown", (int)p->pooling);
    if (p->pooling != SP_POOLING_NONE && p->max_tokens != 0)
        return sp_fail(SP_ERR_INVALID_ARG, "an embedding generates nothing: max_tokens %d must be 0", p->max_tokens);
    if (p->pooling == SP_POOLING_NONE && p->max_tokens < 1)
        return sp_fail(SP_ERR_INVALID_ARG, "max_tokens %d must be at least 1", p->max_tokens);
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return sp_fail(SP_ERR_INVALID_ARG, "min_tokens %d must be between 0 and max_tokens (%d)", p->min_tokens,
                       p->max_tokens);
    if (p->n_stop < 0 || p->n_stop > SCHED_MAX_STOP || (p->n_stop > 0 && !p->stop))
        return sp_fail(SP_ERR_INVALID_ARG, "stop: %d strings; at most %d are allowed", p->n_stop, SCHED_MAX_STOP);
    for (int i = 0; i < p->n_stop; i++) {
        size_t len = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (len == 0 || len > SCHED_MAX_STOP_BYTES)
            return sp_fail(SP_ERR_INVALID_ARG, "stop[%d]: %zu bytes; a stop string has 1 to %d bytes", i, len,
                           SCHED_MAX_STOP_BYTES);
    }
    if (p->top_logprobs < -1 || p->top_logprobs > SCHED_MAX_TOP_LOGPROBS)
        return sp_fail(SP_ERR_INVALID_ARG, "top_logprobs %d must be between 0 and %d", p->top_logprobs,
                       SCHED_MAX_TOP_LOGPROBS);
    if (p->sampling.n_logit_bias < 0 || (p->sampling.n_logit_bias > 0 && !p->sampling.logit_bias))
        return sp_fail(SP_ERR_INVALID_ARG, "logit_bias: %d entries without an array", p->sampling.n_logit_bias);
    if (p->cache_salt_len > SCHED_MAX_CACHE_SALT_BYTES || (p->cache_salt_len > 0 && !p->cache_salt))
        return sp_fail(SP_ERR_INVALID_ARG, "cache_salt: %zu bytes; at most %d are allowed", p->cache_salt_len,
                       SCHED_MAX_CACHE_SALT_BYTES);
    return SP_OK;
}

/* The chain root of a tag, a tenant and a salt's root: distinct inputs, distinct bytes. */
static uint64_t tenant_salt_root(char tag, uint64_t tenant, uint64_t salt_root) {
    unsigned char b[17];
    b[0] = (unsigned char)tag;
    for (int i = 0; i < 8; i++) {
        b[1 + i] = (unsigned char)(tenant >> (8 * i));
        b[9 + i] = (unsigned char)(salt_root >> (8 * i));
    }
    return kv_chain_root(b, sizeof b);
}

uint64_t sched__request_root(const sched_request *r, bool per_tenant) {
    /* without API keys every request's tenant is 0: one tenant, nothing to scope */
    if (!per_tenant || r->params.tenant == 0) return r->salt_root;
    return tenant_salt_root('k', r->params.tenant, r->salt_root);
}

sp_status sched_request_create(const sched_request_params *params, sched_request **out) {
    *out = NULL;
    sp_status st = request_check(params);
    if (st != SP_OK) return st;
    sched_request *r = calloc(1, sizeof *r);
    if (!r) return sp_fail(SP_ERR_NOMEM, "request: out of memory");
    if (pthread_mutex_init(&r->lock, NULL) != 0) {
        free(r);
        return sp_fail(SP_ERR_NOMEM, "request: cannot create its lock");
    }
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancel, false);
    atomic_init(&r->owner, NULL);
    r->params = *params;
    r->params.grammar = NULL; /* shared below, once the rest is in place */
    r->salt_root = kv_chain_root(params->cache_salt, params->cache_salt_len);
    r->suffix_tenant =
        params->cache_salt_len > 0 ? tenant_salt_root('s', params->tenant, r->salt_root) : params->tenant;
    r->params.cache_salt = NULL; /* only its hash is kept */
    r->params.cache_salt_len = 0;
    r->state = SCHED_SEQ_NEW;

    int32_t *prompt = malloc(sizeof *prompt * (size_t)(params->n_prompt > 0 ? params->n_prompt : 1));
    size_t stop_bytes = 1;
    for (int i = 0; i < params->n_stop; i++) stop_bytes += strlen(params->stop[i]) + 1;
    r->stop_data = malloc(stop_bytes);
    int32_t n_bias = params->sampling.n_logit_bias;
    r->logit_bias = malloc(sizeof *r->logit_bias * (size_t)(n_bias > 0 ? n_bias : 1));
    /* prompt is owned through params.prompt from here on, so release frees it */
    r->params.prompt = prompt;
    if (!prompt || !r->stop_data || !r->logit_bias) {
        sched_request_release(r);
        return sp_fail(SP_ERR_NOMEM, "request: out of memory");
    }
    if (params->n_prompt > 0) memcpy(prompt, params->prompt, sizeof *prompt * (size_t)params->n_prompt);
    char *p = r->stop_data;
    for (int i = 0; i < params->n_stop; i++) {
        size_t len = strlen(params->stop[i]);
        memcpy(p, params->stop[i], len + 1);
        r->stops[i] = p;
        r->stop_lens[i] = len;
        p += len + 1;
    }
    r->params.stop = params->n_stop > 0 ? r->stops : NULL;
    if (n_bias > 0) memcpy(r->logit_bias, params->sampling.logit_bias, sizeof *r->logit_bias * (size_t)n_bias);
    r->params.sampling.logit_bias = n_bias > 0 ? r->logit_bias : NULL;

    if (params->max_reasoning_tokens > 0 && params->n_think_close > 0) {
        r->think_close = malloc(sizeof *r->think_close * (size_t)params->n_think_close);
        if (!r->think_close) {
            sched_request_release(r);
            return sp_fail(SP_ERR_NOMEM, "request: out of memory");
        }
        memcpy(r->think_close, params->think_close, sizeof *r->think_close * (size_t)params->n_think_close);
        r->params.think_close = r->think_close;
        r->thinking = params->thinking_at_start ? 1 : 0;
    } else {
        r->params.max_reasoning_tokens = 0;
        r->params.n_think_close = 0;
        r->params.think_close = NULL;
    }
    r->force_at = r->params.n_think_close;
    if (params->grammar) {
        r->params.grammar = gram_grammar_share(params->grammar);
        st = gram_state_create(r->params.grammar, &r->gram);
        if (st != SP_OK) {
            sched_request_release(r);
            return st;
        }
    }
    r->out.prompt_tokens = params->n_prompt;
    r->out.top_logprobs = params->top_logprobs > 0 ? params->top_logprobs : 0;
    r->out.timings.arrival = sched_now();
    *out = r;
    return SP_OK;
}

/* Frees the sequence's arrays of an earlier sched_submit that failed (the request is
 * still SCHED_SEQ_NEW, so only the submitting thread knows it). */
static void request_unprepare(sched_request *r) {
    if (!r->tokens) return;
    free(r->tokens);
    r->tokens = NULL;
    kv_seq_free(&r->kv);
    kv_seq_free(&r->draft_kv);
    pthread_mutex_lock(&r->lock);
    free(r->out.tokens);
    free(r->out.top);
    free(r->out.text);
    r->out.tokens = NULL;
    r->out.top = NULL;
    r->out.text = NULL;
    r->out.text_len = 0;
    r->out.n_tokens = 0;
    r->text_cap = 0;
    pthread_mutex_unlock(&r->lock);
}

sp_status sched__request_prepare(sched_request *r, int block_size) {
    const sched_request_params *p = &r->params;
    SP_ASSERT(r->state == SCHED_SEQ_NEW);
    request_unprepare(r);
    int64_t total = (int64_t)p->n_prompt + p->max_tokens;
    size_t text_cap = (size_t)p->max_tokens * 8 + 64;
    if (text_cap > ((size_t)1 << 20)) text_cap = (size_t)1 << 20;
    int32_t *tokens = malloc(sizeof *tokens * (size_t)total);
    sched_token *out_tokens = malloc(sizeof *out_tokens * (size_t)(p->max_tokens > 0 ? p->max_tokens : 1));
    sched_token *top =
        r->out.top_logprobs > 0 ? malloc(sizeof *top * (size_t)p->max_tokens * (size_t)r->out.top_logprobs) : NULL;
    char *text = malloc(text_cap);
    kv_seq kv = {0}, draft_kv = {0};
    int32_t cap = kv_blocks_for_tokens(total, block_size);
    bool kv_ok = kv_seq_init(&kv, cap) == SP_OK;
    bool draft_ok = kv_seq_init(&draft_kv, cap) == SP_OK; /* the draft model's blocks (spec_draft.c) */
    if (!tokens || !out_tokens || (r->out.top_logprobs > 0 && !top) || !text || !kv_ok || !draft_ok) {
        if (kv_ok) kv_seq_free(&kv);
        if (draft_ok) kv_seq_free(&draft_kv);
        free(tokens);
        free(out_tokens);
        free(top);
        free(text);
        return sp_fail(SP_ERR_NOMEM, "request of %lld tokens: out of memory", (long long)total);
    }
    memcpy(tokens, p->prompt, sizeof *tokens * (size_t)p->n_prompt);
    text[0] = '\0';
    r->tokens = tokens;
    r->n_tokens = p->n_prompt;
    r->n_computed = 0;
    r->kv = kv;
    r->draft_kv = draft_kv;
    r->draft_computed = 0;
    r->spec_bias = 0; /* an average sequence until its drafts show otherwise */
    r->spec_tried = false;
    tok_decoder_init(&r->dec, false);
    r->dec.at_start = false; /* the generated text continues the prompt */
    r->stop.n_held = 0;

    pthread_mutex_lock(&r->lock);
    r->out.tokens = out_tokens;
    r->out.top = top;
    r->out.text = text;
    r->text_cap = text_cap;
    pthread_mutex_unlock(&r->lock);
    return SP_OK;
}

sp_status sched__output_reserve_text(sched_request *r, size_t n) {
    size_t need = r->out.text_len + n + 1;
    if (need <= r->text_cap) return SP_OK;
    size_t cap = r->text_cap ? r->text_cap : 64;
    while (cap < need) cap *= 2;
    char *text = realloc(r->out.text, cap);
    if (!text) return sp_fail(SP_ERR_NOMEM, "request: out of memory for %zu bytes of text", cap);
    r->out.text = text;
    r->text_cap = cap;
    return SP_OK;
}

void sched_request_retain(sched_request *r) {
    int before = atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    SP_ASSERT(before > 0);
}

void sched_request_release(sched_request *r) {
    if (!r) return;
    int before = atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel);
    SP_ASSERT(before > 0);
    if (before != 1) return;
    if (r->kv.ids) kv_seq_free(&r->kv);
    if (r->draft_kv.ids) kv_seq_free(&r->draft_kv);
    free(r->tokens);
    free((void *)r->params.prompt);
    free(r->stop_data);
    free(r->logit_bias);
    free(r->out.text);
    free(r->out.tokens);
    free(r->out.top);
    free(r->out.embedding);
    free(r->pool);
    gram_state_destroy(r->gram);
    free(r->think_close);
    gram_grammar_destroy(r->params.grammar);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

void sched_request_set_notify(sched_request *r, sched_notify_fn fn, void *arg) {
    pthread_mutex_lock(&r->lock);
    r->notify = fn;
    r->notify_arg = fn ? arg : NULL;
    pthread_mutex_unlock(&r->lock);
}

void sched_request_cancel(sched_request *r) {
    atomic_store_explicit(&r->cancel, true, memory_order_release);
    pthread_mutex_lock(&r->lock);
    sched *s = r->out.done ? NULL : atomic_load_explicit(&r->owner, memory_order_acquire);
    if (s) sched__wake(s);
    pthread_mutex_unlock(&r->lock);
}

void sched_request_lock(sched_request *r) {
    pthread_mutex_lock(&r->lock);
}

void sched_request_unlock(sched_request *r) {
    pthread_mutex_unlock(&r->lock);
}

const sched_output *sched_request_output(const sched_request *r) {
    return &r->out;
}

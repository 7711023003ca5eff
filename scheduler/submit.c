/* submit.c: admission into the scheduler's bounded multi-producer queue: sched_submit
 * checks a unit of requests against the model, the pool and the queue's bounds (and,
 * under policy slo, its TTFT target), prepares their arrays and links them; and
 * sched_begin_shutdown, after which it refuses. queue.c has the bounds' design.
 *
 * DESIGN (threads). Any thread calls sched_submit and sched_begin_shutdown; they hold
 * s->queue.lock while they check the bounds and link the requests.
 */
#include "scheduler/sched_internal.h"

static void stat_add(_Atomic int64_t *c, int64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* What can be checked without the lock: the request against the model and the pool. */
static sp_status submit_check(const sched *s, const sched_request *r) {
    const sched_request_params *p = &r->params;
    if (r->state != SCHED_SEQ_NEW) return sp_fail(SP_ERR_INVALID_ARG, "the request was already submitted");
    if (p->n_prompt <= 0) return sp_fail(SP_ERR_INVALID_ARG, "the prompt is empty");
    for (int32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->n_vocab)
            return sp_fail(SP_ERR_INVALID_ARG, "prompt token %d (at index %d) is outside the vocabulary (0..%d)",
                           p->prompt[i], i, s->n_vocab - 1);
    int64_t total = (int64_t)p->n_prompt + p->max_tokens;
    if (total > s->cfg.max_seq_len)
        return sp_fail(SP_ERR_RANGE,
                       "this model's maximum context length is %d tokens; the prompt has %d tokens and max_tokens "
                       "is %d",
                       s->cfg.max_seq_len, p->n_prompt, p->max_tokens);
    /* (max_seq_len never exceeds the KV pool: sched_create lowers it) */
    return sample_params_validate(&p->sampling, s->n_vocab);
}

static sp_status shutdown_refusal(sched *s, int n) {
    stat_add(&s->meter.stats.rejected_shutdown, n);
    return sp_fail(SP_ERR_UNAVAILABLE, "the server is shutting down");
}

sp_status sched_submit(sched *s, sched_request *const *reqs, int n) {
    if (n <= 0) return sp_fail(SP_ERR_INVALID_ARG, "sched_submit: %d requests", n);
    pthread_mutex_lock(&s->queue.lock);
    bool shutting_down = s->queue.shutting_down;
    pthread_mutex_unlock(&s->queue.lock);
    if (shutting_down) return shutdown_refusal(s, n);

    int64_t tokens = 0;
    for (int i = 0; i < n; i++) {
        sp_status st = submit_check(s, reqs[i]);
        for (int j = 0; j < i && st == SP_OK; j++)
            if (reqs[j] == reqs[i]) st = sp_fail(SP_ERR_INVALID_ARG, "the same request is submitted twice");
        if (st != SP_OK) {
            stat_add(&s->meter.stats.rejected_invalid, n);
            return st;
        }
        tokens += reqs[i]->params.n_prompt;
    }
    /* a unit larger than the queue's bounds could never be accepted: that is the
     * request's fault (400), not a busy server's (429, retried forever) */
    if (n > s->cfg.queue_max_requests || tokens > s->cfg.queue_max_tokens) {
        stat_add(&s->meter.stats.rejected_invalid, n);
        if (n > s->cfg.queue_max_requests)
            return sp_fail(SP_ERR_INVALID_ARG, "this request needs %d sequences (n times prompts); the queue holds %d",
                           n, s->cfg.queue_max_requests);
        return sp_fail(SP_ERR_INVALID_ARG, "this request has %lld prompt tokens; the queue holds %lld",
                       (long long)tokens, (long long)s->cfg.queue_max_tokens);
    }
    /* allocate outside the lock; a later refusal leaves the arrays for a retry */
    for (int i = 0; i < n; i++) {
        sp_status st = sched__request_prepare(reqs[i], s->cfg.block_size);
        if (st == SP_OK) st = sched__embed_prepare(reqs[i], s->n_embd);
        if (st != SP_OK) return st;
        reqs[i]->kv.root = sched__request_root(reqs[i], s->cfg.prefix_cache_keyed);
    }

    pthread_mutex_lock(&s->queue.lock);
    if (s->queue.shutting_down) {
        pthread_mutex_unlock(&s->queue.lock);
        return shutdown_refusal(s, n);
    }
    int32_t queued = atomic_load_explicit(&s->queue.queued, memory_order_relaxed);
    int64_t queued_tokens = atomic_load_explicit(&s->queue.queued_tokens, memory_order_relaxed);
    if (queued + n > s->cfg.queue_max_requests) {
        pthread_mutex_unlock(&s->queue.lock);
        stat_add(&s->meter.stats.rejected_queue_requests, n);
        return sp_fail(SP_ERR_FULL, "the queue is full: %d requests are waiting (queue_max_requests is %d)", queued,
                       s->cfg.queue_max_requests);
    }
    if (queued_tokens + tokens > s->cfg.queue_max_tokens) {
        pthread_mutex_unlock(&s->queue.lock);
        stat_add(&s->meter.stats.rejected_queue_tokens, n);
        return sp_fail(SP_ERR_FULL,
                       "the queue is full: %lld prompt tokens are waiting and this request adds %lld "
                       "(queue_max_tokens is %lld)",
                       (long long)queued_tokens, (long long)tokens, (long long)s->cfg.queue_max_tokens);
    }
    sp_status slo = sched__slo_admission(s, reqs, n, queued, queued_tokens, tokens);
    if (slo != SP_OK) {
        pthread_mutex_unlock(&s->queue.lock);
        return slo;
    }
    for (int i = 0; i < n; i++) {
        sched_request *r = reqs[i];
        sched_request_retain(r); /* the scheduler's reference */
        double timeout = r->params.timeout_s > 0 ? r->params.timeout_s : s->cfg.request_timeout_s;
        r->deadline = timeout > 0 ? r->out.timings.arrival + timeout : 0;
        r->arrival_no = s->queue.next_arrival_no++;
        r->group = reqs[0]->arrival_no; /* reqs[0] is numbered first */
        r->turn = atomic_load_explicit(&s->queue.turn_admitted, memory_order_relaxed) + i;
        r->in_queue_count = true;
        r->state = SCHED_SEQ_QUEUED;
        r->next = NULL;
        r->prev = s->queue.tail;
        if (s->queue.tail)
            s->queue.tail->next = r;
        else
            s->queue.head = r;
        s->queue.tail = r;
        atomic_store_explicit(&r->owner, s, memory_order_release);
    }
    atomic_fetch_add_explicit(&s->queue.queued, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->queue.queued_tokens, tokens, memory_order_relaxed);
    s->queue.wake_pending = true;
    pthread_cond_signal(&s->queue.wake);
    pthread_mutex_unlock(&s->queue.lock);
    stat_add(&s->meter.stats.submitted, n);
    return SP_OK;
}

void sched_begin_shutdown(sched *s) {
    pthread_mutex_lock(&s->queue.lock);
    s->queue.shutting_down = true;
    pthread_mutex_unlock(&s->queue.lock);
}

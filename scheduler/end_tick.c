/* end_tick.c: what happens to a sequence once the step gave it logits and dev_sample
 * (which runs where the logits are) drew its token from the row draw.c described: append
 * the token it chose, detokenize incrementally, match stop strings, decide whether it
 * finished, and publish all of it to the request's output in one locked section; and the
 * common end of every request (finished, cancelled, timed out, shut down).
 *
 * Per sampled token, in this order (1-3 inside dev_sample, from draw.c's row):
 *   1. logprobs from the raw logits when asked (top_logprobs >= 0): log-sum-exp, the
 *      alternatives, and later the chosen token's log-probability;
 *   2. end-of-generation ids masked while fewer than min_tokens were generated (unless
 *      ignore_eos, where they are ordinary tokens);
 *   3. logit bias and penalties, then the draw with the generator of the token's
 *      position (sample_rng_at: a pure function of seed and position, so a draft
 *      row's draw is the one one-at-a-time decoding would make there);
 *   4. end-of-generation (finish STOP: counted in completion_tokens, no text, not in
 *      output.tokens), max_tokens or max_seq_len (LENGTH), else text: the decoder's
 *      piece goes through stop matching (from min_tokens on), which commits what can
 *      no longer be part of a stop string (STOP at a match: the text before it).
 * Held text is committed when the sequence ends for a reason other than a stop match
 * (STOP by end-of-generation, LENGTH); it is dropped on CANCELLED and ERROR.
 *
 * DESIGN (threads). Scheduler thread (sched_destroy's thread after the join). The
 * output is written only under the request's lock, and the notify callback is called
 * at the end of that same locked section.
 */
#include <math.h>
#include <string.h>

#include "common/assert.h"
#include "scheduler/sched_internal.h"

static void stat_add(_Atomic int64_t *c, int64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Sets the end fields of the output; the request's lock is held. */
static void output_finish_locked(sched_request *r, sched_finish f, sp_status err, const char *msg, double now) {
    r->out.done = true;
    r->out.finish = f;
    if (f == SCHED_FINISH_ERROR) {
        r->out.error = err;
        snprintf(r->out.error_message, sizeof r->out.error_message, "%s", msg ? msg : sp_status_str(err));
    }
    r->out.timings.finished = now;
}

/* The request's outcome in the counters (finished, errors, goodput, the latency
 * histograms). Called with r's lock held, before the notify: a client that has read its
 * whole answer then finds it counted in /metrics. */
static void request_count_locked(sched *s, const sched_request *r, sched_finish f, sp_status err) {
    const bool generation = r->params.pooling == SP_POOLING_NONE;
    switch (f) {
    case SCHED_FINISH_STOP:
    case SCHED_FINISH_LENGTH:
        stat_add(&s->meter.stats.finished, 1);
        sched__metrics_observe_finished(&s->meter.hist, &r->out.timings); /* done: only this thread wrote it */
        if (generation) sched__slo_finished(s, r, true);
        break;
    case SCHED_FINISH_CANCELLED: stat_add(&s->meter.stats.cancelled, 1); break;
    case SCHED_FINISH_ERROR:
        stat_add(&s->meter.stats.errors, 1);
        if (generation) sched__slo_finished(s, r, false);
        if (err == SP_ERR_TIMEOUT) stat_add(&s->meter.stats.timeouts, 1);
        break;
    case SCHED_FINISH_NONE: SP_ASSERT(!"a request ends with a finish reason"); break;
    }
}

/* After the output says done: blocks back to the pool, a finished answer to the suffix
 * cache, the scheduler's reference dropped. r must not be running any more. */
static void request_retire(sched *s, sched_request *r, sched_finish f) {
    kv_blocks_release(&s->cache.blocks, &r->kv);
    sched__spec_release(s, r);
    sched__queue_uncount(s, r);
    r->state = SCHED_SEQ_DONE;
    /* an embedding's prompt is no output the suffix cache should offer */
    if ((f == SCHED_FINISH_STOP || f == SCHED_FINISH_LENGTH) && r->params.pooling == SP_POOLING_NONE)
        sched__spec_remember(s, r);
    sched_request_release(r);
}

void sched__request_end(sched *s, sched_request *r, sched_finish f, sp_status err, const char *msg) {
    if (r->swapped) { /* ended while waiting to come back */
        r->swapped = false;
        atomic_fetch_sub_explicit(&s->meter.stats.swapped, 1, memory_order_relaxed);
    }
    pthread_mutex_lock(&r->lock);
    output_finish_locked(r, f, err, msg, sched_now());
    request_count_locked(s, r, f, err);
    if (r->notify) r->notify(r->notify_arg);
    pthread_mutex_unlock(&r->lock);
    request_retire(s, r, f);
}

/* The thinking budget: follows <think> and </think> through the text of each token (a
 * tag may be cut across tokens: the last bytes are kept), counts the tokens inside, and
 * once the budget is spent starts forcing think_close (tick.c masks the rows). */
static void thinking_follow(sched_request *r, const char *piece, size_t n) {
    if (r->params.max_reasoning_tokens <= 0) return;
    if (r->force_at < r->params.n_think_close && ++r->force_at == r->params.n_think_close) {
        r->thinking = 2; /* forced </think> complete, whether or not its text shows (a control token) */
        return;
    }
    char buf[sizeof r->tag_tail + 64];
    size_t keep = strnlen(r->tag_tail, sizeof r->tag_tail);
    size_t take = n < 64 ? n : 64;
    memcpy(buf, r->tag_tail, keep);
    memcpy(buf + keep, piece + n - take, take);
    size_t len = keep + take;
    if (r->thinking == 0 && memmem(buf, len, "<think>", 7)) r->thinking = 1;
    if (r->thinking == 1 && memmem(buf, len, "</think>", 8)) {
        r->thinking = 2;
        r->force_at = r->params.n_think_close;
    }
    size_t tail = len < sizeof r->tag_tail - 1 ? len : sizeof r->tag_tail - 1;
    memcpy(r->tag_tail, buf + len - tail, tail);
    r->tag_tail[tail] = '\0';
    if (r->thinking != 1) return;
    r->reasoning_tokens++;
    if (r->reasoning_tokens >= r->params.max_reasoning_tokens && r->force_at == r->params.n_think_close)
        r->force_at = 0;
}

bool sched__emit(sched *s, sched_request *r, const dev_sample_result *drawn, double now) {
    const sched_request_params *p = &r->params;
    const int32_t tok = drawn->token;
    const float logprob = drawn->logprob;
    SP_ASSERT(r->n_tokens < p->n_prompt + p->max_tokens);
    r->tokens[r->n_tokens++] = tok;
    int32_t n_generated = r->n_tokens - p->n_prompt;

    bool eog = !p->ignore_eos && tok_is_eog(s->vocab, tok);
    /* the grammar: every token advances it (the mask allowed only such tokens, so a
     * refusal means the state hit a bound); complete, the answer is over */
    bool grammar_refused = r->gram && !gram_state_advance_token(r->gram, s->grammar.vocab, tok);
    bool complete = r->gram && !grammar_refused && !eog && gram_state_finished(r->gram);
    bool length = !eog && !complete && (n_generated >= p->max_tokens || r->n_tokens >= s->cfg.max_seq_len);
    size_t n_piece = 0;
    if (!eog) n_piece = tok_decoder_push(s->vocab, &r->dec, tok, s->piece, s->piece_cap);
    if (!eog && r->params.max_reasoning_tokens > 0) { /* the token's own bytes (the decoder may hold some back) */
        char raw[256];
        size_t n_raw = tok_token_bytes(s->vocab, tok, false, raw, sizeof raw);
        thinking_follow(r, raw, n_raw < sizeof raw ? n_raw : sizeof raw); /* a tag past 256 bytes: not seen */
    }
    if (eog || length || complete) n_piece += tok_decoder_flush(&r->dec, s->piece + n_piece, s->piece_cap);

    const char *commit = s->piece;
    size_t n_commit = n_piece;
    bool stopped = false;
    if (p->n_stop > 0 && n_generated >= p->min_tokens) {
        stopped =
            sched__stop_feed(&r->stop, r->stops, r->stop_lens, p->n_stop, s->piece, n_piece, s->text_work, &n_commit);
        commit = s->text_work;
        if (!stopped && (eog || length || complete)) n_commit += sched__stop_flush(&r->stop, s->text_work + n_commit);
    }
    sched_finish finish = stopped || eog || complete ? SCHED_FINISH_STOP
                          : length                   ? SCHED_FINISH_LENGTH
                                                     : SCHED_FINISH_NONE;
    sp_status err = SP_OK;
    if (grammar_refused) { /* the refused token is not part of the answer */
        finish = SCHED_FINISH_ERROR;
        n_commit = 0;
        err = sp_fail(SP_ERR_INVALID_ARG, "the output reached a bound of its grammar (--grammar-max-depth, or its "
                                          "ambiguity) where no token could continue it");
    }

    pthread_mutex_lock(&r->lock);
    sched_output *o = &r->out;
    if (!eog && !grammar_refused) {
        o->tokens[o->n_tokens] = (sched_token){tok, logprob};
        for (int k = 0; k < o->top_logprobs; k++)
            o->top[(size_t)o->n_tokens * (size_t)o->top_logprobs + (size_t)k] =
                (sched_token){drawn->top[k].id, drawn->top[k].logprob};
        o->n_tokens++;
    }
    if (n_commit > 0) {
        err = sched__output_reserve_text(r, n_commit);
        if (err == SP_OK) {
            memcpy(o->text + o->text_len, commit, n_commit);
            o->text_len += n_commit;
            o->text[o->text_len] = '\0';
        } else {
            finish = SCHED_FINISH_ERROR;
        }
    }
    o->completion_tokens = n_generated;
    if (stopped) o->stop_matched = r->stop.matched + 1; /* which one: Anthropic's stop_sequence */
    if (o->timings.first_token == 0) o->timings.first_token = now;
    stat_add(&s->meter.stats.generated_tokens, 1); /* counted before the client can see it */
    if (finish != SCHED_FINISH_NONE) {
        output_finish_locked(r, finish, err, sp_last_error(), now);
        request_count_locked(s, r, finish, err);
    }
    if (r->notify) r->notify(r->notify_arg);
    pthread_mutex_unlock(&r->lock);

    if (r->last_token_at > 0) sched__metrics_observe(&s->meter.hist, SCHED_HIST_INTER_TOKEN, now - r->last_token_at);
    r->last_token_at = now;
    if (finish == SCHED_FINISH_NONE) return true;
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            sched__running_remove(s, i);
            break;
        }
    request_retire(s, r, finish);
    return false;
}

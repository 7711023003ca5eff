/* tick.c: one tick of the scheduler: plan, the lanes fused into one device step, and
 * the hand-off of each sequence's logits to end_tick.c.
 *
 *   plan     drop requests that were cancelled or passed their deadline (waiting or
 *            running), with their end.
 *   Decode   every running sequence whose feed is one sampled token: it needs a block
 *            for that position; when none is free, the policy's victim is preempted
 *            (blocks freed, generated tokens, sampler, decoder and stop state kept; back
 *            to the waiting list, later recomputed by prefilling prompt + generated).
 *            Rows are shared fairly between submissions (plan_decode); then each
 *            chosen sequence may add draft rows (spec_tick.c) from the rows that
 *            decode and this tick's prefill leave.
 *   Continue prefills of admitted sequences, oldest first, then
 *   Start    admit from the waiting list in policy order while max_batch_size allows
 *            and the pool holds the whole feed's blocks plus the watermark (all of
 *            them are allocated at admission), each admitted sequence getting a chunk.
 *            A feed whose leading full blocks are in the prefix cache (kvcache/kv_blocks.c)
 *            shares them and starts computing after them.
 *            Prefill chunks share max_prefill_tokens; the step holds at most
 *            max_batch_tokens tokens, decode rows first.
 *   step     one model_forward_sample_hidden; logits only for rows that complete a sequence's
 *            feed, each drawn from where it was computed (dev_sample: only tokens come back);
 *            constrained rows' grammar masks are computed meanwhile (masks.c) and
 *            awaited before the first draw;
 *            the full blocks it completed are registered in the prefix cache. An embedding
 *            (embed.c) is prefill-only work in the same lanes: its chunks want the final
 *            hidden states of the rows its pooling keeps instead of logits, it neither
 *            starts from nor enters the prefix cache, and once its prompt is in it ends
 *            and its blocks go back to the pool.
 *   end_tick draw (draw.c), append, detokenize, stop (end_tick.c); a decode row's
 *            drafts are verified first and the accepted run emitted (spec_tick.c).
 *
 * A sequence's tokens depend only on its own prompt, parameters and seed: the CPU
 * backend computes each row independently of the batch, a recomputed or chunked
 * prefill writes the same K/V as an unchunked one, and every draw's generator is a pure
 * function of the sequence's seed and the token's position (sample_rng_at), so drafts
 * verified in one step choose what one-at-a-time decoding would.
 *
 * DESIGN (threads). Everything here runs on the scheduler thread, but for the grammar
 * masks of a step (masks.c's worker, between start and wait); the only shared things it
 * touches are a request's output (under the request's lock), the cancel flags and the
 * atomic counters.
 */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/log.h"
#include "scheduler/sched_internal.h"

/* Counts of the step being built. */
typedef struct step_build {
    int32_t n_tokens, n_seqs, n_logits, n_hidden;
} step_build;

static void stat_add(_Atomic int64_t *c, int64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* A sequence whose only pending token is the one it sampled last. */
static bool seq_is_decode(const sched_request *r) {
    return r->n_tokens - r->n_computed == 1 && r->n_tokens > r->params.n_prompt;
}

/* Ends requests whose cancel flag is set or whose deadline passed. */
static void plan_drop_ended(sched *s, double now) {
    char msg[128];
    for (int i = 0; i < s->n_running; i++) {
        sched_request *r = s->running[i];
        bool cancelled = atomic_load_explicit(&r->cancel, memory_order_acquire);
        bool late = !cancelled && r->deadline > 0 && now >= r->deadline;
        if (!cancelled && !late) continue;
        sched__running_remove(s, i--);
        if (cancelled) {
            sched__request_end(s, r, SCHED_FINISH_CANCELLED, SP_OK, NULL);
        } else {
            snprintf(msg, sizeof msg, "the request exceeded its timeout of %g s", r->deadline - r->out.timings.arrival);
            sched__request_end(s, r, SCHED_FINISH_ERROR, SP_ERR_TIMEOUT, msg);
        }
    }
    for (sched_request *r = s->queue.wait_head, *next; r; r = next) {
        next = r->next;
        bool cancelled = atomic_load_explicit(&r->cancel, memory_order_acquire);
        bool late = !cancelled && r->deadline > 0 && now >= r->deadline;
        if (!cancelled && !late) continue;
        sched__waiting_remove(s, r);
        if (cancelled) {
            sched__request_end(s, r, SCHED_FINISH_CANCELLED, SP_OK, NULL);
        } else {
            snprintf(msg, sizeof msg, "the request exceeded its timeout of %g s", r->deadline - r->out.timings.arrival);
            sched__request_end(s, r, SCHED_FINISH_ERROR, SP_ERR_TIMEOUT, msg);
        }
    }
}

/* Frees running[i]'s blocks and puts it back on the waiting list for recomputation. */
static void tick_preempt(sched *s, int i) {
    sched_request *r = s->running[i];
    sched__running_remove(s, i);
    kv_blocks_release(&s->cache.blocks, &r->kv);
    sched__spec_release(s, r);
    r->n_computed = 0;
    r->state = SCHED_SEQ_WAITING;
    r->swapped = true;
    atomic_fetch_add_explicit(&s->meter.stats.swapped, 1, memory_order_relaxed);
    sched__waiting_insert(s, r);
    pthread_mutex_lock(&r->lock);
    r->out.preemptions++;
    pthread_mutex_unlock(&r->lock);
    stat_add(&s->meter.stats.preemptions, 1);
    sp_log_debug("sched: preempted a sequence of %d tokens (%d running)", r->n_tokens, s->n_running);
}

/* Gives every decoding sequence the block its next position needs, preempting the
 * policy's victims while the pool is empty (possibly the sequence itself). */
static void decode_reserve_blocks(sched *s) {
    for (int i = 0; i < s->n_running; i++) {
        sched_request *r = s->running[i];
        if (!seq_is_decode(r)) continue;
        int32_t need = kv_blocks_for_tokens(r->n_tokens, s->cfg.block_size);
        while (!kv_blocks_grow(&s->cache.blocks, &r->kv, need)) {
            int v = sched__policy_victim(s->cfg.policy, s->running, s->n_running, s->tick_no);
            tick_preempt(s, v);
            if (v == i) { /* r itself went back to waiting */
                i--;
                break;
            }
            if (v < i) i--; /* r moved down one */
        }
    }
}

/* Appends chunk tokens of r's pending feed to the step, then n_draft draft tokens
 * (r->tokens past n_tokens) with logits for each of them too. */
static void step_add(sched *s, step_build *b, sched_request *r, int32_t chunk, bool prefill, int32_t n_draft,
                     int proposer) {
    int32_t q = b->n_seqs++;
    chunk += n_draft;
    SP_ASSERT(q < s->cfg.max_batch_size && b->n_tokens + chunk <= s->cfg.max_batch_tokens);
    for (int32_t j = 0; j < chunk; j++) {
        int32_t t = b->n_tokens++;
        s->step_tokens[t] = r->tokens[r->n_computed + j];
        s->step_pos[t] = r->n_computed + j;
        s->step_seq[t] = q;
    }
    int32_t seq_len = r->n_computed + chunk;
    SP_ASSERT((int64_t)r->kv.n * s->cfg.block_size >= seq_len);
    s->step_reqs[q] = r;
    s->step_chunk[q] = chunk;
    s->step_prefill[q] = prefill;
    s->step_n_draft[q] = n_draft;
    s->step_proposer[q] = (int8_t)proposer;
    s->step_seq_len[q] = seq_len;
    memcpy(s->step_block_table + (size_t)q * (size_t)s->max_blocks_per_seq, r->kv.ids,
           sizeof(int32_t) * (size_t)r->kv.n);
    s->step_hidden_n[q] = 0;
    if (r->params.pooling != SP_POOLING_NONE) { /* an embedding: hidden rows, never logits */
        int32_t first_pos, chunk_start = b->n_tokens - chunk;
        int32_t n = sched__pool_rows(r->params.pooling, r->n_computed, chunk, r->params.n_prompt, &first_pos);
        SP_ASSERT(b->n_hidden + n <= s->cfg.max_prefill_tokens);
        s->step_hidden_of[q] = b->n_hidden;
        s->step_hidden_n[q] = n;
        for (int32_t j = 0; j < n; j++)
            s->step_hidden_rows[b->n_hidden++] = chunk_start + first_pos - r->n_computed + j;
        s->step_logit_of[q] = -1;
    } else if (seq_len == r->n_tokens + n_draft) { /* the feed's last row, and every draft row */
        s->step_logit_of[q] = b->n_logits;
        for (int32_t j = n_draft; j >= 0; j--) s->step_logit_rows[b->n_logits++] = b->n_tokens - 1 - j;
    } else {
        s->step_logit_of[q] = -1;
    }
}

/* Prefix cache: the cached blocks r's feed can start from, into s->cache.match_ids. At
 * least its last token is computed (its logits are needed), so at most
 * (n_tokens - 1) / B blocks. */
static int32_t admit_match(sched *s, const sched_request *r, int32_t *unheld) {
    if (r->params.pooling != SP_POOLING_NONE) { /* an embedding computes every position */
        *unheld = 0;
        return 0;
    }
    int32_t max_blocks = (r->n_tokens - 1) / s->cfg.block_size;
    return kv_prefix_match(&s->cache.blocks, r->kv.root, r->tokens, max_blocks, s->cache.match_ids, unheld);
}

/* Whether the waiting list's head fits now: its whole feed, less the cached blocks it
 * shares, plus the watermark (waived when nothing runs, so a request that fits the
 * pool always runs). Leaves the match in s->cache.match_ids / s->cache.n_match for admit. */
static bool admit_fits(sched *s, const sched_request *r) {
    int32_t unheld = 0;
    s->cache.n_match = admit_match(s, r, &unheld);
    s->cache.n_tier_match =
        r->params.pooling != SP_POOLING_NONE
            ? 0
            : sched__tiers_match(s, r->kv.root, r->tokens, s->cache.n_match, (r->n_tokens - 1) / s->cfg.block_size);
    int32_t need = kv_blocks_for_tokens(r->n_tokens, s->cfg.block_size) - s->cache.n_match;
    int32_t available = kv_blocks_available(&s->cache.blocks) - unheld; /* shared unheld blocks leave the pool */
    if (available < need) return false;
    return s->n_running == 0 || available - need >= s->cache.watermark_blocks;
}

/* Admits r with the match admit_fits just made: the shared blocks are computed
 * already, the rest are allocated now. */
static void admit(sched *s, sched_request *r, double now) {
    sched__waiting_remove(s, r);
    kv_prefix_take(&s->cache.blocks, &r->kv, s->cache.match_ids, s->cache.n_match, r->tokens);
    bool ok = kv_blocks_grow(&s->cache.blocks, &r->kv, kv_blocks_for_tokens(r->n_tokens, s->cfg.block_size));
    SP_ASSERT(ok);
    /* the chain goes on in the host and disk tiers: those blocks are reloaded, not computed */
    int32_t reloaded =
        s->cache.n_tier_match > 0 ? sched__tiers_reload(s, r, s->cache.n_match, s->cache.n_tier_match) : 0;
    int32_t cached = (s->cache.n_match + reloaded) * s->cfg.block_size;
    if (r->swapped) {
        r->swapped = false;
        r->resumed_tick = s->tick_no > 0 ? s->tick_no : 1;
        atomic_fetch_sub_explicit(&s->meter.stats.swapped, 1, memory_order_relaxed);
        if (cached > 0) stat_add(&s->meter.stats.swap_resumes, 1);
    }
    r->n_computed = cached;
    if (r->pool) memset(r->pool, 0, sizeof *r->pool * (size_t)s->n_embd); /* an embedding pools afresh */
    if (s->cache.blocks.caching) {
        stat_add(&s->meter.stats.prefix_query_tokens, r->n_tokens);
        stat_add(&s->meter.stats.prefix_hit_tokens, cached);
        stat_add(&s->meter.stats.prompt_tokens, cached); /* processed without computing */
    }
    r->state = SCHED_SEQ_RUNNING;
    if (r->turn > atomic_load_explicit(&s->queue.turn_admitted, memory_order_relaxed))
        atomic_store_explicit(&s->queue.turn_admitted, r->turn, memory_order_relaxed);
    s->running[s->n_running++] = r;
    atomic_store_explicit(&s->meter.stats.running, s->n_running, memory_order_relaxed);
    sched__queue_uncount(s, r);
    pthread_mutex_lock(&r->lock);
    if (r->out.timings.admitted == 0) { /* first admission (not a preempted one's return) */
        r->out.timings.admitted = now;
        r->out.cached_tokens = cached < r->params.n_prompt ? cached : r->params.n_prompt; /* of the prompt */
        sched__metrics_observe(&s->meter.hist, SCHED_HIST_QUEUE, now - r->out.timings.arrival);
    }
    int32_t cached_prompt = cached < r->params.n_prompt ? cached : r->params.n_prompt;
    if (cached_prompt > r->out.prefilled) r->out.prefilled = cached_prompt;
    pthread_mutex_unlock(&r->lock);
}

/* Decode candidates by submission, and within one the longest since its last row first. */
static int cmp_decode_candidates(const void *pa, const void *pb) {
    const sched_request *a = *(sched_request *const *)pa, *b = *(sched_request *const *)pb;
    if (a->group != b->group) return a->group < b->group ? -1 : 1;
    if (a->last_decode_tick != b->last_decode_tick) return a->last_decode_tick < b->last_decode_tick ? -1 : 1;
    return a->arrival_no < b->arrival_no ? -1 : a->arrival_no > b->arrival_no;
}

/* How many of the sorted candidates from i on belong to candidate i's submission. */
static int group_run(sched_request *const *c, int i, int n) {
    int run = 1;
    while (i + run < n && c[i + run]->group == c[i]->group) run++;
    return run;
}

/* The prefill rows this tick would take: pending feeds of running sequences and the
 * waiting list's head, up to max_prefill_tokens. */
static int32_t prefill_demand(const sched *s) {
    int64_t demand = 0;
    for (int i = 0; i < s->n_running; i++)
        if (!seq_is_decode(s->running[i])) demand += s->running[i]->n_tokens - s->running[i]->n_computed;
    if (s->queue.wait_head && s->n_running < s->cfg.max_batch_size) demand += s->queue.wait_head->n_tokens;
    return demand < s->cfg.max_prefill_tokens ? (int32_t)demand : s->cfg.max_prefill_tokens;
}

/* The decode rows, shared fairly between submissions (HTTP requests): when sequences of
 * more than one decode, a submission adds at most max(SCHED_FAIR_DECODE_ROWS, the rows of
 * the largest other one), those that waited longest first; the rest wait a tick. So 64
 * sequences of one request do not make every step 64 rows long for a one-sequence
 * request beside them, while a lone request, or many small ones, decode all at once.
 * Waiting a tick changes no token: each row's result is its own (batch invariance). */
static void plan_decode(sched *s, step_build *b) {
    int n = 0;
    for (int i = 0; i < s->n_running; i++)
        if (seq_is_decode(s->running[i])) s->decode_candidates[n++] = s->running[i];
    if (n == 0) return;
    qsort(s->decode_candidates, (size_t)n, sizeof *s->decode_candidates, cmp_decode_candidates);
    /* the two largest submissions' row counts */
    int largest = 0, second = 0, groups = 0;
    for (int i = 0, run; i < n; i += run) {
        run = group_run(s->decode_candidates, i, n);
        groups++;
        if (run > largest) {
            second = largest;
            largest = run;
        } else if (run > second) {
            second = run;
        }
    }
    s->tick_no++;
    int chosen = 0; /* compacted to the front of decode_candidates */
    for (int i = 0, run; i < n; i += run) {
        run = group_run(s->decode_candidates, i, n);
        int others = run == largest ? second : largest; /* the largest other submission */
        int cap = groups == 1 ? run : others > SCHED_FAIR_DECODE_ROWS ? others : SCHED_FAIR_DECODE_ROWS;
        for (int k = 0; k < run && k < cap && chosen < s->cfg.max_batch_tokens; k++) {
            sched_request *r = s->decode_candidates[i + k];
            r->last_decode_tick = s->tick_no;
            s->decode_candidates[chosen++] = r;
        }
    }
    /* drafts take the rows the decode rows and this tick's prefill leave */
    int32_t spare = s->cfg.max_batch_tokens - chosen - prefill_demand(s);
    sched__spec_plan(s, s->decode_candidates, chosen, spare, s->step_n_draft + b->n_seqs, s->step_proposer + b->n_seqs);
    for (int i = 0; i < chosen; i++) {
        int32_t q = b->n_seqs;
        step_add(s, b, s->decode_candidates[i], 1, false, s->step_n_draft[q], s->step_proposer[q]);
    }
}

/* Builds the step: decode rows, then continuing prefills, then admitted ones. */
static void plan_step(sched *s, step_build *b, double now) {
    decode_reserve_blocks(s);
    plan_decode(s, b);

    int32_t budget = s->cfg.max_batch_tokens - b->n_tokens;
    if (budget > s->cfg.max_prefill_tokens) budget = s->cfg.max_prefill_tokens;
    budget = sched__slo_prefill_budget(s, budget, b->n_seqs, now); /* policy slo: decodes' deadlines first */
    for (int i = 0; i < s->n_running && budget > 0; i++) {
        sched_request *r = s->running[i];
        if (seq_is_decode(r)) continue;
        int32_t pending = r->n_tokens - r->n_computed;
        int32_t chunk = pending < budget ? pending : budget;
        step_add(s, b, r, chunk, true, 0, -1);
        budget -= chunk;
    }
    sched_request *r;
    int admitted = 0;
    for (bool first = true; budget > 0 && s->n_running < s->cfg.max_batch_size; first = false) {
        if (!(r = sched__slo_next(s, first)) || !admit_fits(s, r)) break;
        admit(s, r, now);
        admitted++;
        int32_t pending = r->n_tokens - r->n_computed;
        int32_t chunk = pending < budget ? pending : budget;
        step_add(s, b, r, chunk, true, 0, -1);
        budget -= chunk;
    }
    sched__slo_observe_admissions(s, admitted, now);
}

/* Ends every sequence of a step that failed. */
static void step_fail(sched *s, const step_build *b, sp_status st) {
    char msg[256];
    snprintf(msg, sizeof msg, "the forward pass failed: %s", sp_last_error());
    sp_log_error("sched: %s", msg);
    if (st == SP_ERR_DEVICE && !atomic_load_explicit(&s->meter.device_fault, memory_order_relaxed)) {
        /* a device fault does not heal: /health and the watchdog report it from now on */
        snprintf(s->meter.device_fault_msg, sizeof s->meter.device_fault_msg, "%s", sp_last_error());
        atomic_store_explicit(&s->meter.device_fault, true, memory_order_release);
    }
    for (int32_t q = 0; q < b->n_seqs; q++) {
        sched_request *r = s->step_reqs[q];
        for (int i = 0; i < s->n_running; i++)
            if (s->running[i] == r) {
                sched__running_remove(s, i);
                break;
            }
        sched__request_end(s, r, SCHED_FINISH_ERROR, st, msg);
    }
}

/* r's rows of the step drawn without its grammar (masks.c, BUDGET AND LATE MASKS): no
 * token is emitted and the fed position stays uncounted (a prefill's last position was
 * left out by the caller; a decode row's never counts before the verify), so the next step
 * feeds it again; the drafts' blocks go back. Over its budget, or late too many steps in a
 * row, r ends with an error. */
static void mask_missed(sched *s, sched_request *r, bool prefill) {
    if (!prefill) {
        sched__draft_rollback(s, r, r->n_computed);
        kv_blocks_truncate(&s->cache.blocks, &r->kv, kv_blocks_for_tokens(r->n_tokens, s->cfg.block_size));
    }
    const bool over = r->mask_outcome == GRAM_MASK_OVER_BUDGET;
    if (!over && r->mask_late < SCHED_MASK_LATE_STEPS) return;
    char msg[256];
    snprintf(msg, sizeof msg,
             over ? "the output constraint is too costly to follow: the mask of output token %d needed more work "
                    "than a token's mask may take"
                  : "the output constraint is too costly to follow: the mask of output token %d was not ready in "
                    "time for several steps in a row",
             r->n_tokens - r->params.n_prompt + 1);
    sp_log_warn("sched: %s", msg);
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            sched__running_remove(s, i);
            break;
        }
    sched__request_end(s, r, SCHED_FINISH_ERROR, SP_ERR_RANGE, msg);
}

/* Metrics of a tick that ran a step (counted in stats.ticks): its duration from
 * `start` and its tokens. */
static void tick_observe(sched *s, double start, const step_build *b) {
    sched__metrics_observe(&s->meter.hist, SCHED_HIST_TICK, sched_now() - start);
    sched__metrics_observe(&s->meter.hist, SCHED_HIST_TOKENS_PER_TICK, b->n_tokens);
}

bool sched__tick(sched *s) {
    double now = sched_now();
    plan_drop_ended(s, now);
    if (s->n_running == 0 && !s->queue.wait_head) return false;

    step_build b = {0};
    plan_step(s, &b, now);
    if (b.n_tokens == 0) return false; /* nothing could run: wait as when idle */

    dev_step step = {
        .n_tokens = b.n_tokens,
        .tokens = s->step_tokens,
        .pos = s->step_pos,
        .seq = s->step_seq,
        .n_seqs = b.n_seqs,
        .seq_len = s->step_seq_len,
        .block_table = s->step_block_table,
        .max_blocks = s->max_blocks_per_seq,
        .n_logits = b.n_logits,
        .logit_rows = s->step_logit_rows,
        .n_hidden = b.n_hidden,
        .hidden_rows = s->step_hidden_rows,
    };
    size_t n_masks = 0;
    for (int32_t q = 0; q < b.n_seqs; q++) {
        if (s->step_logit_of[q] < 0) continue;
        sched_request *r = s->step_reqs[q];
        r->mask_outcome = GRAM_MASK_OK; /* until its mask job says otherwise */
        for (int32_t j = 0; j <= s->step_n_draft[q]; j++)
            sched__sample_row(s, r, j, &s->sample_rows[s->step_logit_of[q] + j]);
        if (r->force_at < r->params.n_think_close) { /* the thinking budget is spent: </think>, token by token */
            SP_ASSERT(s->step_n_draft[q] == 0 && n_masks < s->grammar.max_mask_rows);
            uint32_t *mask = s->grammar.step_masks + n_masks++ * s->grammar.mask_words;
            int32_t id = r->params.think_close[r->force_at];
            memset(mask, 0, s->grammar.mask_words * sizeof *mask);
            mask[id >> 5] = 1u << (id & 31);
            s->sample_rows[s->step_logit_of[q]].allowed = mask;
        } else if (r->gram) { /* computed while the step runs (masks.c) */
            sched__masks_add(s, r, s->step_n_draft[q], &s->sample_rows[s->step_logit_of[q]], &n_masks);
        }
    }
    const dev_sample_vocab vocab = {s->n_vocab, s->eog_ids, s->n_eog};
    const model_sample_hook masks_ready = {sched__masks_wait, s};
    double t0 = sched_now();
    sched__masks_start(s);
    sp_status st = model_forward_sample_hidden(s->m, s->cache.pool, &step, &vocab, s->sample_rows, s->sample_results,
                                               s->step_hidden, &masks_ready);
    sched__masks_wait(s); /* also when the step failed before drawing */
    double t1 = sched_now();
    stat_add(&s->meter.stats.ticks, 1);
    if (st != SP_OK) {
        step_fail(s, &b, st);
        tick_observe(s, now, &b);
        return true;
    }

    int64_t prefilled = 0, delivered = 0, drafts[SCHED_SPEC_PROPOSERS] = {0};
    double depth = 0;
    bool decode_only = true;
    for (int32_t q = 0; q < b.n_seqs; q++) {
        sched_request *r = s->step_reqs[q];
        const bool embedding = r->params.pooling != SP_POOLING_NONE;
        /* its mask was late or over its budget: the rows drawn from it are dropped, and the
         * fed position (the last) is fed again next step (masks.c, BUDGET AND LATE MASKS) */
        const bool missed = r->gram && s->step_logit_of[q] >= 0 && r->mask_outcome != GRAM_MASK_OK;
        if (s->step_prefill[q]) {
            r->n_computed += s->step_chunk[q] - (missed ? 1 : 0);
            if (!embedding) kv_prefix_register(&s->cache.blocks, &r->kv, r->tokens, r->n_computed);
            prefilled += s->step_chunk[q];
            decode_only = false;
        }
        int32_t prompt_done = r->n_computed < r->params.n_prompt ? r->n_computed : r->params.n_prompt;
        pthread_mutex_lock(&r->lock);
        if (s->step_prefill[q])
            r->out.timings.prefill_s += t1 - t0;
        else
            r->out.timings.decode_s += t1 - t0;
        if (prompt_done > r->out.prefilled) r->out.prefilled = prompt_done;
        pthread_mutex_unlock(&r->lock);
        if (embedding) {
            sched__embed_step(s, r, s->step_hidden + (size_t)s->step_hidden_of[q] * (size_t)s->n_embd,
                              s->step_hidden_n[q]);
            continue;
        }
        if (missed) {
            mask_missed(s, r, s->step_prefill[q]);
            continue;
        }
        const dev_sample_result *results = s->step_logit_of[q] >= 0 ? &s->sample_results[s->step_logit_of[q]] : NULL;
        if (s->step_prefill[q]) {
            if (results) sched__emit(s, r, results, t1);
            continue;
        }
        /* a decode row, perhaps with drafts after it */
        depth += r->n_tokens;
        if (s->step_proposer[q] >= 0) drafts[s->step_proposer[q]] += s->step_n_draft[q];
        delivered += sched__spec_verify(s, r, s->step_n_draft[q], s->step_proposer[q], results, t1);
    }
    stat_add(&s->meter.stats.prompt_tokens, prefilled);
    sched__slo_observe_step(s, t1 - t0, prefilled, b.n_tokens);
    if (decode_only)
        sched__spec_observe(s, b.n_seqs, depth / b.n_seqs, sched_now() - now, delivered, drafts);
    else
        sched__spec_charge(s);
    tick_observe(s, now, &b);
    return true;
}

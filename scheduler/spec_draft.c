/* spec_draft.c: the draft-model proposer. A smaller model of the same vocabulary (for
 * example the target's own Q4_1, from `spindle quantize`) guesses the next k tokens of
 * the sequences the cheap proposers had nothing for; the target verifies them in its step
 * as it does every draft (spec_tick.c).
 *
 * The drafter keeps its own KV pool (--draft-kv-cache-mb, block ids in s->spec.draft_blocks,
 * no prefix cache) and, per sequence, how many leading tokens it has computed
 * (r->draft_computed). Each tick, for the sequences handed to it:
 *   round 0  one batched draft step feeds each sequence what the drafter has not seen,
 *            ending with its last token (a new sequence's whole prompt: a chunked
 *            prefill, within max_batch_tokens, that may take several ticks before that
 *            sequence drafts); a sequence whose feed fit gets logits and its first draft
 *            token.
 *   round j  one batched step feeds each still-drafting sequence its draft token j - 1
 *            and samples draft token j, until each has what it wanted (or drew an
 *            end-of-generation token).
 * Every draft token is sampled from the drafter's logits with the row the target will use
 * at that position (penalties over the drafts before it, the same generator of that
 * position), so where the two models agree the drafter draws the very token the target
 * will draw: acceptance stays high under sampling, and the output is still exactly the
 * target's (only equal tokens are accepted).
 *
 * After verification the drafter's K/V is valid only up to the accepted tokens
 * (sched__draft_rollback). A sequence the drafter's pool cannot hold gets no draft.
 *
 * DESIGN (threads). Scheduler thread. The draft steps use the scheduler's step arrays
 * before the target's step is built.
 */
#include <string.h>

#include "common/assert.h"
#include "common/log.h"
#include "scheduler/sched_internal.h"

/* Tokens fed in one catch-up step from which its time measures the drafter's cost per
 * catch-up token (spec_tick.c weighs catch-ups by it). */
enum { DRAFT_CATCHUP_MEASURED = 32 };

/* The draft model must speak the target's tokens, or its drafts mean nothing. */
static sp_status draft_check_vocab(const sched *s, const model *d) {
    const tok_vocab *dv = model_vocab(d);
    if (tok_vocab_size(dv) != s->n_vocab || model_get_hparams(d)->n_vocab != model_get_hparams(s->m)->n_vocab)
        return sp_fail(SP_ERR_INVALID_ARG, "--draft-model: its vocabulary has %d tokens, the model's %d",
                       tok_vocab_size(dv), s->n_vocab);
    for (int32_t id = 0; id < s->n_vocab; id++) {
        const char *a = tok_token_text(s->vocab, id), *b = tok_token_text(dv, id);
        if (strcmp(a ? a : "", b ? b : "") != 0)
            return sp_fail(SP_ERR_INVALID_ARG, "--draft-model: token %d differs from the model's (another vocabulary)",
                           id);
    }
    return SP_OK;
}

sp_status sched__draft_init(sched *s) {
    int L = s->cfg.self_spec_layers, n_layers = model_get_hparams(s->m)->n_layers;
    if (L < 0 || L >= n_layers)
        return sp_fail(SP_ERR_INVALID_ARG, "--self-spec-layers %d: must be below the model's %d layers", L, n_layers);
    model *d = s->cfg.draft_model;
    bool use_draft = d && s->cfg.spec_draft;
    if ((use_draft || L > 0) && !s->spec.draft_slots) {
        s->spec.draft_slots = calloc((size_t)s->cfg.max_batch_size, sizeof *s->spec.draft_slots);
        if (!s->spec.draft_slots) return sp_fail(SP_ERR_NOMEM, "draft model: out of memory");
    }
    if (!use_draft) return SP_OK;
    sp_status st = draft_check_vocab(s, d);
    if (st != SP_OK) return st;
    if (model_device(d) != model_device(s->m))
        return sp_fail(SP_ERR_INVALID_ARG, "--draft-model: must be loaded on the model's device");
    if (model_max_batch_tokens(d) < s->cfg.max_batch_tokens)
        return sp_fail(SP_ERR_INVALID_ARG, "--draft-model: loaded for steps of %d tokens, the scheduler's are %d",
                       model_max_batch_tokens(d), s->cfg.max_batch_tokens);
    dev_kv_shape one = model_kv_shape(d, 1, s->cfg.block_size, SP_KV_F16);
    int64_t n = s->cfg.draft_kv_cache_mb * ((int64_t)1 << 20) / (int64_t)dev_kv_bytes(&one);
    if (n < 1)
        return sp_fail(SP_ERR_INVALID_ARG, "--draft-kv-cache-mb %lld holds no KV block of the draft model",
                       (long long)s->cfg.draft_kv_cache_mb);
    if (n > INT32_MAX / 2) n = INT32_MAX / 2;
    if ((st = kv_blocks_init(&s->spec.draft_blocks, (int32_t)n, s->cfg.block_size, false)) != SP_OK) return st;
    if ((st = model_kv_create(d, (int)n, s->cfg.block_size, &s->spec.draft_kv)) != SP_OK)
        return sp_fail_prefix(st, "the draft model's KV cache of %lld blocks", (long long)n);
    sp_log_info("draft model: %d layers, KV cache of %lld blocks (%lld MiB)", one.n_layers, (long long)n,
                (long long)s->cfg.draft_kv_cache_mb);
    return SP_OK;
}

void sched__draft_free(sched *s) {
    if (s->spec.draft_kv) dev_kv_destroy(model_device(s->cfg.draft_model), s->spec.draft_kv);
    s->spec.draft_kv = NULL;
    if (s->spec.draft_blocks.n_total > 0) kv_blocks_free(&s->spec.draft_blocks);
    free(s->spec.draft_slots);
    s->spec.draft_slots = NULL;
}

void sched__draft_rollback(sched *s, sched_request *r, int32_t n_valid) {
    if (!s->spec.draft_kv) return;
    if (r->draft_computed > n_valid) r->draft_computed = n_valid;
    kv_blocks_truncate(&s->spec.draft_blocks, &r->draft_kv, kv_blocks_for_tokens(r->draft_computed, s->cfg.block_size));
}

/* Forgets what the drafter holds of r (a failed draft step left it unknown). */
static void draft_forget(sched *s, sched_request *r) {
    kv_blocks_release(&s->spec.draft_blocks, &r->draft_kv);
    r->draft_computed = 0;
}

/* Who drafts: the draft model on its own KV pool, or the model's first layers on its own
 * cache (self). */
typedef struct drafter {
    model *m;
    dev_kv *kv;
    int n_layers;
    bool self;
} drafter;

/* The blocks r's drafts are written into. */
static const kv_seq *drafter_seq(const drafter *dr, const sched_request *r) {
    return dr->self ? &r->kv : &r->draft_kv;
}

/* Puts chunk tokens of r (from position `from`) into the draft step as sequence q, with
 * logits for the last when `logits`. */
static void draft_step_add(sched *s, const drafter *dr, dev_step *st, sched_request *r, int32_t from, int32_t chunk,
                           bool logits) {
    const kv_seq *seq = drafter_seq(dr, r);
    int32_t q = st->n_seqs++;
    for (int32_t j = 0; j < chunk; j++) {
        int32_t t = st->n_tokens++;
        s->step_tokens[t] = r->tokens[from + j];
        s->step_pos[t] = from + j;
        s->step_seq[t] = q;
    }
    s->step_seq_len[q] = from + chunk;
    memcpy(s->step_block_table + (size_t)q * (size_t)s->max_blocks_per_seq, seq->ids, sizeof(int32_t) * (size_t)seq->n);
    if (logits) s->step_logit_rows[st->n_logits++] = st->n_tokens - 1;
}

/* Runs the draft step built in st; false (and, for the draft model, every sequence in it
 * forgotten) on failure. */
static bool draft_run(sched *s, const drafter *dr, dev_step *st, sched_request *const *in_step) {
    const dev_sample_vocab vocab = {s->n_vocab, s->eog_ids, s->n_eog};
    const double t0 = sched_now();
    sp_status rc =
        model_forward_sample_layers(dr->m, dr->kv, st, dr->n_layers, &vocab, s->sample_rows, s->sample_results);
    if (rc == SP_OK) {
        /* a round of one token per sequence measures what a draft token costs a sequence, filed
         * under the step's decode width, where spec_tick.c looks it up (batched rounds share
         * the weights' reads, so it falls with the width) */
        if (st->n_tokens == st->n_seqs && st->n_logits == st->n_seqs) {
            double *t =
                &s->spec.token_s[dr->self ? SCHED_SPEC_SELF : SCHED_SPEC_DRAFT][spec_gate_bucket_of(s->spec.width)];
            double per_token = (sched_now() - t0) / st->n_seqs;
            *t = *t > 0 ? 0.7 * *t + 0.3 * per_token : per_token;
        }
        return true;
    }
    sp_log_warn("%s: a draft step failed (%s); those sequences go without drafts",
                dr->self ? "self-speculation" : "draft model", sp_last_error());
    if (!dr->self) /* self drafts only wrote where the target's step writes again */
        for (int32_t q = 0; q < st->n_seqs; q++) draft_forget(s, in_step[q]);
    return false;
}

/* Makes r's blocks hold the positions its draft of `want` tokens feeds (up to
 * n_tokens + want - 2); returns how many drafts it can take (0: none). The draft
 * model's pool has no watermark (it holds nothing else); the model's own keeps its own. */
static int32_t draft_room_blocks(sched *s, const drafter *dr, sched_request *r, int32_t want) {
    if (dr->self) return sched__spec_reserve(s, r, want - 1) + 1;
    int32_t need = kv_blocks_for_tokens((int64_t)r->n_tokens + want - 1, s->cfg.block_size);
    return kv_blocks_grow(&s->spec.draft_blocks, &r->draft_kv, need) ? want : 0;
}

/* Adds the sampling row of slot's next draft token (after its got drafts). */
static void draft_row(sched *s, const draft_slot *slot, int row) {
    sched__sample_row(s, slot->r, slot->got, &s->sample_rows[row]);
    s->sample_rows[row].top_logprobs = -1; /* the drafter's log-probabilities are not wanted */
}

void sched__draft_propose(sched *s, draft_slot *slots, int n, bool self) {
    const drafter dr =
        self ? (drafter){s->m, s->cache.pool, s->cfg.self_spec_layers, true}
             : (drafter){s->cfg.draft_model, s->spec.draft_kv, model_get_hparams(s->cfg.draft_model)->n_layers, false};
    sched_request **in_step = s->step_reqs; /* which sequence each draft step row belongs to */
    dev_step st = {.tokens = s->step_tokens,
                   .pos = s->step_pos,
                   .seq = s->step_seq,
                   .seq_len = s->step_seq_len,
                   .block_table = s->step_block_table,
                   .max_blocks = s->max_blocks_per_seq,
                   .logit_rows = s->step_logit_rows};
    /* round 0: catch up, ending with the last token, within one step's tokens */
    int32_t budget = s->cfg.max_batch_tokens;
    int rows = 0;
    for (int i = 0; i < n; i++) {
        draft_slot *d = &slots[i];
        sched_request *r = d->r;
        d->got = d->chunk = d->limit = 0;
        if (d->want <= 0 || budget <= 0) continue;
        d->want = draft_room_blocks(s, &dr, r, d->want);
        if (d->want <= 0) continue; /* the drafter's pool is full */
        /* self: the model's own cache holds every token before the last */
        int32_t done_before = dr.self ? r->n_computed : r->draft_computed;
        SP_ASSERT(done_before <= r->n_tokens - 1);
        int32_t pending = r->n_tokens - done_before;
        d->chunk = pending < budget ? pending : budget;
        budget -= d->chunk;
        bool caught_up = d->chunk == pending;
        draft_step_add(s, &dr, &st, r, done_before, d->chunk, caught_up);
        in_step[st.n_seqs - 1] = r;
        if (caught_up) {
            d->limit = d->want;
            draft_row(s, d, rows++);
        }
    }
    const double t0 = sched_now();
    if (st.n_seqs == 0 || !draft_run(s, &dr, &st, in_step)) return;
    if (!dr.self) {
        int32_t fed = 0;
        for (int i = 0; i < n; i++) {
            slots[i].r->draft_computed += slots[i].chunk;
            fed += slots[i].chunk;
        }
        /* a real catch-up (not a decode's few tokens) measures what one costs a token */
        if (fed >= DRAFT_CATCHUP_MEASURED) {
            double per_token = (sched_now() - t0) / fed;
            s->spec.draft_catchup_s =
                s->spec.draft_catchup_s > 0 ? 0.7 * s->spec.draft_catchup_s + 0.3 * per_token : per_token;
        }
    }
    /* then one token a round: take each drawn token, feed it to draw the next */
    for (;;) {
        int row = 0;
        for (int i = 0; i < n; i++) {
            draft_slot *d = &slots[i];
            if (d->got >= d->limit) continue;
            int32_t tok = s->sample_results[row++].token;
            d->r->tokens[d->r->n_tokens + d->got++] = tok;
            if (!d->r->params.ignore_eos && tok_is_eog(s->vocab, tok)) d->limit = d->got; /* no draft past EOG */
        }
        st.n_tokens = st.n_seqs = st.n_logits = 0;
        rows = 0;
        for (int i = 0; i < n; i++) {
            draft_slot *d = &slots[i];
            if (d->got >= d->limit) continue;
            draft_step_add(s, &dr, &st, d->r, d->r->n_tokens + d->got - 1, 1, true);
            in_step[st.n_seqs - 1] = d->r;
            draft_row(s, d, rows++);
            if (!dr.self) d->r->draft_computed++;
        }
        if (st.n_seqs == 0) return;
        if (!draft_run(s, &dr, &st, in_step)) {
            for (int i = 0; i < n; i++) slots[i].got = 0;
            return;
        }
    }
}

/* spec_tick.c: speculative decoding's part of the tick. tick.c chooses the decode rows;
 * here each chosen sequence may add k draft rows after its decode row (plan), and after
 * the step its accepted run is emitted and the KV of rejected drafts given back (verify).
 *
 *   plan    the gate (scheduler/spec/spec_gate.c) says which proposers may draft at this
 *           width; each sequence takes the longer of the n-gram and the suffix cache's
 *           draft, up to its adaptive k, the tokens it may still generate less one, the
 *           context, and the step's spare rows. Drafts are written after the sequence's
 *           last token in r->tokens (the penalties of each verify row then count the
 *           drafts before it as accepted), and its KV blocks grow to hold them while the
 *           pool keeps its watermark (else the draft shrinks to the blocks it holds).
 *   verify  row j's token is what one-at-a-time decoding would sample at that position
 *           (same logits, same penalties, the same draw: sample_rng_at). Draft j is
 *           accepted while it equals row j's token; the first row whose token differs,
 *           or the row after the last draft, gives one more token. So the output is the
 *           output without speculation, token for token.
 *
 * A sequence's draft length follows what a row costs and how often its drafts are
 * accepted (spec/spec_cost.c): a sequence that copies long runs in a cheap step gets long
 * drafts, one that stopped copying (or a step already compute-bound) gets short ones or
 * none. How often is the rate of the draft's class (its proposer and match length, counted
 * across sequences), shifted by the sequence's bias (spec/spec_accept.c).
 *
 * DESIGN (threads). Scheduler thread; the counters are atomics read by sched_get_stats.
 */
#include <string.h>

#include "common/assert.h"
#include "scheduler/sched_internal.h"

static void stat_add(_Atomic int64_t *c, int64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

const char *sched_spec_proposer_name(int proposer) {
    return proposer >= 0 && proposer < SCHED_SPEC_PROPOSERS ? spec_proposer_name((sched_spec_proposer)proposer) : "?";
}

sp_status sched__spec_init(sched *s) {
    bool available[SCHED_SPEC_PROPOSERS] = {[SCHED_SPEC_NGRAM] = s->cfg.spec_ngram,
                                            [SCHED_SPEC_SUFFIX] = s->cfg.spec_suffix,
                                            [SCHED_SPEC_DRAFT] = s->spec.draft_kv != NULL,
                                            [SCHED_SPEC_SELF] = s->cfg.self_spec_layers > 0};
    spec_gate_init(&s->spec.gate, available);
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++)
        atomic_store_explicit(&s->spec.stats.enabled[p], available[p], memory_order_relaxed);
    if (!s->cfg.spec_suffix) return SP_OK;
    sp_status st = spec_suffix_create(s->cfg.spec_suffix_bytes, &s->spec.suffix);
    return st == SP_OK ? SP_OK : sp_fail_prefix(st, "the speculative suffix cache");
}

void sched__spec_free(sched *s) {
    spec_suffix_destroy(s->spec.suffix);
    s->spec.suffix = NULL;
}

void sched__spec_stats(const sched *s, sched_stats *out) {
    const sched_spec_counters *c = &s->spec.stats;
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) {
        out->spec_proposed[p] = atomic_load_explicit(&c->proposed[p], memory_order_relaxed);
        out->spec_accepted[p] = atomic_load_explicit(&c->accepted[p], memory_order_relaxed);
        out->spec_drafts[p] = atomic_load_explicit(&c->drafts[p], memory_order_relaxed);
        out->spec_switches[p] = atomic_load_explicit(&c->switches[p], memory_order_relaxed);
        out->spec_enabled[p] = atomic_load_explicit(&c->enabled[p], memory_order_relaxed);
    }
    for (int i = 0; i < SCHED_SPEC_MAX_K; i++)
        out->spec_accepted_at[i] = atomic_load_explicit(&c->accepted_at[i], memory_order_relaxed);
    out->spec_suffix_bytes = atomic_load_explicit(&c->suffix_bytes, memory_order_relaxed);
}

/* The gate's verdicts and switch counts, for the metrics. */
static void publish_gate(sched *s) {
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) {
        bool on =
            s->cfg.spec_gate ? spec_gate_enabled(&s->spec.gate, (sched_spec_proposer)p) : s->spec.gate.available[p];
        atomic_store_explicit(&s->spec.stats.enabled[p], on, memory_order_relaxed);
        atomic_store_explicit(&s->spec.stats.switches[p], s->spec.gate.switches[p], memory_order_relaxed);
    }
}

/* While a sequence drafts nothing, its bias drifts back toward an average sequence's each
 * step (about 23 steps to halve), so text that turns copyable later is tried again: a
 * sequence never stops speculating for good. */
static const float SPEC_BIAS_RECOVER = 0.03f;

/* The most draft tokens r has room for now: --spec-k, the tokens it may still generate
 * less one (the token after the last draft must fit too), the context, the step's spare
 * rows, and a thinking budget (a run must not cross it: the token after the budget is
 * forced). How many of them are worth their rows is draft_worth's question. */
static int32_t draft_room(const sched *s, const sched_request *r, int32_t budget) {
    int32_t k = s->cfg.spec_k;
    int32_t to_generate = r->params.n_prompt + r->params.max_tokens - r->n_tokens;
    int32_t to_context = s->cfg.max_seq_len - r->n_tokens;
    if (k > to_generate - 1) k = to_generate - 1;
    if (k > to_context - 1) k = to_context - 1;
    if (k > budget) k = budget;
    if (r->params.max_reasoning_tokens > 0 && r->thinking != 2) {
        int32_t left = r->params.max_reasoning_tokens - r->reasoning_tokens - 1;
        if (k > left) k = left;
    }
    return k > 0 ? k : 0;
}

/* r's best draft of at most k tokens from the allowed free proposers (n-gram, suffix),
 * into draft; returns its length and sets *who and *match (the length of the match it
 * came from). The longer draft wins; the n-gram of r's own tokens on a tie. */
static int32_t draft_propose(sched *s, const sched_request *r, const bool allowed[SCHED_SPEC_PROPOSERS], int32_t k,
                             int32_t *draft, int *who, int *match) {
    int32_t best = 0;
    *who = -1;
    *match = 0;
    if (allowed[SCHED_SPEC_NGRAM]) {
        best =
            spec_ngram_propose(r->tokens, r->n_tokens, s->cfg.spec_ngram_min, s->cfg.spec_ngram_max, draft, k, match);
        if (best > 0) *who = SCHED_SPEC_NGRAM;
    }
    if (allowed[SCHED_SPEC_SUFFIX] && s->spec.suffix) {
        int32_t other[SCHED_SPEC_MAX_K];
        int other_match = 0;
        int32_t n =
            spec_suffix_propose(s->spec.suffix, r->suffix_tenant, r->tokens, r->n_tokens, other, k, &other_match);
        if (n > best) {
            memcpy(draft, other, sizeof *draft * (size_t)n);
            best = n;
            *who = SCHED_SPEC_SUFFIX;
            *match = other_match;
        }
    }
    return best;
}

/* How many of r's n_draft drafts (after its last token in r->tokens) its grammar allows
 * in a row: a draft the grammar refuses could never be accepted, so it is not computed. */
static int32_t grammar_prefix(const sched *s, const sched_request *r, int32_t n_draft) {
    gram_state *c = NULL;
    if (gram_state_clone(r->gram, &c) != SP_OK) return 0;
    int32_t ok = 0;
    while (ok < n_draft && gram_state_advance_token(c, s->grammar.vocab, r->tokens[r->n_tokens + ok])) ok++;
    gram_state_destroy(c);
    return ok;
}

/* Whether the draft model may take r in a step of width sequences. Before it drafts, the
 * drafter must catch up on every token of r it has not seen (a new sequence's whole
 * prompt): a prefill of its own that only the tokens r has still to generate can pay
 * back. It pays when that catch-up (its measured seconds per token, or before any, the
 * target's cost of one more row) costs less than the time drafting may save over those
 * tokens (a token's share of an off step, times the gain the gate measured for the
 * drafter, or before any, the gain spec_cost.c predicts from the drafter's measured cost
 * per token). A long prompt with a short answer (an agent's turn) is
 * not worth it; a drafter that loses is worth nothing. */
static bool draft_catch_up_pays(const sched *s, const sched_request *r, int width, int32_t k, double draft_s) {
    const int32_t lag = r->n_tokens - r->draft_computed;
    if (lag <= 1 + SCHED_SPEC_MAX_K) return true; /* caught up but for a step's tokens */
    int32_t to_generate = r->params.n_prompt + r->params.max_tokens - r->n_tokens;
    int32_t to_context = s->cfg.max_seq_len - r->n_tokens;
    if (to_generate > to_context) to_generate = to_context;
    double per_row, fixed, off, on;
    spec_cost_fit(&s->spec.cost[spec_gate_bucket_of(width)], &per_row, &fixed);
    spec_gate_rates(&s->spec.gate, width, SCHED_SPEC_DRAFT, &off, &on);
    const double catch_up = lag * (s->spec.draft_catchup_s > 0 ? s->spec.draft_catchup_s : per_row);
    const double token_s = off > 0 ? 1 / off : (fixed + per_row * width) / width;
    /* a probe must be able to draft: it judges by the prediction, not by the loss it re-checks */
    const bool measured = off > 0 && on > 0 && s->spec.gate.probing != SCHED_SPEC_DRAFT;
    const double gain =
        measured ? (on > off ? 1 - off / on : 0)
                 : spec_cost_model_gain(&s->spec.cost[spec_gate_bucket_of(width)], width,
                                        spec_accept_rate(&s->spec.accept, SCHED_SPEC_DRAFT, 0, r->spec_bias, false), k,
                                        draft_s);
    return catch_up < to_generate * token_s * gain;
}

/* A drafter model's measured seconds per draft token and sequence for rounds of about
 * width sequences: that bucket's, else the nearest measured one's (a drafter measured
 * once is not explored again at every width); 0 when never measured. */
static double model_token_s(const sched *s, int who, int width) {
    const int b = spec_gate_bucket_of(width);
    for (int d = 0; d < SPEC_GATE_BUCKETS; d++) {
        if (b - d >= 0 && s->spec.token_s[who][b - d] > 0) return s->spec.token_s[who][b - d];
        if (b + d < SPEC_GATE_BUCKETS && s->spec.token_s[who][b + d] > 0) return s->spec.token_s[who][b + d];
    }
    return 0;
}

/* Forgets which drafter models ran: once their time is observed or charged, and before
 * each plan (a tick without decodes plans nothing, and must not charge a runs twice). */
static void spec_tick_reset(sched *s) {
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) {
        s->spec.ran[p] = false;
        s->spec.seconds[p] = 0;
    }
}

static bool spec_any(const sched *s) {
    return s->cfg.spec_ngram || s->cfg.spec_suffix || s->spec.draft_kv || s->cfg.self_spec_layers > 0;
}

/* How many of the m tokens r may draft from proposer p (a match of match_len; 0 for a
 * drafter model, whose tokens also cost model_s seconds each) are worth their rows in a
 * step of width decode rows (spec_cost.c, fitted per width bucket: a CPU's multi-row
 * kernels change with the row count): as many as the estimated rate makes worth it
 * (spec_accept.c: the draft's class and r's bias), and a free proposer's first draft for
 * r at least one (spec.h). Where that is none but the optimistic rate of a class with few
 * drafts counted says a token pays, one token, to learn the class's rate. */
static int32_t draft_worth(const sched *s, const sched_request *r, int width, sched_spec_proposer p, int match_len,
                           int32_t m, bool model, double model_s) {
    const spec_cost *cost = &s->spec.cost[spec_gate_bucket_of(width)];
    const double est = spec_accept_rate(&s->spec.accept, p, match_len, r->spec_bias, false);
    int32_t len = model ? spec_cost_model_draft_len(cost, width, est, m, model_s)
                        : spec_cost_sequence_draft_len(cost, width, est, m, r->spec_tried);
    if (len > 0 || m <= 0) return len;
    const double opt = spec_accept_rate(&s->spec.accept, p, match_len, r->spec_bias, true);
    return model ? spec_cost_model_draft_len(cost, width, opt, 1, model_s) : spec_cost_draft_len(cost, width, opt, 1);
}

/* r's draft for a step of width decode rows, with room for k tokens: the longer of the
 * free proposers' (written after r's tokens), else what a drafter model may take; as many
 * tokens as draft_worth allows (with --no-spec-gate, all the room). rows_pay: whether a
 * near-certain token is worth a row at this width at all; where not (a compute-bound
 * step), only a sequence's first draft is proposed: the scans would be wasted, and a
 * suffix hit reorders its LRU. Returns the length (0: none), sets *who to its proposer
 * and r->spec_match to the match it came from. */
static int32_t plan_one(sched *s, sched_request *r, const bool allowed[SCHED_SPEC_PROPOSERS], int width, int32_t k,
                        bool rows_pay, int *who) {
    const bool gated = s->cfg.spec_gate;
    r->spec_match = 0;
    if (gated && r->spec_tried && !rows_pay) return 0;
    int32_t draft[SCHED_SPEC_MAX_K];
    int match;
    int32_t m = draft_propose(s, r, allowed, k, draft, who, &match);
    if (m > 0) {
        if (gated) m = draft_worth(s, r, width, (sched_spec_proposer)*who, match, m, false, 0);
        if (m <= 0) return 0;
        memcpy(r->tokens + r->n_tokens, draft, sizeof *draft * (size_t)m);
        r->spec_match = (int8_t)(match < INT8_MAX ? match : INT8_MAX);
        return m;
    }
    /* a drafter model's tokens cost its run too: as many as that leaves worth it */
    int32_t by_draft = 0, by_self = 0;
    const double draft_s = model_token_s(s, SCHED_SPEC_DRAFT, width), self_s = model_token_s(s, SCHED_SPEC_SELF, width);
    if (allowed[SCHED_SPEC_DRAFT] && s->spec.draft_kv)
        by_draft = gated ? draft_worth(s, r, width, SCHED_SPEC_DRAFT, 0, k, true, draft_s) : k;
    if (allowed[SCHED_SPEC_SELF] && s->cfg.self_spec_layers > 0)
        by_self = gated ? draft_worth(s, r, width, SCHED_SPEC_SELF, 0, k, true, self_s) : k;
    if (by_draft > 0 && (!gated || draft_catch_up_pays(s, r, width, by_draft, draft_s))) {
        *who = SCHED_SPEC_DRAFT;
        return by_draft;
    }
    if (by_self > 0) {
        *who = SCHED_SPEC_SELF;
        return by_self;
    }
    return 0;
}

void sched__spec_plan(sched *s, sched_request *const *chosen, int n, int32_t budget, int32_t *n_draft,
                      int8_t *proposer) {
    for (int i = 0; i < n; i++) {
        n_draft[i] = 0;
        proposer[i] = -1;
    }
    spec_tick_reset(s);
    s->spec.width = n;
    if (n == 0 || budget <= 0 || !spec_any(s)) return;
    double depth = 0;
    for (int i = 0; i < n; i++) depth += chosen[i]->n_tokens;
    bool allowed[SCHED_SPEC_PROPOSERS];
    if (s->cfg.spec_gate)
        spec_gate_plan(&s->spec.gate, n, depth / n, allowed);
    else
        for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) allowed[p] = s->spec.gate.available[p];
    publish_gate(s);
    /* the free proposers first; the draft model takes the sequences they had nothing for
     * (its drafts cost a model run), n_draft[i] meanwhile holding what each may take */
    int n_model = 0;
    const bool rows_pay = spec_cost_draft_len(&s->spec.cost[spec_gate_bucket_of(n)], n, SPEC_RATE_MAX, 1) > 0;
    for (int i = 0; i < n && budget > 0; i++) {
        sched_request *r = chosen[i];
        if (r->params.no_speculation || r->force_at < r->params.n_think_close) continue; /* forced: no drafts */
        int32_t k = draft_room(s, r, budget);
        if (k <= 0) continue;
        int who = -1;
        int32_t m = plan_one(s, r, allowed, n, k, rows_pay, &who);
        if (m <= 0) {
            r->spec_bias *= 1 - SPEC_BIAS_RECOVER;
            continue;
        }
        if (who >= SCHED_SPEC_DRAFT) n_model++;
        n_draft[i] = m;
        proposer[i] = (int8_t)who;
        budget -= m;
    }
    for (int who = SCHED_SPEC_DRAFT; n_model > 0 && who <= SCHED_SPEC_SELF;
         who++) { /* batched across their sequences */
        draft_slot *slots = s->spec.draft_slots;
        int j = 0;
        for (int i = 0; i < n; i++)
            if (proposer[i] == who) slots[j++] = (draft_slot){.r = chosen[i], .want = n_draft[i]};
        if (j == 0) continue;
        s->spec.ran[who] = true;
        double t0 = sched_now();
        sched__draft_propose(s, slots, j, who == SCHED_SPEC_SELF);
        s->spec.seconds[who] = sched_now() - t0;
        j = 0;
        for (int i = 0; i < n; i++)
            if (proposer[i] == who) n_draft[i] = slots[j++].got;
    }
    for (int i = 0; i < n; i++) { /* the target's KV for the drafts, within the watermark */
        if (proposer[i] < 0) continue;
        chosen[i]->spec_cut = false;
        if (chosen[i]->gram) {
            int32_t allowed_run = grammar_prefix(s, chosen[i], n_draft[i]);
            chosen[i]->spec_cut = allowed_run < n_draft[i];
            n_draft[i] = allowed_run;
        }
        int32_t m = n_draft[i] > 0 ? sched__spec_reserve(s, chosen[i], n_draft[i]) : 0;
        n_draft[i] = m;
        if (m <= 0) {
            proposer[i] = -1;
            continue;
        }
        stat_add(&s->spec.stats.proposed[proposer[i]], m);
    }
}

int32_t sched__spec_verify(sched *s, sched_request *r, int32_t n_draft, int proposer, const dev_sample_result *results,
                           double now) {
    const int32_t n_before = r->n_tokens;
    int32_t accepted = 0;
    while (accepted < n_draft && results[accepted].token == r->tokens[n_before + accepted]) accepted++;
    if (n_draft > 0) {
        r->spec_tried = true;
        stat_add(&s->spec.stats.drafts[proposer], 1);
        stat_add(&s->spec.stats.accepted[proposer], accepted);
        for (int32_t i = 0; i < accepted; i++) stat_add(&s->spec.stats.accepted_at[i], 1);
        /* each accepted token a success, the first rejected one a failure, the token the
         * grammar cut included (it could not have been accepted); the bias is moved against
         * the class's rate before this draft counts in it */
        const int32_t judged = n_draft + (r->spec_cut ? 1 : 0);
        r->spec_bias = (float)spec_accept_bias_after(&s->spec.accept, (sched_spec_proposer)proposer, r->spec_match,
                                                     r->spec_bias, judged, accepted);
        spec_accept_observe(&s->spec.accept, (sched_spec_proposer)proposer, r->spec_match, judged, accepted);
    }
    /* the decode row and the accepted drafts are computed; the row after them is the
     * next step's decode row. Only accepted tokens reach the prefix cache, and the blocks
     * past the next decode row's position go back. All of it before the emits: an emit
     * that ends r releases it. */
    r->n_computed = n_before + accepted;
    kv_prefix_register(&s->cache.blocks, &r->kv, r->tokens, r->n_computed);
    sched__draft_rollback(s, r, r->n_computed);
    kv_blocks_truncate(&s->cache.blocks, &r->kv,
                       kv_blocks_for_tokens((int64_t)n_before + accepted + 1, s->cfg.block_size));
    for (int32_t j = 0; j <= accepted; j++)
        if (!sched__emit(s, r, &results[j], now)) return j + 1;
    return accepted + 1;
}

void sched__spec_observe(sched *s, int width, double depth, double seconds, int64_t tokens,
                         const int64_t drafts[SCHED_SPEC_PROPOSERS]) {
    if (!spec_any(s)) return;
    int64_t rows = width, charged[SCHED_SPEC_PROPOSERS];
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) {
        rows += drafts[p];
        /* a drafter model that ran spent most of the step's time, whether it drew
         * drafts or only caught up on a prompt: the step is charged to it */
        charged[p] = s->spec.ran[p] ? drafts[p] + 1 + (int64_t)width * SCHED_SPEC_MAX_K : drafts[p];
    }
    spec_cost_observe(&s->spec.cost[spec_gate_bucket_of(width)], (int)rows, seconds);
    spec_cost_share_across(s->spec.cost, SPEC_GATE_BUCKETS);
    if (s->cfg.spec_gate) spec_gate_observe(&s->spec.gate, width, depth, seconds, tokens, charged);
    spec_tick_reset(s);
    publish_gate(s);
}

void sched__spec_charge(sched *s) {
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++)
        if (s->spec.ran[p] && s->cfg.spec_gate)
            spec_gate_charge(&s->spec.gate, s->spec.width, (sched_spec_proposer)p, s->spec.seconds[p]);
    spec_tick_reset(s);
}

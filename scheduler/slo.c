/* slo.c: latency targets. A request may have a time-to-first-token target and a
 * time-per-output-token target (its own, or the scheduler's ttft_slo_ms / tpot_slo_ms).
 * Under every policy a request that finishes is counted against them (goodput: the
 * requests that met all of theirs). Under --policy slo the scheduler also works for them:
 *
 *   hold     a tick takes no more prefill rows than the slack of the running decode
 *            closest to its inter-token deadline (its last token + its TPOT target)
 *            allows, after a decode-only step's time: a new prompt waits a tick
 *            rather than make a running answer stutter. When even a decode-only step
 *            would miss the deadline, holding gains nothing and the prefill runs; and
 *            a tick always keeps a block's worth of prefill, so one request's tight
 *            target cannot stop everyone else's prompts.
 *   seat     the queue head first (it is never overtaken for good), then the
 *            shortest waiting feeds: more first tokens per second of prefill.
 *   refuse   at submission, a request whose TTFT target cannot be met is answered 429
 *            with Retry-After at once, instead of being accepted and served late. Its
 *            wait is the longer of two estimates: the prompts queued ahead of it and
 *            its own at the measured prefill rate, plus a decode step per prefill
 *            tick (the compute), and the requests queued ahead of it over the measured
 *            admission rate (the batch slots and KV blocks that must free first) and
 *            then its own prompt; then the step of its first token.
 *
 * The rates are EWMAs of measurements: seconds per prefill row, seconds per decode-only
 * step, admissions per second in windows of about a second during which requests
 * never stopped waiting. Nothing is held or refused before the first two are measured.
 *
 * DESIGN (threads). The scheduler thread, but for sched__slo_admission (sched_submit's
 * thread, under s->queue.lock), which reads only the atomic copies of the rates.
 */
#include <math.h>

#include "scheduler/sched_internal.h"

#define SLO_EWMA 0.2

static void ewma(double *avg, double x) {
    *avg = *avg == 0 ? x : (1 - SLO_EWMA) * *avg + SLO_EWMA * x;
}

static void count(_Atomic int64_t *c) {
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

double sched__slo_ttft(const sched *s, const sched_request *r) {
    double ms = r->params.ttft_slo_ms > 0 ? r->params.ttft_slo_ms : s->cfg.ttft_slo_ms;
    return ms > 0 ? ms / 1000 : 0;
}

double sched__slo_tpot(const sched *s, const sched_request *r) {
    double ms = r->params.tpot_slo_ms > 0 ? r->params.tpot_slo_ms : s->cfg.tpot_slo_ms;
    return ms > 0 ? ms / 1000 : 0;
}

void sched__slo_observe_step(sched *s, double seconds, int64_t prefill_rows, int64_t rows) {
    if (prefill_rows == 0) {
        ewma(&s->meter.decode_step_s, seconds);
        atomic_store_explicit(&s->meter.shared_decode_step_s, s->meter.decode_step_s, memory_order_relaxed);
    } else if (prefill_rows >= s->cfg.block_size) { /* mostly prefill: what a prompt row costs */
        ewma(&s->meter.prefill_row_s, seconds / (double)rows);
        atomic_store_explicit(&s->meter.shared_prefill_row_s, s->meter.prefill_row_s, memory_order_relaxed);
    }
}

void sched__slo_observe_admissions(sched *s, int admitted, double now) {
    if (s->queue.admit_window_start == 0) {
        s->queue.admit_window_start = now;
        s->queue.admit_window_saturated = true;
    }
    s->queue.admit_window_count += admitted;
    if (!s->queue.wait_head) s->queue.admit_window_saturated = false; /* admissions were limited by arrivals */
    double span = now - s->queue.admit_window_start;
    if (span < 1.0) return;
    if (s->queue.admit_window_saturated && s->queue.admit_window_count > 0) {
        ewma(&s->queue.admit_rate, s->queue.admit_window_count / span);
        atomic_store_explicit(&s->queue.shared_admit_rate, s->queue.admit_rate, memory_order_relaxed);
    }
    s->queue.admit_window_start = now;
    s->queue.admit_window_count = 0;
    s->queue.admit_window_saturated = s->queue.wait_head != NULL;
}

int32_t sched__slo_prefill_budget(sched *s, int32_t budget, int32_t decode_rows, double now) {
    if (s->cfg.policy != SP_POLICY_SLO || budget <= 0 || decode_rows == 0) return budget;
    if (s->meter.prefill_row_s == 0 || s->meter.decode_step_s == 0) return budget;
    double slack = INFINITY;
    for (int i = 0; i < s->n_running; i++) {
        const sched_request *r = s->running[i];
        double tpot = sched__slo_tpot(s, r);
        bool decoding = r->n_tokens - r->n_computed == 1 && r->n_tokens > r->params.n_prompt;
        if (!decoding || tpot == 0 || r->last_token_at == 0) continue;
        double left = r->last_token_at + tpot - now;
        if (left < slack) slack = left;
    }
    if (slack == INFINITY) return budget;
    double room = slack - s->meter.decode_step_s;
    if (room <= 0) return budget; /* late even without prefill: holding it back gains nothing */
    double fits = room / s->meter.prefill_row_s;
    if (fits >= budget) return budget;
    count(&s->meter.stats.slo_prefill_holds);
    /* at least a block a tick: however tight a request's target, prefill never stops */
    int32_t rows = (int32_t)(fits + 1e-6); /* not one row fewer for a rounding error */
    int32_t floor_rows = s->cfg.block_size < budget ? s->cfg.block_size : budget;
    return rows > floor_rows ? rows : floor_rows;
}

sched_request *sched__slo_next(const sched *s, bool first) {
    if (first || s->cfg.policy != SP_POLICY_SLO) return s->queue.wait_head;
    sched_request *best = NULL;
    for (sched_request *r = s->queue.wait_head; r; r = r->next)
        if (!best || r->n_tokens < best->n_tokens) best = r;
    return best;
}

sp_status sched__slo_admission(sched *s, sched_request *const *reqs, int n, int32_t queued, int64_t queued_tokens,
                               int64_t tokens) {
    if (s->cfg.policy != SP_POLICY_SLO) return SP_OK;
    double row = atomic_load_explicit(&s->meter.shared_prefill_row_s, memory_order_relaxed);
    double step = atomic_load_explicit(&s->meter.shared_decode_step_s, memory_order_relaxed);
    double admit_rate = atomic_load_explicit(&s->queue.shared_admit_rate, memory_order_relaxed);
    if (row == 0) return SP_OK; /* not measured yet */
    double target = 0;
    for (int i = 0; i < n; i++) {
        double t = sched__slo_ttft(s, reqs[i]);
        if (t > 0 && (target == 0 || t < target)) target = t;
    }
    if (target == 0) return SP_OK;
    int64_t ahead = queued_tokens + tokens;
    double ticks = ceil((double)ahead / s->cfg.max_prefill_tokens);
    double compute = (double)ahead * row + ticks * step;
    /* the slots: n more admissions after the queued ones, at the rate requests get in,
     * then its own prompt and first step */
    double own = (double)tokens * row + ceil((double)tokens / s->cfg.max_prefill_tokens) * step;
    double slots = admit_rate > 0 ? (queued + n) / admit_rate + own : 0;
    double estimate = (compute > slots ? compute : slots) + step; /* + the step of its first token */
    if (estimate <= target) return SP_OK;
    count(&s->meter.stats.slo_rejected);
    return sp_fail(SP_ERR_FULL,
                   "the time-to-first-token target of %.0f ms cannot be met: %d requests and %lld prompt tokens "
                   "(these and those queued ahead) would take about %.0f ms to start now (policy slo)",
                   target * 1000, queued + n, (long long)ahead, estimate * 1000);
}

void sched__slo_finished(sched *s, const sched_request *r, bool completed) {
    double ttft = sched__slo_ttft(s, r), tpot = sched__slo_tpot(s, r);
    if (ttft == 0 && tpot == 0) return;
    const sched_timings *t = &r->out.timings;
    bool met = completed;
    if (met && ttft > 0) met = t->first_token > 0 && t->first_token - t->arrival <= ttft;
    int32_t n = r->out.n_tokens;
    if (met && tpot > 0 && n > 1) met = (t->finished - t->first_token) / (n - 1) <= tpot;
    count(&s->meter.stats.slo_requests);
    if (met) count(&s->meter.stats.slo_goodput);
}

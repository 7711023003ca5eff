/* spec_gate.c: whether speculation pays, measured rather than assumed. A draft row costs
 * compute; while a step is memory-bound (few sequences, small batches) the extra rows
 * are almost free and every accepted draft is a token gained, but once a step is
 * compute-bound (many sequences) the rows cost their share and rejected drafts are pure
 * loss. llama-server's lookup decoding has no such check and gets slower with more slots;
 * here each width bucket learns its own answer and a proposer that loses is switched off
 * there, then probed again now and then in case the workload changed.
 *
 * The unit of measurement is a decode-only step: its delivered tokens (accepted drafts
 * plus one per sequence) over its duration. A step without drafts measures "off"; one
 * with drafts measures the proposer that put most draft rows in it.
 *
 * DESIGN (threads). The scheduler thread owns the gate.
 */
#include <math.h>
#include <string.h>

#include "scheduler/spec/spec.h"

static const double EWMA_ALPHA = 0.5; /* weight of the newest window */
static const double MIN_MARGIN = 0.05;

int spec_gate_bucket_of(int width) {
    int b = 0;
    while (width > 1 && b < SPEC_GATE_BUCKETS - 1) {
        width >>= 1;
        b++;
    }
    return b;
}

void spec_gate_init(spec_gate *g, const bool available[SCHED_SPEC_PROPOSERS]) {
    memset(g, 0, sizeof *g);
    g->probing = -2;
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) g->available[p] = available[p];
    for (int b = 0; b < SPEC_GATE_BUCKETS; b++) {
        spec_gate_bucket *bk = &g->buckets[b];
        bk->off_probe_every = SPEC_GATE_PROBE_MIN;
        bk->next_off_probe = 0; /* off is measured first */
        for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) {
            /* the free proposers are on until they lose; a drafter model, whose every draft
             * token costs a run of its own (and a catch-up on each new sequence), drafts
             * freely only once a probe has seen it win: the first as soon as off is known */
            bk->enabled[p] = available[p] && p != SCHED_SPEC_DRAFT && p != SCHED_SPEC_SELF;
            bk->probe_every[p] = SPEC_GATE_PROBE_MIN;
        }
    }
}

/* An estimate measured at another context depth (more than twofold away) says little:
 * attention's share of a step grows with depth. A stale estimate still serves (the rates
 * on and off move together) until its next window replaces it, but a loss measured at
 * another depth is probed again soon. */
static bool slot_check_stale(spec_gate_slot *s, double depth) {
    if (s->windows == 0 || s->stale || s->depth <= 0 || depth <= 0) return false;
    if (depth <= 2 * s->depth && 2 * depth >= s->depth) return false;
    s->stale = true; /* kept until its next window replaces it */
    return true;
}

static bool any_enabled(const spec_gate *g, const spec_gate_bucket *bk) {
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++)
        if (g->available[p] && bk->enabled[p]) return true;
    return false;
}

static int64_t doubled(int64_t every) {
    return every * 2 > SPEC_GATE_PROBE_MAX ? SPEC_GATE_PROBE_MAX : every * 2;
}

void spec_gate_plan(spec_gate *g, int width, double depth, bool allowed[SCHED_SPEC_PROPOSERS]) {
    int b = spec_gate_bucket_of(width);
    spec_gate_bucket *bk = &g->buckets[b];
    g->last_bucket = b;
    slot_check_stale(&bk->off, depth);
    /* a loss measured at another depth is probed again within one interval from now (not
     * at once, nor sooner than its backoff: contexts that grow through many doublings must
     * not re-probe a clear loser at each) */
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++)
        if (slot_check_stale(&bk->on[p], depth) && !bk->enabled[p]) {
            int64_t soon = bk->steps + bk->probe_every[p];
            if (soon < bk->next_probe[p]) bk->next_probe[p] = soon;
        }
    /* a probe that measured nothing in its planned steps (its proposer found nothing to
     * draft, or every step carried a prefill chunk) gives up, and the next one waits twice
     * as long: a probe that cannot conclude must not keep the others from drafting */
    if (g->probing != -2 && g->probe_bucket == b) g->probe_steps--;
    if (g->probing != -2 && (g->probe_bucket != b || g->probe_steps < 0)) {
        spec_gate_bucket *pb = &g->buckets[g->probe_bucket];
        if (g->probing >= 0) {
            pb->probe_every[g->probing] = doubled(pb->probe_every[g->probing]);
            pb->next_probe[g->probing] = pb->steps + pb->probe_every[g->probing];
        } else {
            pb->off_probe_every = doubled(pb->off_probe_every);
            pb->next_off_probe = pb->steps + pb->off_probe_every;
        }
        g->probing = -2;
    }
    if (g->probing == -2) {
        bool due = false;
        for (int p = 0; p < SCHED_SPEC_PROPOSERS && g->probing == -2; p++)
            if (g->available[p] && !bk->enabled[p] && bk->steps >= bk->next_probe[p]) {
                due = true;
                if (bk->off.windows > 0 && !bk->off.stale) g->probing = p; /* off known at this depth */
            }
        /* off first whenever it is unknown (a new bucket, a stale estimate): nothing can be
         * judged without it, and measuring it costs nothing; and again now and then while
         * drafts never stop */
        bool off_unknown = (bk->off.windows == 0 && (due || any_enabled(g, bk))) || (bk->off.stale && due);
        if (g->probing == -2 && bk->steps >= bk->next_off_probe && (off_unknown || any_enabled(g, bk))) g->probing = -1;
        if (g->probing != -2) {
            g->probe_bucket = b;
            g->probe_steps = 4 * SPEC_GATE_WINDOW;
        }
    }
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) {
        if (g->probing == -2)
            allowed[p] = g->available[p] && bk->enabled[p];
        else
            allowed[p] = g->probing == p;
    }
}

/* Folds the slot's full window into its estimate; returns the window's rate. */
static double slot_fold(spec_gate_slot *s) {
    double rate = s->tokens / s->seconds;
    double depth = s->depth_sum / s->steps;
    if (s->windows == 0 || s->stale) { /* the first, or one from another depth: start over */
        s->rate = rate;
        s->dev = 0;
        s->stale = false;
    } else {
        s->dev = (1 - EWMA_ALPHA) * s->dev + EWMA_ALPHA * fabs(rate - s->rate);
        s->rate = (1 - EWMA_ALPHA) * s->rate + EWMA_ALPHA * rate;
    }
    s->depth = depth;
    s->windows++;
    s->steps = 0;
    s->tokens = s->seconds = s->depth_sum = 0;
    return rate;
}

/* After a window of p: does off beat it by more than the margin? */
static void judge(spec_gate *g, spec_gate_bucket *bk, int p) {
    const spec_gate_slot *on = &bk->on[p], *off = &bk->off;
    if (off->windows == 0 || on->windows == 0 || on->rate <= 0 || off->rate <= 0) {
        if (!bk->enabled[p]) bk->next_probe[p] = bk->steps + bk->probe_every[p]; /* no verdict: later */
        return;
    }
    double margin = on->dev / on->rate + off->dev / off->rate;
    if (margin < MIN_MARGIN) margin = MIN_MARGIN;
    bool lost = off->rate > on->rate * (1 + margin);
    if (bk->enabled[p]) {
        bk->losses[p] = lost ? bk->losses[p] + 1 : 0;
        if (bk->losses[p] >= 2) {
            bk->enabled[p] = false;
            g->switches[p]++;
            bk->next_probe[p] = bk->steps + bk->probe_every[p];
        }
    } else if (lost) { /* a probe that confirms the loss: wait twice as long next time */
        bk->probe_every[p] = doubled(bk->probe_every[p]);
        bk->next_probe[p] = bk->steps + bk->probe_every[p];
    } else { /* the probe won: on again */
        bk->enabled[p] = true;
        bk->losses[p] = 0;
        bk->probe_every[p] = SPEC_GATE_PROBE_MIN;
        g->switches[p]++;
    }
}

void spec_gate_observe(spec_gate *g, int width, double depth, double seconds, int64_t tokens,
                       const int64_t drafts[SCHED_SPEC_PROPOSERS]) {
    if (!(seconds > 0) || tokens <= 0) return;
    int b = spec_gate_bucket_of(width);
    spec_gate_bucket *bk = &g->buckets[b];
    bk->steps++;
    int slot = -1;
    int64_t most = 0;
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++)
        if (drafts[p] > most) {
            most = drafts[p];
            slot = p;
        }
    spec_gate_slot *s = slot < 0 ? &bk->off : &bk->on[slot];
    s->steps++;
    s->tokens += (double)tokens;
    s->seconds += seconds;
    s->depth_sum += depth;
    if (s->steps < SPEC_GATE_WINDOW) return;
    slot_fold(s);
    if (slot < 0) {
        /* off measured: the next forced measurement of off waits longer while on wins */
        if (g->probing == -1 && g->probe_bucket == b) {
            g->probing = -2;
            bk->off_probe_every = doubled(bk->off_probe_every);
        }
        bk->next_off_probe = bk->steps + bk->off_probe_every;
        return;
    }
    bool was_probe = g->probing == slot && g->probe_bucket == b;
    judge(g, bk, slot);
    if (was_probe) g->probing = -2;
}

void spec_gate_charge(spec_gate *g, int width, sched_spec_proposer p, double seconds) {
    if (!(seconds > 0)) return;
    g->buckets[spec_gate_bucket_of(width)].on[p].seconds += seconds;
}

void spec_gate_rates(const spec_gate *g, int width, sched_spec_proposer p, double *off, double *on) {
    const spec_gate_bucket *bk = &g->buckets[spec_gate_bucket_of(width)];
    *off = bk->off.windows > 0 ? bk->off.rate : 0;
    *on = bk->on[p].windows > 0 ? bk->on[p].rate : 0;
}

bool spec_gate_enabled(const spec_gate *g, sched_spec_proposer p) {
    return g->available[p] && g->buckets[g->last_bucket].enabled[p];
}

/* spec_accept.c: how often a draft is accepted, by its class (proposer and match length)
 * across sequences and by the sequence's own bias (spec.h).
 *
 * The counts follow the geometric model the draft length assumes (spec_cost.c): each
 * draft token is accepted with probability p, and a draft ends at its first rejection, so
 * p is estimated as accepted tokens over accepted tokens plus rejections, each a trial.
 * A class starts from PRIOR_RATE with PRIOR_WEIGHT trials' weight: not from its
 * proposer's average over the other classes, which short matches failing in a preamble
 * would drag down for the long matches of the text copied after it.
 *
 * DESIGN (threads). The scheduler thread owns it.
 */
#include <math.h>

#include "scheduler/spec/spec.h"

static const double CLASS_DECAY = 0.98; /* per draft of the class: about its last 50 drafts count */
static const double PRIOR_WEIGHT = 4;   /* trials' worth of belief in the prior before counts */
static const double PRIOR_RATE = 0.6;   /* a class's rate before any draft */
static const double OPTIMISM = 1;       /* standard errors added to a little-known class's rate */
static const double KNOWN_TRIALS = 16;  /* counted trials after which a class is known: no optimism, so a
                                           class near break-even is not tried a token at a time for good */
static const double BIAS_RATE = 0.6;    /* log-odds per unit of gradient: a rejection at 60% moves the
                                           bias by 0.36, which moves the rate by about 0.09 */

static int match_class(int match_len) {
    if (match_len <= 5) return match_len < 0 ? 0 : match_len;
    if (match_len < 8) return 6;
    return match_len < 16 ? 7 : 8;
}

static double clamp(double x, double lo, double hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

static double logit(double p) {
    p = clamp(p, SPEC_RATE_MIN, SPEC_RATE_MAX);
    return log(p / (1 - p));
}

static double logistic(double x) {
    return 1 / (1 + exp(-x));
}

static bool proposer_valid(sched_spec_proposer p) {
    return p >= 0 && p < SCHED_SPEC_PROPOSERS;
}

/* The class's estimated rate, and (through *trials) the weight behind it. */
static double class_rate(const spec_accept *a, sched_spec_proposer p, int c, double *trials) {
    *trials = a->accepted[p][c] + a->missed[p][c] + PRIOR_WEIGHT;
    return (a->accepted[p][c] + PRIOR_WEIGHT * PRIOR_RATE) / *trials;
}

void spec_accept_observe(spec_accept *a, sched_spec_proposer p, int match_len, int n_draft, int accepted) {
    if (n_draft <= 0 || !proposer_valid(p)) return;
    int c = match_class(match_len);
    double missed = accepted < n_draft ? 1 : 0;
    a->accepted[p][c] = a->accepted[p][c] * CLASS_DECAY + accepted;
    a->missed[p][c] = a->missed[p][c] * CLASS_DECAY + missed;
}

double spec_accept_rate(const spec_accept *a, sched_spec_proposer p, int match_len, double bias, bool optimistic) {
    double rate = PRIOR_RATE;
    if (proposer_valid(p)) {
        double trials;
        rate = class_rate(a, p, match_class(match_len), &trials);
        if (optimistic && trials - PRIOR_WEIGHT < KNOWN_TRIALS) rate += OPTIMISM * sqrt(rate * (1 - rate) / trials);
    }
    return clamp(logistic(logit(rate) + bias), SPEC_RATE_MIN, SPEC_RATE_MAX);
}

double spec_accept_bias_after(const spec_accept *a, sched_spec_proposer p, int match_len, double bias, int n_draft,
                              int accepted) {
    if (n_draft <= 0) return bias;
    double q = spec_accept_rate(a, p, match_len, bias, false);
    double gradient = accepted * (1 - q) - (accepted < n_draft ? q : 0);
    return clamp(bias + BIAS_RATE * gradient, -SPEC_BIAS_MAX, SPEC_BIAS_MAX);
}

/* spec_cost.c: how much one more row costs a decode step, measured, and the draft length
 * that follows from it. A draft row is computed and sampled like any other: worth it
 * only when its expected tokens beat the time it takes. That time depends on the machine
 * (a CPU's multi-row matmul, a GPU's idle lanes) and on the batch, so it is fitted from
 * the steps themselves rather than assumed.
 *
 * DESIGN (threads). The scheduler thread owns it.
 */
#include <math.h>

#include "scheduler/spec/spec.h"

static const double COST_DECAY = 0.98;      /* about the last 50 steps count */
static const double ROW_SHARE_PRIOR = 0.25; /* before any fit: a row a quarter of its even share */
static const double SHARE_MAX = 0.95;       /* of the mean time per row: near-certain drafts stay possible */
static const double CROSS_MIN_STEPS = 4;    /* a bucket's mean counts in the line across buckets */
static const int UNPRICED_MAX_K = 2;        /* draft tokens while no fit prices the bucket's rows */

/* The least-squares slope of y on x from sums over n points (weighted alike or decayed),
 * and the variance of x; false when x varies too little (under half a row) to tell one. */
static bool ls_slope(double n, double sx, double sy, double sxx, double sxy, double *slope, double *var) {
    double mx = sx / n, my = sy / n;
    *var = sxx / n - mx * mx;
    if (!(*var > 0.25)) return false;
    *slope = (sxy / n - mx * my) / *var;
    return true;
}

/* The least-squares line through the decayed sums; false when they cannot tell the row
 * cost from the fixed cost (too few steps, too little variation, or rows that come out
 * free). A line that meets zero rows at or below zero seconds is a compute-bound step
 * (wide batches on a CPU, with no fixed cost the noise can tell; *bound set): a row costs
 * its whole share of the step, and no draft pays, not even one the acceptance model calls
 * near-certain (the figures: docs/notes/2026-12-07-spec-cost-fit.md). */
static bool fit_line(const spec_cost *c, double *per_row, double *fixed, bool *bound) {
    double slope, var;
    if (c->n < 8 || !ls_slope(c->n, c->sx, c->sy, c->sxx, c->sxy, &slope, &var)) return false;
    double mx = c->sx / c->n, my = c->sy / c->n;
    if (!(slope > 0)) return false;
    *per_row = slope;
    *fixed = my - slope * mx;
    *bound = !(*fixed > 0);
    if (*bound) {
        *per_row = my / mx;
        *fixed = 0;
    }
    return true;
}

/* The bucket's row cost from its own line, where it has one, or the line across buckets
 * where that is dearer. A bucket's own line scatters with the machine's noise and can
 * price a row far below what the steps show, while the line through the buckets' mean
 * steps, which noise moves little, does not (docs/notes/2026-12-07-spec-cost-fit.md). A
 * slope that comes out low lets through drafts that lose; one that comes out high only
 * drafts less. */
static bool row_cost(const spec_cost *c, double *per_row, double *fixed, bool *bound) {
    if (!fit_line(c, per_row, fixed, bound)) return false;
    double mx = c->sx / c->n, my = c->sy / c->n;
    double across = c->cross_share * my / mx;
    if (across > *per_row) {
        *per_row = across;
        *fixed = my - *per_row * mx;
    }
    return true;
}

void spec_cost_observe(spec_cost *c, int rows, double seconds) {
    if (rows <= 0 || !(seconds > 0)) return;
    double x = rows, y = seconds;
    c->n = c->n * COST_DECAY + 1;
    c->sx = c->sx * COST_DECAY + x;
    c->sy = c->sy * COST_DECAY + y;
    c->sxx = c->sxx * COST_DECAY + x * x;
    c->sxy = c->sxy * COST_DECAY + x * y;
    double per_row, fixed;
    bool bound = false;
    if (!row_cost(c, &per_row, &fixed, &bound)) return;
    /* a compute-bound line is remembered only as far as the line across buckets confirms
     * it: a few noisy steps of one sequence draw one often enough that keeping it would
     * stop a single stream drafting for good, while forgetting it would let a wide batch
     * draft again on the cheap share it had before */
    if (!bound)
        c->row_share = per_row / (c->sy / c->sx);
    else if (c->cross_share > c->row_share)
        c->row_share = c->cross_share;
}

/* The line through the mean (rows, seconds) of every bucket with a few steps, each
 * weighing alike: its slope is what a row costs on average across widths. That is an
 * approximation (a row's cost changes with the width, hence one fit per bucket), but rows
 * vary far more between buckets than within one, so it is sure where a bucket's own line
 * is not. False with fewer than two such buckets, means within about half a row, or rows
 * that come out free. */
static bool cross_slope(const spec_cost *costs, int n_buckets, double *slope) {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int b = 0; b < n_buckets; b++) {
        if (costs[b].n < CROSS_MIN_STEPS) continue;
        double x = costs[b].sx / costs[b].n, y = costs[b].sy / costs[b].n;
        n += 1;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double var;
    return n >= 2 && ls_slope(n, sx, sy, sxx, sxy, slope, &var) && *slope > 0;
}

void spec_cost_share_across(spec_cost *costs, int n_buckets) {
    double slope = 0;
    bool have = cross_slope(costs, n_buckets, &slope);
    for (int b = 0; b < n_buckets; b++) {
        spec_cost *c = &costs[b];
        c->cross_share = 0;
        /* one sequence needs no help: its drafts move its rows from 1 to 9, far more against
         * their mean than a wide batch's, so its own line is sure, and the line from wider
         * buckets would misprice the dear second row of a CPU step */
        if (!have || c->n < 1e-9 || b == 0) continue;
        double share = slope / (c->sy / c->sx);
        c->cross_share = share < SHARE_MAX ? share : SHARE_MAX;
    }
}

bool spec_cost_fit(const spec_cost *c, double *per_row, double *fixed) {
    *per_row = *fixed = 0;
    if (c->n < 1e-9) return false;
    bool bound;
    if (row_cost(c, per_row, fixed, &bound)) return true;
    double mx = c->sx / c->n, my = c->sy / c->n;
    double share = c->row_share > 0 ? c->row_share : ROW_SHARE_PRIOR;
    *per_row = share * my / mx;
    *fixed = my - *per_row * mx;
    return false;
}

/* The longest draft whose k-th token, accepted with probability p^k, still beats what it
 * costs: its row, plus extra_s seconds (a drafter model's time for one token), as a share
 * of one token's time in the step. */
static int draft_len(const spec_cost *c, int width, double p, int max_k, double extra_s) {
    if (max_k <= 0 || width <= 0 || !(p > 0)) return 0;
    double per_row, fixed;
    const bool fitted = spec_cost_fit(c, &per_row, &fixed);
    /* a bucket no line prices now or has priced before drafts short: enough to vary the
     * rows for a fit, not k rows per sequence on a guess (32-63 sequences on the AVX2 EPYC
     * drafted 2266 rows in the 8 steps before their first fit, each a token's cost) */
    if (c->row_share <= 0 && !fitted && max_k > UNPRICED_MAX_K) max_k = UNPRICED_MAX_K;
    if (c->n < 1e-9) return max_k; /* nothing measured yet */
    double token_s = (fixed + per_row * width) / width;
    if (extra_s < 0) extra_s = SPEC_MODEL_PRIOR * token_s;
    double share = (per_row + extra_s) / token_s; /* of a token's time, one draft token */
    if (!(share < 1)) return 0;
    if (p >= 1) return max_k;
    int k = 0;
    double reach = p; /* the probability that draft token k + 1 is accepted */
    while (k < max_k && reach > share) {
        k++;
        reach *= p;
    }
    return k;
}

int spec_cost_draft_len(const spec_cost *c, int width, double p, int max_k) {
    return draft_len(c, width, p, max_k, 0);
}

int spec_cost_sequence_draft_len(const spec_cost *c, int width, double p, int max_k, bool tried) {
    int len = draft_len(c, width, p, max_k, 0);
    return len == 0 && max_k > 0 && !tried ? 1 : len;
}

double spec_cost_model_gain(const spec_cost *c, int width, double p, int k, double token_s) {
    if (k <= 0 || width <= 0 || !(p > 0) || p >= 1) return 0;
    double per_row, fixed;
    spec_cost_fit(c, &per_row, &fixed);
    if (c->n < 1e-9) return 0;
    double token = (fixed + per_row * width) / width;
    if (!(token_s > 0)) token_s = SPEC_MODEL_PRIOR * token;
    double tokens = (1 - pow(p, k + 1)) / (1 - p); /* expected per step: accepted drafts and one more */
    return 1 - (token + k * (per_row + token_s)) / tokens / token;
}

int spec_cost_model_draft_len(const spec_cost *c, int width, double p, int max_k, double token_s) {
    return draft_len(c, width, p, max_k, token_s > 0 ? token_s : -1);
}

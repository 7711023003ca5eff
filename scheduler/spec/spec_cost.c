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
static const double SHARE_MAX = 0.95;       /* of a token's time: near-certain drafts stay possible */

/* The least-squares line through the decayed sums; false when they cannot tell the row
 * cost from the fixed cost (too few steps, too little variation, or rows that come out
 * free). The row cost is the slope plus one standard error, at most SHARE_MAX of the mean
 * time per row: a slope fitted from a few drafted steps among many plain ones (a wide
 * batch, where drafts are rare) scatters widely, and one that comes out low lets drafts
 * through that lose. Erring dear only shortens drafts where the fit is unsure. A slope
 * above the mean time per row (a negative fixed cost: noise about a step that is nearly
 * all rows) is a dear row all the same, not a line to ignore. */
static bool fit_line(const spec_cost *c, double *per_row, double *fixed) {
    if (c->n < 8) return false;
    double mx = c->sx / c->n, my = c->sy / c->n;
    double sxx = c->sxx - c->n * mx * mx, sxy = c->sxy - c->n * mx * my, syy = c->syy - c->n * my * my;
    if (!(sxx > 0.25 * c->n)) return false;
    double slope = sxy / sxx;
    if (!(slope > 0)) return false;
    double residual = (syy - slope * sxy) / (c->n - 2); /* variance about the line */
    double err = residual > 0 ? sqrt(residual / sxx) : 0;
    *per_row = fmin(slope + err, SHARE_MAX * my / mx);
    *fixed = my - *per_row * mx;
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
    c->syy = c->syy * COST_DECAY + y * y;
    double per_row, fixed;
    if (fit_line(c, &per_row, &fixed)) c->row_share = per_row / (c->sy / c->sx);
}

/* The line through the mean (rows, seconds) of every bucket with steps, each weighing
 * alike: its slope is what a row costs across widths. Rows vary far more between buckets
 * than within one, so the line is sure where a bucket's own is not. False with fewer than
 * two buckets, or a line that makes no sense. */
static bool cross_slope(const spec_cost *costs, int n_buckets, double *slope) {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int b = 0; b < n_buckets; b++) {
        if (costs[b].n < 1) continue;
        double x = costs[b].sx / costs[b].n, y = costs[b].sy / costs[b].n;
        n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    if (n < 2) return false;
    double var = sxx - sx * sx / n;
    if (!(var > 0.25)) return false;
    *slope = (sxy - sx * sy / n) / var;
    return *slope > 0;
}

void spec_cost_share_across(spec_cost *costs, int n_buckets) {
    double slope;
    bool have = cross_slope(costs, n_buckets, &slope);
    for (int b = 0; b < n_buckets; b++) {
        spec_cost *c = &costs[b];
        c->cross_share = 0;
        if (!have || c->n < 1e-9) continue;
        double share = slope / (c->sy / c->sx);
        c->cross_share = share < SHARE_MAX ? share : SHARE_MAX;
    }
}

bool spec_cost_fit(const spec_cost *c, double *per_row, double *fixed) {
    *per_row = *fixed = 0;
    if (c->n < 1e-9) return false;
    if (fit_line(c, per_row, fixed)) return true;
    double mx = c->sx / c->n, my = c->sy / c->n;
    double share = c->row_share > 0 ? c->row_share : c->cross_share > 0 ? c->cross_share : ROW_SHARE_PRIOR;
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
    spec_cost_fit(c, &per_row, &fixed);
    if (c->n < 1e-9) return max_k < 2 ? max_k : 2; /* nothing measured yet: a short draft */
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

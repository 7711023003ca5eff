/* stats.c: mean, standard deviation, median and percentiles of a sample.
 *
 * Percentiles interpolate linearly between the two nearest ranks, numpy.percentile's
 * default method, because vLLM's benchmark computes them with numpy and our numbers are
 * meant to compare with its published ones (nearest-rank would differ on small samples).
 * The standard deviation is the population one (numpy.std's default ddof=0), as vLLM's.
 */
#include <math.h>
#include <stdlib.h>

#include "bench/loadgen/loadgen.h"

double lg_stats_percentile(const double *sorted, size_t n, double p) {
    /* rank h in [0, n-1]; the value between sorted[lo] and sorted[lo+1] at h's fraction */
    double h = (double)(n - 1) * p / 100.0;
    size_t lo = (size_t)floor(h);
    if (lo >= n - 1) return sorted[n - 1];
    double frac = h - (double)lo;
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

static int stats_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void lg_stats_summarize(double *v, size_t n, lg_summary *out) {
    *out = (lg_summary){.n = n};
    if (n == 0) return;
    qsort(v, n, sizeof *v, stats_cmp);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    out->mean = sum / (double)n;
    double sq = 0;
    for (size_t i = 0; i < n; i++) sq += (v[i] - out->mean) * (v[i] - out->mean);
    out->std = sqrt(sq / (double)n);
    out->median = lg_stats_percentile(v, n, 50);
    out->p90 = lg_stats_percentile(v, n, 90);
    out->p99 = lg_stats_percentile(v, n, 99);
}

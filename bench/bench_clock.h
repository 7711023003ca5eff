/* bench_clock.h: what the C benchmarks share for timing: a monotonic clock in
 * microseconds and a comparison for qsort of the samples (medians, minimums). */
#ifndef SPINDLE_BENCH_CLOCK_H
#define SPINDLE_BENCH_CLOCK_H

#include <time.h>

static inline double bench_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif

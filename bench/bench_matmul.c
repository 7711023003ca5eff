/* bench_matmul.c: what one CPU matmul of T rows costs, for the kernels behind prefill
 * chunks and speculative verify steps (a step of 1 + k rows per sequence).
 *
 * One weight matrix (N rows of K, random values quantized to TYPE) against T random
 * activation rows through dev_matmul_group on the CPU backend, with one kernel set and
 * thread count. Each size runs REPS timings of 5 calls; the minimum is the figure (this
 * machine is shared, and the minimum is the least disturbed), the median beside it.
 * Prints one tab-separated line per T: rows, min us, median us, min us per row.
 * It uses only the device interface, so it builds against any commit's libspindle.a
 * (that is how an older build is compared).
 *
 * usage: bench_matmul [--isa SET] [--type q4_1|q4_0|q8_0] [--k K] [--n N]
 *                     [--threads N] [--reps N] T [T ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/device.h"
#include "quant/quant.h"
#include "bench/bench_clock.h"

static float uniform(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / (float)(1u << 24) - 0.5f;
}

static int usage(const char *why) {
    fprintf(stderr,
            "bench_matmul: %s\nusage: bench_matmul [--isa SET] [--type q4_1|q4_0|q8_0] [--k K] [--n N] "
            "[--threads N] [--reps N] T [T ...]\n",
            why);
    return 2;
}

/* One size: the matrix and rows made, then reps timings of 5 calls. */
static int run(dev_backend *dev, const dev_tensor *w, int64_t k, int64_t n, int64_t rows, int reps) {
    float *x = malloc(sizeof(float) * (size_t)(rows * k)), *y = malloc(sizeof(float) * (size_t)(rows * n));
    double *times = malloc(sizeof(double) * (size_t)reps);
    if (!x || !y || !times) return usage("out of memory");
    unsigned state = 7;
    for (int64_t i = 0; i < rows * k; i++) x[i] = uniform(&state);
    if (dev_reserve(dev, rows, n > k ? n : k) != SP_OK) return usage(sp_last_error());
    dev_matmul_part part = {.out = y, .w = w};
    dev_matmul_group(dev, &part, 1, x, rows); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now_us();
        for (int call = 0; call < 5; call++) dev_matmul_group(dev, &part, 1, x, rows);
        times[r] = (bench_now_us() - t0) / 5;
    }
    qsort(times, (size_t)reps, sizeof *times, bench_cmp_double);
    printf("%lld\t%.1f\t%.1f\t%.2f\n", (long long)rows, times[0], times[reps / 2], times[0] / (double)rows);
    free(x);
    free(y);
    free(times);
    return 0;
}

int main(int argc, char **argv) {
    sp_cpu_isa isa = SP_CPU_ISA_AUTO;
    quant_type type = QUANT_Q4_1;
    int64_t k = 576, n = 1536; /* SmolLM2-135M's FFN up projection */
    int threads = 1, reps = 200, first_size = argc;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (arg[0] != '-') {
            first_size = i;
            break;
        }
        if (!val) return usage("a flag without its value");
        if (!strcmp(arg, "--isa")) {
            if (sp_cpu_isa_parse(val, &isa) != SP_OK) return usage(sp_last_error());
        } else if (!strcmp(arg, "--type")) {
            type = !strcmp(val, "q4_1")   ? QUANT_Q4_1
                   : !strcmp(val, "q4_0") ? QUANT_Q4_0
                   : !strcmp(val, "q8_0") ? QUANT_Q8_0
                                          : QUANT_TYPE_LIMIT;
            if (type == QUANT_TYPE_LIMIT) return usage("--type: one of q4_1, q4_0, q8_0");
        } else if (!strcmp(arg, "--k")) {
            k = atoll(val);
        } else if (!strcmp(arg, "--n")) {
            n = atoll(val);
        } else if (!strcmp(arg, "--threads")) {
            threads = atoi(val);
        } else if (!strcmp(arg, "--reps")) {
            reps = atoi(val);
        } else {
            return usage("unknown flag");
        }
        i++;
    }
    if (first_size == argc) return usage("no row counts");
    if (k <= 0 || k % QUANT_QK || n <= 0 || threads <= 0 || reps <= 0)
        return usage("--k (a multiple of 32), --n, --threads and --reps must be positive");
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = threads, .cpu_isa = isa};
    dev_backend *dev;
    if (dev_create(&opts, &dev) != SP_OK) return usage(sp_last_error());
    const size_t row_bytes = quant_row_bytes(type, k);
    char *data = malloc(row_bytes * (size_t)n);
    float *row = malloc(sizeof(float) * (size_t)k);
    if (!data || !row) return usage("out of memory");
    unsigned state = 1;
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < k; i++) row[i] = uniform(&state);
        quant_quantize_row(type, data + (size_t)j * row_bytes, row, k);
    }
    dev_tensor w;
    if (dev_weight_init(dev, &w, type, k, n, data, row_bytes * (size_t)n) != SP_OK) return usage(sp_last_error());
    printf("# %s, %s, K=%lld N=%lld, %d thread(s)\n# rows\tmin_us\tmedian_us\tmin_us_per_row\n",
           sp_cpu_isa_name(dev_cpu_kernels(dev)), quant_type_name(type), (long long)k, (long long)n, threads);
    for (int i = first_size; i < argc; i++) {
        const int64_t rows = atoll(argv[i]);
        if (rows <= 0) return usage("row counts must be positive");
        if (run(dev, &w, k, n, rows, reps)) return 2;
    }
    dev_destroy(dev);
    free(data);
    free(row);
    return 0;
}

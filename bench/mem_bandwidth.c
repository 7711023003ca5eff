/* mem_bandwidth.c: how fast this machine reads memory, the ceiling of batch-1 decode
 * (every weight is read once per token). Reads a buffer of each size with 1 and N
 * threads (each its own share, 256-bit loads), several times, and prints one JSON line per
 * (size, threads) with the median GB/s. A buffer smaller than the last-level cache
 * measures that cache; a larger one measures DRAM.
 *
 *   build/mem_bandwidth [SIZE_MIB ...]     (default: 92 1024; threads 1 and 2)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { REPS = 9, MAX_THREADS = 2 };

typedef struct share {
    const char *begin;
    size_t bytes;
    float sink; /* keeps the loads from being optimized away */
} share;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* 256-bit loads, four independent sums: the way the kernels read. */
__attribute__((target("avx2"))) static float read_avx2(const char *p, size_t bytes) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t off = 0; off + 128 <= bytes; off += 128)
        for (int k = 0; k < 4; k++) acc[k] = _mm256_add_ps(acc[k], _mm256_load_ps((const float *)(p + off) + 8 * k));
    float lanes[8];
    _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    return lanes[0];
}
#endif

/* 64-bit loads, for CPUs without AVX2. */
static float read_plain(const char *p, size_t bytes) {
    uint64_t acc[4] = {0, 0, 0, 0};
    for (size_t off = 0; off + 32 <= bytes; off += 32)
        for (int k = 0; k < 4; k++) acc[k] += *(const uint64_t *)(p + off + 8 * (size_t)k);
    return (float)(acc[0] ^ acc[1] ^ acc[2] ^ acc[3]);
}

static void *read_share(void *arg) {
    share *s = arg;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) {
        s->sink = read_avx2(s->begin, s->bytes);
        return NULL;
    }
#endif
    s->sink = read_plain(s->begin, s->bytes);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    size_t sizes_mib[8] = {92, 1024};
    int n_sizes = 2;
    if (argc > 1) {
        n_sizes = argc - 1 < 8 ? argc - 1 : 8;
        for (int i = 0; i < n_sizes; i++) sizes_mib[i] = strtoull(argv[i + 1], NULL, 10);
    }
    for (int i = 0; i < n_sizes; i++) {
        size_t bytes = sizes_mib[i] << 20;
        char *buf = aligned_alloc(4096, bytes);
        if (!buf) {
            fprintf(stderr, "mem_bandwidth: cannot allocate %zu MiB\n", sizes_mib[i]);
            return 1;
        }
        memset(buf, 1, bytes); /* fault every page in before timing */
        for (int threads = 1; threads <= MAX_THREADS; threads++) {
            double gbs[REPS];
            for (int r = 0; r < REPS; r++) {
                share shares[MAX_THREADS];
                pthread_t tid[MAX_THREADS];
                size_t per = (bytes / (size_t)threads) & ~(size_t)127;
                double t0 = now_s();
                for (int t = 0; t < threads; t++) {
                    shares[t] = (share){buf + (size_t)t * per, per, 0};
                    if (pthread_create(&tid[t], NULL, read_share, &shares[t]) != 0) {
                        fprintf(stderr, "mem_bandwidth: cannot start a thread\n");
                        return 1;
                    }
                }
                for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
                gbs[r] = (double)(per * (size_t)threads) / (now_s() - t0) / 1e9;
            }
            qsort(gbs, REPS, sizeof gbs[0], cmp_double);
            printf("{\"size_mib\":%zu,\"threads\":%d,\"read_gb_per_s_median\":%.2f,\"read_gb_per_s_max\":%.2f}\n",
                   sizes_mib[i], threads, gbs[REPS / 2], gbs[REPS - 1]);
        }
        free(buf);
    }
    return 0;
}

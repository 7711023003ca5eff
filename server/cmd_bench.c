/* cmd_bench.c: `spindle bench`: prompt processing and generation speed, measured the
 * way llama-bench measures them so the two compare: ppN evaluates N random tokens as
 * one batch from an empty cache; tgN evaluates N single tokens one after another from
 * an empty cache. A warm-up run precedes the timed repetitions. One JSON object per
 * test on stdout. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/sample.h"
#include "server/commands.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t bench_rng = 0x5eed;
static int32_t bench_random_token(int32_t n_vocab) {
    bench_rng = bench_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((bench_rng >> 33) % (uint64_t)n_vocab);
}

/* One timed run; returns tokens/s or a negative value on failure. */
static double bench_once(cli_session *s, int n_tokens, bool batch) {
    int32_t n_vocab = model_get_hparams(s->model)->n_vocab;
    int32_t *tokens = malloc(sizeof *tokens * (size_t)n_tokens);
    if (!tokens) return -1;
    for (int i = 0; i < n_tokens; i++) tokens[i] = bench_random_token(n_vocab);
    cli_session_reset(s);
    double t0 = now_seconds();
    sp_status st = SP_OK;
    if (batch) {
        st = cli_session_eval(s, tokens, n_tokens);
    } else {
        for (int i = 0; i < n_tokens && st == SP_OK; i++) {
            st = cli_session_eval(s, &tokens[i], 1);
            (void)sample_argmax(s->logits, n_vocab);
        }
    }
    double elapsed = now_seconds() - t0;
    free(tokens);
    return st == SP_OK ? (double)n_tokens / elapsed : -1;
}

static int bench_report(cli_session *s, const char *name, int n_tokens, bool batch, int reps, int threads) {
    double *tps = calloc((size_t)reps, sizeof *tps);
    if (!tps) return 1;
    if (bench_once(s, n_tokens, batch) < 0) goto fail; /* warm-up */
    for (int r = 0; r < reps; r++)
        if ((tps[r] = bench_once(s, n_tokens, batch)) < 0) goto fail;
    double sorted[64];
    int n = reps < 64 ? reps : 64;
    memcpy(sorted, tps, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(double), compare_double);
    double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    printf("{\"test\":\"%s%d\",\"threads\":%d,\"n_tokens\":%d,\"reps\":%d,\"tokens_per_s_median\":%.2f,"
           "\"tokens_per_s\":[",
           name, n_tokens, threads, n_tokens, reps, median);
    for (int r = 0; r < reps; r++) printf("%s%.2f", r ? "," : "", tps[r]);
    printf("]}\n");
    fflush(stdout);
    free(tps);
    return 0;
fail:
    fprintf(stderr, "spindle: error: bench %s%d: %s\n", name, n_tokens, sp_last_error());
    free(tps);
    return 1;
}

int cmd_bench(int argc, char **argv) {
    enum { OPT_PP = 256, OPT_TG, OPT_REPS, OPT_THREADS, OPT_DEVICE };
    static const struct option options[] = {
        {"model", required_argument, NULL, 'm'},
        {"pp", required_argument, NULL, OPT_PP},
        {"tg", required_argument, NULL, OPT_TG},
        {"reps", required_argument, NULL, OPT_REPS},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    const char *model_path = CMD_DEFAULT_MODEL;
    long pp = 512, tg = 128, reps = 5, threads = 0;
    dev_kind kind = DEV_KIND_CPU;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", options, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case OPT_PP:
            if (!cli_parse_int("pp", optarg, 0, 512, &pp)) return 2;
            break;
        case OPT_TG:
            if (!cli_parse_int("tg", optarg, 0, 1 << 16, &tg)) return 2;
            break;
        case OPT_REPS:
            if (!cli_parse_int("reps", optarg, 1, 64, &reps)) return 2;
            break;
        case OPT_THREADS:
            if (!cli_parse_int("threads", optarg, 1, 256, &threads)) return 2;
            break;
        case OPT_DEVICE:
            if (strcmp(optarg, "cpu") == 0)
                kind = DEV_KIND_CPU;
            else if (strcmp(optarg, "cuda") == 0)
                kind = DEV_KIND_CUDA;
            else if (strcmp(optarg, "auto") == 0)
                kind = DEV_KIND_AUTO;
            else {
                fprintf(stderr, "spindle: error: --device: '%s' is not one of cpu, cuda, auto\n", optarg);
                return 2;
            }
            break;
        case 'h':
            printf("usage: spindle bench [--model PATH] [--device cpu|cuda|auto] [--threads N] [--pp 512] [--tg 128] "
                   "[--reps 5]\n"
                   "  ppN: N random tokens as one batch; tgN: N tokens one at a time; 0 skips a test.\n");
            return 0;
        default: return 2;
        }
    }
    cli_session s;
    sp_status st = cli_session_open(&s, model_path, kind, (int)threads);
    if (st == SP_OK) st = cli_session_reserve(&s, (int)(pp > tg ? pp : tg) + 1);
    if (st != SP_OK) {
        fprintf(stderr, "spindle: error: %s\n", sp_last_error());
        cli_session_close(&s);
        return cmd_exit_status(st);
    }
    int n_threads = dev_threads(s.dev);
    int rc = 0;
    if (pp > 0) rc |= bench_report(&s, "pp", (int)pp, true, (int)reps, n_threads);
    if (tg > 0) rc |= bench_report(&s, "tg", (int)tg, false, (int)reps, n_threads);
    cli_session_close(&s);
    return rc;
}

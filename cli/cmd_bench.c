/* cmd_bench.c: `spindle bench`: prompt processing and generation speed, measured the
 * way llama-bench measures them so the two compare: ppN evaluates N random tokens as
 * one batch (one forward step) from an empty cache; tgN evaluates N single tokens one
 * after another from an empty cache. With --batch S > 1 the generation test is tgN_bS:
 * S sequences, each first given a prompt of BENCH_PROMPT random tokens (not timed), then
 * N forward steps that each carry one token of every sequence and draw the next token of
 * all S greedily where the logits are, as the server's steps do (the tokens fed are
 * random, not the drawn ones). With --depth D (llama-bench's -d) ppN and tgN start after
 * D random tokens already in the cache (not timed): ppN_dD, tgN_dD, what a long
 * conversation's next prompt and answer cost, attention over D positions included.
 * A warm-up run precedes the timed
 * repetitions. One JSON object per test on stdout; the tg tests also give the median
 * time of one forward step over all timed steps. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sample/sample.h"
#include "cli/cli.h"

/* BENCH_PROMPT: prompt tokens of each sequence before a batched generation test. */
enum { BENCH_PROMPT = 16, BENCH_MAX_REPS = 64 };

typedef enum bench_kind {
    BENCH_PP,      /* one step of n_tokens */
    BENCH_TG,      /* n_tokens steps of one token */
    BENCH_TG_BATCH /* BENCH_PROMPT-token prompts, then n_tokens steps of n_seqs tokens */
} bench_kind;

/* One test and its scratch, allocated before the warm-up (bench_test_init), so the
 * timed loops allocate nothing; width = n_tokens, or max(S, BENCH_PROMPT) for
 * BENCH_TG_BATCH. Owned by the main thread. */
typedef struct bench_test {
    bench_kind kind;
    char name[32];      /* "pp512", "tg128", "tg128_b64", "tg128_d1024" */
    int n_tokens;       /* pp: the prompt; tg: steps (tokens per sequence) */
    int n_seqs;         /* S: 1 but for BENCH_TG_BATCH */
    int depth;          /* D: tokens in the cache before the timed part (not BENCH_TG_BATCH) */
    int reps;           /* timed repetitions */
    int32_t *tokens;    /* (width) token ids of one step */
    int32_t *context;   /* (depth) the untimed tokens before them */
    int32_t *pos, *seq; /* (width) BENCH_TG_BATCH: each token's position and sequence */
    int32_t *seq_len;   /* (S) BENCH_TG_BATCH */
    int32_t *rows;      /* (S) BENCH_TG_BATCH: logit rows 0..S-1 */
    int32_t *blocks;    /* (S, max_blocks) BENCH_TG_BATCH: sequence q owns blocks q*max_blocks.. */
    int32_t max_blocks;
    sample_params greedy;       /* BENCH_TG_BATCH: every row drawn greedily where its logits are */
    dev_sample_row *draws;      /* (S) BENCH_TG_BATCH */
    dev_sample_result *results; /* (S) BENCH_TG_BATCH */
    double *step_s;             /* (reps, n_tokens) tg: seconds of each timed step */
    double tps[BENCH_MAX_REPS];
} bench_test;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v (n >= 1); sorts v. */
static double median_sorted_in_place(double *v, size_t n) {
    qsort(v, n, sizeof *v, compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t bench_rng = 0x5eed;
static int32_t bench_random_token(int32_t n_vocab) {
    bench_rng = bench_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((bench_rng >> 33) % (uint64_t)n_vocab);
}

/* Tokens the KV cache must hold for test kind with these sizes (block_size B). */
static long bench_ctx_needed(bench_kind kind, long n_tokens, long n_seqs, long depth, int block_size) {
    if (kind != BENCH_TG_BATCH) return depth + n_tokens + 1;
    long blocks_per_seq = (BENCH_PROMPT + n_tokens + block_size - 1) / block_size;
    return n_seqs * blocks_per_seq * block_size;
}

static void bench_test_free(bench_test *t) {
    free(t->tokens);
    free(t->context);
    free(t->pos);
    free(t->seq);
    free(t->seq_len);
    free(t->rows);
    free(t->blocks);
    free(t->draws);
    free(t->results);
    free(t->step_s);
}

static sp_status bench_test_init(bench_test *t, const cli_session *s, bench_kind kind, int n_tokens, int n_seqs,
                                 int depth, int reps) {
    *t = (bench_test){.kind = kind, .n_tokens = n_tokens, .n_seqs = n_seqs, .depth = depth, .reps = reps};
    if (kind == BENCH_PP)
        snprintf(t->name, sizeof t->name, "pp%d", n_tokens);
    else if (kind == BENCH_TG)
        snprintf(t->name, sizeof t->name, "tg%d", n_tokens);
    else
        snprintf(t->name, sizeof t->name, "tg%d_b%d", n_tokens, n_seqs);
    if (depth > 0) {
        size_t len = strlen(t->name);
        snprintf(t->name + len, sizeof t->name - len, "_d%d", depth);
    }
    size_t width = kind == BENCH_TG_BATCH ? (size_t)(n_seqs > BENCH_PROMPT ? n_seqs : BENCH_PROMPT) : (size_t)n_tokens;
    bool ok = (t->tokens = malloc(sizeof *t->tokens * width)) != NULL;
    if (depth > 0) ok = ok && (t->context = malloc(sizeof *t->context * (size_t)depth));
    if (kind != BENCH_PP) ok = ok && (t->step_s = malloc(sizeof *t->step_s * (size_t)reps * (size_t)n_tokens));
    if (kind == BENCH_TG_BATCH) {
        t->max_blocks = (int32_t)((BENCH_PROMPT + n_tokens + s->block_size - 1) / s->block_size);
        ok = ok && (t->pos = malloc(sizeof *t->pos * width)) && (t->seq = malloc(sizeof *t->seq * width)) &&
             (t->seq_len = malloc(sizeof *t->seq_len * (size_t)n_seqs)) &&
             (t->rows = malloc(sizeof *t->rows * (size_t)n_seqs)) &&
             (t->blocks = malloc(sizeof *t->blocks * (size_t)n_seqs * (size_t)t->max_blocks)) &&
             (t->draws = malloc(sizeof *t->draws * (size_t)n_seqs)) &&
             (t->results = malloc(sizeof *t->results * (size_t)n_seqs));
        if (ok) {
            t->greedy = sample_params_default();
            t->greedy.temperature = 0.0f;
            for (int q = 0; q < n_seqs; q++) t->draws[q] = (dev_sample_row){.params = &t->greedy, .top_logprobs = -1};
            /* sequence q owns the q-th run of max_blocks blocks of the session's pool */
            for (int64_t b = 0; b < (int64_t)n_seqs * t->max_blocks; b++) t->blocks[b] = (int32_t)b;
            for (int q = 0; q < n_seqs; q++) t->rows[q] = q;
        }
    }
    if (!ok) {
        bench_test_free(t);
        return sp_fail(SP_ERR_NOMEM, "bench %s: out of memory", t->name);
    }
    return SP_OK;
}

/* The untimed prompts of a batched test: one step of BENCH_PROMPT tokens per sequence. */
static sp_status bench_batch_prompts(cli_session *s, bench_test *t) {
    int32_t n_vocab = model_get_hparams(s->model)->n_vocab;
    int32_t len = BENCH_PROMPT;
    for (int q = 0; q < t->n_seqs; q++) {
        for (int i = 0; i < BENCH_PROMPT; i++) {
            t->tokens[i] = bench_random_token(n_vocab);
            t->pos[i] = i;
            t->seq[i] = 0;
        }
        dev_step step = {
            .n_tokens = BENCH_PROMPT,
            .tokens = t->tokens,
            .pos = t->pos,
            .seq = t->seq,
            .n_seqs = 1,
            .seq_len = &len,
            .block_table = t->blocks + (size_t)q * (size_t)t->max_blocks,
            .max_blocks = t->max_blocks,
            .n_logits = 0,
            .logit_rows = t->rows,
        };
        sp_status st = model_forward(s->model, s->kv, &step, NULL); /* no logit rows */
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

/* One decode step of a batched test: token k (0-based) of every sequence. */
static sp_status bench_batch_step(cli_session *s, bench_test *t, int k) {
    int32_t n_vocab = model_get_hparams(s->model)->n_vocab;
    for (int q = 0; q < t->n_seqs; q++) {
        t->tokens[q] = bench_random_token(n_vocab);
        t->pos[q] = BENCH_PROMPT + k;
        t->seq[q] = q;
        t->seq_len[q] = BENCH_PROMPT + k + 1;
    }
    dev_step step = {
        .n_tokens = t->n_seqs,
        .tokens = t->tokens,
        .pos = t->pos,
        .seq = t->seq,
        .n_seqs = t->n_seqs,
        .seq_len = t->seq_len,
        .block_table = t->blocks,
        .max_blocks = t->max_blocks,
        .n_logits = t->n_seqs,
        .logit_rows = t->rows,
    };
    const dev_sample_vocab vocab = {n_vocab, NULL, 0};
    return model_forward_sample(s->model, s->kv, &step, &vocab, t->draws, t->results);
}

/* One run of t; step_s (n_tokens) receives each step's seconds for the tg tests, or is
 * NULL (the warm-up). Returns tokens/s, or a negative value on failure. */
static double bench_once(cli_session *s, bench_test *t, double *step_s) {
    int32_t n_vocab = model_get_hparams(s->model)->n_vocab;
    sp_status st = SP_OK;
    cli_session_reset(s);
    if (t->kind == BENCH_TG_BATCH) {
        if ((st = bench_batch_prompts(s, t)) != SP_OK) return -1;
    } else {
        for (int i = 0; i < t->depth; i++) t->context[i] = bench_random_token(n_vocab);
        if (t->depth > 0 && (st = cli_session_eval(s, t->context, t->depth)) != SP_OK) return -1;
        for (int i = 0; i < t->n_tokens; i++) t->tokens[i] = bench_random_token(n_vocab);
    }
    double t0 = now_seconds();
    if (t->kind == BENCH_PP) {
        st = cli_session_eval(s, t->tokens, t->n_tokens);
    } else {
        for (int i = 0; i < t->n_tokens && st == SP_OK; i++) {
            double t_step = now_seconds();
            if (t->kind == BENCH_TG) {
                st = cli_session_eval(s, &t->tokens[i], 1);
                (void)sample_argmax(s->logits, n_vocab);
            } else {
                st = bench_batch_step(s, t, i);
            }
            if (step_s) step_s[i] = now_seconds() - t_step;
        }
    }
    double elapsed = now_seconds() - t0;
    return st == SP_OK ? (double)t->n_tokens * (double)t->n_seqs / elapsed : -1;
}

/* Runs t (a warm-up, then the timed repetitions) and prints its JSON line. */
static int bench_report(cli_session *s, bench_test *t, int threads) {
    if (bench_once(s, t, NULL) < 0) goto fail; /* warm-up */
    for (int r = 0; r < t->reps; r++) {
        double *step_s = t->step_s ? t->step_s + (size_t)r * (size_t)t->n_tokens : NULL;
        if ((t->tps[r] = bench_once(s, t, step_s)) < 0) goto fail;
    }
    double sorted[BENCH_MAX_REPS];
    memcpy(sorted, t->tps, sizeof(double) * (size_t)t->reps);
    double median = median_sorted_in_place(sorted, (size_t)t->reps);
    printf("{\"test\":\"%s\",\"threads\":%d,\"n_tokens\":%d,", t->name, threads, t->n_tokens);
    if (t->depth > 0) printf("\"depth\":%d,", t->depth);
    if (dev_cpu_kernels(s->dev) != SP_CPU_ISA_AUTO)
        printf("\"cpu_isa\":\"%s\",", sp_cpu_isa_name(dev_cpu_kernels(s->dev)));
    if (s->kv_type != SP_KV_F16) printf("\"kv_type\":\"%s\",", sp_kv_type_name(s->kv_type));
    if (t->kind != BENCH_PP) printf("\"batch\":%d,", t->n_seqs);
    printf("\"reps\":%d,\"tokens_per_s_median\":%.2f,", t->reps, median);
    if (t->step_s)
        printf("\"step_ms_median\":%.4f,",
               1e3 * median_sorted_in_place(t->step_s, (size_t)t->reps * (size_t)t->n_tokens));
    printf("\"tokens_per_s\":[");
    for (int r = 0; r < t->reps; r++) printf("%s%.2f", r ? "," : "", t->tps[r]);
    printf("]}\n");
    fflush(stdout);
    return 0;
fail:
    fprintf(stderr, "spindle: error: bench %s: %s\n", t->name, sp_last_error());
    return 1;
}

/* Sets up and runs one test; 1 when it failed. */
static int bench_run(cli_session *s, bench_kind kind, int n_tokens, int n_seqs, int depth, int reps, int threads) {
    bench_test t;
    if (bench_test_init(&t, s, kind, n_tokens, n_seqs, depth, reps) != SP_OK) {
        fprintf(stderr, "spindle: error: %s\n", sp_last_error());
        return 1;
    }
    int rc = bench_report(s, &t, threads);
    bench_test_free(&t);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    enum { OPT_PP = 256, OPT_TG, OPT_BATCH, OPT_DEPTH, OPT_REPS, OPT_THREADS, OPT_DEVICE, OPT_CPU_ISA, OPT_KV_TYPE };
    static const struct option options[] = {
        {"model", required_argument, NULL, 'm'},
        {"pp", required_argument, NULL, OPT_PP},
        {"tg", required_argument, NULL, OPT_TG},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"depth", required_argument, NULL, OPT_DEPTH},
        {"reps", required_argument, NULL, OPT_REPS},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"cpu-isa", required_argument, NULL, OPT_CPU_ISA},
        {"kv-type", required_argument, NULL, OPT_KV_TYPE},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    const char *model_path = CMD_DEFAULT_MODEL;
    long pp = 512, tg = 128, batch = 1, depth = 0, reps = 5, threads = 0;
    sp_device kind = SP_DEVICE_CPU;
    sp_cpu_isa cpu_isa = SP_CPU_ISA_AUTO;
    sp_kv_type kv_type = SP_KV_F16;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", options, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case OPT_PP:
            if (!cli_parse_int("pp", optarg, 0, 8192, &pp)) return 2;
            break;
        case OPT_TG:
            if (!cli_parse_int("tg", optarg, 0, 1 << 16, &tg)) return 2;
            break;
        case OPT_BATCH:
            if (!cli_parse_int("batch", optarg, 1, 256, &batch)) return 2;
            break;
        case OPT_DEPTH:
            if (!cli_parse_int("depth", optarg, 0, 1 << 16, &depth)) return 2;
            break;
        case OPT_REPS:
            if (!cli_parse_int("reps", optarg, 1, BENCH_MAX_REPS, &reps)) return 2;
            break;
        case OPT_THREADS:
            if (!cli_parse_int("threads", optarg, 1, 256, &threads)) return 2;
            break;
        case OPT_CPU_ISA:
            if (!cli_parse_cpu_isa(optarg, &cpu_isa)) return 2;
            break;
        case OPT_KV_TYPE:
            if (!cli_parse_kv_type(optarg, &kv_type)) return 2;
            break;
        case OPT_DEVICE:
            if (sp_device_parse(optarg, &kind) != SP_OK) {
                fprintf(stderr, "spindle: error: --device: %s\n", sp_last_error());
                return 2;
            }
            break;
        case 'h':
            printf("usage: spindle bench [--model PATH] [--device cpu|cuda|auto] [--threads N] "
                   "[--cpu-isa auto|generic|avx2|avx512|amx] [--kv-type f16|q8_0|q4_0] [--pp 512] [--tg 128] [--batch "
                   "1] [--depth 0] [--reps 5]\n"
                   "  ppN: N random tokens (up to 8192) as one step; tgN: N tokens one at a time; 0 skips a test.\n"
                   "  --batch S (1..256): tg decodes S sequences together (tgN_bS), each after a %d-token prompt.\n"
                   "  --depth D: pp and tg start after D tokens already in the cache (ppN_dD, tgN_dD; not with "
                   "--batch).\n",
                   BENCH_PROMPT);
            return 0;
        default: return 2;
        }
    }
    bench_kind tg_kind = batch > 1 ? BENCH_TG_BATCH : BENCH_TG;
    if (depth > 0 && batch > 1) {
        fprintf(stderr, "spindle: error: --depth: not with --batch %ld (the batched test's prompts are %d tokens)\n",
                batch, BENCH_PROMPT);
        return 2;
    }
    cli_session s;
    sp_status st = cli_session_open_sized(&s, model_path, kind, (int)threads, cpu_isa, (int)pp);
    if (st == SP_OK) {
        s.kv_type = kv_type;
        long ctx = bench_ctx_needed(BENCH_PP, pp, 1, depth, s.block_size);
        long tg_ctx = bench_ctx_needed(tg_kind, tg, batch, depth, s.block_size);
        st = cli_session_reserve(&s, (int)(tg > 0 && tg_ctx > ctx ? tg_ctx : ctx));
    }
    if (st != SP_OK) {
        fprintf(stderr, "spindle: error: %s\n", sp_last_error());
        cli_session_close(&s);
        return cmd_exit_status(st);
    }
    int n_threads = dev_threads(s.dev);
    int rc = 0;
    if (pp > 0) rc |= bench_run(&s, BENCH_PP, (int)pp, 1, (int)depth, (int)reps, n_threads);
    if (tg > 0) rc |= bench_run(&s, tg_kind, (int)tg, (int)batch, (int)depth, (int)reps, n_threads);
    cli_session_close(&s);
    return rc;
}

/* cmd_generate.c: `spindle generate`: one prompt in, its continuation on stdout
 * (streamed as whole UTF-8 characters), diagnostics and timings on stderr. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "sample/sample.h"
#include "cli/cli.h"

static void generate_usage(FILE *out) {
    fprintf(out,
            "usage: spindle generate [--model PATH] --prompt TEXT [options]\n"
            "\n"
            "  --model PATH        GGUF model (default %s)\n"
            "  --prompt TEXT       the text to continue (special tokens such as <|im_start|> are recognised)\n"
            "  --max-tokens N      tokens to generate (default 128)\n"
            "  --temperature T     0 = greedy, deterministic (default 0)\n"
            "  --top-k K           keep the K most likely tokens (default 0 = off)\n"
            "  --top-p P           keep the smallest set with probability P (default 1 = off)\n"
            "  --min-p P           drop tokens below P times the top probability (default 0 = off)\n"
            "  --seed S            random seed for sampling (default: from the clock)\n"
            "  --threads N         CPU threads (default: all cores)\n"
            "  --cpu-isa SET       CPU kernels: auto, generic, avx2, avx512, amx (default auto: the best here)\n"
            "  --kv-type TYPE      KV cache format: f16, q8_0, q4_0 (default f16)\n"
            "  --ctx N             context (KV cache) size in tokens (default: prompt + max tokens;\n"
            "                      at most the model's training context)\n"
            "  --ignore-eos        keep generating past end-of-generation tokens\n",
            CMD_DEFAULT_MODEL);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct generate_args {
    const char *model;
    const char *prompt;
    long max_tokens;
    long threads;
    sp_cpu_isa cpu_isa;
    sp_kv_type kv_type;
    long ctx;
    bool ignore_eos;
    sample_params sampling;
} generate_args;

/* Returns -1 when parsing succeeded, else the exit status. */
static int generate_parse(int argc, char **argv, generate_args *a) {
    enum {
        OPT_MAX_TOKENS = 256,
        OPT_TEMPERATURE,
        OPT_TOP_K,
        OPT_TOP_P,
        OPT_MIN_P,
        OPT_SEED,
        OPT_THREADS,
        OPT_CPU_ISA,
        OPT_KV_TYPE,
        OPT_CTX,
        OPT_IGNORE_EOS
    };
    static const struct option options[] = {
        {"model", required_argument, NULL, 'm'},
        {"prompt", required_argument, NULL, 'p'},
        {"max-tokens", required_argument, NULL, OPT_MAX_TOKENS},
        {"temperature", required_argument, NULL, OPT_TEMPERATURE},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"top-p", required_argument, NULL, OPT_TOP_P},
        {"min-p", required_argument, NULL, OPT_MIN_P},
        {"seed", required_argument, NULL, OPT_SEED},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"cpu-isa", required_argument, NULL, OPT_CPU_ISA},
        {"kv-type", required_argument, NULL, OPT_KV_TYPE},
        {"ctx", required_argument, NULL, OPT_CTX},
        {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    *a = (generate_args){.model = CMD_DEFAULT_MODEL, .max_tokens = 128, .sampling = sample_params_default()};
    a->sampling.temperature = 0.0f;
    a->sampling.seed = (uint64_t)time(NULL);
    long v;
    double f;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:h", options, NULL)) != -1) {
        switch (c) {
        case 'm': a->model = optarg; break;
        case 'p': a->prompt = optarg; break;
        case OPT_MAX_TOKENS:
            if (!cli_parse_int("max-tokens", optarg, 0, 1 << 24, &a->max_tokens)) return 2;
            break;
        case OPT_TEMPERATURE:
            if (!cli_parse_float("temperature", optarg, 0, 100, &f)) return 2;
            a->sampling.temperature = (float)f;
            break;
        case OPT_TOP_K:
            if (!cli_parse_int("top-k", optarg, 0, 1 << 24, &v)) return 2;
            a->sampling.top_k = (int)v;
            break;
        case OPT_TOP_P:
            if (!cli_parse_float("top-p", optarg, 1e-6, 1, &f)) return 2;
            a->sampling.top_p = (float)f;
            break;
        case OPT_MIN_P:
            if (!cli_parse_float("min-p", optarg, 0, 1, &f)) return 2;
            a->sampling.min_p = (float)f;
            break;
        case OPT_SEED:
            if (!cli_parse_int("seed", optarg, 0, __LONG_MAX__, &v)) return 2;
            a->sampling.seed = (uint64_t)v;
            break;
        case OPT_THREADS:
            if (!cli_parse_int("threads", optarg, 1, 256, &a->threads)) return 2;
            break;
        case OPT_CPU_ISA:
            if (!cli_parse_cpu_isa(optarg, &a->cpu_isa)) return 2;
            break;
        case OPT_KV_TYPE:
            if (!cli_parse_kv_type(optarg, &a->kv_type)) return 2;
            break;
        case OPT_CTX:
            if (!cli_parse_int("ctx", optarg, 1, 1 << 24, &a->ctx)) return 2;
            break;
        case OPT_IGNORE_EOS: a->ignore_eos = true; break;
        case 'h': generate_usage(stdout); return 0;
        default: generate_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "spindle: error: generate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!a->prompt) {
        fprintf(stderr, "spindle: error: generate: --prompt is required\n");
        generate_usage(stderr);
        return 2;
    }
    return -1;
}

int cmd_generate(int argc, char **argv) {
    generate_args a;
    int rc = generate_parse(argc, argv, &a);
    if (rc >= 0) return rc;

    cli_session s;
    int32_t *prompt_ids = NULL;
    size_t n_prompt = 0;
    sample_state sampler = {0};
    char *text = NULL; /* one decoded piece: the longest token plus held-back bytes */
    sp_status st = cli_session_open(&s, a.model, SP_DEVICE_CPU, (int)a.threads, a.cpu_isa);
    if (st != SP_OK) {
        fprintf(stderr, "spindle: error: %s\n", sp_last_error());
        return cmd_exit_status(st);
    }
    const tok_vocab *vocab = model_vocab(s.model);
    const model_hparams *hp = model_get_hparams(s.model);
    if ((st = tok_encode(vocab, a.prompt, strlen(a.prompt), tok_add_bos(vocab), true, &prompt_ids, &n_prompt)) != SP_OK)
        goto fail;
    if (n_prompt == 0) {
        st = sp_fail(SP_ERR_INVALID_ARG, "the prompt is empty after tokenization (the model adds no BOS)");
        goto fail;
    }
    if (a.ctx > hp->n_ctx_train) {
        st = sp_fail(SP_ERR_RANGE, "--ctx %ld exceeds the model's training context of %d tokens", a.ctx,
                     hp->n_ctx_train);
        goto fail;
    }
    long limit = a.ctx > 0 ? a.ctx : hp->n_ctx_train;
    if ((long)n_prompt + a.max_tokens > limit) {
        st = sp_fail(SP_ERR_RANGE, "prompt (%zu tokens) plus --max-tokens %ld exceeds the context of %ld tokens",
                     n_prompt, a.max_tokens, limit);
        goto fail;
    }
    s.kv_type = a.kv_type;
    if ((st = cli_session_reserve(&s, a.ctx > 0 ? (int)a.ctx : (int)n_prompt + (int)a.max_tokens)) != SP_OK) goto fail;
    if ((st = sample_state_init(&sampler, hp->n_vocab, a.sampling.seed)) != SP_OK) goto fail;

    double t0 = now_seconds();
    if ((st = cli_session_eval(&s, prompt_ids, (int)n_prompt)) != SP_OK) goto fail;
    double t_prompt = now_seconds() - t0;

    tok_decoder decoder;
    tok_decoder_init(&decoder, false);
    decoder.at_start = false; /* the continuation follows the prompt: keep its leading space */
    size_t text_cap = tok_max_token_bytes(vocab) + 64;
    if (!(text = malloc(text_cap))) {
        st = sp_fail(SP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    long generated = 0;
    const char *finish = "length";
    double t1 = now_seconds();
    while (generated < a.max_tokens) {
        sampler.rng = sample_rng_at(a.sampling.seed, (int64_t)n_prompt + generated); /* as the server draws */
        int32_t id = sample_token(&a.sampling, &sampler, s.logits);
        generated++;
        if (!a.ignore_eos && tok_is_eog(vocab, id)) {
            finish = "stop";
            break;
        }
        size_t n = tok_decoder_push(vocab, &decoder, id, text, text_cap);
        fwrite(text, 1, n, stdout);
        fflush(stdout);
        if (generated == a.max_tokens) break;
        if ((st = cli_session_eval(&s, &id, 1)) != SP_OK) goto fail;
    }
    size_t n = tok_decoder_flush(&decoder, text, text_cap);
    fwrite(text, 1, n, stdout);
    fputc('\n', stdout);
    double t_gen = now_seconds() - t1;
    sp_log_info("prompt: %zu tokens in %.3f s (%.1f tokens/s); generated: %ld tokens in %.3f s (%.1f tokens/s); "
                "finish: %s",
                n_prompt, t_prompt, (double)n_prompt / t_prompt, generated, t_gen,
                t_gen > 0 ? (double)generated / t_gen : 0.0, finish);
    free(text);
    free(prompt_ids);
    sample_state_free(&sampler);
    cli_session_close(&s);
    return 0;
fail:
    fprintf(stderr, "spindle: error: %s\n", sp_last_error());
    free(text);
    free(prompt_ids);
    sample_state_free(&sampler);
    cli_session_close(&s);
    return cmd_exit_status(st);
}

/* main.c: build/loadgen, a load generator for OpenAI-compatible servers (spindle,
 * llama.cpp's llama-server, vLLM): flags, --help, and the order of the steps.
 *
 *   build/loadgen --base-url http://127.0.0.1:8080 --dataset random --input-len 256 \
 *       --output-len 128 --num-prompts 64 --max-concurrency 16 --result-json out.json
 *
 * Steps: find the model (GET /v1/models unless --model), make the prompts (dataset.c, which
 * counts tokens with the server's /tokenize), send the warm-ups, run the timed requests
 * (run.c), print the table and write the JSON (report.c). Everything runs on the main
 * thread. Exit status: 0 when the run finished (failed requests are in the report), 1 when
 * it could not run (server, dataset, result file), 2 for a bad command line.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "bench/loadgen/loadgen.h"

int lg_fail(lg_err *e, const char *fmt, ...) {
    char msg[sizeof e->msg]; /* formatted apart, so e->msg may be one of the arguments */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(e->msg, msg, sizeof msg);
    return -1;
}

double lg_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void lg_notes_add(lg_notes *notes, const char *fmt, ...) {
    if (notes->n == (int)(sizeof notes->text / sizeof notes->text[0])) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(notes->text[notes->n++], sizeof notes->text[0], fmt, ap);
    va_end(ap);
}

static const char usage_text[] =
    "usage: loadgen [options]\n"
    "Streams requests to an OpenAI-compatible server and reports TTFT, TPOT, ITL, E2E latency\n"
    "and throughput with vLLM's definitions (`vllm bench serve`).\n"
    "\n"
    "  --base-url URL           server root (default http://127.0.0.1:8080)\n"
    "  --endpoint PATH          /v1/completions (default) or /v1/chat/completions\n"
    "                           (the default for --dataset chat)\n"
    "  --model NAME             model field of the requests (default: first id of GET /v1/models)\n"
    "  --dataset NAME           random (default), shared-prefix or chat\n"
    "  --dataset-path FILE      chat: a JSON list of {\"messages\": [...]} or ShareGPT\n"
    "                           {\"conversations\": [{\"from\": \"human\", \"value\": ...}]}\n"
    "  --input-len N            prompt tokens, as the server's /tokenize counts (default 256)\n"
    "  --output-len N           max_tokens of every request, with ignore_eos (default 128)\n"
    "  --prefix-len N           shared-prefix: tokens every prompt shares (default 192)\n"
    "  --num-prompts N          timed requests (default 64)\n"
    "  --num-warmups N          requests sent before the timed run, not counted (default 0)\n"
    "  --request-rate R         Poisson arrivals at R requests/s, or inf: all at once (default inf)\n"
    "  --max-concurrency C      at most C requests in flight (default: no limit)\n"
    "  --seed S                 seeds the prompts and the arrivals (default 0)\n"
    "  --timeout S              seconds per request, 0 for none (default 3600)\n"
    "  --result-json PATH       also write every metric, the parameters and the base URL as JSON\n"
    "  -h, --help               this text\n"
    "\n"
    "OPENAI_API_KEY, when set, is sent as a bearer token. Exit status: 0 when the run\n"
    "finished (failed requests are reported), 1 when it could not run, 2 for bad flags.\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("loadgen: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see --help)\n", stderr);
    va_end(ap);
    return 2;
}

/* An integer flag value in [min, INT_MAX]. */
static int flag_int(const char *flag, const char *v, int min, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < min || x > 0x7fffffff) {
        return usage_error("%s: expected an integer >= %d, got '%s'", flag, min, v);
    }
    *out = (int)x;
    return 0;
}

static int flag_double(const char *flag, const char *v, double min, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= min) || isinf(x)) {
        return usage_error("%s: expected a number >= %g, got '%s'", flag, min, v);
    }
    *out = x;
    return 0;
}

enum {
    OPT_BASE_URL = 256,
    OPT_ENDPOINT,
    OPT_MODEL,
    OPT_DATASET,
    OPT_DATASET_PATH,
    OPT_INPUT_LEN,
    OPT_OUTPUT_LEN,
    OPT_PREFIX_LEN,
    OPT_NUM_PROMPTS,
    OPT_NUM_WARMUPS,
    OPT_REQUEST_RATE,
    OPT_MAX_CONCURRENCY,
    OPT_SEED,
    OPT_TIMEOUT,
    OPT_RESULT_JSON,
};

static const struct option long_options[] = {
    {"base-url", required_argument, 0, OPT_BASE_URL},
    {"endpoint", required_argument, 0, OPT_ENDPOINT},
    {"model", required_argument, 0, OPT_MODEL},
    {"dataset", required_argument, 0, OPT_DATASET},
    {"dataset-path", required_argument, 0, OPT_DATASET_PATH},
    {"input-len", required_argument, 0, OPT_INPUT_LEN},
    {"output-len", required_argument, 0, OPT_OUTPUT_LEN},
    {"prefix-len", required_argument, 0, OPT_PREFIX_LEN},
    {"num-prompts", required_argument, 0, OPT_NUM_PROMPTS},
    {"num-warmups", required_argument, 0, OPT_NUM_WARMUPS},
    {"request-rate", required_argument, 0, OPT_REQUEST_RATE},
    {"max-concurrency", required_argument, 0, OPT_MAX_CONCURRENCY},
    {"seed", required_argument, 0, OPT_SEED},
    {"timeout", required_argument, 0, OPT_TIMEOUT},
    {"result-json", required_argument, 0, OPT_RESULT_JSON},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

/* The flag's name for messages: getopt_long leaves only the index of the option. */
static const char *flag_name(int opt) {
    for (const struct option *lo = long_options; lo->name; lo++) {
        if (lo->val == opt) return lo->name;
    }
    return "?";
}

/* Fills o from argv; returns 0, 2 for a bad command line, or -1 after --help. */
static int parse_flags(int argc, char **argv, lg_options *o, char *base_url, size_t base_url_size) {
    *o = (lg_options){.base_url = "http://127.0.0.1:8080",
                      .dataset_name = "random",
                      .input_len = 256,
                      .output_len = 128,
                      .prefix_len = 192,
                      .num_prompts = 64,
                      .request_rate = INFINITY,
                      .timeout_s = 3600};
    bool prefix_given = false;
    opterr = 0; /* our messages name the flag */
    int opt, idx;
    while ((opt = getopt_long(argc, argv, ":h", long_options, &idx)) != -1) {
        char flag[64];
        snprintf(flag, sizeof flag, "--%s", flag_name(opt));
        const char *v = optarg;
        int rc = 0, seed;
        switch (opt) {
        case 'h': fputs(usage_text, stdout); return -1;
        case ':': return usage_error("%s needs a value", argv[optind - 1]);
        case '?': return usage_error("unknown flag '%s'", argv[optind - 1]);
        case OPT_BASE_URL: o->base_url = v; break;
        case OPT_ENDPOINT: o->endpoint = v; break;
        case OPT_MODEL: o->model = v; break;
        case OPT_DATASET:
            if (strcmp(v, "random") == 0)
                o->dataset = LG_DATASET_RANDOM;
            else if (strcmp(v, "shared-prefix") == 0)
                o->dataset = LG_DATASET_SHARED_PREFIX;
            else if (strcmp(v, "chat") == 0)
                o->dataset = LG_DATASET_CHAT;
            else
                return usage_error("%s: expected random, shared-prefix or chat, got '%s'", flag, v);
            o->dataset_name = v;
            break;
        case OPT_DATASET_PATH: o->dataset_path = v; break;
        case OPT_INPUT_LEN: rc = flag_int(flag, v, 1, &o->input_len); break;
        case OPT_OUTPUT_LEN: rc = flag_int(flag, v, 1, &o->output_len); break;
        case OPT_PREFIX_LEN:
            rc = flag_int(flag, v, 1, &o->prefix_len);
            prefix_given = true;
            break;
        case OPT_NUM_PROMPTS: rc = flag_int(flag, v, 1, &o->num_prompts); break;
        case OPT_NUM_WARMUPS: rc = flag_int(flag, v, 0, &o->num_warmups); break;
        case OPT_MAX_CONCURRENCY: rc = flag_int(flag, v, 1, &o->max_concurrency); break;
        case OPT_SEED:
            rc = flag_int(flag, v, 0, &seed);
            o->seed = (uint64_t)seed;
            break;
        case OPT_TIMEOUT:
            rc = flag_double(flag, v, 0, &o->timeout_s);
            if (rc == 0 && o->timeout_s > 1e6) rc = usage_error("%s: at most 1000000 seconds, got '%s'", flag, v);
            if (rc == 0 && o->timeout_s > 0 && o->timeout_s < 0.001) o->timeout_s = 0.001; /* curl counts ms */
            break;
        case OPT_REQUEST_RATE:
            if (strcmp(v, "inf") == 0)
                o->request_rate = INFINITY;
            else if ((rc = flag_double(flag, v, 0, &o->request_rate)) == 0 && o->request_rate <= 0)
                rc = usage_error("%s: expected a rate above 0 or inf, got '%s'", flag, v);
            break;
        case OPT_RESULT_JSON: o->result_json = v; break;
        }
        if (rc) return rc;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    /* the base URL without its trailing slashes, so paths append cleanly */
    if (strncmp(o->base_url, "http://", 7) != 0 && strncmp(o->base_url, "https://", 8) != 0) {
        return usage_error("--base-url: expected http://HOST:PORT or https://..., got '%s'", o->base_url);
    }
    snprintf(base_url, base_url_size, "%s", o->base_url);
    for (size_t n = strlen(base_url); n > 0 && base_url[n - 1] == '/'; n--) base_url[n - 1] = '\0';
    o->base_url = base_url;
    if (o->dataset == LG_DATASET_CHAT && !o->dataset_path) return usage_error("--dataset chat needs --dataset-path");
    if (o->dataset != LG_DATASET_CHAT && o->dataset_path) {
        return usage_error("--dataset-path is for --dataset chat (the dataset is %s)", o->dataset_name);
    }
    if (!o->endpoint) o->endpoint = o->dataset == LG_DATASET_CHAT ? "/v1/chat/completions" : "/v1/completions";
    if (o->endpoint[0] != '/') return usage_error("--endpoint: expected a path such as /v1/completions");
    o->chat_endpoint = strstr(o->endpoint, "chat/completions") != NULL;
    if (o->dataset == LG_DATASET_CHAT && !o->chat_endpoint) {
        return usage_error("--endpoint %s: --dataset chat sends messages, to /v1/chat/completions", o->endpoint);
    }
    if (o->dataset == LG_DATASET_SHARED_PREFIX && o->prefix_len >= o->input_len) {
        return usage_error("--prefix-len %d: must be below --input-len %d", o->prefix_len, o->input_len);
    }
    if (prefix_given && o->dataset != LG_DATASET_SHARED_PREFIX) {
        return usage_error("--prefix-len is for --dataset shared-prefix");
    }
    const char *key = getenv("OPENAI_API_KEY");
    o->api_key = key && *key ? key : NULL;
    return 0;
}

/* The warm-ups: all at once (up to the concurrency cap), results dropped. */
static int run_warmups(const lg_options *o, const lg_prompt *prompts, lg_err *e) {
    lg_options w = *o;
    w.request_rate = INFINITY;
    size_t n = (size_t)o->num_warmups;
    lg_result *r = calloc(n, sizeof *r);
    double duration;
    if (!r) return lg_fail(e, "out of memory");
    fprintf(stderr, "loadgen: %zu warm-up requests\n", n);
    int rc = lg_run(&w, prompts, n, r, &duration, e);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!r[i].ok) fprintf(stderr, "loadgen: warm-up request %zu failed: %s\n", i, r[i].error);
    }
    lg_results_free(r, n);
    return rc;
}

int main(int argc, char **argv) {
    lg_options o;
    char base_url[1024];
    int rc = parse_flags(argc, argv, &o, base_url, sizeof base_url);
    if (rc != 0) return rc < 0 ? 0 : rc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "loadgen: curl_global_init failed\n");
        return 1;
    }
    lg_err e = {{0}};
    lg_notes notes = {0};
    lg_report rep;
    lg_api *api = lg_api_create(&o, &e);
    char *model = NULL;
    size_t n_timed = (size_t)o.num_prompts, n_all = n_timed + (size_t)o.num_warmups;
    lg_prompt *prompts = calloc(n_all, sizeof *prompts);
    lg_result *results = calloc(n_timed, sizeof *results);
    double duration = 0;
    rc = 1;
    if (!api) goto done;
    if (!prompts || !results) {
        lg_fail(&e, "out of memory");
        goto done;
    }
    if (o.model)
        model = strdup(o.model);
    else if (lg_api_first_model(api, &model, &e) != 0)
        goto done;
    if (!model) goto done;
    fprintf(stderr, "loadgen: %s%s, model %s, dataset %s\n", o.base_url, o.endpoint, model, o.dataset_name);
    if (lg_dataset_build(&o, api, model, prompts, n_all, &notes, &e) != 0) goto done;
    /* the warm-ups take the prompts after the timed ones */
    if (o.num_warmups > 0 && run_warmups(&o, prompts + n_timed, &e) != 0) goto done;
    fprintf(stderr, "loadgen: %zu requests\n", n_timed);
    if (lg_run(&o, prompts, n_timed, results, &duration, &e) != 0) goto done;
    if (lg_report_build(results, n_timed, duration, &notes, &rep, &e) != 0) goto done;
    lg_report_print(stdout, &o, model, &rep, &notes);
    if (o.result_json && lg_report_write_json(o.result_json, &o, model, &rep, results, n_timed, &notes, &e) != 0)
        goto done;
    rc = 0;
done:
    if (rc != 0) fprintf(stderr, "loadgen: %s\n", e.msg[0] ? e.msg : "out of memory");
    lg_results_free(results, n_timed);
    lg_prompts_free(prompts, n_all);
    free(model);
    lg_api_destroy(api);
    curl_global_cleanup();
    return rc;
}

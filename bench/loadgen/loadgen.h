/* loadgen.h: the load generator's internal interface (bench/loadgen/, built as build/loadgen).
 *
 * One job per file:
 *   main.c     flags, --help, and the order of the steps
 *   api.c      the blocking requests made before the run: GET /v1/models, POST /tokenize
 *   dataset.c  the prompts (random words fitted to an exact token count, a shared prefix, a chat
 *              file) and the JSON bodies sent for them
 *   run.c      the timed run: one thread, one curl multi handle, arrivals and the concurrency cap
 *   sse.c      Server-Sent Events framing, fed in pieces of any size
 *   stream.c   what the OpenAI stream's events mean: content chunks, usage, errors, [DONE]
 *   stats.c    mean, standard deviation and percentiles (numpy's default linear method)
 *   report.c   the aggregate metrics, the human table and --result-json
 *
 * Semantics follow vLLM's `vllm bench serve` so that results compare with published ones.
 * Errors: functions that can fail return 0 or -1 and say what failed in an lg_err.
 */
#ifndef SPINDLE_BENCH_LOADGEN_H
#define SPINDLE_BENCH_LOADGEN_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- errors ---- */

typedef struct lg_err {
    char msg[1024];
} lg_err;

/* Formats the message into e and returns -1, so that `return lg_fail(e, ...)` reads well. */
int lg_fail(lg_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Seconds on the monotonic clock. */
double lg_now(void);

/* ---- the seeded random numbers (splitmix64: small, fast, and the same on every machine) ---- */

typedef struct lg_rng {
    uint64_t state;
} lg_rng;

static inline uint64_t lg_rng_next(lg_rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double lg_rng_uniform(lg_rng *r) {
    return (double)(lg_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [0, n); n > 0. */
static inline size_t lg_rng_below(lg_rng *r, size_t n) {
    return (size_t)(lg_rng_uniform(r) * (double)n);
}

/* ---- options (main.c) ---- */

typedef enum lg_dataset_kind {
    LG_DATASET_RANDOM,
    LG_DATASET_SHARED_PREFIX,
    LG_DATASET_CHAT,
} lg_dataset_kind;

typedef struct lg_options {
    const char *base_url; /* without a trailing '/' */
    const char *endpoint; /* "/v1/completions" or "/v1/chat/completions" */
    bool chat_endpoint;   /* the endpoint takes messages, not a prompt */
    const char *model;    /* NULL: the first id of GET /v1/models */
    lg_dataset_kind dataset;
    const char *dataset_name; /* as given on the command line */
    const char *dataset_path; /* --dataset chat */
    const char *result_json;  /* NULL: no JSON */
    int input_len, output_len, prefix_len;
    int num_prompts, num_warmups, max_concurrency;
    double request_rate; /* requests/s; INFINITY: all at once */
    uint64_t seed;
    double timeout_s;    /* per request; 0: none */
    const char *api_key; /* from OPENAI_API_KEY; sent as a bearer token when set */
} lg_options;

/* ---- blocking requests before the run (api.c) ---- */

typedef struct lg_api lg_api;

/* Caller owns; free with lg_api_destroy. */
lg_api *lg_api_create(const lg_options *o, lg_err *e);
void lg_api_destroy(lg_api *api);
/* The first model id of GET /v1/models. Caller owns *id (free). */
int lg_api_first_model(lg_api *api, char **id, lg_err *e);
/* The number of tokens the server's tokenizer makes of text, without special tokens
 * (POST /tokenize {"content": text}: spindle, llama-server; "prompt" for vLLM). */
int lg_api_count_tokens(lg_api *api, const char *text, int *count, lg_err *e);

/* ---- prompts (dataset.c) ---- */

typedef struct lg_prompt {
    char *body;       /* the whole JSON request body */
    int input_tokens; /* as /tokenize counts the prompt text; -1 for chat files (usage says) */
} lg_prompt;

typedef struct lg_notes {
    char text[8][256]; /* warnings for the report */
    int n;
} lg_notes;

void lg_notes_add(lg_notes *notes, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Fills out[0..n) for the dataset of o (the first prompts are the timed ones, so the
 * same seed gives the same timed prompts whatever --num-warmups is). */
int lg_dataset_build(const lg_options *o, lg_api *api, const char *model, lg_prompt *out, size_t n, lg_notes *notes,
                     lg_err *e);
void lg_prompts_free(lg_prompt *p, size_t n);

/* ---- SSE framing (sse.c) ---- */

/* Called once per complete event with its data lines joined by '\n' (not NUL-terminated
 * by contract, but data[len] is 0). */
typedef void lg_sse_event_fn(void *ctx, const char *data, size_t len);

typedef struct lg_sse {
    char *line; /* the unfinished line */
    size_t line_len, line_cap;
    char *data; /* the data of the unfinished event */
    size_t data_len, data_cap;
    bool has_data;   /* a data field was seen in this event (its value may be empty) */
    bool after_cr;   /* the last byte was '\r': a '\n' right after it ends nothing more */
    bool overflowed; /* a line passed LG_SSE_MAX_LINE: the stream is rejected */
} lg_sse;

#define LG_SSE_MAX_LINE (16u << 20)

void lg_sse_init(lg_sse *p);
void lg_sse_free(lg_sse *p);
/* Returns -1 when out of memory or a line is absurdly long; the stream is then broken. */
int lg_sse_feed(lg_sse *p, const char *buf, size_t n, lg_sse_event_fn *fn, void *ctx);
/* End of the body: an event that no blank line closed is dispatched (the spec drops it,
 * but a server that forgets the last blank line still sent its data). */
void lg_sse_end(lg_sse *p, lg_sse_event_fn *fn, void *ctx);

/* ---- the meaning of the OpenAI stream (stream.c) ---- */

typedef struct lg_stream {
    double t_first; /* time of the first content chunk; 0: none yet */
    double t_last;  /* time of the latest content chunk */
    double t_done;  /* time of [DONE]; 0: not seen */
    double t_end;   /* time of the latest JSON event (vLLM's end of a request: E2E ends here) */
    double *itl;    /* gaps between consecutive content chunks, seconds */
    size_t n_itl, itl_cap;
    int content_chunks;
    int completion_tokens; /* from usage; -1: no usage seen */
    int prompt_tokens;     /* from usage; -1: no usage seen */
    char *error;           /* the first error; caller frees with lg_stream_free */
} lg_stream;

void lg_stream_init(lg_stream *s);
void lg_stream_free(lg_stream *s);
/* One event's data, received at time now. */
void lg_stream_on_data(lg_stream *s, const char *data, size_t len, double now);
/* Records an error unless one is recorded already (the first one is the cause). */
void lg_stream_set_error(lg_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the timed run (run.c) ---- */

typedef struct lg_result {
    bool ok;
    double ttft, e2e; /* seconds */
    double tpot;      /* seconds; < 0 when output tokens <= 1 */
    double *itl;      /* taken from the stream; freed by lg_results_free */
    size_t n_itl;
    int input_tokens;       /* the prompt's count (/tokenize), else usage's prompt_tokens, else -1 */
    int output_tokens;      /* usage's completion_tokens, else the content chunks */
    int usage_input_tokens; /* usage's prompt_tokens (with BOS, template): -1 without usage */
    bool usage_missing;
    char *error; /* failed requests: why */
} lg_result;

/* Sends prompts[0..n) as the options say (rate, concurrency, timeout) and fills
 * results[0..n); *duration is from the first send to the last end. Request failures are
 * results, not errors; -1 only when the run itself cannot go on. */
int lg_run(const lg_options *o, const lg_prompt *prompts, size_t n, lg_result *results, double *duration, lg_err *e);
void lg_results_free(lg_result *r, size_t n);

/* ---- statistics (stats.c) ---- */

typedef struct lg_summary {
    double mean, std, median, p90, p99;
    size_t n;
} lg_summary;

/* p in [0, 100] of sorted[0..n), n > 0: numpy.percentile's default "linear" method. */
double lg_stats_percentile(const double *sorted, size_t n, double p);
/* Summary of v[0..n) (sorts v in place); all zero when n is 0. */
void lg_stats_summarize(double *v, size_t n, lg_summary *out);

/* ---- report (report.c) ---- */

typedef struct lg_report {
    int completed, failed;
    double duration;
    long long total_input, total_output;
    double mean_input_tokens;
    double request_throughput, output_throughput, total_token_throughput;
    lg_summary ttft, tpot, itl, e2el; /* milliseconds */
    const char *errors[5];            /* the first failures' messages, borrowed from the results */
    int n_errors;
} lg_report;

/* Aggregates the results; notes get a warning when a server sent no usage. */
int lg_report_build(const lg_result *r, size_t n, double duration, lg_notes *notes, lg_report *rep, lg_err *e);
void lg_report_print(FILE *f, const lg_options *o, const char *model, const lg_report *rep, const lg_notes *notes);
int lg_report_write_json(const char *path, const lg_options *o, const char *model, const lg_report *rep,
                         const lg_result *r, size_t n, const lg_notes *notes, lg_err *e);

#endif

/* report.c: the aggregate metrics of a run, the human table and the --result-json file.
 *
 * Definitions are vLLM's (benchmarks/serve.py, calculate_metrics), over completed requests:
 * TTFT, E2E latency per request; TPOT = (E2E - TTFT) / (output tokens - 1) per request with
 * more than one output token; ITL = every gap between consecutive content chunks of every
 * request, pooled; throughputs over the run's duration (first send to last end). Input
 * tokens are the dataset's counts (/tokenize), or usage's prompt_tokens for chat files.
 * The JSON keys are vLLM's (mean_ttft_ms, p99_itl_ms, output_throughput, ...) plus the
 * parameters and the server's base URL.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bench/loadgen/loadgen.h"

int lg_report_build(const lg_result *r, size_t n, double duration, lg_notes *notes, lg_report *rep, lg_err *e) {
    *rep = (lg_report){.duration = duration};
    size_t n_itl = 0, no_usage = 0;
    for (size_t i = 0; i < n; i++) n_itl += r[i].ok ? r[i].n_itl : 0;
    double *ttft = malloc((n + 1) * sizeof *ttft), *tpot = malloc((n + 1) * sizeof *tpot);
    double *e2el = malloc((n + 1) * sizeof *e2el), *itl = malloc((n_itl + 1) * sizeof *itl);
    int rc = 0;
    if (!ttft || !tpot || !e2el || !itl) {
        rc = lg_fail(e, "out of memory");
        goto done;
    }
    size_t n_tpot = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].ok) {
            rep->failed++;
            if (rep->n_errors < (int)(sizeof rep->errors / sizeof rep->errors[0])) {
                rep->errors[rep->n_errors++] = r[i].error;
            }
            continue;
        }
        ttft[rep->completed] = r[i].ttft * 1e3;
        e2el[rep->completed] = r[i].e2e * 1e3;
        rep->completed++;
        if (r[i].tpot >= 0) tpot[n_tpot++] = r[i].tpot * 1e3;
        for (size_t j = 0; j < r[i].n_itl; j++) itl[k++] = r[i].itl[j] * 1e3;
        rep->total_input += r[i].input_tokens > 0 ? r[i].input_tokens : 0;
        rep->total_output += r[i].output_tokens;
        no_usage += r[i].usage_missing;
    }
    if (no_usage > 0) {
        lg_notes_add(notes, "%zu responses carried no usage: their output tokens are counted as content chunks",
                     no_usage);
    }
    rep->mean_input_tokens = rep->completed ? (double)rep->total_input / rep->completed : 0;
    if (duration > 0) {
        rep->request_throughput = rep->completed / duration;
        rep->output_throughput = (double)rep->total_output / duration;
        rep->total_token_throughput = (double)(rep->total_input + rep->total_output) / duration;
    }
    lg_stats_summarize(ttft, (size_t)rep->completed, &rep->ttft);
    lg_stats_summarize(tpot, n_tpot, &rep->tpot);
    lg_stats_summarize(itl, k, &rep->itl);
    lg_stats_summarize(e2el, (size_t)rep->completed, &rep->e2el);
done:
    free(ttft);
    free(tpot);
    free(e2el);
    free(itl);
    return rc;
}

void lg_report_print(FILE *f, const lg_options *o, const char *model, const lg_report *rep, const lg_notes *notes) {
    char rate[32];
    if (isinf(o->request_rate))
        snprintf(rate, sizeof rate, "inf");
    else
        snprintf(rate, sizeof rate, "%g", o->request_rate);
    fprintf(f, "============ Serving Benchmark Result ============\n");
    fprintf(f, "%-40s%s\n", "Server:", o->base_url);
    fprintf(f, "%-40s%s\n", "Model:", model);
    fprintf(f, "%-40s%s %s\n", "Endpoint, dataset:", o->endpoint, o->dataset_name);
    fprintf(f, "%-40s%s\n", "Request rate (req/s):", rate);
    if (o->max_concurrency > 0) fprintf(f, "%-40s%d\n", "Maximum request concurrency:", o->max_concurrency);
    fprintf(f, "%-40s%d\n", "Successful requests:", rep->completed);
    fprintf(f, "%-40s%d\n", "Failed requests:", rep->failed);
    fprintf(f, "%-40s%.2f\n", "Benchmark duration (s):", rep->duration);
    fprintf(f, "%-40s%lld\n", "Total input tokens:", rep->total_input);
    fprintf(f, "%-40s%.2f\n", "Mean input tokens:", rep->mean_input_tokens);
    fprintf(f, "%-40s%lld\n", "Total generated tokens:", rep->total_output);
    fprintf(f, "%-40s%.2f\n", "Request throughput (req/s):", rep->request_throughput);
    fprintf(f, "%-40s%.2f\n", "Output token throughput (tok/s):", rep->output_throughput);
    fprintf(f, "%-40s%.2f\n", "Total token throughput (tok/s):", rep->total_token_throughput);
    /* the sections of vLLM's table, in its order and wording */
    static const char *const titles[] = {
        "---------------Time to First Token----------------",
        "-----Time per Output Token (excl. 1st token)------",
        "---------------Inter-token Latency----------------",
        "----------------End-to-end Latency----------------",
    };
    static const char *const names[] = {"TTFT", "TPOT", "ITL", "E2EL"};
    const lg_summary *sums[] = {&rep->ttft, &rep->tpot, &rep->itl, &rep->e2el};
    for (int m = 0; m < 4; m++) {
        char label[64];
        fprintf(f, "%s\n", titles[m]);
        const char *what[] = {"Mean", "Median", "P90", "P99"};
        const double vals[] = {sums[m]->mean, sums[m]->median, sums[m]->p90, sums[m]->p99};
        for (int q = 0; q < 4; q++) {
            snprintf(label, sizeof label, "%s %s (ms):", what[q], names[m]);
            fprintf(f, "%-40s%.2f\n", label, vals[q]);
        }
    }
    fprintf(f, "==================================================\n");
    for (int i = 0; i < rep->n_errors; i++) fprintf(f, "error: %s\n", rep->errors[i]);
    for (int i = 0; i < notes->n; i++) fprintf(f, "warning: %s\n", notes->text[i]);
}

/* A JSON string of text; bytes that are not valid UTF-8 (a cut error body) become '?'. */
static json_t *report_string(const char *text) {
    json_t *s = json_string(text);
    if (s) return s;
    char *copy = strdup(text);
    if (!copy) return NULL;
    for (char *p = copy; *p; p++) {
        if ((unsigned char)*p >= 0x80) *p = '?';
    }
    s = json_string(copy);
    free(copy);
    return s;
}

static const char *const report_metric_keys[] = {"ttft", "tpot", "itl", "e2el"};

/* "mean_ttft_ms", ... for the four metrics; 0 when any set failed. */
static int report_json_metrics(json_t *root, const lg_report *rep) {
    const lg_summary *sums[] = {&rep->ttft, &rep->tpot, &rep->itl, &rep->e2el};
    int bad = 0;
    for (int m = 0; m < 4; m++) {
        const char *stat[] = {"mean", "median", "std", "p90", "p99"};
        const double vals[] = {sums[m]->mean, sums[m]->median, sums[m]->std, sums[m]->p90, sums[m]->p99};
        for (int q = 0; q < 5; q++) {
            char key[64];
            snprintf(key, sizeof key, "%s_%s_ms", stat[q], report_metric_keys[m]);
            bad |= json_object_set_new(root, key, json_real(vals[q]));
        }
    }
    return bad;
}

/* The per-request lists of completed requests: vLLM's input_lens, output_lens, ttfts and
 * e2els (seconds), and usage_input_lens, the prompt tokens as the server's usage counts them
 * (the prompt with BOS, or the rendered chat template; -1 without usage). */
static int report_json_requests(json_t *root, const lg_result *r, size_t n) {
    json_t *in = json_array(), *out = json_array(), *ttfts = json_array(), *e2els = json_array();
    json_t *usage_in = json_array();
    int bad = !in || !out || !ttfts || !e2els || !usage_in;
    for (size_t i = 0; i < n && !bad; i++) {
        if (!r[i].ok) continue;
        bad |= json_array_append_new(in, json_integer(r[i].input_tokens));
        bad |= json_array_append_new(usage_in, json_integer(r[i].usage_input_tokens));
        bad |= json_array_append_new(out, json_integer(r[i].output_tokens));
        bad |= json_array_append_new(ttfts, json_real(r[i].ttft));
        bad |= json_array_append_new(e2els, json_real(r[i].e2e));
    }
    bad |= json_object_set_new(root, "input_lens", in);
    bad |= json_object_set_new(root, "output_lens", out);
    bad |= json_object_set_new(root, "ttfts", ttfts);
    bad |= json_object_set_new(root, "e2els", e2els);
    bad |= json_object_set_new(root, "usage_input_lens", usage_in);
    return bad;
}

int lg_report_write_json(const char *path, const lg_options *o, const char *model, const lg_report *rep,
                         const lg_result *r, size_t n, const lg_notes *notes, lg_err *e) {
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", localtime(&now));
    json_t *root = json_object();
    if (!root) return lg_fail(e, "out of memory");
    int bad = json_object_update_missing_new(
        root, json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:f}", "date", date,
                        "base_url", o->base_url, "endpoint", o->endpoint, "dataset", o->dataset_name, "dataset_path",
                        o->dataset_path, "model_id", model, "input_len", o->input_len, "output_len", o->output_len,
                        "prefix_len", o->prefix_len, "num_prompts", o->num_prompts, "num_warmups", o->num_warmups,
                        "max_concurrency", o->max_concurrency, "seed", (json_int_t)o->seed, "timeout", o->timeout_s));
    /* request_rate: a number, or "inf" (JSON has no infinity) */
    bad |= json_object_set_new(root, "request_rate",
                               isinf(o->request_rate) ? json_string("inf") : json_real(o->request_rate));
    bad |= json_object_update_missing_new(
        root, json_pack("{s:f, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f}", "duration", rep->duration, "completed",
                        rep->completed, "failed", rep->failed, "total_input_tokens", (json_int_t)rep->total_input,
                        "total_output_tokens", (json_int_t)rep->total_output, "mean_input_tokens",
                        rep->mean_input_tokens, "request_throughput", rep->request_throughput, "output_throughput",
                        rep->output_throughput, "total_token_throughput", rep->total_token_throughput));
    bad |= report_json_metrics(root, rep);
    json_t *errors = json_array(), *warnings = json_array();
    for (int i = 0; errors && i < rep->n_errors; i++)
        bad |= json_array_append_new(errors, report_string(rep->errors[i]));
    for (int i = 0; warnings && i < notes->n; i++)
        bad |= json_array_append_new(warnings, report_string(notes->text[i]));
    bad |= json_object_set_new(root, "errors", errors);
    bad |= json_object_set_new(root, "warnings", warnings);
    bad |= report_json_requests(root, r, n);
    if (bad) {
        json_decref(root);
        return lg_fail(e, "out of memory building the result JSON");
    }
    int rc = json_dump_file(root, path, JSON_INDENT(2)) == 0 ? 0 : lg_fail(e, "--result-json %s: cannot write", path);
    json_decref(root);
    return rc;
}

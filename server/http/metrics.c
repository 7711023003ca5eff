/* metrics.c: GET /metrics: the scheduler's counters, gauges and histograms and the
 * HTTP requests by endpoint and status, in Prometheus' text format (version 0.0.4),
 * every name prefixed `spindle_`, and with --metrics-names vllm the gateway's gauges again
 * under vLLM's `vllm:` names (docs/api.md lists them all).
 *
 * DESIGN (threads). Rendering runs on an HTTP thread and reads sched_stats and the
 * scheduler's histograms without locks (atomics only; the caller holds app->lifecycle
 * for reading so the scheduler is not destroyed meanwhile). The HTTP counters are
 * process-wide atomics (one server per process): srv_metrics_count_http is called by
 * every HTTP thread from on_completed, and an endpoint takes a slot of the table the
 * first time it is counted, by compare-and-swap, so counting never takes a lock (the
 * idle connections closed to admit new ones, from deadlines.c, likewise).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "server/http/http.h"

/* ---- HTTP requests by endpoint and status ---- */

enum { HTTP_MAX_ENDPOINTS = 32, HTTP_MIN_STATUS = 100, HTTP_MAX_STATUS = 599 };

static const char *_Atomic http_endpoints[HTTP_MAX_ENDPOINTS]; /* static strings; NULL: free slot */
static _Atomic uint64_t http_counts[HTTP_MAX_ENDPOINTS][HTTP_MAX_STATUS - HTTP_MIN_STATUS + 1];

/* The slot of endpoint, taking a free one the first time; -1 when the table is full. */
static int http_endpoint_slot(const char *endpoint) {
    for (int i = 0; i < HTTP_MAX_ENDPOINTS; i++) {
        const char *name = atomic_load(&http_endpoints[i]);
        if (!name) {
            const char *expected = NULL;
            if (atomic_compare_exchange_strong(&http_endpoints[i], &expected, endpoint)) return i;
            name = expected; /* another thread took it first */
        }
        if (strcmp(name, endpoint) == 0) return i;
    }
    return -1;
}

static _Atomic uint64_t idle_closed; /* srv_metrics_count_idle_closed */
static _Atomic uint64_t refused;     /* srv_metrics_count_refused */

void srv_metrics_count_idle_closed(int n) {
    atomic_fetch_add_explicit(&idle_closed, (uint64_t)n, memory_order_relaxed);
}

void srv_metrics_count_refused(void) {
    atomic_fetch_add_explicit(&refused, 1, memory_order_relaxed);
}

void srv_metrics_count_http(const char *endpoint, int status) {
    if (status < HTTP_MIN_STATUS || status > HTTP_MAX_STATUS) return;
    int slot = http_endpoint_slot(endpoint);
    if (slot < 0) return;
    atomic_fetch_add_explicit(&http_counts[slot][status - HTTP_MIN_STATUS], 1, memory_order_relaxed);
}

static void metric(strbuf *b, const char *name, const char *type, const char *help, double value) {
    strbuf_printf(b, "# HELP spindle_%s %s\n# TYPE spindle_%s %s\nspindle_%s %.17g\n", name, help, name, type, name,
                  value);
}

/* --metrics-names vllm: the gauges an endpoint picker (the Gateway API Inference
 * Extension's model-server protocol) and vLLM's dashboards read, under vLLM's names and
 * with its model_name label; the KV gauge under its v1 and v0 names. */
static void render_vllm(strbuf *b, const srv_app *app, const sched_stats *st, double kv_usage) {
    const char *model = app->model.served_name ? app->model.served_name : "";
    const struct {
        const char *name, *help;
        double value;
    } gauges[] = {
        {"num_requests_waiting", "Number of requests waiting to be processed.", (double)st->queued},
        {"num_requests_running", "Number of requests in model execution batches.", (double)st->running},
        {"kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage},
        {"gpu_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage (the name before vLLM v1).", kv_usage},
    };
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        strbuf_printf(b, "# HELP vllm:%s %s\n# TYPE vllm:%s gauge\nvllm:%s{model_name=\"", gauges[i].name,
                      gauges[i].help, gauges[i].name, gauges[i].name);
        for (const char *p = model; *p; p++) /* a label value escapes \\, \" and newlines */
            strbuf_printf(b, *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : "%c", *p);
        strbuf_printf(b, "\"} %.17g\n", gauges[i].value);
    }
}

/* One labelled family per proposer: name{proposer="ngram"} value. */
static void metric_by_proposer(strbuf *b, const char *name, const char *type, const char *help,
                               const int64_t *by_proposer) {
    strbuf_printf(b, "# HELP spindle_%s %s\n# TYPE spindle_%s %s\n", name, help, name, type);
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++)
        strbuf_printf(b, "spindle_%s{proposer=\"%s\"} %lld\n", name, sched_spec_proposer_name(p),
                      (long long)by_proposer[p]);
}

/* Speculative decoding: what each proposer drafted and got accepted, acceptance by draft
 * position, the gate's state. */
static void render_spec(strbuf *b, const sched_stats *st) {
    metric_by_proposer(b, "spec_proposed_tokens_total", "counter", "draft tokens put into steps, by proposer",
                       st->spec_proposed);
    metric_by_proposer(b, "spec_accepted_tokens_total", "counter", "of those, accepted (equal to the target's token)",
                       st->spec_accepted);
    metric_by_proposer(b, "spec_drafts_total", "counter",
                       "drafts verified (mean accepted length: accepted tokens / drafts)", st->spec_drafts);
    metric_by_proposer(b, "spec_gate_switches_total", "counter", "times the gate turned a proposer on or off",
                       st->spec_switches);
    int64_t enabled[SCHED_SPEC_PROPOSERS];
    for (int p = 0; p < SCHED_SPEC_PROPOSERS; p++) enabled[p] = st->spec_enabled[p];
    metric_by_proposer(b, "spec_gate_enabled", "gauge",
                       "1 while the gate lets a proposer draft at the width of the last step", enabled);
    strbuf_printf(b, "# HELP spindle_spec_accepted_by_position_total drafts whose token at this position (0: the "
                     "first) was accepted\n# TYPE spindle_spec_accepted_by_position_total counter\n");
    for (int i = 0; i < SCHED_SPEC_MAX_K; i++)
        strbuf_printf(b, "spindle_spec_accepted_by_position_total{position=\"%d\"} %lld\n", i,
                      (long long)st->spec_accepted_at[i]);
    metric(b, "spec_suffix_cache_bytes", "gauge", "bytes the speculative suffix cache holds",
           (double)st->spec_suffix_bytes);
}

/* The Responses store (--responses-store-*): what it holds and what it dropped, by why. */
static void render_responses_store(strbuf *b, const srv_app *app) {
    srv_store_stats st;
    srv_response_store_stats(app->model.responses, &st);
    metric(b, "responses_store_bytes", "gauge",
           "bytes the stored /v1/responses hold (their JSON text, entries and malloc's overhead), within "
           "--responses-store-mb",
           (double)st.bytes);
    metric(b, "responses_store_entries", "gauge", "stored /v1/responses", (double)st.entries);
    metric(b, "responses_store_keys", "gauge", "API keys with stored responses", (double)st.keys);
    metric(b, "responses_store_stored_total", "counter", "responses stored", (double)st.stored);
    strbuf_printf(b, "# HELP spindle_responses_store_evictions_total stored responses dropped before a DELETE, by "
                     "reason\n# TYPE spindle_responses_store_evictions_total counter\n");
    strbuf_printf(b, "spindle_responses_store_evictions_total{reason=\"expired\"} %llu\n",
                  (unsigned long long)st.expired);
    strbuf_printf(b, "spindle_responses_store_evictions_total{reason=\"own_key\"} %llu\n",
                  (unsigned long long)st.evicted_own);
    strbuf_printf(b, "spindle_responses_store_evictions_total{reason=\"other_key\"} %llu\n",
                  (unsigned long long)st.evicted_other);
    metric(b, "responses_store_refused_total", "counter", "responses not stored: larger than a key's share",
           (double)st.refused);
}

/* One metric with a value per tier of the prefix cache below the pool. */
static void metric_by_tier(strbuf *b, const char *name, const char *type, const char *help, int64_t host,
                           int64_t disk) {
    strbuf_printf(b, "# HELP spindle_%s %s\n# TYPE spindle_%s %s\n", name, help, name, type);
    strbuf_printf(b, "spindle_%s{tier=\"host\"} %lld\nspindle_%s{tier=\"disk\"} %lld\n", name, (long long)host, name,
                  (long long)disk);
}

/* The prefix cache's host and disk tiers (--kv-host-mb, --kv-disk-dir) and swaps. */
static void render_tiers(strbuf *b, const sched_stats *st) {
    const kvt_stats *t = &st->tiers;
    metric_by_tier(b, "kv_tier_blocks", "gauge", "KV blocks a tier of the prefix cache holds", t->host_blocks,
                   t->disk_blocks);
    metric_by_tier(b, "kv_tier_capacity_blocks", "gauge", "KV blocks a tier can hold (0: the tier is off)",
                   t->host_capacity, t->disk_capacity);
    metric_by_tier(b, "kv_tier_bytes", "gauge", "bytes of K/V a tier holds (disk: without the files' headers)",
                   t->host_blocks * t->block_bytes, t->disk_blocks * t->block_bytes);
    metric_by_tier(b, "kv_tier_hits_total", "counter", "blocks reloaded into the KV pool from a tier", t->host_hits,
                   t->disk_hits);
    metric_by_tier(b, "kv_tier_evictions_total", "counter",
                   "blocks pushed out of a tier (host: to the disk tier, or dropped without one; disk: deleted)",
                   t->host_evictions, t->disk_evictions);
    metric(b, "kv_tier_stored_total", "counter", "blocks the KV pool evicted that a tier took", (double)t->stored);
    metric(b, "kv_tier_disk_writes_total", "counter", "block files written", (double)t->disk_writes);
    metric(b, "kv_tier_disk_write_errors_total", "counter", "block files that could not be written (block dropped)",
           (double)t->disk_write_errors);
    metric(b, "kv_tier_disk_rejected_total", "counter",
           "block files dropped for a wrong header, size or checksum (never loaded)", (double)t->disk_rejected);
    metric(b, "kv_tier_disk_restored_blocks", "gauge", "block files indexed at start from an earlier run (persist)",
           (double)t->disk_restored);
    metric(b, "kv_tier_reloaded_tokens_total", "counter", "prompt tokens reloaded from a tier instead of computed",
           (double)st->tier_reloaded_tokens);
    metric(b, "slo_requests_total", "counter", "requests that finished with a TTFT or TPOT target",
           (double)st->slo_requests);
    metric(b, "slo_goodput_requests_total", "counter", "of those, the ones that met every target they had (goodput)",
           (double)st->slo_goodput);
    metric(b, "slo_rejected_total", "counter",
           "requests refused at once (429, policy slo): their TTFT target could not be met", (double)st->slo_rejected);
    metric(b, "slo_prefill_holds_total", "counter",
           "steps whose prefill was cut so a running decode keeps its TPOT target (policy slo)",
           (double)st->slo_prefill_holds);
    metric(b, "swap_resumes_total", "counter",
           "preempted sequences that came back with KV from the prefix cache or its tiers (not recomputed from 0)",
           (double)st->swap_resumes);
}

static void render_http_requests(strbuf *b) {
    strbuf_printf(b, "# HELP spindle_http_requests_total HTTP requests by endpoint (the route path; other: unknown "
                     "paths) and the status answered (499: the client left before an answer)\n"
                     "# TYPE spindle_http_requests_total counter\n");
    for (int i = 0; i < HTTP_MAX_ENDPOINTS; i++) {
        const char *name = atomic_load(&http_endpoints[i]);
        if (!name) break;
        for (int st = HTTP_MIN_STATUS; st <= HTTP_MAX_STATUS; st++) {
            uint64_t n = atomic_load_explicit(&http_counts[i][st - HTTP_MIN_STATUS], memory_order_relaxed);
            if (n)
                strbuf_printf(b, "spindle_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", name, st,
                              (unsigned long long)n);
        }
    }
}

/* The histograms: name, help, and which of the scheduler's. */
static const struct {
    const char *name, *help;
    sched_hist_id id;
} HISTOGRAMS[] = {
    {"time_to_first_token_seconds", "seconds from arrival to the first token, per finished request", SCHED_HIST_TTFT},
    {"inter_token_latency_seconds", "seconds between two consecutive tokens of one sequence", SCHED_HIST_INTER_TOKEN},
    {"e2e_request_latency_seconds", "seconds from arrival to the end, per finished request", SCHED_HIST_E2E},
    {"request_queue_time_seconds", "seconds from arrival to the first admission, per admitted request",
     SCHED_HIST_QUEUE},
    {"request_prefill_time_seconds", "seconds of the steps that carried the prompt, per finished request",
     SCHED_HIST_PREFILL},
    {"request_decode_time_seconds", "seconds of the steps that carried the decode rows, per finished request",
     SCHED_HIST_DECODE},
    {"tick_duration_seconds", "seconds of one scheduler tick that ran a step (plan, step, sampling)", SCHED_HIST_TICK},
    {"tokens_per_tick", "tokens in the step of one scheduler tick (prefill and decode rows)",
     SCHED_HIST_TOKENS_PER_TICK},
};

static void render_histogram(strbuf *b, const char *name, const char *help, const sched_hist_snapshot *h) {
    strbuf_printf(b, "# HELP spindle_%s %s\n# TYPE spindle_%s histogram\n", name, help, name);
    for (int i = 0; i < h->n_bounds; i++)
        strbuf_printf(b, "spindle_%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)h->buckets[i]);
    strbuf_printf(b, "spindle_%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->count);
    strbuf_printf(b, "spindle_%s_sum %.17g\n", name, h->sum);
    strbuf_printf(b, "spindle_%s_count %llu\n", name, (unsigned long long)h->count);
}

char *srv_metrics_render(const srv_app *app, const sched *s) {
    strbuf b = {0};
    metric(&b, "ready", "gauge", "1 when the model is loaded and requests are accepted",
           atomic_load(&app->phase) == SRV_PHASE_READY ? 1 : 0);
    metric(&b, "live_generations", "gauge", "generation requests with an open connection",
           (double)atomic_load(&app->live_generations));
    if (atomic_load(&app->phase) == SRV_PHASE_READY && app->model.cpu_kernels) /* set before READY */
        strbuf_printf(&b,
                      "# HELP spindle_cpu_kernels_info the CPU kernel set the model runs on (--cpu-isa)\n"
                      "# TYPE spindle_cpu_kernels_info gauge\nspindle_cpu_kernels_info{set=\"%s\"} 1\n",
                      app->model.cpu_kernels);
    if (s) {
        sched_stats st;
        sched_get_stats(s, &st);
        strbuf_printf(&b,
                      "# HELP spindle_kv_cache_type_info the KV cache's element format (--kv-type)\n"
                      "# TYPE spindle_kv_cache_type_info gauge\nspindle_kv_cache_type_info{type=\"%s\"} 1\n",
                      sp_kv_type_name(sched_get_config(s)->kv_type));
        metric(&b, "requests_submitted_total", "counter", "requests accepted into the queue", (double)st.submitted);
        strbuf_printf(&b, "# HELP spindle_requests_rejected_total requests refused at submission, by reason\n"
                          "# TYPE spindle_requests_rejected_total counter\n");
        strbuf_printf(&b, "spindle_requests_rejected_total{reason=\"queue_requests\"} %lld\n",
                      (long long)st.rejected_queue_requests);
        strbuf_printf(&b, "spindle_requests_rejected_total{reason=\"queue_tokens\"} %lld\n",
                      (long long)st.rejected_queue_tokens);
        strbuf_printf(&b, "spindle_requests_rejected_total{reason=\"shutdown\"} %lld\n",
                      (long long)st.rejected_shutdown);
        strbuf_printf(&b, "spindle_requests_rejected_total{reason=\"invalid\"} %lld\n", (long long)st.rejected_invalid);
        metric(&b, "requests_finished_total", "counter", "requests that ended with stop or length",
               (double)st.finished);
        metric(&b, "requests_cancelled_total", "counter", "requests cancelled (client gone)", (double)st.cancelled);
        metric(&b, "requests_errors_total", "counter", "requests ended by an error", (double)st.errors);
        metric(&b, "requests_timeouts_total", "counter", "requests ended by their timeout", (double)st.timeouts);
        metric(&b, "preemptions_total", "counter", "sequences preempted for KV space", (double)st.preemptions);
        metric(&b, "ticks_total", "counter", "scheduler ticks", (double)st.ticks);
        metric(&b, "prompt_tokens_total", "counter",
               "prompt tokens processed: computed, or served from the prefix cache", (double)st.prompt_tokens);
        metric(&b, "generation_tokens_total", "counter", "tokens generated", (double)st.generated_tokens);
        metric(&b, "requests_waiting", "gauge", "requests accepted, not yet running", (double)st.queued);
        metric(&b, "requests_waiting_tokens", "gauge", "their prompt tokens", (double)st.queued_tokens);
        metric(&b, "requests_running", "gauge", "sequences prefilling or decoding", (double)st.running);
        metric(&b, "requests_swapped", "gauge",
               "preempted sequences waiting to come back, their computed blocks kept in the prefix cache and its tiers",
               (double)st.swapped);
        double kv_usage = st.kv_blocks_total > 0 ? (double)st.kv_blocks_used / st.kv_blocks_total : 0.0;
        metric(&b, "kv_cache_utilization", "gauge",
               "fraction of the KV cache held by running sequences, 0 to 1 (the Gateway API Inference Extension's "
               "KV-cache gauge)",
               kv_usage);
        if (app->http.metrics_vllm) render_vllm(&b, app, &st, kv_usage);
        metric(&b, "kv_blocks_used", "gauge", "KV cache blocks in use", (double)st.kv_blocks_used);
        metric(&b, "kv_blocks_total", "gauge", "KV cache blocks", (double)st.kv_blocks_total);
        metric(&b, "kv_bytes_per_token", "gauge",
               "bytes of K and V one token holds over every layer, in the cache's element format",
               (double)st.kv_bytes_per_token);
        metric(&b, "kv_bytes_per_sequence", "gauge", "bytes of KV blocks one sequence of the whole context holds",
               (double)st.kv_bytes_per_sequence);
        metric(&b, "kv_blocks_cached", "gauge", "KV blocks in the prefix cache (shared, or kept for reuse)",
               (double)st.kv_blocks_cached);
        metric(&b, "prefix_cache_queries_total", "counter", "tokens of admitted feeds looked up in the prefix cache",
               (double)st.prefix_query_tokens);
        metric(&b, "prefix_cache_hits_total", "counter", "of those, tokens served from the prefix cache",
               (double)st.prefix_hit_tokens);
        metric(&b, "scheduler_heartbeat_age_seconds", "gauge", "seconds since the scheduler thread last ticked or woke",
               sched_seconds_since_heartbeat(s));
        render_spec(&b, &st);
        render_tiers(&b, &st);
        for (size_t i = 0; i < sizeof HISTOGRAMS / sizeof HISTOGRAMS[0]; i++) {
            sched_hist_snapshot h;
            sched_get_histogram(s, HISTOGRAMS[i].id, &h);
            render_histogram(&b, HISTOGRAMS[i].name, HISTOGRAMS[i].help, &h);
        }
    }
    int phase = atomic_load(&app->phase);
    if ((phase == SRV_PHASE_READY || phase == SRV_PHASE_DRAINING) && app->model.responses) /* made before READY */
        render_responses_store(&b, app);
    render_http_requests(&b);
    metric(&b, "http_idle_connections_closed_total", "counter",
           "idle connections (no request in progress) closed, the oldest first, to admit new ones while "
           "--max-connections were open",
           (double)atomic_load_explicit(&idle_closed, memory_order_relaxed));
    metric(&b, "http_connections_refused_total", "counter",
           "new connections closed at once because --max-connections were open, each with a request in "
           "progress",
           (double)atomic_load_explicit(&refused, memory_order_relaxed));
    return strbuf_take(&b);
}

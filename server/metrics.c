/* metrics.c: GET /metrics: the scheduler's counters in Prometheus' text format
 * (version 0.0.4), so operators and the tests can see work admitted, finished,
 * cancelled, preempted and the KV blocks in use. Reads sched_stats without locks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

typedef struct text_buf {
    char *p;
    size_t len, cap;
    bool failed;
} text_buf;

static void tb_printf(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(text_buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap <= b->len + (size_t)n) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void metric(text_buf *b, const char *name, const char *type, const char *help, double value) {
    tb_printf(b, "# HELP spindle_%s %s\n# TYPE spindle_%s %s\nspindle_%s %.17g\n", name, help, name, type, name, value);
}

char *srv_metrics_render(const srv_app *app, const sched *s) {
    text_buf b = {0};
    metric(&b, "ready", "gauge", "1 when the model is loaded and requests are accepted",
           atomic_load(&app->phase) == SRV_PHASE_READY ? 1 : 0);
    metric(&b, "live_generations", "gauge", "generation requests with an open connection",
           (double)atomic_load(&app->live_generations));
    if (s) {
        sched_stats st;
        sched_get_stats(s, &st);
        metric(&b, "requests_submitted_total", "counter", "requests accepted into the queue", (double)st.submitted);
        tb_printf(&b, "# HELP spindle_requests_rejected_total requests refused at submission, by reason\n"
                      "# TYPE spindle_requests_rejected_total counter\n");
        tb_printf(&b, "spindle_requests_rejected_total{reason=\"queue_requests\"} %lld\n",
                  (long long)st.rejected_queue_requests);
        tb_printf(&b, "spindle_requests_rejected_total{reason=\"queue_tokens\"} %lld\n",
                  (long long)st.rejected_queue_tokens);
        tb_printf(&b, "spindle_requests_rejected_total{reason=\"shutdown\"} %lld\n", (long long)st.rejected_shutdown);
        tb_printf(&b, "spindle_requests_rejected_total{reason=\"invalid\"} %lld\n", (long long)st.rejected_invalid);
        metric(&b, "requests_finished_total", "counter", "requests that ended with stop or length",
               (double)st.finished);
        metric(&b, "requests_cancelled_total", "counter", "requests cancelled (client gone)", (double)st.cancelled);
        metric(&b, "requests_errors_total", "counter", "requests ended by an error", (double)st.errors);
        metric(&b, "requests_timeouts_total", "counter", "requests ended by their timeout", (double)st.timeouts);
        metric(&b, "preemptions_total", "counter", "sequences preempted for KV space", (double)st.preemptions);
        metric(&b, "ticks_total", "counter", "scheduler ticks", (double)st.ticks);
        metric(&b, "prompt_tokens_total", "counter", "prompt tokens computed", (double)st.prompt_tokens);
        metric(&b, "generation_tokens_total", "counter", "tokens generated", (double)st.generated_tokens);
        metric(&b, "requests_waiting", "gauge", "requests accepted, not yet running", (double)st.queued);
        metric(&b, "requests_waiting_tokens", "gauge", "their prompt tokens", (double)st.queued_tokens);
        metric(&b, "requests_running", "gauge", "sequences prefilling or decoding", (double)st.running);
        metric(&b, "kv_blocks_used", "gauge", "KV cache blocks in use", (double)st.kv_blocks_used);
        metric(&b, "kv_blocks_total", "gauge", "KV cache blocks", (double)st.kv_blocks_total);
        metric(&b, "scheduler_heartbeat_age_seconds", "gauge", "seconds since the scheduler thread last ticked or woke",
               sched_seconds_since_heartbeat(s));
    }
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* run.c: the timed run: every request of the benchmark on one thread with one curl multi
 * handle.
 *
 * DESIGN: the main thread owns everything here. Arrival times are drawn up front (Poisson:
 * exponential gaps of mean 1/rate from the seeded RNG, as vLLM's burstiness 1; all zero for
 * an infinite rate). The loop starts every request whose arrival time has passed while fewer
 * than --max-concurrency are in flight (a request that arrives at a full house waits for a
 * slot, as behind vLLM's semaphore, and its clock starts when it is sent), lets curl move
 * the bytes, reaps finished transfers, and sleeps in curl_multi_poll until a socket is ready
 * or the next arrival is due. No thread per request: hundreds of streams cost one poll().
 * The body of each response is parsed as it arrives (sse.c, stream.c), timestamped once per
 * write callback.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "bench/loadgen/loadgen.h"

#define RUN_ERROR_BODY_MAX 4096 /* of a non-200 answer, kept for its message */

/* One request in flight. */
typedef struct run_request {
    size_t index;
    CURL *easy;
    lg_sse sse;
    lg_stream stream;
    long status;        /* HTTP status; 0 until the first body byte */
    double t_send, now; /* now: the time of the bytes being parsed */
    char *err_body;     /* the start of a non-200 answer */
    size_t err_len;
    char curl_err[CURL_ERROR_SIZE];
} run_request;

typedef struct run_state {
    const lg_options *o;
    const lg_prompt *prompts;
    lg_result *results;
    CURLM *multi;
    struct curl_slist *headers;
    char url[2048];
} run_state;

static void run_event(void *ctx, const char *data, size_t len) {
    run_request *rq = ctx;
    lg_stream_on_data(&rq->stream, data, len, rq->now);
}

static size_t run_write(char *p, size_t size, size_t nmemb, void *ud) {
    run_request *rq = ud;
    size_t n = size * nmemb;
    if (rq->status == 0) curl_easy_getinfo(rq->easy, CURLINFO_RESPONSE_CODE, &rq->status);
    if (rq->status != 200) { /* an error answer: keep its start for the message */
        if (!rq->err_body && !(rq->err_body = malloc(RUN_ERROR_BODY_MAX + 1))) return 0;
        size_t take = RUN_ERROR_BODY_MAX - rq->err_len < n ? RUN_ERROR_BODY_MAX - rq->err_len : n;
        memcpy(rq->err_body + rq->err_len, p, take);
        rq->err_len += take;
        rq->err_body[rq->err_len] = '\0';
        return n;
    }
    rq->now = lg_now();
    if (lg_sse_feed(&rq->sse, p, n, run_event, rq) != 0) {
        lg_stream_set_error(&rq->stream, "the stream could not be parsed (out of memory or a line over %u bytes)",
                            LG_SSE_MAX_LINE);
        return 0; /* aborts the transfer */
    }
    return n;
}

static int run_start(run_state *st, run_request *rq, size_t index) {
    *rq = (run_request){.index = index};
    lg_sse_init(&rq->sse);
    lg_stream_init(&rq->stream);
    CURL *h = rq->easy = curl_easy_init();
    if (!h) return -1;
    const char *body = st->prompts[index].body;
    curl_easy_setopt(h, CURLOPT_URL, st->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, st->headers);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body); /* borrowed: the prompts outlive the run */
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, run_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, rq);
    curl_easy_setopt(h, CURLOPT_PRIVATE, rq);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, rq->curl_err);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    if (st->o->timeout_s > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(st->o->timeout_s * 1000));
    rq->t_send = lg_now();
    return curl_multi_add_handle(st->multi, h) == CURLM_OK ? 0 : -1;
}

/* The message of a non-200 answer: error.message when it is OpenAI's error object. */
static void run_http_error(run_request *rq) {
    json_t *root = rq->err_body ? json_loads(rq->err_body, 0, NULL) : NULL;
    json_t *err = json_object_get(root, "error");
    const char *msg = json_is_string(err) ? json_string_value(err) : json_string_value(json_object_get(err, "message"));
    if (!msg) msg = json_string_value(json_object_get(root, "message")); /* vLLM's {"object": "error"} */
    if (msg)
        lg_stream_set_error(&rq->stream, "HTTP %ld: %s", rq->status, msg);
    else
        lg_stream_set_error(&rq->stream, "HTTP %ld: %.300s", rq->status, rq->err_body ? rq->err_body : "(no body)");
    json_decref(root);
}

/* A transfer ended: its result, then the request's memory goes. */
static void run_finish(run_state *st, run_request *rq, CURLcode code) {
    lg_result *r = &st->results[rq->index];
    lg_stream *s = &rq->stream;
    if (code == CURLE_OK && rq->status == 0) curl_easy_getinfo(rq->easy, CURLINFO_RESPONSE_CODE, &rq->status);
    if (code == CURLE_OK && rq->status == 200) {
        rq->now = lg_now();
        lg_sse_end(&rq->sse, run_event, rq);
    }
    /* the first cause wins (lg_stream_set_error keeps the first): an error event or a broken
     * stream, the transport, the status, then how the stream ended */
    if (code != CURLE_OK) {
        lg_stream_set_error(s, "transport: %s", rq->curl_err[0] ? rq->curl_err : curl_easy_strerror(code));
    } else if (rq->status != 200) {
        run_http_error(rq);
    } else if (s->t_done == 0) {
        lg_stream_set_error(s, "the stream ended without [DONE]");
    } else if (s->t_first == 0) {
        lg_stream_set_error(s, "the stream carried no content");
    }
    int prompt_tokens = st->prompts[rq->index].input_tokens;
    *r = (lg_result){.ok = !s->error, .input_tokens = prompt_tokens >= 0 ? prompt_tokens : s->prompt_tokens};
    if (r->ok) {
        r->ttft = s->t_first - rq->t_send;
        r->e2e = (s->t_end > 0 ? s->t_end : s->t_done) - rq->t_send; /* [DONE] only confirms success */
        r->usage_missing = s->completion_tokens < 0;
        r->usage_input_tokens = s->prompt_tokens;
        r->output_tokens = r->usage_missing ? s->content_chunks : s->completion_tokens;
        r->tpot = r->output_tokens > 1 ? (r->e2e - r->ttft) / (r->output_tokens - 1) : -1;
        r->itl = s->itl; /* taken */
        r->n_itl = s->n_itl;
        s->itl = NULL;
    } else {
        r->error = s->error; /* taken */
        s->error = NULL;
    }
    curl_multi_remove_handle(st->multi, rq->easy);
    curl_easy_cleanup(rq->easy);
    lg_sse_free(&rq->sse);
    lg_stream_free(s);
    free(rq->err_body);
    rq->easy = NULL;
}

/* Arrival offsets from the start, seconds; caller owns (free). */
static double *run_arrivals(const lg_options *o, size_t n) {
    double *at = calloc(n ? n : 1, sizeof *at);
    if (!at || isinf(o->request_rate)) return at;
    lg_rng rng = {o->seed ^ 0x5deece66dull}; /* its own stream: the prompts don't shift the arrivals */
    for (size_t i = 1; i < n; i++) at[i] = at[i - 1] - log(1.0 - lg_rng_uniform(&rng)) / o->request_rate;
    return at;
}

int lg_run(const lg_options *o, const lg_prompt *prompts, size_t n, lg_result *results, double *duration, lg_err *e) {
    run_state st = {.o = o, .prompts = prompts, .results = results};
    snprintf(st.url, sizeof st.url, "%s%s", o->base_url, o->endpoint);
    st.headers = curl_slist_append(NULL, "Content-Type: application/json");
    st.headers = curl_slist_append(st.headers, "Expect:"); /* no 100-continue round trip */
    if (o->api_key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        st.headers = curl_slist_append(st.headers, auth);
    }
    double *at = run_arrivals(o, n);
    run_request *reqs = calloc(n ? n : 1, sizeof *reqs);
    st.multi = curl_multi_init();
    int rc = -1;
    if (!at || !reqs || !st.multi || !st.headers) {
        lg_fail(e, "out of memory");
        goto done;
    }
    memset(results, 0, n * sizeof *results);
    size_t cap = o->max_concurrency > 0 ? (size_t)o->max_concurrency : n;
    size_t next = 0, finished = 0, in_flight = 0;
    double t0 = lg_now(), t_end = t0;
    while (finished < n) {
        double now = lg_now();
        while (next < n && in_flight < cap && now - t0 >= at[next]) {
            if (run_start(&st, &reqs[next], next) != 0) {
                lg_fail(e, "could not start request %zu (curl)", next);
                goto done;
            }
            next++;
            in_flight++;
        }
        int running;
        curl_multi_perform(st.multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(st.multi, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            run_request *rq;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&rq);
            run_finish(&st, rq, msg->data.result); /* msg is invalid after this */
            in_flight--;
            finished++;
            t_end = lg_now();
        }
        if (finished == n) break;
        /* sleep until a socket is ready (curl also wakes for its own timers) or the next arrival */
        int wait_ms = 1000;
        if (next < n && in_flight < cap) {
            double due = at[next] - (lg_now() - t0);
            wait_ms = due <= 0 ? 0 : (int)ceil(due * 1000);
            if (wait_ms > 1000) wait_ms = 1000;
        }
        if (wait_ms > 0) curl_multi_poll(st.multi, NULL, 0, wait_ms, NULL);
    }
    *duration = t_end - t0;
    rc = 0;
done:
    for (size_t i = 0; i < n && reqs; i++) {
        if (reqs[i].easy) { /* only on a failed run: transfers still in flight */
            curl_multi_remove_handle(st.multi, reqs[i].easy);
            curl_easy_cleanup(reqs[i].easy);
            lg_sse_free(&reqs[i].sse);
            lg_stream_free(&reqs[i].stream);
            free(reqs[i].err_body);
        }
    }
    curl_multi_cleanup(st.multi);
    curl_slist_free_all(st.headers);
    free(reqs);
    free(at);
    return rc;
}

void lg_results_free(lg_result *r, size_t n) {
    for (size_t i = 0; r && i < n; i++) {
        free(r[i].itl);
        free(r[i].error);
    }
    free(r);
}

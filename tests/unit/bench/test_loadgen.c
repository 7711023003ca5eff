/* test_loadgen.c: the load generator's pure parts: SSE framing fed in pieces of every size
 * (curl splits bodies anywhere), the meaning of OpenAI stream chunks for TTFT/ITL/usage,
 * and the percentiles against numpy's default linear method. The .c files are included,
 * so the test needs neither curl nor a server. */
#include <criterion/criterion.h>
#include <string.h>

#include "bench/loadgen/sse.c"
#include "bench/loadgen/stats.c"
#include "bench/loadgen/stream.c"

/* ---- SSE framing ---- */

typedef struct events {
    char text[4096]; /* every event's data, each followed by '|' */
    int n;
} events;

static void collect(void *ctx, const char *data, size_t len) {
    events *ev = ctx;
    cr_assert_eq(data[len], '\0', "event data is NUL-terminated");
    strncat(ev->text, data, len);
    strcat(ev->text, "|");
    ev->n++;
}

static void feed_in_pieces(const char *body, size_t piece, events *ev) {
    lg_sse p;
    lg_sse_init(&p);
    memset(ev, 0, sizeof *ev);
    size_t len = strlen(body);
    for (size_t i = 0; i < len; i += piece) {
        size_t n = len - i < piece ? len - i : piece;
        cr_assert_eq(lg_sse_feed(&p, body + i, n, collect, ev), 0);
    }
    lg_sse_end(&p, collect, ev);
    lg_sse_free(&p);
}

Test(loadgen_sse, same_events_whatever_the_pieces) {
    const char *body = ": comment\r\n"
                       "event: message\r\n"
                       "data: {\"a\":1}\r\n"
                       "\r\n"
                       "data:{\"b\":2}\n"
                       "\n"
                       "id: 7\n"
                       "data: line one\n"
                       "data: line two\n"
                       "\n"
                       "data: \xc3\xa9t\xc3\xa9\r"
                       "\r"
                       "data: [DONE]\n\n";
    const char *want = "{\"a\":1}|{\"b\":2}|line one\nline two|\xc3\xa9t\xc3\xa9|[DONE]|";
    for (size_t piece = 1; piece <= strlen(body); piece++) {
        events ev;
        feed_in_pieces(body, piece, &ev);
        cr_assert_str_eq(ev.text, want, "pieces of %zu bytes", piece);
        cr_assert_eq(ev.n, 5);
    }
}

Test(loadgen_sse, dispatches_an_unclosed_last_event_at_the_end) {
    events ev;
    feed_in_pieces("data: {\"x\":1}\n\ndata: [DONE]", 3, &ev);
    cr_assert_str_eq(ev.text, "{\"x\":1}|[DONE]|");
}

Test(loadgen_sse, blank_lines_without_data_are_no_events) {
    events ev;
    feed_in_pieces("\n\n: keep-alive\n\n\r\n", 1, &ev);
    cr_assert_eq(ev.n, 0);
}

Test(loadgen_sse, empty_data_is_an_event) {
    events ev;
    feed_in_pieces("data:\n\n", 2, &ev);
    cr_assert_eq(ev.n, 1);
    cr_assert_str_eq(ev.text, "|");
}

/* ---- the OpenAI stream ---- */

static void on(lg_stream *s, const char *data, double t) {
    lg_stream_on_data(s, data, strlen(data), t);
}

Test(loadgen_stream, completions_content_times_and_usage) {
    lg_stream s;
    lg_stream_init(&s);
    on(&s, "{\"choices\":[{\"index\":0,\"text\":\"\"}]}", 1.0); /* empty: not content */
    on(&s, "{\"choices\":[{\"index\":0,\"text\":\" a\"}]}", 2.0);
    on(&s, "{\"choices\":[{\"index\":0,\"text\":\" b\"}]}", 2.5);
    on(&s, "{\"choices\":[{\"index\":0,\"text\":\" c\",\"finish_reason\":\"length\"}],\"usage\":null}", 3.25);
    on(&s, "{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}", 3.5);
    cr_assert_eq(s.t_done, 0);
    on(&s, "[DONE]", 4.0);
    on(&s, "{\"choices\":[{\"text\":\"late\"}]}", 5.0); /* after [DONE]: ignored */
    cr_assert_null(s.error);
    cr_assert_eq(s.t_first, 2.0);
    cr_assert_eq(s.t_done, 4.0);
    cr_assert_eq(s.content_chunks, 3);
    cr_assert_eq(s.n_itl, 2);
    cr_assert_float_eq(s.itl[0], 0.5, 1e-12);
    cr_assert_float_eq(s.itl[1], 0.75, 1e-12);
    cr_assert_eq(s.completion_tokens, 3);
    cr_assert_eq(s.prompt_tokens, 5);
    lg_stream_free(&s);
}

Test(loadgen_stream, chat_role_only_chunk_is_not_the_first_token) {
    lg_stream s;
    lg_stream_init(&s);
    on(&s, "{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}", 1.0);
    on(&s, "{\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}", 1.5);
    on(&s, "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}", 2.0);
    cr_assert_eq(s.t_first, 2.0);
    cr_assert_eq(s.content_chunks, 1);
    cr_assert_eq(s.completion_tokens, -1, "no usage yet");
    lg_stream_free(&s);
}

Test(loadgen_stream, error_objects_fail_the_request_and_the_first_wins) {
    lg_stream s;
    lg_stream_init(&s);
    on(&s, "{\"error\":{\"message\":\"context full\",\"type\":\"server_error\"}}", 1.0);
    on(&s, "{\"object\":\"error\",\"message\":\"second\"}", 2.0);
    cr_assert_str_eq(s.error, "error event in the stream: context full");
    lg_stream_free(&s);

    lg_stream_init(&s);
    on(&s, "{\"object\":\"error\",\"message\":\"vllm says no\"}", 1.0);
    cr_assert_str_eq(s.error, "error event in the stream: vllm says no");
    lg_stream_free(&s);

    lg_stream_init(&s);
    on(&s, "{not json", 1.0);
    cr_assert_not_null(strstr(s.error, "not JSON"), "%s", s.error);
    lg_stream_free(&s);
}

/* ---- percentiles: the values numpy.percentile gives ---- */

Test(loadgen_stats, percentiles_match_numpy_linear) {
    double v[] = {4, 1, 3, 2};
    lg_summary s;
    lg_stats_summarize(v, 4, &s);
    cr_assert_float_eq(s.mean, 2.5, 1e-12);
    cr_assert_float_eq(s.median, 2.5, 1e-12);            /* np.percentile([1,2,3,4], 50) */
    cr_assert_float_eq(s.p90, 3.7, 1e-12);               /* ... 90 */
    cr_assert_float_eq(s.p99, 3.97, 1e-12);              /* ... 99 */
    cr_assert_float_eq(s.std, 1.118033988749895, 1e-12); /* np.std, ddof 0 */

    double ten[] = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
    lg_stats_summarize(ten, 10, &s);
    cr_assert_float_eq(s.median, 5.5, 1e-12);
    cr_assert_float_eq(s.p90, 9.1, 1e-12);
    cr_assert_float_eq(s.p99, 9.91, 1e-12);
    cr_assert_float_eq(lg_stats_percentile(ten, 10, 0), 1, 1e-12);
    cr_assert_float_eq(lg_stats_percentile(ten, 10, 100), 10, 1e-12);
}

Test(loadgen_stats, one_value_and_none) {
    double one[] = {7};
    lg_summary s;
    lg_stats_summarize(one, 1, &s);
    cr_assert_eq(s.median, 7);
    cr_assert_eq(s.p99, 7);
    cr_assert_eq(s.std, 0);
    lg_stats_summarize(NULL, 0, &s);
    cr_assert_eq(s.n, 0);
    cr_assert_eq(s.mean, 0);
}

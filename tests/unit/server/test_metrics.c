/* test_metrics.c: the server's side of metrics and the access log: HTTP requests
 * counted by endpoint and status (server/http/metrics.c) as /metrics renders them, and the
 * access log line in text and JSON (server/http/access_log.c), the Responses store's
 * gauges and counters once the model is ready. The scheduler's histograms
 * are tested in tests/unit/scheduler/test_sched_metrics.c and end to end in
 * tests/integration/test_metrics.py. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"
#include "server/http/http.h"

static char *render_without_scheduler(void) {
    static srv_app app; /* zeroed: loading, no scheduler */
    char *text = srv_metrics_render(&app, NULL);
    cr_assert_not_null(text);
    return text;
}

Test(srv_metrics, http_requests_by_endpoint_and_status) {
    srv_metrics_count_http("/v1/chat/completions", 200);
    srv_metrics_count_http("/v1/chat/completions", 200);
    srv_metrics_count_http("/v1/chat/completions", 429);
    srv_metrics_count_http("other", 404);
    srv_metrics_count_http("other", 99);  /* not a status: ignored */
    srv_metrics_count_http("other", 600); /* neither */
    char *text = render_without_scheduler();
    cr_assert_not_null(strstr(text, "# TYPE spindle_http_requests_total counter\n"));
    cr_assert_not_null(
        strstr(text, "spindle_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n"));
    cr_assert_not_null(
        strstr(text, "spindle_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"429\"} 1\n"));
    cr_assert_not_null(strstr(text, "spindle_http_requests_total{endpoint=\"other\",status=\"404\"} 1\n"));
    cr_assert_null(strstr(text, "status=\"99\""));
    cr_assert_null(strstr(text, "status=\"600\""));
    /* without a scheduler: no scheduler series, but the ready gauge says why */
    cr_assert_not_null(strstr(text, "spindle_ready 0\n"));
    cr_assert_null(strstr(text, "spindle_ticks_total"));
    free(text);
}

Test(srv_metrics, endpoint_names_compare_by_text) {
    char name[] = "/v1/models"; /* another copy of the same text shares the slot */
    srv_metrics_count_http("/v1/models", 200);
    srv_metrics_count_http(name, 200);
    char *text = render_without_scheduler();
    cr_assert_not_null(strstr(text, "spindle_http_requests_total{endpoint=\"/v1/models\",status=\"200\"} 2\n"));
    free(text);
}

/* The store's bytes, entries and keys as it counts them, and its evictions by reason. */
Test(srv_metrics, the_responses_store_when_ready) {
    static srv_app app;
    srv_response_store *store = NULL;
    cr_assert_eq(srv_response_store_create(1 << 20, 2, 60, &store), SP_OK);
    cr_assert(srv__store_put(store, "resp_a", 1, json_pack("{s:s}", "id", "resp_a"), json_array(), 0));
    cr_assert(srv__store_put(store, "resp_b", 2, json_pack("{s:s}", "id", "resp_b"), json_array(), 0));
    cr_assert(srv__store_put(store, "resp_c", 2, json_pack("{s:s}", "id", "resp_c"), json_array(), 0));
    app.model.responses = store;
    char *text = srv_metrics_render(&app, NULL); /* loading: none yet */
    cr_expect_null(strstr(text, "spindle_responses_store"));
    free(text);
    atomic_store(&app.phase, SRV_PHASE_READY);
    text = srv_metrics_render(&app, NULL);
    srv_store_stats st;
    srv_response_store_stats(store, &st);
    char want[128];
    snprintf(want, sizeof want, "spindle_responses_store_bytes %zu\n", st.bytes);
    cr_expect_not_null(strstr(text, want), "%s", text);
    cr_expect_gt(st.bytes, 2 * strlen("{\"id\":\"resp_b\"}[]"));
    cr_expect_not_null(strstr(text, "spindle_responses_store_entries 2\n"));
    cr_expect_not_null(strstr(text, "spindle_responses_store_keys 1\n")); /* key 1 gave way to the count bound */
    cr_expect_not_null(strstr(text, "spindle_responses_store_stored_total 3\n"));
    cr_expect_not_null(strstr(text, "spindle_responses_store_evictions_total{reason=\"other_key\"} 1\n"));
    cr_expect_not_null(strstr(text, "spindle_responses_store_evictions_total{reason=\"own_key\"} 0\n"));
    free(text);
    srv_response_store_destroy(store);
}

static srv_access_entry sample_entry(void) {
    return (srv_access_entry){.id = "chatcmpl-abc",
                              .method = "POST",
                              .path = "/v1/chat/completions",
                              .status = 200,
                              .prompt_tokens = 12,
                              .completion_tokens = 8,
                              .ttft_s = 0.0123,
                              .duration_s = 0.5,
                              .finish = "stop",
                              .cancel = NULL};
}

Test(srv_access_log, text_line) {
    srv_access_entry e = sample_entry();
    char *line = srv_access_log_format(SP_LOG_FORMAT_TEXT, &e);
    cr_assert_not_null(line);
    cr_assert_str_eq(line, "spindle: access: id=chatcmpl-abc method=POST path=/v1/chat/completions status=200 "
                           "prompt_tokens=12 completion_tokens=8 ttft_ms=12.3 duration_ms=500.0 finish=stop cancel=-");
    free(line);
}

Test(srv_access_log, text_fields_stay_one_word) {
    srv_access_entry e = sample_entry();
    e.id = NULL;
    e.path = "/a b\"c\n%";
    e.ttft_s = -1;
    e.finish = NULL;
    e.cancel = "client_gone";
    e.prompt = "\"hello world\"";
    char *line = srv_access_log_format(SP_LOG_FORMAT_TEXT, &e);
    cr_assert_not_null(line);
    cr_assert_not_null(strstr(line, " id=- "));
    cr_assert_not_null(strstr(line, " path=/a%20b%22c%0A%25 "));
    cr_assert_not_null(strstr(line, " ttft_ms=- "));
    cr_assert_not_null(strstr(line, " finish=- cancel=client_gone prompt=\"hello world\""));
    cr_assert_null(strchr(line, '\n'));
    free(line);
}

Test(srv_access_log, json_line) {
    srv_access_entry e = sample_entry();
    e.cancel = "timeout";
    e.prompt = "[\"a\",\"b\"]";
    char *line = srv_access_log_format(SP_LOG_FORMAT_JSON, &e);
    cr_assert_not_null(line);
    cr_assert_null(strchr(line, '\n'));
    json_error_t err;
    json_t *o = json_loads(line, 0, &err);
    cr_assert_not_null(o, "%s: %s", line, err.text);
    cr_assert_str_eq(json_string_value(json_object_get(o, "type")), "access");
    cr_assert_str_eq(json_string_value(json_object_get(o, "id")), "chatcmpl-abc");
    cr_assert_str_eq(json_string_value(json_object_get(o, "method")), "POST");
    cr_assert_str_eq(json_string_value(json_object_get(o, "path")), "/v1/chat/completions");
    cr_assert_eq(json_integer_value(json_object_get(o, "status")), 200);
    cr_assert_eq(json_integer_value(json_object_get(o, "prompt_tokens")), 12);
    cr_assert_eq(json_integer_value(json_object_get(o, "completion_tokens")), 8);
    cr_assert_float_eq(json_number_value(json_object_get(o, "ttft_ms")), 12.3, 1e-9);
    cr_assert_float_eq(json_number_value(json_object_get(o, "duration_ms")), 500.0, 1e-9);
    cr_assert_str_eq(json_string_value(json_object_get(o, "finish")), "stop");
    cr_assert_str_eq(json_string_value(json_object_get(o, "cancel")), "timeout");
    cr_assert(json_is_array(json_object_get(o, "prompt")), "the prompt is kept as JSON");
    cr_assert_not_null(json_string_value(json_object_get(o, "time")));
    json_decref(o);
    free(line);
}

Test(srv_access_log, json_nulls_and_no_prompt_by_default) {
    srv_access_entry e = sample_entry();
    e.id = NULL;
    e.ttft_s = -1;
    char *line = srv_access_log_format(SP_LOG_FORMAT_JSON, &e);
    json_t *o = json_loads(line, 0, NULL);
    cr_assert_not_null(o);
    cr_assert(json_is_null(json_object_get(o, "id")));
    cr_assert(json_is_null(json_object_get(o, "ttft_ms")));
    cr_assert(json_is_null(json_object_get(o, "cancel")));
    cr_assert_null(json_object_get(o, "prompt"));
    json_decref(o);
    free(line);
}

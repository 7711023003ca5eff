/* test_embeddings.c: the /v1/embeddings body (embeddings.c): `input` in its four forms
 * tokenized as llama-server does, the server's pooling, the 400s naming the field, and
 * the answer rendered as floats or base64 with its usage.
 */
#include <criterion/criterion.h>

#include "tests/unit/server/openai_fixture.h"

static srv_request parse_ok(const char *body) {
    srv_request r;
    srv_error err;
    sp_status st = srv_embeddings_parse(body, strlen(body), &fx.mi, &r, &err);
    cr_assert_eq(st, SP_OK, "%s: %d %s", body, err.http_status, err.message);
    return r;
}

static void expect_error(const char *body, int status, const char *param, const char *needle) {
    srv_request r;
    srv_error err;
    cr_assert_neq(srv_embeddings_parse(body, strlen(body), &fx.mi, &r, &err), SP_OK, "%s", body);
    cr_expect_eq(err.http_status, status, "%s: %d %s", body, err.http_status, err.message);
    cr_expect_str_eq(err.param, param, "%s: %s", body, err.message);
    if (needle) cr_expect(strstr(err.message, needle), "%s: %s", body, err.message);
    cr_expect_null(r.prompts, "nothing is kept on failure");
}

static void expect_prompt(const srv_request *r, int k, const char *text) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(fx.vocab, text, strlen(text), tok_add_bos(fx.vocab), true, &ids, &n), SP_OK);
    cr_assert_eq(r->prompt_lens[k], (int32_t)n, "%s", text);
    for (size_t i = 0; i < n; i++) cr_expect_eq(r->prompts[k][i], ids[i], "%s [%zu]", text, i);
    free(ids);
}

Test(srv_embeddings, input_forms) {
    fixture_stories(NULL);
    srv_request r = parse_ok("{\"model\":\"stories260K\",\"input\":\"Once upon a time\"}");
    cr_expect_eq(r.endpoint, SRV_ENDPOINT_EMBEDDINGS);
    cr_expect_eq(r.n_prompts, 1);
    cr_expect_eq(r.n, 1);
    cr_expect_eq(r.stream, false);
    cr_expect_eq(r.base64, false);
    cr_expect_eq(r.params.pooling, SP_POOLING_MEAN, "a bare model info pools by the mean");
    expect_prompt(&r, 0, "Once upon a time"); /* BOS by the vocab's rule (stories260K adds it) */
    cr_expect_eq(r.prompts[0][0], tok_bos(fx.vocab));
    sched_request_params p = srv_request_choice_params(&r, 0, 0);
    cr_expect_eq(p.max_tokens, 0);
    cr_expect_eq(p.pooling, SP_POOLING_MEAN);
    srv_request_free(&r);

    r = parse_ok("{\"input\":[\"Lily\",\"Tom had a dog.\",\"x\"],\"encoding_format\":\"base64\",\"user\":\"u1\"}");
    cr_expect_eq(r.n_prompts, 3);
    cr_expect_eq(r.base64, true);
    expect_prompt(&r, 0, "Lily");
    expect_prompt(&r, 1, "Tom had a dog.");
    expect_prompt(&r, 2, "x");
    srv_request_free(&r);

    r = parse_ok("{\"input\":[5,6,7]}"); /* one input of token ids, used as they are */
    cr_expect_eq(r.n_prompts, 1);
    cr_expect_eq(r.prompt_lens[0], 3);
    cr_expect(r.prompts[0][0] == 5 && r.prompts[0][1] == 6 && r.prompts[0][2] == 7);
    srv_request_free(&r);

    r = parse_ok("{\"input\":[[5,6],[7],\"Lily\"],\"encoding_format\":\"float\"}");
    cr_expect_eq(r.n_prompts, 3);
    cr_expect_eq(r.prompt_lens[0], 2);
    cr_expect_eq(r.prompt_lens[1], 1);
    expect_prompt(&r, 2, "Lily");
    srv_request_free(&r);

    fx.mi.pooling = SP_POOLING_LAST; /* --pooling last */
    r = parse_ok("{\"input\":\"Lily\"}");
    cr_expect_eq(r.params.pooling, SP_POOLING_LAST);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_embeddings, bad_input_is_a_400_naming_the_field) {
    fixture_stories(NULL);
    expect_error("{\"model\":\"stories260K\"}", 400, "input", "Missing");
    expect_error("{\"input\":\"\"}", 400, "input", "empty");
    expect_error("{\"input\":[]}", 400, "input", "empty");
    expect_error("{\"input\":[\"a\",\"\"]}", 400, "input[1]", "empty");
    expect_error("{\"input\":[\"a\",[]]}", 400, "input[1]", "empty");
    expect_error("{\"input\":[\"a\",\"b\",3]}", 400, "input[2]", NULL);
    expect_error("{\"input\":[\"a\",{\"text\":\"b\"}]}", 400, "input[1]", NULL);
    expect_error("{\"input\":[[1,2],[3,\"x\"]]}", 400, "input[1][1]", NULL);
    expect_error("{\"input\":[1,99999]}", 400, "input[1]", "99999");
    expect_error("{\"input\":[1,-1]}", 400, "input[1]", NULL);
    expect_error("{\"input\":42}", 400, "input", NULL);
    expect_error("{\"input\":\"a\",\"encoding_format\":\"int8\"}", 400, "encoding_format", "int8");
    expect_error("{\"input\":\"a\",\"dimensions\":32}", 400, "dimensions", "dimensions");
    expect_error("{\"input\":\"a\",\"embd_normalize\":1}", 400, "embd_normalize", NULL);
    expect_error("{\"input\":\"a\",\"model\":\"gpt-4o\"}", 404, "model", "gpt-4o");
    expect_error("{\"input\":\"a\"", 400, "", NULL);
    /* longer than the context (512 here) */
    char body[8192];
    size_t o = (size_t)snprintf(body, sizeof body, "{\"input\":[\"a\",[");
    for (int i = 0; i < 600; i++) o += (size_t)snprintf(body + o, sizeof body - o, "%s5", i ? "," : "");
    snprintf(body + o, sizeof body - o, "]]}");
    srv_request r;
    srv_error err;
    cr_assert_neq(srv_embeddings_parse(body, strlen(body), &fx.mi, &r, &err), SP_OK);
    cr_expect_eq(err.http_status, 400);
    cr_expect_str_eq(err.code, "context_length_exceeded");
    cr_expect_str_eq(err.param, "input[1]");
    /* more inputs than one request may carry */
    fx.mi.max_sequences = 2;
    expect_error("{\"input\":[\"a\",\"b\",\"c\"]}", 400, "input", "maximum length 2");
    fixture_close();
}

/* Finished outputs as the scheduler leaves them. */
static sched_output output_with(float *vec, int32_t d, int32_t prompt_tokens) {
    return (sched_output){
        .embedding = vec, .n_embd = d, .prompt_tokens = prompt_tokens, .done = true, .finish = SCHED_FINISH_STOP};
}

Test(srv_embeddings, answer_as_floats_and_base64) {
    fixture_stories(NULL);
    float a[3] = {0.5f, -0.25f, 1.0f}, b[3] = {0.0f, 1.0f, -2.5f};
    sched_output oa = output_with(a, 3, 4), ob = output_with(b, 3, 7);
    const sched_output *outs[2] = {&oa, &ob};
    srv_request r = parse_ok("{\"input\":[\"x\",\"y\"]}");
    json_t *j = srv_render_embeddings(&r, &fx.mi, outs, 2);
    cr_assert_not_null(j);
    cr_expect_str_eq(json_string_value(json_object_get(j, "object")), "list");
    cr_expect_str_eq(json_string_value(json_object_get(j, "model")), "stories260K");
    json_t *usage = json_object_get(j, "usage");
    cr_expect_eq(json_integer_value(json_object_get(usage, "prompt_tokens")), 11);
    cr_expect_eq(json_integer_value(json_object_get(usage, "total_tokens")), 11);
    json_t *data = json_object_get(j, "data");
    cr_assert_eq(json_array_size(data), 2);
    for (int i = 0; i < 2; i++) {
        json_t *item = json_array_get(data, (size_t)i);
        cr_expect_str_eq(json_string_value(json_object_get(item, "object")), "embedding");
        cr_expect_eq(json_integer_value(json_object_get(item, "index")), i);
        json_t *vec = json_object_get(item, "embedding");
        cr_assert_eq(json_array_size(vec), 3);
        const float *want = i == 0 ? a : b;
        for (int k = 0; k < 3; k++) cr_expect_eq((float)json_real_value(json_array_get(vec, (size_t)k)), want[k]);
    }
    json_decref(j);
    srv_request_free(&r);

    /* base64 of the little-endian float32 bytes: 0.5 = 00 00 00 3f, -0.25 = 00 00 80 be, 1 = 00 00 80 3f */
    r = parse_ok("{\"input\":\"x\",\"encoding_format\":\"base64\"}");
    j = srv_render_embeddings(&r, &fx.mi, outs, 1);
    cr_assert_not_null(j);
    json_t *vec = json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding");
    cr_assert(json_is_string(vec));
    cr_expect_str_eq(json_string_value(vec), "AAAAPwAAgL4AAIA/");
    json_decref(j);
    srv_request_free(&r);
    fixture_close();
}

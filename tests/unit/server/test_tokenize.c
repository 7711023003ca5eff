/* test_tokenize.c: the /tokenize and /detokenize bodies: llama-server's and vLLM's
 * field names, with_pieces, messages counted as a chat completion would be, and the
 * errors.
 */
#include <criterion/criterion.h>

#include "tests/unit/server/openai_fixture.h"

static json_t *tokenize(const char *body) {
    srv_error err;
    json_t *j = srv_tokenize(body, strlen(body), &fx.mi, &err);
    cr_assert_not_null(j, "%s: %d %s", body, err.http_status, err.message);
    return j;
}

static void expect_ids(const json_t *tokens, const char *text, bool add_bos) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(fx.vocab, text, strlen(text), add_bos, true, &ids, &n), SP_OK);
    cr_assert_eq(json_array_size(tokens), n, "%s", text);
    for (size_t i = 0; i < n; i++) cr_expect_eq(json_integer_value(json_array_get(tokens, i)), ids[i]);
    free(ids);
}

Test(srv_tokenize, content_and_prompt) {
    fixture_stories(NULL);
    json_t *j = tokenize("{\"content\":\"Once upon a time\"}");
    expect_ids(json_object_get(j, "tokens"), "Once upon a time", false);
    cr_expect_eq(json_integer_value(json_object_get(j, "count")),
                 (json_int_t)json_array_size(json_object_get(j, "tokens")));
    cr_expect_eq(json_integer_value(json_object_get(j, "max_model_len")), 512);
    json_decref(j);
    /* llama-server's add_special; vLLM's prompt adds BOS by default */
    j = tokenize("{\"content\":\"Once\",\"add_special\":true}");
    expect_ids(json_object_get(j, "tokens"), "Once", true);
    json_decref(j);
    j = tokenize("{\"prompt\":\"Once\"}");
    expect_ids(json_object_get(j, "tokens"), "Once", true);
    json_decref(j);
    j = tokenize("{\"prompt\":\"Once\",\"add_special_tokens\":false}");
    expect_ids(json_object_get(j, "tokens"), "Once", false);
    json_decref(j);
    fixture_close();
}

Test(srv_tokenize, with_pieces) {
    fixture_smol();
    json_t *j = tokenize("{\"content\":\"Hi \\u00e9\\u00e9\",\"with_pieces\":true}");
    json_t *tokens = json_object_get(j, "tokens");
    cr_assert_gt(json_array_size(tokens), 0);
    char joined[64] = "";
    for (size_t i = 0; i < json_array_size(tokens); i++) {
        json_t *t = json_array_get(tokens, i);
        cr_assert(json_is_integer(json_object_get(t, "id")));
        json_t *piece = json_object_get(t, "piece");
        cr_assert(json_is_string(piece), "valid UTF-8 pieces are strings");
        strcat(joined, json_string_value(piece));
    }
    cr_expect_str_eq(joined, "Hi éé");
    json_decref(j);
    /* a piece that is part of a character is its bytes */
    j = tokenize("{\"content\":\"\\u20ac\",\"with_pieces\":true}");
    tokens = json_object_get(j, "tokens");
    size_t bytes = 0;
    for (size_t i = 0; i < json_array_size(tokens); i++) {
        json_t *piece = json_object_get(json_array_get(tokens, i), "piece");
        bytes += json_is_array(piece) ? json_array_size(piece) : json_string_length(piece);
    }
    cr_expect_eq(bytes, 3);
    json_decref(j);
    fixture_close();
}

Test(srv_tokenize, messages_count_like_a_chat_completion) {
    fixture_smol();
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}]}";
    json_t *j = tokenize(body);
    srv_request r;
    srv_error err;
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_CHAT, body, strlen(body), &fx.mi, &r, &err), SP_OK);
    json_t *tokens = json_object_get(j, "tokens");
    cr_assert_eq(json_array_size(tokens), (size_t)r.prompt_lens[0]);
    for (int32_t i = 0; i < r.prompt_lens[0]; i++)
        cr_expect_eq(json_integer_value(json_array_get(tokens, (size_t)i)), r.prompts[0][i]);
    srv_request_free(&r);
    json_decref(j);
    fixture_close();
}

Test(srv_tokenize, errors) {
    fixture_smol();
    static const struct {
        const char *body;
        const char *param;
        int status;
    } cases[] = {
        {"{}", "content", 400},
        {"{\"content\":5}", "content", 400},
        {"{\"content\":\"x\",\"with_pieces\":1}", "with_pieces", 400},
        {"{\"content\":\"x\",\"add_special\":\"yes\"}", "add_special", 400},
        {"{\"messages\":[]}", "messages", 400},
        {"{\"content\":\"x\",\"model\":\"nope\"}", "model", 404},
        {"[]", "", 400},
        {"{", "", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_error err;
        json_t *j = srv_tokenize(cases[i].body, strlen(cases[i].body), &fx.mi, &err);
        cr_expect_null(j, "%s", cases[i].body);
        cr_expect_eq(err.http_status, cases[i].status, "%s: %d", cases[i].body, err.http_status);
        cr_expect_str_eq(err.param, cases[i].param, "%s", cases[i].body);
        json_decref(j);
    }
    fixture_close();
}

Test(srv_detokenize, round_trip_and_errors) {
    fixture_smol();
    const char *text = "<|im_start|>user\nHello, wörld!";
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(fx.vocab, text, strlen(text), false, true, &ids, &n), SP_OK);
    char body[1024];
    size_t o = (size_t)snprintf(body, sizeof body, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) o += (size_t)snprintf(body + o, sizeof body - o, "%s%d", i ? "," : "", ids[i]);
    snprintf(body + o, sizeof body - o, "]}");
    free(ids);
    srv_error err;
    json_t *j = srv_detokenize(body, strlen(body), &fx.mi, &err);
    cr_assert_not_null(j, "%s", err.message);
    cr_expect_str_eq(json_string_value(json_object_get(j, "content")), text, "special tokens rendered");
    cr_expect_str_eq(json_string_value(json_object_get(j, "prompt")), text);
    json_decref(j);

    j = srv_detokenize("{\"tokens\":[]}", 13, &fx.mi, &err);
    cr_assert_not_null(j);
    cr_expect_str_eq(json_string_value(json_object_get(j, "content")), "");
    json_decref(j);

    static const struct {
        const char *body;
        const char *param;
    } cases[] = {
        {"{}", "tokens"},
        {"{\"tokens\":\"abc\"}", "tokens"},
        {"{\"tokens\":[1,49152]}", "tokens[1]"},
        {"{\"tokens\":[-1]}", "tokens[0]"},
        {"{\"tokens\":[1,\"2\"]}", "tokens[1]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        j = srv_detokenize(cases[i].body, strlen(cases[i].body), &fx.mi, &err);
        cr_expect_null(j, "%s", cases[i].body);
        cr_expect_eq(err.http_status, 400, "%s", cases[i].body);
        cr_expect_str_eq(err.param, cases[i].param, "%s", cases[i].body);
        json_decref(j);
    }
    fixture_close();
}

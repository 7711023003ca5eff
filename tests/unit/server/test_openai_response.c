/* test_openai_response.c: the JSON the API layer sends, parsed back and checked key by
 * key against what OpenAI's SDK reads: chat.completion and text_completion bodies
 * (usage, timings, both logprobs forms), SSE chunks (role, deltas, the last chunk, the
 * usage chunk), token texts that are not UTF-8, /v1/models, ids and finish reasons.
 */
#include <criterion/criterion.h>
#include <math.h>

#include "tests/unit/server/openai_fixture.h"

static void parse_req(srv_endpoint ep, const char *body, srv_request *r) {
    srv_error err;
    cr_assert_eq(srv_request_parse(ep, body, strlen(body), &fx.mi, r, &err), SP_OK, "%s: %s", body, err.message);
}

/* A finished output: text, the tokens that spell it (alternatives per token: the
 * token itself and the next ids), usage and timings. Free with free_output. */
static sched_output make_output(const char *text, int top, sched_finish finish) {
    sched_output o = {0};
    o.text = strdup(text);
    o.text_len = strlen(text);
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(fx.vocab, text, strlen(text), false, false, &ids, &n), SP_OK);
    o.n_tokens = (int32_t)n;
    o.tokens = calloc(n + 1, sizeof *o.tokens);
    o.top = calloc(n * (size_t)top + 1, sizeof *o.top);
    o.top_logprobs = top;
    for (size_t i = 0; i < n; i++) {
        o.tokens[i] = (sched_token){.id = ids[i], .logprob = -0.25f * (float)(i + 1)};
        for (int k = 0; k < top; k++)
            o.top[i * (size_t)top + k] = (sched_token){.id = ids[i] + k, .logprob = -0.5f * (float)(k + 1)};
    }
    free(ids);
    o.prompt_tokens = 10;
    o.cached_tokens = 2;
    o.completion_tokens = (int32_t)n + 1;
    o.done = true;
    o.finish = finish;
    o.timings.prefill_s = 0.5;
    o.timings.decode_s = 1.0;
    return o;
}

static void free_output(sched_output *o) {
    free(o->text);
    free(o->tokens);
    free(o->top);
}

static json_t *obj(const json_t *j, const char *key) {
    json_t *v = json_object_get(j, key);
    cr_assert_not_null(v, "missing key %s", key);
    return v;
}

static const char *str(const json_t *j, const char *key) {
    json_t *v = obj(j, key);
    cr_assert(json_is_string(v), "%s is not a string", key);
    return json_string_value(v);
}

static json_int_t num(const json_t *j, const char *key) {
    json_t *v = obj(j, key);
    cr_assert(json_is_integer(v), "%s is not an integer", key);
    return json_integer_value(v);
}

/* Dumps, checks the text parses back, and returns the parsed copy. */
static json_t *roundtrip(json_t *j) {
    cr_assert_not_null(j);
    char *text = json_dumps(j, JSON_COMPACT);
    cr_assert_not_null(text);
    json_decref(j);
    json_t *back = fixture_json(text, strlen(text));
    free(text);
    return back;
}

/* The JSON of an SSE event, checking "data: " ... "\n\n". */
static json_t *sse_json(char *event) {
    cr_assert_not_null(event);
    size_t len = strlen(event);
    cr_assert_eq(strncmp(event, "data: ", 6), 0, "%s", event);
    cr_assert(len > 8 && strcmp(event + len - 2, "\n\n") == 0, "%s", event);
    cr_assert_null(memchr(event, '\n', len - 2), "one line: %s", event);
    json_t *j = fixture_json(event + 6, len - 8);
    free(event);
    return j;
}

static void expect_envelope(const json_t *j, const char *object, const char *id) {
    cr_expect_str_eq(str(j, "id"), id);
    cr_expect_str_eq(str(j, "object"), object);
    cr_expect_eq(num(j, "created"), 1700000123);
    cr_expect_str_eq(str(j, "model"), "SmolLM2-135M-Instruct.Q4_1");
    cr_expect(json_is_null(obj(j, "system_fingerprint")));
}

Test(srv_response, chat_completion_shape) {
    fixture_smol();
    srv_request r;
    parse_req(SRV_ENDPOINT_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r);
    sched_output o = make_output("Hello world", 0, SCHED_FINISH_STOP);
    const sched_output *outs[] = {&o};
    json_t *j = roundtrip(srv_render_response(&r, &fx.mi, "chatcmpl-abc", 1700000123, outs, 1));
    expect_envelope(j, "chat.completion", "chatcmpl-abc");
    json_t *choices = obj(j, "choices");
    cr_assert_eq(json_array_size(choices), 1);
    json_t *c = json_array_get(choices, 0);
    cr_expect_eq(num(c, "index"), 0);
    json_t *msg = obj(c, "message");
    cr_expect_str_eq(str(msg, "role"), "assistant");
    cr_expect_str_eq(str(msg, "content"), "Hello world");
    cr_expect(json_is_null(obj(msg, "refusal")));
    cr_expect(json_is_null(obj(c, "logprobs")));
    cr_expect_str_eq(str(c, "finish_reason"), "stop");
    json_t *usage = obj(j, "usage");
    cr_expect_eq(num(usage, "prompt_tokens"), 10);
    cr_expect_eq(num(usage, "completion_tokens"), o.completion_tokens);
    cr_expect_eq(num(usage, "total_tokens"), 10 + o.completion_tokens);
    cr_expect_eq(num(obj(usage, "prompt_tokens_details"), "cached_tokens"), 2);
    json_t *t = obj(j, "timings");
    cr_expect_eq(num(t, "prompt_n"), 8);
    cr_expect_float_eq(json_number_value(obj(t, "prompt_ms")), 500.0, 1e-9);
    cr_expect_float_eq(json_number_value(obj(t, "prompt_per_token_ms")), 62.5, 1e-9);
    cr_expect_float_eq(json_number_value(obj(t, "prompt_per_second")), 16.0, 1e-9);
    cr_expect_eq(num(t, "predicted_n"), o.completion_tokens);
    cr_expect_float_eq(json_number_value(obj(t, "predicted_ms")), 1000.0, 1e-9);
    cr_expect_float_eq(json_number_value(obj(t, "predicted_per_token_ms")), 1000.0 / o.completion_tokens, 1e-9);
    cr_expect_float_eq(json_number_value(obj(t, "predicted_per_second")), (double)o.completion_tokens, 1e-9);
    json_decref(j);
    free_output(&o);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_response, chat_logprobs) {
    fixture_smol();
    srv_request r;
    parse_req(SRV_ENDPOINT_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,\"top_logprobs\":2}", &r);
    sched_output o = make_output("Hello world", 3, SCHED_FINISH_LENGTH);
    const sched_output *outs[] = {&o};
    json_t *j = roundtrip(srv_render_response(&r, &fx.mi, "chatcmpl-x", 1700000123, outs, 1));
    json_t *c = json_array_get(obj(j, "choices"), 0);
    cr_expect_str_eq(str(c, "finish_reason"), "length");
    json_t *lp = obj(c, "logprobs");
    cr_expect(json_is_null(obj(lp, "refusal")));
    json_t *content = obj(lp, "content");
    cr_assert_eq(json_array_size(content), (size_t)o.n_tokens);
    for (int32_t i = 0; i < o.n_tokens; i++) {
        json_t *e = json_array_get(content, (size_t)i);
        char piece[64];
        size_t n = tok_token_bytes(fx.vocab, o.tokens[i].id, true, piece, sizeof piece);
        cr_expect_eq(json_string_length(obj(e, "token")), n);
        cr_expect_eq(memcmp(json_string_value(obj(e, "token")), piece, n), 0);
        cr_expect_float_eq(json_number_value(obj(e, "logprob")), o.tokens[i].logprob, 1e-6);
        json_t *bytes = obj(e, "bytes");
        cr_assert_eq(json_array_size(bytes), n);
        for (size_t b = 0; b < n; b++)
            cr_expect_eq(json_integer_value(json_array_get(bytes, b)), (unsigned char)piece[b]);
        json_t *alts = obj(e, "top_logprobs");
        cr_assert_eq(json_array_size(alts), 2, "the request's 2 of the output's 3");
        for (size_t k = 0; k < 2; k++) {
            json_t *a = json_array_get(alts, k);
            cr_expect(json_is_string(obj(a, "token")) && json_is_array(obj(a, "bytes")));
            cr_expect_float_eq(json_number_value(obj(a, "logprob")), -0.5 * (double)(k + 1), 1e-6);
            cr_expect_eq(json_object_size(a), 3);
        }
    }
    json_decref(j);
    free_output(&o);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_response, completions_with_prompts_and_choices) {
    fixture_smol();
    srv_request r;
    parse_req(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"],\"n\":2,\"logprobs\":2}", &r);
    sched_output o[4];
    const sched_output *outs[4];
    for (int k = 0; k < 4; k++) {
        o[k] = make_output(k % 2 ? "Once upon" : "héllo wörld", 2, k == 3 ? SCHED_FINISH_LENGTH : SCHED_FINISH_STOP);
        o[k].prompt_tokens = 5 + k;
        o[k].cached_tokens = k;
        outs[k] = &o[k];
    }
    json_t *j = roundtrip(srv_render_response(&r, &fx.mi, "cmpl-1", 1700000123, outs, 4));
    expect_envelope(j, "text_completion", "cmpl-1");
    json_t *choices = obj(j, "choices");
    cr_assert_eq(json_array_size(choices), 4);
    for (int k = 0; k < 4; k++) {
        json_t *c = json_array_get(choices, (size_t)k);
        cr_expect_eq(num(c, "index"), k);
        cr_expect_str_eq(str(c, "text"), o[k].text);
        cr_expect_str_eq(str(c, "finish_reason"), k == 3 ? "length" : "stop");
        cr_expect_null(json_object_get(c, "message"));
        json_t *lp = obj(c, "logprobs");
        json_t *tokens = obj(lp, "tokens"), *lps = obj(lp, "token_logprobs"), *tops = obj(lp, "top_logprobs"),
               *offs = obj(lp, "text_offset");
        cr_assert_eq(json_array_size(tokens), (size_t)o[k].n_tokens);
        cr_assert_eq(json_array_size(lps), (size_t)o[k].n_tokens);
        cr_assert_eq(json_array_size(tops), (size_t)o[k].n_tokens);
        cr_assert_eq(json_array_size(offs), (size_t)o[k].n_tokens);
        /* the token texts spell the text; the offsets count characters */
        char joined[64] = "";
        json_int_t chars = 0;
        for (size_t i = 0; i < json_array_size(tokens); i++) {
            cr_expect_eq(json_integer_value(json_array_get(offs, i)), chars);
            const char *t = json_string_value(json_array_get(tokens, i));
            strcat(joined, t);
            for (const char *p = t; *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
            cr_expect_float_eq(json_number_value(json_array_get(lps, i)), o[k].tokens[i].logprob, 1e-6);
            json_t *alt = json_array_get(tops, i);
            cr_expect(json_is_object(alt) && json_object_size(alt) >= 1 && json_object_size(alt) <= 2);
        }
        cr_expect_str_eq(joined, o[k].text);
    }
    json_t *usage = obj(j, "usage");
    cr_expect_eq(num(usage, "prompt_tokens"), 5 + 7, "each prompt counted once");
    cr_expect_eq(num(obj(usage, "prompt_tokens_details"), "cached_tokens"), 0 + 2);
    json_int_t completion = 0;
    for (int k = 0; k < 4; k++) completion += o[k].completion_tokens;
    cr_expect_eq(num(usage, "completion_tokens"), completion);
    cr_expect_eq(num(usage, "total_tokens"), 12 + completion);
    json_decref(j);
    for (int k = 0; k < 4; k++) free_output(&o[k]);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_response, token_text_not_utf8) {
    fixture_smol();
    srv_request r;
    parse_req(SRV_ENDPOINT_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true}", &r);
    sched_output o = make_output("x", 0, SCHED_FINISH_STOP);
    /* one byte of a three-byte character: GPT-2's byte tokens cover every byte */
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(fx.vocab, "\xe2", 1, false, false, &ids, &n), SP_OK);
    cr_assert_eq(n, 1);
    o.tokens[0].id = ids[0];
    free(ids);
    /* the text itself: a NUL and a stray byte */
    free(o.text);
    o.text = malloc(4);
    memcpy(o.text, "a\0b\xff", 4);
    o.text_len = 4;
    const sched_output *outs[] = {&o};
    json_t *j = roundtrip(srv_render_response(&r, &fx.mi, "chatcmpl-x", 1700000123, outs, 1));
    json_t *c = json_array_get(obj(j, "choices"), 0);
    json_t *content = obj(obj(c, "message"), "content");
    cr_assert_eq(json_string_length(content), 6, "NUL kept, the stray byte as U+FFFD");
    cr_expect_eq(memcmp(json_string_value(content), "a\0b\xef\xbf\xbd", 6), 0);
    json_t *e = json_array_get(obj(obj(c, "logprobs"), "content"), 0);
    cr_expect_str_eq(str(e, "token"), "bytes:\\xe2");
    cr_assert_eq(json_array_size(obj(e, "bytes")), 1);
    cr_expect_eq(json_integer_value(json_array_get(obj(e, "bytes"), 0)), 0xe2);
    cr_expect_eq(json_array_size(obj(e, "top_logprobs")), 0);
    json_decref(j);
    free_output(&o);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_response, chat_stream_chunks) {
    fixture_smol();
    srv_request r;
    parse_req(SRV_ENDPOINT_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,\"stream_options\":{"
              "\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":1}",
              &r);
    json_t *j = sse_json(srv_sse_role_chunk(&r, &fx.mi, "chatcmpl-s", 1700000123, 1));
    expect_envelope(j, "chat.completion.chunk", "chatcmpl-s");
    cr_expect(json_is_null(obj(j, "usage")), "include_usage: usage null on every chunk but the last");
    json_t *c = json_array_get(obj(j, "choices"), 0);
    cr_expect_eq(num(c, "index"), 1);
    cr_expect_str_eq(str(obj(c, "delta"), "role"), "assistant");
    cr_expect_str_eq(str(obj(c, "delta"), "content"), "");
    cr_expect(json_is_null(obj(c, "logprobs")) && json_is_null(obj(c, "finish_reason")));
    json_decref(j);

    sched_output o = make_output("Hello", 1, SCHED_FINISH_STOP);
    j = sse_json(
        srv_sse_delta_chunk(&r, &fx.mi, "chatcmpl-s", 1700000123, 0, "Hel", 3, o.tokens, o.n_tokens, o.top, 1, NULL));
    c = json_array_get(obj(j, "choices"), 0);
    cr_expect_str_eq(str(obj(c, "delta"), "content"), "Hel");
    cr_expect_null(json_object_get(obj(c, "delta"), "role"));
    cr_expect(json_is_null(obj(c, "finish_reason")));
    json_t *lp = obj(obj(c, "logprobs"), "content");
    cr_expect_eq(json_array_size(lp), (size_t)o.n_tokens);
    cr_expect_eq(json_array_size(obj(json_array_get(lp, 0), "top_logprobs")), 1);
    json_decref(j);

    /* the last chunk: empty delta beside finish_reason */
    j = sse_json(srv_sse_delta_chunk(&r, &fx.mi, "chatcmpl-s", 1700000123, 0, "", 0, NULL, 0, NULL, 0, "stop"));
    c = json_array_get(obj(j, "choices"), 0);
    cr_expect_eq(json_object_size(obj(c, "delta")), 0);
    cr_expect_str_eq(str(c, "finish_reason"), "stop");
    cr_expect(json_is_null(obj(c, "logprobs")));
    json_decref(j);
    /* text in the last chunk stays */
    j = sse_json(srv_sse_delta_chunk(&r, &fx.mi, "chatcmpl-s", 1700000123, 0, "!", 1, NULL, 0, NULL, 0, "length"));
    c = json_array_get(obj(j, "choices"), 0);
    cr_expect_str_eq(str(obj(c, "delta"), "content"), "!");
    cr_expect_str_eq(str(c, "finish_reason"), "length");
    json_decref(j);

    const sched_output *outs[] = {&o};
    j = sse_json(srv_sse_usage_chunk(&r, &fx.mi, "chatcmpl-s", 1700000123, outs, 1));
    expect_envelope(j, "chat.completion.chunk", "chatcmpl-s");
    cr_expect_eq(json_array_size(obj(j, "choices")), 0);
    cr_expect(json_is_array(obj(j, "choices")));
    cr_expect_eq(num(obj(j, "usage"), "prompt_tokens"), 10);
    cr_expect_eq(num(obj(j, "usage"), "total_tokens"), 10 + o.completion_tokens);
    json_decref(j);
    cr_expect_str_eq(SRV_SSE_DONE, "data: [DONE]\n\n");
    free_output(&o);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_response, completions_stream_chunks) {
    fixture_smol();
    srv_request r;
    parse_req(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\",\"stream\":true,\"logprobs\":1}", &r);
    sched_output o = make_output("Once", 1, SCHED_FINISH_STOP);
    json_t *j = sse_json(
        srv_sse_delta_chunk(&r, &fx.mi, "cmpl-s", 1700000123, 2, "Once", 4, o.tokens, o.n_tokens, o.top, 1, "stop"));
    expect_envelope(j, "text_completion", "cmpl-s");
    cr_expect_null(json_object_get(j, "usage"), "no usage key without include_usage");
    json_t *c = json_array_get(obj(j, "choices"), 0);
    cr_expect_eq(num(c, "index"), 2);
    cr_expect_str_eq(str(c, "text"), "Once");
    cr_expect_str_eq(str(c, "finish_reason"), "stop");
    cr_expect_null(json_object_get(c, "delta"));
    json_t *lp = obj(c, "logprobs");
    cr_expect_eq(json_array_size(obj(lp, "tokens")), (size_t)o.n_tokens);
    cr_expect_eq(json_array_size(obj(lp, "token_logprobs")), (size_t)o.n_tokens);
    cr_expect_eq(json_array_size(obj(lp, "top_logprobs")), (size_t)o.n_tokens);
    json_decref(j);
    free_output(&o);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_response, models_list) {
    fixture_smol();
    json_t *j = roundtrip(srv_render_models(&fx.mi));
    cr_expect_str_eq(str(j, "object"), "list");
    json_t *data = obj(j, "data");
    cr_assert_eq(json_array_size(data), 1);
    json_t *m = json_array_get(data, 0);
    cr_expect_str_eq(str(m, "id"), "SmolLM2-135M-Instruct.Q4_1");
    cr_expect_str_eq(str(m, "object"), "model");
    cr_expect_eq(num(m, "created"), 1700000000);
    cr_expect_str_eq(str(m, "owned_by"), "spindle");
    cr_expect_eq(num(m, "max_model_len"), 2048);
    json_decref(j);
    fixture_close();
}

Test(srv_response, ids_and_finish_reasons) {
    char a[40], b[40];
    srv_response_id(SRV_ENDPOINT_CHAT, a, sizeof a);
    srv_response_id(SRV_ENDPOINT_CHAT, b, sizeof b);
    cr_expect_eq(strncmp(a, "chatcmpl-", 9), 0, "%s", a);
    cr_expect_eq(strlen(a), 9 + 24);
    cr_expect_str_neq(a, b);
    srv_response_id(SRV_ENDPOINT_COMPLETIONS, a, sizeof a);
    cr_expect_eq(strncmp(a, "cmpl-", 5), 0, "%s", a);
    char small[12];
    srv_response_id(SRV_ENDPOINT_CHAT, small, sizeof small);
    cr_expect_eq(strlen(small), sizeof small - 1, "cut to the buffer");
    cr_expect_str_eq(srv_finish_reason(SCHED_FINISH_STOP), "stop");
    cr_expect_str_eq(srv_finish_reason(SCHED_FINISH_LENGTH), "length");
    cr_expect_str_eq(srv_finish_reason(SCHED_FINISH_CANCELLED), "abort");
    cr_expect_null(srv_finish_reason(SCHED_FINISH_NONE));
}

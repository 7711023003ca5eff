/* test_openai.c: request parsing and validation (srv_request_parse) and the error
 * objects (errors.c), on the default model's vocab and template.
 *
 *   srv_request   every known field's wrong type and out-of-range value is a 400 naming
 *                 it (one table); null is absent; unknown fields are ignored; the model
 *                 name; max_tokens defaults and context_length_exceeded; completions
 *                 prompt forms; logit_bias, stop, logprobs, seeds and choice params
 *   srv_errors    the status table, srv_error_from_status, the JSON shape
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "tests/unit/server/openai_fixture.h"

#define CHAT_HI "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static sp_status parse(srv_endpoint ep, const char *body, srv_request *r, srv_error *err) {
    return srv_request_parse(ep, body, strlen(body), &fx.mi, r, err);
}

static void parse_ok(srv_endpoint ep, const char *body, srv_request *r) {
    srv_error err;
    sp_status st = parse(ep, body, r, &err);
    cr_assert_eq(st, SP_OK, "%s: %d %s (param %s)", body, err.http_status, err.message, err.param);
}

/* ---- one table: a bad field is a 400 naming it ---- */

typedef struct bad_case {
    srv_endpoint ep;
    const char *body;
    const char *param;
    int status;
} bad_case;

#define CHAT(fields) "{" CHAT_HI "," fields "}"
#define CMPL(fields) "{\"prompt\":\"hi\"," fields "}"
#define C            SRV_ENDPOINT_CHAT
#define P            SRV_ENDPOINT_COMPLETIONS

static const bad_case BAD_CASES[] = {
    {C, CHAT("\"temperature\":\"hot\""), "temperature", 400},
    {C, CHAT("\"temperature\":2.5"), "temperature", 400},
    {C, CHAT("\"temperature\":-0.1"), "temperature", 400},
    {C, CHAT("\"temperature\":true"), "temperature", 400},
    {C, CHAT("\"top_p\":0"), "top_p", 400},
    {C, CHAT("\"top_p\":1.01"), "top_p", 400},
    {C, CHAT("\"top_p\":[]"), "top_p", 400},
    {C, CHAT("\"top_k\":-2"), "top_k", 400},
    {C, CHAT("\"top_k\":1.5"), "top_k", 400},
    {C, CHAT("\"top_k\":\"5\""), "top_k", 400},
    {C, CHAT("\"min_p\":1.5"), "min_p", 400},
    {C, CHAT("\"min_p\":-0.5"), "min_p", 400},
    {C, CHAT("\"presence_penalty\":2.5"), "presence_penalty", 400},
    {C, CHAT("\"presence_penalty\":-3"), "presence_penalty", 400},
    {C, CHAT("\"presence_penalty\":{}"), "presence_penalty", 400},
    {C, CHAT("\"frequency_penalty\":2.01"), "frequency_penalty", 400},
    {C, CHAT("\"frequency_penalty\":\"0\""), "frequency_penalty", 400},
    {C, CHAT("\"repetition_penalty\":0"), "repetition_penalty", 400},
    {C, CHAT("\"repetition_penalty\":2.5"), "repetition_penalty", 400},
    {C, CHAT("\"seed\":\"42\""), "seed", 400},
    {C, CHAT("\"seed\":1.5"), "seed", 400},
    {C, CHAT("\"seed\":1e30"), "seed", 400},
    {C, CHAT("\"stop\":5"), "stop", 400},
    {C, CHAT("\"stop\":[1]"), "stop[0]", 400},
    {C, CHAT("\"stop\":[\"\"]"), "stop", 400},
    {C, CHAT("\"stop\":\"\""), "stop", 400},
    {C,
     CHAT("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\","
          "\"q\"]"),
     "stop", 400},
    {C, CHAT("\"cache_salt\":\"\""), "cache_salt", 400},
    {C, CHAT("\"cache_salt\":5"), "cache_salt", 400},
    {P, CMPL("\"cache_salt\":[\"a\"]"), "cache_salt", 400},
    {C, CHAT("\"n\":0"), "n", 400},
    {C, CHAT("\"n\":17"), "n", 400},
    {C, CHAT("\"n\":\"2\""), "n", 400},
    {C, CHAT("\"logprobs\":\"yes\""), "logprobs", 400},
    {C, CHAT("\"logprobs\":1"), "logprobs", 400},
    {C, CHAT("\"logprobs\":true,\"top_logprobs\":21"), "top_logprobs", 400},
    {C, CHAT("\"logprobs\":true,\"top_logprobs\":-1"), "top_logprobs", 400},
    {C, CHAT("\"top_logprobs\":3"), "top_logprobs", 400},
    {C, CHAT("\"logprobs\":false,\"top_logprobs\":3"), "top_logprobs", 400},
    {C, CHAT("\"logit_bias\":[]"), "logit_bias", 400},
    {C, CHAT("\"logit_bias\":{\"abc\":1}"), "logit_bias", 400},
    {C, CHAT("\"logit_bias\":{\"-1\":1}"), "logit_bias", 400},
    {C, CHAT("\"logit_bias\":{\"1\":101}"), "logit_bias", 400},
    {C, CHAT("\"logit_bias\":{\"1\":-100.5}"), "logit_bias", 400},
    {C, CHAT("\"logit_bias\":{\"49152\":1}"), "logit_bias", 400},
    {C, CHAT("\"logit_bias\":{\"1\":\"x\"}"), "logit_bias", 400},
    {C, CHAT("\"stream\":\"true\""), "stream", 400},
    {C, CHAT("\"stream_options\":{\"include_usage\":true}"), "stream_options", 400},
    {C, CHAT("\"stream\":false,\"stream_options\":{\"include_usage\":true}"), "stream_options", 400},
    {C, CHAT("\"stream\":true,\"stream_options\":5"), "stream_options", 400},
    {C, CHAT("\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}"), "stream_options.include_usage", 400},
    {C, CHAT("\"ignore_eos\":1"), "ignore_eos", 400},
    {C, CHAT("\"min_tokens\":-1"), "min_tokens", 400},
    {C, CHAT("\"min_tokens\":10,\"max_tokens\":5"), "min_tokens", 400},
    {C, CHAT("\"priority\":\"high\""), "priority", 400},
    {C, CHAT("\"priority\":1e12"), "priority", 400},
    {C, CHAT("\"user\":5"), "user", 400},
    {C, CHAT("\"chat_template_kwargs\":[]"), "chat_template_kwargs", 400},
    {C, CHAT("\"tools\":{}"), "tools", 400},
    {C, CHAT("\"timeout\":0"), "timeout", 400},
    {C, CHAT("\"timeout\":-1"), "timeout", 400},
    {C, CHAT("\"timeout\":\"10\""), "timeout", 400},
    {C, CHAT("\"max_tokens\":0"), "max_tokens", 400},
    {C, CHAT("\"max_tokens\":\"5\""), "max_tokens", 400},
    {C, CHAT("\"max_tokens\":1.5"), "max_tokens", 400},
    {C, CHAT("\"max_completion_tokens\":0"), "max_completion_tokens", 400},
    {C, CHAT("\"max_completion_tokens\":false"), "max_completion_tokens", 400},
    {C, CHAT("\"model\":5"), "model", 400},
    {C, CHAT("\"model\":\"gpt-4o\""), "model", 404},
    {C, "{}", "messages", 400},
    {C, "{\"messages\":[]}", "messages", 400},
    {C, "{\"messages\":\"hi\"}", "messages", 400},
    {C, "{\"messages\":[5]}", "messages[0]", 400},
    {C, "{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role", 400},
    {C, "{\"messages\":[{\"role\":\"robot\",\"content\":\"hi\"}]}", "messages[0].role", 400},
    {C, "{\"messages\":[{\"role\":5,\"content\":\"hi\"}]}", "messages[0].role", 400},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content", 400},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content", 400},
    {C, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", 400},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":[]}]}", "messages[0].content", 400},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":[\"hi\"]}]}", "messages[0].content[0]", 400},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"hi\"}]}]}", "messages[0].content[0].type", 400},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", "messages[0].content[0].text", 400},
    {C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":7}]}]}",
     "messages[0].content[0].text", 400},
    {C,
     "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
     "\"text\":\"a\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/y.png\"}}]}]}",
     "messages[1].content[1].type", 400},
    {P, "{}", "prompt", 400},
    {P, "{\"prompt\":5}", "prompt", 400},
    {P, "{\"prompt\":[]}", "prompt", 400},
    {P, "{\"prompt\":\"\"}", "prompt", 400},
    {P, "{\"prompt\":[[1,2],\"x\"]}", "prompt[1]", 400},
    {P, "{\"prompt\":[\"x\",[1]]}", "prompt[1]", 400},
    {P, "{\"prompt\":[1,49152]}", "prompt[1]", 400},
    {P, "{\"prompt\":[1,\"a\"]}", "prompt[1]", 400},
    {P, "{\"prompt\":[[1,-1]]}", "prompt[0][1]", 400},
    {P, "{\"prompt\":[[]]}", "prompt[0]", 400},
    {P, "{\"prompt\":[true]}", "prompt[0]", 400},
    {P, CMPL("\"logprobs\":6"), "logprobs", 400},
    {P, CMPL("\"logprobs\":true"), "logprobs", 400},
    {P, CMPL("\"logprobs\":-1"), "logprobs", 400},
    {P, CMPL("\"max_tokens\":-5"), "max_tokens", 400},
    {P, CMPL("\"temperature\":9"), "temperature", 400},
    {P, CMPL("\"model\":\"other\""), "model", 404},
    /* the refused fields (server/api/openai_refused.c): a 400 naming each, never ignored */
    {C, CHAT("\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}"), "audio", 400},
    {C, CHAT("\"modalities\":[\"text\",\"audio\"]"), "modalities", 400},
    {C, CHAT("\"web_search_options\":{}"), "web_search_options", 400},
    {C, CHAT("\"functions\":[{\"name\":\"f\"}]"), "functions", 400},
    {C, CHAT("\"function_call\":\"auto\""), "function_call", 400},
    {C, CHAT("\"verbosity\":\"low\""), "verbosity", 400},
    {C, CHAT("\"structured_outputs\":{\"regex\":\"a+\"}"), "structured_outputs", 400},
    {P, CMPL("\"truncate_prompt_tokens\":5"), "truncate_prompt_tokens", 400},
    {P, CMPL("\"use_beam_search\":true"), "use_beam_search", 400},
    {P, CMPL("\"length_penalty\":0.5"), "length_penalty", 400},
    {C, CHAT("\"include_stop_str_in_output\":true"), "include_stop_str_in_output", 400},
    {C, CHAT("\"skip_special_tokens\":false"), "skip_special_tokens", 400},
    {P, CMPL("\"bad_words\":[\"x\"]"), "bad_words", 400},
    {P, CMPL("\"allowed_token_ids\":[1]"), "allowed_token_ids", 400},
    {P, CMPL("\"stop_token_ids\":[2]"), "stop_token_ids", 400},
    {P, CMPL("\"prompt_logprobs\":1"), "prompt_logprobs", 400},
    {P, CMPL("\"n_predict\":8"), "n_predict", 400},
    {P, CMPL("\"mirostat\":2"), "mirostat", 400},
    {P, CMPL("\"typical_p\":0.5"), "typical_p", 400},
    {C, CHAT("\"tfs_z\":\"0.9\""), "tfs_z", 400},
    {C, CHAT("\"dry_multiplier\":0.8"), "dry_multiplier", 400},
    {C, CHAT("\"xtc_probability\":0.5"), "xtc_probability", 400},
    {C, CHAT("\"top_n_sigma\":1"), "top_n_sigma", 400},
    {C, CHAT("\"dynatemp_range\":0.5"), "dynatemp_range", 400},
    {C, CHAT("\"n_probs\":3"), "n_probs", 400},
    {P, CMPL("\"echo\":true"), "echo", 400},
    {P, CMPL("\"best_of\":3"), "best_of", 400},
    {P, CMPL("\"suffix\":\"end\""), "suffix", 400},
};

#undef C
#undef P

/* Criterion runs each parameter in a fresh process of the (position-independent)
 * binary, so the parameters are indices into BAD_CASES, not pointers. */
enum { N_BAD_CASES = sizeof BAD_CASES / sizeof BAD_CASES[0] };
static int BAD_INDICES[N_BAD_CASES];

ParameterizedTestParameters(srv_request, bad_field_is_400_naming_it) {
    for (int i = 0; i < N_BAD_CASES; i++) BAD_INDICES[i] = i;
    return cr_make_param_array(int, BAD_INDICES, N_BAD_CASES);
}

ParameterizedTest(int *index, srv_request, bad_field_is_400_naming_it) {
    const bad_case *c = &BAD_CASES[*index];
    fixture_smol();
    srv_request r;
    srv_error err;
    sp_status st = parse(c->ep, c->body, &r, &err);
    cr_assert_neq(st, SP_OK, "accepted: %s", c->body);
    cr_log_info("%s -> %d %s: %s", c->body, err.http_status, err.param, err.message);
    cr_expect_eq(err.http_status, c->status, "%s: status %d (%s)", c->body, err.http_status, err.message);
    cr_expect_str_eq(err.param, c->param, "%s: param '%s' (%s)", c->body, err.param, err.message);
    cr_expect_str_eq(err.type, "invalid_request_error", "%s", c->body);
    /* the message names the field (a top-level one; nested ones name the path) */
    char top[64];
    snprintf(top, sizeof top, "%.*s", (int)strcspn(c->param, "[."), c->param);
    cr_expect(strstr(err.message, top), "%s: message '%s' does not name %s", c->body, err.message, top);
    cr_expect_eq(r.prompts, NULL, "a failed parse leaves nothing to free");
    fixture_close();
}

/* ---- the body ---- */

Test(srv_request, body_not_json_names_line_and_column) {
    fixture_smol();
    srv_request r;
    srv_error err;
    const char *body = "{\"messages\":\n [}";
    cr_assert_eq(parse(SRV_ENDPOINT_CHAT, body, &r, &err), SP_ERR_INVALID_ARG);
    cr_expect_eq(err.http_status, 400);
    cr_expect(strstr(err.message, "line 2, column"), "%s", err.message);
    cr_expect_str_eq(err.param, "");
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_CHAT, "", 0, &fx.mi, &r, &err), SP_ERR_INVALID_ARG);
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_CHAT, NULL, 0, &fx.mi, &r, &err), SP_ERR_INVALID_ARG);
    /* len bytes only: what follows is not read */
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\"}garbage", 15, &fx.mi, &r, &err), SP_OK,
                 "%s", err.message);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, body_not_an_object) {
    fixture_smol();
    srv_request r;
    srv_error err;
    const char *bodies[] = {"[1]", "\"hi\"", "3", "null"};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(parse(SRV_ENDPOINT_CHAT, bodies[i], &r, &err), SP_ERR_INVALID_ARG, "%s", bodies[i]);
        cr_expect_eq(err.http_status, 400);
        cr_expect(strstr(err.message, "JSON object"), "%s", err.message);
    }
    fixture_close();
}

/* ---- defaults, null and unknown fields ---- */

Test(srv_request, defaults_follow_openai) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI "}", &r);
    cr_expect_eq(r.endpoint, SRV_ENDPOINT_CHAT);
    cr_expect_eq(r.n, 1);
    cr_expect_eq(r.n_prompts, 1);
    cr_expect_not(r.stream);
    cr_expect_not(r.include_usage);
    cr_expect_not(r.logprobs);
    cr_expect_eq(r.params.top_logprobs, -1);
    cr_expect_eq(r.params.sampling.temperature, 1.0f);
    cr_expect_eq(r.params.sampling.top_p, 1.0f);
    cr_expect_eq(r.params.sampling.top_k, 0);
    cr_expect_eq(r.params.sampling.min_p, 0.0f);
    cr_expect_eq(r.params.sampling.presence_penalty, 0.0f);
    cr_expect_eq(r.params.sampling.frequency_penalty, 0.0f);
    cr_expect_eq(r.params.sampling.repetition_penalty, 1.0f);
    cr_expect_eq(r.params.sampling.n_logit_bias, 0);
    cr_expect_eq(r.params.n_stop, 0);
    cr_expect_eq(r.params.min_tokens, 0);
    cr_expect_not(r.params.ignore_eos);
    cr_expect_eq(r.params.timeout_s, 0.0);
    cr_expect_not(r.seed_given);
    /* max_tokens: what the context leaves after the prompt */
    cr_expect_gt(r.prompt_lens[0], 0);
    cr_expect_eq(r.max_tokens[0], 2048 - r.prompt_lens[0]);
    cr_expect_eq(r.params.max_tokens, r.max_tokens[0]);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, null_means_absent) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT,
             "{" CHAT_HI ",\"model\":null,\"temperature\":null,\"top_p\":null,\"top_k\":null,\"min_p\":null,"
             "\"presence_penalty\":null,\"frequency_penalty\":null,\"repetition_penalty\":null,\"seed\":null,"
             "\"stop\":null,\"n\":null,\"logprobs\":null,\"top_logprobs\":null,\"logit_bias\":null,\"stream\":null,"
             "\"stream_options\":null,\"ignore_eos\":null,\"min_tokens\":null,\"priority\":null,\"user\":null,"
             "\"chat_template_kwargs\":null,\"tools\":null,\"timeout\":null,\"max_tokens\":null,"
             "\"max_completion_tokens\":null}",
             &r);
    cr_expect_eq(r.n, 1);
    cr_expect_eq(r.params.sampling.temperature, 1.0f);
    cr_expect_eq(r.max_tokens[0], 2048 - r.prompt_lens[0]);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\",\"logprobs\":null,\"echo\":null}", &r);
    cr_expect_not(r.logprobs);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, unknown_fields_are_ignored) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT,
             "{" CHAT_HI ",\"response_format\":{\"type\":\"text\"},\"tool_choice\":\"auto\",\"parallel_tool_calls\":"
             "true,\"metadata\":{\"a\":[1,2]},\"store\":false,\"x-anything\":[null]}",
             &r);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\",\"echo\":false,\"best_of\":1,\"suffix\":null}", &r);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, cache_salt_is_kept_for_the_scheduler) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"cache_salt\":\"user-\\u00001\"}", &r);
    cr_assert_eq(r.params.cache_salt_len, 7, "its bytes, NUL included");
    cr_assert_eq(memcmp(r.params.cache_salt,
                        "user-\0"
                        "1",
                        7),
                 0);
    sched_request_params p = srv_request_choice_params(&r, 0, 0);
    cr_assert_eq(p.cache_salt, r.params.cache_salt);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\",\"cache_salt\":null}", &r);
    cr_assert_eq(r.params.cache_salt_len, 0, "null: none");
    srv_request_free(&r);
    /* the longest allowed, and one byte more */
    char body[2 * SCHED_MAX_CACHE_SALT_BYTES];
    int n = snprintf(body, sizeof body, "{\"prompt\":\"hi\",\"cache_salt\":\"%0*d\"}", SCHED_MAX_CACHE_SALT_BYTES, 0);
    cr_assert_lt(n, (int)sizeof body);
    parse_ok(SRV_ENDPOINT_COMPLETIONS, body, &r);
    srv_request_free(&r);
    snprintf(body, sizeof body, "{\"prompt\":\"hi\",\"cache_salt\":\"%0*d\"}", SCHED_MAX_CACHE_SALT_BYTES + 1, 0);
    srv_error err;
    cr_assert_eq(parse(SRV_ENDPOINT_COMPLETIONS, body, &r, &err), SP_ERR_INVALID_ARG);
    cr_assert_str_eq(err.param, "cache_salt");
    fixture_close();
}

/* The refused fields' neutral values change nothing, so they pass (clients send them). */
Test(srv_request, refused_fields_accept_their_neutral_values) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT,
             "{" CHAT_HI ",\"modalities\":[\"text\"],\"audio\":null,\"use_beam_search\":false,\"length_penalty\":1,"
             "\"include_stop_str_in_output\":false,\"skip_special_tokens\":true,\"spaces_between_special_tokens\":true,"
             "\"n_probs\":0,\"mirostat\":0,\"typical_p\":1,\"tfs_z\":1.0,\"top_n_sigma\":-1,\"dynatemp_range\":0,"
             "\"dry_multiplier\":0,\"xtc_probability\":0,\"prediction\":{\"type\":\"content\",\"content\":\"x\"},"
             "\"service_tier\":\"auto\",\"cache_prompt\":true,\"verbosity\":\"medium\",\"bad_words\":[],"
             "\"stop_token_ids\":[],\"n_predict\":-1}",
             &r);
    srv_request_free(&r);
    /* the chat-only ones are unknown (ignored) on completions */
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\",\"functions\":[1],\"modalities\":[\"audio\"]}", &r);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, every_field_in_range_is_stored) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT,
             "{" CHAT_HI ",\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"presence_penalty\":-2,"
             "\"frequency_penalty\":2,\"repetition_penalty\":1.1,\"seed\":42,\"n\":3,\"logprobs\":true,"
             "\"top_logprobs\":5,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true,"
             "\"min_tokens\":2,\"max_tokens\":10,\"priority\":-3,\"user\":\"u\",\"timeout\":1.5}",
             &r);
    cr_expect_float_eq(r.params.sampling.temperature, 0.7f, 1e-6);
    cr_expect_float_eq(r.params.sampling.top_p, 0.9f, 1e-6);
    cr_expect_eq(r.params.sampling.top_k, 40);
    cr_expect_float_eq(r.params.sampling.min_p, 0.05f, 1e-6);
    cr_expect_eq(r.params.sampling.presence_penalty, -2.0f);
    cr_expect_eq(r.params.sampling.frequency_penalty, 2.0f);
    cr_expect_float_eq(r.params.sampling.repetition_penalty, 1.1f, 1e-6);
    cr_expect(r.seed_given);
    cr_expect_eq(r.params.sampling.seed, 42u);
    cr_expect_eq(r.n, 3);
    cr_expect(r.logprobs);
    cr_expect_eq(r.top_logprobs, 5);
    cr_expect_eq(r.params.top_logprobs, 5);
    cr_expect(r.stream);
    cr_expect(r.include_usage);
    cr_expect(r.params.ignore_eos);
    cr_expect_eq(r.params.min_tokens, 2);
    cr_expect_eq(r.max_tokens[0], 10);
    cr_expect_eq(r.params.max_tokens, 10);
    cr_expect_eq(r.params.priority, -3);
    cr_expect_eq(r.params.timeout_s, 1.5);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, edge_values) {
    fixture_smol();
    srv_request r;
    /* top_k -1 is off; an integral real counts as an integer; the extreme seeds */
    parse_ok(SRV_ENDPOINT_CHAT,
             "{" CHAT_HI ",\"top_k\":-1,\"n\":2.0,\"seed\":-1,\"temperature\":0,\"top_p\":1,\"min_p\":1}", &r);
    cr_expect_eq(r.params.sampling.top_k, 0);
    cr_expect_eq(r.n, 2);
    cr_expect_eq(r.params.sampling.seed, UINT64_MAX);
    cr_expect_eq(srv_request_choice_params(&r, 0, 1).sampling.seed, 0u, "seed + choice wraps");
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"seed\":9223372036854775807,\"top_k\":0}", &r);
    cr_expect_eq(r.params.sampling.seed, (uint64_t)INT64_MAX);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"seed\":-9223372036854775808}", &r);
    cr_expect_eq(r.params.sampling.seed, (uint64_t)INT64_MIN);
    srv_request_free(&r);
    /* logprobs without alternatives; top_logprobs 0 without logprobs asks nothing */
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"logprobs\":true}", &r);
    cr_expect(r.logprobs);
    cr_expect_eq(r.params.top_logprobs, 0);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"top_logprobs\":0}", &r);
    cr_expect_not(r.logprobs);
    cr_expect_eq(r.params.top_logprobs, -1);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, max_completion_tokens_wins) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"max_tokens\":5,\"max_completion_tokens\":7}", &r);
    cr_expect_eq(r.params.max_tokens, 7);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"max_completion_tokens\":9}", &r);
    cr_expect_eq(r.params.max_tokens, 9);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, min_tokens_capped_by_a_default_max) {
    fixture_smol();
    fx.mi.max_seq_len = 40;
    srv_request r;
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"Hello there\",\"min_tokens\":100}", &r);
    sched_request_params p = srv_request_choice_params(&r, 0, 0);
    cr_expect_eq(p.max_tokens, 40 - r.prompt_lens[0]);
    cr_expect_eq(p.min_tokens, p.max_tokens);
    srv_request_free(&r);
    fixture_close();
}

/* ---- the model ---- */

Test(srv_request, model_name_matches_served_or_file_name) {
    fixture_smol();
    srv_request r;
    srv_error err;
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"model\":\"SmolLM2-135M-Instruct.Q4_1\"}", &r);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"model\":\"SmolLM2-135M-Instruct.Q4_1.gguf\"}", &r);
    srv_request_free(&r);
    cr_assert_eq(parse(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"model\":\"gpt-4o\"}", &r, &err), SP_ERR_NOT_FOUND);
    cr_expect_eq(err.http_status, 404);
    cr_expect_str_eq(err.code, "model_not_found");
    cr_expect_str_eq(err.type, "invalid_request_error");
    cr_expect(strstr(err.message, "gpt-4o") && strstr(err.message, "SmolLM2-135M-Instruct.Q4_1"), "%s", err.message);
    /* a prefix is not the name */
    cr_assert_eq(parse(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"model\":\"SmolLM2\"}", &r, &err), SP_ERR_NOT_FOUND);
    fixture_close();
}

/* ---- messages ---- */

Test(srv_request, chat_prompt_is_the_rendered_template) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT,
             "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hi\"}]}",
             &r);
    cr_expect_str_eq(
        r.prompt_text,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(fx.vocab, r.prompt_text, strlen(r.prompt_text), false, true, &ids, &n), SP_OK);
    cr_assert_eq((size_t)r.prompt_lens[0], n);
    cr_expect_eq(memcmp(ids, r.prompts[0], n * sizeof *ids), 0);
    cr_expect_eq(r.prompts[0][0], 1, "<|im_start|> parsed as the special token");
    free(ids);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, text_parts_joined_with_newline) {
    fixture_smol();
    cr_assert_not(fx.mi.template_takes_parts, "SmolLM2's template concatenates strings");
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"first\"},{\"type\":\"text\","
             "\"text\":\"second\"}]}]}",
             &r);
    cr_expect(strstr(r.prompt_text, "<|im_start|>user\nfirst\nsecond<|im_end|>"), "%s", r.prompt_text);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, every_role_accepted) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT,
             "{\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"system\",\"content\":\"s\"},"
             "{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
             "\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
             "\"content\":\"42\",\"tool_call_id\":\"c1\"}]}",
             &r);
    cr_expect(strstr(r.prompt_text, "<|im_start|>assistant\n<|im_end|>"), "null content renders as \"\": %s",
              r.prompt_text);
    cr_expect(strstr(r.prompt_text, "<|im_start|>tool\n42<|im_end|>"), "%s", r.prompt_text);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, context_length_exceeded) {
    fixture_smol();
    srv_request r;
    srv_error err;
    cr_assert_eq(parse(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"max_tokens\":2048}", &r, &err), SP_ERR_RANGE);
    cr_expect_eq(err.http_status, 400);
    cr_expect_str_eq(err.code, "context_length_exceeded");
    cr_expect_str_eq(err.param, "messages");
    cr_expect(strstr(err.message, "This model's maximum context length is 2048 tokens. However, you requested"), "%s",
              err.message);
    cr_expect(strstr(err.message, "2048 in the completion"), "%s", err.message);
    /* a huge max_tokens is the same error, not an overflow */
    cr_assert_eq(parse(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\",\"max_tokens\":9223372036854775807}", &r, &err),
                 SP_ERR_RANGE);
    cr_expect_str_eq(err.param, "prompt");
    cr_expect(strstr(err.message, "in your prompt"), "%s", err.message);
    /* the prompt alone fills the context: no default is left */
    fx.mi.max_seq_len = 8;
    cr_assert_eq(parse(SRV_ENDPOINT_CHAT, "{" CHAT_HI "}", &r, &err), SP_ERR_RANGE);
    cr_expect_str_eq(err.code, "context_length_exceeded");
    fx.mi.max_seq_len = 2048;
    /* exactly the context is fine */
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\"}", &r);
    int32_t p = r.prompt_lens[0];
    srv_request_free(&r);
    char body[64];
    snprintf(body, sizeof body, "{\"prompt\":\"hi\",\"max_tokens\":%d}", 2048 - p);
    parse_ok(SRV_ENDPOINT_COMPLETIONS, body, &r);
    srv_request_free(&r);
    snprintf(body, sizeof body, "{\"prompt\":\"hi\",\"max_tokens\":%d}", 2049 - p);
    cr_assert_eq(parse(SRV_ENDPOINT_COMPLETIONS, body, &r, &err), SP_ERR_RANGE);
    fixture_close();
}

/* ---- completions prompts ---- */

static void expect_encoded(const int32_t *got, int32_t n_got, const char *text) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(fx.vocab, text, strlen(text), tok_add_bos(fx.vocab), true, &ids, &n), SP_OK);
    cr_assert_eq((size_t)n_got, n, "%s", text);
    cr_expect_eq(memcmp(got, ids, n * sizeof *ids), 0, "%s", text);
    free(ids);
}

Test(srv_request, completions_prompt_forms) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"Once upon a time\"}", &r);
    cr_assert_eq(r.n_prompts, 1);
    cr_expect_null(r.prompt_text);
    expect_encoded(r.prompts[0], r.prompt_lens[0], "Once upon a time");
    srv_request_free(&r);

    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":[1,2,3,49151]}", &r);
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_eq(r.prompt_lens[0], 4);
    cr_expect(r.prompts[0][0] == 1 && r.prompts[0][1] == 2 && r.prompts[0][2] == 3 && r.prompts[0][3] == 49151);
    srv_request_free(&r);

    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":[\"Once\",\"upon a <|im_end|>\"],\"n\":2}", &r);
    cr_assert_eq(r.n_prompts, 2);
    expect_encoded(r.prompts[0], r.prompt_lens[0], "Once");
    expect_encoded(r.prompts[1], r.prompt_lens[1], "upon a <|im_end|>");
    cr_expect_eq(r.prompts[1][r.prompt_lens[1] - 1], 2, "special tokens parsed in completions prompts");
    cr_expect_eq(r.max_tokens[0], 2048 - r.prompt_lens[0]);
    cr_expect_eq(r.max_tokens[1], 2048 - r.prompt_lens[1]);
    sched_request_params p = srv_request_choice_params(&r, 1, 1);
    cr_expect_eq(p.prompt, r.prompts[1]);
    cr_expect_eq(p.n_prompt, r.prompt_lens[1]);
    cr_expect_eq(p.max_tokens, r.max_tokens[1]);
    srv_request_free(&r);

    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":[[5,6],[7],[8,9,10]]}", &r);
    cr_assert_eq(r.n_prompts, 3);
    cr_expect(r.prompt_lens[0] == 2 && r.prompt_lens[1] == 1 && r.prompt_lens[2] == 3);
    cr_expect(r.prompts[2][0] == 8 && r.prompts[2][2] == 10);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, completions_prompt_count_limit) {
    fixture_smol();
    char body[2048];
    size_t o = (size_t)snprintf(body, sizeof body, "{\"prompt\":[");
    for (int i = 0; i < SRV_MAX_PROMPTS + 1; i++)
        o += (size_t)snprintf(body + o, sizeof body - o, "%s\"x\"", i ? "," : "");
    snprintf(body + o, sizeof body - o, "]}");
    srv_request r;
    srv_error err;
    cr_assert_eq(parse(SRV_ENDPOINT_COMPLETIONS, body, &r, &err), SP_ERR_INVALID_ARG);
    cr_expect_str_eq(err.param, "prompt");
    cr_expect(strstr(err.message, "maximum length 64"), "%s", err.message);
    /* exactly the limit is fine */
    o = (size_t)snprintf(body, sizeof body, "{\"prompt\":[");
    for (int i = 0; i < SRV_MAX_PROMPTS; i++) o += (size_t)snprintf(body + o, sizeof body - o, "%s[1]", i ? "," : "");
    snprintf(body + o, sizeof body - o, "]}");
    parse_ok(SRV_ENDPOINT_COMPLETIONS, body, &r);
    cr_expect_eq(r.n_prompts, SRV_MAX_PROMPTS);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, completions_logprobs_is_a_count) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\",\"logprobs\":3}", &r);
    cr_expect(r.logprobs);
    cr_expect_eq(r.top_logprobs, 3);
    cr_expect_eq(r.params.top_logprobs, 3);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_COMPLETIONS, "{\"prompt\":\"hi\",\"logprobs\":0}", &r);
    cr_expect(r.logprobs);
    cr_expect_eq(r.params.top_logprobs, 0);
    srv_request_free(&r);
    fixture_close();
}

/* ---- logit_bias, stop, seeds ---- */

Test(srv_request, logit_bias_parsed) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"logit_bias\":{\"1\":5,\"20\":-100,\"49151\":100,\"7\":0.5}}", &r);
    cr_assert_eq(r.params.sampling.n_logit_bias, 4);
    cr_assert_eq(r.params.sampling.logit_bias, r.logit_bias);
    int found = 0;
    for (int i = 0; i < 4; i++) {
        sample_logit_bias b = r.logit_bias[i];
        found += (b.id == 1 && b.bias == 5.0f) + (b.id == 20 && b.bias == -100.0f) +
                 (b.id == 49151 && b.bias == 100.0f) + (b.id == 7 && b.bias == 0.5f);
    }
    cr_expect_eq(found, 4);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"logit_bias\":{}}", &r);
    cr_expect_eq(r.params.sampling.n_logit_bias, 0);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_request, stop_forms) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"stop\":\"\\n\\n\"}", &r);
    cr_assert_eq(r.params.n_stop, 1);
    cr_expect_str_eq(r.params.stop[0], "\n\n");
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"stop\":[\"END\",\"Ω\"]}", &r);
    cr_assert_eq(r.params.n_stop, 2);
    cr_expect_str_eq(r.params.stop[0], "END");
    cr_expect_str_eq(r.params.stop[1], "Ω");
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"stop\":[]}", &r);
    cr_expect_eq(r.params.n_stop, 0);
    srv_request_free(&r);
    /* SCHED_MAX_STOP strings of SCHED_MAX_STOP_BYTES bytes are the limit */
    char body[8192], stop[SCHED_MAX_STOP_BYTES + 1];
    memset(stop, 'x', SCHED_MAX_STOP_BYTES);
    stop[SCHED_MAX_STOP_BYTES] = '\0';
    size_t o = (size_t)snprintf(body, sizeof body, "{" CHAT_HI ",\"stop\":[");
    for (int i = 0; i < SCHED_MAX_STOP; i++)
        o += (size_t)snprintf(body + o, sizeof body - o, "%s\"%s\"", i ? "," : "", stop);
    snprintf(body + o, sizeof body - o, "]}");
    parse_ok(SRV_ENDPOINT_CHAT, body, &r);
    cr_expect_eq(r.params.n_stop, SCHED_MAX_STOP);
    srv_request_free(&r);
    srv_error err;
    snprintf(body, sizeof body, "{" CHAT_HI ",\"stop\":\"%sx\"}", stop);
    cr_assert_eq(parse(SRV_ENDPOINT_CHAT, body, &r, &err), SP_ERR_INVALID_ARG);
    cr_expect_str_eq(err.param, "stop");
    cr_assert_eq(parse(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"stop\":\"a\\u0000b\"}", &r, &err), SP_ERR_INVALID_ARG);
    cr_expect_str_eq(err.param, "stop");
    fixture_close();
}

Test(srv_request, choice_seeds) {
    fixture_smol();
    srv_request r;
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"seed\":100,\"n\":3,\"stop\":\"x\"}", &r);
    for (int c = 0; c < 3; c++) {
        sched_request_params p = srv_request_choice_params(&r, 0, c);
        cr_expect_eq(p.sampling.seed, 100u + (uint64_t)c);
        cr_expect_eq(p.prompt, r.prompts[0]);
        cr_expect_eq(p.n_stop, 1);
        cr_expect_str_eq(p.stop[0], "x");
    }
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"n\":2}", &r);
    uint64_t a = srv_request_choice_params(&r, 0, 0).sampling.seed,
             b = srv_request_choice_params(&r, 0, 1).sampling.seed;
    cr_expect_neq(a, b, "no seed: a fresh random seed per choice");
    srv_request_free(&r);
    fixture_close();
}

/* ---- errors.c ---- */

Test(srv_errors, status_table) {
    static const struct {
        sp_status st;
        int http;
        const char *code;
    } cases[] = {
        {SP_ERR_INVALID_ARG, 400, NULL},
        {SP_ERR_FORMAT, 400, NULL},
        {SP_ERR_RANGE, 400, "context_length_exceeded"},
        {SP_ERR_NOT_FOUND, 404, "not_found"},
        {SP_ERR_FULL, 429, "rate_limit_exceeded"},
        {SP_ERR_UNAVAILABLE, 503, NULL},
        {SP_ERR_TIMEOUT, 408, "timeout"},
        {SP_ERR_NOMEM, 500, NULL},
        {SP_ERR_DEVICE, 500, NULL},
        {SP_ERR_INTERNAL, 500, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_error err;
        cr_expect_eq(srv_error_from_status(&err, cases[i].st, "boom"), cases[i].http, "%s", sp_status_str(cases[i].st));
        cr_expect_eq(err.http_status, cases[i].http);
        cr_expect_str_eq(err.message, "boom");
        if (cases[i].code) {
            cr_expect_str_eq(err.code, cases[i].code);
        } else {
            cr_expect_null(err.code, "%s", sp_status_str(cases[i].st));
        }
        cr_expect_str_eq(err.type, cases[i].http == 400   ? "invalid_request_error"
                                   : cases[i].http == 404 ? "invalid_request_error"
                                   : cases[i].http == 408 ? "timeout_error"
                                   : cases[i].http == 429 ? "rate_limit_error"
                                   : cases[i].http == 503 ? "unavailable_error"
                                                          : "server_error");
    }
    srv_error err;
    srv_error_from_status(&err, SP_ERR_DEVICE, NULL);
    cr_expect_str_eq(err.message, "device error", "no message: the status's text");
}

Test(srv_errors, kinds) {
    static const struct {
        srv_error_kind kind;
        int http;
    } cases[] = {
        {SRV_ERROR_BAD_REQUEST, 400}, {SRV_ERROR_CONTEXT_LENGTH, 400},  {SRV_ERROR_UNAUTHORIZED, 401},
        {SRV_ERROR_NOT_FOUND, 404},   {SRV_ERROR_MODEL_NOT_FOUND, 404}, {SRV_ERROR_METHOD_NOT_ALLOWED, 405},
        {SRV_ERROR_TIMEOUT, 408},     {SRV_ERROR_TOO_LARGE, 413},       {SRV_ERROR_RATE_LIMIT, 429},
        {SRV_ERROR_INTERNAL, 500},    {SRV_ERROR_UNAVAILABLE, 503},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_error err;
        cr_expect_eq(srv_error_make(&err, cases[i].kind, "p", "m %d", 1), cases[i].http);
        cr_expect_str_eq(err.message, "m 1");
        cr_expect_str_eq(err.param, "p");
        cr_expect_not_null(err.type);
    }
    srv_error err;
    srv_error_make(&err, SRV_ERROR_UNAUTHORIZED, NULL, "Incorrect API key provided.");
    cr_expect_str_eq(err.code, "invalid_api_key");
    cr_expect_str_eq(err.param, "");
}

Test(srv_errors, json_shape) {
    srv_error err;
    srv_error_set(&err, 400, "invalid_request_error", NULL, "temperature", "bad \"%s\"", "value");
    char *text = srv_error_json(&err);
    cr_assert_not_null(text);
    json_t *j = fixture_json(text, strlen(text));
    cr_expect_eq(json_object_size(j), 1);
    json_t *e = json_object_get(j, "error");
    cr_assert(json_is_object(e));
    cr_expect_eq(json_object_size(e), 4);
    cr_expect_str_eq(json_string_value(json_object_get(e, "message")), "bad \"value\"");
    cr_expect_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "param")), "temperature");
    cr_expect(json_is_null(json_object_get(e, "code")));
    json_decref(j);
    free(text);

    srv_error_make(&err, SRV_ERROR_CONTEXT_LENGTH, "", "too long");
    text = srv_error_json(&err);
    j = fixture_json(text, strlen(text));
    e = json_object_get(j, "error");
    cr_expect(json_is_null(json_object_get(e, "param")), "no param: null");
    cr_expect_str_eq(json_string_value(json_object_get(e, "code")), "context_length_exceeded");
    json_decref(j);
    free(text);
}

Test(srv_errors, long_message_cut_at_a_character) {
    char big[2000] = "";
    for (int i = 0; i < 600; i++) strcat(big, "é");
    srv_error err;
    srv_error_make(&err, SRV_ERROR_BAD_REQUEST, NULL, "x%s", big);
    size_t len = strlen(err.message);
    cr_expect_lt(len, sizeof err.message);
    cr_expect_eq(len % 2, 1, "x plus whole two-byte characters");
    char *text = srv_error_json(&err);
    cr_assert_not_null(text);
    json_t *j = fixture_json(text, strlen(text));
    cr_expect_eq(json_string_length(json_object_get(json_object_get(j, "error"), "message")), len);
    json_decref(j);
    free(text);
    /* bytes that are not UTF-8 still give valid JSON */
    srv_error_make(&err, SRV_ERROR_BAD_REQUEST, NULL, "bad \xff\xfe bytes");
    text = srv_error_json(&err);
    cr_assert_not_null(text);
    json_decref(fixture_json(text, strlen(text)));
    free(text);
    text = srv_sse_error_event(&err);
    cr_expect_eq(strncmp(text, "data: {\"error\":", 15), 0, "%s", text);
    cr_expect_str_eq(text + strlen(text) - 2, "\n\n");
    free(text);
}

/* A request without max_tokens gets what the context leaves, at most --default-max-tokens
 * and --max-tokens; one that names it gets it (within --max-tokens). */
Test(srv_request, absent_max_tokens_is_capped_by_the_defaults) {
    fixture_smol();
    srv_request r;
    fx.mi.default_max_tokens = 100;
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI "}", &r);
    cr_expect_eq(r.max_tokens[0], 100);
    cr_expect_eq(r.params.max_tokens, 100);
    srv_request_free(&r);
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI ",\"max_tokens\":300}", &r);
    cr_expect_eq(r.max_tokens[0], 300, "a named max_tokens is not the default's business");
    srv_request_free(&r);
    fx.mi.max_tokens = 50; /* the hard cap is lower: it wins */
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI "}", &r);
    cr_expect_eq(r.max_tokens[0], 50);
    srv_request_free(&r);
    fx.mi.max_tokens = 0;
    fx.mi.default_max_tokens = 100000; /* above the room the context leaves */
    parse_ok(SRV_ENDPOINT_CHAT, "{" CHAT_HI "}", &r);
    cr_expect_eq(r.max_tokens[0], 2048 - r.prompt_lens[0]);
    srv_request_free(&r);
    fixture_close();
}

/* --max-request-tokens: the prompts summed, times n; by default the context times n. */
Test(srv_request, prompt_tokens_bounded_per_request) {
    fixture_smol();
    srv_request r;
    srv_error err;
    const char *two = "{\"prompt\":[[1,2,3,4,5,6],[1,2,3,4,5]],\"max_tokens\":1";
    char body[128];
    fx.mi.max_request_tokens = 11;
    snprintf(body, sizeof body, "%s}", two);
    parse_ok(SRV_ENDPOINT_COMPLETIONS, body, &r); /* 11: at the bound */
    srv_request_free(&r);
    snprintf(body, sizeof body, "%s,\"n\":2}", two);
    cr_assert_eq(parse(SRV_ENDPOINT_COMPLETIONS, body, &r, &err), SP_ERR_INVALID_ARG);
    cr_expect_eq(err.http_status, 400);
    cr_expect_str_eq(err.param, "prompt");
    cr_expect(strstr(err.message, "prompts total 11 tokens, 22 with n = 2") &&
                  strstr(err.message, "--max-request-tokens of 11."),
              "%s", err.message);
    fx.mi.max_request_tokens = 0; /* the default: 2048 x n */
    fx.mi.max_seq_len = 8;
    snprintf(body, sizeof body, "%s}", two);
    cr_assert_eq(parse(SRV_ENDPOINT_COMPLETIONS, body, &r, &err), SP_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "more than this server's --max-request-tokens of 8 (by default the context length"),
              "%s", err.message);
    fx.mi.max_seq_len = 2048;
    fx.mi.max_request_tokens = 1234567;
    parse_ok(SRV_ENDPOINT_COMPLETIONS, body, &r);
    srv_request_free(&r);
    fx.mi.max_request_tokens = 1; /* chat: its rendered messages */
    cr_assert_eq(parse(SRV_ENDPOINT_CHAT, "{" CHAT_HI "}", &r, &err), SP_ERR_INVALID_ARG);
    cr_expect_str_eq(err.param, "messages");
    fx.mi.max_request_tokens = 0;
    fixture_close();
}

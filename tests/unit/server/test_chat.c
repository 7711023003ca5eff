/* test_chat.c: chat.c: loading the template (the model's, a file, the ChatML fallback),
 * the content-parts probe, the render context (tools, chat_template_kwargs, special
 * tokens, other message keys kept), template errors as 400s, the BOS rule, and the
 * checks on assistant tool_calls.
 */
#include <criterion/criterion.h>

#include "tests/unit/server/openai_fixture.h"

static void parse_chat(const char *body, srv_request *r) {
    srv_error err;
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_CHAT, body, strlen(body), &fx.mi, r, &err), SP_OK, "%s: %s", body,
                 err.message);
}

static void expect_prompt(const char *body, const char *want) {
    srv_request r;
    parse_chat(body, &r);
    cr_expect_str_eq(r.prompt_text, want, "%s", body);
    srv_request_free(&r);
}

#define HI "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

Test(srv_chat, model_without_template_gets_chatml) {
    fixture_stories(NULL);
    cr_expect_not(fx.mi.template_takes_parts);
    cr_expect_str_eq(json_string_value(json_object_get(fx.mi.template_tokens, "bos_token")), "<s>");
    cr_expect_str_eq(json_string_value(json_object_get(fx.mi.template_tokens, "eos_token")), "</s>");
    expect_prompt("{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":[{\"type\":"
                  "\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]}",
                  "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n");
    /* SentencePiece adds BOS; ChatML does not write it, so the prompt starts with it */
    srv_request r;
    parse_chat(HI "}", &r);
    cr_expect_eq(r.prompts[0][0], tok_bos(fx.vocab));
    cr_expect_neq(r.prompts[0][1], tok_bos(fx.vocab));
    srv_request_free(&r);
    fixture_close();
}

Test(srv_chat, bos_not_doubled_when_the_template_writes_it) {
    fixture_stories_source("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}");
    srv_request r;
    parse_chat(HI "}", &r);
    cr_expect_str_eq(r.prompt_text, "<s>hi");
    cr_expect_eq(r.prompts[0][0], tok_bos(fx.vocab));
    cr_expect_neq(r.prompts[0][1], tok_bos(fx.vocab), "one BOS");
    srv_request_free(&r);
    fixture_close();
}

Test(srv_chat, default_model_template) {
    fixture_smol();
    cr_expect_not(fx.mi.template_takes_parts);
    cr_expect_str_eq(json_string_value(json_object_get(fx.mi.template_tokens, "bos_token")), "<|im_start|>");
    expect_prompt(HI "}", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                          "Face<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    fixture_close();
}

Test(srv_chat, probe_finds_templates_that_take_parts) {
    /* prints each part's text: takes parts, and gets them as given */
    fixture_stories_source("{% for m in messages %}{% if m.content is string %}S:{{ m.content }}{% else %}"
                           "{% for p in m.content %}L:{{ p.text }}{% endfor %}{% endif %}{% endfor %}");
    cr_expect(fx.mi.template_takes_parts);
    expect_prompt("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
                  "\"text\",\"text\":\"b\"}]}]}",
                  "L:aL:b");
    expect_prompt(HI "}", "S:hi");
    fixture_close();
}

Test(srv_chat, probe_not_fooled_by_a_printed_list) {
    /* prints the content whatever it is: a list comes out as its repr, so no */
    fixture_stories_source("{% for m in messages %}{{ m.content }}{% endfor %}");
    cr_expect_not(fx.mi.template_takes_parts);
    expect_prompt("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
                  "\"text\",\"text\":\"b\"}]}]}",
                  "a\nb");
    fixture_close();
}

Test(srv_chat, mistral_small_takes_parts) {
    char path[512];
    fixture_stories(testdata_path(path, sizeof path, "templates/Mistral-Small-3.2-24B-Instruct-2506.jinja"));
    cr_expect(fx.mi.template_takes_parts);
    fx.mi.max_seq_len = 8192; /* its default system prompt is long */
    srv_request r;
    parse_chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"alpha\"},{\"type\":"
               "\"text\",\"text\":\"beta\"}]}]}",
               &r);
    cr_expect(strstr(r.prompt_text, "[INST]alphabeta[/INST]"), "%s", r.prompt_text);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_chat, template_raise_is_a_400_with_its_message) {
    char path[512];
    fixture_stories(testdata_path(path, sizeof path, "templates/google-gemma-2-2b-it.jinja"));
    const char *body =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hi\"}]}";
    srv_request r;
    srv_error err;
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_CHAT, body, strlen(body), &fx.mi, &r, &err), SP_ERR_INVALID_ARG);
    cr_expect_eq(err.http_status, 400);
    cr_expect_str_eq(err.message, "System role not supported");
    cr_expect_str_eq(err.type, "invalid_request_error");
    cr_expect_str_eq(err.param, "messages");
    fixture_close();
}

Test(srv_chat, template_runtime_error_is_a_400) {
    fixture_stories_source("{{ messages[0].content + 1 }}");
    const char *body = HI "}";
    srv_request r;
    srv_error err;
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_CHAT, body, strlen(body), &fx.mi, &r, &err), SP_ERR_INVALID_ARG);
    cr_expect_eq(err.http_status, 400);
    cr_expect_eq(strncmp(err.message, "chat template: ", 15), 0, "%s", err.message);
    fixture_close();
}

Test(srv_chat, context_tools_and_kwargs) {
    fixture_stories_source("{% if tools is none %}none{% else %}{% for t in tools %}{{ t.function.name }}"
                           "{% endfor %}{% endif %}|"
                           "{% if add_generation_prompt %}G{% endif %}|{{ enable_thinking | default('unset') }}|"
                           "{{ eos_token }}|{{ messages | length }}");
    cr_expect(fx.mi.template_renders_tools);
    expect_prompt(HI "}", "none|G|unset|</s>|1");
    expect_prompt(HI ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\","
                     "\"function\":{\"name\":\"g\"}}]}",
                  "fg|G|unset|</s>|1");
    /* tool_choice none: the tools stay out of the prompt */
    expect_prompt(HI ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"none\"}",
                  "none|G|unset|</s>|1");
    /* kwargs override add_generation_prompt and the special tokens, never messages or tools */
    expect_prompt(HI ",\"chat_template_kwargs\":{\"enable_thinking\":false,\"add_generation_prompt\":false,"
                     "\"eos_token\":\"E\",\"messages\":[],\"tools\":[1]}}",
                  "none||False|E|1");
    fixture_close();
}

/* A template that ignores tools: spindle's system block lists them (generic format), joined
 * to the request's own system message or before the first message, and earlier calls are
 * written back in the generic shape. */
Test(srv_chat, tools_a_template_ignores_go_in_a_system_block) {
    fixture_stories_source("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
    cr_expect_not(fx.mi.template_renders_tools);
    cr_expect_eq(fx.mi.tool_format, SRV_TOOLS_GENERIC);
    srv_request r;
    parse_chat(HI ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
                  "\"the weather\",\"parameters\":{\"type\":\"object\"}}}]}",
               &r);
    cr_expect(strncmp(r.prompt_text, "system:You can call the following tools", 39) == 0, "%s", r.prompt_text);
    cr_expect(strstr(r.prompt_text, "{\"name\":\"get_weather\",\"description\":\"the weather\"") != NULL, "%s",
              r.prompt_text);
    cr_expect(strstr(r.prompt_text, ";user:hi;") != NULL, "%s", r.prompt_text);
    srv_request_free(&r);
    parse_chat("{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
               "\"q\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
               "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
               "\"c1\",\"content\":\"42\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
               &r);
    const char *want = "system:Be brief.\n\nYou can call the following tools";
    cr_expect(strncmp(r.prompt_text, want, strlen(want)) == 0, "%s", r.prompt_text);
    cr_expect(strstr(r.prompt_text, "{\"name\":\"f\"}\n") != NULL, "absent keys are left out: %s", r.prompt_text);
    cr_expect(strstr(r.prompt_text, "assistant:{\"tool_calls\":[{\"name\":\"f\",\"arguments\":{\"x\":1}}]};tool:42;") !=
                  NULL,
              "%s", r.prompt_text);
    srv_request_free(&r);
    fixture_close();
}

Test(srv_chat, other_message_keys_kept) {
    fixture_stories_source("{% for m in messages %}{{ m.role }}:{{ m.content }}"
                           "{% if m.tool_calls %}[{{ m.tool_calls[0].function.name }}]{% endif %}"
                           "{% if m.tool_call_id %}<{{ m.tool_call_id }}>{% endif %}"
                           "{% if m.name %}({{ m.name }}){% endif %}"
                           "{% if m.reasoning_content %}{{ '{' }}{{ m.reasoning_content }}{{ '}' }}{% endif %};"
                           "{% endfor %}");
    expect_prompt("{\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"name\":\"ann\"},{\"role\":\"assistant\","
                  "\"content\":null,\"reasoning_content\":\"think\",\"tool_calls\":[{\"id\":\"c1\",\"type\":"
                  "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\","
                  "\"content\":\"42\",\"tool_call_id\":\"c1\"}]}",
                  "user:q(ann);assistant:[f]{think};tool:42<c1>;");
    fixture_close();
}

Test(srv_chat, template_file_errors_name_the_file) {
    char path[512];
    const char *model = testdata_path(path, sizeof path, "models/stories260K.gguf");
    TESTDATA_REQUIRE(model);
    gguf_file *f;
    cr_assert_eq(gguf_open(model, &f), SP_OK);
    srv_model_info mi = {0};
    cr_expect_eq(srv_model_info_init_template(&mi, f, "/nonexistent/t.jinja"), SP_ERR_IO);
    cr_expect(strstr(sp_last_error(), "/nonexistent/t.jinja"), "%s", sp_last_error());
    const char *bad = fixture_template_file("{% for m in messages %}oops");
    cr_expect_eq(srv_model_info_init_template(&mi, f, bad), SP_ERR_FORMAT);
    cr_expect(strstr(sp_last_error(), bad) && strstr(sp_last_error(), "line"), "%s", sp_last_error());
    cr_expect_null(mi.chat_template);
    unlink(bad);
    srv_model_info_free(&mi); /* nothing to free, and safe */
    gguf_close(f);
}

static void expect_bad(const char *body, const char *param) {
    srv_request r;
    srv_error err;
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_CHAT, body, strlen(body), &fx.mi, &r, &err), SP_ERR_INVALID_ARG, "%s",
                 body);
    cr_expect_str_eq(err.param, param, "%s: %s", body, err.message);
}

#define CONTINUE                                                                                                  \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"},{\"role\":\"assistant\",\"content\":\"Once " \
    "upon\"}]"

Test(srv_chat, continue_final_message_leaves_the_last_turn_open) {
    fixture_stories(NULL); /* ChatML */
    expect_prompt(CONTINUE ",\"continue_final_message\":true}",
                  "<|im_start|>user\nTell a story<|im_end|>\n<|im_start|>assistant\nOnce upon");
    expect_prompt(CONTINUE ",\"add_generation_prompt\":false}",
                  "<|im_start|>user\nTell a story<|im_end|>\n<|im_start|>assistant\nOnce upon<|im_end|>\n");
    expect_bad(CONTINUE ",\"continue_final_message\":true,\"add_generation_prompt\":true}", "continue_final_message");
    expect_bad(HI ",\"continue_final_message\":true}", "continue_final_message");
    expect_bad(HI ",\"add_generation_prompt\":1}", "add_generation_prompt");
    fixture_close();
}

#define CALLS_BEFORE "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"tool_calls\":"
#define CALLS_AFTER  "},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}]}"

Test(srv_chat, malformed_tool_calls_are_400s_naming_the_field) {
    fixture_stories(NULL);
    expect_bad(CALLS_BEFORE "[{\"id\":1,\"function\":\"x\"}]" CALLS_AFTER, "messages[1].tool_calls[0].id");
    expect_bad(CALLS_BEFORE "{\"id\":\"c1\"}" CALLS_AFTER, "messages[1].tool_calls");
    expect_bad(CALLS_BEFORE "[\"c1\"]" CALLS_AFTER, "messages[1].tool_calls[0]");
    expect_bad(CALLS_BEFORE "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]" CALLS_AFTER,
               "messages[1].tool_calls[0].id");
    expect_bad(CALLS_BEFORE "[{\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]" CALLS_AFTER,
               "messages[1].tool_calls[0].type");
    expect_bad(CALLS_BEFORE
               "[{\"id\":\"c1\",\"type\":\"tool\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]" CALLS_AFTER,
               "messages[1].tool_calls[0].type");
    expect_bad(CALLS_BEFORE "[{\"id\":\"c1\",\"type\":\"function\",\"function\":\"f\"}]" CALLS_AFTER,
               "messages[1].tool_calls[0].function");
    expect_bad(CALLS_BEFORE "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"arguments\":\"{}\"}}]" CALLS_AFTER,
               "messages[1].tool_calls[0].function.name");
    expect_bad(CALLS_BEFORE
               "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]" CALLS_AFTER,
               "messages[1].tool_calls[0].function.arguments");
    /* well-formed, empty and null are accepted */
    const char *ok[] = {
        CALLS_BEFORE
        "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]" CALLS_AFTER,
        CALLS_BEFORE "[]" CALLS_AFTER, CALLS_BEFORE "null" CALLS_AFTER};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        srv_request r;
        parse_chat(ok[i], &r);
        srv_request_free(&r);
    }
    fixture_close();
}

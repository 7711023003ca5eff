/* Tests for server/api/tools.c: the tool-call format detected from real chat templates
 * (../shared/testdata/templates), and the answer parsed in each format, with the text
 * around calls kept as content, malformed or unknown calls left as content, and streams
 * holding text back exactly while it may still open a call. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"
#include "tests/unit/testdata.h"

static srv_request request_with_tools(void) {
    srv_request r = {.endpoint = SRV_ENDPOINT_CHAT, .tool_choice = SRV_TOOL_CHOICE_AUTO, .parallel_tool_calls = true};
    r.tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{}}},"
                         "{\"type\":\"function\",\"function\":{\"name\":\"add\"}}]",
                         0, NULL);
    cr_assert_not_null(r.tools);
    return r;
}

/* The calls parsed from text in format f: their names and arguments joined "name(args);". */
static char *parsed(srv_tool_format f, const char *text, char **content) {
    srv_request r = request_with_tools();
    srv_model_info mi = {.tool_format = f};
    json_t *calls = srv_tools_parse(&mi, &r, text, strlen(text), content);
    json_decref(r.tools);
    if (!calls) return NULL;
    char *out = calloc(1, 4096);
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *c = json_array_get(calls, i);
        const json_t *fn = json_object_get(c, "function");
        cr_assert_str_eq(json_string_value(json_object_get(c, "type")), "function");
        cr_assert(strncmp(json_string_value(json_object_get(c, "id")), "call_", 5) == 0);
        size_t n = strlen(out);
        snprintf(out + n, 4096 - n, "%s(%s);", json_string_value(json_object_get(fn, "name")),
                 json_string_value(json_object_get(fn, "arguments")));
    }
    json_decref(calls);
    return out;
}

static void expect_calls(srv_tool_format f, const char *text, const char *want, const char *want_content) {
    char *content = NULL;
    char *got = parsed(f, text, &content);
    cr_assert_not_null(got, "no calls parsed from: %s", text);
    cr_assert_str_eq(got, want);
    if (want_content)
        cr_assert_str_eq(content ? content : "(none)", want_content);
    else
        cr_assert_null(content, "content '%s'", content);
    free(got);
    free(content);
}

static void expect_content(srv_tool_format f, const char *text) {
    char *content = NULL;
    char *got = parsed(f, text, &content);
    cr_assert_null(got, "calls parsed from: %s", text);
    cr_assert_null(content);
}

Test(tools, generic_format) {
    expect_calls(SRV_TOOLS_GENERIC, "{\"tool_calls\":[{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}]}",
                 "add({\"a\":1,\"b\":2});", NULL);
    expect_calls(SRV_TOOLS_GENERIC,
                 " ```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}},"
                 " {\"name\": \"add\", \"arguments\": {}}]}\n``` ",
                 "get_weather({\"city\":\"Paris\"});add({});", NULL);
    expect_calls(SRV_TOOLS_GENERIC, "{\"name\":\"add\",\"arguments\":{\"a\":3}}", "add({\"a\":3});", NULL);
    expect_content(SRV_TOOLS_GENERIC, "The weather is fine.");
    expect_content(SRV_TOOLS_GENERIC, "{\"tool_calls\":[{\"name\":\"unknown\",\"arguments\":{}}]}");
    expect_content(SRV_TOOLS_GENERIC, "{\"tool_calls\":[{\"name\":\"add\",\"arguments\":\"a string\"}]}");
    expect_content(SRV_TOOLS_GENERIC, "{\"tool_calls\":[{\"name\":\"add\",\"arguments\":{\"a\":1}");
    expect_content(SRV_TOOLS_GENERIC, "{\"answer\": 42}");
}

Test(tools, hermes_format) {
    expect_calls(SRV_TOOLS_HERMES, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>",
                 "add({\"a\":1});", NULL);
    expect_calls(SRV_TOOLS_HERMES,
                 "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
                 "</tool_call>\n<tool_call>{\"name\":\"add\",\"arguments\":{}}</tool_call>",
                 "get_weather({\"city\":\"Rome\"});add({});", "Let me check.");
    /* the last call cut before its closing tag still parses */
    expect_calls(SRV_TOOLS_HERMES, "<tool_call>{\"name\":\"add\",\"arguments\":{}}", "add({});", NULL);
    expect_content(SRV_TOOLS_HERMES, "No tools needed: it is sunny.");
    expect_content(SRV_TOOLS_HERMES, "<tool_call>{\"name\": \"add\", \"arguments\": {</tool_call>");
}

Test(tools, llama3_and_mistral_formats) {
    expect_calls(SRV_TOOLS_LLAMA3, "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 5}}", "add({\"a\":5});",
                 NULL);
    expect_calls(SRV_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {}}", "get_weather({});", NULL);
    expect_content(SRV_TOOLS_LLAMA3, "It is 5.");
    expect_calls(SRV_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"b\": 2}}]", "add({\"b\":2});",
                 NULL);
    expect_calls(SRV_TOOLS_MISTRAL, "[{\"name\":\"add\",\"arguments\":{}},{\"name\":\"get_weather\",\"arguments\":{}}]",
                 "add({});get_weather({});", NULL);
    expect_content(SRV_TOOLS_MISTRAL, "[1, 2, 3]");
}

Test(tools, streams_hold_back_only_what_may_become_calls) {
    srv_model_info generic = {.tool_format = SRV_TOOLS_GENERIC}, hermes = {.tool_format = SRV_TOOLS_HERMES};
    cr_assert_eq(srv_tools_hold_from(&generic, "", 0, false), 0);
    cr_assert_eq(srv_tools_hold_from(&generic, " \n{\"tool", 8, false), 0);
    cr_assert_eq(srv_tools_hold_from(&generic, "Hello", 5, false), 5);
    cr_assert_eq(srv_tools_hold_from(&generic, "{\"a\"", 4, true), 4, "content flowed: the answer is not calls");
    cr_assert_eq(srv_tools_hold_from(&hermes, "<tool_", 6, false), 0);
    cr_assert_eq(srv_tools_hold_from(&hermes, "<tool_call>{", 12, false), 0);
    cr_assert_eq(srv_tools_hold_from(&hermes, "Sure.\n<tool_call>{", 19, true), 6);
    cr_assert_eq(srv_tools_hold_from(&hermes, "Sure.\n<tool", 11, true), 6);
    cr_assert_eq(srv_tools_hold_from(&hermes, "<b>", 3, false), 3);
    cr_assert_eq(srv_tools_hold_from(&hermes, "Sure", 4, false), 4);
}

static srv_tool_format detect(const char *file, bool *renders) {
    char path[512], rel[256];
    snprintf(rel, sizeof rel, "templates/%s", file);
    testdata_path(path, sizeof path, rel);
    TESTDATA_REQUIRE(path);
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp);
    static char src[1 << 20];
    size_t n = fread(src, 1, sizeof src - 1, fp);
    fclose(fp);
    tmpl *t = NULL;
    cr_assert_eq(tmpl_parse(src, n, &t), SP_OK, "%s: %s", file, sp_last_error());
    json_t *tokens = json_pack("{s:s,s:s}", "bos_token", "<s>", "eos_token", "</s>");
    srv_tool_format f = srv__tools_detect(t, tokens, src, n, renders);
    json_decref(tokens);
    tmpl_destroy(t);
    return f;
}

Test(tools, formats_are_detected_from_real_templates) {
    bool renders;
    cr_assert_eq(detect("Qwen-Qwen2.5-7B-Instruct.jinja", &renders), SRV_TOOLS_HERMES);
    cr_assert(renders);
    cr_assert_eq(detect("Qwen-Qwen3-0.6B.jinja", &renders), SRV_TOOLS_HERMES);
    cr_assert(renders);
    cr_assert_eq(detect("meta-llama-Llama-3.1-8B-Instruct.jinja", &renders), SRV_TOOLS_LLAMA3);
    cr_assert(renders);
    cr_assert_eq(detect("mistralai-Mistral-Nemo-Instruct-2407.jinja", &renders), SRV_TOOLS_MISTRAL);
    cr_assert(renders);
    cr_assert_eq(detect("google-gemma-2-2b-it.jinja", &renders), SRV_TOOLS_GENERIC);
    cr_assert_not(renders, "gemma 2's template ignores tools");
}

/* Feeds a forced answer one byte more at a time: the heads and the argument pieces come
 * out in order, and the pieces joined are each call's arguments exactly. */
static void scan_all(const char *answer, const char *want) {
    srv_call_scan sc = {0};
    char got[1024] = "";
    size_t len = strlen(answer);
    for (size_t upto = 0; upto <= len; upto++) {
        for (;;) {
            size_t from, n;
            srv_call_event ev = srv_tools_scan(&sc, answer, upto, &from, &n);
            cr_assert_neq(ev, SRV_CALL_LOST, "lost at %zu of %s", upto, answer);
            if (ev == SRV_CALL_WAIT) break;
            size_t g = strlen(got);
            if (ev == SRV_CALL_HEAD)
                snprintf(got + g, sizeof got - g, "%s%.*s(", g ? ")" : "", (int)n, answer + from);
            else
                snprintf(got + g, sizeof got - g, "%.*s", (int)n, answer + from);
        }
    }
    size_t g = strlen(got);
    snprintf(got + g, sizeof got - g, ")");
    cr_assert_str_eq(got, want);
}

Test(tools, forced_calls_are_scanned_as_they_come) {
    scan_all("{\"tool_calls\":[{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":{\"c\":\"}\\\"]\"}}},"
             "{\"name\":\"get_weather\",\"arguments\":{}}]}",
             "add({\"a\":1,\"b\":{\"c\":\"}\\\"]\"}})get_weather({})");
    scan_all("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>", "add({\"x\": [1, 2]})");
    scan_all("{\"name\":\"f\",\"parameters\":{\"s\":\"é\"}}", "f({\"s\":\"é\"})");
    srv_call_scan sc = {0};
    size_t from, n;
    cr_assert_eq(srv_tools_scan(&sc, "{\"name\":\"f\",\"other\":1}", 22, &from, &n), SRV_CALL_LOST);
}

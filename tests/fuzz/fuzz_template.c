/* fuzz_template.c: libFuzzer harness for the chat-template engine (lexer, parser,
 * evaluator, builtins, JSON output). The input is a template's source, then a NUL
 * byte, then a JSON context; when there is no NUL, or what follows does not parse as a
 * JSON object, a fixed chat context (messages with a tool call, tools,
 * add_generation_prompt, bos_token, eos_token) is used. A template that parses is
 * rendered under small limits. The header's contract is checked and traps when broken:
 * parse errors and render errors are statuses with a message, a render's output is
 * NUL-terminated and within max_output_bytes. Everything is freed per input, so
 * LeakSanitizer sees any leak. Built and run by tools/fuzz.sh; the unit test
 * tests/unit/template/test_template_regressions.c replays tests/fuzz/regressions/template/
 * and the seeds through this same function.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "template/template.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

static const tmpl_limits FUZZ_LIMITS = {
    .max_steps = 100000,
    .max_output_bytes = 1u << 20,
    .max_memory_bytes = 64u << 20,
};

static const char FUZZ_DEFAULT_CONTEXT[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"},"
    "{\"role\": \"user\", \"content\": \"What is the weather in Z\\u00fcrich?\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\","
    " \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\\u00fcrich\"}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"{\\\"temp\\\": 21}\"},"
    "{\"role\": \"assistant\", \"content\": \"  It is 21 \\u00b0C.  \"},"
    "{\"role\": \"user\", \"content\": \"Thanks!\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
    " \"required\": [\"city\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static json_t *fuzz_default_context;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sp_log_set_level(SP_LOG_ERROR);
    if (!fuzz_default_context) {
        fuzz_default_context = json_loads(FUZZ_DEFAULT_CONTEXT, 0, NULL);
        FUZZ_CHECK(json_is_object(fuzz_default_context));
    }
    return 0;
}

/* Where a status from the engine must come with a message. */
static void fuzz_check_message(void) {
    const char *msg = sp_last_error();
    FUZZ_CHECK(msg != NULL && msg[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_default_context) LLVMFuzzerInitialize(NULL, NULL);
    const char *source = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t source_len = nul ? (size_t)(nul - data) : size;

    json_t *context = NULL;
    if (nul) {
        size_t ctx_len = size - source_len - 1;
        context = json_loadb((const char *)nul + 1, ctx_len, 0, NULL);
        if (context && !json_is_object(context)) {
            json_decref(context);
            context = NULL;
        }
    }
    const json_t *ctx = context ? context : fuzz_default_context;

    sp_error_clear();
    tmpl *t = NULL;
    sp_status st = tmpl_parse(source, source_len, &t);
    if (st != SP_OK) {
        FUZZ_CHECK(st < 0);
        fuzz_check_message();
        json_decref(context);
        return 0;
    }
    FUZZ_CHECK(t != NULL);

    char *out = NULL;
    size_t out_len = 0;
    sp_error_clear();
    st = tmpl_render(t, ctx, &FUZZ_LIMITS, &out, &out_len);
    if (st == SP_OK) {
        FUZZ_CHECK(out != NULL && out[out_len] == '\0');
        FUZZ_CHECK(out_len <= FUZZ_LIMITS.max_output_bytes);
    } else {
        FUZZ_CHECK(st == SP_ERR_FORMAT || st == SP_ERR_INVALID_ARG || st == SP_ERR_RANGE || st == SP_ERR_NOMEM);
        fuzz_check_message();
    }
    free(out);
    tmpl_destroy(t);
    json_decref(context);
    return 0;
}

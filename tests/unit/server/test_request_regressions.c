/* test_request_regressions.c: replays the request fuzzer's seeds and findings.
 *
 * Every file in tests/fuzz/regressions/request/ (inputs that once crashed or broke the
 * contract) and every seed in tests/fuzz/corpus/request/ goes through the fuzz harness
 * itself (tests/fuzz/fuzz_request.c, included here), which checks the API layer's
 * contract and traps when it is broken. A seed's name says what it must be: chat_* a
 * valid chat body, cmpl_* a valid completions body, messages_* a valid Anthropic Messages
 * body, tokenize_* and detokenize_* valid bodies of those endpoints. Each input is copied
 * into a buffer of exactly its size, so a read past the end shows under ASan. Paths are
 * relative to the repository root, where make runs the tests.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_request.c"
#include "tests/unit/read_exact.h"
#include "tests/unit/testdata.h"

#define REGRESSIONS_DIR "tests/fuzz/regressions/request"
#define SEEDS_DIR       "tests/fuzz/corpus/request"

static void require_model(void) {
    char path[1024];
    fuzz_model_path(path, sizeof path);
    TESTDATA_REQUIRE(path);
}

static bool has_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* A seed is accepted by the endpoint its name gives, with both templates. */
static void check_seed(const char *path, const char *name, const uint8_t *buf, size_t size) {
    for (int m = 0; m < fuzz_n_models; m++) {
        srv_error err = {0};
        const char *body = (const char *)buf;
        if (has_prefix(name, "chat_") || has_prefix(name, "cmpl_")) {
            srv_request r;
            srv_endpoint ep = has_prefix(name, "chat_") ? SRV_ENDPOINT_CHAT : SRV_ENDPOINT_COMPLETIONS;
            cr_assert_eq(srv_request_parse(ep, body, size, &fuzz_models[m], &r, &err), SP_OK, "%s: %s", path,
                         err.message);
            srv_request_free(&r);
        } else if (has_prefix(name, "messages_")) {
            srv_request r;
            cr_assert_eq(srv__messages_parse(body, size, &fuzz_models[m], &r, &err), SP_OK, "%s: %s", path,
                         err.message);
            srv_request_free(&r);
        } else if (has_prefix(name, "responses_")) {
            srv_request r;
            cr_assert_eq(srv__responses_parse(body, size, &fuzz_models[m], 7, &r, &err), SP_OK, "%s: %s", path,
                         err.message);
            srv_request_free(&r);
        } else if (has_prefix(name, "tokenize_") || has_prefix(name, "detokenize_")) {
            json_t *j = has_prefix(name, "tokenize_") ? srv_tokenize(body, size, &fuzz_models[m], &err)
                                                      : srv_detokenize(body, size, &fuzz_models[m], &err);
            cr_assert_not_null(j, "%s: %s", path, err.message);
            json_decref(j);
        } else {
            cr_assert_fail(
                "%s: a seed's name starts with chat_, cmpl_, messages_, responses_, tokenize_ or detokenize_", path);
        }
    }
}

static void check_input(const char *path, const char *name, const uint8_t *buf, size_t size, bool seed) {
    cr_log_info("replaying %s", path); /* --verbose names the input of a crash */
    LLVMFuzzerTestOneInput(buf, size);
    if (seed) check_seed(path, name, buf, size);
}

Test(srv_request_fuzz, survives_every_regression, .timeout = 120) {
    require_model();
    int n = replay_dir(REGRESSIONS_DIR, check_input, false);
    if (n < 0) cr_log_info("%s absent: no regressions yet", REGRESSIONS_DIR);
}

Test(srv_request_fuzz, accepts_every_seed, .timeout = 120) {
    require_model();
    LLVMFuzzerInitialize(NULL, NULL);
    int n = replay_dir(SEEDS_DIR, check_input, true);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", SEEDS_DIR);
    cr_assert_gt(n, 0, "no seeds in %s", SEEDS_DIR);
}

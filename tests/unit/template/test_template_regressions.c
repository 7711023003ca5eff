/* test_template_regressions.c: replays fuzzer findings and seeds through the
 * chat-template engine.
 *
 * Every file in tests/fuzz/regressions/template/ (inputs that once crashed or
 * misbehaved) goes through the fuzz harness itself (tests/fuzz/fuzz_template.c,
 * included here), which checks the engine's contract and traps when it is broken;
 * every seed in tests/fuzz/corpus/template/ must also parse, and render or stop at the
 * template's own raise_exception. Each input is copied into a buffer of exactly its
 * size, so a read past the end shows under ASan (make debug). Paths are relative to the
 * repository root, where make runs the tests.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_template.c"
#include "tests/unit/read_exact.h"

#define REGRESSIONS_DIR "tests/fuzz/regressions/template"
#define SEEDS_DIR       "tests/fuzz/corpus/template"

/* A seed's template (the bytes before the first NUL) must parse, and render to text
 * or to the template's own raise_exception. */
static void check_seed(const char *path, const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = nul ? (size_t)(nul - data) : size;
    json_t *context = nul ? json_loadb((const char *)nul + 1, size - len - 1, 0, NULL) : NULL;
    tmpl *t = NULL;
    sp_status st = tmpl_parse((const char *)data, len, &t);
    cr_assert_eq(st, SP_OK, "%s: %s", path, sp_last_error());
    char *out = NULL;
    size_t out_len = 0;
    st = tmpl_render(t, json_is_object(context) ? context : fuzz_default_context, &FUZZ_LIMITS, &out, &out_len);
    cr_assert(st == SP_OK || st == SP_ERR_INVALID_ARG, "%s: status %d: %s", path, st, sp_last_error());
    free(out);
    tmpl_destroy(t);
    json_decref(context);
}

/* Feeds one input to the harness; seeds must also parse and render (check_seed). */
static void check_input(const char *path, const char *name, const uint8_t *buf, size_t size, bool seed) {
    (void)name;
    fprintf(stderr, "replaying %s\n", path); /* shown only when the test fails */
    LLVMFuzzerTestOneInput(buf, size);
    if (seed) check_seed(path, buf, size);
}

Test(template, survives_every_fuzz_regression, .timeout = 120) {
    int n = replay_dir(REGRESSIONS_DIR, check_input, false);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", REGRESSIONS_DIR);
}

Test(template, renders_every_fuzz_seed, .timeout = 120) {
    int n = replay_dir(SEEDS_DIR, check_input, true);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", SEEDS_DIR);
    cr_assert_gt(n, 0, "no seeds in %s", SEEDS_DIR);
}

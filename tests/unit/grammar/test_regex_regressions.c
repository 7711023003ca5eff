/* test_regex_regressions.c: replays fuzzer findings and seeds through the regex compiler:
 * every file in tests/fuzz/regressions/regex/ and tests/fuzz/corpus/regex/ goes through the
 * fuzz harness itself (tests/fuzz/fuzz_regex.c, included here), which aborts when a
 * pattern it accepts does not compile or the grammar and PCRE2 disagree on a string. Each
 * input is copied into a buffer of exactly its size. Paths are relative to the repository
 * root. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_regex.c"
#include "tests/unit/read_exact.h"

#define REGRESSIONS_DIR "tests/fuzz/regressions/regex"
#define SEEDS_DIR       "tests/fuzz/corpus/regex"

static void check_input(const char *path, const char *name, const uint8_t *buf, size_t size, bool seed) {
    (void)name;
    fprintf(stderr, "replaying %s\n", path); /* shown only when the test fails */
    (void)seed;
    LLVMFuzzerTestOneInput(buf, size);
}

Test(regex, survives_every_fuzz_regression, .timeout = 120) {
    int n = replay_dir(REGRESSIONS_DIR, check_input, false);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", REGRESSIONS_DIR);
}

Test(regex, replays_every_fuzz_seed, .timeout = 120) {
    int n = replay_dir(SEEDS_DIR, check_input, true);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", SEEDS_DIR);
    cr_assert_gt(n, 0, "no seeds in %s", SEEDS_DIR);
}

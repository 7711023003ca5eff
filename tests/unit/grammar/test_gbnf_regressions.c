/* test_gbnf_regressions.c: replays fuzzer findings and seeds through the GBNF compiler,
 * the matcher and the masks: every file in tests/fuzz/regressions/gbnf/ and
 * tests/fuzz/corpus/gbnf/ goes through the fuzz harness itself (tests/fuzz/fuzz_gbnf.c,
 * included here), which aborts when the contract breaks; every seed must also compile.
 * Each input is copied into a buffer of exactly its size, so a read past the end shows
 * under ASan (make debug). Paths are relative to the repository root. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_gbnf.c"
#include "tests/unit/read_exact.h"

#define REGRESSIONS_DIR "tests/fuzz/regressions/gbnf"
#define SEEDS_DIR       "tests/fuzz/corpus/gbnf"

static void check_input(const char *path, const char *name, const uint8_t *buf, size_t size, bool seed) {
    (void)name;
    fprintf(stderr, "replaying %s\n", path); /* shown only when the test fails */
    LLVMFuzzerTestOneInput(buf, size);
    if (!seed) return;
    const uint8_t *sep = memmem(buf, size, "\n%%\n", 4);
    size_t len = sep ? (size_t)(sep - buf) + 1 : size;
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile((const char *)buf, len, NULL, &g), SP_OK, "%s: %s", path, sp_last_error());
    gram_grammar_destroy(g);
}

Test(gbnf, survives_every_fuzz_regression, .timeout = 120) {
    LLVMFuzzerInitialize(NULL, NULL);
    int n = replay_dir(REGRESSIONS_DIR, check_input, false);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", REGRESSIONS_DIR);
}

Test(gbnf, compiles_every_fuzz_seed, .timeout = 120) {
    LLVMFuzzerInitialize(NULL, NULL);
    int n = replay_dir(SEEDS_DIR, check_input, true);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", SEEDS_DIR);
    cr_assert_gt(n, 0, "no seeds in %s", SEEDS_DIR);
}

/* test_gguf_regressions.c: replays fuzzer findings and seeds through the GGUF reader.
 *
 * Every file in tests/fuzz/regressions/gguf/ (inputs that once crashed or misbehaved)
 * must open cleanly or fail with a status and a message naming the input; every seed
 * in tests/fuzz/corpus/gguf/ must open. Each input is copied into a buffer of exactly
 * its size, so a read past the end shows under ASan (make debug). Paths are relative
 * to the repository root, where make runs the tests.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tests/unit/read_exact.h"

#define REGRESSIONS_DIR "tests/fuzz/regressions/gguf"
#define SEEDS_DIR       "tests/fuzz/corpus/gguf"

/* Opens one input: want_ok, it must open; otherwise a failure names the input. */
static void check_open(const char *path, const char *name, const uint8_t *buf, size_t size, bool want_ok) {
    gguf_file *f = NULL;
    sp_status st = gguf_open_memory(buf, size, name, &f);
    if (want_ok) cr_assert_eq(st, SP_OK, "%s: %s", path, sp_last_error());
    if (st == SP_OK) {
        char text[256];
        for (int64_t i = 0; i < gguf_kv_count(f); i++) gguf_kv_format(f, i, text, sizeof text, 8);
        gguf_close(f);
    } else {
        cr_assert(st == SP_ERR_FORMAT || st == SP_ERR_UNSUPPORTED, "%s: status %d", path, st);
        cr_assert(strncmp(sp_last_error(), name, strlen(name)) == 0, "%s: message %s", path, sp_last_error());
    }
}

Test(gguf, survives_every_fuzz_regression) {
    int n = replay_dir(REGRESSIONS_DIR, check_open, false);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", REGRESSIONS_DIR);
}

Test(gguf, opens_every_fuzz_seed) {
    int n = replay_dir(SEEDS_DIR, check_open, true);
    if (n < 0) cr_skip_test("%s absent (run from the repository root)", SEEDS_DIR);
    cr_assert_gt(n, 0, "no seeds in %s", SEEDS_DIR);
}

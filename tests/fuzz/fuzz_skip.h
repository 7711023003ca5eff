/* fuzz_skip.h: how a fuzz harness says that an input it needs is missing (a vocabulary,
 * the model), so that tools/fuzz.sh counts it instead of the harness aborting or checking
 * nothing in silence. fuzz_skip prints one line "SKIP fuzz_<name>: <what is missing>" on
 * stderr; a harness that can still check something goes on with less, and one that can
 * check nothing then calls fuzz_skip_all, which exits 79 (tools/fuzz.sh's "skipped").
 * Under CI=true or SPINDLE_REQUIRE_FIXTURES=1, tools/fuzz.sh and
 * tests/integration/test_fuzz_build.py count any skip as a failure. Runs in
 * LLVMFuzzerInitialize (the fuzzer's one thread). */
#ifndef SP_TESTS_FUZZ_SKIP_H
#define SP_TESTS_FUZZ_SKIP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The shared fixtures' folder: SPINDLE_TESTDATA, else ../shared/testdata (as the unit
 * tests' tests/unit/testdata.h). */
static inline const char *fuzz_testdata_dir(void) {
    const char *d = getenv("SPINDLE_TESTDATA");
    return d && d[0] ? d : "../shared/testdata";
}

/* The default model tools/setup.sh fetches (SPINDLE_MODEL overrides). */
static inline const char *fuzz_default_model(void) {
    const char *m = getenv("SPINDLE_MODEL");
    return m && m[0] ? m : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

static inline bool fuzz_present(const char *path) {
    return access(path, R_OK) == 0;
}

/* Prints "SKIP <harness>: <what>" (harness: "fuzz_gbnf"). */
__attribute__((format(printf, 2, 3))) static inline void fuzz_skip(const char *harness, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "SKIP %s: ", harness);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
}

/* Nothing left to check: exit 79, which tools/fuzz.sh counts as a skipped harness (with
 * a SKIP line). Not automake's 77: that is libFuzzer's own exit code for a crash. */
#define FUZZ_SKIP_EXIT 79
static inline void fuzz_skip_all(void) {
    exit(FUZZ_SKIP_EXIT);
}

#endif

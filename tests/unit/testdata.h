/* testdata.h: where unit tests find shared fixtures and the default model.
 *
 * One setting: SPINDLE_TESTDATA (default ../shared/testdata, relative to the repo
 * root where `make test` runs). Tests that need a fixture call TESTDATA_REQUIRE(path)
 * and are skipped with one line when it is absent, so a clone elsewhere still passes.
 */
#ifndef SP_TESTS_TESTDATA_H
#define SP_TESTS_TESTDATA_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline const char *testdata_dir(void) {
    const char *d = getenv("SPINDLE_TESTDATA");
    return d && d[0] ? d : "../shared/testdata";
}

/* Writes "<testdata>/<rel>" into buf and returns buf. */
static inline const char *testdata_path(char *buf, size_t cap, const char *rel) {
    snprintf(buf, cap, "%s/%s", testdata_dir(), rel);
    return buf;
}

/* The default model fetched by tools/setup.sh (SPINDLE_MODEL overrides). */
static inline const char *testdata_default_model(void) {
    const char *m = getenv("SPINDLE_MODEL");
    return m && m[0] ? m : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

/* Skips the current Criterion test with one line when path does not exist. */
#define TESTDATA_REQUIRE(path)                                                    \
    do {                                                                          \
        if (access((path), R_OK) != 0) cr_skip_test("fixture %s absent", (path)); \
    } while (0)

#endif

/* openai_fixture.h: the served-model description the OpenAI-layer tests run against:
 * the default model (SmolLM2: byte-level BPE, its own ChatML-like template) or
 * stories260K (SentencePiece, no template: the ChatML fallback), optionally with a
 * template file in place of the model's. Tests skip with one line when the file is
 * absent. Each Criterion test runs in its own process, so one fixture per test. */
#ifndef SP_TESTS_OPENAI_FIXTURE_H
#define SP_TESTS_OPENAI_FIXTURE_H

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "server/api/api.h"
#include "tests/unit/testdata.h"

typedef struct openai_fixture {
    gguf_file *f;
    tok_vocab *vocab;
    srv_model_info mi;
    char path[512];
} openai_fixture;

static openai_fixture fx;

/* Loads path's vocab and template (template_path: a .jinja file instead, or NULL). */
static inline void fixture_load(const char *path, const char *template_path) {
    TESTDATA_REQUIRE(path);
    if (template_path) TESTDATA_REQUIRE(template_path);
    sp_log_set_level(SP_LOG_ERROR); /* the ChatML fallback's warning is expected here */
    snprintf(fx.path, sizeof fx.path, "%s", path);
    cr_assert_eq(gguf_open(path, &fx.f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(tok_vocab_load(fx.f, &fx.vocab), SP_OK, "%s", sp_last_error());
    fx.mi.served_name = "SmolLM2-135M-Instruct.Q4_1";
    fx.mi.file_name = "SmolLM2-135M-Instruct.Q4_1.gguf";
    fx.mi.vocab = fx.vocab;
    fx.mi.max_seq_len = 2048;
    fx.mi.created = 1700000000;
    cr_assert_eq(srv_model_info_init_template(&fx.mi, fx.f, template_path), SP_OK, "%s", sp_last_error());
}

static inline void fixture_smol(void) {
    fixture_load(testdata_default_model(), NULL);
}

static inline void fixture_stories(const char *template_path) {
    char path[512];
    fixture_load(testdata_path(path, sizeof path, "models/stories260K.gguf"), template_path);
    fx.mi.served_name = "stories260K";
    fx.mi.file_name = "stories260K.gguf";
    fx.mi.max_seq_len = 512;
}

/* Writes source to a temporary .jinja file; returns its path (static buffer). */
static inline const char *fixture_template_file(const char *source) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/spindle-test-tmpl-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0, "mkstemp");
    FILE *fp = fdopen(fd, "w");
    cr_assert(fp);
    fputs(source, fp);
    fclose(fp);
    return path;
}

/* stories260K with the template source given (through a temporary file). */
static inline void fixture_stories_source(const char *source) {
    const char *path = fixture_template_file(source);
    fixture_stories(path);
    unlink(path);
}

static inline void fixture_close(void) {
    srv_model_info_free(&fx.mi);
    tok_vocab_destroy(fx.vocab);
    if (fx.f) gguf_close(fx.f);
    fx = (openai_fixture){0};
}

/* Parses text as JSON (NULs allowed) or fails the test. */
static inline json_t *fixture_json(const char *text, size_t len) {
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
    cr_assert_not_null(j, "not JSON (%s): %.*s", jerr.text, (int)len, text);
    return j;
}

/* text with every ' turned into ", parsed. */
static inline json_t *jq(const char *text) {
    char *s = strdup(text);
    for (char *p = s; *p; p++)
        if (*p == '\'') *p = '"';
    json_t *j = fixture_json(s, strlen(s));
    free(s);
    return j;
}

/* Expects got to equal the JSON of want_text (with ' for "). */
static inline void expect_json(const json_t *got, const char *want_text) {
    json_t *want = jq(want_text);
    char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS), *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
    cr_expect(json_equal(got, want), "got  %s\nwant %s", g, w);
    free(g);
    free(w);
    json_decref(want);
}

#endif

/* test_template_cases.c: the chat-template engine against reference renders.
 *
 *   llama_cpp_table   every case of llama.cpp's test table ($SPINDLE_TESTDATA/templates/
 *                     chat-template-cases.json) that renders with Jinja: the render, minus one
 *                     leading bos_token and one trailing eos_token as llama.cpp strips them, must
 *                     equal llama.cpp's expected string byte for byte. Where minja (llama.cpp's
 *                     engine) and jinja2 disagree, the data file lists the case under
 *                     llama_cpp_divergent with jinja2's result, and that is what is expected.
 *   jinja2_expected   tests/data/templates/jinja_expected.json (tools/make_template_cases.py with
 *                     jinja2, set up as Hugging Face's apply_chat_template): every shared template
 *                     and the default model's own over 12+ conversations. An output must match byte
 *                     for byte; raise_exception(msg) must give SP_ERR_INVALID_ARG with msg as the
 *                     message; any other jinja2 failure must be a failure here too.
 *   default_model_template_present   the default model carries a template, it is in the data
 *                     and the GGUF helpers of template.h agree with the generator's own reader.
 *
 * Each table test checks every case and reports all failures together (names, the first
 * differing byte and a snippet of both sides), so one run shows the whole picture.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "template/template.h"
#include "tests/unit/testdata.h"

#define EXPECTED_PATH      "tests/data/templates/jinja_expected.json"
#define DEFAULT_MODEL_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf" /* the model the data was made from */
#define MIN_CONVERSATIONS  12
#define FAILURES_NAMED     5
#define SNIPPET_BEFORE     40
#define SNIPPET_AFTER      80
#define MESSAGE_CAP        2048

/* ---- failures, collected and reported together --------------------------------- */

typedef struct failures {
    int count;
    char names[FAILURES_NAMED][200];
} failures;

static void failures_add(failures *fl, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void failures_add(failures *fl, const char *name, const char *fmt, ...) {
    char msg[MESSAGE_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cr_log_error("%s: %s", name, msg);
    if (fl->count < FAILURES_NAMED) snprintf(fl->names[fl->count], sizeof fl->names[0], "%s", name);
    fl->count++;
}

static void failures_assert(const failures *fl, const char *table, int n_cases) {
    char list[FAILURES_NAMED * 204] = "";
    for (int i = 0; i < fl->count && i < FAILURES_NAMED; i++) {
        if (i) strcat(list, "; ");
        strcat(list, fl->names[i]);
    }
    cr_assert(fl->count == 0, "%s: %d of %d cases fail (%s%s); each is described in the log above", table, fl->count,
              n_cases, list, fl->count > FAILURES_NAMED ? "; ..." : "");
}

/* ---- small helpers ---------------------------------------------------------------- */

/* Appends s[0..n) to buf (NUL-terminated, capacity cap) with control bytes escaped. */
static void append_escaped(char *buf, size_t cap, const char *s, size_t n) {
    size_t at = strlen(buf);
    for (size_t i = 0; i < n && at + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            at += (size_t)snprintf(buf + at, cap - at, "\\n");
        else if (c == '\t')
            at += (size_t)snprintf(buf + at, cap - at, "\\t");
        else if (c < 0x20 || c == 0x7f)
            at += (size_t)snprintf(buf + at, cap - at, "\\x%02x", c);
        else
            buf[at++] = (char)c, buf[at] = '\0';
    }
}

/* Describes where got and want first differ: the byte offset and a snippet of each side. */
static void describe_diff(char *buf, size_t cap, const char *got, size_t got_len, const char *want, size_t want_len) {
    size_t off = 0;
    while (off < got_len && off < want_len && got[off] == want[off]) off++;
    size_t from = off > SNIPPET_BEFORE ? off - SNIPPET_BEFORE : 0;
    size_t got_n = got_len - from < SNIPPET_BEFORE + SNIPPET_AFTER ? got_len - from : SNIPPET_BEFORE + SNIPPET_AFTER;
    size_t want_n = want_len - from < SNIPPET_BEFORE + SNIPPET_AFTER ? want_len - from : SNIPPET_BEFORE + SNIPPET_AFTER;
    snprintf(buf, cap, "output differs at byte %zu (got %zu bytes, want %zu), from byte %zu:\n    got:  \"", off,
             got_len, want_len, from);
    append_escaped(buf, cap, got + from, got_n);
    strncat(buf, "\"\n    want: \"", cap - strlen(buf) - 1);
    append_escaped(buf, cap, want + from, want_n);
    strncat(buf, "\"", cap - strlen(buf) - 1);
}

static char *read_whole_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n, "short read on %s", path);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static json_t *load_json(const char *path) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    cr_assert(root, "%s: line %d: %s", path, err.line, err.text);
    return root;
}

/* s with every occurrence of from replaced by to. Caller owns; free with free(). */
static char *replace_all(const char *s, const char *from, const char *to) {
    size_t from_len = strlen(from), to_len = strlen(to), n = 0;
    for (const char *p = s; from_len && (p = strstr(p, from)) != NULL; p += from_len) n++;
    char *out = malloc(strlen(s) + n * to_len + 1), *w = out;
    cr_assert(out);
    const char *p = s, *hit;
    while (from_len && (hit = strstr(p, from)) != NULL) {
        memcpy(w, p, (size_t)(hit - p));
        w += hit - p;
        memcpy(w, to, to_len);
        w += to_len;
        p = hit + from_len;
    }
    strcpy(w, p);
    return out;
}

/* ---- one case: render and compare ---------------------------------------------- */

/* What a render must give: an output (error NULL), or an error. */
typedef struct expectation {
    const char *output;
    size_t output_len;
    const char *error;          /* raise_exception's message, or jinja2's message when error_kind is set */
    const char *error_kind;     /* jinja2's exception class; NULL when the template raised the error itself */
    const json_t *strftime_now; /* [{format, value}] the generator's fixed clock gave; NULL when unused */
} expectation;

/* Reads output / error / error_kind / strftime_now from an entry of the data file. */
static expectation expectation_from_json(const json_t *entry) {
    expectation e = {0};
    const json_t *out = json_object_get(entry, "output");
    if (out) {
        e.output = json_string_value(out);
        e.output_len = json_string_length(out);
        e.strftime_now = json_object_get(entry, "strftime_now");
    } else {
        e.error = json_string_value(json_object_get(entry, "error"));
        e.error_kind = json_string_value(json_object_get(entry, "error_kind"));
    }
    cr_assert(e.output || e.error, "data entry with neither output nor error");
    return e;
}

/* e.output with each strftime_now value of the generator's clock replaced by this clock's
 * (local time, as Python's datetime.now()). Caller owns; free with free(). */
static char *expected_at(const expectation *e, time_t when) {
    char *cur = malloc(e->output_len + 1);
    cr_assert(cur);
    memcpy(cur, e->output, e->output_len + 1);
    if (!e->strftime_now) return cur;
    struct tm tm;
    localtime_r(&when, &tm);
    size_t i;
    const json_t *call;
    json_array_foreach(e->strftime_now, i, call) {
        char now[256];
        const char *fmt = json_string_value(json_object_get(call, "format"));
        const char *value = json_string_value(json_object_get(call, "value"));
        cr_assert(fmt && value, "malformed strftime_now entry");
        cr_assert_gt(strftime(now, sizeof now, fmt, &tm), 0, "strftime(\"%s\") gave nothing", fmt);
        char *next = replace_all(cur, value, now);
        free(cur);
        cur = next;
    }
    return cur;
}

/* Renders ctx with t (NULL when parsing failed with parse_error) and checks the result
 * against e. When strip is set, one leading bos and one trailing eos are dropped from the
 * output first, as llama.cpp does (empty tokens are not stripped). */
static void check_case(failures *fl, const char *name, const tmpl *t, const char *parse_error, const json_t *ctx,
                       const expectation *e, bool strip, const char *bos, const char *eos) {
    if (!t) {
        if (e->error_kind && strcmp(e->error_kind, "TemplateSyntaxError") == 0) return;
        failures_add(fl, name, "template does not parse: %s", parse_error);
        return;
    }
    char *out = NULL;
    size_t out_len = 0;
    time_t before = time(NULL);
    sp_status st = tmpl_render(t, ctx, NULL, &out, &out_len);
    time_t after = time(NULL);
    char message[MESSAGE_CAP];
    snprintf(message, sizeof message, "%s", st == SP_OK ? "" : sp_last_error());

    if (!e->output) {
        if (st == SP_OK) {
            failures_add(fl, name, "rendered %zu bytes, but jinja2 fails: %s: %s", out_len,
                         e->error_kind ? e->error_kind : "raise_exception", e->error);
        } else if (!e->error_kind && (st != SP_ERR_INVALID_ARG || strcmp(message, e->error) != 0)) {
            failures_add(fl, name, "want raise_exception's SP_ERR_INVALID_ARG \"%s\", got %s \"%s\"", e->error,
                         sp_status_str(st), message);
        }
        free(out);
        return;
    }
    if (st != SP_OK) {
        failures_add(fl, name, "render failed with %s: %s", sp_status_str(st), message);
        return;
    }
    const char *got = out;
    size_t got_len = out_len;
    if (strip) {
        size_t bos_len = bos ? strlen(bos) : 0, eos_len = eos ? strlen(eos) : 0;
        if (bos_len && got_len >= bos_len && memcmp(got, bos, bos_len) == 0) got += bos_len, got_len -= bos_len;
        if (eos_len && got_len >= eos_len && memcmp(got + got_len - eos_len, eos, eos_len) == 0) got_len -= eos_len;
    }
    /* strftime_now reads the clock during the render: accept its value before or after */
    bool same = false;
    char *want = NULL;
    for (int k = 0; k < 2 && !same; k++) {
        if (k == 1 && (!e->strftime_now || after == before)) break;
        free(want);
        want = expected_at(e, k == 0 ? before : after);
        same = strlen(want) == got_len && memcmp(want, got, got_len) == 0;
    }
    if (!same) {
        char diff[MESSAGE_CAP];
        describe_diff(diff, sizeof diff, got, got_len, want, strlen(want));
        failures_add(fl, name, "%s", diff);
    }
    free(want);
    free(out);
}

/* ---- llama.cpp's table ------------------------------------------------------------- */

/* The entry of llama_cpp_divergent for a case name, or NULL. */
static const json_t *find_divergent(const json_t *expected_root, const char *name) {
    size_t i;
    const json_t *entry;
    json_array_foreach(json_object_get(expected_root, "llama_cpp_divergent"), i, entry) {
        if (strcmp(json_string_value(json_object_get(entry, "name")), name) == 0) return entry;
    }
    return NULL;
}

Test(tmpl_cases, llama_cpp_table) {
    char path[1024];
    testdata_path(path, sizeof path, "templates/chat-template-cases.json");
    TESTDATA_REQUIRE(path);
    json_t *table = load_json(path);
    json_t *expected_root = load_json(EXPECTED_PATH);
    json_t *conversation = json_object_get(table, "conversation");
    json_t *add_generation_prompt = json_object_get(table, "add_generation_prompt");
    cr_assert(json_is_array(conversation) && json_is_boolean(add_generation_prompt), "%s: malformed", path);

    failures fl = {0};
    int n_cases = 0, n_divergent = 0;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(table, "cases"), i, c) {
        if (!json_is_true(json_object_get(c, "supported_with_jinja"))) continue;
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *source = json_string_value(json_object_get(c, "template_str"));
        const char *bos = json_string_value(json_object_get(c, "bos_token"));
        const char *eos = json_string_value(json_object_get(c, "eos_token"));
        cr_assert(name && source && bos && eos, "%s: case %zu malformed", path, i);
        n_cases++;

        expectation e = {0};
        const json_t *divergent = find_divergent(expected_root, name);
        if (divergent) {
            e = expectation_from_json(divergent);
            n_divergent++;
        } else {
            const json_t *want = json_object_get(c, "expected_output_jinja");
            if (json_string_length(want) == 0) want = json_object_get(c, "expected_output");
            e.output = json_string_value(want);
            e.output_len = json_string_length(want);
        }

        json_t *ctx = json_object();
        json_object_set(ctx, "messages", conversation);
        json_object_set(ctx, "add_generation_prompt", add_generation_prompt);
        json_object_set_new(ctx, "bos_token", json_string(bos));
        json_object_set_new(ctx, "eos_token", json_string(eos));
        tmpl *t = NULL;
        char parse_error[MESSAGE_CAP] = "";
        if (tmpl_parse(source, json_string_length(json_object_get(c, "template_str")), &t) != SP_OK) {
            snprintf(parse_error, sizeof parse_error, "%s", sp_last_error());
            t = NULL;
        }
        check_case(&fl, name, t, parse_error, ctx, &e, true, bos, eos);
        tmpl_destroy(t);
        json_decref(ctx);
    }
    cr_log_info("llama.cpp table: %d cases (%d held to jinja2 where minja differs), %d fail", n_cases, n_divergent,
                fl.count);
    cr_assert_geq(n_cases, 29, "%s: only %d cases render with Jinja", path, n_cases);
    cr_assert_eq(n_divergent, (int)json_array_size(json_object_get(expected_root, "llama_cpp_divergent")),
                 "a llama_cpp_divergent entry of %s names no case of %s", EXPECTED_PATH, path);
    json_decref(expected_root);
    json_decref(table);
    failures_assert(&fl, "llama.cpp table", n_cases);
}

/* ---- the jinja2 data --------------------------------------------------------------- */

/* One template of the data file, parsed once. */
typedef struct loaded_template {
    const char *name;
    const json_t *special_tokens;
    const char *skipped; /* why its entries are skipped (fixture absent), or NULL */
    tmpl *t;             /* NULL when it does not parse (or is skipped) */
    char parse_error[512];
} loaded_template;

/* The default model's tokenizer.chat_template. Caller owns; free with free(). */
static char *default_model_source(size_t *len) {
    gguf_file *f;
    gguf_str s;
    cr_assert_eq(gguf_open(DEFAULT_MODEL_PATH, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gguf_get_str(f, "tokenizer.chat_template", &s), SP_OK, "%s", sp_last_error());
    char *source = malloc(s.len + 1);
    cr_assert(source);
    memcpy(source, s.ptr, s.len);
    source[s.len] = '\0';
    *len = s.len;
    gguf_close(f);
    return source;
}

static void template_load(loaded_template *lt, const char *name, const json_t *info, bool have_testdata,
                          bool have_model) {
    lt->name = name;
    lt->special_tokens = json_object_get(info, "special_tokens");
    cr_assert(json_is_object(lt->special_tokens), "%s: template %s has no special_tokens", EXPECTED_PATH, name);
    const char *file = json_string_value(json_object_get(info, "file"));
    const char *model = json_string_value(json_object_get(info, "model"));
    cr_assert(file || (model && strcmp(model, "default") == 0), "%s: template %s: no file and no default model",
              EXPECTED_PATH, name);
    char *source;
    size_t len;
    if (file) {
        if (!have_testdata) {
            lt->skipped = "shared test data absent";
            return;
        }
        char rel[512], path[1024];
        snprintf(rel, sizeof rel, "templates/%s", file);
        source = read_whole_file(testdata_path(path, sizeof path, rel), &len);
    } else {
        if (!have_model) {
            lt->skipped = "default model absent";
            return;
        }
        source = default_model_source(&len);
    }
    if (tmpl_parse(source, len, &lt->t) != SP_OK) {
        snprintf(lt->parse_error, sizeof lt->parse_error, "%s", sp_last_error());
        lt->t = NULL;
    }
    free(source);
}

/* Checks that every *.jinja file of the shared directory is a template of the data. */
static void check_all_files_covered(const char *dir, const json_t *templates) {
    DIR *d = opendir(dir);
    cr_assert(d, "cannot list %s", dir);
    struct dirent *de;
    int n_files = 0;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 6, ".jinja") != 0) continue;
        n_files++;
        bool found = false;
        const char *key;
        const json_t *info;
        json_object_foreach((json_t *)templates, key, info) {
            const char *file = json_string_value(json_object_get(info, "file"));
            if (file && strcmp(file, de->d_name) == 0) found = true;
        }
        cr_expect(found, "%s/%s is not in %s: run tools/make_template_cases.py", dir, de->d_name, EXPECTED_PATH);
    }
    closedir(d);
    cr_assert_gt(n_files, 0, "no .jinja files in %s", dir);
}

Test(tmpl_cases, jinja2_expected) {
    json_t *root = load_json(EXPECTED_PATH);
    const json_t *templates = json_object_get(root, "templates");
    const json_t *conversations = json_object_get(root, "conversations");
    const json_t *expected = json_object_get(root, "expected");
    cr_assert(json_is_object(templates) && json_is_array(conversations) && json_is_array(expected), "%s: malformed",
              EXPECTED_PATH);
    size_t n_templates = json_object_size(templates), n_conversations = json_array_size(conversations);
    cr_assert_geq(n_conversations, MIN_CONVERSATIONS, "%s: %zu conversations", EXPECTED_PATH, n_conversations);
    cr_assert_eq(json_array_size(expected), n_templates * n_conversations,
                 "%s: %zu entries for %zu templates x %zu conversations", EXPECTED_PATH, json_array_size(expected),
                 n_templates, n_conversations);

    char dir[1024];
    testdata_path(dir, sizeof dir, "templates");
    bool have_testdata = access(dir, R_OK) == 0, have_model = access(DEFAULT_MODEL_PATH, R_OK) == 0;
    if (have_testdata) check_all_files_covered(dir, templates);

    loaded_template *loaded = calloc(n_templates, sizeof *loaded);
    cr_assert(loaded);
    size_t n_loaded = 0;
    const char *key;
    const json_t *info;
    json_object_foreach((json_t *)templates, key, info)
        template_load(&loaded[n_loaded++], key, info, have_testdata, have_model);

    failures fl = {0};
    int n_checked = 0, n_skipped = 0, n_errors = 0;
    size_t i;
    const json_t *entry;
    json_array_foreach(expected, i, entry) {
        const char *tname = json_string_value(json_object_get(entry, "template"));
        const char *cname = json_string_value(json_object_get(entry, "conversation"));
        cr_assert(tname && cname, "%s: entry %zu malformed", EXPECTED_PATH, i);
        loaded_template *lt = NULL;
        for (size_t k = 0; k < n_loaded; k++)
            if (strcmp(loaded[k].name, tname) == 0) lt = &loaded[k];
        cr_assert(lt, "%s: entry %zu names unknown template %s", EXPECTED_PATH, i, tname);
        if (lt->skipped) {
            n_skipped++;
            continue;
        }
        const json_t *conv = NULL, *c;
        size_t k;
        json_array_foreach(conversations, k, c) {
            if (strcmp(json_string_value(json_object_get(c, "name")), cname) == 0) conv = c;
        }
        cr_assert(conv, "%s: entry %zu names unknown conversation %s", EXPECTED_PATH, i, cname);

        json_t *ctx = json_deep_copy(json_object_get(conv, "context"));
        cr_assert(json_is_object(ctx), "%s: conversation %s has no context", EXPECTED_PATH, cname);
        json_object_update(ctx, (json_t *)lt->special_tokens);
        expectation e = expectation_from_json(entry);
        n_errors += e.output == NULL;
        char name[400];
        snprintf(name, sizeof name, "%s / %s", tname, cname);
        check_case(&fl, name, lt->t, lt->parse_error, ctx, &e, false, NULL, NULL);
        json_decref(ctx);
        n_checked++;
    }
    for (size_t k = 0; k < n_loaded; k++) tmpl_destroy(loaded[k].t);
    if (!have_testdata) cr_log_info("%s absent: the entries of the shared templates are skipped", dir);
    if (!have_model) cr_log_info("%s absent: the entries of its template are skipped", DEFAULT_MODEL_PATH);
    free(loaded);
    json_decref(root);
    cr_log_info("jinja2 data: %d of %d entries checked (%d expect an error), %d skipped, %d fail", n_checked,
                n_checked + n_skipped, n_errors, n_skipped, fl.count);
    if (n_checked == 0) cr_skip_test("neither %s nor %s present", dir, DEFAULT_MODEL_PATH);
    failures_assert(&fl, "jinja2 data", n_checked);
}

/* ---- the default model ----------------------------------------------------------------- */

Test(tmpl_cases, default_model_template_present) {
    TESTDATA_REQUIRE(DEFAULT_MODEL_PATH);
    json_t *root = load_json(EXPECTED_PATH);
    const char *name = NULL, *key;
    const json_t *info, *special = NULL;
    json_object_foreach(json_object_get(root, "templates"), key, info) {
        const char *model = json_string_value(json_object_get(info, "model"));
        if (model && strcmp(model, "default") == 0) name = key, special = json_object_get(info, "special_tokens");
    }
    cr_assert(name, "%s has no template of the default model", EXPECTED_PATH);
    int n_rendered = 0;
    size_t i;
    const json_t *entry;
    json_array_foreach(json_object_get(root, "expected"), i, entry) {
        if (strcmp(json_string_value(json_object_get(entry, "template")), name) == 0 &&
            json_object_get(entry, "output"))
            n_rendered++;
    }
    cr_assert_geq(n_rendered, MIN_CONVERSATIONS, "%s: the default model's template renders only %d conversations",
                  EXPECTED_PATH, n_rendered);

    size_t len;
    char *source = default_model_source(&len);
    cr_assert_gt(len, 0, "%s: empty tokenizer.chat_template", DEFAULT_MODEL_PATH);
    tmpl *t;
    cr_assert_eq(tmpl_parse(source, len, &t), SP_OK, "%s: %s", DEFAULT_MODEL_PATH, sp_last_error());
    tmpl_destroy(t);

    /* template.h's GGUF helpers see what the generator's own reader saw */
    gguf_file *f;
    cr_assert_eq(gguf_open(DEFAULT_MODEL_PATH, &f), SP_OK, "%s", sp_last_error());
    char *from_helper;
    size_t helper_len;
    cr_assert_eq(tmpl_source_from_gguf(f, &from_helper, &helper_len), SP_OK, "%s", sp_last_error());
    cr_expect(helper_len == len && memcmp(from_helper, source, len) == 0,
              "tmpl_source_from_gguf differs from tokenizer.chat_template");
    json_t *ctx = json_object();
    cr_assert_eq(tmpl_context_add_special_tokens(f, ctx), SP_OK, "%s", sp_last_error());
    char *got = json_dumps(ctx, JSON_SORT_KEYS), *want = json_dumps(special, JSON_SORT_KEYS);
    cr_expect(json_equal(ctx, (json_t *)special), "special tokens: tmpl_context_add_special_tokens gives %s, want %s",
              got, want);
    free(got);
    free(want);
    json_decref(ctx);
    free(from_helper);
    gguf_close(f);
    free(source);
    json_decref(root);
}

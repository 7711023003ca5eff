/* test_template.c: the Jinja engine feature by feature.
 *
 *   snippets      tests/data/templates/snippets_expected.json (tools/make_template_snippets.py):
 *                 ~100 one-feature programs rendered by real jinja2; each must render the same
 *                 bytes here, or fail here where jinja2 fails
 *   errors        parse errors name line and column; raise_exception is SP_ERR_INVALID_ARG with
 *                 the template's own text; runtime errors name the line
 *   limits        steps, output size, memory and macro recursion stop a runaway render
 *   threads       one parsed template rendered from several threads at once
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

#define SNIPPETS_PATH "tests/data/templates/snippets_expected.json"

/* Parses and renders src with the JSON context text; returns the status, *out the text. */
static sp_status render(const char *src, const char *context_json, const tmpl_limits *limits, char **out) {
    *out = NULL;
    tmpl *t;
    sp_status st = tmpl_parse(src, strlen(src), &t);
    if (st != SP_OK) return st;
    json_error_t jerr;
    json_t *ctx = json_loads(context_json, 0, &jerr);
    cr_assert_not_null(ctx, "bad test context: %s", jerr.text);
    size_t len;
    st = tmpl_render(t, ctx, limits, out, &len);
    if (st == SP_OK) cr_assert_eq(strlen(*out), len);
    json_decref(ctx);
    tmpl_destroy(t);
    return st;
}

static void expect_render(const char *src, const char *context_json, const char *want) {
    char *out;
    sp_status st = render(src, context_json, NULL, &out);
    cr_assert_eq(st, SP_OK, "%s: %s", src, sp_last_error());
    cr_expect_str_eq(out, want, "%s", src);
    free(out);
}

Test(tmpl_snippets, match_jinja2) {
    json_error_t jerr;
    json_t *data = json_load_file(SNIPPETS_PATH, 0, &jerr);
    cr_assert_not_null(data, "%s: %s", SNIPPETS_PATH, jerr.text);
    json_t *context = json_object_get(data, "context"), *cases = json_object_get(data, "cases");
    cr_assert(json_is_object(context) && json_array_size(cases) >= 100, "snippet data incomplete");
    size_t i, failures = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *src = json_string_value(json_object_get(c, "template"));
        json_t *want = json_object_get(c, "output");
        tmpl *t;
        char *out = NULL;
        size_t len = 0;
        sp_status st = tmpl_parse(src, strlen(src), &t);
        if (st == SP_OK) {
            st = tmpl_render(t, context, NULL, &out, &len);
            tmpl_destroy(t);
        }
        if (want) {
            if (st != SP_OK) {
                cr_log_error("%s: failed: %s", name, sp_last_error());
                failures++;
            } else if (len != json_string_length(want) || memcmp(out, json_string_value(want), len) != 0) {
                cr_log_error("%s:\n  got  [%s]\n  want [%s]", name, out, json_string_value(want));
                failures++;
            }
        } else if (st == SP_OK) {
            cr_log_error("%s: rendered [%s] but jinja2 fails: %s", name, out,
                         json_string_value(json_object_get(c, "error")));
            failures++;
        } else if (!json_object_get(c, "error_kind")) { /* raise_exception: the text itself */
            cr_expect_eq(st, SP_ERR_INVALID_ARG, "%s", name);
            cr_expect_str_eq(sp_last_error(), json_string_value(json_object_get(c, "error")), "%s", name);
        }
        free(out);
    }
    cr_expect_eq(failures, 0, "%zu of %zu snippets differ from jinja2 (see the log)", failures, json_array_size(cases));
    json_decref(data);
}

/* ---- errors --------------------------------------------------------------------- */

Test(tmpl_errors, parse_error_names_line_and_column) {
    tmpl *t;
    const char *src = "line one\n{% for x in xs %}\n  {{ x + }}\n{% endfor %}";
    cr_assert_eq(tmpl_parse(src, strlen(src), &t), SP_ERR_FORMAT);
    cr_expect_null(t);
    cr_expect(strstr(sp_last_error(), "line 3, column 10") != NULL, "%s", sp_last_error());

    src = "a\nb\n{% if x %}never closed";
    cr_assert_eq(tmpl_parse(src, strlen(src), &t), SP_ERR_FORMAT);
    cr_expect(strstr(sp_last_error(), "'if' opened on line 3 is not closed") != NULL, "%s", sp_last_error());

    src = "{{ 'unterminated }}";
    cr_assert_eq(tmpl_parse(src, strlen(src), &t), SP_ERR_FORMAT);
    cr_expect(strstr(sp_last_error(), "line 1, column 4: unterminated string") != NULL, "%s", sp_last_error());

    src = "{% endif %}";
    cr_assert_eq(tmpl_parse(src, strlen(src), &t), SP_ERR_FORMAT);
    cr_expect(strstr(sp_last_error(), "unexpected 'endif'") != NULL, "%s", sp_last_error());
}

Test(tmpl_errors, raise_exception_is_invalid_arg_with_the_templates_text) {
    char *out;
    sp_status st =
        render("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
               "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", NULL, &out);
    cr_assert_eq(st, SP_ERR_INVALID_ARG);
    cr_expect_str_eq(sp_last_error(), "System role not supported");
    cr_expect_null(out);
}

Test(tmpl_errors, runtime_error_names_the_line) {
    char *out;
    sp_status st = render("ok\n{{ 'a' + 1 }}", "{}", NULL, &out);
    cr_assert_eq(st, SP_ERR_FORMAT);
    cr_expect(strstr(sp_last_error(), "line 2:") == sp_last_error(), "%s", sp_last_error());
    cr_expect(strstr(sp_last_error(), "'str' and 'int'") != NULL, "%s", sp_last_error());
}

Test(tmpl_errors, undefined_prints_empty_but_errors_on_use) {
    expect_render("[{{ missing }}][{{ missing|default('d') }}][{% for x in missing %}x{% endfor %}]", "{}", "[][d][]");
    char *out;
    cr_expect_eq(render("{{ missing.attr }}", "{}", NULL, &out), SP_ERR_FORMAT);
    cr_expect(strstr(sp_last_error(), "'missing' is undefined") != NULL, "%s", sp_last_error());
}

Test(tmpl_errors, context_must_be_an_object) {
    tmpl *t;
    cr_assert_eq(tmpl_parse("x", 1, &t), SP_OK);
    json_t *arr = json_array();
    char *out;
    size_t len;
    cr_expect_eq(tmpl_render(t, arr, NULL, &out, &len), SP_ERR_INVALID_ARG);
    json_decref(arr);
    tmpl_destroy(t);
}

/* ---- limits --------------------------------------------------------------------- */

Test(tmpl_limits, steps_stop_a_runaway_loop) {
    char *out;
    sp_status st =
        render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", NULL, &out);
    cr_assert_eq(st, SP_ERR_RANGE);
    cr_expect(strstr(sp_last_error(), "steps") != NULL, "%s", sp_last_error());
}

Test(tmpl_limits, output_size) {
    tmpl_limits lim = {.max_output_bytes = 1000};
    char *out;
    cr_assert_eq(render("{% for i in range(1000) %}0123456789{% endfor %}", "{}", &lim, &out), SP_ERR_RANGE);
    cr_expect(strstr(sp_last_error(), "output") != NULL, "%s", sp_last_error());
    /* captured text counts too */
    cr_assert_eq(render("{% set x %}{% for i in range(1000) %}0123456789{% endfor %}{% endset %}", "{}", &lim, &out),
                 SP_ERR_RANGE);
    /* and just under the limit renders */
    cr_assert_eq(render("{% for i in range(100) %}0123456789{% endfor %}", "{}", &lim, &out), SP_OK);
    cr_expect_eq(strlen(out), 1000);
    free(out);
}

Test(tmpl_limits, memory) {
    tmpl_limits lim = {.max_memory_bytes = 8 << 20};
    char *out;
    sp_status st =
        render("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "{}",
               &lim, &out);
    cr_assert_eq(st, SP_ERR_RANGE);
    cr_expect(strstr(sp_last_error(), "memory") != NULL, "%s", sp_last_error());
}

Test(tmpl_limits, macro_recursion) {
    char *out;
    sp_status st = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", NULL, &out);
    cr_assert_eq(st, SP_ERR_RANGE);
    cr_expect(strstr(sp_last_error(), "macro") != NULL, "%s", sp_last_error());
}

Test(tmpl_limits, deep_nesting_is_a_parse_error) {
    char src[2100] = "{{ ";
    for (int i = 0; i < 1000; i++) strcat(src, "(");
    strcat(src, "1");
    for (int i = 0; i < 1000; i++) strcat(src, ")");
    strcat(src, " }}");
    tmpl *t;
    cr_assert_eq(tmpl_parse(src, strlen(src), &t), SP_ERR_FORMAT);
    cr_expect(strstr(sp_last_error(), "nested too deeply") != NULL, "%s", sp_last_error());
}

Test(tmpl_limits, review_findings_stop_cleanly) {
    char *out;
    /* truncate with a leeway that overflowed length + leeway */
    cr_assert_eq(render("{{ 'abcdefghij'|truncate(4000, leeway=9223372036854775807) }}", "{}", NULL, &out), SP_OK);
    cr_expect_str_eq(out, "abcdefghij");
    free(out);
    /* a sort or unique over 100000 items is bounded by the step limit, not quadratic */
    tmpl_limits lim = {.max_steps = 200000};
    cr_expect_eq(render("{{ range(100000)|unique|list|length }}", "{}", &lim, &out), SP_ERR_RANGE);
    cr_assert_eq(render("{{ (range(100000)|reverse|list|sort)[:3] }}", "{}", NULL, &out), SP_OK);
    cr_expect_str_eq(out, "[0, 1, 2]");
    free(out);
    /* repetition bounded before it allocates */
    tmpl_limits huge = {.max_output_bytes = SIZE_MAX};
    cr_expect_neq(render("{{ ([1] * 768614336404564651)|length }}", "{}", &huge, &out), SP_OK);
}

Test(tmpl_limits, long_elif_chain_and_deep_context) {
    /* 20000 elif branches parse and render without deep recursion */
    size_t n = 20000, cap = n * 32 + 64, len = 0;
    char *src = malloc(cap);
    len += (size_t)snprintf(src + len, cap - len, "{%%if x == -1%%}a");
    for (size_t i = 0; i < n; i++) len += (size_t)snprintf(src + len, cap - len, "{%%elif x == %zu%%}%zu", i, i % 10);
    snprintf(src + len, cap - len, "{%%endif%%}");
    char *out;
    cr_assert_eq(render(src, "{\"x\": 19999}", NULL, &out), SP_OK, "%s", sp_last_error());
    cr_expect_str_eq(out, "9");
    free(out);
    free(src);
    /* a context nested past the value depth limit fails instead of recursing */
    json_t *deep = json_array();
    for (int i = 0; i < 5000; i++) {
        json_t *outer = json_array();
        json_array_append_new(outer, deep);
        deep = outer;
    }
    json_t *ctx = json_pack("{s:o}", "messages", deep);
    tmpl *t;
    cr_assert_eq(tmpl_parse("{{ messages|length }}", strlen("{{ messages|length }}"), &t), SP_OK);
    size_t out_len;
    cr_expect_eq(tmpl_render(t, ctx, NULL, &out, &out_len), SP_ERR_RANGE);
    tmpl_destroy(t);
    json_decref(ctx);
}

/* ---- threads -------------------------------------------------------------------- */

typedef struct render_job {
    const tmpl *t;
    json_t *ctx;
    char *out;
    sp_status st;
} render_job;

static void *render_thread(void *arg) {
    render_job *job = arg;
    for (int i = 0; i < 200; i++) {
        free(job->out);
        size_t len;
        job->st = tmpl_render(job->t, job->ctx, NULL, &job->out, &len);
        if (job->st != SP_OK) break;
    }
    return NULL;
}

Test(tmpl_threads, one_template_many_renders_at_once) {
    const char *src =
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content|trim }}{% if not loop.last %}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}";
    tmpl *t;
    cr_assert_eq(tmpl_parse(src, strlen(src), &t), SP_OK);
    render_job jobs[4] = {0};
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        char ctx[256];
        snprintf(ctx, sizeof ctx,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \" thread %d \"}], \"add_generation_prompt\": %s}",
                 i, i % 2 ? "true" : "false");
        jobs[i].t = t;
        jobs[i].ctx = json_loads(ctx, 0, NULL);
        pthread_create(&threads[i], NULL, render_thread, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        cr_assert_eq(jobs[i].st, SP_OK);
        char want[128];
        snprintf(want, sizeof want, "<|user|>thread %d%s", i, i % 2 ? "<|assistant|>" : "");
        cr_expect_str_eq(jobs[i].out, want);
        free(jobs[i].out);
        json_decref(jobs[i].ctx);
    }
    tmpl_destroy(t);
}

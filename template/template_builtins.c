/* template_builtins.c: what a template can call besides filters: the argument helpers
 * every builtin uses, dict methods and method binding, the global functions (range,
 * namespace, dict, raise_exception, strftime_now) and the tests (x is defined ...).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/template_internal.h"

/* jinja2's sandbox refuses larger ranges (sandbox.MAX_RANGE) */
#define MAX_RANGE 100000
#define NONE      tmpl__none

/* ---- arguments ------------------------------------------------------------------ */

tv tmpl__arg(const tmpl_args *a, size_t i, const char *name, tv dflt) {
    if (i < a->n_pos) return a->pos[i];
    for (size_t k = 0; k < a->n_kw; k++)
        if (name && strcmp(a->kw_names[k], name) == 0) return a->kw_vals[k];
    return dflt;
}

bool tmpl__arg_given(const tmpl_args *a, size_t i, const char *name) {
    if (i < a->n_pos) return true;
    for (size_t k = 0; k < a->n_kw; k++)
        if (name && strcmp(a->kw_names[k], name) == 0) return true;
    return false;
}

tv tmpl__arg_str(tmpl_render_state *r, const char *what, tv v) {
    if (v.kind != TV_STR) tmpl__fail(r, SP_ERR_FORMAT, "%s expects a string, got %s", what, tmpl__type_name(v));
    return v;
}

int64_t tmpl__arg_int(tmpl_render_state *r, const char *what, tv v) {
    if (v.kind == TV_INT) return v.i;
    if (v.kind == TV_BOOL) return v.b;
    tmpl__fail(r, SP_ERR_FORMAT, "%s expects an integer, got %s", what, tmpl__type_name(v));
}

tv tmpl__dict_items(tmpl_render_state *r, tdict *d) {
    tv out = tmpl__list_new(&r->arena, d->n);
    for (size_t i = 0; i < d->n; i++) {
        tv pair = tmpl__list_new(&r->arena, 2);
        pair.list->is_tuple = true;
        tmpl__list_push(&r->arena, pair.list, d->keys[i]);
        tmpl__list_push(&r->arena, pair.list, d->vals[i]);
        tmpl__list_push(&r->arena, out.list, pair);
    }
    return out;
}

static tv m_items(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)a;
    return tmpl__dict_items(r, f->self.dict);
}
static tv m_keys(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)a;
    tdict *d = f->self.dict;
    tv out = tmpl__list_new(&r->arena, d->n);
    for (size_t i = 0; i < d->n; i++) tmpl__list_push(&r->arena, out.list, d->keys[i]);
    return out;
}
static tv m_values(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)a;
    tdict *d = f->self.dict;
    tv out = tmpl__list_new(&r->arena, d->n);
    for (size_t i = 0; i < d->n; i++) tmpl__list_push(&r->arena, out.list, d->vals[i]);
    return out;
}
static tv m_get(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)r;
    tv *v = tmpl__dict_get_value(f->self.dict, tmpl__arg(a, 0, "key", NONE));
    return v ? *v : tmpl__arg(a, 1, "default", NONE);
}

typedef struct named_fn {
    const char *name;
    tmpl_builtin_fn fn;
} named_fn;

static tv m_copy(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)a;
    tdict *d = f->self.dict;
    tv out = tmpl__dict_new(&r->arena, d->n);
    for (size_t i = 0; i < d->n; i++) tmpl__dict_set(&r->arena, out.dict, d->keys[i], d->vals[i]);
    return out;
}

static const named_fn DICT_METHODS[] = {{"items", m_items}, {"keys", m_keys}, {"values", m_values},
                                        {"get", m_get},     {"copy", m_copy}, {NULL, NULL}};

/* ---- list methods (the sandbox allows only those that do not modify) ------------ */

static tv m_list_index(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    tlist *l = f->self.list;
    tv x = tmpl__arg(a, 0, "value", tmpl__undefined);
    for (size_t i = 0; i < l->n; i++)
        if (tmpl__equal(l->items[i], x)) return tmpl__int((int64_t)i);
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, 32);
    tmpl__append_repr(&b, x);
    tmpl__fail(r, SP_ERR_FORMAT, "%.*s is not in list", (int)b.len, b.data);
}

static tv m_list_count(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)r;
    tlist *l = f->self.list;
    tv x = tmpl__arg(a, 0, "value", tmpl__undefined);
    int64_t n = 0;
    for (size_t i = 0; i < l->n; i++) n += tmpl__equal(l->items[i], x);
    return tmpl__int(n);
}

static const named_fn LIST_METHODS[] = {{"index", m_list_index}, {"count", m_list_count}, {NULL, NULL}};

static const named_fn *find_fn(const named_fn *table, const char *name, size_t len) {
    for (; table->name; table++)
        if (strlen(table->name) == len && memcmp(table->name, name, len) == 0) return table;
    return NULL;
}

tv tmpl__bind_method(tmpl_render_state *r, tv v, const char *name, size_t len) {
    tmpl_builtin_fn fn = NULL;
    if (v.kind == TV_STR) fn = tmpl__str_method(name, len);
    const named_fn *m = NULL;
    if (v.kind == TV_DICT && !v.dict->is_namespace) m = find_fn(DICT_METHODS, name, len);
    if (v.kind == TV_LIST && !v.list->iter_name) m = find_fn(LIST_METHODS, name, len);
    if (m) fn = m->fn;
    if (!fn) return tmpl__undefined_named(name, len);
    tfunc *f = tmpl__alloc(&r->arena, sizeof(tfunc));
    f->name = tmpl__strndup(&r->arena, name, len);
    f->fn = fn;
    f->self = v;
    return (tv){.kind = TV_FUNC, .func = f};
}

/* ---- global functions ----------------------------------------------------------- */

static tv g_range(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)f;
    int64_t start = 0, stop, stride = 1;
    if (a->n_pos == 1) {
        stop = tmpl__arg_int(r, "range", a->pos[0]);
    } else if (a->n_pos == 2 || a->n_pos == 3) {
        start = tmpl__arg_int(r, "range", a->pos[0]);
        stop = tmpl__arg_int(r, "range", a->pos[1]);
        if (a->n_pos == 3) stride = tmpl__arg_int(r, "range", a->pos[2]);
    } else {
        tmpl__fail(r, SP_ERR_FORMAT, "range expected 1 to 3 arguments, got %zu", a->n_pos);
    }
    if (stride == 0) tmpl__fail(r, SP_ERR_FORMAT, "range() arg 3 must not be zero");
    double count = ceil(((double)stop - (double)start) / (double)stride);
    if (count > MAX_RANGE)
        tmpl__fail(r, SP_ERR_RANGE, "range too big: the sandbox blocks ranges larger than %d", MAX_RANGE);
    tv out = tmpl__list_new(&r->arena, count > 0 ? (size_t)count : 0);
    for (int64_t i = start; stride > 0 ? i < stop : i > stop;) {
        tmpl__list_push(&r->arena, out.list, tmpl__int(i));
        if (__builtin_add_overflow(i, stride, &i)) break; /* past INT64 limits: past stop too */
    }
    return out;
}

/* namespace(...) and dict(...): a mapping from keyword arguments (and a dict given first) */
static tv mapping_from_args(tmpl_render_state *r, const char *what, const tmpl_args *a, bool is_namespace) {
    tv d = tmpl__dict_new(&r->arena, a->n_kw);
    d.dict->is_namespace = is_namespace;
    if (a->n_pos > 1) tmpl__fail(r, SP_ERR_FORMAT, "%s() takes at most one positional argument", what);
    if (a->n_pos == 1) {
        tv init = a->pos[0];
        if (init.kind != TV_DICT)
            tmpl__fail(r, SP_ERR_FORMAT, "%s() expects a mapping, got %s", what, tmpl__type_name(init));
        for (size_t i = 0; i < init.dict->n; i++)
            tmpl__dict_set(&r->arena, d.dict, init.dict->keys[i], init.dict->vals[i]);
    }
    for (size_t i = 0; i < a->n_kw; i++)
        tmpl__dict_set(&r->arena, d.dict, tmpl__str(a->kw_names[i], strlen(a->kw_names[i])), a->kw_vals[i]);
    return d;
}

static tv g_namespace(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)f;
    return mapping_from_args(r, "namespace", a, true);
}
static tv g_dict(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)f;
    return mapping_from_args(r, "dict", a, false);
}

static tv g_raise_exception(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)f;
    tv msg = tmpl__to_str(r, tmpl__arg(a, 0, "message", tmpl__str("", 0)));
    tmpl__fail(r, SP_ERR_INVALID_ARG, "%.*s", (int)msg.len, msg.s);
}

static tv g_strftime_now(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)f;
    tv fmt = tmpl__arg_str(r, "strftime_now", tmpl__arg(a, 0, "format", NONE));
    char cfmt[256], out[512];
    if (fmt.len >= sizeof(cfmt)) tmpl__fail(r, SP_ERR_FORMAT, "strftime_now: format too long");
    memcpy(cfmt, fmt.s, fmt.len);
    cfmt[fmt.len] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t n = strftime(out, sizeof(out), cfmt, &tm);
    return tmpl__str_copy(&r->arena, out, n);
}

/* Globals are shared by every render: one immutable tfunc each (self unused). */
static const tfunc GLOBALS[] = {{"range", g_range, {.kind = TV_NONE}},
                                {"namespace", g_namespace, {.kind = TV_NONE}},
                                {"dict", g_dict, {.kind = TV_NONE}},
                                {"raise_exception", g_raise_exception, {.kind = TV_NONE}},
                                {"strftime_now", g_strftime_now, {.kind = TV_NONE}}};

tv tmpl__global_func(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof(GLOBALS) / sizeof(GLOBALS[0]); i++)
        if (strlen(GLOBALS[i].name) == len && memcmp(GLOBALS[i].name, name, len) == 0)
            return (tv){.kind = TV_FUNC, .func = (tfunc *)&GLOBALS[i]};
    return tmpl__undefined;
}

/* ---- tests ---------------------------------------------------------------------- */

typedef bool (*test_fn)(tmpl_render_state *r, tv v, const tmpl_args *a);

static bool t_defined(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind != TV_UNDEFINED;
}
static bool t_undefined(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return !t_defined(r, v, a);
}
static bool t_none(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_NONE;
}
static bool t_boolean(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_BOOL;
}
static bool t_true(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_BOOL && v.b;
}
static bool t_false(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_BOOL && !v.b;
}
static bool t_integer(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_INT;
}
static bool t_float(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_FLOAT;
}
static bool t_number(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_INT || v.kind == TV_FLOAT || v.kind == TV_BOOL;
}
static bool t_string(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_STR;
}
static bool t_mapping(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_DICT && !v.dict->is_namespace;
}
static bool t_iterable(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_STR || v.kind == TV_LIST || (v.kind == TV_DICT && !v.dict->is_namespace) ||
           v.kind == TV_UNDEFINED;
}
static bool t_sequence(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_STR || v.kind == TV_LIST || (v.kind == TV_DICT && !v.dict->is_namespace);
}
static bool t_callable(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_FUNC || v.kind == TV_MACRO;
}
static bool t_equalto(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r;
    return tmpl__equal(v, tmpl__arg(a, 0, "other", tmpl__undefined));
}
static bool t_ne(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return !t_equalto(r, v, a);
}
static bool t_sameas(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r;
    tv o = tmpl__arg(a, 0, "other", tmpl__undefined);
    if (v.kind != o.kind) return false;
    switch (v.kind) {
    case TV_NONE:
    case TV_UNDEFINED: return true;
    case TV_BOOL: return v.b == o.b;
    case TV_LIST: return v.list == o.list;
    case TV_DICT: return v.dict == o.dict;
    default: return tmpl__equal(v, o);
    }
}
static int64_t test_int(tmpl_render_state *r, tv v, const char *what) {
    if (v.kind == TV_INT) return v.i;
    if (v.kind == TV_BOOL) return v.b;
    if (v.kind == TV_FLOAT && v.f == floor(v.f) && fabs(v.f) < 9e18) return (int64_t)v.f;
    tmpl__fail(r, SP_ERR_FORMAT, "test '%s' needs an integer, got %s", what, tmpl__type_name(v));
}
static bool t_odd(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return test_int(r, v, "odd") % 2 != 0;
}
static bool t_even(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return test_int(r, v, "even") % 2 == 0;
}
static bool t_divisibleby(tmpl_render_state *r, tv v, const tmpl_args *a) {
    int64_t d = test_int(r, tmpl__arg(a, 0, "num", tmpl__undefined), "divisibleby");
    if (d == 0) tmpl__fail(r, SP_ERR_FORMAT, "divisibleby: division by zero");
    return test_int(r, v, "divisibleby") % d == 0;
}
static bool t_lower(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    tv s = tmpl__to_str(r, v);
    bool cased = false;
    for (size_t i = 0; i < s.len; i++) {
        if (isupper((unsigned char)s.s[i])) return false;
        if (islower((unsigned char)s.s[i])) cased = true;
    }
    return cased;
}
static bool t_upper(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    tv s = tmpl__to_str(r, v);
    bool cased = false;
    for (size_t i = 0; i < s.len; i++) {
        if (islower((unsigned char)s.s[i])) return false;
        if (isupper((unsigned char)s.s[i])) cased = true;
    }
    return cased;
}
static bool t_in(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv seq = tmpl__arg(a, 0, "seq", tmpl__undefined);
    if (seq.kind == TV_STR) {
        tv s = v.kind == TV_STR ? v : tmpl__to_str(r, v);
        return s.len == 0 || memmem(seq.s, seq.len, s.s, s.len) != NULL;
    }
    if (seq.kind == TV_DICT) return tmpl__dict_get_value(seq.dict, v) != NULL;
    tv items = tmpl__to_list(r, seq);
    for (size_t i = 0; i < items.list->n; i++)
        if (tmpl__equal(items.list->items[i], v)) return true;
    return false;
}
static bool t_lt(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return tmpl__order(r, "<", v, tmpl__arg(a, 0, "other", NONE)) < 0;
}
static bool t_le(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return tmpl__order(r, "<=", v, tmpl__arg(a, 0, "other", NONE)) <= 0;
}
static bool t_gt(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return tmpl__order(r, ">", v, tmpl__arg(a, 0, "other", NONE)) > 0;
}
static bool t_ge(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return tmpl__order(r, ">=", v, tmpl__arg(a, 0, "other", NONE)) >= 0;
}
static bool t_escaped(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)v, (void)a;
    return false; /* no Markup values: autoescape is off in Hugging Face's environment */
}
static bool t_test(tmpl_render_state *r, tv v, const tmpl_args *a);
static bool t_filter(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_STR && tmpl__filter_exists(v.s, v.len);
}

typedef struct named_test {
    const char *name;
    test_fn fn;
    size_t n_args; /* arguments after the value */
} named_test;

static const named_test TESTS[] = {{"defined", t_defined, 0},
                                   {"undefined", t_undefined, 0},
                                   {"none", t_none, 0},
                                   {"boolean", t_boolean, 0},
                                   {"true", t_true, 0},
                                   {"false", t_false, 0},
                                   {"integer", t_integer, 0},
                                   {"float", t_float, 0},
                                   {"number", t_number, 0},
                                   {"string", t_string, 0},
                                   {"mapping", t_mapping, 0},
                                   {"iterable", t_iterable, 0},
                                   {"sequence", t_sequence, 0},
                                   {"callable", t_callable, 0},
                                   {"equalto", t_equalto, 1},
                                   {"eq", t_equalto, 1},
                                   {"==", t_equalto, 1},
                                   {"ne", t_ne, 1},
                                   {"!=", t_ne, 1},
                                   {"sameas", t_sameas, 1},
                                   {"odd", t_odd, 0},
                                   {"even", t_even, 0},
                                   {"divisibleby", t_divisibleby, 1},
                                   {"lower", t_lower, 0},
                                   {"upper", t_upper, 0},
                                   {"in", t_in, 1},
                                   {"lt", t_lt, 1},
                                   {"lessthan", t_lt, 1},
                                   {"<", t_lt, 1},
                                   {"le", t_le, 1},
                                   {"<=", t_le, 1},
                                   {"gt", t_gt, 1},
                                   {"greaterthan", t_gt, 1},
                                   {">", t_gt, 1},
                                   {"ge", t_ge, 1},
                                   {">=", t_ge, 1},
                                   {"escaped", t_escaped, 0},
                                   {"filter", t_filter, 0},
                                   {"test", t_test, 0},
                                   {NULL, NULL, 0}};

static const named_test *find_test(const char *name, size_t len) {
    for (const named_test *t = TESTS; t->name; t++)
        if (strlen(t->name) == len && memcmp(t->name, name, len) == 0) return t;
    return NULL;
}

bool tmpl__apply_test(tmpl_render_state *r, const char *name, size_t len, tv v, const tmpl_args *a) {
    const named_test *t = find_test(name, len);
    if (!t) tmpl__fail(r, SP_ERR_FORMAT, "no test named '%.*s'", (int)len, name);
    if (a->n_pos + a->n_kw > t->n_args)
        tmpl__fail(r, SP_ERR_FORMAT, "test '%s' takes %zu argument(s), got %zu", t->name, t->n_args,
                   a->n_pos + a->n_kw);
    return t->fn(r, v, a);
}

static bool t_test(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r, (void)a;
    return v.kind == TV_STR && find_test(v.s, v.len) != NULL;
}

/* template_eval.c: runs a parsed template: statements write to the render's output
 * buffer, expressions evaluate to values, with jinja2's scoping (a for loop and a macro
 * call get their own scope; if does not; namespace() objects carry values out of
 * loops). Also the public entry points tmpl_parse, tmpl_render and tmpl_destroy.
 *
 * Limits: every statement and expression evaluation is a step; the output (captures by
 * set blocks and macro calls included) and the arena are bounded; macro recursion is
 * bounded so a template cannot exhaust the C stack.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

#define DEFAULT_MAX_STEPS  ((size_t)10 * 1000 * 1000)
#define DEFAULT_MAX_OUTPUT ((size_t)16 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)256 << 20)
#define PARSE_MAX_MEMORY   ((size_t)64 << 20)
#define MAX_CALL_DEPTH     50
/* Nested evaluations (each a few hundred bytes of C stack): room for real templates,
 * well inside an 8 MiB thread stack. */
#define MAX_EVAL_DEPTH 2000

struct tscope {
    tscope *parent;
    const char **names;
    size_t *lens;
    tv *vals;
    size_t n, cap;
    bool captured; /* a macro closes over it: it must outlive the statement that made it */
};

struct tloop {
    tlist *items;
    size_t index0;
    tv changed_last; /* loop.changed(): the previous call's arguments (undefined before) */
};

typedef enum flow { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE } flow;

static tv eval(tmpl_render_state *r, const tnode *n, tscope *s);
static flow exec(tmpl_render_state *r, const tnode *n, tscope *s);
static tv eval_node(tmpl_render_state *r, const tnode *n, tscope *s);
static flow exec_node(tmpl_render_state *r, const tnode *n, tscope *s);

/* ---- errors and limits ---------------------------------------------------------- */

_Noreturn void tmpl__fail(tmpl_render_state *r, sp_status status, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (status == SP_ERR_INVALID_ARG)
        sp_fail(status, "%s", msg);
    else
        sp_fail(status, "line %d: %s", r->line, msg);
    r->status = status;
    longjmp(r->on_error, 1);
}

static void step(tmpl_render_state *r, const tnode *n) {
    r->line = n->line;
    if (++r->steps > r->max_steps)
        tmpl__fail(r, SP_ERR_RANGE, "template stopped after %zu steps (the limit)", r->max_steps);
}

void tmpl__charge(tmpl_render_state *r, size_t n) {
    if (n > r->max_steps || r->steps > r->max_steps - n)
        tmpl__fail(r, SP_ERR_RANGE, "template stopped after %zu steps (the limit)", r->max_steps);
    r->steps += n;
}

static void check_output(tmpl_render_state *r) {
    if (r->out.len > r->max_output)
        tmpl__fail(r, SP_ERR_RANGE, "template output passed its limit of %zu bytes", r->max_output);
}

static void emit(tmpl_render_state *r, const char *s, size_t n) {
    tmpl__buf_put(&r->out, s, n);
    check_output(r);
}

/* ---- scopes --------------------------------------------------------------------- */

static tscope *scope_new(tmpl_render_state *r, tscope *parent) {
    tscope *s = tmpl__alloc(&r->arena, sizeof(tscope));
    s->parent = parent;
    return s;
}

static tv *scope_find(tscope *s, const char *name, size_t len) {
    for (; s; s = s->parent)
        for (size_t i = 0; i < s->n; i++)
            if (s->lens[i] == len && memcmp(s->names[i], name, len) == 0) return &s->vals[i];
    return NULL;
}

static void scope_set(tmpl_render_state *r, tscope *s, const char *name, size_t len, tv v) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->lens[i] == len && memcmp(s->names[i], name, len) == 0) {
            s->vals[i] = v;
            return;
        }
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        const char **names = tmpl__alloc(&r->arena, cap * sizeof(char *));
        size_t *lens = tmpl__alloc(&r->arena, cap * sizeof(size_t));
        tv *vals = tmpl__alloc(&r->arena, cap * sizeof(tv));
        if (s->n) {
            memcpy(names, s->names, s->n * sizeof(char *));
            memcpy(lens, s->lens, s->n * sizeof(size_t));
            memcpy(vals, s->vals, s->n * sizeof(tv));
        }
        s->names = names;
        s->lens = lens;
        s->vals = vals;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->lens[s->n] = len;
    s->vals[s->n] = v;
    s->n++;
}

/* ---- conversions ---------------------------------------------------------------- */

tv tmpl__to_str(tmpl_render_state *r, tv v) {
    if (v.kind == TV_STR) return v;
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, 32);
    tmpl__append_str(&b, v);
    return tmpl__buf_value(&b);
}

/* Bytes of the UTF-8 sequence starting with c (1 for stray continuation bytes). */
static size_t utf8_len(unsigned char c) {
    return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* The code points of a string as one-character strings. */
static tv str_chars(tmpl_render_state *r, tv v) {
    tv l = tmpl__list_new(&r->arena, v.len);
    for (size_t i = 0; i < v.len;) {
        size_t n = utf8_len((unsigned char)v.s[i]);
        if (i + n > v.len) n = v.len - i;
        tmpl__list_push(&r->arena, l.list, tmpl__str(v.s + i, n));
        i += n;
    }
    return l;
}

tv tmpl__to_list(tmpl_render_state *r, tv v) {
    switch (v.kind) {
    case TV_LIST:
        if (v.list->iter_name) { /* one pass only */
            if (v.list->consumed) return tmpl__list_new(&r->arena, 0);
            v.list->consumed = true;
        }
        return v;
    case TV_UNDEFINED: return tmpl__list_new(&r->arena, 0); /* Jinja's Undefined iterates as empty */
    case TV_DICT: {
        if (v.dict->is_namespace) break;
        tv l = tmpl__list_new(&r->arena, v.dict->n);
        for (size_t i = 0; i < v.dict->n; i++) tmpl__list_push(&r->arena, l.list, v.dict->keys[i]);
        return l;
    }
    case TV_STR: return str_chars(r, v);
    default: break;
    }
    tmpl__fail(r, SP_ERR_FORMAT, "'%s' object is not iterable", tmpl__type_name(v));
}

_Noreturn void tmpl__fail_undefined(tmpl_render_state *r, tv v) {
    if (v.len) tmpl__fail(r, SP_ERR_FORMAT, "'%.*s' is undefined", (int)v.len, v.s);
    tmpl__fail(r, SP_ERR_FORMAT, "a value is undefined");
}

/* ---- attribute and item access -------------------------------------------------- */

static tv loop_cycle(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    if (a->n_pos == 0 || a->n_kw) tmpl__fail(r, SP_ERR_FORMAT, "loop.cycle() needs at least one positional argument");
    return a->pos[f->self.loop->index0 % a->n_pos];
}

/* loop.changed(*args): true when the arguments differ from the previous call's */
static tv loop_changed(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    tloop *l = f->self.loop;
    tv now = tmpl__list_new(&r->arena, a->n_pos);
    for (size_t i = 0; i < a->n_pos; i++) tmpl__list_push(&r->arena, now.list, a->pos[i]);
    bool changed = l->changed_last.kind == TV_UNDEFINED || !tmpl__equal(l->changed_last, now);
    l->changed_last = now;
    return tmpl__bool(changed);
}

static tv loop_method(tmpl_render_state *r, tloop *l, const char *name, tmpl_builtin_fn fn) {
    tfunc *f = tmpl__alloc(&r->arena, sizeof(tfunc));
    f->name = name;
    f->fn = fn;
    f->self = (tv){.kind = TV_LOOP, .loop = l};
    return (tv){.kind = TV_FUNC, .func = f};
}

static tv loop_attr(tmpl_render_state *r, tloop *l, const char *name, size_t len) {
    int64_t i = (int64_t)l->index0, n = (int64_t)l->items->n;
#define IS(lit) (len == sizeof(lit) - 1 && memcmp(name, lit, len) == 0)
    if (IS("index")) return tmpl__int(i + 1);
    if (IS("index0")) return tmpl__int(i);
    if (IS("revindex")) return tmpl__int(n - i);
    if (IS("revindex0")) return tmpl__int(n - i - 1);
    if (IS("first")) return tmpl__bool(i == 0);
    if (IS("last")) return tmpl__bool(i == n - 1);
    if (IS("length")) return tmpl__int(n);
    if (IS("depth")) return tmpl__int(1);
    if (IS("depth0")) return tmpl__int(0);
    if (IS("previtem")) return i > 0 ? l->items->items[i - 1] : tmpl__undefined_named("previtem", 8);
    if (IS("nextitem")) return i + 1 < n ? l->items->items[i + 1] : tmpl__undefined_named("nextitem", 8);
    if (IS("cycle")) return loop_method(r, l, "cycle", loop_cycle);
    if (IS("changed")) return loop_method(r, l, "changed", loop_changed);
#undef IS
    return tmpl__undefined_named(name, len);
}

tv tmpl__get_attr(tmpl_render_state *r, tv obj, const char *name, size_t len) {
    switch (obj.kind) {
    case TV_UNDEFINED: tmpl__fail_undefined(r, obj);
    case TV_LOOP: return loop_attr(r, obj.loop, name, len);
    case TV_DICT: {
        if (!obj.dict->is_namespace) {
            tv m = tmpl__bind_method(r, obj, name, len);
            if (m.kind != TV_UNDEFINED) return m;
        }
        tv *v = tmpl__dict_get(obj.dict, name, len);
        return v ? *v : tmpl__undefined_named(name, len);
    }
    default: {
        tv m = tmpl__bind_method(r, obj, name, len);
        return m.kind != TV_UNDEFINED ? m : tmpl__undefined_named(name, len);
    }
    }
}

/* Python's index normalization: negative counts from the end; false when out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

tv tmpl__get_item(tmpl_render_state *r, tv obj, tv key) {
    switch (obj.kind) {
    case TV_UNDEFINED: tmpl__fail_undefined(r, obj);
    case TV_DICT: {
        tv *v = tmpl__dict_get_value(obj.dict, key);
        if (v) return *v;
        if (key.kind == TV_STR) return tmpl__get_attr(r, obj, key.s, key.len);
        return tmpl__undefined;
    }
    case TV_LIST: {
        size_t i;
        if (obj.list->iter_name) return tmpl__undefined;
        if ((key.kind == TV_INT || key.kind == TV_BOOL) &&
            norm_index(key.kind == TV_INT ? key.i : key.b, obj.list->n, &i))
            return obj.list->items[i];
        return tmpl__undefined;
    }
    case TV_STR: {
        if (key.kind != TV_INT) return tmpl__undefined;
        tv chars = str_chars(r, obj);
        size_t i;
        return norm_index(key.i, chars.list->n, &i) ? chars.list->items[i] : tmpl__undefined;
    }
    case TV_LOOP:
        if (key.kind == TV_STR) return loop_attr(r, obj.loop, key.s, key.len);
        return tmpl__undefined;
    default: return key.kind == TV_STR ? tmpl__get_attr(r, obj, key.s, key.len) : tmpl__undefined;
    }
}

/* Python's slice a[start:stop:step] of a list or (by code point) a string. */
static tv slice(tmpl_render_state *r, tv obj, tv start_v, tv stop_v, tv step_v) {
    if (obj.kind == TV_UNDEFINED) tmpl__fail_undefined(r, obj);
    bool is_str = obj.kind == TV_STR;
    tv seq = is_str ? str_chars(r, obj) : obj;
    if (seq.kind != TV_LIST) tmpl__fail(r, SP_ERR_FORMAT, "'%s' object is not subscriptable", tmpl__type_name(obj));
    int64_t n = (int64_t)seq.list->n;
    int64_t stride = 1;
    if (step_v.kind == TV_INT)
        stride = step_v.i;
    else if (step_v.kind != TV_NONE && step_v.kind != TV_UNDEFINED)
        tmpl__fail(r, SP_ERR_FORMAT, "slice indices must be integers or None");
    if (stride == 0) tmpl__fail(r, SP_ERR_FORMAT, "slice step cannot be zero");
    int64_t lo, hi;
    bool has_start = start_v.kind == TV_INT, has_stop = stop_v.kind == TV_INT;
    if ((start_v.kind != TV_NONE && start_v.kind != TV_UNDEFINED && !has_start) ||
        (stop_v.kind != TV_NONE && stop_v.kind != TV_UNDEFINED && !has_stop))
        tmpl__fail(r, SP_ERR_FORMAT, "slice indices must be integers or None");
    if (stride > 0) {
        lo = has_start ? start_v.i : 0;
        hi = has_stop ? stop_v.i : n;
        if (lo < 0) lo = lo + n < 0 ? 0 : lo + n;
        if (hi < 0) hi = hi + n < 0 ? 0 : hi + n;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
    } else {
        lo = has_start ? start_v.i : n - 1;
        hi = has_stop ? stop_v.i : -1 - n; /* past the front */
        if (lo < 0) lo = lo + n < 0 ? -1 : lo + n;
        if (hi < 0) hi = hi + n < 0 ? -1 : hi + n;
        if (lo >= n) lo = n - 1;
        if (hi >= n) hi = n - 1;
    }
    tv out = tmpl__list_new(&r->arena, 0);
    out.list->is_tuple = seq.list->is_tuple;
    for (int64_t i = lo; stride > 0 ? i < hi : i > hi;) {
        tmpl__list_push(&r->arena, out.list, seq.list->items[i]);
        if (__builtin_add_overflow(i, stride, &i)) break; /* a huge step: past either end */
    }
    if (!is_str) return out;
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, obj.len + 1);
    for (size_t i = 0; i < out.list->n; i++) tmpl__buf_put(&b, out.list->items[i].s, out.list->items[i].len);
    return tmpl__buf_value(&b);
}

/* ---- calls ---------------------------------------------------------------------- */

static tv call_macro(tmpl_render_state *r, tmacro *m, const tmpl_args *a, tv caller) {
    tv *pos = a->pos, *kw_vals = a->kw_vals;
    size_t n_pos = a->n_pos, n_kw = a->n_kw;
    const char **kw_names = a->kw_names;
    if (r->call_depth >= MAX_CALL_DEPTH)
        tmpl__fail(r, SP_ERR_RANGE, "macro calls nested deeper than %d (runaway recursion?)", MAX_CALL_DEPTH);
    tscope *s = scope_new(r, m->closure);
    bool *given = m->n_params ? tmpl__alloc(&r->arena, m->n_params * sizeof(bool)) : NULL;
    tv varargs = tmpl__list_new(&r->arena, 0);
    varargs.list->is_tuple = true;
    for (size_t i = 0; i < n_pos; i++) {
        if (i < m->n_params) {
            scope_set(r, s, m->params[i]->str, m->params[i]->len, pos[i]);
            given[i] = true;
        } else if (m->catch_varargs) {
            tmpl__list_push(&r->arena, varargs.list, pos[i]);
        } else {
            tmpl__fail(r, SP_ERR_FORMAT, "macro '%s' takes not more than %zu argument(s)", m->name, m->n_params);
        }
    }
    tv kwargs = tmpl__dict_new(&r->arena, 0);
    for (size_t k = 0; k < n_kw; k++) {
        size_t klen = strlen(kw_names[k]);
        size_t i = 0;
        while (i < m->n_params && !(m->params[i]->len == klen && memcmp(m->params[i]->str, kw_names[k], klen) == 0))
            i++;
        if (i == m->n_params) {
            if (!m->catch_kwargs && strcmp(kw_names[k], "caller") != 0)
                tmpl__fail(r, SP_ERR_FORMAT, "macro '%s' takes no keyword argument '%s'", m->name, kw_names[k]);
            tmpl__dict_set(&r->arena, kwargs.dict, tmpl__str(kw_names[k], klen), kw_vals[k]);
            continue;
        }
        if (given[i]) tmpl__fail(r, SP_ERR_FORMAT, "macro '%s' got multiple values for '%s'", m->name, kw_names[k]);
        scope_set(r, s, kw_names[k], klen, kw_vals[k]);
        given[i] = true;
    }
    for (size_t i = 0; i < m->n_params; i++) {
        if (given[i]) continue;
        const tnode *p = m->params[i];
        tv dflt = p->a ? eval(r, p->a, s) : tmpl__undefined_named(p->str, p->len);
        scope_set(r, s, p->str, p->len, dflt);
    }
    scope_set(r, s, "varargs", 7, varargs);
    scope_set(r, s, "kwargs", 6, kwargs);
    if (caller.kind != TV_UNDEFINED) scope_set(r, s, "caller", 6, caller);

    size_t start = r->out.len;
    r->call_depth++;
    exec(r, m->body, s);
    r->call_depth--;
    tv result = tmpl__str_copy(&r->arena, r->out.data + start, r->out.len - start);
    r->out.len = start;
    return result;
}

tv tmpl__call_value(tmpl_render_state *r, tv callee, const tmpl_args *a) {
    switch (callee.kind) {
    case TV_FUNC: return callee.func->fn(r, callee.func, a);
    case TV_MACRO: return call_macro(r, callee.macro, a, tmpl__undefined);
    case TV_UNDEFINED: tmpl__fail_undefined(r, callee);
    default: tmpl__fail(r, SP_ERR_FORMAT, "'%s' object is not callable", tmpl__type_name(callee));
    }
}

/* Evaluates a node's argument list. */
static tmpl_args eval_args(tmpl_render_state *r, const targs *a, tscope *s) {
    tmpl_args out = {.n_pos = a->n_pos, .kw_names = a->kw_names, .n_kw = a->n_kw};
    out.pos = a->n_pos ? tmpl__alloc(&r->arena, a->n_pos * sizeof(tv)) : NULL;
    out.kw_vals = a->n_kw ? tmpl__alloc(&r->arena, a->n_kw * sizeof(tv)) : NULL;
    for (size_t i = 0; i < a->n_pos; i++) out.pos[i] = eval(r, a->pos[i], s);
    for (size_t i = 0; i < a->n_kw; i++) out.kw_vals[i] = eval(r, a->kw_vals[i], s);
    return out;
}

static tv eval_call(tmpl_render_state *r, const tnode *n, tscope *s, tv caller) {
    tv callee = eval(r, n->a, s);
    tmpl_args args = eval_args(r, &n->args, s);
    if (callee.kind == TV_UNDEFINED) {
        if (n->a->kind == TN_ATTR)
            tmpl__fail(r, SP_ERR_FORMAT, "object has no method '%.*s'", (int)n->a->len, n->a->str);
        tmpl__fail_undefined(r, callee);
    }
    if (callee.kind == TV_MACRO) return call_macro(r, callee.macro, &args, caller);
    return tmpl__call_value(r, callee, &args);
}

/* expr | f1 | f2: f2.a is f1, f1.a is expr. In a filter block or a filtered set block
 * the innermost .a is NULL and input (the block's text) takes its place. */
static tv apply_filters(tmpl_render_state *r, const tnode *f, tv input, tscope *s) {
    if (!f) return input;
    /* a chain may be thousands of filters long: walk it with a loop, not recursion */
    size_t n = 0;
    const tnode *inner = f;
    for (; inner && inner->kind == TN_FILTER; inner = inner->a) n++;
    const tnode **chain = tmpl__alloc(&r->arena, n * sizeof(*chain));
    size_t k = n;
    for (const tnode *g = f; g && g->kind == TN_FILTER; g = g->a) chain[--k] = g;
    tv v = inner ? eval(r, inner, s) : input;
    for (size_t i = 0; i < n; i++) {
        step(r, chain[i]);
        tmpl_args args = eval_args(r, &chain[i]->args, s);
        r->line = chain[i]->line;
        v = tmpl__apply_filter(r, chain[i]->str, chain[i]->len, v, &args);
    }
    return v;
}

/* ---- expressions ---------------------------------------------------------------- */

static tv eval_test(tmpl_render_state *r, const tnode *n, tscope *s) {
    tv v = eval(r, n->a, s);
    tmpl_args args = eval_args(r, &n->args, s);
    r->line = n->line;
    bool result = tmpl__apply_test(r, n->str, n->len, v, &args);
    return tmpl__bool(n->negate ? !result : result);
}

static tv eval_node(tmpl_render_state *r, const tnode *n, tscope *s) {
    switch (n->kind) {
    case TN_CONST: return n->value;
    case TN_NAME: {
        tv *v = scope_find(s, n->str, n->len);
        if (v) return *v;
        tv g = tmpl__global_func(n->str, n->len);
        return g.kind != TV_UNDEFINED ? g : tmpl__undefined_named(n->str, n->len);
    }
    case TN_LIST:
    case TN_TUPLE: {
        tv l = tmpl__list_new(&r->arena, n->n_children);
        l.list->is_tuple = n->kind == TN_TUPLE;
        for (size_t i = 0; i < n->n_children; i++) tmpl__list_push(&r->arena, l.list, eval(r, n->children[i], s));
        return l;
    }
    case TN_DICT: {
        tv d = tmpl__dict_new(&r->arena, n->n_children / 2);
        for (size_t i = 0; i + 1 < n->n_children; i += 2) {
            tv k = eval(r, n->children[i], s);
            if (k.kind == TV_LIST || k.kind == TV_DICT)
                tmpl__fail(r, SP_ERR_FORMAT, "unhashable type: '%s'", tmpl__type_name(k));
            tmpl__dict_set(&r->arena, d.dict, k, eval(r, n->children[i + 1], s));
        }
        return d;
    }
    case TN_ATTR: {
        tv obj = eval(r, n->a, s);
        r->line = n->line;
        return tmpl__get_attr(r, obj, n->str, n->len);
    }
    case TN_ITEM: {
        tv obj = eval(r, n->a, s);
        tv key = eval(r, n->b, s);
        r->line = n->line;
        return tmpl__get_item(r, obj, key);
    }
    case TN_SLICE: {
        tv obj = eval(r, n->a, s);
        tv lo = n->b ? eval(r, n->b, s) : tmpl__none, hi = n->c ? eval(r, n->c, s) : tmpl__none,
           st = n->d ? eval(r, n->d, s) : tmpl__none;
        r->line = n->line;
        return slice(r, obj, lo, hi, st);
    }
    case TN_CALL: return eval_call(r, n, s, tmpl__undefined);
    case TN_FILTER: return apply_filters(r, n, tmpl__undefined, s);
    case TN_TEST: return eval_test(r, n, s);
    case TN_UNARY: {
        tv v = eval(r, n->a, s);
        r->line = n->line;
        if (n->str[0] == 'n') return tmpl__bool(!tmpl__truthy(v));
        if (v.kind == TV_BOOL) v = tmpl__int(v.b);
        if (v.kind == TV_INT) {
            if (n->str[0] == '-' && v.i == INT64_MIN) tmpl__fail(r, SP_ERR_RANGE, "integer overflow in unary -");
            return n->str[0] == '-' ? tmpl__int(-v.i) : v;
        }
        if (v.kind == TV_FLOAT) return n->str[0] == '-' ? tmpl__float(-v.f) : v;
        if (v.kind == TV_UNDEFINED) tmpl__fail_undefined(r, v);
        tmpl__fail(r, SP_ERR_FORMAT, "bad operand type for unary %s: '%s'", n->str, tmpl__type_name(v));
    }
    case TN_BINARY: {
        if (strcmp(n->str, "and") == 0) {
            tv a = eval(r, n->a, s);
            return tmpl__truthy(a) ? eval(r, n->b, s) : a;
        }
        if (strcmp(n->str, "or") == 0) {
            tv a = eval(r, n->a, s);
            return tmpl__truthy(a) ? a : eval(r, n->b, s);
        }
        tv a = eval(r, n->a, s), b = eval(r, n->b, s);
        r->line = n->line;
        if (n->str[0] == '~') {
            tmpl_buf buf;
            tmpl__buf_init(&buf, &r->arena, 64);
            tmpl__append_str(&buf, a);
            tmpl__append_str(&buf, b);
            return tmpl__buf_value(&buf);
        }
        return tmpl__arith(r, n->str, a, b);
    }
    case TN_COMPARE: {
        tv a = eval(r, n->a, s), b = eval(r, n->b, s);
        r->line = n->line;
        return tmpl__compare(r, n->str, a, b);
    }
    case TN_CONDEXPR:
        if (tmpl__truthy(eval(r, n->a, s))) return eval(r, n->b, s);
        return n->c ? eval(r, n->c, s) : tmpl__undefined;
    default: tmpl__fail(r, SP_ERR_INTERNAL, "statement used as an expression");
    }
}

/* ---- statements ----------------------------------------------------------------- */

/* Binds a for/set target: a name, or a tuple of names unpacking a sequence. */
static void assign(tmpl_render_state *r, const tnode *target, tv v, tscope *s) {
    if (target->kind == TN_NAME) {
        scope_set(r, s, target->str, target->len, v);
        return;
    }
    tv items = v.kind == TV_LIST ? v : tmpl__to_list(r, v);
    if (items.list->n != target->n_children)
        tmpl__fail(r, SP_ERR_FORMAT, "cannot unpack %zu values into %zu names", items.list->n, target->n_children);
    for (size_t i = 0; i < target->n_children; i++) assign(r, target->children[i], items.list->items[i], s);
}

static flow exec_for(tmpl_render_state *r, const tnode *n, tscope *s) {
    tv seq = eval(r, n->a, s);
    if (seq.kind == TV_NONE) tmpl__fail(r, SP_ERR_FORMAT, "'NoneType' object is not iterable");
    tv items = tmpl__to_list(r, seq);
    /* Each iteration (and each test of the inline filter) starts from a fresh scope over
     * the enclosing one: jinja2 resets names set in the body at every iteration. */
    if (n->d) { /* inline filter: loop.length counts the kept items */
        tv kept = tmpl__list_new(&r->arena, items.list->n);
        for (size_t i = 0; i < items.list->n; i++) {
            tscope *test = scope_new(r, s); /* small; only with an inline filter */
            assign(r, n->target, items.list->items[i], test);
            if (tmpl__truthy(eval(r, n->d, test))) tmpl__list_push(&r->arena, kept.list, items.list->items[i]);
        }
        items = kept;
    }
    tloop *loop = tmpl__alloc(&r->arena, sizeof(tloop));
    loop->items = items.list;
    loop->changed_last = tmpl__undefined;
    tv loop_v = {.kind = TV_LOOP, .loop = loop};
    tscope *inner = NULL;
    for (size_t i = 0; i < items.list->n; i++) {
        /* an emptied scope is a fresh one; reuse it unless a macro kept it */
        if (inner && !inner->captured)
            inner->n = 0;
        else
            inner = scope_new(r, s);
        loop->index0 = i;
        assign(r, n->target, items.list->items[i], inner);
        scope_set(r, inner, "loop", 4, loop_v);
        if (exec(r, n->b, inner) == FLOW_BREAK) break;
    }
    if (items.list->n == 0 && n->c) return exec(r, n->c, scope_new(r, s));
    return FLOW_NORMAL;
}

static void exec_set(tmpl_render_state *r, const tnode *n, tscope *s) {
    tv v;
    if (n->a) {
        v = eval(r, n->a, s);
    } else {
        size_t start = r->out.len;
        exec(r, n->b, scope_new(r, s)); /* the block's own scope, as jinja2's */
        v = tmpl__str_copy(&r->arena, r->out.data + start, r->out.len - start);
        r->out.len = start;
        v = apply_filters(r, n->c, v, s);
    }
    r->line = n->line;
    if (n->target->kind == TN_ATTR) {
        const tnode *obj_name = n->target->a;
        tv *ns = scope_find(s, obj_name->str, obj_name->len);
        if (!ns || ns->kind != TV_DICT || !ns->dict->is_namespace)
            tmpl__fail(r, SP_ERR_FORMAT, "cannot assign attribute on non-namespace object '%.*s'", (int)obj_name->len,
                       obj_name->str);
        tmpl__dict_set(&r->arena, ns->dict, tmpl__str(n->target->str, n->target->len), v);
        return;
    }
    assign(r, n->target, v, s);
}

static tmacro *macro_new(tmpl_render_state *r, const tnode *n, const char *name, tscope *closure) {
    tmacro *m = tmpl__alloc(&r->arena, sizeof(tmacro));
    m->name = name;
    m->params = n->params;
    m->n_params = n->n_params;
    m->body = n->b;
    m->closure = closure;
    for (tscope *c = closure; c && !c->captured; c = c->parent) c->captured = true;
    m->catch_varargs = n->catch_varargs;
    m->catch_kwargs = n->catch_kwargs;
    return m;
}

static flow exec_node(tmpl_render_state *r, const tnode *n, tscope *s) {
    switch (n->kind) {
    case TN_BODY:
        for (size_t i = 0; i < n->n_children; i++) {
            flow f = exec(r, n->children[i], s);
            if (f != FLOW_NORMAL) return f;
        }
        return FLOW_NORMAL;
    case TN_TEXT: emit(r, n->str, n->len); return FLOW_NORMAL;
    case TN_OUTPUT: {
        tmpl__append_str(&r->out, eval(r, n->a, s));
        check_output(r);
        return FLOW_NORMAL;
    }
    case TN_IF: /* an elif chain is walked here, not recursed into */
        for (; n && n->kind == TN_IF; n = n->c) {
            if (tmpl__truthy(eval(r, n->a, s))) return exec(r, n->b, s);
        }
        return n ? exec(r, n, s) : FLOW_NORMAL;
    case TN_FOR: return exec_for(r, n, s);
    case TN_SET: exec_set(r, n, s); return FLOW_NORMAL;
    case TN_MACRO: {
        char *name = tmpl__strndup(&r->arena, n->str, n->len);
        tv m = {.kind = TV_MACRO, .macro = macro_new(r, n, name, s)};
        scope_set(r, s, n->str, n->len, m);
        return FLOW_NORMAL;
    }
    case TN_CALL_BLOCK: {
        tv caller = {.kind = TV_MACRO, .macro = macro_new(r, n, "caller", s)};
        tv result = eval_call(r, n->a, s, caller);
        tv text = tmpl__to_str(r, result);
        emit(r, text.s, text.len);
        return FLOW_NORMAL;
    }
    case TN_FILTER_BLOCK: { /* also {% generation %}, with no filter */
        size_t start = r->out.len;
        s = scope_new(r, s); /* the block's own scope, as jinja2's */
        exec(r, n->b, s);
        tv body = tmpl__str_copy(&r->arena, r->out.data + start, r->out.len - start);
        r->out.len = start;
        tv text = tmpl__to_str(r, apply_filters(r, n->a, body, s));
        emit(r, text.s, text.len);
        return FLOW_NORMAL;
    }
    case TN_BREAK: return FLOW_BREAK;
    case TN_CONTINUE: return FLOW_CONTINUE;
    default: {
        tv v = eval(r, n, s);
        (void)v;
        return FLOW_NORMAL;
    }
    }
}

/* Every evaluation goes through these two, which count the steps and bound the
 * nesting: a long operator chain (1+1+1...), deep macro recursion or both would
 * otherwise recurse until the C stack runs out. */
static void enter(tmpl_render_state *r, const tnode *n) {
    step(r, n);
    if (++r->depth > MAX_EVAL_DEPTH)
        tmpl__fail(r, SP_ERR_RANGE, "template nested deeper than %d evaluation levels", MAX_EVAL_DEPTH);
}

static tv eval(tmpl_render_state *r, const tnode *n, tscope *s) {
    enter(r, n);
    tv v = eval_node(r, n, s);
    r->depth--;
    return v;
}

static flow exec(tmpl_render_state *r, const tnode *n, tscope *s) {
    enter(r, n);
    flow f = exec_node(r, n, s);
    r->depth--;
    return f;
}

/* ---- public entry points -------------------------------------------------------- */

sp_status tmpl_parse(const char *source, size_t len, tmpl **out) {
    *out = NULL;
    tmpl *t = calloc(1, sizeof(tmpl));
    jmp_buf *on_full = malloc(sizeof(jmp_buf));
    if (!t || !on_full) {
        free(t);
        free(on_full);
        return sp_fail(SP_ERR_NOMEM, "out of memory parsing a chat template");
    }
    tmpl__arena_init(&t->arena, PARSE_MAX_MEMORY, on_full);
    if (setjmp(*on_full)) {
        sp_status st = t->arena.failed;
        tmpl__arena_free(&t->arena);
        free(t);
        free(on_full);
        return st;
    }
    char err[256] = "";
    ttok *toks = tmpl__lex(&t->arena, source, len, err, sizeof(err));
    tnode *root = toks ? tmpl__parse_tokens(&t->arena, toks, err, sizeof(err)) : NULL;
    if (!root) {
        tmpl__arena_free(&t->arena);
        free(t);
        free(on_full);
        return sp_fail(SP_ERR_FORMAT, "%s", err);
    }
    t->root = root;
    /* the tokens stay in the arena (the tree points into their text); the parse is done,
     * so the arena will not allocate again and needs no jump target */
    t->arena.on_full = NULL;
    free(on_full);
    *out = t;
    return SP_OK;
}

void tmpl_destroy(tmpl *t) {
    if (!t) return;
    tmpl__arena_free(&t->arena);
    free(t);
}

sp_status tmpl_render(const tmpl *t, const json_t *context, const tmpl_limits *limits, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (!json_is_object(context)) return sp_fail(SP_ERR_INVALID_ARG, "template context must be a JSON object");
    tmpl_render_state *r = calloc(1, sizeof(*r));
    if (!r) return sp_fail(SP_ERR_NOMEM, "out of memory rendering a chat template");
    r->max_steps = limits && limits->max_steps ? limits->max_steps : DEFAULT_MAX_STEPS;
    r->max_output = limits && limits->max_output_bytes ? limits->max_output_bytes : DEFAULT_MAX_OUTPUT;
    tmpl__arena_init(&r->arena, limits && limits->max_memory_bytes ? limits->max_memory_bytes : DEFAULT_MAX_MEMORY,
                     &r->on_error);
    if (setjmp(r->on_error)) {
        sp_status st = r->status ? r->status : r->arena.failed;
        tmpl__arena_free(&r->arena);
        free(r);
        return st ? st : SP_ERR_INTERNAL;
    }
    tmpl__buf_init(&r->out, &r->arena, 4096);
    r->globals = scope_new(r, NULL);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)context, key, val) {
        scope_set(r, r->globals, key, strlen(key), tmpl__from_json(&r->arena, val));
    }
    exec(r, t->root, r->globals);

    char *text = malloc(r->out.len + 1);
    if (!text) {
        tmpl__arena_free(&r->arena);
        free(r);
        return sp_fail(SP_ERR_NOMEM, "out of memory copying a rendered chat template");
    }
    memcpy(text, r->out.data, r->out.len);
    text[r->out.len] = '\0';
    *out = text;
    *out_len = r->out.len;
    tmpl__arena_free(&r->arena);
    free(r);
    return SP_OK;
}

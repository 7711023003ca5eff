/* template_value.c: the render arena and template values with Python's semantics:
 * truthiness, equality, str() and repr() (what {{ x }} prints for every type).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

/* ---- arena ---------------------------------------------------------------------- */

struct tmpl_arena_chunk {
    tmpl_arena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_MIN (64 * 1024)

void tmpl__arena_init(tmpl_arena *a, size_t limit, jmp_buf *on_full) {
    a->head = NULL;
    a->used = 0;
    a->limit = limit;
    a->on_full = on_full;
    a->failed = SP_OK;
}

void tmpl__arena_free(tmpl_arena *a) {
    tmpl_arena_chunk *c = a->head;
    while (c) {
        tmpl_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}

void *tmpl__alloc(tmpl_arena *a, size_t size) {
    if (size > a->limit) goto over_limit; /* also keeps the rounding below from wrapping */
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    tmpl_arena_chunk *c = a->head;
    if (!c || c->size - c->used < size) {
        size_t left = a->limit - a->used;
        size_t chunk = size > CHUNK_MIN ? size : CHUNK_MIN;
        if (chunk > left && size <= left) chunk = left; /* the last of the budget */
        if (chunk > left) {
        over_limit:
            a->failed = sp_fail(SP_ERR_RANGE, "template used more than its memory limit of %zu bytes", a->limit);
            longjmp(*a->on_full, 1);
        }
        c = malloc(sizeof(*c) + chunk);
        if (!c) {
            a->failed = sp_fail(SP_ERR_NOMEM, "out of memory in a chat template");
            longjmp(*a->on_full, 1);
        }
        c->size = chunk;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->used += chunk;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

char *tmpl__strndup(tmpl_arena *a, const char *s, size_t n) {
    char *d = tmpl__alloc(a, n + 1);
    if (n) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- construction --------------------------------------------------------------- */

const tv tmpl__undefined = {.kind = TV_UNDEFINED, .len = 0, .s = ""};
const tv tmpl__none = {.kind = TV_NONE};

tv tmpl__bool(bool b) {
    return (tv){.kind = TV_BOOL, .b = b};
}
tv tmpl__int(int64_t i) {
    return (tv){.kind = TV_INT, .i = i};
}
tv tmpl__float(double f) {
    return (tv){.kind = TV_FLOAT, .f = f};
}
tv tmpl__str(const char *s, size_t len) {
    return (tv){.kind = TV_STR, .len = len, .s = s};
}
tv tmpl__str_copy(tmpl_arena *a, const char *s, size_t len) {
    return tmpl__str(tmpl__strndup(a, s, len), len);
}
tv tmpl__undefined_named(const char *name, size_t len) {
    return (tv){.kind = TV_UNDEFINED, .len = len, .s = name};
}

/* Bytes of n values; fails through the arena when that does not fit a size_t. */
static size_t values_bytes(tmpl_arena *a, size_t n) {
    size_t bytes;
    if (__builtin_mul_overflow(n, sizeof(tv), &bytes)) {
        a->failed = sp_fail(SP_ERR_RANGE, "template value of %zu items is too large", n);
        longjmp(*a->on_full, 1);
    }
    return bytes;
}

tv tmpl__list_new(tmpl_arena *a, size_t cap) {
    tlist *l = tmpl__alloc(a, sizeof(tlist));
    if (cap) l->items = tmpl__alloc(a, values_bytes(a, cap));
    l->cap = cap;
    return (tv){.kind = TV_LIST, .list = l};
}

tv tmpl__dict_new(tmpl_arena *a, size_t cap) {
    tdict *d = tmpl__alloc(a, sizeof(tdict));
    if (cap) {
        d->keys = tmpl__alloc(a, values_bytes(a, cap));
        d->vals = tmpl__alloc(a, values_bytes(a, cap));
    }
    d->cap = cap;
    return (tv){.kind = TV_DICT, .dict = d};
}

static unsigned value_depth(tv v) {
    return v.kind == TV_LIST ? v.list->depth : v.kind == TV_DICT ? v.dict->depth : 0;
}

/* Raises *depth to hold item; a value past the limit stops the render. */
static void track_depth(tmpl_arena *a, unsigned *depth, tv item) {
    unsigned d = value_depth(item) + 1;
    if (d <= *depth) return;
    if (d > TMPL_MAX_VALUE_DEPTH) {
        a->failed = sp_fail(SP_ERR_RANGE, "template value nested deeper than %d levels", TMPL_MAX_VALUE_DEPTH);
        longjmp(*a->on_full, 1);
    }
    *depth = d;
}

void tmpl__list_push(tmpl_arena *a, tlist *l, tv item) {
    track_depth(a, &l->depth, item);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tv *grown = tmpl__alloc(a, cap * sizeof(tv));
        if (l->n) memcpy(grown, l->items, l->n * sizeof(tv));
        l->items = grown;
        l->cap = cap;
    }
    l->items[l->n++] = item;
}

tv *tmpl__dict_get_value(const tdict *d, tv key) {
    for (size_t i = 0; i < d->n; i++)
        if (tmpl__equal(d->keys[i], key)) return &d->vals[i];
    return NULL;
}

tv *tmpl__dict_get(const tdict *d, const char *key, size_t len) {
    for (size_t i = 0; i < d->n; i++) {
        const tv *k = &d->keys[i];
        if (k->kind == TV_STR && k->len == len && memcmp(k->s, key, len) == 0) return &d->vals[i];
    }
    return NULL;
}

void tmpl__dict_set(tmpl_arena *a, tdict *d, tv key, tv val) {
    track_depth(a, &d->depth, val);
    tv *slot = tmpl__dict_get_value(d, key);
    if (slot) {
        *slot = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tv *keys = tmpl__alloc(a, cap * sizeof(tv));
        tv *vals = tmpl__alloc(a, cap * sizeof(tv));
        if (d->n) {
            memcpy(keys, d->keys, d->n * sizeof(tv));
            memcpy(vals, d->vals, d->n * sizeof(tv));
        }
        d->keys = keys;
        d->vals = vals;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

/* ---- Python semantics ----------------------------------------------------------- */

bool tmpl__truthy(tv v) {
    switch (v.kind) {
    case TV_UNDEFINED:
    case TV_NONE: return false;
    case TV_BOOL: return v.b;
    case TV_INT: return v.i != 0;
    case TV_FLOAT: return v.f != 0.0;
    case TV_STR: return v.len > 0;
    case TV_LIST: return v.list->iter_name || v.list->n > 0;
    case TV_DICT: return v.dict->is_namespace || v.dict->n > 0;
    default: return true;
    }
}

static bool is_number(tv v) {
    return v.kind == TV_INT || v.kind == TV_FLOAT || v.kind == TV_BOOL;
}
static double as_double(tv v) {
    return v.kind == TV_FLOAT ? v.f : v.kind == TV_INT ? (double)v.i : (double)v.b;
}

bool tmpl__equal(tv a, tv b) {
    if (is_number(a) && is_number(b)) {
        if (a.kind != TV_FLOAT && b.kind != TV_FLOAT) {
            int64_t x = a.kind == TV_INT ? a.i : a.b, y = b.kind == TV_INT ? b.i : b.b;
            return x == y;
        }
        return as_double(a) == as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case TV_UNDEFINED:
    case TV_NONE: return true;
    case TV_STR: return a.len == b.len && memcmp(a.s, b.s, a.len) == 0;
    case TV_LIST:
        if (a.list->iter_name || b.list->iter_name) return a.list == b.list;
        if (a.list->n != b.list->n || a.list->is_tuple != b.list->is_tuple) return false;
        for (size_t i = 0; i < a.list->n; i++)
            if (!tmpl__equal(a.list->items[i], b.list->items[i])) return false;
        return true;
    case TV_DICT:
        if (a.dict->is_namespace || b.dict->is_namespace) return a.dict == b.dict;
        if (a.dict->n != b.dict->n) return false;
        for (size_t i = 0; i < a.dict->n; i++) {
            tv *other = tmpl__dict_get_value(b.dict, a.dict->keys[i]);
            if (!other || !tmpl__equal(a.dict->vals[i], *other)) return false;
        }
        return true;
    case TV_FUNC: return a.func == b.func;
    case TV_MACRO: return a.macro == b.macro;
    case TV_LOOP: return a.loop == b.loop;
    default: return false;
    }
}

const char *tmpl__type_name(tv v) {
    switch (v.kind) {
    case TV_UNDEFINED: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return v.list->iter_name ? v.list->iter_name : v.list->is_tuple ? "tuple" : "list";
    case TV_DICT: return v.dict->is_namespace ? "Namespace" : "dict";
    case TV_FUNC: return "builtin_function_or_method";
    case TV_MACRO: return "Macro";
    case TV_LOOP: return "LoopContext";
    }
    return "object";
}

bool tmpl__is_str(tv v, const char *lit) {
    size_t n = strlen(lit);
    return v.kind == TV_STR && v.len == n && memcmp(v.s, lit, n) == 0;
}

/* ---- buffers -------------------------------------------------------------------- */

void tmpl__buf_init(tmpl_buf *b, tmpl_arena *a, size_t cap) {
    b->arena = a;
    b->cap = cap < 16 ? 16 : cap;
    b->data = tmpl__alloc(a, b->cap);
    b->len = 0;
}

static void buf_reserve(tmpl_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap * 2;
    while (cap < b->len + extra + 1) cap *= 2;
    char *grown = tmpl__alloc(b->arena, cap);
    memcpy(grown, b->data, b->len);
    b->data = grown;
    b->cap = cap;
}

void tmpl__buf_put(tmpl_buf *b, const char *s, size_t n) {
    if (n == 0) return;
    buf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void tmpl__buf_putc(tmpl_buf *b, char c) {
    tmpl__buf_put(b, &c, 1);
}

void tmpl__buf_printf(tmpl_buf *b, const char *fmt, ...) {
    char small[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof(small)) {
        tmpl__buf_put(b, small, (size_t)n);
        return;
    }
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

tv tmpl__buf_value(tmpl_buf *b) {
    return tmpl__str(b->data, b->len);
}

/* ---- str() and repr() ----------------------------------------------------------- */

void tmpl__append_float(tmpl_buf *b, double f) {
    if (isnan(f)) {
        tmpl__buf_put(b, "nan", 3);
        return;
    }
    if (isinf(f)) {
        tmpl__buf_put(b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3);
        return;
    }
    /* shortest digits that round-trip, as Python's repr */
    char sci[40];
    for (int prec = 0; prec <= 17; prec++) {
        snprintf(sci, sizeof(sci), "%.*e", prec, f);
        if (strtod(sci, NULL) == f) break;
    }
    /* sci is [-]d[.ddd]e[+-]XX: split into sign, digits and exponent */
    const char *p = sci;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < sizeof(digits) - 1) digits[nd++] = *p;
    digits[nd] = '\0';
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = '\0';
    if (neg) tmpl__buf_putc(b, '-');
    if (exp >= -4 && exp < 16) { /* Python's repr switches to an exponent outside this range */
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) tmpl__buf_putc(b, (size_t)i < nd ? digits[i] : '0');
            tmpl__buf_putc(b, '.');
            if ((size_t)exp + 1 < nd)
                tmpl__buf_put(b, digits + exp + 1, nd - (size_t)exp - 1);
            else
                tmpl__buf_putc(b, '0');
        } else {
            tmpl__buf_put(b, "0.", 2);
            for (int i = 0; i < -exp - 1; i++) tmpl__buf_putc(b, '0');
            tmpl__buf_put(b, digits, nd);
        }
        return;
    }
    tmpl__buf_putc(b, digits[0]);
    if (nd > 1) {
        tmpl__buf_putc(b, '.');
        tmpl__buf_put(b, digits + 1, nd - 1);
    }
    tmpl__buf_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

/* Values can hold themselves (ns.self = ns); Python prints such a cycle as "...". */
#define REPR_MAX_DEPTH TMPL_MAX_VALUE_DEPTH

static void append_repr_depth(tmpl_buf *b, tv v, int depth) {
    if (depth > REPR_MAX_DEPTH && (v.kind == TV_LIST || v.kind == TV_DICT)) {
        tmpl__buf_put(b, "...", 3);
        return;
    }
    switch (v.kind) {
    case TV_STR: tmpl__append_str_repr(b, v.s, v.len); return;
    case TV_UNDEFINED: tmpl__buf_put(b, "Undefined", 9); return;
    case TV_LIST: {
        if (v.list->iter_name) {
            tmpl__buf_printf(b, "<%s object>", v.list->iter_name);
            return;
        }
        bool tuple = v.list->is_tuple;
        tmpl__buf_putc(b, tuple ? '(' : '[');
        for (size_t i = 0; i < v.list->n; i++) {
            if (i) tmpl__buf_put(b, ", ", 2);
            append_repr_depth(b, v.list->items[i], depth + 1);
        }
        if (tuple && v.list->n == 1) tmpl__buf_putc(b, ',');
        tmpl__buf_putc(b, tuple ? ')' : ']');
        return;
    }
    case TV_DICT:
        if (v.dict->is_namespace) {
            tmpl__buf_put(b, "<Namespace ", 11);
        }
        tmpl__buf_putc(b, '{');
        for (size_t i = 0; i < v.dict->n; i++) {
            if (i) tmpl__buf_put(b, ", ", 2);
            append_repr_depth(b, v.dict->keys[i], depth + 1);
            tmpl__buf_put(b, ": ", 2);
            append_repr_depth(b, v.dict->vals[i], depth + 1);
        }
        tmpl__buf_putc(b, '}');
        if (v.dict->is_namespace) tmpl__buf_putc(b, '>');
        return;
    default: tmpl__append_str(b, v);
    }
}

void tmpl__append_repr(tmpl_buf *b, tv v) {
    append_repr_depth(b, v, 0);
}

void tmpl__append_str(tmpl_buf *b, tv v) {
    switch (v.kind) {
    case TV_UNDEFINED: return;
    case TV_NONE: tmpl__buf_put(b, "None", 4); return;
    case TV_BOOL: tmpl__buf_put(b, v.b ? "True" : "False", v.b ? 4 : 5); return;
    case TV_INT: tmpl__buf_printf(b, "%lld", (long long)v.i); return;
    case TV_FLOAT: tmpl__append_float(b, v.f); return;
    case TV_STR: tmpl__buf_put(b, v.s, v.len); return;
    case TV_LIST:
    case TV_DICT: tmpl__append_repr(b, v); return;
    case TV_FUNC: tmpl__buf_printf(b, "<built-in function %s>", v.func->name); return;
    case TV_MACRO: tmpl__buf_printf(b, "<Macro '%s'>", v.macro->name); return;
    case TV_LOOP: tmpl__buf_put(b, "<LoopContext>", 13); return;
    }
}

/* template_json.c: the render context from JSON (jansson), and the tojson filter,
 * which Hugging Face defines as Python's json.dumps(x, ensure_ascii=False,
 * indent=indent, separators=separators, sort_keys=sort_keys): keys in insertion order
 * unless sorted, ", " and ": " between items without indent, "," and ": " with it,
 * non-ASCII text kept as it is unless ensure_ascii.
 */
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

/* tojson recursion bound: values cannot nest deeper (TMPL_MAX_VALUE_DEPTH), except
 * through namespaces, which tojson refuses anyway. */
#define JSON_MAX_DEPTH (TMPL_MAX_VALUE_DEPTH + 1)

/* Recursion is bounded by TMPL_MAX_VALUE_DEPTH: a deeper context stops the render
 * before descending further. */
static tv from_json_value(tmpl_arena *a, const json_t *j, int depth) {
    if (!j) return tmpl__none;
    if (depth > TMPL_MAX_VALUE_DEPTH) {
        a->failed = sp_fail(SP_ERR_RANGE, "template context nested deeper than %d levels", TMPL_MAX_VALUE_DEPTH);
        longjmp(*a->on_full, 1);
    }
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        tv d = tmpl__dict_new(a, json_object_size(j));
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            tmpl__dict_set(a, d.dict, tmpl__str(key, strlen(key)), from_json_value(a, val, depth + 1));
        }
        return d;
    }
    case JSON_ARRAY: {
        tv l = tmpl__list_new(a, json_array_size(j));
        size_t i;
        json_t *val;
        json_array_foreach(j, i, val) tmpl__list_push(a, l.list, from_json_value(a, val, depth + 1));
        return l;
    }
    /* the context outlives the render: its strings are borrowed, not copied */
    case JSON_STRING: return tmpl__str(json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return tmpl__int((int64_t)json_integer_value(j));
    case JSON_REAL: return tmpl__float(json_real_value(j));
    case JSON_TRUE: return tmpl__bool(true);
    case JSON_FALSE: return tmpl__bool(false);
    case JSON_NULL: return tmpl__none;
    }
    return tmpl__none;
}

tv tmpl__from_json(tmpl_arena *a, const json_t *j) {
    return from_json_value(a, j, 0);
}

/* ---- json.dumps ----------------------------------------------------------------- */

typedef struct dumper {
    tmpl_render_state *r;
    tmpl_buf *b;
    const char *indent; /* per level; NULL: no newlines */
    const char *item_sep, *key_sep;
    bool sort_keys;
    bool ensure_ascii;
} dumper;

/* Decodes the UTF-8 sequence at s[*i] (advancing *i past it); U+FFFD for malformed bytes. */
static uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    unsigned char c = (unsigned char)s[*i];
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    uint32_t cp = extra == 3 ? c & 0x07u : extra == 2 ? c & 0x0Fu : c & 0x1Fu;
    if (extra == 0 || *i + (size_t)extra >= n) {
        (*i)++;
        return 0xFFFD;
    }
    for (int k = 1; k <= extra; k++) {
        unsigned char cc = (unsigned char)s[*i + (size_t)k];
        if ((cc & 0xC0) != 0x80) {
            (*i)++;
            return 0xFFFD;
        }
        cp = (cp << 6) | (cc & 0x3Fu);
    }
    *i += (size_t)extra + 1;
    return cp;
}

static void dump_string(tmpl_buf *b, const char *s, size_t n, bool ensure_ascii) {
    tmpl__buf_putc(b, '"');
    size_t run = 0; /* bytes copied as they are, flushed together */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            /* with ensure_ascii, Python escapes everything outside ' '..'~' */
            if (c >= 0x20 && (c < 0x7f || !ensure_ascii)) {
                run++;
                continue;
            }
        }
        tmpl__buf_put(b, s + i - run, run);
        run = 0;
        if (c >= 0x80) { /* ensure_ascii: \uXXXX, as a surrogate pair above U+FFFF */
            uint32_t cp = utf8_next(s, n, &i);
            i--; /* the loop steps past the sequence's last byte */
            if (cp >= 0x10000) {
                cp -= 0x10000;
                tmpl__buf_printf(b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                tmpl__buf_printf(b, "\\u%04x", cp);
            }
            continue;
        }
        if (esc)
            tmpl__buf_put(b, esc, strlen(esc));
        else
            tmpl__buf_printf(b, "\\u%04x", c);
    }
    tmpl__buf_put(b, s + n - run, run);
    tmpl__buf_putc(b, '"');
}

static void newline_indent(dumper *d, int level) {
    if (!d->indent) return;
    tmpl__buf_putc(d->b, '\n');
    for (int i = 0; i < level; i++) tmpl__buf_put(d->b, d->indent, strlen(d->indent));
}

static void dump_value(dumper *d, tv v, int level);
#define DUMP_STRING(d, s, n) dump_string((d)->b, (s), (n), (d)->ensure_ascii)

/* A dict key as json.dumps writes it: strings as they are, other scalars converted. */
static void dump_key(dumper *d, tv k) {
    switch (k.kind) {
    case TV_STR: DUMP_STRING(d, k.s, k.len); return;
    case TV_NONE: tmpl__buf_put(d->b, "\"null\"", 6); return;
    case TV_BOOL: tmpl__buf_put(d->b, k.b ? "\"true\"" : "\"false\"", k.b ? 6 : 7); return;
    case TV_INT:
    case TV_FLOAT:
        tmpl__buf_putc(d->b, '"');
        dump_value(d, k, 0);
        tmpl__buf_putc(d->b, '"');
        return;
    default:
        tmpl__fail(d->r, SP_ERR_FORMAT, "tojson: keys must be str, int, float, bool or None, not %s",
                   tmpl__type_name(k));
    }
}

static int compare_keys(const void *x, const void *y) {
    const tv *a = *(const tv *const *)x, *b = *(const tv *const *)y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, n);
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static void dump_dict(dumper *d, tdict *dict, int level) {
    if (dict->n == 0) {
        tmpl__buf_put(d->b, "{}", 2);
        return;
    }
    /* order of the keys: insertion, or sorted (string keys only, as Python requires) */
    const tv **order = tmpl__alloc(d->b->arena, dict->n * sizeof(tv *));
    for (size_t i = 0; i < dict->n; i++) {
        order[i] = &dict->keys[i];
        if (d->sort_keys && dict->keys[i].kind != TV_STR)
            tmpl__fail(d->r, SP_ERR_FORMAT, "tojson: sort_keys needs str keys, not %s", tmpl__type_name(dict->keys[i]));
    }
    if (d->sort_keys) qsort(order, dict->n, sizeof(order[0]), compare_keys);
    tmpl__buf_putc(d->b, '{');
    for (size_t i = 0; i < dict->n; i++) {
        size_t k = (size_t)(order[i] - dict->keys);
        if (i) tmpl__buf_put(d->b, d->item_sep, strlen(d->item_sep));
        newline_indent(d, level + 1);
        dump_key(d, dict->keys[k]);
        tmpl__buf_put(d->b, d->key_sep, strlen(d->key_sep));
        dump_value(d, dict->vals[k], level + 1);
    }
    newline_indent(d, level);
    tmpl__buf_putc(d->b, '}');
}

static void dump_value(dumper *d, tv v, int level) {
    if (level > JSON_MAX_DEPTH) tmpl__fail(d->r, SP_ERR_FORMAT, "tojson: value nested too deeply (circular?)");
    switch (v.kind) {
    case TV_NONE: tmpl__buf_put(d->b, "null", 4); return;
    case TV_BOOL: tmpl__buf_put(d->b, v.b ? "true" : "false", v.b ? 4 : 5); return;
    case TV_INT: tmpl__buf_printf(d->b, "%lld", (long long)v.i); return;
    case TV_FLOAT:
        if (v.f != v.f)
            tmpl__buf_put(d->b, "NaN", 3);
        else if (v.f == 1.0 / 0.0)
            tmpl__buf_put(d->b, "Infinity", 8);
        else if (v.f == -1.0 / 0.0)
            tmpl__buf_put(d->b, "-Infinity", 9);
        else
            tmpl__append_float(d->b, v.f);
        return;
    case TV_STR: DUMP_STRING(d, v.s, v.len); return;
    case TV_LIST:
        if (v.list->iter_name) break;
        if (v.list->n == 0) {
            tmpl__buf_put(d->b, "[]", 2);
            return;
        }
        tmpl__buf_putc(d->b, '[');
        for (size_t i = 0; i < v.list->n; i++) {
            if (i) tmpl__buf_put(d->b, d->item_sep, strlen(d->item_sep));
            newline_indent(d, level + 1);
            dump_value(d, v.list->items[i], level + 1);
        }
        newline_indent(d, level);
        tmpl__buf_putc(d->b, ']');
        return;
    case TV_DICT:
        if (!v.dict->is_namespace) {
            dump_dict(d, v.dict, level);
            return;
        }
        break; /* a namespace is not JSON */
    default: break;
    }
    tmpl__fail(d->r, SP_ERR_FORMAT, "tojson: Object of type %s is not JSON serializable", tmpl__type_name(v));
}

void tmpl__tojson(tmpl_render_state *r, tmpl_buf *b, tv v, const tmpl_json_opts *o) {
    dumper d = {.r = r,
                .b = b,
                .indent = o->indent,
                .item_sep = o->item_sep,
                .key_sep = o->key_sep,
                .sort_keys = o->sort_keys,
                .ensure_ascii = o->ensure_ascii};
    dump_value(&d, v, 0);
}

/* template_filters.c: the filters chat templates apply (value | name(args)), each with
 * jinja2's behaviour and argument names, positional or keyword. map, select, reject,
 * selectattr, rejectattr and unique return one-pass generators as jinja2's do.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "template/template_internal.h"

#define NONE tmpl__none

typedef tv (*filter_fn)(tmpl_render_state *r, tv v, const tmpl_args *a);

/* Hugging Face's signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False) */
static tv f_tojson(tmpl_render_state *r, tv v, const tmpl_args *a) {
    bool ensure_ascii = tmpl__truthy(tmpl__arg(a, 0, "ensure_ascii", tmpl__bool(false)));
    tv indent_v = tmpl__arg(a, 1, "indent", NONE);
    tv seps = tmpl__arg(a, 2, "separators", NONE);
    bool sort_keys = tmpl__truthy(tmpl__arg(a, 3, "sort_keys", tmpl__bool(false)));
    const char *indent = NULL; /* None: one line */
    if (indent_v.kind == TV_STR) {
        indent = tmpl__strndup(&r->arena, indent_v.s, indent_v.len);
    } else if (indent_v.kind != TV_NONE && indent_v.kind != TV_UNDEFINED) {
        int64_t i = tmpl__arg_int(r, "tojson indent", indent_v);
        i = i < 0 ? 0 : i;
        if (i > 1024) tmpl__fail(r, SP_ERR_RANGE, "tojson: indent %lld too large", (long long)i);
        char *spaces = tmpl__alloc(&r->arena, (size_t)i + 1);
        memset(spaces, ' ', (size_t)i);
        indent = spaces;
    }
    const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
    if (seps.kind == TV_LIST && seps.list->n == 2) {
        item_sep = tmpl__strndup(&r->arena, tmpl__arg_str(r, "tojson separators", seps.list->items[0]).s,
                                 seps.list->items[0].len);
        key_sep = tmpl__strndup(&r->arena, tmpl__arg_str(r, "tojson separators", seps.list->items[1]).s,
                                seps.list->items[1].len);
    } else if (seps.kind != TV_NONE && seps.kind != TV_UNDEFINED) {
        tmpl__fail(r, SP_ERR_FORMAT, "tojson separators must be a pair of strings");
    }
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, 256);
    tmpl_json_opts opts = {.indent = indent,
                           .item_sep = item_sep,
                           .key_sep = key_sep,
                           .sort_keys = sort_keys,
                           .ensure_ascii = ensure_ascii};
    tmpl__tojson(r, &b, v, &opts);
    return tmpl__buf_value(&b);
}

static tv f_trim(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return tmpl__str_strip(tmpl__to_str(r, v), tmpl__arg(a, 0, "chars", NONE), true, true);
}
static tv f_length(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    switch (v.kind) {
    case TV_UNDEFINED: return tmpl__int(0);
    case TV_STR: return tmpl__int((int64_t)tmpl__to_list(r, v).list->n);
    case TV_LIST:
        if (v.list->iter_name) break;
        return tmpl__int((int64_t)v.list->n);
    case TV_DICT: return tmpl__int((int64_t)v.dict->n);
    default: break;
    }
    tmpl__fail(r, SP_ERR_FORMAT, "object of type '%s' has no len()", tmpl__type_name(v));
}
static tv f_upper(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return tmpl__str_map_case(r, tmpl__to_str(r, v), toupper);
}
static tv f_lower(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return tmpl__str_map_case(r, tmpl__to_str(r, v), tolower);
}
static tv f_capitalize(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return tmpl__str_capitalize(r, tmpl__to_str(r, v));
}
static tv f_title(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return tmpl__str_title(r, tmpl__to_str(r, v), true);
}
static tv f_replace(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv old = tmpl__to_str(r, tmpl__arg(a, 0, "old", NONE)), new_ = tmpl__to_str(r, tmpl__arg(a, 1, "new", NONE));
    tv count = tmpl__arg(a, 2, "count", NONE);
    return tmpl__str_replace(r, tmpl__to_str(r, v), old, new_,
                             count.kind == TV_NONE ? -1 : tmpl__arg_int(r, "replace", count));
}

/* Looks up a dotted attribute path ("function.name") on v, as jinja2's make_attrgetter;
 * integer parts index lists. */
static tv attr_path(tmpl_render_state *r, tv v, tv path) {
    if (path.kind == TV_INT) return tmpl__get_item(r, v, path);
    path = tmpl__arg_str(r, "attribute", path);
    size_t i = 0;
    while (i <= path.len) {
        const char *dot = memchr(path.s + i, '.', path.len - i);
        size_t end = dot ? (size_t)(dot - path.s) : path.len;
        tv key = tmpl__str(path.s + i, end - i);
        bool numeric = end > i;
        for (size_t k = i; k < end; k++)
            if (!isdigit((unsigned char)path.s[k])) numeric = false;
        if (numeric) { /* the part is a slice of path: parse exactly its digits */
            int64_t index = 0;
            for (size_t k = i; k < end && index < INT64_MAX / 10 - 9; k++) index = index * 10 + (path.s[k] - '0');
            key = tmpl__int(index);
        }
        v = tmpl__get_item(r, v, key); /* a part after an undefined one fails, as in jinja2 */
        i = end + 1;
        if (!dot) break;
    }
    return v;
}

static tv f_join(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv sep = tmpl__to_str(r, tmpl__arg(a, 0, "d", tmpl__str("", 0)));
    tv attribute = tmpl__arg(a, 1, "attribute", NONE);
    tv items = tmpl__to_list(r, v);
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, 64);
    for (size_t i = 0; i < items.list->n; i++) {
        if (i) tmpl__buf_put(&b, sep.s, sep.len);
        tv item = items.list->items[i];
        if (attribute.kind != TV_NONE) item = attr_path(r, item, attribute);
        tmpl__append_str(&b, item);
    }
    return tmpl__buf_value(&b);
}
static tv f_default(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)r;
    tv dflt = tmpl__arg(a, 0, "default_value", tmpl__str("", 0));
    bool boolean = tmpl__truthy(tmpl__arg(a, 1, "boolean", tmpl__bool(false)));
    if (v.kind == TV_UNDEFINED || (boolean && !tmpl__truthy(v))) return dflt;
    return v;
}
static tv f_first(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    tv items = tmpl__to_list(r, v);
    return items.list->n ? items.list->items[0] : tmpl__undefined_named("first", 5);
}
static tv f_last(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    if (v.kind == TV_LIST && v.list->iter_name)
        tmpl__fail(r, SP_ERR_FORMAT, "'%s' object is not reversible", v.list->iter_name);
    tv items = tmpl__to_list(r, v);
    return items.list->n ? items.list->items[items.list->n - 1] : tmpl__undefined_named("last", 4);
}
static tv f_list(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    tv items = tmpl__to_list(r, v);
    if (items.kind == TV_LIST && items.list == v.list && v.kind == TV_LIST) {
        tv copy = tmpl__list_new(&r->arena, v.list->n);
        for (size_t i = 0; i < v.list->n; i++) tmpl__list_push(&r->arena, copy.list, v.list->items[i]);
        return copy;
    }
    return items;
}
static tv f_items(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    if (v.kind == TV_UNDEFINED) return tmpl__list_new(&r->arena, 0);
    if (v.kind != TV_DICT)
        tmpl__fail(r, SP_ERR_FORMAT, "items: can only get item pairs from a mapping, not %s", tmpl__type_name(v));
    return tmpl__dict_items(r, v.dict);
}
static tv f_string(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return tmpl__to_str(r, v);
}

/* The text of s without Python whitespace at either end. */
static tv trimmed(tv s) {
    return tmpl__str_strip(s, tmpl__none, true, true);
}

/* Python's int(s, base): optional sign, digits of base with single underscores between
 * them; with base 16, 8 or 2 (or 0, which reads the prefix) an 0x/0o/0b prefix. */
static bool parse_int(tv s, int base, int64_t *out) {
    s = trimmed(s);
    size_t i = 0, n = s.len;
    bool neg = false;
    if (i < n && (s.s[i] == '+' || s.s[i] == '-')) neg = s.s[i++] == '-';
    if (i + 1 < n && s.s[i] == '0') {
        char p = (char)tolower((unsigned char)s.s[i + 1]);
        int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (prefixed && (base == 0 || base == prefixed)) {
            base = prefixed;
            i += 2;
            if (i < n && s.s[i] == '_') i++; /* 0x_1f is allowed */
        }
    }
    if (base == 0) { /* no prefix: decimal, and a leading 0 only in "0", "00"... */
        base = 10;
        if (s.s[i] == '0')
            for (size_t k = i; k < n; k++)
                if (s.s[k] != '0' && s.s[k] != '_') return false;
    }
    if (i == n) return false;
    int64_t v = 0;
    for (bool prev_digit = false; i < n; i++) {
        char c = s.s[i];
        if (c == '_') {
            if (!prev_digit || i + 1 == n) return false;
            prev_digit = false;
            continue;
        }
        int d = isdigit((unsigned char)c) ? c - '0' : isalpha((unsigned char)c) ? tolower(c) - 'a' + 10 : 99;
        if (d >= base) return false;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
        prev_digit = true;
    }
    *out = neg ? -v : v;
    return true;
}

/* Python's float(s): decimal digits (single underscores between them), an optional
 * fraction and exponent, or inf / infinity / nan; surrounding whitespace allowed. */
static bool parse_float(tmpl_render_state *r, tv s, double *out) {
    s = trimmed(s);
    char *buf = tmpl__alloc(&r->arena, s.len + 1);
    size_t n = 0, i = 0, digits = 0;
    if (i < s.len && (s.s[i] == '+' || s.s[i] == '-')) buf[n++] = s.s[i++];
    const char *word = s.s + i;
    size_t wlen = s.len - i;
    if ((wlen == 3 && (strncasecmp(word, "inf", 3) == 0 || strncasecmp(word, "nan", 3) == 0)) ||
        (wlen == 8 && strncasecmp(word, "infinity", 8) == 0)) {
        memcpy(buf + n, word, wlen);
        buf[n + wlen] = '\0';
        *out = strtod(buf, NULL);
        return true;
    }
    bool prev_digit = false, seen_dot = false, seen_exp = false;
    for (; i < s.len; i++) {
        char c = s.s[i];
        if (isdigit((unsigned char)c)) {
            buf[n++] = c;
            digits++;
            prev_digit = true;
        } else if (c == '_' && prev_digit && i + 1 < s.len && isdigit((unsigned char)s.s[i + 1])) {
            prev_digit = false;
        } else if (c == '.' && !seen_dot && !seen_exp) {
            buf[n++] = c;
            seen_dot = true;
            prev_digit = false;
        } else if ((c == 'e' || c == 'E') && !seen_exp && digits > 0) {
            buf[n++] = c;
            seen_exp = true;
            prev_digit = false;
            digits = 0;
            if (i + 1 < s.len && (s.s[i + 1] == '+' || s.s[i + 1] == '-')) buf[n++] = s.s[++i];
        } else {
            return false;
        }
    }
    if (digits == 0) return false;
    buf[n] = '\0';
    *out = strtod(buf, NULL);
    return true;
}

/* jinja2's int filter: int(s, base) for strings, else int(); failing that int(float(s));
 * failing that the default. */
static tv f_int(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv dflt = tmpl__arg(a, 0, "default", tmpl__int(0));
    int base = (int)tmpl__arg_int(r, "int base", tmpl__arg(a, 1, "base", tmpl__int(10)));
    if (base != 0 && (base < 2 || base > 36)) tmpl__fail(r, SP_ERR_FORMAT, "int: base must be 0 or 2-36");
    double f;
    switch (v.kind) {
    case TV_INT: return v;
    case TV_BOOL: return tmpl__int(v.b);
    case TV_FLOAT: return isfinite(v.f) && fabs(v.f) < 9.2e18 ? tmpl__int((int64_t)v.f) : dflt;
    case TV_STR: {
        int64_t i;
        if (parse_int(v, base, &i)) return tmpl__int(i);
        if (parse_float(r, v, &f) && isfinite(f) && fabs(f) < 9.2e18) return tmpl__int((int64_t)f);
        return dflt;
    }
    default: return dflt;
    }
}
static tv f_float(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv dflt = tmpl__arg(a, 0, "default", tmpl__float(0.0));
    double f;
    switch (v.kind) {
    case TV_FLOAT: return v;
    case TV_INT: return tmpl__float((double)v.i);
    case TV_BOOL: return tmpl__float(v.b);
    case TV_STR: return parse_float(r, v, &f) ? tmpl__float(f) : dflt;
    default: return dflt;
    }
}

/* jinja2's round: 'common' is Python's round() (correctly rounded, ties to even; an int
 * stays an int), 'ceil' and 'floor' scale by 10**precision. */
static tv f_round(tmpl_render_state *r, tv v, const tmpl_args *a) {
    int64_t precision = tmpl__arg_int(r, "round precision", tmpl__arg(a, 0, "precision", tmpl__int(0)));
    tv method = tmpl__arg(a, 1, "method", tmpl__str("common", 6));
    if (v.kind != TV_INT && v.kind != TV_FLOAT && v.kind != TV_BOOL)
        tmpl__fail(r, SP_ERR_FORMAT, "round: expected a number, got %s", tmpl__type_name(v));
    bool common = tmpl__is_str(method, "common");
    if (!common && !tmpl__is_str(method, "ceil") && !tmpl__is_str(method, "floor"))
        tmpl__fail(r, SP_ERR_FORMAT, "round: method must be common, ceil or floor");
    if (precision > 300) precision = 300;
    if (precision < -300) precision = -300;
    if (common && v.kind != TV_FLOAT) {
        int64_t x = v.kind == TV_INT ? v.i : v.b;
        if (precision >= 0 || precision < -18) return tmpl__int(precision >= 0 ? x : 0);
        int64_t unit = 1;
        for (int64_t k = 0; k < -precision; k++) unit *= 10;
        int64_t q = x / unit, rem = x % unit;
        if (rem < 0) {
            q -= 1;
            rem += unit;
        }
        if (rem * 2 > unit || (rem * 2 == unit && (q & 1))) q += 1; /* ties to even */
        int64_t out;
        if (__builtin_mul_overflow(q, unit, &out)) tmpl__fail(r, SP_ERR_RANGE, "integer overflow in round");
        return tmpl__int(out);
    }
    double x = v.kind == TV_FLOAT ? v.f : v.kind == TV_INT ? (double)v.i : v.b;
    if (!isfinite(x)) return tmpl__float(x);
    if (common && precision >= 0) {
        /* printf rounds the exact binary value, ties to even: Python's round() */
        size_t cap = 330 + (size_t)precision; /* 309 integer digits at most, the point, the fraction */
        char *buf = tmpl__alloc(&r->arena, cap);
        snprintf(buf, cap, "%.*f", (int)precision, x);
        return tmpl__float(strtod(buf, NULL));
    }
    double scale = pow(10.0, (double)precision);
    double y = x * scale;
    y = common ? nearbyint(y) : tmpl__is_str(method, "ceil") ? ceil(y) : floor(y);
    return tmpl__float(y / scale);
}
static tv f_abs(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    if (v.kind == TV_INT) {
        if (v.i == INT64_MIN) tmpl__fail(r, SP_ERR_RANGE, "integer overflow in abs");
        return tmpl__int(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == TV_BOOL) return tmpl__int(v.b);
    if (v.kind == TV_FLOAT) return tmpl__float(fabs(v.f));
    tmpl__fail(r, SP_ERR_FORMAT, "bad operand type for abs(): '%s'", tmpl__type_name(v));
}

/* Shifts the arguments of select/map-style filters: a[skip:] */
static tmpl_args args_from(const tmpl_args *a, size_t skip) {
    tmpl_args out = *a;
    out.pos = a->n_pos > skip ? a->pos + skip : NULL;
    out.n_pos = a->n_pos > skip ? a->n_pos - skip : 0;
    return out;
}

/* Marks a filter's result as the one-pass generator jinja2 returns. */
static tv generator(tv list) {
    list.list->iter_name = "generator";
    return list;
}

static tv f_map(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv items = tmpl__to_list(r, v);
    tv out = tmpl__list_new(&r->arena, items.list->n);
    tv attribute = tmpl__arg(a, SIZE_MAX, "attribute", NONE);
    if (attribute.kind != TV_NONE) {
        tv dflt = tmpl__arg(a, SIZE_MAX, "default", tmpl__undefined);
        for (size_t i = 0; i < items.list->n; i++) {
            tv x = attr_path(r, items.list->items[i], attribute);
            tmpl__list_push(&r->arena, out.list, x.kind == TV_UNDEFINED && dflt.kind != TV_UNDEFINED ? dflt : x);
        }
        return generator(out);
    }
    if (a->n_pos == 0) tmpl__fail(r, SP_ERR_FORMAT, "map: needs a filter name or attribute=");
    tv filter = tmpl__arg_str(r, "map", a->pos[0]);
    tmpl_args rest = args_from(a, 1);
    for (size_t i = 0; i < items.list->n; i++)
        tmpl__list_push(&r->arena, out.list, tmpl__apply_filter(r, filter.s, filter.len, items.list->items[i], &rest));
    return generator(out);
}

/* select / reject / selectattr / rejectattr */
static tv select_items(tmpl_render_state *r, tv v, const tmpl_args *a, bool by_attr, bool keep) {
    tv items = tmpl__to_list(r, v);
    tv out = tmpl__list_new(&r->arena, items.list->n);
    size_t first = by_attr ? 1 : 0;
    if (by_attr && a->n_pos == 0) tmpl__fail(r, SP_ERR_FORMAT, "selectattr/rejectattr need an attribute name");
    tv test = a->n_pos > first ? tmpl__arg_str(r, "select test", a->pos[first]) : NONE;
    tmpl_args rest = args_from(a, first + 1);
    for (size_t i = 0; i < items.list->n; i++) {
        tv x = by_attr ? attr_path(r, items.list->items[i], a->pos[0]) : items.list->items[i];
        bool pass = test.kind == TV_STR ? tmpl__apply_test(r, test.s, test.len, x, &rest) : tmpl__truthy(x);
        if (pass == keep) tmpl__list_push(&r->arena, out.list, items.list->items[i]);
    }
    return generator(out);
}
static tv f_select(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return select_items(r, v, a, false, true);
}
static tv f_reject(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return select_items(r, v, a, false, false);
}
static tv f_selectattr(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return select_items(r, v, a, true, true);
}
static tv f_rejectattr(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return select_items(r, v, a, true, false);
}

/* jinja2 compares strings case-insensitively in unique, sort, min, max, dictsort
 * unless case_sensitive is set. */
static tv sort_key(tmpl_render_state *r, tv v, bool case_sensitive) {
    return v.kind == TV_STR && !case_sensitive ? tmpl__str_map_case(r, v, tolower) : v;
}

static tv f_unique(tmpl_render_state *r, tv v, const tmpl_args *a) {
    bool case_sensitive = tmpl__truthy(tmpl__arg(a, 0, "case_sensitive", tmpl__bool(false)));
    tv attribute = tmpl__arg(a, 1, "attribute", NONE);
    tv items = tmpl__to_list(r, v);
    tv out = tmpl__list_new(&r->arena, items.list->n), seen = tmpl__list_new(&r->arena, items.list->n);
    for (size_t i = 0; i < items.list->n; i++) {
        tv x = items.list->items[i];
        tv key = sort_key(r, attribute.kind != TV_NONE ? attr_path(r, x, attribute) : x, case_sensitive);
        bool dup = false;
        tmpl__charge(r, seen.list->n); /* a linear scan: bounded by the step limit */
        for (size_t j = 0; j < seen.list->n && !dup; j++) dup = tmpl__equal(seen.list->items[j], key);
        if (dup) continue;
        tmpl__list_push(&r->arena, seen.list, key);
        tmpl__list_push(&r->arena, out.list, x);
    }
    return generator(out);
}

static tv f_indent(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv width = tmpl__arg(a, 0, "width", tmpl__int(4));
    bool first = tmpl__truthy(tmpl__arg(a, 1, "first", tmpl__bool(false)));
    bool blank = tmpl__truthy(tmpl__arg(a, 2, "blank", tmpl__bool(false)));
    tv pad;
    if (width.kind == TV_STR) {
        pad = width;
    } else {
        int64_t w = tmpl__arg_int(r, "indent width", width);
        if (w < 0) w = 0;
        if (w > 1024) tmpl__fail(r, SP_ERR_RANGE, "indent: width %lld too large", (long long)w);
        char *p = tmpl__alloc(&r->arena, (size_t)w + 1);
        memset(p, ' ', (size_t)w);
        pad = tmpl__str(p, (size_t)w);
    }
    tv s = tmpl__to_str(r, v);
    /* jinja2 appends a newline first (its comment: "this quirk is necessary for
     * splitlines method") so a trailing newline is dropped by splitlines */
    tmpl_buf withnl;
    tmpl__buf_init(&withnl, &r->arena, s.len + 2);
    tmpl__buf_put(&withnl, s.s, s.len);
    tmpl__buf_putc(&withnl, '\n');
    tv lines = tmpl__str_splitlines(r, tmpl__buf_value(&withnl));
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len * 2 + 16);
    if (first) tmpl__buf_put(&b, pad.s, pad.len);
    for (size_t i = 0; i < lines.list->n; i++) {
        tv line = lines.list->items[i];
        if (i > 0) {
            tmpl__buf_putc(&b, '\n');
            if (blank || line.len > 0) tmpl__buf_put(&b, pad.s, pad.len);
        }
        tmpl__buf_put(&b, line.s, line.len);
    }
    return tmpl__buf_value(&b);
}
static tv f_safe(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return tmpl__to_str(r, v);
}
static tv f_batch(tmpl_render_state *r, tv v, const tmpl_args *a) {
    int64_t size = tmpl__arg_int(r, "batch", tmpl__arg(a, 0, "linecount", NONE));
    if (size <= 0) tmpl__fail(r, SP_ERR_FORMAT, "batch: size must be positive");
    tv fill = tmpl__arg(a, 1, "fill_with", NONE);
    bool do_fill = tmpl__arg_given(a, 1, "fill_with") && fill.kind != TV_NONE;
    tv items = tmpl__to_list(r, v);
    tv out = tmpl__list_new(&r->arena, items.list->n / (size_t)size + 1);
    tv cur = tmpl__list_new(&r->arena, (size_t)size < 64 ? (size_t)size : 64);
    for (size_t i = 0; i < items.list->n; i++) {
        tmpl__list_push(&r->arena, cur.list, items.list->items[i]);
        if ((int64_t)cur.list->n == size) {
            tmpl__list_push(&r->arena, out.list, cur);
            cur = tmpl__list_new(&r->arena, 4);
        }
    }
    if (cur.list->n) {
        while (do_fill && (int64_t)cur.list->n < size) tmpl__list_push(&r->arena, cur.list, fill);
        tmpl__list_push(&r->arena, out.list, cur);
    }
    return out;
}
static tv f_escape(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    tv s = tmpl__to_str(r, v);
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len + 16);
    for (size_t i = 0; i < s.len; i++) {
        switch (s.s[i]) {
        case '&': tmpl__buf_put(&b, "&amp;", 5); break;
        case '<': tmpl__buf_put(&b, "&lt;", 4); break;
        case '>': tmpl__buf_put(&b, "&gt;", 4); break;
        case '"': tmpl__buf_put(&b, "&#34;", 5); break;
        case '\'': tmpl__buf_put(&b, "&#39;", 5); break;
        default: tmpl__buf_putc(&b, s.s[i]);
        }
    }
    return tmpl__buf_value(&b);
}
/* jinja2: a reversed string; reversed() of a list or dict (a one-pass iterator); a
 * generator, which cannot be reversed, becomes a reversed list. */
static tv f_reverse(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    bool was_iterator = v.kind == TV_LIST && v.list->iter_name;
    tv items = tmpl__to_list(r, v);
    tv out = tmpl__list_new(&r->arena, items.list->n);
    for (size_t i = items.list->n; i > 0; i--) tmpl__list_push(&r->arena, out.list, items.list->items[i - 1]);
    if (v.kind == TV_LIST && !was_iterator) out.list->iter_name = "list_reverseiterator";
    if (v.kind == TV_DICT) out.list->iter_name = "dict_reversekeyiterator";
    if (v.kind != TV_STR) return out;
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, v.len + 1);
    for (size_t i = 0; i < out.list->n; i++) tmpl__buf_put(&b, out.list->items[i].s, out.list->items[i].len);
    return tmpl__buf_value(&b);
}

/* A stable bottom-up merge sort of items by key (Python's sort is stable too); every
 * pass over the n items counts n steps. */
static void sort_by_keys(tmpl_render_state *r, tv *items, tv *keys, size_t n, bool reverse) {
    tv *tmp_items = tmpl__alloc(&r->arena, (n + 1) * sizeof(tv)),
       *tmp_keys = tmpl__alloc(&r->arena, (n + 1) * sizeof(tv));
    for (size_t width = 1; width < n; width *= 2) {
        tmpl__charge(r, n);
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int c = tmpl__order(r, "<", keys[j], keys[i]);
                bool take_right = reverse ? c > 0 : c < 0; /* ties keep the left (earlier) item */
                size_t from = take_right ? j++ : i++;
                tmp_items[k] = items[from];
                tmp_keys[k++] = keys[from];
            }
            for (; i < mid; i++, k++) tmp_items[k] = items[i], tmp_keys[k] = keys[i];
            for (; j < hi; j++, k++) tmp_items[k] = items[j], tmp_keys[k] = keys[j];
        }
        memcpy(items, tmp_items, n * sizeof(tv));
        memcpy(keys, tmp_keys, n * sizeof(tv));
    }
}

static tv f_sort(tmpl_render_state *r, tv v, const tmpl_args *a) {
    bool reverse = tmpl__truthy(tmpl__arg(a, 0, "reverse", tmpl__bool(false)));
    bool case_sensitive = tmpl__truthy(tmpl__arg(a, 1, "case_sensitive", tmpl__bool(false)));
    tv attribute = tmpl__arg(a, 2, "attribute", NONE);
    tv items = f_list(r, v, a);
    tv *keys = tmpl__alloc(&r->arena, (items.list->n + 1) * sizeof(tv));
    /* attribute='a,b' sorts by the tuple of both (jinja2's make_multi_attrgetter) */
    tv parts = attribute.kind == TV_STR ? tmpl__str_split(r, attribute, tmpl__str(",", 1), -1) : NONE;
    for (size_t i = 0; i < items.list->n; i++) {
        tv x = items.list->items[i];
        if (parts.kind == TV_LIST && parts.list->n > 1) {
            tv key = tmpl__list_new(&r->arena, parts.list->n);
            for (size_t k = 0; k < parts.list->n; k++)
                tmpl__list_push(&r->arena, key.list,
                                sort_key(r, attr_path(r, x, parts.list->items[k]), case_sensitive));
            keys[i] = key;
        } else {
            keys[i] = sort_key(r, attribute.kind != TV_NONE ? attr_path(r, x, attribute) : x, case_sensitive);
        }
    }
    sort_by_keys(r, items.list->items, keys, items.list->n, reverse);
    return items;
}
static tv f_dictsort(tmpl_render_state *r, tv v, const tmpl_args *a) {
    bool case_sensitive = tmpl__truthy(tmpl__arg(a, 0, "case_sensitive", tmpl__bool(false)));
    tv by = tmpl__arg(a, 1, "by", tmpl__str("key", 3));
    bool reverse = tmpl__truthy(tmpl__arg(a, 2, "reverse", tmpl__bool(false)));
    if (v.kind != TV_DICT) tmpl__fail(r, SP_ERR_FORMAT, "dictsort: expected a mapping, got %s", tmpl__type_name(v));
    tv items = tmpl__dict_items(r, v.dict);
    bool by_value = tmpl__is_str(by, "value");
    tv *keys = tmpl__alloc(&r->arena, (items.list->n + 1) * sizeof(tv));
    for (size_t i = 0; i < items.list->n; i++)
        keys[i] = sort_key(r, items.list->items[i].list->items[by_value ? 1 : 0], case_sensitive);
    sort_by_keys(r, items.list->items, keys, items.list->n, reverse);
    return items;
}
static tv f_sum(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv attribute = tmpl__arg(a, 0, "attribute", NONE);
    tv total = tmpl__arg(a, 1, "start", tmpl__int(0));
    tv items = tmpl__to_list(r, v);
    for (size_t i = 0; i < items.list->n; i++) {
        tv x = attribute.kind != TV_NONE ? attr_path(r, items.list->items[i], attribute) : items.list->items[i];
        bool ints = (total.kind == TV_INT || total.kind == TV_BOOL) && (x.kind == TV_INT || x.kind == TV_BOOL);
        if (ints) {
            int64_t sum;
            if (__builtin_add_overflow(total.kind == TV_INT ? total.i : total.b, x.kind == TV_INT ? x.i : x.b, &sum))
                tmpl__fail(r, SP_ERR_RANGE, "integer overflow in sum");
            total = tmpl__int(sum);
        } else if ((total.kind == TV_INT || total.kind == TV_FLOAT || total.kind == TV_BOOL) &&
                   (x.kind == TV_INT || x.kind == TV_FLOAT || x.kind == TV_BOOL)) {
            double t = total.kind == TV_FLOAT ? total.f : total.kind == TV_INT ? (double)total.i : total.b;
            double y = x.kind == TV_FLOAT ? x.f : x.kind == TV_INT ? (double)x.i : x.b;
            total = tmpl__float(t + y);
        } else {
            tmpl__fail(r, SP_ERR_FORMAT, "sum: unsupported operand types '%s' and '%s'", tmpl__type_name(total),
                       tmpl__type_name(x));
        }
    }
    return total;
}
static tv min_max(tmpl_render_state *r, tv v, const tmpl_args *a, bool want_max) {
    bool case_sensitive = tmpl__truthy(tmpl__arg(a, 0, "case_sensitive", tmpl__bool(false)));
    tv attribute = tmpl__arg(a, 1, "attribute", NONE);
    tv items = tmpl__to_list(r, v);
    if (items.list->n == 0) return tmpl__undefined_named(want_max ? "max" : "min", 3);
    size_t best = 0;
    tv best_key = tmpl__undefined;
    for (size_t i = 0; i < items.list->n; i++) {
        tv x = items.list->items[i];
        tv key = sort_key(r, attribute.kind != TV_NONE ? attr_path(r, x, attribute) : x, case_sensitive);
        if (i == 0 || (want_max ? tmpl__order(r, ">", key, best_key) > 0 : tmpl__order(r, "<", key, best_key) < 0)) {
            best = i;
            best_key = key;
        }
    }
    return items.list->items[best];
}
static tv f_min(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return min_max(r, v, a, false);
}
static tv f_max(tmpl_render_state *r, tv v, const tmpl_args *a) {
    return min_max(r, v, a, true);
}
static tv f_wordcount(tmpl_render_state *r, tv v, const tmpl_args *a) {
    (void)a;
    return tmpl__int((int64_t)tmpl__str_count_words(tmpl__to_str(r, v))); /* jinja2 counts \w+ runs */
}
static tv f_center(tmpl_render_state *r, tv v, const tmpl_args *a) {
    int64_t width = tmpl__arg_int(r, "center", tmpl__arg(a, 0, "width", tmpl__int(80)));
    tv s = tmpl__to_str(r, v);
    int64_t chars = (int64_t)tmpl__to_list(r, s).list->n;
    if (width > 100000) tmpl__fail(r, SP_ERR_RANGE, "center: width too large");
    if (width <= chars) return s;
    int64_t total = width - chars, left = total / 2 + (total & width & 1);
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len + (size_t)total + 1);
    for (int64_t i = 0; i < left; i++) tmpl__buf_putc(&b, ' ');
    tmpl__buf_put(&b, s.s, s.len);
    for (int64_t i = left; i < total; i++) tmpl__buf_putc(&b, ' ');
    return tmpl__buf_value(&b);
}

/* jinja2's format filter: value % (kwargs or args) */
static tv f_format(tmpl_render_state *r, tv v, const tmpl_args *a) {
    if (a->n_kw && a->n_pos)
        tmpl__fail(r, SP_ERR_FORMAT, "format: can't handle positional and keyword arguments at the same time");
    tv args;
    if (a->n_kw) {
        args = tmpl__dict_new(&r->arena, a->n_kw);
        for (size_t i = 0; i < a->n_kw; i++)
            tmpl__dict_set(&r->arena, args.dict, tmpl__str(a->kw_names[i], strlen(a->kw_names[i])), a->kw_vals[i]);
    } else {
        args = tmpl__list_new(&r->arena, a->n_pos);
        args.list->is_tuple = true;
        for (size_t i = 0; i < a->n_pos; i++) tmpl__list_push(&r->arena, args.list, a->pos[i]);
    }
    return tmpl__percent_format(r, tmpl__to_str(r, v), args);
}

/* jinja2's truncate(s, length=255, killwords=False, end='...', leeway=5), by code point */
static tv f_truncate(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv s = tmpl__to_str(r, v);
    int64_t length = tmpl__arg_int(r, "truncate length", tmpl__arg(a, 0, "length", tmpl__int(255)));
    bool killwords = tmpl__truthy(tmpl__arg(a, 1, "killwords", tmpl__bool(false)));
    tv end = tmpl__to_str(r, tmpl__arg(a, 2, "end", tmpl__str("...", 3)));
    tv leeway_v = tmpl__arg(a, 3, "leeway", NONE);
    int64_t leeway = leeway_v.kind == TV_NONE ? 5 : tmpl__arg_int(r, "truncate leeway", leeway_v);
    tv chars = tmpl__to_list(r, s), end_chars = tmpl__to_list(r, end);
    int64_t n = (int64_t)chars.list->n, n_end = (int64_t)end_chars.list->n;
    if (length < n_end)
        tmpl__fail(r, SP_ERR_FORMAT, "truncate: expected length >= %lld, got %lld", (long long)n_end,
                   (long long)length);
    if (leeway < 0) tmpl__fail(r, SP_ERR_FORMAT, "truncate: expected leeway >= 0, got %lld", (long long)leeway);
    if (n <= length || n - length <= leeway) return s; /* no overflow for any leeway */
    size_t keep_bytes = 0;
    for (int64_t i = 0; i < length - n_end; i++) keep_bytes += chars.list->items[i].len;
    tv kept = tmpl__str(s.s, keep_bytes);
    if (!killwords) { /* drop the last, cut word: s[:length - len(end)].rsplit(" ", 1)[0] */
        const char *space = memrchr(kept.s, ' ', kept.len);
        if (space) kept.len = (size_t)(space - kept.s);
    }
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, kept.len + end.len + 1);
    tmpl__buf_put(&b, kept.s, kept.len);
    tmpl__buf_put(&b, end.s, end.len);
    return tmpl__buf_value(&b);
}

/* jinja2's attr(obj, name): an attribute only (a method, a namespace or loop field),
 * never a dict item. */
static tv f_attr(tmpl_render_state *r, tv v, const tmpl_args *a) {
    tv name = tmpl__to_str(r, tmpl__arg(a, 0, "name", NONE));
    if (v.kind == TV_LOOP || (v.kind == TV_DICT && v.dict->is_namespace)) return tmpl__get_attr(r, v, name.s, name.len);
    return tmpl__bind_method(r, v, name.s, name.len);
}

typedef struct named_filter {
    const char *name;
    filter_fn fn;
} named_filter;

static const named_filter FILTERS[] = {{"tojson", f_tojson},
                                       {"trim", f_trim},
                                       {"length", f_length},
                                       {"count", f_length},
                                       {"upper", f_upper},
                                       {"lower", f_lower},
                                       {"capitalize", f_capitalize},
                                       {"title", f_title},
                                       {"replace", f_replace},
                                       {"join", f_join},
                                       {"default", f_default},
                                       {"d", f_default},
                                       {"first", f_first},
                                       {"last", f_last},
                                       {"list", f_list},
                                       {"items", f_items},
                                       {"string", f_string},
                                       {"int", f_int},
                                       {"float", f_float},
                                       {"round", f_round},
                                       {"abs", f_abs},
                                       {"map", f_map},
                                       {"select", f_select},
                                       {"reject", f_reject},
                                       {"selectattr", f_selectattr},
                                       {"rejectattr", f_rejectattr},
                                       {"unique", f_unique},
                                       {"indent", f_indent},
                                       {"safe", f_safe},
                                       {"batch", f_batch},
                                       {"escape", f_escape},
                                       {"e", f_escape},
                                       {"forceescape", f_escape},
                                       {"reverse", f_reverse},
                                       {"sort", f_sort},
                                       {"dictsort", f_dictsort},
                                       {"sum", f_sum},
                                       {"min", f_min},
                                       {"max", f_max},
                                       {"wordcount", f_wordcount},
                                       {"center", f_center},
                                       {"format", f_format},
                                       {"truncate", f_truncate},
                                       {"attr", f_attr},
                                       {NULL, NULL}};

tv tmpl__apply_filter(tmpl_render_state *r, const char *name, size_t len, tv v, const tmpl_args *a) {
    for (const named_filter *f = FILTERS; f->name; f++)
        if (strlen(f->name) == len && memcmp(f->name, name, len) == 0) return f->fn(r, v, a);
    tmpl__fail(r, SP_ERR_FORMAT, "no filter named '%.*s'", (int)len, name);
}

bool tmpl__filter_exists(const char *name, size_t len) {
    for (const named_filter *f = FILTERS; f->name; f++)
        if (strlen(f->name) == len && memcmp(f->name, name, len) == 0) return true;
    return false;
}

/* template_str_methods.c: the methods of strings (' x '.strip(), .split(), .find(),
 * .format() ...) with Python's argument names and behaviour, on code points; built on
 * the str operations of template_strings.c.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

#define NONE tmpl__none

/* ---- string methods ------------------------------------------------------------- */

/* Fails as Python does when a method gets fewer than min or more than max arguments, or
 * a keyword not in kw (NULL-terminated; NULL when it takes none). */
static void check_args(tmpl_render_state *r, const tmpl_args *a, const char *name, size_t min, size_t max,
                       const char *const *kw) {
    for (size_t k = 0; k < a->n_kw; k++) {
        const char *const *p = kw;
        while (p && *p && strcmp(*p, a->kw_names[k]) != 0) p++;
        if (!p) tmpl__fail(r, SP_ERR_FORMAT, "%s() takes no keyword arguments", name);
        if (!*p) tmpl__fail(r, SP_ERR_FORMAT, "'%s' is an invalid keyword argument for %s()", a->kw_names[k], name);
    }
    size_t given = a->n_pos + a->n_kw;
    if (given > max) tmpl__fail(r, SP_ERR_FORMAT, "%s() takes at most %zu argument(s) (%zu given)", name, max, given);
    if (given < min) tmpl__fail(r, SP_ERR_FORMAT, "%s() takes at least %zu argument(s) (%zu given)", name, min, given);
}

#define NO_KW NULL

/* A method that only passes its arguments on. */
#define STR_METHOD(name, expr)                                                 \
    static tv name(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) { \
        return expr;                                                           \
    }

static tv str_arg(tmpl_render_state *r, const char *name, tv v) {
    if (v.kind != TV_STR) tmpl__fail(r, SP_ERR_FORMAT, "%s() argument must be str, not %s", name, tmpl__type_name(v));
    return v;
}

/* The bytes [*b0, *b1) of s between Python's optional (start, end) arguments at
 * positions i and i + 1, clamped as slice indices; *c0 the code point index of *b0.
 * False when the span is shorter than need code points (Python finds nothing then). */
static bool str_span(tmpl_render_state *r, const char *name, tv s, const tmpl_args *a, size_t i, size_t need,
                     size_t *b0, size_t *b1, int64_t *c0) {
    int64_t len = (int64_t)tmpl__cp_count(s.s, s.len), start = 0, end = len;
    tv v = tmpl__arg(a, i, NULL, NONE);
    if (v.kind != TV_NONE) start = tmpl__arg_int(r, name, v);
    v = tmpl__arg(a, i + 1, NULL, NONE);
    if (v.kind != TV_NONE) end = tmpl__arg_int(r, name, v);
    if (end > len) end = len;
    if (end < 0) end = end < -len ? 0 : end + len;
    if (start < 0) start = start < -len ? 0 : start + len;
    if (end - start < (int64_t)need) return false;
    *b0 = tmpl__cp_offset(s.s, s.len, (size_t)start);
    *b1 = *b0 + tmpl__cp_offset(s.s + *b0, s.len - *b0, (size_t)(end - start));
    *c0 = start;
    return true;
}

/* find/rfind/index/rindex: the code point index of sub, or -1 */
static int64_t str_find(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, bool last) {
    check_args(r, a, name, 1, 3, NO_KW);
    tv s = f->self, sub = str_arg(r, name, tmpl__arg(a, 0, NULL, NONE));
    size_t b0, b1;
    int64_t c0;
    if (!str_span(r, name, s, a, 1, tmpl__cp_count(sub.s, sub.len), &b0, &b1, &c0)) return -1;
    const char *hit = last      ? tmpl__mem_last(s.s + b0, b1 - b0, sub.s, sub.len)
                      : sub.len ? memmem(s.s + b0, b1 - b0, sub.s, sub.len)
                                : s.s + b0;
    return hit ? c0 + (int64_t)tmpl__cp_count(s.s + b0, (size_t)(hit - (s.s + b0))) : -1;
}

STR_METHOD(m_find, tmpl__int(str_find(r, f, a, "find", false)))
STR_METHOD(m_rfind, tmpl__int(str_find(r, f, a, "rfind", true)))
static tv m_index(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    int64_t at = str_find(r, f, a, "index", false);
    if (at < 0) tmpl__fail(r, SP_ERR_FORMAT, "substring not found");
    return tmpl__int(at);
}
static tv m_rindex(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    int64_t at = str_find(r, f, a, "rindex", true);
    if (at < 0) tmpl__fail(r, SP_ERR_FORMAT, "substring not found");
    return tmpl__int(at);
}

static tv m_count(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "count", 1, 3, NO_KW);
    tv s = f->self, sub = str_arg(r, "count", tmpl__arg(a, 0, NULL, NONE));
    size_t b0, b1;
    int64_t c0;
    if (!str_span(r, "count", s, a, 1, tmpl__cp_count(sub.s, sub.len), &b0, &b1, &c0)) return tmpl__int(0);
    if (sub.len == 0) return tmpl__int((int64_t)tmpl__cp_count(s.s + b0, b1 - b0) + 1);
    int64_t n = 0;
    for (size_t i = b0; i + sub.len <= b1; n++) {
        const char *hit = memmem(s.s + i, b1 - i, sub.s, sub.len);
        if (!hit) break;
        i = (size_t)(hit - s.s) + sub.len;
    }
    return tmpl__int(n);
}

/* startswith/endswith(affix[, start[, end]]): affix is a str or a tuple of str */
static tv str_affix(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, bool at_start) {
    check_args(r, a, name, 1, 3, NO_KW);
    tv s = f->self, affix = tmpl__arg(a, 0, NULL, NONE);
    bool tuple = affix.kind == TV_LIST && affix.list->is_tuple && !affix.list->iter_name;
    if (affix.kind != TV_STR && !tuple)
        tmpl__fail(r, SP_ERR_FORMAT, "%s first arg must be str or a tuple of str, not %s", name,
                   tmpl__type_name(affix));
    size_t n = tuple ? affix.list->n : 1;
    for (size_t k = 0; k < n; k++)
        if (tuple && affix.list->items[k].kind != TV_STR)
            tmpl__fail(r, SP_ERR_FORMAT, "tuple for %s must only contain str, not %s", name,
                       tmpl__type_name(affix.list->items[k]));
    size_t b0, b1;
    int64_t c0;
    if (!str_span(r, name, s, a, 1, 0, &b0, &b1, &c0)) return tmpl__bool(false);
    for (size_t k = 0; k < n; k++) {
        tv x = tuple ? affix.list->items[k] : affix;
        if (x.len <= b1 - b0 && memcmp(at_start ? s.s + b0 : s.s + b1 - x.len, x.s, x.len) == 0)
            return tmpl__bool(true);
    }
    return tmpl__bool(false);
}
STR_METHOD(m_startswith, str_affix(r, f, a, "startswith", true))
STR_METHOD(m_endswith, str_affix(r, f, a, "endswith", false))

static tv str_strip_method(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, bool left,
                           bool right) {
    check_args(r, a, name, 0, 1, NO_KW);
    tv chars = tmpl__arg(a, 0, NULL, NONE);
    if (chars.kind != TV_STR && chars.kind != TV_NONE) tmpl__fail(r, SP_ERR_FORMAT, "%s arg must be None or str", name);
    return tmpl__str_strip(f->self, chars, left, right);
}
STR_METHOD(m_strip, str_strip_method(r, f, a, "strip", true, true))
STR_METHOD(m_lstrip, str_strip_method(r, f, a, "lstrip", true, false))
STR_METHOD(m_rstrip, str_strip_method(r, f, a, "rstrip", false, true))

static const char *const SPLIT_KW[] = {"sep", "maxsplit", NULL};
static tv m_split(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "split", 0, 2, SPLIT_KW);
    return tmpl__str_split(r, f->self, tmpl__arg(a, 0, "sep", NONE),
                           tmpl__arg_int(r, "split", tmpl__arg(a, 1, "maxsplit", tmpl__int(-1))));
}
static tv m_rsplit(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "rsplit", 0, 2, SPLIT_KW);
    return tmpl__str_rsplit(r, f->self, tmpl__arg(a, 0, "sep", NONE),
                            tmpl__arg_int(r, "rsplit", tmpl__arg(a, 1, "maxsplit", tmpl__int(-1))));
}
static tv m_splitlines(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    static const char *const kw[] = {"keepends", NULL};
    check_args(r, a, "splitlines", 0, 1, kw);
    return tmpl__str_splitlines_keep(r, f->self,
                                     tmpl__arg_int(r, "splitlines", tmpl__arg(a, 0, "keepends", tmpl__bool(false))));
}

/* partition / rpartition(sep): a 3-tuple (before, sep, after) */
static tv str_partition(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, bool last) {
    check_args(r, a, name, 1, 1, NO_KW);
    tv s = f->self, sep = str_arg(r, name, tmpl__arg(a, 0, NULL, NONE));
    if (sep.len == 0) tmpl__fail(r, SP_ERR_FORMAT, "empty separator");
    const char *hit = last ? tmpl__mem_last(s.s, s.len, sep.s, sep.len) : memmem(s.s, s.len, sep.s, sep.len);
    tv out = tmpl__list_new(&r->arena, 3), empty = tmpl__str("", 0);
    out.list->is_tuple = true;
    if (!hit) {
        tmpl__list_push(&r->arena, out.list, last ? empty : s);
        tmpl__list_push(&r->arena, out.list, empty);
        tmpl__list_push(&r->arena, out.list, last ? s : empty);
        return out;
    }
    size_t at = (size_t)(hit - s.s);
    tmpl__list_push(&r->arena, out.list, tmpl__str(s.s, at));
    tmpl__list_push(&r->arena, out.list, sep);
    tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + at + sep.len, s.len - at - sep.len));
    return out;
}
STR_METHOD(m_partition, str_partition(r, f, a, "partition", false))
STR_METHOD(m_rpartition, str_partition(r, f, a, "rpartition", true))

static tv str_remove_affix(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, bool prefix) {
    check_args(r, a, name, 1, 1, NO_KW);
    tv s = f->self, x = str_arg(r, name, tmpl__arg(a, 0, NULL, NONE));
    if (x.len > s.len || memcmp(prefix ? s.s : s.s + s.len - x.len, x.s, x.len) != 0) return s;
    return tmpl__str(prefix ? s.s + x.len : s.s, s.len - x.len);
}
STR_METHOD(m_removeprefix, str_remove_affix(r, f, a, "removeprefix", true))
STR_METHOD(m_removesuffix, str_remove_affix(r, f, a, "removesuffix", false))

/* ljust / rjust / center(width, fillchar=' '); how: 'l', 'r' or 'c' */
static tv str_justify(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, char how) {
    check_args(r, a, name, 1, 2, NO_KW);
    tv s = f->self, fill = tmpl__arg(a, 1, NULL, tmpl__str(" ", 1));
    int64_t width = tmpl__arg_int(r, name, tmpl__arg(a, 0, NULL, NONE));
    if (fill.kind != TV_STR) tmpl__fail(r, SP_ERR_FORMAT, "The fill character cannot be converted to Unicode");
    if (tmpl__cp_count(fill.s, fill.len) != 1)
        tmpl__fail(r, SP_ERR_FORMAT, "The fill character must be exactly one character long");
    int64_t len = (int64_t)tmpl__cp_count(s.s, s.len);
    if (width <= len) return s;
    int64_t marg = width - len, left = how == 'l' ? 0 : how == 'r' ? marg : marg / 2 + (marg & width & 1);
    if ((uint64_t)marg > SIZE_MAX / 4 / fill.len) tmpl__fail(r, SP_ERR_RANGE, "%s: width too large", name);
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len + (size_t)marg * fill.len);
    for (int64_t k = 0; k < left; k++) tmpl__buf_put(&b, fill.s, fill.len);
    tmpl__buf_put(&b, s.s, s.len);
    for (int64_t k = left; k < marg; k++) tmpl__buf_put(&b, fill.s, fill.len);
    return tmpl__buf_value(&b);
}
STR_METHOD(m_ljust, str_justify(r, f, a, "ljust", 'l'))
STR_METHOD(m_rjust, str_justify(r, f, a, "rjust", 'r'))
STR_METHOD(m_center, str_justify(r, f, a, "center", 'c'))

static tv m_zfill(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "zfill", 1, 1, NO_KW);
    tv s = f->self;
    int64_t width = tmpl__arg_int(r, "zfill", tmpl__arg(a, 0, NULL, NONE)), len = (int64_t)tmpl__cp_count(s.s, s.len);
    if (width <= len) return s;
    if ((uint64_t)(width - len) > SIZE_MAX / 4) tmpl__fail(r, SP_ERR_RANGE, "zfill: width too large");
    size_t pad = (size_t)(width - len), sign = s.len && (s.s[0] == '+' || s.s[0] == '-');
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len + pad);
    tmpl__buf_put(&b, s.s, sign);
    for (size_t k = 0; k < pad; k++) tmpl__buf_putc(&b, '0');
    tmpl__buf_put(&b, s.s + sign, s.len - sign);
    return tmpl__buf_value(&b);
}

static tv str_case_method(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, tmpl_case mode) {
    check_args(r, a, name, 0, 0, NO_KW);
    return tmpl__str_case(r, f->self, mode);
}
STR_METHOD(m_upper, str_case_method(r, f, a, "upper", TMPL_CASE_UPPER))
STR_METHOD(m_lower, str_case_method(r, f, a, "lower", TMPL_CASE_LOWER))
STR_METHOD(m_title, str_case_method(r, f, a, "title", TMPL_CASE_TITLE))
STR_METHOD(m_capitalize, str_case_method(r, f, a, "capitalize", TMPL_CASE_CAPITALIZE))
STR_METHOD(m_swapcase, str_case_method(r, f, a, "swapcase", TMPL_CASE_SWAP))
STR_METHOD(m_casefold, str_case_method(r, f, a, "casefold", TMPL_CASE_FOLD))

/* True when s is not empty and every code point satisfies is. */
static tv str_all(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, bool (*is)(uint32_t)) {
    check_args(r, a, name, 0, 0, NO_KW);
    tv s = f->self;
    uint32_t cp;
    for (size_t i = 0; i < s.len;) {
        i += tmpl__u8_decode(s.s + i, s.len - i, &cp);
        if (!is(cp)) return tmpl__bool(false);
    }
    return tmpl__bool(s.len > 0);
}
STR_METHOD(m_isspace, str_all(r, f, a, "isspace", tmpl__cp_space))
STR_METHOD(m_isalpha, str_all(r, f, a, "isalpha", tmpl__cp_alpha))
STR_METHOD(m_isalnum, str_all(r, f, a, "isalnum", tmpl__cp_alnum))
STR_METHOD(m_isdecimal, str_all(r, f, a, "isdecimal", tmpl__cp_decimal))
STR_METHOD(m_isdigit, str_all(r, f, a, "isdigit", tmpl__cp_digit))
STR_METHOD(m_isnumeric, str_all(r, f, a, "isnumeric", tmpl__cp_numeric))
static tv m_isprintable(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "isprintable", 0, 0, NO_KW);
    uint32_t cp;
    for (size_t i = 0; i < f->self.len;) {
        i += tmpl__u8_decode(f->self.s + i, f->self.len - i, &cp);
        if (!tmpl__cp_printable(cp)) return tmpl__bool(false);
    }
    return tmpl__bool(true);
}
static tv m_isascii(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "isascii", 0, 0, NO_KW);
    for (size_t i = 0; i < f->self.len; i++)
        if ((unsigned char)f->self.s[i] >= 0x80) return tmpl__bool(false);
    return tmpl__bool(true);
}

/* isupper / islower: some cased character, and none of the other case (nor titlecase) */
static tv str_is_case(tmpl_render_state *r, const tfunc *f, const tmpl_args *a, const char *name, bool upper) {
    check_args(r, a, name, 0, 0, NO_KW);
    tv s = f->self;
    bool cased = false;
    uint32_t cp;
    for (size_t i = 0; i < s.len;) {
        i += tmpl__u8_decode(s.s + i, s.len - i, &cp);
        if ((upper ? tmpl__cp_lower(cp) : tmpl__cp_upper(cp)) || tmpl__cp_title_letter(cp)) return tmpl__bool(false);
        cased = cased || (upper ? tmpl__cp_upper(cp) : tmpl__cp_lower(cp));
    }
    return tmpl__bool(cased);
}
STR_METHOD(m_isupper, str_is_case(r, f, a, "isupper", true))
STR_METHOD(m_islower, str_is_case(r, f, a, "islower", false))

/* istitle: upper/titlecase letters only after uncased ones, lowercase only after cased */
static tv m_istitle(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "istitle", 0, 0, NO_KW);
    tv s = f->self;
    bool cased = false, prev_cased = false;
    uint32_t cp;
    for (size_t i = 0; i < s.len;) {
        i += tmpl__u8_decode(s.s + i, s.len - i, &cp);
        if (tmpl__cp_upper(cp) || tmpl__cp_title_letter(cp)) {
            if (prev_cased) return tmpl__bool(false);
            prev_cased = cased = true;
        } else if (tmpl__cp_lower(cp)) {
            if (!prev_cased) return tmpl__bool(false);
            prev_cased = cased = true;
        } else {
            prev_cased = false;
        }
    }
    return tmpl__bool(cased);
}

static tv m_replace(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "replace", 2, 3, NO_KW);
    return tmpl__str_replace(r, f->self, str_arg(r, "replace", tmpl__arg(a, 0, NULL, NONE)),
                             str_arg(r, "replace", tmpl__arg(a, 1, NULL, NONE)),
                             tmpl__arg_int(r, "replace", tmpl__arg(a, 2, NULL, tmpl__int(-1))));
}

static tv m_join(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    check_args(r, a, "join", 1, 1, NO_KW);
    tv items = tmpl__to_list(r, tmpl__arg(a, 0, NULL, NONE));
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, 64);
    for (size_t i = 0; i < items.list->n; i++) {
        if (i) tmpl__buf_put(&b, f->self.s, f->self.len);
        tv item = tmpl__arg_str(r, "join", items.list->items[i]);
        tmpl__buf_put(&b, item.s, item.len);
    }
    return tmpl__buf_value(&b);
}

/* str.format with {} / {0} / {name} fields, each with an optional :spec (Python's format
 * mini-language); conversions (!r), attributes, items and nested fields are refused. */
static tv m_format(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    tv self = f->self;
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, self.len + 32);
    size_t auto_index = 0;
    for (size_t i = 0; i < self.len; i++) {
        char c = self.s[i];
        if ((c == '{' || c == '}') && i + 1 < self.len && self.s[i + 1] == c) {
            tmpl__buf_putc(&b, c);
            i++;
            continue;
        }
        if (c == '}') tmpl__fail(r, SP_ERR_FORMAT, "format: single '}' encountered in format string");
        if (c != '{') {
            tmpl__buf_putc(&b, c);
            continue;
        }
        const char *end = memchr(self.s + i, '}', self.len - i);
        if (!end) tmpl__fail(r, SP_ERR_FORMAT, "format: single '{' encountered in format string");
        const char *field = self.s + i + 1, *colon = memchr(field, ':', (size_t)(end - field));
        size_t flen = (size_t)((colon ? colon : end) - field);
        if (memchr(field, '!', flen) || memchr(field, '.', flen) || memchr(field, '[', flen) ||
            memchr(field, '{', (size_t)(end - field)))
            tmpl__fail(r, SP_ERR_FORMAT, "format: field '{%.*s}' is not supported (only {}, {N}, {name} and :spec)",
                       (int)(end - field), field);
        tv v;
        if (flen == 0) {
            v = tmpl__arg(a, auto_index++, NULL, tmpl__undefined);
        } else if (isdigit((unsigned char)field[0])) {
            v = tmpl__arg(a, (size_t)strtoul(field, NULL, 10), NULL, tmpl__undefined);
        } else {
            char key[64];
            snprintf(key, sizeof(key), "%.*s", (int)flen, field);
            v = tmpl__arg(a, SIZE_MAX, key, tmpl__undefined);
        }
        if (v.kind == TV_UNDEFINED && v.len == 0)
            tmpl__fail(r, SP_ERR_FORMAT, "format: no argument for field '{%.*s}'", (int)flen, field);
        if (colon)
            tmpl__format_spec(r, &b, v, colon + 1, (size_t)(end - colon - 1));
        else
            tmpl__append_str(&b, v);
        i = (size_t)(end - self.s);
    }
    return tmpl__buf_value(&b);
}

typedef struct str_method {
    const char *name;
    tmpl_builtin_fn fn;
} str_method;

static const str_method STR_METHODS[] = {{"strip", m_strip},
                                         {"lstrip", m_lstrip},
                                         {"rstrip", m_rstrip},
                                         {"split", m_split},
                                         {"rsplit", m_rsplit},
                                         {"splitlines", m_splitlines},
                                         {"startswith", m_startswith},
                                         {"endswith", m_endswith},
                                         {"upper", m_upper},
                                         {"lower", m_lower},
                                         {"title", m_title},
                                         {"capitalize", m_capitalize},
                                         {"swapcase", m_swapcase},
                                         {"casefold", m_casefold},
                                         {"replace", m_replace},
                                         {"find", m_find},
                                         {"rfind", m_rfind},
                                         {"index", m_index},
                                         {"rindex", m_rindex},
                                         {"count", m_count},
                                         {"join", m_join},
                                         {"partition", m_partition},
                                         {"rpartition", m_rpartition},
                                         {"removeprefix", m_removeprefix},
                                         {"removesuffix", m_removesuffix},
                                         {"ljust", m_ljust},
                                         {"rjust", m_rjust},
                                         {"center", m_center},
                                         {"zfill", m_zfill},
                                         {"isspace", m_isspace},
                                         {"isalpha", m_isalpha},
                                         {"isalnum", m_isalnum},
                                         {"isdecimal", m_isdecimal},
                                         {"isdigit", m_isdigit},
                                         {"isnumeric", m_isnumeric},
                                         {"isprintable", m_isprintable},
                                         {"isascii", m_isascii},
                                         {"isupper", m_isupper},
                                         {"islower", m_islower},
                                         {"istitle", m_istitle},
                                         {"format", m_format},
                                         {NULL, NULL}};

tmpl_builtin_fn tmpl__str_method(const char *name, size_t len) {
    for (const str_method *m = STR_METHODS; m->name; m++)
        if (strlen(m->name) == len && memcmp(m->name, name, len) == 0) return m->fn;
    return NULL;
}

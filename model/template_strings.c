/* template_strings.c: Python's str operations as chat templates use them, shared by the
 * string methods (' x '.strip(), .split(), .format() ...) and by the filters (trim, title,
 * replace, indent ...).
 *
 * Case mapping (upper, lower, title, capitalize) covers ASCII letters; other characters
 * pass through unchanged.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/template_internal.h"

#define NONE tmpl__none

bool tmpl__py_space(unsigned char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* str.strip/lstrip/rstrip: whitespace, or any of the characters in chars. */
tv tmpl__str_strip(tv s, tv chars, bool left, bool right) {
    size_t lo = 0, hi = s.len;
    bool ws = chars.kind != TV_STR;
#define STRIPPABLE(c) (ws ? tmpl__py_space((unsigned char)(c)) : memchr(chars.s, (c), chars.len) != NULL)
    if (left)
        while (lo < hi && STRIPPABLE(s.s[lo])) lo++;
    if (right)
        while (hi > lo && STRIPPABLE(s.s[hi - 1])) hi--;
#undef STRIPPABLE
    return tmpl__str(s.s + lo, hi - lo);
}

tv tmpl__str_map_case(tmpl_render_state *r, tv s, int (*f)(int)) {
    char *out = tmpl__alloc(&r->arena, s.len + 1);
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.s[i];
        out[i] = c < 0x80 ? (char)f(c) : (char)c;
    }
    return tmpl__str(out, s.len);
}

tv tmpl__str_capitalize(tmpl_render_state *r, tv s) {
    tv low = tmpl__str_map_case(r, s, tolower);
    if (low.len && (unsigned char)low.s[0] < 0x80) ((char *)low.s)[0] = (char)toupper((unsigned char)low.s[0]);
    return low;
}

/* Python's str.title(): a letter after a non-letter is upper, other letters lower.
 * jinja2's title filter instead starts words after whitespace, '-', '(', '{', '[', '<'. */
tv tmpl__str_title(tmpl_render_state *r, tv s, bool jinja_filter) {
    char *out = tmpl__alloc(&r->arena, s.len + 1);
    bool word_start = true;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.s[i];
        bool letter = isalpha(c) && c < 0x80;
        if (jinja_filter) {
            bool sep = tmpl__py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
            out[i] = c < 0x80 ? (char)(word_start ? toupper(c) : tolower(c)) : (char)c;
            word_start = sep;
        } else {
            out[i] = letter ? (char)(word_start ? toupper(c) : tolower(c)) : (char)c;
            word_start = !(letter || c >= 0x80);
        }
    }
    return tmpl__str(out, s.len);
}

tv tmpl__str_replace(tmpl_render_state *r, tv s, tv old, tv new_, int64_t count) {
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, s.len + 16);
    size_t i = 0;
    int64_t done = 0;
    if (old.len == 0) { /* Python inserts new between every character */
        for (; i <= s.len && (count < 0 || done < count); done++) {
            tmpl__buf_put(&b, new_.s, new_.len);
            if (i == s.len) {
                i++;
                break;
            }
            tmpl__buf_putc(&b, s.s[i++]);
        }
        if (i <= s.len) tmpl__buf_put(&b, s.s + i, s.len - i);
        return tmpl__buf_value(&b);
    }
    while (i < s.len && (count < 0 || done < count)) {
        const char *hit = memmem(s.s + i, s.len - i, old.s, old.len);
        if (!hit) break;
        size_t at = (size_t)(hit - s.s);
        tmpl__buf_put(&b, s.s + i, at - i);
        tmpl__buf_put(&b, new_.s, new_.len);
        i = at + old.len;
        done++;
    }
    tmpl__buf_put(&b, s.s + i, s.len - i);
    return tmpl__buf_value(&b);
}

/* str.tmpl__str_split(sep=None, maxsplit=-1) */
tv tmpl__str_split(tmpl_render_state *r, tv s, tv sep, int64_t maxsplit) {
    tv out = tmpl__list_new(&r->arena, 4);
    if (sep.kind != TV_STR) {
        size_t i = 0;
        int64_t done = 0;
        while (i < s.len) {
            while (i < s.len && tmpl__py_space((unsigned char)s.s[i])) i++;
            if (i == s.len) break;
            if (maxsplit >= 0 && done == maxsplit) {
                size_t end = s.len;
                while (end > i && tmpl__py_space((unsigned char)s.s[end - 1])) end--;
                tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + i, end - i));
                break;
            }
            size_t start = i;
            while (i < s.len && !tmpl__py_space((unsigned char)s.s[i])) i++;
            tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + start, i - start));
            done++;
        }
        return out;
    }
    if (sep.len == 0) tmpl__fail(r, SP_ERR_FORMAT, "split: empty separator");
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        const char *hit = maxsplit >= 0 && done == maxsplit ? NULL : memmem(s.s + i, s.len - i, sep.s, sep.len);
        if (!hit) {
            tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + i, s.len - i));
            return out;
        }
        size_t at = (size_t)(hit - s.s);
        tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + i, at - i));
        i = at + sep.len;
        done++;
    }
}

static bool affix_match(tv s, tv affix, bool at_start) {
    if (affix.kind != TV_STR || affix.len > s.len) return false;
    return memcmp(at_start ? s.s : s.s + s.len - affix.len, affix.s, affix.len) == 0;
}

/* startswith/endswith take a string or a tuple of strings */
static bool affix_any(tmpl_render_state *r, tv s, tv affix, bool at_start) {
    if (affix.kind == TV_LIST) {
        for (size_t i = 0; i < affix.list->n; i++)
            if (affix_match(s, affix.list->items[i], at_start)) return true;
        return false;
    }
    tmpl__arg_str(r, at_start ? "startswith" : "endswith", affix);
    return affix_match(s, affix, at_start);
}

/* splitlines() as Python: \n, \r\n, \r, \v, \f, \x1c-\x1e end lines */
tv tmpl__str_splitlines(tmpl_render_state *r, tv s) {
    tv out = tmpl__list_new(&r->arena, 8);
    size_t start = 0;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.s[i];
        if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
            tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + start, i - start));
            if (c == '\r' && i + 1 < s.len && s.s[i + 1] == '\n') i++;
            start = i + 1;
        }
    }
    if (start < s.len) tmpl__list_push(&r->arena, out.list, tmpl__str(s.s + start, s.len - start));
    return out;
}

/* ---- string methods ------------------------------------------------------------- */

static tv m_strip(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)r;
    return tmpl__str_strip(f->self, tmpl__arg(a, 0, "chars", NONE), true, true);
}
static tv m_lstrip(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)r;
    return tmpl__str_strip(f->self, tmpl__arg(a, 0, "chars", NONE), true, false);
}
static tv m_rstrip(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)r;
    return tmpl__str_strip(f->self, tmpl__arg(a, 0, "chars", NONE), false, true);
}
static tv m_split(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    return tmpl__str_split(r, f->self, tmpl__arg(a, 0, "sep", NONE),
                           tmpl__arg_int(r, "split", tmpl__arg(a, 1, "maxsplit", tmpl__int(-1))));
}
static tv m_startswith(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    return tmpl__bool(affix_any(r, f->self, tmpl__arg(a, 0, "prefix", NONE), true));
}
static tv m_endswith(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    return tmpl__bool(affix_any(r, f->self, tmpl__arg(a, 0, "suffix", NONE), false));
}
static tv m_upper(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)a;
    return tmpl__str_map_case(r, f->self, toupper);
}
static tv m_lower(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)a;
    return tmpl__str_map_case(r, f->self, tolower);
}
static tv m_title(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)a;
    return tmpl__str_title(r, f->self, false);
}
static tv m_capitalize(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)a;
    return tmpl__str_capitalize(r, f->self);
}
static tv m_replace(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    return tmpl__str_replace(r, f->self, tmpl__arg_str(r, "replace", tmpl__arg(a, 0, "old", NONE)),
                             tmpl__arg_str(r, "replace", tmpl__arg(a, 1, "new", NONE)),
                             tmpl__arg_int(r, "replace", tmpl__arg(a, 2, "count", tmpl__int(-1))));
}
static tv m_find(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    tv self = f->self, sub = tmpl__arg_str(r, "find", tmpl__arg(a, 0, "sub", NONE));
    const char *hit = sub.len ? memmem(self.s, self.len, sub.s, sub.len) : self.s;
    return tmpl__int(hit ? (int64_t)(hit - self.s) : -1);
}
static tv m_count(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    tv self = f->self, sub = tmpl__arg_str(r, "count", tmpl__arg(a, 0, "sub", NONE));
    if (sub.len == 0) return tmpl__int((int64_t)self.len + 1);
    int64_t n = 0;
    for (size_t i = 0; i + sub.len <= self.len;) {
        const char *hit = memmem(self.s + i, self.len - i, sub.s, sub.len);
        if (!hit) break;
        n++;
        i = (size_t)(hit - self.s) + sub.len;
    }
    return tmpl__int(n);
}
static tv m_join(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    tv items = tmpl__to_list(r, tmpl__arg(a, 0, "iterable", NONE));
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, 64);
    for (size_t i = 0; i < items.list->n; i++) {
        if (i) tmpl__buf_put(&b, f->self.s, f->self.len);
        tv item = tmpl__arg_str(r, "join", items.list->items[i]);
        tmpl__buf_put(&b, item.s, item.len);
    }
    return tmpl__buf_value(&b);
}
static tv m_isdigit(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)r;
    (void)a;
    for (size_t i = 0; i < f->self.len; i++)
        if (!isdigit((unsigned char)f->self.s[i])) return tmpl__bool(false);
    return tmpl__bool(f->self.len > 0);
}
static tv m_isspace(tmpl_render_state *r, const tfunc *f, const tmpl_args *a) {
    (void)r;
    (void)a;
    for (size_t i = 0; i < f->self.len; i++)
        if (!tmpl__py_space((unsigned char)f->self.s[i])) return tmpl__bool(false);
    return tmpl__bool(f->self.len > 0);
}

/* str.format with {} / {0} / {name} fields (format specs are refused by name). */
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
        const char *field = self.s + i + 1;
        size_t flen = (size_t)(end - field);
        if (memchr(field, ':', flen) || memchr(field, '!', flen) || memchr(field, '.', flen) ||
            memchr(field, '[', flen))
            tmpl__fail(r, SP_ERR_FORMAT, "format: field '{%.*s}' is not supported (only {}, {N} and {name})", (int)flen,
                       field);
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
        tmpl__append_str(&b, v);
        i = (size_t)(end - self.s);
    }
    return tmpl__buf_value(&b);
}

typedef struct str_method {
    const char *name;
    tmpl_builtin_fn fn;
} str_method;

static const str_method STR_METHODS[] = {{"strip", m_strip},           {"lstrip", m_lstrip},
                                         {"rstrip", m_rstrip},         {"split", m_split},
                                         {"startswith", m_startswith}, {"endswith", m_endswith},
                                         {"upper", m_upper},           {"lower", m_lower},
                                         {"title", m_title},           {"capitalize", m_capitalize},
                                         {"replace", m_replace},       {"find", m_find},
                                         {"count", m_count},           {"join", m_join},
                                         {"isdigit", m_isdigit},       {"isspace", m_isspace},
                                         {"format", m_format},         {NULL, NULL}};

tmpl_builtin_fn tmpl__str_method(const char *name, size_t len) {
    for (const str_method *m = STR_METHODS; m->name; m++)
        if (strlen(m->name) == len && memcmp(m->name, name, len) == 0) return m->fn;
    return NULL;
}

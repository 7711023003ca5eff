/* gram_regex.c: regular expressions and choice lists as GBNF (grammar.h).
 *
 * A pattern is parsed into a small tree (characters, code point sets, sequences,
 * alternations, repetitions) and printed as one GBNF expression that matches exactly the
 * strings the pattern matches as a whole (full match: ^ and $ change nothing).
 *
 * The subset (ECMAScript syntax, which JSON Schema's `pattern` uses, without the u flag):
 *   - literal characters (UTF-8); escaped ASCII punctuation (\. \\ \/ \- \* \{ ...) and
 *     escaped non-ASCII characters stand for themselves; \n \t \r \f \v (VT, 0x0B) \0 \cX,
 *     \xHH, \uHHHH (two \u escapes forming a surrogate pair are one character), \u{H...};
 *   - \d \D \w \W \s \S with ASCII meanings: \d = [0-9], \w = [A-Za-z0-9_],
 *     \s = [ \t\n\r\f\v]; their negations take every other code point;
 *   - bracket classes [...] and [^...] with ranges, the escapes above and \b (backspace);
 *     a '-' next to a class escape is a literal ([\w-.]), as in ECMAScript's Annex B;
 *   - . (any character but \n), groups ( ) and (?: ), named groups (?<name> ) and
 *     (?P<name> ) as plain groups, alternation |;
 *   - quantifiers * + ? {m} {m,} {m,n} (counts up to RX_MAX_COUNT) and their lazy forms
 *     (*? +? ?? {m,n}?, the same language); a { that starts no quantifier is a literal,
 *     and so are ] and } on their own;
 *   - ^ at the start and $ at the end of the pattern or of a top-level alternative.
 * Refused with SP_ERR_UNSUPPORTED: backreferences (\1, \k<name>), lookaround, \b and \B
 * (word boundaries), \A \z \Z \G, ^ and $ elsewhere, possessive quantifiers (a*+), inline
 * flags and other (? groups, Unicode properties (\p{..}), POSIX classes ([[:alpha:]]),
 * escapes of other letters and digits, octal escapes (\01), {,n}, [] and [^] (their
 * meanings differ between dialects), and classes that match nothing ([^\s\S]). Malformed
 * patterns are SP_ERR_INVALID_ARG; counts over RX_MAX_COUNT, groups nested deeper than
 * RX_MAX_DEPTH and expressions longer than RX_MAX_OUT bytes are SP_ERR_RANGE. Every message
 * starts "position N:" (a 0-based byte offset).
 *
 * The expression is one GBNF sequence (a top-level alternation is parenthesized), so it
 * may stand anywhere a sequence may; parenthesize it to quantify it. Runs of characters
 * print as one "literal", sets as [...] or, when that is shorter, [^...], non-ASCII
 * characters as their UTF-8. Surrogate code points are never members of a set (no UTF-8
 * string holds them). The matcher expands every way a grammar can match nothing, so each
 * part that may be empty prints with exactly one such way: an unbounded repetition of
 * such a part ((a*)*, (a|)+) repeats only its non-empty pieces (gram_compile refuses the
 * other form), x{m,n} becomes x{n}, and an alternation with several such branches takes
 * their non-empty strings, made optional once ((a?|b?) prints ("a" | "b")?). Without
 * this, k optional groups in a row ((|)(|)...) would cost 2^k steps per byte.
 *
 * Loops print as loops (rx_loops). A part whose strings are exactly A* or A+ for the set A
 * of the code points it uses prints as [A]* or [A]+: (.*){10}, (a|.*){50}, (.+){0,100},
 * (.*.*)+ are all [^\n]*. Such bounded repetitions of a loop are languages the matcher
 * would otherwise follow as one stack per way of splitting the text among the copies (each
 * token's mask then walks the vocabulary against all of them: seconds per token). For the
 * same reason (Y{a,b}){m,n} of a single character Y prints as Y{m*a,n*b} when the lengths
 * between leave no gap.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/strbuf.h"
#include "grammar/grammar.h"

enum { RX_MAX_COUNT = 10000, RX_MAX_DEPTH = 256, RX_MAX_OUT = 1 << 20, RX_INF = -1 };
#define RX_MAX_CP 0x10FFFFu

typedef enum rx_kind { RX_CHAR, RX_SET, RX_CAT, RX_ALT, RX_REP } rx_kind;

typedef struct rx_node {
    rx_kind kind;
    bool nullable;         /* matches the empty string */
    bool empty;            /* matches only the empty string */
    uint32_t cp;           /* RX_CHAR */
    int32_t first, n;      /* RX_SET: ranges[first, first + n); RX_CAT, RX_ALT: kids[first, first + n) */
    int32_t kid, min, max; /* RX_REP: max is RX_INF when unbounded */
    /* rx_loops' findings: the alphabet A (the code points the node's strings use, ranges
     * a_first .. a_first + a_n in the ranges; a_n -1: not worked out), whether the strings
     * are exactly A{k,} for some k (loop), and whether every single member of A is one of
     * them (covers) */
    int32_t a_first, a_n;
    int32_t loop; /* -1, or the strings are exactly A{loop,} (0: A*, 1: A+) */
    bool covers;
} rx_node;

/* An inclusive range of code points. */
typedef struct rx_range {
    uint32_t lo, hi;
} rx_range;

typedef struct rx_vec {
    void *p;
    int32_t n;
    size_t cap;
} rx_vec;

/* One conversion: the pattern, the tree (index-linked arrays) and the text being printed. */
typedef struct rx {
    const uint8_t *s;
    size_t len, pos;
    rx_vec nodes;  /* rx_node */
    rx_vec kids;   /* int32_t: children of RX_CAT and RX_ALT nodes */
    rx_vec ranges; /* rx_range: members of RX_SET nodes, sorted and disjoint */
    strbuf out;
} rx;

/* Room for one more element of elem bytes; the new slot, or NULL when out of memory. */
static void *rx_vec_push(rx_vec *v, size_t elem) {
    if (v->n == INT32_MAX || !sp_grow(&v->p, &v->cap, (size_t)v->n + 1, elem)) return NULL;
    return (char *)v->p + (size_t)v->n++ * elem;
}

static bool rx_push_id(rx_vec *v, int32_t id) {
    int32_t *slot = rx_vec_push(v, sizeof id);
    if (slot) *slot = id;
    return slot != NULL;
}

static sp_status rx_nomem(void) {
    return sp_fail(SP_ERR_NOMEM, "regex: out of memory");
}

static const rx_node *rx_at(const rx *p, int32_t id) {
    return &((const rx_node *)p->nodes.p)[id];
}

static const int32_t *rx_kids(const rx *p, const rx_node *nd) {
    return nd->n ? (const int32_t *)p->kids.p + nd->first : NULL; /* no kids: perhaps no array yet */
}

static sp_status rx_node_add(rx *p, rx_node nd, int32_t *id) {
    rx_node *slot = rx_vec_push(&p->nodes, sizeof nd);
    if (!slot) return rx_nomem();
    *slot = nd;
    *id = p->nodes.n - 1;
    return SP_OK;
}

/* A sequence or an alternation of the nodes in list (a single node stands for itself). */
static sp_status rx_node_list(rx *p, rx_kind kind, const rx_vec *list, int32_t *id) {
    const int32_t *ids = list->p;
    if (list->n == 1) {
        *id = ids[0];
        return SP_OK;
    }
    rx_node nd = {.kind = kind, .nullable = kind == RX_CAT, .empty = true, .first = p->kids.n, .n = list->n};
    for (int32_t i = 0; i < list->n; i++) {
        const rx_node *kid = rx_at(p, ids[i]);
        nd.nullable = kind == RX_CAT ? nd.nullable && kid->nullable : nd.nullable || kid->nullable;
        nd.empty = nd.empty && kid->empty;
        if (!rx_push_id(&p->kids, ids[i])) return rx_nomem();
    }
    return rx_node_add(p, nd, id);
}

/* ---- UTF-8 and code point sets ------------------------------------------------------- */

/* The code point at s (strict UTF-8: no overlongs, surrogates or values past U+10FFFF):
 * its length in bytes, or 0 when s holds no valid character. */
static size_t rx_utf8_decode(const uint8_t *s, size_t len, uint32_t *cp) {
    if (len == 0) return 0;
    uint8_t b = s[0];
    size_t n;
    uint32_t c, min;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
        n = 2, c = b & 0x1Fu, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
        n = 3, c = b & 0x0Fu, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4, c = b & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if (len < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3Fu);
    }
    if (c < min || c > RX_MAX_CP || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return n;
}

/* cp (0x80 or more) as UTF-8. */
static void rx_utf8_append(strbuf *b, uint32_t cp) {
    int n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    char u[4];
    for (int i = n - 1; i > 0; i--, cp >>= 6) u[i] = (char)(0x80 | (cp & 0x3F));
    u[0] = (char)(((0xFF00u >> n) & 0xFF) | cp);
    strbuf_append(b, u, (size_t)n);
}

/* Adds [lo, hi] less the surrogates. */
static bool rx_set_add(rx_vec *set, uint32_t lo, uint32_t hi) {
    if (lo <= 0xDFFF && hi >= 0xD800) {
        return (lo >= 0xD800 || rx_set_add(set, lo, 0xD7FF)) && (hi <= 0xDFFF || rx_set_add(set, 0xE000, hi));
    }
    rx_range *r = rx_vec_push(set, sizeof *r);
    if (r) *r = (rx_range){lo, hi};
    return r != NULL;
}

/* Appends to out the code points (surrogates aside) that n sorted disjoint ranges miss. */
static bool rx_set_complement(const rx_range *r, int32_t n, rx_vec *out) {
    uint32_t next = 0;
    for (int32_t i = 0; i < n; i++) {
        if (r[i].lo > next && !rx_set_add(out, next, r[i].lo - 1)) return false;
        next = r[i].hi + 1;
    }
    return next > RX_MAX_CP || rx_set_add(out, next, RX_MAX_CP);
}

/* \d \w \s (c lowercase) or their complements (uppercase), appended to set. */
static bool rx_set_add_escape(rx_vec *set, uint8_t c) {
    static const rx_range d[] = {{'0', '9'}}, s[] = {{'\t', '\r'}, {' ', ' '}};
    static const rx_range w[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    uint8_t lower = c | 0x20;
    const rx_range *r = lower == 'd' ? d : lower == 's' ? s : w;
    int32_t n = lower == 'd' ? 1 : lower == 's' ? 2 : 4;
    if (c != lower) return rx_set_complement(r, n, set);
    for (int32_t i = 0; i < n; i++) {
        if (!rx_set_add(set, r[i].lo, r[i].hi)) return false;
    }
    return true;
}

static int rx_range_cmp(const void *a, const void *b) {
    const rx_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts set and merges overlapping and adjacent ranges. */
static void rx_set_normalize(rx_vec *set) {
    rx_range *r = set->p;
    if (set->n < 2) return;
    qsort(r, (size_t)set->n, sizeof *r, rx_range_cmp);
    int32_t out = 0;
    for (int32_t i = 1; i < set->n; i++) {
        if (r[i].lo <= r[out].hi + 1) {
            if (r[i].hi > r[out].hi) r[out].hi = r[i].hi;
        } else {
            r[++out] = r[i];
        }
    }
    set->n = out + 1;
}

/* ---- parsing ------------------------------------------------------------------------- */

static sp_status rx_alt(rx *p, int depth, int32_t *id);

/* One literal character at p->pos, consumed. */
static sp_status rx_literal(rx *p, uint32_t *cp) {
    size_t n = rx_utf8_decode(p->s + p->pos, p->len - p->pos, cp);
    if (!n) return sp_fail(SP_ERR_INVALID_ARG, "position %zu: invalid UTF-8", p->pos);
    p->pos += n;
    return SP_OK;
}

/* Exactly n hex digits at p->pos, consumed, into *v. */
static bool rx_hex(rx *p, int n, uint32_t *v) {
    uint32_t x = 0;
    for (int i = 0; i < n; i++) {
        if (p->pos + (size_t)i >= p->len) return false;
        uint8_t c = p->s[p->pos + (size_t)i];
        int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (d < 0) return false;
        x = x << 4 | (uint32_t)d;
    }
    p->pos += (size_t)n;
    *v = x;
    return true;
}

/* \uHHHH (a surrogate pair of two such escapes makes one character) or \u{H...}; p->pos
 * is past the u, at is the backslash. */
static sp_status rx_unicode_escape(rx *p, size_t at, uint32_t *cp) {
    if (p->pos < p->len && p->s[p->pos] == '{') {
        size_t start = ++p->pos;
        uint32_t v = 0, digit;
        while (p->pos - start < 6 && rx_hex(p, 1, &digit)) v = v << 4 | digit;
        if (p->pos == start || p->pos >= p->len || p->s[p->pos] != '}' || v > RX_MAX_CP || (v >= 0xD800 && v <= 0xDFFF))
            return sp_fail(SP_ERR_INVALID_ARG, "position %zu: bad \\u{...} escape (a code point up to 10FFFF)", at);
        p->pos++;
        *cp = v;
        return SP_OK;
    }
    if (!rx_hex(p, 4, cp)) return sp_fail(SP_ERR_INVALID_ARG, "position %zu: bad \\u escape (expected \\uHHHH)", at);
    if (*cp < 0xD800 || *cp > 0xDFFF) return SP_OK;
    uint32_t low;
    if (*cp <= 0xDBFF && p->pos + 1 < p->len && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
        size_t save = p->pos;
        p->pos += 2;
        if (rx_hex(p, 4, &low) && low >= 0xDC00 && low <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (low - 0xDC00);
            return SP_OK;
        }
        p->pos = save;
    }
    return sp_fail(SP_ERR_INVALID_ARG, "position %zu: a lone surrogate (\\u%04X) is not a character", at, *cp);
}

/* The escape at p->pos (a backslash): one character (*is_set false, *cp) or a class
 * escape whose ranges are appended to set (*is_set true). */
static sp_status rx_escape(rx *p, bool in_class, rx_vec *set, bool *is_set, uint32_t *cp) {
    static const char simple[] = "ntrfv", simple_cp[] = "\n\t\r\f\v";
    static const struct {
        const char *letters, *what;
    } refused[] = {{"bB", "a word boundary"},
                   {"123456789k", "a backreference"},
                   {"pP", "a Unicode property"},
                   {"AzZG", "an anchor"}};
    size_t at = p->pos++;
    if (p->pos >= p->len) return sp_fail(SP_ERR_INVALID_ARG, "position %zu: trailing backslash", at);
    uint8_t c = p->s[p->pos++];
    const char *hit = c ? strchr(simple, c) : NULL;
    *is_set = c && strchr("dDwWsS", c);
    *cp = hit ? (uint32_t)simple_cp[hit - simple] : c == 'b' && in_class ? '\b' : c;
    if (*is_set) return rx_set_add_escape(set, c) ? SP_OK : rx_nomem();
    if (hit || *cp == '\b') return SP_OK;
    if (c == '0' && p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: an octal escape is not supported", at);
    if (c == '0') return *cp = 0, SP_OK;
    if (c == 'x' && !rx_hex(p, 2, cp))
        return sp_fail(SP_ERR_INVALID_ARG, "position %zu: bad \\x escape (expected \\xHH)", at);
    if (c == 'x') return SP_OK;
    if (c == 'u') return rx_unicode_escape(p, at, cp);
    if (c == 'c') {
        if (p->pos >= p->len || (p->s[p->pos] | 0x20) < 'a' || (p->s[p->pos] | 0x20) > 'z')
            return sp_fail(SP_ERR_INVALID_ARG, "position %zu: bad \\c escape (expected a letter)", at);
        *cp = p->s[p->pos++] & 31u;
        return SP_OK;
    }
    for (size_t i = 0; c && i < sizeof refused / sizeof *refused; i++) {
        if (strchr(refused[i].letters, c))
            return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: %s (\\%c) is not supported", at, refused[i].what, c);
    }
    if ((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))
        return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: the escape \\%c is not supported", at, c);
    if (c < 0x80) return SP_OK; /* escaped punctuation stands for itself */
    p->pos--;
    return rx_literal(p, cp);
}

/* One member of a bracket class: a character or a class escape (appended to set). */
static sp_status rx_class_atom(rx *p, rx_vec *set, bool *is_set, uint32_t *cp) {
    if (p->s[p->pos] == '\\') return rx_escape(p, true, set, is_set, cp);
    *is_set = false;
    if (p->s[p->pos] == '[' && p->pos + 1 < p->len && strchr(":.=", p->s[p->pos + 1]))
        return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: a POSIX class ([:name:]) is not supported", p->pos);
    return rx_literal(p, cp);
}

/* Turns set (normalized) into a node: a character when it holds one, else a set. */
static sp_status rx_set_node(rx *p, const rx_vec *set, size_t at, int32_t *id) {
    const rx_range *r = set->p;
    if (set->n == 0)
        return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: a class that matches nothing is not supported", at);
    if (set->n == 1 && r[0].lo == r[0].hi) return rx_node_add(p, (rx_node){.kind = RX_CHAR, .cp = r[0].lo}, id);
    rx_node nd = {.kind = RX_SET, .first = p->ranges.n, .n = set->n};
    for (int32_t i = 0; i < set->n; i++) {
        rx_range *slot = rx_vec_push(&p->ranges, sizeof *slot);
        if (!slot) return rx_nomem();
        *slot = r[i];
    }
    return rx_node_add(p, nd, id);
}

/* A bracket class at p->pos ('['). */
static sp_status rx_class(rx *p, int32_t *id) {
    size_t start = p->pos++;
    bool negated = p->pos < p->len && p->s[p->pos] == '^';
    if (negated) p->pos++;
    if (p->pos < p->len && p->s[p->pos] == ']')
        return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: %s is not supported (dialects differ; write \\] for ']')",
                       start, negated ? "[^]" : "[]");
    rx_vec set = {0}, comp = {0};
    sp_status st = SP_OK;
    for (;;) {
        if (p->pos >= p->len) {
            st = sp_fail(SP_ERR_INVALID_ARG, "position %zu: unclosed [", start);
            goto done;
        }
        if (p->s[p->pos] == ']') break;
        size_t at = p->pos;
        bool is_set, hi_set;
        uint32_t lo, hi;
        if ((st = rx_class_atom(p, &set, &is_set, &lo))) goto done;
        hi = lo;
        if (!is_set && p->pos + 1 < p->len && p->s[p->pos] == '-' && p->s[p->pos + 1] != ']') {
            p->pos++;
            if ((st = rx_class_atom(p, &set, &hi_set, &hi))) goto done;
            if (hi_set) { /* [a-\d]: a, '-' and \d */
                hi = lo;
                if (!rx_set_add(&set, '-', '-')) goto nomem;
            } else if (hi < lo) {
                st = sp_fail(SP_ERR_INVALID_ARG, "position %zu: range out of order (%.*s)", at, (int)(p->pos - at),
                             (const char *)p->s + at);
                goto done;
            }
        }
        if (!is_set && !rx_set_add(&set, lo, hi)) goto nomem; /* a '-' after a class escape is a literal */
    }
    p->pos++;
    rx_set_normalize(&set);
    if (negated && !rx_set_complement(set.p, set.n, &comp)) goto nomem;
    st = rx_set_node(p, negated ? &comp : &set, start, id);
    goto done;
nomem:
    st = rx_nomem();
done:
    free(set.p);
    free(comp.p);
    return st;
}

/* Whether a { at i starts a quantifier: 1 ({m}, {m,}, {m,n}; *end past the '}'), -1
 * ({,n}), 0 (a literal '{'). Counts are clamped far above RX_MAX_COUNT. */
static int rx_braces(const rx *p, size_t i, size_t *end, int32_t *min, int32_t *max) {
    int32_t v[2] = {0, RX_INF};
    int digits[2] = {0, 0}, k = 0;
    for (i++; i < p->len; i++) {
        uint8_t c = p->s[i];
        if (c >= '0' && c <= '9') {
            if (digits[k]++ == 0) v[k] = 0;
            if (v[k] < 100000000) v[k] = v[k] * 10 + (c - '0');
        } else if (c == ',' && k == 0) {
            k = 1;
        } else if (c == '}') {
            if (!digits[0]) return digits[1] ? -1 : 0;
            *end = i + 1;
            *min = v[0];
            *max = k == 0 ? v[0] : v[1];
            return 1;
        } else {
            return 0;
        }
    }
    return 0;
}

/* A group at p->pos ('('). */
static sp_status rx_group(rx *p, int depth, int32_t *id) {
    size_t open = p->pos++;
    const char *s = (const char *)p->s + p->pos;
    size_t left = p->len - p->pos;
    if (left >= 1 && s[0] == '?') {
        bool named = (left >= 2 && s[1] == '<') || (left >= 3 && s[1] == 'P' && s[2] == '<');
        if (left >= 2 && s[1] == ':') {
            p->pos += 2;
        } else if (left >= 3 && s[1] == '<' && (s[2] == '=' || s[2] == '!')) {
            return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: lookbehind is not supported", open);
        } else if (left >= 2 && (s[1] == '=' || s[1] == '!')) {
            return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: lookahead is not supported", open);
        } else if (named) {
            size_t i = s[1] == '<' ? 2 : 3, name = i;
            while (i < left && (s[i] == '_' || ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z') ||
                                (i > name && s[i] >= '0' && s[i] <= '9')))
                i++;
            if (i == name || i >= left || s[i] != '>')
                return sp_fail(SP_ERR_INVALID_ARG, "position %zu: bad group name", open);
            p->pos += i + 1;
        } else if (left >= 2 && s[1] != 'P' && (((s[1] | 0x20) >= 'a' && (s[1] | 0x20) <= 'z') || s[1] == '-')) {
            return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: inline flags are not supported", open);
        } else {
            return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: this (? group is not supported", open);
        }
    }
    if (depth >= RX_MAX_DEPTH)
        return sp_fail(SP_ERR_RANGE, "position %zu: groups nested deeper than %d", open, RX_MAX_DEPTH);
    sp_status st = rx_alt(p, depth + 1, id);
    if (st) return st;
    if (p->pos >= p->len) return sp_fail(SP_ERR_INVALID_ARG, "position %zu: unclosed (", open);
    p->pos++; /* ')' */
    return SP_OK;
}

/* One atom at p->pos: a character, a set or a group. */
static sp_status rx_atom(rx *p, int depth, int32_t *id) {
    uint8_t c = p->s[p->pos];
    size_t end;
    int32_t min, max;
    if (c == '(') return rx_group(p, depth, id);
    if (c == '[') return rx_class(p, id);
    if (c == '*' || c == '+' || c == '?' || (c == '{' && rx_braces(p, p->pos, &end, &min, &max) == 1))
        return sp_fail(SP_ERR_INVALID_ARG, "position %zu: nothing to repeat", p->pos);
    if (c == '{' && rx_braces(p, p->pos, &end, &min, &max) == -1)
        return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: {,n} is not supported (write {0,n})", p->pos);
    rx_vec set = {0};
    bool is_set = false;
    uint32_t cp;
    sp_status st;
    if (c == '.') {
        p->pos++;
        is_set = true;
        st = rx_set_add(&set, 0, '\n' - 1) && rx_set_add(&set, '\n' + 1, RX_MAX_CP) ? SP_OK : rx_nomem();
    } else if (c == '\\') {
        st = rx_escape(p, false, &set, &is_set, &cp);
    } else {
        st = rx_literal(p, &cp);
    }
    if (st == SP_OK && is_set) {
        rx_set_normalize(&set);
        st = rx_set_node(p, &set, p->pos, id);
    } else if (st == SP_OK) {
        st = rx_node_add(p, (rx_node){.kind = RX_CHAR, .cp = cp}, id);
    }
    free(set.p);
    return st;
}

/* Quantifiers after an atom (at most one, with its lazy ?), wrapping *id. */
static sp_status rx_quantifier(rx *p, int32_t *id, bool *quantified) {
    *quantified = false;
    while (p->pos < p->len) {
        size_t at = p->pos, end = at + 1;
        int32_t min, max;
        uint8_t c = p->s[at];
        if (c == '*' || c == '+' || c == '?') {
            min = c == '+', max = c == '?' ? 1 : RX_INF;
        } else if (c != '{' || rx_braces(p, at, &end, &min, &max) != 1) {
            break;
        }
        if (*quantified) return sp_fail(SP_ERR_INVALID_ARG, "position %zu: nothing to repeat", at);
        if (min > RX_MAX_COUNT || max > RX_MAX_COUNT)
            return sp_fail(SP_ERR_RANGE, "position %zu: repetition count over %d", at, RX_MAX_COUNT);
        if (max != RX_INF && min > max)
            return sp_fail(SP_ERR_INVALID_ARG, "position %zu: {%d,%d}: minimum over maximum", at, min, max);
        p->pos = end;
        if (p->pos < p->len && p->s[p->pos] == '+')
            return sp_fail(SP_ERR_UNSUPPORTED, "position %zu: a possessive quantifier is not supported", at);
        if (p->pos < p->len && p->s[p->pos] == '?') p->pos++; /* lazy: the same language */
        const rx_node *kid = rx_at(p, *id);
        rx_node rep = {.kind = RX_REP,
                       .nullable = min == 0 || kid->nullable,
                       .empty = max == 0 || kid->empty,
                       .kid = *id,
                       .min = min,
                       .max = max};
        sp_status st = rx_node_add(p, rep, id);
        if (st) return st;
        *quantified = true;
    }
    return SP_OK;
}

/* A sequence up to '|', ')' or the end. */
static sp_status rx_concat(rx *p, int depth, int32_t *id) {
    rx_vec list = {0};
    size_t start = p->pos;
    sp_status st = SP_OK;
    while (p->pos < p->len && p->s[p->pos] != '|' && p->s[p->pos] != ')') {
        uint8_t c = p->s[p->pos];
        if (c == '^' && depth == 0 && p->pos == start) {
            p->pos++;
            continue;
        }
        if (c == '$' && depth == 0 && (p->pos + 1 == p->len || p->s[p->pos + 1] == '|')) {
            p->pos++;
            break;
        }
        if (c == '^' || c == '$') {
            st = sp_fail(SP_ERR_UNSUPPORTED, "position %zu: %c is only supported at the %s of the pattern", p->pos, c,
                         c == '^' ? "start" : "end");
            goto done;
        }
        int32_t atom;
        bool quantified;
        if ((st = rx_atom(p, depth, &atom)) || (st = rx_quantifier(p, &atom, &quantified))) goto done;
        const rx_node *nd = rx_at(p, atom);
        if (nd->kind == RX_CAT) { /* a group's sequence joins this one */
            for (int32_t i = 0; i < nd->n; i++) {
                if (!rx_push_id(&list, rx_kids(p, nd)[i])) goto nomem;
            }
        } else if (!rx_push_id(&list, atom)) {
            goto nomem;
        }
    }
    st = rx_node_list(p, RX_CAT, &list, id);
    goto done;
nomem:
    st = rx_nomem();
done:
    free(list.p);
    return st;
}

/* Sequences separated by '|', up to ')' or the end. */
static sp_status rx_alt(rx *p, int depth, int32_t *id) {
    rx_vec list = {0};
    sp_status st;
    for (;;) {
        int32_t seq;
        if ((st = rx_concat(p, depth, &seq))) goto done;
        if (!rx_push_id(&list, seq)) {
            st = rx_nomem();
            goto done;
        }
        if (p->pos >= p->len || p->s[p->pos] != '|') break;
        p->pos++;
    }
    st = rx_node_list(p, RX_ALT, &list, id);
done:
    free(list.p);
    return st;
}

/* ---- printing ------------------------------------------------------------------------ */

static void rx_emit_seq(rx *p, int32_t id);
static void rx_emit_item(rx *p, int32_t id);

/* One character inside a "literal" or a [class]. */
static void rx_emit_char(strbuf *b, uint32_t cp, bool in_class) {
    char c[2] = {'\\', (char)cp};
    if (cp >= 0x80) {
        rx_utf8_append(b, cp);
    } else if (cp == '\n' || cp == '\t' || (cp == '\r' && !in_class)) {
        strbuf_append(b, cp == '\n' ? "\\n" : cp == '\t' ? "\\t" : "\\r", 2);
    } else if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '['))) {
        strbuf_append(b, c, 2);
    } else if (cp >= 0x20 && cp < 0x7F) {
        strbuf_append(b, c + 1, 1);
    } else {
        strbuf_printf(b, "\\x%02X", cp);
    }
}

/* A set as [members] or [^others], whichever has fewer ranges. */
static void rx_emit_set(rx *p, const rx_node *nd) {
    const rx_range *r = (const rx_range *)p->ranges.p + nd->first;
    rx_vec comp = {0};
    if (!rx_set_complement(r, nd->n, &comp)) {
        p->out.failed = true;
        return;
    }
    bool negate = comp.n > 0 && comp.n < nd->n;
    int32_t n = negate ? comp.n : nd->n;
    if (negate) r = comp.p;
    strbuf_append(&p->out, negate ? "[^" : "[", negate ? 2 : 1);
    for (int32_t i = 0; i < n; i++) {
        rx_emit_char(&p->out, r[i].lo, true);
        if (r[i].hi == r[i].lo) continue;
        if (r[i].hi > r[i].lo + 1) strbuf_append(&p->out, "-", 1);
        rx_emit_char(&p->out, r[i].hi, true);
    }
    strbuf_append(&p->out, "]", 1);
    free(comp.p);
}

static void rx_put(rx *p, const char *text) {
    strbuf_append(&p->out, text, strlen(text));
}

/* Printing stops past RX_MAX_OUT bytes (nested optional parts can multiply). */
static bool rx_too_big(const rx *p) {
    return p->out.len > RX_MAX_OUT;
}

static int32_t rx_nullable_kids(const rx *p, const rx_node *nd) {
    int32_t n = 0;
    for (int32_t i = 0; i < nd->n; i++) n += rx_at(p, rx_kids(p, nd)[i])->nullable;
    return n;
}

static void rx_emit_count(rx *p, int32_t min, int32_t max) {
    if (min == 0 && max == 1) {
        rx_put(p, "?");
    } else if (max == RX_INF && min <= 1) {
        rx_put(p, min ? "+" : "*");
    } else if (max == RX_INF) {
        strbuf_printf(&p->out, "{%d,}", min);
    } else if (min != max) {
        strbuf_printf(&p->out, "{%d,%d}", min, max);
    } else if (min != 1) {
        strbuf_printf(&p->out, "{%d}", min);
    }
}

/* ---- loops (the rewrite of repeated loops) ------------------------------------------ */

/* Alphabets with more ranges than this are not worked out (the node is then no loop). */
enum { RX_ALPHA_MAX = 256 };

static const rx_range *rx_alpha(const rx *p, const rx_node *nd) {
    return nd->a_n > 0 ? (const rx_range *)p->ranges.p + nd->a_first : NULL;
}

static bool rx_alpha_equal(const rx *p, const rx_node *a, const rx_node *b) {
    return a->a_n >= 0 && a->a_n == b->a_n &&
           (a->a_n == 0 || memcmp(rx_alpha(p, a), rx_alpha(p, b), sizeof(rx_range) * (size_t)a->a_n) == 0);
}

/* Whether (Y{a,b}){m,n} (n RX_INF: unbounded) is Y{m*a, n*b} for Y one character: the
 * lengths k*a .. k*b of k = m .. n copies leave no gap, and the product is a count. */
static bool rx_counts_merge(int32_t a, int32_t b, int32_t m, int32_t n) {
    if (b == RX_INF || n == RX_INF || (int64_t)n * b > RX_MAX_COUNT) return false;
    for (int64_t k = m; k < n; k++)
        if ((k + 1) * a > k * b + 1) return false;
    return true;
}

/* k copies of a loop's minimum, or -1 past RX_MAX_COUNT. */
static int32_t rx_loop_mul(int64_t k, int32_t a) {
    return k * a > RX_MAX_COUNT ? -1 : (int32_t)(k * a);
}

/* Works out every node's alphabet and whether it is a loop over it (rx_node's a_*, loop,
 * covers), kids before parents (a node's kids have smaller ids); false when out of
 * memory. (Y{a,b}){m,n} of one character Y becomes Y{m*a,n*b} on the way. The rules, for
 * a loop Y over A (Y's strings are A{a,}):
 *   Y{m,n} (n >= 1)   is A{m*a,} when m >= 1, and A* when m = 0 and a <= 1;
 *   Z{m,} for Z covering its alphabet A is A{m,} (A* when Z is nullable);
 *   a sequence of loops over A and nullable parts within A is A{sum of the loops' a,};
 *   an alternation of Y and other parts within A is A* (a = 0, or a = 1 and some part
 *   nullable) or A+ (a = 1, no part nullable). */
static bool rx_loops(rx *p) {
    rx_vec u = {0};
    bool ok = true;
    for (int32_t id = 0; id < p->nodes.n && ok; id++) {
        rx_node *at = &((rx_node *)p->nodes.p)[id];
        at->loop = -1, at->covers = false;
        u.n = 0;
        if (at->kind == RX_CHAR) {
            ok = rx_set_add(&u, at->cp, at->cp);
            at->covers = true;
        } else if (at->kind == RX_SET) {
            at->a_first = at->first, at->a_n = at->n, at->covers = true;
            continue;
        } else if (at->kind == RX_REP) {
            const rx_node kid = *rx_at(p, at->kid);
            at->a_first = kid.a_first, at->a_n = kid.a_n;
            if (at->max == 0 || kid.a_n <= 0) continue;
            if (kid.kind == RX_REP && (rx_at(p, kid.kid)->kind == RX_CHAR || rx_at(p, kid.kid)->kind == RX_SET) &&
                rx_counts_merge(kid.min, kid.max, at->min, at->max)) {
                at->kid = kid.kid, at->min *= kid.min, at->max *= kid.max; /* (.{0,10}){10} is .{0,100} */
                at->covers = at->min <= 1;
                continue;
            }
            if (kid.loop >= 0) {
                at->loop = at->min >= 1 ? rx_loop_mul(at->min, kid.loop) : kid.loop <= 1 ? 0 : -1;
            } else if (at->max == RX_INF && kid.covers) {
                at->loop = kid.nullable ? 0 : at->min;
            }
            at->covers = (at->loop >= 0 && at->loop <= 1) || (kid.covers && (at->min <= 1 || kid.nullable));
            continue;
        } else { /* RX_CAT, RX_ALT: the union of the kids' alphabets */
            const int32_t *kids = rx_kids(p, at);
            for (int32_t i = 0; i < at->n && ok; i++) {
                const rx_node *k = rx_at(p, kids[i]);
                if (k->a_n < 0 || u.n + k->a_n > RX_ALPHA_MAX) {
                    u.n = -1;
                    break;
                }
                for (int32_t j = 0; j < k->a_n && ok; j++) {
                    rx_range *r = rx_vec_push(&u, sizeof *r);
                    if (r) *r = rx_alpha(p, k)[j];
                    ok = r != NULL;
                }
            }
        }
        if (!ok || u.n < 0) {
            at->a_n = -1;
            continue;
        }
        rx_set_normalize(&u);
        int32_t first = p->ranges.n;
        for (int32_t j = 0; j < u.n && ok; j++) {
            rx_range *r = rx_vec_push(&p->ranges, sizeof *r);
            if (r) *r = ((rx_range *)u.p)[j];
            ok = r != NULL;
        }
        at = &((rx_node *)p->nodes.p)[id];
        at->a_first = first, at->a_n = u.n;
        if (at->kind == RX_CHAR) continue;
        const int32_t *kids = rx_kids(p, at);
        const int32_t n_nullable = rx_nullable_kids(p, at);
        bool all_cover = true, cat_loop = at->kind == RX_CAT;
        int64_t cat_min = 0;
        int32_t n_loops = 0;
        for (int32_t i = 0; i < at->n; i++) {
            const rx_node *k = rx_at(p, kids[i]);
            all_cover = all_cover && k->covers;
            bool whole = k->loop >= 0 && rx_alpha_equal(p, k, at); /* a loop over the node's alphabet */
            n_loops += whole;
            if (whole) {
                cat_min += k->loop;
            } else if (!k->nullable) {
                cat_loop = false;
            }
            if (at->kind == RX_ALT && whole && (k->loop == 0 || (k->loop == 1 && at->loop != 0)))
                at->loop = k->loop == 0 || n_nullable > 0 ? 0 : 1;
        }
        if (cat_loop && n_loops > 0) at->loop = cat_min > RX_MAX_COUNT ? -1 : (int32_t)cat_min;
        at->covers = (at->loop >= 0 && at->loop <= 1) || (all_cover && (at->kind == RX_ALT || n_nullable == at->n));
    }
    free(u.p);
    return ok;
}

/* A loop over a non-empty alphabet, printed as [A]*, [A]+ or [A]{k,}: not a set or a
 * repetition of one character (which print as compactly as they are). */
static bool rx_is_loop(const rx *p, const rx_node *nd) {
    if (nd->loop < 0 || nd->a_n <= 0 || nd->empty || nd->kind == RX_SET) return false;
    return nd->kind != RX_REP || (rx_at(p, nd->kid)->kind != RX_CHAR && rx_at(p, nd->kid)->kind != RX_SET);
}

/* The loop nd as [A]*, [A]+ or [A]{k,}; with nonempty, its non-empty strings ([A]+ for A*). */
static void rx_emit_loop(rx *p, const rx_node *nd, bool nonempty) {
    const rx_range *a = rx_alpha(p, nd);
    if (nd->a_n == 1 && a->lo == a->hi) { /* one character: "c" */
        rx_put(p, "\"");
        rx_emit_char(&p->out, a->lo, false);
        rx_put(p, "\"");
    } else {
        rx_node set = {.kind = RX_SET, .first = nd->a_first, .n = nd->a_n};
        rx_emit_set(p, &set);
    }
    int32_t min = nd->loop == 0 && nonempty ? 1 : nd->loop;
    rx_emit_count(p, min, RX_INF);
}

/* id as something a quantifier may follow: "c", [set] or ( ... ). */
static void rx_emit_primary(rx *p, int32_t id) {
    const rx_node *nd = rx_at(p, id);
    if (nd->kind == RX_CHAR) {
        rx_put(p, "\"");
        rx_emit_char(&p->out, nd->cp, false);
        rx_put(p, "\"");
    } else if (nd->kind == RX_SET) {
        rx_emit_set(p, nd);
    } else if (nd->kind == RX_ALT && rx_nullable_kids(p, nd) <= 1) {
        rx_emit_item(p, id);
    } else {
        rx_put(p, "(");
        rx_emit_seq(p, id);
        rx_put(p, ")");
    }
}

/* Appends to parts the parts of id that may not be empty, such that (parts)* == id*. */
static bool rx_star_parts(const rx *p, int32_t id, rx_vec *parts) {
    const rx_node *nd = rx_at(p, id);
    if (!nd->nullable) return rx_push_id(parts, id);
    if (nd->kind == RX_REP) return rx_star_parts(p, nd->kid, parts);
    for (int32_t i = 0; i < nd->n; i++) { /* RX_CAT, RX_ALT */
        if (!rx_star_parts(p, rx_kids(p, nd)[i], parts)) return false;
    }
    return true;
}

/* (parts)* or (parts)+ (suffix) for id* or id+, id nullable: (x*)* == x*. */
static void rx_emit_star(rx *p, int32_t id, const char *suffix) {
    rx_vec parts = {0};
    if (!rx_star_parts(p, id, &parts)) p->out.failed = true;
    const int32_t *ids = parts.p;
    if (parts.n == 1) rx_emit_primary(p, ids[0]);
    for (int32_t i = 0; parts.n > 1 && i < parts.n; i++) {
        rx_put(p, i ? " | " : "(");
        rx_emit_seq(p, ids[i]);
    }
    if (parts.n > 1) rx_put(p, ")");
    rx_put(p, suffix);
    free(parts.p);
}

static int32_t rx_emit_nonempty(rx *p, int32_t id);

static void rx_emit_nonempty_primary(rx *p, int32_t id) {
    if (!rx_at(p, id)->nullable) {
        rx_emit_primary(p, id);
        return;
    }
    rx_put(p, "(");
    rx_emit_nonempty(p, id);
    rx_put(p, ")");
}

/* The strings of id but the empty one, as alternatives joined by " | "; how many (0 when
 * id matches only the empty string). */
static int32_t rx_emit_nonempty(rx *p, int32_t id) {
    const rx_node *nd = rx_at(p, id);
    if (nd->empty || rx_too_big(p)) return 0;
    if (rx_is_loop(p, nd)) {
        rx_emit_loop(p, nd, true);
        return 1;
    }
    if (!nd->nullable) {
        rx_emit_seq(p, id);
        return 1;
    }
    const int32_t *kids = rx_kids(p, nd);
    int32_t n = 0;
    if (nd->kind == RX_REP) {
        if (nd->max == RX_INF && rx_at(p, nd->kid)->nullable) {
            rx_emit_star(p, nd->kid, "+");
        } else {
            rx_emit_nonempty_primary(p, nd->kid);
            rx_emit_count(p, 1, nd->max);
        }
        return 1;
    }
    for (int32_t i = 0; i < nd->n; i++) {
        if (rx_at(p, kids[i])->empty) continue;
        if (n) rx_put(p, " | ");
        if (nd->kind == RX_ALT) {
            n += rx_emit_nonempty(p, kids[i]);
            continue;
        }
        /* RX_CAT, every kid nullable: kid i is the first to match something */
        n++;
        if (rx_at(p, kids[i])->kind == RX_REP) { /* one item, no need for ( ) */
            rx_emit_nonempty(p, kids[i]);
        } else {
            rx_emit_nonempty_primary(p, kids[i]);
        }
        for (int32_t j = i + 1; j < nd->n; j++) {
            if (rx_at(p, kids[j])->empty) continue;
            rx_put(p, " ");
            rx_emit_item(p, kids[j]);
        }
    }
    return n;
}

/* A repetition, with a single way to match the empty string. */
static void rx_emit_rep(rx *p, const rx_node *nd) {
    if (!rx_at(p, nd->kid)->nullable) {
        rx_emit_primary(p, nd->kid);
        rx_emit_count(p, nd->min, nd->max);
    } else if (nd->max == RX_INF) {
        rx_emit_star(p, nd->kid, "*");
    } else { /* x{m,n} with x nullable: up to n non-empty x's. One way to match the empty
              * string, and no empty copies to place (x{n} had C(n, k) ways to match k x's) */
        rx_emit_nonempty_primary(p, nd->kid);
        rx_emit_count(p, 0, nd->max);
    }
}

/* One element of a sequence (nothing when it matches only the empty string). Every
 * nullable element prints with exactly one way to match the empty string: several
 * would multiply the paths the matcher expands (2^k for k optional groups in a row). */
static void rx_emit_item(rx *p, int32_t id) {
    const rx_node *nd = rx_at(p, id);
    if (nd->empty || rx_too_big(p)) return;
    if (rx_is_loop(p, nd)) {
        rx_emit_loop(p, nd, false);
    } else if (nd->kind == RX_REP) {
        rx_emit_rep(p, nd);
    } else if (nd->kind == RX_CHAR || nd->kind == RX_SET) {
        rx_emit_primary(p, id);
    } else if (nd->kind == RX_CAT) {
        rx_put(p, "(");
        rx_emit_seq(p, id);
        rx_put(p, ")");
    } else if (rx_nullable_kids(p, nd) <= 1) {
        for (int32_t i = 0; i < nd->n; i++) {
            rx_put(p, i ? " | " : "(");
            rx_emit_seq(p, rx_kids(p, nd)[i]);
        }
        rx_put(p, ")");
    } else { /* (a?|b*): the empty string once, outside */
        rx_put(p, "(");
        rx_emit_nonempty(p, id);
        rx_put(p, ")?");
    }
}

/* id as a GBNF sequence ("" when it matches only the empty string); runs of characters
 * become one literal. */
static void rx_emit_seq(rx *p, int32_t id) {
    const rx_node *nd = rx_at(p, id);
    size_t start = p->out.len;
    int32_t n = nd->kind == RX_CAT ? nd->n : 1;
    const int32_t *ids = nd->kind == RX_CAT ? rx_kids(p, nd) : &id;
    for (int32_t i = 0; i < n;) {
        const rx_node *kid = rx_at(p, ids[i]);
        if (kid->empty) {
            i++;
            continue;
        }
        if (p->out.len > start) rx_put(p, " ");
        if (kid->kind != RX_CHAR) {
            rx_emit_item(p, ids[i++]);
            continue;
        }
        rx_put(p, "\"");
        for (; i < n && rx_at(p, ids[i])->kind == RX_CHAR; i++) rx_emit_char(&p->out, rx_at(p, ids[i])->cp, false);
        rx_put(p, "\"");
    }
    if (p->out.len == start) rx_put(p, "\"\"");
}

/* ---- the public functions ------------------------------------------------------------ */

sp_status gram_regex_to_gbnf_expr(const char *pattern, size_t len, char **expr) {
    *expr = NULL;
    if (!pattern && len) return sp_fail(SP_ERR_INVALID_ARG, "regex: NULL pattern");
    rx p = {.s = (const uint8_t *)pattern, .len = len};
    int32_t root;
    sp_status st = rx_alt(&p, 0, &root);
    if (st == SP_OK && p.pos < p.len) st = sp_fail(SP_ERR_INVALID_ARG, "position %zu: unmatched )", p.pos);
    if (st == SP_OK && !rx_loops(&p)) st = rx_nomem();
    if (st == SP_OK) {
        rx_emit_seq(&p, root);
        if (rx_too_big(&p)) {
            st = sp_fail(SP_ERR_RANGE, "position 0: the pattern's grammar is over %d bytes", RX_MAX_OUT);
        } else {
            *expr = strbuf_take(&p.out);
            if (!*expr) st = rx_nomem();
        }
    }
    free(p.out.p);
    free(p.nodes.p);
    free(p.kids.p);
    free(p.ranges.p);
    return st;
}

sp_status gram_regex_to_gbnf(const char *pattern, size_t len, char **gbnf) {
    char *expr;
    *gbnf = NULL;
    sp_status st = gram_regex_to_gbnf_expr(pattern, len, &expr);
    if (st) return st;
    strbuf b = {0};
    strbuf_printf(&b, "root ::= %s\n", expr);
    free(expr);
    *gbnf = strbuf_take(&b);
    return *gbnf ? SP_OK : rx_nomem();
}

sp_status gram_choice_to_gbnf(const char *const *choices, size_t n, char **gbnf) {
    *gbnf = NULL;
    if (n == 0 || !choices) return sp_fail(SP_ERR_INVALID_ARG, "choices: %s", n ? "NULL list" : "the list is empty");
    strbuf b = {0};
    strbuf_append(&b, "root ::= ", 9);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *s = (const uint8_t *)choices[i];
        if (!s) {
            free(b.p);
            return sp_fail(SP_ERR_INVALID_ARG, "choice %zu: NULL", i);
        }
        size_t len = strlen(choices[i]);
        strbuf_append(&b, i ? " | \"" : "\"", i ? 4 : 1);
        for (size_t j = 0; j < len;) {
            uint32_t cp;
            size_t k = rx_utf8_decode(s + j, len - j, &cp);
            if (!k) {
                free(b.p);
                return sp_fail(SP_ERR_INVALID_ARG, "choice %zu: invalid UTF-8 at byte %zu", i, j);
            }
            rx_emit_char(&b, cp, false);
            j += k;
        }
        strbuf_append(&b, "\"", 1);
    }
    strbuf_append(&b, "\n", 1);
    *gbnf = strbuf_take(&b);
    return *gbnf ? SP_OK : rx_nomem();
}

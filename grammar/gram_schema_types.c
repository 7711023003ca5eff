/* gram_schema_types.c: the leaves of gram_schema_to_gbnf (grammar_internal.h): the
 * shared rules, JSON text as GBNF, numbers with their bounds, strings with their lengths,
 * formats and patterns, enum and const, what "type" names, and whether two schemas are
 * disjoint (oneOf). gram_schema.c's file comment covers the other keywords; these admit:
 *   strings     minLength/maxLength count JSON string characters (a code point or an
 *               escape sequence). pattern (gram_regex_to_gbnf_expr) constrains the decoded
 *               text: anchored only at an end where every top-level alternative has ^ (or
 *               $), else anything may precede (or follow); characters that JSON escapes
 *               (" \ and controls) appear only as their escape sequences. format: date
 *               (YYYY-MM-DD, month 01-12, day 01-31), time (RFC 3339 full-time: hh:mm:ss,
 *               second up to 60, fraction of 1-9 digits, Z or +hh:mm/-hh:mm), date-time
 *               (date "T" time), uuid (8-4-4-4-12 hex digits), email (ASCII dot-atom "@"
 *               domain with a dot), uri (scheme ":" then URI characters and %XX); other
 *               formats are annotations. pattern, a format and length bounds do not combine.
 *   numbers     integer: -?(0|[1-9][0-9]{0,15}); number: that, then a fraction of 1-16
 *               digits and an exponent of 1-3, so no number runs on. Integer bounds (draft 4
 *               booleans too) are exact digit grammars; number bounds must be whole and
 *               inclusive, and a bounded number is written without exponent.
 *
 * Integer bounds become digit grammars: the canonical decimals of lo..hi, split by length
 * and then by the first digit that differs (int_range), so [5, 120] is
 * ([5-9] | [1-9] [0-9] | "1" ("0" [0-9] | "1" [0-9] | "20")), roughly.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "grammar/grammar_internal.h"

#define SCHEMA_INT_MAX 9999999999999999LL /* 16 digits, the longest integer part admitted */
enum { SCHEMA_MAX_COUNT = 100000 };       /* the largest minLength, maxItems, ... compiled */

/* ---- shared rules ---------------------------------------------------------------------- */

/* "$W" in a body stands for the whitespace between tokens. */
#define B(x) (1u << (x))
static const struct {
    const char *name;
    unsigned deps; /* shared rules this one uses */
    const char *body;
} schema_shared[SR_COUNT] = {
    [SR_WS] = {"ws", 0, "[ \\t\\n]{0,20}"},
    [SR_CHAR] = {"char", 0, "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})"},
    [SR_STRING] = {"string", B(SR_CHAR), "\"\\\"\" char* \"\\\"\""},
    [SR_NUMBER] = {"number", 0, "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?"},
    [SR_INTEGER] = {"integer", 0, "\"-\"? (\"0\" | [1-9] [0-9]{0,15})"},
    [SR_BOOLEAN] = {"boolean", 0, "\"true\" | \"false\""},
    [SR_NULL] = {"null", 0, "\"null\""},
    [SR_VALUE] = {"value", B(SR_OBJECT) | B(SR_ARRAY) | B(SR_STRING) | B(SR_NUMBER) | B(SR_BOOLEAN) | B(SR_NULL),
                  "object | array | string | number | boolean | null"},
    [SR_OBJECT] = {"object", B(SR_STRING) | B(SR_VALUE) | B(SR_WS),
                   "\"{\" $W (string $W \":\" $W value $W (\",\" $W string $W \":\" $W value $W)*)? \"}\""},
    [SR_ARRAY] = {"array", B(SR_VALUE) | B(SR_WS), "\"[\" $W (value $W (\",\" $W value $W)*)? \"]\""},
    [SR_DATE] = {"date", 0, "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"},
    [SR_TIME] = {"time", 0,
                 "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\") (\".\" [0-9]{1,9})? "
                 "(\"Z\" | (\"+\" | \"-\") ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
    [SR_DATE_TIME] = {"date-time", B(SR_DATE) | B(SR_TIME), "date \"T\" time"},
    [SR_UUID] = {"uuid", 0,
                 "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}"},
    [SR_EMAIL] = {"email", 0,
                  "[a-zA-Z0-9!#$%&'*+/=?^_\\x60{|}~\\-]+ (\".\" [a-zA-Z0-9!#$%&'*+/=?^_\\x60{|}~\\-]+)* \"@\" "
                  "[a-zA-Z0-9]+ (\"-\"+ [a-zA-Z0-9]+)* (\".\" [a-zA-Z0-9]+ (\"-\"+ [a-zA-Z0-9]+)*)+"},
    [SR_URI] = {"uri", 0,
                "[a-zA-Z] [a-zA-Z0-9+.\\-]* \":\" ([a-zA-Z0-9\\-._~:/?#\\[\\]@!$&'()*+,;=] | \"%\" [0-9a-fA-F]{2})*"},
};
#undef B

void gram__schema_use(gram_schema_ctx *c, strbuf *o, int r) {
    c->shared |= 1u << r;
    gram__put(o, schema_shared[r].name);
}

void gram__schema_ws(gram_schema_ctx *c, strbuf *o) {
    if (c->compact) {
        gram__put(o, " ");
    } else {
        c->shared |= 1u << SR_WS;
        gram__put(o, " ws ");
    }
}

void gram__schema_write_shared(strbuf *out, unsigned used, bool compact) {
    for (unsigned prev = 0; prev != used;) {
        prev = used;
        for (int r = 0; r < SR_COUNT; r++)
            if (used & 1u << r) used |= schema_shared[r].deps;
    }
    if (compact) used &= ~(1u << SR_WS);
    for (int r = 0; r < SR_COUNT; r++) {
        if (!(used & 1u << r)) continue;
        strbuf_printf(out, "%s ::= ", schema_shared[r].name);
        for (const char *p = schema_shared[r].body; *p; p++) {
            if (p[0] == '$' && p[1] == 'W') {
                gram__put(out, compact ? "" : "ws");
                p++;
            } else {
                strbuf_append(out, p, 1);
            }
        }
        gram__put(out, "\n");
    }
}

/* ---- text: code points, GBNF literals, JSON values ------------------------------------ */

static void utf8_put(strbuf *b, uint32_t cp) {
    char u[4];
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (size_t i = n - 1; i > 0; i--, cp >>= 6) u[i] = (char)(0x80 | (cp & 0x3F));
    u[0] = (char)(lead[n] | cp);
    strbuf_append(b, u, n);
}

/* The code point at s[*i] (an invalid byte stands for itself); advances *i. */
uint32_t gram__utf8_get(const char *s, size_t n, size_t *i) {
    unsigned char b = (unsigned char)s[(*i)++];
    size_t more = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
    if (b < 0xC0 || b > 0xF7 || *i + more > n) return b;
    uint32_t cp = b & (0x3F >> more);
    for (size_t k = 0; k < more; k++) cp = cp << 6 | ((unsigned char)s[(*i)++] & 0x3F);
    return cp;
}

/* One code point in a GBNF "literal" or [class]. */
void gram__gbnf_cp(strbuf *b, uint32_t cp, bool in_class) {
    if (cp >= 0x80) {
        utf8_put(b, cp);
    } else if (cp == '"' || cp == '\\') {
        strbuf_append(b, cp == '"' ? "\\\"" : "\\\\", 2);
    } else if (cp < 0x20 || cp == 0x7F || (in_class && strchr("[]^-", (int)cp))) {
        strbuf_printf(b, "\\x%02X", cp);
    } else {
        char ch = (char)cp;
        strbuf_append(b, &ch, 1);
    }
}

void gram__gbnf_literal(strbuf *o, const char *s, size_t n) {
    strbuf_append(o, "\"", 1);
    for (size_t i = 0; i < n;) gram__gbnf_cp(o, gram__utf8_get(s, n, &i), false);
    strbuf_append(o, "\"", 1);
}

/* cp as JSON string text: itself, or its escape when JSON requires one. */
void gram__json_escape_cp(strbuf *b, uint32_t cp) {
    static const char short_esc[] = "b\bf\fn\nr\rt\t\"\"\\\\";
    for (const char *e = short_esc; *e; e += 2)
        if ((uint32_t)(unsigned char)e[1] == cp) {
            char esc[2] = {'\\', e[0]};
            strbuf_append(b, esc, 2);
            return;
        }
    if (cp < 0x20) {
        strbuf_printf(b, "\\u%04x", cp);
    } else {
        utf8_put(b, cp);
    }
}

void gram__json_string_text(strbuf *b, const char *s, size_t n) {
    strbuf_append(b, "\"", 1);
    for (size_t i = 0; i < n;) gram__json_escape_cp(b, gram__utf8_get(s, n, &i));
    strbuf_append(b, "\"", 1);
}

/* Between two tokens of a value: flushes the pending literal and writes gram__schema_ws (not compact). */
static void value_ws(gram_schema_ctx *c, strbuf *lit, strbuf *o) {
    if (c->compact) return;
    if (lit->len) gram__gbnf_literal(o, lit->p, lit->len);
    lit->len = 0;
    gram__schema_ws(c, o);
}

/* v's JSON text into lit (pending literal text), with ws between tokens unless compact. */
static void value_tokens(gram_schema_ctx *c, const json_t *v, strbuf *lit, strbuf *o) {
    char num[48];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        bool first = true;
        strbuf_append(lit, "{", 1);
        value_ws(c, lit, o);
        json_object_foreach((json_t *)v, k, x) {
            if (!first) strbuf_append(lit, ",", 1);
            if (!first) value_ws(c, lit, o);
            gram__json_string_text(lit, k, strlen(k));
            value_ws(c, lit, o);
            strbuf_append(lit, ":", 1);
            value_ws(c, lit, o);
            value_tokens(c, x, lit, o);
            value_ws(c, lit, o);
            first = false;
        }
        strbuf_append(lit, "}", 1);
        return;
    }
    case JSON_ARRAY:
        strbuf_append(lit, "[", 1);
        value_ws(c, lit, o);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) strbuf_append(lit, ",", 1);
            if (i) value_ws(c, lit, o);
            value_tokens(c, json_array_get(v, i), lit, o);
            value_ws(c, lit, o);
        }
        strbuf_append(lit, "]", 1);
        return;
    case JSON_STRING: gram__json_string_text(lit, json_string_value(v), json_string_length(v)); return;
    case JSON_INTEGER: snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: /* the shortest text that reads back as the same double */
        for (int p = 1; p <= 17; p++) {
            snprintf(num, sizeof num, "%.*g", p, json_real_value(v));
            if (strtod(num, NULL) == json_real_value(v)) break;
        }
        break;
    case JSON_TRUE: snprintf(num, sizeof num, "true"); break;
    case JSON_FALSE: snprintf(num, sizeof num, "false"); break;
    case JSON_NULL: snprintf(num, sizeof num, "null"); break;
    }
    strbuf_append(lit, num, strlen(num));
}

static void value_expr(gram_schema_ctx *c, const json_t *v, strbuf *o) {
    strbuf lit = {0};
    value_tokens(c, v, &lit, o);
    if (lit.len) gram__gbnf_literal(o, lit.p, lit.len);
    if (lit.failed) o->failed = true;
    free(lit.p);
}

unsigned gram__value_types(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return JT_OBJECT;
    case JSON_ARRAY: return JT_ARRAY;
    case JSON_STRING: return JT_STRING;
    case JSON_INTEGER: return JT_INT;
    case JSON_REAL: return json_real_value(v) == floor(json_real_value(v)) ? JT_INT : JT_FRAC;
    case JSON_TRUE:
    case JSON_FALSE: return JT_BOOL;
    default: return JT_NULL;
    }
}

/* ---- numbers -------------------------------------------------------------------------- */

/* The digit strings of length n from x to y (x <= y, leading zeros allowed). */
static void digits_range(strbuf *o, const char *x, const char *y, size_t n) {
    size_t i = 0;
    while (i < n && x[i] == y[i]) i++;
    if (i) strbuf_printf(o, "\"%.*s\"%s", (int)i, x, i < n ? " " : "");
    if (i == n) return;
    size_t rest = n - i - 1;
    if (!rest) {
        strbuf_printf(o, "[%c-%c]", x[i], y[i]);
        return;
    }
    char nines[20], zeros[20];
    memset(nines, '9', rest);
    memset(zeros, '0', rest);
    nines[rest] = zeros[rest] = '\0';
    bool from_zeros = memcmp(x + i + 1, zeros, rest) == 0, to_nines = memcmp(y + i + 1, nines, rest) == 0;
    char lo = from_zeros ? x[i] : (char)(x[i] + 1), hi = to_nines ? y[i] : (char)(y[i] - 1);
    const char *sep = "";
    strbuf_append(o, "(", 1);
    if (!from_zeros) {
        strbuf_printf(o, "\"%c\" ", x[i]);
        digits_range(o, x + i + 1, nines, rest);
        sep = " | ";
    }
    if (lo <= hi) {
        strbuf_printf(o, "%s[%c-%c] [0-9]", sep, lo, hi);
        if (rest > 1) strbuf_printf(o, "{%zu}", rest);
        sep = " | ";
    }
    if (!to_nines) {
        strbuf_printf(o, "%s\"%c\" ", sep, y[i]);
        digits_range(o, zeros, y + i + 1, rest);
    }
    strbuf_append(o, ")", 1);
}

/* An atom for the integers lo..hi written without leading zeros, 0 <= lo <= hi <= SCHEMA_INT_MAX. */
static void int_range(strbuf *o, long long lo, long long hi) {
    const char *sep = "(";
    long long p = 1;
    for (size_t len = 1; len <= 16; len++, p *= 10) {
        long long from = len == 1 ? 0 : p, to = p * 10 - 1;
        if (from < lo) from = lo;
        if (to > hi) to = hi;
        if (from > to) continue;
        char x[24], y[24];
        snprintf(x, sizeof x, "%lld", from);
        snprintf(y, sizeof y, "%lld", to);
        strbuf_append(o, sep, strlen(sep));
        digits_range(o, x, y, len);
        sep = " | ";
    }
    strbuf_append(o, ")", 1);
}

/* Magnitudes from lo up to hi (unbounded: below 10^16), whole or with a fraction. */
static void magnitude_range(strbuf *o, long long lo, long long hi, bool bounded) {
    gram__put(o, "(");
    if (!bounded || lo < hi) {
        int_range(o, lo, bounded ? hi - 1 : SCHEMA_INT_MAX);
        gram__put(o, " (\".\" [0-9]{1,16})?");
    }
    if (bounded) strbuf_printf(o, "%s\"%lld\" (\".\" \"0\"{1,16})?", lo < hi ? " | " : "", hi);
    gram__put(o, ")");
}

typedef struct schema_bounds {
    bool has_lo, has_hi;
    long long lo, hi;
} schema_bounds;

static sp_status schema_num_bounds(gram_schema_ctx *c, const json_t *s, bool integer, schema_bounds *b) {
    static const char *const kws[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    *b = (schema_bounds){0};
    for (int k = 0; k < 4; k++) {
        const json_t *v = json_object_get(s, kws[k]);
        bool upper = k >= 2, excl = k & 1;
        if (!v) continue;
        if (excl && json_is_boolean(v)) { /* draft 4: modifies minimum or maximum */
            if (json_is_true(v) && !json_object_get(s, kws[k - 1]))
                return gram__schema_fail(c, SP_ERR_INVALID_ARG, kws[k], "true needs %s", kws[k - 1]);
            continue;
        }
        if (!json_is_number(v)) return gram__schema_fail(c, SP_ERR_INVALID_ARG, kws[k], "must be a number");
        if (!excl) excl = json_is_true(json_object_get(s, kws[k + 1]));
        long double d = json_is_integer(v) ? (long double)json_integer_value(v) : (long double)json_real_value(v), r;
        if (!integer && (excl || d != floorl(d)))
            return gram__schema_fail(c, SP_ERR_UNSUPPORTED, kws[k],
                                     "a grammar enforces only whole, inclusive bounds on non-integer numbers");
        if (upper) {
            r = excl ? ceill(d) - 1 : floorl(d);
            if (r < -(long double)SCHEMA_INT_MAX)
                return gram__schema_fail(c, SP_ERR_UNSUPPORTED, kws[k], "bound beyond 16 digits");
            if (r > (long double)SCHEMA_INT_MAX) continue;
            if (!b->has_hi || (long long)r < b->hi) b->hi = (long long)r;
            b->has_hi = true;
        } else {
            r = excl ? floorl(d) + 1 : ceill(d);
            if (r > (long double)SCHEMA_INT_MAX)
                return gram__schema_fail(c, SP_ERR_UNSUPPORTED, kws[k], "bound beyond 16 digits");
            if (r < -(long double)SCHEMA_INT_MAX) continue;
            if (!b->has_lo || (long long)r > b->lo) b->lo = (long long)r;
            b->has_lo = true;
        }
    }
    if (b->has_lo && b->has_hi && b->lo > b->hi)
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "maximum", "no %s lies between the lower and the upper bound",
                                 integer ? "integer" : "number");
    return SP_OK;
}

/* An integer (fraction false) or a number within the schema's bounds. */
sp_status gram__schema_number(gram_schema_ctx *c, const json_t *s, bool fraction, strbuf *o) {
    schema_bounds b;
    sp_status st = schema_num_bounds(c, s, !fraction, &b);
    if (st != SP_OK) return st;
    if (!b.has_lo && !b.has_hi) {
        gram__schema_use(c, o, fraction ? SR_NUMBER : SR_INTEGER);
        return SP_OK;
    }
    const char *sep = "(";
    if (!b.has_hi || b.hi >= 0) {
        long long lo = b.has_lo && b.lo > 0 ? b.lo : 0, hi = b.has_hi ? b.hi : SCHEMA_INT_MAX;
        strbuf_append(o, sep, 1);
        if (fraction) magnitude_range(o, lo, hi, b.has_hi);
        if (!fraction) int_range(o, lo, hi);
        sep = " | ";
    }
    if (!b.has_lo || b.lo < 0) {
        long long lo = b.has_hi && b.hi < 0 ? -b.hi : !fraction, hi = b.has_lo ? -b.lo : SCHEMA_INT_MAX;
        strbuf_printf(o, "%s\"-\" ", sep);
        if (fraction) magnitude_range(o, lo, hi, b.has_lo);
        if (!fraction) int_range(o, lo, hi);
    }
    strbuf_append(o, ")", 1);
    return SP_OK;
}

/* ---- strings -------------------------------------------------------------------------- */

static const struct {
    const char *name;
    int rule;
} schema_formats[] = {{"date", SR_DATE}, {"time", SR_TIME},   {"date-time", SR_DATE_TIME},
                      {"uuid", SR_UUID}, {"email", SR_EMAIL}, {"uri", SR_URI}};

/* The shared rule of s's format, or -1 (none, or one taken as an annotation). */
static int schema_format(const json_t *s) {
    const json_t *f = json_object_get(s, "format");
    for (size_t i = 0; json_is_string(f) && i < sizeof schema_formats / sizeof *schema_formats; i++)
        if (strcmp(json_string_value(f), schema_formats[i].name) == 0) return schema_formats[i].rule;
    return -1;
}

/* A count keyword (minLength, maxItems, ...) as *n, -1 when absent. */
sp_status gram__schema_count(gram_schema_ctx *c, const json_t *s, const char *kw, long long *n) {
    const json_t *v = json_object_get(s, kw);
    *n = -1;
    if (!v) return SP_OK;
    double d = json_number_value(v);
    if (!json_is_number(v) || d < 0 || d != floor(d))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, kw, "must be a non-negative integer");
    if (d > SCHEMA_MAX_COUNT)
        return gram__schema_fail(c, SP_ERR_RANGE, kw, "counts above %d are not compiled", SCHEMA_MAX_COUNT);
    *n = (long long)d;
    return SP_OK;
}

/* The repetition {lo,hi} (hi < 0: unbounded, else hi >= 1) after an atom. */
void gram__schema_quant(strbuf *o, long long lo, long long hi) {
    if (hi < 0 && lo <= 1) {
        gram__put(o, lo ? "+" : "*");
    } else if (hi < 0) {
        strbuf_printf(o, "{%lld,}", lo);
    } else if (lo == 0 && hi == 1) {
        gram__put(o, "?");
    } else if (lo == hi) {
        if (lo != 1) strbuf_printf(o, "{%lld}", lo);
    } else {
        strbuf_printf(o, "{%lld,%lld}", lo, hi);
    }
}

static int hex_value(char h) {
    return h >= '0' && h <= '9' ? h - '0' : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10 : -1;
}

/* One character of a GBNF literal or class at e[*i], escapes decoded; advances *i. */
static uint32_t gbnf_char(const char *e, size_t n, size_t *i) {
    if (e[*i] != '\\' || *i + 1 >= n) return gram__utf8_get(e, n, i);
    char x = e[*i + 1];
    int digits = x == 'x' ? 2 : x == 'u' ? 4 : x == 'U' ? 8 : 0;
    *i += 2;
    if (!digits) return x == 'n' ? '\n' : x == 'r' ? '\r' : x == 't' ? '\t' : x == '0' ? 0 : (uint32_t)(unsigned char)x;
    uint32_t cp = 0;
    for (int k = 0; k < digits && *i < n && hex_value(e[*i]) >= 0; k++) cp = cp * 16 + (uint32_t)hex_value(e[(*i)++]);
    return cp;
}

static bool class_has(const uint32_t *r, size_t nr, uint32_t cp) {
    for (size_t k = 0; k < nr; k++)
        if (r[2 * k] <= cp && cp <= r[2 * k + 1]) return true;
    return false;
}

static void alt_sep(strbuf *b) {
    if (b->len) gram__put(b, " | ");
}

/* A pattern's character set (ranges r, the complement when neg) as JSON string text: most
 * members as themselves, the ones JSON escapes (" \ and controls) as escape sequences. */
static sp_status pattern_class(gram_schema_ctx *c, const uint32_t *r, size_t nr, bool neg, strbuf *o) {
    static const uint32_t plain[3][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
    strbuf alt = {0}, cls = {0}, raw = {0};
    size_t n_alt = 0, n_ctrl = 0;
    for (size_t k = 0; k < nr; k++) {
        for (int j = 0; j < (neg ? 1 : 3); j++) {
            uint32_t lo = neg ? r[2 * k] : r[2 * k] > plain[j][0] ? r[2 * k] : plain[j][0];
            uint32_t hi = neg ? r[2 * k + 1] : r[2 * k + 1] < plain[j][1] ? r[2 * k + 1] : plain[j][1];
            if (lo > hi) continue;
            gram__gbnf_cp(&cls, lo, true);
            if (hi > lo) gram__put(&cls, "-");
            if (hi > lo) gram__gbnf_cp(&cls, hi, true);
        }
    }
    if (neg || cls.len) {
        gram__put(&alt, neg ? "[^" : "[");
        if (cls.len) strbuf_append(&alt, cls.p, cls.len);
        gram__put(&alt, neg ? "\\x22\\x5C\\x00-\\x1F]" : "]");
        n_alt++;
    }
    for (uint32_t cp = 0; cp < 0x20; cp++) n_ctrl += class_has(r, nr, cp) != neg;
    if (n_ctrl == 0x20) {
        alt_sep(&alt);
        gram__put(&alt, "\"\\\\\" [bfnrt] | \"\\\\u00\" [01] [0-9a-fA-F]");
        n_alt += 2;
    }
    for (uint32_t cp = 0; cp <= '\\'; cp++) {
        if ((cp < 0x20 && n_ctrl == 0x20) || (cp >= 0x20 && cp != '"' && cp != '\\') || class_has(r, nr, cp) == neg)
            continue;
        raw.len = 0;
        gram__json_escape_cp(&raw, cp);
        alt_sep(&alt);
        gram__gbnf_literal(&alt, raw.p, raw.len);
        n_alt++;
    }
    sp_status st = alt.failed || raw.failed || cls.failed ? gram__schema_nomem() : SP_OK;
    if (st == SP_OK && !n_alt)
        st = gram__schema_fail(c, SP_ERR_UNSUPPORTED, "pattern", "a character set matches nothing");
    if (st == SP_OK) {
        if (n_alt > 1) gram__put(o, "(");
        strbuf_append(o, alt.p, alt.len);
        if (n_alt > 1) gram__put(o, ")");
    }
    free(alt.p);
    free(cls.p);
    free(raw.p);
    return st;
}

/* The regex's GBNF expression e, rewritten to match the JSON text of the strings it matches. */
static sp_status pattern_rewrite(gram_schema_ctx *c, const char *e, strbuf *o) {
    size_t n = strlen(e), nr = 0, cap = 0;
    uint32_t *r = NULL;
    strbuf raw = {0};
    sp_status st = SP_OK;
    for (size_t i = 0; i < n && st == SP_OK;) {
        if (e[i] == '"') {
            raw.len = 0;
            for (i++; i < n && e[i] != '"';) gram__json_escape_cp(&raw, gbnf_char(e, n, &i));
            i++;
            gram__gbnf_literal(o, raw.p ? raw.p : "", raw.len);
        } else if (e[i] == '.') {
            i++;
            st = pattern_class(c, NULL, 0, true, o);
        } else if (e[i] == '[') {
            bool neg = ++i < n && e[i] == '^';
            nr = 0;
            for (i += neg; i < n && e[i] != ']' && st == SP_OK;) {
                uint32_t lo = gbnf_char(e, n, &i), hi = lo;
                if (i + 1 < n && e[i] == '-' && e[i + 1] != ']') {
                    i++;
                    hi = gbnf_char(e, n, &i);
                }
                if (!sp_grow((void **)&r, &cap, 2 * nr + 2, sizeof *r))
                    st = gram__schema_nomem();
                else
                    r[2 * nr] = lo, r[2 * nr + 1] = hi, nr++;
            }
            i++;
            if (st == SP_OK) st = pattern_class(c, r, nr, neg, o);
        } else if (e[i] == '#') {
            while (i < n && e[i] != '\n') i++;
        } else {
            strbuf_append(o, e + i++, 1);
        }
    }
    if (st == SP_OK && raw.failed) st = gram__schema_nomem();
    free(r);
    free(raw.p);
    return st;
}

/* Counts a top-level alternative p[from, to) of a pattern, and whether it has ^ and $. */
static void pattern_tally(const char *p, size_t from, size_t to, size_t *starts, size_t *ends) {
    size_t bs = 0;
    while (to >= from + 2 + bs && p[to - 2 - bs] == '\\') bs++;
    *starts += to > from && p[from] == '^';
    *ends += to > from && p[to - 1] == '$' && bs % 2 == 0;
}

static sp_status schema_pattern(gram_schema_ctx *c, const json_t *pat, strbuf *o) {
    if (!json_is_string(pat)) return gram__schema_fail(c, SP_ERR_INVALID_ARG, "pattern", "must be a string");
    const char *p = json_string_value(pat);
    size_t n = json_string_length(pat), alts = 1, starts = 0, ends = 0, from = 0;
    int depth = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\') {
            i++;
        } else if (in_class) {
            in_class = p[i] != ']';
        } else if (p[i] == '[' || p[i] == '(' || p[i] == ')') {
            in_class = p[i] == '[';
            depth += p[i] == '(' ? 1 : p[i] == ')' ? -1 : 0;
        } else if (p[i] == '|' && depth == 0) {
            pattern_tally(p, from, i, &starts, &ends);
            from = i + 1;
            alts++;
        }
    }
    pattern_tally(p, from, n, &starts, &ends);
    if ((starts && starts != alts) || (ends && ends != alts))
        return gram__schema_fail(c, SP_ERR_UNSUPPORTED, "pattern", "^ or $ on only some top-level alternatives");
    char *expr;
    sp_status st = gram_regex_to_gbnf_expr(p, n, &expr);
    if (st != SP_OK) return sp_fail_prefix(st, "%s/pattern", c->ptr.p ? c->ptr.p : "");
    gram__put(o, "(\"\\\"\" ");
    if (!starts) gram__schema_use(c, o, SR_CHAR);
    gram__put(o, starts ? "(" : "* (");
    st = pattern_rewrite(c, expr, o);
    gram__put(o, ")");
    if (!ends) gram__put(o, " ");
    if (!ends) gram__schema_use(c, o, SR_CHAR);
    gram__put(o, ends ? " \"\\\"\")" : "* \"\\\"\")");
    free(expr);
    return st;
}

sp_status gram__schema_string(gram_schema_ctx *c, const json_t *s, strbuf *o) {
    long long lo, hi;
    sp_status st = gram__schema_count(c, s, "minLength", &lo);
    if (st == SP_OK) st = gram__schema_count(c, s, "maxLength", &hi);
    if (st != SP_OK) return st;
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    int f = schema_format(s);
    if (fmt && !json_is_string(fmt)) return gram__schema_fail(c, SP_ERR_INVALID_ARG, "format", "must be a string");
    if (lo >= 0 && hi >= 0 && lo > hi)
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "maxLength", "minLength %lld is above maxLength %lld", lo, hi);
    if (pat && (f >= 0 || lo >= 0 || hi >= 0))
        return gram__schema_fail(c, SP_ERR_UNSUPPORTED, "pattern", "pattern with format, minLength or maxLength");
    if (f >= 0 && (lo >= 0 || hi >= 0))
        return gram__schema_fail(c, SP_ERR_UNSUPPORTED, "format", "format with minLength or maxLength");
    if (pat) return schema_pattern(c, pat, o);
    if (f < 0 && lo <= 0 && hi < 0) {
        gram__schema_use(c, o, SR_STRING);
    } else if (hi == 0) {
        gram__put(o, "\"\\\"\\\"\"");
    } else {
        gram__put(o, "(\"\\\"\" ");
        gram__schema_use(c, o, f >= 0 ? f : SR_CHAR);
        if (f < 0) gram__schema_quant(o, lo < 0 ? 0 : lo, hi);
        gram__put(o, " \"\\\"\")");
    }
    return SP_OK;
}

/* ---- enum, const, type ------------------------------------------------------------------ */

/* The types a "type" value names; 0 when it is malformed. */
unsigned gram__schema_types_of(const json_t *t) {
    static const struct {
        const char *name;
        unsigned bits;
    } names[] = {{"null", JT_NULL},     {"boolean", JT_BOOL}, {"object", JT_OBJECT},       {"array", JT_ARRAY},
                 {"string", JT_STRING}, {"integer", JT_INT},  {"number", JT_INT | JT_FRAC}};
    unsigned bits = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        size_t k = 0;
        while (json_is_string(x) && k < 7 && strcmp(json_string_value(x), names[k].name)) k++;
        if (!json_is_string(x) || k == 7) return 0;
        bits |= names[k].bits;
    }
    return bits;
}

static bool has_any(const json_t *s, const char *const *kws) {
    for (; *kws; kws++)
        if (json_object_get(s, *kws)) return true;
    return false;
}

/* The types the keywords of s imply when it has no type (JT_ANY: none). */
unsigned gram__schema_infer(const json_t *s) {
    static const char *const obj[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arr[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", NULL};
    static const char *const str[] = {"minLength", "maxLength", "pattern", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    unsigned t = (has_any(s, obj) ? JT_OBJECT : 0) | (has_any(s, arr) ? JT_ARRAY : 0) |
                 (has_any(s, str) || schema_format(s) >= 0 ? JT_STRING : 0) | (has_any(s, num) ? JT_INT | JT_FRAC : 0);
    return t ? t : JT_ANY;
}

sp_status gram__schema_types(gram_schema_ctx *c, const json_t *s, unsigned *types) {
    const json_t *t = json_object_get(s, "type");
    *types = t ? gram__schema_types_of(t) : gram__schema_infer(s);
    if (!*types)
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "type",
                                 "must be a type name (null, boolean, object, array, string, integer, number) or a "
                                 "non-empty list of them");
    return SP_OK;
}

bool gram__values_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

sp_status gram__schema_enum(gram_schema_ctx *c, const json_t *s, strbuf *o) {
    static const char *const beside[] = {"type", "enum", "const", "format", NULL};
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const"), *v;
    const char *k;
    json_object_foreach((json_t *)s, k, v) {
        bool ok = false;
        for (const char *const *b = beside; *b; b++) ok = ok || strcmp(k, *b) == 0;
        if (gram__schema_handled(k) && !ok)
            return gram__schema_fail(c, SP_ERR_UNSUPPORTED, k, "%s beside enum or const is not supported", k);
    }
    if (en && (!json_is_array(en) || !json_array_size(en)))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "enum", "must be a non-empty array");
    unsigned types = JT_ANY;
    sp_status st = json_object_get(s, "type") ? gram__schema_types(c, s, &types) : SP_OK;
    size_t n = cn ? 1 : json_array_size(en), count = 0, j = 0;
    while (cn && en && j < json_array_size(en) && !gram__values_equal(cn, json_array_get(en, j))) j++;
    if (st == SP_OK && cn && en && j == json_array_size(en))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "const", "the value is not one of enum's");
    for (size_t i = 0; st == SP_OK && i < n; i++) {
        v = cn ? cn : json_array_get(en, i);
        if (!(gram__value_types(v) & types)) continue;
        if (count++) gram__put(o, " | ");
        value_expr(c, v, o);
    }
    if (st == SP_OK && !count)
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, cn ? "const" : "enum", "no value has the schema's type");
    return st;
}

/* ---- oneOf: telling schemas apart -------------------------------------------------------- */

/* What a schema's documents may be: types, or (const, enum) only some values. */
typedef struct schema_kind {
    unsigned types;
    const json_t *one, *values; /* const's value; enum's values */
    const json_t *s;            /* the schema, $refs followed */
} schema_kind;

static schema_kind kind_of(gram_schema_ctx *c, const json_t *s, int depth) {
    schema_kind k = {JT_ANY, NULL, NULL, NULL};
    s = gram__schema_resolve(c, s);
    if (!json_is_object(s) || depth > c->max_depth) return k;
    const json_t *t = json_object_get(s, "type"), *alts = json_object_get(s, "anyOf");
    k.s = s;
    k.one = json_object_get(s, "const");
    k.values = k.one || !json_is_array(json_object_get(s, "enum")) ? NULL : json_object_get(s, "enum");
    if (!alts) alts = json_object_get(s, "oneOf");
    if (k.one || k.values) {
        k.types = k.one ? gram__value_types(k.one) : 0;
        for (size_t i = 0; i < json_array_size(k.values); i++)
            k.types |= gram__value_types(json_array_get(k.values, i));
    } else if (t) {
        k.types = gram__schema_types_of(t) ? gram__schema_types_of(t) : JT_ANY;
    } else if (json_is_array(alts) && json_array_size(alts)) {
        k.types = 0;
        for (size_t i = 0; i < json_array_size(alts); i++)
            k.types |= kind_of(c, json_array_get(alts, i), depth + 1).types;
    } else if (!json_object_get(s, "allOf")) {
        k.types = gram__schema_infer(s);
    }
    return k;
}

static bool kinds_disjoint(gram_schema_ctx *c, const schema_kind *a, const schema_kind *b, int depth) {
    if (!(a->types & b->types)) return true;
    size_t na = a->one ? 1 : json_array_size(a->values), nb = b->one ? 1 : json_array_size(b->values);
    if (na && nb) {
        for (size_t i = 0; i < na; i++)
            for (size_t j = 0; j < nb; j++)
                if (gram__values_equal(a->one ? a->one : json_array_get(a->values, i),
                                       b->one ? b->one : json_array_get(b->values, j)))
                    return false;
        return true;
    }
    if (na || nb || a->types != JT_OBJECT || b->types != JT_OBJECT || depth > c->max_depth) return false;
    /* tagged unions: a property both require, with disjoint schemas */
    const json_t *ra = json_object_get(a->s, "required"), *rb = json_object_get(b->s, "required");
    for (size_t i = 0; i < json_array_size(ra); i++) {
        const char *key = json_string_value(json_array_get(ra, i));
        bool in_b = false;
        for (size_t j = 0; key && j < json_array_size(rb); j++)
            in_b = in_b ||
                   (json_is_string(json_array_get(rb, j)) && !strcmp(key, json_string_value(json_array_get(rb, j))));
        const json_t *pa = json_object_get(json_object_get(a->s, "properties"), key ? key : "");
        const json_t *pb = json_object_get(json_object_get(b->s, "properties"), key ? key : "");
        if (!in_b || !pa || !pb) continue;
        schema_kind ka = kind_of(c, pa, depth + 1), kb = kind_of(c, pb, depth + 1);
        if (kinds_disjoint(c, &ka, &kb, depth + 1)) return true;
    }
    return false;
}

bool gram__schema_disjoint(gram_schema_ctx *c, const json_t *a, const json_t *b, int depth) {
    schema_kind ka = kind_of(c, a, depth), kb = kind_of(c, b, depth);
    return kinds_disjoint(c, &ka, &kb, depth);
}

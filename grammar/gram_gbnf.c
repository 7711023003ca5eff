/* gram_gbnf.c: GBNF text to a compiled grammar (grammar_internal.h).
 *
 * The dialect is llama.cpp's: `name ::= alternatives`; a rule ends at a newline that is
 * not inside parentheses and does not follow `|`; "literals" and [classes] with \n \r
 * \t \\ \" \' \[ \] \- \/ \xHH \uHHHH \UHHHHHHHH escapes; [^negated] classes; `.` (any
 * code point); ( groups ); `|`; postfix * + ? {m} {m,} {m,n}; `#` comments. Names are
 * letters, digits, '-' and '_'. The start rule is `root`.
 *
 * Lowering: a literal is its UTF-8 bytes, one GRAM_BYTES element each; a class is one
 * element when all its members are ASCII, else a rule whose alternatives are the UTF-8
 * byte-range sequences of its code-point ranges (surrogates excluded); a group is a rule;
 * X* is S ::= X S | (empty); X? is O ::= X | (empty); X{m,n} is X m times, then a chain of
 * n - m optional X. Undefined rules, a missing root and left recursion (which would
 * expand forever) are errors with the line and column of the place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar_defaults.h"
#include "grammar/grammar_internal.h"

gram_limits gram_limits_default(void) {
    return (gram_limits){.max_rules = SP_GRAMMAR_DEFAULT_MAX_RULES,
                         .max_elements = SP_GRAMMAR_DEFAULT_MAX_ELEMENTS,
                         .max_depth = SP_GRAMMAR_DEFAULT_MAX_DEPTH,
                         .max_stacks = 512,
                         .max_mask_fuel = GRAM_DEFAULT_MASK_FUEL};
}

/* ---- the builder ------------------------------------------------------------------- */

typedef struct seq {
    gram_elem *e;
    int32_t n;
    size_t cap;
} seq;

typedef struct rule_b {
    const char *name; /* into the source; aux rules: their origin rule's name */
    int32_t name_len;
    seq *alts;
    int32_t n_alts;
    size_t cap_alts;
    bool defined, aux;
    size_t first_ref; /* where it was first referenced (undefined-rule errors) */
    size_t defined_at;
} rule_b;

typedef struct builder {
    const char *src;
    size_t len, pos;
    rule_b *rules;
    int32_t n_rules;
    size_t cap_rules;
    gram_byteset *sets;
    int32_t n_sets;
    size_t cap_sets;
    int32_t singleton[256]; /* the set holding only byte b, or -1 */
    int64_t n_elems;
    gram_limits lim;
    sp_status err;   /* the first error; later steps stop */
    int32_t current; /* the rule being defined (names aux rules) */
    /* hash indexes (open addressing, -1 empty), so a large grammar compiles in linear time */
    int32_t *set_index, *name_index;
    int32_t set_index_cap, name_index_cap; /* powers of two, at least twice the entries */
    int32_t n_named;                       /* named rules in name_index */
} builder;

/* Line and column (1-based) of offset at. */
static void line_col(const builder *b, size_t at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && i < b->len; i++) {
        if (b->src[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)b->src[i] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

static sp_status fail_at(builder *b, size_t at, const char *what, const char *detail) {
    if (b->err != SP_OK) return b->err;
    int line, col;
    line_col(b, at, &line, &col);
    b->err = sp_fail(SP_ERR_INVALID_ARG, "grammar: line %d, column %d: %s%s", line, col, what, detail ? detail : "");
    return b->err;
}

static sp_status fail_range(builder *b, const char *what, int64_t limit) {
    if (b->err != SP_OK) return b->err;
    b->err = sp_fail(SP_ERR_RANGE, "grammar: more than %lld %s", (long long)limit, what);
    return b->err;
}

static sp_status fail_nomem(builder *b) {
    if (b->err != SP_OK) return b->err;
    b->err = sp_fail(SP_ERR_NOMEM, "grammar: out of memory");
    return b->err;
}

static void seq_push(builder *b, seq *s, gram_elem e) {
    if (b->err) return;
    if (++b->n_elems > b->lim.max_elements) {
        fail_range(b, "grammar elements", b->lim.max_elements);
        return;
    }
    if (!sp_grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) {
        fail_nomem(b);
        return;
    }
    s->e[s->n++] = e;
}

static void seq_append(builder *b, seq *dst, const gram_elem *e, int32_t n) {
    for (int32_t i = 0; i < n && !b->err; i++) seq_push(b, dst, e[i]);
}

/* A new rule (aux: made by lowering, named after the rule being defined); -1 on error. */
static int32_t rule_new(builder *b, const char *name, int32_t name_len, bool aux) {
    if (b->err) return -1;
    if (b->n_rules >= b->lim.max_rules) {
        fail_range(b, "grammar rules", b->lim.max_rules);
        return -1;
    }
    if (!sp_grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
        fail_nomem(b);
        return -1;
    }
    rule_b *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->name_len = name_len;
    r->aux = aux;
    r->defined = aux;
    return b->n_rules++;
}

static int32_t rule_aux(builder *b) {
    const rule_b *cur = b->current >= 0 ? &b->rules[b->current] : NULL;
    return rule_new(b, cur ? cur->name : "root", cur ? cur->name_len : 4, true);
}

/* A new, empty alternative of rule r; NULL on error. */
static seq *alt_new(builder *b, int32_t r) {
    if (b->err || r < 0) return NULL;
    rule_b *rule = &b->rules[r];
    if (!sp_grow((void **)&rule->alts, &rule->cap_alts, rule->n_alts + 1, sizeof *rule->alts)) {
        fail_nomem(b);
        return NULL;
    }
    seq *s = &rule->alts[rule->n_alts++];
    memset(s, 0, sizeof *s);
    return s;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static uint64_t rule_hash(const rule_b *r) {
    return hash_bytes(r->name, (size_t)r->name_len);
}

/* Puts value (an index whose key hash is h) in the table, growing it (and rehashing with
 * rehash) at half full; false when out of memory. */
static bool index_put(int32_t **table, int32_t *cap, int32_t n_after, uint64_t h, int32_t value,
                      uint64_t (*rehash)(const builder *, int32_t), const builder *b) {
    if (2 * n_after > *cap) {
        int32_t ncap = *cap ? *cap * 2 : 256;
        while (2 * n_after > ncap) ncap *= 2;
        int32_t *t = malloc(sizeof *t * (size_t)ncap);
        if (!t) return false;
        memset(t, -1, sizeof *t * (size_t)ncap);
        for (int32_t i = 0; i < *cap; i++) {
            if ((*table)[i] < 0) continue;
            uint64_t at = rehash(b, (*table)[i]) & (uint64_t)(ncap - 1);
            while (t[at] >= 0) at = (at + 1) & (uint64_t)(ncap - 1);
            t[at] = (*table)[i];
        }
        free(*table);
        *table = t;
        *cap = ncap;
    }
    uint64_t at = h & (uint64_t)(*cap - 1);
    while ((*table)[at] >= 0) at = (at + 1) & (uint64_t)(*cap - 1);
    (*table)[at] = value;
    return true;
}

static uint64_t set_rehash(const builder *b, int32_t i) {
    return hash_bytes(&b->sets[i], sizeof b->sets[i]);
}

static uint64_t name_rehash(const builder *b, int32_t i) {
    return rule_hash(&b->rules[i]);
}

static int32_t rule_find(const builder *b, const char *name, int32_t len) {
    if (!b->name_index_cap) return -1;
    uint64_t at = hash_bytes(name, (size_t)len) & (uint64_t)(b->name_index_cap - 1);
    for (; b->name_index[at] >= 0; at = (at + 1) & (uint64_t)(b->name_index_cap - 1)) {
        const rule_b *r = &b->rules[b->name_index[at]];
        if (r->name_len == len && memcmp(r->name, name, (size_t)len) == 0) return b->name_index[at];
    }
    return -1;
}

/* Indexes named rule r for rule_find (aux rules are never looked up by name). */
static void rule_index(builder *b, int32_t r) {
    if (b->err || r < 0) return;
    b->n_named++;
    if (!index_put(&b->name_index, &b->name_index_cap, b->n_named, rule_hash(&b->rules[r]), r, name_rehash, b))
        fail_nomem(b);
}

static int32_t set_add(builder *b, const gram_byteset *s) {
    uint64_t h = hash_bytes(s, sizeof *s);
    for (uint64_t at = b->set_index_cap ? h & (uint64_t)(b->set_index_cap - 1) : 0;
         b->set_index_cap && b->set_index[at] >= 0; at = (at + 1) & (uint64_t)(b->set_index_cap - 1))
        if (memcmp(&b->sets[b->set_index[at]], s, sizeof *s) == 0) return b->set_index[at];
    if (!sp_grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
        fail_nomem(b);
        return 0;
    }
    b->sets[b->n_sets] = *s;
    if (!index_put(&b->set_index, &b->set_index_cap, b->n_sets + 1, h, b->n_sets, set_rehash, b)) {
        fail_nomem(b);
        return 0;
    }
    return b->n_sets++;
}

static void set_range(gram_byteset *s, unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi; c++) s->bits[c >> 6] |= 1ull << (c & 63);
}

static gram_elem elem_byte(builder *b, uint8_t byte) {
    if (b->singleton[byte] < 0) {
        gram_byteset s = {{0}};
        set_range(&s, byte, byte);
        b->singleton[byte] = set_add(b, &s);
    }
    return (gram_elem){GRAM_BYTES, b->singleton[byte]};
}

/* ---- code points and UTF-8 ---------------------------------------------------------- */

enum { CP_MAX = 0x10FFFF };

static int utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decodes one UTF-8 character of the source at b->pos; -1 when malformed. */
static int32_t src_char(builder *b) {
    const unsigned char *s = (const unsigned char *)b->src + b->pos;
    size_t left = b->len - b->pos;
    if (left == 0) return -1;
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || (size_t)n > left) return -1;
    if (n == 1) {
        b->pos++;
        return (int32_t)c;
    }
    c &= 0x3Fu >> (n - 1);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        c = (c << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_for[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_for[n] || c > CP_MAX || (c >= 0xD800 && c <= 0xDFFF)) return -1;
    b->pos += (size_t)n;
    return (int32_t)c;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class at b->pos, escapes decoded; -1 on error. */
static int32_t parse_char(builder *b) {
    size_t at = b->pos;
    if (b->pos >= b->len) {
        fail_at(b, at, "unexpected end of grammar", NULL);
        return -1;
    }
    if (b->src[b->pos] != '\\') {
        int32_t c = src_char(b);
        if (c < 0) fail_at(b, at, "invalid UTF-8", NULL);
        return c;
    }
    b->pos++;
    if (b->pos >= b->len) {
        fail_at(b, at, "a backslash at the end of the grammar", NULL);
        return -1;
    }
    char e = b->src[b->pos++];
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = b->pos < b->len ? hex_value(b->src[b->pos]) : -1;
            if (h < 0) {
                fail_at(b, at, "a \\x, \\u or \\U escape needs hexadecimal digits", NULL);
                return -1;
            }
            v = v * 16 + (uint32_t)h;
            b->pos++;
        }
        if (v > CP_MAX || (v >= 0xD800 && v <= 0xDFFF)) {
            fail_at(b, at, "the escape is not a Unicode scalar value", NULL);
            return -1;
        }
        return (int32_t)v;
    }
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case '\\':
    case '"':
    case '\'':
    case '[':
    case ']':
    case '-':
    case '/':
    case '^': return e;
    default: break;
    }
    fail_at(b, at, "unknown escape", NULL);
    return -1;
}

/* ---- character classes ------------------------------------------------------------- */

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

typedef struct ranges {
    cp_range *r;
    int32_t n;
    size_t cap;
} ranges;

static int range_cmp(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, merged, surrogates removed; negated when asked. */
static bool ranges_normalize(ranges *rs, bool negate) {
    if (rs->n > 1) qsort(rs->r, (size_t)rs->n, sizeof *rs->r, range_cmp);
    int32_t m = 0;
    for (int32_t i = 0; i < rs->n; i++) {
        if (m > 0 && rs->r[i].lo <= rs->r[m - 1].hi + 1) {
            if (rs->r[i].hi > rs->r[m - 1].hi) rs->r[m - 1].hi = rs->r[i].hi;
        } else {
            rs->r[m++] = rs->r[i];
        }
    }
    rs->n = m;
    if (negate) {
        cp_range *out = malloc(sizeof *out * (size_t)(rs->n + 1));
        if (!out) return false;
        int32_t k = 0;
        uint32_t next = 0;
        for (int32_t i = 0; i < rs->n; i++) {
            if (rs->r[i].lo > next) out[k++] = (cp_range){next, rs->r[i].lo - 1};
            next = rs->r[i].hi + 1;
        }
        if (next <= CP_MAX) out[k++] = (cp_range){next, CP_MAX};
        free(rs->r);
        rs->r = out;
        rs->n = k;
        rs->cap = (size_t)k;
    }
    return true;
}

/* Emits the UTF-8 byte-range sequences of code points lo..hi (same encoded length)
 * as alternatives of rule r. */
static void utf8_split(builder *b, int32_t r, uint32_t lo, uint32_t hi) {
    if (b->err) return;
    if (lo <= 0xDFFF && hi >= 0xD800) { /* never encoded: cut out */
        if (lo < 0xD800) utf8_split(b, r, lo, 0xD7FF);
        if (hi > 0xDFFF) utf8_split(b, r, 0xE000, hi);
        return;
    }
    static const uint32_t ends[] = {0x7F, 0x7FF, 0xFFFF, CP_MAX};
    for (int i = 0; i < 3; i++)
        if (lo <= ends[i] && hi > ends[i]) {
            utf8_split(b, r, lo, ends[i]);
            utf8_split(b, r, ends[i] + 1, hi);
            return;
        }
    uint8_t a[4], z[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    for (int i = 1; i < n; i++) { /* make each byte position one contiguous range */
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(b, r, lo, lo | m);
                utf8_split(b, r, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(b, r, lo, (hi & ~m) - 1);
                utf8_split(b, r, hi & ~m, hi);
                return;
            }
        }
    }
    seq *alt = alt_new(b, r);
    for (int i = 0; i < n && alt; i++) {
        gram_byteset s = {{0}};
        set_range(&s, a[i], z[i]);
        seq_push(b, alt, (gram_elem){GRAM_BYTES, set_add(b, &s)});
    }
}

/* The elements of a class of code-point ranges, appended to out. */
static void emit_class(builder *b, seq *out, const ranges *rs) {
    gram_byteset ascii = {{0}};
    bool has_ascii = false, wide = false;
    for (int32_t i = 0; i < rs->n; i++) {
        if (rs->r[i].lo < 0x80) {
            set_range(&ascii, rs->r[i].lo, rs->r[i].hi < 0x80 ? rs->r[i].hi : 0x7F);
            has_ascii = true;
        }
        if (rs->r[i].hi >= 0x80) wide = true;
    }
    if (!wide && has_ascii) {
        seq_push(b, out, (gram_elem){GRAM_BYTES, set_add(b, &ascii)});
        return;
    }
    int32_t r = rule_aux(b);
    if (r < 0) return;
    if (has_ascii) {
        seq *alt = alt_new(b, r);
        if (alt) seq_push(b, alt, (gram_elem){GRAM_BYTES, set_add(b, &ascii)});
    }
    for (int32_t i = 0; i < rs->n; i++)
        if (rs->r[i].hi >= 0x80) utf8_split(b, r, rs->r[i].lo < 0x80 ? 0x80 : rs->r[i].lo, rs->r[i].hi);
    seq_push(b, out, (gram_elem){GRAM_RULE, r});
}

static void ranges_add(builder *b, ranges *rs, uint32_t lo, uint32_t hi) {
    if (!sp_grow((void **)&rs->r, &rs->cap, rs->n + 1, sizeof *rs->r)) {
        fail_nomem(b);
        return;
    }
    rs->r[rs->n++] = (cp_range){lo, hi};
}

/* [ ... ] at b->pos (on the '['). */
static void parse_class(builder *b, seq *out) {
    size_t at = b->pos++;
    bool negate = b->pos < b->len && b->src[b->pos] == '^';
    if (negate) b->pos++;
    ranges rs = {0};
    while (!b->err) {
        if (b->pos >= b->len) {
            fail_at(b, at, "a character class without its closing ]", NULL);
            break;
        }
        if (b->src[b->pos] == ']') {
            b->pos++;
            break;
        }
        size_t item = b->pos;
        int32_t lo = parse_char(b), hi = lo;
        if (lo < 0) break;
        if (b->pos + 1 < b->len && b->src[b->pos] == '-' && b->src[b->pos + 1] != ']') {
            b->pos++;
            hi = parse_char(b);
            if (hi < 0) break;
            if (hi < lo) {
                fail_at(b, item, "a character range whose end comes before its start", NULL);
                break;
            }
        }
        ranges_add(b, &rs, (uint32_t)lo, (uint32_t)hi);
    }
    if (!b->err && !ranges_normalize(&rs, negate)) fail_nomem(b);
    if (!b->err) emit_class(b, out, &rs);
    free(rs.r);
}

static void parse_literal(builder *b, seq *out) {
    size_t at = b->pos++;
    while (!b->err) {
        if (b->pos >= b->len || b->src[b->pos] == '\n') {
            fail_at(b, at, "a string literal without its closing quote", NULL);
            return;
        }
        if (b->src[b->pos] == '"') {
            b->pos++;
            return;
        }
        int32_t c = parse_char(b);
        if (c < 0) return;
        uint8_t bytes[4];
        int n = utf8_encode((uint32_t)c, bytes);
        for (int i = 0; i < n; i++) seq_push(b, out, elem_byte(b, bytes[i]));
    }
}

/* ---- rules, sequences, repetitions --------------------------------------------------- */

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok. */
static void skip_space(builder *b, bool newline_ok) {
    while (b->pos < b->len) {
        char c = b->src[b->pos];
        if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
            b->pos++;
        } else if (c == '#') {
            while (b->pos < b->len && b->src[b->pos] != '\n') b->pos++;
        } else {
            break;
        }
    }
}

static size_t parse_name(builder *b) {
    size_t start = b->pos;
    while (b->pos < b->len && is_name_char(b->src[b->pos])) b->pos++;
    return b->pos - start;
}

/* An unsigned count of a {m,n} at b->pos; -1 when there is none. */
static int64_t parse_count(builder *b) {
    size_t start = b->pos;
    int64_t v = 0;
    while (b->pos < b->len && b->src[b->pos] >= '0' && b->src[b->pos] <= '9') {
        v = v * 10 + (b->src[b->pos++] - '0');
        if (v > 1000000) v = 1000000;
    }
    return b->pos == start ? -1 : v;
}

static void parse_alternates(builder *b, int32_t r, bool nested);

/* Whether rule r is a finished loop X* (S ::= X S | (empty), as emit_repeat makes it, or a
 * group or defined rule holding only such a loop): its strings repeated are its strings. */
static bool rule_is_star(const builder *b, int32_t r, int depth) {
    if (r < 0 || r >= b->n_rules || depth > 8) return false;
    const rule_b *rule = &b->rules[r];
    if (!rule->defined || r == b->current) return false; /* not finished */
    if (rule->n_alts == 2 && rule->alts[0].n == 2 && rule->alts[0].e[1].kind == GRAM_RULE &&
        rule->alts[0].e[1].arg == r && rule->alts[1].n == 0)
        return true;
    return rule->n_alts == 1 && rule->alts[0].n == 1 && rule->alts[0].e[0].kind == GRAM_RULE &&
           rule_is_star(b, rule->alts[0].e[0].arg, depth + 1);
}

/* Repeats the last item of out (elements from item_start) min..max times (max -1:
 * unbounded). A loop repeated ((x*){m,n}, (x*)*) stays the loop: the same strings, and no
 * way to split a text among copies (each way a stack every mask would walk). */
static void emit_repeat(builder *b, seq *out, int32_t item_start, int64_t min, int64_t max) {
    if (b->err) return;
    gram_elem item;
    int32_t n_item = out->n - item_start;
    if (n_item == 0) return; /* an empty literal repeated is still empty */
    if (n_item == 1 && max != 0 && out->e[item_start].kind == GRAM_RULE && rule_is_star(b, out->e[item_start].arg, 0))
        return;
    if (n_item == 1) {
        item = out->e[item_start];
    } else { /* several elements (a literal): one rule, so each copy is one element */
        int32_t r = rule_aux(b);
        seq *alt = alt_new(b, r);
        if (!alt) return;
        seq_append(b, alt, out->e + item_start, n_item);
        item = (gram_elem){GRAM_RULE, r};
    }
    b->n_elems -= n_item;
    out->n = item_start;
    if (min + (max > min ? max - min : 0) > b->lim.max_elements) {
        fail_range(b, "grammar elements", b->lim.max_elements);
        return;
    }
    for (int64_t i = 0; i < min; i++) seq_push(b, out, item);
    if (max < 0) { /* S ::= item S | (empty) */
        int32_t s = rule_aux(b);
        seq *loop = alt_new(b, s);
        if (!loop) return;
        seq_push(b, loop, item);
        seq_push(b, loop, (gram_elem){GRAM_RULE, s});
        alt_new(b, s);
        seq_push(b, out, (gram_elem){GRAM_RULE, s});
        return;
    }
    int32_t tail = -1; /* R_k ::= item R_(k-1) | (empty) */
    for (int64_t k = 0; k < max - min && !b->err; k++) {
        int32_t r = rule_aux(b);
        seq *more = alt_new(b, r);
        if (!more) return;
        seq_push(b, more, item);
        if (tail >= 0) seq_push(b, more, (gram_elem){GRAM_RULE, tail});
        alt_new(b, r);
        tail = r;
    }
    if (tail >= 0) seq_push(b, out, (gram_elem){GRAM_RULE, tail});
}

static void parse_sequence(builder *b, seq *out, bool nested) {
    int32_t last = -1; /* where the last item's elements start */
    while (!b->err) {
        skip_space(b, nested);
        if (b->pos >= b->len) return;
        size_t at = b->pos;
        char c = b->src[b->pos];
        if (c == '"') {
            last = out->n;
            parse_literal(b, out);
        } else if (c == '[') {
            last = out->n;
            parse_class(b, out);
        } else if (c == '.') {
            b->pos++;
            last = out->n;
            ranges rs = {0};
            ranges_add(b, &rs, 0, CP_MAX);
            if (!b->err) emit_class(b, out, &rs);
            free(rs.r);
        } else if (c == '(') {
            b->pos++;
            last = out->n;
            int32_t r = rule_aux(b);
            parse_alternates(b, r, true);
            skip_space(b, true);
            if (b->err) return;
            if (b->pos >= b->len || b->src[b->pos] != ')') {
                fail_at(b, at, "a group without its closing )", NULL);
                return;
            }
            b->pos++;
            seq_push(b, out, (gram_elem){GRAM_RULE, r});
        } else if (is_name_char(c)) {
            size_t name_at = b->pos;
            size_t n = parse_name(b);
            size_t after = b->pos;
            skip_space(b, nested);
            if (b->pos + 2 < b->len && memcmp(b->src + b->pos, "::=", 3) == 0) { /* the next rule */
                b->pos = name_at;
                return;
            }
            b->pos = after;
            int32_t r = rule_find(b, b->src + name_at, (int32_t)n);
            if (r < 0) {
                r = rule_new(b, b->src + name_at, (int32_t)n, false);
                rule_index(b, r);
            }
            if (r < 0) return;
            if (!b->rules[r].defined && b->rules[r].first_ref == 0) b->rules[r].first_ref = name_at + 1;
            last = out->n;
            seq_push(b, out, (gram_elem){GRAM_RULE, r});
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) {
                fail_at(b, at, "a repetition with nothing before it to repeat", NULL);
                return;
            }
            b->pos++;
            int64_t min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
            if (c == '{') {
                skip_space(b, false);
                min = parse_count(b);
                skip_space(b, false);
                max = min;
                if (b->pos < b->len && b->src[b->pos] == ',') {
                    b->pos++;
                    skip_space(b, false);
                    max = parse_count(b); /* -1: unbounded */
                    skip_space(b, false);
                }
                if (min < 0 || b->pos >= b->len || b->src[b->pos] != '}') {
                    fail_at(b, at, "a repetition {m}, {m,} or {m,n} is malformed", NULL);
                    return;
                }
                b->pos++;
                if (max >= 0 && max < min) {
                    fail_at(b, at, "a repetition {m,n} with n less than m", NULL);
                    return;
                }
            }
            emit_repeat(b, out, last, min, max);
            last = -1;
        } else {
            return; /* '|', ')', a newline or something the caller judges */
        }
    }
}

static void parse_alternates(builder *b, int32_t r, bool nested) {
    seq *alt = alt_new(b, r);
    if (!alt) return;
    parse_sequence(b, alt, nested);
    while (!b->err) {
        skip_space(b, nested);
        if (b->pos >= b->len || b->src[b->pos] != '|') return;
        b->pos++;
        skip_space(b, true);
        /* alt_new may move the rule's alternatives: parse into a fresh one each time */
        alt = alt_new(b, r);
        if (!alt) return;
        parse_sequence(b, alt, nested);
    }
}

static void parse_rules(builder *b) {
    while (!b->err) {
        skip_space(b, true);
        if (b->pos >= b->len) return;
        size_t at = b->pos;
        size_t n = parse_name(b);
        if (n == 0) {
            fail_at(b, at, "expected a rule name", NULL);
            return;
        }
        skip_space(b, false);
        if (b->pos + 2 >= b->len || memcmp(b->src + b->pos, "::=", 3) != 0) {
            fail_at(b, b->pos, "expected ::= after the rule name", NULL);
            return;
        }
        b->pos += 3;
        int32_t r = rule_find(b, b->src + at, (int32_t)n);
        if (r >= 0 && b->rules[r].defined) {
            char name[80];
            snprintf(name, sizeof name, "%.*s", n > 60 ? 60 : (int)n, b->src + at);
            fail_at(b, at, "a rule defined twice: ", name);
            return;
        }
        if (r < 0) {
            r = rule_new(b, b->src + at, (int32_t)n, false);
            rule_index(b, r);
        }
        if (r < 0) return;
        b->rules[r].defined = true;
        b->rules[r].defined_at = at;
        b->current = r;
        skip_space(b, false);
        parse_alternates(b, r, false);
        skip_space(b, false);
        if (b->err) return;
        if (b->pos < b->len && b->src[b->pos] != '\n') {
            fail_at(b, b->pos, "unexpected character", NULL);
            return;
        }
    }
}

/* ---- checks ------------------------------------------------------------------------ */

static void compute_nullable(const builder *b, bool *nullable) {
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < b->n_rules; r++) {
            if (nullable[r]) continue;
            for (int32_t a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                const seq *s = &b->rules[r].alts[a];
                int32_t i = 0;
                while (i < s->n && s->e[i].kind == GRAM_RULE && nullable[s->e[i].arg]) i++;
                if (i == s->n) nullable[r] = changed = true;
            }
        }
    }
}

/* Depth-first search for a rule reachable from itself through leftmost positions
 * (state: 0 unseen, 1 on the path, 2 done); returns the rule closing a cycle or -1. */
static int32_t left_cycle(const builder *b, const bool *nullable, uint8_t *state, int32_t r) {
    state[r] = 1;
    for (int32_t a = 0; a < b->rules[r].n_alts; a++) {
        const seq *s = &b->rules[r].alts[a];
        for (int32_t i = 0; i < s->n && s->e[i].kind == GRAM_RULE; i++) {
            int32_t t = s->e[i].arg;
            if (state[t] == 1) return t;
            if (state[t] == 0) {
                int32_t c = left_cycle(b, nullable, state, t);
                if (c >= 0) return c;
            }
            if (!nullable[t]) break;
        }
    }
    state[r] = 2;
    return -1;
}

static void check_rules(builder *b) {
    for (int32_t r = 0; r < b->n_rules && !b->err; r++) {
        const rule_b *rule = &b->rules[r];
        if (!rule->defined) {
            char name[80];
            snprintf(name, sizeof name, "%.*s", rule->name_len > 60 ? 60 : rule->name_len, rule->name);
            fail_at(b, rule->first_ref - 1, "undefined rule ", name);
        }
    }
    if (b->err) return;
    bool *nullable = calloc((size_t)b->n_rules, sizeof *nullable);
    uint8_t *state = calloc((size_t)b->n_rules, 1);
    if (!nullable || !state) {
        fail_nomem(b);
    } else {
        compute_nullable(b, nullable);
        for (int32_t r = 0; r < b->n_rules && !b->err; r++) {
            if (state[r]) continue;
            int32_t c = left_cycle(b, nullable, state, r);
            if (c < 0) continue;
            const rule_b *rule = &b->rules[c];
            char name[80];
            snprintf(name, sizeof name, "%.*s", rule->name_len > 60 ? 60 : rule->name_len, rule->name);
            const char *what = rule->aux ? "left recursion (or a repetition of something that can be empty) in rule "
                                         : "left recursion in rule ";
            /* an aux rule's name is the rule it was made in */
            int32_t named = rule_find(b, rule->name, rule->name_len);
            fail_at(b, named >= 0 ? b->rules[named].defined_at : 0, what, name);
        }
    }
    free(nullable);
    free(state);
}

/* ---- the compiled form ------------------------------------------------------------- */

static sp_status flatten(builder *b, int32_t root, gram_grammar **out) {
    gram_grammar *g = calloc(1, sizeof *g);
    if (!g) return fail_nomem(b);
    atomic_init(&g->refs, 1);
    int64_t n_alts = 0, n_elems = 0;
    for (int32_t r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n_alts;
        for (int32_t a = 0; a < b->rules[r].n_alts; a++) n_elems += b->rules[r].alts[a].n + 1;
    }
    g->elems = malloc(sizeof *g->elems * (size_t)(n_elems ? n_elems : 1));
    g->alts = malloc(sizeof *g->alts * (size_t)(n_alts ? n_alts : 1));
    g->rule_first_alt = malloc(sizeof *g->rule_first_alt * (size_t)(b->n_rules + 1));
    g->sets = malloc(sizeof *g->sets * (size_t)(b->n_sets ? b->n_sets : 1));
    if (!g->elems || !g->alts || !g->rule_first_alt || !g->sets) {
        gram_grammar_destroy(g);
        return fail_nomem(b);
    }
    for (int32_t r = 0; r < b->n_rules; r++) {
        g->rule_first_alt[r] = g->n_alts;
        for (int32_t a = 0; a < b->rules[r].n_alts; a++) {
            const seq *s = &b->rules[r].alts[a];
            g->alts[g->n_alts++] = g->n_elems;
            if (s->n) memcpy(g->elems + g->n_elems, s->e, sizeof *s->e * (size_t)s->n);
            g->n_elems += s->n;
            g->elems[g->n_elems++] = (gram_elem){GRAM_END, 0};
        }
    }
    g->rule_first_alt[b->n_rules] = g->n_alts;
    g->n_rules = b->n_rules;
    if (b->n_sets) memcpy(g->sets, b->sets, sizeof *g->sets * (size_t)b->n_sets);
    g->n_sets = b->n_sets;
    g->root = root;
    g->limits = b->lim;
    if (g->limits.max_mask_fuel <= 0) g->limits.max_mask_fuel = GRAM_DEFAULT_MASK_FUEL;
    *out = g;
    return SP_OK;
}

sp_status gram_compile(const char *gbnf, size_t len, const gram_limits *limits, gram_grammar **out) {
    *out = NULL;
    builder b = {.src = gbnf, .len = len, .lim = limits ? *limits : gram_limits_default(), .current = -1};
    memset(b.singleton, -1, sizeof b.singleton);
    parse_rules(&b);
    int32_t root = -1;
    if (!b.err) {
        root = rule_find(&b, "root", 4);
        if (root < 0 || !b.rules[root].defined) fail_at(&b, 0, "the grammar has no rule named root", NULL);
    }
    if (!b.err) check_rules(&b);
    if (!b.err) flatten(&b, root, out);
    if (!b.err) { /* a grammar no string matches would fail only once generation starts */
        gram_state *s = NULL;
        if (gram_state_create(*out, &s) != SP_OK) {
            b.err = SP_ERR_NOMEM;
        } else if (s->st.n_tops == 0 && !s->st.accepting) {
            b.err = sp_fail(SP_ERR_INVALID_ARG, "grammar: no string matches it (root can never start)");
        }
        gram_state_destroy(s);
        if (b.err) {
            gram_grammar_destroy(*out);
            *out = NULL;
        }
    }
    for (int32_t r = 0; r < b.n_rules; r++) {
        for (int32_t a = 0; a < b.rules[r].n_alts; a++) free(b.rules[r].alts[a].e);
        free(b.rules[r].alts);
    }
    free(b.rules);
    free(b.sets);
    free(b.set_index);
    free(b.name_index);
    return b.err;
}

gram_grammar *gram_grammar_share(gram_grammar *g) {
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

void gram_grammar_destroy(gram_grammar *g) {
    if (!g) return;
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1) return;
    gram__mask_cache_destroy(g->cache);
    free(g->elems);
    free(g->alts);
    free(g->rule_first_alt);
    free(g->sets);
    free(g);
}

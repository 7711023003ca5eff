/* template_lexer.c: Jinja source -> tokens, as jinja2's lexer does with Hugging Face's
 * settings (trim_blocks, lstrip_blocks, keep_trailing_newline off).
 *
 * Whitespace rules, applied here so the parser sees final text:
 *   {%- {{- {#-   strip all whitespace before the tag
 *   -%} -}} -#}   strip all whitespace after the tag
 *   %} #}         (trim_blocks) drop one newline right after the tag
 *   {% {#         (lstrip_blocks) drop spaces and tabs between the start of the line and
 *                 the tag, when nothing else precedes it on that line; {%+ keeps them
 * Newlines (\r\n, \r, \n) become \n and one trailing newline of the source is dropped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_internal.h"

typedef struct lexer {
    tmpl_arena *arena;
    const char *src; /* normalized source */
    size_t len, pos;
    ttok *toks;
    size_t n, cap;
    /* the previous consumed piece ended a line (jinja2's line_starting) */
    bool line_starting;
    char *err;
    size_t err_cap;
    /* line/column cache: src[line_pos] starts line `line` */
    size_t line_pos, scan_pos;
    int line;
} lexer;

/* Whitespace is Python's (str.isspace, which jinja2's regexes use): ASCII and the
 * Unicode spaces such as U+00A0 and U+3000. */
static size_t skip_spaces(const char *s, size_t pos, size_t len) {
    size_t k;
    while (pos < len && (k = tmpl__py_space_len(s + pos, len - pos)) > 0) pos += k;
    return pos;
}

/* Bytes of the whitespace code point that ends at s[len - 1], 0 if none. */
static size_t space_before(const char *s, size_t len) {
    if (len == 0) return 0;
    size_t start = len - 1;
    while (start > 0 && len - start < 4 && ((unsigned char)s[start] & 0xC0) == 0x80) start--;
    size_t k = tmpl__py_space_len(s + start, len - start);
    return k == len - start ? k : 0;
}
static bool is_name_start(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}
static bool is_name_char(unsigned char c) {
    return is_name_start(c) || (c >= '0' && c <= '9');
}
static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* Line and column (1-based) of a position; positions are asked for in increasing order
 * most of the time, so the scan resumes where it stopped. */
static void line_col(lexer *lx, size_t pos, int *line, int *col) {
    if (pos < lx->scan_pos) {
        lx->scan_pos = 0;
        lx->line_pos = 0;
        lx->line = 1;
    }
    for (; lx->scan_pos < pos && lx->scan_pos < lx->len; lx->scan_pos++) {
        if (lx->src[lx->scan_pos] == '\n') {
            lx->line++;
            lx->line_pos = lx->scan_pos + 1;
        }
    }
    *line = lx->line;
    *col = (int)(pos - lx->line_pos) + 1;
}

static bool lex_error(lexer *lx, size_t pos, const char *msg) {
    int line, col;
    line_col(lx, pos, &line, &col);
    snprintf(lx->err, lx->err_cap, "line %d, column %d: %s", line, col, msg);
    return false;
}

static ttok *push(lexer *lx, ttok_kind kind, size_t pos, const char *text, size_t len) {
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        ttok *grown = tmpl__alloc(lx->arena, cap * sizeof(ttok));
        if (lx->n) memcpy(grown, lx->toks, lx->n * sizeof(ttok));
        lx->toks = grown;
        lx->cap = cap;
    }
    ttok *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    line_col(lx, pos, &t->line, &t->col);
    t->text = text;
    t->len = len;
    return t;
}

static void push_data(lexer *lx, size_t pos, const char *text, size_t len) {
    if (len == 0) return;
    push(lx, TT_DATA, pos, tmpl__strndup(lx->arena, text, len), len);
}

/* Text before a tag, after the tag's whitespace control (jinja2's OptionalLStrip). */
static size_t strip_before_tag(lexer *lx, const char *text, size_t len, char sign, bool is_var) {
    if (sign == '-') {
        size_t k;
        while ((k = space_before(text, len)) > 0) len -= k;
        return len;
    }
    if (sign == '+' || is_var) return len;
    size_t line_start = len;
    while (line_start > 0 && text[line_start - 1] != '\n') line_start--;
    if (line_start == 0 && !lx->line_starting) return len;
    return skip_spaces(text, line_start, len) == len ? line_start : len;
}

/* After a closing %} or #}: '-' eats all whitespace, '+' nothing, else one newline. */
static size_t skip_after_tag(lexer *lx, size_t pos, char sign, bool trim_newline) {
    if (sign == '-') {
        pos = skip_spaces(lx->src, pos, lx->len);
    } else if (sign != '+' && trim_newline && pos < lx->len && lx->src[pos] == '\n') {
        pos++;
    }
    return pos;
}

/* Decodes a Python string literal body (escapes as Python's unicode-escape codec). */
static char *unescape(lexer *lx, const char *s, size_t n, size_t *out_len) {
    char *out = tmpl__alloc(lx->arena, n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            out[o++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case '\n': break; /* line continuation */
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'v': out[o++] = '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
            int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            int d = 0;
            for (; d < digits && i + 1 < n; d++) {
                char h = s[i + 1];
                int v = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (v < 0) break;
                cp = cp * 16 + (uint32_t)v;
                i++;
            }
            if (d < digits || cp > 0x10FFFF) return NULL;
            if (cp < 0x80) {
                out[o++] = (char)cp;
            } else if (cp < 0x800) {
                out[o++] = (char)(0xC0 | (cp >> 6));
                out[o++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                out[o++] = (char)(0xE0 | (cp >> 12));
                out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[o++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[o++] = (char)(0xF0 | (cp >> 18));
                out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[o++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                uint32_t v = (uint32_t)(c - '0');
                for (int d = 1; d < 3 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; d++)
                    v = v * 8 + (uint32_t)(s[++i] - '0');
                if (v < 0x80) {
                    out[o++] = (char)v;
                } else {
                    out[o++] = (char)(0xC0 | (v >> 6));
                    out[o++] = (char)(0x80 | (v & 0x3F));
                }
            } else {
                out[o++] = '\\'; /* unknown escapes stay as written */
                out[o++] = c;
            }
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

static bool is_base_digit(char c, int base) {
    if (base == 16) return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    return c >= '0' && c < '0' + base;
}

/* Digits of base from p[n], with single underscores between them (jinja2's literal
 * grammar); returns the new n. */
static size_t scan_digits(const char *p, size_t n, size_t left, int base) {
    while (n < left && (is_base_digit(p[n], base) || (p[n] == '_' && n + 1 < left && is_base_digit(p[n + 1], base))))
        n++;
    return n;
}

/* A number literal at pos: 12, 1_000, 0x1F, 0o17, 0b11, 1.5, 2e-3. Returns the position
 * after it, or 0 on error. After a '.', digits are an attribute index (x.0), not a float. */
static size_t lex_number(lexer *lx, size_t pos) {
    const char *p = lx->src + pos;
    size_t left = lx->len - pos, n;
    bool after_dot = lx->n > 0 && lx->toks[lx->n - 1].kind == TT_OP && lx->toks[lx->n - 1].text[0] == '.';
    int base = 10;
    if (left > 2 && p[0] == '0' && strchr("xXoObB", p[1]) && p[1] != '\0') {
        base = p[1] == 'x' || p[1] == 'X' ? 16 : p[1] == 'o' || p[1] == 'O' ? 8 : 2;
        n = scan_digits(p, 2, left, base);
        if (n == 2) return lex_error(lx, pos, "malformed number literal"), 0;
    } else {
        n = scan_digits(p, 0, left, 10);
    }
    bool is_float = false;
    if (base == 10 && !after_dot) {
        if (n + 1 < left && p[n] == '.' && is_digit(p[n + 1])) {
            is_float = true;
            n = scan_digits(p, n + 1, left, 10);
        }
        if (n < left && (p[n] == 'e' || p[n] == 'E')) {
            size_t m = n + 1;
            if (m < left && (p[m] == '+' || p[m] == '-')) m++;
            if (m < left && is_digit(p[m])) {
                is_float = true;
                n = scan_digits(p, m, left, 10);
            }
        }
    }
    /* the literal without underscores and base prefix, NUL-terminated */
    size_t skip = base == 10 ? 0 : 2, d = 0;
    char *digits = tmpl__alloc(lx->arena, n + 1);
    for (size_t k = skip; k < n; k++)
        if (p[k] != '_') digits[d++] = p[k];
    digits[d] = '\0';
    ttok *t = push(lx, is_float ? TT_FLOAT : TT_INT, pos, NULL, 0);
    if (is_float) {
        t->f = strtod(digits, NULL);
    } else {
        errno = 0;
        unsigned long long v = strtoull(digits, NULL, base);
        if (errno == ERANGE || v > INT64_MAX) return lex_error(lx, pos, "integer literal too large"), 0;
        t->i = (int64_t)v;
    }
    return pos + n;
}

static const char *const OPERATORS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                        ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|", ";"};

/* Tokens of one {{ }} or {% %} tag, from pos (just after the opening tag and its sign)
 * up to and including its end. Returns the position after the tag, or 0 on error. */
static size_t lex_tag(lexer *lx, size_t pos, bool is_var) {
    const char *src = lx->src;
    int depth = 0;
    for (;;) {
        pos = skip_spaces(src, pos, lx->len);
        if (pos >= lx->len)
            return lex_error(lx, pos,
                             is_var ? "unexpected end of template, expected '}}'"
                                    : "unexpected end of template, expected '%}'"),
                   0;
        const char *p = src + pos;
        size_t left = lx->len - pos;
        const char *close = is_var ? "}}" : "%}";
        if (depth == 0) {
            char sign = 0;
            size_t tag_len = 0;
            if (left >= 3 && (p[0] == '-' || (p[0] == '+' && !is_var)) && memcmp(p + 1, close, 2) == 0) {
                sign = p[0];
                tag_len = 3;
            } else if (left >= 2 && memcmp(p, close, 2) == 0) {
                tag_len = 2;
            }
            if (tag_len) {
                push(lx, is_var ? TT_VAR_END : TT_BLOCK_END, pos, NULL, 0);
                size_t after = skip_after_tag(lx, pos + tag_len, sign, !is_var);
                lx->line_starting = after > 0 && src[after - 1] == '\n';
                return after;
            }
        }
        unsigned char c = (unsigned char)*p;
        if (is_name_start(c)) {
            size_t n = 1;
            while (n < left && is_name_char((unsigned char)p[n])) n++;
            push(lx, TT_NAME, pos, tmpl__strndup(lx->arena, p, n), n);
            pos += n;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t n = 1;
            while (n < left && p[n] != (char)c) n += p[n] == '\\' ? 2 : 1;
            if (n >= left) return lex_error(lx, pos, "unterminated string"), 0;
            size_t len;
            char *s = unescape(lx, p + 1, n - 1, &len);
            if (!s) return lex_error(lx, pos, "bad escape in string"), 0;
            push(lx, TT_STRING, pos, s, len);
            pos += n + 1;
            continue;
        }
        if (is_digit((char)c)) {
            pos = lex_number(lx, pos);
            if (pos == 0) return 0;
            continue;
        }
        size_t op_len = 0;
        for (size_t k = 0; k < sizeof(OPERATORS) / sizeof(OPERATORS[0]); k++) {
            size_t l = strlen(OPERATORS[k]);
            if (l <= left && memcmp(p, OPERATORS[k], l) == 0) {
                op_len = l;
                break;
            }
        }
        if (op_len == 0) {
            char msg[64];
            snprintf(msg, sizeof(msg), c >= 0x20 && c < 0x7f ? "unexpected character '%c'" : "unexpected byte 0x%02x",
                     c);
            return lex_error(lx, pos, msg), 0;
        }
        if (op_len == 1 && (c == '(' || c == '[' || c == '{')) depth++;
        if (op_len == 1 && (c == ')' || c == ']' || c == '}')) {
            if (depth == 0) {
                char msg[32];
                snprintf(msg, sizeof(msg), "unexpected '%c'", c);
                return lex_error(lx, pos, msg), 0;
            }
            depth--;
        }
        push(lx, TT_OP, pos, tmpl__strndup(lx->arena, p, op_len), op_len);
        pos += op_len;
    }
}

/* Matches "{%[-+]? raw [-]?%}" (or endraw) at pos; returns its length or 0. *sign_open
 * and *sign_close get the whitespace-control characters. */
static size_t match_raw_tag(const lexer *lx, size_t pos, const char *word, char *sign_open, char *sign_close) {
    const char *s = lx->src;
    size_t i = pos;
    if (i + 2 > lx->len || s[i] != '{' || s[i + 1] != '%') return 0;
    i += 2;
    *sign_open = 0;
    if (i < lx->len && (s[i] == '-' || s[i] == '+')) *sign_open = s[i++];
    i = skip_spaces(s, i, lx->len);
    size_t wl = strlen(word);
    if (i + wl > lx->len || memcmp(s + i, word, wl) != 0) return 0;
    i += wl;
    if (i < lx->len && is_name_char((unsigned char)s[i])) return 0;
    i = skip_spaces(s, i, lx->len);
    *sign_close = 0;
    if (i < lx->len && (s[i] == '-' || s[i] == '+')) *sign_close = s[i++];
    if (i + 2 > lx->len || s[i] != '%' || s[i + 1] != '}') return 0;
    return i + 2 - pos;
}

static bool lex_root(lexer *lx) {
    const char *src = lx->src;
    size_t pos = 0;
    while (pos < lx->len) {
        /* the earliest tag start */
        size_t tag = pos;
        while (tag + 1 < lx->len &&
               !(src[tag] == '{' && (src[tag + 1] == '{' || src[tag + 1] == '%' || src[tag + 1] == '#')))
            tag++;
        if (tag + 1 >= lx->len) {
            push_data(lx, pos, src + pos, lx->len - pos);
            return true;
        }
        char kind = src[tag + 1];
        char sign = tag + 2 < lx->len && (src[tag + 2] == '-' || src[tag + 2] == '+') ? src[tag + 2] : 0;
        size_t text_len = strip_before_tag(lx, src + pos, tag - pos, sign, kind == '{');
        push_data(lx, pos, src + pos, text_len);
        size_t body = tag + 2 + (sign ? 1 : 0);

        char s_open, s_close;
        size_t raw_len = kind == '%' ? match_raw_tag(lx, tag, "raw", &s_open, &s_close) : 0;
        if (raw_len) {
            size_t start = tag + raw_len;
            if (s_close == '-') start = skip_spaces(src, start, lx->len);
            size_t end = start, end_len = 0;
            for (; end + 1 < lx->len; end++)
                if ((end_len = match_raw_tag(lx, end, "endraw", &s_open, &s_close)) != 0) break;
            if (end_len == 0) return lex_error(lx, tag, "missing end of raw directive");
            lx->line_starting = false;
            push_data(lx, start, src + start, strip_before_tag(lx, src + start, end - start, s_open, false));
            pos = skip_after_tag(lx, end + end_len, s_close, true);
            lx->line_starting = pos > 0 && src[pos - 1] == '\n';
            continue;
        }
        if (kind == '#') {
            size_t end = body;
            while (end + 1 < lx->len && !(src[end] == '#' && src[end + 1] == '}')) end++;
            if (end + 1 >= lx->len) return lex_error(lx, tag, "missing end of comment tag");
            char close_sign = end > body && (src[end - 1] == '-' || src[end - 1] == '+') ? src[end - 1] : 0;
            pos = skip_after_tag(lx, end + 2, close_sign, true);
            lx->line_starting = pos > 0 && src[pos - 1] == '\n';
            continue;
        }
        bool is_var = kind == '{';
        push(lx, is_var ? TT_VAR_BEGIN : TT_BLOCK_BEGIN, tag, NULL, 0);
        pos = lex_tag(lx, body, is_var);
        if (pos == 0) return false;
    }
    return true;
}

ttok *tmpl__lex(tmpl_arena *a, const char *source, size_t len, char *err, size_t err_cap) {
    /* normalize newlines, then drop one trailing newline */
    char *src = tmpl__alloc(a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n') i++;
        } else {
            src[n++] = source[i];
        }
    }
    if (n > 0 && src[n - 1] == '\n') n--;
    src[n] = '\0';

    lexer lx = {.arena = a, .src = src, .len = n, .line_starting = true, .err = err, .err_cap = err_cap, .line = 1};
    if (!lex_root(&lx)) return NULL;
    push(&lx, TT_EOF, n, NULL, 0);
    return lx.toks;
}

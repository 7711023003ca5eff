/* test_regex.c: regular expressions and choice lists as GBNF (grammar/gram_regex.c).
 *
 * Each pattern's grammar is compiled with gram_compile and run with gram_state_* on
 * strings it must accept whole and strings it must reject. Where PCRE2 reads the pattern
 * the same way (UTF mode, anchored at both ends, $ only at the very end, \uHHHH and \xHH
 * as in ECMAScript), the grammar and PCRE2 must also agree on random strings over the
 * pattern's characters and on strings grown from the grammar itself, one accepted
 * character at a time. Errors are checked for their status and "position N:".
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/status.h"
#include "grammar/grammar.h"

enum { MAX_LIST = 12, N_RANDOM = 400, N_WALKS = 60, WALK_LEN = 14, MAX_STR = 64 };

/* ---- helpers ------------------------------------------------------------------- */

static uint64_t test_rng = 1;

static uint32_t test_next(uint32_t bound) {
    test_rng ^= test_rng >> 12;
    test_rng ^= test_rng << 25;
    test_rng ^= test_rng >> 27;
    return (uint32_t)((test_rng * 0x2545F4914F6CDD1Dull) >> 33) % bound;
}

static gram_grammar *regex_grammar(const char *pattern) {
    char *gbnf;
    sp_status st = gram_regex_to_gbnf(pattern, strlen(pattern), &gbnf);
    cr_assert_eq(st, SP_OK, "/%s/: %s", pattern, sp_last_error());
    gram_grammar *g;
    st = gram_compile(gbnf, strlen(gbnf), NULL, &g);
    cr_assert_eq(st, SP_OK, "/%s/ -> %s: %s", pattern, gbnf, sp_last_error());
    free(gbnf);
    return g;
}

static bool grammar_accepts(const gram_grammar *g, const char *s, size_t n) {
    gram_state *st;
    cr_assert_eq(gram_state_create(g, &st), SP_OK);
    bool ok = gram_state_advance(st, (const uint8_t *)s, n) && gram_state_accepting(st);
    gram_state_destroy(st);
    return ok;
}

/* PCRE2 reading the pattern as a whole-string match, as gram_regex.c does; NULL when
 * PCRE2 refuses it. */
static pcre2_code *pcre_full(const char *pattern) {
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    pcre2_set_compile_extra_options(cc, PCRE2_EXTRA_ALT_BSUX);
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile(
        (PCRE2_SPTR)pattern, strlen(pattern),
        PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX, &err, &off, cc);
    pcre2_compile_context_free(cc);
    return re;
}

/* 1: PCRE2 matches s whole, 0: it does not, -1: no answer (its backtracking limit). */
static int pcre_accepts(pcre2_code *re, const char *s, size_t n) {
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_set_match_limit(mc, 100000);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, mc);
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    cr_assert(rc >= 0 || rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_MATCHLIMIT, "pcre2_match: %d", rc);
    return rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

static size_t utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F)), out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The characters random strings are made of: the pattern's own (as UTF-8 text) and a few
 * of every kind (letters, digits, blanks, punctuation, 2-, 3- and 4-byte characters). */
static int alphabet_of(const char *pattern, uint32_t *alpha, int cap) {
    static const uint32_t extra[] = {'a',  'b',   'c',   'A',    'Z',    '0',     '1',    '9', '_',
                                     ' ',  '\n',  '\t',  '\r',   '\v',   '-',     '.',    '@', '"',
                                     0xE9, 0x3B1, 0x3C9, 0x20AC, 0x65E5, 0x1F600, 0x1F602};
    int n = 0;
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) alpha[n++] = extra[i];
    const uint8_t *s = (const uint8_t *)pattern;
    while (*s && n < cap) {
        uint32_t cp = *s++;
        if (cp >= 0xC0) {
            int more = cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : 1;
            cp &= 0x3Fu >> more;
            for (int k = 0; k < more && (*s & 0xC0) == 0x80; k++) cp = cp << 6 | (*s++ & 0x3Fu);
        }
        alpha[n++] = cp;
    }
    return n;
}

/* The grammar and PCRE2 agree on random strings and on strings grown from the grammar. */
static void cross_check(const char *pattern, const gram_grammar *g, pcre2_code *re) {
    uint32_t alpha[256];
    int n_alpha = alphabet_of(pattern, alpha, 256);
    char s[MAX_STR * 4];
    for (int t = 0; t < N_RANDOM; t++) {
        size_t len = 0;
        int n_chars = (int)test_next(t < N_RANDOM / 2 ? 5 : 12);
        for (int k = 0; k < n_chars; k++) len += utf8_put(s + len, alpha[test_next((uint32_t)n_alpha)]);
        int want = pcre_accepts(re, s, len);
        if (want < 0) continue;
        cr_assert_eq(grammar_accepts(g, s, len), want, "/%s/ on \"%.*s\": grammar %d, PCRE2 %d", pattern, (int)len, s,
                     !want, want);
    }
    for (int w = 0; w < N_WALKS; w++) {
        gram_state *st;
        cr_assert_eq(gram_state_create(g, &st), SP_OK);
        size_t len = 0;
        for (int k = 0; k < WALK_LEN; k++) {
            bool grown = false;
            for (int tries = 0; tries < 3 * n_alpha && !grown; tries++) {
                char u[4];
                size_t n = utf8_put(u, alpha[test_next((uint32_t)n_alpha)]);
                if (gram_state_advance(st, (const uint8_t *)u, n)) memcpy(s + len, u, n), len += n, grown = true;
            }
            if (!grown) break;
            int want = pcre_accepts(re, s, len);
            cr_assert(want < 0 || gram_state_accepting(st) == want, "/%s/ on \"%.*s\": grammar %d", pattern, (int)len,
                      s, gram_state_accepting(st));
        }
        gram_state_destroy(st);
    }
}

typedef struct regex_case {
    const char *pattern;
    const char *yes[MAX_LIST]; /* accepted whole */
    const char *no[MAX_LIST];  /* rejected */
} regex_case;

/* with_pcre false: PCRE2 reads the pattern differently (ECMAScript-only syntax). */
static void check_case(const regex_case *c, bool with_pcre) {
    gram_grammar *g = regex_grammar(c->pattern);
    pcre2_code *re = with_pcre ? pcre_full(c->pattern) : NULL;
    cr_assert(!with_pcre || re, "PCRE2 refuses /%s/", c->pattern);
    for (int i = 0; i < MAX_LIST && c->yes[i]; i++) {
        cr_assert(grammar_accepts(g, c->yes[i], strlen(c->yes[i])), "/%s/ rejects \"%s\"", c->pattern, c->yes[i]);
        cr_assert(!re || pcre_accepts(re, c->yes[i], strlen(c->yes[i])) != 0, "PCRE2 /%s/ rejects \"%s\"", c->pattern,
                  c->yes[i]);
    }
    for (int i = 0; i < MAX_LIST && c->no[i]; i++) {
        cr_assert(!grammar_accepts(g, c->no[i], strlen(c->no[i])), "/%s/ accepts \"%s\"", c->pattern, c->no[i]);
        cr_assert(!re || pcre_accepts(re, c->no[i], strlen(c->no[i])) != 1, "PCRE2 /%s/ accepts \"%s\"", c->pattern,
                  c->no[i]);
    }
    if (re) cross_check(c->pattern, g, re);
    pcre2_code_free(re);
    gram_grammar_destroy(g);
}

static void check_cases(const regex_case *cases, size_t n, bool with_pcre) {
    test_rng = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) check_case(&cases[i], with_pcre);
}

#define CHECK_CASES(cases) check_cases(cases, sizeof cases / sizeof *cases, true)

/* ---- the language of each feature --------------------------------------------- */

Test(gram_regex, literals_and_alternation) {
    static const regex_case cases[] = {
        {"", {""}, {"a", " "}},
        {"abc", {"abc"}, {"", "ab", "abcd", "abd", "ABC"}},
        {"a|b|cd", {"a", "b", "cd"}, {"", "c", "ab", "acd"}},
        {"a|ab|abc", {"a", "ab", "abc"}, {"abcd", "b"}},
        {"héllo wörld", {"héllo wörld"}, {"hello world", "héllo"}},
        {"日本語|中文", {"日本語", "中文"}, {"日本", "中文語"}},
        {"😀+", {"😀", "😀😀😀"}, {"", "😁"}},
        {"a|", {"a", ""}, {"aa"}},
        {"|", {""}, {"a"}},
        {"a{b]}c", {"a{b]}c"}, {"a", "a{}b]c"}},
        {"x{a}|y{1,|z{}", {"x{a}", "y{1,", "z{}"}, {"x", "y"}},
        {"\"quoted\"\\\\", {"\"quoted\"\\"}, {"quoted"}},
    };
    CHECK_CASES(cases);
}

Test(gram_regex, quantifiers) {
    static const regex_case cases[] = {
        {"a*", {"", "a", "aaaa"}, {"b", "ab"}},
        {"a+", {"a", "aaa"}, {"", "b"}},
        {"ab?c", {"ac", "abc"}, {"abbc", "a"}},
        {"a{3}", {"aaa"}, {"aa", "aaaa"}},
        {"a{2,}", {"aa", "aaaaaaa"}, {"a", ""}},
        {"a{2,4}", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"}},
        {"a{0}b", {"b"}, {"ab"}},
        {"a{0,0}", {""}, {"a"}},
        {"(ab){2}c*", {"abab", "ababcc"}, {"ab", "abababc"}},
        {"a*?b+?c??d{1,2}?", {"bd", "aabbcdd"}, {"abc", "ad"}},
        {"(a|b){1,3}", {"a", "ba", "abb"}, {"", "abab"}},
        {"x{0,3}y{1}", {"y", "xxxy"}, {"xxxxy", "x"}},
    };
    CHECK_CASES(cases);
}

Test(gram_regex, nullable_repetitions) {
    static const regex_case cases[] = {
        {"(a*)*", {"", "aaa"}, {"b"}},
        {"(a|)+", {"", "aa"}, {"b"}},
        {"(a?b?)*c", {"c", "abbac"}, {"", "ab"}},
        {"()*x", {"x"}, {""}},
        {"(|a)*b", {"b", "aab"}, {"a"}},
        {"(a*b*)+", {"", "abba"}, {"c"}},
        {"(a{0,2}){2,}", {"", "aaaaa"}, {"b"}},
        {"(a?){3}", {"", "a", "aaa"}, {"aaaa"}},
        {"((a|b)?(c|)){2,}d", {"d", "acbd", "cccd"}, {"ab"}},
        {"(?:|a)a((|)){286}?", {"a", "aa"}, {"aaa", ""}},
        {"(a?b?|c?){2,5}", {"", "abab", "cccca", "bcb"}, {"cccccc", "ba?"}},
        {"(|)(|)(|)x(a*|b*)c", {"xc", "xaac", "xbc"}, {"xabc", "c"}},
        {"((a|)(b|)){4}", {"", "abab", "bbba"}, {"aaaaa"}},
    };
    CHECK_CASES(cases);
}

/* Repetitions of loops print as one loop (rx_loops): the rewritten grammar accepts exactly
 * what PCRE2 does, on the listed strings and on random and grown ones. */
Test(gram_regex, repeated_loops_rewritten_exactly) {
    static const regex_case cases[] = {
        {"(.*){10}x", {"x", "abcx", "xaxbx"}, {"", "ab", "a\nx"}},
        {"(.*){1000}x", {"x", "aax"}, {"", "\nx"}},
        {"(a|.*){50}b", {"b", "aab", "xyzb"}, {"", "a", "\nb"}},
        {"((.*){10}){10}x", {"x", "a.x"}, {"y"}},
        {"(.*.*){20}x", {"x", "abx"}, {"xa"}},
        {"(.+){10}x", {"aaaaaaaaaax", "0123456789ax"}, {"aaaaaaaaax", "x"}},
        {"(.+){0,100}x", {"x", "ax"}, {"a"}},
        {"(.+){2,3}", {"ab", "abcdef"}, {"a", ""}},
        {"(.+.+){3}", {"abcdef", "abcdefg"}, {"abcde"}},
        {"(.+.*){2}", {"ab", "abc"}, {"a"}},
        {"(a|.+)", {"a", "bc"}, {""}},
        {"(a?|.+){2}", {"", "a", "bcd"}, {"\n"}},
        {"(ab|.+){3}", {"abc", "ababab"}, {"ab"}},
        {"(a+.*){3}", {"aaa", "abaa"}, {"bab", "aab", "abab"}},
        {"([a-z]*){30}$", {"", "abc"}, {"A"}},
        {"(a*b*){20}c", {"c", "abababc"}, {"ab"}},
        {"(x*|y*){30}z", {"z", "xyxyz"}, {"xy"}},
        {"(.{0,10}){10}x", {"x", "0123456789012345678x"}, {"y"}},
        {"(.{1,5}){1,50}x", {"ax", "abcdefx"}, {"x"}},
        {"(.{2,3}){2,4}", {"abcd", "abcdefghijkl"}, {"abc", "abcdefghijklm"}},
        {"(a{0,5}){0,5}b", {"b", "aaaaab"}, {"ab2"}},
        {"(a{2,}){0,3}", {"", "aa", "aaaaa"}, {"a"}},
        {"((a+)+)+b", {"ab", "aaab"}, {"b"}},
        {"((a|b)*){25}c", {"c", "ababc"}, {"abd"}},
        {"([\\s\\S]*){20}x", {"x", "a\nx"}, {"a"}},
        {"(\\w*\\W*){100}$", {"", "ab cd!"}, {}},
        {"(.*a){3}", {"aaa", "xaxaxa"}, {"aa", "aaab"}},
        {"((.*){2}|(.+){3}){8}x", {"x", "abx"}, {"a"}},
        {"(a|b|ab|ba){0,100}c", {"c", "abbac"}, {"abd"}},
    };
    CHECK_CASES(cases);
}

/* Optional parts in a row print with one way to match nothing each, so the matcher does
 * not expand 2^k paths. */
Test(gram_regex, many_optional_parts_stay_linear, .timeout = 20) {
    char pattern[2048];
    size_t n = 0;
    for (int i = 0; i < 100; i++) n += (size_t)snprintf(pattern + n, sizeof pattern - n, "(a?|b?)");
    for (int i = 0; i < 100; i++) n += (size_t)snprintf(pattern + n, sizeof pattern - n, "(|)");
    n += (size_t)snprintf(pattern + n, sizeof pattern - n, "((x?)?|y?){300}");
    gram_grammar *g = regex_grammar(pattern);
    cr_assert(grammar_accepts(g, "abba", 4));
    cr_assert(grammar_accepts(g, "aaxyx", 5));
    cr_assert(grammar_accepts(g, "", 0));
    cr_assert(!grammar_accepts(g, "xa", 2));
    gram_grammar_destroy(g);
}

Test(gram_regex, classes_and_escapes) {
    static const regex_case cases[] = {
        {".", {"x", "é", "😀", " ", "\r"}, {"\n", "", "xy"}},
        {"\\d+", {"0", "2024"}, {"", "a", "٣", "１"}},
        {"\\D\\W\\S", {"a!x", "é é"}, {"1!x", "a!\t", "ab!"}},
        {"\\w+", {"a_Z9"}, {"é", "a-b"}},
        {"\\s*x\\s*", {"x", " \t\n\r\f\vx  "}, {"\u00a0x"}},
        {"[a-z0-9_]+", {"abc_09"}, {"ABC", "a-b"}},
        {"[^a-z]", {"A", "é", "\n"}, {"a", "q"}},
        {"[^\\n]*", {"", "abc é"}, {"a\nb"}},
        {"[\\]\\-\\\\^]+", {"]-\\^"}, {"a"}},
        {"[-a][a-]", {"-a", "a-", "--"}, {"b-"}},
        {"[.*+?(){}|$]+", {".*+?(){}|$"}, {"a"}},
        {"[\\d\\s]+", {"1 2\t3"}, {"a"}},
        {"[^\\d\\s]", {"a", "é"}, {"1", " "}},
        {"[\\D]", {"a"}, {"5"}},
        {"[α-ω]+", {"αβγω"}, {"Α", "a"}},
        {"[^α-ω]", {"a", "Ω"}, {"α"}},
        {"[😀-😂]", {"😀", "😁", "😂"}, {"😃"}},
        {"[\\x41-\\x43\\u00e0-\\u00ff]+", {"ABCàÿ"}, {"D", "ā"}},
        {"\\.\\\\\\/\\-\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$", {".\\/-*+?()[]{}|^$"}, {"a"}},
        {"\\n\\t\\r\\f\\x41\\u00e9\\cA", {"\n\t\r\fAé\x01"}, {"a"}},
        {"[\\b\\n\\t\\x00]", {"\b", "\n", "\t"}, {"b"}},
        {"\\é\\ \\#", {"é #"}, {"e #"}},
    };
    CHECK_CASES(cases);
}

Test(gram_regex, groups_and_anchors) {
    static const regex_case cases[] = {
        {"(a|b)*c", {"c", "abbac"}, {"ab", "cc"}},
        {"(?:ab|cd)+", {"ab", "cdab"}, {"", "abc"}},
        {"(?<year>\\d{4})-(?P<month>\\d\\d)", {"2024-05"}, {"24-05"}},
        {"((a|b)(c|d)){2,3}", {"acbd", "adbcac"}, {"ac", "acbdacbd"}},
        {"(a(b(c)?)*)+", {"a", "abcbab", "aab"}, {"", "b", "ac"}},
        {"a(bc)d", {"abcd"}, {"ad"}},
        {"^abc$", {"abc"}, {"ab"}},
        {"^a|b$", {"a", "b"}, {"ab"}},
        {"^$", {""}, {"a"}},
        {"^(x|y)+$", {"xyx"}, {"", "xz"}},
    };
    CHECK_CASES(cases);
}

Test(gram_regex, realistic_patterns) {
    static const regex_case cases[] = {
        {"\\d{4}-\\d{2}-\\d{2}", {"2024-01-31"}, {"2024-1-31", "2024-01-311", "２０２４-01-31"}},
        {"\\+?1?[ -]?\\(?\\d{3}\\)?[ -]?\\d{3}-\\d{4}",
         {"555-123-4567", "+1 (555) 123-4567", "(555)123-4567"},
         {"555-1234", "+1 555 1234567"}},
        {"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}",
         {"john.doe+x@mail.example.com", "a@b.io"},
         {"a@b", "@b.io", "a b@c.de"}},
        {"(red|green|blue)( (red|green|blue))*", {"red", "blue green red"}, {"red ", "yellow", "redgreen"}},
        {"([01]\\d|2[0-3]):[0-5]\\d", {"00:00", "23:59", "19:05"}, {"24:00", "12:60", "7:30"}},
        {"((25[0-5]|2[0-4]\\d|1?\\d?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1?\\d?\\d)",
         {"192.168.0.1", "255.255.255.255", "0.0.0.0"},
         {"256.1.1.1", "1.2.3", "01.2.3.4.5"}},
        {"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
         {"123e4567-e89b-12d3-a456-426614174000"},
         {"123e4567-e89b-62d3-a456-426614174000"}},
        {"\\d+\\.\\d+\\.\\d+(-[0-9A-Za-z.-]+)?", {"1.2.3", "10.0.1-rc.1"}, {"1.2", "1.2.3-"}},
        {"(Mr|Mrs|Ms|Dr)\\. [A-Z][a-z]+", {"Dr. Who", "Mrs. Smith"}, {"Dr Who", "Mr. smith"}},
        {"\\$\\d{1,3}(,\\d{3})*(\\.\\d{2})?", {"$1", "$1,000,000.99"}, {"$1,00", "1,000"}},
        {"[αβγ]{2}(Ω|ω)*", {"αβ", "γγΩωΩ"}, {"α", "αβo"}},
    };
    CHECK_CASES(cases);
}

/* ECMAScript readings PCRE2 does not share (it errs on [\w-.], and its \v is a class). */
Test(gram_regex, ecmascript_only_syntax) {
    static const regex_case cases[] = {
        {"[\\w-.]+@x", {"a-b.c@x"}, {"a b@x"}},
        {"[a-\\d]+", {"a-5"}, {"b"}},
        {"\\v", {"\v"}, {"\n", "\f"}},
        {"\\u{1F600}\\uD83D\\uDE01", {"😀😁"}, {"😀"}},
        {"[\\u{1F600}-\\u{1F602}]", {"😁"}, {"😃"}},
    };
    check_cases(cases, sizeof cases / sizeof *cases, false);
}

/* ---- the text produced --------------------------------------------------------- */

static void check_expr(const char *pattern, const char *want) {
    char *expr;
    cr_assert_eq(gram_regex_to_gbnf_expr(pattern, strlen(pattern), &expr), SP_OK, "/%s/: %s", pattern, sp_last_error());
    cr_assert_str_eq(expr, want, "/%s/", pattern);
    free(expr);
}

Test(gram_regex, prints_compact_expressions) {
    check_expr("abc", "\"abc\"");
    check_expr("", "\"\"");
    check_expr("a|b", "(\"a\" | \"b\")");
    check_expr(".", "[^\\n]");
    check_expr("\\d{4}", "[0-9]{4}");
    check_expr("\\D", "[^0-9]");
    check_expr("[^a-z]", "[^a-z]");
    check_expr("a(bc)d", "\"abcd\"");
    check_expr("ab*", "\"a\" \"b\"*");
    check_expr("(a*)*", "\"a\"*");
    check_expr("(a?b?)+", "[ab]*");
    /* repeated loops print as one loop (rx_loops): no split of the text among copies */
    check_expr("(.*){10}x", "[^\\n]* \"x\"");
    check_expr("(a|.*){50}b", "[^\\n]* \"b\"");
    check_expr("(.+){10}", "[^\\n]{10,}");
    check_expr("(.{0,10}){10}", "[^\\n]{0,100}");
    check_expr("a{0}", "\"\"");
    check_expr("x{2,}y{1,3}", "\"x\"{2,} \"y\"{1,3}");
    check_expr("\"\\\\\\n", "\"\\\"\\\\\\n\"");
    check_expr("[α-ω]", "[α-ω]");
}

Test(gram_regex, expression_embeds_in_a_rule) {
    char *expr;
    cr_assert_eq(gram_regex_to_gbnf_expr("a|bc", 4, &expr), SP_OK);
    char gbnf[256];
    snprintf(gbnf, sizeof gbnf, "root ::= \"<\" %s \">\"\n", expr);
    free(expr);
    gram_grammar *g;
    cr_assert_eq(gram_compile(gbnf, strlen(gbnf), NULL, &g), SP_OK, "%s: %s", gbnf, sp_last_error());
    cr_assert(grammar_accepts(g, "<a>", 3));
    cr_assert(grammar_accepts(g, "<bc>", 4));
    cr_assert(!grammar_accepts(g, "<a", 2));
    cr_assert(!grammar_accepts(g, "bc>", 3));
    gram_grammar_destroy(g);
}

Test(gram_regex, pattern_with_nul_byte) {
    gram_grammar *g;
    char *gbnf;
    cr_assert_eq(gram_regex_to_gbnf("a\0b", 3, &gbnf), SP_OK);
    cr_assert_eq(gram_compile(gbnf, strlen(gbnf), NULL, &g), SP_OK, "%s", sp_last_error());
    cr_assert(grammar_accepts(g, "a\0b", 3));
    cr_assert(!grammar_accepts(g, "ab", 2));
    free(gbnf);
    gram_grammar_destroy(g);
    g = regex_grammar("a\\0b");
    cr_assert(grammar_accepts(g, "a\0b", 3));
    cr_assert(!grammar_accepts(g, "a0b", 3));
    gram_grammar_destroy(g);
}

/* ---- errors -------------------------------------------------------------------- */

typedef struct error_case {
    const char *pattern;
    sp_status status;
    const char *prefix; /* the message's start */
} error_case;

Test(gram_regex, rejects_malformed_and_unsupported) {
    static const error_case cases[] = {
        {"(a", SP_ERR_INVALID_ARG, "position 0: unclosed ("},
        {"a)", SP_ERR_INVALID_ARG, "position 1: unmatched )"},
        {"(a))", SP_ERR_INVALID_ARG, "position 3:"},
        {"[z-a]", SP_ERR_INVALID_ARG, "position 1: range out of order"},
        {"a{3,2}", SP_ERR_INVALID_ARG, "position 1:"},
        {"*a", SP_ERR_INVALID_ARG, "position 0: nothing to repeat"},
        {"a**", SP_ERR_INVALID_ARG, "position 2: nothing to repeat"},
        {"a|+", SP_ERR_INVALID_ARG, "position 2: nothing to repeat"},
        {"(?:*)", SP_ERR_INVALID_ARG, "position 3: nothing to repeat"},
        {"{2}", SP_ERR_INVALID_ARG, "position 0: nothing to repeat"},
        {"a{2}{3}", SP_ERR_INVALID_ARG, "position 4: nothing to repeat"},
        {"abc\\", SP_ERR_INVALID_ARG, "position 3: trailing backslash"},
        {"\\xZZ", SP_ERR_INVALID_ARG, "position 0: bad \\x escape"},
        {"ab\\x4", SP_ERR_INVALID_ARG, "position 2: bad \\x escape"},
        {"\\u12", SP_ERR_INVALID_ARG, "position 0: bad \\u escape"},
        {"x\\uD800", SP_ERR_INVALID_ARG, "position 1: a lone surrogate"},
        {"\\u{110000}", SP_ERR_INVALID_ARG, "position 0:"},
        {"\\c1", SP_ERR_INVALID_ARG, "position 0: bad \\c escape"},
        {"a\xff", SP_ERR_INVALID_ARG, "position 1: invalid UTF-8"},
        {"ab\xc3", SP_ERR_INVALID_ARG, "position 2: invalid UTF-8"},
        {"[\xe2\x82]", SP_ERR_INVALID_ARG, "position 1: invalid UTF-8"},
        {"\xc0\xaf", SP_ERR_INVALID_ARG, "position 0: invalid UTF-8"},
        {"\xed\xa0\x80", SP_ERR_INVALID_ARG, "position 0: invalid UTF-8"},
        {"[abc", SP_ERR_INVALID_ARG, "position 0: unclosed ["},
        {"(?<1a>x)", SP_ERR_INVALID_ARG, "position 0: bad group name"},
        {"a{10001}", SP_ERR_RANGE, "position 1: repetition count over 10000"},
        {"a{2,20000}", SP_ERR_RANGE, "position 1:"},
        {"a{99999999999}", SP_ERR_RANGE, "position 1:"},
        {"(a)\\1", SP_ERR_UNSUPPORTED, "position 3: a backreference"},
        {"(?<n>a)\\k<n>", SP_ERR_UNSUPPORTED, "position 7: a backreference"},
        {"(?=a)", SP_ERR_UNSUPPORTED, "position 0: lookahead"},
        {"a(?!b)", SP_ERR_UNSUPPORTED, "position 1: lookahead"},
        {"(?<=a)b", SP_ERR_UNSUPPORTED, "position 0: lookbehind"},
        {"(?<!a)b", SP_ERR_UNSUPPORTED, "position 0: lookbehind"},
        {"\\bword", SP_ERR_UNSUPPORTED, "position 0: a word boundary"},
        {"a\\B", SP_ERR_UNSUPPORTED, "position 1: a word boundary"},
        {"a^b", SP_ERR_UNSUPPORTED, "position 1: ^ is only supported"},
        {"a$b", SP_ERR_UNSUPPORTED, "position 1: $ is only supported"},
        {"(^a)", SP_ERR_UNSUPPORTED, "position 1:"},
        {"(a$)", SP_ERR_UNSUPPORTED, "position 2:"},
        {"^^a", SP_ERR_UNSUPPORTED, "position 1:"},
        {"a*+", SP_ERR_UNSUPPORTED, "position 1: a possessive quantifier"},
        {"a{2}+", SP_ERR_UNSUPPORTED, "position 1: a possessive quantifier"},
        {"(?i)a", SP_ERR_UNSUPPORTED, "position 0: inline flags"},
        {"(?#c)a", SP_ERR_UNSUPPORTED, "position 0:"},
        {"(?P=n)", SP_ERR_UNSUPPORTED, "position 0:"},
        {"\\p{L}", SP_ERR_UNSUPPORTED, "position 0: a Unicode property"},
        {"x[[:alpha:]]", SP_ERR_UNSUPPORTED, "position 2: a POSIX class"},
        {"\\q", SP_ERR_UNSUPPORTED, "position 0: the escape \\q"},
        {"\\A", SP_ERR_UNSUPPORTED, "position 0:"},
        {"a\\z", SP_ERR_UNSUPPORTED, "position 1:"},
        {"\\01", SP_ERR_UNSUPPORTED, "position 0: an octal escape"},
        {"a{,3}", SP_ERR_UNSUPPORTED, "position 1: {,n}"},
        {"[]a]", SP_ERR_UNSUPPORTED, "position 0:"},
        {"[^]", SP_ERR_UNSUPPORTED, "position 0:"},
        {"a[^\\s\\S]", SP_ERR_UNSUPPORTED, "position 1: a class that matches nothing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const error_case *c = &cases[i];
        char *expr = (char *)"untouched";
        sp_status st = gram_regex_to_gbnf_expr(c->pattern, strlen(c->pattern), &expr);
        cr_assert_eq(st, c->status, "/%s/: status %d (%s), want %d", c->pattern, st, sp_last_error(), c->status);
        cr_assert_null(expr, "/%s/", c->pattern);
        cr_assert(strncmp(sp_last_error(), c->prefix, strlen(c->prefix)) == 0, "/%s/: \"%s\", want \"%s...\"",
                  c->pattern, sp_last_error(), c->prefix);
    }
}

Test(gram_regex, bounds_group_nesting) {
    char deep[2 * 300 + 2];
    size_t n = 0;
    for (int i = 0; i < 300; i++) deep[n++] = '(';
    deep[n++] = 'a';
    for (int i = 0; i < 300; i++) deep[n++] = ')';
    char *expr;
    cr_assert_eq(gram_regex_to_gbnf_expr(deep, n, &expr), SP_ERR_RANGE);
    cr_assert(strstr(sp_last_error(), "nested deeper") != NULL, "%s", sp_last_error());
    gram_grammar *g = regex_grammar("((((((((((a))))))))))");
    cr_assert(grammar_accepts(g, "a", 1));
    gram_grammar_destroy(g);
}

/* ---- choices ------------------------------------------------------------------- */

Test(gram_regex, choices_match_exactly) {
    static const char *const choices[] = {"yes",   "no",          "a\"b", "back\\slash", "new\nline", "tab\there",
                                          "ünï 😀", "ctl\x01\x7f", "",     "yes"};
    size_t n = sizeof choices / sizeof *choices;
    char *gbnf;
    cr_assert_eq(gram_choice_to_gbnf(choices, n, &gbnf), SP_OK, "%s", sp_last_error());
    gram_grammar *g;
    cr_assert_eq(gram_compile(gbnf, strlen(gbnf), NULL, &g), SP_OK, "%s: %s", gbnf, sp_last_error());
    for (size_t i = 0; i < n; i++) cr_assert(grammar_accepts(g, choices[i], strlen(choices[i])), "%s", choices[i]);
    static const char *const others[] = {"ye", "yesno", "a\\\"b", "back\\\\slash", "new\\nline", "ünï", "x"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        cr_assert(!grammar_accepts(g, others[i], strlen(others[i])), "%s", others[i]);
    free(gbnf);
    gram_grammar_destroy(g);
}

Test(gram_regex, choices_reject_bad_lists) {
    char *gbnf = (char *)"untouched";
    const char *one[] = {"a"};
    cr_assert_eq(gram_choice_to_gbnf(one, 0, &gbnf), SP_ERR_INVALID_ARG);
    cr_assert_null(gbnf);
    const char *with_null[] = {"a", NULL};
    cr_assert_eq(gram_choice_to_gbnf(with_null, 2, &gbnf), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "choice 1") != NULL, "%s", sp_last_error());
    const char *bad_utf8[] = {"ok", "fine", "bad\xc3("};
    cr_assert_eq(gram_choice_to_gbnf(bad_utf8, 3, &gbnf), SP_ERR_INVALID_ARG);
    cr_assert(strstr(sp_last_error(), "choice 2") != NULL, "%s", sp_last_error());
    cr_assert_null(gbnf);
}

/* fuzz_regex.c: libFuzzer harness for regular expressions as GBNF (grammar/gram_regex.c).
 * Each input is a pattern. The contract is checked and traps when broken:
 *   - a refused pattern gives SP_ERR_INVALID_ARG, SP_ERR_UNSUPPORTED or SP_ERR_RANGE with
 *     a message "position N: ..." whose N lies inside the pattern (N <= its length);
 *   - an accepted pattern's grammar compiles with gram_compile (SP_ERR_RANGE, a limit of
 *     the compiled size, is the one refusal allowed);
 *   - where PCRE2 reads the pattern the way gram_regex.c does (UTF mode, anchored at both
 *     ends, $ only at the very end, \uHHHH and \xHH as in ECMAScript; \v, a class in
 *     PCRE2, is left out), the grammar and PCRE2 agree on strings grown from the grammar
 *     one character at a time and on random strings over the pattern's bytes, and the
 *     grammar never accepts what is not UTF-8.
 * Everything is freed per input, so LeakSanitizer sees any leak. Built and run by
 * tools/fuzz.sh (which links -lpcre2-8).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/grammar.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

enum { FUZZ_RANDOM = 24, FUZZ_WALKS = 6, FUZZ_WALK_LEN = 12, FUZZ_TRIES = 24 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t fuzz_rng;

static uint32_t fuzz_next(uint32_t bound) {
    fuzz_rng ^= fuzz_rng >> 12;
    fuzz_rng ^= fuzz_rng << 25;
    fuzz_rng ^= fuzz_rng >> 27;
    return (uint32_t)((fuzz_rng * 0x2545F4914F6CDD1Dull) >> 33) % bound;
}

static pcre2_code *fuzz_pcre(const uint8_t *pattern, size_t size) {
    if (memmem(pattern, size, "\\v", 2)) return NULL;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    FUZZ_CHECK(cc);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    pcre2_set_compile_extra_options(cc, PCRE2_EXTRA_ALT_BSUX);
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile(
        pattern, size, PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX, &err,
        &off, cc);
    pcre2_compile_context_free(cc);
    return re;
}

/* 1: PCRE2 matches s whole; 0: it does not; -1: s is not UTF-8; -2: no answer (a limit). */
static int fuzz_pcre_match(pcre2_code *re, pcre2_match_context *mc, const uint8_t *s, size_t n) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    FUZZ_CHECK(md);
    int rc = pcre2_match(re, s, n, 0, 0, md, mc);
    pcre2_match_data_free(md);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    return rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21 ? -1 : -2;
}

/* Whether the grammar accepts s whole; *truncated when a bound dropped paths on the way
 * (a very ambiguous pattern: the matcher then admits less, as documented). */
static bool fuzz_grammar_accepts(const gram_grammar *g, const uint8_t *s, size_t n, bool *truncated) {
    gram_state *st;
    FUZZ_CHECK(gram_state_create(g, &st) == SP_OK);
    bool ok = gram_state_advance(st, s, n) && gram_state_accepting(st);
    *truncated = gram_state_truncated(st);
    gram_state_destroy(st);
    return ok;
}

static void fuzz_agree(const gram_grammar *g, pcre2_code *re, pcre2_match_context *mc, const uint8_t *s, size_t n) {
    int want = fuzz_pcre_match(re, mc, s, n);
    bool truncated;
    bool got = fuzz_grammar_accepts(g, s, n, &truncated);
    if (want == -1) FUZZ_CHECK(!got);
    if (want == 1 && !got && truncated) return; /* admitted less past a bound: allowed */
    if (want >= 0) FUZZ_CHECK(got == (want == 1));
}

static void fuzz_cross_check(const gram_grammar *g, pcre2_code *re, const uint8_t *pattern, size_t size) {
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    FUZZ_CHECK(mc);
    pcre2_set_match_limit(mc, 20000);
    uint8_t alpha[64 + 8] = {'a', '0', ' ', '\n', 0xC3, 0xA9, 0xF0, 0x9F};
    size_t n_alpha = 8;
    for (size_t i = 0; i < size && n_alpha < sizeof alpha; i++) alpha[n_alpha++] = pattern[i];
    uint8_t s[FUZZ_WALK_LEN * 4 + 16];
    for (int t = 0; t < FUZZ_RANDOM; t++) {
        size_t n = fuzz_next(12);
        for (size_t k = 0; k < n; k++) s[k] = alpha[fuzz_next((uint32_t)n_alpha)];
        fuzz_agree(g, re, mc, s, n);
    }
    for (int w = 0; w < FUZZ_WALKS; w++) { /* grow a string byte by byte inside the grammar */
        gram_state *st;
        FUZZ_CHECK(gram_state_create(g, &st) == SP_OK);
        size_t n = 0;
        fuzz_agree(g, re, mc, s, 0);
        while (n < FUZZ_WALK_LEN * 4) {
            bool grown = false;
            for (int tries = 0; tries < FUZZ_TRIES && !grown; tries++) {
                uint8_t b = tries < FUZZ_TRIES / 2 ? alpha[fuzz_next((uint32_t)n_alpha)] : (uint8_t)fuzz_next(256);
                if (gram_state_advance(st, &b, 1)) s[n++] = b, grown = true;
            }
            if (!grown) break;
            int want = gram_state_accepting(st) ? fuzz_pcre_match(re, mc, s, n) : 1;
            FUZZ_CHECK(want == 1 || want == -2);
        }
        gram_state_destroy(st);
    }
    pcre2_match_context_free(mc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf;
    sp_status st = gram_regex_to_gbnf((const char *)data, size, &gbnf);
    if (st != SP_OK) {
        FUZZ_CHECK(st == SP_ERR_INVALID_ARG || st == SP_ERR_UNSUPPORTED || st == SP_ERR_RANGE);
        FUZZ_CHECK(gbnf == NULL);
        const char *msg = sp_last_error();
        char *end;
        FUZZ_CHECK(strncmp(msg, "position ", 9) == 0);
        unsigned long pos = strtoul(msg + 9, &end, 10);
        FUZZ_CHECK(end != msg + 9 && *end == ':' && pos <= size);
        return 0;
    }
    gram_grammar *g;
    st = gram_compile(gbnf, strlen(gbnf), NULL, &g);
    if (st != SP_OK) {
        if (st != SP_ERR_RANGE) abort(); /* the GBNF we wrote does not parse */
        free(gbnf);
        return 0;
    }
    pcre2_code *re = fuzz_pcre(data, size);
    if (re) {
        fuzz_rng = 0x9E3779B97F4A7C15ull ^ size;
        fuzz_cross_check(g, re, data, size);
        pcre2_code_free(re);
    }
    gram_grammar_destroy(g);
    free(gbnf);
    return 0;
}

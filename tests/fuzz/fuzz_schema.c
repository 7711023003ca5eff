/* fuzz_schema.c: libFuzzer harness for JSON Schema to GBNF (grammar/gram_schema.c and
 * gram_schema_types.c). Each input that parses as JSON is a schema, converted once compact
 * and once with whitespace. The contract is checked and traps when broken:
 *   - a refused schema gives SP_ERR_UNSUPPORTED, SP_ERR_INVALID_ARG or SP_ERR_RANGE, no
 *     grammar, and a message that starts with the JSON pointer of the place ("/..." or
 *     "(root)");
 *   - an accepted schema's grammar compiles with gram_compile (SP_ERR_RANGE, a limit of the
 *     compiled size, is the one refusal allowed: a schema may ask for a huge grammar);
 *   - documents grown from the grammar a byte at a time (random walks that try JSON's
 *     punctuation, letters, digits and random bytes) are JSON whenever the grammar accepts
 *     them (jansson reads them back; its refusals of lone surrogate escapes, of numbers it
 *     cannot hold and of NUL in keys are valid JSON it cannot represent, and pass).
 * Everything is freed per input, so LeakSanitizer sees any leak. Built and run by
 * tools/fuzz.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

enum { FUZZ_WALKS = 4, FUZZ_WALK_LEN = 160, FUZZ_RANDOM_BYTES = 4 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char FUZZ_CANDIDATES[] = "{}[],:\" \t\n\\/-+.0123456789eEabcfnrtulsxyzAZ_@T:";

static uint64_t fuzz_rng;

static uint32_t fuzz_next(uint32_t bound) {
    fuzz_rng ^= fuzz_rng >> 12;
    fuzz_rng ^= fuzz_rng << 25;
    fuzz_rng ^= fuzz_rng >> 27;
    return (uint32_t)((fuzz_rng * 0x2545F4914F6CDD1Dull) >> 33) % bound;
}

/* text (n bytes), accepted by the grammar, is JSON. */
static void fuzz_check_json(const uint8_t *text, size_t n) {
    json_error_t err;
    json_t *j = json_loadb((const char *)text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    static const char *const cannot_hold[] = {"Unicode", "surrogate", "overflow", "too big", "NUL byte in object key"};
    bool held = j != NULL;
    for (size_t k = 0; !held && k < sizeof cannot_hold / sizeof *cannot_hold; k++)
        held = strstr(err.text, cannot_hold[k]);
    if (!held) {
        fprintf(stderr, "fuzz_schema: the grammar accepts %.*s, which is not JSON: %s\n", (int)n, (const char *)text,
                err.text);
        __builtin_trap();
    }
    json_decref(j);
}

/* Grows a document from the grammar: at each step a byte the grammar takes (punctuation,
 * letters and digits first, in random order, then random bytes); stops at random once
 * accepting, or when no byte is found. */
static void fuzz_walk(const gram_grammar *g) {
    uint8_t doc[FUZZ_WALK_LEN];
    size_t n = 0, nc = sizeof FUZZ_CANDIDATES - 1;
    gram_state *s;
    FUZZ_CHECK(gram_state_create(g, &s) == SP_OK);
    while (n < FUZZ_WALK_LEN) {
        if (gram_state_accepting(s)) {
            fuzz_check_json(doc, n);
            if (fuzz_next(4) == 0 || gram_state_finished(s)) break;
        }
        bool moved = false;
        uint32_t start = fuzz_next((uint32_t)nc);
        for (size_t k = 0; k < nc + FUZZ_RANDOM_BYTES && !moved; k++) {
            uint8_t b = k < nc ? (uint8_t)FUZZ_CANDIDATES[(start + k) % nc] : (uint8_t)fuzz_next(256);
            if (gram_state_advance(s, &b, 1)) doc[n++] = b, moved = true;
        }
        if (!moved) break;
    }
    gram_state_destroy(s);
}

static void fuzz_convert(const json_t *schema, bool compact, int32_t max_depth) {
    gram_schema_options opt = gram_schema_options_default();
    opt.compact = compact;
    opt.max_depth = max_depth;
    char *gbnf = (char *)"untouched";
    sp_status st = gram_schema_to_gbnf(schema, &opt, &gbnf);
    if (st != SP_OK) {
        FUZZ_CHECK(st == SP_ERR_UNSUPPORTED || st == SP_ERR_INVALID_ARG || st == SP_ERR_RANGE);
        FUZZ_CHECK(gbnf == NULL);
        const char *msg = sp_last_error();
        FUZZ_CHECK(msg[0] == '/' || strncmp(msg, "(root)", 6) == 0);
        return;
    }
    FUZZ_CHECK(gbnf != NULL);
    gram_grammar *g = NULL;
    st = gram_compile(gbnf, strlen(gbnf), NULL, &g);
    if (st != SP_OK && st != SP_ERR_RANGE) abort(); /* a schema we accept must compile */
    if (st == SP_OK) {
        for (int w = 0; w < FUZZ_WALKS; w++) fuzz_walk(g);
        gram_grammar_destroy(g);
    }
    free(gbnf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t err;
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, &err);
    if (!schema) return 0;
    fuzz_rng = 0x9E3779B97F4A7C15ull ^ size;
    for (size_t i = 0; i < size; i++) fuzz_rng = fuzz_rng * 31 + data[i];
    fuzz_rng |= 1;
    fuzz_convert(schema, true, 32);
    fuzz_convert(schema, false, size % 2 ? 4 : 32);
    json_decref(schema);
    return 0;
}

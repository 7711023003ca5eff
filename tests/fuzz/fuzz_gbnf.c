/* fuzz_gbnf.c: libFuzzer harness for the GBNF compiler, the matcher and the masks.
 *
 * The input is GBNF text, optionally followed by "\n%%\n" and bytes to feed. Each input
 * is compiled with small limits (so the fuzzer explores, not allocates); when it
 * compiles, a state walks the feed bytes one at a time, and at the start and after the
 * feed the mask over a real vocabulary (SPINDLE_FUZZ_VOCAB, else $SPINDLE_TESTDATA's (or
 * ../shared/testdata's) gpt-2 vocabulary; masks are skipped when it is absent) is checked against brute force
 * on 512 tokens spread over the vocabulary:
 *   - a token is in the mask exactly when its bytes advance a copy of the state;
 *   - a failed advance leaves the state as it was (the same mask after it);
 *   - the grammar prepared (gram_mask_prepare) gives masks that agree too, and walks no
 *     cut stack later that the preparation missed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "grammar/grammar.h"

#define FUZZ_CHECK(cond, ...)                                                     \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "fuzz_gbnf: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fprintf(stderr, "\n");                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

static tok_vocab *vocab;
static gram_vocab *gvocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (gvocab) return 0;
    const char *path = getenv("SPINDLE_FUZZ_VOCAB");
    const char *testdata = getenv("SPINDLE_TESTDATA");
    char buf[512];
    if (!path) {
        snprintf(buf, sizeof buf, "%s/vocab/ggml-vocab-gpt-2.gguf",
                 testdata && testdata[0] ? testdata : "../shared/testdata");
        path = buf;
    }
    gguf_file *f = NULL;
    if (gguf_open(path, &f) != SP_OK) {
        fprintf(stderr, "fuzz_gbnf: no vocabulary at %s: masks are not checked\n", path);
        return 0;
    }
    if (tok_vocab_load(f, &vocab) == SP_OK && gram_vocab_create(vocab, &gvocab) != SP_OK) {
        tok_vocab_destroy(vocab);
        vocab = NULL;
    }
    gguf_close(f);
    return 0;
}

static bool token_ok(const gram_state *s, int32_t id) {
    gram_state *c = NULL;
    FUZZ_CHECK(gram_state_clone(s, &c) == SP_OK, "clone");
    bool ok = gram_state_advance_token(c, gvocab, id);
    gram_state_destroy(c);
    return ok;
}

static void check_mask(gram_grammar *g, const gram_state *s, uint32_t *mask) {
    if (!gvocab) return;
    gram_mask(g, gvocab, s, mask);
    int32_t n = tok_vocab_size(vocab);
    for (int32_t k = 0; k < 512; k++) {
        int32_t id = (int32_t)(((int64_t)k * 7919) % n);
        bool in_mask = (mask[id >> 5] >> (id & 31)) & 1;
        FUZZ_CHECK(in_mask == token_ok(s, id), "token %d: mask %d", id, in_mask);
    }
}

/* The grammar again with room to nest (so masks come from the cached cut walks, not the
 * depth bound's whole-stack walks), prepared: its masks agree with brute force, and a
 * state fed the same bytes walks no cut stack the preparation missed. */
static void check_prepared(const uint8_t *gbnf, size_t len, const gram_limits *lim, const uint8_t *feed,
                           size_t feed_len, uint32_t *mask) {
    gram_limits deep = *lim;
    deep.max_depth = 4096;
    gram_grammar *g = NULL;
    FUZZ_CHECK(gram_compile((const char *)gbnf, len, &deep, &g) == SP_OK, "compiles with a small depth bound only");
    int32_t keys = gram_mask_prepare(g, gvocab);
    FUZZ_CHECK(gram_mask_walks(g) == keys, "%d keys prepared, %lld walks", keys, (long long)gram_mask_walks(g));
    gram_state *s = NULL;
    FUZZ_CHECK(gram_state_create(g, &s) == SP_OK, "state");
    check_mask(g, s, mask);
    for (size_t i = 0; i < feed_len && i < 256; i++) gram_state_advance(s, feed + i, 1);
    check_mask(g, s, mask);
    /* under the preparation's bounds (8,192 keys, 16 MiB) every key was walked ahead */
    if (keys < 1024)
        FUZZ_CHECK(gram_mask_walks(g) == keys, "%lld walks after %d keys prepared", (long long)gram_mask_walks(g),
                   keys);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t gbnf_len = size;
    const uint8_t *feed = NULL;
    size_t feed_len = 0;
    for (size_t i = 0; i + 4 <= size; i++)
        if (memcmp(data + i, "\n%%\n", 4) == 0) {
            gbnf_len = i + 1;
            feed = data + i + 4;
            feed_len = size - i - 4;
            break;
        }
    gram_limits lim = gram_limits_default();
    lim.max_rules = 2000;
    lim.max_elements = 20000;
    lim.max_depth = 64;
    lim.max_stacks = 64;
    gram_grammar *g = NULL;
    if (gram_compile((const char *)data, gbnf_len, &lim, &g) != SP_OK) {
        FUZZ_CHECK(g == NULL, "a failed compile left a grammar");
        return 0;
    }
    gram_state *s = NULL;
    FUZZ_CHECK(gram_state_create(g, &s) == SP_OK, "state");
    uint32_t *mask = gvocab ? calloc(gram_mask_words(gvocab), sizeof *mask) : NULL;
    check_mask(g, s, mask);
    for (size_t i = 0; i < feed_len && i < 256; i++) {
        bool before = gram_state_accepting(s);
        if (!gram_state_advance(s, feed + i, 1)) FUZZ_CHECK(gram_state_accepting(s) == before, "refused byte");
    }
    check_mask(g, s, mask);
    if (gvocab && gbnf_len <= 4096) check_prepared(data, gbnf_len, &lim, feed, feed_len, mask);
    free(mask);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
    return 0;
}

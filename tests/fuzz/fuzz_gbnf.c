/* fuzz_gbnf.c: libFuzzer harness for the GBNF compiler, the matcher and the masks.
 *
 * The input is GBNF text, optionally followed by "\n%%\n" and bytes to feed. Each input
 * is compiled with small limits (so the fuzzer explores, not allocates); when it
 * compiles, a state walks the feed bytes one at a time, and at the start and after the
 * feed the mask is checked against brute force, over two vocabularies, each with its own
 * compile of the grammar (a grammar's mask cache belongs to one vocabulary):
 *   - a small one built here (SentencePiece: the 256 byte tokens, JSON punctuation, words,
 *     multi-byte characters and an end-of-generation token), every token checked; it needs
 *     no file, so masks are always checked;
 *   - a real one (SPINDLE_FUZZ_VOCAB, else $SPINDLE_TESTDATA's (or ../shared/testdata's)
 *     gpt-2 vocabulary), 512 tokens spread over it; when it is absent the harness says
 *     `SKIP fuzz_gbnf: ...` (tests/fuzz/fuzz_skip.h) and checks the small one only.
 * The checks:
 *   - a token is in the mask exactly when its bytes advance a copy of the state (an
 *     allowed token really advances it, a disallowed one does not);
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
#include "tests/fuzz/fuzz_skip.h"

#define FUZZ_CHECK(cond, ...)                                                     \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "fuzz_gbnf: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fprintf(stderr, "\n");                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

/* A vocabulary the masks are checked over: the tokenizer's and the grammar's views. */
typedef struct fuzz_gbnf_vocab {
    tok_vocab *v;
    gram_vocab *gv;
    bool every_token; /* small: check every token, not a spread of 512 */
} fuzz_gbnf_vocab;

static fuzz_gbnf_vocab vocabs[2];
static int n_vocabs;
static size_t mask_words; /* the largest vocabulary's */

static bool add_vocab(gguf_file *f, bool every_token) {
    fuzz_gbnf_vocab *fv = &vocabs[n_vocabs];
    if (tok_vocab_load(f, &fv->v) != SP_OK) return false;
    if (gram_vocab_create(fv->v, &fv->gv) != SP_OK) {
        tok_vocab_destroy(fv->v);
        return false;
    }
    fv->every_token = every_token;
    if (gram_mask_words(fv->gv) > mask_words) mask_words = gram_mask_words(fv->gv);
    n_vocabs++;
    return true;
}

static void put_str(gguf_writer *w, const char *s) {
    gguf_write_string(w, s, strlen(s));
}

/* The small SentencePiece vocabulary: <unk>, <s>, </s> (the end of generation), the 256
 * byte tokens <0xNN>, then words and pieces a JSON or GBNF grammar meets ("▁" is a space). */
static void add_small_vocab(void) {
#define SPACE "\xe2\x96\x81" /* SentencePiece's space, "▁" */
    static const char *const pieces[] = {
        SPACE,
        SPACE SPACE,
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "{\"",
        "\":",
        "\",",
        "\"}",
        "\":" SPACE,
        "," SPACE "\"",
        SPACE "\"",
        "\"]",
        "[\"",
        "true",
        "false",
        "null",
        "tr",
        "ue",
        "0",
        "1",
        "12",
        "123",
        "-",
        "-1",
        ".",
        ".5",
        "e+",
        "a",
        "b",
        "ab",
        "abc",
        "ba",
        "aa",
        "aaa",
        "x",
        "xy",
        "yes",
        "no",
        "name",
        SPACE "name",
        "age",
        SPACE "a",
        SPACE "the",
        "the",
        "\n",
        "\n\n",
        "\t",
        "\\",
        "\\n",
        "\\\"",
        "\\u",
        "\xc3\xa9",
        "\xe2\x82\xac",
        "\xf0\x9f\x98\x80",
        "a\xc3\xa9",
        "\xe4\xb8\xad\xe6\x96\x87",
        "<",
        ">",
        "</",
        "::=",
        "|",
        "(",
        ")",
        "*",
        "+",
        "?",
        "(a|b)*",
    };
#undef SPACE
    enum { N_PIECES = sizeof pieces / sizeof pieces[0], N = 3 + 256 + N_PIECES };
    gguf_writer w;
    gguf_write_begin_memory(&w);
    gguf_write_header(&w, 3, 0, 4);
    gguf_write_key(&w, "general.architecture", GGUF_TYPE_STRING);
    put_str(&w, "llama");
    gguf_write_key(&w, "tokenizer.ggml.model", GGUF_TYPE_STRING);
    put_str(&w, "llama");
    gguf_write_key(&w, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    gguf_write_array_header(&w, GGUF_TYPE_STRING, N);
    put_str(&w, "<unk>");
    put_str(&w, "<s>");
    put_str(&w, "</s>");
    for (int b = 0; b < 256; b++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", b);
        put_str(&w, t);
    }
    for (int i = 0; i < N_PIECES; i++) put_str(&w, pieces[i]);
    /* token types: unknown, control, control, 256 bytes, then normal */
    gguf_write_key(&w, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
    gguf_write_array_header(&w, GGUF_TYPE_INT32, N);
    for (int i = 0; i < N; i++) gguf_write_uint(&w, i == 0 ? 2 : i < 3 ? 3 : i < 3 + 256 ? 6 : 1, 4);
    gguf_file *f = NULL;
    FUZZ_CHECK(gguf_write_end(&w) == SP_OK && gguf_open_memory(w.buf, w.len, "fuzz_gbnf_small.gguf", &f) == SP_OK,
               "the small vocabulary: %s", sp_last_error());
    FUZZ_CHECK(add_vocab(f, true), "the small vocabulary: %s", sp_last_error());
    gguf_close(f);
    free(w.buf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (n_vocabs) return 0;
    add_small_vocab();
    const char *path = getenv("SPINDLE_FUZZ_VOCAB");
    char buf[512];
    if (!path || !path[0]) {
        snprintf(buf, sizeof buf, "%s/vocab/ggml-vocab-gpt-2.gguf", fuzz_testdata_dir());
        path = buf;
    }
    if (!fuzz_present(path)) {
        fuzz_skip("fuzz_gbnf",
                  "no vocabulary at %s (set SPINDLE_TESTDATA or SPINDLE_FUZZ_VOCAB): masks over the"
                  " small built-in vocabulary only",
                  path);
        return 0;
    }
    gguf_file *f = NULL;
    FUZZ_CHECK(gguf_open(path, &f) == SP_OK && add_vocab(f, false), "%s: %s", path, sp_last_error());
    gguf_close(f);
    return 0;
}

static bool token_ok(const fuzz_gbnf_vocab *fv, const gram_state *s, int32_t id) {
    gram_state *c = NULL;
    FUZZ_CHECK(gram_state_clone(s, &c) == SP_OK, "clone");
    bool ok = gram_state_advance_token(c, fv->gv, id);
    gram_state_destroy(c);
    return ok;
}

static void check_mask(const fuzz_gbnf_vocab *fv, gram_grammar *g, const gram_state *s, uint32_t *mask) {
    gram_mask(g, fv->gv, s, mask);
    int32_t n = tok_vocab_size(fv->v);
    int32_t checks = fv->every_token ? n : 512;
    for (int32_t k = 0; k < checks; k++) {
        int32_t id = fv->every_token ? k : (int32_t)(((int64_t)k * 7919) % n);
        bool in_mask = (mask[id >> 5] >> (id & 31)) & 1;
        FUZZ_CHECK(in_mask == token_ok(fv, s, id), "token %d (%s): mask %d", id, tok_token_text(fv->v, id), in_mask);
    }
}

/* The grammar again with room to nest (so masks come from the cached cut walks, not the
 * depth bound's whole-stack walks), prepared: its masks agree with brute force, and a
 * state fed the same bytes walks no cut stack the preparation missed. */
static void check_prepared(const fuzz_gbnf_vocab *fv, const uint8_t *gbnf, size_t len, const gram_limits *lim,
                           const uint8_t *feed, size_t feed_len, uint32_t *mask) {
    gram_limits deep = *lim;
    deep.max_depth = 4096;
    gram_grammar *g = NULL;
    FUZZ_CHECK(gram_compile((const char *)gbnf, len, &deep, &g) == SP_OK, "compiles with a small depth bound only");
    int32_t keys = gram_mask_prepare(g, fv->gv);
    FUZZ_CHECK(gram_mask_walks(g) == keys, "%d keys prepared, %lld walks", keys, (long long)gram_mask_walks(g));
    gram_state *s = NULL;
    FUZZ_CHECK(gram_state_create(g, &s) == SP_OK, "state");
    check_mask(fv, g, s, mask);
    for (size_t i = 0; i < feed_len && i < 256; i++) gram_state_advance(s, feed + i, 1);
    check_mask(fv, g, s, mask);
    /* under the preparation's bounds (8,192 keys, 16 MiB) every key was walked ahead */
    if (keys < 1024)
        FUZZ_CHECK(gram_mask_walks(g) == keys, "%lld walks after %d keys prepared", (long long)gram_mask_walks(g),
                   keys);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
}

/* One compile of the grammar per vocabulary (the mask cache is the grammar's): masks at
 * the start and after the feed, then the prepared grammar's. */
static void check_vocab(const fuzz_gbnf_vocab *fv, const uint8_t *data, size_t gbnf_len, const gram_limits *lim,
                        const uint8_t *feed, size_t feed_len, uint32_t *mask) {
    gram_grammar *g = NULL;
    FUZZ_CHECK(gram_compile((const char *)data, gbnf_len, lim, &g) == SP_OK, "compiled once, not twice");
    gram_state *s = NULL;
    FUZZ_CHECK(gram_state_create(g, &s) == SP_OK, "state");
    check_mask(fv, g, s, mask);
    for (size_t i = 0; i < feed_len && i < 256; i++) {
        bool before = gram_state_accepting(s);
        if (!gram_state_advance(s, feed + i, 1)) FUZZ_CHECK(gram_state_accepting(s) == before, "refused byte");
    }
    check_mask(fv, g, s, mask);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
    if (gbnf_len <= 4096) check_prepared(fv, data, gbnf_len, lim, feed, feed_len, mask);
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
    gram_grammar_destroy(g);
    if (!n_vocabs) LLVMFuzzerInitialize(NULL, NULL);
    uint32_t *mask = calloc(mask_words, sizeof *mask);
    FUZZ_CHECK(mask, "out of memory");
    for (int i = 0; i < n_vocabs; i++) check_vocab(&vocabs[i], data, gbnf_len, &lim, feed, feed_len, mask);
    free(mask);
    return 0;
}

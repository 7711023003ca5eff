/* fuzz_tokenizer.c: libFuzzer harness for the tokenizers.
 *
 * Vocabularies are loaded once: SPINDLE_FUZZ_VOCAB (one GGUF path, or several joined
 * with ':'; each must load), else gpt-2 (byte-level BPE), llama-spm (SentencePiece, byte
 * fallback) and deepseek-coder (BPE with user-defined tokens and a chain of split
 * regexes) from $SPINDLE_TESTDATA/vocab/ (default ../shared/testdata, as the unit tests)
 * and the default model's (SmolLM2's BPE: models/, or SPINDLE_MODEL), where tools/setup.sh
 * puts it. Each one absent is a `SKIP fuzz_tokenizer: ...` line (tests/fuzz/fuzz_skip.h);
 * with none the harness exits 79 (skipped). Each input is encoded with parse_special off and on,
 * decoded whole and through the incremental decoder, and checked:
 *   - every id is in the vocabulary;
 *   - the incremental decoder emits only whole UTF-8 characters, and for valid UTF-8
 *     text its output equals tok_decode's;
 *   - plain text round-trips exactly when the vocab has a token for each of its bytes
 *     (and, for SPM, it holds no "▁", which decodes to a space).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tests/fuzz/fuzz_skip.h"
#include "tokenizer/tokenizer.h"

#define FUZZ_MAX_VOCABS 8

typedef struct fuzz_vocab {
    tok_vocab *v;
    bool byte_known[256]; /* the vocab can spell this byte (BPE byte token, SPM <0xNN>) */
} fuzz_vocab;

static fuzz_vocab vocabs[FUZZ_MAX_VOCABS];
static int n_vocabs;

#define FUZZ_CHECK(cond, ...)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz_tokenizer: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
            abort();                                                                   \
        }                                                                              \
    } while (0)

static bool valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = c < 0x80                   ? 1
                     : (c >= 0xC2 && c <= 0xDF) ? 2
                     : (c >= 0xE0 && c <= 0xEF) ? 3
                     : (c >= 0xF0 && c <= 0xF4) ? 4
                                                : 0;
        if (len == 0 || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        if (len == 3 && ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F))) return false;
        if (len == 4 && ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))) return false;
        i += len;
    }
    return true;
}

static void load_one(const char *path) {
    gguf_file *f;
    tok_vocab *v;
    if (n_vocabs == FUZZ_MAX_VOCABS) return;
    if (gguf_open(path, &f) != SP_OK || tok_vocab_load(f, &v) != SP_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, sp_last_error());
        abort();
    }
    gguf_close(f);
    fuzz_vocab *fv = &vocabs[n_vocabs++];
    fv->v = v;
    if (tok_vocab_kind(v) == TOK_KIND_SPM) {
        for (int32_t id = 0; id < tok_vocab_size(v); id++) {
            const char *t = tok_token_text(v, id);
            unsigned b;
            if (strlen(t) == 6 && sscanf(t, "<0x%2X>", &b) == 1) fv->byte_known[b] = true;
        }
        return;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t *ids;
        size_t n;
        fv->byte_known[b] = tok_encode(v, &c, 1, false, false, &ids, &n) == SP_OK && n == 1;
        free(ids);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (n_vocabs) return 0;
    const char *env = getenv("SPINDLE_FUZZ_VOCAB");
    if (env && env[0]) {
        char *list = strdup(env);
        for (char *save = NULL, *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) load_one(p);
        free(list);
        return 0;
    }
    static const char *const names[] = {"gpt-2", "llama-spm", "deepseek-coder"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", fuzz_testdata_dir(), names[i]);
        if (fuzz_present(path))
            load_one(path);
        else
            fuzz_skip("fuzz_tokenizer", "no %s vocabulary at %s (set SPINDLE_TESTDATA)", names[i], path);
    }
    if (fuzz_present(fuzz_default_model()))
        load_one(fuzz_default_model());
    else
        fuzz_skip("fuzz_tokenizer", "no default model at %s (run tools/setup.sh, or set SPINDLE_MODEL)",
                  fuzz_default_model());
    if (!n_vocabs) {
        fuzz_skip("fuzz_tokenizer", "no vocabulary at all: nothing to check");
        fuzz_skip_all();
    }
    return 0;
}

static void check_decoders(const tok_vocab *v, const int32_t *ids, size_t n, bool render, const char *whole,
                           size_t whole_len) {
    char *inc = malloc(whole_len * 3 + 16);
    size_t inc_len = 0;
    tok_decoder d;
    tok_decoder_init(&d, render);
    for (size_t i = 0; i < n; i++) {
        char chunk[4096];
        size_t c = tok_decoder_push(v, &d, ids[i], chunk, sizeof chunk);
        FUZZ_CHECK(valid_utf8((unsigned char *)chunk, c), "chunk %zu of %zu is not whole UTF-8", i, n);
        FUZZ_CHECK(inc_len + c <= whole_len * 3 + 3, "incremental output grew past 3x");
        memcpy(inc + inc_len, chunk, c);
        inc_len += c;
    }
    inc_len += tok_decoder_flush(&d, inc + inc_len, 16);
    if (valid_utf8((const unsigned char *)whole, whole_len))
        FUZZ_CHECK(inc_len == whole_len && memcmp(inc, whole, whole_len) == 0, "incremental != tok_decode");
    free(inc);
}

static void check_vocab(const fuzz_vocab *fv, const uint8_t *data, size_t size, bool parse_special) {
    const tok_vocab *v = fv->v;
    int32_t *ids;
    size_t n;
    sp_status st = tok_encode(v, (const char *)data, size, parse_special, parse_special, &ids, &n);
    FUZZ_CHECK(st == SP_OK, "encode failed: %s", sp_last_error());
    int32_t n_vocab = tok_vocab_size(v);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < n_vocab, "id %d out of range", ids[i]);
        char small[4];
        size_t full = tok_token_bytes(v, ids[i], true, small, sizeof small);
        FUZZ_CHECK(full < 1u << 20, "token %d length %zu", ids[i], full);
    }
    for (int render = 0; render < 2; render++) {
        char *text;
        size_t len;
        FUZZ_CHECK(tok_decode(v, ids, n, render, &text, &len) == SP_OK, "decode failed");
        FUZZ_CHECK(text[len] == '\0', "decode not NUL-terminated");
        check_decoders(v, ids, n, render, text, len);
        bool roundtrip = !parse_special && !render;
        for (size_t i = 0; i < size && roundtrip; i++) roundtrip = fv->byte_known[data[i]];
        if (tok_vocab_kind(v) == TOK_KIND_SPM) roundtrip = roundtrip && !memmem(data, size, "\xe2\x96\x81", 3);
        if (roundtrip)
            FUZZ_CHECK(len == size && memcmp(text, data, size) == 0, "round trip of %zu bytes gave %zu", size, len);
        free(text);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int i = 0; i < n_vocabs; i++) {
        check_vocab(&vocabs[i], data, size, false);
        check_vocab(&vocabs[i], data, size, true);
    }
    return 0;
}

/* test_tokenizer.c: the tokenizers against llama.cpp's Hugging Face vectors (every
 * .inp/.out pair in $SPINDLE_TESTDATA/vocab whose GGUF is there), round trips on the
 * default model and stories260K, the incremental decoder, invalid UTF-8, special
 * tokens, load errors (synthetic GGUFs built in memory), speed and threads. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tests/unit/testdata.h"

#define VOCAB_SEP "\n__ggml_vocab_test__\n"
#define MAX_CASES 64

/* ---- fixtures --------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

typedef struct vocab_case {
    const char *text; /* into the .inp buffer, not NUL-terminated */
    size_t len;
    int32_t ids[512];
    size_t n_ids;
} vocab_case;

/* Splits .inp on the separator (dropping the piece after the last one). Returns the count. */
static size_t split_inputs(char *inp, size_t len, vocab_case *cases) {
    size_t n = 0, sep_len = strlen(VOCAB_SEP);
    char *p = inp, *end = inp + len;
    char *s;
    while (n < MAX_CASES && (s = memmem(p, (size_t)(end - p), VOCAB_SEP, sep_len)) != NULL) {
        cases[n].text = p;
        cases[n].len = (size_t)(s - p);
        n++;
        p = s + sep_len;
    }
    return n;
}

static void parse_outputs(char *out, vocab_case *cases, size_t n) {
    char *line = out;
    for (size_t i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        cr_assert(nl, "expected output line %zu missing", i);
        *nl = '\0';
        cases[i].n_ids = 0;
        for (char *q = line; *q;) {
            char *e;
            long id = strtol(q, &e, 10);
            if (e == q) break;
            cr_assert_lt(cases[i].n_ids, 512);
            cases[i].ids[cases[i].n_ids++] = (int32_t)id;
            q = e;
        }
        line = nl + 1;
    }
}

static tok_vocab *load_vocab_path(const char *path) {
    gguf_file *f;
    tok_vocab *v;
    cr_assert_eq(gguf_open(path, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(tok_vocab_load(f, &v), SP_OK, "%s", sp_last_error());
    gguf_close(f); /* the vocab keeps its own copies */
    return v;
}

static tok_vocab *load_vocab(const char *rel) {
    char path[1024];
    testdata_path(path, sizeof path, rel);
    TESTDATA_REQUIRE(path);
    return load_vocab_path(path);
}

/* The 46 strings every family shares (from the gpt-2 .inp). */
static char *load_strings(vocab_case *cases, size_t *n) {
    char path[1024];
    size_t len;
    testdata_path(path, sizeof path, "vocab/ggml-vocab-gpt-2.gguf.inp");
    TESTDATA_REQUIRE(path);
    char *inp = read_file(path, &len);
    *n = split_inputs(inp, len, cases);
    cr_assert_eq(*n, 46);
    return inp;
}

static void expect_roundtrip(const tok_vocab *v, const char *text, size_t len, bool parse_special) {
    int32_t *ids;
    size_t n;
    char *back;
    size_t back_len;
    cr_assert_eq(tok_encode(v, text, len, false, parse_special, &ids, &n), SP_OK, "%s", sp_last_error());
    cr_assert_eq(tok_decode(v, ids, n, false, &back, &back_len), SP_OK);
    cr_expect(back_len == len && memcmp(back, text, len) == 0, "round trip of '%.*s' gave '%s'", (int)len, text, back);
    free(back);
    free(ids);
}

/* ---- the Hugging Face vectors ------------------------------------------------ */

static void check_family(const char *name) {
    char gguf[1024], rel[256], inp_path[1100], out_path[1100];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
    testdata_path(gguf, sizeof gguf, rel);
    snprintf(inp_path, sizeof inp_path, "%s.inp", gguf);
    snprintf(out_path, sizeof out_path, "%s.out", gguf);
    TESTDATA_REQUIRE(gguf);
    TESTDATA_REQUIRE(inp_path);
    TESTDATA_REQUIRE(out_path);

    static vocab_case cases[MAX_CASES];
    size_t inp_len, out_len;
    char *inp = read_file(inp_path, &inp_len), *out = read_file(out_path, &out_len);
    size_t n = split_inputs(inp, inp_len, cases);
    cr_assert_eq(n, 46, "%s: %zu test strings", name, n);
    parse_outputs(out, cases, n);
    tok_vocab *v = load_vocab_path(gguf);

    size_t encoded_ok = 0, decoded_ok = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t n_ids;
        cr_assert_eq(tok_encode(v, cases[i].text, cases[i].len, false, false, &ids, &n_ids), SP_OK, "%s",
                     sp_last_error());
        bool same = n_ids == cases[i].n_ids && memcmp(ids, cases[i].ids, n_ids * sizeof *ids) == 0;
        cr_expect(same, "%s: string %zu '%.*s': %zu ids, want %zu", name, i, (int)cases[i].len, cases[i].text, n_ids,
                  cases[i].n_ids);
        encoded_ok += same;
        free(ids);

        char *text;
        size_t len;
        cr_assert_eq(tok_decode(v, cases[i].ids, cases[i].n_ids, false, &text, &len), SP_OK);
        bool back = len == cases[i].len && memcmp(text, cases[i].text, len) == 0;
        cr_expect(back, "%s: decoding string %zu gave '%s'", name, i, text);
        decoded_ok += back;
        free(text);
    }
    cr_log_info("%s: encode %zu/%zu, decode %zu/%zu", name, encoded_ok, n, decoded_ok, n);
    tok_vocab_destroy(v);
    free(inp);
    free(out);
}

Test(tokenizer, vectors_gpt2) {
    check_family("gpt-2");
}
Test(tokenizer, vectors_llama_spm) {
    check_family("llama-spm");
}
Test(tokenizer, vectors_phi3) {
    check_family("phi-3");
}
Test(tokenizer, vectors_mpt) {
    check_family("mpt");
}
Test(tokenizer, vectors_starcoder) {
    check_family("starcoder");
}
Test(tokenizer, vectors_deepseek_coder) {
    check_family("deepseek-coder");
}
Test(tokenizer, vectors_falcon) {
    check_family("falcon");
}
/* Kept upstream without their (large) GGUF: these run when someone drops it in. */
Test(tokenizer, vectors_llama_bpe) {
    check_family("llama-bpe");
}
Test(tokenizer, vectors_qwen2) {
    check_family("qwen2");
}
Test(tokenizer, vectors_command_r) {
    check_family("command-r");
}

/* ---- round trips on real models ------------------------------------------- */

Test(tokenizer, default_model_roundtrips) {
    TESTDATA_REQUIRE(testdata_default_model());
    static vocab_case cases[MAX_CASES];
    size_t n;
    char *inp = load_strings(cases, &n);
    tok_vocab *v = load_vocab_path(testdata_default_model());
    cr_expect_eq(tok_vocab_kind(v), TOK_KIND_BPE);
    cr_expect_eq(tok_vocab_size(v), 49152);
    for (size_t i = 0; i < n; i++) expect_roundtrip(v, cases[i].text, cases[i].len, false);
    tok_vocab_destroy(v);
    free(inp);
}

Test(tokenizer, stories260k_roundtrips) {
    static vocab_case cases[MAX_CASES];
    size_t n;
    char *inp = load_strings(cases, &n);
    tok_vocab *v = load_vocab("models/stories260K.gguf");
    cr_expect_eq(tok_vocab_kind(v), TOK_KIND_SPM);
    cr_expect_eq(tok_vocab_size(v), 512);
    cr_expect(tok_add_bos(v));
    for (size_t i = 0; i < n; i++) expect_roundtrip(v, cases[i].text, cases[i].len, false);
    /* Byte fallback: a character outside its 512 tokens comes back through <0xNN>. */
    int32_t *ids;
    size_t n_ids;
    cr_assert_eq(tok_encode(v, "\xe4\xb8\x96", 3, false, false, &ids, &n_ids), SP_OK);
    cr_expect_eq(n_ids, 4); /* "▁" then three byte tokens */
    cr_expect_str_eq(tok_token_text(v, ids[1]), "<0xE4>");
    free(ids);
    tok_vocab_destroy(v);
    free(inp);
}

/* ---- incremental decoding ------------------------------------------------- */

/* Length of the longest valid UTF-8 prefix of s. */
static size_t valid_utf8_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len = c < 0x80                   ? 1
                     : (c >= 0xC2 && c <= 0xDF) ? 2
                     : (c >= 0xE0 && c <= 0xEF) ? 3
                     : (c >= 0xF0 && c <= 0xF4) ? 4
                                                : 0;
        if (len == 0 || i + len > n) return i;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return i;
}

/* Pushes ids one at a time; every chunk must be whole characters and the whole must
 * equal tok_decode. */
static void expect_incremental(const tok_vocab *v, const int32_t *ids, size_t n) {
    char *want;
    size_t want_len;
    cr_assert_eq(tok_decode(v, ids, n, false, &want, &want_len), SP_OK);
    char *got = malloc(want_len * 3 + 64);
    size_t got_len = 0;
    tok_decoder d;
    tok_decoder_init(&d, false);
    for (size_t i = 0; i < n; i++) {
        char chunk[1024];
        size_t c = tok_decoder_push(v, &d, ids[i], chunk, sizeof chunk);
        cr_expect_eq(valid_utf8_prefix((unsigned char *)chunk, c), c, "chunk %zu splits a UTF-8 character", i);
        memcpy(got + got_len, chunk, c);
        got_len += c;
    }
    got_len += tok_decoder_flush(&d, got + got_len, 64);
    cr_expect(got_len == want_len && memcmp(got, want, got_len) == 0, "incremental '%.*s' != '%s'", (int)got_len, got,
              want);
    free(got);
    free(want);
}

static void check_incremental(tok_vocab *v) {
    static vocab_case cases[MAX_CASES];
    size_t n;
    char *inp = load_strings(cases, &n);
    for (size_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t n_ids;
        cr_assert_eq(tok_encode(v, cases[i].text, cases[i].len, false, false, &ids, &n_ids), SP_OK);
        expect_incremental(v, ids, n_ids);
        free(ids);
    }
    free(inp);
}

Test(tokenizer, incremental_decoder_bpe) {
    TESTDATA_REQUIRE(testdata_default_model());
    tok_vocab *v = load_vocab_path(testdata_default_model());
    check_incremental(v);
    tok_vocab_destroy(v);
}

Test(tokenizer, incremental_decoder_spm_byte_fallback) {
    tok_vocab *v = load_vocab("models/stories260K.gguf"); /* CJK and emoji go through <0xNN> here */
    check_incremental(v);
    tok_vocab_destroy(v);
    v = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    check_incremental(v);
    tok_vocab_destroy(v);
}

Test(tokenizer, incremental_decoder_holds_split_characters) {
    tok_vocab *v = load_vocab("models/stories260K.gguf");
    const char *emoji = "\xf0\x9f\xa6\x99"; /* 🦙: four byte tokens */
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(v, emoji, 4, false, false, &ids, &n), SP_OK);
    cr_assert_eq(n, 5);
    tok_decoder d;
    tok_decoder_init(&d, false);
    char out[128];
    cr_expect_eq(tok_decoder_push(v, &d, ids[0], out, sizeof out), 0); /* "▁" at the start is dropped */
    for (size_t i = 1; i < 4; i++) cr_expect_eq(tok_decoder_push(v, &d, ids[i], out, sizeof out), 0);
    cr_assert_eq(tok_decoder_push(v, &d, ids[4], out, sizeof out), 4);
    cr_expect(memcmp(out, emoji, 4) == 0);
    /* A sequence cut short becomes U+FFFD at the end. */
    tok_decoder_init(&d, false);
    tok_decoder_push(v, &d, ids[1], out, sizeof out);
    cr_assert_eq(tok_decoder_flush(&d, out, sizeof out), 3);
    cr_expect(memcmp(out, "\xef\xbf\xbd", 3) == 0);
    free(ids);
    tok_vocab_destroy(v);
}

/* ---- invalid UTF-8 ---------------------------------------------------------- */

static const char *const INVALID_UTF8[] = {
    "\x80",
    "abc\xff",
    "\xe2\x82",
    "x\xe2\x82 y",
    "\xc0\xaf",
    "\xed\xa0\x80",
    "\xf4\x90\x80\x80",
    "\xf8\x88\x80\x80\x80",
    "caf\xc3",
    "\xbf\xbf hello \xfe",
    "\xf0\x9f\x98",
    " \xe4\xb8 \xe4",
};

/* Byte-level BPE keeps every byte, valid UTF-8 or not, when the vocab has a token for
 * each of the 256 (gpt-2); the incremental decoder still yields only valid UTF-8, with
 * U+FFFD for what cannot be. */
Test(tokenizer, invalid_utf8_roundtrips_bpe) {
    tok_vocab *v = load_vocab("vocab/ggml-vocab-gpt-2.gguf");
    unsigned char all[512];
    for (int i = 0; i < 512; i++) all[i] = (unsigned char)(i * 7 + (i >> 8));
    for (size_t i = 0; i < sizeof INVALID_UTF8 / sizeof INVALID_UTF8[0]; i++) {
        expect_roundtrip(v, INVALID_UTF8[i], strlen(INVALID_UTF8[i]), false);
        expect_roundtrip(v, INVALID_UTF8[i], strlen(INVALID_UTF8[i]), true);
    }
    expect_roundtrip(v, (const char *)all, sizeof all, false);
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(v, (const char *)all, sizeof all, false, false, &ids, &n), SP_OK);
    tok_decoder d;
    tok_decoder_init(&d, false);
    for (size_t i = 0; i < n; i++) {
        char chunk[512];
        size_t c = tok_decoder_push(v, &d, ids[i], chunk, sizeof chunk);
        cr_expect_eq(valid_utf8_prefix((unsigned char *)chunk, c), c);
    }
    free(ids);
    tok_vocab_destroy(v);
}

/* SmolLM2 has no token for some bytes (0xC0, 0xFF, a few controls), deepseek-coder
 * only user-defined ones: those bytes are dropped, as Hugging Face and llama.cpp do,
 * never turned into <unk> (SmolLM2's is <|endoftext|>); every other byte comes back. */
static void check_drops_only_unknown_bytes(tok_vocab *v) {
    bool known[256];
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t *ids;
        size_t n;
        cr_assert_eq(tok_encode(v, &c, 1, false, false, &ids, &n), SP_OK);
        known[b] = n == 1;
        cr_expect(n <= 1);
        free(ids);
    }
    cr_expect_not(known[0xFF]);
    for (size_t i = 0; i < sizeof INVALID_UTF8 / sizeof INVALID_UTF8[0]; i++) {
        const char *text = INVALID_UTF8[i];
        char want[64];
        size_t w = 0;
        for (const char *p = text; *p; p++)
            if (known[(unsigned char)*p]) want[w++] = *p;
        int32_t *ids;
        size_t n;
        char *back;
        size_t back_len;
        cr_assert_eq(tok_encode(v, text, strlen(text), false, false, &ids, &n), SP_OK);
        for (size_t k = 0; k < n; k++) cr_expect_not(tok_is_eog(v, ids[k]));
        cr_assert_eq(tok_decode(v, ids, n, false, &back, &back_len), SP_OK);
        cr_expect(back_len == w && memcmp(back, want, w) == 0, "string %zu", i);
        free(back);
        free(ids);
    }
    tok_vocab_destroy(v);
}

Test(tokenizer, invalid_utf8_drops_only_bytes_without_tokens) {
    check_drops_only_unknown_bytes(load_vocab("vocab/ggml-vocab-deepseek-coder.gguf"));
    TESTDATA_REQUIRE(testdata_default_model());
    check_drops_only_unknown_bytes(load_vocab_path(testdata_default_model()));
}

Test(tokenizer, invalid_utf8_roundtrips_spm_byte_fallback) {
    tok_vocab *v = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    for (size_t i = 0; i < sizeof INVALID_UTF8 / sizeof INVALID_UTF8[0]; i++)
        expect_roundtrip(v, INVALID_UTF8[i], strlen(INVALID_UTF8[i]), false);
    tok_vocab_destroy(v);
}

/* ---- special tokens --------------------------------------------------------- */

Test(tokenizer, parse_special_control_tokens) {
    TESTDATA_REQUIRE(testdata_default_model());
    tok_vocab *v = load_vocab_path(testdata_default_model());
    const char *chat = "<|im_start|>user\nHello<|im_end|>\n";
    int32_t *ids, *plain;
    size_t n, n_plain;
    cr_assert_eq(tok_encode(v, chat, strlen(chat), false, true, &ids, &n), SP_OK);
    cr_assert_gt(n, 3);
    cr_expect_eq(ids[0], 1, "<|im_start|> is id 1, got %d", ids[0]);
    cr_expect_str_eq(tok_token_text(v, ids[1]), "user");
    cr_expect_eq(ids[n - 2], 2); /* <|im_end|> */
    /* Without parse_special the same text is plain text. */
    cr_assert_eq(tok_encode(v, chat, strlen(chat), false, false, &plain, &n_plain), SP_OK);
    for (size_t i = 0; i < n_plain; i++) cr_expect(plain[i] != 1 && plain[i] != 2);
    expect_roundtrip(v, chat, strlen(chat), false);
    /* Control tokens render only when asked. */
    char *text;
    size_t len;
    cr_assert_eq(tok_decode(v, ids, n, false, &text, &len), SP_OK);
    cr_expect_str_eq(text, "user\nHello\n");
    free(text);
    cr_assert_eq(tok_decode(v, ids, n, true, &text, &len), SP_OK);
    cr_expect_str_eq(text, chat);
    free(text);
    /* BOS on request. */
    free(ids);
    cr_assert_eq(tok_encode(v, "Hi", 2, true, false, &ids, &n), SP_OK);
    cr_expect_eq(ids[0], tok_bos(v));
    free(ids);
    free(plain);
    tok_vocab_destroy(v);
}

Test(tokenizer, user_defined_tokens_match_without_parse_special) {
    tok_vocab *v = load_vocab("vocab/ggml-vocab-deepseek-coder.gguf");
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(v, "\xc3\xb5", 2, false, false, &ids, &n), SP_OK); /* "õ" */
    cr_assert_eq(n, 1);
    cr_expect_eq(ids[0], 32000);
    free(ids);
    /* ...but control tokens need parse_special. */
    const char *bos = "<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>";
    cr_assert_eq(tok_encode(v, bos, strlen(bos), false, false, &ids, &n), SP_OK);
    cr_expect_gt(n, 1);
    free(ids);
    cr_assert_eq(tok_encode(v, bos, strlen(bos), false, true, &ids, &n), SP_OK);
    cr_assert_eq(n, 1);
    cr_expect_eq(ids[0], 32013);
    free(ids);
    /* Fill-in-the-middle markers are stored as user-defined but treated as control, as
     * llama.cpp does, so plain text cannot inject them. */
    const char *fim = "<\uFF5Cfim\u2581begin\uFF5C>";
    cr_assert_eq(tok_encode(v, fim, strlen(fim), false, false, &ids, &n), SP_OK);
    cr_expect_gt(n, 1);
    free(ids);
    cr_assert_eq(tok_encode(v, fim, strlen(fim), false, true, &ids, &n), SP_OK);
    cr_assert_eq(n, 1);
    cr_expect_eq(ids[0], 32016);
    free(ids);
    cr_assert_eq(tok_encode(v, "a<|User|>b", 10, false, false, &ids, &n), SP_OK);
    cr_assert_eq(n, 3);
    cr_expect_eq(ids[1], 32019);
    free(ids);
    tok_vocab_destroy(v);
}

Test(tokenizer, special_ids_and_eog) {
    TESTDATA_REQUIRE(testdata_default_model());
    tok_vocab *v = load_vocab_path(testdata_default_model());
    cr_expect_eq(tok_bos(v), 1);
    cr_expect_eq(tok_eos(v), 2);
    cr_expect_not(tok_add_bos(v));
    cr_expect(tok_is_eog(v, 2)); /* <|im_end|>, eos */
    cr_expect(tok_is_eog(v, 0)); /* <|endoftext|> by its text */
    cr_expect_not(tok_is_eog(v, 1));
    cr_expect_not(tok_is_eog(v, 100));
    cr_expect_not(tok_is_eog(v, -1));
    cr_expect_not(tok_is_eog(v, 1 << 30));
    tok_vocab_destroy(v);

    v = load_vocab("vocab/ggml-vocab-phi-3.gguf");
    cr_expect_eq(tok_eos(v), 32000);
    cr_expect(tok_is_eog(v, 32007)); /* <|end|> */
    cr_expect(tok_is_eog(v, 2));     /* </s> */
    cr_expect(tok_add_bos(v));
    tok_vocab_destroy(v);
}

Test(tokenizer, token_bytes) {
    tok_vocab *v = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    char buf[16];
    cr_expect_null(tok_token_text(v, -1));
    cr_expect_null(tok_token_text(v, 32000));
    cr_expect_str_eq(tok_token_text(v, 1), "<s>");
    cr_expect_eq(tok_token_bytes(v, 1, false, buf, sizeof buf), 0);
    cr_expect_eq(tok_token_bytes(v, 1, true, buf, sizeof buf), 3);
    cr_expect(memcmp(buf, "<s>", 3) == 0);
    cr_expect_eq(tok_token_bytes(v, 13, false, buf, sizeof buf), 1); /* <0x0A> */
    cr_expect_eq(buf[0], '\n');
    cr_expect_eq(tok_token_bytes(v, 15043, false, buf, 2), 6); /* "▁Hello": full length, 2 written */
    cr_expect(memcmp(buf, " H", 2) == 0);
    cr_expect_eq(tok_token_bytes(v, 99999, true, buf, sizeof buf), 0);
    /* The dummy space goes after BOS as well. */
    int32_t ids[] = {1, 15043, 3186};
    char *text;
    size_t len;
    cr_assert_eq(tok_decode(v, ids, 3, false, &text, &len), SP_OK);
    cr_expect_str_eq(text, "Hello world");
    free(text);
    tok_vocab_destroy(v);
}

Test(tokenizer, empty_text) {
    tok_vocab *v = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(v, "", 0, false, true, &ids, &n), SP_OK);
    cr_expect_eq(n, 0);
    cr_expect_not_null(ids);
    free(ids);
    cr_assert_eq(tok_encode(v, NULL, 0, true, false, &ids, &n), SP_OK);
    cr_assert_eq(n, 1);
    cr_expect_eq(ids[0], 1);
    free(ids);
    cr_expect_eq(tok_encode(v, NULL, 3, true, false, &ids, &n), SP_ERR_INVALID_ARG);
    tok_vocab_destroy(v);
}

/* ---- speed and threads ------------------------------------------------------ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Builds a prompt of the 46 strings repeated to at least min_tokens tokens. */
static char *long_prompt(const tok_vocab *v, size_t min_tokens, size_t *len) {
    static vocab_case cases[MAX_CASES];
    size_t n;
    char *inp = load_strings(cases, &n);
    size_t cap = 1 << 16, w = 0, tokens = 0;
    char *p = malloc(cap);
    while (tokens < min_tokens) {
        for (size_t i = 0; i < n; i++) {
            if (w + cases[i].len + 1 >= cap) p = realloc(p, cap *= 2);
            memcpy(p + w, cases[i].text, cases[i].len);
            w += cases[i].len;
            p[w++] = '\n';
        }
        int32_t *ids;
        cr_assert_eq(tok_encode(v, p, w, false, false, &ids, &tokens), SP_OK);
        free(ids);
    }
    free(inp);
    *len = w;
    return p;
}

/* Best of several runs, in ms. Sanitizer builds get more room. */
#if defined(__SANITIZE_ADDRESS__)
#define ENCODE_BUDGET_MS 60.0
#else
#define ENCODE_BUDGET_MS 10.0
#endif

static void check_speed(tok_vocab *v, const char *name) {
    size_t len, n;
    char *prompt = long_prompt(v, 2000, &len);
    double best = 1e9;
    for (int r = 0; r < 7; r++) {
        int32_t *ids;
        double t0 = now_ms();
        cr_assert_eq(tok_encode(v, prompt, len, false, false, &ids, &n), SP_OK);
        double t = now_ms() - t0;
        if (t < best) best = t;
        free(ids);
    }
    cr_log_info("%s: %zu tokens (%zu bytes) in %.3f ms", name, n, len, best);
    cr_expect_lt(best, ENCODE_BUDGET_MS, "%s: encoding %zu tokens took %.3f ms", name, n, best);
    free(prompt);
}

Test(tokenizer, encode_2000_tokens_fast) {
    TESTDATA_REQUIRE(testdata_default_model());
    tok_vocab *v = load_vocab_path(testdata_default_model());
    check_speed(v, "SmolLM2 (BPE)");
    tok_vocab_destroy(v);
    v = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    check_speed(v, "llama-spm (SPM)");
    tok_vocab_destroy(v);
}

typedef struct thread_job {
    const tok_vocab *v;
    const char *text;
    size_t len;
    const int32_t *want;
    size_t n_want;
    int mismatches;
} thread_job;

static void *encode_many(void *arg) {
    thread_job *j = arg;
    for (int r = 0; r < 20; r++) {
        int32_t *ids;
        size_t n;
        if (tok_encode(j->v, j->text, j->len, false, true, &ids, &n) != SP_OK || n != j->n_want ||
            memcmp(ids, j->want, n * sizeof *ids) != 0)
            j->mismatches++;
        free(ids);
    }
    return NULL;
}

Test(tokenizer, encode_on_many_threads) {
    TESTDATA_REQUIRE(testdata_default_model());
    tok_vocab *v = load_vocab_path(testdata_default_model());
    size_t len, n;
    char *prompt = long_prompt(v, 500, &len);
    int32_t *want;
    cr_assert_eq(tok_encode(v, prompt, len, false, true, &want, &n), SP_OK);
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){v, prompt, len, want, n, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, encode_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(jobs[i].mismatches, 0);
    }
    free(want);
    free(prompt);
    tok_vocab_destroy(v);
}

/* ---- synthetic vocabularies: load errors, merge order, pre-tokenizer names ---- */

typedef struct gbuf {
    unsigned char *p;
    size_t n, cap;
} gbuf;

static void gb_put(gbuf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void gb_u32(gbuf *b, uint32_t x) {
    gb_put(b, &x, 4);
}
static void gb_u64(gbuf *b, uint64_t x) {
    gb_put(b, &x, 8);
}
static void gb_str(gbuf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_put(b, s, strlen(s));
}
static void gb_kv_str(gbuf *b, const char *key, const char *val) {
    gb_str(b, key);
    gb_u32(b, 8);
    gb_str(b, val);
}
static void gb_kv_strs(gbuf *b, const char *key, char **vals, size_t n) {
    gb_str(b, key);
    gb_u32(b, 9);
    gb_u32(b, 8);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++) gb_str(b, vals[i]);
}
static void gb_kv_i32s(gbuf *b, const char *key, const int32_t *vals, size_t n) {
    gb_str(b, key);
    gb_u32(b, 9);
    gb_u32(b, 5);
    gb_u64(b, n);
    gb_put(b, vals, n * 4);
}

/* GPT-2's character for byte b, as UTF-8. */
static void gpt2_char(int b, char *out) {
    int cp = b, n = 0;
    if (b <= 0x20)
        cp = 0x100 + b;
    else if (b >= 0x7F && b <= 0xA0)
        cp = 0x100 + 33 + (b - 0x7F);
    else if (b == 0xAD)
        cp = 0x143;
    if (cp < 0x80) {
        out[n++] = (char)cp;
    } else {
        out[n++] = (char)(0xC0 | (cp >> 6));
        out[n++] = (char)(0x80 | (cp & 0x3F));
    }
    out[n] = '\0';
}

enum { SYN_HE = 256, SYN_LL, SYN_HELL, SYN_HELLO, SYN_EL, SYN_HLO, SYN_END, SYN_N };

/* Tokens: the 256 byte characters (id = byte), then he, ll, hell, hello, el, hlo and a
 * control <|end|>. Merges: "h e", "l l", "he ll", "hell o", with "e l" first when
 * el_first. model/pre NULL: key left out. */
static gbuf build_vocab(const char *model, const char *pre, bool merges, bool el_first) {
    static char bytes[256][4];
    char *tokens[SYN_N];
    int32_t types[SYN_N];
    for (int b = 0; b < 256; b++) {
        gpt2_char(b, bytes[b]);
        tokens[b] = bytes[b];
        types[b] = 1;
    }
    char *extra[] = {"he", "ll", "hell", "hello", "el", "hlo", "<|end|>"};
    for (int i = SYN_HE; i < SYN_N; i++) {
        tokens[i] = extra[i - SYN_HE];
        types[i] = i == SYN_END ? 3 : 1;
    }
    char *merge_list[] = {"e l", "h e", "l l", "he ll", "hell o"};
    gbuf b = {0};
    gb_put(&b, "GGUF", 4);
    gb_u32(&b, 3);
    gb_u64(&b, 0);
    gb_u64(&b, 3 + (model != NULL) + (pre != NULL) + merges);
    gb_kv_str(&b, "general.architecture", "llama");
    if (model) gb_kv_str(&b, "tokenizer.ggml.model", model);
    if (pre) gb_kv_str(&b, "tokenizer.ggml.pre", pre);
    gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, SYN_N);
    gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, SYN_N);
    if (merges) gb_kv_strs(&b, "tokenizer.ggml.merges", el_first ? merge_list : merge_list + 1, el_first ? 5 : 4);
    return b;
}

/* Loads the synthetic vocab; returns the status (and the vocab in *out on success). */
static sp_status load_synthetic(gbuf *b, tok_vocab **out) {
    gguf_file *f;
    sp_status st = gguf_open_memory(b->p, b->n, "synthetic.gguf", &f);
    cr_assert_eq(st, SP_OK, "%s", sp_last_error());
    st = tok_vocab_load(f, out);
    gguf_close(f);
    return st;
}

static void expect_ids(const tok_vocab *v, const char *text, const int32_t *want, size_t n_want) {
    int32_t *ids;
    size_t n;
    cr_assert_eq(tok_encode(v, text, strlen(text), false, true, &ids, &n), SP_OK);
    bool same = n == n_want && memcmp(ids, want, n * sizeof *ids) == 0;
    cr_expect(same, "'%s': got %zu ids (first %d), want %zu", text, n, n ? ids[0] : -1, n_want);
    free(ids);
}

Test(tokenizer, rejects_unknown_model_and_pre) {
    tok_vocab *v = NULL;
    gbuf b = build_vocab("gpt2", "nonsense-pre", true, false);
    cr_expect_eq(load_synthetic(&b, &v), SP_ERR_UNSUPPORTED);
    cr_expect(strstr(sp_last_error(), "nonsense-pre"), "message: %s", sp_last_error());
    free(b.p);
    b = build_vocab("t5", NULL, false, false);
    cr_expect_eq(load_synthetic(&b, &v), SP_ERR_UNSUPPORTED);
    cr_expect(strstr(sp_last_error(), "'t5'"), "message: %s", sp_last_error());
    free(b.p);
    b = build_vocab(NULL, NULL, false, false);
    cr_expect_eq(load_synthetic(&b, &v), SP_ERR_FORMAT);
    free(b.p);
    b = build_vocab("gpt2", "gpt-2", false, false);
    cr_expect_eq(load_synthetic(&b, &v), SP_ERR_FORMAT);
    cr_expect(strstr(sp_last_error(), "tokenizer.ggml.merges"), "message: %s", sp_last_error());
    free(b.p);
}

Test(tokenizer, accepts_pre_tokenizer_names) {
    const char *names[] = {NULL,     "default",   "gpt-2",  "llama-bpe",      "llama3", "llama-v3",
                           "smollm", "starcoder", "qwen2",  "deepseek-coder", "falcon", "mpt",
                           "dbrx",   "tekken",    "gpt-4o", "bloom",          "viking"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        tok_vocab *v;
        gbuf b = build_vocab("gpt2", names[i], true, false);
        cr_assert_eq(load_synthetic(&b, &v), SP_OK, "pre '%s': %s", names[i] ? names[i] : "(absent)", sp_last_error());
        int32_t hello[] = {SYN_HELLO};
        expect_ids(v, "hello", hello, 1);
        tok_vocab_destroy(v);
        free(b.p);
    }
}

Test(tokenizer, merges_follow_rank_order) {
    tok_vocab *v;
    gbuf b = build_vocab("gpt2", "gpt-2", true, false);
    cr_assert_eq(load_synthetic(&b, &v), SP_OK, "%s", sp_last_error());
    int32_t hello[] = {SYN_HELLO}, hel[] = {SYN_HE, 'l'}, sp_hello[] = {' ', SYN_HELLO}, hlo[] = {'h', 'l', 'o'};
    expect_ids(v, "hello", hello, 1);
    expect_ids(v, "hel", hel, 2);
    expect_ids(v, " hello", sp_hello, 2); /* "Ġ" has no merge with "h" */
    expect_ids(v, "hlo", hlo, 3);         /* a token, but no merge makes it */
    int32_t split[] = {SYN_HELLO, SYN_END, ' ', SYN_HELLO};
    expect_ids(v, "hello<|end|> hello", split, 4); /* the control token is cut out first */
    tok_vocab_destroy(v);
    free(b.p);

    b = build_vocab("gpt2", "gpt-2", true, true); /* "e l" now ranks first */
    cr_assert_eq(load_synthetic(&b, &v), SP_OK);
    int32_t hel2[] = {'h', SYN_EL}, hello2[] = {'h', SYN_EL, 'l', 'o'};
    expect_ids(v, "hel", hel2, 2);
    expect_ids(v, "hello", hello2, 4);
    tok_vocab_destroy(v);
    free(b.p);
}

Test(tokenizer, llama3_whole_word_skips_merges) {
    tok_vocab *v;
    gbuf b = build_vocab("gpt2", "llama-bpe", true, false);
    cr_assert_eq(load_synthetic(&b, &v), SP_OK, "%s", sp_last_error());
    int32_t hlo[] = {SYN_HLO};
    expect_ids(v, "hlo", hlo, 1);
    tok_vocab_destroy(v);
    free(b.p);
}

/* fuzz_gguf.c: libFuzzer harness for the GGUF reader. Opens the input with
 * gguf_open_memory and, when it opens, walks everything a loader would touch: every
 * key through the typed getters and gguf_kv_format, every string-array element, every
 * fixed-size array's data and every byte of every tensor. Invariants that must hold
 * for any file that opens (lookups find what was listed, tensors lie inside the input)
 * trap when broken. Then the metadata readers a model load runs on the same file: the
 * architecture description and the tokenizer (whose errors must be clean statuses).
 * Built and run by tools/fuzz.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define FUZZ_CHECK(cond)               \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

static volatile uint64_t fuzz_sink;

static void fuzz_touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) sum += b[i];
    fuzz_sink += sum;
}

/* NUL-terminated copy of s into buf; false when s holds a NUL or does not fit. */
static bool fuzz_cstr(gguf_str s, char *buf, size_t cap) {
    if (s.len >= cap || memchr(s.ptr, 0, s.len)) return false;
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = '\0';
    return true;
}

static void fuzz_kv(const gguf_file *f, int64_t i) {
    char key[256], text[384];
    gguf_kv_format(f, i, text, sizeof text, 6);
    FUZZ_CHECK(strlen(text) < sizeof text);
    gguf_kv_format(f, i, text, 5, 2);
    gguf_str k = gguf_kv_key(f, i);
    fuzz_touch(k.ptr, k.len);
    if (!fuzz_cstr(k, key, sizeof key)) return;
    FUZZ_CHECK(gguf_find_key(f, key) == i);

    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    gguf_str s;
    gguf_value_type et;
    uint64_t n;
    const void *data;
    (void)gguf_get_u32(f, key, &u32);
    (void)gguf_get_i64(f, key, &i64);
    (void)gguf_get_f32(f, key, &f32);
    (void)gguf_get_bool(f, key, &b);
    if (gguf_get_str(f, key, &s) == SP_OK) fuzz_touch(s.ptr, s.len);
    if (gguf_get_arr(f, key, &et, &n) != SP_OK) return;
    FUZZ_CHECK(gguf_kv_type(f, i) == GGUF_TYPE_ARRAY);
    if (et == GGUF_TYPE_STRING) {
        for (uint64_t j = 0; j < n; j++) {
            FUZZ_CHECK(gguf_get_arr_str(f, key, j, &s) == SP_OK);
            fuzz_touch(s.ptr, s.len);
        }
        FUZZ_CHECK(gguf_get_arr_str(f, key, n, &s) == SP_ERR_RANGE);
    } else if (et != GGUF_TYPE_ARRAY) {
        uint64_t n2;
        static const uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        FUZZ_CHECK(gguf_get_arr_data(f, key, et, &data, &n2) == SP_OK && n2 == n);
        fuzz_touch(data, n * sizes[et]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    sp_log_set_level(SP_LOG_ERROR); /* loaders warn about odd metadata: noise here */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f;
    if (gguf_open_memory(data, size, "fuzz.gguf", &f) != SP_OK) return 0;
    FUZZ_CHECK(gguf_version(f) == 2 || gguf_version(f) == 3);
    uint64_t a = gguf_alignment(f);
    FUZZ_CHECK(a != 0 && (a & (a - 1)) == 0);
    for (int64_t i = 0; i < gguf_kv_count(f); i++) fuzz_kv(f, i);
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char name[256];
        FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS && t->nbytes > 0);
        const uint8_t *p = t->data;
        FUZZ_CHECK(p >= data && p + t->nbytes <= data + size);
        fuzz_touch(t->data, t->nbytes);
        fuzz_touch(t->name.ptr, t->name.len);
        if (fuzz_cstr(t->name, name, sizeof name)) FUZZ_CHECK(gguf_find_tensor(f, name) == t);
    }
    model_hparams hp;
    if (model_hparams_read(f, &hp) == SP_OK) FUZZ_CHECK(hp.n_heads % hp.n_kv_heads == 0 && hp.n_vocab > 0);
    tok_vocab *vocab;
    if (tok_vocab_load(f, &vocab) == SP_OK) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        static const char text[] = "Hello world <s> 123 \xc3\xa9";
        if (tok_encode(vocab, text, sizeof text - 1, true, true, &ids, &n_ids) == SP_OK)
            for (size_t i = 0; i < n_ids; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < tok_vocab_size(vocab));
        free(ids);
        tok_vocab_destroy(vocab);
    }
    gguf_close(f);
    return 0;
}

/* test_gguf.c: the GGUF reader on crafted files (every value type, nested arrays,
 * alignment, v2/v3, vocab-only), on one malformed file per check, and on the real
 * vocab files and models in the shared test data.
 */
#include <criterion/criterion.h>
#include <glob.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "tools/gguf_builder.h"
#include "tests/unit/testdata.h"

/* Opens b's bytes from a temporary file through gguf_open (the file is unlinked at
 * once; the mapping keeps the data). */
static sp_status open_file(const gguf_builder *b, gguf_file **f) {
    char path[64];
    cr_assert_eq(gb_write_temp(b, path, sizeof path), 0);
    sp_status st = gguf_open(path, f);
    unlink(path);
    return st;
}

/* Opens b's bytes in memory under the name "bad.gguf" and expects status want with a
 * message containing each of the given fragments. */
static void expect_error(const gguf_builder *b, sp_status want, const char *frag1, const char *frag2) {
    gguf_file *f = NULL;
    sp_status st = gguf_open_memory(b->buf, b->len, "bad.gguf", &f);
    const char *msg = sp_last_error();
    cr_assert_eq(st, want, "status %d (%s), want %d", st, msg, want);
    cr_assert_null(f);
    cr_assert(strncmp(msg, "bad.gguf: ", 10) == 0, "message does not name the file: %s", msg);
    cr_assert(strstr(msg, frag1), "message lacks \"%s\": %s", frag1, msg);
    if (frag2) cr_assert(strstr(msg, frag2), "message lacks \"%s\": %s", frag2, msg);
}

static void expect_tensor_error(const gb_tensor *t, int n, uint64_t data, sp_status want, const char *frag1,
                                const char *frag2) {
    gguf_builder b;
    gb_init(&b);
    gb_model(&b, 3, t, n, data);
    expect_error(&b, want, frag1, frag2);
    gb_free(&b);
}

/* ---- valid files ------------------------------------------------------------------ */

static void build_every_type(gguf_builder *b, uint32_t version) {
    gb_header(b, version, 0, 19);
    gb_kv_u8(b, "t.u8", 200);
    gb_kv_i8(b, "t.i8", -100);
    gb_kv_u16(b, "t.u16", 60000);
    gb_kv_i16(b, "t.i16", -30000);
    gb_kv_u32(b, "t.u32", 4000000000u);
    gb_kv_i32(b, "t.i32", -2000000000);
    gb_kv_u64(b, "t.u64", 1ull << 40);
    gb_kv_i64(b, "t.i64", -(1ll << 40));
    gb_kv_f32(b, "t.f32", 1.5f);
    gb_kv_f64(b, "t.f64", 0.25);
    gb_kv_bool(b, "t.bool", 1);
    gb_kv_str(b, "t.str", "hello");
    gb_kv_arr(b, "t.arr_i32", GGUF_TYPE_INT32, 3);
    gb_u32(b, 1);
    gb_u32(b, (uint32_t)-2);
    gb_u32(b, 3);
    gb_kv_arr(b, "t.arr_str", GGUF_TYPE_STRING, 3);
    gb_str(b, "a");
    gb_str(b, "");
    gb_str(b, "ccc");
    gb_kv_arr(b, "t.arr_f32", GGUF_TYPE_FLOAT32, 2);
    gb_f32(b, 0.5f);
    gb_f32(b, -1.0f);
    gb_kv_arr(b, "t.arr_empty", GGUF_TYPE_UINT64, 0);
    gb_kv_arr(b, "t.nested", GGUF_TYPE_ARRAY, 2); /* [[1, 2], ["x"]] */
    gb_arr_header(b, GGUF_TYPE_UINT16, 2);
    gb_u16(b, 1);
    gb_u16(b, 2);
    gb_arr_header(b, GGUF_TYPE_STRING, 1);
    gb_str(b, "x");
    gb_kv_arr(b, "t.arr_bool", GGUF_TYPE_BOOL, 2);
    gb_u8(b, 1);
    gb_u8(b, 0);
    gb_kv_str(b, "t.last", "end"); /* ends unpadded: vocab-only style */
}

static void check_every_type(const gguf_file *f) {
    uint32_t u32;
    int64_t i64;
    float f32;
    bool bv;
    gguf_str s;
    cr_assert_eq(gguf_kv_count(f), 19);
    cr_assert_eq(gguf_tensor_count(f), 0);
    cr_assert_eq(gguf_alignment(f), 32);
    cr_assert_eq(gguf_get_u32(f, "t.u8", &u32), SP_OK);
    cr_assert_eq(u32, 200);
    cr_assert_eq(gguf_get_i64(f, "t.i8", &i64), SP_OK);
    cr_assert_eq(i64, -100);
    cr_assert_eq(gguf_get_u32(f, "t.u16", &u32), SP_OK);
    cr_assert_eq(u32, 60000);
    cr_assert_eq(gguf_get_i64(f, "t.i16", &i64), SP_OK);
    cr_assert_eq(i64, -30000);
    cr_assert_eq(gguf_get_u32(f, "t.u32", &u32), SP_OK);
    cr_assert_eq(u32, 4000000000u);
    cr_assert_eq(gguf_get_i64(f, "t.i32", &i64), SP_OK);
    cr_assert_eq(i64, -2000000000);
    cr_assert_eq(gguf_get_i64(f, "t.u64", &i64), SP_OK);
    cr_assert_eq(i64, 1ll << 40);
    cr_assert_eq(gguf_get_i64(f, "t.i64", &i64), SP_OK);
    cr_assert_eq(i64, -(1ll << 40));
    cr_assert_eq(gguf_get_f32(f, "t.f32", &f32), SP_OK);
    cr_assert_eq(f32, 1.5f);
    cr_assert_eq(gguf_get_f32(f, "t.f64", &f32), SP_OK);
    cr_assert_eq(f32, 0.25f);
    cr_assert_eq(gguf_get_bool(f, "t.bool", &bv), SP_OK);
    cr_assert(bv);
    cr_assert_eq(gguf_get_str(f, "t.str", &s), SP_OK);
    cr_assert(gguf_str_eq(s, "hello"));
    cr_assert_eq(gguf_get_str(f, "t.last", &s), SP_OK);
    cr_assert(gguf_str_eq(s, "end"));

    const void *data;
    uint64_t n;
    gguf_value_type et;
    cr_assert_eq(gguf_get_arr_data(f, "t.arr_i32", GGUF_TYPE_INT32, &data, &n), SP_OK);
    cr_assert_eq(n, 3);
    int32_t iv[3];
    memcpy(iv, data, sizeof iv);
    cr_assert(iv[0] == 1 && iv[1] == -2 && iv[2] == 3);
    cr_assert_eq(gguf_get_arr_data(f, "t.arr_f32", GGUF_TYPE_FLOAT32, &data, &n), SP_OK);
    float fv[2];
    memcpy(fv, data, sizeof fv);
    cr_assert(n == 2 && fv[0] == 0.5f && fv[1] == -1.0f);
    cr_assert_eq(gguf_get_arr_data(f, "t.arr_empty", GGUF_TYPE_UINT64, &data, &n), SP_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(gguf_get_arr(f, "t.arr_str", &et, &n), SP_OK);
    cr_assert(et == GGUF_TYPE_STRING && n == 3);
    cr_assert_eq(gguf_get_arr_str(f, "t.arr_str", 0, &s), SP_OK);
    cr_assert(gguf_str_eq(s, "a"));
    cr_assert_eq(gguf_get_arr_str(f, "t.arr_str", 1, &s), SP_OK);
    cr_assert(gguf_str_eq(s, ""));
    cr_assert_eq(gguf_get_arr_str(f, "t.arr_str", 2, &s), SP_OK);
    cr_assert(gguf_str_eq(s, "ccc"));
    cr_assert_eq(gguf_get_arr(f, "t.nested", &et, &n), SP_OK);
    cr_assert(et == GGUF_TYPE_ARRAY && n == 2);

    char buf[256];
    static const struct {
        const char *key, *text;
    } rendered[] = {
        {"t.u8", "200"},
        {"t.i8", "-100"},
        {"t.i64", "-1099511627776"},
        {"t.f32", "1.5"},
        {"t.bool", "true"},
        {"t.str", "\"hello\""},
        {"t.arr_i32", "[1, -2, 3]"},
        {"t.arr_str", "[\"a\", \"\", \"ccc\"]"},
        {"t.arr_empty", "[]"},
        {"t.nested", "[[1, 2], [\"x\"]]"},
        {"t.arr_bool", "[true, false]"},
    };
    for (size_t i = 0; i < sizeof rendered / sizeof rendered[0]; i++) {
        int64_t k = gguf_find_key(f, rendered[i].key);
        cr_assert_geq(k, 0, "%s", rendered[i].key);
        gguf_kv_format(f, k, buf, sizeof buf, 8);
        cr_assert_str_eq(buf, rendered[i].text, "%s", rendered[i].key);
    }
    cr_assert_eq(gguf_kv_type(f, gguf_find_key(f, "t.f64")), GGUF_TYPE_FLOAT64);
}

Test(gguf, opens_every_value_type_v3) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    build_every_type(&b, 3);
    cr_assert_eq(open_file(&b, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gguf_version(f), 3);
    check_every_type(f);
    gguf_close(f);
    gb_free(&b);
}

Test(gguf, opens_every_value_type_v2) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    build_every_type(&b, 2);
    cr_assert_eq(gguf_open_memory(b.buf, b.len, "v2.gguf", &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gguf_version(f), 2);
    cr_assert_str_eq(gguf_path(f), "v2.gguf");
    cr_assert_eq(gguf_file_size(f), b.len);
    check_every_type(f);
    gguf_close(f);
    gb_free(&b);
}

Test(gguf, opens_vocab_only_file_that_ends_unpadded) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_arr(&b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, 2);
    gb_str(&b, "a");
    gb_str(&b, "bc");
    cr_assert_neq(b.len % 32, 0);
    cr_assert_eq(open_file(&b, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gguf_tensor_count(f), 0);
    gguf_close(f);
    gb_free(&b);
}

Test(gguf, opens_header_only_file) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    gb_header(&b, 3, 0, 0);
    cr_assert_eq(open_file(&b, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gguf_kv_count(f), 0);
    cr_assert_eq(gguf_find_key(f, "general.architecture"), -1);
    gguf_close(f);
    gb_free(&b);
}

static const gb_tensor three_tensors[] = {
    {"token_embd.weight", 2, {64, 4}, QUANT_Q8_0, 0},     /* 2 blocks per row * 4 rows * 34 = 272 bytes */
    {"blk.0.attn_q.weight", 2, {32, 2}, QUANT_Q4_1, 288}, /* 2 * 20 = 40 bytes */
    {"output_norm.weight", 1, {8}, QUANT_F32, 352},       /* 32 bytes */
};

Test(gguf, opens_tensors_with_their_shapes_sizes_and_data) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    gb_model(&b, 3, three_tensors, 3, 384);
    cr_assert_eq(open_file(&b, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gguf_tensor_count(f), 3);
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    cr_assert_not_null(t);
    cr_assert(t->type == QUANT_Q8_0 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 4 && t->ne[2] == 1 &&
              t->ne[3] == 1);
    cr_assert_eq(t->nbytes, 272);
    t = gguf_tensor_at(f, 1);
    cr_assert(gguf_str_eq(t->name, "blk.0.attn_q.weight"));
    cr_assert_eq(t->nbytes, 40);
    cr_assert_eq(t->offset, 288);
    const uint8_t *data_start = (const uint8_t *)gguf_tensor_at(f, 0)->data;
    cr_assert_eq((const uint8_t *)t->data - data_start, 288);
    cr_assert_eq(((const uint8_t *)t->data)[1], (uint8_t)(289 * 7));
    t = gguf_find_tensor(f, "output_norm.weight");
    cr_assert_eq(t->nbytes, 32);
    cr_assert_null(gguf_find_tensor(f, "missing.weight"));
    cr_assert_null(gguf_find_tensor(f, "output_norm"));
    gguf_close(f);
    gb_free(&b);
}

Test(gguf, honours_general_alignment) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    gb_header(&b, 3, 2, 2);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_kv_str(&b, "general.architecture", "test");
    int64_t ne[1] = {4};
    gb_tensor_info(&b, "a", 1, ne, QUANT_F32, 0);
    gb_tensor_info(&b, "b", 1, ne, QUANT_F32, 64);
    gb_pad(&b, 64);
    size_t data_start = b.len;
    gb_zeros(&b, 64);
    gb_f32(&b, 42.0f);
    gb_zeros(&b, 12);
    cr_assert_eq(open_file(&b, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gguf_alignment(f), 64);
    float v;
    memcpy(&v, gguf_find_tensor(f, "b")->data, 4);
    cr_assert_eq(v, 42.0f);
    cr_assert_eq((const uint8_t *)gguf_find_tensor(f, "b")->data - (const uint8_t *)gguf_find_tensor(f, "a")->data, 64);
    cr_assert_eq(data_start % 64, 0);
    gguf_close(f);
    gb_free(&b);
}

Test(gguf, getters_report_missing_keys_and_wrong_types_by_name) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    build_every_type(&b, 3);
    cr_assert_eq(gguf_open_memory(b.buf, b.len, "m.gguf", &f), SP_OK);
    uint32_t u32;
    int64_t i64;
    float f32;
    bool bv;
    gguf_str s;
    const void *data;
    uint64_t n;
    cr_assert_eq(gguf_get_u32(f, "llama.block_count", &u32), SP_ERR_NOT_FOUND);
    cr_assert_str_eq(sp_last_error(), "m.gguf: key llama.block_count not found");
    cr_assert_eq(gguf_get_u32(f, "t.i8", &u32), SP_ERR_FORMAT);
    cr_assert_str_eq(sp_last_error(), "m.gguf: key t.i8: value -100 does not fit uint32");
    cr_assert_eq(gguf_get_u32(f, "t.u64", &u32), SP_ERR_FORMAT);
    cr_assert_eq(gguf_get_u32(f, "t.str", &u32), SP_ERR_FORMAT);
    cr_assert_str_eq(sp_last_error(), "m.gguf: key t.str: type string, want uint32");
    cr_assert_eq(gguf_get_i64(f, "t.f32", &i64), SP_ERR_FORMAT);
    cr_assert_eq(gguf_get_f32(f, "t.u32", &f32), SP_ERR_FORMAT);
    cr_assert_eq(gguf_get_bool(f, "t.u8", &bv), SP_ERR_FORMAT);
    cr_assert_eq(gguf_get_str(f, "t.arr_str", &s), SP_ERR_FORMAT);
    cr_assert_str_eq(sp_last_error(), "m.gguf: key t.arr_str: type array of string, want string");
    cr_assert_eq(gguf_get_arr_data(f, "t.arr_i32", GGUF_TYPE_UINT32, &data, &n), SP_ERR_FORMAT);
    cr_assert_str_eq(sp_last_error(), "m.gguf: key t.arr_i32: type array of int32, want array of uint32");
    cr_assert_eq(gguf_get_arr_data(f, "t.arr_str", GGUF_TYPE_STRING, &data, &n), SP_ERR_INVALID_ARG);
    cr_assert_eq(gguf_get_arr_str(f, "t.arr_str", 3, &s), SP_ERR_RANGE);
    cr_assert_str_eq(sp_last_error(), "m.gguf: key t.arr_str: index 3 out of range (3 items)");
    cr_assert_eq(gguf_get_arr_str(f, "t.arr_i32", 0, &s), SP_ERR_FORMAT);
    gguf_close(f);
    gb_free(&b);
}

Test(gguf, kv_format_quotes_shortens_and_abbreviates) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    gb_header(&b, 3, 0, 3);
    gb_kv_str(&b, "long", "0123456789012345678901234567890123456789012345678901234567890123456789");
    gb_kv_str(&b, "escapes", "a\"b\\c\nd\x01");
    gb_kv_arr(&b, "many", GGUF_TYPE_UINT32, 10);
    for (uint32_t i = 0; i < 10; i++) gb_u32(&b, i);
    cr_assert_eq(gguf_open_memory(b.buf, b.len, "fmt.gguf", &f), SP_OK, "%s", sp_last_error());
    char buf[128];
    gguf_kv_format(f, 0, buf, sizeof buf, 8);
    cr_assert_str_eq(buf, "\"012345678901234567890123456789012345678901234567...\" (70 bytes)");
    gguf_kv_format(f, 1, buf, sizeof buf, 8);
    cr_assert_str_eq(buf, "\"a\\\"b\\\\c\\nd\\x01\"");
    gguf_kv_format(f, 2, buf, sizeof buf, 3);
    cr_assert_str_eq(buf, "[0, 1, 2, ... (10 items)]");
    gguf_kv_format(f, 2, buf, sizeof buf, 0);
    cr_assert_str_eq(buf, "[... (10 items)]");
    gguf_kv_format(f, 2, buf, 10, 8); /* too small: cut short, still terminated */
    cr_assert_eq(strlen(buf), 9);
    cr_assert_str_eq(buf + 6, "...");
    gguf_close(f);
    gb_free(&b);
}

Test(gguf, indexes_large_string_arrays) {
    enum { N = 100000 };
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_arr(&b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, N);
    char tok[32];
    for (int i = 0; i < N; i++) {
        snprintf(tok, sizeof tok, "tok%d", i);
        gb_str(&b, tok);
    }
    cr_assert_eq(gguf_open_memory(b.buf, b.len, "big.gguf", &f), SP_OK, "%s", sp_last_error());
    gguf_str s;
    for (int i = N - 1; i >= 0; i -= 997) {
        snprintf(tok, sizeof tok, "tok%d", i);
        cr_assert_eq(gguf_get_arr_str(f, "tokenizer.ggml.tokens", (uint64_t)i, &s), SP_OK);
        cr_assert(gguf_str_eq(s, tok));
    }
    gguf_close(f);
    gb_free(&b);
}

/* ---- malformed files -------------------------------------------------------------- */

Test(gguf, rejects_wrong_magic) {
    gguf_builder b;
    gb_init(&b);
    gb_bytes(&b, "GGML", 4);
    gb_u32(&b, 3);
    gb_zeros(&b, 16);
    expect_error(&b, SP_ERR_FORMAT, "not a GGUF file", "47 47 4d 4c");
    gb_free(&b);
}

Test(gguf, rejects_version_1) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 1, 0, 0);
    expect_error(&b, SP_ERR_FORMAT, "GGUF version 1 is not supported", NULL);
    gb_free(&b);
}

Test(gguf, rejects_unknown_version) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 4, 0, 0);
    expect_error(&b, SP_ERR_FORMAT, "GGUF version 4 is not supported", NULL);
    gb_free(&b);
}

Test(gguf, rejects_big_endian_file) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 0x03000000u, 0, 0);
    expect_error(&b, SP_ERR_FORMAT, "big-endian", NULL);
    gb_free(&b);
}

Test(gguf, rejects_file_truncated_at_every_byte) {
    gguf_builder b;
    gb_init(&b);
    gb_model(&b, 3, three_tensors, 3, 384);
    for (size_t len = 0; len < b.len; len++) {
        gguf_file *f = NULL;
        /* a fresh copy of exactly len bytes, so ASan sees any read past the end */
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, b.buf, len);
        sp_status st = gguf_open_memory(copy, len, "cut.gguf", &f);
        const char *msg = sp_last_error();
        cr_assert_eq(st, SP_ERR_FORMAT, "length %zu: status %d", len, st);
        cr_assert(strstr(msg, "cut.gguf: ") == msg, "%s", msg);
        cr_assert(strstr(msg, "past end of file") || strstr(msg, "too short") || strstr(msg, "could hold"),
                  "length %zu: %s", len, msg);
        free(copy);
    }
    gb_free(&b);
}

Test(gguf, rejects_empty_file_and_reports_missing_file) {
    gguf_builder b;
    gguf_file *f;
    gb_init(&b);
    cr_assert_eq(open_file(&b, &f), SP_ERR_FORMAT);
    cr_assert(strstr(sp_last_error(), "too short"), "%s", sp_last_error());
    cr_assert_eq(gguf_open("/nonexistent/model.gguf", &f), SP_ERR_IO);
    cr_assert(strstr(sp_last_error(), "/nonexistent/model.gguf: cannot open"), "%s", sp_last_error());
    cr_assert_eq(gguf_open("/tmp", &f), SP_ERR_IO);
    cr_assert(strstr(sp_last_error(), "not a regular file"), "%s", sp_last_error());
}

Test(gguf, rejects_absurd_n_kv) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1000000);
    gb_kv_u32(&b, "a", 1);
    expect_error(&b, SP_ERR_FORMAT, "n_kv 1000000 is more than the 17 remaining bytes could hold", NULL);
    gb_free(&b);
    gb_header(&b, 3, 0, UINT64_MAX);
    expect_error(&b, SP_ERR_FORMAT, "n_kv 18446744073709551615", NULL);
    gb_free(&b);
}

Test(gguf, rejects_absurd_n_tensors) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 1ull << 62, 0);
    gb_zeros(&b, 100);
    expect_error(&b, SP_ERR_FORMAT, "n_tensors 4611686018427387904 is more than", NULL);
    gb_free(&b);
}

Test(gguf, rejects_key_length_past_end) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, UINT64_MAX - 3);
    gb_bytes(&b, "abcdef", 6);
    expect_error(&b, SP_ERR_FORMAT, "kv 0: key length 18446744073709551612 at byte 24 past end of file (size 38)",
                 NULL);
    gb_free(&b);
}

Test(gguf, rejects_string_value_past_end) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.name", GGUF_TYPE_STRING);
    gb_u64(&b, 100);
    gb_bytes(&b, "short", 5);
    expect_error(&b, SP_ERR_FORMAT, "key general.name: string length 100", "past end of file");
    gb_free(&b);
}

Test(gguf, rejects_string_array_element_past_end) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_arr(&b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, 2);
    gb_str(&b, "ok");
    gb_u64(&b, 1000);
    expect_error(&b, SP_ERR_FORMAT, "key tokenizer.ggml.tokens: string length 1000", NULL);
    gb_free(&b);
}

Test(gguf, rejects_array_count_past_end) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_arr(&b, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, 1ull << 62);
    gb_zeros(&b, 16);
    expect_error(&b, SP_ERR_FORMAT, "key tokenizer.ggml.scores: array length 4611686018427387904 is more than", NULL);
    gb_free(&b);
}

Test(gguf, rejects_unknown_value_types) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "x.y", (gguf_value_type)13);
    gb_zeros(&b, 8);
    expect_error(&b, SP_ERR_FORMAT, "key x.y: unknown value type 13", NULL);
    gb_free(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_arr(&b, "x.z", (gguf_value_type)99, 1);
    gb_zeros(&b, 8);
    expect_error(&b, SP_ERR_FORMAT, "key x.z: unknown array element type 99", NULL);
    gb_free(&b);
}

Test(gguf, rejects_arrays_nested_too_deep) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 1);
    gb_kv_arr(&b, "deep", GGUF_TYPE_ARRAY, 1);
    for (int i = 0; i < 100; i++) gb_arr_header(&b, GGUF_TYPE_ARRAY, 1);
    gb_arr_header(&b, GGUF_TYPE_UINT8, 0);
    expect_error(&b, SP_ERR_FORMAT, "key deep: arrays nested deeper than", NULL);
    gb_free(&b);
}

Test(gguf, rejects_duplicate_keys) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 0, 3);
    gb_kv_u32(&b, "llama.block_count", 5);
    gb_kv_str(&b, "general.name", "x");
    gb_kv_u32(&b, "llama.block_count", 6);
    expect_error(&b, SP_ERR_FORMAT, "key llama.block_count: duplicate key (kv 0 and kv 2)", NULL);
    gb_free(&b);
}

Test(gguf, rejects_bad_alignment) {
    static const uint32_t bad[] = {0, 3, 48};
    gguf_builder b;
    gb_init(&b);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gb_header(&b, 3, 0, 1);
        gb_kv_u32(&b, "general.alignment", bad[i]);
        expect_error(&b, SP_ERR_FORMAT, "key general.alignment", "not a nonzero power of two");
        gb_free(&b);
    }
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.alignment", "32");
    expect_error(&b, SP_ERR_FORMAT, "key general.alignment: type string, want uint32", NULL);
    gb_free(&b);
}

Test(gguf, rejects_duplicate_tensor_names) {
    gb_tensor t[] = {{"blk.0.w", 1, {8}, QUANT_F32, 0}, {"blk.0.w", 1, {8}, QUANT_F32, 32}};
    expect_tensor_error(t, 2, 64, SP_ERR_FORMAT, "tensor blk.0.w: duplicate tensor name (tensors 0 and 1)", NULL);
}

Test(gguf, rejects_zero_n_dims) {
    gb_tensor t[] = {{"blk.0.w", 0, {8}, QUANT_F32, 0}};
    expect_tensor_error(t, 1, 32, SP_ERR_FORMAT, "tensor blk.0.w: n_dims 0, want 1..4", NULL);
}

Test(gguf, rejects_more_than_four_dims) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 1, 0);
    int64_t ne[5] = {1, 1, 1, 1, 1};
    gb_tensor_info(&b, "blk.0.w", 5, ne, QUANT_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 32);
    expect_error(&b, SP_ERR_FORMAT, "tensor blk.0.w: n_dims 5, want 1..4", NULL);
    gb_free(&b);
}

Test(gguf, rejects_negative_dimension) {
    gb_tensor t[] = {{"blk.1.w", 2, {8, -4}, QUANT_F32, 0}};
    expect_tensor_error(t, 1, 32, SP_ERR_FORMAT, "tensor blk.1.w: dimension 1 is -4, want > 0", NULL);
}

Test(gguf, rejects_zero_dimension) {
    gb_tensor t[] = {{"blk.1.w", 2, {0, 4}, QUANT_F32, 0}};
    expect_tensor_error(t, 1, 32, SP_ERR_FORMAT, "tensor blk.1.w: dimension 0 is 0, want > 0", NULL);
}

Test(gguf, rejects_overflowing_dimensions) {
    gb_tensor t[] = {{"huge", 3, {1ll << 32, 1ll << 31, 4}, QUANT_F32, 0}};
    expect_tensor_error(t, 1, 32, SP_ERR_FORMAT, "tensor huge: element count overflows", NULL);
    gb_tensor u[] = {{"huge", 2, {1ll << 32, 1ll << 30}, QUANT_F32, 0}}; /* elements fit, bytes do not */
    expect_tensor_error(u, 1, 32, SP_ERR_FORMAT, "tensor huge: data size overflows", NULL);
}

Test(gguf, rejects_unknown_tensor_type_id) {
    gb_tensor t[] = {{"blk.0.w", 1, {32}, 1000, 0}};
    expect_tensor_error(t, 1, 32, SP_ERR_FORMAT, "tensor blk.0.w: unknown type id 1000", NULL);
}

Test(gguf, reports_type_without_known_size_as_unsupported) {
    gb_tensor t[] = {{"blk.0.w", 1, {32}, 4, 0}}; /* id 4 (removed Q4_2): valid range, no size */
    expect_tensor_error(t, 1, 32, SP_ERR_UNSUPPORTED, "tensor blk.0.w: type id 4 not supported", NULL);
}

Test(gguf, rejects_rows_that_are_not_whole_blocks) {
    gb_tensor t[] = {{"blk.0.w", 2, {33, 2}, QUANT_Q4_1, 0}};
    expect_tensor_error(t, 1, 96, SP_ERR_FORMAT,
                        "tensor blk.0.w: row of 33 elements is not a whole number of Q4_1 blocks", NULL);
}

Test(gguf, rejects_unaligned_tensor_offset) {
    gb_tensor t[] = {{"blk.0.w", 1, {4}, QUANT_F32, 0}, {"blk.1.w", 1, {4}, QUANT_F32, 17}};
    expect_tensor_error(t, 2, 64, SP_ERR_FORMAT, "tensor blk.1.w: offset 17 is not a multiple of the alignment 32",
                        NULL);
}

Test(gguf, rejects_tensor_past_end) {
    gguf_builder b;
    gb_init(&b);
    gb_tensor t[] = {{"blk.3.attn_q.weight", 2, {32, 2}, QUANT_F32, 64}}; /* 256 bytes at 64, only 128 present */
    gb_model(&b, 3, t, 1, 128);
    size_t data_start = b.len - 128;
    char want[160];
    snprintf(want, sizeof want, "bad.gguf: tensor blk.3.attn_q.weight: data [%zu, %zu) past end of file (size %zu)",
             data_start + 64, data_start + 320, b.len);
    expect_error(&b, SP_ERR_FORMAT, want, NULL);
    cr_assert_str_eq(sp_last_error(), want);
    gb_free(&b);
    gb_tensor u[] = {{"far", 1, {8}, QUANT_F32, UINT64_MAX - 31}}; /* offset overflows */
    expect_tensor_error(u, 1, 32, SP_ERR_FORMAT, "tensor far: data at offset 18446744073709551584", "past end of file");
}

Test(gguf, rejects_tensor_in_unpadded_file_without_data) {
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, 1, 0);
    int64_t ne[1] = {8};
    gb_tensor_info(&b, "w", 1, ne, QUANT_F32, 0);
    expect_error(&b, SP_ERR_FORMAT, "tensor w: data [", "past end of file");
    gb_free(&b);
}

Test(gguf, rejects_overlapping_tensors) {
    gb_tensor t[] = {{"a", 1, {16}, QUANT_F32, 0}, {"b", 1, {8}, QUANT_F32, 96}, {"c", 1, {8}, QUANT_F32, 32}};
    expect_tensor_error(t, 3, 128, SP_ERR_FORMAT, "tensor c: data [", "overlaps tensor a [");
}

/* ---- real files ------------------------------------------------------------------- */

Test(gguf, opens_every_vocab_file) {
    char pattern[512];
    glob_t g;
    testdata_path(pattern, sizeof pattern, "vocab/*.gguf");
    if (glob(pattern, 0, NULL, &g) != 0) cr_skip_test("no vocab files at %s", pattern);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        gguf_file *f;
        cr_assert_eq(gguf_open(g.gl_pathv[i], &f), SP_OK, "%s", sp_last_error());
        cr_assert_eq(gguf_tensor_count(f), 0);
        uint64_t n;
        gguf_value_type et;
        gguf_str s, model;
        cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n), SP_OK, "%s", g.gl_pathv[i]);
        cr_assert(et == GGUF_TYPE_STRING && n >= 32000);
        cr_assert_eq(gguf_get_arr_str(f, "tokenizer.ggml.tokens", n - 1, &s), SP_OK);
        cr_assert_eq(gguf_get_str(f, "tokenizer.ggml.model", &model), SP_OK);
        if (strstr(g.gl_pathv[i], "gpt-2")) cr_assert_eq(n, 50257);
        char buf[256];
        for (int64_t k = 0; k < gguf_kv_count(f); k++) gguf_kv_format(f, k, buf, sizeof buf, 4);
        gguf_close(f);
    }
    globfree(&g);
}

Test(gguf, opens_stories260K) {
    char path[512];
    gguf_file *f;
    testdata_path(path, sizeof path, "models/stories260K.gguf");
    TESTDATA_REQUIRE(path);
    cr_assert_eq(gguf_open(path, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gguf_tensor_count(f), 48);
    uint32_t blocks;
    cr_assert_eq(gguf_get_u32(f, "llama.block_count", &blocks), SP_OK);
    cr_assert_eq(blocks, 5);
    uint64_t n;
    gguf_value_type et;
    cr_assert_eq(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n), SP_OK);
    cr_assert_eq(n, 512);
    gguf_str s;
    cr_assert_eq(gguf_get_arr_str(f, "tokenizer.ggml.tokens", 2, &s), SP_OK);
    cr_assert(gguf_str_eq(s, "</s>"));
    float eps;
    cr_assert_eq(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps), SP_OK);
    cr_assert_float_eq(eps, 1e-5f, 1e-9f);
    const gguf_tensor *t = gguf_find_tensor(f, "blk.4.ffn_down.weight");
    cr_assert_not_null(t);
    cr_assert(t->type == QUANT_F32 && t->ne[0] == 172 && t->ne[1] == 64);
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_tensor_count(f); i++) total += gguf_tensor_at(f, i)->nbytes;
    cr_assert_eq(total, 1171200);
    gguf_close(f);
}

Test(gguf, opens_default_model_fast) {
    const char *path = testdata_default_model();
    TESTDATA_REQUIRE(path);
    gguf_file *f;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(gguf_open(path, &f), SP_OK, "%s", sp_last_error());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    cr_assert_lt(ms, 1000.0, "open took %.1f ms", ms); /* milliseconds normally; loose for sanitizers and busy CPUs */
    cr_assert_eq(gguf_tensor_count(f), 272);
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    cr_assert_not_null(t);
    cr_assert_eq(t->type, QUANT_Q8_0);
    cr_assert(t->n_dims == 2 && t->ne[0] == 576 && t->ne[1] == 49152);
    cr_assert_eq(t->nbytes, 576 / 32 * 34 * 49152);
    gguf_str s;
    cr_assert_eq(gguf_get_str(f, "general.architecture", &s), SP_OK);
    cr_assert(gguf_str_eq(s, "llama"));
    gguf_close(f);
}

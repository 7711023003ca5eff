/* gguf_builder.h: a GGUF file built in memory, for tests (to craft valid files and
 * malformed ones byte by byte) and for tools/mkmodel.c (the header of a synthetic model).
 *
 * A thin layer over gguf/gguf_write.c's in-memory writer, which encodes every field:
 * the low-level calls (gb_u32, gb_str, ...) append raw little-endian fields, so a test
 * can write any header, count or length it likes; the helpers above them (gb_kv_*,
 * gb_tensor_info, gb_model) write the common well-formed pieces. The bytes are b.buf
 * (b.len of them). An allocation failure is sticky (b.failed): gb_write_temp then
 * fails, and a test reading b.buf sees a short file.
 */
#ifndef SP_TOOLS_GGUF_BUILDER_H
#define SP_TOOLS_GGUF_BUILDER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"

typedef gguf_writer gguf_builder;

static inline void gb_init(gguf_builder *b) {
    gguf_write_begin_memory(b);
}

static inline void gb_free(gguf_builder *b) {
    free(b->buf);
    gb_init(b);
}

static inline void gb_bytes(gguf_builder *b, const void *p, size_t n) {
    gguf_write_bytes(b, p, n);
}

static inline void gb_u8(gguf_builder *b, uint8_t v) {
    gguf_write_uint(b, v, 1);
}
static inline void gb_u16(gguf_builder *b, uint16_t v) {
    gguf_write_uint(b, v, 2);
}
static inline void gb_u32(gguf_builder *b, uint32_t v) {
    gguf_write_uint(b, v, 4);
}
static inline void gb_u64(gguf_builder *b, uint64_t v) {
    gguf_write_uint(b, v, 8);
}

static inline void gb_f32(gguf_builder *b, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    gb_u32(b, bits);
}

static inline void gb_f64(gguf_builder *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    gb_u64(b, bits);
}

static inline void gb_zeros(gguf_builder *b, size_t n) {
    gguf_write_zeros(b, n);
}

/* Pads with zeros to a multiple of alignment. */
static inline void gb_pad(gguf_builder *b, size_t alignment) {
    gguf_write_pad(b, alignment);
}

/* A GGUF string: u64 length, then the bytes (no NUL). */
static inline void gb_strn(gguf_builder *b, const char *s, size_t n) {
    gguf_write_string(b, s, n);
}

static inline void gb_str(gguf_builder *b, const char *s) {
    gguf_write_string(b, s, strlen(s));
}

static inline void gb_header(gguf_builder *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gguf_write_header(b, version, n_tensors, n_kv);
}

/* Key and value type; the caller writes the value. */
static inline void gb_key(gguf_builder *b, const char *key, gguf_value_type type) {
    gguf_write_key(b, key, type);
}

/* One scalar key-value pair: the key, its type, the value in bytes bytes. */
static inline void gb_kv_scalar(gguf_builder *b, const char *k, gguf_value_type type, uint64_t bits, size_t bytes) {
    gguf_write_key(b, k, type);
    gguf_write_uint(b, bits, bytes);
}

static inline void gb_kv_u8(gguf_builder *b, const char *k, uint8_t v) {
    gb_kv_scalar(b, k, GGUF_TYPE_UINT8, v, 1);
}
static inline void gb_kv_i8(gguf_builder *b, const char *k, int8_t v) {
    gb_kv_scalar(b, k, GGUF_TYPE_INT8, (uint8_t)v, 1);
}
static inline void gb_kv_u16(gguf_builder *b, const char *k, uint16_t v) {
    gb_kv_scalar(b, k, GGUF_TYPE_UINT16, v, 2);
}
static inline void gb_kv_i16(gguf_builder *b, const char *k, int16_t v) {
    gb_kv_scalar(b, k, GGUF_TYPE_INT16, (uint16_t)v, 2);
}
static inline void gb_kv_u32(gguf_builder *b, const char *k, uint32_t v) {
    gguf_write_kv_u32(b, k, v);
}
static inline void gb_kv_i32(gguf_builder *b, const char *k, int32_t v) {
    gb_kv_scalar(b, k, GGUF_TYPE_INT32, (uint32_t)v, 4);
}
static inline void gb_kv_u64(gguf_builder *b, const char *k, uint64_t v) {
    gb_kv_scalar(b, k, GGUF_TYPE_UINT64, v, 8);
}
static inline void gb_kv_i64(gguf_builder *b, const char *k, int64_t v) {
    gb_kv_scalar(b, k, GGUF_TYPE_INT64, (uint64_t)v, 8);
}
static inline void gb_kv_f32(gguf_builder *b, const char *k, float v) {
    gb_key(b, k, GGUF_TYPE_FLOAT32);
    gb_f32(b, v);
}
static inline void gb_kv_f64(gguf_builder *b, const char *k, double v) {
    gb_key(b, k, GGUF_TYPE_FLOAT64);
    gb_f64(b, v);
}
static inline void gb_kv_bool(gguf_builder *b, const char *k, int v) {
    gb_kv_scalar(b, k, GGUF_TYPE_BOOL, (uint8_t)v, 1);
}
static inline void gb_kv_str(gguf_builder *b, const char *k, const char *v) {
    gb_key(b, k, GGUF_TYPE_STRING);
    gb_str(b, v);
}

/* Array header (element type, count) without a key: for the elements of nested arrays. */
static inline void gb_arr_header(gguf_builder *b, gguf_value_type elem_type, uint64_t n) {
    gguf_write_array_header(b, elem_type, n);
}

/* Key of array type and the array header; the caller writes the n elements. */
static inline void gb_kv_arr(gguf_builder *b, const char *k, gguf_value_type elem_type, uint64_t n) {
    gguf_write_key(b, k, GGUF_TYPE_ARRAY);
    gguf_write_array_header(b, elem_type, n);
}

static inline void gb_tensor_info(gguf_builder *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                                  uint64_t offset) {
    gguf_write_tensor_info(b, name, strlen(name), n_dims, ne, type, offset);
}

typedef struct gb_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint32_t type;
    uint64_t offset;
} gb_tensor;

/* A whole model: header (version, n tensors, one kv general.architecture = "test"),
 * the tensor infos, padding to 32 and data_bytes of data where byte i is (i * 7) & 0xff. */
static inline void gb_model(gguf_builder *b, uint32_t version, const gb_tensor *t, int n, uint64_t data_bytes) {
    gb_header(b, version, (uint64_t)n, 1);
    gb_kv_str(b, "general.architecture", "test");
    for (int i = 0; i < n; i++) gb_tensor_info(b, t[i].name, t[i].n_dims, t[i].ne, t[i].type, t[i].offset);
    gb_pad(b, 32);
    for (uint64_t i = 0; i < data_bytes; i++) gb_u8(b, (uint8_t)(i * 7));
}

/* Writes the bytes to a new temporary file; its path goes into path (cap >= 32).
 * Returns 0 on success (-1 also when the build ran out of memory). The caller
 * unlinks it. */
static inline int gb_write_temp(const gguf_builder *b, char *path, size_t cap) {
    if (b->failed) return -1;
    snprintf(path, cap, "/tmp/spindle-gguf-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < b->len) {
        ssize_t n = write(fd, b->buf + done, b->len - done);
        if (n <= 0) break;
        done += (size_t)n;
    }
    close(fd);
    return done == b->len ? 0 : -1;
}

#endif

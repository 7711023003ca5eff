/* gguf.h: reader for GGUF v2/v3 model files.
 *
 * The file is memory-mapped read-only; every count, offset and size read from it
 * is checked against the file size with overflow-safe arithmetic before use, so a
 * malformed file yields SP_ERR_FORMAT with a message naming the file, the key or
 * tensor, and what is wrong (sp_last_error()), never a crash.
 *
 * Vocab-only files (no tensors, ending right after the metadata, not padded to the
 * alignment) are valid.
 *
 * Thread rules: a gguf_file is immutable after gguf_open; any thread may read it.
 */
#ifndef SP_GGUF_H
#define SP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"

typedef enum gguf_value_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} gguf_value_type;

#define GGUF_MAX_DIMS 4

/* A string inside the mapped file: not NUL-terminated. Borrowed from the gguf_file. */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t type;             /* quant_type id (see quant/quant.h) */
    uint32_t n_dims;           /* 1..GGUF_MAX_DIMS */
    int64_t ne[GGUF_MAX_DIMS]; /* elements per dim, ne[0] fastest; unused dims are 1 */
    uint64_t offset;           /* from the start of the data section */
    uint64_t nbytes;
    const void *data; /* into the mapping, borrowed until gguf_close */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Maps and validates path. On success *out is the caller's; free with gguf_close. */
sp_status gguf_open(const char *path, gguf_file **out);

/* Same checks on a buffer already in memory (for fuzzing and tests); name is used in
 * messages. The buffer is borrowed and must outlive the gguf_file. */
sp_status gguf_open_memory(const void *data, size_t size, const char *name, gguf_file **out);

void gguf_close(gguf_file *f);

const char *gguf_path(const gguf_file *f);
uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_alignment(const gguf_file *f);
uint64_t gguf_file_size(const gguf_file *f);

/* Metadata by index: 0 .. gguf_kv_count-1. */
int64_t gguf_kv_count(const gguf_file *f);
gguf_str gguf_kv_key(const gguf_file *f, int64_t i);
gguf_value_type gguf_kv_type(const gguf_file *f, int64_t i);
/* Index of key, or -1. */
int64_t gguf_find_key(const gguf_file *f, const char *key);

/* Typed getters by key. SP_ERR_NOT_FOUND when absent (message names the key),
 * SP_ERR_FORMAT when present with an incompatible type (message names the key, the
 * type found and the type wanted). Integer getters accept any integer type whose value
 * fits; float getters accept FLOAT32/FLOAT64. */
sp_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
sp_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
sp_status gguf_get_f32(const gguf_file *f, const char *key, float *out);
sp_status gguf_get_bool(const gguf_file *f, const char *key, bool *out);
sp_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Arrays: element type (for nested arrays GGUF_TYPE_ARRAY) and count. */
sp_status gguf_get_arr(const gguf_file *f, const char *key, gguf_value_type *elem_type, uint64_t *n);
/* Pointer to n elements of a fixed-size element type (not STRING/ARRAY), borrowed;
 * may be unaligned: read with memcpy. */
sp_status gguf_get_arr_data(const gguf_file *f, const char *key, gguf_value_type want_type, const void **data,
                            uint64_t *n);
/* Element i of a string array. O(1) after open (offsets indexed at open). */
sp_status gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i, gguf_str *out);

/* Generic access by kv index, for printing: value rendered as text into buf
 * (arrays abbreviated after max_items elements). */
void gguf_kv_format(const gguf_file *f, int64_t i, char *buf, size_t buflen, int max_items);

/* The i-th key-value pair exactly as the file encodes it (key, value type, value), for
 * copying it into another file (gguf_write.c): *data points into the mapping. */
void gguf_kv_raw(const gguf_file *f, int64_t i, const void **data, size_t *n);

/* Tensors. */
int64_t gguf_tensor_count(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i);
/* NULL when absent. */
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* true when s equals the NUL-terminated c string. */
bool gguf_str_eq(gguf_str s, const char *c);

const char *gguf_value_type_name(gguf_value_type t);

/* ---- writing (gguf_write.c): a GGUF v3 file, streamed ---------------------------------
 * gguf_write_begin writes the header; then exactly n_kv key-value pairs (gguf_write_kv_*),
 * then the n_tensors tensor infos with gguf_write_tensor_infos, then each tensor's bytes
 * in the same order with gguf_write_tensor_data (padded to the alignment). Errors are
 * sticky in the writer and reported by gguf_write_end, which closes the file.
 *
 * gguf_write_begin_memory writes into a growing buffer instead (buf, len), with no
 * header: the field writers below it (gguf_write_header, _key, _uint, _string, ...)
 * then write any header, count or length the caller likes, a malformed file's too
 * (tools/gguf_builder.h, for the tests and tools/mkmodel.c). */
typedef struct gguf_writer {
    FILE *out;        /* the file (gguf_write_begin); NULL once ended, or in memory */
    bool in_memory;   /* gguf_write_begin_memory: the bytes go into buf */
    const char *path; /* for messages */
    uint64_t alignment;
    uint8_t *buf; /* (len, cap) the bytes of an in-memory writer; owned (free()) */
    size_t len;   /* bytes so far */
    size_t cap;
    bool failed;
} gguf_writer;

/* A tensor to write: its name, type, shape; nbytes follows from them (quant_row_bytes). */
typedef struct gguf_write_tensor {
    gguf_str name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
} gguf_write_tensor;

sp_status gguf_write_begin(gguf_writer *w, const char *path, uint64_t alignment, int64_t n_tensors, int64_t n_kv);
void gguf_write_kv_raw(gguf_writer *w, const void *data, size_t n);
void gguf_write_kv_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_write_tensor_infos(gguf_writer *w, const gguf_write_tensor *t, int64_t n);
void gguf_write_tensor_data(gguf_writer *w, const void *data, size_t n);
/* Flushes and closes; SP_ERR_IO naming the file when anything failed. An in-memory
 * writer keeps its bytes (w->buf, the caller's to free): SP_ERR_NOMEM when one append
 * ran out of memory. */
sp_status gguf_write_end(gguf_writer *w);

/* An empty in-memory writer (alignment 32 for gguf_write_tensor_infos). */
void gguf_write_begin_memory(gguf_writer *w);
/* The fields, each as the format encodes it: the header (magic, version, counts); the
 * n low bytes of v little-endian (n <= 8); a string (u64 length, the bytes, no NUL); a
 * key and its value type (the caller writes the value); an array's element type and
 * count; one tensor info; n zero bytes; zeros to a multiple of alignment. */
void gguf_write_header(gguf_writer *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
void gguf_write_bytes(gguf_writer *w, const void *data, size_t n);
void gguf_write_uint(gguf_writer *w, uint64_t v, size_t n);
void gguf_write_string(gguf_writer *w, const char *s, size_t n);
void gguf_write_key(gguf_writer *w, const char *key, gguf_value_type type);
void gguf_write_array_header(gguf_writer *w, gguf_value_type elem_type, uint64_t n);
void gguf_write_tensor_info(gguf_writer *w, const char *name, size_t name_len, uint32_t n_dims, const int64_t *ne,
                            uint32_t type, uint64_t offset);
void gguf_write_zeros(gguf_writer *w, size_t n);
void gguf_write_pad(gguf_writer *w, uint64_t alignment);

#endif

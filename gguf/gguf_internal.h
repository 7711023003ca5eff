/* gguf_internal.h: shared between the GGUF reader's files (gguf.c, gguf_access.c),
 * never included from outside gguf/. */
#ifndef SP_GGUF_INTERNAL_H
#define SP_GGUF_INTERNAL_H

#include "gguf/gguf.h"

/* gguf.c opens, maps and validates a file and builds the name indexes; gguf_access.c
 * reads it afterwards. Every position below was checked against the file's size by
 * gguf_open, so readers use them without further checks. Immutable after open. */

typedef struct gguf_kv {
    gguf_str key;
    gguf_value_type type;
    uint64_t pos;              /* file offset of the value (arrays: of the first element) */
    gguf_value_type elem_type; /* arrays only */
    uint64_t n;                /* arrays only: element count */
    uint64_t *str_pos;         /* arrays of strings: file offset of each element; owned */
} gguf_kv;

/* Open-addressing table of indexes into kvs or tensors; slots hold index + 1, 0 = empty. */
typedef struct gguf_index {
    int64_t *slots;
    uint64_t mask;
} gguf_index;

struct gguf_file {
    char *name; /* owned; used in messages */
    const uint8_t *base;
    uint64_t size;
    void *map; /* non-NULL when gguf_open mapped the file */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_start;
    int64_t n_kv;
    gguf_kv *kvs;
    gguf_index kv_index;
    int64_t n_tensors;
    gguf_tensor *tensors;
    gguf_index tensor_index;
};

/* Encoded size in bytes of each value type; 0 for string and array (variable). Index
 * only with a type gguf__value_type_valid accepts. */
extern const size_t gguf__value_type_sizes[GGUF_TYPE_FLOAT64 + 1];
bool gguf__value_type_valid(uint32_t t);
/* Little-endian unsigned integer of n bytes (1..8) at p, which may be unaligned. */
uint64_t gguf__load_u(const uint8_t *p, size_t n);
/* Index slot of the key / tensor named (p, n): holds its index + 1, or 0 when absent. */
int64_t *gguf__kv_slot(const gguf_file *f, const char *p, uint64_t n);
int64_t *gguf__tensor_slot(const gguf_file *f, const char *p, uint64_t n);

#endif

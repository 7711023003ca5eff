/* gguf_write.c: writes a GGUF file front to back: `spindle quantize` streams a v3 file
 * (the header, key-value pairs copied raw from another file or written here, the
 * tensor infos with their offsets, then the aligned tensor data); the tests and
 * tools/mkmodel.c build one in memory field by field (tools/gguf_builder.h). The
 * layout is the one gguf.c reads: every integer little-endian, strings as a u64 length
 * and the bytes, each tensor's data at an offset from the data section that is a
 * multiple of the alignment. This file is the one place that encodes those fields.
 *
 * DESIGN (threads). A writer belongs to the thread that began it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

enum { GGUF_WRITE_MAGIC = 0x46554747 /* "GGUF" */, GGUF_WRITE_VERSION = 3, GGUF_WRITE_ALIGNMENT = 32 };

void gguf_write_bytes(gguf_writer *w, const void *data, size_t n) {
    if (w->failed || n == 0) return;
    bool ok;
    if (w->in_memory) {
        ok = sp_grow((void **)&w->buf, &w->cap, w->len + n, 1);
        if (ok) memcpy(w->buf + w->len, data, n);
    } else {
        ok = w->out && fwrite(data, 1, n, w->out) == n; /* no file: not open, or ended */
    }
    if (ok)
        w->len += n;
    else
        w->failed = true;
}

void gguf_write_uint(gguf_writer *w, uint64_t v, size_t n) {
    uint8_t b[8];
    if (n > sizeof b) n = sizeof b;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    gguf_write_bytes(w, b, n);
}

void gguf_write_string(gguf_writer *w, const char *s, size_t n) {
    gguf_write_uint(w, n, 8);
    gguf_write_bytes(w, s, n);
}

void gguf_write_zeros(gguf_writer *w, size_t n) {
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        gguf_write_bytes(w, zeros, k);
        n -= k;
    }
}

void gguf_write_pad(gguf_writer *w, uint64_t alignment) {
    gguf_write_zeros(w, (size_t)((alignment - w->len % alignment) % alignment));
}

void gguf_write_header(gguf_writer *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gguf_write_uint(w, GGUF_WRITE_MAGIC, 4);
    gguf_write_uint(w, version, 4);
    gguf_write_uint(w, n_tensors, 8);
    gguf_write_uint(w, n_kv, 8);
}

void gguf_write_key(gguf_writer *w, const char *key, gguf_value_type type) {
    gguf_write_string(w, key, strlen(key));
    gguf_write_uint(w, (uint32_t)type, 4);
}

void gguf_write_array_header(gguf_writer *w, gguf_value_type elem_type, uint64_t n) {
    gguf_write_uint(w, (uint32_t)elem_type, 4);
    gguf_write_uint(w, n, 8);
}

void gguf_write_tensor_info(gguf_writer *w, const char *name, size_t name_len, uint32_t n_dims, const int64_t *ne,
                            uint32_t type, uint64_t offset) {
    gguf_write_string(w, name, name_len);
    gguf_write_uint(w, n_dims, 4);
    for (uint32_t d = 0; d < n_dims; d++) gguf_write_uint(w, (uint64_t)ne[d], 8);
    gguf_write_uint(w, type, 4);
    gguf_write_uint(w, offset, 8);
}

sp_status gguf_write_begin(gguf_writer *w, const char *path, uint64_t alignment, int64_t n_tensors, int64_t n_kv) {
    *w = (gguf_writer){.path = path, .alignment = alignment ? alignment : GGUF_WRITE_ALIGNMENT};
    w->out = fopen(path, "wb");
    if (!w->out) {
        w->failed = true; /* every later write is refused, and so is the end */
        return sp_fail(SP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    gguf_write_header(w, GGUF_WRITE_VERSION, (uint64_t)n_tensors, (uint64_t)n_kv);
    return SP_OK;
}

void gguf_write_begin_memory(gguf_writer *w) {
    *w = (gguf_writer){.path = "(memory)", .alignment = GGUF_WRITE_ALIGNMENT, .in_memory = true};
}

void gguf_write_kv_raw(gguf_writer *w, const void *data, size_t n) {
    gguf_write_bytes(w, data, n);
}

void gguf_write_kv_u32(gguf_writer *w, const char *key, uint32_t v) {
    gguf_write_key(w, key, GGUF_TYPE_UINT32);
    gguf_write_uint(w, v, 4);
}

void gguf_write_tensor_infos(gguf_writer *w, const gguf_write_tensor *t, int64_t n) {
    uint64_t offset = 0;
    for (int64_t i = 0; i < n; i++) {
        gguf_write_tensor_info(w, t[i].name.ptr, t[i].name.len, t[i].n_dims, t[i].ne, t[i].type, offset);
        int64_t elements = 1;
        for (uint32_t d = 0; d < t[i].n_dims; d++) elements *= t[i].ne[d];
        uint64_t bytes = quant_row_bytes((quant_type)t[i].type, t[i].ne[0]) * (uint64_t)(elements / t[i].ne[0]);
        offset += (bytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    gguf_write_pad(w, w->alignment); /* the data section starts aligned */
}

void gguf_write_tensor_data(gguf_writer *w, const void *data, size_t n) {
    gguf_write_bytes(w, data, n);
    gguf_write_pad(w, w->alignment);
}

sp_status gguf_write_end(gguf_writer *w) {
    if (w->in_memory) return w->failed ? sp_fail(SP_ERR_NOMEM, "gguf: out of memory writing in memory") : SP_OK;
    if (!w->out) return sp_fail(SP_ERR_INVALID_ARG, "%s: the GGUF writer is not open", w->path);
    bool failed = w->failed;
    if (fclose(w->out) != 0) failed = true;
    w->out = NULL;
    if (failed) return sp_fail(SP_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return SP_OK;
}

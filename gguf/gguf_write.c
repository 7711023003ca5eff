/* gguf_write.c: writes a GGUF v3 file front to back (`spindle quantize`): the header,
 * key-value pairs (copied raw from another file, or written here), the tensor infos with
 * their offsets, then the aligned tensor data. The layout is the one gguf.c reads: every
 * integer little-endian, strings as a u64 length and the bytes, each tensor's data at an
 * offset from the data section that is a multiple of the alignment.
 *
 * DESIGN (threads). A writer belongs to the thread that began it.
 */
#include <errno.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

enum { GGUF_WRITE_MAGIC = 0x46554747 /* "GGUF" */, GGUF_WRITE_VERSION = 3 };

static void put(gguf_writer *w, const void *p, size_t n) {
    if (w->failed || n == 0) return;
    if (fwrite(p, 1, n, w->out) != n) w->failed = true;
    w->written += n;
}

static void put_u32(gguf_writer *w, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 4);
}

static void put_u64(gguf_writer *w, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, 8);
}

static void put_str(gguf_writer *w, const char *p, uint64_t n) {
    put_u64(w, n);
    put(w, p, (size_t)n);
}

static void pad_to_alignment(gguf_writer *w) {
    static const uint8_t zeros[256];
    uint64_t pad = (w->alignment - w->written % w->alignment) % w->alignment;
    while (pad > 0) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        put(w, zeros, n);
        pad -= n;
    }
}

sp_status gguf_write_begin(gguf_writer *w, const char *path, uint64_t alignment, int64_t n_tensors, int64_t n_kv) {
    *w = (gguf_writer){.path = path, .alignment = alignment ? alignment : 32};
    w->out = fopen(path, "wb");
    if (!w->out) return sp_fail(SP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    put_u32(w, GGUF_WRITE_MAGIC);
    put_u32(w, GGUF_WRITE_VERSION);
    put_u64(w, (uint64_t)n_tensors);
    put_u64(w, (uint64_t)n_kv);
    return SP_OK;
}

void gguf_write_kv_raw(gguf_writer *w, const void *data, size_t n) {
    put(w, data, n);
}

void gguf_write_kv_u32(gguf_writer *w, const char *key, uint32_t v) {
    put_str(w, key, strlen(key));
    put_u32(w, GGUF_TYPE_UINT32);
    put_u32(w, v);
}

void gguf_write_tensor_infos(gguf_writer *w, const gguf_write_tensor *t, int64_t n) {
    uint64_t offset = 0;
    for (int64_t i = 0; i < n; i++) {
        put_str(w, t[i].name.ptr, t[i].name.len);
        put_u32(w, t[i].n_dims);
        int64_t elements = 1;
        for (uint32_t d = 0; d < t[i].n_dims; d++) {
            put_u64(w, (uint64_t)t[i].ne[d]);
            elements *= t[i].ne[d];
        }
        put_u32(w, t[i].type);
        put_u64(w, offset);
        uint64_t bytes = quant_row_bytes((quant_type)t[i].type, t[i].ne[0]) * (uint64_t)(elements / t[i].ne[0]);
        offset += (bytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    pad_to_alignment(w); /* the data section starts aligned */
}

void gguf_write_tensor_data(gguf_writer *w, const void *data, size_t n) {
    put(w, data, n);
    pad_to_alignment(w);
}

sp_status gguf_write_end(gguf_writer *w) {
    bool failed = w->failed;
    if (w->out && fclose(w->out) != 0) failed = true;
    w->out = NULL;
    if (failed) return sp_fail(SP_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return SP_OK;
}

/* gguf.c: GGUF v2/v3 reader over a read-only mapping of the file.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv pairs of
 * (string key, u32 value type, value); n_tensors infos of (string name, u32 n_dims,
 * u64 ne[n_dims], u32 type, u64 offset); padding to the alignment; tensor data. A
 * string is a u64 length and that many bytes; an array is a u32 element type, a u64
 * count and the elements (arrays may nest).
 *
 * gguf_open validates everything once: every length, count and offset is checked
 * against the bytes that remain with overflow-safe arithmetic, so the getters can
 * read the mapping without further checks. Keys and tensor names are hashed for O(1)
 * lookup and duplicate detection; the elements of top-level string arrays are indexed
 * so gguf_get_arr_str is O(1). Vocab-only files (no tensors) may end right after the
 * metadata, without padding.
 *
 * This file opens, maps and validates a file and builds the indexes; the read side
 * after open (accessors, typed getters, rendering as text) is gguf_access.c. The
 * structs both share are in gguf_internal.h.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/assert.h"
#include "gguf/gguf_internal.h"
#include "quant/quant.h"

#define GGUF_MAGIC             "GGUF"
#define GGUF_HEADER_BYTES      24
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NESTING       16
/* Smallest possible encodings, used to bound counts before allocating. */
#define GGUF_MIN_KV_BYTES     13 /* empty key (8), type (4), one-byte value (1) */
#define GGUF_MIN_TENSOR_BYTES 32 /* empty name (8), n_dims (4), one dim (8), type (4), offset (8) */
#define GGUF_MIN_STRING_BYTES 8
#define GGUF_MIN_ARRAY_BYTES  12

/* Parsing cursor; ctx names what is being read ("key general.name") for messages. */
typedef struct gguf_reader {
    gguf_file *f;
    uint64_t pos;
    char ctx[192];
} gguf_reader;

const size_t gguf__value_type_sizes[GGUF_TYPE_FLOAT64 + 1] = {
    [GGUF_TYPE_UINT8] = 1,   [GGUF_TYPE_INT8] = 1,  [GGUF_TYPE_UINT16] = 2,  [GGUF_TYPE_INT16] = 2,
    [GGUF_TYPE_UINT32] = 4,  [GGUF_TYPE_INT32] = 4, [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
    [GGUF_TYPE_STRING] = 0,  [GGUF_TYPE_ARRAY] = 0, [GGUF_TYPE_UINT64] = 8,  [GGUF_TYPE_INT64] = 8,
    [GGUF_TYPE_FLOAT64] = 8,
};

bool gguf__value_type_valid(uint32_t t) {
    return t <= GGUF_TYPE_FLOAT64;
}

const char *gguf_value_type_name(gguf_value_type t) {
    static const char *const names[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
                                        "bool",  "string", "array",  "uint64", "int64",  "float64"};
    return gguf__value_type_valid((uint32_t)t) ? names[t] : "unknown";
}

/* Writes s into out for messages: at most 64 bytes, control bytes escaped. */
static const char *str_show(gguf_str s, char *out, size_t cap) {
    size_t o = 0;
    uint64_t shown = s.len < 64 ? s.len : 64;
    for (uint64_t i = 0; i < shown && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    if (shown < s.len && o + 4 < cap) o += (size_t)snprintf(out + o, cap - o, "...");
    out[o] = '\0';
    return out;
}

/* ---- little-endian reads (the mapping may be unaligned) ------------------------- */

uint64_t gguf__load_u(const uint8_t *p, size_t n) {
    uint64_t v = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n == 8) {
        memcpy(&v, p, 8);
        return v;
    }
#endif
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static sp_status reader_need(gguf_reader *r, uint64_t n, const char *what) {
    if (n <= r->f->size - r->pos) return SP_OK;
    return sp_fail(SP_ERR_FORMAT,
                   "%s: %s: %s at byte %" PRIu64 " (%" PRIu64 " bytes) past end of file (size %" PRIu64 ")", r->f->name,
                   r->ctx, what, r->pos, n, r->f->size);
}

static sp_status reader_u32(gguf_reader *r, const char *what, uint32_t *out) {
    sp_status st = reader_need(r, 4, what);
    if (st) return st;
    *out = (uint32_t)gguf__load_u(r->f->base + r->pos, 4);
    r->pos += 4;
    return SP_OK;
}

static sp_status reader_u64(gguf_reader *r, const char *what, uint64_t *out) {
    sp_status st = reader_need(r, 8, what);
    if (st) return st;
    *out = gguf__load_u(r->f->base + r->pos, 8);
    r->pos += 8;
    return SP_OK;
}

static sp_status reader_str(gguf_reader *r, const char *what, gguf_str *out) {
    uint64_t len;
    sp_status st = reader_u64(r, what, &len);
    if (st) return st;
    if (len > r->f->size - r->pos) {
        return sp_fail(SP_ERR_FORMAT,
                       "%s: %s: %s length %" PRIu64 " at byte %" PRIu64 " past end of file (size %" PRIu64 ")",
                       r->f->name, r->ctx, what, len, r->pos - 8, r->f->size);
    }
    out->ptr = (const char *)r->f->base + r->pos;
    out->len = len;
    r->pos += len;
    return SP_OK;
}

/* Checks that n elements of at least min_bytes each can fit in what remains. */
static sp_status reader_count(gguf_reader *r, uint64_t n, uint64_t min_bytes, const char *what) {
    uint64_t need;
    if (!__builtin_mul_overflow(n, min_bytes, &need) && need <= r->f->size - r->pos) return SP_OK;
    return sp_fail(SP_ERR_FORMAT, "%s: %s: %s %" PRIu64 " is more than the %" PRIu64 " remaining bytes could hold",
                   r->f->name, r->ctx, what, n, r->f->size - r->pos);
}

/* ---- hash index over keys / tensor names ----------------------------------------- */

static uint64_t hash_bytes(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static sp_status index_init(gguf_index *ix, int64_t n) {
    uint64_t cap = 8;
    while (cap < (uint64_t)n * 2) cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    return ix->slots ? SP_OK : sp_fail(SP_ERR_NOMEM, "out of memory for an index of %" PRId64 " names", n);
}

/* Slot holding a name equal to (p, n), or the empty slot where it would go. name_of
 * maps an index to its name. */
static int64_t *index_slot(const gguf_index *ix, const char *p, uint64_t n,
                           gguf_str (*name_of)(const gguf_file *, int64_t), const gguf_file *f) {
    uint64_t i = hash_bytes(p, n) & ix->mask;
    for (;; i = (i + 1) & ix->mask) {
        int64_t *slot = &ix->slots[i];
        if (*slot == 0) return slot;
        gguf_str s = name_of(f, *slot - 1);
        if (s.len == n && (n == 0 || memcmp(s.ptr, p, n) == 0)) return slot;
    }
}

static gguf_str kv_name(const gguf_file *f, int64_t i) {
    return f->kvs[i].key;
}

static gguf_str tensor_name(const gguf_file *f, int64_t i) {
    return f->tensors[i].name;
}

int64_t *gguf__kv_slot(const gguf_file *f, const char *p, uint64_t n) {
    return index_slot(&f->kv_index, p, n, kv_name, f);
}

int64_t *gguf__tensor_slot(const gguf_file *f, const char *p, uint64_t n) {
    return index_slot(&f->tensor_index, p, n, tensor_name, f);
}

/* ---- metadata --------------------------------------------------------------------- */

/* Skips one value of type t (validated), arrays recursively up to GGUF_MAX_NESTING. */
static sp_status value_skip(gguf_reader *r, uint32_t t, int depth);

static sp_status array_header(gguf_reader *r, int depth, uint32_t *elem_type, uint64_t *n) {
    sp_status st = reader_u32(r, "array element type", elem_type);
    if (st) return st;
    if (!gguf__value_type_valid(*elem_type)) {
        return sp_fail(SP_ERR_FORMAT, "%s: %s: unknown array element type %" PRIu32, r->f->name, r->ctx, *elem_type);
    }
    if (*elem_type == GGUF_TYPE_ARRAY && depth + 1 >= GGUF_MAX_NESTING) {
        return sp_fail(SP_ERR_FORMAT, "%s: %s: arrays nested deeper than %d levels", r->f->name, r->ctx,
                       GGUF_MAX_NESTING);
    }
    st = reader_u64(r, "array length", n);
    if (st) return st;
    uint64_t min = gguf__value_type_sizes[*elem_type];
    if (*elem_type == GGUF_TYPE_STRING) min = GGUF_MIN_STRING_BYTES;
    if (*elem_type == GGUF_TYPE_ARRAY) min = GGUF_MIN_ARRAY_BYTES;
    return reader_count(r, *n, min, "array length");
}

/* Skips the n elements of an array whose header array_header checked, recording the
 * position of each element in str_pos when given (arrays of strings). */
static sp_status array_elems(gguf_reader *r, uint32_t elem_type, uint64_t n, int depth, uint64_t *str_pos) {
    if (elem_type != GGUF_TYPE_STRING && elem_type != GGUF_TYPE_ARRAY) {
        r->pos += n * gguf__value_type_sizes[elem_type]; /* bounded by array_header */
        return SP_OK;
    }
    gguf_str s;
    for (uint64_t i = 0; i < n; i++) {
        if (str_pos) str_pos[i] = r->pos;
        sp_status st =
            elem_type == GGUF_TYPE_STRING ? reader_str(r, "string", &s) : value_skip(r, elem_type, depth + 1);
        if (st) return st;
    }
    return SP_OK;
}

static sp_status value_skip(gguf_reader *r, uint32_t t, int depth) {
    gguf_str s;
    uint32_t elem_type = 0;
    uint64_t n = 0;
    sp_status st;
    if (t == GGUF_TYPE_STRING) return reader_str(r, "string", &s);
    if (t == GGUF_TYPE_ARRAY) {
        st = array_header(r, depth, &elem_type, &n);
        return st ? st : array_elems(r, elem_type, n, depth, NULL);
    }
    st = reader_need(r, gguf__value_type_sizes[t], gguf_value_type_name((gguf_value_type)t));
    if (!st) r->pos += gguf__value_type_sizes[t];
    return st;
}

static sp_status kv_read(gguf_reader *r, int64_t i) {
    gguf_file *f = r->f;
    gguf_kv *kv = &f->kvs[i];
    char shown[96];
    snprintf(r->ctx, sizeof r->ctx, "kv %" PRId64, i);
    sp_status st = reader_str(r, "key", &kv->key);
    if (st) return st;
    snprintf(r->ctx, sizeof r->ctx, "key %s", str_show(kv->key, shown, sizeof shown));
    int64_t *slot = index_slot(&f->kv_index, kv->key.ptr, kv->key.len, kv_name, f);
    if (*slot) {
        return sp_fail(SP_ERR_FORMAT, "%s: %s: duplicate key (kv %" PRId64 " and kv %" PRId64 ")", f->name, r->ctx,
                       *slot - 1, i);
    }
    uint32_t t, elem_type;
    if ((st = reader_u32(r, "value type", &t))) return st;
    if (!gguf__value_type_valid(t))
        return sp_fail(SP_ERR_FORMAT, "%s: %s: unknown value type %" PRIu32, f->name, r->ctx, t);
    kv->type = (gguf_value_type)t;
    if (t != GGUF_TYPE_ARRAY) {
        kv->pos = r->pos;
        st = value_skip(r, t, 0);
    } else if (!(st = array_header(r, 0, &elem_type, &kv->n))) {
        kv->elem_type = (gguf_value_type)elem_type;
        kv->pos = r->pos;
        if (elem_type == GGUF_TYPE_STRING) {
            kv->str_pos = malloc((kv->n ? kv->n : 1) * sizeof *kv->str_pos); /* n bounded by the file size */
            if (!kv->str_pos) return sp_fail(SP_ERR_NOMEM, "%s: %s: out of memory", f->name, r->ctx);
        }
        st = array_elems(r, elem_type, kv->n, 0, kv->str_pos);
    }
    if (st) return st;
    *slot = i + 1;
    return SP_OK;
}

/* ---- tensor infos ----------------------------------------------------------------- */

static sp_status tensor_read(gguf_reader *r, int64_t i) {
    gguf_file *f = r->f;
    gguf_tensor *t = &f->tensors[i];
    char shown[96];
    snprintf(r->ctx, sizeof r->ctx, "tensor info %" PRId64, i);
    sp_status st = reader_str(r, "name", &t->name);
    if (st) return st;
    snprintf(r->ctx, sizeof r->ctx, "tensor %s", str_show(t->name, shown, sizeof shown));
    int64_t *slot = index_slot(&f->tensor_index, t->name.ptr, t->name.len, tensor_name, f);
    if (*slot) {
        return sp_fail(SP_ERR_FORMAT, "%s: %s: duplicate tensor name (tensors %" PRId64 " and %" PRId64 ")", f->name,
                       r->ctx, *slot - 1, i);
    }
    st = reader_u32(r, "n_dims", &t->n_dims);
    if (st) return st;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS) {
        return sp_fail(SP_ERR_FORMAT, "%s: %s: n_dims %" PRIu32 ", want 1..%d", f->name, r->ctx, t->n_dims,
                       GGUF_MAX_DIMS);
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && (st = reader_u64(r, "dimension", &ne))) return st;
        if ((int64_t)ne <= 0) {
            return sp_fail(SP_ERR_FORMAT, "%s: %s: dimension %" PRIu32 " is %" PRId64 ", want > 0", f->name, r->ctx, d,
                           (int64_t)ne);
        }
        t->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(n_elements, t->ne[d], &n_elements)) {
            return sp_fail(SP_ERR_FORMAT, "%s: %s: element count overflows (dimension %" PRIu32 " is %" PRId64 ")",
                           f->name, r->ctx, d, t->ne[d]);
        }
    }
    if ((st = reader_u32(r, "type", &t->type))) return st;
    if (t->type >= QUANT_TYPE_LIMIT) {
        return sp_fail(SP_ERR_FORMAT, "%s: %s: unknown type id %" PRIu32, f->name, r->ctx, t->type);
    }
    size_t block = quant_block_size(t->type), block_bytes = quant_block_bytes(t->type);
    if (block == 0 || block_bytes == 0) {
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: %s: type id %" PRIu32 " not supported (its data size is unknown)",
                       f->name, r->ctx, t->type);
    }
    if (t->ne[0] % (int64_t)block != 0) {
        return sp_fail(SP_ERR_FORMAT,
                       "%s: %s: row of %" PRId64 " elements is not a whole number of %s blocks (%zu each)", f->name,
                       r->ctx, t->ne[0], quant_type_name(t->type), block);
    }
    uint64_t n_blocks = (uint64_t)n_elements / block; /* rows hold whole blocks, so this is exact */
    if (__builtin_mul_overflow(n_blocks, (uint64_t)block_bytes, &t->nbytes)) {
        return sp_fail(SP_ERR_FORMAT, "%s: %s: data size overflows", f->name, r->ctx);
    }
    if ((st = reader_u64(r, "offset", &t->offset))) return st;
    if (t->offset % f->alignment != 0) {
        return sp_fail(SP_ERR_FORMAT, "%s: %s: offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, f->name,
                       r->ctx, t->offset, f->alignment);
    }
    *slot = i + 1;
    return SP_OK;
}

static int tensor_cmp_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Places every tensor inside the file and checks that no two overlap. */
static sp_status tensors_place(gguf_file *f) {
    char a[96], b[96];
    for (int64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t start, end;
        bool overflow = __builtin_add_overflow(f->data_start, t->offset, &start);
        overflow = overflow || __builtin_add_overflow(start, t->nbytes, &end);
        if (overflow || end > f->size) {
            if (overflow) {
                return sp_fail(SP_ERR_FORMAT,
                               "%s: tensor %s: data at offset %" PRIu64 " (%" PRIu64
                               " bytes) past end of file (size %" PRIu64 ")",
                               f->name, str_show(t->name, a, sizeof a), t->offset, t->nbytes, f->size);
            }
            return sp_fail(SP_ERR_FORMAT,
                           "%s: tensor %s: data [%" PRIu64 ", %" PRIu64 ") past end of file (size %" PRIu64 ")",
                           f->name, str_show(t->name, a, sizeof a), start, end, f->size);
        }
        t->data = f->base + start;
    }
    if (f->n_tensors < 2) return SP_OK;
    const gguf_tensor **order = malloc((size_t)f->n_tensors * sizeof *order);
    if (!order) return sp_fail(SP_ERR_NOMEM, "%s: out of memory sorting %" PRId64 " tensors", f->name, f->n_tensors);
    for (int64_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, tensor_cmp_offset);
    sp_status st = SP_OK;
    for (int64_t i = 1; i < f->n_tensors && !st; i++) {
        const gguf_tensor *p = order[i - 1], *t = order[i];
        if (t->offset < p->offset + p->nbytes) { /* both ends are inside the file: no overflow */
            uint64_t ps = f->data_start + p->offset, ts = f->data_start + t->offset;
            st = sp_fail(SP_ERR_FORMAT,
                         "%s: tensor %s: data [%" PRIu64 ", %" PRIu64 ") overlaps tensor %s [%" PRIu64 ", %" PRIu64 ")",
                         f->name, str_show(t->name, a, sizeof a), ts, ts + t->nbytes, str_show(p->name, b, sizeof b),
                         ps, ps + p->nbytes);
        }
    }
    free(order);
    return st;
}

/* ---- open / close ----------------------------------------------------------------- */

static sp_status header_read(gguf_reader *r, uint64_t *n_tensors, uint64_t *n_kv) {
    gguf_file *f = r->f;
    snprintf(r->ctx, sizeof r->ctx, "header");
    if (f->size < 4) {
        return sp_fail(SP_ERR_FORMAT, "%s: %" PRIu64 " bytes is too short for a GGUF header (%d bytes)", f->name,
                       f->size, GGUF_HEADER_BYTES);
    }
    if (memcmp(f->base, GGUF_MAGIC, 4) != 0) {
        return sp_fail(SP_ERR_FORMAT, "%s: not a GGUF file (magic %02x %02x %02x %02x, want \"GGUF\")", f->name,
                       f->base[0], f->base[1], f->base[2], f->base[3]);
    }
    r->pos = 4;
    sp_status st = reader_u32(r, "version", &f->version);
    if (st) return st;
    if (f->version == 1) {
        return sp_fail(SP_ERR_FORMAT, "%s: GGUF version 1 is not supported (only 2 and 3); convert the model again",
                       f->name);
    }
    if (f->version == 0x02000000u || f->version == 0x03000000u) {
        return sp_fail(SP_ERR_FORMAT, "%s: big-endian GGUF files are not supported", f->name);
    }
    if (f->version != 2 && f->version != 3) {
        return sp_fail(SP_ERR_FORMAT, "%s: GGUF version %" PRIu32 " is not supported (only 2 and 3)", f->name,
                       f->version);
    }
    if ((st = reader_u64(r, "n_tensors", n_tensors)) || (st = reader_u64(r, "n_kv", n_kv))) return st;
    if ((st = reader_count(r, *n_kv, GGUF_MIN_KV_BYTES, "n_kv"))) return st;
    if ((st = reader_count(r, *n_tensors, GGUF_MIN_TENSOR_BYTES, "n_tensors"))) return st;
    uint64_t kv_min = *n_kv * GGUF_MIN_KV_BYTES, tensor_min = *n_tensors * GGUF_MIN_TENSOR_BYTES; /* checked above */
    if (kv_min + tensor_min > f->size - r->pos) {
        return sp_fail(SP_ERR_FORMAT,
                       "%s: header: n_kv %" PRIu64 " and n_tensors %" PRIu64 " are more than the %" PRIu64
                       " remaining bytes could hold",
                       f->name, *n_kv, *n_tensors, f->size - r->pos);
    }
    return SP_OK;
}

static sp_status alignment_read(gguf_file *f) {
    int64_t v = GGUF_DEFAULT_ALIGNMENT;
    if (gguf_find_key(f, "general.alignment") >= 0) {
        uint32_t u = 0;
        sp_status st = gguf_get_u32(f, "general.alignment", &u);
        if (st) return st;
        v = u;
    }
    if (v == 0 || (v & (v - 1)) != 0) {
        return sp_fail(SP_ERR_FORMAT, "%s: key general.alignment: %" PRId64 " is not a nonzero power of two", f->name,
                       v);
    }
    f->alignment = (uint64_t)v;
    return SP_OK;
}

static sp_status file_parse(gguf_file *f) {
    gguf_reader r = {.f = f};
    uint64_t n_tensors = 0, n_kv = 0;
    sp_status st = header_read(&r, &n_tensors, &n_kv);
    if (st) return st;
    f->n_kv = (int64_t)n_kv; /* bounded by the file size */
    f->kvs = calloc(n_kv ? n_kv : 1, sizeof *f->kvs);
    if (!f->kvs || (st = index_init(&f->kv_index, f->n_kv))) return sp_fail(SP_ERR_NOMEM, "%s: out of memory", f->name);
    for (int64_t i = 0; i < f->n_kv; i++) {
        if ((st = kv_read(&r, i))) return st;
    }
    if ((st = alignment_read(f))) return st;
    f->n_tensors = (int64_t)n_tensors;
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors || (st = index_init(&f->tensor_index, f->n_tensors))) {
        return sp_fail(SP_ERR_NOMEM, "%s: out of memory", f->name);
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        if ((st = tensor_read(&r, i))) return st;
    }
    /* Vocab-only files may end here unpadded: data_start may lie past the end then. */
    uint64_t pad = (f->alignment - r.pos % f->alignment) % f->alignment;
    if (__builtin_add_overflow(r.pos, pad, &f->data_start)) f->data_start = UINT64_MAX;
    return tensors_place(f);
}

static sp_status file_create(const char *name, gguf_file **out) {
    gguf_file *f = calloc(1, sizeof *f);
    if (f) f->name = strdup(name ? name : "(memory)");
    if (!f || !f->name) {
        free(f);
        return sp_fail(SP_ERR_NOMEM, "%s: out of memory", name ? name : "(memory)");
    }
    *out = f;
    return SP_OK;
}

sp_status gguf_open_memory(const void *data, size_t size, const char *name, gguf_file **out) {
    *out = NULL;
    if (!data && size)
        return sp_fail(SP_ERR_INVALID_ARG, "%s: NULL buffer of %zu bytes", name ? name : "(memory)", size);
    gguf_file *f = NULL;
    sp_status st = file_create(name, &f);
    if (st) return st;
    f->base = data ? data : (const uint8_t *)"";
    f->size = size;
    if ((st = file_parse(f))) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return SP_OK;
}

sp_status gguf_open(const char *path, gguf_file **out) {
    *out = NULL;
    gguf_file *f = NULL;
    sp_status st;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sp_fail(SP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        st = sp_fail(SP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = sp_fail(SP_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    if ((st = file_create(path, &f))) goto fail;
    f->size = (uint64_t)sb.st_size;
    f->base = (const uint8_t *)"";
    if (f->size > SIZE_MAX) {
        st = sp_fail(SP_ERR_IO, "%s: %" PRIu64 " bytes is too large to map", path, f->size);
        goto fail;
    }
    if (f->size > 0) {
        void *map = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            st = sp_fail(SP_ERR_IO, "%s: cannot map %" PRIu64 " bytes: %s", path, f->size, strerror(errno));
            goto fail;
        }
        f->map = map;
        f->base = map;
    }
    close(fd);
    fd = -1;
    if ((st = file_parse(f))) goto fail;
    *out = f;
    return SP_OK;
fail:
    if (fd >= 0) close(fd);
    gguf_close(f);
    return st;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kvs) {
        for (int64_t i = 0; i < f->n_kv; i++) free(f->kvs[i].str_pos);
    }
    free(f->kvs);
    free(f->kv_index.slots);
    free(f->tensors);
    free(f->tensor_index.slots);
    if (f->map) munmap(f->map, (size_t)f->size);
    free(f->name);
    free(f);
}

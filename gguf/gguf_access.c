/* gguf_access.c: the read side of the GGUF reader, once gguf_open (gguf.c) has
 * validated a file: accessors for the header, keys and tensor infos, lookups by name
 * through the hash indexes, the typed getters, and rendering a value as text.
 *
 * Every position stored in a gguf_kv was checked against the file's size at open, so
 * the functions here read the mapping without further checks. They only read the
 * gguf_file, which is immutable after open.
 */
#include "gguf/gguf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "gguf/gguf_internal.h"

bool gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

/* ---- integer values --------------------------------------------------------------- */

static bool value_type_signed(uint32_t t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

/* Sign-extended little-endian integer of n bytes (1..8). */
static int64_t load_s(const uint8_t *p, size_t n) {
    unsigned shift = 64 - 8 * (unsigned)n;
    return (int64_t)(gguf__load_u(p, n) << shift) >> shift;
}

/* Integer value of kv i when it has an integer type. */
static bool kv_int(const gguf_file *f, int64_t i, int64_t *sval, uint64_t *uval, bool *is_signed) {
    const gguf_kv *kv = &f->kvs[i];
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64 || kv->type == GGUF_TYPE_BOOL ||
        gguf__value_type_sizes[kv->type] == 0) {
        return false;
    }
    *is_signed = value_type_signed(kv->type);
    if (*is_signed)
        *sval = load_s(f->base + kv->pos, gguf__value_type_sizes[kv->type]);
    else
        *uval = gguf__load_u(f->base + kv->pos, gguf__value_type_sizes[kv->type]);
    return true;
}

/* ---- accessors -------------------------------------------------------------------- */

const char *gguf_path(const gguf_file *f) {
    return f->name;
}

uint32_t gguf_version(const gguf_file *f) {
    return f->version;
}

uint64_t gguf_alignment(const gguf_file *f) {
    return f->alignment;
}

uint64_t gguf_file_size(const gguf_file *f) {
    return f->size;
}

int64_t gguf_kv_count(const gguf_file *f) {
    return f->n_kv;
}

gguf_str gguf_kv_key(const gguf_file *f, int64_t i) {
    SP_ASSERT(i >= 0 && i < f->n_kv);
    return f->kvs[i].key;
}

gguf_value_type gguf_kv_type(const gguf_file *f, int64_t i) {
    SP_ASSERT(i >= 0 && i < f->n_kv);
    return f->kvs[i].type;
}

int64_t gguf_find_key(const gguf_file *f, const char *key) {
    return *gguf__kv_slot(f, key, strlen(key)) - 1;
}

int64_t gguf_tensor_count(const gguf_file *f) {
    return f->n_tensors;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int64_t i) {
    SP_ASSERT(i >= 0 && i < f->n_tensors);
    return &f->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    int64_t i = *gguf__tensor_slot(f, name, strlen(name)) - 1;
    return i < 0 ? NULL : &f->tensors[i];
}

/* ---- typed getters ---------------------------------------------------------------- */

static sp_status kv_lookup(const gguf_file *f, const char *key, int64_t *i) {
    *i = gguf_find_key(f, key);
    return *i >= 0 ? SP_OK : sp_fail(SP_ERR_NOT_FOUND, "%s: key %s not found", f->name, key);
}

static sp_status kv_type_mismatch(const gguf_file *f, const char *key, int64_t i, const char *want) {
    const gguf_kv *kv = &f->kvs[i];
    if (kv->type == GGUF_TYPE_ARRAY) {
        return sp_fail(SP_ERR_FORMAT, "%s: key %s: type array of %s, want %s", f->name, key,
                       gguf_value_type_name(kv->elem_type), want);
    }
    return sp_fail(SP_ERR_FORMAT, "%s: key %s: type %s, want %s", f->name, key, gguf_value_type_name(kv->type), want);
}

/* The kv of key when its type is type (or alt_type), and for arrays, when elem_type
 * is not -1, its element type is elem_type. want names the type for messages. */
static sp_status kv_typed(const gguf_file *f, const char *key, int type, int alt_type, int elem_type, const char *want,
                          const gguf_kv **out) {
    int64_t i;
    sp_status st = kv_lookup(f, key, &i);
    if (st) return st;
    const gguf_kv *kv = &f->kvs[i];
    if (((int)kv->type != type && (int)kv->type != alt_type) || (elem_type >= 0 && (int)kv->elem_type != elem_type)) {
        return kv_type_mismatch(f, key, i, want);
    }
    *out = kv;
    return SP_OK;
}

/* Integer value of key checked against [lo, hi]. */
static sp_status kv_get_int(const gguf_file *f, const char *key, const char *want, int64_t lo, uint64_t hi,
                            int64_t *out) {
    int64_t i, s = 0;
    uint64_t u = 0;
    bool is_signed;
    sp_status st = kv_lookup(f, key, &i);
    if (st) return st;
    if (!kv_int(f, i, &s, &u, &is_signed)) return kv_type_mismatch(f, key, i, want);
    if (is_signed ? (s < lo || (s > 0 && (uint64_t)s > hi)) : u > hi) {
        char text[32];
        if (is_signed)
            snprintf(text, sizeof text, "%" PRId64, s);
        else
            snprintf(text, sizeof text, "%" PRIu64, u);
        return sp_fail(SP_ERR_FORMAT, "%s: key %s: value %s does not fit %s", f->name, key, text, want);
    }
    *out = is_signed ? s : (int64_t)u;
    return SP_OK;
}

sp_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    int64_t v = 0;
    sp_status st = kv_get_int(f, key, "uint32", 0, UINT32_MAX, &v);
    if (!st) *out = (uint32_t)v;
    return st;
}

sp_status gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    return kv_get_int(f, key, "int64", INT64_MIN, INT64_MAX, out);
}

sp_status gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv;
    sp_status st = kv_typed(f, key, GGUF_TYPE_FLOAT32, GGUF_TYPE_FLOAT64, -1, "float32", &kv);
    if (st) return st;
    uint64_t bits = gguf__load_u(f->base + kv->pos, gguf__value_type_sizes[kv->type]);
    if (kv->type == GGUF_TYPE_FLOAT32) {
        uint32_t bits32 = (uint32_t)bits;
        memcpy(out, &bits32, 4);
    } else {
        double d;
        memcpy(&d, &bits, 8);
        *out = (float)d;
    }
    return SP_OK;
}

sp_status gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv;
    sp_status st = kv_typed(f, key, GGUF_TYPE_BOOL, -1, -1, "bool", &kv);
    if (!st) *out = f->base[kv->pos] != 0;
    return st;
}

static gguf_str str_at(const gguf_file *f, uint64_t pos) {
    gguf_str s = {(const char *)f->base + pos + 8, gguf__load_u(f->base + pos, 8)};
    return s;
}

sp_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv;
    sp_status st = kv_typed(f, key, GGUF_TYPE_STRING, -1, -1, "string", &kv);
    if (!st) *out = str_at(f, kv->pos);
    return st;
}

sp_status gguf_get_arr(const gguf_file *f, const char *key, gguf_value_type *elem_type, uint64_t *n) {
    const gguf_kv *kv;
    sp_status st = kv_typed(f, key, GGUF_TYPE_ARRAY, -1, -1, "array", &kv);
    if (st) return st;
    *elem_type = kv->elem_type;
    *n = kv->n;
    return SP_OK;
}

sp_status gguf_get_arr_data(const gguf_file *f, const char *key, gguf_value_type want_type, const void **data,
                            uint64_t *n) {
    if (!gguf__value_type_valid((uint32_t)want_type) || gguf__value_type_sizes[want_type] == 0) {
        return sp_fail(SP_ERR_INVALID_ARG, "%s: key %s: arrays of %s have no fixed-size data", f->name, key,
                       gguf_value_type_name(want_type));
    }
    char want[48];
    snprintf(want, sizeof want, "array of %s", gguf_value_type_name(want_type));
    const gguf_kv *kv;
    sp_status st = kv_typed(f, key, GGUF_TYPE_ARRAY, -1, (int)want_type, want, &kv);
    if (st) return st;
    *data = f->base + kv->pos;
    *n = kv->n;
    return SP_OK;
}

sp_status gguf_get_arr_str(const gguf_file *f, const char *key, uint64_t i, gguf_str *out) {
    const gguf_kv *kv;
    sp_status st = kv_typed(f, key, GGUF_TYPE_ARRAY, -1, GGUF_TYPE_STRING, "array of string", &kv);
    if (st) return st;
    if (i >= kv->n) {
        return sp_fail(SP_ERR_RANGE, "%s: key %s: index %" PRIu64 " out of range (%" PRIu64 " items)", f->name, key, i,
                       kv->n);
    }
    *out = str_at(f, kv->str_pos[i]);
    return SP_OK;
}

/* ---- rendering as text ------------------------------------------------------------ */

#define GGUF_FORMAT_STR_BYTES 48

typedef struct text_buf {
    char *buf;
    size_t cap, len;
    bool full;
} text_buf;

static void text_put(text_buf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_put(text_buf *t, const char *fmt, ...) {
    if (t->full) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= t->cap - t->len) {
        t->full = true;
        t->len = t->cap - 1;
    } else {
        t->len += (size_t)n;
    }
}

static void text_put_str(text_buf *t, gguf_str s) {
    uint64_t shown = s.len;
    if (shown > GGUF_FORMAT_STR_BYTES) {
        shown = GGUF_FORMAT_STR_BYTES;
        while (shown > 0 && ((unsigned char)s.ptr[shown] & 0xc0) == 0x80) shown--; /* whole UTF-8 sequences */
    }
    text_put(t, "\"");
    for (uint64_t i = 0; i < shown && !t->full; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\')
            text_put(t, "\\%c", c);
        else if (c == '\n')
            text_put(t, "\\n");
        else if (c == '\t')
            text_put(t, "\\t");
        else if (c < 0x20 || c == 0x7f)
            text_put(t, "\\x%02x", c);
        else
            text_put(t, "%c", c);
    }
    if (shown < s.len)
        text_put(t, "...\" (%" PRIu64 " bytes)", s.len);
    else
        text_put(t, "\"");
}

/* Position just past the (validated) value of type type at pos. */
static uint64_t value_end(const gguf_file *f, uint64_t pos, uint32_t type) {
    if (type == GGUF_TYPE_STRING) return pos + 8 + gguf__load_u(f->base + pos, 8);
    if (type != GGUF_TYPE_ARRAY) return pos + gguf__value_type_sizes[type];
    uint32_t elem_type = (uint32_t)gguf__load_u(f->base + pos, 4);
    uint64_t n = gguf__load_u(f->base + pos + 4, 8);
    pos += 12;
    if (elem_type != GGUF_TYPE_STRING && elem_type != GGUF_TYPE_ARRAY)
        return pos + n * gguf__value_type_sizes[elem_type];
    for (uint64_t i = 0; i < n; i++) pos = value_end(f, pos, elem_type);
    return pos;
}

static void scalar_format(const gguf_file *f, uint64_t pos, uint32_t type, text_buf *t) {
    const uint8_t *p = f->base + pos;
    uint64_t u = gguf__load_u(p, gguf__value_type_sizes[type]);
    if (value_type_signed(type)) {
        text_put(t, "%" PRId64, load_s(p, gguf__value_type_sizes[type]));
        return;
    }
    switch (type) {
    case GGUF_TYPE_BOOL: text_put(t, "%s", u ? "true" : "false"); break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t bits = (uint32_t)u;
        float v;
        memcpy(&v, &bits, 4);
        text_put(t, "%g", (double)v);
        break;
    }
    case GGUF_TYPE_FLOAT64: {
        double v;
        memcpy(&v, &u, 8);
        text_put(t, "%g", v);
        break;
    }
    case GGUF_TYPE_STRING: text_put_str(t, str_at(f, pos)); break;
    default: text_put(t, "%" PRIu64, u); break;
    }
}

/* Renders the elements of an array whose elements start at pos. */
static void array_format(const gguf_file *f, uint64_t pos, uint32_t elem_type, uint64_t n, text_buf *t, int max_items) {
    text_put(t, "[");
    uint64_t shown = max_items > 0 ? (uint64_t)max_items : 0;
    for (uint64_t i = 0; i < n && i < shown && !t->full; i++) {
        if (i) text_put(t, ", ");
        if (elem_type == GGUF_TYPE_ARRAY) {
            uint32_t inner_type = (uint32_t)gguf__load_u(f->base + pos, 4);
            uint64_t inner_n = gguf__load_u(f->base + pos + 4, 8);
            array_format(f, pos + 12, inner_type, inner_n, t, max_items);
        } else {
            scalar_format(f, pos, elem_type, t);
        }
        pos = value_end(f, pos, elem_type);
    }
    if (n > shown) text_put(t, "%s... (%" PRIu64 " items)", shown ? ", " : "", n);
    text_put(t, "]");
}

void gguf_kv_format(const gguf_file *f, int64_t i, char *buf, size_t buflen, int max_items) {
    SP_ASSERT(i >= 0 && i < f->n_kv);
    if (buflen == 0) return;
    text_buf t = {buf, buflen, 0, false};
    buf[0] = '\0';
    const gguf_kv *kv = &f->kvs[i];
    if (kv->type == GGUF_TYPE_ARRAY)
        array_format(f, kv->pos, kv->elem_type, kv->n, &t, max_items);
    else
        scalar_format(f, kv->pos, kv->type, &t);
    buf[t.len] = '\0';
    if (t.full && buflen > 4) memcpy(buf + buflen - 4, "...", 4);
}

void gguf_kv_raw(const gguf_file *f, int64_t i, const void **data, size_t *n) {
    SP_ASSERT(i >= 0 && i < f->n_kv);
    const gguf_kv *kv = &f->kvs[i];
    /* the entry starts at the key's 8-byte length; the value ends by its type (all of it
     * was bounds-checked at open) */
    const uint8_t *start = (const uint8_t *)kv->key.ptr - 8;
    uint64_t end = kv->pos;
    if (kv->type == GGUF_TYPE_STRING) {
        end += 8 + gguf__load_u(f->base + kv->pos, 8);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->elem_type == GGUF_TYPE_STRING)
            end = kv->n == 0 ? kv->pos : kv->str_pos[kv->n - 1] + 8 + gguf__load_u(f->base + kv->str_pos[kv->n - 1], 8);
        else
            end += kv->n * gguf__value_type_sizes[kv->elem_type];
    } else {
        end += gguf__value_type_sizes[kv->type];
    }
    *data = start;
    *n = (size_t)(f->base + end - start);
}

/* cmd_quantize.c: `spindle quantize IN.gguf OUT.gguf TYPE` writes IN's model with its
 * weight matrices in TYPE (Q8_0, Q4_0, Q4_1 or F16), from any type spindle reads. What
 * it is for: a smaller drafter of the same model for speculative decoding, or a Q8_0
 * target from an F32/F16 file.
 *
 * Which tensors change: every matrix (two or more dimensions) whose rows are a whole
 * number of TYPE's blocks; vectors (norms, biases) stay as they are. The embedding and
 * output matrices stay at least Q8_0 when TYPE is a 4-bit type (as llama.cpp's Q4 files
 * keep them): they are read a row at a time or decide every token. Each row goes through
 * F32 (quant_dequantize_row, then quant_quantize_row). Every key-value pair is copied
 * byte for byte except general.file_type, which names the new type. The file is written
 * to OUT.tmp and renamed, so OUT is never half written.
 *
 * Exit status: 0; 2 with one line on stderr (bad arguments, unreadable input, write
 * failure); 1 out of memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "cli/cli.h"

/* The targets and llama.cpp's general.file_type for each (LLAMA_FTYPE_MOSTLY_*). */
static const struct {
    const char *name;
    quant_type type;
    uint32_t file_type;
} QUANTIZE_TYPES[] = {
    {"F16", QUANT_F16, 1},
    {"Q4_0", QUANT_Q4_0, 2},
    {"Q4_1", QUANT_Q4_1, 3},
    {"Q8_0", QUANT_Q8_0, 7},
};
enum { QUANTIZE_N_TYPES = sizeof QUANTIZE_TYPES / sizeof QUANTIZE_TYPES[0] };

static void quantize_usage(FILE *out) {
    fprintf(out, "usage: spindle quantize IN.gguf OUT.gguf TYPE\n"
                 "Writes IN's model with its weight matrices in TYPE: Q8_0, Q4_0, Q4_1 or F16.\n");
}

/* The type tensor t gets: target for matrices whose rows hold whole blocks; the
 * embedding and output stay at least Q8_0 under a 4-bit target. */
static quant_type quantize_target(const gguf_tensor *t, quant_type target) {
    if (t->n_dims < 2 || !quant_type_supported(t->type)) return (quant_type)t->type;
    bool keep_8bit = (target == QUANT_Q4_0 || target == QUANT_Q4_1) &&
                     (gguf_str_eq(t->name, "token_embd.weight") || gguf_str_eq(t->name, "output.weight"));
    quant_type want = keep_8bit ? QUANT_Q8_0 : target;
    if (keep_8bit && (t->type == QUANT_Q8_0 || t->type == QUANT_F16 || t->type == QUANT_F32 || t->type == QUANT_BF16))
        return (quant_type)t->type; /* already 8 bits or more: leave it */
    return quant_row_valid(want, t->ne[0]) ? want : (quant_type)t->type;
}

/* Converts tensor t's rows into type `to`, writing them to w. */
static sp_status quantize_tensor(gguf_writer *w, const gguf_tensor *t, quant_type to) {
    if ((quant_type)t->type == to) {
        gguf_write_tensor_data(w, t->data, (size_t)t->nbytes);
        return SP_OK;
    }
    int64_t row = t->ne[0], rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) rows *= t->ne[d];
    size_t in_row = quant_row_bytes((quant_type)t->type, row), out_row = quant_row_bytes(to, row);
    float *f32 = malloc(sizeof *f32 * (size_t)row);
    uint8_t *out = malloc(out_row * (size_t)rows);
    if (!f32 || !out) {
        free(f32);
        free(out);
        return sp_fail(SP_ERR_NOMEM, "out of memory for tensor %.*s", (int)t->name.len, t->name.ptr);
    }
    for (int64_t r = 0; r < rows; r++) {
        quant_dequantize_row((quant_type)t->type, f32, (const uint8_t *)t->data + (size_t)r * in_row, row);
        quant_quantize_row(to, out + (size_t)r * out_row, f32, row);
    }
    gguf_write_tensor_data(w, out, out_row * (size_t)rows);
    free(f32);
    free(out);
    return SP_OK;
}

/* Writes the converted file to path. */
static sp_status quantize_file(const gguf_file *in, const char *path, quant_type target, uint32_t file_type) {
    int64_t n_kv = gguf_kv_count(in), n_tensors = gguf_tensor_count(in);
    bool has_file_type = gguf_find_key(in, "general.file_type") >= 0;
    gguf_writer w;
    sp_status st = gguf_write_begin(&w, path, gguf_alignment(in), n_tensors, n_kv + !has_file_type);
    if (st != SP_OK) return st;
    for (int64_t i = 0; i < n_kv; i++) {
        if (gguf_str_eq(gguf_kv_key(in, i), "general.file_type")) {
            gguf_write_kv_u32(&w, "general.file_type", file_type);
            continue;
        }
        const void *raw;
        size_t n;
        gguf_kv_raw(in, i, &raw, &n);
        gguf_write_kv_raw(&w, raw, n);
    }
    if (!has_file_type) gguf_write_kv_u32(&w, "general.file_type", file_type);
    gguf_write_tensor *infos = calloc((size_t)(n_tensors > 0 ? n_tensors : 1), sizeof *infos);
    if (!infos) {
        gguf_write_end(&w);
        return sp_fail(SP_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n_tensors; i++) {
        const gguf_tensor *t = gguf_tensor_at(in, i);
        infos[i] = (gguf_write_tensor){t->name, quantize_target(t, target), t->n_dims, {1, 1, 1, 1}};
        memcpy(infos[i].ne, t->ne, sizeof t->ne);
    }
    gguf_write_tensor_infos(&w, infos, n_tensors);
    for (int64_t i = 0; i < n_tensors && st == SP_OK; i++)
        st = quantize_tensor(&w, gguf_tensor_at(in, i), (quant_type)infos[i].type);
    free(infos);
    sp_status end = gguf_write_end(&w);
    return st != SP_OK ? st : end;
}

int cmd_quantize(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        quantize_usage(stdout);
        return 0;
    }
    if (argc != 4) {
        quantize_usage(stderr);
        return 2;
    }
    const char *in_path = argv[1], *out_path = argv[2], *type_name = argv[3];
    int which = -1;
    for (int i = 0; i < QUANTIZE_N_TYPES; i++)
        if (strcmp(type_name, QUANTIZE_TYPES[i].name) == 0) which = i;
    if (which < 0) {
        fprintf(stderr, "spindle quantize: error: TYPE '%s' is not one of Q8_0, Q4_0, Q4_1, F16\n", type_name);
        return 2;
    }
    if (strcmp(in_path, out_path) == 0) {
        fprintf(stderr, "spindle quantize: error: OUT must differ from IN (%s)\n", in_path);
        return 2;
    }
    gguf_file *in;
    sp_status st = gguf_open(in_path, &in);
    if (st != SP_OK) {
        fprintf(stderr, "spindle quantize: error: %s\n", sp_last_error());
        return st == SP_ERR_NOMEM ? 1 : 2;
    }
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out_path) >= (int)sizeof tmp) {
        gguf_close(in);
        fprintf(stderr, "spindle quantize: error: OUT path too long\n");
        return 2;
    }
    st = quantize_file(in, tmp, QUANTIZE_TYPES[which].type, QUANTIZE_TYPES[which].file_type);
    gguf_close(in);
    if (st == SP_OK && rename(tmp, out_path) != 0)
        st = sp_fail(SP_ERR_IO, "%s: cannot rename to %s: %s", tmp, out_path, strerror(errno));
    if (st != SP_OK) {
        remove(tmp);
        fprintf(stderr, "spindle quantize: error: %s\n", sp_last_error());
        return st == SP_ERR_NOMEM ? 1 : 2;
    }
    printf("%s: %s written\n", out_path, type_name);
    return 0;
}

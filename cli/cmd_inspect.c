/* cmd_inspect.c: `spindle inspect MODEL` prints what a GGUF file holds: header,
 * architecture and hyperparameters, tokenizer, the other metadata in brief, and a
 * table of tensors with their types, shapes and sizes. Output goes to stdout;
 * errors go to stderr and return 2.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/status.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "cli/cli.h"

#define INSPECT_MAX_ITEMS  8
#define INSPECT_NAME_WIDTH 40

static void inspect_usage(FILE *out) {
    fprintf(out, "usage: spindle inspect MODEL.gguf\n"
                 "Prints the GGUF header, hyperparameters, tokenizer, metadata and tensors of MODEL.\n");
}

/* Prints s with control bytes escaped (names come from the file) and returns the
 * number of columns used (bytes of UTF-8 continuation do not count). */
static int inspect_print_str(gguf_str s) {
    int cols = 0;
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c < 0x20 || c == 0x7f)
            cols += printf("\\x%02x", c);
        else {
            putchar(c);
            cols += (c & 0xc0) != 0x80;
        }
    }
    return cols;
}

static bool inspect_has_prefix(gguf_str s, const char *prefix, size_t n) {
    return s.len > n && memcmp(s.ptr, prefix, n) == 0;
}

static void inspect_kv(const gguf_file *f, int64_t i, char *buf, size_t cap) {
    gguf_kv_format(f, i, buf, cap, INSPECT_MAX_ITEMS);
    printf("  ");
    inspect_print_str(gguf_kv_key(f, i));
    printf(" = %s\n", buf);
}

static void inspect_header(const gguf_file *f, gguf_str arch) {
    printf("file:          %s (%" PRIu64 " bytes)\n", gguf_path(f), gguf_file_size(f));
    printf("gguf version:  %" PRIu32 "\n", gguf_version(f));
    printf("alignment:     %" PRIu64 "\n", gguf_alignment(f));
    printf("architecture:  ");
    if (arch.ptr)
        inspect_print_str(arch);
    else
        printf("(none)");
    printf("\n");
}

static void inspect_tokenizer(const gguf_file *f) {
    gguf_str model = {0}, pre = {0}, tmpl = {0};
    gguf_value_type elem;
    uint64_t n_tokens = 0;
    printf("tokenizer:     ");
    if (gguf_get_str(f, "tokenizer.ggml.model", &model) == SP_OK)
        inspect_print_str(model);
    else
        printf("(none)");
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre) == SP_OK) {
        printf(" (pre: ");
        inspect_print_str(pre);
        printf(")");
    }
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &elem, &n_tokens) == SP_OK) printf(", %" PRIu64 " tokens", n_tokens);
    printf("\n");
    if (gguf_get_str(f, "tokenizer.chat_template", &tmpl) == SP_OK) {
        printf("chat template: yes (%" PRIu64 " bytes)\n", tmpl.len);
    } else {
        printf("chat template: no\n");
    }
}

/* Keys shown in the sections above and left out of "metadata". */
static bool inspect_key_shown(gguf_str key, gguf_str arch) {
    if (arch.ptr && key.len > arch.len && memcmp(key.ptr, arch.ptr, arch.len) == 0 && key.ptr[arch.len] == '.') {
        return true;
    }
    return gguf_str_eq(key, "general.architecture") || gguf_str_eq(key, "general.alignment") ||
           gguf_str_eq(key, "tokenizer.ggml.model") || gguf_str_eq(key, "tokenizer.ggml.pre");
}

static void inspect_metadata(const gguf_file *f, gguf_str arch) {
    char buf[512];
    printf("hyperparameters:\n");
    for (int64_t i = 0; arch.ptr && i < gguf_kv_count(f); i++) {
        gguf_str key = gguf_kv_key(f, i);
        if (inspect_has_prefix(key, arch.ptr, arch.len) && key.ptr[arch.len] == '.') inspect_kv(f, i, buf, sizeof buf);
    }
    inspect_tokenizer(f);
    printf("metadata:\n");
    for (int64_t i = 0; i < gguf_kv_count(f); i++) {
        if (!inspect_key_shown(gguf_kv_key(f, i), arch)) inspect_kv(f, i, buf, sizeof buf);
    }
}

static void inspect_tensors(const gguf_file *f) {
    int64_t n = gguf_tensor_count(f);
    int width = 4;
    for (int64_t i = 0; i < n; i++) {
        uint64_t len = gguf_tensor_at(f, i)->name.len;
        if (len > (uint64_t)width) width = len > INSPECT_NAME_WIDTH ? INSPECT_NAME_WIDTH : (int)len;
    }
    printf("tensors: %" PRId64 "\n", n);
    if (n == 0) return;
    printf("  %-*s  %-6s  %-28s  %14s\n", width, "name", "type", "shape", "bytes");
    uint64_t total_bytes = 0, total_elements = 0;
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[");
        uint64_t elements = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%" PRId64, d ? ", " : "", t->ne[d]);
            elements *= (uint64_t)t->ne[d]; /* gguf_open checked the product fits int64 */
        }
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("  ");
        int cols = inspect_print_str(t->name);
        printf("%*s  %-6s  %-28s  %14" PRIu64 "\n", cols < width ? width - cols : 0, "", quant_type_name(t->type),
               shape, t->nbytes);
        total_bytes += t->nbytes;
        total_elements += elements;
    }
    printf("total: %" PRId64 " tensors, %" PRIu64 " elements, %" PRIu64 " bytes (%.1f MiB)\n", n, total_elements,
           total_bytes, (double)total_bytes / (1024.0 * 1024.0));
}

int cmd_inspect(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        inspect_usage(stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        inspect_usage(stderr);
        return 2;
    }
    gguf_file *f;
    if (gguf_open(argv[1], &f) != SP_OK) {
        fprintf(stderr, "spindle: error: %s\n", sp_last_error());
        return 2;
    }
    gguf_str arch = {0};
    if (gguf_get_str(f, "general.architecture", &arch) != SP_OK) arch.ptr = NULL;
    inspect_header(f, arch);
    inspect_metadata(f, arch);
    inspect_tensors(f);
    gguf_close(f);
    return 0;
}

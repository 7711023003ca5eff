/* test_quantize.c: `spindle quantize` (cli/cmd_quantize.c over gguf/gguf_write.c) on the
 * tiny real model: every target type writes a file the reader accepts, with the same
 * metadata byte for byte (general.file_type renamed), matrices in the new type and
 * within that type's rounding of the original, vectors untouched, the 4-bit types
 * keeping the embedding and output at 8 bits; the model loads and generates; bad
 * arguments exit 2 and leave no file behind. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tests/unit/testdata.h"

static int quantize(const char *in, const char *out, const char *type) {
    char *argv[] = {"quantize", (char *)in, (char *)out, (char *)type, NULL};
    return cmd_quantize(4, argv);
}

/* Largest |a - b| over the row, relative to the row's largest |a|. */
static double row_error(const float *a, const float *b, int64_t n) {
    double worst = 0, scale = 1e-12;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    return worst / scale;
}

static void check_type(const char *type_name, quant_type type, double tolerance) {
    char in[512], out[64];
    testdata_path(in, sizeof in, "models/stories260K.gguf");
    TESTDATA_REQUIRE(in);
    snprintf(out, sizeof out, "/tmp/spindle_test_quantize_%d_%s.gguf", (int)getpid(), type_name);
    cr_assert_eq(quantize(in, out, type_name), 0, "%s", sp_last_error());
    gguf_file *a, *b;
    cr_assert_eq(gguf_open(in, &a), SP_OK);
    cr_assert_eq(gguf_open(out, &b), SP_OK, "%s", sp_last_error());

    /* metadata: the same pairs, byte for byte, but the file type */
    for (int64_t i = 0; i < gguf_kv_count(a); i++) {
        gguf_str key = gguf_kv_key(a, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)key.len, key.ptr);
        int64_t j = gguf_find_key(b, name);
        cr_assert_geq(j, 0, "%s kept", name);
        if (strcmp(name, "general.file_type") == 0) continue;
        const void *ra, *rb;
        size_t na, nb;
        gguf_kv_raw(a, i, &ra, &na);
        gguf_kv_raw(b, j, &rb, &nb);
        cr_assert(na == nb && memcmp(ra, rb, na) == 0, "%s copied byte for byte", name);
    }
    uint32_t file_type = 0;
    cr_assert_eq(gguf_get_u32(b, "general.file_type", &file_type), SP_OK);

    /* tensors: matrices converted within the type's rounding, vectors as they were */
    cr_assert_eq(gguf_tensor_count(a), gguf_tensor_count(b));
    int converted = 0;
    for (int64_t i = 0; i < gguf_tensor_count(a); i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_tensor_at(b, i);
        cr_assert(ta->name.len == tb->name.len && memcmp(ta->name.ptr, tb->name.ptr, ta->name.len) == 0);
        cr_assert(memcmp(ta->ne, tb->ne, sizeof ta->ne) == 0);
        bool big = gguf_str_eq(ta->name, "token_embd.weight") || gguf_str_eq(ta->name, "output.weight");
        /* vectors, rows that are no whole number of blocks, and (under a 4-bit type) the
         * F32 embedding and output keep their type */
        bool keep =
            ta->n_dims < 2 || !quant_row_valid(type, ta->ne[0]) || (big && (type == QUANT_Q4_0 || type == QUANT_Q4_1));
        quant_type want = keep ? (quant_type)ta->type : type;
        cr_assert_eq(tb->type, (uint32_t)want, "%.*s: type %s", (int)ta->name.len, ta->name.ptr,
                     quant_type_name(tb->type));
        int64_t row = ta->ne[0], rows = 1;
        for (uint32_t d = 1; d < ta->n_dims; d++) rows *= ta->ne[d];
        float *ra = malloc(sizeof *ra * (size_t)row), *rb = malloc(sizeof *rb * (size_t)row);
        for (int64_t r = 0; r < rows; r++) {
            quant_dequantize_row((quant_type)ta->type, ra,
                                 (const uint8_t *)ta->data + (size_t)r * quant_row_bytes((quant_type)ta->type, row),
                                 row);
            quant_dequantize_row((quant_type)tb->type, rb,
                                 (const uint8_t *)tb->data + (size_t)r * quant_row_bytes((quant_type)tb->type, row),
                                 row);
            double err = row_error(ra, rb, row);
            cr_assert_leq(err, tb->type == ta->type ? 0.0 : tolerance, "%.*s row %lld: error %g", (int)ta->name.len,
                          ta->name.ptr, (long long)r, err);
        }
        free(ra);
        free(rb);
        converted += tb->type != ta->type;
    }
    cr_assert_gt(converted, 0);
    gguf_close(a);
    gguf_close(b);

    /* and the model runs */
    dev_backend *dev;
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = 1};
    cr_assert_eq(dev_create(&opts, &dev), SP_OK);
    model *m;
    model_options mo = {.max_batch_tokens = 64};
    cr_assert_eq(model_load(out, dev, &mo, &m), SP_OK, "%s", sp_last_error());
    model_destroy(m);
    dev_destroy(dev);
    unlink(out);
}

Test(quantize, to_q8_0) {
    check_type("Q8_0", QUANT_Q8_0, 0.01);
}
Test(quantize, to_q4_0) {
    check_type("Q4_0", QUANT_Q4_0, 0.15);
}
Test(quantize, to_q4_1) {
    check_type("Q4_1", QUANT_Q4_1, 0.15);
}
Test(quantize, to_f16) {
    check_type("F16", QUANT_F16, 0.001);
}

Test(quantize, bad_arguments_exit_2_and_write_nothing) {
    char in[512];
    testdata_path(in, sizeof in, "models/stories260K.gguf");
    TESTDATA_REQUIRE(in);
    const char *out = "/tmp/spindle_test_quantize_bad.gguf";
    unlink(out);
    cr_assert_eq(quantize(in, out, "Q5_K"), 2, "an unknown type");
    cr_assert_eq(quantize("/nonexistent/model.gguf", out, "Q8_0"), 2, "a missing input");
    cr_assert_eq(quantize(in, in, "Q8_0"), 2, "in place");
    cr_assert_neq(access(out, F_OK), 0, "nothing written");
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    cr_assert_neq(access(tmp, F_OK), 0, "no temporary left");
}

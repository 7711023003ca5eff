/* test_model_load.c: loading models: every architecture flag on tiny synthetic models
 * (llama, qwen2 with QKV bias, qwen3 with q/k norm, tied and untied output), and one
 * clear error for each way a model file can disagree with its own hyperparameters. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "sample/sample.h"
#include "tools/gguf_builder.h"

/* Tiny dimensions: D = 32, H = 2, Hk = 1, Dh = 16, F = 64, V = 8 tokens, 2 layers. */
enum { T_D = 32, T_H = 2, T_HK = 1, T_DH = 16, T_F = 64, T_V = 8, T_LAYERS = 2 };

typedef struct tiny_spec {
    const char *arch;        /* "llama", "qwen2", "qwen3", ... */
    bool tied;               /* no output.weight */
    const char *skip_tensor; /* leave this tensor out */
    const char *bad_shape;   /* give this tensor a wrong first dimension */
    const char *skip_key;    /* leave this key out */
    uint32_t matrix_type;    /* type of the 2-D weights (F32 or F16) */
    bool f16_norms;          /* store the norm weights as F16 (not allowed) */
    float rope_freq_factor;  /* > 0: add rope_freqs.weight (Dh/2) filled with this value */
} tiny_spec;

typedef struct tiny_tensor {
    char name[64];
    int64_t ne0, ne1; /* ne1 = 0 for vectors */
    uint32_t type;
} tiny_tensor;

static int tiny_tensors(const tiny_spec *s, tiny_tensor *out) {
    int n = 0;
#define ADD(nm, a, b, ty)                                    \
    do {                                                     \
        snprintf(out[n].name, sizeof out[n].name, "%s", nm); \
        out[n].ne0 = a;                                      \
        out[n].ne1 = b;                                      \
        out[n].type = ty;                                    \
        n++;                                                 \
    } while (0)
    uint32_t mt = s->matrix_type;
    ADD("token_embd.weight", T_D, T_V, mt);
    ADD("output_norm.weight", T_D, 0, s->f16_norms ? QUANT_F16 : QUANT_F32);
    if (!s->tied) ADD("output.weight", T_D, T_V, mt);
    if (s->rope_freq_factor > 0) ADD("rope_freqs.weight", T_DH / 2, 0, QUANT_F32);
    bool qwen2 = strcmp(s->arch, "qwen2") == 0, qwen3 = strcmp(s->arch, "qwen3") == 0;
    for (int l = 0; l < T_LAYERS; l++) {
        char nm[64];
#define LAYER(suffix, a, b, ty)                          \
    do {                                                 \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix); \
        ADD(nm, a, b, ty);                               \
    } while (0)
        LAYER("attn_norm.weight", T_D, 0, QUANT_F32);
        LAYER("attn_q.weight", T_D, T_H * T_DH, mt);
        LAYER("attn_k.weight", T_D, T_HK * T_DH, mt);
        LAYER("attn_v.weight", T_D, T_HK * T_DH, mt);
        LAYER("attn_output.weight", T_H * T_DH, T_D, mt);
        if (qwen2) {
            LAYER("attn_q.bias", T_H * T_DH, 0, QUANT_F32);
            LAYER("attn_k.bias", T_HK * T_DH, 0, QUANT_F32);
            LAYER("attn_v.bias", T_HK * T_DH, 0, QUANT_F32);
        }
        if (qwen3) {
            LAYER("attn_q_norm.weight", T_DH, 0, QUANT_F32);
            LAYER("attn_k_norm.weight", T_DH, 0, QUANT_F32);
        }
        LAYER("ffn_norm.weight", T_D, 0, QUANT_F32);
        LAYER("ffn_gate.weight", T_D, T_F, mt);
        LAYER("ffn_up.weight", T_D, T_F, mt);
        LAYER("ffn_down.weight", T_F, T_D, mt);
#undef LAYER
    }
#undef ADD
    return n;
}

/* Writes a complete tiny model to a temp file (path, caller unlinks). */
static void tiny_write(const tiny_spec *s, char *path, size_t cap) {
    tiny_tensor t[64];
    int n = tiny_tensors(s, t);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (!s->skip_tensor || strcmp(t[i].name, s->skip_tensor) != 0) t[kept++] = t[i];
    n = kept;

    struct {
        const char *key;
        int64_t value;
    } dims[] = {
        {"block_count", T_LAYERS},     {"embedding_length", T_D},         {"feed_forward_length", T_F},
        {"attention.head_count", T_H}, {"attention.head_count_kv", T_HK}, {"context_length", 256},
    };
    int n_kv = 2 /* arch, eps */ + 6 + 3 /* tokenizer model, tokens, scores */ + 1 /* token_type */;
    char key[128];
    for (size_t i = 0; i < 6; i++) {
        snprintf(key, sizeof key, "%s.%s", s->arch, dims[i].key);
        if (s->skip_key && strcmp(key, s->skip_key) == 0) n_kv--;
    }
    gguf_builder b;
    gb_init(&b);
    gb_header(&b, 3, (uint64_t)n, (uint64_t)n_kv);
    gb_kv_str(&b, "general.architecture", s->arch);
    for (size_t i = 0; i < 6; i++) {
        snprintf(key, sizeof key, "%s.%s", s->arch, dims[i].key);
        if (s->skip_key && strcmp(key, s->skip_key) == 0) continue;
        gb_kv_u32(&b, key, (uint32_t)dims[i].value);
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", s->arch);
    gb_kv_f32(&b, key, 1e-5f);
    gb_kv_str(&b, "tokenizer.ggml.model", "llama");
    static const char *tokens[T_V] = {"<unk>",
                                      "<s>",
                                      "</s>",
                                      "\xe2\x96\x81"
                                      "a",
                                      "\xe2\x96\x81"
                                      "b",
                                      "a",
                                      "b",
                                      "c"};
    gb_kv_arr(&b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, T_V);
    for (int i = 0; i < T_V; i++) gb_str(&b, tokens[i]);
    gb_kv_arr(&b, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, T_V);
    for (int i = 0; i < T_V; i++) gb_f32(&b, -(float)i);
    gb_kv_arr(&b, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, T_V);
    for (int i = 0; i < T_V; i++) gb_u32(&b, i == 0 ? 2 : (i < 3 ? 3 : 1));

    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        int64_t ne[2] = {t[i].ne0, t[i].ne1};
        if (s->bad_shape && strcmp(t[i].name, s->bad_shape) == 0) ne[0] += 32;
        uint64_t elems = (uint64_t)ne[0] * (uint64_t)(t[i].ne1 ? t[i].ne1 : 1);
        gb_tensor_info(&b, t[i].name, t[i].ne1 ? 2 : 1, ne, t[i].type, offset);
        offset += (elems * (t[i].type == QUANT_F16 ? 2 : 4) + 31) / 32 * 32;
    }
    gb_pad(&b, 32);
    uint32_t rng = 12345;
    for (int i = 0; i < n; i++) {
        int64_t ne0 = t[i].ne0 + (s->bad_shape && strcmp(t[i].name, s->bad_shape) == 0 ? 32 : 0);
        uint64_t elems = (uint64_t)ne0 * (uint64_t)(t[i].ne1 ? t[i].ne1 : 1);
        bool is_norm = strstr(t[i].name, "norm") != NULL;
        bool is_freqs = strcmp(t[i].name, "rope_freqs.weight") == 0;
        for (uint64_t e = 0; e < elems; e++) {
            if (!is_freqs) rng = rng * 1664525u + 1013904223u; /* same weights with or without it */
            float v = is_norm ? 1.0f : ((float)(rng >> 8) / 16777216.0f - 0.5f) * 0.4f;
            if (is_freqs) v = s->rope_freq_factor;
            if (t[i].type == QUANT_F16)
                gb_u16(&b, quant_f32_to_f16(v));
            else
                gb_f32(&b, v);
        }
        gb_pad(&b, 32);
    }
    cr_assert_eq(gb_write_temp(&b, path, cap), 0);
    gb_free(&b);
}

typedef struct load_env {
    dev_backend *dev;
    model *model;
    char path[64];
} load_env;

static sp_status try_load(const tiny_spec *s, load_env *e) {
    tiny_write(s, e->path, sizeof e->path);
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = 1};
    cr_assert_eq(dev_create(&opts, &e->dev), SP_OK);
    model_options mo = {.max_batch_tokens = 8};
    e->model = NULL;
    return model_load(e->path, e->dev, &mo, &e->model);
}

static void env_free(load_env *e) {
    model_destroy(e->model);
    dev_destroy(e->dev);
    unlink(e->path);
}

/* Loads, runs 3 tokens and checks the logits (3, V) are finite; copies them to out. */
static void run_logits(const tiny_spec *s, bool expect_bias, bool expect_qk_norm, float *out) {
    load_env e;
    cr_assert_eq(try_load(s, &e), SP_OK, "%s: %s", s->arch, sp_last_error());
    const model_hparams *hp = model_get_hparams(e.model);
    cr_assert_eq(hp->has_qkv_bias, expect_bias);
    cr_assert_eq(hp->has_qk_norm, expect_qk_norm);
    cr_assert_eq(hp->tied_output, s->tied);
    dev_kv *kv;
    cr_assert_eq(model_kv_create(e.model, 4, 4, &kv), SP_OK);
    int32_t tokens[3] = {1, 3, 4}, pos[3] = {0, 1, 2}, seq[3] = {0}, table[4] = {2, 0, 1, 3}, len = 3,
            rows[3] = {0, 1, 2};
    dev_step step = {3, tokens, pos, seq, 1, &len, table, 4, 3, rows, 0, NULL};
    float logits[3 * T_V];
    cr_assert_eq(model_forward(e.model, kv, &step, logits), SP_OK, "%s", sp_last_error());
    for (int i = 0; i < 3 * T_V; i++) cr_assert(isfinite(logits[i]), "logit %d not finite", i);
    if (out) memcpy(out, logits, sizeof logits);
    dev_kv_destroy(e.dev, kv);
    env_free(&e);
}

static void check_runs(const tiny_spec *s, bool expect_bias, bool expect_qk_norm) {
    run_logits(s, expect_bias, expect_qk_norm, NULL);
}

Test(model_load, llama_untied_runs) {
    check_runs(&(tiny_spec){.arch = "llama", .matrix_type = QUANT_F32}, false, false);
}
Test(model_load, llama_tied_f16_runs) {
    check_runs(&(tiny_spec){.arch = "llama", .tied = true, .matrix_type = QUANT_F16}, false, false);
}
Test(model_load, qwen2_uses_qkv_bias) {
    check_runs(&(tiny_spec){.arch = "qwen2", .matrix_type = QUANT_F32}, true, false);
}
Test(model_load, qwen3_uses_qk_norm) {
    check_runs(&(tiny_spec){.arch = "qwen3", .matrix_type = QUANT_F32}, false, true);
}

Test(model_load, rope_freqs_scale_the_rotation) {
    float plain[3 * T_V], ones[3 * T_V], scaled[3 * T_V];
    run_logits(&(tiny_spec){.arch = "llama", .matrix_type = QUANT_F32}, false, false, plain);
    run_logits(&(tiny_spec){.arch = "llama", .matrix_type = QUANT_F32, .rope_freq_factor = 1.0f}, false, false, ones);
    run_logits(&(tiny_spec){.arch = "llama", .matrix_type = QUANT_F32, .rope_freq_factor = 4.0f}, false, false, scaled);
    cr_assert(memcmp(plain, ones, sizeof plain) == 0, "factors of 1 must not change the logits");
    /* position 0 is never rotated; later positions must change */
    cr_assert(memcmp(plain, scaled, sizeof(float) * T_V) == 0, "position 0 changed");
    cr_assert(memcmp(plain + T_V, scaled + T_V, sizeof(float) * 2 * T_V) != 0, "factors of 4 changed nothing");
}

static void expect_error(const tiny_spec *s, sp_status want, const char *needle1, const char *needle2) {
    load_env e;
    sp_status st = try_load(s, &e);
    cr_assert_eq(st, want, "status %d (%s), wanted %d", st, sp_last_error(), want);
    cr_assert(strstr(sp_last_error(), e.path) != NULL, "message does not name the file: %s", sp_last_error());
    cr_assert(strstr(sp_last_error(), needle1) != NULL, "message lacks '%s': %s", needle1, sp_last_error());
    if (needle2)
        cr_assert(strstr(sp_last_error(), needle2) != NULL, "message lacks '%s': %s", needle2, sp_last_error());
    env_free(&e);
}

Test(model_load, unsupported_architecture_is_named) {
    expect_error(&(tiny_spec){.arch = "gpt2", .matrix_type = QUANT_F32}, SP_ERR_UNSUPPORTED, "unsupported architecture",
                 "gpt2");
}

Test(model_load, missing_tensor_is_named) {
    expect_error(&(tiny_spec){.arch = "llama", .matrix_type = QUANT_F32, .skip_tensor = "blk.1.ffn_up.weight"},
                 SP_ERR_FORMAT, "blk.1.ffn_up.weight", "missing");
}

Test(model_load, qwen2_without_bias_is_an_error) {
    expect_error(&(tiny_spec){.arch = "qwen2", .matrix_type = QUANT_F32, .skip_tensor = "blk.0.attn_k.bias"},
                 SP_ERR_FORMAT, "blk.0.attn_k.bias", "missing");
}

Test(model_load, shape_mismatch_is_named) {
    expect_error(&(tiny_spec){.arch = "llama", .matrix_type = QUANT_F32, .bad_shape = "blk.0.attn_q.weight"},
                 SP_ERR_FORMAT, "blk.0.attn_q.weight", "does not match the hyperparameters");
}

Test(model_load, missing_key_is_named) {
    expect_error(&(tiny_spec){.arch = "llama", .matrix_type = QUANT_F32, .skip_key = "llama.embedding_length"},
                 SP_ERR_FORMAT, "llama.embedding_length", "missing");
}

Test(model_load, norm_of_wrong_type_is_named) {
    expect_error(&(tiny_spec){.arch = "llama", .matrix_type = QUANT_F32, .f16_norms = true}, SP_ERR_UNSUPPORTED,
                 "output_norm.weight", "must be F32");
}

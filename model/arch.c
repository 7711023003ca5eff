/* arch.c: reads a model's architecture description (model_hparams) from its GGUF
 * metadata. The supported families differ only in the flags set here: llama (normal
 * RoPE, optional rope_freqs scaling), qwen2 (QKV bias, NeoX RoPE), qwen3 (q/k RMSNorm,
 * NeoX RoPE, explicit head width). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

/* Reads "<arch>.<suffix>" as a positive integer into *out; when absent, uses fallback
 * if fallback > 0, else reports the missing key. */
static sp_status read_dim(const gguf_file *f, const char *arch, const char *suffix, int fallback, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    sp_status st = gguf_get_i64(f, key, &v);
    if (st == SP_ERR_NOT_FOUND && fallback > 0) {
        *out = fallback;
        return SP_OK;
    }
    if (st == SP_ERR_NOT_FOUND) return sp_fail(SP_ERR_FORMAT, "%s: required key %s is missing", gguf_path(f), key);
    if (st != SP_OK) return st; /* the getter's message names the file and the key */
    if (v <= 0 || v > (1 << 24))
        return sp_fail(SP_ERR_FORMAT, "%s: key %s = %lld is out of range (1..16777216)", gguf_path(f), key,
                       (long long)v);
    *out = (int)v;
    return SP_OK;
}

static sp_status read_float(const gguf_file *f, const char *arch, const char *suffix, float fallback, bool required,
                            float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    sp_status st = gguf_get_f32(f, key, out);
    if (st == SP_ERR_NOT_FOUND && !required) {
        *out = fallback;
        return SP_OK;
    }
    if (st == SP_ERR_NOT_FOUND) return sp_fail(SP_ERR_FORMAT, "%s: required key %s is missing", gguf_path(f), key);
    if (st != SP_OK) return st; /* the getter's message names the file and the key */
    if (!isfinite(*out) || *out <= 0.0f)
        return sp_fail(SP_ERR_FORMAT, "%s: key %s = %g must be a positive number", gguf_path(f), key, (double)*out);
    return SP_OK;
}

sp_status model_hparams_read(const gguf_file *f, model_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    gguf_str arch;
    sp_status st = gguf_get_str(f, "general.architecture", &arch);
    if (st == SP_ERR_NOT_FOUND)
        return sp_fail(SP_ERR_FORMAT, "%s: required key general.architecture is missing", gguf_path(f));
    if (st != SP_OK) return st; /* the getter's message names the file and the key */
    if (arch.len >= sizeof hp->arch_name)
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: unsupported architecture (name of %llu bytes)", gguf_path(f),
                       (unsigned long long)arch.len);
    memcpy(hp->arch_name, arch.ptr, arch.len);
    hp->arch_name[arch.len] = '\0';

    if (strcmp(hp->arch_name, "llama") == 0) {
        hp->arch = MODEL_ARCH_LLAMA;
        hp->rope_style = DEV_ROPE_NORMAL;
    } else if (strcmp(hp->arch_name, "qwen2") == 0) {
        hp->arch = MODEL_ARCH_QWEN2;
        hp->rope_style = DEV_ROPE_NEOX;
        hp->has_qkv_bias = true;
    } else if (strcmp(hp->arch_name, "qwen3") == 0) {
        hp->arch = MODEL_ARCH_QWEN3;
        hp->rope_style = DEV_ROPE_NEOX;
        hp->has_qk_norm = true;
    } else {
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: unsupported architecture '%s' (supported: llama, qwen2, qwen3)",
                       gguf_path(f), hp->arch_name);
    }

    const char *a = hp->arch_name;
    if ((st = read_dim(f, a, "block_count", 0, &hp->n_layers)) != SP_OK) return st;
    if ((st = read_dim(f, a, "embedding_length", 0, &hp->n_embd)) != SP_OK) return st;
    if ((st = read_dim(f, a, "feed_forward_length", 0, &hp->n_ff)) != SP_OK) return st;
    if ((st = read_dim(f, a, "attention.head_count", 0, &hp->n_heads)) != SP_OK) return st;
    if ((st = read_dim(f, a, "attention.head_count_kv", hp->n_heads, &hp->n_kv_heads)) != SP_OK) return st;
    int default_head_dim = hp->n_embd % hp->n_heads == 0 ? hp->n_embd / hp->n_heads : 0;
    if ((st = read_dim(f, a, "attention.key_length", default_head_dim, &hp->head_dim)) != SP_OK) return st;
    int value_dim;
    if ((st = read_dim(f, a, "attention.value_length", hp->head_dim, &value_dim)) != SP_OK) return st;
    if (value_dim != hp->head_dim)
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: %s.attention.value_length %d differs from key_length %d", gguf_path(f),
                       a, value_dim, hp->head_dim);
    if ((st = read_dim(f, a, "context_length", 0, &hp->n_ctx_train)) != SP_OK) return st;
    if ((st = read_dim(f, a, "rope.dimension_count", hp->head_dim, &hp->rope_n_rot)) != SP_OK) return st;
    if ((st = read_float(f, a, "attention.layer_norm_rms_epsilon", 0, true, &hp->rms_eps)) != SP_OK) return st;
    if ((st = read_float(f, a, "rope.freq_base", 10000.0f, false, &hp->rope_freq_base)) != SP_OK) return st;

    hp->rope_freq_scale = 1.0f;
    char key[128];
    gguf_str scaling;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    if (gguf_get_str(f, key, &scaling) == SP_OK && !gguf_str_eq(scaling, "none")) {
        if (!gguf_str_eq(scaling, "linear"))
            return sp_fail(SP_ERR_UNSUPPORTED, "%s: %s '%.*s' (supported: none, linear)", gguf_path(f), key,
                           (int)(scaling.len > 32 ? 32 : scaling.len), scaling.ptr);
        float factor;
        if ((st = read_float(f, a, "rope.scaling.factor", 1.0f, false, &factor)) != SP_OK) return st;
        hp->rope_freq_scale = 1.0f / factor;
    }

    uint64_t n_tokens = 0;
    gguf_value_type elem;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &elem, &n_tokens) != SP_OK || n_tokens == 0)
        return sp_fail(SP_ERR_FORMAT, "%s: required key tokenizer.ggml.tokens is missing or empty", gguf_path(f));
    if (n_tokens > (1u << 24))
        return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries (limit 16777216)", gguf_path(f),
                       (unsigned long long)n_tokens);
    hp->n_vocab = (int)n_tokens;

    if (hp->n_heads % hp->n_kv_heads != 0)
        return sp_fail(SP_ERR_FORMAT, "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d",
                       gguf_path(f), a, hp->n_heads, hp->n_kv_heads);
    if (hp->rope_n_rot > hp->head_dim || hp->rope_n_rot % 2 != 0)
        return sp_fail(SP_ERR_FORMAT, "%s: %s.rope.dimension_count %d must be even and at most the head width %d",
                       gguf_path(f), a, hp->rope_n_rot, hp->head_dim);
    if (hp->head_dim > 512)
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: head width %d above 512", gguf_path(f), hp->head_dim);
    hp->tied_output = gguf_find_tensor(f, "output.weight") == NULL;
    hp->has_rope_freqs = gguf_find_tensor(f, "rope_freqs.weight") != NULL;
    return SP_OK;
}

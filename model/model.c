/* model.c: loading a model: the GGUF file, the architecture description, every
 * tensor checked against it (presence, shape, type) and made usable on the device,
 * the activation arena, and the tokenizer.
 *
 * Ownership: the model owns its gguf_file (the CPU backend reads weights in place from
 * its mapping, so the file stays open for the model's life), its vocab and its layer
 * table; the device is borrowed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "model/model_internal.h"

typedef enum tensor_kind {
    TENSOR_MATRIX, /* any supported weight format */
    TENSOR_VECTOR  /* norms and biases: F32 only */
} tensor_kind;

/* Finds `name`, checks its shape is [ne0] (ne1 == 0) or [ne0, ne1] and its type fits
 * `kind`, and makes it usable on the device. A missing tensor is an error unless
 * optional (then out->data stays NULL). */
static sp_status model_bind_tensor(model *m, const char *name, tensor_kind kind, int64_t ne0, int64_t ne1,
                                   bool optional, dev_tensor *out) {
    const char *path = gguf_path(m->file);
    memset(out, 0, sizeof *out);
    const gguf_tensor *t = gguf_find_tensor(m->file, name);
    if (!t) {
        if (optional) return SP_OK;
        return sp_fail(SP_ERR_FORMAT, "%s: required tensor %s is missing", path, name);
    }
    int64_t have1 = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) have1 *= t->ne[d];
    bool shape_ok = t->ne[0] == ne0 && have1 == (ne1 > 0 ? ne1 : 1) && (ne1 > 0 ? t->n_dims <= 2 : t->n_dims == 1);
    if (!shape_ok) {
        char have[96], want[64];
        int len = snprintf(have, sizeof have, "[%lld", (long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && len < (int)sizeof have; d++)
            len += snprintf(have + len, sizeof have - (size_t)len, ", %lld", (long long)t->ne[d]);
        if (len < (int)sizeof have) snprintf(have + len, sizeof have - (size_t)len, "]");
        if (ne1 > 0)
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)ne0, (long long)ne1);
        else
            snprintf(want, sizeof want, "[%lld]", (long long)ne0);
        return sp_fail(SP_ERR_FORMAT, "%s: tensor %s: shape %s does not match the hyperparameters (expected %s)", path,
                       name, have, want);
    }
    if (kind == TENSOR_VECTOR && t->type != QUANT_F32)
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: tensor %s: type %s (norms and biases must be F32)", path, name,
                       quant_type_name(t->type));
    if (!quant_type_supported(t->type) || t->type == QUANT_Q8_1 || t->type == QUANT_Q8_K)
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: tensor %s: unsupported type %s (id %u)", path, name,
                       quant_type_name(t->type), t->type);
    sp_status st = dev_weight_init(m->dev, out, (quant_type)t->type, ne0, ne1 > 0 ? ne1 : 1, t->data, t->nbytes);
    if (st != SP_OK) return sp_fail_prefix(st, "%s: tensor %s", path, name);
    return SP_OK;
}

static sp_status model_bind_layer(model *m, int il, model_layer *l) {
    const model_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, q_width = (int64_t)hp->n_heads * hp->head_dim;
    int64_t kv_width = (int64_t)hp->n_kv_heads * hp->head_dim;
    char name[96];
    sp_status st;
#define BIND(suffix, kind, ne0, ne1, optional, field)                                               \
    do {                                                                                            \
        snprintf(name, sizeof name, "blk.%d.%s", il, suffix);                                       \
        if ((st = model_bind_tensor(m, name, kind, ne0, ne1, optional, field)) != SP_OK) return st; \
    } while (0)
    BIND("attn_norm.weight", TENSOR_VECTOR, d, 0, false, &l->attn_norm);
    BIND("attn_q.weight", TENSOR_MATRIX, d, q_width, false, &l->wq);
    BIND("attn_k.weight", TENSOR_MATRIX, d, kv_width, false, &l->wk);
    BIND("attn_v.weight", TENSOR_MATRIX, d, kv_width, false, &l->wv);
    BIND("attn_output.weight", TENSOR_MATRIX, q_width, d, false, &l->wo);
    BIND("attn_q.bias", TENSOR_VECTOR, q_width, 0, !hp->has_qkv_bias, &l->bq);
    BIND("attn_k.bias", TENSOR_VECTOR, kv_width, 0, !hp->has_qkv_bias, &l->bk);
    BIND("attn_v.bias", TENSOR_VECTOR, kv_width, 0, !hp->has_qkv_bias, &l->bv);
    if (hp->has_qk_norm) {
        BIND("attn_q_norm.weight", TENSOR_VECTOR, hp->head_dim, 0, false, &l->q_norm);
        BIND("attn_k_norm.weight", TENSOR_VECTOR, hp->head_dim, 0, false, &l->k_norm);
    }
    BIND("ffn_norm.weight", TENSOR_VECTOR, d, 0, false, &l->ffn_norm);
    BIND("ffn_gate.weight", TENSOR_MATRIX, d, hp->n_ff, false, &l->w_gate);
    BIND("ffn_up.weight", TENSOR_MATRIX, d, hp->n_ff, false, &l->w_up);
    BIND("ffn_down.weight", TENSOR_MATRIX, hp->n_ff, d, false, &l->w_down);
#undef BIND
    return SP_OK;
}

/* The one place activation sizes are computed: floats per buffer for T rows. */
static size_t model_activations_size(const model_hparams *hp, int64_t t, model_activations *layout, float *base) {
    int64_t q_width = (int64_t)hp->n_heads * hp->head_dim;
    int64_t kv_width = (int64_t)hp->n_kv_heads * hp->head_dim;
    int64_t logit_rows = t < MODEL_LOGIT_ROWS ? t : MODEL_LOGIT_ROWS;
    struct {
        float **field;
        int64_t floats;
    } parts[] = {
        {&layout->x, t * hp->n_embd},    {&layout->xn, t * hp->n_embd},
        {&layout->q, t * q_width},       {&layout->k, t * kv_width},
        {&layout->v, t * kv_width},      {&layout->attn, t * q_width},
        {&layout->proj, t * hp->n_embd}, {&layout->gate, t * hp->n_ff},
        {&layout->up, t * hp->n_ff},     {&layout->logits, logit_rows * hp->n_vocab},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        /* keep every buffer 64-byte aligned */
        *parts[i].field = base ? base + total : NULL;
        total += ((size_t)parts[i].floats + 15) & ~(size_t)15;
    }
    return total;
}

sp_status model_load(const char *path, dev_backend *dev, const model_options *opts, model **out) {
    sp_status st;
    model *m = calloc(1, sizeof *m);
    if (!m) return sp_fail(SP_ERR_NOMEM, "%s: out of memory", path);
    m->dev = dev;
    m->max_batch_tokens = opts && opts->max_batch_tokens > 0 ? opts->max_batch_tokens : 512;

    if ((st = gguf_open(path, &m->file)) != SP_OK) goto fail;
    if ((st = model_hparams_read(m->file, &m->hp)) != SP_OK) goto fail;
    const model_hparams *hp = &m->hp;
    if (gguf_tensor_count(m->file) == 0) {
        st = sp_fail(SP_ERR_FORMAT, "%s: the file holds no tensors (a vocab-only file cannot be run)", path);
        goto fail;
    }

    if ((st = model_bind_tensor(m, "token_embd.weight", TENSOR_MATRIX, hp->n_embd, hp->n_vocab, false,
                                &m->token_embd)) != SP_OK)
        goto fail;
    if ((st = model_bind_tensor(m, "output_norm.weight", TENSOR_VECTOR, hp->n_embd, 0, false, &m->output_norm)) !=
        SP_OK)
        goto fail;
    if (hp->tied_output)
        m->output = m->token_embd;
    else if ((st = model_bind_tensor(m, "output.weight", TENSOR_MATRIX, hp->n_embd, hp->n_vocab, false, &m->output)) !=
             SP_OK)
        goto fail;
    if (hp->has_rope_freqs && (st = model_bind_tensor(m, "rope_freqs.weight", TENSOR_VECTOR, hp->rope_n_rot / 2, 0,
                                                      false, &m->rope_freqs)) != SP_OK)
        goto fail;

    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) {
        st = sp_fail(SP_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (int il = 0; il < hp->n_layers; il++)
        if ((st = model_bind_layer(m, il, &m->layers[il])) != SP_OK) goto fail;

    m->rope = (dev_rope){
        .style = hp->rope_style,
        .n_rot = hp->rope_n_rot,
        .freq_base = hp->rope_freq_base,
        .freq_scale = hp->rope_freq_scale,
        .freq_factors = hp->has_rope_freqs ? &m->rope_freqs : NULL,
    };

    size_t floats = model_activations_size(hp, m->max_batch_tokens, &m->act, NULL);
    void *arena;
    if ((st = dev_arena_alloc(dev, floats * sizeof(float), &arena)) != SP_OK) goto fail;
    model_activations_size(hp, m->max_batch_tokens, &m->act, arena);
    int64_t widest = hp->n_embd;
    if ((int64_t)hp->n_heads * hp->head_dim > widest) widest = (int64_t)hp->n_heads * hp->head_dim;
    if (hp->n_ff > widest) widest = hp->n_ff;
    if ((st = dev_reserve(dev, m->max_batch_tokens, widest)) != SP_OK) goto fail;

    if ((st = tok_vocab_load(m->file, &m->vocab)) != SP_OK) goto fail;
    if (tok_vocab_size(m->vocab) != hp->n_vocab) {
        st = sp_fail(SP_ERR_FORMAT, "%s: tokenizer has %d tokens but the model's vocabulary is %d", path,
                     tok_vocab_size(m->vocab), hp->n_vocab);
        goto fail;
    }
    *out = m;
    return SP_OK;
fail:
    model_destroy(m);
    return st;
}

void model_destroy(model *m) {
    if (!m) return;
    tok_vocab_destroy(m->vocab);
    free(m->layers);
    gguf_close(m->file);
    free(m);
}

const model_hparams *model_get_hparams(const model *m) {
    return &m->hp;
}

const tok_vocab *model_vocab(const model *m) {
    return m->vocab;
}

const gguf_file *model_gguf(const model *m) {
    return m->file;
}

dev_backend *model_device(const model *m) {
    return m->dev;
}

int model_max_batch_tokens(const model *m) {
    return m->max_batch_tokens;
}

dev_kv_shape model_kv_shape(const model *m, int n_blocks, int block_size, sp_kv_type type) {
    return (dev_kv_shape){
        .n_layers = m->hp.n_layers,
        .n_blocks = n_blocks,
        .block_size = block_size,
        .n_kv_heads = m->hp.n_kv_heads,
        .head_dim = m->hp.head_dim,
        .kv_type = type,
    };
}

sp_status model_kv_create_typed(model *m, int n_blocks, int block_size, sp_kv_type type, dev_kv **out) {
    dev_kv_shape shape = model_kv_shape(m, n_blocks, block_size, type);
    return dev_kv_create(m->dev, &shape, out);
}

sp_status model_kv_create(model *m, int n_blocks, int block_size, dev_kv **out) {
    return model_kv_create_typed(m, n_blocks, block_size, SP_KV_F16, out);
}

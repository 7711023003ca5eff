/* forward.c: the forward pass of the llama family, written once over the device ops.
 *
 * Legend: T = tokens in the step, D = model width, H = query heads, Hk = KV heads,
 * Dh = head width, F = feed-forward width, V = vocabulary, L = logit rows.
 *
 * The embedding and the layers go through dev_record (a GPU backend replays them as a
 * captured graph for decode batches); the residual add and the next norm are one op.
 *
 * Per layer: x += Wo . attention(rope(norm_q(Wq . n(x) + bq)), rope(norm_k(Wk . n(x) + bk)), Wv . n(x) + bv)
 *            x += Wdown . (silu(Wgate . n(x)) * Wup . n(x))
 * then logits = Wout . n(x) for the rows the step asks for, L rows per pass.
 * Biases exist for qwen2, q/k norms for qwen3; the rest is shared.
 *
 * Embeddings: n(x) itself (the final hidden state after the output norm, as llama.cpp's
 * embeddings of a decoder model) for the step's hidden rows, copied back before the
 * logits; a step without hidden rows runs exactly as before.
 */
#include <math.h>

#include "model/model_internal.h"

/* What the recorded part of a step needs; compared by value (dev_record), so no padding. */
typedef struct forward_record {
    model *m;
    dev_kv *kv;
    int64_t n_layers; /* the first n_layers layers run (all, or a self-speculative draft's) */
} forward_record;

/* Embedding and every layer, for the step's tokens (ds->n_tokens rows: a GPU backend
 * may pad a decode batch to its graph bucket). Leaves x, the last layer's output. */
static void forward_layers(const void *ctx, const dev_step *ds) {
    const forward_record *rec = ctx;
    model *m = rec->m;
    dev_kv *kv = rec->kv;
    const model_hparams *hp = &m->hp;
    const model_activations *a = &m->act;
    dev_backend *dev = m->dev;
    int64_t t = ds->n_tokens;
    int64_t d = hp->n_embd;
    float attn_scale = 1.0f / sqrtf((float)hp->head_dim);

    dev_embed(dev, a->x, &m->token_embd, ds);
    dev_rmsnorm(dev, a->xn, a->x, &m->layers[0].attn_norm, hp->rms_eps, t, d);
    const int n_layers = (int)rec->n_layers;
    for (int il = 0; il < n_layers; il++) {
        const model_layer *l = &m->layers[il];
        /* attention block (xn holds this layer's attention norm of x) */
        const dev_matmul_part qkv[3] = {
            {a->q, &l->wq, l->bq.data ? &l->bq : NULL},
            {a->k, &l->wk, l->bk.data ? &l->bk : NULL},
            {a->v, &l->wv, l->bv.data ? &l->bv : NULL},
        };
        dev_matmul_group(dev, qkv, 3, a->xn, t);
        if (hp->has_qk_norm) {
            dev_rmsnorm(dev, a->q, a->q, &l->q_norm, hp->rms_eps, t * hp->n_heads, hp->head_dim);
            dev_rmsnorm(dev, a->k, a->k, &l->k_norm, hp->rms_eps, t * hp->n_kv_heads, hp->head_dim);
        }
        dev_rope_kv_write(dev, kv, il, a->q, a->k, a->v, ds, &m->rope, hp->n_heads);
        dev_attention(dev, a->attn, a->q, kv, il, ds, hp->n_heads, attn_scale);
        dev_matmul(dev, a->proj, a->attn, &l->wo, NULL, t);
        dev_add_rmsnorm(dev, a->xn, a->x, a->proj, &l->ffn_norm, hp->rms_eps, t, d);
        /* feed-forward block */
        const dev_matmul_part gate_up[2] = {{a->gate, &l->w_gate, NULL}, {a->up, &l->w_up, NULL}};
        dev_matmul_group(dev, gate_up, 2, a->xn, t);
        dev_swiglu(dev, a->gate, a->gate, a->up, t * hp->n_ff);
        dev_matmul(dev, a->proj, a->gate, &l->w_down, NULL, t);
        if (il + 1 < n_layers) /* the residual add with the next layer's attention norm */
            dev_add_rmsnorm(dev, a->xn, a->x, a->proj, &m->layers[il + 1].attn_norm, hp->rms_eps, t, d);
        else
            dev_add(dev, a->x, a->x, a->proj, t * d);
    }
}

/* The step's first n_layers layers, recorded: what every entry point starts with. */
static sp_status forward_begin(model *m, dev_kv *kv, const dev_step *step, int n_layers, const dev_step **ds) {
    if (step->n_tokens > m->max_batch_tokens)
        return sp_fail(SP_ERR_INVALID_ARG, "step of %d tokens exceeds max_batch_tokens %d", step->n_tokens,
                       m->max_batch_tokens);
    if (n_layers < 1 || n_layers > m->hp.n_layers)
        return sp_fail(SP_ERR_INVALID_ARG, "a step of %d layers for a model of %d", n_layers, m->hp.n_layers);
    sp_status st = dev_step_begin(m->dev, step, m->hp.n_vocab, kv, ds);
    if (st != SP_OK) return st;
    const forward_record rec = {m, kv, n_layers};
    return dev_record(m->dev, *ds, forward_layers, &rec, sizeof rec);
}

/* Logits (rows, V) in the activations for logit rows first..first+rows of the step. */
static void forward_logits(model *m, const dev_step *ds, int32_t first, int32_t rows) {
    const model_hparams *hp = &m->hp;
    const model_activations *a = &m->act;
    dev_gather_rows(m->dev, a->xn, a->x, ds->logit_rows + first, rows, hp->n_embd);
    dev_rmsnorm(m->dev, a->xn, a->xn, &m->output_norm, hp->rms_eps, rows, hp->n_embd);
    dev_matmul(m->dev, a->logits, a->xn, &m->output, NULL, rows);
}

/* The final hidden states (n_hidden, D) of the step's hidden rows, normed with the
 * output norm, copied to the host. xn has a row for every step token, so one pass. */
static sp_status forward_hidden(model *m, const dev_step *ds, float *hidden) {
    const model_hparams *hp = &m->hp;
    const model_activations *a = &m->act;
    dev_gather_rows(m->dev, a->xn, a->x, ds->hidden_rows, ds->n_hidden, hp->n_embd);
    dev_rmsnorm(m->dev, a->xn, a->xn, &m->output_norm, hp->rms_eps, ds->n_hidden, hp->n_embd);
    return dev_copy_to_host(m->dev, hidden, a->xn, (size_t)ds->n_hidden * (size_t)hp->n_embd * sizeof(float));
}

static int32_t logit_chunk(const dev_step *step, int32_t first) {
    return step->n_logits - first < MODEL_LOGIT_ROWS ? step->n_logits - first : MODEL_LOGIT_ROWS;
}

sp_status model_forward(model *m, dev_kv *kv, const dev_step *step, float *logits) {
    if (step->n_hidden > 0)
        return sp_fail(SP_ERR_INVALID_ARG, "model_forward: a step of %d hidden rows (model_forward_sample_hidden)",
                       step->n_hidden);
    const dev_step *ds;
    sp_status st = forward_begin(m, kv, step, m->hp.n_layers, &ds);
    if (st != SP_OK) return st;
    const size_t n_vocab = (size_t)m->hp.n_vocab;
    for (int32_t first = 0; first < step->n_logits; first += MODEL_LOGIT_ROWS) { /* L rows at a time */
        int32_t rows = logit_chunk(step, first);
        forward_logits(m, ds, first, rows);
        st = dev_copy_to_host(m->dev, logits + (size_t)first * n_vocab, m->act.logits,
                              (size_t)rows * n_vocab * sizeof(float));
        if (st != SP_OK) return st;
    }
    return step->n_logits == 0 ? dev_synchronize(m->dev) : SP_OK;
}

/* The step through n_layers layers; hidden rows into hidden (when not NULL), then the
 * draw of every logit row. */
static sp_status forward_sample(model *m, dev_kv *kv, const dev_step *step, int n_layers, const dev_sample_vocab *vocab,
                                const dev_sample_row *rows, dev_sample_result *results, float *hidden,
                                const model_sample_hook *hook) {
    if (vocab->n_vocab != m->hp.n_vocab)
        return sp_fail(SP_ERR_INVALID_ARG, "sample: vocabulary of %d for a model of %d", vocab->n_vocab, m->hp.n_vocab);
    if (step->n_hidden > 0 && !hidden)
        return sp_fail(SP_ERR_INVALID_ARG, "a step of %d hidden rows without a buffer for them", step->n_hidden);
    const dev_step *ds;
    sp_status st = forward_begin(m, kv, step, n_layers, &ds);
    if (st != SP_OK) return st;
    if (step->n_hidden > 0 && (st = forward_hidden(m, ds, hidden)) != SP_OK) return st;
    for (int32_t first = 0; first < step->n_logits; first += MODEL_LOGIT_ROWS) {
        int32_t n = logit_chunk(step, first);
        forward_logits(m, ds, first, n);
        /* the layers and the first logits are issued: the caller's draw inputs now */
        if (first == 0 && hook && hook->before_sample) hook->before_sample(hook->ctx);
        st = dev_sample(m->dev, m->act.logits, n, vocab, rows + first, results + first);
        if (st != SP_OK) return st;
    }
    return step->n_logits == 0 && step->n_hidden == 0 ? dev_synchronize(m->dev) : SP_OK;
}

sp_status model_forward_sample(model *m, dev_kv *kv, const dev_step *step, const dev_sample_vocab *vocab,
                               const dev_sample_row *rows, dev_sample_result *results) {
    return forward_sample(m, kv, step, m->hp.n_layers, vocab, rows, results, NULL, NULL);
}

sp_status model_forward_sample_hidden(model *m, dev_kv *kv, const dev_step *step, const dev_sample_vocab *vocab,
                                      const dev_sample_row *rows, dev_sample_result *results, float *hidden,
                                      const model_sample_hook *hook) {
    return forward_sample(m, kv, step, m->hp.n_layers, vocab, rows, results, hidden, hook);
}

sp_status model_forward_sample_layers(model *m, dev_kv *kv, const dev_step *step, int n_layers,
                                      const dev_sample_vocab *vocab, const dev_sample_row *rows,
                                      dev_sample_result *results) {
    return forward_sample(m, kv, step, n_layers, vocab, rows, results, NULL, NULL);
}

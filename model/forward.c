/* forward.c: the forward pass of the llama family, written once over the device ops.
 *
 * Legend: T = tokens in the step, D = model width, H = query heads, Hk = KV heads,
 * Dh = head width, F = feed-forward width, V = vocabulary, L = logit rows.
 *
 * Per layer: x += Wo . attention(rope(norm_q(Wq . n(x) + bq)), rope(norm_k(Wk . n(x) + bk)), Wv . n(x) + bv)
 *            x += Wdown . (silu(Wgate . n(x)) * Wup . n(x))
 * then logits = Wout . n(x) for the rows the step asks for, L rows per pass.
 * Biases exist for qwen2, q/k norms for qwen3; the rest is shared.
 */
#include <math.h>

#include "model/model_internal.h"

sp_status model_forward(model *m, dev_kv *kv, const dev_step *step, float *logits) {
    const model_hparams *hp = &m->hp;
    const model_activations *a = &m->act;
    dev_backend *dev = m->dev;
    if (step->n_tokens > m->max_batch_tokens)
        return sp_fail(SP_ERR_INVALID_ARG, "step of %d tokens exceeds max_batch_tokens %d", step->n_tokens,
                       m->max_batch_tokens);
    const dev_step *ds;
    sp_status st = dev_step_begin(dev, step, hp->n_vocab, kv, &ds);
    if (st != SP_OK) return st;

    int64_t t = step->n_tokens;
    int64_t d = hp->n_embd;
    float attn_scale = 1.0f / sqrtf((float)hp->head_dim);

    dev_embed(dev, a->x, &m->token_embd, ds);
    for (int il = 0; il < hp->n_layers; il++) {
        const model_layer *l = &m->layers[il];
        /* attention block */
        dev_rmsnorm(dev, a->xn, a->x, &l->attn_norm, hp->rms_eps, t, d);
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
        dev_rope_apply(dev, a->q, ds, &m->rope, hp->n_heads, hp->head_dim);
        dev_rope_apply(dev, a->k, ds, &m->rope, hp->n_kv_heads, hp->head_dim);
        dev_kv_write(dev, kv, il, a->k, a->v, ds);
        dev_attention(dev, a->attn, a->q, kv, il, ds, hp->n_heads, attn_scale);
        dev_matmul(dev, a->proj, a->attn, &l->wo, NULL, t);
        dev_add(dev, a->x, a->x, a->proj, t * d);
        /* feed-forward block */
        dev_rmsnorm(dev, a->xn, a->x, &l->ffn_norm, hp->rms_eps, t, d);
        const dev_matmul_part gate_up[2] = {{a->gate, &l->w_gate, NULL}, {a->up, &l->w_up, NULL}};
        dev_matmul_group(dev, gate_up, 2, a->xn, t);
        dev_swiglu(dev, a->gate, a->gate, a->up, t * hp->n_ff);
        dev_matmul(dev, a->proj, a->gate, &l->w_down, NULL, t);
        dev_add(dev, a->x, a->x, a->proj, t * d);
    }

    /* logits, L rows at a time */
    for (int32_t first = 0; first < step->n_logits; first += MODEL_LOGIT_ROWS) {
        int32_t rows = step->n_logits - first < MODEL_LOGIT_ROWS ? step->n_logits - first : MODEL_LOGIT_ROWS;
        dev_gather_rows(dev, a->xn, a->x, ds->logit_rows + first, rows, d);
        dev_rmsnorm(dev, a->xn, a->xn, &m->output_norm, hp->rms_eps, rows, d);
        dev_matmul(dev, a->logits, a->xn, &m->output, NULL, rows);
        st = dev_copy_to_host(dev, logits + (size_t)first * (size_t)hp->n_vocab, a->logits,
                              (size_t)rows * (size_t)hp->n_vocab * sizeof(float));
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

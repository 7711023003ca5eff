/* model_internal.h: shared between the files of the model module (model.c, forward.c,
 * arch.c), never included from outside model/: the loaded model's layout. */
#ifndef SP_MODEL_INTERNAL_H
#define SP_MODEL_INTERNAL_H

#include "gguf/gguf.h"
#include "gpu/device.h"
#include "model/model.h"

typedef struct model_layer {
    dev_tensor attn_norm;      /* (D) */
    dev_tensor wq, wk, wv;     /* (H*Dh, D), (Hk*Dh, D), (Hk*Dh, D) */
    dev_tensor bq, bk, bv;     /* biases (qwen2), type F32 */
    dev_tensor q_norm, k_norm; /* (Dh) (qwen3) */
    dev_tensor wo;             /* (D, H*Dh) */
    dev_tensor ffn_norm;       /* (D) */
    dev_tensor w_gate, w_up;   /* (F, D) */
    dev_tensor w_down;         /* (D, F) */
} model_layer;

/* Rows of logits computed per pass of the output matmul (bounds the logits buffer). */
enum { MODEL_LOGIT_ROWS = 64 };

/* Activations for the largest step, carved from one device allocation (model.c
 * model_activations_size is the one place that sizes them). T = max_batch_tokens. */
typedef struct model_activations {
    float *x;      /* (T, D) residual stream */
    float *xn;     /* (T, D) normalized input of a sublayer */
    float *q;      /* (T, H*Dh) */
    float *k;      /* (T, Hk*Dh) */
    float *v;      /* (T, Hk*Dh) */
    float *attn;   /* (T, H*Dh) attention output */
    float *proj;   /* (T, D) sublayer output before the residual add */
    float *gate;   /* (T, F) */
    float *up;     /* (T, F) */
    float *logits; /* (T, V) */
} model_activations;

struct model {
    model_hparams hp;
    gguf_file *file; /* owns the mapping the CPU backend reads weights from */
    tok_vocab *vocab;
    dev_backend *dev; /* borrowed */
    int max_batch_tokens;

    dev_tensor token_embd;  /* (V, D) */
    dev_tensor output_norm; /* (D) */
    dev_tensor output;      /* (V, D); token_embd's data when tied */
    dev_tensor rope_freqs;  /* (Dh/2) F32, when has_rope_freqs */
    dev_rope rope;
    model_layer *layers; /* (n_layers) */
    model_activations act;
};

#endif

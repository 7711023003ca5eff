/* model.h: a loaded model: architecture description, weights on a device, tokenizer,
 * and the forward pass over a ragged batch.
 *
 * Thread rules: a model belongs to the thread that drives its device (the scheduler
 * thread, or the CLI's main thread). Its vocab (model_vocab) is immutable and may be
 * used from any thread.
 */
#ifndef SP_MODEL_H
#define SP_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "gpu/device.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

typedef enum model_arch { MODEL_ARCH_LLAMA, MODEL_ARCH_QWEN2, MODEL_ARCH_QWEN3 } model_arch;

/* The architecture description: everything that varies between supported families is
 * a field here, not a copy of the forward loop. */
typedef struct model_hparams {
    model_arch arch;
    char arch_name[32]; /* general.architecture */
    int n_layers;
    int n_embd;     /* D */
    int n_heads;    /* H */
    int n_kv_heads; /* Hk */
    int head_dim;   /* Dh */
    int n_ff;       /* F */
    int n_vocab;    /* V */
    int n_ctx_train;
    float rms_eps;
    dev_rope_style rope_style;
    int rope_n_rot;
    float rope_freq_base;
    float rope_freq_scale;
    bool has_qkv_bias;   /* qwen2 */
    bool has_qk_norm;    /* qwen3 */
    bool tied_output;    /* output.weight absent: logits use token_embd.weight */
    bool has_rope_freqs; /* rope_freqs.weight present (Llama 3.1 style scaling) */
} model_hparams;

/* Reads and checks the architecture description from f (SP_ERR_UNSUPPORTED for other
 * architectures, SP_ERR_FORMAT naming the key for missing or bad keys). */
sp_status model_hparams_read(const gguf_file *f, model_hparams *hp);

typedef struct model_options {
    int max_batch_tokens; /* largest step the forward pass will be given (rows) */
} model_options;

typedef struct model model;

/* Opens path, validates every tensor against the hyperparameters (presence, shape,
 * type), makes the weights usable on dev and loads the tokenizer. dev is borrowed and
 * must outlive the model. Caller owns *out; free with model_destroy. */
sp_status model_load(const char *path, dev_backend *dev, const model_options *opts, model **out);
void model_destroy(model *m);

const model_hparams *model_get_hparams(const model *m);
const tok_vocab *model_vocab(const model *m);
const gguf_file *model_gguf(const model *m);
dev_backend *model_device(const model *m);
int model_max_batch_tokens(const model *m);

/* The KV pool shape of this model: n_blocks blocks of block_size tokens in type. */
dev_kv_shape model_kv_shape(const model *m, int n_blocks, int block_size, sp_kv_type type);

/* A KV pool shaped for this model: n_blocks blocks of block_size tokens, F16 (_typed:
 * in type; SP_ERR_UNSUPPORTED naming the head width where the type cannot hold it).
 * Caller owns *out; free with dev_kv_destroy(model_device(m), kv). */
sp_status model_kv_create(model *m, int n_blocks, int block_size, dev_kv **out);
sp_status model_kv_create_typed(model *m, int n_blocks, int block_size, sp_kv_type type, dev_kv **out);

/* Runs one step: writes the step's K/V into kv and stores the logits of the rows the
 * step asks for in logits (n_logits, V), host memory owned by the caller. */
sp_status model_forward(model *m, dev_kv *kv, const dev_step *step, float *logits);

/* Runs one step like model_forward, then draws the next token of every logit row
 * where the logits are (dev_sample): rows and results are (n_logits), host memory;
 * only the results cross to the host. */
sp_status model_forward_sample(model *m, dev_kv *kv, const dev_step *step, const dev_sample_vocab *vocab,
                               const dev_sample_row *rows, dev_sample_result *results);

/* Called in a step once its layers (and the first rows' logits) are issued and before its
 * first row is drawn (not at all in a step without logit rows), so that
 * the caller can finish the rows' draw inputs (the scheduler's grammar masks) while a GPU
 * runs the layers or the CPU pool's other threads do. */
typedef struct model_sample_hook {
    void (*before_sample)(void *ctx);
    void *ctx;
} model_sample_hook;

/* model_forward_sample, and first the final hidden state of the step's hidden rows (after
 * the output norm: what llama.cpp's embeddings are for a decoder model) copied into hidden
 * (n_hidden, D), host memory owned by the caller. The other entry points refuse a step
 * with hidden rows. hook (NULL: none) is called once, after the layers are issued. */
sp_status model_forward_sample_hidden(model *m, dev_kv *kv, const dev_step *step, const dev_sample_vocab *vocab,
                                      const dev_sample_row *rows, dev_sample_result *results, float *hidden,
                                      const model_sample_hook *hook);

/* model_forward_sample through the first n_layers layers only (1..n_layers of the
 * model), then the output norm and head: the self-speculative drafter. It writes the K/V
 * of those layers only, which are exactly what the whole model writes there for the
 * same tokens, so it may share the target's KV cache. */
sp_status model_forward_sample_layers(model *m, dev_kv *kv, const dev_step *step, int n_layers,
                                      const dev_sample_vocab *vocab, const dev_sample_row *rows,
                                      dev_sample_result *results);

#endif

/* device.h: the interface between the forward pass (model/) and a compute backend.
 *
 * Legend: T = tokens in the step, S = sequences in the step, D = model width,
 * N/K = matmul output/input width, H = query heads, Hk = KV heads, Dh = head width,
 * V = vocabulary, B = tokens per KV block.
 *
 * The forward pass is written once over these ops; a backend (gpu/host/ for the CPU,
 * gpu/cuda/ for NVIDIA GPUs) implements them and owns device memory: weights, one activation
 * arena, and the KV pools. Pointers passed to ops (float *, dev_tensor data) are device
 * addresses of that backend; for the CPU backend they are plain host pointers.
 *
 * A step is a ragged batch (dev_step): the tokens of several sequences, each token with
 * its position and sequence, each sequence with its paged KV block table, and the rows
 * whose logits (generation) or final hidden state (embeddings) the caller wants. Prefill
 * chunks and decode rows mix freely. On the CPU backend, results for a token never
 * depend on what else is in the step, bit for bit. A GPU backend's matrix products may
 * take other kernels (and so another summation order) for another number of rows, so
 * there they agree within the precision of its arithmetic; its sampling is per row.
 *
 * Thread rules: a dev_backend and everything allocated from it belong to one thread
 * (the scheduler thread, or the CLI's main thread); the backend may use its own worker
 * threads inside an op, and ops return only when their results are complete (or, for
 * asynchronous backends, ordered before the next op; dev_synchronize waits).
 */
#ifndef SP_DEVICE_H
#define SP_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/kinds.h"
#include "common/status.h"
#include "quant/quant.h"
#include "sample/sample.h"

typedef struct dev_backend dev_backend;

/* (sp_device, sp_cuda_gemv and sp_cpu_isa, their names and parsers: common/kinds.h) */
/* SP_ERR_UNSUPPORTED naming what is missing when this CPU (and OS) cannot run the set. */
sp_status dev_cpu_isa_check(sp_cpu_isa isa);
/* The llama.cpp kernel set whose rounding this set reproduces ("avx2" or "generic"), or
 * "amx" for the amx set's own arithmetic, which no llama.cpp build computes: what a parity
 * reference must have been made with to compare bit for bit. */
const char *dev_cpu_isa_rounding(sp_cpu_isa isa);
/* Whether this CPU has AMX tiles the process may use (the amx set's condition). */
bool dev_cpu_has_amx(void);

typedef struct dev_options {
    sp_device kind;
    int n_threads;           /* CPU worker threads including the caller; <= 0: one per core */
    sp_cpu_isa cpu_isa;      /* CPU kernels; AUTO (0) picks the best; a set the CPU lacks fails */
    bool no_graphs;          /* GPU: run decode steps op by op instead of replaying captured graphs */
    sp_cuda_gemv quant_gemv; /* GPU only */
} dev_options;

/* A weight tensor on the device: rows of ne[0] elements in `type`, ne[1] rows. */
typedef struct dev_tensor {
    quant_type type;
    int64_t ne0; /* elements per row (K for a matmul weight, D for a norm) */
    int64_t ne1; /* rows (N for a matmul weight, V for embeddings) */
    size_t nbytes;
    const void *data; /* device address; owned by the backend (or the model's mapping) */
    /* A GPU backend's second copy in the file's block format (packed_type), read by its
     * fused dequantize-GEMV for small batches; NULL where there is none. */
    const void *packed;
    quant_type packed_type;
} dev_tensor;

/* Rotary embedding settings of one model. */
typedef enum dev_rope_style {
    DEV_ROPE_NORMAL, /* rotate adjacent pairs (x[2i], x[2i+1]): llama */
    DEV_ROPE_NEOX    /* rotate halves (x[i], x[i + n_rot/2]): qwen2, qwen3 */
} dev_rope_style;

typedef struct dev_rope {
    dev_rope_style style;
    int n_rot; /* rotated dims per head (<= Dh) */
    float freq_base;
    float freq_scale;               /* linear position scaling (1 = none) */
    const dev_tensor *freq_factors; /* (n_rot/2) F32, divides each frequency; or NULL */
} dev_rope;

/* The element format of the KV pools: sp_kv_type (common/kinds.h, with its names). */
/* The quant/ element format of the type (QUANT_F16, QUANT_Q8_0, QUANT_Q4_0). */
quant_type dev_kv_quant_type(sp_kv_type type);

/* The KV pools: per layer, K and V each [n_blocks][B][Hk][row], a row being Dh
 * elements in kv_type (dev_kv_row_bytes). */
typedef struct dev_kv_shape {
    int n_layers;
    int n_blocks;
    int block_size; /* B */
    int n_kv_heads; /* Hk */
    int head_dim;   /* Dh */
    sp_kv_type kv_type;
} dev_kv_shape;

/* SP_ERR_INVALID_ARG for a dimension that is not positive, SP_ERR_UNSUPPORTED naming
 * the head width when the type's blocks do not divide it; dev_kv_create checks it. */
sp_status dev_kv_shape_check(const dev_kv_shape *shape);
/* Bytes of one (token, KV head) row of the pools (a shape dev_kv_shape_check accepts). */
size_t dev_kv_row_bytes(const dev_kv_shape *shape);

typedef struct dev_kv dev_kv;

/* A ragged batch, as the caller describes it on the host. */
typedef struct dev_step {
    int32_t n_tokens;           /* T */
    const int32_t *tokens;      /* (T) token ids */
    const int32_t *pos;         /* (T) position of each token in its sequence */
    const int32_t *seq;         /* (T) index of each token's sequence, 0..S-1 */
    int32_t n_seqs;             /* S */
    const int32_t *seq_len;     /* (S) KV length of each sequence once this step is written */
    const int32_t *block_table; /* (S, max_blocks) KV block ids, row-major */
    int32_t max_blocks;
    int32_t n_logits;          /* rows that want logits */
    const int32_t *logit_rows; /* (n_logits) token indices 0..T-1, ascending */
    /* rows that want their final hidden state, after the output norm (embeddings:
     * model_forward_sample_hidden copies them back); 0 for generation */
    int32_t n_hidden;
    const int32_t *hidden_rows; /* (n_hidden) token indices 0..T-1, ascending */
} dev_step;

/* Whether this build has the CUDA backend and a usable GPU is present; when not, the
 * reason goes into why (cap bytes). */
bool dev_cuda_available(char *why, size_t cap);

/* Free and total memory of a device with its own (a GPU); SP_ERR_UNSUPPORTED for the
 * CPU, whose memory the budget flags size instead. */
sp_status dev_memory_info(dev_backend *dev, size_t *free_bytes, size_t *total_bytes);

/* Creates a backend. SP_DEVICE_CUDA without a usable GPU: SP_ERR_UNSUPPORTED with the
 * reason. Caller owns *out; free with dev_destroy. */
sp_status dev_create(const dev_options *opts, dev_backend **out);
void dev_destroy(dev_backend *dev);
const char *dev_name(const dev_backend *dev); /* "cpu (2 threads, avx2)" */
int dev_threads(const dev_backend *dev);
/* The kernel set a CPU backend runs (never AUTO); SP_CPU_ISA_AUTO for a GPU backend. */
sp_cpu_isa dev_cpu_kernels(const dev_backend *dev);

/* Makes a weight usable by the ops. `host_data` is the tensor in its file format and is
 * borrowed until dev_destroy (the CPU backend reads it in place from the mapping; a GPU
 * backend copies it). */
sp_status dev_weight_init(dev_backend *dev, dev_tensor *out, quant_type type, int64_t ne0, int64_t ne1,
                          const void *host_data, size_t nbytes);

/* One device allocation for activations, carved by the caller; freed by dev_destroy.
 * 64-byte aligned. */
sp_status dev_arena_alloc(dev_backend *dev, size_t nbytes, void **out);

/* Prepares the backend's scratch for steps of up to max_tokens rows whose widest row
 * (any matmul input or output) has max_width elements, so no op allocates during a step.
 * A step larger than reserved is a programmer error. A GPU backend may pad a decode step
 * with rows up to the largest max_tokens reserved, so the activation buffers its ops get
 * must hold that many rows: a backend serves one model. */
sp_status dev_reserve(dev_backend *dev, int64_t max_tokens, int64_t max_width);

sp_status dev_kv_create(dev_backend *dev, const dev_kv_shape *shape, dev_kv **out);
void dev_kv_destroy(dev_backend *dev, dev_kv *kv);
/* Bytes of the pools of this shape: 2 * n_layers * n_blocks * B * Hk * row bytes. */
size_t dev_kv_bytes(const dev_kv_shape *shape);

/* One block's K and V over every layer, as dev_kv_blocks_save writes it and
 * dev_kv_blocks_load reads it: for each layer, its B*Hk K rows then its V rows, in the
 * pool's element type. The tiered prefix cache keeps blocks in this
 * form (scheduler/kv_tiers.c). */
size_t dev_kv_block_bytes(const dev_kv_shape *shape);
/* Copies blocks ids[0..n) of kv to host (n * dev_kv_block_bytes, block after block),
 * after every queued op. A device fault is SP_ERR_DEVICE. */
sp_status dev_kv_blocks_save(dev_backend *dev, const dev_kv *kv, const int32_t *ids, int32_t n, void *host);
/* Writes host (as dev_kv_blocks_save made it) into blocks ids[0..n) of kv; done when it
 * returns, so the next step reads them. */
sp_status dev_kv_blocks_load(dev_backend *dev, dev_kv *kv, const int32_t *ids, int32_t n, const void *host);

/* Validates the step (ids, positions, block ids in range: SP_ERR_INVALID_ARG naming the
 * field) and makes it current; the returned view is what ops receive. Borrowed until
 * the next dev_step_begin. */
sp_status dev_step_begin(dev_backend *dev, const dev_step *step, int32_t n_vocab, const dev_kv *kv,
                         const dev_step **device_step);

/* ---- ops (outputs first, then inputs, weights, dimensions) ---- */

/* x (T, D) = rows of emb (V, D) for the step's tokens. */
void dev_embed(dev_backend *dev, float *x, const dev_tensor *emb, const dev_step *step);

/* out (R, D) = in / rms(in) * w, w (D) F32; R rows. out may equal in. */
void dev_rmsnorm(dev_backend *dev, float *out, const float *in, const dev_tensor *w, float eps, int64_t rows,
                 int64_t dim);

/* The residual add and the next norm in one pass: x (R, D) += delta (R, D), then
 * out (R, D) = rmsnorm(x) * w. Equal to dev_add then dev_rmsnorm. out must not alias
 * x or delta. */
void dev_add_rmsnorm(dev_backend *dev, float *out, float *x, const float *delta, const dev_tensor *w, float eps,
                     int64_t rows, int64_t dim);

/* One of several products of the same input (dev_matmul_group). */
typedef struct dev_matmul_part {
    float *out;             /* (T, N of w) */
    const dev_tensor *w;    /* (N, K) */
    const dev_tensor *bias; /* (N) F32, or NULL */
} dev_matmul_part;

/* out_i (T, N_i) = in (T, K) . w_i (N_i, K)^T [+ bias_i] for every part: products that
 * share an input (Q/K/V, gate/up) run as one op, so the backend prepares the input once.
 * Each output equals what dev_matmul gives for that part alone. */
void dev_matmul_group(dev_backend *dev, const dev_matmul_part *parts, int n_parts, const float *in, int64_t rows);

/* out (T, N) = in (T, K) . w (N, K)^T [+ bias (N)]. */
void dev_matmul(dev_backend *dev, float *out, const float *in, const dev_tensor *w, const dev_tensor *bias,
                int64_t rows);

/* x (T, heads, Dh) rotated in place by each token's position. */
void dev_rope_apply(dev_backend *dev, float *x, const dev_step *step, const dev_rope *rope, int64_t heads,
                    int64_t head_dim);

/* Writes k, v (T, Hk*Dh) of every step token into layer's pools at its position. */
void dev_kv_write(dev_backend *dev, dev_kv *kv, int layer, const float *k, const float *v, const dev_step *step);

/* The attention block's positional part in one op: q (T, H*Dh) and k (T, Hk*Dh)
 * rotated in place by each token's position, then k and v (T, Hk*Dh) written into
 * layer's pools: the same results as dev_rope_apply on q, dev_rope_apply on k, then
 * dev_kv_write (a backend may run them as one kernel; Hk and Dh are the pools'). */
void dev_rope_kv_write(dev_backend *dev, dev_kv *kv, int layer, float *q, float *k, const float *v,
                       const dev_step *step, const dev_rope *rope, int64_t n_heads);

/* out (T, H*Dh) = causal attention of q (T, H*Dh) over each token's sequence in the
 * layer's pools, positions 0..pos inclusive; GQA maps head h to KV head h / (H/Hk). */
void dev_attention(dev_backend *dev, float *out, const float *q, const dev_kv *kv, int layer, const dev_step *step,
                   int64_t n_heads, float scale);

/* out (n) = silu(gate) * up. */
void dev_swiglu(dev_backend *dev, float *out, const float *gate, const float *up, int64_t n);

/* out (n) = a + b. out may alias a or b. */
void dev_add(dev_backend *dev, float *out, const float *a, const float *b, int64_t n);

/* out (R, D) = in rows listed in rows (R). */
void dev_gather_rows(dev_backend *dev, float *out, const float *in, const int32_t *rows, int64_t n_rows, int64_t dim);

/* ---- sampling: the next token of each logit row, chosen where the logits are ---- */

/* The most alternatives dev_sample reports per row (OpenAI's top_logprobs limit). */
enum { DEV_SAMPLE_MAX_TOP = 20 };

/* One row's draw, everything sample/sample.h's functions take for it. */
typedef struct dev_sample_row {
    const sample_params *params; /* temperature, top-k/top-p/min-p, penalties, logit bias */
    const int32_t *prompt;       /* (n_prompt): the repetition penalty's prompt tokens */
    int32_t n_prompt;
    const int32_t *generated; /* (n_generated): what the penalties count */
    int32_t n_generated;
    bool mask_eog;    /* the end-of-generation ids get -inf first (min_tokens not reached) */
    int top_logprobs; /* -1: no log-probabilities; 0: the chosen token's; k: and the k best (<= DEV_SAMPLE_MAX_TOP) */
    uint64_t rng;     /* the generator state of this draw (the scheduler: sample_rng_at(seed, position)) */
    const uint32_t *allowed; /* NULL, or (ceil(V / 32)) a grammar's bitset: token i may be drawn only when bit
                                i % 32 of allowed[i / 32] is set; the others get -inf with the EOG mask */
} dev_sample_row;

typedef struct dev_sample_result {
    int32_t token;
    float logprob;                                /* of token under the raw logits, when top_logprobs >= 0 */
    uint64_t rng;                                 /* the generator state after the draw */
    sample_logprob_entry top[DEV_SAMPLE_MAX_TOP]; /* the top_logprobs best under the raw logits */
} dev_sample_result;

/* The end-of-generation ids dev_sample masks, set once per backend (borrowed). */
typedef struct dev_sample_vocab {
    int32_t n_vocab;
    const int32_t *eog_ids;
    int32_t n_eog;
} dev_sample_vocab;

/* For each of n_rows rows of logits (device, (n_rows, V), changed in place): exactly
 * what end_tick's host sampling did per row: log-probabilities from the raw logits
 * (sample_logsumexp, sample_top_logprobs), the end-of-generation and grammar masks
 * (sample_apply_allowed), the penalties
 * (sample_apply_penalties), then the draw (sample_token) with the row's generator.
 * Only results[0..n_rows) come back to the host. The CPU backend runs sample/sample.c
 * itself, so its tokens are those functions' bit for bit; a GPU backend draws with
 * the same generator and rules in its own arithmetic order. */
sp_status dev_sample(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                     const dev_sample_row *rows, dev_sample_result *results);

/* Queues the ops that fn issues for step (the view dev_step_begin returned). A GPU
 * backend may capture them once per step shape (a decode batch-size bucket) and replay
 * that capture for later steps of the same shape (CUDA graphs), so fn must issue the
 * same ops on the same buffers for the same shape, must not copy results to the host,
 * and must take everything it varies on from ctx: ctx_bytes (at most DEV_RECORD_CTX_MAX)
 * are compared to tell captures apart. The CPU backend calls fn once. A device fault
 * is SP_ERR_DEVICE. */
enum { DEV_RECORD_CTX_MAX = 64 };
typedef void (*dev_record_fn)(const void *ctx, const dev_step *step);
sp_status dev_record(dev_backend *dev, const dev_step *step, dev_record_fn fn, const void *ctx, size_t ctx_bytes);

/* Copies device memory to the host after all queued ops complete. */
sp_status dev_copy_to_host(dev_backend *dev, void *host, const void *device, size_t nbytes);

/* Waits for every queued op; a device fault is SP_ERR_DEVICE. A step that brings nothing
 * back (a prefill chunk without logits) ends with it, so a fault in it is reported with
 * the requests it carried. */
sp_status dev_synchronize(dev_backend *dev);

#endif

/* cuda_step.cu: the step's arrays, copied to the device through a pinned staging
 * buffer, and the padding of decode batches to graph buckets.
 *
 * Legend: T = tokens in the step, S = sequences, B = tokens per KV block, M = the
 * blocks the step's longest sequence uses (max over sequences of ceil(seq_len / B)),
 * Tb and Mb = T and M rounded up to their buckets.
 *
 * The device's block table is M wide (Mb for a padded decode batch), not the caller's
 * max_blocks (the capacity of a maximal sequence, 8,192 for a 128K context at B = 16):
 * the upload and the split-context attention's split count follow what the step's
 * sequences hold. Only the blocks a sequence uses are copied, the rest of its row is
 * the scratch block, so no unchecked block id reaches a kernel.
 *
 * A short-run batch (cuda_pad.h: each sequence's tokens one short run, sequences in
 * row order; decode batches, one token per sequence, and speculative verify steps, a
 * token and its drafts per sequence, as the scheduler builds them) of up to
 * CUDA_GRAPH_MAX_TOKENS is padded to Tb tokens, Tb sequences and an Mb-wide block
 * table, so that every step of one bucket launches the same kernels with the same
 * shapes and buffer addresses: cuda_graph.cu captures that once and replays it. A
 * decode step and a verify step of one bucket are the same shapes, so they share the
 * graph. Padding is applied with and without graphs, so both run the very same kernels
 * and give identical results. A padding token is token 0 at position 0 of a sequence of
 * its own (after the real ones) whose every block is the pool's scratch block
 * (cuda_kv.scratch_block, one block past the caller's pool): it writes and reads only
 * that block, so it needs no special case in any kernel and never touches a real
 * sequence. Sequences past the padding tokens' (a verify step has fewer sequences than
 * tokens) hold the scratch block and no token. Logit rows are the caller's; padding
 * rows are never read back.
 *
 * Layout of the device buffer (int32s): tokens, pos, seq (Tb each), seq_len (Tb),
 * block table (Tb x Mb), logit rows, hidden rows (embeddings). Offsets depend only on
 * (Tb, Mb), so a graph's captured pointers stay valid for every later step of its bucket;
 * growing the buffer moves it, so that drops every graph.
 */
#include <string.h>

#include <algorithm>

#include "gpu/cuda/cuda_internal.cuh"

static int32_t blocks_bucket(int32_t m) {
    int32_t b = 1;
    while (b < m) b *= 2;
    return b;
}

/* Blocks a sequence of len tokens occupies. */
static int32_t blocks_used(int32_t len, int32_t block_size) {
    return (len + block_size - 1) / block_size;
}

/* Makes room for need int32s (the previous step's copy from the staging buffer done). */
static sp_status step_buffers_fit(cuda_backend *cb, size_t need) {
    cuda_step_buffers *sb = &cb->steps;
    /* the previous step's copy may still be in flight from the staging buffer */
    if (!cuda__ok(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize")) return cuda__fault_status(cb);
    if (need <= sb->cap) return SP_OK;
    cuda__graphs_clear(cb); /* they point into the old buffer */
    cuda__ignore(cudaFreeHost(sb->host));
    cuda__ignore(cudaFree(sb->device));
    sb->host = NULL;
    sb->device = NULL;
    sb->cap = 0;
    size_t cap = need * 2;
    cudaError_t err = cudaMallocHost((void **)&sb->host, cap * sizeof(int32_t));
    if (err == cudaSuccess) err = cudaMalloc((void **)&sb->device, cap * sizeof(int32_t));
    if (err == cudaErrorMemoryAllocation) { /* not a fault: this step fails, the backend works on */
        (void)cudaGetLastError();
        cuda__ignore(cudaFreeHost(sb->host));
        sb->host = NULL;
        return sp_fail(SP_ERR_NOMEM, "cuda: cannot allocate %zu bytes for the step's arrays", cap * sizeof(int32_t));
    }
    if (!cuda__ok(cb, err, "cudaMalloc(step)")) return cuda__fault_status(cb);
    sb->cap = cap;
    return SP_OK;
}

sp_status cuda__step_upload(dev_backend *dev, const dev_step *host, const dev_kv *kv_base,
                            const dev_step **device_step) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return cuda__fault_status(cb);
    const cuda_kv *kv = (const cuda_kv *)kv_base;
    cuda_step_buffers *sb = &cb->steps;
    const int32_t t = host->n_tokens, s = host->n_seqs, block_size = kv->common.shape.block_size;
    int32_t m = 1; /* M */
    for (int32_t q = 0; q < s; q++) m = std::max(m, blocks_used(host->seq_len[q], block_size));
    int32_t tb = t, sbk = s, mb = m;
    sb->padded = cuda_pad_short_runs(host->seq, t, s);
    if (sb->padded) {
        tb = cuda_pad_tokens(t);
        if (tb > cb->max_tokens) tb = cb->max_tokens > t ? (int32_t)cb->max_tokens : t; /* the activations' rows */
        sbk = tb;
        mb = blocks_bucket(m);
    }
    const size_t need =
        3 * (size_t)tb + (size_t)sbk + (size_t)sbk * (size_t)mb + (size_t)host->n_logits + (size_t)host->n_hidden;
    sp_status st = step_buffers_fit(cb, need);
    if (st != SP_OK) return st;

    int32_t *h = sb->host;
    int32_t *tokens = h, *pos = h + tb, *seq = h + 2 * (size_t)tb, *seq_len = h + 3 * (size_t)tb;
    int32_t *table = seq_len + sbk, *logit_rows = table + (size_t)sbk * (size_t)mb;
    int32_t *hidden_rows = logit_rows + host->n_logits;
    memcpy(tokens, host->tokens, sizeof(int32_t) * (size_t)t);
    memcpy(pos, host->pos, sizeof(int32_t) * (size_t)t);
    memcpy(seq, host->seq, sizeof(int32_t) * (size_t)t);
    memcpy(seq_len, host->seq_len, sizeof(int32_t) * (size_t)s);
    for (int32_t q = 0; q < s; q++) { /* the blocks dev_step_begin checked, then the scratch block */
        const int32_t used = blocks_used(host->seq_len[q], block_size);
        memcpy(table + (size_t)q * mb, host->block_table + (size_t)q * host->max_blocks,
               sizeof(int32_t) * (size_t)used);
        for (int32_t b = used; b < mb; b++) table[(size_t)q * mb + b] = kv->scratch_block;
    }
    for (int32_t i = t; i < tb; i++) { /* padding: token 0 at position 0 of its own scratch sequence */
        tokens[i] = 0;
        pos[i] = 0;
        seq[i] = s + (i - t);
    }
    for (int32_t q = s; q < sbk; q++) { /* the padding's sequences, then unused ones: scratch only */
        seq_len[q] = 1;
        for (int32_t b = 0; b < mb; b++) table[(size_t)q * mb + b] = kv->scratch_block;
    }
    memcpy(logit_rows, host->logit_rows, sizeof(int32_t) * (size_t)host->n_logits);
    if (host->n_hidden > 0) memcpy(hidden_rows, host->hidden_rows, sizeof(int32_t) * (size_t)host->n_hidden);

    const size_t used = (size_t)(hidden_rows - h) + (size_t)host->n_hidden;
    if (!cuda__ok(cb, cudaMemcpyAsync(sb->device, h, used * sizeof(int32_t), cudaMemcpyHostToDevice, cb->stream),
                  "cudaMemcpyAsync(step)"))
        return cuda__fault_status(cb);
    dev_step *d = &sb->step;
    *d = *host;
    d->n_tokens = tb;
    d->n_seqs = sbk;
    d->max_blocks = mb;
    d->tokens = sb->device;
    d->pos = sb->device + (pos - h);
    d->seq = sb->device + (seq - h);
    d->seq_len = sb->device + (seq_len - h);
    d->block_table = sb->device + (table - h);
    d->logit_rows = sb->device + (logit_rows - h);
    d->hidden_rows = sb->device + (hidden_rows - h);
    *device_step = d;
    return SP_OK;
}

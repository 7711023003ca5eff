/* cuda_step.cu: the step's arrays, copied to the device through a pinned staging
 * buffer, padded to a graph bucket when the step allows it.
 *
 * What is padded, and the buffer's layout, are decided in plain C in cuda_pad.h (so the
 * CPU's tests check them). In short: a generation step of short runs (a decode batch,
 * or a speculative verify step: a token and its drafts per sequence) of up to
 * CUDA_GRAPH_MAX_TOKENS is padded to Tb tokens, Tb sequences and an Mb-wide block table,
 * so that every step of one bucket launches the same kernels with the same shapes and
 * buffer addresses: cuda_graph.cu captures that once and replays it. Padding is applied
 * with and without graphs, so both run the very same kernels and give identical results.
 * A padding token is token 0 at position 0 of a sequence of its own whose every block is
 * the pool's scratch block (cuda_kv.scratch_block, one block past the caller's pool): it
 * writes and reads only that block, so it needs no special case in any kernel and never
 * touches a real sequence. Logit rows are the caller's; padding rows are never read back.
 *
 * The device's block table is M wide (Mb when padded), not the caller's max_blocks (the
 * capacity of a maximal sequence, 8,192 for a 128K context at B = 16): the upload and
 * the split-context attention's split count follow what the step's sequences hold.
 * Growing the buffer moves it, so that drops every graph.
 */
#include <string.h>

#include "gpu/cuda/cuda_internal.cuh"

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
    const int32_t block_size = kv->common.shape.block_size;
    const cuda_pad_layout l = cuda_pad_plan(host, block_size, cb->max_tokens);
    sb->padded = l.padded;
    sp_status st = step_buffers_fit(cb, l.total);
    if (st != SP_OK) return st;
    int32_t *h = sb->host;
    cuda_pad_stage(host, &l, block_size, kv->scratch_block, h);

    if (!cuda__ok(cb, cudaMemcpyAsync(sb->device, h, l.total * sizeof(int32_t), cudaMemcpyHostToDevice, cb->stream),
                  "cudaMemcpyAsync(step)"))
        return cuda__fault_status(cb);
    dev_step *d = &sb->step;
    *d = *host;
    d->n_tokens = l.tokens;
    d->n_seqs = l.seqs;
    d->max_blocks = l.width;
    d->tokens = sb->device;
    d->pos = sb->device + l.pos;
    d->seq = sb->device + l.seq;
    d->seq_len = sb->device + l.seq_len;
    d->block_table = sb->device + l.table;
    d->logit_rows = sb->device + l.logit_rows;
    d->hidden_rows = sb->device + l.hidden_rows;
    *device_step = d;
    return SP_OK;
}

/* cuda_graph.cu: dev_record on the GPU: decode and speculative verify steps captured as
 * CUDA graphs, one per (token bucket, block-table width, fn, ctx), and replayed.
 *
 * A small model's decode step is a few hundred short kernels; launched one by one,
 * the CPU's launch cost is most of the step. A captured graph launches them all at
 * once. cuda_step.cu pads every short-run batch (cuda_pad.h) to its bucket, so one bucket's steps
 * launch the same kernels on the same addresses and differ only in the step's device
 * arrays, which the kernels read when they run: a graph captured for one step of a
 * bucket is valid for all later ones. The first step of a bucket runs op by op and the
 * second is captured: the first run does what a capture cannot hold (cuBLAS's first
 * use of a shape, module loading). Steps that are not padded (prefill chunks, and steps
 * that hold one) run op by op.
 *
 * Captures are kept in a fixed table (CUDA_GRAPH_CACHE); when it is full the least
 * recently used one goes. Growing the step buffer moves the arrays every graph reads,
 * so it drops them all (cuda__graphs_clear).
 *
 * What fn may do during a capture: launch kernels and cuBLAS calls on cb->stream (cuBLAS
 * has its own workspace, so it does not allocate); no synchronisation, allocation or
 * copy to the host (dev_record's contract). A failure inside a capture ends the capture;
 * when the stream still works afterwards it was the capture's, not the device's: the
 * step runs op by op (logged), and after CUDA_GRAPH_MAX_FAILURES such failures graphs
 * are turned off. Otherwise it is a device fault.
 */
#include <stdio.h>
#include <string.h>

#include "gpu/cuda/cuda_internal.cuh"

extern "C" {
#include "common/log.h"
}

void cuda__graphs_clear(cuda_backend *cb) {
    if (cb->n_graphs == 0) return;
    if (cb->stream) cuda__ignore(cudaStreamSynchronize(cb->stream)); /* none may still be running */
    for (int i = 0; i < cb->n_graphs; i++)
        if (cb->graphs[i].exec) cuda__ignore(cudaGraphExecDestroy(cb->graphs[i].exec));
    cb->n_graphs = 0;
}

static cuda_graph_entry *graph_find(cuda_backend *cb, const dev_step *step, dev_record_fn fn, const void *ctx,
                                    size_t ctx_bytes) {
    for (int i = 0; i < cb->n_graphs; i++) {
        cuda_graph_entry *g = &cb->graphs[i];
        if (g->n_tokens == step->n_tokens && g->max_blocks == step->max_blocks && g->fn == fn &&
            g->ctx_bytes == ctx_bytes && memcmp(g->ctx, ctx, ctx_bytes) == 0)
            return g;
    }
    return NULL;
}

/* A free slot: a new one, or the least recently used one, destroyed; shapes seen once
 * and not captured go first, so warm-ups do not push captures out. */
static cuda_graph_entry *graph_slot(cuda_backend *cb) {
    if (cb->n_graphs < CUDA_GRAPH_CACHE) return &cb->graphs[cb->n_graphs++];
    cuda_graph_entry *oldest = &cb->graphs[0];
    for (int i = 1; i < cb->n_graphs; i++) {
        const cuda_graph_entry *g = &cb->graphs[i];
        const bool captured = g->exec != NULL, oldest_captured = oldest->exec != NULL;
        if (captured != oldest_captured ? !captured : g->last_used < oldest->last_used) oldest = &cb->graphs[i];
    }
    cuda__ignore(cudaStreamSynchronize(cb->stream)); /* it may be the one still running */
    if (oldest->exec) cuda__ignore(cudaGraphExecDestroy(oldest->exec));
    oldest->exec = NULL;
    return oldest;
}

/* Captures what fn issues into an instantiated graph. NULL with cb->faulted on a device
 * fault; NULL without it when the capture itself failed (fn issued something a capture
 * cannot hold) and the device is fine: the caller then runs fn op by op (the captured
 * ops never ran), and graphs go off after CUDA_GRAPH_MAX_FAILURES of these. */
static cudaGraphExec_t graph_capture(cuda_backend *cb, const dev_step *step, dev_record_fn fn, const void *ctx) {
    if (!cuda__ok(cb, cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"))
        return NULL;
    cb->capturing = true;
    fn(ctx, step);
    cb->capturing = false;
    cudaGraph_t graph = NULL;
    /* always end the capture, so the stream works again whatever happened inside */
    cudaError_t end = cudaStreamEndCapture(cb->stream, &graph);
    cudaGraphExec_t exec = NULL;
    cudaError_t err = end;
    if (end == cudaSuccess && !cb->faulted) err = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (err == cudaSuccess && !cb->faulted) return exec;
    if (cb->faulted && cb->fault_error == cudaSuccess) { /* one of ours (a shape check): a fault, not the capture's */
        if (exec) cuda__ignore(cudaGraphExecDestroy(exec));
        return NULL;
    }
    /* A failure inside a capture is usually the capture's (an op it cannot record), not
     * the device's: if the stream still works, keep the device and stop capturing. */
    char why[sizeof cb->fault];
    snprintf(why, sizeof why, "%s", cb->faulted ? cb->fault : cudaGetErrorString(err));
    (void)cudaGetLastError();
    if (cudaStreamSynchronize(cb->stream) != cudaSuccess) {
        cuda__ok(cb, cudaGetLastError(), "cudaStreamSynchronize after a failed graph capture");
        cuda__fault(cb, why);
        return NULL;
    }
    cb->faulted = false;
    cb->fault[0] = '\0';
    if (++cb->graph_failures >= CUDA_GRAPH_MAX_FAILURES) cb->use_graphs = false;
    sp_log_warn("cuda: capturing a step of %d tokens as a graph failed (%s); %s", step->n_tokens, why,
                cb->use_graphs ? "this step runs op by op" : "graphs are off: every step runs op by op from now on");
    return NULL;
}

sp_status cuda__record(dev_backend *dev, const dev_step *step, dev_record_fn fn, const void *ctx, size_t ctx_bytes) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return cuda__fault_status(cb);
    if (!cb->use_graphs || !cb->steps.padded || step != &cb->steps.step) {
        fn(ctx, step);
        return cb->faulted ? cuda__fault_status(cb) : SP_OK;
    }
    cuda_graph_entry *g = graph_find(cb, step, fn, ctx, ctx_bytes);
    if (!g) { /* first sight of this shape: remember it, run it op by op (the warm-up) */
        g = graph_slot(cb);
        g->n_tokens = step->n_tokens;
        g->max_blocks = step->max_blocks;
        g->fn = fn;
        memcpy(g->ctx, ctx, ctx_bytes);
        g->ctx_bytes = ctx_bytes;
        g->exec = NULL;
        g->last_used = ++cb->graph_clock;
        fn(ctx, step);
        return cb->faulted ? cuda__fault_status(cb) : SP_OK;
    }
    g->last_used = ++cb->graph_clock;
    if (!g->exec) {
        g->exec = graph_capture(cb, step, fn, ctx);
        if (!g->exec) {
            if (cb->faulted) return cuda__fault_status(cb);
            fn(ctx, step); /* the capture failed, the device is fine: op by op */
            return cb->faulted ? cuda__fault_status(cb) : SP_OK;
        }
    }
    if (!cuda__ok(cb, cudaGraphLaunch(g->exec, cb->stream), "cudaGraphLaunch")) return cuda__fault_status(cb);
    return SP_OK;
}

/* host_backend.c: the CPU backend object: memory (weights read in place from the
 * model's mapping, one activation arena, F16 KV pools), the thread pool, and the
 * function table that routes the device ops to the kernels in this folder.
 *
 * DESIGN: everything here belongs to the thread that created the backend (the
 * scheduler thread); the pool's workers only run inside an op and never touch the
 * backend's bookkeeping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "gpu/host/host_internal.h"

static const char *host_name(const dev_backend *dev) {
    return ((const host_backend *)dev)->name;
}

static void host_destroy(dev_backend *dev) {
    host_backend *hb = (host_backend *)dev;
    host__pool_destroy(hb->pool);
    for (int i = 0; i < hb->n_arenas; i++) free(hb->arenas[i]);
    free(hb->arenas);
    free(hb->scratch);
    free(hb->attn_scratch);
    host__sample_free(hb);
    free(hb);
}

static sp_status host_weight_init(dev_backend *dev, dev_tensor *out, const void *host_data, size_t nbytes) {
    host_backend *hb = (host_backend *)dev;
    (void)nbytes;
    out->data = host_data; /* read in place from the mapping */
    /* the amx set multiplies from a copy in tile order; data stays for dev_embed */
    if (hb->base.cpu_isa == SP_CPU_ISA_AMX && host__amx_takes(out->type)) return host__amx_pack(hb, out);
    return SP_OK;
}

static sp_status host_arena_alloc(dev_backend *dev, size_t nbytes, void **out) {
    host_backend *hb = (host_backend *)dev;
    size_t rounded = (nbytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) return sp_fail(SP_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of activations", nbytes);
    void **grown = realloc(hb->arenas, sizeof *grown * (size_t)(hb->n_arenas + 1));
    if (!grown) {
        free(p);
        return sp_fail(SP_ERR_NOMEM, "cpu backend: out of memory");
    }
    hb->arenas = grown;
    hb->arenas[hb->n_arenas++] = p;
    memset(p, 0, rounded);
    *out = p;
    return SP_OK;
}

static sp_status host_reserve(dev_backend *dev, int64_t max_tokens, int64_t max_width) {
    host_backend *hb = (host_backend *)dev;
    /* quantized activations are at most 1 byte per element plus per-block scales:
     * bound them by the float size */
    size_t bytes;
    if (__builtin_mul_overflow((size_t)max_tokens, (size_t)max_width * sizeof(float) + 64, &bytes))
        return sp_fail(SP_ERR_INVALID_ARG, "reserve: %lld x %lld overflows", (long long)max_tokens,
                       (long long)max_width);
    if (hb->base.cpu_isa == SP_CPU_ISA_AMX) {
        /* the activations in tile order with their float scales, and each worker's unpacked
         * weights (host_matmul.c's amx_prepare) */
        size_t scales =
            (size_t)(max_tokens + 15) / 16 * 16 * (size_t)(max_width / 32 + 1) * (32 + 2 * sizeof(float)) + 192;
        size_t workers = (size_t)host__pool_threads(hb->pool) * (host__amx_thread_scratch_bytes(max_width) + 64);
        bytes += scales + workers;
    }
    if (host__pairs_takes(hb->base.cpu_isa, QUANT_Q8_0)) {
        /* the avx512 set's pair pack after the activations (host_matmul.c's pairs_prepare);
         * Q8_0 weights' pack (with its bias) is the largest */
        bytes += 64 + host__pairs_bytes(QUANT_Q8_0, max_width, max_tokens);
    }
    if (hb->base.cpu_isa == SP_CPU_ISA_AVX2) {
        /* the multi-row kernels' scale table after the activations (host_matmul.c's
         * rows_scales_prepare) */
        bytes += 64 + host__rows_scales_bytes(max_width, max_tokens);
    }
    hb->max_tokens = max_tokens;
    return host__scratch_reserve(hb, bytes);
}

/* Replaces *buf (holding *have bytes) with a 64-byte aligned buffer of at least want
 * bytes when it is smaller; the old contents are not kept. */
static sp_status grow_aligned(void **buf, size_t *have, size_t want, const char *what) {
    if (want <= *have) return SP_OK;
    size_t rounded = (want + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (!p) return sp_fail(SP_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of %s", want, what);
    free(*buf);
    *buf = p;
    *have = rounded;
    return SP_OK;
}

sp_status host__scratch_reserve(host_backend *hb, size_t nbytes) {
    return grow_aligned(&hb->scratch, &hb->scratch_bytes, nbytes, "scratch");
}

/* Grows the attention scratch to what caches of this shape need on every worker. */
static sp_status host_attn_scratch_reserve(host_backend *hb, const dev_kv_shape *shape) {
    size_t bytes;
    if (__builtin_mul_overflow(host__attention_scratch_bytes(shape), (size_t)host__pool_threads(hb->pool), &bytes))
        return sp_fail(SP_ERR_INVALID_ARG, "kv cache: attention scratch size overflows");
    return grow_aligned(&hb->attn_scratch, &hb->attn_scratch_bytes, bytes, "attention scratch");
}

static sp_status host_kv_create(dev_backend *dev, const dev_kv_shape *shape, dev_kv **out) {
    sp_status st = host_attn_scratch_reserve((host_backend *)dev, shape);
    if (st != SP_OK) return st;
    host_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return sp_fail(SP_ERR_NOMEM, "kv cache: out of memory");
    kv->common.shape = *shape;
    kv->row_bytes = dev_kv_row_bytes(shape);
    kv->block_bytes = (size_t)shape->block_size * (size_t)shape->n_kv_heads * kv->row_bytes;
    kv->pool_bytes = (size_t)shape->n_blocks * kv->block_bytes;
    kv->layer_bytes = 2 * kv->pool_bytes;
    size_t bytes = dev_kv_bytes(shape);
    kv->data = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!kv->data) {
        free(kv);
        return sp_fail(SP_ERR_NOMEM, "kv cache: cannot allocate %zu MiB", bytes >> 20);
    }
    /* not cleared: attention reads only positions a step has written */
    *out = (dev_kv *)kv;
    return SP_OK;
}

static void host_kv_destroy(dev_backend *dev, dev_kv *kv) {
    (void)dev;
    host_kv *hk = (host_kv *)kv;
    free(hk->data);
    free(hk);
}

/* Where block `block` of layer l's K (kv_half 0) or V (1) pool starts. */
static unsigned char *host_kv_block(const host_kv *kv, int l, int kv_half, int32_t block) {
    return kv->data + (size_t)l * kv->layer_bytes + (size_t)kv_half * kv->pool_bytes + (size_t)block * kv->block_bytes;
}

static sp_status host_kv_save(dev_backend *dev, const dev_kv *kv, const int32_t *ids, int32_t n, void *host) {
    (void)dev;
    const host_kv *hk = (const host_kv *)kv;
    unsigned char *out = host;
    for (int32_t i = 0; i < n; i++)
        for (int l = 0; l < hk->common.shape.n_layers; l++)
            for (int kv_half = 0; kv_half < 2; kv_half++) {
                memcpy(out, host_kv_block(hk, l, kv_half, ids[i]), hk->block_bytes);
                out += hk->block_bytes;
            }
    return SP_OK;
}

static sp_status host_kv_load(dev_backend *dev, dev_kv *kv, const int32_t *ids, int32_t n, const void *host) {
    (void)dev;
    host_kv *hk = (host_kv *)kv;
    const unsigned char *in = host;
    for (int32_t i = 0; i < n; i++)
        for (int l = 0; l < hk->common.shape.n_layers; l++)
            for (int kv_half = 0; kv_half < 2; kv_half++) {
                memcpy(host_kv_block(hk, l, kv_half, ids[i]), in, hk->block_bytes);
                in += hk->block_bytes;
            }
    return SP_OK;
}

static sp_status host_step_upload(dev_backend *dev, const dev_step *host, const dev_kv *kv,
                                  const dev_step **device_step) {
    (void)dev;
    (void)kv;
    *device_step = host; /* host memory is device memory here */
    return SP_OK;
}

static sp_status host_record(dev_backend *dev, const dev_step *step, dev_record_fn fn, const void *ctx,
                             size_t ctx_bytes) {
    (void)dev;
    (void)ctx_bytes;
    fn(ctx, step); /* nothing to capture: the ops run as they are issued */
    return SP_OK;
}

static sp_status host_copy_to_host(dev_backend *dev, void *host, const void *device, size_t nbytes) {
    (void)dev;
    memcpy(host, device, nbytes);
    return SP_OK;
}

static const dev_backend_ops host_ops = {
    .name = host_name,
    .destroy = host_destroy,
    .weight_init = host_weight_init,
    .arena_alloc = host_arena_alloc,
    .reserve = host_reserve,
    .kv_create = host_kv_create,
    .kv_destroy = host_kv_destroy,
    .kv_save = host_kv_save,
    .kv_load = host_kv_load,
    .step_upload = host_step_upload,
    .embed = host__embed,
    .rmsnorm = host__rmsnorm,
    .add_rmsnorm = host__add_rmsnorm,
    .matmul_group = host__matmul_group,
    .rope_apply = host__rope_apply,
    .kv_write = host__kv_write,
    .attention = host__attention,
    .swiglu = host__swiglu,
    .add = host__add,
    .gather_rows = host__gather_rows,
    .record = host_record,
    .sample = host__sample,
    .copy_to_host = host_copy_to_host,
};

sp_status host_backend_create(const dev_options *opts, dev_backend **out) {
    int n = opts->n_threads;
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    if (n > 256) return sp_fail(SP_ERR_INVALID_ARG, "threads: %d is more than 256", n);
    sp_cpu_isa isa;
    sp_status st = host__isa_resolve(opts->cpu_isa, &isa);
    if (st != SP_OK) return st;
    host_backend *hb = calloc(1, sizeof *hb);
    if (!hb) return sp_fail(SP_ERR_NOMEM, "cpu backend: out of memory");
    hb->base.ops = &host_ops;
    hb->base.n_threads = n;
    hb->base.cpu_isa = isa;
    if (isa == SP_CPU_ISA_AMX && (st = host__amx_request_tiles()) != SP_OK) {
        if (opts->cpu_isa != SP_CPU_ISA_AUTO) {
            free(hb);
            return st;
        }
        /* auto: the next best set rather than no backend */
        sp_log_warn("cpu backend: %s; using the avx512 set", sp_last_error());
        hb->base.cpu_isa = isa = SP_CPU_ISA_AVX512;
    }
    st = host__pool_create(n, &hb->pool);
    if (st != SP_OK) {
        free(hb);
        return st;
    }
    snprintf(hb->name, sizeof hb->name, "cpu (%d thread%s, %s)", n, n == 1 ? "" : "s", sp_cpu_isa_name(isa));
    *out = &hb->base;
    return SP_OK;
}

/* kv_tiers.c: the prefix cache below the device pool (kvcache/ holds the blocks; this
 * file moves them between it and the pool).
 *
 *   evict   when the pool reuses a registered block nobody holds (kv_blocks.c's LRU),
 *           its K/V is copied out (dev_kv_blocks_save) and kept under its chain hash,
 *           its parent's chain hash and its tokens: host memory first, then disk.
 *   match   at admission, after the run of blocks the pool itself holds, the chain
 *           goes on into the tiers: each next block found there (exact tokens) is one
 *           the request need not compute, when reloading it is faster than computing
 *           it (the cost model below).
 *   reload  the admitted request's blocks for those positions are written from the
 *           tier (dev_kv_blocks_load) and registered in the pool, as if computed.
 *
 * The cost model: per tier, an EWMA of the seconds one block's reload took; for the
 * model, an EWMA of the seconds one prefill row took (slo.c measures it). A tier's block
 * is reloaded while reload < block_size * prefill row; until both are measured it is
 * reloaded, and a tier judged slower is still tried every TIER_PROBE_EVERY matches.
 *
 * Swap. A preempted sequence's computed full blocks are registered in the prefix cache
 * (every step registers them), so when it gives its blocks back they stay in the pool
 * until something needs the room, then go to the host tier like any evicted block.
 * Its return is an admission like any other: the match finds its blocks in the pool or
 * the tiers, so it recomputes only its last partial block. So swapping costs a copy
 * only of the blocks the pool really had to give up, and never more than recomputing.
 *
 * DESIGN (threads). Scheduler thread only; kvt_stats_get reads the counters elsewhere.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "scheduler/sched_internal.h"

/* Seconds a stop may spend writing the pool's and the host tier's blocks to a
 * persistent disk tier (systemd's unit gives a stop 45 s in all). */
#define TIER_PERSIST_BUDGET_S 20.0

/* EWMA weight of a new measurement. */
#define TIER_EWMA 0.2

static void ewma(double *avg, double x) {
    *avg = *avg == 0 ? x : (1 - TIER_EWMA) * *avg + TIER_EWMA * x;
}

/* kv_blocks' eviction hook: keep a copy of the block's K/V in the tiers. */
static void tiers_on_evict(void *arg, int32_t id, uint64_t hash, uint64_t parent_hash, const int32_t *tokens) {
    sched *s = arg;
    if (dev_kv_blocks_save(model_device(s->m), s->cache.pool, &id, 1, s->cache.tier_buf) != SP_OK) {
        if (!s->cache.tier_save_failed) /* a faulted device would say it for every block */
            sp_log_warn("kv tiers: cannot copy an evicted block out of the pool: %s (said once)", sp_last_error());
        s->cache.tier_save_failed = true;
        return;
    }
    kvt_put(s->cache.tiers, hash, parent_hash, tokens, s->cache.tier_buf);
}

/* A fingerprint of the pool's layout, so a disk file of another shape is never read. */
static uint64_t layout_fingerprint(const dev_kv_shape *shape, size_t block_bytes) {
    /* the element format: 16 (bits) for F16, as files written before --kv-type carry, so
     * an upgrade keeps a persisted F16 tier; 100 + the ggml type id for the others */
    const int64_t element = shape->kv_type == SP_KV_F16 ? 16 : 100 + (int64_t)dev_kv_quant_type(shape->kv_type);
    const int64_t parts[] = {shape->n_layers, shape->block_size,    shape->n_kv_heads,
                             shape->head_dim, (int64_t)block_bytes, element};
    uint64_t h = KV_CHAIN_ROOT;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) h = (h ^ (uint64_t)parts[i]) * 0x100000001b3ULL;
    return h;
}

sp_status sched__tiers_init(sched *s) {
    const sched_config *c = &s->cfg;
    bool disk = c->kv_disk_dir && c->kv_disk_dir[0];
    if (c->kv_host_mb <= 0 && !disk) return SP_OK;
    if (!c->prefix_cache) {
        sp_log_warn("kv tiers: kv_host_mb and kv_disk_dir need the prefix cache; they are off with --no-prefix-cache");
        return SP_OK;
    }
    dev_kv_shape shape = model_kv_shape(s->m, 1, c->block_size, sched__kv_type(c));
    s->cache.tier_block_bytes = dev_kv_block_bytes(&shape);
    kvt_config tc = {
        .block_size = c->block_size,
        .block_bytes = s->cache.tier_block_bytes,
        .host_bytes = c->kv_host_mb * ((int64_t)1 << 20),
        .disk_dir = disk ? c->kv_disk_dir : NULL,
        .disk_bytes = (int64_t)(c->kv_disk_gb * 1e9),
        .persist = c->kv_disk_persist,
        .model_path = c->model_path,
        .layout = layout_fingerprint(&shape, s->cache.tier_block_bytes),
    };
    sp_status st = kvt_create(&tc, &s->cache.tiers);
    if (st != SP_OK) return sp_fail_prefix(st, "the prefix cache's tiers");
    s->cache.tier_buf = malloc(s->cache.tier_block_bytes);
    if (!s->cache.tier_buf) return sp_fail(SP_ERR_NOMEM, "the prefix cache's tiers: out of memory");
    kvt_stats ts;
    kvt_stats_get(s->cache.tiers, &ts);
    sp_log_info("kv tiers: host %lld blocks (%lld MiB), disk %lld blocks (%.1f GB%s%s%s); %zu KiB per block",
                (long long)ts.host_capacity, (long long)c->kv_host_mb, (long long)ts.disk_capacity,
                disk ? c->kv_disk_gb : 0.0, disk ? " in " : "", kvt_disk_path(s->cache.tiers),
                c->kv_disk_persist ? ", kept across restarts" : "", s->cache.tier_block_bytes >> 10);
    if (ts.disk_restored > 0)
        sp_log_info("kv tiers: %lld blocks from an earlier run are on disk", (long long)ts.disk_restored);
    s->cache.blocks.on_evict = tiers_on_evict;
    s->cache.blocks.evict_arg = s;
    return SP_OK;
}

void sched__tiers_free(sched *s) {
    if (s->cache.tiers && s->cfg.kv_disk_persist && s->cache.pool) {
        /* what the pool still caches goes to disk too, most recently used first and
         * within a time budget (a service manager's stop timeout), so a restart finds the
         * latest prefixes */
        int32_t n = 0;
        double until = sched_now() + TIER_PERSIST_BUDGET_S;
        for (int32_t id = s->cache.blocks.lru_tail; id >= 0 && sched_now() < until; id = s->cache.blocks.lru_prev[id]) {
            if (dev_kv_blocks_save(model_device(s->m), s->cache.pool, &id, 1, s->cache.tier_buf) != SP_OK) break;
            kvt_persist_block(s->cache.tiers, s->cache.blocks.hash[id], s->cache.blocks.parent_hash[id],
                              s->cache.blocks.tokens + (size_t)id * (size_t)s->cfg.block_size, s->cache.tier_buf);
            n++;
        }
        kvt_persist_host(s->cache.tiers, until - sched_now());
        kvt_stats ts;
        kvt_stats_get(s->cache.tiers, &ts);
        sp_log_info("kv tiers: %lld blocks kept on disk for the next start (%d from the pool)",
                    (long long)ts.disk_blocks, n);
    }
    s->cache.blocks.on_evict = NULL;
    kvt_destroy(s->cache.tiers);
    s->cache.tiers = NULL;
    free(s->cache.tier_buf);
    s->cache.tier_buf = NULL;
}

/* Matches a tier judged slower than computing still gets before one is reloaded anyway,
 * so that one slow measurement (a cold page cache) does not turn the tier off for good. */
enum { TIER_PROBE_EVERY = 16 };

/* Whether reloading one block from tier beats computing its positions. */
static bool reload_pays(sched *s, kvt_tier tier) {
    double reload = s->cache.tier_reload_s[tier], row = s->meter.prefill_row_s;
    if (reload == 0 || row == 0 || reload < row * s->cfg.block_size) return true;
    return ++s->cache.tier_skips[tier] % TIER_PROBE_EVERY == 0; /* measure it again */
}

int32_t sched__tiers_match(sched *s, uint64_t root, const int32_t *tokens, int32_t from_block, int32_t max_blocks) {
    if (!kvt_enabled(s->cache.tiers) || from_block >= max_blocks) return 0;
    int B = s->cfg.block_size;
    uint64_t parent = root; /* a salted chain's blocks are kept under its own hashes and root */
    for (int32_t b = 0; b < from_block; b++) parent = kv_chain_hash(parent, tokens + (size_t)b * (size_t)B, B);
    int32_t n = 0;
    for (int32_t b = from_block; b < max_blocks; b++, n++) {
        const int32_t *bt = tokens + (size_t)b * (size_t)B;
        uint64_t h = kv_chain_hash(parent, bt, B);
        kvt_tier tier = kvt_find(s->cache.tiers, h, parent, bt);
        if (tier == KVT_NONE) break;
        if (!reload_pays(s, tier)) break; /* computed instead */
        parent = h;
    }
    return n;
}

int32_t sched__tiers_reload(sched *s, sched_request *r, int32_t from_block, int32_t n) {
    int B = s->cfg.block_size;
    uint64_t parent = r->kv.root;
    for (int32_t b = 0; b < from_block; b++) parent = kv_chain_hash(parent, r->tokens + (size_t)b * (size_t)B, B);
    int32_t done = 0;
    for (; done < n; done++) {
        int32_t b = from_block + done;
        const int32_t *bt = r->tokens + (size_t)b * (size_t)B;
        uint64_t h = kv_chain_hash(parent, bt, B);
        double t0 = sched_now();
        /* a block may have left the tiers since the match (admission's own evictions
         * push older ones out): the rest is computed */
        kvt_tier tier = kvt_get(s->cache.tiers, h, parent, bt, s->cache.tier_buf);
        if (tier == KVT_NONE) break;
        if (dev_kv_blocks_load(model_device(s->m), s->cache.pool, &r->kv.ids[b], 1, s->cache.tier_buf) != SP_OK) {
            sp_log_warn("kv tiers: cannot load a block into the pool: %s", sp_last_error());
            break;
        }
        ewma(&s->cache.tier_reload_s[tier], sched_now() - t0);
        parent = h;
    }
    if (done > 0) {
        kv_prefix_register(&s->cache.blocks, &r->kv, r->tokens, (from_block + done) * B);
        atomic_fetch_add_explicit(&s->meter.stats.tier_reloaded_tokens, (int64_t)done * B, memory_order_relaxed);
    }
    return done;
}

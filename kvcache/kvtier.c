/* kvtier.c: the store and its tiers: put, find, get, persist, the host tier's slots and
 * the moves from host to disk to gone (kvcache.h has the design; the index, LRU lists and
 * entries are kvtier_entries.c's, the files kvtier_disk.c's). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/assert.h"
#include "common/log.h"
#include "kvcache/kvcache_internal.h"

static void count(_Atomic int64_t *c, int64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static int64_t load(const _Atomic int64_t *c) {
    return atomic_load_explicit(c, memory_order_relaxed);
}

static uint8_t *slot_data(const kvt_store *t, int32_t slot) {
    return t->host + (size_t)slot * t->block_bytes;
}

/* ---- the tiers ---- */

/* Makes room for one file: drops the disk tier's least recently used block. */
static void disk_make_room(kvt_store *t) {
    while (t->disk_lru.n >= t->disk_slots && t->disk_lru.head >= 0) {
        int32_t victim = t->disk_lru.head;
        kvt__disk_remove(t, victim);
        kvt__entry_drop(t, victim);
        count(&t->disk_evictions, 1);
    }
}

/* Entry i (made, in no tier) with payload data goes to disk; dropped when it cannot. */
static void to_disk(kvt_store *t, int32_t i, const void *data) {
    if (t->disk_slots <= 0) {
        kvt__entry_free(t, i);
        return;
    }
    disk_make_room(t);
    if (!kvt__disk_write(t, i, data)) {
        count(&t->disk_write_errors, 1);
        kvt__entry_free(t, i);
        return;
    }
    count(&t->disk_writes, 1);
    kvt__entry_place(t, i, KVT_DISK);
}

/* A free host slot, moving the host tier's least recently used block to disk first when
 * the tier is full. */
static int32_t host_slot(kvt_store *t) {
    if (t->n_free_slots == 0) {
        int32_t victim = t->host_lru.head;
        SP_ASSERT(victim >= 0);
        int32_t slot = t->e[victim].slot;
        kvt__entry_unplace(t, victim); /* its slot is free again, its bytes still there */
        count(&t->host_evictions, 1);
        t->n_free_slots--; /* take that slot back; it is reused once the victim is written */
        to_disk(t, victim, slot_data(t, slot));
        return slot;
    }
    return t->free_slots[--t->n_free_slots];
}

void kvt_put(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens, const void *data) {
    if (!kvt_enabled(t)) return;
    int32_t i = kvt__map_find(t, hash, parent, tokens);
    if (i >= 0) { /* held already: only its place in the LRU changes */
        kvt_lru *l = kvt__tier_lru(t, t->e[i].tier);
        kvt__lru_unlink(t, l, i);
        kvt__lru_push(t, l, i);
        return;
    }
    if (t->free_head < 0) { /* every entry in use: the disk tier's oldest goes (else the host's) */
        int32_t victim = t->disk_lru.head >= 0 ? t->disk_lru.head : t->host_lru.head;
        if (t->e[victim].tier == KVT_DISK) kvt__disk_remove(t, victim);
        count(t->e[victim].tier == KVT_DISK ? &t->disk_evictions : &t->host_evictions, 1);
        kvt__entry_drop(t, victim);
    }
    i = kvt__entry_new(t, hash, parent, tokens);
    SP_ASSERT(i >= 0);
    count(&t->stored, 1);
    if (t->host_slots > 0) {
        int32_t slot = host_slot(t);
        t->e[i].slot = slot;
        memcpy(slot_data(t, slot), data, t->block_bytes);
        kvt__entry_place(t, i, KVT_HOST);
    } else {
        to_disk(t, i, data);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A free disk place and entry (persisting never evicts). */
static bool disk_has_room(const kvt_store *t) {
    return t->persist && t->disk_lru.n < t->disk_slots;
}

void kvt_persist_block(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens, const void *data) {
    if (!t || !disk_has_room(t) || t->free_head < 0 || kvt__map_find(t, hash, parent, tokens) >= 0) return;
    int32_t i = kvt__entry_new(t, hash, parent, tokens);
    count(&t->stored, 1);
    to_disk(t, i, data);
}

void kvt_persist_host(kvt_store *t, double budget_s) {
    if (!t) return;
    double until = now_s() + budget_s;
    while (t->host_lru.tail >= 0 && disk_has_room(t) && now_s() < until) {
        int32_t i = t->host_lru.tail;
        int32_t slot = t->e[i].slot;
        kvt__entry_unplace(t, i);
        to_disk(t, i, slot_data(t, slot));
    }
}

kvt_tier kvt_find(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    if (!kvt_enabled(t)) return KVT_NONE;
    int32_t i = kvt__map_find(t, hash, parent, tokens);
    if (i < 0) return KVT_NONE;
    kvt_lru *l = kvt__tier_lru(t, t->e[i].tier);
    kvt__lru_unlink(t, l, i);
    kvt__lru_push(t, l, i);
    return t->e[i].tier;
}

kvt_tier kvt_get(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens, void *data) {
    if (!kvt_enabled(t)) return KVT_NONE;
    int32_t i = kvt__map_find(t, hash, parent, tokens);
    if (i < 0) return KVT_NONE;
    kvt_tier tier = t->e[i].tier;
    if (tier == KVT_HOST) {
        memcpy(data, slot_data(t, t->e[i].slot), t->block_bytes);
        count(&t->host_hits, 1);
    } else if (kvt__disk_read(t, i, data)) {
        count(&t->disk_hits, 1);
    } else {
        count(&t->disk_rejected, 1);
        kvt__disk_remove(t, i);
        kvt__entry_drop(t, i);
        return KVT_NONE;
    }
    kvt_lru *l = kvt__tier_lru(t, tier);
    kvt__lru_unlink(t, l, i);
    kvt__lru_push(t, l, i);
    return tier;
}

/* ---- the store ---- */

bool kvt_enabled(const kvt_store *t) {
    return t && (t->host_slots > 0 || t->disk_slots > 0);
}

sp_status kvt_create(const kvt_config *c, kvt_store **out) {
    *out = NULL;
    if (c->block_size <= 0 || c->block_bytes == 0)
        return sp_fail(SP_ERR_INVALID_ARG, "kv tiers: block size and bytes must be positive");
    if (c->host_bytes < 0 || c->disk_bytes < 0)
        return sp_fail(SP_ERR_INVALID_ARG, "kv tiers: a tier's budget cannot be negative");
    bool disk = c->disk_dir && c->disk_dir[0];
    if (c->persist && !disk) return sp_fail(SP_ERR_INVALID_ARG, "kv_disk_persist needs kv_disk_dir");
    if (c->persist && !(c->model_path && c->model_path[0]))
        return sp_fail(SP_ERR_INVALID_ARG, "kv_disk_persist needs the model's path (its sha256 names the files)");
    kvt_store *t = calloc(1, sizeof *t);
    if (!t) return sp_fail(SP_ERR_NOMEM, "kv tiers: out of memory");
    t->block_size = c->block_size;
    t->block_bytes = c->block_bytes;
    t->layout = c->layout;
    t->lock_fd = -1;
    t->host_lru = t->disk_lru = (kvt_lru){-1, -1, 0};
    t->host_slots =
        (int32_t)(c->host_bytes / (int64_t)c->block_bytes > INT32_MAX / 4 ? INT32_MAX / 4
                                                                          : c->host_bytes / (int64_t)c->block_bytes);
    if (disk) {
        int64_t slots = c->disk_bytes / (int64_t)kvt__file_bytes(t);
        t->disk_slots = slots > INT32_MAX / 4 ? INT32_MAX / 4 : slots;
    }
    sp_status st = SP_OK;
    int64_t cap = (int64_t)t->host_slots + t->disk_slots;
    if (cap > INT32_MAX / 4) cap = INT32_MAX / 4;
    t->cap = (int32_t)cap;
    if (t->cap > 0) {
        uint32_t map_cap = 16;
        while (map_cap < 2u * (uint32_t)t->cap) map_cap *= 2;
        t->e = malloc(sizeof *t->e * (size_t)t->cap);
        t->tokens = malloc(sizeof(int32_t) * (size_t)t->cap * (size_t)t->block_size);
        t->map = malloc(sizeof(int32_t) * map_cap);
        t->free_slots = malloc(sizeof(int32_t) * (size_t)(t->host_slots > 0 ? t->host_slots : 1));
        t->host = t->host_slots > 0 ? malloc((size_t)t->host_slots * t->block_bytes) : NULL;
        if (!t->e || !t->tokens || !t->map || !t->free_slots || (t->host_slots > 0 && !t->host)) {
            st = sp_fail(SP_ERR_NOMEM, "kv tiers: cannot allocate %lld MiB of host tier and the index of %d blocks",
                         (long long)c->host_bytes >> 20, t->cap);
            goto fail;
        }
        memset(t->map, 0xFF, sizeof(int32_t) * map_cap);
        t->map_mask = map_cap - 1;
        for (int32_t i = 0; i < t->cap; i++)
            t->e[i] = (kvt_entry){.tier = KVT_NONE, .next = i + 1 < t->cap ? i + 1 : -1};
        t->free_head = 0;
        for (int32_t s = 0; s < t->host_slots; s++) t->free_slots[s] = t->host_slots - 1 - s;
        t->n_free_slots = t->host_slots;
    } else {
        t->free_head = -1;
    }
    if (t->disk_slots > 0) {
        t->io = malloc(kvt__file_bytes(t));
        if (!t->io) {
            st = sp_fail(SP_ERR_NOMEM, "kv tiers: out of memory");
            goto fail;
        }
        if ((st = kvt__disk_open(t, c)) != SP_OK) goto fail;
    }
    *out = t;
    return SP_OK;
fail:
    kvt_destroy(t);
    return st;
}

void kvt_destroy(kvt_store *t) {
    if (!t) return;
    if (t->lock_fd >= 0) kvt__disk_close(t);
    free(t->io);
    free(t->host);
    free(t->free_slots);
    free(t->map);
    free(t->tokens);
    free(t->e);
    free(t);
}

void kvt_stats_get(const kvt_store *t, kvt_stats *o) {
    memset(o, 0, sizeof *o);
    if (!t) return;
    o->host_blocks = load(&t->n_host);
    o->host_capacity = t->host_slots;
    o->disk_blocks = load(&t->n_disk);
    o->disk_capacity = t->disk_slots;
    o->block_bytes = (int64_t)t->block_bytes;
    o->stored = load(&t->stored);
    o->host_hits = load(&t->host_hits);
    o->disk_hits = load(&t->disk_hits);
    o->host_evictions = load(&t->host_evictions);
    o->disk_evictions = load(&t->disk_evictions);
    o->disk_writes = load(&t->disk_writes);
    o->disk_write_errors = load(&t->disk_write_errors);
    o->disk_rejected = load(&t->disk_rejected);
    o->disk_restored = load(&t->disk_restored);
}

const char *kvt_disk_path(const kvt_store *t) {
    return t && t->disk_slots > 0 ? t->dir : "";
}

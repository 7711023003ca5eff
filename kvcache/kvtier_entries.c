/* kvtier_entries.c: the tiers' store's entries, its index (hash -> entry, linear
 * probing) and its LRU lists, one per tier. A leaf of kvcache/: kvtier.c (the tiers)
 * and kvtier_disk.c (indexing a persistent directory) call it; it calls neither. The
 * store's thread (the scheduler's; kvcache.h).
 */
#include <string.h>

#include "common/assert.h"
#include "kvcache/kvcache_internal.h"

static void count(_Atomic int64_t *c, int64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* ---- the index: hash -> entry ---- */

static uint32_t map_slot(const kvt_store *t, uint64_t h) {
    return (uint32_t)(h ^ (h >> 32)) & t->map_mask;
}

int32_t kvt__map_find(const kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    for (uint32_t i = map_slot(t, hash);; i = (i + 1) & t->map_mask) {
        int32_t id = t->map[i];
        if (id < 0) return -1;
        if (t->e[id].hash == hash && t->e[id].parent == parent &&
            memcmp(kvt__entry_tokens(t, id), tokens, sizeof(int32_t) * (size_t)t->block_size) == 0)
            return id;
    }
}

static void map_insert(kvt_store *t, int32_t id) {
    uint32_t i = map_slot(t, t->e[id].hash);
    while (t->map[i] >= 0) i = (i + 1) & t->map_mask;
    t->map[i] = id;
}

/* Removes id, moving later entries of its probe run back into the hole. */
static void map_remove(kvt_store *t, int32_t id) {
    uint32_t i = map_slot(t, t->e[id].hash);
    while (t->map[i] != id) {
        SP_ASSERT(t->map[i] >= 0);
        i = (i + 1) & t->map_mask;
    }
    for (uint32_t j = (i + 1) & t->map_mask; t->map[j] >= 0; j = (j + 1) & t->map_mask) {
        uint32_t home = map_slot(t, t->e[t->map[j]].hash);
        bool home_in_between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!home_in_between) {
            t->map[i] = t->map[j];
            i = j;
        }
    }
    t->map[i] = -1;
}

/* ---- LRU lists ---- */

kvt_lru *kvt__tier_lru(kvt_store *t, kvt_tier tier) {
    return tier == KVT_HOST ? &t->host_lru : &t->disk_lru;
}

void kvt__lru_push(kvt_store *t, kvt_lru *l, int32_t i) {
    t->e[i].prev = l->tail;
    t->e[i].next = -1;
    if (l->tail >= 0)
        t->e[l->tail].next = i;
    else
        l->head = i;
    l->tail = i;
    l->n++;
}

void kvt__lru_unlink(kvt_store *t, kvt_lru *l, int32_t i) {
    int32_t p = t->e[i].prev, n = t->e[i].next;
    if (p >= 0)
        t->e[p].next = n;
    else
        l->head = n;
    if (n >= 0)
        t->e[n].prev = p;
    else
        l->tail = p;
    l->n--;
}

/* ---- entries ---- */

int32_t *kvt__entry_tokens(const kvt_store *t, int32_t i) {
    return t->tokens + (size_t)i * (size_t)t->block_size;
}

int32_t kvt__entry_new(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    int32_t i = t->free_head;
    if (i < 0) return -1;
    t->free_head = t->e[i].next;
    t->e[i] = (kvt_entry){.hash = hash, .parent = parent, .tier = KVT_NONE, .slot = -1, .prev = -1, .next = -1};
    memcpy(kvt__entry_tokens(t, i), tokens, sizeof(int32_t) * (size_t)t->block_size);
    return i;
}

void kvt__entry_place(kvt_store *t, int32_t i, kvt_tier tier) {
    SP_ASSERT(t->e[i].tier == KVT_NONE && tier != KVT_NONE);
    t->e[i].tier = tier;
    kvt__lru_push(t, kvt__tier_lru(t, tier), i);
    map_insert(t, i);
    count(tier == KVT_HOST ? &t->n_host : &t->n_disk, 1);
}

/* Takes entry i out of its tier's list and the index, leaving it allocated. */
void kvt__entry_unplace(kvt_store *t, int32_t i) {
    kvt_tier tier = t->e[i].tier;
    SP_ASSERT(tier != KVT_NONE);
    kvt__lru_unlink(t, kvt__tier_lru(t, tier), i);
    map_remove(t, i);
    count(tier == KVT_HOST ? &t->n_host : &t->n_disk, -1);
    if (tier == KVT_HOST) t->free_slots[t->n_free_slots++] = t->e[i].slot;
    t->e[i].tier = KVT_NONE;
    t->e[i].slot = -1;
}

void kvt__entry_free(kvt_store *t, int32_t i) {
    t->e[i].tier = KVT_NONE;
    t->e[i].next = t->free_head;
    t->free_head = i;
}

void kvt__entry_drop(kvt_store *t, int32_t i) {
    if (t->e[i].tier != KVT_NONE) kvt__entry_unplace(t, i);
    kvt__entry_free(t, i);
}

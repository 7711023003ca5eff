/* kv_blocks.c: the KV block manager and its prefix cache. Bookkeeping only: which
 * block ids of the pool are free, which ones each sequence holds (its kv_seq, in
 * position order), and which full blocks hold which tokens. The K/V data itself lives
 * in the device's pool (dev_kv); nothing here touches it.
 *
 * Prefix cache. A full block whose K/V has been computed is registered under a chain
 * hash of its tokens and every token before them (hash(parent's hash, its B tokens)),
 * with its tokens and its parent block kept for an exact check. When a request is
 * admitted its leading full blocks are looked up; the run of hits is shared (a
 * reference count per block) and its positions are not computed again. A token's K/V
 * depends only on the tokens before it (the backends compute each row independently
 * of the batch), so a shared block holds exactly what the request would have computed.
 * Only full blocks are shared and a sequence always computes at least its last token,
 * so it writes only into blocks of its own.
 *
 * A block computed by two sequences at once (both admitted before either registered
 * it) is registered once: the second switches to the cached block and frees its own
 * copy, so every registered block's parent is the registered block before it.
 *
 * Salts. A chain starts from a root: KV_CHAIN_ROOT, or a salted root (kv_chain_root of
 * a tenant's or a request's cache salt, the sequence's kv_seq.root). The first block's
 * hash mixes the root in and its parent_hash is the root, so every block of a salted
 * chain differs from the unsalted one's, and a lookup (which checks the parent hash too)
 * finds only blocks of its own root: the prefix cache is no oracle across salts.
 *
 * When no sequence holds a registered block any more it stays findable, on an LRU
 * list; new blocks come from the free stack first, then from the LRU list's oldest
 * end (evicted: unregistered). A sequence releases its last block first, so a chain's
 * tail is evicted before its head. An eviction first calls on_evict (when set), with
 * which the prefix cache's tiers (scheduler/kv_tiers.c, into kvtier.c's store) keep a
 * copy of the block's K/V.
 *
 * DESIGN (threads). The scheduler thread owns the pool and every kv_seq; only n_used
 * and n_cached are atomic, for sched_get_stats on other threads.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "kvcache/kvcache.h"

/* ---- the hash ---- */

/* FNV-1a over the parent's hash and the block's tokens, then a 64-bit finalizer. */
uint64_t kv_chain_hash(uint64_t parent, const int32_t *tokens, int block_size) {
    uint64_t h = 0xcbf29ce484222325ULL ^ parent;
    for (int i = 0; i < block_size; i++) {
        uint32_t t = (uint32_t)tokens[i];
        for (int b = 0; b < 4; b++) {
            h ^= (t >> (8 * b)) & 0xFFu;
            h *= 0x100000001b3ULL;
        }
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

uint64_t kv_chain_root(const void *salt, size_t len) {
    if (len == 0) return KV_CHAIN_ROOT;
    /* FNV-1a from a seed of its own (so no salt's root is a plain chain hash's
     * starting state), over the length and the bytes, then the finalizer */
    uint64_t h = 0x6c62272e07bb0142ULL;
    for (int b = 0; b < 8; b++) {
        h ^= ((uint64_t)len >> (8 * b)) & 0xFFu;
        h *= 0x100000001b3ULL;
    }
    const unsigned char *p = salt;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h == KV_CHAIN_ROOT ? h ^ 1 : h;
}

/* ---- the map: hash -> registered block ---- */

static uint32_t map_slot(const kv_blocks *kb, uint64_t h) {
    return (uint32_t)(h ^ (h >> 32)) & kb->map_mask;
}

/* The registered block with hash h, tokens, parent and parent hash (a first block's: its
 * chain's root, so that salted and unsalted chains never meet); -1 when none. */
static int32_t map_find(const kv_blocks *kb, uint64_t h, const int32_t *tokens, int32_t parent, uint64_t parent_hash) {
    for (uint32_t i = map_slot(kb, h);; i = (i + 1) & kb->map_mask) {
        int32_t id = kb->map[i];
        if (id < 0) return -1;
        if (kb->hash[id] == h && kb->parent[id] == parent && kb->parent_hash[id] == parent_hash &&
            memcmp(kb->tokens + (size_t)id * (size_t)kb->block_size, tokens,
                   sizeof(int32_t) * (size_t)kb->block_size) == 0)
            return id;
    }
}

static void map_insert(kv_blocks *kb, int32_t id) {
    uint32_t i = map_slot(kb, kb->hash[id]);
    while (kb->map[i] >= 0) i = (i + 1) & kb->map_mask;
    kb->map[i] = id;
}

/* Removes id, shifting later entries of its probe run back (no tombstones). */
static void map_remove(kv_blocks *kb, int32_t id) {
    uint32_t i = map_slot(kb, kb->hash[id]);
    while (kb->map[i] != id) {
        SP_ASSERT(kb->map[i] >= 0);
        i = (i + 1) & kb->map_mask;
    }
    for (uint32_t j = (i + 1) & kb->map_mask; kb->map[j] >= 0; j = (j + 1) & kb->map_mask) {
        uint32_t home = map_slot(kb, kb->hash[kb->map[j]]);
        /* move map[j] into the hole at i when its home is not in (i, j] (cyclically) */
        bool home_in_between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!home_in_between) {
            kb->map[i] = kb->map[j];
            i = j;
        }
    }
    kb->map[i] = -1;
}

/* ---- the LRU list of cached blocks nobody holds ---- */

static void lru_push_tail(kv_blocks *kb, int32_t id) {
    kb->lru_prev[id] = kb->lru_tail;
    kb->lru_next[id] = -1;
    if (kb->lru_tail >= 0)
        kb->lru_next[kb->lru_tail] = id;
    else
        kb->lru_head = id;
    kb->lru_tail = id;
    kb->n_evictable++;
}

static void lru_unlink(kv_blocks *kb, int32_t id) {
    int32_t p = kb->lru_prev[id], n = kb->lru_next[id];
    if (p >= 0)
        kb->lru_next[p] = n;
    else
        kb->lru_head = n;
    if (n >= 0)
        kb->lru_prev[n] = p;
    else
        kb->lru_tail = p;
    kb->n_evictable--;
}

/* ---- the pool ---- */

static void update_stats(kv_blocks *kb) {
    atomic_store_explicit(&kb->n_used, kb->n_total - kb->n_free - kb->n_evictable, memory_order_relaxed);
}

sp_status kv_blocks_init(kv_blocks *kb, int32_t n_blocks, int block_size, bool prefix_cache) {
    SP_ASSERT(n_blocks > 0 && block_size > 0);
    memset(kb, 0, sizeof *kb);
    uint32_t map_cap = 16;
    while (map_cap < 2u * (uint32_t)n_blocks) map_cap *= 2;
    size_t n = (size_t)n_blocks;
    kb->free_ids = malloc(sizeof(int32_t) * n);
    kb->ref = calloc(n, sizeof(int32_t));
    kb->registered = calloc(n, sizeof(bool));
    kb->hash = calloc(n, sizeof(uint64_t));
    kb->parent_hash = calloc(n, sizeof(uint64_t));
    kb->root = calloc(n, sizeof(uint64_t));
    kb->parent = malloc(sizeof(int32_t) * n);
    kb->tokens = prefix_cache ? malloc(sizeof(int32_t) * n * (size_t)block_size) : NULL;
    kb->lru_prev = malloc(sizeof(int32_t) * n);
    kb->lru_next = malloc(sizeof(int32_t) * n);
    kb->map = malloc(sizeof(int32_t) * map_cap);
    if (!kb->free_ids || !kb->ref || !kb->registered || !kb->hash || !kb->parent_hash || !kb->root || !kb->parent ||
        (prefix_cache && !kb->tokens) || !kb->lru_prev || !kb->lru_next || !kb->map) {
        kv_blocks_free(kb);
        return sp_fail(SP_ERR_NOMEM, "KV block manager: out of memory for %d blocks", n_blocks);
    }
    /* pop order 0, 1, 2, ...: block 0 is on top of the stack */
    for (int32_t i = 0; i < n_blocks; i++) kb->free_ids[i] = n_blocks - 1 - i;
    memset(kb->map, 0xFF, sizeof(int32_t) * map_cap); /* every slot -1 */
    kb->map_mask = map_cap - 1;
    kb->n_free = n_blocks;
    kb->n_total = n_blocks;
    kb->block_size = block_size;
    kb->caching = prefix_cache;
    kb->lru_head = kb->lru_tail = -1;
    update_stats(kb);
    atomic_store_explicit(&kb->n_cached, 0, memory_order_relaxed);
    return SP_OK;
}

void kv_blocks_free(kv_blocks *kb) {
    free(kb->free_ids);
    free(kb->ref);
    free(kb->registered);
    free(kb->hash);
    free(kb->parent_hash);
    free(kb->root);
    free(kb->parent);
    free(kb->tokens);
    free(kb->lru_prev);
    free(kb->lru_next);
    free(kb->map);
    memset(kb, 0, sizeof *kb);
}

int32_t kv_blocks_available(const kv_blocks *kb) {
    return kb->n_free + kb->n_evictable;
}

/* One block for a sequence: a free one, else the least recently used cached one. */
static int32_t take_block(kv_blocks *kb) {
    int32_t id;
    if (kb->n_free > 0) {
        id = kb->free_ids[--kb->n_free];
    } else {
        id = kb->lru_head;
        SP_ASSERT(id >= 0);
        if (kb->on_evict)
            kb->on_evict(kb->evict_arg, id, kb->hash[id], kb->parent_hash[id],
                         kb->tokens + (size_t)id * (size_t)kb->block_size);
        lru_unlink(kb, id);
        map_remove(kb, id);
        kb->registered[id] = false;
        atomic_fetch_sub_explicit(&kb->n_cached, 1, memory_order_relaxed);
    }
    kb->ref[id] = 1;
    return id;
}

bool kv_blocks_grow(kv_blocks *kb, kv_seq *seq, int32_t n_blocks) {
    SP_ASSERT(n_blocks <= seq->cap);
    int32_t need = n_blocks - seq->n;
    if (need <= 0) return true;
    if (need > kv_blocks_available(kb)) return false;
    for (int32_t i = 0; i < need; i++) seq->ids[seq->n++] = take_block(kb);
    update_stats(kb);
    return true;
}

/* Drops seq's last block: to the LRU when cached, to the free list otherwise. */
static void drop_last_block(kv_blocks *kb, kv_seq *seq) {
    int32_t id = seq->ids[--seq->n];
    SP_ASSERT(kb->ref[id] > 0);
    if (--kb->ref[id] > 0) return; /* another sequence shares it */
    if (kb->registered[id]) {
        lru_push_tail(kb, id);
    } else {
        SP_ASSERT(kb->n_free < kb->n_total);
        kb->free_ids[kb->n_free++] = id;
    }
}

void kv_blocks_release(kv_blocks *kb, kv_seq *seq) {
    /* last block first: a cached chain's tail is evicted before its head, and free
     * blocks go back so the sequence's first block is popped first next time */
    while (seq->n > 0) drop_last_block(kb, seq);
    seq->n_hashed = 0;
    update_stats(kb);
}

void kv_blocks_truncate(kv_blocks *kb, kv_seq *seq, int32_t n_blocks) {
    if (n_blocks < 0) n_blocks = 0;
    while (seq->n > n_blocks) drop_last_block(kb, seq);
    if (seq->n_hashed > seq->n) seq->n_hashed = 0; /* hashed again from the first block when registered */
    update_stats(kb);
}

int32_t kv_blocks_used(const kv_blocks *kb) {
    return atomic_load_explicit(&kb->n_used, memory_order_relaxed);
}

int32_t kv_blocks_cached(const kv_blocks *kb) {
    return atomic_load_explicit(&kb->n_cached, memory_order_relaxed);
}

int32_t kv_blocks_for_tokens(int64_t n_tokens, int block_size) {
    return (int32_t)((n_tokens + block_size - 1) / block_size);
}

/* ---- the prefix cache ---- */

int32_t kv_prefix_match(const kv_blocks *kb, uint64_t root, const int32_t *tokens, int32_t max_blocks, int32_t *ids,
                        int32_t *unheld) {
    *unheld = 0;
    if (!kb->caching) return 0;
    uint64_t h = root;
    int32_t parent = -1, n = 0;
    for (; n < max_blocks; n++) {
        const int32_t *block_tokens = tokens + (size_t)n * (size_t)kb->block_size;
        uint64_t parent_hash = h;
        h = kv_chain_hash(parent_hash, block_tokens, kb->block_size);
        int32_t id = map_find(kb, h, block_tokens, parent, parent_hash);
        if (id < 0) break;
        ids[n] = id;
        if (kb->ref[id] == 0) (*unheld)++;
        parent = id;
    }
    return n;
}

void kv_prefix_take(kv_blocks *kb, kv_seq *seq, const int32_t *ids, int32_t n, const int32_t *tokens) {
    SP_ASSERT(seq->n == 0 && n <= seq->cap);
    uint64_t h = seq->root;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        SP_ASSERT(kb->registered[id]);
        if (kb->ref[id]++ == 0) lru_unlink(kb, id);
        seq->ids[seq->n++] = id;
        h = kv_chain_hash(h, tokens + (size_t)i * (size_t)kb->block_size, kb->block_size);
    }
    seq->n_hashed = n;
    seq->last_hash = h;
    update_stats(kb);
}

void kv_prefix_register(kv_blocks *kb, kv_seq *seq, const int32_t *tokens, int32_t n_computed) {
    if (!kb->caching) return;
    int32_t full = n_computed / kb->block_size;
    if (full > seq->n) full = seq->n;
    for (int32_t b = seq->n_hashed; b < full; b++) {
        const int32_t *block_tokens = tokens + (size_t)b * (size_t)kb->block_size;
        uint64_t parent_hash = b == 0 ? seq->root : seq->last_hash;
        uint64_t h = kv_chain_hash(parent_hash, block_tokens, kb->block_size);
        int32_t id = seq->ids[b], parent = b == 0 ? -1 : seq->ids[b - 1];
        if (!kb->registered[id]) {
            int32_t found = map_find(kb, h, block_tokens, parent, parent_hash);
            if (found >= 0) {
                /* another sequence computed the same block at the same time: share the
                 * cached one and free this copy, so the chain stays one chain (a later
                 * block's parent is always the registered block before it) */
                if (kb->ref[found]++ == 0) lru_unlink(kb, found);
                SP_ASSERT(kb->ref[id] == 1);
                kb->ref[id] = 0;
                kb->free_ids[kb->n_free++] = id;
                seq->ids[b] = found; /* wholly computed: no step writes into it again */
            } else {
                kb->registered[id] = true;
                kb->hash[id] = h;
                kb->parent_hash[id] = parent_hash;
                kb->root[id] = seq->root;
                kb->parent[id] = parent;
                memcpy(kb->tokens + (size_t)id * (size_t)kb->block_size, block_tokens,
                       sizeof(int32_t) * (size_t)kb->block_size);
                map_insert(kb, id);
                atomic_fetch_add_explicit(&kb->n_cached, 1, memory_order_relaxed);
            }
        }
        seq->last_hash = h;
        seq->n_hashed = b + 1;
    }
    update_stats(kb);
}

sp_status kv_seq_init(kv_seq *seq, int32_t cap) {
    SP_ASSERT(cap > 0);
    seq->ids = malloc(sizeof *seq->ids * (size_t)cap);
    if (!seq->ids) return sp_fail(SP_ERR_NOMEM, "KV block list: out of memory for %d blocks", cap);
    seq->n = 0;
    seq->cap = cap;
    seq->n_hashed = 0;
    seq->last_hash = 0;
    seq->root = KV_CHAIN_ROOT;
    return SP_OK;
}

void kv_seq_free(kv_seq *seq) {
    SP_ASSERT(seq->n == 0); /* kv_blocks_release first */
    free(seq->ids);
    seq->ids = NULL;
    seq->cap = 0;
}

/* kvcache.h: the KV cache's bookkeeping, below the scheduler and blind to the device:
 * the block manager (kv_blocks.c: which block ids each sequence holds, and the prefix
 * cache that finds a computed prefix's blocks by chain hash), and the lower tiers of the
 * prefix cache (kvtier.c, kvtier_entries.c, kvtier_disk.c). The device pool itself (the K/V bytes) is
 * gpu/'s dev_kv; the scheduler (scheduler/kv_tiers.c) moves blocks between the pool and
 * the tiers. docs/notes/2026-12-07-kv-cache-placement.md says why it is a folder.
 *
 * The tiers. Full KV blocks the device pool evicts
 * are kept here, in host memory and then on disk, each tier least recently used first
 * out, so that a prefix computed minutes ago is reloaded instead of recomputed.
 *
 * A block is known by its chain hash (a hash of its tokens and of every token before
 * them, kv_blocks.c), its parent's chain hash and its own tokens; a lookup
 * matches all three exactly. Its payload is opaque here: the bytes dev_kv_blocks_save
 * wrote, block_bytes of them.
 *
 * The host tier is one allocation of host_bytes cut into block slots. When it is full
 * its least recently used block moves to the disk tier (or is dropped when there is
 * none). The disk tier is a directory of one file per block (header, tokens, payload,
 * checksum), bounded by disk_bytes:
 *   - by default a directory of this process's own (mkdtemp under disk_dir), removed
 *     when the store is destroyed;
 *   - with persist, disk_dir/spindle-kv-<model sha256 prefix>, kept across restarts:
 *     files carry the model's sha256 and the KV layout, and a restart indexes those
 *     that match. Either directory holds an exclusive lock (flock) while a store uses
 *     it, so two processes never share one and never delete each other's files.
 * A file whose header, size or checksum is wrong is dropped with a warning (and
 * deleted), never loaded.
 *
 * DESIGN (threads). The store, the block pool and every kv_seq belong to one thread (the
 * scheduler's); kvt_stats_get, kv_blocks_used and kv_blocks_cached alone may be called
 * from any thread (the counters are atomics).
 */
#ifndef SP_KVCACHE_H
#define SP_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef enum kvt_tier { KVT_NONE, KVT_HOST, KVT_DISK } kvt_tier;

typedef struct kvt_config {
    int block_size;         /* tokens per block */
    size_t block_bytes;     /* payload bytes per block */
    int64_t host_bytes;     /* the host tier's budget; 0: no host tier */
    const char *disk_dir;   /* NULL or "": no disk tier */
    int64_t disk_bytes;     /* the disk tier's budget (with disk_dir) */
    bool persist;           /* the disk tier survives a restart (needs model_path) */
    const char *model_path; /* persist: the model file, whose sha256 the files carry */
    uint64_t layout;        /* a fingerprint of the KV layout (shape, element type): part of a file's identity */
} kvt_config;

typedef struct kvt_store kvt_store;

/* Counters and sizes, for metrics. */
typedef struct kvt_stats {
    int64_t host_blocks, host_capacity; /* blocks held, slots */
    int64_t disk_blocks, disk_capacity;
    int64_t block_bytes;                    /* payload bytes of one block (a disk file adds a header) */
    int64_t stored;                         /* blocks handed to kvt_put that were new */
    int64_t host_hits, disk_hits;           /* kvt_get that returned a block, per tier */
    int64_t host_evictions, disk_evictions; /* blocks pushed out of a tier (host: to disk or dropped) */
    int64_t disk_writes, disk_write_errors; /* files written; writes that failed (block dropped) */
    int64_t disk_rejected;                  /* files dropped for a bad header, size or checksum */
    int64_t disk_restored;                  /* files indexed from an earlier run (persist) */
} kvt_stats;

/* Creates the store; with a disk tier, makes (or, with persist, opens and indexes) its
 * directory. SP_ERR_INVALID_ARG names a bad setting; SP_ERR_IO a directory that cannot
 * be made or is locked by another process. host_bytes and disk_bytes smaller than one
 * block mean no tier. */
sp_status kvt_create(const kvt_config *c, kvt_store **out);
/* Frees the store; a directory of its own (not persist) is removed with its files. */
void kvt_destroy(kvt_store *t);

/* Whether the store has any tier. */
bool kvt_enabled(const kvt_store *t);

/* Keeps a copy of block (hash, parent, tokens) with payload data (block_bytes) in the
 * host tier, else on disk. A block already held is only marked recently used. Never
 * fails: what cannot be kept is dropped and counted. */
void kvt_put(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens, const void *data);

/* Shutdown with a persistent disk tier, so that a restart finds what the process still
 * held: kvt_persist_block writes one of the pool's blocks straight to disk, and
 * kvt_persist_host the host tier's blocks (most recently used first, for at most budget_s
 * seconds). Both only fill free disk places (nothing on disk is evicted for them); a
 * block already held is left. Nothing without a persistent disk tier. */
void kvt_persist_block(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens, const void *data);
void kvt_persist_host(kvt_store *t, double budget_s);

/* The tier that holds exactly this block; KVT_NONE when none. No I/O. A block found is
 * marked recently used, so the evictions of the admission that matched it (the pool's
 * blocks coming down) push out older blocks, not it. */
kvt_tier kvt_find(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens);

/* Copies the block's payload into data (block_bytes) and marks it recently used; returns
 * the tier it came from, or KVT_NONE when it is not held or its file failed a check (the
 * file is then dropped with a warning). */
kvt_tier kvt_get(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens, void *data);

/* Any thread. */
void kvt_stats_get(const kvt_store *t, kvt_stats *out);

/* The directory of the disk tier ("" when none). */
const char *kvt_disk_path(const kvt_store *t);

/* ---- the block manager (kv_blocks.c): bookkeeping of block ids only --------------- */

/* The block ids one sequence owns, in position order (block b holds positions
 * b*B .. b*B+B-1). Scheduler thread. */
typedef struct kv_seq {
    int32_t *ids; /* (cap) */
    int32_t n;
    int32_t cap;        /* the most blocks this sequence can ever need */
    int32_t n_hashed;   /* prefix cache: leading blocks whose chain hash is known */
    uint64_t last_hash; /* the chain hash of block n_hashed - 1 */
    uint64_t root;      /* the chain hash of its first block's parent: KV_CHAIN_ROOT, or a salted root
                           (kv_chain_root) that only sequences of the same salt share; kv_seq_init sets
                           KV_CHAIN_ROOT, its owner may set another before its first block is matched */
} kv_seq;

/* Called when a registered block is evicted, before its id is reused: the tiered prefix
 * cache (scheduler/kv_tiers.c) keeps a copy of its K/V under its chain hash, its parent's chain
 * hash and its tokens. The block's fields (root[id] among them) are still valid during the call. */
typedef void (*kv_evict_fn)(void *arg, int32_t id, uint64_t hash, uint64_t parent_hash, const int32_t *tokens);

/* The pool of block ids, with the prefix cache (kv_blocks.c has the design). Scheduler
 * thread; the atomics are for stats read on other threads. */
typedef struct kv_blocks {
    int32_t n_total;
    int block_size;
    bool caching;      /* prefix cache on */
    int32_t *free_ids; /* (n_total) blocks holding nothing cached: a stack of n_free */
    int32_t n_free;
    /* per block (n_total each) */
    int32_t *ref;                 /* sequences holding it */
    bool *registered;             /* in the cache: its hash, parent and tokens are valid */
    uint64_t *hash;               /* chain hash of its tokens and every token before them */
    uint64_t *parent_hash;        /* the chain hash of the block before it (the first: its chain's root) */
    uint64_t *root;               /* its chain's root (KV_CHAIN_ROOT or a salted one): the scope it is shared in,
                                     for an eviction hook or an event to name */
    int32_t *parent;              /* the registered block before it in its chain; -1: the first */
    int32_t *tokens;              /* (n_total, B) its tokens */
    int32_t *lru_prev, *lru_next; /* cached blocks no sequence holds, oldest first */
    int32_t lru_head, lru_tail, n_evictable;
    /* hash -> block id, open addressing with linear probing; -1: empty */
    int32_t *map;
    uint32_t map_mask;
    _Atomic int32_t n_used;   /* held by a sequence */
    _Atomic int32_t n_cached; /* registered (held or evictable) */
    kv_evict_fn on_evict;     /* NULL: none */
    void *evict_arg;
} kv_blocks;

/* The chain hash of an unsalted first block's parent. */
#define KV_CHAIN_ROOT 0x9e3779b97f4a7c15ULL
/* The chain root of a salt (a tenant's or a request's cache salt): KV_CHAIN_ROOT when len
 * is 0, else a 64-bit hash of the salt's bytes that is never KV_CHAIN_ROOT. A chain
 * starting at a salted root differs from the first block on, so its blocks (in the pool
 * and in the tiers, whose lookups match the parent hash exactly) are found only by
 * sequences of the same root: the root is the first block's parent_hash wherever a
 * block's parent is known (the eviction hook, the tiers, their disk files). */
uint64_t kv_chain_root(const void *salt, size_t len);
/* The chain hash of a block of tokens (block_size of them) after a block of chain hash
 * parent. */
uint64_t kv_chain_hash(uint64_t parent, const int32_t *tokens, int block_size);

/* Caller owns the pool's arrays; free with kv_blocks_free. prefix_cache: keep full
 * blocks' contents findable after their sequences end. */
sp_status kv_blocks_init(kv_blocks *kb, int32_t n_blocks, int block_size, bool prefix_cache);
void kv_blocks_free(kv_blocks *kb);
/* Blocks a sequence could take now: free ones plus cached ones nobody holds. */
int32_t kv_blocks_available(const kv_blocks *kb);
/* Gives seq new blocks until it owns n_blocks (<= seq->cap), evicting the least
 * recently used cached blocks when no free one is left; all or none: false, and
 * nothing taken, when too few are available. */
bool kv_blocks_grow(kv_blocks *kb, kv_seq *seq, int32_t n_blocks);
/* Returns every block of seq to the pool (cached ones stay findable until evicted). */
void kv_blocks_release(kv_blocks *kb, kv_seq *seq);
int32_t kv_blocks_used(const kv_blocks *kb);
int32_t kv_blocks_cached(const kv_blocks *kb);
/* Blocks that hold n_tokens positions. */
int32_t kv_blocks_for_tokens(int64_t n_tokens, int block_size);

/* Prefix cache: the longest run of cached blocks of the chain from root (a sequence's
 * kv_seq.root) holding tokens[0 .. n*B), at most max_blocks of them, into ids (cap
 * max_blocks); *unheld: how many of them no sequence holds now (taking those lowers
 * kv_blocks_available). Takes nothing. */
int32_t kv_prefix_match(const kv_blocks *kb, uint64_t root, const int32_t *tokens, int32_t max_blocks, int32_t *ids,
                        int32_t *unheld);
/* Makes seq (owning no blocks yet) share the n matched blocks of kv_prefix_match (made
 * with seq->root). */
void kv_prefix_take(kv_blocks *kb, kv_seq *seq, const int32_t *ids, int32_t n, const int32_t *tokens);
/* Registers seq's full blocks among its first n_computed positions (tokens[]) in the
 * cache under the chain from seq->root, so later sequences with the same prefix (and
 * root) find them. */
void kv_prefix_register(kv_blocks *kb, kv_seq *seq, const int32_t *tokens, int32_t n_computed);

/* Gives back seq's blocks beyond its first n_blocks (speculation's rejected drafts):
 * each goes to the prefix cache's LRU when registered, else to the free list. */
void kv_blocks_truncate(kv_blocks *kb, kv_seq *seq, int32_t n_blocks);

/* Caller owns seq->ids; free with kv_seq_free (after kv_blocks_release). */
sp_status kv_seq_init(kv_seq *seq, int32_t cap);
void kv_seq_free(kv_seq *seq);

#endif

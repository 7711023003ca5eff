/* state/kv.h: the KV cache as the scheduler keeps it (struct sched's `cache`): the block
 * manager (kv_blocks.c: block ids, the prefix cache), the device pool it indexes, the
 * prefix cache's match for the request being admitted, and the host and disk tiers
 * (kv_tiers.c) with their measured reload costs.
 *
 * DESIGN (threads). The scheduler thread (sched_create's and sched_destroy's thread
 * before the start and after the join); kv_blocks' n_used and n_cached are atomics that
 * sched_get_stats reads on any thread, and the tiers keep their own stats (kvtier.h).
 * pool, tiers, tier_block_bytes and watermark_blocks are fixed after sched_create.
 */
#ifndef SP_SCHED_STATE_KV_H
#define SP_SCHED_STATE_KV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kvcache/kvcache.h"
#include "model/model.h"

/* ---- KV block manager (kv_blocks.c): bookkeeping of block ids only ------------- */

/* The block ids one sequence owns, in position order (block b holds positions
 * b*B .. b*B+B-1). Scheduler thread. */
typedef struct kv_seq {
    int32_t *ids; /* (cap) */
    int32_t n;
    int32_t cap;        /* the most blocks this sequence can ever need */
    int32_t n_hashed;   /* prefix cache: leading blocks whose chain hash is known */
    uint64_t last_hash; /* the chain hash of block n_hashed - 1 */
} kv_seq;

/* Called when a registered block is evicted, before its id is reused: the tiered prefix
 * cache (kv_tiers.c) keeps a copy of its K/V under its chain hash, its parent's chain
 * hash and its tokens. */
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
    uint64_t *parent_hash;        /* the chain hash of the block before it (KV_CHAIN_ROOT: the first) */
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

/* The chain hash of a first block's parent. */
#define KV_CHAIN_ROOT 0x9e3779b97f4a7c15ULL
/* The chain hash of a block of tokens (block_size of them) after a block of chain hash
 * parent. */
uint64_t kv__chain_hash(uint64_t parent, const int32_t *tokens, int block_size);

/* Caller owns the pool's arrays; free with kv__blocks_free. prefix_cache: keep full
 * blocks' contents findable after their sequences end. */
sp_status kv__blocks_init(kv_blocks *kb, int32_t n_blocks, int block_size, bool prefix_cache);
void kv__blocks_free(kv_blocks *kb);
/* Blocks a sequence could take now: free ones plus cached ones nobody holds. */
int32_t kv__blocks_available(const kv_blocks *kb);
/* Gives seq new blocks until it owns n_blocks (<= seq->cap), evicting the least
 * recently used cached blocks when no free one is left; all or none: false, and
 * nothing taken, when too few are available. */
bool kv__blocks_grow(kv_blocks *kb, kv_seq *seq, int32_t n_blocks);
/* Returns every block of seq to the pool (cached ones stay findable until evicted). */
void kv__blocks_release(kv_blocks *kb, kv_seq *seq);
int32_t kv__blocks_used(const kv_blocks *kb);
int32_t kv__blocks_cached(const kv_blocks *kb);
/* Blocks that hold n_tokens positions. */
int32_t kv__blocks_for_tokens(int64_t n_tokens, int block_size);

/* Prefix cache: the longest run of cached blocks holding tokens[0 .. n*B), at most
 * max_blocks of them, into ids (cap max_blocks); *unheld: how many of them no sequence
 * holds now (taking those lowers kv__blocks_available). Takes nothing. */
int32_t kv__prefix_match(const kv_blocks *kb, const int32_t *tokens, int32_t max_blocks, int32_t *ids, int32_t *unheld);
/* Makes seq (owning no blocks yet) share the n matched blocks of kv__prefix_match. */
void kv__prefix_take(kv_blocks *kb, kv_seq *seq, const int32_t *ids, int32_t n, const int32_t *tokens);
/* Registers seq's full blocks among its first n_computed positions (tokens[]) in the
 * cache, so later sequences with the same prefix find them. */
void kv__prefix_register(kv_blocks *kb, kv_seq *seq, const int32_t *tokens, int32_t n_computed);

/* Gives back seq's blocks beyond its first n_blocks (speculation's rejected drafts):
 * each goes to the prefix cache's LRU when registered, else to the free list. */
void kv__blocks_truncate(kv_blocks *kb, kv_seq *seq, int32_t n_blocks);

/* Caller owns seq->ids; free with kv__seq_free (after kv__blocks_release). */
sp_status kv__seq_init(kv_seq *seq, int32_t cap);
void kv__seq_free(kv_seq *seq);

/* ---- the scheduler's KV state ---------------------------------------------------- */

typedef struct sched_kv_state {
    dev_kv *pool; /* the K/V memory on the device */
    kv_blocks blocks;
    int32_t watermark_blocks; /* blocks admission keeps free (kv_watermark of the pool) */
    int32_t *match_ids;       /* (max_blocks_per_seq) the prefix cache's match for the head being admitted */
    int32_t n_match;
    int32_t n_tier_match;    /* blocks after those that the tiers hold (kv_tiers.c) */
    kvt_store *tiers;        /* the prefix cache's host and disk tiers; NULL: none */
    uint8_t *tier_buf;       /* (tier_block_bytes) one block on its way between the pool and a tier */
    size_t tier_block_bytes; /* dev_kv_block_bytes of the pool */
    double tier_reload_s[3]; /* per kvt_tier: seconds one block's reload took (EWMA; 0: not measured) */
    uint32_t tier_skips[3];  /* per kvt_tier: matches not reloaded for the cost (kv_tiers.c) */
    bool tier_save_failed;   /* a block could not be copied out of the pool (logged once) */
} sched_kv_state;

#endif

/* kvcache.h: the lower tiers of the prefix cache. Full KV blocks the device pool evicts
 * are kept here, in host memory and then on disk, each tier least recently used first
 * out, so that a prefix computed minutes ago is reloaded instead of recomputed.
 *
 * A block is known by its chain hash (a hash of its tokens and of every token before
 * them, scheduler/kv_blocks.c), its parent's chain hash and its own tokens; a lookup
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
 * DESIGN (threads). The store belongs to one thread (the scheduler's); kvt_stats_get
 * alone may be called from any thread (the counters are atomics).
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

#endif

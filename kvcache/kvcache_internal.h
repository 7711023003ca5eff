/* kvcache_internal.h: the tiers' store struct, shared by kvtier_entries.c (the index,
 * LRU lists and entries), kvtier.c (the tiers) and kvtier_disk.c (the files). Nothing
 * outside kvcache/ (and its tests) uses it. */
#ifndef SP_KVCACHE_INTERNAL_H
#define SP_KVCACHE_INTERNAL_H

#include <limits.h>
#include <stdatomic.h>

#include "kvcache/kvcache.h"

/* One block the store holds (tier != KVT_NONE) or a free entry. */
typedef struct kvt_entry {
    uint64_t hash, parent;
    kvt_tier tier;
    int32_t slot;       /* KVT_HOST: its slot in the host allocation */
    int32_t prev, next; /* its tier's LRU list (-1: none); a free entry's next is the free list */
} kvt_entry;

/* A tier's LRU list: head is the least recently used. */
typedef struct kvt_lru {
    int32_t head, tail, n;
} kvt_lru;

struct kvt_store {
    int block_size;
    size_t block_bytes;
    /* the entries and their index (hash -> entry, linear probing, no tombstones) */
    int32_t cap;
    kvt_entry *e;
    int32_t *tokens; /* (cap, block_size) each entry's tokens */
    int32_t free_head;
    int32_t *map;
    uint32_t map_mask;
    /* the host tier */
    uint8_t *host; /* (host_slots, block_bytes) */
    int32_t host_slots, n_free_slots;
    int32_t *free_slots;
    kvt_lru host_lru;
    /* the disk tier */
    int64_t disk_slots; /* 0: none */
    kvt_lru disk_lru;
    bool persist;
    char dir[PATH_MAX];
    int lock_fd;
    uint8_t model_sha[32]; /* persist: the model's sha256; zeros otherwise */
    uint64_t layout;
    uint8_t *io; /* (kvt__file_bytes) one file's bytes, for reads and writes */
    bool write_error_logged;
    /* counters (kvt_stats) */
    _Atomic int64_t n_host, n_disk, stored, host_hits, disk_hits, host_evictions, disk_evictions, disk_writes,
        disk_write_errors, disk_rejected, disk_restored;
};

/* ---- kvtier_entries.c: the index, LRU lists and entries, for kvtier.c and kvtier_disk.c ---- */

/* The entry holding block (hash, parent, tokens); -1 when none does. */
int32_t kvt__map_find(const kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* The LRU list of tier (KVT_HOST or KVT_DISK). */
kvt_lru *kvt__tier_lru(kvt_store *t, kvt_tier tier);
/* Appends entry i to l (most recently used) / takes it out of l. */
void kvt__lru_push(kvt_store *t, kvt_lru *l, int32_t i);
void kvt__lru_unlink(kvt_store *t, kvt_lru *l, int32_t i);
/* A free entry for block (hash, parent, tokens), not yet in a tier or the index; -1
 * when every entry is in use. */
int32_t kvt__entry_new(kvt_store *t, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Puts entry i (just made) in tier and the index, most recently used. */
void kvt__entry_place(kvt_store *t, int32_t i, kvt_tier tier);
/* Takes entry i out of its tier's list and the index, leaving it allocated (a host
 * entry's slot is free again). */
void kvt__entry_unplace(kvt_store *t, int32_t i);
/* Returns entry i (in no tier) to the free list. */
void kvt__entry_free(kvt_store *t, int32_t i);
/* Takes entry i out of its tier and the index and frees it (its disk file stays). */
void kvt__entry_drop(kvt_store *t, int32_t i);
/* Entry i's tokens (block_size). */
int32_t *kvt__entry_tokens(const kvt_store *t, int32_t i);

/* ---- kvtier_disk.c ---- */

/* Bytes of one block's file: header, tokens, payload. */
size_t kvt__file_bytes(const kvt_store *t);
/* Makes (or with persist opens, locks and indexes) the directory. */
sp_status kvt__disk_open(kvt_store *t, const kvt_config *c);
/* Releases the lock; removes the directory and its files unless persist. */
void kvt__disk_close(kvt_store *t);
/* Writes entry i's file from data; false when it could not (the first failure logged). */
bool kvt__disk_write(kvt_store *t, int32_t i, const void *data);
/* Reads and checks entry i's file into data; false when missing or bad (warned). */
bool kvt__disk_read(kvt_store *t, int32_t i, void *data);
/* Deletes entry i's file. */
void kvt__disk_remove(kvt_store *t, int32_t i);

#endif

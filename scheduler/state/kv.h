/* state/kv.h: the KV cache as the scheduler keeps it (struct sched's `cache`): the block
 * manager (kvcache/: block ids, the prefix cache), the device pool it indexes, the
 * prefix cache's match for the request being admitted, and the host and disk tiers
 * (kvcache/, moved to and from the pool by kv_tiers.c) with their measured reload costs.
 *
 * DESIGN (threads). The scheduler thread (sched_create's and sched_destroy's thread
 * before the start and after the join); kv_blocks' n_used and n_cached are atomics that
 * sched_get_stats reads on any thread, and the tiers keep their own stats (kvcache.h).
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

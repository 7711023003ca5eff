/* kv_blocks.c: the KV block manager. Bookkeeping only: which block ids of the pool are
 * free (a stack) and which ones each sequence owns (its kv_seq, in position order).
 * The K/V data itself lives in the device's pool (dev_kv); nothing here touches it.
 *
 * DESIGN (threads). The scheduler thread owns the pool and every kv_seq; only
 * n_used is atomic, for sched_get_stats on other threads.
 */
#include <stdlib.h>

#include "common/assert.h"
#include "scheduler/sched_internal.h"

sp_status kv__blocks_init(kv_blocks *kb, int32_t n_blocks) {
    SP_ASSERT(n_blocks > 0);
    kb->free_ids = malloc(sizeof *kb->free_ids * (size_t)n_blocks);
    if (!kb->free_ids) return sp_fail(SP_ERR_NOMEM, "KV block manager: out of memory for %d blocks", n_blocks);
    /* pop order 0, 1, 2, ...: block 0 is on top of the stack */
    for (int32_t i = 0; i < n_blocks; i++) kb->free_ids[i] = n_blocks - 1 - i;
    kb->n_free = n_blocks;
    kb->n_total = n_blocks;
    atomic_store_explicit(&kb->n_used, 0, memory_order_relaxed);
    return SP_OK;
}

void kv__blocks_free(kv_blocks *kb) {
    free(kb->free_ids);
    kb->free_ids = NULL;
    kb->n_free = kb->n_total = 0;
}

bool kv__blocks_grow(kv_blocks *kb, kv_seq *seq, int32_t n_blocks) {
    SP_ASSERT(n_blocks <= seq->cap);
    int32_t need = n_blocks - seq->n;
    if (need <= 0) return true;
    if (need > kb->n_free) return false;
    for (int32_t i = 0; i < need; i++) seq->ids[seq->n++] = kb->free_ids[--kb->n_free];
    atomic_store_explicit(&kb->n_used, kb->n_total - kb->n_free, memory_order_relaxed);
    return true;
}

void kv__blocks_release(kv_blocks *kb, kv_seq *seq) {
    /* push back in reverse so the sequence's first block is popped first next time */
    while (seq->n > 0) {
        SP_ASSERT(kb->n_free < kb->n_total);
        kb->free_ids[kb->n_free++] = seq->ids[--seq->n];
    }
    atomic_store_explicit(&kb->n_used, kb->n_total - kb->n_free, memory_order_relaxed);
}

int32_t kv__blocks_used(const kv_blocks *kb) {
    return atomic_load_explicit(&kb->n_used, memory_order_relaxed);
}

int32_t kv__blocks_for_tokens(int64_t n_tokens, int block_size) {
    return (int32_t)((n_tokens + block_size - 1) / block_size);
}

sp_status kv__seq_init(kv_seq *seq, int32_t cap) {
    SP_ASSERT(cap > 0);
    seq->ids = malloc(sizeof *seq->ids * (size_t)cap);
    if (!seq->ids) return sp_fail(SP_ERR_NOMEM, "KV block list: out of memory for %d blocks", cap);
    seq->n = 0;
    seq->cap = cap;
    return SP_OK;
}

void kv__seq_free(kv_seq *seq) {
    SP_ASSERT(seq->n == 0); /* kv__blocks_release first */
    free(seq->ids);
    seq->ids = NULL;
    seq->cap = 0;
}

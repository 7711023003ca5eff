/* spec_seq.c: speculative decoding's bookkeeping of one sequence, below every file that
 * grows, ends or preempts one: the target pool's blocks its drafts need (reserve), the
 * draft model's blocks it gives back (release), and a finished answer joining the suffix
 * cache (remember).
 *
 * DESIGN (threads). Scheduler thread (sched_destroy's thread after the join); the suffix
 * cache's size is an atomic read by sched_get_stats.
 */
#include "scheduler/sched_internal.h"

int32_t sched__spec_reserve(sched *s, sched_request *r, int32_t n_draft) {
    int B = s->cfg.block_size;
    int32_t need = kv_blocks_for_tokens((int64_t)r->n_tokens + n_draft, B);
    int32_t extra = need - r->kv.n;
    if (extra <= 0) return n_draft;
    if (kv_blocks_available(&s->cache.blocks) - extra >= s->cache.watermark_blocks &&
        kv_blocks_grow(&s->cache.blocks, &r->kv, need))
        return n_draft;
    int32_t held = r->kv.n * B - r->n_tokens; /* the positions its blocks already hold */
    return held < n_draft ? held : n_draft;
}

void sched__spec_release(sched *s, sched_request *r) {
    if (!s->spec.draft_kv) return;
    kv_blocks_release(&s->spec.draft_blocks, &r->draft_kv);
    r->draft_computed = 0;
}

void sched__spec_remember(sched *s, const sched_request *r) {
    if (!s->spec.suffix) return;
    spec_suffix_add(s->spec.suffix, r->suffix_tenant, r->tokens, r->n_tokens);
    atomic_store_explicit(&s->spec.stats.suffix_bytes, spec_suffix_bytes(s->spec.suffix), memory_order_relaxed);
}

/* state/speculation.h: speculative decoding's part of the scheduler (struct sched's
 * `spec`): the gate, the cost and acceptance models and the suffix cache (spec/), the
 * draft model's KV pool and blocks (spec_draft.c), this tick's drafter timings, and the
 * counters behind sched_stats.
 *
 * DESIGN (threads). The scheduler thread (sched_create's and sched_destroy's thread
 * before the start and after the join); the counters are atomics that sched_get_stats
 * reads on any thread.
 */
#ifndef SP_SCHED_STATE_SPECULATION_H
#define SP_SCHED_STATE_SPECULATION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "scheduler/sched.h"
#include "scheduler/spec/spec.h"
#include "kvcache/kvcache.h"

/* Speculative decoding's counters (sched_stats), per proposer where indexed. */
typedef struct sched_spec_counters {
    _Atomic int64_t proposed[SCHED_SPEC_PROPOSERS], accepted[SCHED_SPEC_PROPOSERS], drafts[SCHED_SPEC_PROPOSERS],
        switches[SCHED_SPEC_PROPOSERS];
    _Atomic int64_t accepted_at[SCHED_SPEC_MAX_K];
    _Atomic bool enabled[SCHED_SPEC_PROPOSERS];
    _Atomic int64_t suffix_bytes;
} sched_spec_counters;

typedef struct sched_spec_state {
    spec_gate gate;
    bool ran[SCHED_SPEC_PROPOSERS];       /* this tick ran that proposer's model (its time is its own) */
    double seconds[SCHED_SPEC_PROPOSERS]; /* how long that model ran this tick */
    int width;                            /* the decode sequences this tick's drafts were planned for */
    double token_s[SCHED_SPEC_PROPOSERS][SPEC_GATE_BUCKETS]; /* spec_draft.c: a drafter model's seconds per draft
                                                            token and sequence, per step width (EWMA; 0: not
                                                            measured yet) */
    double draft_catchup_s;            /* spec_draft.c: the draft model's seconds per catch-up token (EWMA;
                                          0: not measured yet) */
    spec_cost cost[SPEC_GATE_BUCKETS]; /* per width bucket: a decode step's time against its rows */
    spec_accept accept;                /* acceptance by proposer and match length, across sequences */
    spec_suffix *suffix;               /* NULL: the suffix proposer is not used */
    dev_kv *draft_kv;                  /* the draft model's KV pool (NULL: no draft model) */
    kv_blocks draft_blocks;            /* its block ids (no prefix cache) */
    struct draft_slot *draft_slots;    /* (S) the sequences of one tick's draft model run */
    sched_spec_counters stats;
} sched_spec_state;

#endif

/* sched_defaults.h: the defaults of the scheduler knobs that `spindle serve` also takes
 * as settings, written once. scheduler/sched.c's sched_config_default() and
 * config/cfg.c's cfg_settings_init() both read them: config/ may not include
 * scheduler/ nor scheduler/ config/, so the numbers live in the layer below both.
 * They suit the default model on a small CPU machine. */
#ifndef SP_SCHED_DEFAULTS_H
#define SP_SCHED_DEFAULTS_H

#include <stdbool.h>

#include "common/kinds.h"

/* Designated initializers for the knobs that sched_config and cfg_settings name alike
 * (the scheduler's struct and the settings it is filled from). */
#define SP_SCHED_DEFAULT_FIELDS                                                                                    \
    .kv_cache_mb = 512 /* MiB */, .gpu_memory_fraction = 0.9, .block_size = 16, .max_batch_size = 64,              \
    .max_batch_tokens = 512, .max_prefill_tokens = 256, .queue_max_requests = 4096, .queue_max_tokens = 4000000,   \
    .prefix_cache = true, .kv_host_mb = 0, .kv_disk_gb = 4, .spec_k = 8, .spec_ngram_min = 2, .spec_ngram_max = 5, \
    .spec_gate = true, .policy = SP_POLICY_FCFS, .kv_type = SP_KV_F16

/* speculative decoding's proposers: "auto" (every one built; the gate decides) */
#define SP_SCHED_DEFAULT_SPECULATIVE "auto"

/* the suffix cache's budget: spec_suffix_mb in the settings, spec_suffix_bytes in the scheduler */
#define SP_SCHED_DEFAULT_SPEC_SUFFIX_MB 64

/* the draft model's KV pool in MiB (draft_kv_cache_mb in both) */
#define SP_SCHED_DEFAULT_DRAFT_KV_CACHE_MB 64

/* request_timeout in the settings, request_timeout_s in the scheduler; 0 = none */
#define SP_SCHED_DEFAULT_REQUEST_TIMEOUT_S 600

#endif

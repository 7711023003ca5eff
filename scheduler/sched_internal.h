/* sched_internal.h: what the scheduler's files share and nothing outside scheduler/
 * (and its unit tests) may use: the request and scheduler structs, the KV block
 * manager, the admission/preemption policies, stop-string matching and the tick.
 *
 * DESIGN (threads). A struct field belongs to one of three owners, named at the field:
 *   - immutable: written once before the object is shared, then read by anyone;
 *   - under a lock: the request's `lock` (its output and notify callback) or the
 *     scheduler's `lock` (the queue and the shutdown flags);
 *   - the scheduler thread: everything about running sequences (block lists, token
 *     arrays, sampler and decoder state, the waiting list, the step arrays). Before
 *     sched_start and after the thread is joined, the thread calling sched_create or
 *     sched_destroy plays that role.
 * Counters that are read without locks (sched_stats, the heartbeat) are atomics.
 * Lock order: a request's lock before the scheduler's lock, never the other way.
 */
#ifndef SP_SCHED_INTERNAL_H
#define SP_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "kvtier/kvtier.h"
#include "model/model.h"
#include "scheduler/sched.h"
#include "scheduler/spec/spec.h"

/* tick.c's fair share of decode rows: while several submissions decode, one adds at most
 * this many rows per step, or as many as the largest other one. */
enum { SCHED_FAIR_DECODE_ROWS = 2 };

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

/* ---- stop strings (stop_match.c) ------------------------------------------------ */

/* Text held back because it could be the start of a stop string. Scheduler thread. */
typedef struct sched_stop {
    char held[SCHED_MAX_STOP_BYTES]; /* always shorter than the longest stop string */
    size_t n_held;
    int matched; /* once sched__stop_feed returned true: the index of the stop string found */
} sched_stop;

/* Feeds text (n bytes) after the held text. work must hold st->n_held + n bytes; on
 * return work[0 .. *n_commit) is the text that is now final. Returns true when a stop
 * string matched: then the final text ends where the earliest match begins and
 * everything from there on is dropped (held text too). Otherwise the longest suffix
 * that is a proper prefix of some stop string stays held. */
bool sched__stop_feed(sched_stop *st, const char *const *stops, const size_t *stop_lens, int n_stops, const char *text,
                      size_t n, char *work, size_t *n_commit);
/* Copies the held text to out (SCHED_MAX_STOP_BYTES) and clears it; returns its length. */
size_t sched__stop_flush(sched_stop *st, char *out);

/* ---- requests (request.c) ----------------------------------------------------------- */

typedef enum sched_seq_state {
    SCHED_SEQ_NEW,     /* created, not submitted */
    SCHED_SEQ_QUEUED,  /* in the scheduler's queue (under sched.lock) */
    SCHED_SEQ_WAITING, /* on the scheduler thread's waiting list (new or preempted) */
    SCHED_SEQ_RUNNING, /* admitted: owns KV blocks, prefilling or decoding */
    SCHED_SEQ_DONE     /* ended; the scheduler dropped its reference */
} sched_seq_state;

struct sched_request {
    /* immutable after sched_request_create; prompt, stop and logit_bias point at the
     * copies below */
    sched_request_params params;
    char *stop_data;                   /* the stop strings, NUL-separated */
    const char *stops[SCHED_MAX_STOP]; /* (params.n_stop) into stop_data */
    size_t stop_lens[SCHED_MAX_STOP];
    sample_logit_bias *logit_bias; /* (params.sampling.n_logit_bias) */

    atomic_int refs;
    atomic_bool cancel; /* any thread sets it; the scheduler acts on it */
    /* the scheduler it was submitted to; set by sched_submit before it is queued. Only
     * touched by sched_request_cancel while the output is not done (see request.c). */
    sched *_Atomic owner;

    pthread_mutex_t lock;   /* guards the fields up to the next comment */
    sched_output out;       /* text is NUL-terminated */
    size_t text_cap;        /* bytes allocated for out.text, NUL included */
    sched_notify_fn notify; /* NULL: none */
    void *notify_arg;

    /* written by sched_submit before the request is queued, then the scheduler thread */
    sched_seq_state state;
    uint64_t arrival_no; /* submission order: fcfs and ties of the priority policy */
    /* its turn for a batch slot (policy.c): the scheduler's turn when it was submitted,
     * plus its place among the sequences submitted together (one HTTP request) */
    int64_t turn;
    uint64_t group;      /* the arrival_no of the first sequence submitted with it (one HTTP request) */
    double deadline;     /* sched_now() seconds; 0 = none */
    bool in_queue_count; /* still counted in the queue's bounds (not yet admitted) */
    sched_request *next, *prev;

    /* the sequence: scheduler thread (arrays allocated by sched_submit) */
    int32_t *tokens;    /* (n_prompt + max_tokens) the prompt, then every sampled token */
    int32_t n_tokens;   /* prompt + sampled */
    int32_t n_computed; /* tokens whose K/V are in the cache (0 again after preemption) */
    kv_seq kv;
    float spec_bias;           /* spec_tick.c: log-odds by which its drafts beat their classes' rates
                                  (spec/spec_accept.c); 0: an average sequence */
    bool spec_tried;           /* spec_tick.c: a draft of it has been verified */
    int8_t spec_match;         /* spec_tick.c: the length of the match its draft in this step came from (0: none) */
    bool spec_cut;             /* spec_tick.c: its grammar cut that draft short (the cut token counts as rejected) */
    kv_seq draft_kv;           /* its blocks in the draft model's pool (spec_draft.c) */
    int32_t draft_computed;    /* leading tokens whose K/V the draft model holds */
    uint64_t last_decode_tick; /* the tick it last had a decode row (tick.c's fair share) */
    bool swapped;              /* preempted, waiting to come back (policy.c admits it first) */
    uint64_t resumed_tick;     /* the tick it came back from its last preemption; 0: never preempted */
    tok_decoder dec;
    gram_state *gram; /* its place in params.grammar (NULL: none); advanced over every emitted token */
    sched_stop stop;
    double last_token_at; /* sched_now() of its last sampled token (inter-token latency); 0: none yet */
    /* the thinking budget (params.max_reasoning_tokens): end_tick.c follows the tags in the
     * text, tick.c forces think_close's tokens once the budget is spent */
    int32_t *think_close;     /* (params.n_think_close) owned copy */
    uint8_t thinking;         /* 0 not yet, 1 inside <think>, 2 past </think> */
    int32_t reasoning_tokens; /* tokens emitted inside it */
    int32_t force_at;         /* next think_close token to force; n_think_close: none pending */
    char tag_tail[8];         /* the last bytes of text, to see a tag cut across tokens */
    double *pool;             /* an embedding (params.pooling): (n_embd) the running sum (mean) or the row kept */
};

/* Allocates the sequence's arrays for a scheduler with block_size B (sched_submit,
 * on the submitting thread, once the request passed validation). */
sp_status sched__request_prepare(sched_request *r, int block_size);

/* Makes room for n more bytes of text (NUL included); call with the lock held. */
sp_status sched__output_reserve_text(sched_request *r, size_t n);

/* ---- embeddings (embed.c) ------------------------------------------------------------ */

/* An embedding's pool and output vector for a model of width n_embd, zeroed (sched_submit,
 * after sched__request_prepare; again on a retry). Nothing for a generation. */
sp_status sched__embed_prepare(sched_request *r, int32_t n_embd);
/* Adds the final hidden states of n_rows prompt positions (rows (n_rows, D), the ones
 * sched__pool_rows asked for) to an embedding's pool (D), which starts zeroed: mean sums
 * them, last and cls keep their one row. Pure. */
void sched__pool_add(sched_pooling pooling, double *pool, const float *rows, int32_t n_rows, int32_t dim);
/* The pool of a prompt of n_prompt tokens as the finished vector into out (D): mean
 * divides, then L2 normalization (a zero vector stays zero). Pure. */
void sched__pool_finish(sched_pooling pooling, const double *pool, int32_t n_prompt, int32_t dim, float *out);
/* The hidden rows an embedding's chunk (prompt positions first..first+chunk-1 of
 * n_prompt) wants: how many, and in *first_row the position of the first (they are
 * consecutive). Pure. */
int32_t sched__pool_rows(sched_pooling pooling, int32_t first, int32_t chunk, int32_t n_prompt, int32_t *first_row);
/* After a step computed r's chunk (its n_rows hidden rows in hidden, n_computed already
 * advanced): pools them; once the whole prompt is in, publishes the vector and ends r
 * (STOP, removed from running, its blocks back to the pool). Returns whether r still
 * runs. */
bool sched__embed_step(sched *s, sched_request *r, const float *hidden, int32_t n_rows);

/* ---- policies (policy.c) ------------------------------------------------------------- */

/* true when a should be admitted before b (and so preempted after b). */
bool sched__policy_before(sched_policy_kind kind, const sched_request *a, const sched_request *b);
/* Index of the sequence to preempt among running (n >= 1): the one admitted last by
 * the policy's order (the youngest, or the lowest priority then youngest). */
int sched__policy_victim(sched_policy_kind kind, sched_request *const *running, int n, uint64_t tick);
/* Ticks after its return during which a preempted sequence is not preempted again while
 * another can be. */
enum { SCHED_RESUME_IMMUNITY_TICKS = 32 };

/* ---- histograms (sched_metrics.c) ------------------------------------------------- */

/* One histogram's buckets, not cumulative: buckets[i] counts observations in
 * (bounds[i-1], bounds[i]], buckets[n_bounds] those above every bound. Zeroed memory
 * is an empty histogram. Any thread observes (atomics only), any thread reads. */
typedef struct sched_histogram {
    _Atomic uint64_t buckets[SCHED_HIST_MAX_BOUNDS + 1];
    _Atomic double sum;
} sched_histogram;

typedef struct sched_metrics {
    sched_histogram hist[SCHED_HIST_COUNT];
} sched_metrics;

/* Adds v to histogram id (NaN ignored, negatives as 0). Lock-free; any thread. */
void sched__metrics_observe(sched_metrics *m, sched_hist_id id, double v);
/* TTFT, end-to-end, prefill and decode time of a request that finished. */
void sched__metrics_observe_finished(sched_metrics *m, const sched_timings *t);
/* Cumulative buckets, count and sum of histogram id. Any thread. */
void sched__metrics_snapshot(const sched_metrics *m, sched_hist_id id, sched_hist_snapshot *out);

/* ---- grammar masks off the critical path (masks.c) --------------------------------- */

/* One constrained sequence's rows of a step: n_draft + 1 rows and as many masks. */
typedef struct sched_mask_job {
    sched_request *r;
    int32_t n_draft;
    dev_sample_row *rows; /* its rows in sample_rows: their `allowed` is set */
    uint32_t *masks;      /* (n_draft + 1, mask_words) in step_masks */
} sched_mask_job;

/* The mask worker and the jobs of the step at hand (see masks.c for the hand-over). */
typedef struct sched_masks {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    sched_mask_job *jobs; /* (max_batch_size) */
    int n_jobs;
    bool posted;      /* under lock: jobs handed to the worker, not finished yet */
    bool stop;        /* under lock: the worker returns */
    bool started;     /* the worker runs */
    bool failed;      /* it could not start: masks are computed inline */
    bool initialized; /* lock, conditions and jobs exist */
} sched_masks;

/* ---- the scheduler ---------------------------------------------------------------- */

/* Operational counters (sched_stats); relaxed atomics, each value on its own. */
/* Speculative decoding's counters (sched_stats), per proposer where indexed. */
typedef struct sched_spec_counters {
    _Atomic int64_t proposed[SCHED_SPEC_PROPOSERS], accepted[SCHED_SPEC_PROPOSERS], drafts[SCHED_SPEC_PROPOSERS],
        switches[SCHED_SPEC_PROPOSERS];
    _Atomic int64_t accepted_at[SCHED_SPEC_MAX_K];
    _Atomic bool enabled[SCHED_SPEC_PROPOSERS];
    _Atomic int64_t suffix_bytes;
} sched_spec_counters;

typedef struct sched_counters {
    _Atomic int64_t submitted, rejected_queue_requests, rejected_queue_tokens, rejected_shutdown, rejected_invalid,
        finished, cancelled, errors, timeouts, preemptions, ticks, prompt_tokens, generated_tokens, prefix_query_tokens,
        prefix_hit_tokens, tier_reloaded_tokens, swap_resumes, slo_requests, slo_goodput, slo_rejected,
        slo_prefill_holds;
    _Atomic int32_t running;
    _Atomic int32_t swapped;
} sched_counters;

struct sched {
    /* immutable after sched_create */
    sched_config cfg; /* max_seq_len resolved */
    model *m;
    const tok_vocab *vocab;
    int32_t n_vocab;
    int32_t max_blocks_per_seq; /* block table row width: ceil(max_seq_len / B) */
    int32_t watermark_blocks;
    int32_t *eog_ids; /* (n_eog) end-of-generation ids of the vocabulary */
    int n_eog;
    size_t piece_cap; /* bytes one decoder push or flush may write */

    /* the queue: under lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    sched_request *queue_head, *queue_tail;
    uint64_t next_arrival_no;
    /* the latest turn admitted: written by the scheduler thread at admission, read by
     * sched_submit for the turns of new sequences */
    _Atomic int64_t turn_admitted;
    bool shutting_down; /* sched_submit refuses */
    bool stopping;      /* the thread should return */
    bool wake_pending;
    /* the bounds: changed under lock by sched_submit, lowered by the scheduler thread
     * (atomically, without the lock) when a request is admitted or ends while waiting */
    _Atomic int32_t queued;
    _Atomic int64_t queued_tokens;

    /* the scheduler thread (see the file comment) */
    pthread_t thread;
    bool started;
    dev_kv *kv;
    kv_blocks blocks;
    int32_t *match_ids; /* (max_blocks_per_seq) the prefix cache's match for the head being admitted */
    int32_t n_match;
    int32_t n_tier_match;    /* blocks after those that the tiers hold (kv_tiers.c) */
    kvt_store *tiers;        /* the prefix cache's host and disk tiers; NULL: none */
    uint8_t *tier_buf;       /* (tier_block_bytes) one block on its way between the pool and a tier */
    size_t tier_block_bytes; /* dev_kv_block_bytes of the pool */
    double tier_reload_s[3]; /* per kvt_tier: seconds one block's reload took (EWMA; 0: not measured) */
    double prefill_row_s;    /* seconds one row of a prefill step took (EWMA; 0: not measured) */
    double decode_step_s;    /* seconds a decode-only step took (EWMA; 0: not measured) */
    uint32_t tier_skips[3];  /* per kvt_tier: matches not reloaded for the cost (kv_tiers.c) */
    bool tier_save_failed;   /* a block could not be copied out of the pool (logged once) */
    /* admissions per second while requests waited (slo.c: a window of about a second
     * counts only when the waiting list never ran empty in it) */
    double admit_window_start;
    int32_t admit_window_count;
    bool admit_window_saturated;
    double admit_rate;
    /* the rates above for sched_submit's TTFT estimate (policy slo), on other threads */
    _Atomic double shared_prefill_row_s, shared_decode_step_s, shared_admit_rate;
    sched_request *wait_head, *wait_tail; /* ordered by sched__policy_before */
    sched_request **running;              /* (max_batch_size) in admission order */
    int n_running;

    /* per-step arrays, sized once (no allocation in the tick) */
    int32_t *step_tokens, *step_pos, *step_seq;                 /* (max_batch_tokens) */
    int32_t *step_seq_len, *step_block_table, *step_logit_rows; /* (S), (S, max_blocks), (S) */
    sched_request **step_reqs;                                  /* (S) */
    sched_request **decode_candidates;                          /* (max_batch_size) tick.c's fair share */
    uint64_t tick_no;                                           /* ticks that planned a step */
    int32_t *step_chunk;                                        /* (S) tokens fed per sequence */
    bool *step_prefill;                                         /* (S) chunk is prompt/recompute */
    int32_t *step_logit_of;                                     /* (S) logits row, or -1 */
    int32_t *step_hidden_rows;                                  /* (max_prefill_tokens) embeddings' rows */
    int32_t *step_hidden_of, *step_hidden_n;                    /* (S) sequence q's first hidden row, count */
    float *step_hidden;                                         /* (max_prefill_tokens, D) their vectors */
    int32_t n_embd;                                             /* D */
    dev_sample_row *sample_rows;                                /* (S) each logit row's draw, for dev_sample */
    dev_sample_result *sample_results;
    gram_vocab *gram_vocab;           /* the vocabulary's trie for grammar masks */
    uint32_t *step_masks;             /* (max_mask_rows, mask_words) the allowed tokens of grammar rows of a step */
    sched_masks masks;                /* who computes them (masks.c) */
    size_t mask_words, max_mask_rows; /* (S) the tokens it chose */
    int32_t *step_n_draft;            /* (S) draft tokens after sequence q's decode row (its rows: 1 + n_draft) */
    int8_t *step_proposer;            /* (S) the spec_proposer of those drafts; -1: none */
    char *piece;                      /* (2 * piece_cap) decoded text of one token (push, then flush) */
    char *text_work;                  /* (SCHED_MAX_STOP_BYTES + 2 * piece_cap) held text + piece, for stop matching */

    /* speculative decoding (spec_tick.c): the scheduler thread */
    spec_gate gate;
    bool spec_ran[SPEC_N_PROPOSERS];       /* this tick ran that proposer's model (its time is its own) */
    double spec_seconds[SPEC_N_PROPOSERS]; /* how long that model ran this tick */
    int spec_width;                        /* the decode sequences this tick's drafts were planned for */
    double spec_token_s[SPEC_N_PROPOSERS][SPEC_GATE_BUCKETS]; /* spec_draft.c: a drafter model's seconds per draft
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
    sched_spec_counters spec_stats;

    sched_counters stats;
    sched_metrics metrics; /* histograms, observed lock-free (sched_metrics.c) */
    _Atomic int64_t heartbeat_ns;
    /* a step failed with SP_ERR_DEVICE: the message is written once, before the flag
     * (release), by the scheduler thread; readers check the flag (acquire) first */
    char device_fault_msg[256];
    _Atomic bool device_fault;
};

/* Stores the time in s->heartbeat_ns (clock.c; the scheduler thread). */
void sched__heartbeat(sched *s);

/* Wakes the scheduler thread (sched_submit, sched_request_cancel). Takes s->lock. */
void sched__wake(sched *s);

/* Moves everything queued onto the waiting list (scheduler thread, takes s->lock
 * briefly). Returns whether the thread should stop. When idle is set and nothing
 * was queued, first sleeps on the condition variable for at most timeout_s. */
bool sched__queue_take(sched *s, bool idle, double timeout_s);

/* Inserts r into the waiting list in policy order (scheduler thread). */
void sched__waiting_insert(sched *s, sched_request *r);
void sched__waiting_remove(sched *s, sched_request *r);

/* Lowers the queue bounds for r once (admission, or an end while waiting). */
void sched__queue_uncount(sched *s, sched_request *r);

/* Ends r (not running, or already removed from running: blocks are released here)
 * with finish f; for SCHED_FINISH_ERROR, err and msg say why. Notifies, counts, and
 * drops the scheduler's reference. Scheduler thread (or sched_destroy). */
void sched__request_end(sched *s, sched_request *r, sched_finish f, sp_status err, const char *msg);

/* ---- the prefix cache's tiers (kv_tiers.c) ------------------------------------------ */

/* Creates the tiers from s->cfg (none when kv_host_mb is 0 and kv_disk_dir unset) and
 * hooks them to the pool's evictions. Needs s->blocks and s->kv. */
sp_status sched__tiers_init(sched *s);

/* The pool's element format as the device API names it. */
static inline dev_kv_type sched__kv_type(const sched_config *c) {
    static_assert((int)SCHED_KV_Q8_0 == (int)DEV_KV_Q8_0 && (int)SCHED_KV_Q4_0 == (int)DEV_KV_Q4_0,
                  "sched_kv_type follows dev_kv_type");
    return (dev_kv_type)c->kv_type;
}
void sched__tiers_free(sched *s);
/* How many blocks of tokens from block from_block on (below max_blocks) the tiers hold
 * as one run and are worth reloading. No I/O. */
int32_t sched__tiers_match(sched *s, const int32_t *tokens, int32_t from_block, int32_t max_blocks);
/* Writes up to n blocks from the tiers into r's blocks from_block.. (r holds them, the
 * first from_block computed) and registers them; returns how many it wrote. */
int32_t sched__tiers_reload(sched *s, sched_request *r, int32_t from_block, int32_t n);

/* ---- latency targets (slo.c) ---------------------------------------------------------- */

/* r's targets in seconds (its own, else the scheduler's; 0: none). */
double sched__slo_ttft(const sched *s, const sched_request *r);
double sched__slo_tpot(const sched *s, const sched_request *r);
/* A step took `seconds` with prefill_rows prompt rows of its rows (0: decode only): the
 * measured costs the tiers' cost model and the SLO policy read. */
void sched__slo_observe_step(sched *s, double seconds, int64_t prefill_rows, int64_t rows);
/* After a tick's admissions (admitted of them): the admission rate while requests wait. */
void sched__slo_observe_admissions(sched *s, int admitted, double now);
/* Policy slo: how many of budget prefill tokens this tick may take without making a
 * running decode miss its inter-token target (budget itself under other policies). */
int32_t sched__slo_prefill_budget(sched *s, int32_t budget, int32_t decode_rows, double now);
/* The next waiting request to try to admit: the head first, then (policy slo) the
 * shortest feed waiting. NULL: none. */
sched_request *sched__slo_next(const sched *s, bool first);
/* Policy slo, in sched_submit under s->lock: SP_ERR_FULL (naming the target) when the
 * prompts queued ahead and these reqs' own cannot be prefilled within a TTFT target. */
sp_status sched__slo_admission(sched *s, sched_request *const *reqs, int n, int32_t queued, int64_t queued_tokens,
                               int64_t tokens);
/* A generation that ended: counts it against its targets (goodput). completed: it
 * finished (STOP or LENGTH); an error or timeout ended it (never good). Cancellations
 * (the client left) are not counted. */
void sched__slo_finished(sched *s, const sched_request *r, bool completed);

/* One tick: drop what ended, admit, build and run one step, sample. Returns false
 * when there was nothing to run (idle). Scheduler thread. */
bool sched__tick(sched *s);

/* The draw of the token at r->tokens[r->n_tokens + ahead] as dev_sample takes it
 * (draw.c): its sampling parameters, prompt and generated tokens for the penalties
 * (the `ahead` drafts before it counted as accepted), the end-of-generation mask while
 * under min_tokens, logprobs, and the generator state of that position (sample_rng_at).
 * Borrows r's arrays until the step ends. Scheduler thread. */
void sched__sample_row(const sched *s, const sched_request *r, int32_t ahead, dev_sample_row *row);

/* Appends the token dev_sample chose for r to the output (end_tick.c); ends r when it
 * finished. Returns whether r still runs. Scheduler thread. */
bool sched__emit(sched *s, sched_request *r, const dev_sample_result *drawn, double now);

/* Removes running[i] from the running set (keeps the order; running.c). */
void sched__running_remove(sched *s, int i);

/* masks.c: jobs are added and started by the scheduler thread before the step; wait
 * (a model_sample_hook, hence the void *: the sched) returns once every job's masks are
 * written; it is cheap and harmless when nothing was started. */
sp_status sched__masks_init(sched *s, int max_jobs);
void sched__masks_destroy(sched *s);
void sched__masks_add(sched *s, sched_request *r, int32_t n_draft, dev_sample_row *rows, size_t *n_masks);
void sched__masks_start(sched *s);
void sched__masks_wait(void *s);

/* ---- speculative decoding (spec_tick.c) ---------------------------------------------- */

/* The suffix cache and the gate from s->cfg (sched_create); freed by sched__spec_free. */
sp_status sched__spec_init(sched *s);
void sched__spec_free(sched *s);
/* Its counters into out (any thread). */
void sched__spec_stats(const sched *s, sched_stats *out);
/* Drafts for the n decode sequences chosen for a step, within `budget` extra rows: each
 * one's draft tokens go to r->tokens[n_tokens ..) (its KV blocks grown to hold them),
 * their count to n_draft[i] and their proposer to proposer[i] (-1: none). */
void sched__spec_plan(sched *s, sched_request *const *chosen, int n, int32_t budget, int32_t *n_draft,
                      int8_t *proposer);
/* spec_seq.c: grows r's blocks (the model's own pool) for the n_draft positions after its last token
 * while the pool keeps its watermark; returns how many of them r can hold now. */
int32_t sched__spec_reserve(sched *s, sched_request *r, int32_t n_draft);
/* After the step: r's decode row and n_draft draft rows were sampled into results
 * (1 + n_draft, in order). Emits the accepted drafts and the target's token after them,
 * each through sched__emit (which may end r), records acceptance, and gives back the KV
 * blocks past what was accepted. Returns the tokens emitted. */
int32_t sched__spec_verify(sched *s, sched_request *r, int32_t n_draft, int proposer, const dev_sample_result *results,
                           double now);
/* A decode-only step of width sequences at mean depth took seconds and delivered tokens. */
void sched__spec_observe(sched *s, int width, double depth, double seconds, int64_t tokens,
                         const int64_t drafts[SPEC_N_PROPOSERS]);
/* A step with a prefill chunk, which the gate does not measure: the drafter models that ran
 * in its tick are charged their time (spec_gate_charge). */
void sched__spec_charge(sched *s);
/* spec_seq.c: r finished without error: its prompt and output join the suffix cache. */
void sched__spec_remember(sched *s, const sched_request *r);
/* spec_seq.c: r ends or is preempted: its draft model blocks go back. */
void sched__spec_release(sched *s, sched_request *r);

/* ---- the draft model (spec_draft.c) ----------------------------------------------- */

/* The draft model's KV pool and step arrays, when cfg.draft_model is set (after its
 * vocabulary was checked against the target's), and the slots when self-speculating. */
sp_status sched__draft_init(sched *s);
void sched__draft_free(sched *s);
/* One sequence of a draft model run: what it asks for and what it got. */
typedef struct draft_slot {
    sched_request *r;
    int32_t want;  /* draft tokens it may take */
    int32_t got;   /* draft tokens written after its last token */
    int32_t chunk; /* tokens it feeds in the catch-up step */
    int32_t limit; /* draft tokens it will still draw this tick (0: none) */
} draft_slot;

/* Drafts for slots[0..n) (sequences without a draft yet), up to slot.want tokens each:
 * runs the draft model (catching each sequence up on what it has not seen, then one token
 * at a time, batched across the sequences), or with self the model's own first
 * cfg.self_spec_layers layers on its own KV cache (nothing to catch up), sampling every
 * draft token as the target will (its row, its position's draw). Writes the drafts after each sequence's last
 * token and their count to slot.got (0: none this tick). Uses the step arrays: call
 * before the step is built. */
void sched__draft_propose(sched *s, draft_slot *slots, int n, bool self);
/* After verification: the draft model's K/V is valid up to n_valid tokens of r. */
void sched__draft_rollback(sched *s, sched_request *r, int32_t n_valid);

#endif

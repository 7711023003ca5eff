/* sched_internal.h: what the scheduler's files share and nothing outside scheduler/
 * (and its unit tests) may use: the request and scheduler structs, the admission/
 * preemption policies, stop-string matching and the functions of each file, which
 * tools/calls.txt orders (leaves first). struct sched is its immutable core, the thread's
 * running list and step arrays, and five parts, each in its own header under state/
 * with its owner threads: queue and admission (queue.h), the KV cache with its block
 * manager and tiers (kv.h), speculation (speculation.h), grammar masks (grammar.h) and
 * the meters (meter.h). Headers under state/ are scheduler/'s own (make layers).
 *
 * DESIGN (threads). A struct field belongs to one of three owners, named at the field:
 *   - immutable: written once before the object is shared, then read by anyone;
 *   - under a lock: the request's `lock` (its output and notify callback) or the
 *     scheduler's `queue.lock` (the queue and the shutdown flags);
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

#include "kvcache/kvcache.h"
#include "model/model.h"
#include "scheduler/sched.h"
#include "scheduler/spec/spec.h"
/* struct sched's parts, one header each, naming their owner threads */
#include "scheduler/state/grammar.h"
#include "scheduler/state/kv.h"
#include "scheduler/state/meter.h"
#include "scheduler/state/queue.h"
#include "scheduler/state/speculation.h"

/* tick.c's fair share of decode rows: while several submissions decode, one adds at most
 * this many rows per step, or as many as the largest other one. */
enum { SCHED_FAIR_DECODE_ROWS = 2 };

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
    SCHED_SEQ_QUEUED,  /* in the scheduler's queue (under queue.lock) */
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
    uint64_t salt_root;            /* kv_chain_root of params.cache_salt (KV_CHAIN_ROOT: none; the salt is not kept) */
    uint64_t suffix_tenant;        /* whose text its suffix cache shares: params.tenant, salted by its cache_salt */

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
    gram_state *gram;     /* its place in params.grammar (NULL: none); advanced over every emitted token */
    uint8_t mask_outcome; /* masks.c: its masks of the last step (gram_mask_status; GRAM_MASK_OK when complete) */
    int32_t mask_late;    /* masks.c: steps in a row its mask was late (dropped from the step) */
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
/* The chain root of r's prefix cache blocks (its kv.root): its cache_salt's root, with
 * per_tenant (prefix_cache_keyed) mixed with its tenant when it has one. */
uint64_t sched__request_root(const sched_request *r, bool per_tenant);

/* Makes room for n more bytes of text (NUL included); call with the lock held. */
sp_status sched__output_reserve_text(sched_request *r, size_t n);

/* ---- embeddings (embed.c) ------------------------------------------------------------ */

/* An embedding's pool and output vector for a model of width n_embd, zeroed (sched_submit,
 * after sched__request_prepare; again on a retry). Nothing for a generation. */
sp_status sched__embed_prepare(sched_request *r, int32_t n_embd);
/* Adds the final hidden states of n_rows prompt positions (rows (n_rows, D), the ones
 * sched__pool_rows asked for) to an embedding's pool (D), which starts zeroed: mean sums
 * them, last and cls keep their one row. Pure. */
void sched__pool_add(sp_pooling pooling, double *pool, const float *rows, int32_t n_rows, int32_t dim);
/* The pool of a prompt of n_prompt tokens as the finished vector into out (D): mean
 * divides, then L2 normalization (a zero vector stays zero). Pure. */
void sched__pool_finish(sp_pooling pooling, const double *pool, int32_t n_prompt, int32_t dim, float *out);
/* The hidden rows an embedding's chunk (prompt positions first..first+chunk-1 of
 * n_prompt) wants: how many, and in *first_row the position of the first (they are
 * consecutive). Pure. */
int32_t sched__pool_rows(sp_pooling pooling, int32_t first, int32_t chunk, int32_t n_prompt, int32_t *first_row);
/* After a step computed r's chunk (its n_rows hidden rows in hidden, n_computed already
 * advanced): pools them; once the whole prompt is in, publishes the vector and ends r
 * (STOP, removed from running, its blocks back to the pool). Returns whether r still
 * runs. */
bool sched__embed_step(sched *s, sched_request *r, const float *hidden, int32_t n_rows);

/* ---- policies (policy.c) ------------------------------------------------------------- */

/* true when a should be admitted before b (and so preempted after b). */
bool sched__policy_before(sp_policy kind, const sched_request *a, const sched_request *b);
/* Index of the sequence to preempt among running (n >= 1): the one admitted last by
 * the policy's order (the youngest, or the lowest priority then youngest). */
int sched__policy_victim(sp_policy kind, sched_request *const *running, int n, uint64_t tick);
/* Ticks after its return during which a preempted sequence is not preempted again while
 * another can be. */
enum { SCHED_RESUME_IMMUNITY_TICKS = 32 };

/* ---- the scheduler ---------------------------------------------------------------- */

struct sched {
    /* immutable after sched_create */
    sched_config cfg; /* max_seq_len resolved */
    model *m;
    const tok_vocab *vocab;
    int32_t n_vocab;
    int32_t n_embd;             /* D */
    int32_t max_blocks_per_seq; /* block table row width: ceil(max_seq_len / B) */
    int32_t *eog_ids;           /* (n_eog) end-of-generation ids of the vocabulary */
    int n_eog;
    size_t piece_cap; /* bytes one decoder push or flush may write */

    sched_queue_state queue;     /* queue and admission (state/queue.h) */
    sched_kv_state cache;        /* KV pool, blocks, prefix cache and tiers (state/kv.h) */
    sched_spec_state spec;       /* speculative decoding (state/speculation.h) */
    sched_grammar_state grammar; /* constrained output's masks (state/grammar.h) */
    sched_meter meter;           /* counters, histograms, step costs, heartbeat (state/meter.h) */

    /* the scheduler thread (see the file comment) */
    pthread_t thread;
    bool started;
    sched_request **running; /* (max_batch_size) in admission order (running.c) */
    int n_running;
    uint64_t tick_no; /* ticks that planned a step */

    /* per-step arrays, sized once (no allocation in the tick): the scheduler thread */
    int32_t *step_tokens, *step_pos, *step_seq;                 /* (max_batch_tokens) */
    int32_t *step_seq_len, *step_block_table, *step_logit_rows; /* (S), (S, max_blocks), (S) */
    sched_request **step_reqs;                                  /* (S) */
    sched_request **decode_candidates;                          /* (max_batch_size) tick.c's fair share */
    int32_t *step_chunk;                                        /* (S) tokens fed per sequence */
    bool *step_prefill;                                         /* (S) chunk is prompt/recompute */
    int32_t *step_logit_of;                                     /* (S) logits row, or -1 */
    int32_t *step_hidden_rows;                                  /* (max_prefill_tokens) embeddings' rows */
    int32_t *step_hidden_of, *step_hidden_n;                    /* (S) sequence q's first hidden row, count */
    float *step_hidden;                                         /* (max_prefill_tokens, D) their vectors */
    dev_sample_row *sample_rows;                                /* (S) each logit row's draw, for dev_sample */
    dev_sample_result *sample_results;                          /* (S) the tokens it chose */
    int32_t *step_n_draft; /* (S) draft tokens after sequence q's decode row (its rows: 1 + n_draft) */
    int8_t *step_proposer; /* (S) the sched_spec_proposer of those drafts; -1: none */
    char *piece;           /* (2 * piece_cap) decoded text of one token (push, then flush) */
    char *text_work;       /* (SCHED_MAX_STOP_BYTES + 2 * piece_cap) held text + piece, for stop matching */
};

/* The functions each file shares, leaves first (tools/calls.txt has the order). */

/* ---- the clock (clock.c); sched_now is in sched.h -------------------------------- */

/* Stores the time in s->meter.heartbeat_ns (the scheduler thread). */
void sched__heartbeat(sched *s);

/* ---- the running list (running.c) ------------------------------------------------ */

/* Removes running[i] from the running set (keeps the order). */
void sched__running_remove(sched *s, int i);

/* ---- the row sampler (draw.c) ---------------------------------------------------- */

/* The draw of the token at r->tokens[r->n_tokens + ahead] as dev_sample takes it:
 * its sampling parameters, prompt and generated tokens for the penalties
 * (the `ahead` drafts before it counted as accepted), the end-of-generation mask while
 * under min_tokens, logprobs, and the generator state of that position (sample_rng_at).
 * Borrows r's arrays until the step ends. Scheduler thread. */
void sched__sample_row(const sched *s, const sched_request *r, int32_t ahead, dev_sample_row *row);

/* ---- the queue and the waiting list (queue.c) ------------------------------------ */

/* Wakes the scheduler thread (sched_submit, sched_request_cancel). Takes s->queue.lock. */
void sched__wake(sched *s);

/* Moves everything queued onto the waiting list (scheduler thread, takes s->queue.lock
 * briefly). Returns whether the thread should stop. When idle is set and nothing
 * was queued, first sleeps on the condition variable for at most timeout_s. */
bool sched__queue_take(sched *s, bool idle, double timeout_s);

/* Inserts r into the waiting list in policy order (scheduler thread). */
void sched__waiting_insert(sched *s, sched_request *r);
void sched__waiting_remove(sched *s, sched_request *r);

/* Lowers the queue bounds for r once (admission, or an end while waiting). */
void sched__queue_uncount(sched *s, sched_request *r);

/* ---- the prefix cache's tiers (kv_tiers.c) ------------------------------------------ */

/* Creates the tiers from s->cfg (none when kv_host_mb is 0 and kv_disk_dir unset) and
 * hooks them to the pool's evictions. Needs s->cache.blocks and s->cache.pool. */
sp_status sched__tiers_init(sched *s);

/* The pool's element format as the device API names it. */
static inline sp_kv_type sched__kv_type(const sched_config *c) {
    return c->kv_type;
}
void sched__tiers_free(sched *s);
/* How many blocks of tokens from block from_block on (below max_blocks) the tiers hold
 * as one run of the chain from root (the sequence's kv.root) and are worth reloading.
 * No I/O. */
int32_t sched__tiers_match(sched *s, uint64_t root, const int32_t *tokens, int32_t from_block, int32_t max_blocks);
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
/* Policy slo, in sched_submit under s->queue.lock: SP_ERR_FULL (naming the target) when the
 * prompts queued ahead and these reqs' own cannot be prefilled within a TTFT target. */
sp_status sched__slo_admission(sched *s, sched_request *const *reqs, int n, int32_t queued, int64_t queued_tokens,
                               int64_t tokens);
/* A generation that ended: counts it against its targets (goodput). completed: it
 * finished (STOP or LENGTH); an error or timeout ended it (never good). Cancellations
 * (the client left) are not counted. */
void sched__slo_finished(sched *s, const sched_request *r, bool completed);

/* ---- grammar masks off the critical path (masks.c) ------------------------------- */

/* Jobs are added and started by the scheduler thread before the step; wait
 * (a model_sample_hook, hence the void *: the sched) returns once every job's masks are
 * written, or SCHED_MASK_WAIT_MS after it began, the late masks then cancelled (their
 * requests' mask_outcome says so); it is cheap and harmless when nothing was started. */
sp_status sched__masks_init(sched *s, int max_jobs);
void sched__masks_destroy(sched *s);
void sched__masks_add(sched *s, sched_request *r, int32_t n_draft, dev_sample_row *rows, size_t *n_masks);
void sched__masks_start(sched *s);
void sched__masks_wait(void *s);

/* How long the step waits for the masks once it needs them: SCHED_MASK_WAIT_MS, doubled for
 * each step in a row a sequence's mask was late, up to SCHED_MASK_WAIT_MAX_MS (below the
 * 50 ms a constraint may add to another client's inter-token gap); and how many steps in a
 * row a sequence's mask may be late before the sequence ends with an error (masks.c, LATE). */
#define SCHED_MASK_WAIT_MS     10
#define SCHED_MASK_WAIT_MAX_MS 40
enum { SCHED_MASK_LATE_STEPS = 8 };

/* ---- speculation's per-sequence bookkeeping (spec_seq.c) ------------------------- */

/* Grows r's blocks (the model's own pool) for the n_draft positions after its last token
 * while the pool keeps its watermark; returns how many of them r can hold now. */
int32_t sched__spec_reserve(sched *s, sched_request *r, int32_t n_draft);
/* r ends or is preempted: its draft model blocks go back. */
void sched__spec_release(sched *s, sched_request *r);
/* r finished without error: its prompt and output join the suffix cache. */
void sched__spec_remember(sched *s, const sched_request *r);

/* ---- the end of a token and of a request (end_tick.c) ---------------------------- */

/* Appends the token dev_sample chose for r to the output; ends r when it
 * finished. Returns whether r still runs. Scheduler thread. */
bool sched__emit(sched *s, sched_request *r, const dev_sample_result *drawn, double now);

/* Ends r (not running, or already removed from running: blocks are released here)
 * with finish f; for SCHED_FINISH_ERROR, err and msg say why. Notifies, counts, and
 * drops the scheduler's reference. Scheduler thread (or sched_destroy). */
void sched__request_end(sched *s, sched_request *r, sched_finish f, sp_status err, const char *msg);

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

/* After the step: r's decode row and n_draft draft rows were sampled into results
 * (1 + n_draft, in order). Emits the accepted drafts and the target's token after them,
 * each through sched__emit (which may end r), records acceptance, and gives back the KV
 * blocks past what was accepted. Returns the tokens emitted. */
int32_t sched__spec_verify(sched *s, sched_request *r, int32_t n_draft, int proposer, const dev_sample_result *results,
                           double now);
/* A decode-only step of width sequences at mean depth took seconds and delivered tokens. */
void sched__spec_observe(sched *s, int width, double depth, double seconds, int64_t tokens,
                         const int64_t drafts[SCHED_SPEC_PROPOSERS]);
/* A step with a prefill chunk, which the gate does not measure: the drafter models that ran
 * in its tick are charged their time (spec_gate_charge). */
void sched__spec_charge(sched *s);

/* ---- the tick (tick.c) ----------------------------------------------------------- */

/* One tick: drop what ended, admit, build and run one step, sample. Returns false
 * when there was nothing to run (idle). Scheduler thread. */
bool sched__tick(sched *s);

#endif

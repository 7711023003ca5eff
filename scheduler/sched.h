/* sched.h: the scheduler: a bounded queue in front of one thread that owns the model,
 * the device and the paged KV cache, and turns accepted requests into batched steps
 * (chunked prefill and decode mixed in one device step per tick).
 *
 * DESIGN (threads). Exactly two things cross between the HTTP threads and the
 * scheduler thread, both through a sched_request:
 *   - in:  sched_submit() hands requests to the bounded queue (any thread);
 *          sched_request_cancel() sets the request's atomic cancel flag (any thread).
 *   - out: the request's output (sched_output): text, tokens, finish, usage. The
 *          scheduler appends under the request's lock at the end of each tick and then
 *          calls the request's notify callback (still under that lock); the HTTP side
 *          reads under the same lock (sched_request_lock) and copies what it needs.
 * The scheduler never touches a socket; the HTTP side never touches the model, the
 * device or the KV cache. A request is reference counted: the creator holds one
 * reference, sched_submit takes one for the scheduler, each side releases its own.
 *
 * Every accepted request gets an end: output.done with finish STOP or LENGTH, or
 * CANCELLED (its cancel flag was seen), or ERROR with a status and a message
 * (timeout, shutdown, a device failure). Nothing is dropped silently.
 */
#ifndef SP_SCHED_H
#define SP_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/kinds.h"
#include "common/status.h"
#include "grammar/grammar.h"
#include "kvcache/kvcache.h"
#include "sample/sample.h"

/* The model the scheduler thread owns (model/model.h); only a pointer crosses here,
 * so the HTTP side that includes this header never sees the device API. */
typedef struct model model;

typedef struct sched sched;
typedef struct sched_request sched_request;

/* Every knob of the scheduler; sched_config_default() suits the default model on a
 * small CPU machine. */
typedef struct sched_config {
    int64_t kv_cache_mb;        /* KV pool budget in MiB (devices without memory of their own: the CPU) */
    double gpu_memory_fraction; /* on a GPU: the KV pool takes this fraction of the memory free after load */
    int block_size;             /* tokens per KV block */
    int max_batch_size;         /* sequences running at once (rows of a decode step) */
    int max_batch_tokens;       /* tokens in one device step */
    int max_prefill_tokens;     /* prompt tokens prefilled per tick, shared by prefilling sequences */
    int queue_max_requests;     /* requests accepted but not yet running */
    int64_t queue_max_tokens;   /* their prompt tokens */
    sp_policy policy;           /* admission and preemption order */
    double ttft_slo_ms;         /* time-to-first-token target of every request (0: none); goodput counts it */
    double tpot_slo_ms;         /* mean time-per-output-token target (0: none) */
    double request_timeout_s;   /* default deadline from arrival; 0 = none */
    int32_t max_seq_len;        /* context limit of one sequence (prompt + generated) */
    double kv_watermark;        /* fraction of blocks kept free at admission for growth */
    bool prefix_cache;          /* share computed full KV blocks between requests with the same prefix */
    bool prefix_cache_keyed;    /* --prefix-cache-scope key: a tenant's prefixes are shared only within it */
    sp_kv_type kv_type;         /* the pool's element format; the draft model's stays F16 */
    /* the prefix cache's lower tiers (kv_tiers.c): blocks the pool evicts wait there */
    int64_t kv_host_mb;      /* host-memory tier in MiB; 0: none */
    const char *kv_disk_dir; /* disk tier's directory (borrowed until sched_destroy); NULL: none */
    double kv_disk_gb;       /* its budget in GB */
    bool kv_disk_persist;    /* the disk tier survives restarts (files carry the model's sha256) */
    const char *model_path;  /* kv_disk_persist: the model file (borrowed) */
    /* speculative decoding (scheduler/spec/): proposers the gate may use; none: off */
    bool spec_ngram;           /* prompt lookup over a sequence's own tokens */
    bool spec_suffix;          /* the suffix cache shared by requests of one tenant */
    int spec_k;                /* most draft tokens per sequence and step, 1..SCHED_SPEC_MAX_K */
    int spec_ngram_min;        /* shortest n-gram prompt lookup matches (>= 1) */
    int spec_ngram_max;        /* longest (>= spec_ngram_min, <= 64) */
    int64_t spec_suffix_bytes; /* the suffix cache's budget (>= 64 KiB when spec_suffix) */
    bool spec_draft;           /* a smaller model of the same vocabulary drafts (draft_model) */
    model *draft_model;        /* borrowed, on the same device; must outlive the scheduler */
    int64_t draft_kv_cache_mb; /* the draft model's own KV pool (CPU) */
    int self_spec_layers;      /* > 0: the model's first this many layers draft (self-speculative) */
    bool spec_gate;            /* measure and weigh (the gate, the drafter models' costs); false: every chosen
                                  proposer drafts whenever it has a draft (tests, measuring a proposer alone) */
} sched_config;

/* The most draft tokens a sequence proposes in one step (--spec-k's upper bound). */
enum { SCHED_SPEC_MAX_K = 16 };
/* The speculative proposers, as sched_stats indexes them (names: sched_spec_proposer_name)
 * and scheduler/spec/ numbers its estimates. */
typedef enum sched_spec_proposer {
    SCHED_SPEC_NGRAM,  /* prompt lookup over a sequence's own tokens */
    SCHED_SPEC_SUFFIX, /* the suffix cache shared across requests */
    SCHED_SPEC_DRAFT,  /* the draft model */
    SCHED_SPEC_SELF,   /* the model's first layers (self-speculative) */
    SCHED_SPEC_PROPOSERS
} sched_spec_proposer;
const char *sched_spec_proposer_name(int proposer);

sched_config sched_config_default(void);
/* Checks ranges and consistency; SP_ERR_INVALID_ARG naming the field. */
sp_status sched_config_validate(const sched_config *c);

/* What one request asks for. Filled by the HTTP side before sched_request_create. */
typedef struct sched_request_params {
    const int32_t *prompt; /* (n_prompt) token ids; copied by sched_request_create */
    int32_t n_prompt;
    /* an embedding (not NONE, common/kinds.h's sp_pooling: how its prompt's final hidden
     * states, after the output norm, become one vector before it is L2-normalized): the
     * prompt is only prefilled, every position computed (no prefix cache either way), its
     * vector goes to output.embedding and its KV blocks back to the pool at once;
     * max_tokens must be 0 and the sampling fields are not used */
    sp_pooling pooling;
    int32_t max_tokens;      /* tokens to generate at most (>= 1; 0 for an embedding) */
    int32_t min_tokens;      /* end-of-generation tokens and stop strings are ignored before this */
    bool ignore_eos;         /* keep generating past end-of-generation tokens */
    const char *const *stop; /* (n_stop) stop strings, copied; matched across token boundaries */
    int n_stop;
    int top_logprobs;   /* -1: no logprobs; 0..SCHED_MAX_TOP_LOGPROBS: chosen token's + that many alternatives */
    int priority;       /* lower runs first under the priority policy */
    double timeout_s;   /* <= 0: the scheduler's default */
    double ttft_slo_ms; /* its latency targets; <= 0: the scheduler's (ttft_slo_ms, tpot_slo_ms) */
    double tpot_slo_ms;
    sample_params sampling; /* logit_bias array is copied */
    bool no_speculation;    /* never draft for this request (its output is the same either way) */
    /* a thinking budget: after max_reasoning_tokens tokens inside <think> (0: no budget), the
     * next tokens are think_close's (copied; the tokenized "</think>"), then the answer follows */
    int32_t max_reasoning_tokens;
    const int32_t *think_close;
    int32_t n_think_close;
    bool thinking_at_start; /* the prompt ends inside <think> */
    gram_grammar *grammar;  /* NULL: none; else every token is one the grammar allows, and the request ends
                               when the grammar is complete (sched_request_create takes a reference) */
    uint64_t tenant;        /* who may share its text in the suffix cache (an API key's hash; 0: none) and, with
                               prefix_cache_keyed, its prefix cache blocks */
    /* vLLM's cache_salt (NULL or cache_salt_len 0: none; hashed by sched_request_create, not kept): the
     * request shares prefix cache blocks and suffix cache text only with requests of the same salt (and
     * tenant, where the tenant scopes them) */
    const char *cache_salt;
    size_t cache_salt_len;
} sched_request_params;

enum { SCHED_MAX_STOP = 16, SCHED_MAX_STOP_BYTES = 256, SCHED_MAX_TOP_LOGPROBS = 20 };
enum { SCHED_MAX_CACHE_SALT_BYTES = 1024 }; /* params.cache_salt's longest */

typedef enum sched_finish {
    SCHED_FINISH_NONE,      /* still running */
    SCHED_FINISH_STOP,      /* end-of-generation token or a stop string */
    SCHED_FINISH_LENGTH,    /* max_tokens or the context limit */
    SCHED_FINISH_CANCELLED, /* the cancel flag was seen (client gone) */
    SCHED_FINISH_ERROR      /* output.error and output.error_message say why */
} sched_finish;

/* One generated token, as the HTTP side renders logprobs. */
typedef struct sched_token {
    int32_t id;
    float logprob; /* log-probability under the model's distribution (raw logits); 0 when not asked */
} sched_token;

typedef struct sched_timings {
    double arrival;     /* CLOCK_MONOTONIC seconds at sched_request_create */
    double admitted;    /* first admitted to run (0 until then) */
    double first_token; /* first generated token (0 until then) */
    double finished;    /* done (0 until then) */
    double prefill_s;   /* seconds of steps that carried this request's prompt */
    double decode_s;    /* seconds of steps that carried its decode rows */
} sched_timings;

/* A request's results. Written only by the scheduler thread, read by anyone holding
 * the request's lock; every field only grows until done, then nothing changes. */
typedef struct sched_output {
    char *text; /* (text_len) committed completion text, valid UTF-8; stop strings and
                 * end-of-generation tokens are not part of it */
    size_t text_len;
    sched_token *tokens; /* (n_tokens) generated tokens whose text is committed or held */
    int32_t n_tokens;
    sched_token *top; /* (n_tokens, top_logprobs) alternatives, most likely first */
    int top_logprobs; /* alternatives per token (params.top_logprobs, or 0) */
    int32_t prompt_tokens;
    int32_t cached_tokens;     /* prompt tokens served from the prefix cache at admission */
    int32_t completion_tokens; /* tokens sampled, end-of-generation included */
    int32_t prefilled;         /* prompt tokens computed so far (progress of a long prefill) */
    int32_t preemptions;       /* times this request was preempted and recomputed */
    int32_t stop_matched;      /* finished by a stop string: 1 + its index in params.stop; else 0 */
    float *embedding;          /* an embedding, finished with STOP: (n_embd) its pooled, L2-normalized vector */
    int32_t n_embd;
    bool done;
    sched_finish finish;
    sp_status error;         /* SCHED_FINISH_ERROR: what kind */
    char error_message[256]; /* SCHED_FINISH_ERROR: what happened */
    sched_timings timings;
} sched_output;

/* Called by the scheduler thread, with the request's lock held, after it appended to
 * the output (or finished it). Must be quick and must not lock the request. */
typedef void (*sched_notify_fn)(void *arg);

/* Copies params (prompt, stop strings, logit bias) into a new request with one
 * reference for the caller. Does not validate against the model (sched_submit does).
 * Caller owns *out; release with sched_request_release. */
sp_status sched_request_create(const sched_request_params *params, sched_request **out);
void sched_request_retain(sched_request *r);
void sched_request_release(sched_request *r);

/* Sets (or, with fn NULL, clears) the notify callback; takes the request's lock.
 * After clearing returns, fn is never called again. */
void sched_request_set_notify(sched_request *r, sched_notify_fn fn, void *arg);

/* Asks the scheduler to end the request (CANCELLED) and free its KV blocks within a
 * tick. Any thread; idempotent. */
void sched_request_cancel(sched_request *r);

/* The output, to read while holding the request's lock. */
void sched_request_lock(sched_request *r);
void sched_request_unlock(sched_request *r);
const sched_output *sched_request_output(const sched_request *r);

/* Operational counters, read without locks (each value is atomic on its own). */
typedef struct sched_stats {
    int64_t submitted;
    int64_t rejected_queue_requests; /* queue full: request count */
    int64_t rejected_queue_tokens;   /* queue full: prompt tokens */
    int64_t rejected_shutdown;
    int64_t rejected_invalid; /* prompt + max_tokens beyond the context or the KV pool */
    int64_t finished;         /* STOP or LENGTH */
    int64_t cancelled;
    int64_t errors; /* timeouts, shutdown, device */
    int64_t timeouts;
    int64_t preemptions;
    int64_t ticks;
    int64_t prompt_tokens; /* prefilled or served from the prefix cache (recomputation included) */
    int64_t generated_tokens;
    int32_t queued; /* accepted, not yet admitted */
    int64_t queued_tokens;
    int32_t running;        /* admitted sequences (prefilling or decoding) */
    int32_t swapped;        /* preempted sequences waiting to come back */
    int32_t kv_blocks_used; /* held by a running sequence */
    int32_t kv_blocks_total;
    int32_t kv_blocks_cached;      /* in the prefix cache (held or not) */
    int64_t kv_bytes_per_token;    /* K and V of one token over every layer, in the pool's element type */
    int64_t kv_bytes_per_sequence; /* the blocks of one sequence of the whole context (max_seq_len) */
    int64_t prefix_query_tokens;   /* tokens of admitted feeds (prefix cache on) */
    int64_t prefix_hit_tokens;     /* of those, served from the cache (its lower tiers included) */
    int64_t tier_reloaded_tokens;  /* of those, reloaded from the host or disk tier */
    int64_t swap_resumes;          /* preempted sequences that came back with blocks from the cache */
    kvt_stats tiers;               /* the tiers' sizes and counters */
    /* latency targets (slo.c): requests that finished with a target, those that met all of theirs */
    int64_t slo_requests, slo_goodput;
    int64_t slo_rejected;      /* refused at submission (policy slo): their TTFT target could not be met */
    int64_t slo_prefill_holds; /* ticks whose new prefill was held back for a decode's inter-token target */
    /* speculative decoding, per proposer (SCHED_SPEC_NGRAM, SCHED_SPEC_SUFFIX) */
    int64_t spec_proposed[SCHED_SPEC_PROPOSERS]; /* draft tokens put in steps */
    int64_t spec_accepted[SCHED_SPEC_PROPOSERS]; /* of those, accepted */
    int64_t spec_drafts[SCHED_SPEC_PROPOSERS];   /* drafts (runs of draft tokens) verified */
    int64_t spec_switches[SCHED_SPEC_PROPOSERS]; /* the gate turned it on or off */
    bool spec_enabled[SCHED_SPEC_PROPOSERS];     /* the gate's verdict for the last step's width */
    int64_t spec_accepted_at[SCHED_SPEC_MAX_K];  /* drafts whose token at position i was accepted */
    int64_t spec_suffix_bytes;                   /* held by the suffix cache */
} sched_stats;

/* Creates the scheduler for m with its KV pool (sized from config->kv_cache_mb, or on a
 * GPU from config->gpu_memory_fraction of the memory free once the model is loaded).
 * m is borrowed until sched_destroy and from sched_start on belongs to the scheduler
 * thread. Caller owns *out; free with sched_destroy. */
sp_status sched_create(const sched_config *config, model *m, sched **out);

/* Starts the scheduler thread. */
sp_status sched_start(sched *s);

/* Queues n requests as one unit (all or none: the n choices of one HTTP request).
 * Takes a reference to each on success. Errors, with a message naming the limit:
 *   SP_ERR_RANGE       prompt + max_tokens beyond max_seq_len, or more KV than the pool holds
 *   SP_ERR_INVALID_ARG an empty prompt, a token id outside the vocabulary
 *   SP_ERR_FULL        the queue is at queue_max_requests or queue_max_tokens
 *   SP_ERR_UNAVAILABLE the scheduler is shutting down
 * Any thread. */
sp_status sched_submit(sched *s, sched_request *const *reqs, int n);

/* Stops accepting (sched_submit gives SP_ERR_UNAVAILABLE). Any thread. */
void sched_begin_shutdown(sched *s);

/* Ends every unfinished request with an ERROR (SP_ERR_UNAVAILABLE, "the server is
 * shutting down"), joins the thread and frees the scheduler and its KV pool (not the
 * model). */
void sched_destroy(sched *s);

void sched_get_stats(const sched *s, sched_stats *out);
const sched_config *sched_get_config(const sched *s);
/* The vocabulary's trie the grammar masks walk: immutable once the scheduler exists, so
 * any thread may read it (the server prepares new grammars' masks with it). */
const gram_vocab *sched_grammar_vocab(const sched *s);

/* Seconds since the scheduler thread last began a tick or woke up idle (liveness). */
double sched_seconds_since_heartbeat(const sched *s);

/* Whether a step failed with a device fault (SP_ERR_DEVICE: the GPU's context is
 * unusable; every later step fails too). When so, the reason goes into why. Any
 * thread; never waits. */
bool sched_device_fault(const sched *s, char *why, size_t cap);

/* CLOCK_MONOTONIC in seconds: the clock of sched_timings. */
double sched_now(void);

/* ---- histograms (sched_metrics.c) -------------------------------------------------- */

/* The scheduler's histograms; sched_metrics.c says where each is observed. */
typedef enum sched_hist_id {
    SCHED_HIST_TTFT,            /* seconds from arrival to the first token (finished requests) */
    SCHED_HIST_INTER_TOKEN,     /* seconds between two tokens of one sequence (every token after the first) */
    SCHED_HIST_E2E,             /* seconds from arrival to the end (finished requests) */
    SCHED_HIST_QUEUE,           /* seconds from arrival to the first admission (admitted requests) */
    SCHED_HIST_PREFILL,         /* seconds of steps that carried the request's prompt (finished requests) */
    SCHED_HIST_DECODE,          /* seconds of steps that carried its decode rows (finished requests) */
    SCHED_HIST_TICK,            /* seconds of one tick that ran a step: plan, step, sampling */
    SCHED_HIST_TOKENS_PER_TICK, /* tokens of that step (prefill and decode rows) */
    SCHED_HIST_COUNT
} sched_hist_id;

enum { SCHED_HIST_MAX_BOUNDS = 24 };

/* One histogram as Prometheus renders it. */
typedef struct sched_hist_snapshot {
    const double *bounds; /* (n_bounds) upper bounds, increasing (static storage); +Inf is implied */
    int n_bounds;
    uint64_t buckets[SCHED_HIST_MAX_BOUNDS + 1]; /* cumulative: observations <= bounds[i]; [n_bounds]: all */
    uint64_t count;                              /* == buckets[n_bounds] */
    double sum;
} sched_hist_snapshot;

/* Reads histogram id without locks (each bucket atomic on its own). Any thread. */
void sched_get_histogram(const sched *s, sched_hist_id id, sched_hist_snapshot *out);

#endif

/* spec.h: speculative decoding's parts that know nothing of requests: the proposers
 * (n-gram prompt lookup over a sequence's own tokens, the suffix cache shared across
 * requests) and the gate that measures whether speculation pays. Private to scheduler/:
 * scheduler/spec_tick.c puts drafts into the step and verifies them.
 *
 * How a draft goes through a tick (docs/architecture.md has the picture): a decoding
 * sequence asks the proposers the gate allows for up to k tokens that may follow its
 * last one; its step rows are then its last token and those k drafts, every row with
 * logits. Each row is sampled as if the drafts before it were accepted, with the draw of
 * that row's position (sample_rng_at), so the target's token at a row is exactly the one
 * one-at-a-time decoding would choose. Drafts are accepted while they equal those
 * tokens; the first target token that differs (or the one after the last draft) is
 * appended too. Output is identical with speculation on or off.
 *
 * DESIGN (threads). Everything here belongs to the scheduler thread.
 */
#ifndef SP_SPEC_H
#define SP_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "scheduler/sched.h"

/* The proposers (sched_spec_proposer) and the most drafts a sequence proposes in one
 * step (SCHED_SPEC_MAX_K, --spec-k's upper bound) are scheduler/sched.h's, the numbers
 * its statistics are indexed by; the gate keeps an estimate for each proposer. The draft
 * model's and the self-speculative drafts are made by scheduler/spec_draft.c (they run a
 * model); the others here. */
const char *spec_proposer_name(sched_spec_proposer p); /* "ngram", "suffix", "draft", "self" */

/* ---- n-gram / prompt lookup (spec_ngram.c) -------------------------------------- */

/* Finds the longest n in [ngram_min, ngram_max] such that the last n tokens of
 * tokens[0..n_tokens) occurred earlier in them, takes the latest such occurrence, and
 * copies up to max_draft of the tokens that followed it into draft. Returns how many
 * (0: no match); *match_len gets n. O(n_tokens * ngram_max) at worst. */
int spec_ngram_propose(const int32_t *tokens, int32_t n_tokens, int ngram_min, int ngram_max, int32_t *draft,
                       int max_draft, int *match_len);

/* ---- the suffix cache across requests (spec_suffix.c) ---------------------------- */

/* Token sequences (prompts and outputs of requests that finished without error) of
 * every tenant (an API key; 0 without keys), indexed by their contexts of 2, 4, 8 and 16
 * tokens, each context remembering its most frequent continuation (a majority vote).
 * Bounded in bytes; the least recently used sequences go first. A tenant's proposals
 * come only from its own sequences. */
typedef struct spec_suffix spec_suffix;

/* max_bytes: documents and index together (at least 64 KiB). Caller owns *out. */
sp_status spec_suffix_create(int64_t max_bytes, spec_suffix **out);
void spec_suffix_destroy(spec_suffix *sc);
/* Remembers tokens[0..n) for tenant (copied), evicting the least recently used
 * sequences until it fits. Sequences larger than a quarter of the budget keep only their
 * last quarter; shorter than 3 tokens, nothing. Allocates; O(n) hashing. */
void spec_suffix_add(spec_suffix *sc, uint64_t tenant, const int32_t *tokens, int32_t n);
/* Up to max_draft tokens that followed the longest indexed context equal to the end of
 * tokens[0..n) in tenant's sequences; fewer the shorter the match and the weaker its
 * vote. Returns how many; *match_len (when not NULL) gets the context's length, 0 without
 * a match. A hit makes its sequence the most recently used. Never allocates. */
int spec_suffix_propose(spec_suffix *sc, uint64_t tenant, const int32_t *tokens, int32_t n, int32_t *draft,
                        int max_draft, int *match_len);
int64_t spec_suffix_bytes(const spec_suffix *sc); /* held now: index, slots and tokens */

/* ---- what a draft row costs (spec_cost.c) ---------------------------------------- */

/* A decode step's time as t0 + c * rows, fitted by least squares over recent decode-only
 * steps (exponentially forgotten), so a draft length can weigh what a row costs against
 * what it is expected to deliver: a draft token at position j (accepted with probability
 * p^(j+1) when each is accepted with p) is worth its row while p^(j+1) exceeds the share of
 * a token's time one row takes, c * width / (t0 + c * width). On a CPU where a row is
 * cheap next to a step (few sequences) that allows long drafts; where the step is
 * compute-bound (many sequences) it allows none. The scheduler keeps one fit per width
 * bucket of the gate: a row's cost is not one line over all widths (the amx set's VNNI
 * rows below a full tile cost more each than its tile rows above), but a bucket's own
 * line scatters with the machine's noise, so a row costs at least what one line across
 * the buckets' mean steps says. */
typedef struct spec_cost {
    double n, sx, sy, sxx, sxy; /* decayed sums of rows (x) and seconds (y) */
    double row_share;           /* the last fit's row cost over the mean time per row, the dearer line across
                                   buckets included (0: none yet); a compute-bound fit raises it only to the
                                   line across buckets */
    double cross_share;         /* the same from the line across buckets (spec_cost_share_across; 0: none; at most
                                   0.95) */
} spec_cost;

void spec_cost_observe(spec_cost *c, int rows, double seconds);
/* Sets each bucket's cross_share from the line through the mean step of every bucket
 * with a few steps. Call after observing. A bucket's own line scatters (rows that barely
 * vary, steps +-30% apart on a shared machine), and a slope that comes out low would let
 * through drafts that the steps of other widths already show to be dear. */
void spec_cost_share_across(spec_cost *costs, int n_buckets);
/* The fitted row cost and fixed cost; false while the steps seen cannot tell them apart.
 * A line with no fixed cost above zero is a compute-bound step: each row costs the mean
 * time per row, and no draft pays. A fit takes the dearer of its slope and the line
 * across buckets (but for one sequence, whose own line is sure).
 * Without a fit the row cost is the last fit's share of the mean time per row (steps stop
 * varying when drafting stops: a measured dear row must not be forgotten and tried
 * again), else a prior of a quarter of it: the line across buckets is no guide before a
 * bucket's own steps (on a CPU the second row of a step costs more than the later ones,
 * so the line from one sequence to four overstates a row at four, and agentic sequences
 * at four would never draft). */
bool spec_cost_fit(const spec_cost *c, double *per_row, double *fixed);
/* The longest worthwhile draft for a sequence whose drafts are each accepted with
 * probability p, in a step of `width` decode rows: the largest k such that p^k exceeds
 * the row share (0: none), at most max_k, and at most 2 while no fit prices c's rows
 * now or has before (a guess must not buy k rows for every sequence of a wide batch). */
int spec_cost_draft_len(const spec_cost *c, int width, double p, int max_k);
/* The same for a sequence, except that one none of whose drafts has been verified yet
 * (tried false) drafts at least one token where max_k allows: until then its p knows
 * nothing of it (its bias is 0), and where a row costs more than its class's rate makes
 * worth it the sequence would never draft and never show that its text is copyable
 * (agent loops accept 90% and more). A row per sequence at most. */
int spec_cost_sequence_draft_len(const spec_cost *c, int width, double p, int max_k, bool tried);
/* The same for a drafter model, each of whose draft tokens also costs token_s seconds of
 * its own run (per sequence; 0: not measured yet, taken as SPEC_MODEL_PRIOR of a token's
 * time, a drafter ten times cheaper than the target, so that it runs once and is measured).
 * A drafter as costly as the target drafts nothing. */
enum { SPEC_MODEL_PRIOR_PERCENT = 10 };
#define SPEC_MODEL_PRIOR (SPEC_MODEL_PRIOR_PERCENT / 100.0)
int spec_cost_model_draft_len(const spec_cost *c, int width, double p, int max_k, double token_s);
/* The share of a token's time that drafts of k tokens from such a drafter save, as the
 * model predicts it (0 or less: they lose). */
double spec_cost_model_gain(const spec_cost *c, int width, double p, int k, double token_s);

/* ---- how often a draft is accepted (spec_accept.c) ------------------------------ */

/* The chance that a draft token is accepted, as a logistic model of two things: the class
 * of the draft (its proposer, and the length of the match it came from: a 5-token match
 * in text being copied is accepted far more often than a 2-token one in prose) and the
 * sequence (some copy, some do not). Each class's rate is counted across all sequences
 * (accepted draft tokens against drafts cut by a rejection, decayed over about its last
 * 50 drafts, starting from a prior of 60%); a sequence adds its bias, in log-odds:
 * how much better or worse its own drafts did than their classes' rates predicted. Once
 * other sequences have shown short matches to fail, a sequence whose first drafts came
 * from short matches and were rejected is not written off: its bias barely moves, and
 * when a long match comes up it drafts at that length's rate. Before that (a fresh
 * server) a class with few drafts counted may be rated optimistically (its rate plus one
 * standard error): where the estimate makes no draft worth its row but the optimistic
 * rate makes one token worth it, the scheduler drafts that one token, so a match length
 * is tried before its rate is known. Each trial shrinks the optimism, and a class with
 * 16 trials counted (accepted tokens and rejections) is known: it gets none, so a class
 * near break-even is not tried a token at a time for good. */
enum { SPEC_MATCH_CLASSES = 9 }; /* no match (a drafter model), matches of 1, 2, 3, 4, 5, 6-7, 8-15, 16+ */

typedef struct spec_accept {
    double accepted[SCHED_SPEC_PROPOSERS][SPEC_MATCH_CLASSES]; /* decayed accepted draft tokens */
    double missed[SCHED_SPEC_PROPOSERS][SPEC_MATCH_CLASSES];   /* decayed drafts ended by a rejected token */
} spec_accept;                                                 /* all zero: nothing seen */

/* A draft of n_draft tokens from proposer p, made from a match of match_len tokens (0: a
 * drafter model's), had its first `accepted` tokens accepted. */
void spec_accept_observe(spec_accept *a, sched_spec_proposer p, int match_len, int n_draft, int accepted);
#define SPEC_RATE_MIN 0.02
#define SPEC_RATE_MAX 0.98
/* The chance that a draft token of p from a match of match_len is accepted, for a sequence
 * of that bias (log-odds; 0: an average sequence). optimistic: the class's rate plus one
 * standard error of it while the class is little known (whether to try one token), else
 * its estimate. Within [SPEC_RATE_MIN, SPEC_RATE_MAX]. */
double spec_accept_rate(const spec_accept *a, sched_spec_proposer p, int match_len, double bias, bool optimistic);
#define SPEC_BIAS_MAX 4.0
/* A sequence's bias after that draft: one step of the logistic model's gradient per
 * judged token (each accepted one, and the rejected one), against the class's estimate
 * before the draft is counted. Within [-SPEC_BIAS_MAX, SPEC_BIAS_MAX]. */
double spec_accept_bias_after(const spec_accept *a, sched_spec_proposer p, int match_len, double bias, int n_draft,
                              int accepted);

/* ---- the gate (spec_gate.c) ------------------------------------------------------ */

/* Per batch-width bucket (the decoding sequences of a step: 1, 2-3, 4-7, ... 128+), the
 * gate keeps an EWMA of delivered tokens per second of step time, with its mean
 * deviation, for steps without drafts ("off") and for steps whose drafts came mostly
 * from each proposer ("on"), folded in windows of SPEC_GATE_WINDOW steps. A proposer is
 * switched off in a bucket when off beats it by more than max(5%, the relative
 * deviations of both) in two windows in a row. An off proposer is probed again after a
 * while (it alone may draft until a window of its steps is measured), and a bucket whose
 * drafts never stop re-measures off the same way. The probe interval doubles after each
 * probe that confirms a loss, so a losing proposer costs ever less. Off is measured
 * first in a new bucket. An estimate goes stale when the mean context depth changes more
 * than twofold from where it was measured: a stale loss is probed again within one
 * probe interval from then. The drafter models (draft, self) start off and are probed
 * first: they draft freely only after winning a probe. Only
 * decode-only steps are measured (a prefill chunk's time is not the decode's), but a
 * drafter model's time in the other steps is charged to it (spec_gate_charge). */
enum {
    SPEC_GATE_BUCKETS = 8,
    SPEC_GATE_WINDOW = 4,     /* steps per measurement */
    SPEC_GATE_PROBE_MIN = 32, /* steps before the first probe of an off proposer (or of off) */
    SPEC_GATE_PROBE_MAX = 2048
};

typedef struct spec_gate_slot {
    double rate;  /* EWMA tokens/s (valid when windows > 0) */
    double dev;   /* EWMA |window rate - rate| */
    double depth; /* mean context depth it was measured at */
    int windows;  /* windows folded in (0: unknown) */
    bool stale;   /* measured at another context depth: the next window replaces it */
    /* the window being filled */
    int steps;
    double tokens, seconds, depth_sum;
} spec_gate_slot;

typedef struct spec_gate_bucket {
    spec_gate_slot off;
    spec_gate_slot on[SCHED_SPEC_PROPOSERS];
    bool enabled[SCHED_SPEC_PROPOSERS];       /* the gate's verdict */
    int losses[SCHED_SPEC_PROPOSERS];         /* windows in a row that off won */
    int64_t next_probe[SCHED_SPEC_PROPOSERS]; /* step at which an off proposer is probed */
    int64_t probe_every[SCHED_SPEC_PROPOSERS];
    int64_t next_off_probe; /* step at which off is re-measured while drafts never stop */
    int64_t off_probe_every;
    int64_t steps; /* decode-only steps seen in this bucket */
} spec_gate_bucket;

typedef struct spec_gate {
    bool available[SCHED_SPEC_PROPOSERS]; /* chosen by --speculative */
    spec_gate_bucket buckets[SPEC_GATE_BUCKETS];
    int probing; /* -2: none; -1: off is being measured; else the proposer probed alone */
    int probe_bucket;
    int probe_steps;                        /* steps left before a probe gives up waiting for its window */
    int last_bucket;                        /* of the last planned step (metrics) */
    int64_t switches[SCHED_SPEC_PROPOSERS]; /* verdict changes (metrics) */
} spec_gate;

void spec_gate_init(spec_gate *g, const bool available[SCHED_SPEC_PROPOSERS]);
/* The bucket of a step with `width` decoding sequences. */
int spec_gate_bucket_of(int width);
/* Which proposers may draft in the next step, whose decode rows come from `width`
 * sequences at mean context depth `depth`: allowed[p]. Starts a probe when one is due. */
void spec_gate_plan(spec_gate *g, int width, double depth, bool allowed[SCHED_SPEC_PROPOSERS]);
/* A decode-only step of `width` sequences ran for seconds and delivered tokens;
 * drafts[p]: the draft rows each proposer put in it. */
void spec_gate_observe(spec_gate *g, int width, double depth, double seconds, int64_t tokens,
                       const int64_t drafts[SCHED_SPEC_PROPOSERS]);
/* Seconds a drafter model (p) spent in a step the gate does not measure (one with a
 * prefill chunk): a cost of p all the same, added to p's next window in that bucket, so a
 * drafter whose catch-ups fall among prefills still shows what it costs. */
void spec_gate_charge(spec_gate *g, int width, sched_spec_proposer p, double seconds);
/* The measured rates of the bucket of `width`: *off and *on (p's) in delivered tokens per
 * second, 0 where not measured yet. */
void spec_gate_rates(const spec_gate *g, int width, sched_spec_proposer p, double *off, double *on);
/* Whether p is on in the bucket of the last planned step (metrics). */
bool spec_gate_enabled(const spec_gate *g, sched_spec_proposer p);

#endif

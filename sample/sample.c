/* sample.c: token selection, and the penalties applied to the logits before it.
 *
 * The chain follows llama.cpp's order: top-k, top-p and min-p on the untempered
 * distribution, then temperature, then one draw from a splitmix64 stream seeded per
 * sequence. It runs for every sequence at every step over the whole vocabulary
 * (V = 49,152 for SmolLM2), up to 64 times a tick, so nothing sorts V entries:
 *   - no cut: every token's weight exp((logit - max) / T), then one draw;
 *   - top-k: a k-entry heap picks the candidates;
 *   - min-p alone: one pass gathers the tokens above a logit floor;
 *   - top-p: the weights are summed by bins of logit on the way, which tells the bin
 *     the cut ends in; the bins above it are in, and only that bin's tokens are ranked
 *     (a quickselect steered by mass).
 * The weights come from a 4-lane polynomial exp (relative error below 1e-7, the size
 * of float rounding): once the sort was gone, libm's exp over V took most of the time.
 *
 * Legend: V = vocabulary, n = candidates, k = top-k.
 */
#include "sample/sample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"

/* Weights are summed per block so that a draw scans the block sums and one block, not V. */
enum { WEIGHT_BLOCK = 32 };

sample_params sample_params_default(void) {
    return (sample_params){.temperature = 1.0f,
                           .top_k = 0,
                           .top_p = 1.0f,
                           .min_p = 0.0f,
                           .seed = 0,
                           .presence_penalty = 0.0f,
                           .frequency_penalty = 0.0f,
                           .repetition_penalty = 1.0f,
                           .logit_bias = NULL,
                           .n_logit_bias = 0};
}

sp_status sample_params_validate(const sample_params *p, int32_t n_vocab) {
    if (!isfinite(p->temperature) || p->temperature < 0.0f || p->temperature > 100.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "temperature %g must be between 0 and 100", (double)p->temperature);
    if (p->top_k < 0) return sp_fail(SP_ERR_INVALID_ARG, "top_k %d must not be negative", p->top_k);
    if (!isfinite(p->top_p) || p->top_p <= 0.0f || p->top_p > 1.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "top_p %g must be in (0, 1]", (double)p->top_p);
    if (!isfinite(p->min_p) || p->min_p < 0.0f || p->min_p > 1.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "min_p %g must be in [0, 1]", (double)p->min_p);
    if (!isfinite(p->presence_penalty) || p->presence_penalty < -2.0f || p->presence_penalty > 2.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "presence_penalty %g must be between -2 and 2", (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty) || p->frequency_penalty < -2.0f || p->frequency_penalty > 2.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "frequency_penalty %g must be between -2 and 2",
                       (double)p->frequency_penalty);
    if (!isfinite(p->repetition_penalty) || p->repetition_penalty <= 0.0f || p->repetition_penalty > 2.0f)
        return sp_fail(SP_ERR_INVALID_ARG, "repetition_penalty %g must be in (0, 2]", (double)p->repetition_penalty);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return sp_fail(SP_ERR_INVALID_ARG, "logit_bias: %d entries without an array", p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const sample_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= n_vocab)
            return sp_fail(SP_ERR_INVALID_ARG, "logit_bias: token %d is outside the vocabulary (%d tokens)", b->id,
                           n_vocab);
        if (!isfinite(b->bias) || b->bias < -100.0f || b->bias > 100.0f)
            return sp_fail(SP_ERR_INVALID_ARG, "logit_bias: bias %g for token %d must be between -100 and 100",
                           (double)b->bias, b->id);
    }
    return SP_OK;
}

sp_status sample_state_init(sample_state *s, int32_t n_vocab, uint64_t seed) {
    *s = (sample_state){.rng = seed, .n_vocab = n_vocab};
    if (n_vocab <= 0) return sp_fail(SP_ERR_INVALID_ARG, "sampler: vocabulary size %d must be positive", n_vocab);
    size_t v = (size_t)n_vocab;
    s->candidates = malloc(sizeof *s->candidates * v);
    s->_weights = malloc(sizeof *s->_weights * v);
    s->_block_mass = malloc(sizeof *s->_block_mass * (v / WEIGHT_BLOCK + 1));
    s->_counts = calloc(v, sizeof *s->_counts);
    if (!s->candidates || !s->_weights || !s->_block_mass || !s->_counts) {
        sample_state_free(s);
        return sp_fail(SP_ERR_NOMEM, "sampler: out of memory for a %d-token vocabulary", n_vocab);
    }
    return SP_OK;
}

void sample_state_free(sample_state *s) {
    free(s->candidates);
    free(s->_weights);
    free(s->_block_mass);
    free(s->_counts);
    s->candidates = NULL;
    s->_weights = NULL;
    s->_block_mass = NULL;
    s->_counts = NULL;
}

/* ---- penalties ---------------------------------------------------------------- */

static float repetition_penalize(float logit, float penalty) {
    return logit > 0.0f ? logit / penalty : logit * penalty;
}

void sample_apply_penalties(const sample_params *p, sample_state *s, const int32_t *prompt, int32_t n_prompt,
                            const int32_t *generated, int32_t n_generated, float *logits) {
    int32_t n_vocab = s->n_vocab;
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const sample_logit_bias *b = &p->logit_bias[i];
        SP_ASSERT(b->id >= 0 && b->id < n_vocab);
        logits[b->id] += b->bias;
    }
    /* counts[] is zero on entry; each pass puts back every entry it touched, so the
     * cost follows the token lists, not V */
    int32_t *counts = s->_counts;
    if (p->repetition_penalty != 1.0f) {
        const int32_t *lists[2] = {prompt, generated};
        int32_t lengths[2] = {n_prompt, n_generated};
        for (int l = 0; l < 2; l++)
            for (int32_t i = 0; i < lengths[l]; i++) {
                int32_t id = lists[l][i];
                SP_ASSERT(id >= 0 && id < n_vocab);
                if (counts[id]) continue; /* once per distinct token, however often it occurs */
                counts[id] = 1;
                logits[id] = repetition_penalize(logits[id], p->repetition_penalty);
            }
        for (int l = 0; l < 2; l++)
            for (int32_t i = 0; i < lengths[l]; i++) counts[lists[l][i]] = 0;
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (int32_t i = 0; i < n_generated; i++) {
            SP_ASSERT(generated[i] >= 0 && generated[i] < n_vocab);
            counts[generated[i]]++;
        }
        for (int32_t i = 0; i < n_generated; i++) {
            int32_t id = generated[i];
            if (!counts[id]) continue; /* already penalized at its first occurrence */
            logits[id] -= p->frequency_penalty * (float)counts[id];
            logits[id] -= p->presence_penalty;
            counts[id] = 0;
        }
    }
}

/* ---- maxima, ranking, log-probabilities ------------------------------------------ */

/* The largest non-NaN logit (-inf when there is none). Eight running maxima with a
 * fixed trip count, which the compiler keeps in vector registers: one dependent
 * comparison per entry was 10x slower at V = 49,152. */
static float logits_max(const float *logits, int32_t n) {
    enum { LANES = 8 };
    float lane[LANES];
    for (int j = 0; j < LANES; j++) lane[j] = -INFINITY;
    int32_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) lane[j] = logits[i + j] > lane[j] ? logits[i + j] : lane[j];
    float max = -INFINITY;
    for (; i < n; i++) max = logits[i] > max ? logits[i] : max;
    for (int j = 0; j < LANES; j++) max = lane[j] > max ? lane[j] : max;
    return max;
}

/* Whether any of logits[0..8) is >= floor: a fixed trip count the compiler vectorizes,
 * so that runs of tokens that cannot matter are skipped at a fraction of a cycle each. */
enum { SKIP_CHUNK = 8 };

static bool chunk_reaches(const float *logits, float floor) {
    int any = 0;
    for (int j = 0; j < SKIP_CHUNK; j++) any |= logits[j] >= floor;
    return any;
}

/* Whether logits[i..i + 8) can be skipped: i starts a whole chunk, none reaches floor. */
static bool chunk_skips(const float *logits, int32_t n, int32_t i, float floor) {
    return i % SKIP_CHUNK == 0 && i + SKIP_CHUNK <= n && !chunk_reaches(logits + i, floor);
}

/* The least logit that ranks before a heap's last-ranked entry (bar) when its id is
 * higher: anything above bar, or anything not NaN when bar is NaN. */
static float entry_floor(float bar) {
    return isnan(bar) ? -INFINITY : nextafterf(bar, INFINITY);
}

int32_t sample_argmax(const float *logits, int32_t n_vocab) {
    float max = logits_max(logits, n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) {
        if (chunk_skips(logits, n_vocab, i, max)) {
            i += SKIP_CHUNK - 1;
            continue;
        }
        if (logits[i] == max) return i;
    }
    return 0; /* all NaN */
}

/* Whether token (a, ia) ranks before token (b, ib): larger logit first, the lower id
 * among equals, NaN last. A strict total order, so selections are deterministic. */
static bool ranks_before(float a, int32_t ia, float b, int32_t ib) {
    if (isnan(a) || isnan(b)) return isnan(a) == isnan(b) ? ia < ib : isnan(b);
    if (a != b) return a > b;
    return ia < ib;
}

double sample_logsumexp(const float *logits, int32_t n_vocab) {
    double max = (double)logits_max(logits, n_vocab);
    if (!isfinite(max)) return max; /* -inf: nothing has any probability; +inf: an overflow */
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (!isnan(logits[i])) sum += exp((double)logits[i] - max);
    return max + log(sum);
}

float sample_logprob(const float *logits, int32_t n_vocab, int32_t id) {
    return (float)((double)logits[id] - sample_logsumexp(logits, n_vocab));
}

/* Min-heap on rank over h[0..n): h[0] is the entry ranked last. The logit rides in
 * the logprob field until sample_top_logprobs turns it into a log-probability. */
static void entries_sift_down(sample_logprob_entry *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t last = i, left = 2 * i + 1, right = left + 1;
        if (left < n && ranks_before(h[last].logprob, h[last].id, h[left].logprob, h[left].id)) last = left;
        if (right < n && ranks_before(h[last].logprob, h[last].id, h[right].logprob, h[right].id)) last = right;
        if (last == i) return;
        sample_logprob_entry t = h[i];
        h[i] = h[last];
        h[last] = t;
        i = last;
    }
}

void sample_top_logprobs(const float *logits, int32_t n_vocab, double logsumexp, int k, sample_logprob_entry *out) {
    SP_ASSERT(k >= 0 && k <= n_vocab);
    if (k == 0) return;
    for (int32_t i = 0; i < k; i++) out[i] = (sample_logprob_entry){i, logits[i]};
    for (int32_t i = k / 2 - 1; i >= 0; i--) entries_sift_down(out, k, i);
    /* ids rise, so a token tied with the heap's last is never let in */
    float entry = entry_floor(out[0].logprob);
    for (int32_t i = k; i < n_vocab; i++) {
        if (chunk_skips(logits, n_vocab, i, entry)) {
            i += SKIP_CHUNK - 1;
            continue;
        }
        if (!ranks_before(logits[i], i, out[0].logprob, out[0].id)) continue;
        out[0] = (sample_logprob_entry){i, logits[i]};
        entries_sift_down(out, k, 0);
        entry = entry_floor(out[0].logprob);
    }
    /* heap order to rank order: move the last-ranked to the back, one at a time */
    for (int32_t n = k; n > 1; n--) {
        sample_logprob_entry t = out[0];
        out[0] = out[n - 1];
        out[n - 1] = t;
        entries_sift_down(out, n - 1, 0);
    }
    for (int32_t i = 0; i < k; i++) out[i].logprob = (float)((double)out[i].logprob - logsumexp);
}

/* ---- weights: a vectorized exp, with block sums and bins, and a pick by weight ----- */

/* GCC/Clang vector extensions: 4 lanes is SSE2 or NEON, so the baseline target has it. */
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef uint32_t u32x4 __attribute__((vector_size(16))); /* bit work: wraps, never overflows */

/* exp(x) for x <= 0 within 1e-7 relative (Cephes' expf: Cody-Waite reduction to
 * r in [-ln2/2, ln2/2], a degree-6 polynomial, then 2^n through the exponent bits);
 * 0 below -87, where float exp leaves the normal range, and for -inf and NaN. */
static inline f32x4 exp4(f32x4 x) {
    const f32x4 lowest = {-87.0f, -87.0f, -87.0f, -87.0f};
    i32x4 in_range = x >= lowest; /* false for NaN; lanes out of range compute garbage, then 0 */
    /* adding 1.5 * 2^23 rounds x / ln2 to an integer n held in the low mantissa bits */
    f32x4 shifted = x * 1.44269504088896341f + 12582912.0f;
    f32x4 n = shifted - 12582912.0f;
    u32x4 n_bits = (u32x4)shifted - 0x4B400000u;         /* n, two's complement */
    f32x4 r = x - n * 0.693359375f + n * 2.12194440e-4f; /* x - n ln2, ln2 split for accuracy */
    f32x4 poly = r * 1.9875691500e-4f + 1.3981999507e-3f;
    poly = poly * r + 8.3334519073e-3f;
    poly = poly * r + 4.1665795894e-2f;
    poly = poly * r + 1.6666665459e-1f;
    poly = poly * r + 5.0000001201e-1f;
    poly = poly * r * r + r + 1.0f;
    f32x4 two_n = (f32x4)((n_bits + 127u) << 23); /* n in [-126, 0]: a normal float */
    return (f32x4)((i32x4)(poly * two_n) & in_range);
}

/* Bins for top-p over the whole vocabulary, by how far a logit is below the max:
 * 1/8 nat wide over 32 nats, then one bin for the rest and NaN. Monotone in the logit,
 * so the tokens of the bins above one are exactly the tokens that rank above it. The
 * float is clamped before the conversion (a min, no branch) so it is always in range;
 * block_exp computes the same, lane by lane. */
enum { CUT_BINS_PER_NAT = 8, CUT_BINS = 32 * CUT_BINS_PER_NAT + 1 };

static int32_t cut_bin(float logit, float max) {
    float below = (max - logit) * (float)CUT_BINS_PER_NAT;
    below = below < (float)(CUT_BINS - 1) ? below : (float)(CUT_BINS - 1); /* NaN: the last */
    return (int32_t)below;
}

/* The mass of each bin, summed with the weights, in four copies (one per lane) so that
 * runs of one bin do not wait on each other's additions. Tokens below floor may be left
 * out, four at a time; the bins above it are complete. */
typedef struct cut_bins {
    double mass[4][CUT_BINS];
    float floor;
} cut_bins;

/* w[0..32) = exp((x[0..32) - max) * scale); returns their sum. With bins (scale 1),
 * also adds each weight to its bin (cut_bin, lane by lane). */
static float block_exp(float *w, const float *x, float max, float scale, cut_bins *bins) {
    const f32x4 last_bin = {CUT_BINS - 1, CUT_BINS - 1, CUT_BINS - 1, CUT_BINS - 1};
    f32x4 mass = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int q = 0; q < WEIGHT_BLOCK; q += 4) {
        f32x4 v, e;
        memcpy(&v, x + q, sizeof v);
        e = exp4((v - max) * scale);
        memcpy(w + q, &e, sizeof e);
        mass += e;
        if (!bins) continue;
        i32x4 reach = v >= bins->floor;
        if (!(reach[0] | reach[1] | reach[2] | reach[3])) continue;
        f32x4 below = (max - v) * (float)CUT_BINS_PER_NAT;
        i32x4 inside = below < last_bin; /* false for NaN */
        below = (f32x4)(((i32x4)below & inside) | ((i32x4)last_bin & ~inside));
        i32x4 bin = __builtin_convertvector(below, i32x4);
        for (int lane = 0; lane < 4; lane++) bins->mass[lane][bin[lane]] += (double)e[lane];
    }
    return (mass[0] + mass[1]) + (mass[2] + mass[3]);
}

/* w[i] = exp((x[i] - max) * scale) for i < n (x may be w itself), 0 for NaN, -inf and
 * anything more than 87 below; block_mass[b] = the sum over w[32b .. 32b + 32); bins
 * as in block_exp. Returns the sum of the block masses, added in order. */
static double weights_exp(float *w, const float *x, int32_t n, float max, float scale, float *block_mass,
                          cut_bins *bins) {
    double total = 0.0;
    int32_t b = 0, i = 0;
    for (; i + WEIGHT_BLOCK <= n; i += WEIGHT_BLOCK, b++) {
        block_mass[b] = block_exp(w + i, x + i, max, scale, bins);
        total += (double)block_mass[b];
    }
    if (i < n) { /* the tail, padded with -inf (weight 0, last bin) to a whole block */
        float tail[WEIGHT_BLOCK];
        for (int j = 0; j < WEIGHT_BLOCK; j++) tail[j] = i + j < n ? x[i + j] : -INFINITY;
        block_mass[b] = block_exp(tail, tail, max, scale, bins);
        memcpy(w + i, tail, sizeof *w * (size_t)(n - i));
        total += (double)block_mass[b];
    }
    return total;
}

/* The index that u in [0, 1) lands on, each i with probability w[i] / total: first the
 * block, by the block masses, then the entry, with the rest of u rescaled to the
 * block's own sum of entries, so the two levels agree although they were summed in
 * different orders. Never an index of weight 0. total > 0. */
static int32_t weights_pick(const float *w, int32_t n, const float *block_mass, double total, double u) {
    double target = u * total, end = 0.0, before = 0.0;
    int32_t n_blocks = (n + WEIGHT_BLOCK - 1) / WEIGHT_BLOCK, block = -1;
    for (int32_t b = 0; b < n_blocks; b++) {
        if (block_mass[b] <= 0.0f) continue;
        block = b;
        before = end;
        end += (double)block_mass[b];
        if (target < end) break; /* never true past the end (rounding): the last block with weight */
    }
    SP_ASSERT(block >= 0);
    int32_t lo = block * WEIGHT_BLOCK, hi = lo + WEIGHT_BLOCK < n ? lo + WEIGHT_BLOCK : n;
    double own = 0.0;
    for (int32_t i = lo; i < hi; i++) own += (double)w[i];
    double inside = (target - before) / (double)block_mass[block] * own, running = 0.0;
    int32_t last = -1;
    for (int32_t i = lo; i < hi; i++) {
        if (w[i] <= 0.0f) continue;
        running += (double)w[i];
        last = i;
        if (inside < running) return i;
    }
    return last;
}

/* ---- candidate selection ---------------------------------------------------------- */

static bool candidate_before(sample_candidate a, sample_candidate b) {
    return ranks_before(a.logit, a.id, b.logit, b.id);
}

static int candidate_cmp(const void *a, const void *b) {
    const sample_candidate *x = a, *y = b;
    return candidate_before(*x, *y) ? -1 : candidate_before(*y, *x) ? 1 : 0;
}

static void candidates_swap(sample_candidate *c, int32_t i, int32_t j) {
    sample_candidate t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Min-heap on rank over c[0..n): c[0] is the candidate ranked last. */
static void candidates_sift_down(sample_candidate *c, int32_t n, int32_t i) {
    for (;;) {
        int32_t last = i, left = 2 * i + 1, right = left + 1;
        if (left < n && candidate_before(c[last], c[left])) last = left;
        if (right < n && candidate_before(c[last], c[right])) last = right;
        if (last == i) return;
        candidates_swap(c, i, last);
        i = last;
    }
}

/* c[0..k) = the k tokens ranked first, in heap order. Past the first few hundred
 * tokens nearly every one fails the comparison with the heap's last, eight at a time. */
static void candidates_top_k(const float *logits, int32_t n_vocab, int32_t k, sample_candidate *c) {
    for (int32_t i = 0; i < k; i++) c[i] = (sample_candidate){i, logits[i]};
    for (int32_t i = k / 2 - 1; i >= 0; i--) candidates_sift_down(c, k, i);
    float entry = entry_floor(c[0].logit);
    for (int32_t i = k; i < n_vocab; i++) {
        if (chunk_skips(logits, n_vocab, i, entry)) {
            i += SKIP_CHUNK - 1;
            continue;
        }
        if (!ranks_before(logits[i], i, c[0].logit, c[0].id)) continue;
        c[0] = (sample_candidate){i, logits[i]};
        candidates_sift_down(c, k, 0);
        entry = entry_floor(c[0].logit);
    }
}

/* Rank among gathered candidates, which hold no NaN: bitwise operators rather than
 * branches, as the comparisons in a partition are coin flips to the branch predictor. */
static bool candidate_before_finite(sample_candidate a, sample_candidate b) {
    return (a.logit > b.logit) | ((a.logit == b.logit) & (a.id < b.id));
}

/* Partitions c[lo..hi) (hi - lo >= 3, no NaN) around a median-of-three pivot: returns
 * p with c[lo..p) ranked before c[p] and c[p+1..hi) after. */
static int32_t candidates_partition(sample_candidate *c, int32_t lo, int32_t hi) {
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (candidate_before_finite(c[mid], c[lo])) candidates_swap(c, mid, lo);
    if (candidate_before_finite(c[last], c[lo])) candidates_swap(c, last, lo);
    if (candidate_before_finite(c[mid], c[last])) candidates_swap(c, mid, last);
    sample_candidate pivot = c[last];
    int32_t store = lo;
    /* c[lo..store) rank before the pivot and c[store..j) after: swapping c[j] into
     * c[store] keeps that whichever side c[j] belongs to, so no branch is needed */
    for (int32_t j = lo; j < last; j++) {
        sample_candidate x = c[j];
        c[j] = c[store];
        c[store] = x;
        store += candidate_before_finite(x, pivot);
    }
    candidates_swap(c, store, last);
    return store;
}

/* Sum of w[id] over c[lo..hi), in four running sums: one would make every addition
 * wait for the previous one. */
static double candidates_mass(const sample_candidate *c, int32_t lo, int32_t hi, const float *w) {
    double sum[4] = {0.0, 0.0, 0.0, 0.0};
    int32_t j = lo;
    for (; j + 4 <= hi; j += 4)
        for (int q = 0; q < 4; q++) sum[q] += (double)w[c[j + q].id];
    for (; j < hi; j++) sum[0] += (double)w[c[j].id];
    return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

/* The top-p cut: moves to the front of c[0..n) (no NaN) the shortest run of top-ranked
 * candidates whose weights (w[id]) reach target and returns its length, n when all of
 * c falls short, as a walk down the sorted list would, but without sorting it: a
 * quickselect that steers by the mass on each side of the pivot (expected O(n)),
 * then a sort of the last few. Past 64 rounds it sorts what is left, so the worst case
 * stays O(n log n). The front is left in no particular order. */
static int32_t candidates_cut_by_mass(sample_candidate *c, int32_t n, const float *w, double target) {
    int32_t lo = 0, hi = n;            /* the cut ends in c[lo..hi); c[0..lo) are in */
    double need = target;              /* mass still needed from c[lo..) */
    if (!(need > 0.0)) need = DBL_MIN; /* top_p <= 0 unvalidated: keep the first, as the walk would */
    for (int round = 0; hi - lo > 16 && round < 64; round++) {
        int32_t p = candidates_partition(c, lo, hi);
        double above = candidates_mass(c, lo, p, w);
        if (above >= need) {
            hi = p;
            continue;
        }
        need -= above + (double)w[c[p].id];
        if (need <= 0.0) return p + 1;
        lo = p + 1;
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, candidate_cmp);
    for (int32_t j = lo; j < hi; j++) {
        need -= (double)w[c[j].id];
        if (need <= 0.0) return j + 1;
    }
    return hi;
}

/* ---- the draw ----------------------------------------------------------------- */

static uint64_t splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double sample_rng_uniform(uint64_t *state) {
    return (double)(splitmix64_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t sample_rng_at(uint64_t seed, int64_t position) {
    /* the position through one splitmix64 step of its own, folded into the seed, then
     * mixed again: nearby (seed, position) pairs give unrelated states */
    uint64_t p = (uint64_t)position;
    uint64_t z = seed ^ splitmix64_next(&p);
    return splitmix64_next(&z);
}

/* One of c[0..n), each with probability proportional to exp((logit - max) * inv_t).
 * c holds the token whose logit is max, so the total is at least 1. */
static int32_t candidates_draw(sample_state *s, const sample_candidate *c, int32_t n, float max, float inv_t,
                               double u) {
    float *w = s->_weights;
    for (int32_t j = 0; j < n; j++) w[j] = c[j].logit;
    double total = weights_exp(w, w, n, max, inv_t, s->_block_mass, NULL);
    return c[weights_pick(w, n, s->_block_mass, total, u)].id;
}

/* ---- the cuts: each leaves the tokens it keeps in c[0..n) and returns n ------------- */

/* top-k, then min-p and top-p by walking the k best in rank order, as llama.cpp does;
 * the sort is O(k log k), nothing next to the heap's O(V) for the usual k of 20-100. */
static int32_t cut_top_k(const sample_params *p, sample_candidate *c, const float *logits, int32_t n_vocab, float max,
                         float floor) {
    int32_t k = p->top_k;
    candidates_top_k(logits, n_vocab, k, c);
    qsort(c, (size_t)k, sizeof *c, candidate_cmp);
    double total = 0.0; /* the mass at temperature 1 that top-p takes a fraction of */
    if (p->top_p < 1.0f)
        for (int32_t j = 0; j < k && !isnan(c[j].logit); j++) total += exp((double)c[j].logit - (double)max);
    double target = (double)p->top_p * total, mass = 0.0;
    int32_t n = 0;
    for (int32_t j = 0; j < k && c[j].logit >= floor; j++) { /* NaN (ranked last) fails too */
        n = j + 1;
        mass += exp((double)c[j].logit - (double)max);
        if (p->top_p < 1.0f && mass >= target) break;
    }
    return n;
}

/* min-p alone: every token with logit >= floor (never NaN). Without a branch per
 * token, since about half the vocabulary passes when the distribution is flat. */
static int32_t cut_floor(sample_candidate *c, const float *logits, int32_t n_vocab, float floor) {
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (chunk_skips(logits, n_vocab, i, floor)) {
            i += SKIP_CHUNK - 1;
            continue;
        }
        c[n] = (sample_candidate){i, logits[i]};
        n += logits[i] >= floor; /* false for NaN */
    }
    return n;
}

/* top-p (and min-p) over the whole vocabulary without sorting it: the bin masses,
 * summed with the weights, tell the bin the cut ends in; one pass puts the tokens of
 * the bins above it at the front of c and that bin's tokens at the back, and only those
 * are ranked, by the quickselect that steers by mass. */
static int32_t cut_top_p(const sample_params *p, sample_state *s, const float *logits, float max, float floor) {
    int32_t n_vocab = s->n_vocab;
    const float *w = s->_weights;
    /* Whatever the total, the max alone weighs 1, so tokens of weight below
     * eps = (1 - top_p) / 2V weigh less than half of what top-p leaves out, all together:
     * the cut ends above them and their bins need not be filled (with one bin of margin
     * for rounding). For top_p 0.95 and V = 49,152 that is 14.5 nats below the max,
     * where most of a language model's vocabulary lies. */
    cut_bins bins = {.floor = -INFINITY};
    double eps = (1.0 - (double)p->top_p) / (2.0 * (double)n_vocab);
    int32_t eps_bin = cut_bin(max + (float)log(eps), max);
    if (eps_bin < CUT_BINS - 2) bins.floor = max - (float)(eps_bin + 2) / (float)CUT_BINS_PER_NAT;
    double total = weights_exp(s->_weights, logits, n_vocab, max, 1.0f, s->_block_mass, &bins);

    double target = (double)p->top_p * total, above = 0.0;
    int32_t edge = 0;
    for (; edge < CUT_BINS - 1; edge++) {
        double mass = (bins.mass[0][edge] + bins.mass[1][edge]) + (bins.mass[2][edge] + bins.mass[3][edge]);
        if (above + mass >= target) break;
        above += mass;
    }

    /* Each token is written to both free ends and at most one end advances: no branch,
     * and the two ends never meet, as they hold distinct tokens. Chunks below the edge
     * bin (with a bin of margin for rounding) are skipped. */
    float reach = max - (float)(edge + 2) / (float)CUT_BINS_PER_NAT;
    reach = edge < CUT_BINS - 2 && reach > floor ? reach : floor;
    sample_candidate *c = s->candidates;
    int32_t front = 0, back = n_vocab - 1;
    for (int32_t t = 0; t < n_vocab; t++) {
        if (chunk_skips(logits, n_vocab, t, reach)) {
            t += SKIP_CHUNK - 1;
            continue;
        }
        int32_t bin = cut_bin(logits[t], max);
        bool keep = logits[t] >= floor; /* false for NaN */
        sample_candidate x = {t, logits[t]};
        c[front] = x;
        c[back] = x;
        front += keep & (bin < edge);
        back -= keep & (bin == edge);
    }
    int32_t n_edge = n_vocab - 1 - back;
    int32_t n_in = candidates_cut_by_mass(c + back + 1, n_edge, w, target - above);
    memmove(c + front, c + back + 1, sizeof *c * (size_t)n_in);
    return front + n_in;
}

int32_t sample_token(const sample_params *p, sample_state *s, const float *logits) {
    int32_t n_vocab = s->n_vocab;
    float inv_t = 1.0f / p->temperature;
    if (!(p->temperature > 0.0f) || !isfinite(inv_t)) return sample_argmax(logits, n_vocab);
    double u = sample_rng_uniform(&s->rng);
    float max = logits_max(logits, n_vocab);
    if (!isfinite(max)) return sample_argmax(logits, n_vocab); /* all -inf or NaN, or a +inf: no weights */

    bool top_k = p->top_k > 0 && p->top_k < n_vocab;
    bool top_p = p->top_p < 1.0f;
    bool min_p = p->min_p > 0.0f;
    if (!top_k && !top_p && !min_p) {
        double total = weights_exp(s->_weights, logits, n_vocab, max, inv_t, s->_block_mass, NULL);
        return weights_pick(s->_weights, n_vocab, s->_block_mass, total, u);
    }
    /* min-p keeps p(token) >= min_p * p(max), that is logit >= max + log(min_p); the
     * max itself always stays, even for an unvalidated min_p above 1 */
    float floor = min_p ? max + logf(p->min_p) : -INFINITY;
    if (floor > max) floor = max;
    int32_t n = top_k   ? cut_top_k(p, s->candidates, logits, n_vocab, max, floor)
                : top_p ? cut_top_p(p, s, logits, max, floor)
                        : cut_floor(s->candidates, logits, n_vocab, floor);
    return candidates_draw(s, s->candidates, n, max, inv_t, u);
}

void sample_apply_allowed(const uint32_t *allowed, int32_t n_vocab, float *logits) {
    for (int32_t w = 0; w * 32 < n_vocab; w++) {
        uint32_t bits = allowed[w];
        if (bits == UINT32_MAX) continue;
        int32_t end = w * 32 + 32 < n_vocab ? w * 32 + 32 : n_vocab;
        for (int32_t i = w * 32; i < end; i++)
            if (!((bits >> (i & 31)) & 1)) logits[i] = -INFINITY;
    }
}

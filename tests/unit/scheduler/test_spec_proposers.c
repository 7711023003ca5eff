/* test_spec_proposers.c: the two draft proposers. Prompt lookup (spec_ngram_propose):
 * which occurrence it follows and how long a draft it copies, checked against a brute
 * force. The suffix cache: continuations after an add, tenant isolation, the majority
 * vote, the byte budget and LRU eviction, long documents, and that every draft it ever
 * makes is text that followed the same context in one of the tenant's documents. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/spec/spec.h"

#define LEN(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

static uint64_t rng_state;

static uint32_t rng_next(void) { /* xorshift64*: reproducible across libcs */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dULL) >> 32);
}

static int32_t rng_below(int32_t n) {
    return (int32_t)(rng_next() % (uint32_t)n);
}

/* ---- prompt lookup -------------------------------------------------------------------- */

Test(spec_ngram, longest_match_wins) {
    /* "1 2 3" occurred first (then 9); only "2 3" occurred later (then 7) */
    const int32_t t[] = {1, 2, 3, 9, 5, 2, 3, 7, 1, 2, 3};
    int32_t draft[4];
    int m = -1;
    int k = spec_ngram_propose(t, LEN(t), 2, 4, draft, 1, &m);
    cr_assert_eq(k, 1);
    cr_assert_eq(draft[0], 9);
    cr_assert_eq(m, 3);
}

Test(spec_ngram, newest_occurrence_wins) {
    const int32_t t[] = {1, 2, 5, 8, 1, 2, 6, 9, 1, 2};
    int32_t draft[4];
    int m = -1;
    int k = spec_ngram_propose(t, LEN(t), 2, 4, draft, 2, &m);
    cr_assert_eq(k, 2);
    cr_assert_eq(draft[0], 6);
    cr_assert_eq(draft[1], 9);
    cr_assert_eq(m, 2, "\"9 1 2\" never occurred before the end");
}

Test(spec_ngram, respects_ngram_min_and_max) {
    /* only the last token recurs: too short for ngram_min 2 */
    const int32_t a[] = {4, 7, 9, 5, 6, 9};
    int32_t draft[4];
    int m = -1;
    cr_assert_eq(spec_ngram_propose(a, LEN(a), 2, 4, draft, 4, &m), 0);
    cr_assert_eq(m, 0);
    cr_assert_eq(spec_ngram_propose(a, LEN(a), 1, 4, draft, 4, &m), 3);
    cr_assert_eq(m, 1);
    cr_assert_eq(draft[0], 5);

    /* a 5-token repeat matched with ngram_max 3 reports 3 */
    const int32_t b[] = {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5};
    cr_assert_eq(spec_ngram_propose(b, LEN(b), 2, 3, draft, 1, &m), 1);
    cr_assert_eq(m, 3);
    cr_assert_eq(draft[0], 6);
}

Test(spec_ngram, no_match_proposes_nothing) {
    const int32_t t[] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t draft[4];
    int m = -1;
    cr_assert_eq(spec_ngram_propose(t, LEN(t), 2, 5, draft, 4, &m), 0);
    cr_assert_eq(m, 0);
    cr_assert_eq(spec_ngram_propose(t, 2, 2, 5, draft, 4, &m), 0, "no room for an earlier occurrence");
    cr_assert_eq(spec_ngram_propose(t, 0, 2, 5, draft, 4, &m), 0);
    cr_assert_eq(spec_ngram_propose(t, LEN(t), 2, 5, draft, 0, &m), 0, "max_draft 0");
    cr_assert_eq(spec_ngram_propose(t, LEN(t), 3, 2, draft, 4, &m), 0, "ngram_max < ngram_min");
    cr_assert_eq(spec_ngram_propose(t, LEN(t), 0, 2, draft, 4, &m), 0, "ngram_min 0");
}

Test(spec_ngram, caps_the_draft_at_max_draft) {
    const int32_t t[] = {1, 2, 10, 11, 12, 13, 14, 15, 1, 2};
    int32_t draft[8] = {0};
    int m = -1;
    cr_assert_eq(spec_ngram_propose(t, LEN(t), 2, 4, draft, 3, &m), 3);
    cr_assert_eq(draft[0], 10);
    cr_assert_eq(draft[2], 12);
    cr_assert_eq(draft[3], 0, "wrote past max_draft");
}

Test(spec_ngram, draft_ends_at_the_sequence_end) {
    /* the occurrence at 0 is followed by 3 and then the current suffix itself */
    const int32_t t[] = {1, 2, 3, 1, 2};
    int32_t draft[16];
    int m = -1;
    cr_assert_eq(spec_ngram_propose(t, LEN(t), 2, 4, draft, 16, &m), 3);
    cr_assert_eq(draft[0], 3);
    cr_assert_eq(draft[1], 1);
    cr_assert_eq(draft[2], 2);
    /* overlapping repeats: "7 7" last occurred one token back, followed by one 7 */
    const int32_t r[] = {7, 7, 7, 7};
    cr_assert_eq(spec_ngram_propose(r, LEN(r), 2, 2, draft, 16, &m), 1);
    cr_assert_eq(draft[0], 7);
}

/* The specification, by brute force: the longest n in [min, max] whose last-n suffix
 * occurs ending before the last token, at its latest such end. */
static int ngram_reference(const int32_t *t, int32_t n, int nmin, int nmax, int32_t *draft, int max_draft,
                           int *match_len) {
    *match_len = 0;
    for (int len = nmax; len >= nmin; len--) {
        for (int32_t end = n - 1; end >= len; end--) {
            if (memcmp(t + end - len, t + n - len, sizeof *t * (size_t)len) != 0) continue;
            int k = 0;
            while (k < max_draft && end + k < n) {
                draft[k] = t[end + k];
                k++;
            }
            *match_len = len;
            return k;
        }
    }
    return 0;
}

Test(spec_ngram, agrees_with_a_brute_force) {
    rng_state = 0x5eed0001;
    for (int iter = 0; iter < 20000; iter++) {
        int32_t t[40];
        int32_t n = rng_below(LEN(t) + 1);
        int alphabet = 2 + rng_below(4);
        for (int32_t i = 0; i < n; i++) t[i] = rng_below(alphabet);
        int nmin = 1 + rng_below(3), nmax = nmin + rng_below(5), max_draft = 1 + rng_below(8);
        int32_t got[8], want[8];
        int m_got = -1, m_want = -1;
        int k_got = spec_ngram_propose(t, n, nmin, nmax, got, max_draft, &m_got);
        int k_want = ngram_reference(t, n, nmin, nmax, want, max_draft, &m_want);
        cr_assert_eq(k_got, k_want, "iter %d: %d drafts, want %d", iter, k_got, k_want);
        cr_assert_eq(m_got, m_want, "iter %d: match %d, want %d", iter, m_got, m_want);
        cr_assert(memcmp(got, want, sizeof *got * (size_t)k_got) == 0, "iter %d: drafts differ", iter);
    }
}

/* ---- the suffix cache ----------------------------------------------------------------- */

enum { KIB = 1024, BUDGET = 64 * KIB };

static spec_suffix *suffix_new(int64_t max_bytes) {
    spec_suffix *sc = NULL;
    cr_assert_eq(spec_suffix_create(max_bytes, &sc), SP_OK, "%s", sp_last_error());
    cr_assert_not_null(sc);
    return sc;
}

/* n distinct tokens from base on */
static void fill_run(int32_t *t, int32_t n, int32_t base) {
    for (int32_t i = 0; i < n; i++) t[i] = base + i;
}

Test(spec_suffix, proposes_the_continuation_after_add) {
    spec_suffix *sc = suffix_new(BUDGET);
    int32_t doc[64];
    fill_run(doc, LEN(doc), 1000);
    spec_suffix_add(sc, 7, doc, LEN(doc));
    int32_t draft[SCHED_SPEC_MAX_K];
    /* a 16-token context earns the whole draft, and says it was 16 tokens */
    int match = -1;
    int k = spec_suffix_propose(sc, 7, doc, 20, draft, 8, &match);
    cr_assert_eq(k, 8);
    cr_assert_eq(match, 16);
    for (int i = 0; i < k; i++) cr_assert_eq(draft[i], doc[20 + i]);
    /* bounded by the document's end */
    k = spec_suffix_propose(sc, 7, doc, 60, draft, 8, NULL);
    cr_assert_eq(k, 4);
    for (int i = 0; i < k; i++) cr_assert_eq(draft[i], doc[60 + i]);
    /* only the last two tokens match: a short draft */
    int32_t q[] = {5, 6, 9, doc[30], doc[31]};
    k = spec_suffix_propose(sc, 7, q, LEN(q), draft, 8, &match);
    cr_assert(k >= 1 && k <= 2, "k = %d", k);
    cr_assert_eq(match, 2);
    cr_assert_eq(draft[0], doc[32]);
    /* nothing seen: nothing proposed */
    int32_t unseen[] = {1, 2, 3, 4};
    cr_assert_eq(spec_suffix_propose(sc, 7, unseen, LEN(unseen), draft, 8, &match), 0);
    cr_assert_eq(match, 0, "no match: length 0");
    cr_assert_eq(spec_suffix_propose(sc, 7, doc, 1, draft, 8, NULL), 0, "a one-token context is not indexed");
    cr_assert_eq(spec_suffix_propose(sc, 7, doc, 20, draft, 0, NULL), 0, "max_draft 0");
    spec_suffix_destroy(sc);
}

Test(spec_suffix, longer_contexts_earn_longer_drafts) {
    spec_suffix *sc = suffix_new(BUDGET);
    int32_t doc[64];
    fill_run(doc, LEN(doc), 1000);
    spec_suffix_add(sc, 0, doc, LEN(doc));
    int32_t draft[SCHED_SPEC_MAX_K], q[32];
    int prev = 0;
    for (int ctx = 2; ctx <= 16; ctx *= 2) { /* q ends with exactly ctx tokens of doc */
        int32_t n = 20;
        fill_run(q, n, 5000);
        memcpy(q + n - ctx, doc + 30 - ctx, sizeof *q * (size_t)ctx);
        int k = spec_suffix_propose(sc, 0, q, n, draft, SCHED_SPEC_MAX_K, NULL);
        cr_assert(k >= prev, "ctx %d: %d drafts after %d", ctx, k, prev);
        cr_assert(k >= 1);
        for (int i = 0; i < k; i++) cr_assert_eq(draft[i], doc[30 + i]);
        prev = k;
    }
    cr_assert_eq(prev, SCHED_SPEC_MAX_K);
    spec_suffix_destroy(sc);
}

Test(spec_suffix, never_proposes_another_tenants_text) {
    spec_suffix *sc = suffix_new(BUDGET);
    /* the same 16-token context in two tenants, followed by different text */
    int32_t a[40], b[40];
    fill_run(a, LEN(a), 100);
    fill_run(b, LEN(b), 100);
    for (int i = 16; i < LEN(b); i++) b[i] = 900 + i;
    spec_suffix_add(sc, 1, a, LEN(a));
    spec_suffix_add(sc, 2, b, LEN(b));
    int32_t draft[SCHED_SPEC_MAX_K];
    int k = spec_suffix_propose(sc, 1, a, 16, draft, 4, NULL);
    cr_assert_eq(k, 4);
    for (int i = 0; i < k; i++) cr_assert_eq(draft[i], a[16 + i]);
    k = spec_suffix_propose(sc, 2, a, 16, draft, 4, NULL);
    cr_assert_eq(k, 4);
    for (int i = 0; i < k; i++) cr_assert_eq(draft[i], b[16 + i]);
    /* a tenant with nothing, and no keys at all, get nothing */
    cr_assert_eq(spec_suffix_propose(sc, 3, a, 16, draft, 4, NULL), 0);
    cr_assert_eq(spec_suffix_propose(sc, 0, a, 16, draft, 4, NULL), 0);
    /* text only tenant 1 has is never proposed to tenant 2 */
    cr_assert_eq(spec_suffix_propose(sc, 2, a, 30, draft, 4, NULL), 0);
    spec_suffix_destroy(sc);
}

/* Adds docs "ctx..., cont, tail..." for each continuation in order. */
static void add_votes(spec_suffix *sc, const int32_t *ctx, const int32_t *conts, int n_conts) {
    for (int i = 0; i < n_conts; i++) {
        int32_t doc[20];
        memcpy(doc, ctx, sizeof *doc * 16);
        doc[16] = conts[i];
        fill_run(doc + 17, 3, 3000 + 10 * i);
        spec_suffix_add(sc, 5, doc, LEN(doc));
    }
}

Test(spec_suffix, the_majority_continuation_wins) {
    int32_t ctx[16];
    fill_run(ctx, 16, 200);
    /* A (70) follows 3 of 5 occurrences, in every order */
    const int32_t orders[][5] = {
        {70, 70, 70, 71, 71}, {71, 71, 70, 70, 70}, {70, 71, 70, 71, 70},
        {71, 70, 71, 70, 70}, {71, 70, 70, 71, 70}, {70, 71, 71, 70, 70},
    };
    for (int o = 0; o < LEN(orders); o++) {
        spec_suffix *sc = suffix_new(BUDGET);
        add_votes(sc, ctx, orders[o], 5);
        int32_t draft[SCHED_SPEC_MAX_K];
        cr_assert(spec_suffix_propose(sc, 5, ctx, 16, draft, 1, NULL) == 1);
        cr_assert_eq(draft[0], 70, "order %d: proposed %d", o, draft[0]);
        spec_suffix_destroy(sc);
    }
    /* with three candidates, the one that followed 4 of 7 */
    spec_suffix *sc = suffix_new(BUDGET);
    const int32_t three[] = {72, 71, 70, 70, 72, 70, 70};
    add_votes(sc, ctx, three, LEN(three));
    int32_t draft[SCHED_SPEC_MAX_K];
    cr_assert_eq(spec_suffix_propose(sc, 5, ctx, 16, draft, 1, NULL), 1);
    cr_assert_eq(draft[0], 70);
    spec_suffix_destroy(sc);
}

Test(spec_suffix, eviction_keeps_within_budget_and_forgets_old_documents) {
    spec_suffix *sc = suffix_new(BUDGET);
    int64_t empty = spec_suffix_bytes(sc);
    cr_assert(empty > 0 && empty <= BUDGET);
    int32_t old[64];
    fill_run(old, LEN(old), 1 << 20); /* a range the random documents never use */
    spec_suffix_add(sc, 9, old, LEN(old));
    cr_assert_eq(spec_suffix_bytes(sc), empty + (int64_t)sizeof old);
    int32_t draft[SCHED_SPEC_MAX_K];
    cr_assert_eq(spec_suffix_propose(sc, 9, old, 32, draft, 4, NULL), 4);

    rng_state = 0x5eed0002;
    static int32_t doc[8192];
    for (int i = 0; i < 500; i++) {
        int32_t n = 1 + rng_below(i % 50 == 0 ? LEN(doc) : 800);
        for (int32_t j = 0; j < n; j++) doc[j] = rng_below(1000);
        spec_suffix_add(sc, 9, doc, n);
        int64_t held = spec_suffix_bytes(sc);
        cr_assert(held <= BUDGET, "add %d: %lld bytes held", i, (long long)held);
        /* what was just added can be found (its last context was indexed last) */
        if (n >= 17) {
            int k = spec_suffix_propose(sc, 9, doc, n - 1, draft, 4, NULL);
            cr_assert_eq(k, 1, "add %d", i);
            cr_assert_eq(draft[0], doc[n - 1]);
        }
    }
    for (int32_t end = 2; end < LEN(old); end++)
        cr_assert_eq(spec_suffix_propose(sc, 9, old, end, draft, 4, NULL), 0, "evicted text proposed at %d", end);
    spec_suffix_destroy(sc);
}

Test(spec_suffix, a_hit_keeps_a_document_over_older_ones) {
    /* tiny fillers run out the slots long before the table fills, so what goes is what
     * the LRU order chose */
    spec_suffix *sc = suffix_new(1024 * KIB);
    int32_t a[64], b[64], filler[3];
    fill_run(a, LEN(a), 10000);
    fill_run(b, LEN(b), 20000);
    spec_suffix_add(sc, 1, a, LEN(a));
    spec_suffix_add(sc, 1, b, LEN(b));
    int32_t draft[SCHED_SPEC_MAX_K];
    for (int i = 0; i < 5000; i++) {
        /* a is older than b but used after every add */
        cr_assert_eq(spec_suffix_propose(sc, 1, a, 20, draft, 2, NULL), 2, "a evicted (filler %d)", i);
        fill_run(filler, LEN(filler), 100000 + i * LEN(filler));
        spec_suffix_add(sc, 1, filler, LEN(filler));
    }
    cr_assert_eq(spec_suffix_propose(sc, 1, b, 20, draft, 2, NULL), 0, "b was never evicted");
    cr_assert_eq(spec_suffix_propose(sc, 1, a, 20, draft, 2, NULL), 2);
    cr_assert_eq(draft[0], a[20]);
    spec_suffix_destroy(sc);
}

Test(spec_suffix, long_documents_keep_their_tail) {
    spec_suffix *sc = suffix_new(BUDGET);
    int32_t quarter = BUDGET / 4 / (int32_t)sizeof(int32_t);
    int32_t n = 3 * quarter;
    int32_t *doc = malloc(sizeof *doc * (size_t)n);
    cr_assert_not_null(doc);
    fill_run(doc, n, 50000);
    int64_t empty = spec_suffix_bytes(sc);
    spec_suffix_add(sc, 4, doc, n);
    cr_assert_eq(spec_suffix_bytes(sc), empty + (int64_t)quarter * (int64_t)sizeof *doc);
    int32_t draft[SCHED_SPEC_MAX_K];
    /* the start is gone (every context of it, at every length) */
    for (int32_t end = 2; end < n - quarter; end += 7)
        cr_assert_eq(spec_suffix_propose(sc, 4, doc, end, draft, 4, NULL), 0, "dropped text proposed at %d", end);
    /* the end is kept */
    cr_assert_eq(spec_suffix_propose(sc, 4, doc, n - 3, draft, 8, NULL), 3);
    for (int i = 0; i < 3; i++) cr_assert_eq(draft[i], doc[n - 3 + i]);
    free(doc);
    spec_suffix_destroy(sc);
}

Test(spec_suffix, rejects_a_budget_under_64_kib) {
    spec_suffix *sc = (spec_suffix *)&sc;
    cr_assert_eq(spec_suffix_create(64 * KIB - 1, &sc), SP_ERR_INVALID_ARG);
    cr_assert_null(sc);
    cr_assert(strstr(sp_last_error(), "suffix") != NULL, "message: %s", sp_last_error());
    cr_assert_eq(spec_suffix_create(0, &sc), SP_ERR_INVALID_ARG);
    cr_assert_eq(spec_suffix_create(-1, &sc), SP_ERR_INVALID_ARG);
    cr_assert_eq(spec_suffix_create(64 * KIB, &sc), SP_OK);
    cr_assert(spec_suffix_bytes(sc) <= 64 * KIB);
    spec_suffix_destroy(sc);
    spec_suffix_destroy(NULL);
}

/* Every draft is text that followed the query's last two tokens (the shortest context)
 * in a document the same tenant added: tenants share a small alphabet, each also has
 * tokens of its own, and the budget is small enough to evict. */
enum { P_TENANTS = 3, P_DOCS = 400, P_DOC_MAX = 600 };

typedef struct prop_doc {
    uint64_t tenant;
    int32_t n;
    int32_t t[P_DOC_MAX];
} prop_doc;

static bool followed_in_tenant(const prop_doc *docs, int n_docs, uint64_t tenant, const int32_t *ctx,
                               const int32_t *draft, int k) {
    for (int d = 0; d < n_docs; d++) {
        if (docs[d].tenant != tenant) continue;
        for (int32_t p = 2; p + k <= docs[d].n; p++)
            if (memcmp(docs[d].t + p - 2, ctx, sizeof *ctx * 2) == 0 &&
                memcmp(docs[d].t + p, draft, sizeof *draft * (size_t)k) == 0)
                return true;
    }
    return false;
}

static int32_t prop_token(uint64_t tenant) { /* 0..2 shared, 10t..10t+2 the tenant's own */
    int32_t v = rng_below(6);
    return v < 3 ? v : (int32_t)(10 * tenant) + v - 3;
}

Test(spec_suffix, every_draft_followed_its_context_in_the_tenants_documents) {
    static prop_doc docs[P_DOCS];
    spec_suffix *sc = suffix_new(BUDGET);
    rng_state = 0x5eed0003;
    int hits = 0, queries = 0;
    for (int d = 0; d < P_DOCS; d++) {
        prop_doc *doc = &docs[d];
        doc->tenant = (uint64_t)rng_below(P_TENANTS);
        doc->n = rng_below(P_DOC_MAX + 1);
        for (int32_t i = 0; i < doc->n; i++) doc->t[i] = prop_token(doc->tenant);
        spec_suffix_add(sc, doc->tenant, doc->t, doc->n);
        cr_assert(spec_suffix_bytes(sc) <= BUDGET);

        for (int q = 0; q < 20; q++) {
            /* a window of some earlier document, maybe another tenant's, maybe perturbed */
            const prop_doc *src = &docs[rng_below(d + 1)];
            if (src->n < 2) continue;
            uint64_t tenant = rng_below(4) == 0 ? (uint64_t)rng_below(P_TENANTS) : src->tenant;
            int32_t query[P_DOC_MAX];
            int32_t end = 2 + rng_below(src->n - 1);
            memcpy(query, src->t, sizeof *query * (size_t)end);
            if (rng_below(4) == 0) query[rng_below(end)] = prop_token(tenant);
            int32_t draft[SCHED_SPEC_MAX_K];
            int max_draft = 1 + rng_below(SCHED_SPEC_MAX_K);
            int k = spec_suffix_propose(sc, tenant, query, end, draft, max_draft, NULL);
            cr_assert(k >= 0 && k <= max_draft);
            queries++;
            if (k == 0) continue;
            hits++;
            cr_assert(followed_in_tenant(docs, d + 1, tenant, query + end - 2, draft, k),
                      "doc %d query %d: a draft of %d that tenant %llu never wrote after its context", d, q, k,
                      (unsigned long long)tenant);
        }
    }
    cr_assert(hits > queries / 4, "only %d hits in %d queries: the test checks too little", hits, queries);
    spec_suffix_destroy(sc);
}

/* spec_suffix.c: the suffix cache. Requests of one tenant repeat each other (the same
 * system prompt, the same tool schema, code that a chat keeps quoting back); a context
 * of a few tokens that ended this way in a finished request is a good guess for how it
 * ends now. The cache keeps finished requests' tokens ("documents") and an index from
 * short contexts to what followed them.
 *
 * Documents live in a fixed array of slots, each with its tenant, a generation and LRU
 * links; the tokens are one allocation per document. The index is one open-addressed
 * table keyed by hash(tenant, ctx_len, the ctx_len tokens) for ctx_len in 16, 8, 4, 2;
 * an entry names the slot and its generation, the position in that document of the
 * token after the context, and a vote count. Evicting a document bumps its slot's
 * generation, which makes all its entries stale at once without touching the table;
 * stale entries count as free. A context seen again with the same continuation gains a
 * vote and moves to the newest copy; with another continuation it loses one, and the
 * other takes over once the count is at 0 (Boyer-Moore majority: a continuation that
 * followed more than half of a context's occurrences wins).
 *
 * A hash is only a hint: a lookup checks the slot's tenant and the context's tokens in
 * the document before proposing, so neither collisions nor other tenants' text ever
 * come out. Inserts check the same before voting.
 *
 * Bytes: the slot array and the table are sized once from max_bytes (1/16 and at most
 * 5/8); documents' tokens share the rest, at least the quarter a document may take. Each token wants up to four entries
 * of 24 bytes, so the table, not the tokens, bounds how much is findable: when all the
 * probes of a context are live, the entry with the fewest votes gives way.
 *
 * DESIGN (threads). The scheduler thread owns the cache and makes every call.
 */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "scheduler/spec/spec.h"

enum {
    SUFFIX_PROBES = 8, /* slots a context may occupy in the table */
    SUFFIX_MIN_BYTES = 64 << 10,
    SUFFIX_BYTES_PER_SLOT = 512, /* of budget per document slot: ~1/16 of it in slot headers */
    SUFFIX_MAX_VOTES = 1 << 20,  /* a cap, so a rival can still win in finite time */
};

/* the context lengths indexed, longest first (the order propose tries them) */
static const int32_t CTX_LENS[] = {16, 8, 4, 2};
enum { N_CTX_LENS = sizeof CTX_LENS / sizeof CTX_LENS[0], CTX_SHORTEST = 2 };

typedef struct suffix_doc {
    int32_t *tokens; /* NULL: a free slot */
    uint64_t tenant;
    int32_t n;
    uint32_t gen;       /* bumped on eviction: entries naming the old value are stale */
    int32_t prev, next; /* LRU list (head: most recent); free list through next */
} suffix_doc;

typedef struct suffix_entry {
    uint64_t key;  /* hash(tenant, ctx_len, context) */
    int32_t doc;   /* slot; -1: never used */
    uint32_t gen;  /* the slot's generation when written */
    int32_t pos;   /* in the document: the token after the context */
    int32_t votes; /* Boyer-Moore count for the continuation tokens[pos] */
} suffix_entry;

/* Owned by the scheduler thread. */
struct spec_suffix {
    int64_t max_bytes;
    int64_t fixed_bytes;  /* slots + table */
    int64_t token_budget; /* bytes of document tokens that may be held */
    int64_t token_bytes;  /* held now */
    int32_t max_doc_len;  /* a quarter of the budget, in tokens */
    suffix_doc *docs;     /* (n_slots) */
    int32_t n_slots;
    int32_t lru_head, lru_tail, free_head;
    suffix_entry *index; /* (mask + 1) */
    uint64_t mask;
};

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static uint64_t context_key(uint64_t tenant, const int32_t *ctx, int32_t len) {
    uint64_t h = mix64(tenant ^ ((uint64_t)len * 0x9e3779b97f4a7c15ULL));
    for (int32_t i = 0; i < len; i++) h = (h ^ (uint32_t)ctx[i]) * 0x100000001b3ULL;
    return mix64(h);
}

/* ---- slots and the LRU list ------------------------------------------------------- */

static void lru_unlink(spec_suffix *sc, int32_t s) {
    suffix_doc *d = &sc->docs[s];
    if (d->prev >= 0)
        sc->docs[d->prev].next = d->next;
    else
        sc->lru_head = d->next;
    if (d->next >= 0)
        sc->docs[d->next].prev = d->prev;
    else
        sc->lru_tail = d->prev;
    d->prev = d->next = -1;
}

static void lru_push_head(spec_suffix *sc, int32_t s) {
    suffix_doc *d = &sc->docs[s];
    d->prev = -1;
    d->next = sc->lru_head;
    if (sc->lru_head >= 0) sc->docs[sc->lru_head].prev = s;
    sc->lru_head = s;
    if (sc->lru_tail < 0) sc->lru_tail = s;
}

static void doc_touch(spec_suffix *sc, int32_t s) {
    if (sc->lru_head == s) return;
    lru_unlink(sc, s);
    lru_push_head(sc, s);
}

static void doc_evict(spec_suffix *sc, int32_t s) {
    suffix_doc *d = &sc->docs[s];
    lru_unlink(sc, s);
    sc->token_bytes -= (int64_t)d->n * (int64_t)sizeof *d->tokens;
    free(d->tokens);
    d->tokens = NULL;
    d->n = 0;
    d->gen++; /* its index entries go stale */
    d->next = sc->free_head;
    sc->free_head = s;
}

/* ---- the index ---------------------------------------------------------------------- */

static bool entry_live(const spec_suffix *sc, const suffix_entry *e) {
    return e->doc >= 0 && sc->docs[e->doc].tokens && sc->docs[e->doc].gen == e->gen;
}

/* Whether e's context is ctx[0..len) of tenant: the hash only suggests it. */
static bool entry_matches(const spec_suffix *sc, const suffix_entry *e, uint64_t key, uint64_t tenant,
                          const int32_t *ctx, int32_t len) {
    if (e->key != key || !entry_live(sc, e)) return false;
    const suffix_doc *d = &sc->docs[e->doc];
    if (d->tenant != tenant || e->pos < len || e->pos >= d->n) return false;
    return memcmp(d->tokens + e->pos - len, ctx, sizeof *ctx * (size_t)len) == 0;
}

/* The context before doc s's position pos, of length len, was followed by tokens[pos]. */
static void index_insert(spec_suffix *sc, int32_t s, int32_t pos, int32_t len) {
    const suffix_doc *d = &sc->docs[s];
    const int32_t *ctx = d->tokens + pos - len;
    uint64_t key = context_key(d->tenant, ctx, len);
    suffix_entry *free_e = NULL, *weakest = NULL;
    for (int i = 0; i < SUFFIX_PROBES; i++) {
        suffix_entry *e = &sc->index[(key + (uint64_t)i) & sc->mask];
        if (entry_matches(sc, e, key, d->tenant, ctx, len)) {
            if (sc->docs[e->doc].tokens[e->pos] == d->tokens[pos]) {
                /* agreed: follow the newest copy, which outlives the older ones */
                if (e->votes < SUFFIX_MAX_VOTES) e->votes++;
                e->doc = s;
                e->gen = d->gen;
                e->pos = pos;
            } else if (e->votes > 0) {
                e->votes--;
            } else {
                *e = (suffix_entry){.key = key, .doc = s, .gen = d->gen, .pos = pos, .votes = 1};
            }
            return;
        }
        if (!free_e && !entry_live(sc, e)) free_e = e;
        if (!weakest || e->votes < weakest->votes) weakest = e;
        /* a never-used entry ends the chain: inserts fill the first free probe, so nothing
         * of this key lies past it */
        if (e->doc < 0) break;
    }
    suffix_entry *e = free_e ? free_e : weakest;
    *e = (suffix_entry){.key = key, .doc = s, .gen = d->gen, .pos = pos, .votes = 1};
}

/* ---- the API ------------------------------------------------------------------------ */

sp_status spec_suffix_create(int64_t max_bytes, spec_suffix **out) {
    *out = NULL;
    if (max_bytes < SUFFIX_MIN_BYTES)
        return sp_fail(SP_ERR_INVALID_ARG, "suffix cache: budget of %lld bytes is under the minimum of %d",
                       (long long)max_bytes, SUFFIX_MIN_BYTES);
    int64_t n_slots = max_bytes / SUFFIX_BYTES_PER_SLOT;
    if (n_slots > INT32_MAX) n_slots = INT32_MAX;
    uint64_t n_entries = 1;
    /* the table takes what is left after a quarter for the longest document and the
     * slots, rounded down to a power of two (the tokens get the rounding) */
    while ((int64_t)(n_entries * 2 * sizeof(suffix_entry)) <= max_bytes / 8 * 5) n_entries *= 2;

    spec_suffix *sc = calloc(1, sizeof *sc);
    if (!sc) goto fail;
    sc->docs = malloc(sizeof *sc->docs * (size_t)n_slots);
    sc->index = malloc(sizeof *sc->index * (size_t)n_entries);
    if (!sc->docs || !sc->index) goto fail;
    sc->max_bytes = max_bytes;
    sc->n_slots = (int32_t)n_slots;
    sc->mask = n_entries - 1;
    sc->fixed_bytes = (int64_t)(sizeof *sc->docs * (size_t)n_slots + sizeof *sc->index * (size_t)n_entries);
    sc->token_budget = max_bytes - sc->fixed_bytes;
    int64_t quarter = max_bytes / 4 / (int64_t)sizeof(int32_t);
    sc->max_doc_len = quarter > INT32_MAX ? INT32_MAX : (int32_t)quarter;
    SP_ASSERT(sc->token_budget >= quarter * (int64_t)sizeof(int32_t));
    for (int32_t s = 0; s < sc->n_slots; s++)
        sc->docs[s] = (suffix_doc){.prev = -1, .next = s + 1 < sc->n_slots ? s + 1 : -1};
    sc->free_head = 0;
    sc->lru_head = sc->lru_tail = -1;
    for (uint64_t i = 0; i < n_entries; i++) sc->index[i] = (suffix_entry){.doc = -1};
    *out = sc;
    return SP_OK;
fail:
    spec_suffix_destroy(sc);
    return sp_fail(SP_ERR_NOMEM, "suffix cache: cannot allocate its %lld bytes", (long long)max_bytes);
}

void spec_suffix_destroy(spec_suffix *sc) {
    if (!sc) return;
    if (sc->docs)
        for (int32_t s = 0; s < sc->n_slots; s++) free(sc->docs[s].tokens);
    free(sc->docs);
    free(sc->index);
    free(sc);
}

void spec_suffix_add(spec_suffix *sc, uint64_t tenant, const int32_t *tokens, int32_t n) {
    if (n < CTX_SHORTEST + 1) return; /* no context with a continuation */
    if (n > sc->max_doc_len) {        /* the end is what a continuing conversation repeats */
        tokens += n - sc->max_doc_len;
        n = sc->max_doc_len;
    }
    int64_t bytes = (int64_t)n * (int64_t)sizeof *tokens;
    while (sc->lru_tail >= 0 && (sc->free_head < 0 || sc->token_bytes + bytes > sc->token_budget))
        doc_evict(sc, sc->lru_tail);
    int32_t *copy = malloc((size_t)bytes);
    if (!copy) return; /* a cache may forget; the request has finished anyway */
    memcpy(copy, tokens, (size_t)bytes);

    int32_t s = sc->free_head;
    suffix_doc *d = &sc->docs[s];
    sc->free_head = d->next;
    d->tokens = copy;
    d->tenant = tenant;
    d->n = n;
    lru_push_head(sc, s);
    sc->token_bytes += bytes;
    /* front to back, so the newest occurrence of a context votes last */
    for (int32_t pos = CTX_SHORTEST; pos < n; pos++)
        for (int c = N_CTX_LENS - 1; c >= 0; c--)
            if (pos >= CTX_LENS[c]) index_insert(sc, s, pos, CTX_LENS[c]);
}

/* How many drafts a match earns. A 16-token context is specific enough to trust for
 * the whole draft; shorter ones recur by chance, more so when their continuation was
 * seen once or is contested (votes <= 1), and a rejected draft costs a row. */
static int draft_limit(int32_t ctx_len, int32_t votes, int max_draft) {
    int k;
    switch (ctx_len) {
    case 16: k = max_draft; break;
    case 8: k = max_draft * 3 / 4; break;
    case 4: k = max_draft / 2; break;
    default: k = 2; break;
    }
    if (ctx_len < 8 && votes <= 1) k /= 2;
    if (k > max_draft) k = max_draft;
    return k < 1 ? 1 : k;
}

int spec_suffix_propose(spec_suffix *sc, uint64_t tenant, const int32_t *tokens, int32_t n, int32_t *draft,
                        int max_draft, int *match_len) {
    if (match_len) *match_len = 0;
    if (max_draft <= 0) return 0;
    for (int c = 0; c < N_CTX_LENS; c++) {
        int32_t len = CTX_LENS[c];
        if (n < len) continue;
        const int32_t *ctx = tokens + n - len;
        uint64_t key = context_key(tenant, ctx, len);
        for (int i = 0; i < SUFFIX_PROBES; i++) {
            const suffix_entry *e = &sc->index[(key + (uint64_t)i) & sc->mask];
            if (e->doc < 0) break; /* end of the chain (see index_insert) */
            if (!entry_matches(sc, e, key, tenant, ctx, len)) continue;
            const suffix_doc *d = &sc->docs[e->doc];
            int k = draft_limit(len, e->votes, max_draft);
            if (k > d->n - e->pos) k = d->n - e->pos;
            memcpy(draft, d->tokens + e->pos, sizeof *draft * (size_t)k);
            doc_touch(sc, e->doc);
            if (match_len) *match_len = len;
            return k;
        }
    }
    return 0;
}

int64_t spec_suffix_bytes(const spec_suffix *sc) {
    return sc->fixed_bytes + sc->token_bytes;
}

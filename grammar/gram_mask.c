/* gram_mask.c: which tokens may come next. The vocabulary's byte strings form a trie;
 * a mask is a walk of it from the state's stacks, one byte per trie edge, that prunes
 * every branch no stack can take, so it costs what the allowed tokens cost, not V.
 *
 * Most of that walk does not depend on the whole stack. Each stack is cut to its top
 * GRAM_KEY_NODES nodes, the rest replaced by GRAM_CONTEXT; the walk of the cut stack
 * (a context-free walk) is cached per grammar under the cut's positions. It yields
 *   accepted   tokens whose bytes the cut stack takes whatever lies below it, and
 *   deps       trie nodes where a stack popped into the context with bytes still to
 *              come: the tokens under them depend on the rest of the stack.
 * A mask is then, per stack, the cached accepted set OR'ed in, plus a walk of each dep's
 * subtree with the whole stack (usually a few tokens: inside a JSON string only the
 * tokens that close the string and go on, like `",`). This is XGrammar's split of
 * context-independent and context-dependent tokens, done lazily per stack top. The cut
 * walks run on gram_dfa.c's states (one table load per trie edge); the whole-stack walks
 * (deps, stacks near the depth bound) on the stacks themselves.
 *
 * BUDGET. Every walk charges work units to its mask (charge(): a trie edge tried, the
 * stacks an advance tries and the expansion steps it takes, the stacks weighed for
 * duplicates, the nodes of a state copied into the arena); past limits.max_mask_fuel, or
 * when the caller's cancel flag is seen (every CANCEL_EVERY units), every walk returns at
 * its next edge and gram_mask_run reports why. A cut walk so stopped is not cached.
 *
 * DESIGN (threads). The cache hangs off the grammar and is only touched here; one thread
 * at a time calls gram_mask on a grammar (grammar.h).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* Cached keys per grammar; past it the cache starts over. */
/* Entries walked lazily (past the prepared ones) before the cache starts over. */
enum { GRAM_CACHE_ENTRIES = 1024 };
/* What gram_mask_prepare walks ahead at most: keys and the bytes their entries hold; a
 * grammar past these bounds walks its remaining keys lazily (what a key costs:
 * docs/notes/2026-12-05-grammar-prepare-cost.md). */
enum { GRAM_PREPARE_KEYS = 8192 };
#define GRAM_PREPARE_BYTES ((size_t)16 << 20)
/* Stacks a walk step keeps before it drops duplicates. */
enum { GRAM_DEDUPE_TOPS = 32 };
/* Vocabulary size past which the fuel grows in proportion (grammar.h, BUDGET). */
enum { GRAM_FUEL_VOCAB = 65536 };
/* Work units between two loads of the cancel flag. */
enum { CANCEL_EVERY = 4096 };
/* gram_mask_prepare's whole budget, in masks' worth of fuel (each key's walk also stops at
 * one mask's fuel): past it the remaining keys are walked lazily. */
enum { PREPARE_FUEL_MASKS = 64 };

/* ---- the vocabulary trie ----------------------------------------------------------- */

typedef struct trie_node {
    int32_t first_edge, n_edges;
    int32_t first_token, n_tokens; /* into gv->sorted: the tokens that end here */
    int32_t sub_end;               /* the subtree's tokens: sorted[first_token .. sub_end) */
} trie_node;

typedef struct trie_edge {
    uint8_t byte;
    int32_t child;
} trie_edge;

struct gram_vocab {
    int32_t n_vocab;
    uint32_t *off; /* (n_vocab + 1) token id's bytes: bytes[off[id] .. off[id + 1]) */
    uint8_t *bytes;
    bool *eog;       /* (n_vocab) */
    int32_t *sorted; /* token ids with bytes, by their bytes */
    int32_t n_sorted;
    trie_node *nodes;
    int32_t n_nodes;
    trie_edge *edges;
    int32_t n_edges;
    int32_t max_len;
    gram_byteset *below; /* (n_nodes) the bytes on the edges of each node's subtree */
};

static const gram_vocab *sort_vocab; /* qsort has no context argument */

static int token_cmp(const void *a, const void *b) {
    const gram_vocab *gv = sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = gv->off[x + 1] - gv->off[x], ly = gv->off[y + 1] - gv->off[y];
    int c = memcmp(gv->bytes + gv->off[x], gv->bytes + gv->off[y], lx < ly ? lx : ly);
    if (c) return c;
    return lx < ly ? -1 : lx > ly ? 1 : (x > y) - (x < y);
}

static uint32_t token_len(const gram_vocab *gv, int32_t id) {
    return gv->off[id + 1] - gv->off[id];
}

/* The node for sorted[lo..hi), which share their first depth bytes. */
static int32_t trie_build(gram_vocab *gv, int32_t lo, int32_t hi, uint32_t depth) {
    int32_t me = gv->n_nodes++;
    int32_t i = lo;
    while (i < hi && token_len(gv, gv->sorted[i]) == depth) i++;
    gv->nodes[me] = (trie_node){.first_token = lo, .n_tokens = i - lo, .sub_end = hi};
    memset(&gv->below[me], 0, sizeof gv->below[me]);
    int32_t groups = 0;
    for (int32_t j = i; j < hi;) {
        uint8_t b = gv->bytes[gv->off[gv->sorted[j]] + depth];
        while (j < hi && gv->bytes[gv->off[gv->sorted[j]] + depth] == b) j++;
        groups++;
    }
    int32_t first = gv->n_edges;
    gv->n_edges += groups;
    gv->nodes[me].first_edge = first;
    gv->nodes[me].n_edges = groups;
    for (int32_t j = i, k = 0; j < hi; k++) {
        int32_t start = j;
        uint8_t b = gv->bytes[gv->off[gv->sorted[j]] + depth];
        while (j < hi && gv->bytes[gv->off[gv->sorted[j]] + depth] == b) j++;
        int32_t child = trie_build(gv, start, j, depth + 1);
        gv->edges[first + k] = (trie_edge){b, child};
        for (int w = 0; w < 4; w++) gv->below[me].bits[w] |= gv->below[child].bits[w];
        gv->below[me].bits[b >> 6] |= 1ull << (b & 63);
    }
    return me;
}

sp_status gram_vocab_create(const tok_vocab *v, gram_vocab **out) {
    *out = NULL;
    gram_vocab *gv = calloc(1, sizeof *gv);
    if (!gv) return sp_fail(SP_ERR_NOMEM, "grammar: out of memory for the vocabulary");
    int32_t n = tok_vocab_size(v);
    gv->n_vocab = n;
    gv->off = calloc((size_t)n + 1, sizeof *gv->off);
    gv->eog = calloc((size_t)n, sizeof *gv->eog);
    gv->sorted = malloc(sizeof *gv->sorted * (size_t)(n ? n : 1));
    size_t total = 0;
    if (!gv->off || !gv->eog || !gv->sorted) goto nomem;
    for (int32_t id = 0; id < n; id++) {
        total += tok_token_bytes(v, id, false, NULL, 0);
        if (total > UINT32_MAX) goto nomem;
        gv->off[id + 1] = (uint32_t)total;
        gv->eog[id] = tok_is_eog(v, id);
    }
    gv->bytes = malloc(total ? total : 1);
    gv->nodes = malloc(sizeof *gv->nodes * (total + 1));
    gv->edges = malloc(sizeof *gv->edges * (total + 1));
    gv->below = malloc(sizeof *gv->below * (total + 1));
    if (!gv->bytes || !gv->nodes || !gv->edges || !gv->below) goto nomem;
    for (int32_t id = 0; id < n; id++) {
        uint32_t len = gv->off[id + 1] - gv->off[id];
        tok_token_bytes(v, id, false, (char *)gv->bytes + gv->off[id], len);
        if (len > 0 && !gv->eog[id]) gv->sorted[gv->n_sorted++] = id;
        if ((int32_t)len > gv->max_len) gv->max_len = (int32_t)len;
    }
    sort_vocab = gv;
    qsort(gv->sorted, (size_t)gv->n_sorted, sizeof *gv->sorted, token_cmp);
    sort_vocab = NULL;
    trie_build(gv, 0, gv->n_sorted, 0);
    gram_byteset *fit = realloc(gv->below, sizeof *gv->below * (size_t)gv->n_nodes);
    if (fit) gv->below = fit;
    *out = gv;
    return SP_OK;
nomem:
    gram_vocab_destroy(gv);
    return sp_fail(SP_ERR_NOMEM, "grammar: out of memory for the vocabulary");
}

void gram_vocab_destroy(gram_vocab *gv) {
    if (!gv) return;
    free(gv->off);
    free(gv->bytes);
    free(gv->eog);
    free(gv->sorted);
    free(gv->nodes);
    free(gv->edges);
    free(gv->below);
    free(gv);
}

size_t gram_mask_words(const gram_vocab *gv) {
    return ((size_t)gv->n_vocab + 31) / 32;
}

/* ---- walks ------------------------------------------------------------------------- */

typedef struct dep {
    int32_t node;           /* trie node whose subtree needs the whole stack */
    int32_t prefix, length; /* its bytes from the root, in the entry's prefix buffer */
} dep;

typedef struct cache_entry {
    int32_t key[GRAM_KEY_NODES + 1]; /* positions top first, then the parent past the cut */
    int32_t key_len;
    /* the accepted tokens: a bitset (words) when many, else their ids (n_ids), whichever is
     * smaller: most keys take a handful of tokens, and a prepared grammar holds hundreds */
    uint32_t *accepted;
    int32_t *ids;
    int32_t n_ids;
    dep *deps;
    int32_t n_deps;
    uint8_t *prefixes;
} cache_entry;

struct gram_mask_cache {
    cache_entry **slots; /* (n_slots, a power of two, at least twice n_entries) open addressing */
    int32_t n_slots;
    int32_t n_entries;
    int32_t n_prepared; /* entries gram_mask_prepare made (they stay until the cache starts over) */
    size_t bytes;       /* the entries' memory */
    gram_stacks arena;  /* walk nodes; truncated as the walk backs out */
    gram_stacks *level; /* (max_len + 2) tops at each trie depth */
    int32_t n_levels;
    uint8_t *path; /* (max_len + 1) bytes from the root to the walk's node */
    /* the entry being built */
    dep *deps;
    int32_t n_deps;
    size_t cap_deps;
    uint8_t *prefixes;
    int32_t n_prefix;
    size_t cap_prefix;
    gram_dfa *dfa;     /* the cut walks' states (gram_dfa.c) */
    uint32_t *scratch; /* (scratch_words) the accepted set of the entry being built */
    size_t scratch_words;
    int64_t walks; /* cut walks made (entries built) */
    /* the budget of the mask being made */
    int64_t work, fuel, cancel_checked;
    int64_t dfa_seen;  /* the DFA's work already charged */
    int64_t last_work; /* what the last gram_mask_run spent (gram_mask_work) */
    const atomic_bool *cancel;
    gram_mask_status status; /* not GRAM_MASK_OK: every walk stops */
};

/* Charges units of work; true when the walk must stop (over budget, or cancelled). */
static bool charge(gram_mask_cache *c, int64_t units) {
    c->work += units;
    if (c->status != GRAM_MASK_OK) return true;
    if (c->work > c->fuel) {
        c->status = GRAM_MASK_OVER_BUDGET;
        return true;
    }
    if (c->cancel && c->work - c->cancel_checked >= CANCEL_EVERY) {
        c->cancel_checked = c->work;
        if (atomic_load_explicit(c->cancel, memory_order_relaxed)) {
            c->status = GRAM_MASK_CANCELLED;
            return true;
        }
    }
    return false;
}

/* Charges units and the DFA's work since the last charge; true when the walk must stop. */
static bool charge_dfa(gram_mask_cache *c, int64_t units) {
    int64_t now = gram__dfa_work(c->dfa);
    units += now - c->dfa_seen;
    c->dfa_seen = now;
    return charge(c, units);
}

/* A fresh budget of fuel units for the next walks. */
static void budget_start(gram_mask_cache *c, int64_t fuel, const atomic_bool *cancel) {
    c->work = c->cancel_checked = 0;
    c->fuel = fuel;
    c->cancel = cancel;
    c->status = GRAM_MASK_OK;
}

typedef struct walk {
    const gram_grammar *g;
    const gram_vocab *gv;
    gram_mask_cache *c;
    uint32_t *mask;
    bool record_deps;
} walk;

static void set_tokens(const walk *w, const trie_node *n) {
    for (int32_t i = 0; i < n->n_tokens; i++) {
        int32_t id = w->gv->sorted[n->first_token + i];
        w->mask[id >> 5] |= 1u << (id & 31);
    }
}

static void dep_add(walk *w, int32_t node, int32_t depth) {
    gram_mask_cache *c = w->c;
    if (!sp_grow((void **)&c->deps, &c->cap_deps, c->n_deps + 1, sizeof *c->deps) ||
        !sp_grow((void **)&c->prefixes, &c->cap_prefix, c->n_prefix + depth, 1))
        return; /* out of memory: the dependent tokens stay out of the mask (never wrong ones in) */
    memcpy(c->prefixes + c->n_prefix, c->path, (size_t)depth);
    c->deps[c->n_deps++] = (dep){node, c->n_prefix, depth};
    c->n_prefix += depth;
}

/* Walks the trie below node (at depth bytes) with the stacks tops (nodes in c->arena). */
static void walk_node(walk *w, int32_t node, int32_t depth, const int32_t *tops, int32_t n_tops, bool under_dep) {
    const gram_grammar *g = w->g;
    const trie_node *tn = &w->gv->nodes[node];
    gram_byteset any = {{0}};
    for (int32_t i = 0; i < n_tops; i++) {
        const gram_byteset *s = &g->sets[g->elems[w->c->arena.nodes[tops[i]].pos].arg];
        for (int k = 0; k < 4; k++) any.bits[k] |= s->bits[k];
    }
    gram_stacks *next = &w->c->level[depth + 1];
    for (int32_t e = 0; e < tn->n_edges; e++) {
        const trie_edge edge = w->gv->edges[tn->first_edge + e];
        if (!gram_byteset_has(&any, edge.byte)) continue;
        if (charge(w->c, 1 + n_tops)) return;
        const int32_t mark = w->c->arena.n_nodes;
        next->n_tops = 0;
        next->accepting = next->needs_context = next->overflow = false;
        bool took = gram__advance_byte(g, &w->c->arena, tops, n_tops, edge.byte, next);
        if (charge(w->c, next->steps)) {
            w->c->arena.n_nodes = mark;
            return;
        }
        if (!took) continue;
        /* taken, but nothing can follow and nothing is complete (a bound cut every path):
         * gram_state_advance refuses such a token, so the mask does too */
        if (next->n_tops == 0 && !next->accepting && !next->needs_context) {
            w->c->arena.n_nodes = mark;
            continue;
        }
        /* duplicates only repeat work; weeding them out costs more than they do until many */
        if (next->n_tops > GRAM_DEDUPE_TOPS) {
            charge(w->c, next->n_tops);
            gram__dedupe(next, &w->c->arena);
        }
        const trie_node *child = &w->gv->nodes[edge.child];
        set_tokens(w, child);
        w->c->path[depth] = edge.byte;
        bool dep_here = false;
        if (child->n_edges > 0 && next->needs_context && w->record_deps && !under_dep) {
            dep_add(w, edge.child, depth + 1);
            dep_here = true;
        }
        /* the walk below writes only the levels past depth + 1 */
        if (child->n_edges > 0 && next->n_tops > 0)
            walk_node(w, edge.child, depth + 1, next->tops, next->n_tops, under_dep || dep_here);
        w->c->arena.n_nodes = mark;
    }
}

/* The cut walk below trie node node (at depth bytes) from DFA state s: the tokens whose
 * bytes the cut stacks take into w->mask, and the nodes below which tokens need the whole
 * stack into the deps (not under one already recorded). */
static void walk_cut(walk *w, int32_t node, int32_t depth, int32_t s, bool under_dep) {
    gram_dfa *d = w->c->dfa;
    const trie_node *tn = &w->gv->nodes[node];
    /* a state every byte below this node keeps (a string's character loop): every token of
     * the subtree is taken, nothing below needs the context; no walk */
    const bool loops = !gram__dfa_needs_context(d, s) && gram__dfa_loops_over(d, w->g, s, &w->gv->below[node]);
    if (charge_dfa(w->c, 1)) return;
    if (loops) {
        if (charge(w->c, (tn->sub_end - tn->first_token) / 64)) return;
        for (int32_t i = tn->first_token; i < tn->sub_end; i++) {
            int32_t id = w->gv->sorted[i];
            w->mask[id >> 5] |= 1u << (id & 31);
        }
        return;
    }
    gram_byteset any;
    gram__dfa_bytes(d, w->g, s, &any);
    for (int32_t e = 0; e < tn->n_edges; e++) {
        const trie_edge edge = w->gv->edges[tn->first_edge + e];
        if (!gram_byteset_has(&any, edge.byte)) continue;
        int32_t t = gram__dfa_next(d, w->g, s, edge.byte);
        if (charge_dfa(w->c, 1)) return;
        if (t < 0) continue;
        const trie_node *child = &w->gv->nodes[edge.child];
        set_tokens(w, child);
        if (child->n_edges == 0) continue;
        w->c->path[depth] = edge.byte;
        bool dep_here = false;
        if (gram__dfa_needs_context(d, t) && !under_dep) {
            dep_add(w, edge.child, depth + 1);
            dep_here = true;
        }
        if (gram__dfa_continues(d, t)) walk_cut(w, edge.child, depth + 1, t, under_dep || dep_here);
    }
}

static bool cache_fit(gram_mask_cache *c, const gram_vocab *gv) {
    if (c->level && c->n_levels >= gv->max_len + 2) return true;
    for (int32_t i = 0; i < c->n_levels; i++) gram__stacks_free(&c->level[i]);
    free(c->level);
    free(c->path);
    c->n_levels = gv->max_len + 2;
    c->level = calloc((size_t)c->n_levels, sizeof *c->level);
    c->path = malloc((size_t)gv->max_len + 1);
    return c->level && c->path;
}

static void entry_free(cache_entry *e) {
    if (!e) return;
    free(e->accepted);
    free(e->ids);
    free(e->deps);
    free(e->prefixes);
    free(e);
}

static void cache_clear(gram_mask_cache *c) {
    for (int32_t i = 0; i < c->n_slots; i++) {
        entry_free(c->slots[i]);
        c->slots[i] = NULL;
    }
    c->n_entries = c->n_prepared = 0;
    c->bytes = 0;
}

static uint32_t key_hash(const int32_t *key, int32_t n);

/* Room for one more entry (the table doubled and rehashed when half full); false when out
 * of memory. */
static bool slots_room(gram_mask_cache *c) {
    if (2 * (c->n_entries + 1) <= c->n_slots) return true;
    int32_t n = c->n_slots ? 2 * c->n_slots : 256;
    cache_entry **t = calloc((size_t)n, sizeof *t);
    if (!t) return false;
    for (int32_t i = 0; i < c->n_slots; i++) {
        cache_entry *e = c->slots[i];
        if (!e) continue;
        uint32_t at = key_hash(e->key, e->key_len) & (uint32_t)(n - 1);
        while (t[at]) at = (at + 1) & (uint32_t)(n - 1);
        t[at] = e;
    }
    free(c->slots);
    c->slots = t;
    c->n_slots = n;
    return true;
}

void gram__mask_cache_destroy(gram_mask_cache *c) {
    if (!c) return;
    cache_clear(c);
    free(c->slots);
    for (int32_t i = 0; i < c->n_levels; i++) gram__stacks_free(&c->level[i]);
    free(c->level);
    free(c->path);
    gram__stacks_free(&c->arena);
    gram__dfa_destroy(c->dfa);
    free(c->scratch);
    free(c->deps);
    free(c->prefixes);
    free(c);
}

/* Stores the accepted set in as bitset or id list, whichever is smaller; false when out
 * of memory. */
static bool entry_keep_accepted(cache_entry *e, const uint32_t *set, size_t words) {
    size_t n = 0;
    for (size_t i = 0; i < words; i++) n += (size_t)__builtin_popcount(set[i]);
    if (n >= words) {
        e->accepted = malloc(sizeof *e->accepted * words);
        if (!e->accepted) return false;
        memcpy(e->accepted, set, sizeof *e->accepted * words);
        return true;
    }
    e->ids = malloc(sizeof *e->ids * (n ? n : 1));
    if (!e->ids) return false;
    for (size_t i = 0; i < words; i++)
        for (uint32_t bits = set[i]; bits; bits &= bits - 1)
            e->ids[e->n_ids++] = (int32_t)(i * 32 + (size_t)__builtin_ctz(bits));
    return true;
}

/* The key of the stack whose top is node top of s. */
static int32_t stack_key(const gram_stacks *s, int32_t top, int32_t key[GRAM_KEY_NODES + 1]) {
    int32_t n = 0, at = top;
    while (at >= 0 && n < GRAM_KEY_NODES) {
        key[n++] = s->nodes[at].pos;
        at = s->nodes[at].parent;
    }
    key[n++] = at >= 0 ? GRAM_CONTEXT : at; /* -1: the real bottom */
    return n;
}

static uint32_t key_hash(const int32_t *key, int32_t n) {
    uint32_t h = 2166136261u;
    for (int32_t i = 0; i < n; i++) h = (h ^ (uint32_t)key[i]) * 16777619u;
    return h;
}

/* The cached walk of the cut stack; NULL when out of memory. */
static cache_entry *entry_for(walk *w, const int32_t *key, int32_t key_len) {
    gram_mask_cache *c = w->c;
    const uint32_t h = key_hash(key, key_len);
    for (uint32_t at = h; c->n_slots > 0; at++) {
        cache_entry *e = c->slots[at & (uint32_t)(c->n_slots - 1)];
        if (!e) break;
        if (e->key_len == key_len && memcmp(e->key, key, sizeof *key * (size_t)key_len) == 0) return e;
    }
    if (c->n_entries >= c->n_prepared + GRAM_CACHE_ENTRIES) cache_clear(c);
    if (!slots_room(c)) return NULL;
    size_t words = gram_mask_words(w->gv);
    cache_entry *e = calloc(1, sizeof *e);
    if (c->scratch_words < words) {
        free(c->scratch);
        c->scratch = malloc(sizeof *c->scratch * words);
        c->scratch_words = c->scratch ? words : 0;
    }
    if (!e || !c->scratch) {
        entry_free(e);
        return NULL;
    }
    memset(c->scratch, 0, sizeof *c->scratch * words);
    memcpy(e->key, key, sizeof *key * (size_t)key_len);
    e->key_len = key_len;
    /* the cut stack (key_len - 1 nodes over the context, or the real bottom) as a DFA state */
    if (!c->dfa && !(c->dfa = gram__dfa_create())) {
        entry_free(e);
        return NULL;
    }
    gram__dfa_trim(c->dfa);
    int32_t start = gram__dfa_start(c->dfa, key, key_len);
    c->dfa_seen = gram__dfa_work(c->dfa);
    if (start < 0) {
        entry_free(e);
        return NULL;
    }
    c->n_deps = c->n_prefix = 0;
    walk cut = *w;
    cut.mask = c->scratch;
    cut.record_deps = true;
    walk_cut(&cut, 0, 0, start, false);
    if (c->status != GRAM_MASK_OK) { /* stopped part way: not a walk to keep */
        entry_free(e);
        return NULL;
    }
    c->walks++;
    if (!entry_keep_accepted(e, c->scratch, words)) {
        entry_free(e);
        return NULL;
    }
    if (c->n_deps) {
        e->deps = malloc(sizeof *e->deps * (size_t)c->n_deps);
        e->prefixes = malloc((size_t)(c->n_prefix ? c->n_prefix : 1));
        if (!e->deps || !e->prefixes) {
            entry_free(e);
            return NULL;
        }
        memcpy(e->deps, c->deps, sizeof *e->deps * (size_t)c->n_deps);
        memcpy(e->prefixes, c->prefixes, (size_t)c->n_prefix);
        e->n_deps = c->n_deps;
    }
    uint32_t at = h & (uint32_t)(c->n_slots - 1);
    while (c->slots[at]) at = (at + 1) & (uint32_t)(c->n_slots - 1);
    c->slots[at] = e;
    c->n_entries++;
    c->bytes += sizeof *e + (e->accepted ? sizeof *e->accepted * words : 0) + sizeof *e->ids * (size_t)e->n_ids +
                sizeof *e->deps * (size_t)e->n_deps + (size_t)c->n_prefix;
    return e;
}

/* The tokens under dep d for the whole stack whose top is node top of the state (copied
 * into the arena): the stack advanced over d's prefix, then its subtree walked. */
static void walk_dep(walk *w, const gram_state *s, int32_t top, const cache_entry *e, const dep *d) {
    gram_mask_cache *c = w->c;
    int32_t tops_buf[1] = {top};
    const int32_t *tops = tops_buf;
    int32_t n_tops = 1;
    gram_stacks *lv[2] = {&c->level[0], &c->level[1]};
    for (int32_t i = 0; i < d->length; i++) {
        gram_stacks *next = lv[i & 1];
        next->n_tops = 0;
        next->accepting = next->needs_context = next->overflow = false;
        bool took = gram__advance_byte(s->g, &c->arena, tops, n_tops, e->prefixes[d->prefix + i], next);
        if (charge(c, 1 + n_tops + next->steps + next->n_tops) || !took || next->n_tops == 0) return;
        gram__dedupe(next, &c->arena);
        tops = next->tops;
        n_tops = next->n_tops;
    }
    /* walk_node's levels start at depth d->length + 1: copy the tops to that level's own */
    gram_stacks *at = &c->level[d->length];
    if (at->tops != tops) {
        at->n_tops = 0;
        for (int32_t i = 0; i < n_tops; i++) {
            if (!sp_grow((void **)&at->tops, &at->cap_tops, at->n_tops + 1, sizeof *at->tops)) return;
            at->tops[at->n_tops++] = tops[i];
        }
    }
    walk full = *w;
    full.record_deps = false;
    memcpy(c->path, e->prefixes + d->prefix, (size_t)d->length);
    walk_node(&full, d->node, d->length, at->tops, at->n_tops, true);
}

/* One mask's fuel over gv: a walk of the whole vocabulary costs in proportion to it, so
 * the fuel grows with it past GRAM_FUEL_VOCAB tokens (grammar.h, BUDGET). */
static int64_t mask_fuel(const gram_grammar *g, const gram_vocab *gv) {
    int64_t fuel = g->limits.max_mask_fuel;
    if (gv->n_vocab > GRAM_FUEL_VOCAB) fuel = (int64_t)((double)fuel * gv->n_vocab / GRAM_FUEL_VOCAB);
    return fuel;
}

/* The mask with fuel work units at most. */
static gram_mask_status mask_run(gram_grammar *g, const gram_vocab *gv, const gram_state *s, uint32_t *mask,
                                 const atomic_bool *cancel, int64_t fuel) {
    size_t words = gram_mask_words(gv);
    memset(mask, 0, words * sizeof *mask);
    if (!g->cache) g->cache = calloc(1, sizeof *g->cache);
    if (!g->cache || !cache_fit(g->cache, gv)) return GRAM_MASK_OK; /* out of memory: nothing allowed but the end */
    gram_mask_cache *c = g->cache;
    budget_start(c, fuel, cancel);
    walk w = {.g = g, .gv = gv, .c = c, .mask = mask};
    /* a stack near the depth bound: the cut's walk (its depth counted from the cut) could
     * allow a token that pushes past the bound, so it is walked whole instead */
    const int32_t near = g->limits.max_depth - 8 * (gv->max_len + 1);
    for (int32_t t = 0; t < s->st.n_tops; t++) {
        if (charge(c, 1)) break;
        if (s->st.nodes[s->st.tops[t]].depth >= near) {
            if (charge(c, s->st.n_nodes / 16)) break;
            c->arena.n_nodes = 0;
            for (int32_t i = 0; i < s->st.n_nodes; i++) {
                const gram_node n = s->st.nodes[i];
                if (gram__node_push(&c->arena, n.pos, n.parent) < 0) return GRAM_MASK_OK;
            }
            walk whole = w;
            whole.record_deps = false;
            walk_node(&whole, 0, 0, &s->st.tops[t], 1, true);
            continue;
        }
        int32_t key[GRAM_KEY_NODES + 1];
        int32_t key_len = stack_key(&s->st, s->st.tops[t], key);
        const cache_entry *e = entry_for(&w, key, key_len);
        if (c->status != GRAM_MASK_OK) break;
        if (!e) continue;
        if (e->accepted)
            for (size_t i = 0; i < words; i++) mask[i] |= e->accepted[i];
        for (int32_t i = 0; i < e->n_ids; i++) mask[e->ids[i] >> 5] |= 1u << (e->ids[i] & 31);
        if (!e->n_deps) continue;
        /* the whole stack, in the arena the dependent walks extend */
        if (charge(c, s->st.n_nodes / 16)) break;
        c->arena.n_nodes = 0;
        for (int32_t i = 0; i < s->st.n_nodes; i++) {
            const gram_node n = s->st.nodes[i];
            if (gram__node_push(&c->arena, n.pos, n.parent) < 0) return GRAM_MASK_OK;
        }
        for (int32_t d = 0; d < e->n_deps && c->status == GRAM_MASK_OK; d++) {
            c->arena.n_nodes = s->st.n_nodes;
            walk_dep(&w, s, s->st.tops[t], e, &e->deps[d]);
        }
        if (c->status != GRAM_MASK_OK) break;
    }
    if (s->st.accepting)
        for (int32_t id = 0; id < gv->n_vocab; id++)
            if (gv->eog[id]) mask[id >> 5] |= 1u << (id & 31);
    gram_mask_status st = c->status;
    c->last_work = c->work;
    budget_start(c, 0, NULL);
    return st;
}

gram_mask_status gram_mask_run(gram_grammar *g, const gram_vocab *gv, const gram_state *s, uint32_t *mask,
                               const atomic_bool *cancel) {
    return mask_run(g, gv, s, mask, cancel, mask_fuel(g, gv));
}

void gram_mask(gram_grammar *g, const gram_vocab *gv, const gram_state *s, uint32_t *mask) {
    (void)mask_run(g, gv, s, mask, NULL, INT64_MAX);
}

int64_t gram_mask_work(const gram_grammar *g) {
    return g->cache ? g->cache->last_work : 0;
}

int64_t gram_mask_walks(const gram_grammar *g) {
    return g->cache ? g->cache->walks : 0;
}

int32_t gram_mask_prepare(gram_grammar *g, const gram_vocab *gv) {
    if (!g->cache) g->cache = calloc(1, sizeof *g->cache);
    if (!g->cache || !cache_fit(g->cache, gv)) return 0; /* out of memory: masks walk lazily */
    gram_cut_key *keys;
    int32_t n = gram__cut_keys(g, GRAM_PREPARE_KEYS, &keys);
    walk w = {.g = g, .gv = gv, .c = g->cache};
    int32_t walked = 0;
    const int64_t fuel = mask_fuel(g, gv); /* the same per key as a mask's */
    int64_t left = PREPARE_FUEL_MASKS * fuel;
    for (int32_t i = 0; i < n && g->cache->bytes < GRAM_PREPARE_BYTES && left > 0; i++) {
        budget_start(g->cache, left < fuel ? left : fuel, NULL);
        const cache_entry *e = entry_for(&w, keys[i].pos, keys[i].len);
        left -= g->cache->work;
        if (!e) break; /* out of memory or over budget: the rest stay lazy */
        walked++;
        g->cache->n_prepared = g->cache->n_entries;
    }
    free(keys);
    return walked;
}

bool gram_state_advance_token(gram_state *s, const gram_vocab *gv, int32_t id) {
    if (id < 0 || id >= gv->n_vocab) return false;
    if (gv->eog[id]) return s->st.accepting;
    uint32_t len = token_len(gv, id);
    if (len == 0) return false;
    return gram_state_advance(s, gv->bytes + gv->off[id], len);
}

/* gram_dfa.c: the cut stacks' walks as a lazily built DFA. A mask's cached walk
 * (gram_mask.c) moves a small set of cut stacks (grammar_internal.h: the top nodes over
 * GRAM_CONTEXT) one byte per trie edge, ~150,000 edges for a state inside a JSON string.
 * The stacks after a byte depend only on the stacks before it and which of them take the
 * byte, and the same few sets recur at every depth (a string's character loop comes back
 * to itself), so each distinct set is a state, found again by its structure, with a
 * 256-entry transition table filled on first use: a walk step is then one table load.
 *
 * States are shared by every cut walk of one grammar (the string loop under any key is
 * the same state). The DFA starts over when it grows past its bounds, between walks.
 *
 * DESIGN (threads). Owned by the grammar's mask cache: gram_mask's thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* Bounds past which the DFA starts over (checked between walks): states, and nodes. */
enum { DFA_MAX_STATES = 8192, DFA_MAX_NODES = 1 << 20 };
enum { DFA_UNKNOWN = -2, DFA_DEAD = -1 };

typedef struct dfa_state {
    int32_t first, n; /* its stacks: tops[first .. first + n), nodes in the arena */
    bool accepting, needs_context;
    uint64_t hash;
    bool loop_known;
    gram_byteset loop; /* the bytes that lead back to this state (once loop_known) */
    int32_t next[256]; /* DFA_UNKNOWN, DFA_DEAD or a state */
} dfa_state;

struct gram_dfa {
    gram_stacks arena; /* every state's nodes; never truncated but by a restart */
    int32_t *tops;     /* every state's stack tops, state by state */
    int32_t n_tops;
    size_t cap_tops;
    dfa_state *states;
    int32_t n_states;
    size_t cap_states;
    int32_t *index; /* (index_cap) open addressing by hash, -1 empty */
    int32_t index_cap;
    gram_stacks out; /* the tops of the state being made */
    int64_t work;    /* work units of the transitions made (gram__dfa_work) */
};

gram_dfa *gram__dfa_create(void) {
    return calloc(1, sizeof(gram_dfa));
}

void gram__dfa_destroy(gram_dfa *d) {
    if (!d) return;
    gram__stacks_free(&d->arena);
    gram__stacks_free(&d->out);
    free(d->tops);
    free(d->states);
    free(d->index);
    free(d);
}

void gram__dfa_trim(gram_dfa *d) {
    if (d->n_states < DFA_MAX_STATES && d->arena.n_nodes < DFA_MAX_NODES) return;
    d->arena.n_nodes = 0;
    d->n_tops = 0;
    d->n_states = 0;
    if (d->index) memset(d->index, -1, sizeof *d->index * (size_t)d->index_cap);
}

/* A chain's positions from its top down to the cut (or the real bottom), hashed. */
static uint64_t chain_hash(const gram_stacks *a, int32_t at, uint64_t h) {
    for (; at >= 0; at = a->nodes[at].parent) h = (h ^ (uint64_t)(uint32_t)a->nodes[at].pos) * 1099511628211ull;
    return (h ^ (uint64_t)(uint32_t)at) * 1099511628211ull; /* GRAM_CONTEXT or -1 */
}

static uint64_t set_hash(const gram_stacks *a, const int32_t *tops, int32_t n, bool accepting, bool context) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(accepting | context << 1);
    for (int32_t i = 0; i < n; i++) h = chain_hash(a, tops[i], h);
    return h;
}

static bool index_grow(gram_dfa *d) {
    if (2 * (d->n_states + 1) <= d->index_cap) return true;
    int32_t cap = d->index_cap ? d->index_cap * 2 : 1024;
    int32_t *t = malloc(sizeof *t * (size_t)cap);
    if (!t) return false;
    memset(t, -1, sizeof *t * (size_t)cap);
    for (int32_t s = 0; s < d->n_states; s++) {
        uint64_t at = d->states[s].hash & (uint64_t)(cap - 1);
        while (t[at] >= 0) at = (at + 1) & (uint64_t)(cap - 1);
        t[at] = s;
    }
    free(d->index);
    d->index = t;
    d->index_cap = cap;
    return true;
}

/* The state of the stacks in d->out (their nodes appended to the arena from mark on): an
 * existing one of the same structure (the new nodes dropped), or a new one; -1 when out of
 * memory. */
static int32_t state_of(gram_dfa *d, int32_t mark) {
    const gram_stacks *o = &d->out;
    uint64_t h = set_hash(&d->arena, o->tops, o->n_tops, o->accepting, o->needs_context);
    if (!index_grow(d)) return -1;
    uint64_t at = h & (uint64_t)(d->index_cap - 1);
    for (; d->index[at] >= 0; at = (at + 1) & (uint64_t)(d->index_cap - 1)) {
        const dfa_state *s = &d->states[d->index[at]];
        if (s->hash != h || s->n != o->n_tops || s->accepting != o->accepting || s->needs_context != o->needs_context)
            continue;
        bool same = true;
        for (int32_t i = 0; i < s->n && same; i++)
            same = gram__chains_equal(&d->arena, d->tops[s->first + i], o->tops[i]);
        if (same) {
            d->arena.n_nodes = mark;
            return d->index[at];
        }
    }
    if (!sp_grow((void **)&d->states, &d->cap_states, d->n_states + 1, sizeof *d->states) ||
        !sp_grow((void **)&d->tops, &d->cap_tops, d->n_tops + o->n_tops + 1, sizeof *d->tops))
        return -1;
    dfa_state *s = &d->states[d->n_states];
    s->first = d->n_tops;
    s->n = o->n_tops;
    s->accepting = o->accepting;
    s->needs_context = o->needs_context;
    s->hash = h;
    s->loop_known = false;
    for (int i = 0; i < 256; i++) s->next[i] = DFA_UNKNOWN;
    if (o->n_tops) memcpy(d->tops + d->n_tops, o->tops, sizeof *d->tops * (size_t)o->n_tops);
    d->n_tops += o->n_tops;
    d->index[at] = d->n_states;
    return d->n_states++;
}

int32_t gram__dfa_start(gram_dfa *d, const int32_t *key, int32_t key_len) {
    const int32_t mark = d->arena.n_nodes;
    int32_t parent = key[key_len - 1];
    for (int32_t i = key_len - 2; i >= 0; i--) {
        parent = gram__node_push(&d->arena, key[i], parent);
        if (parent < 0) return -1;
    }
    d->out.n_tops = 0;
    d->out.accepting = d->out.needs_context = d->out.overflow = false;
    if (d->out.cap_tops < 1) {
        if (!sp_grow((void **)&d->out.tops, &d->out.cap_tops, 1, sizeof *d->out.tops)) return -1;
    }
    d->out.tops[d->out.n_tops++] = parent;
    return state_of(d, mark);
}

int32_t gram__dfa_next(gram_dfa *d, const gram_grammar *g, int32_t s, uint8_t b) {
    int32_t t = d->states[s].next[b];
    if (t != DFA_UNKNOWN) return t;
    const int32_t mark = d->arena.n_nodes;
    d->out.n_tops = 0;
    d->out.accepting = d->out.needs_context = d->out.overflow = false;
    /* d->tops may move while expanding: the state's tops are read by index */
    bool took = false;
    d->out.steps = 0;
    for (int32_t i = 0; i < d->states[s].n; i++) {
        const gram_node n = d->arena.nodes[d->tops[d->states[s].first + i]];
        if (!gram_byteset_has(&g->sets[g->elems[n.pos].arg], b)) continue;
        took = true;
        gram__expand(g, &d->arena, n.pos + 1, n.parent, &d->out);
    }
    d->work += 1 + d->states[s].n + d->out.steps + 2 * d->out.n_tops; /* tried, expanded, deduped and hashed */
    if (!took || (d->out.n_tops == 0 && !d->out.accepting && !d->out.needs_context)) {
        d->arena.n_nodes = mark;
        t = DFA_DEAD;
    } else {
        if (d->out.n_tops > 1) gram__dedupe(&d->out, &d->arena);
        t = state_of(d, mark);
        if (t < 0) return DFA_DEAD; /* out of memory: the token stays out (never a wrong one in) */
    }
    d->states[s].next[b] = t;
    return t;
}

int64_t gram__dfa_work(const gram_dfa *d) {
    return d->work;
}

bool gram__dfa_continues(const gram_dfa *d, int32_t s) {
    return d->states[s].n > 0;
}

bool gram__dfa_needs_context(const gram_dfa *d, int32_t s) {
    return d->states[s].needs_context;
}

const gram_byteset *gram__dfa_bytes(const gram_dfa *d, const gram_grammar *g, int32_t s, gram_byteset *any) {
    memset(any, 0, sizeof *any);
    for (int32_t i = 0; i < d->states[s].n; i++) {
        const gram_byteset *set = &g->sets[g->elems[d->arena.nodes[d->tops[d->states[s].first + i]].pos].arg];
        for (int k = 0; k < 4; k++) any->bits[k] |= set->bits[k];
    }
    return any;
}

bool gram__dfa_loops_over(gram_dfa *d, const gram_grammar *g, int32_t s, const gram_byteset *bytes) {
    if (!d->states[s].loop_known) {
        gram_byteset any, loop = {{0}};
        gram__dfa_bytes(d, g, s, &any);
        for (int b = 0; b < 256; b++)
            if (gram_byteset_has(&any, (uint8_t)b) && gram__dfa_next(d, g, s, (uint8_t)b) == s)
                loop.bits[b >> 6] |= 1ull << (b & 63);
        d->states[s].loop = loop; /* states may have moved: indexed again */
        d->states[s].loop_known = true;
    }
    const gram_byteset *loop = &d->states[s].loop;
    for (int k = 0; k < 4; k++)
        if (bytes->bits[k] & ~loop->bits[k]) return false;
    return true;
}

/* gram_match.c: the automaton's states. A state is the set of stacks (grammar_internal.h)
 * the bytes so far leave alive; a byte keeps the stacks whose top set holds it, each
 * moved one element on and expanded until its top is a byte set again.
 *
 * Expansion never loops: gram_compile refuses left recursion, so a run of rule entries
 * without a byte is finite, and every return pops a node. A reference that is the last
 * element of its alternative returns straight to its caller's caller (no node for it),
 * so X* (S ::= X S | empty) keeps its stack flat however long the run. Paths past
 * limits.max_depth nodes or limits.max_stacks stacks are dropped (a nesting bound: the
 * state stays valid, it only admits less), and so are the paths past a budget of
 * expansion steps per byte, which an ambiguous grammar's many empty paths could
 * otherwise multiply without end.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

void gram__stacks_free(gram_stacks *s) {
    free(s->nodes);
    free(s->tops);
    memset(s, 0, sizeof *s);
}

int32_t gram__node_push(gram_stacks *s, int32_t pos, int32_t parent) {
    if (!sp_grow((void **)&s->nodes, &s->cap_nodes, (size_t)s->n_nodes + 1, sizeof *s->nodes)) return -1;
    int32_t depth = parent >= 0 ? s->nodes[parent].depth + 1 : 1;
    s->nodes[s->n_nodes] = (gram_node){pos, parent, depth};
    return s->n_nodes++;
}

static bool top_push(gram_stacks *out, int32_t node) {
    if (!sp_grow((void **)&out->tops, &out->cap_tops, (size_t)out->n_tops + 1, sizeof *out->tops)) return false;
    out->tops[out->n_tops++] = node;
    return true;
}

/* Expansion steps one advance may take: enough for every stack it may keep, many times over. */
static int32_t expand_budget(const gram_grammar *g) {
    return 64 * g->limits.max_stacks + 1024;
}

void gram__expand(const gram_grammar *g, gram_stacks *arena, int32_t pos, int32_t parent, gram_stacks *out) {
    if (++out->steps > expand_budget(g)) {
        out->overflow = true;
        return;
    }
    const gram_elem e = g->elems[pos];
    switch ((gram_elem_kind)e.kind) {
    case GRAM_BYTES: {
        int32_t depth = parent >= 0 ? arena->nodes[parent].depth + 1 : 1;
        if (out->n_tops >= g->limits.max_stacks || depth > g->limits.max_depth) {
            out->overflow = true;
            return;
        }
        int32_t n = gram__node_push(arena, pos, parent);
        if (n < 0 || !top_push(out, n)) out->overflow = true;
        return;
    }
    case GRAM_END:
        if (parent == GRAM_CONTEXT) {
            out->needs_context = true;
        } else if (parent < 0) {
            out->accepting = true;
        } else {
            const gram_node p = arena->nodes[parent];
            gram__expand(g, arena, p.pos, p.parent, out);
        }
        return;
    case GRAM_RULE: {
        int32_t ret = parent; /* the last element of its alternative: return to our caller */
        if (g->elems[pos + 1].kind != GRAM_END) {
            ret = gram__node_push(arena, pos + 1, parent);
            if (ret < 0) {
                out->overflow = true;
                return;
            }
        }
        for (int32_t a = g->rule_first_alt[e.arg]; a < g->rule_first_alt[e.arg + 1]; a++)
            gram__expand(g, arena, g->alts[a], ret, out);
        return;
    }
    }
}

bool gram__advance_byte(const gram_grammar *g, gram_stacks *arena, const int32_t *tops, int32_t n_tops, uint8_t b,
                        gram_stacks *out) {
    bool took = false;
    out->steps = 0;
    for (int32_t i = 0; i < n_tops; i++) {
        const gram_node n = arena->nodes[tops[i]];
        if (!gram_byteset_has(&g->sets[g->elems[n.pos].arg], b)) continue;
        took = true;
        gram__expand(g, arena, n.pos + 1, n.parent, out);
    }
    return took;
}

bool gram__chains_equal(const gram_stacks *arena, int32_t a, int32_t b) {
    while (a >= 0 && b >= 0) {
        if (a == b) return true;
        if (arena->nodes[a].pos != arena->nodes[b].pos) return false;
        a = arena->nodes[a].parent;
        b = arena->nodes[b].parent;
    }
    return a == b;
}

/* Equal chains hash alike: their top nodes' positions and their depth. */
static uint32_t chain_prefix_hash(const gram_stacks *arena, int32_t at) {
    uint32_t h = 2166136261u ^ (uint32_t)arena->nodes[at].depth;
    for (int i = 0; i < 4 && at >= 0; i++, at = arena->nodes[at].parent)
        h = (h ^ (uint32_t)arena->nodes[at].pos) * 16777619u;
    return h;
}

/* Tops past which duplicates are found through a hash of each chain's top (a mask's
 * whole-stack walk may dedupe hundreds of stacks at every trie edge: pairwise, that was
 * quadratic). */
enum { DEDUPE_HASHED_FROM = 16, DEDUPE_HASH_SLOTS = 2048 };

void gram__dedupe(gram_stacks *s, const gram_stacks *arena) {
    int32_t m = 0;
    if (s->n_tops < DEDUPE_HASHED_FROM || 2 * s->n_tops > DEDUPE_HASH_SLOTS) {
        for (int32_t i = 0; i < s->n_tops; i++) {
            bool seen = false;
            for (int32_t j = 0; j < m && !seen; j++) seen = gram__chains_equal(arena, s->tops[i], s->tops[j]);
            if (!seen) s->tops[m++] = s->tops[i];
        }
        s->n_tops = m;
        return;
    }
    uint32_t slots = 32;
    while (slots < 2 * (uint32_t)s->n_tops) slots *= 2;
    int32_t kept[DEDUPE_HASH_SLOTS]; /* indices into the kept tops, -1 empty */
    memset(kept, -1, sizeof *kept * slots);
    for (int32_t i = 0; i < s->n_tops; i++) {
        const int32_t top = s->tops[i];
        uint32_t at = chain_prefix_hash(arena, top) & (slots - 1);
        bool seen = false;
        for (; kept[at] >= 0 && !seen; at = (at + 1) & (slots - 1))
            seen = gram__chains_equal(arena, top, s->tops[kept[at]]);
        if (seen) continue;
        kept[at] = m;
        s->tops[m++] = top;
    }
    s->n_tops = m;
}

/* Copies the chains of tops (nodes in from) into a fresh arena, sharing the nodes they
 * shared; false when out of memory. */
static bool compact(gram_stacks *st, const int32_t *tops, int32_t n_tops) {
    gram_stacks fresh = {0};
    int32_t *map = malloc(sizeof *map * (size_t)(st->n_nodes ? st->n_nodes : 1));
    int32_t *path = NULL;
    int32_t cap_path = 0;
    bool ok = map != NULL;
    if (ok) memset(map, -1, sizeof *map * (size_t)st->n_nodes);
    for (int32_t i = 0; i < n_tops && ok; i++) {
        int32_t n_path = 0; /* the unmapped nodes of this chain, top first */
        for (int32_t at = tops[i]; at >= 0 && map[at] < 0; at = st->nodes[at].parent) {
            if (n_path == cap_path) {
                cap_path = cap_path ? cap_path * 2 : 32;
                int32_t *p = realloc(path, sizeof *p * (size_t)cap_path);
                if (!p) {
                    ok = false;
                    break;
                }
                path = p;
            }
            path[n_path++] = at;
        }
        for (int32_t k = n_path - 1; k >= 0 && ok; k--) {
            const gram_node n = st->nodes[path[k]];
            int32_t idx = gram__node_push(&fresh, n.pos, n.parent >= 0 ? map[n.parent] : n.parent);
            if (idx < 0) ok = false;
            map[path[k]] = idx;
        }
        if (ok && !top_push(&fresh, map[tops[i]])) ok = false;
    }
    free(map);
    free(path);
    if (!ok) {
        gram__stacks_free(&fresh);
        return false;
    }
    fresh.accepting = st->accepting;
    gram__stacks_free(st);
    *st = fresh;
    return true;
}

sp_status gram_state_create(const gram_grammar *g, gram_state **out) {
    *out = NULL;
    gram_state *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(SP_ERR_NOMEM, "grammar: out of memory for a state");
    s->g = g;
    gram_stacks tops = {0};
    for (int32_t a = g->rule_first_alt[g->root]; a < g->rule_first_alt[g->root + 1]; a++)
        gram__expand(g, &s->st, g->alts[a], -1, &tops);
    gram__dedupe(&tops, &s->st);
    s->st.accepting = tops.accepting;
    s->truncated = tops.overflow;
    bool ok = compact(&s->st, tops.tops, tops.n_tops);
    gram__stacks_free(&tops);
    if (!ok) {
        gram_state_destroy(s);
        return sp_fail(SP_ERR_NOMEM, "grammar: out of memory for a state");
    }
    *out = s;
    return SP_OK;
}

void gram_state_destroy(gram_state *s) {
    if (!s) return;
    gram__stacks_free(&s->st);
    free(s);
}

sp_status gram_state_clone(const gram_state *s, gram_state **out) {
    *out = NULL;
    gram_state *c = calloc(1, sizeof *c);
    if (!c) return sp_fail(SP_ERR_NOMEM, "grammar: out of memory for a state");
    c->g = s->g;
    c->truncated = s->truncated;
    c->st.accepting = s->st.accepting;
    c->st.nodes = malloc(sizeof *c->st.nodes * (size_t)(s->st.n_nodes ? s->st.n_nodes : 1));
    c->st.tops = malloc(sizeof *c->st.tops * (size_t)(s->st.n_tops ? s->st.n_tops : 1));
    if (!c->st.nodes || !c->st.tops) {
        gram_state_destroy(c);
        return sp_fail(SP_ERR_NOMEM, "grammar: out of memory for a state");
    }
    if (s->st.n_nodes) memcpy(c->st.nodes, s->st.nodes, sizeof *c->st.nodes * (size_t)s->st.n_nodes);
    if (s->st.n_tops) memcpy(c->st.tops, s->st.tops, sizeof *c->st.tops * (size_t)s->st.n_tops);
    c->st.cap_nodes = s->st.n_nodes ? s->st.n_nodes : 1;
    c->st.n_nodes = s->st.n_nodes;
    c->st.cap_tops = s->st.n_tops ? s->st.n_tops : 1;
    c->st.n_tops = s->st.n_tops;
    *out = c;
    return SP_OK;
}

bool gram_state_advance(gram_state *s, const uint8_t *bytes, size_t n) {
    if (n == 0) return true;
    const int32_t mark = s->st.n_nodes;
    gram_stacks cur = {0}, next = {0};
    bool ok = top_push(&cur, -1); /* sized below */
    cur.n_tops = 0;
    for (int32_t i = 0; i < s->st.n_tops && ok; i++) ok = top_push(&cur, s->st.tops[i]);
    bool accepting = false;
    for (size_t i = 0; i < n && ok; i++) {
        next.n_tops = 0;
        next.accepting = false;
        ok = gram__advance_byte(s->g, &s->st, cur.tops, cur.n_tops, bytes[i], &next);
        if (next.overflow) s->truncated = true;
        if (!ok) break;
        gram__dedupe(&next, &s->st);
        accepting = next.accepting;
        if (next.n_tops == 0 && (i + 1 < n || !next.accepting)) ok = false; /* nothing could follow */
        gram_stacks t = cur;
        cur = next;
        next = t;
    }
    if (ok) ok = compact(&s->st, cur.tops, cur.n_tops);
    if (ok) s->st.accepting = accepting;
    if (!ok) s->st.n_nodes = mark; /* the nodes this call added; tops untouched */
    gram__stacks_free(&cur);
    gram__stacks_free(&next);
    return ok;
}

bool gram_state_accepting(const gram_state *s) {
    return s->st.accepting;
}

bool gram_state_truncated(const gram_state *s) {
    return s->truncated;
}

bool gram_state_finished(const gram_state *s) {
    return s->st.accepting && s->st.n_tops == 0;
}

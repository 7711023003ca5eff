/* gram_keys.c: every cut stack a grammar's states can hold, found from the grammar alone.
 *
 * gram_mask.c caches its walks under cut stacks: a stack's top GRAM_KEY_NODES positions
 * and what lies past them (grammar_internal.h). Which cut stacks can occur follows from
 * where each rule is referenced, without running the grammar:
 *   - a stack's top is a GRAM_BYTES element p of some rule R;
 *   - the node below a node in rule R is a return position: the element after a
 *     non-final reference to R. A final reference pushes nothing (gram_match.c's tail
 *     call), so R's frames then sit on whatever lay below the referencing rule's frame:
 *     R inherits that rule's return positions, transitively;
 *   - R's frames may sit on the bottom (parent -1) when R is the root or the root
 *     reaches it by final references alone.
 * The keys are every such chain cut at GRAM_KEY_NODES positions. Some may never occur
 * (a frame the grammar's bytes can never reach with that parent); none that occurs is
 * missed, so walking them all ahead (gram_mask_prepare) leaves no first walk for later.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* One rule's possible parents: return positions, and whether the bottom is one. */
typedef struct parents {
    int32_t *pos;
    int32_t n;
    size_t cap;
    bool bottom;
} parents;

/* Steps (parent comparisons) the analysis may take: a grammar whose rules are referenced
 * from very many places (`root ::= x x x ...`) would make the duplicate checks
 * quadratic; past this it is not prepared at all and its masks walk lazily. */
#define GRAM_KEYS_MAX_WORK ((int64_t)1 << 24)

typedef struct rule_refs {
    int64_t work;        /* steps taken, against GRAM_KEYS_MAX_WORK */
    int32_t *rule_of;    /* (n_elems) the rule each element belongs to */
    int32_t *tail_from;  /* per rule, the rules that end an alternative with a reference to it */
    int32_t *tail_first; /* (n_rules + 1) rule r's tail callers: tail_from[tail_first[r] .. tail_first[r + 1]) */
    parents *up;         /* (n_rules) */
} rule_refs;

static void refs_free(rule_refs *rr, int32_t n_rules) {
    if (rr->up)
        for (int32_t r = 0; r < n_rules; r++) free(rr->up[r].pos);
    free(rr->up);
    free(rr->rule_of);
    free(rr->tail_from);
    free(rr->tail_first);
}

static int32_t alt_end(const gram_grammar *g, int32_t a) {
    return a + 1 < g->n_alts ? g->alts[a + 1] : g->n_elems;
}

/* false when out of memory or past the work bound */
static bool add_parent(rule_refs *rr, parents *p, int32_t pos) {
    rr->work += p->n + 1;
    if (rr->work > GRAM_KEYS_MAX_WORK) return false;
    for (int32_t i = 0; i < p->n; i++)
        if (p->pos[i] == pos) return true;
    if (!sp_grow((void **)&p->pos, &p->cap, p->n + 1, sizeof *p->pos)) return false;
    p->pos[p->n++] = pos;
    return true;
}

/* Each rule's element range, its tail callers, and its direct return positions. */
static bool refs_build(const gram_grammar *g, rule_refs *rr) {
    const int32_t nr = g->n_rules;
    rr->rule_of = malloc(sizeof *rr->rule_of * (size_t)(g->n_elems ? g->n_elems : 1));
    rr->tail_first = calloc((size_t)nr + 2, sizeof *rr->tail_first);
    rr->up = calloc((size_t)(nr ? nr : 1), sizeof *rr->up);
    if (!rr->rule_of || !rr->tail_first || !rr->up) return false;
    for (int32_t r = 0; r < nr; r++)
        for (int32_t a = g->rule_first_alt[r]; a < g->rule_first_alt[r + 1]; a++)
            for (int32_t p = g->alts[a]; p < alt_end(g, a); p++) rr->rule_of[p] = r;
    /* count, then place, the tail references (a counting sort by the referenced rule) */
    for (int32_t p = 0; p < g->n_elems; p++)
        if (g->elems[p].kind == GRAM_RULE && g->elems[p + 1].kind == GRAM_END) rr->tail_first[g->elems[p].arg + 2]++;
    for (int32_t r = 0; r < nr; r++) rr->tail_first[r + 2] += rr->tail_first[r + 1];
    rr->tail_from = malloc(sizeof *rr->tail_from * (size_t)(rr->tail_first[nr + 1] + 1));
    if (!rr->tail_from) return false;
    for (int32_t p = 0; p < g->n_elems; p++) {
        if (g->elems[p].kind != GRAM_RULE) continue;
        int32_t callee = g->elems[p].arg;
        if (g->elems[p + 1].kind == GRAM_END)
            rr->tail_from[rr->tail_first[callee + 1]++] = rr->rule_of[p];
        else if (!add_parent(rr, &rr->up[callee], p + 1))
            return false;
    }
    rr->up[g->root].bottom = true;
    return true;
}

/* Closes every rule's parents over its tail callers (a fixpoint: the tail graph may loop,
 * as X* does). */
static bool refs_close(const gram_grammar *g, rule_refs *rr) {
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < g->n_rules; r++) {
            parents *me = &rr->up[r];
            for (int32_t i = rr->tail_first[r]; i < rr->tail_first[r + 1]; i++) {
                const parents *caller = &rr->up[rr->tail_from[i]];
                if (caller->bottom && !me->bottom) me->bottom = changed = true;
                for (int32_t k = 0; k < caller->n; k++) {
                    int32_t before = me->n;
                    if (!add_parent(rr, me, caller->pos[k])) return false;
                    if (me->n != before) changed = true;
                }
            }
        }
    }
    return true;
}

typedef struct key_list {
    gram_cut_key *keys;
    int32_t n, max;
    size_t cap;
} key_list;

static bool key_add(key_list *kl, const int32_t *key, int32_t len) {
    if (kl->n >= kl->max) return false;
    if (!sp_grow((void **)&kl->keys, &kl->cap, kl->n + 1, sizeof *kl->keys)) return false;
    gram_cut_key *k = &kl->keys[kl->n++];
    memcpy(k->pos, key, sizeof *key * (size_t)len);
    k->len = len;
    return true;
}

/* The keys that continue key[0 .. len) (positions so far, the last in a frame of rule r). */
static bool keys_below(const rule_refs *rr, int32_t r, int32_t *key, int32_t len, key_list *kl) {
    const parents *p = &rr->up[r];
    if (len == GRAM_KEY_NODES) { /* cut here: the bottom, or anything (the context) below */
        if (p->bottom) {
            key[len] = -1;
            if (!key_add(kl, key, len + 1)) return false;
        }
        if (p->n > 0) {
            key[len] = GRAM_CONTEXT;
            if (!key_add(kl, key, len + 1)) return false;
        }
        return true;
    }
    if (p->bottom) {
        key[len] = -1;
        if (!key_add(kl, key, len + 1)) return false;
    }
    for (int32_t i = 0; i < p->n; i++) {
        key[len] = p->pos[i];
        if (!keys_below(rr, rr->rule_of[p->pos[i]], key, len + 1, kl)) return false;
    }
    return true;
}

int32_t gram__cut_keys(const gram_grammar *g, int32_t max_keys, gram_cut_key **out) {
    *out = NULL;
    rule_refs rr = {0};
    key_list kl = {.max = max_keys};
    bool ok = refs_build(g, &rr) && refs_close(g, &rr); /* else: none (too big, or out of memory) */
    for (int32_t p = 0; p < g->n_elems && ok; p++) {
        if (g->elems[p].kind != GRAM_BYTES) continue;
        int32_t key[GRAM_KEY_NODES + 1] = {p};
        ok = keys_below(&rr, rr.rule_of[p], key, 1, &kl);
    }
    refs_free(&rr, g->n_rules);
    *out = kl.keys;
    return kl.n;
}

/* grammar_internal.h: what grammar/'s files share. The compiled grammar, shared by gram_gbnf.c (which builds it),
 * gram_match.c (states) and gram_mask.c (token masks).
 *
 * A compiled grammar is a list of rules; each rule a list of alternatives; each
 * alternative a run of elements in one flat array, ended by a GRAM_END element:
 *   GRAM_BYTES  one byte from a 256-bit set (sets[arg])
 *   GRAM_RULE   rule arg, then what follows
 *   GRAM_END    the alternative is over: return to whoever referenced the rule
 * Literals are byte runs; a character class over code points is a rule whose
 * alternatives are the UTF-8 byte sequences of its members; repetitions are rules too.
 *
 * A matcher stack is a chain of nodes: the top node's pos is a GRAM_BYTES element (the
 * next byte must be in its set); every node below holds a return position (the element
 * after a GRAM_RULE) and its own parent. An empty chain (parent -1 reached by GRAM_END)
 * means the whole root rule is complete.
 */
#ifndef SP_GRAMMAR_INTERNAL_H
#define SP_GRAMMAR_INTERNAL_H
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "common/grow.h"
#include "common/strbuf.h"
#include "grammar/grammar.h"

typedef enum gram_elem_kind { GRAM_BYTES, GRAM_RULE, GRAM_END } gram_elem_kind;

typedef struct gram_elem {
    uint8_t kind;
    int32_t arg; /* GRAM_BYTES: set index; GRAM_RULE: rule index */
} gram_elem;

typedef struct gram_byteset {
    uint64_t bits[4];
} gram_byteset;

static inline bool gram_byteset_has(const gram_byteset *s, uint8_t b) {
    return (s->bits[b >> 6] >> (b & 63)) & 1;
}

typedef struct gram_mask_cache gram_mask_cache;

struct gram_grammar {
    gram_elem *elems; /* (n_elems) every alternative's run, each ended by GRAM_END */
    int32_t n_elems;
    int32_t *alts; /* (n_alts) the first element of each alternative */
    int32_t n_alts;
    int32_t *rule_first_alt; /* (n_rules + 1) rule r's alternatives: alts[first[r] .. first[r + 1]) */
    int32_t n_rules;
    gram_byteset *sets; /* (n_sets) */
    int32_t n_sets;
    int32_t root;
    gram_limits limits;
    gram_mask_cache *cache; /* gram_mask.c's, created on first use */
    atomic_int refs;
};

/* A parent that stands for "whatever the real stack holds below": gram_mask.c's
 * context-free walks stop where a stack would pop into it. */
#define GRAM_CONTEXT (-2)

/* One node of a matcher stack. */
typedef struct gram_node {
    int32_t pos;    /* top: a GRAM_BYTES element; below: a return position */
    int32_t parent; /* the node below, -1 at the bottom */
    int32_t depth;  /* nodes in the chain, this one included */
} gram_node;

/* A growable node arena with the stack tops that point into it. */
typedef struct gram_stacks {
    gram_node *nodes;
    int32_t n_nodes;
    size_t cap_nodes;
    int32_t *tops;
    int32_t n_tops;
    size_t cap_tops;
    bool accepting;     /* some stack completed the root rule */
    bool overflow;      /* a bound (depth, stacks) was hit while expanding */
    bool needs_context; /* some stack popped into GRAM_CONTEXT */
    int32_t steps;      /* expansion steps of the current advance (bounded: an ambiguous grammar's
                           empty paths can multiply; past the bound the rest are dropped as overflow) */
} gram_stacks;

void gram__stacks_free(gram_stacks *s);
/* Pushes node (pos, parent) and returns its index (-1: out of memory). */
int32_t gram__node_push(gram_stacks *s, int32_t pos, int32_t parent);
/* Every stack that continues from element pos with the chain parent below it, expanded
 * until its top is a GRAM_BYTES element, appended to out->tops (completed stacks set
 * out->accepting). Nodes go into arena (which may be out itself). */
void gram__expand(const gram_grammar *g, gram_stacks *arena, int32_t pos, int32_t parent, gram_stacks *out);
/* Advances every top of in (nodes in arena) over byte b into out (nodes in arena); true
 * when some stack took the byte. */
bool gram__advance_byte(const gram_grammar *g, gram_stacks *arena, const int32_t *tops, int32_t n_tops, uint8_t b,
                        gram_stacks *out);
/* Whether the chains from nodes a and b (in arena) hold the same positions to the bottom. */
bool gram__chains_equal(const gram_stacks *arena, int32_t a, int32_t b);
/* Drops duplicate stacks from s->tops (chains equal node by node). */
void gram__dedupe(gram_stacks *s, const gram_stacks *arena);

struct gram_state {
    const gram_grammar *g;
    gram_stacks st; /* its own arena; tops are the live stacks */
    bool truncated; /* a bound dropped paths (gram_state_truncated) */
};

void gram__mask_cache_destroy(gram_mask_cache *c);

/* Nodes of a stack that key gram_mask.c's cache: deeper keys mean fewer dependent tokens
 * but more keys. Three cover a JSON string's character loop and its closing quote, so
 * every string of a grammar shares one entry. */
enum { GRAM_KEY_NODES = 3 };

/* A cut stack: positions top first, then what lies past the cut (GRAM_CONTEXT, or -1 for
 * the bottom); len counts both. */
typedef struct gram_cut_key {
    int32_t pos[GRAM_KEY_NODES + 1];
    int32_t len;
} gram_cut_key;

/* Every cut stack g's states may hold (gram_keys.c), at most max_keys of them, into *out
 * (caller frees); returns how many (fewer than all when max_keys or memory ran out). */
int32_t gram__cut_keys(const gram_grammar *g, int32_t max_keys, gram_cut_key **out);

/* ---- the cut stacks' DFA (gram_dfa.c): states are sets of cut stacks, found again by
 * their structure; transitions filled on first use ---- */
typedef struct gram_dfa gram_dfa;
gram_dfa *gram__dfa_create(void);
void gram__dfa_destroy(gram_dfa *d);
/* Starts over when past its bounds; call between walks (state ids die). */
void gram__dfa_trim(gram_dfa *d);
/* The state of the cut stack key (positions top first, then the parent past the cut:
 * GRAM_CONTEXT or -1); -1 when out of memory. */
int32_t gram__dfa_start(gram_dfa *d, const int32_t *key, int32_t key_len);
/* The state after byte b from state s; -1 when no stack takes b, or nothing stays alive
 * (no stack, not accepting, no context to return to). */
int32_t gram__dfa_next(gram_dfa *d, const gram_grammar *g, int32_t s, uint8_t b);
bool gram__dfa_continues(const gram_dfa *d, int32_t s); /* stacks remain: bytes may follow */
/* Work units the transitions made so far took (a mask's budget charges them, gram_mask.c). */
int64_t gram__dfa_work(const gram_dfa *d);
bool gram__dfa_needs_context(const gram_dfa *d, int32_t s); /* some stack popped into the context */
/* Whether every byte in bytes leads from s back to s (a loop: a string's characters). */
bool gram__dfa_loops_over(gram_dfa *d, const gram_grammar *g, int32_t s, const gram_byteset *bytes);
/* The bytes some stack of s takes, into *any (returned). */
const gram_byteset *gram__dfa_bytes(const gram_dfa *d, const gram_grammar *g, int32_t s, gram_byteset *any);

/* ==== JSON Schema to GBNF: what the two halves of gram_schema_to_gbnf share ====
 * gram_schema.c walks the schema (objects, arrays, $ref, allOf/anyOf/oneOf, naming rules)
 * and gram_schema_types.c writes the leaves (the shared rules, JSON text, numbers,
 * strings and patterns, enum and const, type) and tells schemas apart for oneOf. */

/* JSON types as bits; a number is JT_INT when whole, else JT_FRAC. */
enum { JT_NULL = 1, JT_BOOL = 2, JT_OBJECT = 4, JT_ARRAY = 8, JT_STRING = 16, JT_INT = 32, JT_FRAC = 64, JT_ANY = 127 };

/* Shared rules, written once at the end when used. */
enum {
    SR_WS,
    SR_CHAR,
    SR_STRING,
    SR_NUMBER,
    SR_INTEGER,
    SR_BOOLEAN,
    SR_NULL,
    SR_VALUE,
    SR_OBJECT,
    SR_ARRAY,
    SR_DATE,
    SR_TIME,
    SR_DATE_TIME,
    SR_UUID,
    SR_EMAIL,
    SR_URI,
    SR_COUNT
};

typedef struct gram_schema_rule {
    char *name, *body;
} gram_schema_rule;

/* A $ref target, its rule, and where the target is (for messages; NULL: the root). */
typedef struct gram_schema_ref {
    const json_t *target;
    size_t rule;
    char *ptr;
} gram_schema_ref;

/* One conversion's state; one thread. */
typedef struct gram_schema_ctx {
    const json_t *root;
    bool compact;
    int32_t max_depth;
    gram_schema_rule *rules; /* rules[0] is root */
    size_t n_rules, cap_rules;
    gram_schema_ref *refs; /* refs[0] is the root schema ("#") */
    size_t n_refs, cap_refs;
    size_t *edges; /* pairs (a, b): ref a's rule may begin with ref b's, nothing consumed */
    size_t n_edges, cap_edges;
    long cur_ref;  /* the ref whose rule's start is being written; -1 inside an object or array */
    json_t *names; /* every rule name taken */
    unsigned long next_id;
    unsigned shared; /* bits (1 << SR_*) of the shared rules in use */
    strbuf ptr;      /* JSON pointer of the schema being visited */
} gram_schema_ctx;

static inline void gram__put(strbuf *o, const char *s) {
    strbuf_append(o, s, strlen(s));
}

/* ---- gram_schema.c ---- */

/* Fails with "<pointer>/<kw>: <message>" (kw NULL: "<pointer>: <message>") and returns st. */
sp_status gram__schema_fail(gram_schema_ctx *c, sp_status st, const char *kw, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
sp_status gram__schema_nomem(void);
/* Whether kw is a keyword that changes validity and that gram_schema enforces. */
bool gram__schema_handled(const char *kw);
/* s with its $refs followed (at most max_depth of them), or NULL where one points nowhere. */
const json_t *gram__schema_resolve(gram_schema_ctx *c, const json_t *s);

/* ---- gram_schema_types.c ---- */

/* Appends shared rule r's name (marking it used); appends the whitespace between tokens. */
void gram__schema_use(gram_schema_ctx *c, strbuf *o, int r);
void gram__schema_ws(gram_schema_ctx *c, strbuf *o);
/* The shared rules in used (and those they use) as GBNF lines. */
void gram__schema_write_shared(strbuf *out, unsigned used, bool compact);

uint32_t gram__utf8_get(const char *s, size_t n, size_t *i);
void gram__gbnf_cp(strbuf *b, uint32_t cp, bool in_class);
void gram__gbnf_literal(strbuf *o, const char *s, size_t n);
void gram__json_escape_cp(strbuf *b, uint32_t cp);
void gram__json_string_text(strbuf *b, const char *s, size_t n);
unsigned gram__value_types(const json_t *v);
bool gram__values_equal(const json_t *a, const json_t *b);

sp_status gram__schema_count(gram_schema_ctx *c, const json_t *s, const char *kw, long long *n);
void gram__schema_quant(strbuf *o, long long lo, long long hi);
unsigned gram__schema_types_of(const json_t *type);
unsigned gram__schema_infer(const json_t *s);
sp_status gram__schema_types(gram_schema_ctx *c, const json_t *s, unsigned *types);

/* Each appends the body of a rule for s as that kind of value (at c->ptr). */
sp_status gram__schema_number(gram_schema_ctx *c, const json_t *s, bool fraction, strbuf *o);
sp_status gram__schema_string(gram_schema_ctx *c, const json_t *s, strbuf *o);
sp_status gram__schema_enum(gram_schema_ctx *c, const json_t *s, strbuf *o);

/* True when no document matches both a and b, as far as their types, const/enum values
 * and (objects) a property both require with disjoint schemas tell; false when unsure. */
bool gram__schema_disjoint(gram_schema_ctx *c, const json_t *a, const json_t *b, int depth);

#endif

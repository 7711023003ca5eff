/* grammar.h: constrained decoding. A constraint (GBNF, JSON Schema, a regex, a choice
 * list) becomes GBNF text, which compiles to a byte-level pushdown automaton; a
 * sequence's position in it is a gram_state; the tokens that may come next are a bitset
 * over the vocabulary (gram_mask).
 *
 *   JSON Schema --gram_schema_to_gbnf--+
 *   regex -------gram_regex_to_gbnf----+--> GBNF text --gram_compile--> gram_grammar
 *   choices -----gram_choice_to_gbnf---+
 *
 * Everything is bytes: a character class over code points compiles to the UTF-8 byte
 * sequences of its members, so a token that ends inside a multi-byte character is
 * judged by the bytes it has, like any other token.
 *
 * DESIGN (threads). Compiling (gram_compile, the *_to_gbnf functions) is pure and runs on
 * any thread (the server's HTTP threads). A compiled gram_grammar is immutable except its
 * mask cache, which only gram_mask touches: one thread at a time may call gram_mask on a
 * grammar (the scheduler's mask worker, scheduler/masks.c). gram_state and gram_vocab belong to their caller.
 */
#ifndef SP_GRAMMAR_H
#define SP_GRAMMAR_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

typedef struct gram_grammar gram_grammar;
typedef struct gram_state gram_state;
typedef struct gram_vocab gram_vocab;

/* Bounds on what one constraint may compile to; past them, SP_ERR_RANGE naming the bound. */
typedef struct gram_limits {
    int32_t max_rules;     /* rules after repetitions and UTF-8 classes are expanded */
    int32_t max_elements;  /* elements of all rules together */
    int32_t max_depth;     /* nesting of a state's stack (JSON depth and the like) */
    int32_t max_stacks;    /* alternatives a state may follow at once (an ambiguous grammar's) */
    int64_t max_mask_fuel; /* work units one gram_mask_run may spend (0: GRAM_DEFAULT_MASK_FUEL) */
} gram_limits;

/* The work one token mask may do, in work units: a trie edge tried by a walk, a stack
 * expansion step, a stack weighed for duplicates (gram_mask.c). Measured on the default
 * model's 49,152 tokens (bench_grammar): a prepared grammar's mask spends tens to a few
 * thousand, a first (lazy) walk of a JSON Schema's string about 30,000, a whole-stack walk
 * of free text (a state near the depth bound) about 2.5 million; a hostile constraint (a
 * bounded repetition of an ambiguous loop the compiler could not rewrite) billions. At
 * 10-20 ns a unit an over-budget mask stops within 40-80 ms. */
#define GRAM_DEFAULT_MASK_FUEL ((int64_t)4000000)

gram_limits gram_limits_default(void);

/* ---- compiling ----------------------------------------------------------------------- */

/* GBNF (llama.cpp's grammar format: `name ::= ...`, "literals", [classes], [^negated],
 * ., ( ), |, * + ? {m} {m,} {m,n}, # comments) with the start rule `root`. On success
 * *out is the compiled grammar (caller owns; free with gram_grammar_destroy). Errors are
 * SP_ERR_INVALID_ARG with "line L, column C: what is wrong" (an undefined rule, a left
 * recursion, a bad escape, ...), or SP_ERR_RANGE when a limit is passed. */
sp_status gram_compile(const char *gbnf, size_t len, const gram_limits *limits, gram_grammar **out);
/* Another reference to g (any thread); returns g. Each reference is dropped with
 * gram_grammar_destroy, which frees the grammar with the last one. */
gram_grammar *gram_grammar_share(gram_grammar *g);
void gram_grammar_destroy(gram_grammar *g);

/* How gram_schema_to_gbnf lays out JSON. */
typedef struct gram_schema_options {
    bool compact;          /* true: no whitespace at all, as OpenAI's strict mode emits it; false: optional
                              whitespace between tokens (bounded) */
    int32_t max_depth;     /* nesting of schemas ($ref chains and subschemas) past which: SP_ERR_RANGE */
    const char *root_name; /* the start rule's name (NULL: "root"), so the grammar can sit inside another */
} gram_schema_options;

gram_schema_options gram_schema_options_default(void);

/* A JSON Schema (a jansson object, borrowed) as GBNF text with start rule `root` (caller
 * owns; free()). A keyword that would change which documents are valid and that the
 * grammar cannot enforce is SP_ERR_UNSUPPORTED; a malformed schema SP_ERR_INVALID_ARG;
 * both messages start with the JSON pointer of the offending place ("/properties/age/
 * minimum: ..."). */
sp_status gram_schema_to_gbnf(const json_t *schema, const gram_schema_options *opt, char **gbnf);

/* A regular expression (the subset in gram_regex.c: literals, escapes, classes, groups,
 * alternation, quantifiers, ^ and $ at the ends) as a GBNF expression matching exactly
 * the strings it matches, whole (caller owns; free()). Errors: SP_ERR_INVALID_ARG or
 * SP_ERR_UNSUPPORTED with "position N: what is wrong". */
sp_status gram_regex_to_gbnf_expr(const char *pattern, size_t len, char **expr);

/* A whole GBNF grammar (`root ::= ...`) for the regex. */
sp_status gram_regex_to_gbnf(const char *pattern, size_t len, char **gbnf);

/* A GBNF grammar whose language is exactly the n strings (n >= 1; caller owns; free()). */
sp_status gram_choice_to_gbnf(const char *const *choices, size_t n, char **gbnf);

/* ---- a sequence's position ----------------------------------------------------------- */

/* The state before any byte (caller owns; free with gram_state_destroy). The grammar is
 * borrowed and must outlive the state. */
sp_status gram_state_create(const gram_grammar *g, gram_state **out);
void gram_state_destroy(gram_state *s);
sp_status gram_state_clone(const gram_state *s, gram_state **out);

/* Consumes n bytes: true and the state advanced when the grammar allows them from here,
 * false and the state unchanged when it does not. */
bool gram_state_advance(gram_state *s, const uint8_t *bytes, size_t n);

/* True when the bytes so far form a complete string of the language (generation may end). */
bool gram_state_accepting(const gram_state *s);

/* True when nothing more may follow (accepting, and no byte continues it). */
bool gram_state_finished(const gram_state *s);

/* True when a bound (limits.max_depth, max_stacks, or the expansion budget a very
 * ambiguous grammar exhausts) has dropped paths since the state was created, even in an
 * advance that failed: from then on it may admit less than the grammar. */
bool gram_state_truncated(const gram_state *s);

/* ---- tokens -------------------------------------------------------------------------- */

/* The vocabulary's tokens as bytes, in a trie (caller owns; free with gram_vocab_destroy).
 * Built once per model. Tokens that render as no bytes (control and special tokens) are
 * never allowed under a grammar, except end-of-generation ids while accepting. */
sp_status gram_vocab_create(const tok_vocab *v, gram_vocab **out);
void gram_vocab_destroy(gram_vocab *gv);

/* 32-bit words in a mask: (n_vocab + 31) / 32. */
size_t gram_mask_words(const gram_vocab *gv);

/* How a mask ended. */
typedef enum gram_mask_status {
    GRAM_MASK_OK,          /* mask holds the allowed tokens */
    GRAM_MASK_OVER_BUDGET, /* the walk spent limits.max_mask_fuel work units and stopped */
    GRAM_MASK_CANCELLED    /* *cancel became true and the walk stopped */
} gram_mask_status;

/* The tokens that may come next from s: bit (id % 32) of mask[id / 32] (mask has
 * gram_mask_words words). End-of-generation ids are set exactly when s is accepting.
 *
 * BUDGET. Every mask has a bound on its work (the grammar's limits.max_mask_fuel, in work
 * units: trie edges tried, expansion steps, stacks weighed; scaled up for vocabularies over
 * 65,536 tokens, whose walks are longer), llguidance's lexer fuel: past
 * it the walk stops and returns GRAM_MASK_OVER_BUDGET, and the mask then holds only some of
 * the allowed tokens (never a refused one): the caller ends the sequence with an error
 * rather than sample from it. cancel (NULL: never), read with relaxed loads every few
 * thousand units, stops the walk with GRAM_MASK_CANCELLED: the scheduler's mask worker
 * abandons a mask the step stopped waiting for. A stopped walk caches nothing, so the same
 * mask asked again costs the same. */
gram_mask_status gram_mask_run(gram_grammar *g, const gram_vocab *gv, const gram_state *s, uint32_t *mask,
                               const atomic_bool *cancel);

/* The exact mask however long it takes: gram_mask_run without a budget or a cancel flag,
 * for tests, fuzzers and tools (the server masks with gram_mask_run). */
void gram_mask(gram_grammar *g, const gram_vocab *gv, const gram_state *s, uint32_t *mask);

/* Walks ahead, into g's mask cache, the context-free part of the mask of every cut stack
 * g's states may hold (gram_mask.c; the first GRAM_PREPARE_KEYS of them), so gram_mask
 * meets no first walk later: the compile-time precomputation of XGrammar. Costs a few
 * milliseconds for a typical JSON Schema; each key's walk has one mask's budget and all of
 * them 64 masks' (BUDGET), past which the rest stay lazy. It touches the cache: call it
 * before g is shared with the thread that masks. Returns the keys walked. */
int32_t gram_mask_prepare(gram_grammar *g, const gram_vocab *gv);

/* The work units the last gram_mask_run on g spent (sizing the budget). Same thread rule
 * as gram_mask. */
int64_t gram_mask_work(const gram_grammar *g);

/* The context-free walks g's masks have made so far (gram_mask_prepare's included): each is
 * a first walk of a cut stack. Same thread rule as gram_mask. */
int64_t gram_mask_walks(const gram_grammar *g);

/* Consumes token id's bytes (an end-of-generation id consumes nothing and needs an
 * accepting state): false, and s unchanged, when the token is not allowed. */
bool gram_state_advance_token(gram_state *s, const gram_vocab *gv, int32_t id);

#endif

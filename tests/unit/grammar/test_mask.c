/* Tests for grammar/gram_mask.c: on real vocabularies (the default model's 49,152 BPE
 * tokens, stories260K's SPM tokens), every token the mask allows really continues a
 * string of the language and every token it refuses cannot, at states reached by
 * walking the grammar with the mask's own choices; end-of-generation is allowed exactly
 * in accepting states. The cached context-free walks are checked against brute force
 * over the whole vocabulary, in contexts that share a key but differ below it; a
 * prepared grammar (gram_mask_prepare) gives the same masks and walks nothing later. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tests/unit/testdata.h"

static tok_vocab *load_vocab(const char *path) {
    TESTDATA_REQUIRE(path);
    gguf_file *f = NULL;
    tok_vocab *v = NULL;
    cr_assert_eq(gguf_open(path, &f), SP_OK, "%s", sp_last_error());
    cr_assert_eq(tok_vocab_load(f, &v), SP_OK, "%s", sp_last_error());
    gguf_close(f);
    return v;
}

/* Brute force: the token's bytes advance a copy of s (EOG: s accepting). */
static bool token_ok(const gram_state *s, const gram_vocab *gv, int32_t id) {
    gram_state *c = NULL;
    cr_assert_eq(gram_state_clone(s, &c), SP_OK);
    bool ok = gram_state_advance_token(c, gv, id);
    gram_state_destroy(c);
    return ok;
}

/* Advances a and b by one of the n allowed tokens, picked pseudo-randomly from *seed;
 * false when there is none. */
static bool advance_both(gram_state *a, gram_state *b, const gram_vocab *gv, const int32_t *allowed, int32_t n,
                         unsigned *seed) {
    if (n == 0) return false;
    *seed = *seed * 1103515245u + 12345u;
    int32_t pick = allowed[(*seed >> 8) % (unsigned)n];
    cr_assert(gram_state_advance_token(a, gv, pick));
    cr_assert(gram_state_advance_token(b, gv, pick));
    return true;
}

/* Compares the mask with brute force at every state of a walk that picks allowed tokens
 * (pseudo-randomly from seed) for up to steps tokens, and the mask of the same grammar
 * compiled again and prepared (gp) with it; returns how many states were checked. */
static int check_walk(gram_grammar *g, gram_grammar *gp, const tok_vocab *v, const gram_vocab *gv, unsigned seed,
                      int steps) {
    int32_t n_vocab = tok_vocab_size(v);
    size_t words = gram_mask_words(gv);
    uint32_t *mask = calloc(words, sizeof *mask), *prepared = calloc(words, sizeof *prepared);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)n_vocab);
    gram_state *s = NULL, *sp = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    cr_assert_eq(gram_state_create(gp, &sp), SP_OK);
    int checked = 0;
    for (int step = 0; step < steps; step++) {
        gram_mask(g, gv, s, mask);
        gram_mask(gp, gv, sp, prepared);
        int32_t n_allowed = 0;
        for (int32_t id = 0; id < n_vocab; id++) {
            bool in_mask = (mask[id >> 5] >> (id & 31)) & 1;
            bool ok = token_ok(s, gv, id);
            cr_assert_eq(in_mask, ok, "step %d: token %d (%s): mask %d, brute force %d", step, id,
                         tok_token_text(v, id), in_mask, ok);
            cr_assert_eq(in_mask, (prepared[id >> 5] >> (id & 31)) & 1,
                         "step %d: token %d (%s): the prepared mask differs", step, id, tok_token_text(v, id));
            if (in_mask && !tok_is_eog(v, id)) allowed[n_allowed++] = id;
        }
        checked++;
        if (!advance_both(s, sp, gv, allowed, n_allowed, &seed)) break;
    }
    gram_state_destroy(s);
    gram_state_destroy(sp);
    free(mask);
    free(prepared);
    free(allowed);
    return checked;
}

static const char *JSONISH = "root   ::= object\n"
                             "object ::= \"{\" ws ( pair ( ws \",\" ws pair )* )? ws \"}\"\n"
                             "pair   ::= string ws \":\" ws value\n"
                             "value  ::= string | number | object | array | \"true\" | \"false\" | \"null\"\n"
                             "array  ::= \"[\" ws ( value ( ws \",\" ws value )* )? ws \"]\"\n"
                             "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
                             "number ::= \"-\"? [0-9]{1,6} ( \".\" [0-9]{1,4} )?\n"
                             "ws     ::= [ \\n]{0,3}\n";

static void check_grammar(const char *model, const char *gbnf, int walks, int steps) {
    tok_vocab *v = load_vocab(model);
    gram_vocab *gv = NULL;
    cr_assert_eq(gram_vocab_create(v, &gv), SP_OK);
    gram_grammar *g = NULL, *gp = NULL;
    cr_assert_eq(gram_compile(gbnf, strlen(gbnf), NULL, &g), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gram_compile(gbnf, strlen(gbnf), NULL, &gp), SP_OK);
    int32_t keys = gram_mask_prepare(gp, gv);
    cr_assert_gt(keys, 0);
    cr_assert_eq(gram_mask_walks(gp), keys);
    int checked = 0;
    for (int w = 0; w < walks; w++) checked += check_walk(g, gp, v, gv, 17u + (unsigned)w, steps);
    cr_assert(checked >= walks, "checked %d states", checked);
    /* every cut stack the walks met was among the prepared ones */
    cr_assert_eq(gram_mask_walks(gp), keys, "%lld cut stacks walked after the %d prepared",
                 (long long)(gram_mask_walks(gp) - keys), keys);
    gram_grammar_destroy(g);
    gram_grammar_destroy(gp);
    gram_vocab_destroy(gv);
    tok_vocab_destroy(v);
}

Test(gram_mask, json_on_the_default_model) {
    check_grammar(testdata_default_model(), JSONISH, 3, 12);
}

Test(gram_mask, choices_and_utf8_on_the_default_model) {
    check_grammar(testdata_default_model(),
                  "root ::= (\"caf\\u00e9\" | \"na\\u00efve \" [α-ω]{2,4} | \"yes\" | \"no\") \"!\"?\n", 4, 8);
}

Test(gram_mask, spm_vocabulary) {
    char path[512];
    testdata_path(path, sizeof path, "models/stories260K.gguf");
    check_grammar(path, JSONISH, 2, 10);
    check_grammar(path, "root ::= \"Once upon a time\" [ a-z]{0,12} \".\"\n", 2, 10);
}

/* The same cut stack (string content) under different contexts: a string that is a
 * value in an object (may close with `",` or `"}`) and one in an array (`",` or `"]`). */
Test(gram_mask, cached_walks_depend_on_the_context_below_the_cut) {
    tok_vocab *v = load_vocab(testdata_default_model());
    gram_vocab *gv = NULL;
    cr_assert_eq(gram_vocab_create(v, &gv), SP_OK);
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile(JSONISH, strlen(JSONISH), NULL, &g), SP_OK);
    const char *prefixes[] = {"{\"a\":\"x", "{\"a\":[\"x", "{\"a\":{\"b\":[[\"x", "{\"a\":\"x"};
    size_t words = gram_mask_words(gv);
    uint32_t *mask = calloc(words, sizeof *mask);
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        gram_state *s = NULL;
        cr_assert_eq(gram_state_create(g, &s), SP_OK);
        cr_assert(gram_state_advance(s, (const uint8_t *)prefixes[p], strlen(prefixes[p])));
        gram_mask(g, gv, s, mask);
        for (int32_t id = 0; id < tok_vocab_size(v); id++)
            cr_assert_eq((mask[id >> 5] >> (id & 31)) & 1, token_ok(s, gv, id), "prefix %s, token %d (%s)", prefixes[p],
                         id, tok_token_text(v, id));
        gram_state_destroy(s);
    }
    free(mask);
    gram_grammar_destroy(g);
    gram_vocab_destroy(gv);
    tok_vocab_destroy(v);
}

/* Near the nesting bound the mask walks whole stacks: it never allows a token that would
 * push past --grammar-max-depth (the advance refuses those), at every depth up to it. */
Test(gram_mask, the_depth_bound_agrees_with_the_advance) {
    tok_vocab *v = load_vocab(testdata_default_model());
    gram_vocab *gv = NULL;
    cr_assert_eq(gram_vocab_create(v, &gv), SP_OK);
    gram_limits lim = gram_limits_default();
    lim.max_depth = 24;
    const char *text = "root ::= \"[\" root \"]\" | \"x\"\n";
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile(text, strlen(text), &lim, &g), SP_OK);
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    uint32_t *mask = calloc(gram_mask_words(gv), sizeof *mask);
    int depth = 0;
    for (; depth < 40; depth++) {
        gram_mask(g, gv, s, mask);
        for (int32_t id = 0; id < tok_vocab_size(v); id++)
            cr_assert_eq((mask[id >> 5] >> (id & 31)) & 1, token_ok(s, gv, id), "depth %d, token %d (%s)", depth, id,
                         tok_token_text(v, id));
        if (!gram_state_advance(s, (const uint8_t *)"[", 1)) break;
    }
    cr_assert(depth > 4 && depth < 40, "opened %d", depth);
    gram_mask(g, gv, s, mask);
    free(mask);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
    gram_vocab_destroy(gv);
    tok_vocab_destroy(v);
}

/* Grammars from JSON Schemas (recursive $ref, unions, arrays, formats, both whitespace
 * layouts) and a regex, prepared: long random walks meet no cut stack the preparation
 * missed, and every mask equals the lazily walked grammar's. */
Test(gram_mask, prepared_grammars_walk_nothing_later) {
    tok_vocab *v = load_vocab(testdata_default_model());
    gram_vocab *gv = NULL;
    cr_assert_eq(gram_vocab_create(v, &gv), SP_OK);
    const char *schemas[] = {
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"string\"},\"kids\":{\"type\":"
        "\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}}}},\"$ref\":\"#/$defs/node\"}",
        "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"when\":{\"type\":"
        "\"string\",\"format\":\"date-time\"},\"n\":{\"type\":[\"integer\",\"null\"]},\"tags\":{\"type\":\"array\","
        "\"prefixItems\":[{\"enum\":[\"a\",\"b\"]},{\"type\":\"number\"}]},\"any\":{}},\"required\":[\"id\",\"n\"]}",
        "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":5},{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},"
        "\"maxItems\":3},{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}]}",
    };
    size_t words = gram_mask_words(gv);
    uint32_t *lazy_mask = calloc(words, sizeof *lazy_mask), *mask = calloc(words, sizeof *mask);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)tok_vocab_size(v));
    int grammars = 0, states = 0;
    for (size_t i = 0; i < 2 * (sizeof schemas / sizeof *schemas) + 1; i++) {
        char *gbnf = NULL;
        if (i < 2 * (sizeof schemas / sizeof *schemas)) {
            json_t *schema = json_loads(schemas[i / 2], 0, NULL);
            cr_assert(schema);
            gram_schema_options opt = gram_schema_options_default();
            opt.compact = i % 2 == 0;
            cr_assert_eq(gram_schema_to_gbnf(schema, &opt, &gbnf), SP_OK, "%s", sp_last_error());
            json_decref(schema);
        } else {
            const char *re = "(\\+\\d{1,3} )?\\(?\\d{3}\\)?[ .-]\\d{3}[ .-]\\d{4}( x\\d+)?|[a-z]+@[a-z]+\\.(com|org)";
            cr_assert_eq(gram_regex_to_gbnf(re, strlen(re), &gbnf), SP_OK, "%s", sp_last_error());
        }
        gram_grammar *lazy = NULL, *g = NULL;
        cr_assert_eq(gram_compile(gbnf, strlen(gbnf), NULL, &lazy), SP_OK, "%s", sp_last_error());
        cr_assert_eq(gram_compile(gbnf, strlen(gbnf), NULL, &g), SP_OK);
        int32_t keys = gram_mask_prepare(g, gv);
        cr_assert_gt(keys, 0);
        for (unsigned walk = 0; walk < 6; walk++) {
            gram_state *sl = NULL, *s = NULL;
            cr_assert_eq(gram_state_create(lazy, &sl), SP_OK);
            cr_assert_eq(gram_state_create(g, &s), SP_OK);
            unsigned seed = 1000u * (unsigned)i + walk;
            for (int step = 0; step < 80; step++, states++) {
                gram_mask(lazy, gv, sl, lazy_mask);
                gram_mask(g, gv, s, mask);
                cr_assert_arr_eq(mask, lazy_mask, words * sizeof *mask, "grammar %zu, walk %u, step %d", i, walk, step);
                int32_t n_allowed = 0;
                for (int32_t id = 0; id < tok_vocab_size(v); id++)
                    if ((mask[id >> 5] >> (id & 31)) & 1 && !tok_is_eog(v, id)) allowed[n_allowed++] = id;
                if (!advance_both(sl, s, gv, allowed, n_allowed, &seed)) break;
            }
            gram_state_destroy(sl);
            gram_state_destroy(s);
        }
        cr_assert_eq(gram_mask_walks(g), keys, "grammar %zu: %lld cut stacks walked after the %d prepared: %s", i,
                     (long long)(gram_mask_walks(g) - keys), keys, gbnf);
        grammars++;
        gram_grammar_destroy(lazy);
        gram_grammar_destroy(g);
        free(gbnf);
    }
    cr_assert_eq(grammars, 7);
    cr_assert_gt(states, 7 * 20, "checked %d states", states);
    free(lazy_mask);
    free(mask);
    free(allowed);
    gram_vocab_destroy(gv);
    tok_vocab_destroy(v);
}

/* A rule referenced from very many places (`root ::= x x x ...`) would make the key
 * analysis quadratic: past its work bound the grammar is left unprepared (its masks walk
 * lazily) and preparing returns at once; the masks stay right. */
Test(gram_mask, a_grammar_too_large_to_analyse_is_left_lazy, .timeout = 20) {
    tok_vocab *v = load_vocab(testdata_default_model());
    gram_vocab *gv = NULL;
    cr_assert_eq(gram_vocab_create(v, &gv), SP_OK);
    enum { REFS = 60000 };
    char *text = malloc(16 + 2 * REFS + 32);
    size_t n = (size_t)sprintf(text, "root ::=");
    for (int i = 0; i < REFS; i++) n += (size_t)sprintf(text + n, " x");
    sprintf(text + n, "\nx ::= \"a\" | \"b\"\n");
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile(text, strlen(text), NULL, &g), SP_OK, "%s", sp_last_error());
    cr_assert_eq(gram_mask_prepare(g, gv), 0, "prepared although past the work bound");
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    uint32_t *mask = calloc(gram_mask_words(gv), sizeof *mask);
    gram_mask(g, gv, s, mask);
    for (int32_t id = 0; id < tok_vocab_size(v); id++)
        cr_assert_eq((mask[id >> 5] >> (id & 31)) & 1, token_ok(s, gv, id), "token %d (%s)", id, tok_token_text(v, id));
    free(mask);
    free(text);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
    gram_vocab_destroy(gv);
    tok_vocab_destroy(v);
}

/* ---- the budget (grammar.h, BUDGET) ---- */

static gram_grammar *compile_with_fuel(const char *gbnf, int64_t fuel) {
    gram_limits lim = gram_limits_default();
    lim.max_mask_fuel = fuel;
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile(gbnf, strlen(gbnf), &lim, &g), SP_OK, "%s", sp_last_error());
    return g;
}

/* A mask past its fuel stops and says so, holds no token the exact mask refuses, caches
 * nothing half-walked (the same mask asked again stops the same way; the exact one is
 * unchanged), and a cancel flag stops it too. Honest masks stay within the default. */
Test(gram_mask, a_mask_past_its_budget_stops_and_says_so, .timeout = 60) {
    tok_vocab *v = load_vocab(testdata_default_model());
    gram_vocab *gv = NULL;
    cr_assert_eq(gram_vocab_create(v, &gv), SP_OK);
    size_t words = gram_mask_words(gv);
    uint32_t *exact = calloc(words, sizeof *exact), *bounded = calloc(words, sizeof *bounded);
    /* a bounded repetition of a loop the compiler leaves as it is: ambiguous splits */
    const char *hostile = "root ::= ([^x]+){2} \"x\"\n";
    gram_grammar *g = compile_with_fuel(hostile, 20000);
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    for (int round = 0; round < 2; round++) {
        cr_assert_eq(gram_mask_run(g, gv, s, bounded, NULL), GRAM_MASK_OVER_BUDGET, "round %d", round);
        cr_assert_geq(gram_mask_work(g), 20000);
        cr_assert_lt(gram_mask_work(g), 20000 + 100000, "stops soon past the fuel: %lld", (long long)gram_mask_work(g));
    }
    gram_mask(g, gv, s, exact); /* no budget: the exact mask */
    size_t allowed = 0;
    for (size_t i = 0; i < words; i++) {
        cr_assert_eq(bounded[i] & ~exact[i], 0u, "word %zu: a refused token in the stopped mask", i);
        allowed += (size_t)__builtin_popcount(exact[i]);
    }
    cr_assert_gt(allowed, 1000, "the exact mask allows most tokens (%zu)", allowed);
    /* cancelled: stops at the first look at the flag */
    atomic_bool cancel = true;
    gram_grammar *g2 = compile_with_fuel(hostile, 0); /* 0: the default fuel */
    gram_state *s2 = NULL;
    cr_assert_eq(gram_state_create(g2, &s2), SP_OK);
    cr_assert_eq(gram_mask_run(g2, gv, s2, bounded, &cancel), GRAM_MASK_CANCELLED);
    cr_assert_lt(gram_mask_work(g2), 20000);
    /* an honest grammar: within the default budget, and the same mask as without one */
    const char *json = "root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws str ws \"}\"\n"
                       "str ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\nws ::= [ \\n]?\n";
    gram_grammar *h = compile_with_fuel(json, 0);
    gram_state *hs = NULL;
    cr_assert_eq(gram_state_create(h, &hs), SP_OK);
    const char *texts[2] = {"{ \"name\": \"Ada", "\" }"};
    for (int step = 0; step < 2; step++) {
        const char *text = texts[step];
        cr_assert_eq(gram_mask_run(h, gv, hs, bounded, NULL), GRAM_MASK_OK);
        cr_assert_lt(gram_mask_work(h), GRAM_DEFAULT_MASK_FUEL / 10);
        gram_mask(h, gv, hs, exact);
        cr_assert_eq(memcmp(bounded, exact, words * sizeof *exact), 0);
        cr_assert(gram_state_advance(hs, (const uint8_t *)text, strlen(text)));
    }
    gram_state_destroy(hs);
    gram_grammar_destroy(h);
    gram_state_destroy(s2);
    gram_grammar_destroy(g2);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
    free(exact);
    free(bounded);
    gram_vocab_destroy(gv);
    tok_vocab_destroy(v);
}

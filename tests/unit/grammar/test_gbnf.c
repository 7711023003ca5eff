/* Tests for grammar/gram_gbnf.c and gram_match.c: GBNF compiles to an automaton that
 * accepts exactly its language, byte by byte; bad grammars are errors with a line and
 * column. */
#include <criterion/criterion.h>
#include <string.h>

#include "grammar/grammar.h"

static gram_grammar *compile_ok(const char *gbnf) {
    gram_grammar *g = NULL;
    sp_status st = gram_compile(gbnf, strlen(gbnf), NULL, &g);
    cr_assert_eq(st, SP_OK, "compile failed: %s\n%s", sp_last_error(), gbnf);
    return g;
}

/* True when the whole string is in the language. */
static bool matches(const gram_grammar *g, const char *text) {
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    bool ok = gram_state_advance(s, (const uint8_t *)text, strlen(text)) && gram_state_accepting(s);
    gram_state_destroy(s);
    return ok;
}

/* True when text is a prefix of some string of the language. */
static bool prefix_ok(const gram_grammar *g, const char *text) {
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    bool ok = gram_state_advance(s, (const uint8_t *)text, strlen(text));
    gram_state_destroy(s);
    return ok;
}

static void expect_error(const char *gbnf, const char *needle) {
    gram_grammar *g = NULL;
    sp_status st = gram_compile(gbnf, strlen(gbnf), NULL, &g);
    cr_assert_neq(st, SP_OK, "compiled: %s", gbnf);
    cr_assert_null(g);
    cr_assert(strstr(sp_last_error(), needle) != NULL, "error '%s' lacks '%s'", sp_last_error(), needle);
}

Test(gram_gbnf, literals_and_alternatives) {
    gram_grammar *g = compile_ok("root ::= \"yes\" | \"no\" | \"maybe\"\n");
    cr_assert(matches(g, "yes"));
    cr_assert(matches(g, "no"));
    cr_assert(matches(g, "maybe"));
    cr_assert_not(matches(g, "ye"));
    cr_assert(prefix_ok(g, "ma"));
    cr_assert_not(prefix_ok(g, "yess"));
    cr_assert_not(matches(g, ""));
    gram_grammar_destroy(g);
}

Test(gram_gbnf, rules_groups_and_repetitions) {
    gram_grammar *g = compile_ok("# a list of numbers\n"
                                 "root ::= \"[\" ( num (\",\" num)* )? \"]\"\n"
                                 "num  ::= \"-\"? [0-9]+ (\".\" [0-9]{1,3})?\n");
    cr_assert(matches(g, "[]"));
    cr_assert(matches(g, "[1]"));
    cr_assert(matches(g, "[1,-22,3.125]"));
    cr_assert_not(matches(g, "[1,]"));
    cr_assert_not(matches(g, "[1.2345]"));
    cr_assert_not(matches(g, "[--1]"));
    gram_grammar_destroy(g);
}

Test(gram_gbnf, counted_repetitions) {
    gram_grammar *g = compile_ok("root ::= \"a\"{2} \"b\"{1,} \"c\"{0,2} \"d\"{2,3}\n");
    cr_assert(matches(g, "aabdd"));
    cr_assert(matches(g, "aabbbccddd"));
    cr_assert_not(matches(g, "abdd"));
    cr_assert_not(matches(g, "aadd"));
    cr_assert_not(matches(g, "aabcccdd"));
    cr_assert_not(matches(g, "aabdddd"));
    gram_grammar_destroy(g);
}

Test(gram_gbnf, multiline_rules_and_nested_groups) {
    gram_grammar *g = compile_ok("root ::= item (\n"
                                 "    \" \" item\n"
                                 "  )*\n"
                                 "item ::= \"x\" |\n"
                                 "         \"y\"\n");
    cr_assert(matches(g, "x y x"));
    cr_assert_not(matches(g, "x  y"));
    gram_grammar_destroy(g);
}

Test(gram_gbnf, classes_are_code_points_as_utf8) {
    gram_grammar *g = compile_ok("root ::= [α-ω]+ [^a-z\\u00e9] \".\"\n");
    cr_assert(matches(g, "αβγ€."));
    cr_assert(matches(g, "ωZ."));
    cr_assert_not(matches(g, "αé."));
    cr_assert_not(matches(g, "αa."));
    /* a prefix that ends inside a two-byte character is still a prefix */
    cr_assert(prefix_ok(g, "\xce"));
    cr_assert_not(prefix_ok(g, "\xc3\xa9"));
    gram_grammar_destroy(g);
}

Test(gram_gbnf, any_char_and_escapes) {
    gram_grammar *g = compile_ok("root ::= \"\\\"\" . \"\\x41\\n\\t\\u00e9\\\\\" \"\\\"\"\n");
    cr_assert(matches(g, "\"\xf0\x9f\x98\x80"
                         "A\n\t\xc3\xa9\\\""));
    cr_assert(matches(g, "\"zA\n\t\xc3\xa9\\\""));
    cr_assert_not(matches(g, "\"zzA\n\t\xc3\xa9\\\""));
    gram_grammar_destroy(g);
}

Test(gram_gbnf, right_recursion_stays_flat) {
    /* 20,000 characters of a right-recursive rule: no depth limit hit */
    gram_grammar *g = compile_ok("root ::= \"a\" root | \"b\"\nx ::= \"y\"\n");
    (void)g;
    gram_grammar_destroy(g);
    g = compile_ok("root ::= [a-z]* \"!\"\n");
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    for (int i = 0; i < 20000; i++) cr_assert(gram_state_advance(s, (const uint8_t *)"q", 1));
    cr_assert(gram_state_advance(s, (const uint8_t *)"!", 1));
    cr_assert(gram_state_accepting(s));
    cr_assert(gram_state_finished(s));
    gram_state_destroy(s);
    gram_grammar_destroy(g);
}

Test(gram_gbnf, nesting_past_the_depth_bound_is_refused) {
    gram_limits lim = gram_limits_default();
    lim.max_depth = 40;
    const char *text = "root ::= \"[\" root? \"]\"\n";
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile(text, strlen(text), &lim, &g), SP_OK);
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    int opened = 0;
    while (opened < 100 && gram_state_advance(s, (const uint8_t *)"[", 1)) opened++;
    cr_assert(opened > 10 && opened < 100, "opened %d", opened);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
}

Test(gram_gbnf, a_failed_advance_leaves_the_state) {
    gram_grammar *g = compile_ok("root ::= \"abc\" | \"abd\"\n");
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    cr_assert(gram_state_advance(s, (const uint8_t *)"a", 1));
    cr_assert_not(gram_state_advance(s, (const uint8_t *)"bx", 2));
    cr_assert(gram_state_advance(s, (const uint8_t *)"bd", 2));
    cr_assert(gram_state_accepting(s));
    gram_state *c = NULL;
    cr_assert_eq(gram_state_clone(s, &c), SP_OK);
    cr_assert(gram_state_accepting(c));
    cr_assert(gram_state_finished(c));
    gram_state_destroy(c);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
}

Test(gram_gbnf, errors_name_the_place) {
    expect_error("root ::= foo\n", "line 1, column 10: undefined rule foo");
    expect_error("item ::= \"x\"\n", "no rule named root");
    expect_error("root ::= \"x\"\nroot ::= \"y\"\n", "line 2, column 1: a rule defined twice: root");
    expect_error("root ::= root \"x\" | \"y\"\n", "left recursion in rule root");
    expect_error("root ::= (\"a\"?)* \"b\"\n", "left recursion");
    expect_error("root ::= \"abc\n", "line 1, column 10: a string literal without its closing quote");
    expect_error("root ::= [z-a]\n", "end comes before its start");
    expect_error("root ::= \"a\"{3,2}\n", "n less than m");
    expect_error("root ::= * \"a\"\n", "nothing before it to repeat");
    expect_error("root ::= \"\\q\"\n", "unknown escape");
    expect_error("root ::= (\"a\" \n", "without its closing )");
    expect_error("root := \"a\"\n", "expected ::=");
    expect_error("root ::= \"\\ud800\"\n", "not a Unicode scalar value");
    expect_error("root ::= [^\\x00-\\U0010FFFF]\n", "no string matches it");
}

Test(gram_gbnf, limits_are_errors) {
    gram_limits lim = gram_limits_default();
    lim.max_elements = 50;
    const char *text = "root ::= \"a\"{100}\n";
    gram_grammar *g = NULL;
    cr_assert_eq(gram_compile(text, strlen(text), &lim, &g), SP_ERR_RANGE);
    cr_assert(strstr(sp_last_error(), "more than 50 grammar elements") != NULL, "%s", sp_last_error());
}

Test(gram_gbnf, many_empty_paths_stay_bounded, .timeout = 10) {
    /* 2^40 ways to match nothing before the "a": the expansion budget cuts them short */
    gram_grammar *g = compile_ok("root ::= ( \"b\"? \"c\"? ){20} \"a\"\n");
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    cr_assert(gram_state_advance(s, (const uint8_t *)"b", 1));
    gram_state_destroy(s);
    cr_assert(matches(g, "bcba"));
    gram_grammar_destroy(g);
}

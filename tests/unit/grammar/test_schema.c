/* Tests for grammar/gram_schema.c and gram_schema_types.c: a JSON Schema becomes GBNF that
 * gram_compile accepts and whose language is the documents the schema accepts, laid out
 * compactly or with bounded whitespace; keywords a grammar cannot enforce and malformed
 * schemas are errors that start with the JSON pointer of the place. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

static json_t *load(const char *text) {
    json_error_t err;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &err);
    cr_assert_not_null(j, "bad test JSON (%s): %s", err.text, text);
    return j;
}

static gram_grammar *compile_schema_opt(const char *schema, const gram_schema_options *opt) {
    json_t *j = load(schema);
    char *gbnf = NULL;
    sp_status st = gram_schema_to_gbnf(j, opt, &gbnf);
    cr_assert_eq(st, SP_OK, "schema refused: %s\n%s", sp_last_error(), schema);
    gram_grammar *g = NULL;
    st = gram_compile(gbnf, strlen(gbnf), NULL, &g);
    cr_assert_eq(st, SP_OK, "GBNF does not compile: %s\n%s", sp_last_error(), gbnf);
    free(gbnf);
    json_decref(j);
    return g;
}

static gram_grammar *compile_schema(const char *schema) {
    return compile_schema_opt(schema, NULL);
}

static gram_grammar *compile_schema_ws(const char *schema) {
    gram_schema_options opt = gram_schema_options_default();
    opt.compact = false;
    return compile_schema_opt(schema, &opt);
}

/* True when the whole document is in the language. */
static bool accepts(const gram_grammar *g, const char *doc) {
    gram_state *s = NULL;
    cr_assert_eq(gram_state_create(g, &s), SP_OK);
    bool ok = gram_state_advance(s, (const uint8_t *)doc, strlen(doc)) && gram_state_accepting(s);
    gram_state_destroy(s);
    return ok;
}

#define ACCEPTS(g, doc) cr_assert(accepts(g, doc), "rejected: %s", doc)
#define REJECTS(g, doc) cr_assert_not(accepts(g, doc), "accepted: %s", doc)

static void expect_error(const char *schema, sp_status want, const char *prefix) {
    json_t *j = load(schema);
    char *gbnf = (char *)"untouched";
    sp_status st = gram_schema_to_gbnf(j, NULL, &gbnf);
    cr_assert_eq(st, want, "status %d, wanted %d (%s) for %s", st, want, sp_last_error(), schema);
    cr_assert_null(gbnf);
    cr_assert(strncmp(sp_last_error(), prefix, strlen(prefix)) == 0, "error '%s' does not start with '%s'",
              sp_last_error(), prefix);
    json_decref(j);
}

/* ---- types ----------------------------------------------------------------------- */

Test(gram_schema, defaults) {
    gram_schema_options o = gram_schema_options_default();
    cr_assert(o.compact);
    cr_assert_eq(o.max_depth, 32);
}

Test(gram_schema, primitive_types) {
    gram_grammar *g = compile_schema("{\"type\":\"string\"}");
    ACCEPTS(g, "\"\"");
    ACCEPTS(g, "\"a \\\"b\\\" \\u00e9 \\n\"");
    ACCEPTS(g, "\"h\xc3\xa9llo\"");
    REJECTS(g, "\"a\nb\"");
    REJECTS(g, "\"\\x\"");
    REJECTS(g, "\"open");
    REJECTS(g, "1");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"integer\"}");
    ACCEPTS(g, "0");
    ACCEPTS(g, "-42");
    ACCEPTS(g, "1234567890123456"); /* 16 digits */
    REJECTS(g, "12345678901234567");
    REJECTS(g, "01");
    REJECTS(g, "1.5");
    REJECTS(g, "+1");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"number\"}");
    ACCEPTS(g, "0");
    ACCEPTS(g, "-0.5");
    ACCEPTS(g, "3.25e-10");
    ACCEPTS(g, "1E+300");
    REJECTS(g, ".5");
    REJECTS(g, "1.");
    REJECTS(g, "1e");
    REJECTS(g, "1e1234");
    REJECTS(g, "0.12345678901234567"); /* 17 fraction digits */
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"boolean\"}");
    ACCEPTS(g, "true");
    ACCEPTS(g, "false");
    REJECTS(g, "null");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"null\"}");
    ACCEPTS(g, "null");
    REJECTS(g, "nul");
    REJECTS(g, "0");
    gram_grammar_destroy(g);
}

Test(gram_schema, type_unions_and_nullable) {
    gram_grammar *g = compile_schema("{\"type\":[\"string\",\"null\"]}");
    ACCEPTS(g, "\"x\"");
    ACCEPTS(g, "null");
    REJECTS(g, "1");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":[\"integer\",\"boolean\"],\"minimum\":5}");
    ACCEPTS(g, "5");
    ACCEPTS(g, "true");
    REJECTS(g, "4");
    REJECTS(g, "\"5\"");
    gram_grammar_destroy(g);
}

Test(gram_schema, any_value) {
    const char *schemas[] = {"{}", "true",
                             "{\"title\":\"t\",\"description\":\"d\",\"examples\":[1],\"default\":2,"
                             "\"$schema\":\"x\",\"$comment\":\"c\",\"deprecated\":false}"};
    for (size_t i = 0; i < 3; i++) {
        gram_grammar *g = compile_schema(schemas[i]);
        ACCEPTS(g, "{\"a\":[1,\"b\",null,{\"c\":true}],\"d\":-1.5e3}");
        ACCEPTS(g, "\"s\"");
        ACCEPTS(g, "[]");
        ACCEPTS(g, "false");
        REJECTS(g, "{\"a\":}");
        REJECTS(g, "[1,]");
        REJECTS(g, "{\"a\" : 1}"); /* compact: no whitespace */
        gram_grammar_destroy(g);
    }
}

/* ---- objects ---------------------------------------------------------------------- */

Test(gram_schema, object_required_and_optional) {
    gram_grammar *g = compile_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                                     "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"}},"
                                     "\"required\":[\"b\"],\"additionalProperties\":false}");
    ACCEPTS(g, "{\"b\":\"x\"}");
    ACCEPTS(g, "{\"a\":1,\"b\":\"x\"}");
    ACCEPTS(g, "{\"b\":\"x\",\"c\":true}");
    ACCEPTS(g, "{\"a\":1,\"b\":\"x\",\"c\":false}");
    REJECTS(g, "{}");
    REJECTS(g, "{\"a\":1}");
    REJECTS(g, "{\"b\":\"x\",\"a\":1}"); /* the schema's order */
    REJECTS(g, "{\"b\":\"x\",\"b\":\"y\"}");
    REJECTS(g, "{\"b\":\"x\",\"d\":1}");
    REJECTS(g, "{\"a\":\"1\",\"b\":\"x\"}");
    REJECTS(g, "{\"b\":\"x\",}");
    gram_grammar_destroy(g);
}

Test(gram_schema, object_all_optional) {
    gram_grammar *g = compile_schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                                     "\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},"
                                     "\"additionalProperties\":false}");
    ACCEPTS(g, "{}");
    ACCEPTS(g, "{\"b\":2}");
    ACCEPTS(g, "{\"a\":1,\"c\":3}");
    ACCEPTS(g, "{\"a\":1,\"b\":2,\"c\":3}");
    REJECTS(g, "{,\"a\":1}");
    REJECTS(g, "{\"c\":3,\"a\":1}");
    REJECTS(g, "{\"a\":1,\"a\":1}");
    gram_grammar_destroy(g);
}

Test(gram_schema, object_whitespace_is_optional_and_bounded) {
    gram_grammar *g = compile_schema_ws("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
                                        "\"items\":{\"type\":\"integer\"}}},\"required\":[\"a\"],"
                                        "\"additionalProperties\":false}");
    ACCEPTS(g, "{\"a\":[1,2]}");
    ACCEPTS(g, "{ \"a\" : [ 1 , 2 ] }");
    ACCEPTS(g, "{\n\t\"a\":\n  [1,\n   2]\n}");
    REJECTS(g, " {\"a\":[]}"); /* none before the document */
    REJECTS(g, "{\"a\":[]} ");
    REJECTS(g, "{\r\"a\":[]}");
    char doc[64];
    snprintf(doc, sizeof doc, "{%20s\"a\":[]}", "");
    ACCEPTS(g, doc);
    snprintf(doc, sizeof doc, "{%21s\"a\":[]}", "");
    REJECTS(g, doc);
    gram_grammar_destroy(g);
}

Test(gram_schema, object_additional_properties_never_repeat_a_listed_key) {
    /* absent additionalProperties beside properties: only the listed keys (still valid) */
    gram_grammar *g = compile_schema("{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"},"
                                     "\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}");
    ACCEPTS(g, "{\"ab\":1,\"b\":\"x\"}");
    REJECTS(g, "{\"ab\":1,\"b\":\"x\",\"zz\":[1]}");
    gram_grammar_destroy(g);
    /* additionalProperties true: any other key, any value, after the listed ones */
    g = compile_schema("{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"},"
                       "\"b\":{\"type\":\"string\"}},\"required\":[\"b\"],\"additionalProperties\":true}");
    ACCEPTS(g, "{\"b\":\"x\"}");
    ACCEPTS(g, "{\"ab\":1,\"b\":\"x\",\"zz\":[1],\"a\":null,\"abc\":{},\"\":2,\"bb\":true}");
    REJECTS(g, "{\"b\":\"x\",\"ab\":1}");
    REJECTS(g, "{\"b\":\"x\",\"b\":\"y\"}");
    REJECTS(g, "{\"zz\":1,\"b\":\"x\"}"); /* others come last */
    REJECTS(g, "{\"b\":\"x\",\"a\\u0062\":1}");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"object\",\"additionalProperties\":true}");
    ACCEPTS(g, "{}");
    ACCEPTS(g, "{\"x\":1,\"y\":[]}");
    gram_grammar_destroy(g);
}

Test(gram_schema, object_additional_properties_schema) {
    gram_grammar *g = compile_schema("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"}},"
                                     "\"required\":[\"id\",\"n\"],\"additionalProperties\":{\"type\":\"integer\"}}");
    ACCEPTS(g, "{\"id\":\"a\",\"n\":1}");
    ACCEPTS(g, "{\"id\":\"a\",\"n\":1,\"x\":2,\"y\":3}");
    REJECTS(g, "{\"id\":\"a\"}");             /* n is required */
    REJECTS(g, "{\"id\":\"a\",\"n\":\"1\"}"); /* n takes the additionalProperties schema */
    REJECTS(g, "{\"id\":\"a\",\"n\":1,\"x\":\"s\"}");
    gram_grammar_destroy(g);

    g = compile_schema("{\"properties\":{\"a\":{\"const\":1}},\"additionalProperties\":{\"type\":\"null\"}}");
    ACCEPTS(g, "{\"z\":null}");
    ACCEPTS(g, "{\"a\":1,\"z\":null}");
    REJECTS(g, "{\"z\":1}");
    REJECTS(g, "\"not an object\""); /* the keywords imply the type */
    gram_grammar_destroy(g);
}

Test(gram_schema, property_names_become_valid_rule_names) {
    gram_grammar *g = compile_schema("{\"type\":\"object\",\"properties\":{\"a b/c~\\\"d\":{\"type\":\"integer\"},"
                                     "\"\xc3\xa9t\xc3\xa9\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
                                     "\"\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"null\"}}}},"
                                     "\"additionalProperties\":false}");
    ACCEPTS(g, "{\"a b/c~\\\"d\":1}");
    ACCEPTS(g, "{\"\xc3\xa9t\xc3\xa9\":[\"x\"]}");
    ACCEPTS(g, "{\"\":{\"x\":null}}");
    REJECTS(g, "{\"a b/c~\"d\":1}");
    gram_grammar_destroy(g);
}

/* ---- enum, const, combinators ------------------------------------------------------ */

Test(gram_schema, enum_of_any_values) {
    gram_grammar *g = compile_schema("{\"enum\":[\"red\",1,2.5,null,true,[1,\"a\"],{\"k\":{\"v\":[]}},\"q\\\"\\n\"]}");
    const char *yes[] = {"\"red\"", "1", "2.5", "null", "true", "[1,\"a\"]", "{\"k\":{\"v\":[]}}", "\"q\\\"\\n\""};
    for (size_t i = 0; i < 8; i++) ACCEPTS(g, yes[i]);
    REJECTS(g, "\"blue\"");
    REJECTS(g, "false");
    REJECTS(g, "[1]");
    REJECTS(g, "2");
    gram_grammar_destroy(g);

    g = compile_schema_ws("{\"enum\":[{\"k\":[1,2]}]}");
    ACCEPTS(g, "{\"k\":[1,2]}");
    ACCEPTS(g, "{ \"k\" : [ 1 , 2 ] }");
    REJECTS(g, "{\"k\":[2,1]}");
    gram_grammar_destroy(g);
}

Test(gram_schema, enum_with_type_and_const) {
    gram_grammar *g = compile_schema("{\"type\":\"string\",\"enum\":[\"a\",\"b\",3]}");
    ACCEPTS(g, "\"a\"");
    REJECTS(g, "3");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":[\"string\",\"null\"],\"enum\":[\"a\",null]}");
    ACCEPTS(g, "null");
    ACCEPTS(g, "\"a\"");
    gram_grammar_destroy(g);

    g = compile_schema("{\"const\":{\"x\":1}}");
    ACCEPTS(g, "{\"x\":1}");
    REJECTS(g, "{\"x\":2}");
    gram_grammar_destroy(g);
}

Test(gram_schema, any_of) {
    gram_grammar *g = compile_schema("{\"anyOf\":[{\"type\":\"integer\",\"minimum\":0},{\"type\":\"number\"},"
                                     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
                                     "\"additionalProperties\":false}]}");
    ACCEPTS(g, "1");
    ACCEPTS(g, "-1.5");
    ACCEPTS(g, "{\"a\":\"s\"}");
    REJECTS(g, "{\"b\":1}");
    REJECTS(g, "\"s\"");
    gram_grammar_destroy(g);
}

Test(gram_schema, one_of_disjoint_alternatives) {
    gram_grammar *g = compile_schema("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"},{\"const\":true}]}");
    ACCEPTS(g, "\"s\"");
    ACCEPTS(g, "7");
    ACCEPTS(g, "true");
    REJECTS(g, "false");
    gram_grammar_destroy(g);

    /* a tagged union: both require "kind", with different consts */
    g = compile_schema("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"},"
                       "\"lives\":{\"type\":\"integer\"}},\"required\":[\"kind\"],\"additionalProperties\":false},"
                       "{\"$ref\":\"#/$defs/dog\"}],\"$defs\":{\"dog\":{\"type\":\"object\",\"properties\":"
                       "{\"kind\":{\"enum\":[\"dog\",\"wolf\"]},\"bark\":{\"type\":\"boolean\"}},"
                       "\"required\":[\"kind\"],\"additionalProperties\":false}}}");
    ACCEPTS(g, "{\"kind\":\"cat\",\"lives\":9}");
    ACCEPTS(g, "{\"kind\":\"wolf\",\"bark\":true}");
    REJECTS(g, "{\"kind\":\"dog\",\"lives\":9}");
    gram_grammar_destroy(g);
}

Test(gram_schema, one_of_that_may_overlap_is_unsupported) {
    expect_error("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", SP_ERR_UNSUPPORTED,
                 "/oneOf: alternatives 0 and 1");
    expect_error("{\"properties\":{\"v\":{\"oneOf\":[{\"enum\":[\"a\",\"b\"]},{\"type\":\"string\"}]}}}",
                 SP_ERR_UNSUPPORTED, "/properties/v/oneOf: alternatives 0 and 1");
    expect_error("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}},"
                 "{\"type\":\"object\"}]}",
                 SP_ERR_UNSUPPORTED, "/oneOf:");
}

Test(gram_schema, all_of_merges_objects) {
    gram_grammar *g = compile_schema(
        "{\"allOf\":[{\"$ref\":\"#/$defs/base\"},{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\"}},"
        "\"required\":[\"b\"]}],\"$defs\":{\"base\":{\"type\":\"object\",\"properties\":{\"a\":"
        "{\"type\":\"integer\"}},\"required\":[\"a\"]}}}");
    ACCEPTS(g, "{\"a\":1,\"b\":\"x\"}");
    REJECTS(g, "{\"a\":1,\"b\":\"x\",\"c\":null}"); /* no additionalProperties: the listed keys */
    REJECTS(g, "{\"a\":1}");
    REJECTS(g, "{\"b\":\"x\"}");
    gram_grammar_destroy(g);

    /* each part's additionalProperties holds: b is not allowed by the first part */
    g = compile_schema("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false},"
                       "{\"properties\":{\"b\":{\"type\":\"string\"}}}]}");
    ACCEPTS(g, "{\"a\":1}");
    ACCEPTS(g, "{}");
    REJECTS(g, "{\"a\":1,\"b\":\"x\"}");
    gram_grammar_destroy(g);

    /* one part (beside annotations): that part, whatever its type */
    g = compile_schema("{\"allOf\":[{\"$ref\":\"#/definitions/n\"}],\"description\":\"d\","
                       "\"definitions\":{\"n\":{\"type\":\"integer\",\"maximum\":3}}}");
    ACCEPTS(g, "3");
    REJECTS(g, "4");
    gram_grammar_destroy(g);

    expect_error("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}", SP_ERR_UNSUPPORTED,
                 "/allOf/0/type:");
    expect_error("{\"allOf\":[{\"$ref\":\"s.json\"},{\"type\":\"object\"}]}", SP_ERR_UNSUPPORTED, "/allOf/0/$ref:");
    expect_error("{\"allOf\":[{\"$ref\":\"#/nowhere\"},{\"type\":\"object\"}]}", SP_ERR_INVALID_ARG, "/allOf/0/$ref:");
}

/* ---- $ref ---------------------------------------------------------------------------- */

Test(gram_schema, recursive_ref_tree) {
    gram_grammar *g = compile_schema(
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
        "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"value\"],"
        "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}");
    ACCEPTS(g, "{\"value\":1}");
    ACCEPTS(g, "{\"value\":1,\"children\":[{\"value\":2},{\"value\":3,\"children\":[{\"value\":4,"
               "\"children\":[]}]}]}");
    REJECTS(g, "{\"value\":1,\"children\":[{}]}");
    REJECTS(g, "{\"value\":1,\"children\":[{\"value\":2,\"children\":[{\"value\":\"x\"}]}]}");
    gram_grammar_destroy(g);
}

Test(gram_schema, ref_forms) {
    gram_grammar *g = compile_schema("{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#\"},"
                                     "\"v\":{\"$ref\":\"#/definitions/v\"},\"w\":{\"$ref\":\"#/properties/v\"}},"
                                     "\"additionalProperties\":false,\"definitions\":{\"v\":{\"type\":\"boolean\"}}}");
    ACCEPTS(g, "{}");
    ACCEPTS(g, "{\"next\":{\"next\":{\"v\":true}},\"w\":false}");
    REJECTS(g, "{\"next\":{\"x\":1}}");
    REJECTS(g, "{\"v\":1}");
    gram_grammar_destroy(g);

    /* annotations beside $ref are fine */
    g = compile_schema("{\"$ref\":\"#/$defs/a\",\"description\":\"x\",\"$defs\":{\"a\":{\"type\":\"null\"}}}");
    ACCEPTS(g, "null");
    REJECTS(g, "1");
    gram_grammar_destroy(g);

    /* a def name that is a shared rule's name, and a ~1 escape in the pointer */
    g = compile_schema("{\"$ref\":\"#/$defs/string~1x\",\"$defs\":{\"string/x\":{\"type\":\"array\","
                       "\"items\":{\"$ref\":\"#/$defs/string~1x\"}}}}");
    ACCEPTS(g, "[[],[[]]]");
    REJECTS(g, "[1]");
    gram_grammar_destroy(g);
}

Test(gram_schema, ref_errors) {
    expect_error("{\"properties\":{\"a\":{\"$ref\":\"#/$defs/missing\"}}}", SP_ERR_INVALID_ARG,
                 "/properties/a/$ref: #/$defs/missing points to nothing");
    expect_error("{\"$ref\":\"https://example.com/s.json\"}", SP_ERR_UNSUPPORTED, "/$ref: only local");
    expect_error("{\"$ref\":5}", SP_ERR_INVALID_ARG, "/$ref:");
    expect_error("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},"
                 "{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
                 SP_ERR_UNSUPPORTED, "/$defs/");
    expect_error("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", SP_ERR_UNSUPPORTED, "(root): reaches itself");
    expect_error("{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", SP_ERR_UNSUPPORTED,
                 "/type: type beside $ref");
}

/* ---- arrays ---------------------------------------------------------------------------- */

Test(gram_schema, items_min_max) {
    gram_grammar *g = compile_schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,"
                                     "\"maxItems\":3}");
    REJECTS(g, "[]");
    REJECTS(g, "[1]");
    ACCEPTS(g, "[1,2]");
    ACCEPTS(g, "[1,2,3]");
    REJECTS(g, "[1,2,3,4]");
    REJECTS(g, "[1,\"2\"]");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"array\",\"minItems\":1}");
    REJECTS(g, "[]");
    ACCEPTS(g, "[1,\"a\",[]]");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"array\",\"maxItems\":0}");
    ACCEPTS(g, "[]");
    REJECTS(g, "[1]");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"array\",\"maxItems\":1,\"items\":{\"type\":\"null\"}}");
    ACCEPTS(g, "[]");
    ACCEPTS(g, "[null]");
    REJECTS(g, "[null,null]");
    gram_grammar_destroy(g);
}

Test(gram_schema, prefix_items) {
    gram_grammar *g = compile_schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},"
                                     "{\"type\":\"integer\"}],\"items\":false,\"minItems\":1}");
    ACCEPTS(g, "[\"a\"]");
    ACCEPTS(g, "[\"a\",1]");
    REJECTS(g, "[]");
    REJECTS(g, "[1]");
    REJECTS(g, "[\"a\",1,2]");
    gram_grammar_destroy(g);

    g = compile_schema("{\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},"
                       "\"maxItems\":3}");
    ACCEPTS(g, "[]");
    ACCEPTS(g, "[\"a\",true,false]");
    REJECTS(g, "[\"a\",true,false,true]");
    REJECTS(g, "[\"a\",\"b\"]");
    gram_grammar_destroy(g);

    /* draft 4: items as a list, additionalItems for the rest; none: anything */
    g = compile_schema(
        "{\"type\":\"array\",\"items\":[{\"type\":\"null\"}],\"additionalItems\":{\"type\":\"integer\"}}");
    ACCEPTS(g, "[null,1,2]");
    REJECTS(g, "[1]");
    gram_grammar_destroy(g);
    g = compile_schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"}]}");
    ACCEPTS(g, "[null,\"x\",{}]");
    gram_grammar_destroy(g);
}

/* ---- strings --------------------------------------------------------------------------- */

Test(gram_schema, string_lengths_count_characters) {
    gram_grammar *g = compile_schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    ACCEPTS(g, "\"ab\"");
    ACCEPTS(g, "\"\xc3\xa9\xe2\x82\xac\"");      /* é€: two characters, five bytes */
    ACCEPTS(g, "\"\xf0\x9f\x98\x80\xc3\xa9x\""); /* 😀éx */
    ACCEPTS(g, "\"\\n\\u00e9\"");                /* escapes count as one character */
    REJECTS(g, "\"\xc3\xa9\"");
    REJECTS(g, "\"abcd\"");
    REJECTS(g, "\"\\\"\"");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"string\",\"maxLength\":0}");
    ACCEPTS(g, "\"\"");
    REJECTS(g, "\"a\"");
    gram_grammar_destroy(g);
}

Test(gram_schema, pattern_anchoring) {
    gram_grammar *g = compile_schema("{\"type\":\"string\",\"pattern\":\"^[a-z]+-\\\\d{2}$\"}");
    ACCEPTS(g, "\"ab-12\"");
    REJECTS(g, "\"ab-1\"");
    REJECTS(g, "\"xab-12x\"");
    gram_grammar_destroy(g);

    /* JSON Schema patterns are not anchored */
    g = compile_schema("{\"type\":\"string\",\"pattern\":\"[0-9]{3}\"}");
    ACCEPTS(g, "\"123\"");
    ACCEPTS(g, "\"ab 456 cd\"");
    REJECTS(g, "\"12\"");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"string\",\"pattern\":\"^id:\"}");
    ACCEPTS(g, "\"id:7\"");
    REJECTS(g, "\"x id:7\"");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"string\",\"pattern\":\"^a$|^b$\"}");
    ACCEPTS(g, "\"a\"");
    REJECTS(g, "\"ab\"");
    gram_grammar_destroy(g);

    expect_error("{\"type\":\"string\",\"pattern\":\"^a|b\"}", SP_ERR_UNSUPPORTED, "/pattern:");
    expect_error("{\"properties\":{\"p\":{\"type\":\"string\",\"pattern\":\"(?=a)\"}}}", SP_ERR_UNSUPPORTED,
                 "/properties/p/pattern: ");
}

Test(gram_schema, pattern_output_is_valid_json) {
    /* characters JSON escapes appear as their escape sequences */
    gram_grammar *g = compile_schema("{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\c\\\\td$\"}");
    ACCEPTS(g, "\"a\\\"b\\\\c\\td\"");
    REJECTS(g, "\"a\"b\\c\td\"");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"string\",\"pattern\":\"^.{2}$\"}");
    ACCEPTS(g, "\"ab\"");
    ACCEPTS(g, "\"\\\"\\\\\"");
    ACCEPTS(g, "\"\\t\\u0001\"");
    REJECTS(g, "\"\"\"\"");
    REJECTS(g, "\"a\\nb\"");  /* three characters */
    REJECTS(g, "\"\\n\\n\""); /* . is not a newline */
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"string\",\"pattern\":\"^[^a]+$\"}");
    ACCEPTS(g, "\"xyz\\\"\\n\"");
    REJECTS(g, "\"xaz\"");
    REJECTS(g, "\"x\"z\"");
    gram_grammar_destroy(g);
}

Test(gram_schema, formats) {
    gram_grammar *g = compile_schema(
        "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},"
        "\"t\":{\"type\":\"string\",\"format\":\"time\"},\"dt\":{\"type\":\"string\",\"format\":\"date-time\"},"
        "\"u\":{\"type\":\"string\",\"format\":\"uuid\"},\"e\":{\"type\":\"string\",\"format\":\"email\"},"
        "\"w\":{\"type\":\"string\",\"format\":\"uri\"},\"x\":{\"type\":\"string\",\"format\":\"color\"}},"
        "\"additionalProperties\":false}");
    ACCEPTS(g, "{\"d\":\"2024-02-29\"}");
    REJECTS(g, "{\"d\":\"2024-13-01\"}");
    REJECTS(g, "{\"d\":\"24-01-01\"}");
    ACCEPTS(g, "{\"t\":\"23:59:60.5+01:00\"}");
    ACCEPTS(g, "{\"t\":\"00:00:00Z\"}");
    REJECTS(g, "{\"t\":\"24:00:00Z\"}");
    REJECTS(g, "{\"t\":\"12:00:00\"}");
    ACCEPTS(g, "{\"dt\":\"2024-01-31T08:30:00Z\"}");
    REJECTS(g, "{\"dt\":\"2024-01-31 08:30:00Z\"}");
    ACCEPTS(g, "{\"u\":\"123e4567-e89b-12d3-A456-426614174000\"}");
    REJECTS(g, "{\"u\":\"123e4567e89b12d3a456426614174000\"}");
    ACCEPTS(g, "{\"e\":\"first.last+tag@mail.example-x.org\"}");
    REJECTS(g, "{\"e\":\"no-at.example.org\"}");
    REJECTS(g, "{\"e\":\"a@localhost\"}");
    ACCEPTS(g, "{\"w\":\"https://example.org/a/b?c=d&e=%20#frag\"}");
    ACCEPTS(g, "{\"w\":\"urn:isbn:0451450523\"}");
    REJECTS(g, "{\"w\":\"not a uri\"}");
    ACCEPTS(g, "{\"x\":\"anything\"}"); /* an unknown format is an annotation */
    gram_grammar_destroy(g);
}

/* ---- numbers ---------------------------------------------------------------------------- */

Test(gram_schema, integer_bounds) {
    gram_grammar *g = compile_schema("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}");
    const char *yes[] = {"-5", "-1", "0", "9", "10", "99", "100", "119", "120"};
    const char *no[] = {"-6", "-0", "121", "200", "1000", "05", "-10"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) ACCEPTS(g, yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) REJECTS(g, no[i]);
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"integer\",\"exclusiveMinimum\":0}");
    ACCEPTS(g, "1");
    ACCEPTS(g, "9999999999999999");
    REJECTS(g, "0");
    REJECTS(g, "-1");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"integer\",\"minimum\":0}");
    ACCEPTS(g, "0");
    ACCEPTS(g, "42");
    REJECTS(g, "-1");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"integer\",\"maximum\":-10,\"exclusiveMaximum\":-3.5}");
    ACCEPTS(g, "-10");
    ACCEPTS(g, "-123456");
    REJECTS(g, "-9");
    REJECTS(g, "5");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"integer\",\"minimum\":1990,\"maximum\":2025}"); /* years */
    ACCEPTS(g, "1990");
    ACCEPTS(g, "1999");
    ACCEPTS(g, "2000");
    ACCEPTS(g, "2025");
    REJECTS(g, "1989");
    REJECTS(g, "2026");
    REJECTS(g, "2100");
    gram_grammar_destroy(g);

    /* draft 4 booleans */
    g = compile_schema("{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":true,\"maximum\":5}");
    REJECTS(g, "3");
    ACCEPTS(g, "4");
    ACCEPTS(g, "5");
    gram_grammar_destroy(g);
}

Test(gram_schema, integer_ranges_exhaustive) {
    /* every bound pair over a small span, every value near it */
    for (int lo = -25; lo <= 25; lo += 7) {
        for (int hi = lo; hi <= 130; hi += 13) {
            char schema[128], doc[16];
            snprintf(schema, sizeof schema, "{\"type\":\"integer\",\"minimum\":%d,\"maximum\":%d}", lo, hi);
            gram_grammar *g = compile_schema(schema);
            for (int v = -40; v <= 150; v++) {
                snprintf(doc, sizeof doc, "%d", v);
                cr_assert_eq(accepts(g, doc), v >= lo && v <= hi, "%s: %d", schema, v);
            }
            gram_grammar_destroy(g);
        }
    }
}

Test(gram_schema, number_bounds) {
    gram_grammar *g = compile_schema("{\"type\":\"number\",\"minimum\":0}");
    ACCEPTS(g, "0");
    ACCEPTS(g, "12.5");
    REJECTS(g, "-0.5");
    gram_grammar_destroy(g);

    g = compile_schema("{\"type\":\"number\",\"minimum\":-1,\"maximum\":1}");
    ACCEPTS(g, "-1");
    ACCEPTS(g, "-0.25");
    ACCEPTS(g, "1.000");
    ACCEPTS(g, "0.999");
    REJECTS(g, "1.001");
    REJECTS(g, "-1.5");
    REJECTS(g, "2");
    gram_grammar_destroy(g);

    expect_error("{\"type\":\"number\",\"minimum\":0.5}", SP_ERR_UNSUPPORTED, "/minimum:");
    expect_error("{\"type\":\"number\",\"exclusiveMaximum\":10}", SP_ERR_UNSUPPORTED, "/exclusiveMaximum:");
    expect_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", SP_ERR_INVALID_ARG, "/maximum:");
}

/* ---- errors ----------------------------------------------------------------------------- */

Test(gram_schema, unsupported_keywords_name_their_place) {
    static const char *const kws[] = {"uniqueItems",
                                      "multipleOf",
                                      "not",
                                      "if",
                                      "then",
                                      "else",
                                      "patternProperties",
                                      "propertyNames",
                                      "dependentRequired",
                                      "dependentSchemas",
                                      "minProperties",
                                      "maxProperties",
                                      "contains",
                                      "minContains",
                                      "maxContains",
                                      "unevaluatedProperties",
                                      "unevaluatedItems"};
    for (size_t i = 0; i < sizeof kws / sizeof *kws; i++) {
        char schema[256], want[128];
        snprintf(schema, sizeof schema,
                 "{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"%s\":true}}}", kws[i]);
        snprintf(want, sizeof want, "/properties/tags/%s: %s cannot be enforced by a grammar", kws[i], kws[i]);
        expect_error(schema, SP_ERR_UNSUPPORTED, want);
    }
    expect_error("{\"items\":[{},{\"not\":{}}]}", SP_ERR_UNSUPPORTED, "/items/1/not:");
    expect_error("{\"$defs\":{\"x\":{\"multipleOf\":2}},\"$ref\":\"#/$defs/x\"}", SP_ERR_UNSUPPORTED,
                 "/$defs/x/multipleOf:");
    expect_error("false", SP_ERR_UNSUPPORTED, "(root):");
    expect_error("{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", SP_ERR_UNSUPPORTED, "/pattern:");
    expect_error("{\"type\":\"string\",\"enum\":[\"a\"],\"maxLength\":3}", SP_ERR_UNSUPPORTED, "/maxLength:");
    expect_error("{\"anyOf\":[{}],\"type\":\"object\"}", SP_ERR_UNSUPPORTED, "/type:");

    /* uniqueItems false changes nothing */
    gram_grammar *g = compile_schema("{\"type\":\"array\",\"uniqueItems\":false}");
    ACCEPTS(g, "[1,1]");
    gram_grammar_destroy(g);
}

Test(gram_schema, malformed_schemas_name_their_place) {
    expect_error("{\"type\":5}", SP_ERR_INVALID_ARG, "/type:");
    expect_error("{\"type\":\"text\"}", SP_ERR_INVALID_ARG, "/type:");
    expect_error("{\"type\":[]}", SP_ERR_INVALID_ARG, "/type:");
    expect_error("{\"properties\":{\"a\":{\"type\":[\"string\",7]}}}", SP_ERR_INVALID_ARG, "/properties/a/type:");
    expect_error("{\"type\":\"object\",\"required\":\"a\"}", SP_ERR_INVALID_ARG, "/required:");
    expect_error("{\"type\":\"object\",\"required\":[1]}", SP_ERR_INVALID_ARG, "/required:");
    expect_error("{\"type\":\"object\",\"properties\":[]}", SP_ERR_INVALID_ARG, "/properties:");
    expect_error("{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}", SP_ERR_INVALID_ARG,
                 "/required: \"x\" is not in properties");
    expect_error("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", SP_ERR_INVALID_ARG, "/maxItems:");
    expect_error("{\"type\":\"array\",\"minItems\":-1}", SP_ERR_INVALID_ARG, "/minItems:");
    expect_error("{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", SP_ERR_INVALID_ARG,
                 "/minItems:");
    expect_error("{\"type\":\"string\",\"minLength\":\"2\"}", SP_ERR_INVALID_ARG, "/minLength:");
    expect_error("{\"type\":\"string\",\"minLength\":4,\"maxLength\":2}", SP_ERR_INVALID_ARG, "/maxLength:");
    expect_error("{\"enum\":[]}", SP_ERR_INVALID_ARG, "/enum:");
    expect_error("{\"type\":\"integer\",\"enum\":[\"a\"]}", SP_ERR_INVALID_ARG, "/enum:");
    expect_error("{\"const\":1,\"enum\":[2]}", SP_ERR_INVALID_ARG, "/const:");
    expect_error("{\"anyOf\":[]}", SP_ERR_INVALID_ARG, "/anyOf:");
    expect_error("{\"items\":{\"items\":7}}", SP_ERR_INVALID_ARG, "/items/items:");
    expect_error("{\"properties\":{\"a\":{\"minimum\":\"0\"}}}", SP_ERR_INVALID_ARG, "/properties/a/minimum:");
    expect_error("[1]", SP_ERR_INVALID_ARG, "(root):");

    char *gbnf = NULL;
    cr_assert_eq(gram_schema_to_gbnf(NULL, NULL, &gbnf), SP_ERR_INVALID_ARG);
    cr_assert_eq(gram_schema_to_gbnf(json_true(), NULL, NULL), SP_ERR_INVALID_ARG);
}

Test(gram_schema, depth_past_max_depth_is_a_range_error) {
    char schema[4096] = "";
    for (int i = 0; i < 40; i++) strcat(schema, "{\"type\":\"array\",\"items\":");
    strcat(schema, "{}");
    for (int i = 0; i < 40; i++) strcat(schema, "}");
    expect_error(schema, SP_ERR_RANGE, "/items/items/");

    gram_schema_options opt = gram_schema_options_default();
    opt.max_depth = 64;
    gram_grammar *g = compile_schema_opt(schema, &opt);
    ACCEPTS(g, "[[[]]]");
    gram_grammar_destroy(g);

    opt.max_depth = 2;
    json_t *j = load("{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"array\"}}}");
    char *gbnf = NULL;
    cr_assert_eq(gram_schema_to_gbnf(j, &opt, &gbnf), SP_ERR_RANGE);
    cr_assert_null(gbnf);
    json_decref(j);
}

Test(gram_schema, openai_strict_example) {
    gram_grammar *g = compile_schema(
        "{\"type\":\"object\",\"properties\":{\"steps\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
        "\"properties\":{\"explanation\":{\"type\":\"string\"},\"output\":{\"type\":\"string\"}},"
        "\"required\":[\"explanation\",\"output\"],\"additionalProperties\":false}},\"final_answer\":"
        "{\"type\":\"string\"},\"confidence\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"}]}},"
        "\"required\":[\"steps\",\"final_answer\",\"confidence\"],\"additionalProperties\":false}");
    ACCEPTS(g, "{\"steps\":[{\"explanation\":\"e\",\"output\":\"o\"}],\"final_answer\":\"x = 3\",\"confidence\":null}");
    ACCEPTS(g, "{\"steps\":[],\"final_answer\":\"\",\"confidence\":0.9}");
    REJECTS(g, "{\"steps\":[{\"explanation\":\"e\"}],\"final_answer\":\"x\",\"confidence\":1}");
    REJECTS(g, "{\"steps\":[],\"final_answer\":\"x\"}");
    gram_grammar_destroy(g);
}

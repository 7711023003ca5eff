/* bench_grammar.c: what a grammar mask costs per token on a real vocabulary.
 *
 * For each constraint (a JSON Schema, a GBNF grammar, a regex) it tokenizes documents of
 * the constraint's language with the model's own tokenizer (as a model would write
 * them) and times gram_mask at every token of every document, then advances by that
 * token. Three passes per constraint:
 *   lazy     the grammar compiled afresh for every document and not prepared: every cut
 *            stack's first walk falls on a token (how masks cost before gram_mask_prepare);
 *   new      compiled and prepared afresh for every document, as the server does for a
 *            schema it has not seen (the first request with it);
 *   repeat   one prepared grammar for all documents (the same schema again: the server
 *            shares compiled grammars by their text).
 * Prints one JSON line per constraint and pass: median, p99 and max microseconds per
 * mask, the tokens timed, the median milliseconds to compile (and prepare) a grammar and
 * the cut stacks prepared.
 *
 * usage: bench_grammar MODEL.gguf [documents per constraint (default 20)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "bench/bench_clock.h"

static const char *NAMES[] = {"Alice Smith", "Bruno Diaz", "Chen Wei", "Dana Okafor", "Emeka Obi", "Farah Khan"};
static const char *CITIES[] = {"Paris", "Rome", "Lima"};
static const char *TAGS[] = {"admin", "beta", "ops", "sales", "dev", "qa"};

/* Document i of the JSON kind (valid for the schema and the GBNF grammar). */
static void json_doc(int i, char *out, size_t cap) {
    snprintf(out, cap, "{\"name\":\"%s\",\"age\":%d,\"city\":\"%s\",\"tags\":[\"%s\",\"%s\"],\"active\":%s}",
             NAMES[i % 6], 18 + (i * 7) % 60, CITIES[i % 3], TAGS[i % 6], TAGS[(i + 2) % 6], i % 2 ? "true" : "false");
}

static void regex_doc(int i, char *out, size_t cap) {
    snprintf(out, cap, "%s %03d-%04d%s", NAMES[i % 6], 200 + i * 13 % 700, 1000 + i * 271 % 9000,
             i % 3 ? " ext. 42" : "");
}

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\","
    "\"minimum\":0,\"maximum\":150},\"city\":{\"enum\":[\"Paris\",\"Rome\",\"Lima\"]},\"tags\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\"},\"maxItems\":4},\"active\":{\"type\":\"boolean\"}},\"required\":[\"name\","
    "\"age\",\"city\",\"tags\",\"active\"],\"additionalProperties\":false}";

static const char *GBNF = "root   ::= object\n"
                          "object ::= \"{\" ( pair ( \",\" pair )* )? \"}\"\n"
                          "pair   ::= string \":\" value\n"
                          "value  ::= string | number | object | array | \"true\" | \"false\" | \"null\"\n"
                          "array  ::= \"[\" ( value ( \",\" value )* )? \"]\"\n"
                          "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
                          "number ::= \"-\"? [0-9]{1,12} ( \".\" [0-9]{1,6} )?\n";

static const char *REGEX = "[A-Z][a-z]+ [A-Z][a-z]+ \\d{3}-\\d{4}( ext\\. \\d{1,4})?";

typedef struct kind {
    const char *name;
    char *gbnf;
    void (*doc)(int, char *, size_t);
} kind;

typedef enum pass { PASS_LAZY, PASS_NEW, PASS_REPEAT } pass;
static const char *PASS_NAMES[] = {"lazy", "new", "repeat"};

/* The grammar of k, compiled (and prepared, unless lazy); *ms what that took. */
static gram_grammar *compile(const kind *k, const gram_vocab *gv, bool prepare, double *ms, int32_t *keys) {
    gram_grammar *g;
    double a = bench_now_us();
    if (gram_compile(k->gbnf, strlen(k->gbnf), NULL, &g) != SP_OK) abort();
    *keys = prepare ? gram_mask_prepare(g, gv) : 0;
    *ms = (bench_now_us() - a) / 1e3;
    return g;
}

static void run(const kind *k, tok_vocab *v, gram_vocab *gv, int docs, pass p) {
    size_t cap = 64 * (size_t)docs + 64, n = 0;
    double *t = malloc(sizeof *t * cap), *compile_ms = malloc(sizeof *compile_ms * (size_t)docs);
    uint32_t *mask = malloc(sizeof *mask * gram_mask_words(gv));
    int32_t keys = 0;
    int n_compiled = 0;
    gram_grammar *shared = p == PASS_REPEAT ? compile(k, gv, true, &compile_ms[n_compiled++], &keys) : NULL;
    for (int d = 0; d < docs; d++) {
        char text[512];
        k->doc(d, text, sizeof text);
        int32_t *ids;
        size_t n_ids;
        if (tok_encode(v, text, strlen(text), false, false, &ids, &n_ids) != SP_OK) abort();
        gram_grammar *g = shared ? shared : compile(k, gv, p == PASS_NEW, &compile_ms[n_compiled++], &keys);
        gram_state *s;
        if (gram_state_create(g, &s) != SP_OK) abort();
        for (size_t i = 0; i < n_ids && n < cap; i++) {
            double a = bench_now_us();
            gram_mask(g, gv, s, mask);
            t[n] = bench_now_us() - a;
            n++;
            if (!gram_state_advance_token(s, gv, ids[i])) {
                fprintf(stderr, "bench_grammar: %s: document %d refused at token %zu: %s\n", k->name, d, i, text);
                exit(1);
            }
        }
        gram_state_destroy(s);
        if (!shared) gram_grammar_destroy(g);
        free(ids);
    }
    gram_grammar_destroy(shared);
    qsort(t, n, sizeof *t, bench_cmp_double);
    qsort(compile_ms, (size_t)n_compiled, sizeof *compile_ms, bench_cmp_double);
    printf("{\"constraint\":\"%s\",\"grammar\":\"%s\",\"tokens\":%zu,\"median_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%."
           "1f,\"compile_ms\":%.2f,\"keys\":%d}\n",
           k->name, PASS_NAMES[p], n, t[n / 2], t[(size_t)((double)(n - 1) * 0.99)], t[n - 1],
           compile_ms[n_compiled / 2], keys);
    free(t);
    free(compile_ms);
    free(mask);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar MODEL.gguf [documents]\n");
        return 2;
    }
    int docs = argc > 2 ? atoi(argv[2]) : 20;
    gguf_file *f;
    tok_vocab *v;
    if (gguf_open(argv[1], &f) != SP_OK || tok_vocab_load(f, &v) != SP_OK) {
        fprintf(stderr, "bench_grammar: %s\n", sp_last_error());
        return 1;
    }
    gguf_close(f);
    gram_vocab *gv;
    if (gram_vocab_create(v, &gv) != SP_OK) return 1;
    json_error_t jerr;
    json_t *schema = json_loads(SCHEMA, 0, &jerr);
    gram_schema_options opt = gram_schema_options_default();
    kind kinds[3] = {{"json_schema", NULL, json_doc}, {"gbnf", strdup(GBNF), json_doc}, {"regex", NULL, regex_doc}};
    if (!schema || gram_schema_to_gbnf(schema, &opt, &kinds[0].gbnf) != SP_OK ||
        gram_regex_to_gbnf(REGEX, strlen(REGEX), &kinds[2].gbnf) != SP_OK) {
        fprintf(stderr, "bench_grammar: %s\n", sp_last_error());
        return 1;
    }
    for (int k = 0; k < 3; k++) {
        for (pass p = PASS_LAZY; p <= PASS_REPEAT; p++) run(&kinds[k], v, gv, docs, p);
        free(kinds[k].gbnf);
    }
    json_decref(schema);
    gram_vocab_destroy(gv);
    tok_vocab_destroy(v);
    return 0;
}

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
 * With --hostile it times instead a set of hostile constraints (each <= 1 KiB: bounded
 * repetitions of nullable or looping items, alternations of overlapping loops, schema
 * patterns, deep nesting), each in a child process with a wall bound: compiled and
 * prepared as the server does, then masked at up to HOSTILE_STEPS states of a walk that
 * takes allowed tokens. One JSON line per case: the outcome (ok, refused at compile,
 * over_budget, timeout), masks timed, p50/p99/max microseconds.
 *
 * usage: bench_grammar MODEL.gguf [documents per constraint (default 20)]
 *        bench_grammar MODEL.gguf --hostile [seconds per case (default 30)] [case filter]
 * (BENCH_MASK_FUEL in the environment: the masks' budget, limits.max_mask_fuel).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
    int64_t max_work = 0;
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
            if (gram_mask_work(g) > max_work) max_work = gram_mask_work(g);
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
           "1f,\"max_work\":%lld,\"compile_ms\":%.2f,\"keys\":%d}\n",
           k->name, PASS_NAMES[p], n, t[n / 2], t[(size_t)((double)(n - 1) * 0.99)], t[n - 1], (long long)max_work,
           compile_ms[n_compiled / 2], keys);
    free(t);
    free(compile_ms);
    free(mask);
}

/* ---- the hostile set ------------------------------------------------------------------ */

/* kind: 'r' a regex, 's' a JSON Schema, 'g' GBNF */
typedef struct hostile {
    char kind;
    const char *text;
} hostile;

static const hostile HOSTILE[] = {
    {'r', "(.*){10}x"},
    {'r', "(.*){1000}x"},
    {'r', "(a|.*){50}b"},
    {'r', "((.*){10}){10}x"},
    {'r', "(.*.*){20}x"},
    {'r', "(.+){10}x"},
    {'r', "(.+){0,100}x"},
    {'r', "([a-z]*){30}$"},
    {'r', "(a*b*){20}c"},
    {'r', "(a?){100}a{100}"},
    {'r', "(\\w+\\s?){50}!"},
    {'r', "(\\d*){40}\\."},
    {'r', "(x*|y*){30}z"},
    {'r', "(.*a){20}"},
    {'r', "(.*?){10}x"},
    {'r', "((a|b)*){25}c"},
    {'r', "(.*,){10}.*"},
    {'r', "((ab)*|(ba)*){20}c"},
    {'r', "([^x]*){10}x"},
    {'r', "(.{0,10}){10}x"},
    {'r', "(.{1,5}){1,50}x"},
    {'r', "((.*)|(.+)){10}x"},
    {'r', "(a|aa)*b"},
    {'r', "(a|a)*b"},
    {'r', "(a+)+b"},
    {'r', "((a+)+)+b"},
    {'r', "(.*x.*){5}y"},
    {'r', "(\\s*\\S*){20}$"},
    {'r', "([ -~]*){64}\\n"},
    {'r', "(.*){10}(.*){10}x"},
    {'r', "(((.*){5}){5}){5}x"},
    {'r', "(a{0,5}){0,5}b"},
    {'r', "(.|\\n){0,500}x"},
    {'r', "([\\s\\S]*){20}x"},
    {'r', "(.*)(.*)(.*)(.*)(.*)(.*)(.*)(.*)(.*)(.*)x"},
    {'r', "(.+.+){10}x"},
    {'r', "(.*\\d){10}"},
    {'r', "((.*){2}|(.+){3}){8}x"},
    {'r', "(a|b|ab|ba){0,100}c"},
    {'r', "([a-z]+[0-9]*){30}#"},
    {'r', "(.*){1000}(.*){1000}x"},
    {'r', "((.+)+){100}x"},
    {'r', "([a-z]|[a-m]+|[n-z]*){40}!"},
    {'r', "(\\w*\\W*){100}$"},
    {'s', "{\"type\":\"string\",\"pattern\":\"^(.*){10}x$\"}"},
    {'s', "{\"type\":\"string\",\"pattern\":\"^(.*){1000}x$\"}"},
    {'s', "{\"type\":\"string\",\"pattern\":\"^([a-z]*){50}@$\"}"},
    {'s', "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"(.*){10}x\"},\"b\":{"
          "\"type\":\"string\",\"pattern\":\"(.+){20}y\"}},\"required\":[\"a\",\"b\"]}"},
    {'s', "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^(.+){20}$\"}}"},
    {'s', "{\"type\":\"string\",\"pattern\":\"^(\\\\w*\\\\s*){30}$\"}"},
    {'g', "root ::= ([^x]*){10} \"x\"\n"},
    {'g', "root ::= (\"a\"* \"b\"*){20} \"c\"\n"},
    {'g', "root ::= x{50} \"!\"\nx ::= [a-z]*\n"},
    {'g', "root ::= s{100} \".\"\ns ::= \" \"? [a-z]*\n"},
    {'g', "root ::= (([^x]*){10}){10} \"x\"\n"},
    {'g', "root ::= (\"a\" | [a-z]*){30} \".\"\n"},
    {'g', "root ::= (\"[\" [^\\]]* \"]\"?){20} \"x\"\n"},
    {'g', "root ::= (\"((((((((((\" [a-z]* \"))))))))))\")* ([^x]*){8} \"x\"\n"},
};
enum { N_HOSTILE = sizeof HOSTILE / sizeof HOSTILE[0], HOSTILE_STEPS = 24 };

/* The case's GBNF (caller frees), or NULL with the reason in *why. */
static char *hostile_gbnf(const hostile *h, const char **why) {
    char *gbnf = NULL;
    sp_status st = SP_OK;
    if (h->kind == 'r') {
        st = gram_regex_to_gbnf(h->text, strlen(h->text), &gbnf);
    } else if (h->kind == 's') {
        json_error_t jerr;
        json_t *schema = json_loads(h->text, 0, &jerr);
        if (!schema) {
            *why = "bad schema text";
            return NULL;
        }
        gram_schema_options opt = gram_schema_options_default();
        st = gram_schema_to_gbnf(schema, &opt, &gbnf);
        json_decref(schema);
    } else {
        gbnf = strdup(h->text);
    }
    if (st != SP_OK) *why = sp_last_error();
    return gbnf;
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            printf("\\%c", *s);
        } else if ((unsigned char)*s < 0x20) {
            printf("\\u%04x", *s);
        } else {
            putchar(*s);
        }
    }
    putchar('"');
}

/* The child's progress, for its line when the wall bound kills it. */
static volatile int hostile_masks;
static volatile double hostile_mask_start, hostile_max_us;

static void hostile_timeout(int sig) {
    (void)sig;
    double now = bench_now_us(), running = now - hostile_mask_start;
    printf(",\"outcome\":\"timeout\",\"masks\":%d,\"max_us\":%.1f}\n", hostile_masks,
           running > hostile_max_us ? running : hostile_max_us);
    fflush(stdout);
    _exit(0);
}

/* One case, in the child: prints its JSON line. */
static void hostile_run(int i, const gram_vocab *gv) {
    const hostile *h = &HOSTILE[i];
    const char *why = "";
    printf("{\"case\":%d,\"kind\":\"%c\",\"constraint\":", i, h->kind);
    json_str(h->text);
    fflush(stdout);
    double t0 = bench_now_us();
    hostile_mask_start = t0;
    char *gbnf = hostile_gbnf(h, &why);
    gram_grammar *g = NULL;
    gram_limits lim = gram_limits_default();
    const char *fuel = getenv("BENCH_MASK_FUEL"); /* another budget (the figures without one: 1e15) */
    if (fuel) lim.max_mask_fuel = strtoll(fuel, NULL, 10);
    if (gbnf && gram_compile(gbnf, strlen(gbnf), &lim, &g) != SP_OK) why = sp_last_error();
    free(gbnf);
    if (!g) {
        printf(",\"outcome\":\"refused\",\"why\":");
        json_str(why);
        printf("}\n");
        return;
    }
    gram_mask_prepare(g, gv);
    double compile_ms = (bench_now_us() - t0) / 1e3;
    gram_state *s;
    if (gram_state_create(g, &s) != SP_OK) abort();
    size_t words = gram_mask_words(gv);
    uint32_t *mask = malloc(sizeof *mask * words);
    int32_t *allowed = malloc(sizeof *allowed * words * 32);
    double t[HOSTILE_STEPS];
    int n = 0;
    int64_t max_work = 0;
    const char *outcome = "ok";
    unsigned seed = 12345u + (unsigned)i;
    for (int step = 0; step < HOSTILE_STEPS; step++) {
        double a = bench_now_us();
        hostile_mask_start = a;
        gram_mask_status ms = gram_mask_run(g, gv, s, mask, NULL);
        t[n++] = bench_now_us() - a;
        if (gram_mask_work(g) > max_work) max_work = gram_mask_work(g);
        hostile_masks = n;
        if (t[n - 1] > hostile_max_us) hostile_max_us = t[n - 1];
        if (ms != GRAM_MASK_OK) {
            outcome = "over_budget";
            break;
        }
        int32_t n_allowed = 0;
        for (size_t w = 0; w < words; w++)
            for (uint32_t bits = mask[w]; bits; bits &= bits - 1)
                allowed[n_allowed++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(bits));
        if (n_allowed == 0) break;
        seed = seed * 1103515245u + 12345u;
        if (!gram_state_advance_token(s, gv, allowed[(seed >> 8) % (unsigned)n_allowed])) abort();
        if (gram_state_finished(s)) break;
    }
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    printf(",\"outcome\":\"%s\",\"masks\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"max_work\":%lld,"
           "\"compile_ms\":%.2f}\n",
           outcome, n, t[n / 2], t[(int)((double)(n - 1) * 0.99)], t[n - 1], (long long)max_work, compile_ms);
    free(mask);
    free(allowed);
    gram_state_destroy(s);
    gram_grammar_destroy(g);
}

/* Every case (or those whose text contains filter), each in a child killed after limit_s. */
static int hostile_all(const gram_vocab *gv, int limit_s, const char *filter) {
    for (int i = 0; i < N_HOSTILE; i++) {
        if (filter && !strstr(HOSTILE[i].text, filter)) continue;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGALRM, hostile_timeout);
            alarm((unsigned)limit_s);
            hostile_run(i, gv);
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0) return 1;
        if (WIFSIGNALED(status)) {
            printf("{\"case\":%d,\"kind\":\"%c\",\"constraint\":", i, HOSTILE[i].kind);
            json_str(HOSTILE[i].text);
            printf(",\"outcome\":\"%s\",\"limit_s\":%d}\n", WTERMSIG(status) == SIGALRM ? "timeout" : "crashed",
                   limit_s);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar MODEL.gguf [documents]\n");
        return 2;
    }
    bool hostile_mode = argc > 2 && strcmp(argv[2], "--hostile") == 0;
    int docs = argc > 2 && !hostile_mode ? atoi(argv[2]) : 20;
    gguf_file *f;
    tok_vocab *v;
    if (gguf_open(argv[1], &f) != SP_OK || tok_vocab_load(f, &v) != SP_OK) {
        fprintf(stderr, "bench_grammar: %s\n", sp_last_error());
        return 1;
    }
    gguf_close(f);
    gram_vocab *gv;
    if (gram_vocab_create(v, &gv) != SP_OK) return 1;
    if (hostile_mode) {
        int rc = hostile_all(gv, argc > 3 ? atoi(argv[3]) : 30, argc > 4 ? argv[4] : NULL);
        gram_vocab_destroy(gv);
        tok_vocab_destroy(v);
        return rc;
    }
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

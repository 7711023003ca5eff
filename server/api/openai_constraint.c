/* openai_constraint.c: a request's output constraint, compiled where the request is
 * parsed (a preparation worker), so a bad one is a 400 and nothing is queued.
 *
 *   response_format  {"type": "text"} (none), {"type": "json_object"} (any JSON object, or
 *                    llama-server's {"type": "json_object", "schema": {...}}),
 *                    {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
 *   json_schema      a JSON Schema (llama-server's field)
 *   grammar          GBNF text (llama-server's field)
 *   guided_json      a JSON Schema, as an object or as JSON text (vLLM)
 *   guided_regex     a regular expression the whole output matches (vLLM)
 *   guided_choice    a list of strings, the output exactly one of them (vLLM)
 *   guided_grammar   GBNF text (vLLM)
 * At most one per request. Every form becomes GBNF (grammar/) and one compiled grammar,
 * which the request's choices share; the scheduler masks every token by it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

/* ---- compiled grammars shared by their text ---- */

struct srv_grammar_cache {
    pthread_mutex_t lock;
    struct {
        char *text; /* NULL: empty slot */
        gram_grammar *g;
        uint64_t used; /* clock at the last hit */
    } slot[SRV_GRAMMAR_CACHE_ENTRIES];
    uint64_t clock;
};

sp_status srv_grammar_cache_create(srv_grammar_cache **out) {
    srv_grammar_cache *c = calloc(1, sizeof *c);
    if (!c || pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return sp_fail(SP_ERR_NOMEM, "out of memory for the grammar cache");
    }
    *out = c;
    return SP_OK;
}

void srv_grammar_cache_destroy(srv_grammar_cache *c) {
    if (!c) return;
    for (int i = 0; i < SRV_GRAMMAR_CACHE_ENTRIES; i++) {
        free(c->slot[i].text);
        gram_grammar_destroy(c->slot[i].g);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* A reference to the cached grammar of text, or NULL. */
static gram_grammar *cache_get(srv_grammar_cache *c, const char *text) {
    gram_grammar *g = NULL;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < SRV_GRAMMAR_CACHE_ENTRIES && !g; i++)
        if (c->slot[i].text && strcmp(c->slot[i].text, text) == 0) {
            c->slot[i].used = ++c->clock;
            g = gram_grammar_share(c->slot[i].g);
        }
    pthread_mutex_unlock(&c->lock);
    return g;
}

/* Keeps a reference to g under text, in place of the least recently used entry. */
static void cache_put(srv_grammar_cache *c, const char *text, gram_grammar *g) {
    char *copy = strdup(text);
    if (!copy) return; /* not kept: the next request compiles again */
    pthread_mutex_lock(&c->lock);
    int victim = 0;
    for (int i = 1; i < SRV_GRAMMAR_CACHE_ENTRIES; i++)
        if (c->slot[i].used < c->slot[victim].used) victim = i;
    char *old_text = c->slot[victim].text;
    gram_grammar *old = c->slot[victim].g;
    c->slot[victim].text = copy;
    c->slot[victim].g = gram_grammar_share(g);
    c->slot[victim].used = ++c->clock;
    pthread_mutex_unlock(&c->lock);
    free(old_text);
    gram_grammar_destroy(old); /* requests still holding it keep it alive */
}

/* ---- the fields ---- */

/* The first token's mask within the budget (grammar.h, BUDGET), here before anything is
 * queued: a constraint whose first mask is over it is a 400, not a sequence that would end
 * in an error at its first token. The walk also leaves the mask cached for the scheduler.
 * SP_ERR_RANGE naming the budget, or SP_ERR_NOMEM. */
static sp_status first_mask_fits(gram_grammar *g, const gram_vocab *gv) {
    gram_state *s = NULL;
    uint32_t *mask = malloc(sizeof *mask * gram_mask_words(gv));
    sp_status st = mask ? gram_state_create(g, &s) : SP_ERR_NOMEM;
    if (st == SP_OK && gram_mask_run(g, gv, s, mask, NULL) == GRAM_MASK_OVER_BUDGET)
        st = sp_fail(SP_ERR_RANGE,
                     "the constraint is too costly to follow: its first token's mask needs more than the %lld work "
                     "units a mask may take (an ambiguous repetition, such as a bounded repetition of an "
                     "unbounded group; write it without the repetition)",
                     (long long)gram_limits_default().max_mask_fuel);
    if (!mask) st = sp_fail(SP_ERR_NOMEM, "out of memory for a grammar mask");
    gram_state_destroy(s);
    free(mask);
    return st;
}

sp_status srv__compile_grammar(const char *gbnf, const srv_model_info *mi, srv_request *r, const char *param,
                               srv_error *err) {
    gram_grammar *g = mi->grammars ? cache_get(mi->grammars, gbnf) : NULL;
    if (!g) {
        gram_limits lim = mi->grammar_limits.max_rules > 0 ? mi->grammar_limits : gram_limits_default();
        sp_status st = gram_compile(gbnf, strlen(gbnf), &lim, &g);
        if (st == SP_ERR_NOMEM) return srv__fail(err, SRV_ERROR_INTERNAL, param, "%s", sp_last_error());
        if (st != SP_OK) return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "'%s': %s", param, sp_last_error());
        /* the mask walks of every cut stack, here on the preparation worker, before the
         * grammar is shared: the scheduler's mask worker then meets no first walk. The first
         * mask is checked against the budget before (most hostile constraints are refused
         * after one mask's work) and, when over it, again after the walks (which may be what
         * it lacked: each cut stack's walk has a mask's budget of its own there) */
        if (mi->grammar_vocab) {
            st = first_mask_fits(g, mi->grammar_vocab);
            gram_mask_prepare(g, mi->grammar_vocab);
            if (st == SP_ERR_RANGE) st = first_mask_fits(g, mi->grammar_vocab);
        }
        if (st != SP_OK) {
            gram_grammar_destroy(g);
            if (st == SP_ERR_NOMEM) return srv__fail(err, SRV_ERROR_INTERNAL, param, "%s", sp_last_error());
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "'%s': %s", param, sp_last_error());
        }
        if (mi->grammars) cache_put(mi->grammars, gbnf, g); /* one server: one set of limits */
    }
    r->params.grammar = g;
    return SP_OK;
}

static sp_status compile_schema(const json_t *schema, const srv_model_info *mi, srv_request *r, const char *param,
                                srv_error *err) {
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return srv__type_error(err, param, "a JSON Schema (an object)", schema);
    gram_schema_options opt = gram_schema_options_default();
    if (mi->schema_max_depth > 0) opt.max_depth = mi->schema_max_depth;
    opt.compact = !mi->json_flexible;
    char *gbnf = NULL;
    sp_status st = gram_schema_to_gbnf(schema, &opt, &gbnf);
    if (st == SP_ERR_NOMEM) return srv__fail(err, SRV_ERROR_INTERNAL, param, "%s", sp_last_error());
    if (st != SP_OK)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "'%s': the schema at %s", param, sp_last_error());
    st = srv__compile_grammar(gbnf, mi, r, param, err);
    free(gbnf);
    return st;
}

static sp_status string_field(const json_t *v, const char *param, srv_error *err) {
    return json_is_string(v) ? SP_OK : srv__type_error(err, param, "a string", v);
}

/* response_format; *given is false for {"type": "text"}. */
static sp_status response_format(const json_t *v, const srv_model_info *mi, srv_request *r, bool *given,
                                 srv_error *err) {
    *given = false;
    if (!json_is_object(v)) return srv__type_error(err, "response_format", "an object", v);
    const json_t *type = json_object_get(v, "type");
    if (!type)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "response_format.type",
                         "'response_format.type' is required: \"text\", \"json_object\" or \"json_schema\".");
    if (!json_is_string(type)) return srv__type_error(err, "response_format.type", "a string", type);
    const char *t = json_string_value(type);
    if (strcmp(t, "text") == 0) return SP_OK;
    *given = true;
    if (strcmp(t, "json_object") == 0) {
        const json_t *schema = json_object_get(v, "schema");
        if (schema && !json_is_null(schema)) return compile_schema(schema, mi, r, "response_format.schema", err);
        json_t *any_object = json_pack("{s:s}", "type", "object");
        if (!any_object) return srv__fail(err, SRV_ERROR_INTERNAL, "response_format", "out of memory");
        sp_status st = compile_schema(any_object, mi, r, "response_format", err);
        json_decref(any_object);
        return st;
    }
    if (strcmp(t, "json_schema") == 0) {
        const json_t *js = json_object_get(v, "json_schema");
        if (!js)
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "response_format.json_schema",
                             "'response_format.json_schema' is required with type \"json_schema\": "
                             "{\"name\": ..., \"schema\": {...}}.");
        if (!json_is_object(js)) return srv__type_error(err, "response_format.json_schema", "an object", js);
        const json_t *strict = json_object_get(js, "strict");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return srv__type_error(err, "response_format.json_schema.strict", "a boolean", strict);
        const json_t *schema = json_object_get(js, "schema");
        if (!schema || json_is_null(schema))
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "response_format.json_schema.schema",
                             "'response_format.json_schema.schema' is required: the JSON Schema the answer follows.");
        return compile_schema(schema, mi, r, "response_format.json_schema.schema", err);
    }
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, "response_format.type",
                     "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", not \"%s\".", t);
}

/* One constraint field that is present (v not null). */
static sp_status constraint_field(const char *name, const json_t *v, const srv_model_info *mi, srv_request *r,
                                  srv_error *err) {
    sp_status st;
    if (strcmp(name, "grammar") == 0 || strcmp(name, "guided_grammar") == 0) {
        if ((st = string_field(v, name, err)) != SP_OK) return st;
        return srv__compile_grammar(json_string_value(v), mi, r, name, err);
    }
    if (strcmp(name, "json_schema") == 0) return compile_schema(v, mi, r, name, err);
    if (strcmp(name, "guided_json") == 0) {
        if (!json_is_string(v)) return compile_schema(v, mi, r, name, err);
        json_error_t jerr;
        json_t *schema = json_loads(json_string_value(v), JSON_DECODE_ANY, &jerr);
        if (!schema)
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, name, "'%s' is not valid JSON: %s (line %d, column %d).", name,
                             jerr.text, jerr.line, jerr.column);
        st = compile_schema(schema, mi, r, name, err);
        json_decref(schema);
        return st;
    }
    char *gbnf = NULL;
    if (strcmp(name, "guided_regex") == 0) {
        if ((st = string_field(v, name, err)) != SP_OK) return st;
        st = gram_regex_to_gbnf(json_string_value(v), json_string_length(v), &gbnf);
    } else { /* guided_choice */
        size_t n = json_is_array(v) ? json_array_size(v) : 0;
        if (n == 0) return srv__type_error(err, name, "a non-empty array of strings", v);
        const char **choices = calloc(n, sizeof *choices);
        if (!choices) return srv__fail(err, SRV_ERROR_INTERNAL, name, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const json_t *c = json_array_get(v, i);
            if (!json_is_string(c)) {
                free(choices);
                return srv__type_error(err, name, "a non-empty array of strings", v);
            }
            choices[i] = json_string_value(c);
        }
        st = gram_choice_to_gbnf(choices, n, &gbnf);
        free(choices);
    }
    if (st == SP_ERR_NOMEM) return srv__fail(err, SRV_ERROR_INTERNAL, name, "%s", sp_last_error());
    if (st != SP_OK) return srv__fail(err, SRV_ERROR_BAD_REQUEST, name, "'%s': %s", name, sp_last_error());
    st = srv__compile_grammar(gbnf, mi, r, name, err);
    free(gbnf);
    return st;
}

sp_status srv__request_constraint(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err) {
    static const char *const fields[] = {"json_schema",  "grammar",       "guided_json",
                                         "guided_regex", "guided_choice", "guided_grammar"};
    const char *first = NULL;
    const json_t *v = json_object_get(root, "response_format");
    if (v && !json_is_null(v)) {
        bool given;
        sp_status st = response_format(v, mi, r, &given, err);
        if (st != SP_OK) return st;
        if (given) first = "response_format";
    }
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        v = json_object_get(root, fields[i]);
        if (!v || json_is_null(v)) continue;
        if (first)
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, fields[i],
                             "'%s' and '%s' both constrain the output: give at most one.", first, fields[i]);
        first = fields[i];
        sp_status st = constraint_field(fields[i], v, mi, r, err);
        if (st != SP_OK) return st;
    }
    return SP_OK; /* guided_whitespace_pattern is refused with the others (openai_refused.c) */
}

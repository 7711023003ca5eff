/* gram_schema.c: JSON Schema to GBNF (gram_schema_to_gbnf, grammar.h); the leaves (numbers,
 * strings, patterns, enum, type) are in gram_schema_types.c.
 *
 * Each subschema becomes one rule named after where it sits (root, root-name for a
 * property, root-item, root-0 for an anyOf alternative, ...) unless it is just a shared
 * rule (string, integer, value, ...). Each $ref target becomes one rule, referenced by
 * name, so recursive schemas work; a $ref cycle with no object or array in between would
 * be left recursion and is SP_ERR_UNSUPPORTED.
 *
 * Layout: compact writes no whitespace at all ({"a":1,"b":[1,2]}); otherwise one
 * `ws ::= [ \t\n]{0,20}` stands between any two tokens (never before the document or after
 * it), which keeps the grammar unambiguous and a model unable to loop on whitespace.
 *
 * Keywords (an unknown keyword, or an annotation such as title or default, is ignored;
 * one that changes validity and is not listed here is SP_ERR_UNSUPPORTED):
 *   type          a union for a list. Without type, the kind the other keywords imply
 *                 (properties: object, items: array, minLength: string, minimum: number),
 *                 else any value: a narrower language, whose documents are all valid.
 *   enum, const   the values' JSON as literals; with type, only values of that type. Other
 *                 keywords beside them (minLength, ...) are refused.
 *   anyOf         alternation. oneOf: alternation when its alternatives are disjoint by
 *                 type, by const/enum values, or (objects) by a property both require with
 *                 disjoint schemas (a tagged union); else SP_ERR_UNSUPPORTED, as a grammar
 *                 cannot enforce oneOf's exclusivity.
 *   allOf         one part (or equal parts): that part; object schemas: merged (a property
 *                 in several parts must match each; additionalProperties of each part holds).
 *   $ref          local only: "#", "#/$defs/x", "#/definitions/x", any "#/json/pointer".
 *   objects       listed properties in the schema's order, required ones always, optional
 *                 ones omissible; then, when additionalProperties is true or a schema (or
 *                 absent with no properties), other keys (values of that schema, else any
 *                 value); absent beside properties, only the listed keys (still valid). Another key never spells a
 * listed key (while it follows a listed key's characters it takes no escapes), so no key repeats; two other keys may
 * still be equal. A required key missing from properties comes after them, with the additionalProperties schema. arrays
 * items, prefixItems (draft 4: items as a list, additionalItems), minItems, maxItems. strings, numbers: see
 * gram_schema_types.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/grammar_defaults.h"
#include "grammar/grammar_internal.h"

enum { SCHEMA_HINT_MAX = 48 }; /* rule names are cut to this, then made unique */

/* Keywords that change validity and are enforced here; keywords a grammar cannot enforce. */
// clang-format off
static const char *const schema_handled[] = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required", "additionalProperties",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
static const char *const schema_refused[] = {
    "uniqueItems", "multipleOf", "not", "if", "then", "else", "patternProperties", "propertyNames",
    "dependentRequired", "dependentSchemas", "dependencies", "minProperties", "maxProperties", "contains",
    "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", NULL};
// clang-format on

static sp_status schema_body(gram_schema_ctx *c, const json_t *s, const char *hint, int depth, strbuf *o);

/* ---- errors, pointers, names, rules -------------------------------------------------- */

static bool kw_in(const char *kw, const char *const *list) {
    for (; *list; list++)
        if (strcmp(kw, *list) == 0) return true;
    return false;
}

bool gram__schema_handled(const char *kw) {
    return kw_in(kw, schema_handled);
}

/* The first keyword of s that changes validity other than except1 and except2, or NULL. */
static const char *first_other(const json_t *s, const char *except1, const char *except2) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (kw_in(k, schema_handled) && strcmp(k, except1) && (!except2 || strcmp(k, except2))) return k;
    }
    return NULL;
}

sp_status gram__schema_nomem(void) {
    return sp_fail(SP_ERR_NOMEM, "JSON Schema: out of memory");
}

sp_status gram__schema_fail(gram_schema_ctx *c, sp_status st, const char *kw, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *p = c->ptr.p ? c->ptr.p : "";
    if (kw) return sp_fail(st, "%s/%s: %s", p, kw, msg);
    return sp_fail(st, "%s: %s", p[0] ? p : "(root)", msg);
}

/* Appends a segment to the pointer; returns the length to go back to (ptr_pop). */
static size_t ptr_push(gram_schema_ctx *c, const char *seg) {
    size_t mark = c->ptr.len;
    strbuf_append(&c->ptr, "/", 1);
    for (; *seg; seg++) gram__put(&c->ptr, *seg == '~' ? "~0" : *seg == '/' ? "~1" : (char[2]){*seg, 0});
    return mark;
}

static size_t ptr_push_index(gram_schema_ctx *c, const char *kw, size_t i) {
    char num[24];
    snprintf(num, sizeof num, "%zu", i);
    size_t mark = ptr_push(c, kw);
    ptr_push(c, num);
    return mark;
}

static void ptr_pop(gram_schema_ctx *c, size_t mark) {
    c->ptr.len = mark;
    if (c->ptr.p) c->ptr.p[mark] = '\0';
}

static void ptr_set(gram_schema_ctx *c, const char *text) {
    ptr_pop(c, 0);
    gram__put(&c->ptr, text);
}

static bool is_name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
}

/* A new rule (body to come) named from hint: other characters become '-', cut, made unique. */
static sp_status rule_reserve(gram_schema_ctx *c, const char *hint, size_t *idx) {
    char base[SCHEMA_HINT_MAX + 1], name[SCHEMA_HINT_MAX + 24];
    size_t n = 0;
    for (; *hint && n < SCHEMA_HINT_MAX; hint++) base[n++] = is_name_char(*hint) ? *hint : '-';
    if (!n) base[n++] = 'r';
    base[n] = '\0';
    snprintf(name, sizeof name, "%s", base);
    while (json_object_get(c->names, name)) snprintf(name, sizeof name, "%s-%lu", base, ++c->next_id);
    if (!sp_grow((void **)&c->rules, &c->cap_rules, c->n_rules + 1, sizeof *c->rules)) return gram__schema_nomem();
    gram_schema_rule *r = c->rules;
    if (json_object_set_new(c->names, name, json_true()) || !(r[c->n_rules].name = strdup(name)))
        return gram__schema_nomem();
    r[c->n_rules].body = NULL;
    *idx = c->n_rules++;
    return SP_OK;
}

/* Takes body's text as rule idx's body. */
static sp_status rule_define(gram_schema_ctx *c, size_t idx, strbuf *body) {
    if (body->len == 0) gram__put(body, "\"\"");
    char *text = strbuf_take(body);
    if (!text) return gram__schema_nomem();
    c->rules[idx].body = text;
    return SP_OK;
}

/* Appends one atom matching s: a rule's name (a new rule named from hint, unless s's body is
 * just a name). */
static sp_status schema_atom(gram_schema_ctx *c, const json_t *s, const char *hint, int depth, strbuf *o) {
    strbuf body = {0};
    size_t idx, i = 0;
    sp_status st = schema_body(c, s, hint, depth + 1, &body);
    if (st == SP_OK && body.failed) st = gram__schema_nomem();
    while (st == SP_OK && i < body.len && is_name_char(body.p[i])) i++;
    if (st == SP_OK && body.len && i == body.len) {
        strbuf_append(o, body.p, body.len);
    } else if (st == SP_OK && (st = rule_reserve(c, hint, &idx)) == SP_OK &&
               (st = rule_define(c, idx, &body)) == SP_OK) {
        gram__put(o, c->rules[idx].name);
    }
    free(body.p);
    return st;
}

/* ---- objects --------------------------------------------------------------------------- */

typedef struct schema_prop {
    const char *key, *kw; /* kw: where its schema is, "properties" or "additionalProperties" */
    const json_t *schema;
    bool required;
} schema_prop;

static int key_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A rule for the text of a key (between the quotes) that is none of keys[0..n) (sorted
 * here): while it follows some key's characters, the next one is a key's next character or
 * a character no key has there (no escape), after which anything may follow. */
static sp_status schema_other_key(gram_schema_ctx *c, const char *hint, const char **keys, size_t n, size_t *rule) {
    typedef struct node {
        size_t lo, hi, depth, rule; /* keys[lo, hi) share their first depth bytes */
    } node;
    node *stack = NULL;
    size_t top = 0, cap = 0;
    strbuf body = {0}, cls = {0}, raw = {0};
    qsort(keys, n, sizeof *keys, key_cmp);
    sp_status st = rule_reserve(c, hint, rule);
    if (st == SP_OK && !sp_grow((void **)&stack, &cap, 1, sizeof *stack)) st = gram__schema_nomem();
    if (st == SP_OK) stack[top++] = (node){0, n, 0, *rule};
    while (st == SP_OK && top) {
        node nd = stack[--top];
        size_t i = nd.lo, child;
        bool ends = strlen(keys[i]) == nd.depth; /* a key ends here: the text may not */
        i += ends;
        cls.len = 0;
        gram__put(&body, "(");
        while (st == SP_OK && i < nd.hi) {
            size_t at = nd.depth, j = i + 1;
            uint32_t cp = gram__utf8_get(keys[i], strlen(keys[i]), &at);
            while (j < nd.hi && strncmp(keys[j] + nd.depth, keys[i] + nd.depth, at - nd.depth) == 0) j++;
            if ((st = rule_reserve(c, hint, &child)) != SP_OK) break;
            if (!sp_grow((void **)&stack, &cap, top + 1, sizeof *stack)) {
                st = gram__schema_nomem();
                break;
            }
            stack[top++] = (node){i, j, at, child};
            raw.len = 0;
            gram__json_escape_cp(&raw, cp);
            gram__gbnf_literal(&body, raw.p, raw.len);
            strbuf_printf(&body, " %s | ", c->rules[child].name);
            gram__gbnf_cp(&cls, cp, true);
            i = j;
        }
        gram__put(&body, "[^");
        if (cls.len) strbuf_append(&body, cls.p, cls.len);
        gram__put(&body, "\\x22\\x5C\\x00-\\x1F] ");
        gram__schema_use(c, &body, SR_CHAR);
        gram__put(&body, ends ? "*)" : "*)?");
        if (st == SP_OK && (cls.failed || raw.failed)) st = gram__schema_nomem();
        if (st == SP_OK) st = rule_define(c, nd.rule, &body);
    }
    free(stack);
    free(body.p);
    free(cls.p);
    free(raw.p);
    return st;
}

/* "," ws member, optional or not. */
static void object_piece(gram_schema_ctx *c, strbuf *o, const char *member, bool required) {
    gram__put(o, required ? "\",\"" : "(\",\"");
    gram__schema_ws(c, o);
    gram__put(o, member);
    gram__put(o, required ? " " : ")? ");
}

/* Members in the listed order: with k the first required one, the body is one of "member j,
 * then the rest from j + 1" for j <= k; each rest from m <= k is a rule (tail), so the
 * grammar grows linearly. Other keys (ex) come last. */
static sp_status schema_object(gram_schema_ctx *c, const json_t *s, const char *hint, int depth, strbuf *o) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties"), *v;
    if (props && !json_is_object(props))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "properties", "must be an object");
    if (req && !json_is_array(req)) return gram__schema_fail(c, SP_ERR_INVALID_ARG, "required", "must be an array");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "additionalProperties", "must be a schema");
    /* additionalProperties absent beside properties: only the listed keys. Every document
     * is still valid, and a model is not invited to invent keys (llama.cpp does the same;
     * OpenAI's strict mode demands false anyway). */
    bool closed = json_is_false(add) || (!add && props);
    size_t cap = json_object_size(props) + json_array_size(req), n = 0, k = 0, r;
    schema_prop *p = calloc(cap + 1, sizeof *p);
    char **member = calloc(2 * cap + 2, sizeof *member), **suffix = member + cap + 1, h[2 * SCHEMA_HINT_MAX];
    const char **keys = calloc(cap + 1, sizeof *keys), *key;
    strbuf ex = {0}, extra_tail = {0}, rest = {0}, b = {0}, heads = {0};
    long saved_ref = c->cur_ref;
    sp_status st = p && member && keys ? SP_OK : gram__schema_nomem();
    json_object_foreach((json_t *)props, key, v) {
        if (st == SP_OK) p[n++] = (schema_prop){key, "properties", v, false};
    }
    for (size_t i = 0; st == SP_OK && i < json_array_size(req); i++) {
        const json_t *name = json_array_get(req, i);
        size_t j = 0;
        if (!json_is_string(name)) st = gram__schema_fail(c, SP_ERR_INVALID_ARG, "required", "must hold strings");
        while (st == SP_OK && j < n && strcmp(p[j].key, json_string_value(name))) j++;
        if (st == SP_OK && j < n) p[j].required = true;
        if (st == SP_OK && j == n && json_is_false(add))
            st = gram__schema_fail(c, SP_ERR_INVALID_ARG, "required",
                                   "\"%s\" is not in properties and additionalProperties is false",
                                   json_string_value(name));
        if (st == SP_OK && j == n) p[n++] = (schema_prop){json_string_value(name), "additionalProperties", add, true};
    }
    c->cur_ref = -1; /* "{" comes first: references inside cannot recurse on the left */
    for (size_t i = 0; st == SP_OK && i < n; i++) {
        strbuf text = {0};
        gram__json_string_text(&text, p[i].key, strlen(p[i].key));
        if (c->compact) gram__put(&text, ":");
        gram__gbnf_literal(&b, text.p, text.len);
        if (text.failed) b.failed = true;
        free(text.p);
        if (!c->compact) gram__schema_ws(c, &b);
        if (!c->compact) gram__put(&b, "\":\"");
        gram__schema_ws(c, &b);
        size_t mark = ptr_push(c, p[i].kw);
        if (p[i].kw[0] == 'p') ptr_push(c, p[i].key);
        snprintf(h, sizeof h, "%s-%s", hint, p[i].key);
        st = schema_atom(c, p[i].schema ? p[i].schema : json_true(), h, depth, &b);
        ptr_pop(c, mark);
        gram__schema_ws(c, &b);
        keys[i] = p[i].key;
        if (st == SP_OK && !(member[i] = strbuf_take(&b))) st = gram__schema_nomem();
    }
    if (st == SP_OK && !closed) {
        snprintf(h, sizeof h, "%s-key", hint);
        if (n && (st = schema_other_key(c, h, keys, n, &r)) == SP_OK)
            strbuf_printf(&ex, "\"\\\"\" %s \"\\\"\"", c->rules[r].name);
        if (!n) gram__schema_use(c, &ex, SR_STRING);
        gram__schema_ws(c, &ex);
        gram__put(&ex, "\":\"");
        gram__schema_ws(c, &ex);
        size_t mark = ptr_push(c, "additionalProperties");
        snprintf(h, sizeof h, "%s-extra", hint);
        if (st == SP_OK) st = schema_atom(c, add ? add : json_true(), h, depth, &ex);
        ptr_pop(c, mark);
        gram__schema_ws(c, &ex);
        gram__put(&extra_tail, "(\",\"");
        gram__schema_ws(c, &extra_tail);
        if (ex.len) strbuf_append(&extra_tail, ex.p, ex.len);
        gram__put(&extra_tail, ")*");
    }
    c->cur_ref = saved_ref;
    while (k < n && !p[k].required) k++;
    for (size_t i = k + 1; st == SP_OK && i < n; i++) object_piece(c, &rest, member[i], p[i].required);
    if (extra_tail.len) strbuf_append(&rest, extra_tail.p, extra_tail.len);
    snprintf(h, sizeof h, "%s-tail", hint);
    for (size_t m = k; st == SP_OK && m >= 1; m--) {
        if (m < n) object_piece(c, &b, member[m], p[m].required);
        if (m == n && extra_tail.len) strbuf_append(&b, extra_tail.p, extra_tail.len);
        if (m < n) gram__put(&b, m == k ? (rest.p ? rest.p : "") : suffix[m + 1]);
        if (m == n) {
            if (!(suffix[m] = strbuf_take(&b))) st = gram__schema_nomem();
        } else if ((st = rule_reserve(c, h, &r)) == SP_OK && (st = rule_define(c, r, &b)) == SP_OK) {
            if (!(suffix[m] = strdup(c->rules[r].name))) st = gram__schema_nomem();
        }
    }
    for (size_t j = 0; st == SP_OK && j <= k && j < n; j++)
        strbuf_printf(&heads, "%s%s %s", j ? " | " : "", member[j], j < k ? suffix[j + 1] : rest.p ? rest.p : "");
    if (st == SP_OK && k == n && ex.len) strbuf_printf(&heads, "%s%s %s", n ? " | " : "", ex.p, extra_tail.p);
    gram__put(o, "\"{\"");
    gram__schema_ws(c, o);
    if (heads.len) strbuf_printf(o, "(%s)%s ", heads.p, k == n ? "?" : "");
    gram__put(o, "\"}\"");
    if (st == SP_OK && (ex.failed || extra_tail.failed || rest.failed || b.failed || heads.failed))
        st = gram__schema_nomem();
    for (size_t i = 0; member && i < 2 * cap + 2; i++) free(member[i]);
    free(member);
    free(p);
    free(keys);
    free(ex.p);
    free(extra_tail.p);
    free(rest.p);
    free(b.p);
    free(heads.p);
    return st;
}

/* ---- arrays ---------------------------------------------------------------------------- */

static sp_status schema_array(gram_schema_ctx *c, const json_t *s, const char *hint, int depth, strbuf *o) {
    const json_t *prefix = json_object_get(s, "prefixItems"), *rest = json_object_get(s, "items");
    const char *prefix_kw = "prefixItems", *rest_kw = "items";
    char h[SCHEMA_HINT_MAX + 32];
    if (json_is_array(rest)) { /* draft 4: items as a list, additionalItems for the rest */
        if (prefix) return gram__schema_fail(c, SP_ERR_INVALID_ARG, "items", "a list beside prefixItems");
        prefix = rest;
        prefix_kw = "items";
        rest = json_object_get(s, rest_kw = "additionalItems");
    }
    if (prefix && !json_is_array(prefix))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, prefix_kw, "must be an array");
    if (rest && !json_is_boolean(rest) && !json_is_object(rest))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, rest_kw, "must be a schema");
    long long lo, hi, k = (long long)json_array_size(prefix);
    sp_status st = gram__schema_count(c, s, "minItems", &lo);
    if (st == SP_OK) st = gram__schema_count(c, s, "maxItems", &hi);
    if (st != SP_OK) return st;
    if (lo < 0) lo = 0;
    if (hi >= 0 && lo > hi)
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "maxItems", "minItems %lld is above maxItems %lld", lo, hi);
    if (json_is_false(rest) && (hi < 0 || hi > k)) hi = k;
    if (lo > hi && hi >= 0)
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "minItems", "above the %lld items %s allows", k, prefix_kw);
    if (hi >= 0 && k > hi) k = hi;
    long saved_ref = c->cur_ref, closes = 0;
    c->cur_ref = -1; /* "[" comes first */
    gram__put(o, "\"[\"");
    gram__schema_ws(c, o);
    for (long long i = 0; st == SP_OK && i < k; i++) {
        if (i >= lo) gram__put(o, "("); /* items past minItems are optional, each after the one before */
        closes += i >= lo;
        if (i) gram__put(o, "\",\"");
        if (i) gram__schema_ws(c, o);
        size_t mark = ptr_push_index(c, prefix_kw, (size_t)i);
        snprintf(h, sizeof h, "%.*s-item-%lld", SCHEMA_HINT_MAX, hint, i);
        st = schema_atom(c, json_array_get(prefix, (size_t)i), h, depth, o);
        ptr_pop(c, mark);
        gram__schema_ws(c, o);
    }
    if (st == SP_OK && (hi < 0 || hi > k)) {
        strbuf item = {0};
        long long more_lo = lo > k ? lo - k : 0, more_hi = hi < 0 ? -1 : hi - k;
        size_t mark = ptr_push(c, rest_kw);
        snprintf(h, sizeof h, "%.*s-item", SCHEMA_HINT_MAX, hint);
        st = schema_atom(c, rest ? rest : json_true(), h, depth, &item);
        ptr_pop(c, mark);
        gram__schema_ws(c, &item);
        if (st == SP_OK && item.failed) st = gram__schema_nomem();
        if (st == SP_OK && k == 0) { /* item ("," item){lo-1, hi-1}, optional when lo is 0 */
            strbuf_printf(o, "%s%s", lo ? "" : "(", item.p);
            if (more_hi != 1) strbuf_printf(o, "(\",\"%s%s)", c->compact ? " " : " ws ", item.p);
            if (more_hi != 1) gram__schema_quant(o, more_lo ? more_lo - 1 : 0, more_hi < 0 ? -1 : more_hi - 1);
            if (!lo) gram__put(o, ")?");
        } else if (st == SP_OK) {
            strbuf_printf(o, "(\",\"%s%s)", c->compact ? " " : " ws ", item.p);
            gram__schema_quant(o, more_lo, more_hi);
        }
        free(item.p);
    }
    for (; closes > 0; closes--) gram__put(o, ")?");
    gram__put(o, " \"]\"");
    c->cur_ref = saved_ref;
    return st;
}

/* ---- $ref ------------------------------------------------------------------------------ */

/* The schema a local reference ("#", "#/json/pointer") points to, or NULL; *last is its last
 * segment, decoded. */
static const json_t *ref_target(gram_schema_ctx *c, const char *ref, strbuf *last) {
    const json_t *t = ref[0] == '#' ? c->root : NULL;
    for (const char *p = ref + 1; t && *p;) {
        if (*p++ != '/') return NULL;
        last->len = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) {
                ch = *++p == '0' ? '~' : '/';
            } else if (ch == '%' && p[1] && p[2] && strchr("0123456789abcdefABCDEF", p[1]) &&
                       strchr("0123456789abcdefABCDEF", p[2])) {
                char hex[3] = {p[1], p[2], 0};
                ch = (char)strtol(hex, NULL, 16);
                p += 2;
            }
            strbuf_append(last, &ch, 1);
        }
        const char *seg = last->len ? last->p : "";
        char *end;
        unsigned long i = strtoul(seg, &end, 10);
        if (json_is_object(t))
            t = json_object_get(t, seg);
        else
            t = json_is_array(t) && seg[0] >= '0' && seg[0] <= '9' && !*end ? json_array_get(t, i) : NULL;
    }
    return t;
}

const json_t *gram__schema_resolve(gram_schema_ctx *c, const json_t *s) {
    strbuf last = {0};
    for (int hops = 0; hops <= c->max_depth && json_is_string(json_object_get(s, "$ref")); hops++)
        s = ref_target(c, json_string_value(json_object_get(s, "$ref")), &last);
    free(last.p);
    return s;
}

static sp_status ref_edge(gram_schema_ctx *c, size_t to) {
    if (c->cur_ref < 0) return SP_OK;
    if (!sp_grow((void **)&c->edges, &c->cap_edges, 2 * c->n_edges + 2, sizeof *c->edges)) return gram__schema_nomem();
    size_t *e = c->edges;
    e[2 * c->n_edges] = (size_t)c->cur_ref;
    e[2 * c->n_edges++ + 1] = to;
    return SP_OK;
}

/* A new rule for target t, visited at its own pointer where. */
static sp_status ref_define(gram_schema_ctx *c, const json_t *t, const char *where, const char *hint, int depth) {
    size_t rule, me = c->n_refs;
    if (!sp_grow((void **)&c->refs, &c->cap_refs, c->n_refs + 1, sizeof *c->refs)) return gram__schema_nomem();
    gram_schema_ref *r = c->refs;
    sp_status st = rule_reserve(c, hint, &rule);
    if (st != SP_OK) return st;
    r[me] = (gram_schema_ref){t, rule, strdup(where)};
    c->n_refs++;
    char *saved_ptr = strdup(c->ptr.p ? c->ptr.p : "");
    long saved_ref = c->cur_ref;
    if (!r[me].ptr || !saved_ptr) {
        free(saved_ptr);
        return gram__schema_nomem();
    }
    ptr_set(c, where);
    c->cur_ref = (long)me;
    strbuf body = {0};
    st = schema_body(c, t, c->rules[rule].name, depth + 1, &body);
    ptr_set(c, saved_ptr);
    free(saved_ptr);
    c->cur_ref = saved_ref;
    if (st == SP_OK) st = rule_define(c, rule, &body);
    free(body.p);
    return st;
}

static sp_status schema_ref(gram_schema_ctx *c, const json_t *s, int depth, strbuf *o) {
    const json_t *ref = json_object_get(s, "$ref");
    const char *other = first_other(s, "$ref", NULL);
    if (!json_is_string(ref)) return gram__schema_fail(c, SP_ERR_INVALID_ARG, "$ref", "must be a string");
    if (other) return gram__schema_fail(c, SP_ERR_UNSUPPORTED, other, "%s beside $ref is not supported", other);
    const char *text = json_string_value(ref);
    if (text[0] != '#')
        return gram__schema_fail(c, SP_ERR_UNSUPPORTED, "$ref", "only local references (#...) are supported, not %s",
                                 text);
    strbuf last = {0};
    const json_t *t = ref_target(c, text, &last);
    size_t i = 0;
    sp_status st = t ? SP_OK : gram__schema_fail(c, SP_ERR_INVALID_ARG, "$ref", "%s points to nothing", text);
    while (t && i < c->n_refs && c->refs[i].target != t) i++;
    if (st == SP_OK && i == c->n_refs) st = ref_define(c, t, text + 1, last.len ? last.p : "ref", depth);
    if (st == SP_OK) st = ref_edge(c, i);
    if (st == SP_OK) gram__put(o, c->rules[c->refs[i].rule].name);
    free(last.p);
    return st;
}

/* A ref whose rule may reach itself before consuming a byte would be left recursion. */
static sp_status schema_check_cycles(gram_schema_ctx *c) {
    bool *gone = calloc(c->n_refs + 1, sizeof *gone), changed = true;
    if (!gone) return gram__schema_nomem();
    while (changed) { /* peel off refs that reach no remaining ref */
        changed = false;
        for (size_t i = 0; i < c->n_refs; i++) {
            size_t e = 0;
            while (!gone[i] && e < c->n_edges && (c->edges[2 * e] != i || gone[c->edges[2 * e + 1]])) e++;
            if (!gone[i] && e == c->n_edges) gone[i] = changed = true;
        }
    }
    size_t i = 0;
    while (i < c->n_refs && gone[i]) i++;
    for (size_t step = 0; i < c->n_refs && step < c->n_refs; step++) { /* walk onto the cycle */
        size_t e = 0;
        while (c->edges[2 * e] != i || gone[c->edges[2 * e + 1]]) e++;
        i = c->edges[2 * e + 1];
    }
    free(gone);
    if (i == c->n_refs) return SP_OK;
    const char *p = c->refs[i].ptr && c->refs[i].ptr[0] ? c->refs[i].ptr : "(root)";
    return sp_fail(SP_ERR_UNSUPPORTED, "%s: reaches itself through $ref with no object or array in between", p);
}

/* ---- allOf ----------------------------------------------------------------------------- */

/* Whether s constrains anything; whether a and b constrain alike (annotations aside). */
static bool schema_constrains(const json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (kw_in(k, schema_handled) || kw_in(k, schema_refused)) return true;
    }
    return !json_is_object(s) && !json_is_true(s);
}

static bool schema_same(const json_t *a, const json_t *b) {
    if (json_equal((json_t *)a, (json_t *)b)) return true;
    if (!json_is_object(a) || !json_is_object(b)) return false;
    for (int l = 0; l < 2; l++)
        for (const char *const *k = l ? schema_refused : schema_handled; *k; k++) {
            const json_t *x = json_object_get(a, *k), *y = json_object_get(b, *k);
            if ((x || y) && !(x && y && json_equal((json_t *)x, (json_t *)y))) return false;
        }
    return true;
}

/* {"allOf": [a, b]} (new reference), or a when b is the same. */
static json_t *schema_both(const json_t *a, const json_t *b) {
    if (schema_same(a, b)) return json_incref((json_t *)a);
    return json_pack("{s:[OO]}", "allOf", a, b);
}

/* Merges object schemas parts[0..n) (their $refs followed) into *out (new reference). */
static sp_status schema_merge(gram_schema_ctx *c, const json_t **parts, const size_t *where, size_t n, json_t **out) {
    static const char *const merged_kws[] = {"type", "properties", "required", "additionalProperties", NULL};
    json_t *props = json_object(), *req = json_array(), *adds = json_array(), *x;
    bool closed = false;
    sp_status st = props && req && adds ? SP_OK : gram__schema_nomem();
    for (size_t i = 0; st == SP_OK && i < n; i++) {
        const json_t *t = json_object_get(parts[i], "type"), *pp = json_object_get(parts[i], "properties");
        const json_t *add = json_object_get(parts[i], "additionalProperties"),
                     *rq = json_object_get(parts[i], "required");
        const char *k, *bad = NULL;
        json_object_foreach((json_t *)parts[i], k, x) {
            if (!bad && (kw_in(k, schema_handled) || kw_in(k, schema_refused)) && !kw_in(k, merged_kws)) bad = k;
        }
        if (!bad && t && !(json_is_string(t) && strcmp(json_string_value(t), "object") == 0)) bad = "type";
        size_t mark = where[i] == (size_t)-1 ? c->ptr.len : ptr_push_index(c, "allOf", where[i]);
        if (bad)
            st = gram__schema_fail(c, SP_ERR_UNSUPPORTED, bad,
                                   "allOf merges only objects (type, properties, required, "
                                   "additionalProperties)");
        else if ((pp && !json_is_object(pp)) || (rq && !json_is_array(rq)))
            st = gram__schema_fail(c, SP_ERR_INVALID_ARG, pp && !json_is_object(pp) ? "properties" : "required",
                                   "malformed");
        ptr_pop(c, mark);
        json_object_foreach((json_t *)pp, k, x) {
            const json_t *old = json_object_get(props, k);
            if (st == SP_OK && json_object_set_new(props, k, old ? schema_both(old, x) : json_incref(x)))
                st = gram__schema_nomem();
        }
        if (st == SP_OK && rq && json_array_extend(req, (json_t *)rq)) st = gram__schema_nomem();
        closed = closed || json_is_false(add);
        if (st == SP_OK && json_is_object(add) && json_array_append(adds, (json_t *)add)) st = gram__schema_nomem();
    }
    for (size_t i = 0; st == SP_OK && i < n; i++) { /* each part's additionalProperties holds */
        const json_t *add = json_object_get(parts[i], "additionalProperties"),
                     *pp = json_object_get(parts[i], "properties");
        const char *k;
        void *tmp;
        if (!json_is_false(add) && !json_is_object(add)) continue;
        json_object_foreach_safe(props, tmp, k, x) {
            if (json_object_get(pp, k)) continue;
            if (json_is_false(add))
                json_object_del(props, k);
            else if (json_object_set_new(props, k, schema_both(x, add)))
                st = gram__schema_nomem();
        }
    }
    *out = st == SP_OK ? json_pack("{s:s, s:O, s:O}", "type", "object", "properties", props, "required", req) : NULL;
    if (st == SP_OK && !*out) st = gram__schema_nomem();
    if (st == SP_OK && closed) json_object_set_new(*out, "additionalProperties", json_false());
    if (st == SP_OK && !closed && json_array_size(adds) == 1)
        json_object_set(*out, "additionalProperties", json_array_get(adds, 0));
    if (st == SP_OK && !closed && json_array_size(adds) > 1)
        json_object_set_new(*out, "additionalProperties", json_pack("{s:O}", "allOf", adds));
    json_decref(props);
    json_decref(req);
    json_decref(adds);
    return st;
}

static sp_status schema_all_of(gram_schema_ctx *c, const json_t *s, const char *hint, int depth, strbuf *o) {
    const json_t *all = json_object_get(s, "allOf");
    if (!json_is_array(all) || !json_array_size(all))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, "allOf", "must be a non-empty array of schemas");
    size_t n = json_array_size(all) + 1, np = 0;
    const json_t **parts = calloc(n, sizeof *parts), **orig = calloc(n, sizeof *orig);
    size_t *where = calloc(n, sizeof *where);
    json_t *self = json_copy((json_t *)s), *merged = NULL;
    sp_status st = parts && orig && where && self ? SP_OK : gram__schema_nomem();
    if (st == SP_OK) json_object_del(self, "allOf");
    if (st == SP_OK && schema_constrains(self)) parts[np] = orig[np] = self, where[np++] = (size_t)-1;
    for (size_t i = 0; st == SP_OK && i + 1 < n; i++) {
        const json_t *item = json_array_get(all, i), *r = gram__schema_resolve(c, item);
        size_t mark = ptr_push_index(c, "allOf", i);
        const char *ref = json_string_value(json_object_get(item, "$ref"));
        if (!r && ref && ref[0] != '#')
            st = gram__schema_fail(c, SP_ERR_UNSUPPORTED, "$ref", "only local references (#...) are supported");
        else if (!r)
            st = gram__schema_fail(c, SP_ERR_INVALID_ARG, "$ref", "a $ref on the way points to nothing");
        if (st == SP_OK && json_is_object(item) && json_object_get(item, "$ref") && first_other(item, "$ref", NULL))
            st = gram__schema_fail(c, SP_ERR_UNSUPPORTED, "$ref", "keywords beside $ref are not supported");
        ptr_pop(c, mark);
        if (st == SP_OK && schema_constrains(r)) parts[np] = r, orig[np] = item, where[np++] = i;
    }
    bool same = true;
    for (size_t i = 1; i < np; i++) same = same && schema_same(parts[0], parts[i]);
    if (st == SP_OK && np == 0) {
        gram__schema_use(c, o, SR_VALUE);
    } else if (st == SP_OK && same) { /* one part: itself, $refs and all */
        size_t mark = where[0] == (size_t)-1 ? c->ptr.len : ptr_push_index(c, "allOf", where[0]);
        st = schema_body(c, orig[0], hint, depth + 1, o);
        ptr_pop(c, mark);
    } else if (st == SP_OK && (st = schema_merge(c, parts, where, np, &merged)) == SP_OK) {
        size_t mark = ptr_push(c, "allOf");
        st = schema_body(c, merged, hint, depth + 1, o);
        ptr_pop(c, mark);
    }
    json_decref(merged);
    json_decref(self);
    free(parts);
    free(orig);
    free(where);
    return st;
}

/* ---- anyOf, oneOf ---------------------------------------------------------------------- */

static sp_status schema_any_of(gram_schema_ctx *c, const json_t *s, const char *hint, int depth, strbuf *o) {
    bool one = json_object_get(s, "oneOf") != NULL;
    const char *kw = one ? "oneOf" : "anyOf", *other = first_other(s, kw, NULL);
    const json_t *alts = json_object_get(s, kw);
    char h[SCHEMA_HINT_MAX + 32];
    if (!json_is_array(alts) || !json_array_size(alts))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, kw, "must be a non-empty array of schemas");
    if (other) return gram__schema_fail(c, SP_ERR_UNSUPPORTED, other, "%s beside %s is not supported", other, kw);
    size_t n = json_array_size(alts);
    for (size_t i = 0; one && i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            if (!gram__schema_disjoint(c, json_array_get(alts, i), json_array_get(alts, j), depth + 1))
                return gram__schema_fail(c, SP_ERR_UNSUPPORTED, kw,
                                         "alternatives %zu and %zu may both match, and a grammar cannot enforce that "
                                         "only one does (use anyOf, or tell them apart by type, const or a required "
                                         "property with a const)",
                                         i, j);
        }
    sp_status st = SP_OK;
    for (size_t i = 0; st == SP_OK && i < n; i++) {
        size_t mark = ptr_push_index(c, kw, i);
        snprintf(h, sizeof h, "%.*s-%zu", SCHEMA_HINT_MAX, hint, i);
        if (i) gram__put(o, " | ");
        st = schema_atom(c, json_array_get(alts, i), h, depth, o);
        ptr_pop(c, mark);
    }
    return st;
}

/* ---- one schema ------------------------------------------------------------------------ */

/* Appends the body of a rule for s (at c->ptr): an expression that may hold a top-level |. */
static sp_status schema_body(gram_schema_ctx *c, const json_t *s, const char *hint, int depth, strbuf *o) {
    static const unsigned order[6] = {JT_OBJECT, JT_ARRAY, JT_STRING, JT_INT | JT_FRAC, JT_BOOL, JT_NULL};
    if (depth > c->max_depth)
        return gram__schema_fail(c, SP_ERR_RANGE, NULL, "schemas nested deeper than %d", c->max_depth);
    if (json_is_true(s)) {
        gram__schema_use(c, o, SR_VALUE);
        return SP_OK;
    }
    if (json_is_false(s)) return gram__schema_fail(c, SP_ERR_UNSUPPORTED, NULL, "the schema false admits nothing");
    if (!json_is_object(s))
        return gram__schema_fail(c, SP_ERR_INVALID_ARG, NULL, "a schema must be an object or a boolean");
    for (const char *const *k = schema_refused; *k; k++) {
        const json_t *v = json_object_get(s, *k);
        if (v && !(strcmp(*k, "uniqueItems") == 0 && json_is_false(v)))
            return gram__schema_fail(c, SP_ERR_UNSUPPORTED, *k, "%s cannot be enforced by a grammar", *k);
    }
    if (json_object_get(s, "$ref")) return schema_ref(c, s, depth, o);
    if (json_object_get(s, "allOf")) return schema_all_of(c, s, hint, depth, o);
    if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
        return gram__schema_fail(c, SP_ERR_UNSUPPORTED, "oneOf", "oneOf beside anyOf is not supported");
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) return schema_any_of(c, s, hint, depth, o);
    if (json_object_get(s, "enum") || json_object_get(s, "const")) return gram__schema_enum(c, s, o);
    unsigned types;
    sp_status st = gram__schema_types(c, s, &types);
    if (st == SP_OK && types == JT_ANY && !json_object_get(s, "type")) {
        gram__schema_use(c, o, SR_VALUE);
        return SP_OK;
    }
    for (int k = 0, first = 1; st == SP_OK && k < 6; k++) {
        if (!(types & order[k])) continue;
        if (!first) gram__put(o, " | ");
        first = 0;
        if (order[k] == JT_OBJECT) st = schema_object(c, s, hint, depth, o);
        if (order[k] == JT_ARRAY) st = schema_array(c, s, hint, depth, o);
        if (order[k] == JT_STRING) st = gram__schema_string(c, s, o);
        if (k == 3) st = gram__schema_number(c, s, types & JT_FRAC, o);
        if (order[k] == JT_BOOL) gram__schema_use(c, o, SR_BOOLEAN);
        if (order[k] == JT_NULL) gram__schema_use(c, o, SR_NULL);
    }
    return st;
}

/* ---- the public functions -------------------------------------------------------------- */

gram_schema_options gram_schema_options_default(void) {
    return (gram_schema_options){.compact = true, .max_depth = SP_GRAMMAR_DEFAULT_SCHEMA_MAX_DEPTH};
}

sp_status gram_schema_to_gbnf(const json_t *schema, const gram_schema_options *opt, char **gbnf) {
    static const char *const shared_names[] = {"ws",        "char",  "string", "number", "integer", "boolean",
                                               "null",      "value", "object", "array",  "date",    "time",
                                               "date-time", "uuid",  "email",  "uri",    NULL};
    if (!gbnf) return sp_fail(SP_ERR_INVALID_ARG, "JSON Schema: no place for the grammar");
    *gbnf = NULL;
    if (!schema) return sp_fail(SP_ERR_INVALID_ARG, "JSON Schema: no schema");
    gram_schema_options defaults = gram_schema_options_default();
    if (!opt) opt = &defaults;
    gram_schema_ctx c = {.root = schema, .compact = opt->compact, .max_depth = opt->max_depth, .names = json_object()};
    strbuf body = {0}, out = {0};
    size_t root = 0;
    sp_status st = c.names ? SP_OK : gram__schema_nomem();
    for (const char *const *k = shared_names; st == SP_OK && *k; k++)
        if (json_object_set_new(c.names, *k, json_true())) st = gram__schema_nomem();
    const char *root_name = opt->root_name ? opt->root_name : "root";
    if (st == SP_OK) st = rule_reserve(&c, root_name, &root);
    if (st == SP_OK && !sp_grow((void **)&c.refs, &c.cap_refs, 1, sizeof *c.refs)) st = gram__schema_nomem();
    if (st == SP_OK) c.refs[c.n_refs++] = (gram_schema_ref){schema, root, NULL};
    if (st == SP_OK) st = schema_body(&c, schema, root_name, 0, &body);
    if (st == SP_OK) st = rule_define(&c, root, &body);
    if (st == SP_OK) st = schema_check_cycles(&c);
    for (size_t i = 0; st == SP_OK && i < c.n_rules; i++)
        strbuf_printf(&out, "%s ::= %s\n", c.rules[i].name, c.rules[i].body);
    if (st == SP_OK) gram__schema_write_shared(&out, c.shared, c.compact);
    if (st == SP_OK && !(*gbnf = strbuf_take(&out))) st = gram__schema_nomem();
    for (size_t i = 0; i < c.n_rules; i++) {
        free(c.rules[i].name);
        free(c.rules[i].body);
    }
    for (size_t i = 0; i < c.n_refs; i++) free(c.refs[i].ptr);
    free(c.rules);
    free(c.refs);
    free(c.edges);
    free(c.ptr.p);
    free(body.p);
    free(out.p);
    json_decref(c.names);
    return st;
}

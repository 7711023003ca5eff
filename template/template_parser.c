/* template_parser.c: tokens -> syntax tree. This file holds the statements, following
 * jinja2's grammar: if/elif/else, for (tuple targets, inline if, else), set (expression,
 * block, namespace attribute), macro, call, filter, break, continue, and Hugging Face's
 * generation block (rendered as its body); the entry point tmpl__parse_tokens; and the
 * token cursor and syntax errors that template_parse_expr.c (the expressions) shares.
 * A syntax error names line and column.
 */
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include "template/template_internal.h"

/* ---- token cursor and syntax errors --------------------------------------------- */

#define MAX_NESTING 200

_Noreturn void tmpl__parser_error(tmpl_parser *p, const ttok *at, const char *fmt, ...) {
    int n = snprintf(p->err, p->err_cap, "line %d, column %d: ", at->line, at->col);
    if (n >= 0 && (size_t)n < p->err_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->err_cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    longjmp(p->fail, 1);
}

const ttok *tmpl__parser_cur(tmpl_parser *p) {
    return &p->toks[p->i];
}
const ttok *tmpl__parser_peek(tmpl_parser *p, size_t k) {
    const ttok *t = &p->toks[p->i];
    for (size_t j = 0; j < k && t->kind != TT_EOF; j++) t++;
    return t;
}
const ttok *tmpl__parser_advance(tmpl_parser *p) {
    const ttok *t = &p->toks[p->i];
    if (t->kind != TT_EOF) p->i++;
    return t;
}

bool tmpl__tok_is_op(const ttok *t, const char *op) {
    return t->kind == TT_OP && t->len == strlen(op) && memcmp(t->text, op, t->len) == 0;
}
bool tmpl__tok_is_name(const ttok *t, const char *name) {
    return t->kind == TT_NAME && t->len == strlen(name) && memcmp(t->text, name, t->len) == 0;
}
bool tmpl__parser_accept_op(tmpl_parser *p, const char *op) {
    if (!tmpl__tok_is_op(tmpl__parser_cur(p), op)) return false;
    tmpl__parser_advance(p);
    return true;
}
bool tmpl__parser_accept_name(tmpl_parser *p, const char *name) {
    if (!tmpl__tok_is_name(tmpl__parser_cur(p), name)) return false;
    tmpl__parser_advance(p);
    return true;
}

const char *tmpl__tok_describe(const ttok *t) {
    switch (t->kind) {
    case TT_EOF: return "end of template";
    case TT_DATA: return "text";
    case TT_VAR_BEGIN: return "'{{'";
    case TT_VAR_END: return "'}}'";
    case TT_BLOCK_BEGIN: return "'{%'";
    case TT_BLOCK_END: return "'%}'";
    case TT_NAME: return "name";
    case TT_STRING: return "string";
    case TT_INT:
    case TT_FLOAT: return "number";
    case TT_OP: return "operator";
    }
    return "token";
}

void tmpl__parser_expect_op(tmpl_parser *p, const char *op) {
    if (!tmpl__parser_accept_op(p, op)) {
        const ttok *t = tmpl__parser_cur(p);
        if (t->kind == TT_OP || t->kind == TT_NAME)
            tmpl__parser_error(p, t, "expected '%s', got '%.*s'", op, (int)t->len, t->text);
        tmpl__parser_error(p, t, "expected '%s', got %s", op, tmpl__tok_describe(t));
    }
}
const ttok *tmpl__parser_expect_name(tmpl_parser *p, const char *what) {
    const ttok *t = tmpl__parser_cur(p);
    if (t->kind != TT_NAME) tmpl__parser_error(p, t, "expected %s, got %s", what, tmpl__tok_describe(t));
    return tmpl__parser_advance(p);
}
static void expect_block_end(tmpl_parser *p, const char *tag) {
    const ttok *t = tmpl__parser_cur(p);
    if (t->kind != TT_BLOCK_END) {
        if (t->kind == TT_OP || t->kind == TT_NAME)
            tmpl__parser_error(p, t, "expected '%%}' to end '%s', got '%.*s'", tag, (int)t->len, t->text);
        tmpl__parser_error(p, t, "expected '%%}' to end '%s', got %s", tag, tmpl__tok_describe(t));
    }
    tmpl__parser_advance(p);
}

tnode *tmpl__parser_node_new(tmpl_parser *p, tnode_kind kind, const ttok *at) {
    tnode *n = tmpl__alloc(p->arena, sizeof(tnode));
    n->kind = kind;
    n->line = at->line;
    return n;
}

void tmpl__parser_vec_push(tmpl_parser *p, tmpl_node_vec *v, tnode *n) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        tnode **grown = tmpl__alloc(p->arena, cap * sizeof(tnode *));
        if (v->n) memcpy(grown, v->items, v->n * sizeof(tnode *));
        v->items = grown;
        v->cap = cap;
    }
    v->items[v->n++] = n;
}

void tmpl__parser_enter(tmpl_parser *p) {
    if (++p->depth > MAX_NESTING) tmpl__parser_error(p, tmpl__parser_cur(p), "expression nested too deeply");
}
void tmpl__parser_leave(tmpl_parser *p) {
    p->depth--;
}

/* ---- statements ----------------------------------------------------------------- */

static tnode *parse_body(tmpl_parser *p, const char *const *end_tags, const char *opened_by, const ttok *opened_at);

/* true when the parser stands at "{% <one of names>" */
static bool at_tag(tmpl_parser *p, const char *const *names) {
    if (tmpl__parser_cur(p)->kind != TT_BLOCK_BEGIN) return false;
    const ttok *name = tmpl__parser_peek(p, 1);
    for (size_t k = 0; names[k]; k++)
        if (tmpl__tok_is_name(name, names[k])) return true;
    return false;
}

/* Consumes "{% name" (the caller knows it is there). */
static void eat_tag(tmpl_parser *p) {
    tmpl__parser_advance(p);
    tmpl__parser_advance(p);
}

/* The body after "{% else", up to and including the name of the end tag. */
static tnode *parse_else(tmpl_parser *p, const char *const *end_only, const char *opened_by, const ttok *at) {
    expect_block_end(p, "else");
    tnode *body = parse_body(p, end_only, opened_by, at);
    eat_tag(p);
    return body;
}

static tnode *parse_if(tmpl_parser *p, const ttok *at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    tnode *n = tmpl__parser_node_new(p, TN_IF, at);
    n->a = tmpl__parse_or(p); /* jinja2 parses the condition without `x if y else z` */
    expect_block_end(p, "if");
    n->b = parse_body(p, ends, "if", at);
    /* elif branches chain through .c; a loop, so a long chain cannot deepen the C stack */
    tnode *last = n;
    const ttok *tag = tmpl__parser_peek(p, 1);
    eat_tag(p);
    while (tmpl__tok_is_name(tag, "elif")) {
        tnode *branch = tmpl__parser_node_new(p, TN_IF, tag);
        branch->a = tmpl__parse_or(p);
        expect_block_end(p, "elif");
        branch->b = parse_body(p, ends, "if", at);
        last->c = branch;
        last = branch;
        tag = tmpl__parser_peek(p, 1);
        eat_tag(p);
    }
    if (tmpl__tok_is_name(tag, "else")) {
        static const char *const end_only[] = {"endif", NULL};
        last->c = parse_else(p, end_only, "if", at);
    }
    expect_block_end(p, "endif");
    return n;
}

static tnode *parse_for(tmpl_parser *p, const ttok *at) {
    static const char *const ends[] = {"else", "endfor", NULL};
    tnode *n = tmpl__parser_node_new(p, TN_FOR, at);
    if (tmpl__parser_accept_op(p, "(")) {
        n->target = tmpl__parse_tuple(p, true);
        tmpl__parser_expect_op(p, ")");
    } else {
        n->target = tmpl__parse_tuple(p, true);
    }
    if (!tmpl__parser_accept_name(p, "in")) tmpl__parser_error(p, tmpl__parser_cur(p), "expected 'in' in for loop");
    /* the iterable stops before an inline `if` filter */
    n->a = tmpl__parse_or(p);
    if (tmpl__tok_is_op(tmpl__parser_cur(p), ",")) {
        tnode *tuple = tmpl__parser_node_new(p, TN_TUPLE, tmpl__parser_cur(p));
        tmpl_node_vec items = {0};
        tmpl__parser_vec_push(p, &items, n->a);
        while (tmpl__parser_accept_op(p, ",")) tmpl__parser_vec_push(p, &items, tmpl__parse_or(p));
        tuple->children = items.items;
        tuple->n_children = items.n;
        n->a = tuple;
    }
    if (tmpl__parser_accept_name(p, "if")) n->d = tmpl__parse_expr(p);
    if (tmpl__parser_accept_name(p, "recursive"))
        tmpl__parser_error(p, tmpl__parser_cur(p), "recursive loops are not supported");
    expect_block_end(p, "for");
    p->loop_depth++;
    n->b = parse_body(p, ends, "for", at);
    p->loop_depth--;
    const ttok *tag = tmpl__parser_peek(p, 1);
    eat_tag(p);
    if (tmpl__tok_is_name(tag, "else")) {
        static const char *const end_only[] = {"endfor", NULL};
        n->c = parse_else(p, end_only, "for", at);
    }
    expect_block_end(p, "endfor");
    return n;
}

static tnode *parse_set(tmpl_parser *p, const ttok *at) {
    tnode *n = tmpl__parser_node_new(p, TN_SET, at);
    const ttok *name = tmpl__parser_expect_name(p, "a variable name");
    tnode *target = tmpl__parser_node_new(p, TN_NAME, name);
    target->str = name->text;
    target->len = name->len;
    if (tmpl__parser_accept_op(p, ".")) {
        const ttok *attr = tmpl__parser_expect_name(p, "an attribute name");
        tnode *a = tmpl__parser_node_new(p, TN_ATTR, attr);
        a->a = target;
        a->str = attr->text;
        a->len = attr->len;
        target = a;
    } else if (tmpl__tok_is_op(tmpl__parser_cur(p), ",")) {
        tmpl_node_vec items = {0};
        tmpl__parser_vec_push(p, &items, target);
        while (tmpl__parser_accept_op(p, ",")) {
            const ttok *t = tmpl__parser_expect_name(p, "a variable name");
            tnode *nn = tmpl__parser_node_new(p, TN_NAME, t);
            nn->str = t->text;
            nn->len = t->len;
            tmpl__parser_vec_push(p, &items, nn);
        }
        target = tmpl__parser_node_new(p, TN_TUPLE, name);
        target->children = items.items;
        target->n_children = items.n;
    }
    n->target = target;
    if (tmpl__parser_accept_op(p, "=")) {
        n->a = tmpl__parse_tuple(p, false);
        expect_block_end(p, "set");
        return n;
    }
    if (target->kind != TN_NAME) tmpl__parser_error(p, tmpl__parser_cur(p), "expected '=' in set");
    /* block set, optionally filtered: {% set x | upper %}...{% endset %} */
    tnode *filters = NULL;
    if (tmpl__parser_accept_op(p, "|")) filters = tmpl__parse_filter(p, NULL);
    expect_block_end(p, "set");
    static const char *const ends[] = {"endset", NULL};
    n->b = parse_body(p, ends, "set", at);
    n->c = filters;
    eat_tag(p);
    expect_block_end(p, "endset");
    return n;
}

/* (a, b=default, ...) of a macro or of call(...) */
static void parse_params(tmpl_parser *p, tnode *n) {
    tmpl_node_vec params = {0};
    tmpl__parser_expect_op(p, "(");
    while (!tmpl__parser_accept_op(p, ")")) {
        if (params.n > 0) tmpl__parser_expect_op(p, ",");
        if (tmpl__parser_accept_op(p, ")")) break;
        const ttok *name = tmpl__parser_expect_name(p, "a parameter name");
        tnode *param = tmpl__parser_node_new(p, TN_NAME, name);
        param->str = name->text;
        param->len = name->len;
        if (tmpl__parser_accept_op(p, "=")) param->a = tmpl__parse_expr(p);
        tmpl__parser_vec_push(p, &params, param);
    }
    n->params = params.items;
    n->n_params = params.n;
}

/* The body of a macro or call block: break/continue cannot reach an enclosing loop, and
 * whether it reads varargs / kwargs decides which extra arguments a call may pass. */
static tnode *parse_callable_body(tmpl_parser *p, tnode *n, const char *const *ends, const char *tag, const ttok *at) {
    int loop_depth = p->loop_depth;
    bool saw_varargs = p->saw_varargs, saw_kwargs = p->saw_kwargs;
    p->loop_depth = 0;
    p->saw_varargs = p->saw_kwargs = false;
    tnode *body = parse_body(p, ends, tag, at);
    n->catch_varargs = p->saw_varargs;
    n->catch_kwargs = p->saw_kwargs;
    p->loop_depth = loop_depth;
    p->saw_varargs = saw_varargs || p->saw_varargs;
    p->saw_kwargs = saw_kwargs || p->saw_kwargs;
    return body;
}

static tnode *parse_macro(tmpl_parser *p, const ttok *at) {
    static const char *const ends[] = {"endmacro", NULL};
    tnode *n = tmpl__parser_node_new(p, TN_MACRO, at);
    const ttok *name = tmpl__parser_expect_name(p, "a macro name");
    n->str = name->text;
    n->len = name->len;
    parse_params(p, n);
    expect_block_end(p, "macro");
    n->b = parse_callable_body(p, n, ends, "macro", at);
    eat_tag(p);
    if (tmpl__parser_cur(p)->kind == TT_NAME) tmpl__parser_advance(p); /* {% endmacro name %} */
    expect_block_end(p, "endmacro");
    return n;
}

static tnode *parse_call_block(tmpl_parser *p, const ttok *at) {
    static const char *const ends[] = {"endcall", NULL};
    tnode *n = tmpl__parser_node_new(p, TN_CALL_BLOCK, at);
    if (tmpl__tok_is_op(tmpl__parser_cur(p), "(")) parse_params(p, n);
    n->a = tmpl__parse_expr(p);
    if (n->a->kind != TN_CALL) tmpl__parser_error(p, at, "expected a call in 'call' block");
    expect_block_end(p, "call");
    n->b = parse_callable_body(p, n, ends, "call", at);
    eat_tag(p);
    expect_block_end(p, "endcall");
    return n;
}

static tnode *parse_filter_block(tmpl_parser *p, const ttok *at) {
    static const char *const ends[] = {"endfilter", NULL};
    tnode *n = tmpl__parser_node_new(p, TN_FILTER_BLOCK, at);
    n->a = tmpl__parse_filter(p, NULL);
    expect_block_end(p, "filter");
    n->b = parse_body(p, ends, "filter", at);
    eat_tag(p);
    expect_block_end(p, "endfilter");
    return n;
}

static tnode *parse_statement(tmpl_parser *p) {
    const ttok *open = tmpl__parser_advance(p); /* {% */
    const ttok *tag = tmpl__parser_cur(p);
    if (tag->kind != TT_NAME) tmpl__parser_error(p, tag, "expected a tag name after '{%%'");
    tmpl__parser_advance(p);
    if (tmpl__tok_is_name(tag, "if")) return parse_if(p, tag);
    if (tmpl__tok_is_name(tag, "for")) return parse_for(p, tag);
    if (tmpl__tok_is_name(tag, "set")) return parse_set(p, tag);
    if (tmpl__tok_is_name(tag, "macro")) return parse_macro(p, tag);
    if (tmpl__tok_is_name(tag, "call")) return parse_call_block(p, tag);
    if (tmpl__tok_is_name(tag, "filter")) return parse_filter_block(p, tag);
    if (tmpl__tok_is_name(tag, "break") || tmpl__tok_is_name(tag, "continue")) {
        if (p->loop_depth == 0) tmpl__parser_error(p, tag, "'%.*s' outside loop", (int)tag->len, tag->text);
        tnode *n = tmpl__parser_node_new(p, tag->text[0] == 'b' ? TN_BREAK : TN_CONTINUE, tag);
        expect_block_end(p, tag->text);
        return n;
    }
    if (tmpl__tok_is_name(tag, "generation")) {
        /* Hugging Face's AssistantTracker tag: marks assistant text, renders its body */
        static const char *const ends[] = {"endgeneration", NULL};
        expect_block_end(p, "generation");
        tnode *block = tmpl__parser_node_new(p, TN_FILTER_BLOCK, tag); /* a filter block with no filter */
        block->b = parse_body(p, ends, "generation", tag);
        eat_tag(p);
        expect_block_end(p, "endgeneration");
        return block;
    }
    (void)open;
    tmpl__parser_error(p, tag, "unknown tag '%.*s'", (int)tag->len, tag->text);
}

/* Statements until one of end_tags (not consumed) or the end of the template. */
static tnode *parse_body(tmpl_parser *p, const char *const *end_tags, const char *opened_by, const ttok *opened_at) {
    tnode *body = tmpl__parser_node_new(p, TN_BODY, tmpl__parser_cur(p));
    tmpl_node_vec items = {0};
    tmpl__parser_enter(p);
    for (;;) {
        const ttok *t = tmpl__parser_cur(p);
        if (t->kind == TT_EOF) {
            if (end_tags)
                tmpl__parser_error(p, t, "unexpected end of template: the '%s' opened on line %d is not closed",
                                   opened_by, opened_at->line);
            break;
        }
        if (end_tags && at_tag(p, end_tags)) break;
        if (t->kind == TT_DATA) {
            tnode *n = tmpl__parser_node_new(p, TN_TEXT, t);
            n->str = t->text;
            n->len = t->len;
            tmpl__parser_vec_push(p, &items, n);
            tmpl__parser_advance(p);
        } else if (t->kind == TT_VAR_BEGIN) {
            tmpl__parser_advance(p);
            tnode *n = tmpl__parser_node_new(p, TN_OUTPUT, t);
            n->a = tmpl__parse_tuple(p, false);
            if (tmpl__parser_cur(p)->kind != TT_VAR_END) {
                const ttok *bad = tmpl__parser_cur(p);
                if (bad->kind == TT_OP || bad->kind == TT_NAME)
                    tmpl__parser_error(p, bad, "expected '}}', got '%.*s'", (int)bad->len, bad->text);
                tmpl__parser_error(p, bad, "expected '}}', got %s", tmpl__tok_describe(bad));
            }
            tmpl__parser_advance(p);
            tmpl__parser_vec_push(p, &items, n);
        } else if (t->kind == TT_BLOCK_BEGIN) {
            const ttok *name = tmpl__parser_peek(p, 1);
            if (name->kind == TT_NAME && (tmpl__tok_is_name(name, "endif") || tmpl__tok_is_name(name, "endfor") ||
                                          tmpl__tok_is_name(name, "else") || tmpl__tok_is_name(name, "elif") ||
                                          tmpl__tok_is_name(name, "endmacro") || tmpl__tok_is_name(name, "endset") ||
                                          tmpl__tok_is_name(name, "endcall") || tmpl__tok_is_name(name, "endfilter") ||
                                          tmpl__tok_is_name(name, "endgeneration")))
                tmpl__parser_error(p, name, "unexpected '%.*s'%s", (int)name->len, name->text,
                                   end_tags ? "" : " with no block open");
            tmpl__parser_vec_push(p, &items, parse_statement(p));
        } else {
            tmpl__parser_error(p, t, "unexpected %s", tmpl__tok_describe(t));
        }
    }
    tmpl__parser_leave(p);
    body->children = items.items;
    body->n_children = items.n;
    return body;
}

tnode *tmpl__parse_tokens(tmpl_arena *a, const ttok *toks, char *err, size_t err_cap) {
    tmpl_parser *p = tmpl__alloc(a, sizeof(tmpl_parser));
    p->arena = a;
    p->toks = toks;
    p->err = err;
    p->err_cap = err_cap;
    if (setjmp(p->fail)) return NULL;
    return parse_body(p, NULL, NULL, NULL);
}

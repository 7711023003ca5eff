/* template_parser.c: tokens -> syntax tree, following jinja2's grammar and operator
 * precedence (lowest first):
 *   x if c else y  <  or  <  and  <  not  <  comparisons, in, not in  <  + -  <  ~
 *   <  * / // %  <  **  <  unary - +  <  primary with .attr [item] (call) | filter, is test
 * Statements: if/elif/else, for (tuple targets, inline if, else), set (expression, block,
 * namespace attribute), macro, call, filter, break, continue, and Hugging Face's
 * generation block (rendered as its body). A syntax error names line and column.
 */
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include "model/template_internal.h"

typedef struct parser {
    tmpl_arena *arena;
    const ttok *toks;
    size_t i;
    char *err;
    size_t err_cap;
    jmp_buf fail;
    int depth;                    /* expression nesting, bounded so a hostile template cannot overflow the stack */
    int loop_depth;               /* for loops around the statement being parsed (0 in a macro body) */
    bool saw_varargs, saw_kwargs; /* the names varargs / kwargs appeared (macro bodies) */
} parser;

#define MAX_NESTING 200

static _Noreturn void parse_error(parser *p, const ttok *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void parse_error(parser *p, const ttok *at, const char *fmt, ...) {
    int n = snprintf(p->err, p->err_cap, "line %d, column %d: ", at->line, at->col);
    if (n >= 0 && (size_t)n < p->err_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->err_cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    longjmp(p->fail, 1);
}

static const ttok *cur(parser *p) {
    return &p->toks[p->i];
}
static const ttok *peek(parser *p, size_t k) {
    const ttok *t = &p->toks[p->i];
    for (size_t j = 0; j < k && t->kind != TT_EOF; j++) t++;
    return t;
}
static const ttok *advance(parser *p) {
    const ttok *t = &p->toks[p->i];
    if (t->kind != TT_EOF) p->i++;
    return t;
}

static bool tok_is_op(const ttok *t, const char *op) {
    return t->kind == TT_OP && t->len == strlen(op) && memcmp(t->text, op, t->len) == 0;
}
static bool tok_is_name(const ttok *t, const char *name) {
    return t->kind == TT_NAME && t->len == strlen(name) && memcmp(t->text, name, t->len) == 0;
}
static bool accept_op(parser *p, const char *op) {
    if (!tok_is_op(cur(p), op)) return false;
    advance(p);
    return true;
}
static bool accept_name(parser *p, const char *name) {
    if (!tok_is_name(cur(p), name)) return false;
    advance(p);
    return true;
}

static const char *describe(const ttok *t) {
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

static void expect_op(parser *p, const char *op) {
    if (!accept_op(p, op)) {
        const ttok *t = cur(p);
        if (t->kind == TT_OP || t->kind == TT_NAME)
            parse_error(p, t, "expected '%s', got '%.*s'", op, (int)t->len, t->text);
        parse_error(p, t, "expected '%s', got %s", op, describe(t));
    }
}
static const ttok *expect_name(parser *p, const char *what) {
    const ttok *t = cur(p);
    if (t->kind != TT_NAME) parse_error(p, t, "expected %s, got %s", what, describe(t));
    return advance(p);
}
static void expect_block_end(parser *p, const char *tag) {
    const ttok *t = cur(p);
    if (t->kind != TT_BLOCK_END) {
        if (t->kind == TT_OP || t->kind == TT_NAME)
            parse_error(p, t, "expected '%%}' to end '%s', got '%.*s'", tag, (int)t->len, t->text);
        parse_error(p, t, "expected '%%}' to end '%s', got %s", tag, describe(t));
    }
    advance(p);
}

static tnode *node_new(parser *p, tnode_kind kind, const ttok *at) {
    tnode *n = tmpl__alloc(p->arena, sizeof(tnode));
    n->kind = kind;
    n->line = at->line;
    return n;
}

/* A growable array of node pointers in the arena. */
typedef struct node_vec {
    tnode **items;
    size_t n, cap;
} node_vec;

static void vec_push(parser *p, node_vec *v, tnode *n) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        tnode **grown = tmpl__alloc(p->arena, cap * sizeof(tnode *));
        if (v->n) memcpy(grown, v->items, v->n * sizeof(tnode *));
        v->items = grown;
        v->cap = cap;
    }
    v->items[v->n++] = n;
}

/* ---- expressions ---------------------------------------------------------------- */

static tnode *parse_expr(parser *p);
static tnode *parse_or(parser *p);
static tnode *parse_unary(parser *p, bool with_filter);

static void enter(parser *p) {
    if (++p->depth > MAX_NESTING) parse_error(p, cur(p), "expression nested too deeply");
}
static void leave(parser *p) {
    p->depth--;
}

/* (args) of a call, filter or test; the '(' is already consumed. */
static targs parse_call_args(parser *p) {
    node_vec pos = {0}, kw_vals = {0};
    const char **kw_names = NULL;
    size_t kw_cap = 0;
    while (!accept_op(p, ")")) {
        if (pos.n + kw_vals.n > 0) expect_op(p, ",");
        if (accept_op(p, ")")) break; /* trailing comma */
        const ttok *t = cur(p);
        if (t->kind == TT_NAME && tok_is_op(peek(p, 1), "=")) {
            advance(p);
            advance(p);
            if (kw_vals.n == kw_cap) {
                kw_cap = kw_cap ? kw_cap * 2 : 4;
                const char **grown = tmpl__alloc(p->arena, kw_cap * sizeof(char *));
                if (kw_vals.n) memcpy(grown, kw_names, kw_vals.n * sizeof(char *));
                kw_names = grown;
            }
            kw_names[kw_vals.n] = t->text;
            vec_push(p, &kw_vals, parse_expr(p));
        } else {
            if (kw_vals.n > 0) parse_error(p, t, "positional argument follows keyword argument");
            vec_push(p, &pos, parse_expr(p));
        }
    }
    return (targs){.pos = pos.items, .n_pos = pos.n, .kw_names = kw_names, .kw_vals = kw_vals.items, .n_kw = kw_vals.n};
}

static tnode *parse_primary(parser *p) {
    const ttok *t = cur(p);
    tnode *n;
    switch (t->kind) {
    case TT_NAME:
        advance(p);
        if (tok_is_name(t, "true") || tok_is_name(t, "True") || tok_is_name(t, "false") || tok_is_name(t, "False")) {
            n = node_new(p, TN_CONST, t);
            n->value = tmpl__bool(t->text[0] == 't' || t->text[0] == 'T');
        } else if (tok_is_name(t, "none") || tok_is_name(t, "None")) {
            n = node_new(p, TN_CONST, t);
            n->value = tmpl__none;
        } else {
            n = node_new(p, TN_NAME, t);
            n->str = t->text;
            n->len = t->len;
            if (tok_is_name(t, "varargs")) p->saw_varargs = true;
            if (tok_is_name(t, "kwargs")) p->saw_kwargs = true;
        }
        return n;
    case TT_STRING: {
        /* adjacent string literals concatenate */
        size_t total = 0, k = 0;
        while (p->toks[p->i + k].kind == TT_STRING) total += p->toks[p->i + k++].len; /* ends at TT_EOF */
        char *s = tmpl__alloc(p->arena, total + 1);
        size_t off = 0;
        while (cur(p)->kind == TT_STRING) {
            const ttok *st = advance(p);
            memcpy(s + off, st->text, st->len);
            off += st->len;
        }
        n = node_new(p, TN_CONST, t);
        n->value = tmpl__str(s, total);
        return n;
    }
    case TT_INT:
        advance(p);
        n = node_new(p, TN_CONST, t);
        n->value = tmpl__int(t->i);
        return n;
    case TT_FLOAT:
        advance(p);
        n = node_new(p, TN_CONST, t);
        n->value = tmpl__float(t->f);
        return n;
    case TT_OP:
        if (accept_op(p, "(")) {
            if (accept_op(p, ")")) return node_new(p, TN_TUPLE, t);
            tnode *first = parse_expr(p);
            if (!tok_is_op(cur(p), ",")) {
                expect_op(p, ")");
                return first;
            }
            node_vec items = {0};
            vec_push(p, &items, first);
            while (accept_op(p, ",")) {
                if (tok_is_op(cur(p), ")")) break;
                vec_push(p, &items, parse_expr(p));
            }
            expect_op(p, ")");
            n = node_new(p, TN_TUPLE, t);
            n->children = items.items;
            n->n_children = items.n;
            return n;
        }
        if (accept_op(p, "[")) {
            node_vec items = {0};
            while (!accept_op(p, "]")) {
                if (items.n > 0) expect_op(p, ",");
                if (accept_op(p, "]")) break;
                vec_push(p, &items, parse_expr(p));
            }
            n = node_new(p, TN_LIST, t);
            n->children = items.items;
            n->n_children = items.n;
            return n;
        }
        if (accept_op(p, "{")) {
            node_vec items = {0};
            while (!accept_op(p, "}")) {
                if (items.n > 0) expect_op(p, ",");
                if (accept_op(p, "}")) break;
                vec_push(p, &items, parse_expr(p));
                expect_op(p, ":");
                vec_push(p, &items, parse_expr(p));
            }
            n = node_new(p, TN_DICT, t);
            n->children = items.items;
            n->n_children = items.n;
            return n;
        }
        parse_error(p, t, "unexpected '%.*s'", (int)t->len, t->text);
    default: parse_error(p, t, "expected an expression, got %s", describe(t));
    }
}

/* a[...] after the '[': an item or a slice. */
static tnode *parse_subscript(parser *p, tnode *obj, const ttok *at) {
    tnode *parts[3] = {NULL, NULL, NULL};
    int part = 0;
    bool is_slice = false;
    for (;;) {
        if (tok_is_op(cur(p), "]")) break;
        if (accept_op(p, ":")) {
            is_slice = true;
            if (++part > 2) parse_error(p, cur(p), "too many ':' in slice");
            continue;
        }
        if (parts[part]) parse_error(p, cur(p), "expected ':' or ']'");
        parts[part] = parse_expr(p);
    }
    expect_op(p, "]");
    tnode *n = node_new(p, is_slice ? TN_SLICE : TN_ITEM, at);
    n->a = obj;
    if (!is_slice && !parts[0]) parse_error(p, at, "empty subscript");
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static tnode *parse_postfix(parser *p, tnode *n) {
    for (;;) {
        const ttok *t = cur(p);
        if (accept_op(p, ".")) {
            const ttok *name = cur(p);
            tnode *attr;
            if (name->kind == TT_NAME) {
                attr = node_new(p, TN_ATTR, t);
                attr->str = name->text;
                attr->len = name->len;
            } else if (name->kind == TT_INT) {
                attr = node_new(p, TN_ITEM, t);
                attr->b = node_new(p, TN_CONST, name);
                attr->b->value = tmpl__int(name->i);
            } else {
                parse_error(p, name, "expected an attribute name after '.'");
            }
            advance(p);
            attr->a = n;
            n = attr;
        } else if (accept_op(p, "[")) {
            n = parse_subscript(p, n, t);
        } else if (accept_op(p, "(")) {
            tnode *call = node_new(p, TN_CALL, t);
            call->a = n;
            call->args = parse_call_args(p);
            n = call;
        } else {
            return n;
        }
    }
}

static tnode *parse_filter(parser *p, tnode *n) {
    do {
        const ttok *name = expect_name(p, "a filter name");
        /* dotted filter names do not occur in chat templates; one name is enough */
        tnode *f = node_new(p, TN_FILTER, name);
        f->str = name->text;
        f->len = name->len;
        f->a = n;
        if (accept_op(p, "(")) f->args = parse_call_args(p);
        n = f;
    } while (accept_op(p, "|"));
    return n;
}

static tnode *parse_test(parser *p, tnode *n) {
    const ttok *at = cur(p);
    tnode *t = node_new(p, TN_TEST, at);
    t->negate = accept_name(p, "not");
    const ttok *name = expect_name(p, "a test name");
    t->str = name->text;
    t->len = name->len;
    t->a = n;
    const ttok *next = cur(p);
    if (accept_op(p, "(")) {
        t->args = parse_call_args(p);
    } else if ((next->kind == TT_NAME && !tok_is_name(next, "else") && !tok_is_name(next, "or") &&
                !tok_is_name(next, "and")) ||
               next->kind == TT_STRING || next->kind == TT_INT || next->kind == TT_FLOAT || tok_is_op(next, "[") ||
               tok_is_op(next, "{")) {
        /* one argument without parentheses, as jinja2 takes it: `is divisibleby 3`,
         * `is equalto 'x'` (so `x is defined if y` reads `if` as the argument and fails) */
        if (tok_is_name(next, "is")) parse_error(p, next, "cannot chain multiple tests with 'is'");
        tnode *arg = parse_postfix(p, parse_primary(p));
        t->args.pos = tmpl__alloc(p->arena, sizeof(tnode *));
        t->args.pos[0] = arg;
        t->args.n_pos = 1;
    }
    return t;
}

static tnode *parse_filter_expr(parser *p, tnode *n) {
    for (;;) {
        const ttok *t = cur(p);
        if (accept_op(p, "|")) {
            n = parse_filter(p, n);
        } else if (tok_is_name(t, "is")) {
            advance(p);
            n = parse_test(p, n);
        } else if (accept_op(p, "(")) {
            tnode *call = node_new(p, TN_CALL, t);
            call->a = n;
            call->args = parse_call_args(p);
            n = call;
        } else {
            return n;
        }
    }
}

static tnode *parse_unary(parser *p, bool with_filter) {
    const ttok *t = cur(p);
    tnode *n;
    enter(p);
    if (tok_is_op(t, "-") || tok_is_op(t, "+")) {
        advance(p);
        n = node_new(p, TN_UNARY, t);
        n->str = t->text;
        n->a = parse_unary(p, false);
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) n = parse_filter_expr(p, n);
    leave(p);
    return n;
}

static tnode *binary(parser *p, const ttok *op, tnode *a, tnode *b) {
    tnode *n = node_new(p, TN_BINARY, op);
    n->str = op->text;
    n->a = a;
    n->b = b;
    return n;
}

static tnode *parse_pow(parser *p) {
    tnode *n = parse_unary(p, true);
    while (tok_is_op(cur(p), "**")) {
        const ttok *op = advance(p);
        n = binary(p, op, n, parse_unary(p, true));
    }
    return n;
}

static tnode *parse_math2(parser *p) {
    tnode *n = parse_pow(p);
    while (tok_is_op(cur(p), "*") || tok_is_op(cur(p), "/") || tok_is_op(cur(p), "//") || tok_is_op(cur(p), "%")) {
        const ttok *op = advance(p);
        n = binary(p, op, n, parse_pow(p));
    }
    return n;
}

static tnode *parse_concat(parser *p) {
    tnode *n = parse_math2(p);
    while (tok_is_op(cur(p), "~")) {
        const ttok *op = advance(p);
        n = binary(p, op, n, parse_math2(p));
    }
    return n;
}

static tnode *parse_math1(parser *p) {
    tnode *n = parse_concat(p);
    while (tok_is_op(cur(p), "+") || tok_is_op(cur(p), "-")) {
        const ttok *op = advance(p);
        n = binary(p, op, n, parse_concat(p));
    }
    return n;
}

/* Comparisons chain as in Python: a < b < c is (a < b) and (b < c). */
static tnode *parse_compare(parser *p) {
    tnode *left = parse_math1(p);
    tnode *result = NULL;
    for (;;) {
        const ttok *t = cur(p);
        const char *op = NULL;
        if (t->kind == TT_OP && (tok_is_op(t, "==") || tok_is_op(t, "!=") || tok_is_op(t, "<") || tok_is_op(t, "<=") ||
                                 tok_is_op(t, ">") || tok_is_op(t, ">="))) {
            op = t->text;
            advance(p);
        } else if (tok_is_name(t, "in")) {
            op = "in";
            advance(p);
        } else if (tok_is_name(t, "not") && tok_is_name(peek(p, 1), "in")) {
            op = "notin";
            advance(p);
            advance(p);
        } else {
            break;
        }
        tnode *right = parse_math1(p);
        tnode *cmp = node_new(p, TN_COMPARE, t);
        cmp->str = op;
        cmp->a = left;
        cmp->b = right;
        if (result) {
            tnode *both = node_new(p, TN_BINARY, t);
            both->str = "and";
            both->a = result;
            both->b = cmp;
            result = both;
        } else {
            result = cmp;
        }
        left = right;
    }
    return result ? result : left;
}

static tnode *parse_not(parser *p) {
    const ttok *t = cur(p);
    if (tok_is_name(t, "not")) {
        advance(p);
        enter(p);
        tnode *n = node_new(p, TN_UNARY, t);
        n->str = "not";
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

/* operand (word operand)*, left-associative: the `and` and `or` levels */
static tnode *parse_logic(parser *p, const char *word, tnode *(*operand)(parser *)) {
    tnode *n = operand(p);
    while (tok_is_name(cur(p), word)) {
        const ttok *op = advance(p);
        n = binary(p, op, n, operand(p));
        n->str = word;
    }
    return n;
}

static tnode *parse_and(parser *p) {
    return parse_logic(p, "and", parse_not);
}
static tnode *parse_or(parser *p) {
    return parse_logic(p, "or", parse_and);
}

static tnode *parse_expr(parser *p) {
    enter(p);
    tnode *n = parse_or(p);
    while (tok_is_name(cur(p), "if")) {
        const ttok *t = advance(p);
        tnode *c = node_new(p, TN_CONDEXPR, t);
        c->b = n;
        c->a = parse_or(p);
        if (accept_name(p, "else")) c->c = parse_expr(p);
        n = c;
    }
    leave(p);
    return n;
}

/* An expression, or a tuple of them without parentheses (`for k, v in ...` targets,
 * `set a, b = ...`). names_only restricts items to plain names. */
static tnode *parse_tuple(parser *p, bool names_only) {
    const ttok *at = cur(p);
    tnode *first;
    if (names_only) {
        const ttok *t = expect_name(p, "a variable name");
        first = node_new(p, TN_NAME, t);
        first->str = t->text;
        first->len = t->len;
    } else {
        first = parse_expr(p);
    }
    if (!tok_is_op(cur(p), ",")) return first;
    node_vec items = {0};
    vec_push(p, &items, first);
    while (accept_op(p, ",")) {
        ttok_kind k = cur(p)->kind;
        if (!names_only && (k == TT_VAR_END || k == TT_BLOCK_END)) break; /* {{ 1, }} is (1,) */
        if (names_only) {
            const ttok *t = expect_name(p, "a variable name");
            tnode *n = node_new(p, TN_NAME, t);
            n->str = t->text;
            n->len = t->len;
            vec_push(p, &items, n);
        } else {
            vec_push(p, &items, parse_expr(p));
        }
    }
    tnode *n = node_new(p, TN_TUPLE, at);
    n->children = items.items;
    n->n_children = items.n;
    return n;
}

/* ---- statements ----------------------------------------------------------------- */

static tnode *parse_body(parser *p, const char *const *end_tags, const char *opened_by, const ttok *opened_at);

/* true when the parser stands at "{% <one of names>" */
static bool at_tag(parser *p, const char *const *names) {
    if (cur(p)->kind != TT_BLOCK_BEGIN) return false;
    const ttok *name = peek(p, 1);
    for (size_t k = 0; names[k]; k++)
        if (tok_is_name(name, names[k])) return true;
    return false;
}

/* Consumes "{% name" (the caller knows it is there). */
static void eat_tag(parser *p) {
    advance(p);
    advance(p);
}

/* The body after "{% else", up to and including the name of the end tag. */
static tnode *parse_else(parser *p, const char *const *end_only, const char *opened_by, const ttok *at) {
    expect_block_end(p, "else");
    tnode *body = parse_body(p, end_only, opened_by, at);
    eat_tag(p);
    return body;
}

static tnode *parse_if(parser *p, const ttok *at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    tnode *n = node_new(p, TN_IF, at);
    n->a = parse_or(p); /* jinja2 parses the condition without `x if y else z` */
    expect_block_end(p, "if");
    n->b = parse_body(p, ends, "if", at);
    /* elif branches chain through .c; a loop, so a long chain cannot deepen the C stack */
    tnode *last = n;
    const ttok *tag = peek(p, 1);
    eat_tag(p);
    while (tok_is_name(tag, "elif")) {
        tnode *branch = node_new(p, TN_IF, tag);
        branch->a = parse_or(p);
        expect_block_end(p, "elif");
        branch->b = parse_body(p, ends, "if", at);
        last->c = branch;
        last = branch;
        tag = peek(p, 1);
        eat_tag(p);
    }
    if (tok_is_name(tag, "else")) {
        static const char *const end_only[] = {"endif", NULL};
        last->c = parse_else(p, end_only, "if", at);
    }
    expect_block_end(p, "endif");
    return n;
}

static tnode *parse_for(parser *p, const ttok *at) {
    static const char *const ends[] = {"else", "endfor", NULL};
    tnode *n = node_new(p, TN_FOR, at);
    if (accept_op(p, "(")) {
        n->target = parse_tuple(p, true);
        expect_op(p, ")");
    } else {
        n->target = parse_tuple(p, true);
    }
    if (!accept_name(p, "in")) parse_error(p, cur(p), "expected 'in' in for loop");
    /* the iterable stops before an inline `if` filter */
    n->a = parse_or(p);
    if (tok_is_op(cur(p), ",")) {
        tnode *tuple = node_new(p, TN_TUPLE, cur(p));
        node_vec items = {0};
        vec_push(p, &items, n->a);
        while (accept_op(p, ",")) vec_push(p, &items, parse_or(p));
        tuple->children = items.items;
        tuple->n_children = items.n;
        n->a = tuple;
    }
    if (accept_name(p, "if")) n->d = parse_expr(p);
    if (accept_name(p, "recursive")) parse_error(p, cur(p), "recursive loops are not supported");
    expect_block_end(p, "for");
    p->loop_depth++;
    n->b = parse_body(p, ends, "for", at);
    p->loop_depth--;
    const ttok *tag = peek(p, 1);
    eat_tag(p);
    if (tok_is_name(tag, "else")) {
        static const char *const end_only[] = {"endfor", NULL};
        n->c = parse_else(p, end_only, "for", at);
    }
    expect_block_end(p, "endfor");
    return n;
}

static tnode *parse_set(parser *p, const ttok *at) {
    tnode *n = node_new(p, TN_SET, at);
    const ttok *name = expect_name(p, "a variable name");
    tnode *target = node_new(p, TN_NAME, name);
    target->str = name->text;
    target->len = name->len;
    if (accept_op(p, ".")) {
        const ttok *attr = expect_name(p, "an attribute name");
        tnode *a = node_new(p, TN_ATTR, attr);
        a->a = target;
        a->str = attr->text;
        a->len = attr->len;
        target = a;
    } else if (tok_is_op(cur(p), ",")) {
        node_vec items = {0};
        vec_push(p, &items, target);
        while (accept_op(p, ",")) {
            const ttok *t = expect_name(p, "a variable name");
            tnode *nn = node_new(p, TN_NAME, t);
            nn->str = t->text;
            nn->len = t->len;
            vec_push(p, &items, nn);
        }
        target = node_new(p, TN_TUPLE, name);
        target->children = items.items;
        target->n_children = items.n;
    }
    n->target = target;
    if (accept_op(p, "=")) {
        n->a = parse_tuple(p, false);
        expect_block_end(p, "set");
        return n;
    }
    if (target->kind != TN_NAME) parse_error(p, cur(p), "expected '=' in set");
    /* block set, optionally filtered: {% set x | upper %}...{% endset %} */
    tnode *filters = NULL;
    if (accept_op(p, "|")) filters = parse_filter(p, NULL);
    expect_block_end(p, "set");
    static const char *const ends[] = {"endset", NULL};
    n->b = parse_body(p, ends, "set", at);
    n->c = filters;
    eat_tag(p);
    expect_block_end(p, "endset");
    return n;
}

/* (a, b=default, ...) of a macro or of call(...) */
static void parse_params(parser *p, tnode *n) {
    node_vec params = {0};
    expect_op(p, "(");
    while (!accept_op(p, ")")) {
        if (params.n > 0) expect_op(p, ",");
        if (accept_op(p, ")")) break;
        const ttok *name = expect_name(p, "a parameter name");
        tnode *param = node_new(p, TN_NAME, name);
        param->str = name->text;
        param->len = name->len;
        if (accept_op(p, "=")) param->a = parse_expr(p);
        vec_push(p, &params, param);
    }
    n->params = params.items;
    n->n_params = params.n;
}

/* The body of a macro or call block: break/continue cannot reach an enclosing loop, and
 * whether it reads varargs / kwargs decides which extra arguments a call may pass. */
static tnode *parse_callable_body(parser *p, tnode *n, const char *const *ends, const char *tag, const ttok *at) {
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

static tnode *parse_macro(parser *p, const ttok *at) {
    static const char *const ends[] = {"endmacro", NULL};
    tnode *n = node_new(p, TN_MACRO, at);
    const ttok *name = expect_name(p, "a macro name");
    n->str = name->text;
    n->len = name->len;
    parse_params(p, n);
    expect_block_end(p, "macro");
    n->b = parse_callable_body(p, n, ends, "macro", at);
    eat_tag(p);
    if (cur(p)->kind == TT_NAME) advance(p); /* {% endmacro name %} */
    expect_block_end(p, "endmacro");
    return n;
}

static tnode *parse_call_block(parser *p, const ttok *at) {
    static const char *const ends[] = {"endcall", NULL};
    tnode *n = node_new(p, TN_CALL_BLOCK, at);
    if (tok_is_op(cur(p), "(")) parse_params(p, n);
    n->a = parse_expr(p);
    if (n->a->kind != TN_CALL) parse_error(p, at, "expected a call in 'call' block");
    expect_block_end(p, "call");
    n->b = parse_callable_body(p, n, ends, "call", at);
    eat_tag(p);
    expect_block_end(p, "endcall");
    return n;
}

static tnode *parse_filter_block(parser *p, const ttok *at) {
    static const char *const ends[] = {"endfilter", NULL};
    tnode *n = node_new(p, TN_FILTER_BLOCK, at);
    n->a = parse_filter(p, NULL);
    expect_block_end(p, "filter");
    n->b = parse_body(p, ends, "filter", at);
    eat_tag(p);
    expect_block_end(p, "endfilter");
    return n;
}

static tnode *parse_statement(parser *p) {
    const ttok *open = advance(p); /* {% */
    const ttok *tag = cur(p);
    if (tag->kind != TT_NAME) parse_error(p, tag, "expected a tag name after '{%%'");
    advance(p);
    if (tok_is_name(tag, "if")) return parse_if(p, tag);
    if (tok_is_name(tag, "for")) return parse_for(p, tag);
    if (tok_is_name(tag, "set")) return parse_set(p, tag);
    if (tok_is_name(tag, "macro")) return parse_macro(p, tag);
    if (tok_is_name(tag, "call")) return parse_call_block(p, tag);
    if (tok_is_name(tag, "filter")) return parse_filter_block(p, tag);
    if (tok_is_name(tag, "break") || tok_is_name(tag, "continue")) {
        if (p->loop_depth == 0) parse_error(p, tag, "'%.*s' outside loop", (int)tag->len, tag->text);
        tnode *n = node_new(p, tag->text[0] == 'b' ? TN_BREAK : TN_CONTINUE, tag);
        expect_block_end(p, tag->text);
        return n;
    }
    if (tok_is_name(tag, "generation")) {
        /* Hugging Face's AssistantTracker tag: marks assistant text, renders its body */
        static const char *const ends[] = {"endgeneration", NULL};
        expect_block_end(p, "generation");
        tnode *block = node_new(p, TN_FILTER_BLOCK, tag); /* a filter block with no filter */
        block->b = parse_body(p, ends, "generation", tag);
        eat_tag(p);
        expect_block_end(p, "endgeneration");
        return block;
    }
    (void)open;
    parse_error(p, tag, "unknown tag '%.*s'", (int)tag->len, tag->text);
}

/* Statements until one of end_tags (not consumed) or the end of the template. */
static tnode *parse_body(parser *p, const char *const *end_tags, const char *opened_by, const ttok *opened_at) {
    tnode *body = node_new(p, TN_BODY, cur(p));
    node_vec items = {0};
    enter(p);
    for (;;) {
        const ttok *t = cur(p);
        if (t->kind == TT_EOF) {
            if (end_tags)
                parse_error(p, t, "unexpected end of template: the '%s' opened on line %d is not closed", opened_by,
                            opened_at->line);
            break;
        }
        if (end_tags && at_tag(p, end_tags)) break;
        if (t->kind == TT_DATA) {
            tnode *n = node_new(p, TN_TEXT, t);
            n->str = t->text;
            n->len = t->len;
            vec_push(p, &items, n);
            advance(p);
        } else if (t->kind == TT_VAR_BEGIN) {
            advance(p);
            tnode *n = node_new(p, TN_OUTPUT, t);
            n->a = parse_tuple(p, false);
            if (cur(p)->kind != TT_VAR_END) {
                const ttok *bad = cur(p);
                if (bad->kind == TT_OP || bad->kind == TT_NAME)
                    parse_error(p, bad, "expected '}}', got '%.*s'", (int)bad->len, bad->text);
                parse_error(p, bad, "expected '}}', got %s", describe(bad));
            }
            advance(p);
            vec_push(p, &items, n);
        } else if (t->kind == TT_BLOCK_BEGIN) {
            const ttok *name = peek(p, 1);
            if (name->kind == TT_NAME &&
                (tok_is_name(name, "endif") || tok_is_name(name, "endfor") || tok_is_name(name, "else") ||
                 tok_is_name(name, "elif") || tok_is_name(name, "endmacro") || tok_is_name(name, "endset") ||
                 tok_is_name(name, "endcall") || tok_is_name(name, "endfilter") || tok_is_name(name, "endgeneration")))
                parse_error(p, name, "unexpected '%.*s'%s", (int)name->len, name->text,
                            end_tags ? "" : " with no block open");
            vec_push(p, &items, parse_statement(p));
        } else {
            parse_error(p, t, "unexpected %s", describe(t));
        }
    }
    leave(p);
    body->children = items.items;
    body->n_children = items.n;
    return body;
}

tnode *tmpl__parse_tokens(tmpl_arena *a, const ttok *toks, char *err, size_t err_cap) {
    parser *p = tmpl__alloc(a, sizeof(parser));
    p->arena = a;
    p->toks = toks;
    p->err = err;
    p->err_cap = err_cap;
    if (setjmp(p->fail)) return NULL;
    return parse_body(p, NULL, NULL, NULL);
}

/* template_parse_expr.c: the expression half of the parser (template_parser.c holds the
 * statements and the token cursor): tokens -> expression nodes, following jinja2's grammar
 * and operator precedence (lowest first):
 *   x if c else y  <  or  <  and  <  not  <  comparisons, in, not in  <  + -  <  ~
 *   <  * / // %  <  **  <  unary - +  <  primary with .attr [item] (call) | filter, is test
 * A syntax error names line and column.
 */
#include <string.h>

#include "template/template_internal.h"

/* (args) of a call, filter or test; the '(' is already consumed. */
static targs parse_call_args(tmpl_parser *p) {
    tmpl_node_vec pos = {0}, kw_vals = {0};
    const char **kw_names = NULL;
    size_t kw_cap = 0;
    while (!tmpl__parser_accept_op(p, ")")) {
        if (pos.n + kw_vals.n > 0) tmpl__parser_expect_op(p, ",");
        if (tmpl__parser_accept_op(p, ")")) break; /* trailing comma */
        const ttok *t = tmpl__parser_cur(p);
        if (t->kind == TT_NAME && tmpl__tok_is_op(tmpl__parser_peek(p, 1), "=")) {
            tmpl__parser_advance(p);
            tmpl__parser_advance(p);
            if (kw_vals.n == kw_cap) {
                kw_cap = kw_cap ? kw_cap * 2 : 4;
                const char **grown = tmpl__alloc(p->arena, kw_cap * sizeof(char *));
                if (kw_vals.n) memcpy(grown, kw_names, kw_vals.n * sizeof(char *));
                kw_names = grown;
            }
            kw_names[kw_vals.n] = t->text;
            tmpl__parser_vec_push(p, &kw_vals, tmpl__parse_expr(p));
        } else {
            if (kw_vals.n > 0) tmpl__parser_error(p, t, "positional argument follows keyword argument");
            tmpl__parser_vec_push(p, &pos, tmpl__parse_expr(p));
        }
    }
    return (targs){.pos = pos.items, .n_pos = pos.n, .kw_names = kw_names, .kw_vals = kw_vals.items, .n_kw = kw_vals.n};
}

static tnode *parse_primary(tmpl_parser *p) {
    const ttok *t = tmpl__parser_cur(p);
    tnode *n;
    switch (t->kind) {
    case TT_NAME:
        tmpl__parser_advance(p);
        if (tmpl__tok_is_name(t, "true") || tmpl__tok_is_name(t, "True") || tmpl__tok_is_name(t, "false") ||
            tmpl__tok_is_name(t, "False")) {
            n = tmpl__parser_node_new(p, TN_CONST, t);
            n->value = tmpl__bool(t->text[0] == 't' || t->text[0] == 'T');
        } else if (tmpl__tok_is_name(t, "none") || tmpl__tok_is_name(t, "None")) {
            n = tmpl__parser_node_new(p, TN_CONST, t);
            n->value = tmpl__none;
        } else {
            n = tmpl__parser_node_new(p, TN_NAME, t);
            n->str = t->text;
            n->len = t->len;
            if (tmpl__tok_is_name(t, "varargs")) p->saw_varargs = true;
            if (tmpl__tok_is_name(t, "kwargs")) p->saw_kwargs = true;
        }
        return n;
    case TT_STRING: {
        /* adjacent string literals concatenate */
        size_t total = 0, k = 0;
        while (p->toks[p->i + k].kind == TT_STRING) total += p->toks[p->i + k++].len; /* ends at TT_EOF */
        char *s = tmpl__alloc(p->arena, total + 1);
        size_t off = 0;
        while (tmpl__parser_cur(p)->kind == TT_STRING) {
            const ttok *st = tmpl__parser_advance(p);
            memcpy(s + off, st->text, st->len);
            off += st->len;
        }
        n = tmpl__parser_node_new(p, TN_CONST, t);
        n->value = tmpl__str(s, total);
        return n;
    }
    case TT_INT:
        tmpl__parser_advance(p);
        n = tmpl__parser_node_new(p, TN_CONST, t);
        n->value = tmpl__int(t->i);
        return n;
    case TT_FLOAT:
        tmpl__parser_advance(p);
        n = tmpl__parser_node_new(p, TN_CONST, t);
        n->value = tmpl__float(t->f);
        return n;
    case TT_OP:
        if (tmpl__parser_accept_op(p, "(")) {
            if (tmpl__parser_accept_op(p, ")")) return tmpl__parser_node_new(p, TN_TUPLE, t);
            tnode *first = tmpl__parse_expr(p);
            if (!tmpl__tok_is_op(tmpl__parser_cur(p), ",")) {
                tmpl__parser_expect_op(p, ")");
                return first;
            }
            tmpl_node_vec items = {0};
            tmpl__parser_vec_push(p, &items, first);
            while (tmpl__parser_accept_op(p, ",")) {
                if (tmpl__tok_is_op(tmpl__parser_cur(p), ")")) break;
                tmpl__parser_vec_push(p, &items, tmpl__parse_expr(p));
            }
            tmpl__parser_expect_op(p, ")");
            n = tmpl__parser_node_new(p, TN_TUPLE, t);
            n->children = items.items;
            n->n_children = items.n;
            return n;
        }
        if (tmpl__parser_accept_op(p, "[")) {
            tmpl_node_vec items = {0};
            while (!tmpl__parser_accept_op(p, "]")) {
                if (items.n > 0) tmpl__parser_expect_op(p, ",");
                if (tmpl__parser_accept_op(p, "]")) break;
                tmpl__parser_vec_push(p, &items, tmpl__parse_expr(p));
            }
            n = tmpl__parser_node_new(p, TN_LIST, t);
            n->children = items.items;
            n->n_children = items.n;
            return n;
        }
        if (tmpl__parser_accept_op(p, "{")) {
            tmpl_node_vec items = {0};
            while (!tmpl__parser_accept_op(p, "}")) {
                if (items.n > 0) tmpl__parser_expect_op(p, ",");
                if (tmpl__parser_accept_op(p, "}")) break;
                tmpl__parser_vec_push(p, &items, tmpl__parse_expr(p));
                tmpl__parser_expect_op(p, ":");
                tmpl__parser_vec_push(p, &items, tmpl__parse_expr(p));
            }
            n = tmpl__parser_node_new(p, TN_DICT, t);
            n->children = items.items;
            n->n_children = items.n;
            return n;
        }
        tmpl__parser_error(p, t, "unexpected '%.*s'", (int)t->len, t->text);
    default: tmpl__parser_error(p, t, "expected an expression, got %s", tmpl__tok_describe(t));
    }
}

/* a[...] after the '[': an item or a slice. */
static tnode *parse_subscript(tmpl_parser *p, tnode *obj, const ttok *at) {
    tnode *parts[3] = {NULL, NULL, NULL};
    int part = 0;
    bool is_slice = false;
    for (;;) {
        if (tmpl__tok_is_op(tmpl__parser_cur(p), "]")) break;
        if (tmpl__parser_accept_op(p, ":")) {
            is_slice = true;
            if (++part > 2) tmpl__parser_error(p, tmpl__parser_cur(p), "too many ':' in slice");
            continue;
        }
        if (parts[part]) tmpl__parser_error(p, tmpl__parser_cur(p), "expected ':' or ']'");
        parts[part] = tmpl__parse_expr(p);
    }
    tmpl__parser_expect_op(p, "]");
    tnode *n = tmpl__parser_node_new(p, is_slice ? TN_SLICE : TN_ITEM, at);
    n->a = obj;
    if (!is_slice && !parts[0]) tmpl__parser_error(p, at, "empty subscript");
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static tnode *parse_postfix(tmpl_parser *p, tnode *n) {
    for (;;) {
        const ttok *t = tmpl__parser_cur(p);
        if (tmpl__parser_accept_op(p, ".")) {
            const ttok *name = tmpl__parser_cur(p);
            tnode *attr;
            if (name->kind == TT_NAME) {
                attr = tmpl__parser_node_new(p, TN_ATTR, t);
                attr->str = name->text;
                attr->len = name->len;
            } else if (name->kind == TT_INT) {
                attr = tmpl__parser_node_new(p, TN_ITEM, t);
                attr->b = tmpl__parser_node_new(p, TN_CONST, name);
                attr->b->value = tmpl__int(name->i);
            } else {
                tmpl__parser_error(p, name, "expected an attribute name after '.'");
            }
            tmpl__parser_advance(p);
            attr->a = n;
            n = attr;
        } else if (tmpl__parser_accept_op(p, "[")) {
            n = parse_subscript(p, n, t);
        } else if (tmpl__parser_accept_op(p, "(")) {
            tnode *call = tmpl__parser_node_new(p, TN_CALL, t);
            call->a = n;
            call->args = parse_call_args(p);
            n = call;
        } else {
            return n;
        }
    }
}

tnode *tmpl__parse_filter(tmpl_parser *p, tnode *n) {
    do {
        const ttok *name = tmpl__parser_expect_name(p, "a filter name");
        /* dotted filter names do not occur in chat templates; one name is enough */
        tnode *f = tmpl__parser_node_new(p, TN_FILTER, name);
        f->str = name->text;
        f->len = name->len;
        f->a = n;
        if (tmpl__parser_accept_op(p, "(")) f->args = parse_call_args(p);
        n = f;
    } while (tmpl__parser_accept_op(p, "|"));
    return n;
}

static tnode *parse_test(tmpl_parser *p, tnode *n) {
    const ttok *at = tmpl__parser_cur(p);
    tnode *t = tmpl__parser_node_new(p, TN_TEST, at);
    t->negate = tmpl__parser_accept_name(p, "not");
    const ttok *name = tmpl__parser_expect_name(p, "a test name");
    t->str = name->text;
    t->len = name->len;
    t->a = n;
    const ttok *next = tmpl__parser_cur(p);
    if (tmpl__parser_accept_op(p, "(")) {
        t->args = parse_call_args(p);
    } else if ((next->kind == TT_NAME && !tmpl__tok_is_name(next, "else") && !tmpl__tok_is_name(next, "or") &&
                !tmpl__tok_is_name(next, "and")) ||
               next->kind == TT_STRING || next->kind == TT_INT || next->kind == TT_FLOAT ||
               tmpl__tok_is_op(next, "[") || tmpl__tok_is_op(next, "{")) {
        /* one argument without parentheses, as jinja2 takes it: `is divisibleby 3`,
         * `is equalto 'x'` (so `x is defined if y` reads `if` as the argument and fails) */
        if (tmpl__tok_is_name(next, "is")) tmpl__parser_error(p, next, "cannot chain multiple tests with 'is'");
        tnode *arg = parse_postfix(p, parse_primary(p));
        t->args.pos = tmpl__alloc(p->arena, sizeof(tnode *));
        t->args.pos[0] = arg;
        t->args.n_pos = 1;
    }
    return t;
}

static tnode *parse_filter_expr(tmpl_parser *p, tnode *n) {
    for (;;) {
        const ttok *t = tmpl__parser_cur(p);
        if (tmpl__parser_accept_op(p, "|")) {
            n = tmpl__parse_filter(p, n);
        } else if (tmpl__tok_is_name(t, "is")) {
            tmpl__parser_advance(p);
            n = parse_test(p, n);
        } else if (tmpl__parser_accept_op(p, "(")) {
            tnode *call = tmpl__parser_node_new(p, TN_CALL, t);
            call->a = n;
            call->args = parse_call_args(p);
            n = call;
        } else {
            return n;
        }
    }
}

static tnode *parse_unary(tmpl_parser *p, bool with_filter) {
    const ttok *t = tmpl__parser_cur(p);
    tnode *n;
    tmpl__parser_enter(p);
    if (tmpl__tok_is_op(t, "-") || tmpl__tok_is_op(t, "+")) {
        tmpl__parser_advance(p);
        n = tmpl__parser_node_new(p, TN_UNARY, t);
        n->str = t->text;
        n->a = parse_unary(p, false);
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) n = parse_filter_expr(p, n);
    tmpl__parser_leave(p);
    return n;
}

static tnode *binary(tmpl_parser *p, const ttok *op, tnode *a, tnode *b) {
    tnode *n = tmpl__parser_node_new(p, TN_BINARY, op);
    n->str = op->text;
    n->a = a;
    n->b = b;
    return n;
}

static tnode *parse_pow(tmpl_parser *p) {
    tnode *n = parse_unary(p, true);
    while (tmpl__tok_is_op(tmpl__parser_cur(p), "**")) {
        const ttok *op = tmpl__parser_advance(p);
        n = binary(p, op, n, parse_unary(p, true));
    }
    return n;
}

static tnode *parse_math2(tmpl_parser *p) {
    tnode *n = parse_pow(p);
    while (tmpl__tok_is_op(tmpl__parser_cur(p), "*") || tmpl__tok_is_op(tmpl__parser_cur(p), "/") ||
           tmpl__tok_is_op(tmpl__parser_cur(p), "//") || tmpl__tok_is_op(tmpl__parser_cur(p), "%")) {
        const ttok *op = tmpl__parser_advance(p);
        n = binary(p, op, n, parse_pow(p));
    }
    return n;
}

static tnode *parse_concat(tmpl_parser *p) {
    tnode *n = parse_math2(p);
    while (tmpl__tok_is_op(tmpl__parser_cur(p), "~")) {
        const ttok *op = tmpl__parser_advance(p);
        n = binary(p, op, n, parse_math2(p));
    }
    return n;
}

static tnode *parse_math1(tmpl_parser *p) {
    tnode *n = parse_concat(p);
    while (tmpl__tok_is_op(tmpl__parser_cur(p), "+") || tmpl__tok_is_op(tmpl__parser_cur(p), "-")) {
        const ttok *op = tmpl__parser_advance(p);
        n = binary(p, op, n, parse_concat(p));
    }
    return n;
}

/* Comparisons chain as in Python: a < b < c is (a < b) and (b < c). */
static tnode *parse_compare(tmpl_parser *p) {
    tnode *left = parse_math1(p);
    tnode *result = NULL;
    for (;;) {
        const ttok *t = tmpl__parser_cur(p);
        const char *op = NULL;
        if (t->kind == TT_OP && (tmpl__tok_is_op(t, "==") || tmpl__tok_is_op(t, "!=") || tmpl__tok_is_op(t, "<") ||
                                 tmpl__tok_is_op(t, "<=") || tmpl__tok_is_op(t, ">") || tmpl__tok_is_op(t, ">="))) {
            op = t->text;
            tmpl__parser_advance(p);
        } else if (tmpl__tok_is_name(t, "in")) {
            op = "in";
            tmpl__parser_advance(p);
        } else if (tmpl__tok_is_name(t, "not") && tmpl__tok_is_name(tmpl__parser_peek(p, 1), "in")) {
            op = "notin";
            tmpl__parser_advance(p);
            tmpl__parser_advance(p);
        } else {
            break;
        }
        tnode *right = parse_math1(p);
        tnode *cmp = tmpl__parser_node_new(p, TN_COMPARE, t);
        cmp->str = op;
        cmp->a = left;
        cmp->b = right;
        if (result) {
            tnode *both = tmpl__parser_node_new(p, TN_BINARY, t);
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

static tnode *parse_not(tmpl_parser *p) {
    const ttok *t = tmpl__parser_cur(p);
    if (tmpl__tok_is_name(t, "not")) {
        tmpl__parser_advance(p);
        tmpl__parser_enter(p);
        tnode *n = tmpl__parser_node_new(p, TN_UNARY, t);
        n->str = "not";
        n->a = parse_not(p);
        tmpl__parser_leave(p);
        return n;
    }
    return parse_compare(p);
}

/* operand (word operand)*, left-associative: the `and` and `or` levels */
static tnode *parse_logic(tmpl_parser *p, const char *word, tnode *(*operand)(tmpl_parser *)) {
    tnode *n = operand(p);
    while (tmpl__tok_is_name(tmpl__parser_cur(p), word)) {
        const ttok *op = tmpl__parser_advance(p);
        n = binary(p, op, n, operand(p));
        n->str = word;
    }
    return n;
}

static tnode *parse_and(tmpl_parser *p) {
    return parse_logic(p, "and", parse_not);
}
tnode *tmpl__parse_or(tmpl_parser *p) {
    return parse_logic(p, "or", parse_and);
}

tnode *tmpl__parse_expr(tmpl_parser *p) {
    tmpl__parser_enter(p);
    tnode *n = tmpl__parse_or(p);
    while (tmpl__tok_is_name(tmpl__parser_cur(p), "if")) {
        const ttok *t = tmpl__parser_advance(p);
        tnode *c = tmpl__parser_node_new(p, TN_CONDEXPR, t);
        c->b = n;
        c->a = tmpl__parse_or(p);
        if (tmpl__parser_accept_name(p, "else")) c->c = tmpl__parse_expr(p);
        n = c;
    }
    tmpl__parser_leave(p);
    return n;
}

/* An expression, or a tuple of them without parentheses (`for k, v in ...` targets,
 * `set a, b = ...`). names_only restricts items to plain names. */
tnode *tmpl__parse_tuple(tmpl_parser *p, bool names_only) {
    const ttok *at = tmpl__parser_cur(p);
    tnode *first;
    if (names_only) {
        const ttok *t = tmpl__parser_expect_name(p, "a variable name");
        first = tmpl__parser_node_new(p, TN_NAME, t);
        first->str = t->text;
        first->len = t->len;
    } else {
        first = tmpl__parse_expr(p);
    }
    if (!tmpl__tok_is_op(tmpl__parser_cur(p), ",")) return first;
    tmpl_node_vec items = {0};
    tmpl__parser_vec_push(p, &items, first);
    while (tmpl__parser_accept_op(p, ",")) {
        ttok_kind k = tmpl__parser_cur(p)->kind;
        if (!names_only && (k == TT_VAR_END || k == TT_BLOCK_END)) break; /* {{ 1, }} is (1,) */
        if (names_only) {
            const ttok *t = tmpl__parser_expect_name(p, "a variable name");
            tnode *n = tmpl__parser_node_new(p, TN_NAME, t);
            n->str = t->text;
            n->len = t->len;
            tmpl__parser_vec_push(p, &items, n);
        } else {
            tmpl__parser_vec_push(p, &items, tmpl__parse_expr(p));
        }
    }
    tnode *n = tmpl__parser_node_new(p, TN_TUPLE, at);
    n->children = items.items;
    n->n_children = items.n;
    return n;
}

/* template_ops.c: the operators of template expressions with Python's rules: + - * /
 * // % ** on numbers (64-bit integers, overflow is an error; floats floor-divide as
 * Python's float_divmod), + and * on strings, lists and tuples, str % args, ordering,
 * equality and `in`.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "template/template_internal.h"

static bool is_num(tv v) {
    return v.kind == TV_INT || v.kind == TV_FLOAT || v.kind == TV_BOOL;
}
static double num(tv v) {
    return v.kind == TV_FLOAT ? v.f : v.kind == TV_INT ? (double)v.i : (double)v.b;
}
static int64_t int_of(tv v) {
    return v.kind == TV_INT ? v.i : (int64_t)v.b;
}

static _Noreturn void fail_operands(tmpl_render_state *r, const char *op, tv a, tv b) {
    if (a.kind == TV_UNDEFINED) tmpl__fail_undefined(r, a);
    if (b.kind == TV_UNDEFINED) tmpl__fail_undefined(r, b);
    tmpl__fail(r, SP_ERR_FORMAT, "unsupported operand type(s) for %s: '%s' and '%s'", op, tmpl__type_name(a),
               tmpl__type_name(b));
}

static tv concat_lists(tmpl_render_state *r, tlist *a, tlist *b) {
    tv l = tmpl__list_new(&r->arena, a->n + b->n);
    for (size_t i = 0; i < a->n; i++) tmpl__list_push(&r->arena, l.list, a->items[i]);
    for (size_t i = 0; i < b->n; i++) tmpl__list_push(&r->arena, l.list, b->items[i]);
    l.list->is_tuple = a->is_tuple && b->is_tuple;
    return l;
}

static tv repeat(tmpl_render_state *r, tv seq, int64_t times) {
    if (times < 0) times = 0;
    size_t unit = seq.kind == TV_STR ? seq.len : seq.list->n;
    if (unit && (uint64_t)times > r->max_output / unit)
        tmpl__fail(r, SP_ERR_RANGE, "repetition of %lld would pass the output limit", (long long)times);
    tmpl__charge(r, unit * (size_t)times);
    if (seq.kind == TV_STR) {
        tmpl_buf b;
        tmpl__buf_init(&b, &r->arena, unit * (size_t)times + 1);
        for (int64_t i = 0; i < times; i++) tmpl__buf_put(&b, seq.s, seq.len);
        return tmpl__buf_value(&b);
    }
    tv l = tmpl__list_new(&r->arena, unit * (size_t)times);
    l.list->is_tuple = seq.list->is_tuple;
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < unit; j++) tmpl__list_push(&r->arena, l.list, seq.list->items[j]);
    return l;
}

tv tmpl__arith(tmpl_render_state *r, const char *op, tv a, tv b) {
    char o = op[0];
    bool two = op[1] != '\0';
    if (o == '+' && a.kind == TV_STR && b.kind == TV_STR) {
        tmpl_buf buf;
        tmpl__buf_init(&buf, &r->arena, a.len + b.len + 1);
        tmpl__buf_put(&buf, a.s, a.len);
        tmpl__buf_put(&buf, b.s, b.len);
        return tmpl__buf_value(&buf);
    }
    if (o == '+' && a.kind == TV_LIST && b.kind == TV_LIST) return concat_lists(r, a.list, b.list);
    if (o == '%' && !two && a.kind == TV_STR) return tmpl__percent_format(r, a, b);
    if (o == '*' && !two && (a.kind == TV_STR || a.kind == TV_LIST) && (b.kind == TV_INT || b.kind == TV_BOOL))
        return repeat(r, a, int_of(b));
    if (o == '*' && !two && (b.kind == TV_STR || b.kind == TV_LIST) && (a.kind == TV_INT || a.kind == TV_BOOL))
        return repeat(r, b, int_of(a));
    if (!is_num(a) || !is_num(b)) fail_operands(r, op, a, b);
    bool ints = a.kind != TV_FLOAT && b.kind != TV_FLOAT;
    if (o == '/' && !two) {
        if (num(b) == 0) tmpl__fail(r, SP_ERR_FORMAT, "division by zero");
        return tmpl__float(num(a) / num(b));
    }
    if (ints) {
        int64_t x = int_of(a), y = int_of(b), z;
        switch (o) {
        case '+':
            if (__builtin_add_overflow(x, y, &z)) break;
            return tmpl__int(z);
        case '-':
            if (__builtin_sub_overflow(x, y, &z)) break;
            return tmpl__int(z);
        case '*':
            if (two) { /* **, by squaring */
                if (y < 0) return tmpl__float(pow((double)x, (double)y));
                int64_t base = x;
                z = 1;
                for (; y > 0; y >>= 1) {
                    if ((y & 1) && __builtin_mul_overflow(z, base, &z)) break;
                    if (y > 1 && __builtin_mul_overflow(base, base, &base)) break;
                }
                if (y > 0) break;
                return tmpl__int(z);
            }
            if (__builtin_mul_overflow(x, y, &z)) break;
            return tmpl__int(z);
        case '/':
        case '%': {
            if (y == 0) tmpl__fail(r, SP_ERR_FORMAT, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) break;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { /* Python floors */
                q -= 1;
                m += y;
            }
            return tmpl__int(o == '/' ? q : m);
        }
        }
        tmpl__fail(r, SP_ERR_RANGE, "integer overflow in %s", op);
    }
    double x = num(a), y = num(b);
    switch (o) {
    case '+': return tmpl__float(x + y);
    case '-': return tmpl__float(x - y);
    case '*': return tmpl__float(two ? pow(x, y) : x * y);
    case '/':
    case '%': { /* Python's float_divmod */
        if (y == 0) tmpl__fail(r, SP_ERR_FORMAT, "float division by zero");
        double m = fmod(x, y), div = (x - m) / y, q;
        if (m != 0) {
            if ((y < 0) != (m < 0)) {
                m += y;
                div -= 1.0;
            }
        } else {
            m = copysign(0.0, y);
        }
        if (div != 0) {
            q = floor(div);
            if (div - q > 0.5) q += 1.0;
        } else {
            q = copysign(0.0, x / y);
        }
        return tmpl__float(o == '/' ? q : m);
    }
    }
    fail_operands(r, op, a, b);
}

/* Python's ordering of two values: numbers, strings (by code point, which UTF-8 byte
 * order preserves) and lists; anything else is a TypeError. */
int tmpl__order(tmpl_render_state *r, const char *op, tv a, tv b) {
    if (is_num(a) && is_num(b)) {
        if (a.kind != TV_FLOAT && b.kind != TV_FLOAT) return int_of(a) < int_of(b) ? -1 : int_of(a) > int_of(b);
        return num(a) < num(b) ? -1 : num(a) > num(b);
    }
    if (a.kind == TV_STR && b.kind == TV_STR) {
        size_t n = a.len < b.len ? a.len : b.len;
        int c = memcmp(a.s, b.s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.len < b.len ? -1 : a.len > b.len;
    }
    if (a.kind == TV_LIST && b.kind == TV_LIST) {
        size_t n = a.list->n < b.list->n ? a.list->n : b.list->n;
        for (size_t i = 0; i < n; i++) {
            if (tmpl__equal(a.list->items[i], b.list->items[i])) continue;
            return tmpl__order(r, op, a.list->items[i], b.list->items[i]);
        }
        return a.list->n < b.list->n ? -1 : a.list->n > b.list->n;
    }
    if (a.kind == TV_UNDEFINED) tmpl__fail_undefined(r, a);
    if (b.kind == TV_UNDEFINED) tmpl__fail_undefined(r, b);
    tmpl__fail(r, SP_ERR_FORMAT, "'%s' not supported between instances of '%s' and '%s'", op, tmpl__type_name(a),
               tmpl__type_name(b));
}

static bool contains(tmpl_render_state *r, tv container, tv item) {
    switch (container.kind) {
    case TV_STR:
        if (item.kind != TV_STR)
            tmpl__fail(r, SP_ERR_FORMAT, "'in <string>' requires string as left operand, not %s",
                       tmpl__type_name(item));
        if (item.len == 0) return true;
        return memmem(container.s, container.len, item.s, item.len) != NULL;
    case TV_LIST:
        tmpl__charge(r, container.list->n);
        for (size_t i = 0; i < container.list->n; i++)
            if (tmpl__equal(container.list->items[i], item)) return true;
        return false;
    case TV_DICT: return tmpl__dict_get_value(container.dict, item) != NULL;
    case TV_UNDEFINED: return false;
    default: tmpl__fail(r, SP_ERR_FORMAT, "argument of type '%s' is not iterable", tmpl__type_name(container));
    }
}

tv tmpl__compare(tmpl_render_state *r, const char *op, tv a, tv b) {
    if (strcmp(op, "==") == 0) return tmpl__bool(tmpl__equal(a, b));
    if (strcmp(op, "!=") == 0) return tmpl__bool(!tmpl__equal(a, b));
    if (strcmp(op, "in") == 0) return tmpl__bool(contains(r, b, a));
    if (strcmp(op, "notin") == 0) return tmpl__bool(!contains(r, b, a));
    int c = tmpl__order(r, op, a, b);
    if (strcmp(op, "<") == 0) return tmpl__bool(c < 0);
    if (strcmp(op, "<=") == 0) return tmpl__bool(c <= 0);
    if (strcmp(op, ">") == 0) return tmpl__bool(c > 0);
    return tmpl__bool(c >= 0);
}

/* template_internal.h: what the files of the Jinja engine share (template/template_*.c).
 *
 *   template_lexer.c     source -> tokens, with Jinja's whitespace control
 *   template_parser.c    tokens -> syntax tree (tnode): statements, the token cursor
 *   template_parse_expr.c  the parser's expressions, in jinja2's precedence
 *   template_value.c     the arena, values (tv), Python's str()/repr()/truthiness/equality
 *   template_json.c      JSON <-> values, and the tojson filter (Python's json.dumps)
 *   template_eval.c      runs the tree: statements, expressions, scopes, macros, output
 *   template_ops.c       the operators (arithmetic, comparison, in) with Python's rules
 *   template_format.c    fmt % args and str.format's format specs
 *   template_strings.c   Python's str operations (UTF-8, classes, case, split, repr)
 *   template_str_methods.c  the string methods
 *   template_filters.c   the filters (| trim, | tojson, | map ...)
 *   template_builtins.c  argument helpers, dict methods, global functions, tests
 *
 * Errors: parsing and rendering stop with longjmp to the entry point (tmpl_parse,
 * tmpl_render), which sets the status and frees the arena. That is safe because every
 * allocation made after the setjmp lives in that arena; nothing else needs unwinding.
 */
#ifndef SP_TEMPLATE_INTERNAL_H
#define SP_TEMPLATE_INTERNAL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "template/template.h"

/* ---- arena ---------------------------------------------------------------------- */

typedef struct tmpl_arena_chunk tmpl_arena_chunk;

/* A bump allocator: chunks are freed together by tmpl__arena_free. When limit bytes
 * are used, tmpl__alloc jumps to *on_full (status SP_ERR_RANGE). */
typedef struct tmpl_arena {
    tmpl_arena_chunk *head;
    size_t used;
    size_t limit;
    jmp_buf *on_full;
    sp_status failed; /* why it jumped: SP_ERR_RANGE or SP_ERR_NOMEM */
} tmpl_arena;

void tmpl__arena_init(tmpl_arena *a, size_t limit, jmp_buf *on_full);
void tmpl__arena_free(tmpl_arena *a);
void *tmpl__alloc(tmpl_arena *a, size_t size); /* zeroed, 16-byte aligned */
char *tmpl__strndup(tmpl_arena *a, const char *s, size_t n);

/* ---- tokens --------------------------------------------------------------------- */

typedef enum ttok_kind {
    TT_EOF,
    TT_DATA,        /* literal text between tags (whitespace control already applied) */
    TT_VAR_BEGIN,   /* {{ */
    TT_VAR_END,     /* }} */
    TT_BLOCK_BEGIN, /* {% */
    TT_BLOCK_END,   /* %} */
    TT_NAME,
    TT_STRING, /* escapes decoded */
    TT_INT,
    TT_FLOAT,
    TT_OP, /* text holds the operator: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : | */
} ttok_kind;

typedef struct ttok {
    ttok_kind kind;
    int line, col;
    const char *text; /* arena copy (DATA, NAME, STRING, OP) */
    size_t len;
    int64_t i;
    double f;
} ttok;

/* Splits source into tokens (arena-allocated array ending with TT_EOF). A lexing error
 * fills err ("line L, column C: ...") and returns NULL. */
ttok *tmpl__lex(tmpl_arena *a, const char *source, size_t len, char *err, size_t err_cap);

/* ---- syntax tree ---------------------------------------------------------------- */

typedef enum tnode_kind {
    /* statements */
    TN_BODY,         /* children */
    TN_TEXT,         /* str */
    TN_OUTPUT,       /* a: expression printed */
    TN_IF,           /* a: cond, b: then body, c: else (body or another TN_IF) */
    TN_FOR,          /* target (a name or TN_TUPLE of names), a: iterable, d: filter cond, b: body, c: else */
    TN_SET,          /* target (name, TN_TUPLE or TN_ATTR ns.x), a: value; block form: b body */
    TN_MACRO,        /* str: name, params (TN_NAME, default in .a), b: body */
    TN_CALL_BLOCK,   /* a: the call, params of caller(), b: body */
    TN_FILTER_BLOCK, /* a: TN_FILTER chain whose innermost .a is NULL, b: body */
    TN_BREAK,
    TN_CONTINUE,
    /* expressions */
    TN_CONST,   /* value */
    TN_NAME,    /* str */
    TN_LIST,    /* children */
    TN_TUPLE,   /* children */
    TN_DICT,    /* children: key, value, key, value... */
    TN_ATTR,    /* a.str */
    TN_ITEM,    /* a[b] */
    TN_SLICE,   /* a[b:c:d], each of b c d may be NULL */
    TN_CALL,    /* a(args) */
    TN_FILTER,  /* a | str(args) */
    TN_TEST,    /* a is [not] str(args); negate */
    TN_UNARY,   /* op a: "not" "-" "+" */
    TN_BINARY,  /* a op b: arithmetic, "~", "and", "or" */
    TN_COMPARE, /* a op b: == != < <= > >= in notin */
    TN_CONDEXPR /* b if a else c (c may be NULL) */
} tnode_kind;

typedef struct tnode tnode;
typedef struct tv tv;

/* Arguments of a call, filter or test: positional then keyword. */
typedef struct targs {
    tnode **pos;
    size_t n_pos;
    const char **kw_names;
    tnode **kw_vals;
    size_t n_kw;
} targs;

/* ---- values --------------------------------------------------------------------- */

typedef enum tv_kind {
    TV_UNDEFINED, /* str: the name that was missing (for error messages) */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST,  /* list or tuple (list->is_tuple) */
    TV_DICT,  /* dicts and namespace() objects (dict->is_namespace) */
    TV_FUNC,  /* a builtin function or a bound method (func) */
    TV_MACRO, /* a macro or caller() (macro) */
    TV_LOOP   /* the loop variable of a for (loop) */
} tv_kind;

typedef struct tlist tlist;
typedef struct tdict tdict;
typedef struct tfunc tfunc;
typedef struct tmacro tmacro;
typedef struct tloop tloop;

struct tv {
    tv_kind kind;
    size_t len; /* TV_STR bytes; TV_UNDEFINED name bytes */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s; /* TV_STR, TV_UNDEFINED */
        tlist *list;
        tdict *dict;
        tfunc *func;
        tmacro *macro;
        tloop *loop;
    };
};

struct tlist {
    tv *items;
    size_t n, cap;
    bool is_tuple;
    /* Non-NULL for one-pass iterators, which jinja2's map, select, reject, selectattr,
     * rejectattr and unique return ("generator"): always true, no len(), not JSON, and
     * empty once iterated. |list makes a real list. */
    const char *iter_name;
    bool consumed;
    unsigned depth; /* 1 + the deepest item's depth (see TMPL_MAX_VALUE_DEPTH) */
};

/* Insertion-ordered, linear lookup: chat messages have a handful of keys. */
struct tdict {
    tv *keys;
    tv *vals;
    size_t n, cap;
    bool is_namespace;
    unsigned depth;
};

struct tnode {
    tnode_kind kind;
    int line;
    const char *str;
    size_t len;
    bool negate;        /* TN_TEST "is not" */
    bool catch_varargs; /* TN_MACRO / TN_CALL_BLOCK body reads varargs: extra positionals allowed */
    bool catch_kwargs;  /* ... reads kwargs: unknown keywords allowed */
    tnode *a, *b, *c, *d;
    tnode *target; /* TN_FOR, TN_SET */
    tnode **children;
    size_t n_children;
    tnode **params; /* TN_MACRO / TN_CALL_BLOCK parameters (TN_NAME with default in .a) */
    size_t n_params;
    targs args; /* TN_CALL, TN_FILTER, TN_TEST */
    tv value;   /* TN_CONST */
};

/* The parsed template: the tree and the arena that holds it. */
struct tmpl {
    tmpl_arena arena;
    tnode *root;
};

/* Builds the tree from tokens. A syntax error fills err and returns NULL. */
tnode *tmpl__parse_tokens(tmpl_arena *a, const ttok *toks, char *err, size_t err_cap);

/* ---- parser internals (template_parser.c, template_parse_expr.c) ---------------- */

/* The state of one parse, in the parse's arena. A syntax error longjmps to fail. */
typedef struct tmpl_parser {
    tmpl_arena *arena;
    const ttok *toks;
    size_t i;
    char *err;
    size_t err_cap;
    jmp_buf fail;
    int depth;                    /* expression nesting, bounded so a hostile template cannot overflow the stack */
    int loop_depth;               /* for loops around the statement being parsed (0 in a macro body) */
    bool saw_varargs, saw_kwargs; /* the names varargs / kwargs appeared (macro bodies) */
} tmpl_parser;

/* A growable array of node pointers in the arena. */
typedef struct tmpl_node_vec {
    tnode **items;
    size_t n, cap;
} tmpl_node_vec;

/* The token cursor (template_parser.c). Writes "line L, column C: ..." to err and jumps. */
_Noreturn void tmpl__parser_error(tmpl_parser *p, const ttok *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const ttok *tmpl__parser_cur(tmpl_parser *p);
const ttok *tmpl__parser_peek(tmpl_parser *p, size_t k); /* k tokens on, stopping at TT_EOF */
const ttok *tmpl__parser_advance(tmpl_parser *p);        /* the token passed over */
bool tmpl__tok_is_op(const ttok *t, const char *op);
bool tmpl__tok_is_name(const ttok *t, const char *name);
/* Consume the operator / name when it is next. */
bool tmpl__parser_accept_op(tmpl_parser *p, const char *op);
bool tmpl__parser_accept_name(tmpl_parser *p, const char *name);
const char *tmpl__tok_describe(const ttok *t); /* the token's kind for messages ("name", "'%}'") */
/* Consume what must come next, or fail naming what was found. */
void tmpl__parser_expect_op(tmpl_parser *p, const char *op);
const ttok *tmpl__parser_expect_name(tmpl_parser *p, const char *what);
tnode *tmpl__parser_node_new(tmpl_parser *p, tnode_kind kind, const ttok *at);
void tmpl__parser_vec_push(tmpl_parser *p, tmpl_node_vec *v, tnode *n);
/* One level deeper / back: nesting is bounded so a hostile template cannot overflow the stack. */
void tmpl__parser_enter(tmpl_parser *p);
void tmpl__parser_leave(tmpl_parser *p);

/* Expressions (template_parse_expr.c). */
tnode *tmpl__parse_expr(tmpl_parser *p); /* the whole grammar, x if c else y down */
tnode *tmpl__parse_or(tmpl_parser *p);   /* without the inline if: conditions of if, for */
/* An expression or a tuple without parentheses; names_only: a tuple of plain names. */
tnode *tmpl__parse_tuple(tmpl_parser *p, bool names_only);
/* name(args) | name ... after a '|'; n is what they filter (NULL in filter blocks). */
tnode *tmpl__parse_filter(tmpl_parser *p, tnode *n);

/* ---- values: construction and Python's semantics (template_value.c) -------------- */

/* Lists and dicts nest at most this deep: equality, ordering, repr and tojson recurse
 * over values, so a deeper value (built by a loop, or sent in a request) stops the render
 * with SP_ERR_RANGE when it is made, before anything can recurse over it. */
#define TMPL_MAX_VALUE_DEPTH 1000

extern const tv tmpl__undefined;
extern const tv tmpl__none;

tv tmpl__bool(bool b);
tv tmpl__int(int64_t i);
tv tmpl__float(double f);
tv tmpl__str(const char *s, size_t len); /* borrows s (it must outlive the value) */
tv tmpl__str_copy(tmpl_arena *a, const char *s, size_t len);
tv tmpl__undefined_named(const char *name, size_t len);
tv tmpl__list_new(tmpl_arena *a, size_t cap);
tv tmpl__dict_new(tmpl_arena *a, size_t cap);
/* Appends item; fails through the arena's jump when the list would nest too deeply. */
void tmpl__list_push(tmpl_arena *a, tlist *l, tv item);
/* Sets key (replacing an equal key in place, else appending); fails as list_push. */
void tmpl__dict_set(tmpl_arena *a, tdict *d, tv key, tv val);
/* Looks up a string key; NULL when absent. */
tv *tmpl__dict_get(const tdict *d, const char *key, size_t len);
tv *tmpl__dict_get_value(const tdict *d, tv key);

bool tmpl__truthy(tv v);
bool tmpl__equal(tv a, tv b);
/* Python's type name of v ("str", "int", "list", "dict", ...). */
const char *tmpl__type_name(tv v);
bool tmpl__is_str(tv v, const char *lit);

/* A growable byte buffer in the arena. */
typedef struct tmpl_buf {
    tmpl_arena *arena;
    char *data;
    size_t len, cap;
} tmpl_buf;

void tmpl__buf_init(tmpl_buf *b, tmpl_arena *a, size_t cap);
void tmpl__buf_put(tmpl_buf *b, const char *s, size_t n);
void tmpl__buf_putc(tmpl_buf *b, char c);
void tmpl__buf_printf(tmpl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
tv tmpl__buf_value(tmpl_buf *b); /* the bytes as a string value (shares the buffer) */

/* Appends Python's str(v) / repr(v). */
void tmpl__append_str(tmpl_buf *b, tv v);
void tmpl__append_repr(tmpl_buf *b, tv v);
/* Python's repr() of a float ("1.0", "0.1", "1e+16", "inf", "nan"). */
void tmpl__append_float(tmpl_buf *b, double f);

/* ---- render state (template_eval.c) --------------------------------------------- */

typedef struct tscope tscope;

typedef struct tmpl_render_state {
    tmpl_arena arena;
    jmp_buf on_error;
    sp_status status; /* set before the jump */
    tmpl_buf out;
    tscope *globals;
    size_t steps, max_steps, max_output;
    int call_depth; /* macro calls in progress */
    int depth;      /* nested eval/exec calls */
    int line;       /* of the node being evaluated, for error messages */
} tmpl_render_state;

/* Stops the render with status and a message (prefixed "line L: " except for
 * SP_ERR_INVALID_ARG, which carries raise_exception's text as it is). */
_Noreturn void tmpl__fail(tmpl_render_state *r, sp_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The str() of v as a string value (v itself when it already is one). */
tv tmpl__to_str(tmpl_render_state *r, tv v);
/* Evaluated arguments of a call, filter or test: positional, then keyword. */
typedef struct tmpl_args {
    tv *pos;
    size_t n_pos;
    const char **kw_names;
    tv *kw_vals;
    size_t n_kw;
} tmpl_args;

/* A macro (or the caller() of a call block) and the scope it was defined in. */
struct tmacro {
    const char *name;
    size_t n_params;
    tnode **params;
    const tnode *body;
    tscope *closure;
    bool catch_varargs, catch_kwargs;
};

/* Counts n steps of work done inside one builtin (a sort pass, a scan), failing past
 * the step limit, so no single filter escapes it. */
void tmpl__charge(tmpl_render_state *r, size_t n);
/* Stops the render: v (an undefined value) was used where jinja2 raises. */
_Noreturn void tmpl__fail_undefined(tmpl_render_state *r, tv v);
/* Arithmetic a op b ("+", "-", "*", "/", "//", "%", "**") and comparison a op b ("==",
 * "!=", "<", "<=", ">", ">=", "in", "notin") with Python's rules (template_ops.c). */
tv tmpl__arith(tmpl_render_state *r, const char *op, tv a, tv b);
tv tmpl__compare(tmpl_render_state *r, const char *op, tv a, tv b);

/* Calls a macro or builtin. */
tv tmpl__call_value(tmpl_render_state *r, tv callee, const tmpl_args *a);
/* Attribute access as Jinja's getattr: a method of the value's type first, then an item. */
tv tmpl__get_attr(tmpl_render_state *r, tv obj, const char *name, size_t len);
/* Subscript as Jinja's getitem: an item first, then an attribute. */
tv tmpl__get_item(tmpl_render_state *r, tv obj, tv key);
/* Iterates as Python's iter(): list items, dict keys, string characters (UTF-8). */
tv tmpl__to_list(tmpl_render_state *r, tv v);

/* ---- JSON (template_json.c) ----------------------------------------------------- */

tv tmpl__from_json(tmpl_arena *a, const json_t *j);
/* The arguments of Python's json.dumps that tojson passes on. */
typedef struct tmpl_json_opts {
    const char *indent; /* per level; NULL: None (one line) */
    const char *item_sep, *key_sep;
    bool sort_keys, ensure_ascii;
} tmpl_json_opts;

/* Appends json.dumps(v, **opts) to b; values JSON cannot hold fail the render. */
void tmpl__tojson(tmpl_render_state *r, tmpl_buf *b, tv v, const tmpl_json_opts *o);

/* ---- builtins (template_builtins.c, template_filters.c, template_strings.c) ------- */

/* A builtin callable: a global function or a method bound to self (f->self, f->name). */
typedef tv (*tmpl_builtin_fn)(tmpl_render_state *r, const tfunc *f, const tmpl_args *a);
struct tfunc {
    const char *name;
    tmpl_builtin_fn fn;
    tv self;
};

/* Argument i by position or by keyword name; dflt when not given. */
tv tmpl__arg(const tmpl_args *a, size_t i, const char *name, tv dflt);
bool tmpl__arg_given(const tmpl_args *a, size_t i, const char *name);
/* v itself when it is a string / an integer (bools count); otherwise the render fails
 * naming what (the builtin and argument). */
tv tmpl__arg_str(tmpl_render_state *r, const char *what, tv v);
int64_t tmpl__arg_int(tmpl_render_state *r, const char *what, tv v);

/* Python's str operations (template_strings.c), on code points of UTF-8 text. Results
 * may share the input's bytes. */
bool tmpl__py_space(unsigned char c); /* an ASCII byte that str.isspace() accepts */
/* The bytes of the whitespace code point (str.isspace) at s, or 0 when s starts with none. */
size_t tmpl__py_space_len(const char *s, size_t n);
/* len(s): code points */
size_t tmpl__str_cp_len(tv s);
tv tmpl__str_strip(tv s, tv chars, bool left, bool right); /* chars: a string, or none for whitespace */
typedef enum tmpl_case {
    TMPL_CASE_UPPER,
    TMPL_CASE_LOWER,
    TMPL_CASE_SWAP,
    TMPL_CASE_FOLD,
    TMPL_CASE_TITLE,
    TMPL_CASE_CAPITALIZE
} tmpl_case;
/* s.upper(), s.lower(), s.swapcase(), s.casefold(), s.title(), s.capitalize() */
tv tmpl__str_case(tmpl_render_state *r, tv s, tmpl_case mode);
/* f toupper / tolower: s.upper() / s.lower(); any other f maps ASCII bytes only. */
tv tmpl__str_map_case(tmpl_render_state *r, tv s, int (*f)(int));
tv tmpl__str_capitalize(tmpl_render_state *r, tv s);
/* str.title(), or jinja2's title filter (words start after whitespace and -({[<) */
tv tmpl__str_title(tmpl_render_state *r, tv s, bool jinja_filter);
tv tmpl__str_replace(tmpl_render_state *r, tv s, tv old, tv new_, int64_t count);
tv tmpl__str_split(tmpl_render_state *r, tv s, tv sep, int64_t maxsplit);
tv tmpl__str_splitlines(tmpl_render_state *r, tv s);
/* len(re.findall(r"\w+", s)): runs of letters, digits and '_' (jinja2's wordcount) */
size_t tmpl__str_count_words(tv s);
/* Appends Python's repr() of the string s[0, n). */
void tmpl__append_str_repr(tmpl_buf *b, const char *s, size_t n);
/* Shared with template_str_methods.c: UTF-8 decoding (bytes of the code point at s,
 * 0 at the end; a malformed byte decodes alone), code-point counts and offsets,
 * Python's character classes of one code point, the last occurrence of needle, and
 * rsplit / splitlines(keepends). */
size_t tmpl__u8_decode(const char *s, size_t n, uint32_t *cp);
size_t tmpl__cp_count(const char *s, size_t n);
size_t tmpl__cp_offset(const char *s, size_t n, size_t k);
bool tmpl__cp_space(uint32_t cp);
bool tmpl__cp_title_letter(uint32_t cp);
bool tmpl__cp_decimal(uint32_t cp);
bool tmpl__cp_digit(uint32_t cp);
bool tmpl__cp_numeric(uint32_t cp);
bool tmpl__cp_alpha(uint32_t cp);
bool tmpl__cp_alnum(uint32_t cp);
bool tmpl__cp_upper(uint32_t cp);
bool tmpl__cp_lower(uint32_t cp);
bool tmpl__cp_printable(uint32_t cp);
const char *tmpl__mem_last(const char *hay, size_t hn, const char *needle, size_t nn);
tv tmpl__str_rsplit(tmpl_render_state *r, tv s, tv sep, int64_t maxsplit);
tv tmpl__str_splitlines_keep(tmpl_render_state *r, tv s, bool keepends);
/* The string method name, or NULL. */
tmpl_builtin_fn tmpl__str_method(const char *name, size_t len);

/* A dict's (key, value) tuples. */
tv tmpl__dict_items(tmpl_render_state *r, tdict *d);
/* Python's ordering (<0, 0, >0) of numbers, strings or lists; anything else fails
 * naming op and the types (template_ops.c). */
int tmpl__order(tmpl_render_state *r, const char *op, tv a, tv b);
bool tmpl__filter_exists(const char *name, size_t len);
/* Appends Python's format(v, spec) (str.format's "{:spec}") (template_format.c). */
void tmpl__format_spec(tmpl_render_state *r, tmpl_buf *b, tv v, const char *spec, size_t n);
/* Python's printf-style fmt % args (args: a tuple, or one value) (template_format.c). */
tv tmpl__percent_format(tmpl_render_state *r, tv fmt, tv args);

/* Applies filter name to v. An unknown filter fails the render. */
tv tmpl__apply_filter(tmpl_render_state *r, const char *name, size_t len, tv v, const tmpl_args *a);
bool tmpl__apply_test(tmpl_render_state *r, const char *name, size_t len, tv v, const tmpl_args *a);
/* The method name of v's type bound to v, or undefined when the type has none. */
tv tmpl__bind_method(tmpl_render_state *r, tv v, const char *name, size_t len);
/* The global functions (range, namespace, dict, raise_exception, strftime_now, ...). */
tv tmpl__global_func(const char *name, size_t len);

#endif

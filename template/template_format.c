/* template_format.c: Python's two string formattings: printf-style fmt % args (also
 * jinja2's format filter) and the format-spec mini-language of str.format fields
 * ("{:>8.2f}"), for strings, integers and floats.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "template/template_internal.h"

/* One conversion of Python's %-formatting: %[(key)][flags][width][.precision]type. */
static void percent_one(tmpl_render_state *r, tmpl_buf *b, const char *flags, int width, int precision, char type,
                        tv v) {
    char spec[32];
    int n = snprintf(spec, sizeof(spec), "%%%s", flags);
    if (width >= 0) n += snprintf(spec + n, sizeof(spec) - (size_t)n, "%d", width);
    if (precision >= 0) n += snprintf(spec + n, sizeof(spec) - (size_t)n, ".%d", precision);
    switch (type) {
    case 's':
    case 'r':
    case 'a': {
        tmpl_buf tmp;
        tmpl__buf_init(&tmp, &r->arena, 32);
        if (type == 's')
            tmpl__append_str(&tmp, v);
        else
            tmpl__append_repr(&tmp, v);
        if (width < 0 && precision < 0) { /* the common case, exact for any bytes */
            tmpl__buf_put(b, tmp.data, tmp.len);
            return;
        }
        snprintf(spec + n, sizeof(spec) - (size_t)n, "s");
        tmpl__buf_printf(b, spec, tmp.data);
        return;
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o':
    case 'c': {
        int64_t i;
        if (v.kind == TV_INT || v.kind == TV_BOOL)
            i = v.kind == TV_INT ? v.i : v.b;
        else if (v.kind == TV_FLOAT && type != 'x' && type != 'X' && type != 'o' && type != 'c' && isfinite(v.f))
            i = (int64_t)v.f;
        else
            tmpl__fail(r, SP_ERR_FORMAT, "%%%c format: a real number is required, not %s", type, tmpl__type_name(v));
        if (type == 'c') {
            if (i < 0 || i > 0x10FFFF) tmpl__fail(r, SP_ERR_FORMAT, "%%c arg not in range(0x110000)");
            uint32_t cp = (uint32_t)i;
            if (cp < 0x80) {
                tmpl__buf_putc(b, (char)cp);
            } else if (cp < 0x800) {
                tmpl__buf_printf(b, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                tmpl__buf_printf(b, "%c%c%c", 0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F));
            } else {
                tmpl__buf_printf(b, "%c%c%c%c", 0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F),
                                 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F));
            }
            return;
        }
        snprintf(spec + n, sizeof(spec) - (size_t)n, "ll%c", type == 'u' || type == 'i' ? 'd' : type);
        tmpl__buf_printf(b, spec, (long long)i);
        return;
    }
    default: { /* e E f F g G */
        double f;
        if (v.kind == TV_FLOAT)
            f = v.f;
        else if (v.kind == TV_INT || v.kind == TV_BOOL)
            f = (double)(v.kind == TV_INT ? v.i : v.b);
        else
            tmpl__fail(r, SP_ERR_FORMAT, "must be real number, not %s", tmpl__type_name(v));
        snprintf(spec + n, sizeof(spec) - (size_t)n, "%c", type);
        tmpl__buf_printf(b, spec, f);
    }
    }
}

tv tmpl__percent_format(tmpl_render_state *r, tv fmt, tv args) {
    /* a tuple gives the arguments in order; a dict serves %(key)s; anything else is one */
    bool is_tuple = args.kind == TV_LIST && args.list->is_tuple && !args.list->iter_name;
    size_t next = 0, n_args = is_tuple ? args.list->n : 1;
    tmpl_buf b;
    tmpl__buf_init(&b, &r->arena, fmt.len + 32);
    for (size_t i = 0; i < fmt.len; i++) {
        if (fmt.s[i] != '%') {
            tmpl__buf_putc(&b, fmt.s[i]);
            continue;
        }
        if (++i == fmt.len) tmpl__fail(r, SP_ERR_FORMAT, "incomplete format");
        tv v;
        bool keyed = false;
        if (fmt.s[i] == '(') {
            const char *close = memchr(fmt.s + i, ')', fmt.len - i);
            if (!close || args.kind != TV_DICT) tmpl__fail(r, SP_ERR_FORMAT, "format requires a mapping");
            tv *found = tmpl__dict_get(args.dict, fmt.s + i + 1, (size_t)(close - fmt.s) - i - 1);
            if (!found)
                tmpl__fail(r, SP_ERR_FORMAT, "format key '%.*s' not found", (int)(close - fmt.s - (long)i - 1),
                           fmt.s + i + 1);
            v = *found;
            keyed = true;
            i = (size_t)(close - fmt.s) + 1;
        }
        char flags[8];
        size_t nf = 0;
        while (i < fmt.len && strchr("-+ 0#", fmt.s[i]) && fmt.s[i] && nf < sizeof(flags) - 1) flags[nf++] = fmt.s[i++];
        flags[nf] = '\0';
        int width = -1, precision = -1;
        for (; i < fmt.len && isdigit((unsigned char)fmt.s[i]); i++)
            width = width > 100000 ? width : (width < 0 ? 0 : width) * 10 + (fmt.s[i] - '0');
        if (i < fmt.len && fmt.s[i] == '.') {
            precision = 0;
            for (i++; i < fmt.len && isdigit((unsigned char)fmt.s[i]); i++)
                precision = precision > 100000 ? precision : precision * 10 + (fmt.s[i] - '0');
        }
        if (width > 1000 || precision > 1000) tmpl__fail(r, SP_ERR_RANGE, "format: width or precision too large");
        if (i == fmt.len) tmpl__fail(r, SP_ERR_FORMAT, "incomplete format");
        char type = fmt.s[i];
        if (type == '%') {
            tmpl__buf_putc(&b, '%');
            continue;
        }
        if (!strchr("sradiuxXocfFeEgG", type) || type == '\0')
            tmpl__fail(r, SP_ERR_FORMAT, "unsupported format character '%c' (0x%x)", type, (unsigned char)type);
        if (!keyed) {
            if (next >= n_args || args.kind == TV_DICT)
                tmpl__fail(r, SP_ERR_FORMAT, "not enough arguments for format string");
            v = is_tuple ? args.list->items[next] : args;
            next++;
        }
        percent_one(r, &b, flags, width, precision, type, v);
    }
    if (args.kind != TV_DICT && next < n_args)
        tmpl__fail(r, SP_ERR_FORMAT, "not all arguments converted during string formatting");
    return tmpl__buf_value(&b);
}

/* Python's format(v, spec), the mini-language of str.format fields:
 * [[fill]align][sign][#][0][width][,|_][.precision][type]. Widths count code points. */
void tmpl__format_spec(tmpl_render_state *r, tmpl_buf *b, tv v, const char *spec, size_t n) {
    size_t i = 0;
    const char *fill = " ";
    size_t fill_len = 1;
    char align = 0, sign = '-', grouping = 0, type = 0;
    bool alt = false;
    int width = -1, precision = -1;
    /* fill: one code point before an align character */
    size_t cp_len = n ? (((unsigned char)spec[0] < 0xC0)   ? 1
                         : ((unsigned char)spec[0] < 0xE0) ? 2
                         : ((unsigned char)spec[0] < 0xF0) ? 3
                                                           : 4)
                      : 0;
    if (cp_len && cp_len < n && strchr("<>^=", spec[cp_len]) && spec[cp_len]) {
        fill = spec;
        fill_len = cp_len;
        align = spec[cp_len];
        i = cp_len + 1;
    } else if (i < n && strchr("<>^=", spec[i]) && spec[i]) {
        align = spec[i++];
    }
    if (i < n && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
    if (i < n && spec[i] == '#') alt = true, i++;
    if (i < n && spec[i] == '0') {
        if (!align) {
            fill = "0";
            align = '=';
        }
        i++;
    }
    for (; i < n && isdigit((unsigned char)spec[i]); i++)
        width = width > 100000 ? width : (width < 0 ? 0 : width) * 10 + (spec[i] - '0');
    if (i < n && (spec[i] == ',' || spec[i] == '_')) grouping = spec[i++];
    if (i < n && spec[i] == '.') {
        precision = 0;
        for (i++; i < n && isdigit((unsigned char)spec[i]); i++)
            precision = precision > 100000 ? precision : precision * 10 + (spec[i] - '0');
    }
    if (i < n) type = spec[i++];
    if (i != n || width > 1000 || precision > 1000)
        tmpl__fail(r, SP_ERR_FORMAT, "invalid format specifier '%.*s'", (int)n, spec);

    tmpl_buf body; /* the formatted value before padding; sign separated for '=' */
    tmpl__buf_init(&body, &r->arena, 32);
    const char *sign_str = "";
    bool numeric = v.kind == TV_INT || v.kind == TV_BOOL || v.kind == TV_FLOAT;
    if (v.kind == TV_STR || (!numeric && (type == 0 || type == 's'))) {
        if (type && type != 's') tmpl__fail(r, SP_ERR_FORMAT, "unknown format code '%c' for a string", type);
        tv str = tmpl__to_str(r, v);
        tv chars = tmpl__to_list(r, str);
        size_t keep = precision >= 0 && (size_t)precision < chars.list->n ? (size_t)precision : chars.list->n;
        for (size_t k = 0; k < keep; k++) tmpl__buf_put(&body, chars.list->items[k].s, chars.list->items[k].len);
        if (!align) align = '<';
    } else if (!numeric) {
        tmpl__fail(r, SP_ERR_FORMAT, "unsupported format string passed to %s.__format__", tmpl__type_name(v));
    } else {
        bool is_int = v.kind != TV_FLOAT && (type == 0 || strchr("dboxXcn", type));
        char digits[1400];  /* %f of 1e308 with precision 1000 */
        char grouped[1900]; /* digits with separators */
        const char *text = digits;
        if (is_int) {
            int64_t x = v.kind == TV_INT ? v.i : v.b;
            uint64_t mag = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
            if (x < 0) sign_str = "-";
            int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
            char tmp[80];
            size_t k = 0;
            do {
                tmp[k++] = "0123456789abcdef"[mag % (uint64_t)base];
                mag /= (uint64_t)base;
            } while (mag);
            size_t d = 0;
            if (alt && base != 10) {
                digits[d++] = '0';
                digits[d++] = base == 2 ? 'b' : base == 8 ? 'o' : 'x';
            }
            size_t group = grouping ? (base == 10 ? 3 : 4) : 0;
            for (size_t j = 0; j < k; j++) {
                if (group && j && (k - j) % group == 0) digits[d++] = grouping;
                digits[d++] = type == 'X' ? (char)toupper((unsigned char)tmp[k - 1 - j]) : tmp[k - 1 - j];
            }
            digits[d] = '\0';
        } else {
            double x = v.kind == TV_FLOAT ? v.f : (double)(v.kind == TV_INT ? v.i : v.b);
            if (signbit(x) && !isnan(x)) sign_str = "-", x = -x;
            char t = type ? type : 'g';
            int prec = precision >= 0 ? precision : 6;
            if (t == '%') {
                snprintf(digits, sizeof(digits), "%.*f%%", prec, x * 100);
            } else if (!type && precision < 0) {
                tmpl_buf rb;
                tmpl__buf_init(&rb, &r->arena, 32);
                tmpl__append_float(&rb, x);
                snprintf(digits, sizeof(digits), "%s", rb.data);
            } else {
                char f[16];
                snprintf(f, sizeof(f), "%%%s.%d%c", alt ? "#" : "", prec, t == 'n' ? 'g' : t);
                snprintf(digits, sizeof(digits), f, x);
                if (!type && !strpbrk(digits, ".einf")) strcat(digits, ".0"); /* format(1.0, '.3') is '1.0' */
            }
            if (grouping) { /* separators in the integer part */
                char *dot = strpbrk(digits, ".eE%");
                size_t int_len = dot ? (size_t)(dot - digits) : strlen(digits);
                size_t d = 0;
                for (size_t j = 0; j < int_len; j++) {
                    if (j && (int_len - j) % 3 == 0) grouped[d++] = grouping;
                    grouped[d++] = digits[j];
                }
                snprintf(grouped + d, sizeof(grouped) - d, "%s", digits + int_len);
                text = grouped;
            }
        }
        if (!*sign_str) sign_str = sign == '+' ? "+" : sign == ' ' ? " " : "";
        if (!align) align = '>';
        if (align != '=') tmpl__buf_put(&body, sign_str, strlen(sign_str));
        tmpl__buf_put(&body, text, strlen(text));
    }
    size_t shown = tmpl__to_list(r, tmpl__buf_value(&body)).list->n + (align == '=' ? strlen(sign_str) : 0);
    size_t pad = width > 0 && (size_t)width > shown ? (size_t)width - shown : 0;
    size_t left = align == '<' ? 0 : align == '^' ? pad / 2 : pad;
    if (align == '=') tmpl__buf_put(b, sign_str, strlen(sign_str));
    for (size_t k = 0; k < left; k++) tmpl__buf_put(b, fill, fill_len);
    tmpl__buf_put(b, body.data, body.len);
    for (size_t k = left; k < pad; k++) tmpl__buf_put(b, fill, fill_len);
}

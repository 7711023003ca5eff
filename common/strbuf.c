/* strbuf.c: see strbuf.h. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for `more` bytes plus the NUL; doubles the capacity. */
static bool strbuf_reserve(strbuf *b, size_t more) {
    if (b->failed) return false;
    if (b->len + more < b->cap) return true;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap <= b->len + more) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
        b->failed = true;
        return false;
    }
    b->p = q;
    b->cap = cap;
    return true;
}

void strbuf_append(strbuf *b, const char *s, size_t n) {
    if (!strbuf_reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void strbuf_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if (!strbuf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *strbuf_take(strbuf *b) {
    char *text = b->p;
    if (b->failed) {
        free(text);
        text = NULL;
    } else if (!text) {
        text = strdup("");
    }
    *b = (strbuf){0};
    return text;
}

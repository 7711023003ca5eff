/* strbuf.c: see strbuf.h. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

/* Room for `more` bytes plus the NUL; doubles the capacity. */
static bool strbuf_reserve(strbuf *b, size_t more) {
    if (b->failed) return false;
    if (more >= SIZE_MAX - b->len || !sp_grow((void **)&b->p, &b->cap, b->len + more + 1, 1)) {
        b->failed = true;
        return false;
    }
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

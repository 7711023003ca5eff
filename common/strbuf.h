/* strbuf.h: a growable NUL-terminated text buffer for building one response or log
 * line. An allocation failure is sticky (b->failed): later appends do nothing, and the
 * caller checks once at the end. Not thread-safe; one owner. */
#ifndef SP_COMMON_STRBUF_H
#define SP_COMMON_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct strbuf {
    char *p; /* NULL until the first append; owned (free() it, or strbuf_take) */
    size_t len, cap;
    bool failed;
} strbuf;

void strbuf_append(strbuf *b, const char *s, size_t n);
void strbuf_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text (caller owns it; free()), or NULL after a failure (the buffer is freed). An
 * empty buffer gives "". The buffer is empty afterwards. */
char *strbuf_take(strbuf *b);

#endif

/* sse.c: Server-Sent Events framing, fed incrementally.
 *
 * curl hands the body to the write callback in pieces of any size, so a line (and an
 * event) may be split anywhere: inside a multi-byte character, inside "data:", or between
 * the "\r" and "\n" of one line end. The parser keeps the unfinished line and the data
 * lines of the unfinished event, and calls back once per complete event (a blank line)
 * with its data lines joined by "\n", as the SSE specification says. Comments (":") and
 * the event, id and retry fields are ignored: the OpenAI streams carry everything in data.
 * Each request owns its parser; nothing here is shared between threads.
 */
#include <stdlib.h>
#include <string.h>

#include "bench/loadgen/loadgen.h"

void lg_sse_init(lg_sse *p) {
    *p = (lg_sse){0};
}

void lg_sse_free(lg_sse *p) {
    free(p->line);
    free(p->data);
    *p = (lg_sse){0};
}

/* Makes room for len + extra bytes and a NUL in *buf. */
static int sse_reserve(char **buf, size_t *cap, size_t len, size_t extra) {
    if (len + extra + 1 <= *cap) return 0;
    size_t want = *cap ? *cap : 256;
    while (want < len + extra + 1) want *= 2;
    char *grown = realloc(*buf, want);
    if (!grown) return -1;
    *buf = grown;
    *cap = want;
    return 0;
}

static void sse_dispatch(lg_sse *p, lg_sse_event_fn *fn, void *ctx) {
    if (p->has_data) {
        p->data[p->data_len] = '\0';
        fn(ctx, p->data, p->data_len);
    }
    p->data_len = 0;
    p->has_data = false;
}

/* One complete line (without its line end). */
static int sse_line(lg_sse *p, const char *line, size_t len, lg_sse_event_fn *fn, void *ctx) {
    if (len == 0) {
        sse_dispatch(p, fn, ctx);
        return 0;
    }
    const char *colon = memchr(line, ':', len);
    size_t name_len = colon ? (size_t)(colon - line) : len;
    if (name_len != 4 || memcmp(line, "data", 4) != 0) return 0; /* comment or another field */
    const char *value = colon ? colon + 1 : line + len;
    size_t value_len = (size_t)(line + len - value);
    if (value_len > 0 && value[0] == ' ') value++, value_len--; /* one optional space */
    if (sse_reserve(&p->data, &p->data_cap, p->data_len, value_len + 1) != 0) return -1;
    if (p->has_data) p->data[p->data_len++] = '\n';
    memcpy(p->data + p->data_len, value, value_len);
    p->data_len += value_len;
    p->data[p->data_len] = '\0';
    p->has_data = true;
    return 0;
}

int lg_sse_feed(lg_sse *p, const char *buf, size_t n, lg_sse_event_fn *fn, void *ctx) {
    if (p->overflowed) return -1;
    size_t i = 0;
    while (i < n) {
        if (p->after_cr && buf[i] == '\n') i++; /* the "\n" of a "\r\n" split across pieces */
        p->after_cr = false;
        /* the next line end in this piece */
        size_t end = i;
        while (end < n && buf[end] != '\n' && buf[end] != '\r') end++;
        if (end == n) { /* unfinished: keep it for the next piece */
            if (p->line_len + (n - i) > LG_SSE_MAX_LINE ||
                sse_reserve(&p->line, &p->line_cap, p->line_len, n - i) != 0) {
                p->overflowed = true;
                return -1;
            }
            memcpy(p->line + p->line_len, buf + i, n - i);
            p->line_len += n - i;
            return 0;
        }
        int rc;
        if (p->line_len > 0) { /* the line began in an earlier piece */
            if (sse_reserve(&p->line, &p->line_cap, p->line_len, end - i) != 0) return -1;
            memcpy(p->line + p->line_len, buf + i, end - i);
            rc = sse_line(p, p->line, p->line_len + (end - i), fn, ctx);
            p->line_len = 0;
        } else {
            rc = sse_line(p, buf + i, end - i, fn, ctx);
        }
        if (rc != 0) return -1;
        if (buf[end] == '\r') {
            if (end + 1 < n && buf[end + 1] == '\n')
                end++;
            else if (end + 1 == n)
                p->after_cr = true;
        }
        i = end + 1;
    }
    return 0;
}

void lg_sse_end(lg_sse *p, lg_sse_event_fn *fn, void *ctx) {
    if (p->overflowed) return;
    if (p->line_len > 0) {
        char *line = p->line;
        size_t len = p->line_len;
        p->line_len = 0;
        if (sse_line(p, line, len, fn, ctx) != 0) return;
    }
    sse_dispatch(p, fn, ctx);
}

/* status.c: status names and the thread-local error message. */
#include "common/status.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char error_message[1024];

const char *sp_status_str(sp_status st) {
    switch (st) {
#define SP_STATUS_CASE(name, value, text) \
    case name: return text;
        SP_STATUS_MAP(SP_STATUS_CASE)
#undef SP_STATUS_CASE
    }
    return "unknown status";
}

sp_status sp_fail(sp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return st;
}

sp_status sp_fail_prefix(sp_status st, const char *fmt, ...) {
    char prefix[512];
    char old[sizeof error_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_message, sizeof old);
    const char *rest = old[0] ? old : sp_status_str(st);
    /* "<prefix>: <rest>", cut to fit */
    size_t cap = sizeof error_message - 1, len = 0;
    for (const char *parts[] = {prefix, ": ", rest}, **p = parts; p < parts + 3; p++)
        for (const char *c = *p; *c && len < cap; c++) error_message[len++] = *c;
    error_message[len] = '\0';
    return st;
}

const char *sp_last_error(void) {
    return error_message[0] ? error_message : "no error message recorded";
}

void sp_error_clear(void) {
    error_message[0] = '\0';
}

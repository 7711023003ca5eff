/* log.c: leveled stderr logging. */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>

static sp_log_level log_level = SP_LOG_INFO;

void sp_log_set_level(sp_log_level level) {
    log_level = level;
}

void sp_log(sp_log_level level, const char *fmt, ...) {
    static const char *const names[] = {"debug", "info", "warn", "error"};
    if (level < log_level) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "spindle: %s: %s\n", names[level], line);
}

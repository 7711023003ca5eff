/* status.h: the one status type of the whole program, and its error messages.
 *
 * Every fallible function returns sp_status: 0 is success, negatives are errors.
 * The table below is the single source of both the codes and their names.
 * A failing function records a human message naming the thing and what is wrong
 * with sp_fail(); the caller that decides what to do reads it with sp_last_error().
 * The message is thread-local, so threads never see each other's errors.
 */
#ifndef SP_STATUS_H
#define SP_STATUS_H

#include <stdarg.h>

/* X(name, value, text) */
#define SP_STATUS_MAP(X)                          \
    X(SP_OK, 0, "ok")                             \
    X(SP_ERR_NOMEM, -1, "out of memory")          \
    X(SP_ERR_IO, -2, "input/output error")        \
    X(SP_ERR_FORMAT, -3, "malformed file")        \
    X(SP_ERR_UNSUPPORTED, -4, "unsupported")      \
    X(SP_ERR_INVALID_ARG, -5, "invalid argument") \
    X(SP_ERR_NOT_FOUND, -6, "not found")          \
    X(SP_ERR_RANGE, -7, "out of range")           \
    X(SP_ERR_DEVICE, -8, "device error")          \
    X(SP_ERR_FULL, -9, "capacity exhausted")      \
    X(SP_ERR_CANCELLED, -10, "cancelled")         \
    X(SP_ERR_INTERNAL, -11, "internal error")     \
    X(SP_ERR_UNAVAILABLE, -12, "unavailable")     \
    X(SP_ERR_TIMEOUT, -13, "timed out")

typedef enum sp_status {
#define SP_STATUS_ENUM(name, value, text) name = value,
    SP_STATUS_MAP(SP_STATUS_ENUM)
#undef SP_STATUS_ENUM
} sp_status;

/* Short fixed text for a status ("malformed file"). Never NULL. */
const char *sp_status_str(sp_status st);

/* Records a formatted message for the current thread and returns st, so a
 * failing path reads `return sp_fail(SP_ERR_FORMAT, "%s: bad magic", path);`. */
sp_status sp_fail(sp_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes the current thread's message with more context ("loading model: ...")
 * and returns st unchanged. */
sp_status sp_fail_prefix(sp_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The last message recorded on this thread (borrowed until the next sp_fail on
 * this thread); the status text when none was recorded. */
const char *sp_last_error(void);

/* Clears the current thread's message. */
void sp_error_clear(void);

#endif

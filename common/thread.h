/* thread.h: starting a worker thread the way every spindle thread starts: with the
 * shutdown and reload signals (SIGINT, SIGTERM, SIGHUP) blocked, so that only the main
 * thread ever handles them, and with a name that shows in top, gdb and perf. */
#ifndef SP_THREAD_H
#define SP_THREAD_H

#include <pthread.h>

#include "common/status.h"

/* Starts thread_main(arg) in a new thread, stored in *out. The new thread inherits a
 * signal mask with SIGINT, SIGTERM and SIGHUP blocked (the caller's mask is unchanged
 * afterwards); name (at most 15 bytes, longer is cut) names it. On failure nothing
 * was started and the message names the thread: SP_ERR_NOMEM. */
sp_status sp_thread_start(pthread_t *out, const char *name, void *(*thread_main)(void *), void *arg);

#endif

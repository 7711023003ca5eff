/* thread.h: starting a worker thread the way every spindle thread starts: with the
 * shutdown and reload signals (SIGINT, SIGTERM, SIGHUP) blocked, so that only the main
 * thread ever handles them, and with a name that shows in top, gdb and perf; and
 * stopping workers the one way they stop (a flag under their lock, a wake, a join). */
#ifndef SP_THREAD_H
#define SP_THREAD_H

#include <pthread.h>
#include <stdbool.h>

#include "common/status.h"

/* Starts thread_main(arg) in a new thread, stored in *out. The new thread inherits a
 * signal mask with SIGINT, SIGTERM and SIGHUP blocked (the caller's mask is unchanged
 * afterwards); name (at most 15 bytes, longer is cut) names it. On failure nothing
 * was started and the message names the thread: SP_ERR_NOMEM. */
sp_status sp_thread_start(pthread_t *out, const char *name, void *(*thread_main)(void *), void *arg);

/* Timed waits on CLOCK_MONOTONIC, so a step of the wall clock (NTP, a VM resumed) never
 * stretches or cuts one. sp_cond_init_monotonic makes a condition for them (pthread's
 * return code); sp_cond_wait_for waits on it, holding mutex, for at most seconds (<= 0:
 * returns at once) and returns pthread_cond_timedwait's code (0 or ETIMEDOUT). */
int sp_cond_init_monotonic(pthread_cond_t *cond);
int sp_cond_wait_for(pthread_cond_t *cond, pthread_mutex_t *mutex, double seconds);

/* Stops the worker threads threads[0..n_threads) that wait on wake, holding lock, until *stop
 * is set: sets *stop under lock, wakes every thread waiting on wake (one worker or a
 * pool alike), and joins each. Called by the thread that started them, once; n_threads
 * 0 (no worker started) only sets the flag. lock and wake stay the caller's to destroy. */
void sp_thread_stop(pthread_mutex_t *lock, pthread_cond_t *wake, bool *stop, const pthread_t *threads, int n_threads);

#endif

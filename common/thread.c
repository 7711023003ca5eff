/* thread.c: see thread.h. */
#include "common/thread.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int sp_cond_init_monotonic(pthread_cond_t *cond) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

int sp_cond_wait_for(pthread_cond_t *cond, pthread_mutex_t *mutex, double seconds) {
    if (!(seconds > 0)) return ETIMEDOUT;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long ns = (long long)until.tv_nsec + (long long)(seconds * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    return pthread_cond_timedwait(cond, mutex, &until);
}

sp_status sp_thread_start(pthread_t *out, const char *name, void *(*thread_main)(void *), void *arg) {
    /* the thread inherits the mask: block the signals before it exists */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = pthread_create(out, NULL, thread_main, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) return sp_fail(SP_ERR_NOMEM, "cannot start the thread '%s' (%s)", name, strerror(rc));
    char short_name[16]; /* the kernel's limit, NUL included */
    snprintf(short_name, sizeof short_name, "%s", name);
    pthread_setname_np(*out, short_name);
    return SP_OK;
}

void sp_thread_stop(pthread_mutex_t *lock, pthread_cond_t *wake, bool *stop, const pthread_t *threads, int n_threads) {
    pthread_mutex_lock(lock);
    *stop = true;
    pthread_cond_broadcast(wake);
    pthread_mutex_unlock(lock);
    for (int i = 0; i < n_threads; i++) pthread_join(threads[i], NULL);
}

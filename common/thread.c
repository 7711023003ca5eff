/* thread.c: see thread.h. */
#include "common/thread.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

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

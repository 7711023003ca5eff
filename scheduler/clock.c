/* clock.c: the scheduler's clock: sched_now (monotonic seconds, the time base of every
 * timing, deadline and cost in the scheduler and its clients) and the thread's heartbeat.
 *
 * DESIGN (threads). Any thread reads the clock and the heartbeat; only the scheduler
 * thread (sched_create's thread before it starts) beats it. The heartbeat is an atomic.
 */
#include <time.h>

#include "scheduler/sched_internal.h"

double sched_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void sched__heartbeat(sched *s) {
    atomic_store_explicit(&s->meter.heartbeat_ns, (int64_t)(sched_now() * 1e9), memory_order_relaxed);
}

double sched_seconds_since_heartbeat(const sched *s) {
    int64_t ns = atomic_load_explicit(&s->meter.heartbeat_ns, memory_order_relaxed);
    return sched_now() - (double)ns * 1e-9;
}

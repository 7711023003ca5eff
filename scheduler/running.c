/* running.c: the scheduler thread's running list: the sequences admitted to run (they
 * own KV blocks), in admission order, and its count in the stats.
 *
 * DESIGN (threads). Scheduler thread; stats.running is an atomic that any thread reads.
 */
#include <string.h>

#include "common/assert.h"
#include "scheduler/sched_internal.h"

void sched__running_remove(sched *s, int i) {
    SP_ASSERT(i >= 0 && i < s->n_running);
    memmove(s->running + i, s->running + i + 1, sizeof *s->running * (size_t)(s->n_running - i - 1));
    s->n_running--;
    atomic_store_explicit(&s->meter.stats.running, s->n_running, memory_order_relaxed);
}

/* retry_after.c: the Retry-After a 429 (queue full) carries: about how long the queue
 * takes to drain at the rate requests have been ending, jittered by up to half either
 * way so that clients refused together do not all come back in the same second.
 *
 * The drain rate is requests ended (finished, cancelled or failed) per second, sampled at
 * most once a second when a 429 is sent and smoothed (new = 0.7 old + 0.3 sample); a gap
 * of over 10 s since the last sample starts afresh (an idle spell says nothing of the
 * rate now). Before the first sample the wait is 1 second; with nothing ending, the most.
 *
 * DESIGN (threads): any HTTP thread may call srv__retry_after_s; the estimate is
 * process-wide (one server per process, as the metrics' counters) under its own mutex,
 * held for a few arithmetic operations.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "server/http/http_internal.h"

enum { RETRY_MIN_S = 1, RETRY_MAX_S = 60, RETRY_STALE_S = 10 };

static struct {
    pthread_mutex_t lock;
    double sampled_at; /* sched_now() of the last sample; 0: none yet */
    int64_t ended;     /* requests ended at that sample */
    double rate;       /* smoothed requests ended per second; < 0: unknown */
} drain = {.lock = PTHREAD_MUTEX_INITIALIZER, .rate = -1};

static _Atomic uint64_t jitter_counter;

/* A uniform number in [0, 1) that differs from call to call (splitmix64 of a counter and
 * the clock): the jitter needs spread, not secrecy. */
static double jitter_uniform(void) {
    uint64_t z = atomic_fetch_add(&jitter_counter, 0x9E3779B97F4A7C15ULL) + (uint64_t)(sched_now() * 1e9);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0; /* 2^53 */
}

/* The wait for `queued` requests at `rate` ended per second (< 0: unknown, 1 s; 0:
 * nothing drains, the most), scaled by 0.5 + u for u in [0, 1), in whole seconds within
 * RETRY_MIN_S..RETRY_MAX_S. The wait is capped at RETRY_MAX_S / 1.5 before the jitter, so
 * long waits spread over the whole range instead of piling up at the cap. */
static int retry_after_seconds(double queued, double rate, double u) {
    const double longest = RETRY_MAX_S / 1.5;
    double wait = rate < 0 ? RETRY_MIN_S : rate == 0 ? longest : queued / rate;
    wait = fmin(fmax(wait, RETRY_MIN_S), longest);
    return (int)fmin(fmax(ceil(wait * (0.5 + u)), RETRY_MIN_S), RETRY_MAX_S);
}

int srv__retry_after_s(const sched *s) {
    sched_stats st;
    sched_get_stats(s, &st);
    const int64_t ended = st.finished + st.cancelled + st.errors;
    const double now = sched_now();
    pthread_mutex_lock(&drain.lock);
    if (drain.sampled_at == 0 || now - drain.sampled_at > RETRY_STALE_S) {
        drain.sampled_at = now; /* a new baseline */
        drain.ended = ended;
        drain.rate = -1;
    } else if (now - drain.sampled_at >= 1.0) {
        const double sample = (double)(ended - drain.ended) / (now - drain.sampled_at);
        drain.rate = drain.rate >= 0 ? 0.7 * drain.rate + 0.3 * sample : sample;
        drain.sampled_at = now;
        drain.ended = ended;
    }
    const double rate = drain.rate;
    pthread_mutex_unlock(&drain.lock);
    return retry_after_seconds((double)st.queued, rate, jitter_uniform());
}

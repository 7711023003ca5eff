/* random.c: 64 random bits for seeds and ids (srv_random_u64): getrandom, or a
 * clock-and-counter mix when the kernel has no entropy yet. A leaf of server/api. Any
 * thread.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <sys/random.h>
#include <time.h>

#include "server/api/api.h"

uint64_t srv_random_u64(void) {
    uint64_t x;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x) return x;
    /* no entropy yet (early boot): distinct is all a seed or an id needs */
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
        atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

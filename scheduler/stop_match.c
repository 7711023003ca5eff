/* stop_match.c: stop strings matched across token boundaries.
 *
 * Generated text is split in two: committed (final, handed to the client) and held
 * (its tail, which might still turn out to be the beginning of a stop string). Each new
 * piece of text is appended to the held text; then
 *   - if any stop string occurs, everything before the earliest occurrence is
 *     committed and the rest is dropped (the request stops);
 *   - otherwise the longest suffix that is a proper prefix of some stop string stays
 *     held and the rest is committed. Text that cannot start a stop string is never
 *     held, so streaming is not delayed without cause.
 * The decoder (tok_decoder) only emits whole UTF-8 characters and stop strings are
 * valid UTF-8, so every cut falls on a character boundary; nothing extra is held for
 * UTF-8.
 *
 * DESIGN (threads). A sched_stop belongs to one sequence on the scheduler thread.
 */
#include <string.h>

#include "common/assert.h"
#include "scheduler/sched_internal.h"

/* Length of the longest suffix of buf (n) that is a proper prefix of a stop string. */
static size_t stop_holdback(const char *buf, size_t n, const char *const *stops, const size_t *stop_lens, int n_stops) {
    size_t best = 0;
    for (int i = 0; i < n_stops; i++) {
        size_t longest = stop_lens[i] - 1 < n ? stop_lens[i] - 1 : n; /* proper prefix */
        for (size_t k = longest; k > best; k--) {
            const char *tail = buf + n - k;
            if (tail[0] == stops[i][0] && memcmp(tail, stops[i], k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

bool sched__stop_feed(sched_stop *st, const char *const *stops, const size_t *stop_lens, int n_stops, const char *text,
                      size_t n, char *work, size_t *n_commit) {
    memcpy(work, st->held, st->n_held);
    memcpy(work + st->n_held, text, n);
    size_t len = st->n_held + n;
    st->n_held = 0;

    /* the earliest occurrence of any stop string */
    size_t match = len;
    for (int i = 0; i < n_stops; i++) {
        const char *hit = memmem(work, len, stops[i], stop_lens[i]);
        if (hit && (size_t)(hit - work) < match) {
            match = (size_t)(hit - work);
            st->matched = i;
        }
    }
    if (match < len) {
        *n_commit = match;
        return true;
    }

    size_t hold = stop_holdback(work, len, stops, stop_lens, n_stops);
    SP_ASSERT(hold < SCHED_MAX_STOP_BYTES);
    memcpy(st->held, work + len - hold, hold);
    st->n_held = hold;
    *n_commit = len - hold;
    return false;
}

size_t sched__stop_flush(sched_stop *st, char *out) {
    size_t n = st->n_held;
    memcpy(out, st->held, n);
    st->n_held = 0;
    return n;
}

/* masks.c: the grammar masks of a step, computed while the device step runs.
 *
 * A constrained sequence's rows are drawn from the tokens its grammar allows: row j's
 * from the state after the j drafts before it. tick.c reserves each row's mask and
 * records a job per sequence (sched__masks_add), posts them (sched__masks_start) and
 * runs the step; the step calls sched__masks_wait once its layers are issued and before
 * it draws the first row (model_sample_hook). On a GPU the masks are computed while the
 * GPU runs the layers; on the CPU while the pool's other threads run them. A cached
 * state's mask costs microseconds, a new one's walk of the vocabulary trie a few hundred:
 * either way it leaves the step's critical path.
 *
 * BUDGET AND LATE MASKS. Every mask is computed within the grammar's budget
 * (gram_mask_run, grammar.h: BUDGET), so no mask runs for ever. And the step never waits
 * long on one sequence: the wait gives up SCHED_MASK_WAIT_MS after it began (doubled for
 * each step in a row one of its sequences was late, up to SCHED_MASK_WAIT_MAX_MS: a
 * cancelled walk caches nothing, so an honest mask of 10-40 ms gets the time to finish
 * once, and is cached after, while no step waits more than 40 ms), sets `cancel`,
 * which stops the worker's walk within a few thousand work units and skips the jobs it
 * has not begun, and then takes the hand-over as usual. A job not finished (cancelled, or
 * over its budget) has every row allowed, so the step draws as usual, and its request's
 * mask_outcome says so: tick.c drops its rows (the drawn tokens are not emitted; the fed
 * position is not counted as computed, so the next step feeds it again: the same token
 * at the same position, its K/V written again). A request whose mask was late (begun and
 * cancelled) SCHED_MASK_LATE_STEPS steps in a row, or over its budget, ends with
 * finish_reason "error" and a message; one whose job was never begun is only dropped.
 * Jobs of requests late before run last, so a hostile mask delays no honest one.
 *
 * DESIGN (threads). One worker thread, "spindle-masks", started at the first step with a
 * grammar row (a server that never constrains has none). Between start and wait the
 * worker owns the jobs, their masks and rows' `allowed`, and is the only caller of
 * gram_mask_run (grammar.h: one thread at a time per grammar); it reads the requests'
 * grammar states and tokens, which the scheduler thread leaves alone until the wait
 * returns (the forward pass touches neither). The hand-over both ways is the mutex; the
 * only thing that crosses outside it is `cancel` (an atomic the scheduler thread sets
 * during the wait and clears after the hand-over). Requests' mask_outcome and mask_late
 * are the scheduler thread's, copied from the jobs after the hand-over. Without the worker
 * (it could not start) the masks are computed inline at start, without a deadline.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/assert.h"
#include "common/thread.h"
#include "scheduler/sched_internal.h"

/* The allowed tokens of one sequence's rows (job->n_draft + 1 of them), within each
 * mask's budget and until cancel is seen; a row not finished leaves it and every row after
 * it allowing every token, and job->status says why. */
static void masks_compute(sched *s, sched_mask_job *job, const atomic_bool *cancel) {
    sched_request *r = job->r;
    gram_state *ahead = NULL;
    job->status = GRAM_MASK_OK;
    job->begun = !cancel || !atomic_load_explicit(cancel, memory_order_relaxed);
    if (!job->begun) job->status = GRAM_MASK_CANCELLED;
    for (int32_t j = 0; j <= job->n_draft; j++) {
        uint32_t *mask = job->masks + (size_t)j * s->grammar.mask_words;
        job->rows[j].allowed = mask;
        if (job->status != GRAM_MASK_OK) {
            memset(mask, 0xFF, s->grammar.mask_words * sizeof *mask);
            continue;
        }
        const gram_state *at = r->gram;
        if (j > 0) {
            bool ok = (ahead || gram_state_clone(r->gram, &ahead) == SP_OK) &&
                      gram_state_advance_token(ahead, s->grammar.vocab, r->tokens[r->n_tokens + j - 1]);
            /* out of memory: no token allowed, so the row cannot match its draft and the run stops there */
            if (!ok) {
                memset(mask, 0, s->grammar.mask_words * sizeof *mask);
                continue;
            }
            at = ahead;
        }
        job->status = gram_mask_run(r->params.grammar, s->grammar.vocab, at, mask, cancel);
        if (job->status != GRAM_MASK_OK) memset(mask, 0xFF, s->grammar.mask_words * sizeof *mask);
    }
    gram_state_destroy(ahead);
}

/* The jobs' outcomes into their requests (scheduler thread, after the hand-over). */
static void masks_outcomes(sched_masks *m) {
    for (int i = 0; i < m->n_jobs; i++) {
        sched_mask_job *job = &m->jobs[i];
        job->r->mask_outcome = (uint8_t)job->status;
        if (job->status == GRAM_MASK_OK)
            job->r->mask_late = 0;
        else if (job->begun)
            job->r->mask_late++;
    }
}

static void *masks_main(void *arg) {
    sched *s = arg;
    sched_masks *m = &s->grammar.masks;
    pthread_mutex_lock(&m->lock);
    for (;;) {
        while (!m->posted && !m->stop) pthread_cond_wait(&m->wake, &m->lock);
        if (m->stop) break;
        int n = m->n_jobs;
        pthread_mutex_unlock(&m->lock);
        for (int i = 0; i < n; i++) masks_compute(s, &m->jobs[i], &m->cancel);
        pthread_mutex_lock(&m->lock);
        m->posted = false;
        pthread_cond_signal(&m->done);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

sp_status sched__masks_init(sched *s, int max_jobs) {
    sched_masks *m = &s->grammar.masks;
    *m = (sched_masks){0};
    m->jobs = malloc(sizeof(sched_mask_job) * (size_t)max_jobs);
    if (!m->jobs) return sp_fail(SP_ERR_NOMEM, "scheduler: out of memory for the mask jobs");
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->wake, NULL);
    pthread_condattr_t monotonic; /* the wait's deadline is on the monotonic clock */
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&m->done, &monotonic);
    pthread_condattr_destroy(&monotonic);
    atomic_init(&m->cancel, false);
    m->initialized = true;
    return SP_OK;
}

void sched__masks_destroy(sched *s) {
    sched_masks *m = &s->grammar.masks;
    if (!m->initialized) return;
    if (m->started) sp_thread_stop(&m->lock, &m->wake, &m->stop, &m->thread, 1);
    pthread_cond_destroy(&m->done);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->lock);
    free(m->jobs);
    m->initialized = false;
}

void sched__masks_add(sched *s, sched_request *r, int32_t n_draft, dev_sample_row *rows, size_t *n_masks) {
    sched_masks *m = &s->grammar.masks;
    SP_ASSERT(*n_masks + (size_t)n_draft + 1 <= s->grammar.max_mask_rows);
    m->jobs[m->n_jobs++] = (sched_mask_job){
        .r = r, .n_draft = n_draft, .rows = rows, .masks = s->grammar.step_masks + *n_masks * s->grammar.mask_words};
    *n_masks += (size_t)n_draft + 1;
}

void sched__masks_start(sched *s) {
    sched_masks *m = &s->grammar.masks;
    if (m->n_jobs == 0) return;
    /* the jobs of requests late before go last: a slow mask delays only itself */
    for (int i = 0, last = m->n_jobs - 1; i < last;) {
        if (m->jobs[i].r->mask_late == 0) {
            i++;
            continue;
        }
        sched_mask_job t = m->jobs[i];
        memmove(&m->jobs[i], &m->jobs[i + 1], sizeof t * (size_t)(m->n_jobs - 1 - i));
        m->jobs[m->n_jobs - 1] = t;
        last--;
    }
    /* the wait's allowance: longer while a sequence keeps being late, never past the cap */
    int32_t late = 0;
    for (int i = 0; i < m->n_jobs; i++)
        if (m->jobs[i].r->mask_late > late) late = m->jobs[i].r->mask_late;
    m->wait_ms = SCHED_MASK_WAIT_MS;
    for (int32_t k = 0; k < late && m->wait_ms < SCHED_MASK_WAIT_MAX_MS; k++) m->wait_ms *= 2;
    if (m->wait_ms > SCHED_MASK_WAIT_MAX_MS) m->wait_ms = SCHED_MASK_WAIT_MAX_MS;
    if (!m->started && !m->failed) {
        m->started = sp_thread_start(&m->thread, "spindle-masks", masks_main, s) == SP_OK;
        m->failed = !m->started; /* then inline, from now on */
    }
    if (!m->started) {
        for (int i = 0; i < m->n_jobs; i++) masks_compute(s, &m->jobs[i], NULL);
        masks_outcomes(m);
        m->n_jobs = 0;
        return;
    }
    pthread_mutex_lock(&m->lock);
    m->posted = true;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->lock);
}

void sched__masks_wait(void *ctx) {
    sched *s = ctx;
    sched_masks *m = &s->grammar.masks;
    if (m->n_jobs == 0) return;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += (long)m->wait_ms * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&m->lock);
    while (m->posted)
        if (pthread_cond_timedwait(&m->done, &m->lock, &deadline) == ETIMEDOUT && m->posted) {
            /* late: the worker stops its walk and skips the rest, then hands over */
            atomic_store_explicit(&m->cancel, true, memory_order_relaxed);
            while (m->posted) pthread_cond_wait(&m->done, &m->lock);
        }
    pthread_mutex_unlock(&m->lock);
    atomic_store_explicit(&m->cancel, false, memory_order_relaxed);
    masks_outcomes(m);
    m->n_jobs = 0;
}

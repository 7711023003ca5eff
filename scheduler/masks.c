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
 * DESIGN (threads). One worker thread, "spindle-masks", started at the first step with a
 * grammar row (a server that never constrains has none). Between start and wait the
 * worker owns the jobs, their masks and rows' `allowed`, and is the only caller of
 * gram_mask (grammar.h: one thread at a time per grammar); it reads the requests'
 * grammar states and tokens, which the scheduler thread leaves alone until the wait
 * returns (the forward pass touches neither). The hand-over both ways is the mutex.
 * Without the worker (it could not start) the masks are computed inline at start.
 */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/thread.h"
#include "scheduler/sched_internal.h"

/* The allowed tokens of one sequence's rows (job->n_draft + 1 of them). */
static void masks_compute(sched *s, const sched_mask_job *job) {
    sched_request *r = job->r;
    gram_state *ahead = NULL;
    for (int32_t j = 0; j <= job->n_draft; j++) {
        uint32_t *mask = job->masks + (size_t)j * s->grammar.mask_words;
        const gram_state *at = r->gram;
        if (j > 0) {
            bool ok = (ahead || gram_state_clone(r->gram, &ahead) == SP_OK) &&
                      gram_state_advance_token(ahead, s->grammar.vocab, r->tokens[r->n_tokens + j - 1]);
            /* out of memory: no token allowed, so the row cannot match its draft and the run stops there */
            if (!ok) {
                memset(mask, 0, s->grammar.mask_words * sizeof *mask);
                job->rows[j].allowed = mask;
                continue;
            }
            at = ahead;
        }
        gram_mask(r->params.grammar, s->grammar.vocab, at, mask);
        job->rows[j].allowed = mask;
    }
    gram_state_destroy(ahead);
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
        for (int i = 0; i < n; i++) masks_compute(s, &m->jobs[i]);
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
    pthread_cond_init(&m->done, NULL);
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
    if (!m->started && !m->failed) {
        m->started = sp_thread_start(&m->thread, "spindle-masks", masks_main, s) == SP_OK;
        m->failed = !m->started; /* then inline, from now on */
    }
    if (!m->started) {
        for (int i = 0; i < m->n_jobs; i++) masks_compute(s, &m->jobs[i]);
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
    pthread_mutex_lock(&m->lock);
    while (m->posted) pthread_cond_wait(&m->done, &m->lock);
    pthread_mutex_unlock(&m->lock);
    m->n_jobs = 0;
}

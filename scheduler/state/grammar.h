/* state/grammar.h: constrained output's part of the scheduler (struct sched's `grammar`):
 * the vocabulary's trie, the step's mask rows and the worker that computes them off the
 * critical path (masks.c has the hand-over).
 *
 * DESIGN (threads). The scheduler thread adds and starts the jobs before a step and waits
 * for them inside it; the mask worker thread ("sched-masks", masks.c) writes the masks of
 * posted jobs. The fields marked "under lock" are guarded by masks.lock; the jobs' rows
 * and masks belong to the worker between the post and the done signal. vocab, mask_words
 * and max_mask_rows are immutable after sched_create.
 */
#ifndef SP_SCHED_STATE_GRAMMAR_H
#define SP_SCHED_STATE_GRAMMAR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "model/model.h"
#include "scheduler/sched.h"

/* One constrained sequence's rows of a step: n_draft + 1 rows and as many masks. */
typedef struct sched_mask_job {
    sched_request *r;
    int32_t n_draft;
    dev_sample_row *rows;    /* its rows in sample_rows: their `allowed` is set */
    uint32_t *masks;         /* (n_draft + 1, mask_words) in step_masks */
    gram_mask_status status; /* GRAM_MASK_OK, or why its masks are not the allowed tokens (all set then) */
    bool begun;              /* the worker began it (a cancelled job it never began is not its fault) */
} sched_mask_job;

/* The mask worker and the jobs of the step at hand (see masks.c for the hand-over). */
typedef struct sched_masks {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    sched_mask_job *jobs; /* (max_batch_size) */
    int n_jobs;
    bool posted;        /* under lock: jobs handed to the worker, not finished yet */
    bool stop;          /* under lock: the worker returns */
    bool started;       /* the worker runs */
    bool failed;        /* it could not start: masks are computed inline */
    bool initialized;   /* lock, conditions and jobs exist */
    atomic_bool cancel; /* set by the scheduler thread when its wait gives up: the worker stops */
    int wait_ms;        /* scheduler thread: how long this step's wait may last (masks.c, LATE) */
} sched_masks;

typedef struct sched_grammar_state {
    gram_vocab *vocab;                /* the vocabulary's trie for grammar masks */
    uint32_t *step_masks;             /* (max_mask_rows, mask_words) the allowed tokens of grammar rows of a step */
    sched_masks masks;                /* who computes them (masks.c) */
    size_t mask_words, max_mask_rows; /* words of one mask; rows of a step that may be masked */
} sched_grammar_state;

#endif

/* draw.c: the row sampler: how the token at a position of a sequence is drawn, as
 * dev_sample takes it (its sampling parameters, the tokens its penalties count, the
 * end-of-generation mask under min_tokens, logprobs and the position's generator). The
 * tick's decode rows, speculation's verify rows and the draft model's rows all draw
 * through it, so a draft row's draw is the one one-at-a-time decoding would make.
 *
 * DESIGN (threads). Scheduler thread; pure (reads the request, writes the row).
 */
#include "scheduler/sched_internal.h"

void sched__sample_row(const sched *s, const sched_request *r, int32_t ahead, dev_sample_row *row) {
    const sched_request_params *p = &r->params;
    int32_t n_generated = r->n_tokens + ahead - p->n_prompt;
    (void)s;
    *row = (dev_sample_row){
        .params = &p->sampling,
        .prompt = p->prompt,
        .n_prompt = p->n_prompt,
        .generated = r->tokens + p->n_prompt,
        .n_generated = n_generated,
        .mask_eog = n_generated < p->min_tokens && !p->ignore_eos,
        .top_logprobs = p->top_logprobs,
        .rng = sample_rng_at(p->sampling.seed, (int64_t)r->n_tokens + ahead),
    };
}

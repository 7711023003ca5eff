/* bench_draw.c: what one sampled row costs on the host (`make bench-spec` runs it).
 *
 * Speculative decoding samples every draft row, so the per-row draw must stay small
 * against a step. One row here is what the CPU backend's dev_sample does for a row of a
 * 49,152-token vocabulary (SmolLM2's): the counter-based generator of its position
 * (sample_rng_at), the penalties over 256 generated tokens, and the draw with
 * temperature 0.8, top-p 0.95; then the same with top-2 log-probabilities, and greedy.
 * Prints one tab-separated line per case: name, median microseconds per row, p99.
 *
 * usage: bench_draw [ROWS]      (default 2000)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sample/sample.h"
#include "bench/bench_clock.h"

enum { VOCAB = 49152, GENERATED = 256, PROMPT = 512 };

/* Logits shaped like a language model's: Zipf-like over a shuffled vocabulary (the
 * token of rank r gets -1.5 ln(1 + r)), so a few tokens hold most of the mass and a
 * long tail the rest. */
static void fill_logits(float *logits, uint64_t *rng) {
    for (int32_t i = 0; i < VOCAB; i++) logits[i] = (float)(-1.5 * log(1.0 + i));
    for (int32_t i = VOCAB - 1; i > 0; i--) { /* Fisher-Yates */
        int32_t j = (int32_t)(sample_rng_uniform(rng) * (i + 1));
        float t = logits[i];
        logits[i] = logits[j];
        logits[j] = t;
    }
}

static void run_case(const char *name, const sample_params *p, int top_logprobs, int rows) {
    float *logits = malloc(sizeof *logits * VOCAB), *work = malloc(sizeof *work * VOCAB);
    double *times = malloc(sizeof *times * (size_t)rows);
    int32_t prompt[PROMPT], generated[GENERATED];
    uint64_t rng = 7;
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)(sample_rng_uniform(&rng) * VOCAB);
    for (int i = 0; i < GENERATED; i++) generated[i] = (int32_t)(sample_rng_uniform(&rng) * VOCAB);
    sample_state s;
    if (!logits || !work || !times || sample_state_init(&s, VOCAB, p->seed) != SP_OK) {
        fprintf(stderr, "bench_draw: out of memory\n");
        exit(1);
    }
    fill_logits(logits, &rng);
    sample_logprob_entry top[2];
    int64_t checksum = 0;
    for (int r = -rows / 10; r < rows; r++) { /* a tenth untimed, to warm up */
        memcpy(work, logits, sizeof *work * VOCAB);
        double t0 = bench_now_us();
        if (top_logprobs > 0) {
            double lse = sample_logsumexp(work, VOCAB);
            sample_top_logprobs(work, VOCAB, lse, top_logprobs, top);
        }
        sample_apply_penalties(p, &s, prompt, PROMPT, generated, GENERATED, work);
        s.rng = sample_rng_at(p->seed, PROMPT + GENERATED + r);
        checksum += sample_token(p, &s, work);
        double t1 = bench_now_us();
        if (r >= 0) times[r] = t1 - t0;
    }
    qsort(times, (size_t)rows, sizeof *times, bench_cmp_double);
    printf("%s\t%.1f\t%.1f\t(checksum %lld)\n", name, times[rows / 2], times[rows * 99 / 100], (long long)checksum);
    sample_state_free(&s);
    free(logits);
    free(work);
    free(times);
}

int main(int argc, char **argv) {
    int rows = argc > 1 ? atoi(argv[1]) : 2000;
    if (rows < 10) rows = 10;
    sample_params p = sample_params_default();
    p.temperature = 0.8f;
    p.top_p = 0.95f;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.2f;
    p.seed = 11;
    run_case("seeded top-p 0.95, penalties", &p, 0, rows);
    run_case("seeded top-p 0.95, penalties, top-2 logprobs", &p, 2, rows);
    sample_params g = sample_params_default();
    g.temperature = 0;
    run_case("greedy", &g, 0, rows);
    return 0;
}

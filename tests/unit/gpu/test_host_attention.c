/* test_host_attention.c: the CPU backend's attention over F16 pools gives each token the
 * same bits whichever step it is in. A step mixes a prefill chunk, decode tokens of
 * other sequences and a run of verify rows (the consecutive tokens the AVX2 path handles
 * as one task, K read once for all of them); every token's output must equal what a step
 * of that token alone gives, bit for bit, for every grouping of query heads over KV
 * heads (1 to 8 per KV head: one task's heads, and more than one task's), head widths of
 * 64 and 128, the avx2 and generic kernel sets, and one or two threads. A checksum against
 * attention in double guards against both paths being wrong alike. */
#include <math.h>
#include <string.h>

#include "tests/unit/gpu/gpu_test.h"

enum { BLOCK = 4, MAX_BLOCKS = 16, N_SEQS = 4, MAX_TOKENS = 64 };

/* Positions each sequence has in the pool, and the first of them the mixed step holds
 * (the earlier ones were written by earlier steps). Sequence 0: a prefill chunk of 13
 * tokens that starts mid-block; 1 and 3: one decode token each; 2: 5 verify rows. */
static const int32_t seq_len[N_SEQS] = {23, 10, 41, 1};
static const int32_t step_from[N_SEQS] = {10, 9, 36, 0};

typedef struct case_shape {
    int hk, group, dh;
} case_shape;

/* Sequence s's blocks: scattered through the pool, none shared. */
static int32_t block_of(int s, int b) {
    return (b * N_SEQS + s) * 7 % (MAX_BLOCKS * N_SEQS);
}

static dev_backend *backend(sp_cpu_isa isa, int threads) {
    dev_backend *dev;
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = threads, .cpu_isa = isa};
    cr_assert_eq(dev_create(&opts, &dev), SP_OK, "%s", sp_last_error());
    return dev;
}

/* Runs one step of the listed (sequence, position) tokens: writes their K and V (rows
 * of k, v indexed by sequence * MAX_TOKENS + position) and, when out is given, their
 * attention into out (same indexing, H*Dh a row). */
static void run_step(dev_backend *dev, dev_kv *kv, const case_shape *c, const int32_t *seqs, const int32_t *poss, int n,
                     const float *k, const float *v, const float *q, float *out) {
    const int h = c->hk * c->group, kw = c->hk * c->dh, qw = h * c->dh;
    int32_t tokens[N_SEQS * MAX_TOKENS] = {0}, table[N_SEQS * MAX_BLOCKS], lens[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) {
        lens[s] = seq_len[s];
        for (int b = 0; b < MAX_BLOCKS; b++) table[s * MAX_BLOCKS + b] = block_of(s, b);
    }
    float *ks = malloc(sizeof(float) * (size_t)n * kw), *vs = malloc(sizeof(float) * (size_t)n * kw);
    float *qs = malloc(sizeof(float) * (size_t)n * qw), *os = malloc(sizeof(float) * (size_t)n * qw);
    cr_assert(ks && vs && qs && os);
    for (int t = 0; t < n; t++) {
        const size_t row = (size_t)seqs[t] * MAX_TOKENS + (size_t)poss[t];
        memcpy(ks + (size_t)t * kw, k + row * kw, sizeof(float) * kw);
        memcpy(vs + (size_t)t * kw, v + row * kw, sizeof(float) * kw);
        memcpy(qs + (size_t)t * qw, q + row * qw, sizeof(float) * qw);
    }
    dev_step step = {.n_tokens = n,
                     .tokens = tokens,
                     .pos = poss,
                     .seq = seqs,
                     .n_seqs = N_SEQS,
                     .seq_len = lens,
                     .block_table = table,
                     .max_blocks = MAX_BLOCKS};
    const dev_step *ds;
    cr_assert_eq(dev_step_begin(dev, &step, 1, kv, &ds), SP_OK, "%s", sp_last_error());
    dev_kv_write(dev, kv, 0, ks, vs, ds);
    if (out) dev_attention(dev, os, qs, kv, 0, ds, h, 1.0f / sqrtf((float)c->dh));
    cr_assert_eq(dev_synchronize(dev), SP_OK);
    if (out)
        for (int t = 0; t < n; t++)
            memcpy(out + ((size_t)seqs[t] * MAX_TOKENS + (size_t)poss[t]) * qw, os + (size_t)t * qw,
                   sizeof(float) * qw);
    free(ks);
    free(vs);
    free(qs);
    free(os);
}

/* Attention in double for the token at (s, pos): its H*Dh outputs' sum. */
static double reference_sum(const case_shape *c, const float *k, const float *v, const float *q, int s, int pos) {
    const int h = c->hk * c->group, kw = c->hk * c->dh;
    double total = 0;
    for (int head = 0; head < h; head++) {
        const int kvh = head / c->group;
        const float *qt = q + ((size_t)s * MAX_TOKENS + (size_t)pos) * (size_t)(h * c->dh) + (size_t)head * c->dh;
        double score[MAX_TOKENS], max = -INFINITY, sum = 0;
        for (int j = 0; j <= pos; j++) {
            const float *kj = k + ((size_t)s * MAX_TOKENS + (size_t)j) * kw + (size_t)kvh * c->dh;
            double d = 0;
            for (int i = 0; i < c->dh; i++) d += (double)qt[i] * kj[i];
            score[j] = d / sqrt((double)c->dh);
            max = score[j] > max ? score[j] : max;
        }
        for (int j = 0; j <= pos; j++) sum += score[j] = exp(score[j] - max);
        for (int j = 0; j <= pos; j++) {
            const float *vj = v + ((size_t)s * MAX_TOKENS + (size_t)j) * kw + (size_t)kvh * c->dh;
            for (int i = 0; i < c->dh; i++) total += score[j] / sum * vj[i];
        }
    }
    return total;
}

static void check_case(sp_cpu_isa isa, int threads, case_shape c) {
    const int h = c.hk * c.group, kw = c.hk * c.dh, qw = h * c.dh;
    const size_t rows = (size_t)N_SEQS * MAX_TOKENS;
    gpu_test_rng = 0x617474 + (uint64_t)(c.hk * 131 + c.group * 17 + c.dh);
    float *k = random_f16((int64_t)rows * kw, 1.0f), *v = random_f16((int64_t)rows * kw, 1.0f);
    float *q = random_f16((int64_t)rows * qw, 1.0f);
    float *mixed = calloc(rows * (size_t)qw, sizeof(float)), *alone = calloc(rows * (size_t)qw, sizeof(float));
    cr_assert(mixed && alone);

    dev_backend *dev = backend(isa, threads);
    dev_kv_shape shape = {.n_layers = 1,
                          .n_blocks = MAX_BLOCKS * N_SEQS,
                          .block_size = BLOCK,
                          .n_kv_heads = c.hk,
                          .head_dim = c.dh,
                          .kv_type = SP_KV_F16};
    dev_kv *kv;
    cr_assert_eq(dev_kv_create(dev, &shape, &kv), SP_OK, "%s", sp_last_error());

    /* the positions before the mixed step, one earlier step */
    int32_t seqs[N_SEQS * MAX_TOKENS], poss[N_SEQS * MAX_TOKENS];
    int n = 0;
    for (int s = 0; s < N_SEQS; s++)
        for (int p = 0; p < step_from[s]; p++) seqs[n] = s, poss[n++] = p;
    run_step(dev, kv, &c, seqs, poss, n, k, v, q, NULL);

    /* the mixed step: decode token of 1, prefill chunk of 0, decode token of 3, verify rows of 2 */
    static const int order[N_SEQS] = {1, 0, 3, 2};
    n = 0;
    for (int i = 0; i < N_SEQS; i++)
        for (int p = step_from[order[i]]; p < seq_len[order[i]]; p++) seqs[n] = order[i], poss[n++] = p;
    run_step(dev, kv, &c, seqs, poss, n, k, v, q, mixed);

    /* each token alone (its K and V are in the pool already: rewriting them is a no-op) */
    for (int t = 0; t < n; t++) run_step(dev, kv, &c, seqs + t, poss + t, 1, k, v, q, alone);

    for (int t = 0; t < n; t++) {
        const size_t at = ((size_t)seqs[t] * MAX_TOKENS + (size_t)poss[t]) * (size_t)qw;
        cr_assert(memcmp(mixed + at, alone + at, sizeof(float) * (size_t)qw) == 0,
                  "isa %d, %d threads, %d KV heads x %d, Dh %d: sequence %d position %d differs in a step of %d tokens",
                  (int)isa, threads, c.hk, c.group, c.dh, seqs[t], poss[t], n);
        double got = 0;
        for (int i = 0; i < qw; i++) got += mixed[at + (size_t)i];
        const double want = reference_sum(&c, k, v, q, seqs[t], poss[t]);
        cr_assert(fabs(got - want) <= 0.02 * (1 + fabs(want)), "sequence %d position %d: sum %f, in double %f", seqs[t],
                  poss[t], got, want);
    }
    dev_kv_destroy(dev, kv);
    dev_destroy(dev);
    free(k);
    free(v);
    free(q);
    free(mixed);
    free(alone);
}

static const case_shape shapes[] = {
    {3, 3, 64},  /* SmolLM2-135M: 9 query heads over 3 */
    {2, 1, 64},  /* no grouping */
    {2, 2, 128}, /* two heads a KV head, Qwen's width */
    {1, 4, 64},  /* one task's whole group */
    {2, 5, 64},  /* a group of 4 and one left */
    {1, 8, 128}, /* two tasks a KV head */
};

static void check_set(sp_cpu_isa isa) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int threads = 1; threads <= 2; threads++) check_case(isa, threads, shapes[i]);
}

Test(host_attention, a_tokens_result_does_not_depend_on_its_step_avx2) {
    if (dev_cpu_isa_check(SP_CPU_ISA_AVX2) != SP_OK) cr_skip_test("%s", sp_last_error());
    check_set(SP_CPU_ISA_AVX2);
}

Test(host_attention, a_tokens_result_does_not_depend_on_its_step_generic) {
    check_set(SP_CPU_ISA_GENERIC);
}

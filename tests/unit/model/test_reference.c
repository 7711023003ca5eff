/* test_reference.c: spindle's forward pass against llama.cpp on the same GGUF files.
 *
 * The reference data (tests/data/reference_*.json, made by tools/make_reference.py
 * with llama.cpp itself) holds, per prompt: llama.cpp's prompt tokens, its 32-token
 * greedy continuation, and for every position its log-probability of the next token
 * and its top-5. llama.cpp sums attention in one order for steps of 2+ tokens and in
 * another for 1-token steps, so its own token-by-token decode drifts from its batched
 * logits at near-ties; spindle always uses the batched order (a token's result must not
 * depend on its batch), and the reference greedy continuation is decoded by llama.cpp
 * in 2-token steps to share that arithmetic. Agreement with llama.cpp's 1-token-step
 * decode is logged too.
 *
 * llama.cpp's AVX-512 kernels round differently from its AVX2 ones, so each reference
 * file names the kernel set it was made with (`kernel_set`), and the checks depend on
 * whether the kernel set spindle's CPU backend runs reproduces that set's rounding
 * (dev_cpu_isa_rounding(): the avx512 set computes avx2's numbers). SmolLM2 runs under
 * the avx2, avx512 and amx sets, stories260K under avx2 and generic (its F32 weights take no
 * kernel the SIMD sets differ in):
 *   - always: our tokenizer gives llama.cpp's prompt tokens for every prompt;
 *   - same set: every greedy continuation identical, top-1 agreement 100% of the
 *     teacher-forced positions, and |delta log-prob| of the reference token at the level
 *     measured with that set (ref_bounds below: SmolLM2 is bit for bit, so only the
 *     reference's 6-decimal rounding is left; stories260K's F32 matmuls sum in another
 *     order than llama.cpp's);
 *   - another arithmetic: bounds measured per model (ref_cross_bounds): for the F32
 *     stories260K every greedy continuation identical, top-1 >= 99%, mean |delta
 *     log-prob| < 0.02; for the 30-layer SmolLM2 the spread of another rounding (see
 *     check_smollm2).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "sample/sample.h"
#include "tests/unit/testdata.h"

enum { REF_BLOCK = 16, REF_MAX_BATCH = 512, REF_GREEDY = 32 };

typedef struct ref_runner {
    dev_backend *dev;
    model *model;
    dev_kv *kv;
    int n_ctx;
    int32_t *block_table;
    int32_t n_vocab;
} ref_runner;

static void runner_open(ref_runner *r, const char *path, sp_cpu_isa isa) {
    dev_options opts = {.kind = SP_DEVICE_CPU, .n_threads = 2, .cpu_isa = isa};
    cr_assert_eq(dev_create(&opts, &r->dev), SP_OK, "%s", sp_last_error());
    model_options mo = {.max_batch_tokens = REF_MAX_BATCH};
    cr_assert_eq(model_load(path, r->dev, &mo, &r->model), SP_OK, "%s", sp_last_error());
    r->n_ctx = 1024;
    cr_assert_eq(model_kv_create(r->model, r->n_ctx / REF_BLOCK, REF_BLOCK, &r->kv), SP_OK, "%s", sp_last_error());
    r->block_table = malloc(sizeof(int32_t) * (size_t)(r->n_ctx / REF_BLOCK));
    /* a scattered block order, so paging is exercised */
    for (int b = 0; b < r->n_ctx / REF_BLOCK; b++) r->block_table[b] = (r->n_ctx / REF_BLOCK - 1) - b;
    r->n_vocab = model_get_hparams(r->model)->n_vocab;
}

static void runner_close(ref_runner *r) {
    dev_kv_destroy(r->dev, r->kv);
    model_destroy(r->model);
    dev_destroy(r->dev);
    free(r->block_table);
}

/* Evaluates ids[first..first+n) at positions first.. and stores logits for rows that
 * want them: all rows (out = (n, V)) when all_logits, else the last row (out = (V)). */
static void runner_eval(ref_runner *r, const int32_t *ids, int first, int n, bool all_logits, float *out) {
    static int32_t pos[REF_MAX_BATCH], seq[REF_MAX_BATCH], rows[REF_MAX_BATCH];
    for (int done = 0; done < n;) {
        int chunk = n - done < REF_MAX_BATCH ? n - done : REF_MAX_BATCH;
        for (int i = 0; i < chunk; i++) {
            pos[i] = first + done + i;
            seq[i] = 0;
            rows[i] = i;
        }
        int32_t seq_len = first + done + chunk;
        bool last_chunk = done + chunk == n;
        dev_step step = {
            .n_tokens = chunk,
            .tokens = ids + first + done,
            .pos = pos,
            .seq = seq,
            .n_seqs = 1,
            .seq_len = &seq_len,
            .block_table = r->block_table,
            .max_blocks = r->n_ctx / REF_BLOCK,
            .n_logits = all_logits ? chunk : (last_chunk ? 1 : 0),
            .logit_rows = all_logits ? rows : &rows[chunk - 1],
        };
        float *dst = all_logits ? out + (size_t)done * (size_t)r->n_vocab : out;
        cr_assert_eq(model_forward(r->model, r->kv, &step, dst), SP_OK, "%s", sp_last_error());
        done += chunk;
    }
}

static int32_t *json_ids(json_t *arr, size_t *n) {
    *n = json_array_size(arr);
    int32_t *ids = malloc(sizeof(int32_t) * (*n + REF_GREEDY + 1));
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

typedef struct ref_result {
    int cases, greedy_identical, tokenize_identical, single_steps_identical;
    long positions, top1_agree;
    double sum_abs_delta, max_abs_delta;
    bool same_kernel_set; /* the reference was made with the kernel set spindle runs here */
} ref_result;

/* Bounds on |delta log-prob| when the kernel sets match: a little above what was
 * measured (tests/data/README.md and docs/notes/2026-12-03-reference-bounds.md). */
typedef struct ref_bounds {
    double mean, max;
} ref_bounds;

/* Bounds when spindle's arithmetic is another than the reference's: rounding differences
 * grow through the layers, so they are measured per model (see check_smollm2). */
typedef struct ref_cross_bounds {
    int greedy_slack; /* continuations that may diverge (at near-ties) */
    double min_top1;  /* teacher-forced top-1 agreement */
    double max_mean;  /* mean |delta log-prob| */
} ref_cross_bounds;

static void run_reference(const char *ref_path, const char *model_path, sp_cpu_isa isa, ref_result *res) {
    json_error_t err;
    json_t *root = json_load_file(ref_path, 0, &err);
    cr_assert_not_null(root, "%s:%d: %s", ref_path, err.line, err.text);
    ref_runner r;
    runner_open(&r, model_path, isa);
    const tok_vocab *vocab = model_vocab(r.model);
    memset(res, 0, sizeof *res);
    const char *ref_kernels = json_string_value(json_object_get(root, "kernel_set"));
    cr_assert_not_null(ref_kernels, "%s: no kernel_set (tools/make_reference.py writes it)", ref_path);
    const sp_cpu_isa ours = dev_cpu_kernels(r.dev);
    res->same_kernel_set = strcmp(ref_kernels, dev_cpu_isa_rounding(ours)) == 0;
    if (!res->same_kernel_set)
        cr_log_info("%s was made with llama.cpp's %s kernels and spindle's %s set rounds as %s: the looser "
                    "cross-kernel tolerance applies",
                    ref_path, ref_kernels, sp_cpu_isa_name(ours), dev_cpu_isa_rounding(ours));
    json_t *cases = json_object_get(root, "cases");
    cr_assert(json_is_array(cases) && json_array_size(cases) > 0, "%s: no cases", ref_path);
    float *logits = malloc(sizeof(float) * (size_t)r.n_vocab * 1024);

    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c) {
        size_t n_prompt, n_greedy;
        int32_t *ids = json_ids(json_object_get(c, "prompt_ids"), &n_prompt);
        int32_t *want = json_ids(json_object_get(c, "greedy_ids"), &n_greedy);
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        bool add_bos = json_is_true(json_object_get(c, "add_bos"));
        bool special = json_is_true(json_object_get(c, "parse_special"));
        res->cases++;

        int32_t *ours = NULL;
        size_t n_ours = 0;
        cr_assert_eq(tok_encode(vocab, prompt, strlen(prompt), add_bos, special, &ours, &n_ours), SP_OK);
        if (n_ours == n_prompt && memcmp(ours, ids, n_prompt * sizeof(int32_t)) == 0)
            res->tokenize_identical++;
        else
            cr_log_info("case %zu: our tokenization differs from llama.cpp's (%zu vs %zu tokens)", ci, n_ours,
                        n_prompt);
        free(ours);

        cr_assert_leq(n_prompt + n_greedy, 1024, "case %zu: %zu tokens exceed the test's 1024", ci,
                      n_prompt + n_greedy);
        /* our own greedy continuation from llama.cpp's prompt tokens */
        runner_eval(&r, ids, 0, (int)n_prompt, false, logits);
        int32_t seq[1024];
        memcpy(seq, ids, n_prompt * sizeof(int32_t));
        for (size_t g = 0; g < n_greedy; g++) {
            seq[n_prompt + g] = sample_argmax(logits, r.n_vocab);
            if (g + 1 < n_greedy) runner_eval(&r, seq, (int)(n_prompt + g), 1, false, logits);
        }
        size_t matched = 0;
        while (matched < n_greedy && seq[n_prompt + matched] == want[matched]) matched++;
        if (matched == n_greedy)
            res->greedy_identical++;
        else
            cr_log_info("case %zu: greedy continuation diverges at token %zu of %zu", ci, matched, n_greedy);
        /* llama.cpp's classic 1-token-step decode, which sums attention in another order */
        json_t *single = json_object_get(c, "greedy_ids_single_steps");
        if (json_is_array(single)) {
            size_t n_single;
            int32_t *single_ids = json_ids(single, &n_single);
            if (n_single == n_greedy && memcmp(single_ids, seq + n_prompt, n_greedy * sizeof(int32_t)) == 0)
                res->single_steps_identical++;
            free(single_ids);
        }

        /* teacher-forced over prompt + reference continuation */
        size_t total = n_prompt + n_greedy;
        memcpy(seq, ids, n_prompt * sizeof(int32_t));
        memcpy(seq + n_prompt, want, n_greedy * sizeof(int32_t));
        cr_assert_leq(total, 1024);
        runner_eval(&r, seq, 0, (int)total, true, logits);
        size_t pi;
        json_t *p;
        json_array_foreach(json_object_get(c, "positions"), pi, p) {
            int pos = (int)json_integer_value(json_object_get(p, "pos"));
            int32_t next = (int32_t)json_integer_value(json_object_get(p, "next_token"));
            double ref_lp = json_real_value(json_object_get(p, "logprob"));
            json_t *top = json_object_get(p, "top");
            int32_t ref_top1 = (int32_t)json_integer_value(json_array_get(json_array_get(top, 0), 0));
            const float *row = logits + (size_t)pos * (size_t)r.n_vocab;
            res->positions++;
            if (sample_argmax(row, r.n_vocab) == ref_top1) res->top1_agree++;
            double delta = fabs((double)sample_logprob(row, r.n_vocab, next) - ref_lp);
            res->sum_abs_delta += delta;
            if (delta > res->max_abs_delta) res->max_abs_delta = delta;
        }
        free(ids);
        free(want);
    }
    cr_log_info("%s: %d cases, tokenization identical %d, greedy identical %d (to llama.cpp's 1-token-step "
                "decode: %d), top-1 agreement %ld/%ld (%.2f%%), |dlogprob| mean %.7f max %.7f",
                ref_path, res->cases, res->tokenize_identical, res->greedy_identical, res->single_steps_identical,
                res->top1_agree, res->positions, 100.0 * (double)res->top1_agree / (double)res->positions,
                res->sum_abs_delta / (double)res->positions, res->max_abs_delta);
    free(logits);
    runner_close(&r);
    json_decref(root);
}

static void check_against_reference(const ref_result *res, ref_bounds same_set, ref_cross_bounds cross) {
    cr_assert_gt(res->positions, 0);
    cr_expect_eq(res->tokenize_identical, res->cases, "tokenization identical for %d of %d prompts",
                 res->tokenize_identical, res->cases);
    double mean_delta = res->sum_abs_delta / (double)res->positions;
    if (res->same_kernel_set) {
        cr_expect_eq(res->greedy_identical, res->cases, "greedy identical for %d of %d prompts", res->greedy_identical,
                     res->cases);
        cr_expect_eq(res->top1_agree, res->positions, "top-1 agreement %ld of %ld positions", res->top1_agree,
                     res->positions);
        cr_expect_lt(mean_delta, same_set.mean, "mean |delta log-prob| %.7f not below %g", mean_delta, same_set.mean);
        cr_expect_lt(res->max_abs_delta, same_set.max, "max |delta log-prob| %.7f not below %g", res->max_abs_delta,
                     same_set.max);
    } else {
        double agreement = (double)res->top1_agree / (double)res->positions;
        cr_expect_geq(res->greedy_identical, res->cases - cross.greedy_slack, "greedy identical for %d of %d prompts",
                      res->greedy_identical, res->cases);
        cr_expect_geq(agreement, cross.min_top1, "top-1 agreement %.4f below %g", agreement, cross.min_top1);
        cr_expect_lt(mean_delta, cross.max_mean, "mean |delta log-prob| %.5f not below %g", mean_delta, cross.max_mean);
    }
}

/* One reference file against one model under kernel set isa (skipped when the CPU lacks
 * it): at least min_cases prompts, and the checks of check_against_reference. */
static void check_reference_file(const char *ref_path, const char *model_path, sp_cpu_isa isa, int min_cases,
                                 ref_bounds same_set, ref_cross_bounds cross) {
    TESTDATA_REQUIRE(model_path);
    if (dev_cpu_isa_check(isa) != SP_OK) cr_skip_test("%s", sp_last_error());
    ref_result res;
    run_reference(ref_path, model_path, isa, &res);
    cr_expect_geq(res.cases, min_cases);
    check_against_reference(&res, same_set, cross);
}

static void check_stories260k(sp_cpu_isa isa) {
    char path[512];
    testdata_path(path, sizeof path, "models/stories260K.gguf");
    /* measured with AVX2: mean 0.000179, max 0.0041 */
    check_reference_file("tests/data/reference_stories260k.json", path, isa, 8,
                         (ref_bounds){.mean = 0.0003, .max = 0.008},
                         (ref_cross_bounds){.greedy_slack = 0, .min_top1 = 0.99, .max_mean = 0.02});
}

Test(reference, stories260k_matches_llama_cpp_with_the_avx2_set, .timeout = 300) {
    check_stories260k(SP_CPU_ISA_AVX2);
}

Test(reference, stories260k_matches_llama_cpp_with_the_generic_set, .timeout = 300) {
    check_stories260k(SP_CPU_ISA_GENERIC);
}

/* SmolLM2's Q4_1 and Q8_0 weights take the multi-row kernels each set has its own
 * instructions in; the F32 stories260K does not, so it runs under avx2 and generic only. */
static void check_smollm2(sp_cpu_isa isa) {
    /* 21 prompts of a 135M model take minutes under ASan; the sanitizer build covers the
     * same code with the stories260K reference */
    if (getenv("SPINDLE_SANITIZED")) cr_skip_test("SmolLM2 reference runs in the optimized build only");
    /* Same set, measured with AVX2: mean 0.0000003, max 0.0000009 (the reference's 6
     * decimals). Another arithmetic: 30 layers of a 135M Q4_1 model turn last-bit
     * differences into visibly different logits. Measured against this avx2 reference:
     * spindle's generic set (llama.cpp's generic rounding, another summation order) had
     * greedy identical for 8 of 21 prompts, top-1 96.28%, mean 0.0494; the amx set 10 of
     * 21, 96.63%, 0.0521, although each amx dot product is nearer the exact value than
     * avx2's (5-8x on SmolLM2's Q4_1 weights; tests/unit/gpu/test_amx.c). */
    check_reference_file("tests/data/reference_smollm2.json", testdata_default_model(), isa, 16,
                         (ref_bounds){.mean = 0.000001, .max = 0.000005},
                         (ref_cross_bounds){.greedy_slack = 14, .min_top1 = 0.95, .max_mean = 0.07});
}

Test(reference, smollm2_matches_llama_cpp_with_the_avx2_set, .timeout = 600) {
    check_smollm2(SP_CPU_ISA_AVX2);
}

Test(reference, smollm2_matches_llama_cpp_with_the_avx512_set, .timeout = 600) {
    check_smollm2(SP_CPU_ISA_AVX512);
}

/* The amx set's arithmetic is its own (one exact integer sum per block; no llama.cpp
 * build computes it, and llama.cpp's AMX build does not run where this was made), so it
 * meets the bounds of another arithmetic. */
Test(reference, smollm2_stays_near_llama_cpp_with_the_amx_set, .timeout = 600) {
    check_smollm2(SP_CPU_ISA_AMX);
}

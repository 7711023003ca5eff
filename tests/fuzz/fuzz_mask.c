/* fuzz_mask.c: libFuzzer harness for the time one grammar mask takes over the default
 * model's real vocabulary (SmolLM2-135M-Instruct's 49,152 BPE tokens), the work the
 * scheduler waits for at every step of a constrained sequence (issue 44: a 10-byte regex
 * once made each mask take seconds and froze every client of the replica).
 *
 * The input is a constraint of at most 1 KiB: GBNF when it holds "::=", else a regex
 * (gram_regex_to_gbnf, as guided_regex and a schema's pattern reach it). It is compiled
 * with the default limits and prepared (gram_mask_prepare), as server/api does on the
 * HTTP thread; then masks are taken along a few tokens (SPINDLE_FUZZ_MASK_STEPS, default
 * 8), each step advancing by one allowed token chosen from the input's hash. The harness
 * aborts, naming the step and the constraint, when:
 *   - a single gram_mask takes more than SPINDLE_FUZZ_MASK_MS (default 200 ms), or the
 *     preparation more than SPINDLE_FUZZ_PREPARE_MS (default 1000 ms: it runs on an HTTP
 *     thread, not in the step): a watchdog thread aborts as soon as the bound passes, so a
 *     mask that would take minutes costs the run only the bound;
 *   - a token in the mask does not advance a copy of the state.
 * The bound is wall-clock time on an instrumented build (ASan, UBSan, coverage): a
 * loaded machine can need a larger one. Masks are taken as the scheduler takes them,
 * with gram_mask_run and the grammar's work budget: a mask that stops over its budget is
 * the server's answer to a too costly constraint (a 400 or finish_reason "error"), not a
 * finding, and ends the input; only the time a mask takes, budget or not, is judged.
 *
 * The vocabulary: SPINDLE_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf (where
 * tools/setup.sh puts it); when it is absent the harness says `SKIP fuzz_mask: ...` and
 * exits 79 (tests/fuzz/fuzz_skip.h). Threads: the fuzzer's own, and the watchdog, which
 * only reads the atomic start time and aborts.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tests/fuzz/fuzz_skip.h"

#define FUZZ_CHECK(cond, ...)                                                     \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "fuzz_mask: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                         \
            fprintf(stderr, "\n");                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

enum { FUZZ_MASK_MAX_INPUT = 1024 };

static tok_vocab *vocab;
static gram_vocab *gvocab;
static uint32_t *mask;
static int64_t mask_bound_ns, prepare_bound_ns;
static int steps;

/* What the watchdog reports: the constraint and the step of the mask under way. */
static char current[FUZZ_MASK_MAX_INPUT + 1];
static _Atomic int current_step;   /* -1: the preparation */
static _Atomic int64_t started_ns; /* 0: no timed work under way */
static _Atomic int64_t bound_ns;   /* the bound of the work under way */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void report_slow(int64_t took_ns) {
    static atomic_flag reported = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&reported))
        for (;;) pause(); /* the other thread is aborting */
    int step = atomic_load(&current_step);
    char what[64] = "gram_mask_prepare";
    if (step >= 0) snprintf(what, sizeof what, "one mask (step %d)", step);
    fprintf(stderr, "fuzz_mask: %s took more than %lld ms (%lld ms so far) for the constraint: %s\n", what,
            (long long)(atomic_load(&bound_ns) / 1000000), (long long)(took_ns / 1000000), current);
    abort();
}

/* The watchdog thread: aborts the process when one mask has run past the bound. */
static void *watchdog(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec nap = {0, 5 * 1000000};
        nanosleep(&nap, NULL);
        int64_t start = atomic_load(&started_ns);
        if (start && now_ns() - start > atomic_load(&bound_ns)) report_slow(now_ns() - start);
    }
    return NULL;
}

static long env_long(const char *name, long fallback) {
    const char *v = getenv(name);
    char *end;
    long x = v && v[0] ? strtol(v, &end, 10) : fallback;
    return v && v[0] && (*end || x <= 0) ? fallback : x;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (gvocab) return 0;
    const char *path = fuzz_default_model();
    if (!fuzz_present(path)) {
        fuzz_skip("fuzz_mask", "no default model at %s (run tools/setup.sh, or set SPINDLE_MODEL)", path);
        fuzz_skip_all();
    }
    gguf_file *f = NULL;
    FUZZ_CHECK(gguf_open(path, &f) == SP_OK && tok_vocab_load(f, &vocab) == SP_OK, "%s: %s", path, sp_last_error());
    gguf_close(f);
    FUZZ_CHECK(gram_vocab_create(vocab, &gvocab) == SP_OK, "%s", sp_last_error());
    mask = calloc(gram_mask_words(gvocab), sizeof *mask);
    FUZZ_CHECK(mask, "out of memory");
    mask_bound_ns = env_long("SPINDLE_FUZZ_MASK_MS", 200) * 1000000;
    prepare_bound_ns = env_long("SPINDLE_FUZZ_PREPARE_MS", 1000) * 1000000;
    steps = (int)env_long("SPINDLE_FUZZ_MASK_STEPS", 8);
    pthread_t t;
    FUZZ_CHECK(pthread_create(&t, NULL, watchdog, NULL) == 0, "watchdog thread");
    pthread_detach(t);
    return 0;
}

/* Timed work: the watchdog aborts while it runs past the bound, and the time it took is
 * checked once more after (a watchdog starved of the CPU may have missed it). s NULL: the
 * preparation, else one mask. */
static gram_mask_status timed(gram_grammar *g, const gram_state *s, int step) {
    atomic_store(&current_step, s ? step : -1);
    atomic_store(&bound_ns, s ? mask_bound_ns : prepare_bound_ns);
    int64_t start = now_ns();
    atomic_store(&started_ns, start);
    gram_mask_status st = GRAM_MASK_OK;
    if (s)
        st = gram_mask_run(g, gvocab, s, mask, NULL);
    else
        gram_mask_prepare(g, gvocab);
    atomic_store(&started_ns, 0);
    int64_t took = now_ns() - start;
    if (took > atomic_load(&bound_ns)) report_slow(took);
    return st;
}

/* The k-th token of the mask, k below the count of its tokens; -1 when it is empty. */
static int32_t pick_token(uint64_t r) {
    size_t words = gram_mask_words(gvocab);
    int64_t count = 0;
    for (size_t w = 0; w < words; w++) count += __builtin_popcount(mask[w]);
    if (count == 0) return -1;
    int64_t k = (int64_t)(r % (uint64_t)count);
    for (size_t w = 0; w < words; w++) {
        int64_t here = __builtin_popcount(mask[w]);
        if (k < here) {
            uint32_t bits = mask[w];
            for (; k > 0; k--) bits &= bits - 1;
            return (int32_t)(w * 32 + (size_t)__builtin_ctz(bits));
        }
        k -= here;
    }
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!gvocab) LLVMFuzzerInitialize(NULL, NULL);
    if (size == 0 || size > FUZZ_MASK_MAX_INPUT) return 0;
    memcpy(current, data, size);
    current[size] = '\0';
    char *gbnf = NULL;
    if (memmem(data, size, "::=", 3)) {
        gbnf = malloc(size + 1);
        FUZZ_CHECK(gbnf, "out of memory");
        memcpy(gbnf, data, size);
        gbnf[size] = '\0';
    } else if (gram_regex_to_gbnf((const char *)data, size, &gbnf) != SP_OK) {
        return 0;
    }
    gram_limits lim = gram_limits_default();
    gram_grammar *g = NULL;
    sp_status st = gram_compile(gbnf, strlen(gbnf), &lim, &g);
    free(gbnf);
    if (st != SP_OK) return 0;
    timed(g, NULL, 0);
    gram_state *s = NULL;
    FUZZ_CHECK(gram_state_create(g, &s) == SP_OK, "state");
    /* FNV-1a of the input: which allowed token each step takes */
    uint64_t r = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) r = (r ^ data[i]) * 1099511628211ull;
    for (int step = 0; step < steps; step++) {
        if (timed(g, s, step) != GRAM_MASK_OK) break; /* over budget: refused, as the server does */
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int32_t id = pick_token(r >> 11);
        if (id < 0 || tok_is_eog(vocab, id)) break;
        FUZZ_CHECK(gram_state_advance_token(s, gvocab, id),
                   "step %d: token %d (%s) is in the mask but does not advance", step, id, tok_token_text(vocab, id));
        if (gram_state_finished(s)) break;
    }
    gram_state_destroy(s);
    gram_grammar_destroy(g);
    return 0;
}

/* mkmodel.c: writes a synthetic GGUF model with seeded random weights in the shape of a
 * named real model, so kernels, backends and benchmarks can run at real sizes with no
 * download (GPU machines have no network).
 *
 *   build/mkmodel --shape smollm2-135m --type Q4_1 [--seed N] [--ctx N] [--sampling-temp T] [--sampling-top-k K]
 * [--pooling-type N] -o PATH
 *
 * Shapes (llama architecture, the real models' hyperparameters):
 *   stories260k   D 64,   5 layers,  8/4 heads,  F 172,   V 512      (Karpathy's tinyllamas)
 *   smollm2-135m  D 576,  30 layers, 9/3 heads,  F 1536,  V 49152    tied output
 *   llama-1b      D 2048, 16 layers, 32/8 heads, F 8192,  V 128256   tied output, llama3 RoPE
 *   llama-8b      D 4096, 32 layers, 32/8 heads, F 14336, V 128256   llama3 RoPE
 * Types: F16, BF16, Q8_0, Q4_0, Q4_1 (F32 too) for the matrices; a matrix whose rows do
 * not divide into the type's blocks (stories260k's F = 172) is stored as F16, as
 * llama.cpp's quantizer falls back. Norms are F32.
 *
 * Weights are uniform in +-sqrt(3 / K) (unit variance of a row's dot product), norms
 * near 1, so activations stay in range over many layers. The tokenizer is a synthetic
 * SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then pieces "▁w<i>"
 * and "w<i>". Everything is a function of --seed: the same flags write the same bytes.
 *
 * The header is built in memory (tools/gguf_builder.h); tensor data is generated and
 * written one row at a time, so an 8B model needs no more memory than a row.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"
#include "tools/gguf_builder.h"

enum { ALIGNMENT = 32, MAX_TENSORS = 1024 };

typedef struct model_shape {
    const char *name;
    int64_t n_embd, n_layers, n_heads, n_kv_heads, n_ff, n_vocab, ctx;
    float rope_base;
    bool tied;
    float llama3_factor; /* > 0: llama3 RoPE scaling with this factor (rope_freqs.weight) */
} model_shape;

static const model_shape SHAPES[] = {
    {"stories260k", 64, 5, 8, 4, 172, 512, 512, 10000.0f, false, 0},
    {"smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f, true, 0},
    {"llama-1b", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0f, true, 32.0f},
    {"llama-8b", 4096, 32, 32, 8, 14336, 128256, 131072, 500000.0f, false, 8.0f},
};

typedef struct tensor {
    char name[64];
    int64_t ne0, ne1; /* ne1 = 1 for vectors */
    bool vector;
    quant_type type;
    uint64_t offset;
    enum { FILL_MATRIX, FILL_NORM, FILL_ROPE_FREQS } fill;
} tensor;

typedef struct plan {
    const model_shape *shape;
    quant_type type;
    uint64_t seed;
    int64_t ctx;
    const char *sampling_temp; /* general.sampling.temp to write, or NULL */
    int sampling_top_k;        /* general.sampling.top_k to write; -1: none */
    int pooling_type;          /* llama.pooling_type to write (1 mean, 2 cls, 3 last); 0: none */
    tensor t[MAX_TENSORS];
    int n;
} plan;

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "mkmodel: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: mkmodel --shape NAME --type TYPE [--seed N] [--ctx N] [--sampling-temp T] [--sampling-top-k K] "
            "[--pooling-type N] -o PATH\n"
            "  --shape  stories260k | smollm2-135m | llama-1b | llama-8b\n"
            "  --type   F32 | F16 | BF16 | Q8_0 | Q4_0 | Q4_1 (the matrices; norms are F32)\n"
            "  --seed   weights' seed (default 1)\n"
            "  --ctx    context_length written (default: the real model's)\n"
            "  --sampling-temp  general.sampling.temp written (the model's recommended temperature)\n"
            "  --sampling-top-k general.sampling.top_k written (the model's recommended top_k)\n"
            "  --pooling-type   llama.pooling_type written (1 mean, 2 cls, 3 last: llama.cpp's numbering)\n");
}

static void add(plan *p, const char *name, int64_t ne0, int64_t ne1, bool vector, int fill) {
    if (p->n == MAX_TENSORS) die("too many tensors (%s)", name);
    tensor *t = &p->t[p->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ne0 = ne0;
    t->ne1 = vector ? 1 : ne1;
    t->vector = vector;
    t->fill = fill;
    /* quantized types need whole blocks per row; otherwise F16, as llama.cpp falls back */
    t->type = vector ? QUANT_F32 : (quant_row_valid(p->type, ne0) ? p->type : QUANT_F16);
}

static void plan_tensors(plan *p) {
    const model_shape *s = p->shape;
    int64_t d = s->n_embd, dh = s->n_embd / s->n_heads, q = s->n_heads * dh, kv = s->n_kv_heads * dh;
    add(p, "token_embd.weight", d, s->n_vocab, false, FILL_MATRIX);
    add(p, "output_norm.weight", d, 0, true, FILL_NORM);
    if (!s->tied) add(p, "output.weight", d, s->n_vocab, false, FILL_MATRIX);
    if (s->llama3_factor > 0) add(p, "rope_freqs.weight", dh / 2, 0, true, FILL_ROPE_FREQS);
    char name[64];
    for (int64_t l = 0; l < s->n_layers; l++) {
#define LAYER(suffix, a, b, vec, fill)                                    \
    do {                                                                  \
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, suffix); \
        add(p, name, a, b, vec, fill);                                    \
    } while (0)
        LAYER("attn_norm.weight", d, 0, true, FILL_NORM);
        LAYER("attn_q.weight", d, q, false, FILL_MATRIX);
        LAYER("attn_k.weight", d, kv, false, FILL_MATRIX);
        LAYER("attn_v.weight", d, kv, false, FILL_MATRIX);
        LAYER("attn_output.weight", q, d, false, FILL_MATRIX);
        LAYER("ffn_norm.weight", d, 0, true, FILL_NORM);
        LAYER("ffn_gate.weight", d, s->n_ff, false, FILL_MATRIX);
        LAYER("ffn_up.weight", d, s->n_ff, false, FILL_MATRIX);
        LAYER("ffn_down.weight", s->n_ff, d, false, FILL_MATRIX);
#undef LAYER
    }
    uint64_t offset = 0;
    for (int i = 0; i < p->n; i++) {
        p->t[i].offset = offset;
        uint64_t bytes = quant_row_bytes(p->t[i].type, p->t[i].ne0) * (uint64_t)p->t[i].ne1;
        offset += (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    }
}

/* ---- the header ---- */

static void header_tokenizer(gguf_builder *b, int64_t n_vocab) {
    gb_kv_str(b, "tokenizer.ggml.model", "llama");
    gb_kv_arr(b, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, (uint64_t)n_vocab);
    static const char *SPECIAL[3] = {"<unk>", "<s>", "</s>"};
    char piece[32];
    for (int64_t i = 0; i < n_vocab; i++) {
        if (i < 3)
            snprintf(piece, sizeof piece, "%s", SPECIAL[i]);
        else if (i < 3 + 256)
            snprintf(piece, sizeof piece, "<0x%02X>", (unsigned)(i - 3));
        else if ((i - 259) % 2 == 0)
            snprintf(piece, sizeof piece, "\xe2\x96\x81w%lld", (long long)((i - 259) / 2)); /* "▁w<i>" */
        else
            snprintf(piece, sizeof piece, "w%lld", (long long)((i - 259) / 2));
        gb_str(b, piece);
    }
    gb_kv_arr(b, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, (uint64_t)n_vocab);
    for (int64_t i = 0; i < n_vocab; i++) gb_f32(b, i < 259 ? 0.0f : -(float)(i - 259));
    gb_kv_arr(b, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, (uint64_t)n_vocab);
    for (int64_t i = 0; i < n_vocab; i++) gb_u32(b, i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1);
    gb_kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
    gb_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
}

enum { HEADER_KV = 19 }; /* the keys header() writes */

static void header(gguf_builder *b, const plan *p) {
    const model_shape *s = p->shape;
    char name[96];
    gb_header(b, 3, (uint64_t)p->n,
              HEADER_KV + (p->sampling_temp != NULL) + (p->sampling_top_k >= 0) + (p->pooling_type != 0));
    gb_kv_str(b, "general.architecture", "llama");
    snprintf(name, sizeof name, "synthetic %s %s seed %llu", s->name, quant_type_name(p->type),
             (unsigned long long)p->seed);
    gb_kv_str(b, "general.name", name);
    gb_kv_u32(b, "llama.block_count", (uint32_t)s->n_layers);
    gb_kv_u32(b, "llama.context_length", (uint32_t)p->ctx);
    gb_kv_u32(b, "llama.embedding_length", (uint32_t)s->n_embd);
    gb_kv_u32(b, "llama.feed_forward_length", (uint32_t)s->n_ff);
    gb_kv_u32(b, "llama.attention.head_count", (uint32_t)s->n_heads);
    gb_kv_u32(b, "llama.attention.head_count_kv", (uint32_t)s->n_kv_heads);
    gb_kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gb_kv_f32(b, "llama.rope.freq_base", s->rope_base);
    gb_kv_u32(b, "llama.rope.dimension_count", (uint32_t)(s->n_embd / s->n_heads));
    gb_kv_u32(b, "llama.vocab_size", (uint32_t)s->n_vocab);
    gb_kv_u32(b, "general.alignment", ALIGNMENT);
    header_tokenizer(b, s->n_vocab); /* 6 keys */
    if (p->sampling_temp) gb_kv_f32(b, "general.sampling.temp", strtof(p->sampling_temp, NULL));
    if (p->sampling_top_k >= 0) gb_kv_u32(b, "general.sampling.top_k", (uint32_t)p->sampling_top_k);
    if (p->pooling_type) gb_kv_u32(b, "llama.pooling_type", (uint32_t)p->pooling_type);
    for (int i = 0; i < p->n; i++) {
        const tensor *t = &p->t[i];
        int64_t ne[2] = {t->ne0, t->ne1};
        gb_tensor_info(b, t->name, t->vector ? 1 : 2, ne, t->type, t->offset);
    }
    gb_pad(b, ALIGNMENT);
}

/* ---- the data ---- */

/* splitmix64: a seeded stream per tensor. */
static uint64_t next_u64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static float next_uniform(uint64_t *state) { /* [-1, 1) */
    return (float)(next_u64(state) >> 40) / (float)(1u << 23) - 1.0f;
}

/* llama3's RoPE scaling as llama.cpp stores it: a divisor per frequency. */
static float llama3_freq_factor(const model_shape *s, int64_t i, int64_t dh) {
    const double original_ctx = 8192, low = 1.0, high = 4.0, factor = s->llama3_factor;
    double freq = pow((double)s->rope_base, -2.0 * (double)i / (double)dh);
    double wavelen = 2.0 * M_PI / freq;
    if (wavelen < original_ctx / high) return 1.0f;
    if (wavelen > original_ctx / low) return (float)factor;
    double smooth = (original_ctx / wavelen - low) / (high - low);
    return (float)(1.0 / ((1.0 - smooth) / factor + smooth));
}

static void fill_row(const plan *p, const tensor *t, uint64_t *rng, float *row) {
    const float limit = sqrtf(3.0f / (float)t->ne0);
    for (int64_t e = 0; e < t->ne0; e++) {
        switch (t->fill) {
        case FILL_MATRIX: row[e] = limit * next_uniform(rng); break;
        case FILL_NORM: row[e] = 1.0f + 0.1f * next_uniform(rng); break;
        case FILL_ROPE_FREQS: row[e] = llama3_freq_factor(p->shape, e, 2 * t->ne0); break;
        }
    }
}

static int write_data(FILE *f, const plan *p) {
    size_t max_row = 0;
    int64_t max_ne0 = 0;
    for (int i = 0; i < p->n; i++) {
        size_t rb = quant_row_bytes(p->t[i].type, p->t[i].ne0);
        if (rb > max_row) max_row = rb;
        if (p->t[i].ne0 > max_ne0) max_ne0 = p->t[i].ne0;
    }
    float *row = malloc(sizeof *row * (size_t)max_ne0);
    unsigned char *bytes = malloc(max_row + ALIGNMENT);
    if (!row || !bytes) return -1;
    memset(bytes, 0, max_row + ALIGNMENT);
    uint64_t written = 0;
    int rc = 0;
    for (int i = 0; i < p->n && rc == 0; i++) {
        const tensor *t = &p->t[i];
        uint64_t rng = p->seed * 0x100000001B3ULL + (uint64_t)i; /* one stream per tensor */
        size_t rb = quant_row_bytes(t->type, t->ne0);
        for (int64_t r = 0; r < t->ne1 && rc == 0; r++) {
            fill_row(p, t, &rng, row);
            quant_quantize_row(t->type, bytes, row, t->ne0);
            if (fwrite(bytes, 1, rb, f) != rb) rc = -1;
            written += rb;
        }
        size_t pad = (size_t)((ALIGNMENT - written % ALIGNMENT) % ALIGNMENT);
        memset(bytes, 0, pad);
        if (rc == 0 && pad && fwrite(bytes, 1, pad, f) != pad) rc = -1;
        written += pad;
    }
    free(row);
    free(bytes);
    return rc;
}

/* mkstemp makes the file 0600; a model is as readable as any file the user writes. */
static int fchmod_path(const char *path) {
    mode_t mask = umask(0);
    umask(mask);
    return chmod(path, 0666 & ~mask);
}

static quant_type parse_type(const char *s) {
    static const quant_type TYPES[] = {QUANT_F32, QUANT_F16, QUANT_BF16, QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_1};
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (strcmp(s, quant_type_name(TYPES[i])) == 0) return TYPES[i];
    die("--type %s: not one of F32, F16, BF16, Q8_0, Q4_0, Q4_1", s);
    return QUANT_F32;
}

static uint64_t parse_u64(const char *flag, const char *s, uint64_t lo, uint64_t hi) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] < '0' || s[0] > '9' || v < lo || v > hi) {
        fprintf(stderr, "mkmodel: %s %s: expected an integer %llu..%llu\n", flag, s, (unsigned long long)lo,
                (unsigned long long)hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    plan *p = calloc(1, sizeof *p);
    if (!p) return 1;
    const char *out = NULL, *shape = NULL, *type = NULL;
    p->seed = 1;
    p->sampling_top_k = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) die("%s: needs a value (see --help)", a);
        const char *v = argv[++i];
        if (strcmp(a, "--shape") == 0)
            shape = v;
        else if (strcmp(a, "--type") == 0)
            type = v;
        else if (strcmp(a, "--seed") == 0)
            p->seed = parse_u64(a, v, 0, UINT64_MAX);
        else if (strcmp(a, "--ctx") == 0)
            p->ctx = (int64_t)parse_u64(a, v, 16, 1u << 24);
        else if (strcmp(a, "--sampling-temp") == 0) {
            char *end;
            double t = strtod(v, &end);
            if (end == v || *end || !(t >= 0 && t <= 2)) die("--sampling-temp %s: not a number between 0 and 2", v);
            p->sampling_temp = v;
        } else if (strcmp(a, "--sampling-top-k") == 0)
            p->sampling_top_k = (int)parse_u64(a, v, 0, 1u << 20);
        else if (strcmp(a, "--pooling-type") == 0)
            p->pooling_type = (int)parse_u64(a, v, 1, 3);
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0)
            out = v;
        else
            die("%s: unknown flag (see --help)", a);
    }
    if (!shape || !type || !out) {
        usage(stderr);
        return 2;
    }
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
        if (strcmp(shape, SHAPES[i].name) == 0) p->shape = &SHAPES[i];
    if (!p->shape) die("--shape %s: not one of stories260k, smollm2-135m, llama-1b, llama-8b", shape);
    p->type = parse_type(type);
    if (p->ctx == 0) p->ctx = p->shape->ctx;
    plan_tensors(p);

    gguf_builder b;
    gb_init(&b);
    header(&b, p);
    /* into a temporary file beside it, renamed over `out` only when complete: a failed
     * or interrupted run never leaves a truncated model or removes what `out` was */
    char *tmp = malloc(strlen(out) + 16);
    if (!tmp) return 1;
    sprintf(tmp, "%s.tmp-XXXXXX", out);
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        fprintf(stderr, "mkmodel: cannot write %s: %s\n", out, strerror(errno));
        if (fd >= 0) close(fd), unlink(tmp);
        return 1;
    }
    int rc = !b.failed && fwrite(b.buf, 1, b.len, f) == b.len ? write_data(f, p) : -1;
    gb_free(&b);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) rc = -1;
    if (fclose(f) != 0) rc = -1;
    if (rc == 0 && (fchmod_path(tmp) != 0 || rename(tmp, out) != 0)) rc = -1;
    if (rc != 0) {
        fprintf(stderr, "mkmodel: writing %s failed: %s\n", out, strerror(errno));
        unlink(tmp);
        free(tmp);
        return 1;
    }
    free(tmp);
    printf("mkmodel: wrote %s (%s, %s, %d tensors, seed %llu)\n", out, p->shape->name, quant_type_name(p->type), p->n,
           (unsigned long long)p->seed);
    free(p);
    return 0;
}

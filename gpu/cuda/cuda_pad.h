/* cuda_pad.h: how the CUDA backend stages a step's arrays for the device, and which
 * steps it pads to a graph bucket. Plain C (host code, no CUDA types, no C-only syntax,
 * so cuda_step.cu includes it as C++), so the CPU's unit tests check the decision and
 * the layout (tests/unit/gpu/test_cuda_pad.c) on machines without a GPU.
 *
 * Legend: T = tokens in the step, S = sequences, B = tokens per KV block, M = the blocks
 * the step's longest sequence uses, Tb and Mb = T and M rounded up to their buckets.
 *
 * A step can be replayed from a captured graph when every step of its bucket launches
 * the same kernels with the same shapes on the same buffers (cuda_graph.cu). The steps
 * that qualify are generation steps of short runs: each sequence's tokens are one run of
 * consecutive rows, sequences numbered 0, 1, ... in row order, and either every run is
 * one token (a decode batch) or every row wants logits and no run is longer than
 * CUDA_GRAPH_MAX_RUN (a speculative verify step: each sequence's last token and its
 * drafts). A prefill chunk (logits on its last row at most) never qualifies, so prefill
 * keeps the tiled attention kernels. Such a step is padded to Tb tokens and Tb sequences:
 * the real sequences first, then one scratch sequence per padding token (token 0 at
 * position 0, every block the pool's scratch block), then sequences with no token, which
 * hold the scratch block too. So its shapes depend on Tb and Mb alone, a decode step and
 * a verify step of one bucket share a graph, and attention takes the per-(token, head)
 * kernels, whose grid does not depend on the runs (a verify row reads its sequence up to
 * its own position, as a prefill row does).
 *
 * The device buffer (int32s): tokens, pos, seq (Tb each), seq_len (Sb), block table (Sb
 * x Mb), logit rows, hidden rows. Offsets depend only on (Tb, Sb, Mb), so a graph's
 * captured pointers stay valid for every later step of its bucket. Only the blocks a
 * sequence uses are copied, the rest of its table row is the scratch block, so no
 * unchecked block id reaches a kernel.
 */
#ifndef SPINDLE_GPU_CUDA_PAD_H
#define SPINDLE_GPU_CUDA_PAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gpu/device.h"

/* Steps of up to this many tokens may be padded; runs of up to CUDA_GRAPH_MAX_RUN tokens
 * per sequence (a decode token and up to 16 drafts, --spec-k's bound); CUDA_GRAPH_CACHE
 * captures are kept. */
enum { CUDA_GRAPH_MAX_TOKENS = 256, CUDA_GRAPH_MAX_RUN = 17, CUDA_GRAPH_CACHE = 64, CUDA_GRAPH_MAX_FAILURES = 3 };

/* T rounded up to its bucket: 1, 2, 4, 8, then multiples of 8 (little padding, few
 * buckets). */
static inline int32_t cuda_pad_tokens(int32_t t) {
    if (t > 8) return (t + 7) / 8 * 8;
    int32_t b = 1;
    while (b < t) b *= 2;
    return b;
}

/* M rounded up to a power of two. */
static inline int32_t cuda_pad_width(int32_t m) {
    int32_t b = 1;
    while (b < m) b *= 2;
    return b;
}

/* Blocks a sequence of len tokens occupies. */
static inline int32_t cuda_pad_blocks_used(int32_t len, int32_t block_size) {
    return (len + block_size - 1) / block_size;
}

/* Whether the step is a generation step of short runs (see above). */
static inline bool cuda_pad_short_runs(const dev_step *s) {
    const int32_t n = s->n_tokens;
    if (n < 1 || n > CUDA_GRAPH_MAX_TOKENS || s->seq[0] != 0) return false;
    int32_t run = 1, longest = 1;
    for (int32_t t = 1; t < n; t++) {
        if (s->seq[t] == s->seq[t - 1]) {
            if (++run > longest) longest = run;
        } else if (s->seq[t] == s->seq[t - 1] + 1) {
            run = 1;
        } else {
            return false;
        }
    }
    if (s->seq[n - 1] != s->n_seqs - 1) return false;
    return longest == 1 || (longest <= CUDA_GRAPH_MAX_RUN && s->n_logits == n);
}

/* The staged step's shape and the offsets (in int32s) of its arrays. */
typedef struct cuda_pad_layout {
    bool padded;                 /* a short-run step, padded to its bucket */
    int32_t tokens, seqs, width; /* Tb, Sb, Mb (T, S, M when not padded) */
    size_t pos, seq, seq_len;    /* tokens are at 0 */
    size_t table, logit_rows, hidden_rows;
    size_t total; /* int32s in all */
} cuda_pad_layout;

/* The layout of host (a step dev_step_begin checked) for a pool of block_size tokens per
 * block, whose activations hold max_tokens rows: a padded step's Tb never passes that
 * (nor falls below T). */
static inline cuda_pad_layout cuda_pad_plan(const dev_step *host, int32_t block_size, int64_t max_tokens) {
    cuda_pad_layout l;
    memset(&l, 0, sizeof l);
    int32_t m = 1; /* M */
    for (int32_t q = 0; q < host->n_seqs; q++) {
        const int32_t used = cuda_pad_blocks_used(host->seq_len[q], block_size);
        if (used > m) m = used;
    }
    l.padded = cuda_pad_short_runs(host);
    l.tokens = host->n_tokens;
    l.seqs = host->n_seqs;
    l.width = m;
    if (l.padded) {
        l.tokens = cuda_pad_tokens(host->n_tokens);
        if (l.tokens > max_tokens) l.tokens = max_tokens > host->n_tokens ? (int32_t)max_tokens : host->n_tokens;
        l.seqs = l.tokens;
        l.width = cuda_pad_width(m);
    }
    l.pos = (size_t)l.tokens;
    l.seq = 2 * (size_t)l.tokens;
    l.seq_len = 3 * (size_t)l.tokens;
    l.table = l.seq_len + (size_t)l.seqs;
    l.logit_rows = l.table + (size_t)l.seqs * (size_t)l.width;
    l.hidden_rows = l.logit_rows + (size_t)host->n_logits;
    l.total = l.hidden_rows + (size_t)host->n_hidden;
    return l;
}

/* Writes host's arrays into h (l.total int32s) as l lays them out, the padding and the
 * rest of each table row holding scratch_block. */
static inline void cuda_pad_stage(const dev_step *host, const cuda_pad_layout *l, int32_t block_size,
                                  int32_t scratch_block, int32_t *h) {
    const int32_t t = host->n_tokens, s = host->n_seqs, mb = l->width;
    int32_t *tokens = h, *pos = h + l->pos, *seq = h + l->seq, *seq_len = h + l->seq_len, *table = h + l->table;
    memcpy(tokens, host->tokens, sizeof(int32_t) * (size_t)t);
    memcpy(pos, host->pos, sizeof(int32_t) * (size_t)t);
    memcpy(seq, host->seq, sizeof(int32_t) * (size_t)t);
    memcpy(seq_len, host->seq_len, sizeof(int32_t) * (size_t)s);
    for (int32_t q = 0; q < s; q++) { /* the blocks dev_step_begin checked, then the scratch block */
        const int32_t used = cuda_pad_blocks_used(host->seq_len[q], block_size);
        memcpy(table + (size_t)q * mb, host->block_table + (size_t)q * host->max_blocks,
               sizeof(int32_t) * (size_t)used);
        for (int32_t b = used; b < mb; b++) table[(size_t)q * mb + b] = scratch_block;
    }
    for (int32_t i = t; i < l->tokens; i++) { /* padding: token 0 at position 0 of its own scratch sequence */
        tokens[i] = 0;
        pos[i] = 0;
        seq[i] = s + (i - t);
    }
    for (int32_t q = s; q < l->seqs; q++) { /* the padding's sequences, then unused ones: scratch only */
        seq_len[q] = 1;
        for (int32_t b = 0; b < mb; b++) table[(size_t)q * mb + b] = scratch_block;
    }
    memcpy(h + l->logit_rows, host->logit_rows, sizeof(int32_t) * (size_t)host->n_logits);
    if (host->n_hidden > 0) memcpy(h + l->hidden_rows, host->hidden_rows, sizeof(int32_t) * (size_t)host->n_hidden);
}

#endif

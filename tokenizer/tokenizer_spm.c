/* tokenizer_spm.c: SentencePiece-style encoding of one plain-text fragment.
 *
 * Spaces become "▁" (with one more in front when the dummy prefix is on), the text is
 * cut into UTF-8 characters, and the adjacent pair whose concatenation is the
 * highest-scoring token is merged again and again (ties: leftmost first) until no pair
 * forms a token. A symbol that is not a token at the end falls back to its bytes as
 * <0xNN> tokens, or to <unk> when the vocab has no byte tokens. Only normal and
 * user-defined tokens take part in merges, as in SentencePiece (control, unknown,
 * unused and byte tokens are never formed from text).
 *
 * DESIGN: called by tok_encode on any thread; all scratch memory is allocated per call.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

#define SPM_SPACE     "\xE2\x96\x81" /* U+2581 "▁" */
#define SPM_SPACE_LEN 3

typedef struct spm_symbol {
    int32_t prev, next; /* neighbours in the live chain, -1 at the ends */
    uint32_t start, n;  /* bytes in the escaped text; n == 0 once merged into its left */
} spm_symbol;

typedef struct spm_bigram {
    float score;
    int32_t left, right;
    uint32_t size; /* bytes of left + right when queued: stale entries no longer match */
} spm_bigram;

typedef struct spm_state {
    const tok_vocab *v;
    const char *text; /* escaped */
    spm_symbol *sym;
    spm_bigram *heap; /* max-heap: highest score, then leftmost */
    size_t n_heap, cap_heap;
} spm_state;

static bool spm_mergeable(const tok_vocab *v, int32_t id) {
    uint8_t t = v->tokens[id].type;
    return t == TOK_TYPE_NORMAL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNDEFINED;
}

static bool bigram_before(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(spm_state *s, spm_bigram b) {
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
}

static spm_bigram heap_pop(spm_state *s) {
    spm_bigram top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && bigram_before(&s->heap[child + 1], &s->heap[child])) child++;
        if (!bigram_before(&s->heap[child], &last)) break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* Queues the pair (left, right) when their concatenation is a mergeable token. */
static void try_bigram(spm_state *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const spm_symbol *l = &s->sym[left], *r = &s->sym[right];
    uint32_t size = l->n + r->n;
    int32_t id = tok__lookup(s->v, s->text + l->start, size);
    if (id < 0 || !spm_mergeable(s->v, id)) return;
    if (s->n_heap == s->cap_heap) return; /* cannot happen: capacity covers every pair ever formed */
    spm_bigram b = {s->v->tokens[id].score, left, right, size};
    heap_push(s, b);
}

static sp_status emit_symbol(const tok_vocab *v, const char *p, size_t n, tok__ids *out) {
    int32_t id = tok__lookup(v, p, n);
    if (id >= 0 && spm_mergeable(v, id)) return tok__ids_push(out, id);
    bool all_bytes = true;
    for (size_t i = 0; i < n; i++) all_bytes = all_bytes && v->byte_ids[(unsigned char)p[i]] >= 0;
    if (!all_bytes) return v->unk >= 0 ? tok__ids_push(out, v->unk) : SP_OK;
    for (size_t i = 0; i < n; i++) {
        sp_status st = tok__ids_push(out, v->byte_ids[(unsigned char)p[i]]);
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

sp_status tok__spm_encode(const tok_vocab *v, const char *text, size_t len, bool add_prefix, tok__ids *out) {
    size_t spaces = add_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    size_t esc_len = len + spaces * (SPM_SPACE_LEN - 1) + (add_prefix ? 1 : 0);
    if (esc_len == 0) return SP_OK;

    spm_state s = {.v = v};
    char *esc = malloc(esc_len);
    s.sym = malloc(esc_len * sizeof *s.sym);
    s.cap_heap = 3 * esc_len; /* n-1 first pairs, then at most 2 new pairs per merge */
    s.heap = malloc(s.cap_heap * sizeof *s.heap);
    sp_status st = SP_OK;
    if (!esc || !s.sym || !s.heap) {
        st = sp_fail(SP_ERR_NOMEM, "tokenizer: out of memory encoding %zu bytes", len);
        goto done;
    }

    size_t w = 0;
    if (add_prefix) {
        memcpy(esc, SPM_SPACE, SPM_SPACE_LEN);
        w = SPM_SPACE_LEN;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + w, SPM_SPACE, SPM_SPACE_LEN);
            w += SPM_SPACE_LEN;
        } else {
            esc[w++] = text[i];
        }
    }
    s.text = esc;

    /* One symbol per UTF-8 character; a byte that starts no valid character stands alone. */
    int32_t n_sym = 0;
    for (size_t i = 0; i < esc_len;) {
        size_t n = tok__utf8_valid_len((const unsigned char *)esc + i, esc_len - i);
        if (n == 0) n = 1;
        s.sym[n_sym] = (spm_symbol){n_sym - 1, n_sym + 1, (uint32_t)i, (uint32_t)n};
        n_sym++;
        i += n;
    }
    if (n_sym == 0) goto done;
    s.sym[n_sym - 1].next = -1;
    for (int32_t i = 1; i < n_sym; i++) try_bigram(&s, i - 1, i);

    while (s.n_heap > 0) {
        spm_bigram b = heap_pop(&s);
        spm_symbol *l = &s.sym[b.left], *r = &s.sym[b.right];
        if (l->n == 0 || r->n == 0 || l->next != b.right || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s.sym[r->next].prev = b.left;
        try_bigram(&s, l->prev, b.left);
        try_bigram(&s, b.left, l->next);
    }

    for (int32_t i = 0; i >= 0 && st == SP_OK; i = s.sym[i].next)
        st = emit_symbol(v, esc + s.sym[i].start, s.sym[i].n, out);

done:
    free(s.heap);
    free(s.sym);
    free(esc);
    return st;
}

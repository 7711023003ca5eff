/* tokenizer_bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * A plain-text fragment is first pre-split by the regexes tokenizer.ggml.pre names,
 * applied in order: each regex cuts every piece made so far into its matches and the
 * gaps between them (a piece is never merged across). The regexes run on PCRE2 (UTF,
 * UCP, JIT when available) over the raw bytes, with PCRE2_MATCH_INVALID_UTF so invalid
 * UTF-8 never matches and stays in its own gap piece instead of failing. Each piece's
 * bytes then start as one symbol each (the token of the byte's GPT-2 character) and the
 * adjacent pair with the lowest merge rank is merged again and again (ties: leftmost
 * first), with a binary heap of candidate pairs over a linked list of symbols.
 *
 * DESIGN: the compiled regexes and the merge table are built at load and then only
 * read; every encode call makes its own PCRE2 match data and scratch, so encodes may
 * run on many threads at once.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/log.h"
#include "tokenizer/tokenizer_internal.h"

#define BPE_MAX_REGEX 5

/* Split patterns (from the models' tokenizer.json files). */
#define RE_GPT2         "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define RE_SPACE_TAIL   "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" RE_SPACE_TAIL
#define RE_QWEN2 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" RE_SPACE_TAIL
/* Words as o200k and tekken cut them: an optional lead-in, then upper-then-lower or
 * upper-only letter runs. */
#define RE_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LEAD  "[^\\r\\n\\p{L}\\p{N}]?"
#define RE_GPT4O                                                                                             \
    RE_LEAD RE_UPPER "*" RE_LOWER "+" RE_CONTRACTIONS "?|" RE_LEAD RE_UPPER "+" RE_LOWER "*" RE_CONTRACTIONS \
                     "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" RE_SPACE_TAIL
#define RE_TEKKEN                                                    \
    RE_LEAD RE_UPPER "*" RE_LOWER "+|" RE_LEAD RE_UPPER "+" RE_LOWER \
                     "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" RE_SPACE_TAIL
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"
#define RE_CJK   "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* One pre-tokenizer: the tokenizer.ggml.pre names that select it (llama.cpp's
 * spellings), its regexes in order, and whether a piece that is already a whole
 * token skips the merges (Llama 3 style). */
typedef struct bpe_pre {
    const char *names[20];
    const char *regex[BPE_MAX_REGEX];
    bool ignore_merges;
} bpe_pre;

static const bpe_pre BPE_PRES[] = {
    {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false},
    {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
      "jina-v2-code", "roberta-bpe", "gigachat", "trillion", "granite-docling", "exaone4", "mellum", "modern-bert",
      "a.x-4.0"},
     {RE_GPT2},
     false},
    {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "glm4"},
     {RE_LLAMA3},
     true},
    {{"dbrx", "smaug-bpe", "chatglm-bpe"}, {RE_LLAMA3}, false},
    {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"}, {"\\p{N}", RE_GPT2}, false},
    {{"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez", "kormo"}, {RE_QWEN2}, false},
    {{"deepseek-coder"}, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}, false},
    {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false},
    {{"gpt-4o", "llama4"}, {RE_GPT4O}, false},
    {{"tekken"}, {RE_TEKKEN}, true},
    {{"poro-chat", "bloom", "gpt3-finnish"}, {RE_BLOOM}, false},
    {{"viking"}, {RE_BLOOM, "\\p{N}"}, false},
};

struct tok__bpe {
    const bpe_pre *pre;
    pcre2_code *re[BPE_MAX_REGEX];
    int n_re;
    /* Merge table: key (left id << 32 | right id) -> rank and merged id; open addressing. */
    uint64_t *merge_key; /* UINT64_MAX: empty */
    int32_t *merge_rank;
    int32_t *merge_id;
    size_t merge_mask;
};

/* ---- loading ---------------------------------------------------------------- */

static const bpe_pre *find_pre(gguf_str name) {
    for (size_t i = 0; i < sizeof BPE_PRES / sizeof BPE_PRES[0]; i++)
        for (size_t k = 0; k < 20 && BPE_PRES[i].names[k]; k++)
            if (gguf_str_eq(name, BPE_PRES[i].names[k])) return &BPE_PRES[i];
    return NULL;
}

static size_t merge_slot(const tok__bpe *b, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull; /* both ids reach the slot bits */
    size_t slot = (size_t)(h ^ (h >> 29) ^ (h >> 47)) & b->merge_mask;
    while (b->merge_key[slot] != UINT64_MAX && b->merge_key[slot] != key) slot = (slot + 1) & b->merge_mask;
    return slot;
}

static sp_status load_merges(tok_vocab *v, const gguf_file *f) {
    const char *path = gguf_path(f);
    tok__bpe *b = v->bpe;
    gguf_value_type et;
    uint64_t n;
    sp_status st = gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n);
    if (st == SP_ERR_NOT_FOUND)
        return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.merges is absent (a gpt2 tokenizer needs it)", path);
    if (st != SP_OK) return st;
    if (et != GGUF_TYPE_STRING)
        return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.merges holds %s, want strings", path,
                       gguf_value_type_name(et));
    if (n > INT32_MAX) return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.merges has too many entries", path);
    size_t cap = 64;
    while (cap < n * 2) cap <<= 1;
    b->merge_key = malloc(cap * sizeof *b->merge_key);
    b->merge_rank = malloc(cap * sizeof *b->merge_rank);
    b->merge_id = malloc(cap * sizeof *b->merge_id);
    char *joined = malloc(256);
    size_t joined_cap = 256;
    if (!b->merge_key || !b->merge_rank || !b->merge_id || !joined) {
        free(joined);
        return sp_fail(SP_ERR_NOMEM, "%s: out of memory for %" PRIu64 " merges", path, n);
    }
    memset(b->merge_key, 0xFF, cap * sizeof *b->merge_key);
    b->merge_mask = cap - 1;

    uint64_t skipped = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str m;
        if ((st = gguf_get_arr_str(f, "tokenizer.ggml.merges", i, &m)) != SP_OK) break;
        /* "left right"; the left part may itself start with a space, so look from 1. */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) {
            skipped++;
            continue;
        }
        size_t ln = (size_t)(sp - m.ptr), rn = m.len - ln - 1;
        if (ln + rn > joined_cap) {
            joined_cap = (ln + rn) * 2;
            char *p = realloc(joined, joined_cap);
            if (!p) {
                st = sp_fail(SP_ERR_NOMEM, "%s: out of memory for merges", path);
                break;
            }
            joined = p;
        }
        memcpy(joined, m.ptr, ln);
        memcpy(joined + ln, sp + 1, rn);
        int32_t left = tok__lookup(v, m.ptr, ln), right = tok__lookup(v, sp + 1, rn);
        int32_t merged = tok__lookup(v, joined, ln + rn);
        if (left < 0 || right < 0 || merged < 0) {
            skipped++;
            continue;
        }
        uint64_t key = (uint64_t)left << 32 | (uint32_t)right;
        size_t slot = merge_slot(b, key);
        if (b->merge_key[slot] == key) continue; /* a repeated merge keeps its first rank */
        b->merge_key[slot] = key;
        b->merge_rank[slot] = (int32_t)i;
        b->merge_id[slot] = merged;
    }
    free(joined);
    if (st == SP_OK && skipped > 0)
        sp_log_debug("%s: %" PRIu64 " of %" PRIu64 " merges name texts outside the vocabulary; skipped", path, skipped,
                     n);
    return st;
}

static sp_status compile_regexes(tok__bpe *b, const char *path) {
    for (int i = 0; i < BPE_MAX_REGEX && b->pre->regex[i]; i++) {
        int err;
        PCRE2_SIZE err_off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)b->pre->regex[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return sp_fail(SP_ERR_INTERNAL, "%s: pre-tokenizer regex %d of '%s' does not compile at %zu: %s", path, i,
                           b->pre->names[0], (size_t)err_off, (const char *)msg);
        }
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT the interpreter runs it */
        b->re[b->n_re++] = re;
    }
    return SP_OK;
}

sp_status tok__bpe_load(tok_vocab *v, const gguf_file *f) {
    const char *path = gguf_path(f);
    gguf_str pre_name = {"default", 7};
    sp_status st = gguf_get_str(f, "tokenizer.ggml.pre", &pre_name);
    if (st == SP_ERR_NOT_FOUND) {
        pre_name = (gguf_str){"default", 7};
        sp_log_warn("%s: tokenizer.ggml.pre is absent; using the default pre-tokenizer", path);
    } else if (st != SP_OK) {
        return st;
    }
    const bpe_pre *pre = find_pre(pre_name);
    if (!pre)
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not supported", path,
                       (int)(pre_name.len > 64 ? 64 : pre_name.len), pre_name.ptr);
    v->bpe = calloc(1, sizeof *v->bpe);
    if (!v->bpe) return sp_fail(SP_ERR_NOMEM, "%s: out of memory", path);
    v->bpe->pre = pre;
    if ((st = compile_regexes(v->bpe, path)) != SP_OK) return st;
    return load_merges(v, f);
}

void tok__bpe_free(tok__bpe *b) {
    if (!b) return;
    for (int i = 0; i < b->n_re; i++) pcre2_code_free(b->re[i]);
    free(b->merge_key);
    free(b->merge_rank);
    free(b->merge_id);
    free(b);
}

/* ---- pre-splitting ---------------------------------------------------------- */

typedef struct span {
    size_t off, len;
} span;

typedef struct span_list {
    span *data;
    size_t n, cap;
} span_list;

static bool span_push(span_list *l, size_t off, size_t len) {
    if (!sp_grow((void **)&l->data, &l->cap, l->n + 1, sizeof *l->data)) return false;
    l->data[l->n++] = (span){off, len};
    return true;
}

/* Cuts piece s of text by re into matches and the gaps between them, appended to out. */
static bool split_span(const pcre2_code *re, pcre2_match_data *md, const char *text, span s, span_list *out) {
    PCRE2_SPTR subject = (PCRE2_SPTR)(text + s.off);
    size_t pos = 0, gap = 0;
    while (pos < s.len) {
        int rc = pcre2_match(re, subject, s.len, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(re, subject, s.len, pos, PCRE2_NO_JIT, md, NULL);
        if (rc < 0) break; /* no match, or a resource limit: the rest stays one piece */
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms || me > s.len) { /* empty match: step over one character */
            size_t step = tok__utf8_valid_len(subject + ms, s.len - ms);
            pos = ms + (step ? step : 1);
            continue;
        }
        if (ms > gap && !span_push(out, s.off + gap, ms - gap)) return false;
        if (!span_push(out, s.off + ms, me - ms)) return false;
        pos = gap = me;
    }
    if (gap < s.len && !span_push(out, s.off + gap, s.len - gap)) return false;
    return true;
}

/* ---- merging ---------------------------------------------------------------- */

typedef struct bpe_symbol {
    int32_t id; /* token, -1 when the byte has none */
    int32_t prev, next;
    bool dead; /* merged into its left neighbour */
} bpe_symbol;

typedef struct bpe_pair {
    int32_t rank;
    int32_t left, right;
    int32_t left_id, right_id; /* the pair as queued: stale entries no longer match */
    int32_t merged;
} bpe_pair;

typedef struct bpe_scratch {
    bpe_symbol *sym;
    bpe_pair *heap;
    char *enc; /* piece in the GPT-2 alphabet (ignore_merges lookups) */
    size_t cap, n_heap;
} bpe_scratch;

static bool pair_before(const bpe_pair *a, const bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(bpe_scratch *s, bpe_pair p) {
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = p;
}

static bpe_pair heap_pop(bpe_scratch *s) {
    bpe_pair top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && pair_before(&s->heap[child + 1], &s->heap[child])) child++;
        if (!pair_before(&s->heap[child], &last)) break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static void try_pair(const tok__bpe *b, bpe_scratch *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    int32_t l = s->sym[left].id, r = s->sym[right].id;
    if (l < 0 || r < 0) return;
    uint64_t key = (uint64_t)l << 32 | (uint32_t)r;
    size_t slot = merge_slot(b, key);
    if (b->merge_key[slot] != key) return;
    heap_push(s, (bpe_pair){b->merge_rank[slot], left, right, l, r, b->merge_id[slot]});
}

static bool scratch_reserve(bpe_scratch *s, size_t n) {
    if (n <= s->cap) return true;
    size_t cap = n < 256 ? 256 : n * 2;
    bpe_symbol *sym = realloc(s->sym, cap * sizeof *sym);
    if (sym) s->sym = sym;
    bpe_pair *heap = realloc(s->heap, 3 * cap * sizeof *heap);
    if (heap) s->heap = heap;
    char *enc = realloc(s->enc, 2 * cap);
    if (enc) s->enc = enc;
    if (!sym || !heap || !enc) return false;
    s->cap = cap;
    return true;
}

/* A byte whose GPT-2 character is not in the vocab (SmolLM2 has none for 0xC0, 0xFF,
 * ...) is dropped, as Hugging Face and llama.cpp do: its <unk> is often an end token. */
static sp_status push_known(int32_t id, tok__ids *out) {
    return id >= 0 ? tok__ids_push(out, id) : SP_OK;
}

static sp_status bpe_piece(const tok_vocab *v, const unsigned char *p, size_t n, bpe_scratch *s, tok__ids *out) {
    const tok__bpe *b = v->bpe;
    if (n == 1) return push_known(v->byte_ids[p[0]], out);
    if (!scratch_reserve(s, n)) return sp_fail(SP_ERR_NOMEM, "tokenizer: out of memory encoding %zu bytes", n);
    if (b->pre->ignore_merges) {
        size_t w = 0;
        for (size_t i = 0; i < n; i++) w += tok__utf8_encode(tok__gpt2_byte_to_cp(p[i]), s->enc + w);
        int32_t id = tok__lookup(v, s->enc, w);
        if (id >= 0) return tok__ids_push(out, id);
    }
    for (size_t i = 0; i < n; i++)
        s->sym[i] = (bpe_symbol){v->byte_ids[p[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, false};
    s->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) try_pair(b, s, (int32_t)i, (int32_t)i + 1);
    while (s->n_heap > 0) {
        bpe_pair q = heap_pop(s);
        bpe_symbol *l = &s->sym[q.left], *r = &s->sym[q.right];
        if (l->dead || r->dead || l->next != q.right || l->id != q.left_id || r->id != q.right_id) continue;
        l->id = q.merged;
        l->next = r->next;
        r->dead = true;
        if (r->next >= 0) s->sym[r->next].prev = q.left;
        try_pair(b, s, l->prev, q.left);
        try_pair(b, s, q.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) {
        sp_status st = push_known(s->sym[i].id, out);
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

sp_status tok__bpe_encode(const tok_vocab *v, const char *text, size_t len, tok__ids *out) {
    const tok__bpe *b = v->bpe;
    span_list a = {0}, c = {0};
    bpe_scratch s = {0};
    sp_status st = SP_OK;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md || !span_push(&a, 0, len)) goto nomem;
    for (int r = 0; r < b->n_re; r++) {
        c.n = 0;
        for (size_t i = 0; i < a.n; i++)
            if (!split_span(b->re[r], md, text, a.data[i], &c)) goto nomem;
        span_list t = a;
        a = c;
        c = t;
    }
    for (size_t i = 0; i < a.n && st == SP_OK; i++)
        st = bpe_piece(v, (const unsigned char *)text + a.data[i].off, a.data[i].len, &s, out);
    goto done;
nomem:
    st = sp_fail(SP_ERR_NOMEM, "tokenizer: out of memory pre-splitting %zu bytes", len);
done:
    pcre2_match_data_free(md);
    free(a.data);
    free(c.data);
    free(s.sym);
    free(s.heap);
    free(s.enc);
    return st;
}

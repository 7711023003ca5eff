/* tokenizer.c: the vocabulary (tokenizer.ggml.* read from GGUF into one immutable
 * tok_vocab), the special-token matcher, the encode driver and every decoder.
 *
 * Encoding: the text is cut at control and user-defined tokens written literally in it
 * (a byte trie, leftmost-longest; user-defined tokens are cut even without parse_special,
 * as Hugging Face does with added tokens), and each plain fragment in between goes to
 * tokenizer_spm.c or tokenizer_bpe.c. Decoding reads a per-token cache of decoded bytes
 * built at load, so it is a copy per token.
 *
 * DESIGN: the vocab is built once by tok_vocab_load and never written again; encoders
 * and decoders take it const and keep their scratch memory per call, so any number of
 * threads may tokenize at once. A tok_decoder is owned by the one thread that feeds it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/log.h"
#include "tokenizer/tokenizer_internal.h"

#define TOK_ID_NONE_U32    4294967295ll
#define TOK_MAX_TEXT_BYTES ((size_t)1 << 29) /* keeps symbol indices in int32 */
#define TOK_REPLACEMENT    "\xEF\xBF\xBD"    /* U+FFFD */

/* Token texts llama.cpp treats as control tokens whatever type the file gives them
 * (converters often store them as user-defined), so plain text never produces them:
 * end-of-generation markers, and fill-in-the-middle markers, of which pad, repo and
 * file-separator also end generation. */
typedef struct tok_marker {
    const char *text;
    bool eog;
} tok_marker;

static const tok_marker CONTROL_MARKERS[] = {
    {"<|eot_id|>", true},
    {"<|im_end|>", true},
    {"<|end|>", true},
    {"<end_of_turn>", true},
    {"<|endoftext|>", true},
    {"</s>", true},
    {"<|eom_id|>", true},
    {"<EOT>", true},
    {"_<EOT>", true},
    {"<|end_of_text|>", true},
    {"<end_of_utterance>", true},
    {"<eos>", true},
    {"<\uFF5Cend\u2581of\u2581sentence\uFF5C>", true}, /* DeepSeek */
    {"<|fim_prefix|>", false},
    {"<fim-prefix>", false},
    {"<fim_prefix>", false},
    {"<PRE>", false},
    {"\u2581<PRE>", false},
    {"<|code_prefix|>", false},
    {"<|prefix|>", false},
    {"<|fim_suffix|>", false},
    {"<fim-suffix>", false},
    {"<fim_suffix>", false},
    {"<SUF>", false},
    {"\u2581<SUF>", false},
    {"<|code_suffix|>", false},
    {"<|suffix|>", false},
    {"<|fim_middle|>", false},
    {"<fim-middle>", false},
    {"<fim_middle>", false},
    {"<MID>", false},
    {"\u2581<MID>", false},
    {"<|code_middle|>", false},
    {"<|middle|>", false},
    {"<\uFF5Cfim\u2581begin\uFF5C>", false}, /* DeepSeek prefix, suffix, middle */
    {"<\uFF5Cfim\u2581hole\uFF5C>", false},
    {"<\uFF5Cfim\u2581end\uFF5C>", false},
    {"<|fim_pad|>", true},
    {"<fim-pad>", true},
    {"<fim_pad>", true},
    {"<PAD>", true},
    {"<|fim_repo|>", true},
    {"<|repo_name|>", true},
    {"<fim-repo>", true},
    {"<REPO>", true},
    {"<reponame>", true},
    {"<|file_sep|>", true},
};

/* ---- small helpers ---------------------------------------------------------- */

sp_status tok__ids_push(tok__ids *out, int32_t id) {
    if (!sp_grow((void **)&out->data, &out->cap, out->n + 1, sizeof *out->data))
        return sp_fail(SP_ERR_NOMEM, "tokenizer: out of memory for %zu token ids", out->n + 1);
    out->data[out->n++] = id;
    return SP_OK;
}

static const char *token_text(const tok_vocab *v, int32_t id) {
    return v->text_pool + v->tokens[id].text_off;
}

int32_t tok__lookup(const tok_vocab *v, const char *text, size_t len) {
    if (len == 0) return -1;
    uint64_t h = tok__hash(text, len);
    uint32_t hi = (uint32_t)(h >> 32);
    for (size_t slot = (size_t)h & v->text_index_mask;; slot = (slot + 1) & v->text_index_mask) {
        const tok__slot *e = &v->text_index[slot];
        if (e->id < 0) return -1;
        if (e->hash_hi != hi) continue;
        const tok__token *t = &v->tokens[e->id];
        if (t->text_len == len && memcmp(token_text(v, e->id), text, len) == 0) return e->id;
    }
}

/* ---- loading ---------------------------------------------------------------- */

/* Copies tokenizer.ggml.tokens into one NUL-separated pool. */
static sp_status load_texts(tok_vocab *v, const gguf_file *f) {
    const char *path = gguf_path(f);
    gguf_value_type et;
    uint64_t n;
    sp_status st = gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n);
    if (st != SP_OK) return st; /* the getter's message names the file and the key */
    if (et != GGUF_TYPE_STRING)
        return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.tokens holds %s, want strings", path,
                       gguf_value_type_name(et));
    if (n == 0 || n > INT32_MAX)
        return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %" PRIu64 " tokens", path, n);
    v->n_tokens = (int32_t)n;
    v->tokens = calloc(n, sizeof *v->tokens);
    if (!v->tokens) return sp_fail(SP_ERR_NOMEM, "%s: out of memory for %" PRIu64 " tokens", path, n);

    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        if ((st = gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s)) != SP_OK) return st;
        if (s.len > UINT32_MAX / 2) return sp_fail(SP_ERR_FORMAT, "%s: token %" PRIu64 " is too long", path, i);
        total += s.len + 1;
        if (total > UINT32_MAX) return sp_fail(SP_ERR_FORMAT, "%s: token texts exceed 4 GiB", path);
    }
    v->text_pool = malloc(total);
    if (!v->text_pool) return sp_fail(SP_ERR_NOMEM, "%s: out of memory for token texts", path);
    uint32_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        if ((st = gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s)) != SP_OK) return st;
        memcpy(v->text_pool + off, s.ptr, s.len);
        v->text_pool[off + s.len] = '\0';
        v->tokens[i].text_off = off;
        v->tokens[i].text_len = (uint32_t)s.len;
        v->tokens[i].type = TOK_TYPE_NORMAL;
        off += (uint32_t)s.len + 1;
    }
    return SP_OK;
}

/* tokenizer.ggml.scores (SPM merge priorities) and tokenizer.ggml.token_type; both optional. */
static sp_status load_scores_types(tok_vocab *v, const gguf_file *f) {
    const char *path = gguf_path(f);
    gguf_value_type et;
    uint64_t n;
    const void *data;
    sp_status st = gguf_get_arr(f, "tokenizer.ggml.scores", &et, &n);
    if (st == SP_OK) {
        if (et != GGUF_TYPE_FLOAT32 && et != GGUF_TYPE_INT32)
            return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.scores holds %s, want float32", path,
                           gguf_value_type_name(et));
        if ((st = gguf_get_arr_data(f, "tokenizer.ggml.scores", et, &data, &n)) != SP_OK) return st;
        if (n < (uint64_t)v->n_tokens)
            return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.scores has %" PRIu64 " entries for %d tokens", path, n,
                           v->n_tokens);
        for (int32_t i = 0; i < v->n_tokens; i++) {
            if (et == GGUF_TYPE_FLOAT32) {
                memcpy(&v->tokens[i].score, (const char *)data + 4 * (size_t)i, 4);
            } else {
                int32_t s;
                memcpy(&s, (const char *)data + 4 * (size_t)i, 4);
                v->tokens[i].score = (float)s;
            }
        }
    } else if (st != SP_ERR_NOT_FOUND) {
        return st;
    }

    st = gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n);
    if (st == SP_ERR_NOT_FOUND) return SP_OK;
    if (st != SP_OK) return st;
    if (et != GGUF_TYPE_INT32)
        return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.token_type holds %s, want int32", path,
                       gguf_value_type_name(et));
    if ((st = gguf_get_arr_data(f, "tokenizer.ggml.token_type", et, &data, &n)) != SP_OK) return st;
    if (n < (uint64_t)v->n_tokens)
        return sp_fail(SP_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %" PRIu64 " entries for %d tokens", path, n,
                       v->n_tokens);
    for (int32_t i = 0; i < v->n_tokens; i++) {
        int32_t t;
        memcpy(&t, (const char *)data + 4 * (size_t)i, 4);
        v->tokens[i].type = (t >= TOK_TYPE_NORMAL && t <= TOK_TYPE_BYTE) ? (uint8_t)t : TOK_TYPE_UNDEFINED;
    }
    return SP_OK;
}

/* Hash of text -> id. A text stored twice maps to its last id (as llama.cpp). */
static sp_status build_text_index(tok_vocab *v) {
    size_t cap = 64;
    while (cap < (size_t)v->n_tokens * 2) cap <<= 1;
    v->text_index = malloc(cap * sizeof *v->text_index);
    if (!v->text_index) return sp_fail(SP_ERR_NOMEM, "tokenizer: out of memory for the token index");
    for (size_t i = 0; i < cap; i++) v->text_index[i] = (tok__slot){-1, 0};
    v->text_index_mask = cap - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const tok__token *t = &v->tokens[id];
        if (t->text_len == 0) continue;
        uint64_t h = tok__hash(token_text(v, id), t->text_len);
        size_t slot = (size_t)h & v->text_index_mask;
        for (; v->text_index[slot].id >= 0; slot = (slot + 1) & v->text_index_mask) {
            int32_t other = v->text_index[slot].id;
            if (v->text_index[slot].hash_hi == (uint32_t)(h >> 32) && v->tokens[other].text_len == t->text_len &&
                memcmp(token_text(v, other), token_text(v, id), t->text_len) == 0)
                break;
        }
        v->text_index[slot] = (tok__slot){id, (uint32_t)(h >> 32)};
    }
    return SP_OK;
}

/* A special id key: absent -> dflt; 4294967295 or negative -> none; past the vocab ->
 * none with a warning (as llama.cpp, a bad id is not fatal). */
static sp_status load_special_id(const tok_vocab *v, const gguf_file *f, const char *key, int32_t dflt, int32_t *out) {
    int64_t x;
    sp_status st = gguf_get_i64(f, key, &x);
    *out = dflt;
    if (st == SP_ERR_NOT_FOUND) return SP_OK;
    if (st != SP_OK) return st;
    if (x < 0 || x == TOK_ID_NONE_U32) {
        *out = -1;
    } else if (x >= v->n_tokens) {
        sp_log_warn("%s: %s = %" PRId64 " is past the vocabulary (%d tokens); ignored", gguf_path(f), key, x,
                    v->n_tokens);
        *out = -1;
    } else {
        *out = (int32_t)x;
    }
    return SP_OK;
}

static sp_status load_bool(const gguf_file *f, const char *key, bool dflt, bool *out) {
    sp_status st = gguf_get_bool(f, key, out);
    if (st == SP_ERR_NOT_FOUND) {
        *out = dflt;
        return SP_OK;
    }
    return st;
}

/* Phi-3's added tokens swallow the whitespace after them (rstrip in its
 * tokenizer.json, which GGUF does not carry); llama.cpp recognizes the model by
 * general.name, and so do we. */
static sp_status load_rstrip(tok_vocab *v, const gguf_file *f) {
    gguf_str name;
    if (gguf_get_str(f, "general.name", &name) != SP_OK) return SP_OK; /* absent or not text: not Phi-3 */
    char lower[128];
    size_t n = name.len < sizeof lower - 1 ? name.len : sizeof lower - 1;
    for (size_t i = 0; i < n; i++) {
        char c = name.ptr[i];
        lower[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    lower[n] = '\0';
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3")) return SP_OK;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        tok__token *t = &v->tokens[id];
        const char *s = token_text(v, id);
        t->rstrip = (t->type == TOK_TYPE_CONTROL || t->type == TOK_TYPE_USER_DEFINED) && strcmp(s, "<s>") != 0 &&
                    strcmp(s, "<unk>") != 0 && strcmp(s, "<|endoftext|>") != 0;
    }
    return SP_OK;
}

static sp_status load_specials(tok_vocab *v, const gguf_file *f) {
    bool spm = v->kind == TOK_KIND_SPM;
    sp_status st;
    /* SentencePiece Llama vocabularies put <unk>, <s>, </s> at 0, 1, 2 when unsaid. */
    if ((st = load_special_id(v, f, "tokenizer.ggml.bos_token_id", spm && v->n_tokens > 1 ? 1 : -1, &v->bos)) ||
        (st = load_special_id(v, f, "tokenizer.ggml.eos_token_id", spm && v->n_tokens > 2 ? 2 : -1, &v->eos)) ||
        (st = load_special_id(v, f, "tokenizer.ggml.eot_token_id", -1, &v->eot)) ||
        (st = load_special_id(v, f, "tokenizer.ggml.eom_token_id", -1, &v->eom)) ||
        (st = load_special_id(v, f, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, &v->unk)) ||
        (st = load_special_id(v, f, "tokenizer.ggml.padding_token_id", -1, &v->pad)) ||
        (st = load_special_id(v, f, "tokenizer.ggml.seperator_token_id", -1, &v->sep)) ||
        (st = load_bool(f, "tokenizer.ggml.add_bos_token", spm, &v->add_bos)) ||
        (st = load_bool(f, "tokenizer.ggml.add_space_prefix", true, &v->add_space_prefix)))
        return st;
    if (!spm) v->add_space_prefix = false; /* the dummy prefix is a SentencePiece rule */

    int32_t marks[] = {v->eos, v->eot, v->eom};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
        if (marks[i] >= 0) v->tokens[marks[i]].eog = true;
    for (size_t k = 0; k < sizeof CONTROL_MARKERS / sizeof CONTROL_MARKERS[0]; k++) {
        int32_t id = tok__lookup(v, CONTROL_MARKERS[k].text, strlen(CONTROL_MARKERS[k].text));
        if (id < 0) continue;
        v->tokens[id].type = TOK_TYPE_CONTROL;
        if (CONTROL_MARKERS[k].eog) v->tokens[id].eog = true;
    }
    return load_rstrip(v, f);
}

static void load_byte_ids(tok_vocab *v) {
    for (int b = 0; b < 256; b++) {
        char buf[8];
        size_t n;
        int32_t id;
        if (v->kind == TOK_KIND_SPM) {
            n = (size_t)snprintf(buf, sizeof buf, "<0x%02X>", b);
            id = tok__lookup(v, buf, n);
            if (id < 0 && b < 0x80) {
                buf[0] = (char)b;
                id = tok__lookup(v, buf, 1);
            }
        } else {
            /* Only a normal token: deepseek-coder's user-defined "õ" (the GPT-2
             * character of 0xF5) stands for the text "õ", not for the byte. */
            n = tok__utf8_encode(tok__gpt2_byte_to_cp((uint8_t)b), buf);
            id = tok__lookup(v, buf, n);
            if (id >= 0 && v->tokens[id].type != TOK_TYPE_NORMAL && v->tokens[id].type != TOK_TYPE_UNDEFINED) id = -1;
        }
        v->byte_ids[b] = id;
    }
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte a "<0xNN>" token stands for, -1 when the text is not of that form. */
static int byte_token_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* Writes the decoded bytes of token id to out (room for 2 * text_len + 1 bytes) and
 * returns their count. */
static size_t decode_token(const tok_vocab *v, int32_t id, char *out) {
    tok__token *t = &v->tokens[id];
    const char *s = token_text(v, id);
    size_t n = t->text_len, w = 0;
    if (t->type == TOK_TYPE_CONTROL || t->type == TOK_TYPE_UNKNOWN || t->type == TOK_TYPE_USER_DEFINED) {
        memcpy(out, s, n); /* rendered as written (control/unknown only when asked) */
        return n;
    }
    if (t->type == TOK_TYPE_BYTE) {
        int b = byte_token_value(s, n);
        if (b >= 0) {
            out[0] = (char)b;
            return 1;
        }
    }
    if (v->kind == TOK_KIND_SPM) { /* "▁" (E2 96 81) is a space */
        for (size_t i = 0; i < n; i++) {
            if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                out[w++] = ' ';
                i += 2;
            } else {
                out[w++] = s[i];
            }
        }
        return w;
    }
    for (size_t i = 0; i < n;) { /* GPT-2 alphabet back to bytes */
        size_t len = tok__utf8_valid_len((const unsigned char *)s + i, n - i);
        int b = -1;
        if (len == 2) {
            uint32_t cp = ((uint32_t)(s[i] & 0x1F) << 6) | (uint32_t)(s[i + 1] & 0x3F);
            b = tok__gpt2_cp_to_byte(cp);
        } else if (len == 1) {
            b = tok__gpt2_cp_to_byte((unsigned char)s[i]);
        }
        if (len == 0) len = 1;
        if (b >= 0) {
            out[w++] = (char)b;
        } else {
            memcpy(out + w, s + i, len); /* not in the alphabet: keep as written */
            w += len;
        }
        i += len;
    }
    return w;
}

static sp_status build_pieces(tok_vocab *v) {
    size_t total = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) total += (size_t)v->tokens[id].text_len + 1;
    v->piece_pool = malloc(total);
    if (!v->piece_pool) return sp_fail(SP_ERR_NOMEM, "tokenizer: out of memory for decoded tokens");
    uint32_t off = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        tok__token *t = &v->tokens[id];
        size_t n = decode_token(v, id, v->piece_pool + off);
        t->piece_off = off;
        t->piece_len = (uint32_t)n;
        t->special = t->type == TOK_TYPE_CONTROL || t->type == TOK_TYPE_UNKNOWN;
        if (n > v->max_piece_len) v->max_piece_len = n;
        off += (uint32_t)n;
    }
    return SP_OK;
}

/* Byte trie over the texts of control and user-defined tokens. */
static sp_status build_trie(tok_vocab *v) {
    size_t n_nodes = 0;
    for (int i = 0; i < 256; i++) v->trie_root[i] = -1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const tok__token *t = &v->tokens[id];
        if (t->type == TOK_TYPE_CONTROL || t->type == TOK_TYPE_USER_DEFINED) n_nodes += t->text_len;
    }
    if (n_nodes == 0) return SP_OK;
    if (n_nodes > INT32_MAX) return sp_fail(SP_ERR_FORMAT, "tokenizer: special token texts are too long");
    v->trie = malloc(n_nodes * sizeof *v->trie);
    if (!v->trie) return sp_fail(SP_ERR_NOMEM, "tokenizer: out of memory for the special-token trie");
    int32_t used = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const tok__token *t = &v->tokens[id];
        if ((t->type != TOK_TYPE_CONTROL && t->type != TOK_TYPE_USER_DEFINED) || t->text_len == 0) continue;
        const unsigned char *s = (const unsigned char *)token_text(v, id);
        int32_t *link = &v->trie_root[s[0]];
        int32_t node = -1;
        for (uint32_t d = 0; d < t->text_len; d++) {
            if (d > 0) { /* find the child for s[d] under node */
                link = &v->trie[node].child;
                while (*link >= 0 && v->trie[*link].byte != s[d]) link = &v->trie[*link].sibling;
            }
            if (*link < 0) {
                tok__trie_node *nn = &v->trie[used];
                nn->child = nn->sibling = nn->id = -1;
                nn->byte = s[d];
                nn->user_defined = false;
                *link = used++;
            }
            node = *link;
        }
        v->trie[node].id = id;
        v->trie[node].user_defined = t->type == TOK_TYPE_USER_DEFINED;
        if (t->type == TOK_TYPE_USER_DEFINED) v->has_user_defined = true;
    }
    return SP_OK;
}

sp_status tok_vocab_load(const gguf_file *f, tok_vocab **out) {
    if (!f || !out) return sp_fail(SP_ERR_INVALID_ARG, "tok_vocab_load: NULL argument");
    *out = NULL;
    const char *path = gguf_path(f);
    gguf_str model;
    sp_status st = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (st == SP_ERR_NOT_FOUND)
        return sp_fail(SP_ERR_FORMAT, "%s: no tokenizer (tokenizer.ggml.model is absent)", path);
    if (st != SP_OK) return st;
    tok_kind kind;
    if (gguf_str_eq(model, "llama")) {
        kind = TOK_KIND_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        kind = TOK_KIND_BPE;
    } else {
        return sp_fail(SP_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)", path,
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }

    tok_vocab *v = calloc(1, sizeof *v);
    if (!v) return sp_fail(SP_ERR_NOMEM, "%s: out of memory for the vocabulary", path);
    v->kind = kind;
    if ((st = load_texts(v, f)) || (st = load_scores_types(v, f)) || (st = build_text_index(v)) ||
        (st = load_specials(v, f)))
        goto fail;
    load_byte_ids(v);
    if (kind == TOK_KIND_BPE && (st = tok__bpe_load(v, f))) goto fail;
    if ((st = build_pieces(v)) || (st = build_trie(v))) goto fail;
    *out = v;
    return SP_OK;
fail:
    tok_vocab_destroy(v);
    return st;
}

void tok_vocab_destroy(tok_vocab *v) {
    if (!v) return;
    tok__bpe_free(v->bpe);
    free(v->trie);
    free(v->text_index);
    free(v->piece_pool);
    free(v->text_pool);
    free(v->tokens);
    free(v);
}

tok_kind tok_vocab_kind(const tok_vocab *v) {
    return v->kind;
}
int32_t tok_vocab_size(const tok_vocab *v) {
    return v->n_tokens;
}

size_t tok_max_token_bytes(const tok_vocab *v) {
    return v->max_piece_len;
}
int32_t tok_bos(const tok_vocab *v) {
    return v->bos;
}
int32_t tok_eos(const tok_vocab *v) {
    return v->eos;
}
bool tok_add_bos(const tok_vocab *v) {
    return v->add_bos;
}

bool tok_is_eog(const tok_vocab *v, int32_t id) {
    return id >= 0 && id < v->n_tokens && v->tokens[id].eog;
}

const char *tok_token_text(const tok_vocab *v, int32_t id) {
    return id >= 0 && id < v->n_tokens ? token_text(v, id) : NULL;
}

/* ---- encoding --------------------------------------------------------------- */

/* Longest control/user-defined token starting at s (n >= 1 bytes); -1 when none.
 * Without parse_special only user-defined tokens count. */
static int32_t special_match(const tok_vocab *v, const unsigned char *s, size_t n, bool parse_special,
                             size_t *match_len) {
    int32_t node = v->trie_root[s[0]], best = -1;
    size_t depth = 1;
    while (node >= 0) {
        const tok__trie_node *t = &v->trie[node];
        if (t->id >= 0 && (parse_special || t->user_defined)) {
            best = t->id;
            *match_len = depth;
        }
        if (depth == n) break;
        node = t->child;
        while (node >= 0 && v->trie[node].byte != s[depth]) node = v->trie[node].sibling;
        depth++;
    }
    return best;
}

static sp_status encode_fragment(const tok_vocab *v, const char *text, size_t len, bool *after_special, tok__ids *out) {
    if (len == 0) return SP_OK;
    sp_status st;
    if (v->kind == TOK_KIND_SPM) {
        st = tok__spm_encode(v, text, len, v->add_space_prefix && *after_special, out);
    } else {
        st = tok__bpe_encode(v, text, len, out);
    }
    *after_special = false;
    return st;
}

sp_status tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special, int32_t **ids,
                     size_t *n_ids) {
    if (!v || !ids || !n_ids || (!text && len > 0)) return sp_fail(SP_ERR_INVALID_ARG, "tok_encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    if (len > TOK_MAX_TEXT_BYTES)
        return sp_fail(SP_ERR_RANGE, "tok_encode: text of %zu bytes is over the limit of %zu bytes", len,
                       TOK_MAX_TEXT_BYTES);
    tok__ids out = {0};
    sp_status st = SP_OK;
    bool after_special = true;                    /* SPM: the dummy prefix goes before the first fragment */
    if ((st = tok__ids_push(&out, 0))) goto fail; /* allocates, so *ids is never NULL */
    out.n = 0;
    if (add_bos && v->bos >= 0 && (st = tok__ids_push(&out, v->bos))) goto fail;

    const unsigned char *s = (const unsigned char *)text;
    size_t start = 0;
    if (v->trie && (parse_special || v->has_user_defined)) {
        for (size_t pos = 0; pos < len;) {
            size_t match_len = 0;
            int32_t id =
                v->trie_root[s[pos]] < 0 ? -1 : special_match(v, s + pos, len - pos, parse_special, &match_len);
            if (id < 0) {
                pos++;
                continue;
            }
            if ((st = encode_fragment(v, text + start, pos - start, &after_special, &out)) ||
                (st = tok__ids_push(&out, id)))
                goto fail;
            after_special = true;
            pos += match_len;
            if (v->tokens[id].rstrip)
                while (pos < len && (s[pos] == ' ' || (s[pos] >= '\t' && s[pos] <= '\r'))) pos++;
            start = pos;
        }
    }
    if ((st = encode_fragment(v, text + start, len - start, &after_special, &out))) goto fail;
    *ids = out.data;
    *n_ids = out.n;
    return SP_OK;
fail:
    free(out.data);
    return st;
}

/* ---- decoding --------------------------------------------------------------- */

/* The bytes token id renders as; NULL (length 0) when it renders as nothing. */
static const char *token_piece(const tok_vocab *v, int32_t id, bool render_special, size_t *len) {
    *len = 0;
    if (id < 0 || id >= v->n_tokens) return NULL;
    const tok__token *t = &v->tokens[id];
    if (t->special && !render_special) return NULL;
    *len = t->piece_len;
    return v->piece_pool + t->piece_off;
}

/* SPM with the dummy prefix: the first piece that renders loses its leading space. */
static const char *strip_first_space(const tok_vocab *v, bool *at_start, const char *p, size_t *len) {
    if (!*at_start || *len == 0) return p;
    *at_start = false;
    if (v->kind == TOK_KIND_SPM && v->add_space_prefix && p[0] == ' ') {
        (*len)--;
        return p + 1;
    }
    return p;
}

size_t tok_token_bytes(const tok_vocab *v, int32_t id, bool render_special, char *buf, size_t cap) {
    size_t len;
    const char *p = token_piece(v, id, render_special, &len);
    if (p && buf) memcpy(buf, p, len < cap ? len : cap);
    return len;
}

sp_status tok_decode(const tok_vocab *v, const int32_t *ids, size_t n_ids, bool render_special, char **text,
                     size_t *len) {
    if (!v || !text || !len || (!ids && n_ids > 0)) return sp_fail(SP_ERR_INVALID_ARG, "tok_decode: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t n;
        token_piece(v, ids[i], render_special, &n);
        if (total > SIZE_MAX - n - 1) return sp_fail(SP_ERR_RANGE, "tok_decode: text too long");
        total += n;
    }
    char *out = malloc(total + 1);
    if (!out) return sp_fail(SP_ERR_NOMEM, "tok_decode: out of memory for %zu bytes", total + 1);
    size_t w = 0;
    bool at_start = true;
    for (size_t i = 0; i < n_ids; i++) {
        size_t n;
        const char *p = token_piece(v, ids[i], render_special, &n);
        p = strip_first_space(v, &at_start, p, &n);
        if (n > 0) memcpy(out + w, p, n);
        w += n;
    }
    out[w] = '\0';
    *text = out;
    *len = w;
    return SP_OK;
}

/* Incremental decoding: a UTF-8 state machine over the bytes of each piece. Complete
 * characters go out at once, the start of a multi-byte character waits in d->pending,
 * and bytes that cannot be part of a well-formed character go out as U+FFFD (so the
 * stream is always valid UTF-8; for valid text it equals tok_decode's). */
typedef struct out_buf {
    char *p;
    size_t cap, n;
} out_buf;

static void out_put(out_buf *o, const void *data, size_t n) {
    if (n > o->cap - o->n) return; /* caller's buffer is smaller than documented; drop, never overflow */
    memcpy(o->p + o->n, data, n);
    o->n += n;
}

static void decoder_feed(tok_decoder *d, out_buf *o, unsigned char c) {
    for (;;) {
        if (d->n_pending <= 0 || d->n_pending >= 4) {
            d->n_pending = 0;
            int need = tok__utf8_lead_len(c);
            if (need == 1) {
                out_put(o, &c, 1);
            } else if (need == 0) {
                out_put(o, TOK_REPLACEMENT, 3);
            } else {
                d->pending[0] = c;
                d->n_pending = 1;
            }
            return;
        }
        unsigned char lead = d->pending[0];
        if (tok__utf8_cont_ok(lead, d->n_pending, c)) {
            d->pending[d->n_pending++] = c;
            if (d->n_pending == tok__utf8_lead_len(lead)) {
                out_put(o, d->pending, (size_t)d->n_pending);
                d->n_pending = 0;
            }
            return;
        }
        out_put(o, TOK_REPLACEMENT, 3); /* the held prefix can never complete */
        d->n_pending = 0;               /* and c starts afresh */
    }
}

void tok_decoder_init(tok_decoder *d, bool render_special) {
    memset(d, 0, sizeof *d);
    d->at_start = true;
    d->render_special = render_special;
}

size_t tok_decoder_push(const tok_vocab *v, tok_decoder *d, int32_t id, char *out, size_t cap) {
    size_t n;
    const char *p = token_piece(v, id, d->render_special, &n);
    p = strip_first_space(v, &d->at_start, p, &n);
    out_buf o = {out, cap, 0};
    for (size_t i = 0; i < n; i++) decoder_feed(d, &o, (unsigned char)p[i]);
    return o.n;
}

size_t tok_decoder_flush(tok_decoder *d, char *out, size_t cap) {
    out_buf o = {out, cap, 0};
    if (d->n_pending > 0) out_put(&o, TOK_REPLACEMENT, 3);
    d->n_pending = 0;
    return o.n;
}

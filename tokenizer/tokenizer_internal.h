/* tokenizer_internal.h: shared between the tokenizer's files (tokenizer*.c,
 * unicode.c), never included from outside tokenizer/. */
#ifndef SP_TOKENIZER_INTERNAL_H
#define SP_TOKENIZER_INTERNAL_H

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* Owned by the tokenizer files: tokenizer.c loads the vocab, matches special tokens
 * and decodes; tokenizer_spm.c and tokenizer_bpe.c encode one fragment of plain text
 * each; unicode.c holds the UTF-8 and GPT-2 alphabet helpers. A tok_vocab is immutable
 * after tok_vocab_load, so every function below that takes a const vocab may run on
 * many threads at once. */

/* tokenizer.ggml.token_type values. */
enum {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

typedef struct tok__token {
    uint32_t text_off, text_len;   /* stored text, in text_pool (NUL-terminated there) */
    uint32_t piece_off, piece_len; /* decoded bytes, in piece_pool */
    float score;                   /* SPM merge score */
    uint8_t type;                  /* TOK_TYPE_* */
    bool special;                  /* control/unknown: decodes to "" unless render_special */
    bool eog;
    bool rstrip; /* matched in text, it swallows the whitespace after it */
} tok__token;

/* Node of the byte trie that finds control and user-defined tokens in text. */
typedef struct tok__trie_node {
    int32_t child;   /* first child node, -1 none */
    int32_t sibling; /* next sibling node, -1 none */
    int32_t id;      /* token whose text ends here, -1 none */
    uint8_t byte;
    bool user_defined; /* id is a user-defined token (matched even without parse_special) */
} tok__trie_node;

typedef struct tok__bpe tok__bpe; /* merges and pre-tokenizer regexes (tokenizer_bpe.c) */

/* Slot of the text -> id hash: the hash's high half is kept so a probe touches the
 * token only when it very likely matches. */
typedef struct tok__slot {
    int32_t id; /* -1: empty */
    uint32_t hash_hi;
} tok__slot;

struct tok_vocab {
    tok_kind kind;
    int32_t n_tokens;
    tok__token *tokens; /* (n_tokens) */
    char *text_pool;
    char *piece_pool;
    tok__slot *text_index; /* open-addressing hash of token text -> id */
    size_t text_index_mask;
    size_t max_piece_len; /* longest decoded token, special renderings included */

    int32_t bos, eos, eot, eom, unk, pad, sep; /* -1: none */
    bool add_bos;
    bool add_space_prefix; /* SPM: dummy "▁" before the first fragment */
    int32_t byte_ids[256]; /* id for each raw byte: SPM <0xNN>, BPE the normal token of its GPT-2 char; -1 none */

    tok__trie_node *trie; /* nodes; trie_root[b] is the node for first byte b, -1 none */
    int32_t trie_root[256];
    bool has_user_defined; /* some user-defined token is in the trie */

    tok__bpe *bpe; /* BPE only */
};

/* Growable id list the encoders append to. */
typedef struct tok__ids {
    int32_t *data;
    size_t n, cap;
} tok__ids;

sp_status tok__ids_push(tok__ids *out, int32_t id);
/* Id of the token whose stored text is exactly text[0..len), -1 when none. */
int32_t tok__lookup(const tok_vocab *v, const char *text, size_t len);

/* tokenizer_spm.c: encodes a plain-text fragment (no special tokens in it). add_prefix
 * puts the dummy "▁" in front. */
sp_status tok__spm_encode(const tok_vocab *v, const char *text, size_t len, bool add_prefix, tok__ids *out);

/* tokenizer_bpe.c: reads tokenizer.ggml.merges and .pre into v->bpe (needs tokens and
 * the text index loaded). Unknown pre names are SP_ERR_UNSUPPORTED naming the value. */
sp_status tok__bpe_load(tok_vocab *v, const gguf_file *f);
void tok__bpe_free(tok__bpe *b);
sp_status tok__bpe_encode(const tok_vocab *v, const char *text, size_t len, tok__ids *out);

/* unicode.c */
/* Length (1..4) of the well-formed UTF-8 sequence starting at s, 0 when s[0..n) does not
 * start one (invalid or truncated). n >= 1. */
size_t tok__utf8_valid_len(const unsigned char *s, size_t n);
/* Sequence length a lead byte announces: 1 for ASCII, 2..4 for a valid lead, 0 otherwise. */
int tok__utf8_lead_len(unsigned char lead);
/* true when c may follow lead as the byte at index pos (1..3) of a well-formed sequence. */
bool tok__utf8_cont_ok(unsigned char lead, int pos, unsigned char c);
/* Writes cp as UTF-8 (1..4 bytes) into out. */
size_t tok__utf8_encode(uint32_t cp, char *out);
/* GPT-2's byte-level alphabet: the code point byte b is written as, and back (-1 when cp
 * is not in the alphabet). */
uint32_t tok__gpt2_byte_to_cp(uint8_t b);
int tok__gpt2_cp_to_byte(uint32_t cp);
uint64_t tok__hash(const void *data, size_t len);

#endif

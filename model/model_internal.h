/* model_internal.h: shared between the files of the model module (model/), never
 * included from outside it. Sections: the GGUF reader's internals (gguf.c,
 * gguf_access.c); the loaded model's layout (model.c, forward.c); the tokenizer's
 * internals (tokenizer*.c, unicode.c). */
#ifndef SP_MODEL_INTERNAL_H
#define SP_MODEL_INTERNAL_H

#include "gpu/device.h"
#include "model/gguf.h"
#include "model/model.h"

/* ==== GGUF reader internals (gguf.c, gguf_access.c) ==== */
/* gguf.c opens, maps and validates a file and builds the name indexes; gguf_access.c
 * reads it afterwards. Every position below was checked against the file's size by
 * gguf_open, so readers use them without further checks. Immutable after open. */

typedef struct gguf_kv {
    gguf_str key;
    gguf_value_type type;
    uint64_t pos;              /* file offset of the value (arrays: of the first element) */
    gguf_value_type elem_type; /* arrays only */
    uint64_t n;                /* arrays only: element count */
    uint64_t *str_pos;         /* arrays of strings: file offset of each element; owned */
} gguf_kv;

/* Open-addressing table of indexes into kvs or tensors; slots hold index + 1, 0 = empty. */
typedef struct gguf_index {
    int64_t *slots;
    uint64_t mask;
} gguf_index;

struct gguf_file {
    char *name; /* owned; used in messages */
    const uint8_t *base;
    uint64_t size;
    void *map; /* non-NULL when gguf_open mapped the file */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_start;
    int64_t n_kv;
    gguf_kv *kvs;
    gguf_index kv_index;
    int64_t n_tensors;
    gguf_tensor *tensors;
    gguf_index tensor_index;
};

/* Encoded size in bytes of each value type; 0 for string and array (variable). Index
 * only with a type gguf__value_type_valid accepts. */
extern const size_t gguf__value_type_sizes[GGUF_TYPE_FLOAT64 + 1];
bool gguf__value_type_valid(uint32_t t);
/* Little-endian unsigned integer of n bytes (1..8) at p, which may be unaligned. */
uint64_t gguf__load_u(const uint8_t *p, size_t n);
/* Index slot of the key / tensor named (p, n): holds its index + 1, or 0 when absent. */
int64_t *gguf__kv_slot(const gguf_file *f, const char *p, uint64_t n);
int64_t *gguf__tensor_slot(const gguf_file *f, const char *p, uint64_t n);

/* ==== the loaded model (model.c, forward.c) ==== */

typedef struct model_layer {
    dev_tensor attn_norm;      /* (D) */
    dev_tensor wq, wk, wv;     /* (H*Dh, D), (Hk*Dh, D), (Hk*Dh, D) */
    dev_tensor bq, bk, bv;     /* biases (qwen2), type F32 */
    dev_tensor q_norm, k_norm; /* (Dh) (qwen3) */
    dev_tensor wo;             /* (D, H*Dh) */
    dev_tensor ffn_norm;       /* (D) */
    dev_tensor w_gate, w_up;   /* (F, D) */
    dev_tensor w_down;         /* (D, F) */
} model_layer;

/* Rows of logits computed per pass of the output matmul (bounds the logits buffer). */
enum { MODEL_LOGIT_ROWS = 64 };

/* Activations for the largest step, carved from one device allocation (model.c
 * model_activations_size is the one place that sizes them). T = max_batch_tokens. */
typedef struct model_activations {
    float *x;      /* (T, D) residual stream */
    float *xn;     /* (T, D) normalized input of a sublayer */
    float *q;      /* (T, H*Dh) */
    float *k;      /* (T, Hk*Dh) */
    float *v;      /* (T, Hk*Dh) */
    float *attn;   /* (T, H*Dh) attention output */
    float *proj;   /* (T, D) sublayer output before the residual add */
    float *gate;   /* (T, F) */
    float *up;     /* (T, F) */
    float *logits; /* (T, V) */
} model_activations;

struct model {
    model_hparams hp;
    gguf_file *file; /* owns the mapping the CPU backend reads weights from */
    tok_vocab *vocab;
    dev_backend *dev; /* borrowed */
    int max_batch_tokens;

    dev_tensor token_embd;  /* (V, D) */
    dev_tensor output_norm; /* (D) */
    dev_tensor output;      /* (V, D); token_embd's data when tied */
    dev_tensor rope_freqs;  /* (Dh/2) F32, when has_rope_freqs */
    dev_rope rope;
    model_layer *layers; /* (n_layers) */
    model_activations act;
};

/* ==== tokenizer internals (tokenizer*.c, unicode.c) ==== */
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

/* tokenizer.h: text <-> token ids for the vocabularies GGUF files carry.
 *
 * Kinds: SentencePiece-style (tokenizer.ggml.model = "llama": score-driven merges,
 * byte fallback <0xNN>, optional dummy space prefix) and byte-level BPE ("gpt2":
 * ranked merges over GPT-2's byte-to-unicode alphabet, pre-split by the regexes that
 * tokenizer.ggml.pre names, run on PCRE2). Special (control) and user-defined tokens
 * are matched in the text before splitting when parse_special is set.
 *
 * Thread rules: a tok_vocab is immutable after tok_vocab_load; tok_encode and the
 * decoders may run on many threads at once (the HTTP threads tokenize in parallel).
 * A tok_decoder belongs to one sequence and one thread at a time.
 */
#ifndef SP_TOKENIZER_H
#define SP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "gguf/gguf.h"

typedef enum tok_kind { TOK_KIND_SPM, TOK_KIND_BPE } tok_kind;

typedef struct tok_vocab tok_vocab;

/* Reads tokenizer.ggml.* from f (the gguf_file may be closed afterwards: the vocab
 * copies what it keeps). Unknown tokenizer.ggml.model or tokenizer.ggml.pre values are
 * SP_ERR_UNSUPPORTED naming the value. Caller owns *out; free with tok_vocab_destroy. */
sp_status tok_vocab_load(const gguf_file *f, tok_vocab **out);
void tok_vocab_destroy(tok_vocab *v);

tok_kind tok_vocab_kind(const tok_vocab *v);
int32_t tok_vocab_size(const tok_vocab *v);
/* Special ids, -1 when the vocab has none. */
int32_t tok_bos(const tok_vocab *v);
int32_t tok_eos(const tok_vocab *v);
/* The model's BOS rule: tokenizer.ggml.add_bos_token, else the kind's default
 * (true for SPM, false for BPE). */
bool tok_add_bos(const tok_vocab *v);
/* true for end-of-generation tokens (eos, eot, <|im_end|>-style end tokens the vocab marks). */
bool tok_is_eog(const tok_vocab *v, int32_t id);
/* Bytes of the longest decoded token (special renderings included): a decoder output
 * buffer of this + 64 bytes always holds one push or flush. */
size_t tok_max_token_bytes(const tok_vocab *v);
/* The token's stored text (borrowed until tok_vocab_destroy); NULL when id is out of range. */
const char *tok_token_text(const tok_vocab *v, int32_t id);

/* Encodes len bytes of text (any bytes: invalid UTF-8 is tokenized, not rejected; a
 * byte the vocab has no token for is dropped, as Hugging Face does).
 * add_bos: prepend BOS (when the vocab has one). parse_special: match control tokens
 * written literally in the text. User-defined tokens are matched either way (Hugging
 * Face's added tokens), end markers such as </s> or <|im_end|> only with parse_special.
 * On success *ids (caller owns; free with free(); never NULL) holds *n_ids ids. */
sp_status tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special, int32_t **ids,
                     size_t *n_ids);

/* Bytes a token stands for after byte decoding (GPT-2 unicode map undone, SPM "▁"
 * turned to space, <0xNN> to its byte). Control (and unknown-type) tokens render as ""
 * unless render_special. Writes at most cap bytes; returns the full length (like snprintf,
 * no NUL added). */
size_t tok_token_bytes(const tok_vocab *v, int32_t id, bool render_special, char *buf, size_t cap);

/* Incremental decoder: feeds ids one at a time and emits only whole UTF-8 characters,
 * holding back an incomplete multi-byte sequence until its last byte arrives. Bytes
 * that can never form a character come out as U+FFFD, so the output is always valid
 * UTF-8; for valid text it is exactly tok_decode's. For SPM vocabularies with the
 * dummy prefix, the space of the first piece that renders is dropped (a continuation
 * of earlier text, e.g. generation after a prompt, sets at_start = false after init). */
typedef struct tok_decoder {
    unsigned char pending[8]; /* bytes of an incomplete UTF-8 sequence */
    int n_pending;
    bool at_start; /* nothing emitted yet: SPM drops the leading space */
    bool render_special;
} tok_decoder;

void tok_decoder_init(tok_decoder *d, bool render_special);
/* Appends the text of id to out (cap bytes); returns bytes written. Out of range ids
 * produce nothing. cap of 64 bytes plus the longest token always suffices (only a
 * token made of bytes that can never be UTF-8 could need more, up to 3x: what does
 * not fit is dropped, never written past cap). */
size_t tok_decoder_push(const tok_vocab *v, tok_decoder *d, int32_t id, char *out, size_t cap);
/* Flushes held bytes at the end of a sequence (an incomplete sequence becomes U+FFFD). */
size_t tok_decoder_flush(tok_decoder *d, char *out, size_t cap);

/* Whole-sequence decode; caller owns *text (NUL-terminated), free with free(). */
sp_status tok_decode(const tok_vocab *v, const int32_t *ids, size_t n_ids, bool render_special, char **text,
                     size_t *len);

#endif

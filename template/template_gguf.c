/* template_gguf.c: what a chat template needs from the model file: the template's
 * source (tokenizer.chat_template) and the special-token variables Hugging Face
 * passes to it (bos_token, eos_token, ...), read through gguf/gguf.h only.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "template/template.h"

#define TMPL_GGUF_TEMPLATE_KEY "tokenizer.chat_template"
#define TMPL_GGUF_TOKENS_KEY   "tokenizer.ggml.tokens"
/* llama.cpp writes a missing special token as -1 or as UINT32_MAX. */
#define TMPL_GGUF_ID_NONE_U32 4294967295ll

/* Template variable and the GGUF key holding its token id (llama.cpp's names, with its
 * spelling "seperator"). */
static const struct {
    const char *var;
    const char *key;
} TMPL_GGUF_SPECIALS[] = {
    {"bos_token", "tokenizer.ggml.bos_token_id"},       {"eos_token", "tokenizer.ggml.eos_token_id"},
    {"unk_token", "tokenizer.ggml.unknown_token_id"},   {"pad_token", "tokenizer.ggml.padding_token_id"},
    {"sep_token", "tokenizer.ggml.seperator_token_id"}, {"cls_token", "tokenizer.ggml.cls_token_id"},
    {"mask_token", "tokenizer.ggml.mask_token_id"},
};

sp_status tmpl_source_from_gguf(const gguf_file *f, char **source, size_t *len) {
    if (!f || !source || !len) return sp_fail(SP_ERR_INVALID_ARG, "tmpl_source_from_gguf: NULL argument");
    gguf_str s;
    sp_status st = gguf_get_str(f, TMPL_GGUF_TEMPLATE_KEY, &s);
    if (st == SP_ERR_NOT_FOUND) {
        return sp_fail(SP_ERR_NOT_FOUND, "%s: no chat template (key %s is absent)", gguf_path(f),
                       TMPL_GGUF_TEMPLATE_KEY);
    }
    if (st != SP_OK) return st; /* present but not a string: gguf's message names the key */
    /* s lies inside the mapped file, so its length fits size_t. */
    char *copy = malloc((size_t)s.len + 1);
    if (!copy) {
        return sp_fail(SP_ERR_NOMEM, "%s: key %s: out of memory for %" PRIu64 " bytes", gguf_path(f),
                       TMPL_GGUF_TEMPLATE_KEY, s.len);
    }
    memcpy(copy, s.ptr, (size_t)s.len);
    copy[s.len] = '\0';
    *source = copy;
    *len = (size_t)s.len;
    return SP_OK;
}

/* Sets context[var] to the text of the token that key names, unless the key is absent
 * or says "no token". */
static sp_status tmpl_gguf_add_token(const gguf_file *f, json_t *context, const char *var, const char *key) {
    int64_t id;
    sp_status st = gguf_get_i64(f, key, &id);
    if (st == SP_ERR_NOT_FOUND) return SP_OK;
    if (st != SP_OK) return st; /* not an integer: gguf's message names the key */
    if (id < 0 || id == TMPL_GGUF_ID_NONE_U32) return SP_OK;

    gguf_value_type elem;
    uint64_t n_tokens;
    if (gguf_get_arr(f, TMPL_GGUF_TOKENS_KEY, &elem, &n_tokens) != SP_OK || elem != GGUF_TYPE_STRING) {
        return sp_fail(SP_ERR_FORMAT, "%s: key %s names token %" PRId64 " but %s is absent or not strings",
                       gguf_path(f), key, id, TMPL_GGUF_TOKENS_KEY);
    }
    if ((uint64_t)id >= n_tokens) {
        return sp_fail(SP_ERR_FORMAT, "%s: key %s: token id %" PRId64 " out of range (%" PRIu64 " tokens)",
                       gguf_path(f), key, id, n_tokens);
    }
    gguf_str text;
    if ((st = gguf_get_arr_str(f, TMPL_GGUF_TOKENS_KEY, (uint64_t)id, &text)) != SP_OK) return st;
    json_t *value = json_stringn(text.ptr, (size_t)text.len);
    if (!value) {
        return sp_fail(SP_ERR_FORMAT, "%s: key %s: token %" PRId64 " is not valid UTF-8", gguf_path(f), key, id);
    }
    if (json_object_set_new(context, var, value) != 0) {
        return sp_fail(SP_ERR_NOMEM, "%s: out of memory setting %s", gguf_path(f), var);
    }
    return SP_OK;
}

sp_status tmpl_context_add_special_tokens(const gguf_file *f, json_t *context) {
    if (!f || !context) return sp_fail(SP_ERR_INVALID_ARG, "tmpl_context_add_special_tokens: NULL argument");
    if (!json_is_object(context)) {
        return sp_fail(SP_ERR_INVALID_ARG, "tmpl_context_add_special_tokens: the context is not a JSON object");
    }
    for (size_t i = 0; i < sizeof TMPL_GGUF_SPECIALS / sizeof TMPL_GGUF_SPECIALS[0]; i++) {
        if (json_object_get(context, TMPL_GGUF_SPECIALS[i].var)) continue; /* the caller's value wins */
        sp_status st = tmpl_gguf_add_token(f, context, TMPL_GGUF_SPECIALS[i].var, TMPL_GGUF_SPECIALS[i].key);
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

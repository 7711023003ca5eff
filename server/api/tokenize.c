/* tokenize.c: the bodies of POST /tokenize and POST /detokenize, compatible with both
 * llama-server (content, add_special, with_pieces; content in the answer) and vLLM
 * (prompt or messages, add_special_tokens; count, max_model_len, prompt in the answer).
 */
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

/* {"id": id, "piece": text}, the piece as a string when its bytes are valid UTF-8 and
 * as the list of its bytes otherwise (llama-server's with_pieces). */
static json_t *tokenize_piece(const tok_vocab *v, int32_t id) {
    char small[256], *buf = small;
    size_t len = tok_token_bytes(v, id, true, small, sizeof small);
    if (len > sizeof small) {
        if (!(buf = malloc(len))) return NULL;
        tok_token_bytes(v, id, true, buf, len);
    }
    json_t *piece;
    if (srv__utf8_valid(buf, len)) {
        piece = json_stringn_nocheck(buf, len);
    } else {
        piece = json_array();
        for (size_t i = 0; i < len && piece; i++) {
            if (json_array_append_new(piece, json_integer((unsigned char)buf[i])) != 0) {
                json_decref(piece);
                piece = NULL;
            }
        }
    }
    if (buf != small) free(buf);
    return json_pack("{s:i,s:o}", "id", (int)id, "piece", piece);
}

/* The ids of the body's text: messages rendered and tokenized exactly as a chat
 * completion would be (so the count is what the request will cost); content or
 * prompt tokenized with special tokens parsed, BOS by add_special (default: false for
 * llama-server's content, true for vLLM's prompt). */
static sp_status tokenize_body(const json_t *root, const srv_model_info *mi, int32_t **ids, size_t *n, srv_error *err) {
    sp_status st;
    if (srv__field(root, "messages")) {
        char *text;
        size_t len;
        if ((st = srv__chat_render(root, mi, NULL, &text, &len, err)) != SP_OK) return st;
        st = srv__chat_tokenize(mi, text, len, ids, n, err);
        free(text);
        return st;
    }
    const char *text = NULL, *key = "content";
    size_t len = 0;
    bool given, add_special = false, special_given;
    if ((st = srv__read_string(root, "content", &text, &len, &given, err)) != SP_OK) return st;
    if (!given) {
        key = "prompt";
        add_special = true;
        if ((st = srv__read_string(root, "prompt", &text, &len, &given, err)) != SP_OK) return st;
    }
    if (!given) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "content",
                         "Missing required parameter: one of 'content', 'prompt' or 'messages'.");
    }
    if ((st = srv__read_bool(root, "add_special", &add_special, &special_given, err)) != SP_OK) return st;
    if (!special_given && (st = srv__read_bool(root, "add_special_tokens", &add_special, NULL, err)) != SP_OK)
        return st;
    if ((st = tok_encode(mi->vocab, text, len, add_special && tok_add_bos(mi->vocab), true, ids, n)) != SP_OK)
        return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "tokenizing %s: %s", key, sp_last_error());
    return SP_OK;
}

json_t *srv_tokenize(const char *body, size_t len, const srv_model_info *mi, srv_error *err) {
    *err = (srv_error){0};
    json_t *root = NULL;
    if (srv__parse_body(body, len, &root, err) != SP_OK) return NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    bool with_pieces = false;
    json_t *out = NULL, *tokens = NULL;
    int bad = 0;
    if (srv__check_model(root, mi, err) != SP_OK ||
        srv__read_bool(root, "with_pieces", &with_pieces, NULL, err) != SP_OK ||
        tokenize_body(root, mi, &ids, &n, err) != SP_OK)
        goto done;
    tokens = json_array();
    bad = !tokens;
    for (size_t i = 0; i < n && !bad; i++)
        bad |= json_array_append_new(tokens, with_pieces ? tokenize_piece(mi->vocab, ids[i]) : json_integer(ids[i]));
    out = bad ? NULL
              : json_pack("{s:O,s:I,s:i}", "tokens", tokens, "count", (json_int_t)n, "max_model_len",
                          (int)mi->max_seq_len);
    if (!out) srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory encoding the tokens");
done:
    json_decref(tokens);
    free(ids);
    json_decref(root);
    return out;
}

json_t *srv_detokenize(const char *body, size_t len, const srv_model_info *mi, srv_error *err) {
    *err = (srv_error){0};
    json_t *root = NULL;
    if (srv__parse_body(body, len, &root, err) != SP_OK) return NULL;
    json_t *out = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    size_t text_len = 0;
    if (srv__check_model(root, mi, err) != SP_OK) goto done;
    const json_t *tokens = srv__field(root, "tokens");
    if (!tokens) {
        srv__fail(err, SRV_ERROR_BAD_REQUEST, "tokens", "Missing required parameter: 'tokens'.");
        goto done;
    }
    if (!json_is_array(tokens)) {
        srv__type_error(err, "tokens", "an array of token ids", tokens);
        goto done;
    }
    size_t n = json_array_size(tokens);
    if (!(ids = malloc((n ? n : 1) * sizeof *ids))) {
        srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for the tokens");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char param[32];
        snprintf(param, sizeof param, "tokens[%zu]", i);
        int64_t id;
        if (srv__want_int(json_array_get(tokens, i), param, 0, tok_vocab_size(mi->vocab) - 1, &id, err) != SP_OK)
            goto done;
        ids[i] = (int32_t)id;
    }
    /* special tokens rendered, as llama-server and vLLM (skip_special_tokens=False) do */
    if (tok_decode(mi->vocab, ids, n, true, &text, &text_len) != SP_OK) {
        srv__fail(err, SRV_ERROR_INTERNAL, NULL, "detokenizing: %s", sp_last_error());
        goto done;
    }
    out = json_pack("{s:o,s:o}", "content", srv__json_text(text, text_len), "prompt", srv__json_text(text, text_len));
    if (!out) srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory encoding the text");
done:
    free(text);
    free(ids);
    json_decref(root);
    return out;
}

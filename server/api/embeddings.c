/* embeddings.c: POST /v1/embeddings in the OpenAI layer: the body parsed and validated
 * into an srv_request of prefill-only prompts (one per input, each a scheduler request
 * with the server's pooling), and the finished vectors rendered as OpenAI's list of
 * embeddings, as floats or base64.
 *
 * `input` is a string, an array of strings, an array of token ids, or an array of arrays
 * of token ids; text is tokenized as llama-server tokenizes its embedding inputs (BOS by
 * the vocabulary's rule, special tokens parsed), so the vectors are the ones it computes.
 * `dimensions` is refused: the vectors keep the model's width. The transport
 * (server/http/http.c, http_generation.c) submits and waits as for a non-streaming completion.
 *
 * DESIGN (threads): a preparation worker parses; the HTTP thread that answers renders.
 * Reentrant, like the rest of the OpenAI layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

_Static_assert(SRV_MAX_EMBEDDING_INPUTS <= SRV_MAX_N * SRV_MAX_PROMPTS, "a request's outputs fit the answer's table");

/* ---- parsing ---- */

/* The pooling the server was started with (NONE in a bare srv_model_info: mean). */
static sp_pooling embed_pooling(const srv_model_info *mi) {
    return mi->pooling != SP_POOLING_NONE ? mi->pooling : SP_POOLING_MEAN;
}

/* Stores ids (taking ownership) as prompt k after the checks every input gets. */
static sp_status embed_set_prompt(srv_request *r, const srv_model_info *mi, int k, int32_t *ids, size_t n,
                                  const char *param, srv_error *err) {
    r->prompts[k] = ids;
    if (n == 0) return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Invalid '%s': an input must not be empty.", param);
    if (n > (size_t)mi->max_seq_len)
        return srv__fail(err, SRV_ERROR_CONTEXT_LENGTH, param,
                         "This model's maximum context length is %d tokens, however '%s' has %zu tokens. Please "
                         "reduce the length of the input.",
                         mi->max_seq_len, param, n);
    r->prompt_lens[k] = (int32_t)n;
    return SP_OK;
}

/* One input given as text. */
static sp_status embed_text(const json_t *s, const srv_model_info *mi, srv_request *r, int k, const char *param,
                            srv_error *err) {
    if (json_string_length(s) == 0) /* BOS alone is not an input either */
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Invalid '%s': an input must not be empty.", param);
    int32_t *ids;
    size_t n;
    sp_status st =
        tok_encode(mi->vocab, json_string_value(s), json_string_length(s), tok_add_bos(mi->vocab), true, &ids, &n);
    if (st != SP_OK) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "tokenizing %s: %s", param, sp_last_error());
    return embed_set_prompt(r, mi, k, ids, n, param, err);
}

/* One input given as token ids, each inside the vocabulary (used as they are: no BOS). */
static sp_status embed_ids(const json_t *arr, const srv_model_info *mi, srv_request *r, int k, const char *param,
                           srv_error *err) {
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for the input");
    r->prompts[k] = ids;
    const int32_t last = tok_vocab_size(mi->vocab) - 1;
    for (size_t j = 0; j < n; j++) {
        char p[64];
        snprintf(p, sizeof p, "%s[%zu]", param, j);
        const json_t *v = json_array_get(arr, j);
        int64_t id;
        sp_status st = srv__want_int(v, p, 0, last, &id, err);
        if (st != SP_OK && json_is_integer(v))
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, p,
                             "Invalid '%s': %lld is not a token id of this model (0 to %d).", p,
                             (long long)json_integer_value(v), last);
        if (st != SP_OK) return st;
        ids[j] = (int32_t)id;
    }
    return embed_set_prompt(r, mi, k, ids, n, param, err);
}

/* Room for n inputs (zeroed: max_tokens stays 0, an embedding generates nothing). */
static sp_status embed_alloc(srv_request *r, size_t n, srv_error *err) {
    r->prompts = calloc(n, sizeof *r->prompts);
    r->prompt_lens = calloc(n, sizeof *r->prompt_lens);
    r->max_tokens = calloc(n, sizeof *r->max_tokens);
    if (!r->prompts || !r->prompt_lens || !r->max_tokens)
        return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for the inputs");
    r->n_prompts = (int)n;
    return SP_OK;
}

/* `input` in its four forms into r's prompts. */
static sp_status embed_inputs(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err) {
    const json_t *input = srv__field(root, "input");
    if (!input) return srv__fail(err, SRV_ERROR_BAD_REQUEST, "input", "Missing required parameter: 'input'.");
    sp_status st;
    if (json_is_string(input)) {
        if ((st = embed_alloc(r, 1, err)) != SP_OK) return st;
        return embed_text(input, mi, r, 0, "input", err);
    }
    if (!json_is_array(input))
        return srv__type_error(err, "input", "a string, an array of strings or an array of token ids", input);
    size_t n = json_array_size(input);
    if (n == 0)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "input",
                         "Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty "
                         "array instead.");
    if (json_is_number(json_array_get(input, 0))) { /* one input of token ids */
        if ((st = embed_alloc(r, 1, err)) != SP_OK) return st;
        return embed_ids(input, mi, r, 0, "input", err);
    }
    const size_t most = mi->max_sequences > 0 && mi->max_sequences < SRV_MAX_EMBEDDING_INPUTS
                            ? (size_t)mi->max_sequences
                            : (size_t)SRV_MAX_EMBEDDING_INPUTS;
    if (n > most)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "input",
                         "Invalid 'input': array too long. Expected an array with maximum length %zu, but got an "
                         "array with length %zu instead.",
                         most, n);
    if ((st = embed_alloc(r, n, err)) != SP_OK) return st;
    for (size_t k = 0; k < n; k++) {
        char param[32];
        snprintf(param, sizeof param, "input[%zu]", k);
        const json_t *item = json_array_get(input, k);
        if (json_is_string(item))
            st = embed_text(item, mi, r, (int)k, param, err);
        else if (json_is_array(item))
            st = embed_ids(item, mi, r, (int)k, param, err);
        else
            st = srv__type_error(err, param, "a string or an array of token ids", item);
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

/* encoding_format, dimensions and llama-server's embd_normalize. */
static sp_status embed_options(const json_t *root, srv_request *r, srv_error *err) {
    const char *format = NULL;
    size_t len = 0;
    bool given = false;
    sp_status st = srv__read_string(root, "encoding_format", &format, &len, &given, err);
    if (st != SP_OK) return st;
    if (given && !(len == 5 && memcmp(format, "float", 5) == 0) && !(len == 6 && memcmp(format, "base64", 6) == 0))
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "encoding_format",
                         "Invalid 'encoding_format': '%.*s'. Expected 'float' or 'base64'.", len > 64 ? 64 : (int)len,
                         format);
    r->base64 = given && len == 6;
    if (srv__field(root, "dimensions"))
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "dimensions",
                         "This model does not support 'dimensions': its embeddings always have the model's width.");
    int64_t normalize = 2;
    if ((st = srv__read_int(root, "embd_normalize", -1, 1000, &normalize, NULL, err)) != SP_OK) return st;
    if (normalize != 2)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "embd_normalize",
                         "Invalid 'embd_normalize': %lld. Only 2 (L2, the default) is supported.",
                         (long long)normalize);
    return SP_OK;
}

sp_status srv_embeddings_parse(const char *body, size_t len, const srv_model_info *mi, srv_request *out,
                               srv_error *err) {
    *out = (srv_request){0};
    json_t *root = NULL;
    sp_status st = srv__parse_body(body, len, &root, err);
    if (st != SP_OK) return st;
    out->endpoint = out->api = SRV_ENDPOINT_EMBEDDINGS;
    out->n = 1;
    out->params =
        (sched_request_params){.pooling = embed_pooling(mi), .top_logprobs = -1, .sampling = sample_params_default()};
    if ((st = srv__check_model(root, mi, err)) == SP_OK && (st = embed_options(root, out, err)) == SP_OK &&
        (st = embed_inputs(root, mi, out, err)) == SP_OK)
        st = srv__request_tokens_bound(mi, out, "input", "inputs", err);
    json_decref(root);
    if (st != SP_OK) srv_request_free(out);
    return st;
}

/* ---- rendering ---- */

/* The vector as base64 of its little-endian float32 bytes (OpenAI's encoding_format). */
static json_t *embed_base64(const float *v, int32_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n_bytes = (size_t)n * 4;
    unsigned char *bytes = malloc(n_bytes ? n_bytes : 1);
    char *text = malloc((n_bytes + 2) / 3 * 4 + 1);
    json_t *out = NULL;
    if (bytes && text) {
        for (int32_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int b = 0; b < 4; b++) bytes[(size_t)i * 4 + (size_t)b] = (unsigned char)(u >> (8 * b));
        }
        size_t o = 0;
        for (size_t i = 0; i < n_bytes; i += 3) {
            uint32_t w = (uint32_t)bytes[i] << 16;
            if (i + 1 < n_bytes) w |= (uint32_t)bytes[i + 1] << 8;
            if (i + 2 < n_bytes) w |= bytes[i + 2];
            text[o++] = digits[(w >> 18) & 63];
            text[o++] = digits[(w >> 12) & 63];
            text[o++] = i + 1 < n_bytes ? digits[(w >> 6) & 63] : '=';
            text[o++] = i + 2 < n_bytes ? digits[w & 63] : '=';
        }
        text[o] = '\0';
        out = json_stringn(text, o);
    }
    free(bytes);
    free(text);
    return out;
}

static json_t *embed_floats(const float *v, int32_t n) {
    json_t *arr = json_array();
    for (int32_t i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, json_real(v[i])) != 0) {
            json_decref(arr);
            return NULL;
        }
    return arr;
}

json_t *srv_render_embeddings(const srv_request *r, const srv_model_info *mi, const sched_output *const *outs,
                              int n_outs) {
    json_t *data = json_array();
    int64_t prompt_tokens = 0;
    for (int i = 0; data && i < n_outs; i++) {
        const sched_output *o = outs[i];
        prompt_tokens += o->prompt_tokens;
        json_t *vec = r->base64 ? embed_base64(o->embedding, o->n_embd) : embed_floats(o->embedding, o->n_embd);
        json_t *item = vec ? json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding", vec) : NULL;
        if (!item || json_array_append_new(data, item) != 0) {
            json_decref(data);
            return NULL;
        }
    }
    if (!data) return NULL;
    const char *model = mi->served_name ? mi->served_name : "";
    return json_pack("{s:s,s:o,s:o,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                     srv__json_text(model, strlen(model)), "usage", "prompt_tokens", (json_int_t)prompt_tokens,
                     "total_tokens", (json_int_t)prompt_tokens);
}

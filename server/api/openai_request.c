/* openai_request.c: a /v1/chat/completions or /v1/completions body to a validated
 * srv_request: every known field checked for type and range (unknown fields are
 * ignored, as OpenAI and vLLM do), the model name, the prompt (rendered messages, or
 * the completions prompt in its four forms) tokenized, and max_tokens checked against
 * the context. Nothing reaches the scheduler unless all of it passed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "server/api/api_internal.h"

/* ---- the scalar fields ---- */

/* Picks the field a sample_params_validate message names (its first word), for param. */
static const char *request_param_of(const char *message) {
    static const char *const fields[] = {
        "temperature",        "top_p",      "top_k", "min_p", "presence_penalty", "frequency_penalty",
        "repetition_penalty", "logit_bias", "seed"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        size_t n = strlen(fields[i]);
        if (strncmp(message, fields[i], n) == 0 && (message[n] == ' ' || message[n] == ':' || message[n] == '\0'))
            return fields[i];
    }
    return NULL;
}

/* logit_bias: {"token id": bias in [-100, 100]}; ids inside the vocabulary. */
static sp_status request_logit_bias(const json_t *root, int32_t n_vocab, srv_request *r, srv_error *err) {
    const json_t *lb = srv__field(root, "logit_bias");
    if (!lb) return SP_OK;
    if (!json_is_object(lb)) return srv__type_error(err, "logit_bias", "an object", lb);
    size_t n = json_object_size(lb);
    if (n == 0) return SP_OK;
    if (n > (size_t)n_vocab) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "logit_bias",
                         "Invalid 'logit_bias': %zu entries, but the vocabulary has only %d tokens.", n, n_vocab);
    }
    r->logit_bias = calloc(n, sizeof *r->logit_bias);
    if (!r->logit_bias) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for logit_bias");
    const char *key;
    size_t key_len;
    json_t *value;
    int32_t count = 0;
    json_object_keylen_foreach((json_t *)lb, key, key_len, value) {
        int64_t id = 0;
        bool digits = key_len > 0 && key_len <= 10;
        for (size_t i = 0; i < key_len && digits; i++) {
            digits = key[i] >= '0' && key[i] <= '9';
            id = id * 10 + (key[i] - '0');
        }
        if (!digits) {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "logit_bias",
                             "Invalid key in 'logit_bias': '%.*s' is not a token id.",
                             (int)(key_len > 64 ? 64 : key_len), key);
        }
        if (id >= n_vocab) {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "logit_bias",
                             "Invalid 'logit_bias': token id %lld is outside the vocabulary (%d tokens).",
                             (long long)id, n_vocab);
        }
        if (!json_is_number(value)) {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "logit_bias",
                             "Invalid type for 'logit_bias[\"%lld\"]': expected a number, but got %s instead.",
                             (long long)id, srv__json_kind(value));
        }
        double bias = json_number_value(value);
        if (!(bias >= -100.0 && bias <= 100.0)) {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "logit_bias",
                             "Invalid 'logit_bias[\"%lld\"]': %g is out of range. Expected a value between -100 and "
                             "100.",
                             (long long)id, bias);
        }
        r->logit_bias[count++] = (sample_logit_bias){.id = (int32_t)id, .bias = (float)bias};
    }
    r->params.sampling.logit_bias = r->logit_bias;
    r->params.sampling.n_logit_bias = count;
    return SP_OK;
}

/* temperature, top_p, top_k, min_p, the penalties, seed and logit_bias into
 * r->params.sampling, then the sampler's own range check. */
static sp_status request_sampling(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err) {
    sample_params *p = &r->params.sampling;
    *p = sample_params_default();
    if (mi->sampling_defaults) { /* the server's defaults for what the request leaves out */
        p->temperature = mi->sampling_defaults->temperature;
        p->top_p = mi->sampling_defaults->top_p;
        p->top_k = mi->sampling_defaults->top_k;
        p->min_p = mi->sampling_defaults->min_p;
        p->repetition_penalty = mi->sampling_defaults->repetition_penalty;
    }
    double d = 0.0;
    int64_t i = 0;
    bool given = false;
    sp_status st;
#define SRV_NUMBER(key, lo, hi, lo_open, hi_open, dst)                                             \
    do {                                                                                           \
        st = srv__read_number(root, key, (srv__range){lo, hi, lo_open, hi_open}, &d, &given, err); \
        if (st != SP_OK) return st;                                                                \
        if (given) dst = (float)d;                                                                 \
    } while (0)
    SRV_NUMBER("temperature", 0.0, 2.0, false, false, p->temperature);
    SRV_NUMBER("top_p", 0.0, 1.0, true, false, p->top_p);
    SRV_NUMBER("min_p", 0.0, 1.0, false, false, p->min_p);
    SRV_NUMBER("presence_penalty", -2.0, 2.0, false, false, p->presence_penalty);
    SRV_NUMBER("frequency_penalty", -2.0, 2.0, false, false, p->frequency_penalty);
    SRV_NUMBER("repetition_penalty", 0.0, 2.0, true, false, p->repetition_penalty);
#undef SRV_NUMBER
    /* top_k: -1 (vLLM) and 0 (llama.cpp) both mean off */
    if ((st = srv__read_int(root, "top_k", -1, INT32_MAX, &i, &given, err)) != SP_OK) return st;
    if (given) p->top_k = i < 0 ? 0 : (int)i;
    /* any int64 (OpenAI's range); the sampler wants the bits */
    if ((st = srv__read_int(root, "seed", INT64_MIN, INT64_MAX, &i, &r->seed_given, err)) != SP_OK) return st;
    if (r->seed_given) p->seed = (uint64_t)i;
    if ((st = request_logit_bias(root, tok_vocab_size(mi->vocab), r, err)) != SP_OK) return st;
    if (sample_params_validate(p, tok_vocab_size(mi->vocab)) != SP_OK) {
        const char *message = sp_last_error();
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, request_param_of(message), "%s", message);
    }
    return SP_OK;
}

/* stop: a string, or an array of at most SCHED_MAX_STOP strings; each non-empty, at
 * most SCHED_MAX_STOP_BYTES bytes and without NUL (the scheduler takes C strings). */
static sp_status request_stop(const json_t *root, srv_request *r, srv_error *err) {
    const json_t *stop = srv__field(root, "stop");
    if (!stop) return SP_OK;
    size_t n;
    if (json_is_string(stop)) {
        n = 1;
    } else if (json_is_array(stop)) {
        n = json_array_size(stop);
        if (n > SCHED_MAX_STOP) {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "stop",
                             "Invalid 'stop': array too long. Expected an array with maximum length %d, but got an "
                             "array with length %zu instead.",
                             SCHED_MAX_STOP, n);
        }
    } else {
        return srv__type_error(err, "stop", "a string or an array of strings", stop);
    }
    if (n == 0) return SP_OK;
    r->stop = calloc(n, sizeof *r->stop);
    if (!r->stop) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for stop");
    for (size_t k = 0; k < n; k++) {
        const json_t *s = json_is_string(stop) ? stop : json_array_get(stop, k);
        char param[32];
        snprintf(param, sizeof param, json_is_string(stop) ? "stop" : "stop[%zu]", k);
        if (!json_is_string(s)) return srv__type_error(err, param, "a string", s);
        size_t len = json_string_length(s);
        if (len == 0 || len > SCHED_MAX_STOP_BYTES || memchr(json_string_value(s), '\0', len)) {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "stop",
                             "Invalid '%s': a stop sequence must be 1 to %d bytes without NUL, but got %zu bytes.",
                             param, SCHED_MAX_STOP_BYTES, len);
        }
        if (!(r->stop[k] = strdup(json_string_value(s))))
            return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for stop");
        r->params.n_stop = (int)k + 1;
    }
    r->params.stop = (const char *const *)r->stop;
    return SP_OK;
}

/* logprobs and top_logprobs: chat has logprobs (bool) and top_logprobs (0..20);
 * completions has logprobs (0..5: the alternatives per token). */
static sp_status request_logprobs(const json_t *root, srv_request *r, srv_error *err) {
    sp_status st;
    int64_t i = 0;
    bool given;
    if (r->endpoint == SRV_ENDPOINT_COMPLETIONS) {
        if ((st = srv__read_int(root, "logprobs", 0, 5, &i, &given, err)) != SP_OK) return st;
        r->logprobs = given;
        r->top_logprobs = (int)i;
    } else {
        if ((st = srv__read_bool(root, "logprobs", &r->logprobs, NULL, err)) != SP_OK) return st;
        if ((st = srv__read_int(root, "top_logprobs", 0, SCHED_MAX_TOP_LOGPROBS, &i, &given, err)) != SP_OK) return st;
        /* vLLM's rule: asking for alternatives without logprobs is a mistake; 0 asks nothing */
        if (given && i > 0 && !r->logprobs) {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "top_logprobs",
                             "Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' "
                             "is given.");
        }
        r->top_logprobs = r->logprobs ? (int)i : 0;
    }
    r->params.top_logprobs = r->logprobs ? r->top_logprobs : -1;
    return SP_OK;
}

/* stream and stream_options: stream_options without stream is OpenAI's 400. */
static sp_status request_stream(const json_t *root, srv_request *r, srv_error *err) {
    sp_status st = srv__read_bool(root, "stream", &r->stream, NULL, err);
    if (st != SP_OK) return st;
    const json_t *opts = srv__field(root, "stream_options");
    if (!opts) return SP_OK;
    if (!json_is_object(opts)) return srv__type_error(err, "stream_options", "an object", opts);
    if (!r->stream) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "stream_options",
                         "The 'stream_options' parameter is only allowed when 'stream' is enabled.");
    }
    const json_t *usage = srv__field(opts, "include_usage");
    if (usage && !json_is_boolean(usage))
        return srv__type_error(err, "stream_options.include_usage", "a boolean", usage);
    r->include_usage = json_is_true(usage);
    return SP_OK;
}

/* cache_salt (vLLM's): a non-empty string of at most SCHED_MAX_CACHE_SALT_BYTES bytes;
 * the request shares prefix cache blocks only with requests of the same salt (the
 * scheduler hashes it into the chain's root), so no one without the salt can learn from
 * cached_tokens or the time to the first token what its prompt starts with. */
static sp_status request_cache_salt(const json_t *root, srv_request *r, srv_error *err) {
    const char *s = NULL;
    size_t len = 0;
    bool given = false;
    sp_status st = srv__read_string(root, "cache_salt", &s, &len, &given, err);
    if (st != SP_OK || !given) return st;
    if (len == 0 || len > SCHED_MAX_CACHE_SALT_BYTES) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "cache_salt",
                         "Invalid 'cache_salt': expected a non-empty string of at most %d bytes, but got %zu bytes.",
                         SCHED_MAX_CACHE_SALT_BYTES, len);
    }
    if (!(r->cache_salt = malloc(len))) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for cache_salt");
    memcpy(r->cache_salt, s, len);
    r->params.cache_salt = r->cache_salt;
    r->params.cache_salt_len = len;
    return SP_OK;
}

/* Every field but the prompt. *max_tokens is 0 when the request leaves it to the
 * context. */
static sp_status request_options(const json_t *root, const srv_model_info *mi, srv_request *r, int64_t *max_tokens,
                                 srv_error *err) {
    sp_status st;
    int64_t i = 0;
    bool given = false;
    double d = 0.0;
    const char *s = NULL;
    size_t len = 0;
    if ((st = request_stream(root, r, err)) != SP_OK) return st;
    r->n = 1;
    int max_n = mi->max_n > 0 && mi->max_n < SRV_MAX_N ? mi->max_n : SRV_MAX_N;
    if ((st = srv__read_int(root, "n", 1, max_n, &i, &given, err)) != SP_OK) return st;
    if (given) r->n = (int)i;
    if ((st = srv__request_refused(root, r->endpoint, r->n, err)) != SP_OK) return st;
    if ((st = srv__request_constraint(root, mi, r, err)) != SP_OK) return st;
    if (r->endpoint == SRV_ENDPOINT_CHAT && (st = srv__request_tools(root, mi, r, err)) != SP_OK) return st;
    /* max_completion_tokens is the newer name; it wins when both are given */
    *max_tokens = 0;
    if ((st = srv__read_int(root, "max_tokens", 1, INT64_MAX, max_tokens, NULL, err)) != SP_OK) return st;
    if ((st = srv__read_int(root, "max_completion_tokens", 1, INT64_MAX, max_tokens, NULL, err)) != SP_OK) return st;
    if (mi->max_tokens > 0 && *max_tokens > mi->max_tokens) {
        const char *field = json_object_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, field,
                         "Invalid '%s': %lld is more than this server allows (%d, its --max-tokens).", field,
                         (long long)*max_tokens, mi->max_tokens);
    }
    if ((st = srv__read_int(root, "min_tokens", 0, INT32_MAX, &i, &given, err)) != SP_OK) return st;
    if (given && *max_tokens > 0 && i > *max_tokens) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "min_tokens",
                         "Invalid 'min_tokens': %lld is more than max_tokens (%lld).", (long long)i,
                         (long long)*max_tokens);
    }
    if (given) r->params.min_tokens = (int32_t)i;
    if ((st = request_sampling(root, mi, r, err)) != SP_OK) return st;
    if ((st = request_stop(root, r, err)) != SP_OK) return st;
    if ((st = request_logprobs(root, r, err)) != SP_OK) return st;
    if ((st = srv__read_bool(root, "ignore_eos", &r->params.ignore_eos, NULL, err)) != SP_OK) return st;
    /* speculative: a spindle extension; false keeps this request's rows draft-free
     * (its output is the same either way, only the speed differs) */
    bool speculative = true;
    if ((st = srv__read_bool(root, "speculative", &speculative, NULL, err)) != SP_OK) return st;
    r->params.no_speculation = !speculative;
    if ((st = srv__read_int(root, "priority", INT32_MIN, INT32_MAX, &i, &given, err)) != SP_OK) return st;
    if (given) r->params.priority = (int)i;
    if ((st = srv__read_string(root, "user", &s, &len, NULL, err)) != SP_OK) return st; /* accepted, unused */
    if ((st = request_cache_salt(root, r, err)) != SP_OK) return st;
    /* timeout: a spindle extension, seconds from arrival (at most about 31 years) */
    if ((st = srv__read_number(root, "timeout", (srv__range){0.0, 1e9, true, false}, &d, &given, err)) != SP_OK)
        return st;
    if (given) r->params.timeout_s = d;
    /* ttft_slo_ms, tpot_slo_ms: spindle extensions, this request's latency targets */
    if ((st = srv__read_number(root, "ttft_slo_ms", (srv__range){0.0, 1e9, true, false}, &d, &given, err)) != SP_OK)
        return st;
    if (given) r->params.ttft_slo_ms = d;
    if ((st = srv__read_number(root, "tpot_slo_ms", (srv__range){0.0, 1e9, true, false}, &d, &given, err)) != SP_OK)
        return st;
    if (given) r->params.tpot_slo_ms = d;
    return SP_OK;
}

/* ---- prompts ---- */

/* Room for n prompts. */
static sp_status request_alloc_prompts(srv_request *r, size_t n, srv_error *err) {
    r->prompts = calloc(n, sizeof *r->prompts);
    r->prompt_lens = calloc(n, sizeof *r->prompt_lens);
    r->max_tokens = calloc(n, sizeof *r->max_tokens);
    if (!r->prompts || !r->prompt_lens || !r->max_tokens)
        return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for the prompts");
    return SP_OK;
}

/* Stores ids (taking ownership) as prompt k; an empty prompt is a 400 naming param. */
static sp_status request_set_prompt(srv_request *r, int k, int32_t *ids, size_t n, const char *param, srv_error *err) {
    r->prompts[k] = ids;
    if (n == 0) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Invalid '%s': the prompt is empty after tokenization.",
                         param);
    }
    /* longer than any context; the context check reports it */
    r->prompt_lens[k] = n > INT32_MAX ? INT32_MAX : (int32_t)n;
    return SP_OK;
}

static sp_status request_chat_prompt(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err) {
    sp_status st = request_alloc_prompts(r, 1, err);
    if (st != SP_OK) return st;
    r->n_prompts = 1;
    size_t len;
    if ((st = srv__chat_render(root, mi, r, &r->prompt_text, &len, err)) != SP_OK) return st;
    int32_t *ids;
    size_t n;
    r->reasoning_open_at_start = srv__reasoning_open_at_start(mi, r->prompt_text, len);
    if ((st = srv__reasoning_budget(root, mi, r, err)) != SP_OK) return st;
    if ((st = srv__chat_tokenize(mi, r->prompt_text, len, &ids, &n, err)) != SP_OK) return st;
    return request_set_prompt(r, 0, ids, n, "messages", err);
}

/* A prompt given as token ids: each inside the vocabulary. */
static sp_status request_prompt_ids(const json_t *arr, const srv_model_info *mi, srv_request *r, int k,
                                    const char *param, srv_error *err) {
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory for the prompt");
    r->prompts[k] = ids;
    for (size_t j = 0; j < n; j++) {
        char p[64];
        snprintf(p, sizeof p, "%s[%zu]", param, j);
        int64_t id;
        sp_status st = srv__want_int(json_array_get(arr, j), p, 0, tok_vocab_size(mi->vocab) - 1, &id, err);
        if (st != SP_OK) {
            const json_t *v = json_array_get(arr, j);
            if (json_is_integer(v)) {
                return srv__fail(err, SRV_ERROR_BAD_REQUEST, p,
                                 "Invalid '%s': %lld is not a token id of this model (0 to %d).", p,
                                 (long long)json_integer_value(v), tok_vocab_size(mi->vocab) - 1);
            }
            return st;
        }
        ids[j] = (int32_t)id;
    }
    return request_set_prompt(r, k, ids, n, param, err);
}

/* A prompt given as text: BOS by the vocab's rule, special tokens parsed (as vLLM and
 * llama-server tokenize completions prompts). */
static sp_status request_prompt_text(const json_t *s, const srv_model_info *mi, srv_request *r, int k,
                                     const char *param, srv_error *err) {
    int32_t *ids;
    size_t n;
    sp_status st =
        tok_encode(mi->vocab, json_string_value(s), json_string_length(s), tok_add_bos(mi->vocab), true, &ids, &n);
    if (st != SP_OK) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "tokenizing %s: %s", param, sp_last_error());
    return request_set_prompt(r, k, ids, n, param, err);
}

/* Every prompt runs n times: one request may not ask for more sequences than the
 * server's --max-sequences-per-request (the scheduler shares batch slots between
 * requests, but a bound keeps one request from filling the queue). */
static sp_status request_sequences_bound(const srv_model_info *mi, const srv_request *r, srv_error *err) {
    const int64_t sequences = (int64_t)r->n_prompts * r->n;
    if (mi->max_sequences <= 0 || sequences <= mi->max_sequences) return SP_OK;
    /* the param that alone exceeds the bound, else the one a client would lower first */
    const char *param = r->n > mi->max_sequences || r->n_prompts == 1 ? "n" : "prompt";
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                     "This request asks for %lld sequences (%d prompt%s times n = %d); this server allows %d per "
                     "request (its --max-sequences-per-request).",
                     (long long)sequences, r->n_prompts, r->n_prompts == 1 ? "" : "s", r->n, mi->max_sequences);
}

/* v with thousands grouped by commas ("160,512"), into buf. */
static const char *request_grouped(int64_t v, char *buf, size_t cap) {
    char digits[24];
    int len = snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? 0 : v));
    size_t o = 0;
    for (int i = 0; i < len && o + 1 < cap; i++) {
        if (i > 0 && (len - i) % 3 == 0 && o + 2 < cap) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[cap ? (o < cap ? o : cap - 1) : 0] = '\0';
    return buf;
}

sp_status srv__request_tokens_bound(const srv_model_info *mi, const srv_request *r, const char *param, const char *what,
                                    srv_error *err) {
    int64_t sum = 0;
    for (int k = 0; k < r->n_prompts; k++) sum += r->prompt_lens[k];
    const int64_t n = r->n > 0 ? r->n : 1, held = sum * n;
    const bool given = mi->max_request_tokens > 0;
    const int64_t cap = given ? mi->max_request_tokens : (int64_t)mi->max_seq_len * n;
    if (held <= cap) return SP_OK;
    char s[32], h[32], c[32], ctx[32], times[80] = "", deflt[96] = "";
    if (n > 1)
        snprintf(times, sizeof times, ", %s with n = %lld (each choice prefills its own)",
                 request_grouped(held, h, sizeof h), (long long)n);
    if (!given)
        snprintf(deflt, sizeof deflt, " (by default the context length, %s, times n)",
                 request_grouped(mi->max_seq_len, ctx, sizeof ctx));
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                     "This request's %s total %s tokens%s, more than this server's --max-request-tokens of %s%s. "
                     "Please send fewer or shorter %s%s, or split them over several requests.",
                     what, request_grouped(sum, s, sizeof s), times, request_grouped(cap, c, sizeof c), deflt, what,
                     n > 1 ? " or a smaller n" : "");
}

/* prompt: a string, an array of token ids, an array of strings, or an array of
 * token-id arrays (at most SRV_MAX_PROMPTS). */
static sp_status request_completion_prompts(const json_t *root, const srv_model_info *mi, srv_request *r,
                                            srv_error *err) {
    const json_t *prompt = srv__field(root, "prompt");
    sp_status st;
    if (!prompt) return srv__fail(err, SRV_ERROR_BAD_REQUEST, "prompt", "Missing required parameter: 'prompt'.");
    if (json_is_string(prompt)) {
        if ((st = request_alloc_prompts(r, 1, err)) != SP_OK) return st;
        r->n_prompts = 1;
        return request_prompt_text(prompt, mi, r, 0, "prompt", err);
    }
    if (!json_is_array(prompt))
        return srv__type_error(err, "prompt", "a string, an array of strings or an array of token ids", prompt);
    size_t n = json_array_size(prompt);
    if (n == 0) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "prompt",
                         "Invalid 'prompt': empty array. Expected an array with minimum length 1, but got an empty "
                         "array instead.");
    }
    const json_t *first = json_array_get(prompt, 0);
    if (json_is_number(first)) { /* one prompt of token ids */
        if ((st = request_alloc_prompts(r, 1, err)) != SP_OK) return st;
        r->n_prompts = 1;
        return request_prompt_ids(prompt, mi, r, 0, "prompt", err);
    }
    if (!json_is_string(first) && !json_is_array(first))
        return srv__type_error(err, "prompt[0]", "a string, an array of token ids or a token id", first);
    if (n > SRV_MAX_PROMPTS) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "prompt",
                         "Invalid 'prompt': array too long. Expected an array with maximum length %d, but got an "
                         "array with length %zu instead.",
                         SRV_MAX_PROMPTS, n);
    }
    r->n_prompts = (int)n;
    if ((st = request_sequences_bound(mi, r, err)) != SP_OK) return st; /* before tokenizing them all */
    if ((st = request_alloc_prompts(r, n, err)) != SP_OK) return st;
    for (size_t k = 0; k < n; k++) {
        const json_t *item = json_array_get(prompt, k);
        char param[32];
        snprintf(param, sizeof param, "prompt[%zu]", k);
        if (json_is_string(first)) {
            if (!json_is_string(item)) return srv__type_error(err, param, "a string", item);
            st = request_prompt_text(item, mi, r, (int)k, param, err);
        } else {
            if (!json_is_array(item)) return srv__type_error(err, param, "an array of token ids", item);
            st = request_prompt_ids(item, mi, r, (int)k, param, err);
        }
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

/* a + b for the messages, saturated (max_tokens may be any int64). */
static int64_t request_sum(int64_t a, int64_t b) {
    return b > INT64_MAX - a ? INT64_MAX : a + b;
}

/* Each prompt plus its completion within the context: the request's max_tokens, or by
 * default what the context leaves after the prompt, at most --default-max-tokens and
 * --max-tokens (so no request's budget is unbounded by accident). The messages follow
 * OpenAI's. */
static sp_status request_fit_context(const srv_model_info *mi, srv_request *r, int64_t max_tokens, srv_error *err) {
    bool chat = r->endpoint == SRV_ENDPOINT_CHAT;
    const char *param = chat ? "messages" : "prompt";
    int64_t ctx = mi->max_seq_len;
    for (int k = 0; k < r->n_prompts; k++) {
        int64_t p = r->prompt_lens[k];
        if (max_tokens > 0 && max_tokens > ctx - p) {
            if (chat) {
                return srv__fail(err, SRV_ERROR_CONTEXT_LENGTH, param,
                                 "This model's maximum context length is %lld tokens. However, you requested %lld "
                                 "tokens (%lld in the messages, %lld in the completion). Please reduce the length of "
                                 "the messages or completion.",
                                 (long long)ctx, (long long)request_sum(p, max_tokens), (long long)p,
                                 (long long)max_tokens);
            }
            return srv__fail(err, SRV_ERROR_CONTEXT_LENGTH, param,
                             "This model's maximum context length is %lld tokens, however you requested %lld tokens "
                             "(%lld in your prompt; %lld for the completion). Please reduce your prompt; or "
                             "completion length.",
                             (long long)ctx, (long long)request_sum(p, max_tokens), (long long)p,
                             (long long)max_tokens);
        }
        if (max_tokens == 0 && p >= ctx) {
            return srv__fail(err, SRV_ERROR_CONTEXT_LENGTH, param,
                             "This model's maximum context length is %lld tokens. However, your %s resulted in %lld "
                             "tokens, which leaves no room for the completion. Please reduce the length of the %s.",
                             (long long)ctx, chat ? "messages" : "prompt", (long long)p, chat ? "messages" : "prompt");
        }
        int64_t room = ctx - p; /* the default: what the context leaves, capped */
        if (mi->max_tokens > 0 && room > mi->max_tokens) room = mi->max_tokens;
        if (mi->default_max_tokens > 0 && room > mi->default_max_tokens) room = mi->default_max_tokens;
        r->max_tokens[k] = (int32_t)(max_tokens > 0 ? max_tokens : room);
    }
    r->params.max_tokens = r->max_tokens[0];
    return SP_OK;
}

sp_status srv__request_from_json(srv_endpoint endpoint, const json_t *root, const srv_model_info *mi, srv_request *out,
                                 srv_error *err) {
    *out = (srv_request){.endpoint = endpoint, .api = endpoint, .n = 1};
    *err = (srv_error){0};
    int64_t max_tokens;
    sp_status st;
    if ((st = srv__check_model(root, mi, err)) != SP_OK ||
        (st = request_options(root, mi, out, &max_tokens, err)) != SP_OK ||
        (st = endpoint == SRV_ENDPOINT_CHAT ? request_chat_prompt(root, mi, out, err)
                                            : request_completion_prompts(root, mi, out, err)) != SP_OK ||
        (st = request_sequences_bound(mi, out, err)) != SP_OK ||
        (st = request_fit_context(mi, out, max_tokens, err)) != SP_OK ||
        (st = endpoint == SRV_ENDPOINT_CHAT ? srv__request_tokens_bound(mi, out, "messages", "messages", err)
                                            : srv__request_tokens_bound(mi, out, "prompt", "prompts", err)) != SP_OK) {
        srv_request_free(out);
        return st;
    }
    return SP_OK;
}

sp_status srv_request_parse(srv_endpoint endpoint, const char *body, size_t len, const srv_model_info *mi,
                            srv_request *out, srv_error *err) {
    *out = (srv_request){.endpoint = endpoint, .api = endpoint, .n = 1};
    *err = (srv_error){0};
    json_t *root = NULL;
    sp_status st = srv__parse_body(body, len, &root, err);
    if (st != SP_OK) return st;
    st = srv__request_from_json(endpoint, root, mi, out, err);
    json_decref(root);
    return st;
}

void srv_request_free(srv_request *r) {
    for (int k = 0; r->prompts && k < r->n_prompts; k++) free(r->prompts[k]);
    free(r->prompts);
    free(r->prompt_lens);
    free(r->max_tokens);
    for (int k = 0; r->stop && k < r->params.n_stop; k++) free(r->stop[k]);
    free(r->stop);
    free(r->logit_bias);
    free(r->prompt_text);
    gram_grammar_destroy(r->params.grammar);
    json_decref(r->tools);
    free(r->tool_choice_name);
    free(r->think_close);
    free(r->cache_salt);
    json_decref(r->api_fields);
    *r = (srv_request){0};
}

/* ---- choices ---- */

sched_request_params srv_request_choice_params(const srv_request *r, int prompt, int choice) {
    SP_ASSERT(prompt >= 0 && prompt < r->n_prompts && choice >= 0 && choice < r->n);
    sched_request_params p = r->params;
    p.prompt = r->prompts[prompt];
    p.n_prompt = r->prompt_lens[prompt];
    p.max_tokens = r->max_tokens[prompt];
    if (p.min_tokens > p.max_tokens) p.min_tokens = p.max_tokens; /* a default max_tokens can be smaller */
    p.sampling.seed = r->seed_given ? r->params.sampling.seed + (uint64_t)choice : srv_random_u64();
    return p;
}

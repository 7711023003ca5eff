/* openai_response.c: results in OpenAI's shapes. The non-streaming bodies
 * (chat.completion, text_completion) with usage and llama-server's timings, the SSE
 * chunks of a stream (chat.completion.chunk, text_completion), logprobs in both
 * endpoints' forms, and /v1/models. Every string that came from the model goes
 * through srv__json_text, so a token that is not valid UTF-8 cannot break the JSON.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

const char SRV_SSE_DONE[] = "data: [DONE]\n\n";

/* OpenAI's floor for a log-probability it cannot express (vLLM clamps the same way);
 * JSON has no -Infinity. */
#define RESP_MIN_LOGPROB (-9999.0)

void srv_response_id(srv_endpoint endpoint, char *buf, size_t cap) {
    uint64_t a = srv_random_u64(), b = srv_random_u64();
    const char *prefix = endpoint == SRV_ENDPOINT_CHAT         ? "chatcmpl-"
                         : endpoint == SRV_ENDPOINT_RESPONSES  ? "resp_"
                         : endpoint == SRV_ENDPOINT_MESSAGES   ? "msg_"
                         : endpoint == SRV_ENDPOINT_EMBEDDINGS ? "embd-"
                                                               : "cmpl-";
    snprintf(buf, cap, "%s%016llx%08llx", prefix, (unsigned long long)a, (unsigned long long)(b & 0xFFFFFFFFu));
}

const char *srv_finish_reason(sched_finish f) {
    switch (f) {
    case SCHED_FINISH_STOP: return "stop";
    case SCHED_FINISH_LENGTH: return "length";
    case SCHED_FINISH_CANCELLED: return "abort";
    case SCHED_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

/* ---- small builders; each returns a new reference or NULL on out of memory ---- */

static json_t *resp_logprob(float lp) {
    return json_real(isfinite(lp) ? (double)lp : RESP_MIN_LOGPROB);
}

static json_t *resp_str_or_null(const char *s) {
    return s ? json_string(s) : json_null();
}

/* A token's text as the logprobs show it: its bytes (special tokens rendered) when
 * they are valid UTF-8; else OpenAI's form for a piece of a character, "bytes:\xe2\x80"
 * with each byte that is not part of a whole character written as \xNN. *bytes (when
 * not NULL) gets the raw bytes as OpenAI's "bytes" list. */
static json_t *resp_token_text(const tok_vocab *v, int32_t id, json_t **bytes) {
    char small[256], *buf = small;
    size_t len = tok_token_bytes(v, id, true, small, sizeof small);
    if (len > sizeof small) {
        if (!(buf = malloc(len))) return NULL;
        tok_token_bytes(v, id, true, buf, len);
    }
    json_t *text;
    if (srv__utf8_valid(buf, len)) {
        text = json_stringn_nocheck(buf, len);
    } else {
        char *esc = malloc(6 + 4 * len + 1);
        size_t o = 0;
        if (esc) {
            memcpy(esc, "bytes:", 6);
            o = 6;
            for (size_t i = 0; i < len;) {
                size_t c = 1;
                while (c <= 4 && i + c <= len && !srv__utf8_valid(buf + i, c)) c++;
                if (c <= 4 && i + c <= len) { /* a whole character */
                    memcpy(esc + o, buf + i, c);
                    o += c;
                    i += c;
                } else {
                    o += (size_t)sprintf(esc + o, "\\x%02x", (unsigned char)buf[i]);
                    i++;
                }
            }
        }
        text = esc ? json_stringn_nocheck(esc, o) : NULL;
        free(esc);
    }
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < len && *bytes; i++) {
            if (json_array_append_new(*bytes, json_integer((unsigned char)buf[i])) != 0) {
                json_decref(*bytes);
                *bytes = NULL;
            }
        }
    }
    if (buf != small) free(buf);
    return text;
}

/* Characters (code points) a token adds to the text, for text_offset: counting the
 * bytes that start a character makes a character split across tokens count once. */
static int64_t resp_token_chars(const tok_vocab *v, int32_t id) {
    char small[256], *buf = small;
    size_t len = tok_token_bytes(v, id, true, small, sizeof small);
    if (len > sizeof small) {
        if (!(buf = malloc(len))) return 0;
        tok_token_bytes(v, id, true, buf, len);
    }
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)buf[i] & 0xC0) != 0x80;
    if (buf != small) free(buf);
    return n;
}

/* {"token", "logprob", "bytes"} */
static json_t *resp_chat_logprob_entry(const tok_vocab *v, sched_token t) {
    json_t *bytes = NULL, *o = json_object();
    json_t *text = resp_token_text(v, t.id, &bytes);
    int bad = !o;
    bad |= json_object_set_new(o, "token", text);
    bad |= json_object_set_new(o, "logprob", resp_logprob(t.logprob));
    bad |= json_object_set_new(o, "bytes", bytes);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}.
 * top holds out_top alternatives per token, of which the request's top_logprobs show. */
static json_t *resp_chat_logprobs(const srv_request *r, const tok_vocab *v, const sched_token *tokens, int32_t n,
                                  const sched_token *top, int out_top) {
    json_t *content = json_array(), *o = json_object();
    int bad = !content || !o;
    int show = r->top_logprobs < out_top ? r->top_logprobs : out_top;
    for (int32_t i = 0; i < n && !bad; i++) {
        json_t *e = resp_chat_logprob_entry(v, tokens[i]), *alts = json_array();
        bad |= !e || !alts;
        for (int k = 0; k < show && !bad && top; k++)
            bad |= json_array_append_new(alts, resp_chat_logprob_entry(v, top[(size_t)i * (size_t)out_top + k]));
        bad |= json_object_set_new(e, "top_logprobs", alts);
        bad |= json_array_append_new(content, e);
    }
    bad |= json_object_set_new(o, "content", content);
    bad |= json_object_set_new(o, "refusal", json_null());
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Completions: {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}.
 * text_offset counts characters from offset (0: the completion's start). */
static json_t *resp_completion_logprobs(const srv_request *r, const tok_vocab *v, const sched_token *tokens, int32_t n,
                                        const sched_token *top, int out_top, int64_t offset, bool with_offsets) {
    json_t *o = json_object(), *texts = json_array(), *lps = json_array(), *tops = json_array(),
           *offsets = json_array();
    int bad = !o || !texts || !lps || !tops || !offsets;
    int show = r->top_logprobs < out_top ? r->top_logprobs : out_top;
    for (int32_t i = 0; i < n && !bad; i++) {
        bad |= json_array_append_new(texts, resp_token_text(v, tokens[i].id, NULL));
        bad |= json_array_append_new(lps, resp_logprob(tokens[i].logprob));
        bad |= json_array_append_new(offsets, json_integer(offset));
        offset += resp_token_chars(v, tokens[i].id);
        json_t *alts = json_object();
        bad |= !alts;
        for (int k = 0; k < show && !bad && top; k++) {
            sched_token t = top[(size_t)i * (size_t)out_top + k];
            json_t *key = resp_token_text(v, t.id, NULL);
            bad |= !key;
            /* two tokens can show the same text; the likelier (earlier) one keeps it */
            if (!bad && !json_object_getn(alts, json_string_value(key), json_string_length(key))) {
                bad |= json_object_setn_new_nocheck(alts, json_string_value(key), json_string_length(key),
                                                    resp_logprob(t.logprob));
            }
            json_decref(key);
        }
        bad |= json_array_append_new(tops, alts);
    }
    bad |= json_object_set_new(o, "tokens", texts);
    bad |= json_object_set_new(o, "token_logprobs", lps);
    bad |= json_object_set_new(o, "top_logprobs", tops);
    if (with_offsets) {
        bad |= json_object_set_new(o, "text_offset", offsets);
    } else {
        json_decref(offsets);
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *resp_logprobs(const srv_request *r, const srv_model_info *mi, const sched_token *tokens, int32_t n,
                             const sched_token *top, int out_top, bool with_offsets) {
    if (!r->logprobs || (n == 0 && !with_offsets)) return json_null();
    if (r->endpoint == SRV_ENDPOINT_CHAT) return resp_chat_logprobs(r, mi->vocab, tokens, n, top, out_top);
    return resp_completion_logprobs(r, mi->vocab, tokens, n, top, out_top, 0, with_offsets);
}

/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}:
 * outs[k] belongs to prompt k / n, whose prompt counts once. */
/* Tokens of o's answer up to the end of its reasoning (0 when it does not think). */
static int64_t resp_reasoning_tokens(const srv_request *r, const srv_model_info *mi, const sched_output *o) {
    srv_reasoning_split split;
    if (!o->text || !srv__reasoning_split(mi, r, o->text, o->text_len, &split)) return 0;
    size_t bytes = 0;
    int64_t n = 0;
    for (int32_t i = 0; i < o->n_tokens && bytes < split.reasoning_end; i++, n++)
        bytes += tok_token_bytes(mi->vocab, o->tokens[i].id, false, NULL, 0);
    return n;
}

static json_t *resp_usage(const srv_request *r, const srv_model_info *mi, const sched_output *const *outs, int n_outs) {
    int64_t prompt = 0, completion = 0, cached = 0, reasoning = 0;
    int n = r->n > 0 ? r->n : 1;
    for (int k = 0; k < n_outs; k++) {
        if (k % n == 0) {
            prompt += outs[k]->prompt_tokens;
            cached += outs[k]->cached_tokens;
        }
        completion += outs[k]->completion_tokens;
        if (mi && mi->reasoning_tags) reasoning += resp_reasoning_tokens(r, mi, outs[k]);
    }
    json_t *u = json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)prompt, "completion_tokens",
                          (json_int_t)completion, "total_tokens", (json_int_t)(prompt + completion),
                          "prompt_tokens_details", "cached_tokens", (json_int_t)cached);
    if (u && mi && mi->reasoning_tags && r->endpoint == SRV_ENDPOINT_CHAT)
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:I}", "reasoning_tokens", (json_int_t)reasoning));
    return u;
}

static double resp_finite(double x) {
    return isfinite(x) ? x : 0.0;
}

/* llama-server's "timings" from one output's sched_timings. */
static json_t *resp_timings(const sched_output *o) {
    int64_t prompt_n = o->prompt_tokens - o->cached_tokens, predicted_n = o->completion_tokens;
    double prompt_ms = resp_finite(o->timings.prefill_s * 1e3), predicted_ms = resp_finite(o->timings.decode_s * 1e3);
    return json_pack("{s:I,s:f,s:f,s:f,s:I,s:f,s:f,s:f}", "prompt_n", (json_int_t)prompt_n, "prompt_ms", prompt_ms,
                     "prompt_per_token_ms", prompt_n > 0 ? prompt_ms / (double)prompt_n : 0.0, "prompt_per_second",
                     prompt_ms > 0 ? 1e3 * (double)prompt_n / prompt_ms : 0.0, "predicted_n", (json_int_t)predicted_n,
                     "predicted_ms", predicted_ms, "predicted_per_token_ms",
                     predicted_n > 0 ? predicted_ms / (double)predicted_n : 0.0, "predicted_per_second",
                     predicted_ms > 0 ? 1e3 * (double)predicted_n / predicted_ms : 0.0);
}

/* {"id", "object", "created", "model", "system_fingerprint": null} */
static json_t *resp_envelope(const srv_model_info *mi, const char *id, const char *object, int64_t created) {
    const char *model = mi->served_name ? mi->served_name : "";
    return json_pack("{s:s?,s:s,s:I,s:o,s:n}", "id", id, "object", object, "created", (json_int_t)created, "model",
                     srv__json_text(model, strlen(model)), "system_fingerprint");
}

/* ---- non-streaming ---- */

static json_t *resp_choice(const srv_request *r, const srv_model_info *mi, int index, const sched_output *o) {
    json_t *choice = json_object();
    int bad = !choice;
    bad |= json_object_set_new(choice, "index", json_integer(index));
    const char *all = o->text ? o->text : "";
    size_t all_len = o->text ? o->text_len : 0;
    /* a thinking model's reasoning apart, then the answer after it */
    srv_reasoning_split split;
    json_t *reasoning = NULL;
    if (srv__reasoning_split(mi, r, all, all_len, &split)) {
        reasoning = srv__json_text(all + split.reasoning, split.reasoning_len);
        all += split.content;
        all_len = split.content_len;
    }
    json_t *text = srv__json_text(all, all_len);
    /* an answer that is tool calls: the calls, what text is left around them, "tool_calls" */
    char *content = NULL;
    json_t *calls = r->endpoint == SRV_ENDPOINT_CHAT && o->finish == SCHED_FINISH_STOP
                        ? srv_tools_parse(mi, r, all, all_len, &content)
                        : NULL;
    /* calls that max_tokens cut: the calls as far as they came, with finish_reason
     * "length", as OpenAI answers them (and as a stream sent them): forced ones (the
     * grammar makes the answer calls), and auto ones once the answer opened a call of one
     * of the tools (the text before it is content) */
    bool cut_calls = false;
    if (!calls && r->endpoint == SRV_ENDPOINT_CHAT && r->tools && o->finish == SCHED_FINISH_LENGTH) {
        size_t at = 0;
        bool opened = r->tool_choice == SRV_TOOL_CHOICE_REQUIRED || r->tool_choice == SRV_TOOL_CHOICE_NAMED;
        if (!opened && r->tool_choice == SRV_TOOL_CHOICE_AUTO) {
            at = srv_tools_hold_from(mi, all, all_len, false);
            opened = at < all_len && srv_tools_auto_start(mi, r, all + at, all_len - at) == SRV_AUTO_START;
        }
        if (opened && (calls = srv__tools_scan_all(all + at, all_len - at)) != NULL) {
            cut_calls = true;
            size_t n = at;
            while (n > 0 && (all[n - 1] == ' ' || all[n - 1] == '\n' || all[n - 1] == '\t' || all[n - 1] == '\r')) n--;
            if (n > 0) content = strndup(all, n);
        }
    }
    if (calls) {
        json_decref(text);
        text = content ? srv__json_text(content, strlen(content)) : json_null();
        free(content);
    }
    if (r->endpoint == SRV_ENDPOINT_CHAT) {
        json_t *msg = json_pack("{s:s,s:o,s:n}", "role", "assistant", "content", text, "refusal");
        if (calls) bad |= json_object_set_new(msg, "tool_calls", calls);
        if (reasoning) bad |= json_object_set_new(msg, "reasoning_content", reasoning);
        bad |= json_object_set_new(choice, "message", msg);
    } else {
        bad |= json_object_set_new(choice, "text", text);
    }
    bad |= json_object_set_new(choice, "logprobs",
                               resp_logprobs(r, mi, o->tokens, o->n_tokens, o->top, o->top_logprobs, true));
    bad |= json_object_set_new(choice, "finish_reason",
                               calls && !cut_calls ? json_string("tool_calls")
                                                   : resp_str_or_null(srv_finish_reason(o->finish)));
    /* vLLM's stop_reason: the stop string that ended the choice (Anthropic's stop_sequence) */
    if (!calls && o->stop_matched > 0 && o->stop_matched <= r->params.n_stop) {
        const char *stop = r->params.stop[o->stop_matched - 1];
        bad |= json_object_set_new(choice, "stop_reason", srv__json_text(stop, strlen(stop)));
    }
    if (bad) {
        json_decref(choice);
        return NULL;
    }
    return choice;
}

json_t *srv_render_response(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                            const sched_output *const *outs, int n_outs) {
    bool chat = r->endpoint == SRV_ENDPOINT_CHAT;
    json_t *root = resp_envelope(mi, id, chat ? "chat.completion" : "text_completion", created);
    json_t *choices = json_array();
    int bad = !root || !choices;
    for (int k = 0; k < n_outs && !bad; k++) bad |= json_array_append_new(choices, resp_choice(r, mi, k, outs[k]));
    bad |= json_object_set_new(root, "choices", choices);
    bad |= json_object_set_new(root, "usage", resp_usage(r, mi, outs, n_outs));
    if (n_outs > 0) bad |= json_object_set_new(root, "timings", resp_timings(outs[0]));
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- streaming ---- */

/* "data: <body>\n\n", or NULL when body is NULL or out of memory; takes ownership of
 * body (freed with free). */
static char *resp_sse_frame(char *body) {
    if (!body) return NULL;
    size_t len = strlen(body);
    char *event = malloc(len + 9);
    if (event) {
        memcpy(event, "data: ", 6);
        memcpy(event + 6, body, len);
        memcpy(event + 6 + len, "\n\n", 3);
    }
    free(body);
    return event;
}

/* "data: <compact JSON>\n\n"; takes ownership of j. */
static char *resp_sse_event(json_t *j) {
    char *body = j ? json_dumps(j, SRV_JSON_FLAGS) : NULL;
    json_decref(j);
    return resp_sse_frame(body);
}

/* A chunk around one choice (taken); "usage": null when the stream reports usage last. */
static char *resp_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                        json_t *choice) {
    bool chat = r->endpoint == SRV_ENDPOINT_CHAT;
    json_t *root = resp_envelope(mi, id, chat ? "chat.completion.chunk" : "text_completion", created);
    int bad = !root;
    bad |= json_object_set_new(root, "choices", choice ? json_pack("[o]", choice) : NULL);
    if (r->include_usage) bad |= json_object_set_new(root, "usage", json_null());
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return resp_sse_event(root);
}

char *srv_sse_role_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created, int index) {
    json_t *choice = json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", index, "delta", "role", "assistant", "content", "",
                               "logprobs", "finish_reason");
    return resp_chunk(r, mi, id, created, choice);
}

char *srv_sse_delta_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created, int index,
                          const char *text, size_t len, const sched_token *tokens, int32_t n_tokens,
                          const sched_token *top, int out_top_logprobs, const char *finish_reason) {
    json_t *choice = json_object();
    int bad = !choice;
    bad |= json_object_set_new(choice, "index", json_integer(index));
    json_t *content = srv__json_text(text ? text : "", text ? len : 0);
    if (r->endpoint == SRV_ENDPOINT_CHAT) {
        /* OpenAI's last chunk has an empty delta beside finish_reason */
        json_t *delta = json_object();
        if (len > 0 || !finish_reason) {
            bad |= json_object_set_new(delta, "content", content);
        } else {
            json_decref(content);
        }
        bad |= json_object_set_new(choice, "delta", delta);
    } else {
        bad |= json_object_set_new(choice, "text", content);
    }
    /* text_offset needs the characters sent before this chunk, which the caller does not
     * pass: streamed completions logprobs leave it out (the SDK reads it as optional) */
    bad |=
        json_object_set_new(choice, "logprobs", resp_logprobs(r, mi, tokens, n_tokens, top, out_top_logprobs, false));
    bad |= json_object_set_new(choice, "finish_reason", resp_str_or_null(finish_reason));
    if (bad) {
        json_decref(choice);
        return NULL;
    }
    return resp_chunk(r, mi, id, created, choice);
}

char *srv_sse_reasoning_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                              int index, const char *text, size_t len, const sched_token *tokens, int32_t n_tokens,
                              const sched_token *top, int out_top_logprobs) {
    json_t *choice =
        json_pack("{s:i,s:{s:o},s:o,s:n}", "index", index, "delta", "reasoning_content", srv__json_text(text, len),
                  "logprobs", resp_logprobs(r, mi, tokens, n_tokens, top, out_top_logprobs, false), "finish_reason");
    return choice ? resp_chunk(r, mi, id, created, choice) : NULL;
}

char *srv_sse_tool_call_delta(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                              int index, json_t *tool_call) {
    json_t *choice = tool_call ? json_pack("{s:i,s:{s:[o]},s:n,s:n}", "index", index, "delta", "tool_calls", tool_call,
                                           "logprobs", "finish_reason")
                               : NULL;
    return choice ? resp_chunk(r, mi, id, created, choice) : NULL;
}

char *srv_sse_usage_chunk(const srv_request *r, const srv_model_info *mi, const char *id, int64_t created,
                          const sched_output *const *outs, int n_outs) {
    bool chat = r->endpoint == SRV_ENDPOINT_CHAT;
    json_t *root = resp_envelope(mi, id, chat ? "chat.completion.chunk" : "text_completion", created);
    int bad = !root;
    bad |= json_object_set_new(root, "choices", json_array());
    bad |= json_object_set_new(root, "usage", resp_usage(r, mi, outs, n_outs));
    /* an API over chat reads each choice's stop string here (its translator gets this chunk,
     * never the client): the finish chunk is built without the output */
    if (r->api != r->endpoint) {
        json_t *stops = json_array();
        for (int k = 0; k < n_outs && stops; k++) {
            int m = outs[k]->stop_matched;
            const char *s = m > 0 && m <= r->params.n_stop ? r->params.stop[m - 1] : NULL;
            bad |= json_array_append_new(stops, s ? srv__json_text(s, strlen(s)) : json_null());
        }
        bad |= json_object_set_new(root, "stop_reasons", stops);
    }
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return resp_sse_event(root);
}

char *srv_sse_error_event(const srv_error *err) {
    return resp_sse_frame(srv_error_json(err));
}

/* ---- /v1/models ---- */

/* One model object of /v1/models, under the id asked for. */
static json_t *model_object(const srv_model_info *mi, const char *id) {
    const char *name = mi->served_name ? mi->served_name : "";
    json_t *aliases = json_array();
    for (int i = 0; i < mi->n_aliases; i++)
        json_array_append_new(aliases, srv__json_text(mi->aliases[i], strlen(mi->aliases[i])));
    return json_pack("{s:o,s:s,s:I,s:s,s:o,s:o,s:i}", "id", srv__json_text(id, strlen(id)), "object", "model",
                     "created", (json_int_t)mi->created, "owned_by", "spindle", "root",
                     srv__json_text(name, strlen(name)), "aliases", aliases, "max_model_len", (int)mi->max_seq_len);
}

json_t *srv_render_models(const srv_model_info *mi) {
    return json_pack("{s:s,s:[o]}", "object", "list", "data", model_object(mi, mi->served_name ? mi->served_name : ""));
}

json_t *srv_render_model(const srv_model_info *mi, const char *id, srv_error *err) {
    if (!srv_model_name_known(mi, id, strlen(id))) {
        srv__model_not_found(mi, id, strlen(id), NULL, err);
        return NULL;
    }
    return model_object(mi, id);
}

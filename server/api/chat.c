/* chat.c: chat messages to prompt text. Loads the served model's chat template once
 * (the GGUF's, a --chat-template file, or ChatML when the model has none) and probes
 * what it accepts; per request, checks the messages the way OpenAI does, renders them
 * as Hugging Face's apply_chat_template would (vLLM's context: messages, tools,
 * add_generation_prompt, the special tokens, then chat_template_kwargs), and
 * tokenizes the result.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/api/api_internal.h"

/* llama.cpp's and vLLM's fallback when a model carries no template. */
static const char CHAT_CHATML[] =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* The text the content-parts probe looks for; nothing else prints it. */
#define CHAT_PROBE_NEEDLE "spindle-parts-probe-5e1f0c"

enum { CHAT_MAX_TEMPLATE_BYTES = 1 << 20 };

static const char *const CHAT_ROLES[] = {"system", "user", "assistant", "tool", "developer"};

/* ---- loading the template ---- */

/* Reads all of path (at most CHAT_MAX_TEMPLATE_BYTES) into *out (caller owns; free();
 * NUL-terminated, *len bytes). */
static sp_status chat_read_file(const char *path, char **out, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return sp_fail(SP_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = malloc(CHAT_MAX_TEMPLATE_BYTES + 2);
    if (!buf) {
        fclose(fp);
        return sp_fail(SP_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, CHAT_MAX_TEMPLATE_BYTES + 1, fp);
    bool failed = ferror(fp) != 0;
    fclose(fp);
    if (failed || n > CHAT_MAX_TEMPLATE_BYTES) {
        free(buf);
        return failed ? sp_fail(SP_ERR_IO, "%s: read error", path)
                      : sp_fail(SP_ERR_RANGE, "%s: larger than the limit of %d bytes", path, CHAT_MAX_TEMPLATE_BYTES);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return SP_OK;
}

/* Does the template print a text part's text when content is a list of parts? A
 * template that does not expect lists either fails (string + list) or prints the
 * list's repr ("[{'type': 'text', ...}]"), which the needle check must not count. */
static bool chat_probe_takes_parts(const tmpl *t, const json_t *tokens) {
    json_t *ctx = json_pack("{s:[{s:s,s:[{s:s,s:s}]}],s:b,s:n}", "messages", "role", "user", "content", "type", "text",
                            "text", CHAT_PROBE_NEEDLE, "add_generation_prompt", 1, "tools");
    if (!ctx) return false;
    if (tokens) json_object_update_missing(ctx, (json_t *)tokens);
    char *out = NULL;
    size_t len = 0;
    bool parts = false;
    if (tmpl_render(t, ctx, NULL, &out, &len) == SP_OK) {
        parts = memmem(out, len, CHAT_PROBE_NEEDLE, strlen(CHAT_PROBE_NEEDLE)) && !memmem(out, len, "'type'", 6) &&
                !memmem(out, len, "\"type\"", 6);
    }
    free(out);
    json_decref(ctx);
    return parts;
}

sp_status srv_model_info_init_template(srv_model_info *mi, const gguf_file *f, const char *override_path) {
    mi->chat_template = NULL;
    mi->template_tokens = NULL;
    mi->template_takes_parts = false;
    char *source = NULL;
    size_t len = 0;
    const char *origin;
    sp_status st;
    if (override_path) {
        origin = override_path;
        st = chat_read_file(override_path, &source, &len);
    } else {
        origin = gguf_path(f);
        st = tmpl_source_from_gguf(f, &source, &len);
        if (st == SP_ERR_NOT_FOUND) {
            sp_log_warn("%s: the model has no chat template; using ChatML (<|im_start|>role ... <|im_end|>)", origin);
            origin = "ChatML";
            source = strdup(CHAT_CHATML);
            len = strlen(CHAT_CHATML);
            st = source ? SP_OK : sp_fail(SP_ERR_NOMEM, "out of memory");
        }
    }
    if (st != SP_OK) return st;

    tmpl *t = NULL;
    st = tmpl_parse(source, len, &t);
    if (st != SP_OK) {
        free(source);
        return sp_fail_prefix(st, "%s: chat template", origin);
    }

    json_t *tokens = json_object();
    if (!tokens) {
        free(source);
        tmpl_destroy(t);
        return sp_fail(SP_ERR_NOMEM, "out of memory");
    }
    if ((st = tmpl_context_add_special_tokens(f, tokens)) != SP_OK) {
        free(source);
        json_decref(tokens);
        tmpl_destroy(t);
        return st;
    }
    mi->chat_template = t;
    mi->template_tokens = tokens;
    mi->template_takes_parts = chat_probe_takes_parts(t, tokens);
    mi->tool_format = srv__tools_detect(t, tokens, source, len, &mi->template_renders_tools);
    mi->reasoning_tags = srv__reasoning_detect(source, len);
    free(source);
    sp_log_info("%s: tool calls in the %s format (%s)", origin, srv__tools_format_name(mi->tool_format),
                mi->template_renders_tools ? "the template renders the tools"
                                           : "the template ignores tools: spindle lists them in a system block");
    sp_log_debug("%s: chat template loaded; content parts %s", origin,
                 mi->template_takes_parts ? "passed to it" : "joined into one string");
    return SP_OK;
}

void srv_model_info_free(srv_model_info *mi) {
    tmpl_destroy((tmpl *)mi->chat_template);
    json_decref(mi->template_tokens);
    mi->chat_template = NULL;
    mi->template_tokens = NULL;
    srv_grammar_cache_destroy(mi->grammars);
    mi->grammars = NULL;
    srv_response_store_destroy(mi->responses);
    mi->responses = NULL;
}

/* ---- messages ---- */

/* Checks an array of content parts (only {"type": "text", "text": ...} is supported)
 * and returns what the template gets: the parts themselves when it takes parts, else
 * their texts joined with "\n" (vLLM's "string" content format joins them so; OpenAI
 * documents no separator). New reference in *out. */
static sp_status chat_content_parts(const json_t *parts, size_t m, bool takes_parts, json_t **out, srv_error *err) {
    char param[96];
    size_t n = json_array_size(parts), total = 0;
    if (n == 0) {
        snprintf(param, sizeof param, "messages[%zu].content", m);
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                         "Invalid '%s': empty array. Expected an array with minimum length 1, but got an empty array "
                         "instead.",
                         param);
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *part = json_array_get(parts, i);
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", m, i);
        if (!json_is_object(part)) return srv__type_error(err, param, "an object", part);
        const json_t *type = json_object_get(part, "type");
        snprintf(param, sizeof param, "messages[%zu].content[%zu].type", m, i);
        if (!type) return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Missing required parameter: '%s'.", param);
        if (!json_is_string(type)) return srv__type_error(err, param, "a string", type);
        if (strcmp(json_string_value(type), "text") != 0 || json_string_length(type) != 4) {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                             "Invalid value for '%s': content parts of type '%.64s' are not supported by this "
                             "server. Supported values are: 'text'.",
                             param, json_string_value(type));
        }
        const json_t *text = json_object_get(part, "text");
        snprintf(param, sizeof param, "messages[%zu].content[%zu].text", m, i);
        if (!text) return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Missing required parameter: '%s'.", param);
        if (!json_is_string(text)) return srv__type_error(err, param, "a string", text);
        total += json_string_length(text) + 1;
    }
    if (takes_parts) {
        *out = json_incref((json_t *)parts);
        return SP_OK;
    }
    char *joined = malloc(total);
    if (!joined) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory joining message content");
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *text = json_object_get(json_array_get(parts, i), "text");
        if (i > 0) joined[len++] = '\n';
        memcpy(joined + len, json_string_value(text), json_string_length(text));
        len += json_string_length(text);
    }
    *out = json_stringn_nocheck(joined, len);
    free(joined);
    if (!*out) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory joining message content");
    return SP_OK;
}

/* The string (or, want_object, object) obj[key] at path "param.key": a 400 naming it
 * when it is absent or of another type. */
static sp_status chat_required(const json_t *obj, const char *param, const char *key, bool want_object,
                               const json_t **out, srv_error *err) {
    char p[160];
    snprintf(p, sizeof p, "%s.%s", param, key);
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return srv__fail(err, SRV_ERROR_BAD_REQUEST, p, "Missing required parameter: '%s'.", p);
    if (want_object ? !json_is_object(v) : !json_is_string(v))
        return srv__type_error(err, p, want_object ? "an object" : "a string", v);
    *out = v;
    return SP_OK;
}

/* messages[m].tool_calls, as OpenAI checks them: an array of {"id": string, "type":
 * "function", "function": {"name": string, "arguments": string}}. Anything else is a 400
 * naming the field, rather than a prompt rendered from whatever the template makes of it. */
static sp_status chat_tool_calls(const json_t *calls, size_t m, srv_error *err) {
    char param[128];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", m);
    if (!json_is_array(calls)) return srv__type_error(err, param, "an array", calls);
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *call = json_array_get(calls, k), *v = NULL, *fn = NULL;
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", m, k);
        if (!json_is_object(call)) return srv__type_error(err, param, "an object", call);
        sp_status st = chat_required(call, param, "id", false, &v, err);
        if (st == SP_OK) st = chat_required(call, param, "type", false, &v, err);
        if (st == SP_OK && strcmp(json_string_value(v), "function") != 0) {
            char p[160];
            snprintf(p, sizeof p, "%s.type", param);
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, p,
                             "Invalid value for '%s': '%.64s'. Supported values are: 'function'.", p,
                             json_string_value(v));
        }
        if (st == SP_OK) st = chat_required(call, param, "function", true, &fn, err);
        if (st != SP_OK) return st;
        snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu].function", m, k);
        if ((st = chat_required(fn, param, "name", false, &v, err)) != SP_OK ||
            (st = chat_required(fn, param, "arguments", false, &v, err)) != SP_OK)
            return st;
    }
    return SP_OK;
}

/* Checks messages[m] and returns the copy the template sees (new reference in *out):
 * every key kept as given (name, tool_calls, tool_call_id, reasoning_content, ...),
 * content as a string, or the parts for a template that takes them. A missing or null
 * content is "" (an assistant turn that only calls tools), as vLLM passes it. */
static sp_status chat_message(const json_t *msg, size_t m, bool takes_parts, json_t **out, srv_error *err) {
    char param[96];
    snprintf(param, sizeof param, "messages[%zu]", m);
    if (!json_is_object(msg)) return srv__type_error(err, param, "an object", msg);

    const json_t *role = json_object_get(msg, "role");
    snprintf(param, sizeof param, "messages[%zu].role", m);
    if (!role) return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Missing required parameter: '%s'.", param);
    if (!json_is_string(role)) return srv__type_error(err, param, "a string", role);
    bool known = false;
    for (size_t i = 0; i < sizeof CHAT_ROLES / sizeof CHAT_ROLES[0] && !known; i++)
        known =
            strcmp(json_string_value(role), CHAT_ROLES[i]) == 0 && json_string_length(role) == strlen(CHAT_ROLES[i]);
    if (!known) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                         "Invalid value for '%s': '%.64s'. Supported values are: 'system', 'assistant', 'user', "
                         "'tool', and 'developer'.",
                         param, json_string_value(role));
    }
    bool assistant = strcmp(json_string_value(role), "assistant") == 0;
    const json_t *calls = srv__field(msg, "tool_calls");
    if (calls) {
        sp_status st = chat_tool_calls(calls, m, err);
        if (st != SP_OK) return st;
    }

    const json_t *content = srv__field(msg, "content");
    snprintf(param, sizeof param, "messages[%zu].content", m);
    json_t *value = NULL;
    if (!content) {
        if (!assistant) return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Missing required parameter: '%s'.", param);
        value = json_string("");
    } else if (json_is_string(content)) {
        value = json_incref((json_t *)content);
    } else if (json_is_array(content)) {
        sp_status st = chat_content_parts(content, m, takes_parts, &value, err);
        if (st != SP_OK) return st;
    } else {
        return srv__type_error(err, param, "a string or an array of content parts", content);
    }
    json_t *copy = json_copy((json_t *)msg);
    if (!value || !copy || json_object_set_new(copy, "content", value) != 0) {
        json_decref(copy);
        return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory copying messages");
    }
    *out = copy;
    return SP_OK;
}

/* The render context: messages, tools (null when absent, as Hugging Face passes
 * None), add_generation_prompt, the special tokens, then chat_template_kwargs, which
 * override everything but messages and tools (vLLM passes them as the template's
 * keyword arguments; messages and tools come from the request's own fields). */
static sp_status chat_context(const json_t *body, const srv_model_info *mi, const srv_request *r, json_t **out,
                              srv_error *err) {
    const json_t *messages = srv__field(body, "messages");
    if (!messages) return srv__fail(err, SRV_ERROR_BAD_REQUEST, "messages", "Missing required parameter: 'messages'.");
    if (!json_is_array(messages)) return srv__type_error(err, "messages", "an array", messages);
    if (json_array_size(messages) == 0) {
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "messages",
                         "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an "
                         "empty array instead.");
    }
    const json_t *tools = srv__field(body, "tools");
    if (tools && !json_is_array(tools)) return srv__type_error(err, "tools", "an array", tools);
    const json_t *kwargs = srv__field(body, "chat_template_kwargs");
    if (kwargs && !json_is_object(kwargs)) return srv__type_error(err, "chat_template_kwargs", "an object", kwargs);
    /* vLLM's top-level add_generation_prompt and continue_final_message */
    const json_t *agp = srv__field(body, "add_generation_prompt");
    const json_t *cont = srv__field(body, "continue_final_message");
    if (agp && !json_is_boolean(agp)) return srv__type_error(err, "add_generation_prompt", "a boolean", agp);
    if (cont && !json_is_boolean(cont)) return srv__type_error(err, "continue_final_message", "a boolean", cont);
    bool continue_final = json_is_true(cont);
    if (continue_final && json_is_true(agp))
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "continue_final_message",
                         "'continue_final_message' and 'add_generation_prompt' cannot both be true: the last message "
                         "is either continued or answered.");
    if (continue_final) {
        const json_t *last = json_array_get(messages, json_array_size(messages) - 1);
        const json_t *role = json_object_get(last, "role");
        if (!json_is_string(role) || strcmp(json_string_value(role), "assistant") != 0 ||
            !json_is_string(json_object_get(last, "content")) ||
            json_string_length(json_object_get(last, "content")) == 0)
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "continue_final_message",
                             "'continue_final_message' needs the last message to be an assistant message with text to "
                             "continue.");
    }
    bool generation_prompt = agp ? json_is_true(agp) : !continue_final;

    json_t *ctx = json_object(), *list = json_array();
    sp_status st = SP_OK;
    if (!ctx || !list) goto nomem;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *msg = NULL;
        if ((st = chat_message(json_array_get(messages, i), i, mi->template_takes_parts, &msg, err)) != SP_OK)
            goto fail;
        if (json_array_append_new(list, msg) != 0) goto nomem;
    }
    if (json_object_set_new(ctx, "messages", list) != 0) {
        list = NULL;
        goto nomem;
    }
    list = NULL;
    if (json_object_set_new(ctx, "tools", tools ? json_incref((json_t *)tools) : json_null()) != 0 ||
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(generation_prompt)) != 0)
        goto nomem;
    if (mi->template_tokens && json_object_update(ctx, mi->template_tokens) != 0) goto nomem;
    /* reasoning_effort reaches templates that read it (as vLLM passes it) */
    const json_t *effort = srv__field(body, "reasoning_effort");
    if (effort && !json_is_string(effort)) {
        st = srv__type_error(err, "reasoning_effort", "a string", effort);
        goto fail;
    }
    if (effort && json_object_set(ctx, "reasoning_effort", (json_t *)effort) != 0) goto nomem;
    const char *key;
    size_t key_len;
    json_t *value = NULL;
    json_object_keylen_foreach((json_t *)kwargs, key, key_len, value) {
        if ((key_len == 8 && memcmp(key, "messages", 8) == 0) || (key_len == 5 && memcmp(key, "tools", 5) == 0))
            continue;
        if (json_object_setn_nocheck(ctx, key, key_len, value) != 0) goto nomem;
    }
    if (r && (st = srv__tools_adjust_context(mi, r, ctx, err)) != SP_OK) goto fail;
    *out = ctx;
    return SP_OK;
nomem:
    st = srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory building the chat template's context");
fail:
    json_decref(list);
    json_decref(ctx);
    return st;
}

sp_status srv__chat_render(const json_t *body, const srv_model_info *mi, const srv_request *r, char **text, size_t *len,
                           srv_error *err) {
    json_t *ctx = NULL;
    sp_status st = chat_context(body, mi, r, &ctx, err);
    if (st != SP_OK) return st;
    st = tmpl_render(mi->chat_template, ctx, NULL, text, len);
    json_decref(ctx);
    if (st == SP_OK && json_is_true(srv__field(body, "continue_final_message"))) {
        /* the last message left open: the text after its content (the end of its turn) is cut */
        const json_t *messages = srv__field(body, "messages");
        const json_t *content = json_object_get(json_array_get(messages, json_array_size(messages) - 1), "content");
        const char *c = json_string_value(content);
        size_t n = json_string_length(content);
        const char *at = NULL;
        for (const char *p = *text; (p = memmem(p, *len - (size_t)(p - *text), c, n)) != NULL; p++) at = p;
        if (!at) {
            free(*text);
            *text = NULL;
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "continue_final_message",
                             "'continue_final_message': the chat template does not print the last message's content "
                             "as given, so it cannot be continued.");
        }
        *len = (size_t)(at - *text) + n;
        (*text)[*len] = '\0';
    }
    if (st == SP_OK) return SP_OK;
    /* raise_exception: the template refused the conversation and says why in its own words */
    if (st == SP_ERR_INVALID_ARG) return srv__fail(err, SRV_ERROR_BAD_REQUEST, "messages", "%s", sp_last_error());
    if (st == SP_ERR_NOMEM) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "chat template: %s", sp_last_error());
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, "messages", "chat template: %s", sp_last_error());
}

sp_status srv__chat_tokenize(const srv_model_info *mi, const char *text, size_t len, int32_t **ids, size_t *n_ids,
                             srv_error *err) {
    /* Templates of models that want BOS usually write it themselves ({{ bos_token }});
     * adding another would double it. */
    bool add_bos = tok_add_bos(mi->vocab);
    int32_t bos = tok_bos(mi->vocab);
    const char *bos_text = bos >= 0 ? tok_token_text(mi->vocab, bos) : NULL;
    if (add_bos && bos_text && bos_text[0] && len >= strlen(bos_text) && memcmp(text, bos_text, strlen(bos_text)) == 0)
        add_bos = false;
    sp_status st = tok_encode(mi->vocab, text, len, add_bos, true, ids, n_ids);
    if (st != SP_OK) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "tokenizing the prompt: %s", sp_last_error());
    return SP_OK;
}

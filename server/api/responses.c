/* responses.c: OpenAI's Responses API over a chat request. POST /v1/responses: the
 * body's `instructions`, the stored conversation of `previous_response_id` and the
 * `input` items become chat messages, its tools, tool_choice, text.format and reasoning
 * become their chat counterparts, and the chat machinery runs it. The chat answer
 * becomes output items (reasoning, message, function_call); a stream's chat chunks
 * become the Responses event sequence (response.created ... response.completed, each
 * with a sequence_number). With `store` (the default) the response and its conversation
 * are kept (response_store.c) for previous_response_id and GET/DELETE
 * /v1/responses/{id}.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

/* ---- the request: Responses body -> chat body ---- */

static sp_status bad(srv_error *err, const char *param, const char *fmt, const char *detail) {
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, fmt, detail);
}

/* Responses fields spindle refuses, each of which would change the answer: a 400 naming it. */
static sp_status responses_unsupported(const json_t *root, srv_error *err) {
    static const char *const refused[] = {"conversation", "prompt", "max_tool_calls"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (srv__field(root, refused[i]))
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, refused[i], "'%s' is not supported by this server.",
                             refused[i]);
    const json_t *v = srv__field(root, "top_logprobs"); /* 0 asks for nothing */
    if (v && !(json_is_integer(v) && json_integer_value(v) == 0))
        return bad(err, "top_logprobs", "'top_logprobs' is not supported by this server%s.", "");
    v = srv__field(root, "background");
    if (v && !json_is_false(v))
        return bad(err, "background", "'background' responses are not supported: leave it out%s.", "");
    v = srv__field(root, "truncation");
    if (v && !(json_is_string(v) && strcmp(json_string_value(v), "disabled") == 0))
        return bad(err, "truncation", "'truncation' must be 'disabled'%s: this server never drops input.", "");
    v = srv__field(root, "include");
    for (size_t i = 0; v && i < json_array_size(v); i++) {
        const char *what = json_string_value(json_array_get(v, i));
        /* there is no encrypted reasoning to include: asking for it changes nothing */
        if (!what || strcmp(what, "reasoning.encrypted_content") != 0)
            return bad(err, "include", "'include' of '%.80s' is not supported.", what ? what : "(not a string)");
    }
    if (v && !json_is_array(v)) return srv__type_error(err, "include", "an array", v);
    return SP_OK;
}

/* The text of a message item's content: a string, or input_text / output_text parts
 * (joined); anything else (images, files, audio) is a 400 naming the part. */
static sp_status item_text(const json_t *content, const char *param, json_t **out, srv_error *err) {
    char p[128];
    if (json_is_string(content)) {
        *out = json_incref((json_t *)content);
        return SP_OK;
    }
    if (!json_is_array(content)) return srv__type_error(err, param, "a string or an array", content);
    strbuf b = {0};
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *part = json_array_get(content, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        snprintf(p, sizeof p, "%s[%zu]", param, i);
        if (!type || (strcmp(type, "input_text") != 0 && strcmp(type, "output_text") != 0 &&
                      strcmp(type, "text") != 0 && strcmp(type, "refusal") != 0)) {
            free(strbuf_take(&b));
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, p,
                             "Invalid '%s': content of type '%.40s' is not supported by this model (text only).", p,
                             type ? type : "(none)");
        }
        if (strcmp(type, "refusal") == 0) text = json_string_value(json_object_get(part, "refusal"));
        if (!text) {
            free(strbuf_take(&b));
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, p, "Invalid '%s': the part has no text.", p);
        }
        if (b.len) strbuf_append(&b, "\n", 1);
        strbuf_append(&b, text, strlen(text));
    }
    char *joined = strbuf_take(&b);
    *out = joined ? json_string(joined) : NULL;
    free(joined);
    return *out ? SP_OK : srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
}

/* A function_call item joins the assistant message before it (a turn's calls are one
 * chat message), or starts one. */
static sp_status add_call(json_t *messages, const json_t *item, const char *param, srv_error *err) {
    char p[96];
    static const char *const keys[] = {"call_id", "name", "arguments"};
    for (size_t k = 0; k < 3; k++) {
        const json_t *v = json_object_get(item, keys[k]);
        snprintf(p, sizeof p, "%s.%s", param, keys[k]);
        if (!json_is_string(v)) return srv__type_error(err, p, "a string", v);
    }
    json_t *call =
        json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(item, "call_id"), "type", "function", "function",
                  "name", json_object_get(item, "name"), "arguments", json_object_get(item, "arguments"));
    json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    json_t *calls = last && role && strcmp(role, "assistant") == 0 ? json_object_get(last, "tool_calls") : NULL;
    if (last && role && strcmp(role, "assistant") == 0 && !calls) {
        calls = json_array();
        json_object_set_new(last, "tool_calls", calls);
    }
    if (calls)
        return json_array_append_new(calls, call) == 0 ? SP_OK
                                                       : srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
    json_t *m = json_pack("{s:s,s:n,s:[o]}", "role", "assistant", "content", "tool_calls", call);
    return json_array_append_new(messages, m) == 0 ? SP_OK : srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
}

/* `input`: a string (one user message) or a list of items, appended to messages. */
static sp_status input_messages(const json_t *input, json_t *messages, srv_error *err) {
    if (json_is_string(input))
        return json_array_append_new(messages, json_pack("{s:s,s:O}", "role", "user", "content", input)) == 0
                   ? SP_OK
                   : srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
    if (!json_is_array(input)) return srv__type_error(err, "input", "a string or an array", input);
    char p[64], q[96];
    for (size_t i = 0; i < json_array_size(input); i++) {
        const json_t *item = json_array_get(input, i);
        snprintf(p, sizeof p, "input[%zu]", i);
        if (!json_is_object(item)) return srv__type_error(err, p, "an object", item);
        const json_t *type_v = json_object_get(item, "type");
        const char *type = json_string_value(type_v);
        if (type_v && !type) return srv__type_error(err, p, "an item with a string type", type_v);
        sp_status st = SP_OK;
        if (!type || strcmp(type, "message") == 0) {
            const char *role = json_string_value(json_object_get(item, "role"));
            static const char *const roles[] = {"user", "assistant", "system", "developer"};
            bool known = false;
            for (size_t r = 0; role && r < 4; r++) known |= strcmp(role, roles[r]) == 0;
            snprintf(q, sizeof q, "%s.role", p);
            if (!known)
                return srv__fail(err, SRV_ERROR_BAD_REQUEST, q,
                                 "Invalid '%s': expected one of user, assistant, system, developer.", q);
            snprintf(q, sizeof q, "%s.content", p);
            json_t *text = NULL;
            if ((st = item_text(json_object_get(item, "content"), q, &text, err)) != SP_OK) return st;
            st = json_array_append_new(messages, json_pack("{s:s,s:o}", "role", role, "content", text)) == 0
                     ? SP_OK
                     : srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
        } else if (strcmp(type, "function_call") == 0) {
            st = add_call(messages, item, p, err);
        } else if (strcmp(type, "function_call_output") == 0) {
            const json_t *id = json_object_get(item, "call_id");
            snprintf(q, sizeof q, "%s.call_id", p);
            if (!json_is_string(id)) return srv__type_error(err, q, "a string", id);
            json_t *text = NULL;
            snprintf(q, sizeof q, "%s.output", p);
            if ((st = item_text(json_object_get(item, "output"), q, &text, err)) != SP_OK) return st;
            st = json_array_append_new(
                     messages, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", text)) == 0
                     ? SP_OK
                     : srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
        } else if (strcmp(type, "reasoning") == 0) {
            /* an earlier turn's thinking: chat templates drop it from the prompt too */
        } else {
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, p,
                             "Invalid '%s': items of type '%.40s' are not supported (message, function_call, "
                             "function_call_output and reasoning are).",
                             p, type);
        }
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

/* tools: function tools ({type, name, description, parameters, strict}) in chat's form;
 * built-in tools are a 400. */
static sp_status chat_tools(const json_t *tools, json_t *chat, srv_error *err) {
    if (!tools) return SP_OK;
    if (!json_is_array(tools)) return srv__type_error(err, "tools", "an array", tools);
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    char p[48];
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!type || strcmp(type, "function") != 0)
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, p,
                             "Invalid '%s': the built-in tool '%.40s' is not supported; only function tools are.", p,
                             type ? type : "(no type)");
        json_t *fn = json_object();
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < 4; k++) {
            json_t *v = json_object_get(t, keys[k]);
            if (v && !json_is_null(v)) json_object_set(fn, keys[k], v);
        }
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return SP_OK;
}

/* tool_choice: "auto" | "none" | "required" | {"type": "function", "name"}. */
static sp_status chat_tool_choice(const json_t *choice, json_t *chat, srv_error *err) {
    if (!choice) return SP_OK;
    if (json_is_string(choice)) return json_object_set(chat, "tool_choice", (json_t *)choice), SP_OK;
    const char *type = json_string_value(json_object_get(choice, "type"));
    const json_t *name = json_object_get(choice, "name");
    if (!type || strcmp(type, "function") != 0 || !json_is_string(name))
        return bad(err, "tool_choice",
                   "Invalid 'tool_choice': expected auto, none, required or {\"type\": \"function\", \"name\": ...}%s.",
                   "");
    json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    return SP_OK;
}

/* text.format -> response_format; reasoning.effort -> reasoning_effort. */
static sp_status chat_format(const json_t *root, json_t *chat, bool *summary, srv_error *err) {
    const json_t *text = srv__field(root, "text");
    if (text && !json_is_object(text)) return srv__type_error(err, "text", "an object", text);
    const json_t *verbosity = text ? srv__field(text, "verbosity") : NULL;
    if (verbosity && !(json_is_string(verbosity) && strcmp(json_string_value(verbosity), "medium") == 0))
        return bad(err, "text.verbosity", "'text.verbosity' is not supported: leave it out or set it medium%s.", "");
    const json_t *format = text ? srv__field(text, "format") : NULL;
    if (format) {
        const char *type = json_string_value(json_object_get(format, "type"));
        if (!type) return srv__type_error(err, "text.format.type", "a string", json_object_get(format, "type"));
        if (strcmp(type, "json_schema") == 0) {
            json_t *js = json_object();
            static const char *const keys[] = {"name", "schema", "strict", "description"};
            for (size_t k = 0; k < 4; k++) {
                json_t *v = json_object_get(format, keys[k]);
                if (v) json_object_set(js, keys[k], v);
            }
            json_object_set_new(chat, "response_format",
                                json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
        } else if (strcmp(type, "json_object") == 0 || strcmp(type, "text") == 0) {
            json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", type));
        } else {
            return bad(err, "text.format.type", "Invalid 'text.format.type': '%.40s' (text, json_object, json_schema).",
                       type);
        }
    }
    const json_t *reasoning = srv__field(root, "reasoning");
    if (reasoning && !json_is_object(reasoning)) return srv__type_error(err, "reasoning", "an object", reasoning);
    const json_t *effort = reasoning ? srv__field(reasoning, "effort") : NULL;
    if (effort) json_object_set(chat, "reasoning_effort", (json_t *)effort);
    *summary = reasoning && srv__field(reasoning, "summary") != NULL;
    return SP_OK;
}

/* root[key] as a new reference, or fallback (taken) when it is absent. */
static json_t *field_or(const json_t *root, const char *key, json_t *fallback) {
    json_t *v = srv__field(root, key);
    if (!v) return fallback;
    json_decref(fallback);
    return json_deep_copy(v);
}

/* A float setting as JSON, at float precision (0.2f is 0.2, not 0.200000003). */
static json_t *setting(float v) {
    char text[32];
    snprintf(text, sizeof text, "%g", (double)v);
    return json_real(strtod(text, NULL));
}

/* The Responses fields a response echoes, as given (or the values used: the server's
 * sampling defaults where the request left them out). */
static json_t *echo_fields(const json_t *root, const srv_model_info *mi, bool store) {
    sample_params sampling = mi->sampling_defaults ? *mi->sampling_defaults : sample_params_default();
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:b,s:o,s:s,s:o,s:o}", "model",
                     field_or(root, "model", json_string(mi->served_name ? mi->served_name : "")), "instructions",
                     field_or(root, "instructions", json_null()), "max_output_tokens",
                     field_or(root, "max_output_tokens", json_null()), "temperature",
                     field_or(root, "temperature", setting(sampling.temperature)), "top_p",
                     field_or(root, "top_p", setting(sampling.top_p)), "tools", field_or(root, "tools", json_array()),
                     "tool_choice", field_or(root, "tool_choice", json_string("auto")), "parallel_tool_calls",
                     field_or(root, "parallel_tool_calls", json_true()), "previous_response_id",
                     field_or(root, "previous_response_id", json_null()), "store", store, "metadata",
                     field_or(root, "metadata", json_object()), "truncation", "disabled", "text",
                     field_or(root, "text", json_pack("{s:{s:s}}", "format", "type", "text")), "reasoning",
                     field_or(root, "reasoning", json_pack("{s:n,s:n}", "effort", "summary")));
}

/* Removes chat's ".function" level from every tools[i].function... in s (Responses
 * tools are flat: tools[i].name). */
static void drop_function_level(char *s) {
    for (char *t = strstr(s, "tools["); t; t = strstr(t + 1, "tools[")) {
        char *close = t + 6;
        while (*close >= '0' && *close <= '9') close++;
        if (*close == ']' && strncmp(close + 1, ".function", 9) == 0 && !isalnum((unsigned char)close[10]) &&
            close[10] != '_')
            memmove(close + 1, close + 10, strlen(close + 10) + 1);
    }
}

/* A chat error names chat's fields: name the Responses field instead where they differ,
 * in param and where the message quotes it. Longer names first (a prefix of another). */
static void rename_param(srv_error *err) {
    static const char *const from[] = {"max_completion_tokens", "max_tokens",       "response_format.json_schema",
                                       "response_format",       "reasoning_effort", "messages"};
    static const char *const to[] = {"max_output_tokens", "max_output_tokens", "text.format",
                                     "text.format",       "reasoning.effort",  "input"};
    enum { N_RENAMES = sizeof from / sizeof from[0] };
    for (size_t i = 0; i < N_RENAMES; i++) {
        char quoted[40];
        snprintf(quoted, sizeof quoted, "'%s", from[i]);
        char *at = strstr(err->message, quoted);
        if (at) {
            char rest[sizeof err->message];
            snprintf(rest, sizeof rest, "%s", at + strlen(quoted));
            snprintf(at, sizeof err->message - (size_t)(at - err->message), "'%s%s", to[i], rest);
        }
    }
    drop_function_level(err->message);
    drop_function_level(err->param);
    for (size_t i = 0; i < N_RENAMES; i++) {
        size_t n = strlen(from[i]);
        if (strncmp(err->param, from[i], n) == 0 &&
            (err->param[n] == '\0' || err->param[n] == '.' || err->param[n] == '[')) {
            char rest[64];
            snprintf(rest, sizeof rest, "%s", err->param + n);
            snprintf(err->param, sizeof err->param, "%s%s", to[i], rest);
            return;
        }
    }
}

sp_status srv__responses_parse(const char *body, size_t len, const srv_model_info *mi, uint64_t tenant,
                               srv_request *out, srv_error *err) {
    *out = (srv_request){0};
    *err = (srv_error){0};
    json_t *root = NULL, *chat = NULL, *conversation = NULL;
    sp_status st = srv__parse_body(body, len, &root, err);
    if (st != SP_OK) return st;
    bool store = true, summary = false;
    const json_t *v;
    if ((st = responses_unsupported(root, err)) != SP_OK) goto done;
    if ((st = srv__read_bool(root, "store", &store, NULL, err)) != SP_OK) goto done;
    chat = json_object();
    conversation = json_array();
    json_t *messages = json_array();
    json_object_set_new(chat, "messages", messages);
    /* instructions go first and are not carried to the next turn (OpenAI's rule) */
    if ((v = srv__field(root, "instructions"))) {
        if (!json_is_string(v)) {
            st = srv__type_error(err, "instructions", "a string", v);
            goto done;
        }
        json_array_append_new(messages, json_pack("{s:s,s:O}", "role", "system", "content", v));
    }
    if ((v = srv__field(root, "previous_response_id"))) {
        json_t *before = NULL;
        if (!json_is_string(v)) {
            st = srv__type_error(err, "previous_response_id", "a string", v);
            goto done;
        }
        if (!srv__store_get(mi->responses, json_string_value(v), tenant, NULL, &before, sched_now())) {
            st = srv__fail(err, SRV_ERROR_NOT_FOUND, "previous_response_id",
                           "Previous response with id '%.64s' not found (never stored, expired, deleted or another "
                           "API key's).",
                           json_string_value(v));
            goto done;
        }
        json_array_extend(conversation, before);
        json_decref(before);
    }
    if (!(v = srv__field(root, "input"))) {
        st = bad(err, "input", "Missing required parameter: 'input'%s.", "");
        goto done;
    }
    if ((st = input_messages(v, conversation, err)) != SP_OK) goto done;
    json_array_extend(messages, conversation);
    if ((st = chat_tools(srv__field(root, "tools"), chat, err)) != SP_OK) goto done;
    if ((st = chat_tool_choice(srv__field(root, "tool_choice"), chat, err)) != SP_OK) goto done;
    if ((st = chat_format(root, chat, &summary, err)) != SP_OK) goto done;
    static const char *const same[] = {"model", "temperature", "top_p",  "parallel_tool_calls",
                                       "user",  "seed",        "stream", "cache_salt"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if ((v = srv__field(root, same[i]))) json_object_set(chat, same[i], (json_t *)v);
    if ((v = srv__field(root, "max_output_tokens"))) json_object_set(chat, "max_completion_tokens", (json_t *)v);
    /* the translator needs the usage at the end of a stream */
    if (json_is_true(json_object_get(chat, "stream")))
        json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if ((st = srv__request_from_json(SRV_ENDPOINT_CHAT, chat, mi, out, err)) != SP_OK) {
        rename_param(err);
        goto done;
    }
    out->api = SRV_ENDPOINT_RESPONSES;
    out->api_fields = json_pack("{s:o,s:O,s:b,s:b}", "echo", echo_fields(root, mi, store), "conversation", conversation,
                                "store", store, "summary", summary);
    if (!out->api_fields) st = srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
done:
    if (st != SP_OK) srv_request_free(out);
    json_decref(conversation);
    json_decref(chat);
    json_decref(root);
    return st;
}

/* ---- the answer: output items, the response object, the store ---- */

static json_t *new_id(const char *prefix) {
    char id[48];
    snprintf(id, sizeof id, "%s%016llx", prefix, (unsigned long long)srv_random_u64());
    return json_string(id);
}

static json_t *reasoning_item(const char *text, bool summary) {
    json_t *item = json_pack("{s:s,s:o,s:[],s:[]}", "type", "reasoning", "id", new_id("rs_"), "summary", "content");
    json_t *part = summary ? json_pack("{s:s,s:s}", "type", "summary_text", "text", text)
                           : json_pack("{s:s,s:s}", "type", "reasoning_text", "text", text);
    json_array_append_new(json_object_get(item, summary ? "summary" : "content"), part);
    return item;
}

static json_t *message_item(json_t *id, const char *text, const char *status) {
    return json_pack("{s:s,s:o,s:s,s:s,s:[{s:s,s:s,s:[],s:[]}]}", "type", "message", "id", id, "status", status, "role",
                     "assistant", "content", "type", "output_text", "text", text, "annotations", "logprobs");
}

static json_t *call_item(json_t *id, const json_t *call_id, const json_t *name, const char *arguments,
                         const char *status) {
    return json_pack("{s:s,s:o,s:O,s:O,s:s,s:s}", "type", "function_call", "id", id, "call_id", call_id, "name", name,
                     "arguments", arguments, "status", status);
}

/* Responses usage from chat usage. */
static json_t *usage_of(const json_t *u) {
    json_int_t in = json_integer_value(json_object_get(u, "prompt_tokens"));
    json_int_t out = json_integer_value(json_object_get(u, "completion_tokens"));
    json_int_t cached =
        json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    json_int_t reasoning =
        json_integer_value(json_object_get(json_object_get(u, "completion_tokens_details"), "reasoning_tokens"));
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", in, "input_tokens_details", "cached_tokens",
                     cached, "output_tokens", out, "output_tokens_details", "reasoning_tokens", reasoning,
                     "total_tokens", in + out);
}

/* The response object: the echoed fields, then id, status, output and usage. */
static json_t *response_object(const srv_request *r, const srv_api_answer *a, const char *status, json_t *output,
                               json_t *usage, json_t *error) {
    json_t *o = json_deep_copy(json_object_get(r->api_fields, "echo"));
    if (!o) return NULL;
    json_object_set_new(o, "id", json_string(a->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(a->created));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "error", error ? error : json_null());
    json_object_set_new(o, "incomplete_details",
                        strcmp(status, "incomplete") == 0 ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                          : json_null());
    json_object_set_new(o, "output", output ? output : json_array());
    json_object_set_new(o, "usage", usage ? usage : json_null());
    return o;
}

/* The output as chat messages for the stored conversation: the text and calls of the
 * turn in one assistant message (the thinking is left out, as chat templates do). */
static json_t *output_as_chat(const json_t *output) {
    json_t *m = json_pack("{s:s,s:n}", "role", "assistant", "content");
    json_t *calls = json_array();
    for (size_t i = 0; i < json_array_size(output); i++) {
        const json_t *item = json_array_get(output, i);
        const char *type = json_string_value(json_object_get(item, "type"));
        if (strcmp(type, "message") == 0) {
            json_t *part = json_array_get(json_object_get(item, "content"), 0);
            json_object_set(m, "content", json_object_get(part, "text"));
        } else if (strcmp(type, "function_call") == 0) {
            json_array_append_new(calls,
                                  json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(item, "call_id"), "type",
                                            "function", "function", "name", json_object_get(item, "name"), "arguments",
                                            json_object_get(item, "arguments")));
        }
    }
    if (json_array_size(calls) > 0)
        json_object_set_new(m, "tool_calls", calls);
    else
        json_decref(calls);
    return m;
}

/* Keeps a finished response with its conversation when the request stores. */
static void store_response(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a,
                           const json_t *response) {
    if (!mi->responses || !json_is_true(json_object_get(r->api_fields, "store"))) return;
    json_t *conversation = json_deep_copy(json_object_get(r->api_fields, "conversation"));
    json_array_append_new(conversation, output_as_chat(json_object_get(response, "output")));
    /* the store keeps their text, not the trees: the response is only read */
    srv__store_put(mi->responses, a->id, a->tenant, json_incref((json_t *)response), conversation, sched_now());
}

json_t *srv__responses_render(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a, json_t *chat) {
    const json_t *choice = json_array_get(json_object_get(chat, "choices"), 0);
    const json_t *message = json_object_get(choice, "message");
    const char *finish = json_string_value(json_object_get(choice, "finish_reason"));
    const char *content = json_string_value(json_object_get(message, "content"));
    const char *reasoning = json_string_value(json_object_get(message, "reasoning_content"));
    const json_t *calls = json_object_get(message, "tool_calls");
    json_t *output = json_array();
    bool thought = reasoning && reasoning[0];
    if (thought)
        json_array_append_new(output,
                              reasoning_item(reasoning, json_is_true(json_object_get(r->api_fields, "summary"))));
    /* as the stream has it: a message when there is text, or when nothing else came */
    if ((content && content[0]) || (json_array_size(calls) == 0 && !thought))
        json_array_append_new(output, message_item(new_id("msg_"), content ? content : "", "completed"));
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *call = json_array_get(calls, i), *fn = json_object_get(call, "function");
        json_array_append_new(output, call_item(new_id("fc_"), json_object_get(call, "id"), json_object_get(fn, "name"),
                                                json_string_value(json_object_get(fn, "arguments")), "completed"));
    }
    const char *status = finish && strcmp(finish, "length") == 0 ? "incomplete" : "completed";
    /* the item the budget cut is incomplete too (a reasoning item has no status) */
    json_t *last = json_array_get(output, json_array_size(output) - 1);
    if (strcmp(status, "incomplete") == 0 && json_object_get(last, "status"))
        json_object_set_new(last, "status", json_string("incomplete"));
    json_t *response = response_object(r, a, status, output, usage_of(json_object_get(chat, "usage")), NULL);
    json_decref(chat);
    if (response) store_response(r, mi, a, response);
    return response;
}

/* ---- the stream: chat chunks -> Responses events ---- */

/* The output item open in the stream. */
enum { OPEN_NONE, OPEN_REASONING, OPEN_MESSAGE, OPEN_CALL };

typedef struct responses_stream {
    srv_api_stream base;
    const srv_request *r; /* the connection's; outlives the stream */
    const srv_model_info *mi;
    srv_api_answer a;
    char id[48];
    int64_t sequence;
    bool started;
    json_t *output; /* the finished items */
    int open;
    json_t *item_id; /* the open item's id */
    json_t *call_id; /* an open call's call_id and name */
    json_t *name;
    strbuf text;   /* the open item's text or arguments so far */
    char *finish;  /* finish_reason */
    json_t *usage; /* Responses usage, from the last chunk */
    json_t *error; /* a failure's {code, message} */
} responses_stream;

/* One event: `event: TYPE` and its data with type and sequence_number (data taken). */
static void emit(responses_stream *s, strbuf *out, const char *type, json_t *data) {
    if (!data) {
        out->failed = true;
        return;
    }
    json_object_set_new(data, "type", json_string(type));
    json_object_set_new(data, "sequence_number", json_integer(s->sequence++));
    char *text = json_dumps(data, SRV_JSON_FLAGS);
    json_decref(data);
    if (!text) {
        out->failed = true;
        return;
    }
    strbuf_printf(out, "event: %s\ndata: %s\n\n", type, text);
    free(text);
}

static int output_index(const responses_stream *s) {
    return (int)json_array_size(s->output);
}

/* Closes the open item: its .done events, then output_item.done; the item joins output. */
static void close_item(responses_stream *s, strbuf *out) {
    if (s->open == OPEN_NONE) return;
    char *text = strbuf_take(&s->text);
    const char *t = text ? text : "";
    int at = output_index(s);
    json_t *item = NULL;
    bool summary = json_is_true(json_object_get(s->r->api_fields, "summary"));
    /* only the last item can be open when the finish arrives: the one the budget cut */
    const char *status = s->finish && strcmp(s->finish, "length") == 0 ? "incomplete" : "completed";
    if (s->open == OPEN_REASONING) {
        if (summary) {
            emit(s, out, "response.reasoning_summary_text.done",
                 json_pack("{s:O,s:i,s:i,s:s}", "item_id", s->item_id, "output_index", at, "summary_index", 0, "text",
                           t));
            emit(s, out, "response.reasoning_summary_part.done",
                 json_pack("{s:O,s:i,s:i,s:{s:s,s:s}}", "item_id", s->item_id, "output_index", at, "summary_index", 0,
                           "part", "type", "summary_text", "text", t));
        } else {
            emit(s, out, "response.reasoning_text.done",
                 json_pack("{s:O,s:i,s:i,s:s}", "item_id", s->item_id, "output_index", at, "content_index", 0, "text",
                           t));
        }
        item = reasoning_item(t, summary);
        json_object_set(item, "id", s->item_id);
    } else if (s->open == OPEN_MESSAGE) {
        emit(s, out, "response.output_text.done",
             json_pack("{s:O,s:i,s:i,s:s,s:[]}", "item_id", s->item_id, "output_index", at, "content_index", 0, "text",
                       t, "logprobs"));
        emit(s, out, "response.content_part.done",
             json_pack("{s:O,s:i,s:i,s:{s:s,s:s,s:[],s:[]}}", "item_id", s->item_id, "output_index", at,
                       "content_index", 0, "part", "type", "output_text", "text", t, "annotations", "logprobs"));
        item = message_item(json_incref(s->item_id), t, status);
    } else {
        emit(
            s, out, "response.function_call_arguments.done",
            json_pack("{s:O,s:i,s:s,s:O}", "item_id", s->item_id, "output_index", at, "arguments", t, "name", s->name));
        item = call_item(json_incref(s->item_id), s->call_id, s->name, t, status);
    }
    free(text);
    emit(s, out, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", at, "item", item));
    json_array_append_new(s->output, item);
    json_decref(s->item_id);
    json_decref(s->call_id);
    json_decref(s->name);
    s->item_id = s->call_id = s->name = NULL;
    s->open = OPEN_NONE;
}

/* Opens an item of kind (closing another first); for a call, head is its chat head. */
static void open_item(responses_stream *s, strbuf *out, int kind, const json_t *head) {
    if (s->open == kind && kind != OPEN_CALL) return;
    close_item(s, out);
    s->open = kind;
    int at = output_index(s);
    bool summary = json_is_true(json_object_get(s->r->api_fields, "summary"));
    json_t *item;
    if (kind == OPEN_REASONING) {
        s->item_id = new_id("rs_");
        item = json_pack("{s:s,s:O,s:[],s:[]}", "type", "reasoning", "id", s->item_id, "summary", "content");
    } else if (kind == OPEN_MESSAGE) {
        s->item_id = new_id("msg_");
        item = json_pack("{s:s,s:O,s:s,s:s,s:[]}", "type", "message", "id", s->item_id, "status", "in_progress", "role",
                         "assistant", "content");
    } else {
        const json_t *fn = json_object_get(head, "function");
        s->item_id = new_id("fc_");
        s->call_id = json_incref(json_object_get(head, "id"));
        s->name = json_incref(json_object_get(fn, "name"));
        item = call_item(json_incref(s->item_id), s->call_id, s->name, "", "in_progress");
    }
    emit(s, out, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", at, "item", item));
    if (kind == OPEN_MESSAGE)
        emit(s, out, "response.content_part.added",
             json_pack("{s:O,s:i,s:i,s:{s:s,s:s,s:[],s:[]}}", "item_id", s->item_id, "output_index", at,
                       "content_index", 0, "part", "type", "output_text", "text", "", "annotations", "logprobs"));
    if (kind == OPEN_REASONING && summary)
        emit(s, out, "response.reasoning_summary_part.added",
             json_pack("{s:O,s:i,s:i,s:{s:s,s:s}}", "item_id", s->item_id, "output_index", at, "summary_index", 0,
                       "part", "type", "summary_text", "text", ""));
}

static void add_text(responses_stream *s, strbuf *out, int kind, const char *delta) {
    open_item(s, out, kind, NULL);
    strbuf_append(&s->text, delta, strlen(delta));
    int at = output_index(s);
    if (kind == OPEN_MESSAGE) {
        emit(s, out, "response.output_text.delta",
             json_pack("{s:O,s:i,s:i,s:s,s:[]}", "item_id", s->item_id, "output_index", at, "content_index", 0, "delta",
                       delta, "logprobs"));
    } else if (json_is_true(json_object_get(s->r->api_fields, "summary"))) {
        emit(s, out, "response.reasoning_summary_text.delta",
             json_pack("{s:O,s:i,s:i,s:s}", "item_id", s->item_id, "output_index", at, "summary_index", 0, "delta",
                       delta));
    } else {
        emit(s, out, "response.reasoning_text.delta",
             json_pack("{s:O,s:i,s:i,s:s}", "item_id", s->item_id, "output_index", at, "content_index", 0, "delta",
                       delta));
    }
}

static void start(responses_stream *s, strbuf *out) {
    if (s->started) return;
    s->started = true;
    emit(s, out, "response.created",
         json_pack("{s:o}", "response", response_object(s->r, &s->a, "in_progress", NULL, NULL, NULL)));
    emit(s, out, "response.in_progress",
         json_pack("{s:o}", "response", response_object(s->r, &s->a, "in_progress", NULL, NULL, NULL)));
}

/* The end: the open item closes and the response completes (or is incomplete, or failed);
 * a completed one is stored. */
static void finish(responses_stream *s, strbuf *out) {
    start(s, out);
    if (s->open == OPEN_NONE && output_index(s) == 0 && !s->error) open_item(s, out, OPEN_MESSAGE, NULL);
    close_item(s, out);
    const char *status = s->error                                        ? "failed"
                         : s->finish && strcmp(s->finish, "length") == 0 ? "incomplete"
                                                                         : "completed";
    json_t *response =
        response_object(s->r, &s->a, status, json_incref(s->output), json_incref(s->usage), json_incref(s->error));
    if (response && !s->error) store_response(s->r, s->mi, &s->a, response);
    const char *type = s->error                            ? "response.failed"
                       : strcmp(status, "incomplete") == 0 ? "response.incomplete"
                                                           : "response.completed";
    emit(s, out, type, json_pack("{s:o}", "response", response));
}

static void responses_event(srv_api_stream *base, const json_t *ev, strbuf *out) {
    responses_stream *s = (responses_stream *)base;
    if (!ev) {
        finish(s, out);
        return;
    }
    start(s, out);
    const json_t *error = json_object_get(ev, "error");
    if (error) {
        /* Responses' error code is always a string; chat's may be null (a 500, a 503) */
        const json_t *code = json_object_get(error, "code");
        const char *message = json_string_value(json_object_get(error, "message"));
        const json_t *param = json_object_get(error, "param");
        json_decref(s->error); /* only the last error is the response's */
        s->error = json_pack("{s:s,s:s}", "code", json_is_string(code) ? json_string_value(code) : "server_error",
                             "message", message ? message : "the generation failed");
        emit(s, out, "error",
             json_pack("{s:O,s:O,s:O}", "code", json_object_get(s->error, "code"), "message",
                       json_object_get(s->error, "message"), "param", param ? param : json_null()));
        return;
    }
    const json_t *usage = json_object_get(ev, "usage");
    if (usage && !json_is_null(usage)) {
        json_decref(s->usage);
        s->usage = usage_of(usage);
    }
    const json_t *choice = json_array_get(json_object_get(ev, "choices"), 0);
    if (!choice) return;
    const json_t *delta = json_object_get(choice, "delta");
    const char *reasoning = json_string_value(json_object_get(delta, "reasoning_content"));
    const char *content = json_string_value(json_object_get(delta, "content"));
    if (reasoning && reasoning[0]) add_text(s, out, OPEN_REASONING, reasoning);
    if (content && content[0]) add_text(s, out, OPEN_MESSAGE, content);
    const json_t *calls = json_object_get(delta, "tool_calls");
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *call = json_array_get(calls, i);
        if (json_object_get(call, "id")) open_item(s, out, OPEN_CALL, call); /* a new call's head */
        const char *piece = json_string_value(json_object_get(json_object_get(call, "function"), "arguments"));
        if (s->open != OPEN_CALL || !piece || !piece[0]) continue;
        strbuf_append(&s->text, piece, strlen(piece));
        emit(s, out, "response.function_call_arguments.delta",
             json_pack("{s:O,s:i,s:s}", "item_id", s->item_id, "output_index", output_index(s), "delta", piece));
    }
    const char *finish_reason = json_string_value(json_object_get(choice, "finish_reason"));
    if (finish_reason) {
        free(s->finish);
        s->finish = strdup(finish_reason);
    }
}

static void responses_destroy(srv_api_stream *base) {
    responses_stream *s = (responses_stream *)base;
    json_decref(s->output);
    json_decref(s->item_id);
    json_decref(s->call_id);
    json_decref(s->name);
    free(strbuf_take(&s->text));
    free(s->finish);
    json_decref(s->usage);
    json_decref(s->error);
    free(s);
}

srv_api_stream *srv__responses_stream(const srv_request *r, const srv_model_info *mi, const srv_api_answer *a) {
    responses_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base = (srv_api_stream){.event = responses_event, .destroy = responses_destroy};
    s->r = r;
    s->mi = mi;
    snprintf(s->id, sizeof s->id, "%s", a->id);
    s->a = *a;
    s->a.id = s->id;
    s->output = json_array();
    if (!s->output) {
        free(s);
        return NULL;
    }
    return &s->base;
}

/* ---- GET and DELETE /v1/responses/{id} ---- */

static void responses_not_found(const char *id, srv_error *err) {
    srv_error_make(err, SRV_ERROR_NOT_FOUND, NULL,
                   "Response with id '%.64s' not found (never stored, expired, deleted or another API key's).", id);
}

json_t *srv_responses_get(const srv_model_info *mi, const char *id, uint64_t tenant, srv_error *err) {
    json_t *response = NULL;
    if (srv__store_get(mi->responses, id, tenant, &response, NULL, sched_now())) return response;
    responses_not_found(id, err);
    return NULL;
}

json_t *srv_responses_delete(const srv_model_info *mi, const char *id, uint64_t tenant, srv_error *err) {
    if (!srv__store_delete(mi->responses, id, tenant, sched_now())) {
        responses_not_found(id, err);
        return NULL;
    }
    json_t *deleted = json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1);
    if (!deleted) srv_error_make(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
    return deleted;
}

/* ---- the dialect (api_bridge.c) ---- */

const srv__dialect srv__dialect_responses = {
    .api = SRV_ENDPOINT_RESPONSES,
    .parse = srv__responses_parse,
    .render = srv__responses_render,
    .stream = srv__responses_stream,
    .error_json = NULL, /* OpenAI's */
};

/* anthropic.c: Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
 * over the chat machinery: the request. A Messages body is checked field by field, with
 * errors that name Anthropic's path (messages[1].content[0].type), and translated into a
 * chat completions body: system into a system message, text blocks into content, tool_use
 * blocks into tool_calls, tool_result blocks into tool messages, tools and tool_choice
 * into OpenAI's, stop_sequences into stop. A field that would change the output and that
 * spindle does not implement is a 400 naming it, never ignored. The answer and the
 * stream are anthropic_answer.c's.
 *
 * Reentrant: prep workers parse.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/api_internal.h"

/* Anthropic's smallest thinking budget (thinking.budget_tokens). */
enum { MSG_MIN_THINKING_BUDGET = 1024 };

/* Fields spindle does not implement, each of which would change the answer. */
static const char *const MSG_REFUSED[] = {"container",     "mcp_servers",   "context_management",
                                          "output_config", "output_format", "diagnostics"};

/* A field's path (messages[1].content[0].type) into buf, cut to fit (srv_error keeps its
 * first 64 bytes anyway). */
static void msg_param(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msg_param(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

/* ---- the request: Anthropic's body into a chat body ---- */

/* A translation under way. */
typedef struct msg_build {
    const srv_model_info *mi;
    json_t *chat;     /* the chat completions body (owned) */
    json_t *messages; /* its messages (borrowed from chat) */
    json_t *calls;    /* the previous assistant turn's tool_use blocks: {id: name} (owned) */
    bool prefill;     /* the last message is the assistant's text, to be continued */
    srv_error *err;
} msg_build;

static sp_status msg_nomem(srv_error *err) {
    return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory translating the Messages request");
}

static sp_status msg_missing(srv_error *err, const char *param) {
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "Missing required parameter: '%s'.", param);
}

static bool msg_is(const json_t *s, const char *want) {
    return json_is_string(s) && strcmp(json_string_value(s), want) == 0 && json_string_length(s) == strlen(want);
}

/* A block's type (borrowed), the block being an object with a string "type". */
static sp_status msg_block_type(const json_t *block, const char *param, const char **type, srv_error *err) {
    if (!json_is_object(block)) return srv__type_error(err, param, "an object", block);
    char p[128];
    msg_param(p, sizeof p, "%s.type", param);
    const json_t *t = json_object_get(block, "type");
    if (!t) return msg_missing(err, p);
    if (!json_is_string(t)) return srv__type_error(err, p, "a string", t);
    *type = json_string_value(t);
    return SP_OK;
}

/* A block the translation cannot carry: media (the models here read text) or a type
 * that has no place where it stands (supported: what has). */
static sp_status msg_refuse_block(const char *param, const char *type, const char *supported, srv_error *err) {
    static const char *const media[] = {"image", "document", "search_result", "container_upload"};
    for (size_t i = 0; i < sizeof media / sizeof media[0]; i++)
        if (strcmp(type, media[i]) == 0)
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                             "'%s': '%s' blocks are not supported: this server's models read text only.", param, type);
    return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                     "'%s': blocks of type '%.64s' are not supported here (supported: %s).", param, type, supported);
}

/* The "text" of a text block at param, appended to text ("\n" between texts). */
static sp_status msg_append_text_block(const json_t *block, const char *param, strbuf *text, srv_error *err) {
    char p[128];
    msg_param(p, sizeof p, "%s.text", param);
    const json_t *t = json_object_get(block, "text");
    if (!t) return msg_missing(err, p);
    if (!json_is_string(t)) return srv__type_error(err, p, "a string", t);
    if (text->len > 0) strbuf_append(text, "\n", 1);
    strbuf_append(text, json_string_value(t), json_string_length(t));
    return SP_OK;
}

/* Content that may only be text (system, a tool_result's content): a string, or an
 * array of text blocks (cache_control and citations accepted: they change no output). */
static sp_status msg_append_texts(const json_t *content, const char *param, strbuf *text, srv_error *err) {
    if (json_is_string(content)) {
        strbuf_append(text, json_string_value(content), json_string_length(content));
        return SP_OK;
    }
    if (!json_is_array(content)) return srv__type_error(err, param, "a string or an array of text blocks", content);
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *block = json_array_get(content, i);
        char p[128];
        msg_param(p, sizeof p, "%s[%zu]", param, i);
        const char *type;
        sp_status st = msg_block_type(block, p, &type, err);
        if (st != SP_OK) return st;
        if (strcmp(type, "text") != 0) return msg_refuse_block(p, type, "text", err);
        if ((st = msg_append_text_block(block, p, text, err)) != SP_OK) return st;
    }
    return SP_OK;
}

/* Appends {"role": role, "content": text} (takes text's buffer). */
static sp_status msg_append_message(msg_build *b, const char *role, strbuf *text) {
    bool failed = text->failed;
    json_t *msg = failed ? NULL : json_pack("{s:s,s:s%}", "role", role, "content", text->p ? text->p : "", text->len);
    free(text->p);
    *text = (strbuf){0};
    return json_array_append_new(b->messages, msg) ? msg_nomem(b->err) : SP_OK;
}

/* A tool_result block: a tool message answering a tool_use of the previous assistant turn. */
static sp_status msg_tool_result(msg_build *b, const json_t *block, const char *param) {
    char p[128];
    msg_param(p, sizeof p, "%s.tool_use_id", param);
    const json_t *id = json_object_get(block, "tool_use_id");
    if (!id) return msg_missing(b->err, p);
    if (!json_is_string(id)) return srv__type_error(b->err, p, "a string", id);
    const json_t *name = json_object_getn(b->calls, json_string_value(id), json_string_length(id));
    if (!name)
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, p,
                         "'%s': '%.64s' is not the id of a tool_use block in the previous assistant message.", p,
                         json_string_value(id));
    msg_param(p, sizeof p, "%s.is_error", param);
    const json_t *is_error = srv__field(block, "is_error");
    if (is_error && !json_is_boolean(is_error)) return srv__type_error(b->err, p, "a boolean", is_error);
    strbuf text = {0};
    msg_param(p, sizeof p, "%s.content", param);
    const json_t *content = srv__field(block, "content");
    sp_status st = content ? msg_append_texts(content, p, &text, b->err) : SP_OK;
    if (st == SP_OK && json_is_true(is_error)) { /* what the model is told of a failed call */
        strbuf marked = {0};
        strbuf_printf(&marked, "Error: ");
        strbuf_append(&marked, text.p ? text.p : "", text.len);
        free(text.p);
        text = marked;
    }
    json_t *msg = st == SP_OK && !text.failed ? json_pack("{s:s,s:O,s:O,s:s%}", "role", "tool", "tool_call_id", id,
                                                          "name", name, "content", text.p ? text.p : "", text.len)
                                              : NULL;
    free(text.p);
    if (st != SP_OK) {
        json_decref(msg);
        return st;
    }
    return json_array_append_new(b->messages, msg) ? msg_nomem(b->err) : SP_OK;
}

/* A user turn: its text blocks become user messages and its tool_result blocks tool
 * messages, in their order. */
static sp_status msg_user(msg_build *b, const json_t *content, size_t m) {
    strbuf text = {0};
    if (json_is_string(content)) {
        strbuf_append(&text, json_string_value(content), json_string_length(content));
        return msg_append_message(b, "user", &text);
    }
    bool have_text = false;
    sp_status st = SP_OK;
    for (size_t i = 0; i < json_array_size(content) && st == SP_OK; i++) {
        const json_t *block = json_array_get(content, i);
        char p[128];
        msg_param(p, sizeof p, "messages[%zu].content[%zu]", m, i);
        const char *type;
        if ((st = msg_block_type(block, p, &type, b->err)) != SP_OK) break;
        if (strcmp(type, "text") == 0) {
            st = msg_append_text_block(block, p, &text, b->err);
            have_text = true;
        } else if (strcmp(type, "tool_result") == 0) {
            if (have_text) st = msg_append_message(b, "user", &text);
            have_text = false;
            if (st == SP_OK) st = msg_tool_result(b, block, p);
        } else {
            st = msg_refuse_block(p, type, "text and tool_result in a user message", b->err);
        }
    }
    if (st == SP_OK && have_text) return msg_append_message(b, "user", &text);
    free(text.p);
    return st;
}

/* A tool_use block as an OpenAI tool call, remembered for the tool_result that answers it. */
static sp_status msg_tool_use(msg_build *b, const json_t *block, const char *param, json_t *calls) {
    static const char *const keys[] = {"id", "name", "input"};
    const json_t *v[3];
    for (int k = 0; k < 3; k++) {
        char p[128];
        msg_param(p, sizeof p, "%s.%s", param, keys[k]);
        v[k] = json_object_get(block, keys[k]);
        if (!v[k]) return msg_missing(b->err, p);
        if (k < 2 && !json_is_string(v[k])) return srv__type_error(b->err, p, "a string", v[k]);
        if (k == 2 && !json_is_object(v[k])) return srv__type_error(b->err, p, "an object", v[k]);
    }
    char *arguments = json_dumps(v[2], JSON_COMPACT);
    json_t *call = arguments ? json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", v[0], "type", "function", "function", "name",
                                         v[1], "arguments", arguments)
                             : NULL;
    free(arguments);
    if (json_array_append_new(calls, call) ||
        json_object_setn(b->calls, json_string_value(v[0]), json_string_length(v[0]), (json_t *)v[1]))
        return msg_nomem(b->err);
    return SP_OK;
}

/* An assistant turn: one assistant message with its text as content, its tool_use blocks
 * as tool_calls and its thinking as reasoning_content. The last message, when it is text
 * alone, is a prefill the answer continues. */
static sp_status msg_assistant(msg_build *b, const json_t *content, size_t m, bool last) {
    strbuf text = {0}, thinking = {0};
    json_t *calls = json_array(), *msg = json_pack("{s:s}", "role", "assistant");
    json_object_clear(b->calls); /* tool_result blocks answer this turn's calls only */
    sp_status st = calls && msg ? SP_OK : msg_nomem(b->err);
    if (st == SP_OK && json_is_string(content))
        strbuf_append(&text, json_string_value(content), json_string_length(content));
    for (size_t i = 0; st == SP_OK && json_is_array(content) && i < json_array_size(content); i++) {
        const json_t *block = json_array_get(content, i);
        char p[128];
        msg_param(p, sizeof p, "messages[%zu].content[%zu]", m, i);
        const char *type;
        if ((st = msg_block_type(block, p, &type, b->err)) != SP_OK) break;
        if (strcmp(type, "text") == 0) {
            st = msg_append_text_block(block, p, &text, b->err);
        } else if (strcmp(type, "tool_use") == 0) {
            st = msg_tool_use(b, block, p, calls);
        } else if (strcmp(type, "thinking") == 0) {
            char tp[128];
            msg_param(tp, sizeof tp, "%s.thinking", p);
            const json_t *t = json_object_get(block, "thinking");
            if (!t)
                st = msg_missing(b->err, tp);
            else if (!json_is_string(t))
                st = srv__type_error(b->err, tp, "a string", t);
            else
                strbuf_append(&thinking, json_string_value(t), json_string_length(t));
        } else {
            st = msg_refuse_block(p, type, "text, tool_use and thinking in an assistant message", b->err);
        }
    }
    if (st == SP_OK && (text.failed || thinking.failed)) st = msg_nomem(b->err);
    int bad = 0;
    if (st == SP_OK && text.len > 0) bad |= json_object_set_new(msg, "content", json_stringn(text.p, text.len));
    if (st == SP_OK && json_array_size(calls) > 0) bad |= json_object_set(msg, "tool_calls", calls);
    if (st == SP_OK && thinking.len > 0)
        bad |= json_object_set_new(msg, "reasoning_content", json_stringn(thinking.p, thinking.len));
    if (st == SP_OK && bad) st = msg_nomem(b->err);
    b->prefill = last && text.len > 0 && json_array_size(calls) == 0;
    free(text.p);
    free(thinking.p);
    json_decref(calls);
    if (st != SP_OK) {
        json_decref(msg);
        return st;
    }
    return json_array_append_new(b->messages, msg) ? msg_nomem(b->err) : SP_OK;
}

/* system, then messages: every message's role and blocks. */
static sp_status msg_messages(msg_build *b, const json_t *root) {
    const json_t *system = srv__field(root, "system");
    strbuf text = {0};
    sp_status st = system ? msg_append_texts(system, "system", &text, b->err) : SP_OK;
    if (st == SP_OK && text.len > 0) st = msg_append_message(b, "system", &text);
    free(text.p);
    if (st != SP_OK) return st;
    const json_t *messages = srv__field(root, "messages");
    if (!messages) return msg_missing(b->err, "messages");
    if (!json_is_array(messages)) return srv__type_error(b->err, "messages", "an array", messages);
    size_t n = json_array_size(messages);
    if (n == 0)
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "messages",
                         "Invalid 'messages': empty array. Expected at least one message.");
    for (size_t m = 0; m < n; m++) {
        const json_t *msg = json_array_get(messages, m);
        char p[96];
        msg_param(p, sizeof p, "messages[%zu]", m);
        if (!json_is_object(msg)) return srv__type_error(b->err, p, "an object", msg);
        msg_param(p, sizeof p, "messages[%zu].role", m);
        const json_t *role = json_object_get(msg, "role");
        if (!role) return msg_missing(b->err, p);
        if (!json_is_string(role)) return srv__type_error(b->err, p, "a string", role);
        bool user = msg_is(role, "user");
        if (!user && !msg_is(role, "assistant"))
            return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, p,
                             "Invalid value for '%s': '%.64s'. Supported values are: 'user' and 'assistant' (a "
                             "system prompt goes in the top-level 'system' field).",
                             p, json_string_value(role));
        msg_param(p, sizeof p, "messages[%zu].content", m);
        const json_t *content = json_object_get(msg, "content");
        if (!content) return msg_missing(b->err, p);
        if (!json_is_string(content) && !json_is_array(content))
            return srv__type_error(b->err, p, "a string or an array of content blocks", content);
        if (json_is_array(content) && json_array_size(content) == 0)
            return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, p,
                             "Invalid '%s': empty array. Expected at least one content block.", p);
        st = user ? msg_user(b, content, m) : msg_assistant(b, content, m, m + 1 == n);
        if (st != SP_OK) return st;
    }
    return SP_OK;
}

/* A tool name the chat machinery takes: 1 to 64 of a-z A-Z 0-9 _ -. */
static bool msg_tool_name_ok(const json_t *name) {
    size_t n = json_string_length(name);
    const char *s = json_string_value(name);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* tools: custom tools {name, description, input_schema} as OpenAI's function tools;
 * server tools (a versioned type such as web_search_20250305) are refused. */
static sp_status msg_tools(msg_build *b, const json_t *tools) {
    if (!json_is_array(tools)) return srv__type_error(b->err, "tools", "an array", tools);
    json_t *out = json_array();
    if (!out || json_object_set_new(b->chat, "tools", out)) return msg_nomem(b->err);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *tool = json_array_get(tools, i);
        char p[64];
        msg_param(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(tool)) return srv__type_error(b->err, p, "an object", tool);
        const json_t *type = srv__field(tool, "type"), *name = json_object_get(tool, "name");
        const json_t *description = srv__field(tool, "description"), *schema = json_object_get(tool, "input_schema");
        msg_param(p, sizeof p, "tools[%zu].type", i);
        if (type && !msg_is(type, "custom"))
            return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, p,
                             "'%s': server tools ('%.64s') are not supported by this server; give custom tools "
                             "(name, description, input_schema).",
                             p, json_is_string(type) ? json_string_value(type) : srv__json_kind(type));
        msg_param(p, sizeof p, "tools[%zu].name", i);
        if (!name) return msg_missing(b->err, p);
        if (!json_is_string(name) || !msg_tool_name_ok(name))
            return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, p,
                             "'%s' must be 1 to 64 letters, digits, underscores or dashes.", p);
        for (size_t j = 0; j < i; j++)
            if (json_equal(name, json_object_get(json_array_get(tools, j), "name")))
                return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, p, "'%s': the name '%s' is used by tools[%zu] too.", p,
                                 json_string_value(name), j);
        msg_param(p, sizeof p, "tools[%zu].description", i);
        if (description && !json_is_string(description)) return srv__type_error(b->err, p, "a string", description);
        msg_param(p, sizeof p, "tools[%zu].input_schema", i);
        if (!schema) return msg_missing(b->err, p);
        if (!json_is_object(schema)) return srv__type_error(b->err, p, "a JSON Schema (an object)", schema);
        msg_param(p, sizeof p, "tools[%zu].strict", i);
        if (json_is_true(json_object_get(tool, "strict")))
            return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, p,
                             "'%s': strict tool use is not supported; forced calls (tool_choice any or tool) always "
                             "follow the input_schema.",
                             p);
        json_t *fn = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
        if (fn && description) json_object_set(fn, "description", (json_t *)description);
        if (json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn)))
            return msg_nomem(b->err);
    }
    return SP_OK;
}

/* tool_choice {type: auto | any | tool (with name) | none, disable_parallel_tool_use} as
 * OpenAI's "auto", "required", {"type": "function", ...} and "none". *forced: any or tool. */
static sp_status msg_tool_choice(msg_build *b, const json_t *choice, const json_t *tools, bool *forced) {
    *forced = false;
    if (!json_is_object(choice)) return srv__type_error(b->err, "tool_choice", "an object", choice);
    const json_t *type = json_object_get(choice, "type");
    if (!type) return msg_missing(b->err, "tool_choice.type");
    const char *kinds[] = {"auto", "any", "tool", "none"};
    int k = 0;
    while (k < 4 && !msg_is(type, kinds[k])) k++;
    if (k == 4)
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "tool_choice.type",
                         "Invalid value for 'tool_choice.type'. Supported values are: 'auto', 'any', 'tool' and "
                         "'none'.");
    size_t n_tools = json_is_array(tools) ? json_array_size(tools) : 0;
    if ((k == 1 || k == 2) && n_tools == 0)
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "tool_choice", "'tool_choice' of type '%s' needs 'tools'.",
                         kinds[k]);
    json_t *chat_choice = NULL;
    if (k == 2) {
        const json_t *name = json_object_get(choice, "name");
        if (!name) return msg_missing(b->err, "tool_choice.name");
        if (!json_is_string(name)) return srv__type_error(b->err, "tool_choice.name", "a string", name);
        bool found = false;
        for (size_t i = 0; i < n_tools && !found; i++)
            found = json_equal(name, json_object_get(json_array_get(tools, i), "name"));
        if (!found)
            return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "tool_choice.name",
                             "'tool_choice.name': '%.64s' is not the name of a tool in 'tools'.",
                             json_string_value(name));
        chat_choice = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name);
    } else {
        chat_choice = json_string(k == 0 ? "auto" : k == 1 ? "required" : "none");
    }
    if (json_object_set_new(b->chat, "tool_choice", chat_choice)) return msg_nomem(b->err);
    *forced = k == 1 || k == 2;
    const json_t *one = srv__field(choice, "disable_parallel_tool_use");
    if (one && !json_is_boolean(one))
        return srv__type_error(b->err, "tool_choice.disable_parallel_tool_use", "a boolean", one);
    if (json_is_true(one) && json_object_set_new(b->chat, "parallel_tool_calls", json_false()))
        return msg_nomem(b->err);
    return SP_OK;
}

/* stop_sequences: at most SCHED_MAX_STOP strings of 1 to SCHED_MAX_STOP_BYTES bytes. */
static sp_status msg_stop_sequences(msg_build *b, const json_t *root) {
    const json_t *stops = srv__field(root, "stop_sequences");
    if (!stops) return SP_OK;
    if (!json_is_array(stops)) return srv__type_error(b->err, "stop_sequences", "an array of strings", stops);
    size_t n = json_array_size(stops);
    if (n > SCHED_MAX_STOP)
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "stop_sequences",
                         "Invalid 'stop_sequences': %zu sequences; this server takes at most %d.", n, SCHED_MAX_STOP);
    for (size_t k = 0; k < n; k++) {
        const json_t *s = json_array_get(stops, k);
        char p[48];
        msg_param(p, sizeof p, "stop_sequences[%zu]", k);
        if (!json_is_string(s)) return srv__type_error(b->err, p, "a string", s);
        size_t len = json_string_length(s);
        if (len == 0 || len > SCHED_MAX_STOP_BYTES || memchr(json_string_value(s), '\0', len))
            return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, p,
                             "Invalid '%s': a stop sequence must be 1 to %d bytes without NUL, but got %zu bytes.", p,
                             SCHED_MAX_STOP_BYTES, len);
    }
    return n > 0 && json_object_set(b->chat, "stop", (json_t *)stops) ? msg_nomem(b->err) : SP_OK;
}

/* thinking: enabled (with budget_tokens) or adaptive on a model that thinks, through the
 * template's enable_thinking and the chat's max_reasoning_tokens; disabled turns the
 * template's thinking off. max_tokens: 0 when not given (count_tokens). */
static sp_status msg_thinking(msg_build *b, const json_t *root, int64_t max_tokens, bool forced) {
    const json_t *thinking = srv__field(root, "thinking");
    if (!thinking) return SP_OK;
    if (!json_is_object(thinking)) return srv__type_error(b->err, "thinking", "an object", thinking);
    const json_t *type = json_object_get(thinking, "type");
    if (!type) return msg_missing(b->err, "thinking.type");
    bool on = msg_is(type, "enabled") || msg_is(type, "adaptive");
    if (!on && !msg_is(type, "disabled"))
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "thinking.type",
                         "Invalid value for 'thinking.type'. Supported values are: 'enabled', 'adaptive' and "
                         "'disabled'.");
    const json_t *display = srv__field(thinking, "display");
    if (display && !msg_is(display, "summarized"))
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "thinking.display",
                         "'thinking.display': only 'summarized' is supported (the thinking is returned as written).");
    if (on && !b->mi->reasoning_tags)
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "thinking",
                         "'thinking': the model's chat template has no thinking (<think> ... </think>); leave "
                         "'thinking' out or set its type to 'disabled'.");
    if (on && forced)
        return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "thinking",
                         "Thinking may not be enabled when tool_choice forces tool use.");
    if (msg_is(type, "enabled")) {
        int64_t budget = 0;
        const json_t *v = json_object_get(thinking, "budget_tokens");
        if (!v) return msg_missing(b->err, "thinking.budget_tokens");
        sp_status st = srv__want_int(v, "thinking.budget_tokens", MSG_MIN_THINKING_BUDGET, INT32_MAX, &budget, b->err);
        if (st != SP_OK) return st;
        if (max_tokens > 0 && budget >= max_tokens)
            return srv__fail(b->err, SRV_ERROR_BAD_REQUEST, "thinking.budget_tokens",
                             "'thinking.budget_tokens' (%lld) must be less than 'max_tokens' (%lld).",
                             (long long)budget, (long long)max_tokens);
        if (json_object_set_new(b->chat, "max_reasoning_tokens", json_integer(budget))) return msg_nomem(b->err);
    }
    if (!b->mi->reasoning_tags) return SP_OK; /* disabled on a model that does not think: nothing to turn off */
    json_t *kwargs = json_pack("{s:b}", "enable_thinking", on);
    return json_object_set_new(b->chat, "chat_template_kwargs", kwargs) ? msg_nomem(b->err) : SP_OK;
}

/* The scalar fields: model, max_tokens (required when need_max_tokens), temperature,
 * top_p, top_k, stream, cache_salt; metadata and service_tier checked and left out (they change no
 * output); the refused ones. */
static sp_status msg_scalars(msg_build *b, const json_t *root, bool need_max_tokens, int64_t *max_tokens) {
    srv_error *err = b->err;
    for (size_t i = 0; i < sizeof MSG_REFUSED / sizeof MSG_REFUSED[0]; i++)
        if (srv__field(root, MSG_REFUSED[i]))
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, MSG_REFUSED[i],
                             "'%s' is not supported by this server: leave it out.", MSG_REFUSED[i]);
    const char *s;
    size_t len;
    bool given;
    sp_status st;
    if ((st = srv__read_string(root, "model", &s, &len, &given, err)) != SP_OK) return st;
    if (given && json_object_set(b->chat, "model", json_object_get(root, "model"))) return msg_nomem(err);
    *max_tokens = 0;
    if ((st = srv__read_int(root, "max_tokens", 1, INT64_MAX, max_tokens, &given, err)) != SP_OK) return st;
    if (!given && need_max_tokens) return msg_missing(err, "max_tokens");
    if (given && b->mi->max_tokens > 0 && *max_tokens > b->mi->max_tokens)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "max_tokens",
                         "Invalid 'max_tokens': %lld is more than this server allows (%d, its --max-tokens).",
                         (long long)*max_tokens, b->mi->max_tokens);
    double d;
    int64_t i;
    bool stream = false;
    if ((st = srv__read_number(root, "temperature", (srv__range){0.0, 1.0, false, false}, &d, &given, err)) != SP_OK)
        return st;
    if (given && json_object_set_new(b->chat, "temperature", json_real(d))) return msg_nomem(err);
    if ((st = srv__read_number(root, "top_p", (srv__range){0.0, 1.0, true, false}, &d, &given, err)) != SP_OK)
        return st;
    if (given && json_object_set_new(b->chat, "top_p", json_real(d))) return msg_nomem(err);
    if ((st = srv__read_int(root, "top_k", 0, INT32_MAX, &i, &given, err)) != SP_OK) return st;
    if (given && json_object_set_new(b->chat, "top_k", json_integer(i))) return msg_nomem(err);
    if ((st = srv__read_bool(root, "stream", &stream, NULL, err)) != SP_OK) return st;
    /* the usage chunk at the end carries output_tokens and the stop sequence */
    if (stream &&
        json_object_update_new(b->chat, json_pack("{s:b,s:{s:b}}", "stream", 1, "stream_options", "include_usage", 1)))
        return msg_nomem(err);
    /* vLLM's cache_salt, as on chat (checked there) */
    const json_t *salt = srv__field(root, "cache_salt");
    if (salt && json_object_set(b->chat, "cache_salt", (json_t *)salt)) return msg_nomem(err);
    const json_t *metadata = srv__field(root, "metadata");
    if (metadata && !json_is_object(metadata)) return srv__type_error(err, "metadata", "an object", metadata);
    return srv__read_string(root, "service_tier", &s, &len, NULL, err);
}

/* Anthropic's body (root) into a chat completions body (*chat, caller owns). */
static sp_status msg_translate(const json_t *root, const srv_model_info *mi, bool need_max_tokens, json_t **chat,
                               int64_t *max_tokens, srv_error *err) {
    msg_build b = {.mi = mi, .chat = json_object(), .messages = json_array(), .calls = json_object(), .err = err};
    sp_status st = b.chat && b.messages && b.calls && !json_object_set(b.chat, "messages", b.messages)
                       ? msg_scalars(&b, root, need_max_tokens, max_tokens)
                       : msg_nomem(err);
    if (st == SP_OK) st = msg_messages(&b, root);
    const json_t *tools = srv__field(root, "tools"), *choice = srv__field(root, "tool_choice");
    bool forced = false;
    if (st == SP_OK && tools) st = msg_tools(&b, tools);
    if (st == SP_OK && choice) st = msg_tool_choice(&b, choice, tools, &forced);
    if (st == SP_OK) st = msg_stop_sequences(&b, root);
    if (st == SP_OK) st = msg_thinking(&b, root, *max_tokens, forced);
    if (st == SP_OK && b.prefill && json_object_set_new(b.chat, "continue_final_message", json_true()))
        st = msg_nomem(err);
    json_decref(b.messages);
    json_decref(b.calls);
    if (st != SP_OK) {
        json_decref(b.chat);
        return st;
    }
    *chat = b.chat;
    return SP_OK;
}

/* A failure of the chat machinery on the translated body: a chat message's index is not
 * the Anthropic one, so such an error names the list (the messages were checked above). */
static sp_status msg_chat_status(sp_status st, srv_error *err) {
    if (st != SP_OK && strncmp(err->param, "messages[", 9) == 0) snprintf(err->param, sizeof err->param, "messages");
    return st;
}

sp_status srv__messages_parse(const char *body, size_t len, const srv_model_info *mi, srv_request *out,
                              srv_error *err) {
    *out = (srv_request){.endpoint = SRV_ENDPOINT_CHAT, .api = SRV_ENDPOINT_MESSAGES, .n = 1};
    *err = (srv_error){0};
    json_t *root = NULL, *chat = NULL;
    int64_t max_tokens = 0;
    sp_status st = srv__parse_body(body, len, &root, err);
    if (st == SP_OK) st = msg_translate(root, mi, true, &chat, &max_tokens, err);
    /* max_tokens is left to the context here and set below: a request whose max_tokens
     * does not fit gets what the context leaves, and "model_context_window_exceeded" */
    if (st == SP_OK) st = msg_chat_status(srv__request_from_json(SRV_ENDPOINT_CHAT, chat, mi, out, err), err);
    json_decref(chat);
    if (st != SP_OK) {
        json_decref(root);
        return st;
    }
    out->api = SRV_ENDPOINT_MESSAGES;
    int64_t room = (int64_t)mi->max_seq_len - out->prompt_lens[0];
    bool clamped = max_tokens > room;
    out->max_tokens[0] = out->params.max_tokens = (int32_t)(clamped ? room : max_tokens);
    const json_t *model = srv__field(root, "model");
    out->api_fields = json_pack(
        "{s:o,s:b}", "model",
        model ? json_incref((json_t *)model) : json_string(mi->served_name ? mi->served_name : ""), "clamped", clamped);
    json_decref(root);
    if (!out->api_fields) {
        srv_request_free(out);
        return msg_nomem(err);
    }
    return SP_OK;
}

json_t *srv_messages_count_tokens(const char *body, size_t len, const srv_model_info *mi, srv_error *err) {
    *err = (srv_error){0};
    json_t *root = NULL, *chat = NULL, *answer = NULL;
    int64_t max_tokens = 0;
    srv_request r = {.endpoint = SRV_ENDPOINT_CHAT, .api = SRV_ENDPOINT_MESSAGES, .n = 1};
    char *text = NULL;
    size_t text_len = 0, n_ids = 0;
    int32_t *ids = NULL;
    /* the prompt exactly as a generation renders it, but counted even past the context */
    sp_status st = srv__parse_body(body, len, &root, err);
    if (st == SP_OK) st = msg_translate(root, mi, false, &chat, &max_tokens, err);
    if (st == SP_OK) st = srv__check_model(chat, mi, err);
    if (st == SP_OK) st = msg_chat_status(srv__request_tools(chat, mi, &r, err), err);
    if (st == SP_OK) st = msg_chat_status(srv__chat_render(chat, mi, &r, &text, &text_len, err), err);
    if (st == SP_OK) st = srv__chat_tokenize(mi, text, text_len, &ids, &n_ids, err);
    if (st == SP_OK && !(answer = json_pack("{s:I}", "input_tokens", (json_int_t)n_ids))) msg_nomem(err);
    free(ids);
    free(text);
    srv_request_free(&r);
    json_decref(chat);
    json_decref(root);
    return answer;
}

/* ---- the dialect (api_bridge.c) ---- */

static sp_status messages_parse(const char *body, size_t len, const srv_model_info *mi, uint64_t tenant,
                                srv_request *out, srv_error *err) {
    (void)tenant; /* nothing of a /v1/messages request is kept per key */
    return srv__messages_parse(body, len, mi, out, err);
}

const srv__dialect srv__dialect_messages = {
    .api = SRV_ENDPOINT_MESSAGES,
    .parse = messages_parse,
    .render = srv__messages_render,
    .stream = srv__messages_stream,
    .error_json = srv__messages_error_json,
};

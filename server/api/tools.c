/* tools.c: tool calls for every model. A request's `tools`, `tool_choice` and
 * `parallel_tool_calls` are checked here; the prompt carries the tools through the model's
 * own template when it renders them (probed at start), else through a system block that
 * lists them and the exact JSON shape of a call (the generic format); `required` and a
 * named tool are enforced by a grammar built from the tools' schemas; and the answer is
 * parsed back into tool calls in the format the template's model was trained on:
 *
 *   generic  {"tool_calls": [{"name": N, "arguments": {...}}, ...]}  (the whole answer)
 *   hermes   <tool_call>{"name": N, "arguments": {...}}</tool_call> ...  (Hermes, Qwen 2.5/3)
 *   llama3   [<|python_tag|>]{"name": N, "parameters": {...}}          (Llama 3.x)
 *   mistral  [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]        (Mistral)
 *
 * An answer that does not parse as calls of the request's tools is returned as content,
 * never an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "server/api/api_internal.h"

/* A function name OpenAI accepts: 1 to 64 of a-z A-Z 0-9 _ -. */
static bool tool_name_ok(const char *s, size_t n) {
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ---- the template's format, probed at start ---- */

#define TOOLS_PROBE_NAME "spindle_probe_tool_7f3a"

srv_tool_format srv__tools_detect(const tmpl *t, const json_t *tokens, const char *source, size_t len, bool *renders) {
    *renders = false;
    json_t *ctx = json_pack("{s:[{s:s,s:s}],s:b,s:[{s:s,s:{s:s,s:s,s:{s:s}}}]}", "messages", "role", "user", "content",
                            "hi", "add_generation_prompt", 1, "tools", "type", "function", "function", "name",
                            TOOLS_PROBE_NAME, "description", "probe", "parameters", "type", "object");
    if (ctx) {
        if (tokens) json_object_update_missing(ctx, (json_t *)tokens);
        char *out = NULL;
        size_t out_len = 0;
        if (tmpl_render(t, ctx, NULL, &out, &out_len) == SP_OK)
            *renders = memmem(out, out_len, TOOLS_PROBE_NAME, strlen(TOOLS_PROBE_NAME)) != NULL;
        free(out);
        json_decref(ctx);
    }
    if (!*renders) return SRV_TOOLS_GENERIC;
    if (memmem(source, len, "<tool_call>", 11)) return SRV_TOOLS_HERMES;
    if (memmem(source, len, "[TOOL_CALLS]", 12)) return SRV_TOOLS_MISTRAL;
    if (memmem(source, len, "<|python_tag|>", 14) || memmem(source, len, "<|start_header_id|>", 19))
        return SRV_TOOLS_LLAMA3;
    return SRV_TOOLS_GENERIC;
}

const char *srv__tools_format_name(srv_tool_format f) {
    switch (f) {
    case SRV_TOOLS_GENERIC: return "generic JSON";
    case SRV_TOOLS_HERMES: return "hermes (<tool_call>)";
    case SRV_TOOLS_LLAMA3: return "llama3 (<|python_tag|>)";
    case SRV_TOOLS_MISTRAL: return "mistral ([TOOL_CALLS])";
    }
    return "?";
}

/* ---- the request's fields ---- */

/* The function object of tools[i], checked. */
static sp_status tool_check(const json_t *tool, size_t i, srv_error *err) {
    char param[64];
    snprintf(param, sizeof param, "tools[%zu]", i);
    if (!json_is_object(tool)) return srv__type_error(err, param, "an object", tool);
    const json_t *type = json_object_get(tool, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0) {
        snprintf(param, sizeof param, "tools[%zu].type", i);
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "'%s' must be \"function\".", param);
    }
    const json_t *fn = json_object_get(tool, "function");
    snprintf(param, sizeof param, "tools[%zu].function", i);
    if (!json_is_object(fn)) return srv__type_error(err, param, "an object", fn);
    const json_t *name = json_object_get(fn, "name");
    snprintf(param, sizeof param, "tools[%zu].function.name", i);
    if (!json_is_string(name) || !tool_name_ok(json_string_value(name), json_string_length(name)))
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, param,
                         "'%s' must be 1 to 64 letters, digits, underscores or dashes.", param);
    const json_t *params = json_object_get(fn, "parameters");
    snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
    if (params && !json_is_null(params) && !json_is_object(params))
        return srv__type_error(err, param, "a JSON Schema (an object)", params);
    return SP_OK;
}

static const json_t *tool_fn(const json_t *tools, size_t i) {
    return json_object_get(json_array_get(tools, i), "function");
}

static const char *tool_name(const json_t *tools, size_t i) {
    return json_string_value(json_object_get(tool_fn(tools, i), "name"));
}

/* The index of the tool named name (n bytes), or -1. */
static long tool_find(const json_t *tools, const char *name, size_t n) {
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const char *t = tool_name(tools, i);
        if (strlen(t) == n && memcmp(t, name, n) == 0) return (long)i;
    }
    return -1;
}

/* Rewrites, in place, every "$ref": "#..." under v to "#/$defs/<prefix>...": a tool's
 * parameters moved under the call schema's $defs keep their references (Pydantic's
 * "#/$defs/Model", a recursive "#"). Returns whether there was one. */
static bool refs_rebase(json_t *v, const char *prefix) {
    bool any = false;
    if (json_is_object(v)) {
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) {
            if (strcmp(key, "$ref") == 0 && json_is_string(x) && json_string_value(x)[0] == '#') {
                strbuf b = {0};
                strbuf_printf(&b, "#/$defs/%s%s", prefix, json_string_value(x) + 1);
                char *ref = strbuf_take(&b);
                if (ref) json_string_set(x, ref);
                free(ref);
                any = true;
            } else {
                any |= refs_rebase(x, prefix);
            }
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) any |= refs_rebase(json_array_get(v, i), prefix);
    }
    return any;
}

/* The JSON Schema of one call's object in format f: {"name": const, args_key: parameters}
 * for each allowed tool, as an anyOf (their names tell them apart). Parameters with
 * references move under the call schema's $defs (as "<tool>-params"), theirs rebased. */
static json_t *call_schema(const srv_request *r, srv_tool_format f, json_t *defs) {
    const char *args_key = f == SRV_TOOLS_LLAMA3 ? "parameters" : "arguments";
    json_t *alts = json_array();
    for (size_t i = 0; alts && i < json_array_size(r->tools); i++) {
        if (r->tool_choice == SRV_TOOL_CHOICE_NAMED && strcmp(tool_name(r->tools, i), r->tool_choice_name) != 0)
            continue;
        const json_t *params = json_object_get(tool_fn(r->tools, i), "parameters");
        json_t *p = params && !json_is_null(params) ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
        char def[96];
        snprintf(def, sizeof def, "%s-params", tool_name(r->tools, i));
        if (p && refs_rebase(p, def)) { /* referenced from inside: it lives in $defs, the call points there */
            json_object_set_new(defs, def, p);
            strbuf b = {0};
            strbuf_printf(&b, "#/$defs/%s", def);
            char *ref = strbuf_take(&b);
            p = ref ? json_pack("{s:s}", "$ref", ref) : NULL;
            free(ref);
        }
        json_t *alt =
            json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s],s:b}", "type", "object", "properties", "name", "const",
                      tool_name(r->tools, i), args_key, p, "required", "name", args_key, "additionalProperties", 0);
        if (!alt || json_array_append_new(alts, alt)) {
            json_decref(alts);
            return NULL;
        }
    }
    if (!alts) return NULL;
    if (json_array_size(alts) == 1) {
        json_t *one = json_incref(json_array_get(alts, 0));
        json_decref(alts);
        return one;
    }
    return json_pack("{s:o}", "anyOf", alts);
}

/* The grammar a required or named tool_choice puts on the answer: one call (or, with
 * parallel_tool_calls, one or more) in the model's format. */
static sp_status tools_grammar(const srv_model_info *mi, srv_request *r, srv_error *err) {
    srv_tool_format f = mi->tool_format;
    /* a named function is called once; required calls as many as parallel_tool_calls allows */
    const bool one = !r->parallel_tool_calls || r->tool_choice == SRV_TOOL_CHOICE_NAMED;
    json_t *defs = json_object();
    json_t *call = defs ? call_schema(r, f, defs) : NULL;
    json_t *schema = NULL;
    if (call && f == SRV_TOOLS_GENERIC) {
        schema = json_pack("{s:s,s:{s:{s:s,s:O,s:i}},s:[s],s:b}", "type", "object", "properties", "tool_calls", "type",
                           "array", "items", call, "minItems", 1, "required", "tool_calls", "additionalProperties", 0);
        if (schema && one)
            json_object_set_new(json_object_get(json_object_get(schema, "properties"), "tool_calls"), "maxItems",
                                json_integer(1));
    } else if (call && f == SRV_TOOLS_MISTRAL) {
        schema = json_pack("{s:s,s:O,s:i}", "type", "array", "items", call, "minItems", 1);
        if (schema && one) json_object_set_new(schema, "maxItems", json_integer(1));
    } else if (call) {
        schema = json_incref(call);
    }
    json_decref(call);
    if (schema && json_object_size(defs) > 0) json_object_set(schema, "$defs", defs);
    json_decref(defs);
    if (!schema) return srv__fail(err, SRV_ERROR_INTERNAL, "tools", "out of memory building the tool-call grammar");
    gram_schema_options opt = gram_schema_options_default();
    if (mi->schema_max_depth > 0) opt.max_depth = mi->schema_max_depth;
    opt.compact = !mi->json_flexible;
    opt.root_name = "call";
    char *call_gbnf = NULL;
    sp_status st = gram_schema_to_gbnf(schema, &opt, &call_gbnf);
    json_decref(schema);
    if (st == SP_ERR_NOMEM) return srv__fail(err, SRV_ERROR_INTERNAL, "tools", "%s", sp_last_error());
    if (st != SP_OK)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "tools",
                         "'tools': a function's parameters cannot be enforced for tool_choice \"%s\": %s",
                         r->tool_choice == SRV_TOOL_CHOICE_NAMED ? r->tool_choice_name : "required", sp_last_error());
    strbuf g = {0};
    switch (f) {
    case SRV_TOOLS_HERMES:
        strbuf_printf(&g, "root ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"%s\n",
                      one ? "" : " (\"\\n<tool_call>\\n\" call \"\\n</tool_call>\")*");
        break;
    case SRV_TOOLS_LLAMA3: strbuf_printf(&g, "root ::= call\n"); break;
    case SRV_TOOLS_GENERIC:
    case SRV_TOOLS_MISTRAL: strbuf_printf(&g, "root ::= call\n"); break;
    }
    strbuf_append(&g, call_gbnf, strlen(call_gbnf));
    free(call_gbnf);
    char *text = strbuf_take(&g);
    if (!text) return srv__fail(err, SRV_ERROR_INTERNAL, "tools", "out of memory building the tool-call grammar");
    st = srv__compile_grammar(text, mi, r, "tools", err);
    free(text);
    return st;
}

sp_status srv__request_tools(const json_t *root, const srv_model_info *mi, srv_request *r, srv_error *err) {
    const json_t *tools = srv__field(root, "tools");
    const json_t *choice = srv__field(root, "tool_choice");
    const json_t *parallel = srv__field(root, "parallel_tool_calls");
    if (tools && !json_is_array(tools)) return srv__type_error(err, "tools", "an array", tools);
    for (size_t i = 0; tools && i < json_array_size(tools); i++) {
        sp_status st = tool_check(json_array_get(tools, i), i, err);
        if (st != SP_OK) return st;
        for (size_t j = 0; j < i; j++)
            if (strcmp(tool_name(tools, i), tool_name(tools, j)) == 0) {
                char param[64];
                snprintf(param, sizeof param, "tools[%zu].function.name", i);
                return srv__fail(err, SRV_ERROR_BAD_REQUEST, param, "'%s': the name '%s' is used by tools[%zu] too.",
                                 param, tool_name(tools, i), j);
            }
    }
    if (parallel && !json_is_boolean(parallel))
        return srv__type_error(err, "parallel_tool_calls", "a boolean", parallel);
    r->parallel_tool_calls = !parallel || json_is_true(parallel);
    size_t n_tools = tools ? json_array_size(tools) : 0;
    r->tool_choice = n_tools ? SRV_TOOL_CHOICE_AUTO : SRV_TOOL_CHOICE_NONE;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (strcmp(c, "none") == 0)
            r->tool_choice = SRV_TOOL_CHOICE_NONE;
        else if (strcmp(c, "auto") == 0)
            r->tool_choice = n_tools ? SRV_TOOL_CHOICE_AUTO : SRV_TOOL_CHOICE_NONE;
        else if (strcmp(c, "required") == 0)
            r->tool_choice = SRV_TOOL_CHOICE_REQUIRED;
        else
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "tool_choice",
                             "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                             "\"function\": {\"name\": ...}}, not \"%.64s\".",
                             c);
    } else if (json_is_object(choice)) {
        const json_t *name = json_object_get(json_object_get(choice, "function"), "name");
        if (!json_is_string(name))
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "tool_choice",
                             "'tool_choice' names a function as {\"type\": \"function\", \"function\": {\"name\": "
                             "...}}.");
        if (!tools || tool_find(tools, json_string_value(name), json_string_length(name)) < 0)
            return srv__fail(err, SRV_ERROR_BAD_REQUEST, "tool_choice",
                             "'tool_choice' names the function '%.64s', which is not in 'tools'.",
                             json_string_value(name));
        r->tool_choice = SRV_TOOL_CHOICE_NAMED;
        r->tool_choice_name = strdup(json_string_value(name));
        if (!r->tool_choice_name) return srv__fail(err, SRV_ERROR_INTERNAL, "tool_choice", "out of memory");
    } else if (choice) {
        return srv__type_error(err, "tool_choice", "a string or an object", choice);
    }
    if (r->tool_choice == SRV_TOOL_CHOICE_REQUIRED && n_tools == 0)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "tool_choice",
                         "'tool_choice' is \"required\" but the request has no 'tools'.");
    if (r->tool_choice == SRV_TOOL_CHOICE_NONE) return SP_OK;
    r->tools = json_incref((json_t *)tools);
    if (r->tool_choice == SRV_TOOL_CHOICE_AUTO) return SP_OK;
    if (r->params.grammar)
        return srv__fail(err, SRV_ERROR_BAD_REQUEST, "tool_choice",
                         "'tool_choice' \"required\" or a named function constrains the output, and so does "
                         "another field of the request: give one.");
    return tools_grammar(mi, r, err);
}

/* ---- the prompt ---- */

/* The generic format's instructions: a system block the model reads the tools from. */
static char *generic_instructions(const srv_request *r) {
    strbuf b = {0};
    strbuf_printf(&b, "You can call the following tools. Each is a JSON Schema of its arguments:\n");
    for (size_t i = 0; i < json_array_size(r->tools); i++) {
        const json_t *fn = tool_fn(r->tools, i);
        if (r->tool_choice == SRV_TOOL_CHOICE_NAMED && strcmp(tool_name(r->tools, i), r->tool_choice_name) != 0)
            continue;
        json_t *brief = json_pack("{s:s}", "name", tool_name(r->tools, i));
        const json_t *description = json_object_get(fn, "description"), *params = json_object_get(fn, "parameters");
        if (brief && json_is_string(description)) json_object_set(brief, "description", (json_t *)description);
        if (brief && json_is_object(params)) json_object_set(brief, "parameters", (json_t *)params);
        char *s = brief ? json_dumps(brief, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (s) strbuf_printf(&b, "%s\n", s);
        free(s);
        json_decref(brief);
    }
    strbuf_printf(&b, "To call tools, reply with only this JSON and nothing else:\n"
                      "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<its arguments>}}]}\n");
    if (r->tool_choice == SRV_TOOL_CHOICE_AUTO)
        strbuf_printf(&b, "If no tool is needed, answer normally.");
    else
        strbuf_printf(&b, "You must call a tool now.");
    return strbuf_take(&b);
}

sp_status srv__tools_adjust_context(const srv_model_info *mi, const srv_request *r, json_t *ctx, srv_error *err) {
    json_t *messages = json_object_get(ctx, "messages");
    if (!r->tools) { /* tool_choice none: the tools stay out of the prompt */
        return json_object_set_new(ctx, "tools", json_null())
                   ? srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory")
                   : SP_OK;
    }
    if (mi->template_renders_tools) return SP_OK;
    /* the template ignores tools: the generic format, in a system block of our own, and
     * earlier calls written back in it so the model sees what it called */
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *m = json_array_get(messages, i);
        const json_t *calls = json_object_get(m, "tool_calls");
        if (!json_is_array(calls) || json_array_size(calls) == 0) continue;
        json_t *list = json_array();
        for (size_t k = 0; list && k < json_array_size(calls); k++) {
            const json_t *fn = json_object_get(json_array_get(calls, k), "function");
            const json_t *args = json_object_get(fn, "arguments");
            json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), JSON_DECODE_ANY, NULL) : NULL;
            json_array_append_new(list, json_pack("{s:O?,s:o}", "name", json_object_get(fn, "name"), "arguments",
                                                  parsed ? parsed : json_object()));
        }
        json_t *wrapped = list ? json_pack("{s:o}", "tool_calls", list) : NULL;
        char *text = wrapped ? json_dumps(wrapped, JSON_COMPACT) : NULL;
        json_decref(wrapped);
        if (!text || json_object_set_new(m, "content", json_string(text))) {
            free(text);
            return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
        }
        free(text);
    }
    char *block = generic_instructions(r);
    if (!block) return srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory");
    json_t *first = json_array_get(messages, 0);
    const json_t *role = json_object_get(first, "role");
    int bad;
    if (json_is_string(role) && strcmp(json_string_value(role), "system") == 0 &&
        json_is_string(json_object_get(first, "content"))) {
        strbuf joined = {0};
        strbuf_printf(&joined, "%s\n\n%s", json_string_value(json_object_get(first, "content")), block);
        char *text = strbuf_take(&joined);
        bad = !text || json_object_set_new(first, "content", json_string(text));
        free(text);
    } else {
        bad = json_array_insert_new(messages, 0, json_pack("{s:s,s:s}", "role", "system", "content", block));
    }
    free(block);
    return bad ? srv__fail(err, SRV_ERROR_INTERNAL, NULL, "out of memory") : SP_OK;
}

/* ---- parsing the answer ---- */

/* A call {"name": N, key: {...}} of one of the request's tools, as OpenAI's tool_calls
 * entry; NULL when it is not one. */
static json_t *call_entry(const srv_request *r, const json_t *obj, const char *key) {
    const json_t *name = json_object_get(obj, "name");
    const json_t *args = json_object_get(obj, key);
    if (!args && strcmp(key, "parameters") == 0) args = json_object_get(obj, "arguments");
    if (!json_is_string(name) || !json_is_object(args)) return NULL;
    if (tool_find(r->tools, json_string_value(name), json_string_length(name)) < 0) return NULL;
    char *arguments = json_dumps(args, JSON_COMPACT);
    if (!arguments) return NULL;
    char id[32];
    snprintf(id, sizeof id, "call_%016llx", (unsigned long long)srv_random_u64());
    json_t *e = json_pack("{s:s,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name", name, "arguments",
                          arguments);
    free(arguments);
    return e;
}

/* Appends the calls of a JSON array of call objects; false when one is not a call. */
static bool calls_from_array(const srv_request *r, const json_t *arr, const char *key, json_t *out) {
    if (!json_is_array(arr) || json_array_size(arr) == 0) return false;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *e = call_entry(r, json_array_get(arr, i), key);
        if (!e || json_array_append_new(out, e)) return false;
    }
    return true;
}

static void trim(const char **s, size_t *n) {
    while (*n && (**s == ' ' || **s == '\n' || **s == '\t' || **s == '\r')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\n' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r')) (*n)--;
}

static bool starts_with(const char *s, size_t n, const char *prefix) {
    size_t p = strlen(prefix);
    return n >= p && memcmp(s, prefix, p) == 0;
}

/* The generic format: the whole answer (perhaps in a ```json fence) is the object. */
static bool parse_generic(const srv_request *r, const char *s, size_t n, json_t *out) {
    trim(&s, &n);
    if (starts_with(s, n, "```")) {
        const char *nl = memchr(s, '\n', n);
        if (!nl || n < 6 || memcmp(s + n - 3, "```", 3) != 0) return false;
        n = (size_t)(s + n - 3 - (nl + 1));
        s = nl + 1;
    }
    json_t *doc = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    bool ok = false;
    if (json_is_object(doc) && json_object_get(doc, "tool_calls"))
        ok = calls_from_array(r, json_object_get(doc, "tool_calls"), "arguments", out);
    else if (json_is_object(doc) && json_object_get(doc, "name")) {
        json_t *e = call_entry(r, doc, "arguments");
        ok = e && !json_array_append_new(out, e);
    }
    json_decref(doc);
    return ok;
}

/* Hermes: every <tool_call>...</tool_call> block is a call; the text around them is content. */
static bool parse_hermes(const srv_request *r, const char *s, size_t n, json_t *out, strbuf *content) {
    const char *end = s + n;
    bool any = false;
    while (s < end) {
        const char *open = memmem(s, (size_t)(end - s), "<tool_call>", 11);
        if (!open) break;
        strbuf_append(content, s, (size_t)(open - s));
        const char *body = open + 11;
        const char *close = memmem(body, (size_t)(end - body), "</tool_call>", 12);
        size_t len = close ? (size_t)(close - body) : (size_t)(end - body);
        json_t *doc = json_loadb(body, len, JSON_DECODE_ANY, NULL);
        json_t *e = json_is_object(doc) ? call_entry(r, doc, "arguments") : NULL;
        json_decref(doc);
        if (!e || json_array_append_new(out, e)) return false;
        any = true;
        s = close ? close + 12 : end;
    }
    if (s < end) strbuf_append(content, s, (size_t)(end - s));
    return any;
}

json_t *srv_tools_parse(const srv_model_info *mi, const srv_request *r, const char *text, size_t len, char **content) {
    *content = NULL;
    if (!r->tools) return NULL;
    json_t *out = json_array();
    strbuf rest = {0};
    bool ok = false;
    const char *s = text;
    size_t n = len;
    switch (mi->tool_format) {
    case SRV_TOOLS_GENERIC: ok = parse_generic(r, s, n, out); break;
    case SRV_TOOLS_HERMES: ok = parse_hermes(r, s, n, out, &rest); break;
    case SRV_TOOLS_LLAMA3: {
        trim(&s, &n);
        if (starts_with(s, n, "<|python_tag|>")) s += 14, n -= 14;
        json_t *doc = json_loadb(s, n, JSON_DECODE_ANY, NULL);
        json_t *e = json_is_object(doc) ? call_entry(r, doc, "parameters") : NULL;
        ok = e && !json_array_append_new(out, e);
        json_decref(doc);
        break;
    }
    case SRV_TOOLS_MISTRAL: {
        trim(&s, &n);
        if (starts_with(s, n, "[TOOL_CALLS]")) s += 12, n -= 12;
        json_t *doc = json_loadb(s, n, JSON_DECODE_ANY, NULL);
        ok = calls_from_array(r, doc, "arguments", out);
        json_decref(doc);
        break;
    }
    }
    if (!ok) {
        json_decref(out);
        free(rest.p);
        return NULL;
    }
    const char *c = rest.p ? rest.p : "";
    size_t cn = rest.len;
    trim(&c, &cn);
    if (cn > 0) *content = strndup(c, cn);
    free(rest.p);
    return out;
}

size_t srv_tools_hold_from(const srv_model_info *mi, const char *text, size_t len, bool flowed) {
    if (mi->tool_format == SRV_TOOLS_HERMES) { /* calls may follow text: hold from the first <tool_call> */
        static const char OPEN[] = "<tool_call>";
        const size_t n = sizeof OPEN - 1;
        const char *at = memmem(text, len, OPEN, n);
        if (at) return (size_t)(at - text);
        for (size_t k = n - 1; k > 0; k--) /* a tag cut at the end */
            if (len >= k && memcmp(text + len - k, OPEN, k) == 0) return len - k;
        return len;
    }
    if (flowed) return len; /* the other formats: the calls are the whole answer */
    size_t at = 0;
    while (at < len && (text[at] == ' ' || text[at] == '\n' || text[at] == '\t' || text[at] == '\r')) at++;
    if (at == len) return 0; /* only blanks so far: wait */
    const char *s = text + at;
    size_t n = len - at;
    bool may = false;
    switch (mi->tool_format) {
    case SRV_TOOLS_LLAMA3: may = s[0] == '{' || strncmp(s, "<|python_tag|>", n < 14 ? n : 14) == 0; break;
    case SRV_TOOLS_MISTRAL: may = s[0] == '[' || strncmp(s, "[TOOL_CALLS]", n < 12 ? n : 12) == 0; break;
    case SRV_TOOLS_GENERIC: may = s[0] == '{' || s[0] == '`'; break;
    case SRV_TOOLS_HERMES: break;
    }
    return may ? 0 : len;
}

/* ---- streaming forced calls as they are generated ---- */

static size_t skip_blank(const char *s, size_t n, size_t at) {
    while (at < n && (s[at] == ' ' || s[at] == '\n' || s[at] == '\t' || s[at] == '\r')) at++;
    return at;
}

/* The end (just past the closing quote) of the JSON string starting at s[at] == '"', or 0
 * when it is not complete yet. */
static size_t string_end(const char *s, size_t n, size_t at) {
    for (size_t i = at + 1; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return 0;
}

srv_call_event srv_tools_scan(srv_call_scan *sc, const char *text, size_t len, size_t *from, size_t *n) {
    if (!sc->in_args) {
        const char *p = memmem(text + sc->at, len - sc->at, "\"name\"", 6);
        if (!p) return SRV_CALL_WAIT;
        size_t i = skip_blank(text, len, (size_t)(p - text) + 6);
        if (i >= len) return SRV_CALL_WAIT;
        if (text[i] != ':') return SRV_CALL_LOST;
        i = skip_blank(text, len, i + 1);
        if (i >= len) return SRV_CALL_WAIT;
        if (text[i] != '"') return SRV_CALL_LOST;
        size_t name_end = string_end(text, len, i);
        if (!name_end) return SRV_CALL_WAIT;
        size_t name = i + 1, name_len = name_end - 1 - name;
        i = skip_blank(text, len, name_end);
        if (i >= len) return SRV_CALL_WAIT;
        if (text[i] != ',') return SRV_CALL_LOST;
        i = skip_blank(text, len, i + 1);
        static const char *const keys[] = {"\"arguments\"", "\"parameters\""};
        size_t k = 0;
        for (; k < 2; k++) {
            size_t kn = strlen(keys[k]);
            if (len - i < kn) {
                if (memcmp(text + i, keys[k], len - i) == 0) return SRV_CALL_WAIT;
                continue;
            }
            if (memcmp(text + i, keys[k], kn) == 0) break;
        }
        if (k == 2) return SRV_CALL_LOST;
        i = skip_blank(text, len, i + strlen(keys[k]));
        if (i >= len) return SRV_CALL_WAIT;
        if (text[i] != ':') return SRV_CALL_LOST;
        i = skip_blank(text, len, i + 1);
        if (i >= len) return SRV_CALL_WAIT;
        if (text[i] != '{') return SRV_CALL_LOST; /* arguments are an object (a string would never close) */
        sc->at = i;
        sc->in_args = true;
        sc->depth = 0;
        sc->in_str = sc->esc = false;
        *from = name;
        *n = name_len;
        return SRV_CALL_HEAD;
    }
    size_t i = sc->at;
    bool ended = false;
    for (; i < len && !ended; i++) {
        char c = text[i];
        if (sc->in_str) {
            if (sc->esc)
                sc->esc = false;
            else if (c == '\\')
                sc->esc = true;
            else if (c == '"')
                sc->in_str = false;
        } else if (c == '"') {
            sc->in_str = true;
        } else if (c == '{' || c == '[') {
            sc->depth++;
        } else if ((c == '}' || c == ']') && --sc->depth == 0) {
            ended = true;
        }
    }
    while (!ended && i > sc->at && i < len && ((unsigned char)text[i] & 0xC0) == 0x80) i--; /* whole characters */
    if (i == sc->at) return SRV_CALL_WAIT;
    *from = sc->at;
    *n = i - sc->at;
    sc->at = i;
    if (ended) sc->in_args = false;
    return SRV_CALL_ARGS;
}

json_t *srv__tools_scan_all(const char *text, size_t len) {
    srv_call_scan sc = {0};
    json_t *calls = json_array();
    strbuf args = {0};
    for (;;) {
        size_t from = 0, n = 0;
        srv_call_event ev = srv_tools_scan(&sc, text, len, &from, &n);
        if (ev == SRV_CALL_WAIT || ev == SRV_CALL_LOST) break;
        if (ev == SRV_CALL_HEAD) {
            char id[32];
            snprintf(id, sizeof id, "call_%016llx", (unsigned long long)srv_random_u64());
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s%,s:s}}", "id", id, "type", "function", "function",
                                                   "name", text + from, n, "arguments", ""));
        } else {
            json_t *fn = json_object_get(json_array_get(calls, json_array_size(calls) - 1), "function");
            const char *before = json_string_value(json_object_get(fn, "arguments"));
            args.len = 0;
            strbuf_append(&args, before ? before : "", before ? strlen(before) : 0);
            strbuf_append(&args, text + from, n);
            json_object_set_new(fn, "arguments", json_stringn(args.p ? args.p : "", args.len));
        }
    }
    free(strbuf_take(&args));
    if (json_array_size(calls) == 0) {
        json_decref(calls);
        return NULL;
    }
    return calls;
}

/* Whether s (n bytes) begins with prefix, or could still: 1 yes, 0 no, -1 too short. */
static int begins(const char *s, size_t n, const char *prefix) {
    size_t k = strlen(prefix);
    if (n < k) return memcmp(s, prefix, n) == 0 ? -1 : 0;
    return memcmp(s, prefix, k) == 0;
}

srv_auto_calls srv_tools_auto_start(const srv_model_info *mi, const srv_request *r, const char *text, size_t len) {
    size_t at = skip_blank(text, len, 0);
    if (at == len) return SRV_AUTO_WAIT;
    const char *s = text + at;
    size_t n = len - at;
    int opens = 1; /* the format's opener: <tool_call>, [TOOL_CALLS] or [, {"tool_calls": */
    switch (mi->tool_format) {
    case SRV_TOOLS_HERMES: opens = begins(s, n, "<tool_call>"); break;
    case SRV_TOOLS_MISTRAL: opens = s[0] == '[' ? 1 : 0; break;
    case SRV_TOOLS_LLAMA3: opens = s[0] == '{' || begins(s, n, "<|python_tag|>") != 0 ? 1 : 0; break;
    case SRV_TOOLS_GENERIC: {
        if (s[0] != '{') return SRV_AUTO_NO; /* a fenced block: decided when the answer ends */
        size_t k = skip_blank(s, n, 1);
        opens = k == n ? -1 : begins(s + k, n - k, "\"tool_calls\"");
        break;
    }
    }
    if (opens <= 0) return opens < 0 ? SRV_AUTO_WAIT : SRV_AUTO_NO;
    /* the first call's name, on a scan of its own: one of the request's tools? */
    srv_call_scan trial = {0};
    size_t from = 0, name_len = 0;
    switch (srv_tools_scan(&trial, text, len, &from, &name_len)) {
    case SRV_CALL_WAIT: return SRV_AUTO_WAIT;
    case SRV_CALL_HEAD: return tool_find(r->tools, text + from, name_len) >= 0 ? SRV_AUTO_START : SRV_AUTO_NO;
    default: return SRV_AUTO_NO;
    }
}

bool srv_tools_known(const srv_request *r, const char *name, size_t n) {
    return tool_find(r->tools, name, n) >= 0;
}

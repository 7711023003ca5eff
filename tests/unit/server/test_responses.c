/* test_responses.c: OpenAI's Responses API over chat (server/api/responses.c) and the store
 * behind previous_response_id and GET/DELETE /v1/responses/{id} (server/api/response_store.c).
 * The request tests run on stories260K (the ChatML fallback template, or a thinking one),
 * skipped with one line when it is absent; the rest need no model:
 *
 *   responses_request  bodies into the chat request: string input, message items,
 *                      function_call / function_call_output, instructions,
 *                      previous_response_id through a real store, max_output_tokens,
 *                      text.format, tools, tool_choice, reasoning, the echoed fields
 *   responses_refused  every refused field and wrong type a 400 (or 404) naming the
 *                      Responses field; chat's field names mapped back (rename_param)
 *   responses_render   a chat answer as a response object (items, status, usage), also
 *                      from scheduler outputs; store: true keeps it for its key only
 *   responses_stream   chat chunks into the exact Responses event sequence, numbered, and
 *                      the final response equal to the non-streaming one
 *   response_store     bounded by bytes, count and age (the `now` argument), per key,
 *                      delete, copies handed out, a NULL store; the bytes charged cover
 *                      what an entry holds in malloc; each key's share: a key past it or
 *                      holding the most evicts its own, never a smaller key's
 *
 * JSON literals here are written with ' for " (jq below). */
#include <criterion/criterion.h>
#include <malloc.h>

#include "server/api/response_store.c"
#include "server/api/responses.c"
#include "tests/unit/server/openai_fixture.h"

/* ---- the request ---- */

enum { TENANT = 7, OTHER_TENANT = 8 };

/* stories260K (ChatML fallback) with a store of 1 MB, 100 entries, an hour. */
static void fixture_responses(void) {
    fixture_stories(NULL);
    cr_assert_eq(srv_response_store_create(1 << 20, 100, 3600, &fx.mi.responses), SP_OK);
}

/* A template that thinks (</think> in its source: reasoning_tags). */
static const char THINKING_TEMPLATE[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}";

static void fixture_thinking(void) {
    fixture_stories_source(THINKING_TEMPLATE);
    cr_assert(fx.mi.reasoning_tags);
    cr_assert_eq(srv_response_store_create(1 << 20, 100, 3600, &fx.mi.responses), SP_OK);
}

/* body (' for ") through srv__responses_parse; the status, with *r and *err filled. */
static sp_status parse_as(const char *body, uint64_t tenant, srv_request *r, srv_error *err) {
    json_t *j = jq(body);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    sp_status st = srv__responses_parse(text, strlen(text), &fx.mi, tenant, r, err);
    free(text);
    return st;
}

static void parse_ok(const char *body, srv_request *r) {
    srv_error err;
    sp_status st = parse_as(body, TENANT, r, &err);
    cr_assert_eq(st, SP_OK, "%s: %s (param %s)", body, err.message, err.param);
    cr_assert_eq(r->api, SRV_ENDPOINT_RESPONSES);
    cr_assert_eq(r->endpoint, SRV_ENDPOINT_CHAT);
}

static const json_t *conversation_of(const srv_request *r) {
    return json_object_get(r->api_fields, "conversation");
}

static const json_t *echo_of(const srv_request *r) {
    return json_object_get(r->api_fields, "echo");
}

/* Whether the strings appear in the prompt in this order. */
static bool prompt_has_in_order(const srv_request *r, const char *const *parts, size_t n) {
    const char *at = r->prompt_text;
    for (size_t i = 0; i < n; i++) {
        at = strstr(at, parts[i]);
        if (!at) return false;
        at += strlen(parts[i]);
    }
    return true;
}

Test(responses_request, a_string_input_is_one_user_message, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'input':'Hello there'}", &r);
    expect_json(conversation_of(&r), "[{'role':'user','content':'Hello there'}]");
    cr_expect_str_eq(r.prompt_text, "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n");
    cr_expect_eq(r.n, 1);
    cr_expect_eq(r.n_prompts, 1);
    cr_expect(!r.stream);
    cr_expect(json_is_true(json_object_get(r.api_fields, "store")));
    cr_expect(json_is_false(json_object_get(r.api_fields, "summary")));
    /* the defaults a response echoes; temperature and top_p are the values used */
    sample_params used = sample_params_default();
    json_t *echo = json_deep_copy(echo_of(&r));
    cr_expect_float_eq(json_number_value(json_object_get(echo, "temperature")), used.temperature, 1e-6);
    cr_expect_float_eq(json_number_value(json_object_get(echo, "top_p")), used.top_p, 1e-6);
    json_object_del(echo, "temperature");
    json_object_del(echo, "top_p");
    expect_json(echo, "{'model':'stories260K','instructions':null,'max_output_tokens':null,'tools':[],"
                      "'tool_choice':'auto','parallel_tool_calls':true,'previous_response_id':null,'store':true,"
                      "'metadata':{},'truncation':'disabled','text':{'format':{'type':'text'}},"
                      "'reasoning':{'effort':null,'summary':null}}");
    json_decref(echo);
    /* the context is what the prompt leaves */
    cr_expect_eq(r.max_tokens[0], fx.mi.max_seq_len - r.prompt_lens[0]);
    srv_request_free(&r);
}

/* The server's sampling defaults are what a request without its own gets, and echoes
 * (at float precision: 0.2, not 0.200000003). */
Test(responses_request, echoes_the_servers_sampling_defaults, .init = fixture_responses, .fini = fixture_close) {
    sample_params defaults = sample_params_default();
    defaults.temperature = 0.2f;
    defaults.top_p = 0.9f;
    fx.mi.sampling_defaults = &defaults;
    srv_request r;
    parse_ok("{'input':'hi'}", &r);
    cr_expect_float_eq(r.params.sampling.temperature, 0.2f, 1e-6);
    cr_expect_float_eq(r.params.sampling.top_p, 0.9f, 1e-6);
    cr_expect(json_real_value(json_object_get(echo_of(&r), "temperature")) == 0.2);
    cr_expect(json_real_value(json_object_get(echo_of(&r), "top_p")) == 0.9);
    srv_request_free(&r);
    /* the request's own win */
    parse_ok("{'input':'hi','temperature':0.7}", &r);
    cr_expect(json_number_value(json_object_get(echo_of(&r), "temperature")) == 0.7);
    cr_expect(json_real_value(json_object_get(echo_of(&r), "top_p")) == 0.9);
    srv_request_free(&r);
    fx.mi.sampling_defaults = NULL;
}

Test(responses_request, message_items_become_chat_messages, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'input':[{'role':'user','content':[{'type':'input_text','text':'first'},"
             "{'type':'input_text','text':'second'}]},"
             "{'type':'message','role':'assistant','content':[{'type':'output_text','text':'answer',"
             "'annotations':[]}]},"
             "{'type':'reasoning','id':'rs_1','summary':[]},"
             "{'role':'developer','content':'be terse'},"
             "{'role':'system','content':[{'type':'input_text','text':'sys'}]},"
             "{'role':'assistant','content':[{'type':'refusal','refusal':'no'}]},"
             "{'type':'message','role':'user','content':'again'}]}",
             &r);
    expect_json(conversation_of(&r), "[{'role':'user','content':'first\\nsecond'},"
                                     "{'role':'assistant','content':'answer'},"
                                     "{'role':'developer','content':'be terse'},"
                                     "{'role':'system','content':'sys'},"
                                     "{'role':'assistant','content':'no'},"
                                     "{'role':'user','content':'again'}]");
    const char *order[] = {"user\nfirst\nsecond", "assistant\nanswer", "developer\nbe terse",
                           "system\nsys",         "assistant\nno",     "user\nagain"};
    cr_expect(prompt_has_in_order(&r, order, sizeof order / sizeof order[0]), "%s", r.prompt_text);
    srv_request_free(&r);
}

#define TOOL                                                                                             \
    "{'type':'function','name':'get_weather','description':'The weather','parameters':{'type':'object'," \
    "'properties':{'city':{'type':'string'}},'required':['city']}}"
#define CHAT_TOOL                                                                                           \
    "{'type':'function','function':{'name':'get_weather','description':'The weather','parameters':{'type':" \
    "'object','properties':{'city':{'type':'string'}},'required':['city']}}}"

Test(responses_request, function_calls_and_outputs_become_tool_calls_and_tool_messages, .init = fixture_responses,
     .fini = fixture_close) {
    srv_request r;
    parse_ok("{'input':[{'role':'user','content':'Weather?'},"
             "{'type':'function_call','call_id':'call_1','name':'get_weather','arguments':'{\\'city\\':\\'Paris\\'}'},"
             "{'type':'function_call','call_id':'call_2','name':'get_weather','arguments':'{}','id':'fc_2',"
             "'status':'completed'},"
             "{'type':'function_call_output','call_id':'call_1','output':'Sunny'},"
             "{'type':'function_call_output','call_id':'call_2','output':[{'type':'input_text','text':'Rain'}]},"
             "{'role':'assistant','content':'Let me look again.'},"
             "{'type':'function_call','call_id':'call_3','name':'get_weather','arguments':'{}'},"
             "{'type':'function_call_output','call_id':'call_3','output':'Snow'}]}",
             &r);
    /* a turn's calls are one assistant message; a call after the assistant's text joins it */
    expect_json(conversation_of(&r),
                "[{'role':'user','content':'Weather?'},"
                "{'role':'assistant','content':null,'tool_calls':["
                "{'id':'call_1','type':'function','function':{'name':'get_weather','arguments':"
                "'{\\'city\\':\\'Paris\\'}'}},"
                "{'id':'call_2','type':'function','function':{'name':'get_weather','arguments':'{}'}}]},"
                "{'role':'tool','tool_call_id':'call_1','content':'Sunny'},"
                "{'role':'tool','tool_call_id':'call_2','content':'Rain'},"
                "{'role':'assistant','content':'Let me look again.','tool_calls':["
                "{'id':'call_3','type':'function','function':{'name':'get_weather','arguments':'{}'}}]},"
                "{'role':'tool','tool_call_id':'call_3','content':'Snow'}]");
    const char *order[] = {"Weather?", "tool\nSunny", "tool\nRain", "Let me look again.", "tool\nSnow"};
    cr_expect(prompt_has_in_order(&r, order, sizeof order / sizeof order[0]), "%s", r.prompt_text);
    srv_request_free(&r);
}

Test(responses_request, instructions_lead_and_are_not_kept, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'instructions':'INSTR-TEXT','input':'hi'}", &r);
    cr_expect_str_eq(r.prompt_text, "<|im_start|>system\nINSTR-TEXT<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                    "<|im_start|>assistant\n");
    expect_json(conversation_of(&r), "[{'role':'user','content':'hi'}]");
    cr_expect_str_eq(json_string_value(json_object_get(echo_of(&r), "instructions")), "INSTR-TEXT");
    srv_request_free(&r);
    /* null is no instructions */
    parse_ok("{'instructions':null,'input':'hi'}", &r);
    cr_expect(strstr(r.prompt_text, "system") == NULL, "%s", r.prompt_text);
    srv_request_free(&r);
}

/* A stored turn: the response object and its conversation, for tenant. */
static void store_turn(const char *id, uint64_t tenant, const char *conversation) {
    json_t *response = json_pack("{s:s,s:s}", "id", id, "object", "response");
    cr_assert(srv__store_put(fx.mi.responses, id, tenant, response, jq(conversation), sched_now()));
}

Test(responses_request, previous_response_id_continues_the_stored_conversation, .init = fixture_responses,
     .fini = fixture_close) {
    store_turn("resp_prev", TENANT,
               "[{'role':'user','content':'EARLIER-QUESTION'},{'role':'assistant','content':'EARLIER-ANSWER'}]");
    srv_request r;
    parse_ok("{'previous_response_id':'resp_prev','instructions':'NEW-INSTR','input':'NEXT-QUESTION'}", &r);
    const char *order[] = {"system\nNEW-INSTR", "user\nEARLIER-QUESTION", "assistant\nEARLIER-ANSWER",
                           "user\nNEXT-QUESTION"};
    cr_expect(prompt_has_in_order(&r, order, sizeof order / sizeof order[0]), "%s", r.prompt_text);
    expect_json(conversation_of(&r), "[{'role':'user','content':'EARLIER-QUESTION'},"
                                     "{'role':'assistant','content':'EARLIER-ANSWER'},"
                                     "{'role':'user','content':'NEXT-QUESTION'}]");
    cr_expect_str_eq(json_string_value(json_object_get(echo_of(&r), "previous_response_id")), "resp_prev");
    srv_request_free(&r);
    /* the stored conversation is unchanged by the continuation */
    json_t *conversation = NULL;
    cr_assert(srv__store_get(fx.mi.responses, "resp_prev", TENANT, NULL, &conversation, sched_now()));
    cr_expect_eq(json_array_size(conversation), 2);
    json_decref(conversation);
}

Test(responses_request, previous_response_id_missing_or_another_keys_is_a_404, .init = fixture_responses,
     .fini = fixture_close) {
    store_turn("resp_mine", TENANT, "[{'role':'user','content':'a'},{'role':'assistant','content':'b'}]");
    const struct {
        const char *body;
        uint64_t tenant;
    } cases[] = {
        {"{'previous_response_id':'resp_mine','input':'hi'}", OTHER_TENANT},
        {"{'previous_response_id':'resp_never','input':'hi'}", TENANT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_request r;
        srv_error err;
        cr_assert_neq(parse_as(cases[i].body, cases[i].tenant, &r, &err), SP_OK, "%s", cases[i].body);
        cr_expect_eq(err.http_status, 404, "%s", cases[i].body);
        cr_expect_str_eq(err.param, "previous_response_id");
        cr_expect(strstr(err.message, "resp_") != NULL, "%s", err.message);
    }
    /* deleted: gone */
    cr_assert(srv__store_delete(fx.mi.responses, "resp_mine", TENANT, sched_now()));
    srv_request r;
    srv_error err;
    cr_expect_neq(parse_as("{'previous_response_id':'resp_mine','input':'hi'}", TENANT, &r, &err), SP_OK);
    cr_expect_eq(err.http_status, 404);
    /* a server that keeps nothing finds nothing */
    srv_response_store_destroy(fx.mi.responses);
    fx.mi.responses = NULL;
    cr_expect_neq(parse_as("{'previous_response_id':'resp_mine','input':'hi'}", TENANT, &r, &err), SP_OK);
    cr_expect_eq(err.http_status, 404);
    cr_expect_str_eq(err.param, "previous_response_id");
}

Test(responses_request, max_output_tokens_is_the_max_tokens, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'input':'hi','max_output_tokens':7}", &r);
    cr_expect_eq(r.max_tokens[0], 7);
    cr_expect_eq(r.params.max_tokens, 7);
    cr_expect_eq(json_integer_value(json_object_get(echo_of(&r), "max_output_tokens")), 7);
    srv_request_free(&r);
}

Test(responses_request, text_format_constrains_the_output, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    const char *schema_body = "{'input':'hi','text':{'format':{'type':'json_schema','name':'person','strict':true,"
                              "'schema':{'type':'object','properties':{'name':{'type':'string'}},"
                              "'required':['name']}}}}";
    parse_ok(schema_body, &r);
    cr_expect_not_null(r.params.grammar);
    /* text is echoed as given */
    expect_json(json_object_get(echo_of(&r), "text"),
                "{'format':{'type':'json_schema','name':'person','strict':true,'schema':{'type':'object',"
                "'properties':{'name':{'type':'string'}},'required':['name']}}}");
    srv_request_free(&r);
    parse_ok("{'input':'hi','text':{'format':{'type':'json_object'}}}", &r);
    cr_expect_not_null(r.params.grammar);
    srv_request_free(&r);
    parse_ok("{'input':'hi','text':{'format':{'type':'text'},'verbosity':'medium'}}", &r);
    cr_expect_null(r.params.grammar);
    srv_request_free(&r);
}

Test(responses_request, function_tools_and_each_tool_choice, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    /* null fields are left out; strict is kept */
    parse_ok("{'input':'hi','tools':[{'type':'function','name':'get_weather','description':null,'strict':true,"
             "'parameters':{'type':'object'}}]}",
             &r);
    expect_json(r.tools, "[{'type':'function','function':{'name':'get_weather','strict':true,"
                         "'parameters':{'type':'object'}}}]");
    cr_expect_eq(r.tool_choice, SRV_TOOL_CHOICE_AUTO);
    cr_expect_null(r.params.grammar);
    cr_expect(strstr(r.prompt_text, "get_weather") != NULL, "%s", r.prompt_text);
    srv_request_free(&r);

    parse_ok("{'input':'hi','tools':[" TOOL "]}", &r);
    expect_json(r.tools, "[" CHAT_TOOL "]");
    srv_request_free(&r);

    parse_ok("{'input':'hi','tools':[" TOOL "],'tool_choice':'required'}", &r);
    cr_expect_eq(r.tool_choice, SRV_TOOL_CHOICE_REQUIRED);
    cr_expect_not_null(r.params.grammar);
    srv_request_free(&r);

    parse_ok("{'input':'hi','tools':[" TOOL "],'tool_choice':{'type':'function','name':'get_weather'},"
             "'parallel_tool_calls':false}",
             &r);
    cr_expect_eq(r.tool_choice, SRV_TOOL_CHOICE_NAMED);
    cr_expect_str_eq(r.tool_choice_name, "get_weather");
    cr_expect(!r.parallel_tool_calls);
    cr_expect_not_null(r.params.grammar);
    expect_json(json_object_get(echo_of(&r), "tool_choice"), "{'type':'function','name':'get_weather'}");
    cr_expect(json_is_false(json_object_get(echo_of(&r), "parallel_tool_calls")));
    srv_request_free(&r);

    parse_ok("{'input':'hi','tools':[" TOOL "],'tool_choice':'none'}", &r);
    cr_expect_eq(r.tool_choice, SRV_TOOL_CHOICE_NONE);
    cr_expect_null(r.tools);
    cr_expect(strstr(r.prompt_text, "get_weather") == NULL, "%s", r.prompt_text);
    srv_request_free(&r);
}

Test(responses_request, sampling_stream_store_and_reasoning, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'input':'hi','temperature':0.25,'top_p':0.5,'seed':42,'user':'u','stream':true,'store':false,"
             "'reasoning':{'effort':'low','summary':'auto'},'metadata':{'k':'v'}}",
             &r);
    cr_expect_float_eq(r.params.sampling.temperature, 0.25f, 1e-6);
    cr_expect_float_eq(r.params.sampling.top_p, 0.5f, 1e-6);
    cr_expect(r.seed_given);
    cr_expect_eq(r.params.sampling.seed, 42u);
    /* a stream always ends with the usage the last event carries */
    cr_expect(r.stream && r.include_usage);
    cr_expect(json_is_false(json_object_get(r.api_fields, "store")));
    cr_expect(json_is_true(json_object_get(r.api_fields, "summary")));
    expect_json(echo_of(&r), "{'model':'stories260K','instructions':null,'max_output_tokens':null,'temperature':0.25,"
                             "'top_p':0.5,'tools':[],'tool_choice':'auto','parallel_tool_calls':true,"
                             "'previous_response_id':null,'store':false,'metadata':{'k':'v'},'truncation':'disabled',"
                             "'text':{'format':{'type':'text'}},'reasoning':{'effort':'low','summary':'auto'}}");
    srv_request_free(&r);
    /* effort alone asks for no summary */
    parse_ok("{'input':'hi','reasoning':{'effort':'high'}}", &r);
    cr_expect(json_is_false(json_object_get(r.api_fields, "summary")));
    srv_request_free(&r);
}

/* Values of refused fields that change nothing are accepted. */
Test(responses_request, neutral_values_of_refused_fields_are_accepted, .init = fixture_responses,
     .fini = fixture_close) {
    const char *bodies[] = {
        "{'input':'hi','top_logprobs':0}",
        "{'input':'hi','background':false}",
        "{'input':'hi','truncation':'disabled'}",
        "{'input':'hi','include':[]}",
        "{'input':'hi','include':['reasoning.encrypted_content']}",
        "{'input':'hi','conversation':null,'prompt':null,'max_tool_calls':null}",
        "{'input':'hi','text':{'verbosity':'medium'}}",
        "{'input':'hi','service_tier':'auto','parallel_tool_calls':true}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        srv_request r;
        srv_error err;
        sp_status st = parse_as(bodies[i], TENANT, &r, &err);
        cr_expect_eq(st, SP_OK, "%s: %s (param %s)", bodies[i], err.message, err.param);
        if (st == SP_OK) srv_request_free(&r);
    }
}

/* ---- refusals ---- */

typedef struct bad_body {
    const char *body;
    const char *param;
    int status;
} bad_body;

#define FCALL(extra) "{'input':[{'type':'function_call'" extra "}]}"
static const bad_body BAD[] = {
    /* refused: each would change the answer (a 400 naming it) */
    {"{'input':'hi','conversation':'conv_1'}", "conversation", 400},
    {"{'input':'hi','conversation':{'id':'conv_1'}}", "conversation", 400},
    {"{'input':'hi','prompt':{'id':'pmpt_1'}}", "prompt", 400},
    {"{'input':'hi','max_tool_calls':3}", "max_tool_calls", 400},
    {"{'input':'hi','top_logprobs':5}", "top_logprobs", 400},
    {"{'input':'hi','background':true}", "background", 400},
    {"{'input':'hi','truncation':'auto'}", "truncation", 400},
    {"{'input':'hi','truncation':5}", "truncation", 400},
    {"{'input':'hi','include':['message.output_text.logprobs']}", "include", 400},
    {"{'input':'hi','include':['file_search_call.results']}", "include", 400},
    {"{'input':'hi','include':[5]}", "include", 400},
    {"{'input':'hi','include':'reasoning.encrypted_content'}", "include", 400},
    {"{'input':'hi','text':{'verbosity':'high'}}", "text.verbosity", 400},
    /* built-in tools */
    {"{'input':'hi','tools':[{'type':'web_search'}]}", "tools[0]", 400},
    {"{'input':'hi','tools':[" TOOL ",{'type':'file_search','vector_store_ids':['vs_1']}]}", "tools[1]", 400},
    {"{'input':'hi','tools':[{'type':'code_interpreter','container':{'type':'auto'}}]}", "tools[0]", 400},
    {"{'input':'hi','tools':[{'type':'mcp','server_label':'x'}]}", "tools[0]", 400},
    {"{'input':'hi','tools':[{'name':'f'}]}", "tools[0]", 400},
    {"{'input':'hi','tools':[5]}", "tools[0]", 400},
    {"{'input':'hi','tools':{}}", "tools", 400},
    /* images, files, audio */
    {"{'input':[{'role':'user','content':[{'type':'input_image','image_url':'https://x/y.png'}]}]}",
     "input[0].content[0]", 400},
    {"{'input':[{'role':'user','content':[{'type':'input_text','text':'a'},{'type':'input_file','file_id':'f'}]}]}",
     "input[0].content[1]", 400},
    {"{'input':[{'role':'user','content':[{'type':'input_audio','input_audio':{}}]}]}", "input[0].content[0]", 400},
    {"{'input':[{'role':'user','content':[{'text':'a'}]}]}", "input[0].content[0]", 400},
    {"{'input':[{'role':'user','content':[{'type':'input_text'}]}]}", "input[0].content[0]", 400},
    {"{'input':[{'role':'user','content':[{'type':'input_text','text':5}]}]}", "input[0].content[0]", 400},
    {"{'input':[{'role':'user','content':['a']}]}", "input[0].content[0]", 400},
    {"{'input':[{'role':'assistant','content':[{'type':'refusal'}]}]}", "input[0].content[0]", 400},
    /* items */
    {"{'input':[{'type':'item_reference','id':'msg_1'}]}", "input[0]", 400},
    {"{'input':[{'role':'user','content':'a'},{'type':'web_search_call','id':'ws_1'}]}", "input[1]", 400},
    {"{'input':[{'type':'input_image','image_url':'https://x/y.png'}]}", "input[0]", 400},
    {"{'input':[{'type':5,'role':'user','content':'a'}]}", "input[0]", 400},
    {"{'input':[5]}", "input[0]", 400},
    {"{'input':['hi']}", "input[0]", 400},
    {"{'input':5}", "input", 400},
    {"{'input':{'role':'user','content':'hi'}}", "input", 400},
    {"{'input':null}", "input", 400},
    {"{'instructions':'be brief'}", "input", 400},
    {"{'input':[{'content':'a'}]}", "input[0].role", 400},
    {"{'input':[{'role':'tool','content':'a'}]}", "input[0].role", 400},
    {"{'input':[{'role':5,'content':'a'}]}", "input[0].role", 400},
    {"{'input':[{'role':'user'}]}", "input[0].content", 400},
    {"{'input':[{'role':'user','content':5}]}", "input[0].content", 400},
    {"{'input':[{'role':'user','content':{'type':'input_text','text':'a'}}]}", "input[0].content", 400},
    {FCALL(",'name':'f','arguments':'{}'"), "input[0].call_id", 400},
    {FCALL(",'call_id':5,'name':'f','arguments':'{}'"), "input[0].call_id", 400},
    {FCALL(",'call_id':'c','arguments':'{}'"), "input[0].name", 400},
    {FCALL(",'call_id':'c','name':'f'"), "input[0].arguments", 400},
    {FCALL(",'call_id':'c','name':'f','arguments':{}"), "input[0].arguments", 400},
    {"{'input':[{'type':'function_call_output','output':'x'}]}", "input[0].call_id", 400},
    {"{'input':[{'type':'function_call_output','call_id':'c'}]}", "input[0].output", 400},
    {"{'input':[{'type':'function_call_output','call_id':'c','output':5}]}", "input[0].output", 400},
    {"{'input':[{'type':'function_call_output','call_id':'c','output':[{'type':'input_image'}]}]}",
     "input[0].output[0]", 400},
    /* the other fields */
    {"{'input':'hi','instructions':5}", "instructions", 400},
    {"{'input':'hi','instructions':['a']}", "instructions", 400},
    {"{'input':'hi','previous_response_id':5}", "previous_response_id", 400},
    {"{'input':'hi','store':'yes'}", "store", 400},
    {"{'input':'hi','text':'json'}", "text", 400},
    {"{'input':'hi','text':{'format':{}}}", "text.format.type", 400},
    {"{'input':'hi','text':{'format':{'type':5}}}", "text.format.type", 400},
    {"{'input':'hi','text':{'format':{'type':'xml'}}}", "text.format.type", 400},
    {"{'input':'hi','reasoning':'high'}", "reasoning", 400},
    {"{'input':'hi','tool_choice':{'type':'file_search'}}", "tool_choice", 400},
    {"{'input':'hi','tools':[" TOOL "],'tool_choice':{'type':'function'}}", "tool_choice", 400},
    {"{'input':'hi','tools':[" TOOL "],'tool_choice':5}", "tool_choice", 400},
    /* checked by chat under the same name */
    {"{'input':'hi','tool_choice':'required'}", "tool_choice", 400},
    {"{'input':'hi','tools':[" TOOL "],'tool_choice':'sometimes'}", "tool_choice", 400},
    {"{'input':'hi','tools':[" TOOL "],'tool_choice':{'type':'function','name':'nope'}}", "tool_choice", 400},
    {"{'input':'hi','tools':[" TOOL "],'parallel_tool_calls':'yes'}", "parallel_tool_calls", 400},
    {"{'input':'hi','temperature':3}", "temperature", 400},
    {"{'input':'hi','temperature':'hot'}", "temperature", 400},
    {"{'input':'hi','top_p':0}", "top_p", 400},
    {"{'input':'hi','seed':'x'}", "seed", 400},
    {"{'input':'hi','stream':'yes'}", "stream", 400},
    {"{'input':'hi','user':5}", "user", 400},
    {"{'input':'hi','model':5}", "model", 400},
    {"{'input':'hi','model':'gpt-4o'}", "model", 404},
    /* chat's names mapped back to the Responses ones */
    {"{'input':'hi','max_output_tokens':0}", "max_output_tokens", 400},
    {"{'input':'hi','max_output_tokens':'5'}", "max_output_tokens", 400},
    {"{'input':'hi','max_output_tokens':100000}", "input", 400},
};

Test(responses_refused, every_refusal_names_the_field, .init = fixture_responses, .fini = fixture_close) {
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        srv_request r;
        srv_error err;
        sp_status st = parse_as(BAD[i].body, TENANT, &r, &err);
        cr_expect(st != SP_OK, "accepted: %s", BAD[i].body);
        if (st == SP_OK) {
            srv_request_free(&r);
            continue;
        }
        cr_expect_eq(err.http_status, BAD[i].status, "%s: %d %s", BAD[i].body, err.http_status, err.message);
        cr_expect_str_eq(err.param, BAD[i].param, "%s: %s", BAD[i].body, err.message);
        /* the out-parameter holds nothing to free */
        cr_expect_null(r.api_fields, "%s", BAD[i].body);
        cr_expect_null(r.prompts, "%s", BAD[i].body);
        /* the message speaks the Responses API's words */
        cr_expect(strstr(err.message, "max_completion_tokens") == NULL, "%s", err.message);
        cr_expect(strstr(err.message, "response_format") == NULL, "%s", err.message);
    }
}

Test(responses_refused, not_json_and_not_an_object, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    srv_error err;
    cr_expect_neq(srv__responses_parse("{", 1, &fx.mi, TENANT, &r, &err), SP_OK);
    cr_expect_eq(err.http_status, 400);
    cr_expect_neq(srv__responses_parse("[]", 2, &fx.mi, TENANT, &r, &err), SP_OK);
    cr_expect_eq(err.http_status, 400);
}

Test(responses_refused, chat_names_are_mapped_in_param_and_message, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    srv_error err;
    cr_assert_neq(parse_as("{'input':'hi','max_output_tokens':0}", TENANT, &r, &err), SP_OK);
    cr_expect_str_eq(err.param, "max_output_tokens");
    cr_expect(strstr(err.message, "'max_output_tokens'") != NULL, "%s", err.message);
    /* past the context: the input is what is too long */
    cr_assert_neq(parse_as("{'input':'hi','max_output_tokens':100000}", TENANT, &r, &err), SP_OK);
    cr_expect_str_eq(err.param, "input");
    cr_expect_str_eq(err.code, "context_length_exceeded");
    fx.mi.max_seq_len = 8;
    cr_assert_neq(parse_as("{'input':'one two three four five six seven eight nine ten'}", TENANT, &r, &err), SP_OK);
    cr_expect_str_eq(err.param, "input");
    cr_expect_str_eq(err.code, "context_length_exceeded");
}

/* rename_param itself: each chat name, in param and quoted in the message. */
Test(responses_refused, rename_param_maps_each_chat_name) {
    const struct {
        const char *param, *message, *want_param, *want_message;
    } cases[] = {
        {"max_completion_tokens", "Invalid 'max_completion_tokens': below 1.", "max_output_tokens",
         "Invalid 'max_output_tokens': below 1."},
        {"max_tokens", "Invalid type for 'max_tokens': expected an integer.", "max_output_tokens",
         "Invalid type for 'max_output_tokens': expected an integer."},
        {"response_format.type", "'response_format.type' must be \"text\".", "text.format.type",
         "'text.format.type' must be \"text\"."},
        {"response_format", "Invalid 'response_format'.", "text.format", "Invalid 'text.format'."},
        /* text.format is flat: chat's json_schema level is gone */
        {"response_format.json_schema.schema", "'response_format.json_schema.schema' is required.",
         "text.format.schema", "'text.format.schema' is required."},
        {"response_format.json_schema", "'response_format.json_schema' is required.", "text.format",
         "'text.format' is required."},
        {"reasoning_effort", "Invalid type for 'reasoning_effort'.", "reasoning.effort",
         "Invalid type for 'reasoning.effort'."},
        /* so are function tools: chat's function level is gone */
        {"tools[0].function.name", "'tools[0].function.name' must be 1 to 64 letters.", "tools[0].name",
         "'tools[0].name' must be 1 to 64 letters."},
        {"tools[12].function.parameters", "Invalid type for 'tools[12].function.parameters'.", "tools[12].parameters",
         "Invalid type for 'tools[12].parameters'."},
        {"tools[1].function.name", "'tools[1].function.name': the name 'f' is used by tools[0] too.", "tools[1].name",
         "'tools[1].name': the name 'f' is used by tools[0] too."},
        {"tools[0].functionx", "x", "tools[0].functionx", "x"},
        {"tools[0].function_name", "x", "tools[0].function_name", "x"},
        {"messages", "Invalid 'messages': too long.", "input", "Invalid 'input': too long."},
        {"messages[2].content", "Missing required parameter: 'messages[2].content'.", "input[2].content",
         "Missing required parameter: 'input[2].content'."},
        /* other names, and names that only start like one, stay */
        {"temperature", "Invalid 'temperature'.", "temperature", "Invalid 'temperature'."},
        {"max_tokens_hint", "x", "max_tokens_hint", "x"},
        {"messagesx", "x", "messagesx", "x"},
        {"", "no param", "", "no param"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_error err;
        srv_error_make(&err, SRV_ERROR_BAD_REQUEST, cases[i].param, "%s", cases[i].message);
        rename_param(&err);
        cr_expect_str_eq(err.param, cases[i].want_param, "%s", cases[i].param);
        cr_expect_str_eq(err.message, cases[i].want_message, "%s", cases[i].param);
    }
}

/* Chat errors on fields whose path differs in the Responses API name the client's path:
 * text.format's schema is response_format.json_schema.schema in chat, a function tool's
 * name tools[i].function.name, reasoning.effort reasoning_effort. */
Test(responses_refused, nested_chat_paths_are_named_as_the_responses_body_has_them, .init = fixture_responses,
     .fini = fixture_close) {
    static const bad_body nested[] = {
        {"{'input':'hi','text':{'format':{'type':'json_schema','name':'x'}}}", "text.format.schema", 400},
        {"{'input':'hi','text':{'format':{'type':'json_schema','name':'x','schema':{},'strict':'yes'}}}",
         "text.format.strict", 400},
        {"{'input':'hi','tools':[{'type':'function','parameters':{}}]}", "tools[0].name", 400},
        {"{'input':'hi','tools':[{'type':'function','name':'a b'}]}", "tools[0].name", 400},
        {"{'input':'hi','tools':[{'type':'function','name':'f','parameters':'x'}]}", "tools[0].parameters", 400},
        {"{'input':'hi','tools':[" TOOL "," TOOL "]}", "tools[1].name", 400},
        {"{'input':'hi','reasoning':{'effort':5}}", "reasoning.effort", 400},
    };
    for (size_t i = 0; i < sizeof nested / sizeof nested[0]; i++) {
        srv_request r;
        srv_error err;
        sp_status st = parse_as(nested[i].body, TENANT, &r, &err);
        cr_expect(st != SP_OK, "accepted: %s", nested[i].body);
        if (st == SP_OK) {
            srv_request_free(&r);
            continue;
        }
        cr_expect_eq(err.http_status, nested[i].status, "%s: %s", nested[i].body, err.message);
        cr_expect_str_eq(err.param, nested[i].param, "%s: %s", nested[i].body, err.message);
        cr_expect(strstr(err.message, nested[i].param) != NULL, "%s: %s", nested[i].body, err.message);
        cr_expect(strstr(err.message, "function.") == NULL && strstr(err.message, "json_schema.") == NULL &&
                      strstr(err.message, "reasoning_effort") == NULL,
                  "%s: %s", nested[i].body, err.message);
    }
}

/* ---- the answer ---- */

/* A request as the parser leaves it, for the answer side (no model needed). */
static srv_request answer_request(bool store, bool summary) {
    srv_request r = {.endpoint = SRV_ENDPOINT_CHAT, .api = SRV_ENDPOINT_RESPONSES, .n = 1, .n_prompts = 1};
    r.api_fields = json_pack("{s:{s:s,s:n},s:[{s:s,s:s}],s:b,s:b}", "echo", "model", "smol", "instructions",
                             "conversation", "role", "user", "content", "Q?", "store", store, "summary", summary);
    cr_assert_not_null(r.api_fields);
    return r;
}

/* A copy of response with each output item's id checked (prefix and 16 hex digits) and
 * removed, so responses with fresh ids compare. */
static json_t *without_item_ids(const json_t *response) {
    json_t *copy = json_deep_copy(response);
    json_t *output = json_object_get(copy, "output");
    for (size_t i = 0; i < json_array_size(output); i++) {
        json_t *item = json_array_get(output, i);
        const char *type = json_string_value(json_object_get(item, "type"));
        const char *id = json_string_value(json_object_get(item, "id"));
        cr_assert(type && id, "item %zu", i);
        const char *prefix = strcmp(type, "message") == 0 ? "msg_" : strcmp(type, "reasoning") == 0 ? "rs_" : "fc_";
        cr_expect(strncmp(id, prefix, strlen(prefix)) == 0 && strlen(id) == strlen(prefix) + 16, "%s: %s", type, id);
        json_object_del(item, "id");
    }
    return copy;
}

static void expect_response(const json_t *response, const char *want) {
    json_t *bare = without_item_ids(response);
    expect_json(bare, want);
    json_decref(bare);
}

#define USAGE                                                                                                      \
    "'usage':{'prompt_tokens':12,'completion_tokens':7,'total_tokens':19,'prompt_tokens_details':{'cached_tokens'" \
    ":4},'completion_tokens_details':{'reasoning_tokens':3}}"
#define RESPONSES_USAGE                                                                        \
    "'usage':{'input_tokens':12,'input_tokens_details':{'cached_tokens':4},'output_tokens':7," \
    "'output_tokens_details':{'reasoning_tokens':3},'total_tokens':19}"
#define HEAD_FIELDS \
    "'model':'smol','instructions':null,'id':'resp_1','object':'response','created_at':1700000000,'error':null"
#define MSG_ITEM_AS(status, text)                                                                               \
    "{'type':'message','status':'" status "','role':'assistant','content':[{'type':'output_text','text':'" text \
    "','annotations':[],'logprobs':[]}]}"
#define MSG_ITEM(text) MSG_ITEM_AS("completed", text)

/* chat (' for ") rendered for a request (store, summary) into the response. */
static json_t *render(const char *chat, bool store, bool summary, srv_model_info *mi) {
    srv_request r = answer_request(store, summary);
    srv_api_answer a = {.id = "resp_1", .created = 1700000000, .tenant = TENANT};
    json_t *response = srv__responses_render(&r, mi, &a, jq(chat));
    cr_assert_not_null(response);
    json_decref(r.api_fields);
    return response;
}

static void expect_render(const char *chat, bool summary, const char *want) {
    srv_model_info mi = {.served_name = "served"};
    json_t *response = render(chat, true, summary, &mi);
    expect_response(response, want);
    json_decref(response);
}

Test(responses_render, text_reasoning_and_usage) {
    expect_render(
        "{'choices':[{'index':0,'message':{'role':'assistant','content':'Paris.'},'finish_reason':'stop'}]," USAGE "}",
        false,
        "{" HEAD_FIELDS
        ",'status':'completed','incomplete_details':null,'output':[" MSG_ITEM("Paris.") "]," RESPONSES_USAGE "}");
    /* the reasoning first, as reasoning text or, when a summary was asked, as the summary */
    const char *thinking = "{'choices':[{'index':0,'message':{'role':'assistant','content':'Paris.',"
                           "'reasoning_content':'hmm'},'finish_reason':'stop'}]," USAGE "}";
    expect_render(thinking, false,
                  "{" HEAD_FIELDS ",'status':'completed','incomplete_details':null,'output':["
                  "{'type':'reasoning','summary':[],'content':[{'type':'reasoning_text','text':'hmm'}]}," MSG_ITEM(
                      "Paris.") "]," RESPONSES_USAGE "}");
    expect_render(thinking, true,
                  "{" HEAD_FIELDS ",'status':'completed','incomplete_details':null,'output':["
                  "{'type':'reasoning','summary':[{'type':'summary_text','text':'hmm'}],'content':[]}," MSG_ITEM(
                      "Paris.") "]," RESPONSES_USAGE "}");
    /* no usage details: zeros */
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':'a'},'finish_reason':'stop'}],"
                  "'usage':{'prompt_tokens':2,'completion_tokens':1,'total_tokens':3}}",
                  false,
                  "{" HEAD_FIELDS ",'status':'completed','incomplete_details':null,'output':[" MSG_ITEM(
                      "a") "],"
                           "'usage':{'input_tokens':2,'input_tokens_details':{'cached_tokens':0},'output_tokens':1,"
                           "'output_tokens_details':{'reasoning_tokens':0},'total_tokens':3}}");
}

Test(responses_render, length_is_incomplete_and_an_empty_answer_is_one_empty_message) {
    expect_render(
        "{'choices':[{'index':0,'message':{'role':'assistant','content':'Pa'},'finish_reason':'length'}]," USAGE "}",
        false,
        "{" HEAD_FIELDS ",'status':'incomplete','incomplete_details':{'reason':'max_output_tokens'},"
        "'output':[" MSG_ITEM_AS("incomplete", "Pa") "]," RESPONSES_USAGE "}");
    expect_render(
        "{'choices':[{'index':0,'message':{'role':'assistant','content':''},'finish_reason':'stop'}]," USAGE "}", false,
        "{" HEAD_FIELDS ",'status':'completed','incomplete_details':null,'output':[" MSG_ITEM("") "]," RESPONSES_USAGE
                                                                                                  "}");
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':null},'finish_reason':'stop'}]," USAGE
                  "}",
                  false,
                  "{" HEAD_FIELDS
                  ",'status':'completed','incomplete_details':null,'output':[" MSG_ITEM("") "]," RESPONSES_USAGE "}");
}

#define CALLS                                                                                         \
    "'tool_calls':[{'id':'call_ab12','type':'function','function':{'name':'get_weather','arguments':" \
    "'{\\'city\\':\\'Paris\\'}'}},{'id':'call_cd34','type':'function','function':{'name':'add','arguments':'{}'}}]"
#define CALL_ITEMS                                                                                               \
    "{'type':'function_call','call_id':'call_ab12','name':'get_weather','arguments':'{\\'city\\':\\'Paris\\'}'," \
    "'status':'completed'},{'type':'function_call','call_id':'call_cd34','name':'add','arguments':'{}',"         \
    "'status':'completed'}"

Test(responses_render, tool_calls_are_function_call_items) {
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':null," CALLS "},"
                  "'finish_reason':'tool_calls'}]," USAGE "}",
                  false,
                  "{" HEAD_FIELDS ",'status':'completed','incomplete_details':null,'output':[" CALL_ITEMS
                  "]," RESPONSES_USAGE "}");
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':'Let me see.'," CALLS "},"
                  "'finish_reason':'tool_calls'}]," USAGE "}",
                  false,
                  "{" HEAD_FIELDS ",'status':'completed','incomplete_details':null,'output':[" MSG_ITEM(
                      "Let me see.") "," CALL_ITEMS "]," RESPONSES_USAGE "}");
}

/* Only what was said becomes an item: empty reasoning is none, reasoning alone needs no
 * empty message; a cut answer's last item is incomplete. */
Test(responses_render, items_for_what_was_said) {
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':'Paris.','reasoning_content':''},"
                  "'finish_reason':'stop'}]," USAGE "}",
                  false,
                  "{" HEAD_FIELDS
                  ",'status':'completed','incomplete_details':null,'output':[" MSG_ITEM("Paris.") "]," RESPONSES_USAGE
                                                                                                  "}");
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':'','reasoning_content':'hmm'},"
                  "'finish_reason':'length'}]," USAGE "}",
                  false,
                  "{" HEAD_FIELDS ",'status':'incomplete','incomplete_details':{'reason':'max_output_tokens'},"
                  "'output':[{'type':'reasoning','summary':[],'content':[{'type':'reasoning_text','text':'hmm'}]}]"
                  "," RESPONSES_USAGE "}");
    json_t *want = jq("[" CALL_ITEMS "]");
    json_object_set_new(json_array_get(want, 1), "status", json_string("incomplete"));
    srv_model_info mi = {.served_name = "served"};
    json_t *response = render("{'choices':[{'index':0,'message':{'role':'assistant','content':null," CALLS "},"
                              "'finish_reason':'length'}]," USAGE "}",
                              false, false, &mi);
    json_t *bare = without_item_ids(response);
    cr_expect(json_equal(json_object_get(bare, "output"), want));
    cr_expect_str_eq(json_string_value(json_object_get(bare, "status")), "incomplete");
    json_decref(bare);
    json_decref(response);
    json_decref(want);
}

Test(responses_render, stored_for_its_key_only) {
    srv_model_info mi = {.served_name = "served"};
    cr_assert_eq(srv_response_store_create(1 << 20, 100, 3600, &mi.responses), SP_OK);
    json_t *response = render("{'choices':[{'index':0,'message':{'role':'assistant','content':'Let me see.'," CALLS
                              "},'finish_reason':'tool_calls'}]," USAGE "}",
                              true, false, &mi);
    json_t *stored = NULL, *conversation = NULL;
    cr_assert(srv__store_get(mi.responses, "resp_1", TENANT, &stored, &conversation, sched_now()));
    cr_expect(json_equal(stored, response));
    /* the conversation so far: the request's, then the answer as one chat message */
    expect_json(conversation,
                "[{'role':'user','content':'Q?'},{'role':'assistant','content':'Let me see.'," CALLS "}]");
    json_decref(stored);
    json_decref(conversation);
    cr_expect(!srv__store_get(mi.responses, "resp_1", OTHER_TENANT, NULL, NULL, sched_now()));
    json_decref(response);
    /* store: false keeps nothing */
    srv_response_store_destroy(mi.responses);
    cr_assert_eq(srv_response_store_create(1 << 20, 100, 3600, &mi.responses), SP_OK);
    response = render(
        "{'choices':[{'index':0,'message':{'role':'assistant','content':'a'},'finish_reason':'stop'}]," USAGE "}",
        false, false, &mi);
    cr_expect(!srv__store_get(mi.responses, "resp_1", TENANT, NULL, NULL, sched_now()));
    cr_expect_eq(mi.responses->count, 0);
    json_decref(response);
    /* a server without a store answers all the same */
    srv_response_store_destroy(mi.responses);
    mi.responses = NULL;
    response = render(
        "{'choices':[{'index':0,'message':{'role':'assistant','content':'a'},'finish_reason':'stop'}]," USAGE "}", true,
        false, &mi);
    cr_expect_str_eq(json_string_value(json_object_get(response, "status")), "completed");
    json_decref(response);
}

/* A scheduler output through srv_render_response into the response, on a parsed request;
 * the next turn continues it with previous_response_id (instructions not carried). */
Test(responses_render, from_the_scheduler_output_to_the_next_turn, .init = fixture_responses, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'instructions':'FIRST-INSTR','input':'QUESTION-ONE','max_output_tokens':20}", &r);
    sched_output o = {.text = "ANSWER-ONE",
                      .text_len = 10,
                      .prompt_tokens = r.prompt_lens[0],
                      .cached_tokens = 2,
                      .completion_tokens = 5,
                      .done = true,
                      .finish = SCHED_FINISH_STOP};
    const sched_output *outs[] = {&o};
    char id[40];
    srv_response_id(SRV_ENDPOINT_RESPONSES, id, sizeof id);
    cr_expect(strncmp(id, "resp_", 5) == 0, "%s", id);
    srv_api_answer a = {.id = id, .created = 1700000001, .tenant = TENANT};
    json_t *response = srv__responses_render(&r, &fx.mi, &a, srv_render_response(&r, &fx.mi, id, a.created, outs, 1));
    cr_assert_not_null(response);
    cr_expect_str_eq(json_string_value(json_object_get(response, "id")), id);
    cr_expect_str_eq(json_string_value(json_object_get(response, "object")), "response");
    cr_expect_str_eq(json_string_value(json_object_get(response, "status")), "completed");
    cr_expect_eq(json_integer_value(json_object_get(response, "created_at")), 1700000001);
    cr_expect_eq(json_integer_value(json_object_get(response, "max_output_tokens")), 20);
    cr_expect_str_eq(json_string_value(json_object_get(response, "instructions")), "FIRST-INSTR");
    json_t *output = json_object_get(response, "output");
    cr_assert_eq(json_array_size(output), 1);
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(json_array_get(output, 0), "content"), 0), "text")),
                     "ANSWER-ONE");
    json_t *usage = json_object_get(response, "usage");
    cr_expect_eq(json_integer_value(json_object_get(usage, "input_tokens")), r.prompt_lens[0]);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(usage, "input_tokens_details"), "cached_tokens")),
                 2);
    cr_expect_eq(json_integer_value(json_object_get(usage, "output_tokens")), 5);
    cr_expect_eq(json_integer_value(json_object_get(usage, "total_tokens")), r.prompt_lens[0] + 5);
    srv_request_free(&r);
    /* a length end is incomplete */
    parse_ok("{'input':'x','store':false}", &r);
    o.finish = SCHED_FINISH_LENGTH;
    srv_api_answer b = {.id = "resp_len", .created = 1, .tenant = TENANT};
    json_t *cut = srv__responses_render(&r, &fx.mi, &b, srv_render_response(&r, &fx.mi, b.id, 1, outs, 1));
    cr_expect_str_eq(json_string_value(json_object_get(cut, "status")), "incomplete");
    expect_json(json_object_get(cut, "incomplete_details"), "{'reason':'max_output_tokens'}");
    cr_expect(!srv__store_get(fx.mi.responses, "resp_len", TENANT, NULL, NULL, sched_now()));
    json_decref(cut);
    srv_request_free(&r);
    /* the next turn */
    char body[256];
    snprintf(body, sizeof body, "{'previous_response_id':'%s','input':'QUESTION-TWO'}", id);
    parse_ok(body, &r);
    const char *order[] = {"user\nQUESTION-ONE", "assistant\nANSWER-ONE", "user\nQUESTION-TWO"};
    cr_expect(prompt_has_in_order(&r, order, 3), "%s", r.prompt_text);
    cr_expect(strstr(r.prompt_text, "FIRST-INSTR") == NULL, "%s", r.prompt_text);
    srv_request_free(&r);
    /* GET by id is the response as it was answered */
    json_t *stored = NULL;
    cr_assert(srv__store_get(fx.mi.responses, id, TENANT, &stored, NULL, sched_now()));
    cr_expect(json_equal(stored, response));
    json_decref(stored);
    json_decref(response);
}

/* A thinking model's output: the reasoning item and reasoning_tokens from the scheduler
 * output's tokens. */
Test(responses_render, reasoning_from_a_thinking_model, .init = fixture_thinking, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'input':'hi','reasoning':{'effort':'low'}}", &r);
    const char *text = "<think>Let me think.</think>Paris.";
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(tok_encode(fx.vocab, text, strlen(text), false, true, &ids, &n), SP_OK);
    sched_token *tokens = calloc(n, sizeof *tokens);
    for (size_t i = 0; i < n; i++) tokens[i].id = ids[i];
    sched_output o = {.text = (char *)text,
                      .text_len = strlen(text),
                      .tokens = tokens,
                      .n_tokens = (int32_t)n,
                      .prompt_tokens = r.prompt_lens[0],
                      .completion_tokens = (int32_t)n,
                      .done = true,
                      .finish = SCHED_FINISH_STOP};
    const sched_output *outs[] = {&o};
    srv_api_answer a = {.id = "resp_think", .created = 1, .tenant = TENANT};
    json_t *response = srv__responses_render(&r, &fx.mi, &a, srv_render_response(&r, &fx.mi, a.id, 1, outs, 1));
    cr_assert_not_null(response);
    json_t *output = json_object_get(response, "output");
    cr_assert_eq(json_array_size(output), 2);
    const json_t *reasoning = json_array_get(output, 0), *message = json_array_get(output, 1);
    cr_expect_str_eq(json_string_value(json_object_get(reasoning, "type")), "reasoning");
    const char *thought =
        json_string_value(json_object_get(json_array_get(json_object_get(reasoning, "content"), 0), "text"));
    cr_expect(thought && strstr(thought, "Let me think.") != NULL, "%s", thought ? thought : "(none)");
    cr_expect_str_eq(json_string_value(json_object_get(message, "type")), "message");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(message, "content"), 0), "text")),
                     "Paris.");
    json_int_t thinking_tokens = json_integer_value(json_object_get(
        json_object_get(json_object_get(response, "usage"), "output_tokens_details"), "reasoning_tokens"));
    cr_expect(thinking_tokens > 0 && thinking_tokens < (json_int_t)n, "%lld of %zu", (long long)thinking_tokens, n);
    /* the stored conversation leaves the thinking out */
    json_t *conversation = NULL;
    cr_assert(srv__store_get(fx.mi.responses, "resp_think", TENANT, NULL, &conversation, sched_now()));
    expect_json(conversation, "[{'role':'user','content':'hi'},{'role':'assistant','content':'Paris.'}]");
    json_decref(conversation);
    json_decref(response);
    free(tokens);
    free(ids);
    srv_request_free(&r);
}

/* ---- streams ---- */

/* The events of a stream's text, each frame checked to be "event: T\ndata: {...}\n\n" with
 * the data's type T and sequence_number 0, 1, 2, ... in order: their data objects. */
static json_t *events_of(const char *text) {
    json_t *list = json_array();
    json_int_t sequence = 0;
    for (const char *at = text; *at;) {
        cr_assert(strncmp(at, "event: ", 7) == 0, "not an event frame: %.80s", at);
        const char *nl = strchr(at, '\n');
        cr_assert(nl && strncmp(nl, "\ndata: ", 7) == 0, "no data line: %.80s", at);
        const char *end = strstr(nl + 7, "\n\n");
        cr_assert_not_null(end, "unterminated frame: %.80s", at);
        json_t *data = fixture_json(nl + 7, (size_t)(end - nl - 7));
        const char *type = json_string_value(json_object_get(data, "type"));
        size_t name_len = (size_t)(nl - at - 7);
        cr_assert(type && strlen(type) == name_len && strncmp(type, at + 7, name_len) == 0, "event %.*s, type %s",
                  (int)name_len, at + 7, type ? type : "(none)");
        cr_expect_eq(json_integer_value(json_object_get(data, "sequence_number")), sequence, "%s", type);
        sequence++;
        json_array_append_new(list, data);
        at = end + 2;
    }
    return list;
}

static void expect_types(const json_t *events, const char *const *want, size_t n) {
    strbuf got = {0}, wanted = {0};
    for (size_t i = 0; i < json_array_size(events); i++)
        strbuf_printf(&got, "%s\n", json_string_value(json_object_get(json_array_get(events, i), "type")));
    for (size_t i = 0; i < n; i++) strbuf_printf(&wanted, "%s\n", want[i]);
    char *g = strbuf_take(&got), *w = strbuf_take(&wanted);
    cr_expect_str_eq(g, w);
    free(g);
    free(w);
}

/* A chat chunk literal (' for ") as the transport hands it over. */
static char *chunk(const char *literal) {
    strbuf b = {0};
    strbuf_append(&b, "data: ", 6);
    for (const char *p = literal; *p; p++) strbuf_append(&b, *p == '\'' ? "\"" : p, 1);
    strbuf_append(&b, "\n\n", 2);
    return strbuf_take(&b);
}

/* The Responses events a translator makes of chat events (each taken; NULL: [DONE]). */
static json_t *stream_events(const srv_request *r, const srv_model_info *mi, const char *id, char **chat_events,
                             size_t n) {
    srv_api_answer a = {.id = id, .created = 1700000000, .tenant = TENANT};
    srv_api_stream *s = srv__responses_stream(r, mi, &a);
    cr_assert_not_null(s);
    strbuf out = {0};
    for (size_t i = 0; i < n; i++) {
        srv_api_stream_event(s, chat_events[i] ? chat_events[i] : SRV_SSE_DONE, &out);
        free(chat_events[i]);
    }
    srv_api_stream_destroy(s);
    cr_expect(!out.failed);
    char *text = strbuf_take(&out);
    cr_assert_not_null(text);
    json_t *events = events_of(text);
    free(text);
    return events;
}

/* Literal chunks (NULL: [DONE]) through a translator for a request (store, summary). */
static json_t *stream_literals(bool store, bool summary, srv_model_info *mi, const char *const *literals, size_t n) {
    srv_request r = answer_request(store, summary);
    char **chat_events = calloc(n, sizeof *chat_events);
    for (size_t i = 0; i < n; i++) chat_events[i] = literals[i] ? chunk(literals[i]) : NULL;
    json_t *events = stream_events(&r, mi, "resp_9", chat_events, n);
    free(chat_events);
    json_decref(r.api_fields);
    return events;
}

static const json_t *event_at(const json_t *events, size_t i) {
    return json_array_get(events, i);
}

static const char *str_at(const json_t *events, size_t i, const char *key) {
    return json_string_value(json_object_get(event_at(events, i), key));
}

/* The last event's response. */
static const json_t *final_response(const json_t *events) {
    return json_object_get(event_at(events, json_array_size(events) - 1), "response");
}

#define ROLE      "{'choices':[{'index':0,'delta':{'role':'assistant','content':''},'finish_reason':null}],'usage':null}"
#define TEXT(t)   "{'choices':[{'index':0,'delta':{'content':'" t "'},'finish_reason':null}],'usage':null}"
#define THINK(t)  "{'choices':[{'index':0,'delta':{'reasoning_content':'" t "'},'finish_reason':null}],'usage':null}"
#define FINISH(f) "{'choices':[{'index':0,'delta':{},'finish_reason':'" f "'}],'usage':null}"
#define USAGE_CHUNK                                                                                              \
    "{'choices':[],'usage':{'prompt_tokens':12,'completion_tokens':7,'total_tokens':19,'prompt_tokens_details':" \
    "{'cached_tokens':4},'completion_tokens_details':{'reasoning_tokens':3}}}"
#define HEAD(k, id, name)                                                                                       \
    "{'choices':[{'index':0,'delta':{'tool_calls':[{'index':" #k ",'id':'" id "','type':'function','function':" \
    "{'name':'" name "','arguments':''}}]},'finish_reason':null}],'usage':null}"
#define ARGS(k, a)                                                                                       \
    "{'choices':[{'index':0,'delta':{'tool_calls':[{'index':" #k ",'function':{'arguments':'" a "'}}]}," \
    "'finish_reason':null}],'usage':null}"

/* The stream's final response equals the non-streaming render of the same answer
 * (rendered, taken), item ids aside. */
static void expect_final_equals_render(json_t *events, json_t *rendered) {
    json_t *a = without_item_ids(final_response(events)), *b = without_item_ids(rendered);
    json_object_set_new(b, "id", json_string("resp_9"));
    cr_expect(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    json_decref(rendered);
}

Test(responses_stream, text_in_the_exact_event_sequence) {
    srv_model_info mi = {.served_name = "served"};
    const char *chunks[] = {ROLE, TEXT("Par"), TEXT("is."), FINISH("stop"), USAGE_CHUNK, NULL};
    json_t *events = stream_literals(false, false, &mi, chunks, sizeof chunks / sizeof chunks[0]);
    const char *want[] = {"response.created",           "response.in_progress",
                          "response.output_item.added", "response.content_part.added",
                          "response.output_text.delta", "response.output_text.delta",
                          "response.output_text.done",  "response.content_part.done",
                          "response.output_item.done",  "response.completed"};
    expect_types(events, want, sizeof want / sizeof want[0]);
    cr_assert_eq(json_array_size(events), sizeof want / sizeof want[0]);
    /* the start: the response in progress, nothing out yet */
    for (size_t i = 0; i < 2; i++) {
        const json_t *response = json_object_get(event_at(events, i), "response");
        cr_expect_str_eq(json_string_value(json_object_get(response, "id")), "resp_9");
        cr_expect_str_eq(json_string_value(json_object_get(response, "status")), "in_progress");
        cr_expect_eq(json_array_size(json_object_get(response, "output")), 0);
        cr_expect(json_is_null(json_object_get(response, "usage")));
    }
    /* one item, one id throughout */
    const json_t *added = json_object_get(event_at(events, 2), "item");
    const char *item_id = json_string_value(json_object_get(added, "id"));
    cr_assert_not_null(item_id);
    json_t *bare = json_deep_copy(added);
    json_object_del(bare, "id");
    expect_json(bare, "{'type':'message','status':'in_progress','role':'assistant','content':[]}");
    json_decref(bare);
    for (size_t i = 3; i <= 7; i++) {
        cr_expect_str_eq(str_at(events, i, "item_id"), item_id, "event %zu", i);
        cr_expect_eq(json_integer_value(json_object_get(event_at(events, i), "output_index")), 0);
        cr_expect_eq(json_integer_value(json_object_get(event_at(events, i), "content_index")), 0);
    }
    expect_json(json_object_get(event_at(events, 3), "part"),
                "{'type':'output_text','text':'','annotations':[],'logprobs':[]}");
    cr_expect_str_eq(str_at(events, 4, "delta"), "Par");
    cr_expect_str_eq(str_at(events, 5, "delta"), "is.");
    cr_expect_str_eq(str_at(events, 6, "text"), "Paris.");
    expect_json(json_object_get(event_at(events, 7), "part"),
                "{'type':'output_text','text':'Paris.','annotations':[],'logprobs':[]}");
    const json_t *done = json_object_get(event_at(events, 8), "item");
    cr_expect_str_eq(json_string_value(json_object_get(done, "id")), item_id);
    cr_expect_eq(json_integer_value(json_object_get(event_at(events, 8), "output_index")), 0);
    expect_response(final_response(events),
                    "{'model':'smol','instructions':null,'id':'resp_9','object':'response','created_at':1700000000,"
                    "'error':null,'status':'completed','incomplete_details':null,'output':[" MSG_ITEM(
                        "Paris.") "]," RESPONSES_USAGE "}");
    json_decref(events);
}

#define CALL_HEADS_AND_ARGS                                                                \
    HEAD(0, "call_ab12", "get_weather"), ARGS(0, "{\\'city\\'"), ARGS(0, ":\\'Paris\\'}"), \
        HEAD(1, "call_cd34", "add"), ARGS(1, "{}")

Test(responses_stream, reasoning_text_and_tool_calls) {
    srv_model_info mi = {.served_name = "served"};
    const char *chunks[] = {
        ROLE, THINK("Let"), THINK(" me"), TEXT("Sure."), CALL_HEADS_AND_ARGS, FINISH("tool_calls"), USAGE_CHUNK, NULL};
    json_t *events = stream_literals(false, false, &mi, chunks, sizeof chunks / sizeof chunks[0]);
    const char *want[] = {"response.created",
                          "response.in_progress",
                          "response.output_item.added", /* 2: reasoning */
                          "response.reasoning_text.delta",
                          "response.reasoning_text.delta",
                          "response.reasoning_text.done",
                          "response.output_item.done",
                          "response.output_item.added", /* 7: message */
                          "response.content_part.added",
                          "response.output_text.delta",
                          "response.output_text.done",
                          "response.content_part.done",
                          "response.output_item.done",
                          "response.output_item.added", /* 13: get_weather */
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.done",
                          "response.output_item.done",
                          "response.output_item.added", /* 18: add */
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.done",
                          "response.output_item.done",
                          "response.completed"};
    expect_types(events, want, sizeof want / sizeof want[0]);
    cr_assert_eq(json_array_size(events), sizeof want / sizeof want[0]);
    /* output_index: the item's place in output */
    const size_t index_at[][2] = {{2, 0},  {3, 0},  {5, 0},  {6, 0},  {7, 1},  {9, 1},  {12, 1}, {13, 2},
                                  {14, 2}, {16, 2}, {17, 2}, {18, 3}, {19, 3}, {20, 3}, {21, 3}};
    for (size_t i = 0; i < sizeof index_at / sizeof index_at[0]; i++)
        cr_expect_eq(json_integer_value(json_object_get(event_at(events, index_at[i][0]), "output_index")),
                     (json_int_t)index_at[i][1], "event %zu", index_at[i][0]);
    cr_expect_str_eq(str_at(events, 3, "delta"), "Let");
    cr_expect_str_eq(str_at(events, 5, "text"), "Let me");
    json_t *bare = json_deep_copy(json_object_get(event_at(events, 2), "item"));
    json_object_del(bare, "id");
    expect_json(bare, "{'type':'reasoning','summary':[],'content':[]}");
    json_decref(bare);
    /* a call's item opens with its call_id and name, arguments empty */
    bare = json_deep_copy(json_object_get(event_at(events, 13), "item"));
    const char *call_item_id = json_string_value(json_object_get(bare, "id"));
    cr_expect(call_item_id && strncmp(call_item_id, "fc_", 3) == 0);
    cr_expect_str_eq(str_at(events, 14, "item_id"), call_item_id);
    json_object_del(bare, "id");
    expect_json(bare, "{'type':'function_call','call_id':'call_ab12','name':'get_weather','arguments':'',"
                      "'status':'in_progress'}");
    json_decref(bare);
    cr_expect_str_eq(str_at(events, 14, "delta"), "{\"city\"");
    cr_expect_str_eq(str_at(events, 15, "delta"), ":\"Paris\"}");
    cr_expect_str_eq(str_at(events, 16, "arguments"), "{\"city\":\"Paris\"}");
    cr_expect_str_eq(str_at(events, 16, "name"), "get_weather");
    cr_expect_str_eq(str_at(events, 20, "arguments"), "{}");
    cr_expect_str_eq(str_at(events, 20, "name"), "add");
    /* the final response is what the answer not streamed would be */
    json_t *rendered = render("{'choices':[{'index':0,'message':{'role':'assistant','content':'Sure.',"
                              "'reasoning_content':'Let me'," CALLS "},'finish_reason':'tool_calls'}]," USAGE "}",
                              false, false, &mi);
    json_t *a = without_item_ids(final_response(events)), *b = without_item_ids(rendered);
    json_object_set_new(b, "id", json_string("resp_9"));
    char *ga = json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS), *gb = json_dumps(b, JSON_COMPACT | JSON_SORT_KEYS);
    cr_expect(json_equal(a, b), "streamed %s\nrendered %s", ga, gb);
    free(ga);
    free(gb);
    json_decref(a);
    json_decref(b);
    json_decref(rendered);
    /* each item's final id is the one it was announced with */
    const json_t *output = json_object_get(final_response(events), "output");
    const size_t added_at[] = {2, 7, 13, 18};
    for (size_t i = 0; i < 4; i++)
        cr_expect_str_eq(
            json_string_value(json_object_get(json_array_get(output, i), "id")),
            json_string_value(json_object_get(json_object_get(event_at(events, added_at[i]), "item"), "id")));
    json_decref(events);
}

Test(responses_stream, reasoning_as_a_summary) {
    srv_model_info mi = {.served_name = "served"};
    const char *chunks[] = {ROLE, THINK("h"), THINK("m"), TEXT("ok"), FINISH("stop"), USAGE_CHUNK, NULL};
    json_t *events = stream_literals(false, true, &mi, chunks, sizeof chunks / sizeof chunks[0]);
    const char *want[] = {"response.created",
                          "response.in_progress",
                          "response.output_item.added",
                          "response.reasoning_summary_part.added",
                          "response.reasoning_summary_text.delta",
                          "response.reasoning_summary_text.delta",
                          "response.reasoning_summary_text.done",
                          "response.reasoning_summary_part.done",
                          "response.output_item.done",
                          "response.output_item.added",
                          "response.content_part.added",
                          "response.output_text.delta",
                          "response.output_text.done",
                          "response.content_part.done",
                          "response.output_item.done",
                          "response.completed"};
    expect_types(events, want, sizeof want / sizeof want[0]);
    cr_expect_eq(json_integer_value(json_object_get(event_at(events, 4), "summary_index")), 0);
    cr_expect_str_eq(str_at(events, 6, "text"), "hm");
    expect_json(json_object_get(event_at(events, 7), "part"), "{'type':'summary_text','text':'hm'}");
    expect_final_equals_render(events, render("{'choices':[{'index':0,'message':{'role':'assistant','content':'ok',"
                                              "'reasoning_content':'hm'},'finish_reason':'stop'}]," USAGE "}",
                                              false, true, &mi));
    json_decref(events);
}

Test(responses_stream, length_is_incomplete_and_an_empty_answer_is_one_empty_message) {
    srv_model_info mi = {.served_name = "served"};
    const char *cut[] = {ROLE, TEXT("Pa"), FINISH("length"), USAGE_CHUNK, NULL};
    json_t *events = stream_literals(false, false, &mi, cut, sizeof cut / sizeof cut[0]);
    const char *want[] = {"response.created",           "response.in_progress",
                          "response.output_item.added", "response.content_part.added",
                          "response.output_text.delta", "response.output_text.done",
                          "response.content_part.done", "response.output_item.done",
                          "response.incomplete"};
    expect_types(events, want, sizeof want / sizeof want[0]);
    expect_response(final_response(events),
                    "{'model':'smol','instructions':null,'id':'resp_9','object':'response','created_at':1700000000,"
                    "'error':null,'status':'incomplete','incomplete_details':{'reason':'max_output_tokens'},"
                    "'output':[" MSG_ITEM_AS("incomplete", "Pa") "]," RESPONSES_USAGE "}");
    json_decref(events);

    const char *empty[] = {ROLE, FINISH("stop"), USAGE_CHUNK, NULL};
    events = stream_literals(false, false, &mi, empty, sizeof empty / sizeof empty[0]);
    const char *want_empty[] = {"response.created",           "response.in_progress",
                                "response.output_item.added", "response.content_part.added",
                                "response.output_text.done",  "response.content_part.done",
                                "response.output_item.done",  "response.completed"};
    expect_types(events, want_empty, sizeof want_empty / sizeof want_empty[0]);
    cr_expect_str_eq(str_at(events, 4, "text"), "");
    expect_final_equals_render(events, render("{'choices':[{'index':0,'message':{'role':'assistant','content':''},"
                                              "'finish_reason':'stop'}]," USAGE "}",
                                              false, false, &mi));
    json_decref(events);
}

/* events' final response, and the render of chat, equal but for item ids. */
static void expect_same_as_render(const json_t *events, const char *chat, bool summary) {
    srv_model_info mi = {.served_name = "served"};
    json_t *rendered = render(chat, false, summary, &mi);
    json_t *a = without_item_ids(final_response(events)), *b = without_item_ids(rendered);
    json_object_set_new(b, "id", json_string("resp_9"));
    char *ga = json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS), *gb = json_dumps(b, JSON_COMPACT | JSON_SORT_KEYS);
    cr_expect(json_equal(a, b), "streamed %s\nrendered %s", ga, gb);
    free(ga);
    free(gb);
    json_decref(a);
    json_decref(b);
    json_decref(rendered);
}

Test(responses_stream, reasoning_alone_and_a_cut_call_match_the_render) {
    srv_model_info mi = {.served_name = "served"};
    const char *thought[] = {ROLE, THINK("hm"), FINISH("length"), USAGE_CHUNK, NULL};
    json_t *events = stream_literals(false, false, &mi, thought, sizeof thought / sizeof thought[0]);
    const char *want[] = {"response.created",
                          "response.in_progress",
                          "response.output_item.added",
                          "response.reasoning_text.delta",
                          "response.reasoning_text.done",
                          "response.output_item.done",
                          "response.incomplete"};
    expect_types(events, want, sizeof want / sizeof want[0]);
    expect_same_as_render(events,
                          "{'choices':[{'index':0,'message':{'role':'assistant','content':'','reasoning_content':"
                          "'hm'},'finish_reason':'length'}]," USAGE "}",
                          false);
    json_decref(events);
    /* the budget cut the second call: it is incomplete, the first completed */
    const char *cut[] = {ROLE, CALL_HEADS_AND_ARGS, FINISH("length"), USAGE_CHUNK, NULL};
    events = stream_literals(false, false, &mi, cut, sizeof cut / sizeof cut[0]);
    const json_t *output = json_object_get(final_response(events), "output");
    cr_assert_eq(json_array_size(output), 2);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(output, 0), "status")), "completed");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(output, 1), "status")), "incomplete");
    expect_same_as_render(events,
                          "{'choices':[{'index':0,'message':{'role':'assistant','content':null," CALLS "},"
                          "'finish_reason':'length'}]," USAGE "}",
                          false);
    json_decref(events);
}

/* A chat error event (srv_sse_error_event's) in the middle of a stream. */
static char *error_chunk(srv_error_kind kind, const char *message) {
    srv_error err;
    srv_error_make(&err, kind, NULL, "%s", message);
    char *text = srv_sse_error_event(&err);
    cr_assert_not_null(text);
    return text;
}

Test(responses_stream, an_error_fails_the_response) {
    srv_model_info mi = {.served_name = "served"};
    cr_assert_eq(srv_response_store_create(1 << 20, 100, 3600, &mi.responses), SP_OK);
    srv_request r = answer_request(true, false);
    char *chat_events[] = {chunk(ROLE), chunk(TEXT("a")), error_chunk(SRV_ERROR_TIMEOUT, "the request timed out"),
                           NULL};
    json_t *events = stream_events(&r, &mi, "resp_err", chat_events, 4);
    const char *want[] = {"response.created",           "response.in_progress",
                          "response.output_item.added", "response.content_part.added",
                          "response.output_text.delta", "error",
                          "response.output_text.done",  "response.content_part.done",
                          "response.output_item.done",  "response.failed"};
    expect_types(events, want, sizeof want / sizeof want[0]);
    cr_expect_str_eq(str_at(events, 5, "code"), "timeout");
    cr_expect_str_eq(str_at(events, 5, "message"), "the request timed out");
    cr_expect(json_is_null(json_object_get(event_at(events, 5), "param")));
    const json_t *response = final_response(events);
    cr_expect_str_eq(json_string_value(json_object_get(response, "status")), "failed");
    expect_json(json_object_get(response, "error"), "{'code':'timeout','message':'the request timed out'}");
    /* a failed response is not kept */
    cr_expect(!srv__store_get(mi.responses, "resp_err", TENANT, NULL, NULL, sched_now()));
    json_decref(events);

    /* an error before anything was said: no items */
    char *early[] = {error_chunk(SRV_ERROR_UNAVAILABLE, "shutting down"), NULL};
    events = stream_events(&r, &mi, "resp_err2", early, 2);
    const char *want_early[] = {"response.created", "response.in_progress", "error", "response.failed"};
    expect_types(events, want_early, sizeof want_early / sizeof want_early[0]);
    cr_expect_eq(json_array_size(json_object_get(final_response(events), "output")), 0);
    json_decref(events);
    json_decref(r.api_fields);
    srv_response_store_destroy(mi.responses);
}

/* Chat errors of some kinds carry "code": null (500 server_error, 503 unavailable_error);
 * OpenAI's ResponseError.code is always a string, so the response says server_error. */
Test(responses_stream, a_failed_response_always_has_an_error_code) {
    srv_model_info mi = {.served_name = "served"};
    srv_request r = answer_request(false, false);
    char *chat_events[] = {error_chunk(SRV_ERROR_INTERNAL, "the backend failed"), NULL};
    json_t *events = stream_events(&r, &mi, "resp_err", chat_events, 2);
    const json_t *error = json_object_get(final_response(events), "error");
    cr_expect_str_eq(json_string_value(json_object_get(error, "message")), "the backend failed");
    cr_expect(json_is_string(json_object_get(error, "code")), "error.code is %s",
              json_is_null(json_object_get(error, "code")) ? "null" : "not a string");
    json_decref(events);
    json_decref(r.api_fields);
}

/* The chat side's own chunk functions (srv_sse_*), as a stream sends them, against the
 * non-streaming answer srv_render_response makes of the same output; the streamed
 * response is kept for its key. */
Test(responses_stream, equals_the_rendered_answer_and_is_stored) {
    srv_model_info mi = {.served_name = "served"}, plain = {.served_name = "served"};
    cr_assert_eq(srv_response_store_create(1 << 20, 100, 3600, &mi.responses), SP_OK);
    srv_request r = answer_request(true, false);
    r.stream = r.include_usage = true;
    sched_output o = {.text = "Hello world",
                      .text_len = 11,
                      .prompt_tokens = 9,
                      .cached_tokens = 2,
                      .completion_tokens = 4,
                      .done = true,
                      .finish = SCHED_FINISH_STOP};
    const sched_output *outs[] = {&o};
    const char *id = "resp_eq";
    char *chat_events[] = {
        srv_sse_role_chunk(&r, &mi, id, 1, 0),
        srv_sse_reasoning_chunk(&r, &mi, id, 1, 0, "Thinking", 8, NULL, 0, NULL, 0),
        srv_sse_delta_chunk(&r, &mi, id, 1, 0, "Hello", 5, NULL, 0, NULL, 0, NULL),
        srv_sse_delta_chunk(&r, &mi, id, 1, 0, " world", 6, NULL, 0, NULL, 0, NULL),
        srv_sse_tool_call_delta(&r, &mi, id, 1, 0,
                                json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index", 0, "id", "call_1", "type", "function",
                                          "function", "name", "f", "arguments", "")),
        srv_sse_tool_call_delta(&r, &mi, id, 1, 0,
                                json_pack("{s:i,s:{s:s}}", "index", 0, "function", "arguments", "{\"a\":1}")),
        srv_sse_delta_chunk(&r, &mi, id, 1, 0, "", 0, NULL, 0, NULL, 0, "tool_calls"),
        srv_sse_usage_chunk(&r, &mi, id, 1, outs, 1),
        NULL,
    };
    for (size_t i = 0; i + 1 < sizeof chat_events / sizeof chat_events[0]; i++) cr_assert_not_null(chat_events[i]);
    json_t *events = stream_events(&r, &mi, id, chat_events, sizeof chat_events / sizeof chat_events[0]);
    const json_t *streamed = final_response(events);
    cr_expect_str_eq(json_string_value(json_object_get(event_at(events, json_array_size(events) - 1), "type")),
                     "response.completed");
    /* the same content not streamed: srv_render_response's body with the reasoning and call */
    json_t *chat = srv_render_response(&r, &plain, id, 1, outs, 1);
    cr_assert_not_null(chat);
    json_t *choice = json_array_get(json_object_get(chat, "choices"), 0);
    json_t *message = json_object_get(choice, "message");
    json_object_set_new(message, "reasoning_content", json_string("Thinking"));
    json_object_set_new(message, "tool_calls",
                        json_pack("[{s:s,s:s,s:{s:s,s:s}}]", "id", "call_1", "type", "function", "function", "name",
                                  "f", "arguments", "{\"a\":1}"));
    json_object_set_new(choice, "finish_reason", json_string("tool_calls"));
    srv_api_answer a = {.id = id, .created = 1700000000, .tenant = TENANT};
    json_t *rendered = srv__responses_render(&r, &plain, &a, chat);
    cr_assert_not_null(rendered);
    json_t *x = without_item_ids(streamed), *y = without_item_ids(rendered);
    char *gx = json_dumps(x, JSON_COMPACT | JSON_SORT_KEYS), *gy = json_dumps(y, JSON_COMPACT | JSON_SORT_KEYS);
    cr_expect(json_equal(x, y), "streamed %s\nrendered %s", gx, gy);
    free(gx);
    free(gy);
    json_decref(x);
    json_decref(y);
    /* output text and usage, spelled out */
    const json_t *output = json_object_get(streamed, "output");
    cr_assert_eq(json_array_size(output), 3);
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(json_array_get(output, 1), "content"), 0), "text")),
                     "Hello world");
    expect_json(json_object_get(streamed, "usage"),
                "{'input_tokens':9,'input_tokens_details':{'cached_tokens':2},'output_tokens':4,"
                "'output_tokens_details':{'reasoning_tokens':0},'total_tokens':13}");
    /* kept as streamed, with the conversation so far */
    json_t *stored = NULL, *conversation = NULL;
    cr_assert(srv__store_get(mi.responses, id, TENANT, &stored, &conversation, sched_now()));
    cr_expect(json_equal(stored, streamed));
    expect_json(conversation, "[{'role':'user','content':'Q?'},{'role':'assistant','content':'Hello world',"
                              "'tool_calls':[{'id':'call_1','type':'function','function':{'name':'f',"
                              "'arguments':'{\\'a\\':1}'}}]}]");
    cr_expect(!srv__store_get(mi.responses, id, OTHER_TENANT, NULL, NULL, sched_now()));
    json_decref(stored);
    json_decref(conversation);
    json_decref(rendered);
    json_decref(events);
    json_decref(r.api_fields);
    srv_response_store_destroy(mi.responses);
}

Test(responses_stream, a_translator_destroyed_mid_stream_frees_everything) {
    srv_model_info mi = {.served_name = "served"};
    srv_request r = answer_request(false, false);
    srv_api_answer a = {.id = "resp_x", .created = 1, .tenant = TENANT};
    srv_api_stream *s = srv__responses_stream(&r, &mi, &a);
    cr_assert_not_null(s);
    strbuf out = {0};
    const char *chunks[] = {ROLE, TEXT("a"), HEAD(0, "call_1", "f"), ARGS(0, "{")};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        char *c = chunk(chunks[i]);
        srv_api_stream_event(s, c, &out);
        free(c);
    }
    srv_api_stream_destroy(s);
    char *text = strbuf_take(&out);
    json_t *events = events_of(text);
    cr_expect_str_eq(str_at(events, json_array_size(events) - 1, "type"), "response.function_call_arguments.delta");
    json_decref(events);
    free(text);
    json_decref(r.api_fields);
}

/* ---- the store ---- */

static srv_response_store *store_new(size_t max_bytes, int max_count, double ttl_s) {
    srv_response_store *s = NULL;
    cr_assert_eq(srv_response_store_create(max_bytes, max_count, ttl_s, &s), SP_OK);
    cr_assert_not_null(s);
    return s;
}

/* A response of about pad bytes, and its conversation. */
static json_t *response_of(const char *id, size_t pad) {
    char *fill = malloc(pad + 1);
    memset(fill, 'x', pad);
    fill[pad] = '\0';
    json_t *response = json_pack("{s:s,s:s,s:s}", "id", id, "object", "response", "pad", fill);
    free(fill);
    return response;
}

static json_t *conversation_for(const char *id) {
    return json_pack("[{s:s,s:s}]", "role", "user", "content", id);
}

/* What an entry counts against the budget (response_store.c's charge of its texts). */
static size_t entry_bytes(const json_t *response, const json_t *conversation) {
    char *a = json_dumps(response, JSON_COMPACT), *b = json_dumps(conversation, JSON_COMPACT);
    size_t n = srv__store_entry_charge(strlen(a), strlen(b));
    free(a);
    free(b);
    return n;
}

static bool put(srv_response_store *s, const char *id, uint64_t tenant, size_t pad, double now) {
    return srv__store_put(s, id, tenant, response_of(id, pad), conversation_for(id), now);
}

static bool has(srv_response_store *s, const char *id, uint64_t tenant, double now) {
    return srv__store_get(s, id, tenant, NULL, NULL, now);
}

Test(response_store, get_gives_copies_of_what_was_put) {
    srv_response_store *s = store_new(1 << 20, 10, 60);
    cr_assert(put(s, "resp_a", 1, 10, 0));
    json_t *response = NULL, *conversation = NULL;
    cr_assert(srv__store_get(s, "resp_a", 1, &response, &conversation, 1));
    json_t *want = response_of("resp_a", 10), *want_conversation = conversation_for("resp_a");
    cr_expect(json_equal(response, want));
    cr_expect(json_equal(conversation, want_conversation));
    /* changing the copies changes nothing stored */
    json_object_set_new(response, "status", json_string("changed"));
    json_array_append_new(conversation, json_string("more"));
    json_decref(response);
    json_decref(conversation);
    cr_assert(srv__store_get(s, "resp_a", 1, &response, &conversation, 2));
    cr_expect(json_equal(response, want));
    cr_expect(json_equal(conversation, want_conversation));
    cr_expect(response != want);
    json_decref(response);
    json_decref(conversation);
    json_decref(want);
    json_decref(want_conversation);
    /* either copy alone */
    cr_assert(srv__store_get(s, "resp_a", 1, &response, NULL, 3));
    json_decref(response);
    cr_assert(srv__store_get(s, "resp_a", 1, NULL, &conversation, 3));
    json_decref(conversation);
    cr_expect(!has(s, "resp_b", 1, 3));
    srv_response_store_destroy(s);
}

Test(response_store, each_key_sees_only_its_own) {
    srv_response_store *s = store_new(1 << 20, 10, 60);
    cr_assert(put(s, "resp_a", 1, 10, 0));
    cr_assert(put(s, "resp_b", 2, 10, 0));
    cr_expect(has(s, "resp_a", 1, 1));
    cr_expect(!has(s, "resp_a", 2, 1));
    cr_expect(!has(s, "resp_b", 1, 1));
    cr_expect(has(s, "resp_b", 2, 1));
    /* another key's delete is a miss and removes nothing */
    cr_expect(!srv__store_delete(s, "resp_a", 2, 1));
    cr_expect(has(s, "resp_a", 1, 1));
    cr_expect(srv__store_delete(s, "resp_a", 1, 1));
    cr_expect(!has(s, "resp_a", 1, 1));
    cr_expect(!srv__store_delete(s, "resp_a", 1, 1));
    cr_expect_eq(s->count, 1);
    cr_expect(has(s, "resp_b", 2, 1));
    srv_response_store_destroy(s);
}

Test(response_store, bounded_by_bytes) {
    json_t *r0 = response_of("resp_0", 100), *c0 = conversation_for("resp_0");
    size_t one = entry_bytes(r0, c0);
    json_decref(r0);
    json_decref(c0);
    /* room for two and a half */
    srv_response_store *s = store_new(one * 2 + one / 2, 100, 60);
    cr_assert(put(s, "resp_0", 1, 100, 0));
    cr_assert(put(s, "resp_1", 1, 100, 0));
    cr_expect_eq(s->bytes, 2 * one);
    cr_assert(put(s, "resp_2", 1, 100, 0)); /* the oldest goes to make room */
    cr_expect(!has(s, "resp_0", 1, 1));
    cr_expect(has(s, "resp_1", 1, 1));
    cr_expect(has(s, "resp_2", 1, 1));
    cr_expect_eq(s->count, 2);
    cr_expect_eq(s->bytes, 2 * one);
    /* larger than the whole budget: not kept, and nothing else is dropped for it */
    cr_expect(!put(s, "resp_big", 1, one * 3, 0));
    cr_expect(!has(s, "resp_big", 1, 1));
    cr_expect(has(s, "resp_1", 1, 1));
    cr_expect(has(s, "resp_2", 1, 1));
    cr_expect_eq(s->count, 2);
    /* one that needs both places: both older ones go */
    cr_assert(put(s, "resp_wide", 1, one + 100, 0));
    cr_expect(!has(s, "resp_1", 1, 1));
    cr_expect(!has(s, "resp_2", 1, 1));
    cr_expect(has(s, "resp_wide", 1, 1));
    cr_expect_eq(s->count, 1);
    srv_response_store_destroy(s);
    /* exactly the budget fits; a budget of 0 keeps nothing */
    s = store_new(one, 100, 60);
    cr_expect(put(s, "resp_0", 1, 100, 0));
    cr_expect(has(s, "resp_0", 1, 0));
    srv_response_store_destroy(s);
    s = store_new(0, 100, 60);
    cr_expect(!put(s, "resp_0", 1, 0, 0));
    cr_expect(!has(s, "resp_0", 1, 0));
    srv_response_store_destroy(s);
}

Test(response_store, bounded_by_count_oldest_first) {
    srv_response_store *s = store_new(1 << 20, 2, 60);
    cr_assert(put(s, "resp_0", 1, 1, 0));
    cr_assert(put(s, "resp_1", 2, 1, 0));
    cr_assert(put(s, "resp_2", 1, 1, 0));
    cr_expect(!has(s, "resp_0", 1, 1));
    cr_expect(has(s, "resp_1", 2, 1));
    cr_expect(has(s, "resp_2", 1, 1));
    cr_expect_eq(s->count, 2);
    /* a deleted entry frees its place: nothing else goes */
    cr_assert(srv__store_delete(s, "resp_1", 2, 1));
    cr_assert(put(s, "resp_3", 1, 1, 1));
    cr_expect(has(s, "resp_2", 1, 1));
    cr_expect(has(s, "resp_3", 1, 1));
    srv_response_store_destroy(s);
    /* at least one is kept */
    s = store_new(1 << 20, 0, 60);
    cr_assert(put(s, "resp_0", 1, 1, 0));
    cr_assert(put(s, "resp_1", 1, 1, 0));
    cr_expect(!has(s, "resp_0", 1, 1));
    cr_expect(has(s, "resp_1", 1, 1));
    srv_response_store_destroy(s);
}

Test(response_store, entries_expire_after_the_ttl) {
    srv_response_store *s = store_new(1 << 20, 100, 10);
    cr_assert(put(s, "resp_0", 1, 1, 100));
    cr_assert(put(s, "resp_1", 1, 1, 105));
    cr_expect(has(s, "resp_0", 1, 109.99));
    cr_expect(!has(s, "resp_0", 1, 110)); /* expired at put time + ttl */
    cr_expect(has(s, "resp_1", 1, 110));
    cr_expect(!srv__store_delete(s, "resp_0", 1, 111)); /* an expired entry is a miss */
    cr_expect(!has(s, "resp_1", 1, 115));
    /* the expired are dropped when the next one comes */
    cr_expect_eq(s->count, 2);
    cr_assert(put(s, "resp_2", 1, 1, 112));
    cr_expect_eq(s->count, 2);
    cr_expect_str_eq(s->oldest->id, "resp_1");
    cr_assert(put(s, "resp_3", 1, 1, 120));
    cr_expect_eq(s->count, 2);
    cr_expect(has(s, "resp_2", 1, 121));
    cr_expect(has(s, "resp_3", 1, 121));
    srv_response_store_destroy(s);
}

Test(response_store, a_null_store_keeps_nothing) {
    cr_expect(!put(NULL, "resp_0", 1, 10, 0)); /* the references are dropped (no leak under ASan) */
    cr_expect(!has(NULL, "resp_0", 1, 0));
    json_t *response = NULL;
    cr_expect(!srv__store_get(NULL, "resp_0", 1, &response, NULL, 0));
    cr_expect_null(response);
    cr_expect(!srv__store_delete(NULL, "resp_0", 1, 0));
    srv_response_store_destroy(NULL);
}

Test(response_store, an_id_too_long_is_not_kept) {
    srv_response_store *s = store_new(1 << 20, 100, 60);
    char id[64];
    memset(id, 'a', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    cr_expect(!put(s, id, 1, 1, 0));
    cr_expect(!has(s, id, 1, 0));
    cr_expect_eq(s->count, 0);
    id[47] = '\0'; /* 47 characters fit */
    cr_expect(put(s, id, 1, 1, 0));
    cr_expect(has(s, id, 1, 0));
    srv_response_store_destroy(s);
}

/* More entries than buckets: ids that share a bucket are still told apart. */
Test(response_store, many_entries_share_buckets) {
    enum { N = 3 * STORE_BUCKETS };
    srv_response_store *s = store_new((size_t)1 << 30, N, 60);
    char id[48];
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof id, "resp_%08x", i);
        cr_assert(put(s, id, (uint64_t)(i % 3), 1, 0));
    }
    cr_expect_eq(s->count, N);
    for (int i = 0; i < N; i += 2) {
        snprintf(id, sizeof id, "resp_%08x", i);
        cr_assert(srv__store_delete(s, id, (uint64_t)(i % 3), 1), "%s", id);
    }
    int found = 0, wrong = 0;
    for (int i = 0; i < N; i++) {
        snprintf(id, sizeof id, "resp_%08x", i);
        found += has(s, id, (uint64_t)(i % 3), 1);
        wrong += has(s, id, (uint64_t)(i % 3 + 1), 1);
    }
    cr_expect_eq(found, N / 2);
    cr_expect_eq(wrong, 0);
    cr_expect_eq(s->count, N / 2);
    srv_response_store_destroy(s);
}

/* ---- the store: honest bytes ---- */

/* A message-heavy conversation of n messages (what made the trees cost 17x their text). */
static json_t *messages(int n, const char *tag) {
    json_t *c = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(c, json_pack("{s:s,s:s+}", "role", i % 2 ? "assistant" : "user", "content", tag,
                                           i % 3 ? "" : " and some more words"));
    return c;
}

/* The sum of the charges of the entries held, checked against the store's and its keys'
 * totals (under no lock: the tests are single-threaded). */
static size_t held_bytes(srv_response_store *s) {
    size_t sum = 0;
    int n = 0;
    for (store_entry *e = s->oldest; e; e = e->newer, n++) sum += e->bytes;
    cr_assert_eq(n, s->count);
    size_t by_key = 0;
    int keys = 0;
    for (size_t b = 0; b < TENANT_BUCKETS; b++)
        for (store_tenant *t = s->tenant_buckets[b]; t; t = t->next_in_bucket, keys++) {
            size_t mine = 0;
            int count = 0;
            for (store_entry *e = t->oldest; e; e = e->key_newer, count++) {
                cr_assert_eq(e->tenant, t);
                mine += e->bytes;
            }
            cr_assert_eq(mine, t->bytes);
            cr_assert_eq(count, t->count);
            cr_assert_gt(count, 0); /* a key with none is freed */
            by_key += mine;
        }
    cr_assert_eq(keys, s->tenants);
    cr_assert_eq(by_key, sum);
    cr_assert_eq(sum, s->bytes);
    return sum;
}

Test(response_store, charges_at_least_the_text_and_what_malloc_holds) {
    srv_response_store *s = store_new(1 << 20, 100, 60);
    const int sizes[] = {0, 1, 7, 60, 200};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char id[48];
        snprintf(id, sizeof id, "resp_%zu", i);
        json_t *response = response_of(id, (size_t)sizes[i] * 10), *conversation = messages(sizes[i], id);
        char *a = json_dumps(response, JSON_COMPACT), *b = json_dumps(conversation, JSON_COMPACT);
        size_t before = s->bytes;
        cr_assert(srv__store_put(s, id, 1, response, conversation, 0));
        size_t charged = s->bytes - before;
        cr_expect_geq(charged, strlen(a) + 1 + strlen(b) + 1 + sizeof(store_entry), "%s", id);
        cr_expect_eq(charged, s->newest->bytes);
        /* at least the block malloc really gave the entry */
        cr_expect_geq(charged, malloc_usable_size(s->newest) + sizeof(size_t), "%s", id);
        /* and not much more than the text: the trees are not kept */
        cr_expect_leq(charged, strlen(a) + strlen(b) + sizeof(store_entry) + 64, "%s", id);
        free(a);
        free(b);
    }
    held_bytes(s);
    srv_response_store_destroy(s);
}

/* What is put comes back equal (numbers, escapes, NUL, Unicode, order), and each read is
 * a tree of its own. */
Test(response_store, the_text_parses_back_to_what_was_put) {
    srv_response_store *s = store_new(1 << 20, 100, 60);
    json_t *response = jq("{'id':'resp_t','z':1,'a':[1.5,-0,1e300,0.1,true,null],'s':'tab\\tquote\\'nul\\u0000end',"
                          "'u':'\\u00e9\\u4e2d\\ud83d\\ude00','nested':{'b':{}}}");
    json_t *conversation = messages(5, "x");
    json_t *want_r = json_deep_copy(response), *want_c = json_deep_copy(conversation);
    cr_assert(srv__store_put(s, "resp_t", 1, response, conversation, 0));
    json_t *r1 = NULL, *r2 = NULL, *c1 = NULL;
    cr_assert(srv__store_get(s, "resp_t", 1, &r1, &c1, 1));
    cr_assert(srv__store_get(s, "resp_t", 1, &r2, NULL, 1));
    cr_expect(json_equal(r1, want_r));
    cr_expect(json_equal(c1, want_c));
    cr_expect(r1 != r2);
    char *order = json_dumps(r1, JSON_COMPACT); /* the keys in the order they were put */
    cr_expect(strncmp(order, "{\"id\":\"resp_t\",\"z\":1,\"a\"", 24) == 0, "%s", order);
    free(order);
    json_decref(r1);
    json_decref(r2);
    json_decref(c1);
    json_decref(want_r);
    json_decref(want_c);
    srv_response_store_destroy(s);
}

/* Random puts of every size under four keys, deletes and expiry: the entries held never
 * charge more than the budget, nor a key more than its share. */
Test(response_store, never_holds_more_than_its_budget) {
    enum { BUDGET = 64 << 10, SHARE = 24 << 10 };
    for (int share = 0; share < 2; share++) {
        srv_response_store *s = store_new(BUDGET, 1000, 50);
        if (share) srv_response_store_set_key_bytes(s, SHARE);
        unsigned seed = 12345;
        int kept = 0;
        for (int i = 0; i < 3000; i++) {
            seed = seed * 1103515245u + 12345u;
            char id[48];
            snprintf(id, sizeof id, "resp_%d", i);
            uint64_t key = 1 + (seed >> 8) % 4;
            double now = i * 0.1;
            int n = (int)((seed >> 12) % 120);
            kept += srv__store_put(s, id, key, response_of(id, (seed >> 4) % 300), messages(n, id), now);
            if (i % 7 == 0) {
                snprintf(id, sizeof id, "resp_%d", i / 2);
                srv__store_delete(s, id, 1 + (uint64_t)(i % 4), now);
            }
            cr_assert_leq(held_bytes(s), BUDGET, "after %d", i);
            for (size_t b = 0; share && b < TENANT_BUCKETS; b++)
                for (store_tenant *t = s->tenant_buckets[b]; t; t = t->next_in_bucket)
                    cr_assert_leq(t->bytes, SHARE, "after %d", i);
        }
        cr_expect_eq(kept, 3000); /* none is larger than a share */
        srv_store_stats st;
        srv_response_store_stats(s, &st);
        cr_expect_eq(st.bytes, s->bytes);
        cr_expect_eq(st.entries, s->count);
        cr_expect_eq(st.keys, s->tenants);
        cr_expect_eq(st.stored, (uint64_t)kept);
        cr_expect_gt(st.expired + st.evicted_own + st.evicted_other, 0);
        srv_response_store_destroy(s);
    }
}

/* ---- the store: each key's share ---- */

/* Key 2 stores a conversation; key 1 floods the store with far more than it holds. */
static void flood(srv_response_store *s, uint64_t key, int n, size_t pad) {
    char id[48];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof id, "resp_f%06d", i);
        cr_assert(put(s, id, key, pad, 0));
    }
}

Test(response_store, a_key_past_its_share_evicts_only_its_own) {
    json_t *r0 = response_of("resp_f000000", 1000), *c0 = conversation_for("resp_f000000");
    size_t one = entry_bytes(r0, c0);
    json_decref(r0);
    json_decref(c0);
    srv_response_store *s = store_new(10 * one, 1000, 60);
    srv_response_store_set_key_bytes(s, 4 * one); /* two keys' shares fit in the store */
    cr_assert(put(s, "resp_b000000", 2, 1000, 0));
    cr_assert(put(s, "resp_b000001", 2, 1000, 0));
    flood(s, 1, 200, 1000);
    cr_expect(has(s, "resp_b000000", 2, 1));
    cr_expect(has(s, "resp_b000001", 2, 1));
    cr_expect(has(s, "resp_f000199", 1, 1));
    cr_expect(!has(s, "resp_f000195", 1, 1)); /* 4 of key 1's fit its share */
    srv_store_stats st;
    srv_response_store_stats(s, &st);
    cr_expect_eq(st.evicted_other, 0);
    cr_expect_eq(st.evicted_own, 196);
    cr_expect_eq(st.entries, 6);
    cr_expect_eq(st.keys, 2);
    /* key 2 past its own share drops its own oldest */
    cr_assert(put(s, "resp_b000002", 2, 1000, 0));
    cr_assert(put(s, "resp_b000003", 2, 1000, 0));
    cr_assert(put(s, "resp_b000004", 2, 1000, 0));
    cr_expect(!has(s, "resp_b000000", 2, 1));
    cr_expect(has(s, "resp_b000001", 2, 1));
    cr_expect(has(s, "resp_f000199", 1, 1));
    /* one larger than a share is not kept, and drops nothing */
    cr_expect(!put(s, "resp_big", 2, 5 * one, 0));
    cr_expect(has(s, "resp_b000001", 2, 1));
    srv_response_store_stats(s, &st);
    cr_expect_eq(st.refused, 1);
    /* a share of 0, or past the budget, is the whole budget */
    srv_response_store_set_key_bytes(s, 0);
    cr_expect_eq(s->key_max_bytes, s->max_bytes);
    srv_response_store_set_key_bytes(s, s->max_bytes * 2);
    cr_expect_eq(s->key_max_bytes, s->max_bytes);
    held_bytes(s);
    srv_response_store_destroy(s);
}

/* With no per-key cap (the default), a full store takes from the key that holds the
 * most: a flood evicts its own once it holds more than the others, never a smaller key. */
Test(response_store, when_full_the_key_holding_the_most_gives_way) {
    json_t *r0 = response_of("resp_f000000", 1000), *c0 = conversation_for("resp_f000000");
    size_t one = entry_bytes(r0, c0);
    json_decref(r0);
    json_decref(c0);
    srv_response_store *s = store_new(10 * one, 1000, 60);
    for (int i = 0; i < 3; i++) {
        char id[48];
        snprintf(id, sizeof id, "resp_b%06d", i);
        cr_assert(put(s, id, 2, 1000, 0));
    }
    flood(s, 1, 500, 1000);
    for (int i = 0; i < 3; i++) {
        char id[48];
        snprintf(id, sizeof id, "resp_b%06d", i);
        cr_expect(has(s, id, 2, 1), "%s", id);
    }
    srv_store_stats st;
    srv_response_store_stats(s, &st);
    cr_expect_eq(st.evicted_other, 0);
    cr_expect_eq(st.entries, 10); /* key 1 uses the rest of the store */
    /* the other way round: a key holding the most gives way to a smaller one */
    cr_assert(put(s, "resp_b000003", 2, 1000, 0));
    cr_expect(has(s, "resp_b000000", 2, 1));
    cr_expect(!has(s, "resp_f000493", 1, 1));
    srv_response_store_stats(s, &st);
    cr_expect_eq(st.evicted_other, 1);
    srv_response_store_destroy(s);
    /* the count bound likewise takes from the key with the most entries */
    s = store_new(1 << 20, 10, 60);
    cr_assert(put(s, "resp_b000000", 2, 5000, 0)); /* the most bytes, one entry */
    flood(s, 1, 50, 1);
    cr_expect(has(s, "resp_b000000", 2, 1));
    cr_expect_eq(s->count, 10);
    held_bytes(s);
    srv_response_store_destroy(s);
}

/* Key B's conversation is continued with previous_response_id after key A's flood. */
Test(responses_request, another_keys_flood_leaves_a_conversation_continuable, .init = fixture_responses,
     .fini = fixture_close) {
    srv_response_store_destroy(fx.mi.responses);
    cr_assert_eq(srv_response_store_create(64 << 10, 100, 3600, &fx.mi.responses), SP_OK);
    srv_response_store_set_key_bytes(fx.mi.responses, 32 << 10);
    store_turn("resp_keep", TENANT, "[{'role':'user','content':'KEPT-QUESTION'},{'role':'assistant','content':'A'}]");
    for (int i = 0; i < 300; i++) {
        char id[48];
        snprintf(id, sizeof id, "resp_other_%d", i);
        cr_assert(
            srv__store_put(fx.mi.responses, id, OTHER_TENANT, response_of(id, 200), messages(40, id), sched_now()));
    }
    srv_request r;
    parse_ok("{'previous_response_id':'resp_keep','input':'NEXT'}", &r);
    const char *order[] = {"user\nKEPT-QUESTION", "assistant\nA", "user\nNEXT"};
    cr_expect(prompt_has_in_order(&r, order, sizeof order / sizeof order[0]), "%s", r.prompt_text);
    srv_request_free(&r);
}

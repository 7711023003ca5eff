/* test_anthropic.c: Anthropic's Messages API over chat (server/api/anthropic.c), on the default
 * model's vocab and template (stories260K with a thinking template for `thinking`):
 *
 *   anthropic_request  bodies translated into the exact chat body (system, text, tool_use,
 *                      tool_result, tools, each tool_choice, stop_sequences, prefill,
 *                      thinking), the parsed request (max_tokens cut to the context), and
 *                      every refusal a 400 (or 404) naming Anthropic's path
 *   anthropic_count    count_tokens: the prompt a generation would run, even past the context
 *   anthropic_errors   Anthropic's error shape and type per status
 *   anthropic_render   a chat answer as a message (blocks, stop_reason, stop_sequence, usage),
 *                      also from scheduler outputs through srv_render_response
 *   anthropic_stream   scripted chat events into the exact Anthropic event sequence
 *
 * JSON literals here are written with ' for " (jq below). */
#include <criterion/criterion.h>

#include "server/api/anthropic.c"
#include "server/api/anthropic_answer.c"
#include "tests/unit/server/openai_fixture.h"

/* The chat body body (with ' for ") translates into. */
static json_t *translate(const char *body) {
    json_t *root = jq(body), *chat = NULL;
    srv_error err = {0};
    int64_t max_tokens = 0;
    sp_status st = msg_translate(root, &fx.mi, true, &chat, &max_tokens, &err);
    cr_assert_eq(st, SP_OK, "%s: %s (param %s)", body, err.message, err.param);
    json_decref(root);
    return chat;
}

static void expect_translation(const char *body, const char *want) {
    json_t *chat = translate(body);
    expect_json(chat, want);
    json_decref(chat);
}

static void parse_ok(const char *body, srv_request *r) {
    json_t *j = jq(body);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    srv_error err;
    sp_status st = srv__messages_parse(text, strlen(text), &fx.mi, r, &err);
    cr_assert_eq(st, SP_OK, "%s: %s (param %s)", text, err.message, err.param);
    free(text);
}

#define HI "'messages':[{'role':'user','content':'hi'}]"

/* A template that thinks (</think> in its source) and honours enable_thinking false. */
static const char THINKING_TEMPLATE[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}";

/* ---- translation ---- */

Test(anthropic_request, text_system_and_sampling, .init = fixture_smol, .fini = fixture_close) {
    expect_translation("{'model':'SmolLM2-135M-Instruct.Q4_1','max_tokens':64,'system':'Be brief.',"
                       "'messages':[{'role':'user','content':'hi'},{'role':'assistant','content':'hello'},"
                       "{'role':'user','content':[{'type':'text','text':'a','cache_control':{'type':'ephemeral'}},"
                       "{'type':'text','text':'b'}]}],'temperature':0.5,'top_p':0.9,'top_k':40,"
                       "'stop_sequences':['END','\\n\\n'],'stream':true,'metadata':{'user_id':'u1'},"
                       "'service_tier':'auto','cache_control':{'type':'ephemeral'}}",
                       "{'model':'SmolLM2-135M-Instruct.Q4_1','messages':[{'role':'system','content':'Be brief.'},"
                       "{'role':'user','content':'hi'},{'role':'assistant','content':'hello'},"
                       "{'role':'user','content':'a\\nb'}],'temperature':0.5,'top_p':0.9,'top_k':40,"
                       "'stop':['END','\\n\\n'],'stream':true,'stream_options':{'include_usage':true}}");
    /* system as text blocks; no stream, no stream_options */
    expect_translation("{'max_tokens':5,'system':[{'type':'text','text':'A'},{'type':'text','text':'B'}]," HI "}",
                       "{'messages':[{'role':'system','content':'A\\nB'},{'role':'user','content':'hi'}]}");
    /* an empty system is no system message */
    expect_translation("{'max_tokens':5,'system':''," HI "}", "{'messages':[{'role':'user','content':'hi'}]}");
}

Test(anthropic_request, tool_use_and_tool_result, .init = fixture_smol, .fini = fixture_close) {
    expect_translation(
        "{'max_tokens':50,'messages':[{'role':'user','content':'Weather?'},"
        "{'role':'assistant','content':[{'type':'thinking','thinking':'hmm','signature':'s'},"
        "{'type':'text','text':'Let me look.'},"
        "{'type':'tool_use','id':'toolu_1','name':'get_weather','input':{'city':'Paris'}},"
        "{'type':'tool_use','id':'toolu_2','name':'add','input':{}}]},"
        "{'role':'user','content':[{'type':'tool_result','tool_use_id':'toolu_1','content':'Sunny'},"
        "{'type':'tool_result','tool_use_id':'toolu_2','content':[{'type':'text','text':'x'},"
        "{'type':'text','text':'y'}],'is_error':true},{'type':'text','text':'Thanks'}]}]}",
        "{'messages':[{'role':'user','content':'Weather?'},"
        "{'role':'assistant','content':'Let me look.','reasoning_content':'hmm','tool_calls':["
        "{'id':'toolu_1','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\':\\'Paris\\'}'}},"
        "{'id':'toolu_2','type':'function','function':{'name':'add','arguments':'{}'}}]},"
        "{'role':'tool','tool_call_id':'toolu_1','name':'get_weather','content':'Sunny'},"
        "{'role':'tool','tool_call_id':'toolu_2','name':'add','content':'Error: x\\ny'},"
        "{'role':'user','content':'Thanks'}]}");
}

#define TOOL "{'name':'get_weather','description':'The weather','input_schema':{'type':'object'}}"
#define FN \
    "{'type':'function','function':{'name':'get_weather','description':'The weather','parameters':{'type':'object'}}}"

Test(anthropic_request, tools_and_each_tool_choice, .init = fixture_smol, .fini = fixture_close) {
    expect_translation("{'max_tokens':5," HI ",'tools':[" TOOL ",{'type':'custom','name':'b','input_schema':{}}]}",
                       "{'messages':[{'role':'user','content':'hi'}],'tools':[" FN
                       ",{'type':'function','function':{'name':'b','parameters':{}}}]}");
    const char *choices[][2] = {
        {"{'type':'auto'}", "'tool_choice':'auto'"},
        {"{'type':'any'}", "'tool_choice':'required'"},
        {"{'type':'tool','name':'get_weather'}", "'tool_choice':{'type':'function','function':{'name':'get_weather'}}"},
        {"{'type':'none'}", "'tool_choice':'none'"},
        {"{'type':'any','disable_parallel_tool_use':true}", "'tool_choice':'required','parallel_tool_calls':false"},
    };
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        char body[512], want[512];
        snprintf(body, sizeof body, "{'max_tokens':5," HI ",'tools':[" TOOL "],'tool_choice':%s}", choices[i][0]);
        snprintf(want, sizeof want, "{'messages':[{'role':'user','content':'hi'}],'tools':[" FN "],%s}", choices[i][1]);
        expect_translation(body, want);
    }
}

Test(anthropic_request, last_assistant_text_is_a_prefill, .init = fixture_smol, .fini = fixture_close) {
    expect_translation("{'max_tokens':5,'messages':[{'role':'user','content':'hi'},{'role':'assistant',"
                       "'content':[{'type':'text','text':'The answer is'}]}]}",
                       "{'messages':[{'role':'user','content':'hi'},{'role':'assistant','content':'The answer is'}],"
                       "'continue_final_message':true}");
    srv_request r;
    parse_ok("{'max_tokens':5,'messages':[{'role':'user','content':'hi'},{'role':'assistant','content':'The sky'}]}",
             &r);
    size_t n = strlen(r.prompt_text);
    cr_expect(n > 7 && strcmp(r.prompt_text + n - 7, "The sky") == 0, "prompt: %s", r.prompt_text);
    srv_request_free(&r);
}

Test(anthropic_request, parsed_request, .init = fixture_smol, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'max_tokens':64,'system':'SYS-TEXT','stream':true,'stop_sequences':['END'],'temperature':0.25,"
             "'top_k':7," HI "}",
             &r);
    cr_expect_eq(r.endpoint, SRV_ENDPOINT_CHAT);
    cr_expect_eq(r.api, SRV_ENDPOINT_MESSAGES);
    cr_expect(r.stream && r.include_usage);
    cr_expect_eq(r.max_tokens[0], 64);
    cr_expect_eq(r.params.max_tokens, 64);
    cr_expect_eq(r.params.n_stop, 1);
    cr_expect_str_eq(r.params.stop[0], "END");
    cr_expect_float_eq(r.params.sampling.temperature, 0.25f, 1e-6);
    cr_expect_eq(r.params.sampling.top_k, 7);
    cr_expect(strstr(r.prompt_text, "SYS-TEXT") != NULL, "%s", r.prompt_text);
    expect_json(r.api_fields, "{'model':'SmolLM2-135M-Instruct.Q4_1','clamped':false}");
    srv_request_free(&r);
    /* the model asked for is the one the answer names */
    parse_ok("{'model':'SmolLM2-135M-Instruct.Q4_1.gguf','max_tokens':1," HI "}", &r);
    cr_expect_str_eq(msg_model(&r, &fx.mi), "SmolLM2-135M-Instruct.Q4_1.gguf");
    srv_request_free(&r);
}

Test(anthropic_request, max_tokens_past_the_context_gets_what_it_leaves, .init = fixture_smol, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'max_tokens':100000," HI "}", &r);
    cr_expect_eq(r.max_tokens[0], fx.mi.max_seq_len - r.prompt_lens[0]);
    cr_expect_eq(r.params.max_tokens, r.max_tokens[0]);
    cr_expect(json_is_true(json_object_get(r.api_fields, "clamped")));
    srv_request_free(&r);
}

Test(anthropic_request, tools_reach_the_prompt, .init = fixture_smol, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'max_tokens':50," HI ",'tools':[" TOOL "],'tool_choice':{'type':'tool','name':'get_weather'}}", &r);
    cr_expect_eq(r.tool_choice, SRV_TOOL_CHOICE_NAMED);
    cr_expect_str_eq(r.tool_choice_name, "get_weather");
    cr_expect_not_null(r.params.grammar); /* a forced call is enforced */
    cr_expect(strstr(r.prompt_text, "get_weather") != NULL);
    srv_request_free(&r);
}

Test(anthropic_request, thinking_on_a_model_that_thinks) {
    fixture_stories_source(THINKING_TEMPLATE);
    cr_assert(fx.mi.reasoning_tags);
    expect_translation("{'max_tokens':3000,'thinking':{'type':'enabled','budget_tokens':1024}," HI "}",
                       "{'messages':[{'role':'user','content':'hi'}],'max_reasoning_tokens':1024,"
                       "'chat_template_kwargs':{'enable_thinking':true}}");
    expect_translation("{'max_tokens':30,'thinking':{'type':'adaptive'}," HI "}",
                       "{'messages':[{'role':'user','content':'hi'}],'chat_template_kwargs':{'enable_thinking':true}}");
    expect_translation(
        "{'max_tokens':30,'thinking':{'type':'disabled'}," HI "}",
        "{'messages':[{'role':'user','content':'hi'}],'chat_template_kwargs':{'enable_thinking':false}}");
    srv_request r;
    parse_ok("{'max_tokens':30,'thinking':{'type':'disabled'}," HI "}", &r);
    size_t n = strlen(r.prompt_text);
    cr_expect(n > 19 && strcmp(r.prompt_text + n - 19, "<think>\n\n</think>\n\n") == 0, "%s", r.prompt_text);
    srv_request_free(&r);
    parse_ok("{'max_tokens':3000,'thinking':{'type':'enabled','budget_tokens':2000}," HI "}", &r);
    cr_expect_eq(r.params.max_reasoning_tokens, 2000);
    srv_request_free(&r);
    fixture_close();
}

/* disabled on a model that does not think changes nothing */
Test(anthropic_request, thinking_disabled_on_a_model_that_does_not_think, .init = fixture_smol, .fini = fixture_close) {
    expect_translation("{'max_tokens':30,'thinking':{'type':'disabled'}," HI "}",
                       "{'messages':[{'role':'user','content':'hi'}]}");
}

/* ---- refusals ---- */

typedef struct bad_body {
    const char *body;
    const char *param;
    int status;
} bad_body;

#define U(content) "'messages':[{'role':'user','content':" content "}]"
#define CALL       "{'role':'assistant','content':[{'type':'tool_use','id':'t1','name':'f','input':{}}]}"
static const bad_body BAD[] = {
    {"{'messages':[{'role':'user','content':'hi'}]}", "max_tokens", 400},
    {"{'max_tokens':0," HI "}", "max_tokens", 400},
    {"{'max_tokens':'5'," HI "}", "max_tokens", 400},
    {"{'max_tokens':5}", "messages", 400},
    {"{'max_tokens':5,'messages':[]}", "messages", 400},
    {"{'max_tokens':5,'messages':'hi'}", "messages", 400},
    {"{'max_tokens':5,'messages':[5]}", "messages[0]", 400},
    {"{'max_tokens':5,'messages':[{'content':'hi'}]}", "messages[0].role", 400},
    {"{'max_tokens':5,'messages':[{'role':'system','content':'hi'}]}", "messages[0].role", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'tool','content':'hi'}]}", "messages[1].role",
     400},
    {"{'max_tokens':5,'messages':[{'role':'user'}]}", "messages[0].content", 400},
    {"{'max_tokens':5," U("5") "}", "messages[0].content", 400},
    {"{'max_tokens':5," U("[]") "}", "messages[0].content", 400},
    {"{'max_tokens':5," U("['hi']") "}", "messages[0].content[0]", 400},
    {"{'max_tokens':5," U("[{'text':'hi'}]") "}", "messages[0].content[0].type", 400},
    {"{'max_tokens':5," U("[{'type':5}]") "}", "messages[0].content[0].type", 400},
    {"{'max_tokens':5," U("[{'type':'text','text':'a'},{'type':'image','source':{}}]") "}", "messages[0].content[1]",
     400},
    {"{'max_tokens':5," U("[{'type':'document','source':{}}]") "}", "messages[0].content[0]", 400},
    {"{'max_tokens':5," U("[{'type':'video'}]") "}", "messages[0].content[0]", 400},
    {"{'max_tokens':5," U("[{'type':'text'}]") "}", "messages[0].content[0].text", 400},
    {"{'max_tokens':5," U("[{'type':'text','text':5}]") "}", "messages[0].content[0].text", 400},
    {"{'max_tokens':5," U("[{'type':'tool_use','id':'a','name':'f','input':{}}]") "}", "messages[0].content[0]", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':"
     "'tool_result','tool_use_id':'x'}]}]}",
     "messages[1].content[0]", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':"
     "'redacted_thinking','data':'x'}]}]}",
     "messages[1].content[0]", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':"
     "'tool_use','name':'f','input':{}}]}]}",
     "messages[1].content[0].id", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':"
     "'tool_use','id':'a','input':{}}]}]}",
     "messages[1].content[0].name", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':"
     "'tool_use','id':'a','name':'f','input':'{}'}]}]}",
     "messages[1].content[0].input", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'},{'role':'assistant','content':[{'type':"
     "'thinking'}]}]}",
     "messages[1].content[0].thinking", 400},
    {"{'max_tokens':5," U("[{'type':'tool_result','tool_use_id':'t1'}]") "}", "messages[0].content[0].tool_use_id",
     400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'}," CALL ",{'role':'user','content':[{'type':"
     "'tool_result','tool_use_id':'t2'}]}]}",
     "messages[2].content[0].tool_use_id", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'}," CALL ",{'role':'user','content':[{'type':"
     "'tool_result','tool_use_id':'t1','content':[{'type':'image','source':{}}]}]}]}",
     "messages[2].content[0].content[0]", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'}," CALL ",{'role':'user','content':[{'type':"
     "'tool_result','tool_use_id':'t1','content':5}]}]}",
     "messages[2].content[0].content", 400},
    {"{'max_tokens':5,'messages':[{'role':'user','content':'a'}," CALL ",{'role':'user','content':[{'type':"
     "'tool_result','tool_use_id':'t1','is_error':'yes'}]}]}",
     "messages[2].content[0].is_error", 400},
    {"{'max_tokens':5,'system':5," HI "}", "system", 400},
    {"{'max_tokens':5,'system':[{'type':'image','source':{}}]," HI "}", "system[0]", 400},
    {"{'max_tokens':5,'temperature':1.5," HI "}", "temperature", 400},
    {"{'max_tokens':5,'top_p':0," HI "}", "top_p", 400},
    {"{'max_tokens':5,'top_k':-1," HI "}", "top_k", 400},
    {"{'max_tokens':5,'stream':'yes'," HI "}", "stream", 400},
    {"{'max_tokens':5,'stop_sequences':'END'," HI "}", "stop_sequences", 400},
    {"{'max_tokens':5,'stop_sequences':['']," HI "}", "stop_sequences[0]", 400},
    {"{'max_tokens':5,'stop_sequences':['a',5]," HI "}", "stop_sequences[1]", 400},
    {"{'max_tokens':5,'stop_sequences':['1','2','3','4','5','6','7','8','9','10','11','12','13','14','15','16',"
     "'17']," HI "}",
     "stop_sequences", 400},
    {"{'max_tokens':5,'tools':{}," HI "}", "tools", 400},
    {"{'max_tokens':5,'tools':[5]," HI "}", "tools[0]", 400},
    {"{'max_tokens':5,'tools':[{'type':'web_search_20250305','name':'web_search'}]," HI "}", "tools[0].type", 400},
    {"{'max_tokens':5,'tools':[{'input_schema':{}}]," HI "}", "tools[0].name", 400},
    {"{'max_tokens':5,'tools':[{'name':'a b','input_schema':{}}]," HI "}", "tools[0].name", 400},
    {"{'max_tokens':5,'tools':[{'name':'a','input_schema':{}},{'name':'a','input_schema':{}}]," HI "}", "tools[1].name",
     400},
    {"{'max_tokens':5,'tools':[{'name':'a'}]," HI "}", "tools[0].input_schema", 400},
    {"{'max_tokens':5,'tools':[{'name':'a','input_schema':'x'}]," HI "}", "tools[0].input_schema", 400},
    {"{'max_tokens':5,'tools':[{'name':'a','input_schema':{},'description':5}]," HI "}", "tools[0].description", 400},
    {"{'max_tokens':5,'tools':[{'name':'a','input_schema':{},'strict':true}]," HI "}", "tools[0].strict", 400},
    {"{'max_tokens':5,'tools':[" TOOL "],'tool_choice':'auto'," HI "}", "tool_choice", 400},
    {"{'max_tokens':5,'tools':[" TOOL "],'tool_choice':{}," HI "}", "tool_choice.type", 400},
    {"{'max_tokens':5,'tools':[" TOOL "],'tool_choice':{'type':'required'}," HI "}", "tool_choice.type", 400},
    {"{'max_tokens':5,'tools':[" TOOL "],'tool_choice':{'type':'tool'}," HI "}", "tool_choice.name", 400},
    {"{'max_tokens':5,'tools':[" TOOL "],'tool_choice':{'type':'tool','name':'nope'}," HI "}", "tool_choice.name", 400},
    {"{'max_tokens':5,'tool_choice':{'type':'any'}," HI "}", "tool_choice", 400},
    {"{'max_tokens':5,'tools':[" TOOL "],'tool_choice':{'type':'auto','disable_parallel_tool_use':1}," HI "}",
     "tool_choice.disable_parallel_tool_use", 400},
    {"{'max_tokens':5,'thinking':{'type':'enabled','budget_tokens':2048}," HI "}", "thinking", 400},
    {"{'max_tokens':5,'thinking':{'type':'adaptive'}," HI "}", "thinking", 400},
    {"{'max_tokens':5,'thinking':{'type':'sometimes'}," HI "}", "thinking.type", 400},
    {"{'max_tokens':5,'thinking':{}," HI "}", "thinking.type", 400},
    {"{'max_tokens':5,'thinking':true," HI "}", "thinking", 400},
    {"{'max_tokens':5,'container':'c'," HI "}", "container", 400},
    {"{'max_tokens':5,'mcp_servers':[]," HI "}", "mcp_servers", 400},
    {"{'max_tokens':5,'context_management':{}," HI "}", "context_management", 400},
    {"{'max_tokens':5,'output_config':{'effort':'low'}," HI "}", "output_config", 400},
    {"{'max_tokens':5,'output_format':{'type':'json_schema','schema':{}}," HI "}", "output_format", 400},
    {"{'max_tokens':5,'diagnostics':{}," HI "}", "diagnostics", 400},
    {"{'max_tokens':5,'metadata':'x'," HI "}", "metadata", 400},
    {"{'max_tokens':5,'service_tier':5," HI "}", "service_tier", 400},
    {"{'max_tokens':5,'model':5," HI "}", "model", 400},
    {"{'max_tokens':5,'model':'claude-sonnet-4-5'," HI "}", "model", 404},
};

Test(anthropic_request, every_refusal_names_the_field, .init = fixture_smol, .fini = fixture_close) {
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        json_t *j = jq(BAD[i].body);
        char *text = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        srv_request r;
        srv_error err;
        sp_status st = srv__messages_parse(text, strlen(text), &fx.mi, &r, &err);
        cr_expect(st != SP_OK, "accepted: %s", text);
        if (st == SP_OK) {
            srv_request_free(&r);
        } else {
            cr_expect_eq(err.http_status, BAD[i].status, "%s: %d %s", text, err.http_status, err.message);
            cr_expect_str_eq(err.param, BAD[i].param, "%s: %s", text, err.message);
            /* the Anthropic body names the field too */
            char *e = srv__messages_error_json(&err);
            cr_expect(e && strstr(e, BAD[i].param), "%s", e);
            free(e);
        }
        free(text);
    }
}

Test(anthropic_request, thinking_refusals_on_a_model_that_thinks) {
    fixture_stories_source(THINKING_TEMPLATE);
    static const bad_body bad[] = {
        {"{'max_tokens':3000,'thinking':{'type':'enabled'}," HI "}", "thinking.budget_tokens", 400},
        {"{'max_tokens':3000,'thinking':{'type':'enabled','budget_tokens':1000}," HI "}", "thinking.budget_tokens",
         400},
        {"{'max_tokens':2000,'thinking':{'type':'enabled','budget_tokens':2000}," HI "}", "thinking.budget_tokens",
         400},
        {"{'max_tokens':3000,'thinking':{'type':'enabled','budget_tokens':1024,'display':'omitted'}," HI "}",
         "thinking.display", 400},
        {"{'max_tokens':3000,'thinking':{'type':'adaptive'},'tools':[" TOOL "],'tool_choice':{'type':'any'}," HI "}",
         "thinking", 400},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *root = jq(bad[i].body), *chat = NULL;
        srv_error err = {0};
        int64_t max_tokens = 0;
        cr_expect_neq(msg_translate(root, &fx.mi, true, &chat, &max_tokens, &err), SP_OK, "%s", bad[i].body);
        cr_expect_str_eq(err.param, bad[i].param, "%s: %s", bad[i].body, err.message);
        json_decref(root);
        json_decref(chat);
    }
    fixture_close();
}

Test(anthropic_request, not_json_and_not_an_object, .init = fixture_smol, .fini = fixture_close) {
    srv_request r;
    srv_error err;
    cr_expect_neq(srv__messages_parse("{", 1, &fx.mi, &r, &err), SP_OK);
    cr_expect_eq(err.http_status, 400);
    cr_expect_neq(srv__messages_parse("[]", 2, &fx.mi, &r, &err), SP_OK);
    cr_expect_eq(err.http_status, 400);
}

Test(anthropic_request, prompt_past_the_context_is_a_400, .init = fixture_smol, .fini = fixture_close) {
    fx.mi.max_seq_len = 16;
    srv_request r;
    srv_error err;
    const char *body = "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a b c d e f g h i j k l m n "
                       "o p q r s t u v w x y z\"}]}";
    cr_assert_neq(srv__messages_parse(body, strlen(body), &fx.mi, &r, &err), SP_OK);
    cr_expect_eq(err.http_status, 400);
    cr_expect_str_eq(err.param, "messages");
}

/* ---- count_tokens ---- */

static json_t *count(const char *body, srv_error *err) {
    json_t *j = jq(body);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    json_t *n = srv_messages_count_tokens(text, strlen(text), &fx.mi, err);
    free(text);
    return n;
}

Test(anthropic_count, counts_the_prompt_a_generation_runs, .init = fixture_smol, .fini = fixture_close) {
    const char *bodies[] = {
        "{'max_tokens':5,'system':'Be brief.'," HI "}",
        "{'max_tokens':5," HI ",'tools':[" TOOL "]}",
        "{'max_tokens':5," HI ",'tools':[" TOOL "],'tool_choice':{'type':'none'}}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        srv_request r;
        parse_ok(bodies[i], &r);
        srv_error err;
        json_t *n = count(bodies[i], &err);
        cr_assert_not_null(n, "%s", err.message);
        cr_expect_eq(json_object_size(n), 1);
        cr_expect_eq(json_integer_value(json_object_get(n, "input_tokens")), r.prompt_lens[0], "%s", bodies[i]);
        json_decref(n);
        srv_request_free(&r);
    }
    /* tools add to the prompt */
    srv_error err;
    json_t *a = count("{" HI "}", &err), *b = count("{" HI ",'tools':[" TOOL "]}", &err);
    cr_assert(a && b);
    cr_expect_gt(json_integer_value(json_object_get(b, "input_tokens")),
                 json_integer_value(json_object_get(a, "input_tokens")));
    json_decref(a);
    json_decref(b);
}

Test(anthropic_count, counts_past_the_context_and_refuses_bad_bodies, .init = fixture_smol, .fini = fixture_close) {
    fx.mi.max_seq_len = 8;
    srv_error err;
    json_t *n = count("{'messages':[{'role':'user','content':'one two three four five six seven eight nine'}]}", &err);
    cr_assert_not_null(n, "%s", err.message);
    cr_expect_gt(json_integer_value(json_object_get(n, "input_tokens")), 8);
    json_decref(n);
    cr_expect_null(count("{'messages':[{'role':'user','content':[{'type':'image','source':{}}]}]}", &err));
    cr_expect_str_eq(err.param, "messages[0].content[0]");
    cr_expect_null(count("{'model':'nope'," HI "}", &err));
    cr_expect_eq(err.http_status, 404);
}

/* ---- errors ---- */

Test(anthropic_errors, shape_and_type_per_status) {
    const struct {
        int status;
        const char *type;
    } cases[] = {{400, "invalid_request_error"}, {401, "authentication_error"},  {403, "permission_error"},
                 {404, "not_found_error"},       {405, "invalid_request_error"}, {408, "timeout_error"},
                 {413, "request_too_large"},     {429, "rate_limit_error"},      {500, "api_error"},
                 {503, "overloaded_error"},      {529, "overloaded_error"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        srv_error err;
        srv_error_set(&err, cases[i].status, "whatever", NULL, NULL, "went wrong");
        char *text = srv__messages_error_json(&err);
        json_t *j = fixture_json(text, strlen(text));
        char want[256];
        snprintf(want, sizeof want, "{'type':'error','error':{'type':'%s','message':'went wrong'}}", cases[i].type);
        expect_json(j, want);
        json_decref(j);
        free(text);
    }
    /* a message that does not name its field gets it in front */
    srv_error err;
    srv_error_make(&err, SRV_ERROR_BAD_REQUEST, "max_tokens", "must be positive");
    char *text = srv__messages_error_json(&err);
    cr_expect_str_eq(text,
                     "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"max_tokens: "
                     "must be positive\"}}");
    free(text);
    srv_error_make(&err, SRV_ERROR_UNAUTHORIZED, NULL, "Incorrect API key provided.");
    text = srv_api_error_json(SRV_ENDPOINT_MESSAGES, &err);
    cr_expect(strstr(text, "authentication_error") != NULL, "%s", text);
    free(text);
}

/* ---- the answer ---- */

static srv_request render_request(bool clamped) {
    srv_request r = {.endpoint = SRV_ENDPOINT_CHAT, .api = SRV_ENDPOINT_MESSAGES, .n = 1};
    r.api_fields = json_pack("{s:s,s:b}", "model", "smol", "clamped", clamped);
    return r;
}

static void expect_render_as(const char *chat, bool clamped, const char *want) {
    srv_request r = render_request(clamped);
    srv_model_info mi = {.served_name = "served"};
    srv_api_answer a = {.id = "msg_1", .created = 1};
    json_t *m = srv__messages_render(&r, &mi, &a, jq(chat));
    cr_assert_not_null(m);
    expect_json(m, want);
    json_decref(m);
    json_decref(r.api_fields);
}

static void expect_render(const char *chat, const char *want) {
    expect_render_as(chat, false, want);
}

#define USAGE "'usage':{'prompt_tokens':12,'completion_tokens':7,'total_tokens':19}"
#define MSG   "'id':'msg_1','type':'message','role':'assistant','model':'smol'"

Test(anthropic_render, answers_as_messages) {
    expect_render(
        "{'choices':[{'index':0,'message':{'role':'assistant','content':'Paris.'},'finish_reason':'stop'}]," USAGE "}",
        "{" MSG ",'content':[{'type':'text','text':'Paris.'}],'stop_reason':'end_turn','stop_sequence':null,"
        "'usage':{'input_tokens':12,'output_tokens':7}}");
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':'Par'},'finish_reason':'stop',"
                  "'stop_reason':'is'}]," USAGE "}",
                  "{" MSG ",'content':[{'type':'text','text':'Par'}],'stop_reason':'stop_sequence','stop_sequence':"
                  "'is','usage':{'input_tokens':12,'output_tokens':7}}");
    expect_render(
        "{'choices':[{'index':0,'message':{'role':'assistant','content':'Pa'},'finish_reason':'length'}]," USAGE "}",
        "{" MSG ",'content':[{'type':'text','text':'Pa'}],'stop_reason':'max_tokens','stop_sequence':null,"
        "'usage':{'input_tokens':12,'output_tokens':7}}");
    expect_render_as(
        "{'choices':[{'index':0,'message':{'role':'assistant','content':'Pa'},'finish_reason':'length'}]," USAGE "}",
        true,
        "{" MSG ",'content':[{'type':'text','text':'Pa'}],'stop_reason':'model_context_window_exceeded',"
        "'stop_sequence':null,'usage':{'input_tokens':12,'output_tokens':7}}");
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':'','reasoning_content':'hm'},"
                  "'finish_reason':'stop'}]," USAGE "}",
                  "{" MSG ",'content':[{'type':'thinking','thinking':'hm','signature':''}],'stop_reason':'end_turn',"
                  "'stop_sequence':null,'usage':{'input_tokens':12,'output_tokens':7}}");
    expect_render("{'choices':[{'index':0,'message':{'role':'assistant','content':'Let me see.','tool_calls':["
                  "{'id':'call_ab12','type':'function','function':{'name':'get_weather','arguments':'{\\'city\\':"
                  "\\'Paris\\'}'}},{'id':'call_cd34','type':'function','function':{'name':'add','arguments':'{}'}}]},"
                  "'finish_reason':'tool_calls'}]," USAGE "}",
                  "{" MSG ",'content':[{'type':'text','text':'Let me see.'},{'type':'tool_use','id':'toolu_ab12',"
                  "'name':'get_weather','input':{'city':'Paris'}},{'type':'tool_use','id':'toolu_cd34','name':'add',"
                  "'input':{}}],'stop_reason':'tool_use','stop_sequence':null,"
                  "'usage':{'input_tokens':12,'output_tokens':7}}");
}

/* A scheduler output ended by a stop string, through srv_render_response (vLLM's stop_reason)
 * into the message, and through the usage chunk a stream's translator reads. */
Test(anthropic_render, stop_sequence_from_the_scheduler_output, .init = fixture_smol, .fini = fixture_close) {
    srv_request r;
    parse_ok("{'max_tokens':20,'stop_sequences':['A','is']," HI "}", &r);
    sched_output o = {.text = "Par",
                      .text_len = 3,
                      .prompt_tokens = r.prompt_lens[0],
                      .completion_tokens = 4,
                      .done = true,
                      .finish = SCHED_FINISH_STOP,
                      .stop_matched = 2};
    const sched_output *outs[] = {&o};
    srv_api_answer a = {.id = "msg_2", .created = 1};
    json_t *m = srv__messages_render(&r, &fx.mi, &a, srv_render_response(&r, &fx.mi, "msg_2", 1, outs, 1));
    cr_assert_not_null(m);
    cr_expect_str_eq(json_string_value(json_object_get(m, "stop_reason")), "stop_sequence");
    cr_expect_str_eq(json_string_value(json_object_get(m, "stop_sequence")), "is");
    json_decref(m);
    char *usage = srv_sse_usage_chunk(&r, &fx.mi, "msg_2", 1, outs, 1);
    cr_expect(strstr(usage, "\"stop_reasons\":[\"is\"]") != NULL, "%s", usage);
    free(usage);
    o.stop_matched = 0; /* an end-of-generation token */
    m = srv__messages_render(&r, &fx.mi, &a, srv_render_response(&r, &fx.mi, "msg_2", 1, outs, 1));
    cr_expect_str_eq(json_string_value(json_object_get(m, "stop_reason")), "end_turn");
    cr_expect(json_is_null(json_object_get(m, "stop_sequence")));
    json_decref(m);
    srv_request_free(&r);
    /* a chat client's usage chunk is unchanged */
    srv_request chat;
    srv_error err;
    const char *body = "{\"stream\":true,\"stream_options\":{\"include_usage\":true},\"stop\":[\"A\",\"is\"],"
                       "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    cr_assert_eq(srv_request_parse(SRV_ENDPOINT_CHAT, body, strlen(body), &fx.mi, &chat, &err), SP_OK);
    usage = srv_sse_usage_chunk(&chat, &fx.mi, "c", 1, outs, 1);
    cr_expect(strstr(usage, "stop_reasons") == NULL, "%s", usage);
    free(usage);
    srv_request_free(&chat);
}

/* ---- streams ---- */

/* The Anthropic events a translator makes of chat events (each with ' for "; NULL: [DONE]). */
static char *stream(bool clamped, const char *const *events, size_t n) {
    srv_request r = render_request(clamped);
    int32_t lens[] = {21};
    r.n_prompts = 1;
    r.prompt_lens = lens;
    srv_model_info mi = {.served_name = "served"};
    srv_api_answer a = {.id = "msg_9", .created = 1};
    srv_api_stream *s = srv__messages_stream(&r, &mi, &a);
    cr_assert_not_null(s);
    strbuf out = {0};
    for (size_t i = 0; i < n; i++) {
        if (!events[i]) {
            srv_api_stream_event(s, SRV_SSE_DONE, &out);
            continue;
        }
        char *e = strdup(events[i]);
        for (char *p = e; *p; p++)
            if (*p == '\'') *p = '"';
        strbuf chunk = {0};
        strbuf_printf(&chunk, "data: %s\n\n", e);
        char *text = strbuf_take(&chunk);
        srv_api_stream_event(s, text, &out);
        free(text);
        free(e);
    }
    srv_api_stream_destroy(s);
    json_decref(r.api_fields);
    char *text = strbuf_take(&out);
    cr_assert_not_null(text);
    return text;
}

/* Expected text: each "NAME DATA" pair as "event: NAME\ndata: DATA\n\n" (' for "). */
static void expect_events(const char *got, const char *const *want, size_t n) {
    strbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        const char *sp = strchr(want[i], ' ');
        strbuf_printf(&b, "event: %.*s\ndata: ", (int)(sp - want[i]), want[i]);
        for (const char *p = sp + 1; *p; p++) strbuf_append(&b, *p == '\'' ? "\"" : p, 1);
        strbuf_append(&b, "\n\n", 2);
    }
    char *w = strbuf_take(&b);
    cr_expect_str_eq(got, w);
    free(w);
}

#define ROLE      "{'choices':[{'index':0,'delta':{'role':'assistant','content':''},'finish_reason':null}],'usage':null}"
#define TEXT(t)   "{'choices':[{'index':0,'delta':{'content':'" t "'},'finish_reason':null}],'usage':null}"
#define THINK(t)  "{'choices':[{'index':0,'delta':{'reasoning_content':'" t "'},'finish_reason':null}],'usage':null}"
#define FINISH(f) "{'choices':[{'index':0,'delta':{},'finish_reason':'" f "'}],'usage':null}"
#define USAGE_CHUNK(n, stop)                                                                                           \
    "{'choices':[],'usage':{'prompt_tokens':21,'completion_tokens':" #n ",'total_tokens':0},'stop_reasons':[" stop "]" \
    "}"
#define START                                                                                                    \
    "message_start {'type':'message_start','message':{'id':'msg_9','type':'message','role':'assistant','model':" \
    "'smol','content':[],'stop_reason':null,'stop_sequence':null,'usage':{'input_tokens':21,'output_tokens':0}}}"
#define STOP_AT(i)  "content_block_stop {'type':'content_block_stop','index':" #i "}"
#define DELTA(i, d) "content_block_delta {'type':'content_block_delta','index':" #i ",'delta':" d "}"
#define END(reason, seq, n)                                                                               \
    "message_delta {'type':'message_delta','delta':{'stop_reason':'" reason "','stop_sequence':" seq "}," \
    "'usage':{'output_tokens':" #n "}}",                                                                  \
        "message_stop {'type':'message_stop'}"

Test(anthropic_stream, thinking_then_text_then_a_stop_sequence) {
    const char *events[] = {ROLE,       THINK("Let"),   THINK(" me"),          TEXT("Par"),
                            TEXT("is"), FINISH("stop"), USAGE_CHUNK(6, "'.'"), NULL};
    char *got = stream(false, events, sizeof events / sizeof events[0]);
    const char *want[] = {
        START,
        "content_block_start {'type':'content_block_start','index':0,'content_block':{'type':'thinking',"
        "'thinking':'','signature':''}}",
        DELTA(0, "{'type':'thinking_delta','thinking':'Let'}"),
        DELTA(0, "{'type':'thinking_delta','thinking':' me'}"),
        STOP_AT(0),
        "content_block_start {'type':'content_block_start','index':1,'content_block':{'type':'text','text':''}}",
        DELTA(1, "{'type':'text_delta','text':'Par'}"),
        DELTA(1, "{'type':'text_delta','text':'is'}"),
        STOP_AT(1),
        END("stop_sequence", "'.'", 6),
    };
    expect_events(got, want, sizeof want / sizeof want[0]);
    free(got);
}

#define HEAD(k, id, name)                                                                                       \
    "{'choices':[{'index':0,'delta':{'tool_calls':[{'index':" #k ",'id':'" id "','type':'function','function':" \
    "{'name':'" name "','arguments':''}}]},'finish_reason':null}],'usage':null}"
#define ARGS(k, a)                                                                                       \
    "{'choices':[{'index':0,'delta':{'tool_calls':[{'index':" #k ",'function':{'arguments':'" a "'}}]}," \
    "'finish_reason':null}],'usage':null}"

Test(anthropic_stream, text_then_tool_calls) {
    const char *events[] = {ROLE,
                            TEXT("Sure."),
                            HEAD(0, "call_a1", "get_weather"),
                            ARGS(0, "{\\'city\\'"),
                            ARGS(0, ":\\'Paris\\'}"),
                            HEAD(1, "call_b2", "add"),
                            ARGS(1, "{}"),
                            FINISH("tool_calls"),
                            USAGE_CHUNK(30, "null"),
                            NULL};
    char *got = stream(false, events, sizeof events / sizeof events[0]);
    const char *want[] = {
        START,
        "content_block_start {'type':'content_block_start','index':0,'content_block':{'type':'text','text':''}}",
        DELTA(0, "{'type':'text_delta','text':'Sure.'}"),
        STOP_AT(0),
        "content_block_start {'type':'content_block_start','index':1,'content_block':{'type':'tool_use',"
        "'id':'toolu_a1','name':'get_weather','input':{}}}",
        DELTA(1, "{'type':'input_json_delta','partial_json':'{\\'city\\''}"),
        DELTA(1, "{'type':'input_json_delta','partial_json':':\\'Paris\\'}'}"),
        STOP_AT(1),
        "content_block_start {'type':'content_block_start','index':2,'content_block':{'type':'tool_use',"
        "'id':'toolu_b2','name':'add','input':{}}}",
        DELTA(2, "{'type':'input_json_delta','partial_json':'{}'}"),
        STOP_AT(2),
        END("tool_use", "null", 30),
    };
    expect_events(got, want, sizeof want / sizeof want[0]);
    free(got);
}

Test(anthropic_stream, length_and_an_empty_answer) {
    const char *events[] = {ROLE, TEXT("a"), FINISH("length"), USAGE_CHUNK(1, "null"), NULL};
    char *got = stream(false, events, sizeof events / sizeof events[0]);
    const char *want[] = {
        START,
        "content_block_start {'type':'content_block_start','index':0,'content_block':{'type':'text','text':''}}",
        DELTA(0, "{'type':'text_delta','text':'a'}"),
        STOP_AT(0),
        END("max_tokens", "null", 1),
    };
    expect_events(got, want, sizeof want / sizeof want[0]);
    free(got);
    got = stream(true, events, sizeof events / sizeof events[0]);
    cr_expect(strstr(got, "\"stop_reason\":\"model_context_window_exceeded\"") != NULL, "%s", got);
    free(got);
    const char *empty[] = {ROLE, FINISH("stop"), USAGE_CHUNK(1, "null"), NULL};
    got = stream(false, empty, sizeof empty / sizeof empty[0]);
    const char *want_empty[] = {START, END("end_turn", "null", 1)};
    expect_events(got, want_empty, sizeof want_empty / sizeof want_empty[0]);
    free(got);
}

Test(anthropic_stream, an_error_ends_the_stream) {
    const char *events[] = {ROLE, TEXT("a"),
                            "{'error':{'message':'the request timed out','type':'timeout_error','param':null,"
                            "'code':'timeout'}}",
                            NULL};
    char *got = stream(false, events, sizeof events / sizeof events[0]);
    const char *want[] = {
        START,
        "content_block_start {'type':'content_block_start','index':0,'content_block':{'type':'text','text':''}}",
        DELTA(0, "{'type':'text_delta','text':'a'}"),
        "error {'type':'error','error':{'type':'timeout_error','message':'the request timed out'}}",
    };
    expect_events(got, want, sizeof want / sizeof want[0]);
    free(got);
    const char *overloaded[] = {"{'error':{'message':'shutting down','type':'unavailable_error','param':null,"
                                "'code':null}}",
                                NULL};
    got = stream(false, overloaded, 2);
    const char *want_overloaded[] = {
        "error {'type':'error','error':{'type':'overloaded_error','message':'shutting down'}}"};
    expect_events(got, want_overloaded, 1);
    free(got);
}

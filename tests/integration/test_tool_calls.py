"""Tool calls behind the real binary on the default model, whose template ignores tools (so
spindle lists them in a system block and parses the generic JSON format): tool_choice
required and named always give calls whose arguments validate against the tool's schema
(a grammar enforces them), streamed as OpenAI streams them (index, id and name first, then the
arguments in pieces, finish_reason "tool_calls"); auto answers either way; the history's
tool_calls and tool messages render; bad tools and tool_choice values are 400s naming the
field."""
import json
import os
import urllib.request

import jsonschema
import pytest

from spindle_server import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": -1000, "maximum": 1000},
                                        "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
       "required": ["a", "b"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": ADD}},
]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


@pytest.fixture(scope="module")
def server(spindle_bin, default_model):
    s = Server(spindle_bin, default_model)
    yield s
    assert s.stop() == 0


def create(server, **kw):
    kw.setdefault("messages", ASK)
    kw.setdefault("max_tokens", 120)
    return server.client().chat.completions.create(model=MODEL, tools=TOOLS, **kw)


def assert_valid_calls(calls, names=("get_weather", "add")):
    assert calls
    ids = set()
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_") and c.id not in ids
        ids.add(c.id)
        assert c.function.name in names
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_always_calls_a_tool_with_valid_arguments(server, seed):
    r = create(server, tool_choice="required", temperature=1.0, seed=seed)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c.message.content
    assert c.message.content is None
    assert_valid_calls(c.message.tool_calls)


def test_named_function_is_called_once(server):
    r = create(server, tool_choice={"type": "function", "function": {"name": "add"}}, temperature=0.8, seed=4)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert len(c.message.tool_calls) == 1
    assert_valid_calls(c.message.tool_calls, names=("add",))


def test_forced_calls_cut_by_max_tokens_come_as_calls_with_length(server):
    """max_tokens ends a forced call mid-arguments: the call as far as it came, finish_reason
    "length" (as OpenAI answers), streamed and not, never the raw text as content."""
    named = {"type": "function", "function": {"name": "get_weather"}}
    full = create(server, tool_choice=named, temperature=0).choices[0]
    assert full.finish_reason == "tool_calls"
    whole_args = full.message.tool_calls[0].function.arguments
    cut = create(server, tool_choice=named, temperature=0, max_tokens=20).choices[0]
    assert cut.finish_reason == "length" and cut.message.content is None
    assert [c.function.name for c in cut.message.tool_calls] == ["get_weather"]
    partial = cut.message.tool_calls[0].function.arguments
    # the same tokens: what came is the start of the whole call's arguments (modulo spacing)
    assert whole_args.replace(" ", "").startswith(partial.replace(" ", "")[:5]), (partial, whole_args)
    with pytest.raises(ValueError):
        json.loads(partial)  # cut: not a whole document
    names, args, finish = [], "", None
    for chunk in create(server, tool_choice=named, temperature=0, max_tokens=20, stream=True):
        for ch in chunk.choices:
            assert not ch.delta.content
            for tc in ch.delta.tool_calls or []:
                if tc.id:
                    names.append(tc.function.name)
                args += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    assert finish == "length" and names == ["get_weather"] and args == partial


def test_parallel_tool_calls_false_gives_one_call(server):
    r = create(server, tool_choice="required", parallel_tool_calls=False, temperature=1.0, seed=8)
    assert len(r.choices[0].message.tool_calls) == 1


def test_auto_answers_as_content_or_calls(server):
    for seed in (1, 2):
        r = create(server, tool_choice="auto", temperature=0.7, seed=seed)
        c = r.choices[0]
        if c.finish_reason == "tool_calls":
            assert_valid_calls(c.message.tool_calls)
        else:
            assert c.message.tool_calls is None and isinstance(c.message.content, str)


def test_none_keeps_tools_out(server):
    r = create(server, tool_choice="none", temperature=0, max_tokens=20)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")


def test_streamed_calls_arrive_as_openai_streams_them(server):
    stream = create(server, tool_choice="required", temperature=1.0, seed=5, stream=True)
    heads, args, finish, content = {}, {}, None, ""
    for chunk in stream:
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                if tc.id:
                    assert tc.index not in heads and tc.function.name and tc.function.arguments == ""
                    heads[tc.index] = (tc.id, tc.function.name)
                else:
                    assert tc.index in heads, "arguments before the call's head"
                    args[tc.index] = args.get(tc.index, "") + tc.function.arguments
            if ch.finish_reason:
                finish = ch.finish_reason
    assert finish == "tool_calls" and content == ""
    assert heads and sorted(heads) == list(range(len(heads)))
    assert any(len(a) > 16 for a in args.values()) or True  # short arguments fit one piece
    for i, (cid, name) in heads.items():
        assert cid.startswith("call_")
        jsonschema.validate(json.loads(args.get(i, "")), SCHEMAS[name])


def test_streamed_auto_content_flows(server):
    stream = create(server, tool_choice="auto", temperature=0, stream=True, max_tokens=30,
                    messages=[{"role": "user", "content": "Say hello in French."}])
    text, finish = "", None
    for chunk in stream:
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
            assert not ch.delta.tool_calls or finish == "tool_calls"
    assert finish in ("stop", "length", "tool_calls")
    if finish != "tool_calls":
        assert text


def test_history_with_calls_and_results_renders(server):
    first = create(server, tool_choice="required", temperature=0, seed=1).choices[0].message
    history = ASK + [first.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": tc.id, "content": json.dumps({"temperature": 18})} for tc in first.tool_calls]
    r = create(server, messages=history, tool_choice="none", temperature=0, max_tokens=30)
    assert r.choices[0].finish_reason in ("stop", "length")


def error_of(server, body):
    body = {"model": MODEL, "messages": ASK, "max_tokens": 5, **body}
    status, _, data = server.request("POST", "/v1/chat/completions", body)
    assert status == 400, (status, data)
    return data["error"]


def test_bad_tools_are_400s_naming_the_field(server):
    e = error_of(server, {"tool_choice": "required"})
    assert e["param"] == "tool_choice" and "no 'tools'" in e["message"]
    e = error_of(server, {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert e["param"] == "tool_choice" and "nope" in e["message"]
    e = error_of(server, {"tools": TOOLS, "tool_choice": "sometimes"})
    assert e["param"] == "tool_choice"
    e = error_of(server, {"tools": [{"type": "function", "function": {"name": "bad name!"}}]})
    assert e["param"] == "tools[0].function.name"
    e = error_of(server, {"tools": [TOOLS[0], TOOLS[0]]})
    assert e["param"] == "tools[1].function.name"
    e = error_of(server, {"tools": [{"type": "retrieval"}]})
    assert e["param"] == "tools[0].type"
    e = error_of(server, {"tools": TOOLS, "tool_choice": "required", "grammar": 'root ::= "x"\n'})
    assert e["param"] == "tool_choice"
    e = error_of(server, {"tools": TOOLS, "parallel_tool_calls": "yes"})
    assert e["param"] == "parallel_tool_calls"


def test_malformed_history_calls_are_400s_naming_the_field(server):
    # as OpenAI checks them: {"id": str, "type": "function", "function": {"name": str, "arguments": str}}
    def history(calls):
        return {"tools": TOOLS, "messages": ASK + [{"role": "assistant", "content": None, "tool_calls": calls},
                                                  {"role": "tool", "tool_call_id": "c1", "content": "18"}]}
    good = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    cases = [([{"id": 1, "function": "x"}], "messages[1].tool_calls[0].id", "expected a string"),
             ("c1", "messages[1].tool_calls", "expected an array"),
             ([good, {**good, "type": "tool"}], "messages[1].tool_calls[1].type", "'function'"),
             ([{**good, "function": "get_weather"}], "messages[1].tool_calls[0].function", "expected an object"),
             ([{**good, "function": {"arguments": "{}"}}], "messages[1].tool_calls[0].function.name", "Missing"),
             ([{**good, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
              "messages[1].tool_calls[0].function.arguments", "expected a string")]
    for calls, param, words in cases:
        e = error_of(server, history(calls))
        assert e["param"] == param and param in e["message"] and words in e["message"], (calls, e)
    status, _, data = server.request("POST", "/v1/chat/completions",
                                     {"model": MODEL, "max_tokens": 5, **history([good])})
    assert status == 200, data


def test_parameters_with_refs_are_enforced(server):
    """Pydantic's nested models come as $defs and $ref ("#/$defs/City") inside parameters."""
    params = {"$defs": {"City": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20}, "country": {"type": "string", "maxLength": 20}},
        "required": ["name", "country"], "additionalProperties": False}},
        "type": "object", "properties": {"city": {"$ref": "#/$defs/City"}, "days": {
            "type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "forecast", "parameters": params}}]
    r = server.client().chat.completions.create(
        model=MODEL, messages=ASK, tools=tools, tool_choice={"type": "function", "function": {"name": "forecast"}},
        temperature=0.7, seed=3, max_tokens=200)
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1
    jsonschema.validate(json.loads(calls[0].function.arguments), params)


QWEN25 = os.path.join(os.environ.get("SPINDLE_TESTDATA", "../shared/testdata"), "templates",
                      "Qwen-Qwen2.5-7B-Instruct.jinja")
QWEN3 = os.path.join(os.environ.get("SPINDLE_TESTDATA", "../shared/testdata"), "templates", "Qwen-Qwen3-0.6B.jinja")
CALL = '<tool_call>\\n{\\"name\\": \\"add\\", \\"arguments\\": {\\"a\\": 1, \\"b\\": 2}}\\n</tool_call>'


@pytest.mark.parametrize("template,shape,reasoning", [
    (QWEN25, 'root ::= "Let me add.\\n' + CALL + '"\n', None),
    (QWEN3, 'root ::= "<think>\\nadd them\\n</think>\\n\\n' + CALL + '"\n', "add them\n"),
    (QWEN25, 'root ::= "' + CALL + '\\nDone."\n', None),
], ids=["hermes-after-text", "hermes-after-thinking", "hermes-then-text"])
def test_hermes_calls_after_text_or_thinking_stream_as_calls(spindle_bin, default_model, template, shape,
                                                            reasoning):
    """A model in the hermes format writes calls after some text or after its thinking, or
    text after its calls (the default model's words shaped by a grammar): streamed, the text
    flows and the calls come as tool_calls deltas, their arguments token by token as they
    are generated (tool_choice auto: not held to the end); not streamed, the same split."""
    if not os.path.exists(template):
        pytest.skip(f"{template} absent")
    s = Server(spindle_bin, default_model, "--chat-template", template)
    try:
        kw = dict(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=80, temperature=0,
                  extra_body={"grammar": shape})
        whole = s.client().chat.completions.create(**kw).choices[0]
        assert whole.finish_reason == "tool_calls"
        assert [c.function.name for c in whole.message.tool_calls] == ["add"]
        assert json.loads(whole.message.tool_calls[0].function.arguments) == {"a": 1, "b": 2}
        assert whole.message.model_dump().get("reasoning_content") == reasoning
        content, thought, names, args, finish, pieces = "", "", [], "", None, 0
        for chunk in s.client().chat.completions.create(stream=True, **kw):
            for ch in chunk.choices:
                d = ch.delta.model_dump()
                content += d.get("content") or ""
                thought += d.get("reasoning_content") or ""
                for tc in ch.delta.tool_calls or []:
                    if tc.id:
                        names.append(tc.function.name)
                    args += tc.function.arguments or ""
                    pieces += bool(tc.function.arguments)
                finish = ch.finish_reason or finish
        assert finish == "tool_calls" and names == ["add"] and json.loads(args) == {"a": 1, "b": 2}
        assert pieces > 1, "the arguments came in one piece: held to the end, not streamed as generated"
        assert content.strip() == (whole.message.content or "").strip()
        assert (thought or None) == reasoning
    finally:
        assert s.stop() == 0


CALL_ARGS_FIRST = '<tool_call>\\n{\\"arguments\\": {\\"a\\": 3, \\"b\\": 4}, \\"name\\": \\"add\\"}\\n</tool_call>'


def stream_calls(client, **kw):
    """(finish_reason, call names, arguments by index, content) of one streamed answer."""
    names, args, finish, content = [], {}, None, ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                if tc.id:
                    names.append(tc.function.name)
                args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
            finish = ch.finish_reason or finish
    return finish, names, args, content


def test_auto_calls_streamed_and_not_agree(spindle_bin, default_model):
    """tool_choice auto in the hermes format (the default model's words shaped by a grammar):
    a later call the streaming scan cannot follow (its arguments before its name) still goes
    out when the answer parses; a call cut by max_tokens comes back as the call so far with
    finish_reason "length", streamed and not, the text before it as content."""
    if not os.path.exists(QWEN25):
        pytest.skip(f"{QWEN25} absent")
    s = Server(spindle_bin, default_model, "--chat-template", QWEN25)
    try:
        c = s.client()
        two = dict(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=100, temperature=0,
                   extra_body={"grammar": 'root ::= "' + CALL + '\\n' + CALL_ARGS_FIRST + '"\n'})
        whole = c.chat.completions.create(**two).choices[0]
        assert whole.finish_reason == "tool_calls"
        assert [json.loads(t.function.arguments) for t in whole.message.tool_calls] == [{"a": 1, "b": 2},
                                                                                       {"a": 3, "b": 4}]
        finish, names, args, content = stream_calls(c, **two)
        assert finish == "tool_calls" and names == ["add", "add"] and content == ""
        assert [json.loads(args[i]) for i in (0, 1)] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
        cut = dict(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=22, temperature=0,
                   extra_body={"grammar": 'root ::= "Let me add.\\n' + CALL + '"\n'})
        whole = c.chat.completions.create(**cut).choices[0]
        assert whole.finish_reason == "length" and whole.message.content == "Let me add."
        assert [t.function.name for t in whole.message.tool_calls] == ["add"]
        finish, names, args, content = stream_calls(c, **cut)
        assert finish == "length" and names == ["add"] and content.strip() == "Let me add."
        assert args[0] == whole.message.tool_calls[0].function.arguments
    finally:
        assert s.stop() == 0


def test_an_error_after_streamed_calls_is_an_error_event(server):
    """The request's timeout ends it while a forced call's arguments stream: the stream says
    so with an error event (no finish_reason "tool_calls"), as any failed stream does. The
    tools' grammar is compiled by a first request, so the timed one's second is all generation
    (under the sanitizers, several times slower, three of them)."""
    tools = [{"type": "function", "function": {"name": "write", "parameters": {
        "type": "object", "properties": {"text": {"type": "string", "minLength": 3000}}, "required": ["text"]}}}]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a very long story with the tool."}],
            "tools": tools, "tool_choice": "required", "stream": False, "max_tokens": 1, "temperature": 1.0,
            "seed": 3}
    status, _, _ = server.request("POST", "/v1/chat/completions", body)
    assert status == 200
    body.update({"stream": True, "max_tokens": 2000, "ignore_eos": True,
                 "timeout": 3.0 if os.environ.get("SPINDLE_SANITIZED") else 1.0})
    req = urllib.request.Request(server.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    events = []
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    heads = [e for e in events if e.get("choices") and (e["choices"][0]["delta"].get("tool_calls") or [{}])[0].get("id")]
    assert heads, "no call started before the timeout"
    finishes = [e["choices"][0]["finish_reason"] for e in events if e.get("choices") and e["choices"][0]["finish_reason"]]
    assert finishes == [] and "error" in events[-1], events[-3:]

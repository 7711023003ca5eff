"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) behind the real binary,
driven by the `anthropic` SDK on the default model (whose template ignores tools, so spindle
lists them in a system block and forced calls go through the tool-call grammar): answers
streaming and not, a tool round trip (a forced call, its tool_result sent back, a text
answer), count_tokens equal to the prompt a generation runs, stop_sequences and max_tokens
reported as Anthropic does, the raw SSE framing (an `event:` line naming each `data:`), and
errors in Anthropic's shape (400 naming the field, 404 not_found_error, 401
authentication_error for a bad x-api-key). The SDK's current releases dropped temperature,
top_p and top_k from their signatures; older clients still send them, here through extra_body."""
import json
import urllib.request

import anthropic
import jsonschema
import pytest

from spindle_server import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "The current weather in a city", "input_schema": WEATHER}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CAPITAL = [{"role": "user", "content": "Tell me about the city of Paris."}]
GREEDY = {"temperature": 0}  # the SDK no longer has the argument; the API still takes it


@pytest.fixture(scope="module")
def server(spindle_bin, default_model):
    s = Server(spindle_bin, default_model)
    yield s
    assert s.stop() == 0


def client(server, key="unused"):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def test_create_answers_a_message(server):
    m = client(server).messages.create(model=MODEL, max_tokens=40, system="You are brief.", messages=CAPITAL,
                                       metadata={"user_id": "u1"},
                                       extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 40})
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL
    assert m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"] and text_of(m)
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 40


def test_stream_matches_the_event_sequence(server):
    with client(server).messages.stream(model=MODEL, max_tokens=30, messages=CAPITAL, extra_body=GREEDY) as s:
        pieces = list(s.text_stream)
        final = s.get_final_message()
    assert pieces and "".join(pieces) == text_of(final)
    assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0
    # greedy: the same answer as the non-streaming one
    m = client(server).messages.create(model=MODEL, max_tokens=30, messages=CAPITAL, extra_body=GREEDY)
    assert text_of(m) == text_of(final) and m.stop_reason == final.stop_reason
    assert m.usage.input_tokens == final.usage.input_tokens
    # the raw events, in Anthropic's order
    events = [e.type for e in client(server).messages.create(model=MODEL, max_tokens=8, messages=CAPITAL,
                                                             stream=True)]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"]
    assert events[1] == "content_block_start" and events[-3] == "content_block_stop"
    assert set(events[2:-3]) == {"content_block_delta"}


def test_sse_framing_names_every_event(server):
    body = json.dumps({"model": MODEL, "max_tokens": 6, "messages": CAPITAL, "stream": True}).encode()
    req = urllib.request.Request(server.url + "/v1/messages", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        raw = r.read().decode()
    frames = [f for f in raw.split("\n\n") if f.strip() and not f.startswith(":")]
    assert frames
    for f in frames:
        lines = f.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), f
        assert json.loads(lines[1][6:])["type"] == lines[0][7:], f
    assert "[DONE]" not in raw


def test_tool_round_trip(server):
    c = client(server)
    first = c.messages.create(model=MODEL, max_tokens=100, messages=ASK, tools=TOOLS, extra_body={"temperature": 0.7},
                              tool_choice={"type": "tool", "name": "get_weather"})
    assert first.stop_reason == "tool_use"
    calls = [b for b in first.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].id.startswith("toolu_")
    jsonschema.validate(calls[0].input, WEATHER)
    history = ASK + [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                                   "content": "Sunny, 24 degrees Celsius."}]}]
    final = c.messages.create(model=MODEL, max_tokens=60, messages=history, tools=TOOLS,
                              tool_choice={"type": "none"}, extra_body={"temperature": 0.2})
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in final.content] == ["text"] and text_of(final).strip()
    # the tool result reached the prompt
    tokens = c.messages.count_tokens(model=MODEL, messages=history, tools=TOOLS, tool_choice={"type": "none"})
    assert tokens.input_tokens == final.usage.input_tokens
    without = c.messages.count_tokens(model=MODEL, messages=history[:2] + [{"role": "user", "content": "ok"}],
                                      tools=TOOLS, tool_choice={"type": "none"})
    assert without.input_tokens < tokens.input_tokens


def test_tool_use_streams_as_input_json(server):
    with client(server).messages.stream(model=MODEL, max_tokens=100, messages=ASK, tools=TOOLS,
                                        tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                        extra_body={"temperature": 0.7}) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    calls = [b for b in final.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(calls[0].input, WEATHER)  # assembled from input_json_delta pieces
    assert "input_json" in kinds


def test_count_tokens_is_the_prompt_of_a_generation(server):
    c = client(server)
    n = c.messages.count_tokens(model=MODEL, system="Be brief.", messages=CAPITAL)
    m = c.messages.create(model=MODEL, max_tokens=1, system="Be brief.", messages=CAPITAL)
    assert n.input_tokens == m.usage.input_tokens > 0
    with_tools = c.messages.count_tokens(model=MODEL, system="Be brief.", messages=CAPITAL, tools=TOOLS)
    assert with_tools.input_tokens > n.input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequence_is_reported(server, stream):
    c = client(server)
    free = text_of(c.messages.create(model=MODEL, max_tokens=40, messages=CAPITAL, extra_body=GREEDY))
    words = free.split()
    assert len(words) >= 4, free
    stop = " " + words[3]
    want = free[:free.index(stop)]
    if stream:
        with c.messages.stream(model=MODEL, max_tokens=40, messages=CAPITAL, extra_body=GREEDY,
                               stop_sequences=["\u00a7never\u00a7", stop]) as s:
            m = s.get_final_message()
    else:
        m = c.messages.create(model=MODEL, max_tokens=40, messages=CAPITAL, extra_body=GREEDY,
                              stop_sequences=["\u00a7never\u00a7", stop])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert text_of(m) == want


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_is_reported(server, stream):
    c = client(server)
    kw = dict(model=MODEL, max_tokens=3, messages=CAPITAL, extra_body=GREEDY)
    if stream:
        with c.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = c.messages.create(**kw)
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None and m.usage.output_tokens == 3


def test_max_tokens_past_the_context_is_not_refused(server):
    """Clients hard-code large max_tokens (Claude Code asks 32000): they get what the context
    leaves, and a generation cut by the context says model_context_window_exceeded."""
    with client(server).messages.stream(model=MODEL, max_tokens=100000, messages=CAPITAL, extra_body=GREEDY,
                                        stop_sequences=["."]) as s:
        m = s.get_final_message()
    assert m.stop_reason in ("stop_sequence", "end_turn", "model_context_window_exceeded")
    assert text_of(m)


def error_of(excinfo):
    body = excinfo.value.body
    assert body["type"] == "error", body
    return body["error"]


def test_missing_max_tokens_is_a_400(server):
    status, _, body = server.request("POST", "/v1/messages", {"model": MODEL, "messages": CAPITAL})
    assert status == 400
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]


@pytest.mark.parametrize("messages, name", [
    ([{"role": "system", "content": "hi"}], "messages[0].role"),
    ([{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                   {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                "data": "iVBORw0KGgo="}}]}], "messages[0].content[1]"),
    ([{"role": "user", "content": [{"type": "mystery"}]}], "messages[0].content[0]"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_none", "content": "x"}]}],
     "messages[0].content[0].tool_use_id"),
])
def test_bad_messages_are_400s_naming_the_block(server, messages, name):
    with pytest.raises(anthropic.BadRequestError) as e:
        client(server).messages.create(model=MODEL, max_tokens=5, messages=messages)
    assert e.value.status_code == 400
    err = error_of(e)
    assert err["type"] == "invalid_request_error" and name in err["message"], err


@pytest.mark.parametrize("extra, name", [
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking"),
    ({"container": "container_1"}, "container"),
    ({"mcp_servers": [{"type": "url", "url": "https://example.com", "name": "x"}]}, "mcp_servers"),
    ({"temperature": 1.5}, "temperature"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
])
def test_unsupported_fields_are_400s(server, extra, name):
    with pytest.raises(anthropic.BadRequestError) as e:
        client(server).messages.create(model=MODEL, max_tokens=5, messages=CAPITAL, extra_body=extra)
    assert name in error_of(e)["message"]


def test_unknown_model_is_a_404_not_found_error(server):
    with pytest.raises(anthropic.NotFoundError) as e:
        client(server).messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=CAPITAL)
    err = error_of(e)
    assert err["type"] == "not_found_error" and "claude-sonnet-4-5" in err["message"]
    with pytest.raises(anthropic.NotFoundError):
        client(server).messages.count_tokens(model="claude-sonnet-4-5", messages=CAPITAL)


def test_wrong_method_is_a_405_in_anthropic_shape(server):
    status, headers, body = server.request("GET", "/v1/messages")
    assert status == 405 and headers["Allow"] == "POST"
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    assert "GET" in body["error"]["message"]


def test_x_api_key(spindle_bin, stories_model):
    s = Server(spindle_bin, stories_model, "--api-key", "sk-anthropic")
    try:
        with pytest.raises(anthropic.AuthenticationError) as e:
            client(s, key="sk-wrong").messages.create(model="stories260K", max_tokens=4, messages=CAPITAL)
        assert e.value.status_code == 401 and error_of(e)["type"] == "authentication_error"
        with pytest.raises(anthropic.AuthenticationError):
            client(s, key="sk-wrong").messages.count_tokens(model="stories260K", messages=CAPITAL)
        m = client(s, key="sk-anthropic").messages.create(model="stories260K", max_tokens=4, messages=CAPITAL)
        assert m.usage.output_tokens > 0
    finally:
        assert s.stop() == 0

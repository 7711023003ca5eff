"""The Responses API (/v1/responses) behind the real binary on the default model, driven by
the clients that speak it: the openai SDK's responses.create (plain and streamed, with the
documented event sequence and sequence numbers), previous_response_id over the store with
GET and DELETE by id (per API key, bounded; one key's flood keeps another's stored
conversation, and the server's memory for the store stays near --responses-store-mb),
function tools through the tool-call machinery,
text.format json_schema through the grammar engine, langchain-openai with
use_responses_api=True, and the OpenAI Agents SDK with its default (Responses) model: an agent
that calls a function tool and one with a structured output_type. Bad input is a 400 naming
the field."""
import asyncio
import http.client
import json
import os

import jsonschema
import openai
import pytest

from spindle_server import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": WEATHER}]


@pytest.fixture(scope="module")
def server(spindle_bin, default_model):
    s = Server(spindle_bin, default_model, "--temperature", "0")
    yield s
    assert s.stop() == 0


def test_create_returns_a_response_with_usage_and_is_stored(server):
    c = server.client()
    r = c.responses.create(model=MODEL, input="Say hello.", instructions="Be brief.", max_output_tokens=40)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output_text and r.output_text == r.output[0].content[0].text
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == "Be brief." and r.max_output_tokens == 40 and r.store is True
    # the same answer as chat completions gives at temperature 0 with the same messages
    chat = c.chat.completions.create(model=MODEL, max_tokens=40, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}])
    assert chat.choices[0].message.content == r.output_text
    got = c.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text


def test_max_output_tokens_makes_it_incomplete(server):
    r = server.client().responses.create(model=MODEL, input="Tell me a long story.", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_previous_response_id_continues_the_conversation(server):
    c = server.client()
    first = c.responses.create(model=MODEL, input="My name is Ada.", instructions="Be brief.", max_output_tokens=20)
    second = c.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id,
                                max_output_tokens=20)
    # the second prompt holds the first turn (input and output): more tokens than either alone
    alone = c.responses.create(model=MODEL, input="What is my name?", max_output_tokens=20, store=False)
    assert second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    assert second.previous_response_id == first.id
    # instructions are not carried over (OpenAI's rule): the second had none
    assert second.instructions is None
    # store=False: nothing kept
    status, _, body = server.request("GET", f"/v1/responses/{alone.id}")
    assert status == 404 and "not found" in body["error"]["message"]


def test_get_and_delete_by_id(server):
    c = server.client()
    r = c.responses.create(model=MODEL, input="Hi", max_output_tokens=5)
    status, _, body = server.request("GET", f"/responses/{r.id}")  # also without /v1
    assert status == 200 and body["id"] == r.id and body["object"] == "response"
    status, _, body = server.request("DELETE", f"/v1/responses/{r.id}")
    assert status == 200 and body == {"id": r.id, "object": "response", "deleted": True}
    for method in ("GET", "DELETE"):
        status, _, body = server.request(method, f"/v1/responses/{r.id}")
        assert status == 404 and r.id in body["error"]["message"]
    with pytest.raises(openai.NotFoundError, match="previous_response_id|not found"):
        c.responses.create(model=MODEL, input="Hi", previous_response_id=r.id)
    status, hdrs, _ = server.request("POST", f"/v1/responses/{r.id}", body={})
    assert status == 405 and hdrs["Allow"] == "GET, HEAD, DELETE"


def test_stream_sends_the_documented_event_sequence(server):
    c = server.client()
    events = list(c.responses.create(model=MODEL, input="Count to three.", max_output_tokens=60, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert "response.output_text.delta" in types
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          types[-1]]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response
    assert text == done.text == final.output_text and final.usage.output_tokens > 0
    # the streamed response is stored like a plain one
    assert c.responses.retrieve(final.id).output_text == text


def test_stream_helper_and_the_plain_answer_agree(server):
    c = server.client()
    with c.responses.stream(model=MODEL, input="Name a color.", max_output_tokens=200) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    plain = c.responses.create(model=MODEL, input="Name a color.", max_output_tokens=200)
    assert "".join(deltas) == final.output_text == plain.output_text


def test_function_tools_give_function_calls(server):
    c = server.client()
    r = c.responses.create(model=MODEL, input="What is the weather in Paris?", tools=TOOLS, tool_choice="required",
                           parallel_tool_calls=False)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    # streamed: the call's item, its argument deltas, then the done events
    events = list(c.responses.create(model=MODEL, input="What is the weather in Rome?", tools=TOOLS,
                                     tool_choice={"type": "function", "name": "get_weather"},
                                     parallel_tool_calls=False, stream=True))
    types = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather"
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert args == done.arguments and json.loads(args)["city"]
    assert types[-1] == "response.completed"
    # the round trip: the call and its output go back as input items; tool_choice none answers in text
    answer = c.responses.create(model=MODEL, tools=TOOLS, tool_choice="none", max_output_tokens=40, input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
         "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 degrees."}])
    assert answer.output[0].type == "message" and answer.output_text
    # the same through previous_response_id: only the output is sent
    follow = c.responses.create(model=MODEL, previous_response_id=r.id, tools=TOOLS, tool_choice="none",
                                max_output_tokens=40, input=[{"type": "function_call_output",
                                                              "call_id": calls[0].call_id, "output": "Sunny."}])
    assert follow.output_text


def test_text_format_json_schema_is_enforced(server):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 150}},
              "required": ["name", "age"], "additionalProperties": False}
    r = server.client().responses.create(model=MODEL, input="Invent a person.", text={
        "format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


@pytest.mark.parametrize("body,param,words", [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
     "input[0].content[0]", "not supported"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]", "built-in tool 'web_search'"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]", "item_reference"),
    ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", "expected one of"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id", "string"),
    ({}, "input", "Missing required parameter"),
    ({"input": 3}, "input", "a string or an array"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", "max_output_tokens"),
    ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format.type", "yaml"),
    ({"input": "hi", "background": True}, "background", "background"),
    ({"input": "hi", "truncation": "auto"}, "truncation", "disabled"),
    ({"input": "hi", "include": ["message.output_text.logprobs"]}, "include", "not supported"),
    ({"input": "hi", "tool_choice": {"type": "file_search"}}, "tool_choice", "tool_choice"),
    ({"input": "hi", "model": "gpt-5"}, "model", "does not exist"),
])
def test_bad_input_is_a_400_naming_the_field(server, body, param, words):
    status, _, answer = server.request("POST", "/v1/responses", body=body)
    assert status in (400, 404), answer
    assert answer["error"]["param"] == param, answer
    assert words in answer["error"]["message"], answer


def test_stored_responses_are_per_api_key(spindle_bin, default_model):
    s = Server(spindle_bin, default_model, "--api-key", "sk-a", "--api-key", "sk-b")
    try:
        a = openai.OpenAI(base_url=s.url + "/v1", api_key="sk-a", max_retries=0)
        b = openai.OpenAI(base_url=s.url + "/v1", api_key="sk-b", max_retries=0)
        r = a.responses.create(model=MODEL, input="Hi", max_output_tokens=5)
        assert a.responses.retrieve(r.id).id == r.id
        with pytest.raises(openai.NotFoundError):
            b.responses.retrieve(r.id)
        with pytest.raises(openai.NotFoundError):
            b.responses.create(model=MODEL, input="Hi", previous_response_id=r.id)
    finally:
        assert s.stop() == 0


def test_the_store_is_bounded_oldest_first(spindle_bin, stories_model):
    s = Server(spindle_bin, stories_model, "--responses-store-max", "2")
    try:
        c = s.client()
        ids = [c.responses.create(model="stories260K", input="Once", max_output_tokens=3).id for _ in range(3)]
        assert s.request("GET", f"/v1/responses/{ids[0]}")[0] == 404  # the oldest went first
        assert all(s.request("GET", f"/v1/responses/{i}")[0] == 200 for i in ids[1:])
    finally:
        assert s.stop() == 0
    s = Server(spindle_bin, stories_model, "--responses-store-mb", "0")
    try:
        r = s.client().responses.create(model="stories260K", input="Once", max_output_tokens=3)
        assert s.request("GET", f"/v1/responses/{r.id}")[0] == 404  # none kept
    finally:
        assert s.stop() == 0


# 60 short messages: what made the store hold ~15x its flag when it kept jansson trees
HEAVY = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(60)]


class Keyed:
    """One keep-alive connection speaking for an API key (the flood needs thousands)."""

    def __init__(self, server, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}

    def call(self, method, path, body=None):
        self.conn.request(method, path, json.dumps(body) if body is not None else None, self.headers)
        r = self.conn.getresponse()
        return r.status, json.loads(r.read())

    def create(self, **body):
        status, answer = self.call("POST", "/v1/responses", {"model": "stories260K", "max_output_tokens": 1, **body})
        assert status == 200, answer
        return answer


def rss_bytes(server):
    with open(f"/proc/{server.proc.pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_a_keys_flood_keeps_anothers_conversation_and_memory_near_the_flag(spindle_bin, stories_model):
    # the suffix cache (speculation) keeps finished prompts under its own budget, and the
    # KV pool's pages are touched as blocks are first used: both off or small, so the
    # growth measured is the store's
    flag_mb = 2
    s = Server(spindle_bin, stories_model, "--api-key", "sk-a", "--api-key", "sk-b", "--responses-store-mb",
               str(flag_mb), "--responses-store-max", "100000", "--speculative", "off", "--kv-cache-mb", "8")
    try:
        a, b = Keyed(s, "sk-a"), Keyed(s, "sk-b")
        kept = b.create(input=[{"role": "user", "content": "Remember the word lighthouse."}])
        for _ in range(30):  # the allocator's and the threads' first use, before the baseline
            a.create(input=HEAVY, store=False)
        before = rss_bytes(s)
        flood = [a.create(input=HEAVY)["id"] for _ in range(1500)]  # about twice the store, over again
        grown = rss_bytes(s) - before
        m = s.metrics()
        # key A dropped its own oldest; key B's response is there and continues
        assert m['spindle_responses_store_evictions_total{reason="other_key"}'] == 0
        assert m['spindle_responses_store_evictions_total{reason="own_key"}'] > 500
        assert a.call("GET", f"/v1/responses/{flood[0]}")[0] == 404
        assert a.call("GET", f"/v1/responses/{flood[-1]}")[0] == 200
        status, got = b.call("GET", f"/v1/responses/{kept['id']}")
        assert status == 200 and got["id"] == kept["id"]
        follow = b.create(input="What was the word?", previous_response_id=kept["id"])
        assert follow["previous_response_id"] == kept["id"]
        # what the store counts stays within the flag, and so does what the process grew by
        assert 0 < m["spindle_responses_store_bytes"] <= flag_mb << 20
        assert m["spindle_responses_store_keys"] == 2
        if not os.environ.get("SPINDLE_SANITIZED"):  # ASan's quarantine keeps what is freed
            assert grown <= 2 * (flag_mb << 20), f"RSS grew {grown / 2**20:.1f} MiB for a {flag_mb} MiB store"
    finally:
        assert s.stop() == 0


def test_a_key_past_its_share_drops_its_own_oldest(spindle_bin, stories_model):
    s = Server(spindle_bin, stories_model, "--api-key", "sk-a", "--api-key", "sk-b", "--responses-store-mb", "2",
               "--responses-store-key-mb", "1", "--speculative", "off")
    try:
        a, b = Keyed(s, "sk-a"), Keyed(s, "sk-b")
        first_b = b.create(input=HEAVY)["id"]
        flood = [a.create(input=HEAVY)["id"] for _ in range(500)]  # past a 1 MiB share
        m = s.metrics()
        assert m["spindle_responses_store_bytes"] <= 2 << 20
        assert m['spindle_responses_store_evictions_total{reason="other_key"}'] == 0
        assert a.call("GET", f"/v1/responses/{flood[0]}")[0] == 404
        assert b.call("GET", f"/v1/responses/{first_b}")[0] == 200
        assert a.call("GET", f"/v1/responses/{first_b}")[0] == 404  # still B's alone
    finally:
        assert s.stop() == 0


def test_langchain_with_the_responses_api(server):
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.ChatOpenAI(model=MODEL, base_url=server.url + "/v1", api_key="unused",
                                      use_responses_api=True, max_tokens=30, temperature=0, max_retries=0)
    msg = llm.invoke("Say hello.")
    assert msg.text and msg.usage_metadata["output_tokens"] > 0
    chunks = list(llm.stream("Say hello."))
    assert "".join(c.text for c in chunks) == msg.text


def test_openai_agents_sdk_runs_a_tool_agent_and_a_structured_one(server):
    agents = pytest.importorskip("agents")
    from pydantic import BaseModel

    agents.set_tracing_disabled(True)
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Return the weather of a city."""
        calls.append(city)
        return f"It is sunny and 21 degrees in {city}."

    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    model = agents.OpenAIResponsesModel(model=MODEL, openai_client=client)
    # a 135M model calls the tool when made to, and keeps calling it when left to choose:
    # the agent answers with the tool's result
    weather = agents.Agent(name="weather", instructions="Answer weather questions with the get_weather tool.",
                           tools=[get_weather], model=model, tool_use_behavior="stop_on_first_tool",
                           model_settings=agents.ModelSettings(tool_choice="required", parallel_tool_calls=False,
                                                               max_tokens=100))

    class City(BaseModel):
        name: str
        country: str

    cities = agents.Agent(name="cities", instructions="Answer with the city asked about.", model=model,
                          output_type=City, model_settings=agents.ModelSettings(max_tokens=100))

    async def run():
        r = await agents.Runner.run(weather, "What is the weather in Paris?", max_turns=3)
        streamed = agents.Runner.run_streamed(weather, "What is the weather in Rome?", max_turns=3)
        async for _ in streamed.stream_events():
            pass
        city = await agents.Runner.run(cities, "Which city is the capital of France?")
        return r, streamed, city

    r, streamed, city = asyncio.run(run())
    assert len(calls) == 2 and all(calls)
    assert r.final_output == f"It is sunny and 21 degrees in {calls[0]}."
    assert streamed.final_output == f"It is sunny and 21 degrees in {calls[1]}."
    assert isinstance(city.final_output, City) and city.final_output.name

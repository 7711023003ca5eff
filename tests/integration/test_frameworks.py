"""Agent and structured-output frameworks against the real binary on the default model,
through /v1/chat/completions, as their users call them: langchain-openai (ChatOpenAI's
with_structured_output by json_schema and by function calling, bind_tools with a required
or named tool_choice, invoked, streamed and answered with the tool's result), instructor
(Mode.TOOLS, Mode.JSON_SCHEMA, partial streaming, the async client) and pydantic-ai (an
Agent on OpenAIChatModel with tool output, native output, a function tool, streamed).

The versions are pinned in tests/requirements.txt (tools/setup.sh installs them). The model
has 135M parameters, so every answer is bounded (short strings, integer ranges, few
fields, parallel_tool_calls off) and greedy. The tool-call schemas close their objects
(extra="forbid" or the framework's strict=True, so "additionalProperties": false): spindle
follows JSON Schema, where an object without it admits any other key, and this model fills
such an object with keys copied from the schema ("type": "integer") until max_tokens."""
import asyncio
import json
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, ConfigDict, Field

from spindle_server import Server

REASON = "the framework tests' packages are missing: run tools/setup.sh (tests/requirements.txt)"
langchain_openai = pytest.importorskip("langchain_openai", reason=REASON)
instructor = pytest.importorskip("instructor", reason=REASON)
pydantic_ai = pytest.importorskip("pydantic_ai", reason=REASON)

from instructor.core import IncompleteOutputException  # noqa: E402
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from pydantic_ai import Agent, NativeOutput, RunContext  # noqa: E402
from pydantic_ai.messages import ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402
from pydantic_ai.settings import ModelSettings  # noqa: E402
from pydantic_ai.tools import ToolDefinition  # noqa: E402

MODEL = "SmolLM2-135M-Instruct.Q4_1"
MAX_TOKENS = 120


class City(BaseModel):
    """A city and the country it is in."""
    name: str = Field(min_length=1, max_length=20)
    country: str = Field(min_length=1, max_length=20)
    population_millions: int = Field(ge=0, le=50)


class ClosedCity(City):
    """A city and the country it is in."""
    model_config = ConfigDict(extra="forbid")


class AddArgs(BaseModel):
    a: int = Field(ge=-1000, le=1000)
    b: int = Field(ge=-1000, le=1000)


class WeatherArgs(BaseModel):
    city: str = Field(min_length=1, max_length=30)
    unit: Literal["celsius", "fahrenheit"]


# the tools' parameter schemas are the models above, bounds included (the grammar enforces them)
@tool(args_schema=AddArgs)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(args_schema=WeatherArgs)
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
    """The weather in a city."""
    return f"18 degrees {unit} in {city}"


@pytest.fixture(scope="module")
def server(spindle_bin, default_model):
    s = Server(spindle_bin, default_model)
    yield s
    assert s.stop() == 0


@pytest.fixture
def llm(server):
    return langchain_openai.ChatOpenAI(base_url=server.url + "/v1", api_key="unused", model=MODEL, temperature=0,
                                       max_tokens=MAX_TOKENS, max_retries=0, timeout=120)


CITY_SCHEMA = ClosedCity.model_json_schema()  # the fields, their bounds and no other key


def assert_city(obj, cls=City):
    """obj is a cls whose fields are within their bounds, as the server wrote them."""
    assert isinstance(obj, cls)
    assert isinstance(obj.name, str) and 1 <= len(obj.name) <= 20
    assert isinstance(obj.country, str) and 1 <= len(obj.country) <= 20
    assert type(obj.population_millions) is int and 0 <= obj.population_millions <= 50
    jsonschema.validate(obj.model_dump(), CITY_SCHEMA)


# --- langchain-openai ---

def test_langchain_structured_output_json_schema(llm):
    # a plain model: langchain closes the schema itself and sends response_format json_schema
    out = llm.with_structured_output(City, method="json_schema", include_raw=True).invoke("Describe Paris as JSON.")
    assert out["parsing_error"] is None
    assert_city(out["parsed"])
    raw = out["raw"]
    assert isinstance(raw, AIMessage) and raw.response_metadata["finish_reason"] == "stop"
    doc = json.loads(raw.content)
    jsonschema.validate(doc, CITY_SCHEMA)
    assert doc == out["parsed"].model_dump()
    assert not raw.tool_calls


@pytest.mark.parametrize("cls,strict", [(ClosedCity, None), (City, True)], ids=["extra-forbid", "strict"])
def test_langchain_structured_output_function_calling(llm, cls, strict):
    # langchain sends tool_choice naming the schema's tool, which spindle enforces by a grammar
    out = llm.with_structured_output(cls, method="function_calling", strict=strict, include_raw=True).invoke(
        "Describe Paris.")
    assert out["parsing_error"] is None
    assert_city(out["parsed"], cls)
    raw = out["raw"]
    assert raw.response_metadata["finish_reason"] == "tool_calls"
    assert [c["name"] for c in raw.tool_calls] == [cls.__name__]
    assert raw.tool_calls[0]["id"].startswith("call_")
    jsonschema.validate(raw.tool_calls[0]["args"], CITY_SCHEMA)
    assert raw.tool_calls[0]["args"] == out["parsed"].model_dump()


def test_langchain_bind_tools_required_then_answer_with_the_result(llm):
    question = HumanMessage("What is 2 plus 3? Use the add tool.")
    msg = llm.bind_tools([add], tool_choice="required", strict=True, parallel_tool_calls=False).invoke([question])
    assert isinstance(msg, AIMessage) and msg.response_metadata["finish_reason"] == "tool_calls"
    assert not msg.invalid_tool_calls
    assert len(msg.tool_calls) == 1
    call = msg.tool_calls[0]
    assert call["name"] == "add" and call["id"].startswith("call_") and call["type"] == "tool_call"
    args = AddArgs.model_validate(call["args"])
    assert set(call["args"]) == {"a", "b"}
    # the tool runs on the call as langchain hands it over, and the history (the assistant's
    # tool_calls and the tool message) goes back to the server
    result = add.invoke(call)
    assert isinstance(result, ToolMessage) and result.tool_call_id == call["id"]
    assert result.content == str(args.a + args.b)
    answer = llm.invoke([question, msg, result])
    assert isinstance(answer, AIMessage) and not answer.tool_calls
    assert isinstance(answer.content, str) and answer.content.strip()
    assert answer.response_metadata["finish_reason"] in ("stop", "length")


def test_langchain_bind_tools_named_tool(llm):
    bound = llm.bind_tools([add, get_weather], tool_choice="get_weather", strict=True)
    msg = bound.invoke("What is the weather in Rome, in celsius?")
    assert msg.response_metadata["finish_reason"] == "tool_calls"
    assert [c["name"] for c in msg.tool_calls] == ["get_weather"]
    args = WeatherArgs.model_validate(msg.tool_calls[0]["args"])
    assert set(msg.tool_calls[0]["args"]) == {"city", "unit"}
    assert get_weather.invoke(msg.tool_calls[0]).content == f"18 degrees {args.unit} in {args.city}"


def test_langchain_bind_tools_streamed(llm):
    bound = llm.bind_tools([add], tool_choice="add", strict=True)
    chunks = list(bound.stream("What is 7 plus 8?"))
    assert len(chunks) > 1 and all(isinstance(c, AIMessageChunk) for c in chunks)
    msg = chunks[0]
    for c in chunks[1:]:
        msg = msg + c
    assert msg.response_metadata.get("finish_reason") == "tool_calls"
    assert not msg.invalid_tool_calls
    assert [c["name"] for c in msg.tool_calls] == ["add"]
    assert msg.tool_calls[0]["id"].startswith("call_")
    AddArgs.model_validate(msg.tool_calls[0]["args"])
    assert set(msg.tool_calls[0]["args"]) == {"a", "b"}


def test_langchain_batch_of_structured_outputs(llm):
    # concurrent requests through langchain's thread pool
    outs = llm.with_structured_output(City, method="json_schema").batch(
        [f"Describe {c} as JSON." for c in ("Paris", "Rome", "Lima")])
    assert len(outs) == 3
    for o in outs:
        assert_city(o)


# --- instructor ---

def instructor_client(server, mode):
    return instructor.from_openai(server.client(), mode=mode)


def city_request(content="Describe Paris."):
    return dict(model=MODEL, messages=[{"role": "user", "content": content}], response_model=ClosedCity,
                max_retries=0, temperature=0, max_tokens=MAX_TOKENS)


def test_instructor_tools_mode(server):
    client = instructor_client(server, instructor.Mode.TOOLS)
    city, completion = client.chat.completions.create_with_completion(**city_request())
    assert_city(city, ClosedCity)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [c.function.name for c in choice.message.tool_calls] == ["ClosedCity"]
    args = json.loads(choice.message.tool_calls[0].function.arguments)
    jsonschema.validate(args, CITY_SCHEMA)
    assert args == city.model_dump()


def test_instructor_json_schema_mode(server):
    client = instructor_client(server, instructor.Mode.JSON_SCHEMA)
    city, completion = client.chat.completions.create_with_completion(**city_request())
    assert_city(city, ClosedCity)
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    doc = json.loads(choice.message.content)
    jsonschema.validate(doc, CITY_SCHEMA)
    assert doc == city.model_dump()


def test_instructor_partial_streaming(server):
    client = instructor_client(server, instructor.Mode.TOOLS)
    partials = list(client.chat.completions.create_partial(**city_request()))
    assert partials
    # the last partial object is complete: every field present and within its bounds
    assert_city(ClosedCity.model_validate(partials[-1].model_dump()), ClosedCity)


def test_instructor_async_client_concurrent(server):
    async def run():
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as raw:
            client = instructor.from_openai(raw, mode=instructor.Mode.JSON_SCHEMA)
            return await asyncio.gather(*(client.chat.completions.create(**city_request(f"Describe {c}."))
                                          for c in ("Rome", "Lima")))

    cities = asyncio.run(run())
    assert len(cities) == 2
    for city in cities:
        assert_city(city, ClosedCity)


def test_instructor_sees_a_cut_answer_as_incomplete(server):
    # max_tokens too small for the object: finish_reason "length", which instructor reports
    client = instructor_client(server, instructor.Mode.JSON_SCHEMA)
    with pytest.raises(IncompleteOutputException) as e:
        client.chat.completions.create(**{**city_request(), "max_tokens": 5})
    assert e.value.last_completion.choices[0].finish_reason == "length"
    assert e.value.last_completion.usage.completion_tokens == 5


# --- pydantic-ai ---

def agent(server, output_type, **kw):
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=server.url + "/v1", api_key="unused"))
    settings = ModelSettings(temperature=0, max_tokens=MAX_TOKENS, parallel_tool_calls=False)
    return Agent(model, output_type=output_type, model_settings=settings, retries=0, **kw)


def parts_of(messages, kind):
    return [p for m in messages for p in m.parts if isinstance(p, kind)]


def parts(result, kind):
    return parts_of(result.all_messages(), kind)


def test_pydantic_ai_tool_output(server):
    # pydantic-ai's default: the output is a call of its final_result tool, tool_choice "required"
    result = agent(server, ClosedCity).run_sync("Describe Paris.")
    assert_city(result.output, ClosedCity)
    calls = parts(result, ToolCallPart)
    assert [c.tool_name for c in calls] == ["final_result"]
    jsonschema.validate(calls[0].args_as_dict(), CITY_SCHEMA)
    assert calls[0].args_as_dict() == result.output.model_dump()


def test_pydantic_ai_native_output(server):
    # response_format json_schema
    result = agent(server, NativeOutput(City)).run_sync("Describe Paris.")
    assert_city(result.output)
    assert not parts(result, ToolCallPart)


def test_pydantic_ai_function_tool(server):
    seen = []

    async def until_called(ctx: RunContext, td: ToolDefinition):
        # offered until it has run once, so the next turn can only give the output
        done = any(p.tool_name == td.name for p in parts_of(ctx.messages, ToolReturnPart))
        return None if done else td

    a = agent(server, int)

    @a.tool_plain(prepare=until_called)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        seen.append((a, b))
        return a + b

    result = a.run_sync("Use the add tool to add 2 and 3.")
    assert len(seen) == 1 and all(isinstance(x, int) for x in seen[0])
    calls = parts(result, ToolCallPart)
    assert [c.tool_name for c in calls] == ["add", "final_result"]
    assert tuple(calls[0].args_as_dict().values()) == seen[0]
    returns = [p for p in parts(result, ToolReturnPart) if p.tool_name == "add"]
    assert len(returns) == 1 and returns[0].content == sum(seen[0])
    assert type(result.output) is int


def test_pydantic_ai_streamed_output(server):
    a = agent(server, ClosedCity)

    async def run():
        async with a.run_stream("Describe Paris.") as r:
            outs = [o async for o in r.stream_output()]
            return outs, await r.get_output()

    outs, final = asyncio.run(run())
    assert outs
    assert_city(final, ClosedCity)
    assert outs[-1] == final

"""Constrained decoding behind the real binary, on the default model: response_format
(json_object, json_schema through the openai SDK's parse with a Pydantic model), llama-server's
`grammar` and `json_schema` fields and vLLM's guided_* fields produce output that follows
the constraint, also sampled at temperature 1 and streamed; bad constraints are 400s naming
the field and the place, and nothing is queued."""
import json
import re

import jsonschema
import openai
import pydantic
import pytest

from spindle_server import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def server(spindle_bin, default_model):
    s = Server(spindle_bin, default_model)
    yield s
    assert s.stop() == 0


def chat(server, content, **kw):
    kw.setdefault("max_tokens", 200)
    return server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **kw)


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "enum": ["Paris", "Rome", "Lima"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "tags"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("temperature,seed", [(0, None), (1.0, 1), (1.0, 2), (1.0, 3)])
def test_json_schema_output_validates(server, temperature, seed):
    r = chat(server, "Describe a person as JSON.", temperature=temperature, seed=seed, max_tokens=300,
             response_format={"type": "json_schema",
                              "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    c = r.choices[0]
    assert c.finish_reason == "stop", c.message.content
    doc = json.loads(c.message.content)
    jsonschema.validate(doc, PERSON)


def test_sdk_parse_with_a_pydantic_model(server):
    # bounded, as one bounds a small model's answer (a 135M model at temperature 0 loops)
    class Step(pydantic.BaseModel):
        explanation: str = pydantic.Field(max_length=60)
        output: str = pydantic.Field(max_length=30)

    class Answer(pydantic.BaseModel):
        steps: list[Step] = pydantic.Field(max_length=3)
        final_answer: str = pydantic.Field(max_length=30)

    r = server.client().chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "Solve 8x + 7 = -23 step by step."}],
        response_format=Answer, max_tokens=400, temperature=0)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", msg.content
    assert isinstance(msg.parsed, Answer)
    assert isinstance(msg.parsed.final_answer, str)


def test_json_object_mode_gives_an_object(server):
    for seed in (1, 2):
        r = chat(server, "Give me a JSON object about cats.", response_format={"type": "json_object"},
                 temperature=1.0, seed=seed, max_tokens=400)
        c = r.choices[0]
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.message.content), dict)
        else:  # cut by max_tokens: still a prefix of an object
            assert c.finish_reason == "length" and c.message.content.startswith("{")


def test_llama_server_fields(server):
    r = chat(server, "Answer yes or no: is the sky blue?", temperature=1.0, seed=3,
             extra_body={"grammar": 'root ::= ("yes" | "no") "."\n'})
    assert r.choices[0].message.content in ("yes.", "no.")
    assert r.choices[0].finish_reason == "stop"
    r = chat(server, "A number please.", temperature=0,
             extra_body={"json_schema": {"type": "integer", "minimum": 1, "maximum": 99}})
    assert 1 <= json.loads(r.choices[0].message.content) <= 99


def test_vllm_guided_fields(server):
    r = chat(server, "Pick a colour.", temperature=1.0, seed=5,
             extra_body={"guided_choice": ["red", "green", "blue \"navy\""]})
    assert r.choices[0].message.content in ("red", "green", 'blue "navy"')
    r = chat(server, "Give a date.", temperature=1.0, seed=9,
             extra_body={"guided_regex": r"\d{4}-(0[1-9]|1[0-2])-[0-3]\d"})
    assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])-[0-3]\d", r.choices[0].message.content)
    r = chat(server, "Name a fruit as JSON.", temperature=0,
             extra_body={"guided_json": json.dumps({"type": "object", "properties": {"fruit": {"type": "string"}},
                                                    "required": ["fruit"], "additionalProperties": False})})
    assert set(json.loads(r.choices[0].message.content)) == {"fruit"}
    r = chat(server, "Say something.", temperature=0, max_tokens=20,
             extra_body={"guided_grammar": 'root ::= "ok" [!?]{1,3}\n'})
    assert re.fullmatch(r"ok[!?]{1,3}", r.choices[0].message.content)


def test_streamed_and_n_choices_follow_the_constraint(server):
    stream = server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Describe a person as JSON."}], stream=True,
        max_tokens=300, temperature=1.0, seed=7, n=2,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}})
    texts, finish = {}, {}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert sorted(texts) == [0, 1]
    for i in (0, 1):
        assert finish[i] == "stop", texts[i]
        jsonschema.validate(json.loads(texts[i]), PERSON)


def test_constraint_is_identical_with_speculation(server, spindle_bin, default_model):
    """Drafts under a grammar are masked and cut where it refuses them: the output is the same."""
    off = Server(spindle_bin, default_model, "--speculative", "off")
    try:
        kw = dict(temperature=0.9, seed=21, max_tokens=200,
                  response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}})
        a = chat(server, "Describe a person as JSON.", **kw).choices[0].message.content
        b = chat(off, "Describe a person as JSON.", **kw).choices[0].message.content
        assert a == b
    finally:
        assert off.stop() == 0


def error_of(server, body):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, **body}
    status, _, data = server.request("POST", "/v1/chat/completions", body)
    assert status == 400, (status, data)
    return data["error"]


def thread_names(pid: int) -> list:
    import os
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            names.append(f.read().strip())
    return names


def test_masks_are_computed_on_their_own_thread(spindle_bin, default_model):
    """The grammar masks of a step are computed by the scheduler's mask worker while the
    step runs (scheduler/masks.c): it starts with the first constrained step, not before,
    and the output is the same as ever."""
    s = Server(spindle_bin, default_model)
    try:
        plain = chat(s, "Hi", max_tokens=4, temperature=0)
        assert plain.choices[0].message.content
        assert "spindle-masks" not in thread_names(s.proc.pid)
        r = chat(s, "Describe a person as JSON.", temperature=0,
                 response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}})
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
        assert "spindle-masks" in thread_names(s.proc.pid)
    finally:
        assert s.stop() == 0


def test_bad_constraints_are_400s_naming_the_place(server):
    before = server.metrics().get("spindle_requests_submitted_total", 0)
    e = error_of(server, {"grammar": 'root ::= "a" missing\n'})
    assert e["param"] == "grammar" and "line 1, column 14" in e["message"] and "missing" in e["message"]
    e = error_of(server, {"grammar": 'root ::= ("a"\n'})
    assert e["param"] == "grammar" and "line 1" in e["message"]
    e = error_of(server, {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}}})
    assert e["param"] == "response_format.json_schema.schema"
    assert "/properties/tags/uniqueItems" in e["message"]
    e = error_of(server, {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})
    assert e["param"] == "response_format.json_schema.schema"
    e = error_of(server, {"response_format": {"type": "xml"}})
    assert e["param"] == "response_format.type"
    e = error_of(server, {"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"\n'})
    assert e["param"] == "grammar" and "at most one" in e["message"]
    e = error_of(server, {"guided_regex": "(ab"})
    assert e["param"] == "guided_regex" and "position" in e["message"]
    e = error_of(server, {"guided_choice": []})
    assert e["param"] == "guided_choice"
    e = error_of(server, {"guided_json": "{not json"})
    assert e["param"] == "guided_json"
    assert server.metrics().get("spindle_requests_submitted_total", 0) == before


def test_limits_are_400s_naming_the_bound(spindle_bin, default_model):
    s = Server(spindle_bin, default_model, "--grammar-max-states", "100", "--grammar-schema-max-depth", "2")
    try:
        e = error_of(s, {"grammar": 'root ::= "a"{200}\n'})
        assert e["param"] == "grammar" and "more than 100 grammar elements" in e["message"]
        deep = {"type": "object", "properties": {"a": {"type": "object", "properties": {
            "b": {"type": "object", "properties": {"c": {"type": "integer"}}}}}}}
        e = error_of(s, {"json_schema": deep})
        assert e["param"] == "json_schema" and "/properties/a/properties/b" in e["message"], e
        r = s.client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=5, extra_body={"grammar": 'root ::= "ok"\n'})
        assert r.choices[0].message.content == "ok"
    finally:
        assert s.stop() == 0


def test_bad_limit_flags_exit_2(spindle_bin, default_model):
    import subprocess
    p = subprocess.run([spindle_bin, "serve", "--model", default_model, "--grammar-max-depth", "0"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--grammar-max-depth" in p.stderr


def test_flexible_json_whitespace_still_validates(spindle_bin, default_model):
    s = Server(spindle_bin, default_model, "--grammar-json-whitespace", "flexible")
    try:
        for seed in (1, 2):
            r = chat(s, "Describe a person as JSON.", temperature=1.0, seed=seed, max_tokens=300,
                     response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}})
            c = r.choices[0]
            if c.finish_reason == "stop":
                jsonschema.validate(json.loads(c.message.content), PERSON)
            else:
                assert c.finish_reason == "length" and c.message.content.lstrip().startswith("{")
    finally:
        assert s.stop() == 0

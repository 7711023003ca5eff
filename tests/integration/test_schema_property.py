"""Property test of JSON Schema constraints on the real binary and the default model: random
schemas from a generator that covers every supported keyword, each sampled at temperature 1.0
with several seeds; every answer that ends (finish_reason "stop") validates against its schema
with Python's jsonschema, and most answers end (the generator bounds strings and arrays so
that a 135M model can finish). The run logs how many schemas and answers it tried."""
import json
import random

import jsonschema
import pytest

from spindle_server import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"
WORDS = ["alpha", "beta", "gamma", "delta", "red", "green", "blue", "yes", "no", "north", "south"]


class SchemaGen:
    """Random schemas over the supported keywords, bounded so that answers stay short."""

    def __init__(self, rng):
        self.rng = rng
        self.defs = {}

    def string(self):
        r = self.rng.random()
        if r < 0.2:
            return {"type": "string", "enum": self.rng.sample(WORDS, 3)}
        if r < 0.35:
            return {"type": "string", "format": self.rng.choice(["date", "time", "date-time", "uuid", "email",
                                                                  "uri"])}
        if r < 0.5:
            return {"type": "string", "pattern": self.rng.choice([r"^[a-z]{2,6}$", r"^\d{3}-\d{2}$",
                                                                  r"^(yes|no)$", r"^[A-Z][a-z]+$"])}
        lo = self.rng.randint(0, 3)
        return {"type": "string", "minLength": lo, "maxLength": lo + self.rng.randint(1, 12)}

    def integer(self):
        lo = self.rng.choice([-20, 0, 1, 10, 100])
        return {"type": "integer", "minimum": lo, "maximum": lo + self.rng.choice([5, 50, 900])}

    def leaf(self):
        return self.rng.choice([
            self.string, self.integer,
            lambda: {"type": "boolean"},
            lambda: {"type": "null"},
            lambda: {"type": ["string", "null"], "maxLength": 10},
            lambda: {"const": self.rng.choice(["fixed", 7, True, None])},
            lambda: {"enum": [1, "two", None, False]},
            lambda: {"type": "number", "minimum": 0} if self.rng.random() < 0.5 else {"type": "number"},
        ])()

    def array(self, depth):
        if self.rng.random() < 0.3:
            return {"type": "array", "prefixItems": [self.leaf(), self.leaf()], "items": False}
        lo = self.rng.randint(0, 1)
        return {"type": "array", "items": self.value(depth + 1), "minItems": lo, "maxItems": lo + 2}

    def obj(self, depth):
        n = self.rng.randint(1, 4)
        names = self.rng.sample(["id", "name", "kind", "size", "tags", "owner", "note", "when"], n)
        props = {k: self.value(depth + 1) for k in names}
        required = [k for k in names if self.rng.random() < 0.7]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    def value(self, depth):
        r = self.rng.random()
        if depth >= 3 or r < 0.45:
            return self.leaf()
        if r < 0.6:
            return self.array(depth)
        if r < 0.7:
            return {"anyOf": [self.leaf(), self.obj(depth + 1)]}
        if r < 0.78:
            name = f"d{len(self.defs)}"
            self.defs[name] = self.obj(depth + 1)
            return {"$ref": f"#/$defs/{name}"}
        return self.obj(depth)

    def schema(self):
        self.defs = {}
        s = self.obj(0)
        if self.rng.random() < 0.2:  # a recursive tree, depth bounded by the answer's length
            self.defs["node"] = {"type": "object", "properties": {
                "label": {"type": "string", "maxLength": 8},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                "required": ["label"], "additionalProperties": False}
            s["properties"]["tree"] = {"$ref": "#/$defs/node"}
        if self.defs:
            s["$defs"] = self.defs
        return s


@pytest.fixture(scope="module")
def server(spindle_bin, default_model):
    s = Server(spindle_bin, default_model, "--max-batch-size", "8")
    yield s
    assert s.stop() == 0


def test_random_schemas_sampled_at_temperature_1_validate(server):
    rng = random.Random(20261204)
    gen = SchemaGen(rng)
    client = server.client()
    tried = ended = 0
    for k in range(16):
        schema = gen.schema()
        for seed in (1, 2, 3):
            r = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Fill in this JSON."}], temperature=1.0,
                seed=seed, max_tokens=400,
                response_format={"type": "json_schema", "json_schema": {"name": f"s{k}", "schema": schema}})
            c = r.choices[0]
            tried += 1
            if c.finish_reason != "stop":
                assert c.finish_reason == "length", c.finish_reason
                continue
            ended += 1
            doc = json.loads(c.message.content)
            jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())
    print(f"random schemas: 16 schemas, {tried} answers, {ended} ended and validated")
    assert ended >= tried * 0.8, f"only {ended} of {tried} answers ended within max_tokens"

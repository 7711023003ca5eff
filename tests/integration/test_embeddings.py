"""/v1/embeddings on the real binary: the openai SDK (floats, base64, lists, token ids),
langchain-openai's OpenAIEmbeddings, vectors equal to llama.cpp's within 1e-3 cosine
distance for both models with mean and last pooling (tests/data/embeddings_*.json, made by
tools/embedding_reference.sh), the 400s, and embeddings served while a chat streams."""
import base64
import json
import math
import pathlib
import struct
import subprocess
import threading
import time

import openai
import pytest

from spindle_server import Server

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
SMOL = "SmolLM2-135M-Instruct.Q4_1"


def cosine_distance(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return 1 - dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def reference(name: str) -> dict:
    with open(DATA / f"embeddings_{name}.json") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def smol_last(spindle_bin, default_model):
    server = Server(spindle_bin, default_model, "--pooling", "last")
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def stories_mean(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--pooling", "mean")
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def stories_last(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--pooling", "last")
    yield server
    assert server.stop() == 0


def check_against_reference(server: Server, name: str, pooling: str) -> list:
    """Every reference prompt: same token count, cosine distance below 1e-3; returns the distances."""
    ref = reference(name)
    distances = []
    for case in ref["pooling"][pooling]:
        r = server.client().embeddings.create(model=server_model(server), input=case["prompt"],
                                              encoding_format="float")
        assert r.usage.prompt_tokens == case["prompt_tokens"], case["prompt"]
        vec = r.data[0].embedding
        assert len(vec) == len(case["embedding"])
        d = cosine_distance(vec, case["embedding"])
        assert d < 1e-3, f"{name} {pooling} {case['prompt']!r}: cosine distance {d}"
        distances.append(d)
    return distances


def server_model(server: Server) -> str:
    return server.client().models.list().data[0].id


# --- llama.cpp's vectors ---

def test_smollm2_mean_equals_llama_cpp(smol_server):
    print("smollm2 mean cosine distances", check_against_reference(smol_server, "smollm2", "mean"))


def test_smollm2_last_equals_llama_cpp(smol_last):
    print("smollm2 last cosine distances", check_against_reference(smol_last, "smollm2", "last"))


def test_stories_mean_equals_llama_cpp(stories_mean):
    print("stories260k mean cosine distances", check_against_reference(stories_mean, "stories260k", "mean"))


def test_stories_last_equals_llama_cpp(stories_last):
    print("stories260k last cosine distances", check_against_reference(stories_last, "stories260k", "last"))


def test_mean_and_last_pooling_differ(smol_server, smol_last):
    text = "The quick brown fox jumps over the lazy dog."
    mean = smol_server.client().embeddings.create(model=SMOL, input=text).data[0].embedding
    last = smol_last.client().embeddings.create(model=SMOL, input=text).data[0].embedding
    assert cosine_distance(mean, last) > 0.01
    for vec in (mean, last):
        assert abs(sum(x * x for x in vec) - 1) < 1e-4  # L2-normalized


# --- the openai SDK and langchain ---

def test_sdk_floats_base64_lists_and_token_ids(smol_server):
    c = smol_server.client()
    texts = ["Hello world", "The quick brown fox jumps over the lazy dog.", "Hello world"]
    r = c.embeddings.create(model=SMOL, input=texts, encoding_format="float")
    assert r.object == "list" and r.model == SMOL
    assert [d.index for d in r.data] == [0, 1, 2] and all(d.object == "embedding" for d in r.data)
    assert all(len(d.embedding) == 576 for d in r.data)
    assert r.data[0].embedding == r.data[2].embedding  # the same input, the same vector
    assert r.usage.prompt_tokens == r.usage.total_tokens > 0
    # base64 (asked for: the SDK hands back the string) is the same float32 bytes
    b = c.embeddings.create(model=SMOL, input=texts[1], encoding_format="base64")
    raw = base64.b64decode(b.data[0].embedding)
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(r.data[1].embedding, abs=1e-8)
    # the SDK's default (base64 on the wire, decoded by the SDK) gives the same vector
    d = c.embeddings.create(model=SMOL, input=texts[1])
    assert d.data[0].embedding == pytest.approx(r.data[1].embedding, abs=1e-8)
    # token ids, one list or several, are used as they are
    ids = smol_server.request("POST", "/tokenize", {"content": texts[1]})[2]["tokens"]
    t = c.embeddings.create(model=SMOL, input=ids, encoding_format="float")
    assert t.usage.prompt_tokens == len(ids)
    assert t.data[0].embedding == pytest.approx(r.data[1].embedding, abs=1e-7)
    t2 = c.embeddings.create(model=SMOL, input=[ids, ids[:3]], encoding_format="float")
    assert len(t2.data) == 2 and t2.usage.prompt_tokens == len(ids) + 3
    # the route without /v1, as llama-server and proxies call it
    status, _, body = smol_server.request("POST", "/embeddings", {"input": "Hello world"})
    assert status == 200 and body["data"][0]["embedding"] == pytest.approx(r.data[0].embedding, abs=1e-8)


def test_langchain_openai_embeddings(smol_server):
    langchain_openai = pytest.importorskip("langchain_openai", reason="langchain-openai missing: run tools/setup.sh")
    emb = langchain_openai.OpenAIEmbeddings(base_url=smol_server.url + "/v1", api_key="unused", model=SMOL,
                                            check_embedding_ctx_length=False)
    docs = emb.embed_documents(["Hello world", "The quick brown fox jumps over the lazy dog."])
    query = emb.embed_query("Hello world")
    assert len(docs) == 2 and all(len(v) == 576 for v in docs)
    assert cosine_distance(query, docs[0]) < 1e-6
    ref = reference("smollm2")["pooling"]["mean"]
    assert cosine_distance(docs[1], ref[1]["embedding"]) < 1e-3


# --- errors ---

@pytest.mark.parametrize("body, param, code", [
    ({"input": "a", "dimensions": 64}, "dimensions", None),
    ({"input": ""}, "input", None),
    ({"input": []}, "input", None),
    ({"input": ["a", "b", 7]}, "input[2]", None),
    ({"input": ["a", "", "c"]}, "input[1]", None),
    ({"input": [1, 2, 10 ** 9]}, "input[2]", None),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", None),
    ({"model": SMOL}, "input", None),
    ({"input": " hello" * 9000}, "input", "context_length_exceeded"),
])
def test_bad_requests_are_400s_naming_the_field(smol_server, body, param, code):
    status, _, answer = smol_server.request("POST", "/v1/embeddings", body)
    assert status == 400, answer
    assert answer["error"]["param"] == param, answer
    assert answer["error"]["type"] == "invalid_request_error"
    assert answer["error"]["code"] == code


def test_unknown_model_is_a_404(smol_server):
    with pytest.raises(openai.NotFoundError) as e:
        smol_server.client().embeddings.create(model="text-embedding-3-small", input="a")
    assert e.value.body["code"] == "model_not_found"


# --- beside generation ---

def test_embeddings_while_a_chat_streams(smol_server):
    c = smol_server.client()
    texts = ["Hello world", "The quick brown fox jumps over the lazy dog."]
    alone = [d.embedding for d in c.embeddings.create(model=SMOL, input=texts, encoding_format="float").data]
    messages = [{"role": "user", "content": "Write a long story about a dragon."}]
    kw = dict(model=SMOL, messages=messages, max_tokens=200, temperature=0, extra_body={"ignore_eos": True})
    want = c.chat.completions.create(**kw).choices[0].message.content

    arrivals, pieces = [], []
    first = threading.Event()

    def read_stream():
        for chunk in smol_server.client().chat.completions.create(stream=True, **kw):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                arrivals.append(time.monotonic())
                first.set()

    reader = threading.Thread(target=read_stream)
    reader.start()
    assert first.wait(60)
    for _ in range(3):
        got = [d.embedding for d in c.embeddings.create(model=SMOL, input=texts, encoding_format="float").data]
        assert got == alone  # the CPU backend: a row's result does not depend on the batch
    served = time.monotonic()
    reader.join(120)
    assert not reader.is_alive()
    assert sum(t > served for t in arrivals) >= 5, "the chat was still streaming after the embeddings were served"
    assert "".join(pieces) == want  # generation beside embeddings is unchanged


def test_auto_pooling_comes_from_the_model_file(spindle_bin, tmp_path):
    """--pooling auto (the default) takes the GGUF's llama.pooling_type (llama.cpp's numbering:
    3 last, 2 cls), else mean: a synthetic model written with pooling_type 3 embeds as
    --pooling last does, and one without it as --pooling mean."""
    mkmodel = str(pathlib.Path(spindle_bin).parent / "mkmodel")
    with_type, without = str(tmp_path / "last.gguf"), str(tmp_path / "plain.gguf")
    for path, extra in ((with_type, ["--pooling-type", "3"]), (without, [])):
        subprocess.run([mkmodel, "--shape", "stories260k", "--type", "F32", *extra, "-o", path], check=True,
                       capture_output=True)

    def embed(path, *flags):
        s = Server(spindle_bin, path, *flags)
        try:
            return s.client().embeddings.create(model=server_model(s), input="Once upon a time there was",
                                                encoding_format="float").data[0].embedding
        finally:
            assert s.stop() == 0

    auto_typed, last_typed, mean_typed = embed(with_type), embed(with_type, "--pooling", "last"), embed(
        with_type, "--pooling", "mean")
    assert auto_typed == last_typed and auto_typed != mean_typed
    auto_plain, mean_plain = embed(without), embed(without, "--pooling", "mean")
    assert auto_plain == mean_plain

"""The fixes real clients trip on, behind the real binary: stream endings (the chunk with
finish_reason carries no text, whatever ended the generation), the routes without /v1,
GET /v1/models/{id}, model aliases (--served-model-name repeated), the gateway metrics
(a 0..1 KV-cache gauge, vLLM's names behind --metrics-names vllm) and the sampling
defaults (flags, else the GGUF's general.sampling.*, else the API's)."""
import json
import subprocess
import threading
import time
import urllib.request

import openai
import pytest

from spindle_server import Server

STORIES = "stories260K"


@pytest.fixture(scope="module")
def stories(spindle_bin, stories_model):
    s = Server(spindle_bin, stories_model, "--served-model-name", STORIES, "--served-model-name", "gpt-4o",
               "--served-model-name", "gpt-3.5-turbo", "--metrics-names", "vllm")
    yield s
    assert s.stop() == 0


def sse_chunks(server, path, body):
    """The parsed data: events of one stream (up to [DONE])."""
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    chunks = []
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


@pytest.fixture(scope="module")
def smollm(spindle_bin, default_model):
    s = Server(spindle_bin, default_model, "--served-model-name", STORIES)
    yield s
    assert s.stop() == 0


# stories260K never emits its end token, so the end-of-generation case runs on SmolLM2 (same
# served name, so one body serves both)
@pytest.mark.parametrize("server,extra,finish", [
    ("stories", {"max_tokens": 5}, "length"),  # the budget
    ("smollm", {"max_tokens": 400, "temperature": 0}, "stop"),  # EOG: the model's end-of-turn token
    ("stories", {"max_tokens": 200, "stop": [" the"]}, "stop"),  # a stop string
])
def test_the_finish_chunk_carries_no_text(request, server, extra, finish):
    stories = request.getfixturevalue(server)
    chat = sse_chunks(stories, "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "Say hello in one word."}], "stream": True, "seed": 3,
                       **extra})
    with_finish = [c for c in chat if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(with_finish) == 1 and with_finish[0] is chat[-1]
    assert with_finish[0]["choices"][0]["finish_reason"] == finish
    assert with_finish[0]["choices"][0]["delta"] == {}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chat)
    assert text  # every bit of it came while finish_reason was null
    plain = stories.client().chat.completions.create(
        model=STORIES, messages=[{"role": "user", "content": "Say hello in one word."}], seed=3, **extra)
    assert plain.choices[0].message.content == text
    # a raw prompt in ChatML, so that SmolLM2 ends its turn here too
    prompt = "<|im_start|>user\nSay hello in one word.<|im_end|>\n<|im_start|>assistant\n"
    comp = sse_chunks(stories, "/v1/completions", {"prompt": prompt, "stream": True, "seed": 3, **extra})
    last = comp[-1]["choices"][0]
    assert last["finish_reason"] == finish and last["text"] == ""
    assert all(c["choices"][0]["finish_reason"] is None for c in comp[:-1])


def test_the_tool_calls_finish_carries_nothing_else(spindle_bin, default_model):
    s = Server(spindle_bin, default_model)
    try:
        tools = [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]
        chunks = sse_chunks(s, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Call f with x = 1."}], "tools": tools,
            "tool_choice": "required", "parallel_tool_calls": False, "stream": True, "logprobs": True})
        last = chunks[-1]["choices"][0]
        assert last["finish_reason"] == "tool_calls" and last["delta"] == {} and last["logprobs"] is None
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("path,body", [
    ("/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
    ("/completions", {"prompt": "Hi", "max_tokens": 3}),
    ("/responses", {"input": "Hi", "max_output_tokens": 3}),
])
def test_routes_answer_without_v1(stories, path, body):
    status, _, answer = stories.request("POST", path, body=body)
    assert status == 200, answer
    status, _, models = stories.request("GET", "/models")
    assert status == 200 and models["data"][0]["id"] == STORIES


def test_models_by_id_and_aliases(stories):
    status, _, models = stories.request("GET", "/v1/models")
    assert status == 200 and len(models["data"]) == 1
    assert models["data"][0]["id"] == STORIES and models["data"][0]["aliases"] == ["gpt-4o", "gpt-3.5-turbo"]
    for name in (STORIES, "gpt-4o", "gpt-3.5-turbo", "stories260K.gguf"):
        status, _, m = stories.request("GET", f"/v1/models/{name}")
        assert status == 200 and m["id"] == name and m["root"] == STORIES and m["object"] == "model"
    model = stories.client().models.retrieve("gpt-4o")
    assert model.id == "gpt-4o"
    status, _, err = stories.request("GET", "/v1/models/gpt-5")
    assert status == 404 and err["error"]["code"] == "model_not_found"
    assert "`stories260K`, `gpt-4o`, `gpt-3.5-turbo`" in err["error"]["message"]
    # every name works in a request; an unknown one is a 404 naming the names served
    c = stories.client()
    for name in ("gpt-4o", "gpt-3.5-turbo"):
        r = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
        assert r.choices[0].message.content is not None
    with pytest.raises(openai.NotFoundError, match="gpt-4o"):
        c.chat.completions.create(model="gpt-4-turbo", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)


def test_gateway_metrics(stories):
    m = stories.metrics()
    assert 0.0 <= m["spindle_kv_cache_utilization"] <= 1.0
    label = '{model_name="stories260K"}'
    for name in ("num_requests_waiting", "num_requests_running", "kv_cache_usage_perc", "gpu_cache_usage_perc"):
        assert f"vllm:{name}{label}" in m
    # while a long generation runs, running is 1 and the KV cache is in use
    done = threading.Event()

    def generate():
        stories.client().completions.create(model=STORIES, prompt="Once", max_tokens=1500, extra_body={
            "ignore_eos": True})
        done.set()

    t = threading.Thread(target=generate)
    t.start()
    stories.wait_metric(f"vllm:num_requests_running{label}", lambda v: v == 1, timeout=20)
    m = stories.metrics()
    assert m["spindle_kv_cache_utilization"] > 0
    assert m[f"vllm:kv_cache_usage_perc{label}"] == m["spindle_kv_cache_utilization"]
    t.join(60)
    assert done.is_set()
    stories.wait_metric(f"vllm:num_requests_running{label}", lambda v: v == 0)


def test_vllm_names_only_when_asked(spindle_bin, stories_model):
    s = Server(spindle_bin, stories_model)
    try:
        m = s.metrics()
        assert "spindle_kv_cache_utilization" in m and not any(k.startswith("vllm:") for k in m)
    finally:
        assert s.stop() == 0


def completion(server, **kw):
    return server.client().completions.create(model=server.name, prompt="Once upon a time", max_tokens=12,
                                              **kw).choices[0].text


def test_sampling_defaults_come_from_flags_then_the_model_file(spindle_bin, tmp_path):
    mkmodel = str(__import__("pathlib").Path(spindle_bin).parent / "mkmodel")
    greedy_file = str(tmp_path / "temp0.gguf")
    subprocess.run([mkmodel, "--shape", "stories260k", "--type", "F32", "--sampling-temp", "0", "-o", greedy_file],
                   check=True, capture_output=True)
    plain_file = str(tmp_path / "plain.gguf")
    subprocess.run([mkmodel, "--shape", "stories260k", "--type", "F32", "-o", plain_file], check=True,
                   capture_output=True)
    # the file says temperature 0: a request without one is greedy, whatever its seed
    s = Server(spindle_bin, greedy_file)
    s.name = "temp0"
    try:
        assert "temperature 0 (model file)" in s.log_text()
        greedy = completion(s, temperature=0)
        assert completion(s, seed=1) == completion(s, seed=2) == greedy
        assert completion(s, seed=1, temperature=1.5) != completion(s, seed=2, temperature=1.5)  # the request wins
    finally:
        assert s.stop() == 0
    # a flag wins over the file
    s = Server(spindle_bin, greedy_file, "--temperature", "1.5")
    s.name = "temp0"
    try:
        assert "temperature 1.5 (setting)" in s.log_text()
        assert completion(s, seed=1) == completion(s, seed=1, temperature=1.5)
        assert completion(s, seed=1) != completion(s, seed=2)
    finally:
        assert s.stop() == 0
    # neither: the API's default, temperature 1
    s = Server(spindle_bin, plain_file, "--top-k", "5")
    s.name = "plain"
    try:
        assert "temperature 1 (default)" in s.log_text() and "top_k 5 (setting)" in s.log_text()
        assert completion(s, seed=4) == completion(s, seed=4, temperature=1.0, extra_body={"top_k": 5})
    finally:
        assert s.stop() == 0


def test_top_k_zero_turns_the_files_top_k_off(spindle_bin, tmp_path):
    mkmodel = str(__import__("pathlib").Path(spindle_bin).parent / "mkmodel")
    path = str(tmp_path / "topk1.gguf")
    subprocess.run([mkmodel, "--shape", "stories260k", "--type", "F32", "--sampling-top-k", "1", "-o", path],
                   check=True, capture_output=True)

    def completion(s, **kw):
        return s.client().completions.create(model="topk1", prompt="Once upon a time", max_tokens=24, **kw).choices[
            0].text

    # the file's top_k 1: every seed gives the most likely token
    s = Server(spindle_bin, path)
    try:
        assert "top_k 1 (model file)" in s.log_text()
        assert completion(s, seed=1) == completion(s, seed=2) == completion(s, temperature=0)
    finally:
        assert s.stop() == 0
    # --top-k 0 is a value (off), not "unset": it wins over the file
    s = Server(spindle_bin, path, "--top-k", "0")
    try:
        assert "top_k 0 (setting)" in s.log_text()
        assert completion(s, seed=1) != completion(s, seed=2)
    finally:
        assert s.stop() == 0


def test_bad_sampling_flags_stop_the_start(spindle_bin, stories_model):
    r = subprocess.run([spindle_bin, "serve", "--model", stories_model, "--temperature", "3"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "--temperature: expected a number between 0 and 2" in r.stderr

"""The OpenAI API of `spindle serve` driven by the official openai SDK and curl, on stories260K."""
import asyncio
import json
import subprocess

import pytest

PROMPT = "Once upon a time, there was a little girl named Lily."


def test_health_models_and_served_name(stories_server):
    status, _, body = stories_server.request("GET", "/health")
    assert (status, body) == (200, {"status": "ok"})
    models = stories_server.client().models.list()
    assert [m.id for m in models.data] == ["stories260K"]
    assert models.data[0].object == "model"


def test_completion_non_streaming(stories_server):
    c = stories_server.client()
    r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=16, temperature=0)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert r.choices[0].finish_reason in ("stop", "length")
    assert isinstance(r.choices[0].text, str) and r.choices[0].text
    assert r.usage.completion_tokens <= 16 and r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # the file name is accepted too; greedy is deterministic
    again = c.completions.create(model="stories260K.gguf", prompt=PROMPT, max_tokens=16, temperature=0)
    assert again.choices[0].text == r.choices[0].text


def test_completion_length_finish_and_ignore_eos(stories_server):
    r = stories_server.client().completions.create(model="stories260K", prompt=PROMPT, max_tokens=40, temperature=0,
                                                   extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 40


def test_completion_streaming_matches_non_streaming(stories_server):
    c = stories_server.client()
    full = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=24, temperature=0)
    chunks = list(c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=24, temperature=0, stream=True,
                                       stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == full.choices[0].text
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert all(ch.usage is None for ch in chunks[:-1])


def test_chat_non_streaming_and_streaming(stories_server):
    c = stories_server.client()
    messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me about Lily."}]
    r = c.chat.completions.create(model="stories260K", messages=messages, max_tokens=20, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    cached = r.usage.prompt_tokens_details.cached_tokens  # whole KV blocks of 16 an earlier test computed
    assert 0 <= cached < r.usage.prompt_tokens and cached % 16 == 0, r.usage
    stream = list(c.chat.completions.create(model="stories260K", messages=messages, max_tokens=20, temperature=0,
                                            stream=True))
    assert stream[0].choices[0].delta.role == "assistant"
    assert all(ch.object == "chat.completion.chunk" and ch.id == stream[0].id for ch in stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in stream)
    assert text == r.choices[0].message.content
    assert stream[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_chat_content_parts_join_like_a_string(stories_server):
    c = stories_server.client()
    as_string = c.chat.completions.create(model="stories260K", max_tokens=12, temperature=0,
                                          messages=[{"role": "user", "content": "Lily\nhad a cat."}])
    as_parts = c.chat.completions.create(model="stories260K", max_tokens=12, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": "Lily"}, {"type": "text", "text": "had a cat."}]}])
    assert as_parts.usage.prompt_tokens == as_string.usage.prompt_tokens
    assert as_parts.choices[0].message.content == as_string.choices[0].message.content


def test_n_choices(stories_server):
    r = stories_server.client().completions.create(model="stories260K", prompt=PROMPT, max_tokens=12, n=2,
                                                   temperature=1.0, seed=7, extra_body={"ignore_eos": True})
    assert sorted(ch.index for ch in r.choices) == [0, 1]
    assert all(ch.finish_reason == "length" for ch in r.choices)
    assert r.usage.completion_tokens == 24  # summed over the choices; the prompt counted once
    single = stories_server.client().completions.create(model="stories260K", prompt=PROMPT, max_tokens=1)
    assert r.usage.prompt_tokens == single.usage.prompt_tokens
    stream = list(stories_server.client().chat.completions.create(
        model="stories260K", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, n=2, stream=True, seed=3))
    indexes = {ch.choices[0].index for ch in stream if ch.choices}
    assert indexes == {0, 1}
    finishes = [ch.choices[0] for ch in stream if ch.choices and ch.choices[0].finish_reason]
    assert sorted(ch.index for ch in finishes) == [0, 1]


def test_prompt_forms(stories_server):
    c = stories_server.client()
    ids = stories_server.request("POST", "/tokenize", {"content": PROMPT, "add_special": True})[2]["tokens"]
    as_text = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=8, temperature=0)
    as_ids = c.completions.create(model="stories260K", prompt=ids, max_tokens=8, temperature=0)
    assert as_ids.choices[0].text == as_text.choices[0].text
    many = c.completions.create(model="stories260K", prompt=[PROMPT, "The dog"], max_tokens=8, temperature=0)
    assert [ch.index for ch in sorted(many.choices, key=lambda ch: ch.index)] == [0, 1]
    first = next(ch for ch in many.choices if ch.index == 0)
    assert first.text == as_text.choices[0].text
    many_ids = c.completions.create(model="stories260K", prompt=[ids, ids], max_tokens=8, temperature=0)
    assert all(ch.text == as_text.choices[0].text for ch in many_ids.choices)


def test_stop_strings(stories_server):
    c = stories_server.client()
    full = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=48, temperature=0,
                                extra_body={"ignore_eos": True}).choices[0].text
    # a stop string from the middle of the greedy continuation, spanning tokens
    words = full.split(" ")
    assert len(words) > 4, full
    stop = " ".join(words[3:5])
    cut = full[:full.index(stop)]
    r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=48, temperature=0, stop=[stop, "zzzz"])
    assert r.choices[0].text == cut
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model="stories260K", prompt=PROMPT, max_tokens=48, temperature=0, stop=stop, stream=True) if ch.choices)
    assert streamed == cut


def test_logprobs_chat_and_completions(stories_server):
    c = stories_server.client()
    r = c.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Lily"}], max_tokens=6,
                                  temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) >= 1
    for entry in content:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-5)
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob >= entry.top_logprobs[2].logprob
        assert bytes(entry.bytes).decode("utf-8", errors="replace") is not None
    assert "".join(e.token for e in content) == r.choices[0].message.content
    comp = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2)
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert "".join(lp.tokens) == comp.choices[0].text


def test_seed_determinism_alone_vs_batch(stories_server):
    kw = dict(model="stories260K", max_tokens=32, temperature=0.9, top_p=0.95, extra_body={"ignore_eos": True})
    c = stories_server.client()
    alone = c.completions.create(prompt=PROMPT, seed=1234, **kw).choices[0].text

    async def batch():
        ac = stories_server.async_client()
        others = [ac.completions.create(prompt=f"The {i} cats", seed=i, **kw) for i in range(31)]
        mine = ac.completions.create(prompt=PROMPT, seed=1234, **kw)
        results = await asyncio.gather(mine, *others)
        await ac.close()
        return results

    results = asyncio.run(batch())
    assert results[0].choices[0].text == alone
    assert len({r.choices[0].text for r in results}) > 1  # the others really differed


def test_64_concurrent_streams_with_usage(stories_server):
    async def one(ac, i):
        text, usage, finish = "", None, None
        stream = await ac.completions.create(model="stories260K", prompt=f"Story {i}:", max_tokens=20 + i % 7,
                                             temperature=0.7, seed=i, stream=True,
                                             stream_options={"include_usage": True},
                                             extra_body={"ignore_eos": True})
        async for ch in stream:
            if ch.choices:
                text += ch.choices[0].text
                finish = ch.choices[0].finish_reason or finish
            if ch.usage:
                usage = ch.usage
        return i, text, usage, finish

    async def run():
        ac = stories_server.async_client()
        out = await asyncio.gather(*[one(ac, i) for i in range(64)])
        await ac.close()
        return out

    for i, text, usage, finish in asyncio.run(run()):
        assert finish == "length"
        assert usage.completion_tokens == 20 + i % 7
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_tokenize_detokenize_roundtrip(stories_server):
    status, _, body = stories_server.request("POST", "/tokenize", {"content": PROMPT})
    assert status == 200 and body["count"] == len(body["tokens"]) and body["max_model_len"] == 2048
    status, _, back = stories_server.request("POST", "/detokenize", {"tokens": body["tokens"]})
    assert status == 200 and back["content"].strip() == PROMPT


def test_curl_chat_and_stream(stories_server):
    body = json.dumps({"model": "stories260K", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
                       "temperature": 0})
    out = subprocess.run(["curl", "-sS", "-H", "Content-Type: application/json", "-d", body,
                          stories_server.url + "/v1/chat/completions"], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["choices"][0]["message"]["role"] == "assistant"
    assert set(r["usage"]) >= {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}
    assert {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second"} <= set(r["timings"])
    stream_body = json.dumps({"model": "stories260K", "prompt": "Lily", "max_tokens": 8, "stream": True})
    out = subprocess.run(["curl", "-sSN", "-D", "-", "-H", "Content-Type: application/json", "-d", stream_body,
                          stories_server.url + "/v1/completions"], capture_output=True, text=True, check=True)
    head, _, events = out.stdout.partition("\n\n")  # text mode turned CRLF into LF
    assert "text/event-stream" in head.lower()
    lines = [line for line in events.split("\n") if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    assert all(json.loads(line[6:])["object"] == "text_completion" for line in lines[:-1])

"""Reasoning split out of the answer, behind the real binary: the default model served with
thinking templates from ../shared/testdata/templates (Qwen 3, whose model opens <think>
itself, and DeepSeek-R1, whose generation prompt opens it), its output shaped by a grammar so
that it thinks; message.reasoning_content and content, the same split streamed as
delta.reasoning_content then delta.content, usage.completion_tokens_details.reasoning_tokens,
and enable_thinking false reaching the template."""
import os

import pytest

from spindle_server import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"
TEMPLATES = os.path.join(os.environ.get("SPINDLE_TESTDATA", "../shared/testdata"), "templates")
QWEN3 = os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja")
R1 = os.path.join(TEMPLATES, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
# the model's own words, in the shape of a thinking answer
OPENS = 'root ::= "<think>\\n" [a-z ]{5,30} "\\n</think>\\n\\n" [a-z ]{2,20} "."\n'
INSIDE = 'root ::= [a-z ]{5,30} "\\n</think>\\n\\n" [a-z ]{2,20} "."\n'


@pytest.fixture(scope="module", params=[(QWEN3, OPENS), (R1, INSIDE)], ids=["qwen3", "deepseek-r1"])
def thinking(request, spindle_bin, default_model):
    template, grammar = request.param
    if not os.path.exists(template):
        pytest.skip(f"{template} absent")
    s = Server(spindle_bin, default_model, "--chat-template", template)
    yield s, grammar
    assert s.stop() == 0


def ask(server, grammar, **kw):
    return server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=0.7, seed=kw.pop("seed", 2),
        max_tokens=80, extra_body={"grammar": grammar}, **kw)


@pytest.mark.parametrize("seed", [2, 3])
def test_reasoning_and_content_split(thinking, seed):
    server, grammar = thinking
    r = ask(server, grammar, seed=seed)
    m = r.choices[0].message
    reasoning = m.model_dump().get("reasoning_content")
    assert reasoning and reasoning.endswith("\n") and "<think>" not in reasoning and "</think>" not in reasoning
    assert m.content and m.content.endswith(".") and "think>" not in m.content
    details = r.usage.completion_tokens_details
    assert 0 < details.reasoning_tokens < r.usage.completion_tokens


def test_streamed_split_equals_the_whole_answer(thinking):
    server, grammar = thinking
    whole = ask(server, grammar).choices[0].message
    reasoning, content, order = "", "", []
    for chunk in ask(server, grammar, stream=True):
        for ch in chunk.choices:
            d = ch.delta.model_dump()
            if d.get("reasoning_content"):
                reasoning += d["reasoning_content"]
                order.append("r")
            if d.get("content"):
                content += d["content"]
                order.append("c")
    assert reasoning == whole.model_dump()["reasoning_content"] and content == whole.content
    assert "".join(order).rstrip("c").count("c") == 0, "content arrived before the reasoning ended"


def test_enable_thinking_false_reaches_the_template(spindle_bin, default_model):
    if not os.path.exists(QWEN3):
        pytest.skip(f"{QWEN3} absent")
    s = Server(spindle_bin, default_model, "--chat-template", QWEN3)
    try:
        status, _, data = s.request("POST", "/tokenize", {"model": MODEL, "messages": [
            {"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": False},
            "with_pieces": True})
        assert status == 200
        r = s.client().chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        assert r.choices[0].message.model_dump().get("reasoning_content") is None
    finally:
        assert s.stop() == 0


def test_max_reasoning_tokens_ends_the_thinking(spindle_bin, default_model):
    """DeepSeek-R1's prompt opens the thinking; the default model never closes it by itself, so
    the budget is what ends it: after N tokens spindle writes </think> and the answer follows,
    the same streamed or not, with speculation (drafts never cross the budget)."""
    if not os.path.exists(R1):
        pytest.skip(f"{R1} absent")
    s = Server(spindle_bin, default_model, "--chat-template", R1)
    try:
        client = s.client()
        for budget in (3, 8):
            kw = dict(model=MODEL, messages=[{"role": "user", "content": "What is 2+2?"}], temperature=0,
                      max_tokens=40, logprobs=True, extra_body={"max_reasoning_tokens": budget})
            r = client.chat.completions.create(**kw)
            tokens = [t.token for t in r.choices[0].logprobs.content]
            close = "".join(tokens).index("</think>")
            inside = 0
            text = ""
            for t in tokens:  # the tokens before </think> begins
                if len(text) >= close:
                    break
                text += t
                inside += 1
            assert inside == budget, (budget, tokens)
            m = r.choices[0].message
            assert m.content and m.model_dump()["reasoning_content"] is not None
            assert r.usage.completion_tokens_details.reasoning_tokens > budget
            streamed_r, streamed_c = "", ""
            for chunk in client.chat.completions.create(stream=True, **kw):
                for ch in chunk.choices:
                    d = ch.delta.model_dump()
                    streamed_r += d.get("reasoning_content") or ""
                    streamed_c += d.get("content") or ""
            assert (streamed_r, streamed_c) == (m.model_dump()["reasoning_content"], m.content)
        status, _, data = s.request("POST", "/v1/chat/completions", {
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_reasoning_tokens": 5,
            "grammar": 'root ::= "x"\n'})
        assert status == 400 and data["error"]["param"] == "max_reasoning_tokens"
    finally:
        assert s.stop() == 0


def test_max_reasoning_tokens_needs_a_thinking_template(spindle_bin, default_model):
    s = Server(spindle_bin, default_model)
    try:
        status, _, data = s.request("POST", "/v1/chat/completions", {
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_reasoning_tokens": 5})
        assert status == 400 and data["error"]["param"] == "max_reasoning_tokens"
        assert "no thinking" in data["error"]["message"]
    finally:
        assert s.stop() == 0

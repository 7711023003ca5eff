"""Speculative decoding behind the real binary: the output with speculation on is the output
with it off (greedy and seeded, streamed and not, n > 1, logprobs) on the default model
through the openai SDK; copy-heavy prompts get drafts accepted; the suffix cache never
serves one API key's text to another; the `speculative` field and the flags refuse bad
values naming what is wrong."""
import subprocess

import openai
import pytest

from spindle_server import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"
CODE = """def fibonacci(n):
    if n < 2:
        return n
    a, b = 0, 1
    for _ in range(n - 1):
        a, b = b, a + b
    return b


def factorial(n):
    result = 1
    for i in range(2, n + 1):
        result *= i
    return result
"""
COPY = [{"role": "user", "content": "Repeat this code exactly, adding nothing:\n\n" + CODE}]


@pytest.fixture(scope="module")
def spec_servers(spindle_bin, default_model):
    """The default model twice: speculation auto and off. The first drafts whenever it can
    (--no-spec-gate), so the checks below see drafts on every machine: with the gate, a CPU
    whose verify rows cost most of a step (a 2-core Zen 4: 65%) rightly drafts little. The
    output is the same either way; the gate's choices are measured by make bench-spec."""
    on = Server(spindle_bin, default_model, "--no-spec-gate")
    off = Server(spindle_bin, default_model, "--speculative", "off")
    yield on, off
    assert on.stop() == 0 and off.stop() == 0


def spec_totals(server):
    m = server.metrics()
    proposed = sum(v for name, v in m.items() if name.startswith("spindle_spec_proposed_tokens_total{"))
    accepted = sum(v for name, v in m.items() if name.startswith("spindle_spec_accepted_tokens_total{"))
    return proposed, accepted


def choices(server, **kw):
    r = server.client().chat.completions.create(model=MODEL, messages=COPY, max_tokens=120, **kw)
    return [(c.message.content, c.finish_reason,
             [(t.token, t.logprob) for t in c.logprobs.content] if c.logprobs else None) for c in r.choices]


@pytest.mark.parametrize("kw", [
    dict(temperature=0),
    dict(temperature=0.8, seed=11, n=2, frequency_penalty=0.4, presence_penalty=0.2, logprobs=True, top_logprobs=2),
    dict(temperature=0.7, seed=5, top_p=0.9, logit_bias={"1000": 3}, stop=["return b"]),
    dict(temperature=0, max_tokens=7),
], ids=["greedy", "seeded-n2-penalties-logprobs", "seeded-bias-stop", "max-tokens-cuts-a-run"])
def test_output_is_identical_with_speculation_on_and_off(spec_servers, kw):
    on, off = spec_servers
    kw = dict(kw)
    max_tokens = kw.pop("max_tokens", 120)
    got = on.client().chat.completions.create(model=MODEL, messages=COPY, max_tokens=max_tokens, **kw)
    want = off.client().chat.completions.create(model=MODEL, messages=COPY, max_tokens=max_tokens, **kw)
    assert len(got.choices) == len(want.choices)
    for g, w in zip(got.choices, want.choices):
        assert g.message.content == w.message.content
        assert g.finish_reason == w.finish_reason
        if w.logprobs:
            assert [(t.token, t.logprob, [a.token for a in t.top_logprobs]) for t in g.logprobs.content] == \
                [(t.token, t.logprob, [a.token for a in t.top_logprobs]) for t in w.logprobs.content]
    assert got.usage.completion_tokens == want.usage.completion_tokens


def test_copying_gets_drafts_accepted_and_streaming_matches(spec_servers):
    on, off = spec_servers
    before = spec_totals(on)
    stream = on.client().chat.completions.create(model=MODEL, messages=COPY, max_tokens=120, temperature=0,
                                                 stream=True)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    after = spec_totals(on)
    assert after[1] - before[1] > 20, "a copy of the prompt is mostly drafted"
    assert after[1] <= after[0]
    assert streamed == choices(off, temperature=0)[0][0]
    assert spec_totals(off) == (0, 0), "--speculative off drafts nothing"


def test_a_request_can_opt_out(spec_servers):
    on, _ = spec_servers
    before = spec_totals(on)
    r = on.client().chat.completions.create(model=MODEL, messages=COPY, max_tokens=60, temperature=0,
                                            extra_body={"speculative": False})
    assert r.usage.completion_tokens == 60
    assert spec_totals(on) == before


@pytest.mark.parametrize("value", ["yes", 1, [True], {"on": True}])
def test_speculative_of_the_wrong_type_is_a_400_naming_it(spec_servers, value):
    on, _ = spec_servers
    status, _, body = on.request("POST", "/v1/chat/completions",
                                 {"model": MODEL, "messages": COPY, "max_tokens": 4, "speculative": value})
    assert status == 400
    assert body["error"]["param"] == "speculative", body


def test_the_suffix_cache_is_never_shared_across_api_keys(spindle_bin, default_model):
    # only the suffix proposer, so every draft comes from earlier requests; drafting whenever
    # it can (--no-spec-gate), so a machine's row cost cannot hide a draft
    server = Server(spindle_bin, default_model, "--speculative", "suffix", "--no-spec-gate", "--api-key", "alice",
                    "--api-key", "bob")
    try:
        prompt = [{"role": "user", "content": "Write a short poem about the sea."}]
        alice = openai.OpenAI(base_url=server.url + "/v1", api_key="alice", max_retries=0)
        bob = openai.OpenAI(base_url=server.url + "/v1", api_key="bob", max_retries=0)
        first = alice.chat.completions.create(model=MODEL, messages=prompt, max_tokens=80, temperature=0)
        _, before = spec_totals(server)
        again = alice.chat.completions.create(model=MODEL, messages=prompt, max_tokens=80, temperature=0)
        _, after_alice = spec_totals(server)
        assert again.choices[0].message.content == first.choices[0].message.content
        assert after_alice - before > 40, "alice's second identical request is drafted from her first"
        proposed_before, _ = spec_totals(server)
        other = bob.chat.completions.create(model=MODEL, messages=prompt, max_tokens=80, temperature=0)
        proposed_after, _ = spec_totals(server)
        assert other.choices[0].message.content == first.choices[0].message.content
        assert proposed_after == proposed_before, "bob never gets a draft from alice's text"
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("flags, named", [
    (["--spec-k", "0"], "--spec-k"),
    (["--spec-k", "17"], "--spec-k"),
    (["--speculative", "ngram,bogus"], "--speculative"),
    (["--speculative", "self"], "--speculative"),
    (["--spec-ngram-min", "6", "--spec-ngram-max", "3"], "--spec-ngram-min"),
    (["--spec-suffix-mb", "0"], "--spec-suffix-mb"),
    (["--speculative", "draft"], "--speculative"),
    (["--draft-kv-cache-mb", "0"], "--draft-kv-cache-mb"),
])
def test_bad_speculation_flags_exit_2_naming_the_flag(spindle_bin, stories_model, flags, named):
    out = subprocess.run([spindle_bin, "serve", "--model", stories_model, "--port", "0", *flags],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and named in lines[0], out.stderr


def test_help_documents_every_speculation_flag(spindle_bin):
    out = subprocess.run([spindle_bin, "serve", "--help"], capture_output=True, text=True, timeout=30)
    for flag in ("--speculative", "--spec-k", "--spec-ngram-min", "--spec-ngram-max", "--spec-suffix-mb",
                 "--draft-model", "--draft-kv-cache-mb", "--self-spec-layers"):
        assert flag in out.stdout


@pytest.mark.parametrize("flags, named, why", [
    (["--draft-model", "DEFAULT"], "--draft-model", "vocabulary"),
    (["--self-spec-layers", "5"], "--self-spec-layers", "below the model's 5 layers"),
])
def test_a_drafter_the_model_cannot_use_exits_2(spindle_bin, stories_model, default_model, flags, named, why):
    flags = [default_model if f == "DEFAULT" else f for f in flags]
    out = subprocess.run([spindle_bin, "serve", "--model", stories_model, "--port", "0", *flags],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and named in errors[0] and why in errors[0], out.stderr


def test_self_speculation_keeps_the_output(spindle_bin, stories_model):
    on = Server(spindle_bin, stories_model, "--self-spec-layers", "3", "--speculative", "self", "--no-spec-gate")
    off = Server(spindle_bin, stories_model, "--speculative", "off")
    try:
        for kw in (dict(temperature=0), dict(temperature=0.9, seed=8, presence_penalty=0.5)):
            got = on.client().completions.create(model="stories260K", prompt="Once upon a time", max_tokens=96, **kw)
            want = off.client().completions.create(model="stories260K", prompt="Once upon a time", max_tokens=96, **kw)
            assert got.choices[0].text == want.choices[0].text
        assert on.metrics()['spindle_spec_proposed_tokens_total{proposer="self"}'] > 0
    finally:
        assert on.stop() == 0 and off.stop() == 0


def test_a_draft_model_quantized_from_the_target_keeps_the_output(spindle_bin, stories_model, tmp_path):
    draft = tmp_path / "stories260K.Q4_1.gguf"
    q = subprocess.run([spindle_bin, "quantize", stories_model, str(draft), "Q4_1"], capture_output=True, text=True,
                       timeout=60)
    assert q.returncode == 0, q.stderr
    on = Server(spindle_bin, stories_model, "--draft-model", str(draft), "--speculative", "draft", "--no-spec-gate")
    off = Server(spindle_bin, stories_model, "--speculative", "off")
    try:
        for kw in (dict(temperature=0), dict(temperature=0.9, seed=4, frequency_penalty=0.3)):
            for prompt in ("Once upon a time", "Lily and Tom went to the park"):
                got = on.client().completions.create(model="stories260K", prompt=prompt, max_tokens=64, **kw)
                want = off.client().completions.create(model="stories260K", prompt=prompt, max_tokens=64, **kw)
                assert got.choices[0].text == want.choices[0].text
        m = on.metrics()
        assert m['spindle_spec_accepted_tokens_total{proposer="draft"}'] > 0
        assert m['spindle_spec_proposed_tokens_total{proposer="ngram"}'] == 0
    finally:
        assert on.stop() == 0 and off.stop() == 0

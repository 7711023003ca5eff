"""A quantized KV cache (--kv-type q8_0, q4_0) from the outside, on the default model
(head width 64): the start line and /metrics say the format and the bytes a token and a
sequence hold, the same --kv-cache-mb holds 1.88x (q8_0) and 3.56x (q4_0) the blocks,
answers are deterministic and equal whether their prefix was computed or reused (from
the pool or the host tier), a persisted F16 disk tier is never read by a q8_0 server,
and bad settings stop the start naming what is wrong."""
import os

import pytest

from spindle_server import Server

MODEL = "SmolLM2-135M-Instruct.Q4_1"


def chat(server, system: str, question: str, max_tokens: int = 24):
    r = server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        max_tokens=max_tokens, temperature=0)
    return r.choices[0].message.content, r.usage


def history(name: str) -> str:
    return (f"You are a helpful assistant for {name}. {name} runs a small bakery in a harbour town and bakes bread, "
            f"cakes and pastries every morning before dawn. ") * 10


@pytest.fixture(scope="module")
def servers(spindle_bin, default_model):
    started = {t: Server(spindle_bin, default_model, "--kv-type", t, "--kv-cache-mb", "256") for t in
               ("f16", "q8_0", "q4_0")}
    yield started
    for s in started.values():
        assert s.stop() == 0


def test_start_line_and_metrics_name_the_format_and_its_bytes(servers):
    f16 = servers["f16"].metrics()
    for t, ratio in (("q8_0", 34 / 64), ("q4_0", 18 / 64)):
        m = servers[t].metrics()
        assert m[f'spindle_kv_cache_type_info{{type="{t}"}}'] == 1
        assert m["spindle_kv_bytes_per_token"] == f16["spindle_kv_bytes_per_token"] * ratio
        assert m["spindle_kv_bytes_per_sequence"] == pytest.approx(f16["spindle_kv_bytes_per_sequence"] * ratio,
                                                                  rel=1e-9)
        # the same 256 MiB (more than a whole-context sequence in f16) hold 1/ratio times the blocks (to within one block)
        assert abs(m["spindle_kv_blocks_total"] - f16["spindle_kv_blocks_total"] / ratio) <= 1
        log = servers[t].log_text()
        assert f"bytes per token ({t} K and V over 30 layers)" in log, log
    assert f16['spindle_kv_cache_type_info{type="f16"}'] == 1


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_answers_are_deterministic_and_equal_with_a_reused_prefix(servers, kv_type):
    server = servers[kv_type]
    system = history("Ada")
    first, u1 = chat(server, system, "What does Ada bake?")
    again, u2 = chat(server, system, "What does Ada bake?")
    assert first and first == again
    assert u2.prompt_tokens_details.cached_tokens >= u2.prompt_tokens - 32, u2  # the prefix came from the pool
    # streamed, the same text
    stream = server.client().chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": system}, {"role": "user", "content": "What does Ada bake?"}],
        max_tokens=24, temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == first


def test_q8_0_history_evicted_to_the_host_tier_comes_back_with_the_same_answer(spindle_bin, default_model):
    # 6 MiB of q8_0 hold ~510 tokens: four histories of ~290 tokens each do not fit
    tiered = Server(spindle_bin, default_model, "--kv-type", "q8_0", "--kv-cache-mb", "6", "--kv-host-mb", "64")
    computing = Server(spindle_bin, default_model, "--kv-type", "q8_0", "--kv-cache-mb", "6", "--no-prefix-cache")
    try:
        names = ["Ada", "Ben", "Cleo", "Dan"]
        for n in names:
            chat(tiered, history(n), "Who are you helping?", max_tokens=8)
        before = tiered.metrics()
        answer, usage = chat(tiered, history(names[0]), "Who are you helping?", max_tokens=8)
        after = tiered.metrics()
        want, _ = chat(computing, history(names[0]), "Who are you helping?", max_tokens=8)
        assert answer == want
        assert usage.prompt_tokens_details.cached_tokens > 0, usage
        assert after['spindle_kv_tier_hits_total{tier="host"}'] > before['spindle_kv_tier_hits_total{tier="host"}']
    finally:
        assert tiered.stop() == 0
        assert computing.stop() == 0


def test_a_persisted_f16_tier_is_not_read_by_a_q8_0_server(spindle_bin, default_model, tmp_path):
    os.chmod(tmp_path, 0o700)
    flags = ["--kv-cache-mb", "16", "--kv-disk-dir", str(tmp_path), "--kv-disk-persist", "--kv-disk-gb", "0.2"]
    f16 = Server(spindle_bin, default_model, *flags)
    try:
        chat(f16, history("Ada"), "Who are you helping?", max_tokens=4)
    finally:
        assert f16.stop() == 0
    assert list(tmp_path.glob("spindle-kv-*/*.kv")), "the f16 server left its blocks"
    q8 = Server(spindle_bin, default_model, "--kv-type", "q8_0", *flags)
    try:
        m = q8.metrics()
        assert m["spindle_kv_tier_disk_restored_blocks"] == 0
        assert m["spindle_kv_tier_disk_rejected_total"] >= 1
        _, usage = chat(q8, history("Ada"), "Who are you helping?", max_tokens=4)
        assert (usage.prompt_tokens_details.cached_tokens or 0) == 0, usage
    finally:
        assert q8.stop() == 0


@pytest.mark.parametrize("model,flags,message", [
    ("default", ["--kv-type", "q5_0"], "f16, q8_0, q4_0"),
    ("stories", ["--kv-type", "q8_0"], "multiple of 32; this model's is 8"),
])
def test_bad_kv_type_stops_the_start_with_a_clear_message(spindle_bin, default_model, stories_model, model, flags,
                                                          message):
    server = Server(spindle_bin, default_model if model == "default" else stories_model, *flags, wait_ready=False)
    code, log = server.failed_start()
    assert code != 0
    assert message in log, log

"""build/loadgen (the serving benchmark's load generator) against a real spindle on stories260K:
every dataset and arrival mode completes with exact token counts (usage), the latency metrics
are positive and ordered, prompts are as long as /tokenize says, server refusals are counted
as failures with their message, and bad flags exit 2 naming the flag."""
import json
import os
import subprocess

import pytest

from conftest import ROOT


@pytest.fixture(scope="session")
def loadgen_bin() -> str:
    path = os.environ.get("LOADGEN_BIN", str(ROOT / "build" / "loadgen"))
    if not os.path.isabs(path):
        path = str(ROOT / path)
    assert os.path.exists(path), f"{path} missing: run make build/loadgen (make test builds it)"
    return path


def run_loadgen(loadgen_bin, server, tmp_path, *flags, timeout=120):
    """(completed process, parsed --result-json) of one loadgen run against server."""
    out = tmp_path / "result.json"
    if out.exists():
        out.unlink()
    proc = subprocess.run([loadgen_bin, "--base-url", server.url, "--result-json", str(out), *flags],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"loadgen exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads(out.read_text())


def bos_tokens(server) -> int:
    """How many tokens the server adds in front of a prompt (BOS): usage counts them, /tokenize
    of the bare content does not."""
    plain = server.request("POST", "/tokenize", {"content": "hello", "add_special": False})[2]["tokens"]
    special = server.request("POST", "/tokenize", {"content": "hello", "add_special": True})[2]["tokens"]
    return len(special) - len(plain)


def assert_sane_metrics(r, n, output_len):
    assert r["completed"] == n, r["errors"]
    assert r["failed"] == 0
    assert r["errors"] == []
    assert r["total_output_tokens"] == n * output_len  # from usage, exactly
    assert r["output_lens"] == [output_len] * n
    assert not any("usage" in w for w in r["warnings"]), r["warnings"]
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert r[f"mean_{m}_ms"] > 0, m
        assert 0 < r[f"median_{m}_ms"] <= r[f"p90_{m}_ms"] <= r[f"p99_{m}_ms"], m
    for ttft, e2e in zip(r["ttfts"], r["e2els"]):
        assert 0 < ttft <= e2e
    assert r["median_ttft_ms"] <= r["median_e2el_ms"]
    assert r["duration"] > 0
    assert r["output_throughput"] == pytest.approx(r["total_output_tokens"] / r["duration"], rel=1e-6)
    assert r["request_throughput"] == pytest.approx(n / r["duration"], rel=1e-6)


def test_random_dataset_at_concurrency_4(loadgen_bin, stories_server, tmp_path):
    proc, r = run_loadgen(loadgen_bin, stories_server, tmp_path, "--dataset", "random", "--input-len", "32",
                          "--output-len", "16", "--num-prompts", "8", "--max-concurrency", "4", "--num-warmups", "1")
    assert_sane_metrics(r, 8, 16)
    # the prompts are exactly as long as the server's /tokenize counts, and the server's usage
    # agrees (plus the BOS it adds)
    assert r["input_lens"] == [32] * 8
    assert r["mean_input_tokens"] == 32
    assert r["total_input_tokens"] == 8 * 32
    assert r["usage_input_lens"] == [32 + bos_tokens(stories_server)] * 8
    assert r["model_id"] == "stories260K"
    assert r["base_url"] == stories_server.url
    assert r["max_concurrency"] == 4 and r["request_rate"] == "inf" and r["num_warmups"] == 1
    # the human table says the same
    assert "Successful requests:                    8" in proc.stdout
    assert "P99 TTFT (ms):" in proc.stdout


def test_poisson_arrivals_spread_the_run(loadgen_bin, stories_server, tmp_path):
    _, burst = run_loadgen(loadgen_bin, stories_server, tmp_path, "--input-len", "32", "--output-len", "16",
                           "--num-prompts", "8")
    _, poisson = run_loadgen(loadgen_bin, stories_server, tmp_path, "--input-len", "32", "--output-len", "16",
                             "--num-prompts", "8", "--request-rate", "4", "--seed", "0")
    assert_sane_metrics(poisson, 8, 16)
    assert poisson["request_rate"] == 4
    # 7 exponential gaps of mean 0.25 s (seed 0 draws 2.2 s in all); a burst of stories260K
    # requests takes a few tens of milliseconds
    assert poisson["duration"] > 1.0 > burst["duration"]


def test_shared_prefix_dataset(loadgen_bin, stories_server, tmp_path):
    _, r = run_loadgen(loadgen_bin, stories_server, tmp_path, "--dataset", "shared-prefix", "--prefix-len", "20",
                       "--input-len", "32", "--output-len", "16", "--num-prompts", "8", "--max-concurrency", "4")
    assert_sane_metrics(r, 8, 16)
    assert r["input_lens"] == [32] * 8
    assert r["prefix_len"] == 20 and r["dataset"] == "shared-prefix"


def test_chat_file_both_formats(loadgen_bin, stories_server, tmp_path):
    conversations = [
        {"messages": [{"role": "system", "content": "You tell short stories."},
                      {"role": "user", "content": "Tell me about a cat."},
                      {"role": "assistant", "content": "The reference answer, not sent."}]},
        {"conversations": [{"from": "human", "value": "Who was Lily?"}, {"from": "gpt", "value": "A girl."}]},
        {"neither": True},
    ]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(conversations))
    _, r = run_loadgen(loadgen_bin, stories_server, tmp_path, "--dataset", "chat", "--dataset-path", str(path),
                       "--output-len", "16", "--num-prompts", "8", "--max-concurrency", "4")
    assert_sane_metrics(r, 8, 16)
    assert r["endpoint"] == "/v1/chat/completions"
    # chat prompts are measured by the server's usage (the rendered template)
    assert all(n > 5 for n in r["input_lens"]) and r["input_lens"] == r["usage_input_lens"]
    assert any("skipped" in w for w in r["warnings"]), r["warnings"]


def test_refused_requests_are_failures_with_the_message(loadgen_bin, stories_server, tmp_path):
    _, r = run_loadgen(loadgen_bin, stories_server, tmp_path, "--model", "no-such-model", "--input-len", "8",
                       "--output-len", "4", "--num-prompts", "3")
    assert r["completed"] == 0 and r["failed"] == 3
    assert "HTTP 404" in r["errors"][0] and "no-such-model" in r["errors"][0], r["errors"]
    # max_tokens past the context: spindle's 400 with OpenAI's message
    proc, r = run_loadgen(loadgen_bin, stories_server, tmp_path, "--input-len", "8", "--output-len", "100000",
                          "--num-prompts", "2")
    assert r["completed"] == 0 and r["failed"] == 2
    assert "HTTP 400" in r["errors"][0] and "maximum context length" in r["errors"][0], r["errors"]
    assert "Failed requests:                        2" in proc.stdout


@pytest.mark.parametrize("flags,named", [
    (["--num-prompts", "x"], "--num-prompts"),
    (["--max-concurrency", "0"], "--max-concurrency"),
    (["--request-rate", "-1"], "--request-rate"),
    (["--dataset", "sharegpt"], "--dataset"),
    (["--bogus"], "--bogus"),
    (["--seed"], "--seed"),
    (["--dataset", "chat"], "--dataset-path"),
    (["--dataset", "shared-prefix", "--input-len", "16", "--prefix-len", "16"], "--prefix-len"),
    (["--base-url", "127.0.0.1:8080"], "--base-url"),
])
def test_bad_flags_exit_2_naming_the_flag(loadgen_bin, flags, named):
    proc = subprocess.run([loadgen_bin, *flags], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr, proc.stderr


def test_help_and_unreachable_server(loadgen_bin):
    proc = subprocess.run([loadgen_bin, "--help"], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 and "--max-concurrency" in proc.stdout
    proc = subprocess.run([loadgen_bin, "--base-url", "http://127.0.0.1:9"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 1
    assert "http://127.0.0.1:9/v1/models" in proc.stderr, proc.stderr

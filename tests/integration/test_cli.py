"""The spindle binary's one-shot commands, run as a user runs them."""
import json
import pathlib
import subprocess

import pytest

from conftest import ROOT


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)


def test_generate_prints_only_the_continuation(spindle_bin, stories_model):
    r = run([spindle_bin, "generate", "--model", stories_model, "--prompt", "Once upon a time",
             "--max-tokens", "24", "--threads", "2"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "no text generated"
    assert "Once upon a time" not in r.stdout, "the prompt must not be echoed"
    assert "tokens/s" in r.stderr and "tokens/s" not in r.stdout


def test_greedy_generate_is_deterministic(spindle_bin, stories_model):
    args = [spindle_bin, "generate", "--model", stories_model, "--prompt", "The cat", "--max-tokens", "40"]
    a, b = run(args), run(args + ["--threads", "1"])
    assert a.returncode == 0 and b.returncode == 0
    assert a.stdout == b.stdout


def test_seeded_sampling_repeats(spindle_bin, stories_model):
    args = [spindle_bin, "generate", "--model", stories_model, "--prompt", "Lily", "--max-tokens", "40",
            "--temperature", "0.9", "--top-p", "0.95", "--seed", "7"]
    a, b = run(args), run(args)
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout


def test_default_model_generates_english(spindle_bin, default_model):
    r = run([spindle_bin, "generate", "--model", default_model, "--prompt",
             "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
             "--max-tokens", "16"])
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_generate_with_a_quantized_kv_cache(spindle_bin, default_model, kv_type):
    r = run([spindle_bin, "generate", "--model", default_model, "--kv-type", kv_type, "--prompt",
             "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
             "--max-tokens", "16"])
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout


def test_kv_type_needs_a_head_width_of_32s(spindle_bin, stories_model):
    r = run([spindle_bin, "generate", "--model", stories_model, "--kv-type", "q8_0", "--prompt", "x"])
    assert r.returncode == 2
    assert "head width" in r.stderr and "q8_0" in r.stderr


def test_malformed_model_exits_2_with_one_clear_error(spindle_bin, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    r = run([spindle_bin, "generate", "--model", str(bad), "--prompt", "hi"])
    assert r.returncode == 2
    assert "bad.gguf" in r.stderr and "error" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_missing_model_exits_2(spindle_bin, tmp_path):
    r = run([spindle_bin, "generate", "--model", str(tmp_path / "nope.gguf"), "--prompt", "hi"])
    assert r.returncode == 2
    assert "nope.gguf" in r.stderr


def test_vocab_only_file_cannot_generate(spindle_bin):
    from conftest import testdata_dir
    vocab = testdata_dir() / "vocab" / "ggml-vocab-llama-spm.gguf"
    if not vocab.exists():
        pytest.skip("vocab fixture absent")
    r = run([spindle_bin, "generate", "--model", str(vocab), "--prompt", "hi"])
    assert r.returncode == 2
    assert "no tensors" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--max-tokens", "-1"], "--max-tokens"),
    (["--temperature", "abc"], "--temperature"),
    (["--top-p", "2"], "--top-p"),
    (["--threads", "0"], "--threads"),
    (["--kv-type", "q5_0"], "--kv-type"),
])
def test_bad_flags_exit_2_naming_the_flag(spindle_bin, stories_model, args, needle):
    r = run([spindle_bin, "generate", "--model", stories_model, "--prompt", "x", *args])
    assert r.returncode == 2
    assert needle in r.stderr


def test_context_overflow_is_refused(spindle_bin, stories_model):
    r = run([spindle_bin, "generate", "--model", stories_model, "--prompt", "x", "--max-tokens", "5000"])
    assert r.returncode == 2
    assert "exceeds the context" in r.stderr


def test_inspect_prints_architecture_and_tensors(spindle_bin, stories_model):
    r = run([spindle_bin, "inspect", stories_model])
    assert r.returncode == 0, r.stderr
    assert "llama" in r.stdout
    assert "blk.0.attn_q.weight" in r.stdout
    assert "token_embd.weight" in r.stdout


def test_bench_reports_json(spindle_bin, stories_model):
    r = run([spindle_bin, "bench", "--model", stories_model, "--pp", "64", "--tg", "16", "--reps", "2"])
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [l["test"] for l in lines] == ["pp64", "tg16"]
    assert all(l["tokens_per_s_median"] > 0 for l in lines)


def test_bench_measures_a_quantized_kv_cache(spindle_bin, default_model):
    r = run([spindle_bin, "bench", "--model", default_model, "--kv-type", "q8_0", "--pp", "64", "--tg", "8",
             "--reps", "1"])
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [l["test"] for l in lines] == ["pp64", "tg8"]
    assert all(l["kv_type"] == "q8_0" and l["tokens_per_s_median"] > 0 for l in lines)


def test_bench_batch_decodes_sequences_together(spindle_bin, stories_model):
    r = run([spindle_bin, "bench", "--model", stories_model, "--device", "cpu", "--pp", "0", "--tg", "8",
             "--batch", "4", "--reps", "2"])
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(lines) == 1
    tg = lines[0]
    assert set(tg) >= {"test", "threads", "n_tokens", "batch", "reps", "tokens_per_s_median", "step_ms_median",
                       "tokens_per_s"}
    assert tg["test"] == "tg8_b4"
    assert (tg["n_tokens"], tg["batch"], tg["reps"]) == (8, 4, 2)
    assert tg["threads"] >= 1
    assert len(tg["tokens_per_s"]) == 2 and all(x > 0 for x in tg["tokens_per_s"])
    assert min(tg["tokens_per_s"]) <= tg["tokens_per_s_median"] <= max(tg["tokens_per_s"])
    # tokens/s counts all 4 sequences: each rep took 4 * 8 / tokens_per_s seconds for its 8 steps, and
    # the median of nonnegative step times is at most twice their mean
    mean_step_ms = sum(1e3 * 4 * 8 / x for x in tg["tokens_per_s"]) / (2 * 8)
    assert 0 < tg["step_ms_median"] <= 2 * mean_step_ms


def test_bench_prompt_beyond_512_is_one_step(spindle_bin, stories_model):
    r = run([spindle_bin, "bench", "--model", stories_model, "--pp", "1024", "--tg", "4", "--reps", "1"])
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [l["test"] for l in lines] == ["pp1024", "tg4"]
    assert lines[1]["batch"] == 1 and lines[1]["step_ms_median"] > 0


def test_bench_depth_times_tokens_after_a_cached_context(spindle_bin, stories_model):
    r = run([spindle_bin, "bench", "--model", stories_model, "--pp", "16", "--tg", "4", "--depth", "100",
             "--reps", "1"])
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [l["test"] for l in lines] == ["pp16_d100", "tg4_d100"]
    assert all(l["depth"] == 100 and l["tokens_per_s_median"] > 0 for l in lines)
    assert lines[1]["step_ms_median"] > 0


@pytest.mark.parametrize("args,needle", [
    (["--depth", "-1"], "--depth"),
    (["--depth", "8", "--batch", "2"], "--depth"),
    (["--batch", "0"], "--batch"),
    (["--batch", "999"], "--batch"),
    (["--batch", "x"], "--batch"),
    (["--pp", "8193"], "--pp"),
    (["--kv-type", "bf16"], "--kv-type"),
])
def test_bench_bad_values_exit_2_naming_the_flag(spindle_bin, stories_model, args, needle):
    r = run([spindle_bin, "bench", "--model", stories_model, *args])
    assert r.returncode == 2
    assert needle in r.stderr
    assert r.stdout == ""

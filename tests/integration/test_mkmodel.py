"""tools/mkmodel: synthetic GGUF models in real shapes load and run in spindle, every
type, byte-identical for one seed; bad flags exit 2 naming the flag."""
import hashlib
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"]


@pytest.fixture(scope="module")
def mkmodel(spindle_bin):
    path = pathlib.Path(os.environ.get("MKMODEL_BIN", pathlib.Path(spindle_bin).parent / "mkmodel"))
    assert path.exists(), f"{path} missing: run make first"
    return str(path)


def make(mkmodel, out, *args):
    return subprocess.run([mkmodel, *args, "-o", str(out)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("qtype", TYPES)
def test_every_type_loads_and_generates(mkmodel, spindle_bin, tmp_path, qtype):
    out = tmp_path / f"s-{qtype}.gguf"
    r = make(mkmodel, out, "--shape", "stories260k", "--type", qtype, "--seed", "7")
    assert r.returncode == 0, r.stderr
    info = subprocess.run([spindle_bin, "inspect", str(out)], capture_output=True, text=True, timeout=60)
    assert info.returncode == 0, info.stderr
    assert "llama.block_count = 5" in info.stdout and "512 tokens" in info.stdout
    # matrices in the asked type, except ffn_down whose rows (172) are no whole number of blocks
    types = {line.split()[0]: line.split()[1] for line in info.stdout.splitlines() if line.startswith("  blk.0.")}
    assert types["blk.0.attn_q.weight"] == qtype and types["blk.0.attn_norm.weight"] == "F32", types
    assert types["blk.0.ffn_down.weight"] == ("F16" if qtype not in ("F32", "F16", "BF16") else qtype), types
    gen = subprocess.run([spindle_bin, "generate", "-m", str(out), "-p", "w1 w2 w3", "--max-tokens", "8",
                          "--temperature", "0"], capture_output=True, text=True, timeout=60)
    assert gen.returncode == 0, gen.stderr
    assert "generated: 8 tokens" in gen.stderr, gen.stderr


def test_same_seed_same_bytes_other_seed_other_bytes(mkmodel, tmp_path):
    digests = []
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        out = tmp_path / f"{name}.gguf"
        assert make(mkmodel, out, "--shape", "stories260k", "--type", "Q8_0", "--seed", seed).returncode == 0
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1] != digests[2]


def test_smollm2_shape(mkmodel, spindle_bin, tmp_path):
    out = tmp_path / "smollm2.gguf"
    r = make(mkmodel, out, "--shape", "smollm2-135m", "--type", "Q4_1", "--ctx", "2048")
    assert r.returncode == 0, r.stderr
    info = subprocess.run([spindle_bin, "inspect", str(out)], capture_output=True, text=True, timeout=60).stdout
    for line in ("llama.block_count = 30", "llama.embedding_length = 576", "llama.attention.head_count_kv = 3",
                 "llama.context_length = 2048", "49152 tokens"):
        assert line in info, info[:2000]
    assert not any(line.split()[:1] == ["output.weight"] for line in info.splitlines())  # tied, as SmolLM2
    gen = subprocess.run([spindle_bin, "generate", "-m", str(out), "-p", "w1", "--max-tokens", "4",
                          "--temperature", "0"], capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0 and "generated: 4 tokens" in gen.stderr, gen.stderr


@pytest.mark.parametrize("args, named", [
    (["--shape", "llama-70b", "--type", "Q4_1"], "--shape llama-70b"),
    (["--shape", "stories260k", "--type", "Q5_K"], "--type Q5_K"),
    (["--shape", "stories260k", "--type", "F16", "--seed", "x"], "--seed x"),
    (["--shape", "stories260k", "--type", "F16", "--bogus", "1"], "--bogus"),
])
def test_bad_flags_exit_2_naming_the_flag(mkmodel, tmp_path, args, named):
    r = make(mkmodel, tmp_path / "x.gguf", *args)
    assert r.returncode == 2 and named in r.stderr, (r.returncode, r.stderr)
    assert not (tmp_path / "x.gguf").exists()

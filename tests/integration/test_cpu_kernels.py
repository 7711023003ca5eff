"""--cpu-isa: the CPU kernel set is chosen at run time, named at start and in /metrics, a
set the machine lacks (or an unknown one) is refused with exit 2 naming it, avx2 and
avx512 give the same greedy text, and amx (an arithmetic of its own) serves sensible text."""
import re
import subprocess

import pytest

from spindle_server import Server


def cpu_flags() -> set:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


FLAGS = cpu_flags()
HAS_AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= FLAGS
HAS_AVX2 = {"avx2", "fma", "f16c"} <= FLAGS
# Linux lists amx_* only where it enables the tile state
HAS_AMX = HAS_AVX512 and {"amx_tile", "amx_int8"} <= FLAGS


def generate(spindle_bin, model, *flags):
    return subprocess.run([spindle_bin, "generate", "--model", model, "--prompt", "Once upon a time",
                           "--max-tokens", "24", "--threads", "2", *flags], capture_output=True, text=True, timeout=120)


def test_unknown_set_is_refused(spindle_bin, stories_model):
    for cmd in (["serve", "--model", stories_model], ["generate", "--model", stories_model, "--prompt", "x"],
                ["bench", "--model", stories_model]):
        r = subprocess.run([spindle_bin, *cmd, "--cpu-isa", "avx1024"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (cmd, r.stderr)
        assert "--cpu-isa" in r.stderr and "avx1024" in r.stderr and "avx512" in r.stderr


def test_a_set_the_cpu_lacks_is_refused_or_runs_when_present(spindle_bin, stories_model):
    if HAS_AVX512:
        server = Server(spindle_bin, stories_model, "--cpu-isa", "avx512")
        try:
            assert "avx512" in server.log_text()
            metrics = server.request("GET", "/metrics")[2]
            assert 'spindle_cpu_kernels_info{set="avx512"} 1' in metrics
        finally:
            assert server.stop() == 0
    else:
        r = subprocess.run([spindle_bin, "serve", "--model", stories_model, "--device", "cpu", "--cpu-isa", "avx512"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2
        assert "--cpu-isa" in r.stderr and "AVX-512" in r.stderr


def test_amx_is_refused_or_runs_when_present(spindle_bin, default_model):
    if HAS_AMX:
        server = Server(spindle_bin, default_model, "--cpu-isa", "amx")
        try:
            assert "threads, amx)" in server.log_text()
            metrics = server.request("GET", "/metrics")[2]
            assert 'spindle_cpu_kernels_info{set="amx"} 1' in metrics
            status, _, body = server.request("POST", "/v1/completions",
                                             {"prompt": "The capital of France is", "max_tokens": 8,
                                              "temperature": 0})
            assert status == 200, body
            assert "Paris" in body["choices"][0]["text"], body
        finally:
            assert server.stop() == 0
    else:
        r = subprocess.run([spindle_bin, "serve", "--model", default_model, "--device", "cpu", "--cpu-isa", "amx"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2
        assert "--cpu-isa" in r.stderr and "AMX" in r.stderr


def test_auto_names_the_best_set_at_start_and_in_metrics(spindle_bin, stories_model):
    best = "amx" if HAS_AMX else "avx512" if HAS_AVX512 else "avx2" if HAS_AVX2 else "generic"
    server = Server(spindle_bin, stories_model)
    try:
        assert f"threads, {best}" in server.log_text()
        metrics = server.request("GET", "/metrics")[2]
        assert f'spindle_cpu_kernels_info{{set="{best}"}} 1' in metrics
    finally:
        assert server.stop() == 0


def test_avx2_and_avx512_generate_the_same_text(spindle_bin, default_model):
    if not HAS_AVX512:
        pytest.skip("this CPU has no AVX-512 F/BW/VL/VNNI: only one of the two sets runs here")
    outputs = {}
    for isa in ("avx2", "avx512"):
        r = generate(spindle_bin, default_model, "--cpu-isa", isa)
        assert r.returncode == 0, r.stderr
        assert re.search(rf"threads?, {isa}[;)]", r.stderr), r.stderr
        outputs[isa] = r.stdout
    assert outputs["avx2"] and outputs["avx2"] == outputs["avx512"]


def test_generic_set_runs(spindle_bin, stories_model):
    r = generate(spindle_bin, stories_model, "--cpu-isa", "generic")
    assert r.returncode == 0, r.stderr
    assert re.search(r"threads?, generic[;)]", r.stderr) and r.stdout.strip()

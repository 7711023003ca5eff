"""The YAML config file of `spindle serve` (--config), from the outside: settings from
the file take effect on a real server (its port, the served model name, the queue's
bounds), a flag wins over the file, a bad file stops the start with exit status 2 and
file:line:key on stderr, and --print-config prints the merged settings as YAML that
reads back (with PyYAML) and feeds back as --config."""
import pathlib
import socket
import shutil
import subprocess
import tempfile
import time

import pytest
import yaml

from spindle_server import Server, free_port

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "config" / "spindle.yaml"


def write(tmp_path, text, name="spindle.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def print_config(spindle_bin, *args):
    out = subprocess.run([spindle_bin, *args, "--print-config"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


class ConfigServer(Server):
    """spindle serve with only --config (and extra flags): the file decides the port."""

    def __init__(self, binary, config, port, *flags):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="spindle-serve-", suffix=".log", delete=False)
        args = [binary, "serve", "--config", config, *flags]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_ready()


def test_file_settings_take_effect(spindle_bin, stories_model, tmp_path):
    port = free_port()
    config = write(tmp_path, f"""
# a service's settings
model: {stories_model}
port: {port}
threads: 2
served_model_name: from-the-file
max_batch_size: 1
queue_max_requests: 1
""")
    server = ConfigServer(spindle_bin, config, port)
    try:
        status, _, models = server.request("GET", "/v1/models")
        assert status == 200
        assert [m["id"] for m in models["data"]] == ["from-the-file"]
        # one running and one waiting fill the batch of 1 and the queue of 1: of four
        # long streams sent at once, at least two are refused with 429
        body = b'{"prompt": "Lily", "max_tokens": 2000, "ignore_eos": true, "stream": true}'
        socks = []
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            socks.append(s)
        statuses = []
        for s in socks:
            s.settimeout(30)
            statuses.append(s.recv(64).split(b" ")[1])
            s.close()
        # the HTTP threads may take the four in any order, and the first may still be waiting
        # (not yet admitted) when the second comes: one or two fit, the rest are refused
        assert statuses.count(b"200") in (1, 2) and statuses.count(b"429") == 4 - statuses.count(b"200"), statuses
        server.wait_metric("spindle_requests_waiting", lambda v: v == 0)
        log = server.log_text()
        assert "batch 1 sequences" in log and "queue 1 requests" in log, log
    finally:
        assert server.stop() == 0


def test_a_flag_overrides_the_file(spindle_bin, stories_model, tmp_path):
    file_port = free_port()
    config = write(tmp_path, f"model: {stories_model}\nport: {file_port}\nserved_model_name: file-name\nthreads: 2\n")
    server = Server(spindle_bin, stories_model, "--config", config, "--served-model-name", "flag-name")
    try:
        assert server.port != file_port  # Server's own --port won over the file's
        status, _, models = server.request("GET", "/v1/models")
        assert status == 200 and [m["id"] for m in models["data"]] == ["flag-name"]
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("text,line,key,what", [
    ("port: 8080\nmax_batch_size: lots\n", 2, "max_batch_size", "expected an integer between 1 and 4096, got 'lots'"),
    ("port: 8080\n\nportt: 1\n", 3, None, "unknown key 'portt'"),
    ("host: a\nhost: b\n", 2, "host", "given twice (first on line 1)"),
    ("api_keys: sk-1\n", 1, "api_keys", "expected a list of strings"),
    ("port: [1, 2]\n", 1, "port", "got a list"),
    ("access_log: perhaps\n", 1, "access_log", "expected true or false"),
    ("ready_queue_fraction: 2\n", 1, "ready_queue_fraction", "expected a number between 0 and 1"),
    ("- port: 1\n", 1, None, "must be a mapping of settings"),
])
def test_a_bad_file_exits_2_naming_file_line_and_key(spindle_bin, stories_model, tmp_path, text, line, key, what):
    config = write(tmp_path, text)
    t0 = time.monotonic()
    out = subprocess.run([spindle_bin, "serve", "--model", stories_model, "--config", config],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    want = f"{config}:{line}: " + (f"key '{key}': " if key else "")
    assert want in out.stderr and what in out.stderr, out.stderr
    assert "listening" not in out.stderr  # refused before anything started
    assert time.monotonic() - t0 < 10


def test_a_missing_config_file_exits_2(spindle_bin, tmp_path):
    out = subprocess.run([spindle_bin, "serve", "--config", str(tmp_path / "absent.yaml")], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2 and "absent.yaml" in out.stderr, out.stderr


def gpu_present():
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def test_device_cuda_without_a_gpu_exits_2_saying_why(spindle_bin, stories_model, tmp_path):
    if gpu_present():
        pytest.skip("a GPU is present: --device cuda runs (tests/unit/gpu/test_cuda_ops.c covers it)")
    config = write(tmp_path, "device: cuda\nport: 0\n")
    out = subprocess.run([spindle_bin, "serve", "--model", stories_model, "--config", config], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "device cuda" in errors[0], out.stderr


def test_device_auto_without_a_gpu_runs_on_the_cpu(spindle_bin, stories_model, tmp_path):
    if gpu_present():
        pytest.skip("a GPU is present")
    port = free_port()
    server = ConfigServer(spindle_bin, write(tmp_path, f"model: {stories_model}\nport: {port}\n"), port)
    try:
        assert server.request("GET", "/v1/models")[0] == 200
        log = server.log_text()
        assert "device auto: no usable CUDA GPU" in log and "running on the CPU" in log, log
    finally:
        assert server.stop() == 0


def test_print_config_merges_and_reads_back(spindle_bin, tmp_path):
    config = write(tmp_path, "port: 9123\nmax_batch_size: 8\napi_keys: [sk-secret]\ncors_origins: ['*']\n"
                             "log_format: json\n")
    text = print_config(spindle_bin, "serve", "--config", config, "--max-batch-size", "4", "--no-access-log")
    settings = yaml.safe_load(text)
    assert settings["port"] == 9123
    assert settings["max_batch_size"] == 4  # the flag wins
    assert settings["access_log"] is False
    assert settings["log_format"] == "json"
    assert settings["cors_origins"] == ["*"]
    assert settings["api_keys"] == ["<redacted>"] and "sk-secret" not in text
    assert settings["served_model_names"] == [] and settings["threads"] is None
    assert settings["temperature"] is None and settings["top_k"] is None and settings["ui"] is True
    assert settings["drain_timeout"] == 30 and settings["ready_queue_fraction"] == 0.9
    # every key of the example config, and nothing else
    with open(EXAMPLE) as f:
        assert set(settings) == set(yaml.safe_load(f))
    # fed back as --config it prints the same settings
    again = print_config(spindle_bin, "--config", write(tmp_path, text, "printed.yaml"))
    assert yaml.safe_load(again) == settings


def test_plain_print_config_shows_the_defaults_without_loading_a_model(spindle_bin):
    text = print_config(spindle_bin, "--model", "/nonexistent/model.gguf")
    settings = yaml.safe_load(text)
    assert settings["model"] == "/nonexistent/model.gguf"
    assert settings["port"] == 8080 and settings["policy"] == "fcfs" and settings["device"] == "auto"

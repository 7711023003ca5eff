"""A real `spindle serve` process on a free loopback port, for the integration tests."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import openai


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """Starts build/spindle serve with the given flags; stop() sends SIGTERM and checks the exit."""

    def __init__(self, binary: str, model: str, *flags: str, wait_ready: bool = True):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="spindle-serve-", suffix=".log", delete=False)
        args = [binary, "serve", "--model", model, "--port", str(self.port), "--threads", "2", *flags]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"spindle exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"spindle not ready after {timeout} s:\n{self.log_text()}")

    def log_text(self) -> str:
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, **kw)

    def async_client(self, **kw) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, **kw)

    def request(self, method: str, path: str, body=None, headers=None, timeout: float = 60.0):
        """(status, headers, parsed JSON or raw text) of one plain HTTP request."""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, hdrs, raw = r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, raw = e.code, dict(e.headers), e.read()
        text = raw.decode("utf-8", errors="replace")
        try:
            return status, hdrs, json.loads(text)
        except ValueError:
            return status, hdrs, text

    def metrics(self) -> dict:
        """The /metrics samples as {name or name{labels}: value}."""
        status, _, text = self.request("GET", "/metrics")
        assert status == 200, text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_metric(self, name: str, pred, timeout: float = 10.0) -> float:
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.metrics().get(name)
            if value is not None and pred(value):
                return value
            time.sleep(0.05)
        raise AssertionError(f"metric {name} = {value} after {timeout} s")

    def failed_start(self, timeout: float = 60.0) -> tuple[int, str]:
        """For a server started with wait_ready=False that must not start: its exit status
        and its log (the log file removed)."""
        code = self.proc.wait(timeout)
        log = self.log_text()
        self.log.close()
        os.unlink(self.log.name)
        return code, log

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"spindle did not exit on SIGTERM:\n{self.log_text()}")
        self.log.close()
        os.unlink(self.log.name)
        return self.proc.returncode

"""spindle under systemd (server/http/notify.c, systemd/spindle.service, `make install`).

The notify tests run the real `spindle serve` (stories260K) the way systemd does with
Type=notify: NOTIFY_SOCKET names a datagram socket the test binds and reads (a path, and
an abstract name), WATCHDOG_USEC asks for a watchdog. They check READY=1 comes once
/health is 200, STATUS= lines name the model and show the load, WATCHDOG=1 keeps coming,
STOPPING=1 follows SIGTERM, and the exit is 0.

The unit test runs `systemd-analyze verify` on the unit as `make install` writes it
(PREFIX in a temporary folder, so its ExecStart names a binary that exists there: verify
rejects a unit whose ExecStart is missing). Skipped when systemd-analyze is absent.
"""
import http.client
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from spindle_server import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
WATCHDOG_USEC = 400000  # pets every 0.2 s


class NotifyListener:
    """A datagram socket playing systemd's side: every message with the time it came."""

    def __init__(self, abstract: bool):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dir = None
        if abstract:
            name = f"spindle-test-notify-{os.getpid()}-{time.monotonic_ns()}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.dir = tempfile.mkdtemp(prefix="spindle-notify-")
            self.address = os.path.join(self.dir, "notify")
            self.sock.bind(self.address)
        self.messages = []  # (monotonic time, {key: value})

    def receive(self, timeout: float):
        """The next message as {key: value}, or None after timeout seconds."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return None
        fields = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
        self.messages.append((time.monotonic(), fields))
        return fields

    def wait_for(self, key: str, timeout: float, proc=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None and key != "STOPPING":
                raise AssertionError(f"spindle exited with {proc.returncode} before {key}")
            m = self.receive(min(0.5, max(0.01, deadline - time.monotonic())))
            if m is not None and key in m:
                return m
        raise AssertionError(f"no {key}= within {timeout} s; got {[m for _, m in self.messages]}")

    def close(self):
        self.sock.close()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def start(spindle_bin, model, listener, extra_env=None, *flags):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    env.update({"NOTIFY_SOCKET": listener.address, **(extra_env or {})})
    log = tempfile.TemporaryFile()
    args = [spindle_bin, "serve", "--model", model, "--port", str(port), "--threads", "2", *flags]
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, port, log


def get_status(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def log_text(log):
    log.seek(0)
    return log.read().decode("utf-8", errors="replace")


def keep_busy(port, stop: threading.Event):
    """Sends long completions one after another until stop is set."""
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True})
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            return
        finally:
            conn.close()


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_notify_lifecycle(spindle_bin, stories_model, abstract):
    listener = NotifyListener(abstract)
    proc, port, log = start(spindle_bin, stories_model, listener, {"WATCHDOG_USEC": str(WATCHDOG_USEC)},
                            "--max-batch-size", "1")
    try:
        # READY=1 only once the port listens and the model is loaded
        ready = listener.wait_for("READY", 120, proc)
        assert get_status(port, "/health") == 200, log_text(log)
        assert get_status(port, "/ready") == 200
        assert ready["READY"] == "1"
        assert ready["MAINPID"] == str(proc.pid)
        assert ready["STATUS"] == "serving stories260K: 0 running, 0 waiting"
        assert not any("WATCHDOG" in m or "STOPPING" in m for _, m in listener.messages[:-1]), listener.messages

        # the watchdog keeps petting (every WATCHDOG_USEC/2) with a STATUS= line each time
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            listener.receive(0.5)
        pets = [t for t, m in listener.messages if m.get("WATCHDOG") == "1"]
        assert len(pets) >= 5, listener.messages
        gaps = [b - a for a, b in zip(pets, pets[1:])]
        assert max(gaps) < WATCHDOG_USEC / 1e6, gaps  # never a full watchdog interval without a pet
        statuses = [m["STATUS"] for _, m in listener.messages if "STATUS" in m]
        assert all(s.startswith("serving stories260K: ") for s in statuses), statuses

        # the STATUS= lines follow the load: one request runs (batch of 1), the others wait
        stop = threading.Event()
        clients = [threading.Thread(target=keep_busy, args=(port, stop)) for _ in range(3)]
        for c in clients:
            c.start()
        try:
            deadline = time.monotonic() + 30
            busy = None
            while time.monotonic() < deadline and busy is None:
                m = listener.receive(0.5)
                if m and "STATUS" in m and m["STATUS"].startswith("serving stories260K: 1 running, ") \
                        and not m["STATUS"].endswith(" 0 waiting"):
                    busy = m
            assert busy is not None, [m for _, m in listener.messages[-10:]]
            assert busy.get("WATCHDOG") == "1"  # a busy scheduler still ticks
        finally:
            stop.set()
            for c in clients:
                c.join(60)

        # SIGTERM: STOPPING=1, then exit 0
        n_before = len(listener.messages)
        proc.send_signal(signal.SIGTERM)
        stopping = listener.wait_for("STOPPING", 30, proc)
        assert stopping["STOPPING"] == "1"
        assert not any("STOPPING" in m for _, m in listener.messages[:n_before])
        assert proc.wait(30) == 0, log_text(log)
        # nothing after the exit; the last messages say it is shutting down
        while listener.receive(0.1) is not None:
            pass
        assert listener.messages[-1][1].get("STATUS") == "shutting down"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        listener.close()
        log.close()


def test_watchdog_for_another_process_is_ignored(spindle_bin, stories_model):
    """WATCHDOG_PID naming another process (a watchdog meant for a parent): STATUS= lines
    but no WATCHDOG=1."""
    listener = NotifyListener(abstract=True)
    env = {"WATCHDOG_USEC": str(WATCHDOG_USEC), "WATCHDOG_PID": str(os.getpid())}
    proc, port, log = start(spindle_bin, stories_model, listener, env)
    try:
        listener.wait_for("READY", 120, proc)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:
            listener.receive(0.2)
        assert any("STATUS" in m for _, m in listener.messages[1:]), listener.messages  # the thread runs
        assert not any("WATCHDOG" in m for _, m in listener.messages), listener.messages
        proc.send_signal(signal.SIGTERM)
        listener.wait_for("STOPPING", 30, proc)
        assert proc.wait(30) == 0, log_text(log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        listener.close()
        log.close()


def make_install(spindle_bin, tmp, destdir=""):
    """`make install` into tmp (PREFIX=tmp/usr, SYSCONFDIR=tmp/etc), without rebuilding the binary."""
    build = os.path.dirname(spindle_bin)
    args = ["make", "--no-print-directory", "-o", spindle_bin, f"BUILD={build}", f"PREFIX={tmp}/usr",
            f"SYSCONFDIR={tmp}/etc", f"DESTDIR={destdir}", "install"]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_make_install_and_systemd_analyze_verify(spindle_bin, tmp_path):
    out = make_install(spindle_bin, tmp_path)
    binary = tmp_path / "usr" / "bin" / "spindle"
    unit = tmp_path / "usr" / "lib" / "systemd" / "system" / "spindle.service"
    assert binary.read_bytes() == pathlib.Path(spindle_bin).read_bytes()
    assert os.access(binary, os.X_OK)
    text = unit.read_text()
    assert f"ExecStart={binary} serve --config {tmp_path}/etc/spindle/spindle.yaml" in text
    assert "/usr/local/" not in text
    assert (tmp_path / "usr" / "share" / "spindle" / "models").is_dir()
    conf = tmp_path / "etc" / "spindle" / "spindle.yaml"
    if (ROOT / "config" / "spindle.yaml").exists():
        assert conf.read_bytes() == (ROOT / "config" / "spindle.yaml").read_bytes()
        conf.write_text("model: /srv/mine.gguf\n")  # an operator's edit survives a reinstall
        out = make_install(spindle_bin, tmp_path)
        assert conf.read_text() == "model: /srv/mine.gguf\n"
        assert "keeping" in out
    else:
        assert not conf.exists() and "absent" in out

    # DESTDIR stages the same tree under another root (packaging)
    stage = tmp_path / "stage"
    make_install(spindle_bin, tmp_path, destdir=str(stage))
    assert (stage / str(binary).lstrip("/")).exists()
    assert (stage / str(unit).lstrip("/")).read_text() == text

    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze absent (Debian's systemd package)")
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr
    # the unit as committed, too (ExecStart pointed at the built binary, which verify needs)
    committed = tmp_path / "committed" / "spindle.service"
    committed.parent.mkdir()
    committed.write_text((ROOT / "systemd" / "spindle.service").read_text()
                         .replace("/usr/local/bin/spindle", str(pathlib.Path(spindle_bin).resolve())))
    r = subprocess.run(["systemd-analyze", "verify", str(committed)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr

"""Connection slots: idle connections are closed after --idle-timeout, one address cannot
hold more than --max-connections-per-client, and --admin-port keeps /health, /ready and
/metrics answering fast while every slot of the main port is taken by connections that
send nothing."""
import socket
import time
import urllib.error
import urllib.request

from spindle_server import Server, free_port


def open_idle(port: int, n: int) -> list:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(5)
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def get(port: int, path: str, timeout: float):
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read().decode(), time.monotonic() - t0


def test_an_idle_connection_is_closed_after_the_idle_timeout(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--idle-timeout", "1")
    try:
        (s,) = open_idle(server.port, 1)
        t0 = time.monotonic()
        assert closed_by_server(s, 10), "an idle connection stayed open past --idle-timeout"
        assert time.monotonic() - t0 < 5
        s.close()
        status, _, body = server.request("POST", "/v1/completions", {"prompt": "Lily", "max_tokens": 8})
        assert status == 200 and body["usage"]["completion_tokens"] == 8
    finally:
        assert server.stop() == 0


def test_one_address_cannot_take_more_than_its_share(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-connections-per-client", "8")
    socks = []
    try:
        socks = open_idle(server.port, 8)
        extra = socket.create_connection(("127.0.0.1", server.port))
        assert closed_by_server(extra, 5), "a ninth connection from one address was kept"
        extra.close()
        socks.pop().close()
        time.sleep(0.2)
        status, _, _ = get(server.port, "/health", 5)  # a slot came free
        assert status == 200
    finally:
        for s in socks:
            s.close()
        assert server.stop() == 0


def test_probes_answer_on_the_admin_port_while_the_main_port_is_full(spindle_bin, stories_model):
    admin = free_port()
    server = Server(spindle_bin, stories_model, "--max-connections", "32", "--admin-port", str(admin))
    socks = []
    try:
        assert f"admin port (/health, /ready, /metrics): http://127.0.0.1:{admin}" in server.log_text()
        socks = open_idle(server.port, 40)  # more than the pool: every slot taken
        time.sleep(0.3)
        for path in ("/health", "/ready", "/metrics"):
            status, body, took = get(admin, path, 5)
            assert status == 200 and took < 0.1, (path, took)
        assert "spindle_ready 1" in get(admin, "/metrics", 5)[1]
        try:
            get(admin, "/v1/models", 5)
            raise AssertionError("the admin port served /v1/models")
        except urllib.error.HTTPError as e:
            assert e.code == 404 and b"admin port" in e.read()
    finally:
        for s in socks:
            s.close()
        assert server.stop() == 0

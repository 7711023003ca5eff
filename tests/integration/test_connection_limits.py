"""Connection slots: idle connections are closed after --idle-timeout, one address cannot
hold more than --max-connections-per-client, a full table closes its oldest idle
connections to admit new ones (default flags), and --admin-port keeps /health, /ready and
/metrics answering fast while every slot of the main port is taken by requests in progress."""
import http.client
import json
import os
import resource
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

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
        # which of them the server accepts first is up to it: count the ones it closes
        socks = open_idle(server.port, 12)
        time.sleep(1)
        refused = [s for s in socks if closed_by_server(s, 0.2)]
        # at most 8 kept (one fewer while the readiness check's own connection is still counted)
        assert 7 <= 12 - len(refused) <= 8, f"{12 - len(refused)} connections from one address kept, the bound is 8"
        for s in refused:
            socks.remove(s)
            s.close()
        socks.pop().close()
        deadline = time.monotonic() + 10  # the server notices the close, and a slot comes free
        while True:
            try:
                assert get(server.port, "/health", 2)[0] == 200
                break
            except (OSError, urllib.error.URLError):
                assert time.monotonic() < deadline, "no slot came free after a connection closed"
                time.sleep(0.1)
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
        for s in socks:  # by requests in progress (headers half sent), which are never closed to make room
            try:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass  # one the server refused
        time.sleep(1.5)  # past the grace an idle connection gets: these are busy, not idle
        time.sleep(0.3)
        try:
            get(server.port, "/health", 1)
            raise AssertionError("the main port still answered: the pool was not full")
        except (OSError, urllib.error.URLError):
            pass
        limit = 0.5 if os.environ.get("SPINDLE_SANITIZED") else 0.1
        for path in ("/health", "/ready", "/metrics"):
            status, body, took = get(admin, path, 5)
            assert status == 200 and took < limit, (path, took)
        metrics = get(admin, "/metrics", 5)[1]
        assert "spindle_ready 1" in metrics
        refused = [line for line in metrics.splitlines() if line.startswith("spindle_http_connections_refused_total ")]
        assert refused and float(refused[0].split()[1]) >= 1, refused  # the main port's probe above, at least
        try:
            get(admin, "/v1/models", 5)
            raise AssertionError("the admin port served /v1/models")
        except urllib.error.HTTPError as e:
            assert e.code == 404 and b"admin port" in e.read()
    finally:
        for s in socks:
            s.close()
        assert server.stop() == 0


def test_the_admin_port_has_its_own_per_address_bound(spindle_bin, stories_model):
    admin = free_port()
    server = Server(spindle_bin, stories_model, "--admin-port", str(admin))
    socks = []
    try:
        socks = open_idle(admin, 12)
        time.sleep(1)
        refused = [s for s in socks if closed_by_server(s, 0.2)]
        assert 7 <= 12 - len(refused) <= 8, f"{12 - len(refused)} idle admin connections from one address kept, bound 8"
        kept = [s for s in socks if s not in refused]
        assert closed_by_server(kept[0], 10), "an idle admin connection outlived its 5 s"
    finally:
        for s in socks:
            s.close()
        assert server.stop() == 0


def test_the_admin_port_cannot_be_the_main_port(spindle_bin, stories_model):
    r = subprocess.run([spindle_bin, "serve", "--model", stories_model, "--port", "18431", "--admin-port", "18431"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--admin-port 18431" in r.stderr and "port of their own" in r.stderr


def trickle_until_closed(s: socket.socket, data: bytes, every: float, limit: float):
    """Sends data a byte every `every` seconds; the seconds until the server closed the
    connection, or None when it was still open after `limit`."""
    t0 = time.monotonic()
    s.settimeout(every)
    for i in range(len(data)):
        if time.monotonic() - t0 > limit:
            return None
        try:
            s.send(data[i:i + 1])
            if s.recv(4096) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def test_a_trickled_header_is_cut_off_at_the_header_timeout(spindle_bin, stories_model):
    # a byte every 0.3 s would keep the connection for ever under --idle-timeout alone
    server = Server(spindle_bin, stories_model, "--header-timeout", "2", "--idle-timeout", "30")
    try:
        (s,) = open_idle(server.port, 1)
        took = trickle_until_closed(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200, 0.3, 10)
        s.close()
        assert took is not None and 1.5 < took < 4.0, took
        status, _, body = server.request("POST", "/v1/completions", {"prompt": "Lily", "max_tokens": 4})
        assert status == 200 and body["usage"]["completion_tokens"] == 4
    finally:
        assert server.stop() == 0


def test_a_trickled_body_is_cut_off_at_the_body_timeout(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--body-timeout", "2", "--idle-timeout", "30")
    try:
        (s,) = open_idle(server.port, 1)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 200\r\n\r\n")
        took = trickle_until_closed(s, b'{"prompt": "' + b"a" * 180 + b'"}', 0.3, 10)
        s.close()
        assert took is not None and 1.5 < took < 4.0, took
    finally:
        assert server.stop() == 0


def test_a_kept_alive_connection_cannot_trickle_its_next_request(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--header-timeout", "2", "--idle-timeout", "2")
    try:
        (s,) = open_idle(server.port, 1)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200" in s.recv(4096).split(b"\r\n")[0]
        # the next request may take the idle timeout plus the header timeout, in all
        took = trickle_until_closed(s, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200, 0.3, 12)
        s.close()
        assert took is not None and 3.5 < took < 6.5, took
    finally:
        assert server.stop() == 0


IDLE_FLOOD = 4100  # more than the default --max-connections (4096)


def http_call(port: int, method: str, path: str, body=None, timeout: float = 5.0):
    """(status, body text, seconds) of one request on a new connection, timed from connect."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        text = r.read().decode()
        return r.status, text, time.monotonic() - t0
    finally:
        c.close()


def idle_closed_total(port: int) -> float:
    status, text, _ = http_call(port, "GET", "/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith("spindle_http_idle_connections_closed_total "):
            return float(line.split()[1])
    raise AssertionError("no spindle_http_idle_connections_closed_total in /metrics")


def test_idle_connections_from_one_address_cannot_lock_clients_out(spindle_bin, stories_model):
    # the test process holds every idle socket: it needs that many descriptors (the server
    # raises its own limit to the hard limit, which it inherits from here)
    want = IDLE_FLOOD + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"the open file hard limit {hard} is below the {want} descriptors this test needs")
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    server = Server(spindle_bin, stories_model)  # default flags
    socks = []
    busy = None
    try:
        before = idle_closed_total(server.port)
        # the oldest connection has a request in progress (its headers half sent): never closed
        busy = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        busy.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        deadline = time.monotonic() + 60
        for _ in range(IDLE_FLOOD):  # connected, never a byte sent
            assert time.monotonic() < deadline, "opening the idle connections took too long"
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(2)
            socks.append(s)
            try:
                s.connect(("127.0.0.1", server.port))
            except OSError:
                pass  # the listen queue is full: as many as the server lets in are held
        time.sleep(1.5)  # past the grace a never-used connection gets
        status, _, took_health = http_call(server.port, "GET", "/health")
        assert status == 200 and took_health < 0.5, ("/health", status, took_health)
        status, text, took_chat = http_call(server.port, "POST", "/v1/chat/completions",
                                            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert status == 200 and json.loads(text)["usage"]["completion_tokens"] >= 1, text
        assert took_chat < 0.5, ("chat", took_chat)
        print(f"with {IDLE_FLOOD} idle connections: /health {took_health * 1000:.1f} ms, "
              f"chat {took_chat * 1000:.1f} ms")
        assert idle_closed_total(server.port) > before
        # the closes fall on the oldest idle ones (the exact order between the pool threads'
        # accepts may differ by a few; test_idle_drain.c pins the order itself)
        assert any(closed_by_server(s, 2 if i == 0 else 0.05) for i, s in enumerate(socks[:16])), \
            "none of the 16 oldest idle connections was closed"
        # the busy one was kept: its request is answered once its headers are in
        busy.sendall(b"\r\n")
        busy.settimeout(5)
        assert busy.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for s in socks:
            s.close()
        if busy:
            busy.close()
        assert server.stop() == 0


def test_a_full_table_closes_the_connection_kept_alive_the_longest(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-connections", "16")
    socks = []
    try:
        before = idle_closed_total(server.port)
        socks = open_idle(server.port, 16)
        for s in socks:  # each answered once and kept alive: idle at once, no grace
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        status, _, took = get(server.port, "/health", 2)
        assert status == 200 and took < 0.5, took
        assert closed_by_server(socks[0], 2), "the connection kept alive the longest stayed open"
        assert not closed_by_server(socks[-1], 0.2), "a newer kept-alive connection was closed"
        assert idle_closed_total(server.port) > before
    finally:
        for s in socks:
            s.close()
        assert server.stop() == 0

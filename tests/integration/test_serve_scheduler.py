"""The scheduler seen from outside: chunked prefill, preemption under KV pressure,
cancellation of clients that leave, timeouts, 1,000 open streams, and shutdown."""
import asyncio
import json
import signal
import socket
import time


from spindle_server import Server

LONG_PROMPT = " ".join(f"Lily saw {i} cats and a big dog in the park." for i in range(30))


def greedy(server, prompt, n=32):
    return server.client().completions.create(model="stories260K", prompt=prompt, max_tokens=n, temperature=0,
                                              extra_body={"ignore_eos": True}).choices[0].text


def test_chunked_prefill_matches_unchunked(spindle_bin, stories_model, stories_server):
    n_prompt = stories_server.request("POST", "/tokenize", {"content": LONG_PROMPT})[2]["count"]
    assert n_prompt > 3 * 32
    chunked = Server(spindle_bin, stories_model, "--max-prefill-tokens", "32")
    try:
        assert greedy(chunked, LONG_PROMPT) == greedy(stories_server, LONG_PROMPT)
        steps = chunked.metrics()["spindle_ticks_total"]
        assert steps >= n_prompt // 32  # the prompt really went in several chunks
    finally:
        assert chunked.stop() == 0


def test_kv_exhaustion_preempts_and_every_request_completes(spindle_bin, stories_model, stories_server):
    prompts = [f"Once upon a time, {name} went to the park." for name in
               ["Lily", "Tom", "Sue", "Max", "Ben", "Amy", "Tim", "Sam"]]
    expected = {p: greedy(stories_server, p, 200) for p in prompts}
    # stories260K: 5 layers x 4 KV heads x 8 dims x 2 (K, V) x 2 bytes = 640 bytes a token;
    # 1 MiB holds ~1,600 tokens: 8 sequences of ~215 tokens cannot all stay resident
    # speculation off: accepted drafts finish some sequences before the pool runs out
    # (tests/unit/scheduler/test_spec_tick.c preempts speculating sequences)
    tight = Server(spindle_bin, stories_model, "--kv-cache-mb", "1", "--speculative", "off")
    try:
        async def run():
            ac = tight.async_client()
            rs = await asyncio.gather(*[ac.completions.create(model="stories260K", prompt=p, max_tokens=200,
                                                              temperature=0, extra_body={"ignore_eos": True})
                                        for p in prompts])
            await ac.close()
            return rs

        results = asyncio.run(run())
        for p, r in zip(prompts, results):
            assert r.choices[0].text == expected[p]
            assert r.usage.completion_tokens == 200
        m = tight.metrics()
        assert m["spindle_preemptions_total"] > 0
        assert m["spindle_kv_blocks_used"] == 0
        # the context shrinks to what the pool holds, so a request without max_tokens fits
        max_len = tight.client().models.list().data[0].model_extra["max_model_len"]
        assert max_len == m["spindle_kv_blocks_total"] * 16 < 2048
        assert tight.request("POST", "/v1/completions", {"prompt": "Lily"})[0] == 200
    finally:
        assert tight.stop() == 0


def open_stream(port, body):
    """A raw streaming request; returns the socket once the response headers arrived."""
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return s


def test_disconnect_mid_stream_and_while_queued_frees_everything(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-batch-size", "1")
    try:
        long_body = {"prompt": "Lily", "max_tokens": 2000, "ignore_eos": True, "stream": True}
        running = open_stream(server.port, long_body)
        assert b"200 OK" in running.recv(4096)
        server.wait_metric("spindle_requests_running", lambda v: v == 1)
        queued = open_stream(server.port, long_body)
        server.wait_metric("spindle_requests_waiting", lambda v: v == 1)
        queued.close()  # leaves while queued
        server.wait_metric("spindle_requests_cancelled_total", lambda v: v == 1)
        assert server.metrics()["spindle_requests_waiting"] == 0
        running.close()  # leaves mid-stream
        server.wait_metric("spindle_requests_cancelled_total", lambda v: v == 2)
        m = server.wait_metric("spindle_kv_blocks_used", lambda v: v == 0)
        assert m == 0 and server.metrics()["spindle_requests_running"] == 0
        assert server.request("POST", "/v1/completions", {"prompt": "Lily", "max_tokens": 3})[0] == 200
    finally:
        assert server.stop() == 0


def test_request_timeout_ends_with_error(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--request-timeout", "0.2", "--max-batch-size", "1")
    try:
        body = {"prompt": "Lily", "max_tokens": 2000, "ignore_eos": True}
        blocker = open_stream(server.port, {**body, "stream": True})
        status, _, resp = server.request("POST", "/v1/completions", body)
        assert status == 408, resp
        assert "timeout" in resp["error"]["message"]
        blocker.close()
        assert server.wait_metric("spindle_requests_timeouts_total", lambda v: v >= 1) >= 1
        # a stream that times out ends with an error event and [DONE]
        s = open_stream(server.port, {**body, "stream": True})
        data = b""
        s.settimeout(30)
        while not data.endswith(b"data: [DONE]\r\n\r\n") and b"0\r\n\r\n" not in data[-8:]:
            more = s.recv(65536)
            if not more:
                break
            data += more
        s.close()
        assert b'"error"' in data and b"data: [DONE]" in data
    finally:
        assert server.stop() == 0


def test_thousand_concurrent_open_streams(spindle_bin, stories_model):
    # one long request holds the only batch slot, so all 1,000 streams are open at once
    # (queued, suspended, costing no thread) before any of them runs
    server = Server(spindle_bin, stories_model, "--max-batch-size", "1")
    n = 1000

    async def one(i):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        body = json.dumps({"prompt": f"Story {i}", "max_tokens": 4, "ignore_eos": True, "stream": True,
                           "temperature": 0}).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        data = await reader.read()
        writer.close()
        return data

    async def run(blocker):
        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        live = await asyncio.to_thread(server.wait_metric, "spindle_live_generations", lambda v: v == n + 1, 60)
        blocker.close()
        return live, await asyncio.gather(*tasks)

    try:
        blocker = open_stream(server.port, {"prompt": "Lily", "max_tokens": 2000, "ignore_eos": True, "stream": True})
        server.wait_metric("spindle_requests_running", lambda v: v == 1)
        t0 = time.monotonic()
        live, results = asyncio.run(run(blocker))
        assert live == n + 1
        bad = [r[:120] for r in results if not r.startswith(b"HTTP/1.1 200")]
        assert not bad, bad[:3]
        assert all(b"data: [DONE]" in r for r in results)
        assert all(r.count(b'"finish_reason":"length"') == 1 for r in results)
        m = server.wait_metric("spindle_requests_finished_total", lambda v: v == n)
        assert m == n
        assert server.wait_metric("spindle_kv_blocks_used", lambda v: v == 0) == 0
        print(f"{n} streams open at once, all finished {time.monotonic() - t0:.1f} s after the first")
    finally:
        assert server.stop() == 0


def read_all(s, timeout=30):
    data = b""
    s.settimeout(timeout)
    while True:
        more = s.recv(65536)
        if not more:
            return data
        data += more


def test_sigterm_drains_in_flight_work_then_exits_0(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-batch-size", "1", "--drain-timeout", "60")
    # long enough that draining is still under way when the checks below run
    s = open_stream(server.port, {"prompt": "Lily", "max_tokens": 1800, "ignore_eos": True, "stream": True})
    server.wait_metric("spindle_requests_running", lambda v: v == 1)
    server.proc.send_signal(signal.SIGTERM)
    # draining: not ready, new work refused before it starts (503 + Retry-After), still alive
    deadline = time.monotonic() + 10
    while server.request("GET", "/ready")[0] != 503:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    status, headers, body = server.request("POST", "/v1/completions", {"prompt": "Lily", "max_tokens": 2})
    assert status == 503 and headers.get("Retry-After") == "1" and "draining" in body["error"]["message"]
    assert server.request("GET", "/health")[0] == 200
    data = read_all(s)
    s.close()
    assert b'"finish_reason":"length"' in data and b"data: [DONE]" in data and b'"error"' not in data
    assert server.proc.wait(30) == 0
    assert "drained in" in server.log_text()
    server.stop()


def test_drain_timeout_ends_the_rest_with_an_error_event(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-batch-size", "1", "--drain-timeout", "0.2")
    s = open_stream(server.port, {"prompt": "Lily", "max_tokens": 2000, "ignore_eos": True, "stream": True})
    server.wait_metric("spindle_requests_running", lambda v: v == 1)
    assert server.stop() == 0
    data = read_all(s, 10)
    s.close()
    assert b"shutting down" in data and b"data: [DONE]" in data


def test_second_signal_ends_everything_at_once(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-batch-size", "1", "--drain-timeout", "600")
    s = open_stream(server.port, {"prompt": "Lily", "max_tokens": 2000, "ignore_eos": True, "stream": True})
    server.wait_metric("spindle_requests_running", lambda v: v == 1)
    server.proc.send_signal(signal.SIGTERM)
    while server.request("GET", "/ready")[0] != 503:
        time.sleep(0.01)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(10) == 0
    assert time.monotonic() - t0 < 5
    data = read_all(s, 10)
    s.close()
    assert b"data: [DONE]" in data and b'"error"' in data
    server.stop()


def test_ready_reflects_the_queue_high_water_mark(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-batch-size", "1", "--queue-max-requests", "4",
                    "--ready-queue-fraction", "0.5")
    try:
        assert server.request("GET", "/ready")[0] == 200
        body = {"prompt": "Lily", "max_tokens": 2000, "ignore_eos": True, "stream": True}
        socks = [open_stream(server.port, body) for _ in range(3)]  # 1 running, 2 waiting = 50% of 4
        server.wait_metric("spindle_requests_waiting", lambda v: v == 2)
        status, _, err = server.request("GET", "/ready")
        assert status == 503 and "queue" in err["error"]["message"]
        assert server.request("GET", "/health")[0] == 200
        for sock in socks:
            sock.close()
        server.wait_metric("spindle_requests_waiting", lambda v: v == 0)
        assert server.request("GET", "/ready")[0] == 200
    finally:
        assert server.stop() == 0


def test_keepalive_comments_while_queued(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-batch-size", "1", "--keepalive", "0.2")
    try:
        body = {"prompt": "Lily", "max_tokens": 2000, "ignore_eos": True, "stream": True}
        blocker = open_stream(server.port, body)
        server.wait_metric("spindle_requests_running", lambda v: v == 1)
        waiting = open_stream(server.port, body)
        waiting.settimeout(10)
        data = b""
        while b": keep-alive" not in data:
            more = waiting.recv(4096)
            assert more, data
            data += more
        assert b"HTTP/1.1 200" in data and b'"text"' not in data  # nothing generated for it yet
        blocker.close()
        waiting.close()
        server.wait_metric("spindle_requests_cancelled_total", lambda v: v == 2)
    finally:
        assert server.stop() == 0

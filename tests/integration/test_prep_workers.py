"""Parsing, template rendering and tokenizing run on the preparation workers
(--prep-threads), off libmicrohttpd's threads: four clients posting 1 MB bodies to /tokenize
do not slow /health (p99 under 50 ms) and a small chat completion is answered within a
second or two (its small body is prepared first), while every large body is still
tokenized. Results are the same as when prepared inline: the flood's counts are exact."""
import json
import threading
import time

from spindle_server import Server

SENTENCE = "The quick brown fox jumps over the lazy dog. "


def flood_body() -> bytes:
    text = (SENTENCE * (1_000_000 // len(SENTENCE)))[:1_000_000]
    return json.dumps({"content": text}).encode()


def test_probes_and_small_requests_stay_fast_during_a_tokenize_flood(spindle_bin, default_model):
    server = Server(spindle_bin, default_model, "--max-body-bytes", "2000000")
    stop = threading.Event()
    counts, errors = [], []

    def flood():
        body = flood_body()
        while not stop.is_set():
            try:
                status, _, answer = server.request("POST", "/tokenize", body, timeout=120)
                if status == 200:
                    counts.append(len(answer["tokens"]))
                else:
                    errors.append(status)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

    try:
        # tokens per sentence in a run of them (the last one's trailing space differs)
        sizes = []
        for n in (4, 8):
            status, _, small = server.request("POST", "/tokenize", {"content": SENTENCE * n})
            assert status == 200
            sizes.append(len(small["tokens"]))
        per_sentence = (sizes[1] - sizes[0]) / 4
        clients = [threading.Thread(target=flood) for _ in range(4)]
        for c in clients:
            c.start()
        time.sleep(1.5)  # every client has a body in flight

        latencies = []
        for _ in range(100):
            t0 = time.monotonic()
            status, _, _ = server.request("GET", "/health", timeout=10)
            latencies.append(time.monotonic() - t0)
            assert status == 200
            time.sleep(0.02)

        t0 = time.monotonic()
        status, _, chat = server.request("POST", "/v1/chat/completions",
                                         {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4,
                                          "temperature": 0}, timeout=60)
        chat_s = time.monotonic() - t0
        assert status == 200, chat
        assert chat["usage"]["completion_tokens"] >= 1
    finally:
        stop.set()
        for c in clients:
            c.join(timeout=120)
        assert server.stop() == 0

    latencies.sort()
    p50, p99 = latencies[49], latencies[98]
    print(f"/health during the flood: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; small chat {chat_s:.2f} s; "
          f"{len(counts)} bodies of 1 MB tokenized")
    assert not errors, errors
    assert len(counts) >= 4, "the flood was not running"
    # every 1 MB body is the same text: the same count, about that of its sentences
    assert len(set(counts)) == 1
    assert abs(counts[0] - per_sentence * (1_000_000 / len(SENTENCE))) < 0.001 * counts[0]
    assert p99 < 0.050, f"/health p99 {p99 * 1000:.1f} ms during the flood"
    assert chat_s < 2.0, f"a small chat took {chat_s:.2f} s behind the flood"


def test_a_bad_body_is_still_answered_by_the_workers(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--prep-threads", "2")
    try:
        status, _, body = server.request("POST", "/tokenize", b"{not json")
        assert status == 400 and "JSON" in body["error"]["message"]
        status, _, body = server.request("POST", "/v1/completions", {"prompt": "Lily", "max_tokens": "x"})
        assert status == 400 and "max_tokens" in body["error"]["message"]
        status, _, body = server.request("POST", "/v1/completions", {"prompt": "Lily", "max_tokens": 4})
        assert status == 200 and body["usage"]["completion_tokens"] == 4
    finally:
        assert server.stop() == 0


def test_prep_threads_out_of_range_is_refused(spindle_bin, stories_model):
    import subprocess
    r = subprocess.run([spindle_bin, "serve", "--model", stories_model, "--prep-threads", "0"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert "--prep-threads" in r.stderr

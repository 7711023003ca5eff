"""Two replicas behind nginx (Debian's package) with docs/operations.md's settings: one
replica is stopped with SIGTERM under a steady load, and every request either completes
or is refused before it started; the drained replica finishes its in-flight work."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

from spindle_server import Server, free_port

NGINX_CONF = """
{user}
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream spindle {{
        least_conn;
        server 127.0.0.1:{a} max_fails=1 fail_timeout=5s;
        server 127.0.0.1:{b} max_fails=1 fail_timeout=5s;
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 1m;
        location / {{
            proxy_pass http://spindle;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 600s;
            proxy_send_timeout 600s;
            proxy_next_upstream error http_503 non_idempotent;
            proxy_next_upstream_tries 2;
            proxy_next_upstream_timeout 10s;
        }}
    }}
}}
"""


def one_request(port, i):
    """(outcome, model): outcome is "complete", "refused" (503 before it started) or what went wrong."""
    stream = i % 2 == 0
    body = json.dumps({"prompt": f"Story {i}:", "max_tokens": 120, "ignore_eos": True, "stream": stream,
                       "temperature": 0.7, "seed": i})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read().decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException) as e:
        return f"transport error {e!r}", None
    finally:
        conn.close()
    if resp.status == 503:
        err = json.loads(data)["error"]
        return ("refused" if err["type"] == "unavailable_error" else f"503 {err}"), None
    if resp.status != 200:
        return f"status {resp.status}: {data[:200]}", None
    if not stream:
        r = json.loads(data)
        ok = r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 120
        return ("complete" if ok else f"incomplete {data[:200]}"), r["model"]
    events = [line[6:] for line in data.split("\n") if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]" or any('"error"' in e for e in events):
        return f"broken stream {data[-300:]}", None
    chunks = [json.loads(e) for e in events[:-1]]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    return ("complete" if finishes == ["length"] else f"incomplete stream {finishes}"), chunks[0]["model"]


def test_sigterm_one_replica_behind_nginx(spindle_bin, stories_model, tmp_path):
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not nginx:
        pytest.skip("nginx absent (tools/setup.sh installs it)")
    a = Server(spindle_bin, stories_model, "--served-model-name", "replica-a", "--drain-timeout", "30")
    b = Server(spindle_bin, stories_model, "--served-model-name", "replica-b", "--drain-timeout", "30")
    port = free_port()
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp_path / d).mkdir()
    conf = tmp_path / "nginx.conf"
    conf.write_text(NGINX_CONF.format(user="user root;" if os.geteuid() == 0 else "", dir=tmp_path, a=a.port,
                                      b=b.port, port=port))
    proxy = subprocess.Popen([nginx, "-c", str(conf), "-p", str(tmp_path)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    outcomes, stop, lock = [], threading.Event(), threading.Lock()
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "error.log").read_text()
            time.sleep(0.05)

        def client(k):
            i = k
            while not stop.is_set():
                started = time.monotonic()  # when it was sent: requests sent after the drain began go to b
                result = one_request(port, i)
                with lock:
                    outcomes.append((started, *result))
                i += 6

        threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        a.wait_metric("spindle_live_generations", lambda v: v >= 1)
        in_flight_on_a = a.metrics()["spindle_live_generations"]
        t_term = time.monotonic()
        a.proc.send_signal(signal.SIGTERM)
        assert a.proc.wait(40) == 0
        # the load keeps going on the other replica: wait for requests sent after the drain began
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if sum(1 for o in outcomes if o[0] > t_term + 0.5) >= 3:
                    break
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(60)
        log_a = a.log_text()
    finally:
        stop.set()
        proxy.send_signal(signal.SIGQUIT)
        proxy.wait(10)
        b.stop()
        a.stop()
    bad = [o for o in outcomes if o[1] not in ("complete", "refused")]
    assert not bad, bad[:5]
    models_before = {o[2] for o in outcomes if o[0] < t_term and o[1] == "complete"}
    assert "replica-a" in models_before and "replica-b" in models_before  # both served
    after = [o for o in outcomes if o[0] > t_term + 0.5]
    assert after and all(o[2] == "replica-b" for o in after if o[1] == "complete")
    assert any(o[1] == "complete" for o in after)
    # the drained replica finished what it had accepted before exiting
    assert in_flight_on_a >= 1
    assert "drained in" in log_a and "drain timeout" not in log_a, log_a[-2000:]

"""API keys, CORS, TLS and header limits of `spindle serve`, from the outside: the
401s a client sees (OpenAI's error object and the Bearer challenge), the openai SDK
with the right key, open probes, /metrics open or keyed, SIGHUP reloading the key
file while serving, CORS preflights and headers, HTTPS with a self-signed
certificate (curl -k and the SDK), and oversized request lines and headers."""
import http.client
import json
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import httpx2
import openai
import pytest

from spindle_server import Server

FLAGS = ["--api-key", "--api-key-file", "--metrics-require-key", "--cors-origin", "--tls-cert", "--tls-key",
         "--max-header-bytes"]
ORIGIN = "https://app.example"
MSGS = [{"role": "user", "content": "Once upon a time"}]


def test_help_lists_every_security_flag(spindle_bin):
    out = subprocess.run([spindle_bin, "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    missing = [flag for flag in FLAGS if flag not in out.stdout]
    assert not missing, f"spindle serve --help does not document {missing}"


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("keys")


@pytest.fixture(scope="module")
def keyed(spindle_bin, stories_model, keys_dir):
    """Keys from a flag and a file, one allowed CORS origin, an 8 KiB header limit."""
    key_file = keys_dir / "keys.txt"
    key_file.write_text("# the file's keys\n\n  sk-file-1  \nsk-file-2\n")
    server = Server(spindle_bin, stories_model, "--api-key", "sk-flag", "--api-key-file", str(key_file),
                    "--cors-origin", ORIGIN, "--max-header-bytes", "8192")
    yield server
    assert server.stop() == 0


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def assert_401(resp, message_part):
    status, headers, body = resp
    assert status == 401, body
    assert headers.get("WWW-Authenticate", "").startswith("Bearer"), headers
    assert set(body) == {"error"}, body
    err = body["error"]
    assert err["type"] == "invalid_request_error", err
    assert err["code"] == "invalid_api_key", err
    assert message_part in err["message"], err


def sdk(server, key, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, **kw)


# ---- API keys ----

def test_missing_key_is_401(keyed):
    assert_401(keyed.request("GET", "/v1/models"), "You didn't provide an API key")
    assert_401(keyed.request("POST", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 4}),
               "You didn't provide an API key")
    assert_401(keyed.request("GET", "/v1/models", headers={"Authorization": "Basic c2stZmxhZzo="}),
               "You didn't provide an API key")


def test_wrong_key_is_401(keyed):
    for key in ["sk-wrong", "sk-fla", "sk-flagg", "sk-file-3", "x" * 300]:
        assert_401(keyed.request("GET", "/v1/models", headers=bearer(key)), "Incorrect API key provided")


def test_sdk_with_the_right_key(keyed):
    for key in ["sk-flag", "sk-file-1", "sk-file-2"]:
        chat = sdk(keyed, key).chat.completions.create(model="stories260K", messages=MSGS, max_tokens=8)
        assert chat.choices[0].message.content, chat
    stream = sdk(keyed, "sk-file-1").completions.create(model="stories260K", prompt="Once", max_tokens=8, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices)
    with pytest.raises(openai.AuthenticationError) as e:
        sdk(keyed, "sk-wrong").models.list()
    assert e.value.status_code == 401
    assert e.value.body["code"] == "invalid_api_key"


def test_probes_and_metrics_are_open_by_default(keyed):
    status, _, body = keyed.request("GET", "/health")
    assert status == 200, body
    status, _, body = keyed.request("GET", "/ready")
    assert status != 401, body
    status, _, body = keyed.request("GET", "/metrics")
    assert status == 200 and "spindle_" in body, body


def test_unknown_path_is_404_before_the_key(keyed):
    status, _, body = keyed.request("GET", "/v1/nope")
    assert status == 404, body


def test_missing_key_is_401_before_the_body_is_read(keyed):
    # the 401 comes back from the headers alone: the announced body is never sent
    import socket
    with socket.create_connection(("127.0.0.1", keyed.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 500000\r\n\r\n")
        head = sock.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 401"), head
    assert "invalid_api_key" in head or "WWW-Authenticate" in head, head


def test_metrics_require_key(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--api-key", "sk-m", "--metrics-require-key")
    try:
        assert_401(server.request("GET", "/metrics"), "You didn't provide an API key")
        assert_401(server.request("GET", "/metrics", headers=bearer("sk-x")), "Incorrect API key provided")
        status, _, body = server.request("GET", "/metrics", headers=bearer("sk-m"))
        assert status == 200 and "spindle_" in body, body
        assert server.request("GET", "/health")[0] == 200
    finally:
        assert server.stop() == 0


def test_missing_key_file_fails_the_start(spindle_bin, stories_model, tmp_path):
    missing = tmp_path / "no-such-keys.txt"
    server = Server(spindle_bin, stories_model, "--api-key-file", str(missing), wait_ready=False)
    try:
        assert server.proc.wait(60) != 0
        assert str(missing) in server.log_text()
    finally:
        server.stop()


def wait_status(server, key, status, timeout=10.0):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = server.request("GET", "/v1/models", headers=bearer(key))[0]
        if got == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"key {key}: {got}, wanted {status}:\n{server.log_text()}")


def test_sighup_reloads_the_key_file(spindle_bin, stories_model, tmp_path):
    key_file = tmp_path / "keys.txt"
    key_file.write_text("sk-old\n")
    server = Server(spindle_bin, stories_model, "--api-key-file", str(key_file))
    try:
        wait_status(server, "sk-old", 200)
        # a generation in flight across the reload finishes
        stream = sdk(server, "sk-old").completions.create(model="stories260K", prompt="Once", max_tokens=64,
                                                          stream=True)
        key_file.write_text("# rotated\nsk-new\n")
        server.proc.send_signal(signal.SIGHUP)
        wait_status(server, "sk-old", 401)
        wait_status(server, "sk-new", 200)
        assert "".join(c.choices[0].text for c in stream if c.choices)
        chat = sdk(server, "sk-new").chat.completions.create(model="stories260K", messages=MSGS, max_tokens=8)
        assert chat.choices[0].message.content

        # a reload that fails (the file is gone) keeps the keys in use and says why
        key_file.unlink()
        server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "keeping the 1 API keys" not in server.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert str(key_file) in server.log_text()
        wait_status(server, "sk-new", 200)
        wait_status(server, "sk-old", 401)
        assert server.proc.poll() is None
    finally:
        assert server.stop() == 0


# ---- CORS ----

def test_cors_preflight_allowed_origin(keyed):
    status, headers, _ = keyed.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204, headers
    assert headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in headers["Access-Control-Allow-Methods"]
    allowed = [h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")]
    assert "authorization" in allowed and "content-type" in allowed
    assert int(headers["Access-Control-Max-Age"]) > 0
    assert "Origin" in headers.get("Vary", "")


def test_cors_headers_on_answers_of_an_allowed_origin(keyed):
    status, headers, _ = keyed.request("GET", "/v1/models", headers={"Origin": ORIGIN, **bearer("sk-flag")})
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "Origin" in headers["Vary"]
    status, headers, _ = keyed.request("GET", "/v1/models", headers={"Origin": ORIGIN})  # 401s too: JS can read why
    assert status == 401 and headers["Access-Control-Allow-Origin"] == ORIGIN


def test_cors_other_origin_gets_no_allow_header(keyed):
    status, headers, _ = keyed.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "Access-Control-Allow-Origin" not in headers, headers
    assert "Access-Control-Allow-Methods" not in headers, headers
    status, headers, _ = keyed.request("GET", "/v1/models", headers={"Origin": "https://evil.example",
                                                                     **bearer("sk-flag")})
    assert status == 200 and "Access-Control-Allow-Origin" not in headers, headers


def test_cors_any_origin(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--cors-origin", "*")
    try:
        status, headers, _ = server.request("OPTIONS", "/v1/models", headers={
            "Origin": "https://anywhere.example", "Access-Control-Request-Method": "GET"})
        assert status == 204 and headers["Access-Control-Allow-Origin"] == "*", headers
        status, headers, _ = server.request("GET", "/v1/models", headers={"Origin": "https://anywhere.example"})
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "*", headers
    finally:
        assert server.stop() == 0


def test_cors_off_by_default(stories_server):
    status, headers, _ = stories_server.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
    assert status == 405, headers
    status, headers, _ = stories_server.request("GET", "/v1/models", headers={"Origin": ORIGIN})
    assert status == 200
    assert not [h for h in headers if h.lower().startswith("access-control-")], headers
    assert "Vary" not in headers, headers


# ---- TLS ----

@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl missing: cannot make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


def test_tls(spindle_bin, stories_model, tls_files):
    cert, key = tls_files
    server = Server(spindle_bin, stories_model, "--tls-cert", str(cert), "--tls-key", str(key), "--api-key", "sk-tls",
                    wait_ready=False)
    server.url = server.url.replace("http://", "https://")
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.proc.poll() is None, server.log_text()
            try:
                with urllib.request.urlopen(server.url + "/health", timeout=2, context=unverified) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            assert time.monotonic() < deadline, server.log_text()
            time.sleep(0.05)

        if shutil.which("curl"):
            out = subprocess.run(["curl", "-sk", "-H", "Authorization: Bearer sk-tls", server.url + "/v1/models"],
                                 capture_output=True, text=True, timeout=30)
            assert '"stories260K"' in out.stdout, out
            out = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", server.url + "/v1/models"],
                                 capture_output=True, text=True, timeout=30)
            assert out.stdout == "401", out
        with httpx2.Client(verify=False) as http_client:
            client = sdk(server, "sk-tls", http_client=http_client)
            chat = client.chat.completions.create(model="stories260K", messages=MSGS, max_tokens=8)
            assert chat.choices[0].message.content
            stream = client.completions.create(model="stories260K", prompt="Once", max_tokens=8, stream=True)
            assert "".join(c.choices[0].text for c in stream if c.choices)
        # the certificate is the one given, and plain HTTP is not served
        assert ssl.get_server_certificate(("127.0.0.1", server.port)).strip() == cert.read_text().strip()
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError, http.client.HTTPException)):
            urllib.request.urlopen(server.url.replace("https://", "http://") + "/health", timeout=5).read()
    finally:
        assert server.stop() == 0


def test_tls_unreadable_key_fails_the_start(spindle_bin, stories_model, tls_files, tmp_path):
    cert, _ = tls_files
    missing = tmp_path / "missing-key.pem"
    server = Server(spindle_bin, stories_model, "--tls-cert", str(cert), "--tls-key", str(missing), wait_ready=False)
    try:
        assert server.proc.wait(60) != 0
        assert str(missing) in server.log_text()
    finally:
        server.stop()


# ---- header limits ----

def raw_status(server, target, headers):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", target, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_oversized_headers_are_rejected(keyed):
    # libmicrohttpd answers itself: 431 for headers, 414 for a request line past the limit
    assert raw_status(keyed, "/health", {"X-Big": "a" * 16000}) == 431
    assert raw_status(keyed, "/health?" + "a" * 16000, {}) == 414
    assert raw_status(keyed, "/health", {"X-Fits": "a" * 2000}) == 200
    # up to twice the limit the answer is an error object, sent after the body is read
    # and dropped, so a client that sends its body before reading reads it (no reset)
    conn = http.client.HTTPConnection("127.0.0.1", keyed.port, timeout=30)
    try:
        conn.request("POST", "/v1/completions", body=b"a" * 500000, headers={"X-Big": "a" * 10000})
        reply = conn.getresponse()
        error = json.loads(reply.read())["error"]
        assert reply.status == 431 and error["code"] == "request_header_fields_too_large", error
        assert "8192" in error["message"] and "--max-header-bytes" in error["message"], error
    finally:
        conn.close()
    assert keyed.request("GET", "/v1/models", headers=bearer("sk-flag"))[0] == 200  # still serving

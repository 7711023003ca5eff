"""Bad input to `spindle serve`: each answered at once with the right status and an
OpenAI error object, nothing queued, and the server still serving afterwards."""
import json
import socket

import pytest

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSGS = [{"role": "user", "content": "Hi"}]


def assert_error(resp, status, param=None, code=None):
    got_status, _, body = resp
    assert got_status == status, body
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]
    if param is not None:  # the field, or an element of it ("prompt[2]")
        assert err["param"] == param or err["param"].startswith(param + "["), err
    if code is not None:
        assert err["code"] == code, err
    return err


BAD_FIELDS = [
    (CHAT, {"messages": "hi"}, "messages"),
    (CHAT, {"messages": []}, "messages"),
    (CHAT, {"messages": [{"role": "wizard", "content": "x"}]}, None),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, None),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, None),
    (CHAT, {"messages": MSGS, "max_tokens": "ten"}, "max_tokens"),
    (CHAT, {"messages": MSGS, "max_tokens": 0}, "max_tokens"),
    (CHAT, {"messages": MSGS, "max_completion_tokens": -3}, "max_completion_tokens"),
    (CHAT, {"messages": MSGS, "temperature": 7}, "temperature"),
    (CHAT, {"messages": MSGS, "temperature": "hot"}, "temperature"),
    (CHAT, {"messages": MSGS, "top_p": 0}, "top_p"),
    (CHAT, {"messages": MSGS, "top_k": -5}, "top_k"),
    (CHAT, {"messages": MSGS, "min_p": 1.5}, "min_p"),
    (CHAT, {"messages": MSGS, "presence_penalty": 3}, "presence_penalty"),
    (CHAT, {"messages": MSGS, "frequency_penalty": -2.5}, "frequency_penalty"),
    (CHAT, {"messages": MSGS, "repetition_penalty": 0}, "repetition_penalty"),
    (CHAT, {"messages": MSGS, "seed": "abc"}, "seed"),
    (CHAT, {"messages": MSGS, "stop": 5}, "stop"),
    (CHAT, {"messages": MSGS, "stop": [""]}, "stop"),
    (CHAT, {"messages": MSGS, "n": 0}, "n"),
    (CHAT, {"messages": MSGS, "n": 1000}, "n"),
    (CHAT, {"messages": MSGS, "logprobs": 3}, "logprobs"),
    (CHAT, {"messages": MSGS, "logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    (CHAT, {"messages": MSGS, "logit_bias": {"abc": 1}}, "logit_bias"),
    (CHAT, {"messages": MSGS, "logit_bias": {"5": 500}}, "logit_bias"),
    (CHAT, {"messages": MSGS, "logit_bias": {"99999999": 1}}, "logit_bias"),
    (CHAT, {"messages": MSGS, "stream": "yes"}, "stream"),
    (CHAT, {"messages": MSGS, "stream_options": {"include_usage": True}}, "stream_options"),
    (CHAT, {"messages": MSGS, "ignore_eos": 1}, "ignore_eos"),
    (CHAT, {"messages": MSGS, "min_tokens": -1}, "min_tokens"),
    (CHAT, {"messages": MSGS, "priority": 1.5}, "priority"),
    (CHAT, {"messages": MSGS, "chat_template_kwargs": []}, "chat_template_kwargs"),
    (COMP, {"prompt": 5}, "prompt"),
    (COMP, {"prompt": []}, "prompt"),
    (COMP, {"prompt": [1, 2, 99999999]}, "prompt"),
    (COMP, {"prompt": "x", "logprobs": 9}, "logprobs"),
    (COMP, {}, "prompt"),
    # semantics spindle does not implement are refused, not silently ignored
    (COMP, {"prompt": "x", "echo": True}, "echo"),
    (COMP, {"prompt": "x", "best_of": 3}, "best_of"),
    (COMP, {"prompt": "x", "suffix": "end"}, "suffix"),
    (COMP, {"prompt": "x", "guided_whitespace_pattern": " *"}, "guided_whitespace_pattern"),
    (CHAT, {"messages": MSGS, "max_reasoning_tokens": 0}, "max_reasoning_tokens"),
    (CHAT, {"messages": MSGS, "reasoning_effort": 3}, "reasoning_effort"),
    # constraints that are not what they claim to be
    (CHAT, {"messages": MSGS, "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    (CHAT, {"messages": MSGS, "response_format": "json"}, "response_format"),
    (COMP, {"prompt": "x", "grammar": 42}, "grammar"),
    (COMP, {"prompt": "x", "guided_choice": ["a", 1]}, "guided_choice"),
    (CHAT, {"messages": MSGS, "tool_choice": "required"}, "tool_choice"),
]


@pytest.mark.parametrize("path,body,param", BAD_FIELDS)
def test_bad_field_is_400_naming_it(stories_server, path, body, param):
    err = assert_error(stories_server.request("POST", path, {"model": "stories260K", **body}), 400, param=param)
    assert err["type"] == "invalid_request_error"
    if param:
        assert param.split("[")[0] in err["message"]


def test_unknown_fields_ignored_and_nulls_absent(stories_server):
    status, _, body = stories_server.request("POST", COMP, {"prompt": "Lily", "max_tokens": 2, "frobnicate": {"x": 1},
                                                            "temperature": None, "stop": None, "seed": None})
    assert status == 200, body


def test_not_json_and_not_object(stories_server):
    err = assert_error(stories_server.request("POST", CHAT, b'{"messages": [1,'), 400)
    assert "line" in err["message"]
    assert_error(stories_server.request("POST", CHAT, b"[1, 2]"), 400)


def test_model_not_found(stories_server):
    err = assert_error(stories_server.request("POST", CHAT, {"model": "gpt-9", "messages": MSGS}), 404,
                       code="model_not_found")
    assert "gpt-9" in err["message"]


def test_context_length_exceeded(stories_server):
    err = assert_error(stories_server.request("POST", COMP, {"prompt": "Lily", "max_tokens": 5000}), 400,
                       code="context_length_exceeded")
    assert "2048" in err["message"]
    long_prompt = "Lily had a cat. " * 800
    assert_error(stories_server.request("POST", CHAT, {"messages": [{"role": "user", "content": long_prompt}]}), 400,
                 code="context_length_exceeded")


def test_operator_limits_on_n_and_max_tokens(spindle_bin, stories_model):
    from spindle_server import Server
    server = Server(spindle_bin, stories_model, "--max-n", "2", "--max-tokens", "8")
    try:
        err = assert_error(server.request("POST", COMP, {"prompt": "Lily", "n": 3}), 400, param="n")
        assert "2" in err["message"], err
        err = assert_error(server.request("POST", COMP, {"prompt": "Lily", "max_tokens": 9}), 400, param="max_tokens")
        assert "--max-tokens" in err["message"], err
        assert_error(server.request("POST", CHAT, {"messages": MSGS, "max_completion_tokens": 9}), 400,
                     param="max_completion_tokens")
        # within the limits, and without max_tokens: capped at --max-tokens, not the context
        status, _, body = server.request("POST", COMP, {"prompt": "Lily", "n": 2, "ignore_eos": True})
        assert status == 200, body
        assert body["usage"]["completion_tokens"] == 16, body["usage"]
        assert all(c["finish_reason"] == "length" for c in body["choices"]), body
    finally:
        assert server.stop() == 0


def test_max_request_tokens_bounds_a_requests_prompts(spindle_bin, stories_model):
    from spindle_server import Server
    server = Server(spindle_bin, stories_model, "--max-request-tokens", "100")
    ids = [100] * 40  # token ids: exact counts
    try:
        # an embeddings body counts the sum over its inputs
        err = assert_error(server.request("POST", "/v1/embeddings", {"input": [ids, ids, ids]}), 400, param="input")
        assert "--max-request-tokens of 100" in err["message"] and "total 120 tokens" in err["message"], err
        status, _, body = server.request("POST", "/v1/embeddings", {"input": [ids, ids]})
        assert status == 200 and len(body["data"]) == 2, body
        # completions: the prompts summed, times n
        err = assert_error(server.request("POST", COMP, {"prompt": [ids[:30], ids[:30]], "n": 2, "max_tokens": 1}),
                           400, param="prompt")
        assert "120 with n = 2" in err["message"] and "--max-request-tokens" in err["message"], err
        status, _, body = server.request("POST", COMP, {"prompt": [ids[:30], ids[:30]], "max_tokens": 1})
        assert status == 200, body
        # chat: the rendered messages
        long_chat = [{"role": "user", "content": "Once upon a time " * 40}]
        err = assert_error(server.request("POST", CHAT, {"messages": long_chat, "max_tokens": 1}), 400,
                           param="messages")
        assert "--max-request-tokens" in err["message"], err
    finally:
        assert server.stop() == 0


def test_max_request_tokens_defaults_to_the_context_times_n(stories_server):
    # by default a request's prompts may total one context length (2048 for stories260K)
    ids = [100] * 1000
    err = assert_error(stories_server.request("POST", "/v1/embeddings", {"input": [ids, ids, ids]}), 400,
                       param="input")
    assert "total 3,000 tokens" in err["message"] and "--max-request-tokens" in err["message"], err
    assert "by default the context length" in err["message"], err
    status, _, body = stories_server.request("POST", "/v1/embeddings", {"input": [ids, ids]})
    assert status == 200, body


def test_unknown_path_and_wrong_method(stories_server):
    assert_error(stories_server.request("GET", "/v1/nothing"), 404)
    assert_error(stories_server.request("POST", "/nothing", {}), 404)
    status, headers, body = stories_server.request("GET", CHAT)
    assert_error((status, headers, body), 405)
    assert headers.get("Allow") == "POST"
    assert_error(stories_server.request("POST", "/v1/models", {}), 405)


def test_body_too_large_is_413(stories_server):
    # announced too large by a client that waits for "100 Continue": refused before the body is sent
    with socket.create_connection(("127.0.0.1", stories_server.port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % ((1 << 20) + 1))
        reply = s.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413"), reply
    body = json.loads(reply.split("\r\n\r\n", 1)[1])
    assert body["error"]["code"] == "request_too_large" and "1048576" in body["error"]["message"]
    # just under the limit is parsed (and here rejected for its content, not its size)
    small = b'{"prompt": "' + b"a" * ((1 << 20) - 64) + b'", "max_tokens": 0}'
    assert_error(stories_server.request("POST", COMP, small), 400, param="max_tokens")


def test_body_too_large_chunked_is_413(stories_server):
    # no Content-Length: the limit is enforced while reading
    with socket.create_connection(("127.0.0.1", stories_server.port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"a" * 65536
        for _ in range(20):
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        s.sendall(b"0\r\n\r\n")
        reply = s.recv(65536).decode()
    assert reply.startswith("HTTP/1.1 413"), reply


def test_body_too_large_is_413_read_by_python_clients(stories_server):
    # lingering close: a client that sends its whole body before reading (http.client,
    # requests) reads the 413 and its JSON error, not a broken pipe or a reset
    import http.client

    import requests

    body = b'{"prompt": "' + b"a" * (2 << 20) + b'"}'  # twice --max-body-bytes
    conn = http.client.HTTPConnection("127.0.0.1", stories_server.port, timeout=30)
    try:
        conn.request("POST", COMP, body=body, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        error = json.loads(reply.read())["error"]
        assert reply.status == 413 and error["code"] == "request_too_large"
        assert str(len(body)) in error["message"] and "1048576" in error["message"]
        chunks = (body[i:i + 65536] for i in range(0, len(body), 65536))  # no Content-Length
        conn.request("POST", COMP, body=chunks, headers={"Content-Type": "application/json"}, encode_chunked=True)
        reply = conn.getresponse()
        assert reply.status == 413 and json.loads(reply.read())["error"]["code"] == "request_too_large"
    finally:
        conn.close()
    reply = requests.post(stories_server.url + COMP, data=body, headers={"Content-Type": "application/json"},
                          timeout=30)
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "request_too_large"
    # far past the limit (more than 16 MiB over) it is not read through: refused at once
    with socket.create_connection(("127.0.0.1", stories_server.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (64 << 20))
        assert s.recv(65536).startswith(b"HTTP/1.1 413")
    assert stories_server.request("GET", "/v1/models")[0] == 200


def test_template_error_is_400(spindle_bin, stories_model, tmp_path):
    from spindle_server import Server

    tpl = tmp_path / "strict.jinja"
    tpl.write_text("{% if messages[0]['role'] != 'system' %}{{ raise_exception('a system message must come first') }}"
                   "{% endif %}{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    server = Server(spindle_bin, stories_model, "--chat-template", str(tpl))
    try:
        err = assert_error(server.request("POST", CHAT, {"messages": MSGS}), 400)
        assert err["message"] == "a system message must come first"
        status, _, body = server.request("POST", CHAT, {"messages": [{"role": "system", "content": "Be brief."}] + MSGS,
                                                        "max_tokens": 3})
        assert status == 200, body
    finally:
        assert server.stop() == 0


def test_queue_full_is_429_with_retry_after(spindle_bin, stories_model):
    import concurrent.futures

    from spindle_server import Server

    server = Server(spindle_bin, stories_model, "--max-batch-size", "1", "--queue-max-requests", "2")
    try:
        body = {"prompt": "Lily", "max_tokens": 1500, "ignore_eos": True}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: server.request("POST", COMP, body), range(8)))
        statuses = sorted(r[0] for r in results)
        assert 200 in statuses and 429 in statuses, statuses
        for status, headers, resp in results:
            if status == 429:
                assert 1 <= int(headers.get("Retry-After")) <= 60  # the drain time, jittered
                assert_error((status, headers, resp), 429)
        rejected = server.metrics()['spindle_requests_rejected_total{reason="queue_requests"}']
        assert rejected == statuses.count(429)
        # a request that could never fit the queue is the request's fault: 400, not 429
        assert_error(server.request("POST", COMP, {"prompt": "Lily", "max_tokens": 2, "n": 3}), 400)
        # and it still serves
        assert server.request("POST", COMP, {"prompt": "Lily", "max_tokens": 2})[0] == 200
    finally:
        assert server.stop() == 0


def test_still_serving_after_bad_input(stories_server):
    status, _, body = stories_server.request("POST", COMP, {"prompt": "Lily", "max_tokens": 4})
    assert status == 200 and body["choices"][0]["text"] is not None

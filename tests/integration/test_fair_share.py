"""One request cannot occupy the server: a request asking for more sequences (prompts
times n) than --max-sequences-per-request is a 400 naming the count and the setting, and
within the bound requests take turns for batch slots, so a small request sent while a
large one runs is answered long before the large one ends. A request without max_tokens
gets at most --default-max-tokens."""
import threading
import time

from spindle_server import Server


def test_too_many_sequences_is_a_400_naming_the_bound(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-sequences-per-request", "8")
    try:
        status, _, body = server.request("POST", "/v1/completions",
                                         {"prompt": ["Lily", "Tom", "Sue"], "n": 3, "max_tokens": 4})
        assert status == 400
        err = body["error"]
        assert err["param"] == "prompt" and "9 sequences (3 prompts times n = 3)" in err["message"]
        assert "--max-sequences-per-request" in err["message"] and "8" in err["message"]
        status, _, body = server.request("POST", "/v1/completions",
                                         {"prompt": ["Lily", "Tom"], "n": 4, "max_tokens": 4})
        assert status == 200 and len(body["choices"]) == 8
    finally:
        assert server.stop() == 0


def test_a_request_without_max_tokens_gets_the_default_cap(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--default-max-tokens", "6")
    try:
        status, _, body = server.request("POST", "/v1/completions",
                                         {"prompt": "Once upon a time", "ignore_eos": True})
        assert status == 200, body
        assert body["usage"]["completion_tokens"] == 6 and body["choices"][0]["finish_reason"] == "length"
        # a named max_tokens is the client's choice
        status, _, body = server.request("POST", "/v1/completions",
                                         {"prompt": "Once upon a time", "ignore_eos": True, "max_tokens": 20})
        assert status == 200 and body["usage"]["completion_tokens"] == 20
    finally:
        assert server.stop() == 0


def test_default_bound_refuses_a_thousand_sequences(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model)
    try:
        status, _, body = server.request("POST", "/v1/completions",
                                         {"prompt": [f"Story {i}" for i in range(64)], "n": 16})
        assert status == 400 and "1024 sequences" in body["error"]["message"]
    finally:
        assert server.stop() == 0


def test_a_small_request_is_served_while_a_large_one_runs(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--max-batch-size", "2")
    done = {}

    def large():
        status, _, body = server.request("POST", "/v1/completions",
                                         {"prompt": [f"Story {i}" for i in range(8)], "n": 4, "max_tokens": 300,
                                          "ignore_eos": True}, timeout=300)
        done["large"] = (time.monotonic(), status, len(body["choices"]) if status == 200 else body)

    try:
        t = threading.Thread(target=large)
        t.start()
        server.wait_metric("spindle_requests_running", lambda v: v == 2)  # both slots taken by the large one
        t0 = time.monotonic()
        status, _, body = server.request("POST", "/v1/completions", {"prompt": "Lily", "max_tokens": 8})
        small_done = time.monotonic()
        assert status == 200 and body["usage"]["completion_tokens"] == 8
        assert "large" not in done, "the small request waited for the whole large one"
        t.join(300)
        large_done, large_status, n_choices = done["large"]
        assert large_status == 200 and n_choices == 32, n_choices
        print(f"small answered in {small_done - t0:.2f} s; the large one ended {large_done - small_done:.2f} s later")
        assert large_done > small_done
    finally:
        assert server.stop() == 0

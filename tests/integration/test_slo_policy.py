"""Latency targets from the outside: goodput is counted under any policy, --policy slo
refuses at once (429 with Retry-After, the message naming the target) what cannot meet
its TTFT target while every accepted request completes, and bad target fields are a 400."""
import concurrent.futures
import time

import pytest

from spindle_server import Server

PROMPT = "Once upon a time there was a little girl named Lily who loved to play in the park. " * 12


def complete(server, **kw):
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, **kw}
    return server.request("POST", "/v1/completions", body)


def test_goodput_counts_requests_against_their_targets(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--ttft-slo-ms", "60000", "--tpot-slo-ms", "60000")
    try:
        for _ in range(3):
            assert complete(server)[0] == 200
        status, _, body = complete(server, ttft_slo_ms=0.001)  # its own target: impossible
        assert status == 200, body
        m = server.metrics()
        assert m["spindle_slo_requests_total"] == 4
        assert m["spindle_slo_goodput_requests_total"] == 3
        assert m["spindle_slo_rejected_total"] == 0, "fcfs never refuses for a target"
    finally:
        assert server.stop() == 0


def test_slo_policy_refuses_early_what_cannot_meet_its_ttft_target(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--policy", "slo", "--ttft-slo-ms", "60000", "--tpot-slo-ms", "60000",
                    "--max-prefill-tokens", "64")
    try:
        started = time.monotonic()
        for _ in range(3):  # measures the prefill and decode rates (the server's lenient targets)
            assert complete(server)[0] == 200
        # a target a few unloaded requests long (sanitized builds are slower): the first of
        # a burst meets it, the queue behind cannot
        target = max(30, round((time.monotonic() - started) / 3 * 1000 * 4))
        with concurrent.futures.ThreadPoolExecutor(max_workers=48) as pool:
            results = list(pool.map(lambda _: complete(server, max_tokens=32, ttft_slo_ms=target), range(48)))
        statuses = [s for s, _, _ in results]
        assert set(statuses) <= {200, 429}, statuses
        assert statuses.count(200) > 0 and statuses.count(429) > 0, statuses
        for status, headers, body in results:
            if status == 429:
                assert int(headers["Retry-After"]) >= 1
                assert f"time-to-first-token target of {target} ms" in body["error"]["message"], body
            else:
                assert body["usage"]["completion_tokens"] == 32
        m = server.metrics()
        assert m["spindle_slo_rejected_total"] == statuses.count(429)
        assert m["spindle_requests_finished_total"] == statuses.count(200) + 3
        assert m["spindle_slo_requests_total"] == statuses.count(200) + 3
        server.wait_metric("spindle_requests_running", lambda v: v == 0)
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("field,value", [("ttft_slo_ms", -5), ("tpot_slo_ms", 0), ("ttft_slo_ms", "fast")])
def test_bad_target_fields_are_a_400_naming_the_field(stories_server, field, value):
    status, _, body = complete(stories_server, **{field: value})
    assert status == 400, body
    assert field in body["error"]["message"] or body["error"].get("param") == field, body

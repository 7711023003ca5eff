"""Hostile output constraints cannot stall the replica (grammar.h BUDGET, scheduler/masks.c
BUDGET AND LATE MASKS): a victim's unconstrained stream keeps its pace beside constrained
requests whose token masks would take seconds each ((.*){10}x and its kind), and every
hostile request gets a 400, ends with finish_reason "error" and a message, or finishes,
never hangs."""
import concurrent.futures
import json
import os
import time
import urllib.request

import pytest
from spindle_server import Server

# regexes the compiler rewrites (fast now), and constraints it cannot (the budget's)
HOSTILE = [
    {"guided_regex": "(.*){10}x"},
    {"guided_regex": "(.*){1000}x"},
    {"guided_regex": "(a|.*){50}b"},
    {"guided_regex": "(.*a){20}"},
    {"guided_regex": "(\\w*\\W*){100}$"},
    {"response_format": {"type": "json_schema", "json_schema": {
        "name": "h", "schema": {"type": "string", "pattern": "^(.*){10}x$"}}}},
    {"guided_grammar": 'root ::= s{100} "."\ns ::= " "? [a-z]*\n'},
    {"guided_grammar": 'root ::= ([^x]+){3} "x"\n'},
]


@pytest.fixture(scope="module")
def server(spindle_bin, default_model):
    s = Server(spindle_bin, default_model, "--max-batch-size", "16", "--ctx-size", "1024")
    yield s
    assert s.stop() == 0


def victim_gaps(url: str, n_tokens: int) -> list[float]:
    """The gaps between the content chunks of an unconstrained stream."""
    body = {"messages": [{"role": "user", "content": "Tell a long story about a lighthouse."}],
            "max_tokens": n_tokens, "ignore_eos": True, "temperature": 0.7, "seed": 1, "stream": True}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            if line.startswith(b"data: {") and b'"content"' in line:
                times.append(time.monotonic())
    return [b - a for a, b in zip(times, times[1:])]


def hostile(server: Server, extra: dict):
    body = {"messages": [{"role": "user", "content": "Write anything."}], "max_tokens": 24,
            "temperature": 1.0, "seed": 3, **extra}
    t0 = time.monotonic()
    status, _, answer = server.request("POST", "/v1/chat/completions", body, timeout=90)
    return status, answer, time.monotonic() - t0


def test_hostile_constraints_do_not_stall_a_victim(server):
    base = victim_gaps(server.url, 24)
    with concurrent.futures.ThreadPoolExecutor(len(HOSTILE) + 1) as pool:
        victim = pool.submit(victim_gaps, server.url, 160)
        time.sleep(0.3)  # the victim is decoding when the hostile requests arrive
        outcomes = [f.result() for f in [pool.submit(hostile, server, h) for h in HOSTILE]]
        gaps = victim.result()
    for h, (status, answer, seconds) in zip(HOSTILE, outcomes):
        assert seconds < 60, f"{h}: {seconds:.1f} s"
        if status == 400:
            assert "too costly" in answer["error"]["message"] or "position" in answer["error"]["message"], answer
            continue
        assert status == 200, f"{h}: {status} {answer}"
        assert answer["choices"][0]["finish_reason"] in ("stop", "length", "error"), answer
    # generous: a loaded CI core alone shows gaps near 1 s; before the budget each hostile
    # mask took 1.5-8 s and (.*){1000}x never finished
    bound = 6.0 if os.environ.get("SPINDLE_SANITIZED") else 2.0  # sanitizers run several times slower
    assert gaps and max(gaps) < bound, f"victim's largest gap {max(gaps):.3f} s (alone: {max(base):.3f} s)"


def test_a_constraint_over_budget_at_its_first_token_is_a_400(server):
    status, answer, _ = hostile(server, {"guided_grammar": 'root ::= s{100} "."\ns ::= " "? [a-z]*\n'})
    assert status == 400, answer
    assert answer["error"]["param"] == "guided_grammar"
    assert "too costly" in answer["error"]["message"]


def test_rewritten_repetitions_follow_their_language(server):
    import re
    for pattern in ["(.*){10}x", "(a|.*){50}b", "(.+){3}!"]:
        status, answer, seconds = hostile(server, {"guided_regex": pattern})
        assert status == 200 and seconds < 30, (pattern, status, answer)
        text = answer["choices"][0]["message"]["content"]
        if answer["choices"][0]["finish_reason"] == "stop":
            assert re.fullmatch(pattern, text), (pattern, text)

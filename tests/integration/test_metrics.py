"""/metrics read by a real Prometheus text parser (prometheus_client's) before and after
serving requests on stories260K, and the access log (--access-log, text and JSON)."""
import json
import socket
import time

from prometheus_client.parser import text_string_to_metric_families

from spindle_server import Server


def scrape(server) -> dict:
    """{(sample name, frozenset(labels)): value} of every sample, parsed by prometheus_client."""
    status, headers, text = server.request("GET", "/metrics")
    assert status == 200, text
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("spindle_"), family.name
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before, after, name, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def buckets(samples, name):
    """[(le, cumulative count)] of a histogram, in bound order."""
    out = [(float(dict(k[1])["le"]), v) for k, v in samples.items() if k[0] == name + "_bucket"]
    return sorted(out)


HISTOGRAMS_PER_FINISHED = ["spindle_time_to_first_token_seconds", "spindle_e2e_request_latency_seconds",
                           "spindle_request_prefill_time_seconds", "spindle_request_decode_time_seconds",
                           "spindle_request_queue_time_seconds"]


def access_lines(server, fmt="json"):
    lines = server.log_text().splitlines()
    if fmt == "json":
        out = []
        for line in lines:
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("type") == "access":
                    out.append(entry)
        return out
    return [line for line in lines if line.startswith("spindle: access: ")]


def wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_metrics_move_as_requests_are_served(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--access-log", "--log-format", "json")
    try:
        before = scrape(server)
        for name in ["spindle_requests_running", "spindle_requests_waiting", "spindle_requests_swapped",
                     "spindle_kv_blocks_used", "spindle_kv_blocks_total", "spindle_preemptions_total",
                     "spindle_requests_cancelled_total", "spindle_prompt_tokens_total",
                     "spindle_generation_tokens_total", "spindle_ticks_total"]:
            assert (name, frozenset()) in before, name
        for reason in ["queue_requests", "queue_tokens", "shutdown", "invalid"]:
            assert ("spindle_requests_rejected_total", frozenset({("reason", reason)})) in before

        client = server.client()
        usages, ids = [], []
        for i in range(3):
            r = client.completions.create(model="stories260K", prompt=f"Lily had {i} cats", max_tokens=8 + i,
                                          temperature=0, extra_body={"ignore_eos": True})
            usages.append(r.usage)
            ids.append(r.id)
        for i in range(2):
            stream = client.chat.completions.create(
                model="stories260K", messages=[{"role": "user", "content": f"Tell me about {i} dogs"}],
                max_tokens=6, stream=True, stream_options={"include_usage": True},
                extra_body={"ignore_eos": True})
            chunks = list(stream)
            usages.append(chunks[-1].usage)
            ids.append(chunks[0].id)
        assert server.request("GET", "/no/such/path")[0] == 404
        assert server.request("POST", "/v1/chat/completions", {"messages": "not a list"})[0] == 400
        assert server.request("GET", "/health")[0] == 200

        # requests are counted when libmicrohttpd reports them complete, just after the
        # answer: wait until the last one before this scrape is in
        deadline = time.monotonic() + 5
        after = scrape(server)
        # and a request counts as finished when the scheduler retires it, just after its
        # answer is complete (so after the client may have read it)
        while (delta(before, after, "spindle_http_requests_total", endpoint="/health", status="200") < 1
               or delta(before, after, "spindle_requests_finished_total") < 5):
            assert time.monotonic() < deadline, "the /health request or a finished request was never counted"
            time.sleep(0.05)
            after = scrape(server)
        finished = 5
        prompt = sum(u.prompt_tokens for u in usages)
        generated = sum(u.completion_tokens for u in usages)
        assert generated == 3 * 8 + 3 + 2 * 6

        # requests by endpoint and status
        assert delta(before, after, "spindle_http_requests_total", endpoint="/v1/completions", status="200") == 3
        assert delta(before, after, "spindle_http_requests_total", endpoint="/v1/chat/completions", status="200") == 2
        assert delta(before, after, "spindle_http_requests_total", endpoint="/v1/chat/completions", status="400") == 1
        assert delta(before, after, "spindle_http_requests_total", endpoint="other", status="404") == 1
        assert delta(before, after, "spindle_http_requests_total", endpoint="/health", status="200") == 1
        # a scrape is counted once it is answered: the first one shows in the second
        assert value(after, "spindle_http_requests_total", endpoint="/metrics", status="200") >= 1

        # counters
        assert delta(before, after, "spindle_requests_finished_total") == finished
        assert delta(before, after, "spindle_requests_submitted_total") == finished
        assert delta(before, after, "spindle_prompt_tokens_total") == prompt
        assert delta(before, after, "spindle_generation_tokens_total") == generated
        assert delta(before, after, "spindle_requests_cancelled_total") == 0
        assert delta(before, after, "spindle_preemptions_total") == 0
        # gauges: all of it is over
        assert value(after, "spindle_requests_running") == 0
        assert value(after, "spindle_requests_waiting") == 0
        assert value(after, "spindle_requests_swapped") == 0
        assert value(after, "spindle_kv_blocks_used") == 0
        assert value(after, "spindle_kv_blocks_total") > 0

        # per-request histograms: one observation per finished request
        for h in HISTOGRAMS_PER_FINISHED:
            assert delta(before, after, h + "_count") == finished, h
            bs = buckets(after, h)
            assert bs[-1][0] == float("inf") and bs[-1][1] == value(after, h + "_count"), h
            assert all(a[1] <= b[1] for a, b in zip(bs, bs[1:])), f"{h}: buckets are cumulative"
        assert delta(before, after, "spindle_time_to_first_token_seconds_sum") > 0
        assert delta(before, after, "spindle_e2e_request_latency_seconds_sum") >= \
            delta(before, after, "spindle_time_to_first_token_seconds_sum")
        assert delta(before, after, "spindle_request_prefill_time_seconds_sum") > 0
        assert delta(before, after, "spindle_request_decode_time_seconds_sum") > 0
        # every token after a sequence's first has an inter-token latency
        assert delta(before, after, "spindle_inter_token_latency_seconds_count") == generated - finished
        # one tick observation per tick; its tokens are the prompts plus the decode rows
        # (each token but the last of a sequence is fed back once)
        assert value(after, "spindle_tick_duration_seconds_count") == value(after, "spindle_ticks_total")
        assert value(after, "spindle_tokens_per_tick_count") == value(after, "spindle_ticks_total")
        assert value(after, "spindle_tick_duration_seconds_sum") > 0
        # the steps computed every prompt token not served from the prefix cache, every
        # generated token but each request's last, and every rejected draft token
        cached = sum(u.prompt_tokens_details.cached_tokens for u in usages)
        rejected = sum(delta(before, after, "spindle_spec_proposed_tokens_total", proposer=p) -
                       delta(before, after, "spindle_spec_accepted_tokens_total", proposer=p)
                       for p in ("ngram", "suffix", "draft"))
        assert delta(before, after, "spindle_tokens_per_tick_sum") == \
            prompt - cached + generated - finished + rejected
        # speculation: accepted drafts are part of what was proposed, by position too
        for p in ("ngram", "suffix", "draft"):
            assert 0 <= delta(before, after, "spindle_spec_accepted_tokens_total", proposer=p) <= \
                delta(before, after, "spindle_spec_proposed_tokens_total", proposer=p)
        accepted = sum(delta(before, after, "spindle_spec_accepted_tokens_total", proposer=p)
                       for p in ("ngram", "suffix", "draft"))
        assert sum(delta(before, after, "spindle_spec_accepted_by_position_total", position=str(i))
                   for i in range(16)) == accepted

        # the access log: one JSON line per request, no prompt unless asked
        entries = access_lines(server)
        by_id = {e["id"]: e for e in entries if e["id"]}
        for rid, usage in zip(ids, usages):
            e = by_id[rid]
            assert e["status"] == 200
            assert e["prompt_tokens"] == usage.prompt_tokens
            assert e["completion_tokens"] == usage.completion_tokens
            assert e["ttft_ms"] > 0 and e["duration_ms"] >= e["ttft_ms"]
            assert e["finish"] == "length" and e["cancel"] is None
            assert "prompt" not in e
        assert by_id[ids[0]]["path"] == "/v1/completions" and by_id[ids[0]]["method"] == "POST"
        assert by_id[ids[3]]["path"] == "/v1/chat/completions"
        assert any(e["path"] == "/no/such/path" and e["status"] == 404 for e in entries)
        assert any(e["path"] == "/v1/chat/completions" and e["status"] == 400 for e in entries)
    finally:
        assert server.stop() == 0


def test_access_log_text_cancel_and_prompts(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--access-log", "--log-format", "text", "--log-prompts")
    try:
        before = scrape(server)
        r = server.client().chat.completions.create(
            model="stories260K", messages=[{"role": "user", "content": "Say hello"}], max_tokens=4)
        # a client that leaves mid-stream: cancelled, and logged as such
        s = socket.create_connection(("127.0.0.1", server.port))
        body = json.dumps({"prompt": "Lily", "max_tokens": 2000, "ignore_eos": True, "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert b"200 OK" in s.recv(4096)
        s.close()
        assert wait_for(lambda: delta(before, scrape(server), "spindle_requests_cancelled_total") == 1)
        assert wait_for(lambda: any("cancel=client_gone" in line for line in access_lines(server, "text")))

        lines = access_lines(server, "text")
        chat = [line for line in lines if f"id={r.id} " in line]
        assert len(chat) == 1, lines
        assert " method=POST path=/v1/chat/completions status=200 " in chat[0]
        assert f" prompt_tokens={r.usage.prompt_tokens} completion_tokens={r.usage.completion_tokens} " in chat[0]
        assert " finish=length cancel=- prompt=\"" in chat[0] and "Say hello" in chat[0]
        gone = [line for line in lines if "cancel=client_gone" in line]
        assert len(gone) == 1 and " path=/v1/completions status=200 " in gone[0] and "finish=abort" in gone[0]
        assert ' prompt="Lily"' in gone[0]
        # cancelled requests are not observed by the per-request histograms
        after = scrape(server)
        assert delta(before, after, "spindle_e2e_request_latency_seconds_count") == 1
    finally:
        assert server.stop() == 0


def test_access_log_off(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--no-access-log")
    try:
        assert server.request("GET", "/health")[0] == 200
        assert server.request("GET", "/v1/models")[0] == 200
        assert value(scrape(server), "spindle_http_requests_total", endpoint="/v1/models", status="200") == 1
        assert access_lines(server, "text") == []
    finally:
        assert server.stop() == 0

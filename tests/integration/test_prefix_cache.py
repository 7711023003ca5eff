"""The prefix cache from the outside: a prompt that starts like an earlier one reuses
its computed KV blocks (usage.prompt_tokens_details.cached_tokens, /metrics), and the
tokens are exactly those of a server without the cache, greedy and seeded alike."""
import pytest

from spindle_server import Server

STORY = ("Once upon a time there was a little girl named Lily. She loved to play outside in the park with her "
         "friends. One day she found a big red ball under a tree and ran to show her mom. ")


@pytest.fixture(scope="module")
def cached(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model)
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def uncached(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--no-prefix-cache")
    yield server
    assert server.stop() == 0


def complete(server, prompt, **kw):
    body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, **kw}
    status, _, r = server.request("POST", "/v1/completions", body)
    assert status == 200, r
    return r["choices"][0]["text"], r["usage"]


def test_a_repeated_prompt_reuses_whole_blocks(cached):
    prompt = STORY + "The ball"
    text1, usage1 = complete(cached, prompt)
    text2, usage2 = complete(cached, prompt)
    assert text1 == text2
    n = usage1["prompt_tokens"]
    assert usage1["prompt_tokens_details"]["cached_tokens"] == 0
    # every full block of 16 but the one holding the last token, which is always computed
    assert usage2["prompt_tokens_details"]["cached_tokens"] == (n - 1) // 16 * 16 > 0


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 11}])
def test_a_shared_prefix_gives_the_tokens_of_a_server_without_the_cache(cached, uncached, sampling):
    complete(cached, STORY + "Lily said", **sampling)  # computes (and caches) the story
    for ending in ("Her mom smiled and", "The ball rolled away and", "Then a dog came"):
        with_cache, usage = complete(cached, STORY + ending, **sampling)
        without, usage_off = complete(uncached, STORY + ending, **sampling)
        assert with_cache == without, (ending, with_cache, without)
        assert usage["prompt_tokens_details"]["cached_tokens"] > 0
        assert usage_off["prompt_tokens_details"]["cached_tokens"] == 0


def test_streamed_and_chat_turns_hit_too(cached):
    c = cached.client()
    messages = [{"role": "system", "content": STORY}, {"role": "user", "content": "What did Lily find?"}]
    first = c.chat.completions.create(model="stories260K", messages=messages, max_tokens=12, temperature=0)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And then?"}]
    chunks = list(c.chat.completions.create(model="stories260K", messages=messages, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage.prompt_tokens_details.cached_tokens >= 16, usage


def test_metrics_count_queries_and_hits(cached):
    before = cached.metrics()
    complete(cached, STORY + "In the end")
    after = cached.metrics()
    assert after["spindle_prefix_cache_queries_total"] > before["spindle_prefix_cache_queries_total"]
    assert after["spindle_prefix_cache_hits_total"] > before["spindle_prefix_cache_hits_total"]
    assert after["spindle_kv_blocks_cached"] > 0
    # once nothing runs (the answer can come just before the blocks go back), cached
    # blocks are kept but not in use
    cached.wait_metric("spindle_kv_blocks_used", lambda v: v == 0)


def test_the_same_prefix_computed_at_once_gives_the_tokens_of_a_server_without_the_cache(cached, uncached):
    # n choices of one prompt are admitted together and compute the same blocks at once:
    # the cache keeps one copy, and every choice's tokens are still those without it
    prompt = "Far away, " + STORY + "One morning"
    body = {"prompt": prompt, "max_tokens": 20, "n": 4, "temperature": 0.8, "seed": 3}
    status, _, with_cache = cached.request("POST", "/v1/completions", body)
    assert status == 200, with_cache
    status, _, without = uncached.request("POST", "/v1/completions", body)
    assert status == 200, without
    assert [c["text"] for c in with_cache["choices"]] == [c["text"] for c in without["choices"]]
    # and a later request finds the whole shared part
    _, usage = complete(cached, prompt + " the sun")
    assert usage["prompt_tokens_details"]["cached_tokens"] >= (with_cache["usage"]["prompt_tokens"] - 1) // 16 * 16


# ---- who shares the cache: --prefix-cache-scope and cache_salt ----

KEYS = {"a": "sk-tenant-a", "b": "sk-tenant-b"}


def keyed(server, key, prompt, **kw):
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, **kw}
    status, _, r = server.request("POST", "/v1/completions", body, headers={"Authorization": f"Bearer {KEYS[key]}"})
    assert status == 200, r
    return r["usage"]["prompt_tokens_details"]["cached_tokens"]


def keyed_server(spindle_bin, stories_model, scope):
    return Server(spindle_bin, stories_model, "--prefix-cache-scope", scope, "--api-key", KEYS["a"], "--api-key",
                  KEYS["b"])


def test_scope_global_shares_one_keys_prefix_with_another(spindle_bin, stories_model):
    server = keyed_server(spindle_bin, stories_model, "global")
    try:
        prompt = "The secret PIN is 4711. " + STORY + "The ball"
        assert keyed(server, "a", prompt) == 0
        assert keyed(server, "b", prompt) > 0  # the side channel --prefix-cache-scope key closes
    finally:
        assert server.stop() == 0


def test_scope_key_shares_a_prefix_only_within_its_key(spindle_bin, stories_model):
    server = keyed_server(spindle_bin, stories_model, "key")
    try:
        prompt = "The secret PIN is 4711. " + STORY + "The ball"
        assert keyed(server, "a", prompt) == 0
        assert keyed(server, "b", prompt) == 0, "another key's blocks are not found"
        assert keyed(server, "a", prompt) > 0, "a key's own repeat still hits"
        assert keyed(server, "b", prompt) > 0, "and so does the other key's, on its own copy"
        # a salt narrows a key's scope further
        assert keyed(server, "a", prompt, cache_salt="x") == 0
        assert keyed(server, "a", prompt, cache_salt="x") > 0
        assert keyed(server, "b", prompt, cache_salt="x") == 0, "the same salt under another key is another scope"
    finally:
        assert server.stop() == 0


def test_cache_salt_shares_a_prefix_only_with_the_same_salt(cached):
    prompt = "In a land of salt and sea, " + STORY + "The ball"
    assert complete(cached, prompt, cache_salt="user-1")[1]["prompt_tokens_details"]["cached_tokens"] == 0
    assert complete(cached, prompt, cache_salt="user-2")[1]["prompt_tokens_details"]["cached_tokens"] == 0
    assert complete(cached, prompt)[1]["prompt_tokens_details"]["cached_tokens"] == 0, "unsalted: a scope of its own"
    text, usage = complete(cached, prompt, cache_salt="user-1")
    assert usage["prompt_tokens_details"]["cached_tokens"] == (usage["prompt_tokens"] - 1) // 16 * 16 > 0
    assert text == complete(cached, prompt, cache_salt="user-2")[0], "a salt changes what is shared, not the answer"
    # chat, /v1/responses and /v1/messages take it too
    messages = [{"role": "system", "content": "Salted chat. " + STORY}, {"role": "user", "content": "Hi"}]
    chat = {"messages": messages, "max_tokens": 2, "temperature": 0, "cache_salt": "user-3"}
    for want_hit in (False, True):
        status, _, r = cached.request("POST", "/v1/chat/completions", chat)
        assert status == 200, r
        assert (r["usage"]["prompt_tokens_details"]["cached_tokens"] > 0) == want_hit
    status, _, r = cached.request("POST", "/v1/chat/completions", {**chat, "cache_salt": "user-4"})
    assert status == 200 and r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, r
    for path, body in (("/v1/responses", {"input": "Salted response. " + STORY, "max_output_tokens": 2}),
                       ("/v1/messages", {"messages": [{"role": "user", "content": "Salted message. " + STORY}],
                                         "max_tokens": 2})):
        hits = []  # /v1/messages reports no cached tokens: the metric counts them
        for salt in ("s", "t", "s"):
            before = cached.metrics()["spindle_prefix_cache_hits_total"]
            status, _, r = cached.request("POST", path, {"model": "stories260K", **body, "cache_salt": path + salt})
            assert status == 200, (path, r)
            if path == "/v1/responses":
                hits.append(r["usage"]["input_tokens_details"]["cached_tokens"])
            else:
                hits.append(cached.metrics()["spindle_prefix_cache_hits_total"] - before)
        assert hits[0] == 0 and hits[1] == 0 and hits[2] > 0, (path, hits)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages"])
@pytest.mark.parametrize("salt", ["", 7, ["a"], "x" * 1025])
def test_a_bad_cache_salt_is_a_400_naming_it(cached, path, salt):
    body = {"/v1/completions": {"prompt": "Hi"},
            "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}]},
            "/v1/responses": {"input": "Hi"},
            "/v1/messages": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}}[path]
    status, _, r = cached.request("POST", path, {"model": "stories260K", **body, "cache_salt": salt})
    assert status == 400, r
    text = str(r)
    assert "cache_salt" in text, r
    if path != "/v1/messages":
        assert r["error"]["param"] == "cache_salt", r

"""The prefix cache's host and disk tiers from the outside: a chat whose history the
KV pool evicted comes back from a tier (cached_tokens counts it) with the answer of a
server that computes everything; --kv-disk-persist serves a long prefix from disk after
a restart; a damaged file is dropped, never loaded; the directory is locked and cleaned
up; a prefix salted with a cache_salt comes back for that salt only; /metrics counts it
all."""
import os
import pathlib

import pytest

from spindle_server import Server

# Four users with long, different system prompts: their histories (~330 tokens each)
# together are more than a 1 MiB pool of the tiny model holds (102 blocks of 16).
USERS = ["Lily", "Tom", "Sue", "Max", "Ben"]


def system_prompt(name: str) -> str:
    story = (f"Once upon a time there was a child named {name}. {name} liked to run and play in the big green "
             f"park. One day {name} found a small red box under a tall tree. ")
    return story * 8


def chat(server, name: str, turns: list[str]):
    messages = [{"role": "system", "content": system_prompt(name)}]
    for t in turns:
        messages.append({"role": "user", "content": t})
    r = server.client().chat.completions.create(model="stories260K", messages=messages, max_tokens=16,
                                                temperature=0)
    return r.choices[0].message.content, r.usage


@pytest.fixture(scope="module")
def computing(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--no-prefix-cache", "--kv-cache-mb", "1")
    yield server
    assert server.stop() == 0


def test_evicted_histories_come_back_from_the_host_tier(spindle_bin, stories_model, computing):
    server = Server(spindle_bin, stories_model, "--kv-cache-mb", "1", "--kv-host-mb", "16")
    try:
        for name in USERS:
            chat(server, name, ["What did you find?"])
        # Lily's history left the pool long ago (4 others came after); it is in the host tier
        before = server.metrics()
        answer, usage = chat(server, USERS[0], ["What did you find?"])
        after = server.metrics()
        want, _ = chat(computing, USERS[0], ["What did you find?"])
        assert answer == want
        assert usage.prompt_tokens_details.cached_tokens >= usage.prompt_tokens - 32, usage
        assert after['spindle_kv_tier_hits_total{tier="host"}'] > before['spindle_kv_tier_hits_total{tier="host"}']
        assert after["spindle_kv_tier_reloaded_tokens_total"] > before["spindle_kv_tier_reloaded_tokens_total"]
        assert after['spindle_kv_tier_capacity_blocks{tier="host"}'] > 0
        assert after['spindle_kv_tier_capacity_blocks{tier="disk"}'] == 0
    finally:
        assert server.stop() == 0


def test_a_salted_prefix_comes_back_from_the_host_tier_for_its_salt_only(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--kv-cache-mb", "1", "--kv-host-mb", "16")

    def salted(salt):
        messages = [{"role": "system", "content": system_prompt(USERS[0])},
                    {"role": "user", "content": "What did you find?"}]
        body = {"model": "stories260K", "messages": messages, "max_tokens": 4, "temperature": 0}
        if salt:
            body["cache_salt"] = salt
        status, _, r = server.request("POST", "/v1/chat/completions", body)
        assert status == 200, r
        return r["usage"]

    try:
        assert salted("s1")["prompt_tokens_details"]["cached_tokens"] == 0
        for name in USERS[1:]:  # push it out of the pool, into the host tier
            chat(server, name, ["What did you find?"])
        before = server.metrics()
        assert salted("s2")["prompt_tokens_details"]["cached_tokens"] == 0, "another salt finds nothing"
        middle = server.metrics()
        assert middle['spindle_kv_tier_hits_total{tier="host"}'] == before['spindle_kv_tier_hits_total{tier="host"}']
        # no salt finds at most the first block, which every user's unsalted prompt shares
        assert salted(None)["prompt_tokens_details"]["cached_tokens"] <= 16
        middle = server.metrics()
        usage = salted("s1")
        assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - 32, usage
        after = server.metrics()
        assert after['spindle_kv_tier_hits_total{tier="host"}'] > middle['spindle_kv_tier_hits_total{tier="host"}']
    finally:
        assert server.stop() == 0


def block_files(d: pathlib.Path) -> list[pathlib.Path]:
    return sorted(d.glob("spindle-kv-*/*.kv"))


def test_disk_tier_uses_a_directory_of_its_own_and_removes_it(spindle_bin, stories_model, computing, tmp_path):
    server = Server(spindle_bin, stories_model, "--kv-cache-mb", "1", "--kv-disk-dir", str(tmp_path),
                    "--kv-disk-gb", "0.1")
    try:
        for name in USERS:
            chat(server, name, ["Where was the box?"])
        assert len(block_files(tmp_path)) > 0
        answer, usage = chat(server, USERS[0], ["Where was the box?"])
        want, _ = chat(computing, USERS[0], ["Where was the box?"])
        assert answer == want
        assert usage.prompt_tokens_details.cached_tokens > 0
        assert server.metrics()['spindle_kv_tier_hits_total{tier="disk"}'] > 0
    finally:
        assert server.stop() == 0
    assert list(tmp_path.iterdir()) == [], "its own directory goes at exit"


def test_persist_serves_a_long_prefix_from_disk_after_a_restart(spindle_bin, stories_model, computing, tmp_path):
    flags = ["--kv-cache-mb", "1", "--kv-disk-dir", str(tmp_path), "--kv-disk-persist"]
    first = Server(spindle_bin, stories_model, *flags)
    try:
        chat(first, USERS[0], ["Who are you?"])
        # a second process on the same directory and model is refused: the lock
        second = Server(spindle_bin, stories_model, *flags, wait_ready=False)
        assert second.proc.wait(60) != 0
        assert "in use by another spindle process" in second.log_text()
        second.log.close()
        os.unlink(second.log.name)
    finally:
        assert first.stop() == 0
    files = block_files(tmp_path)
    assert len(files) >= 16, "the pool's cached blocks are kept at exit"

    restarted = Server(spindle_bin, stories_model, *flags)
    try:
        assert restarted.metrics()["spindle_kv_tier_disk_restored_blocks"] == len(files)
        answer, usage = chat(restarted, USERS[0], ["Who are you?"])
        want, _ = chat(computing, USERS[0], ["Who are you?"])
        assert answer == want
        assert usage.prompt_tokens_details.cached_tokens >= usage.prompt_tokens - 32, usage
    finally:
        assert restarted.stop() == 0

    # damage every file: a restart indexes them (headers are intact), and loading each
    # fails its checksum: dropped with a warning, the prompt is computed, the answer the same
    for f in block_files(tmp_path):
        data = bytearray(f.read_bytes())
        data[-1] ^= 0xFF
        f.write_bytes(bytes(data))
    damaged = Server(spindle_bin, stories_model, *flags)
    try:
        answer, usage = chat(damaged, USERS[0], ["Who are you?"])
        want, _ = chat(computing, USERS[0], ["Who are you?"])
        assert answer == want
        assert usage.prompt_tokens_details.cached_tokens == 0, usage
        assert damaged.metrics()["spindle_kv_tier_disk_rejected_total"] >= 1
        assert "checksum does not match" in damaged.log_text()
    finally:
        assert damaged.stop() == 0


@pytest.mark.parametrize("flags,message", [
    (["--kv-disk-persist"], "kv_disk_persist needs kv_disk_dir"),
    (["--kv-disk-dir", "/proc/spindle-nowhere"], "/proc/spindle-nowhere"),
    (["--kv-disk-gb", "-1"], "kv-disk-gb"),
])
def test_bad_tier_settings_stop_the_start_with_a_clear_message(spindle_bin, stories_model, flags, message):
    server = Server(spindle_bin, stories_model, *flags, wait_ready=False)
    code, log = server.failed_start()
    assert code != 0
    assert message in log, log

"""The default model (SmolLM2-135M-Instruct Q4_1) behind `spindle serve`: its own chat
template through the openai SDK, streaming, seeds, and the loading phase."""
import asyncio
import os
import subprocess
import threading
import time

from spindle_server import Server


def test_chat_with_the_models_template(smol_server):
    c = smol_server.client()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    r = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", temperature=0, max_tokens=24, messages=messages)
    # the prompt is the model's own template: its default system prompt, then the turn
    rendered = smol_server.request("POST", "/tokenize", {"messages": messages, "with_pieces": True})[2]
    text = "".join(t["piece"] for t in rendered["tokens"])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert r.usage.prompt_tokens == rendered["count"]
    # and the same tokens as a plain completion give the same continuation
    same = c.completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt=[t["id"] for t in rendered["tokens"]],
                                temperature=0, max_tokens=24)
    assert r.choices[0].message.content == same.choices[0].text
    assert r.choices[0].finish_reason == same.choices[0].finish_reason
    # without the default system prompt the model knows the answer, and <|im_end|> ends it
    r = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", temperature=0, max_tokens=24, messages=[
        {"role": "system", "content": ""}, *messages])
    assert r.choices[0].finish_reason == "stop"


def test_streaming_chat_equals_non_streaming(smol_server):
    c = smol_server.client()
    messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name three colors."}]
    full = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=messages, temperature=0,
                                     max_tokens=30)
    stream = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=messages, temperature=0,
                                       max_tokens=30, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_seeded_sampling_same_alone_and_among_others(smol_server):
    kw = dict(model="SmolLM2-135M-Instruct.Q4_1", max_tokens=16, temperature=0.8, seed=42,
              messages=[{"role": "user", "content": "Tell me a joke."}])
    c = smol_server.client()
    alone = c.chat.completions.create(**kw).choices[0].message.content

    async def crowd():
        ac = smol_server.async_client()
        others = [ac.chat.completions.create(**{**kw, "seed": i, "messages": [{"role": "user", "content": f"Count {i}"}]})
                  for i in range(7)]
        rs = await asyncio.gather(ac.chat.completions.create(**kw), *others)
        await ac.close()
        return rs

    assert asyncio.run(crowd())[0].choices[0].message.content == alone


def test_health_is_503_while_loading_and_a_failed_load_exits_2(spindle_bin, tmp_path):
    # open() of a FIFO blocks until a writer comes: the server is listening and loading
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    server = Server(spindle_bin, str(fifo), wait_ready=False)
    try:
        deadline = time.monotonic() + 30
        status, body = None, None
        while time.monotonic() < deadline:
            try:
                status, _, body = server.request("GET", "/health", timeout=2)
                break
            except OSError:
                time.sleep(0.05)
        assert status == 503 and body["error"]["message"] == "Loading model", body
        status, _, body = server.request("GET", "/v1/models")
        assert status == 503 and body["error"]["type"] == "unavailable_error"
        # a writer unblocks the load, which then fails: one clear line, exit status 2
        writer = threading.Thread(target=lambda: open(fifo, "wb").close())
        writer.start()
        assert server.proc.wait(30) == 2
        writer.join()
        assert "not a regular file" in server.log_text()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def test_serve_help_and_bad_flags(spindle_bin):
    r = subprocess.run([spindle_bin, "serve", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--max-prefill-tokens" in r.stdout and "--kv-cache-mb" in r.stdout
    r = subprocess.run([spindle_bin, "serve", "--policy", "lifo"], capture_output=True, text=True)
    assert r.returncode == 2 and "--policy" in r.stderr
    r = subprocess.run([spindle_bin, "--port", "99999"], capture_output=True, text=True)
    assert r.returncode == 2 and "--port" in r.stderr
    r = subprocess.run([spindle_bin, "serve", "--model", "/nonexistent.gguf"], capture_output=True, text=True)
    assert r.returncode == 2 and "/nonexistent.gguf" in r.stderr

#!/usr/bin/env python3
"""Serving benchmark: output tokens/s and time to first token at several concurrency
levels, against a real `spindle serve` on the default model.

A simple closed-loop load script (the full load generator is bench/'s own issue): for
each concurrency C it runs ROUNDS*C streaming completions with C in flight at a time,
each with a prompt of about INPUT_LEN tokens of real text and OUTPUT_LEN generated tokens
(ignore_eos), and reports median and p90 TTFT and the output token rate over the wall
time. Writes the "serve" section of docs/benchmarks.md.

    python3 bench/bench_serve.py [--concurrency 1,4,16] [--input-len 64] [--output-len 128]
"""
import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
sys.path.insert(0, os.path.dirname(__file__))

from report_section import provenance, write_section  # noqa: E402
from spindle_server import Server  # noqa: E402

TEXT = ("The little boat drifted past the harbour lights while the town slept. Somewhere a dog barked, "
        "and the baker lit the first oven of the morning. ")


async def one_request(port, prompt, output_len):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"prompt": prompt, "max_tokens": output_len, "ignore_eos": True, "stream": True,
                       "temperature": 0, "stream_options": {"include_usage": True}}).encode()
    t0 = time.perf_counter()
    writer.write(b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    ttft, tokens, pending = None, 0, b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            break
        pending += chunk
        # HTTP/1.0: no chunked framing; complete SSE events end with a blank line
        *events, pending = pending.split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data: {"):
                    continue
                data = json.loads(line[6:])
                if ttft is None and data["choices"] and data["choices"][0]["text"]:
                    ttft = time.perf_counter() - t0
                if data.get("usage"):
                    tokens = data["usage"]["completion_tokens"]
    writer.close()
    return ttft if ttft is not None else time.perf_counter() - t0, tokens


async def level(port, prompt, input_len, concurrency, rounds, output_len):
    sem = asyncio.Semaphore(concurrency)

    async def guarded():
        async with sem:
            return await one_request(port, prompt, output_len)

    t0 = time.perf_counter()
    results = await asyncio.gather(*[guarded() for _ in range(concurrency * rounds)])
    wall = time.perf_counter() - t0
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    return {"concurrency": concurrency, "requests": len(results), "tokens": tokens, "wall_s": wall,
            "tok_s": tokens / wall, "total_tok_s": (tokens + len(results) * input_len) / wall, "ttft_median_ms": statistics.median(ttfts) * 1e3,
            "ttft_p90_ms": ttfts[math.ceil(0.9 * len(ttfts)) - 1] * 1e3}  # nearest rank


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/spindle")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=2, help="requests per concurrency slot")
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--report", default="docs/benchmarks.md")
    a = ap.parse_args()
    server = Server(a.bin, a.model)
    try:
        # a prompt of about input_len tokens, measured with the server's tokenizer
        prompt = TEXT
        while server.request("POST", "/tokenize", {"content": prompt})[2]["count"] < a.input_len:
            prompt += TEXT
        ids = server.request("POST", "/tokenize", {"content": prompt, "add_special": False})[2]["tokens"]
        prompt = server.request("POST", "/detokenize", {"tokens": ids[:a.input_len]})[2]["content"]
        asyncio.run(level(server.port, prompt, a.input_len, 1, 1, 8))  # warm-up
        rows = [asyncio.run(level(server.port, prompt, a.input_len, int(c), a.rounds, a.output_len))
                for c in a.concurrency.split(",")]
    finally:
        server.stop()
    base = rows[0]["tok_s"]
    lines = ["## Serving (spindle serve, SmolLM2-135M-Instruct Q4_1, CPU)", "",
             f"Streaming completions, prompt {a.input_len} tokens, {a.output_len} generated tokens each (ignore_eos, "
             f"greedy), {a.rounds} requests per concurrency slot, closed loop. Output tokens/s over the wall time of "
             "each level; TTFT from sending the request to the first chunk with text.", "",
             "| concurrency | requests | output tokens/s | vs concurrency 1 | prompt + output tokens/s | "
             "TTFT median (ms) | TTFT p90 (ms) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['concurrency']} | {r['requests']} | {r['tok_s']:.1f} | {r['tok_s'] / base:.2f}x | "
                     f"{r['total_tok_s']:.1f} | {r['ttft_median_ms']:.0f} | {r['ttft_p90_ms']:.0f} |")
    lines += ["", "On this 2-core CPU a step is compute-bound, not memory-bound: a batch of rows costs "
              "nearly rows times one row, so the ceiling for batched throughput is the prompt-processing rate of "
              "the kernels (pp512 in the kernels section, about 2x tg128), and prefill shares it. Concurrency "
              "pays up to that ceiling and then turns into queueing (TTFT); the multi-row integer kernels that "
              "raise the ceiling are the CPU-kernels issue's work."]
    text = "\n".join(lines) + "\n"
    lines_out = text.split("\n")
    body = "\n".join(lines_out[:1] + [""] + [provenance("make bench-serve")] + lines_out[2:])
    write_section(a.report, "serve", body)
    print(text)


if __name__ == "__main__":
    main()

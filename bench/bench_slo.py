#!/usr/bin/env python3
"""Overload at twice capacity: goodput with spindle's --policy slo against fcfs and against
llama-server, in one sitting.

First the capacity: spindle (fcfs) serves `--calibrate` requests of the workload with
`--slots` clients always waiting on it; completed requests per second is the capacity.
Then each server gets the same open-loop load, Poisson arrivals at `--overload` (2) times
that rate for `--duration` seconds (the same seeded arrival times and prompts for all), and
every request is judged: it is good when it completed with TTFT <= --ttft-ms and mean time
per output token <= --tpot-ms. A refusal (429) is not good; it is early, though, and a
client can go elsewhere. Goodput is good requests per second of the arrival window (the same
for every server, so it is the share of the offered load served within the targets).

    spindle-fcfs   --policy fcfs, the targets given (so /metrics counts goodput too)
    spindle-slo    --policy slo --ttft-slo-ms T --tpot-slo-ms P
    llama.cpp      llama-server -np slots, continuous batching, its defaults

Each server has `--slots` sequences at once (spindle --max-batch-size, llama-server -np).
Requests are streaming /v1/chat/completions, greedy, `--max-tokens` tokens; prompts of
`--min-words`..`--max-words` words. Writes the "slo" section of docs/benchmarks.md; raw
records and logs in build/bench/slo-<time>/.

    python3 bench/bench_slo.py --bin build/spindle --peer-dir build/peer-avx512
    python3 bench/bench_slo.py --quick          smoke test: 20 s runs, no peer
"""
import argparse
import datetime
import json
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import ServerProcess, git_commit, peer_binary  # noqa: E402
from bench_spec import stream_chat  # noqa: E402
from report_section import cpu_model, write_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("river stone garden lantern orchard harbor meadow thunder candle window bridge market forest winter "
         "village mountain letter kitchen compass shadow silver morning island feather ladder").split()


def log(msg):
    print(f"bench-slo: {msg}", file=sys.stderr, flush=True)


def make_prompts(a, n, rng):
    out = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(a.min_words, a.max_words))]
        out.append(f"Request {i}. Write a short story that uses these words: " + " ".join(words))
    return out


def one(url, prompt, a):
    rec = stream_chat(url, [{"role": "user", "content": prompt}], a.max_tokens, 600)
    n = rec["completion_tokens"] or 0
    rec["tpot"] = (rec["e2e"] - rec["ttft"]) / (n - 1) if not rec["error"] and rec["ttft"] and n > 1 else None
    rec["good"] = (not rec["error"] and rec["ttft"] is not None and rec["ttft"] <= a.ttft_ms / 1000 and
                   (rec["tpot"] is None or rec["tpot"] <= a.tpot_ms / 1000))
    return rec


def closed_loop(url, prompts, a):
    """`slots` clients, each sending the next prompt when its last one ended: requests/s."""
    lock = threading.Lock()
    it = iter(prompts)
    done = []

    def client():
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            rec = one(url, p, a)
            with lock:
                done.append(rec)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(a.slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ok = [r for r in done if not r["error"]]
    return len(ok) / wall, ok


def open_loop(url, schedule, a):
    """Sends prompt i at schedule[i] seconds from the start, each on its own thread."""
    recs = [None] * len(schedule)
    threads = []
    t0 = time.monotonic()
    for i, (at, prompt) in enumerate(schedule):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)

        def run(i=i, prompt=prompt):
            recs[i] = one(url, prompt, a)
        th = threading.Thread(target=run)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    wall = max(r["end"] for r in recs) - t0 if recs else 0
    return recs, wall


def spindle_argv(a, policy):
    flags = ["--policy", policy, "--ttft-slo-ms", str(a.ttft_ms), "--tpot-slo-ms", str(a.tpot_ms)]
    return lambda port: [a.bin, "serve", "--model", a.model, "--host", "127.0.0.1", "--port", str(port), "--threads",
                         str(a.threads), "--max-batch-size", str(a.slots), "--no-access-log", "--speculative", "off",
                         "--queue-max-requests", "100000", *flags]


def llama_argv(a):
    ctx = a.slots * 1024
    return lambda port: [a.llama_server, "-m", a.model, "-t", str(a.threads), "-tb", str(a.threads), "-cb", "-np",
                         str(a.slots), "-c", str(ctx), "-ngl", "0", "--host", "127.0.0.1", "--port", str(port)]


def summarize(recs, wall, duration):
    good = sum(1 for r in recs if r["good"])
    done = [r for r in recs if not r["error"]]
    refused = sum(1 for r in recs if r["error"] and r["error"].startswith("HTTP 429"))
    failed = sum(1 for r in recs if r["error"] and not r["error"].startswith("HTTP 429"))
    ttfts = sorted(r["ttft"] for r in done if r["ttft"] is not None)
    tpots = sorted(r["tpot"] for r in done if r["tpot"] is not None)
    pct = (lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan"))
    return {"sent": len(recs), "good": good, "goodput": good / duration, "completed": len(done),
            "refused": refused, "failed": failed, "ttft_p50": pct(ttfts, 0.5), "ttft_p99": pct(ttfts, 0.99),
            "tpot_p50": pct(tpots, 0.5), "tpot_p99": pct(tpots, 0.99), "wall": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "spindle"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--peer-dir", default=os.environ.get("PEER_DIR"))
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--min-words", type=int, default=20)
    ap.add_argument("--max-words", type=int, default=300)
    ap.add_argument("--ttft-ms", type=float, default=2000)
    ap.add_argument("--tpot-ms", type=float, default=150)
    ap.add_argument("--overload", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--calibrate", type=int, default=48)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.duration, a.calibrate, a.no_peer = 20, 24, True
    if not a.no_peer:
        a.llama_server = peer_binary(a.peer_dir, "llama-server", log)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    raw = os.path.join(ROOT, "build", "bench", f"slo-{stamp}")
    os.makedirs(raw, exist_ok=True)
    rng = random.Random(a.seed)

    log("calibrating capacity on spindle (fcfs)")
    server = ServerProcess(spindle_argv(a, "fcfs"), os.path.join(raw, "calibrate.log"))
    try:
        one(server.url, "Hello", a)  # warm-up
        capacity, _ = closed_loop(server.url, make_prompts(a, a.calibrate, rng), a)
    finally:
        server.stop()
    rate = a.overload * capacity
    log(f"capacity {capacity:.2f} req/s; offering {rate:.2f} req/s for {a.duration:.0f} s")
    schedule, t = [], 0.0
    prompts = make_prompts(a, 100000, random.Random(a.seed + 1))
    while True:
        t += rng.expovariate(rate)
        if t >= a.duration:
            break
        schedule.append((t, prompts[len(schedule)]))

    variants = [("spindle-slo", spindle_argv(a, "slo")), ("spindle-fcfs", spindle_argv(a, "fcfs"))]
    if not a.no_peer:
        variants.append(("llama.cpp", llama_argv(a)))
    results = {}
    for name, argv in variants:
        log(f"{name}: {len(schedule)} requests")
        server = ServerProcess(argv, os.path.join(raw, f"{name}.log"))
        try:
            for _ in range(3):  # warm-up: spindle measures its rates
                one(server.url, prompts[-1], a)
            recs, wall = open_loop(server.url, schedule, a)
        finally:
            server.stop()
        results[name] = summarize(recs, wall, a.duration)
        with open(os.path.join(raw, f"{name}.json"), "w") as f:
            json.dump({"records": recs, "summary": results[name]}, f)
        log(f"{name}: {results[name]}")

    slo = results["spindle-slo"]["goodput"]
    lines = [
        "## Overload: goodput under latency targets",
        "",
        f"`python3 bench/bench_slo.py` (`make bench-slo`) on {git_commit()}, {cpu_model()}, {a.threads} threads, "
        f"{datetime.date.today()}. Capacity measured first: {capacity:.2f} requests/s (spindle fcfs, {a.slots} "
        f"clients always waiting). Then {len(schedule)} requests arrive as a Poisson process at {a.overload:g}x "
        f"that ({rate:.2f}/s) for {a.duration:.0f} s, the same arrivals and prompts ({a.min_words}-{a.max_words} "
        f"words) for every server; streaming chat, greedy, {a.max_tokens} tokens; {a.slots} sequences at once "
        f"per server. Targets: TTFT <= {a.ttft_ms:.0f} ms and mean TPOT <= {a.tpot_ms:.0f} ms; goodput = "
        f"requests that met both, per second of the {a.duration:.0f} s of arrivals.",
        "",
        "| server | goodput (req/s) | good / sent | completed | refused (429) | failed | TTFT p50 / p99 (ms) | "
        "TPOT p50 / p99 (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | {r['goodput']:.2f} | {r['good']} / {r['sent']} | {r['completed']} | {r['refused']} | "
                     f"{r['failed']} | {r['ttft_p50'] * 1000:.0f} / {r['ttft_p99'] * 1000:.0f} | "
                     f"{r['tpot_p50'] * 1000:.0f} / {r['tpot_p99'] * 1000:.0f} |")
    ratios = [f"slo / fcfs **{slo / results['spindle-fcfs']['goodput']:.2f}x**"
              if results["spindle-fcfs"]["goodput"] else "slo / fcfs: fcfs had no good request"]
    if "llama.cpp" in results:
        peer = results["llama.cpp"]["goodput"]
        ratios.append(f"slo / llama-server **{slo / peer:.2f}x**" if peer else "llama-server had no good request")
    lines += ["", "Goodput " + "; ".join(ratios) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.quick:
        write_section(a.out, "slo", text)


if __name__ == "__main__":
    main()

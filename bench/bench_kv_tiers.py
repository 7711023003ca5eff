#!/usr/bin/env python3
"""The prefix cache's tiers under a multi-turn chat whose histories outgrow the KV pool.

Many users, each with a long system prompt of their own, chat in rounds: every user
sends turn 1, then every user turn 2 (carrying the server's own first answer), and so
on, at most C requests in flight. The pool (--kv-cache-mb) holds only a few users'
histories, so by the time a user comes back the pool has evicted theirs. Three spindle
servers on the same model take turns, fresh for each repeat:

    pool   the prefix cache in the pool alone (what spindle did before the tiers)
    host   plus --kv-host-mb: evicted blocks wait in host memory
    disk   plus --kv-disk-dir with no host tier: evicted blocks wait on disk

It reports TTFT median and p99 of the returning turns (2 and later; turn 1 is cold for
every variant) and of all turns, the ratio pool/host and pool/disk of the returning
median, the tokens each tier reloaded (from /metrics), and checks that the three give
the same answers (greedy: the tiers must not change a token). Writes the "kv-tiers"
section of docs/benchmarks.md; raw records and logs stay in build/bench/kv-tiers-<time>/.

    python3 bench/bench_kv_tiers.py --bin build/spindle --model models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 bench/bench_kv_tiers.py --quick      smoke test: 4 users, 2 turns, one repeat
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import statistics
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import ServerProcess, git_commit, metric_values  # noqa: E402
from bench_spec import stream_chat  # noqa: E402
from report_section import cpu_model, write_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("pool", "host", "disk")
TOPICS = ["a lighthouse keeper", "a beekeeper", "a train driver", "a glass blower", "a cartographer", "a baker",
          "a violin maker", "a ferry pilot", "a stonemason", "a weather observer", "a librarian", "a gardener",
          "a clockmaker", "a potter", "a shepherd", "a tailor", "a mountain guide", "a printer", "a sailmaker",
          "a brewer"]
QUESTIONS = ["Summarize my notes in one sentence.", "What should I do first tomorrow?",
             "Which of these tasks can wait?", "Write a short reminder for the evening."]


def log(msg):
    print(f"bench-kv-tiers: {msg}", file=sys.stderr, flush=True)


def system_prompt(user, words):
    """A long, user-specific system prompt: notes of one person's working day."""
    topic = TOPICS[user % len(TOPICS)]
    lines = [f"You are the assistant of {topic} (user {user}). These are their notes for the week:"]
    i = 0
    while sum(len(x.split()) for x in lines) < words:
        lines.append(f"Day {i // 5 + 1}, note {i % 5 + 1}: as {topic}, I checked item {i * 7 + user} of my list, "
                     f"wrote down {i + 3} observations about the work, and planned task {i * 3 + user % 7}.")
        i += 1
    return " ".join(lines)


def run_rounds(url, users, turns, c, max_tokens, words):
    """Every user's turns in rounds (turn t of every user, then t + 1), c at once."""
    convs = [[{"role": "system", "content": system_prompt(u, words)}] for u in range(users)]
    records = []
    lock = threading.Lock()

    def one(u, t):
        msgs = convs[u] + [{"role": "user", "content": QUESTIONS[t % len(QUESTIONS)]}]
        rec = stream_chat(url, msgs, max_tokens, 600)
        rec.update(user=u, turn=t)
        with lock:
            records.append(rec)
        if not rec["error"]:
            convs[u] = msgs + [{"role": "assistant", "content": rec["text"]}]

    for t in range(turns):
        with concurrent.futures.ThreadPoolExecutor(max_workers=c) as pool:
            list(pool.map(lambda u: one(u, t), range(users)))
    return sorted(records, key=lambda r: (r["turn"], r["user"]))


def spindle_argv(a, variant, disk_dir):
    flags = ["--kv-cache-mb", str(a.kv_cache_mb), "--max-batch-size", str(max(a.concurrency, 4))]
    if variant == "host":
        flags += ["--kv-host-mb", str(a.kv_host_mb)]
    if variant == "disk":
        flags += ["--kv-disk-dir", disk_dir, "--kv-disk-gb", str(a.kv_disk_gb)]
    return lambda port: [a.bin, "serve", "--model", a.model, "--host", "127.0.0.1", "--port", str(port), "--threads",
                         str(a.threads), "--no-access-log", "--speculative", "off", *flags]


def fs_type(path):
    """The file system type of the mount holding path (from /proc/mounts)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "spindle"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--users", type=int, default=16)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--words", type=int, default=400, help="words of each user's system prompt")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--kv-cache-mb", type=int, default=24, help="the pool: a few users' histories")
    ap.add_argument("--kv-host-mb", type=int, default=512)
    ap.add_argument("--kv-disk-gb", type=float, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.users, a.turns, a.repeats = 4, 2, 1
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    raw = os.path.join(ROOT, "build", "bench", f"kv-tiers-{stamp}")
    os.makedirs(raw, exist_ok=True)
    results = {v: [] for v in VARIANTS}
    reloaded = {v: [] for v in VARIANTS}
    answers = {}
    for rep in range(a.repeats):
        order = VARIANTS if rep % 2 == 0 else tuple(reversed(VARIANTS))
        for v in order:
            with tempfile.TemporaryDirectory(prefix="kv-tiers-") as disk_dir:
                log(f"repeat {rep + 1}/{a.repeats}: {v}")
                server = ServerProcess(spindle_argv(a, v, disk_dir), os.path.join(raw, f"{v}-{rep}.log"))
                try:
                    recs = run_rounds(server.url, a.users, a.turns, a.concurrency, a.max_tokens, a.words)
                    m = metric_values(server.url)
                finally:
                    server.stop()
            errors = [r for r in recs if r["error"]]
            if errors:
                sys.exit(f"bench-kv-tiers: {v}: {len(errors)} requests failed, e.g. {errors[0]['error']}")
            results[v].append(recs)
            reloaded[v].append(m.get("spindle_kv_tier_reloaded_tokens_total", 0))
            answers[(v, rep)] = [r["text"] for r in recs]
            with open(os.path.join(raw, f"{v}-{rep}.json"), "w") as f:
                json.dump({"records": recs, "metrics": m}, f)

    mismatched = sum(1 for rep in range(a.repeats) for v in VARIANTS[1:]
                     for x, y in zip(answers[(v, rep)], answers[("pool", rep)]) if x != y)
    rows = []
    med = {}
    for v in VARIANTS:
        back = [r["ttft"] for recs in results[v] for r in recs if r["turn"] > 0]
        every = [r["ttft"] for recs in results[v] for r in recs]
        cached = [r["cached_tokens"] / r["prompt_tokens"] for recs in results[v] for r in recs
                  if r["turn"] > 0 and r["prompt_tokens"]]
        med[v] = statistics.median(back)
        rows.append((v, med[v], percentile(back, 0.99), statistics.median(every), percentile(every, 0.99),
                     statistics.mean(cached), statistics.median(reloaded[v])))
    prompt_tokens = statistics.median(r["prompt_tokens"] for r in results["pool"][0] if r["turn"] > 0)
    lines = [
        "## The prefix cache's tiers: multi-turn chat beyond the pool",
        "",
        f"`python3 bench/bench_kv_tiers.py` (`make bench-kv-tiers`) on {git_commit()}, {cpu_model()}, "
        f"{a.threads} threads, {datetime.date.today()}: {a.users} users, each with a system prompt of its own "
        f"(~{a.words} words), {a.turns} turns in rounds (every user's turn t, then t + 1), {a.concurrency} in "
        f"flight, {a.max_tokens} tokens per answer, greedy; {a.repeats} fresh servers per variant, taking turns. "
        f"The pool (`--kv-cache-mb {a.kv_cache_mb}`) holds a few users' histories; a returning turn's prompt is "
        f"~{prompt_tokens:.0f} tokens. `host`: `--kv-host-mb {a.kv_host_mb}`; `disk`: `--kv-disk-dir` in "
        f"{tempfile.gettempdir()} ({fs_type(tempfile.gettempdir())}) with no host tier.",
        "",
        "| variant | TTFT p50, returning turns (ms) | p99 (ms) | TTFT p50, all turns (ms) | p99 (ms) | cached "
        "share of returning prompts | tokens reloaded from a tier |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for v, p50, p99, all50, all99, cached, rel in rows:
        lines.append(f"| {v} | {p50 * 1000:.0f} | {p99 * 1000:.0f} | {all50 * 1000:.0f} | {all99 * 1000:.0f} | "
                     f"{cached:.0%} | {rel:.0f} |")
    lines += [
        "",
        f"Median TTFT of returning turns, pool / host: **{med['pool'] / med['host']:.1f}x** lower with the host "
        f"tier; pool / disk: **{med['pool'] / med['disk']:.1f}x**. Answers differing from the pool-only "
        f"server's: {mismatched} of {a.repeats * a.users * a.turns * 2} (the tiers must not change a token).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    write_section(a.out, "kv-tiers", text)
    if mismatched:
        sys.exit("bench-kv-tiers: answers differ between variants")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A quantized KV cache (--kv-type) against F16 in the same memory.

Each variant (f16, q8_0, q4_0) is a fresh spindle server with the same --kv-cache-mb,
too small for C sequences of the workload in F16: `loadgen` sends N random prompts of
--input-len tokens, each generating exactly --output-len tokens (ignore_eos), at most C in
flight. While it runs, /metrics is read every 50 ms; the figures per variant are

    held      the most sequences running at once (spindle_requests_running): what the
              cache holds; the pool's own capacity in such sequences is given beside it
    tok/s     output tokens per second of the whole run (loadgen, vLLM's definition)
    preempt   sequences preempted for KV space during the run

Variants alternate within each repeat (f16, q8_0, q4_0, f16, ...); medians over the
repeats, ratios against f16. Writes the "kv-quant" section of docs/benchmarks.md; raw
results and logs stay in build/bench/kv-quant-<time>/. The accuracy side (mean |delta
logprob| and greedy agreement against f16) is measured by the unit test
tests/unit/model/test_kv_quant_quality.c, whose figures the section quotes from its run.

    python3 bench/bench_kv_quant.py --bin build/spindle --model models/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 bench/bench_kv_quant.py --quick      smoke test: small run, one repeat
"""
import argparse
import datetime
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import ServerProcess, git_commit, metric_values as metrics  # noqa: E402
from report_section import cpu_model, write_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("f16", "q8_0", "q4_0")


def log(msg):
    print(f"bench-kv-quant: {msg}", file=sys.stderr, flush=True)


class Sampler(threading.Thread):
    """Reads /metrics every 50 ms and keeps the peak of spindle_requests_running."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.peak, self.done = url, 0, threading.Event()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, int(metrics(self.url).get("spindle_requests_running", 0)))
            time.sleep(0.05)


def run_variant(a, raw, variant, rep):
    name = f"{variant}-r{rep}"
    argv = lambda port: [a.bin, "serve", "--model", a.model, "--host", "127.0.0.1", "--port", str(port),  # noqa: E731
                         "--threads", str(a.threads), "--kv-type", variant, "--kv-cache-mb", str(a.kv_mb),
                         "--max-batch-size", str(a.concurrency), "--block-size", str(a.block_size),
                         "--no-access-log"]
    srv = ServerProcess(argv, os.path.join(raw, name + ".log"))
    try:
        before = metrics(srv.url)
        sampler = Sampler(srv.url)
        sampler.start()
        cmd = [a.loadgen, "--base-url", srv.url, "--input-len", str(a.input_len), "--output-len",
               str(a.output_len), "--num-prompts", str(a.num_prompts), "--request-rate", "inf",
               "--max-concurrency", str(a.concurrency), "--seed", str(rep), "--result-json",
               os.path.join(raw, name + ".json")]
        with open(os.path.join(raw, name + ".txt"), "w") as out:
            out.write("$ " + shlex.join(cmd) + "\n")
            out.flush()
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        sampler.done.set()
        sampler.join()
        after = metrics(srv.url)
    finally:
        srv.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: loadgen failed: {proc.stderr.strip()[-300:]}")
    with open(os.path.join(raw, name + ".json")) as f:
        r = json.load(f)
    seq_blocks = -(-(a.input_len + a.output_len) // a.block_size)
    res = {"held": sampler.peak, "tok_s": r["output_throughput"], "completed": r["completed"],
           "preemptions": after.get("spindle_preemptions_total", 0) - before.get("spindle_preemptions_total", 0),
           "blocks": int(after.get("spindle_kv_blocks_total", 0)),
           "bytes_per_token": int(after.get("spindle_kv_bytes_per_token", 0)),
           "capacity": int(after.get("spindle_kv_blocks_total", 0)) // seq_blocks}
    log(f"{name}: held {res['held']} sequences at once (pool capacity {res['capacity']}), "
        f"{res['tok_s']:.1f} output tok/s, {res['preemptions']:.0f} preemptions, {r['completed']}/{a.num_prompts} done")
    return res


def accuracy(a):
    """The unit test's figures (mean |delta logprob| and greedy agreement against f16),
    run now from the build beside --bin; a line saying how to get them when it is absent."""
    test = os.path.join(os.path.dirname(a.bin), "tests/model/test_kv_quant_quality")
    if not os.path.exists(test):
        return ["Accuracy: build the unit tests (`make unit-test`) and rerun for the figures of "
                "`tests/unit/model/test_kv_quant_quality.c`."]
    out = subprocess.run([test, "--verbose"], capture_output=True, text=True).stderr
    found = re.findall(r"kv (\S+) against f16 on (\S+), (\d+) positions: mean \|dlogprob\| ([0-9.]+), "
                       r"greedy agreement ([0-9.]+)", out)
    if not found:
        return [f"Accuracy: `{test}` gave no figures:", "", "```", out.strip()[-800:], "```"]
    lines = [f"Accuracy against f16 (`{os.path.relpath(test, ROOT)}`: the same {found[0][2]}-token English text "
             "teacher-forced through both, every position's logits compared):", "",
             "| kv type | mean abs. delta logprob of the next token | greedy agreement |", "|---|---:|---:|"]
    lines += [f"| {t} | {float(d):.4f} | {100 * float(g):.1f}% |" for t, _, _, d, g in found]
    return lines


def report(a, results, raw, command):
    med = {v: {k: statistics.median(r[k] for r in results[v]) for k in ("held", "tok_s", "preemptions")}
           for v in VARIANTS}
    first = {v: results[v][0] for v in VARIANTS}
    lines = [
        f"{datetime.date.today().isoformat()}, commit {git_commit()}, {cpu_model()}, {a.threads} threads. "
        f"Default model, `--kv-cache-mb {a.kv_mb}` for every variant, {a.num_prompts} random prompts of "
        f"{a.input_len} tokens each generating {a.output_len} (ignore_eos), at most {a.concurrency} in flight "
        f"(`--max-batch-size {a.concurrency}`); medians of {a.repeats} alternating repeats, raw data in `{raw}`.",
        "",
        "| kv type | bytes/token | blocks in the pool | capacity (sequences) | held at once | vs f16 | output tok/s "
        "| vs f16 | preemptions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in VARIANTS:
        lines.append(
            f"| {v} | {first[v]['bytes_per_token']} | {first[v]['blocks']} | {first[v]['capacity']} | "
            f"{med[v]['held']:.0f} | {med[v]['held'] / med['f16']['held']:.2f}x | {med[v]['tok_s']:.1f} | "
            f"{med[v]['tok_s'] / med['f16']['tok_s']:.2f}x | {med[v]['preemptions']:.0f} |")
    blocks = {v: first[v]["blocks"] for v in VARIANTS}
    lines += ["", f"The same memory holds {blocks['q8_0'] / blocks['f16']:.3f}x the blocks in q8_0 and "
              f"{blocks['q4_0'] / blocks['f16']:.3f}x in q4_0: the formats' byte ratios (64/34 = 1.882, 64/18 = "
              "3.556) are the ceiling of what they hold. \"Held at once\" counts sequences still prefilling (their "
              "blocks not all allocated yet), so it can pass the capacity, and is capped by the concurrency."]
    lines += [""] + accuracy(a) + ["", f"Command: `{command}`"]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(ROOT, "build/spindle"))
    p.add_argument("--loadgen", default=None, help="default: loadgen beside --bin")
    p.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--kv-mb", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-write", action="store_true", help="print the section instead of writing it")
    p.add_argument("--report", metavar="RAW", help="write the section again from RAW/results.json (no runs)")
    a = p.parse_args()
    if a.quick:
        a.kv_mb, a.num_prompts, a.concurrency, a.repeats, a.input_len, a.output_len = 16, 16, 16, 1, 128, 16
    a.loadgen = a.loadgen or os.path.join(os.path.dirname(a.bin), "loadgen")
    if a.report:
        raw = os.path.abspath(a.report)
        with open(os.path.join(raw, "results.json")) as f:
            results = json.load(f)
        a.repeats = len(results["f16"])
    else:
        raw = os.path.join(ROOT, "build/bench", "kv-quant-" + time.strftime("%Y%m%d-%H%M%S"))
        os.makedirs(raw, exist_ok=True)
        results = {v: [] for v in VARIANTS}
        for rep in range(a.repeats):
            for v in VARIANTS:
                results[v].append(run_variant(a, raw, v, rep))
        with open(os.path.join(raw, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
    argv = sys.argv[1:]
    if a.report:  # the command that made the runs, not the one that wrote them again
        argv = [x for i, x in enumerate(argv)
                if not x.startswith("--report") and not (i > 0 and argv[i - 1] == "--report")]
    command = "python3 bench/bench_kv_quant.py " + shlex.join(argv) if argv else "make bench-kv-quant"
    text = report(a, results, os.path.relpath(raw, ROOT), command)
    if a.quick or a.no_write:
        print(text)
    else:
        write_section(os.path.join(ROOT, "docs/benchmarks.md"), "kv-quant", text)
        log("wrote the kv-quant section of docs/benchmarks.md")


if __name__ == "__main__":
    main()

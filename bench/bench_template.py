#!/usr/bin/env python3
"""Chat-template rendering, spindle's engine against jinja2 (the engine Hugging Face's
apply_chat_template uses), on the same templates and the same 20-message conversation,
in one run. Writes the "template" section of docs/benchmarks.md. Called by
`make bench-template` (and `make bench`).

    bench/bench_template.py [RENDERS]          (default 2000)

Environment: BENCH_TEMPLATE (the C program, default build/bench_template), OUT (default
docs/benchmarks.md), SPINDLE_TESTDATA (where the shared templates are).

build/bench_template --dump writes each template it timed and its context; this script
then times jinja2 on those files: the median of 50 compiles (Environment.from_string)
and the median and p99 of RENDERS renders after 20 warm-ups, on one thread, and checks
that both engines produced the same text.
"""
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
import json

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))
sys.path.insert(0, HERE)
from make_template_cases import Renderer  # noqa: E402
from report_section import provenance, write_section  # noqa: E402

PEER_COMPILES = 50
PEER_WARMUP = 20


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def time_jinja2(source, context, renders):
    renderer = Renderer()
    renderer.clock = datetime.datetime.now()
    compiles = []
    for _ in range(PEER_COMPILES):
        t0 = time.perf_counter()
        template = renderer.env.from_string(source)
        compiles.append((time.perf_counter() - t0) * 1e6)
    samples = []
    for i in range(PEER_WARMUP + renders):
        t0 = time.perf_counter()
        out = template.render(**context)
        dt = (time.perf_counter() - t0) * 1e6
        if i >= PEER_WARMUP:
            samples.append(dt)
    return statistics.median(compiles), statistics.median(samples), quantile(samples, 0.99), out


def main():
    renders = sys.argv[1] if len(sys.argv) > 1 else "2000"
    program = os.environ.get("BENCH_TEMPLATE", os.path.join(REPO, "build", "bench_template"))
    out_path = os.environ.get("OUT", os.path.join(REPO, "docs", "benchmarks.md"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([program, "--dump", tmp, renders], capture_output=True, text=True)
        sys.stderr.write(run.stderr)
        if run.returncode != 0:
            sys.exit(f"bench_template failed (exit {run.returncode})")
        for index, line in enumerate(run.stdout.strip().splitlines()):
            name, size, parse, med, p99, out_len = line.split("\t")
            with open(os.path.join(tmp, f"{index}.jinja"), encoding="utf-8") as f:
                source = f.read()
            with open(os.path.join(tmp, f"{index}.json"), encoding="utf-8") as f:
                context = json.load(f)
            peer_parse, peer_med, peer_p99, peer_out = time_jinja2(source, context, int(renders))
            with open(os.path.join(tmp, f"{index}.out"), "rb") as f:
                if f.read() != peer_out.encode():
                    sys.exit(f"{name}: jinja2 and spindle rendered different text")
            rows.append((name, int(size), float(parse), peer_parse, float(med), peer_med, float(p99), peer_p99))
    if not rows:
        sys.exit("bench_template: nothing measured (no templates found)")
    lines = [
        "## Chat-template rendering: spindle vs jinja2",
        "",
        "One 20-message conversation (a system prompt, user/assistant turns of ~200 bytes, one tool call and its "
        "result; one tool declared), rendered by spindle's engine and by jinja2 "
        f"{__import__('jinja2').__version__} set up as Hugging Face's apply_chat_template, one thread, same "
        f"process run; both give the same bytes. Times in microseconds; spindle: median of 200 parses and of "
        f"{renders} renders after 200 warm-ups; jinja2: median of {PEER_COMPILES} compiles and of {renders} renders "
        f"after {PEER_WARMUP} warm-ups. Speed-up = jinja2 time / spindle time.",
        "",
        "| template | bytes | parse: spindle | jinja2 | speed-up | render median: spindle | jinja2 | speed-up "
        "| render p99: spindle | jinja2 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, size, parse, peer_parse, med, peer_med, p99, peer_p99 in rows:
        lines.append(f"| {name} | {size} | {parse:.1f} | {peer_parse:.1f} | {peer_parse / parse:.0f}x | {med:.1f} | "
                     f"{peer_med:.1f} | {peer_med / med:.1f}x | {p99:.1f} | {peer_p99:.1f} |")
    text = "\n".join(lines[:2] + [provenance("make bench-template")] + lines[2:]) + "\n"
    write_section(out_path, "template", text)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs the spindle-vs-llama.cpp kernel benchmark and writes docs/benchmarks.md.

Driven by bench/bench_kernels.sh, which sets the environment (MODEL, SPINDLE, LLAMA_BENCH,
THREADS, ROUNDS, REPS, PP, TG, LLAMA_FA, OUT, BENCH_COMMAND).

    bench_kernels.py run            run the alternation, save raw outputs, write the report
    bench_kernels.py report RAWDIR  rewrite the report from the raw outputs of an earlier run

Per round and per thread count it runs `spindle bench` once, then `llama-bench` once (each does
a warm-up and REPS timed repetitions of ppPP and tgTG), so the two programs alternate. The
table holds the median over all ROUNDS x REPS samples of each program. SPINDLE_ISA forces
spindle's kernel set (`--cpu-isa`; default: the one it picks). With BASELINE_ISA set
(bench_kernels.sh sets avx512 where spindle's best is amx), `spindle bench --cpu-isa
BASELINE_ISA` joins the alternation and the table gains its column and ratio. With
BASELINE_SPINDLE set (another spindle binary, e.g. an older commit's build, named by
BASELINE_LABEL) that binary is the baseline instead, for a regression check of one set.
"""

import datetime
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_section import cpu_model, write_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env(name):
    return os.environ[name]


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def run_cmd(argv, out_path):
    t0 = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True)
    with open(out_path, "w") as f:
        f.write(proc.stdout)
    with open(out_path + ".stderr", "w") as f:
        f.write(proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"bench: {' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return time.time() - t0


def spindle_argv(threads, isa=None, binary=None):
    return [binary or env("SPINDLE"), "bench", "--model", env("MODEL"), "--threads", str(threads),
            "--pp", env("PP"), "--tg", env("TG"), "--reps", env("REPS")] + (
                ["--cpu-isa", isa] if isa else [])


def baseline_isa():
    return os.environ.get("BASELINE_ISA", "")


def baseline_binary():
    return os.environ.get("BASELINE_SPINDLE", "")


def machine_kind():
    """A short name for this kind of machine (its CPU family and best kernel set, e.g.
    epyc-avx512), so runs on different machines keep separate report sections."""
    name = cpu_model().lower()
    family = next((f for f in ("epyc", "xeon", "ryzen", "core") if f in name), None)
    family = family or (re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "cpu")
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        flags = []
    best = "avx2"
    if "amx_tile" in flags:
        best = "amx"
    elif all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512_vnni")):  # spindle's avx512 set
        best = "avx512"
    return f"{family}-{best}"


def llama_argv(threads):
    # Explicit where it matters for comparison: F16 KV (both defaults), CPU only.
    return [env("LLAMA_BENCH"), "-m", env("MODEL"), "-p", env("PP"), "-n", env("TG"),
            "-t", str(threads), "-r", env("REPS"), "-ctk", "f16", "-ctv", "f16",
            "-fa", env("LLAMA_FA"), "-ngl", "0", "-o", "json"]


def do_run():
    threads = [int(t) for t in env("THREADS").split()]
    rounds = int(env("ROUNDS"))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    raw = os.path.join("build", "bench", stamp)
    os.makedirs(raw, exist_ok=True)
    load = open("/proc/loadavg").read().split()[0]
    if float(load) > 0.5 * (os.cpu_count() or 1):
        log(f"load average {load} on {os.cpu_count()} CPUs: the machine is busy, figures "
            "will be noisy")
    meta = {"command": env("BENCH_COMMAND"), "start": datetime.datetime.now().astimezone()
            .isoformat(timespec="seconds"), "loadavg_start": load}
    meta["llama_flash_attn_resolved"] = probe_flash_attn()
    with_spindle = env("SPINDLE") != "none"
    for r in range(1, rounds + 1):
        for t in threads:
            if with_spindle:
                dt = run_cmd(spindle_argv(t, os.environ.get("SPINDLE_ISA") or None),
                             os.path.join(raw, f"r{r}_t{t}_spindle.jsonl"))
                log(f"round {r}/{rounds} threads {t}: spindle {dt:.0f} s")
                if baseline_isa() or baseline_binary():
                    dt = run_cmd(spindle_argv(t, baseline_isa() or None, baseline_binary() or None),
                                 os.path.join(raw, f"r{r}_t{t}_baseline.jsonl"))
                    log(f"round {r}/{rounds} threads {t}: baseline {dt:.0f} s")
            dt = run_cmd(llama_argv(t), os.path.join(raw, f"r{r}_t{t}_llama.json"))
            log(f"round {r}/{rounds} threads {t}: llama-bench {dt:.0f} s")
    meta["loadavg_end"] = open("/proc/loadavg").read().split()[0]
    meta["spindle_commit"] = git_commit()
    meta["machine"] = machine_kind()
    meta["cpu_model"], meta["cpus"], meta["cores"] = cpu_model(), os.cpu_count(), physical_cores()
    meta["baseline_isa"] = baseline_isa()
    # a baseline binary is named by its label (a kernel-set baseline by its set, in the report)
    meta["baseline_label"] = (os.environ.get("BASELINE_LABEL") or os.path.basename(baseline_binary())
                              if baseline_binary() else "")
    meta["baseline_spindle"] = baseline_binary()
    with open(os.path.join(raw, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    do_report(raw)


def probe_flash_attn():
    """What llama-bench's -fa setting ("auto" by default) resolves to on this machine."""
    argv = [env("LLAMA_BENCH"), "-m", env("MODEL"), "-p", "8", "-n", "0", "-r", "1", "-t", "1",
            "-fa", env("LLAMA_FA"), "-ngl", "0", "--no-warmup", "-v", "-o", "json"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    m = re.search(r"Flash Attention (enabled|disabled)", proc.stderr)
    return m.group(1) if m else "unknown"


def git_commit():
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


SPINDLE_SETS = set()  # the CPU kernel sets spindle reported (cpu_isa)


def parse_spindle(path, sets=SPINDLE_SETS):
    """{(test, threads): [t/s, ...]} from `spindle bench` JSON lines; the kernel sets
    reported go into sets."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            obj = json.loads(line)
            out.setdefault((obj["test"], int(obj["threads"])), []).extend(
                float(x) for x in obj["tokens_per_s"])
            if obj.get("cpu_isa"):
                sets.add(obj["cpu_isa"])
    return out


def peer_isa():
    """The instruction set the peer was built with (tools/peer_build.sh writes PEER_DIR/isa)."""
    try:
        with open(os.path.join(os.environ.get("PEER_DIR", ""), "isa")) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def parse_llama(path):
    """({(test, threads): [t/s, ...]}, info) from `llama-bench -o json`."""
    with open(path) as f:
        rows = json.load(f)
    out, info = {}, {}
    for row in rows:
        if row.get("n_prompt", 0) and not row.get("n_gen", 0):
            test = f"pp{row['n_prompt']}"
        elif row.get("n_gen", 0) and not row.get("n_prompt", 0):
            test = f"tg{row['n_gen']}"
        else:
            test = f"pp{row['n_prompt']}+tg{row['n_gen']}"
        out.setdefault((test, int(row["n_threads"])), []).extend(
            float(x) for x in row["samples_ts"])
        info = row
    return out, info


def physical_cores():
    try:
        with open("/proc/cpuinfo") as f:
            blocks = f.read().split("\n\n")
    except OSError:
        return None
    cores = set()
    for b in blocks:
        fields = dict(l.split(":", 1) for l in b.splitlines() if ":" in l)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "core id" in fields:
            cores.add((fields.get("physical id"), fields["core id"]))
    return len(cores) or None


def fmt(x):
    return f"{x:.1f}" if x is not None else "–"


def do_report(raw):
    with open(os.path.join(raw, "meta.json")) as f:
        meta = json.load(f)
    spindle, llama, info = {}, {}, {}
    for path in sorted(glob.glob(os.path.join(raw, "*_spindle.jsonl"))):
        for k, v in parse_spindle(path).items():
            spindle.setdefault(k, []).extend(v)
    for path in sorted(glob.glob(os.path.join(raw, "*_llama.json"))):
        samples, info = parse_llama(path)
        for k, v in samples.items():
            llama.setdefault(k, []).extend(v)
    baseline, baseline_sets = {}, set()
    for path in sorted(glob.glob(os.path.join(raw, "*_baseline.jsonl"))):
        for k, v in parse_spindle(path, baseline_sets).items():
            baseline.setdefault(k, []).extend(v)
    base = meta.get("baseline_label") or ",".join(sorted(baseline_sets))
    keys = sorted(set(spindle) | set(llama), key=lambda k: (not k[0].startswith("pp"), k[1]))

    model = os.environ.get("MODEL", info.get("model_filename", "?"))
    isa = peer_isa()
    ours = ",".join(sorted(SPINDLE_SETS)) or "unknown"
    # one section per machine kind and pairing of kernel sets, so a run on another kind of
    # machine (or with another peer build) never overwrites this one's figures
    # raw data from before the machine was recorded keeps the section it was written to
    machine = meta.get("machine")
    pair = isa if ours == isa else f"{ours}-vs-{isa}"
    section = f"kernels-{pair}-on-{machine}" if machine else f"kernels-{pair}"
    if not machine:
        log(f"{raw}: no machine recorded (an older run): writing section {section}")
    lines = [
        f"## Kernels: spindle ({ours} set) vs llama.cpp ({isa} build), pp512 and tg128"
        + (f", on {machine}" if machine else ""),
        "",
        "Generated by `bench/bench_kernels.sh`. To reproduce: `make bench`.",
        "",
        f"- Date: {meta['start']}",
        f"- Machine: {meta.get('cpu_model', cpu_model())}, {meta.get('cpus', os.cpu_count())} logical CPUs"
        + (f" ({meta.get('cores', physical_cores())} physical cores)" if meta.get("cores", physical_cores()) else "")
        + f", load average {meta['loadavg_start']} at start, {meta.get('loadavg_end', '?')} "
          "at end",
        f"- Model: `{os.path.basename(model)}` ({info.get('model_type', '?')}, "
        f"{info.get('model_n_params', '?')} parameters)",
        f"- spindle: commit `{meta.get('spindle_commit', 'unknown')}`, CPU kernel set "
        f"{', '.join(sorted(SPINDLE_SETS)) or 'not reported'}",
        f"- llama.cpp: build {info.get('build_number', '?')}, commit "
        f"`{info.get('build_commit', '?')}` (vendor/llama.cpp of llama-cpp-python 0.3.36, "
        f"built by `tools/peer_build.sh` with its {isa} kernels, explicit flags), llama-bench with "
        f"KV cache {info.get('type_k', '?')}/{info.get('type_v', '?')}, "
        f"flash_attn {os.environ.get('LLAMA_FA', '?')} (resolved: "
        f"{meta.get('llama_flash_attn_resolved', '?')}), batch {info.get('n_batch', '?')}, "
        f"ubatch {info.get('n_ubatch', '?')}, backend {info.get('backends', '?')}",
        f"- Method: per round and per thread count, `spindle bench` then `llama-bench` "
        f"(alternating; each a warm-up plus {os.environ.get('REPS', '?')} repetitions), "
        f"{os.environ.get('ROUNDS', '?')} rounds; the figures are medians over all samples "
        "(n = samples per program).",
        f"- Command: `{meta['command']}`",
        "",
    ]
    if baseline:
        if meta.get("baseline_label"):
            lines[-1:-1] = [f"- Baseline: spindle {base} (`{meta.get('baseline_spindle', '?')}`"
                            f"{', --cpu-isa ' + meta['baseline_isa'] if meta.get('baseline_isa') else ''}"
                            ") in the same alternation, for a regression check."]
        else:
            lines[-1:-1] = [f"- Baseline: spindle's {base} set (`spindle bench --cpu-isa {base}`) in "
                            "the same alternation, for the gain of the set in use over it."]
        lines += [f"| test | threads | spindle t/s | llama.cpp t/s | ratio | spindle {base} t/s "
                  f"| {ours} / {base} |", "|---|---:|---:|---:|---:|---:|---:|"]
    else:
        lines += ["| test | threads | spindle t/s | llama.cpp t/s | ratio |", "|---|---:|---:|---:|---:|"]
    header_at = len(lines) - 2
    for k in keys:
        s = statistics.median(spindle[k]) if spindle.get(k) else None
        ll = statistics.median(llama[k]) if llama.get(k) else None
        ratio = f"{s / ll:.2f}" if s and ll else "–"
        row = f"| {k[0]} | {k[1]} | {fmt(s)} | {fmt(ll)} | {ratio} |"
        if baseline:
            b = statistics.median(baseline[k]) if baseline.get(k) else None
            row += f" {fmt(b)} | {f'{s / b:.2f}' if s and b else '–'} |"
        lines.append(row)
    lines += ["", "Spread (min–max of the samples, n per program):", ""]
    for k in keys:
        parts = []
        for name, d in (("spindle", spindle), ("llama.cpp", llama), (f"spindle {base}", baseline)):
            if d.get(k):
                parts.append(f"{name} {min(d[k]):.1f}–{max(d[k]):.1f} (n={len(d[k])})")
        lines.append(f"- {k[0]}, {k[1]} thread{'s' if k[1] > 1 else ''}: " + "; ".join(parts))
    lines.append("")
    out = os.environ.get("OUT", "docs/benchmarks.md")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    write_section(out, section, "\n".join(lines))
    log(f"wrote {out} (raw outputs in {raw})")
    print("\n".join(lines[header_at:]))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "run":
        do_run()
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        do_report(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Speculative-decoding benchmark: spindle with speculation (`--speculative auto`), spindle
without it (`--speculative off`) and llama.cpp's llama-server with its own draft-free n-gram
speculation, side by side in one sitting, on the datasets of bench/spec_datasets.py (copy-heavy,
agentic multi-turn, free prose).

For each dataset and each concurrency C (1, 4, 16, 64) it starts each server fresh on the same
GGUF with the same threads and room for C sequences, waits for its /health, sends one warm-up
request, reads /metrics, runs the conversations with at most C in flight (each conversation's
turns one after another, every turn carrying the server's own earlier answers), reads /metrics
again, and stops it. Requests are streaming /v1/chat/completions, temperature 0, a fixed
max_tokens. The three servers take turns, and the order flips at every point, so drift in the
machine's speed hits all alike. It then checks that spindle's answers with speculation equal
its answers without (same prompts, greedy: they must, token for token) and writes the "spec"
section of docs/benchmarks.md: delivered output tokens/s, the ratios spec/off and
spec/llama-server, median TTFT, draft acceptance per proposer (from the /metrics deltas), and
the mismatch count. Raw per-request JSON (texts included) and server logs stay in
build/bench/spec-<time>/.

Then the draft-model part (not with --no-draft or --quick): `spindle quantize` makes a Q8_0
target of the model (a Q4_1: the same weights re-rounded), and at C = 1 and 4 spindle runs on
it with the model itself drafting (`--draft-model MODEL --speculative draft`) and without
speculation, in turns as above; the same identity check, and a table of its own.

    python3 bench/bench_spec.py --peer-dir build/peer-avx512      the full run, 23 minutes on a 2-core Xeon
    python3 bench/bench_spec.py --quick                          smoke test: C=4, 4 prompts, 2 turns, no draft (~1 min)
    python3 bench/bench_spec.py --report-from build/bench/spec-<time>     rewrite the report only

spindle's flags come from `spindle serve --help`: without --speculative (an older build) the
spec and off runs are the same server, and the report says so. llama-server's speculation flags
come from its --help (--spec-type with the ngram types); a build without them runs without
speculation, and the report says so.
"""
import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spec_datasets  # noqa: E402
from bench_serve import (ServerProcess, git_commit, http_get, load_points, peer_binary,  # noqa: E402
                         spindle_kv_bytes_per_token, start_run)
from report_section import cpu_model, started_date, write_section  # noqa: E402
from cpu_share import CpuWatch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ("spec", "off", "llama.cpp")  # spindle --speculative auto, spindle --speculative off, llama-server
DRAFT_VARIANTS = ("draft", "draft-off")  # on the Q8_0 target: drafted by the model (--speculative draft), off
TWINS = {"spec": "off", "draft": "draft-off"}  # a variant with speculation: the one whose answers it must equal
# llama-server's draft-free speculation: ngram-mod (what its --spec-default turns on), a hash pool
# of the n-grams of every slot's prompt and output, so it looks up both the sequence itself and
# other requests, like spindle's two proposers together. Drafts of up to 8 tokens as spindle's
# --spec-k, after a 16-token match (the shortest its authors recommend; --spec-default's 24/48/64
# drafts only after long matches). In trial runs on 2 cores with the 135M model, ngram-simple,
# ngram-map-k, ngram-simple+ngram-mod and --spec-default were no faster for llama-server.
LLAMA_SPEC_DEFAULT = "--spec-type ngram-mod --spec-ngram-mod-n-match 16 --spec-ngram-mod-n-min 2 --spec-ngram-mod-n-max 8"
LLAMA_SPEC_TYPES = {
    "ngram-mod": "a hash pool of the n-grams of every slot's prompt and output, shared by all slots",
    "ngram-simple": "the last n tokens looked up in the sequence's own tokens",
    "ngram-map-k": "the last n tokens looked up in a map of the sequence's n-grams",
    "ngram-map-k4v": "the last n tokens looked up in a map of the sequence's n-grams, four continuations each",
    "ngram-cache": "n-gram statistics of the sequence (and optional lookup-cache files)",
}


def log(msg):
    print(f"bench-spec: {msg}", file=sys.stderr, flush=True)


def help_flags(argv):
    """The --flags an executable's help text names."""
    out = subprocess.run(argv, capture_output=True, text=True)
    return set(re.findall(r"(?<![\w-])--[a-z][\w-]*", out.stdout + out.stderr))


# ---- the servers' command lines --------------------------------------------------------------

def spindle_argv(a, variant, c, ctx, kv_mb):
    """spindle with room for c sequences of ctx tokens (--max-batch-size is llama-server's -np,
    --ctx-size its per-slot context, the KV cache sized to hold them), then the variant's flags.
    The draft variants run on the Q8_0 target; the drafting model gets as much KV cache as the
    target (the same architecture, so the same room)."""
    extra = {"spec": a.spindle_spec_args, "off": a.spindle_off_args, "draft-off": a.spindle_off_args,
             "draft": ["--draft-model", a.model, "--draft-kv-cache-mb", str(kv_mb), *a.spindle_draft_args]}[variant]
    model = a.target if variant in DRAFT_VARIANTS else a.model
    device = ["--device", a.device] if a.device and "--device" in a.spindle_flags else []
    return lambda port: [a.bin, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port),
                         "--threads", str(a.threads), "--max-batch-size", str(c), "--ctx-size", str(ctx),
                         "--kv-cache-mb", str(kv_mb), "--no-access-log", *device, *extra]


def llama_argv(a, c, ctx):
    """llama-server as bench_serve.py runs it (continuous batching, c slots of ctx tokens, CPU
    only) with /metrics on and its speculation flags."""
    return lambda port: [a.llama_server, "-m", a.model, "-t", str(a.threads), "-tb", str(a.threads), "-cb",
                         "-np", str(c), "-c", str(c * ctx), "-ngl", "0", "--metrics", "--host", "127.0.0.1",
                         "--port", str(port), *a.llama_spec]


def resolve_spindle_flags(a):
    """Drops the variant flags this spindle lacks (before --speculative existed: none)."""
    a.spindle_flags = help_flags([a.bin, "serve", "--help"])
    a.notes = []
    spec, off = shlex.split(a.spec_args), shlex.split(a.off_args)
    missing = sorted({x for x in spec + off if x.startswith("--") and x not in a.spindle_flags})
    if missing:
        a.notes.append(f"this spindle has no {', '.join(missing)}: the spec and off runs used the same flags "
                       "(the comparison spec/off measures nothing)")
        log(a.notes[-1])
        spec = off = []
    a.spindle_spec_args, a.spindle_off_args = spec, off
    a.spindle_draft_args = shlex.split(a.draft_args)
    missing = sorted({x for x in ["--draft-model", *a.spindle_draft_args] if x.startswith("--")} - a.spindle_flags)
    if missing and not a.no_draft:
        a.notes.append(f"this spindle has no {', '.join(missing)}: no draft-model part")
        log(a.notes[-1])
        a.no_draft = True


def make_target(a, raw):
    """The draft part's Q8_0 target, made from the model by `spindle quantize` (None, with a note,
    when that fails)."""
    target = os.path.join(raw, "target.Q8_0.gguf")
    proc = subprocess.run([a.bin, "quantize", a.model, target, "Q8_0"], capture_output=True, text=True)
    if proc.returncode != 0:
        a.notes.append(f"`{a.bin} quantize` failed ({proc.stderr.strip()[-200:]}): no draft-model part")
        log(a.notes[-1])
        return None
    return target


def resolve_llama_spec(a):
    """llama-server's speculation flags, or none (with a note) when this build lacks them."""
    flags = help_flags([a.llama_server, "--help"])
    wanted = shlex.split(a.llama_spec_args)
    missing = sorted({x for x in wanted if x.startswith("-") and x not in flags})
    if missing:
        a.notes.append(f"llama-server has no {', '.join(missing)}: it ran WITHOUT speculation")
        log(a.notes[-1])
        wanted = []
    a.llama_spec = wanted


# ---- the client ------------------------------------------------------------------------------

def stream_chat(url, messages, max_tokens, timeout):
    """One streaming chat completion, greedy: a record of its text, TTFT (send to the first
    chunk with text), E2E and the usage the server reports."""
    u = urllib.parse.urlparse(url)
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    rec = {"text": "", "ttft": None, "e2e": None, "prompt_tokens": None, "completion_tokens": None,
           "cached_tokens": None, "finish_reason": None, "error": None}
    t0 = time.monotonic()
    rec["start"] = t0
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            rec["error"] = f"HTTP {resp.status}: {resp.read()[:200].decode('utf-8', 'replace')}"
            return rec
        parts = []
        for line in resp:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("error"):
                rec["error"] = json.dumps(chunk["error"])[:200]
                break
            for ch in chunk.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    if rec["ttft"] is None:
                        rec["ttft"] = time.monotonic() - t0
                    parts.append(piece)
                rec["finish_reason"] = ch.get("finish_reason") or rec["finish_reason"]
            usage = chunk.get("usage")
            if usage:
                rec["prompt_tokens"] = usage.get("prompt_tokens")
                rec["completion_tokens"] = usage.get("completion_tokens")
                rec["cached_tokens"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        rec["text"] = "".join(parts)
        if rec["completion_tokens"] is None and not rec["error"]:
            rec["error"] = "no usage in the stream"
    except (OSError, http.client.HTTPException, ValueError) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
        rec["end"] = time.monotonic()
        rec["e2e"] = rec["end"] - t0
    return rec


def run_conversations(url, convs, system, c, max_tokens, timeout):
    """Every conversation, at most c at once, each turn after the previous one's answer; returns
    (records in conversation and turn order, wall seconds from the first send to the last end)."""
    records = [[] for _ in convs]
    lock = threading.Lock()

    def one(i):
        messages = [{"role": "system", "content": system}] if system else []
        for turn, user in enumerate(convs[i]):
            messages.append({"role": "user", "content": user})
            rec = stream_chat(url, messages, max_tokens, timeout)
            rec.update(conv=i, turn=turn)
            with lock:
                records[i].append(rec)
            if rec["error"]:
                return
            messages.append({"role": "assistant", "content": rec["text"]})

    with concurrent.futures.ThreadPoolExecutor(max_workers=c) as pool:
        list(pool.map(one, range(len(convs))))
    flat = [r for conv in records for r in conv]
    t0 = min(r["start"] for r in flat)
    wall = max(r["end"] for r in flat) - t0
    for r in flat:  # times relative to the point's start
        r["start"], r["end"] = r["start"] - t0, r["end"] - t0
    return flat, wall


# ---- /metrics ----------------------------------------------------------------------------------

METRIC_LINE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$")
# spindle: spindle_spec_{proposed,accepted}_tokens_total{proposer="..."} (spindle_spec_proposed_total
# also read), spindle_spec_drafts_total; llama-server: llamacpp:spec_decode_num_*_total
SPEC_METRIC = re.compile(r"^(?:spindle_spec_(proposed|accepted|drafts)(?:_tokens)?_total|"
                         r"llamacpp:spec_decode_num_(draft|accepted|drafts)(?:_tokens)?_total)$")


def spec_counters(url, llama_label):
    """{proposer: {"proposed": n, "accepted": n, "drafts": n}} from a server's /metrics now."""
    status, text = http_get(url + "/metrics", timeout=10)
    out = {}
    if status != 200:
        return out
    for line in text.splitlines():
        m = METRIC_LINE.match(line)
        if not m or not (k := SPEC_METRIC.match(m.group(1))):
            continue
        kind = k.group(1) or {"draft": "proposed", "accepted": "accepted", "drafts": "drafts"}[k.group(2)]
        label = re.search(r'proposer="([^"]*)"', m.group(2) or "")
        proposer = label.group(1) if label else llama_label
        out.setdefault(proposer, {})[kind] = float(m.group(3))
    return out


def counters_delta(before, after):
    return {p: {k: v - before.get(p, {}).get(k, 0.0) for k, v in kinds.items()} for p, kinds in after.items()}


# ---- the run -------------------------------------------------------------------------------------

def num_conversations(a, dataset, c):
    if a.num_prompts:
        return max(a.num_prompts, c) if dataset == "agentic" else a.num_prompts
    if dataset == "agentic":  # c conversations in flight need c conversations
        return max(c, a.min_conversations)
    return min(a.max_prompts, max(a.min_prompts, a.num_prompts_per_concurrency * c))


def max_tokens_for(a, dataset):
    """--max-tokens, else the dataset's own: a copy answer is the whole file or document again
    (100-500 tokens with the default model), so 128 would stop it before most of the copying."""
    return a.max_tokens or spec_datasets.MAX_TOKENS[dataset]


def context_tokens(a, dataset, convs):
    """Per-sequence context to provision: the longest conversation's text at 2 bytes a token
    (these prompts run 3-4), its answers, and 64 tokens of chat template; a multiple of 256."""
    system = spec_datasets.system_prompt(dataset) or ""
    longest = max(len(system) + sum(len(t) for t in conv) for conv in convs)
    turns = max(len(conv) for conv in convs)
    need = longest // 2 + turns * (max_tokens_for(a, dataset) + 32) + 64
    return (need + 255) // 256 * 256


def run_point(a, raw, dataset, c, variant, rep, convs, ctx, kv_mb):
    name = f"{dataset}-c{c}-{variant.replace('.', '')}-r{rep}"
    argv_for_port = spindle_argv(a, variant, c, ctx, kv_mb) if variant != "llama.cpp" else llama_argv(a, c, ctx)
    spec_type = a.llama_spec.index("--spec-type") if "--spec-type" in a.llama_spec else -1
    llama_label = a.llama_spec[spec_type + 1] if 0 <= spec_type < len(a.llama_spec) - 1 else "llama-server"
    t0 = time.monotonic()
    try:
        srv = ServerProcess(argv_for_port, os.path.join(raw, name + ".log"))
    except RuntimeError as e:
        log(f"{name}: {e}")
        return {"error": str(e)}
    try:
        warm = stream_chat(srv.url, [{"role": "user", "content": "Say hello."}], 8, a.timeout)
        if warm["error"]:
            log(f"{name}: warm-up failed: {warm['error']}")
        before = spec_counters(srv.url, llama_label)
        watch = CpuWatch([srv.proc.pid, os.getpid()])  # the server and this client: anything else disturbs
        records, wall = run_conversations(srv.url, convs, spec_datasets.system_prompt(dataset), c,
                                          max_tokens_for(a, dataset), a.timeout)
        cpu = watch.stop()
        spec = counters_delta(before, spec_counters(srv.url, llama_label))
    finally:
        srv.stop()
    ok = [r for r in records if not r["error"]]
    out_tokens = sum(r["completion_tokens"] for r in ok)
    result = {"dataset": dataset, "concurrency": c, "variant": variant, "repeat": rep, "argv": srv.argv,
              "conversations": len(convs), "requests": len(records), "completed": len(ok),
              "failed": len(records) - len(ok), "wall_s": wall, "output_tokens": out_tokens,
              "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
              "output_throughput": out_tokens / wall if wall > 0 else 0.0,
              "median_ttft_ms": 1000 * statistics.median([r["ttft"] for r in ok if r["ttft"] is not None] or [0]),
              "spec": spec, "cpu": cpu, "records": records}
    with open(os.path.join(raw, name + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    errs = {r["error"] for r in records if r["error"]}
    log(f"{name}: {len(ok)}/{len(records)} done, {result['output_throughput']:.1f} output tok/s, "
        f"TTFT median {result['median_ttft_ms']:.0f} ms, drafts {describe_acceptance(spec) or '-'}, "
        f"{describe_disturbance(cpu) or 'CPU use by others unknown'} ({time.monotonic() - t0:.0f} s)"
        f"{' errors: ' + '; '.join(sorted(errs))[:300] if errs else ''}")
    return result


def do_run(a):
    stamp, raw, load = start_run(a, "spec")
    variants = [v for v in a.variants.split(",") if v]
    a.target = None if a.no_draft else make_target(a, raw)
    kv_per_token = spindle_kv_bytes_per_token(a, raw) if {"spec", "off"} & set(variants) or a.target else 0
    meta = {"args": {k: v for k, v in vars(a).items() if k != "spindle_flags"}, "command": a.command,
            "started": stamp, "load_before": load, "variants": variants, "notes": a.notes,
            "spindle_commit": git_commit(), "model": os.path.relpath(os.path.abspath(a.model), ROOT),
            "cpu": cpu_model(), "cpus": os.cpu_count(), "threads": a.threads}
    if a.llama_server:
        out = subprocess.run([a.llama_server, "--version"], capture_output=True, text=True)
        line = next((l for l in (out.stdout + out.stderr).splitlines() if l.startswith("version:")), "version: ?")
        meta["llama_version"] = line.split(":", 1)[1].strip()
    if a.draw_bin:
        run_draw(a, raw)
    meta["points"] = run_part(a, raw, variants, a.concurrency, kv_per_token)
    if a.target:
        meta["points"] += run_part(a, raw, list(DRAFT_VARIANTS), a.draft_concurrency, kv_per_token)
        os.remove(a.target)  # 145 MB, made again by the next run
    meta["load_after"] = os.getloadavg()[0]
    with open(os.path.join(raw, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    log(f"raw results in {os.path.relpath(raw, ROOT)}")
    return raw


def run_part(a, raw, variants, concurrency, kv_per_token):
    """Every dataset at every concurrency of the comma list, the variants' servers in turn (the
    first one changing at every point); the points for meta.json."""
    points = []
    k = 0
    for dataset in a.datasets.split(","):
        for c in [int(x) for x in concurrency.split(",")]:
            convs = spec_datasets.conversations(dataset, num_conversations(a, dataset, c), a.seed, a.turns)
            ctx = context_tokens(a, dataset, convs)
            # room for c sequences of the context, plus an eighth for partly used blocks
            kv_mb = max(64, int(kv_per_token * c * ctx * 1.125 / 2**20) + 1)
            for rep in range(a.repeats):
                order = variants if k % 2 == 0 else variants[::-1]
                k += 1
                for variant in order:
                    r = run_point(a, raw, dataset, c, variant, rep, convs, ctx, kv_mb)
                    points.append({"dataset": dataset, "concurrency": c, "variant": variant, "repeat": rep,
                                   "ctx": ctx, **({"error": r["error"]} if "error" in r and "records" not in r
                                                  else {"result": f"{dataset}-c{c}-{variant.replace('.', '')}"
                                                                  f"-r{rep}.json"})})
    return points


def run_draw(a, raw):
    """bench/bench_draw.c's per-row draw cost, its output kept as draw.txt (before any server
    starts, so nothing else runs)."""
    if not os.access(a.draw_bin, os.X_OK):
        log(f"{a.draw_bin}: not built (make build/bench_draw); no draw costs in the report")
        return
    proc = subprocess.run([a.draw_bin, str(a.draw_rows)], capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"{a.draw_bin} failed: {proc.stderr.strip()[-200:]}")
        return
    with open(os.path.join(raw, "draw.txt"), "w") as f:
        f.write(f"$ {a.draw_bin} {a.draw_rows}\n{proc.stdout}")


def draw_table(raw, rows):
    """The draw costs of draw.txt as report lines (none when it was not run)."""
    path = os.path.join(raw, "draw.txt")
    if not os.path.exists(path):
        return []
    lines = ["", "### What one sampled row costs on the host", "",
             f"`bench/bench_draw.c`, one thread, {rows} rows of SmolLM2's 49,152-token vocabulary with Zipf-like "
             "logits (every draft row of a step is sampled like a decode row): each row the penalties over 256 "
             "generated tokens, the counter-based generator of its position and the draw, at temperature 0.8, "
             "top-p 0.95 with frequency and presence penalties (and top-2 log-probabilities), or greedy.", "",
             "| case | median µs per row | p99 µs per row |", "|---|---:|---:|"]
    with open(path) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 3 and not line.startswith("$"):
                lines.append(f"| {cols[0]} | {cols[1]} | {cols[2]} |")
    return lines


# ---- the report ------------------------------------------------------------------------------------

def describe_acceptance(spec):
    """'ngram 71% of 512, suffix 90% of 40': accepted / proposed draft tokens per proposer."""
    parts = [f"{p} {100 * k.get('accepted', 0) / k['proposed']:.0f}% of {k['proposed']:.0f}"
             for p, k in sorted(spec.items()) if k.get("proposed")]
    return ", ".join(parts) or ("none drafted" if spec else "")


# A run whose other CPU use (other processes and steal together) passes this share of the
# machine is named in the report: on 2 CPUs, 10% is a fifth of one core; quiet runs read
# 0-2%, and one busy process beside the bench about 45%.
DISTURBED = 0.10


def disturbance(cpu):
    """Other processes' and the hypervisor's share of the CPUs in a CpuWatch reading (None: not
    measured, as in raw results from before bench/cpu_share.py)."""
    if not cpu or cpu.get("other") is None or cpu.get("steal") is None:
        return None
    return cpu["other"] + cpu["steal"]


def describe_disturbance(cpu):
    """'others 3% of the CPUs (steal 1%)' for a CpuWatch reading ('' when unmeasured)."""
    if disturbance(cpu) is None:
        return ""
    return f"others {100 * cpu['other']:.0f}% of the CPUs (steal {100 * cpu['steal']:.0f}%)"


SHORT_NAMES = {"spec": "spindle spec", "off": "spindle off", "llama.cpp": "llama-server",
               "draft": "spindle draft model", "draft-off": "spindle off (Q8_0 target)"}


def disturbed_runs(meta):
    """Report lines on the runs' other CPU use: the largest and median share over the runs, and
    each run above DISTURBED by name (none when the raw results predate the measurement)."""
    runs = [(p, disturbance(p["r"].get("cpu"))) for p in meta["points"] if p["r"]]
    runs = [(p, d) for p, d in runs if d is not None]
    if not runs:
        return []
    shares = [d for _, d in runs]
    lines = [f"- Other CPU use during the timed runs (processes other than the server and the client, and the "
             f"hypervisor's steal, as a share of all {meta['cpus']} CPUs): median "
             f"{100 * statistics.median(shares):.0f}%, largest {100 * max(shares):.0f}%."]
    bad = [(p, d) for p, d in runs if d > DISTURBED]
    if bad:
        named = [f"{p['dataset']} C = {p['concurrency']} {SHORT_NAMES.get(p['variant'], p['variant'])} "
                 f"run {p['repeat'] + 1} {100 * d:.0f}%" for p, d in bad]
        lines.append(f"- Runs above {100 * DISTURBED:.0f}%, whose figures are not the server's alone: "
                     + "; ".join(named) + ".")
    return lines


def median_of(results, key):
    vals = [r[key] for r in results if r]
    return statistics.median(vals) if vals else None


def ratio(x, y):
    return f"{x / y:.2f}x" if x and y else "-"


def mismatches(meta):
    """{(variant, dataset, c): (compared, differing, [first few (conv, turn)])}: spindle's answers
    with speculation (spec, draft) against its twin's without (TWINS), request by request, in
    every repeat."""
    out = {}
    for p in meta["points"]:
        if p["variant"] not in TWINS or not p["r"]:
            continue
        twin = next((q for q in meta["points"] if q["variant"] == TWINS[p["variant"]] and q["dataset"] == p["dataset"]
                     and q["concurrency"] == p["concurrency"] and q["repeat"] == p["repeat"] and q["r"]), None)
        if not twin:
            continue
        off = {(r["conv"], r["turn"]): r for r in twin["r"]["records"] if not r["error"]}
        key = (p["variant"], p["dataset"], p["concurrency"])
        n, bad, where = out.get(key, (0, 0, []))
        for r in p["r"]["records"]:
            o = off.get((r["conv"], r["turn"]))
            if r["error"] or not o:
                continue
            n += 1
            if r["text"] != o["text"] or r["completion_tokens"] != o["completion_tokens"]:
                bad += 1
                where.append((r["conv"], r["turn"]))
        out[key] = (n, bad, where)
    return out


DATASET_TITLES = {
    "copy": "Copy-heavy (rename a function in a given file, reformat given JSON, copy a paragraph of a given document)",
    "agentic": "Agentic multi-turn (recurring tool outputs across turns and conversations)",
    "prose": "Free prose (story prompts)",
}


def summary(meta, dataset, c, variant):
    """One point's runs (its repeats) together: requests done and failed, mean output tokens,
    median output tok/s and TTFT, the draft counters summed; {"error": why} when none ran."""
    pts = [p for p in meta["points"] if (p["dataset"], p["concurrency"], p["variant"]) == (dataset, c, variant)]
    rs = [p["r"] for p in pts if p["r"]]
    if not rs:
        return {"error": next((p["error"] for p in pts if p.get("error")), "not run")[:80]}
    spec = {}
    for r in rs:
        for prop, kinds in r["spec"].items():
            for kind, val in kinds.items():
                spec.setdefault(prop, {})[kind] = spec.get(prop, {}).get(kind, 0.0) + val
    done = sum(r["completed"] for r in rs)
    return {"done": done, "failed": sum(r["failed"] for r in rs),
            "mean_out": sum(r["output_tokens"] for r in rs) / max(1, done),
            "tput": median_of(rs, "output_throughput"), "ttft": median_of(rs, "median_ttft_ms"), "spec": spec}


def concurrencies(meta, dataset, variants):
    return sorted({p["concurrency"] for p in meta["points"] if p["dataset"] == dataset and p["variant"] in variants})


def agreement(mism, variant, dataset, c):
    """'n - differing / n' for a speculative variant's point ('' when nothing was compared)."""
    n, bad, _ = mism.get((variant, dataset, c), (0, 0, []))
    return f"{n - bad} / {n}" if n else ""


def mismatch_totals(mism, variant):
    """(compared, differing) over a speculative variant's points, and report lines naming where."""
    compared = sum(n for k, (n, _, _) in mism.items() if k[0] == variant)
    differing = sum(bad for k, (_, bad, _) in mism.items() if k[0] == variant)
    where = [f"- mismatches in {d}, C={c}: (conversation, turn) {w[:8]}" for (v, d, c), (_, bad, w)
             in sorted(mism.items()) if v == variant and bad]
    return compared, differing, where


def dataset_table(meta, dataset, mism):
    lines = ["| concurrency | server | requests done / failed | output tokens (mean) | output tok/s | "
             "TTFT median (ms) | spec / off | spec / llama-server | drafts: accepted of proposed | "
             "spec = off answers |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    names = {"spec": "spindle, speculation auto", "off": "spindle, speculation off",
             "llama.cpp": "llama-server" + (", n-gram speculation" if meta["args"].get("llama_spec") else "")}
    for c in concurrencies(meta, dataset, VARIANTS):
        s = {v: summary(meta, dataset, c, v) for v in VARIANTS}
        tput = {v: s[v].get("tput") for v in VARIANTS}
        for v in meta["variants"]:
            if "error" in s[v]:
                lines.append(f"| {c} | {names[v]} | error: {s[v]['error']} |" + " |" * 7)
                continue
            ratios = (f"{ratio(tput['spec'], tput['off'])} | {ratio(tput['spec'], tput['llama.cpp'])}"
                      if v == "spec" else " | ")
            same = agreement(mism, "spec", dataset, c) if v == "spec" else ""
            lines.append(f"| {c} | {names[v]} | {s[v]['done']} / {s[v]['failed']} | {s[v]['mean_out']:.0f} | "
                         f"{tput[v]:.1f} | {s[v]['ttft']:.0f} | {ratios} | "
                         f"{describe_acceptance(s[v]['spec']) or '-'} | {same} |")
    return lines


def draft_section(meta, mism):
    """The draft-model part: its method, identity count and table (nothing when it did not run)."""
    if not any(p["variant"] in DRAFT_VARIANTS for p in meta["points"]):
        return []
    args, model = meta["args"], os.path.basename(meta["model"])
    compared, differing, where = mismatch_totals(mism, "draft")
    lines = ["", "### A draft model: a Q8_0 target drafted by its Q4_1", "",
             f"spindle alone, on a Q8_0 target made for the run by `spindle quantize {model} target.Q8_0.gguf "
             f"Q8_0` (and deleted after). {model} is itself Q4_1, so the target holds the same weights re-rounded "
             "to 8 bits, not a model trained or converted at 8 bits: the draft is the target's own weights at "
             "4-bit precision, nearly an exact copy, and its acceptance is likely above what a Q4_1 drafting a "
             "genuine Q8_0 model would reach. Two servers per point, set up, loaded and timed as above (fresh, "
             "room for C sequences, the same conversations, the first one changing at every point): "
             f"`--draft-model {model} --draft-kv-cache-mb <as the target's> "
             f"{' '.join(args.get('spindle_draft_args') or ['--speculative', 'draft'])}` (draft: the model proposes "
             "up to `--spec-k` tokens a step from its own KV cache, the target verifies them) and "
             f"`{' '.join(args['spindle_off_args']) or '(no flag)'}` (off). Drafts: the deltas of "
             "`spindle_spec_*_total{proposer=\"draft\"}`. draft = off answers: as spec = off above.",
             "", f"**Drafted answers equal those without speculation: {compared - differing} of {compared} requests "
             f"({differing} mismatches).**", *where, "",
             "| dataset | concurrency | requests done / failed (draft, off) | output tok/s draft | output tok/s off | "
             "draft / off | TTFT median draft (ms) | TTFT median off (ms) | drafts: accepted of proposed | "
             "draft = off answers |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for dataset in args["datasets"].split(","):
        for c in concurrencies(meta, dataset, DRAFT_VARIANTS):
            d, o = summary(meta, dataset, c, "draft"), summary(meta, dataset, c, "draft-off")
            if "error" in d or "error" in o:
                lines.append(f"| {dataset} | {c} | error: {d.get('error') or o['error']} |" + " |" * 7)
                continue
            lines.append(f"| {dataset} | {c} | {d['done']} / {d['failed']}, {o['done']} / {o['failed']} | "
                         f"{d['tput']:.1f} | {o['tput']:.1f} | {ratio(d['tput'], o['tput'])} | {d['ttft']:.0f} | "
                         f"{o['ttft']:.0f} | {describe_acceptance(d['spec']) or '-'} | "
                         f"{agreement(mism, 'draft', dataset, c)} |")
    return lines


def do_report(a, raw):
    meta = load_points(raw)
    args = meta["args"]
    mism = mismatches(meta)
    compared, differing, where = mismatch_totals(mism, "spec")
    llama_spec = " ".join(args.get("llama_spec") or []) or "none"
    repeats = f", {args['repeats']} runs per point (medians)" if args["repeats"] > 1 else ""
    lines = [f"## Speculative decoding: spindle with and without, and llama-server "
             f"({os.path.basename(meta['model'])}, CPU)", ""]
    body = [
        f"- Date: {started_date(meta.get('started'))}",
        f"- Machine: {meta['cpu']}, {meta['cpus']} logical CPUs; load average {meta['load_before']:.2f} before, "
        f"{meta['load_after']:.2f} after",
        f"- spindle: commit `{meta['spindle_commit']}`; llama.cpp: `{meta.get('llama_version', 'not run')}` "
        "(vendor/llama.cpp of llama-cpp-python 0.3.36, built by tools/peer_build.sh)",
        f"- Command: `{meta['command']}` (raw results: `{os.path.relpath(raw, ROOT)}`)",
        *disturbed_runs(meta),
        "",
    ]
    body += [f"**Note: {n}**" for n in meta.get("notes", [])] + ([""] if meta.get("notes") else [])
    body += [
        f"Three servers on the same GGUF with {meta['threads']} threads, started fresh for every point (so no "
        f"cache carries over), with room for C sequences: spindle `--max-batch-size C --ctx-size N` and a KV "
        f"cache that holds them, with `{' '.join(args['spindle_spec_args']) or '(no flag)'}` (spec) or "
        f"`{' '.join(args['spindle_off_args']) or '(no flag)'}` (off); llama-server `-cb -np C -c C*N -ngl 0` "
        f"with `{llama_spec}`{describe_llama_spec(args.get('llama_spec') or [])}, its other settings at their "
        f"defaults. A Python client streams `/v1/chat/completions` (temperature 0, max_tokens "
        f"{describe_max_tokens(args)}, no ignore_eos), at most C conversations at once, after one warm-up request; "
        f"{describe_counts(args)}. The servers take turns, the first one changing at every point{repeats}. "
        "Output tok/s: completion tokens of all requests / (last end - first send). TTFT: send to the first "
        "chunk with text. Drafts: the /metrics deltas over the timed part, accepted / proposed draft tokens per "
        "proposer (spindle: `spindle_spec_*_total{proposer}`; llama-server: `llamacpp:spec_decode_num_*`, all "
        "its types together). spec = off answers: spindle's answer texts and token counts with speculation "
        "equal to those without, request by request.",
        "",
        "Datasets (generated by bench/spec_datasets.py from a seed; the same text for every server):",
        "- **copy**: one request each, in turn: a ~25-line Python file with \"rename function X to Y, reply "
        "with the complete updated file\"; a minified JSON document of 5-7 records with \"reformat with 2-space "
        "indentation, keep every key and value\"; a 4-paragraph project document with \"copy the paragraph "
        "about X word for word\".",
        f"- **agentic**: coding-agent conversations of {args['turns']} turns sent one after another (each turn "
        "carries the server's own earlier answers), one system prompt for all; the user turns are tool outputs "
        "from one 6-file repository (`cat src/X.py`, a pytest failure log quoting that file, the same `cat` "
        "again, the log again) with a request to print the function and explain it, print it fixed, reply "
        "with the whole fixed file, print it fixed again. The same file and log recur across turns and across "
        "conversations.",
        "- **prose**: \"write a short story about <who> in <where> who <what>\" (little to copy).",
        "",
        f"**spindle's answers with speculation equal those without: {compared - differing} of {compared} requests "
        f"({differing} mismatches).**",
    ]
    body += where
    for dataset in args["datasets"].split(","):
        body += ["", f"### {DATASET_TITLES.get(dataset, dataset)}", ""] + dataset_table(meta, dataset, mism)
    body += draft_section(meta, mism)
    body += draw_table(raw, args.get("draw_rows", 2000))
    text = "\n".join(lines + body) + "\n"
    write_section(a.out, "spec", text)
    print(text)
    return sum(bad for _, bad, _ in mism.values())


def describe_llama_spec(flags):
    if "--spec-type" not in flags[:-1]:
        return ""
    types = flags[flags.index("--spec-type") + 1].split(",")
    return " (its draft-free speculation; " + "; ".join(f"{t}: {LLAMA_SPEC_TYPES.get(t, '?')}" for t in types) + ")"


def describe_max_tokens(args):
    if args["max_tokens"]:
        return str(args["max_tokens"])
    return ", ".join(f"{n} for {d}" for d, n in spec_datasets.MAX_TOKENS.items())


def describe_counts(args):
    if args["num_prompts"]:
        return f"{args['num_prompts']} conversations per point (agentic: at least C)"
    return (f"max({args['min_prompts']}, {args['num_prompts_per_concurrency']} x C) requests per point for copy "
            f"and prose, at most {args['max_prompts']}; max({args['min_conversations']}, C) conversations for "
            f"agentic")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/spindle", help="spindle binary")
    ap.add_argument("--peer-dir", default=os.environ.get("PEER_DIR"),
                    help="llama.cpp build, its llama-server in PEER_DIR/build/bin (tools/peer_build.sh makes it "
                         "when missing; default build/peer-<isa>)")
    ap.add_argument("--draw-bin", default=None,
                    help="build/bench_draw: its per-row draw costs go into the report too (default: not run)")
    ap.add_argument("--draw-rows", type=int, default=2000, help="rows bench_draw times")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="spindle --device (passed when it has the flag; '' = not)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="which of spec,off,llama.cpp to run")
    ap.add_argument("--spec-args", default="--speculative auto --spec-k 8", help="spindle's flags for the spec run")
    ap.add_argument("--off-args", default="--speculative off", help="spindle's flags for the off run")
    ap.add_argument("--no-draft", action="store_true",
                    help="skip the draft-model part (a Q8_0 target drafted by the model; --quick skips it too)")
    ap.add_argument("--draft-args", default="--speculative draft",
                    help="spindle's flags for the drafted run, besides --draft-model MODEL --draft-kv-cache-mb")
    ap.add_argument("--draft-concurrency", default="1,4", help="the draft-model part's concurrencies")
    ap.add_argument("--llama-spec-args", default=LLAMA_SPEC_DEFAULT,
                    help="llama-server's speculation flags, given as --llama-spec-args='--spec-type ...' ('' = none)")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--datasets", default=",".join(spec_datasets.DATASETS))
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="max_tokens of every request (0: each dataset's own, spec_datasets.MAX_TOKENS)")
    ap.add_argument("--turns", type=int, default=3, help="turns per agentic conversation (1-4)")
    ap.add_argument("--num-prompts-per-concurrency", type=int, default=2)
    ap.add_argument("--min-prompts", type=int, default=4)
    ap.add_argument("--max-prompts", type=int, default=64)
    ap.add_argument("--min-conversations", type=int, default=2, help="agentic conversations at least (and C)")
    ap.add_argument("--num-prompts", type=int, default=0, help="the same number at every point (overrides the above)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per point (fresh servers each); medians reported")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: C=4, 4 prompts, 2 turns, no draft part, report into the raw dir unless --out")
    ap.add_argument("--out", default=None, help="report whose spec section is rewritten (default docs/benchmarks.md)")
    ap.add_argument("--raw-dir", default=None, help="default build/bench/spec-<time>")
    ap.add_argument("--report-from", default=None, metavar="RAW_DIR", help="only rewrite the report from a raw dir")
    a = ap.parse_args()
    a.command = "python3 bench/bench_spec.py" + "".join(" " + shlex.quote(x) for x in sys.argv[1:])
    if a.quick:
        a.concurrency, a.num_prompts, a.turns, a.no_draft = "4", 4, 2, True
    if a.report_from:
        a.out = a.out or "docs/benchmarks.md"
        sys.exit(1 if do_report(a, a.report_from) else 0)
    unknown = set(a.variants.split(",")) - set(VARIANTS)
    if unknown:
        ap.error(f"--variants: unknown {', '.join(sorted(unknown))} (known: {', '.join(VARIANTS)})")
    unknown = set(a.datasets.split(",")) - set(spec_datasets.DATASETS)
    if unknown:
        ap.error(f"--datasets: unknown {', '.join(sorted(unknown))} (known: {', '.join(spec_datasets.DATASETS)})")
    if not 1 <= a.turns <= 4:
        ap.error("--turns: 1 to 4")
    if not os.path.exists(a.model):
        sys.exit(f"bench-spec: {a.model}: model not found (make setup fetches it)")
    if not os.path.exists(a.bin):
        sys.exit(f"bench-spec: {a.bin}: spindle not built (make all)")
    resolve_spindle_flags(a)
    a.llama_server, a.llama_spec = None, []
    if "llama.cpp" in a.variants:
        a.llama_server = peer_binary(a.peer_dir, "llama-server", log)
        resolve_llama_spec(a)
    a.raw_dir = a.raw_dir or os.path.join(ROOT, "build", "bench",
                                          f"spec-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}")
    a.out = a.out or (os.path.join(a.raw_dir, "report.md") if a.quick else "docs/benchmarks.md")
    raw = do_run(a)
    differing = do_report(a, raw)
    if differing:
        log(f"{differing} answers differ with speculation on and off")
        sys.exit(1)


if __name__ == "__main__":
    main()

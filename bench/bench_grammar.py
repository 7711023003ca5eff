#!/usr/bin/env python3
"""Constrained decoding's cost: what a grammar mask costs per token (build/bench_grammar on the
model's vocabulary: a JSON Schema, a GBNF grammar, a regex), and delivered output tokens/s
with a JSON Schema against the same requests unconstrained, spindle against llama-server
with the same schema (its `json_schema` field), in one sitting, at concurrency 1 and 16.

Each point starts its server fresh on the model with room for C sequences, sends one warm-up
request, then 2 x C (at least 4) chat requests "Describe person <i> as JSON." (temperature
0.7, seed i, max_tokens 256), at most C in flight, streaming; output tok/s is completion
tokens / (last end - first send). The unconstrained requests generate exactly as many tokens
as spindle's constrained answer to the same request (max_tokens = that count, ignore_eos), so
both do the same work and the ratio is the grammar's cost alone. The constrained answers are
validated with Python's jsonschema and the count of valid ones is reported per server. The variants take turns and
the order flips at every point. Writes the "grammar" section of docs/benchmarks.md; raw
results stay in build/bench/grammar-<time>/.

The hostile set (`--hostile-only` runs just it): `bench_grammar --hostile` times the masks of
58 hostile constraints of at most 1 KiB (bounded repetitions of loops, overlapping
alternations, schema patterns, GBNF), then one spindle server serves a victim (an
unconstrained stream of 96 tokens) beside 4 requests with each constraint in turn; the
victim's largest inter-token gap and median gap are compared with the victim beside 4
unconstrained requests of the same shape (the control: median of 5 runs); with
`--hostile-repeats R` each case's figures are the medians of R runs, the cases taking
turns. Goal: no case raises the victim's inter-token latency by more than 50 ms.
`--hostile-only` writes the section "grammar-hostile-on-<machine>" of docs/benchmarks.md.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench_serve import ServerProcess, git_commit, peer_binary  # noqa: E402
from bench_kernels import machine_kind  # noqa: E402
from report_section import cpu_model, write_section  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "enum": ["Paris", "Rome", "Lima", "Osaka"]},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 4},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "skills", "employed"],
    "additionalProperties": False,
}
VARIANTS = ("spindle-schema", "spindle-free", "llama.cpp-schema")


def log(msg):
    print(f"[bench_grammar {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def argv_for(a, variant, c):
    ctx = 512
    if variant.startswith("spindle"):
        return lambda port: [a.bin, "serve", "--model", a.model, "--host", "127.0.0.1", "--port", str(port),
                             "--threads", str(a.threads), "--max-batch-size", str(c), "--ctx-size", str(ctx),
                             "--kv-cache-mb", str(max(64, c * 16)), "--no-access-log"]
    return lambda port: [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-t",
                         str(a.threads), "-np", str(c), "-c", str(c * ctx), "-cb", "-ngl", "0"]


def body_for(variant, i, max_tokens, lengths=None):
    b = {"messages": [{"role": "user", "content": f"Describe person number {i} as JSON."}],
         "temperature": 0.7, "seed": i, "max_tokens": max_tokens, "stream": True}
    if variant == "spindle-free" and lengths:  # the same number of tokens as the constrained answer
        b["max_tokens"] = lengths[i]
        b["ignore_eos"] = True
    if variant == "spindle-schema":
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    elif variant == "llama.cpp-schema":
        b["json_schema"] = PERSON
    return b


def stream(url, body, timeout):
    t0 = time.monotonic()
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    text, tokens, first = "", 0, None
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for ch in ev.get("choices", []):
                piece = (ch.get("delta") or {}).get("content") or ""
                if piece:
                    first = first or time.monotonic()
                    text += piece
                    tokens += 1
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
    return {"text": text, "tokens": tokens, "start": t0, "end": time.monotonic(),
            "ttft": (first - t0) if first else None}


def run_point(a, raw, variant, c, rep, lengths=None):
    name = f"c{c}-{variant}-r{rep}"
    srv = ServerProcess(argv_for(a, variant, c), os.path.join(raw, name + ".log"))
    try:
        stream(srv.url, body_for(variant, 10_000, 8), a.timeout)
        n = max(4, 2 * c)
        bodies = [body_for(variant, i, a.max_tokens, lengths) for i in range(n)]
        for b in bodies:
            b["stream_options"] = {"include_usage": True}
        with concurrent.futures.ThreadPoolExecutor(c) as pool:
            records = list(pool.map(lambda b: stream(srv.url, b, a.timeout), bodies))
    finally:
        srv.stop()
    valid = 0
    if variant != "spindle-free":
        import jsonschema
        for r in records:
            try:
                jsonschema.validate(json.loads(r["text"]), PERSON)
                valid += 1
            except (ValueError, jsonschema.ValidationError):
                pass
    wall = max(r["end"] for r in records) - min(r["start"] for r in records)
    tokens = sum(r["tokens"] for r in records)
    result = {"variant": variant, "concurrency": c, "repeat": rep, "requests": len(records), "tokens": tokens,
              "wall": wall, "tok_s": tokens / wall, "valid": valid, "texts": [r["text"] for r in records],
              "lengths": [r["tokens"] for r in records]}
    with open(os.path.join(raw, name + ".json"), "w") as f:
        json.dump(result, f)
    log(f"{name}: {tokens} tokens in {wall:.2f} s = {tokens / wall:.1f} tok/s, {valid} valid")
    return result


def mask_times(a, raw):
    out = subprocess.run([a.grammar_bin, a.model], capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    with open(os.path.join(raw, "mask_times.json"), "w") as f:
        json.dump(rows, f)
    return rows


HOSTILE_COPIES = 4


def hostile_masks(a, raw):
    out = subprocess.run([a.grammar_bin, a.model, "--hostile", "10"], capture_output=True, text=True,
                         check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    with open(os.path.join(raw, "hostile_masks.json"), "w") as f:
        json.dump(rows, f)
    return rows


def constraint_fields(kind, text):
    if kind == "r":
        return {"guided_regex": text}
    if kind == "s":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "h", "schema": json.loads(text)}}}
    return {"guided_grammar": text}


def victim_gaps(url, timeout):
    body = {"messages": [{"role": "user", "content": "Tell a long story about a lighthouse."}], "max_tokens": 96,
            "ignore_eos": True, "temperature": 0.7, "seed": 1, "stream": True}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for line in r:
            if line.startswith(b"data: {") and b'"content"' in line:
                times.append(time.monotonic())
    return [b - a for a, b in zip(times, times[1:])]


def hostile_request(url, fields, timeout):
    body = {"messages": [{"role": "user", "content": "Write anything."}], "max_tokens": 32, "temperature": 1.0,
            "seed": 3, **fields}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            finish = json.loads(r.read())["choices"][0]["finish_reason"]
            status = r.status
    except urllib.error.HTTPError as e:
        status, finish = e.code, None
    except OSError:
        status, finish = 0, "timeout"
    return {"status": status, "finish": finish, "seconds": time.monotonic() - t0}


def hostile_victims(a, raw, cases):
    srv = ServerProcess(argv_for(a, "spindle-free", HOSTILE_COPIES + 1), os.path.join(raw, "hostile.log"))
    rows = []
    try:
        stream(srv.url, body_for("spindle-free", 10_000, 8), a.timeout)
        def beside(fields):
            with concurrent.futures.ThreadPoolExecutor(HOSTILE_COPIES + 1) as pool:
                victim = pool.submit(victim_gaps, srv.url, a.timeout)
                time.sleep(0.2)
                hostile = [pool.submit(hostile_request, srv.url, fields, 120) for _ in range(HOSTILE_COPIES)]
                return [h.result() for h in hostile], victim.result()

        # the control: the victim beside as many unconstrained requests (their prefill, their
        # decode rows), so the increase is the constraint's alone
        control = [beside({})[1] for _ in range(5)]
        base_max = statistics.median(max(g) for g in control)
        base_med = statistics.median(statistics.median(g) for g in control)
        log(f"victim beside {HOSTILE_COPIES} unconstrained: max gap {base_max * 1e3:.1f} ms (median of 5), "
            f"median {base_med * 1e3:.1f} ms")
        runs = {case["case"]: [] for case in cases}
        for _ in range(a.hostile_repeats):  # the cases take turns, so drift falls on all of them
            for case in cases:
                runs[case["case"]].append(beside(constraint_fields(case["kind"], case["constraint"])))
        for case in cases:
            rs = runs[case["case"]]
            max_gap = statistics.median(max(gaps) for _, gaps in rs)
            median_gap = statistics.median(statistics.median(gaps) for _, gaps in rs)
            row = {"case": case["case"], "max_gap_ms": max_gap * 1e3, "median_gap_ms": median_gap * 1e3,
                   "max_increase_ms": (max_gap - base_max) * 1e3,
                   "median_increase_ms": (median_gap - base_med) * 1e3,
                   "outcomes": sorted({f"{o['status']}/{o['finish']}" for outcomes, _ in rs for o in outcomes}),
                   "slowest_s": max(o["seconds"] for outcomes, _ in rs for o in outcomes)}
            rows.append(row)
            log(f"hostile {case['case']} {case['constraint'][:40]!r}: victim max gap {row['max_gap_ms']:.1f} ms "
                f"(+{row['max_increase_ms']:.1f}), median +{row['median_increase_ms']:.1f} ms, {row['outcomes']}")
    finally:
        srv.stop()
    with open(os.path.join(raw, "hostile_victims.json"), "w") as f:
        json.dump({"alone_max_ms": base_max * 1e3, "alone_median_ms": base_med * 1e3, "cases": rows}, f)
    return {"alone_max_ms": base_max * 1e3, "alone_median_ms": base_med * 1e3,
            "cases": {r["case"]: r for r in rows}}


def hostile_lines(masks, victims):
    lines = ["", "### Hostile constraints", "",
             __doc__.split("\n\n")[2].replace("\n", " "),
             f"Control: largest gap {victims['alone_max_ms']:.1f} ms, median "
             f"{victims['alone_median_ms']:.1f} ms. *outcomes*: HTTP status / finish_reason of the "
             f"{HOSTILE_COPIES} hostile requests.", "",
             "| # | constraint | mask outcome | masks | p50 µs | p99 µs | max µs | victim max gap ms (+ vs alone) "
             "| victim median +ms | outcomes |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for m in masks:
        v = victims["cases"].get(m["case"], {})
        text = m["constraint"].replace("|", "\\|").replace("\n", "\\n")
        lines.append(f"| {m['case']} | `{text}` | {m['outcome']} | {m.get('masks', '-')} | "
                     f"{m.get('p50_us', float('nan')):.1f} | {m.get('p99_us', float('nan')):.1f} | "
                     f"{m.get('max_us', float('nan')):.1f} | "
                     f"{v.get('max_gap_ms', float('nan')):.1f} (+{v.get('max_increase_ms', float('nan')):.1f}) | "
                     f"{v.get('median_increase_ms', float('nan')):.1f} | {' '.join(v.get('outcomes', []))} |")
    return lines


def report(a, raw, masks, points, hostile=None):
    lines = [f"## Constrained output: mask time and throughput ({os.path.basename(a.model)}, CPU)", "",
             f"- Machine: {cpu_model()}, {a.threads} threads; spindle {git_commit()}; "
             f"{datetime.date.today().isoformat()}",
             f"- Command: `{' '.join(['python3', 'bench/bench_grammar.py'] + sys.argv[1:])}` "
             f"(raw results: `{os.path.relpath(raw, ROOT)}`)", "",
             "### Mask time per token (`build/bench_grammar`)", "",
             "Documents of each constraint's language tokenized by the model's tokenizer, a mask timed at every "
             "token. *new*: the grammar compiled and prepared afresh for each document, as the server does for a "
             "schema it has not seen (`gram_mask_prepare` walks every cut stack the grammar can hold before the "
             "request is queued); *repeat*: one prepared grammar for all (the same schema again: the server shares "
             "compiled grammars by their text); *lazy*: compiled afresh and not prepared, so each cut stack's first "
             "walk falls on a token (what masks cost without the preparation). *compile ms*: median time to "
             "compile (and prepare) the grammar, paid once per new schema on the preparation worker.", "",
             "| constraint | grammar | tokens timed | median µs | p99 µs | max µs | compile ms | cut stacks prepared |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for m in masks:
        lines.append(f"| {m['constraint']} | {m['grammar']} | {m['tokens']} | {m['median_us']:.1f} | "
                     f"{m['p99_us']:.1f} | {m['max_us']:.1f} | {m['compile_ms']:.2f} | {m['keys']} |")
    lines += ["", "### Output tokens/s with a JSON Schema", "",
              __doc__.split("\n\n")[1].replace("\n", " "), "",
              "| concurrency | server | output tok/s (median) | vs spindle unconstrained | "
              "spindle schema vs llama-server schema | valid JSON |",
              "|---:|---|---:|---:|---:|---:|"]
    for c in a.concurrency:
        med = {v: statistics.median(p["tok_s"] for p in points if p["variant"] == v and p["concurrency"] == c)
               for v in a.variants}
        for v in a.variants:
            ps = [p for p in points if p["variant"] == v and p["concurrency"] == c]
            valid = "-" if v == "spindle-free" else f"{sum(p['valid'] for p in ps)} / {sum(p['requests'] for p in ps)}"
            vs_free = f"{med[v] / med['spindle-free']:.2f}x" if "spindle-free" in med and v != "spindle-free" else ""
            vs_peer = (f"{med[v] / med['llama.cpp-schema']:.2f}x"
                       if v == "spindle-schema" and "llama.cpp-schema" in med else "")
            lines.append(f"| {c} | {v} | {med[v]:.1f} | {vs_free} | {vs_peer} | {valid} |")
    if hostile:
        lines += hostile_lines(*hostile)
    write_section(os.path.join(ROOT, "docs", "benchmarks.md"), "grammar", "\n".join(lines))
    log("wrote the grammar section of docs/benchmarks.md")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/spindle")
    ap.add_argument("--grammar-bin", default="build/bench_grammar")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--peer-dir", default=os.environ.get("PEER_DIR"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--hostile-only", action="store_true", help="only the hostile set (no docs section written)")
    ap.add_argument("--hostile-cases", default="", help="comma-separated case numbers (default: all)")
    ap.add_argument("--hostile-repeats", type=int, default=1, help="victim runs per hostile case (medians)")
    a = ap.parse_args()
    a.concurrency = [int(x) for x in a.concurrency.split(",")]
    a.variants = [v for v in a.variants.split(",") if v]
    if "llama.cpp-schema" in a.variants and not a.hostile_only:
        a.llama_server = peer_binary(a.peer_dir, "llama-server", log)
    raw = os.path.join(ROOT, "build", "bench", "grammar-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(raw, exist_ok=True)
    hmasks = hostile_masks(a, raw)
    if a.hostile_cases:
        keep = {int(x) for x in a.hostile_cases.split(",")}
        hmasks = [m for m in hmasks if m["case"] in keep]
    hostile = (hmasks, hostile_victims(a, raw, hmasks))
    if a.hostile_only:
        lines = hostile_lines(*hostile)
        print("\n".join(lines))
        kind = machine_kind()
        head = [f"## Hostile constraints beside a victim stream ({os.path.basename(a.model)}, CPU, {kind})", "",
                f"- Machine: {cpu_model()}, {a.threads} threads; spindle {git_commit()}; "
                f"{datetime.date.today().isoformat()}",
                f"- Command: `{' '.join(['python3', 'bench/bench_grammar.py'] + sys.argv[1:])}` "
                f"(raw results: `{os.path.relpath(raw, ROOT)}`)"]
        write_section(os.path.join(ROOT, "docs", "benchmarks.md"), f"grammar-hostile-on-{kind}",
                      "\n".join(head + lines[2:]))
        log(f"wrote the grammar-hostile-on-{kind} section of docs/benchmarks.md")
        return
    masks = mask_times(a, raw)
    points = []
    lengths = {}  # per concurrency: spindle's constrained answer lengths, for the free variant
    for rep in range(a.repeats):
        for k, c in enumerate(a.concurrency):
            order = a.variants if (rep + k) % 2 == 0 else a.variants[::-1]
            if "spindle-schema" in order and c not in lengths:  # it must run before the free one
                order = ["spindle-schema"] + [v for v in order if v != "spindle-schema"]
            for v in order:
                p = run_point(a, raw, v, c, rep, lengths.get(c))
                if v == "spindle-schema":
                    lengths[c] = p["lengths"]
                points.append(p)
    report(a, raw, masks, points, hostile)


if __name__ == "__main__":
    main()

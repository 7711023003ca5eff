#!/usr/bin/env python3
"""Serving benchmark, spindle against llama.cpp's llama-server, side by side in one sitting.

For each dataset (random, shared-prefix) and each concurrency C (1, 4, 16, 64) it starts each
server fresh on the same GGUF with the same threads and room for C sequences, waits for its
/health, runs build/loadgen (streaming /v1/completions, vLLM's metrics) with --max-concurrency
C and all requests at once, and stops it. The two servers alternate, and which goes first
flips at every point, so drift in the machine's speed hits both alike. Writes the "serve"
section of docs/benchmarks.md (tables and the spindle/llama.cpp ratios) and a plot of output
tokens/s and p99 TTFT against concurrency (docs/benchmarks_serve.png). Raw loadgen JSON,
tables and server logs stay in build/bench/serve-<time>/.

    python3 bench/bench_serve.py                        the full run, about 20 minutes on 2 cores
    python3 bench/bench_serve.py --concurrency 1,4 --num-prompts 4 --output-len 16 --out /tmp/x.md
    python3 bench/bench_serve.py --report-from build/bench/serve-<time>     rewrite the report only

llama-server is built by tools/peer_build.sh into --peer-dir when it is missing (15+ minutes).
"""
import argparse
import datetime
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_section import cpu_model, started_date, write_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS = ("spindle", "llama.cpp")
KV_BLOCK_TOKENS = 16  # spindle's default --block-size


def log(msg):
    print(f"bench-serve: {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0):
    """(status, body text); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, OSError):
        return 0, ""


def metric_values(url):
    """spindle's /metrics as {name (with its labels): value}; {} when it does not answer."""
    status, text = http_get(url + "/metrics")
    out = {}
    if status != 200:
        return out
    for line in text.splitlines():
        m = re.match(r"^(spindle_[\w]+(?:\{[^}]*\})?)\s+(\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class ServerProcess:
    """One server on a free loopback port, its output in log_path; stop() ends it."""

    def __init__(self, argv_for_port, log_path, timeout=180.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = argv_for_port(self.port)
        self.log = open(log_path, "w")
        self.log.write("$ " + shlex.join(self.argv) + "\n")
        self.log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited with {self.proc.returncode}; log: {log_path}")
            if http_get(self.url + "/health")[0] == 200:
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.argv[0]}: /health not 200 after {timeout:.0f} s; log: {log_path}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ---- the two servers' command lines ----------------------------------------------------

def spindle_argv(a, c, kv_mb):
    """spindle with room for c sequences of ctx tokens: --max-batch-size is llama-server's -np,
    --ctx-size its per-slot context, and the KV cache sized to hold them all."""
    ctx = a.input_len + a.output_len + 64
    return lambda port: [a.bin, "serve", "--model", a.model, "--host", "127.0.0.1", "--port", str(port),
                         "--threads", str(a.threads), "--max-batch-size", str(c), "--ctx-size", str(ctx),
                         "--kv-cache-mb", str(kv_mb), "--no-access-log"]


def llama_argv(a, c):
    """llama-server with continuous batching, c slots and c x (input + output + 64) of context
    (so each slot holds one request), CPU only, its other settings at their defaults."""
    ctx = c * (a.input_len + a.output_len + 64)
    return lambda port: [a.llama_server, "-m", a.model, "-t", str(a.threads), "-tb", str(a.threads), "-cb",
                         "-np", str(c), "-c", str(ctx), "-ngl", "0", "--host", "127.0.0.1", "--port", str(port)]


def spindle_kv_bytes_per_token(a, raw):
    """KV bytes per token of the model in spindle, from a probe server's block count (the
    cache default of 512 MiB over spindle_kv_blocks_total blocks of 16 tokens)."""
    probe_mb = 512
    srv = ServerProcess(lambda port: [a.bin, "serve", "--model", a.model, "--port", str(port), "--threads", "1",
                                      "--kv-cache-mb", str(probe_mb), "--no-access-log"],
                        os.path.join(raw, "spindle-probe.log"))
    try:
        _, text = http_get(srv.url + "/metrics")
    finally:
        srv.stop()
    for line in text.splitlines():
        if line.startswith("spindle_kv_blocks_total "):
            return probe_mb * 2**20 / (float(line.split()[1]) * KV_BLOCK_TOKENS)
    raise RuntimeError("spindle /metrics has no spindle_kv_blocks_total")


def peer_binary(peer_dir, name, say):
    """peer_dir/build/bin/name, built by tools/peer_build.sh first when it is missing (15+ minutes
    on 2 cores). No peer_dir: build/peer-<the set tools/peer_isa.sh picks for this CPU>."""
    if not peer_dir:
        isa = subprocess.run([os.path.join(ROOT, "tools", "peer_isa.sh")], capture_output=True, text=True,
                             check=True).stdout.strip()
        peer_dir = f"build/peer-{isa}"
    path = os.path.join(peer_dir, "build", "bin", name)
    if not os.access(path, os.X_OK):
        say(f"no {path}; building the peer (15+ minutes on 2 cores)")
        subprocess.run([os.path.join(ROOT, "tools", "peer_build.sh"), peer_dir], check=True)
    return path


def tool_versions(a):
    info = {"spindle_commit": git_commit(), "model": os.path.relpath(os.path.abspath(a.model), ROOT),
            "cpu": cpu_model(), "cpus": os.cpu_count(), "threads": a.threads}
    if a.llama_server:
        out = subprocess.run([a.llama_server, "--version"], capture_output=True, text=True).stderr
        line = next((l for l in out.splitlines() if l.startswith("version:")), "version: unknown")
        info["llama_version"] = line.split(":", 1)[1].strip()
    return info


def git_commit():
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True,
                              text=True, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ---- the run -------------------------------------------------------------------------------

def num_prompts(a, c):
    if a.num_prompts:
        return a.num_prompts
    return min(a.max_prompts, max(a.min_prompts, a.num_prompts_per_concurrency * c))


def run_point(a, raw, dataset, c, server, kv_mb):
    name = f"{dataset}-c{c}-{server.replace('.', '')}"
    argv_for_port = spindle_argv(a, c, kv_mb) if server == "spindle" else llama_argv(a, c)
    n = num_prompts(a, c)
    t0 = time.monotonic()
    try:
        srv = ServerProcess(argv_for_port, os.path.join(raw, name + ".log"))
    except RuntimeError as e:
        log(f"{name}: {e}")
        return {"error": str(e)}
    try:
        cmd = [a.loadgen, "--base-url", srv.url, "--dataset", dataset, "--input-len", str(a.input_len),
               "--output-len", str(a.output_len), "--num-prompts", str(n), "--num-warmups", str(a.num_warmups),
               "--request-rate", "inf", "--max-concurrency", str(c), "--seed", str(a.seed),
               "--result-json", os.path.join(raw, name + ".json")]
        if dataset == "shared-prefix":
            cmd[cmd.index("--input-len"):cmd.index("--input-len")] = ["--prefix-len", str(a.prefix_len)]
        with open(os.path.join(raw, name + ".txt"), "w") as out:
            out.write("$ " + shlex.join(cmd) + "\n")
            out.flush()
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
    finally:
        srv.stop()
    if proc.returncode != 0:
        msg = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        log(f"{name}: loadgen failed: {msg}")
        return {"error": msg}
    with open(os.path.join(raw, name + ".json")) as f:
        r = json.load(f)
    log(f"{name}: {r['completed']}/{n} done, {r['output_throughput']:.1f} output tok/s, "
        f"p99 TTFT {r['p99_ttft_ms']:.0f} ms ({time.monotonic() - t0:.0f} s)")
    return r


def start_run(a, kind):
    """A run's time stamp, raw folder (a.raw_dir, else build/bench/<kind>-<time>, created) and
    load average at the start (warned about when the machine is busy)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    raw = a.raw_dir or os.path.join(ROOT, "build", "bench", f"{kind}-{stamp}")
    os.makedirs(raw, exist_ok=True)
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1) / 2:
        log(f"warning: load average {load:.2f} on {os.cpu_count()} CPUs: the machine is busy, results will be noisy")
    return stamp, raw, load


def do_run(a):
    stamp, raw, load = start_run(a, "serve")
    servers = [s for s in a.servers.split(",") if s]
    kv_per_token = spindle_kv_bytes_per_token(a, raw) if "spindle" in servers else 0
    meta = {"args": vars(a), "command": a.command, "started": stamp, "load_before": load,
            "servers": servers, **tool_versions(a)}
    points = []
    k = 0
    for dataset in a.datasets.split(","):
        for c in [int(x) for x in a.concurrency.split(",")]:
            # room for c sequences of the context, plus an eighth for partly used blocks
            kv_mb = max(64, int(kv_per_token * c * (a.input_len + a.output_len + 64) * 1.125 / 2**20) + 1)
            order = servers if k % 2 == 0 else servers[::-1]
            k += 1
            for server in order:
                r = run_point(a, raw, dataset, c, server, kv_mb)
                points.append({"dataset": dataset, "concurrency": c, "server": server,
                               "num_prompts": num_prompts(a, c), **({"error": r["error"]} if "error" in r else {}),
                               "result": None if "error" in r else os.path.basename(r_path(raw, dataset, c, server))})
    meta["points"] = points
    meta["load_after"] = os.getloadavg()[0]
    with open(os.path.join(raw, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    log(f"raw results in {os.path.relpath(raw, ROOT)}")
    return raw


def r_path(raw, dataset, c, server):
    return os.path.join(raw, f"{dataset}-c{c}-{server.replace('.', '')}.json")


# ---- the report ----------------------------------------------------------------------------

def load_points(raw):
    with open(os.path.join(raw, "meta.json")) as f:
        meta = json.load(f)
    for p in meta["points"]:
        p["r"] = None
        if p.get("result"):
            with open(os.path.join(raw, p["result"])) as f:
                p["r"] = json.load(f)
    return meta


def ratio(x, y):
    return f"{x / y:.2f}x" if x and y else "-"


def dataset_table(meta, dataset):
    pts = [p for p in meta["points"] if p["dataset"] == dataset]
    concs = sorted({p["concurrency"] for p in pts})
    lines = ["| concurrency | server | completed / failed | output tok/s | TTFT median (ms) | TTFT p99 (ms) | "
             "TPOT median (ms) | ITL median (ms) | spindle / llama.cpp output tok/s | spindle / llama.cpp p99 TTFT |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in concs:
        by = {p["server"]: p for p in pts if p["concurrency"] == c}
        sp, ll = (by.get(s, {}).get("r") for s in SERVERS)
        for s in SERVERS:
            p = by.get(s)
            if not p:
                continue
            r = p["r"]
            ratios = "| | |"
            if s == "spindle" and sp and ll:
                ratios = f"| {ratio(sp['output_throughput'], ll['output_throughput'])} | " \
                         f"{ratio(sp['p99_ttft_ms'], ll['p99_ttft_ms'])} |"
            if r is None:
                lines.append(f"| {c} | {s} | error: {p.get('error', '?')[:80]} |" + " |" * 7)
                continue
            lines.append(f"| {c} | {s} | {r['completed']} / {r['failed']} | {r['output_throughput']:.1f} | "
                         f"{r['median_ttft_ms']:.0f} | {r['p99_ttft_ms']:.0f} | {r['median_tpot_ms']:.1f} | "
                         f"{r['median_itl_ms']:.1f} {ratios}")
    return lines


def plot(meta, raw, png):
    """Two panels against concurrency (log x): output tokens/s and p99 TTFT, a line per server
    and dataset. Needs gnuplot (Debian gnuplot-nox); skipped with a line when absent."""
    series = []
    for dataset in meta["args"]["datasets"].split(","):
        for s in meta["servers"]:
            rows = sorted((p["concurrency"], p["r"]["output_throughput"], p["r"]["p99_ttft_ms"])
                          for p in meta["points"] if p["dataset"] == dataset and p["server"] == s and p["r"])
            if rows:
                series.append((f"{s}, {dataset}", s, dataset, rows))
    if not series:
        return False
    dat = os.path.join(raw, "serve.dat")
    with open(dat, "w") as f:
        for title, _, _, rows in series:
            f.write(f"# {title}\n")
            f.writelines(f"{c} {tok:.3f} {ttft:.3f}\n" for c, tok, ttft in rows)
            f.write("\n\n")  # one gnuplot index per series
    colors = {"spindle": "#1f77b4", "llama.cpp": "#d62728"}
    datasets = meta["args"]["datasets"].split(",")

    def plot_cmd(col):
        return ", ".join(
            f"'{dat}' index {i} using 1:{col} with linespoints lw 2 pt 7 dt {1 + datasets.index(ds)} "
            f"lc rgb '{colors.get(s, 'black')}' title '{t}'" for i, (t, s, ds, _) in enumerate(series))

    concs = sorted({p["concurrency"] for p in meta["points"]})
    script = f"""set terminal pngcairo size 1200,460 font 'sans,10' noenhanced
set output '{png}'
set multiplot layout 1,2 title 'spindle vs llama-server: {os.path.basename(meta['model'])}, {meta['threads']} threads, \
input {meta['args']['input_len']} / output {meta['args']['output_len']} tokens'
set logscale x 2
set xtics ({', '.join(str(c) for c in concs)})
set xrange [{concs[0] / 1.3}:{concs[-1] * 1.3}]
set grid
set key below horizontal maxrows 2
set bmargin 7
set xlabel 'concurrency'
set ylabel 'output tokens/s'
set yrange [0:*]
set title 'output throughput (higher is better)'
plot {plot_cmd(2)}
set ylabel 'p99 TTFT (ms)'
set logscale y
set yrange [*:*]
set title 'p99 time to first token (lower is better)'
plot {plot_cmd(3)}
unset multiplot
"""
    with open(os.path.join(raw, "serve.gp"), "w") as f:
        f.write(script)
    try:
        subprocess.run(["gnuplot", os.path.join(raw, "serve.gp")], check=True, capture_output=True, text=True)
    except FileNotFoundError:
        log("no gnuplot (Debian gnuplot-nox; make setup installs it): no plot")
        return False
    except subprocess.CalledProcessError as e:
        log(f"gnuplot failed: {e.stderr.strip()}")
        return False
    return True


def do_report(a, raw):
    meta = load_points(raw)
    args = meta["args"]
    png = a.plot or os.path.join(ROOT, "docs", "benchmarks_serve.png")
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    have_plot = plot(meta, raw, os.path.abspath(png))
    lines = [f"## Serving: spindle vs llama-server ({os.path.basename(meta['model'])}, CPU)", ""]
    body = [
        f"- Date: {started_date(meta.get('started'))}",
        f"- Machine: {meta['cpu']}, {meta['cpus']} logical CPUs; load average {meta['load_before']:.2f} before, "
        f"{meta['load_after']:.2f} after",
        f"- spindle: commit `{meta['spindle_commit']}`; llama.cpp: `{meta.get('llama_version', 'not run')}` "
        "(vendor/llama.cpp of llama-cpp-python 0.3.36, built by tools/peer_build.sh)",
        f"- Command: `{meta['command']}` (raw results: `{os.path.relpath(raw, ROOT)}`)",
        "",
        f"Both servers on the same GGUF with {meta['threads']} threads, started fresh for every point, with room "
        f"for C sequences of input + output + 64 tokens (spindle `--max-batch-size C --ctx-size "
        f"{args['input_len'] + args['output_len'] + 64}` and a KV cache that holds them; llama-server `-cb -np C "
        f"-c C*{args['input_len'] + args['output_len'] + 64} -ngl 0`, its other settings at their defaults). "
        f"`build/loadgen` (vLLM's `bench serve` metrics) streams `/v1/completions`, {args['input_len']} prompt "
        f"tokens as each server's /tokenize counts them and {args['output_len']} output tokens (`ignore_eos`, "
        f"greedy), all requests at once with at most C in flight, {args['num_warmups']} warm-up request(s) first; "
        f"{describe_prompts(args)}. The servers alternate, the first one flipping at every point. "
        "TTFT: send to the first chunk with text; TPOT: (E2E - TTFT) / (output tokens - 1); ITL: gaps between "
        "chunks; percentiles interpolated as numpy's. Ratios above 1 mean spindle has more throughput, or a "
        "longer p99 TTFT.",
    ]
    if have_plot:
        rel = os.path.relpath(os.path.abspath(png), os.path.dirname(os.path.abspath(a.out)))
        body += ["", f"![output tokens/s and p99 TTFT against concurrency]({rel})"]
    for dataset in args["datasets"].split(","):
        title = {"random": "Random prompts", "shared-prefix": f"Shared prefix ({args['prefix_len']} of "
                 f"{args['input_len']} prompt tokens the same in every request)"}.get(dataset, dataset)
        body += ["", f"### {title}", ""] + dataset_table(meta, dataset)
    text = "\n".join(lines + body) + "\n"
    write_section(a.out, "serve", text)
    print(text)


def describe_prompts(args):
    if args["num_prompts"]:
        return f"{args['num_prompts']} requests per point"
    return (f"max({args['min_prompts']}, {args['num_prompts_per_concurrency']} x C) requests per point, "
            f"at most {args['max_prompts']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/spindle", help="spindle binary")
    ap.add_argument("--loadgen", default="build/loadgen")
    ap.add_argument("--peer-dir", default=os.environ.get("PEER_DIR"),
                    help="llama.cpp build (tools/peer_build.sh makes it when missing)")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--servers", default="spindle,llama.cpp", help="which servers, comma-separated")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--datasets", default="random,shared-prefix")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--prefix-len", type=int, default=192)
    ap.add_argument("--num-prompts-per-concurrency", type=int, default=2)
    ap.add_argument("--min-prompts", type=int, default=4)
    ap.add_argument("--max-prompts", type=int, default=64)
    ap.add_argument("--num-prompts", type=int, default=0, help="the same number at every point (overrides the above)")
    ap.add_argument("--num-warmups", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/benchmarks.md", help="report whose serve section is rewritten")
    ap.add_argument("--plot", default=None, help="PNG (default docs/benchmarks_serve.png)")
    ap.add_argument("--raw-dir", default=None, help="default build/bench/serve-<time>")
    ap.add_argument("--report-from", default=None, metavar="RAW_DIR", help="only rewrite the report from a raw dir")
    a = ap.parse_args()
    a.command = "python3 bench/bench_serve.py" + "".join(" " + shlex.quote(x) for x in sys.argv[1:])
    if a.report_from:
        do_report(a, a.report_from)
        return
    unknown = set(a.servers.split(",")) - set(SERVERS)
    if unknown:
        ap.error(f"--servers: unknown {', '.join(sorted(unknown))} (known: {', '.join(SERVERS)})")
    for path, what in ((a.model, "model (make setup fetches it)"), (a.loadgen, "loadgen (make build/loadgen)")):
        if not os.path.exists(path):
            sys.exit(f"bench-serve: {path}: {what} not found")
    if "spindle" in a.servers and not os.path.exists(a.bin):
        sys.exit(f"bench-serve: {a.bin}: spindle not built (make all)")
    a.llama_server = peer_binary(a.peer_dir, "llama-server", log) if "llama.cpp" in a.servers else None
    raw = do_run(a)
    do_report(a, raw)


if __name__ == "__main__":
    main()

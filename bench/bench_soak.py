#!/usr/bin/env python3
"""Soak benchmark: normal clients for the whole run, and each attack of the front-end
hardening issue in turn beside them. Reports the normal clients' latency per phase (p50,
p99, and p99 against the quiet baseline: goal within 2x), the server's RSS over the run
(goal: flat), and every normal request that was accepted but not answered in full (goal:
none). Writes the "soak" section of docs/benchmarks.md; raw samples stay in
build/bench/soak-<time>/.

    python3 bench/bench_soak.py                          10 minutes (make bench-soak)
    python3 bench/bench_soak.py --duration 120 --out /tmp/soak.md     a short run

Phases, of equal length: baseline (normal clients alone), then with each attack:
  idle       4,100 TCP connections that send nothing (from 127.0.0.2)
  trickle    300 connections sending a header byte every 2 s (from 127.0.0.3)
  large      one request of 64 sequences without max_tokens, again as each ends
  framing    the smuggling and malformed-framing byte strings, over and over
  tokenize   four clients posting 1 MB bodies to /tokenize
  hangups    streams opened and dropped after their first token
The server runs with --admin-port (probes stay answerable), --max-connections-per-client
2048 (one address cannot take every slot) and otherwise its defaults; the attackers come
from other loopback addresses than the normal clients, as they would from other hosts.
"""
import argparse
import datetime
import http.client
import json
import multiprocessing
import os
import queue
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_section import cpu_model, provenance, write_section  # noqa: E402

PHASES = ["baseline", "idle", "trickle", "large", "framing", "tokenize", "hangups"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=120.0, source="127.0.0.1", parse=True):
    """(status, parsed body or None, complete) of one request; parse=False only reads it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("POST", path, body=json.dumps(body) if not isinstance(body, bytes) else body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        if not parse:
            return resp.status, None, True
        try:
            return resp.status, json.loads(raw), True
        except ValueError:
            return resp.status, None, False
    finally:
        conn.close()


def run_in_child(attack, until):
    """attack(until) in a forked process; its note, or what went wrong."""
    results = multiprocessing.Queue()

    def child():
        start = time.time()
        try:
            note = attack(until)
        except Exception as e:  # noqa: BLE001 - reported in the table
            note = f"attack failed: {e!r}"
        t = os.times()  # the attacker shares the machine's cores with the server
        results.put(f"{note}; the attacker used {t.user + t.system:.0f} CPU-s in {time.time() - start:.0f} s")

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    try:
        note = results.get(timeout=max(1.0, until - time.time()) + 120)
    except queue.Empty:
        note = "attack did not finish"
    proc.join(10)
    if proc.is_alive():
        proc.kill()
    return note


class Soak:
    def __init__(self, args):
        self.args = args
        self.port, self.admin = free_port(), free_port()
        self.stop_all = threading.Event()
        self.phase = "starting"
        self.samples = []  # (phase, latency s, status, complete)
        self.lock = threading.Lock()
        self.rss = []  # (t, MiB)

    # ---- the server ----
    def start(self):
        self.log = open(os.path.join(self.args.raw, "server.log"), "w")
        argv = [self.args.bin, "serve", "--model", self.args.model, "--port", str(self.port), "--admin-port",
                str(self.admin), "--max-connections-per-client", "2048", "--no-access-log"]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.admin, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit("soak: the server did not become healthy")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9

    def watch_rss(self):
        t0 = time.time()
        while not self.stop_all.is_set():
            try:
                with open(f"/proc/{self.proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            self.rss.append((time.time() - t0, int(line.split()[1]) / 1024))
            except OSError:
                return
            self.stop_all.wait(5)

    # ---- normal clients: short completions, one after another ----
    def normal_client(self, seed):
        rnd = random.Random(seed)
        words = "the a cat dog sun tree river stone light bird house road".split()
        while not self.stop_all.is_set():
            prompt = " ".join(rnd.choice(words) for _ in range(rnd.randint(8, 40)))
            phase = self.phase
            t0 = time.monotonic()
            try:
                status, body, complete = post(self.port, "/v1/completions",
                                              {"prompt": prompt, "max_tokens": 16, "temperature": 0})
                complete = complete and status == 200 and body["usage"]["completion_tokens"] >= 1
            except (OSError, http.client.HTTPException) as e:
                status, complete = f"{type(e).__name__}", False
            with self.lock:
                self.samples.append((phase, time.monotonic() - t0, status, complete))

    # ---- attacks: each runs until its phase ends ----
    def attack_idle(self, until):
        socks = []
        for _ in range(4100):
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=("127.0.0.2", 0))
                socks.append(s)
            except OSError:
                break
        while time.time() < until and not self.stop_all.is_set():
            time.sleep(0.5)
        for s in socks:
            s.close()
        return f"{len(socks)} connections opened"

    def attack_trickle(self, until):
        socks = []
        for _ in range(300):
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=("127.0.0.3", 0))
                socks.append(s)
            except OSError:
                break
        header = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nX-Slow: " + b"a" * 10000
        sent, closed = 0, 0
        while time.time() < until and not self.stop_all.is_set() and socks:
            for s in list(socks):
                try:
                    s.send(header[sent % len(header):sent % len(header) + 1])
                except OSError:
                    socks.remove(s)
                    closed += 1
            sent += 1
            time.sleep(2)
        for s in socks:
            s.close()
        return f"300 connections, {closed} closed by the server"

    def attack_large(self, until):
        done = 0
        while time.time() < until and not self.stop_all.is_set():
            try:  # given up (and so cancelled) at the phase's end when still running
                status, _, _ = post(self.port, "/v1/completions",
                                    {"prompt": ["Once upon a time"] * 4, "n": 16, "temperature": 1.0},
                                    timeout=max(1.0, until - time.time()), source="127.0.0.4")
                done += status == 200
            except (OSError, http.client.HTTPException):
                pass
        return f"requests of 64 sequences without max_tokens, one at a time ({done} completed in the phase)"

    def attack_framing(self, until):
        cases = [
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"ffffffffffffffff\r\nx\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        ]
        n = 0
        while time.time() < until and not self.stop_all.is_set():
            for case in cases:
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=2,
                                                  source_address=("127.0.0.5", 0)) as s:
                        s.sendall(case)
                        s.recv(4096)
                except OSError:
                    pass
                n += 1
        return f"{n} malformed requests"

    def attack_tokenize(self, until):
        text = ("The quick brown fox jumps over the lazy dog. " * 22222)[:1_000_000]
        body = json.dumps({"content": text}).encode()
        count = [0]

        def client():
            while time.time() < until and not self.stop_all.is_set():
                status, _, _ = post(self.port, "/tokenize", body, source="127.0.0.6", parse=False)
                count[0] += status == 200

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return f"{count[0]} bodies of 1 MB tokenized"

    def attack_hangups(self, until):
        n = 0
        while time.time() < until and not self.stop_all.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30, source_address=("127.0.0.7", 0))
                conn.request("POST", "/v1/completions", body=json.dumps(
                    {"prompt": "Once upon a time", "max_tokens": 200, "stream": True}),
                    headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.fp.readline()  # the first chunk of events, then hang up
                resp.close()
                conn.close()
                n += 1
            except (OSError, http.client.HTTPException):
                pass
        return f"{n} streams dropped after their first token"

    def run(self):
        import resource
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # 4,100 sockets here, as many there
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self.start()
        threading.Thread(target=self.watch_rss, daemon=True).start()
        clients = [threading.Thread(target=self.normal_client, args=(i,)) for i in range(self.args.clients)]
        for c in clients:
            c.start()
        per_phase = self.args.duration / len(self.args.phases)
        notes = {}
        self.phase_ends = {}
        t_start = time.time()
        for phase in self.args.phases:
            self.phase = phase
            until = time.time() + per_phase
            print(f"soak: phase {phase} for {per_phase:.0f} s", file=sys.stderr, flush=True)
            if phase == "baseline":
                time.sleep(per_phase)
                notes[phase] = "normal clients alone"
            else:
                # in a process of its own, so the attacker's Python never holds up the
                # normal clients' (their latency is the server's, not this script's GIL)
                notes[phase] = run_in_child(getattr(self, f"attack_{phase}"), until)
                time.sleep(max(0.0, until - time.time()))
            self.phase_ends[phase] = time.time() - t_start
        self.phase = "done"
        self.stop_all.set()
        for c in clients:
            c.join(timeout=180)
        rc = self.stop()
        return notes, rc


def report(soak, notes, rc, args):
    phases = args.phases
    samples = [s for s in soak.samples if s[0] in phases]
    with open(os.path.join(args.raw, "samples.json"), "w") as f:
        json.dump({"samples": samples, "rss": soak.rss, "notes": notes}, f)
    lines = [
        "## Soak: normal clients beside each attack (front-end hardening)",
        "",
        "Generated by `bench/bench_soak.py`. To reproduce: `make bench-soak`.",
        "",
        provenance(args.command).rstrip(),
        f"- Machine: {cpu_model()}; model `{os.path.basename(args.model)}`; {args.clients} normal clients "
        "sending completions of 16 tokens back to back; the server with `--admin-port`, "
        "`--max-connections-per-client 2048`, defaults otherwise",
        "",
        "| phase | attack | normal requests | p50 s | p99 s | p99 / baseline | failed | RSS at its end (MiB) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    base_p99 = None
    total_failed = 0
    for phase in phases:
        end = soak.phase_ends.get(phase)
        at_end = [m for t, m in soak.rss if end is not None and t <= end]
        rss_end = f"{at_end[-1]:.0f}" if at_end else "–"
        lat = sorted(s[1] for s in samples if s[0] == phase and s[3])
        failed = sum(1 for s in samples if s[0] == phase and not s[3])
        total_failed += failed
        if not lat:
            lines.append(f"| {phase} | {notes.get(phase, '')} | 0 | – | – | – | {failed} | {rss_end} |")
            continue
        p50 = statistics.median(lat)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        if phase == "baseline":
            base_p99 = p99
        ratio = f"{p99 / base_p99:.2f}" if base_p99 else "–"
        lines.append(f"| {phase} | {notes.get(phase, '')} | {len(lat) + failed} | {p50:.3f} | {p99:.3f} | {ratio} "
                     f"| {failed} | {rss_end} |")
    rss = [m for _, m in soak.rss]
    lines += [
        "",
        f"- Failed normal requests (accepted but not answered in full, or refused): {total_failed}; "
        f"server exit status after SIGTERM: {rc}",
        f"- RSS (MiB, every 5 s): start {rss[0]:.0f}, max {max(rss):.0f}, end {rss[-1]:.0f}" if rss else "- RSS: –",
        "",
    ]
    write_section(args.out, "soak", "\n".join(lines))
    print("\n".join(lines))
    return total_failed


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(root, "build", "spindle"))
    p.add_argument("--model", default=os.path.join(root, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--duration", type=float, default=600.0, help="seconds in all (default 600)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--phases", default=",".join(PHASES),
                   help="comma-separated, baseline first (default: all)")
    p.add_argument("--out", default=os.path.join(root, "docs", "benchmarks.md"))
    args = p.parse_args()
    args.phases = args.phases.split(",")
    if args.phases[0] != "baseline" or any(ph not in PHASES for ph in args.phases):
        sys.exit(f"soak: --phases must start with baseline and name only {', '.join(PHASES)}")
    args.command = "python3 bench/bench_soak.py " + " ".join(sys.argv[1:])
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    args.raw = os.path.join(root, "build", "bench", f"soak-{stamp}")
    os.makedirs(args.raw, exist_ok=True)
    soak = Soak(args)
    notes, rc = soak.run()
    failed = report(soak, notes, rc, args)
    sys.exit(1 if failed or rc != 0 else 0)


if __name__ == "__main__":
    main()

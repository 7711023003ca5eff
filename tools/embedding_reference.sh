#!/usr/bin/env bash
# embedding_reference.sh: what llama.cpp's own server answers on /v1/embeddings for a few
# short prompts, with mean and with last pooling, written to tests/data/ for
# tests/integration/test_embeddings.py (cosine distance to spindle's vectors below 1e-3).
#
#   tools/embedding_reference.sh [PEER_DIR]     (default: $PEER_DIR, else build/peer-avx512)
#
# PEER_DIR is a llama.cpp build from tools/peer_build.sh (its build/bin/llama-server). Per
# model and pooling it starts `llama-server --embeddings --pooling P` on a free loopback
# port (2 threads, flash attention off, as tests/data's other references), sends each
# prompt alone (so usage.prompt_tokens is that prompt's), and writes
#   tests/data/embeddings_smollm2.json     models/SmolLM2-135M-Instruct.Q4_1.gguf
#   tests/data/embeddings_stories260k.json $SPINDLE_TESTDATA/models/stories260K.gguf
# with every value rounded to 6 decimals. Not run by the tests; nothing of the peer is
# committed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEER_DIR=${1:-${PEER_DIR:-$ROOT/build/peer-avx512}}
TESTDATA=${SPINDLE_TESTDATA:-$ROOT/../shared/testdata}
SERVER=$(find "$PEER_DIR" -path '*/bin/llama-server' -type f | head -n 1)
if [ -z "$SERVER" ]; then
    echo "embedding_reference.sh: no llama-server under $PEER_DIR (build it with tools/peer_build.sh)" >&2
    exit 1
fi

exec python3 - "$SERVER" "$ROOT" "$TESTDATA" <<'EOF'
import hashlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

server, root, testdata = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
MODELS = [
    ("smollm2", root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("stories260k", testdata / "models" / "stories260K.gguf"),
]
PROMPTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.",
]
POOLINGS = ["mean", "last"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def embed(model, pooling):
    port = free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=str(pathlib.Path(server).parent))
    args = [server, "-m", str(model), "--embeddings", "--pooling", pooling, "--host", "127.0.0.1", "--port",
            str(port), "-t", "2", "-tb", "2", "-fa", "off", "-c", "512", "-np", "1", "--no-webui"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"llama-server did not start for {model} ({pooling})")
            time.sleep(0.2)
        cases = []
        for prompt in PROMPTS:
            r = post(f"http://127.0.0.1:{port}/v1/embeddings", {"input": prompt, "encoding_format": "float"})
            vec = [round(v, 6) for v in r["data"][0]["embedding"]]
            cases.append({"prompt": prompt, "prompt_tokens": r["usage"]["prompt_tokens"], "embedding": vec})
        return cases
    finally:
        proc.terminate()
        proc.wait(30)


commit = "unknown"
isa_file = pathlib.Path(server).parents[2] / "isa"  # tools/peer_build.sh writes PEER_DIR/isa
isa = isa_file.read_text().strip() if isa_file.exists() else "unknown"
for header in pathlib.Path(server).parents[1].rglob("llama-version.h"):
    for line in header.read_text().splitlines():
        if line.startswith("#define LLAMA_COMMIT"):
            commit = line.split()[-1].strip('"')

for name, model in MODELS:
    if not model.exists():
        print(f"embedding_reference.sh: {model} absent: {name} skipped", file=sys.stderr)
        continue
    out = {
        "model": model.name,
        "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
        "generator": "llama.cpp llama-server --embeddings --pooling P -fa off -t 2 (tools/embedding_reference.sh)",
        "llama_cpp_commit": commit,
        "kernel_set": isa,
        "normalize": "L2 (llama-server's default embd_normalize 2)",
        "pooling": {p: embed(model, p) for p in POOLINGS},
    }
    path = root / "tests" / "data" / f"embeddings_{name}.json"
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path.relative_to(root)} ({path.stat().st_size} bytes)")
EOF

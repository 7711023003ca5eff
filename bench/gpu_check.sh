#!/usr/bin/env bash
# gpu_check.sh: the one prepared script for a GPU machine (no network needed). In order:
#   1. builds spindle, mkmodel, gpu_rates and the GPU tests unless a carried build has them;
#   2. starts writing the synthetic models with build/mkmodel in the background (the 16 GB
#      llama-8b BF16 is the long pole, a minute or two) into $MODELS;
#   3. runs the CUDA backend's tests against the CPU backend (build/tests/gpu/test_cuda_*);
#   4. measures the ceilings with build/gpu_rates: device-to-device copy bandwidth (a 2 GiB
#      cudaMemcpyAsync) and cuBLAS BF16 GEMM rates at M = 2048 tokens;
#   5. once the models are written, times the GPU with `spindle bench --device cuda`:
#      smollm2-135m Q4_1 and BF16, llama-1b BF16: pp512 + tg128; llama-8b BF16: pp2048 +
#      tg128, then tg32 of 64 sequences at once (--batch 64);
#   6. prints the figures against their goals, a short markdown table, last.
# The figures (report_awk below has the formulae):
#   decode % of roofline = tokens/s x bytes read per token / copy bandwidth (read + write);
#     bytes read per token = every weight a decode step reads, as the GPU holds it (BF16 as
#     BF16; Q4_1 as the 20-byte blocks the fused GEMV reads; the untied embedding only one
#     row) + the F16 KV cache read, at the test's mean position;
#   batch ratio = median step time at batch 64 / median step time at batch 1 (llama-8b);
#   prefill % of GEMM = matmul FLOP/s (2 x matrix weights x tokens; attention not counted,
#     shown beside it) / the cuBLAS rate of the same matmuls (each shape at its measured rate).
# Everything it writes goes under $OUT (or build/gpu_check when OUT is unset), in at most six
# files (the device tool brings back eight): gpu_check.log, gpu_tests.txt, gpu_rates.json,
# bench.jsonl (every bench line, tagged with model, type and the GPU's weight MiB),
# summary.md, and gpu_tests_sync.txt when a test binary met a device fault (its rerun with
# SP_CUDA_SYNC_OPS=1, which names the kernel). The models (19 GB) go to $MODELS instead, default build/gpu_check_models, and
# stay there, so a second run on the same machine skips writing them.
#
#   bench/gpu_check.sh                  the whole check: about 4 minutes on an H200 with a
#                                       carried build, 1-2 more to build
#   bench/gpu_check.sh --report DIR     only the figures and the table, from DIR/gpu_rates.json
#                                       and DIR/bench.jsonl (a check of the arithmetic)
#   SKIP_TESTS=1 bench/gpu_check.sh     leaves out step 3
#
# Every step is held to what is left of DEADLINE seconds (default 450) from the start: a
# model still being written 90 s before it is stopped and its benches skipped, so the
# tables come out within 8 minutes even when something hangs.
#
# Carry: run tools/gpu_bundle.sh here first and carry build/gpu_bundle (bin: the
# binaries, which this script then runs; lib: the libraries the device image lacks, put
# on LD_LIBRARY_PATH). cuBLAS comes from the device's own toolkit (the binaries' rpath is
# /usr/local/cuda/lib64). Building on the device needs those libraries' headers, which
# its image does not have.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# the binaries: a carried bundle (tools/gpu_bundle.sh) when there is one, else build/
BIN=build TESTS=build/tests/gpu
if [ -d build/gpu_bundle/bin ]; then
    BIN=build/gpu_bundle/bin TESTS=build/gpu_bundle/bin
    export LD_LIBRARY_PATH=$PWD/build/gpu_bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export SPINDLE_MKMODEL=$BIN/mkmodel # what the GPU tests write their synthetic models with
if [ -d build/gpu_bundle/testdata ] && [ -z "${SPINDLE_TESTDATA:-}" ]; then
    export SPINDLE_TESTDATA=$PWD/build/gpu_bundle/testdata # stories260K, carried
fi

# ---- the figures: an awk program over bench.jsonl, reading gpu_rates.json first ----
report_awk() {
    cat <<'AWK'
function num(line, key,    s) {
    if (!match(line, "\"" key "\":-?[0-9][0-9.eE+-]*")) return ""
    s = substr(line, RSTART, RLENGTH)
    sub(/^"[^"]*":/, "", s)
    return s + 0
}
function str(line, key,    s) {
    if (!match(line, "\"" key "\":\"[^\"]*\"")) return ""
    s = substr(line, RSTART, RLENGTH)
    sub(/^"[^"]*":"/, "", s)
    sub(/"$/, "", s)
    return s
}
function have(x) { return x != "" }
# The hyperparameters of a shape (tools/mkmodel.c's table) into globals.
function shape(name,    f) {
    if (!(name in SHAPE)) return 0
    split(SHAPE[name], f, " ")
    D = f[1]; L = f[2]; H = f[3]; HK = f[4]; FF = f[5]; V = f[6]; TIED = f[7]; ROPE = f[8]
    DH = D / H; QW = H * DH; KVW = HK * DH
    MAT_ATTN = L * (D * QW + 2 * D * KVW + QW * D) # wq, wk, wv, wo
    MAT_GU = L * 2 * D * FF                        # w_gate, w_up
    MAT_DOWN = L * FF * D                          # w_down
    return 1
}
# Bytes per matrix element as a decode step reads it on the GPU: BF16 and F16 as stored; the
# block formats as their blocks (the fused GEMV reads those, not the F16 copy).
function elem_bytes(type) {
    if (type == "BF16" || type == "F16") return 2
    if (type == "F32") return 4
    if (type == "Q8_0") return 34 / 32
    if (type == "Q4_0") return 18 / 32
    if (type == "Q4_1") return 20 / 32
    return ""
}
# Weight bytes one decode step reads: every layer matrix, the output matrix (the embedding
# when tied), one embedding row, the F32 norms and RoPE factors.
function weight_bytes(model, type,    eb) {
    eb = elem_bytes(type)
    if (!shape(model) || !have(eb)) return ""
    return (MAT_ATTN + MAT_GU + MAT_DOWN + V * D + D) * eb + ((2 * L + 1) * D + (ROPE ? DH / 2 : 0)) * 4
}
# KV cache bytes read per position (K and V, F16, every layer).
function kv_bytes(model) { return shape(model) ? 2 * L * KVW * 2 : "" }
function fmt(x, f) { return have(x) ? sprintf(f, x) : "n/a" }
function met(ok, known) { return known ? (ok ? "yes" : "**no**") : "?" }
BEGIN {
    SHAPE["smollm2-135m"] = "576 30 9 3 1536 49152 1 0"
    SHAPE["llama-1b"] = "2048 16 32 8 8192 128256 1 1"
    SHAPE["llama-8b"] = "4096 32 32 8 14336 128256 0 1"
    PROMPT = 16 # cmd_bench.c BENCH_PROMPT: the tokens of each sequence before a batched tg
    while ((getline line < rates) > 0) R = R line
    BW = num(R, "copy_gbps_read_write"); BW_READ = num(R, "copy_gbps_read")
    R_ATTN = num(R, "gemm_2048x4096x4096_tflops")
    R_GU = num(R, "gemm_2048x14336x4096_tflops")
    R_DOWN = num(R, "gemm_2048x4096x14336_tflops")
}
{
    model = str($0, "model"); type = str($0, "type"); test = str($0, "test")
    if (model == "" || test == "") next
    k = model " " type
    if (!(k in SEEN)) { SEEN[k] = 1; ORDER[++n_runs] = k }
    if (have(num($0, "gpu_weight_mib"))) MIB[k] = num($0, "gpu_weight_mib")
    TPS[k " " test] = num($0, "tokens_per_s_median")
    STEP[k " " test] = num($0, "step_ms_median")
    if (test ~ /^pp/) PP[k] = test
    else if (test ~ /^tg[0-9]+$/) TG[k] = test
    else if (test ~ /^tg[0-9]+_b[0-9]+$/) BATCHED[++n_batched] = k "|" test
}
# Decode: tokens/s against bandwidth / bytes read per token; sets ROOF and PCT.
function decode(k, test,    parts, n, b, tps, wb, pos) {
    ROOF = ""; PCT = ""; BYTES = ""
    split(k, parts, " ")
    tps = TPS[k " " test]
    if (!match(test, /^tg[0-9]+/)) return
    n = substr(test, 3, RLENGTH - 2) + 0
    b = match(test, /_b[0-9]+$/) ? substr(test, RSTART + 2) + 0 : 1
    wb = weight_bytes(parts[1], parts[2])
    if (!have(wb)) return
    pos = (b > 1 ? PROMPT : 0) + (n + 1) / 2 # mean KV positions one token reads
    BYTES = (wb + b * kv_bytes(parts[1]) * pos) / b # per token; a step reads the weights once
    if (have(BW)) ROOF = BW * 1e9 / BYTES
    if (have(tps) && have(ROOF)) PCT = 100 * tps / ROOF
}
# Prefill: FLOP/s of the matmuls against cuBLAS's rate for the same matmuls; sets the globals.
function prefill(k, test,    parts, t, tps, secs, ref_s) {
    PF_TFLOPS = ""; PF_ALL = ""; PF_REF = ""; PF_PCT = ""
    split(k, parts, " ")
    tps = TPS[k " " test]
    if (!have(tps) || tps <= 0 || !shape(parts[1])) return
    t = substr(test, 3) + 0
    secs = t / tps
    FLOP_MM = 2 * t * (MAT_ATTN + MAT_GU + MAT_DOWN) + 2 * V * D # + the one row of logits
    FLOP_ATT = L * 2 * QW * t * (t + 1)                           # causal QK^T and PV
    PF_TFLOPS = FLOP_MM / secs / 1e12
    PF_ALL = (FLOP_MM + FLOP_ATT) / secs / 1e12
    if (have(R_ATTN) && have(R_GU) && have(R_DOWN)) {
        ref_s = 2 * t * (MAT_ATTN / R_ATTN + MAT_GU / R_GU + MAT_DOWN / R_DOWN) / 1e12
        PF_REF = 2 * t * (MAT_ATTN + MAT_GU + MAT_DOWN) / ref_s / 1e12
        PF_PCT = 100 * PF_TFLOPS / PF_REF
    }
}
END {
    print ""
    print "### gpu_check: every run"
    print ""
    print "| model | type | GPU weights MiB (device) | decode bytes/token MiB (computed) | pp t/s | tg t/s | tg step ms | roofline t/s | % of roofline |"
    print "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    for (i = 1; i <= n_runs; i++) {
        k = ORDER[i]; split(k, parts, " "); pp = PP[k]; tg = TG[k]
        decode(k, tg)
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", parts[1], parts[2], fmt(MIB[k], "%.0f"),
               fmt(have(BYTES) ? BYTES / 1048576 : "", "%.1f"),
               pp == "" ? "n/a" : pp " " fmt(TPS[k " " pp], "%.0f"), tg == "" ? "n/a" : tg " " fmt(TPS[k " " tg], "%.1f"),
               fmt(STEP[k " " tg], "%.3f"), fmt(ROOF, "%.0f"), fmt(PCT, "%.1f")
    }
    for (i = 1; i <= n_batched; i++) {
        split(BATCHED[i], kt, "|"); k = kt[1]; t = kt[2]; split(k, parts, " ")
        decode(k, t)
        printf "| %s | %s | %s | %s | | %s %s | %s | %s | %s |\n", parts[1], parts[2], fmt(MIB[k], "%.0f"),
               fmt(have(BYTES) ? BYTES / 1048576 : "", "%.1f"), t, fmt(TPS[k " " t], "%.0f"), fmt(STEP[k " " t], "%.3f"),
               fmt(ROOF, "%.0f"), fmt(PCT, "%.1f")
    }
    print ""
    printf "Copy bandwidth %s GB/s read + write (%s GB/s read); cuBLAS BF16 GEMM, M 2048, N x K 4096 x 4096: %s, 14336 x 4096: %s, 4096 x 14336: %s TFLOP/s.\n",
           fmt(BW, "%.0f"), fmt(BW_READ, "%.0f"), fmt(R_ATTN, "%.0f"), fmt(R_GU, "%.0f"), fmt(R_DOWN, "%.0f")

    print ""
    print "### gpu_check: goals"
    print ""
    print "| figure | measured | goal | met |"
    print "|---|---|---|---|"
    printf "| copy bandwidth (D2D, read + write) | %s GB/s | (the roofline) | |\n", fmt(BW, "%.0f")
    printf "| cuBLAS BF16 GEMM (M 2048; 4096x4096, 14336x4096, 4096x14336) | %s / %s / %s TFLOP/s | (the prefill reference) | |\n",
           fmt(R_ATTN, "%.0f"), fmt(R_GU, "%.0f"), fmt(R_DOWN, "%.0f")
    split("smollm2-135m Q4_1|smollm2-135m BF16", small, "|")
    for (i = 1; i <= 2; i++) {
        k = small[i]; decode(k, "tg128"); tps = TPS[k " tg128"]
        printf "| %s tg128 | %s tok/s (%s%% of roofline) | >= 2,000 tok/s | %s |\n", k, fmt(tps, "%.0f"), fmt(PCT, "%.1f"),
               met(tps >= 2000, have(tps))
    }
    split("llama-1b BF16 60|llama-8b BF16 75", big, "|")
    for (i = 1; i <= 2; i++) {
        split(big[i], f, " "); k = f[1] " " f[2]; decode(k, "tg128"); tps = TPS[k " tg128"]
        printf "| %s tg128, %% of roofline | %s%% (%s of %s tok/s) | >= %d%% | %s |\n", k, fmt(PCT, "%.1f"), fmt(tps, "%.0f"),
               fmt(ROOF, "%.0f"), f[3], met(PCT >= f[3], have(PCT))
    }
    k = "llama-8b BF16"; s64 = STEP[k " tg32_b64"]; s1 = STEP[k " tg128"]
    ratio = have(s64) && have(s1) && s1 > 0 ? s64 / s1 : ""
    printf "| %s step at batch 64 / batch 1 | %sx (%s / %s ms) | <= 1.5x | %s |\n", k, fmt(ratio, "%.2f"), fmt(s64, "%.2f"),
           fmt(s1, "%.2f"), met(ratio <= 1.5, have(ratio))
    prefill(k, "pp2048")
    printf "| %s pp2048, matmul FLOP/s %% of cuBLAS | %s%% (%s of %s TFLOP/s; %s with attention) | >= 50%% | %s |\n", k,
           fmt(PF_PCT, "%.1f"), fmt(PF_TFLOPS, "%.0f"), fmt(PF_REF, "%.0f"), fmt(PF_ALL, "%.0f"), met(PF_PCT >= 50, have(PF_PCT))
}
AWK
}

# report DIR: the tables from DIR/gpu_rates.json and DIR/bench.jsonl, on stdout.
report() {
    local rates=$1/gpu_rates.json jsonl=$1/bench.jsonl
    [ -f "$rates" ] || rates=/dev/null
    [ -f "$jsonl" ] || jsonl=/dev/null
    awk -v rates="$rates" "$(report_awk)" "$jsonl"
}

if [ "${1:-}" = "--report" ]; then
    [ -d "${2:-}" ] || { echo "usage: bench/gpu_check.sh [--report DIR]" >&2; exit 2; }
    report "$2"
    exit 0
fi

OUT=${OUT:-build/gpu_check}
MODELS=${MODELS:-build/gpu_check_models}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
: >"$LOG"
say() { echo "gpu_check: $(date +%T) $*" | tee -a "$LOG"; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >>"$LOG" 2>&1; then
    say "no GPU here (nvidia-smi -L failed); nothing to check"
    exit 0
fi
mkdir -p "$MODELS"
: >"$OUT/bench.jsonl"
# Every step gets at most what is left of DEADLINE seconds (from the start), so the tables
# come out in time even when a step hangs.
DEADLINE=${DEADLINE:-450}
# budget CAP: seconds the next step may take (CAP at most); 0 when the deadline is too near.
budget() {
    local left=$((DEADLINE - SECONDS))
    if [ $left -lt 15 ]; then echo 0; elif [ $left -lt "$1" ]; then echo $left; else echo "$1"; fi
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.memory --format=csv,noheader |
    tee -a "$LOG"
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# 1. the build: carried, or made here
gpu_tests=()
for src in tests/unit/gpu/test_cuda_*.c; do
    [ -f "$src" ] && gpu_tests+=("$TESTS/$(basename "$src" .c)")
done
missing=0
for bin in $BIN/spindle $BIN/mkmodel $BIN/gpu_rates "${gpu_tests[@]}"; do
    [ -x "$bin" ] || missing=1
done
if [ $missing = 1 ]; then
    say "building (make -j$(nproc) all ${gpu_tests[*]})"
    make -j"$(nproc)" all "${gpu_tests[@]}" >>"$LOG" 2>&1 ||
        { say "build failed (see $LOG); carry a build made by tools/gpu_bundle.sh instead"; exit 1; }
fi

# 2. the models, written in the background (mkmodel is one thread; the 8B one takes longest)
RUNS=("smollm2-135m Q4_1" "smollm2-135m BF16" "llama-1b BF16" "llama-8b BF16")
declare -A writer
rm -f "$MODELS"/*.gguf.tmp-* # what a stopped mkmodel left
avail_gb=$(df -Pk "$MODELS" | awk 'NR == 2 { printf "%d", $4 / 1048576 }')
for run in "${RUNS[@]}"; do
    read -r shape type <<<"$run"
    model=$MODELS/$shape-$type.gguf
    [ -f "$model" ] && continue
    if [ "$shape" = llama-8b ] && [ "$avail_gb" -lt 20 ]; then
        say "only $avail_gb GB free under $MODELS: llama-8b skipped"
        continue
    fi
    timeout 400 $BIN/mkmodel --shape "$shape" --type "$type" --ctx 4096 -o "$model" >>"$LOG" 2>&1 &
    writer[$run]=$!
done
say "writing models: ${!writer[*]}"

# 3. the CUDA backend against the CPU backend
tests_rc=0
: >"$OUT/gpu_tests.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    for bin in "${gpu_tests[@]}"; do
        limit=$(budget 180)
        [ "$limit" = 0 ] && { say "no time left for $bin"; tests_rc=1; continue; }
        say "GPU tests: $bin"
        echo "== $bin" >>"$OUT/gpu_tests.txt"
        timeout "$limit" "$bin" --verbose >"$SCRATCH/tests" 2>&1 || tests_rc=1
        cat "$SCRATCH/tests" >>"$OUT/gpu_tests.txt"
        tail -n 2 "$SCRATCH/tests" | tee -a "$LOG"
        # on the device machine a skipped GPU test (no usable GPU, an old driver) is a
        # failure: the point of this run is that they all ran
        if grep -q "^\[SKIP\]" "$SCRATCH/tests"; then
            say "GPU tests: $bin skipped tests here: $(grep -m1 '^\[SKIP\]' "$SCRATCH/tests")"
            tests_rc=1
        fi
        # a device fault inside a graph or a queue of kernels names only the call that
        # noticed it: once more with a wait after every op, so it names the kernel
        if grep -qE "illegal|misaligned|unspecified launch failure|Crashing: [1-9]" "$SCRATCH/tests"; then
            limit=$(budget 90)
            [ "$limit" = 0 ] && continue
            say "GPU tests: $bin again with SP_CUDA_SYNC_OPS=1 (a device fault: which kernel)"
            echo "== $bin" >>"$OUT/gpu_tests_sync.txt"
            SP_CUDA_SYNC_OPS=1 timeout "$limit" "$bin" --verbose >>"$OUT/gpu_tests_sync.txt" 2>&1
        fi
    done
fi

# 4. the ceilings (mkmodel's disk writes do not touch the GPU)
say "gpu_rates"
limit=$(budget 120)
if [ "$limit" = 0 ]; then
    say "no time left for gpu_rates"
    : >"$OUT/gpu_rates.json"
else
    timeout "$limit" $BIN/gpu_rates >"$OUT/gpu_rates.json" 2>>"$LOG" || say "gpu_rates failed (see $LOG)"
fi
tee -a "$LOG" <"$OUT/gpu_rates.json"

# 5. spindle on the GPU, once every model is written (so nothing else loads the CPU)
for run in "${!writer[@]}"; do
    # leave the benches about 90 s; a writer still going then is stopped and its runs skipped
    while kill -0 "${writer[$run]}" 2>/dev/null && [ $((DEADLINE - SECONDS)) -gt 90 ]; do sleep 1; done
    kill "${writer[$run]}" 2>/dev/null && say "mkmodel $run stopped: out of time"
    wait "${writer[$run]}" || say "mkmodel $run failed (see $LOG)"
done
rm -f "$MODELS"/*.gguf.tmp-*
say "models written"
# bench SHAPE TYPE ARGS...: one spindle bench run, its lines tagged into bench.jsonl
bench() {
    local shape=$1 type=$2
    shift 2
    local model=$MODELS/$shape-$type.gguf
    [ -f "$model" ] || { say "no model $model: bench $shape $type $* skipped"; return; }
    local limit
    limit=$(budget 240)
    [ "$limit" = 0 ] && { say "no time left: bench $shape $type $* skipped"; return; }
    say "bench $shape $type $*"
    timeout "$limit" $BIN/spindle bench --device cuda --model "$model" "$@" >"$SCRATCH/out" 2>"$SCRATCH/err"
    local rc=$?
    cat "$SCRATCH/err" >>"$LOG"
    [ $rc = 0 ] || say "bench $shape $type $* failed with status $rc (see $LOG)"
    local mib
    mib=$(sed -n 's/.*weights \([0-9.]*\) MiB on the GPU.*/\1/p' "$SCRATCH/err" | head -n 1)
    sed "s/^{/{\"model\":\"$shape\",\"type\":\"$type\",\"gpu_weight_mib\":${mib:-null},/" "$SCRATCH/out" |
        tee -a "$LOG" >>"$OUT/bench.jsonl"
}
bench smollm2-135m Q4_1 --pp 512 --tg 128 --reps 3
bench smollm2-135m BF16 --pp 512 --tg 128 --reps 3
bench llama-1b BF16 --pp 512 --tg 128 --reps 3
bench llama-8b BF16 --pp 2048 --tg 128 --reps 3
bench llama-8b BF16 --pp 0 --tg 32 --batch 64 --reps 3

# 6. the tables, last
if [ "${SKIP_TESTS:-0}" = 1 ]; then
    tests=skipped
elif [ $tests_rc = 0 ]; then
    tests=passed
else
    tests=FAILED
fi
graph_failures=$(cat "$LOG" "$OUT/gpu_tests.txt" | grep -c "as a graph failed")
{
    report "$OUT"
    echo
    echo "GPU tests: $tests ($OUT/gpu_tests.txt)"
    echo "Failed graph captures (steps run op by op instead): $graph_failures"
} | tee "$OUT/summary.md"
exit $tests_rc

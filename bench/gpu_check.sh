#!/usr/bin/env bash
# gpu_check.sh: the one prepared script for a GPU machine (no network needed). It builds
# spindle unless a carried build is usable, runs the CUDA backend's tests against the CPU
# backend, writes synthetic models with build/mkmodel, times decode and prefill on the
# GPU (spindle bench --device cuda), and prints a short table last. (Not yet: the
# device-to-device copy bandwidth for the roofline, batch-64 decode, CUDA graphs.) Everything it writes goes under $OUT (or
# build/gpu_check when OUT is unset).
#
#   bench/gpu_check.sh                 SHAPES="smollm2-135m llama-1b" TYPES="Q4_1 BF16"
#
# Carry: build/ (the binaries link cuBLAS from the toolkit through an rpath; where the
# device image lacks it, carry libcublas*.so* too and set LD_LIBRARY_PATH).
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-build/gpu_check}
SHAPES=${SHAPES:-stories260k smollm2-135m llama-1b}
TYPES=${TYPES:-Q4_1 F16}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
: >"$LOG"
say() { echo "gpu_check: $*" | tee -a "$LOG"; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >>"$LOG" 2>&1; then
    say "no GPU here (nvidia-smi -L failed); nothing to check"
    exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$LOG"

# 1. the build: carried, or made here
if [ ! -x build/spindle ] || [ ! -x build/mkmodel ] || [ ! -x build/tests/gpu/test_cuda_ops ]; then
    say "building (make -j all build/tests/gpu/test_cuda_ops)"
    make -j"$(nproc)" all build/tests/gpu/test_cuda_ops >>"$LOG" 2>&1 || { say "build failed (see $LOG)"; exit 1; }
fi

# 2. the CUDA backend against the CPU backend
say "GPU tests"
build/tests/gpu/test_cuda_ops --verbose >"$OUT/test_cuda_ops.txt" 2>&1
tests_rc=$?
tail -n 3 "$OUT/test_cuda_ops.txt" | tee -a "$LOG"

# 3. synthetic models and their speed
declare -a rows
for shape in $SHAPES; do
    for type in $TYPES; do
        model=$OUT/$shape-$type.gguf
        [ -f "$model" ] || build/mkmodel --shape "$shape" --type "$type" --ctx 4096 -o "$model" >>"$LOG" 2>&1 ||
            { say "mkmodel $shape $type failed"; continue; }
        json=$OUT/bench-$shape-$type.json
        build/spindle bench --device cuda --model "$model" --pp 512 --tg 128 --reps 3 >"$json" 2>>"$LOG" ||
            { say "bench $shape $type failed (see $LOG)"; continue; }
        pp=$(sed -n 's/.*"test":"pp512".*"tokens_per_s_median":\([0-9.]*\).*/\1/p' "$json")
        tg=$(sed -n 's/.*"test":"tg128".*"tokens_per_s_median":\([0-9.]*\).*/\1/p' "$json")
        bytes=$(stat -c %s "$model")
        rows+=("$shape $type $bytes ${pp:-?} ${tg:-?}")
    done
done

# 4. the table
{
    echo
    echo "| shape | file type | file MiB | pp512 t/s | tg128 t/s |"
    echo "|---|---|---:|---:|---:|"
    for r in "${rows[@]}"; do
        set -- $r
        printf "| %s | %s | %.0f | %s | %s |\n" "$1" "$2" "$(echo "$3 / 1048576" | bc -l)" "$4" "$5"
    done
    echo
    echo "GPU tests: $([ $tests_rc -eq 0 ] && echo passed || echo FAILED) ($OUT/test_cuda_ops.txt)"
} | tee "$OUT/summary.md"
exit $tests_rc

#!/usr/bin/env bash
# bench_kernels.sh: prompt processing (pp512) and generation (tg128) speed of spindle and of
# llama.cpp's llama-bench on the default model, 1 and 2 threads, measured in one run with the
# two programs alternating per configuration so machine drift hits both. Writes
# docs/benchmarks.md (medians and the spindle/llama.cpp ratio). Called by `make bench`.
#
#   bench/bench_kernels.sh                     defaults below
#   ROUNDS=5 REPS=3 THREADS="1 2" bench/bench_kernels.sh
#
# Environment: MODEL, SPINDLE (binary), PEER_DIR (llama.cpp build, made by
# tools/peer_build.sh when missing; default build/peer-<set>, the set tools/peer_isa.sh
# picks for this CPU), THREADS, ROUNDS (alternations), REPS (repetitions per
# invocation), PP, TG, LLAMA_FA (llama-bench -fa, default its own default "auto"), OUT,
# BASELINE_ISA (a spindle kernel set run in the same alternation for comparison: avx512 by
# default where the CPU has AMX, so the amx set's gain is measured; "" for none),
# SPINDLE_ISA (force spindle's kernel set: avx2, avx512 or amx), BASELINE_SPINDLE and
# BASELINE_LABEL (another spindle binary as the baseline, e.g. an older commit's build, to
# check one kernel set for regressions: BASELINE_ISA="" SPINDLE_ISA=avx2 ...).
# SPINDLE=none benchmarks llama.cpp alone. Raw outputs stay in build/bench/<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."

export MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
export SPINDLE=${SPINDLE:-build/spindle}
export PEER_DIR=${PEER_DIR:-build/peer-$(tools/peer_isa.sh)}
export THREADS=${THREADS:-1 2}
export ROUNDS=${ROUNDS:-3}
export REPS=${REPS:-3}
export PP=${PP:-512}
export TG=${TG:-128}
export LLAMA_FA=${LLAMA_FA:-auto}
export OUT=${OUT:-docs/benchmarks.md}
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    export BASELINE_ISA=${BASELINE_ISA-avx512}
else
    export BASELINE_ISA=${BASELINE_ISA-}
fi
PYTHON=${PYTHON:-python3}

LLAMA_BENCH=$PEER_DIR/build/bin/llama-bench
if [ ! -x "$LLAMA_BENCH" ]; then
    echo "bench: no $LLAMA_BENCH; building the peer (15+ minutes on 2 cores)"
    tools/peer_build.sh "$PEER_DIR"
fi
export LLAMA_BENCH
[ -f "$MODEL" ] || { echo "bench: $MODEL: model not found (make setup fetches it)" >&2; exit 1; }
if [ "$SPINDLE" != none ] && [ ! -x "$SPINDLE" ]; then
    echo "bench: $SPINDLE: not built (make all), or SPINDLE=none for llama.cpp alone" >&2
    exit 1
fi

# The exact command, for the report.
cmd=""
for v in MODEL SPINDLE PEER_DIR THREADS ROUNDS REPS PP TG LLAMA_FA OUT BASELINE_ISA; do
    cmd="$cmd$v=\"${!v}\" "
done
for v in SPINDLE_ISA BASELINE_SPINDLE BASELINE_LABEL; do
    if [ -n "${!v:-}" ]; then cmd="$cmd$v=\"${!v}\" "; fi
done
export BENCH_COMMAND="${cmd}bench/bench_kernels.sh"

exec "$PYTHON" bench/bench_kernels.py run

#!/usr/bin/env bash
# Build the peer, llama.cpp, from the source that the PyPI sdist of llama-cpp-python carries
# (vendor/llama.cpp). Used for the reference data (tools/make_reference.py) and the benchmark
# (bench/bench_kernels.sh). Nothing of it is committed: it all lives under PEER_DIR.
#
#   tools/peer_build.sh [PEER_DIR]        (default: $PEER_DIR, else build/peer-$PEER_ISA)
#   PEER_ISA=avx2|avx512|amx tools/peer_build.sh
#
# The instruction set is given explicitly, never GGML_NATIVE: a native build dies with an
# illegal instruction on some Xeons (it enables AMX the process may not use). PEER_ISA
# defaults to the best set this CPU has short of AMX (tools/peer_isa.sh): avx512 (F, BW,
# VL, and VNNI, VBMI, BF16 where listed), else avx2 (with FMA, F16C, BMI2). amx adds AMX tile,
# int8 and bf16 to avx512 and is built only when asked for. One build per set, each in its
# own PEER_DIR, so results of different sets are never mixed.
#
# Steps, each skipped when already done: pip download the sdist (sha256 pinned), extract it,
# configure with CMake, then an incremental build of llama, llama-bench and llama-server.
# Quiet on success; the last lines say where the binaries are. Logs: PEER_DIR/peer_build.log.
# A fresh build takes 15+ minutes on 2 cores; JOBS defaults to 2.
set -euo pipefail

PEER_ISA=$("$(dirname "$0")/peer_isa.sh")
read -r -a ISA_FLAGS <<<"$("$(dirname "$0")/peer_isa.sh" --flags)"
PEER_DIR=${1:-${PEER_DIR:-build/peer-$PEER_ISA}}
VERSION=0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
JOBS=${JOBS:-2}
PYTHON=${PYTHON:-python3}
TARGETS=(llama llama-bench llama-server)

SDIST=$PEER_DIR/llama_cpp_python-$VERSION.tar.gz
SRC=$PEER_DIR/llama_cpp_python-$VERSION
BUILD=$PEER_DIR/build
LOG=$PEER_DIR/peer_build.log

mkdir -p "$PEER_DIR"

fail() {
    echo "peer_build: $1 (log: $LOG)" >&2
    tail -n 30 "$LOG" >&2
    exit 1
}

# Only one build of a tree at a time (the machine has few cores, and make trees don't share).
exec 9>"$PEER_DIR/.peer_build.lock"
flock -n 9 || { echo "peer_build: waiting for another build in $PEER_DIR" >&2; flock 9; }
: >"$LOG"

if [ ! -f "$SDIST" ]; then
    "$PYTHON" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" \
        -d "$PEER_DIR" >>"$LOG" 2>&1 || fail "pip download llama-cpp-python==$VERSION failed"
fi
echo "$SDIST_SHA256  $SDIST" | sha256sum -c --quiet - >>"$LOG" 2>&1 ||
    fail "$SDIST: sha256 differs from the pinned $SDIST_SHA256 (delete it to download again)"

if [ ! -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]; then
    tar -xzf "$SDIST" -C "$PEER_DIR" >>"$LOG" 2>&1 || fail "$SDIST: extraction failed"
    [ -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ] || fail "$SDIST: no vendor/llama.cpp inside"
fi

# A build configured for other flags (another set, or an old GGML_NATIVE build) is never
# reused under this set's name: the stamp says what a build was configured with.
STAMP=$BUILD/.peer_isa_flags
if [ -f "$BUILD/CMakeCache.txt" ] && [ "$(cat "$STAMP" 2>/dev/null)" != "${ISA_FLAGS[*]}" ]; then
    fail "$BUILD was configured with other flags ($(cat "$STAMP" 2>/dev/null || echo 'unknown: no stamp')), not \
PEER_ISA=$PEER_ISA's (${ISA_FLAGS[*]}): delete $BUILD or use another PEER_DIR"
fi
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF "${ISA_FLAGS[@]}" \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >>"$LOG" 2>&1 ||
        fail "cmake configure failed"
    echo "${ISA_FLAGS[*]}" >"$STAMP"
fi

cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}" >>"$LOG" 2>&1 || fail "cmake build failed"

BIN=$BUILD/bin
for f in libllama.so llama-bench llama-server; do
    [ -e "$BIN/$f" ] || fail "$BIN/$f missing after the build"
done
echo "$PEER_ISA" >"$PEER_DIR/isa"
echo "${ISA_FLAGS[*]}" >"$PEER_DIR/isa_flags"
echo "peer: llama.cpp from llama-cpp-python $VERSION (vendor/llama.cpp), kernels $PEER_ISA"
echo "peer: binaries in $BIN (llama-bench, llama-server, libllama.so)"
echo "peer: python bindings in $SRC (set LLAMA_CPP_LIB_PATH=$BIN)"

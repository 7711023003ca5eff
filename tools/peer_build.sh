#!/usr/bin/env bash
# Build the peer, llama.cpp, from the source that the PyPI sdist of llama-cpp-python carries
# (vendor/llama.cpp). Used for the reference data (tools/make_reference.py) and the benchmark
# (bench/bench_kernels.sh). Nothing of it is committed: it all lives under PEER_DIR.
#
#   tools/peer_build.sh [PEER_DIR]        (default: $PEER_DIR, else build/peer)
#
# Steps, each skipped when already done: pip download the sdist (sha256 pinned), extract it,
# configure with CMake, then an incremental build of llama, llama-bench and llama-server.
# Quiet on success; the last lines say where the binaries are. Logs: PEER_DIR/peer_build.log.
# A fresh build takes 15+ minutes on 2 cores; JOBS defaults to 2.
set -euo pipefail

PEER_DIR=${1:-${PEER_DIR:-build/peer}}
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

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >>"$LOG" 2>&1 ||
        fail "cmake configure failed"
fi

cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}" >>"$LOG" 2>&1 || fail "cmake build failed"

BIN=$BUILD/bin
for f in libllama.so llama-bench llama-server; do
    [ -e "$BIN/$f" ] || fail "$BIN/$f missing after the build"
done
echo "peer: llama.cpp from llama-cpp-python $VERSION (vendor/llama.cpp)"
echo "peer: binaries in $BIN (llama-bench, llama-server, libllama.so)"
echo "peer: python bindings in $SRC (set LLAMA_CPP_LIB_PATH=$BIN)"

#!/usr/bin/env bash
# peer_isa.sh: the instruction set llama.cpp (the peer) is built with on this machine, for
# tools/peer_build.sh and the benchmarks that find its build in build/peer-<set>: avx512
# (F, BW, VL, VNNI, BF16, VBMI) where /proc/cpuinfo lists them all, else avx2. AMX is never
# chosen here (a build with it dies on some Xeons); ask for it with PEER_ISA=amx.
set -euo pipefail
if [ -n "${PEER_ISA:-}" ]; then
    echo "$PEER_ISA"
    exit 0
fi
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
for f in avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx512vbmi; do
    if ! grep -qw "$f" <<<"$flags"; then
        echo avx2
        exit 0
    fi
done
echo avx512

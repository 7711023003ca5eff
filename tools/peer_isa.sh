#!/usr/bin/env bash
# peer_isa.sh: the instruction set llama.cpp (the peer) is built with on this machine, for
# tools/peer_build.sh and the benchmarks that find its build in build/peer-<set>: avx512
# where /proc/cpuinfo lists AVX-512 F, BW and VL, else avx2. AMX is never chosen here (a
# build with it dies on some Xeons); ask for it with PEER_ISA=amx.
#
#   tools/peer_isa.sh            the set
#   tools/peer_isa.sh --flags    the CMake flags for it: the optional AVX-512 parts (VNNI,
#                                VBMI, BF16) only where this CPU lists them
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { grep -qw "$1" <<<"$flags"; }

isa=${PEER_ISA:-}
if [ -z "$isa" ]; then
    isa=avx2
    if has avx512f && has avx512bw && has avx512vl; then isa=avx512; fi
fi
if [ "${1:-}" != --flags ]; then
    echo "$isa"
    exit 0
fi
out=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
case "$isa" in
avx2) ;;
avx512 | amx)
    out+=(-DGGML_AVX512=ON)
    has avx512_vnni && out+=(-DGGML_AVX512_VNNI=ON)
    has avx512vbmi && out+=(-DGGML_AVX512_VBMI=ON)
    has avx512_bf16 && out+=(-DGGML_AVX512_BF16=ON)
    [ "$isa" = amx ] && out+=(-DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON -DGGML_AMX_BF16=ON)
    ;;
*)
    echo "peer_isa: PEER_ISA=$isa: expected avx2, avx512 or amx" >&2
    exit 2
    ;;
esac
echo "${out[*]}"

#!/usr/bin/env bash
# gpu_bundle.sh: makes the build carryable to a GPU machine whose image has the CUDA
# toolkit but not this machine's libraries (libmicrohttpd, jansson, libyaml, pcre2,
# GnuTLS, Criterion) and no package registry to install them from. It builds what
# bench/gpu_check.sh runs and copies every shared library those binaries load, except
# the C/C++ runtime and CUDA's own (the device image has newer ones), into
# build/gpu_bundle/lib; gpu_check.sh puts that folder on LD_LIBRARY_PATH when it is
# there. glibc here is older than the device image's, so the binaries run there.
#
#   tools/gpu_bundle.sh      then carry: build/spindle build/mkmodel build/gpu_rates
#                            build/tests/gpu build/gpu_bundle (about 40 MiB of the 64)
set -euo pipefail
cd "$(dirname "$0")/.."

tests=()
for src in tests/unit/gpu/test_*.c; do tests+=("build/tests/gpu/$(basename "$src" .c)"); done
make -j"$(nproc)" all "${tests[@]}" >/dev/null
[ -x build/gpu_rates ] || { echo "gpu_bundle: build/gpu_rates was not built (no nvcc?)" >&2; exit 1; }

lib=build/gpu_bundle/lib
rm -rf build/gpu_bundle
mkdir -p "$lib"
# what the device image brings itself: glibc's parts, the C++ runtime, CUDA's libraries
system='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread\.|libdl\.|librt\.|libresolv\.|libstdc\+\+|libgcc_s|libcu|libnv)'
for bin in build/spindle build/mkmodel build/gpu_rates "${tests[@]}"; do
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
        if [[ ! $name =~ $system ]] && [ ! -e "$lib/$name" ]; then cp -L "$path" "$lib/$name"; fi
    done
done
echo "gpu_bundle: $(ls "$lib" | wc -l) libraries in $lib ($(du -sh "$lib" | cut -f1));" \
    "carry: build/spindle build/mkmodel build/gpu_rates build/tests/gpu build/gpu_bundle" \
    "($(du -shc build/spindle build/mkmodel build/gpu_rates build/tests/gpu "$lib" | tail -1 | cut -f1))"

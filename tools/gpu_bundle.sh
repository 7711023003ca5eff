#!/usr/bin/env bash
# gpu_bundle.sh: makes the build carryable to a GPU machine whose image has the CUDA
# toolkit but not this machine's libraries (libmicrohttpd, jansson, libyaml, pcre2,
# GnuTLS, Criterion) and no package registry to install them from. It builds what
# bench/gpu_check.sh runs, copies those binaries without their debug sections into
# build/gpu_bundle/bin (the carry limit is 64 MiB; each carries CUDA code for three GPU
# generations) and every shared library they load, except the C/C++ runtime and CUDA's
# own (the device image has newer ones), into build/gpu_bundle/lib. gpu_check.sh runs
# the binaries of build/gpu_bundle/bin, with its lib on LD_LIBRARY_PATH, when they are
# there. glibc here is older than the device image's, so the binaries run there.
#
#   tools/gpu_bundle.sh      then carry: build/gpu_bundle (about 45 MiB)
set -euo pipefail
cd "$(dirname "$0")/.."

tests=() # the ones gpu_check.sh runs
for src in tests/unit/gpu/test_cuda_*.c; do tests+=("build/tests/gpu/$(basename "$src" .c)"); done
make -j"$(nproc)" all "${tests[@]}" >/dev/null
[ -x build/gpu_rates ] || { echo "gpu_bundle: build/gpu_rates was not built (no nvcc?)" >&2; exit 1; }

bin_dir=build/gpu_bundle/bin lib=build/gpu_bundle/lib
rm -rf build/gpu_bundle
mkdir -p "$bin_dir" "$lib"
for b in build/spindle build/mkmodel build/gpu_rates "${tests[@]}"; do
    strip --strip-debug -o "$bin_dir/$(basename "$b")" "$b"
done
# the real model the GPU tests compare end to end (1 MiB; the device has no ../shared)
testdata=${SPINDLE_TESTDATA:-../shared/testdata}
if [ -f "$testdata/models/stories260K.gguf" ]; then
    mkdir -p build/gpu_bundle/testdata/models
    cp "$testdata/models/stories260K.gguf" build/gpu_bundle/testdata/models/
fi
# what the device image brings itself: glibc's parts, the C++ runtime, CUDA's libraries
system='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread\.|libdl\.|librt\.|libresolv\.|libstdc\+\+|libgcc_s|libcu|libnv)'
for bin in build/spindle build/mkmodel build/gpu_rates "${tests[@]}"; do
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
        if [[ ! $name =~ $system ]] && [ ! -e "$lib/$name" ]; then cp -L "$path" "$lib/$name"; fi
    done
done
echo "gpu_bundle: $(ls "$bin_dir" | wc -l) binaries in $bin_dir, $(ls "$lib" | wc -l) libraries in $lib;" \
    "carry: build/gpu_bundle ($(du -sh build/gpu_bundle | cut -f1))"

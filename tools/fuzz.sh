#!/usr/bin/env bash
# fuzz.sh: builds every libFuzzer harness tests/fuzz/fuzz_<name>.c with clang
# (-fsanitize=fuzzer,address,undefined) into build/fuzz/ and runs each for SECONDS,
# single process, starting from the committed seeds in tests/fuzz/corpus/<name>/.
# New inputs go to build/fuzz/corpus/<name>/ and crashes to build/fuzz/crashes/<name>/,
# never into the committed corpus. Exits 1 when any harness failed to build or found
# a crash; copy a crash into tests/fuzz/regressions/<name>/ to keep it as a test (the
# unit tests tests/unit/<module>/test_<name>_regressions.c replay those directories for
# gguf, template and request).
#
# usage: tools/fuzz.sh SECONDS [NAME...]     (default: every harness)
set -euo pipefail

cd "$(dirname "$0")/.."
SECONDS_EACH=${1:?usage: tools/fuzz.sh SECONDS [NAME...]}
shift
CLANG=${CLANG:-clang}
if ! command -v "$CLANG" >/dev/null; then
    echo "fuzz: $CLANG not found; install clang and libclang-rt-14-dev (apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi
OUT=build/fuzz
CFLAGS=(-std=c11 -g -O1 -fno-omit-frame-pointer -D_GNU_SOURCE -I. -Wall -Wextra
        -fsanitize=address,undefined -fno-sanitize-recover=undefined)
LDLIBS=(-lm -pthread)
if pkg-config --exists libpcre2-8 2>/dev/null; then LDLIBS+=($(pkg-config --libs libpcre2-8)); fi
# jansson: the chat-template engine's values (template/template.h).
if pkg-config --exists jansson 2>/dev/null; then LDLIBS+=($(pkg-config --libs jansson)); else LDLIBS+=(-ljansson); fi
# libmicrohttpd: the HTTP transport (server/http/), whose framing check has a harness.
if pkg-config --exists libmicrohttpd 2>/dev/null; then LDLIBS+=($(pkg-config --libs libmicrohttpd)); else LDLIBS+=(-lmicrohttpd); fi
# nettle: the chat page's SHA-256 (server/http/ui.c)
LDLIBS+=(-lnettle)
# libyaml: the config file reader (config/).
if pkg-config --exists yaml-0.1 2>/dev/null; then LDLIBS+=($(pkg-config --libs yaml-0.1)); else LDLIBS+=(-lyaml); fi

# Library sources each harness may link. Default: the layers up to the model (LOWER),
# put in an archive so the linker pulls only the objects the harness needs. Give a
# harness its own list here if the default stops linking for it.
LOWER="common/*.c quant/*.c sample/*.c gguf/*.c tokenizer/*.c template/*.c grammar/*.c"
harness_sources() {
    case "$1" in
    # the API layer (OpenAI, Responses, Anthropic: server/api, no transport) reaches the
    # scheduler's clock, so the library below it but the CUDA backend
    request) echo $LOWER gpu/device.c gpu/host/*.c model/*.c kvcache/*.c scheduler/*.c scheduler/spec/*.c config/*.c \
        server/api/*.c ;;
    # the config file reader: its own module and common/
    config) echo common/*.c config/*.c ;;
    # the request framing check: its own file and common/
    framing) echo common/*.c server/http/http_framing.c ;;
    # the KV cache's disk tier: its own module and common/
    kvtier) echo common/*.c kvcache/*.c ;;
    # the GGUF reader, and the model's hyperparameters read from it
    gguf) echo $LOWER model/arch.c ;;
    *) echo $LOWER ;;
    esac
}

# Compiles src into $OUT/obj/ (instrumented for coverage) unless up to date.
compile_object() {
    local src=$1 obj=$OUT/obj/${1%.c}.o
    mkdir -p "$(dirname "$obj")"
    # any project header may have changed what src compiles to
    if [[ ! -f $obj || $src -nt $obj ]] || find common quant sample gguf tokenizer template grammar gpu kvcache model scheduler \
        config server -name '*.h' -newer "$obj" | grep -q .; then
        "$CLANG" "${CFLAGS[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
    fi
    echo "$obj"
}

build_harness() {
    local name=$1 objs=() src
    for src in $(harness_sources "$name"); do
        objs+=("$(compile_object "$src")") || return 1
    done
    rm -f "$OUT/lib_$name.a"
    ar rcs "$OUT/lib_$name.a" "${objs[@]}"
    "$CLANG" "${CFLAGS[@]}" -fsanitize=fuzzer "tests/fuzz/fuzz_$name.c" "$OUT/lib_$name.a" "${LDLIBS[@]}" \
        -o "$OUT/fuzz_$name"
}

run_harness() {
    local name=$1
    local corpus=$OUT/corpus/$name crashes=$OUT/crashes/$name seeds=tests/fuzz/corpus/$name
    mkdir -p "$corpus" "$crashes" "$seeds"
    # A harness's libFuzzer dictionary (its input language's keywords), when it has one.
    local dict=()
    [[ -f tests/fuzz/fuzz_$name.dict ]] && dict=(-dict="tests/fuzz/fuzz_$name.dict")
    echo "fuzz.sh: running fuzz_$name for ${SECONDS_EACH}s (corpus $corpus, seeds $seeds)"
    # One process; a slow input (over 10 s) counts as a finding too.
    # FUZZ_FLAGS: extra libFuzzer flags, e.g. FUZZ_FLAGS="-max_len=65536" for long inputs.
    # shellcheck disable=SC2086
    "$OUT/fuzz_$name" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        ${dict[@]+"${dict[@]}"} ${FUZZ_FLAGS:-} -artifact_prefix="$crashes/" "$corpus" "$seeds"
}

mkdir -p "$OUT"
if [[ $# -gt 0 ]]; then
    names=("$@")
else
    names=()
    for f in tests/fuzz/fuzz_*.c; do
        [[ -e $f ]] || continue
        n=${f##*/fuzz_}
        names+=("${n%.c}")
    done
fi
[[ ${#names[@]} -gt 0 ]] || { echo "fuzz.sh: no harnesses in tests/fuzz/"; exit 0; }

failed=()
for name in "${names[@]}"; do
    if ! build_harness "$name"; then
        echo "fuzz.sh: fuzz_$name: build failed"
        failed+=("$name")
        continue
    fi
    if ! run_harness "$name"; then
        echo "fuzz.sh: fuzz_$name: found a crash; inputs in $OUT/crashes/$name/"
        failed+=("$name")
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz.sh: failed: ${failed[*]}"
    exit 1
fi
echo "fuzz.sh: all harnesses ran clean"

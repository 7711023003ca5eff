#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer harnesses tests/fuzz/fuzz_<name>.c and runs each in turn,
# naming every harness that failed to build, crashed or skipped, and prints a summary.
#
# The build is the Makefile's (`make fuzz-lib`, then `make build/fuzz/fuzz_<name>` one by
# one): the whole library compiled by clang with -fsanitize=fuzzer-no-link,address,undefined
# into build/fuzz/libspindle.a, each harness linked against it; no source list here. A
# harness that does not build is named with the end of its log, and the others go on.
#
# Each harness runs single process from the committed seeds in tests/fuzz/corpus/<name>/;
# new inputs go to build/fuzz/corpus/<name>/ and crashes to build/fuzz/crashes/<name>/,
# never into the committed corpus (copy a crash into tests/fuzz/regressions/<name>/ to keep
# it as a test). The full log of each build and run is under build/fuzz/logs/.
#
# A harness whose input is missing (a vocabulary, the model) prints a line
# `SKIP fuzz_<name>: <what is missing>`; it exits 79 when it can check nothing, and goes on
# with what it has otherwise. Skips are counted in the summary; with CI=true or
# SPINDLE_REQUIRE_FIXTURES=1 a skip is a failure.
#
# usage: tools/fuzz.sh SECONDS [NAME...]       build, then run each for SECONDS
#        tools/fuzz.sh --runs N [NAME...]      build, then each over its seeds and N more
#                                              inputs (a scratch corpus; the test's mode)
#        tools/fuzz.sh --build-only [NAME...]  build only
# (default: every harness). Exits 1 when any harness failed to build, crashed, or skipped
# under CI. FUZZ_FLAGS: extra libFuzzer flags (e.g. "-max_len=65536"); MAKE, FUZZ_CC,
# FUZZ_SANITIZE as for the Makefile.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
usage() {
    echo "usage: tools/fuzz.sh SECONDS [NAME...] | --runs N [NAME...] | --build-only [NAME...]" >&2
    exit 2
}
MODE=seconds
SECONDS_EACH=
RUNS=
case "${1:-}" in
--build-only) MODE=build; shift ;;
--runs) MODE=runs; RUNS=${2:-}; shift 2 || usage; [[ $RUNS =~ ^[0-9]+$ ]] || usage ;;
'' | -*) usage ;;
*) SECONDS_EACH=$1; shift; [[ $SECONDS_EACH =~ ^[0-9]+$ ]] || usage ;;
esac
REQUIRE=0
[[ ${CI:-} == true || ${SPINDLE_REQUIRE_FIXTURES:-0} == 1 ]] && REQUIRE=1

MAKE=${MAKE:-make}
MAKE_ARGS=(--no-print-directory)
[[ -n ${FUZZ_CC:-} ]] && MAKE_ARGS+=("FUZZ_CC=$FUZZ_CC")
[[ -n ${FUZZ_SANITIZE+set} ]] && MAKE_ARGS+=("FUZZ_SANITIZE=$FUZZ_SANITIZE")
# Where the harnesses and their corpus/ are (tests/fuzz; the test points it elsewhere).
HARNESSES=${FUZZ_HARNESS_DIR:-tests/fuzz}
MAKE_ARGS+=("FUZZ_HARNESS_DIR=$HARNESSES")
# Called from make, the jobserver is inherited; otherwise use every core.
[[ ${MAKEFLAGS:-} == *jobserver* ]] || MAKE_ARGS+=("-j$(nproc 2>/dev/null || echo 2)")
CLANG=${FUZZ_CC:-clang}
if ! command -v "${CLANG##* }" >/dev/null; then
    echo "fuzz.sh: ${CLANG##* } not found; install clang and its compiler-rt (tools/setup.sh does:" \
        "apt-get install clang libclang-rt-dev)" >&2
    exit 1
fi
OUT=${FUZZ_DIR:-$("$MAKE" -s "${MAKE_ARGS[@]}" fuzz-dir)}
LOGS=$OUT/logs
mkdir -p "$LOGS"

if [[ $# -gt 0 ]]; then
    names=("$@")
else
    names=()
    for f in "$HARNESSES"/fuzz_*.c; do
        [[ -e $f ]] || continue
        n=${f##*/fuzz_}
        names+=("${n%.c}")
    done
fi
[[ ${#names[@]} -gt 0 ]] || { echo "fuzz.sh: no harnesses in $HARNESSES/"; exit 0; }

declare -A build_state run_state note
n_built=0 n_ran=0 n_crashed=0 n_skipped=0 n_build_failed=0

# The library first: when it does not build, no harness does, and that is one message.
lib_ok=1
echo "fuzz.sh: building the instrumented library ($OUT/libspindle.a)"
if ! "$MAKE" "${MAKE_ARGS[@]}" fuzz-lib >"$LOGS/libspindle.build.log" 2>&1; then
    lib_ok=0
    echo "fuzz.sh: the instrumented library failed to build; the end of $LOGS/libspindle.build.log:" >&2
    grep -E 'error|Error' "$LOGS/libspindle.build.log" | head -20 >&2
fi

build_one() {
    local name=$1 log=$LOGS/$1.build.log
    if [[ ! -f $HARNESSES/fuzz_$name.c ]]; then
        echo "no $HARNESSES/fuzz_$name.c" >"$log"
    elif [[ $lib_ok == 1 ]] && "$MAKE" "${MAKE_ARGS[@]}" "$OUT/fuzz_$name" >"$log" 2>&1; then
        return 0
    fi
    return 1
}

run_one() {
    local name=$1 log=$LOGS/$1.run.log
    local seeds=$HARNESSES/corpus/$name crashes=$OUT/crashes/$name corpus
    mkdir -p "$crashes"
    local args=(-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/")
    # A harness's libFuzzer dictionary (its input language's keywords), when it has one.
    [[ -f $HARNESSES/fuzz_$name.dict ]] && args+=(-dict="$HARNESSES/fuzz_$name.dict")
    if [[ $MODE == runs ]]; then
        corpus=$OUT/scratch/$name
        rm -rf "$corpus"
        args+=(-runs="$RUNS" -max_total_time=60)
    else
        corpus=$OUT/corpus/$name
        args+=(-max_total_time="$SECONDS_EACH" -print_final_stats=1)
    fi
    mkdir -p "$corpus"
    local dirs=("$corpus")
    [[ -d $seeds ]] && dirs+=("$seeds")
    local rc
    if [[ $MODE == runs ]]; then
        # shellcheck disable=SC2086
        "$OUT/fuzz_$name" "${args[@]}" ${FUZZ_FLAGS:-} "${dirs[@]}" >"$log" 2>&1
        rc=$?
    else
        echo "fuzz.sh: running fuzz_$name for ${SECONDS_EACH}s (corpus $corpus, seeds $seeds)"
        # shellcheck disable=SC2086
        "$OUT/fuzz_$name" "${args[@]}" ${FUZZ_FLAGS:-} "${dirs[@]}" 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
    fi
    return "$rc"
}

for name in "${names[@]}"; do
    rm -f "$LOGS/$name.run.log"
    if ! build_one "$name"; then
        build_state[$name]="BUILD FAILED"
        note[$name]="$LOGS/$name.build.log"
        n_build_failed=$((n_build_failed + 1))
        if [[ $lib_ok == 1 ]]; then
            echo "fuzz.sh: fuzz_$name failed to build; the end of $LOGS/$name.build.log:" >&2
            tail -n 15 "$LOGS/$name.build.log" >&2
        fi
        continue
    fi
    build_state[$name]=built
    n_built=$((n_built + 1))
    [[ $MODE == build ]] && continue
    run_one "$name"
    rc=$?
    skips=$(grep -a '^SKIP ' "$LOGS/$name.run.log" | awk '!seen[$0]++')
    # 79: tests/fuzz/fuzz_skip.h's "nothing to check" (libFuzzer's crash is 77, a timeout 70)
    if [[ $rc == 79 && -n $skips ]]; then
        run_state[$name]=skipped
        n_skipped=$((n_skipped + 1))
    elif [[ $rc != 0 ]]; then
        run_state[$name]=CRASHED
        n_crashed=$((n_crashed + 1))
        echo "fuzz.sh: fuzz_$name crashed (exit $rc); inputs in $OUT/crashes/$name/, log $LOGS/$name.run.log:" >&2
        grep -a -E '^(fuzz_|==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$LOGS/$name.run.log" | head -8 >&2
    elif [[ -n $skips ]]; then
        run_state[$name]="ran, partly skipped"
        n_ran=$((n_ran + 1))
        n_skipped=$((n_skipped + 1))
    else
        run_state[$name]=ran
        n_ran=$((n_ran + 1))
    fi
    [[ -n $skips ]] && note[$name]=$skips
done

echo "fuzz.sh: summary"
for name in "${names[@]}"; do
    printf '  %-16s %-13s %-20s %s\n' "fuzz_$name" "${build_state[$name]}" "${run_state[$name]:--}" \
        "${note[$name]:-}" | sed '2,$s/^/                                                      /'
done
n=${#names[@]}
if [[ $MODE == build ]]; then
    echo "fuzz.sh: $n harnesses: $n_built built, $n_build_failed failed to build"
else
    echo "fuzz.sh: $n harnesses: $n_built built, $n_ran ran, $n_crashed crashed, $n_skipped skipped" \
        "(whole or in part), $n_build_failed failed to build"
fi
status=0
[[ $n_build_failed -gt 0 || $n_crashed -gt 0 ]] && status=1
if [[ $n_skipped -gt 0 && $REQUIRE == 1 ]]; then
    echo "fuzz.sh: skips are failures here (CI=true or SPINDLE_REQUIRE_FIXTURES=1)" >&2
    status=1
fi
exit $status

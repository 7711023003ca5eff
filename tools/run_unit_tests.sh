#!/usr/bin/env bash
# run_unit_tests.sh: runs every Criterion test binary given, prints one line per binary
# (passed, failed and skipped counted apart, from Criterion's TAP report), the reason of
# each binary's first skip, and a closing line "unit: N passed, N failed, N skipped".
# Exits non-zero when any binary failed, crashed or reported no result.
set -u
tap=$(mktemp)
trap 'rm -f "$tap"' EXIT
failed=()
total_pass=0
total_fail=0
total_skip=0
for bin in "$@"; do
    : >"$tap"
    out=$("$bin" --jobs 2 --tap="$tap" 2>&1)
    rc=$?
    pass=$(grep -E '^ok ' "$tap" | grep -vc '# SKIP')
    skip=$(grep -E '^ok .*# SKIP' "$tap" | wc -l)
    fail=$(grep -cE '^not ok' "$tap")
    total_pass=$((total_pass + pass))
    total_skip=$((total_skip + skip))
    total_fail=$((total_fail + fail))
    if [ "$rc" -eq 0 ] && [ "$fail" -eq 0 ] && [ $((pass + skip)) -gt 0 ]; then
        echo "ok    $bin: $pass passed, $skip skipped"
        if [ "$skip" -gt 0 ]; then
            echo "      skipped: $(grep -m1 -E '^ok .*# SKIP' "$tap" | sed 's/.*# SKIP //')"
        fi
    else
        echo "$out"
        grep -E '^not ok' "$tap"
        echo "FAIL  $bin (exit $rc, $pass passed, $fail failed, $skip skipped)"
        failed+=("$bin")
        [ "$fail" -eq 0 ] && total_fail=$((total_fail + 1)) # a crash or no result counts once
    fi
done
echo "unit: $total_pass passed, $total_fail failed, $total_skip skipped"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "unit tests failed: ${failed[*]}" >&2
    exit 1
fi

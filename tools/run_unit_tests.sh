#!/usr/bin/env bash
# run_unit_tests.sh: runs every Criterion test binary given, prints one summary line
# per binary, and exits non-zero when any of them failed.
set -u
failed=()
for bin in "$@"; do
    if out=$("$bin" --jobs 2 2>&1); then
        echo "ok    $bin: $(echo "$out" | grep -E '^\[====\] Synthesis' | sed 's/.*Synthesis: //')"
    else
        echo "$out"
        echo "FAIL  $bin"
        failed+=("$bin")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "unit tests failed: ${failed[*]}" >&2
    exit 1
fi

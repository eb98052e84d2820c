#!/bin/sh
# make check: run every suite target, keep going after a failure so one
# broken suite does not hide the others, then print the summary.
# Usage: check-all.sh RESULTS MAKE TARGET...
# A target that fails without a failing suite of its own in RESULTS (a
# build error, a script that died) is recorded as one failure.
results=$1
make=$2
shift 2
: > "$results"
for target in "$@"; do
    before=$(awk '$1 ~ /^[0-9]+$/ { f += $2 } END { print f + 0 }' "$results")
    echo "==== make $target"
    if ! $make "$target"; then
        after=$(awk '$1 ~ /^[0-9]+$/ { f += $2 } END { print f + 0 }' "$results")
        if [ "$after" -eq "$before" ]; then
            echo "0 1 0" >> "$results"
            echo "fail make $target: the target failed outside any test program" >> "$results"
        fi
    fi
done
exec "$(dirname "$0")/summary.sh" "$results"

#!/bin/sh
# Print the totals of every test program run by run-suite.sh (and of the
# make targets tests/check-all.sh ran), then each skip with its reason and
# each failure (a failing check, or a program that failed outside its
# checks).  Exits 1 on any failure.
awk '
    $1 == "skip" { sub(/^skip /, ""); skips[++ns] = $0; next }
    $1 == "fail" { sub(/^fail /, ""); fails[++nf] = $0; next }
    $1 ~ /^[0-9]+$/ { p += $1; f += $2; s += $3 }
    END {
        for (i = 1; i <= nf; i++) printf "failed: %s\n", fails[i]
        for (i = 1; i <= ns; i++) printf "skipped: %s\n", skips[i]
        printf "check: %d passed, %d failed, %d skipped\n", p, f, s
        exit f > 0
    }' "$1"

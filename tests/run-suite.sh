#!/bin/sh
# Run one test program, show its output, and add its Check totals to
# RESULTS (one "passed failed" line per program) for tests/summary.sh.
# Usage: run-suite.sh RESULTS CMD [ARGS...]; exits with CMD's status
# (77 = skipped, counted as neither).
results=$1
shift
out=$(mktemp)
"$@" >"$out" 2>&1
rc=$?
cat "$out"
# "100%: Checks: 20, Failures: 0, Errors: 0"
awk -v rc="$rc" '
    /Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+/ {
        gsub(/,/, ""); for (i = 1; i <= NF; i++) {
            if ($i == "Checks:") c += $(i + 1); if ($i == "Failures:") f += $(i + 1); if ($i == "Errors:") e += $(i + 1)
        }
        seen = 1
    }
    END {
        if (seen) print c - f - e, f + e
        else if (rc == 0) print 1, 0
        else if (rc != 77) print 0, 1
    }' "$out" >> "$results"
rm -f "$out"
exit $rc

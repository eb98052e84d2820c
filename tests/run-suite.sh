#!/bin/sh
# Run one test program, show its output, and add its totals to RESULTS for
# tests/summary.sh: one "passed failed skipped" line per program, and one
# "skip NAME: REASON" line per skip.
#   - check's "Checks: N, Failures: F, Errors: E" line gives the counts;
#   - a test that printed "SKIPPED: <test>: <reason>" (CHECK_SKIP in
#     tests/check_run.h) is a skip, not a pass;
#   - exit status 77 means the whole program was skipped; its reason is
#     the line "*** SKIPPED: <reason> ***" it printed;
#   - a program without a check line passed if it exited 0;
#   - each failing check (check's "file:line:F:tcase:test:i: message" or
#     ":E:" line) is also written as "fail PROG: that line", so the last
#     lines of make check (all CI keeps) name the failed tests.
# Usage: run-suite.sh RESULTS CMD [ARGS...]; exits with CMD's status.
results=$1
shift
out=$(mktemp)
"$@" >"$out" 2>&1
rc=$?
cat "$out"
prog=$1
case "$prog" in valgrind) for a in "$@"; do case "$a" in -*|valgrind) ;; *) prog=$a; break ;; esac; done ;; esac
prog=$(basename "$prog")
awk -v rc="$rc" -v prog="$prog" '
    /Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+/ {
        line = $0; gsub(/,/, "", line); n = split(line, w, " ")
        for (i = 1; i <= n; i++) {
            if (w[i] == "Checks:") c += w[i + 1]; if (w[i] == "Failures:") f += w[i + 1]; if (w[i] == "Errors:") e += w[i + 1]
        }
        seen = 1
    }
    /^[^ :]+:[0-9]+:[FE]:/ { nfl++; failline[nfl] = substr($0, 1, 300) }
    /^SKIPPED: / { s++; reason[s] = substr($0, 10) }
    /\*\*\* SKIPPED: / { all = $0; sub(/.*\*\*\* SKIPPED: /, "", all); sub(/ *\*\*\*.*$/, "", all) }
    END {
        if (rc == 77) {
            print 0, 0, 1
            print "skip " prog ": " (all != "" ? all : "exit status 77, no reason printed")
            exit
        }
        if (seen && rc != 0 && f + e == 0) {
            # every check passed but the program failed (valgrind, a sanitizer)
            print c - s - 1, 1, s + 0
            print "fail " prog ": exit status " rc " after its checks passed"
        } else if (seen) print c - f - e - s, f + e, s + 0
        else if (rc == 0) print 1, 0, 0
        else print 0, 1, 0
        for (i = 1; i <= s; i++) print "skip " prog ": " reason[i]
        for (i = 1; i <= nfl; i++) print "fail " prog ": " failline[i]
        if (!seen && rc != 0) print "fail " prog ": exit status " rc
    }' "$out" >> "$results"
rm -f "$out"
exit $rc

#!/bin/sh
# Print the totals of every test program run by run-suite.sh.
awk '{p += $1; f += $2} END {printf "check: %d passed, %d failed\n", p, f; exit f > 0}' "$1"

#!/bin/bash
# Every decision the policy's trace tests make, for a change that must not
# change behaviour (a refactoring): run it on the commit before and after
# and compare.  check_need (need traces and the lying-guest adversary) and
# check_fleet (1000 random fleets, split-lru against none, mom, proxmox)
# write each decision of each tick (tests/unit/decision_trace.c).
#
#   tests/decision-trace.sh BUILD OUT        write OUT (a digest of each suite, and
#                                            OUT.full with every line)
#   tests/decision-trace.sh BUILD OUT REF    ... and exit 1 unless OUT equals REF
set -u
build=${1:?usage: decision-trace.sh BUILD OUT [REF]} out=${2:?} ref=${3:-}
rm -f "$out" "$out.full"
for t in check_need check_fleet; do
    tmp=$(mktemp)
    # one process, so that the order of the tests is the order of the lines
    if ! CK_FORK=no MEMBAL_DECISION_TRACE="$tmp" "$build/tests/$t" >/dev/null 2>&1; then
        echo "FAIL: $t did not pass"; rm -f "$tmp"; exit 1
    fi
    echo "$t $(wc -l <"$tmp") lines $(sha256sum <"$tmp" | cut -c1-16)" >>"$out"
    cat "$tmp" >>"$out.full"; rm -f "$tmp"
done
cat "$out"
[ -z "$ref" ] && exit 0
if cmp -s "$out" "$ref"; then echo "same decisions as $ref"; exit 0; fi
echo "DIFFERENT decisions from $ref; first difference:"
diff "$ref.full" "$out.full" | head -20
exit 1

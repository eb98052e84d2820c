#!/bin/bash
# Man pages render without groff warnings; balancerctl's bash completion
# parses and completes its commands and options.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
fail=0 checks=3
for m in balancerd.8 balancerctl.8 guest-agent/balancer-agent.8; do
    out=$(groff -man -ww -z "$top/$m" 2>&1)
    if [ -n "$out" ]; then echo "FAIL: $m: $out"; fail=$((fail + 1)); else echo "ok: $m renders cleanly"; fi
done
comp=$top/contrib/bash-completion/balancerctl
if ! bash -n "$comp"; then
    echo "FAIL: $comp does not parse"; fail=$((fail + 1))
elif [ ! -f /usr/share/bash-completion/bash_completion ]; then
    checks=4
    echo "SKIPPED: completion: bash-completion is not installed (make deps)"
else
    complete_words() { # words... -> COMPREPLY
        bash -c 'source /usr/share/bash-completion/bash_completion; source "$0"
                 COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
                 _balancerctl; echo "${COMPREPLY[*]}"' "$comp" "$@"
    }
    check() { # expected, words...
        want=$1; shift
        checks=$((checks + 1))
        got=$(complete_words "$@")
        if [ "$got" = "$want" ]; then echo "ok: $* -> '$got'"
        else echo "FAIL: $*: got '$got', want '$want'"; fail=$((fail + 1)); fi
    }
    check "status" balancerctl st
    check "policy pause" balancerctl p
    check "--json" balancerctl --j
    check "" balancerctl status ""
fi
echo "Checks: $checks, Failures: $fail, Errors: 0"
[ "$fail" = 0 ]

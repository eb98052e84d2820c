#!/bin/sh
# The shipped Prometheus rules: syntax (promtool check rules) and behaviour
# (promtool test rules over tests/prometheus/membal-rules.test.yml).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v promtool >/dev/null 2>&1; then
    echo "*** SKIPPED: promtool not installed (Debian package prometheus; make deps) ***"
    exit 77
fi
promtool check rules "$here/../../contrib/prometheus/membal-rules.yml"
cd "$here" && promtool test rules membal-rules.test.yml

#!/bin/sh
# A real Prometheus (Debian's server) scrapes a real balancerd over three
# simulated QMP guests (tests/faults/fake_qemu.c) with the shipped rules
# loaded: the guests' series arrive, every recording rule has a value, and
# every rule group evaluates without error (through Prometheus's HTTP API).
# Usage: tests/prometheus/scrape.sh [--build DIR (build)]
set -eu
build=build
[ "${1:-}" = --build ] && build=$2
top=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v prometheus >/dev/null 2>&1; then
    echo "*** SKIPPED: the prometheus server is not installed (Debian package prometheus; make deps) ***"
    exit 77
fi
work=$(mktemp -d /tmp/membal-prom-XXXXXX)
fake_pid= daemon_pid= prom_pid=
cleanup() {
    for p in $prom_pid $daemon_pid $fake_pid; do kill "$p" 2>/dev/null || true; done
    sleep 0.5
    for p in $prom_pid $daemon_pid $fake_pid; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mport=$(free_port) pport=$(free_port)

"$top/$build/tests/fake_qemu" "$work" 3 1024 > "$work/fake.log" 2>&1 &
fake_pid=$!
for _ in $(seq 50); do grep -q ready "$work/fake.log" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$work/fake.log" || { echo "scrape: fake_qemu did not start" >&2; exit 1; }
qmp_args=
for s in "$work"/fake-*.sock; do qmp_args="$qmp_args --qmp $s"; done
printf '[balancer]\ntick = 1\nstats_period = 1\n' > "$work/balancer.conf"
# shellcheck disable=SC2086
"$top/$build/balancerd" --config "$work/balancer.conf" --metrics-listen "127.0.0.1:$mport" \
    --control-socket "" $qmp_args > "$work/daemon.log" 2>&1 &
daemon_pid=$!

cp "$top/contrib/prometheus/membal-rules.yml" "$work/"
cat > "$work/prometheus.yml" <<CONF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [membal-rules.yml]
scrape_configs:
  - job_name: membal
    static_configs: [{targets: ['127.0.0.1:$mport']}]
CONF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
    --web.listen-address="127.0.0.1:$pport" > "$work/prometheus.log" 2>&1 &
prom_pid=$!

q() { # PromQL -> number of series in the answer
    curl -sf --get "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["data"]["result"]) if d["status"]=="success" else -1)'
}
ok=0
for _ in $(seq 60); do
    sleep 1
    [ "$(q 'up{job="membal"} == 1' 2>/dev/null || echo 0)" = 1 ] || continue
    [ "$(q 'balancer_guest_actual_bytes' 2>/dev/null || echo 0)" = 3 ] || continue
    [ "$(q 'membal:host_working_set_bytes' 2>/dev/null || echo 0)" -ge 1 ] || continue
    ok=1
    break
done
if [ "$ok" != 1 ]; then
    echo "scrape: series did not arrive in 60 s" >&2
    tail -n 20 "$work/prometheus.log" "$work/daemon.log" >&2
    exit 1
fi
fail=0
for expr in membal:host_working_set_bytes membal:host_capacity_bytes membal:guest_migration_candidate \
            balancer_guest_peak_used_bytes balancer_guest_in_need balancer_guest_thrashing \
            balancer_guest_self_deflations_total balancer_guest_stats_stale balancer_info; do
    n=$(q "$expr")
    if [ "$n" -ge 1 ]; then echo "ok: $expr ($n series)"; else echo "FAIL: $expr has no series"; fail=1; fi
done
# every group loaded, every rule evaluated without error
curl -sf "http://127.0.0.1:$pport/api/v1/rules" | python3 -c '
import json, sys
d = json.load(sys.stdin)["data"]["groups"]
names = sorted(g["name"] for g in d)
bad = [r["name"] for g in d for r in g["rules"] if r.get("health") != "ok"]
n = sum(len(g["rules"]) for g in d)
print("rules: %d in %s, unhealthy: %s" % (n, names, bad or "none"))
sys.exit(1 if bad or names != ["membal.alerts", "membal.rules"] or n < 12 else 0)' || fail=1
# every query of the Grafana dashboard is valid PromQL over these series
# ($instance/$guest as "all"), and those of the host and per-guest panels
# have data (host reclaim is off here, so its panels may be empty)
python3 - "$top/contrib/grafana/membal-dashboard.json" "http://127.0.0.1:$pport" <<'PY' || fail=1
import json, sys, urllib.parse, urllib.request
dash, base = json.load(open(sys.argv[1])), sys.argv[2]
bad = 0
for panel in dash["panels"]:
    for t in panel.get("targets", []):
        expr = t["expr"].replace("$instance", ".*").replace("$guest", ".*")
        url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            d = json.load(urllib.request.urlopen(url))
        except Exception as e:
            print("FAIL: %s: %s" % (t["expr"], e)); bad = 1; continue
        n = len(d["data"]["result"]) if d["status"] == "success" else -1
        empty_ok = "balancer_guest_host_" in expr or "balancer_host_reclaim_" in expr  # reclaim is off here
        if n < 0 or (n == 0 and not empty_ok and "rate(" not in expr and "increase(" not in expr):
            print("FAIL: %s -> %d series" % (t["expr"], n)); bad = 1
print("dashboard: %d panels checked%s" % (len(dash["panels"]), ", all queries valid" if not bad else ""))
sys.exit(bad)
PY
[ "$fail" = 0 ] && echo "scrape: Prometheus scraped balancerd and evaluated every rule and dashboard query"
exit $fail

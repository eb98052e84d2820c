#!/bin/sh
# Scale: what balancerd costs with many guests.  N simulated guests
# (tests/faults/fake_qemu, each behind its own QMP socket, memory use
# swinging so that balancerd decides every tick) at a 1 s tick, the host
# "short" so every guest is balanced each tick.  Each run measures, over
# SECONDS after a 10 s warm-up: balancerd's CPU (% of one core, from
# /proc/PID/stat), its tick latency (p50, p99, max of the ticks it logs
# with --verbose), its peak RSS (VmHWM) and the guests it manages.  RUNS
# runs; prints each run, then medians and spread (min..max), and whether
# the targets hold (< 1% of a core, RSS < 32 MiB).
#
# Usage: bench/scale.sh [--guests N (200)] [--seconds S (60)] [--runs R (3)]
#                       [--build DIR (build)]
# Exit status: 0 when the targets hold in the median, 1 otherwise.
set -eu

guests=200 seconds=60 runs=3 build=build
while [ $# -gt 0 ]; do
    case $1 in
        --guests) guests=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --build) build=$2; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "scale: unknown argument $1" >&2; exit 2 ;;
    esac
done
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/membal-scale-XXXXXX)
fake_pid= daemon_pid=
cleanup() {
    [ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null || true
    [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
hz=$(getconf CLK_TCK)

cat > "$work/balancer.conf" <<EOF
[balancer]
tick = 1
stats_period = 1
[watermarks]
min = 1%
low = 99.5%
high = 99.8%
[guests]
default_floor_percent = 40
default_floor_min = 256MiB
EOF

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

printf '%-4s %7s %10s %10s %10s %9s %7s\n' run guests "cpu%core" "tick p50" "tick p99" "tick max" "RSS MiB"
: > "$work/rows"
r=1
while [ "$r" -le "$runs" ]; do
    rm -rf "$work/g" && mkdir "$work/g"
    "$top/$build/tests/fake_qemu" "$work/g" "$guests" 1024 > "$work/fake.log" 2>&1 &
    fake_pid=$!
    for _ in $(seq 50); do grep -q ready "$work/fake.log" 2>/dev/null && break; sleep 0.1; done
    qmp_args=
    for s in "$work"/g/fake-*.sock; do qmp_args="$qmp_args --qmp $s"; done
    # shellcheck disable=SC2086
    "$top/$build/balancerd" --config "$work/balancer.conf" --verbose --metrics-listen "" \
        --control-socket "$work/ctl.sock" $qmp_args > "$work/daemon.log" 2>&1 &
    daemon_pid=$!
    sleep 10
    c0=$(cpu_ticks "$daemon_pid") l0=$(wc -l < "$work/daemon.log") t0=$(date +%s.%N)
    sleep "$seconds"
    c1=$(cpu_ticks "$daemon_pid") t1=$(date +%s.%N)
    hwm=$(awk '/^VmHWM/{print $2}' "/proc/$daemon_pid/status")
    managed=$("$top/$build/balancerctl" --socket "$work/ctl.sock" --json status | grep -o '"domain"' | wc -l)
    kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=
    kill "$fake_pid"; wait "$fake_pid" || true; fake_pid=
    tail -n +"$((l0 + 1))" "$work/daemon.log" | sed -n 's/.*debug: tick [0-9]*:.*(\([0-9.]*\) s)$/\1/p' |
        sort -n > "$work/ticks"
    n=$(wc -l < "$work/ticks")
    p50=$(awk -v n="$n" 'NR == int((n + 1) * 0.50) || (n == 1) {print; exit}' "$work/ticks")
    p99=$(awk -v n="$n" 'NR == int(n * 0.99 + 0.999) {print; exit}' "$work/ticks")
    max=$(tail -n 1 "$work/ticks")
    cpu=$(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" -v hz="$hz" 'BEGIN {printf "%.2f", 100 * (b - a) / hz / (e - s)}')
    rss=$(awk -v k="$hwm" 'BEGIN {printf "%.1f", k / 1024}')
    printf '%-4s %7s %10s %10s %10s %9s %7s\n' "$r" "$managed" "$cpu" "$p50" "$p99" "$max" "$rss"
    echo "$managed $cpu $p50 $p99 $max $rss" >> "$work/rows"
    r=$((r + 1))
done
med() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)] " (" v[1] ".." v[NR] ")"}'; }
echo
echo "scale: $guests fake QMP guests, 1 s tick, $runs run(s) of ${seconds}s; median (min..max):"
echo "  CPU % of a core: $(cut -d' ' -f2 "$work/rows" | med)"
echo "  tick p50 s:      $(cut -d' ' -f3 "$work/rows" | med)"
echo "  tick p99 s:      $(cut -d' ' -f4 "$work/rows" | med)"
echo "  tick max s:      $(cut -d' ' -f5 "$work/rows" | med)"
echo "  peak RSS MiB:    $(cut -d' ' -f6 "$work/rows" | med)"
cpu_med=$(cut -d' ' -f2 "$work/rows" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
rss_med=$(cut -d' ' -f6 "$work/rows" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
ok=$(awk -v c="$cpu_med" -v r="$rss_med" 'BEGIN {print (c < 1.0 && r < 32) ? 1 : 0}')
if [ "$ok" = 1 ]; then echo "scale: targets met (< 1% of a core, RSS < 32 MiB)"; exit 0; fi
echo "scale: targets MISSED (< 1% of a core, RSS < 32 MiB)"
exit 1

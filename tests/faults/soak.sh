#!/bin/sh
# Soak: balancerd at a 1 s tick over many simulated guests (fake QMP
# servers, tests/faults/fake_qemu.c) plus one real QEMU guest, for a long
# time.  Every 10 s the daemon's RSS and open file descriptors are sampled;
# after a warm-up both must stay flat, the daemon must stay up and keep
# ticking, and it must exit cleanly at the end.
#
# Usage: tests/faults/soak.sh [--seconds N (600)] [--guests N (50)]
#                             [--build DIR (build)] [--no-real-guest]
# make soak runs the full 10 minutes; make check runs a 40 s version.
set -eu

seconds=600 guests=50 build=build real=1
while [ $# -gt 0 ]; do
    case $1 in
        --seconds) seconds=$2; shift 2 ;;
        --guests) guests=$2; shift 2 ;;
        --build) build=$2; shift 2 ;;
        --no-real-guest) real=0; shift ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "soak: unknown argument $1" >&2; exit 2 ;;
    esac
done
top=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/membal-soak-XXXXXX)
fake_pid= daemon_pid= vm_pid=
cleanup() {
    [ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null || true
    [ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null || true
    [ -n "$vm_pid" ] && kill "$vm_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

"$top/$build/tests/fake_qemu" "$work" "$guests" 1024 > "$work/fake.log" 2>&1 &
fake_pid=$!
for _ in $(seq 50); do grep -q ready "$work/fake.log" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$work/fake.log" || { echo "soak: fake_qemu did not start" >&2; cat "$work/fake.log" >&2; exit 1; }

qmp_args=
for s in "$work"/fake-*.sock; do qmp_args="$qmp_args --qmp $s"; done
if [ "$real" = 1 ]; then
    out=$("$top/tests/guest/boot-guest.sh" --run-dir "$work/vm" --guest-dir "$top/build/guest" --mem 512 \
          --append "membal.report=1 membal.run=wss:128:50")
    vm_pid=$(echo "$out" | sed -n 's/.*pid=\([0-9]*\).*/\1/p')
    qmp=$(echo "$out" | sed -n 's/.*qmp=\([^ ]*\).*/\1/p')
    qmp_args="$qmp_args --qmp $qmp"
fi

# The host counts as short (low watermark near 100%), so every guest is
# balanced every tick; floors keep them from going to zero.
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
# shellcheck disable=SC2086
"$top/$build/balancerd" --config "$work/balancer.conf" --metrics-listen "" \
    --control-socket "$work/ctl.sock" $qmp_args > "$work/daemon.log" 2>&1 &
daemon_pid=$!

rss() { awk '/^VmRSS/{print $2}' "/proc/$daemon_pid/status"; }
fds() { ls "/proc/$daemon_pid/fd" | wc -l; }
warm=$((seconds / 6)); [ "$warm" -lt 20 ] && warm=20
printf '%8s %10s %6s %8s\n' "t(s)" "RSS(KiB)" "fds" "ticks"
start=$(date +%s) base_rss= base_fds= max_rss=0 fail=0
while :; do
    sleep 10
    kill -0 "$daemon_pid" 2>/dev/null || { echo "soak: balancerd died" >&2; tail -n 30 "$work/daemon.log" >&2; exit 1; }
    t=$(( $(date +%s) - start ))
    r=$(rss) f=$(fds)
    ticks=$("$top/$build/balancerctl" --socket "$work/ctl.sock" --json status 2>/dev/null |
            sed -n 's/.*"ticks": *\([0-9]*\).*/\1/p')
    printf '%8s %10s %6s %8s\n' "$t" "$r" "$f" "${ticks:-?}"
    if [ "$t" -ge "$warm" ] && [ -z "$base_rss" ]; then base_rss=$r base_fds=$f; fi
    [ "$r" -gt "$max_rss" ] && max_rss=$r
    [ "$t" -ge "$seconds" ] && break
done
"$top/$build/balancerctl" --socket "$work/ctl.sock" --json status > "$work/status.json"
guests_seen=$(grep -o '"domain"' "$work/status.json" | wc -l)
# nobody below its floor, liars (every fifth fake guest) included
grep -o '"actual_bytes": *[0-9]*' "$work/status.json" | grep -o '[0-9]*$' > "$work/actual"
grep -o '"floor_bytes": *[0-9]*' "$work/status.json" | grep -o '[0-9]*$' > "$work/floor"
below=$(paste "$work/actual" "$work/floor" | awk '$1 < $2' | wc -l)
kill -TERM "$daemon_pid"
rc=0; wait "$daemon_pid" || rc=$?
daemon_pid=
end_rss=$r end_fds=$f
growth=$((end_rss - base_rss))
echo "soak: ${seconds}s, $guests_seen guests; RSS after warm-up ${base_rss} KiB, at the end ${end_rss} KiB (growth ${growth} KiB, max ${max_rss}); fds ${base_fds} -> ${end_fds}; exit status $rc"
# RSS may move by allocator noise, not grow with time: allow 2 MiB or 5%
allow=$((base_rss / 20)); [ "$allow" -lt 2048 ] && allow=2048
[ "$growth" -le "$allow" ] || { echo "soak: FAIL: RSS grew by $growth KiB" >&2; fail=1; }
[ "$end_fds" -le "$base_fds" ] || { echo "soak: FAIL: file descriptors grew" >&2; fail=1; }
[ "$rc" -eq 0 ] || { echo "soak: FAIL: balancerd exited with $rc" >&2; fail=1; }
want=$guests; [ "$real" = 1 ] && want=$((guests + 1))
[ "$guests_seen" -ge "$want" ] || { echo "soak: FAIL: only $guests_seen of $want guests managed" >&2; fail=1; }
grep -q "balloon" "$work/daemon.log" || { echo "soak: FAIL: no balloon decisions at all" >&2; fail=1; }
[ "$(wc -l < "$work/actual")" -eq "$guests_seen" ] && [ "$(wc -l < "$work/floor")" -eq "$guests_seen" ] ||
    { echo "soak: FAIL: could not read every guest's size and floor" >&2; fail=1; }
[ "$below" -eq 0 ] || { echo "soak: FAIL: $below guests below their floor" >&2; fail=1; }
echo "soak: guests below floor: $below; lying guests: $((guests / 5)) (their values clamped, see balancer_guest_clamped_values_total)"
exit $fail

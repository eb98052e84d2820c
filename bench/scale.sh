#!/bin/sh
# Scale: what balancerd costs with many guests.  N simulated guests at a
# 1 s tick, memory use swinging so that balancerd decides every tick, the
# host "short" so every guest is balanced each tick, through either backend:
#   qmp      tests/faults/fake_qemu, each guest behind its own QMP socket;
#   libvirt  libvirt's test driver (test:///NODE.xml, N domains) in a
#            libvirtd of its own (a session daemon as nobody when run as
#            root), reached over real RPC; bench/scale/balloon_shim.c,
#            preloaded into balancerd, adds the balloon statistics the test
#            driver leaves out of the bulk call.
# Each run measures, over SECONDS after a warm-up: balancerd's CPU (% of
# one core, from /proc/PID/stat), its tick latency (p50, p99, max of the
# ticks it logs with --verbose), its peak RSS (VmHWM) and the guests it
# manages; then, over SYSCALL_SECONDS more, its system calls (all threads,
# perf record of raw_syscalls, or strace -c -f where perf cannot trace)
# per guest per tick, kept apart from the CPU window as tracing costs CPU.  balancerd
# starts with a soft RLIMIT_NOFILE of NOFILE (1024, systemd's default).
# RUNS runs; prints each run, then medians and spread (min..max), the
# system calls of the last run by name, and whether the targets hold
# (< 1% of a core at 1000 guests or fewer, RSS < 48 MiB, tick p99 < 100 ms).
#
# Usage: bench/scale.sh [--guests N (200)] [--backend qmp|libvirt (qmp)]
#                       [--seconds S (60)] [--syscall-seconds S (20)]
#                       [--runs R (3)] [--nofile N (1024)] [--build DIR (build)]
# Exit status: 0 when the targets hold in the median, 1 otherwise.
set -eu

guests=200 backend=qmp seconds=60 sys_seconds=20 runs=3 nofile=1024 build=build
while [ $# -gt 0 ]; do
    case $1 in
        --guests) guests=$2; shift 2 ;;
        --backend) backend=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --syscall-seconds) sys_seconds=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --nofile) nofile=$2; shift 2 ;;
        --build) build=$2; shift 2 ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "scale: unknown argument $1" >&2; exit 2 ;;
    esac
done
case $backend in qmp|libvirt) ;; *) echo "scale: --backend qmp or libvirt" >&2; exit 2 ;; esac
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/membal-scale-XXXXXX)
chmod 755 "$work"
fake_pid= daemon_pid= lvd_pid=
stop_guests() {
    [ -n "$fake_pid" ] && { kill "$fake_pid" 2>/dev/null; wait "$fake_pid" 2>/dev/null || true; }
    [ -n "$lvd_pid" ] && { kill "$lvd_pid" 2>/dev/null; wait "$lvd_pid" 2>/dev/null || true; }
    fake_pid= lvd_pid=
}
cleanup() {
    [ -n "$daemon_pid" ] && kill -9 "$daemon_pid" 2>/dev/null || true
    stop_guests
    [ -n "${SCALE_KEEP:-}" ] && echo "scale: kept $work" >&2 || rm -rf "$work"
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

# libvirt: N domains of 1 GiB with a balloon, uuids as fake_qemu's
node_xml() {
    echo "<node>"
    i=0
    while [ "$i" -lt "$guests" ]; do
        printf "<domain type='test'><name>fake-%02d</name><uuid>00000000-0000-4000-8000-%012x</uuid>" "$i" "$((i + 1))"
        printf "<memory unit='MiB'>1024</memory><currentMemory unit='MiB'>1024</currentMemory><vcpu>1</vcpu>"
        printf "<os><type>hvm</type></os><devices><memballoon model='virtio'/></devices></domain>\n"
        i=$((i + 1))
    done
    echo "</node>"
}

# Start the guests; the balancerd arguments that reach them go to $work/args.
start_guests() {
    rm -rf "$work/g" && mkdir -m 755 "$work/g"
    if [ "$backend" = qmp ]; then
        "$top/$build/tests/fake_qemu" "$work/g" "$guests" 1024 > "$work/fake.log" 2>&1 &
        fake_pid=$!
        for _ in $(seq 100); do grep -q ready "$work/fake.log" 2>/dev/null && break; sleep 0.1; done
        for s in "$work"/g/fake-*.sock; do printf ' --qmp %s' "$s"; done > "$work/args"
        return
    fi
    node_xml > "$work/g/node.xml"
    mkdir -p "$work/g/lvd"
    as=
    if [ "$(id -u)" = 0 ]; then chown nobody "$work/g/lvd"; as="setpriv --reuid=nobody --regid=nogroup --clear-groups"; fi
    # shellcheck disable=SC2086
    env -i PATH="$PATH" HOME="$work/g/lvd" XDG_RUNTIME_DIR="$work/g/lvd" XDG_CONFIG_HOME="$work/g/lvd/config" \
        XDG_CACHE_HOME="$work/g/lvd/cache" $as libvirtd --timeout 0 > "$work/libvirtd.log" 2>&1 &
    lvd_pid=$!
    sock="$work/g/lvd/libvirt/libvirt-sock"
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { echo "scale: libvirtd did not start" >&2; cat "$work/libvirtd.log" >&2; exit 1; }
    printf ' --connect test+unix://%s?socket=%s' "$work/g/node.xml" "$sock" > "$work/args"
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# System calls of every thread of $1 over $2 s, "NAME CALLS" a line, into
# $3.  perf record follows the threads started meanwhile (libvirt's calls
# run in GLib pool threads, started and ended by the tick), which perf
# trace -p and its summary do not; strace -f where perf cannot trace.
# Over S s of 1 s ticks, S or S + 1 ticks are counted (the first and last
# bursts of a tick may both fall inside): the error is 1 / S at most.
count_syscalls() {
    unistd=/usr/include/x86_64-linux-gnu/asm/unistd_64.h
    if perf record -q -e raw_syscalls:sys_enter -o "$3.data" -- true > /dev/null 2>&1 && [ -r "$unistd" ]; then
        perf record -q -e raw_syscalls:sys_enter -p "$1" -o "$3.data" -- sleep "$2" > /dev/null 2>&1 || true
        perf script -i "$3.data" -F trace 2> /dev/null | awk -v u="$unistd" '
            BEGIN { while ((getline l < u) > 0) if (split(l, f, " ") == 3 && f[2] ~ /^__NR_/) name[f[3]] = substr(f[2], 6) }
            $1 == "NR" { c[$2 in name ? name[$2] : "nr" $2]++ }
            END { for (k in c) print k, c[k] }' | sort -k2,2nr > "$3"
    else
        timeout -s INT "$2" strace -f -c -q -p "$1" -o "$3.raw" > /dev/null 2>&1 || true
        awk '$4 ~ /^[0-9]+$/ && $NF ~ /^[a-z_0-9]+$/ && $NF != "total" {print $NF, $4}' "$3.raw" | sort -k2,2nr > "$3"
    fi
}

printf '%-4s %7s %10s %10s %10s %9s %7s %10s\n' run guests "cpu%core" "tick p50" "tick p99" "tick max" "RSS MiB" "sys/g/tick"
: > "$work/rows"
r=1
while [ "$r" -le "$runs" ]; do
    start_guests
    preload=
    [ "$backend" = libvirt ] && preload="LD_PRELOAD=$top/$build/bench/membal-balloon-shim.so"
    # shellcheck disable=SC2046,SC2086
    (ulimit -Sn "$nofile" && exec env $preload "$top/$build/balancerd" --config "$work/balancer.conf" --verbose \
        --metrics-listen "" --control-socket "$work/ctl.sock" $(cat "$work/args")) > "$work/daemon.log" 2>&1 &
    daemon_pid=$!
    sleep 15
    c0=$(cpu_ticks "$daemon_pid") l0=$(wc -l < "$work/daemon.log") t0=$(date +%s.%N)
    sleep "$seconds"
    c1=$(cpu_ticks "$daemon_pid") t1=$(date +%s.%N) l1=$(wc -l < "$work/daemon.log")
    managed=$("$top/$build/balancerctl" --socket "$work/ctl.sock" --json status | grep -o '"domain"' | wc -l)
    count_syscalls "$daemon_pid" "$sys_seconds" "$work/sys"
    span=$sys_seconds
    hwm=$(awk '/^VmHWM/{print $2}' "/proc/$daemon_pid/status")
    kill -TERM "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=
    stop_guests
    sed -n "$((l0 + 1)),${l1}p" "$work/daemon.log" | sed -n 's/.*debug: tick [0-9]*:.*(\([0-9.]*\) s)$/\1/p' |
        sort -n > "$work/ticks"
    n=$(wc -l < "$work/ticks")
    p50=$(awk -v n="$n" 'NR == int((n + 1) * 0.50) || (n == 1) {print; exit}' "$work/ticks")
    p99=$(awk -v n="$n" 'NR == int(n * 0.99 + 0.999) {print; exit}' "$work/ticks")
    max=$(tail -n 1 "$work/ticks")
    cpu=$(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" -v hz="$hz" 'BEGIN {printf "%.2f", 100 * (b - a) / hz / (e - s)}')
    rss=$(awk -v k="$hwm" 'BEGIN {printf "%.1f", k / 1024}')
    calls=$(awk '{s += $2} END {print s + 0}' "$work/sys")
    # per guest per second, which at a 1 s tick is per tick
    spgt=$(awk -v c="$calls" -v g="$managed" -v t="$span" 'BEGIN {printf "%.1f", (g && t > 0) ? c / g / t : -1}')
    printf '%-4s %7s %10s %10s %10s %9s %7s %10s\n' "$r" "$managed" "$cpu" "$p50" "$p99" "$max" "$rss" "$spgt"
    echo "$managed $cpu $p50 $p99 $max $rss $spgt" >> "$work/rows"
    awk -v g="$managed" -v t="$span" '(g && t > 0) {printf "%s %.2f\n", $1, $2 / g / t}' "$work/sys" > "$work/sys.last"
    r=$((r + 1))
done
med() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)] " (" v[1] ".." v[NR] ")"}'; }
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo
echo "scale: $guests guests over $backend, 1 s tick, $runs run(s) of ${seconds}s; median (min..max):"
echo "  guests managed:  $(cut -d' ' -f1 "$work/rows" | med)"
echo "  CPU % of a core: $(cut -d' ' -f2 "$work/rows" | med)"
echo "  tick p50 s:      $(cut -d' ' -f3 "$work/rows" | med)"
echo "  tick p99 s:      $(cut -d' ' -f4 "$work/rows" | med)"
echo "  tick max s:      $(cut -d' ' -f5 "$work/rows" | med)"
echo "  peak RSS MiB:    $(cut -d' ' -f6 "$work/rows" | med)"
echo "  syscalls/guest/tick: $(cut -d' ' -f7 "$work/rows" | med)"
echo "  the last run's, by name (per guest per tick): $(head -n 8 "$work/sys.last" | tr '\n' ' ')"
cpu_med=$(cut -d' ' -f2 "$work/rows" | median)
rss_med=$(cut -d' ' -f6 "$work/rows" | median)
p99_med=$(cut -d' ' -f4 "$work/rows" | median)
ok=$(awk -v c="$cpu_med" -v r="$rss_med" -v p="$p99_med" -v g="$guests" \
     'BEGIN {print ((g > 1000 || c < 1.0) && r < 48 && p != "" && p < 0.1) ? 1 : 0}')
goal="< 1% of a core at 1000 guests or fewer, RSS < 48 MiB, tick p99 < 100 ms"
if [ "$ok" = 1 ]; then echo "scale: targets met ($goal)"; exit 0; fi
echo "scale: targets MISSED ($goal)"
exit 1

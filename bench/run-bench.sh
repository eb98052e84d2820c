#!/bin/bash
# The seed scenario with real guests: a database-like guest W (hot working
# set, random read-modify-write) shares a memory-limited host with a guest S
# that streams a disk much larger than its RAM through its page cache.
# Each policy runs the same scenario; the table says what W and S got.
#
# Usage: bench/run-bench.sh [--smoke] [--runs N] [--measure S] [--warmup S]
#                           [--limit-mb MB] [--out DIR]
#   --smoke   one short run per configuration (used by `make check`)
# Environment: MEMBAL_ACCEL=tcg|kvm as for tests/guest/boot-guest.sh.
#
# Host memory is made scarce with a memory cgroup (v2 if its memory
# controller is enabled, else v1) that both QEMU processes run in, and a
# swapfile the bench creates when the machine has no swap.  Outputs:
# OUT/results.csv (every run), OUT/summary.csv, OUT/bench.png, and the
# table on stdout.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
out=$top/build/bench
runs=3 warmup=30 measure=45 smoke=0 limit_mb=
w_mem=512 s_mem=512 w_wss=320 w_hot=80
configs="solo none mom split-lru"
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1; shift ;;
        --runs) runs=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --measure) measure=$2; shift 2 ;;
        --limit-mb) limit_mb=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --configs) configs=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run-bench: unknown option $1" >&2; exit 2 ;;
    esac
done
if [ "$smoke" = 1 ]; then
    runs=1 warmup=20 measure=15
fi
# Guests total 1 GiB; the cgroup holds 5/8 of that (guests overcommit it
# 1.6x), QEMU's own memory (~70 MiB each under TCG with a 32 MiB
# translation cache) included.
limit_mb=${limit_mb:-$(( (w_mem + s_mem) * 5 / 8 ))}
[ "$(id -u)" = 0 ] || { echo "run-bench: needs root (cgroups, swapon)" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d /var/tmp/membal-bench-XXXXXX)
images=$out/images
mkdir -p "$images"
cg= swapfile= daemon_pid=
pids=()

log() { echo "run-bench: $*" >&2; }

cleanup() {
    set +e
    [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    sleep 1
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    [ -n "$cg" ] && [ -d "$cg" ] && rmdir "$cg" 2>/dev/null
    if [ -n "$swapfile" ]; then swapoff "$swapfile" 2>/dev/null; rm -f "$swapfile"; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the scarce host: a memory cgroup and swap ----
make_cgroup() {
    local name=membal-bench-$$-$1
    if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        cg=/sys/fs/cgroup/$name
        mkdir "$cg"
        echo $((limit_mb * 1024 * 1024)) > "$cg/memory.max"
    elif grep -qw memory /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then
        cg=/sys/fs/cgroup/unified/$name
        mkdir "$cg"
        echo $((limit_mb * 1024 * 1024)) > "$cg/memory.max"
    elif [ -d /sys/fs/cgroup/memory ]; then
        cg=/sys/fs/cgroup/memory/$name
        mkdir "$cg"
        echo $((limit_mb * 1024 * 1024)) > "$cg/memory.limit_in_bytes"
    else
        log "no memory cgroup controller (v1 or v2) on this machine"
        exit 1
    fi
}

ensure_swap() {
    if [ -n "$(swapon --show --noheadings 2>/dev/null)" ]; then
        return
    fi
    swapfile=/var/tmp/membal-bench-$$.swap
    fallocate -l 2G "$swapfile"
    chmod 600 "$swapfile"
    mkswap -q "$swapfile" >/dev/null
    swapon "$swapfile"
    log "created and enabled a 2 GiB swapfile ($swapfile); removed at exit"
}

[ -f "$top/build/guest/.built" ] || make -C "$top" guest >/dev/null
[ -x "$top/build/balancerd" ] || make -C "$top" build/balancerd >/dev/null
[ -f "$images/stream.img" ] || truncate -s 4G "$images/stream.img"
ensure_swap

vmstat_field() { awk -v k="$1" '$1 == k {print $2}' /proc/vmstat; }
proc_majflt() { awk '{print $12}' "/proc/$1/stat" 2>/dev/null || echo 0; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) {print "nan"} else if (NR % 2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'; }
spread() { sort -n | awk 'NR==1{mn=$1} {mx=$1} END {if (NR) printf "%s-%s", mn, mx; else print "nan"}'; }

write_config() { # $1 = file
    cat > "$1" <<EOF
[balancer]
tick = 2
stats_period = 1
[host]
memory_cgroup = $cg
[watermarks]
min = 5%
low = 12%
high = 18%
[guests]
default_floor_percent = 0
default_floor_min = 160MiB
[policy]
step_percent = 20
EOF
}

accel_used=unknown

# One run of one configuration; appends a CSV row.
run_one() { # $1 = config, $2 = run number
    local conf=$1 n=$2 dir=$work/$1-$2
    mkdir -p "$dir"
    make_cgroup "$conf-$n"
    truncate -s 0 "$images/w-swap.img"; truncate -s 512M "$images/w-swap.img"
    local boot_w boot_s w_pid s_pid=
    boot_w=$("$top/tests/guest/boot-guest.sh" --run-dir "$dir/W" --mem "$w_mem" --name W \
        --cgroup "$cg" --tb-size 32 --disk "$images/w-swap.img" \
        --append "membal.report=1 membal.swap=/dev/vda membal.run=wss:$w_wss:$w_hot")
    w_pid=$(echo "$boot_w" | sed -n 's/.*pid=\([0-9]*\).*/\1/p')
    accel_used=$(echo "$boot_w" | sed -n 's/^accel=\([a-z]*\).*/\1/p')
    pids+=("$w_pid")
    if [ "$conf" != solo ]; then
        boot_s=$("$top/tests/guest/boot-guest.sh" --run-dir "$dir/S" --mem "$s_mem" --name S \
            --cgroup "$cg" --tb-size 32 --disk "$images/stream.img" \
            --append "membal.report=1 membal.run=stream:/dev/vda:1024")
        s_pid=$(echo "$boot_s" | sed -n 's/.*pid=\([0-9]*\).*/\1/p')
        pids+=("$s_pid")
    fi
    daemon_pid=
    if [ "$conf" = mom ] || [ "$conf" = split-lru ]; then
        write_config "$dir/balancer.conf"
        "$top/build/balancerd" --config "$dir/balancer.conf" --policy "$conf" \
            --qmp "$dir/W/qmp.sock" --qmp "$dir/S/qmp.sock" \
            --metrics-listen "" --control-socket "" > "$dir/balancerd.log" 2>&1 &
        daemon_pid=$!
    fi
    sleep "$warmup"
    local w0 s0 sw0 maj0
    w0=$(grep -c '^WSS t=' "$dir/W/serial.log" || true)
    s0=$( [ -n "$s_pid" ] && grep -c '^STREAM t=' "$dir/S/serial.log" || echo 0)
    sw0=$(vmstat_field pswpout)
    maj0=$(proc_majflt "$w_pid")
    local gin0
    gin0=$(grep '^MEMINFO' "$dir/W/serial.log" | tail -n 1 | sed -n 's/.*pswpin=\([0-9]*\).*/\1/p')
    sleep "$measure"
    local w_ops s_mbs sw1 maj1 gin1
    w_ops=$(grep '^WSS t=' "$dir/W/serial.log" | tail -n +"$((w0 + 1))" | sed -n 's/.*ops_s=\([0-9]*\).*/\1/p' | median)
    if [ -n "$s_pid" ]; then
        s_mbs=$(grep '^STREAM t=' "$dir/S/serial.log" | tail -n +"$((s0 + 1))" | sed -n 's/.*mb_s=\([0-9.]*\).*/\1/p' | median)
    else
        s_mbs=nan
    fi
    sw1=$(vmstat_field pswpout)
    maj1=$(proc_majflt "$w_pid")
    gin1=$(grep '^MEMINFO' "$dir/W/serial.log" | tail -n 1 | sed -n 's/.*pswpin=\([0-9]*\).*/\1/p')
    local w_swap_kb s_swap_kb moves=0 cpu=0 rss=0
    w_swap_kb=$(awk '/^VmSwap/{print $2}' "/proc/$w_pid/status" 2>/dev/null || echo 0)
    s_swap_kb=$( [ -n "$s_pid" ] && awk '/^VmSwap/{print $2}' "/proc/$s_pid/status" 2>/dev/null || echo 0)
    if [ -n "$daemon_pid" ]; then
        local ticks hz
        hz=$(getconf CLK_TCK)
        ticks=$(awk '{print $14 + $15}' "/proc/$daemon_pid/stat")
        cpu=$(awk -v t="$ticks" -v hz="$hz" 'BEGIN{printf "%.2f", t / hz}')
        rss=$(awk '/^VmHWM/{print $2}' "/proc/$daemon_pid/status")
        kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
        daemon_pid=
        moves=$(grep -c ': balloon .* -> ' "$dir/balancerd.log" || true)
        cp "$dir/balancerd.log" "$out/balancerd-$conf-$n.log"
    fi
    local wall=$((warmup + measure))
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 1
    pids=()
    rmdir "$cg" 2>/dev/null || { sleep 2; rmdir "$cg" 2>/dev/null || true; }
    cg=
    # W host swap-in: major faults of W's QEMU (each one a page read back)
    local w_host_in=$(( (maj1 - maj0) * 4096 ))
    local w_guest_in=$(( (${gin1:-0} - ${gin0:-0}) * 4096 ))
    echo "$conf,$n,$accel_used,$w_ops,$s_mbs,$w_host_in,$((w_swap_kb * 1024)),$w_guest_in,$(( (sw1 - sw0) * 4096 )),$((${s_swap_kb:-0} * 1024)),$moves,$cpu,$((rss * 1024)),$wall" >> "$out/results.csv"
    log "$conf run $n: W ${w_ops} ops/s, S ${s_mbs} MB/s, W host swap-in $((w_host_in / 1048576)) MiB, moves $moves"
}

echo "config,run,accel,w_ops_s,s_mb_s,w_host_swapin_bytes,w_host_swapped_bytes,w_guest_swapin_bytes,host_swapout_bytes,s_host_swapped_bytes,balloon_moves,daemon_cpu_s,daemon_rss_bytes,wall_s" > "$out/results.csv"
log "limit ${limit_mb} MiB for ${w_mem}+${s_mem} MiB of guests; ${runs} run(s) x {$configs}; warmup ${warmup}s, measure ${measure}s"
for n in $(seq 1 "$runs"); do
    for c in $configs; do
        run_one "$c" "$n"
    done
done

# ---- summary ----
col() { # $1 = config, $2 = column number -> values, one per line
    awk -F, -v c="$1" -v k="$2" 'NR > 1 && $1 == c {print $k}' "$out/results.csv"
}
echo "config,w_ops_s_median,w_ops_s_spread,w_pct_solo,s_mb_s_median,w_host_swapin_mib,w_guest_swapin_mib,host_swapout_mib,balloon_moves,daemon_cpu_pct" > "$out/summary.csv"
solo=$(col solo 4 | median)
none_w=$(col none 4 | median)
mom_w=$(col mom 4 | median)
none_s=$(col none 5 | median)
printf '\nmembal bench: W (wss %s MiB, %s%% hot, %s MiB RAM) + S (streaming, %s MiB RAM) in a %s MiB cgroup; accel %s; %s run(s), %ss measured\n\n' \
    "$w_wss" "$w_hot" "$w_mem" "$s_mem" "$limit_mb" "$accel_used" "$runs" "$measure"
printf '%-10s %12s %15s %9s %9s %13s %13s %12s %6s %8s\n' config "W ops/s" "(spread)" "W %solo" "S MB/s" "W sw-in host" "W sw-in gst" "host sw-out" moves "dmn CPU"
for c in $configs; do
    w=$(col "$c" 4 | median); sp=$(col "$c" 4 | spread); s=$(col "$c" 5 | median)
    hin=$(col "$c" 6 | median); gin=$(col "$c" 8 | median); hout=$(col "$c" 9 | median)
    mv=$(col "$c" 11 | median); cpu=$(col "$c" 12 | median); wall=$(col "$c" 14 | median)
    pct=$(awk -v w="$w" -v s="$solo" 'BEGIN{ if (s > 0) printf "%.0f", 100 * w / s; else print "nan"}')
    cpupct=$(awk -v c="$cpu" -v t="$wall" 'BEGIN{ if (t > 0) printf "%.2f", 100 * c / t; else print "nan"}')
    mib() { awk -v b="$1" 'BEGIN{printf "%.1f", b / 1048576}'; }
    printf '%-10s %12s %15s %8s%% %9s %10s MiB %10s MiB %9s MiB %6s %7s%%\n' "$c" "$w" "$sp" "$pct" "$s" "$(mib "$hin")" "$(mib "$gin")" "$(mib "$hout")" "$mv" "$cpupct"
    echo "$c,$w,$sp,$pct,$s,$(mib "$hin"),$(mib "$gin"),$(mib "$hout"),$mv,$cpupct" >> "$out/summary.csv"
done

# ---- targets ----
echo
target() { # $1 = description, $2 = awk condition on variables
    if awk "BEGIN{exit !($2)}"; then echo "  met:    $1"; else echo "  MISSED: $1"; fi
}
sl_w=$(col split-lru 4 | median); sl_s=$(col split-lru 5 | median)
sl_in=$(col split-lru 6 | median); sl_cpu=$(col split-lru 12 | median); sl_wall=$(col split-lru 14 | median)
hot_bytes=$(( w_wss * w_hot / 100 * 1048576 ))
echo "targets (split-lru):"
target "W >= 95% of solo ($sl_w vs $solo ops/s)" "$sl_w >= 0.95 * $solo"
target "W >= 1.5x none ($sl_w vs $none_w)" "$sl_w >= 1.5 * $none_w"
target "W >= 1.5x mom ($sl_w vs $mom_w)" "$sl_w >= 1.5 * $mom_w"
target "W host swap-in <= 1% of its hot set ($((sl_in / 1048576)) MiB vs $((hot_bytes / 104857600)) MiB)" "$sl_in <= 0.01 * $hot_bytes"
target "S within 10% of its none throughput ($sl_s vs $none_s MB/s)" "$sl_s >= 0.9 * $none_s"
target "daemon < 1% of one core ($sl_cpu s CPU in $sl_wall s)" "$sl_cpu < 0.01 * $sl_wall"

# ---- plot ----
rm -f "$out/bench.png"
if command -v gnuplot >/dev/null; then
    gnuplot <<EOF 2>"$out/gnuplot.err" || log "gnuplot failed (see $out/gnuplot.err); no plot"
set terminal png size 1000,450 noenhanced
set output "$out/bench.png"
set datafile separator ","
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set yrange [0:*]
set key off
set multiplot layout 1,2 title "membal bench: median of $runs run(s), $limit_mb MiB cgroup, accel $accel_used"
set title "W (working set) ops/s"
plot "$out/summary.csv" every ::1 using 2:xtic(1) lc rgb "#3060c0"
set title "S (streaming) MB/s"
plot "$out/summary.csv" every ::1 using 5:xtic(1) lc rgb "#c06030"
unset multiplot
EOF
    [ -f "$out/bench.png" ] && log "plot: $out/bench.png"
fi
log "results: $out/results.csv, $out/summary.csv"
# A run that measured nothing means the bench itself is broken.
if awk -F, 'NR > 1 && ($4 == "nan" || $4 == "" || ($1 != "solo" && ($5 == "nan" || $5 == "")))' "$out/results.csv" | grep -q .; then
    log "some runs produced no measurement: see $out/results.csv"
    exit 1
fi

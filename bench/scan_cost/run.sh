#!/bin/sh
# Scan cost of host reclaim per revision and source, on a synthetic guest
# (bench/scan_cost/scan_cost.c): CPU per GiB of guest RAM per scan and the
# peak memory balancerd's side gains.  Revisions are built in detached git
# worktrees under /var/tmp ("work" is this checkout as it is); runs are
# interleaved (run 1 of every revision and source, then run 2, ...) and the
# table gives the median and the spread (min-max) of the runs.
#
#   bench/scan_cost/run.sh [--revs "27af2fb work"] [--runs 3] [--gib 16]
#                          [--touch 25] [--scans 5] [--out build/bench-scan]
set -eu
revs="27af2fb work"; runs=3; gib=16; touch=25; scans=5; out=build/bench-scan
while [ $# -gt 0 ]; do
    case "$1" in
    --revs) revs=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    --touch) touch=$2; shift 2 ;;
    --scans) scans=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--revs \"REV... work\"] [--runs N] [--gib N] [--touch PERCENT] [--scans N] [--out DIR]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "scan_cost: needs root (pagemap frame numbers, process_madvise)" >&2; exit 2; }
top=$(git rev-parse --show-toplevel)
mkdir -p "$out"
out=$(cd "$out" && pwd)
libs="$(pkg-config --libs libvirt libvirt-glib-1.0 glib-2.0 json-c libxml-2.0 libsystemd libmicrohttpd) -lm"
cflags="$(pkg-config --cflags glib-2.0 json-c libxml-2.0)"
for rev in $revs; do
    if [ "$rev" = work ]; then
        tree=$top
    else
        tree=/var/tmp/membal-scan-cost-$rev
        [ -d "$tree" ] || git -C "$top" worktree add --detach "$tree" "$rev" >/dev/null
    fi
    make -C "$tree" -j2 build/libbalancer.a build/libpolicy.a build/libqmp.a >/dev/null
    cc -std=gnu11 -O2 -D_GNU_SOURCE -I"$tree" -I"$tree/balancer" $cflags -o "$out/scan_cost-$rev" \
        "$top/bench/scan_cost/scan_cost.c" "$tree/build/libbalancer.a" "$tree/build/libpolicy.a" "$tree/build/libqmp.a" $libs
done
raw=$out/raw.txt
: > "$raw"
swap=$(awk '/SwapTotal/ {print $2}' /proc/meminfo)
echo "host swap: ${swap} kB (probes are paged out only with swap)" >&2
i=1
while [ "$i" -le "$runs" ]; do
    for rev in $revs; do
        for src in probe damon; do
            line=$("$out/scan_cost-$rev" --gib "$gib" --touch "$touch" --scans "$scans" --source "$src")
            echo "$rev $line" | tee -a "$raw" >&2
        done
    done
    i=$((i + 1))
done
# rev source gib touched_gib scans scan_cpu settle_cpu peak_mib
python3 - "$raw" "$out" "$gib" "$touch" "$scans" "$runs" <<'PY'
import sys, statistics, subprocess, shutil, os
raw, out, gib, touch, scans, runs = sys.argv[1:]
rows = {}
for l in open(raw):
    f = l.split()
    rows.setdefault((f[0], f[1]), []).append((float(f[3]), float(f[5]) * 1000, float(f[6]) * 1000, float(f[7])))
def cell(v):
    return "%.2f (%.2f-%.2f)" % (statistics.median(v), min(v), max(v))
print("Host reclaim scan cost: %s GiB synthetic guest, %s%% touched, %s scans (the first, blind, not counted), %s run(s) each, interleaved" % (gib, touch, scans, runs))
print()
print("| revision | source | resident GiB | scan ms/GiB | settle ms/GiB | peak RSS gained, MiB |")
print("| --- | --- | --- | --- | --- | --- |")
for (rev, src), v in rows.items():
    print("| %s | %s | %.1f | %s | %s | %s |" % (rev, src, statistics.median(x[0] for x in v), cell([x[1] for x in v]),
                                                cell([x[2] for x in v]), cell([x[3] for x in v])))
if shutil.which("gnuplot"):
    dat = os.path.join(out, "scan-cost.dat")
    with open(dat, "w") as f:
        for (rev, src), v in rows.items():
            f.write('"%s %s" %f %f\n' % (rev, src, statistics.median(x[1] + x[2] for x in v), statistics.median(x[3] for x in v)))
    png = os.path.join(out, "scan-cost.png")
    script = '''set terminal png size 900,420
set output "%s"
set multiplot layout 1,2 title "host reclaim on a %s GiB guest (%s%% touched): median of %s runs"
set style fill solid 0.6
set boxwidth 0.6
set xtics rotate by -30
set yrange [0:*]
set title "CPU per scan (scan + settle), ms per GiB"
plot "%s" using 0:2:xtic(1) with boxes notitle
set title "peak RSS gained, MiB"
plot "%s" using 0:3:xtic(1) with boxes notitle
unset multiplot
''' % (png, gib, touch, runs, dat, dat)
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    print()
    print("plot: %s" % png if r.returncode == 0 else "gnuplot failed: %s" % r.stderr[-200:])
PY

#!/usr/bin/env python3
"""Balloon against virtio-mem, side by side on the same guest, without
balancerd: how fast each gives memory back to the host and takes it back,
what the host gains, and what is left of the guest's huge pages.

Each run boots a fresh TCG guest with 512 MiB of boot memory and a
virtio-mem device of 512 MiB, all of it plugged at boot (1 GiB in all),
that touches 700 MiB of anonymous memory at once and frees it again (the
test guest's burst workload: host memory resident, in huge pages where
the host's THP gives them, and free in the guest).  Then the actuator of
the run takes SHRINK MiB back and gives them back:

  balloon     balloon 512 -> 512-SHRINK MiB, then back to 512 MiB
  virtio-mem  requested-size 512 -> 512-SHRINK MiB, then back to 512 MiB

timed from the QMP command to QEMU's own figure reaching the target
(query-balloon's actual; query-memory-devices' size, what the guest
plugged), polled every 20 ms.  Host side, its QEMU's VmRSS and
AnonHugePages (/proc/PID/status, smaps_rollup) before, 2 s after the
shrink and 2 s after the regrow.  The configurations alternate run by run
(which one first alternates too); every figure is the median of the runs
with its min..max.

Not measured here: what a guest that touches the regrown memory gets back
(huge or small pages: the test guest runs one workload per boot), and
either actuator under balancerd (check_daemon's virtio-mem tests).

Usage: bench/vmem_speed.py [--runs N] [--shrink MiB] [--out DIR]
       (root; about 1 min a run; writes DIR/vmem-speed.csv and, with
       gnuplot, DIR/vmem-speed.png)
"""
import argparse, csv, os, re, shutil, statistics, subprocess, time

import balloon_stream as bs

BASE_MIB = 512
VMEM_MIB = 512
CONFIGS = ("balloon", "virtio-mem")


def boot(run):
    subprocess.run(["rm", "-rf", run])
    os.makedirs(run)
    out = subprocess.run([bs.BOOT, "--run-dir", run, "--mem", str(BASE_MIB), "--name", "vmem-speed",
                          "--vmem", "%d:%d" % (VMEM_MIB, VMEM_MIB), "--deadline", "120",
                          "--append", "membal.report=1 membal.run=burst:/dev/null:0:0:700:2"],
                         capture_output=True, text=True, check=True).stdout
    return {k: re.search(k + r"=(\S+)", out).group(1) for k in ("pid", "qmp", "serial")}


def status_mib(pid, path, key):
    with open("/proc/%d/%s" % (pid, path)) as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))


def host(pid):
    return {"rss": status_mib(pid, "status", "VmRSS:"), "huge": status_mib(pid, "smaps_rollup", "AnonHugePages:")}


def wait_console(serial, needle, seconds):
    end = time.time() + seconds
    while time.time() < end:
        with open(serial, errors="replace") as f:
            if needle in f.read():
                return True
        time.sleep(0.5)
    return False


class Actuator:
    def __init__(self, q, kind):
        self.q, self.kind = q, kind

    def set(self, mib):
        if self.kind == "balloon":
            r = self.q.cmd("balloon", value=mib << 20)
        else:
            r = self.q.cmd("qom-set", path="/machine/peripheral/vmem0", property="requested-size",
                           value=mib << 20)
        if "error" in r:
            raise RuntimeError("%s %d MiB: %s" % (self.kind, mib, r["error"]))

    def now_mib(self):
        if self.kind == "balloon":
            return self.q.cmd("query-balloon")["return"]["actual"] / (1 << 20)
        devs = self.q.cmd("query-memory-devices")["return"]
        return next(d["data"]["size"] for d in devs if d["type"] == "virtio-mem") / (1 << 20)

    def move(self, mib, timeout=120):
        """Seconds from the command to QEMU's figure at mib, None if never."""
        t0 = time.monotonic()
        self.set(mib)
        while time.monotonic() - t0 < timeout:
            if abs(self.now_mib() - mib) < 1:
                return time.monotonic() - t0
            time.sleep(0.02)
        return None


def one_run(kind, shrink, run_dir):
    g = boot(run_dir)
    pid = int(g["pid"])
    try:
        if not wait_console(g["serial"], "BURST phase=hold", 180):
            raise RuntimeError("the guest's burst never finished (see %s)" % g["serial"])
        time.sleep(4)  # its hold (2 s) over: the 700 MiB free in the guest, resident on the host
        q = bs.Qmp(g["qmp"])
        a = Actuator(q, kind)
        top = BASE_MIB if kind == "balloon" else VMEM_MIB
        before = host(pid)
        give = a.move(top - shrink)
        time.sleep(2)
        shrunk = host(pid)
        take = a.move(top)
        time.sleep(2)
        regrown = host(pid)
        return {"config": kind, "shrink_mib": shrink,
                "give_s": give, "give_mib_s": shrink / give if give else None,
                "take_s": take, "take_mib_s": shrink / take if take else None,
                "rss_before": before["rss"], "rss_shrunk": shrunk["rss"], "rss_regrown": regrown["rss"],
                "freed_mib": before["rss"] - shrunk["rss"],
                "huge_before": before["huge"], "huge_shrunk": shrunk["huge"], "huge_regrown": regrown["huge"],
                "huge_kept_pct": 100.0 * shrunk["huge"] / shrunk["rss"] if shrunk["rss"] else None}
    finally:
        subprocess.run(["kill", str(pid)])
        time.sleep(1)
        subprocess.run(["rm", "-rf", run_dir])


FIELDS = [("give_s", "give back, s"), ("give_mib_s", "give back, MiB/s"), ("take_s", "take back, s"),
          ("take_mib_s", "take back, MiB/s"), ("freed_mib", "host RSS freed, MiB"),
          ("rss_shrunk", "RSS shrunk, MiB"), ("huge_before", "huge pages before, MiB"),
          ("huge_shrunk", "huge pages shrunk, MiB"), ("huge_kept_pct", "huge share of RSS shrunk, %"),
          ("huge_regrown", "huge pages regrown, MiB")]


def summary(rows):
    print("\n%-30s %s" % ("median (min..max)", "  ".join("%-24s" % c for c in CONFIGS)))
    for key, label in FIELDS:
        cells = []
        for c in CONFIGS:
            v = [r[key] for r in rows if r["config"] == c and r[key] is not None]
            cells.append("%-24s" % ("%.2f (%.2f..%.2f)" % (statistics.median(v), min(v), max(v)) if v else "never"))
        print("%-30s %s" % (label, "  ".join(cells)))


def plot(rows, out):
    if not shutil.which("gnuplot"):
        print("no gnuplot: no plot")
        return
    dat = os.path.join(out, "vmem-speed.dat")
    with open(dat, "w") as f:
        for key, label in (("give_mib_s", "give back MiB/s"), ("take_mib_s", "take back MiB/s"),
                           ("freed_mib", "host RSS freed MiB"), ("huge_shrunk", "huge pages left MiB")):
            med = []
            for c in CONFIGS:
                v = [r[key] for r in rows if r["config"] == c and r[key] is not None]
                med.append(statistics.median(v) if v else 0)
            f.write('"%s" %g %g\n' % (label, med[0], med[1]))
    png = os.path.join(out, "vmem-speed.png")
    script = """set terminal png size 1000,500 noenhanced
set output "%s"
set style data histograms
set style fill solid 0.8 border -1
set logscale y
set title "balloon vs virtio-mem, the same guest, median of the runs (log scale)"
plot "%s" using 2:xtic(1) title "balloon", "" using 3 title "virtio-mem"
""" % (png, dat)
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    print("plot: %s" % png if r.returncode == 0 else "gnuplot failed: %s" % r.stderr.strip()[-300:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each configuration (default 3)")
    ap.add_argument("--shrink", type=int, default=384, help="MiB taken and given back (default 384)")
    ap.add_argument("--out", default="build/bench-vmem", help="where the csv and the plot go")
    args = ap.parse_args()
    if not 0 < args.shrink < min(BASE_MIB, VMEM_MIB):
        ap.error("--shrink must be between 1 and %d MiB" % (min(BASE_MIB, VMEM_MIB) - 1))
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for i in range(args.runs):
        order = CONFIGS if i % 2 == 0 else CONFIGS[::-1]
        for kind in order:
            r = one_run(kind, args.shrink, "/var/tmp/membal-vmem-speed")
            r["run"] = i + 1
            rows.append(r)
            print("run %d %-10s give back %s s, take back %s s, host freed %.0f MiB, huge pages %.0f -> %.0f -> %.0f MiB"
                  % (i + 1, kind, "%.2f" % r["give_s"] if r["give_s"] else "never",
                     "%.2f" % r["take_s"] if r["take_s"] else "never", r["freed_mib"],
                     r["huge_before"], r["huge_shrunk"], r["huge_regrown"]), flush=True)
    with open(os.path.join(args.out, "vmem-speed.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summary(rows)
    plot(rows, args.out)


if __name__ == "__main__":
    main()

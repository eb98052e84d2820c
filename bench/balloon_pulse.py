#!/usr/bin/env python3
"""What a balloon pulse (inflate, then deflate at once: the guest keeps its
size, the host the memory until the guest touches it again) costs an idle
guest, without balancerd: one TCG guest B (512 MiB) reads 300 MiB of its
disk into its page cache, rests, then allocates 300 MiB (the bench's burst
workload, 110 s after boot) in a 4 GiB memory cgroup.  Every 10 s it
prints its QEMU's CPU (share of a CPU), RSS and AnonHugePages; with
--pulse, 60 s after boot its balloon is set to 150 MiB and straight back
to 512 MiB.  At the end: the burst's time as B reports it.

Usage: bench/balloon_pulse.py [--pulse]   (root; one guest, ~3 min)
"""
import argparse, os, subprocess, time

import balloon_stream as bs

RUN = "/var/tmp/membal-balloon-pulse-B"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pulse", action="store_true", help="inflate to 150 MiB and deflate again at 60 s")
    args = ap.parse_args()
    subprocess.run(["rmdir", bs.CG], stderr=subprocess.DEVNULL)
    os.makedirs(bs.CG, exist_ok=True)
    with open(bs.CG + "/memory.limit_in_bytes", "w") as f:
        f.write(str(4096 << 20))
    g = None
    try:
        g = bs.boot("B", RUN, "burst:/dev/vda:300:110:300:0")
        measure(g, args.pulse)
    finally:
        if g:
            subprocess.run(["kill", g["pid"]])
        time.sleep(1)
        subprocess.run(["rmdir", bs.CG], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", RUN])


def measure(g, pulse):
    pid = int(g["pid"])
    q = bs.Qmp(g["qmp"])

    def cpu():
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def mib(path, key):
        with open(path) as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith(key))

    def show(what):
        print("%-24s RSS %4d MiB, huge %4d MiB" % (what, mib("/proc/%d/status" % pid, "VmRSS:"),
                                                   mib("/proc/%d/smaps_rollup" % pid, "AnonHugePages:")), flush=True)

    t0 = time.time()

    def run_for(seconds):
        while time.time() - t0 < seconds:
            c0 = cpu()
            time.sleep(10)
            show("t=%3.0f s, CPU %5.1f%%" % (time.time() - t0, 100 * (cpu() - c0) / 10))

    run_for(60)
    if pulse:
        t1 = time.time()
        q.balloon(150)
        show("inflated in %.0f s" % (time.time() - t1))
        t1 = time.time()
        q.balloon(512)
        show("deflated in %.0f s" % (time.time() - t1))
    run_for(180)
    with open(g["serial"], errors="replace") as f:
        print("\n".join(line for line in f.read().splitlines() if "phase=done" in line) or "burst: not done")


if __name__ == "__main__":
    main()

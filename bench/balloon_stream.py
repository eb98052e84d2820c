#!/usr/bin/env python3
"""What a balloon costs a streaming guest, without balancerd: one TCG guest
S (512 MiB) streams its disk (the bench's stream workload) in a 1365 MiB
memory cgroup (cachedb@0.75x's), optionally beside the bench's cachedb
guest C; S's rate (median of its per-second reports over 20 s) at 512 MiB,
after its balloon is set to 160 MiB (in one step, or in the steps
trim_streams takes: -20% every ~6 s), and after the balloon is deflated
to 512 MiB again, with its QEMU's RSS and huge pages at each phase.

Usage: bench/balloon_stream.py [--with-c] [--steps] [--no-thp]   (root)
"""
import argparse, ctypes, json, os, re, socket, subprocess, time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BOOT = os.path.join(TOP, "tests/guest/boot-guest.sh")
CG = "/sys/fs/cgroup/memory/membal-balloon-stream"


def boot(name, run, workload):
    subprocess.run(["rm", "-rf", run])
    os.makedirs(run)
    img = os.path.join(run, "data.img")
    with open(img, "w") as f:
        f.truncate(4 << 30)
    out = subprocess.run([BOOT, "--run-dir", run, "--mem", "512", "--name", name, "--tb-size", "32",
                          "--deadline", "120", "--disk", img, "--cgroup", CG,
                          "--append", "membal.report=1 membal.run=" + workload],
                         capture_output=True, text=True, check=True).stdout
    return {k: re.search(k + r"=(\S+)", out).group(1) for k in ("pid", "qmp", "serial")}


class Qmp:
    def __init__(self, path):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        self.f = s.makefile("rw")
        self.f.readline()
        self.cmd("qmp_capabilities")

    def cmd(self, c, **a):
        self.f.write(json.dumps({"execute": c, "arguments": a} if a else {"execute": c}) + "\n")
        self.f.flush()
        while True:
            r = json.loads(self.f.readline())
            if "return" in r or "error" in r:
                return r

    def balloon(self, mib):
        self.cmd("balloon", value=mib << 20)
        for _ in range(120):
            if abs((self.cmd("query-balloon")["return"]["actual"] >> 20) - mib) <= 2:
                return
            time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--with-c", action="store_true", help="the cachedb guest C beside S")
    ap.add_argument("--steps", action="store_true", help="balloon down in trim_streams' steps")
    ap.add_argument("--no-thp", action="store_true", help="QEMU without transparent huge pages")
    args = ap.parse_args()
    subprocess.run(["rmdir", CG], stderr=subprocess.DEVNULL)
    os.makedirs(CG, exist_ok=True)
    with open(CG + "/memory.limit_in_bytes", "w") as f:
        f.write(str(1365 << 20))
    if args.no_thp:  # PR_SET_THP_DISABLE, inherited by QEMU
        ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0)
    s = c = None
    try:
        s = boot("S", "/var/tmp/membal-balloon-stream-S", "stream:/dev/vda:1024")
        c = boot("C", "/var/tmp/membal-balloon-stream-C", "cachedb:/dev/vda:300") if args.with_c else None
        measure(s, c, args)
    finally:
        for g in (s, c):
            if g:
                subprocess.run(["kill", g["pid"]])
        time.sleep(1)
        subprocess.run(["rmdir", CG], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", "/var/tmp/membal-balloon-stream-S", "/var/tmp/membal-balloon-stream-C"])


def measure(s, c, args):
    q = Qmp(s["qmp"])
    pid = int(s["pid"])
    label = "%s%s%s" % ("S+C" if c else "S", ", steps" if args.steps else ", one step",
                        ", no THP" if args.no_thp else "")

    def rates():
        with open(s["serial"], errors="replace") as f:
            return [float(m.group(1)) for m in re.finditer(r"STREAM t=\d+ mb_s=([\d.]+)", f.read())]

    def field(path, key):
        with open(path) as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith(key))

    def phase(name):
        n0 = len(rates())
        time.sleep(20)
        r = sorted(rates()[n0:])
        print("%s | %-11s | %6.1f MiB/s (%d s, %.1f-%.1f) | QEMU RSS %4d MiB, huge %4d MiB" % (
            label, name, r[len(r) // 2] if r else 0, len(r), r[0] if r else 0, r[-1] if r else 0,
            field("/proc/%d/status" % pid, "VmRSS:"), field("/proc/%d/smaps_rollup" % pid, "AnonHugePages:")),
            flush=True)

    time.sleep(15)
    phase("512 MiB")
    for mib in (410, 328, 262, 210, 168, 160) if args.steps else (160,):
        q.balloon(mib)
        time.sleep(4 if args.steps else 5)
    phase("160 MiB")
    q.balloon(512)
    time.sleep(5)
    phase("512 again")


if __name__ == "__main__":
    main()

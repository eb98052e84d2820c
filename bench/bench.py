#!/usr/bin/python3
"""membal benchmark: every scenario x configuration with real TCG guests.

Usage: bench/bench.py [--scenario NAMES] [--configs NAMES] [--runs N]
                      [--overcommit RATIOS] [--pin] [--smoke] [--out DIR]
                      [--list] [--no-gates] [--report] [--perf GUEST]

Each scenario (bench/scenarios.py) boots its guests under QEMU inside a
memory cgroup that stands for the host, each guest's QEMU in a cgroup of its
own below it, as libvirt lays a host out (machine.slice, a scope per VM;
--flat: all QEMUs in the host's group), plus a swapfile when the machine has
no swap, lets one configuration balance them (no daemon, free page
reporting, balancerd with one of its policies), and reads what each workload
printed over the measure window.  Every scenario x configuration runs --runs
rounds (default 3); the configuration order is rotated between rounds.

Outputs in OUT (default build/bench): results.csv (one row per guest of every
run, written as runs finish), summary.csv, bench.png (a panel per scenario),
balancerd logs and guest consoles of each run, and the tables on stdout.
Exit status: 0 when every gate is met, 1 when a gate is missed or a run
measured nothing, 2 on bad arguments.  --no-gates reports gates but exits 0
unless a run measured nothing (make check's smoke).

--overcommit "1.2 1.6 2.0 2.2" runs each chosen scenario at every ratio of
its guests' memory to the host's (the cgroup limit is the guests' total
divided by the ratio), as scenarios named SCENARIO@RATIOx, and adds
overcommit.png: the primary guest's % of solo against the ratio, a line per
configuration, and the highest ratio at which each keeps >= 95% of solo.

--pin runs the i-th guest of a scenario on the i-th CPU (modulo the CPUs
there are): with as many CPUs as guests, no guest's emulation takes CPU from
another, so under TCG a guest's rate shows what memory costs it rather than
what CPU its neighbours' emulation leaves it.  balancerd is not pinned.

--report runs nothing: it prints the tables (and redraws the plots) of
the runs in OUT/results.csv, e.g. of an earlier bench or one cut short.

Names are comma- or space-separated; --list prints scenarios and configs.
Needs root (cgroups, swapon).  MEMBAL_ACCEL=tcg|kvm as for
tests/guest/boot-guest.sh.  BENCH_VERBOSE=1 runs balancerd with --verbose
(every round's decisions in LOGS/balancerd-*.log).
"""

import argparse
import csv
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from scenarios import CONFIGS, SCENARIOS, SMOKE_CONFIGS, SMOKE_SCENARIOS  # noqa: E402
import memory  # noqa: E402

BOOT = os.path.join(TOP, "tests/guest/boot-guest.sh")
BALANCERD = os.path.join(TOP, "build/balancerd")
PAGE = 4096

FIELDS = ["scenario", "config", "run", "order", "accel", "guest", "metric", "value", "done",
          "oom_kills", "guest_swapin_bytes", "host_swapin_bytes", "host_swapped_bytes",
          "balloon_moves", "balloon_flips", "balloon_final_mib", "daemon_ok", "daemon_cpu_s",
          "daemon_cpu_pct", "daemon_rss_bytes", "host_swapout_bytes", "host_rss_bytes", "wall_s",
          "qemu_minflt", "qemu_user_s", "qemu_sys_s", "qemu_wait_s", "qemu_huge_start_bytes",
          # bench/memory.py: what a balancer changes
          "stall_s", "guest_psi_some_s", "guest_psi_full_s", "guest_refault_pages", "vcpu_wait_s",
          "value_cpu", "footprint_gib_s", "host_oom_kills", "qemu_died", "stall_swapin_s", "stall_reclaim_s",
          "stall_thrash_s", "stall_compact_s"]


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def names(arg, known, what):
    out = [n for n in re.split(r"[,\s]+", arg or "") if n]
    for n in out:
        if n not in known:
            sys.exit("bench: unknown %s %r (known: %s)" % (what, n, ", ".join(known)))
    return out


# ---- the host: a memory cgroup and swap ----

def make_cgroup(tag, limit_mb):
    limit = str(limit_mb * 1024 * 1024)
    for root, ctl, key in (("/sys/fs/cgroup", "/sys/fs/cgroup/cgroup.controllers", "memory.max"),
                           ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/unified/cgroup.controllers",
                            "memory.max"),
                           ("/sys/fs/cgroup/memory", None, "memory.limit_in_bytes")):
        if ctl:
            try:
                if "memory" not in open(ctl).read().split():
                    continue
            except OSError:
                continue
        elif not os.path.isdir(root):
            continue
        path = os.path.join(root, "membal-bench-%d-%s" % (os.getpid(), tag))
        os.mkdir(path)
        with open(os.path.join(path, key), "w") as f:
            f.write(limit)
        return path
    sys.exit("bench: no memory cgroup controller (v1 or v2) on this machine")


def make_guest_cgroup(host, name):
    """The guest's own group below the host's (libvirt's scope per VM)."""
    ctl = os.path.join(host, "cgroup.subtree_control")
    if os.path.exists(ctl):  # cgroup v2: the memory controller for the children
        with open(ctl, "w") as f:
            f.write("+memory")
    path = os.path.join(host, name)
    os.mkdir(path)
    return path


def remove_cgroup(path):
    for _ in range(10):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.5)
    log("could not remove cgroup %s" % path)


class Swap:
    def __init__(self):
        self.file = None

    def ensure(self):
        if subprocess.run(["swapon", "--show", "--noheadings"], capture_output=True,
                          text=True).stdout.strip():
            return
        self.file = "/var/tmp/membal-bench-%d.swap" % os.getpid()
        subprocess.run(["fallocate", "-l", "3G", self.file], check=True)
        os.chmod(self.file, 0o600)
        subprocess.run(["mkswap", "-q", self.file], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["swapon", self.file], check=True)
        log("created and enabled a 3 GiB swapfile (%s); removed at exit" % self.file)

    def remove(self):
        if self.file:
            subprocess.run(["swapoff", self.file])
            os.unlink(self.file)
            self.file = None


# ---- reading the machine and the guests ----

def vmstat(key):
    with open("/proc/vmstat") as f:
        for line in f:
            k, v = line.split()
            if k == key:
                return int(v)
    return 0


def proc_stat(pid):
    """A QEMU's counters from /proc/PID/stat: minor and major faults, user
    and system CPU seconds (zeros when it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return dict(minflt=int(fields[7]), majflt=int(fields[9]),
                    user_s=int(fields[11]) / tick, sys_s=int(fields[12]) / tick)
    except (OSError, IndexError, ValueError):
        return dict(minflt=0, majflt=0, user_s=0.0, sys_s=0.0)


def proc_wait_s(pid):
    """How long a process's threads waited for a CPU, summed (the run
    delay of /proc/PID/task/*/schedstat), in s; 0 when it is gone."""
    return memory.run_delay_s(pid, memory.threads(pid))


def proc_huge_bytes(pid):
    """The transparent huge pages backing a process (AnonHugePages)."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def proc_status_kb(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def console_lines(path):
    """A guest's console, whole lines only: the last one may still be on
    its way (QEMU writes the serial port as the guest prints)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    return text[:text.rfind("\n") + 1].splitlines()


def field(line, key):
    m = re.search(r"\b%s=([-0-9.]+)" % re.escape(key), line)
    return float(m.group(1)) if m else None


def last_pswpin(lines):
    return memory.guest_line(lines).get("pswpin", 0)


def oom_kills(lines):
    return sum(1 for line in lines if "Killed process" in line)


SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def parse_size(text):
    m = re.match(r"([0-9.]+)\s*([KMGT]?i?B)", text)
    return float(m.group(1)) * SIZE_UNITS.get(m.group(2), 1) if m else None


def balloon_moves(daemon_log, guest):
    """Moves, direction changes and the last target of one guest (its
    balloon's, or its size's with virtio-mem: "size A -> B [virtio-mem ...]")."""
    moves = flips = 0
    last_dir = 0
    final = None
    pat = re.compile(r"guest %s: (?:balloon|size) (\S+ \S+) -> (\S+ \S+) [(\[]" % re.escape(guest))
    for line in console_lines(daemon_log):
        m = pat.search(line)
        if not m:
            continue
        a, b = parse_size(m.group(1)), parse_size(m.group(2))
        if a is None or b is None or a == b:  # a change below the log's rounding
            continue
        moves += 1
        d = 1 if b > a else -1
        if last_dir and d != last_dir:
            flips += 1
        last_dir = d
        final = b
    return moves, flips, final


# ---- one run ----

class Run:
    def __init__(self, args, scen_name, conf_name, n, order, workdir, images):
        self.args = args
        self.sname, self.cname, self.n, self.order = scen_name, conf_name, n, order
        self.scen = SCENARIOS[scen_name]
        self.conf = CONFIGS[conf_name]
        self.dir = os.path.join(workdir, "%s-%s-%d" % (scen_name, conf_name, n))
        self.images = images
        self.cg = None
        self.qemu = {}
        self.boot_procs = []
        self.daemon = None
        self.accel = "unknown"

    def timing(self):
        warmup, measure = self.scen["warmup"], self.scen["measure"]
        if self.args.warmup:  # a steady state: e.g. a trim or proactive reclaim that has arrived
            warmup = self.args.warmup
        elif self.args.smoke:  # shorter warm-up only: a burst needs its whole window
            warmup = max(10, warmup * 2 // 3)
        return warmup, measure

    def guests(self):
        gs = self.scen["guests"]
        return [g for g in gs if g.get("solo")] if self.conf.get("solo") else gs

    def image(self, g):
        if g["disk"] == "swap":
            path = os.path.join(self.images, "%s-%s-swap.img" % (self.sname, g["name"]))
            with open(path, "w") as f:
                f.truncate(0)
                f.truncate(512 << 20)
            return path
        if g["disk"] == "data":
            path = os.path.join(self.images, "%s-%s-data.img" % (self.sname, g["name"]))
            if not os.path.exists(path) or os.path.getsize(path) != 4 << 30:
                with open(path, "w") as f:
                    f.truncate(4 << 30)
            with open(path, "r+b") as f:  # the reboot mark (tests/guest/init): a first boot
                f.seek((4 << 30) - 4096)
                f.write(bytes(4096))
            return path
        if g["disk"] == "pgdata":  # the server writes (WAL, statistics): a fresh copy each run
            path = os.path.join(self.images, "%s-%s-pgdb.img" % (self.sname, g["name"]))
            subprocess.run(["cp", "--sparse=always", pgdb_master(self.images), path], check=True)
            return path
        return None

    def boot(self, late):
        """Boot the guests that start with the run (late False) or the
        ones that boot into it (late True: `boot_before` s before the
        window, into the host the others have filled); wait until each
        has reached its init."""
        warmup, measure = self.timing()
        # guests finish booting within a few seconds of each other; the burst
        # must begin inside the measure window (checked in measure_guest)
        subst = {"burst_at": warmup + 4, "grow_at": warmup + measure // 3}
        procs = []
        for i, g in enumerate(self.guests()):
            if bool(g.get("boot_before")) != late:
                continue
            run = g["run"].format(**subst)
            append = "membal.report=1 membal.run=" + run
            if g.get("reboot_before"):  # it reboots itself, into run2, that long before the window
                append += " membal.reboot_after=%d membal.run2=%s" % (warmup - g["reboot_before"],
                                                                       g["run2"].format(**subst))
            if self.args.guest_append:
                append += " " + self.args.guest_append
            mem = ["--mem", str(g["mem"])]
            if self.conf.get("vmem"):  # half boot memory, half virtio-mem (2 MiB blocks), all plugged
                half = g["mem"] // 4 * 2
                mem = ["--mem", str(g["mem"] - half), "--vmem", "%d:%d" % (half, half)]
                if self.conf["vmem"] == "kernel":  # overrides boot-guest.sh's online (auto-movable)
                    append += " memhp_default_state=online_kernel"
            cg = self.cg if self.args.flat else make_guest_cgroup(self.cg, g["name"])
            cmd = [BOOT, "--run-dir", os.path.join(self.dir, g["name"])] + mem + [
                   "--name", g["name"], "--cgroup", cg, "--tb-size", "32", "--deadline", "120"]
            disk = self.image(g)
            if disk:
                cmd += ["--disk", disk]
                if g["disk"] == "swap":
                    append += " membal.swap=/dev/vda"
            if self.conf.get("balloon_opts"):
                cmd += ["--balloon-opts", self.conf["balloon_opts"]]
            cmd += ["--append", append]
            if g.get("reboot_before"):  # boot-guest.sh's QEMU runs -no-reboot
                cmd += ["--", "-action", "reboot=reset"]
            if self.args.pin:  # QEMU inherits the CPU from boot-guest.sh
                cmd = ["taskset", "-c", str(self.args.cpus[i % len(self.args.cpus)])] + cmd
            procs.append((g, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True)))
            self.boot_procs.append(procs[-1][1])
        ok = True
        for g, p in procs:
            out, err = p.communicate()
            m = re.search(r"accel=(\w+) pid=(\d+)", out)
            if p.returncode != 0 or not m:
                log("%s/%s run %d: guest %s did not boot: %s" % (self.sname, self.cname, self.n,
                                                                 g["name"], err.strip()[-300:]))
                ok = False
                continue
            self.accel = m.group(1)
            self.qemu[g["name"]] = int(m.group(2))
        return ok

    def write_config(self, path):
        if self.conf.get("shipped"):  # the defaults a new user gets: only the host is the bench's
            with open(path, "w") as f:
                f.write("[host]\nmemory_cgroup = %s\n" % self.cg)
                if self.conf.get("trim_streams"):  # and the one off-by-default feature it names
                    f.write("[policy]\ntrim_streams = true\n")
            return
        text = """[balancer]
tick = 2
stats_period = 1
[host]
memory_cgroup = {cg}
[watermarks]
min = 5%
low = 12%
high = 18%
[guests]
default_floor_percent = 0
default_floor_min = 160MiB
[policy]
step_percent = 20
""".format(cg=self.cg)
        if self.conf.get("trim_streams"):
            text += "trim_streams = true\n"
        if self.conf.get("host_reclaim"):
            # a run lasts ~30 s: memory idle for the default 120 s never
            # shows, so the bench pages out what idled 10 s (its SLO the
            # default, 0.2% of the working set a minute)
            text += "[host_reclaim]\nenabled = true\nsource = %s\nscan_interval = 2\nproactive_age = 10\n" % (
                self.conf["host_reclaim"] if isinstance(self.conf["host_reclaim"], str) else "auto")
        with open(path, "w") as f:
            f.write(text)

    def start_daemon(self):
        policy = self.conf.get("daemon")
        if not policy:
            return
        conf = os.path.join(self.dir, "balancer.conf")
        self.write_config(conf)
        cmd = [BALANCERD, "--config", conf, "--policy", policy, "--metrics-listen", "",
               "--control-socket", ""]
        for g in self.guests():
            cmd += ["--qmp", os.path.join(self.dir, g["name"], "qmp.sock")]
        if os.environ.get("BENCH_VERBOSE"):  # every tick's decisions in the daemon's log
            cmd.append("--verbose")
        self.daemon_log = os.path.join(self.dir, "balancerd.log")
        self.daemon_started = time.time()
        self.daemon = subprocess.Popen(cmd, stdout=open(self.daemon_log, "w"), stderr=subprocess.STDOUT)

    def stop(self):
        for p in self.boot_procs:  # interrupted while booting
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.daemon and self.daemon.poll() is None:
            self.daemon.terminate()
            try:
                self.daemon.wait(10)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        for pid in self.qemu.values():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 5
        for pid in self.qemu.values():
            while time.time() < deadline and os.path.exists("/proc/%d" % pid):
                time.sleep(0.1)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.qemu = {}
        if self.cg:
            # whatever is left in the cgroup (a QEMU whose boot was interrupted
            # before we learnt its pid) goes too
            groups = [self.cg] + [os.path.join(self.cg, d) for d in sorted(os.listdir(self.cg))
                                  if os.path.isdir(os.path.join(self.cg, d))]
            for _ in range(3):
                left = []
                for cg in groups:
                    try:
                        with open(os.path.join(cg, "cgroup.procs")) as f:
                            left += [int(x) for x in f.read().split()]
                    except (OSError, ValueError):
                        pass
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if not left:
                    break
                time.sleep(0.5)
            for cg in reversed(groups):  # the guests' groups, then the host's
                remove_cgroup(cg)
            self.cg = None

    def serial(self, g):
        return os.path.join(self.dir, g["name"], "serial.log")

    def execute(self):
        os.makedirs(self.dir, exist_ok=True)
        warmup, measure = self.timing()
        t0 = time.time()
        rows = []
        profiler, self.perf_data = None, None
        try:
            limit = self.scen["limit_mb"]
            if self.conf.get("solo") and self.scen.get("solo_limit_mb"):
                limit = self.scen["solo_limit_mb"]
            self.cg = make_cgroup("%s-%s-%d" % (self.sname, self.cname, self.n), limit)
            booted = self.boot(late=False)
            if booted:
                self.start_daemon()
                began = time.time()
                late = [g["boot_before"] for g in self.guests() if g.get("boot_before")]
                if late:  # one moment for all late guests: the first's
                    time.sleep(max(0, warmup - late[0]))
                    booted = self.boot(late=True)
                time.sleep(max(0.0, warmup - (time.time() - began)))
            if booted:
                start = {}
                for g in self.guests():
                    lines = console_lines(self.serial(g))
                    pid = self.qemu[g["name"]]
                    start[g["name"]] = (len(lines), proc_stat(pid), proc_wait_s(pid),
                                        proc_huge_bytes(pid), memory.Probe(self.args.acct, pid))
                swout0 = vmstat("pswpout")
                oom0 = memory.cgroup_oom_kills(self.cg)
                profiler = self.start_profile()
                rss = self.sample_rss(measure)
                end = {g["name"]: (proc_stat(self.qemu[g["name"]]), proc_wait_s(self.qemu[g["name"]]),
                                   memory.Probe(self.args.acct, self.qemu[g["name"]]),
                                   os.path.exists("/proc/%d" % self.qemu[g["name"]]))
                       for g in self.guests()}
                d_oom = memory.cgroup_oom_kills(self.cg) - oom0
                self.stop_profile(profiler)
                swout = (vmstat("pswpout") - swout0) * PAGE
                d = dict(daemon_ok="", daemon_cpu_s="", daemon_cpu_pct="", daemon_rss_bytes="")
                if self.daemon:
                    pid = self.daemon.pid
                    st = proc_stat(pid)
                    cpu = st["user_s"] + st["sys_s"]
                    d.update(daemon_cpu_s="%.2f" % cpu,
                             daemon_cpu_pct="%.3f" % (100 * cpu / max(1.0, time.time() - self.daemon_started)),
                             daemon_rss_bytes=proc_status_kb(pid, "VmHWM") * 1024)
                    managed = sum(1 for line in console_lines(self.daemon_log) if ": now managed" in line)
                    ok = self.daemon.poll() is None and managed >= len(self.guests())
                    d["daemon_ok"] = int(ok)
                    if not ok:
                        log("%s/%s run %d: balancerd %s, managed %d of %d guests; see %s" % (
                            self.sname, self.cname, self.n,
                            "exited early (status %s)" % self.daemon.returncode
                            if self.daemon.poll() is not None else "ran", managed, len(self.guests()),
                            self.daemon_log))
                for g in self.guests():
                    rss_g = rss[g["name"]]
                    rows.append(self.measure_guest(g, start[g["name"]], end[g["name"]], swout, d,
                                                   rss_bytes=int(rss_g) if rss_g is not None else "",
                                                   host_oom_kills=d_oom))
        finally:
            self.stop_profile(profiler)
            self.stop()
        self.report_profile()
        wall = time.time() - t0
        for r in rows:
            r["wall_s"] = "%.0f" % wall
        if self.daemon:
            shutil.copy(self.daemon_log, os.path.join(self.args.out, "logs",
                                                       "balancerd-%s-%s-%d.log" % (self.sname, self.cname,
                                                                                  self.n)))
        for g in self.guests():
            src = self.serial(g)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(self.args.out, "logs", "console-%s-%s-%d-%s.log" % (
                    self.sname, self.cname, self.n, g["name"])))
        if not rows:  # nothing booted: one row per guest that says so
            rows = [self.row(g, value="", done=0) for g in self.guests()]
        return rows

    def start_profile(self):
        """--perf GUEST: sample that guest's QEMU over the window (perf
        record, cpu-clock, 499 Hz); None when not asked."""
        self.perf_data = None
        name = self.args.perf
        if not name:
            return None
        if name not in self.qemu:
            log("--perf %s: no such guest in %s (guests: %s)" % (name, self.sname, ", ".join(self.qemu)))
            return None
        self.perf_data = os.path.join(self.args.out, "logs", "perf-%s-%s-%d-%s.data" % (
            self.sname, self.cname, self.n, name))
        try:
            p = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "499",
                                  "-p", str(self.qemu[name]), "-o", self.perf_data],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as e:
            log("perf: %s" % e.strerror)
            self.perf_data = None
            return None
        time.sleep(0.2)
        if p.poll() is not None:  # e.g. perf_event_paranoid
            log("perf record exited at once: %s" % p.stderr.read().decode(errors="replace").strip())
            self.perf_data = None
            return None
        return p

    @staticmethod
    def stop_profile(profiler):
        """End the recording (it writes its data on SIGINT); again: no-op."""
        if not profiler or profiler.poll() is not None:
            return
        profiler.send_signal(signal.SIGINT)
        try:
            profiler.wait(timeout=60)
        except subprocess.TimeoutExpired:
            profiler.kill()
            profiler.wait()

    def report_profile(self):
        """What the recording's samples were spent in (self time by
        symbol), beside it as .txt; after the guests are gone, so that it
        takes no CPU from them."""
        if not self.perf_data or not os.path.exists(self.perf_data):
            return
        with open(self.perf_data[:-len(".data")] + ".txt", "w") as f:
            subprocess.run(["perf", "report", "-i", self.perf_data, "--stdio", "--no-children",
                            "--sort", "dso,sym", "--percent-limit", "1"], stdout=f, stderr=subprocess.DEVNULL)

    def sample_rss(self, seconds):
        """Sleep through the measure window, reading each QEMU's resident
        memory once a second; returns the mean per guest: what the guest
        holds of the host's memory, the footprint a balancer can shrink
        (the guests' disks are cache=none: no host page cache in it)."""
        readings = {name: [] for name in self.qemu}
        end = time.time() + seconds
        while True:
            for name, pid in self.qemu.items():
                kb = proc_status_kb(pid, "VmRSS")
                if kb:  # 0: the QEMU is gone (or a kernel thread): no reading
                    readings[name].append(kb * 1024)
            left = end - time.time()
            if left <= 0:
                break
            time.sleep(min(1.0, left))
        return {name: statistics.mean(v) if v else None for name, v in readings.items()}

    def row(self, g, **kw):
        r = dict.fromkeys(FIELDS, "")
        r.update(scenario=self.sname, config=self.cname, run=self.n, order=self.order, accel=self.accel,
                 guest=g["name"], metric="%s.%s" % g["metric"][:2] if g.get("metric") else "")
        r.update(kw)
        return r

    def measure_guest(self, g, start, end, swout, d, rss_bytes, host_oom_kills):
        lines = console_lines(self.serial(g))
        nlines, stat0, wait0, huge0, probe0 = start
        stat1, wait1, probe1, alive = end
        _, measure = self.timing()
        counted = None
        pid = self.qemu[g["name"]]

        def delta(a, b, fmt):  # "" when the QEMU was gone at the end (its counters read 0)
            return fmt % (b - a) if b >= a else ""
        value, done = "", ""
        if g.get("metric"):
            tag, key, _ = g["metric"]
            mine = [(i, line) for i, line in enumerate(lines) if line.startswith(tag + " ")]
            if g.get("window") == "once":
                began = [i for i, line in mine if "phase=alloc" in line or "phase=done" in line]
                found = [field(line, key) for _, line in mine if field(line, key) is not None]
                if began and began[0] < nlines:
                    log("%s/%s run %d: %s began before the measure window; not counted" % (
                        self.sname, self.cname, self.n, g["name"]))
                elif found:
                    value, done = "%.2f" % found[-1], 1
                elif mine:  # it ran and never finished: the worst value
                    value, done = "nan", 0
            else:
                # the rate of a cumulative counter over the window: a workload
                # that stalls or dies counts as doing nothing for that time
                before = [field(line, key) for i, line in mine if i < nlines and field(line, key) is not None]
                inside = [field(line, key) for i, line in mine if i >= nlines and field(line, key) is not None]
                if inside:
                    counted = inside[-1] - (before[-1] if before else 0)
                    value, done = "%g" % (counted / measure), 1
        boots = sum(1 for line in lines if line.startswith("MEMBAL-GUEST-READY"))
        if boots > 1 + bool(g.get("reboot_before")):  # a kernel panic resets a guest QEMU runs with reboot=reset
            log("%s/%s run %d: %s booted %d times (a kernel panic?); see its console" % (
                self.sname, self.cname, self.n, g["name"], boots))
        moves = flips = 0
        final = None
        if self.daemon:
            moves, flips, final = balloon_moves(self.daemon_log, g["name"])
        return self.row(
            g, value=value, done=done, oom_kills=oom_kills(lines),
            guest_swapin_bytes=int((last_pswpin(lines) - memory.window_start(lines, nlines).get("pswpin", 0))
                                   * PAGE),
            host_swapin_bytes=delta(stat0["majflt"] * PAGE, stat1["majflt"] * PAGE, "%d"),
            qemu_minflt=delta(stat0["minflt"], stat1["minflt"], "%d"),
            qemu_user_s=delta(stat0["user_s"], stat1["user_s"], "%.2f"),
            qemu_sys_s=delta(stat0["sys_s"], stat1["sys_s"], "%.2f"),
            qemu_wait_s=delta(wait0, wait1, "%.2f"), qemu_huge_start_bytes=huge0,
            host_swapped_bytes=proc_status_kb(pid, "VmSwap") * 1024,
            balloon_moves=moves, balloon_flips=flips,
            balloon_final_mib="%.0f" % (final / (1 << 20)) if final else g["mem"],
            host_swapout_bytes=swout, host_rss_bytes=rss_bytes,
            footprint_gib_s="%.2f" % (rss_bytes * measure / 2**30) if rss_bytes != "" else "",
            host_oom_kills=host_oom_kills, qemu_died=int(not alive),
            **probe1.window(probe0, self.args.acct.why, lines, nlines, measure, counted), **d)


# ---- summary ----

def med(vals):
    return statistics.median(vals) if vals else float("nan")


def spread(vals):
    return (max(vals) - min(vals)) if vals else float("nan")


def metric_values(rows, scen, conf, guest, better, measured_only=False):
    """The metric of one guest over the runs.  A burst that never finished
    (or a workload that printed nothing) counts as the worst value, unless
    measured_only: then only real measurements (for spreads)."""
    out = []
    for r in rows:
        if r["scenario"] != scen or r["config"] != conf or r["guest"] != guest:
            continue
        v = float(r["value"]) if r["value"] not in ("", "nan") else float("nan")
        if math.isnan(v):
            if measured_only:
                continue
            v = math.inf if better == "lower" else 0.0
        out.append(v)
    return out


def guests_rss(rows, scen, conf):
    """The median over runs of the guests' summed mean RSS: only runs with a
    reading for every guest (NaN if there is none)."""
    per_run = {}
    for r in rows:
        if r["scenario"] == scen and r["config"] == conf:
            per_run.setdefault(r["run"], []).append(r.get("host_rss_bytes") or "")
    return med([sum(int(v) for v in vals) for vals in per_run.values() if all(vals)])


def savings(rows, summary, scenarios):
    """Memory reclaimed at a slowdown: what a configuration keeps out of the
    host's RAM against `none` (the guests' mean RSS over the window), as a
    share of the guests' RAM, beside each gated guest's median against
    none's."""
    out = []
    for s in scenarios:
        scen = SCENARIOS[s]
        ref = {r["config"]: r for r in summary if r["scenario"] == s}
        if "none" not in ref:
            continue
        gated = [g for g in scen["guests"] if g.get("gated") and g.get("metric")]
        guest_mem = sum(g["mem"] for g in scen["guests"])
        for c, r in ref.items():
            v = r.get("saved_pct_guest_ram", float("nan"))
            if c in ("none", "solo") or v != v:  # no RSS measured (results.csv of an older bench)
                continue
            cost = []
            for g in gated:
                a, b = r["%s_median" % g["name"]], ref["none"]["%s_median" % g["name"]]
                sp = max(x for x in (r["%s_spread" % g["name"]], ref["none"]["%s_spread" % g["name"]], 0)
                         if x == x)
                if not b or b != b or a != a or math.isinf(a) or math.isinf(b):
                    cost.append("%s -" % g["name"])
                    continue
                slower = (b - a) / b if g["better"] == "higher" else (a - b) / b
                cost.append("%s %.1f%% %s than none (spread %.0f%% of none)" % (
                    g["name"], 100 * abs(slower), "slower" if slower > 0 else "faster", 100 * sp / abs(b)))
            out.append("%s: %s saves %d%% of the guests' %d MiB (%d MiB of RSS); %s" % (
                s, c, round(r["saved_pct_guest_ram"]), guest_mem,
                round(r["saved_pct_guest_ram"] * guest_mem / 100), "; ".join(cost)))
    return out


def qemu_costs(rows, scenarios, configs):
    """What each guest's QEMU did in the window, median over the runs:
    its minor faults (each a 4 KiB page the host faulted in, or a huge page),
    its user and system CPU, how long its threads waited for a CPU, and the
    huge pages backing it when the window began.  Empty for a results.csv
    of an older bench."""
    out = []
    for s in scenarios:
        for g in SCENARIOS[s]["guests"]:
            for c in configs:
                rr = [r for r in rows if r["scenario"] == s and r["config"] == c and r["guest"] == g["name"]
                      and (r.get("qemu_minflt") or "") != ""]
                if not rr:
                    continue
                col = lambda k: med([float(r[k]) for r in rr])  # noqa: E731
                wait = [float(r["qemu_wait_s"]) for r in rr if (r.get("qemu_wait_s") or "") != ""]
                out.append("%s: %-20s %s's QEMU: %7.0f minor faults, user %5.2f s, system %5.2f s, "
                           "waited for a CPU %s s, %4.0f MiB in huge pages at the start" % (
                               s, c, g["name"], col("qemu_minflt"), col("qemu_user_s"), col("qemu_sys_s"),
                               "%5.2f" % med(wait) if wait else "    -", col("qemu_huge_start_bytes") / 2**20))
    return out


def fmt(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v == math.inf:
        return "never"
    if abs(v) >= 1000:
        return "%.0f" % v
    return "%.3g" % v


def summarize(rows, scenarios, configs, runs, out):
    gates = []  # (scenario, text, met)
    summary = []
    for s in scenarios:
        scen = SCENARIOS[s]
        guests = [g for g in scen["guests"] if g.get("metric")]
        prim = next(g for g in guests if g["name"] == scen["primary"])
        present = [c for c in configs if any(r["scenario"] == s and r["config"] == c for r in rows)]
        if not present:
            continue
        guest_mem = sum(g["mem"] for g in scen["guests"]) * 2**20
        print("\n== %s: %s; %d MiB host; %d run(s)" % (s, scen["title"].format(
            grow_at=scen["warmup"] + scen["measure"] // 3), scen["limit_mb"], runs))
        head = ["config"]
        for g in guests:
            head.append("%s %s" % (g["name"], g["metric"][2]))
            head.append("(spread)")
        head += ["%solo", "OOM", "gst sw-in", "host sw-in", "moves", "flips", "guests' RSS", "saved",
                 "dmn CPU", "dmn RSS"]
        table = [head]
        solo_v = med(metric_values(rows, s, "solo", prim["name"], prim["better"]))
        for c in present:
            rr = [r for r in rows if r["scenario"] == s and r["config"] == c]
            line = [c]
            srow = dict(scenario=s, config=c)
            for g in guests:
                vals = metric_values(rows, s, c, g["name"], g["better"])
                real = metric_values(rows, s, c, g["name"], g["better"], measured_only=True)
                line += [fmt(med(vals)), fmt(spread(real)) if real else "-"]
                srow["%s_median" % g["name"]] = med(vals)
                srow["%s_spread" % g["name"]] = spread(real)
            pv = med(metric_values(rows, s, c, prim["name"], prim["better"]))
            pct = float("nan")
            if solo_v and not math.isnan(solo_v) and not math.isinf(pv) and pv == pv:
                pct = 100 * pv / solo_v if prim["better"] == "higher" else 100 * solo_v / pv
            per_run = {}
            for r in rr:
                k = r["run"]
                p = per_run.setdefault(k, dict(oom=0, gin=0, hin=0, moves=0, flips=0, cpu=0.0, rss=0))
                p["oom"] += int(r["oom_kills"] or 0)
                p["gin"] += int(r["guest_swapin_bytes"] or 0)
                p["hin"] += int(r["host_swapin_bytes"] or 0)
                p["moves"] += int(r["balloon_moves"] or 0)
                p["flips"] += int(r["balloon_flips"] or 0)
                p["cpu"] = float(r["daemon_cpu_pct"] or 0)
                p["rss"] = int(r["daemon_rss_bytes"] or 0)
            pr = list(per_run.values())
            oom_total = sum(p["oom"] for p in pr)
            cpu_pct = med([p["cpu"] for p in pr])
            grss = guests_rss(rows, s, c)
            # solo runs fewer guests: nothing to compare
            saved = guests_rss(rows, s, "none") - grss if c != "solo" else float("nan")
            line += [fmt(pct) + "%" if pct == pct else "-", str(oom_total),
                     "%.1f MiB" % (med([p["gin"] for p in pr]) / 2**20),
                     "%.1f MiB" % (med([p["hin"] for p in pr]) / 2**20),
                     fmt(med([p["moves"] for p in pr])), fmt(med([p["flips"] for p in pr])),
                     "%.0f MiB" % (grss / 2**20) if grss == grss else "-",
                     "%d%%" % round(100 * saved / guest_mem) if saved == saved else "-",
                     "%.2f%%" % cpu_pct, "%.1f MiB" % (med([p["rss"] for p in pr]) / 2**20)]
            srow.update(pct_solo=pct, oom_kills=oom_total, guests_rss_bytes=grss,
                        saved_pct_guest_ram=100 * saved / guest_mem,
                        moves=med([p["moves"] for p in pr]),
                        flips=med([p["flips"] for p in pr]), daemon_cpu_pct=cpu_pct)
            summary.append(srow)
            table.append(line)
        widths = [max(len(row[i]) for row in table) for i in range(len(head))]
        for row in table:
            print("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                            enumerate(zip(row, widths))))
        gates += scenario_gates(rows, s, scen, guests, prim, present, summary)
    return summary, gates


def scenario_gates(rows, s, scen, guests, prim, present, summary):
    """The gates in one scenario for each split-lru configuration present
    (the bench's settings and the shipped defaults): (scenario, text, met)."""
    out = []
    if "none" not in present:
        return out
    for conf in [c for c in memory.JUDGED if c in present]:
        out += conf_scenario_gates(rows, s, scen, guests, prim, present, summary, conf)
    return out


def conf_scenario_gates(rows, s, scen, guests, prim, present, summary, conf):
    """scenario_gates for one configuration."""
    out = []
    srow = {r["config"]: r for r in summary if r["scenario"] == s}
    sl, no = srow[conf], srow["none"]
    if no["oom_kills"] == 0:
        out.append((s, "0 OOM kills (none had 0): %s %d" % (conf, sl["oom_kills"]), sl["oom_kills"] == 0))
    else:
        out.append((s, "no more OOM kills than none (%d): %s %d" % (no["oom_kills"], conf, sl["oom_kills"]),
                    sl["oom_kills"] <= no["oom_kills"]))
    for g in guests:
        if not g.get("gated"):
            continue
        a = metric_values(rows, s, conf, g["name"], g["better"])
        b = metric_values(rows, s, "none", g["name"], g["better"])
        spreads = [spread(metric_values(rows, s, c, g["name"], g["better"], measured_only=True))
                   for c in (conf, "none")]
        sp = max([x for x in spreads if x == x] or [0])
        ma, mb = med(a), med(b)
        if g["better"] == "higher":
            met = ma >= mb - sp
            txt = "%s %s not below none beyond spread: %s vs %s (spread %s)" % (conf, g["name"], fmt(ma), fmt(mb),
                                                                              fmt(sp))
        else:
            met = ma <= mb + sp
            txt = "%s %s not slower than none beyond spread: %s vs %s s (spread %s)" % (
                conf, g["name"], fmt(ma), fmt(mb), fmt(sp))
        out.append((s, txt, met))
    if "solo" in present:
        pct = sl["pct_solo"]
        if scen.get("solo_possible", True):
            out.append((s, "%s %s >= 95%% of solo: %s%%" % (conf, prim["name"], fmt(pct)), pct == pct and pct >= 95))
        else:
            out.append((s, "%s %s >= 95%% of solo: %s%% -- not physically possible: %s" % (
                conf, prim["name"], fmt(pct), scen.get("solo_reason", "")), None))
    if scen.get("idle_gate"):
        out.append((s, "no pressure: %s <= 2 balloon moves (%s)" % (conf, fmt(sl["moves"])), sl["moves"] <= 2))
        out.append((s, "no pressure: %s daemon < 1%% of a core (%.2f%%)" % (conf, sl["daemon_cpu_pct"]),
                    sl["daemon_cpu_pct"] < 1))
    return out


def plot(summary, scenarios, configs, runs, out):
    png = os.path.join(out, "bench.png")
    if os.path.exists(png):
        os.unlink(png)
    if not shutil.which("gnuplot"):
        log("no gnuplot: no plot")
        return
    panels = []
    for s in scenarios:
        scen = SCENARIOS[s]
        prim = next(g for g in scen["guests"] if g["name"] == scen["primary"])
        dat = os.path.join(out, "plot-%s.dat" % s)
        rows = [r for r in summary if r["scenario"] == s]
        if not rows:
            continue
        with open(dat, "w") as f:
            for r in rows:
                v = r.get("%s_median" % prim["name"], float("nan"))
                sp = r.get("%s_spread" % prim["name"], 0)
                label = ""
                if v == math.inf:  # never finished: a bar as long as the window, labelled
                    v, sp, label = scen["measure"], 0, "never"
                elif v != v:
                    v, sp, label = 0, 0, "no data"
                f.write('"%s" %g %g "%s"\n' % (r["config"], v, sp if sp == sp else 0, label))
        unit = "%s burst seconds (lower is better)" % prim["name"] if prim["better"] == "lower" else \
            "%s %s" % (prim["name"], prim["metric"][2])
        panels.append('set title "%s: %s"\nplot "%s" using 2:3:xtic(1) lc rgb "#3060c0", '
                      '"" using 0:2:4 with labels offset char 0,1 tc rgb "#c00000"' % (s, unit, dat))
    if not panels:
        return
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    script = """set terminal png size 1400,%d noenhanced
set output "%s"
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.8 border -1
set yrange [0:*]
set offsets 0,0,graph 0.12,0
set key off
set xtics rotate by -30
set multiplot layout %d,%d title "membal bench: median and spread of %d run(s) per configuration"
%s
unset multiplot
""" % (380 * nrows, png, nrows, cols, runs, "\n".join(panels))
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        log("gnuplot failed: %s" % r.stderr.strip()[-300:])
    else:
        log("plot: %s" % png)


def overcommit_scenarios(scenarios, ratios):
    """SCENARIO@Rx copies of each scenario, host limit = guests' memory / R."""
    out = []
    for s in scenarios:
        base = SCENARIOS[s]
        total = sum(g["mem"] for g in base["guests"])
        for r in ratios:
            name = "%s@%gx" % (s, r)
            d = dict(base)
            d["limit_mb"] = int(round(total / r))
            d["solo_limit_mb"] = base["limit_mb"]  # the reference is not squeezed with the rest
            d["title"] = "%s, %g x overcommitted" % (base["title"], r)
            d["sweep"] = (s, r)
            SCENARIOS[name] = d
            out.append(name)
    return out


def plot_overcommit(summary, scenarios, configs, runs, out):
    """% of solo against the overcommit ratio, a line per configuration;
    returns the headline lines (highest ratio with >= 95% of solo)."""
    sweep = {}
    for s in scenarios:
        if "sweep" not in SCENARIOS[s]:
            continue
        base, ratio = SCENARIOS[s]["sweep"]
        for r in summary:
            if r["scenario"] == s and r["config"] != "solo" and r["pct_solo"] == r["pct_solo"]:
                sweep.setdefault((base, r["config"]), []).append((ratio, r["pct_solo"]))
    lines = []
    for (base, c), pts in sorted(sweep.items()):
        pts.sort()
        ok = [x for x, p in pts if p >= 95]
        lines.append("%s: %s keeps >= 95%% of solo up to %s (%s)" % (
            base, c, ("%gx" % max(ok)) if ok else "no ratio tried",
            ", ".join("%gx %.0f%%" % (x, p) for x, p in pts)))
    if not sweep or not shutil.which("gnuplot"):
        return lines
    plots = []
    for (base, c), pts in sorted(sweep.items()):
        dat = os.path.join(out, "overcommit-%s-%s.dat" % (base, c))
        with open(dat, "w") as f:
            for x, p in pts:
                f.write("%g %g\n" % (x, p))
        plots.append('"%s" using 1:2 with linespoints lw 2 title "%s %s"' % (dat, base, c))
    png = os.path.join(out, "overcommit.png")
    script = """set terminal png size 900,500 noenhanced
set output "%s"
set title "primary guest's %% of solo against overcommit (median of %d run(s))"
set xlabel "guest memory / host memory"
set ylabel "%% of solo"
set yrange [0:*]
set key outside right
plot 95 with lines dt 2 lc rgb "#888888" title "95%%", %s
""" % (png, runs, ", ".join(plots))
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    log("gnuplot failed: %s" % r.stderr.strip()[-300:] if r.returncode else "plot: %s" % png)
    return lines


def report(rows, scenarios, configs, runs, out):
    """The tables (stdout), summary.csv and the plots of the rows of a
    bench; returns how many gates were missed."""
    summary, gates = summarize(rows, scenarios, configs, runs, out)
    memory.memory_tables(rows, scenarios, configs, SCENARIOS)
    for s in scenarios:
        present = [c for c in configs if any(r["scenario"] == s and r["config"] == c for r in rows)]
        gates += memory.memory_gates(rows, s, SCENARIOS[s], present, SCENARIOS[s]["measure"])
    lines = memory.stall_kinds(rows, scenarios, configs, SCENARIOS)
    if lines:
        print("\nthe working-set guests' memory stall by kind (median over the rounds):")
        for line in lines:
            print("  " + line)
    lines = memory.resolution(rows, scenarios, configs, SCENARIOS)
    if lines:
        print("\nhow wide each measure's 95% interval is (working-set guests, every scenario x configuration):")
        for line in lines:
            print("  " + line)
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        keys = sorted({k for r in summary for k in r}, key=lambda k: (k not in ("scenario", "config"), k))
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(summary)
    print("\ngates (split-lru, split-lru-shipped):")
    missed = 0
    for s, text, met in gates:
        tag = "met:   " if met else ("n/a:   " if met is None else "MISSED:")
        missed += met is False
        print("  %s %s: %s" % (tag, s, text))
    lines = memory.goals(rows, scenarios, SCENARIOS, {s: SCENARIOS[s]["measure"] for s in scenarios})
    if lines:
        print("\ngoal: the working-set guest's stall and refaults <= 5% of none's (issues 33, 36):")
        for s, text, met in lines:
            print("  %s %s: %s" % ("met:    " if met else ("n/a:    " if met is None else "not yet:"), s, text))
    lines = savings(rows, summary, scenarios)
    if lines:
        print("\nmemory saved against none (the guests' mean RSS in the window), and the gated guests' cost:")
        for line in lines:
            print("  " + line)
    lines = qemu_costs(rows, scenarios, configs)
    if lines:
        print("\neach guest's QEMU in the window (median over runs):")
        for line in lines:
            print("  " + line)
    plot(summary, scenarios, configs, runs, out)
    for line in plot_overcommit(summary, scenarios, configs, runs, out):
        print(line)
    return missed


def report_again(out):
    """--report: the tables of OUT/results.csv, scenarios and configurations
    in the order they ran."""
    results = os.path.join(out, "results.csv")
    try:
        with open(results) as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        log("%s: %s" % (results, e.strerror))
        return 1
    if not rows:
        log("%s: no runs in it" % results)
        return 1
    scenarios, configs = [], []
    for r in rows:
        name = r["scenario"]
        if name not in SCENARIOS and "@" in name:
            base, ratio = name.split("@", 1)
            try:
                if base in SCENARIOS and ratio.endswith("x"):
                    overcommit_scenarios([base], [float(ratio[:-1])])
            except ValueError:
                pass  # not a ratio: reported as unknown below
        if name not in SCENARIOS or r["config"] not in CONFIGS:
            log("%s: scenario %s / configuration %s unknown to this bench" % (results, name, r["config"]))
            return 1
        scenarios += [name] if name not in scenarios else []
        configs += [r["config"]] if r["config"] not in configs else []
    runs = max(int(r["run"]) for r in rows)
    print("membal bench (report of %s): accel %s; %d round(s)" % (
        results, ",".join(sorted({r["accel"] for r in rows})), runs))
    report(rows, scenarios, configs, runs, out)
    return 0


def pgdb_master(images):
    return os.path.join(images, "pgdb.img")


def build_pgdb(images):
    """The PostgreSQL disk the pgdata guests boot with, made again when
    tests/guest/build-pgdisk.sh is newer; None, or why it cannot be made."""
    script = os.path.join(TOP, "tests/guest/build-pgdisk.sh")
    path = pgdb_master(images)
    if os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(script):
        return None
    p = subprocess.run(["sh", script, path], capture_output=True, text=True)
    if p.returncode != 0:
        return (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
    log(p.stdout.strip().splitlines()[-1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--scenario", default="", help="scenarios to run (default: all)")
    ap.add_argument("--configs", default="", help="configurations to run (default: all)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--overcommit", default="",
                    help="ratios of guest memory to host memory to sweep each scenario over, e.g. \"1.2 1.6 2.0\"")
    ap.add_argument("--pin", action="store_true", help="each guest of a scenario on a CPU of its own")
    ap.add_argument("--flat", action="store_true",
                    help="every QEMU in the host's cgroup (before 2026-12-08 the only layout), not each in its own")
    ap.add_argument("--perf", metavar="GUEST", default="",
                    help="profile that guest's QEMU over the measure window (perf record, 499 Hz; the "
                         "report by symbol in OUT/logs/perf-SCENARIO-CONFIG-RUN-GUEST.txt)")
    ap.add_argument("--warmup", type=int, default=0,
                    help="seconds from the guests' boot to the measure window, for every scenario "
                         "(default: each scenario's own; a burst comes 4 s into the window)")
    ap.add_argument("--smoke", action="store_true",
                    help="one short round of %s x %s, gates reported only" % (
                        "+".join(SMOKE_SCENARIOS), "+".join(SMOKE_CONFIGS)))
    ap.add_argument("--guest-append", default="", metavar="ARGS",
                    help="kernel arguments added to every guest's command line "
                         "(e.g. init_on_alloc=0)")
    ap.add_argument("--out", default=os.path.join(TOP, "build/bench"))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--report", action="store_true",
                    help="run nothing: print the tables and plots again from OUT/results.csv")
    ap.add_argument("--no-gates", action="store_true")
    args = ap.parse_args()
    if args.list:
        for n, s in SCENARIOS.items():
            print("scenario %-12s %s" % (n, s["title"].format(grow_at="N")))
        for n, c in CONFIGS.items():
            print("config   %-15s %s" % (n, c))
        return 0
    if args.report:
        return report_again(os.path.abspath(args.out))
    scenarios = names(args.scenario, SCENARIOS, "scenario") or list(SCENARIOS)
    configs = names(args.configs, CONFIGS, "configuration") or list(CONFIGS)
    if args.smoke:
        scenarios = names(args.scenario, SCENARIOS, "scenario") or SMOKE_SCENARIOS
        configs = names(args.configs, CONFIGS, "configuration") or SMOKE_CONFIGS
        args.runs = 1
        args.no_gates = True
    if args.runs < 1:
        sys.exit("bench: --runs must be at least 1")
    if args.warmup < 0 or args.warmup > 3600:
        sys.exit("bench: --warmup takes 0 (each scenario's own) to 3600 seconds")
    args.cpus = sorted(os.sched_getaffinity(0))
    if args.overcommit:
        try:
            ratios = [float(x) for x in args.overcommit.replace(",", " ").split()]
        except ValueError:
            sys.exit("bench: --overcommit takes ratios such as \"1.2 1.6 2.0\"")
        if not ratios or any(r <= 0 for r in ratios):
            sys.exit("bench: --overcommit ratios must be positive")
        scenarios = overcommit_scenarios(scenarios, ratios)
    if os.geteuid() != 0:
        log("needs root (cgroups, swapon)")
        return 1
    for tool in (BOOT, BALANCERD):
        if not os.access(tool, os.X_OK):
            log("%s missing: run make (and make guest)" % tool)
            return 1
    args.out = os.path.abspath(args.out)
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    images = os.path.join(args.out, "images")
    os.makedirs(images, exist_ok=True)
    if any(g.get("disk") == "pgdata" for s in scenarios for g in SCENARIOS[s]["guests"]):
        why = build_pgdb(images)
        if why:
            skipped = [s for s in scenarios if any(g.get("disk") == "pgdata" for g in SCENARIOS[s]["guests"])]
            scenarios = [s for s in scenarios if s not in skipped]
            log("scenario(s) %s skipped: no PostgreSQL disk: %s" % (", ".join(skipped), why))
            if not scenarios:
                return 1
    workdir = tempfile.mkdtemp(prefix="membal-bench-", dir="/var/tmp")
    swap = Swap()
    args.acct = memory.DelayAccounting()
    results = os.path.join(args.out, "results.csv")
    rows = []
    started = time.time()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    try:
        swap.ensure()
        args.acct.start()
        if args.acct.why:
            log("memory stall time not measured: %s" % args.acct.why)
        with open(results, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            total = args.runs * len(scenarios) * len(configs)
            done = 0
            log("%d scenario(s) x %d configuration(s) x %d round(s) = %d runs" % (
                len(scenarios), len(configs), args.runs, total))
            for n in range(1, args.runs + 1):
                k = (n - 1) % len(configs)
                order = configs[k:] + configs[:k]  # rotated between rounds
                for s in scenarios:
                    for pos, c in enumerate(order):
                        run = Run(args, s, c, n, pos + 1, workdir, images)
                        new = run.execute()
                        for r in new:
                            w.writerow(r)
                        f.flush()
                        rows += new
                        done += 1
                        log("%s/%s run %d (%d/%d, %.0f min): %s" % (
                            s, c, n, done, total, (time.time() - started) / 60, ", ".join(
                                "%s %s=%s%s" % (r["guest"], r["metric"], r["value"],
                                                " OOM=%s" % r["oom_kills"] if r["oom_kills"] else "")
                                for r in new if r["metric"])))
    finally:
        args.acct.close()
        swap.remove()
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.time() - started
    # re-read as strings, as a later reader of results.csv would
    with open(results) as f:
        rows = list(csv.DictReader(f))
    print("\nmembal bench: %s; accel %s; %d round(s); %.0f min%s" % (
        os.path.basename(results), ",".join(sorted({r["accel"] for r in rows})), args.runs, elapsed / 60,
        "; guest i on CPU i of %s" % ",".join(map(str, args.cpus)) if args.pin else ""))
    missed = report(rows, scenarios, configs, args.runs, args.out)
    log("results: %s, %s" % (results, os.path.join(args.out, "summary.csv")))
    broken = [r for r in rows if r["daemon_ok"] == "0"]
    if broken:
        log("%d row(s) from runs whose balancerd exited or did not manage every guest: %s" % (
            len(broken), ", ".join(sorted({"%s/%s/%s" % (r["scenario"], r["config"], r["run"])
                                           for r in broken}))))
        return 1
    empty = [r for r in rows if r["metric"] and r["value"] == ""]
    if empty:
        log("%d measurement(s) came back empty (a guest printed nothing in the window): %s" % (
            len(empty), ", ".join("%s/%s/%s/%s" % (r["scenario"], r["config"], r["run"], r["guest"])
                                  for r in empty[:8])))
        return 1
    if missed and not args.no_gates:
        log("%d gate(s) missed" % missed)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

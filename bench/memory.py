"""What a memory balancer changes, read per guest over a run's measure window.

Under TCG on two cores a guest's ops/s is set mostly by the CPU it gets; what
a balancer changes is memory: how long the guest waited for it, how much of
its working set came back from swap or was read again, what it cost the host,
and whether anything was killed.  bench.py reads these at the window's start
and end (the `Probe` below) and reports them (`memory_report`).

Per guest, in the window:
  stall_s          its QEMU's memory stall: the host's delay accounting
                   (taskstats, summed over its threads) for swap-in, direct
                   reclaim (freepages), thrashing and compaction.  Needs
                   kernel.task_delayacct, which the bench turns on for the run
                   and restores, and python3-pyroute2 (Debian's taskstats
                   client).  Threads that ended inside the window are not
                   counted (their delays leave with them).
  guest_psi_some_s / guest_psi_full_s
                   the guest's own memory pressure: PSI memory totals from its
                   /proc/pressure/memory (the MEMINFO line, tests/guest/init)
  guest_refault_pages
                   workingset refaults in the guest (anon + file): pages it
                   evicted and then needed again
  host_swapin_bytes its QEMU's major faults x 4 KiB (bench.py, as before)
  vcpu_wait_s      how long its vCPU thread waited for a CPU (schedstat run
                   delay); value_cpu is the workload's rate per second of
                   window the vCPU was not waiting: ops/s with the CPU queue
                   taken out
Per run: footprint_gib_s (the guests' QEMU resident memory integrated over
the window), host_oom_kills (the host cgroup's oom_kill count), qemu_died
(a QEMU that was gone at the end: the worst harm).

Every figure is reported as the median over rounds with a bootstrap 95 %
interval (resampling the rounds; with 3 rounds that interval is [min, max]).
"""

import math
import os
import random
import re
import statistics

STALL_FIELDS = ("swapin_delay_total", "freepages_delay_total", "thrashing_delay_total",
                "compact_delay_total")
STALL_KINDS = ("swapin", "reclaim", "thrash", "compact")  # the row fields stall_KIND_s


def _taskstats_client():
    """Debian's taskstats client (python3-pyroute2 0.7) knows the struct up to
    version 8; the kernel's grew since (linux/taskstats.h).  The fields after
    cpu_scaled_run_real_total, in the kernel's order, are appended here: they
    are all __u64 up to compact_delay_total, so no padding comes between.
    That layout holds for versions 11 to 14 and 16 on (version 15 put
    *_delay_max/min in the middle; 16 moved them to the end): DelayAccounting
    checks the version the kernel reports before using any of it."""
    from pyroute2.netlink.taskstats import TaskStats, taskstatsmsg
    try:
        from pyroute2.netlink.taskstats import tstats
    except ImportError as e:  # another pyroute2 than Debian 12's 0.7
        raise RuntimeError("this python3-pyroute2 has no taskstats struct to extend (%s)" % e) from e
    later = (("freepages_count", "Q"), ("freepages_delay_total", "Q"),
             ("thrashing_count", "Q"), ("thrashing_delay_total", "Q"),
             ("ac_btime64", "Q"), ("compact_count", "Q"), ("compact_delay_total", "Q"))
    if "freepages_delay_total" not in dict(tstats.fields):
        for cls in (taskstatsmsg.stats, taskstatsmsg.aggr_id.stats, taskstatsmsg.aggr_pid.stats,
                    taskstatsmsg.aggr_tgid.stats):
            cls.fields = tstats.fields + later
    ts = TaskStats()
    ts.bind()
    return ts


class DelayAccounting:
    """kernel.task_delayacct on for the bench, restored at the end; memory
    stall seconds of a thread.  `why` says why nothing can be measured."""

    SYSCTL = "/proc/sys/kernel/task_delayacct"

    def __init__(self):
        self.old = None
        self.client = None
        self.why = None

    def start(self):
        try:
            self.client = _taskstats_client()
        except ImportError:
            self.why = "no python3-pyroute2 (make deps installs it)"
            return
        except Exception as e:  # noqa: BLE001 -- netlink: no TASKSTATS family, permission
            self.why = "taskstats: %s" % e
            return
        version = self.version()
        if version is None or version < 11 or version == 15:
            self.why = "taskstats version %s: its delay fields are not where this bench reads them" % version
            self.close()
            return
        try:
            with open(self.SYSCTL) as f:
                self.old = f.read().strip()
            if self.old != "1":
                with open(self.SYSCTL, "w") as f:
                    f.write("1")
        except OSError as e:
            self.why = "%s: %s" % (self.SYSCTL, e.strerror)
            self.close()

    def close(self):
        if self.old is not None and self.old != "1":
            try:
                with open(self.SYSCTL, "w") as f:
                    f.write(self.old)
            except OSError:
                pass
        self.old = None
        if self.client:
            self.client.close()
            self.client = None

    def stats(self, tid):
        """One thread's struct taskstats as a dict; None when it is gone (or
        there is no client)."""
        if not self.client:
            return None
        try:
            msg = self.client.get_pid_stat(tid)[0]
        except Exception:  # noqa: BLE001 -- ESRCH: the thread ended
            return None
        for name, aggr in msg["attrs"]:
            if name == "TASKSTATS_TYPE_AGGR_PID":
                return dict(aggr["attrs"]).get("TASKSTATS_TYPE_STATS")
        return None

    def version(self):
        """The kernel's struct taskstats version (None: not readable)."""
        st = self.stats(os.getpid())
        return st.get("version") if st else None

    def thread_stall_ns(self, tid):
        """Nanoseconds one thread waited for memory, by kind (STALL_FIELDS);
        None when it is gone."""
        st = self.stats(tid)
        return [st.get(k, 0) for k in STALL_FIELDS] if st else None


def threads(pid):
    try:
        return [int(t) for t in os.listdir("/proc/%d/task" % pid)]
    except OSError:
        return []


def vcpu_threads(pid):
    """QEMU's vCPU threads: named "CPU n/KVM", "CPU n/TCG" or, with one TCG
    thread for all, "ALL CPUs/TCG" (QEMU -name ...,debug-threads=on)."""
    out = []
    for tid in threads(pid):
        try:
            with open("/proc/%d/task/%d/comm" % (pid, tid)) as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm.endswith("/TCG") or comm.endswith("/KVM"):
            out.append(tid)
    return out


def run_delay_s(pid, tids):
    total = 0
    for tid in tids:
        try:
            with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


def cgroup_oom_kills(cg):
    """The OOM kills inside a memory cgroup (v1 memory.oom_control, v2
    memory.events), 0 when it cannot be read."""
    for name in ("memory.oom_control", "memory.events"):
        try:
            with open(os.path.join(cg, name)) as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    if k == "oom_kill":
                        return int(v)
        except (OSError, ValueError):
            continue
    return 0


def guest_line(lines, upto=None):
    """The last whole MEMINFO line of a console (before line `upto`) as a
    dict of its fields; {} when there is none.  Whole: it ends with its last
    field (a kernel message, the OOM killer's under `quiet`, can cut into
    a line the guest prints)."""
    part = lines if upto is None else lines[:upto]
    for line in reversed(part):
        if line.startswith("MEMINFO ") and re.search(r" psi_full_us=[0-9]+$", line):
            out = {}
            for kv in line.split()[1:]:
                k, _, v = kv.partition("=")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
            return out
    return {}


def window_start(lines, nlines):
    """A guest's MEMINFO counters at the window's start (its console's
    first `nlines` lines), from its last boot before it; {} (from zero)
    when it booted again inside the window, or had not reported since its
    last boot: its counters restarted with its kernel."""
    boots = [i for i, line in enumerate(lines) if line.startswith("MEMBAL-GUEST-READY")]
    if boots and boots[-1] >= nlines:
        return {}
    return guest_line(lines[boots[-1] if boots else 0:nlines])


class Probe:
    """One guest's counters at a moment: taken at the window's start and end."""

    def __init__(self, acct, pid):
        self.pid = pid
        self.stall = {}
        for tid in threads(pid):
            ns = acct.thread_stall_ns(tid)
            if ns is not None:
                self.stall[tid] = ns
        self.vcpus = vcpu_threads(pid)
        self.run_delay = run_delay_s(pid, self.vcpus)

    def window(self, start, acct_why, lines, nlines, measure, counted):
        """The row fields of the window from `start` (a Probe) to this one.
        `counted`: the workload's cumulative count over the window (or None)."""
        out = {}
        if acct_why is None and self.stall:
            kinds = [sum(ns[k] - start.stall.get(tid, [0] * len(STALL_FIELDS))[k] for tid, ns in self.stall.items())
                     / 1e9 for k in range(len(STALL_FIELDS))]
            out["stall_s"] = "%.3f" % sum(kinds)
            for name, v in zip(STALL_KINDS, kinds):
                out["stall_%s_s" % name] = "%.3f" % v
        if self.vcpus and start.vcpus:
            wait = max(0.0, self.run_delay - start.run_delay)
            out["vcpu_wait_s"] = "%.2f" % wait
            if counted is not None and measure - wait > 0.5:
                out["value_cpu"] = "%g" % (counted / (measure - wait))
        a, b = window_start(lines, nlines), guest_line(lines)
        if "psi_some_us" in b:
            for k in ("some", "full"):
                out["guest_psi_%s_s" % k] = "%.3f" % ((b["psi_%s_us" % k] - a.get("psi_%s_us" % k, 0)) / 1e6)
            out["guest_refault_pages"] = "%d" % (b["wsr_anon"] + b["wsr_file"] - a.get("wsr_anon", 0)
                                                 - a.get("wsr_file", 0))
        return out


# ---- summary ----

def median_interval(vals, rounds=2000, seed=1):
    """The median and a bootstrap 95 % interval of it (the rounds resampled
    with replacement); (nan, nan, nan) for no values."""
    vals = [v for v in vals if v == v]
    if not vals:
        return float("nan"), float("nan"), float("nan")
    rng = random.Random(seed)  # the same data gives the same interval
    meds = sorted(statistics.median(rng.choices(vals, k=len(vals))) for _ in range(rounds))
    return statistics.median(vals), meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]


def per_run(rows, scen, conf, guest, key, scale=1.0):
    """A field of one guest over the runs (None: every guest's, summed per run)."""
    runs = {}
    for r in rows:
        if r["scenario"] != scen or r["config"] != conf or (guest and r["guest"] != guest):
            continue
        v = r.get(key) or ""
        if v in ("", "nan"):
            runs.setdefault(r["run"], None)
            continue
        if r["run"] in runs and runs[r["run"]] is None:
            continue
        runs[r["run"]] = runs.get(r["run"], 0.0) + float(v) * scale
    return [v for v in runs.values() if v is not None]


def cell(vals, unit=""):
    m, lo, hi = median_interval(vals)
    if m != m:
        return "-"
    return "%s [%s-%s]%s" % (num(m), num(lo), num(hi), unit)


def num(v):
    if v == math.inf:
        return "inf"
    if abs(v) >= 1e6:
        return "%.2fM" % (v / 1e6)
    if abs(v) >= 1e4:
        return "%.1fk" % (v / 1e3)
    if abs(v) >= 100:
        return "%.0f" % v
    return "%.3g" % v


def width(vals):
    """The 95 % interval's width as a share of the median (nan: no data, or
    a median of 0 with no spread)."""
    m, lo, hi = median_interval(vals)
    if m != m:
        return float("nan")
    if m == 0:
        return 0.0 if hi == lo else math.inf
    return (hi - lo) / abs(m)


MiB = 1 / 2**20

# (column, row field, scale, per guest?)
MEASURES = [
    ("stall s", "stall_s", 1.0, True),
    ("PSI some s", "guest_psi_some_s", 1.0, True),
    ("host sw-in MiB", "host_swapin_bytes", MiB, True),
    ("refault MiB", "guest_refault_pages", 4096 * MiB, True),
    ("gst sw-in MiB", "guest_swapin_bytes", MiB, True),
]


def memory_tables(rows, scenarios, configs, scenario_defs):
    """Print, per scenario, every measure of the working-set guests (the
    gated ones) and the run-wide harm and footprint, median [95 % interval]."""
    for s in scenarios:
        scen = scenario_defs[s]
        present = [c for c in configs if any(r["scenario"] == s and r["config"] == c for r in rows)]
        if not present:
            continue
        gated = [g for g in scen["guests"] if g.get("gated")]
        print("\n== %s: memory, median [95%% interval] over the rounds" % s)
        head = ["config"]
        for g in gated:
            head += ["%s %s" % (g["name"], m[0]) for m in MEASURES]
            if g.get("window") != "once":
                head += ["%s ops/s" % g["name"], "%s ops/s of CPU" % g["name"]]
        head += ["GiB*s", "guest OOM", "host OOM", "QEMU died"]
        table = [head]
        for c in present:
            line = [c]
            for g in gated:
                for _, key, scale, _ in MEASURES:
                    line.append(cell(per_run(rows, s, c, g["name"], key, scale)))
                if g.get("window") != "once":
                    line.append(cell(per_run(rows, s, c, g["name"], "value")))
                    line.append(cell(per_run(rows, s, c, g["name"], "value_cpu")))
            line.append(cell(per_run(rows, s, c, None, "footprint_gib_s")))
            line.append(fmt_sum(rows, s, c, "oom_kills"))
            line.append(fmt_max(rows, s, c, "host_oom_kills"))
            line.append(fmt_sum(rows, s, c, "qemu_died"))
            table.append(line)
        print_table(table)


def stall_kinds(rows, scenarios, configs, scenario_defs):
    """What each working-set guest's QEMU waited for: the median over the
    rounds of each kind of memory stall (s)."""
    out = []
    for s in scenarios:
        for g in [g for g in scenario_defs[s]["guests"] if g.get("gated")]:
            for c in configs:
                parts = []
                for kind in STALL_KINDS:
                    vals = per_run(rows, s, c, g["name"], "stall_%s_s" % kind)
                    if vals:
                        parts.append("%s %.3f" % (kind, median_interval(vals)[0]))
                if parts:
                    out.append("%s: %-18s %s's QEMU waited: %s s" % (s, c, g["name"], ", ".join(parts)))
    return out


def fmt_sum(rows, s, c, key):
    vals = [int(float(r[key])) for r in rows if r["scenario"] == s and r["config"] == c
            and (r.get(key) or "") != ""]
    return str(sum(vals)) if vals else "-"


def fmt_max(rows, s, c, key):
    """A per-run count every guest's row repeats: summed over runs."""
    by_run = {}
    for r in rows:
        if r["scenario"] == s and r["config"] == c and (r.get(key) or "") != "":
            by_run[r["run"]] = int(float(r[key]))
    return str(sum(by_run.values())) if by_run else "-"


def print_table(table):
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  " + "  ".join(cell_.rjust(w) if i else cell_.ljust(w)
                               for i, (cell_, w) in enumerate(zip(row, widths))))


def resolution(rows, scenarios, configs, scenario_defs):
    """How wide each measure's 95 % interval is, as a share of its median,
    over every (scenario, configuration, working-set guest) with data: the
    median and the largest.  A measure resolves a 5 % difference when its
    interval is under 5 % of the median."""
    widths = {}
    for s in scenarios:
        for g in [g for g in scenario_defs[s]["guests"] if g.get("gated")]:
            keys = [(m[0], m[1], m[2]) for m in MEASURES]
            if g.get("window") != "once":
                keys += [("ops/s", "value", 1.0), ("ops/s of CPU", "value_cpu", 1.0)]
            else:
                keys += [("burst s", "value", 1.0)]
            for c in configs:
                for name, key, scale in keys:
                    vals = per_run(rows, s, c, g["name"], key, scale)
                    if len(vals) >= 2 and median_interval(vals)[0] > 0:
                        widths.setdefault(name, []).append(width(vals))
    out = []
    for name, ws in widths.items():
        finite = [w for w in ws if w == w]
        if not finite:
            continue
        out.append("%-15s interval / median: median %5.0f %%, largest %5.0f %% (%d cells)" % (
            name, 100 * statistics.median(finite), 100 * max(finite), len(finite)))
    return out


# What a gate does not count as harm: a stall of 1 % of the window, swap-in
# or refaults of 1 % of the guest's memory.  Below that the measures are
# noise on this machine (a guest's QEMU faults a few MiB back from host
# swap in any run), and a gate must not be decided by noise.
MATERIAL_STALL = 0.01
MATERIAL_MEMORY = 0.01
# ... nor a throughput 1 % below none's: a paced workload's rate (db-stream's
# 4000 operations a second) varies by a few operations between rounds, and
# its intervals are narrow enough to lie apart by that much
MATERIAL_RATE = 0.01

# the configurations the gates and the goals judge: split-lru at the
# bench's settings and at the shipped defaults
JUDGED = ("split-lru", "split-lru-shipped")


def memory_gates(rows, s, scen, present, measure_s):
    """Each split-lru configuration present (the bench's settings and the
    shipped defaults) against none on the memory measures: (scenario, text,
    met).  Missed when its median lies above none's 95 % interval by more
    than the material floor (stall, PSI, host swap-in, refaults), on any
    host OOM kill or dead QEMU, and on throughput only when its whole
    interval lies below none's by more than MATERIAL_RATE of none's."""
    out = []
    if "none" not in present:
        return out
    for conf in [c for c in JUDGED if c in present]:
        out += conf_gates(rows, s, scen, conf, measure_s)
    return out


def conf_gates(rows, s, scen, conf, measure_s):
    """memory_gates for one configuration."""
    out = []
    # a run's host OOM kills are repeated on each of its guests' rows, a dead QEMU is one guest's
    for what, v in (("host OOM kills", fmt_max(rows, s, conf, "host_oom_kills")),
                    ("QEMUs that died", fmt_sum(rows, s, conf, "qemu_died"))):
        if v != "-":
            out.append((s, "%s: %s %s" % (what, conf, v), v == "0"))
    for g in [g for g in scen["guests"] if g.get("gated")]:
        for name, key, scale, _ in MEASURES[:4]:
            a = per_run(rows, s, conf, g["name"], key, scale)
            b = per_run(rows, s, "none", g["name"], key, scale)
            if not a or not b:
                continue
            ma = median_interval(a)[0]
            mb, _, hb = median_interval(b)
            floor = MATERIAL_STALL * measure_s if name.endswith(" s") else MATERIAL_MEMORY * g["mem"]
            out.append((s, "%s %s %s not above none's interval by more than %s: %s vs %s [..%s]" % (
                conf, g["name"], name, num(floor), num(ma), num(mb), num(hb)), ma <= hb + floor))
        if g.get("window") != "once":
            # a paced workload's rate is its pace less what stalls cost it:
            # its operations per second of CPU say nothing
            key = "value_cpu" if not g.get("paced") and per_run(rows, s, "none", g["name"], "value_cpu") else "value"
            a, b = per_run(rows, s, conf, g["name"], key), per_run(rows, s, "none", g["name"], key)
            if a and b:
                ma, _, ha = median_interval(a)
                mb, lb, _ = median_interval(b)
                out.append((s, "%s %s %s: its interval not wholly below none's by more than %g %%: %s [..%s] vs %s [%s..]" % (
                    conf, g["name"], "ops/s of CPU" if key == "value_cpu" else "ops/s", MATERIAL_RATE * 100, num(ma), num(ha), num(mb),
                    num(lb)), ha >= lb - MATERIAL_RATE * mb))
    return out


# issue 33's (seed, cachedb, many-small) and issue 36's (seed, cachedb and
# a database beside a streamer, its buffers anonymous or shared)
GOAL_SCENARIOS = ("seed", "cachedb", "many-small", "db-stream", "shmdb-stream")


def goals(rows, scenarios, scenario_defs, measure_s):
    """The working-set guest's stall time and refaults (host swap-in, guest
    refaults) at most 5 % of none's (issues 33 and 36), for each split-lru
    configuration present: (scenario, text, met).  Where none's own figure
    is below the material floor there is nothing to cut: met is None when
    the configuration stayed under that floor too, False when it did not."""
    out = []
    for s in scenarios:
        base = s.split("@")[0]
        if base not in GOAL_SCENARIOS:
            continue
        for conf in JUDGED:
            for g in [g for g in scenario_defs[s]["guests"] if g.get("gated")]:
                for name, key, scale in (("stall", "stall_s", 1.0), ("host swap-in", "host_swapin_bytes", MiB),
                                         ("guest refaults", "guest_refault_pages", 4096 * MiB)):
                    a, b = per_run(rows, s, conf, g["name"], key, scale), per_run(rows, s, "none", g["name"], key, scale)
                    if not a or not b:
                        continue
                    ma, mb = median_interval(a)[0], median_interval(b)[0]
                    floor = MATERIAL_STALL * measure_s[s] if name == "stall" else MATERIAL_MEMORY * g["mem"]
                    if mb < floor:
                        out.append((s, "%s %s %s: none's %s is below the material floor %s, nothing to cut; "
                                    "%s %s" % (g["name"], name, conf, num(mb), num(floor), num(ma),
                                               "within it" if ma < floor else "above it"),
                                    None if ma < floor else False))
                        continue
                    pct = 100 * ma / mb
                    out.append((s, "%s %s %s of none's: %s vs %s (%s %%)" % (
                        g["name"], name, conf, num(ma), num(mb), num(pct)), pct <= 5))
    return out

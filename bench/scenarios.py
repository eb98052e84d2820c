"""The benchmark's scenarios and configurations (data only; bench/bench.py runs them).

A scenario is a set of TCG guests started together in a memory cgroup that
stands for the host.  Every guest runs one workload from tests/guest/workloads
that prints a line per second (or, for burst, one line when done); `metric`
says which line and field the harness reads, `better` which way is good.

Guest keys:
  name      the guest's name (QEMU -name, balancerd's log)
  mem       RAM in MiB (the balloon's maximum)
  run       the workload, as membal.run= takes it (colons become spaces)
  disk      None, "swap" (a fresh zeroed image, the guest's own swap),
            "data" (a sparse image the workload reads: /dev/vda), or
            "pgdata" (a fresh copy of the PostgreSQL disk that
            tests/guest/build-pgdisk.sh makes: the pgdb workload's)
  metric    (line tag, field, name); window "measure" = the rate of a
            cumulative field over the measure window, "once" = the one value
            the workload prints (burst)
  better    "higher" or "lower"
  solo      the guest runs in the scenario's `solo` reference
  gated     its metric is held to the gates (bench.py: not below `none`)
  paced     its workload runs at a fixed rate (wss RATE): its rate is that
            pace less what stalls cost it, so the throughput gate reads raw
            ops/s, not ops/s of CPU
  boot_before  the guest boots that many seconds before the window, into
            the host the others have filled (balancerd is told its QMP
            socket from the start, and picks it up when it appears)
  reboot_before, run2  the guest reboots itself that many seconds before
            the window (tests/guest/init membal.reboot_after), into the
            workload run2 instead of run

Scenario keys: limit_mb (the cgroup: QEMU's own memory, about 70 MiB per
guest under TCG, is charged there too), warmup and measure (seconds),
primary (the guest whose metric is compared with solo), solo_possible (False
with the reason when 95% of solo cannot be reached by any policy).
"""

# (line tag, cumulative field, what the rate is called): the harness takes
# (field at the end of the window - field at its start) / window length, so a
# workload that stalls or dies counts as doing nothing for that time.
WSS = ("WSS", "ops", "ops/s")
STREAM = ("STREAM", "total_mb", "MiB/s")
CACHEDB = ("CACHEDB", "ops", "ops/s")
# (tag, field, name) of a one-off value: burst's allocation time, which must
# begin inside the measure window
BURST = ("BURST", "secs", "burst s")
# pgbench's transactions (tests/guest/workloads/pgdb.sh)
PGDB = ("PGDB", "ops", "tps")

def burst_beside_db_and_stream(title, cache_mb, tail, warmup):
    """B (512 MiB, no swap) idles, then allocates 300 MiB at once 4 s into
    the window ({burst_at}), beside W (wss 200 MiB, own swap) and S (a
    stream) in a 900 MiB host.  cache_mb and tail: burst's CACHE_MB and
    what follows BURST_MB, HOLD_S[:JOB_MB] (tests/guest/workloads/burst.c)."""
    return dict(
        title="B (%s; no swap) + W (wss 200 MiB) + S (stream)" % title,
        limit_mb=900, warmup=warmup, measure=26, primary="B",
        solo_possible=True,
        guests=[
            dict(name="B", mem=512, run="burst:/dev/vda:%d:{burst_at}:300:%s" % (cache_mb, tail), disk="data",
                 metric=BURST, better="lower", window="once", solo=True, gated=True),
            dict(name="W", mem=512, run="wss:200:80", disk="swap", metric=WSS, better="higher",
                 gated=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
        ])


def paced_db_beside_stream(program):
    """A database whose whole 320 MiB buffer pool is in use but lukewarm
    (4000 queries a second, each page touched every ~20 s), beside a
    streamer whose guest cycles its page cache every ~10 s.  To the host
    both are anonymous memory, and the database's pages look the colder:
    with no balancer the host swaps the database's QEMU.  Paced, so its
    ops/s is 4000 less what its stalls cost it.  program: wss (anonymous
    memory) or shmdb (shared memory)."""
    return dict(
        title="D (%s 320 MiB, all in use, 4000 ops/s, own swap) + S (stream)" % program,
        limit_mb=700, warmup=10, measure=30, primary="D", solo_possible=True,
        guests=[
            dict(name="D", mem=512, run="%s:320:100:0:0:0:4000" % program, disk="swap", metric=WSS,
                 better="higher", solo=True, gated=True, paced=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
        ])


def pgdb_beside_stream(title, burst):
    """Issue 48's mix of stock programs, as a new user tried it: P runs
    Debian's PostgreSQL 15 (shared_buffers 160 MB, held as Shmem) over a
    217 MiB pgbench database that it also reads through the guest's page
    cache (double buffering), queried by `pgbench -S` with 2 clients; S
    reads a large disk with buffered IO; B holds 300 MiB of page cache and
    idles, and with `burst` allocates 300 MiB 4 s into the window.  No
    guest has swap (cloud images): what the host is short of, it swaps
    from the QEMUs.  Three 512 MiB guests in a 900 MiB host."""
    return dict(
        title="P (PostgreSQL 15, pgbench -S, 217 MiB through the page cache) + S (stream) + B (%s)"
              % title,
        limit_mb=900, warmup=60, measure=90, primary="P", solo_possible=True,
        guests=[
            dict(name="P", mem=512, run="pgdb:/dev/vda:2", disk="pgdata", metric=PGDB,
                 better="higher", solo=True, gated=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
            dict(name="B", mem=512, disk="data", **(
                dict(run="burst:/dev/vda:300:{burst_at}:300:0", metric=BURST, better="lower",
                     window="once", gated=True) if burst else
                dict(run="burst:/dev/vda:300:100000:1:0", metric=None))),
        ])


SCENARIOS = {
    # The seed mails: a database-like working set next to a streaming job.
    "seed": dict(
        title="W (wss 320 MiB, 80% hot, own swap) + S (streams a 4 GiB disk)",
        limit_mb=640, warmup=10, measure=18, primary="W", solo_possible=True,
        guests=[
            dict(name="W", mem=512, run="wss:320:80", disk="swap", metric=WSS, better="higher",
                 solo=True, gated=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
        ]),
    # Issue 15's mix: a guest with a big page cache idles, then allocates
    # 300 MiB at once (no swap in it), next to a database and a streamer.
    "idle-burst": burst_beside_db_and_stream("300 MiB cache, idle, then allocates 300 MiB", 300, "0", 13),
    # Issue 32: as idle-burst, but B has no page cache to absorb the
    # allocation: it idles with its memory free, then allocates 300 MiB at
    # once (faster than a tick), with no swap.  A balloon that took its free
    # memory leaves it to its OOM killer unless the balloon deflates itself
    # (deflate-on-oom) or balancerd answers first.
    "burst-cold": burst_beside_db_and_stream("idle, no cache, then allocates 300 MiB at once", 0, "0", 40),
    # Issue 32's own host-OOM variant: as burst-cold, but B first ran a job
    # that used 300 MiB and freed it, so its free memory is memory its QEMU
    # touched -- host memory a balloon can take (burst-cold's untouched
    # free memory is not) -- then idles and allocates 300 MiB at once, no
    # swap.  Where the balloon took that memory, B's allocation needs it
    # back faster than a tick, or its OOM killer (or the host's, on its
    # QEMU) runs.
    "burst-freed": burst_beside_db_and_stream(
        "ran a 300 MiB job and freed it, idles, then allocates 300 MiB at once", 0, "0:300", 40),
    # Issue 32: a database whose buffers are shared memory (PostgreSQL's
    # shared_buffers): 300 MiB of shmem, counted by the guest as Cached
    # (virtio-balloon's disk-caches) but never droppable, beside a streamer.
    "shmdb": dict(
        title="D (wss 300 MiB in shared memory, 80% hot, own swap) + S (stream)",
        limit_mb=640, warmup=10, measure=18, primary="D", solo_possible=True,
        guests=[
            dict(name="D", mem=512, run="shmdb:300:80", disk="swap", metric=WSS, better="higher",
                 solo=True, gated=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
        ]),
    # Issue 36, the seed mails' shape one level up (paced_db_beside_stream)
    "db-stream": paced_db_beside_stream("wss"),
    # The same with the buffer pool in shared memory (PostgreSQL's
    # shared_buffers): Shmem the guest counts as cache but cannot drop.
    "shmdb-stream": paced_db_beside_stream("shmdb"),
    # Issue 48: a real database that reads its files through the page
    # cache, beside a real streamer (pgdb_beside_stream)
    "pgdb-stream": pgdb_beside_stream("300 MiB cache, idle, then allocates 300 MiB", True),
    "pgdb-stream-idle": pgdb_beside_stream("300 MiB cache, idle", False),
    # A buffered-IO database: its working set IS page cache (300 MiB of a
    # disk re-read at random), next to a streamer whose cache is not.
    "cachedb": dict(
        title="C (re-reads 300 MiB of its disk through the page cache) + S (stream)",
        limit_mb=640, warmup=10, measure=16, primary="C", solo_possible=True,
        guests=[
            dict(name="C", mem=512, run="cachedb:/dev/vda:300", disk="data", metric=CACHEDB,
                 better="higher", solo=True, gated=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
        ]),
    # Issue 32: a squeezed guest reboots.  R streams (balancerd takes its
    # cache: its balloon inflates), then reboots itself 3 s before the
    # window into a workload that allocates 300 MiB 5 s after its init
    # starts (no swap; 5 s: inside the window however fast it boots).  QEMU keeps the balloon's target across the reset,
    # and the guest's driver inflates to it again as it loads: unless
    # balancerd gives R its size back on the reset, R's 300 MiB do not fit
    # and its own OOM killer runs.
    "reboot-squeezed": dict(
        title="R (streams, then reboots into allocating 300 MiB; no swap) + W (wss 200 MiB)",
        limit_mb=700, warmup=30, measure=26, primary="R", solo_possible=True,
        guests=[
            dict(name="R", mem=512, run="stream:/dev/vda:1024", reboot_before=3,
                 run2="burst:/dev/vda:0:5:300:0", disk="data", metric=BURST, better="lower",
                 window="once", solo=True, gated=True),
            dict(name="W", mem=512, run="wss:200:80", disk="swap", metric=WSS, better="higher",
                 gated=True),
        ]),
    # Issue 32: a guest boots into a squeezed host.  W and S fill it (S's
    # stream), N boots 6 s before the window and allocates 300 MiB 8 s
    # after its init starts (no swap; 8 s: inside the window however fast
    # it boots).  A guest balancerd first sees while
    # it boots, its memory all free, must not be taken for a giver.
    "boot-squeezed": dict(
        title="N (boots into the full host, allocates 300 MiB 8 s later; no swap) + W (wss 200 MiB) + S (stream)",
        limit_mb=900, warmup=30, measure=26, primary="N", solo_possible=True,
        guests=[
            dict(name="N", mem=512, run="burst:/dev/vda:0:8:300:0", boot_before=6, disk="data",
                 metric=BURST, better="lower", window="once", solo=True, gated=True),
            dict(name="W", mem=512, run="wss:200:80", disk="swap", metric=WSS, better="higher",
                 gated=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
        ]),
    # Many small guests with mixed roles.
    "many-small": dict(
        title="6 x 256 MiB: 2 databases (wss 140 MiB), 2 streamers, 2 idle with cache",
        limit_mb=1100, warmup=10, measure=16, primary="D1",
        solo_possible=False,
        solo_reason="six TCG guests share 2 cores: alone, D1 has a core to itself",
        guests=[
            dict(name="D1", mem=256, run="wss:140:80", disk="swap", metric=WSS, better="higher",
                 solo=True, gated=True),
            dict(name="D2", mem=256, run="wss:140:80", disk="swap", metric=WSS, better="higher",
                 gated=True),
            dict(name="S1", mem=256, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
            dict(name="S2", mem=256, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
            dict(name="I1", mem=256, run="burst:/dev/vda:150:100000:1:0", disk="data", metric=None),
            dict(name="I2", mem=256, run="burst:/dev/vda:150:100000:1:0", disk="data", metric=None),
        ]),
    # A working set that grows midway (200 -> 340 MiB) next to a streamer.
    "growing": dict(
        title="G (wss 200 MiB, grows by 140 MiB after {grow_at} s) + S (stream)",
        limit_mb=640, warmup=10, measure=20, primary="G", solo_possible=True,
        guests=[
            dict(name="G", mem=512, run="wss:200:80:0:{grow_at}:140", disk="swap", metric=WSS,
                 better="higher", solo=True, gated=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
        ]),
    # No pressure: the host has room for everything.  A balancer should do
    # (almost) nothing and cost (almost) nothing.
    "no-pressure": dict(
        title="W (wss 200 MiB) + S (stream) in a roomy 2 GiB host",
        limit_mb=2048, warmup=7, measure=14, primary="W", solo_possible=True,
        idle_gate=True,
        guests=[
            dict(name="W", mem=512, run="wss:200:80", disk="swap", metric=WSS, better="higher",
                 solo=True, gated=True),
            dict(name="S", mem=512, run="stream:/dev/vda:1024", disk="data", metric=STREAM,
                 better="higher"),
        ]),
}

# Configuration -> how it runs.  daemon: balancerd's --policy (None: no
# daemon); balloon_opts: extra virtio-balloon-pci properties; host_reclaim:
# [host_reclaim] enabled (a string: its source, else auto); trim_streams: [policy] trim_streams; solo: only
# the scenario's solo guests; shipped: balancerd at its
# shipped defaults (1 s tick, 2 s stats period, 2/5/8 % watermarks, 2 % step a tick, default floor)
# instead of the bench's quicker settings (bench.py write_config); vmem:
# every guest boots with half its memory and a virtio-mem device of the
# other half, plugged at boot (the same memory in all; balancerd resizes it
# through the device above the half, through the balloon below), onlined
# "movable" (auto-movable: what README recommends; a block device's page
# cache, which the stream and cachedb workloads read, cannot live there:
# the kernel allocates it GFP_USER) or "kernel" (ZONE_NORMAL: anything can
# live there, and an unplug may be refused).
CONFIGS = {
    "solo": dict(daemon=None, solo=True),
    "none": dict(daemon=None),
    "none-fpr": dict(daemon=None, balloon_opts="free-page-reporting=on"),
    "mom": dict(daemon="mom"),
    "mom-vdsm": dict(daemon="mom-vdsm"),
    "proxmox": dict(daemon="proxmox"),
    "split-lru": dict(daemon="split-lru"),
    "split-lru-shipped": dict(daemon="split-lru", shipped=True),
    # issue 32: the shipped defaults with the guests' balloon safety net
    # (deflate-on-oom, libvirt autodeflate), and with free page reporting on
    "split-lru-shipped+doo": dict(daemon="split-lru", shipped=True, balloon_opts="deflate-on-oom=on"),
    "split-lru-shipped+fpr": dict(daemon="split-lru", shipped=True, balloon_opts="free-page-reporting=on"),
    # issue 32: trim_streams (off by default) at the shipped defaults otherwise
    "split-lru-shipped+trim": dict(daemon="split-lru", shipped=True, trim_streams=True),
    "split-lru+host": dict(daemon="split-lru", host_reclaim=True),
    # issue 49: host reclaim through each guest's own memory cgroup, the
    # kernel's LRU choosing the pages ([host_reclaim] source = memcg)
    "split-lru+memcg": dict(daemon="split-lru", host_reclaim="memcg"),
    "split-lru+trim": dict(daemon="split-lru", trim_streams=True),
    "none-vmem": dict(daemon=None, vmem="movable"),
    "split-lru-vmem": dict(daemon="split-lru", vmem="movable"),
    "none-vmem-kernel": dict(daemon=None, vmem="kernel"),
    "split-lru-vmem-kernel": dict(daemon="split-lru", vmem="kernel"),
}

SMOKE_SCENARIOS = ["seed", "idle-burst"]
SMOKE_CONFIGS = ["none", "split-lru"]

#!/bin/sh
# A real database: PostgreSQL 15 from the disk build-pgdisk.sh makes, its
# tables read through the guest's page cache and its shared_buffers held as
# shared memory, queried by pgbench's built-in select-only script (-S:
# random primary-key lookups over pgbench_accounts).  Mounts DEV (ext4) on
# /pg, chroots into it, starts the server as user postgres, prints
#   PGDB ready startup_s=<s>
# then, every second (pgbench -P 1),
#   PGDB t=<s> ops=<transactions so far> tps=<this second's> lat_ms=<mean>
# (t counts from pgbench's start; ops sums tps over each interval, so a
# guest that stalls counts as doing nothing for that time).
# Usage: pgdb DEV [CLIENTS=2]
set -u
dev=${1:?usage: pgdb DEV [CLIENTS]}
clients=${2:-2}
t0=$(cut -d' ' -f1 /proc/uptime)
fail() { echo "PGDB failed $*"; exit 1; }
mkdir -p /pg
mount -t ext4 -o noatime "$dev" /pg || fail "mount $dev"
mount -t proc proc /pg/proc || fail "mount proc"
mount -t devtmpfs dev /pg/dev || fail "mount dev"
mkdir -p /pg/dev/shm && mount -t tmpfs shm /pg/dev/shm || fail "mount /dev/shm"
mount -t tmpfs tmp /pg/tmp || fail "mount /tmp"
bin=/usr/lib/postgresql/15/bin
as_pg() { chroot /pg /bin/busybox su -s /bin/sh postgres -c "$*"; }
as_pg "$bin/pg_ctl -D /var/lib/pg -w -t 300 -l /tmp/server.log start" >/dev/null ||
    { tail -5 /pg/tmp/server.log; fail "server start"; }
echo "PGDB ready startup_s=$(awk -v t0="$t0" '{printf "%.1f", $1 - t0}' /proc/uptime)"
as_pg "$bin/pgbench -h /tmp -U postgres -n -S -c $clients -j 1 -T 1000000 -P 1 postgres" 2>&1 |
    awk '/^progress:/ {
             t = $2 + 0; tps = $4 + 0; ops += tps * (t - last); last = t
             printf "PGDB t=%.1f ops=%.0f tps=%.1f lat_ms=%s\n", t, ops, tps, $7; fflush()
         }
         !/^progress:/ { print "PGDB log " $0; fflush() }'
fail "pgbench ended"

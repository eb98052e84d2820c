#!/bin/sh
# Build the PostgreSQL guest's disk: an ext4 image holding Debian's
# PostgreSQL 15 (the host's postgresql-15 package: server, pgbench and the
# libraries they link), busybox, and a pgbench database made on the host
# (initdb, then pgbench -i), for the `pgdb` workload (tests/guest/workloads/
# pgdb.sh), which mounts it in the guest, chroots into it and runs the server
# and `pgbench -S` there.
# Usage: build-pgdisk.sh IMAGE [SCALE]
#   SCALE  pgbench's scale factor (default 13: about 200 MiB of tables and
#          indexes, which the server reads through the guest's page cache)
# The server's settings are the ones a small guest gets (below): shared_buffers
# 160 MB, which the guest holds as Shmem (System V / mmap shared memory).
set -eu

image=${1:?usage: build-pgdisk.sh IMAGE [SCALE]}
scale=${2:-13}
pgbin=/usr/lib/postgresql/15/bin
if [ ! -x "$pgbin/postgres" ] || [ ! -x "$pgbin/pgbench" ] || [ ! -x "$pgbin/initdb" ]; then
    echo "build-pgdisk: PostgreSQL 15 is not installed ($pgbin); run 'make bench-deps'" >&2
    exit 1
fi
id postgres >/dev/null 2>&1 || { echo "build-pgdisk: no 'postgres' user (postgresql-15's package makes it)" >&2; exit 1; }
command -v psql >/dev/null || { echo "build-pgdisk: psql missing (postgresql-client-15)" >&2; exit 1; }
[ -x /bin/busybox ] || { echo "build-pgdisk: /bin/busybox missing (busybox-static)" >&2; exit 1; }
command -v mkfs.ext4 >/dev/null || { echo "build-pgdisk: mkfs.ext4 missing (e2fsprogs)" >&2; exit 1; }

root=$(mktemp -d)
server=
cleanup() {
    [ -n "$server" ] && runuser -u postgres -- "$pgbin/pg_ctl" -D "$root/var/lib/pg" -m immediate stop >/dev/null 2>&1
    rm -rf "$root"
}
trap cleanup EXIT
chmod 755 "$root"
mkdir -p "$root/bin" "$root/etc" "$root/proc" "$root/dev" "$root/tmp" "$root/var/lib" \
         "$root/usr/share/zoneinfo"
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
ln -s busybox "$root/bin/sh"

# The programs and every library they link, at their own paths.
mkdir -p "$root$pgbin"
cp "$pgbin/postgres" "$pgbin/pgbench" "$pgbin/pg_ctl" "$pgbin/pg_isready" "$root$pgbin/"
# the extension modules (plpgsql, the encodings), not the JIT: it links LLVM
mkdir -p "$root/usr/lib/postgresql/15/lib"
for so in /usr/lib/postgresql/15/lib/*.so; do
    case "$so" in */llvmjit*) continue ;; esac
    cp "$so" "$root/usr/lib/postgresql/15/lib/"
done
mkdir -p "$root/usr/share/postgresql"
cp -r /usr/share/postgresql/15 "$root/usr/share/postgresql/15"
cp -L /usr/share/zoneinfo/UTC "$root/usr/share/zoneinfo/UTC"
for lib in $(ldd "$pgbin/postgres" "$pgbin/pgbench" "$pgbin/pg_ctl" \
                 "$root"/usr/lib/postgresql/15/lib/*.so 2>/dev/null |
             awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
# /lib64 is a link on Debian (merged /usr): the loader's path must resolve
[ -e "$root/lib64/ld-linux-x86-64.so.2" ] || { mkdir -p "$root/lib64" && cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"; }

uid=$(id -u postgres) gid=$(id -g postgres)
printf 'root:x:0:0:root:/:/bin/sh\npostgres:x:%d:%d:PostgreSQL:/var/lib/pg:/bin/sh\n' "$uid" "$gid" > "$root/etc/passwd"
printf 'root:x:0:\npostgres:x:%d:\n' "$gid" > "$root/etc/group"

# The database, made on the host by the same server.
data=$root/var/lib/pg
mkdir -m 700 "$data"
chown postgres:postgres "$data"
runuser -u postgres -- "$pgbin/initdb" -D "$data" -E UTF8 --locale=C -U postgres --no-sync >/dev/null
cat >> "$data/postgresql.conf" <<EOF
# build-pgdisk.sh: a small guest's server
listen_addresses = ''
unix_socket_directories = '/tmp'
shared_buffers = 160MB
huge_pages = off
max_connections = 20
jit = off
timezone = 'UTC'
log_timezone = 'UTC'
logging_collector = off
min_wal_size = 32MB
max_wal_size = 256MB
EOF
sock=$(mktemp -d)
chmod 777 "$sock"
# the tables are loaded with wal_level=minimal (no WAL for a COPY into a table
# truncated in its transaction): the disk holds the tables, not their log
server=1
runuser -u postgres -- "$pgbin/pg_ctl" -D "$data" -w -l "$sock/log" \
    -o "-c unix_socket_directories=$sock -c listen_addresses='' -c wal_level=minimal -c max_wal_senders=0" start >/dev/null
runuser -u postgres -- "$pgbin/pgbench" -h "$sock" -U postgres -i -s "$scale" -q postgres 2>&1 |
    tail -1 | sed 's/^/build-pgdisk: /'
runuser -u postgres -- psql -h "$sock" -U postgres -qAt -c CHECKPOINT postgres
runuser -u postgres -- "$pgbin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
server=
rm -rf "$sock"

size_mb=$(( $(du -sm "$root" | cut -f1) * 3 / 2 + 64 ))
rm -f "$image.tmp"
mkfs.ext4 -q -F -L pgdb -d "$root" "$image.tmp" "${size_mb}M" 2>&1 | grep -v '^Creating regular file' >&2 || true
mv "$image.tmp" "$image"
echo "build-pgdisk: PostgreSQL 15, pgbench scale $scale, $(du -sm "$data/base" | cut -f1) MiB of tables, $(du -sm "$data/pg_wal" | cut -f1) MiB of WAL, ${size_mb} MiB image $image"

#!/bin/sh
# Build the test guest: Debian's kernel (linux-image-amd64) plus a busybox
# initramfs holding the virtio modules, our init and our static workload
# programs.  Usage: build-guest.sh OUTDIR
# Output: OUTDIR/vmlinuz, OUTDIR/initramfs.gz, OUTDIR/kernel-version
set -eu

out=${1:?usage: build-guest.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Newest installed Debian kernel that has its modules.
kver=
for k in $(ls /boot/vmlinuz-* 2>/dev/null | sed 's|/boot/vmlinuz-||' | sort -V); do
    [ -d "/lib/modules/$k" ] && kver=$k
done
if [ -z "$kver" ]; then
    echo "build-guest: no /boot/vmlinuz-* with /lib/modules; run 'make deps' (linux-image-amd64)" >&2
    exit 1
fi
[ -x /bin/busybox ] || { echo "build-guest: /bin/busybox missing (busybox-static)" >&2; exit 1; }
file /bin/busybox 2>/dev/null | grep -q dynamic && { echo "build-guest: /bin/busybox is not static" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/sbin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" \
         "$root/lib/modules" "$root/etc" "$root/mnt"
cp /bin/busybox "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
install -m 0755 "$here/init" "$root/init"

# Modules in dependency order (modinfo -F depends), decompressed so that
# busybox insmod can load them whatever compression Debian used.
order="$root/lib/modules/order"
: > "$order"
add_module() {
    local name=$1 dep path
    grep -qx "$name" "$order" && return 0
    for dep in $(modinfo -k "$kver" -F depends "$name" | tr ',' ' '); do
        add_module "$dep"
    done
    path=$(modinfo -k "$kver" -n "$name")
    case "$path" in
        *.ko) cp "$path" "$root/lib/modules/$name.ko" ;;
        *.ko.xz) xz -dc "$path" > "$root/lib/modules/$name.ko" ;;
        *.ko.zst) zstd -qdc "$path" > "$root/lib/modules/$name.ko" ;;
        *.ko.gz) gzip -dc "$path" > "$root/lib/modules/$name.ko" ;;
        *) echo "build-guest: unexpected module file $path" >&2; exit 1 ;;
    esac
    echo "$name" >> "$order"
}
# ext4 for the PostgreSQL guest's disk (build-pgdisk.sh); crc32c for its checksums
for m in virtio virtio_ring virtio_pci virtio_balloon virtio_blk virtio_console virtio_mem \
         crc32c_generic ext4; do
    add_module "$m"
done

# Workloads: static so they need nothing from the initramfs.
for src in "$here"/workloads/*.c; do
    name=$(basename "$src" .c)
    ${CC:-cc} -static -O2 -Wall -Wextra -Werror -o "$root/bin/$name" "$src"
done
install -m 0755 "$here/workloads/pgdb.sh" "$root/bin/pgdb"
ln -sf wss "$root/bin/shmdb" # wss with its memory shared (shmem): a database's shared buffers
# The in-guest agent, when it has been written.
if [ -f "$top/guest-agent/balancer-agent.c" ]; then
    ${CC:-cc} -static -O2 -Wall -Wextra -Werror -I"$top/guest-agent" \
        -o "$root/bin/balancer-agent" "$top"/guest-agent/*.c
fi

cp "/boot/vmlinuz-$kver" "$out/vmlinuz"
echo "$kver" > "$out/kernel-version"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -6) > "$out/initramfs.gz.tmp"
mv "$out/initramfs.gz.tmp" "$out/initramfs.gz"
echo "build-guest: kernel $kver, initramfs $(du -k "$out/initramfs.gz" | cut -f1) KiB in $out"

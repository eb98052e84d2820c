#!/bin/sh
# Make sure a libvirt daemon answers on qemu:///system.  systemd may not be
# running (containers, CI), so start virtlogd and libvirtd by hand when
# nothing answers.  Prints "running" (already there) or "started PIDFILE..."
# so that libvirtd-down.sh stops only what we started.
set -eu
if virsh -c qemu:///system version >/dev/null 2>&1; then
    echo running
    exit 0
fi
mkdir -p /run/libvirt
started=
if ! pgrep -x virtlogd >/dev/null 2>&1; then
    virtlogd -d -p /run/membal-test-virtlogd.pid
    started="$started /run/membal-test-virtlogd.pid"
fi
libvirtd -d -p /run/membal-test-libvirtd.pid
started="$started /run/membal-test-libvirtd.pid"
for _ in $(seq 1 100); do
    if virsh -c qemu:///system version >/dev/null 2>&1; then
        echo "started$started"
        exit 0
    fi
    sleep 0.1
done
echo "libvirtd-up: libvirtd did not answer on qemu:///system within 10 s" >&2
exit 1

#!/bin/sh
# Boot the test guest under QEMU, daemonized, with a QMP socket and a
# virtio-balloon device.  Tries KVM first (unless told otherwise) and falls
# back to TCG when KVM does not reach our init within a deadline: on nested
# or paravirtual hosts /dev/kvm can exist and still hang the guest.
#
# Usage: boot-guest.sh --run-dir DIR [--guest-dir DIR] [--mem MiB]
#          [--accel auto|kvm|tcg] [--append "membal.run=..."]
#          [--disk IMAGE]... [--name NAME] [--cgroup DIR] [--tb-size MiB] [--agent]
#          [--balloon-opts OPTS] [--vmem MAX_MiB[:REQUESTED_MiB]]
#          [--deadline SECONDS] [-- extra qemu args]
# --disk may be repeated (vda, vdb, ...); --cgroup starts QEMU inside that
# cgroup (v1 or v2 directory) so all its memory is charged there; --agent
# adds the virtio-serial port org.membal.agent.0 as DIR/agent.sock;
# --balloon-opts appends ",OPTS" to the virtio-balloon-pci device, e.g.
# --balloon-opts free-page-reporting=on  (comma-separate several);
# --vmem adds a virtio-mem device (id vmem0, 2 MiB blocks) of MAX_MiB above
# --mem, REQUESTED_MiB of it plugged at boot (default 0), and boots the
# guest kernel with hotplugged memory onlined auto-movable (so that it can
# be unplugged again).
# Prints on success:  accel=<kvm|tcg> pid=<pid> qmp=<socket> serial=<log>
# The KVM probe result is cached in GUEST_DIR/accel-probe.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
guest_dir=${MEMBAL_GUEST_DIR:-$here/../../build/guest}
run_dir= mem=512 accel=${MEMBAL_ACCEL:-auto} append= disks= deadline=60 kvm_deadline=20
name= cgroup= tb_size= agent= balloon_opts= vmem=
while [ $# -gt 0 ]; do
    case "$1" in
        --run-dir) run_dir=$2; shift 2 ;;
        --guest-dir) guest_dir=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --accel) accel=$2; shift 2 ;;
        --append) append=$2; shift 2 ;;
        --disk) disks="$disks $2"; shift 2 ;;
        --name) name=$2; shift 2 ;;
        --cgroup) cgroup=$2; shift 2 ;;
        --tb-size) tb_size=$2; shift 2 ;;
        --agent) agent=1; shift ;;
        --balloon-opts) balloon_opts=$2; shift 2 ;;
        --vmem) vmem=$2; shift 2 ;;
        --deadline) deadline=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "boot-guest: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$run_dir" ] || { echo "boot-guest: --run-dir is required" >&2; exit 2; }
for f in vmlinuz initramfs.gz; do
    [ -f "$guest_dir/$f" ] || { echo "boot-guest: $guest_dir/$f missing: run 'make guest'" >&2; exit 1; }
done
command -v qemu-system-x86_64 >/dev/null || { echo "boot-guest: qemu-system-x86_64 not found" >&2; exit 1; }
mkdir -p "$run_dir"

start_qemu() { # $1 = kvm|tcg, then extra qemu args
    mode=$1
    shift
    rm -f "$run_dir/qmp.sock" "$run_dir/serial.log" "$run_dir/qemu.pid"
    if [ "$mode" = kvm ]; then
        acc="-accel kvm -cpu max"
    else
        acc="-accel tcg,thread=single${tb_size:+,tb-size=$tb_size} -cpu max"
    fi
    drive=
    for d in $disks; do
        drive="$drive -drive file=$d,if=virtio,format=raw,cache=none,aio=threads"
    done
    # debug-threads: the vCPU thread is named ("CPU 0/KVM", "ALL CPUs/TCG"), for the bench
    [ -n "$name" ] && drive="$drive -name $name,debug-threads=on"
    if [ -n "$agent" ]; then
        drive="$drive -device virtio-serial-pci,id=vser0"
        drive="$drive -chardev socket,id=agent0,path=$run_dir/agent.sock,server=on,wait=off"
        drive="$drive -device virtserialport,bus=vser0.0,chardev=agent0,name=org.membal.agent.0"
    fi
    memory=$mem kargs=
    if [ -n "$vmem" ]; then
        vmax=${vmem%%:*} vreq=0
        case "$vmem" in *:*) vreq=${vmem#*:} ;; esac
        memory="${mem}M,maxmem=$((mem + vmax))M"
        drive="$drive -object memory-backend-ram,id=vmem0mem,size=${vmax}M"
        drive="$drive -device virtio-mem-pci,id=vmem0,memdev=vmem0mem,block-size=2M,requested-size=${vreq}M"
        kargs="memhp_default_state=online memory_hotplug.online_policy=auto-movable"
    fi
    # shellcheck disable=SC2086 # word splitting of $acc/$drive is intended
    qemu-system-x86_64 $acc -machine pc -smp 1 -m "$memory" \
        -nodefaults -no-user-config -display none -vga none -no-reboot \
        -kernel "$guest_dir/vmlinuz" -initrd "$guest_dir/initramfs.gz" \
        -append "console=ttyS0 panic=-1 nokaslr tsc=unstable quiet $kargs $append" \
        -serial "file:$run_dir/serial.log" \
        -qmp "unix:$run_dir/qmp.sock,server=on,wait=off" \
        -device "virtio-balloon-pci,id=balloon0${balloon_opts:+,$balloon_opts}" \
        $drive -pidfile "$run_dir/qemu.pid" -daemonize "$@"
}

wait_ready() { # $1 = seconds
    i=0
    while [ "$i" -lt $(($1 * 10)) ]; do
        grep -q MEMBAL-GUEST-READY "$run_dir/serial.log" 2>/dev/null && return 0
        if [ -f "$run_dir/qemu.pid" ] && ! kill -0 "$(cat "$run_dir/qemu.pid")" 2>/dev/null; then
            return 1
        fi
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

stop_qemu() {
    [ -f "$run_dir/qemu.pid" ] || return 0
    pid=$(cat "$run_dir/qemu.pid")
    kill "$pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
}

if [ -n "$cgroup" ]; then
    # this shell joins the cgroup; QEMU, its child, is charged there
    echo $$ > "$cgroup/cgroup.procs" || { echo "boot-guest: cannot join cgroup $cgroup" >&2; exit 1; }
fi

probe="$guest_dir/accel-probe"
if [ "$accel" = auto ]; then
    if [ -f "$probe" ]; then
        accel=$(cat "$probe")
    elif [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
        accel=probe-kvm
    else
        accel=tcg
        echo tcg > "$probe"
    fi
fi

if [ "$accel" = probe-kvm ] || [ "$accel" = kvm ]; then
    if start_qemu kvm "$@" 2>"$run_dir/qemu.err" && wait_ready "$kvm_deadline"; then
        [ "$accel" = probe-kvm ] && echo kvm > "$probe"
        echo "accel=kvm pid=$(cat "$run_dir/qemu.pid") qmp=$run_dir/qmp.sock serial=$run_dir/serial.log"
        exit 0
    fi
    stop_qemu
    echo "boot-guest: KVM did not boot the guest within ${kvm_deadline}s; falling back to TCG" >&2
    [ "$accel" = probe-kvm ] && echo tcg > "$probe"
fi

if ! start_qemu tcg "$@" 2>"$run_dir/qemu.err"; then
    echo "boot-guest: qemu failed to start: $(cat "$run_dir/qemu.err")" >&2
    exit 1
fi
if ! wait_ready "$deadline"; then
    stop_qemu
    echo "boot-guest: guest did not reach init within ${deadline}s; console:" >&2
    tail -n 20 "$run_dir/serial.log" >&2 || true
    exit 1
fi
echo "accel=tcg pid=$(cat "$run_dir/qemu.pid") qmp=$run_dir/qmp.sock serial=$run_dir/serial.log"

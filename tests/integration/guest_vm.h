/*
 * Test harness around tests/guest/boot-guest.sh: boot the test guest,
 * read what it prints on its serial console, stop it.
 */
#ifndef MEMBAL_GUEST_VM_H
#define MEMBAL_GUEST_VM_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct {
    char run_dir[256];
    char qmp_path[300];
    char serial_path[300];
    char accel[8]; /* "kvm" or "tcg" */
    pid_t pid;
} guest_vm;

typedef struct {
    int mem_mib;
    const char *append; /* extra kernel command line, may be NULL */
    const char *disk;   /* raw image for virtio-blk, may be NULL */
    bool agent;         /* add the org.membal.agent.0 port (RUN_DIR/agent.sock) */
    const char *extra;  /* more boot-guest.sh options ("--cgroup DIR --tb-size 32"), may be NULL */
    bool no_thp;        /* QEMU runs with PR_SET_THP_DISABLE: its guest RAM in 4 KiB pages, as on a host
                         * without transparent huge pages (the probe scanner leaves huge pages alone) */
} guest_vm_opts;

typedef struct {
    long total_kb, free_kb, avail_kb, cached_kb;
} guest_meminfo;

/* True when qemu-system-x86_64 is on PATH. */
bool guest_vm_qemu_available(void);
/* Boot; returns 0, or -1 with a message on stderr. */
int guest_vm_start(guest_vm *vm, const guest_vm_opts *opts);
/* Ask QEMU to exit (SIGTERM, then SIGKILL) and remove the run dir. */
void guest_vm_stop(guest_vm *vm);
bool guest_vm_alive(const guest_vm *vm);
/* The newest MEMINFO line the guest printed; -1 if none yet. */
int guest_vm_last_meminfo(const guest_vm *vm, guest_meminfo *out);
/* Wait until the console shows a line containing needle. */
bool guest_vm_wait_console(const guest_vm *vm, const char *needle, int timeout_ms);

#endif

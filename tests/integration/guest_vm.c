#include "guest_vm.h"
#include "cleanup.h"

#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *top_dir(void)
{
    const char *t = getenv("MEMBAL_TOP");
    return t && *t ? t : ".";
}

/* VMs still running when the test process exits (a failed ck_assert
 * exits the forked test) are stopped so no QEMU outlives its test. */
#define MAX_LIVE 16
static guest_vm *live[MAX_LIVE];

static void stop_leftovers(void)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live[i])
            guest_vm_stop(live[i]);
}

static void track(guest_vm *vm, bool on)
{
    static bool registered;
    if (!registered) {
        atexit(stop_leftovers);
        registered = true;
    }
    for (int i = 0; i < MAX_LIVE; i++) {
        if (on && !live[i]) {
            live[i] = vm;
            return;
        }
        if (!on && live[i] == vm)
            live[i] = NULL;
    }
}

bool guest_vm_qemu_available(void)
{
    return system("command -v qemu-system-x86_64 >/dev/null 2>&1") == 0;
}

int guest_vm_start(guest_vm *vm, const guest_vm_opts *opts)
{
    memset(vm, 0, sizeof(*vm));
    snprintf(vm->run_dir, sizeof(vm->run_dir), "/tmp/membal-vm-XXXXXX");
    if (!mkdtemp(vm->run_dir)) {
        perror("guest_vm: mkdtemp");
        return -1;
    }
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s/tests/guest/boot-guest.sh' --run-dir '%s' --mem %d%s%s%s%s%s%s%s %s",
             top_dir(), vm->run_dir, opts->mem_mib > 0 ? opts->mem_mib : 512,
             opts->agent ? " --agent" : "",
             opts->append ? " --append '" : "", opts->append ? opts->append : "",
             opts->append ? "'" : "", opts->disk ? " --disk '" : "",
             opts->disk ? opts->disk : "", opts->disk ? "'" : "", opts->extra ? opts->extra : "");
    /* inherited by the shell and QEMU it starts, kept across exec */
    if (opts->no_thp && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) < 0) {
        perror("guest_vm: PR_SET_THP_DISABLE");
        return -1;
    }
    FILE *p = popen(cmd, "r");
    if (opts->no_thp)
        prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0);
    if (!p) {
        perror("guest_vm: popen");
        return -1;
    }
    char line[1024] = "";
    char *got = fgets(line, sizeof(line), p);
    int rc = pclose(p);
    int pid = 0;
    if (rc != 0 || !got ||
        sscanf(line, "accel=%7s pid=%d qmp=%299s serial=%299s", vm->accel, &pid,
               vm->qmp_path, vm->serial_path) != 4) {
        fprintf(stderr, "guest_vm: boot failed (rc %d): %s\n", rc, line);
        return -1;
    }
    vm->pid = pid;
    track(vm, true);
    cleanup_register("kill -9 %d 2>/dev/null; rm -rf '%s'", pid, vm->run_dir);
    fprintf(stderr, "guest_vm: booted with %s, pid %d, mem %d MiB\n", vm->accel, pid,
            opts->mem_mib);
    return 0;
}

bool guest_vm_alive(const guest_vm *vm)
{
    return vm->pid > 0 && kill(vm->pid, 0) == 0;
}

void guest_vm_stop(guest_vm *vm)
{
    track(vm, false);
    if (vm->pid > 0) {
        kill(vm->pid, SIGTERM);
        for (int i = 0; i < 50 && guest_vm_alive(vm); i++)
            usleep(100 * 1000);
        if (guest_vm_alive(vm))
            kill(vm->pid, SIGKILL);
        vm->pid = 0;
    }
    if (vm->run_dir[0] && !getenv("MEMBAL_KEEP_VM")) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", vm->run_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "guest_vm: could not remove %s\n", vm->run_dir);
    }
}

int guest_vm_last_meminfo(const guest_vm *vm, guest_meminfo *out)
{
    FILE *f = fopen(vm->serial_path, "r");
    if (!f)
        return -1;
    char line[512];
    int found = -1;
    while (fgets(line, sizeof(line), f)) {
        guest_meminfo m;
        const char *s = strstr(line, "MEMINFO ");
        if (s && sscanf(s, "MEMINFO total_kb=%ld free_kb=%ld avail_kb=%ld cached_kb=%ld",
                        &m.total_kb, &m.free_kb, &m.avail_kb, &m.cached_kb) == 4) {
            *out = m;
            found = 0;
        }
    }
    fclose(f);
    return found;
}

bool guest_vm_wait_console(const guest_vm *vm, const char *needle, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 100) {
        FILE *f = fopen(vm->serial_path, "r");
        if (f) {
            char line[1024];
            bool hit = false;
            while (!hit && fgets(line, sizeof(line), f))
                hit = strstr(line, needle) != NULL;
            fclose(f);
            if (hit)
                return true;
        }
        usleep(100 * 1000);
    }
    return false;
}

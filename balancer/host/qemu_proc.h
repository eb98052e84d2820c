/*
 * A QEMU's /proc files, kept open from one tick to the next: its
 * /proc/PID/status (what it touched, host/qemu_touched.h) and
 * /proc/PID/stat (its major faults and CPU, host/pressure.h), each read
 * with one pread a tick into a buffer on the stack instead of an open,
 * fstat, two reads and a close.
 *
 * An open /proc file names the process it was opened for, not its pid:
 * once that process has exited, reading fails (ESRCH) whoever has the pid
 * since, so a QEMU that went away is never measured through a newer
 * process's files by mistake.  A read that fails closes the file and opens
 * the pid's again, once: a QEMU that came back under the same pid is read
 * at once, one that is gone fails.  A new pid closes the files of the old.
 * Files are kept below half the open-file limit only (util/fd_limit.h):
 * past that they are opened and closed each time, as before.
 */
#ifndef MEMBAL_HOST_QEMU_PROC_H
#define MEMBAL_HOST_QEMU_PROC_H

#include <stdint.h>

#include "host/pressure.h"

typedef struct {
    int pid;       /* the process the files are for, 0 none */
    int status_fd; /* -1 when not open */
    int stat_fd;
} qemu_proc;

/* Nothing open (before the first use). */
void qemu_proc_init(qemu_proc *p);
void qemu_proc_close(qemu_proc *p);

/* What the QEMU with this pid touched (qemu_touched_from_status), -1 when
 * pid is not positive or its status cannot be read; the files follow the
 * pid. */
int64_t qemu_proc_touched_bytes(qemu_proc *p, int pid, int64_t guest_ram_bytes);

/* The counters of /proc/PID/stat of the pid last given: 0, or -1 (gone,
 * or none given). */
int qemu_proc_stat(qemu_proc *p, proc_stat_counts *out);

#endif

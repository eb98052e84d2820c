/*
 * Pressure as the host kernel measures it: memory PSI (the share of time
 * tasks stalled on memory) and a process's major faults (for a QEMU: its
 * guest memory coming back from host swap, besides file reads).  Host
 * reclaim's pressure guard reads these.
 */
#ifndef MEMBAL_HOST_PRESSURE_H
#define MEMBAL_HOST_PRESSURE_H

#include <stdint.h>

#define PSI_MEMORY_PATH "/proc/pressure/memory"

/* The "some avg10" of a PSI file (percent).  0, or -1 when the file is
 * absent (a kernel without PSI) or unreadable. */
int psi_some_avg10(const char *path, double *out);

/* /proc/PID/stat's majflt.  0, or -1 (the process is gone). */
int proc_major_faults(int pid, uint64_t *out);

#endif

/*
 * Pressure as the host kernel measures it: memory PSI (the share of time
 * tasks stalled on memory) and a process's major faults (for a QEMU: its
 * guest memory coming back from host swap, besides file reads).  Host
 * reclaim's pressure guard reads these; the core reads a QEMU's CPU with
 * them (balancerctl explain shows it).
 */
#ifndef MEMBAL_HOST_PRESSURE_H
#define MEMBAL_HOST_PRESSURE_H

#include <stdint.h>

#define PSI_MEMORY_PATH "/proc/pressure/memory"

/* The "some avg10" of a PSI file (percent).  0, or -1 when the file is
 * absent (a kernel without PSI) or unreadable. */
int psi_some_avg10(const char *path, double *out);

/* A process's counters in /proc/PID/stat: its major faults, and the CPU
 * it used (user + system, all its threads: for a QEMU, its vCPUs and
 * I/O).  One read for both. */
typedef struct {
    uint64_t major_faults;
    uint64_t cpu_ms;
} proc_stat_counts;

/* 0, or -1 (the process is gone). */
int proc_stat_counts_read(int pid, proc_stat_counts *out);
/* The same from the text of /proc/PID/stat: 0, or -1 when it is not one. */
int proc_stat_counts_parse(const char *text, proc_stat_counts *out);

#endif

/*
 * What a QEMU process has touched of the host's memory, as the host
 * measures it: resident plus swapped out plus hugetlb pages (VmRSS +
 * VmSwap + HugetlbPages in /proc/PID/status).  A guest cannot use memory
 * its QEMU never touched, whatever it reports, and host swapping does not
 * make used memory look untouched.  Unknown (-1) when the guest's RAM is
 * shared memory, whose swapped pages /proc/PID/status does not show, and
 * when the process does not map as much as the guest's RAM (VmSize): it is
 * not the QEMU (a wrapper process whose pid the QMP socket names).
 */
#ifndef MEMBAL_HOST_QEMU_TOUCHED_H
#define MEMBAL_HOST_QEMU_TOUCHED_H

#include <stdint.h>

/* Bytes from the text of its /proc/PID/status (host/qemu_proc.h reads
 * it), or -1 when the text lacks VmSize or VmRSS or the process maps less
 * than guest_ram_bytes (0: not checked). */
int64_t qemu_touched_from_status(const char *text, int64_t guest_ram_bytes);

/* The kB of the field key ("\nVmSwap:") in /proc/PID/status text: 0, or
 * -1 when the line is absent. */
int proc_status_kb(const char *text, const char *key, unsigned long long *kb);

#endif

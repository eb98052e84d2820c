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

/* Bytes, or -1 when pid is unknown, its status cannot be read or it maps
 * less than guest_ram_bytes (0: not checked). */
int64_t qemu_touched_bytes(int pid, int64_t guest_ram_bytes);

#endif

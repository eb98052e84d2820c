/*
 * The open-file limit.  balancerd holds a socket a QMP guest and, for
 * every guest, its QEMU's /proc/PID/status and /proc/PID/stat
 * (host/qemu_proc.h): 2000 guests need some 6000 files, and systemd
 * starts services with a soft RLIMIT_NOFILE of 1024 (its hard limit is
 * 524288), the soft one kept low only for programs that still use
 * select(2).  balancerd uses none (its /metrics server polls), so it
 * raises its soft limit to the hard one at start.
 */
#ifndef MEMBAL_UTIL_FD_LIMIT_H
#define MEMBAL_UTIL_FD_LIMIT_H

#include <glib.h>
#include <stdint.h>

/* The soft limit up to the hard one; *before and *after say what it was
 * and is (equal: nothing to raise).  0, or -1 with the reason. */
int fd_limit_raise(uint64_t *before, uint64_t *after, GError **error);

#endif

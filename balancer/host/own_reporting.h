/*
 * Whether this host is itself a guest that reports its free memory to its
 * own hypervisor (a nested or paravirtual host: a cloud VM running KVM).
 *
 * Such a host has a virtio-balloon device of its own whose driver took
 * free page reporting (VIRTIO_BALLOON_F_REPORTING, feature bit 5): memory
 * that stays free on it for about 2 s (mm/page_reporting.c,
 * PAGE_REPORTING_DELAY) is handed on to its hypervisor, and the next touch
 * of it faults there too.  Memory a guest gives back (a balloon move, free
 * page reporting, host reclaim) and touches again later then costs more
 * than on bare metal: 300 MiB given back in 2 MiB blocks took medians of
 * 0.2-0.4 s to touch again 1-15 s later on such a host, against 18 ms at
 * once (bench/fault_cost, aged-2m).
 */
#ifndef MEMBAL_HOST_OWN_REPORTING_H
#define MEMBAL_HOST_OWN_REPORTING_H

#include <stdbool.h>

/* sys_root is normally "/sys".  true if a virtio-balloon device of this
 * host negotiated free page reporting; false if none did, or there is no
 * such device (or it cannot be read). */
bool own_free_page_reporting(const char *sys_root);

#endif

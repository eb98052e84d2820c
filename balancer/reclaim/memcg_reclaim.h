/*
 * Host reclaim through the kernel's own LRU, in one VM's memory cgroup
 * (qemu_memcg.h): the kernel chooses which of the guest's pages go, by
 * their use, as it does for any process, and we say only how much.  This
 * is what Meta's TMO/Senpai does for containers; it needs no scanner and
 * no accessed bits, works on transparent huge pages (swapped whole with
 * THP_SWAP, or split by the kernel's own reclaim), and runs on every
 * kernel a host runs:
 *
 *   cgroup v2  "N" into memory.reclaim (5.19+): a one-off reclaim of N
 *              bytes; nothing is left set, nothing to undo.
 *   cgroup v1  a bounded, restored limit step: memory.limit_in_bytes to
 *              the group's usage less N, then straight back to what it
 *              was, whatever the first write returned.  The kernel applies
 *              a lower limit only once usage is below it
 *              (mm/memcontrol.c mem_cgroup_resize_max: it reclaims in the
 *              writer's context until the usage fits, and gives up with
 *              EBUSY when reclaim stops making progress), so while it
 *              reclaims the guest allocates as before, and the lowered
 *              limit stands only for the moment between our two writes.
 *              A guest that allocates in that moment is reclaimed from
 *              (it has swap to go to: we never ask without), not killed.
 *              The lowered value is recorded in the protection ledger
 *              before it is written (protect_ledger.h): a balancerd killed
 *              between the two writes leaves it for the next balancerd, or
 *              `balancerd --release-leftovers`, to put back.
 *
 * A limit someone else set (libvirt's <memtune hard_limit>) is not
 * fought: it is what the step returns to, and a group already held below
 * usage less N is left alone.  The write blocks while the kernel
 * reclaims: call it from host reclaim's thread, never the main loop, with
 * N bounded (MEMCG_RECLAIM_STEP_MAX).
 */
#ifndef MEMBAL_MEMCG_RECLAIM_H
#define MEMBAL_MEMCG_RECLAIM_H

#include <glib.h>
#include <stdint.h>

#include "reclaim/protect_ledger.h"
#include "reclaim/qemu_memcg.h"

/* At most this much a call: the kernel's work per write, and so how long
 * the calling thread is held, stays bounded. */
#define MEMCG_RECLAIM_STEP_MAX (64ULL << 20)

/* The group's charged memory now (memory.current, memory.usage_in_bytes).
 * 0, or -1 with errno. */
int memcg_usage(const qemu_memcg *m, uint64_t *bytes);

/* Reclaim up to bytes (at most MEMCG_RECLAIM_STEP_MAX) from m's group;
 * *reclaimed: how much its charge fell meanwhile (less than asked when the
 * kernel found no more to reclaim, or the guest allocated meanwhile).  pl
 * records a v1 limit while it is lowered (NULL: not recorded).  0, or -1
 * with error (the group unreadable or not writable; on v1 also a limit
 * that could not be put back: then the ledger keeps it). */
int memcg_reclaim(const qemu_memcg *m, uint64_t bytes, protect_ledger *pl, uint64_t *reclaimed, GError **error);

#endif

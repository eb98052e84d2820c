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
 *              (the round asks only for what host swap has room for),
 *              not killed.  A limit that could not be put back is kept
 *              pending and put back first at the next call.
 *              The lowered value is recorded in the protection ledger
 *              before it is written (protect_ledger.h): a balancerd killed
 *              between the two writes leaves it for the next balancerd, or
 *              `balancerd --release-leftovers`, to put back.
 *
 * A limit someone else set (libvirt's <memtune hard_limit>) is not
 * fought: it is what the step returns to, a group already held below
 * usage less N is left alone, and a value set during the step is theirs.
 * The write blocks while the kernel reclaims, which lasts as long as
 * reclaim makes progress (a guest allocating as fast as it is reclaimed
 * keeps it going): a timer of the calling thread interrupts it after
 * MEMCG_WRITE_MAX_MS (what was reclaimed stays reclaimed).  Call it from
 * host reclaim's thread, never the main loop.  cgroup v2 needs Linux
 * 5.19+ (memory.reclaim); memcg_can_reclaim says.
 */
#ifndef MEMBAL_MEMCG_RECLAIM_H
#define MEMBAL_MEMCG_RECLAIM_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "reclaim/protect_ledger.h"
#include "reclaim/qemu_memcg.h"

/* At most this much a call. */
#define MEMCG_RECLAIM_STEP_MAX (64ULL << 20)
/* The longest the kernel reclaims in one call's write. */
#define MEMCG_WRITE_MAX_MS 1000

/* The group's charged memory now (memory.current, memory.usage_in_bytes).
 * 0, or -1 with errno. */
int memcg_usage(const qemu_memcg *m, uint64_t *bytes);
/* Its major faults so far (memory.stat pgmajfault: counted for the
 * group of the faulting memory, whichever thread faults -- a KVM async
 * page fault's kworker too).  0, or -1. */
int memcg_swap_ins(const qemu_memcg *m, uint64_t *faults);
/* The lever exists and is ours to write (memory.reclaim on v2, the limit
 * on v1). */
bool memcg_can_reclaim(const qemu_memcg *m);

/* A v1 step's limit, while it may still need putting back. */
typedef struct {
    bool pending;       /* lowered, not known put back */
    uint64_t limit;     /* what it was */
    uint64_t lowered;   /* what we wrote */
} memcg_step;

/* The limit of st's step back (when it still holds our lowered value),
 * and pl told: 0, or -1 with errno (st stays pending). */
int memcg_step_undo(const qemu_memcg *m, memcg_step *st, protect_ledger *pl);

/* Reclaim up to bytes (at most MEMCG_RECLAIM_STEP_MAX) from m's group;
 * *reclaimed: how much its charge fell meanwhile (less than asked when the
 * kernel found no more to reclaim, the time bound came, or the guest
 * allocated meanwhile).  pl records a v1 limit while it is lowered (NULL:
 * not recorded); st is the group's step (zeroed at first): a limit an
 * earlier call could not put back is put back first.  0, or -1 with error
 * (the group unreadable or not writable; on v1 also a limit that could
 * not be put back: then st and the ledger keep it). */
int memcg_reclaim(const qemu_memcg *m, uint64_t bytes, protect_ledger *pl, memcg_step *st, uint64_t *reclaimed,
                  GError **error);

#endif

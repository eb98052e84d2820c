/*
 * The memory protection balancerd writes into QEMUs' memory cgroups
 * (memory.low on cgroup v2, memory.soft_limit_in_bytes on v1:
 * qemu_memcg.h), and the v1 limit a reclaim step lowers for a moment
 * (memcg_reclaim.h), recorded before each write together with what the
 * group held before us.  A balancerd that stops puts that back itself; one that
 * died without doing so (SIGKILL, a crash, the OOM killer) leaves the
 * record in its state directory, and the next balancerd at start, or
 * `balancerd --release-leftovers` (the unit's ExecStopPost), puts it back.
 *
 * A group gets its value back only when it is provably what we wrote:
 * the same directory (its inode: a guest that restarted has a new group of
 * the same name), holding exactly the value we wrote last, written by a
 * balancerd that is gone, in this boot.  A value someone changed since is
 * theirs and is left alone, and the reason said.
 */
#ifndef MEMBAL_PROTECT_LEDGER_H
#define MEMBAL_PROTECT_LEDGER_H

#include <glib.h>
#include <stdint.h>

#include "reclaim/qemu_memcg.h"

/* The ledger's name in the state directory. */
#define PROTECT_LEDGER_FILE "protect.ledger"

typedef struct protect_ledger protect_ledger;

/* A ledger at path for this process (nothing is written until a note). */
protect_ledger *protect_ledger_new(const char *path);
protect_ledger *protect_ledger_ref(protect_ledger *pl);
void protect_ledger_unref(protect_ledger *pl);

/* m's group is about to hold wrote, and held before (memcg_save) until
 * us: recorded and saved.  0, or -1 with error: then do not write. */
int protect_ledger_note(protect_ledger *pl, const qemu_memcg *m, const memcg_saved *before, uint64_t wrote,
                        GError **error);
/* m's group has its own value back (memcg_restore): forgotten. */
void protect_ledger_drop(protect_ledger *pl, const qemu_memcg *m);
/* The same for another file of m's group that we write (MEMCG_V1_LIMIT):
 * put back the same way, also after a SIGKILL. */
int protect_ledger_note_file(protect_ledger *pl, const qemu_memcg *m, const char *file, const memcg_saved *before,
                             uint64_t wrote, GError **error);
void protect_ledger_drop_file(protect_ledger *pl, const qemu_memcg *m, const char *file);

typedef enum {
    PROTECT_NONE,     /* no ledger (or one from an earlier boot, removed) */
    PROTECT_RELEASED, /* its balancerd gone: every group still ours got its value back; the ledger removed */
    PROTECT_IN_USE,   /* its balancerd still runs: left alone */
    PROTECT_FAILED,   /* a write back failed: the ledger is kept */
} protect_leftover;

/* Put back what the ledger at path records, where it is still ours.
 * *what (g_free it) says, a line per group, what was found and done; NULL
 * with PROTECT_NONE and no ledger. */
protect_leftover protect_release_leftover(const char *path, char **what);

#endif

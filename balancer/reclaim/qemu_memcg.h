/*
 * The memory cgroup a QEMU process runs in (libvirt puts each guest in its
 * own: machine.slice/machine-qemu-N-NAME.scope on cgroup v2,
 * /machine/qemu-N-NAME.libvirt-qemu on v1), and what host-side reclaim
 * does with it: keep the guest's measured working set from the host
 * kernel's own reclaim, memory.low on v2, memory.soft_limit_in_bytes on v1
 * (above its soft limit a v1 group is reclaimed first).
 * Only a cgroup that holds this QEMU alone is touched: a shared group
 * (several guests in one cgroup) has no per-guest knob.
 */
#ifndef MEMBAL_QEMU_MEMCG_H
#define MEMBAL_QEMU_MEMCG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { MEMCG_NONE = 0, MEMCG_V1, MEMCG_V2 } memcg_kind;

/* cgroup v1's hard limit (memcg_reclaim.h lowers it for a moment) */
#define MEMCG_V1_LIMIT "memory.limit_in_bytes"

typedef struct {
    memcg_kind kind;
    char dir[512];
    char mount[256];   /* the hierarchy's mount point: dir is below it */
} qemu_memcg;

/* Mount points of the v2 hierarchy and the v1 memory controller from
 * /proc/self/mountinfo text ("" when absent). */
void memcg_mounts(const char *mountinfo, char *v2, size_t v2len, char *v1mem, size_t v1len);

/* From /proc/PID/cgroup text and the mounts: the group with a memory
 * controller (v2 when its memory files exist there, else v1).  0, or -1
 * if there is none. */
int memcg_resolve(const char *proc_cgroup, const char *v2_mount, const char *v1_mount, qemu_memcg *out);

/* Everything above for a live pid.  0 or -1. */
int qemu_memcg_find(pid_t pid, qemu_memcg *out);

/* 1 if pid is the only process in the group, 0 if not, -1 unreadable. */
int memcg_sole_owner(const qemu_memcg *m, pid_t pid);
int memcg_protect(const qemu_memcg *m, uint64_t bytes);
/* The file memcg_protect writes in m->dir (NULL with no group). */
const char *memcg_protect_file(const qemu_memcg *m);
/* At most how much of the protection written to m's group the kernel
 * honours.  On v2 a group's protection is capped by its parent's
 * (mm/memcontrol.c effective_protection: a child's effective memory.low
 * never exceeds its parent's), so by the least memory.low of the groups
 * between it and the mount: on a systemd host machine.slice's, 0 unless
 * MemoryLow= is set on it.  UINT64_MAX when nothing caps it, and on v1
 * (a soft limit has no such cap).  The capping group into by ("" none). */
uint64_t memcg_protect_cap(const qemu_memcg *m, char *by, size_t len);

/* The protection the group had before we wrote ours, to put back when we
 * let the guest go (released, host reclaim turned off, daemon stopped). */
typedef struct {
    bool saved;
    bool is_max;     /* "max" (v2) */
    uint64_t bytes;
} memcg_saved;
/* 0, or -1 with errno. */
int memcg_save(const qemu_memcg *m, memcg_saved *out);
int memcg_restore(const qemu_memcg *m, const memcg_saved *s);

#endif

/*
 * A guest's size through two actuators: its virtio-mem device and its
 * balloon.  Pure functions, no I/O.
 *
 * The balloon works inside the memory the guest booted with (QEMU's
 * ram_size: the balloon's "actual" never counts plugged virtio-mem
 * memory); a virtio-mem device adds up to its maximum on top, in whole
 * blocks that the guest plugs and unplugs itself.  A target T is split so
 * that virtio-mem holds the top and the balloon the bottom:
 *
 *   T >= base:  balloon at base (empty), virtio-mem plugs T - base (whole
 *               blocks, rounded down, at most the device's maximum);
 *   T <  base:  virtio-mem plugs nothing, the balloon takes base - T.
 *
 * So a guest shrinks by unplugging first (whole blocks: the host's huge
 * pages stay whole, and it is the fast way) and grows by emptying its
 * balloon first; a guest whose target stays above its boot memory never
 * has a balloon at all.  When the device does not follow (the guest has
 * no virtio_mem driver, or cannot unplug memory that is not movable), it
 * is held where it is: no more requests for a while (the guest's driver
 * would retry an unplug on its own, forever), and the balloon covers what
 * it could not give.
 */
#ifndef MEMBAL_POLICIES_VMEM_PLAN_H
#define MEMBAL_POLICIES_VMEM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

/* How long a device may show no progress towards what it was asked
 * before it is held.  A plug is done in milliseconds; an unplug migrates
 * the block's pages away first: a 128 MiB memory block takes well under a
 * second under KVM and seconds under TCG (measured: 256 MiB unplugged in
 * under 4 s, TCG).  Longer than that, the guest is not doing it. */
#define VMEM_STALL_S 15.0
/* A held device is asked again after this, doubling each time it is
 * held again without having completed a move, up to VMEM_HOLD_MAX_S.
 * Linux's driver itself retries a failed unplug every 5 s to 5 min
 * (drivers/virtio/virtio_mem.c, VIRTIO_MEM_RETRY_TIMER_MIN/MAX_MS). */
#define VMEM_HOLD_S 60.0
#define VMEM_HOLD_MAX_S 960.0

typedef struct {
    uint64_t base_bytes;      /* the memory the guest booted with: the balloon's range */
    uint64_t block_bytes;     /* the device's block size */
    uint64_t max_bytes;       /* the device's maximum */
    uint64_t plugged_bytes;   /* what the guest has plugged now */
    bool held;                /* not following: what is plugged stays */
} vmem_device;

typedef struct {
    uint64_t balloon_bytes;   /* the balloon's target, within base */
    uint64_t requested_bytes; /* the device's requested size */
} vmem_split;

/* The largest size the guest can be given: its boot memory and all of
 * the device, or what is plugged while the device is held. */
uint64_t vmem_reach(const vmem_device *d);
/* Where T goes (T is first brought within [block, vmem_reach]). */
vmem_split vmem_split_target(uint64_t target, const vmem_device *d);

/* Whether a device follows what it is asked, across samples. */
typedef struct {
    uint64_t last_plugged;    /* plugged at the previous sample */
    uint64_t last_requested;  /* requested at the previous sample */
    double progress_at;       /* when it last moved towards its request (or was asked anew), 0 never */
    double held_until;        /* held until then, 0 not held */
    double hold_s;            /* the next hold's length */
    bool plug_refused;        /* the hold is for a plug (no driver?) rather than an unplug */
} vmem_track;

typedef enum {
    VMEM_FOLLOWING,           /* at its request, or on its way */
    VMEM_NOW_HELD,            /* stalled this sample: held from now */
    VMEM_HELD,                /* held */
    VMEM_RELEASED,            /* its hold ended this sample: it may be asked again */
} vmem_state;

void vmem_track_init(vmem_track *t);
/* A sample of the device at now (s, monotonic). */
vmem_state vmem_track_observe(vmem_track *t, uint64_t plugged, uint64_t requested, double now);
bool vmem_track_held(const vmem_track *t, double now);

#endif

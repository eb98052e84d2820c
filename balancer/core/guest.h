/*
 * Per-guest state kept by the daemon between ticks: identity, effective
 * policy, the last two stats samples, classification, last decision.
 * guest_ingest() turns a raw (untrusted) sample into the clamped view the
 * policies read.
 */
#ifndef MEMBAL_CORE_GUEST_H
#define MEMBAL_CORE_GUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/agent_proto.h"
#include "host/qemu_proc.h"
#include "hv/backend.h"
#include "policies/classify.h"
#include "policies/policy.h"
#include "policies/vmem_plan.h"
#include "reclaim/host_swap.h"

/* A counter the host measures (a guest's disk reads, its QEMU's major
 * faults and CPU time), with its recent samples.  Its QEMU's fault and
 * CPU rates are taken over at least HOST_RATE_WINDOW_S whatever the tick:
 * a second of host swap-in at a 1 s tick must not read as the host
 * swapping (split-lru takes every stream's cache at once then), nor a
 * second of quiet as idle.  Disk reads are taken tick to tick: they are
 * the evidence that answers a guest (a cache that refaults), and a window
 * would only delay it; a guest's swap-in claims are checked against them
 * over the span of its reports the claims are taken over
 * (GUEST_RATE_WINDOW_S and a stats period: 12 slots reach 11 s at a 1 s
 * tick). */
#define HOST_RATE_WINDOW_S 5.0
#define HOST_RATE_SLOTS 12
typedef struct {
    int64_t v[HOST_RATE_SLOTS];
    double at[HOST_RATE_SLOTS]; /* host monotonic s */
    unsigned n;                 /* samples held (0: none, or reset) */
    unsigned head;              /* the newest */
} host_counter;

/* A guest's own counters (swap-ins, major faults) and its used memory
 * are turned into rates over at least GUEST_RATE_WINDOW_S of its reports,
 * whatever the stats period and the tick, as the host's are: a few MiB
 * of jitter or a handful of faults between two reports 2 s apart,
 * extrapolated, read as a guest eating its reserve or thrashing (at a 1 s
 * tick a streamer whose cache was taken won it back so, bench
 * shmdb-stream).  Its events (an OOM kill, a stall) are its last
 * report's. */
#define GUEST_RATE_WINDOW_S 5
#define GUEST_PAST_SLOTS 8

typedef struct guest {
    hv_guest hv;              /* identity and the backend's handle */
    vm_policy policy;
    bool policy_from_metadata;
    char policy_error[256];   /* last rejected metadata, "" if none */
    uint64_t policy_errors;

    guest_sample cur, prev;   /* its last report, and the one before */
    bool have_cur, have_prev;
    guest_sample past[GUEST_PAST_SLOTS]; /* its reports before cur, newest at past_head */
    unsigned past_n, past_head;
    uint64_t counter_resets;  /* counters that went backwards */
    uint64_t unbacked_claims; /* swap-in/fault rates the guest's disk reads cannot explain (capped) */
    uint64_t unbacked_short;  /* ... believed all the same: the guest was short by the host's account */
    host_counter disk;        /* disk_read_bytes */
    double disk_read_bps;     /* host-measured read rate, -1 unknown */
    host_counter qflt;        /* qemu_major_faults */
    double qemu_faults_ps;    /* its QEMU's major faults per second, -1 unknown */
    host_counter qcpu;        /* qemu_cpu_ms */
    double qemu_cpu;          /* the CPUs its QEMU keeps busy (CPU seconds per second), -1 unknown */
    uint64_t clamped_values;  /* guest values outside what the host allows */
    guest_view view;
    classify_state cls;
    agent_state agent;        /* in-guest agent reports, if it runs */

    uint64_t decided_target;  /* what the policy chose last tick (before clamping) */
    uint64_t headroom;        /* ... and the free memory it leaves the guest above its used memory, 0 not said */
    cache_verdict cache_verdict; /* ... and what its page cache is, by which evidence, ... */
    cache_evidence cache_by;
    double cache_verdict_age_s;  /* ... since how long (< 0: no verdict) */
    uint64_t last_target;     /* last balloon target we set (0 = none) */
    uint64_t seen_actual;     /* the balloon size at the previous tick (0 = none) */
    uint64_t self_deflations; /* times the guest grew its balloon on its own (deflate-on-oom) */
    int64_t last_grow_ms;     /* when we last asked its balloon to grow */
    unsigned total_above;     /* reports in a row whose MemTotal stays above the balloon */
    int64_t reset_report;     /* after a reset: the last report from before it (its last_update),
                               * which no longer describes the guest; 0 none */
    bool reboot_pending;      /* reset, and the policy's answer not acted on yet (paused, a job) */
    int64_t last_set_ms;
    uint64_t balloon_ops, balloon_errors;
    uint64_t reclaimed_bytes, returned_bytes;
    char last_reason[96];
    int64_t job_ms;           /* a libvirt job (migration, save, dump) has run this long, -1 none */
    hswap_guest *hswap;       /* host-side reclaim state (reclaim/host_swap.c), NULL if none */
    qemu_proc qproc;          /* its QEMU's /proc files, kept open (core/balancer.c's tick) */
    /* Its virtio-mem device (policies/vmem_plan.h), resized when the
     * backend can address it; then view.actual_bytes and the ceiling are
     * the balloon's and the device's together, and the balloon works
     * within base_bytes. */
    vmem_sample vmem;         /* at the last sample (devices 0: none) */
    bool vmem_resized;
    vmem_track vtrack;
    uint64_t base_bytes;      /* the balloon's range: the memory the guest booted with */
    uint64_t balloon_bytes;   /* the balloon alone, at the last sample */
    uint64_t balloon_asked;   /* the balloon target last sent, 0 none */
    uint64_t vmem_asked;      /* the requested size last sent, UINT64_MAX none */
    uint64_t home_bytes;      /* its size before balancerd resized it (boot memory and the requested
                               * size first seen), where give-back takes it; 0 not known yet */
} guest;

typedef struct {
    double default_floor_percent;
    uint64_t default_floor_min;
    unsigned stale_seconds;   /* stats older than this are not used */
} guest_limits;

void guest_init(guest *g, const char *name, const char *uuid);
/* Take a new sample at wall-clock time now (s); mono is the host's
 * monotonic clock (s), against which agent reports are timed.  Rates come
 * from guest counters over the host timestamps of its reports, at least
 * GUEST_RATE_WINDOW_S apart when it has held them that long; an OOM kill
 * or a stall from its last two. */
void guest_ingest(guest *g, const guest_sample *s, int64_t now, double mono, const guest_limits *lim,
                  const classify_params *cp);
/* Its machine was reset (a reboot): what was learnt from its reports
 * (classification, the previous sample, deflate-on-oom evidence) no longer
 * describes the guest that boots. */
void guest_rebooted(guest *g);
/* The balloon as the policy sees it this tick, after guest_ingest:
 * heading is where it is going (the target last sent while it may still
 * be on its way, else where it is); grow_asked_lately, a growth we asked
 * for may still be arriving.  Sets the view's pending target, its reboot
 * flag and, when the balloon grew on its own beyond both where it was and
 * where we sent it (the guest deflated it on OOM: deflate-on-oom), what
 * it grew by, which is then taken as the balloon's new target (not
 * fought).  Returns that growth, 0 none. */
uint64_t guest_balloon_view(guest *g, uint64_t heading, bool grow_asked_lately);
/* Fold a sample's virtio-mem device into the guest's size (when
 * resizable: the backend can set it), track whether it follows, at now
 * (s, monotonic).  Returns the device's state. */
vmem_state guest_fold_vmem(guest *g, guest_sample *s, bool resizable, double now);
/* Its device as the split sees it at now. */
vmem_device guest_vmem_device(const guest *g, double now);
/* The page cache a guest can drop, of cache (virtio-balloon's disk-caches,
 * Shmem included), given its MemAvailable and MemFree. */
uint64_t reclaimable_cache(uint64_t cache, uint64_t available, uint64_t free_bytes);
/* The target to show operators: the policy's last choice, or the
 * current size before it has chosen. */
uint64_t guest_shown_target(const guest *g);
/* Floor and ceiling from the policy, the defaults and the domain maximum. */
void guest_bounds(const vm_policy *p, uint64_t max_bytes, const guest_limits *lim,
                  uint64_t *floor, uint64_t *ceiling);

#endif

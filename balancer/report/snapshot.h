/*
 * One immutable picture of a tick: the host, its watermarks, and per guest
 * its view, the decision and its reason, counters and host-reclaim state.
 * The core builds one at the end of every tick (core/snapshot.c); the
 * outputs (/metrics, the control socket and so balancerctl) render from
 * it and from nothing else.
 */
#ifndef MEMBAL_SNAPSHOT_H
#define MEMBAL_SNAPSHOT_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/agent_proto.h"
#include "host/host_meminfo.h"
#include "policies/policy.h"
#include "reclaim/host_swap.h"

/* Buckets of balancer_tick_duration_seconds (upper bounds, seconds). */
#define TICK_BUCKETS 8
extern const double tick_bucket_bounds[TICK_BUCKETS];

typedef struct {
    uint64_t bucket[TICK_BUCKETS]; /* cumulative-ready counts per bound */
    uint64_t count;
    double sum;
} tick_histogram;

void tick_histogram_observe(tick_histogram *h, double seconds);

typedef struct {
    char name[256];
    char uuid[300];
    guest_view view;            /* name and uuid point at the fields above */
    vm_policy policy;           /* effective now (view.policy is as of the last stats) */
    bool policy_from_metadata;
    char policy_error[256];     /* last rejected metadata, "" if none */
    uint64_t policy_errors;
    uint64_t target_bytes;      /* the policy's last choice, or the current size before it chose */
    uint64_t last_set_bytes;    /* last balloon target set, 0 none */
    uint64_t headroom_bytes;    /* free memory the policy leaves it above its used memory, 0 not said */
    cache_verdict cache_verdict; /* what its page cache is (split-lru), by which evidence, since how long */
    cache_evidence cache_by;
    double cache_verdict_age_s;  /* < 0: no verdict */
    char reason[96];
    uint32_t quiet_samples;
    uint64_t balloon_ops, balloon_errors, reclaimed_bytes, returned_bytes;
    uint64_t clamped_values, counter_resets, unbacked_claims, unbacked_short;
    uint64_t self_deflations;  /* balloon grown by the guest itself (deflate-on-oom) */
    double disk_read_bps;       /* host-measured, -1 unknown */
    double qemu_faults_ps;      /* its QEMU's major faults/s (host swap-ins), host-measured, -1 unknown */
    double qemu_cpu;            /* the CPUs its QEMU keeps busy, host-measured, -1 unknown */
    int free_page_reporting;    /* its balloon's free page reporting: 1 on, 0 off, -1 unknown */
    int free_page_reporting_used; /* ... taken by the guest's driver: 1, 0, -1 unknown */
    int64_t swap_in_bytes, swap_out_bytes, major_faults; /* guest counters, -1 not reported */
    int64_t oom_kills, alloc_stalls; /* guest counters (QEMU 9.2+ balloon statistics), -1 not reported */
    /* the in-guest agent */
    int64_t agent_refaults_anon, agent_refaults_file;     /* -1 unknown */
    double agent_psi_some;      /* memory PSI some avg10 while the agent is fresh, -1 unknown */
    uint64_t agent_messages, agent_resets, agent_clamped;
    uint64_t agent_rejected[AGENT_REJ_COUNT];
    /* host-side reclaim: reclaim.active when the guest is scanned */
    host_swap_guest_stats reclaim;
    /* its virtio-mem devices (0 none); the first is resized with its
     * balloon when vmem_resized (view.actual_bytes is then both together) */
    unsigned vmem_devices;
    bool vmem_resized, vmem_held, vmem_plug_refused;
    double vmem_held_s;         /* what its hold has left, s */
    uint64_t vmem_block_bytes, vmem_max_bytes, vmem_requested_bytes, vmem_plugged_bytes;
    uint64_t base_bytes;        /* the balloon's range: the memory it booted with */
    uint64_t balloon_bytes;     /* its balloon alone */
} snapshot_guest;

typedef struct {
    const char *policy_name;    /* static strings */
    const char *backend_name;
    uint64_t ticks;
    double last_tick_unix;      /* when the main loop last ran a round (Unix time, s); 0 none yet */
    unsigned tick_seconds;      /* the configured tick */
    bool backend_up;            /* the last round reached the hypervisor */
    bool paused, dry_run, reclaiming;
    bool own_reporting;         /* host/own_reporting.h */
    char summary[128];
    host_meminfo host;
    watermarks wm;
    tick_histogram tick_hist;
    uint64_t backend_reconnects, backend_errors, policy_errors;
    uint64_t stats_calls_all, stats_calls_one; /* the backend's statistics calls: all guests at once, one guest */
    host_swap_stats reclaim;
    size_t n_guests;
    snapshot_guest *guests;
} snapshot;

void snapshot_free(snapshot *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(snapshot, snapshot_free)

/* The guest named name (domain name or uuid), or NULL. */
const snapshot_guest *snapshot_find(const snapshot *s, const char *name);
/* "off", "no-stats", "thrashing", "streaming" or "ok". */
const char *snapshot_guest_state(const snapshot_guest *g);

#endif

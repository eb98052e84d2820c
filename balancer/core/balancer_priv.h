/* The balancer's state, for the core's own files only (see ARCHITECTURE.md). */
#ifndef MEMBAL_CORE_BALANCER_PRIV_H
#define MEMBAL_CORE_BALANCER_PRIV_H

#include <glib.h>

#include "core/balancer.h"
#include "core/guest.h"
#include "host/host_meminfo.h"
#include "policies/classify.h"
#include "policies/policy.h"
#include "reclaim/host_swap.h"

struct balancer {
    balancer_config cfg;
    const policy_ops *policy;
    void *policy_state;
    GPtrArray *guests;              /* guest*, owned */
    const backend_ops *backend;
    hv_ctx hv;                      /* what the backend is given */
    guest_limits lim;
    classify_params cp;
    const char *proc_meminfo;       /* normally /proc/meminfo */
    const char *sys_node_dir;       /* normally /sys/devices/system/node */
    bool dry_run;                   /* decide and log, never actuate */
    bool paused;
    bool shutting_down;             /* guests are released, not gone */
    host_swap *hswap;               /* host-side reclaim, NULL when disabled */
    bool own_reporting;             /* host/own_reporting.h: probed at start */

    /* last tick */
    host_meminfo host;
    watermarks wm;
    bool reclaiming;
    char summary[128];
    uint64_t ticks;
    double last_tick_unix;          /* when the last round ended (Unix time, s) */
    bool backend_up;                /* the last round reached the hypervisor (libvirtd, the QMP sockets) */
    tick_histogram tick_hist;
    snapshot *snap;
    bool snap_stale;                /* state changed since snap was built (events, reload) */

    /* counters */
    uint64_t policy_errors;         /* metadata documents rejected */
    uint64_t backend_errors;
};

/* core/snapshot.c: the picture of b now. */
snapshot *balancer_snapshot_build(const balancer *b);

#endif

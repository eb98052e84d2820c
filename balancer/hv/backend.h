/*
 * The hypervisor layer: where guests come from and how their balloons are
 * set, behind one interface with two backends, libvirt
 * (backend_libvirt.c) and QEMU QMP sockets given with --qmp
 * (backend_qmp.c).
 *
 * A backend knows a guest only as an hv_guest (identity plus its own
 * handle); the core embeds one in each of its guests and lends the
 * backend its guest list through hv_inventory, so this layer never sees
 * the core's state.
 */
#ifndef MEMBAL_HV_BACKEND_H
#define MEMBAL_HV_BACKEND_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent_proto.h"

/* The guest's virtio-mem device, host truth (QEMU's, or libvirt's live
 * XML).  A guest may have several (one per NUMA node): balancerd resizes
 * the first and leaves the others as they are. */
typedef struct {
    unsigned devices;          /* its virtio-mem devices, 0 none (then the rest is 0) */
    char id[64];               /* the first: its QEMU id (QMP) or libvirt alias; "" none (cannot be addressed) */
    uint64_t block_bytes, max_bytes, requested_bytes, plugged_bytes;
} vmem_sample;

/* One stats sample.  Values the guest did not report are -1.  actual and
 * max come from QEMU/libvirt (host truth): the balloon's, within the
 * memory the guest booted with; vmem is what a virtio-mem device adds on
 * top.  The rest comes from the guest. */
typedef struct {
    int64_t actual_bytes;
    int64_t max_bytes;
    int64_t last_update;     /* host timestamp of the guest's last report (s, epoch) */
    int64_t free_bytes, available_bytes, cache_bytes, total_bytes;
    int64_t swap_in_bytes, swap_out_bytes; /* cumulative */
    int64_t major_faults, minor_faults;    /* cumulative */
    int64_t oom_kills, alloc_stalls;       /* cumulative: the guest's own OOM kills and allocations
                                            * that stalled in direct reclaim (QEMU 9.2+ balloon
                                            * statistics from a Linux 6.12+ guest) */
    int64_t rss_bytes;                     /* what its QEMU has touched (resident + swapped +
                                            * hugetlb): filled in by the core, -1 unknown */
    int64_t host_ws_bytes;                 /* its working set as host reclaim measures it (resident and
                                            * not cold): filled in by the core, -1 unknown */
    int64_t disk_read_bytes;  /* host-measured: bytes the guest's disks read so far, -1 unknown */
    int64_t qemu_major_faults; /* host-measured: its QEMU's major faults so far (/proc/PID/stat;
                                * host swap-ins of guest RAM): filled in by the core, -1 unknown */
    int64_t qemu_cpu_ms;      /* host-measured: the CPU its QEMU used so far (user + system, ms):
                                * filled in by the core, -1 unknown */
    int64_t job_ms;           /* a hypervisor job (migration, save, dump) has run this long, -1 none */
    int free_page_reporting;  /* its balloon device offers free page reporting (the guest's free
                               * pages handed back in 2 MiB blocks; QEMU free-page-reporting=on):
                               * 1 yes, 0 no, -1 unknown */
    int free_page_reporting_used; /* ... and the guest's balloon driver took it (negotiated; QMP
                               * with QEMU 7.2+ only): 1 yes, 0 no, -1 unknown */
    int deflate_on_oom;       /* its balloon deflates when the guest runs out of memory (QEMU's
                               * deflate-on-oom, libvirt's autodeflate): the guest's safety net
                               * against a balloon that took too much.  1 yes, 0 no, -1 unknown */
    unsigned balloon_failures; /* balloon changes the hypervisor refused since the last sample */
    vmem_sample vmem;
} guest_sample;

/* What the hypervisor layer knows of one guest. */
typedef struct {
    char name[256];
    char uuid[300];           /* libvirt's, or "qmp:SOCKET" for a QEMU without -uuid */
    bool seen;                /* present in the latest domain list */
    unsigned resets;          /* its machine was reset (a reboot) since the core last looked: counted
                               * by the backend (QMP RESET, libvirt's reboot event), cleared by the core */
    void *backend_data;       /* virDomainPtr or qmp target, owned by the backend */
} hv_guest;

/* The core's guest list, as a backend may read and change it during
 * sync.  ctx is the core's. */
typedef struct {
    hv_guest *(*find)(void *ctx, const char *uuid);
    hv_guest *(*add)(void *ctx, const char *name, const char *uuid);
    void (*remove)(void *ctx, hv_guest *g);
    size_t (*count)(void *ctx);
    hv_guest *(*at)(void *ctx, size_t i);
    /* The guest's policy metadata document (NULL: it has none). */
    void (*policy_xml)(void *ctx, hv_guest *g, const char *xml);
} hv_inventory;

/* Everything a backend is given; the core keeps the settings current
 * (a reload may change them) and reads the counters. */
typedef struct {
    const char *connect_uri;  /* libvirt */
    char **qmp_sockets;       /* --qmp SOCKET[,agent=PATH]..., NULL-terminated */
    unsigned stats_period;    /* seconds between the guests' balloon stats */
    const hv_inventory *inv;
    void *inv_ctx;
    uint64_t reconnects;      /* counted by the backend */
    uint64_t stats_calls_all; /* statistics calls that asked all guests at once (libvirt's bulk call) */
    uint64_t stats_calls_one; /* statistics calls that asked one guest */
    void *priv;               /* the backend's own state */
} hv_ctx;

/* A tick waits this long for all its guests' answers together; a guest
 * that has not answered by then is not waited for again until it does. */
#define HV_GATHER_MS 100
/* A guest not answering this long is logged (once; a slow answer is not). */
#define HV_STUCK_WARN_MS 5000

typedef struct backend_ops {
    const char *name;
    /* Connect if needed, then bring the inventory in line with the
     * running guests: mark every guest seen or not, add new ones, remove
     * the unseen.  -1 if the hypervisor is unreachable. */
    int (*sync)(hv_ctx *hv);
    /* Read one guest's stats.  -1 with the reason on failure. */
    int (*sample)(hv_ctx *hv, hv_guest *g, guest_sample *out, GError **error);
    /* Feed what the guest's agent sent since the last call into st;
     * guest_bytes bounds the sizes it may claim. */
    void (*agent_drain)(hv_ctx *hv, hv_guest *g, agent_state *st, uint64_t guest_bytes);
    /* Set the balloon target (bytes). */
    int (*set_target)(hv_ctx *hv, hv_guest *g, uint64_t bytes, GError **error);
    /* Set the requested size of the virtio-mem device the last sample
     * described (vmem.id). */
    int (*set_vmem)(hv_ctx *hv, hv_guest *g, uint64_t requested_bytes, GError **error);
    /* The QEMU process's pid (host-side reclaim), or -1. */
    int (*qemu_pid)(hv_ctx *hv, hv_guest *g);
    /* Free what the backend attached to g (g->backend_data). */
    void (*guest_release)(hv_ctx *hv, hv_guest *g);
    void (*shutdown)(hv_ctx *hv);
} backend_ops;

extern const backend_ops backend_libvirt;
extern const backend_ops backend_qmp;

/* For backends: clear every guest's seen flag before a sync, remove the
 * ones still unseen after it. */
void hv_mark_unseen(const hv_ctx *hv);
void hv_drop_unseen(const hv_ctx *hv);

#endif

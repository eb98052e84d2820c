/*
 * The balancer core: one tick = read the host, sample every guest, run
 * the policy over the snapshot, apply its decisions within the safety
 * bounds.  Everything here is driven from balancerd's GLib main loop.
 */
#ifndef MEMBAL_BALANCER_H
#define MEMBAL_BALANCER_H

#include <glib.h>
#include <stdbool.h>

#include "backend.h"
#include "classify.h"
#include "config.h"
#include "guest.h"
#include "host_meminfo.h"
#include "metrics.h"
#include "policy.h"

struct balancer {
    balancer_config cfg;
    const policy_ops *policy;
    void *policy_state;
    GPtrArray *guests;              /* guest*, owned */
    const backend_ops *backend;
    void *backend_priv;
    guest_limits lim;
    classify_params cp;
    const char *proc_meminfo;       /* normally /proc/meminfo */
    const char *sys_node_dir;       /* normally /sys/devices/system/node */
    char **qmp_sockets;             /* --qmp SOCKET..., NULL-terminated (qmp backend) */
    bool dry_run;                   /* decide and log, never actuate */
    bool paused;
    bool shutting_down;             /* guests are released, not gone */

    /* last tick */
    host_meminfo host;
    watermarks wm;
    bool reclaiming;
    char summary[128];
    uint64_t ticks;
    double last_tick_seconds;
    tick_histogram tick_hist;

    /* counters */
    uint64_t policy_errors;         /* metadata documents rejected */
    uint64_t backend_reconnects;
    uint64_t backend_errors;

    struct host_swap *hswap;        /* host-side reclaim stage, NULL when disabled */
};

/* cfg is moved into b (and cleared in the caller's copy). */
int balancer_init(balancer *b, balancer_config *cfg, const backend_ops *be, char **err);
void balancer_free(balancer *b);
/* Install a reloaded configuration (moved, like in init) and the limits
 * derived from it.  The policy is switched separately. */
void balancer_replace_config(balancer *b, balancer_config *cfg);
/* Switch policy (config reload); the new policy starts with fresh state. */
int balancer_set_policy(balancer *b, const char *name, char **err);

guest *balancer_guest_find(balancer *b, const char *uuid);
guest *balancer_guest_add(balancer *b, const char *name, const char *uuid);
void balancer_guest_remove(balancer *b, guest *g);
/* Clear every guest's seen flag before a sync, drop unseen ones after. */
void balancer_mark_unseen(balancer *b);
void balancer_drop_unseen(balancer *b);

/* Apply a metadata policy document to g; on error keep the old policy,
 * count and log it.  xml == NULL means "no metadata": defaults. */
void balancer_apply_policy_xml(balancer *b, guest *g, const char *xml);

void balancer_tick(balancer *b);

#endif

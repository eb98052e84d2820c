/*
 * The balancer core: one tick = read the host, sample every guest, run
 * the policy over their views, apply its decisions within the safety
 * bounds (the balloon actuator), then host-side reclaim (the second
 * actuator), and publish one snapshot of it all.  Everything here is
 * driven from balancerd's GLib main loop.  The struct is the core's own
 * (core/balancer_priv.h); the rest of the daemon gets these functions.
 */
#ifndef MEMBAL_CORE_BALANCER_H
#define MEMBAL_CORE_BALANCER_H

#include <glib.h>
#include <stdbool.h>

#include "config/config.h"
#include "core/guest.h"
#include "hv/backend.h"
#include "report/snapshot.h"

typedef struct balancer balancer;

/* cfg is moved into the balancer (and cleared in the caller's copy);
 * qmp_sockets (NULL-terminated, for the qmp backend) stays the caller's.
 * NULL with the reason when the policy is unknown or host reclaim cannot
 * start. */
balancer *balancer_new(balancer_config *cfg, const backend_ops *be, char **qmp_sockets, bool dry_run,
                       GError **error);
void balancer_free(balancer *b);
/* What a configuration makes of the guests' reports, as balancerd uses
 * it: the default floor, when stats are stale, and the need rules'
 * reserve and horizon (at least two ticks ahead). */
void balancer_limits(const balancer_config *c, guest_limits *lim, classify_params *cp);
/* balancerd --release-leftovers (the unit's ExecStopPost), and every
 * balancerd at start: turn off what a balancerd that is gone left running,
 * as recorded in state_dir (its kdamond: reclaim/kdamond_ledger.h; the
 * cgroup protection it wrote: reclaim/protect_ledger.h), and log what was
 * found.  0, or -1 when something of ours is left that could not
 * be turned off. */
int balancer_release_leftovers(const char *state_dir);

/* The configuration in force. */
const balancer_config *balancer_config_get(const balancer *b);
/* Install a reloaded configuration (moved, like in balancer_new).  A
 * changed [host_reclaim] restarts host reclaim; when the new one cannot
 * start, the previous [host_reclaim] is kept (and started again) and -1
 * says why, the rest of cfg being in force.  The policy is switched
 * separately. */
int balancer_replace_config(balancer *b, balancer_config *cfg, GError **error);
/* Switch policy (config reload); the new policy starts with fresh state. */
int balancer_set_policy(balancer *b, const char *name, GError **error);
/* balancerctl pause/resume: keep observing, stop actuating.  Recorded in
 * the state directory (PAUSED_FILE): a balancerd started while it is
 * there starts paused (a restart or an upgrade does not resume what the
 * operator paused). */
#define PAUSED_FILE "paused"
void balancer_set_paused(balancer *b, bool paused);
/* balancerctl give-back: every guest not in mode=off is given its whole
 * size back (its ceiling) now, and balancing is paused (recorded as
 * above) so that nothing takes it again until balancerctl resume.
 * Returns how many guests were moved. */
unsigned balancer_give_back_all(balancer *b);

void balancer_tick(balancer *b);
/* What the last tick saw and did, with what changed since (a pause, a
 * reload, guests and policies from hypervisor events); owned by b and
 * valid until the next call that changes b. */
const snapshot *balancer_snapshot(balancer *b);

#endif

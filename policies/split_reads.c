/*
 * A guest's disk reads, as split-lru remembers them (split_trackers.h):
 * the usual rate a reclaim's cost is measured against, the pace a
 * reader's is, and whether the guest has settled enough to give.
 */
#include <math.h>

#include "policies/split_trackers.h"

void reads_init(read_tracker *r, const split_params *p, const guest_view *g, double now)
{
    r->avg_bps = -1;
    r->pace_at_s = now;
    r->watched_since_s = now;
    /* without a disk-read rate yet (it takes two samples) nothing says
     * whether it is warming up: it gives nothing until it has settled */
    r->settled = g->disk_read_bps < 0 || g->rebooted ? 0 : p->settle_reports;
    r->settle_from_s = now - p->settle_s; /* the time floor is for a warm-up's tail only */
    r->seen_s = now;
}

bool reads_settling(const read_tracker *r, const split_params *p, double now)
{
    return r->settled < p->settle_reports || now - r->settle_from_s < p->settle_s;
}

bool reads_watched(const read_tracker *r, const split_params *p, double now)
{
    return now - r->watched_since_s >= p->pace_watch_s;
}

/* The pace decays, and rises to what it reads while its QEMU does not
 * wait for host swap (a cache refaulting then would raise the bar its
 * refault is judged by: experiment_ask_again). */
static void observe_pace(read_tracker *r, const split_params *p, const guest_view *g, double now, double dt)
{
    if (now > r->pace_at_s) {
        r->pace_bps *= exp2(-(now - r->pace_at_s) / p->pace_half_life_s);
        r->pace_at_s = now;
    }
    if (g->host_faults_ps < p->host_bound_fps) {
        if (g->disk_read_bps > r->pace_bps)
            r->pace_bps = g->disk_read_bps;
        r->unwaited_s = fmin(r->unwaited_s + dt, p->pace_watch_s);
    }
}

void reads_observe(read_tracker *r, const split_params *p, const guest_view *g, double now)
{
    double dt = now > r->seen_s ? now - r->seen_s : 0;
    r->seen_s = now;
    observe_pace(r, p, g, now, dt);
    if (g->filling) {
        /* reads into free memory are a warm-up, not its usual rate: the
         * average starts over from its first settled sample (from zero, a
         * stream's "before" would be too low for ticks and its steady
         * reads would look like refaults) */
        r->settled = 0;
        r->settle_from_s = now;
        r->avg_bps = -1;
        return;
    }
    /* a report the guest did not make (a booting guest without its
     * balloon driver yet, stale stats), or made before its reboot,
     * settles nothing */
    if (r->settled < p->settle_reports && g->stats_fresh && !g->rebooted)
        r->settled++;
    if (reads_settling(r, p, now)) {
        r->avg_bps = -1; /* its usual reads start once settled */
        return;
    }
    /* an average over time, whatever the tick: each observation weighs
     * what the time since the last one does */
    double w = 1.0 - exp(-dt / p->experiment_s);
    if (g->disk_read_bps < 0)
        r->avg_bps = -1;
    else
        r->avg_bps = r->avg_bps < 0 ? g->disk_read_bps : (1.0 - w) * r->avg_bps + w * g->disk_read_bps;
}

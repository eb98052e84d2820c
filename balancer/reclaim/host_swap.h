/*
 * The host-reclaim actuator ([host_reclaim] in balancer.conf), the second
 * actuator of a tick after the balloon: every scan_interval a round scans
 * each guest's RAM (host_reclaim.c) and pages cold guest memory out to
 * host swap as policies/reclaim_plan.c decides: what the host is short of
 * its watermarks (per NUMA node), and, with proactive = yes, memory idle
 * for proactive_age whether the host is short or not; only from guests
 * inside their SLO (promotion budget, no pressure).  It also writes each
 * guest's measured working set to its memory cgroup when the QEMU is alone
 * there.
 *
 * A round runs in its own thread, never in the main loop: host_swap_tick()
 * copies what the round needs from the tick and returns at once; the
 * thread scans a batch of chunks at a time, pausing between batches so it
 * stays within max_cpu of one core, and pages out at most max_swap_out per
 * second.  A tick that comes while a round still runs starts none.
 *
 * It knows the guests only through the host_swap_target the core passes
 * each round, and keeps per-guest state in an hswap_guest the core holds
 * for it (a round holds its own reference while it runs).
 */
#ifndef MEMBAL_HOST_SWAP_H
#define MEMBAL_HOST_SWAP_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "host/host_meminfo.h"
#include "policies/policy.h"

typedef struct host_swap host_swap;
typedef struct hswap_guest hswap_guest;

/* What /metrics and balancerctl show per guest. */
typedef struct {
    bool active;                 /* scanning this guest (or, by_memcg, reclaiming through its cgroup) */
    bool by_memcg;               /* the memcg source: no scan, so no cold or working-set figures */
    uint64_t resident_bytes, swapped_bytes, cold_bytes;
    uint64_t paged_out_bytes;    /* total paged out by host reclaim */
    uint64_t probe_bytes;
    uint64_t refaults;           /* paged-out chunks that came back within the window */
    uint64_t refault_bytes;      /* what came back in them */
    uint32_t cold_age_scans;     /* current threshold */
    uint64_t budget_bytes;       /* current per-scan budget */
    uint64_t protected_bytes;    /* memory.low / soft limit we set, 0 none */
    uint64_t protected_effective_bytes; /* what of it the group's ancestors let through (cgroup v2) */
    char protect_capped_by[256]; /* the ancestor that caps it, "" none */
    uint64_t ws_bytes;           /* working set as the host measures it: resident minus cold */
    bool ws_known;               /* scanned long enough (the cold age) for ws_bytes to mean it */
    int64_t at_ms;               /* when the round that found these ended (monotonic), 0 never */
    uint64_t proactive_bytes;    /* total paged out proactively (of paged_out_bytes) */
    double promoted_bps;         /* promotions (paged-out memory coming back), a one-minute average */
    double budget_percent;       /* its promotion budget, % of ws_bytes per minute */
    double foreign_fault_bps;    /* its QEMU's major faults that are not ours, bytes/s; < 0 unknown */
    uint64_t promoted_total;     /* promotions since it was first scanned, bytes (/metrics' counter) */
    uint64_t foreign_fault_total; /* its QEMU's major faults that are not ours since then, bytes */
    const char *slo;             /* "within", "over-budget", "pressure" (a static string) */
} host_swap_guest_stats;

typedef struct {
    bool enabled;
    const char *source;          /* "damon", "probe" or "memcg" */
    uint64_t scans, scan_errors, paged_out_bytes;
    uint64_t idle_skips;         /* scan ticks skipped: no pressure, no scan */
    uint64_t busy_skips;         /* scan ticks skipped: the last round still ran */
    uint64_t proactive_bytes;    /* of paged_out_bytes, paged out proactively */
    double cpu_seconds;          /* balancerd's own scanning CPU */
    double last_round_seconds;   /* wall time of the last round */
    double source_cpu_seconds;   /* kdamond CPU (damon) */
} host_swap_stats;

/* One guest offered to a round: only guests that may give are (see
 * reclaim_may_take()), and no round runs in a dry run or while paused:
 * a probe is a pageout too.  The round copies what it needs. */
typedef struct {
    const char *name;            /* for the log */
    int qemu_pid;                /* -1 unknown */
    const guest_view *view;
    hswap_guest **state;         /* the guest's slot: created, reopened and kept here */
} host_swap_target;

/* What the rest of the tick found. */
typedef struct {
    const host_meminfo *host;
    const watermarks *wm;
    uint64_t balloon_reclaim;    /* bytes this tick's balloon moves take back */
    bool reclaiming;             /* the host is between low and high */
} host_swap_round;

/* The stage for cfg's [host_reclaim] (copied), with DAMON's sysfs admin
 * directory cfg->damon_admin and the kdamond's ledger in cfg->state_dir:
 * NULL when it is disabled, or with the reason when this process lacks the
 * capabilities it needs or source = damon but DAMON is not usable. */
host_swap *host_swap_new(const balancer_config *cfg, GError **error);
void host_swap_free(host_swap *hs);
/* scan_interval has passed since the last round started. */
bool host_swap_due(const host_swap *hs);
/* Paused (balancerctl pause): a round in flight writes nothing more from
 * its next slice or batch on (no pageouts, no probes, no cgroup limits);
 * ticks start no rounds meanwhile (the caller's part). */
void host_swap_hold(host_swap *hs, bool hold);
/* Start a round, when it is due and the last one has ended; returns at
 * once. */
void host_swap_tick(host_swap *hs, host_swap_target *t, size_t n, const host_swap_round *r);
/* Drop the core's reference: what was scanned of the guest is closed and
 * its cgroup protection put back once no round holds it either. */
void host_swap_guest_free(hswap_guest *h);
void host_swap_stats_get(const host_swap *hs, host_swap_stats *out);
/* false (and zeros) for a guest that is not being scanned */
bool host_swap_guest_stats_get(const hswap_guest *h, host_swap_guest_stats *out);

#endif

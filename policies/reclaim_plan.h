/*
 * Who gives to host-side reclaim, how much, and in which order: the
 * decisions of the host-reclaim stage (balancer/reclaim/host_swap.c, the
 * actuator), pure so they are unit-tested on hand-made inputs
 * (tests/unit/check_policies.c).
 *
 *   how much   the host (or, with several NUMA nodes, each node against
 *              its share of the watermarks: classzone) is short of its
 *              high watermark once this tick's balloon moves land; nothing
 *              unless it is below low.
 *   who        never a thrashing guest, one with mode=off or protect=yes;
 *              such guests are not even scanned (probes are pageouts).
 *   order      streaming guests first, then whoever has the most cold
 *              memory.
 *   SLO        per guest, one service-level objective across host swap:
 *              what comes back from host swap (pages of chunks we paged
 *              out, faulted in again: promotions) stays under a budget, a
 *              share of the guest's host-measured working set per minute
 *              (0.2% by default: Google's far memory, ASPLOS'19), and the
 *              guest shows no pressure (its PSI through the agent, or,
 *              while the host is not short, its QEMU's major faults that
 *              are not ours).  A guest outside
 *              its SLO gives nothing to host reclaim, proactive or not,
 *              until it is back inside (below 3/4 of each limit).
 */
#ifndef MEMBAL_RECLAIM_PLAN_H
#define MEMBAL_RECLAIM_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policies/policy.h"

/* One NUMA node as host reclaim sees it. */
typedef struct {
    int node;
    uint64_t total_bytes;
    uint64_t reclaimable_bytes;   /* free + file pages on the node */
} reclaim_node;

/* Bytes to page out, from node (-1: anywhere on the host). */
typedef struct {
    int node;
    uint64_t bytes;
} reclaim_want;

/* How short avail is of high once coming bytes arrive; 0 unless avail is
 * below low. */
uint64_t reclaim_shortfall(uint64_t avail, uint64_t low, uint64_t high, uint64_t coming);

/* What to page out this round: one entry per short node when the host
 * has several nodes and any is short, else at most one host-wide entry.
 * out has room for n_nodes entries (at least 1).  Returns the count. */
size_t reclaim_plan_wants(const host_view *host, const watermarks *wm, const reclaim_node *nodes, size_t n_nodes,
                          uint64_t balloon_reclaim, reclaim_want *out);

/* A guest that may give to host reclaim at all, and be scanned by it: not
 * thrashing, not in need, not mode=off, not protect=yes. */
bool reclaim_may_take(const guest_view *v);

/* One guest offered to host reclaim. */
typedef struct {
    const guest_view *view;
    uint64_t cold_bytes;          /* resident and idle for the cold age */
} reclaim_candidate;

/* Indices of the candidates that may give, in giving order, into order
 * (room for n).  Returns the count. */
size_t reclaim_plan_givers(const reclaim_candidate *c, size_t n, size_t *order);

/* How much of a guest may be in host swap through proactive pageouts:
 * the cold memory its balloon cannot take for nothing.  Free memory and
 * page cache the balloon takes at no cost (a dropped clean page is never
 * written), while host swap of them costs a write and, when the guest
 * reuses the frame (a burst allocating over its cache), a read of dead
 * content back from the host's swap.  (In the bench's roomy idle-burst
 * run an idle guest's cache went out proactively and its 300 MiB burst
 * over it took 5.3 s instead of 1.9 s; most of that turned out to be huge
 * pages split by the probe scanner, see cold_probe.c, and no run
 * separates the two.)  So proactive pageouts are capped at the guest's
 * used memory (balloon size - free - cache, from its stats) beyond its
 * host-measured working set; swapped_bytes (its RAM in host swap now)
 * counts against that.  The cap is an amount: which chunks go is still
 * the coldest first, whatever they hold.  Without fresh stats (no balloon driver, stats off) the guest
 * cannot give anything through the balloon: all its cold memory.  A
 * guest that reports more free or cache than it has only keeps its own
 * memory out of proactive reclaim; what the host needs when it is short
 * is not capped by this. */
uint64_t reclaim_proactive_room(const guest_view *v, uint64_t ws_bytes, uint64_t cold_bytes,
                                uint64_t swapped_bytes);

/* The memcg source's proactive step (the kernel's LRU chooses the pages,
 * this says how many): Senpai's probe, a share of the group's memory each
 * round while its SLO holds -- oomd src/oomd/plugins/Senpai.cpp (88c28fd),
 * tick_immediate_backoff:
 *     int64_t reclaim_size = (*current_opt - *limit_min_bytes_opt) * max_probe_;
 * with max_probe 0.01 (Senpai.h) -- on the group's whole charge (a VM has
 * no unreclaimable floor Senpai's limit_min stands for: all its RAM is
 * anonymous and may go to swap), capped at its cold used memory as every
 * proactive pageout is (reclaim_proactive_room: its free memory and cache
 * are the balloon's, for nothing; swapped counts against it), and at what
 * is left of the per-round budget. */
#define MEMCG_PROBE_SHARE 0.01
uint64_t reclaim_memcg_proactive(const guest_view *v, uint64_t usage_bytes, uint64_t swapped_bytes,
                                 uint64_t left_bytes);

/* One guest's SLO inputs, host-measured except the agent's PSI. */
typedef struct {
    uint64_t ws_bytes;          /* resident minus cold */
    double promoted_bps;        /* promotions, bytes/s, a one-minute average */
    double budget_percent;      /* % of ws_bytes per minute */
    double foreign_fault_bps;   /* its QEMU's major faults beyond our probes and promotions, bytes/s (one-minute
                                 * average); < 0 unknown */
    bool agent_fresh;
    double agent_psi_some;      /* % (avg10) */
    bool host_short;            /* the host is below low (or reclaiming to high) */
} reclaim_slo_input;

typedef enum { SLO_WITHIN, SLO_OVER_BUDGET, SLO_PRESSURE } reclaim_slo;

/* Guest memory PSI "some" (avg10, %) at which a guest is under pressure:
 * TMO's Senpai target is 10 ms of stall per 6 s (0.17%); a guest's own
 * reclaim is seen at a few tenths, so 1% is pressure beyond doubt. */
#define SLO_GUEST_PSI_LIMIT 1.0
/* Host memory PSI "some" (avg10, %) above which nothing is paged out
 * proactively: the host is already stalling, more swap-out adds to it. */
#define SLO_HOST_PSI_LIMIT 1.0

/* Outside the SLO until below this share of each limit. */
#define SLO_HYSTERESIS 0.75

/* Where the guest stands now, given where it stood (prev). */
reclaim_slo reclaim_slo_judge(const reclaim_slo_input *in, reclaim_slo prev);
const char *reclaim_slo_name(reclaim_slo s);
/* The one-minute average of a rate: avg updated with bytes seen over the
 * last dt_s seconds. */
double reclaim_rate_average(double avg, double bytes, double dt_s);

#endif

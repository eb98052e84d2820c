/*
 * host_swap.c's state, shared with the memcg source's round
 * (memcg_round.c): the round thread's, one round at a time.
 */
#ifndef MEMBAL_HOST_SWAP_PRIV_H
#define MEMBAL_HOST_SWAP_PRIV_H

#include "reclaim/host_swap.h"

#include "host/node_map.h"
#include "policies/cold_lru.h"
#include "policies/reclaim_plan.h"
#include "reclaim/cold_source.h"
#include "reclaim/host_reclaim.h"
#include "reclaim/protect_ledger.h"
#include "reclaim/memcg_reclaim.h"
#include "reclaim/qemu_memcg.h"

#define REOPEN_ROUNDS 10         /* retry a guest that could not be opened */
#define PROTECT_SLACK (16ULL << 20)

/* A guest's host-reclaim state.  Reference-counted: the core's guest
 * holds one, a running round another. */
struct hswap_guest {
    GMutex lock;                 /* guards pub */
    host_swap_guest_stats pub;   /* what the last round found */
    /* the rest belongs to the round thread (one round at a time) */
    reclaim_guest rg;            /* the chunk sources' (not opened by the memcg source) */
    bool open;
    bool by_memcg;               /* opened by the memcg source: its cgroup, no RAM scan */
    uint64_t memcg_usage;        /* memcg source: its group's charge at the last round */
    uint64_t memcg_swapped;      /* ... and its QEMU's memory in host swap (VmSwap) */
    uint64_t memcg_reclaimed;    /* what its charge fell by through our reclaims, in all */
    memcg_step memcg_step;       /* a v1 limit step that may still need putting back */
    int pid;
    uint64_t retry_round;        /* round number of the next open attempt */
    char error[256];             /* why it is not open, logged once */
    qemu_memcg cg;
    bool cg_own;                 /* the cgroup holds this QEMU alone */
    uint64_t protected_bytes;
    memcg_saved cg_before;       /* its protection before ours, put back at the end */
    protect_ledger *pl;          /* where that is recorded while ours is in (a reference) */
    uint64_t protect_cap;        /* what of it the kernel honours (memcg_protect_cap) */
    char protect_capped_by[256]; /* the ancestor group that caps it, "" none */
    uint64_t proactive_bytes;
    uint64_t round_paged;        /* paged out in this round: the per-scan budget holds across its passes */
    /* SLO */
    int64_t last_round_ms;       /* 0: no round yet */
    uint64_t majflt;             /* its QEMU's major faults at the last round */
    bool majflt_known;
    double promoted_bps, foreign_bps;
    uint64_t promoted_total, foreign_total; /* bytes, since it was first scanned */
    reclaim_slo slo;
};

/* What a round needs of one guest, copied from the tick. */
typedef struct {
    hswap_guest *h;              /* a reference */
    char *name;
    int pid;
    guest_view view;             /* name and uuid point to name / NULL */
    double budget_percent;
} round_guest;

typedef struct {
    round_guest *g;
    size_t n;
    reclaim_want wants[HOST_MAX_NODES];
    size_t n_wants;
    bool can_swap;
    uint64_t swap_free_bytes;    /* the host's free swap when the round was handed over */
    bool reclaiming;
    double host_psi_some;        /* < 0 unknown */
} round_job;

struct host_swap {
    /* set at creation, read-only after */
    cold_source *src;            /* NULL for the memcg source */
    node_map nodes;
    cold_tunables tun;
    unsigned scan_interval;      /* seconds */
    bool protect;                /* protect_working_set */
    bool proactive;
    uint32_t proactive_scans;    /* proactive_age in scans */
    double promotion_budget;     /* % of the working set per minute, unless the guest's metadata says */
    double max_cpu;              /* % of one core */
    uint64_t max_swap_out;       /* bytes per second */
    protect_ledger *pl;          /* the working-set protection we write, recorded */
    /* the main loop's */
    int64_t next_scan_ms;
    /* shared with the round thread, under lock */
    GMutex lock;
    GCond cond;
    GThread *thread;
    round_job *job;              /* handed over, not yet taken */
    bool busy, stop;
    bool held;                   /* paused: a round in flight writes nothing more (no pageouts, probes, limits) */
    uint64_t scans, scan_errors, paged_out_bytes, proactive_bytes, idle_skips, busy_skips;
    double cpu_seconds, last_round_seconds;
    double source_cpu_seconds;   /* the source's outside this process, sampled by the round thread */
    /* the round thread's */
    uint64_t rounds;
    bool warned_no_swap;
    char last_error[256];
};


/* The round thread's CPU time so far, seconds. */
double cpu_now(void);
/* Pause after a step that took the CPU since cpu_before, so that the
 * round stays within max_cpu of one core.  false when the daemon stops. */
bool pace(host_swap *hs, double cpu_before);
/* Paused: nothing more is written. */
bool writes_held(host_swap *hs);
void guest_close(hswap_guest *h);
/* p (its SLO and the time filled in here) becomes what /metrics and
 * balancerctl show of h. */
void publish_stats(hswap_guest *h, host_swap_guest_stats *p);
/* What the host (and each NUMA node) is short of: reclaim_plan_wants. */
size_t round_wants(const host_swap_round *r, uint64_t balloon_reclaim, reclaim_want *wants);

/* The memcg source (memcg_round.c): a round that reclaims through each
 * guest's own memory cgroup instead of scanning its RAM. */
void memcg_run_round(host_swap *hs, round_job *j);

#endif

/*
 * The policy interface: pure functions from a snapshot of host and guest
 * state to balloon targets.  No I/O happens here, so every policy is
 * unit-tested on hand-made snapshots (tests/unit/check_policies.c).
 *
 * Data flow: collectors -> per-guest state (balancer/) -> policy_input ->
 * policy->decide() -> policy_output -> actuators (balancer/).
 */
#ifndef MEMBAL_POLICY_H
#define MEMBAL_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policies/split_params.h"
#include "policies/vm_policy.h"

#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

/* One guest as the policy sees it.  Byte values from the guest have
 * already been clamped by the state layer (0 <= x <= actual_bytes). */
typedef struct {
    const char *name;
    const char *uuid;
    vm_policy policy;          /* effective per-VM policy (metadata or defaults) */
    uint64_t max_bytes;        /* domain maximum (host truth): hard ceiling */
    uint64_t actual_bytes;     /* current balloon size (host truth) */
    uint64_t floor_bytes;      /* resolved floor: policy min or the default */
    uint64_t ceiling_bytes;    /* resolved ceiling: min(policy max, max_bytes) */

    bool stats_valid;          /* guest stats fresh enough to judge */
    bool stats_fresh;          /* ... and a report the guest made since the last tick */
    uint64_t free_bytes;       /* guest MemFree ("unused") */
    uint64_t available_bytes;  /* guest MemAvailable */
    uint64_t cache_bytes;      /* guest page cache ("disk_caches": Cached, Shmem included) */
    uint64_t reclaimable_cache_bytes; /* the part of it the guest can drop: not Shmem (tmpfs, SysV
                                * and POSIX shared memory -- a database's shared buffers), which
                                * is swap-backed and which MemAvailable leaves out; what the
                                * cache tiers and the streaming verdict count */
    double swap_in_bps;        /* rates over the reports of the last GUEST_RATE_WINDOW_S or more (core/guest.h) */
    double swap_out_bps;
    double major_faults_ps;
    bool oom_killed;           /* its own OOM killer ran since its last report (the guest's balloon
                                * statistics, QEMU 9.2+ with a Linux 6.12+ guest) */
    double alloc_stalls_ps;    /* its allocations that stalled in direct reclaim, per second (same
                                * source); 0 when not reported */
    uint64_t used_bytes;       /* used memory: the guest's MemTotal - MemAvailable of one report
                                * (not the host's balloon size, which moves before the guest's
                                * report does), at most actual_bytes */
    double used_growth_bps;    /* how fast used_bytes rises, over as long; < 0 falls */
    double disk_read_bps;      /* the guest's disk reads as the host measures them; < 0 unknown */
    double host_faults_ps;     /* its QEMU's major faults per second (host swap-ins of its memory),
                                * as the host measures them; < 0 unknown */
    int free_page_reporting;   /* its balloon hands free memory back in 2 MiB blocks (QEMU
                                * free-page-reporting=on): 1 yes, 0 no, -1 unknown */
    int free_page_reporting_used; /* ... and the guest's balloon driver took it: 1 yes, 0 no,
                                * -1 unknown */
    int deflate_on_oom;        /* its balloon deflates when the guest runs out of memory (QEMU
                                * deflate-on-oom, libvirt autodeflate): 1 yes, 0 no, -1 unknown */
    int64_t host_rss_bytes;    /* what its QEMU has touched (resident + swapped), as the host
                                * measures it; < 0 unknown */
    int64_t host_ws_bytes;     /* its working set as host reclaim measures it: resident guest RAM
                                * accessed within the cold age; < 0 unknown (host reclaim off) */
    uint64_t pending_target_bytes; /* a balloon target asked for and not reached yet; 0: none */
    bool rebooted;             /* its machine was reset (a reboot) since the last tick: it boots again,
                                * at whatever size its balloon kept (QEMU keeps it across a reset) */
    uint64_t self_deflated_bytes;  /* the guest grew its balloon on its own since the last tick
                                    * (virtio-balloon deflate-on-oom): its OOM, not to be fought */

    /* in-guest agent (untrusted hints; see guest-agent/PROTOCOL.md) */
    bool agent_fresh;          /* a recent report exists */
    double agent_refault_ps;   /* workingset refaults (anon + file), pages/s */
    double agent_refault_file_ps; /* file pages evicted and read again soon (workingset_refault_file) ... */
    double agent_steal_file_ps;   /* ... against file pages its kernel evicted (pgsteal_file), pages/s */
    double agent_psi_some;     /* PSI memory some avg10, % */
    bool agent_hint_streaming;

    /* classification (policies/classify.c), with hysteresis */
    bool thrashing;            /* working set does not fit: protect and grow */
    bool streaming;            /* cache churns without reuse: reclaim first */
    bool filling;              /* reads its disks into free memory: not a donor until settled */
    bool in_need;              /* available memory running out: never a donor, given memory now */
    uint64_t need_bytes;       /* what it needs on top of its balloon to keep its reserve */
    uint64_t peak_used_bytes;  /* decaying peak of used memory: reclaim keeps this plus a reserve */
} guest_view;

typedef struct {
    uint64_t total_bytes;      /* MemTotal */
    uint64_t free_bytes;       /* MemFree */
    uint64_t available_bytes;  /* MemAvailable: what kswapd-like watermarks compare */
    uint64_t cached_bytes;     /* Buffers + Cached (MoM's "free" adds these) */
} host_view;

typedef struct {
    uint64_t min, low, high;   /* bytes of host MemAvailable */
} watermarks;

/* Knobs shared by the policies (config file [policy] group). */
typedef struct {
    double step_percent;        /* max balloon change per tick, % of actual */
    uint64_t step_min_bytes;    /* ... but at least this much */
    double reserve_percent;     /* guest free memory never reclaimed, % of its ceiling (guest_reserve) */
    uint64_t reserve_min_bytes;
    double comfort_percent;     /* a guest with less available than this grows */
    uint64_t min_change_bytes;  /* smaller changes are not worth a balloon op */
    bool trim_streams;          /* split-lru: streaming guests' page cache is taken with the host
                                 * not short too (proactive reclaim of the cheapest tier) */
    split_params split;         /* split-lru's tuned numbers (not in the config file) */
} policy_tunables;

void policy_tunables_default(policy_tunables *t);

typedef struct {
    double now_s;              /* a monotonic clock (policies with their own cadence) */
    host_view host;
    watermarks wm;
    policy_tunables tun;
    size_t n_guests;
    const guest_view *guests;
} policy_input;

/* Why a decision is what it is: an enum, so that tests compare the rule
 * and not its prose; the texts are in policies/reason.c.  The mom
 * variants' reasons come in the same order for each variant. */
typedef enum {
    REASON_NONE, /* nothing (split-lru: no reclaim was found to cost the guest) */
    REASON_STEADY,
    REASON_MODE_OFF,
    REASON_NO_STATS,
    REASON_NO_MEMORY,
    REASON_ABOVE_CEILING,
    REASON_BELOW_FLOOR,
    REASON_REBOOTED,
    REASON_REBOOT_ON_ITS_WAY,
    REASON_FREES_NOTHING,
    REASON_SELF_DEFLATED,
    REASON_COST_THRASHING,
    REASON_COST_NEED,
    REASON_TRIM_SLOWED,
    REASON_CACHE_HOT,
    REASON_THRASHING_AT_CEILING,
    REASON_NEED_AT_CEILING,
    REASON_NEED_UNUSED,
    REASON_THRASHING,
    REASON_NEED,
    REASON_RECLAIM_STREAM, /* the tiers, cheapest first (split-lru's tier order) */
    REASON_RECLAIM_FREE,
    REASON_RECLAIM_CACHE,
    REASON_RECLAIM_ALL,
    REASON_RECLAIM_STREAM_AT_ONCE,
    REASON_RECLAIM_PROBE,
    REASON_HOST_SWAPS,
    REASON_TRIM,
    REASON_COMFORT,
    REASON_OBSERVE_ONLY,
    REASON_MOM_NO_CHANGE,
    REASON_MOM_BETWEEN_RUNS,
    REASON_MOM_GROW,
    REASON_MOM_SHRINK_CRITICAL,
    REASON_MOM_SHRINK,
    REASON_MOM_GUEST_QOS,
    REASON_MOM_VDSM_NO_CHANGE,
    REASON_MOM_VDSM_BETWEEN_RUNS,
    REASON_MOM_VDSM_GROW,
    REASON_MOM_VDSM_SHRINK_CRITICAL,
    REASON_MOM_VDSM_SHRINK,
    REASON_MOM_VDSM_GUEST_QOS,
    REASON_PVE_NO_CHANGE,
    REASON_PVE_BETWEEN_CYCLES,
    REASON_PVE_GROW,
    REASON_PVE_SHRINK,
    REASON_GIVE_BACK, /* balancerctl give-back (core) */
    REASON_COUNT
} decision_reason;

/* Its text; "?" for a value out of range. */
const char *decision_reason_text(decision_reason r);

/* What a guest's page cache is, judged by reuse as mm/workingset.c judges
 * a page by its refault: a stream only with evidence that what it read is
 * not read again; a working set when a take made it read more; neither
 * (and so treated as a working set) until one shows. */
typedef enum { CACHE_UNKNOWN, CACHE_STREAM, CACHE_REUSED, CACHE_VERDICT_COUNT } cache_verdict;
/* The evidence that decided it, strongest first. */
typedef enum {
    EVIDENCE_NONE,
    EVIDENCE_AGENT,      /* its kernel's refaults against its file evictions (the agent) */
    EVIDENCE_REFAULT,    /* a take made it read its disks more (the host's measure) */
    EVIDENCE_NEED,       /* a take put it in need */
    EVIDENCE_THRASHING,  /* a take made it thrash */
    EVIDENCE_PROBE,      /* a take of one step did not raise its reads, as the host measures them */
    EVIDENCE_COUNT
} cache_evidence;
/* For people (explain, the log) ... */
const char *cache_verdict_text(cache_verdict v);
const char *cache_evidence_text(cache_evidence e);
/* ... and for programs (the control socket's JSON): one word each. */
const char *cache_verdict_key(cache_verdict v);
const char *cache_evidence_key(cache_evidence e);

typedef struct {
    uint64_t target_bytes;     /* what the guest's balloon should be set to */
    bool change;               /* target differs enough from actual to act */
    uint64_t headroom_bytes;   /* the free memory the policy leaves the guest above its used memory
                                * (split-lru: its reserve, or more: JUMP_HOLD_S); 0 not said */
    decision_reason reason;
    cache_verdict cache_verdict; /* split-lru: what its page cache is (CACHE_UNKNOWN: not said) ... */
    cache_evidence cache_by;     /* ... by which evidence ... */
    double cache_verdict_s;      /* ... since when (policy_input.now_s), 0 none */
} guest_decision;

typedef struct {
    guest_decision *decisions; /* n_guests entries, caller-allocated */
    bool reclaiming;           /* host between low and high watermark, reclaiming */
    char summary[128];
} policy_output;

typedef struct policy_ops {
    const char *name;
    const char *description;
    /* Per-policy memory across ticks (hysteresis, averages); may be NULL. */
    void *(*state_new)(void);
    void (*state_free)(void *state);
    void (*decide)(const policy_input *in, void *state, policy_output *out);
} policy_ops;

extern const policy_ops policy_split_lru;
extern const policy_ops policy_mom;
extern const policy_ops policy_mom_vdsm;
extern const policy_ops policy_proxmox;
extern const policy_ops policy_none;

/* NULL if unknown. */
const policy_ops *policy_lookup(const char *name);
/* "split-lru, mom, mom-vdsm, proxmox, none" */
const char *policy_names(void);

/* Helpers shared by policies. */

/* The key a policy remembers a guest by: its uuid, or its name when the
 * backend has no uuid for it. */
static inline const char *guest_key_of(const guest_view *g)
{
    return g->uuid && *g->uuid ? g->uuid : g->name ? g->name : "";
}

/* The reserve of free memory a guest keeps beyond its used memory:
 * percent of its whole size (its ceiling), at least min_bytes.  Of its
 * whole size, not of its balloon: a squeezed guest keeps the same room to
 * allocate in before balancerd can answer as a full one (a reserve that
 * shrank with the balloon would be smallest exactly when the guest has
 * least), and the reclaim bound, the need rule and the default floor all
 * follow what the guest uses rather than a share of its size. */
static inline uint64_t guest_reserve(const guest_view *g, double percent, uint64_t min_bytes)
{
    uint64_t size = g->ceiling_bytes ? g->ceiling_bytes : g->actual_bytes;
    uint64_t r = (uint64_t)((double)size * percent / 100.0);
    return r > min_bytes ? r : min_bytes;
}

/* A fixed cadence for baselines that run on their own clock: true when
 * now_s has reached *next_s (less CADENCE_SLACK_S, for timers that fire a
 * little early); *next_s then advances by interval_s, skipping intervals
 * that were missed entirely. */
#define CADENCE_SLACK_S 0.25
bool cadence_due(double *next_s, double interval_s, double now_s);
void decision_set(guest_decision *d, uint64_t actual, uint64_t target, uint64_t min_change,
                  decision_reason reason);

#endif

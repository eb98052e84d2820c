/*
 * split-lru's parts, shared by its files (policies/split_lru.c has the
 * policy's essay and its stages in order; split_tiers.c the reclaim
 * tiers; split_need.c need and its grant; split_trackers.h what it
 * remembers of a guest).  Not for other policies.
 */
#ifndef MEMBAL_SPLIT_LRU_H
#define MEMBAL_SPLIT_LRU_H

#include "policies/guest_table.h"
#include "policies/policy.h"
#include "policies/split_trackers.h"

/* A rebooted guest's size back, held until its balloon has come back to it
 * (its new driver acknowledges it only once loaded): a booting guest is
 * not a donor while its memory is on its way. */
typedef struct {
    uint64_t to;  /* its size back; 0 none ... */
    double at_s;  /* ... since then */
} reboot_hold;

/* What split-lru remembers of one guest across ticks, a tracker a concern. */
typedef struct {
    guest_table_key key;     /* first: the table's */
    bool known;              /* set up by observe_guest */
    read_tracker reads;      /* its disk reads: usual, pace, settling */
    headroom_tracker headroom; /* the largest rise of its used memory */
    frees_nothing_tracker fn;  /* whether its balloon frees host memory */
    experiment exp;          /* the running reclaim's experiment, and what it keeps */
    reuse_tracker reuse;     /* what its cache is: a stream, reused, not known */
    need_credit credit;      /* what it was given on its word and not used yet */
    reboot_hold reboot;
    uint64_t actual_seen;    /* its balloon at the last tick; 0 none */
    double inflated_at_s;    /* when its balloon was last seen coming down; < 0 never */
} split_guest;

typedef struct {
    bool reclaiming;         /* between the low and the high watermark, reclaiming */
    bool was_short;          /* the host has been short (reclaiming) ... */
    double short_at_s;       /* ... last at this time */
    guest_table memory;      /* split_guest */
} split_state;

/* Streamed cache goes before free memory: both cost the guest nothing
 * now, but free memory is a guest's headroom for what it allocates next,
 * and a stream's cache will not be read again.  (In the order of
 * REASON_RECLAIM_STREAM and the three after it.) */
typedef enum { TIER_STREAM_CACHE, TIER_FREE, TIER_CACHE, TIER_ANON, TIER_COUNT } tier;

/* One guest's decision in the making, as the stages pass it on (like
 * vmscan's scan_control, a field a fact). */
typedef struct {
    uint64_t target;
    uint64_t step;        /* max change this tick */
    uint64_t reserve;     /* guest free memory we never take: its headroom */
    uint64_t changed;     /* amount already moved this tick */
    uint64_t tier_taken;  /* taken in the tier being reclaimed */
    bool fixed;           /* decided by a hard rule; no further changes */
    uint64_t keep;        /* learnt: reclaim outside the critical tier leaves this */
    uint64_t keep_backed; /* the part of keep that host-backed evidence proved: honoured even in
                           * the critical tier */
    bool cache_hot;       /* its cache refaulted: not treated as streaming */
    cache_verdict verdict; /* what its cache is (split_reuse.c): only a proven stream is one */
    bool probe_pending;   /* a probe of its cache was taken and not judged yet: no other one ... */
    bool probing;         /* ... and within probe_s of it: nothing more is taken of its cache */
    bool trim_pass;       /* trim_streams is asking (a stream by its read shape: its experiment judges) */
    bool moving;          /* its balloon is still on the way down: not a donor now */
    bool inflated;        /* its balloon on its way down now or within inflate_grace_s: its QEMU's
                           * faults may be the balloon's own (stream_step_raise) */
    uint64_t moving_to;   /* where it is going */
    bool settling;        /* not settled (new, rebooted or its cache just filled): not a donor yet */
    bool frees_nothing;   /* its balloon frees nothing on the host */
    decision_reason learnt; /* set when this tick found that a reclaim cost it */
    bool grew;            /* given memory for need this tick: the move is exact */
    bool trimmed;         /* its stream cache taken with the host not short (trim_streams) */
    bool trim_cost;       /* a trim cost it and it streams still: not trimmed */
    bool trimmed_lately;  /* trimmed within keep_s: not grown for comfort */
    bool watched;         /* watched pace_watch_s: its usual reads are known */
    uint64_t credit;      /* what its word or swap-ins may be given now (need_allowance) */
    uint64_t touched;     /* what its QEMU touched since the last tick (need_allowance) */
    uint64_t on_word;     /* given on its word or swap-ins this tick */
    decision_reason reason;
} work;

/* The host's account this tick: its available memory with balloons on
 * their way counted as arrived (signed: growth already asked for and not
 * yet funded is a debt), and where it stands against the watermarks. */
typedef struct {
    int64_t avail_s;
    uint64_t avail;    /* avail_s, at least 0 */
    uint64_t free_now; /* what it has now, less the growth on its way: balloons on their way
                        * down not counted (a grant spends only this: grow_for_comfort) */
    bool critical;     /* below min */
    bool relieved;     /* short within pace_watch_s */
    bool short_lately; /* short within experiment_s: no comfort growth yet */
} host_account;

static inline uint64_t pct(uint64_t v, double percent)
{
    return (uint64_t)((double)v * percent / 100.0);
}

/* The most a guest's balloon moves in a tick: step_percent of it, at
 * least step_min. */
uint64_t step_of(const policy_tunables *tun, const guest_view *g);
/* Will this guest be able to give (now, or once its balloon arrived)? */
bool is_donor(const guest_view *g, const work *w);
/* May this guest's balloon be moved by the tiers and the growth? */
bool is_adjustable(const guest_view *g, const work *w);
/* How much g could give in tier t, before shares; with_step limits it to
 * what is left of this tick's step. */
uint64_t tier_supply(const guest_view *g, const work *w, tier t, bool with_step);

/* Stage 3 (split_need.c): need first. */
uint64_t grant_need(const policy_input *in, work *ws);
/* Stage 4 (split_tiers.c): reclaim to the high watermark. */
uint64_t reclaim_to_high(const policy_input *in, const split_state *st, work *ws, const host_account *h,
                         uint64_t grown);
/* Stage 5 (split_tiers.c): proactive, trim_streams. */
void trim_streams(const policy_input *in, work *ws);

#endif

/*
 * Per-guest classification with hysteresis, the guest-granularity analogue
 * of mm/workingset.c: a guest whose working set does not fit (swap-in and
 * major faults) is "thrashing" and protected; a guest whose memory is
 * mostly page cache with no fault cost, whose disks the host sees read all
 * the time, is "streaming" and gives first.
 *
 * A guest without swap cannot thrash: it shows need by its available
 * memory running out (used memory rising toward its balloon).  Such a guest
 * is "in need" for a few samples: it is never a donor and is given memory
 * at once.  The decaying peak of its used memory is what reclaim leaves it.
 *
 * The in-guest agent is untrusted: it may only withdraw a thrashing
 * verdict (its refaults and PSI must confirm what the balloon stats show)
 * or add a streaming one.  Either way a lying agent can only make its own
 * guest give more, never take memory from others.
 */
#ifndef MEMBAL_CLASSIFY_H
#define MEMBAL_CLASSIFY_H

#include "policies/policy.h"

typedef struct {
    double swap_in_bps_enter;     /* swap-in rate that signals thrashing */
    double major_faults_ps_enter; /* major fault rate that signals thrashing */
    unsigned quiet_ticks_exit;    /* quiet samples before leaving thrashing */
    double stream_cache_fraction; /* cache share of actual that may stream */
    double stream_read_bps;       /* host-measured disk reads a stream has at least */
    double fill_free_fraction;    /* a reading guest with more free memory than this share of
                                   * actual is still filling its cache */
    double agent_refault_ps;      /* agent refault rate that confirms thrashing */
    double agent_psi_some;        /* agent PSI some avg10 (%) that confirms it */
    /* need: a guest whose available memory runs out within the horizon */
    double need_reserve_percent;  /* available memory a guest keeps, % of its ceiling (guest_reserve) ... */
    uint64_t need_reserve_min;    /* ... but at least this ([policy] reserve_*: the same
                                   * reserve reclaim leaves) */
    double need_horizon_s;        /* how far ahead its used-memory growth is projected */
    unsigned need_quiet_exit;     /* samples without need before the verdict ends */
    double peak_decay;            /* per sample: the peak of used memory decays to this fraction */
} classify_params;

/* The defaults (classify_params_default) count reports at a 2 s stats
 * period; for another period, the counts that give the same times:
 * thrashing ends after 12 s quiet, need after 6 s, the peak of used memory
 * halves in about 69 s. */
void classify_params_for_period(classify_params *p, double period_s);

typedef struct {
    bool thrashing;
    bool streaming;
    bool filling;                 /* reading its disks into a growing cache: not settled */
    uint64_t cache_prev;          /* its cache at the previous sample (0 before the first) */
    unsigned quiet;               /* consecutive quiet samples while thrashing */
    bool need;
    const char *need_why;         /* what showed need on the last sample that did (a static string) */
    unsigned need_quiet;          /* consecutive samples without need while in need */
    uint64_t need_bytes;
    double peak_used;             /* decaying peak of actual - available */
} classify_state;

void classify_params_default(classify_params *p);
/* Update st from one fresh sample of g (rates and sizes must be set). */
void classify_update(classify_state *st, const guest_view *g, const classify_params *p);

#endif

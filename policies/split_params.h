/*
 * split-lru's tuned numbers, in one table (as MoM's balloon.rules keeps
 * its constants in a defvar block): each field with one line of reason;
 * the evidence for each value is in policies/README.md ("Parameters").
 * split_params_default() gives the shipped values; tests and the
 * simulator vary them through policy_tunables.split.
 */
#ifndef MEMBAL_SPLIT_PARAMS_H
#define MEMBAL_SPLIT_PARAMS_H

#include <stdint.h>

typedef struct {
    /* the experiment: every reclaim watches what it cost */
    double experiment_s;      /* a reclaim's cost is watched this long */
    double keep_s;            /* what a costly reclaim took is left alone this long */
    double refault_min_bps;   /* disk reads that count as a refault ... */
    double refault_factor;    /* ... on top of this multiple of its reads before */
    /* reuse: a stream only with evidence (split_reuse.c) */
    double probe_s;           /* a probe's read response is judged after this long (a few reports) */
    double probe_reuse_share; /* reads beyond its usual of this share of what the probe took: reused */
    double agent_steal_min_ps; /* the agent's verdict counts once its kernel evicts this many file
                                * pages/s ... */
    double agent_stream_share; /* ... and refaults under this share of them is a stream ... */
    double agent_reuse_share;  /* ... and this share or more is reuse */
    /* a reader's pace: the fastest it read lately, a stream's "before" */
    double pace_half_life_s;  /* the pace is remembered, halving this often */
    double host_bound_fps;    /* its QEMU's major faults/s (1 MiB/s of host swap-in) that mean the
                               * host swaps it: its reads are not its own pace then */
    double pace_watch_s;      /* a reader's pace is known once watched this long */
    /* settling: new, rebooted or just filled, a guest gives nothing yet */
    unsigned settle_reports;  /* ... until it made this many fresh reports (two tell a warm-up
                               * from a stream, one more sees it go on) ... */
    double settle_s;          /* ... and, after filling its cache, over this long (a warm-up's
                               * reads tail off for seconds after its cache stops growing) */
    /* trim_streams: a proactive take is for host room only */
    double slowed_after_s;    /* a trimmed stream's reads are judged this long after the trim ... */
    double slowed_fraction;   /* ... and below this share of what they were, the trim slowed it */
    /* reboot */
    uint64_t reboot_ack_bytes; /* a rebooted guest's size back is this much short of its size, so
                                * its new balloon driver acknowledges (and reports) something */
    double reboot_hold_s;     /* that size is held until its balloon is there, at most this long */
    /* headroom: the rise a guest showed is provided for in advance */
    double jump_hold_s;       /* the largest rise is kept one to two of these windows (what comes
                               * back hourly or after an idle spell still finds it) */
    double jump_window_s;     /* a rise is what used memory grew within this long: faster than
                               * need is seen and answered (a report and a tick) */
    /* a balloon on its way */
    double inflate_grace_s;   /* a balloon seen coming down counts as inflating this long after */
    /* a balloon that frees nothing on the host (its memory all resident) */
    uint64_t frees_nothing_min_bytes; /* only a take of this much beyond its free memory judges ... */
    double fn_baseline_s;     /* ... against a baseline at most this old (QEMU's own memory grows) */
} split_params;

void split_params_default(split_params *p);

#endif

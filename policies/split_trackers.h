/*
 * What split-lru remembers of a guest across ticks, one tracker a concern
 * (policies/split_lru.c explains the policy they serve).  Each tracker is
 * observed once a tick, before any rule reads it, and is tested on its
 * own (tests/unit/check_split_trackers.c).  All are plain data: a zeroed
 * tracker is a new guest's, set up by its *_init.
 */
#ifndef MEMBAL_SPLIT_TRACKERS_H
#define MEMBAL_SPLIT_TRACKERS_H

#include <stdbool.h>
#include <stdint.h>

#include "policies/policy.h"

/* --- read pace and settling (split_reads.c) --------------------------
 * The guest's disk reads as the host measures them: averaged over about
 * experiment_s (a reclaim's "before", over as long as its cost is watched
 * after), its pace (the fastest it read lately, a streamer's "before"),
 * and whether it settled since it appeared, rebooted or last filled its
 * cache. */
typedef struct {
    double avg_bps;         /* its disk reads, averaged over ~experiment_s; < 0 unknown */
    double pace_bps;        /* the fastest it was seen reading (a tick), decaying; filling included */
    double pace_at_s;       /* when pace_bps was last updated */
    double watched_since_s; /* when it was first seen */
    double unwaited_s;      /* how long it was seen with its QEMU not waiting for host swap
                             * (its pace is its own once this reaches pace_watch_s) */
    double settle_from_s;   /* when it last filled its cache (settle_s) */
    unsigned settled;       /* its fresh reports since it appeared, rebooted or last filled its
                             * cache (capped at settle_reports) */
    double seen_s;          /* when it was last observed */
} read_tracker;

void reads_init(read_tracker *r, const split_params *p, const guest_view *g, double now);
void reads_observe(read_tracker *r, const split_params *p, const guest_view *g, double now);
/* Not settled yet: new, rebooted or its cache just filled. */
bool reads_settling(const read_tracker *r, const split_params *p, double now);
/* Watched pace_watch_s: its usual reads are known. */
bool reads_watched(const read_tracker *r, const split_params *p, double now);

/* --- headroom (split_headroom.c) -------------------------------------
 * The largest rise of its used memory within jump_window_s, kept for one
 * to two jump_hold_s windows: the allocation it has shown it makes. */
#define USED_SLOTS 8 /* reports held to find the rise within jump_window_s */
typedef struct {
    uint64_t used_v[USED_SLOTS]; /* its used memory at its last valid reports ... */
    double used_at[USED_SLOTS];  /* ... when */
    unsigned used_n, used_head;  /* reports held (0: none, or a gap in its reports), the newest */
    uint64_t jump;               /* the most its used memory rose within jump_window_s in this
                                  * jump_hold_s window ... */
    uint64_t jump_prev;          /* ... and in the one before */
    double window_s;             /* when this window began */
    uint64_t last_rise;          /* the rise within jump_window_s at the last valid report */
} headroom_tracker;

void headroom_init(headroom_tracker *h, double now);
void headroom_observe(headroom_tracker *h, const split_params *p, const guest_view *g, double now);
/* The free memory its balloon leaves it above its used memory: reserve, or
 * its own habits when larger (doubled after its OOM killer ran). */
uint64_t headroom_of(headroom_tracker *h, const guest_view *g, uint64_t reserve);

/* --- a balloon that frees nothing (split_frees_nothing.c) ------------ */
typedef struct {
    bool frees_nothing; /* its balloon was seen to free nothing on the host ... */
    double since_s;     /* ... since then */
    unsigned strikes;   /* takes in a row after which its QEMU did not shrink */
    uint64_t actual;    /* the baseline: its balloon, its free memory and ... */
    uint64_t free;
    int64_t rss;        /* ... what its QEMU had touched (< 0 none) ... */
    double at_s;        /* ... taken then */
} frees_nothing_tracker;

void frees_nothing_init(frees_nothing_tracker *f);
void frees_nothing_observe(frees_nothing_tracker *f, const split_params *p, const guest_view *g, double now);

/* --- the experiment and what it keeps (split_experiment.c) -----------
 * Every reclaim is an experiment (mm/workingset.c's shadow entries, at
 * guest granularity): a guest that shows need, thrashes or reads its disks
 * more than before within experiment_s gets the memory back and keeps it
 * for keep_s. */
typedef struct {
    double shrunk_at_s;     /* when it was last reclaimed from; 0 never */
    uint64_t shrunk_from;   /* its balloon before that reclaim */
    uint64_t free_before;   /* its free memory before that reclaim */
    double disk_before_bps; /* its disk reads before that reclaim (< 0 unknown) ... */
    bool reads_prove;       /* ... and whether its disk reads can prove what that reclaim cost */
    bool pace_own;          /* ... and whether its pace was its own then */
    bool proactive;         /* that reclaim was proactive (the host not short) */
    double trim_usual_bps;  /* its averaged disk reads when that proactive reclaim began (< 0
                             * unknown) ... */
    double trim_began_s;    /* ... and when */
    double trimmed_at_s;    /* when trim_streams last took from it; 0 never */
    bool trim_cost;         /* a trim cost it: not trimmed again while it streams */
    uint64_t keep_bytes;    /* reclaim leaves it at least this ... */
    double keep_until_s;    /* ... until then */
    uint64_t keep_backed;   /* the part of keep_bytes host-measured evidence proved (thrashing,
                             * a cache refault: its disk reads; a need grant its QEMU touched) */
    bool cache_hot;         /* its page cache refaulted: not streaming */
} experiment;

/* Did the last reclaim cost it?  The reason it did (and what it keeps is
 * raised), REASON_NONE when not, or not known yet. */
decision_reason experiment_feedback(experiment *e, const split_params *p, const read_tracker *r,
                                    const guest_view *g, uint64_t reserve, double now);
/* A refault the probe found (split_reuse.c): as a refault the experiment
 * finds, the take given back and kept.  REASON_CACHE_HOT, or REASON_NONE
 * with no experiment running. */
decision_reason experiment_refault(experiment *e, const split_params *p, const guest_view *g, uint64_t reserve,
                                   double now);
/* One whose reads could not prove a cost when it began can, once its
 * QEMU no longer waits for host swap. */
void experiment_ask_again(experiment *e, const split_params *p, const guest_view *g, double now);
/* A reclaim was decided: begin an experiment, or extend the running one. */
void experiment_note_take(experiment *e, const split_params *p, const read_tracker *r, const guest_view *g,
                          bool trimmed, bool relieved, double now);
/* Need was granted up to target: kept as given-back memory is. */
void experiment_keep_grant(experiment *e, const split_params *p, const guest_view *g, uint64_t target,
                           uint64_t touched, double now);

/* --- reuse: what its cache is (split_reuse.c) ------------------------
 * A stream only with evidence that its cache is not read again, strongest
 * first: a cost a take showed (a refault, need, thrashing: reused), its
 * kernel's own refault rate when its agent reports one, and the probe: a
 * first take of one step from a guest that looks like a stream, judged
 * after probe_s by how much more it read than it usually does, against
 * what the take removed.  Until then it is treated as a working set. */
typedef struct {
    cache_verdict verdict;
    cache_evidence by;
    double at_s;          /* when the verdict came; 0 none */
    double unshaped_s;    /* since when it has not looked like a stream; 0 it does */
    /* the probe, while no verdict */
    double probe_at_s;    /* its take; 0 none */
    uint64_t probe_from;  /* its balloon before the take */
    double probe_usual_bps; /* its usual reads before (its average; 0 unknown) ... */
    double probe_pace_bps;  /* ... and what a refault is judged against: its pace (the fastest it
                             * read lately: the relief speeds a reader up), or the experiment's
                             * "before", if higher */
    double probe_read;    /* bytes it read since, as the host measured them ... */
    double probe_seen_s;  /* ... up to this observation */
    bool probe_waited;    /* its QEMU waited for host swap meanwhile: no stream proven ... */
    bool probe_relieved;  /* ... and then stopped waiting: no reuse proven either (relieved, a
                           * reader reads faster whatever it lost) */
} reuse_tracker;

/* After the experiment's feedback (learnt: what it found this tick).
 * true when the probe found its refault now (experiment_refault). */
bool reuse_observe(reuse_tracker *r, const split_params *p, const guest_view *g, decision_reason learnt, double now);
/* A probe was taken and has not been judged: no other probe is taken ... */
bool reuse_probe_pending(const reuse_tracker *r);
/* ... and within probe_s of it, nothing more of its cache. */
bool reuse_probing(const reuse_tracker *r, const split_params *p, double now);
/* Something was taken from it: a stream-shaped guest of no verdict is
 * probed (r: its reads; e: the experiment the take began). */
void reuse_note_take(reuse_tracker *r, const split_params *p, const read_tracker *reads, const experiment *e,
                     const guest_view *g, double now);

/* --- need credit (split_need.c) ------------------------------------- */
typedef struct {
    uint64_t unused;  /* given on its word or its swap-ins and not yet seen used */
    int64_t rss_seen; /* what its QEMU had touched last tick (resident + swapped); < 0 unknown */
} need_credit;

/* What its word or swap-ins may be given now; *touched_out what its QEMU
 * touched since the last tick. */
uint64_t need_allowance(need_credit *c, const guest_view *g, uint64_t step, uint64_t *touched_out);

/* Memory of its balloon its QEMU never touched (nor touched and handed
 * back: free page reporting): free in the guest, not resident on the
 * host.  0 when the host does not measure it. */
uint64_t untouched_of(const guest_view *g);

static inline uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static inline double max_d(double a, double b) { return a > b ? a : b; }

#endif

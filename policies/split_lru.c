/*
 * split-lru: the default policy.  Host memory is balanced the way kswapd
 * and the split LRU balance pages (mm/vmscan.c), one level up:
 *
 *  - watermarks with hysteresis: reclaim starts when host MemAvailable falls
 *    below low and goes on until it is back above high; between ticks
 *    nothing runs;
 *  - reclaim order, cheapest first (like shrinking the inactive file list
 *    before touching anon): page cache of streaming guests, then guests'
 *    free memory (their headroom), then half the cache of other guests,
 *    and only when the host is below min (critical) all the cache of
 *    unprotected guests; never anyone's anonymous memory (below that the
 *    host kernel swaps, as with no balancer); a guest still filling its
 *    cache from disk gives nothing until it settles;
 *  - within a tier, guests give in proportion to what they can give divided
 *    by their shares;
 *  - a thrashing guest is never a donor and grows first (working-set
 *    protection); with the host above high, and not short for EXPERIMENT_S,
 *    guests short of available memory grow from the surplus above high,
 *    never eating into it.
 *
 * Every change is bounded per tick; reclaim stops at high and growth only
 * spends what lies above high, once that plenty has lasted: so the two do
 * not chase each other, even while a third guest (a stream filling its
 * cache) eats whatever the reclaim frees.
 *
 * With trim_streams (proactive reclaim of the cheapest tier, as Meta's TMO
 * reclaims file pages before it needs to), a streaming guest watched for
 * PACE_WATCH_S gives its page cache with the host not short too, down to
 * the same bound, a step a tick; it is not grown for comfort for KEEP_S
 * after (that would refill the cache to be trimmed again).  Its
 * experiment is stricter than one taken under pressure: with the host not
 * short (and not short for PACE_WATCH_S) nothing relieved speeds a stream
 * up, so its reads are measured against its usual rate, not its pace; and
 * a trim is for host room only, so reads that fall by a quarter (the trim
 * slowed the stream) are a cost too.  A guest a trim cost is not trimmed
 * again while it streams.
 *
 * Need comes first (do no harm): a guest in need (policies/classify.c: its
 * available memory runs out, or it thrashes) is never a donor and is given
 * what it needs in the same tick, up to its size, whatever the
 * watermarks and the host's free memory say (bounded by its use, not by
 * the host's supply: grant_need); the others' cheap tiers pay for it
 * (never anon).  Reclaim leaves every guest its decaying peak of used
 * memory plus its headroom (the reserve, or the largest rise of its used
 * memory within JUMP_WINDOW_S in the last JUMP_HOLD_S), and is an experiment: a
 * guest that shows need, or whose disks read more than before (its page
 * cache was its working set: the host-side analogue of a file refault,
 * mm/workingset.c; for a reader, more than its pace, and only a pace of
 * its own: experiment_before), within EXPERIMENT_S of a reclaim gets the
 * memory back and keeps it for KEEP_S.  A balloon still moving counts as
 * where it is going.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/guest_table.h"
#include "policies/policy.h"

#define EXPERIMENT_S 30.0   /* a reclaim's cost is watched this long */
#define KEEP_S 300.0        /* what a costly reclaim took is left alone this long */
#define REFAULT_MIN_BPS (2.0 * 1024 * 1024) /* disk reads that count as a refault ... */
#define REFAULT_FACTOR 2.0                  /* ... on top of this multiple of before */
#define PACE_HALF_LIFE_S 300.0 /* a guest's fastest disk reads are remembered, halving this often */
#define HOST_BOUND_FPS 256.0   /* its QEMU's major faults/s (1 MiB/s of host swap-in) that set its pace */
#define PACE_WATCH_S 60.0      /* a reader's pace is known once it has been watched this long */
#define MAX_TRACKED 65536
#define SETTLE_REPORTS 3    /* new, rebooted, or after filling its cache, a guest gives nothing
                             * until it made this many fresh reports (what takes two to tell a
                             * warm-up from a stream, and one to see it go on) ... */
#define SETTLE_S 10.0       /* ... and after filling its cache, over at least this long: a warm-up's
                             * reads tail off for seconds after its cache stops growing, and its
                             * usual reads (a reclaim's "before") must not hold them (check_need's adversary at a 2 s tick:
                             * honest guests lost 1714 ticks without it, 1507 with) */
#define SLOWED_AFTER_S 10.0 /* a trimmed stream's reads are judged this long after the trim began ... */
#define SLOWED_FRACTION 0.75 /* ... and below this share of what they were, the trim slowed it */
/* A rebooted guest's size back is this much short of its whole size: QEMU
 * (7.2) keeps the balloon size the guest's driver last acknowledged across
 * a reset, and a driver that loads with nothing to do acknowledges
 * nothing, so at exactly its whole size the host would read the old
 * squeeze until the next move; one MiB to inflate makes the driver report. */
#define REBOOT_ACK_BYTES MIB
/* ... and that size is held until its balloon has come back to it (the new
 * driver acknowledges it only once loaded): a booting guest is not a donor
 * while its memory is still on its way; at most this long, for a guest
 * whose driver never loads */
#define REBOOT_HOLD_S 60.0
/* A guest's largest rise of used memory within JUMP_WINDOW_S is headroom
 * its balloon leaves it for one to two of these windows: an allocation
 * faster than need is seen and answered (a report and a tick, up to 3 s
 * at the shipped 2 s stats period and 1 s tick) cannot be answered in
 * time, so the one it has shown it makes (a job, a compaction, a cron that
 * comes back) is provided for in advance.  An hour, not minutes: what
 * comes back hourly or after an idle spell must still find it */
#define JUMP_HOLD_S 3600.0
#define JUMP_WINDOW_S 5.0
#define USED_SLOTS 8 /* reports held to find the rise within JUMP_WINDOW_S */
/* A balloon seen coming down counts as inflating this long after (a slow
 * inflation of a big guest moves less than a balloon operation a tick) */
#define INFLATE_GRACE_S 5.0

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* The smallest balloon change worth an operation for g; a balloon this
 * close to its target counts as arrived. */
static uint64_t min_change_of(const policy_tunables *tun, const guest_view *g)
{
    return max_u64(tun->min_change_bytes, g->actual_bytes / 200);
}

/* What reclaim learnt about one guest (mm/workingset.c's shadow entries,
 * at guest granularity). */
typedef struct {
    guest_table_key key;    /* first: the table's */
    double shrunk_at_s;     /* when it was last reclaimed from; 0 never */
    uint64_t shrunk_from;   /* its balloon before that reclaim */
    double disk_before_bps; /* its disk reads before that reclaim (< 0 unknown); set with shrunk_at_s */
    bool reads_prove;       /* ... and whether its disk reads can prove what that reclaim cost */
    bool proactive;         /* ... and whether that reclaim was proactive (the host not short) */
    double trim_usual_bps;  /* its averaged disk reads when that proactive reclaim began (< 0 unknown) ... */
    double trim_began_s;    /* ... and when */
    double trimmed_at_s;    /* when trim_streams last took from it; 0 never */
    bool trim_cost;         /* a trim cost it: not trimmed again while it streams */
    uint64_t free_before;   /* its free memory before that reclaim */
    uint64_t keep_bytes;    /* reclaim leaves it at least this ... */
    double keep_until_s;    /* ... until then */
    bool cache_hot;         /* its page cache refaulted: not streaming */
    uint64_t keep_backed;   /* the part of keep_bytes that host-measured evidence proved
                             * (thrashing, a cache refault: its disk reads; a need grant its
                             * QEMU touched) */
    uint64_t unused;        /* given on its word or its swap-ins and not yet seen used (need_allowance) */
    int64_t rss_seen;       /* what its QEMU had touched last tick (resident + swapped); < 0 unknown */
    bool known;             /* set up by memory_observe */
    double disk_avg_bps;    /* its disk reads, averaged over ~EXPERIMENT_S; < 0 unknown */
    double disk_pace_bps;   /* the fastest it was seen reading (a tick), decaying; filling included */
    double disk_pace_at_s;  /* when disk_pace_bps was last updated */
    double watched_since_s; /* when it was first seen */
    double unwaited_s;      /* how long it was seen with its QEMU not waiting for host swap (its
                             * pace is its own once this reaches PACE_WATCH_S) ... */
    bool pace_own;          /* ... as it stood when the running experiment's "before" was taken */
    double settle_from_s;   /* when it last filled its cache (SETTLE_S) ... */
    unsigned settled;       /* its fresh reports since it appeared, rebooted or last filled its cache
                             * (capped at SETTLE_REPORTS) */
    double seen_s;          /* when it was last observed */
    uint64_t reboot_to;     /* rebooted: its size back, held until its balloon is there; 0 none ... */
    double reboot_at_s;     /* ... since then */
    uint64_t used_v[USED_SLOTS]; /* its used memory at its last valid reports ... */
    double used_at[USED_SLOTS];  /* ... when */
    unsigned used_n, used_head;  /* reports held (0: none, or a gap in its reports), the newest */
    uint64_t jump;          /* the most its used memory rose within JUMP_WINDOW_S in this
                             * JUMP_HOLD_S window ... */
    uint64_t jump_prev;     /* ... and in the one before (headroom is the larger: a rise is kept
                             * one to two windows) */
    double jump_window_s;   /* when this window began */
    uint64_t last_rise;     /* its used memory's rise within JUMP_WINDOW_S at the last valid report */
    bool frees_nothing;     /* its balloon was seen to free nothing on the host (note_frees_nothing) ... */
    double frees_nothing_at_s; /* ... when */
    unsigned fn_strikes;    /* takes in a row after which its QEMU did not shrink */
    uint64_t fn_actual;     /* its balloon, its free memory and ... */
    uint64_t fn_free;
    int64_t fn_rss;         /* ... what its QEMU had touched at the baseline (< 0 none) ... */
    double fn_at_s;         /* ... taken then */
    uint64_t actual_seen;   /* its balloon at the last tick; 0 none */
    double inflated_at_s;   /* when its balloon was last seen coming down; < 0 never */
} split_guest;

typedef struct {
    bool reclaiming;
    bool was_short;         /* the host has been short (reclaiming) ... */
    double short_at_s;      /* ... last at this time */
    guest_table memory;     /* split_guest */
} split_state;

/* Streamed cache goes before free memory: both cost the guest nothing
 * now, but free memory is a guest's headroom for what it allocates next,
 * and a stream's cache will not be read again. */
typedef enum { TIER_STREAM_CACHE, TIER_FREE, TIER_CACHE, TIER_ANON, TIER_COUNT } tier;

static const char *const tier_reason[TIER_COUNT] = {
    "reclaim: streaming page cache",
    "reclaim: guest free memory",
    "reclaim: page cache",
    "reclaim: all cache (host critical)",
};

typedef struct {
    uint64_t target;
    uint64_t step;     /* max change this tick */
    uint64_t reserve;  /* guest free memory we never take */
    uint64_t changed;  /* amount already moved this tick */
    uint64_t tier_taken; /* taken in the tier being reclaimed */
    bool fixed;        /* decided by a hard rule; no further changes */
    uint64_t keep;     /* learnt: reclaim outside the critical tier leaves this */
    bool cache_hot;    /* its cache refaulted: not treated as streaming */
    bool moving;       /* its balloon is still on the way down: not a donor now */
    bool inflated;     /* its balloon on its way down now or within INFLATE_GRACE_S: its QEMU's faults
                        * may be the balloon's own (stream_step_raise) */
    uint64_t moving_to; /* where it is going */
    bool settling;     /* not settled (new, rebooted or its cache just filled): not a donor yet */
    bool frees_nothing; /* its balloon frees nothing on the host (split_guest's) */
    const char *learnt; /* set when this tick found that a reclaim cost it */
    uint64_t keep_backed; /* the part of keep that host-backed evidence proved:
                        * honoured even in the critical tier */
    bool grew;         /* given memory for need this tick: the move is exact */
    bool trimmed;      /* its stream cache taken with the host not short (trim_streams) */
    bool trim_cost;    /* a trim cost it and it streams still: not trimmed */
    bool trimmed_lately; /* trimmed within KEEP_S: not grown for comfort */
    bool watched;      /* watched PACE_WATCH_S: its usual reads are known */
    uint64_t credit;   /* what its word or swap-ins may be given now (need_allowance) */
    uint64_t touched;  /* what its QEMU touched since the last tick (need_allowance) */
    uint64_t on_word;  /* given on its word or swap-ins this tick */
    const char *reason;
} work;

static void *split_state_new(void)
{
    split_state *s = calloc(1, sizeof(split_state));
    if (s)
        guest_table_init(&s->memory, sizeof(split_guest), MAX_TRACKED);
    return s;
}

static void split_state_free(void *p)
{
    split_state *s = p;
    if (s)
        guest_table_clear(&s->memory);
    free(s);
}

/* Not settled yet: new, rebooted or its cache just filled (SETTLE_*). */
static bool settling(const split_guest *m, double now)
{
    return m->settled < SETTLE_REPORTS || now - m->settle_from_s < SETTLE_S;
}

/* Its used memory's rise within JUMP_WINDOW_S up to this report: above
 * the least it used since the newest report at least that old (at any
 * tick and stats period, what it allocated faster than need is answered).
 * Records the report. */
static uint64_t rise_within(split_guest *m, uint64_t used, double now)
{
    uint64_t least = used;
    for (unsigned k = 0; k < m->used_n; k++) {
        unsigned i = (m->used_head + USED_SLOTS - k) % USED_SLOTS;
        least = min_u64(least, m->used_v[i]);
        if (now - m->used_at[i] >= JUMP_WINDOW_S)
            break;
    }
    m->used_head = (m->used_head + 1) % USED_SLOTS;
    m->used_v[m->used_head] = used;
    m->used_at[m->used_head] = now;
    if (m->used_n < USED_SLOTS)
        m->used_n++;
    return used - least;
}

/* What the host measures of a guest, remembered across ticks: its disk
 * reads averaged over about EXPERIMENT_S (a reclaim's "before", over as
 * long as its cost is watched after), its pace (the
 * fastest it read lately, a streamer's "before"), and how long ago it last
 * filled its cache. */
static void memory_observe(split_guest *m, const guest_view *g, double now)
{
    if (g->rebooted) { /* a new guest in all but its name: what was learnt of it is void */
        guest_table_key key = m->key;
        memset(m, 0, sizeof(*m));
        m->key = key;
    }
    if (!m->known) { /* a new entry is all zeros */
        m->known = true;
        m->rss_seen = -1;
        m->disk_avg_bps = -1;
        m->disk_pace_at_s = now;
        m->watched_since_s = now;
        /* without a disk-read rate yet (it takes two samples) nothing
         * says whether it is warming up: it gives nothing until it has
         * settled (SETTLE_REPORTS, SETTLE_S) */
        m->settled = g->disk_read_bps < 0 || g->rebooted ? 0 : SETTLE_REPORTS;
        m->settle_from_s = now - SETTLE_S; /* the time floor is for a warm-up's tail only */
        m->seen_s = now;
        m->jump_window_s = now;
        m->fn_rss = -1;
        m->inflated_at_s = -1;
    }
    if (now - m->jump_window_s >= JUMP_HOLD_S) {
        m->jump_prev = m->jump;
        m->jump = 0;
        m->jump_window_s = now;
    }
    if (g->stats_fresh) {
        m->last_rise = rise_within(m, g->used_bytes, now);
        m->jump = max_u64(m->jump, m->last_rise);
    } else if (!g->stats_valid) {
        m->used_n = 0; /* a rise across a gap in its reports is not one window's */
    }
    double dt = now > m->seen_s ? now - m->seen_s : 0;
    m->seen_s = now;
    if (now > m->disk_pace_at_s) {
        m->disk_pace_bps *= exp2(-(now - m->disk_pace_at_s) / PACE_HALF_LIFE_S);
        m->disk_pace_at_s = now;
    }
    /* a pace of its own: not reads while its QEMU waited for host swap
     * (a cache refaulting then would raise the bar its refault is judged
     * by: experiment_ask_again) */
    if (g->host_faults_ps < HOST_BOUND_FPS) {
        if (g->disk_read_bps > m->disk_pace_bps)
            m->disk_pace_bps = g->disk_read_bps;
        m->unwaited_s = fmin(m->unwaited_s + dt, PACE_WATCH_S);
    }
    if (g->filling) {
        /* reads into free memory are a warm-up, not its usual rate: the
         * average (a reclaim's "before") starts over from its first
         * settled sample (from zero, a stream's "before" would be too low
         * for ticks and its steady reads would look like refaults) */
        m->settled = 0;
        m->settle_from_s = now;
        m->disk_avg_bps = -1;
        return;
    }
    /* a report the guest did not make (a booting guest without its
     * balloon driver yet, stale stats), or made before its reboot,
     * settles nothing */
    if (m->settled < SETTLE_REPORTS && g->stats_fresh && !g->rebooted)
        m->settled++;
    if (settling(m, now)) {
        m->disk_avg_bps = -1; /* its usual reads start once settled */
        return;
    }
    /* an average over time, whatever the tick: each observation weighs
     * what the time since the last one does */
    double w = 1.0 - exp(-dt / EXPERIMENT_S);
    if (g->disk_read_bps < 0)
        m->disk_avg_bps = -1;
    else
        m->disk_avg_bps = m->disk_avg_bps < 0 ? g->disk_read_bps : (1.0 - w) * m->disk_avg_bps + w * g->disk_read_bps;
}

/* Memory of its balloon its QEMU never touched (nor touched and handed
 * back: free page reporting): free in the guest, not resident on the
 * host.  0 when the host does not measure it. */
static uint64_t untouched_of(const guest_view *g)
{
    return g->host_rss_bytes >= 0 && g->actual_bytes > (uint64_t)g->host_rss_bytes
               ? g->actual_bytes - (uint64_t)g->host_rss_bytes : 0;
}

/* A guest's word (available memory running out) and its swap-ins are
 * backed by the host only when the memory it is given gets used: what its
 * QEMU has touched (resident + swapped) grows.  What was given on its word
 * or swap-ins and not yet seen used is "unused"; a guest may be given up to
 * twice the larger of a step and what it was seen to touch last tick, less
 * what is unused.  An allocating
 * guest gets memory as fast as it uses it; a guest that only says it needs
 * memory gets two steps, then nothing.  Without an RSS (a backend that
 * cannot measure it), or with its QEMU holding its whole size (locked
 * memory, or QEMU's own memory on top of a small guest's), the allowance
 * is a step a tick: such a guest can be given its size a step a tick on
 * its word alone, paid by others' cheap tiers, never their anon. */
static uint64_t need_allowance(split_guest *m, const guest_view *g, uint64_t step, uint64_t *touched_out)
{
    *touched_out = 0;
    /* unknown, or its whole memory resident whatever its balloon (locked,
     * preallocated or hugepage memory, a VFIO device: the balloon frees
     * nothing on the host): use cannot show, a step a tick */
    if (g->host_rss_bytes < 0 || (g->max_bytes && (uint64_t)g->host_rss_bytes >= g->max_bytes)) {
        m->rss_seen = -1;
        m->unused = 0;
        return step;
    }
    uint64_t touched = m->rss_seen >= 0 && g->host_rss_bytes > m->rss_seen
                           ? (uint64_t)(g->host_rss_bytes - m->rss_seen) : 0;
    m->rss_seen = g->host_rss_bytes;
    *touched_out = touched;
    m->unused = m->unused > touched ? m->unused - touched : 0;
    /* what was given and not used is memory its QEMU has not touched:
     * never more than that (a balloon that took the memory back since
     * took the grant back with it, and a guest thrashing in all it has
     * must not be held to a grant of long ago) */
    m->unused = min_u64(m->unused, untouched_of(g));
    uint64_t cap = 2 * max_u64(step, touched);
    return cap > m->unused ? cap - m->unused : 0;
}

static double max_d(double a, double b) { return a > b ? a : b; }

/* The disk reads a reclaim's cost is measured against ("before"), and
 * whether they can prove one.  A guest at rest when reclaimed (a buffered-IO
 * database served by its cache) is measured against what it read: it does
 * not start reading its disk but for its cache.  A reader (a stream, or a
 * guest reading 2 MiB/s or more) reads as fast as its disk, its CPU and the
 * host let it, whatever its cache, and faster once the host is relieved,
 * which is what the reclaim itself does; measured against what it read
 * while the host was short, a stream "reads more since we took its cache".
 * So a reader is measured against its pace (the fastest it read lately,
 * filling included), and its reads prove nothing when that pace is not its
 * own or not known: its QEMU was waiting for host swap (its major faults,
 * as the host measures them), or it has been watched less than
 * PACE_WATCH_S with its QEMU not waiting (balancerd started with the host
 * already short; its pace counts only such reads).  A fault
 * rate not known (its first sample, or a QEMU whose RSS cannot be measured)
 * counts as not waiting.  Need and thrashing still prove a cost.  (A
 * reading database thus loses the disk evidence; one at rest keeps it.)
 * A guest whose cache refaulted is not taken as a stream. */
static void experiment_before(split_guest *m, const guest_view *g, double usual, double now, bool proactive)
{
    if (proactive && !m->proactive) {
        m->trim_usual_bps = m->disk_avg_bps;
        m->trim_began_s = now;
    }
    m->proactive = proactive;
    if (usual < 0) {
        m->disk_before_bps = -1;
        m->reads_prove = false;
        return;
    }
    /* a proactive reclaim (the host not short) relieves nothing that
     * could speed a reader up: its usual reads are the measure */
    bool reader = !proactive && ((g->streaming && !m->cache_hot) || usual >= REFAULT_MIN_BPS);
    m->disk_before_bps = reader ? max_d(usual, m->disk_pace_bps) : usual;
    m->pace_own = m->unwaited_s >= PACE_WATCH_S;
    m->reads_prove = !reader || (g->host_faults_ps < HOST_BOUND_FPS && m->pace_own);
}

/* A running experiment whose reads could not prove a cost when it began
 * (its QEMU waited for host swap) can once its QEMU no longer waits, if
 * its pace was its own then (watched PACE_WATCH_S with its QEMU not
 * waiting; else a stream the relief speeds up would look like a refault),
 * every tick it runs, whether or not more is taken (one move may take all
 * it gives: stream_step_raise): against the "before" taken then (its pace
 * then counted only reads while its QEMU did not wait), not the average or
 * the pace since, which the refault it is to catch may already have
 * raised. */
static void experiment_ask_again(split_guest *m, const guest_view *g, double now)
{
    if (!m->shrunk_at_s || now - m->shrunk_at_s > EXPERIMENT_S || m->reads_prove || m->disk_before_bps < 0 ||
        !m->pace_own || g->host_faults_ps >= HOST_BOUND_FPS)
        return;
    m->reads_prove = true;
}

/* Did the last reclaim from this guest cost it?  Need or thrashing, or its
 * disks reading more than before (its cache was hot), within EXPERIMENT_S. */
static const char *reclaim_feedback(split_guest *m, const guest_view *g, uint64_t reserve, double now)
{
    if (m->keep_until_s && now >= m->keep_until_s) {
        m->keep_bytes = 0;
        m->keep_until_s = 0;
        m->cache_hot = false;
        m->keep_backed = 0;
    }
    if (g->self_deflated_bytes) { /* its own OOM answer: keep what it took */
        if (g->actual_bytes > m->keep_bytes)
            m->keep_bytes = g->actual_bytes;
        m->keep_until_s = now + KEEP_S;
        m->keep_backed = 0;
        m->shrunk_at_s = 0;
        return "deflated on OOM by itself: not fought";
    }
    if (!m->shrunk_at_s || now - m->shrunk_at_s > EXPERIMENT_S)
        return NULL;
    const char *why = NULL;
    uint64_t keep = m->shrunk_from;
    if (g->in_need || g->thrashing) {
        why = g->thrashing ? "reclaim cost it (thrashing): given back" : "reclaim cost it (in need): given back";
    } else if (m->proactive && m->trim_usual_bps > 0 && now - m->trim_began_s >= SLOWED_AFTER_S &&
               m->disk_avg_bps >= 0 && m->disk_avg_bps < SLOWED_FRACTION * m->trim_usual_bps) {
        /* a trim is for nothing but host room: a stream it slowed (its
         * reads, averaged, fell by a quarter) gets its memory back */
        why = "a trim slowed its reads: given back";
    } else if (m->reads_prove && m->disk_before_bps >= 0 && g->disk_read_bps >= 0 &&
               g->disk_read_bps > REFAULT_FACTOR * m->disk_before_bps + REFAULT_MIN_BPS) {
        /* the cache was hot, its free memory was not */
        why = "its cache was its working set: given back";
        m->cache_hot = true;
        keep = m->shrunk_from > m->free_before + reserve ? m->shrunk_from - m->free_before + reserve : reserve;
    }
    if (why) {
        /* a trim that cost it is not tried again while it streams */
        m->trim_cost = m->trim_cost || m->proactive;
        if (keep > m->keep_bytes)
            m->keep_bytes = keep;
        /* thrashing and a cache that refaulted are backed by what the
         * host measures (its disk reads; a guest that reads its disk to
         * fake them gets back only what it had); need is the guest's word,
         * and what it alone raised keep to is not backed */
        if ((g->thrashing || m->cache_hot) && keep > m->keep_backed)
            m->keep_backed = keep;
        m->keep_until_s = now + KEEP_S;
        m->shrunk_at_s = 0;
    }
    return why;
}

static uint64_t pct(uint64_t v, double percent)
{
    return (uint64_t)((double)v * percent / 100.0);
}

/* The most a guest's balloon moves in a tick: step_percent of it, at
 * least step_min. */
static uint64_t step_of(const policy_tunables *tun, const guest_view *g)
{
    return max_u64(tun->step_min_bytes, pct(g->actual_bytes, tun->step_percent));
}

/* A stream: streaming and its cache not shown to be re-read. */
static bool is_stream(const guest_view *g, const work *w)
{
    return g->streaming && !w->cache_hot;
}

/* Only memory that frees host memory is a supply: a guest whose balloon
 * twice in a row took FREES_NOTHING_MIN or more of what its QEMU had
 * touched while that fell by less than a quarter of it (locked,
 * preallocated, hugepage or VFIO memory, discards turned off: its balloon
 * took memory from the guest and gave the host little of it) gives
 * nothing more, and what its balloon holds goes back (hard_rules), for
 * JUMP_HOLD_S (then it is tried again).  What its QEMU touched includes
 * QEMU's own memory, so which free pages were ever touched cannot be
 * told: only a take beyond its free memory judges, against a baseline at
 * most FN_BASELINE_S old (QEMU's own memory grows slowly), twice in a
 * row, and never a guest that reports its free pages (handed back
 * already). */
#define FREES_NOTHING_MIN (64 * MIB)
#define FN_BASELINE_S 60.0
static void note_frees_nothing(split_guest *m, const guest_view *g, double now)
{
    if (m->frees_nothing && now - m->frees_nothing_at_s >= JUMP_HOLD_S) {
        m->frees_nothing = false;
        m->fn_strikes = 0;
    }
    if (g->host_rss_bytes < 0 || !g->stats_valid || g->free_page_reporting_used == 1) {
        m->fn_rss = -1;
        return;
    }
    if (g->pending_target_bytes)
        return; /* judged once the balloon arrived, against the baseline from before */
    if (m->fn_rss >= 0 && g->actual_bytes < m->fn_actual && now - m->fn_at_s <= FN_BASELINE_S) {
        /* a balloon takes free pages first, and the host cannot tell
         * which of them its QEMU ever touched (its own memory is in what
         * the host sees): only what it took beyond the guest's free
         * memory (page cache, which was touched) must have left */
        uint64_t took = m->fn_actual - g->actual_bytes;
        uint64_t expect = took > m->fn_free ? took - m->fn_free : 0;
        if (expect < FREES_NOTHING_MIN)
            return; /* small steps add up against the same baseline */
        bool fell = g->host_rss_bytes + (int64_t)(expect / 4) <= m->fn_rss;
        m->fn_strikes = fell ? 0 : m->fn_strikes + 1;
        if (m->fn_strikes >= 2) {
            m->frees_nothing = true;
            m->frees_nothing_at_s = now;
        }
    }
    m->fn_actual = g->actual_bytes;
    m->fn_free = g->free_bytes;
    m->fn_rss = g->host_rss_bytes;
    m->fn_at_s = now;
}

/* Will this guest be able to give (now, or once its balloon arrived)? */
static bool is_donor(const guest_view *g, const work *w)
{
    return g->policy.mode == VM_MODE_AUTO && !w->fixed && !g->thrashing && !g->in_need && g->stats_valid;
}

/* May this guest's balloon be moved by the tiers and the growth below? */
static bool is_adjustable(const guest_view *g, const work *w)
{
    return is_donor(g, w) && !w->moving;
}

/* Lowest target tier t may reach.  We never take more than the guest's
 * available memory minus a reserve: ballooning costs the guest only free
 * memory and cache, never its anonymous working set -- below that the
 * host kernel swaps, as with no balancer, choosing pages by their use,
 * which a balloon cannot.  Outside the critical tier the decaying peak of
 * its used memory is kept too. */
static uint64_t tier_bound(const guest_view *g, const work *w, tier t)
{
    uint64_t used = g->actual_bytes > g->available_bytes ? g->actual_bytes - g->available_bytes : 0;
    uint64_t bound = max_u64(g->floor_bytes, used + w->reserve);
    if (t != TIER_ANON)
        bound = max_u64(bound, g->peak_used_bytes + w->reserve);
    /* what host reclaim measured in use (its RAM accessed within the cold
     * age: anon and cache alike, whatever the guest reports) is its
     * working set; the cache tiers leave it.  Not its free memory (freed
     * pages were touched within the cold age too), not a streamer's
     * cache (streamed pages are touched once, and they go first), not
     * when the host is critical */
    if ((t == TIER_STREAM_CACHE || t == TIER_CACHE) && g->host_ws_bytes >= 0 && !is_stream(g, w))
        bound = max_u64(bound, (uint64_t)g->host_ws_bytes + w->reserve);
    /* what a reclaim just proved the guest needs is not taken again; when
     * the host is critical only as far as the proof was host-backed
     * (thrashing, a cache refault: disk reads, a need grant its QEMU
     * touched): the same loss twice (others give by shares, and below that
     * the host swaps, as with no balancer) -- a guest's own word cannot
     * shelter it */
    return max_u64(bound, t != TIER_ANON ? w->keep : w->keep_backed);
}

/* How much guest g could give in tier t, before shares; with_step limits
 * it to what is left of this tick's step. */
static uint64_t tier_supply(const guest_view *g, const work *w, tier t, bool with_step)
{
    /* a guest filling its cache from disk is not settled: a warming database looks like a stream until
     * then (policies/classify.c).  It gives nothing, even when the host is
     * critical: the host kernel balances it, as with no balancer (no tier
     * takes anyone's anonymous memory, so this shelters no working set
     * from being pushed out by it) */
    if (g->filling || w->settling || w->frees_nothing)
        return 0;
    uint64_t bound = tier_bound(g, w, t);
    if (w->target <= bound || (with_step && w->changed >= w->step))
        return 0;
    uint64_t room = w->target - bound;
    if (with_step)
        room = min_u64(room, w->step - w->changed);
    /* free memory its QEMU never touched (a freshly booted guest's) is
     * not host memory: a balloon taking it frees nothing */
    uint64_t untouched = untouched_of(g);
    uint64_t supply;
    switch (t) {
    case TIER_FREE:
        /* a balloon takes only memory the host gets back: a guest whose
         * balloon driver reports its free pages (free page reporting) has
         * handed them to the host already, and taking them frees nothing
         * more -- it only shrinks the guest while host memory stays where
         * it was, so the squeeze would go on; nor does untouched memory */
        supply = g->free_page_reporting_used == 1 ? 0
                 : g->free_bytes > w->reserve + untouched ? g->free_bytes - w->reserve - untouched
                                                          : 0;
        break;
    case TIER_STREAM_CACHE:
        supply = is_stream(g, w) ? g->reclaimable_cache_bytes : 0;
        break;
    case TIER_CACHE:
        supply = is_stream(g, w) ? 0 : g->reclaimable_cache_bytes / 2;
        break;
    default:
        /* all it can drop: its cache and free memory, but not free pages
         * it has reported nor memory never touched (see TIER_FREE) */
        supply = g->policy.protect ? 0
                 : g->free_page_reporting_used == 1 ? min_u64(room, g->reclaimable_cache_bytes)
                 : room > untouched                 ? room - untouched
                                                    : 0;
        break;
    }
    /* a balloon still on its way down takes this much of what the guest
     * reports as free or cache before any further reclaim does */
    uint64_t inflight = w->moving && g->actual_bytes > w->moving_to ? g->actual_bytes - w->moving_to : 0;
    if (t != TIER_ANON)
        supply = supply > inflight ? supply - inflight : 0;
    supply = supply > w->tier_taken ? supply - w->tier_taken : 0;
    return min_u64(supply, room);
}

/* Take up to need bytes from donors in tier t, in proportion to
 * supply/shares.  Returns what was taken. */
static uint64_t reclaim_tier(const policy_input *in, work *ws, tier t, uint64_t need)
{
    uint64_t taken = 0;
    for (int pass = 0; pass < 3 && taken < need; pass++) {
        double total_weight = 0;
        for (size_t i = 0; i < in->n_guests; i++) {
            if (!is_adjustable(&in->guests[i], &ws[i]))
                continue;
            uint64_t s = tier_supply(&in->guests[i], &ws[i], t, true);
            total_weight += (double)s / (double)(in->guests[i].policy.shares ? in->guests[i].policy.shares : 1);
        }
        if (total_weight <= 0)
            break;
        uint64_t left = need - taken;
        uint64_t pass_taken = 0;
        for (size_t i = 0; i < in->n_guests && taken < need; i++) {
            const guest_view *g = &in->guests[i];
            if (!is_adjustable(g, &ws[i]))
                continue;
            uint64_t s = tier_supply(g, &ws[i], t, true);
            if (!s)
                continue;
            double w = (double)s / (double)(g->policy.shares ? g->policy.shares : 1);
            uint64_t share = (uint64_t)((double)left * w / total_weight) + 1;
            uint64_t take = min_u64(min_u64(s, share), need - taken);
            ws[i].target -= take;
            ws[i].changed += take;
            ws[i].tier_taken += take;
            ws[i].reason = tier_reason[t];
            taken += take;
            pass_taken += take;
        }
        if (!pass_taken)
            break;
    }
    return taken;
}

/* The host swaps this guest's memory, and not because of a balloon we
 * are inflating in it: a balloon's pages are allocated by the guest, and
 * a guest that clears what it allocates (init_on_alloc, Debian's default)
 * touches every page the host swapped out before handing it over, so its
 * QEMU faults them in from host swap -- the move's own cost, not the host
 * short of memory; counted, the rule would sustain itself. */
static bool swapped_by_host(const guest_view *g, const work *w)
{
    return g->host_faults_ps >= HOST_BOUND_FPS && !w->inflated;
}

/* A guest whose working set the host is swapping: swapped_by_host, and
 * not a stream (a streamer's faults are its own cache, read once). */
static bool host_swapped(const guest_view *g, const work *w)
{
    return swapped_by_host(g, w) && !is_stream(g, w);
}

/* The stream tier while the host swaps: every tick of a step-a-tick
 * reclaim is a tick the host pays swap I/O for someone's memory instead
 * of taking a cache that will not be read again -- a working set's (the
 * seed mails' page cache, one level up), or the stream's own cache, which
 * its guest rewrites as it reads on, so the host swaps it in only to have
 * it overwritten, and the working sets are next in its LRU.  Nor is the
 * shortfall to `high` the measure of it: a host that swaps is short of
 * what it swaps, which its available memory (held near zero by its own
 * reclaim) does not show.  So while any guest's QEMU faults from host swap
 * at HOST_BOUND_FPS or more, the streams give all their cache at once,
 * down to their used memory and headroom.  Measured (bench db-stream,
 * bench/results/2026-12-06-seed-promise-tcg.md): under no balancer a
 * streamer's QEMU swapped in 260-1038 MiB in a 30 s window and waited
 * 4.3-6.9 s for it; the shortfall to `high` a tick (56 MiB at a 700 MiB
 * host) took S from 512 to 288 MiB in 15-30 s while the host went on
 * swapping.  What bounds it: the faults it counts are not a balloon's own
 * (swapped_by_host); what it takes beyond the host's need is not spent
 * before it arrives (grow_for_comfort pays from memory free now); a
 * guest wrongly taken for a stream proves its cache was hot by its disk
 * reads once its own QEMU stops waiting for host swap (emit_decisions asks
 * the experiment again every tick it runs), and it is never the critical
 * tier: nobody's used memory, headroom or proven keep is taken.  Shares do
 * not shelter streamed cache here: they weigh how a reclaim's cost is
 * shared, and a cache read once costs nothing to lose.  Its balloon's own
 * speed paces it: a move still on its way counts as supply to come.
 * Lifts the stream donors' step and returns whether it did;
 * stream_step_restore puts the steps back (a step is step_of the guest:
 * nothing to remember). */
static bool stream_step_raise(const policy_input *in, work *ws)
{
    bool swapping = false;
    for (size_t i = 0; i < in->n_guests && !swapping; i++)
        swapping = swapped_by_host(&in->guests[i], &ws[i]);
    if (!swapping)
        return false;
    for (size_t i = 0; i < in->n_guests; i++)
        if (is_stream(&in->guests[i], &ws[i]))
            ws[i].step = UINT64_MAX;
    return true;
}

static void stream_step_restore(const policy_input *in, work *ws)
{
    for (size_t i = 0; i < in->n_guests; i++)
        if (is_stream(&in->guests[i], &ws[i]))
            ws[i].step = step_of(&in->tun, &in->guests[i]);
}

static int by_shares_desc(const void *a, const void *b, void *ctx)
{
    const guest_view *g = ctx;
    unsigned sa = g[*(const size_t *)a].policy.shares, sb = g[*(const size_t *)b].policy.shares;
    if (sa != sb)
        return sa > sb ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* The host's account this tick: its available memory with balloons on
 * their way counted as arrived (signed: growth already asked for and not
 * yet funded is a debt), and where it stands against the watermarks. */
typedef struct {
    int64_t avail_s;
    uint64_t avail;    /* avail_s, at least 0 */
    uint64_t free_now; /* what it has now, less the growth on its way: balloons on their way
                        * down not counted (a grant spends only this: grow_for_comfort) */
    bool critical;     /* below min */
    bool relieved;     /* short within PACE_WATCH_S */
    bool short_lately; /* short within EXPERIMENT_S: no comfort growth yet */
} host_account;

/* The free memory a guest's balloon leaves it above its used memory: its
 * reserve, or its own habits when larger -- the most its used memory rose
 * within JUMP_WINDOW_S in this JUMP_HOLD_S window or the last (memory_observe).
 * Its OOM killer having run below its size says the headroom it had was
 * too small for what it allocates, and the allocation that failed never
 * shows as used memory: twice the headroom (as a backoff doubles: a few
 * kills find the size of an allocation that never shows).  A rise that
 * ate all it had left was bigger than it could show (used memory cannot
 * pass its balloon): twice the rise. */
static uint64_t headroom_of(split_guest *m, const guest_view *g, uint64_t reserve)
{
    if (g->oom_killed && g->actual_bytes < g->ceiling_bytes)
        m->jump = min_u64(2 * max_u64(max_u64(m->jump, m->jump_prev), reserve), g->ceiling_bytes);
    else if (m->last_rise && g->available_bytes < reserve / 2 && g->actual_bytes < g->ceiling_bytes)
        m->jump = min_u64(max_u64(m->jump, 2 * m->last_rise), g->ceiling_bytes);
    return max_u64(reserve, max_u64(m->jump, m->jump_prev));
}

/* Stage 1. Hard rules first: off, ceiling, floor. */
static void hard_rules(const policy_input *in, split_state *st, work *ws)
{
    const policy_tunables *tun = &in->tun;
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        work *w = &ws[i];
        w->target = g->pending_target_bytes ? g->pending_target_bytes : g->actual_bytes;
        w->moving = g->pending_target_bytes && g->pending_target_bytes < g->actual_bytes;
        w->inflated = w->moving;
        w->moving_to = g->pending_target_bytes;
        w->step = step_of(tun, g);
        w->reserve = guest_reserve(g, tun->reserve_percent, tun->reserve_min_bytes);
        w->reason = "steady";
        split_guest *m = guest_table_get(&st->memory, i, guest_key_of(g));
        if (m) {
            memory_observe(m, g, in->now_s);
            w->reserve = headroom_of(m, g, w->reserve);
            note_frees_nothing(m, g, in->now_s);
            w->frees_nothing = m->frees_nothing;
            if (g->actual_bytes < m->actual_seen)
                m->inflated_at_s = in->now_s;
            w->inflated |= m->inflated_at_s >= 0 && in->now_s - m->inflated_at_s <= INFLATE_GRACE_S;
            m->actual_seen = g->actual_bytes;
            bool back = g->stats_valid && !g->pending_target_bytes &&
                        g->actual_bytes + min_change_of(tun, g) >= m->reboot_to;
            if (m->reboot_to && (back || in->now_s - m->reboot_at_s >= REBOOT_HOLD_S)) {
                m->reboot_to = 0;
                m->settled = 0; /* it settles from when its memory is back */
            }
            w->settling = settling(m, in->now_s);
            w->credit = need_allowance(m, g, w->step, &w->touched);
            experiment_ask_again(m, g, in->now_s);
            const char *why = g->stats_valid ? reclaim_feedback(m, g, w->reserve, in->now_s) : NULL;
            w->keep = m->keep_bytes;
            w->keep_backed = m->keep_backed;
            w->cache_hot = m->cache_hot;
            if (!g->streaming)
                m->trim_cost = false;
            w->trim_cost = m->trim_cost;
            w->trimmed_lately = m->trimmed_at_s > 0 && in->now_s - m->trimmed_at_s < KEEP_S;
            w->watched = in->now_s - m->watched_since_s >= PACE_WATCH_S;
            w->learnt = why;
        }
        if (g->policy.mode == VM_MODE_OFF) {
            w->fixed = true;
            w->reason = "mode=off: left alone";
        } else if (g->rebooted && (g->actual_bytes < g->ceiling_bytes ||
                                   (g->pending_target_bytes && g->pending_target_bytes < g->ceiling_bytes))) {
            /* it boots again: its start-up must not hit the wall its
             * balloon kept from before, and with no balancer it would have
             * its whole size; it gives again once settled */
            w->fixed = true;
            w->target = g->ceiling_bytes >= g->max_bytes && g->ceiling_bytes > REBOOT_ACK_BYTES
                            ? g->ceiling_bytes - REBOOT_ACK_BYTES
                            : g->ceiling_bytes;
            w->reason = "rebooted: given its size back";
            if (m) {
                m->reboot_to = w->target;
                m->reboot_at_s = in->now_s;
            }
        } else if (m && m->reboot_to && g->policy.mode == VM_MODE_AUTO) {
            w->fixed = true;
            w->target = min_u64(m->reboot_to, g->ceiling_bytes);
            w->reason = "rebooted: its size on its way back";
        } else if (w->frees_nothing && g->stats_valid && g->policy.mode == VM_MODE_AUTO &&
                   g->actual_bytes < g->ceiling_bytes) {
            w->fixed = true;
            w->target = g->ceiling_bytes;
            w->reason = "its balloon frees nothing on the host (its memory all resident): given back";
        } else if (g->actual_bytes > g->ceiling_bytes) {
            w->fixed = true;
            w->target = g->ceiling_bytes;
            w->reason = "above ceiling: lowered to max";
        } else if (g->actual_bytes < g->floor_bytes) {
            w->fixed = true;
            w->target = min_u64(g->floor_bytes, g->ceiling_bytes);
            w->reason = "below floor: raised to min";
        } else if (!g->stats_valid) {
            w->reason = "no fresh guest stats: holding";
        }
    }

}

/* Stage 2. The host's account, and the watermarks' hysteresis: reclaim
 * from below low until above high.  Balloons on their way count as
 * arrived. */
static host_account account_host(const policy_input *in, split_state *st)
{
    int64_t in_flight = 0, owed = 0;
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        if (g->pending_target_bytes)
            in_flight += (int64_t)g->actual_bytes - (int64_t)g->pending_target_bytes;
        if (g->pending_target_bytes > g->actual_bytes)
            owed += (int64_t)(g->pending_target_bytes - g->actual_bytes);
    }
    host_account h = { .avail_s = (int64_t)in->host.available_bytes + in_flight };
    h.avail = h.avail_s > 0 ? (uint64_t)h.avail_s : 0;
    int64_t now_s = (int64_t)in->host.available_bytes - owed;
    h.free_now = now_s > 0 ? (uint64_t)now_s : 0;

    if (!st->reclaiming && h.avail < in->wm.low)
        st->reclaiming = true;
    else if (st->reclaiming && h.avail + in->tun.min_change_bytes >= in->wm.high)
        st->reclaiming = false; /* what is left is smaller than a balloon move */
    h.critical = h.avail < in->wm.min;
    if (st->reclaiming) {
        st->was_short = true;
        st->short_at_s = in->now_s;
    }
    /* a proactive reclaim's experiment is strict (its usual reads, not its
     * pace) only once the host has not been short for PACE_WATCH_S: the
     * average still holds a stream slowed by a shortage just relieved */
    h.relieved = st->was_short && in->now_s - st->short_at_s < PACE_WATCH_S;
    /* comfort is paid from lasting plenty (grow_for_comfort) */
    h.short_lately = st->was_short && in->now_s - st->short_at_s < EXPERIMENT_S;
    return h;
}

/* Stage 3. Need first: a guest in need (thrashing, its available memory running
 * out, or a reclaim that cost it) is given memory now.  The grant is
 * measured from its balloon as it is (need_bytes is against actual),
 * so asking again while the balloon moves asks for nothing more.
 *
 * How fast need is answered is the guarantee: a guest in need is given
 * what it needs in the tick that shows it, up to its size, whether or not
 * the host has that memory free.  Its balloon is the only thing a
 * balancer adds between a guest and its memory; refusing the memory
 * leaves it its OOM killer or its swap, which no balancer would have done
 * to it, while granting it leaves the host where no balancer leaves it
 * (the host backs the guest's touches with its own reclaim), and the
 * reclaim below takes the others' cheap tiers first to pay for it.  What
 * bounds a grant is use, not the host's supply: a guest is given up to
 * twice the larger of a step and what its QEMU touched since the last
 * tick, less what it was given and has not touched (need_allowance), so
 * a guest that only says it needs memory gains two steps, then nothing
 * (a step a tick when the host cannot measure its use), and no guest
 * ever more than its size. */
static uint64_t grant_need(const policy_input *in, work *ws)
{
    uint64_t grown = 0;
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        work *w = &ws[i];
        /* stale guests neither give nor take: a verdict from before their
         * stats went stale is not evidence */
        if (w->fixed || g->policy.mode != VM_MODE_AUTO || !g->stats_valid ||
            !(g->thrashing || g->in_need || w->learnt))
            continue;
        uint64_t base = max_u64(w->target, g->actual_bytes); /* never shrinks a guest in need */
        /* what a reclaim proved it needs comes back */
        uint64_t backed = base;
        if (w->learnt)
            backed = max_u64(backed, w->keep);
        backed = min_u64(backed, g->ceiling_bytes);
        /* thrashing (its swap-ins backed by the disk reads the host
         * measures) grows it a step or what it needs, its word (available
         * memory running out) what it needs; both only as far as the
         * memory given gets used (need_allowance) */
        uint64_t credit = w->credit, thrash = 0;
        if (g->thrashing) {
            /* a step, or what it needs when more: a guest growing faster
             * than a step a tick would thrash for as long as it grows */
            uint64_t to = min_u64(max_u64(base + w->step, g->actual_bytes + g->need_bytes), g->ceiling_bytes);
            thrash = to > backed ? min_u64(to - backed, credit) : 0;
            credit -= thrash;
        }
        uint64_t word = g->in_need ? min_u64(g->actual_bytes + g->need_bytes, g->ceiling_bytes) : 0;
        if (g->oom_killed) /* room for the allocation that failed: its headroom above its used memory */
            word = max_u64(word, min_u64(g->used_bytes + w->reserve, g->ceiling_bytes));
        uint64_t from = backed + thrash;
        uint64_t claim = word > from ? min_u64(word - from, credit) : 0;
        w->on_word = thrash + claim;
        w->target = from + claim;
        w->changed += w->target > base ? w->target - base : 0;
        w->grew = true;
    }
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        work *w = &ws[i];
        if (!w->grew)
            continue;
        uint64_t base = max_u64(g->pending_target_bytes ? g->pending_target_bytes : g->actual_bytes,
                                g->actual_bytes);
        grown += w->target - min_u64(w->target, g->pending_target_bytes ? g->pending_target_bytes
                                                                        : g->actual_bytes);
        bool add = w->target > base;
        w->reason = !add && base >= g->ceiling_bytes ? (g->thrashing ? "thrashing, at ceiling" : "in need, at ceiling")
                    : !add && !w->learnt ? "in need: what it was given is not in use yet"
                    : g->thrashing ? "thrashing: given memory back"
                    : w->learnt    ? w->learnt
                                   : "in need (available memory running out): given memory";
    }
    return grown;
}

/* Stage 4. Reclaim to the high watermark, plus whatever the growth above costs
 * beyond what the host has down to min. */
static uint64_t reclaim_to_high(const policy_input *in, const split_state *st, work *ws, const host_account *h,
                                uint64_t grown)
{
    uint64_t headroom = h->avail > in->wm.min ? h->avail - in->wm.min : 0;
    uint64_t need = st->reclaiming && h->avail_s < (int64_t)in->wm.high ? (uint64_t)((int64_t)in->wm.high - h->avail_s) : 0;
    if (grown > headroom)
        need += grown - headroom;
    /* A costlier tier is used only for the part of the need that the
     * cheaper tiers cannot cover even over the next ticks (their per-tick
     * step is what holds them back now), as kswapd escalates priority
     * only when scanning the cheap lists did not free enough. */
    uint64_t reclaimed = 0, later = 0;
    for (tier t = TIER_STREAM_CACHE; t < TIER_COUNT && reclaimed < need; t++) {
        if (t == TIER_ANON && !h->critical)
            break;
        /* what this tier holds beyond this tick: a donor whose balloon
         * is still moving gives again once it has arrived */
        uint64_t unbounded = 0;
        for (size_t i = 0; i < in->n_guests; i++) {
            ws[i].tier_taken = 0;
            if (is_donor(&in->guests[i], &ws[i]))
                unbounded += tier_supply(&in->guests[i], &ws[i], t, false);
        }
        uint64_t want = need - reclaimed;
        if (want <= later)
            break;
        bool raised = t == TIER_STREAM_CACHE && stream_step_raise(in, ws);
        uint64_t got = reclaim_tier(in, ws, t, raised ? max_u64(unbounded, want - later) : want - later);
        if (raised) {
            stream_step_restore(in, ws);
            for (size_t i = 0; got && i < in->n_guests; i++) {
                if (ws[i].tier_taken > ws[i].step)
                    ws[i].reason = "reclaim: streaming page cache, at once (the host is swapping)";
                else if (host_swapped(&in->guests[i], &ws[i]) && strcmp(ws[i].reason, "steady") == 0)
                    ws[i].reason = "the host swaps its memory: streams give their cache at once";
            }
        }
        reclaimed += got;
        later += unbounded > got ? unbounded - got : 0;
    }
    return reclaimed;
}

/* Stage 5. Proactive (trim_streams): with the host not short, a stream's page
 * cache, which it will not read again, goes anyway, so that the room is
 * there before anyone needs it; the same bound as under pressure
 * (floor, used and its decaying peak plus the reserve, what a reclaim
 * proved it needs), a step a tick.  Only a guest whose disk reads the
 * host measures: a stream is a guest reading them. */
static void trim_streams(const policy_input *in, work *ws)
{
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        work *w = &ws[i];
        /* not one that gave this tick already (the step is shared), nor
         * one a trim cost while it still streams, nor one not watched
         * long enough for its usual reads (what a trim is judged by) */
        if (!is_adjustable(g, w) || g->disk_read_bps < 0 || w->changed || w->trim_cost || !w->watched)
            continue;
        w->tier_taken = 0;
        uint64_t take = tier_supply(g, w, TIER_STREAM_CACHE, true);
        if (!take)
            continue;
        w->target -= take;
        w->changed += take;
        w->trimmed = true;
        w->reason = "proactive: streaming page cache";
    }
}

/* Stage 6. Plenty: guests short of available memory grow from the surplus. */
static void grow_for_comfort(const policy_input *in, const split_state *st, work *ws, const host_account *h,
                             uint64_t grown)
{
    const policy_tunables *tun = &in->tun;
    /* never promise memory the host does not have: comfort is paid from
     * what is free now, not from a balloon on its way down (an inflation
     * takes seconds to minutes, and what the host swaps meanwhile is
     * what it lacks), nor from what growth already asked for */
    uint64_t have = min_u64(h->avail, h->free_now);
    uint64_t surplus = have > in->wm.high ? have - in->wm.high : 0;
    /* and from lasting plenty only: not while the last shortage's reclaim
     * is watched (EXPERIMENT_S).  A surplus that reclaim just made is its
     * doing; paid back for comfort at once, the guest touches again what
     * the host must find again, and the next shortage takes it again
     * (need is answered at once all the same: stage 3) */
    if (!st->reclaiming && !h->short_lately && surplus > grown) {
        uint64_t budget = surplus - grown;
        size_t *order = malloc(in->n_guests * sizeof(*order) + 1);
        for (size_t i = 0; order && i < in->n_guests; i++)
            order[i] = i;
        if (order)
            qsort_r(order, in->n_guests, sizeof(*order), by_shares_desc, (void *)in->guests);
        for (size_t k = 0; order && k < in->n_guests && budget > 0; k++) {
            size_t i = order[k];
            const guest_view *g = &in->guests[i];
            work *w = &ws[i];
            if (!is_adjustable(g, w) || w->target >= g->ceiling_bytes)
                continue;
            if (g->available_bytes >= pct(g->actual_bytes, tun->comfort_percent))
                continue;
            /* trimmed lately: what it had available was stream cache,
             * and growing it for comfort would refill it to be trimmed
             * again (need still grows it) */
            if (w->trimmed_lately || w->trimmed)
                continue;
            uint64_t add = min_u64(min_u64(w->step, g->ceiling_bytes - w->target), budget);
            w->target += add;
            budget -= add;
            w->reason = "short of available memory: growing";
        }
        free(order);
    }

}

/* Stage 7: the decisions, and what each one starts (a reclaim's
 * experiment, a trim) remembered. */
static void emit_decisions(const policy_input *in, split_state *st, const work *ws, const host_account *h,
                           policy_output *out)
{
    const policy_tunables *tun = &in->tun;
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        uint64_t min_change = min_change_of(tun, g);
        /* floors and ceilings are exact: the last small step to them counts */
        if (ws[i].fixed || ws[i].grew || ws[i].target == g->ceiling_bytes || ws[i].target == g->floor_bytes)
            min_change = 1;
        decision_set(&out->decisions[i], g->actual_bytes, ws[i].target, min_change, ws[i].reason);
        out->decisions[i].headroom_bytes = ws[i].reserve;
        /* a reclaim starts an experiment: its cost is watched for EXPERIMENT_S */
        split_guest *m = guest_table_get(&st->memory, i, guest_key_of(g));
        if (m && out->decisions[i].change)
            m->unused += ws[i].on_word;
        /* what need was given is kept as memory given back is: a need
         * verdict may lapse in the middle of the allocation it was for (a
         * burst stalled by a busy host grows used memory by nothing for a
         * few reports), and taking the grant back as "free memory" then
         * ends in the guest's OOM killer (bench burst-cold, bench settings:
         * 414 -> 297 MiB while 300 MiB were being allocated).  Only the
         * grant, not all it has.  The critical tier honours it too
         * (keep_backed) as far as the host measured the need: all of it
         * for a guest thrashing, what its QEMU touched since the last
         * tick otherwise -- taking that back at once would be the same
         * loss twice */
        if (m && out->decisions[i].change && ws[i].grew && ws[i].target > g->actual_bytes &&
            (g->in_need || g->thrashing)) {
            if (ws[i].target > m->keep_bytes)
                m->keep_bytes = ws[i].target;
            uint64_t proven = g->thrashing ? ws[i].target : min_u64(ws[i].target, g->actual_bytes + ws[i].touched);
            if (proven > m->keep_backed)
                m->keep_backed = proven;
            m->keep_until_s = in->now_s + KEEP_S;
        }
        if (m && out->decisions[i].change && ws[i].trimmed)
            m->trimmed_at_s = in->now_s;
        if (m && out->decisions[i].change && ws[i].target < g->actual_bytes && !ws[i].fixed) {
            /* a guest grown above where the experiment took it from
             * (given back since: balancerctl give-back, with decisions
             * not made while paused) begins a new one */
            bool running = m->shrunk_at_s && in->now_s - m->shrunk_at_s <= EXPERIMENT_S &&
                           g->actual_bytes <= m->shrunk_from;
            /* an experiment whose "before" was unknown takes the first
             * known one, and one whose reads could not prove a cost asks
             * again (its pace known by now, or its QEMU no longer waiting):
             * the average, not this tick's (it may already refault); a
             * proactive one extended with the host short is asked again
             * as one taken under pressure (the relief may speed it up) */
            if (running && (m->disk_before_bps < 0 || !m->reads_prove || (m->proactive && (!ws[i].trimmed || h->relieved))) &&
                m->disk_avg_bps >= 0)
                experiment_before(m, g, m->disk_avg_bps, in->now_s, ws[i].trimmed && !h->relieved);
            if (!running) {
                m->shrunk_from = g->actual_bytes;
                m->proactive = false; /* a new experiment: a trim begins now */
                /* the usual rate, not one tick's: a bursty streamer idle
                 * at this moment must not look like a refault later */
                experiment_before(m, g, g->disk_read_bps < 0 ? -1 : max_d(m->disk_avg_bps, g->disk_read_bps),
                                  in->now_s, ws[i].trimmed && !h->relieved);
                m->free_before = g->free_bytes;
            }
            m->shrunk_at_s = in->now_s;
        }
    }
}

/* One tick: the stages in order, cheapest and safest first (need before
 * reclaim, reclaim before proactive moves, growth from what is left). */
static void split_decide(const policy_input *in, void *state, policy_output *out)
{
    split_state *st = state;
    work *ws = calloc(in->n_guests ? in->n_guests : 1, sizeof(*ws));
    if (!ws) {
        for (size_t i = 0; i < in->n_guests; i++) {
            const guest_view *g = &in->guests[i];
            decision_set(&out->decisions[i], g->actual_bytes, g->actual_bytes, 1, "out of memory: no decision");
        }
        return;
    }
    hard_rules(in, st, ws);
    host_account h = account_host(in, st);
    uint64_t grown = grant_need(in, ws);
    uint64_t reclaimed = reclaim_to_high(in, st, ws, &h, grown);
    if (in->tun.trim_streams && !st->reclaiming)
        trim_streams(in, ws);
    grow_for_comfort(in, st, ws, &h, grown);
    emit_decisions(in, st, ws, &h, out);
    guest_table_sweep(&st->memory); /* forget guests that are gone */
    out->reclaiming = st->reclaiming;
    snprintf(out->summary, sizeof(out->summary), "%s: host available %llu MiB, %s %llu MiB",
             h.critical ? "critical" : st->reclaiming ? "reclaiming" : "idle",
             (unsigned long long)(h.avail / MIB), st->reclaiming ? "reclaimed" : "grown",
             (unsigned long long)((st->reclaiming ? reclaimed : grown) / MIB));
    free(ws);
}

const policy_ops policy_split_lru = {
    .name = "split-lru",
    .description = "need first (in-need and thrashing guests get memory at once); kswapd-like watermarks; cache before anon, streaming guests first",
    .state_new = split_state_new,
    .state_free = split_state_free,
    .decide = split_decide,
};

/*
 * Reuse, not read rate (split_trackers.h): a guest's page cache is a
 * stream only when something shows that what it read is not read again,
 * as mm/workingset.c tells a streamed page from a reused one by whether
 * it comes back after eviction.  A read rate cannot: a database that
 * reads its files through its page cache (PostgreSQL's double buffering,
 * MySQL without O_DIRECT) reads a few MiB/s whenever its cache is a
 * little smaller than its data, and a take makes it read more.  What
 * decides, strongest first:
 *
 *   1. a cost the experiment found this tick (split_experiment.c): its
 *      reads rose (its refault), need or thrashing -- reused, for keep_s
 *      (then it may be probed again);
 *   2. its agent's counters, when fresh: its kernel evicting file pages
 *      (pgsteal_file) and reading few (a stream) or many (reuse) of them
 *      again (workingset_refault_file).  Untrusted, and safe either way:
 *      "stream" gives its own cache first; "reused" keeps its cache out
 *      of the stream tier, where no balancer would take it either;
 *   3. the probe: one step taken from a guest that looks like a stream,
 *      nothing more of its cache taken for probe_s, and then what it read
 *      beyond its usual reads over that time against what the take
 *      removed.  A database reads back what it lost (its refault): a
 *      quarter of it (probe_reuse_share) within probe_s beyond the
 *      experiment's "before" (a reader's pace, so that a stream the relief
 *      sped up is no refault) is reuse.  A stream reads on at its pace
 *      whatever its cache: less than that beyond its usual reads (its
 *      average, lower than its pace) is a stream.  Between the two nothing
 *      is proven; nor a stream when its QEMU waited for host swap meanwhile
 *      (a swapped guest may not read more, whatever it lost), nor reuse
 *      when it then stopped waiting (relieved, it reads faster, whatever
 *      it lost).  A refault the probe found is given back and kept, as one
 *      the experiment finds (experiment_refault).  So noise errs one way: a
 *      stream that read faster by chance is not proven and is probed
 *      again; a database that read back a little is not a stream.
 *
 *   probe take       probe_s                          experiment_s
 *   ----+----------------+---------------------------------+------->
 *       | nothing more   | judged (QEMU not waiting):       | a probe that
 *       | of its cache   |  beyond pace  >= bar -> reused   | could not judge
 *       | taken          |  beyond usual <  bar -> stream   | lapses: again
 *
 * A stream verdict lasts while the guest looks like one (experiment_s
 * past that); a cost ends it at once.
 */
#include "policies/split_trackers.h"

static void verdict_set(reuse_tracker *r, cache_verdict v, cache_evidence by, double now)
{
    if (r->verdict != v || v == CACHE_REUSED) /* a cost renews reuse; a stream's came when first proven */
        r->at_s = now;
    r->verdict = v;
    r->by = by;
    r->probe_at_s = 0;
}

/* The guest kernel's own verdict, from its agent's counters. */
static cache_verdict agent_says(const split_params *p, const guest_view *g)
{
    if (!g->agent_fresh || !(g->agent_steal_file_ps >= p->agent_steal_min_ps))
        return CACHE_UNKNOWN;
    double share = g->agent_refault_file_ps / g->agent_steal_file_ps;
    return share >= p->agent_reuse_share ? CACHE_REUSED : share < p->agent_stream_share ? CACHE_STREAM : CACHE_UNKNOWN;
}

static cache_evidence cost_of(decision_reason learnt)
{
    switch (learnt) {
    case REASON_CACHE_HOT: return EVIDENCE_REFAULT;
    case REASON_COST_NEED: return EVIDENCE_NEED;
    case REASON_COST_THRASHING: return EVIDENCE_THRASHING;
    default: return EVIDENCE_NONE;
    }
}

/* Verdicts that lapse: reuse after keep_s, a stream once it has not
 * looked like one for experiment_s. */
static void verdict_age(reuse_tracker *r, const split_params *p, const guest_view *g, double now)
{
    if (g->streaming)
        r->unshaped_s = 0;
    else if (!r->unshaped_s)
        r->unshaped_s = now;
    if ((r->verdict == CACHE_REUSED && now - r->at_s >= p->keep_s) ||
        (r->verdict == CACHE_STREAM && r->unshaped_s && now - r->unshaped_s >= p->experiment_s))
        verdict_set(r, CACHE_UNKNOWN, EVIDENCE_NONE, now);
}

/* What it read since the probe, and whether its QEMU waited meanwhile. */
static void probe_account(reuse_tracker *r, const split_params *p, const guest_view *g, double now)
{
    if (now > r->probe_seen_s && g->disk_read_bps > 0)
        r->probe_read += g->disk_read_bps * (now - r->probe_seen_s);
    r->probe_seen_s = now;
    if (g->host_faults_ps >= p->host_bound_fps)
        r->probe_waited = true;
    else if (r->probe_waited)
        r->probe_relieved = true;
}

/* true when it found a refault. */
static bool probe_judge(reuse_tracker *r, const split_params *p, const guest_view *g, double now)
{
    if (!r->probe_at_s || r->verdict != CACHE_UNKNOWN)
        return false;
    probe_account(r, p, g, now);
    double age = now - r->probe_at_s;
    uint64_t taken = r->probe_from > g->actual_bytes ? r->probe_from - g->actual_bytes : 0;
    if (age >= p->probe_s && taken > 0 && g->disk_read_bps >= 0) {
        double bar = p->probe_reuse_share * (double)taken;
        if (!r->probe_relieved && r->probe_read - r->probe_pace_bps * age >= bar) {
            verdict_set(r, CACHE_REUSED, EVIDENCE_REFAULT, now);
            return true;
        }
        if (!r->probe_waited && r->probe_read - r->probe_usual_bps * age < bar && g->streaming) {
            verdict_set(r, CACHE_STREAM, EVIDENCE_PROBE, now);
            return false;
        }
    }
    if (age > p->experiment_s)
        r->probe_at_s = 0; /* nothing could be judged: it may be probed again */
    return false;
}

bool reuse_observe(reuse_tracker *r, const split_params *p, const guest_view *g, decision_reason learnt, double now)
{
    verdict_age(r, p, g, now);
    cache_evidence cost = cost_of(learnt);
    if (cost != EVIDENCE_NONE) {
        verdict_set(r, CACHE_REUSED, cost, now);
        return false;
    }
    cache_verdict agent = agent_says(p, g);
    if (agent != CACHE_UNKNOWN) {
        verdict_set(r, agent, EVIDENCE_AGENT, now);
        return false;
    }
    return probe_judge(r, p, g, now);
}

bool reuse_probe_pending(const reuse_tracker *r)
{
    return r->verdict == CACHE_UNKNOWN && r->probe_at_s;
}

bool reuse_probing(const reuse_tracker *r, const split_params *p, double now)
{
    return r->verdict == CACHE_UNKNOWN && r->probe_at_s && now - r->probe_at_s < p->probe_s;
}

void reuse_note_take(reuse_tracker *r, const split_params *p, const read_tracker *reads, const experiment *e,
                     const guest_view *g, double now)
{
    /* only once its usual reads are known, over probe_s at least: one
     * sample is no usual */
    if (!g->streaming || r->verdict != CACHE_UNKNOWN || r->probe_at_s || reads->avg_bps < 0 ||
        now - reads->watched_since_s < p->probe_s)
        return;
    *r = (reuse_tracker){ .verdict = CACHE_UNKNOWN, .unshaped_s = r->unshaped_s, .probe_at_s = now,
                          .probe_from = g->actual_bytes, .probe_usual_bps = reads->avg_bps,
                          .probe_pace_bps = max_d(max_d(reads->avg_bps, reads->pace_bps), e->disk_before_bps), .probe_seen_s = now };
}

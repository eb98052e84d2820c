/*
 * The experiment every reclaim is, and what it keeps (split_trackers.h;
 * the policy's essay, with its timeline, is in policies/split_lru.c).
 */
#include "policies/split_trackers.h"

/* The disk reads a reclaim's cost is measured against ("before"), and
 * whether they can prove one.  A guest at rest when reclaimed (a buffered-IO
 * database served by its cache) is measured against what it read: it does
 * not start reading its disk but for its cache.  A reader (a stream, or a
 * guest reading refault_min_bps or more) reads as fast as its disk, its
 * CPU and the host let it, whatever its cache, and faster once the host is
 * relieved, which is what the reclaim itself does; measured against what
 * it read while the host was short, a stream "reads more since we took its
 * cache".  So a reader is measured against its pace (the fastest it read
 * lately, filling included), and its reads prove nothing when that pace is
 * not its own or not known: its QEMU was waiting for host swap (its major
 * faults, as the host measures them), or it has been watched less than
 * pace_watch_s with its QEMU not waiting (balancerd started with the host
 * already short; its pace counts only such reads).  A fault rate not known
 * (its first sample, or a QEMU whose RSS cannot be measured) counts as not
 * waiting.  Need and thrashing still prove a cost.  (A reading database
 * thus loses the disk evidence; one at rest keeps it.)  A guest whose
 * cache refaulted is not taken as a stream. */
static void experiment_before(experiment *e, const split_params *p, const read_tracker *r, const guest_view *g,
                              double usual, double now, bool proactive)
{
    if (proactive && !e->proactive) {
        e->trim_usual_bps = r->avg_bps;
        e->trim_began_s = now;
    }
    e->proactive = proactive;
    if (usual < 0) {
        e->disk_before_bps = -1;
        e->reads_prove = false;
        return;
    }
    /* a proactive reclaim (the host not short) relieves nothing that
     * could speed a reader up: its usual reads are the measure */
    bool reader = !proactive && ((g->streaming && !e->cache_hot) || usual >= p->refault_min_bps);
    e->disk_before_bps = reader ? max_d(usual, r->pace_bps) : usual;
    e->pace_own = r->unwaited_s >= p->pace_watch_s;
    e->reads_prove = !reader || (g->host_faults_ps < p->host_bound_fps && e->pace_own);
}

/* A running experiment whose reads could not prove a cost when it began
 * (its QEMU waited for host swap) can once its QEMU no longer waits, if
 * its pace was its own then (watched pace_watch_s with its QEMU not
 * waiting; else a stream the relief speeds up would look like a refault),
 * every tick it runs, whether or not more is taken (one move may take all
 * it gives: the stream tier at once): against the "before" taken then
 * (its pace then counted only reads while its QEMU did not wait), not the
 * average or the pace since, which the refault it is to catch may already
 * have raised. */
void experiment_ask_again(experiment *e, const split_params *p, const guest_view *g, double now)
{
    if (!e->shrunk_at_s || now - e->shrunk_at_s > p->experiment_s || e->reads_prove || e->disk_before_bps < 0 ||
        !e->pace_own || g->host_faults_ps >= p->host_bound_fps)
        return;
    e->reads_prove = true;
}

/* What a cost found raises keep to, and whether host-measured evidence
 * backs it. */
static void keep_learnt(experiment *e, const split_params *p, const guest_view *g, uint64_t keep, double now)
{
    /* a trim that cost it is not tried again while it streams */
    e->trim_cost = e->trim_cost || e->proactive;
    if (keep > e->keep_bytes)
        e->keep_bytes = keep;
    /* thrashing and a cache that refaulted are backed by what the host
     * measures (its disk reads; a guest that reads its disk to fake them
     * gets back only what it had); need is the guest's word, and what it
     * alone raised keep to is not backed */
    if ((g->thrashing || e->cache_hot) && keep > e->keep_backed)
        e->keep_backed = keep;
    e->keep_until_s = now + p->keep_s;
    e->shrunk_at_s = 0;
}

/* What a cache that refaulted keeps: the cache was hot, its free memory
 * was not. */
static uint64_t cache_keep(const experiment *e, uint64_t reserve)
{
    return e->shrunk_from > e->free_before + reserve ? e->shrunk_from - e->free_before + reserve : reserve;
}

decision_reason experiment_refault(experiment *e, const split_params *p, const guest_view *g, uint64_t reserve,
                                   double now)
{
    if (!e->shrunk_at_s)
        return REASON_NONE;
    e->cache_hot = true;
    keep_learnt(e, p, g, cache_keep(e, reserve), now);
    return REASON_CACHE_HOT;
}

/* Did the last reclaim from this guest cost it?  Need or thrashing, or its
 * disks reading more than before (its cache was hot), within experiment_s. */
decision_reason experiment_feedback(experiment *e, const split_params *p, const read_tracker *r,
                                    const guest_view *g, uint64_t reserve, double now)
{
    if (e->keep_until_s && now >= e->keep_until_s) {
        e->keep_bytes = 0;
        e->keep_until_s = 0;
        e->cache_hot = false;
        e->keep_backed = 0;
    }
    if (g->self_deflated_bytes) { /* its own OOM answer: keep what it took */
        if (g->actual_bytes > e->keep_bytes)
            e->keep_bytes = g->actual_bytes;
        e->keep_until_s = now + p->keep_s;
        e->keep_backed = 0;
        e->shrunk_at_s = 0;
        return REASON_SELF_DEFLATED;
    }
    if (!e->shrunk_at_s || now - e->shrunk_at_s > p->experiment_s)
        return REASON_NONE;
    decision_reason why = REASON_NONE;
    uint64_t keep = e->shrunk_from;
    if (g->in_need || g->thrashing) {
        why = g->thrashing ? REASON_COST_THRASHING : REASON_COST_NEED;
    } else if (e->proactive && e->trim_usual_bps > 0 && now - e->trim_began_s >= p->slowed_after_s &&
               r->avg_bps >= 0 && r->avg_bps < p->slowed_fraction * e->trim_usual_bps) {
        /* a trim is for nothing but host room: a stream it slowed (its
         * reads, averaged, fell by a quarter) gets its memory back */
        why = REASON_TRIM_SLOWED;
    } else if (e->reads_prove && e->disk_before_bps >= 0 && g->disk_read_bps >= 0 &&
               g->disk_read_bps > p->refault_factor * e->disk_before_bps + p->refault_min_bps) {
        why = REASON_CACHE_HOT;
        e->cache_hot = true;
        keep = cache_keep(e, reserve);
    }
    if (why != REASON_NONE)
        keep_learnt(e, p, g, keep, now);
    return why;
}

void experiment_note_take(experiment *e, const split_params *p, const read_tracker *r, const guest_view *g,
                          bool trimmed, bool relieved, double now)
{
    /* a guest grown above where the experiment took it from (given back
     * since: balancerctl give-back, with decisions not made while paused)
     * begins a new one */
    bool running = e->shrunk_at_s && now - e->shrunk_at_s <= p->experiment_s && g->actual_bytes <= e->shrunk_from;
    /* an experiment whose "before" was unknown takes the first known one,
     * and one whose reads could not prove a cost asks again (its pace
     * known by now, or its QEMU no longer waiting): the average, not this
     * tick's (it may already refault); a proactive one extended with the
     * host short is asked again as one taken under pressure (the relief
     * may speed it up) */
    if (running && (e->disk_before_bps < 0 || !e->reads_prove || (e->proactive && (!trimmed || relieved))) &&
        r->avg_bps >= 0)
        experiment_before(e, p, r, g, r->avg_bps, now, trimmed && !relieved);
    if (!running) {
        e->shrunk_from = g->actual_bytes;
        e->proactive = false; /* a new experiment: a trim begins now */
        /* the usual rate, not one tick's: a bursty streamer idle at this
         * moment must not look like a refault later */
        experiment_before(e, p, r, g, g->disk_read_bps < 0 ? -1 : max_d(r->avg_bps, g->disk_read_bps), now,
                          trimmed && !relieved);
        e->free_before = g->free_bytes;
    }
    e->shrunk_at_s = now;
}

/* What need was given is kept as memory given back is: a need verdict may
 * lapse in the middle of the allocation it was for (a burst stalled by a
 * busy host grows used memory by nothing for a few reports), and taking
 * the grant back as "free memory" then ends in the guest's OOM killer
 * (bench burst-cold: 414 -> 297 MiB while 300 MiB were being allocated).
 * Only the grant, not all it has.  The critical tier honours it too
 * (keep_backed) as far as the host measured the need: all of it for a
 * guest thrashing, what its QEMU touched since the last tick otherwise --
 * taking that back at once would be the same loss twice. */
void experiment_keep_grant(experiment *e, const split_params *p, const guest_view *g, uint64_t target,
                           uint64_t touched, double now)
{
    if (target > e->keep_bytes)
        e->keep_bytes = target;
    uint64_t proven = g->thrashing ? target : min_u64(target, g->actual_bytes + touched);
    if (proven > e->keep_backed)
        e->keep_backed = proven;
    e->keep_until_s = now + p->keep_s;
}

/*
 * The reclaim tiers (split-lru's stages 4 and 5): what each guest can
 * give in each tier, cheapest first, and how a shortfall is shared.
 */
#include <assert.h>

#include "policies/split_lru.h"

uint64_t step_of(const policy_tunables *tun, const guest_view *g)
{
    return max_u64(tun->step_min_bytes, pct(g->actual_bytes, tun->step_percent));
}

/* A stream: it looks like one (policies/classify.c: its reads, its
 * cache, few faults) and was proven one (split_reuse.c: by its agent, or
 * a probe); its cache not shown to be re-read since. */
static bool is_stream(const guest_view *g, const work *w)
{
    return g->streaming && w->verdict == CACHE_STREAM && !w->cache_hot;
}

/* One that looks like a stream and is not known to be one or not: it
 * gives one step of its cache (the probe), and nothing more of it until
 * that is judged. */
static bool is_candidate(const guest_view *g, const work *w)
{
    return g->streaming && w->verdict == CACHE_UNKNOWN && !w->probe_pending && !w->cache_hot;
}

bool is_donor(const guest_view *g, const work *w)
{
    return g->policy.mode == VM_MODE_AUTO && !w->fixed && !g->thrashing && !g->in_need && g->stats_valid;
}

bool is_adjustable(const guest_view *g, const work *w)
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

/* What the stream tier holds of g this tick (with_step), or beyond it.
 * A candidate gives one step now (its probe); a guest being probed gives
 * nothing now, and both count as supply to come -- their cache is all of
 * it if the probe proves a stream -- so that the costlier tiers (others'
 * cache) wait for the verdict rather than take a working set's cache
 * meanwhile (a probe_s of the host left as it is, as with no balancer). */
static uint64_t stream_holds(const guest_view *g, const work *w, bool with_step)
{
    /* a trim (trim_streams, off by default) judges its take by its own,
     * stricter experiment (split_experiment.c), not by a probe */
    if (is_stream(g, w) || (w->trim_pass && g->streaming && !w->cache_hot))
        return g->reclaimable_cache_bytes;
    if (is_candidate(g, w))
        return with_step ? min_u64(g->reclaimable_cache_bytes, w->step) : g->reclaimable_cache_bytes;
    return w->probing && !with_step && g->streaming ? g->reclaimable_cache_bytes : 0;
}

/* What tier t holds of g, before its bound and step. */
static uint64_t tier_holds(const guest_view *g, const work *w, tier t, uint64_t room, bool with_step)
{
    /* free memory its QEMU never touched (a freshly booted guest's) is
     * not host memory: a balloon taking it frees nothing */
    uint64_t untouched = untouched_of(g);
    switch (t) {
    case TIER_FREE:
        /* a balloon takes only memory the host gets back: a guest whose
         * balloon driver reports its free pages (free page reporting) has
         * handed them to the host already, and taking them frees nothing
         * more -- it only shrinks the guest while host memory stays where
         * it was, so the squeeze would go on; nor does untouched memory */
        return g->free_page_reporting_used == 1 ? 0
               : g->free_bytes > w->reserve + untouched ? g->free_bytes - w->reserve - untouched
                                                        : 0;
    case TIER_STREAM_CACHE:
        return stream_holds(g, w, with_step);
    case TIER_CACHE:
        return is_stream(g, w) || w->probing ? 0 : g->reclaimable_cache_bytes / 2;
    default:
        /* all it can drop: its cache and free memory, but not free pages
         * it has reported nor memory never touched (see TIER_FREE) */
        return g->policy.protect ? 0
               : g->free_page_reporting_used == 1 ? min_u64(room, g->reclaimable_cache_bytes)
               : room > untouched                 ? room - untouched
                                                  : 0;
    }
}

uint64_t tier_supply(const guest_view *g, const work *w, tier t, bool with_step)
{
    /* a guest filling its cache from disk is not settled: a warming
     * database looks like a stream until then (policies/classify.c).  It
     * gives nothing, even when the host is critical: the host kernel
     * balances it, as with no balancer (no tier takes anyone's anonymous
     * memory, so this shelters no working set from being pushed out by it) */
    if (g->filling || w->settling || w->frees_nothing)
        return 0;
    uint64_t bound = tier_bound(g, w, t);
    if (w->target <= bound || (with_step && w->changed >= w->step))
        return 0;
    uint64_t room = w->target - bound;
    if (with_step)
        room = min_u64(room, w->step - w->changed);
    uint64_t supply = tier_holds(g, w, t, room, with_step);
    /* a balloon still on its way down takes this much of what the guest
     * reports as free or cache before any further reclaim does */
    uint64_t inflight = w->moving && g->actual_bytes > w->moving_to ? g->actual_bytes - w->moving_to : 0;
    if (t != TIER_ANON)
        supply = supply > inflight ? supply - inflight : 0;
    supply = supply > w->tier_taken ? supply - w->tier_taken : 0;
    return min_u64(supply, room);
}

static double weight_of(const guest_view *g, uint64_t supply)
{
    return (double)supply / (double)(g->policy.shares ? g->policy.shares : 1);
}

/* Take up to need bytes from donors in tier t, in proportion to
 * supply/shares.  Returns what was taken. */
static uint64_t reclaim_tier(const policy_input *in, work *ws, tier t, uint64_t need)
{
    uint64_t taken = 0;
    for (int pass = 0; pass < 3 && taken < need; pass++) {
        double total_weight = 0;
        for (size_t i = 0; i < in->n_guests; i++)
            if (is_adjustable(&in->guests[i], &ws[i]))
                total_weight += weight_of(&in->guests[i], tier_supply(&in->guests[i], &ws[i], t, true));
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
            uint64_t share = (uint64_t)((double)left * weight_of(g, s) / total_weight) + 1;
            uint64_t take = min_u64(min_u64(s, share), need - taken);
            ws[i].target -= take;
            ws[i].changed += take;
            ws[i].tier_taken += take;
            ws[i].reason = t == TIER_STREAM_CACHE && !is_stream(g, &ws[i]) ? REASON_RECLAIM_PROBE
                                                                            : REASON_RECLAIM_STREAM + t;
            assert(ws[i].target >= tier_bound(g, &ws[i], t)); /* a take never passes its tier's bound */
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
static bool swapped_by_host(const split_params *p, const guest_view *g, const work *w)
{
    return g->host_faults_ps >= p->host_bound_fps && !w->inflated;
}

/* A guest whose working set the host is swapping: swapped_by_host, and
 * not a stream (a streamer's faults are its own cache, read once). */
static bool host_swapped(const split_params *p, const guest_view *g, const work *w)
{
    return swapped_by_host(p, g, w) && !is_stream(g, w);
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
 * at host_bound_fps or more, the streams give all their cache at once,
 * down to their used memory and headroom (policies/README.md has the
 * measurement).  What bounds it: the faults it counts are not a balloon's
 * own (swapped_by_host); what it takes beyond the host's need is not spent
 * before it arrives (grow_for_comfort pays from memory free now); a guest
 * wrongly taken for a stream proves its cache was hot by its disk reads
 * once its own QEMU stops waiting for host swap (the experiment is asked
 * again every tick it runs), and it is never the critical tier: nobody's
 * used memory, headroom or proven keep is taken.  Shares do not shelter
 * streamed cache here: they weigh how a reclaim's cost is shared, and a
 * cache read once costs nothing to lose.  Its balloon's own speed paces
 * it: a move still on its way counts as supply to come.  Lifts the stream
 * donors' step and returns whether it did; stream_step_restore puts the
 * steps back (a step is step_of the guest: nothing to remember). */
static bool stream_step_raise(const policy_input *in, work *ws)
{
    bool swapping = false;
    for (size_t i = 0; i < in->n_guests && !swapping; i++)
        swapping = swapped_by_host(&in->tun.split, &in->guests[i], &ws[i]);
    if (!swapping)
        return false;
    for (size_t i = 0; i < in->n_guests; i++)
        if (is_stream(&in->guests[i], &ws[i]))
            ws[i].step = UINT64_MAX;
    return true;
}

static void stream_step_restore(const policy_input *in, work *ws, uint64_t got)
{
    for (size_t i = 0; i < in->n_guests; i++)
        if (is_stream(&in->guests[i], &ws[i]))
            ws[i].step = step_of(&in->tun, &in->guests[i]);
    for (size_t i = 0; got && i < in->n_guests; i++) {
        if (ws[i].tier_taken > ws[i].step)
            ws[i].reason = REASON_RECLAIM_STREAM_AT_ONCE;
        else if (host_swapped(&in->tun.split, &in->guests[i], &ws[i]) && ws[i].reason == REASON_STEADY)
            ws[i].reason = REASON_HOST_SWAPS;
    }
}

/* What tier t holds beyond this tick: a donor whose balloon is still
 * moving gives again once it has arrived.  Starts the tier's count. */
static uint64_t tier_unbounded(const policy_input *in, work *ws, tier t)
{
    uint64_t unbounded = 0;
    for (size_t i = 0; i < in->n_guests; i++) {
        ws[i].tier_taken = 0;
        if (is_donor(&in->guests[i], &ws[i]))
            unbounded += tier_supply(&in->guests[i], &ws[i], t, false);
    }
    return unbounded;
}

/* Reclaim to the high watermark, plus whatever the growth above costs
 * beyond what the host has down to min. */
uint64_t reclaim_to_high(const policy_input *in, const split_state *st, work *ws, const host_account *h,
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
        uint64_t unbounded = tier_unbounded(in, ws, t);
        uint64_t want = need - reclaimed;
        if (want <= later)
            break;
        bool raised = t == TIER_STREAM_CACHE && stream_step_raise(in, ws);
        uint64_t got = reclaim_tier(in, ws, t, raised ? max_u64(unbounded, want - later) : want - later);
        if (raised)
            stream_step_restore(in, ws, got);
        reclaimed += got;
        later += unbounded > got ? unbounded - got : 0;
    }
    return reclaimed;
}

/* Proactive (trim_streams): with the host not short, a stream's page
 * cache, which it will not read again, goes anyway, so that the room is
 * there before anyone needs it; the same bound as under pressure
 * (floor, used and its decaying peak plus the reserve, what a reclaim
 * proved it needs), a step a tick.  Only a guest whose disk reads the
 * host measures: a stream is a guest reading them. */
void trim_streams(const policy_input *in, work *ws)
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
        w->trim_pass = true;
        uint64_t take = tier_supply(g, w, TIER_STREAM_CACHE, true);
        if (take) {
            w->target -= take;
            w->changed += take;
            w->trimmed = true;
            w->reason = REASON_TRIM;
            assert(w->target >= tier_bound(g, w, TIER_STREAM_CACHE));
        }
        w->trim_pass = false;
    }
}

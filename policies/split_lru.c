/*
 * split-lru: the default policy.  Host memory is balanced the way kswapd
 * and the split LRU balance pages (mm/vmscan.c), one level up: a guest is
 * a page, its balloon the eviction, its disk reads and its need the
 * refault (mm/workingset.c).
 *
 * Watermarks.  Reclaim starts when the host's MemAvailable falls below
 * low and goes on until it is back above high; between them, and above
 * high, nothing is taken.  Every change is bounded per tick (a step), and
 * growth only spends what lies above high once that plenty has lasted, so
 * reclaim and growth do not chase each other.
 *
 * Tiers.  What a guest can give, cheapest first, like shrinking the
 * inactive file list before touching anon:
 *
 *      host MemAvailable
 *      high  ----------------------------  reclaim stops here
 *      low   ----------------------------  reclaim starts here
 *      min   ----------------------------  critical: tier 4 too
 *
 *      tier 1  TIER_STREAM_CACHE  a stream's page cache (read once)
 *      tier 2  TIER_FREE          guests' free memory (their headroom)
 *      tier 3  TIER_CACHE         half the cache of other guests
 *      tier 4  TIER_ANON          all the cache of unprotected guests
 *      never   anyone's anonymous memory, Shmem, or what a reclaim
 *              proved a guest needs: below that the host kernel swaps,
 *              as with no balancer
 *
 * Within a tier guests give in proportion to what they can give divided by
 * their shares; a costlier tier is used only for what the cheaper ones
 * cannot cover over the next ticks.  A guest gives nothing while it
 * settles (new, rebooted, or filling its cache from disk), while its
 * balloon frees nothing on the host, or while it is in need.
 *
 * Every balloon leaves its guest a floor: its used memory plus headroom,
 * and (outside tier 4) its decaying peak of used memory plus headroom.
 * Headroom is the reserve, or the largest rise of its used memory within
 * jump_window_s over the last one to two jump_hold_s windows when larger
 * (split_headroom.c): the allocation it has shown it makes.
 *
 * Need first (do no harm).  A guest in need (policies/classify.c: its
 * available memory runs out, or it thrashes) is never a donor and is given
 * what it needs in the tick that shows it, up to its size, whatever the
 * watermarks say, bounded by its use (split_need.c); the others' cheap
 * tiers pay for it.
 *
 * The experiment.  Every reclaim is one (split_experiment.c): for
 * experiment_s after it, a guest that shows need, thrashes, or reads its
 * disks more than before (its page cache was its working set: the
 * host-side refault) gets the memory back and keeps it for keep_s:
 *
 *      take           watched for experiment_s            kept for keep_s
 *   ----+------------------------------------------+ - - - - - - - - - - ->
 *       |  before: its usual reads (at rest), or   |
 *       |  its pace (a reader); thrashing, need or |
 *       |  reads > refault_factor x before +       |
 *       |  refault_min_bps  ==> given back -------->  not taken again
 *       |  nothing          ==> the take stands    |
 *
 * A reader's reads prove a cost only against a pace of its own: not one
 * measured while its QEMU waited for host swap (split_reads.c).  While the
 * host swaps anyone's working set, the streams give all their cache at
 * once (split_tiers.c): a step a tick would have the host swap meanwhile.
 *
 * trim_streams (off by default) takes a stream's cache with the host not
 * short too, as TMO reclaims file pages before it needs to; its experiment
 * is stricter (reads measured against its usual rate; reads that fall by
 * a quarter are a cost too).
 *
 * A tick runs the stages in order (split_decide): observe every guest,
 * hard rules (off, reboot, ceiling, floor), the host's account, need,
 * reclaim to high, proactive trims, growth for comfort, then the decisions
 * and the experiments they start.  The tuned numbers are split_params
 * (policies/split_params.h); their evidence is in policies/README.md.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/split_lru.h"

#define MAX_TRACKED 65536 /* guests remembered at most (the table's bound) */

/* The smallest balloon change worth an operation for g; a balloon this
 * close to its target counts as arrived. */
static uint64_t min_change_of(const policy_tunables *tun, const guest_view *g)
{
    return max_u64(tun->min_change_bytes, g->actual_bytes / 200);
}

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

/* A new entry (all zeros), or a rebooted guest's: a new guest in all but
 * its name, what was learnt of it is void. */
static void remember_new(split_guest *m, const split_params *p, const guest_view *g, double now)
{
    if (g->rebooted) {
        guest_table_key key = m->key;
        memset(m, 0, sizeof(*m));
        m->key = key;
    }
    if (m->known)
        return;
    m->known = true;
    m->credit.rss_seen = -1;
    reads_init(&m->reads, p, g, now);
    headroom_init(&m->headroom, now);
    frees_nothing_init(&m->fn);
    m->inflated_at_s = -1;
}

/* A balloon seen coming down counts as inflating for inflate_grace_s (a
 * slow inflation of a big guest moves less than a balloon operation a
 * tick). */
static bool observe_inflation(split_guest *m, const split_params *p, const guest_view *g, double now)
{
    if (g->actual_bytes < m->actual_seen)
        m->inflated_at_s = now;
    m->actual_seen = g->actual_bytes;
    return m->inflated_at_s >= 0 && now - m->inflated_at_s <= p->inflate_grace_s;
}

/* A rebooted guest's size back is held until its balloon is there (or
 * reboot_hold_s, for a driver that never loads); it settles from then. */
static void observe_reboot(split_guest *m, const policy_input *in, const guest_view *g)
{
    bool back = g->stats_valid && !g->pending_target_bytes &&
                g->actual_bytes + min_change_of(&in->tun, g) >= m->reboot.to;
    if (m->reboot.to && (back || in->now_s - m->reboot.at_s >= in->tun.split.reboot_hold_s)) {
        m->reboot.to = 0;
        m->reads.settled = 0; /* it settles from when its memory is back */
    }
}

/* Stage 1a. What the host measures of a guest, remembered: every tracker
 * observed once, before any rule reads it; and the work it starts from.
 * Returns its memory (NULL when the table is full), valid until the next
 * guest's. */
static split_guest *observe_guest(const policy_input *in, split_state *st, size_t i, work *w)
{
    const guest_view *g = &in->guests[i];
    const split_params *p = &in->tun.split;
    double now = in->now_s;
    w->target = g->pending_target_bytes ? g->pending_target_bytes : g->actual_bytes;
    w->moving = g->pending_target_bytes && g->pending_target_bytes < g->actual_bytes;
    w->inflated = w->moving;
    w->moving_to = g->pending_target_bytes;
    w->step = step_of(&in->tun, g);
    w->reserve = guest_reserve(g, in->tun.reserve_percent, in->tun.reserve_min_bytes);
    w->reason = REASON_STEADY;
    split_guest *m = guest_table_get(&st->memory, i, guest_key_of(g));
    if (!m)
        return NULL;
    remember_new(m, p, g, now);
    headroom_observe(&m->headroom, p, g, now);
    reads_observe(&m->reads, p, g, now);
    w->reserve = headroom_of(&m->headroom, g, w->reserve);
    frees_nothing_observe(&m->fn, p, g, now);
    w->frees_nothing = m->fn.frees_nothing;
    w->inflated |= observe_inflation(m, p, g, now);
    observe_reboot(m, in, g);
    w->settling = reads_settling(&m->reads, p, now);
    w->credit = need_allowance(&m->credit, g, w->step, &w->touched);
    experiment_ask_again(&m->exp, p, g, now);
    w->learnt = g->stats_valid ? experiment_feedback(&m->exp, p, &m->reads, g, w->reserve, now) : REASON_NONE;
    if (g->stats_valid && reuse_observe(&m->reuse, p, g, w->learnt, now))
        w->learnt = experiment_refault(&m->exp, p, g, w->reserve, now); /* the probe's */
    w->keep = m->exp.keep_bytes;
    w->keep_backed = m->exp.keep_backed;
    w->cache_hot = m->exp.cache_hot;
    w->verdict = m->reuse.verdict;
    w->probe_pending = reuse_probe_pending(&m->reuse);
    w->probing = reuse_probing(&m->reuse, p, now);
    if (!g->streaming)
        m->exp.trim_cost = false;
    w->trim_cost = m->exp.trim_cost;
    w->trimmed_lately = m->exp.trimmed_at_s > 0 && now - m->exp.trimmed_at_s < p->keep_s;
    w->watched = reads_watched(&m->reads, p, now);
    return m;
}

/* A rebooted guest's size back: its start-up must not hit the wall its
 * balloon kept from before, and with no balancer it would have its whole
 * size; it gives again once settled.  reboot_ack_bytes short of its
 * size: QEMU (7.2) keeps the balloon size the guest's driver last
 * acknowledged across a reset, and a driver that loads with nothing to
 * do acknowledges nothing, so at exactly its whole size the host would
 * read the old squeeze until the next move. */
static uint64_t reboot_size(const split_params *p, const guest_view *g)
{
    return g->ceiling_bytes >= g->max_bytes && g->ceiling_bytes > p->reboot_ack_bytes
               ? g->ceiling_bytes - p->reboot_ack_bytes
               : g->ceiling_bytes;
}

static void fix(work *w, uint64_t target, decision_reason why)
{
    w->fixed = true;
    w->target = target;
    w->reason = why;
}

/* Stage 1b. Hard rules first: off, reboot, a balloon that frees nothing,
 * ceiling, floor. */
static void hard_rules(const policy_input *in, const guest_view *g, work *w, split_guest *m)
{
    bool auto_mode = g->policy.mode == VM_MODE_AUTO;
    if (g->policy.mode == VM_MODE_OFF) {
        fix(w, w->target, REASON_MODE_OFF);
    } else if (g->rebooted && (g->actual_bytes < g->ceiling_bytes ||
                               (g->pending_target_bytes && g->pending_target_bytes < g->ceiling_bytes))) {
        fix(w, reboot_size(&in->tun.split, g), REASON_REBOOTED);
        if (m) {
            m->reboot.to = w->target;
            m->reboot.at_s = in->now_s;
        }
    } else if (m && m->reboot.to && auto_mode) {
        fix(w, min_u64(m->reboot.to, g->ceiling_bytes), REASON_REBOOT_ON_ITS_WAY);
    } else if (w->frees_nothing && g->stats_valid && auto_mode && g->actual_bytes < g->ceiling_bytes) {
        fix(w, g->ceiling_bytes, REASON_FREES_NOTHING);
    } else if (g->actual_bytes > g->ceiling_bytes) {
        fix(w, g->ceiling_bytes, REASON_ABOVE_CEILING);
    } else if (g->actual_bytes < g->floor_bytes) {
        fix(w, min_u64(g->floor_bytes, g->ceiling_bytes), REASON_BELOW_FLOOR);
    } else if (!g->stats_valid) {
        w->reason = REASON_NO_STATS;
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
     * pace) only once the host has not been short for pace_watch_s: the
     * average still holds a stream slowed by a shortage just relieved */
    h.relieved = st->was_short && in->now_s - st->short_at_s < in->tun.split.pace_watch_s;
    /* comfort is paid from lasting plenty (grow_for_comfort) */
    h.short_lately = st->was_short && in->now_s - st->short_at_s < in->tun.split.experiment_s;
    return h;
}

static int by_shares_desc(const void *a, const void *b, void *ctx)
{
    const guest_view *g = ctx;
    unsigned sa = g[*(const size_t *)a].policy.shares, sb = g[*(const size_t *)b].policy.shares;
    if (sa != sb)
        return sa > sb ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* Grow g for comfort from budget, a step at most; returns what it took. */
static uint64_t comfort_one(const policy_tunables *tun, const guest_view *g, work *w, uint64_t budget)
{
    if (!is_adjustable(g, w) || w->target >= g->ceiling_bytes)
        return 0;
    if (g->available_bytes >= pct(g->actual_bytes, tun->comfort_percent))
        return 0;
    /* trimmed lately: what it had available was stream cache, and growing
     * it for comfort would refill it to be trimmed again (need still grows
     * it) */
    if (w->trimmed_lately || w->trimmed)
        return 0;
    uint64_t add = min_u64(min_u64(w->step, g->ceiling_bytes - w->target), budget);
    w->target += add;
    w->reason = REASON_COMFORT;
    assert(w->target <= g->ceiling_bytes);
    return add;
}

/* Stage 6. Plenty: guests short of available memory grow from the
 * surplus, highest shares first. */
static void grow_for_comfort(const policy_input *in, const split_state *st, work *ws, const host_account *h,
                             uint64_t grown)
{
    /* never promise memory the host does not have: comfort is paid from
     * what is free now, not from a balloon on its way down (an inflation
     * takes seconds to minutes, and what the host swaps meanwhile is
     * what it lacks), nor from what growth already asked for */
    uint64_t have = min_u64(h->avail, h->free_now);
    uint64_t surplus = have > in->wm.high ? have - in->wm.high : 0;
    /* and from lasting plenty only: not while the last shortage's reclaim
     * is watched (experiment_s).  A surplus that reclaim just made is its
     * doing; paid back for comfort at once, the guest touches again what
     * the host must find again, and the next shortage takes it again
     * (need is answered at once all the same: stage 3) */
    if (st->reclaiming || h->short_lately || surplus <= grown)
        return;
    uint64_t budget = surplus - grown;
    size_t *order = malloc(in->n_guests * sizeof(*order) + 1);
    if (!order)
        return;
    for (size_t i = 0; i < in->n_guests; i++)
        order[i] = i;
    qsort_r(order, in->n_guests, sizeof(*order), by_shares_desc, (void *)in->guests);
    for (size_t k = 0; k < in->n_guests && budget > 0; k++)
        budget -= comfort_one(&in->tun, &in->guests[order[k]], &ws[order[k]], budget);
    free(order);
}

/* Stage 7: the decisions, and what each one starts (a reclaim's
 * experiment, a trim, a grant kept) remembered. */
static void emit_decisions(const policy_input *in, split_state *st, const work *ws, const host_account *h,
                           policy_output *out)
{
    const split_params *p = &in->tun.split;
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        const work *w = &ws[i];
        uint64_t min_change = min_change_of(&in->tun, g);
        /* floors and ceilings are exact: the last small step to them counts */
        if (w->fixed || w->grew || w->target == g->ceiling_bytes || w->target == g->floor_bytes)
            min_change = 1;
        decision_set(&out->decisions[i], g->actual_bytes, w->target, min_change, w->reason);
        out->decisions[i].headroom_bytes = w->reserve;
        split_guest *m = guest_table_get(&st->memory, i, guest_key_of(g));
        if (m) {
            out->decisions[i].cache_verdict = m->reuse.verdict;
            out->decisions[i].cache_by = m->reuse.by;
            out->decisions[i].cache_verdict_s = m->reuse.at_s;
        }
        if (!m || !out->decisions[i].change)
            continue;
        m->credit.unused += w->on_word;
        if (w->grew && w->target > g->actual_bytes && (g->in_need || g->thrashing))
            experiment_keep_grant(&m->exp, p, g, w->target, w->touched, in->now_s);
        if (w->trimmed)
            m->exp.trimmed_at_s = in->now_s;
        if (w->target < g->actual_bytes && !w->fixed) { /* a reclaim starts an experiment */
            experiment_note_take(&m->exp, p, &m->reads, g, w->trimmed, h->relieved, in->now_s);
            if (!w->trimmed) /* a trim's own experiment judges it */
                reuse_note_take(&m->reuse, p, &m->reads, &m->exp, g, in->now_s);
        }
    }
}

static void decide_nothing(const policy_input *in, policy_output *out)
{
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        decision_set(&out->decisions[i], g->actual_bytes, g->actual_bytes, 1, REASON_NO_MEMORY);
    }
}

/* One tick: the stages in order, cheapest and safest first (need before
 * reclaim, reclaim before proactive moves, growth from what is left). */
static void split_decide(const policy_input *in, void *state, policy_output *out)
{
    split_state *st = state;
    work *ws = calloc(in->n_guests ? in->n_guests : 1, sizeof(*ws));
    if (!ws) {
        decide_nothing(in, out);
        return;
    }
    for (size_t i = 0; i < in->n_guests; i++)
        hard_rules(in, &in->guests[i], &ws[i], observe_guest(in, st, i, &ws[i]));
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

/*
 * Need first (split-lru's stage 3): a guest in need (policies/classify.c:
 * its available memory runs out, or it thrashes) or one a reclaim just
 * cost is given memory in the tick that shows it.
 */
#include <assert.h>

#include "policies/split_lru.h"

uint64_t untouched_of(const guest_view *g)
{
    return g->host_rss_bytes >= 0 && g->actual_bytes > (uint64_t)g->host_rss_bytes
               ? g->actual_bytes - (uint64_t)g->host_rss_bytes : 0;
}

/* A guest's word (available memory running out) and its swap-ins are
 * backed by the host only when the memory it is given gets used: what its
 * QEMU has touched (resident + swapped) grows.  What was given on its word
 * or swap-ins and not yet seen used is "unused"; a guest may be given up to
 * twice the larger of a step and what it was seen to touch last tick, less
 * what is unused.  An allocating guest gets memory as fast as it uses it;
 * a guest that only says it needs memory gets two steps, then nothing.
 * Without an RSS (a backend that cannot measure it), or with its QEMU
 * holding its whole size (locked memory, or QEMU's own memory on top of a
 * small guest's), the allowance is a step a tick: such a guest can be
 * given its size a step a tick on its word alone, paid by others' cheap
 * tiers, never their anon. */
uint64_t need_allowance(need_credit *c, const guest_view *g, uint64_t step, uint64_t *touched_out)
{
    *touched_out = 0;
    /* unknown, or its whole memory resident whatever its balloon (locked,
     * preallocated or hugepage memory, a VFIO device: the balloon frees
     * nothing on the host): use cannot show, a step a tick */
    if (g->host_rss_bytes < 0 || (g->max_bytes && (uint64_t)g->host_rss_bytes >= g->max_bytes)) {
        c->rss_seen = -1;
        c->unused = 0;
        return step;
    }
    uint64_t touched = c->rss_seen >= 0 && g->host_rss_bytes > c->rss_seen
                           ? (uint64_t)(g->host_rss_bytes - c->rss_seen) : 0;
    c->rss_seen = g->host_rss_bytes;
    *touched_out = touched;
    c->unused = c->unused > touched ? c->unused - touched : 0;
    /* what was given and not used is memory its QEMU has not touched:
     * never more than that (a balloon that took the memory back since
     * took the grant back with it, and a guest thrashing in all it has
     * must not be held to a grant of long ago) */
    c->unused = min_u64(c->unused, untouched_of(g));
    uint64_t cap = 2 * max_u64(step, touched);
    return cap > c->unused ? cap - c->unused : 0;
}

/* One guest's grant: what a reclaim proved it needs comes back; thrashing
 * (its swap-ins backed by the disk reads the host measures) grows it a
 * step or what it needs, its word (available memory running out) what it
 * needs; both only as far as the memory given gets used (need_allowance). */
static void grant_one(const guest_view *g, work *w)
{
    uint64_t base = max_u64(w->target, g->actual_bytes); /* never shrinks a guest in need */
    uint64_t backed = base;
    if (w->learnt != REASON_NONE)
        backed = max_u64(backed, w->keep);
    backed = min_u64(backed, g->ceiling_bytes);
    uint64_t credit = w->credit, thrash = 0;
    if (g->thrashing) {
        /* a step, or what it needs when more: a guest growing faster than
         * a step a tick would thrash for as long as it grows */
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
    assert(w->target <= max_u64(base, g->ceiling_bytes)); /* a grant never passes its ceiling */
}

/* Why a grant is what it is; adds what it grows to *grown. */
static void grant_reason(const guest_view *g, work *w, uint64_t *grown)
{
    uint64_t heading = g->pending_target_bytes ? g->pending_target_bytes : g->actual_bytes;
    uint64_t base = max_u64(heading, g->actual_bytes);
    *grown += w->target - min_u64(w->target, heading);
    bool add = w->target > base;
    if (!add && base >= g->ceiling_bytes)
        w->reason = g->thrashing ? REASON_THRASHING_AT_CEILING : REASON_NEED_AT_CEILING;
    else if (!add && w->learnt == REASON_NONE)
        w->reason = REASON_NEED_UNUSED;
    else if (g->thrashing)
        w->reason = REASON_THRASHING;
    else if (w->learnt != REASON_NONE)
        w->reason = w->learnt;
    else
        w->reason = REASON_NEED;
}

/* The grant is measured from its balloon as it is (need_bytes is against
 * actual), so asking again while the balloon moves asks for nothing more.
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
 * ever more than its size.  Returns what the grants grow. */
uint64_t grant_need(const policy_input *in, work *ws)
{
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        /* stale guests neither give nor take: a verdict from before their
         * stats went stale is not evidence */
        if (ws[i].fixed || g->policy.mode != VM_MODE_AUTO || !g->stats_valid ||
            !(g->thrashing || g->in_need || ws[i].learnt != REASON_NONE))
            continue;
        grant_one(g, &ws[i]);
    }
    uint64_t grown = 0;
    for (size_t i = 0; i < in->n_guests; i++)
        if (ws[i].grew)
            grant_reason(&in->guests[i], &ws[i], &grown);
    return grown;
}

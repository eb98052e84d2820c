/*
 * A balloon that frees nothing (split_trackers.h).  Only memory that
 * frees host memory is a supply: a guest whose balloon twice in a row took
 * frees_nothing_min_bytes or more of what its QEMU had touched while that
 * fell by less than a quarter of it (locked, preallocated, hugepage or
 * VFIO memory, discards turned off: its balloon took memory from the guest
 * and gave the host little of it) gives nothing more, and what its balloon
 * holds goes back, for jump_hold_s (then it is tried again).  What its
 * QEMU touched includes QEMU's own memory, so which free pages were ever
 * touched cannot be told: only a take beyond its free memory judges,
 * against a baseline at most fn_baseline_s old (QEMU's own memory grows
 * slowly), twice in a row, and never a guest that reports its free pages
 * (handed back already).
 */
#include "policies/split_trackers.h"

void frees_nothing_init(frees_nothing_tracker *f)
{
    f->rss = -1;
}

/* A take judged against the baseline: a strike when its QEMU did not
 * shrink by a quarter of what must have left.  False when it was too
 * small to judge (the baseline stays). */
static bool judge_take(frees_nothing_tracker *f, const split_params *p, const guest_view *g, double now)
{
    /* a balloon takes free pages first, and the host cannot tell which of
     * them its QEMU ever touched (its own memory is in what the host
     * sees): only what it took beyond the guest's free memory (page cache,
     * which was touched) must have left */
    uint64_t took = f->actual - g->actual_bytes;
    uint64_t expect = took > f->free ? took - f->free : 0;
    if (expect < p->frees_nothing_min_bytes)
        return false; /* small steps add up against the same baseline */
    bool fell = g->host_rss_bytes + (int64_t)(expect / 4) <= f->rss;
    f->strikes = fell ? 0 : f->strikes + 1;
    if (f->strikes >= 2) {
        f->frees_nothing = true;
        f->since_s = now;
    }
    return true;
}

void frees_nothing_observe(frees_nothing_tracker *f, const split_params *p, const guest_view *g, double now)
{
    if (f->frees_nothing && now - f->since_s >= p->jump_hold_s) {
        f->frees_nothing = false;
        f->strikes = 0;
    }
    if (g->host_rss_bytes < 0 || !g->stats_valid || g->free_page_reporting_used == 1) {
        f->rss = -1;
        return;
    }
    if (g->pending_target_bytes)
        return; /* judged once the balloon arrived, against the baseline from before */
    if (f->rss >= 0 && g->actual_bytes < f->actual && now - f->at_s <= p->fn_baseline_s &&
        !judge_take(f, p, g, now))
        return;
    f->actual = g->actual_bytes;
    f->free = g->free_bytes;
    f->rss = g->host_rss_bytes;
    f->at_s = now;
}

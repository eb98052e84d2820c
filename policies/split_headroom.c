/*
 * Headroom (split_trackers.h): a guest's largest rise of used memory
 * within jump_window_s is headroom its balloon leaves it for one to two
 * jump_hold_s windows.  An allocation faster than need is seen and
 * answered (a report and a tick, up to 3 s at the shipped 2 s stats period
 * and 1 s tick) cannot be answered in time, so the one it has shown it
 * makes (a job, a compaction, a cron that comes back) is provided for in
 * advance.
 */
#include "policies/split_trackers.h"

void headroom_init(headroom_tracker *h, double now)
{
    h->window_s = now;
}

/* Its used memory's rise within jump_window_s up to this report: above
 * the least it used since the newest report at least that old (at any
 * tick and stats period, what it allocated faster than need is answered).
 * Records the report. */
static uint64_t rise_within(headroom_tracker *h, const split_params *p, uint64_t used, double now)
{
    uint64_t least = used;
    for (unsigned k = 0; k < h->used_n; k++) {
        unsigned i = (h->used_head + USED_SLOTS - k) % USED_SLOTS;
        least = min_u64(least, h->used_v[i]);
        if (now - h->used_at[i] >= p->jump_window_s)
            break;
    }
    h->used_head = (h->used_head + 1) % USED_SLOTS;
    h->used_v[h->used_head] = used;
    h->used_at[h->used_head] = now;
    if (h->used_n < USED_SLOTS)
        h->used_n++;
    return used - least;
}

void headroom_observe(headroom_tracker *h, const split_params *p, const guest_view *g, double now)
{
    if (now - h->window_s >= p->jump_hold_s) {
        h->jump_prev = h->jump;
        h->jump = 0;
        h->window_s = now;
    }
    if (g->stats_fresh) {
        h->last_rise = rise_within(h, p, g->used_bytes, now);
        h->jump = max_u64(h->jump, h->last_rise);
    } else if (!g->stats_valid) {
        h->used_n = 0; /* a rise across a gap in its reports is not one window's */
    }
}

/* Its OOM killer having run below its size says the headroom it had was
 * too small for what it allocates, and the allocation that failed never
 * shows as used memory: twice the headroom (as a backoff doubles: a few
 * kills find the size of an allocation that never shows).  A rise that
 * ate all it had left was bigger than it could show (used memory cannot
 * pass its balloon): twice the rise. */
uint64_t headroom_of(headroom_tracker *h, const guest_view *g, uint64_t reserve)
{
    if (g->oom_killed && g->actual_bytes < g->ceiling_bytes)
        h->jump = min_u64(2 * max_u64(max_u64(h->jump, h->jump_prev), reserve), g->ceiling_bytes);
    else if (h->last_rise && g->available_bytes < reserve / 2 && g->actual_bytes < g->ceiling_bytes)
        h->jump = min_u64(max_u64(h->jump, 2 * h->last_rise), g->ceiling_bytes);
    return max_u64(reserve, max_u64(h->jump, h->jump_prev));
}

#include "policies/vmem_plan.h"

uint64_t vmem_reach(const vmem_device *d)
{
    return d->base_bytes + (d->held ? d->plugged_bytes : d->max_bytes);
}

vmem_split vmem_split_target(uint64_t target, const vmem_device *d)
{
    uint64_t reach = vmem_reach(d), block = d->block_bytes ? d->block_bytes : 1;
    if (target > reach)
        target = reach;
    if (target < block)
        target = block;
    if (d->held) { /* what is plugged stays; the balloon does the rest, within base */
        uint64_t rest = target > d->plugged_bytes + block ? target - d->plugged_bytes : block;
        return (vmem_split){ rest < d->base_bytes ? rest : d->base_bytes, d->plugged_bytes };
    }
    if (target < d->base_bytes)
        return (vmem_split){ target, 0 };
    uint64_t plug = (target - d->base_bytes) / block * block;
    return (vmem_split){ d->base_bytes, plug < d->max_bytes ? plug : d->max_bytes };
}

void vmem_track_init(vmem_track *t)
{
    *t = (vmem_track){ .hold_s = VMEM_HOLD_S };
}

bool vmem_track_held(const vmem_track *t, double now)
{
    return t->held_until > 0 && now < t->held_until;
}

static uint64_t distance(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

vmem_state vmem_track_observe(vmem_track *t, uint64_t plugged, uint64_t requested, double now)
{
    bool first = t->progress_at == 0;
    if (first || requested != t->last_requested ||
        distance(plugged, requested) < distance(t->last_plugged, requested)) {
        t->progress_at = now; /* asked anew, or on its way */
        if (!first && plugged == requested && plugged != t->last_plugged)
            t->hold_s = VMEM_HOLD_S; /* a move done: the next hold starts short again */
    }
    t->last_plugged = plugged;
    t->last_requested = requested;
    if (t->held_until > 0) {
        if (now < t->held_until)
            return VMEM_HELD;
        t->held_until = 0;
        t->progress_at = now;
        return VMEM_RELEASED;
    }
    if (plugged == requested || now - t->progress_at < VMEM_STALL_S)
        return VMEM_FOLLOWING;
    t->held_until = now + t->hold_s;
    t->plug_refused = plugged < requested;
    t->hold_s = t->hold_s * 2 < VMEM_HOLD_MAX_S ? t->hold_s * 2 : VMEM_HOLD_MAX_S;
    return VMEM_NOW_HELD;
}

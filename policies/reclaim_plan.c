/* Host-reclaim decisions; see reclaim_plan.h. */
#include "policies/reclaim_plan.h"

#include <math.h>
#include <stdlib.h>

uint64_t reclaim_shortfall(uint64_t avail, uint64_t low, uint64_t high, uint64_t coming)
{
    if (avail >= low)
        return 0;
    avail += coming;
    return avail < high ? high - avail : 0;
}

size_t reclaim_plan_wants(const host_view *host, const watermarks *wm, const reclaim_node *nodes, size_t n_nodes,
                          uint64_t balloon_reclaim, reclaim_want *out)
{
    size_t k = 0;
    if (n_nodes > 1 && host->total_bytes) {
        /* classzone: each node against its share of the watermarks */
        for (size_t i = 0; i < n_nodes; i++) {
            double share = (double)nodes[i].total_bytes / (double)host->total_bytes;
            uint64_t want = reclaim_shortfall(nodes[i].reclaimable_bytes, (uint64_t)((double)wm->low * share),
                                              (uint64_t)((double)wm->high * share),
                                              (uint64_t)((double)balloon_reclaim * share));
            if (want)
                out[k++] = (reclaim_want){ nodes[i].node, want };
        }
        if (k)
            return k;
    }
    uint64_t want = reclaim_shortfall(host->available_bytes, wm->low, wm->high, balloon_reclaim);
    if (want)
        out[k++] = (reclaim_want){ -1, want };
    return k;
}

bool reclaim_may_take(const guest_view *v)
{
    return !v->thrashing && !v->in_need && v->policy.mode != VM_MODE_OFF && !v->policy.protect;
}

/* qsort has no context argument: order a copy of the candidates. */
typedef struct {
    size_t idx;
    bool streaming;
    uint64_t cold;
} ranked;

static int giving_order(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->streaming != y->streaming)
        return x->streaming ? -1 : 1;
    if (x->cold != y->cold)
        return x->cold > y->cold ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

size_t reclaim_plan_givers(const reclaim_candidate *c, size_t n, size_t *order)
{
    ranked *r = malloc((n ? n : 1) * sizeof(*r));
    if (!r)
        return 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (reclaim_may_take(c[i].view))
            r[k++] = (ranked){ i, c[i].view->streaming, c[i].cold_bytes };
    qsort(r, k, sizeof(*r), giving_order);
    for (size_t i = 0; i < k; i++)
        order[i] = r[i].idx;
    free(r);
    return k;
}

uint64_t reclaim_proactive_room(const guest_view *v, uint64_t ws_bytes, uint64_t cold_bytes,
                                uint64_t swapped_bytes)
{
    if (!v->stats_valid)
        return cold_bytes;
    uint64_t cheap = v->free_bytes + v->reclaimable_cache_bytes;
    uint64_t used = v->actual_bytes > cheap ? v->actual_bytes - cheap : 0;
    uint64_t cold_used = used > ws_bytes ? used - ws_bytes : 0;
    uint64_t room = cold_used > swapped_bytes ? cold_used - swapped_bytes : 0;
    return room < cold_bytes ? room : cold_bytes;
}

uint64_t reclaim_memcg_proactive(const guest_view *v, uint64_t usage_bytes, uint64_t swapped_bytes,
                                 uint64_t left_bytes)
{
    uint64_t probe = (uint64_t)((double)usage_bytes * MEMCG_PROBE_SHARE);
    /* the working set is not measured without a scan: the SLO's feedback
     * (its QEMU's swap-ins) is what stops the probe */
    uint64_t room = reclaim_proactive_room(v, 0, usage_bytes, swapped_bytes);
    uint64_t take = probe < room ? probe : room;
    return take < left_bytes ? take : left_bytes;
}

reclaim_slo reclaim_slo_judge(const reclaim_slo_input *in, reclaim_slo prev)
{
    /* hysteresis: a guest outside comes back inside only below three
     * quarters of each limit, so it does not flap at the edge with every
     * round's average */
    double back = prev == SLO_WITHIN ? 1.0 : SLO_HYSTERESIS;
    double budget_bps = in->budget_percent / 100.0 * (double)in->ws_bytes / 60.0;
    if (in->agent_fresh && in->agent_psi_some >= SLO_GUEST_PSI_LIMIT * back)
        return SLO_PRESSURE;
    /* faulting in more than its whole promotion budget for reasons of its
     * own: not the time to add ours.  Not while the host is short: then
     * those faults are mostly the host kernel's own reclaim, which pages
     * out whatever its LRU says, and cold chunks paged out by us are what
     * spares the guest's working set from it */
    if (!in->host_short && in->foreign_fault_bps > budget_bps * back)
        return SLO_PRESSURE;
    if (in->promoted_bps > budget_bps * back)
        return SLO_OVER_BUDGET;
    return SLO_WITHIN;
}

const char *reclaim_slo_name(reclaim_slo s)
{
    switch (s) {
    case SLO_WITHIN:
        return "within";
    case SLO_OVER_BUDGET:
        return "over-budget";
    case SLO_PRESSURE:
        return "pressure";
    }
    return "?";
}

double reclaim_rate_average(double avg, double bytes, double dt_s)
{
    if (dt_s <= 0)
        return avg;
    double keep = exp(-dt_s / 60.0);
    return avg * keep + bytes / dt_s * (1.0 - keep);
}

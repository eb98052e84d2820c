/* The policies the daemon can be configured with (policy= in the config). */
#include <stdio.h>
#include <string.h>

#include "policies/policy.h"

static const policy_ops *const all[] = { &policy_split_lru, &policy_mom, &policy_mom_vdsm, &policy_proxmox,
                                        &policy_none };

const policy_ops *policy_lookup(const char *name)
{
    for (size_t i = 0; name && i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}

const char *policy_names(void)
{
    return "split-lru, mom, mom-vdsm, proxmox, none";
}

void decision_set(guest_decision *d, uint64_t actual, uint64_t target, uint64_t min_change,
                  decision_reason reason)
{
    d->target_bytes = target;
    uint64_t delta = target > actual ? target - actual : actual - target;
    d->change = delta > 0 && delta >= min_change;
    d->reason = reason;
    d->cache_verdict = CACHE_UNKNOWN; /* split-lru says more after */
    d->cache_by = EVIDENCE_NONE;
    d->cache_verdict_s = 0;
}

bool cadence_due(double *next_s, double interval_s, double now_s)
{
    if (now_s + CADENCE_SLACK_S < *next_s)
        return false;
    do
        *next_s += interval_s;
    while (*next_s <= now_s);
    return true;
}

void policy_tunables_default(policy_tunables *t)
{
    /* per tick: at the 1 s tick, 10 % of a guest's size per 5 s */
    t->step_percent = 2.0;
    t->step_min_bytes = 8 * MIB;
    t->reserve_percent = 5.0;
    t->reserve_min_bytes = 32 * MIB;
    t->comfort_percent = 15.0;
    t->min_change_bytes = 4 * MIB;
    t->trim_streams = false;
    split_params_default(&t->split);
}

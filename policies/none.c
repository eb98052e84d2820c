/* Observe and export only: every guest keeps its balloon. */
#include <stdio.h>

#include "policies/policy.h"

static void none_decide(const policy_input *in, void *state, policy_output *out)
{
    (void)state;
    for (size_t i = 0; i < in->n_guests; i++)
        decision_set(&out->decisions[i], in->guests[i].actual_bytes,
                     in->guests[i].actual_bytes, 1, REASON_OBSERVE_ONLY);
    out->reclaiming = false;
    snprintf(out->summary, sizeof(out->summary), "observe only");
}

const policy_ops policy_none = {
    .name = "none",
    .description = "observe and export only; never balloons",
    .decide = none_decide,
};

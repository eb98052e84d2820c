#include <stdio.h>
#include <stdlib.h>

#include "unit/decision_trace.h"

void decision_trace(const char *policy, const policy_input *in, const policy_output *out)
{
    const char *path = getenv("MEMBAL_DECISION_TRACE");
    if (!path || !*path)
        return;
    /* opened per call: the Check suites run each test in a child of its
     * own, and every line must reach the file in the order it was made */
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    fprintf(f, "%s t=%.3f %s\n", policy, in->now_s, out->summary);
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_decision *d = &out->decisions[i];
        fprintf(f, "  %s %llu -> %llu%s h%llu %s\n", in->guests[i].name ? in->guests[i].name : "?",
                (unsigned long long)in->guests[i].actual_bytes, (unsigned long long)d->target_bytes,
                d->change ? " change" : "", (unsigned long long)d->headroom_bytes, decision_reason_text(d->reason));
    }
    fclose(f);
}

/* The per-tick snapshot the outputs render; see snapshot.h. */
#include "report/snapshot.h"

#include <string.h>

const double tick_bucket_bounds[TICK_BUCKETS] = { 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5 };

void tick_histogram_observe(tick_histogram *h, double seconds)
{
    for (int i = 0; i < TICK_BUCKETS; i++)
        if (seconds <= tick_bucket_bounds[i])
            h->bucket[i]++;
    h->count++;
    h->sum += seconds;
}

void snapshot_free(snapshot *s)
{
    if (!s)
        return;
    g_free(s->guests);
    g_free(s);
}

const snapshot_guest *snapshot_find(const snapshot *s, const char *name)
{
    for (size_t i = 0; name && i < s->n_guests; i++)
        if (strcmp(s->guests[i].name, name) == 0 || strcmp(s->guests[i].uuid, name) == 0)
            return &s->guests[i];
    return NULL;
}

const char *snapshot_guest_state(const snapshot_guest *g)
{
    if (g->policy.mode == VM_MODE_OFF)
        return "off";
    if (!g->view.stats_valid)
        return "no-stats";
    if (g->view.thrashing)
        return "thrashing";
    if (g->view.in_need)
        return "in-need";
    if (g->view.streaming)
        return "streaming";
    return "ok";
}

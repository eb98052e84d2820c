/*
 * mom: oVirt MoM's default balloon policy (doc/balloon.rules), faithfully,
 * as the baseline we compare split-lru against.
 *
 *   host_free_percent = avg(MemFree + Buffers + Cached) / MemTotal
 *   if host_free_percent < pressure_threshold (0.20): shrink every guest
 *     guest_free_percent = host <= pressure_critical (0.05)
 *                          ? host_free_percent - 0.05       (force swapping)
 *                          : min_guest_free_percent (0.20) * host / 0.20
 *     used   = avg(balloon_cur) - avg(mem_unused)
 *     lowest = min(balloon_min, used + guest_free_percent * balloon_cur)
 *     target = max(balloon_cur * (1 - max_balloon_change_percent), lowest)
 *   else: grow every ballooned guest
 *     target = min(balloon_cur * (1 + 0.05), balloon_max), raised to
 *              min(balloon_min, used + 0.20 * balloon_cur)
 *   act only if |target - cur| > min_balloon_change_percent (0.0025) * cur.
 *
 * MoM averages each statistic over its sample history (10 samples by
 * default); so do we.  balloon_min is the guest's floor, balloon_max its
 * ceiling.  In the grow path MoM's rules refer to guest_free_percent, which
 * only the shrink path defines; min_guest_free_percent is what it means.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/policy.h"

#define MOM_PRESSURE_THRESHOLD 0.20
#define MOM_PRESSURE_CRITICAL 0.05
#define MOM_MIN_GUEST_FREE_PERCENT 0.20
#define MOM_MAX_BALLOON_CHANGE_PERCENT 0.05
#define MOM_MIN_BALLOON_CHANGE_PERCENT 0.0025
#define MOM_HISTORY 10
#define MOM_MAX_TRACKED 4096

typedef struct {
    double v[MOM_HISTORY];
    unsigned n, next;
} ring;

typedef struct {
    char uuid[40];
    ring cur, unused;
    bool seen;
} mom_guest;

typedef struct {
    ring host_free;
    mom_guest *guests;
    size_t n, cap;
} mom_state;

static void ring_push(ring *r, double v)
{
    r->v[r->next] = v;
    r->next = (r->next + 1) % MOM_HISTORY;
    if (r->n < MOM_HISTORY)
        r->n++;
}

static double ring_avg(const ring *r)
{
    double s = 0;
    for (unsigned i = 0; i < r->n; i++)
        s += r->v[i];
    return r->n ? s / r->n : 0;
}

static void *mom_state_new(void)
{
    return calloc(1, sizeof(mom_state));
}

static void mom_state_free(void *p)
{
    mom_state *s = p;
    if (s)
        free(s->guests);
    free(s);
}

static mom_guest *history_for(mom_state *s, const char *uuid)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->guests[i].uuid, uuid) == 0)
            return &s->guests[i];
    if (s->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 16;
        if (ncap > MOM_MAX_TRACKED)
            return NULL;
        mom_guest *g = realloc(s->guests, ncap * sizeof(*g));
        if (!g)
            return NULL;
        s->guests = g;
        s->cap = ncap;
    }
    mom_guest *g = &s->guests[s->n++];
    memset(g, 0, sizeof(*g));
    snprintf(g->uuid, sizeof(g->uuid), "%s", uuid);
    return g;
}

/* Forget guests that are gone, so the history cannot grow without bound. */
static void history_sweep(mom_state *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->guests[i].seen)
            continue;
        s->guests[i].seen = false;
        s->guests[k++] = s->guests[i];
    }
    s->n = k;
}

static bool change_big_enough(double cur, double target)
{
    return fabs(target - cur) > MOM_MIN_BALLOON_CHANGE_PERCENT * cur;
}

static void mom_decide(const policy_input *in, void *state, policy_output *out)
{
    mom_state *s = state;
    double total = (double)in->host.total_bytes;
    ring_push(&s->host_free, (double)(in->host.free_bytes + in->host.cached_bytes));
    double host_free_percent = total > 0 ? ring_avg(&s->host_free) / total : 1.0;
    bool pressure = host_free_percent < MOM_PRESSURE_THRESHOLD;

    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        guest_decision *d = &out->decisions[i];
        double cur = (double)g->actual_bytes;
        decision_set(d, g->actual_bytes, g->actual_bytes, 1, "mom: no change");
        if (g->policy.mode == VM_MODE_OFF) {
            snprintf(d->reason, sizeof(d->reason), "mode=off: left alone");
            continue;
        }
        mom_guest *h = history_for(s, g->uuid ? g->uuid : "");
        if (h)
            h->seen = true;
        if (!h || !g->stats_valid)
            continue; /* MoM skips guests without balloon stats */
        ring_push(&h->cur, cur);
        ring_push(&h->unused, (double)g->free_bytes);
        double used = ring_avg(&h->cur) - ring_avg(&h->unused);
        double balloon_min = (double)g->floor_bytes;
        double balloon_max = (double)g->ceiling_bytes;
        double target;
        const char *why;
        if (pressure) {
            double guest_free_percent = host_free_percent <= MOM_PRESSURE_CRITICAL
                                            ? -0.05 + host_free_percent
                                            : MOM_MIN_GUEST_FREE_PERCENT *
                                                  (host_free_percent / MOM_PRESSURE_THRESHOLD);
            double lowest = fmin(balloon_min, used + guest_free_percent * cur);
            target = cur * (1 - MOM_MAX_BALLOON_CHANGE_PERCENT);
            if (target < lowest)
                target = lowest;
            if (!(target <= cur && change_big_enough(cur, target)))
                continue;
            why = host_free_percent <= MOM_PRESSURE_CRITICAL ? "mom: shrink (critical)"
                                                             : "mom: shrink (host pressure)";
        } else {
            if (cur >= balloon_max)
                continue;
            double lowest = fmin(balloon_min, used + MOM_MIN_GUEST_FREE_PERCENT * cur);
            target = cur * (1 + MOM_MAX_BALLOON_CHANGE_PERCENT);
            if (target > balloon_max)
                target = balloon_max;
            if (target < lowest)
                target = lowest;
            if (!change_big_enough(cur, target))
                continue;
            why = "mom: grow (no host pressure)";
        }
        if (target < 0)
            target = 0;
        decision_set(d, g->actual_bytes, (uint64_t)target, 1, why);
    }
    history_sweep(s);
    out->reclaiming = pressure;
    snprintf(out->summary, sizeof(out->summary), "mom: host free %.1f%% (%s)",
             host_free_percent * 100, pressure ? "pressure" : "no pressure");
}

const policy_ops policy_mom = {
    .name = "mom",
    .description = "oVirt MoM's default balloon rules (baseline for comparison)",
    .state_new = mom_state_new,
    .state_free = mom_state_free,
    .decide = mom_decide,
};

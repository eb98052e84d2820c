/* Cold-chunk aging with second chance and refault feedback; see cold_lru.h. */
#include "policies/cold_lru.h"

#include <stdlib.h>
#include <string.h>

#define MIB (1024ULL * 1024ULL)

void cold_tunables_default(cold_tunables *t)
{
    t->min_cold_age = 3;
    t->max_cold_age = 60;
    t->min_budget_bytes = 4 * MIB;
    t->max_budget_bytes = 256 * MIB;
    t->calm_scans = 30;
}

static bool pow2(uint64_t v) { return v && !(v & (v - 1)); }

int cold_lru_init(cold_lru *l, size_t n_chunks, uint64_t chunk_bytes, uint64_t page_bytes,
                  const cold_tunables *t)
{
    memset(l, 0, sizeof(*l));
    if (!n_chunks || !pow2(chunk_bytes) || !pow2(page_bytes) || page_bytes > chunk_bytes)
        return -1;
    l->chunks = calloc(n_chunks, sizeof(*l->chunks));
    if (!l->chunks)
        return -1;
    l->n_chunks = n_chunks;
    l->chunk_bytes = chunk_bytes;
    l->page_bytes = page_bytes;
    l->tun = *t;
    if (l->tun.max_cold_age < l->tun.min_cold_age)
        l->tun.max_cold_age = l->tun.min_cold_age;
    if (l->tun.max_budget_bytes < l->tun.min_budget_bytes)
        l->tun.max_budget_bytes = l->tun.min_budget_bytes;
    l->cold_age = l->tun.min_cold_age;
    l->budget_bytes = l->tun.max_budget_bytes;
    return 0;
}

void cold_lru_free(cold_lru *l)
{
    free(l->chunks);
    l->chunks = NULL;
    l->n_chunks = 0;
}

/* A refault within the window: the threshold was shorter than this
 * guest's reuse distance.  Move past it and back off. */
static void refault_feedback(cold_lru *l, uint32_t distance)
{
    uint32_t want = distance + 1;
    if (want > l->tun.max_cold_age)
        want = l->tun.max_cold_age;
    if (want > l->cold_age)
        l->cold_age = want;
    l->budget_bytes /= 2;
    if (l->budget_bytes < l->tun.min_budget_bytes)
        l->budget_bytes = l->tun.min_budget_bytes;
    l->calm = 0;
}

static void calm_feedback(cold_lru *l)
{
    if (++l->calm < l->tun.calm_scans)
        return;
    l->calm = 0;
    if (l->cold_age > l->tun.min_cold_age)
        l->cold_age--;
    uint64_t grown = l->budget_bytes + l->budget_bytes / 4;
    if (grown < l->budget_bytes + l->tun.min_budget_bytes)
        grown = l->budget_bytes + l->tun.min_budget_bytes;
    l->budget_bytes = grown > l->tun.max_budget_bytes ? l->tun.max_budget_bytes : grown;
}

size_t cold_lru_age(cold_lru *l, const chunk_obs *obs)
{
    size_t refaults = 0;
    uint32_t worst_distance = 0;
    for (size_t i = 0; i < l->n_chunks; i++) {
        cold_chunk *c = &l->chunks[i];
        bool ref = obs[i].referenced;
        switch (c->list) {
        case CHUNK_ACTIVE:
            if (ref) {
                c->idle_scans = 0;
            } else {
                c->list = CHUNK_INACTIVE;
                c->second_chance = false;
                c->idle_scans = 1;
            }
            break;
        case CHUNK_INACTIVE:
            if (!ref) {
                c->idle_scans++;
            } else if (c->second_chance) {
                c->list = CHUNK_ACTIVE;
                c->second_chance = false;
                c->idle_scans = 0;
            } else {
                c->second_chance = true;
                c->idle_scans = 0;
            }
            break;
        case CHUNK_EVICTED: {
            uint32_t since = l->scan - c->evicted_at;
            if (ref) {
                uint32_t distance = c->idle_at_evict + since;
                if (distance <= l->tun.max_cold_age) {
                    refaults++;
                    l->refault_pages_total += obs[i].back_pages;
                    if (distance > worst_distance)
                        worst_distance = distance;
                }
                c->list = CHUNK_ACTIVE;
                c->idle_scans = 0;
                c->second_chance = false;
            } else if (obs[i].back_pages > 0) {
                /* a few pages came back: used, if too little for a
                 * refault; watch it again from the start */
                c->list = CHUNK_INACTIVE;
                c->second_chance = false;
                c->idle_scans = 0;
            } else if (obs[i].resident_pages > 0 && since > 0) {
                /* part of it did not go out; keep aging what is left */
                c->list = CHUNK_INACTIVE;
                c->idle_scans = c->idle_at_evict + since;
            }
            break;
        }
        }
    }
    if (refaults) {
        l->refaults_total += refaults;
        refault_feedback(l, worst_distance);
    } else {
        calm_feedback(l);
    }
    l->scan++;
    return refaults;
}

typedef struct {
    size_t idx;
    uint32_t idle;
} candidate;

static int oldest_first(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->idle != y->idle)
        return x->idle > y->idle ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

static bool is_candidate(const cold_lru *l, const cold_chunk *c, const chunk_obs *o, uint32_t min_idle)
{
    return c->list == CHUNK_INACTIVE && c->idle_scans >= l->cold_age && c->idle_scans >= min_idle &&
           o->resident_pages > 0;
}

size_t cold_lru_pick(const cold_lru *l, const chunk_obs *obs, uint64_t budget, size_t *out,
                     size_t max_out, uint64_t *bytes)
{
    return cold_lru_pick_idle(l, obs, 0, budget, out, max_out, bytes);
}

size_t cold_lru_pick_idle(const cold_lru *l, const chunk_obs *obs, uint32_t min_idle, uint64_t budget, size_t *out,
                          size_t max_out, uint64_t *bytes)
{
    *bytes = 0;
    if (budget > l->budget_bytes)
        budget = l->budget_bytes;
    candidate *cand = malloc(l->n_chunks * sizeof(*cand));
    if (!cand)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < l->n_chunks; i++)
        if (is_candidate(l, &l->chunks[i], &obs[i], min_idle))
            cand[n++] = (candidate){ i, l->chunks[i].idle_scans };
    qsort(cand, n, sizeof(*cand), oldest_first);
    size_t picked = 0;
    for (size_t k = 0; k < n && picked < max_out; k++) {
        uint64_t b = (uint64_t)obs[cand[k].idx].resident_pages * l->page_bytes;
        if (*bytes + b > budget)
            continue;
        out[picked++] = cand[k].idx;
        *bytes += b;
    }
    free(cand);
    return picked;
}

void cold_lru_mark_evicted(cold_lru *l, size_t idx, uint64_t resident_bytes)
{
    if (idx >= l->n_chunks)
        return;
    cold_chunk *c = &l->chunks[idx];
    c->idle_at_evict = c->idle_scans;
    c->evicted_at = l->scan;
    c->list = CHUNK_EVICTED;
    c->second_chance = false;
    l->evictions_total++;
    l->evicted_bytes_total += resident_bytes;
}

uint64_t cold_lru_cold_bytes(const cold_lru *l, const chunk_obs *obs)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < l->n_chunks; i++)
        if (is_candidate(l, &l->chunks[i], &obs[i], 0))
            sum += (uint64_t)obs[i].resident_pages * l->page_bytes;
    return sum;
}

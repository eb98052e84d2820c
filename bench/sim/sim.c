/*
 * bench/sim: the policies at scale, without I/O.  A trace-driven model of
 * N guests on an overcommitted host (working-set guests, streaming guests,
 * idle guests, and working sets that grow midway) is stepped for T ticks;
 * each tick the real classify + policy code (libpolicy) decides, and the
 * model applies the balloon targets.  Prints the decision cost (ns per
 * guest per tick) and how stable and how good the decisions were.
 *
 * Usage: sim [--guests N] [--ticks T] [--overcommit X] [--seed S] [--policy NAME]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policies/classify.h"
#include "policies/policy.h"

typedef enum { K_WORKSET, K_STREAM, K_IDLE, K_GROWING, K_KINDS } kind;
static const char *const kind_name[K_KINDS] = { "working-set", "streaming", "idle", "growing" };

typedef struct {
    kind k;
    uint64_t max, actual;
    uint64_t anon;        /* memory the workload needs resident */
    uint64_t cache_want;  /* page cache it would fill */
    uint64_t cache;
    uint64_t grow_to;     /* K_GROWING: anon after the midpoint */
    uint64_t swap_in_total;
    classify_state cls;
    int last_dir, flips, moves;
    unsigned thrash_ticks, short_ticks;
} sim_guest;

static uint64_t rng = 88172645463325252ULL;
static uint64_t xr(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct {
    double ns_per_guest_tick;
    double moves_per_guest, flips_per_guest;
    double short_pct[K_KINDS];      /* ticks a guest had less than it needs, % */
    double thrash_pct[K_KINDS];
    double host_critical_pct;
    uint64_t final_actual[K_KINDS], final_need[K_KINDS];
} sim_result;

static void run(const policy_ops *ops, size_t n, unsigned ticks, double overcommit, sim_result *r)
{
    sim_guest *g = calloc(n, sizeof(*g));
    guest_view *v = calloc(n, sizeof(*v));
    guest_decision *d = calloc(n, sizeof(*d));
    char (*names)[24] = calloc(n, 24);
    uint64_t sum_max = 0;
    rng = 88172645463325252ULL;
    for (size_t i = 0; i < n; i++) {
        sim_guest *s = &g[i];
        s->k = (kind)(xr() % K_KINDS);
        s->max = (1 + xr() % 8) * GIB;
        s->actual = s->max;
        switch (s->k) {
        case K_WORKSET: s->anon = s->max * (50 + xr() % 30) / 100; s->cache_want = s->max / 10; break;
        case K_STREAM: s->anon = s->max / 8; s->cache_want = 64 * GIB; break;
        case K_IDLE: s->anon = s->max / 10; s->cache_want = s->max / 20; break;
        default: s->anon = s->max * 30 / 100; s->grow_to = s->max * 70 / 100; s->cache_want = s->max / 10; break;
        }
        snprintf(names[i], 24, "g%zu", i);
        sum_max += s->max;
    }
    uint64_t host_total = (uint64_t)((double)sum_max / overcommit);
    policy_input in = { .n_guests = n, .guests = v };
    policy_tunables_default(&in.tun);
    in.host.total_bytes = host_total;
    in.wm.min = host_total / 50;
    in.wm.low = host_total / 20;
    in.wm.high = host_total * 8 / 100;
    policy_output out = { .decisions = d };
    classify_params cp;
    classify_params_default(&cp);
    void *state = ops->state_new ? ops->state_new() : NULL;
    double decide_ns = 0;
    unsigned critical = 0;
    memset(r, 0, sizeof(*r));
    unsigned kind_count[K_KINDS] = { 0 };

    for (unsigned t = 0; t < ticks; t++) {
        uint64_t used = 0;
        for (size_t i = 0; i < n; i++) {
            sim_guest *s = &g[i];
            if (s->k == K_GROWING && t == ticks / 2)
                s->anon = s->grow_to;
            /* the guest's own memory: anon first, then cache, then free */
            uint64_t resident_anon = s->anon < s->actual ? s->anon : s->actual;
            uint64_t deficit = s->anon - resident_anon;
            uint64_t room = s->actual - resident_anon;
            uint64_t keep_free = room < 16 * MIB ? room : 16 * MIB;
            uint64_t cache_room = room - keep_free;
            s->cache = s->cache_want < cache_room ? s->cache_want : cache_room;
            /* a working set that does not fit swaps: 1/8 of the deficit per tick */
            uint64_t swap_in = deficit / 8;
            s->swap_in_total += swap_in;
            guest_view *gv = &v[i];
            gv->name = names[i];
            gv->uuid = names[i];
            vm_policy_default(&gv->policy);
            gv->max_bytes = s->max;
            gv->actual_bytes = s->actual;
            gv->floor_bytes = s->max / 8;
            gv->ceiling_bytes = s->max;
            gv->stats_valid = true;
            gv->free_bytes = room - s->cache;
            gv->cache_bytes = s->cache;
            gv->available_bytes = room;
            gv->swap_in_bps = (double)swap_in / 5.0;
            gv->major_faults_ps = (double)swap_in / 4096.0 / 5.0;
            classify_update(&s->cls, gv, &cp);
            gv->thrashing = s->cls.thrashing;
            gv->streaming = s->cls.streaming;
            used += s->actual;
            if (t >= ticks / 10) { /* after the first settling period */
                s->thrash_ticks += s->cls.thrashing;
                s->short_ticks += deficit > 0;
            }
        }
        in.now_s = t * 5.0; /* a tick is 5 s */
        in.host.available_bytes = host_total > used ? host_total - used : 0;
        in.host.free_bytes = in.host.available_bytes;
        in.host.cached_bytes = 0;
        critical += in.host.available_bytes < in.wm.min;
        double t0 = now_ns();
        ops->decide(&in, state, &out);
        decide_ns += now_ns() - t0;
        for (size_t i = 0; i < n; i++) {
            if (!d[i].change)
                continue;
            sim_guest *s = &g[i];
            int dir = d[i].target_bytes > s->actual ? 1 : -1;
            if (s->last_dir && dir != s->last_dir)
                s->flips++;
            s->last_dir = dir;
            s->moves++;
            uint64_t tgt = d[i].target_bytes;
            if (tgt < v[i].floor_bytes) /* the daemon's actuator clamps the same way */
                tgt = v[i].floor_bytes;
            s->actual = tgt > s->max ? s->max : tgt;
        }
    }
    r->ns_per_guest_tick = decide_ns / ((double)n * ticks);
    unsigned measured = ticks - ticks / 10;
    for (size_t i = 0; i < n; i++) {
        sim_guest *s = &g[i];
        r->moves_per_guest += s->moves;
        r->flips_per_guest += s->flips;
        r->short_pct[s->k] += 100.0 * s->short_ticks / measured;
        r->thrash_pct[s->k] += 100.0 * s->thrash_ticks / measured;
        r->final_actual[s->k] += s->actual;
        r->final_need[s->k] += s->anon;
        kind_count[s->k]++;
    }
    r->moves_per_guest /= (double)n;
    r->flips_per_guest /= (double)n;
    for (int k = 0; k < K_KINDS; k++) {
        if (kind_count[k]) {
            r->short_pct[k] /= kind_count[k];
            r->thrash_pct[k] /= kind_count[k];
        }
    }
    r->host_critical_pct = 100.0 * critical / ticks;
    if (ops->state_free)
        ops->state_free(state);
    free(g);
    free(v);
    free(d);
    free(names);
}

int main(int argc, char **argv)
{
    size_t n = 1000;
    unsigned ticks = 400;
    double overcommit = 1.5;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--guests") == 0 && i + 1 < argc)
            n = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--ticks") == 0 && i + 1 < argc)
            ticks = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--overcommit") == 0 && i + 1 < argc)
            overcommit = atof(argv[++i]);
        else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: sim [--guests N] [--ticks T] [--overcommit X] [--policy NAME]\n");
            return 2;
        }
    }
    if (n == 0 || ticks < 10 || overcommit < 1.0) {
        fprintf(stderr, "sim: need guests > 0, ticks >= 10, overcommit >= 1\n");
        return 2;
    }
    printf("sim: %zu guests (working-set, streaming, idle, growing at tick %u), %u ticks, %.2fx overcommit\n\n",
           n, ticks / 2, ticks, overcommit);
    printf("%-10s %13s %12s %12s %10s | %s\n", "policy", "ns/guest/tick", "moves/guest", "flips/guest",
           "host crit", "% of ticks short of working set (thrashing) per kind");
    const char *names[] = { "split-lru", "mom", "none" };
    for (size_t p = 0; p < 3; p++) {
        if (only && strcmp(only, names[p]) != 0)
            continue;
        sim_result r;
        run(policy_lookup(names[p]), n, ticks, overcommit, &r);
        printf("%-10s %13.1f %12.1f %12.2f %9.1f%% |", names[p], r.ns_per_guest_tick, r.moves_per_guest,
               r.flips_per_guest, r.host_critical_pct);
        for (int k = 0; k < K_KINDS; k++)
            printf(" %s %.1f%% (%.1f%%)", kind_name[k], r.short_pct[k], r.thrash_pct[k]);
        printf("\n");
    }
    return 0;
}

/*
 * bench/sim: the policies at scale, without I/O.  A trace-driven model of
 * N guests on an overcommitted host is stepped for T ticks of TICK_S (2 s,
 * as in the real benchmark); each tick the real classify + policy code
 * (libpolicy) decides, with policy_input.now_s advancing by the tick
 * length, so the baselines keep their own cadence as they do under
 * balancerd (mom samples every 5 s and decides every 10 s, mom-vdsm every
 * 15 s, proxmox every 10 s: on 2 s ticks, every 3, 5, 8 and 5 ticks), and
 * the model applies the balloon targets.  Every policy in the registry is
 * run over the same guests.  Prints the decision cost (ns per guest per
 * tick) and how stable and how good the decisions were.
 *
 * The guests (kinds after bench/scenarios.py; mix 30/25/15/10/10/10 %,
 * maxima of 1-8 GiB).  "need" is what must be resident, the guest kernel's
 * own memory included; the kinds with swap swap out what does not fit and
 * read back 1/8 of that deficit per tick (swap-in and major faults, which
 * is what classify sees); "short" means the guest holds less than its need.
 *   working-set  need 50-80% of max, cache wants 10%; swaps
 *   streaming    need 12.5%, its cache would fill any size (64 GiB) and is
 *                never re-read; swaps
 *   idle         need 10%, cache 5%; swaps
 *   growing      need 30%, jumping to 70% at half the run; cache 10%; swaps
 *   burst        kernel (KERNEL_RESERVE) + 5% anon, idle on a page cache of
 *                60% of max that it read once and never reads again (what
 *                the balloon squeezes out stays out); at a tick drawn in
 *                [40%, 50%) of the run its anon need rises by 60% of max,
 *                BURST_TICKS ticks to allocate it all (a real allocation
 *                takes seconds: 20-40 MB/s under TCG).  No swap: a tick in which its
 *                need exceeds its balloon (anon above actual minus the
 *                kernel's reserve) is one OOM kill; the guest is sampled at
 *                the edge (no cache, nothing free), the allocation is gone
 *                from the next tick and is retried RETRY_TICKS later.  The
 *                give-back latency is the ticks from the burst to the first
 *                tick its full need is resident ("never" if it never is);
 *                after that it holds the memory as its working set.
 *   cachedb      kernel + 5% anon, and a hot page cache of 60% of max (a
 *                buffered-IO database): short whenever its cache is below
 *                that; read misses are not major faults and it has no swap,
 *                so it reports no swap-in and no faults, only its cache
 *                shrinking (classify sees a big quiet cache: "streaming").
 * Inside a guest memory goes to its need first, then 16 MiB kept free,
 * then page cache; MemFree is what is left, MemAvailable free + cache.
 * Every guest has the daemon's default policy (1000 shares, mode auto) and
 * bounds (floor = max(25% of max, 256 MiB), ceiling = max), and the
 * daemon's default watermarks (2/5/8% of host memory).  The host has
 * sum(max) / overcommit bytes and is charged each guest's balloon size;
 * HOST_CACHE_PERCENT of it, when free, is host page cache (MemFree +
 * Cached = MemAvailable).  Every guest starts at its maximum, so every
 * policy starts from an over-full host.
 *
 * Columns: decision cost; balloon changes and direction reversals per
 * guest; "host crit", % of ticks with host MemAvailable below the min
 * watermark; per kind, % of ticks short of its need (and % classified
 * thrashing), not counting the first 10% of ticks; OOM kills per 100 burst
 * guests; the burst guests' median give-back latency in ticks ("never"
 * when most never got their need) and the % that never did.
 *
 * What the model does not capture: CPU (under TCG the real benchmark's
 * guests also compete for 2 cores); host-level swap (an over-full host is
 * only counted in "host crit", nobody slows down); QEMU's own memory; the
 * agent (no agent reports); free page reporting; balloon latency beyond
 * one tick (a target is reached exactly at the next tick, however large
 * the change); stats staleness (each tick's sample is exact and fresh);
 * the guest kernel's reclaim costs (cache drops and refills instantly,
 * swap-in is a fixed fraction of the deficit); a burst's allocation time
 * and the stalls before an OOM kill (it all happens within one tick).
 * Same seed, same output (except the ns/guest/tick timing).
 *
 * Usage: sim [--guests N] [--ticks T] [--overcommit X] [--seed S] [--policy NAME]
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policies/classify.h"
#include "policies/policy.h"

#define TICK_S 2.0
#define KERNEL_RESERVE (48 * MIB)   /* the guest kernel's own memory (burst, cachedb) */
#define KEEP_FREE (16 * MIB)        /* a guest keeps this much free before caching */
#define RETRY_TICKS 5               /* an OOM-killed allocation comes back after 10 s */
#define BURST_TICKS 4               /* a burst allocates its memory over 8 s */
#define STREAM_READ_BPS (100.0 * 1024 * 1024) /* a streamer reads this whatever its cache */
#define FLOOR_PERCENT 25            /* balancerd's [guests] default_floor_percent */
#define FLOOR_MIN (256 * MIB)       /* ... and default_floor_min */
#define HOST_CACHE_PERCENT 2
#define NEVER UINT_MAX

typedef enum { K_WORKSET, K_STREAM, K_IDLE, K_GROWING, K_BURST, K_CACHEDB, K_KINDS } kind;
static const char *const kind_name[K_KINDS] = { "working-set", "streaming", "idle", "growing", "burst", "cachedb" };
static const unsigned kind_percent[K_KINDS] = { 30, 25, 15, 10, 10, 10 };

typedef struct {
    kind k;
    uint64_t max, actual;
    uint64_t need;        /* memory the workload needs resident now */
    uint64_t base_need;   /* burst: before the burst, and after an OOM kill */
    uint64_t peak_need;   /* growing: after it grows; burst: after the burst */
    uint64_t cache_want;  /* page cache it would fill (cachedb: its hot set) */
    uint64_t cache;
    unsigned event_tick;  /* growing: grows; burst: bursts */
    unsigned retry_tick;  /* burst: the killed allocation comes back (0: none pending) */
    unsigned burst_left;  /* burst: ticks of allocation still to come */
    uint64_t used_prev;   /* what it reported as used last tick */
    unsigned latency;     /* burst: ticks from the burst to its need met; NEVER */
    unsigned ooms;
    classify_state cls;
    int last_dir, flips, moves;
    unsigned thrash_ticks, short_ticks;
} sim_guest;

static uint64_t rng;
static void rng_seed(uint64_t seed)
{
    /* splitmix64 of the seed: any seed, even 0, gives a usable xorshift state */
    uint64_t z = seed + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    rng = (z ^ (z >> 31)) | 1;
}

static uint64_t xr(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t floor_of(uint64_t max)
{
    uint64_t f = max * FLOOR_PERCENT / 100;
    f = f < FLOOR_MIN ? FLOOR_MIN : f;
    return f > max ? max : f;
}

/* The guests, the same for every policy.  Returns sum of their maxima. */
static uint64_t make_guests(sim_guest *g, size_t n, unsigned ticks, uint64_t seed)
{
    uint64_t sum_max = 0;
    rng_seed(seed);
    for (size_t i = 0; i < n; i++) {
        sim_guest *s = &g[i];
        memset(s, 0, sizeof(*s));
        unsigned r = (unsigned)(xr() % 100), acc = 0;
        s->k = K_WORKSET;
        for (int k = 0; k < K_KINDS; k++) {
            acc += kind_percent[k];
            if (r < acc) {
                s->k = (kind)k;
                break;
            }
        }
        s->max = (1 + xr() % 8) * GIB;
        s->actual = s->max;
        s->latency = NEVER;
        switch (s->k) {
        case K_WORKSET: s->need = s->max * (50 + xr() % 30) / 100; s->cache_want = s->max / 10; break;
        case K_STREAM: s->need = s->max / 8; s->cache_want = 64 * GIB; break;
        case K_IDLE: s->need = s->max / 10; s->cache_want = s->max / 20; break;
        case K_GROWING:
            s->need = s->max * 30 / 100;
            s->peak_need = s->max * 70 / 100;
            s->cache_want = s->max / 10;
            s->event_tick = ticks / 2;
            break;
        case K_BURST:
            s->base_need = s->need = KERNEL_RESERVE + s->max / 20;
            s->peak_need = s->base_need + s->max * 60 / 100;
            s->cache_want = s->cache = s->max * 60 / 100;
            s->event_tick = ticks * 4 / 10 + (unsigned)(xr() % (ticks / 10));
            break;
        default: /* K_CACHEDB */
            s->need = KERNEL_RESERVE + s->max / 20;
            s->cache_want = s->max * 60 / 100;
            break;
        }
        sum_max += s->max;
    }
    return sum_max;
}

typedef struct {
    double ns_per_guest_tick;
    double moves_per_guest, flips_per_guest;
    double short_pct[K_KINDS];      /* ticks a guest had less than it needs, % */
    double thrash_pct[K_KINDS];
    unsigned kind_count[K_KINDS];
    double host_critical_pct;
    double ooms_per_100_burst;
    unsigned median_latency;        /* burst give-back, ticks; NEVER */
    double never_pct;               /* burst guests whose need was never met, % */
} sim_result;

static int by_uint(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

/* One tick of guest s's workload and memory, given its balloon; fills gv. */
/* What the guest reports and the host measures of it, its memory laid
 * out; then classify's verdicts on it. */
static void fill_view(const sim_guest *s, guest_view *gv, uint64_t room, uint64_t resident, uint64_t swap_in)
{
    gv->max_bytes = s->max;
    gv->actual_bytes = s->actual;
    gv->floor_bytes = floor_of(s->max);
    gv->ceiling_bytes = s->max;
    gv->stats_valid = gv->stats_fresh = true;
    gv->free_bytes = room - s->cache;
    gv->cache_bytes = s->cache;
    gv->reclaimable_cache_bytes = s->cache; /* no Shmem in these guests */
    gv->available_bytes = room;
    gv->swap_in_bps = (double)swap_in / TICK_S;
    gv->swap_out_bps = 0;
    gv->major_faults_ps = (double)swap_in / 4096.0 / TICK_S;
    uint64_t used = s->actual - room;
    gv->used_bytes = used;
    gv->used_growth_bps = ((double)used - (double)s->used_prev) / TICK_S;
    /* host-measured disk reads: a streamer reads at its pace whatever its
     * cache; a cache database reads back what it lacks; swap-in reads too */
    gv->disk_read_bps = (double)swap_in / TICK_S;
    if (s->k == K_STREAM)
        gv->disk_read_bps += STREAM_READ_BPS;
    else if (s->k == K_CACHEDB)
        gv->disk_read_bps += (double)(s->cache_want - s->cache) / 4 / TICK_S;
    gv->pending_target_bytes = 0; /* balloons arrive by the next tick */
    gv->host_rss_bytes = (int64_t)(resident + s->cache); /* what the guest has touched */
    gv->host_ws_bytes = -1; /* no host reclaim in the simulation */
    gv->host_faults_ps = -1; /* nor QEMU processes */
}

static void guest_step(sim_guest *s, unsigned t, unsigned ticks, guest_view *gv, const classify_params *cp)
{
    if (s->k == K_GROWING && t == s->event_tick)
        s->need = s->peak_need;
    if (s->k == K_BURST && (t == s->event_tick || (s->retry_tick && t == s->retry_tick))) {
        s->burst_left = BURST_TICKS;
        s->retry_tick = 0;
    }
    if (s->k == K_BURST && s->burst_left) {
        s->need = min_u64(s->peak_need, s->need + (s->peak_need - s->base_need) / BURST_TICKS + 1);
        s->burst_left--;
    }
    /* the guest's own memory: its need first, then a little free, then cache */
    uint64_t resident = min_u64(s->need, s->actual);
    uint64_t deficit = s->need - resident;
    uint64_t room = s->actual - resident;
    uint64_t cache_room = room > KEEP_FREE ? room - KEEP_FREE : 0;
    uint64_t swap_in = 0;
    bool is_short = deficit > 0;
    switch (s->k) {
    case K_BURST:
        /* idle: cache the balloon squeezed out is not read back */
        s->cache = min_u64(s->cache, cache_room);
        break;
    case K_CACHEDB:
        s->cache = min_u64(s->cache_want, cache_room);
        is_short = is_short || s->cache < s->cache_want;
        break;
    default:
        s->cache = min_u64(s->cache_want, cache_room);
        swap_in = deficit / 8; /* a working set that does not fit swaps */
        break;
    }
    fill_view(s, gv, room, resident, swap_in);
    s->used_prev = gv->used_bytes;
    classify_update(&s->cls, gv, cp);
    gv->thrashing = s->cls.thrashing;
    gv->streaming = s->cls.streaming;
    gv->in_need = s->cls.need;
    gv->need_bytes = s->cls.need_bytes;
    gv->peak_used_bytes = (uint64_t)s->cls.peak_used;
    if (t >= ticks / 10) { /* after the first settling period */
        s->thrash_ticks += s->cls.thrashing;
        s->short_ticks += is_short;
    }
    if (s->k == K_BURST) {
        if (deficit > 0) { /* no swap: the OOM killer takes the allocation */
            s->ooms++;
            s->need = s->base_need;
            s->burst_left = 0;
            s->retry_tick = t + RETRY_TICKS;
        } else if (s->need == s->peak_need && s->latency == NEVER) {
            s->latency = t - s->event_tick;
        }
    }
}

/* The policy's input for n guests on a host of host_total: the
 * daemon's defaults, at the step the recorded results were taken with. */
static policy_input input_for(const guest_view *v, size_t n, uint64_t host_total)
{
    policy_input in = { .n_guests = n, .guests = v };
    policy_tunables_default(&in.tun);
    /* its 2 s ticks at the step its recorded results were taken with (10 %
     * a tick; the shipped step is per 1 s tick) */
    in.tun.step_percent = 10.0;
    in.tun.step_min_bytes = 32 * MIB;
    in.host.total_bytes = host_total;
    in.wm.min = host_total * 2 / 100;
    in.wm.low = host_total * 5 / 100;
    in.wm.high = host_total * 8 / 100;
    return in;
}

/* The balloon reaches its target by the next tick. */
static void apply_decisions(sim_guest *g, const guest_view *v, const guest_decision *d, size_t n)
{
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

/* Per kind, what the run did to the guests; lat: room for n latencies. */
static void summarize(const sim_guest *g, size_t n, unsigned ticks, unsigned *lat, sim_result *r)
{
    unsigned measured = ticks - ticks / 10;
    size_t n_burst = 0, n_never = 0;
    unsigned ooms = 0;
    for (size_t i = 0; i < n; i++) {
        const sim_guest *s = &g[i];
        r->moves_per_guest += s->moves;
        r->flips_per_guest += s->flips;
        r->short_pct[s->k] += 100.0 * s->short_ticks / measured;
        r->thrash_pct[s->k] += 100.0 * s->thrash_ticks / measured;
        r->kind_count[s->k]++;
        if (s->k == K_BURST) {
            ooms += s->ooms;
            n_never += s->latency == NEVER;
            lat[n_burst++] = s->latency;
        }
    }
    r->moves_per_guest /= (double)n;
    r->flips_per_guest /= (double)n;
    for (int k = 0; k < K_KINDS; k++) {
        if (r->kind_count[k]) {
            r->short_pct[k] /= r->kind_count[k];
            r->thrash_pct[k] /= r->kind_count[k];
        }
    }
    r->median_latency = NEVER;
    if (n_burst) {
        qsort(lat, n_burst, sizeof(*lat), by_uint);
        r->median_latency = lat[(n_burst - 1) / 2]; /* NEVER when most never got it */
        r->ooms_per_100_burst = 100.0 * ooms / (double)n_burst;
        r->never_pct = 100.0 * (double)n_never / (double)n_burst;
    }
}

static void run(const policy_ops *ops, const sim_guest *tmpl, size_t n, unsigned ticks, uint64_t host_total,
                sim_result *r)
{
    sim_guest *g = malloc(n * sizeof(*g));
    guest_view *v = calloc(n, sizeof(*v));
    guest_decision *d = calloc(n, sizeof(*d));
    char (*names)[24] = calloc(n, 24);
    unsigned *lat = calloc(n, sizeof(*lat));
    if (!g || !v || !d || !names || !lat) {
        fprintf(stderr, "sim: out of memory\n");
        exit(1);
    }
    memcpy(g, tmpl, n * sizeof(*g));
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], 24, "g%zu", i);
        v[i].name = names[i];
        v[i].uuid = names[i];
        vm_policy_default(&v[i].policy);
    }
    policy_input in = input_for(v, n, host_total);
    policy_output out = { .decisions = d };
    classify_params cp;
    classify_params_default(&cp);
    void *state = ops->state_new ? ops->state_new() : NULL;
    double decide_ns = 0;
    unsigned critical = 0;
    memset(r, 0, sizeof(*r));

    for (unsigned t = 0; t < ticks; t++) {
        uint64_t used = 0;
        for (size_t i = 0; i < n; i++) {
            guest_step(&g[i], t, ticks, &v[i], &cp);
            used += g[i].actual;
        }
        in.now_s = t * TICK_S;
        in.host.available_bytes = host_total > used ? host_total - used : 0;
        in.host.cached_bytes = min_u64(in.host.available_bytes, host_total * HOST_CACHE_PERCENT / 100);
        in.host.free_bytes = in.host.available_bytes - in.host.cached_bytes;
        critical += in.host.available_bytes < in.wm.min;
        double t0 = now_ns();
        ops->decide(&in, state, &out);
        decide_ns += now_ns() - t0;
        apply_decisions(g, v, d, n);
    }
    r->ns_per_guest_tick = decide_ns / ((double)n * ticks);
    summarize(g, n, ticks, lat, r);
    r->host_critical_pct = 100.0 * critical / ticks;
    if (ops->state_free)
        ops->state_free(state);
    free(g);
    free(v);
    free(d);
    free(names);
    free(lat);
}

static void usage(void)
{
    fprintf(stderr, "usage: sim [--guests N] [--ticks T] [--overcommit X] [--seed S] [--policy NAME]\n"
                    "policies: %s\n", policy_names());
}

/* The shortness columns, then the burst ones. */
static const int short_kinds[] = { K_WORKSET, K_STREAM, K_IDLE, K_GROWING, K_CACHEDB };
#define N_SHORT_KINDS (sizeof(short_kinds) / sizeof(short_kinds[0]))

static void print_row(const char *name, const sim_result *r)
{
    printf("%-10s %13.1f %11.1f %11.2f %8.1f%% |", name, r->ns_per_guest_tick, r->moves_per_guest,
           r->flips_per_guest, r->host_critical_pct);
    for (size_t k = 0; k < N_SHORT_KINDS; k++) {
        int kk = short_kinds[k];
        if (r->kind_count[kk])
            printf(" %5.1f%% (%5.1f%%)", r->short_pct[kk], r->thrash_pct[kk]);
        else
            printf(" %15s", "-");
    }
    if (!r->kind_count[K_BURST]) {
        printf(" | %9s %17s\n", "-", "-");
        return;
    }
    char lat[32];
    if (r->median_latency == NEVER)
        snprintf(lat, sizeof(lat), "never");
    else
        snprintf(lat, sizeof(lat), "%u", r->median_latency);
    printf(" | %9.1f %8s (%5.1f%%)\n", r->ooms_per_100_burst, lat, r->never_pct);
}

int main(int argc, char **argv)
{
    size_t n = 1000;
    unsigned ticks = 400;
    double overcommit = 1.5;
    unsigned long long seed = 1;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--guests") == 0 && i + 1 < argc)
            n = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--ticks") == 0 && i + 1 < argc)
            ticks = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--overcommit") == 0 && i + 1 < argc)
            overcommit = atof(argv[++i]);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--policy") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (n == 0 || ticks < 10 || overcommit < 1.0) {
        fprintf(stderr, "sim: need guests > 0, ticks >= 10, overcommit >= 1\n");
        return 2;
    }
    if (only && !policy_lookup(only)) {
        fprintf(stderr, "sim: unknown policy '%s'\n", only);
        usage();
        return 2;
    }
    sim_guest *tmpl = malloc(n * sizeof(*tmpl));
    if (!tmpl) {
        fprintf(stderr, "sim: out of memory\n");
        return 1;
    }
    uint64_t sum_max = make_guests(tmpl, n, ticks, seed);
    uint64_t host_total = (uint64_t)((double)sum_max / overcommit);
    unsigned count[K_KINDS] = { 0 };
    for (size_t i = 0; i < n; i++)
        count[tmpl[i].k]++;

    printf("sim: %.0f s per tick, %zu guests (%u working-set, %u streaming, %u idle, %u growing at tick %u, "
           "%u burst at ticks %u-%u, %u cachedb), %u ticks, %.2fx overcommit (host %.1f GiB for %.1f GiB of guests), "
           "seed %llu\n\n",
           TICK_S, n, count[K_WORKSET], count[K_STREAM], count[K_IDLE], count[K_GROWING], ticks / 2,
           count[K_BURST], ticks * 4 / 10, ticks * 4 / 10 + ticks / 10 - 1, count[K_CACHEDB], ticks, overcommit,
           (double)host_total / GIB, (double)sum_max / GIB, seed);
    printf("%-10s %13s %11s %11s %9s | %-79s | %s\n", "", "", "", "", "",
           "% of ticks short of working set (thrashing), after the first 10% of ticks",
           "burst guests");
    printf("%-10s %13s %11s %11s %9s |", "policy", "ns/guest/tick", "moves/guest", "flips/guest", "host crit");
    for (size_t k = 0; k < N_SHORT_KINDS; k++)
        printf(" %15s", kind_name[short_kinds[k]]);
    printf(" | %9s %17s\n", "OOM/100", "give-back (never)");

    /* every policy in the registry: "split-lru, mom, mom-vdsm, proxmox, none" */
    char *list = strdup(policy_names());
    if (!list) {
        free(tmpl);
        return 1;
    }
    char *save = NULL;
    for (char *name = strtok_r(list, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
        const policy_ops *ops = policy_lookup(name);
        if (!ops || (only && strcmp(only, name) != 0))
            continue;
        sim_result r;
        run(ops, tmpl, n, ticks, host_total, &r);
        print_row(name, &r);
    }
    free(list);
    free(tmpl);
    return 0;
}

/*
 * Do no harm: multi-tick traces of split-lru against a host model that
 * honours balloon delays (a balloon moves at most BALLOON_RATE per tick;
 * until it arrives the policy sees it as pending), runs the real
 * classifier every tick, and charges the guests the way their workloads
 * would: a guest without swap whose anonymous memory does not fit is
 * OOM-killed (the allocation is lost), a buffered-IO database whose cache
 * shrinks reads the missing part back from its disk, a streamer reads at
 * its disk's rate whatever its cache.  TRACE=1 (with CK_FORK=no) prints
 * the traces tick by tick; for the adversary below,
 * MEMBAL_ADVERSARY_SEEDS=N sets the seeds (1000), ADV_SURVEY=1 lists every
 * failing input x lie instead of stopping at the first, and
 * ADV_ONE="SEED FIELD WAY" traces one run beside its reference.
 */
#include <check.h>

#include "check_run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_proto.h"
#include "core/guest.h"
#include "policies/classify.h"
#include "policies/policy.h"
#include "unit/decision_trace.h"

#define NG 4
#define TICK_S 2.0
#define BALLOON_RATE (128 * MIB)  /* per tick, either way */
#define KERNEL (24 * MIB)         /* what the guest kernel itself keeps */
#define STREAM_BPS (80.0 * MIB)

typedef enum { ANON, STREAMER, CACHEDB } role;

typedef struct {
    role r;
    uint64_t anon;       /* anonymous memory the workload holds */
    uint64_t cache_want; /* page cache it would fill */
    uint64_t cache;      /* page cache it has */
    uint64_t target;     /* the balloon target asked for */
    uint64_t used_prev;
    bool swap;           /* has swap (a non-fitting anon set thrashes) */
    bool host_bound;     /* a streamer reads at a quarter of its pace while the host is short ... */
    bool host_faults;    /* ... and its QEMU waits for host swap then (2048 major faults/s) */
    bool slowed;         /* a streamer reads at a quarter of its pace anyway (its CPU taken) */
    uint64_t slow_below; /* a streamer reads at 60% of its pace with less cache than this */
    uint64_t touched;    /* what its QEMU has touched: all of it at the start (a guest that has
                          * run a while), then what it uses, until a balloon takes it back */
    int fpr;             /* its balloon's free page reporting: 1 on (the model's default), 0 off,
                          * -1 unknown */
    int fpr_used;        /* ... taken by its driver: 1, 0, -1 unknown (the model's default) */
    unsigned ooms;
    classify_state cls;
    /* cumulative counters, for the samples the core ingests */
    double swapin_total, majflt_total, minflt_total, disk_total, qflt_total;
} tguest;

typedef struct trace_ {
    guest_view v[NG];
    guest_decision d[NG];
    tguest t[NG];
    size_t n;
    uint64_t host; /* memory for the guests */
    bool host_short; /* the host was below low at the last observation */
    policy_input in;
    policy_output out;
    classify_params cp;
    void *state;
    unsigned moves;
    void (*lie)(struct trace_ *s); /* rewrites what a lying guest reports, after observe */
    uint64_t balloon_rate;   /* how far a balloon moves per tick (BALLOON_RATE) */
    /* through the core: what each guest reports is a raw sample (and agent
     * lines), ingested by core/guest.c as the daemon does */
    bool core;
    guest cg[NG];
    guest_limits lim;
    void (*lie_raw)(struct trace_ *s, size_t i, guest_sample *smp, agent_report *rep, bool *agent);
} trace;

static void trace_init(trace *s, size_t n, uint64_t host)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    s->host = host;
    s->balloon_rate = BALLOON_RATE;
    s->state = policy_split_lru.state_new();
    policy_tunables_default(&s->in.tun);
    /* the model's own step, not the shipped per-tick one: its expected
     * values were set at 10 % a tick */
    s->in.tun.step_percent = 10.0;
    s->in.tun.step_min_bytes = 32 * MIB;
    classify_params_default(&s->cp);
    s->in.guests = s->v;
    s->in.n_guests = n;
    s->in.now_s = 100.0;
    s->out.decisions = s->d;
}

static void trace_guest(trace *s, size_t i, const char *name, role r, uint64_t max, uint64_t anon,
                        uint64_t cache_want)
{
    guest_view *g = &s->v[i];
    g->name = g->uuid = name;
    vm_policy_default(&g->policy);
    g->max_bytes = g->ceiling_bytes = g->actual_bytes = max;
    g->floor_bytes = 128 * MIB;
    g->stats_valid = g->stats_fresh = true;
    g->disk_read_bps = 0;
    s->t[i] = (tguest){ .r = r, .anon = anon, .cache_want = cache_want, .target = max, .touched = max,
                        .fpr = 1, .fpr_used = -1 };
}

/* What every guest reports, from the model; the classifier runs as the
 * daemon runs it, on each fresh sample. */
static void observe(trace *s)
{
    uint64_t used_total = 0;
    for (size_t i = 0; i < s->n; i++) {
        guest_view *g = &s->v[i];
        tguest *t = &s->t[i];
        uint64_t room = g->actual_bytes > KERNEL + t->anon ? g->actual_bytes - KERNEL - t->anon : 0;
        uint64_t before = t->cache;
        t->cache = t->cache_want < room ? t->cache_want : room;
        if (t->r == CACHEDB && t->cache > before + 64 * MIB)
            t->cache = before + 64 * MIB; /* re-read at the disk's pace */
        if (t->r == STREAMER && t->cache > before + 160 * MIB)
            t->cache = before + 160 * MIB;
        uint64_t anon_res = t->anon + KERNEL < g->actual_bytes ? t->anon : g->actual_bytes - KERNEL;
        g->cache_bytes = g->reclaimable_cache_bytes = t->cache; /* no Shmem in this model */
        g->free_bytes = g->actual_bytes - KERNEL - anon_res - t->cache;
        g->available_bytes = g->free_bytes + t->cache;
        uint64_t used = g->actual_bytes - g->available_bytes;
        g->used_bytes = used;
        g->used_growth_bps = ((double)used - (double)t->used_prev) / TICK_S;
        t->used_prev = used;
        bool short_anon = t->anon + KERNEL > g->actual_bytes;
        g->swap_in_bps = t->swap && short_anon ? 8.0 * MIB : 0;
        g->major_faults_ps = g->swap_in_bps / 4096;
        g->host_faults_ps = t->host_faults && s->host_short ? 2048 : 0;
        if (t->r == STREAMER) /* steady on average, jittery tick to tick (as under TCG) */
            g->disk_read_bps = STREAM_BPS * (0.5 + (double)((unsigned)(s->in.now_s / TICK_S) * 7919u % 101u) / 100.0) *
                               (t->slowed || (t->host_bound && s->host_short) ? 0.25 : 1.0) *
                               (t->cache < t->slow_below ? 0.6 : 1.0);
        else if (t->r == CACHEDB)
            g->disk_read_bps = t->cache < t->cache_want ? (double)(t->cache_want - t->cache) / 4 : 0;
        g->pending_target_bytes = t->target != g->actual_bytes ? t->target : 0;
        /* what it has touched: once touched, resident until its balloon
         * takes it */
        uint64_t in_use = KERNEL + anon_res + t->cache;
        /* free page reporting hands its free pages back */
        t->touched = t->fpr == 1 && t->fpr_used != 0 ? in_use : t->touched > in_use ? t->touched : in_use;
        t->touched = t->touched < g->actual_bytes ? t->touched : g->actual_bytes;
        g->host_rss_bytes = (int64_t)t->touched;
        g->host_ws_bytes = -1; /* host reclaim off */
        g->free_page_reporting = t->fpr;
        g->free_page_reporting_used = t->fpr_used;
        classify_update(&t->cls, g, &s->cp);
        g->thrashing = t->cls.thrashing;
        g->streaming = t->cls.streaming;
        g->filling = t->cls.filling;
        g->in_need = t->cls.need;
        g->need_bytes = t->cls.need_bytes;
        g->peak_used_bytes = (uint64_t)t->cls.peak_used;
        used_total += g->actual_bytes;
    }
    uint64_t avail = s->host > used_total ? s->host - used_total : 0;
    s->in.host.total_bytes = s->host;
    s->in.host.available_bytes = s->in.host.free_bytes = avail;
    s->in.wm.min = s->host * 2 / 100;
    s->in.wm.low = s->host * 5 / 100;
    s->in.wm.high = s->host * 8 / 100;
    s->host_short = avail < s->in.wm.low;
}

/* The model's honest numbers as the backend would hand them over: host
 * truth (balloon size, maximum, QEMU RSS, disk reads) plus the guest's
 * report (sizes, cumulative counters, its timestamp), and an agent line
 * when the guest runs one; a liar's hook rewrites the guest's parts. */
static void observe_core(trace *s)
{
    int64_t wall = (int64_t)(1700000000.0 + s->in.now_s);
    for (size_t i = 0; i < s->n; i++) {
        guest_view *v = &s->v[i];
        tguest *t = &s->t[i];
        t->swapin_total += v->swap_in_bps * TICK_S;
        t->majflt_total += v->major_faults_ps * TICK_S;
        t->minflt_total += 1000.0 * TICK_S;
        t->disk_total += (v->disk_read_bps > 0 ? v->disk_read_bps : 0) * TICK_S;
        t->qflt_total += v->host_faults_ps * TICK_S;
        guest_sample smp = {
            .actual_bytes = (int64_t)v->actual_bytes, .max_bytes = (int64_t)v->max_bytes, .last_update = wall,
            .free_bytes = (int64_t)v->free_bytes, .available_bytes = (int64_t)v->available_bytes,
            .cache_bytes = (int64_t)v->cache_bytes, .total_bytes = (int64_t)v->actual_bytes,
            .swap_in_bytes = (int64_t)t->swapin_total, .swap_out_bytes = (int64_t)t->swapin_total,
            .major_faults = (int64_t)t->majflt_total, .minor_faults = (int64_t)t->minflt_total,
            .rss_bytes = v->host_rss_bytes, .host_ws_bytes = v->host_ws_bytes,
            .disk_read_bytes = (int64_t)t->disk_total, .qemu_major_faults = (int64_t)t->qflt_total,
            .qemu_cpu_ms = -1, .job_ms = -1, .free_page_reporting = t->fpr,
            .free_page_reporting_used = t->fpr_used,
        };
        agent_report rep;
        memset(&rep, 0, sizeof(rep));
        rep.seq = (uint64_t)(s->in.now_s / TICK_S);
        rep.vmstat[AV_PSWPIN] = (int64_t)(t->swapin_total / 4096);
        rep.vmstat[AV_PGMAJFAULT] = (int64_t)t->majflt_total;
        rep.meminfo_kb[AM_TOTAL] = (int64_t)(v->actual_bytes / 1024);
        rep.meminfo_kb[AM_AVAILABLE] = (int64_t)(v->available_bytes / 1024);
        rep.meminfo_kb[AM_CACHED] = (int64_t)(v->cache_bytes / 1024);
        rep.psi_some_avg10 = rep.psi_full_avg10 = 0;
        bool agent = false;
        if (s->lie_raw)
            s->lie_raw(s, i, &smp, &rep, &agent);
        guest *g = &s->cg[i];
        if (agent) { /* as a line: the parser's bounds apply too */
            GString *line = g_string_new("{\"v\":1");
            g_string_append_printf(line, ",\"seq\":%lld,\"vmstat\":{", (long long)rep.seq);
            for (int k = 0; k < AV_COUNT; k++)
                g_string_append_printf(line, "%s\"%s\":%lld", k ? "," : "", agent_vmstat_names[k],
                                       (long long)rep.vmstat[k]);
            g_string_append(line, "},\"meminfo\":{");
            for (int k = 0; k < AM_COUNT; k++)
                g_string_append_printf(line, "%s\"%s\":%lld", k ? "," : "", agent_meminfo_names[k],
                                       (long long)rep.meminfo_kb[k]);
            g_string_append_printf(line, "},\"psi\":{\"some_avg10\":%g,\"full_avg10\":%g}%s}",
                                   rep.psi_some_avg10, rep.psi_full_avg10,
                                   rep.hint_streaming ? ",\"hint\":\"streaming\"" : "");
            agent_feed_line(&g->agent, line->str, line->len, s->in.now_s, v->actual_bytes);
            g_string_free(line, TRUE);
        }
        uint64_t pending = v->pending_target_bytes;
        guest_ingest(g, &smp, wall, s->in.now_s, &s->lim, &s->cp);
        *v = g->view;
        v->pending_target_bytes = pending;
    }
}

/* One tick: observe, decide, move the balloons (at most BALLOON_RATE),
 * then the workloads run: a guest without swap whose anon set does not
 * fit loses the allocation to the OOM killer. */
static void trace_tick(trace *s)
{
    observe(s);
    if (s->core)
        observe_core(s);
    if (s->lie)
        s->lie(s);
    if (!s->core) /* a report a tick, unless stale (the core says for itself) */
        for (size_t i = 0; i < s->n; i++)
            s->v[i].stats_fresh = s->v[i].stats_valid;
    policy_split_lru.decide(&s->in, s->state, &s->out);
    decision_trace(policy_split_lru.name, &s->in, &s->out);
    for (size_t i = 0; i < s->n; i++) {
        guest_view *g = &s->v[i];
        tguest *t = &s->t[i];
        if (s->d[i].change && g->policy.mode != VM_MODE_OFF) { /* as the core acts */
            t->target = s->d[i].target_bytes;
            s->moves++;
        }
        if (t->target > g->actual_bytes)
            g->actual_bytes += t->target - g->actual_bytes < s->balloon_rate ? t->target - g->actual_bytes : s->balloon_rate;
        else if (t->target < g->actual_bytes)
            g->actual_bytes -= g->actual_bytes - t->target < s->balloon_rate ? g->actual_bytes - t->target : s->balloon_rate;
    }
    s->in.now_s += TICK_S;
}

static void trace_free(trace *s)
{
    policy_split_lru.state_free(s->state);
}

/* The workload's allocation after the balloons moved: a guest without swap
 * that cannot fit it is OOM-killed and drops back to base. */
static void allocate(trace *s, size_t i, uint64_t anon, uint64_t base)
{
    tguest *t = &s->t[i];
    t->anon = anon;
    if (!t->swap && t->anon + KERNEL > s->v[i].actual_bytes) {
        t->ooms++;
        t->anon = base;
    }
}

/* Guest i bursts: +40 MiB of anon a tick (20 MiB/s) from base up to top,
 * for 20 ticks.  Returns the ticks it ran within 16 MiB of its balloon. */
static int burst(trace *s, size_t i, uint64_t base, uint64_t top)
{
    int late = 0;
    for (int k = 0; k < 20; k++) {
        uint64_t want = base + (uint64_t)(k + 1) * 40 * MIB;
        trace_tick(s);
        allocate(s, i, want < top ? want : top, base);
        late += s->t[i].anon + KERNEL + 16 * MIB > s->v[i].actual_bytes;
    }
    return late;
}

/* Issue 15's mix: B idles with 300 MiB of cache, then allocates 300 MiB
 * (no swap), next to a database W and a streamer S in a tight host. */
START_TEST(idle_then_burst_without_swap_gets_memory_in_time)
{
    trace s;
    trace_init(&s, 3, 1000 * MIB);
    trace_guest(&s, 0, "B", ANON, 512 * MIB, 40 * MIB, 300 * MIB);
    trace_guest(&s, 1, "W", ANON, 512 * MIB, 380 * MIB, 20 * MIB);
    s.t[1].swap = true;
    trace_guest(&s, 2, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    for (int k = 0; k < 30; k++)
        trace_tick(&s);
    /* idle: B's cache was fair game */
    ck_assert_uint_lt(s.v[0].actual_bytes, 400 * MIB);
    uint64_t b_idle = s.v[0].actual_bytes;
    /* the burst: +40 MiB per tick (20 MiB/s) up to +300 MiB */
    int late = burst(&s, 0, 40 * MIB, 340 * MIB);
    ck_assert_uint_eq(s.t[0].ooms, 0);
    ck_assert_uint_eq(s.t[0].anon, 340 * MIB);
    ck_assert_uint_gt(s.v[0].actual_bytes, b_idle);
    ck_assert_msg(late <= 2, "B ran within 16 MiB of its balloon in %d ticks", late);
    /* W's working set was not the donor: it never thrashed */
    ck_assert(!s.t[1].cls.thrashing);
    ck_assert_uint_ge(s.v[1].actual_bytes, 380 * MIB + KERNEL);
    trace_free(&s);
}
END_TEST

/* The bench's burst-cold (bench settings, run 2 of 3): B's 300 MiB burst
 * stalls halfway (a busy host: its used memory stands still for four
 * ticks), its need verdict lapses, and the memory it was given for the
 * burst must not be taken back as "free memory" before the rest comes
 * (it was: 414 -> 297 MiB, and B's OOM killer ran).  A grant is kept as a
 * give-back is. */
START_TEST(need_grant_is_kept_through_a_stalled_burst)
{
    trace s;
    trace_init(&s, 3, 1000 * MIB);
    trace_guest(&s, 0, "B", ANON, 512 * MIB, 40 * MIB, 0);
    s.t[0].fpr = 0; /* as in the bench: its free memory is resident, a supply */
    trace_guest(&s, 1, "W", ANON, 512 * MIB, 380 * MIB, 20 * MIB);
    s.t[1].swap = true;
    trace_guest(&s, 2, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    for (int k = 0; k < 30; k++)
        trace_tick(&s);
    ck_assert_uint_lt(s.v[0].actual_bytes, 400 * MIB); /* idle: its free memory went */
    uint64_t granted = 0;
    for (int k = 0; k < 24; k++) {
        /* +50 MiB a tick for three ticks, stalled for eight, then the rest */
        uint64_t anon = 40 * MIB + (uint64_t)(k < 3 ? k + 1 : k < 11 ? 3 : k - 7) * 50 * MIB;
        trace_tick(&s);
        allocate(&s, 0, anon < 340 * MIB ? anon : 340 * MIB, 40 * MIB);
        if (k == 3)
            granted = s.t[0].target;
        if (k >= 3 && k < 11)
            ck_assert_msg(s.t[0].target >= granted, "tick %d: B's grant taken back during the stall: %llu -> %llu MiB",
                          k, (unsigned long long)(granted / MIB), (unsigned long long)(s.t[0].target / MIB));
    }
    ck_assert_uint_eq(s.t[0].ooms, 0);
    ck_assert_uint_eq(s.t[0].anon, 340 * MIB);
    trace_free(&s);
}
END_TEST

/* A swapless guest squeezed under host pressure, then growing slowly
 * (8 MiB/s, under the need threshold of growth over the horizon) while
 * the host still has memory above min: growth that eats the reserve is
 * need however slow it is, and it is given memory before its kernel must
 * kill.  With no balancer it keeps its 8 GiB and fits (the reference). */
START_TEST(slow_growth_eating_the_reserve_is_need)
{
    trace s;
    trace_init(&s, 2, 10752 * MIB);
    trace_guest(&s, 0, "G", ANON, 8 * GIB, 3 * GIB, 0);
    s.t[0].fpr = 0; /* its free memory resident: a supply */
    trace_guest(&s, 1, "W", ANON, 4 * GIB, 3584 * MIB, 0);
    s.t[1].swap = true;
    for (int k = 0; k < 30; k++)
        trace_tick(&s);
    uint64_t squeezed = s.v[0].actual_bytes;
    ck_assert_uint_lt(squeezed, 7 * GIB);
    uint64_t anon = 3 * GIB;
    for (int k = 0; k < 200; k++) { /* 400 s: +3.1 GiB, into what the host has above min */
        trace_tick(&s);
        anon += 16 * MIB;
        allocate(&s, 0, anon, 3 * GIB);
    }
    fprintf(stderr, "slow growth: G squeezed to %llu MiB, then %llu MiB for %llu MiB of anon; %u OOM kills; host "
                    "available %llu MiB (min %llu)\n",
            (unsigned long long)(squeezed / MIB), (unsigned long long)(s.v[0].actual_bytes / MIB),
            (unsigned long long)(anon / MIB), s.t[0].ooms, (unsigned long long)(s.in.host.available_bytes / MIB),
            (unsigned long long)(s.in.wm.min / MIB));
    ck_assert_uint_eq(s.t[0].ooms, 0);
    ck_assert_uint_ge(s.v[0].actual_bytes, anon + KERNEL);
    trace_free(&s);
}
END_TEST

/* The same burst with no balancer at all: B keeps 512 MiB and fits.  The
 * trace above must do no worse: this is the reference it is held to. */
START_TEST(burst_reference_without_balancer_fits)
{
    trace s;
    trace_init(&s, 1, 1100 * MIB);
    trace_guest(&s, 0, "B", ANON, 512 * MIB, 40 * MIB, 300 * MIB);
    allocate(&s, 0, 340 * MIB, 40 * MIB);
    ck_assert_uint_eq(s.t[0].ooms, 0);
    trace_free(&s);
}
END_TEST

/* A buffered-IO database whose working set is its page cache looks like a
 * streamer (big cache, no faults) until reclaim takes its cache: its disk
 * reads rise (a file refault seen from the host), it is given the memory
 * back and kept out of the streaming tier; the real streamer gives. */
START_TEST(buffered_io_database_cache_is_not_streaming)
{
    /* also with both QEMUs waiting for host swap while the host is short:
     * C at rest still proves its refault */
    for (int bound = 0; bound < 2; bound++) {
        trace s;
        trace_init(&s, 2, 700 * MIB);
        trace_guest(&s, 0, "C", CACHEDB, 512 * MIB, 40 * MIB, 300 * MIB);
        s.t[0].cache = 300 * MIB;
        trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
        s.t[1].cache = 400 * MIB;
        s.t[0].host_faults = s.t[1].host_faults = s.t[1].host_bound = bound;
        int short_ticks = 0;
        for (int k = 0; k < 60; k++) {
            trace_tick(&s);
            if (k >= 30)
                short_ticks += s.t[0].cache + 16 * MIB < s.t[0].cache_want;
            if (getenv("TRACE"))
                printf("%d C %llu (%s) cache %llu disk %.0f | S %llu (%s) avail %llu\n", k,
                       (unsigned long long)(s.v[0].actual_bytes / MIB), decision_reason_text(s.d[0].reason),
                       (unsigned long long)(s.t[0].cache / MIB), s.v[0].disk_read_bps / MIB,
                       (unsigned long long)(s.v[1].actual_bytes / MIB), decision_reason_text(s.d[1].reason),
                       (unsigned long long)(s.in.host.available_bytes / MIB));
        }
        ck_assert_msg(short_ticks == 0, "C short of its cache in %d of the last 30 ticks", short_ticks);
        ck_assert_uint_lt(s.v[1].actual_bytes, 400 * MIB); /* S gave */
        observe(&s);
        ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.min);
        trace_free(&s);
    }
}
END_TEST

/* Issue 48's mix, as its trace: a double-buffered database D (its shared
 * buffers anonymous here, 200 MiB, beside a 300 MiB data set it reads
 * through its page cache, which never quite fits: it reads 3 MiB/s at
 * rest, as PostgreSQL does when its cache is a little smaller than its
 * data) next to a streamer S, in a host that is short, with the host
 * swapping D's QEMU while it is short.  By read rate D looks like a
 * stream (reads >= 1 MiB/s, cache >= 25 %, few faults); by reuse it is
 * not: a take makes it read more (its refault).  D must never be drained
 * "at once" nor end short of its cache; S gives, and is proven a stream. */
START_TEST(double_buffered_database_beside_a_stream_is_not_the_stream)
{
    trace s;
    trace_init(&s, 2, 700 * MIB);
    trace_guest(&s, 0, "D", CACHEDB, 512 * MIB, 200 * MIB, 300 * MIB);
    s.t[0].cache = 288 * MIB; /* warm: all its room */
    s.t[0].host_faults = true;
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    s.t[1].cache = 400 * MIB;
    s.balloon_rate = 24 * MIB;
    int short_ticks = 0, d_at_once = 0, d_stream_tier = 0;
    bool s_stream = false;
    for (int k = 0; k < 120; k++) {
        trace_tick(&s);
        d_at_once += s.d[0].reason == REASON_RECLAIM_STREAM_AT_ONCE;
        d_stream_tier += s.d[0].change && s.d[0].reason == REASON_RECLAIM_STREAM;
        s_stream |= s.d[1].cache_verdict == CACHE_STREAM;
        if (k >= 90)
            short_ticks += s.t[0].cache + 16 * MIB < 288 * MIB;
        if (getenv("TRACE"))
            printf("%d D %llu (%s) cache %llu disk %.1f %s%s | S %llu (%s) %s | avail %llu\n", k,
                   (unsigned long long)(s.v[0].actual_bytes / MIB), decision_reason_text(s.d[0].reason),
                   (unsigned long long)(s.t[0].cache / MIB), s.v[0].disk_read_bps / MIB,
                   s.v[0].streaming ? "stream-shaped " : "", cache_verdict_text(s.d[0].cache_verdict),
                   (unsigned long long)(s.v[1].actual_bytes / MIB), decision_reason_text(s.d[1].reason),
                   cache_verdict_text(s.d[1].cache_verdict), (unsigned long long)(s.in.host.available_bytes / MIB));
    }
    ck_assert_msg(d_at_once == 0, "D drained at once as a stream %d times", d_at_once);
    ck_assert_msg(d_stream_tier == 0, "D taken as a stream %d times", d_stream_tier);
    ck_assert_msg(short_ticks == 0, "D short of its cache in %d of the last 30 ticks", short_ticks);
    ck_assert_msg(s_stream, "S never proven a stream");
    ck_assert_uint_lt(s.v[1].actual_bytes, 300 * MIB); /* S gave */
    observe(&s);
    ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.min);
    trace_free(&s);
}
END_TEST

/* The bench's seed: a working set W next to a streamer S that reads at a
 * quarter of its pace while the host is short.  Reclaiming S relieves the
 * host and S reads four times faster than while it was squeezed: no
 * refault (a stream's cache is never read again), and S is never given its
 * cache back at W's expense.  Two ways: the balancer watched S unhindered
 * for 80 s, then slowed by CPU for 40 s (its average falls), and then the
 * host got short, with no host swap behind S's slowness (its pace is known
 * and its own: "before" is that pace); or the host was short
 * from the balancer's first sample with S's QEMU waiting for host swap
 * (the bench's many-small: its pace is not its own, and unknown). */
START_TEST(streamer_sped_up_by_relief_is_not_a_refault)
{
    /* also with trim_streams: relieved, the host is not short, and S's
     * cache goes on being taken proactively while it reads faster */
    for (int run = 0; run < 4; run++) {
        int seen = run % 2;
        trace s;
        trace_init(&s, 2, seen ? 2000 * MIB : 640 * MIB);
        s.in.tun.trim_streams = run >= 2;
        trace_guest(&s, 0, "W", ANON, 512 * MIB, 340 * MIB, 20 * MIB);
        s.t[0].swap = true;
        trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
        s.t[1].host_bound = true;
        s.t[1].host_faults = !seen;
        s.host_short = !seen;
        s.balloon_rate = 24 * MIB; /* TCG guests inflate slowly */
        int given_back = 0;
        bool slowed = false;
        for (int k = 0; k < 140; k++) {
            s.t[1].slowed = seen && k >= 40 && k < 64; /* through the first squeeze */
            if (seen && k == 60)
                s.host = 640 * MIB;
            uint64_t was = s.v[1].actual_bytes;
            trace_tick(&s);
            slowed |= s.host_short && s.v[1].disk_read_bps < STREAM_BPS / 2;
            given_back += s.d[1].change && s.d[1].target_bytes > was;
            if (getenv("TRACE"))
                printf("%d W %llu (%s) | S %llu -> %llu (%s) disk %.0f%s | avail %llu\n", k,
                       (unsigned long long)(s.v[0].actual_bytes / MIB), decision_reason_text(s.d[0].reason),
                       (unsigned long long)(s.v[1].actual_bytes / MIB), (unsigned long long)(s.t[1].target / MIB),
                       decision_reason_text(s.d[1].reason), s.v[1].disk_read_bps / MIB, s.v[1].streaming ? " streaming" : "",
                       (unsigned long long)(s.in.host.available_bytes / MIB));
        }
        ck_assert_msg(slowed, "the model never slowed S: the case is not exercised");
        ck_assert_msg(given_back == 0, "S was given memory back %d times (pace %s%s)", given_back,
                      seen ? "seen" : "never seen", s.in.tun.trim_streams ? ", trim_streams" : "");
        ck_assert_uint_lt(s.v[1].actual_bytes, 300 * MIB);
        ck_assert(!s.t[0].cls.thrashing);
        ck_assert_uint_ge(s.v[0].actual_bytes, 340 * MIB + KERNEL);
        trace_free(&s);
    }
}
END_TEST

/* The same pair from a cold start (the bench's cachedb): while C reads its
 * database into free memory it looks like a second stream; it gives
 * nothing until its cache is full, and never ends up short of it. */
START_TEST(database_warming_its_cache_is_not_a_donor)
{
    trace s;
    trace_init(&s, 2, 640 * MIB);
    trace_guest(&s, 0, "C", CACHEDB, 512 * MIB, 40 * MIB, 300 * MIB);
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    s.balloon_rate = 24 * MIB; /* TCG guests inflate slowly: the streamer's cache comes in later */
    uint64_t lowest = s.v[0].actual_bytes;
    bool s_given_back = false;
    int short_ticks = 0;
    for (int k = 0; k < 60; k++) {
        trace_tick(&s);
        if (s.v[0].actual_bytes < lowest)
            lowest = s.v[0].actual_bytes;
        s_given_back |= (s.d[1].reason == REASON_CACHE_HOT);
        if (k >= 10)
            short_ticks += s.t[0].cache + 16 * MIB < s.t[0].cache_want;
        if (getenv("TRACE"))
            printf("%d C %llu (%s) cache %llu free %llu disk %.0f fill %d | S %llu (%s) avail %llu\n", k,
                   (unsigned long long)(s.v[0].actual_bytes / MIB), decision_reason_text(s.d[0].reason),
                   (unsigned long long)(s.t[0].cache / MIB), (unsigned long long)(s.v[0].free_bytes / MIB),
                   s.v[0].disk_read_bps / MIB, s.v[0].filling, (unsigned long long)(s.v[1].actual_bytes / MIB),
                   decision_reason_text(s.d[1].reason), (unsigned long long)(s.in.host.available_bytes / MIB));
    }
    ck_assert_msg(short_ticks == 0, "C short of its cache in %d of the last 50 ticks", short_ticks);
    ck_assert_msg(!s_given_back, "the streamer's jittery reads were taken for refaults");
    /* not squeezed to the bone while the streamer has cache to give (the
     * policy before this test took C's free memory while it filled, down
     * to its working set with nothing to spare) */
    ck_assert_uint_ge(lowest, KERNEL + 40 * MIB + 300 * MIB + 32 * MIB);
    ck_assert_uint_lt(s.v[1].actual_bytes, 400 * MIB); /* S gave */
    trace_free(&s);
}
END_TEST

/* A working set that grows midway (with swap, so it would thrash) is fed
 * from its need before it thrashes, from the streamer. */
/* G's working set grows from 200 to 340 MiB in four ticks, next to a
 * streamer, after 30 quiet ticks; the ticks G's anon did not fit. */
static void growing_setup(trace *s)
{
    trace_init(s, 2, 900 * MIB);
    trace_guest(s, 0, "G", ANON, 512 * MIB, 200 * MIB, 20 * MIB);
    s->t[0].swap = true;
    trace_guest(s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
}

static unsigned growing_short_ticks(trace *s)
{
    for (int k = 0; k < 30; k++)
        trace_tick(s);
    unsigned short_ticks = 0;
    for (int k = 0; k < 30; k++) {
        trace_tick(s);
        allocate(s, 0, k < 4 ? 200 * MIB + (uint64_t)(k + 1) * 35 * MIB : 340 * MIB, 200 * MIB);
        short_ticks += s->t[0].anon + KERNEL > s->v[0].actual_bytes;
    }
    return short_ticks;
}

START_TEST(growing_working_set_is_fed_before_it_thrashes)
{
    trace s;
    growing_setup(&s);
    unsigned thrash = growing_short_ticks(&s);
    ck_assert_msg(thrash <= 2, "G did not fit in %u ticks", thrash);
    ck_assert_uint_ge(s.v[0].actual_bytes, 340 * MIB + KERNEL);
    trace_free(&s);
}
END_TEST

/* The same growing working set through the core, on hosts where what
 * QEMU touched says less than usual: preallocated or locked guest memory
 * (resident all the time, whatever the balloon: growth of use cannot
 * show) and a crashkernel reservation (memory outside MemTotal, never
 * touched).  The host's cross-checks must not starve an honest guest. */
static int honest_variant;

static void honest_host_view(trace *s, size_t i, guest_sample *smp, agent_report *rep, bool *agent)
{
    (void)rep;
    (void)agent;
    if (honest_variant == 1)
        smp->rss_bytes = (int64_t)s->v[i].max_bytes + 40 * (int64_t)MIB; /* all of it, and QEMU's own */
    if (honest_variant == 2) {
        smp->total_bytes -= 160 * (int64_t)MIB; /* reserved at boot, never touched */
        smp->available_bytes = smp->available_bytes > 160 * (int64_t)MIB
                                   ? smp->available_bytes - 160 * (int64_t)MIB : 0;
    }
}

START_TEST(growing_working_set_is_fed_whatever_the_host_sees)
{
    for (honest_variant = 1; honest_variant <= 2; honest_variant++) {
        trace s;
        growing_setup(&s);
        s.core = true;
        s.lim = (guest_limits){ .default_floor_percent = 0, .default_floor_min = 128 * MIB,
                                .stale_seconds = (unsigned)(4 * TICK_S) };
        for (size_t i = 0; i < s.n; i++)
            guest_init(&s.cg[i], s.v[i].name, s.v[i].uuid);
        s.lie_raw = honest_host_view;
        unsigned short_ticks = growing_short_ticks(&s);
        ck_assert_msg(short_ticks <= 3, "variant %d: G did not fit in %u ticks", honest_variant, short_ticks);
        ck_assert_msg(s.v[0].actual_bytes >= 340 * MIB + KERNEL, "variant %d: G at %llu MiB", honest_variant,
                      (unsigned long long)(s.v[0].actual_bytes / MIB));
        trace_free(&s);
    }
}
END_TEST

/* No pressure: a roomy host; nothing moves, whatever the guests do. */
START_TEST(no_pressure_no_moves)
{
    trace s;
    trace_init(&s, 2, 3 * GIB);
    trace_guest(&s, 0, "W", ANON, 512 * MIB, 200 * MIB, 20 * MIB);
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    for (int k = 0; k < 60; k++) {
        trace_tick(&s);
        allocate(&s, 0, 200 * MIB + (uint64_t)(k % 10) * 10 * MIB, 200 * MIB);
    }
    ck_assert_uint_eq(s.moves, 0);
    trace_free(&s);
}
END_TEST

/* trim_streams in a roomy host: the streamer's cache goes down to its
 * bound a step a tick and stays there (never grown back for comfort, never
 * given back: a stream's reads do not rise without its cache); the working
 * set W and the idle guest B with its cache are left alone; when the
 * trimmed streamer then allocates 300 MiB (no swap) at 20 MiB/s it gets the
 * memory in time.  Without trim_streams nothing moves (no_pressure_no_moves). */
START_TEST(trim_streams_takes_only_a_stream_cache_without_pressure)
{
    trace s;
    trace_init(&s, 3, 3 * GIB);
    s.in.tun.trim_streams = true;
    trace_guest(&s, 0, "W", ANON, 512 * MIB, 200 * MIB, 20 * MIB);
    /* 160 MiB of anon: trimmed to its used memory plus the reserve, its
     * cache falls below a quarter of its size (no longer "streaming") and
     * its available memory below comfort_percent */
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 160 * MIB, 8 * GIB);
    trace_guest(&s, 2, "B", ANON, 512 * MIB, 40 * MIB, 300 * MIB);
    unsigned ups = 0, trims = 0;
    for (int k = 0; k < 60; k++) {
        uint64_t was = s.v[1].actual_bytes;
        trace_tick(&s);
        allocate(&s, 0, 200 * MIB + (uint64_t)(k % 10) * 10 * MIB, 200 * MIB);
        ups += s.d[1].change && s.d[1].target_bytes > was;
        trims += s.d[1].change && s.d[1].reason == REASON_TRIM;
        ck_assert_msg(!s.d[0].change && !s.d[2].change, "tick %d: W or B moved (%s, %s)", k, decision_reason_text(s.d[0].reason),
                      decision_reason_text(s.d[2].reason));
        if (getenv("TRACE"))
            printf("%d S %llu -> %llu (%s) disk %.0f%s | avail %llu\n", k,
                   (unsigned long long)(s.v[1].actual_bytes / MIB), (unsigned long long)(s.t[1].target / MIB),
                   decision_reason_text(s.d[1].reason), s.v[1].disk_read_bps / MIB, s.v[1].streaming ? " streaming" : "",
                   (unsigned long long)(s.in.host.available_bytes / MIB));
    }
    ck_assert_uint_gt(trims, 0);
    ck_assert_msg(ups == 0, "S was grown or given back %u times", ups);
    ck_assert_uint_le(s.v[1].actual_bytes, 300 * MIB);
    /* the trimmed streamer bursts: +40 MiB a tick up to +300 MiB */
    int late = burst(&s, 1, 160 * MIB, 460 * MIB);
    ck_assert_uint_eq(s.t[1].ooms, 0);
    ck_assert_uint_eq(s.t[1].anon, 460 * MIB);
    ck_assert_msg(late <= 2, "S ran within 16 MiB of its balloon in %d ticks", late);
    trace_free(&s);
}
END_TEST

/* A trim's last step can leave a stream below comfort_percent of
 * available memory (its cache at a quarter of its 250 MiB, its bound 32
 * MiB above its used memory: 32 of 219.5 MiB is 14.6%).  It is not grown
 * back "for comfort" (which would refill its cache to be trimmed again):
 * its balloon only ever goes down. */
START_TEST(trim_streams_trimmed_stream_is_not_grown_for_comfort)
{
    trace s;
    trace_init(&s, 1, 3 * GIB);
    s.in.tun.trim_streams = true;
    trace_guest(&s, 0, "S", STREAMER, 512 * MIB, 163 * MIB + 512 * 1024, 8 * GIB);
    s.v[0].actual_bytes = s.t[0].target = 250 * MIB;
    /* its used memory from the start: the model's first tick would
     * otherwise see it rise from 0, a need whose grant is kept KEEP_S */
    s.t[0].used_prev = KERNEL + s.t[0].anon;
    int ups = 0, downs = 0;
    bool below_comfort = false;
    for (int k = 0; k < 120; k++) {
        uint64_t was = s.v[0].actual_bytes;
        trace_tick(&s);
        ups += downs && s.d[0].change && s.d[0].target_bytes > was;
        downs += s.d[0].change && s.d[0].target_bytes < was;
        below_comfort |= s.v[0].available_bytes * 100 < s.v[0].actual_bytes * 15;
        if (getenv("TRACE"))
            printf("%d S %llu -> %llu (%s) avail %llu%s\n", k, (unsigned long long)(was / MIB),
                   (unsigned long long)(s.t[0].target / MIB), decision_reason_text(s.d[0].reason),
                   (unsigned long long)(s.v[0].available_bytes / MIB), s.v[0].streaming ? " streaming" : "");
    }
    ck_assert_msg(downs > 0 && below_comfort, "the trim never left S below comfort: the case is not exercised");
    ck_assert_msg(ups == 0, "S was grown %d times after its trim", ups);
    trace_free(&s);
}
END_TEST

/* A reader whose cache is partly its working set (a database a little
 * bigger than its RAM, reading what its cache misses all the time) looks
 * like a stream from the host.  trim_streams takes its cache; its reads
 * rise past twice their usual rate, so it is given the cache back and left
 * alone for KEEP_S.  Its usual rate, not its pace: it warmed its cache up
 * at six times the rate it settles at, and measured against that pace its
 * rise would prove nothing.  (One whose reads rise less -- a database many times
 * its RAM -- is not told apart: policies/README.md, "trim_streams".) */
START_TEST(trim_streams_gives_back_a_cache_read_again)
{
    trace s;
    trace_init(&s, 2, 3 * GIB);
    s.in.tun.trim_streams = true;
    trace_guest(&s, 0, "D", CACHEDB, 512 * MIB, 40 * MIB, 528 * MIB); /* cold: its pace is its warm-up */
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    bool streaming = false, down = false;
    int given_back = 0, short_late = 0, trims = 0;
    for (int k = 0; k < 400; k++) { /* 800 s: past KEEP_S after the give-back */
        uint64_t was = s.v[0].actual_bytes;
        trace_tick(&s);
        streaming |= s.v[0].streaming;
        bool trim = s.d[0].change && s.d[0].target_bytes < was;
        trims += trim && !down; /* a run of trims counts once */
        down = trim || (down && !(s.d[0].change && s.d[0].target_bytes > was));
        given_back += s.d[0].change && s.d[0].target_bytes > was;
        if (k >= 40)
            short_late += s.t[0].cache + 16 * MIB < 448 * MIB;
        if (getenv("TRACE"))
            printf("%d D %llu -> %llu (%s) cache %llu disk %.0f%s | S %llu (%s)\n", k,
                   (unsigned long long)(s.v[0].actual_bytes / MIB), (unsigned long long)(s.t[0].target / MIB),
                   decision_reason_text(s.d[0].reason), (unsigned long long)(s.t[0].cache / MIB), s.v[0].disk_read_bps / MIB,
                   s.v[0].streaming ? " streaming" : "", (unsigned long long)(s.v[1].actual_bytes / MIB),
                   decision_reason_text(s.d[1].reason));
    }
    ck_assert_msg(streaming && trims, "the model never made D look like a stream: the case is not exercised");
    ck_assert_msg(given_back > 0, "D was never given its cache back");
    /* once: a trim that cost it is not tried again while it streams */
    ck_assert_msg(trims == 1, "D was trimmed %d times", trims);
    ck_assert_msg(short_late == 0, "D short of its cache in %d of the last 360 ticks", short_late);
    ck_assert_uint_le(s.v[1].actual_bytes, 200 * MIB); /* the real stream stays trimmed */
    trace_free(&s);
}
END_TEST

/* A stream that a trim slows (it reads at 60% of its pace with less than
 * 300 MiB of cache: as the bench's streamer read 18-40% slower once
 * trimmed) reads less, not more: no refault shows.  Its averaged reads
 * fall by more than a quarter, so it gets its memory back, and it is not
 * trimmed again while it streams. */
START_TEST(trim_streams_gives_back_a_stream_it_slowed)
{
    trace s;
    trace_init(&s, 2, 3 * GIB);
    s.in.tun.trim_streams = true;
    trace_guest(&s, 0, "W", ANON, 512 * MIB, 200 * MIB, 20 * MIB);
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    s.t[1].slow_below = 300 * MIB;
    bool slowed = false;
    int given_back_at = -1, slow_ticks = 0, trims = 0;
    for (int k = 0; k < 300; k++) { /* 600 s: past KEEP_S after the give-back */
        uint64_t was = s.v[1].actual_bytes;
        trace_tick(&s);
        slowed |= s.t[1].cache < s.t[1].slow_below;
        if (given_back_at < 0 && s.d[1].change && s.d[1].target_bytes > was)
            given_back_at = k;
        trims += given_back_at >= 0 && s.d[1].change && s.d[1].target_bytes < was;
        if (given_back_at >= 0 && k > given_back_at + 5)
            slow_ticks += s.t[1].cache < s.t[1].slow_below;
        if (getenv("TRACE"))
            printf("%d S %llu -> %llu (%s) cache %llu disk %.0f%s\n", k, (unsigned long long)(was / MIB),
                   (unsigned long long)(s.t[1].target / MIB), decision_reason_text(s.d[1].reason),
                   (unsigned long long)(s.t[1].cache / MIB), s.v[1].disk_read_bps / MIB,
                   s.v[1].streaming ? " streaming" : "");
    }
    ck_assert_msg(slowed, "the trim never slowed S: the case is not exercised");
    ck_assert_msg(given_back_at >= 0, "S was never given its memory back");
    ck_assert_msg(given_back_at <= 60, "S was given its memory back only at tick %d", given_back_at);
    ck_assert_msg(trims == 0, "S was trimmed %d times after it was given its memory back", trims);
    ck_assert_msg(slow_ticks == 0, "S slowed in %d ticks after it got its memory back", slow_ticks);
    trace_free(&s);
}
END_TEST

/* Reclaim is an experiment: memory given back because the reclaim cost
 * the guest is not taken again as "free" a few ticks later. */
START_TEST(memory_given_back_is_not_retaken)
{
    trace s;
    trace_init(&s, 2, 760 * MIB);
    trace_guest(&s, 0, "D", ANON, 512 * MIB, 300 * MIB, 20 * MIB);
    s.t[0].swap = true;
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    int flips = 0, last_dir = 0;
    for (int k = 0; k < 80; k++) {
        uint64_t before = s.t[0].target;
        trace_tick(&s);
        /* D's load comes and goes: its anon drops, then returns */
        allocate(&s, 0, (k / 10) % 2 ? 300 * MIB : 120 * MIB, 120 * MIB);
        int dir = s.t[0].target > before ? 1 : s.t[0].target < before ? -1 : 0;
        if (getenv("TRACE"))
            printf("%d D %llu -> %llu (%s) anon %llu | S %llu (%s) avail %llu\n", k,
                   (unsigned long long)(s.v[0].actual_bytes / MIB), (unsigned long long)(s.t[0].target / MIB),
                   decision_reason_text(s.d[0].reason), (unsigned long long)(s.t[0].anon / MIB),
                   (unsigned long long)(s.v[1].actual_bytes / MIB), decision_reason_text(s.d[1].reason),
                   (unsigned long long)(s.in.host.available_bytes / MIB));
        if (dir && last_dir && dir != last_dir)
            flips++;
        if (dir)
            last_dir = dir;
    }
    ck_assert_msg(flips <= 2, "D's balloon changed direction %d times", flips);
    trace_free(&s);
}
END_TEST

/* deflate-on-oom: the guest grows its own balloon when it runs out; that
 * memory is its answer to an OOM and is not taken back as "free". */
START_TEST(self_deflation_is_not_fought)
{
    trace s;
    trace_init(&s, 2, 880 * MIB);
    trace_guest(&s, 0, "A", ANON, 512 * MIB, 100 * MIB, 20 * MIB);
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    s.v[1].floor_bytes = 448 * MIB; /* the streamer cannot give it all: A gives its free memory */
    for (int k = 0; k < 20; k++)
        trace_tick(&s);
    uint64_t squeezed = s.v[0].actual_bytes;
    ck_assert_uint_lt(squeezed, 400 * MIB);
    /* the guest deflates by 32 MiB on its own (the host sees the balloon
     * grow; the host stays above min: in a critical host the anon tier
     * takes by shares, a guest's own word shelters nothing) */
    s.v[0].actual_bytes = s.t[0].target = squeezed + 32 * MIB;
    s.v[0].self_deflated_bytes = 32 * MIB;
    trace_tick(&s);
    s.v[0].self_deflated_bytes = 0;
    ck_assert_int_eq(s.d[0].reason, REASON_SELF_DEFLATED);
    for (int k = 0; k < 60; k++) {
        trace_tick(&s);
        ck_assert_uint_ge(s.v[0].actual_bytes, squeezed + 32 * MIB);
    }
    trace_free(&s);
}
END_TEST

/* The seed mix in a critical host: the streamer's cache gives; and when
 * the streamer cannot give enough (a high floor), the working set may be
 * tried once by shares, is given back when it thrashes, and is not taken
 * again (no ping-pong: the same loss twice). */
static int direction_changes(trace *s, size_t who, int ticks, unsigned *thrash)
{
    int flips = 0, last = 0;
    *thrash = 0;
    for (int k = 0; k < ticks; k++) {
        uint64_t before = s->t[who].target;
        trace_tick(s);
        int dir = s->t[who].target > before ? 1 : s->t[who].target < before ? -1 : 0;
        if (dir && last && dir != last)
            flips++;
        if (dir)
            last = dir;
        *thrash += s->t[who].anon + KERNEL > s->v[who].actual_bytes;
    }
    return flips;
}

START_TEST(critical_host_no_ping_pong)
{
    trace s;
    trace_init(&s, 2, 700 * MIB);
    trace_guest(&s, 0, "W", ANON, 512 * MIB, 420 * MIB, 20 * MIB);
    s.t[0].swap = true;
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    unsigned thrash;
    int flips = direction_changes(&s, 0, 60, &thrash);
    ck_assert_msg(flips == 0 && thrash == 0, "W: %d direction changes, %u ticks short", flips, thrash);
    ck_assert_uint_lt(s.v[1].actual_bytes, 300 * MIB);
    trace_free(&s);

    trace_init(&s, 2, 700 * MIB);
    trace_guest(&s, 0, "W", ANON, 512 * MIB, 420 * MIB, 20 * MIB);
    s.t[0].swap = true;
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    s.v[1].floor_bytes = 480 * MIB; /* S cannot give what the host lacks */
    flips = direction_changes(&s, 0, 60, &thrash);
    ck_assert_msg(flips <= 1 && thrash <= 3, "W: %d direction changes, %u ticks short", flips, thrash);
    trace_free(&s);
}
END_TEST

/* A liar claims its available memory is gone and its used memory soars,
 * every tick (nothing the host measures backs it).  It may take the host's
 * headroom and the others' free memory and cache; never their working
 * set: the database keeps its anon and never thrashes. */
static void liar_claims_need(trace *s)
{
    guest_view *g = &s->v[2];
    g->available_bytes = 0;
    g->free_bytes = g->cache_bytes = g->reclaimable_cache_bytes = 0;
    g->used_bytes = g->actual_bytes;
    g->used_growth_bps = 100.0 * MIB;
    classify_update(&s->t[2].cls, g, &s->cp);
    g->in_need = s->t[2].cls.need;
    g->need_bytes = s->t[2].cls.need_bytes;
    g->streaming = false;
    g->host_rss_bytes = 200 * MIB; /* the host sees it touch nothing new */
}

START_TEST(lying_need_takes_no_working_set)
{
    trace s;
    trace_init(&s, 3, 1300 * MIB);
    trace_guest(&s, 0, "W", ANON, 512 * MIB, 420 * MIB, 20 * MIB);
    s.t[0].swap = true;
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    trace_guest(&s, 2, "L", ANON, 1 * GIB, 100 * MIB, 0);
    s.v[2].actual_bytes = s.t[2].target = 256 * MIB;
    s.lie = liar_claims_need;
    unsigned short_ticks = 0;
    for (int k = 0; k < 60; k++) {
        trace_tick(&s);
        short_ticks += s.t[0].anon + KERNEL > s.v[0].actual_bytes;
        if (getenv("TRACE"))
            printf("%d W %llu (%s) | S %llu (%s) | L %llu->%llu (%s) avail %llu\n", k,
                   (unsigned long long)(s.v[0].actual_bytes / MIB), decision_reason_text(s.d[0].reason),
                   (unsigned long long)(s.v[1].actual_bytes / MIB), decision_reason_text(s.d[1].reason),
                   (unsigned long long)(s.v[2].actual_bytes / MIB), (unsigned long long)(s.t[2].target / MIB), decision_reason_text(s.d[2].reason),
                   (unsigned long long)(s.in.host.available_bytes / MIB));
        ck_assert(!s.t[0].cls.thrashing);
    }
    ck_assert_msg(short_ticks == 0, "W short of its working set in %u ticks", short_ticks);
    ck_assert_uint_ge(s.v[0].actual_bytes, 420 * MIB + KERNEL);
    trace_free(&s);
}
END_TEST

/* A big guest with a small need: the grant is issued whatever its size
 * (a 8 GiB guest's usual minimum change is 41 MiB). */
START_TEST(small_need_of_a_big_guest_is_granted)
{
    trace s;
    trace_init(&s, 2, 9 * GIB);
    trace_guest(&s, 0, "Big", ANON, 8 * GIB, 2 * GIB, 0);
    trace_guest(&s, 1, "S", STREAMER, 1 * GIB, 30 * MIB, 8 * GIB);
    s.v[0].actual_bytes = s.t[0].target = 2 * GIB + 200 * MIB;
    for (int k = 0; k < 5; k++)
        trace_tick(&s);
    /* +30 MiB a tick: fills what it has */
    unsigned short_ticks = 0;
    for (int k = 0; k < 12; k++) {
        trace_tick(&s);
        allocate(&s, 0, 2 * GIB + (uint64_t)(k + 1) * 30 * MIB, 2 * GIB);
        short_ticks += s.t[0].anon + KERNEL > s.v[0].actual_bytes;
    }
    ck_assert_uint_eq(s.t[0].ooms, 0);
    ck_assert_msg(short_ticks == 0, "short in %u ticks", short_ticks);
    trace_free(&s);
}
END_TEST

/* Adversarial property: for many random hosts and working sets, a liar
 * (claiming need every tick, or oscillating its used memory, or reporting
 * nothing available) never leaves the honest guests shorter of their
 * working sets than the same guest idle and honest would have. */
typedef enum { LIE_NONE, LIE_NEED, LIE_OSCILLATE, LIE_ZERO_AVAIL, LIE_KINDS } lie_kind;
static lie_kind current_lie;
static int lie_tick;

static void liar_lies(trace *s)
{
    guest_view *g = &s->v[2];
    switch (current_lie) {
    case LIE_NEED:
        g->available_bytes = g->free_bytes = g->cache_bytes = g->reclaimable_cache_bytes = 0;
        g->used_bytes = g->actual_bytes;
        g->used_growth_bps = 100.0 * MIB;
        break;
    case LIE_OSCILLATE:
        g->used_growth_bps = (lie_tick++ % 2) ? 200.0 * MIB : -200.0 * MIB;
        g->available_bytes = g->free_bytes = 8 * MIB;
        g->cache_bytes = g->reclaimable_cache_bytes = 0;
        break;
    case LIE_ZERO_AVAIL:
        g->available_bytes = g->free_bytes = g->cache_bytes = g->reclaimable_cache_bytes = 0;
        g->used_bytes = g->actual_bytes;
        break;
    default:
        return;
    }
    g->host_rss_bytes = 150 * MIB; /* it touches nothing */
    classify_update(&s->t[2].cls, g, &s->cp);
    g->in_need = s->t[2].cls.need;
    g->need_bytes = s->t[2].cls.need_bytes;
    g->streaming = s->t[2].cls.streaming;
    g->thrashing = s->t[2].cls.thrashing;
}

static unsigned honest_short_ticks(uint64_t seed, lie_kind lie)
{
    uint64_t x = seed * 2654435761ULL + 1;
#define RND(n) (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x % (n))
    trace s;
    trace_init(&s, 3, (900 + RND(600)) * MIB);
    uint64_t wanon = (250 + RND(200)) * MIB;
    trace_guest(&s, 0, "W", ANON, 512 * MIB, wanon, 20 * MIB);
    s.t[0].swap = true;
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    trace_guest(&s, 2, "L", ANON, 1 * GIB, 100 * MIB, 20 * MIB);
    s.v[2].actual_bytes = s.t[2].target = (200 + RND(300)) * MIB;
#undef RND
    current_lie = lie;
    lie_tick = 0;
    s.lie = liar_lies;
    unsigned short_ticks = 0;
    for (int k = 0; k < 60; k++) {
        trace_tick(&s);
        if (k >= 10) /* after the start settles */
            short_ticks += s.t[0].anon + KERNEL > s.v[0].actual_bytes;
    }
    trace_free(&s);
    return short_ticks;
}

START_TEST(liars_hurt_no_honest_guest)
{
    /* A liar may cost the database one tick (it thrashes once before the
     * host-backed evidence protects it), never more, and rarely: in at
     * most 20% of the seeds x lies (15% today; without the RSS allowance and the
     * no-anon budget it is ~40%). */
    unsigned pairs = 0, hurt = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        unsigned honest = honest_short_ticks(seed, LIE_NONE);
        for (lie_kind lie = LIE_NEED; lie < LIE_KINDS; lie++) {
            unsigned lied = honest_short_ticks(seed, lie);
            if (getenv("PROP"))
                printf("seed %llu lie %d: %u vs %u\n", (unsigned long long)seed, (int)lie, lied, honest);
            ck_assert_msg(lied <= honest + 1, "seed %llu lie %d: W short %u ticks (honest liar: %u)",
                          (unsigned long long)seed, (int)lie, lied, honest);
            pairs++;
            hurt += lied > honest;
        }
    }
    ck_assert_msg(hurt * 100 <= pairs * 20, "a liar cost the database a tick in %u of %u runs", hurt, pairs);
}
END_TEST

/* ---- every guest input x every lie, through the core ----
 *
 * Honest guests W (a database's anonymous working set, with swap), S (a
 * streamer), C (a buffered-IO database whose cache is its working set) and
 * L, which idles honestly in the reference run and lies in the others:
 * one guest-controlled input at a time (each balloon stat, each agent
 * field), or all of them telling one coherent story, in each way a guest
 * can lie.  What it reports goes through core/guest.c's ingest (clamps,
 * counter resets, disk-read backing, staleness) and the agent's parser as
 * in the daemon.  Whatever it says, no honest guest is short of its
 * working set for longer than in the reference run (+1 tick: a liar may
 * cost one tick before host-measured evidence wins). */
typedef enum {
    F_FREE, F_AVAIL, F_CACHE, F_TOTAL, F_SWAPIN, F_SWAPOUT, F_MAJFLT, F_MINFLT, F_LASTUPD, F_OOMKILL, F_STALLS,
    F_AG_REFAULT_ANON, F_AG_REFAULT_FILE, F_AG_PSWPIN, F_AG_OOMKILL, F_AG_STALLS, F_AG_AVAIL, F_AG_TOTAL, F_AG_PSI_SOME, F_AG_PSI_FULL,
    F_AG_HINT, F_AG_SEQ, F_ALL, F_COUNT
} lie_field;
static const char *const lie_field_name[F_COUNT] = {
    "free", "available", "cache", "total", "swap_in", "swap_out", "major_faults", "minor_faults", "last_update",
    "oom_kills", "alloc_stalls",
    "agent refault_anon", "agent refault_file", "agent pswpin", "agent oom_kill", "agent allocstall", "agent MemAvailable", "agent MemTotal",
    "agent psi some", "agent psi full", "agent hint", "agent seq", "all at once",
};
typedef enum { L_MAX, L_ZERO, L_NEG, L_OSC, L_STALE, L_PLAUSIBLE, L_COUNT } lie_way;
static const char *const lie_way_name[L_COUNT] = { "max", "zero", "negative", "oscillating", "stale", "plausible" };

#define LIAR 3
static struct {
    lie_field f;
    lie_way w;
    bool on;
    int64_t frozen[F_COUNT];
    bool have_frozen;
    double lie_total;   /* a plausible lie's counter */
} adv;

/* One lied value: v is the honest one, i its field's index for stale,
 * plausible is what a believable lie says. */
static int64_t lied(lie_field f, int64_t v, int64_t plausible, unsigned tick)
{
    switch (adv.w) {
    case L_MAX: return INT64_MAX;
    case L_ZERO: return 0;
    case L_NEG: return -4096;
    case L_OSC: return tick % 2 ? INT64_MAX / 2 : 0;
    case L_STALE:
        if (!adv.have_frozen)
            adv.frozen[f] = v;
        return adv.frozen[f];
    default: return plausible;
    }
}

static void adversary(trace *s, size_t i, guest_sample *smp, agent_report *rep, bool *agent)
{
    if (i != LIAR)
        return;
    *agent = adv.on && adv.f >= F_AG_REFAULT_ANON && adv.f <= F_ALL;
    if (!adv.on)
        return;
    unsigned tick = (unsigned)(s->in.now_s / TICK_S);
    int64_t act = smp->actual_bytes;
    tguest *t = &s->t[i];
    if (adv.w == L_PLAUSIBLE) {
        /* backed as far as the host can check: it really reads its disk
         * (O_DIRECT, nothing cached) at 4 MiB/s and claims swap-ins at
         * twice that -- the most a disk-read-backed claim may be */
        t->disk_total += 4.0 * MIB * TICK_S;
        smp->disk_read_bytes = (int64_t)t->disk_total;
        adv.lie_total += 8.0 * MIB * TICK_S;
    }
    int64_t lt = (int64_t)adv.lie_total;
    bool all = adv.f == F_ALL;
#define LIE(F, field, plausible) \
    if (all || adv.f == (F)) field = lied((F), field, (plausible), tick)
    LIE(F_FREE, smp->free_bytes, act / 100);
    LIE(F_AVAIL, smp->available_bytes, act * 3 / 100);
    LIE(F_CACHE, smp->cache_bytes, act * 9 / 10);
    LIE(F_TOTAL, smp->total_bytes, act);
    LIE(F_SWAPIN, smp->swap_in_bytes, lt);
    LIE(F_SWAPOUT, smp->swap_out_bytes, lt);
    LIE(F_MAJFLT, smp->major_faults, lt / 4096);
    LIE(F_MINFLT, smp->minor_faults, lt / 64);
    LIE(F_LASTUPD, smp->last_update, smp->last_update - (int64_t)s->lim.stale_seconds + 1);
    LIE(F_OOMKILL, smp->oom_kills, (int64_t)tick); /* a kill every report */
    LIE(F_STALLS, smp->alloc_stalls, lt / 4096);
    LIE(F_AG_REFAULT_ANON, rep->vmstat[AV_REFAULT_ANON], lt / 4096);
    LIE(F_AG_REFAULT_FILE, rep->vmstat[AV_REFAULT_FILE], lt / 4096);
    LIE(F_AG_PSWPIN, rep->vmstat[AV_PSWPIN], lt / 4096);
    LIE(F_AG_OOMKILL, rep->vmstat[AV_OOM_KILL], (int64_t)tick);
    LIE(F_AG_STALLS, rep->vmstat[AV_ALLOCSTALL_NORMAL], lt / 4096);
    LIE(F_AG_AVAIL, rep->meminfo_kb[AM_AVAILABLE], act / 1024 * 3 / 100);
    LIE(F_AG_TOTAL, rep->meminfo_kb[AM_TOTAL], act / 1024);
    if (all || adv.f == F_AG_PSI_SOME)
        rep->psi_some_avg10 = (double)lied(F_AG_PSI_SOME, 0, 60, tick);
    if (all || adv.f == F_AG_PSI_FULL)
        rep->psi_full_avg10 = (double)lied(F_AG_PSI_FULL, 0, 40, tick);
    if (all || adv.f == F_AG_HINT)
        rep->hint_streaming = lied(F_AG_HINT, 0, 1, tick) != 0;
    LIE(F_AG_SEQ, *(int64_t *)&rep->seq, (int64_t)rep->seq);
#undef LIE
    adv.have_frozen = true;
}

typedef struct {
    unsigned short_w, short_c, ooms;
    uint64_t liar_max;
} adv_outcome;

static adv_outcome adversarial_run(uint64_t seed, bool lying, lie_field f, lie_way w)
{
    uint64_t x = seed * 2654435761ULL + 7;
#define RND(n) (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x % (n))
    trace s;
    trace_init(&s, 4, (1300 + RND(700)) * MIB);
    trace_guest(&s, 0, "W", ANON, 512 * MIB, (250 + RND(200)) * MIB, 20 * MIB);
    s.t[0].swap = true;
    trace_guest(&s, 1, "S", STREAMER, 512 * MIB, 30 * MIB, 8 * GIB);
    trace_guest(&s, 2, "C", CACHEDB, 512 * MIB, 60 * MIB, (150 + RND(200)) * MIB);
    trace_guest(&s, LIAR, "L", ANON, 1 * GIB, 100 * MIB, 20 * MIB);
    s.v[LIAR].actual_bytes = s.t[LIAR].target = (200 + RND(400)) * MIB;
#undef RND
    s.core = true;
    s.lim = (guest_limits){ .default_floor_percent = 0, .default_floor_min = 128 * MIB,
                            .stale_seconds = (unsigned)(4 * TICK_S) };
    for (size_t i = 0; i < s.n; i++)
        guest_init(&s.cg[i], s.v[i].name, s.v[i].uuid);
    memset(&adv, 0, sizeof(adv));
    adv.on = lying;
    adv.f = f;
    adv.w = w;
    s.lie_raw = adversary;
    adv_outcome o = { 0 };
    for (int k = 0; k < 60; k++) {
        trace_tick(&s);
        if (getenv("TRACE"))
            printf("%d W %llu (%s) | S %llu (%s) | C %llu c%llu %s%s d%.0f (%s) | L %llu (%s) avail %llu\n", k,
                   (unsigned long long)(s.v[0].actual_bytes / MIB), decision_reason_text(s.d[0].reason),
                   (unsigned long long)(s.v[1].actual_bytes / MIB), decision_reason_text(s.d[1].reason),
                   (unsigned long long)(s.v[2].actual_bytes / MIB), (unsigned long long)(s.t[2].cache / MIB),
                   s.v[2].streaming ? "S" : "", s.v[2].filling ? "F" : "", s.v[2].disk_read_bps / MIB, decision_reason_text(s.d[2].reason), (unsigned long long)(s.v[LIAR].actual_bytes / MIB), decision_reason_text(s.d[LIAR].reason),
                   (unsigned long long)(s.in.host.available_bytes / MIB));
        if (k < 10) /* C warms its cache, the start settles */
            continue;
        o.short_w += s.t[0].anon + KERNEL > s.v[0].actual_bytes;
        o.short_c += s.t[2].cache + 32 * MIB < s.t[2].cache_want;
        if (s.v[LIAR].actual_bytes > o.liar_max)
            o.liar_max = s.v[LIAR].actual_bytes;
    }
    o.ooms = s.t[0].ooms + s.t[1].ooms + s.t[2].ooms;
    trace_free(&s);
    return o;
}

START_TEST(every_input_every_lie_hurts_no_honest_guest)
{
    const char *env = getenv("MEMBAL_ADVERSARY_SEEDS");
    unsigned seeds = env && atoi(env) > 0 ? (unsigned)atoi(env) : 1000;
    unsigned runs = 0, cost_tick = 0, surveyed = 0;
    if (getenv("ADV_ONE")) { /* "seed field way": trace one run and its reference */
        unsigned sd = 1, f = 0, w = 0;
        sscanf(getenv("ADV_ONE"), "%u %u %u", &sd, &f, &w);
        adversarial_run(sd, false, 0, 0);
        printf("---- lying\n");
        adversarial_run(sd, true, (lie_field)f, (lie_way)w);
        return;
    }
    for (uint64_t seed = 1; seed <= seeds; seed++) {
        adv_outcome ref = adversarial_run(seed, false, F_FREE, L_MAX);
        for (lie_field f = 0; f < F_COUNT; f++)
            for (lie_way w = 0; w < L_COUNT; w++) {
                adv_outcome o = adversarial_run(seed, true, f, w);
                runs++;
                cost_tick += o.short_w + o.short_c > ref.short_w + ref.short_c;
                bool ok = o.ooms <= ref.ooms && o.short_w <= ref.short_w + 1 && o.short_c <= ref.short_c + 1;
                surveyed += !ok;
                if (!ok && getenv("ADV_SURVEY")) {
                    printf("seed %llu, %s %s: W short %u (%u), C short %u (%u), OOM %u (%u)\n",
                           (unsigned long long)seed, lie_field_name[f], lie_way_name[w], o.short_w, ref.short_w,
                           o.short_c, ref.short_c, o.ooms, ref.ooms);
                    continue;
                }
                ck_assert_msg(ok,
                              "seed %llu, %s %s: W short %u ticks (%u honest), C short %u (%u), OOM kills %u (%u)",
                              (unsigned long long)seed, lie_field_name[f], lie_way_name[w], o.short_w, ref.short_w,
                              o.short_c, ref.short_c, o.ooms, ref.ooms);
            }
    }
    printf("adversary: %u seeds x %d inputs x %d lies = %u runs; a lie cost an honest guest a tick in %u\n", seeds,
           F_COUNT, L_COUNT, runs, cost_tick);
    ck_assert_msg(surveyed == 0, "%u runs hurt an honest guest (listed above)", surveyed);
}
END_TEST

/* The page cache a guest can drop is what MemAvailable holds beyond
 * MemFree, never more than its cache: Shmem (tmpfs, shared buffers) is
 * in disk-caches and not in MemAvailable. */
START_TEST(reclaimable_cache_leaves_shmem_out)
{
    /* 300 MiB cached of which 250 MiB Shmem: 50 MiB droppable */
    ck_assert_uint_eq(reclaimable_cache(300 * MIB, 100 * MIB, 50 * MIB), 50 * MIB);
    /* no Shmem, and reclaimable slab on top: the cache bounds it */
    ck_assert_uint_eq(reclaimable_cache(300 * MIB, 380 * MIB, 50 * MIB), 300 * MIB);
    /* MemFree above MemAvailable (the watermarks): nothing droppable */
    ck_assert_uint_eq(reclaimable_cache(100 * MIB, 50 * MIB, 80 * MIB), 0);
    ck_assert_uint_eq(reclaimable_cache(0, 400 * MIB, 50 * MIB), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("need");
    TCase *tc = tcase_create("traces");
    tcase_set_timeout(tc, 600); /* the adversary's 1000 seeds: ~30 s */
    tcase_add_test(tc, burst_reference_without_balancer_fits);
    tcase_add_test(tc, idle_then_burst_without_swap_gets_memory_in_time);
    tcase_add_test(tc, need_grant_is_kept_through_a_stalled_burst);
    tcase_add_test(tc, slow_growth_eating_the_reserve_is_need);
    tcase_add_test(tc, buffered_io_database_cache_is_not_streaming);
    tcase_add_test(tc, double_buffered_database_beside_a_stream_is_not_the_stream);
    tcase_add_test(tc, reclaimable_cache_leaves_shmem_out);
    tcase_add_test(tc, database_warming_its_cache_is_not_a_donor);
    tcase_add_test(tc, streamer_sped_up_by_relief_is_not_a_refault);
    tcase_add_test(tc, growing_working_set_is_fed_before_it_thrashes);
    tcase_add_test(tc, growing_working_set_is_fed_whatever_the_host_sees);
    tcase_add_test(tc, no_pressure_no_moves);
    tcase_add_test(tc, trim_streams_takes_only_a_stream_cache_without_pressure);
    tcase_add_test(tc, trim_streams_gives_back_a_cache_read_again);
    tcase_add_test(tc, trim_streams_gives_back_a_stream_it_slowed);
    tcase_add_test(tc, trim_streams_trimmed_stream_is_not_grown_for_comfort);
    tcase_add_test(tc, memory_given_back_is_not_retaken);
    tcase_add_test(tc, self_deflation_is_not_fought);
    tcase_add_test(tc, critical_host_no_ping_pong);
    tcase_add_test(tc, lying_need_takes_no_working_set);
    tcase_add_test(tc, small_need_of_a_big_guest_is_granted);
    tcase_add_test(tc, liars_hurt_no_honest_guest);
    tcase_add_test(tc, every_input_every_lie_hurts_no_honest_guest);
    suite_add_tcase(s, tc);
    return check_run_suite(s, CK_FORK);
}

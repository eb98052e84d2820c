/*
 * Policies over hand-made snapshots and multi-tick scenarios.  A tiny host
 * model applies each decision (the balloon reaches its target by the next
 * tick, host available memory moves by the opposite amount, and each guest
 * refills its page cache the way its workload would).
 */
#include <check.h>
#include <math.h>

#include "check_run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/classify.h"
#include "policies/policy.h"
#include "policies/reclaim_plan.h"
#include "policies/vmem_plan.h"

#define NG 4

typedef struct {
    guest_view v[NG];
    guest_decision d[NG];
    size_t n;
    policy_input in;
    policy_output out;
    void *state;
    const policy_ops *ops;
    /* model: anon working set and how much cache each guest wants */
    uint64_t anon[NG], cache_want[NG];
    uint64_t host_base; /* host available when every guest is at 0 */
    uint64_t free_override[NG]; /* when set, the guest's reported MemFree */
} sim;

static void guest_init(sim *s, size_t i, const char *name, uint64_t actual, uint64_t anon,
                       uint64_t cache_want)
{
    guest_view *g = &s->v[i];
    memset(g, 0, sizeof(*g));
    g->name = name;
    g->uuid = name;
    vm_policy_default(&g->policy);
    g->max_bytes = actual;
    g->actual_bytes = actual;
    g->floor_bytes = 256 * MIB;
    g->ceiling_bytes = actual;
    g->stats_valid = g->stats_fresh = true;
    g->host_rss_bytes = -1; /* this model does not measure what a guest touches */
    g->host_ws_bytes = -1;
    g->host_faults_ps = -1;
    s->anon[i] = anon;
    s->cache_want[i] = cache_want;
}

/* Guest i streams, and its agent says so (its kernel evicting file pages
 * and reading none of them again): a proven stream, as split-lru wants
 * evidence of one (policies/split_reuse.c); this model's clock stands
 * still, so no probe of its own could be judged. */
static void proven_stream(sim *s, size_t i)
{
    s->v[i].streaming = true;
    s->v[i].agent_fresh = true;
    s->v[i].agent_steal_file_ps = 1000;
    s->v[i].agent_refault_file_ps = 0;
}

/* Recompute what each guest reports from the model. */
static void model_refresh(sim *s)
{
    uint64_t used = 0;
    for (size_t i = 0; i < s->n; i++) {
        guest_view *g = &s->v[i];
        uint64_t rest = g->actual_bytes > s->anon[i] ? g->actual_bytes - s->anon[i] : 0;
        uint64_t keep_free = 16 * MIB < rest ? 16 * MIB : rest;
        g->cache_bytes = s->cache_want[i] < rest - keep_free ? s->cache_want[i] : rest - keep_free;
        g->reclaimable_cache_bytes = g->cache_bytes; /* no Shmem in this model */
        g->free_bytes = rest - g->cache_bytes;
        if (s->free_override[i])
            g->free_bytes = s->free_override[i];
        g->available_bytes = g->free_bytes + g->cache_bytes;
        g->used_bytes = g->actual_bytes - g->available_bytes;
        used += g->actual_bytes;
        /* free page reporting: its free memory is the host's already */
        if (g->free_page_reporting_used == 1)
            used -= g->free_bytes;
    }
    s->in.host.total_bytes = s->host_base;
    s->in.host.available_bytes = s->host_base > used ? s->host_base - used : 0;
    s->in.host.free_bytes = s->in.host.available_bytes;
    s->in.host.cached_bytes = 0;
}

static void sim_init(sim *s, const policy_ops *ops, size_t n, uint64_t host_base)
{
    memset(s, 0, sizeof(*s));
    s->ops = ops;
    s->n = n;
    s->host_base = host_base;
    s->state = ops->state_new ? ops->state_new() : NULL;
    policy_tunables_default(&s->in.tun);
    /* the model's own step, not the shipped per-tick one: its expected
     * values were set at 10 % a tick */
    s->in.tun.step_percent = 10.0;
    s->in.tun.step_min_bytes = 32 * MIB;
    s->in.wm.min = 256 * MIB;
    s->in.wm.low = 512 * MIB;
    s->in.wm.high = 768 * MIB;
    s->in.guests = s->v;
    s->in.n_guests = n;
    s->out.decisions = s->d;
}

static void sim_free(sim *s)
{
    if (s->ops->state_free)
        s->ops->state_free(s->state);
}

/* The clock of the next report (5 s on). */
static void later(sim *s)
{
    s->in.now_s += 5;
}

/* One tick: refresh the model, decide, apply.  Returns bytes moved. */
static uint64_t sim_tick(sim *s)
{
    model_refresh(s);
    for (size_t i = 0; i < s->n; i++) /* a report a tick, unless the test made it stale */
        s->v[i].stats_fresh = s->v[i].stats_valid;
    s->ops->decide(&s->in, s->state, &s->out);
    uint64_t moved = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->d[i].change)
            continue;
        uint64_t a = s->v[i].actual_bytes, t = s->d[i].target_bytes;
        moved += a > t ? a - t : t - a;
        s->v[i].actual_bytes = t;
    }
    model_refresh(s);
    return moved;
}

/* ---- split-lru ---- */

START_TEST(idle_between_watermarks)
{
    sim s;
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "a", 2 * GIB, 512 * MIB, 0);
    /* available 600 MiB: below high but above low, never reclaimed before */
    s.host_base = 2 * GIB + 600 * MIB;
    ck_assert_uint_eq(sim_tick(&s), 0);
    ck_assert(!s.out.reclaiming);
    ck_assert_int_eq(s.d[0].reason, REASON_STEADY);
    sim_free(&s);
}
END_TEST

START_TEST(hysteresis_reclaims_to_high_then_stops)
{
    sim s;
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "a", 4 * GIB, 512 * MIB, 0);
    s.host_base = 4 * GIB + 300 * MIB; /* available 300 MiB < low */
    int ticks = 0;
    while (sim_tick(&s) > 0 && ticks < 50)
        ticks++;
    model_refresh(&s);
    ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.high);
    /* reclaimed to high, not much beyond (one step of slack at most) */
    ck_assert_uint_le(s.in.host.available_bytes, s.in.wm.high + 64 * MIB);
    ck_assert(!s.out.reclaiming);
    /* a dip below high but above low does not restart reclaim */
    s.host_base -= 100 * MIB;
    ck_assert_uint_eq(sim_tick(&s), 0);
    /* below low it does */
    s.host_base -= 400 * MIB;
    ck_assert_uint_gt(sim_tick(&s), 0);
    ck_assert(s.out.reclaiming);
    sim_free(&s);
}
END_TEST

/* Only memory that frees host memory is a supply: a guest that reports its
 * free pages keeps them (the host has them already), the one that does
 * not gives its free memory, and host memory comes back. */
START_TEST(reported_free_memory_is_not_a_supply)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "F", 4 * GIB, 1 * GIB, 0); /* free page reporting on */
    guest_init(&s, 1, "N", 4 * GIB, 1 * GIB, 0);
    s.v[0].free_page_reporting = s.v[0].free_page_reporting_used = 1;
    model_refresh(&s);
    s.host_base = 5 * GIB; /* in use: F 1 GiB (its free is the host's), N 4 GiB: available 0 */
    for (int t = 0; t < 60; t++)
        sim_tick(&s);
    model_refresh(&s);
    ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.high);
    ck_assert_uint_eq(s.v[0].actual_bytes, 4 * GIB); /* nothing taken that frees nothing */
    ck_assert_uint_le(s.v[1].actual_bytes, 4 * GIB - 768 * MIB);
    /* alone, the reporting guest is never walked down: the squeeze would
     * free nothing */
    sim_free(&s);
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "F", 16 * GIB, 2 * GIB, 0);
    s.v[0].free_page_reporting = s.v[0].free_page_reporting_used = 1;
    s.host_base = 2 * GIB + 128 * MIB; /* below min, and nothing of F's would help */
    for (int t = 0; t < 60; t++)
        sim_tick(&s);
    ck_assert_uint_eq(s.v[0].actual_bytes, 16 * GIB);
    sim_free(&s);
}
END_TEST

/* A squeezed guest that reboots gets its size back at once (its balloon
 * kept the squeeze across the reset, and it boots into it), whatever the
 * host's shortage; it gives again only from its third valid report on
 * (SETTLE_REPORTS), and a tick without one (a booting guest has no
 * balloon driver yet) settles nothing. */
START_TEST(rebooted_guest_gets_its_size_back_and_settles)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "R", 4 * GIB, 512 * MIB, 0);
    guest_init(&s, 1, "N", 4 * GIB, 1 * GIB, 0);
    s.host_base = 6 * GIB; /* short: both give free memory */
    for (int t = 0; t < 40; t++)
        later(&s), sim_tick(&s);
    ck_assert_uint_lt(s.v[0].actual_bytes, 3 * GIB);
    s.v[0].rebooted = true;
    later(&s), sim_tick(&s);
    s.v[0].rebooted = false;
    ck_assert_int_eq(s.d[0].reason, REASON_REBOOTED);
    uint64_t back = s.v[0].actual_bytes; /* a MiB short: the driver acknowledges it */
    ck_assert_uint_eq(back, 4 * GIB - MIB);
    /* its balloon stays where it was until the new driver acknowledges
     * the size (QEMU keeps the old one): reports come, the host is short,
     * and the size stays asked for -- it is no donor while it boots */
    uint64_t squeezed = s.v[0].actual_bytes = 2 * GIB;
    s.v[0].pending_target_bytes = back;
    for (int t = 0; t < 6; t++) {
        model_refresh(&s);
        later(&s), s.ops->decide(&s.in, s.state, &s.out);
        ck_assert_int_eq(s.d[0].reason, REASON_REBOOT_ON_ITS_WAY);
        ck_assert_uint_eq(s.d[0].target_bytes, back);
        ck_assert_uint_eq(s.v[0].actual_bytes, squeezed);
    }
    s.v[0].actual_bytes = back; /* acknowledged */
    s.v[0].pending_target_bytes = 0;
    /* booting: no stats for five ticks, then three valid reports */
    for (int t = 0; t < 5; t++) {
        s.v[0].stats_valid = false;
        later(&s), sim_tick(&s);
        ck_assert_uint_eq(s.v[0].actual_bytes, back);
    }
    s.v[0].stats_valid = true;
    for (int t = 0; t < 2; t++) { /* settled at its third */
        s.host_base -= 64 * MIB; /* the host stays short */
        later(&s), sim_tick(&s);
        ck_assert_msg(s.v[0].actual_bytes == back, "R gave at its valid report %d: %s", t + 1, decision_reason_text(s.d[0].reason));
    }
    /* settled: a donor again */
    for (int t = 0; t < 10; t++)
        later(&s), sim_tick(&s);
    ck_assert_uint_lt(s.v[0].actual_bytes, back);
    /* reset while its balloon was on its way down (the driver of the
     * guest that shut down never acknowledged it): the size comes back all
     * the same, or it boots into where the balloon was going */
    s.v[0].actual_bytes = 4 * GIB;
    s.v[0].pending_target_bytes = 1 * GIB;
    s.v[0].rebooted = true;
    model_refresh(&s);
    later(&s), s.ops->decide(&s.in, s.state, &s.out);
    ck_assert_int_eq(s.d[0].reason, REASON_REBOOTED);
    ck_assert_uint_eq(s.d[0].target_bytes, 4 * GIB - MIB);
    sim_free(&s);
}
END_TEST

START_TEST(streaming_guest_gives_before_working_set)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    /* W: hot anon and a reused cache, almost no free memory.
     * S: small anon, its cache fills everything it is given. */
    guest_init(&s, 0, "W", 4 * GIB, 3584 * MIB, 512 * MIB);
    guest_init(&s, 1, "S", 4 * GIB, 256 * MIB, 8 * GIB);
    proven_stream(&s, 1);
    s.host_base = 8 * GIB; /* available 0: far below min */
    for (int t = 0; t < 60; t++)
        sim_tick(&s);
    model_refresh(&s);
    ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.high);
    /* all of it came from S's streaming cache: W kept anon and cache */
    ck_assert_uint_eq(s.v[0].actual_bytes, 4 * GIB);
    ck_assert_uint_ge(4 * GIB - s.v[1].actual_bytes, 768 * MIB);
    ck_assert_int_eq(s.d[1].reason, REASON_STEADY);
    sim_free(&s);
}
END_TEST

/* issue 36: while the host swaps (any guest's QEMU faulting from host
 * swap, the streamer's own included), a stream's cache goes at once --
 * all of it above its used memory and headroom, not the shortfall to
 * `high`, which a swapping host's available memory does not show -- not
 * a step a tick; without host swapping it stays a step a tick */
static uint64_t stream_gives_in_one_tick(double w_faults, double s_faults)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "W", 4 * GIB, 3584 * MIB, 512 * MIB);
    guest_init(&s, 1, "S", 4 * GIB, 256 * MIB, 8 * GIB);
    proven_stream(&s, 1);
    s.v[0].host_faults_ps = w_faults;
    s.v[1].host_faults_ps = s_faults;
    s.host_base = 8 * GIB; /* available 0: 768 MiB short of high */
    sim_tick(&s);
    ck_assert_uint_eq(s.v[0].actual_bytes, 4 * GIB); /* the working set gives nothing */
    uint64_t given = 4 * GIB - s.v[1].actual_bytes;
    if (w_faults >= 256 || s_faults >= 256)
        ck_assert_int_eq(s.d[1].reason, REASON_RECLAIM_STREAM_AT_ONCE);
    else
        ck_assert_int_eq(s.d[1].reason, REASON_RECLAIM_STREAM);
    /* explain says so for the working set the host swaps */
    ck_assert_int_eq(s.d[0].reason, w_faults >= 256 ? REASON_HOST_SWAPS : REASON_STEADY);
    sim_free(&s);
    return given;
}

START_TEST(host_swapping_takes_stream_cache_at_once)
{
    uint64_t step = 4 * GIB / 10;
    /* the host swaps W, or the streamer's own cache: S gives all its cache
     * above its 256 MiB used and its 5 % reserve now, far more than the
     * 768 MiB shortfall to high */
    uint64_t all = 4 * GIB - 256 * MIB - 4 * GIB / 20;
    ck_assert_uint_eq(stream_gives_in_one_tick(1000, 0), all);
    ck_assert_uint_eq(stream_gives_in_one_tick(0, 5000), all);
    /* nobody swapped, or a few faults: a step */
    ck_assert_uint_eq(stream_gives_in_one_tick(-1, -1), step);
    ck_assert_uint_eq(stream_gives_in_one_tick(100, 100), step);
}
END_TEST

/* ... but not on faults a balloon of ours causes: a guest that clears
 * the pages it allocates (init_on_alloc) faults in every page of its own
 * swapped-out memory its inflating balloon takes, so a guest whose balloon
 * is on its way down, or came down in the last 5 s, is not evidence
 * that the host swaps -- counted, the rule would keep itself going */
START_TEST(a_balloons_own_faults_do_not_take_streams_at_once)
{
    uint64_t step = 4 * GIB / 10;
    for (int arrived = 0; arrived < 2; arrived++) {
        sim s;
        sim_init(&s, &policy_split_lru, 3, 0);
        guest_init(&s, 0, "W", 4 * GIB, 3584 * MIB, 512 * MIB);
        guest_init(&s, 1, "S", 4 * GIB, 256 * MIB, 8 * GIB);
        guest_init(&s, 2, "S2", 4 * GIB, 256 * MIB, 8 * GIB);
        proven_stream(&s, 1);
        proven_stream(&s, 2);
        s.host_base = 64 * GIB; /* plenty: the first tick only observes */
        sim_tick(&s);
        ck_assert_uint_eq(s.v[2].actual_bytes, 4 * GIB);
        /* S's balloon took 256 MiB, or is taking it, and its QEMU faults */
        s.v[1].actual_bytes = 4 * GIB - 256 * MIB;
        if (!arrived) {
            s.v[1].actual_bytes = 4 * GIB;
            s.v[1].pending_target_bytes = 4 * GIB - 256 * MIB;
        }
        s.v[1].host_faults_ps = 5000;
        s.host_base = 10 * GIB; /* short: available 0, 256 MiB on its way */
        model_refresh(&s);
        s.ops->decide(&s.in, s.state, &s.out);
        ck_assert(s.d[2].change);
        ck_assert_uint_le(4 * GIB - s.d[2].target_bytes, step); /* the shortfall, a step at most */
        ck_assert_int_eq(s.d[2].reason, REASON_RECLAIM_STREAM);
        /* the same faults with S's balloon still for over 5 s: the host swaps */
        s.v[1].pending_target_bytes = 0;
        s.in.now_s += 6;
        model_refresh(&s);
        s.ops->decide(&s.in, s.state, &s.out);
        ck_assert_int_eq(s.d[2].reason, REASON_RECLAIM_STREAM_AT_ONCE);
        ck_assert_uint_gt(4 * GIB - s.d[2].target_bytes, 3 * GIB);
        sim_free(&s);
    }
}
END_TEST

/* A reader that looks like a stream (4 MiB/s all the time, a big cache)
 * and is not proven one, while the host swaps its own QEMU: it gives one
 * step (the probe), not all its cache at once, and nothing more of its
 * cache while the probe is judged; its QEMU waiting, the probe proves no
 * stream, and its reads rising once relieved prove its refault. */
START_TEST(a_reader_that_looks_like_a_stream_is_probed_not_drained)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 64 * GIB);
    guest_init(&s, 0, "W", 4 * GIB, 3584 * MIB, 512 * MIB);
    guest_init(&s, 1, "D", 4 * GIB, 1 * GIB, 8 * GIB);
    s.v[1].streaming = true;
    s.v[1].disk_read_bps = 4.0 * MIB;
    for (int t = 0; t < 15; t++, s.in.now_s += 5) /* watched 75 s: its pace is known */
        sim_tick(&s);
    s.host_base = 8 * GIB; /* short, and the host swaps D's own QEMU */
    s.v[1].host_faults_ps = 2000;
    sim_tick(&s);
    ck_assert_int_eq(s.d[1].reason, REASON_RECLAIM_PROBE);
    uint64_t step = 4 * GIB / 10;
    ck_assert_uint_eq(s.v[1].actual_bytes, 4 * GIB - step);
    ck_assert_int_eq(s.d[1].cache_verdict, CACHE_UNKNOWN);
    /* its cache refaults at once while its QEMU still waits for host
     * swap: nothing more is taken of its cache meanwhile */
    s.v[1].disk_read_bps = 20.0 * MIB;
    for (int t = 0; t < 2; t++) {
        s.in.now_s += 2;
        sim_tick(&s);
        ck_assert_uint_eq(s.v[1].actual_bytes, 4 * GIB - step);
    }
    s.in.now_s += 2;
    s.v[1].host_faults_ps = 0; /* relieved, still refaulting */
    sim_tick(&s);
    ck_assert_int_eq(s.d[1].reason, REASON_CACHE_HOT);
    ck_assert_int_eq(s.d[1].cache_verdict, CACHE_REUSED);
    ck_assert_int_eq(s.d[1].cache_by, EVIDENCE_REFAULT);
    ck_assert_uint_eq(s.v[1].actual_bytes, 4 * GIB);
    sim_free(&s);
}
END_TEST

START_TEST(working_set_cache_only_after_streaming_cache)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "W", 4 * GIB, 3 * GIB, 1 * GIB);
    guest_init(&s, 1, "S", 1 * GIB, 256 * MIB, 8 * GIB);
    proven_stream(&s, 1);
    s.v[1].floor_bytes = 512 * MIB;
    s.host_base = 5 * GIB + 100 * MIB; /* need ~668 MiB; S can give ~220 MiB */
    for (int t = 0; t < 60; t++)
        sim_tick(&s);
    /* S went down to its floor; W lost only what S could never give,
     * and at most half its cache */
    ck_assert_uint_eq(s.v[1].actual_bytes, 512 * MIB);
    ck_assert_uint_lt(s.v[0].actual_bytes, 4 * GIB);
    /* need 668 MiB - S's 512 MiB = 156 MiB, plus rounding */
    ck_assert_uint_ge(s.v[0].actual_bytes, 4 * GIB - 160 * MIB);
    sim_free(&s);
}
END_TEST

/* Host reclaim's working-set estimate is a floor for the balloon outside
 * the critical tier: a database whose cache is hot (the host saw it
 * accessed) keeps it, a streamer's cache still goes first, and when the
 * host is critical the estimate shelters nothing. */
/* D (1 GiB anon, the rest cache it reuses, almost no free memory) and a
 * streamer S squeezed together; D's host-measured working set ws (-1:
 * host reclaim off).  Returns D's balloon after 60 ticks. */
static uint64_t squeeze_db(uint64_t host_base, int64_t ws, uint64_t cache)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, host_base);
    guest_init(&s, 0, "D", 4 * GIB, 1 * GIB, cache);
    guest_init(&s, 1, "S", 4 * GIB, 256 * MIB, 8 * GIB);
    s.v[0].host_ws_bytes = ws;
    s.v[1].host_ws_bytes = (int64_t)(4 * GIB); /* streamed pages are touched once: all of it */
    proven_stream(&s, 1);
    s.v[1].floor_bytes = 3840 * MIB; /* S can give 256 MiB */
    for (int t = 0; t < 60; t++)
        sim_tick(&s);
    ck_assert_uint_eq(s.v[1].actual_bytes, 3840 * MIB); /* the streamer first, to its floor, whatever its ws */
    uint64_t d = s.v[0].actual_bytes;
    sim_free(&s);
    return d;
}

/* Host reclaim's working-set estimate is a floor for the balloon outside
 * the critical tier: a database whose cache is hot (the host saw it
 * accessed) keeps it, a streamer's cache still goes first, and when the
 * host is critical the estimate shelters nothing. */
START_TEST(host_measured_working_set_is_a_floor)
{
    /* available 300 MiB: below low, above min; 468 MiB to find */
    uint64_t base = 8 * GIB + 300 * MIB;
    uint64_t without = squeeze_db(base, -1, 3 * GIB), with = squeeze_db(base, (int64_t)(3900 * MIB), 3 * GIB);
    ck_assert_uint_le(without, 4 * GIB - 200 * MIB); /* half its cache was fair game */
    ck_assert_uint_ge(with, 3900 * MIB);              /* its measured working set stays */
    /* free memory is no working set, whatever the host saw touched: with
     * 1 GiB of it free, D gives it */
    ck_assert_uint_le(squeeze_db(base, (int64_t)(3900 * MIB), 2 * GIB), 4 * GIB - 200 * MIB);
    /* critical (available 0): the last tier ignores the estimate, as it
     * ignores the peak of used memory */
    uint64_t crit = 8 * GIB - 300 * MIB;
    ck_assert_uint_lt(squeeze_db(crit, (int64_t)(3900 * MIB), 3 * GIB), 3900 * MIB);
}
END_TEST

START_TEST(thrashing_guest_is_protected_and_grows)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "W", 3 * GIB, 3 * GIB, 0);
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 4 * GIB;
    s.v[0].thrashing = true;
    s.v[0].swap_in_bps = 50 * MIB;
    guest_init(&s, 1, "S", 4 * GIB, 256 * MIB, 8 * GIB);
    proven_stream(&s, 1);
    s.host_base = 7 * GIB + 600 * MIB; /* 600 MiB available: idle band */
    uint64_t w0 = s.v[0].actual_bytes, s0 = s.v[1].actual_bytes;
    sim_tick(&s);
    ck_assert_uint_gt(s.v[0].actual_bytes, w0);
    ck_assert_int_eq(s.d[0].reason, REASON_THRASHING);
    /* need first: the growth came from the host's headroom down to min,
     * in this tick; the host, now below low, takes it back from S's
     * streaming cache in the next */
    ck_assert_uint_eq(s.v[1].actual_bytes, s0);
    model_refresh(&s);
    ck_assert_uint_lt(s.in.host.available_bytes, s.in.wm.low);
    ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.min);
    sim_tick(&s);
    ck_assert_uint_lt(s.v[1].actual_bytes, s0);
    for (int t = 0; t < 30; t++)
        sim_tick(&s);
    ck_assert_uint_eq(s.v[0].actual_bytes, 4 * GIB);
    model_refresh(&s);
    ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.low);
    sim_free(&s);
}
END_TEST

/* A reclaim's experiment is measured from where it took the guest from:
 * a guest given its memory back since (balancerctl give-back, with the
 * policy still deciding while paused) starts a new one, so a reclaim
 * that then costs it gives back all it took, not a step toward the size
 * an older reclaim began at. */
START_TEST(an_experiment_ends_when_the_guest_is_given_back)
{
    sim s;
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "G", 1024 * MIB, 400 * MIB, 400 * MIB);
    s.v[0].floor_bytes = 128 * MIB;
    s.host_base = 1024 * MIB + 400 * MIB; /* 400 MiB available: below low */
    for (int t = 0; t < 3; t++)
        later(&s), sim_tick(&s);
    /* its first reclaim's experiment ends with the host roomy */
    s.host_base = 4 * GIB;
    for (int t = 0; t < 10; t++)
        later(&s), sim_tick(&s);
    uint64_t second_from = s.v[0].actual_bytes;
    ck_assert_uint_lt(second_from, 1024 * MIB);
    s.host_base = second_from + 400 * MIB; /* short again */
    later(&s), sim_tick(&s);
    ck_assert_uint_lt(s.v[0].actual_bytes, second_from);
    /* give-back: its whole size, then ticks whose decisions are not made */
    s.v[0].actual_bytes = 1024 * MIB;
    for (int t = 0; t < 5; t++) {
        later(&s);
        model_refresh(&s);
        s.ops->decide(&s.in, s.state, &s.out);
        ck_assert(s.d[0].change && s.d[0].target_bytes < 1024 * MIB);
    }
    /* resumed: taken again, and it thrashes */
    later(&s), sim_tick(&s);
    ck_assert_uint_lt(s.v[0].actual_bytes, 1024 * MIB);
    s.v[0].thrashing = true;
    s.v[0].swap_in_bps = 50 * MIB;
    later(&s), sim_tick(&s);
    ck_assert_uint_eq(s.v[0].actual_bytes, 1024 * MIB);
    sim_free(&s);
}
END_TEST

START_TEST(floor_ceiling_and_mode_off)
{
    sim s;
    sim_init(&s, &policy_split_lru, 3, 0);
    guest_init(&s, 0, "below-floor", 1 * GIB, 128 * MIB, 0);
    s.v[0].floor_bytes = 1536 * MIB;
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 2 * GIB;
    guest_init(&s, 1, "above-ceiling", 2 * GIB, 128 * MIB, 0);
    s.v[1].ceiling_bytes = 1 * GIB;
    guest_init(&s, 2, "off", 2 * GIB, 128 * MIB, 0);
    s.v[2].policy.mode = VM_MODE_OFF;
    s.host_base = 5 * GIB + 100 * MIB; /* far below low */
    sim_tick(&s);
    ck_assert_uint_eq(s.v[0].actual_bytes, 1536 * MIB);
    ck_assert_int_eq(s.d[0].reason, REASON_BELOW_FLOOR);
    ck_assert_uint_eq(s.v[1].actual_bytes, 1 * GIB);
    ck_assert_uint_eq(s.v[2].actual_bytes, 2 * GIB);
    ck_assert(!s.d[2].change);
    ck_assert_int_eq(s.d[2].reason, REASON_MODE_OFF);
    /* keep squeezing: nobody goes below floor, off stays off */
    for (int t = 0; t < 40; t++)
        sim_tick(&s);
    ck_assert_uint_ge(s.v[0].actual_bytes, 1536 * MIB);
    ck_assert_uint_ge(s.v[1].actual_bytes, s.v[1].floor_bytes);
    ck_assert_uint_eq(s.v[2].actual_bytes, 2 * GIB);
    sim_free(&s);
}
END_TEST

START_TEST(never_takes_beyond_available_unless_critical)
{
    sim s;
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "a", 2 * GIB, 1 * GIB, 512 * MIB);
    s.v[0].floor_bytes = 512 * MIB;
    /* available 400 MiB: below low, above min (not critical) */
    s.host_base = 2 * GIB + 400 * MIB;
    s.in.wm.high = 4 * GIB; /* unreachable: keeps reclaiming */
    for (int t = 0; t < 40; t++)
        sim_tick(&s);
    uint64_t reserve = 102 * MIB; /* 5% of ~2 GiB, rounded up below */
    ck_assert_uint_ge(s.v[0].actual_bytes, 1 * GIB + 32 * MIB);
    ck_assert_uint_le(s.v[0].actual_bytes, 1 * GIB + reserve + 16 * MIB);
    sim_free(&s);
}
END_TEST

/* An allocation within a tick is headroom for one to two JUMP_HOLD_S
 * windows: a guest whose used memory rose 600 MiB from one tick to the
 * next, then fell back, is reclaimed down to its used memory plus that,
 * not plus its reserve, for at least an hour; after two, the reserve
 * again. */
START_TEST(a_jump_is_headroom_for_an_hour)
{
    sim s;
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "a", 3 * GIB, 1 * GIB, 512 * MIB);
    s.v[0].floor_bytes = 512 * MIB;
    s.host_base = 3 * GIB + 4 * GIB; /* no pressure while it jumps */
    sim_tick(&s);
    s.in.now_s += 5;
    s.anon[0] = 1 * GIB + 600 * MIB;
    sim_tick(&s);
    s.in.now_s += 5;
    s.anon[0] = 1 * GIB;
    sim_tick(&s);
    /* then pressure, reclaiming all the time */
    s.host_base = 3 * GIB + 400 * MIB;
    s.in.wm.high = 8 * GIB;
    for (int t = 0; t < 60; t++, s.in.now_s += 5)
        sim_tick(&s);
    ck_assert_uint_ge(s.v[0].actual_bytes, 1 * GIB + 600 * MIB);
    ck_assert_uint_le(s.v[0].actual_bytes, 1 * GIB + 600 * MIB + 32 * MIB);
    s.in.now_s += 3300; /* an hour after the jump: still kept */
    for (int t = 0; t < 10; t++, s.in.now_s += 5)
        sim_tick(&s);
    ck_assert_uint_ge(s.v[0].actual_bytes, 1 * GIB + 600 * MIB);
    s.in.now_s += 3600;
    for (int t = 0; t < 60; t++, s.in.now_s += 5)
        sim_tick(&s);
    ck_assert_uint_le(s.v[0].actual_bytes, 1 * GIB + 154 * MIB + 16 * MIB); /* 5% of 3 GiB */
    sim_free(&s);
}
END_TEST

/* Its OOM killer ran below its size (the guest says so: QEMU 9.2's
 * stat-oom-kills, the agent): the allocation that failed never showed as
 * used memory, so its headroom doubles, and it is given room for it at
 * once. */
START_TEST(an_oom_kill_below_its_size_doubles_its_headroom)
{
    sim s;
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "a", 1200 * MIB, 1 * GIB, 0);
    s.v[0].max_bytes = s.v[0].ceiling_bytes = 4 * GIB;
    s.host_base = 1200 * MIB + 300 * MIB; /* short: reclaiming */
    s.in.wm.high = 4 * GIB;
    model_refresh(&s);
    s.v[0].in_need = s.v[0].oom_killed = true;
    s.v[0].need_bytes = 32 * MIB; /* what classify asks: a little */
    s.v[0].host_rss_bytes = (int64_t)s.v[0].actual_bytes; /* it touched all it has */
    s.ops->decide(&s.in, s.state, &s.out);
    uint64_t reserve = 4 * GIB / 20;
    ck_assert_uint_ge(s.d[0].target_bytes, 1 * GIB + 2 * reserve);
    sim_free(&s);
}
END_TEST

/* Only memory that frees host memory is a supply.  Free memory its QEMU
 * never touched (a freshly booted guest's) frees nothing when a balloon
 * takes it; and a guest whose QEMU held on to what its balloon took
 * (locked, hugepage, VFIO memory) gets it back and is not taken from
 * again. */
START_TEST(only_memory_that_frees_host_memory_is_taken)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "fresh", 2 * GIB, 400 * MIB, 0);
    s.v[0].host_rss_bytes = 500 * MIB; /* booted, touched 500 MiB of it */
    guest_init(&s, 1, "pinned", 2 * GIB, 400 * MIB, 1600 * MIB); /* its page cache is what a balloon takes */
    s.v[1].host_rss_bytes = 2 * GIB + 100 * MIB; /* all of it, and its QEMU's own */
    s.host_base = 4 * GIB + 400 * MIB; /* below low, above min: reclaiming */
    s.in.wm.high = 2 * GIB;
    bool taken = false, given_back = false;
    for (int t = 0; t < 20; t++, s.in.now_s += 5) {
        sim_tick(&s);
        taken = taken || s.v[1].actual_bytes < 2 * GIB;
        given_back = given_back ||
                     s.d[1].reason == REASON_FREES_NOTHING;
    }
    ck_assert_msg(s.v[0].actual_bytes == 2 * GIB, "fresh: %llu MiB: %s", (unsigned long long)(s.v[0].actual_bytes / MIB),
                  decision_reason_text(s.d[0].reason));
    ck_assert(taken);      /* its first reclaim was the experiment ... */
    ck_assert(given_back); /* ... which showed its balloon frees nothing */
    ck_assert_msg(s.v[1].actual_bytes == 2 * GIB, "pinned: %llu MiB: %s", (unsigned long long)(s.v[1].actual_bytes / MIB),
                  decision_reason_text(s.d[1].reason));
    /* once touched (all of it, and what its balloon takes leaves its
     * QEMU), the fresh guest's free memory is a supply */
    for (int t = 0; t < 10; t++, s.in.now_s += 5) {
        s.v[0].host_rss_bytes = (int64_t)s.v[0].actual_bytes + 100 * MIB;
        sim_tick(&s);
    }
    ck_assert_msg(s.v[0].actual_bytes < 2 * GIB - 256 * MIB, "fresh, touched: %llu MiB: %s (%s)",
                  (unsigned long long)(s.v[0].actual_bytes / MIB), decision_reason_text(s.d[0].reason), s.out.summary);
    ck_assert_uint_eq(s.v[1].actual_bytes, 2 * GIB); /* the pinned one is not taken again */
    sim_free(&s);
}
END_TEST

/* A critical host: the balloon takes every guest's cache (all of it, not
 * half), never its anonymous working set -- below that the host kernel
 * swaps, as with no balancer -- and nothing from a protected guest. */
START_TEST(critical_takes_cache_never_anon)
{
    sim s;
    sim_init(&s, &policy_split_lru, 3, 0);
    guest_init(&s, 0, "anon-only", 2 * GIB, 2032 * MIB, 0);
    guest_init(&s, 1, "cache", 2 * GIB, 512 * MIB, 1400 * MIB);
    s.v[1].floor_bytes = 256 * MIB;
    guest_init(&s, 2, "protected", 2 * GIB, 2032 * MIB, 0);
    s.v[2].policy.protect = true;
    s.host_base = 6 * GIB - 100 * MIB; /* nothing available: critical, half a cache is not enough */
    for (int t = 0; t < 60; t++)
        sim_tick(&s);
    /* nothing but anon: not ballooned */
    ck_assert_uint_eq(s.v[0].actual_bytes, 2 * GIB);
    /* the cache guest gave more than half its cache, never its anon */
    ck_assert_uint_lt(s.v[1].actual_bytes, 2 * GIB - 700 * MIB);
    ck_assert_uint_ge(s.v[1].actual_bytes, 512 * MIB + 32 * MIB);
    ck_assert_uint_eq(s.v[2].actual_bytes, 2 * GIB);
    model_refresh(&s);
    ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.min);
    sim_free(&s);
}
END_TEST

START_TEST(plenty_grows_short_guests_within_surplus)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "short", 1 * GIB, 1000 * MIB, 0);
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 4 * GIB;
    guest_init(&s, 1, "comfy", 1 * GIB, 256 * MIB, 0);
    s.v[1].ceiling_bytes = s.v[1].max_bytes = 4 * GIB;
    s.host_base = 2 * GIB + 1 * GIB; /* 1 GiB available: 256 MiB above high */
    for (int t = 0; t < 20; t++)
        sim_tick(&s);
    ck_assert_uint_gt(s.v[0].actual_bytes, 1 * GIB);
    ck_assert_uint_eq(s.v[1].actual_bytes, 1 * GIB);
    model_refresh(&s);
    ck_assert_uint_ge(s.in.host.available_bytes, s.in.wm.high);
    sim_free(&s);
}
END_TEST

/* Never promise memory the host does not have: comfort growth is paid
 * from what the host has free now, not from a balloon on its way down
 * (counted as arrived by the watermarks) -- an inflation takes seconds to
 * minutes, and what the host swaps meanwhile is what it lacks */
START_TEST(comfort_spends_only_memory_free_now)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "short", 1 * GIB, 1000 * MIB, 0);
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 4 * GIB;
    guest_init(&s, 1, "S", 2 * GIB, 256 * MIB, 8 * GIB);
    s.v[1].pending_target_bytes = 1 * GIB; /* 1 GiB on its way to the host */
    s.host_base = 3 * GIB + 668 * MIB;    /* 668 MiB free now: above low, below high */
    model_refresh(&s);
    s.ops->decide(&s.in, s.state, &s.out);
    ck_assert_msg(!s.d[0].change, "grown to %llu MiB on memory not yet freed",
                  (unsigned long long)(s.d[0].target_bytes / MIB));
    /* arrived: 1692 MiB free, 924 MiB above high */
    s.v[1].actual_bytes = 1 * GIB;
    s.v[1].pending_target_bytes = 0;
    s.in.now_s += 5;
    model_refresh(&s);
    s.ops->decide(&s.in, s.state, &s.out);
    ck_assert(s.d[0].change);
    ck_assert_uint_gt(s.d[0].target_bytes, 1 * GIB);
    ck_assert_int_eq(s.d[0].reason, REASON_COMFORT);
    sim_free(&s);
}
END_TEST

/* Comfort is paid from lasting plenty: a guest whose free memory a
 * reclaim just took is not grown back for comfort while that reclaim is
 * watched (EXPERIMENT_S) -- a surplus the reclaim made is the reclaim's,
 * and paying it back at once undoes it, the guest touching again what the
 * host must find again (seen in seed at 1.2x: W's free memory taken and
 * given back every few seconds while a stream filled the host) */
START_TEST(comfort_waits_for_lasting_plenty)
{
    sim s;
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "W", 1 * GIB, 600 * MIB, 0);
    s.host_base = 1 * GIB + 400 * MIB; /* 400 MiB available: below low */
    double short_at = -1;
    for (int t = 0; t < 20 && (short_at < 0 || s.in.now_s == short_at); t++) {
        s.in.now_s += 1;
        uint64_t before = s.v[0].actual_bytes;
        sim_tick(&s);
        if (s.v[0].actual_bytes < before)
            short_at = s.in.now_s;
    }
    ck_assert_msg(short_at > 0, "nothing was reclaimed");
    ck_assert_uint_lt(s.v[0].available_bytes, s.v[0].actual_bytes * 15 / 100); /* below comfort */
    s.host_base += 2 * GIB; /* plenty now */
    for (;;) {
        s.in.now_s += 1;
        uint64_t before = s.v[0].actual_bytes;
        sim_tick(&s);
        if (s.v[0].actual_bytes > before) {
            ck_assert_int_eq(s.d[0].reason, REASON_COMFORT);
            ck_assert_msg(s.in.now_s - short_at >= 30, "grown for comfort %.0f s after the reclaim",
                          s.in.now_s - short_at);
            break;
        }
        ck_assert_msg(s.in.now_s - short_at < 60, "never grown for comfort");
    }
    sim_free(&s);
}
END_TEST

START_TEST(no_oscillation_over_many_ticks)
{
    sim s;
    sim_init(&s, &policy_split_lru, 3, 0);
    guest_init(&s, 0, "W", 4 * GIB, 3 * GIB, 512 * MIB);
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 4 * GIB;
    guest_init(&s, 1, "S", 4 * GIB, 512 * MIB, 16 * GIB);
    proven_stream(&s, 1);
    guest_init(&s, 2, "idle", 2 * GIB, 256 * MIB, 128 * MIB);
    s.host_base = 10 * GIB + 200 * MIB;
    int dir[NG] = { 0 }, flips[NG] = { 0 };
    uint64_t prev[NG];
    for (size_t i = 0; i < s.n; i++)
        prev[i] = s.v[i].actual_bytes;
    int quiet_from = -1;
    for (int t = 0; t < 200; t++) {
        uint64_t moved = sim_tick(&s);
        if (moved == 0 && quiet_from < 0)
            quiet_from = t;
        if (moved != 0)
            quiet_from = -1;
        for (size_t i = 0; i < s.n; i++) {
            int d = s.v[i].actual_bytes > prev[i] ? 1 : s.v[i].actual_bytes < prev[i] ? -1 : 0;
            if (d && dir[i] && d != dir[i])
                flips[i]++;
            if (d)
                dir[i] = d;
            prev[i] = s.v[i].actual_bytes;
        }
    }
    for (size_t i = 0; i < s.n; i++)
        ck_assert_msg(flips[i] == 0, "guest %s changed direction %d times", s.v[i].name, flips[i]);
    ck_assert_msg(quiet_from >= 0 && quiet_from < 60, "still moving at the end (quiet from %d)",
                  quiet_from);
    sim_free(&s);
}
END_TEST

/* Two guests in need claim more than the host has free (100 MiB above
 * min): need is answered in the tick that shows it, whatever the host
 * has free (refusing it would leave the guests their OOM killer or swap,
 * which no balancer would), and bounded by use, not by shares or the
 * host's supply: a guest whose use the host cannot measure gets a step
 * a tick, however much it claims. */
START_TEST(need_is_answered_by_use_not_by_what_the_host_has_free)
{
    sim s;
    sim_init(&s, &policy_split_lru, 3, 0);
    guest_init(&s, 0, "greedy", 1 * GIB, 900 * MIB, 0);
    guest_init(&s, 1, "gold", 1 * GIB, 900 * MIB, 0);
    guest_init(&s, 2, "small", 1 * GIB, 100 * MIB, 0);
    for (size_t i = 0; i < 2; i++) {
        s.v[i].max_bytes = s.v[i].ceiling_bytes = 4 * GIB;
        s.v[i].actual_bytes = 1 * GIB;
        s.v[i].in_need = true;
        s.v[i].host_rss_bytes = -1;
    }
    s.v[1].policy.shares = 3000;
    s.host_base = 3 * GIB + 256 * MIB + 100 * MIB;
    model_refresh(&s);
    s.v[0].need_bytes = 2 * GIB; /* greedy */
    s.v[1].need_bytes = 64 * MIB;
    s.v[2].policy.mode = VM_MODE_OFF; /* gives nothing */
    s.ops->decide(&s.in, s.state, &s.out);
    uint64_t step = 1 * GIB / 10;
    ck_assert_uint_eq(s.d[0].target_bytes - 1 * GIB, step);    /* a step, not its 2 GiB */
    ck_assert_uint_eq(s.d[1].target_bytes - 1 * GIB, 64 * MIB); /* what it needs */
    ck_assert_uint_gt(s.d[0].target_bytes + s.d[1].target_bytes - 2 * GIB, 100 * MIB);
    sim_free(&s);
}
END_TEST

START_TEST(shares_weight_the_reclaim)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "gold", 4 * GIB, 512 * MIB, 0);
    s.v[0].policy.shares = 4000;
    guest_init(&s, 1, "bronze", 4 * GIB, 512 * MIB, 0);
    s.v[1].policy.shares = 1000;
    s.host_base = 8 * GIB + 400 * MIB; /* need 368 MiB: below either step */
    sim_tick(&s);
    uint64_t gold = 4 * GIB - s.v[0].actual_bytes, bronze = 4 * GIB - s.v[1].actual_bytes;
    ck_assert_uint_gt(bronze, 0);
    ck_assert_msg(bronze >= 3 * gold, "bronze gave %llu, gold %llu", (unsigned long long)bronze,
                  (unsigned long long)gold);
    sim_free(&s);
}
END_TEST

START_TEST(stale_stats_hold)
{
    sim s;
    sim_init(&s, &policy_split_lru, 1, 0);
    guest_init(&s, 0, "a", 4 * GIB, 512 * MIB, 0);
    s.host_base = 4 * GIB + 100 * MIB;
    model_refresh(&s);
    s.v[0].stats_valid = false;
    s.ops->decide(&s.in, s.state, &s.out);
    ck_assert(!s.d[0].change);
    ck_assert_int_eq(s.d[0].reason, REASON_NO_STATS);
    sim_free(&s);
}
END_TEST

/* A verdict from before the stats went stale is no evidence: a stale
 * "thrashing" or "in need" guest does not grow at a donor's expense. */
START_TEST(stale_verdicts_take_nothing)
{
    sim s;
    sim_init(&s, &policy_split_lru, 2, 0);
    guest_init(&s, 0, "liar", 1 * GIB, 900 * MIB, 0);
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 4 * GIB;
    guest_init(&s, 1, "donor", 1 * GIB, 300 * MIB, 600 * MIB);
    s.host_base = 2 * GIB + 600 * MIB; /* between low and high: headroom to min */
    for (int t = 0; t < 20; t++) {
        model_refresh(&s);
        s.v[0].stats_valid = false;
        s.v[0].thrashing = true;
        s.v[0].in_need = true;
        s.v[0].need_bytes = 512 * MIB;
        s.ops->decide(&s.in, s.state, &s.out);
        ck_assert(!s.d[0].change);
        ck_assert(!s.d[1].change);
    }
    sim_free(&s);
}
END_TEST

/* ---- mom: expected values from oVirt/mom doc/balloon.rules, case by case ---- */

/* MoM samples every 5 s and its policy engine first runs 10 s after the
 * start: feed the same state at t = 0, 5, 10 and return the decision of
 * that first run (every earlier call asks for no change). */
static void mom_first_run(sim *s)
{
    for (int t = 0; t <= 10; t += 5) {
        s->in.now_s = 1000.0 + t;
        s->ops->decide(&s->in, s->state, &s->out);
        if (t < 10)
            ck_assert_msg(!s->d[0].change, "decided at t=%d, before the 10 s policy interval", t);
    }
}

START_TEST(mom_shrinks_5_percent_under_pressure)
{
    sim s;
    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "a", 4 * GIB, 512 * MIB, 0);
    s.v[0].floor_bytes = 0;
    s.host_base = 4 * GIB + 800 * MIB; /* 800 MiB of 4.8 GiB free: 16.3% < pressure_threshold 20% */
    model_refresh(&s);
    mom_first_run(&s);
    /* guest_free_percent = 0.20 * 0.167 / 0.20; balloon_min = max(0, 512 MiB
     * + 0.167 * 4 GiB) = 1.2 GiB; balloon_size = 4 GiB * (1 - 0.05) wins */
    ck_assert(s.d[0].change);
    ck_assert_uint_eq(s.d[0].target_bytes, (uint64_t)(4.0 * GIB * 0.95));
    ck_assert_int_eq(s.d[0].reason, REASON_MOM_SHRINK);
    sim_free(&s);
}
END_TEST

/* (defvar balloon_min (max guest.balloon_min (+ guest_used_mem ...))): the
 * guaranteed memory is a floor (upstream commit 8974f3d, 2013, changed min
 * to max: "guest.balloon_min cannot act as a floor value as it is intended
 * to"). */
START_TEST(mom_balloon_min_is_the_larger_of_guaranteed_and_need)
{
    sim s;
    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "a", 1100 * MIB, 1000 * MIB, 0);
    s.v[0].floor_bytes = 2 * GIB; /* guaranteed above the current size */
    s.host_base = 1200 * MIB;     /* host free 100/1200 = 8.3%: pressure */
    model_refresh(&s);
    mom_first_run(&s);
    /* balloon_size = max(1045 MiB, balloon_min 2 GiB) = 2 GiB > balloon_cur:
     * (<= balloon_size guest.balloon_cur) fails, nothing is set */
    ck_assert(!s.d[0].change);
    sim_free(&s);

    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "a", 1100 * MIB, 1000 * MIB, 0);
    s.v[0].floor_bytes = 1050 * MIB; /* guaranteed below the need */
    s.host_base = 1200 * MIB;
    model_refresh(&s);
    mom_first_run(&s);
    /* used = 1100 - 100 MiB free; need = used + (0.20 * 0.0833 / 0.20) *
     * 1100 MiB = 1091.7 MiB > 1050 MiB guaranteed and > 1045 MiB (-5%) */
    double hfp = 100.0 / 1200.0;
    double need = 1000.0 * MIB + (0.20 * hfp / 0.20) * 1100.0 * MIB;
    ck_assert(s.d[0].change);
    ck_assert_msg(llabs((long long)s.d[0].target_bytes - (long long)need) < 4096, "target %llu want %.0f",
                  (unsigned long long)s.d[0].target_bytes, need);
    sim_free(&s);
}
END_TEST

START_TEST(mom_grows_without_pressure_and_ignores_tiny_changes)
{
    sim s;
    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "a", 2 * GIB, 256 * MIB, 0);
    s.v[0].ceiling_bytes = s.v[0].max_bytes = (uint64_t)(2.0 * GIB * 1.002);
    s.host_base = 20 * GIB;
    model_refresh(&s);
    mom_first_run(&s);
    /* +5% is clamped to balloon_max, 0.2% away: not > min_balloon_change_percent 0.25% */
    ck_assert(!s.d[0].change);
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 4 * GIB;
    s.in.now_s += 10; /* the next policy run */
    s.ops->decide(&s.in, s.state, &s.out);
    ck_assert(s.d[0].change);
    ck_assert_uint_eq(s.d[0].target_bytes, (uint64_t)(2.0 * GIB * 1.05));
    /* and not again until 10 s later */
    later(&s), s.ops->decide(&s.in, s.state, &s.out);
    ck_assert(!s.d[0].change);
    sim_free(&s);
}
END_TEST

/* grow_guest clamps to balloon_min first, then to balloon_max (upstream
 * commit e0f3d3b "Reorder limit checks in grow guest"): the maximum wins. */
START_TEST(mom_grow_maximum_wins_over_need)
{
    sim s;
    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "a", 1 * GIB, 1 * GIB, 0); /* all used: need = used + 20% */
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 1100 * MIB;
    s.host_base = 20 * GIB;
    model_refresh(&s);
    mom_first_run(&s);
    ck_assert(s.d[0].change);
    ck_assert_uint_eq(s.d[0].target_bytes, 1100 * MIB);
    sim_free(&s);
}
END_TEST

/* StatAvg: the need is the mean of the last 10 samples, 5 s apart. */
START_TEST(mom_need_is_averaged_over_its_history)
{
    sim s;
    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "a", 2 * GIB, 2 * GIB, 0); /* no free memory */
    s.v[0].floor_bytes = 0;
    s.host_base = 2 * GIB + 200 * MIB; /* 9.1% free: pressure */
    model_refresh(&s);
    s.in.now_s = 0;
    s.ops->decide(&s.in, s.state, &s.out); /* sample 1: unused 0 */
    s.v[0].free_bytes = 400 * MIB;          /* the guest frees 400 MiB */
    s.in.now_s = 5;
    s.ops->decide(&s.in, s.state, &s.out); /* sample 2: unused 400 MiB */
    s.in.now_s = 10;
    s.ops->decide(&s.in, s.state, &s.out); /* sample 3 and the first run */
    /* used = 2 GiB - (0 + 400 + 400) / 3 MiB; need = used + (0.2 * hfp / 0.2)
     * * 2 GiB = 1963.5 MiB, above the -5% step (1945.6 MiB); with the last
     * sample alone the need would be 1830 MiB and the step would win */
    double hfp = 200.0 / (2048.0 + 200.0);
    double need = 2.0 * GIB - 800.0 / 3.0 * MIB + hfp * 2.0 * GIB;
    double step = 2.0 * GIB * 0.95;
    ck_assert(need > step);
    double want = need;
    ck_assert(s.d[0].change);
    ck_assert_msg(llabs((long long)s.d[0].target_bytes - (long long)want) < 4096, "target %llu want %.0f",
                  (unsigned long long)s.d[0].target_bytes, want);
    sim_free(&s);
}
END_TEST

START_TEST(mom_critical_forces_below_need)
{
    sim s;
    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "a", 4 * GIB, 3900 * MIB, 0);
    s.v[0].floor_bytes = 0;
    s.host_base = 4 * GIB + 100 * MIB; /* 2.4% free: critical */
    for (int t = 0; t < 40; t++) {
        s.in.now_s = 5.0 * t;
        sim_tick(&s);
    }
    /* guest_free_percent = -0.05 + host_free_percent < 0: MoM squeezes a
     * guest below its used memory (forcing it to swap), exactly the
     * behaviour split-lru avoids */
    ck_assert_uint_lt(s.v[0].actual_bytes, 3900 * MIB);
    sim_free(&s);
}
END_TEST

/* ---- mom-vdsm: expected values from oVirt/vdsm static/etc/vdsm/mom.d ---- */

/* Feed the same state at t = 0, 15 (mom.conf.in: monitors and policy engine
 * every 15 s, the engine sleeping first) and return the first run. */
static void vdsm_first_run(sim *s)
{
    for (int t = 0; t <= 15; t += 5) {
        s->in.now_s = 2000.0 + t;
        s->ops->decide(&s->in, s->state, &s->out);
        if (t < 15)
            ck_assert_msg(!s->d[0].change, "decided at t=%d, before the 15 s policy interval", t);
    }
}

/* 02-balloon.policy grow_guest: the free target is scaled by host pressure
 * (guest_free_percent = 0.20 * host_free_percent / 0.20), where
 * doc/balloon.rules grows to used + 0.20 * balloon_cur. */
START_TEST(vdsm_grow_scales_free_target_with_host_free)
{
    sim s;
    sim_init(&s, &policy_mom_vdsm, 1, 0);
    guest_init(&s, 0, "a", 1 * GIB, 1000 * MIB, 0);
    s.v[0].floor_bytes = 0;
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 4 * GIB;
    s.host_base = 1 * GIB + 3 * GIB; /* 3 of 4 GiB free: 75%, no pressure */
    model_refresh(&s);
    vdsm_first_run(&s);
    /* used = 1024 - 24 MiB; guest_free_percent = 0.2 * 0.75 / 0.2 = 0.75;
     * balloon_min = 1000 MiB + 0.75 * 1024 MiB = 1768 MiB > 1.05 * 1 GiB */
    ck_assert(s.d[0].change);
    double want = 1000.0 * MIB + 0.75 * 1024.0 * MIB;
    ck_assert_msg(llabs((long long)s.d[0].target_bytes - (long long)want) < 4096, "target %llu want %.0f",
                  (unsigned long long)s.d[0].target_bytes, want);
    ck_assert_int_eq(s.d[0].reason, REASON_MOM_VDSM_GROW);
    sim_free(&s);

    /* the same state under upstream MoM: used + 0.20 * balloon_cur */
    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "a", 1 * GIB, 1000 * MIB, 0);
    s.v[0].floor_bytes = 0;
    s.v[0].ceiling_bytes = s.v[0].max_bytes = 4 * GIB;
    s.host_base = 4 * GIB;
    model_refresh(&s);
    mom_first_run(&s);
    want = 1000.0 * MIB + 0.20 * 1024.0 * MIB;
    ck_assert(s.d[0].change);
    ck_assert_msg(llabs((long long)s.d[0].target_bytes - (long long)want) < 4096, "target %llu want %.0f",
                  (unsigned long long)s.d[0].target_bytes, want);
    sim_free(&s);
}
END_TEST

/* guest_qos: (if (< guest.balloon_cur guest.balloon_min) (guest.Control
 * "balloon_target" guest.balloon_min)) runs for every guest, stats or not. */
START_TEST(vdsm_guest_qos_lifts_to_balloon_min)
{
    sim s;
    sim_init(&s, &policy_mom_vdsm, 1, 0);
    guest_init(&s, 0, "a", 1 * GIB, 512 * MIB, 0);
    s.v[0].max_bytes = s.v[0].ceiling_bytes = 4 * GIB;
    s.v[0].floor_bytes = 1536 * MIB;
    s.host_base = 1 * GIB + 100 * MIB; /* pressure: the balloon rules would shrink */
    model_refresh(&s);
    s.v[0].stats_valid = false;       /* and no stats: the balloon rules skip it */
    vdsm_first_run(&s);
    ck_assert(s.d[0].change);
    ck_assert_uint_eq(s.d[0].target_bytes, 1536 * MIB);
    ck_assert_int_eq(s.d[0].reason, REASON_MOM_VDSM_GUEST_QOS);
    sim_free(&s);
}
END_TEST

/* Guest ids are as long as the backend makes them ("qmp:" + a socket path
 * is often over 40 bytes): the history must still find the guest, and the
 * engine keeps its own cadence under a 2 s tick (10, 20, 30 s; not 12, 24). */
START_TEST(mom_long_ids_and_a_2s_tick)
{
    sim s;
    sim_init(&s, &policy_mom, 1, 0);
    guest_init(&s, 0, "qmp:/var/tmp/membal-bench-abcdefgh/seed-mom-1/W/qmp.sock", 4 * GIB, 512 * MIB, 0);
    s.v[0].floor_bytes = 0;
    s.host_base = 4 * GIB + 800 * MIB; /* pressure: every run shrinks 5% */
    int runs[8], n = 0;
    for (int t = 0; t <= 40; t += 2) {
        model_refresh(&s);
        s.in.now_s = 500.0 + t;
        s.ops->decide(&s.in, s.state, &s.out);
        if (s.d[0].change && n < 8) {
            runs[n++] = t;
            s.v[0].actual_bytes = s.d[0].target_bytes;
        }
    }
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(runs[0], 10);
    ck_assert_int_eq(runs[1], 20);
    ck_assert_int_eq(runs[2], 30);
    ck_assert_int_eq(runs[3], 40);
    sim_free(&s);
}
END_TEST

START_TEST(cadence_is_a_fixed_schedule)
{
    double next = 10;
    ck_assert(!cadence_due(&next, 10, 9.5));
    ck_assert(cadence_due(&next, 10, 9.8)); /* a timer that fired a little early */
    ck_assert(next == 20);
    ck_assert(!cadence_due(&next, 10, 18));
    ck_assert(cadence_due(&next, 10, 45)); /* missed 20 and 30: runs once, next at 50 */
    ck_assert(next == 50);
}
END_TEST


/* ---- proxmox: expected values from pve-manager PVE/AutoBalloon.pm ---- */

static void pve_host(sim *s, uint64_t total, uint64_t available)
{
    model_refresh(s);
    s->in.host.total_bytes = total;
    s->in.host.available_bytes = available;
}

/* pvestatd: the first cycle does nothing, then every 10 s. */
static void pve_first_run(sim *s)
{
    for (int t = 0; t <= 10; t += 2) {
        s->in.now_s = 3000.0 + t;
        s->ops->decide(&s->in, s->state, &s->out);
        if (t < 10)
            for (size_t i = 0; i < s->n; i++)
                ck_assert_msg(!s->d[i].change, "decided at t=%d, before the first pvestatd update", t);
    }
}

static void pve_guest(sim *s, size_t i, const char *name, uint64_t balloon, uint64_t min, uint64_t max,
                      uint64_t freemem)
{
    guest_init(s, i, name, balloon, 0, 0);
    s->v[i].floor_bytes = min;
    s->v[i].max_bytes = s->v[i].ceiling_bytes = max;
    s->free_override[i] = freemem;
}

START_TEST(pve_shrinks_vms_with_free_memory_first_in_100mib_steps)
{
    sim s;
    sim_init(&s, &policy_proxmox, 2, 0);
    /* A: free 600 MiB > 0.25 * balloon_min: idlist2; B: 100 MiB free: idlist1 */
    pve_guest(&s, 0, "A", 2 * GIB, 1 * GIB, 2 * GIB, 600 * MIB);
    pve_guest(&s, 1, "B", 2 * GIB, 1 * GIB, 2 * GIB, 100 * MIB);
    pve_host(&s, 4 * GIB, 512 * MIB);
    pve_first_run(&s);
    /* goal = int(4 GiB * 80 / 100 - 3.5 GiB) = -307.2 MiB: A alone desires
     * 2 GiB + goal, one step of $maxchange (100 MiB) per cycle; B, under
     * pressure, is only asked if A made no progress */
    ck_assert(s.d[0].change);
    ck_assert_uint_eq(s.d[0].target_bytes, 2 * GIB - 100 * MIB);
    ck_assert(!s.d[1].change);
    ck_assert_int_eq(s.d[0].reason, REASON_PVE_SHRINK);
    sim_free(&s);
}
END_TEST

START_TEST(pve_grows_vms_under_pressure_first)
{
    sim s;
    sim_init(&s, &policy_proxmox, 2, 0);
    pve_guest(&s, 0, "A", 1 * GIB, 1 * GIB, 2 * GIB, 50 * MIB);         /* idlist1 */
    pve_guest(&s, 1, "B", 1536 * MIB, 1 * GIB, 2 * GIB, 800 * MIB);     /* idlist2 */
    pve_host(&s, 4 * GIB, 2 * GIB);
    pve_first_run(&s);
    /* goal = 3276.8 - 2048 MiB > 10 MiB: grow; A desires min(2 GiB, 1 GiB +
     * goal) and gets one 100 MiB step; A progressed, so B is not considered */
    ck_assert(s.d[0].change);
    ck_assert_uint_eq(s.d[0].target_bytes, 1 * GIB + 100 * MIB);
    ck_assert(!s.d[1].change);
    sim_free(&s);
}
END_TEST

/* The fallback: when the VMs with free memory make no progress, all VMs
 * are asked (if ($rest <= $goal) { $rest = &$change_func($res, $idlist, $rest); }). */
START_TEST(pve_falls_back_to_all_vms)
{
    sim s;
    sim_init(&s, &policy_proxmox, 2, 0);
    /* A has free memory but is at its minimum (desired cannot go lower); B is under pressure */
    pve_guest(&s, 0, "A", 1 * GIB, 1 * GIB, 2 * GIB, 600 * MIB);
    pve_guest(&s, 1, "B", 2 * GIB, 1 * GIB, 2 * GIB, 50 * MIB);
    pve_host(&s, 4 * GIB, 512 * MIB);
    pve_first_run(&s);
    ck_assert(!s.d[0].change);
    ck_assert(s.d[1].change);
    ck_assert_uint_eq(s.d[1].target_bytes, 2 * GIB - 100 * MIB);
    sim_free(&s);
}
END_TEST

START_TEST(pve_dead_band_and_cadence)
{
    sim s;
    sim_init(&s, &policy_proxmox, 1, 0);
    pve_guest(&s, 0, "A", 2 * GIB, 1 * GIB, 2 * GIB, 600 * MIB);
    /* memused = 80% of total - 8 MiB: goal +8 MiB, inside +-10 MiB */
    uint64_t total = 4 * GIB;
    pve_host(&s, total, total - (uint64_t)(total * 0.8) + 8 * MIB);
    pve_first_run(&s);
    ck_assert(!s.d[0].change);
    /* now a real shrink goal, but the next cycle is 10 s away */
    pve_host(&s, total, 512 * MIB);
    s.in.now_s += 4;
    s.ops->decide(&s.in, s.state, &s.out);
    ck_assert(!s.d[0].change);
    s.in.now_s += 6;
    s.ops->decide(&s.in, s.state, &s.out);
    ck_assert(s.d[0].change);
    sim_free(&s);
}
END_TEST

/* Shares: "The larger the number is, the more memory this VM gets." */
START_TEST(pve_shares_decide_who_gives)
{
    sim s;
    sim_init(&s, &policy_proxmox, 2, 0);
    pve_guest(&s, 0, "A", 2 * GIB, 1 * GIB, 2 * GIB, 600 * MIB);
    pve_guest(&s, 1, "B", 2 * GIB, 1 * GIB, 2 * GIB, 600 * MIB);
    s.v[1].policy.shares = 3000;
    uint64_t total = 4 * GIB;
    pve_host(&s, total, total - (uint64_t)(total * 0.8) - 50 * MIB); /* goal -50 MiB */
    pve_first_run(&s);
    /* pass 1: A desires 1 GiB + (2048 - 50) MiB / 4, steps 100 MiB down;
     * B desires more than maxmem (done); pass 2: A alone, alloc_new = 974
     * MiB: desired 1998 MiB, which is where A ends: all 50 MiB from A */
    ck_assert(s.d[0].change);
    ck_assert_msg(llabs((long long)s.d[0].target_bytes - (long long)(1998 * MIB)) < 1024, "A target %llu",
                  (unsigned long long)s.d[0].target_bytes);
    ck_assert(!s.d[1].change);
    sim_free(&s);
}
END_TEST

START_TEST(none_never_changes)
{
    sim s;
    sim_init(&s, &policy_none, 1, 0);
    guest_init(&s, 0, "a", 4 * GIB, 512 * MIB, 0);
    s.host_base = 4 * GIB;
    ck_assert_uint_eq(sim_tick(&s), 0);
    sim_free(&s);
}
END_TEST

START_TEST(registry_lookup)
{
    ck_assert_ptr_eq(policy_lookup("split-lru"), &policy_split_lru);
    ck_assert_ptr_eq(policy_lookup("mom"), &policy_mom);
    ck_assert_ptr_eq(policy_lookup("mom-vdsm"), &policy_mom_vdsm);
    ck_assert_ptr_eq(policy_lookup("proxmox"), &policy_proxmox);
    ck_assert_ptr_eq(policy_lookup("none"), &policy_none);
    ck_assert_ptr_null(policy_lookup("split_lru"));
    ck_assert_ptr_null(policy_lookup(NULL));
}
END_TEST

/* ---- classification ---- */

START_TEST(thrash_enters_and_exits_with_hysteresis)
{
    classify_params p;
    classify_params_default(&p);
    classify_state st = { 0 };
    guest_view g = { .stats_valid = true, .actual_bytes = 2 * GIB, .cache_bytes = 64 * MIB, .reclaimable_cache_bytes = 64 * MIB };
    classify_update(&st, &g, &p);
    ck_assert(!st.thrashing);
    g.swap_in_bps = 4 * MIB;
    classify_update(&st, &g, &p);
    ck_assert(st.thrashing);
    ck_assert(!st.streaming);
    g.swap_in_bps = 0;
    for (unsigned i = 0; i + 1 < p.quiet_ticks_exit; i++) {
        classify_update(&st, &g, &p);
        ck_assert(st.thrashing);
    }
    classify_update(&st, &g, &p);
    ck_assert(!st.thrashing);
    /* stale samples change nothing */
    g.major_faults_ps = 1000;
    g.stats_valid = false;
    classify_update(&st, &g, &p);
    ck_assert(!st.thrashing);
}
END_TEST

/* A guest that has eaten half its reserve is in need however slowly it
 * got there, by the host's account of its used memory; not at its
 * ceiling, where it has nothing to be given (a database whose shared
 * buffers fill its RAM would be in need for ever, and never a donor). */
START_TEST(reserve_half_eaten_is_need_below_the_ceiling)
{
    classify_params p;
    classify_params_default(&p);
    classify_state st = { 0 };
    guest_view g = { .stats_valid = true, .actual_bytes = 4 * GIB, .ceiling_bytes = 8 * GIB,
                     .used_bytes = 4 * GIB - 64 * MIB, .available_bytes = 64 * MIB };
    classify_update(&st, &g, &p); /* reserve 5%: 205 MiB, 64 MiB left */
    ck_assert(st.need);
    ck_assert_uint_ge(st.need_bytes, 140 * MIB);
    classify_state full = { 0 };
    g.ceiling_bytes = 4 * GIB;
    classify_update(&full, &g, &p);
    ck_assert(!full.need);
    /* what it reports available is not the host's account: a guest that
     * says nothing is left while its used memory (clamped to what its QEMU
     * touched) leaves plenty is not in need */
    classify_state liar = { 0 };
    g.ceiling_bytes = 8 * GIB;
    g.used_bytes = 1 * GIB;
    g.available_bytes = 0;
    classify_update(&liar, &g, &p);
    ck_assert(!liar.need);
}
END_TEST

START_TEST(streaming_needs_big_cache_and_no_faults)
{
    classify_params p;
    classify_params_default(&p);
    classify_state st = { 0 };
    guest_view g = { .stats_valid = true, .actual_bytes = 4 * GIB, .cache_bytes = 3 * GIB, .reclaimable_cache_bytes = 3 * GIB,
                     .available_bytes = 3 * GIB,
                     .disk_read_bps = 50.0 * MIB };
    classify_update(&st, &g, &p);
    ck_assert(st.streaming);
    g.major_faults_ps = 50; /* cache that costs faults to refill is reused */
    classify_update(&st, &g, &p);
    ck_assert(!st.streaming);
    g.major_faults_ps = 0;
    g.cache_bytes = g.reclaimable_cache_bytes = 256 * MIB;
    classify_update(&st, &g, &p);
    ck_assert(!st.streaming);
    /* a database whose 3 GiB of "cache" is its shared buffers (Shmem),
     * reading its disk: 256 MiB of it can be dropped, so no stream */
    g.cache_bytes = 3 * GIB;
    classify_update(&st, &g, &p);
    ck_assert(!st.streaming);
    g.cache_bytes = g.reclaimable_cache_bytes = 256 * MIB;
    /* a big cache its guest does not read from disk (the host sees no
     * reads): a cache in use or at rest, e.g. a buffered-IO database */
    g.cache_bytes = g.reclaimable_cache_bytes = 3 * GIB;
    g.disk_read_bps = 0;
    classify_update(&st, &g, &p);
    ck_assert(!st.streaming);
    /* where the host cannot measure disk reads, the cache alone decides */
    g.disk_read_bps = -1;
    classify_update(&st, &g, &p);
    ck_assert(st.streaming);
}
END_TEST

/* ---- host reclaim: how much, from which node, who gives first ---- */

START_TEST(reclaim_shortfall_only_below_low)
{
    /* at or above low: nothing, whatever high says */
    ck_assert_uint_eq(reclaim_shortfall(500 * MIB, 500 * MIB, 800 * MIB, 0), 0);
    /* below low: up to high */
    ck_assert_uint_eq(reclaim_shortfall(400 * MIB, 500 * MIB, 800 * MIB, 0), 400 * MIB);
    /* what the balloons bring this tick counts first */
    ck_assert_uint_eq(reclaim_shortfall(400 * MIB, 500 * MIB, 800 * MIB, 100 * MIB), 300 * MIB);
    ck_assert_uint_eq(reclaim_shortfall(400 * MIB, 500 * MIB, 800 * MIB, 500 * MIB), 0);
}
END_TEST

START_TEST(reclaim_wants_per_node_classzone)
{
    host_view host = { .total_bytes = 8 * GIB, .available_bytes = 3 * GIB };
    watermarks wm = { .min = 512 * MIB, .low = 1 * GIB, .high = 2 * GIB };
    reclaim_want w[2];
    /* one node: the host as a whole, here above low */
    reclaim_node one = { 0, 8 * GIB, 3 * GIB };
    ck_assert_uint_eq(reclaim_plan_wants(&host, &wm, &one, 1, 0, w), 0);
    host.available_bytes = 768 * MIB;
    ck_assert_uint_eq(reclaim_plan_wants(&host, &wm, &one, 1, 0, w), 1);
    ck_assert_int_eq(w[0].node, -1);
    ck_assert_uint_eq(w[0].bytes, 2 * GIB - 768 * MIB);
    /* two equal nodes, node 1 short of its half of low (512 MiB) although
     * the host as a whole is fine: only node 1 gives, up to its half of high */
    host.available_bytes = 3 * GIB;
    reclaim_node two[2] = { { 0, 4 * GIB, 2 * GIB + 768 * MIB }, { 1, 4 * GIB, 256 * MIB } };
    ck_assert_uint_eq(reclaim_plan_wants(&host, &wm, two, 2, 0, w), 1);
    ck_assert_int_eq(w[0].node, 1);
    ck_assert_uint_eq(w[0].bytes, 1 * GIB - 256 * MIB);
    /* no node short, the host short: host-wide */
    two[1].reclaimable_bytes = 2 * GIB;
    host.available_bytes = 512 * MIB;
    ck_assert_uint_eq(reclaim_plan_wants(&host, &wm, two, 2, 0, w), 1);
    ck_assert_int_eq(w[0].node, -1);
}
END_TEST

/* Proactive pageouts keep to cold used memory: what the balloon cannot
 * take for nothing (free memory, page cache). */
START_TEST(proactive_room_is_cold_used_memory)
{
    guest_view v = { .stats_valid = true, .actual_bytes = 512 * MIB };
    /* a database: 200 MiB written, 160 MiB of it hot (plus 30 MiB of
     * kernel), 270 MiB free (never touched), 10 MiB of cache: 42 MiB of
     * its used memory is cold */
    v.free_bytes = 270 * MIB;
    v.cache_bytes = v.reclaimable_cache_bytes = 10 * MIB;
    ck_assert_uint_eq(reclaim_proactive_room(&v, 190 * MIB, 60 * MIB, 0), 42 * MIB);
    /* what is in host swap already counts against it */
    ck_assert_uint_eq(reclaim_proactive_room(&v, 190 * MIB, 60 * MIB, 40 * MIB), 2 * MIB);
    ck_assert_uint_eq(reclaim_proactive_room(&v, 190 * MIB, 60 * MIB, 50 * MIB), 0);
    /* never more than is cold */
    ck_assert_uint_eq(reclaim_proactive_room(&v, 190 * MIB, 20 * MIB, 0), 20 * MIB);
    /* an idle guest whose cold memory is its page cache (300 MiB read
     * once) and free memory: the balloon's, hardly any of it host swap's */
    v.free_bytes = 150 * MIB;
    v.cache_bytes = v.reclaimable_cache_bytes = 300 * MIB;
    ck_assert_uint_eq(reclaim_proactive_room(&v, 20 * MIB, 400 * MIB, 0), 42 * MIB);
    /* a guest claiming more free and cache than its balloon holds: nothing */
    v.free_bytes = 400 * MIB;
    v.cache_bytes = v.reclaimable_cache_bytes = 300 * MIB;
    ck_assert_uint_eq(reclaim_proactive_room(&v, 0, 400 * MIB, 0), 0);
    /* used memory all hot: nothing */
    v.free_bytes = 100 * MIB;
    v.cache_bytes = v.reclaimable_cache_bytes = 12 * MIB;
    ck_assert_uint_eq(reclaim_proactive_room(&v, 450 * MIB, 100 * MIB, 0), 0);
    /* no stats (no balloon driver): the balloon cannot take anything, so
     * everything cold may go to host swap */
    v.stats_valid = false;
    ck_assert_uint_eq(reclaim_proactive_room(&v, 450 * MIB, 100 * MIB, 0), 100 * MIB);
}
END_TEST

/* The memcg source's proactive step: Senpai's 1% of the group's charge a
 * round, never more than the cold used memory a proactive pageout may
 * take, nor than is left of the round's budget. */
START_TEST(memcg_proactive_is_senpais_probe_within_the_room)
{
    guest_view v = { .stats_valid = true, .actual_bytes = 512 * MIB };
    v.free_bytes = 100 * MIB;
    v.cache_bytes = v.reclaimable_cache_bytes = 12 * MIB;
    /* 400 MiB used, 580 MiB charged (its QEMU's own memory too): 5.8 MiB */
    ck_assert_uint_eq(reclaim_memcg_proactive(&v, 580 * MIB, 0, UINT64_MAX), (uint64_t)(580 * MIB * 0.01));
    /* the budget left this round */
    ck_assert_uint_eq(reclaim_memcg_proactive(&v, 580 * MIB, 0, MIB), MIB);
    /* what is in host swap already counts against the cold used memory */
    ck_assert_uint_eq(reclaim_memcg_proactive(&v, 580 * MIB, 398 * MIB, UINT64_MAX), 2 * MIB);
    /* a guest whose memory is free and cache: the balloon's, not host swap's */
    v.free_bytes = 250 * MIB;
    v.cache_bytes = v.reclaimable_cache_bytes = 262 * MIB;
    ck_assert_uint_eq(reclaim_memcg_proactive(&v, 580 * MIB, 0, UINT64_MAX), 0);
}
END_TEST

/* The host-reclaim SLO: promotions against a budget of the working set,
 * pressure from the agent's PSI or the QEMU's own faults, with hysteresis;
 * and the one-minute average it is judged on. */
START_TEST(reclaim_slo_budget_pressure_hysteresis)
{
    /* 600 MiB working set, 0.2%/min: 1.2 MiB a minute, 20.48 KiB/s */
    reclaim_slo_input in = { 600 * MIB, 0, 0.2, 0, false, 0, false };
    double budget = 0.2 / 100 * 600.0 * MIB / 60;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_WITHIN);
    in.promoted_bps = budget * 1.01;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_OVER_BUDGET);
    /* back under the budget is not enough to come back inside ... */
    in.promoted_bps = budget * 0.9;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_OVER_BUDGET), SLO_OVER_BUDGET);
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_WITHIN);
    /* ... three quarters of it is */
    in.promoted_bps = budget * 0.74;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_OVER_BUDGET), SLO_WITHIN);
    /* its QEMU faulting beyond the whole budget for other reasons: pressure,
     * and pressure wins over the budget */
    in.foreign_fault_bps = budget * 1.5;
    in.promoted_bps = budget * 2;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_PRESSURE);
    /* ... unless the host is short: then they are the host kernel's own
     * reclaim, which ours (cold chunks) spares the working set from; the
     * promotion budget still holds */
    in.host_short = true;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_OVER_BUDGET);
    in.promoted_bps = 0;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_WITHIN);
    in.host_short = false;
    in.promoted_bps = budget * 2;
    in.foreign_fault_bps = -1; /* unknown: no evidence */
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_OVER_BUDGET);
    in.promoted_bps = 0;
    /* the agent's PSI counts only while its reports are fresh */
    in.agent_psi_some = 5;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_WITHIN);
    in.agent_fresh = true;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_PRESSURE);
    in.agent_psi_some = 0.9;
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_PRESSURE), SLO_PRESSURE);
    ck_assert_int_eq(reclaim_slo_judge(&in, SLO_WITHIN), SLO_WITHIN);
    /* nothing of a working set left: any promotion is over budget */
    reclaim_slo_input none = { 0, 1, 0.2, 0, false, 0, false };
    ck_assert_int_eq(reclaim_slo_judge(&none, SLO_WITHIN), SLO_OVER_BUDGET);
    ck_assert_str_eq(reclaim_slo_name(SLO_OVER_BUDGET), "over-budget");
    /* the average: a steady rate converges to it, a burst decays with a
     * one-minute time constant */
    double avg = 0;
    for (int i = 0; i < 600; i++)
        avg = reclaim_rate_average(avg, 1000, 1);
    ck_assert_double_eq_tol(avg, 1000, 1);
    avg = reclaim_rate_average(0, 60000, 1);
    ck_assert_double_eq_tol(avg, 60000 * (1 - exp(-1.0 / 60)), 1e-6);
    double after = avg;
    for (int i = 0; i < 60; i++)
        after = reclaim_rate_average(after, 0, 1);
    ck_assert_double_eq_tol(after, avg * exp(-1.0), 1e-6);
    ck_assert_double_eq(reclaim_rate_average(5, 100, 0), 5); /* no time, no change */
}
END_TEST

START_TEST(reclaim_givers_streaming_then_coldest_never_protected)
{
    guest_view v[5];
    memset(v, 0, sizeof(v));
    for (int i = 0; i < 5; i++)
        vm_policy_default(&v[i].policy);
    v[1].thrashing = true;          /* its working set does not fit */
    v[2].policy.mode = VM_MODE_OFF; /* the operator's */
    v[3].policy.protect = true;
    v[4].streaming = true;
    reclaim_candidate c[5] = { { &v[0], 100 * MIB }, { &v[1], 900 * MIB }, { &v[2], 900 * MIB },
                               { &v[3], 900 * MIB }, { &v[4], 10 * MIB } };
    size_t order[5];
    ck_assert_uint_eq(reclaim_plan_givers(c, 5, order), 2);
    ck_assert_uint_eq(order[0], 4); /* streaming first, however little is cold */
    ck_assert_uint_eq(order[1], 0);
    ck_assert(!reclaim_may_take(&v[1]) && !reclaim_may_take(&v[2]) && !reclaim_may_take(&v[3]));
    /* a guest in need is no donor to host swap either */
    v[0].in_need = true;
    ck_assert(!reclaim_may_take(&v[0]));
    ck_assert_uint_eq(reclaim_plan_givers(c, 5, order), 1);
    /* among equals, the most cold memory first */
    guest_view w[3];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < 3; i++)
        vm_policy_default(&w[i].policy);
    reclaim_candidate d[3] = { { &w[0], 10 * MIB }, { &w[1], 300 * MIB }, { &w[2], 20 * MIB } };
    ck_assert_uint_eq(reclaim_plan_givers(d, 3, order), 3);
    ck_assert_uint_eq(order[0], 1);
    ck_assert_uint_eq(order[1], 2);
    ck_assert_uint_eq(order[2], 0);
}
END_TEST


/* ---- vmem_plan: a guest's size through virtio-mem and its balloon ---- */

#define VM_MIB (1024ULL * 1024)

START_TEST(vmem_holds_the_top_the_balloon_the_bottom)
{
    vmem_device d = { .base_bytes = 512 * VM_MIB, .block_bytes = 2 * VM_MIB, .max_bytes = 1024 * VM_MIB,
                      .plugged_bytes = 256 * VM_MIB };
    ck_assert_uint_eq(vmem_reach(&d), 1536 * VM_MIB);
    /* above its boot memory: no balloon, whole blocks plugged (rounded down) */
    vmem_split p = vmem_split_target(700 * VM_MIB + 123, &d);
    ck_assert_uint_eq(p.balloon_bytes, 512 * VM_MIB);
    ck_assert_uint_eq(p.requested_bytes, 188 * VM_MIB);
    p = vmem_split_target(701 * VM_MIB, &d);
    ck_assert_uint_eq(p.requested_bytes, 188 * VM_MIB);
    /* below it: everything unplugged, the balloon takes the rest */
    p = vmem_split_target(400 * VM_MIB, &d);
    ck_assert_uint_eq(p.balloon_bytes, 400 * VM_MIB);
    ck_assert_uint_eq(p.requested_bytes, 0);
    /* beyond the device: its maximum */
    p = vmem_split_target(4096 * VM_MIB, &d);
    ck_assert_uint_eq(p.balloon_bytes, 512 * VM_MIB);
    ck_assert_uint_eq(p.requested_bytes, 1024 * VM_MIB);
    /* exactly the boot memory: neither */
    p = vmem_split_target(512 * VM_MIB, &d);
    ck_assert_uint_eq(p.balloon_bytes, 512 * VM_MIB);
    ck_assert_uint_eq(p.requested_bytes, 0);
}
END_TEST

START_TEST(vmem_held_keeps_what_is_plugged_and_the_balloon_covers)
{
    vmem_device d = { .base_bytes = 512 * VM_MIB, .block_bytes = 2 * VM_MIB, .max_bytes = 1024 * VM_MIB,
                      .plugged_bytes = 256 * VM_MIB, .held = true };
    ck_assert_uint_eq(vmem_reach(&d), 768 * VM_MIB);
    /* shrinking to 600: the 256 plugged stay, the balloon takes base down to 344 */
    vmem_split p = vmem_split_target(600 * VM_MIB, &d);
    ck_assert_uint_eq(p.requested_bytes, 256 * VM_MIB);
    ck_assert_uint_eq(p.balloon_bytes, 344 * VM_MIB);
    /* growing: no more than what is plugged and the boot memory */
    p = vmem_split_target(1200 * VM_MIB, &d);
    ck_assert_uint_eq(p.requested_bytes, 256 * VM_MIB);
    ck_assert_uint_eq(p.balloon_bytes, 512 * VM_MIB);
    /* a guest with no driver: nothing plugged, so no more than its boot memory */
    d.plugged_bytes = 0;
    ck_assert_uint_eq(vmem_reach(&d), 512 * VM_MIB);
    p = vmem_split_target(900 * VM_MIB, &d);
    ck_assert_uint_eq(p.requested_bytes, 0);
    ck_assert_uint_eq(p.balloon_bytes, 512 * VM_MIB);
}
END_TEST

START_TEST(vmem_track_holds_a_device_that_does_not_follow_and_backs_off)
{
    vmem_track t;
    vmem_track_init(&t);
    /* at its request */
    ck_assert_int_eq(vmem_track_observe(&t, 0, 0, 100), VMEM_FOLLOWING);
    /* asked to plug 256 MiB: on its way, then there */
    ck_assert_int_eq(vmem_track_observe(&t, 0, 256 * VM_MIB, 101), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 128 * VM_MIB, 256 * VM_MIB, 110), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 128 * VM_MIB, 256 * VM_MIB, 110 + VMEM_STALL_S - 1), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 256 * VM_MIB, 140), VMEM_FOLLOWING);
    /* asked to unplug it all: nothing moves for VMEM_STALL_S, held */
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 0, 200), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 0, 200 + VMEM_STALL_S - 1), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 0, 200 + VMEM_STALL_S), VMEM_NOW_HELD);
    ck_assert(!t.plug_refused);
    double held_from = 200 + VMEM_STALL_S;
    ck_assert(vmem_track_held(&t, held_from + 1));
    /* the actuator asks it to stay where it is */
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 256 * VM_MIB, held_from + 2), VMEM_HELD);
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 256 * VM_MIB, held_from + VMEM_HOLD_S - 1), VMEM_HELD);
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 256 * VM_MIB, held_from + VMEM_HOLD_S), VMEM_RELEASED);
    ck_assert(!vmem_track_held(&t, held_from + VMEM_HOLD_S));
    /* asked again, refused again: held twice as long */
    double again = held_from + VMEM_HOLD_S + 1;
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 0, again), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 256 * VM_MIB, 0, again + VMEM_STALL_S), VMEM_NOW_HELD);
    ck_assert(vmem_track_held(&t, again + VMEM_STALL_S + 2 * VMEM_HOLD_S - 1));
    ck_assert(!vmem_track_held(&t, again + VMEM_STALL_S + 2 * VMEM_HOLD_S));
    /* the hold never grows beyond its maximum */
    for (int i = 0; i < 10; i++)
        t.hold_s = t.hold_s * 2 < VMEM_HOLD_MAX_S ? t.hold_s * 2 : VMEM_HOLD_MAX_S;
    ck_assert(t.hold_s <= VMEM_HOLD_MAX_S);
}
END_TEST

START_TEST(vmem_track_plug_refused_is_told_apart_and_a_done_move_resets_the_backoff)
{
    vmem_track t;
    vmem_track_init(&t);
    ck_assert_int_eq(vmem_track_observe(&t, 0, 0, 10), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 0, 64 * VM_MIB, 11), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 0, 64 * VM_MIB, 11 + VMEM_STALL_S), VMEM_NOW_HELD);
    ck_assert(t.plug_refused);
    ck_assert(t.hold_s > VMEM_HOLD_S);
    /* released, and then (the driver loaded meanwhile) the plug is done */
    double r = 11 + VMEM_STALL_S + VMEM_HOLD_S;
    ck_assert_int_eq(vmem_track_observe(&t, 0, 0, r), VMEM_RELEASED);
    ck_assert_int_eq(vmem_track_observe(&t, 0, 64 * VM_MIB, r + 1), VMEM_FOLLOWING);
    ck_assert_int_eq(vmem_track_observe(&t, 64 * VM_MIB, 64 * VM_MIB, r + 2), VMEM_FOLLOWING);
    ck_assert(t.hold_s == VMEM_HOLD_S);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("policies");
    TCase *tc = tcase_create("split_lru");
    tcase_add_test(tc, idle_between_watermarks);
    tcase_add_test(tc, hysteresis_reclaims_to_high_then_stops);
    tcase_add_test(tc, streaming_guest_gives_before_working_set);
    tcase_add_test(tc, host_swapping_takes_stream_cache_at_once);
    tcase_add_test(tc, a_balloons_own_faults_do_not_take_streams_at_once);
    tcase_add_test(tc, a_reader_that_looks_like_a_stream_is_probed_not_drained);
    tcase_add_test(tc, reported_free_memory_is_not_a_supply);
    tcase_add_test(tc, rebooted_guest_gets_its_size_back_and_settles);
    tcase_add_test(tc, working_set_cache_only_after_streaming_cache);
    tcase_add_test(tc, thrashing_guest_is_protected_and_grows);
    tcase_add_test(tc, an_experiment_ends_when_the_guest_is_given_back);
    tcase_add_test(tc, floor_ceiling_and_mode_off);
    tcase_add_test(tc, never_takes_beyond_available_unless_critical);
    tcase_add_test(tc, a_jump_is_headroom_for_an_hour);
    tcase_add_test(tc, only_memory_that_frees_host_memory_is_taken);
    tcase_add_test(tc, an_oom_kill_below_its_size_doubles_its_headroom);
    tcase_add_test(tc, critical_takes_cache_never_anon);
    tcase_add_test(tc, plenty_grows_short_guests_within_surplus);
    tcase_add_test(tc, comfort_spends_only_memory_free_now);
    tcase_add_test(tc, comfort_waits_for_lasting_plenty);
    tcase_add_test(tc, no_oscillation_over_many_ticks);
    tcase_add_test(tc, shares_weight_the_reclaim);
    tcase_add_test(tc, need_is_answered_by_use_not_by_what_the_host_has_free);
    tcase_add_test(tc, stale_stats_hold);
    tcase_add_test(tc, stale_verdicts_take_nothing);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("baselines");
    tcase_add_test(tm, mom_shrinks_5_percent_under_pressure);
    tcase_add_test(tm, mom_balloon_min_is_the_larger_of_guaranteed_and_need);
    tcase_add_test(tm, mom_grow_maximum_wins_over_need);
    tcase_add_test(tm, mom_need_is_averaged_over_its_history);
    tcase_add_test(tm, mom_grows_without_pressure_and_ignores_tiny_changes);
    tcase_add_test(tm, mom_critical_forces_below_need);
    tcase_add_test(tm, vdsm_grow_scales_free_target_with_host_free);
    tcase_add_test(tm, vdsm_guest_qos_lifts_to_balloon_min);
    tcase_add_test(tm, pve_shrinks_vms_with_free_memory_first_in_100mib_steps);
    tcase_add_test(tm, pve_grows_vms_under_pressure_first);
    tcase_add_test(tm, pve_dead_band_and_cadence);
    tcase_add_test(tm, pve_falls_back_to_all_vms);
    tcase_add_test(tm, mom_long_ids_and_a_2s_tick);
    tcase_add_test(tm, cadence_is_a_fixed_schedule);
    tcase_add_test(tm, pve_shares_decide_who_gives);
    tcase_add_test(tm, none_never_changes);
    tcase_add_test(tm, registry_lookup);
    suite_add_tcase(s, tm);
    TCase *tcl = tcase_create("classify");
    tcase_add_test(tcl, thrash_enters_and_exits_with_hysteresis);
    tcase_add_test(tcl, streaming_needs_big_cache_and_no_faults);
    tcase_add_test(tcl, reserve_half_eaten_is_need_below_the_ceiling);
    suite_add_tcase(s, tcl);
    TCase *tr = tcase_create("reclaim_plan");
    tcase_add_test(tr, reclaim_shortfall_only_below_low);
    tcase_add_test(tr, reclaim_wants_per_node_classzone);
    tcase_add_test(tr, reclaim_givers_streaming_then_coldest_never_protected);
    tcase_add_test(tr, reclaim_slo_budget_pressure_hysteresis);
    tcase_add_test(tr, proactive_room_is_cold_used_memory);
    tcase_add_test(tr, memcg_proactive_is_senpais_probe_within_the_room);
    tcase_add_test(tr, host_measured_working_set_is_a_floor);
    suite_add_tcase(s, tr);
    TCase *tv = tcase_create("vmem_plan");
    tcase_add_test(tv, vmem_holds_the_top_the_balloon_the_bottom);
    tcase_add_test(tv, vmem_held_keeps_what_is_plugged_and_the_balloon_covers);
    tcase_add_test(tv, vmem_track_holds_a_device_that_does_not_follow_and_backs_off);
    tcase_add_test(tv, vmem_track_plug_refused_is_told_apart_and_a_done_move_resets_the_backoff);
    suite_add_tcase(s, tv);
    return check_run_suite(s, CK_FORK);
}

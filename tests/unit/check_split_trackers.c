/*
 * split-lru's trackers, one at a time (policies/split_trackers.h): what
 * each remembers of a guest and what it concludes, on hand-made views.
 * The policy over them is tested in check_policies, check_need and
 * check_fleet.
 */
#include <check.h>

#include "check_run.h"
#include <string.h>

#include "policies/split_trackers.h"

static split_params P;

static void setup(void)
{
    split_params_default(&P);
}

/* A settled guest with fresh stats, 1 GiB, half of it used. */
static guest_view view(void)
{
    guest_view g;
    memset(&g, 0, sizeof(g));
    g.name = "g";
    g.max_bytes = g.ceiling_bytes = g.actual_bytes = GIB;
    g.floor_bytes = 128 * MIB;
    g.stats_valid = g.stats_fresh = true;
    g.used_bytes = 512 * MIB;
    g.free_bytes = g.available_bytes = 512 * MIB;
    g.disk_read_bps = 0;
    g.host_faults_ps = 0;
    g.host_rss_bytes = -1;
    g.host_ws_bytes = -1;
    g.free_page_reporting_used = -1;
    return g;
}

/* A read tracker set up for g at now. */
static read_tracker reads_of(const guest_view *g, double now)
{
    read_tracker r = { 0 };
    reads_init(&r, &P, g, now);
    return r;
}

/* A guest with nothing free, 1 GiB touched, and its baseline taken at 0. */
static frees_nothing_tracker fn_baseline(guest_view *g)
{
    g->free_bytes = 0;
    g->host_rss_bytes = (int64_t)GIB;
    frees_nothing_tracker f = { 0 };
    frees_nothing_init(&f);
    frees_nothing_observe(&f, &P, g, 0);
    return f;
}

/* --- read pace and settling --- */

START_TEST(new_guest_without_a_read_rate_settles_over_reports)
{
    guest_view g = view();
    g.disk_read_bps = -1; /* its first sample: no rate yet */
    read_tracker r = reads_of(&g, 100);
    ck_assert(reads_settling(&r, &P, 100));
    g.disk_read_bps = 0;
    for (unsigned k = 1; k < P.settle_reports; k++) {
        reads_observe(&r, &P, &g, 100 + k);
        ck_assert_msg(reads_settling(&r, &P, 100 + k), "settled after %u reports", k);
    }
    reads_observe(&r, &P, &g, 100 + P.settle_reports);
    ck_assert(!reads_settling(&r, &P, 100 + P.settle_reports));
    ck_assert(r.avg_bps >= 0); /* its usual reads start once settled */
}
END_TEST

START_TEST(a_stale_report_settles_nothing)
{
    guest_view g = view();
    g.disk_read_bps = -1;
    read_tracker r = reads_of(&g, 0);
    g.stats_fresh = false;
    for (int k = 1; k <= 10; k++)
        reads_observe(&r, &P, &g, k);
    ck_assert_uint_eq(r.settled, 0);
}
END_TEST

START_TEST(filling_its_cache_starts_settling_over_with_a_time_floor)
{
    guest_view g = view();
    read_tracker r = reads_of(&g, 0);
    ck_assert(!reads_settling(&r, &P, 0)); /* a known rate: settled at once */
    g.filling = true;
    reads_observe(&r, &P, &g, 1);
    ck_assert(reads_settling(&r, &P, 1));
    ck_assert(r.avg_bps < 0);
    g.filling = false;
    double t = 1;
    for (unsigned k = 0; k < P.settle_reports; k++)
        reads_observe(&r, &P, &g, ++t);
    /* enough reports, but not settle_s since it filled */
    ck_assert(t - 1 < P.settle_s);
    ck_assert(reads_settling(&r, &P, t));
    ck_assert(!reads_settling(&r, &P, 1 + P.settle_s));
}
END_TEST

START_TEST(pace_is_the_fastest_read_and_decays)
{
    guest_view g = view();
    read_tracker r = reads_of(&g, 0);
    g.disk_read_bps = 40 * MIB;
    reads_observe(&r, &P, &g, 1);
    ck_assert_double_eq_tol(r.pace_bps, 40 * MIB, 1);
    g.disk_read_bps = 0;
    reads_observe(&r, &P, &g, 1 + P.pace_half_life_s);
    ck_assert_double_eq_tol(r.pace_bps, 20 * MIB, 1024);
}
END_TEST

START_TEST(reads_while_host_swaps_are_not_its_pace)
{
    guest_view g = view();
    read_tracker r = reads_of(&g, 0);
    g.disk_read_bps = 40 * MIB;
    g.host_faults_ps = P.host_bound_fps; /* its QEMU waits for host swap */
    for (int k = 1; k <= 100; k++)
        reads_observe(&r, &P, &g, k);
    ck_assert_double_eq(r.pace_bps, 0);
    ck_assert_double_eq(r.unwaited_s, 0);
    g.host_faults_ps = 0;
    for (int k = 101; k <= 200; k++)
        reads_observe(&r, &P, &g, k);
    ck_assert_double_eq(r.unwaited_s, P.pace_watch_s); /* capped */
    ck_assert(r.pace_bps >= 40 * MIB - 1);
}
END_TEST

START_TEST(usual_reads_average_over_the_experiment)
{
    guest_view g = view();
    read_tracker r = reads_of(&g, 0);
    g.disk_read_bps = 10 * MIB;
    reads_observe(&r, &P, &g, 1);
    ck_assert_double_eq_tol(r.avg_bps, 10 * MIB, 1); /* the first settled sample */
    g.disk_read_bps = 0;
    reads_observe(&r, &P, &g, 1 + P.experiment_s);
    /* one experiment_s later it weighs 1 - 1/e */
    ck_assert_double_eq_tol(r.avg_bps, 10 * MIB * 0.36788, 0.01 * MIB);
}
END_TEST

/* --- headroom --- */

/* A report of mib MiB used at now. */
static void report_used(headroom_tracker *h, guest_view *g, uint64_t mib, double now)
{
    g->used_bytes = mib * MIB;
    headroom_observe(h, &P, g, now);
}

START_TEST(headroom_is_the_largest_rise_within_the_window)
{
    guest_view g = view();
    headroom_tracker h = { 0 };
    headroom_init(&h, 0);
    uint64_t used[] = { 200, 300, 260, 500, 510 }; /* MiB, a report a second */
    for (int k = 0; k < 5; k++) {
        g.used_bytes = used[k] * MIB;
        headroom_observe(&h, &P, &g, k);
    }
    ck_assert_uint_eq(h.jump, 310 * MIB); /* 200 -> 510 within 5 s */
    ck_assert_uint_eq(headroom_of(&h, &g, 32 * MIB), 310 * MIB);
    ck_assert_uint_eq(headroom_of(&h, &g, 400 * MIB), 400 * MIB); /* the reserve when larger */
}
END_TEST

START_TEST(a_rise_slower_than_the_window_is_not_a_jump)
{
    guest_view g = view();
    headroom_tracker h = { 0 };
    headroom_init(&h, 0);
    for (int k = 0; k <= 30; k++) { /* 5 MiB every 2 s */
        g.used_bytes = (200 + 5 * (uint64_t)k) * MIB;
        headroom_observe(&h, &P, &g, 2.0 * k);
    }
    /* within 5 s: back to the newest report at least that old, 6 s */
    ck_assert_uint_eq(h.jump, 15 * MIB);
}
END_TEST

START_TEST(a_gap_in_reports_is_not_one_window)
{
    guest_view g = view();
    headroom_tracker h = { 0 };
    headroom_init(&h, 0);
    report_used(&h, &g, 100, 0);
    g.stats_valid = g.stats_fresh = false;
    headroom_observe(&h, &P, &g, 1);
    g.stats_valid = g.stats_fresh = true;
    report_used(&h, &g, 600, 2);
    ck_assert_uint_eq(h.jump, 0);
}
END_TEST

START_TEST(a_jump_is_kept_one_to_two_hold_windows)
{
    guest_view g = view();
    headroom_tracker h = { 0 };
    headroom_init(&h, 0);
    report_used(&h, &g, 100, 0);
    report_used(&h, &g, 400, 1);
    report_used(&h, &g, 100, P.jump_hold_s); /* a new window: the rise is its previous one */
    ck_assert_uint_eq(headroom_of(&h, &g, 0), 300 * MIB);
    headroom_observe(&h, &P, &g, 2 * P.jump_hold_s);
    ck_assert_uint_eq(headroom_of(&h, &g, 0), 0);
}
END_TEST

START_TEST(an_oom_kill_doubles_the_headroom)
{
    guest_view g = view();
    headroom_tracker h = { 0 };
    headroom_init(&h, 0);
    g.actual_bytes = 700 * MIB;
    g.oom_killed = true;
    ck_assert_uint_eq(headroom_of(&h, &g, 32 * MIB), 64 * MIB);
    ck_assert_uint_eq(headroom_of(&h, &g, 32 * MIB), 128 * MIB);
    g.actual_bytes = g.ceiling_bytes; /* at its size: no balloon held it back */
    ck_assert_uint_eq(headroom_of(&h, &g, 32 * MIB), 128 * MIB);
}
END_TEST

/* --- a balloon that frees nothing --- */

/* A take of 256 MiB beyond free memory, its QEMU shrinking by `fell`. */
static void take(frees_nothing_tracker *f, guest_view *g, double now, uint64_t fell)
{
    g->actual_bytes -= 256 * MIB;
    g->host_rss_bytes -= (int64_t)fell;
    frees_nothing_observe(f, &P, g, now);
}

START_TEST(two_takes_that_free_nothing_mark_it)
{
    guest_view g = view();
    frees_nothing_tracker f = fn_baseline(&g);
    take(&f, &g, 10, 0);
    ck_assert(!f.frees_nothing);
    take(&f, &g, 20, 0);
    ck_assert(f.frees_nothing);
    frees_nothing_observe(&f, &P, &g, 20 + P.jump_hold_s); /* tried again after jump_hold_s */
    ck_assert(!f.frees_nothing);
}
END_TEST

START_TEST(a_take_that_frees_host_memory_clears_the_strike)
{
    guest_view g = view();
    frees_nothing_tracker f = fn_baseline(&g);
    take(&f, &g, 10, 0);
    take(&f, &g, 20, 256 * MIB);
    take(&f, &g, 30, 0);
    ck_assert(!f.frees_nothing);
    ck_assert_uint_eq(f.strikes, 1);
}
END_TEST

START_TEST(free_page_reporting_and_old_baselines_judge_nothing)
{
    guest_view g = view();
    g.free_page_reporting_used = 1;
    frees_nothing_tracker f = fn_baseline(&g);
    take(&f, &g, 10, 0);
    take(&f, &g, 20, 0);
    ck_assert(!f.frees_nothing);
    g.free_page_reporting_used = 0;
    frees_nothing_observe(&f, &P, &g, 30);
    take(&f, &g, 30 + P.fn_baseline_s + 1, 0);
    take(&f, &g, 30 + 2 * (P.fn_baseline_s + 1), 0);
    ck_assert_uint_eq(f.strikes, 0);
}
END_TEST

/* --- the experiment and what it keeps --- */

START_TEST(a_cache_that_refaults_is_given_back_and_kept)
{
    guest_view g = view();
    read_tracker r = reads_of(&g, 0);
    reads_observe(&r, &P, &g, 1);
    experiment e = { 0 };
    experiment_note_take(&e, &P, &r, &g, false, false, 10);
    ck_assert_double_eq(e.shrunk_at_s, 10);
    ck_assert(e.reads_prove); /* at rest: its reads prove a cost */
    g.actual_bytes = 768 * MIB;
    g.disk_read_bps = P.refault_min_bps + 1; /* more than twice nothing plus the minimum */
    decision_reason why = experiment_feedback(&e, &P, &r, &g, 32 * MIB, 20);
    ck_assert_int_eq(why, REASON_CACHE_HOT);
    ck_assert(e.cache_hot);
    ck_assert_uint_eq(e.keep_bytes, GIB - 512 * MIB + 32 * MIB); /* its cache, not its free memory */
    ck_assert_uint_eq(e.keep_backed, e.keep_bytes);
    ck_assert_int_eq(experiment_feedback(&e, &P, &r, &g, 32 * MIB, 21), REASON_NONE); /* once */
    experiment_feedback(&e, &P, &r, &g, 32 * MIB, 20 + P.keep_s);
    ck_assert_uint_eq(e.keep_bytes, 0); /* kept keep_s */
}
END_TEST

START_TEST(reads_after_the_experiment_are_not_its_cost)
{
    guest_view g = view();
    read_tracker r = reads_of(&g, 0);
    experiment e = { 0 };
    experiment_note_take(&e, &P, &r, &g, false, false, 10);
    g.disk_read_bps = 100 * MIB;
    ck_assert_int_eq(experiment_feedback(&e, &P, &r, &g, 0, 10 + P.experiment_s + 1), REASON_NONE);
}
END_TEST

START_TEST(the_experiment_lasts_what_the_parameter_says)
{
    guest_view g = view();
    read_tracker r = reads_of(&g, 0);
    experiment e = { 0 };
    P.experiment_s = 60; /* the table, varied as a test or the simulator may */
    experiment_note_take(&e, &P, &r, &g, false, false, 10);
    g.disk_read_bps = 100 * MIB;
    ck_assert_int_eq(experiment_feedback(&e, &P, &r, &g, 0, 10 + 45), REASON_CACHE_HOT);
}
END_TEST

START_TEST(need_within_the_experiment_is_a_cost_on_its_word)
{
    guest_view g = view();
    read_tracker r = reads_of(&g, 0);
    experiment e = { 0 };
    experiment_note_take(&e, &P, &r, &g, false, false, 10);
    g.in_need = true;
    ck_assert_int_eq(experiment_feedback(&e, &P, &r, &g, 0, 15), REASON_COST_NEED);
    ck_assert_uint_eq(e.keep_bytes, GIB);
    ck_assert_uint_eq(e.keep_backed, 0); /* its word alone backs nothing */
}
END_TEST

START_TEST(a_reader_is_judged_against_its_own_pace_only)
{
    guest_view g = view();
    g.streaming = true;
    read_tracker r = reads_of(&g, 0);
    g.disk_read_bps = 50 * MIB;
    reads_observe(&r, &P, &g, 1); /* watched 1 s: its pace is not known as its own */
    experiment e = { 0 };
    experiment_note_take(&e, &P, &r, &g, false, false, 2);
    ck_assert(!e.reads_prove);
    g.disk_read_bps = 200 * MIB; /* the relief speeds it up: not a refault */
    ck_assert_int_eq(experiment_feedback(&e, &P, &r, &g, 0, 5), REASON_NONE);
}
END_TEST

START_TEST(a_trim_that_slows_a_stream_is_a_cost)
{
    guest_view g = view();
    g.streaming = true;
    read_tracker r = reads_of(&g, 0);
    g.disk_read_bps = 40 * MIB;
    reads_observe(&r, &P, &g, 1);
    experiment e = { 0 };
    experiment_note_take(&e, &P, &r, &g, true, false, 2);
    ck_assert(e.proactive);
    r.avg_bps = 40 * MIB * P.slowed_fraction - 1;
    ck_assert_int_eq(experiment_feedback(&e, &P, &r, &g, 0, 2 + P.slowed_after_s - 1), REASON_NONE);
    ck_assert_int_eq(experiment_feedback(&e, &P, &r, &g, 0, 2 + P.slowed_after_s), REASON_TRIM_SLOWED);
    ck_assert(e.trim_cost);
}
END_TEST

/* --- reuse: what its cache is --- */

/* A stream-shaped guest of 1 GiB reading 40 MiB/s, probed at 100: one
 * step of 64 MiB taken (its balloon there at once). */
static guest_view probed(reuse_tracker *u)
{
    guest_view g = view();
    g.streaming = true;
    g.disk_read_bps = 40 * MIB;
    *u = (reuse_tracker){ 0 };
    reuse_observe(u, &P, &g, REASON_NONE, 99);
    ck_assert_int_eq(u->verdict, CACHE_UNKNOWN); /* by its reads alone it is not a stream */
    read_tracker r = { .avg_bps = 40 * MIB };
    experiment e = { .disk_before_bps = 40 * MIB };
    reuse_note_take(u, &P, &r, &e, &g, 100);
    g.actual_bytes -= 64 * MIB;
    return g;
}

/* Observed every second from 101 to until. */
static void watch(reuse_tracker *u, const guest_view *g, double until)
{
    for (double t = 101; t <= until; t += 1)
        reuse_observe(u, &P, g, REASON_NONE, t);
}

START_TEST(a_take_from_a_stream_shaped_guest_starts_one_probe)
{
    reuse_tracker u;
    guest_view g = probed(&u);
    ck_assert(reuse_probe_pending(&u));
    ck_assert(reuse_probing(&u, &P, 100 + P.probe_s - 1));
    ck_assert(!reuse_probing(&u, &P, 100 + P.probe_s)); /* nothing more of its cache only this long */
    read_tracker r = { .avg_bps = 40 * MIB };
    experiment e = { .disk_before_bps = 40 * MIB };
    reuse_note_take(&u, &P, &r, &e, &g, 104); /* a second take does not restart it */
    ck_assert_double_eq(u.probe_at_s, 100);
    reuse_tracker v = { 0 };
    r.avg_bps = -1;
    reuse_note_take(&v, &P, &r, &e, &g, 100); /* nor is one whose usual reads are not known yet */
    ck_assert(!reuse_probe_pending(&v));
    r.avg_bps = 40 * MIB;
    g.streaming = false;
    reuse_note_take(&v, &P, &r, &e, &g, 100); /* nor one that does not look like a stream */
    ck_assert(!reuse_probe_pending(&v));
}
END_TEST

START_TEST(a_probe_whose_reads_did_not_rise_proves_a_stream)
{
    reuse_tracker u;
    guest_view g = probed(&u);
    watch(&u, &g, 100 + P.probe_s - 1);
    ck_assert_int_eq(u.verdict, CACHE_UNKNOWN); /* not before probe_s */
    reuse_observe(&u, &P, &g, REASON_NONE, 100 + P.probe_s);
    ck_assert_int_eq(u.verdict, CACHE_STREAM);
    ck_assert_int_eq(u.by, EVIDENCE_PROBE);
    ck_assert_double_eq(u.at_s, 100 + P.probe_s);
    ck_assert(!reuse_probe_pending(&u));
}
END_TEST

START_TEST(a_probe_read_back_in_proportion_to_the_take_is_reuse)
{
    reuse_tracker u;
    guest_view g = probed(&u);
    /* a quarter of the 64 MiB taken read back within probe_s, beyond its pace */
    g.disk_read_bps = 40 * MIB + P.probe_reuse_share * 64 * MIB / P.probe_s + 1;
    watch(&u, &g, 100 + P.probe_s);
    ck_assert_int_eq(u.verdict, CACHE_REUSED);
    ck_assert_int_eq(u.by, EVIDENCE_REFAULT);
    /* it lasts keep_s, then it may be probed again */
    reuse_observe(&u, &P, &g, REASON_NONE, 100 + P.probe_s + P.keep_s - 1);
    ck_assert_int_eq(u.verdict, CACHE_REUSED);
    reuse_observe(&u, &P, &g, REASON_NONE, 100 + P.probe_s + P.keep_s);
    ck_assert_int_eq(u.verdict, CACHE_UNKNOWN);
    /* a fifth read back: a stream */
    guest_view h = probed(&u);
    h.disk_read_bps = 40 * MIB + 0.2 * 64 * MIB / P.probe_s;
    watch(&u, &h, 100 + P.probe_s);
    ck_assert_int_eq(u.verdict, CACHE_STREAM);
}
END_TEST

/* A reader measured against its pace for reuse and its average for a
 * stream: reads between the two prove neither (a stream the relief sped
 * up, or a database reading a little more). */
START_TEST(reads_between_its_average_and_its_pace_prove_nothing)
{
    guest_view g = view();
    g.streaming = true;
    g.disk_read_bps = 40 * MIB;
    reuse_tracker u = { 0 };
    read_tracker r = { .avg_bps = 20 * MIB };
    experiment e = { .disk_before_bps = 80 * MIB };
    reuse_note_take(&u, &P, &r, &e, &g, 100);
    g.actual_bytes -= 64 * MIB;
    watch(&u, &g, 100 + P.experiment_s);
    ck_assert_int_eq(u.verdict, CACHE_UNKNOWN);
    ck_assert(reuse_probe_pending(&u));
}
END_TEST

START_TEST(a_probe_of_a_guest_whose_qemu_waits_proves_no_stream)
{
    reuse_tracker u;
    guest_view g = probed(&u);
    g.host_faults_ps = P.host_bound_fps; /* its QEMU waits for host swap: it cannot read more */
    reuse_observe(&u, &P, &g, REASON_NONE, 101);
    g.host_faults_ps = 0;
    watch(&u, &g, 100 + P.experiment_s);
    ck_assert_int_eq(u.verdict, CACHE_UNKNOWN);
    ck_assert(reuse_probe_pending(&u)); /* no other probe meanwhile */
    reuse_observe(&u, &P, &g, REASON_NONE, 100 + P.experiment_s + 1);
    ck_assert(!reuse_probe_pending(&u)); /* lapsed: may be tried again */
}
END_TEST

/* Reads that rose while its QEMU still waited are its refault (waiting
 * slows a reader, it does not speed it up); the same reads once relieved
 * prove nothing. */
START_TEST(reads_rising_while_its_qemu_waits_are_a_refault)
{
    for (int relieved = 0; relieved < 2; relieved++) {
        reuse_tracker u;
        guest_view g = probed(&u);
        g.host_faults_ps = P.host_bound_fps;
        g.disk_read_bps = 80 * MIB;
        for (double t = 101; t <= 100 + P.probe_s; t += 1) {
            if (relieved && t == 103)
                g.host_faults_ps = 0;
            bool found = reuse_observe(&u, &P, &g, REASON_NONE, t);
            ck_assert(found == (!relieved && t == 100 + P.probe_s));
        }
        ck_assert_int_eq(u.verdict, relieved ? CACHE_UNKNOWN : CACHE_REUSED);
    }
}
END_TEST

START_TEST(a_probe_judges_only_what_its_balloon_took)
{
    reuse_tracker u;
    guest_view g = probed(&u);
    g.actual_bytes = GIB; /* the balloon has not moved yet (a slow inflation) */
    watch(&u, &g, 100 + P.probe_s + 5);
    ck_assert_int_eq(u.verdict, CACHE_UNKNOWN);
    g.actual_bytes = GIB - 64 * MIB;
    reuse_observe(&u, &P, &g, REASON_NONE, 100 + P.probe_s + 6);
    ck_assert_int_eq(u.verdict, CACHE_STREAM);
}
END_TEST

START_TEST(its_agent_decides_by_refaults_against_evictions)
{
    guest_view g = view();
    g.streaming = true;
    g.agent_fresh = true;
    reuse_tracker u = { 0 };
    g.agent_steal_file_ps = P.agent_steal_min_ps - 1; /* evicting too little to judge */
    g.agent_refault_file_ps = 0;
    reuse_observe(&u, &P, &g, REASON_NONE, 10);
    ck_assert_int_eq(u.verdict, CACHE_UNKNOWN);
    g.agent_steal_file_ps = 1000;
    g.agent_refault_file_ps = 1000 * P.agent_stream_share / 2;
    reuse_observe(&u, &P, &g, REASON_NONE, 11);
    ck_assert_int_eq(u.verdict, CACHE_STREAM);
    ck_assert_int_eq(u.by, EVIDENCE_AGENT);
    g.agent_refault_file_ps = 1000 * P.agent_reuse_share;
    reuse_observe(&u, &P, &g, REASON_NONE, 12);
    ck_assert_int_eq(u.verdict, CACHE_REUSED);
    g.agent_refault_file_ps = 1000 * (P.agent_stream_share + P.agent_reuse_share) / 2; /* between: no change */
    reuse_observe(&u, &P, &g, REASON_NONE, 13);
    ck_assert_int_eq(u.verdict, CACHE_REUSED);
    g.agent_fresh = false; /* a stale agent says nothing */
    g.agent_refault_file_ps = 0;
    reuse_tracker v = { 0 };
    reuse_observe(&v, &P, &g, REASON_NONE, 14);
    ck_assert_int_eq(v.verdict, CACHE_UNKNOWN);
}
END_TEST

START_TEST(a_cost_the_host_measured_outranks_its_agent)
{
    guest_view g = view();
    g.streaming = true;
    g.agent_fresh = true;
    g.agent_steal_file_ps = 1000; /* it says: a stream */
    reuse_tracker u = { 0 };
    reuse_observe(&u, &P, &g, REASON_CACHE_HOT, 10);
    ck_assert_int_eq(u.verdict, CACHE_REUSED);
    ck_assert_int_eq(u.by, EVIDENCE_REFAULT);
    reuse_observe(&u, &P, &g, REASON_COST_THRASHING, 11);
    ck_assert_int_eq(u.by, EVIDENCE_THRASHING);
    g.agent_fresh = false;
    reuse_observe(&u, &P, &g, REASON_NONE, 11 + P.keep_s - 1); /* a cost lasts keep_s */
    ck_assert_int_eq(u.verdict, CACHE_REUSED);
    reuse_observe(&u, &P, &g, REASON_NONE, 11 + P.keep_s);
    ck_assert_int_eq(u.verdict, CACHE_UNKNOWN);
}
END_TEST

START_TEST(a_stream_verdict_lapses_once_it_stops_looking_like_one)
{
    guest_view g = view();
    g.streaming = true;
    reuse_tracker u = { .verdict = CACHE_STREAM, .by = EVIDENCE_PROBE, .at_s = 5 };
    reuse_observe(&u, &P, &g, REASON_NONE, 10);
    g.streaming = false;
    reuse_observe(&u, &P, &g, REASON_NONE, 20);
    reuse_observe(&u, &P, &g, REASON_NONE, 20 + P.experiment_s - 1);
    ck_assert_int_eq(u.verdict, CACHE_STREAM);
    reuse_observe(&u, &P, &g, REASON_NONE, 20 + P.experiment_s);
    ck_assert_int_eq(u.verdict, CACHE_UNKNOWN);
}
END_TEST

START_TEST(its_own_deflation_is_not_fought)
{
    guest_view g = view();
    read_tracker r = { 0 };
    experiment e = { 0 };
    g.self_deflated_bytes = 64 * MIB;
    ck_assert_int_eq(experiment_feedback(&e, &P, &r, &g, 0, 1), REASON_SELF_DEFLATED);
    ck_assert_uint_eq(e.keep_bytes, GIB);
}
END_TEST

START_TEST(a_grant_is_kept_as_far_as_its_qemu_touched_it)
{
    guest_view g = view();
    g.actual_bytes = 512 * MIB;
    g.in_need = true;
    experiment e = { 0 };
    experiment_keep_grant(&e, &P, &g, 768 * MIB, 100 * MIB, 1);
    ck_assert_uint_eq(e.keep_bytes, 768 * MIB);
    ck_assert_uint_eq(e.keep_backed, 612 * MIB);
    g.thrashing = true;
    experiment_keep_grant(&e, &P, &g, 768 * MIB, 0, 2);
    ck_assert_uint_eq(e.keep_backed, 768 * MIB);
}
END_TEST

/* --- need credit --- */

START_TEST(a_word_alone_gets_two_steps_then_nothing)
{
    guest_view g = view();
    g.host_rss_bytes = 512 * MIB;
    need_credit c = { .rss_seen = -1 };
    uint64_t touched;
    ck_assert_uint_eq(need_allowance(&c, &g, 8 * MIB, &touched), 16 * MIB);
    c.unused += 16 * MIB;
    ck_assert_uint_eq(need_allowance(&c, &g, 8 * MIB, &touched), 0);
    ck_assert_uint_eq(touched, 0);
    g.host_rss_bytes += 100 * MIB; /* it used what it was given, and more */
    ck_assert_uint_eq(need_allowance(&c, &g, 8 * MIB, &touched), 200 * MIB);
    ck_assert_uint_eq(touched, 100 * MIB);
}
END_TEST

START_TEST(an_unmeasured_qemu_gets_a_step_a_tick)
{
    guest_view g = view();
    need_credit c = { .unused = 100 * MIB, .rss_seen = 1 };
    uint64_t touched;
    ck_assert_uint_eq(need_allowance(&c, &g, 8 * MIB, &touched), 8 * MIB);
    g.host_rss_bytes = (int64_t)g.max_bytes; /* all resident whatever its balloon */
    ck_assert_uint_eq(need_allowance(&c, &g, 8 * MIB, &touched), 8 * MIB);
    ck_assert_uint_eq(c.unused, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("split_trackers");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, new_guest_without_a_read_rate_settles_over_reports);
    tcase_add_test(tc, a_stale_report_settles_nothing);
    tcase_add_test(tc, filling_its_cache_starts_settling_over_with_a_time_floor);
    tcase_add_test(tc, pace_is_the_fastest_read_and_decays);
    tcase_add_test(tc, reads_while_host_swaps_are_not_its_pace);
    tcase_add_test(tc, usual_reads_average_over_the_experiment);
    tcase_add_test(tc, headroom_is_the_largest_rise_within_the_window);
    tcase_add_test(tc, a_rise_slower_than_the_window_is_not_a_jump);
    tcase_add_test(tc, a_gap_in_reports_is_not_one_window);
    tcase_add_test(tc, a_jump_is_kept_one_to_two_hold_windows);
    tcase_add_test(tc, an_oom_kill_doubles_the_headroom);
    tcase_add_test(tc, two_takes_that_free_nothing_mark_it);
    tcase_add_test(tc, a_take_that_frees_host_memory_clears_the_strike);
    tcase_add_test(tc, free_page_reporting_and_old_baselines_judge_nothing);
    tcase_add_test(tc, a_cache_that_refaults_is_given_back_and_kept);
    tcase_add_test(tc, reads_after_the_experiment_are_not_its_cost);
    tcase_add_test(tc, the_experiment_lasts_what_the_parameter_says);
    tcase_add_test(tc, need_within_the_experiment_is_a_cost_on_its_word);
    tcase_add_test(tc, a_reader_is_judged_against_its_own_pace_only);
    tcase_add_test(tc, a_trim_that_slows_a_stream_is_a_cost);
    tcase_add_test(tc, a_take_from_a_stream_shaped_guest_starts_one_probe);
    tcase_add_test(tc, a_probe_whose_reads_did_not_rise_proves_a_stream);
    tcase_add_test(tc, a_probe_read_back_in_proportion_to_the_take_is_reuse);
    tcase_add_test(tc, reads_between_its_average_and_its_pace_prove_nothing);
    tcase_add_test(tc, a_probe_of_a_guest_whose_qemu_waits_proves_no_stream);
    tcase_add_test(tc, reads_rising_while_its_qemu_waits_are_a_refault);
    tcase_add_test(tc, a_probe_judges_only_what_its_balloon_took);
    tcase_add_test(tc, its_agent_decides_by_refaults_against_evictions);
    tcase_add_test(tc, a_cost_the_host_measured_outranks_its_agent);
    tcase_add_test(tc, a_stream_verdict_lapses_once_it_stops_looking_like_one);
    tcase_add_test(tc, its_own_deflation_is_not_fought);
    tcase_add_test(tc, a_grant_is_kept_as_far_as_its_qemu_touched_it);
    tcase_add_test(tc, a_word_alone_gets_two_steps_then_nothing);
    tcase_add_test(tc, an_unmeasured_qemu_gets_a_step_a_tick);
    suite_add_tcase(s, tc);
    return check_run_suite(s, CK_FORK);
}

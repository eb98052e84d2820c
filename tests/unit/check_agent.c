/*
 * The guest agent protocol on the host side: parsing, validation, rate
 * limiting, clamps, counter resets, and what a lying agent can and cannot
 * do to the policy.
 */
#include <check.h>

#include "check_run.h"
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/agent_conn.h"
#include "agent/agent_proto.h"
#include "policies/classify.h"
#include "policies/policy.h"

/* A line as the real agent sent it from the test guest. */
static const char *real_line =
    "{\"v\":1,\"seq\":1,\"uptime_ms\":5003,\"vmstat\":{\"workingset_refault_anon\":0,"
    "\"workingset_refault_file\":0,\"workingset_activate_anon\":0,\"workingset_activate_file\":0,"
    "\"pgscan_anon\":0,\"pgscan_file\":0,\"pgsteal_anon\":0,\"pgsteal_file\":0,\"pswpin\":0,"
    "\"pswpout\":0,\"pgmajfault\":0},\"meminfo\":{\"memtotal_kb\":466396,\"memavailable_kb\":432708,"
    "\"active_anon_kb\":2588,\"inactive_anon_kb\":2352,\"active_file_kb\":0,\"inactive_file_kb\":0,"
    "\"cached_kb\":4740,\"dirty_kb\":0,\"writeback_kb\":0,\"swapcached_kb\":0},"
    "\"psi\":{\"some_avg10\":0.00,\"full_avg10\":0.00,\"some_total_us\":0}}";

static int parse(const char *line, agent_report *r, agent_reject *why, char *err)
{
    g_autoptr(GError) e = NULL;
    int rc = agent_parse(line, strlen(line), r, why, &e);
    snprintf(err, 160, "%s", e ? e->message : "");
    return rc;
}

START_TEST(parses_what_the_agent_sends)
{
    agent_report r;
    agent_reject why;
    char err[160];
    ck_assert_msg(parse(real_line, &r, &why, err) == 0, "%s", err);
    ck_assert_uint_eq(r.seq, 1);
    ck_assert_int_eq(r.meminfo_kb[AM_TOTAL], 466396);
    ck_assert_int_eq(r.vmstat[AV_REFAULT_ANON], 0);
    ck_assert(r.psi_some_avg10 == 0.0);
    ck_assert(!r.hint_streaming);
    /* unknown members are ignored, missing ones are -1 */
    ck_assert_int_eq(parse("{\"v\":1,\"seq\":7,\"future\":{\"x\":[1,2]},\"hint\":\"streaming\"}", &r, &why, err), 0);
    ck_assert_int_eq(r.vmstat[AV_PSWPIN], -1);
    ck_assert(r.psi_some_avg10 < 0);
    ck_assert(r.hint_streaming);
}
END_TEST

START_TEST(rejects_with_reasons)
{
    static const struct {
        const char *line;
        agent_reject why;
    } bad[] = {
        { "not json", AGENT_REJ_JSON },
        { "[1,2]", AGENT_REJ_JSON },
        { "{\"v\":1,\"seq\":1} trailing", AGENT_REJ_JSON },
        { "{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":1}}}}}", AGENT_REJ_JSON }, /* deeper than 4 */
        { "{\"seq\":1}", AGENT_REJ_VERSION },
        { "{\"v\":2,\"seq\":1}", AGENT_REJ_VERSION },
        { "{\"v\":\"1\",\"seq\":1}", AGENT_REJ_VERSION },
        { "{\"v\":1}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":-4}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"vmstat\":{\"pswpin\":-1}}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"vmstat\":{\"pswpin\":1.5}}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"vmstat\":{\"pswpin\":9223372036854775807}}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"vmstat\":[]}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"meminfo\":{\"memtotal_kb\":\"lots\"}}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"psi\":{\"some_avg10\":250}}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"psi\":{\"some_avg10\":-1}}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"psi\":3}", AGENT_REJ_FIELD },
        { "{\"v\":1,\"seq\":1,\"hint\":7}", AGENT_REJ_FIELD },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        agent_report r;
        agent_reject why = AGENT_REJ_COUNT;
        char err[160];
        ck_assert_msg(parse(bad[i].line, &r, &why, err) == -1, "accepted: %s", bad[i].line);
        ck_assert_msg(why == bad[i].why, "%s: reason %d (%s), wanted %d", bad[i].line, why, err, bad[i].why);
    }
    static char big[AGENT_LINE_MAX + 10];
    memset(big, ' ', sizeof(big) - 1);
    agent_report r;
    agent_reject why;
    g_autoptr(GError) err = NULL;
    ck_assert_int_eq(agent_parse(big, sizeof(big) - 1, &r, &why, &err), -1);
    ck_assert_ptr_nonnull(err);
    ck_assert_int_eq(why, AGENT_REJ_TOO_LONG);
}
END_TEST

static void feed(agent_state *st, double now, uint64_t seq, int64_t refault_anon, int64_t memtotal_kb)
{
    char line[256];
    snprintf(line, sizeof(line),
             "{\"v\":1,\"seq\":%llu,\"vmstat\":{\"workingset_refault_anon\":%lld},"
             "\"meminfo\":{\"memtotal_kb\":%lld}}",
             (unsigned long long)seq, (long long)refault_anon, (long long)memtotal_kb);
    agent_feed_line(st, line, strlen(line), now, 512 * MIB);
}

START_TEST(rates_clamps_and_resets)
{
    agent_state st = { 0 };
    feed(&st, 100.0, 1, 1000, 400000);
    ck_assert_uint_eq(st.messages, 1);
    ck_assert(st.refault_anon_ps == 0); /* one report: no rate yet */
    feed(&st, 102.0, 2, 1600, 400000);
    ck_assert(st.refault_anon_ps == 300.0); /* over the host's clock */
    /* a guest claiming more memory than the balloon gives it is clamped */
    feed(&st, 103.0, 3, 1600, 64LL * 1024 * 1024);
    ck_assert_int_eq(st.cur.meminfo_kb[AM_TOTAL], 512 * 1024);
    ck_assert_uint_eq(st.clamped, 1);
    /* counters backwards without a restart: a reset, no rate */
    feed(&st, 104.0, 4, 10, 400000);
    ck_assert(st.refault_anon_ps == 0);
    ck_assert_uint_eq(st.resets, 1);
    feed(&st, 105.0, 5, 110, 400000); /* counted from the reset on */
    ck_assert(st.refault_anon_ps == 100.0);
    /* the agent restarted: seq starts over, not counted as a reset */
    feed(&st, 107.0, 1, 0, 400000);
    ck_assert_uint_eq(st.resets, 1);
    ck_assert(st.refault_anon_ps == 0);
    ck_assert(agent_fresh(&st, 108.0, 5));
    ck_assert(!agent_fresh(&st, 120.0, 5));
}
END_TEST

/* OOM kills and allocation stalls (every zone's allocstall summed), as
 * rates between drains; an agent that does not send them shows none. */
START_TEST(oom_kills_and_stalls_from_vmstat)
{
    agent_state st = { 0 };
    const char *a = "{\"v\":1,\"seq\":1,\"vmstat\":{\"oom_kill\":2,\"allocstall_dma32\":10,"
                    "\"allocstall_normal\":5,\"allocstall_movable\":0}}";
    const char *b = "{\"v\":1,\"seq\":2,\"vmstat\":{\"oom_kill\":3,\"allocstall_dma32\":30,"
                    "\"allocstall_normal\":25,\"allocstall_movable\":0}}";
    agent_feed_line(&st, a, strlen(a), 100.0, 512 * MIB);
    agent_feed_line(&st, b, strlen(b), 102.0, 512 * MIB);
    ck_assert(st.oom_kill_ps == 0.5);
    ck_assert(st.alloc_stall_ps == 20.0); /* (20 + 20) over 2 s */
    feed(&st, 104.0, 3, 0, 400000); /* an older agent: no such counters */
    feed(&st, 106.0, 4, 0, 400000);
    ck_assert(st.oom_kill_ps == 0 && st.alloc_stall_ps == 0);
}
END_TEST

/* At the default 5 s tick the agent's 1 s lines arrive five to a drain,
 * all with the drain's time: the rate is over the drains. */
START_TEST(rates_over_drains_at_the_default_tick)
{
    agent_state st = { 0 };
    for (int i = 0; i < 5; i++)
        feed(&st, 100.0, (uint64_t)i + 1, 1000 * (i + 1), 400000);
    for (int i = 5; i < 10; i++)
        feed(&st, 105.0, (uint64_t)i + 1, 1000 * (i + 1), 400000);
    ck_assert_msg(st.refault_anon_ps == 1000.0, "refault rate %.1f, want 1000/s", st.refault_anon_ps);
    ck_assert_int_eq((int)st.cur.seq, 10);
    /* a restart inside a drain: no rate until the next drain */
    feed(&st, 110.0, 11, 11000, 400000);
    feed(&st, 110.0, 1, 5, 400000);
    ck_assert(st.refault_anon_ps == 0 || !st.have_prev);
    feed(&st, 115.0, 2, 505, 400000);
    ck_assert(st.refault_anon_ps == 100.0);
    ck_assert_uint_eq(st.resets, 0);
}
END_TEST

START_TEST(rate_limit_drops_floods)
{
    agent_state st = { 0 };
    for (int i = 0; i < 100; i++)
        feed(&st, 50.0, (uint64_t)i + 1, 0, 1000); /* 100 lines in the same instant */
    ck_assert_uint_eq(st.messages, (uint64_t)AGENT_BURST);
    ck_assert_uint_eq(st.rejected[AGENT_REJ_RATE], 100 - (uint64_t)AGENT_BURST);
    feed(&st, 51.0, 200, 0, 1000); /* a second later, tokens are back */
    ck_assert_uint_eq(st.messages, (uint64_t)AGENT_BURST + 1);
}
END_TEST

/* ---- what a lying agent can do to the policy ---- */

static guest_view base_guest(const char *name, uint64_t actual, uint64_t anon)
{
    guest_view g;
    memset(&g, 0, sizeof(g));
    g.name = g.uuid = name;
    vm_policy_default(&g.policy);
    g.max_bytes = g.ceiling_bytes = actual;
    g.actual_bytes = actual;
    g.floor_bytes = 256 * MIB;
    g.stats_valid = g.stats_fresh = true;
    g.available_bytes = actual - anon;
    g.free_bytes = g.available_bytes;
    g.cache_bytes = g.reclaimable_cache_bytes = 0;
    return g;
}

START_TEST(agent_can_only_withdraw_thrashing)
{
    classify_params p;
    classify_params_default(&p);
    classify_state st = { 0 };
    guest_view g = base_guest("liar", 2 * GIB, GIB);
    /* the agent screams (refaults, PSI 100) but the balloon stats are quiet */
    g.agent_fresh = true;
    g.agent_refault_ps = 1e6;
    g.agent_psi_some = 100;
    classify_update(&st, &g, &p);
    ck_assert(!st.thrashing);
    /* balloon stats show swap-in, the agent says nothing comes back: not protected */
    g.swap_in_bps = 8 * MIB;
    g.agent_refault_ps = 0;
    g.agent_psi_some = 0;
    classify_update(&st, &g, &p);
    ck_assert(!st.thrashing);
    /* both agree: thrashing */
    g.agent_refault_ps = 500;
    classify_update(&st, &g, &p);
    ck_assert(st.thrashing);
    /* without an agent the balloon stats decide, as before */
    classify_state st2 = { 0 };
    g.agent_fresh = false;
    classify_update(&st2, &g, &p);
    ck_assert(st2.thrashing);
}
END_TEST

/* split-lru over two guests with 400 MiB of cache and no spare free
 * memory each; the host needs 600 MiB.  Returns what each gave. */
static void two_guest_round(bool second_lies, uint64_t gave[2], guest_view g[2])
{
    classify_params p;
    classify_params_default(&p);
    g[0] = base_guest("honest", 2 * GIB, 2 * GIB - 432 * MIB);
    g[1] = base_guest("other", 2 * GIB, 2 * GIB - 432 * MIB);
    for (int i = 0; i < 2; i++) {
        g[i].cache_bytes = g[i].reclaimable_cache_bytes = 400 * MIB; /* under the streaming heuristic's 25% */
        g[i].free_bytes = 32 * MIB;
    }
    if (second_lies) { /* claims everything an agent can claim */
        g[1].agent_fresh = true;
        g[1].agent_refault_ps = 1e9;
        g[1].agent_psi_some = 100;
        g[1].agent_hint_streaming = true;
    }
    for (int i = 0; i < 2; i++) {
        classify_state st = { 0 };
        classify_update(&st, &g[i], &p);
        g[i].thrashing = st.thrashing;
        g[i].streaming = st.streaming;
    }
    guest_decision d[2];
    policy_input in = { .n_guests = 2, .guests = g };
    policy_tunables_default(&in.tun);
    in.tun.step_percent = 100;
    in.host.total_bytes = 8 * GIB;
    in.host.available_bytes = 100 * MIB;
    in.wm = (watermarks){ .min = 50 * MIB, .low = 200 * MIB, .high = 700 * MIB };
    policy_output out = { .decisions = d };
    void *state = policy_split_lru.state_new();
    policy_split_lru.decide(&in, state, &out);
    policy_split_lru.state_free(state);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_ge(d[i].target_bytes, g[i].floor_bytes);
        gave[i] = g[i].actual_bytes - d[i].target_bytes;
    }
}

START_TEST(lying_agent_hurts_only_itself)
{
    guest_view g[2];
    uint64_t fair[2], lied[2];
    two_guest_round(false, fair, g);
    two_guest_round(true, lied, g);
    /* its claims of thrashing were ignored, its streaming hint taken */
    ck_assert(!g[1].thrashing);
    ck_assert(g[1].streaming);
    ck_assert(!g[0].streaming);
    /* the honest guest gave no more than next to an honest neighbour... */
    ck_assert_uint_le(lied[0], fair[0]);
    /* ...and the liar gave more than it would have honestly */
    ck_assert_uint_gt(lied[1], fair[1]);
    /* (and the host got at least as much as with two honest guests) */
    ck_assert_uint_ge(lied[0] + lied[1], fair[0] + fair[1]);
}
END_TEST

/* The host end of the agent's port, over a real unix socket: a line over
 * AGENT_LINE_MAX is rejected alone, and the good report after it in the
 * same read is taken in the same drain (it had waited for the guest's next
 * write, or been dropped). */
START_TEST(over_long_line_costs_only_itself)
{
    char dir[] = "/tmp/membal-agent-XXXXXX";
    ck_assert_ptr_nonnull(g_mkdtemp(dir));
    g_autofree char *path = g_strdup_printf("%s/agent.sock", dir);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    g_strlcpy(addr.sun_path, path, sizeof(addr.sun_path));
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(lfd, 0);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    ck_assert_int_eq(listen(lfd, 1), 0);

    agent_conn c;
    agent_state st = { 0 };
    agent_conn_init(&c, path);
    agent_conn_drain(&c, "test", &st, 512ULL << 20); /* connects */
    int guest = accept(lfd, NULL, NULL);
    ck_assert_int_ge(guest, 0);
    GString *out = g_string_new(NULL);
    for (int i = 0; i < AGENT_LINE_MAX + 100; i++)
        g_string_append_c(out, 'x');
    g_string_append_printf(out, "\n%s\n", real_line);
    ck_assert_int_eq(write(guest, out->str, out->len), (ssize_t)out->len);
    g_string_free(out, TRUE);
    agent_conn_drain(&c, "test", &st, 512ULL << 20);
    ck_assert_uint_eq(st.rejected[AGENT_REJ_TOO_LONG], 1);
    ck_assert_uint_eq(st.messages, 1);
    ck_assert(st.have);
    ck_assert_int_eq(st.cur.meminfo_kb[AM_TOTAL], 466396);

    agent_conn_clear(&c);
    close(guest);
    close(lfd);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("agent");
    TCase *tc = tcase_create("protocol");
    tcase_add_test(tc, parses_what_the_agent_sends);
    tcase_add_test(tc, rejects_with_reasons);
    tcase_add_test(tc, rates_clamps_and_resets);
    tcase_add_test(tc, oom_kills_and_stalls_from_vmstat);
    tcase_add_test(tc, rates_over_drains_at_the_default_tick);
    tcase_add_test(tc, rate_limit_drops_floods);
    tcase_add_test(tc, agent_can_only_withdraw_thrashing);
    tcase_add_test(tc, lying_agent_hurts_only_itself);
    tcase_add_test(tc, over_long_line_costs_only_itself);
    suite_add_tcase(s, tc);
    return check_run_suite(s, CK_FORK);
}

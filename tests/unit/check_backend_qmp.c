/*
 * The QMP backend (balancer/hv/backend_qmp.c) against a scripted fake
 * QEMU: what it asks a QEMU that joins, and what it waits for at stop.
 *
 * At stop the backend must not leave before QEMU has answered the balloon
 * changes it just sent (a drop given back): QEMU drops the requests of a
 * client that left which it has not run yet.  Nor may a QEMU that never
 * answers hold the stop up for longer than SHUTDOWN_MS.
 */
#include <check.h>

#include "check_run.h"
#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_qmp.h"
#include "hv/backend.h"

#define MIB (1024ULL * 1024ULL)

/* ---- a one-guest inventory, as the core lends it to a backend ---- */

static hv_guest the_guest;
static bool have_guest;

static hv_guest *inv_find(void *ctx, const char *uuid)
{
    (void)ctx;
    return have_guest && strcmp(the_guest.uuid, uuid) == 0 ? &the_guest : NULL;
}

static hv_guest *inv_add(void *ctx, const char *name, const char *uuid)
{
    (void)ctx;
    memset(&the_guest, 0, sizeof(the_guest));
    g_strlcpy(the_guest.name, name, sizeof(the_guest.name));
    g_strlcpy(the_guest.uuid, uuid, sizeof(the_guest.uuid));
    have_guest = true;
    return &the_guest;
}

static void inv_remove(void *ctx, hv_guest *g)
{
    (void)ctx;
    (void)g;
    have_guest = false;
}

static size_t inv_count(void *ctx)
{
    (void)ctx;
    return have_guest ? 1 : 0;
}

static hv_guest *inv_at(void *ctx, size_t i)
{
    (void)ctx;
    (void)i;
    return &the_guest;
}

static const hv_inventory inventory = {
    .find = inv_find, .add = inv_add, .remove = inv_remove, .count = inv_count, .at = inv_at,
};

static double mono_s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What the backend asks a QEMU that joins, and its first round, answered
 * as QEMU 7.2 answers a guest whose driver has not sent stats yet. */
#define JOIN_AND_FIRST_ROUND                                                                                     \
    FQ_HANDSHAKE,                                                                                                \
    { FQ_EXPECT, "query-memory-size-summary", 0 },                                                               \
    { FQ_REPLY, "{\"return\": {\"base-memory\": 536870912, \"plugged-memory\": 0}, \"id\": %ID%}\r\n", 0 },      \
    { FQ_EXPECT, "query-name", 0 },                                                                              \
    { FQ_REPLY, "{\"return\": {\"name\": \"db\"}, \"id\": %ID%}\r\n", 0 },                                       \
    { FQ_EXPECT, "query-uuid", 0 },                                                                              \
    { FQ_REPLY, "{\"return\": {\"UUID\": \"5ad1b2c6-6c4e-4d8b-9a51-2f6f3c1e0a01\"}, \"id\": %ID%}\r\n", 0 },    \
    { FQ_EXPECT, "qom-set", 0 },                                                                                 \
    { FQ_REPLY, "{\"return\": {}, \"id\": %ID%}\r\n", 0 },                                                       \
    { FQ_EXPECT, "qom-get", 0 },                                                                                 \
    { FQ_REPLY, "{\"return\": false, \"id\": %ID%}\r\n", 0 },                                                    \
    { FQ_EXPECT, "query-balloon", 0 },                                                                           \
    { FQ_REPLY, "{\"return\": {\"actual\": 268435456}, \"id\": %ID%}\r\n", 0 },                                 \
    { FQ_EXPECT, "qom-get", 0 },                                                                                 \
    { FQ_REPLY, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"guest hasn't updated any stats yet\"}, " \
                "\"id\": %ID%}\r\n", 0 },                                                                        \
    { FQ_EXPECT, "query-blockstats", 0 },                                                                        \
    { FQ_REPLY, "{\"return\": [], \"id\": %ID%}\r\n", 0 }

typedef struct {
    char dir[64], path[128];
    char *sockets[2];
    hv_ctx hv;
    fake_qmp *server;
} rig;

/* The fake QEMU on a unix socket, and the backend joined to it. */
static void rig_up(rig *r, const fq_step *script)
{
    memset(r, 0, sizeof(*r));
    have_guest = false;
    g_strlcpy(r->dir, "/tmp/membal-backend-qmp-XXXXXX", sizeof(r->dir));
    ck_assert_ptr_nonnull(g_mkdtemp(r->dir));
    snprintf(r->path, sizeof(r->path), "%s/qmp.sock", r->dir);
    r->server = fake_qmp_start_unix(script, r->path);
    ck_assert_ptr_nonnull(r->server);
    r->sockets[0] = r->path;
    r->hv = (hv_ctx){ .qmp_sockets = r->sockets, .stats_period = 2, .inv = &inventory };
    for (int i = 0; i < 50 && !have_guest; i++)
        ck_assert_int_eq(backend_qmp.sync(&r->hv), 0);
    ck_assert_msg(have_guest, "the backend did not join the fake QEMU");
    ck_assert_str_eq(the_guest.name, "db");
}

/* Stop the backend; the time it took, in seconds. */
static double rig_stop(rig *r)
{
    double t0 = mono_s_now();
    backend_qmp.shutdown(&r->hv);
    double took = mono_s_now() - t0;
    have_guest = false;
    const char *fail = fake_qmp_join(r->server);
    ck_assert_msg(fail == NULL, "fake QEMU: %s", fail ? fail : "");
    fake_qmp_free(r->server);
    unlink(r->path);
    rmdir(r->dir);
    return took;
}

/* Join, send one balloon change (a drop's give-back), stop: the time the
 * stop took, in seconds. */
static double stop_after_balloon_change(const fq_step *script)
{
    rig r;
    rig_up(&r, script);
    g_autoptr(GError) err = NULL;
    ck_assert_msg(backend_qmp.set_target(&r.hv, &the_guest, 512 * MIB, &err) == 0, "%s",
                  err ? err->message : "");
    return rig_stop(&r);
}

/* QEMU answers the give-back's balloon change 300 ms after it came: the
 * backend is still there to be answered (CI once lost a give-back when
 * the backend read its socket once at stop and left). */
START_TEST(stop_waits_for_balloon_answers)
{
    static const fq_step script[] = {
        JOIN_AND_FIRST_ROUND,
        { FQ_EXPECT, "balloon", 0 },
        { FQ_SLEEP, NULL, 300 },
        { FQ_ALIVE, NULL, 0 },
        { FQ_REPLY, "{\"return\": {}, \"id\": %ID%}\r\n", 0 },
        { FQ_SLEEP, NULL, 200 },
        { FQ_GONE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    double took = stop_after_balloon_change(script);
    fprintf(stderr, "stop with a balloon change answered after 300 ms took %.0f ms\n", took * 1000);
    ck_assert_msg(took >= 0.25, "the stop took %.0f ms: it did not wait for the answer", took * 1000);
}
END_TEST

/* A QEMU that never answers holds the stop up for SHUTDOWN_MS (1 s) at
 * most: by 1.6 s the backend has left. */
START_TEST(stop_does_not_wait_for_a_silent_qemu)
{
    static const fq_step script[] = {
        JOIN_AND_FIRST_ROUND,
        { FQ_EXPECT, "balloon", 0 },
        { FQ_SLEEP, NULL, 1600 },
        { FQ_GONE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    double took = stop_after_balloon_change(script);
    fprintf(stderr, "stop with a balloon change never answered took %.0f ms\n", took * 1000);
}
END_TEST

/* Nothing sent: nothing to wait for. */
START_TEST(stop_with_nothing_unanswered_leaves_at_once)
{
    static const fq_step script[] = {
        JOIN_AND_FIRST_ROUND,
        { FQ_SLEEP, NULL, 300 },
        { FQ_GONE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    rig r;
    rig_up(&r, script);
    usleep(50 * 1000); /* the first round's answers are in */
    double took = rig_stop(&r);
    ck_assert_msg(took < 0.25, "the stop took %.0f ms with nothing to wait for", took * 1000);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("backend_qmp");
    TCase *tc = tcase_create("stop");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, stop_waits_for_balloon_answers);
    tcase_add_test(tc, stop_does_not_wait_for_a_silent_qemu);
    tcase_add_test(tc, stop_with_nothing_unanswered_leaves_at_once);
    suite_add_tcase(s, tc);
    return check_run_suite(s, CK_FORK);
}

/*
 * The QMP backend (balancer/hv/backend_qmp.c) against a scripted fake
 * QEMU: what it asks a QEMU that joins, what it waits for at stop, and
 * another VM coming up behind a socket.
 *
 * At stop the backend must not leave before QEMU has answered the balloon
 * changes it just sent (the last tick's, a give-back's): QEMU drops the
 * requests of a client that left which it has not run yet.  Nor may a
 * QEMU that never answers hold the stop up for longer than SHUTDOWN_MS.
 */
#include <check.h>

#include "check_run.h"
#include <dirent.h>
#include <glib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_qmp.h"
#include "hv/backend.h"
#include "util/fd_limit.h"

#define MIB (1024ULL * 1024ULL)

/* ---- the guest list, as the core lends it to a backend ---- */

static GPtrArray *guests; /* of hv_guest, owned */

static hv_guest *inv_find(void *ctx, const char *uuid)
{
    (void)ctx;
    for (guint i = 0; i < guests->len; i++) {
        hv_guest *g = g_ptr_array_index(guests, i);
        if (strcmp(g->uuid, uuid) == 0)
            return g;
    }
    return NULL;
}

static hv_guest *inv_add(void *ctx, const char *name, const char *uuid)
{
    (void)ctx;
    hv_guest *g = g_new0(hv_guest, 1);
    g_strlcpy(g->name, name, sizeof(g->name));
    g_strlcpy(g->uuid, uuid, sizeof(g->uuid));
    g_ptr_array_add(guests, g);
    return g;
}

static void inv_remove(void *ctx, hv_guest *g)
{
    (void)ctx;
    backend_qmp.guest_release(NULL, g);
    g_ptr_array_remove(guests, g);
}

static size_t inv_count(void *ctx)
{
    (void)ctx;
    return guests->len;
}

static hv_guest *inv_at(void *ctx, size_t i)
{
    (void)ctx;
    return g_ptr_array_index(guests, i);
}

static const hv_inventory inventory = {
    .find = inv_find, .add = inv_add, .remove = inv_remove, .count = inv_count, .at = inv_at,
};

static hv_guest *only_guest(void)
{
    ck_assert_uint_eq(guests->len, 1);
    return g_ptr_array_index(guests, 0);
}

static double mono_s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What the backend asks a QEMU that joins, after the handshake: its size
 * first, then the answers from that one's on. */
#define IDENTITY(name, uuid) { FQ_EXPECT, "query-memory-size-summary", 0 }, IDENTITY_ANSWERS(name, uuid, "false")
/* fpr: its balloon's free-page-reporting property, "true" or "false" */
#define IDENTITY_ANSWERS(name, uuid, fpr)                                                                        \
    { FQ_REPLY, "{\"return\": {\"base-memory\": 536870912, \"plugged-memory\": 0}, \"id\": %ID%}\r\n", 0 },      \
    { FQ_EXPECT, "query-name", 0 },                                                                              \
    { FQ_REPLY, "{\"return\": {\"name\": \"" name "\"}, \"id\": %ID%}\r\n", 0 },                                 \
    { FQ_EXPECT, "query-uuid", 0 },                                                                              \
    { FQ_REPLY, "{\"return\": {\"UUID\": \"" uuid "\"}, \"id\": %ID%}\r\n", 0 },                                 \
    { FQ_EXPECT, "qom-set", 0 },                                                                                 \
    { FQ_REPLY, "{\"return\": {}, \"id\": %ID%}\r\n", 0 },                                                       \
    { FQ_EXPECT, "qom-get", 0 },                                                                                 \
    { FQ_REPLY, "{\"return\": " fpr ", \"id\": %ID%}\r\n", 0 },                                                   \
    { FQ_EXPECT, "qom-get", 0 },                                                                                 \
    { FQ_REPLY, "{\"return\": true, \"id\": %ID%}\r\n", 0 }

/* Its first round: the balloon at actual (bytes, a string), and QEMU's
 * answer to guest-stats (stats, or its error for a driver that has sent
 * none yet). */
#define ROUND(actual, stats)                                                                                 \
    { FQ_EXPECT, "query-balloon", 0 },                                                                           \
    { FQ_REPLY, "{\"return\": {\"actual\": " actual "}, \"id\": %ID%}\r\n", 0 },                 \
    { FQ_EXPECT, "qom-get", 0 },                                                                                 \
    { FQ_REPLY, stats, 0 },                                                                                      \
    { FQ_EXPECT, "query-blockstats", 0 },                                                                        \
    { FQ_REPLY, "{\"return\": [], \"id\": %ID%}\r\n", 0 },                                                          \
    { FQ_EXPECT, "query-memory-devices", 0 },                                                                    \
    { FQ_REPLY, "{\"return\": [], \"id\": %ID%}\r\n", 0 }

#define JOIN(name, uuid) FQ_HANDSHAKE, IDENTITY(name, uuid)

#define NO_STATS_YET "{\"error\": {\"class\": \"GenericError\", \"desc\": \"guest hasn't updated any stats yet\"}, \"id\": %ID%}\r\n"
#define SOME_STATS                                                                                               \
    "{\"return\": {\"stats\": {\"stat-total-memory\": 390000000, \"stat-free-memory\": 200000000, "                    \
    "\"stat-available-memory\": 250000000, \"stat-disk-caches\": 50000000}, \"last-update\": 1764748829}, "               \
    "\"id\": %ID%}\r\n"
/* ... from QEMU 9.2 and a Linux 6.12 guest: its OOM kills and stalls too */
#define STATS_9_2                                                                                                \
    "{\"return\": {\"stats\": {\"stat-total-memory\": 390000000, \"stat-free-memory\": 200000000, "                    \
    "\"stat-available-memory\": 250000000, \"stat-disk-caches\": 50000000, \"stat-oom-kills\": 3, "                      \
    "\"stat-alloc-stalls\": 41, \"stat-direct-scans\": 5000, \"stat-direct-reclaims\": 4000}, "                         \
    "\"last-update\": 1764748829}, \"id\": %ID%}\r\n"
#define JOIN_AND_FIRST_ROUND(name, uuid) JOIN(name, uuid), ROUND("268435456", NO_STATS_YET)

#define DB_UUID "5ad1b2c6-6c4e-4d8b-9a51-2f6f3c1e0a01"
#define WEB_UUID "0c9e7f52-1d2b-4a8e-8f0d-7b3a6e5c4d21"

typedef struct {
    char dir[64], path[128];
    char *sockets[3];
    hv_ctx hv;
    fake_qmp *server;
} rig;

/* The fake QEMU on a unix socket, and the backend set to it. */
static void rig_start(rig *r, const fq_step *script)
{
    memset(r, 0, sizeof(*r));
    guests = g_ptr_array_new_with_free_func(g_free);
    g_strlcpy(r->dir, "/tmp/membal-backend-qmp-XXXXXX", sizeof(r->dir));
    ck_assert_ptr_nonnull(g_mkdtemp(r->dir));
    snprintf(r->path, sizeof(r->path), "%s/qmp.sock", r->dir);
    r->server = fake_qmp_start_unix(script, r->path);
    ck_assert_ptr_nonnull(r->server);
    r->sockets[0] = r->path;
    r->hv = (hv_ctx){ .qmp_sockets = r->sockets, .stats_period = 2, .inv = &inventory };
}

/* ... and joined to it, syncing back to back. */
static void rig_up(rig *r, const fq_step *script)
{
    rig_start(r, script);
    for (int i = 0; i < 50 && !guests->len; i++)
        ck_assert_int_eq(backend_qmp.sync(&r->hv), 0);
    ck_assert_msg(guests->len, "the backend did not join the fake QEMU");
    ck_assert_str_eq(only_guest()->name, "db");
}

/* Stop the backend; the time it took, in seconds. */
static double rig_stop(rig *r)
{
    double t0 = mono_s_now();
    backend_qmp.shutdown(&r->hv);
    double took = mono_s_now() - t0;
    g_ptr_array_free(guests, TRUE);
    guests = NULL;
    const char *fail = fake_qmp_join(r->server);
    ck_assert_msg(fail == NULL, "fake QEMU: %s", fail ? fail : "");
    fake_qmp_free(r->server);
    unlink(r->path);
    rmdir(r->dir);
    return took;
}

/* Join, send one balloon change (the last tick's), stop: the time the
 * stop took, in seconds.  A first round answered after its gather (a slow
 * machine, valgrind) leaves QEMU taken for stuck, and balloon changes are
 * refused until it has answered: then the next tick's sync picks the
 * answers up (its own questions are answered by FQ_EXPECT_SKIPPING). */
static double stop_after_balloon_change(const fq_step *script)
{
    rig r;
    rig_up(&r, script);
    g_autoptr(GError) err = NULL;
    for (int i = 0; i < 20 && backend_qmp.set_target(&r.hv, only_guest(), 512 * MIB, &err) < 0; i++) {
        ck_assert_msg(strstr(err->message, "not answering"), "%s", err->message);
        g_clear_error(&err);
        usleep(100 * 1000); /* a stuck QEMU is not waited for: the next tick */
        ck_assert_int_eq(backend_qmp.sync(&r.hv), 0);
    }
    ck_assert_msg(err == NULL, "%s", err ? err->message : "");
    return rig_stop(&r);
}

/* QEMU answers the last balloon change 300 ms after it came: the backend
 * is still there to be answered (CI once lost one when the backend read
 * its socket once at stop and left). */
START_TEST(stop_waits_for_balloon_answers)
{
    static const fq_step script[] = {
        JOIN_AND_FIRST_ROUND("db", DB_UUID),
        { FQ_EXPECT_SKIPPING, "balloon", 0 },
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
        JOIN_AND_FIRST_ROUND("db", DB_UUID),
        { FQ_EXPECT_SKIPPING, "balloon", 0 },
        { FQ_SLEEP, NULL, 1600 },
        { FQ_GONE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    double took = stop_after_balloon_change(script);
    fprintf(stderr, "stop with a balloon change never answered took %.0f ms\n", took * 1000);
    ck_assert_msg(took < 1.5, "the stop took %.0f ms", took * 1000);
}
END_TEST

/* Nothing sent: nothing to wait for. */
START_TEST(stop_with_nothing_unanswered_leaves_at_once)
{
    static const fq_step script[] = {
        JOIN_AND_FIRST_ROUND("db", DB_UUID),
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

/* The guest reboots (QEMU's RESET event, also for system_reset): the
 * backend counts it for the core, which gives the guest its size back. */
START_TEST(reset_event_is_counted)
{
    static const fq_step script[] = {
        JOIN_AND_FIRST_ROUND("db", DB_UUID),
        { FQ_SEND, "{\"timestamp\": {\"seconds\": 1764748830, \"microseconds\": 5}, \"event\": \"RESET\", "
                   "\"data\": {\"guest\": true, \"reason\": \"guest-reset\"}}\r\n", 0 },
        { FQ_SEND, "{\"timestamp\": {\"seconds\": 1764748830, \"microseconds\": 9}, \"event\": \"BALLOON_CHANGE\", "
                   "\"data\": {\"actual\": 536870912}}\r\n", 0 },
        { FQ_SLEEP, NULL, 400 },
        { FQ_GONE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    rig r;
    rig_up(&r, script);
    ck_assert_uint_eq(only_guest()->resets, 0);
    for (int i = 0; i < 20 && !only_guest()->resets; i++) {
        usleep(20 * 1000);
        ck_assert_int_eq(backend_qmp.sync(&r.hv), 0);
    }
    ck_assert_uint_eq(only_guest()->resets, 1); /* the RESET, not the other event */
    rig_stop(&r);
}
END_TEST

/* Another VM comes up behind the same socket (its QEMU restarted with
 * another -uuid): the guest the socket served leaves the list in the same
 * sync the new one joins, and nothing of it is sampled or ballooned through
 * the new QEMU. */
START_TEST(another_vm_behind_the_same_socket)
{
    static const fq_step script[] = {
        JOIN_AND_FIRST_ROUND("db", DB_UUID),
        { FQ_ACCEPT, NULL, 0 }, /* another VM behind the socket */
        JOIN("web", WEB_UUID),
        ROUND("402653184", STATS_9_2),
        { FQ_SLEEP, NULL, 200 },
        { FQ_GONE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    rig r;
    rig_up(&r, script);
    for (int i = 0; i < 50 && !inv_find(NULL, WEB_UUID); i++)
        ck_assert_int_eq(backend_qmp.sync(&r.hv), 0);
    ck_assert_msg(inv_find(NULL, WEB_UUID), "the new VM did not join");
    ck_assert_msg(guests->len == 1, "%u guests after the sync the new VM joined in: the old one stayed",
                  guests->len);
    ck_assert_str_eq(only_guest()->name, "web");
    guest_sample smp;
    g_autoptr(GError) err = NULL;
    if (backend_qmp.sample(&r.hv, only_guest(), &smp, &err) == 0) {
        ck_assert_int_eq(smp.actual_bytes, 384 * (int64_t)MIB); /* the new QEMU's */
        ck_assert_int_eq(smp.total_bytes, 390000000);
        ck_assert_int_eq(smp.deflate_on_oom, 1); /* its balloon's property, as it answered */
        ck_assert_int_eq(smp.oom_kills, 3);
        ck_assert_int_eq(smp.alloc_stalls, 41);
    } else { /* its first round answered after the gather (a slow machine) */
        ck_assert_msg(strstr(err->message, "has not answered"), "%s", err->message);
        fprintf(stderr, "another VM: its first round came after the gather, its sample not checked\n");
    }
    rig_stop(&r);
}
END_TEST

/* A loaded QEMU greets 300 ms after the connect, answers the capabilities
 * 200 ms later and its identity 200 ms after that, while balancerd ticks
 * about every 0.7 s here: each answer waits in the socket for the next
 * tick, and that wait is not held against QEMU (it had been: the next step
 * got what was left of the connect's 500 ms, 1 ms, and the join failed and
 * backed off 5 s). */
START_TEST(slow_handshake_read_a_tick_late_joins)
{
    static const fq_step script[] = {
        { FQ_SLEEP, NULL, 300 },
        { FQ_SEND, FQ_GREETING, 0 },
        { FQ_EXPECT, "qmp_capabilities", 0 },
        { FQ_SLEEP, NULL, 200 },
        { FQ_REPLY, "{\"return\": {}, \"id\": %ID%}\r\n", 0 },
        { FQ_EXPECT, "query-memory-size-summary", 0 },
        { FQ_SLEEP, NULL, 200 }, /* and its identity 200 ms later */
        IDENTITY_ANSWERS("db", DB_UUID, "false"),
        ROUND("268435456", NO_STATS_YET),
        { FQ_SLEEP, NULL, 200 },
        { FQ_GONE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    rig r;
    rig_start(&r, script);
    int ticks = 0;
    for (; ticks < 8 && !guests->len; ticks++) {
        if (ticks)
            usleep(600 * 1000);
        ck_assert_int_eq(backend_qmp.sync(&r.hv), 0);
    }
    fprintf(stderr, "a QEMU slow to greet and to answer joined after %d ticks\n", ticks);
    ck_assert_msg(guests->len == 1, "it did not join in %d ticks", ticks);
    ck_assert_str_eq(only_guest()->name, "db");
    rig_stop(&r);
}
END_TEST

/* A QEMU that stops answering gets no new questions, not even whether its
 * guest's driver took free page reporting, due again 5 s after an answer
 * that the driver was not ready yet (it had been sent regardless, and
 * piled up in a hung QEMU's socket). */
START_TEST(stuck_qemu_is_asked_nothing_more)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-memory-size-summary", 0 },
        IDENTITY_ANSWERS("db", DB_UUID, "true"),
        /* the driver is not ready yet: asked again 5 s later.  (A first
         * round may come before it when the answer to free-page-reporting
         * is read after that round was asked -- valgrind beside a busy core:
         * it is answered with errors, and the next round is the one left
         * unanswered) */
        { FQ_EXPECT_SKIPPING, "x-query-virtio-status", 0 },
        { FQ_REPLY, "{\"return\": {\"status\": {\"statuses\": [\"VIRTIO_CONFIG_S_ACKNOWLEDGE\"]}, "
                    "\"guest-features\": {\"dev-features\": []}}, \"id\": %ID%}\r\n", 0 },
        /* the first round, never answered */
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_EXPECT, "qom-get", 0 },
        { FQ_EXPECT, "query-blockstats", 0 },
        { FQ_EXPECT, "query-memory-devices", 0 },
        { FQ_SLEEP, NULL, 6500 },
        { FQ_SILENT, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    rig r;
    rig_up(&r, script);
    for (int i = 0; i < 17; i++) { /* ticks of 0.5 s well past the 5 s (and the fake's 6.5 s) */
        usleep(500 * 1000);
        ck_assert_int_eq(backend_qmp.sync(&r.hv), 0);
    }
    rig_stop(&r);
}
END_TEST

/* One guest behind two sockets (two QEMUs given one -uuid, a
 * misconfiguration): when the socket that served it last shows another
 * VM, the other socket takes the guest over; it is neither dropped nor
 * left without a QEMU. */
START_TEST(guest_served_twice_is_handed_over)
{
    static const fq_step a[] = {
        JOIN("db", DB_UUID),
        ROUND("314572800", SOME_STATS),
        { FQ_SLEEP, NULL, 1500 }, /* then silent */
        { FQ_END, NULL, 0 },
    };
    static const fq_step b[] = {
        { FQ_SLEEP, NULL, 150 }, /* joins after a: it serves the guest */
        JOIN("db", DB_UUID),
        ROUND("268435456", SOME_STATS),
        { FQ_ACCEPT, NULL, 0 }, /* another VM behind b's socket */
        JOIN("web", WEB_UUID),
        ROUND("402653184", SOME_STATS),
        { FQ_SLEEP, NULL, 200 },
        { FQ_GONE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    rig r;
    rig_start(&r, b);
    char path_a[160];
    snprintf(path_a, sizeof(path_a), "%s/a.sock", r.dir);
    fake_qmp *server_a = fake_qmp_start_unix(a, path_a);
    ck_assert_ptr_nonnull(server_a);
    r.sockets[0] = path_a;
    r.sockets[1] = r.path;
    for (int i = 0; i < 50 && !inv_find(NULL, WEB_UUID); i++) {
        ck_assert_int_eq(backend_qmp.sync(&r.hv), 0);
        usleep(50 * 1000);
    }
    ck_assert_msg(inv_find(NULL, WEB_UUID), "the new VM did not join");
    hv_guest *db = inv_find(NULL, DB_UUID);
    ck_assert_msg(db != NULL, "the guest a still serves was dropped");
    guest_sample smp;
    g_autoptr(GError) err = NULL;
    ck_assert_msg(backend_qmp.sample(&r.hv, db, &smp, &err) == 0, "%s", err ? err->message : "");
    ck_assert_int_eq(smp.actual_bytes, 300 * (int64_t)MIB); /* a's */
    rig_stop(&r);
    const char *fail = fake_qmp_join(server_a);
    ck_assert_msg(fail == NULL, "fake QEMU a: %s", fail ? fail : "");
    fake_qmp_free(server_a);
}
END_TEST

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* tests/faults/fake_qemu, built beside this program: n guests behind
 * dir/fake-NN.sock; its pid. */
static pid_t spawn_fake_qemu(const char *dir, int n)
{
    g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
    ck_assert_ptr_nonnull(self);
    g_autofree char *here = g_path_get_dirname(self);
    g_autofree char *exe = g_build_filename(here, "fake_qemu", NULL);
    g_autofree char *log = g_build_filename(dir, "fake.log", NULL);
    char count[16];
    snprintf(count, sizeof(count), "%d", n);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(log, "w", stdout))
            _exit(127);
        execl(exe, exe, dir, count, "1024", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) {
        g_autofree char *text = NULL;
        if (g_file_get_contents(log, &text, NULL, NULL) && strstr(text, "ready"))
            return pid;
        usleep(100 * 1000);
    }
    kill(pid, SIGKILL);
    ck_abort_msg("%s did not start", exe);
    return -1;
}

/* Many QEMUs, more than select(2) could watch (MEMBAL_MANY_QMP, 1100; a
 * hundred under valgrind): all their sockets in one epoll set, every one
 * of them heard within one gather, one socket each and no file left
 * behind when they go away. */
START_TEST(many_qemus_are_gathered_in_one_epoll_set)
{
    const char *env = getenv("MEMBAL_MANY_QMP");
    int n = env ? atoi(env) : 1100;
    uint64_t before, after;
    g_autoptr(GError) ferr = NULL;
    ck_assert_int_eq(fd_limit_raise(&before, &after, &ferr), 0);
    if (after < (uint64_t)n + 64)
        CHECK_SKIP("%d sockets need more open files than the hard limit %llu", n, (unsigned long long)after);
    char dir[64];
    g_strlcpy(dir, "/tmp/membal-many-qmp-XXXXXX", sizeof(dir));
    ck_assert_ptr_nonnull(g_mkdtemp(dir));
    pid_t fake = spawn_fake_qemu(dir, n);
    guests = g_ptr_array_new_with_free_func(g_free);
    char **sockets = g_new0(char *, n + 1);
    for (int i = 0; i < n; i++)
        sockets[i] = g_strdup_printf("%s/fake-%02d.sock", dir, i);
    hv_ctx hv = { .qmp_sockets = sockets, .stats_period = 1, .inv = &inventory };
    int fds0 = open_fds();
    for (int i = 0; i < 100 && guests->len < (guint)n; i++) {
        ck_assert_int_eq(backend_qmp.sync(&hv), 0);
        usleep(50 * 1000);
    }
    ck_assert_uint_eq(guests->len, n);
    ck_assert_int_le(open_fds(), fds0 + n + 1); /* a socket each, and the epoll set */
    int best = 0;
    for (int tick = 0; tick < 10 && best < n; tick++) {
        usleep(200 * 1000);
        ck_assert_int_eq(backend_qmp.sync(&hv), 0);
        int sampled = 0;
        for (guint i = 0; i < guests->len; i++) {
            guest_sample smp;
            g_autoptr(GError) err = NULL;
            sampled += backend_qmp.sample(&hv, g_ptr_array_index(guests, i), &smp, &err) == 0;
        }
        best = sampled > best ? sampled : best;
    }
    fprintf(stderr, "%d QEMUs: %d answered within one gather at best\n", n, best);
    ck_assert_int_eq(best, n);
    /* they all go away: every socket leaves the set and is closed */
    kill(fake, SIGTERM);
    waitpid(fake, NULL, 0);
    for (int i = 0; i < 20 && guests->len; i++) {
        ck_assert_int_eq(backend_qmp.sync(&hv), 0);
        usleep(50 * 1000);
    }
    ck_assert_uint_eq(guests->len, 0);
    ck_assert_int_le(open_fds(), fds0 + 1);
    backend_qmp.shutdown(&hv);
    ck_assert_int_le(open_fds(), fds0);
    g_ptr_array_free(guests, TRUE);
    guests = NULL;
    g_strfreev(sockets);
    g_autofree char *log = g_build_filename(dir, "fake.log", NULL);
    unlink(log);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("backend_qmp");
    TCase *tc = tcase_create("fake_qemu");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, stop_waits_for_balloon_answers);
    tcase_add_test(tc, stop_does_not_wait_for_a_silent_qemu);
    tcase_add_test(tc, stop_with_nothing_unanswered_leaves_at_once);
    tcase_add_test(tc, another_vm_behind_the_same_socket);
    tcase_add_test(tc, reset_event_is_counted);
    tcase_add_test(tc, slow_handshake_read_a_tick_late_joins);
    tcase_add_test(tc, stuck_qemu_is_asked_nothing_more);
    tcase_add_test(tc, guest_served_twice_is_handed_over);
    tcase_add_test(tc, many_qemus_are_gathered_in_one_epoll_set);
    suite_add_tcase(s, tc);
    return check_run_suite(s, CK_FORK);
}

/*
 * What balancerd creates or writes outside itself is undone, also after
 * balancerd died.
 *
 * The kdamond we create is the kdamond we stop (reclaim/kdamond_ledger.h),
 * on fake DAMON sysfs trees: a leftover the ledger proves ours is turned
 * off and DAMON is ours again; a kdamond we cannot prove is ours --
 * another program's, one that changed since, one whose balancerd still
 * runs, one from an earlier boot -- is never written to (every file of the
 * tree is compared before and after).
 *
 * The cgroup protection we write is put back (reclaim/protect_ledger.h),
 * on fake cgroup directories: a value a dead balancerd wrote goes back to
 * what the group held; a group changed since, made again, or whose
 * balancerd still runs keeps what it has.
 */
#include <check.h>

#include "check_run.h"
#include <glib.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reclaim/cold_source.h"
#include "reclaim/kdamond_ledger.h"
#include "reclaim/protect_ledger.h"
#include "util/small_file.h"

/* every test's tree lives under one directory of this run, removed at the
 * end whatever the tests' outcome (a failed test ends before its done()) */
static char top[64], root[128], ledger[200];

static void put(const char *rel, const char *text)
{
    g_autofree char *path = g_build_filename(root, rel, NULL);
    g_autofree char *dir = g_path_get_dirname(path);
    ck_assert_int_eq(g_mkdir_with_parents(dir, 0700), 0);
    ck_assert(g_file_set_contents(path, text, -1, NULL));
}

static char *get(const char *rel)
{
    g_autofree char *path = g_build_filename(root, rel, NULL);
    char *text = NULL;
    ck_assert_msg(g_file_get_contents(path, &text, NULL, NULL), "%s", path);
    g_strchomp(text);
    return text;
}

#define K0 "kdamonds/0/"
#define C0 K0 "contexts/0/"

/* A DAMON admin tree with no kdamond: what a freshly booted kernel has
 * (the directories a kdamond needs are made up front, since writing
 * nr_kdamonds to a plain file makes none). */
static void free_tree(void)
{
    snprintf(root, sizeof(root), "%s/%d", top, (int)getpid());
    snprintf(ledger, sizeof(ledger), "%s/state/" KDAMOND_LEDGER_FILE, root);
    put("kdamonds/nr_kdamonds", "0\n");
    put(K0 "state", "off\n");
    put(K0 "pid", "-1\n");
    put(K0 "contexts/nr_contexts", "0\n");
    put(C0 "avail_operations", "vaddr\nfvaddr\npaddr\n");
    put(C0 "operations", "vaddr\n");
    put(C0 "schemes/nr_schemes", "0\n");
    put(C0 "schemes/0/action", "stat\n");
    put(C0 "monitoring_attrs/intervals/sample_us", "5000\n");
    put(C0 "monitoring_attrs/intervals/aggr_us", "100000\n");
}

/* One kdamond, running (state on, thread pid) with one scheme. */
static void running_tree(int pid, const char *action, unsigned sample_us, unsigned aggr_us)
{
    free_tree();
    char buf[32];
    put("kdamonds/nr_kdamonds", "1\n");
    put(K0 "state", "on\n");
    snprintf(buf, sizeof(buf), "%d\n", pid);
    put(K0 "pid", buf);
    put(K0 "contexts/nr_contexts", "1\n");
    put(C0 "operations", "paddr\n");
    put(C0 "schemes/nr_schemes", "1\n");
    put(C0 "schemes/0/action", action);
    snprintf(buf, sizeof(buf), "%u\n", sample_us);
    put(C0 "monitoring_attrs/intervals/sample_us", buf);
    snprintf(buf, sizeof(buf), "%u\n", aggr_us);
    put(C0 "monitoring_attrs/intervals/aggr_us", buf);
}

static gint by_name(gconstpointer a, gconstpointer b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void snap_dir(GString *out, const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    ck_assert_ptr_nonnull(d);
    GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
    for (const char *n; (n = g_dir_read_name(d));)
        g_ptr_array_add(names, g_strdup(n));
    g_ptr_array_sort(names, by_name);
    for (guint i = 0; i < names->len; i++) {
        g_autofree char *p = g_build_filename(dir, g_ptr_array_index(names, i), NULL);
        if (g_file_test(p, G_FILE_TEST_IS_DIR)) {
            if (!g_str_has_suffix(p, "/state")) /* the ledger's directory is ours */
                snap_dir(out, p);
            continue;
        }
        g_autofree char *text = NULL;
        ck_assert(g_file_get_contents(p, &text, NULL, NULL));
        g_string_append_printf(out, "%s=%s\n", p, text);
    }
    g_ptr_array_free(names, TRUE);
}

/* Every file of the tree and its text: what "never written to" compares. */
static char *snapshot(void)
{
    GString *s = g_string_new(NULL);
    snap_dir(s, root);
    return g_string_free(s, FALSE);
}

static bool ledger_exists(void) { return g_file_test(ledger, G_FILE_TEST_EXISTS); }

/* A ledger written by a balancerd that has exited (a child that recorded
 * itself and the kdamond's directory, then died), naming kdamond_pid as
 * the running thread. */
static void ledger_of_a_dead_owner(int kdamond_pid, uint32_t sample_us, uint32_t aggr_us)
{
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) {
        kdamond_ledger l;
        kdamond_ledger_init(&l, root, 0, sample_us, aggr_us);
        kdamond_ledger_note_dir(&l);
        l.kdamond_pid = kdamond_pid;
        _exit(kdamond_ledger_save(ledger, &l, NULL) == 0 ? 0 : 1);
    }
    int st;
    ck_assert_int_eq(waitpid(c, &st, 0), c);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static kdamond_leftover release(char **what)
{
    kdamond_leftover r = kdamond_release_leftover(ledger, what);
    fprintf(stderr, "release: %d: %s\n", r, *what ? *what : "(nothing)");
    return r;
}

/* release(), which must end in expect and write nothing of the tree;
 * what it said (g_free it). */
static char *release_touching_nothing(kdamond_leftover expect)
{
    g_autofree char *before = snapshot();
    char *what = NULL;
    ck_assert_int_eq(release(&what), expect);
    g_autofree char *after = snapshot();
    ck_assert_str_eq(before, after);
    return what;
}

static void done(void)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(no_ledger_touches_nothing)
{
    running_tree(108, "pageout\n", 500000, 5000000);
    ck_assert_ptr_null(release_touching_nothing(KDAMOND_NONE));
    done();
}
END_TEST

/* The leak the issue found: balancerd SIGKILLed with its kdamond on. */
START_TEST(ours_left_running_is_turned_off)
{
    running_tree(4242, "stat\n", 10000, 200000);
    ledger_of_a_dead_owner(4242, 10000, 200000);
    g_autofree char *what = NULL;
    ck_assert_int_eq(release(&what), KDAMOND_RELEASED);
    ck_assert_ptr_nonnull(strstr(what, "turned off kdamond 0"));
    g_autofree char *state = get(K0 "state"), *nr = get("kdamonds/nr_kdamonds");
    ck_assert_str_eq(state, "off");
    ck_assert_str_eq(nr, "0");
    ck_assert(!ledger_exists());
    done();
}
END_TEST

/* Died between creating the kdamond and starting it: off, unconfigured. */
START_TEST(ours_never_started_is_removed)
{
    free_tree();
    put("kdamonds/nr_kdamonds", "1\n");
    put(K0 "contexts/nr_contexts", "1\n");
    ledger_of_a_dead_owner(0, 10000, 200000);
    g_autofree char *what = NULL;
    ck_assert_int_eq(release(&what), KDAMOND_RELEASED);
    g_autofree char *nr = get("kdamonds/nr_kdamonds");
    ck_assert_str_eq(nr, "0");
    ck_assert(!ledger_exists());
    done();
}
END_TEST

/* What sysfs shows is not what we recorded: another thread, another
 * scheme, other intervals.  Left alone; the stale ledger goes. */
START_TEST(changed_since_is_not_ours)
{
    struct {
        int pid;
        const char *action;
        unsigned sample, aggr;
    } cases[] = {
        { 5151, "stat\n", 10000, 200000 },     /* another thread than the one recorded */
        { 4242, "pageout\n", 10000, 200000 },  /* a scheme we never write */
        { 4242, "stat\n", 500000, 5000000 },   /* intervals we never write */
    };
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        running_tree(cases[i].pid, cases[i].action, cases[i].sample, cases[i].aggr);
        ledger_of_a_dead_owner(4242, 10000, 200000);
        g_autofree char *what = release_touching_nothing(KDAMOND_NOT_OURS);
        ck_assert_ptr_nonnull(strstr(what, "left alone"));
        ck_assert(!ledger_exists());
        done();
    }
}
END_TEST

/* A ledger whose balancerd still runs: that kdamond is in use. */
START_TEST(owner_alive_is_left_alone)
{
    running_tree(4242, "stat\n", 10000, 200000);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) {
        kdamond_ledger l;
        kdamond_ledger_init(&l, root, 0, 10000, 200000);
        kdamond_ledger_note_dir(&l);
        l.kdamond_pid = 4242;
        char ok = kdamond_ledger_save(ledger, &l, NULL) == 0;
        (void)!write(p[1], &ok, 1);
        pause();
        _exit(0);
    }
    char ok = 0;
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    ck_assert(ok);
    g_autofree char *what = release_touching_nothing(KDAMOND_IN_USE);
    ck_assert_ptr_nonnull(strstr(what, "still runs"));
    ck_assert(ledger_exists());
    /* GError-carrying start-up: DAMON is not ours while it runs */
    damon_params dp;
    damon_params_default(&dp);
    g_autoptr(GError) err = NULL;
    ck_assert_ptr_null(cold_source_damon_new(root, ledger, &dp, &err));
    ck_assert_ptr_nonnull(strstr(err->message, "still runs"));
    /* once it is gone, the same kdamond is ours to take back */
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    g_free(what);
    what = NULL;
    ck_assert_int_eq(release(&what), KDAMOND_RELEASED);
    done();
}
END_TEST

START_TEST(ledger_of_an_earlier_boot_or_garbage)
{
    running_tree(4242, "stat\n", 10000, 200000);
    ledger_of_a_dead_owner(4242, 10000, 200000);
    g_autofree char *text = NULL;
    ck_assert(g_file_get_contents(ledger, &text, NULL, NULL));
    g_autoptr(GKeyFile) kf = g_key_file_new();
    ck_assert(g_key_file_load_from_data(kf, text, (gsize)-1, G_KEY_FILE_NONE, NULL));
    g_key_file_set_string(kf, "kdamond", "boot_id", "00000000-0000-0000-0000-000000000000");
    g_autofree char *other = g_key_file_to_data(kf, NULL, NULL);
    ck_assert(g_file_set_contents(ledger, other, -1, NULL));
    g_autofree char *what = release_touching_nothing(KDAMOND_NONE);
    ck_assert_ptr_nonnull(strstr(what, "earlier boot"));
    ck_assert(!ledger_exists());

    ck_assert(g_file_set_contents(ledger, "[kdamond]\nadmin=/\nowner_pid=banana\n", -1, NULL));
    g_autofree char *garbage = release_touching_nothing(KDAMOND_NOT_OURS);
    ck_assert_ptr_nonnull(strstr(garbage, "not a kdamond ledger"));
    done();
}
END_TEST

/* Ours was removed and another program made kdamond 0 again (and is
 * still configuring it, off): a new directory, not ours.  And a ledger
 * from before the creation was recorded names no directory: only a
 * kdamond nobody configured yet is taken for ours then. */
START_TEST(made_again_since_is_not_ours)
{
    free_tree();
    put("kdamonds/nr_kdamonds", "1\n");
    ledger_of_a_dead_owner(0, 10000, 200000);
    g_autofree char *cmd = g_strdup_printf("cd '%s/kdamonds' && cp -a 0 0.new && rm -rf 0 && mv 0.new 0", root);
    ck_assert_int_eq(system(cmd), 0);
    g_autofree char *what = release_touching_nothing(KDAMOND_NOT_OURS);
    ck_assert_ptr_nonnull(strstr(what, "made again"));

    /* no directory recorded (died between the ledger and the creation's
     * record): a configured kdamond is not ours */
    put(K0 "contexts/nr_contexts", "1\n");
    kdamond_ledger l;
    kdamond_ledger_init(&l, root, 0, 10000, 200000);
    l.owner.pid = 1 << 22; /* above pid_max: no such process */
    l.owner.start = 0;
    ck_assert_int_eq(kdamond_ledger_save(ledger, &l, NULL), 0);
    g_free(what);
    what = release_touching_nothing(KDAMOND_NOT_OURS);
    ck_assert_ptr_nonnull(strstr(what, "never recorded"));
    /* ... an unconfigured one is */
    put(K0 "contexts/nr_contexts", "0\n");
    ck_assert_int_eq(kdamond_ledger_save(ledger, &l, NULL), 0);
    g_free(what);
    what = NULL;
    ck_assert_int_eq(release(&what), KDAMOND_RELEASED);
    done();
}
END_TEST

/* Others added kdamonds after ours: ours is turned off, theirs kept. */
START_TEST(others_added_after_ours_are_kept)
{
    running_tree(4242, "stat\n", 10000, 200000);
    put("kdamonds/nr_kdamonds", "2\n");
    put("kdamonds/1/state", "on\n");
    ledger_of_a_dead_owner(4242, 10000, 200000);
    g_autofree char *what = NULL;
    ck_assert_int_eq(release(&what), KDAMOND_RELEASED);
    g_autofree char *s0 = get(K0 "state"), *s1 = get("kdamonds/1/state"), *nr = get("kdamonds/nr_kdamonds");
    ck_assert_str_eq(s0, "off");
    ck_assert_str_eq(s1, "on");
    ck_assert_str_eq(nr, "2");
    done();
}
END_TEST

/* Someone else's kdamond (this machine boots with one: paddr, pageout,
 * 500 ms / 5 s): DAMON is busy, said with what it is, nothing written. */
START_TEST(foreign_kdamond_is_described_not_touched)
{
    running_tree(108, "pageout\n", 500000, 5000000);
    g_autofree char *before = snapshot();
    damon_params dp;
    damon_params_default(&dp);
    g_autoptr(GError) err = NULL;
    ck_assert_ptr_null(cold_source_damon_new(root, ledger, &dp, &err));
    fprintf(stderr, "%s\n", err->message);
    ck_assert_ptr_nonnull(strstr(err->message, "kdamond 0: on, pid 108, paddr, scheme pageout, sample 500 ms, aggr "
                                               "5000 ms"));
    g_autofree char *after = snapshot();
    ck_assert_str_eq(before, after);
    ck_assert(!ledger_exists());
    done();
}
END_TEST

/* The whole cycle through the source's own code: a process creates its
 * DAMON source and is SIGKILLed; the next one takes the kdamond back,
 * creates its own, and leaves nothing when it is done. */
START_TEST(killed_owner_then_next_start_takes_it_back)
{
    free_tree();
    damon_params dp;
    damon_params_default(&dp);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) {
        GError *e = NULL;
        char ok = cold_source_damon_new(root, ledger, &dp, &e) != NULL;
        (void)!write(p[1], &ok, 1);
        pause();
        _exit(0);
    }
    char ok = 0;
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    ck_assert(ok);
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    g_autofree char *nr = get("kdamonds/nr_kdamonds");
    ck_assert_str_eq(nr, "1"); /* left behind */
    ck_assert(ledger_exists());

    g_autoptr(GError) err = NULL;
    cold_source *src = cold_source_damon_new(root, ledger, &dp, &err);
    ck_assert_msg(src != NULL, "%s", err ? err->message : "");
    ck_assert(ledger_exists()); /* now ours */
    kdamond_ledger l;
    ck_assert_int_eq(kdamond_ledger_load(ledger, &l, NULL), 1);
    ck_assert_int_eq(l.owner.pid, (int)getpid());
    src->ops->destroy(src);
    g_free(nr);
    nr = get("kdamonds/nr_kdamonds");
    ck_assert_str_eq(nr, "0");
    ck_assert(!ledger_exists());
    done();
}
END_TEST

/* ---- the protection ledger ---- */

static char pledger[200];
static pid_t protect_child;

/* A fake memory cgroup directory under root holding file = value. */
static void group(qemu_memcg *m, const char *name, memcg_kind kind, const char *value)
{
    snprintf(root, sizeof(root), "%s/%d", top, (int)getpid());
    snprintf(pledger, sizeof(pledger), "%s/state/" PROTECT_LEDGER_FILE, root);
    memset(m, 0, sizeof(*m));
    m->kind = kind;
    snprintf(m->dir, sizeof(m->dir), "%s/%s", root, name);
    g_autofree char *file = g_build_filename(name, memcg_protect_file(m), NULL);
    put(file, value);
}

static char *value_of(const qemu_memcg *m)
{
    g_autofree char *rel = g_build_filename(m->dir + strlen(root) + 1, memcg_protect_file(m), NULL);
    return get(rel);
}

/* In a child that then dies as balancerd would by SIGKILL (nothing put
 * back): each group gets bytes, recorded first. */
static void protect_and_die(qemu_memcg *ms, size_t n, uint64_t bytes, bool stay)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) {
        protect_ledger *pl = protect_ledger_new(pledger);
        char ok = 1;
        for (size_t i = 0; i < n; i++) {
            memcg_saved before;
            ok = ok && memcg_save(&ms[i], &before) == 0 && protect_ledger_note(pl, &ms[i], &before, bytes, NULL) == 0 &&
                 memcg_protect(&ms[i], bytes) == 0;
        }
        (void)!write(p[1], &ok, 1);
        if (stay)
            pause();
        raise(SIGKILL); /* as balancerd dies: nothing freed, nothing said (valgrind has no exit to report leaks at) */
        _exit(1);
    }
    char ok = 0;
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    ck_assert(ok);
    close(p[0]);
    close(p[1]);
    if (!stay)
        waitpid(c, NULL, 0);
    else
        protect_child = c;
}

START_TEST(protection_of_a_dead_balancerd_is_put_back)
{
    qemu_memcg ms[2];
    group(&ms[0], "machine/vm1.libvirt-qemu", MEMCG_V1, "9223372036854771712\n");
    group(&ms[1], "machine.slice/vm2.scope", MEMCG_V2, "max\n");
    protect_and_die(ms, 2, 64 << 20, false);
    g_autofree char *v0 = value_of(&ms[0]);
    ck_assert_str_eq(v0, "67108864");
    ck_assert(g_file_test(pledger, G_FILE_TEST_EXISTS));
    g_autofree char *what = NULL;
    ck_assert_int_eq(protect_release_leftover(pledger, &what), PROTECT_RELEASED);
    ck_assert_ptr_nonnull(strstr(what, "which is gone"));
    g_autofree char *a = value_of(&ms[0]), *b = value_of(&ms[1]);
    ck_assert_str_eq(a, "9223372036854771712");
    ck_assert_str_eq(b, "max");
    ck_assert(!g_file_test(pledger, G_FILE_TEST_EXISTS));
    /* nothing recorded: nothing to do, nothing said */
    g_autofree char *none = NULL;
    ck_assert_int_eq(protect_release_leftover(pledger, &none), PROTECT_NONE);
    ck_assert_ptr_null(none);
}
END_TEST

/* A group whose value someone changed since, one made again under the
 * same name (a guest restarted: a new scope), one that is gone: none is
 * written to. */
START_TEST(protection_changed_since_is_left_alone)
{
    qemu_memcg ms[3];
    group(&ms[0], "changed", MEMCG_V2, "0\n");
    group(&ms[1], "again", MEMCG_V2, "0\n");
    group(&ms[2], "gone", MEMCG_V2, "0\n");
    protect_and_die(ms, 3, 32 << 20, false);
    put("changed/memory.low", "1234\n");
    g_autofree char *cmd = g_strdup_printf("cd '%s' && mv again again.old && mkdir again && echo 33554432 > "
                                           "again/memory.low && rm -rf gone", root);
    ck_assert_int_eq(system(cmd), 0);
    g_autofree char *what = NULL;
    ck_assert_int_eq(protect_release_leftover(pledger, &what), PROTECT_RELEASED);
    ck_assert_ptr_nonnull(strstr(what, "changed since"));
    ck_assert_ptr_nonnull(strstr(what, "another group of that name"));
    ck_assert_ptr_nonnull(strstr(what, "is gone"));
    g_autofree char *a = get("changed/memory.low"), *b = get("again/memory.low");
    ck_assert_str_eq(a, "1234");
    ck_assert_str_eq(b, "33554432");
    ck_assert(!g_file_test(pledger, G_FILE_TEST_EXISTS));
}
END_TEST

START_TEST(protection_of_a_running_balancerd_is_left_alone)
{
    qemu_memcg m;
    group(&m, "vm.scope", MEMCG_V2, "0\n");
    protect_and_die(&m, 1, 16 << 20, true);
    g_autofree char *what = NULL;
    ck_assert_int_eq(protect_release_leftover(pledger, &what), PROTECT_IN_USE);
    ck_assert_ptr_nonnull(strstr(what, "still runs"));
    g_autofree char *v = value_of(&m);
    ck_assert_str_eq(v, "16777216");
    kill(protect_child, SIGKILL);
    waitpid(protect_child, NULL, 0);
    g_free(what);
    what = NULL;
    ck_assert_int_eq(protect_release_leftover(pledger, &what), PROTECT_RELEASED);
    g_autofree char *back = value_of(&m);
    ck_assert_str_eq(back, "0");
}
END_TEST

/* One v1 group with both what balancerd writes there recorded: its soft
 * limit (protection) and a limit step's lowered limit (memcg_reclaim.h),
 * by a balancerd that died before putting either back.  Each file gets
 * its own value back; one dropped (the step put its limit back itself)
 * leaves the other recorded. */
START_TEST(a_lowered_limit_and_a_protection_in_one_group_are_both_put_back)
{
    qemu_memcg m;
    group(&m, "machine/vm1.libvirt-qemu", MEMCG_V1, "9223372036854771712\n");
    put("machine/vm1.libvirt-qemu/" MEMCG_V1_LIMIT, "1073741824\n");
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) {
        protect_ledger *pl = protect_ledger_new(pledger);
        memcg_saved soft, limit = { .saved = true, .bytes = 1073741824 };
        char ok = memcg_save(&m, &soft) == 0 && protect_ledger_note(pl, &m, &soft, 64 << 20, NULL) == 0 &&
                  memcg_protect(&m, 64 << 20) == 0 &&
                  protect_ledger_note_file(pl, &m, MEMCG_V1_LIMIT, &limit, 500 << 20, NULL) == 0 &&
                  small_file_write_at(m.dir, MEMCG_V1_LIMIT, "524288000") == 0;
        /* a second step of the same group: recorded once, the last value */
        ok = ok && protect_ledger_note_file(pl, &m, MEMCG_V1_LIMIT, &limit, 490 << 20, NULL) == 0 &&
             small_file_write_at(m.dir, MEMCG_V1_LIMIT, "513802240") == 0;
        (void)!write(p[1], &ok, 1);
        raise(SIGKILL);
        _exit(1);
    }
    char ok = 0;
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    ck_assert(ok);
    waitpid(c, NULL, 0);
    close(p[0]);
    close(p[1]);
    g_autofree char *what = NULL;
    ck_assert_int_eq(protect_release_leftover(pledger, &what), PROTECT_RELEASED);
    g_autofree char *soft = value_of(&m), *limit = get("machine/vm1.libvirt-qemu/" MEMCG_V1_LIMIT);
    ck_assert_str_eq(soft, "9223372036854771712");
    ck_assert_str_eq(limit, "1073741824");
    ck_assert_ptr_nonnull(strstr(what, MEMCG_V1_LIMIT ": put back 1073741824"));
    ck_assert(!g_file_test(pledger, G_FILE_TEST_EXISTS));
    /* dropped, the limit is no longer recorded; the protection still is */
    protect_ledger *pl = protect_ledger_new(pledger);
    memcg_saved soft0, limit0 = { .saved = true, .bytes = 1073741824 };
    ck_assert_int_eq(memcg_save(&m, &soft0), 0);
    ck_assert_int_eq(protect_ledger_note(pl, &m, &soft0, 32 << 20, NULL), 0);
    ck_assert_int_eq(protect_ledger_note_file(pl, &m, MEMCG_V1_LIMIT, &limit0, 400 << 20, NULL), 0);
    protect_ledger_drop_file(pl, &m, MEMCG_V1_LIMIT);
    g_autofree char *text = NULL;
    ck_assert(g_file_get_contents(pledger, &text, NULL, NULL));
    ck_assert_ptr_null(strstr(text, MEMCG_V1_LIMIT));
    ck_assert_ptr_nonnull(strstr(text, "memory.soft_limit_in_bytes"));
    protect_ledger_drop(pl, &m);
    ck_assert(!g_file_test(pledger, G_FILE_TEST_EXISTS));
    protect_ledger_unref(pl);
}
END_TEST

/* A balancerd that puts the values back itself forgets them; a ledger of
 * an earlier boot or one that is not a ledger is removed, nothing
 * written. */
START_TEST(protection_ledger_forgets_and_refuses)
{
    qemu_memcg a, b;
    group(&a, "a", MEMCG_V2, "0\n");
    group(&b, "b", MEMCG_V1, "0\n");
    protect_ledger *pl = protect_ledger_new(pledger);
    memcg_saved sa, sb;
    ck_assert_int_eq(memcg_save(&a, &sa), 0);
    ck_assert_int_eq(memcg_save(&b, &sb), 0);
    ck_assert_int_eq(protect_ledger_note(pl, &a, &sa, 1 << 20, NULL), 0);
    ck_assert_int_eq(protect_ledger_note(pl, &b, &sb, 2 << 20, NULL), 0);
    protect_ledger_drop(pl, &a);
    g_autofree char *text = NULL;
    ck_assert(g_file_get_contents(pledger, &text, NULL, NULL));
    ck_assert_ptr_null(strstr(text, a.dir));
    ck_assert_ptr_nonnull(strstr(text, b.dir));
    protect_ledger_drop(pl, &b);
    ck_assert(!g_file_test(pledger, G_FILE_TEST_EXISTS));

    /* a ledger from an earlier boot */
    ck_assert_int_eq(protect_ledger_note(pl, &a, &sa, 1 << 20, NULL), 0);
    ck_assert_int_eq(memcg_protect(&a, 1 << 20), 0);
    protect_ledger_unref(pl);
    g_autoptr(GKeyFile) kf = g_key_file_new();
    ck_assert(g_key_file_load_from_file(kf, pledger, G_KEY_FILE_NONE, NULL));
    g_key_file_set_string(kf, "owner", "boot_id", "00000000-0000-0000-0000-000000000000");
    g_autofree char *other = g_key_file_to_data(kf, NULL, NULL);
    ck_assert(g_file_set_contents(pledger, other, -1, NULL));
    g_autofree char *what = NULL;
    ck_assert_int_eq(protect_release_leftover(pledger, &what), PROTECT_NONE);
    ck_assert_ptr_nonnull(strstr(what, "earlier boot"));
    g_autofree char *v = get("a/memory.low");
    ck_assert_str_eq(v, "1048576");
    ck_assert(!g_file_test(pledger, G_FILE_TEST_EXISTS));
    /* not a ledger */
    ck_assert(g_file_set_contents(pledger, "[owner]\nowner_pid=banana\n", -1, NULL));
    g_autofree char *garbage = NULL;
    ck_assert_int_eq(protect_release_leftover(pledger, &garbage), PROTECT_NONE);
    ck_assert_ptr_nonnull(strstr(garbage, "nothing is put back"));
    ck_assert(!g_file_test(pledger, G_FILE_TEST_EXISTS));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ledgers");
    TCase *tc = tcase_create("fake_sysfs");
    tcase_add_test(tc, no_ledger_touches_nothing);
    tcase_add_test(tc, ours_left_running_is_turned_off);
    tcase_add_test(tc, ours_never_started_is_removed);
    tcase_add_test(tc, changed_since_is_not_ours);
    tcase_add_test(tc, owner_alive_is_left_alone);
    tcase_add_test(tc, ledger_of_an_earlier_boot_or_garbage);
    tcase_add_test(tc, others_added_after_ours_are_kept);
    tcase_add_test(tc, made_again_since_is_not_ours);
    tcase_add_test(tc, foreign_kdamond_is_described_not_touched);
    tcase_add_test(tc, killed_owner_then_next_start_takes_it_back);
    suite_add_tcase(s, tc);
    TCase *tp = tcase_create("protect_ledger");
    tcase_add_test(tp, protection_of_a_dead_balancerd_is_put_back);
    tcase_add_test(tp, protection_changed_since_is_left_alone);
    tcase_add_test(tp, a_lowered_limit_and_a_protection_in_one_group_are_both_put_back);
    tcase_add_test(tp, protection_of_a_running_balancerd_is_left_alone);
    tcase_add_test(tp, protection_ledger_forgets_and_refuses);
    suite_add_tcase(s, tp);
    snprintf(top, sizeof(top), "/var/tmp/membal-ledger-%d", (int)getpid());
    int rc = check_run_suite(s, CK_FORK);
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", top);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", top);
    return rc;
}

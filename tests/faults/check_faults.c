/*
 * Faults against real processes (make check; tests/faults/README lists
 * every fault and where it is tested):
 *   - a sudden host pressure spike: a process in the "host" memory cgroup
 *     allocates 640 MiB at once; balancerd reacts within a tick or two,
 *     does not oscillate afterwards, and the guest sees no OOM killer;
 *   - the host cgroup's files vanish under a running balancerd: it says
 *     so, balloons nothing while blind, and resumes when they return;
 *   - the guest kernel panics: its stats go stale, its balloon is left
 *     where it is, and balancerd carries on;
 *   - host reclaim on with no swap anywhere: one clear warning, nothing
 *     paged out, no crash;
 *   - a QEMU that does not answer (stopped, or never accepting) delays no
 *     other guest;
 *   - a VM started after balancerd (its --qmp socket absent at first) is
 *     managed within a tick or two of its start, with one warning;
 *   - more guests than the soft open-file limit allows sockets and /proc
 *     files for: balancerd raises the limit and manages them all.
 * balancerd runs under MEMBAL_DAEMON_WRAPPER (valgrind in make check).
 */
#include <check.h>

#include "check_run.h"
#include <errno.h>
#include <glib.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "guest_vm.h"
#include "test_util.h"

#define MIB (1024ULL * 1024ULL)

static char workdir[200], daemon_log[300];
static pid_t daemon_pid;




static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void make_workdir(const char *what)
{
    snprintf(workdir, sizeof(workdir), "/var/tmp/membal-fault-%s-%d", what, (int)getpid());
    mkdir(workdir, 0700);
    cleanup_register("rm -rf '%s'", workdir);
}

/* bare: without MEMBAL_DAEMON_WRAPPER (valgrind does not know pidfd_open) */
static void start_daemon_ex(const char *conf_text, const char *extra, bool bare)
{
    char conf[300], args[6144];
    snprintf(conf, sizeof(conf), "%s/balancer.conf", workdir);
    ck_assert(test_put(conf, conf_text));
    snprintf(daemon_log, sizeof(daemon_log), "%s/balancerd.log", workdir);
    snprintf(args, sizeof(args), "--metrics-listen '' --control-socket '%s/ctl.sock' %s", workdir, extra);
    daemon_pid = test_start_daemon(conf, args, daemon_log, bare);
    ck_assert_int_gt(daemon_pid, 0);
}

static void start_daemon(const char *conf_text, const char *extra) { start_daemon_ex(conf_text, extra, false); }

static int stop_daemon(void)
{
    int rc = test_stop_daemon(daemon_pid);
    daemon_pid = 0;
    return rc;
}

static char *slurp(const char *path)
{
    char *t = NULL;
    if (!g_file_get_contents(path, &t, NULL, NULL))
        return g_strdup("");
    return t;
}


static bool wait_log(const char *needle, int seconds) { return test_wait_line(daemon_log, needle, seconds); }

static void dump(const char *path)
{
    test_run("echo '--- %s' >&2; tail -n 40 '%s' >&2", path, path);
}

/* Balloon moves in the log, in order: +1 for growth, -1 for reclaim. */
static int direction_changes(const char *log, int *moves)
{
    char *t = slurp(log);
    int last = 0, changes = 0;
    *moves = 0;
    for (char *p = t; (p = strstr(p, ": balloon ")); p++) {
        unsigned long long from, to;
        char fu[8], tu[8];
        if (sscanf(p, ": balloon %llu %7s -> %llu %7s", &from, fu, &to, tu) != 4)
            continue;
        double f = (double)from * (fu[0] == 'G' ? 1024 : 1), g = (double)to * (tu[0] == 'G' ? 1024 : 1);
        int dir = g > f ? 1 : -1;
        if (last && dir != last)
            changes++;
        last = dir;
        (*moves)++;
    }
    g_free(t);
    return changes;
}

static bool console_has_oom(const guest_vm *vm)
{
    return test_count_lines(vm->serial_path, "invoked oom-killer") + test_count_lines(vm->serial_path, "Out of memory") > 0;
}

/* ---- the host memory cgroup for the spike ---- */

static char cgdir[300];
static bool cg_v2;

static void make_host_cgroup(uint64_t limit)
{
    char *ctl = slurp("/sys/fs/cgroup/unified/cgroup.subtree_control");
    char *ctl2 = slurp("/sys/fs/cgroup/cgroup.subtree_control");
    const char *root = NULL;
    if (strstr(ctl2, "memory")) {
        root = "/sys/fs/cgroup";
        cg_v2 = true;
    } else if (strstr(ctl, "memory")) {
        root = "/sys/fs/cgroup/unified";
        cg_v2 = true;
    } else if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) == 0) {
        root = "/sys/fs/cgroup/memory";
        cg_v2 = false;
    }
    g_free(ctl);
    g_free(ctl2);
    ck_assert_msg(root != NULL, "no memory cgroup controller on this machine");
    snprintf(cgdir, sizeof(cgdir), "%s/membal-spike-%d", root, (int)getpid());
    ck_assert_int_eq(mkdir(cgdir, 0755), 0);
    cleanup_register("for p in $(cat '%s/cgroup.procs' 2>/dev/null); do kill -9 $p; done; sleep 1; rmdir '%s' "
                     "2>/dev/null",
                     cgdir, cgdir);
    char path[400], val[32];
    snprintf(path, sizeof(path), "%s/%s", cgdir, cg_v2 ? "memory.max" : "memory.limit_in_bytes");
    snprintf(val, sizeof(val), "%llu", (unsigned long long)limit);
    ck_assert(test_put(path, val));
}

/* A host process that grabs bytes at once inside the cgroup and holds
 * them.  Returns after the memory is touched. */
static pid_t spike(uint64_t bytes)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char path[400], me[16];
        snprintf(path, sizeof(path), "%s/cgroup.procs", cgdir);
        snprintf(me, sizeof(me), "%d", (int)getpid());
        if (!test_put(path, me))
            _exit(2);
        char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            _exit(3);
        for (uint64_t i = 0; i < bytes; i += 4096)
            m[i] = 1;
        char c = 'x';
        if (write(p[1], &c, 1) != 1)
            _exit(4);
        pause();
        _exit(0);
    }
    cleanup_register("kill -9 %d 2>/dev/null", (int)pid);
    close(p[1]);
    char c;
    ck_assert_int_eq(read(p[0], &c, 1), 1);
    close(p[0]);
    return pid;
}

/* The spike leaves the host SPIKE_LEFT of its limit available: below the
 * low watermark (20 %) and above min (5 %), however much the guest's QEMU
 * happens to hold when it comes. */
#define HOST_LIMIT (1024 * MIB)
#define SPIKE_LEFT (HOST_LIMIT / 10)

/* What balancerd sees as host available memory (its control socket). */
static double host_available(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "'%s/build/balancerctl' --socket '%s/ctl.sock' --json status", test_top(), workdir);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, p);
    pclose(p);
    buf[n] = '\0';
    const char *a = strstr(buf, "\"available_bytes\"");
    a = a ? strchr(a, ':') : NULL;
    return a ? strtod(a + 1, NULL) : -1;
}

START_TEST(host_pressure_spike)
{
    make_workdir("spike");
    make_host_cgroup(HOST_LIMIT);
    guest_vm vm;
    char extra[400];
    snprintf(extra, sizeof(extra), "--cgroup '%s' --tb-size 32", cgdir);
    guest_vm_opts o = { .mem_mib = 512, .append = "membal.report=1 membal.run=wss:160:50", .extra = extra };
    ck_assert(guest_vm_start(&vm, &o) == 0);
    cleanup_register("kill -9 %d 2>/dev/null", (int)vm.pid);
    ck_assert(guest_vm_wait_console(&vm, "WSS ready", 120000));
    char conf[1024], qmp[400];
    snprintf(conf, sizeof(conf),
             "[balancer]\ntick = 1\nstats_period = 1\n"
             "[watermarks]\nmin = 5%%\nlow = 20%%\nhigh = 30%%\n"
             "[guests]\ndefault_floor_min = 256MiB\ndefault_floor_percent = 0\n"
             "[host]\nmemory_cgroup = %s\n",
             cgdir);
    snprintf(qmp, sizeof(qmp), "--qmp '%s'", vm.qmp_path);
    start_daemon(conf, qmp);
    ck_assert(wait_log("starting:", 30));
    sleep(8); /* steady state: the host has room */
    int moves_before;
    direction_changes(daemon_log, &moves_before);

    double avail_before = host_available();
    ck_assert_msg(avail_before > 3 * SPIKE_LEFT, "before the spike the host has %.0f MiB available of %llu: no room for one",
                  avail_before / MIB, (unsigned long long)(HOST_LIMIT / MIB));
    uint64_t spike_bytes = ((uint64_t)avail_before - SPIKE_LEFT) / MIB * MIB;
    double t0 = mono();
    pid_t hog = spike(spike_bytes);
    double t_alloc = mono() - t0;
    /* react: the first reclaim decision after the spike */
    double reacted = -1;
    for (int i = 0; i < 200; i++) {
        int moves;
        direction_changes(daemon_log, &moves);
        if (moves > moves_before && test_count_lines(daemon_log, "below low watermark") > 0) {
            reacted = mono() - t0 - t_alloc;
            break;
        }
        usleep(100000);
    }
    double avail_spiked = host_available();
    sleep(30);
    int moves, changes = direction_changes(daemon_log, &moves);
    char seen[400];
    snprintf(seen, sizeof(seen),
             "host available %.0f MiB; %llu MiB allocated in %.2f s, leaving %.0f MiB; first balloon reclaim %.2f s "
             "after; %d balloon moves, %d direction changes in 30 s; host available now %.0f MiB; guest OOM: %s",
             avail_before / MIB, (unsigned long long)(spike_bytes / MIB), t_alloc, avail_spiked / MIB, reacted,
             moves - moves_before, changes, host_available() / MIB, console_has_oom(&vm) ? "yes" : "no");
    fprintf(stderr, "pressure spike: %s\n", seen);
    if (reacted < 0 || changes > 1)
        dump(daemon_log);
    /* within a tick or two (1 s ticks; the daemon may run under valgrind) */
    ck_assert_msg(reacted >= 0 && reacted <= 3.0, "reacted after %.2f s (%s)", reacted, seen);
    ck_assert_int_le(changes, 1);
    ck_assert_msg(!console_has_oom(&vm), "the guest's OOM killer ran");
    ck_assert(guest_vm_alive(&vm));
    ck_assert(guest_vm_wait_console(&vm, "WSS t=", 5000));
    kill(hog, SIGKILL);
    waitpid(hog, NULL, 0);
    ck_assert_int_eq(stop_daemon(), 0);
    guest_vm_stop(&vm);
    test_run("rmdir '%s' 2>/dev/null", cgdir);
}
END_TEST

/* The "host" cgroup's files go away and come back. */
START_TEST(host_cgroup_vanishes)
{
    make_workdir("cgone");
    char fake[300];
    snprintf(fake, sizeof(fake), "%s/fakecg", workdir);
    mkdir(fake, 0700);
    char cur[400], max[400];
    snprintf(cur, sizeof(cur), "%s/memory.current", fake);
    snprintf(max, sizeof(max), "%s/memory.max", fake);
    /* 1 GiB limit, 950 MiB used: well below low */
    ck_assert(test_put(max, "1073741824\n"));
    ck_assert(test_put(cur, "996147200\n"));
    guest_vm vm;
    guest_vm_opts o = { .mem_mib = 512, .append = "membal.report=1" };
    ck_assert(guest_vm_start(&vm, &o) == 0);
    cleanup_register("kill -9 %d 2>/dev/null", (int)vm.pid);
    char conf[1024], qmp[400];
    snprintf(conf, sizeof(conf),
             "[balancer]\ntick = 1\nstats_period = 1\n"
             "[watermarks]\nmin = 5%%\nlow = 20%%\nhigh = 30%%\n"
             "[guests]\ndefault_floor_min = 300MiB\ndefault_floor_percent = 0\n"
             "[policy]\nstep_percent = 5\nstep_min = 8MiB\n"
             "[host]\nmemory_cgroup = %s\n",
             fake);
    snprintf(qmp, sizeof(qmp), "--qmp '%s'", vm.qmp_path);
    start_daemon(conf, qmp);
    ck_assert_msg(wait_log(": balloon ", 60), "no reclaim while the host is short");
    /* blind: no memory.current */
    ck_assert_int_eq(unlink(cur), 0);
    ck_assert(wait_log("not a memory cgroup", 20));
    sleep(1);
    int before;
    direction_changes(daemon_log, &before);
    sleep(5);
    int during;
    direction_changes(daemon_log, &during);
    ck_assert_msg(during == before, "ballooned %d times while blind", during - before);
    ck_assert(test_count_lines(daemon_log, "skipping this tick") >= 3);
    /* back: balancing resumes */
    ck_assert(test_put(cur, "996147200\n"));
    bool resumed = false;
    for (int i = 0; i < 100 && !resumed; i++) {
        int now;
        direction_changes(daemon_log, &now);
        resumed = now > during;
        usleep(200000);
    }
    if (!resumed)
        dump(daemon_log);
    ck_assert_msg(resumed, "no balloon move after the cgroup came back");
    ck_assert_int_eq(stop_daemon(), 0);
    guest_vm_stop(&vm);
}
END_TEST

/* The guest kernel panics: QEMU keeps running, the balloon driver stops
 * reporting.  Nothing may be decided on stale numbers. */
START_TEST(guest_kernel_panics)
{
    make_workdir("panic");
    guest_vm vm;
    /* panic=0: the guest hangs after the panic instead of rebooting (and
     * QEMU, run with -no-reboot, exiting) */
    guest_vm_opts o = { .mem_mib = 512, .append = "membal.report=1 membal.panic_after=12 panic=0" };
    ck_assert(guest_vm_start(&vm, &o) == 0);
    cleanup_register("kill -9 %d 2>/dev/null", (int)vm.pid);
    char qmp[400];
    snprintf(qmp, sizeof(qmp), "--qmp '%s'", vm.qmp_path);
    /* host short on purpose: the guest is reclaimed from while it lives */
    start_daemon("[balancer]\ntick = 1\nstats_period = 1\n"
                 "[watermarks]\nmin = 1%\nlow = 99.5%\nhigh = 99.8%\n"
                 "[guests]\ndefault_floor_min = 256MiB\ndefault_floor_percent = 0\n"
                 "[policy]\nstep_percent = 2\nstep_min = 4MiB\n",
                 qmp);
    ck_assert(guest_vm_wait_console(&vm, "MEMBAL-GUEST-PANIC", 60000));
    sleep(15); /* stats go stale after stale_seconds */
    int moves_dead;
    direction_changes(daemon_log, &moves_dead);
    sleep(8);
    int moves_later;
    direction_changes(daemon_log, &moves_later);
    fprintf(stderr, "guest panic: %d balloon moves before it went stale, %d after\n", moves_dead,
            moves_later - moves_dead);
    if (moves_later != moves_dead)
        dump(daemon_log);
    ck_assert_msg(moves_later == moves_dead, "ballooned a dead guest %d times", moves_later - moves_dead);
    ck_assert(guest_vm_alive(&vm)); /* QEMU is fine, the guest is not */
    ck_assert_int_eq(kill(daemon_pid, 0), 0);
    ck_assert_int_eq(stop_daemon(), 0);
    guest_vm_stop(&vm);
}
END_TEST

/* Host reclaim enabled, no swap anywhere: said once, nothing paged out. */
START_TEST(host_reclaim_without_swap)
{
    if (test_have_swap())
        CHECK_SKIP("this machine has swap of its own");
    make_workdir("noswap");
    guest_vm vm;
    guest_vm_opts o = { .mem_mib = 512, .append = "membal.report=1 membal.run=wss:200:20" };
    ck_assert(guest_vm_start(&vm, &o) == 0);
    cleanup_register("kill -9 %d 2>/dev/null", (int)vm.pid);
    ck_assert(guest_vm_wait_console(&vm, "WSS ready", 120000));
    char qmp[400];
    snprintf(qmp, sizeof(qmp), "--qmp '%s'", vm.qmp_path);
    start_daemon_ex("[balancer]\ntick = 1\nstats_period = 1\n"
                 "[watermarks]\nmin = 99%\nlow = 99.5%\nhigh = 99.8%\n"
                 "[guests]\ndefault_floor_percent = 100\n"
                 "[host_reclaim]\nenabled = true\nscan_interval = 1\n",
                 qmp, true);
    ck_assert_msg(wait_log("the host has no swap", 30), "no warning about missing swap");
    sleep(6);
    ck_assert_int_eq(test_count_lines(daemon_log, "the host has no swap"), 1);
    ck_assert_int_eq(test_count_lines(daemon_log, "to host swap"), 0);
    ck_assert_int_eq(stop_daemon(), 0);
    guest_vm_stop(&vm);
}
END_TEST

/* ---- a stopped QEMU and a QEMU that never accepts (fake QMP) ---- */

static pid_t spawn_fake_qemu(const char *dir, int n, int first)
{
    char exe[400], nbuf[8], fbuf[8], log[400];
    snprintf(exe, sizeof(exe), "%s/build/tests/fake_qemu", test_top());
    snprintf(nbuf, sizeof(nbuf), "%d", n);
    snprintf(fbuf, sizeof(fbuf), "%d", first);
    snprintf(log, sizeof(log), "%s.log", dir);
    mkdir(dir, 0700);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(log, "w", stdout))
            _exit(127);
        execl(exe, exe, dir, nbuf, "1024", fbuf, (char *)NULL);
        _exit(127);
    }
    cleanup_register("kill -CONT %d 2>/dev/null; kill -9 %d 2>/dev/null", (int)pid, (int)pid);
    ck_assert_msg(test_wait_line(log, "ready", 10), "fake_qemu did not start");
    return pid;
}

START_TEST(stopped_qemu_delays_nobody)
{
    make_workdir("stop");
    char a[250], b[250], deaf[100], qmp[2000];
    snprintf(a, sizeof(a), "%s/a", workdir);
    snprintf(b, sizeof(b), "%s/b", workdir);
    pid_t fa = spawn_fake_qemu(a, 3, 0), fb = spawn_fake_qemu(b, 1, 3);
    /* a QMP socket whose listener never accepts, its backlog already full */
    snprintf(deaf, sizeof(deaf), "%.80s/deaf.sock", workdir);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0), cfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", deaf);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(lfd, 0), 0);
    ck_assert_int_eq(connect(cfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    snprintf(qmp, sizeof(qmp), "--verbose --qmp '%s/fake-00.sock' --qmp '%s/fake-01.sock' --qmp '%s/fake-02.sock' "
             "--qmp '%s/fake-00.sock' --qmp '%s'", a, a, a, b, deaf);
    /* bare: the tick times are what is measured */
    start_daemon_ex("[balancer]\ntick = 1\nstats_period = 1\n"
                    "[watermarks]\nmin = 1%\nlow = 99%\nhigh = 99.5%\n", qmp, true);
    ck_assert_msg(wait_log("guest fake-03", 15), "fake-03 not managed");
    ck_assert_msg(wait_log("listen backlog is full", 10), "the deaf socket was not reported");
    sleep(2);

    /* one of four QEMUs stops: the others are sampled and ballooned every tick */
    int from = test_count_lines(daemon_log, "");
    ck_assert_int_eq(kill(fb, SIGSTOP), 0);
    sleep(6);
    int ticks = 0;
    double worst = test_longest_tick(daemon_log, from, &ticks);
    fprintf(stderr, "with fake-03 stopped: %d ticks in 6 s, the longest %.3f s\n", ticks, worst);
    ck_assert_int_ge(ticks, 5);
    ck_assert_msg(worst <= 0.35, "a tick took %.3f s with one QEMU stopped", worst);
    ck_assert(wait_log("QEMU has not answered for 5 s", 1));
    char *log = slurp(daemon_log);
    int others_missed = 0;
    for (char *p = log; (p = strstr(p, ": no stats this tick")); p++)
        others_missed += strncmp(p - 7, "fake-03", 7) != 0;
    g_free(log);
    ck_assert_int_eq(others_missed, 0);
    double t0 = mono();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "'%s/build/balancerctl' --socket '%s/ctl.sock' status >/dev/null", test_top(), workdir);
    ck_assert_int_eq(test_run("%s", cmd), 0);
    ck_assert_msg(mono() - t0 < 1.0, "balancerctl took %.2f s", mono() - t0);

    /* it continues: picked up again */
    ck_assert_int_eq(kill(fb, SIGCONT), 0);
    ck_assert_msg(wait_log("QEMU answers again", 5), "the continued QEMU was not picked up");

    /* stopped again, SIGTERM still ends balancerd at once */
    ck_assert_int_eq(kill(fb, SIGSTOP), 0);
    sleep(2);
    t0 = mono();
    ck_assert_int_eq(stop_daemon(), 0);
    double took = mono() - t0;
    fprintf(stderr, "SIGTERM with a stopped QEMU: exited in %.2f s\n", took);
    ck_assert_msg(took < 2.0, "balancerd took %.2f s to exit", took);
    kill(fb, SIGCONT);
    kill(fa, SIGTERM);
    kill(fb, SIGTERM);
    waitpid(fa, NULL, 0);
    waitpid(fb, NULL, 0);
    close(cfd);
    close(lfd);
}
END_TEST

/* A --qmp socket nobody listens on yet is a VM not started: connecting
 * fails at once, so it is tried every tick (a backoff, meant for QEMUs that
 * answer badly, kept it unmanaged for up to a minute after its start). */
START_TEST(qemu_started_after_balancerd_is_managed_at_once)
{
    make_workdir("late");
    char a[250], qmp[400];
    snprintf(a, sizeof(a), "%s/a", workdir);
    snprintf(qmp, sizeof(qmp), "--qmp '%s/fake-00.sock'", a);
    start_daemon("[balancer]\ntick = 1\nstats_period = 1\n"
                 "[watermarks]\nmin = 1%\nlow = 99%\nhigh = 99.5%\n", qmp);
    ck_assert_msg(wait_log("no QEMU listens", 10), "the absent socket was not reported");
    /* a listener that never greets (another client holds the monitor):
     * said on its own, although "no QEMU listens" was said before */
    mkdir(a, 0700);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.90s/fake-00.sock", a);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(lfd, 8), 0);
    ck_assert_msg(wait_log("another client may hold the monitor", 10), "a silent QEMU was not reported");
    close(lfd);
    unlink(sa.sun_path);
    sleep(7); /* past the 5 s backoff the silence earned, and absent again */
    pid_t fa = spawn_fake_qemu(a, 1, 0);
    double t0 = mono();
    bool managed = wait_log("guest fake-00 (", 10);
    double took = mono() - t0;
    fprintf(stderr, "a QEMU started after balancerd: managed %.1f s after its socket appeared\n", took);
    ck_assert_msg(managed && took <= 4.0, "managed %s %.1f s after the QEMU started", managed ? "only" : "not even",
                  took);
    ck_assert_int_eq(test_count_lines(daemon_log, "no QEMU listens"), 1);
    ck_assert_int_eq(stop_daemon(), 0);
    kill(fa, SIGTERM);
    waitpid(fa, NULL, 0);
}
END_TEST

/* systemd starts balancerd with a soft open-file limit of 1024, fewer
 * than a thousand guests' sockets and /proc files need: it raises the
 * soft limit to the hard one at start.  Here from 32, over 40 QEMUs (a
 * socket and /proc files each).  Bare: valgrind keeps the limits to
 * itself. */
START_TEST(guests_past_the_soft_fd_limit_are_all_managed)
{
    make_workdir("fds");
    char a[250];
    snprintf(a, sizeof(a), "%s/a", workdir);
    pid_t fa = spawn_fake_qemu(a, 40, 0);
    GString *qmp = g_string_new("--verbose");
    for (int i = 0; i < 40; i++)
        g_string_append_printf(qmp, " --qmp '%s/fake-%02d.sock'", a, i);
    test_daemon_prefix = "prlimit --nofile=32:";
    start_daemon_ex("[balancer]\ntick = 1\nstats_period = 1\n"
                    "[watermarks]\nmin = 1%\nlow = 99%\nhigh = 99.5%\n", qmp->str, true);
    test_daemon_prefix = NULL;
    g_string_free(qmp, TRUE);
    ck_assert_msg(wait_log("open files: soft limit raised from 32 to", 10), "the raise was not said");
    ck_assert_msg(wait_log("guest fake-39 (", 15), "fake-39 not managed");
    sleep(3); /* sampled, their /proc files open */
    ck_assert_int_eq(test_count_lines(daemon_log, ": now managed"), 40);
    ck_assert_int_eq(test_count_lines(daemon_log, "Too many open files"), 0);
    ck_assert_int_eq(test_count_lines(daemon_log, "skipping this tick"), 0);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "'%s/build/balancerctl' --socket '%s/ctl.sock' status >/dev/null", test_top(), workdir);
    ck_assert_int_eq(test_run("%s", cmd), 0);
    ck_assert_int_eq(stop_daemon(), 0);
    kill(fa, SIGTERM);
    waitpid(fa, NULL, 0);
}
END_TEST

int main(void)
{
    if (geteuid() != 0 || !guest_vm_qemu_available()) {
        fprintf(stderr, "\n*** SKIPPED: fault tests need root and qemu-system-x86_64 ***\n\n");
        return CHECK_SKIP_ALL;
    }
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("real_faults");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, host_pressure_spike);
    tcase_add_test(tc, host_cgroup_vanishes);
    tcase_add_test(tc, guest_kernel_panics);
    tcase_add_test(tc, host_reclaim_without_swap);
    tcase_add_test(tc, stopped_qemu_delays_nobody);
    tcase_add_test(tc, qemu_started_after_balancerd_is_managed_at_once);
    tcase_add_test(tc, guests_past_the_soft_fd_limit_are_all_managed);
    suite_add_tcase(s, tc);
    cleanup_init();
    int rc = check_run_suite(s, CK_FORK);
    cleanup_run_all();
    return rc;
}

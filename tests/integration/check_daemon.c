/*
 * balancerd end to end: against a real libvirtd running the test guest
 * (policy from `virsh metadata`, changed live), and against a bare QEMU
 * through --qmp.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "guest_vm.h"
#include "qmp.h"

#define MIB (1024ULL * 1024ULL)
#define URI "https://membal.dev/xmlns/policy/1"

static char workdir[200];
static char domname[64];
static char daemon_log[300];
static pid_t daemon_pid;

static const char *top(void)
{
    const char *t = getenv("MEMBAL_TOP");
    return t && *t ? t : ".";
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static bool log_has(const char *needle)
{
    FILE *f = fopen(daemon_log, "r");
    if (!f)
        return false;
    char line[2048];
    bool hit = false;
    while (!hit && fgets(line, sizeof(line), f))
        hit = strstr(line, needle) != NULL;
    fclose(f);
    return hit;
}

static int count_log(const char *needle)
{
    FILE *f = fopen(daemon_log, "r");
    if (!f)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static bool wait_log(const char *needle, int seconds)
{
    for (int i = 0; i < seconds * 10; i++) {
        if (log_has(needle))
            return true;
        usleep(100 * 1000);
    }
    return false;
}

static void start_daemon(const char *config, const char *extra)
{
    snprintf(daemon_log, sizeof(daemon_log), "%s/balancerd.log", workdir);
    daemon_pid = fork();
    ck_assert_int_ge(daemon_pid, 0);
    if (daemon_pid == 0) {
        char cmd[2048];
        /* MEMBAL_DAEMON_WRAPPER (make check sets valgrind) runs the daemon
         * under a checker whose failure shows up as a non-zero exit */
        const char *wrap = getenv("MEMBAL_DAEMON_WRAPPER");
        snprintf(cmd, sizeof(cmd), "exec %s '%s/build/balancerd' --config '%s' %s >'%s' 2>&1",
                 wrap ? wrap : "", top(), config, extra, daemon_log);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
}

static int stop_daemon(void)
{
    if (daemon_pid <= 0)
        return -1;
    kill(daemon_pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100; i++) {
        if (waitpid(daemon_pid, &status, WNOHANG) == daemon_pid) {
            daemon_pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(100 * 1000);
    }
    kill(daemon_pid, SIGKILL);
    waitpid(daemon_pid, &status, 0);
    daemon_pid = 0;
    return -1;
}

static void dump_log(void)
{
    fprintf(stderr, "---- balancerd log ----\n");
    run("cat '%s' >&2", daemon_log);
    fprintf(stderr, "-----------------------\n");
}

/* ---- libvirt ---- */

static virConnectPtr conn;

static void quiet_libvirt(void *opaque, virErrorPtr e)
{
    (void)opaque;
    (void)e;
}
static char libvirtd_started[512];

static void libvirt_teardown(void)
{
    stop_daemon();
    if (conn) {
        virDomainPtr d = virDomainLookupByName(conn, domname);
        if (d) {
            virDomainDestroy(d);
            virDomainFree(d);
        }
        virConnectClose(conn);
        conn = NULL;
    }
    if (strncmp(libvirtd_started, "started", 7) == 0)
        run("'%s/tests/integration/libvirtd-down.sh' %s", top(), libvirtd_started + 7);
    if (workdir[0] && !getenv("MEMBAL_KEEP_VM"))
        run("rm -rf '%s'", workdir);
    libvirtd_started[0] = '\0';
    workdir[0] = '\0';
}

static void libvirt_setup(void)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "'%s/tests/integration/libvirtd-up.sh'", top());
    atexit(libvirt_teardown); /* also after a failed assertion */
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char *got = fgets(libvirtd_started, sizeof(libvirtd_started), p);
    ck_assert_msg(pclose(p) == 0 && got, "libvirtd did not come up");
    libvirtd_started[strcspn(libvirtd_started, "\n")] = '\0';
    virSetErrorFunc(NULL, quiet_libvirt);
    conn = virConnectOpen("qemu:///system");
    ck_assert_ptr_nonnull(conn);
}

static uint64_t actual_bytes(virDomainPtr d)
{
    virDomainInfo info;
    ck_assert_int_eq(virDomainGetInfo(d, &info), 0);
    return (uint64_t)info.memory * 1024;
}

static bool wait_actual(virDomainPtr d, uint64_t want, int seconds)
{
    for (int i = 0; i < seconds * 5; i++) {
        if (actual_bytes(d) == want)
            return true;
        usleep(200 * 1000);
    }
    return false;
}

static void set_policy(const char *xml)
{
    ck_assert_int_eq(run("virsh -q -c qemu:///system metadata %s --uri %s --key balancer "
                         "--set '%s' --live >/dev/null", domname, URI, xml), 0);
}

START_TEST(libvirt_metadata_drives_balloon)
{
    libvirt_setup();
    /* libvirt relabels and chowns what it boots: give it copies */
    snprintf(workdir, sizeof(workdir), "/var/lib/libvirt/images/membal-test-%d", (int)getpid());
    snprintf(domname, sizeof(domname), "membal-test-%d", (int)getpid());
    ck_assert_int_eq(run("mkdir -p '%s' && cp '%s/build/guest/vmlinuz' '%s/build/guest/initramfs.gz' '%s/'",
                         workdir, top(), top(), workdir), 0);
    char xml[4096], path[280];
    snprintf(xml, sizeof(xml),
             "<domain type='qemu'><name>%s</name>"
             "<memory unit='MiB'>512</memory><currentMemory unit='MiB'>512</currentMemory>"
             "<vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type>"
             "<kernel>%s/vmlinuz</kernel><initrd>%s/initramfs.gz</initrd>"
             "<cmdline>console=ttyS0 panic=-1 nokaslr tsc=unstable quiet membal.report=2</cmdline></os>"
             "<on_poweroff>destroy</on_poweroff><on_crash>destroy</on_crash>"
             "<devices><serial type='file'><source path='%s/serial.log'/><target port='0'/></serial>"
             "<memballoon model='virtio'><stats period='1'/></memballoon></devices></domain>",
             domname, workdir, workdir, workdir);
    virDomainPtr d = virDomainCreateXML(conn, xml, 0);
    ck_assert_msg(d != NULL, "virDomainCreateXML: %s", virGetLastErrorMessage());
    snprintf(path, sizeof(path), "%s/serial.log", workdir);
    guest_vm probe = { .pid = 0 };
    snprintf(probe.serial_path, sizeof(probe.serial_path), "%s", path);
    ck_assert_msg(guest_vm_wait_console(&probe, "MEMBAL-GUEST-READY", 90000), "guest did not boot");

    set_policy("<policy min=\"384MiB\" priority=\"high\"/>");

    /* host "below low" on purpose: watermarks far above what is free */
    char conf[512];
    snprintf(conf, sizeof(conf), "%s/balancer.conf", workdir);
    write_file(conf, "[balancer]\ntick = 1\nstats_period = 1\n"
                     "[watermarks]\nmin = 1%\nlow = 99%\nhigh = 99.5%\n");
    start_daemon(conf, "--connect qemu:///system");
    ck_assert_msg(wait_log("now managed", 15), "daemon did not pick up the guest");

    /* split-lru reclaims the idle guest's free memory down to its floor */
    if (!wait_actual(d, 384 * MIB, 60)) {
        dump_log();
        ck_abort_msg("balloon at %llu MiB, expected the 384 MiB floor",
                     (unsigned long long)(actual_bytes(d) / MIB));
    }
    ck_assert(log_has("reclaim: guest free memory"));

    /* raise the floor live: the metadata-change event gives memory back */
    set_policy("<policy min=\"448MiB\"/>");
    if (!wait_actual(d, 448 * MIB, 30)) {
        dump_log();
        ck_abort_msg("balloon at %llu MiB after raising min to 448 MiB",
                     (unsigned long long)(actual_bytes(d) / MIB));
    }
    ck_assert(wait_log("policy metadata changed", 5));
    ck_assert(log_has("below floor: raised to min"));

    /* mode=off: the daemon leaves an operator's setting alone */
    set_policy("<policy mode=\"off\" min=\"448MiB\"/>");
    ck_assert(wait_log("mode=off", 10));
    ck_assert_int_eq(virDomainSetMemoryFlags(d, 500 * 1024, VIR_DOMAIN_AFFECT_LIVE), 0);
    ck_assert(wait_actual(d, 500 * MIB, 30));
    sleep(4);
    ck_assert_uint_eq(actual_bytes(d), 500 * MIB);

    /* invalid metadata is rejected with a clear log line; mode=off stays */
    set_policy("<policy min=\"2GiB\" max=\"1GiB\"/>");
    ck_assert(wait_log("policy metadata rejected: min (2147483648 bytes) is greater than max", 10));
    ck_assert(log_has("keeping the previous policy (mode=off"));
    sleep(3);
    ck_assert_uint_eq(actual_bytes(d), 500 * MIB);

    /* back to auto: reclaim resumes toward the floor */
    set_policy("<policy min=\"400MiB\"/>");
    if (!wait_actual(d, 400 * MIB, 60)) {
        dump_log();
        ck_abort_msg("balloon at %llu MiB, expected 400 MiB", (unsigned long long)(actual_bytes(d) / MIB));
    }

    /* libvirtd restarts under us (only when this test started it): the
     * daemon reconnects, re-reads the policy and follows the next change */
    if (strncmp(libvirtd_started, "started", 7) == 0) {
        virDomainFree(d);
        virConnectClose(conn);
        conn = NULL;
        ck_assert_int_eq(run("kill $(cat /run/membal-test-libvirtd.pid); "
                             "while [ -e /run/membal-test-libvirtd.pid ] && "
                             "kill -0 $(cat /run/membal-test-libvirtd.pid) 2>/dev/null; do sleep 0.1; done"), 0);
        ck_assert(wait_log("libvirt connection closed", 20));
        char cmd[512], line[256] = "";
        snprintf(cmd, sizeof(cmd), "'%s/tests/integration/libvirtd-up.sh'", top());
        FILE *p = popen(cmd, "r");
        ck_assert(fgets(line, sizeof(line), p) != NULL);
        ck_assert_int_eq(pclose(p), 0);
        conn = virConnectOpen("qemu:///system");
        ck_assert_ptr_nonnull(conn);
        d = virDomainLookupByName(conn, domname);
        ck_assert_ptr_nonnull(d);
        for (int i = 0; i < 150 && count_log("connected to qemu:///system") < 2; i++)
            usleep(100 * 1000);
        ck_assert_int_ge(count_log("connected to qemu:///system"), 2);
        set_policy("<policy min=\"448MiB\"/>");
        if (!wait_actual(d, 448 * MIB, 30)) {
            dump_log();
            ck_abort_msg("after the libvirtd restart: %llu MiB, expected 448 MiB",
                         (unsigned long long)(actual_bytes(d) / MIB));
        }
    }

    /* the guest going away is noticed through the lifecycle event */
    virDomainDestroy(d);
    virDomainFree(d);
    ck_assert(wait_log("gone", 10));
    ck_assert_int_eq(stop_daemon(), 0);
    libvirt_teardown();
}
END_TEST

/* ---- bare QEMU through --qmp ---- */

START_TEST(qmp_mode_reclaims_to_floor)
{
    snprintf(workdir, sizeof(workdir), "/tmp/membal-daemon-%d", (int)getpid());
    mkdir(workdir, 0700);
    guest_vm vm;
    guest_vm_opts o = { .mem_mib = 512, .append = "membal.report=1" };
    ck_assert(guest_vm_start(&vm, &o) == 0);
    char conf[512];
    snprintf(conf, sizeof(conf), "%s/balancer.conf", workdir);
    write_file(conf, "[balancer]\ntick = 1\nstats_period = 1\n"
                     "[watermarks]\nmin = 1%\nlow = 99%\nhigh = 99.5%\n"
                     "[guests]\ndefault_floor_min = 320MiB\ndefault_floor_percent = 10\n");
    char extra[512];
    snprintf(extra, sizeof(extra), "--qmp '%s' --ticks 14", vm.qmp_path);
    start_daemon(conf, extra);
    int status = 0;
    ck_assert_int_eq(waitpid(daemon_pid, &status, 0), daemon_pid);
    daemon_pid = 0;
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    qmp_error err;
    qmp_conn *c = qmp_connect_unix(vm.qmp_path, 5000, &err);
    ck_assert_msg(c != NULL, "%s", err.msg);
    uint64_t actual = 0;
    ck_assert_int_eq(qmp_query_balloon(c, &actual, 5000, &err), 0);
    if (actual != 320 * MIB)
        dump_log();
    ck_assert_uint_eq(actual, 320 * MIB);
    qmp_close(c);
    guest_meminfo m;
    ck_assert_int_eq(guest_vm_last_meminfo(&vm, &m), 0);
    ck_assert_int_lt(m.total_kb, 320 * 1024);
    guest_vm_stop(&vm);
    run("rm -rf '%s'", workdir);
}
END_TEST

START_TEST(bad_config_is_refused_clearly)
{
    snprintf(workdir, sizeof(workdir), "/tmp/membal-daemon-%d", (int)getpid());
    mkdir(workdir, 0700);
    char conf[512], cmd[1024], out[1024] = "";
    snprintf(conf, sizeof(conf), "%s/bad.conf", workdir);
    write_file(conf, "[balancer]\ntick = 1\n\n[watermarks]\nlow = lots\n");
    snprintf(cmd, sizeof(cmd), "'%s/build/balancerd' --config '%s' --once 2>&1", top(), conf);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    ck_assert_int_eq(WEXITSTATUS(rc), 1);
    ck_assert_msg(strstr(out, "bad.conf:5: [watermarks] low = \"lots\"") != NULL, "%s", out);
    run("rm -rf '%s'", workdir);
}
END_TEST

int main(void)
{
    if (!guest_vm_qemu_available()) {
        fprintf(stderr, "\n*** SKIPPED: qemu-system-x86_64 is not installed ***\n\n");
        return 77;
    }
    Suite *s = suite_create("daemon");
    TCase *tc = tcase_create("end_to_end");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, bad_config_is_refused_clearly);
    tcase_add_test(tc, qmp_mode_reclaims_to_floor);
    tcase_add_test(tc, libvirt_metadata_drives_balloon);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

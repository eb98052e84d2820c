/*
 * Scan cost of host reclaim on a synthetic guest: a child process maps
 * --gib GiB of anonymous "guest RAM" and touches --touch percent of it
 * (non-zero data, every page of the touched chunks); this process opens it
 * as host reclaim does and runs --scans rounds of scan + settle (no
 * pageouts: the cost of finding cold memory, not of swapping it) with one
 * cold-page source:
 *   probe   the probe scanner (probes are paged out only if there is swap)
 *   damon   DAMON's side in balancerd only, on a fake sysfs tree (nobody's
 *           kdamond runs: its CPU is not measured; every chunk is judged
 *           as DAMON would with no regions yet)
 * It prints one line: source, GiB, touched GiB, scans, CPU seconds per
 * scan per GiB of guest RAM for scan and settle, and the peak RSS this
 * process gained over the rounds (VmHWM after, minus VmRSS before open).
 *
 * Built against one revision's libbalancer.a by bench/scan_cost/run.sh
 * (which compares revisions); it uses only host_reclaim.h's whole-round
 * calls, whose signatures did not change when scans became incremental.
 */
#include <errno.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "reclaim/host_reclaim.h"
#include "util/small_file.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long status_kb(const char *key)
{
    g_autofree char *s = small_file_read("/proc/self/status", 16384);
    const char *p = s ? strstr(s, key) : NULL;
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void mkdirs(const char *dir, const char *sub)
{
    g_autofree char *p = g_strdup_printf("%s/%s", dir, sub);
    if (g_mkdir_with_parents(p, 0700) < 0) {
        perror(p);
        exit(2);
    }
}

/* A DAMON admin directory nobody's kdamond owns, under dir. */
static void fake_damon(const char *dir)
{
    const char *subs[] = { "kdamonds/0/contexts/0/monitoring_attrs/intervals",
                           "kdamonds/0/contexts/0/monitoring_attrs/nr_regions",
                           "kdamonds/0/contexts/0/schemes/0/access_pattern/sz",
                           "kdamonds/0/contexts/0/schemes/0/access_pattern/nr_accesses",
                           "kdamonds/0/contexts/0/schemes/0/access_pattern/age",
                           "kdamonds/0/contexts/0/schemes/0/tried_regions" };
    for (size_t i = 0; i < G_N_ELEMENTS(subs); i++)
        mkdirs(dir, subs[i]);
    for (int i = 0; i < 500; i++) {
        g_autofree char *r = g_strdup_printf("kdamonds/0/contexts/0/targets/0/regions/%d", i);
        mkdirs(dir, r);
    }
    g_autofree char *kd = g_strdup_printf("%s/kdamonds", dir);
    g_autofree char *c0 = g_strdup_printf("%s/kdamonds/0/contexts/0", dir);
    if (small_file_write_at(kd, "nr_kdamonds", "0") || small_file_write_at(c0, "avail_operations", "paddr")) {
        perror(dir);
        exit(2);
    }
}

/* The synthetic guest (the child): bytes of THP-backed RAM, touch % of
 * its chunks touched, spread over the mapping; says ready on fd, then
 * waits to be killed. */
static void __attribute__((noreturn)) synthetic_guest(uint64_t bytes, uint64_t chunk, unsigned touch, int fd)
{
    char *ram = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ram == MAP_FAILED)
        _exit(2);
    madvise(ram, bytes, MADV_HUGEPAGE);
    /* every (100/touch)-th chunk touched: spread over the mapping */
    uint64_t every = touch ? 100 / touch : 0;
    for (uint64_t c = 0; every && c < bytes / chunk; c++)
        if (c % every == 0)
            for (uint64_t i = c * chunk; i < (c + 1) * chunk; i += 4096)
                ram[i] = (char)(1 + (i >> 12) % 127);
    char ok = 1;
    if (write(fd, &ok, 1) != 1)
        _exit(3);
    pause();
    _exit(0);
}

/* The cold source by name (probe, or DAMON over a fake sysfs in dir). */
static cold_source *source_new(const char *source, const char *dir)
{
    if (strcmp(source, "damon"))
        return cold_source_probe_new(2);
    fake_damon(dir);
    damon_params dp;
    damon_params_default(&dp);
    g_autoptr(GError) err = NULL;
    g_autofree char *ledger = g_strdup_printf("%s/kdamond.ledger", dir);
    cold_source *src = cold_source_damon_new(dir, ledger, &dp, &err);
    if (!src)
        fprintf(stderr, "%s\n", err->message);
    return src;
}

/* scans scans of g; the CPU of the steady ones (the first is blind:
 * nothing armed) added to *scan_cpu and *settle_cpu. */
static void scan_steady(cold_source *src, reclaim_guest *g, unsigned scans, double *scan_cpu, double *settle_cpu)
{
    reclaim_guest *gs[1] = { g };
    for (unsigned s = 0; s < scans; s++) {
        double c0 = cpu_now();
        bool failed = false;
        g_autoptr(GError) serr = NULL;
        host_reclaim_scan(src, gs, 1, NULL, (uint64_t)s * 1000000 + 1, &failed, &serr);
        double c1 = cpu_now();
        host_reclaim_settle(src, gs, 1);
        double c2 = cpu_now();
        if (s > 0) {
            *scan_cpu += c1 - c0;
            *settle_cpu += c2 - c1;
        }
    }
}

int main(int argc, char **argv)
{
    unsigned gib = 16, touch = 25, scans = 5;
    const char *source = "probe";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--gib"))
            gib = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--touch"))
            touch = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--scans"))
            scans = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--source"))
            source = argv[i + 1];
        else {
            fprintf(stderr, "usage: scan_cost [--gib N] [--touch PERCENT] [--scans N] [--source probe|damon]\n");
            return 2;
        }
    }
    uint64_t bytes = (uint64_t)gib << 30, chunk = RECLAIM_CHUNK_BYTES;
    int p[2];
    if (pipe(p) < 0)
        return 2;
    pid_t pid = fork();
    if (pid == 0)
        synthetic_guest(bytes, chunk, touch, p[1]);
    close(p[1]);
    char ok;
    if (read(p[0], &ok, 1) != 1) {
        fprintf(stderr, "the synthetic guest did not start\n");
        return 1;
    }
    g_autofree char *dir = g_strdup_printf("/var/tmp/membal-scan-cost-%d", (int)getpid());
    cold_source *src = source_new(source, dir);
    if (!src)
        return 1;
    long rss0 = status_kb("VmRSS:");
    cold_tunables t;
    cold_tunables_default(&t);
    reclaim_guest g;
    g_autoptr(GError) err = NULL;
    if (reclaim_guest_open(&g, pid, bytes, &t, &err) < 0) {
        fprintf(stderr, "%s\n", err->message);
        return 1;
    }
    double scan_cpu = 0, settle_cpu = 0;
    scan_steady(src, &g, scans, &scan_cpu, &settle_cpu);
    long hwm = status_kb("VmHWM:");
    uint64_t resident = g.resident_bytes;
    reclaim_guest_close(&g);
    src->ops->destroy(src);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (!strcmp(source, "damon")) {
        g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    unsigned steady = scans > 1 ? scans - 1 : 1;
    printf("%s %u %.2f %u %.6f %.6f %.1f\n", source, gib, (double)resident / (1 << 30), steady,
           scan_cpu / steady / gib, settle_cpu / steady / gib, (double)(hwm - rss0) / 1024.0);
    return 0;
}

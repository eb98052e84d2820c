/*
 * Host-side reclaim against a real process on a host with real swap: a
 * stand-in for a QEMU process holds 256 MiB of "guest RAM" (anonymous;
 * MADV_HUGEPAGE like QEMU's for DAMON, which never splits a huge page,
 * MADV_NOHUGEPAGE for the probe scanner, which leaves huge pages alone:
 * a host without THP behind guest RAM), of which every fourth 2 MiB chunk (64 MiB)
 * is hot (touched continuously) and the rest (192 MiB) was touched once.
 * The detector and the actuator run for a number of 1-second scans with
 * each cold-page source (our probe scanner, then DAMON when the kernel has
 * it); then pagemap says how much of the cold set went to swap, how much
 * of the hot set did, and the process's own getrusage() says how many
 * major faults its hot loop took.  A swapfile is created (and removed)
 * when the machine has no swap.
 *
 * The numbers go to stdout and to $MEMBAL_RESULTS (if set) for the bench
 * report.
 */
#include <check.h>

#include "check_run.h"
#include <errno.h>
#include <stdarg.h>
#include <glib.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/small_file.h"
#include "cleanup.h"
#include "reclaim/host_reclaim.h"
#include "reclaim/memcg_reclaim.h"
#include "reclaim/host_swap.h"
#include "config/config.h"
#include "host/pressure.h"
#include "reclaim/protect_ledger.h"
#include "reclaim/qemu_memcg.h"
#include "core/balancer.h"
#include "test_util.h"

#undef MIB /* policy.h (through core/balancer.h) has its own, unsigned long long */
#define MIB ((uint64_t)1024 * 1024)
#define RAM (256 * MIB)
#define CHUNK RECLAIM_CHUNK_BYTES
#define N_CHUNKS (RAM / CHUNK)
#define HOT_EVERY 4
#define HOT_BYTES (RAM / HOT_EVERY)
#define COLD_BYTES (RAM - HOT_BYTES)
#define SCANS 14
#define DAMON_ADMIN "/sys/kernel/mm/damon/admin"

static bool is_hot(size_t chunk) { return chunk % HOT_EVERY == 0; }
/* A second set of chunks, in two of the tests: */
typedef enum {
    SET_NONE,
    SET_WARM,   /* every page touched every WARM_PERIOD seconds */
    SET_SPARSE, /* SPARSE_PAGES pages spread over the chunk, touched all the time */
} second_set;
static bool is_warm(size_t chunk) { return chunk % HOT_EVERY == 2; }
#define WARM_PERIOD 5
#define WARM_BYTES (RAM / HOT_EVERY)
#define SPARSE_PAGES 16
#define SPARSE_STRIDE (CHUNK / 4096 / SPARSE_PAGES)
static bool is_sparse_page(size_t page) { return page % SPARSE_STRIDE == 0; }

typedef struct {
    uint64_t passes;
    long majflt;
} child_report;

/* The "guest": touch everything once, then the hot chunks forever,
 * reporting progress and major faults through the pipe. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void __attribute__((noreturn)) run_guest(int wfd, second_set set, bool thp)
{
    /* 2 MiB aligned, as QEMU aligns guest RAM: each chunk can be one
     * huge page (kernels before 6.7 do not align a large mmap by
     * themselves) */
    char *map = mmap(NULL, RAM + CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        _exit(2);
    char *ram = (char *)(((uintptr_t)map + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1));
    if (ram > map)
        munmap(map, (size_t)(ram - map));
    munmap(ram + RAM, (size_t)(map + CHUNK - ram));
    madvise(ram, RAM, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    /* non-zero data: the kernel maps all-zero pages of an underused huge
     * page to the shared zero page, and those are nothing to reclaim */
    for (size_t i = 0; i < RAM; i += 4096)
        ram[i] = (char)(1 + (i >> 12) % 127);
    child_report r = { 0, 0 };
    if (write(wfd, &r, sizeof(r)) != sizeof(r))
        _exit(3);
    double warm_at = now_s();
    for (;;) {
        if (set == SET_WARM && now_s() - warm_at >= WARM_PERIOD) {
            warm_at = now_s();
            for (size_t c = 0; c < N_CHUNKS; c++)
                if (is_warm(c))
                    for (size_t i = c * CHUNK; i < (c + 1) * CHUNK; i += 4096)
                        ram[i]++;
        }
        for (size_t c = 0; c < N_CHUNKS; c++) {
            if (is_hot(c))
                for (size_t i = c * CHUNK; i < (c + 1) * CHUNK; i += 4096)
                    ram[i]++;
            if (set == SET_SPARSE && is_warm(c))
                for (size_t i = c * CHUNK; i < (c + 1) * CHUNK; i += 4096 * SPARSE_STRIDE)
                    ram[i]++;
        }
        r.passes++;
        if (r.passes % 4 == 0) {
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            r.majflt = ru.ru_majflt;
            if (write(wfd, &r, sizeof(r)) != sizeof(r))
                _exit(0);
        }
        usleep(20000);
    }
}

static child_report latest(int rfd, child_report last)
{
    child_report r;
    while (read(rfd, &r, sizeof(r)) == sizeof(r))
        last = r;
    return last;
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}



static char swapfile[128]; /* the one we created, "" if the machine had swap */

static void ensure_swap(void)
{
    char path[128];
    snprintf(path, sizeof(path), "/var/tmp/membal-reclaim-test-%d.swap", (int)getpid());
    int rc = test_swap_on(path);
    ck_assert_msg(rc >= 0, "cannot create a swapfile at %s", path);
    if (rc == 1)
        snprintf(swapfile, sizeof(swapfile), "%s", path);
}

static void drop_swap(void)
{
    if (!swapfile[0])
        return;
    ck_assert_int_eq(test_swap_off(swapfile), 0);
    swapfile[0] = '\0';
}

typedef struct {
    uint64_t cold_swapped, hot_swapped, warm_swapped;
    long majflt_hot_phase;   /* major faults of the hot loop in the last 5 scans */
    uint64_t probe_bytes, paged_out;
    double our_cpu, ext_cpu, wall;
    uint32_t cold_age;
    uint64_t refaults;
    uint64_t promoted, probe_back;   /* pages, summed over the scans */
    uint64_t thp_before, thp_after;  /* the stand-in's AnonHugePages */
} outcome;

static uint64_t anon_huge_bytes(pid_t pid)
{
    long long b = test_anon_huge_bytes(pid, 0);
    ck_assert_int_ge(b, 0);
    return (uint64_t)b;
}

/* warm_swapped: the second set's pages that are out (for SET_SPARSE only
 * the pages it uses; the rest of those chunks is cold). */
static void count_swapped(const reclaim_guest *g, second_set set, outcome *o)
{
    uint64_t *pm = calloc(g->ram.n_pages, sizeof(*pm));
    ck_assert_int_eq(guest_ram_pagemap(&g->ram, 0, g->ram.n_pages, pm), 0);
    size_t per = CHUNK / g->ram.page_bytes;
    o->cold_swapped = o->hot_swapped = o->warm_swapped = 0;
    for (size_t i = 0; i < g->ram.n_pages; i++)
        if (pm[i] & PM_SWAPPED) {
            if (is_hot(i / per))
                o->hot_swapped += g->ram.page_bytes;
            else if (set == SET_WARM && is_warm(i / per))
                o->warm_swapped += g->ram.page_bytes;
            else if (set == SET_SPARSE && is_warm(i / per) && is_sparse_page(i % per))
                o->warm_swapped += g->ram.page_bytes;
            else
                o->cold_swapped += g->ram.page_bytes;
        }
    free(pm);
}

/* Called before each scan (the fake kdamond below), or NULL. */
typedef void (*scan_hook)(const reclaim_guest *g);
static scan_hook before_scan;

/* What check_outcome wants of the cold set, for the sets whose cold
 * chunks are all cold (0: no such goal). */
static uint64_t cold_goal(second_set set)
{
    return set == SET_NONE ? COLD_BYTES * 9 / 10 : set == SET_WARM ? (COLD_BYTES - WARM_BYTES) * 9 / 10 : 0;
}

/* scans scans at 1 s, then, up to max_scans, more while the cold set is
 * not out yet: a busy machine (the kdamond or the stand-in short of CPU)
 * gets the time it needs, an idle one is judged as soon as it is done.
 * The hot-loop faults are those of the last 5 scans, however many ran. */
static void run_reclaim(cold_source *src, const char *label, second_set set, bool thp, int scans, int max_scans,
                        outcome *o)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(p[0]);
        run_guest(p[1], set, thp);
    }
    cleanup_register("kill -9 %d 2>/dev/null", (int)pid);
    close(p[1]);
    child_report r = { 0, 0 };
    ck_assert_int_eq(read(p[0], &r, sizeof(r)), sizeof(r)); /* all touched */
    o->thp_before = anon_huge_bytes(pid);
    fcntl(p[0], F_SETFL, O_NONBLOCK);

    cold_tunables t;
    cold_tunables_default(&t);
    reclaim_guest g;
    g_autoptr(GError) err = NULL;
    ck_assert_msg(reclaim_guest_open(&g, pid, RAM, &t, &err) == 0, "%s", err ? err->message : "");
    ck_assert_uint_eq(g.ram.bytes, RAM);
    node_map nodes;
    ck_assert_int_eq(node_map_load(&nodes, "/sys/devices/system", g.ram.page_bytes), 0);
    reclaim_guest *gs[1] = { &g };

    o->promoted = o->probe_back = 0;
    double cpu0 = cpu_seconds(), ext0 = src->ops->external_cpu_seconds(src);
    uint64_t t0 = mono_us();
    g_autofree long *majflt_at = g_new0(long, max_scans + 1);
    r = latest(p[0], r);
    majflt_at[0] = r.majflt; /* the faults of the setup are not the hot loop's */
    int s = 0;
    for (; s < max_scans; s++) {
        if (s >= scans) {
            count_swapped(&g, set, o);
            if (o->cold_swapped >= cold_goal(set))
                break;
        }
        bool failed = false;
        if (before_scan)
            before_scan(&g);
        int rc = host_reclaim_scan(src, gs, 1, &nodes, mono_us(), &failed, &err);
        ck_assert_msg(rc == 0, "%s scan %d: %s", label, s, err ? err->message : "");
        ck_assert(!failed);
        o->promoted += g.promoted_pages;
        o->probe_back += g.probe_back_pages;
        uint64_t out = reclaim_guest_pageout(&g, UINT64_MAX, -1, 0);
        if (getenv("MEMBAL_DEBUG"))
            printf("%s scan %d: resident %llu swapped %llu cold %llu paged out %llu cold_age %u budget %llu\n", label, s,
                   (unsigned long long)g.resident_bytes >> 20, (unsigned long long)g.swapped_bytes >> 20,
                   (unsigned long long)g.cold_bytes >> 20, (unsigned long long)out >> 20, g.lru.cold_age,
                   (unsigned long long)g.lru.budget_bytes >> 20);
        host_reclaim_settle(src, gs, 1);
        r = latest(p[0], r);
        majflt_at[s + 1] = r.majflt;
        usleep(1000000);
    }
    long majflt_mark = majflt_at[s >= 5 ? s - 5 : 0];
    o->wall = (double)(mono_us() - t0) / 1e6;
    /* the source's own CPU only (the sleeps cost nothing) */
    o->our_cpu = cpu_seconds() - cpu0;
    o->ext_cpu = src->ops->external_cpu_seconds(src) - ext0;
    r = latest(p[0], r);
    o->majflt_hot_phase = r.majflt - majflt_mark;
    ck_assert_uint_gt(r.passes, 100); /* the hot loop kept running */
    count_swapped(&g, set, o);
    o->thp_after = anon_huge_bytes(pid);
    o->probe_bytes = g.probe_bytes;
    o->paged_out = g.paged_out_bytes;
    o->cold_age = g.lru.cold_age;
    o->refaults = g.lru.refaults_total;

    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(p[0]);
    node_map_free(&nodes);
    reclaim_guest_close(&g);

    char line[512];
    snprintf(line, sizeof(line),
             "%-6s cold swapped %6.1f of %3llu MiB (%5.1f%%)  hot wrongly swapped %5.2f of %llu MiB  warm out %5.1f MiB  "
             "hot-loop major faults (last 5 s) %ld  refaults %" PRIu64 "  cold age %u  "
             "CPU: membal %.3f s + kernel %.3f s over %.0f s (%.2f%%), %d scans\n",
             label, o->cold_swapped / (double)MIB, (unsigned long long)(COLD_BYTES / MIB),
             100.0 * (double)o->cold_swapped / (double)COLD_BYTES, o->hot_swapped / (double)MIB,
             (unsigned long long)(HOT_BYTES / MIB), o->warm_swapped / (double)MIB, o->majflt_hot_phase, o->refaults, o->cold_age, o->our_cpu,
             o->ext_cpu, o->wall, 100.0 * (o->our_cpu + o->ext_cpu) / o->wall, s);
    fputs(line, stdout);
    fflush(stdout);
    const char *res = getenv("MEMBAL_RESULTS");
    if (res && *res) {
        FILE *f = fopen(res, "a");
        if (f) {
            fputs(line, f);
            fclose(f);
        }
    }
}

static void check_outcome(const outcome *o)
{
    /* the cold set went out ... */
    ck_assert_msg(o->cold_swapped >= COLD_BYTES * 9 / 10, "only %" PRIu64 " MiB of the cold set swapped",
                  (uint64_t)(o->cold_swapped / MIB));
    /* ... the hot set stayed: at most 2% of it is out (probe pages) */
    ck_assert_msg(o->hot_swapped <= HOT_BYTES / 50, "%" PRIu64 " KiB of the hot set swapped",
                  o->hot_swapped / 1024);
    ck_assert_uint_eq(o->refaults, 0);
}

/* run_reclaim with the probe scanner (2 probes a chunk) on real swap. */
static void run_probe(const char *label, second_set set, bool thp, int scans, int max_scans, outcome *o)
{
    ensure_swap();
    cold_source *src = cold_source_probe_new(2);
    run_reclaim(src, label, set, thp, scans, max_scans, o);
    src->ops->destroy(src);
    drop_swap();
}

START_TEST(probe_scanner_swaps_cold_keeps_hot)
{
    outcome o;
    run_probe("probe", SET_NONE, false, SCANS, 2 * SCANS, &o);
    check_outcome(&o);
    /* what comes back is probes of the hot chunks, not promotions: the
     * SLO is not charged for the monitoring */
    ck_assert_uint_eq(o.promoted, 0);
    ck_assert_uint_gt(o.probe_back, 0);
    /* each hot chunk costs at most its 2 probes per scan */
    ck_assert_int_le(o.majflt_hot_phase, (long)(2 * (HOT_BYTES / CHUNK) * 6));
    ck_assert_uint_gt(o.probe_bytes, 0);
}
END_TEST

/* The stand-in's RAM in transparent huge pages, as QEMU's usually is:
 * paging out one 4 KiB page of a huge page splits it, so the probe
 * scanner leaves such chunks alone -- nothing probed, nothing paged out,
 * the huge pages still there after as many scans as the cold set needed
 * to go out above.  (Before, the first scan split them all.) */
START_TEST(probe_never_splits_huge_pages)
{
    outcome o;
    run_probe("probe-thp", SET_NONE, true, 8, 8, &o);
    fprintf(stderr, "probe-thp: AnonHugePages %" PRIu64 " MiB before, %" PRIu64 " MiB after\n", o.thp_before / MIB,
            o.thp_after / MIB);
    /* chunks the kernel could not give a huge page are probed and paged
     * out as on a host without THP: only a nearly all-huge stand-in
     * tells */
    if (o.thp_before < RAM * 15 / 16)
        CHECK_SKIP("the stand-in got %" PRIu64 " MiB of its 256 MiB in transparent huge pages (THP off, or memory "
                   "too fragmented): too few to check", o.thp_before / MIB);
    ck_assert_uint_ge(o.thp_after + 4 * MIB, o.thp_before);
    ck_assert_uint_le(o.probe_bytes, RAM - o.thp_before);
    ck_assert_uint_le(o.cold_swapped + o.hot_swapped, RAM - o.thp_before);
}
END_TEST

/* A DAMON source on the kernel's own DAMON, NULL with the reason when it
 * is not ours to take.  Its kdamond is recorded in a ledger of the test's
 * own; a failed test's cleanup turns it off through that ledger, as the
 * unit's ExecStopPost does (never blindly: a kdamond it cannot prove is
 * the test's own is left alone). */
static cold_source *real_damon_source(GError **err)
{
    if (damon_check(DAMON_ADMIN, err) != DAMON_FREE)
        return NULL;
    static char state[128];
    snprintf(state, sizeof(state), "/var/tmp/membal-damon-state-%d", (int)getpid());
    cleanup_register("'%s/build/balancerd' --release-leftovers --state-dir '%s' >&2; rm -rf '%s'", test_top(), state,
                     state);
    g_autofree char *ledger = g_strdup_printf("%s/kdamond.ledger", state);
    damon_params dp;
    damon_params_default(&dp);
    return cold_source_damon_new(DAMON_ADMIN, ledger, &dp, err);
}

/* The same assertions as the probe case (check_outcome), with DAMON as the
 * source.  Only on a kdamond we create: a machine that booted with its own
 * (these machines may) has DAMON busy, and this case is skipped with that
 * reason; the probe case above still runs. */
START_TEST(damon_swaps_cold_keeps_hot)
{
    g_autoptr(GError) err = NULL;
    if (damon_check(DAMON_ADMIN, &err) != DAMON_FREE)
        CHECK_SKIP("%s", err->message);
    ensure_swap();
    cold_source *src = real_damon_source(&err);
    ck_assert_msg(src != NULL, "%s", err ? err->message : "");
    outcome o;
    run_reclaim(src, "damon", SET_NONE, true, SCANS, 3 * SCANS, &o);
    src->ops->destroy(src);
    drop_swap();
    check_outcome(&o);
    /* DAMON pays nothing in the guest: no probe faults */
    ck_assert_uint_eq(o.probe_bytes, 0);
    ck_assert_int_le(o.majflt_hot_phase, 16);
}
END_TEST

/*
 * DAMON's side of the source on any machine: a fake sysfs tree stands in
 * for DAMON's admin directory, and this test plays the kdamond.  Before
 * each scan it checks that the ranges the source configured cover every
 * present frame of the "guest" (the range collection is bounded and
 * joins as it goes), and writes tried_regions for those frames from what
 * it knows: the hot chunks' frames accessed, the rest idle for 200 s.
 * The cold set must go out and the hot set stay, with no probes; the
 * kernel's own DAMON is never touched.
 */
static char fake_admin[128];

static char *pathf(const char *fmt, va_list ap) G_GNUC_PRINTF(1, 0);
static char *pathf(const char *fmt, va_list ap) { return g_strdup_vprintf(fmt, ap); }

static void mkdirs(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static void mkdirs(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *path = pathf(fmt, ap);
    va_end(ap);
    ck_assert_msg(g_mkdir_with_parents(path, 0700) == 0, "mkdir %s", path);
}

static uint64_t read_u64_file(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static uint64_t read_u64_file(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *path = pathf(fmt, ap), *text = NULL;
    va_end(ap);
    ck_assert_msg(g_file_get_contents(path, &text, NULL, NULL), "%s not written", path);
    return g_ascii_strtoull(text, NULL, 10);
}

static int fake_scans, fake_regions_written;

static void fake_kdamond(const reclaim_guest *g)
{
    char ctx[256];
    snprintf(ctx, sizeof(ctx), "%s/kdamonds/0/contexts/0", fake_admin);
    g_autofree char *state = NULL, *state_path = g_strdup_printf("%s/kdamonds/0/state", fake_admin);
    if (!g_file_get_contents(state_path, &state, NULL, NULL) || strncmp(state, "off", 3) == 0)
        return; /* not started yet: the first scan collects the frames */
    uint64_t *pm = calloc(g->ram.n_pages, sizeof(*pm));
    ck_assert_int_eq(guest_ram_pagemap(&g->ram, 0, g->ram.n_pages, pm), 0);
    size_t n_ranges = read_u64_file("%s/targets/0/regions/nr_regions", ctx);
    ck_assert_uint_ge(n_ranges, 1);
    ck_assert_uint_le(n_ranges, 500); /* max_regions / 2 */
    uint64_t *rg = g_new(uint64_t, 2 * n_ranges);
    for (size_t i = 0; i < n_ranges; i++) {
        rg[2 * i] = read_u64_file("%s/targets/0/regions/%zu/start", ctx, i);
        rg[2 * i + 1] = read_u64_file("%s/targets/0/regions/%zu/end", ctx, i);
        ck_assert_uint_lt(rg[2 * i], rg[2 * i + 1]);
        if (i)
            ck_assert_uint_ge(rg[2 * i], rg[2 * i - 1]);
    }
    /* a fresh tried_regions: one region per run of contiguous frames of
     * the same kind (hot or not) */
    g_autofree char *tried = g_strdup_printf("%s/schemes/0/tried_regions", ctx);
    test_run("rm -rf '%s'", tried);
    mkdirs("%s", tried);
    size_t per = CHUNK / g->ram.page_bytes, uncovered = 0, present = 0;
    int nreg = 0;
    uint64_t run_start = 0, run_end = 0;
    bool run_hot = false;
    for (size_t i = 0; i <= g->ram.n_pages; i++) {
        bool have = i < g->ram.n_pages && (pm[i] & PM_PRESENT) && (pm[i] & PM_PFN_MASK);
        uint64_t addr = have ? (pm[i] & PM_PFN_MASK) * g->ram.page_bytes : 0;
        bool hot = have && is_hot(i / per);
        if (have) {
            present++;
            bool in = false;
            for (size_t r = 0; r < n_ranges && !in; r++)
                in = addr >= rg[2 * r] && addr < rg[2 * r + 1];
            uncovered += !in;
        }
        if (have && run_end && addr == run_end && hot == run_hot) {
            run_end += g->ram.page_bytes;
            continue;
        }
        if (run_end) {
            char reg[400], val[64];
            snprintf(reg, sizeof(reg), "%s/%d", tried, nreg++);
            mkdirs("%s", reg);
            snprintf(val, sizeof(val), "%" PRIu64, run_start);
            ck_assert_int_eq(small_file_write_at(reg, "start", val), 0);
            snprintf(val, sizeof(val), "%" PRIu64, run_end);
            ck_assert_int_eq(small_file_write_at(reg, "end", val), 0);
            ck_assert_int_eq(small_file_write_at(reg, "nr_accesses", run_hot ? "5" : "0"), 0);
            ck_assert_int_eq(small_file_write_at(reg, "age", run_hot ? "0" : "1000"), 0);
        }
        run_start = addr;
        run_end = have ? addr + g->ram.page_bytes : 0;
        run_hot = hot;
    }
    /* what was present when the kdamond (re)started is covered: pages
     * only move when they are swapped back in */
    ck_assert_msg(uncovered <= present / 10, "%zu of %zu present frames outside the monitored ranges", uncovered,
                  present);
    fake_scans++;
    fake_regions_written += nreg;
    g_free(rg);
    free(pm);
}

START_TEST(damon_source_on_a_fake_sysfs)
{
    snprintf(fake_admin, sizeof(fake_admin), "/var/tmp/membal-fake-damon-%d", (int)getpid());
    cleanup_register("rm -rf '%s'", fake_admin);
    ck_assert(test_fake_damon(fake_admin));
    g_autofree char *kd = g_strdup_printf("%s/kdamonds", fake_admin);
    g_autofree char *c0 = g_strdup_printf("%s/kdamonds/0/contexts/0", fake_admin);
    ensure_swap();
    damon_params dp;
    damon_params_default(&dp);
    g_autoptr(GError) err = NULL;
    g_autofree char *ledger = g_strdup_printf("%s/kdamond.ledger", fake_admin);
    cold_source *src = cold_source_damon_new(fake_admin, ledger, &dp, &err);
    ck_assert_msg(src != NULL, "%s", err ? err->message : "");
    ck_assert_uint_eq(read_u64_file("%s/nr_kdamonds", kd), 1);
    before_scan = fake_kdamond;
    outcome o;
    run_reclaim(src, "fake-damon", SET_NONE, true, SCANS, 2 * SCANS, &o);
    before_scan = NULL;
    g_autofree char *ops = NULL, *ops_path = g_strdup_printf("%s/operations", c0);
    ck_assert(g_file_get_contents(ops_path, &ops, NULL, NULL));
    ck_assert_str_eq(ops, "paddr");
    src->ops->destroy(src);
    ck_assert_uint_eq(read_u64_file("%s/nr_kdamonds", kd), 0); /* what we created, removed */
    ck_assert(!g_file_test(ledger, G_FILE_TEST_EXISTS));       /* and its record */
    drop_swap();
    fprintf(stderr, "fake DAMON: %d scans judged on %d regions written\n", fake_scans, fake_regions_written);
    ck_assert_int_ge(fake_scans, SCANS - 2);
    check_outcome(&o);
    ck_assert_uint_eq(o.probe_bytes, 0);
    test_run("rm -rf '%s'", fake_admin);
}
END_TEST

/* A warm set, reused every 5 s, is paged out once at the starting
 * threshold of 3 scans, refaults, and the feedback lifts the threshold
 * past its reuse distance: no endless ping-pong. */
START_TEST(refaults_lift_the_cold_age)
{
    ensure_swap();
    g_autoptr(GError) err = NULL;
    cold_source *src = real_damon_source(&err);
    if (!src)
        src = cold_source_probe_new(2);
    outcome o;
    run_reclaim(src, "warm", SET_WARM, strcmp(src->ops->name, "damon") == 0, 24, 48, &o);
    src->ops->destroy(src);
    drop_swap();
    size_t warm_chunks = WARM_BYTES / CHUNK;
    ck_assert_msg(o.refaults >= warm_chunks / 2, "only %" PRIu64 " refaults", o.refaults);
    /* what came back of them is promotions (a refault is 8 pages or more) */
    ck_assert_msg(o.promoted >= 8 * o.refaults, "%" PRIu64 " pages promoted for %" PRIu64 " refaults", o.promoted,
                  o.refaults);
    /* a round or two, not one every reuse (24 s / 5 s = 4 rounds without
     * feedback); a busy machine can stretch scans into a second round */
    ck_assert_msg(o.refaults <= warm_chunks * 2, "%" PRIu64 " refaults: the feedback did not hold",
                  o.refaults);
    ck_assert_uint_ge(o.cold_age, WARM_PERIOD);
    /* the really cold set still went out, the hot set stayed */
    ck_assert_uint_ge(o.cold_swapped, (COLD_BYTES - WARM_BYTES) * 9 / 10);
    ck_assert_uint_le(o.hot_swapped, HOT_BYTES / 50);
}
END_TEST

/* Chunks whose use is a few pages (16 of 512, spread out), touched all the
 * time: two random probes per chunk rarely land on them, so each such
 * chunk may be paged out once and come back (a refault); from then on the
 * probe scanner watches the pages that came back and keeps the chunk.  It
 * must not page the same chunks out again and again. */
START_TEST(probe_keeps_sparse_chunks_after_one_refault)
{
    outcome o;
    run_probe("sparse", SET_SPARSE, false, 20, 20, &o);
    size_t sparse_chunks = N_CHUNKS / HOT_EVERY;
    ck_assert_msg(o.refaults <= sparse_chunks, "%" PRIu64 " refaults for %zu sparse chunks: paged out again after "
                  "coming back", o.refaults, sparse_chunks);
    /* the pages they use are in, but for probes armed at the last scan */
    ck_assert_msg(o.warm_swapped <= sparse_chunks * 2 * 4096, "%" PRIu64 " KiB of the sparse chunks' used pages out",
                  o.warm_swapped / 1024);
    ck_assert_uint_le(o.hot_swapped, HOT_BYTES / 50);
    ck_assert_uint_ge(o.cold_swapped, (COLD_BYTES - WARM_BYTES) * 9 / 10);
}
END_TEST

/* No swap: pageout quietly does nothing; the scanner stays correct and
 * counts no refaults from pages that never left. */
START_TEST(no_swap_is_harmless)
{
    if (test_have_swap())
        CHECK_SKIP("this machine has swap of its own");
    cold_source *src = cold_source_probe_new(2);
    outcome o;
    run_reclaim(src, "noswap", SET_NONE, false, SCANS, SCANS, &o);
    src->ops->destroy(src);
    ck_assert_uint_eq(o.cold_swapped + o.hot_swapped, 0);
    ck_assert_uint_eq(o.refaults, 0);
}
END_TEST

/* A real memory cgroup (v2 when its memory controller is on, else v1):
 * a process alone in it is found and protected; a second process makes
 * the group shared and off limits. */
/* The root of this machine's memory controller (v2 when it has memory
 * there, else v1) into root ("" when there is none); true for v2. */
static bool memcg_root(char *root, size_t len)
{
    char *mi = NULL;
    ck_assert(g_file_get_contents("/proc/self/mountinfo", &mi, NULL, NULL));
    char v2[256], v1[256];
    memcg_mounts(mi, v2, sizeof(v2), v1, sizeof(v1));
    g_free(mi);
    char probe[300];
    snprintf(probe, sizeof(probe), "%s/cgroup.subtree_control", v2);
    char *ctl = NULL;
    bool v2mem = v2[0] && g_file_get_contents(probe, &ctl, NULL, NULL) && strstr(ctl, "memory");
    g_free(ctl);
    snprintf(root, len, "%s", v2mem ? v2 : v1);
    return v2mem;
}

START_TEST(real_memcg_protect)
{
    char root[256];
    bool v2mem = memcg_root(root, sizeof(root));
    if (!root[0])
        CHECK_SKIP("no memory cgroup controller mounted");
    char dir[400];
    snprintf(dir, sizeof(dir), "%s/membal-test-%d", root, (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    cleanup_register("rmdir '%s' 2>/dev/null", dir);
    pid_t kid = fork();
    if (kid == 0) {
        pause();
        _exit(0);
    }
    cleanup_register("kill -9 %d 2>/dev/null", (int)kid);
    char procs[450], pidtxt[16];
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
    snprintf(pidtxt, sizeof(pidtxt), "%d", (int)kid);
    ck_assert(test_put(procs, pidtxt));
    qemu_memcg m;
    ck_assert_int_eq(qemu_memcg_find(kid, &m), 0);
    ck_assert_str_eq(m.dir, dir);
    ck_assert_int_eq(m.kind, v2mem ? MEMCG_V2 : MEMCG_V1);
    ck_assert_int_eq(memcg_sole_owner(&m, kid), 1);
    char *got = NULL, *orig = NULL;
    char file[500];
    snprintf(file, sizeof(file), "%s/%s", dir, v2mem ? "memory.low" : "memory.soft_limit_in_bytes");
    ck_assert(g_file_get_contents(file, &orig, NULL, NULL));
    memcg_saved before;
    ck_assert_int_eq(memcg_save(&m, &before), 0);
    ck_assert_int_eq(memcg_protect(&m, 64 * MIB), 0);
    ck_assert(g_file_get_contents(file, &got, NULL, NULL));
    ck_assert_uint_eq(strtoull(got, NULL, 10), 64 * MIB);
    g_free(got);
    /* letting the guest go puts back what the group had ("0" on v2, v1's
     * "no soft limit" number) */
    ck_assert_int_eq(memcg_restore(&m, &before), 0);
    ck_assert(g_file_get_contents(file, &got, NULL, NULL));
    ck_assert_str_eq(got, orig);
    g_free(got);
    g_free(orig);
    /* the test process joins too: shared, so not ours to tune */
    snprintf(pidtxt, sizeof(pidtxt), "%d", (int)getpid());
    ck_assert(test_put(procs, pidtxt));
    ck_assert_int_eq(memcg_sole_owner(&m, kid), 0);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    /* back to the root group so the test group can go */
    char rootprocs[300];
    snprintf(rootprocs, sizeof(rootprocs), "%s/cgroup.procs", root);
    ck_assert(test_put(rootprocs, pidtxt));
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* principle 5 on a real cgroup: a balancerd killed with SIGKILL after it
 * wrote a QEMU group's protection leaves it recorded, and the next start
 * (balancer_release_leftovers, as `balancerd --release-leftovers`) puts
 * back what the group had. */
START_TEST(protection_left_by_a_killed_balancerd_is_put_back)
{
    char root[256];
    memcg_root(root, sizeof(root));
    if (!root[0])
        CHECK_SKIP("no memory cgroup controller mounted");
    char dir[400], state[64];
    snprintf(dir, sizeof(dir), "%s/membal-test-protect-%d", root, (int)getpid());
    snprintf(state, sizeof(state), "/run/membal-test-state-%d", (int)getpid());
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    cleanup_register("rmdir '%s' 2>/dev/null", dir);
    cleanup_register("rm -rf '%s'", state);
    char proc_cgroup[500];
    qemu_memcg m;
    snprintf(proc_cgroup, sizeof(proc_cgroup), "0::/%s\n9:memory:/%s\n", strrchr(dir, '/') + 1,
             strrchr(dir, '/') + 1);
    ck_assert_int_eq(memcg_resolve(proc_cgroup, root, root, &m), 0);
    char file[500], *orig = NULL, *got = NULL;
    snprintf(file, sizeof(file), "%s/%s", dir, memcg_protect_file(&m));
    ck_assert(g_file_get_contents(file, &orig, NULL, NULL));
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t kid = fork();
    if (kid == 0) {
        /* what host_swap.c does, then a SIGKILL before it can undo it */
        g_autofree char *path = g_build_filename(state, PROTECT_LEDGER_FILE, NULL);
        protect_ledger *pl = protect_ledger_new(path);
        memcg_saved before;
        char ok = memcg_save(&m, &before) == 0 && protect_ledger_note(pl, &m, &before, 96 * MIB, NULL) == 0 &&
                  memcg_protect(&m, 96 * MIB) == 0;
        (void)!write(p[1], &ok, 1);
        pause();
        _exit(0);
    }
    char ok = 0;
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    ck_assert(ok);
    ck_assert(g_file_get_contents(file, &got, NULL, NULL));
    ck_assert_uint_eq(strtoull(got, NULL, 10), 96 * MIB);
    g_free(got);
    /* while it runs, a second balancerd leaves its value alone */
    ck_assert_int_eq(balancer_release_leftovers(state), 0);
    ck_assert(g_file_get_contents(file, &got, NULL, NULL));
    ck_assert_uint_eq(strtoull(got, NULL, 10), 96 * MIB);
    g_free(got);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    ck_assert_int_eq(balancer_release_leftovers(state), 0);
    ck_assert(g_file_get_contents(file, &got, NULL, NULL));
    ck_assert_str_eq(got, orig);
    g_free(got);
    g_free(orig);
    g_autofree char *ledger = g_build_filename(state, PROTECT_LEDGER_FILE, NULL);
    ck_assert(!g_file_test(ledger, G_FILE_TEST_EXISTS));
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* A fresh group under this machine's memory controller root, for one
 * test: dir gets its path; v2 or v1 by the root. */
static qemu_memcg test_group(const char *tag, char *root, size_t rlen)
{
    bool v2mem = memcg_root(root, rlen);
    if (!root[0])
        return (qemu_memcg){ .kind = MEMCG_NONE };
    qemu_memcg m = { .kind = v2mem ? MEMCG_V2 : MEMCG_V1 };
    snprintf(m.dir, sizeof(m.dir), "%s/membal-test-%s-%d", root, tag, (int)getpid());
    snprintf(m.mount, sizeof(m.mount), "%s", root);
    ck_assert_int_eq(mkdir(m.dir, 0755), 0);
    cleanup_register("rmdir '%s' 2>/dev/null", m.dir);
    return m;
}

static void join_group(const qemu_memcg *m, pid_t pid)
{
    char procs[600], pidtxt[16];
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", m->dir);
    snprintf(pidtxt, sizeof(pidtxt), "%d", (int)pid);
    ck_assert(test_put(procs, pidtxt));
}

/* v1's limit, or v2's memory.max, as text */
static char *limit_text(const qemu_memcg *m)
{
    char file[600], *text = NULL;
    snprintf(file, sizeof(file), "%s/%s", m->dir, m->kind == MEMCG_V2 ? "memory.max" : MEMCG_V1_LIMIT);
    ck_assert(g_file_get_contents(file, &text, NULL, NULL));
    return text;
}

/* The group's OOM kills so far (v1 memory.oom_control, v2 memory.events). */
static long group_oom_kills(const qemu_memcg *m)
{
    char file[600], *text = NULL;
    snprintf(file, sizeof(file), "%s/%s", m->dir, m->kind == MEMCG_V2 ? "memory.events" : "memory.oom_control");
    ck_assert(g_file_get_contents(file, &text, NULL, NULL));
    const char *at = strstr(text, "oom_kill ");
    long n = at ? strtol(at + 9, NULL, 10) : 0;
    g_free(text);
    return n;
}

/* The stand-in guest (run_guest: 64 MiB hot, THP-backed as QEMU's RAM),
 * in m's group before it touches anything, so that all of it is charged
 * there; returns once everything is touched, *rfd its report pipe
 * (non-blocking). */
static pid_t guest_in_group(const qemu_memcg *m, int *rfd)
{
    int p[2], go[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char c;
        close(p[0]);
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(4);
        run_guest(p[1], SET_NONE, true);
    }
    cleanup_register("kill -9 %d 2>/dev/null", (int)pid);
    close(p[1]);
    close(go[0]);
    join_group(m, pid);
    ck_assert_int_eq(write(go[1], "x", 1), 1);
    close(go[1]);
    child_report r = { 0, 0 };
    ck_assert_int_eq(read(p[0], &r, sizeof(r)), sizeof(r)); /* all touched */
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    *rfd = p[0];
    return pid;
}

/* Issue 49: the kernel's own LRU chooses.  A THP-backed stand-in for a
 * QEMU (as QEMU maps guest RAM) alone in its cgroup, 64 MiB hot and 192
 * MiB touched once; memcg_reclaim asks for 160 MiB in steps a second
 * apart.  The kernel's LRU pages out the cold set and keeps the hot one,
 * and on v1 every step leaves the group's limit as it found it. */
START_TEST(memcg_reclaim_takes_cold_keeps_hot)
{
    char root[256];
    qemu_memcg m = test_group("memcg-reclaim", root, sizeof(root));
    if (m.kind == MEMCG_NONE)
        CHECK_SKIP("no memory cgroup controller mounted");
    ensure_swap();
    int rfd;
    pid_t pid = guest_in_group(&m, &rfd);
    child_report r = { 0, 0 };
    g_autofree char *limit0 = limit_text(&m);
    cold_tunables t;
    cold_tunables_default(&t);
    reclaim_guest g;
    g_autoptr(GError) err = NULL;
    ck_assert_msg(reclaim_guest_open(&g, pid, RAM, &t, &err) == 0, "%s", err ? err->message : "");
    char state[64];
    snprintf(state, sizeof(state), "/run/membal-test-state-%d", (int)getpid());
    cleanup_register("rm -rf '%s'", state);
    g_autofree char *ledger = g_build_filename(state, PROTECT_LEDGER_FILE, NULL);
    protect_ledger *pl = protect_ledger_new(ledger);
    memcg_step st = { 0 };
    uint64_t asked = 0, got = 0;
    for (int step = 0; step < 10 && got < 160 * MIB; step++) {
        sleep(1); /* the hot loop references its pages between steps, as a guest does */
        uint64_t one = 0;
        ck_assert_msg(memcg_reclaim(&m, 32 * MIB, pl, &st, &one, &err) == 0, "%s", err ? err->message : "");
        ck_assert(!st.pending);
        /* a step leaves nothing recorded: its limit is back */
        ck_assert(!g_file_test(ledger, G_FILE_TEST_EXISTS));
        asked += 32 * MIB;
        got += one;
        g_autofree char *limit = limit_text(&m);
        ck_assert_str_eq(limit, limit0);
    }
    sleep(1);
    r = latest(rfd, r);
    ck_assert_uint_gt(r.passes, 100); /* the hot loop kept running */
    outcome o;
    count_swapped(&g, SET_NONE, &o);
    printf("memcg  %s: asked %" PRIu64 " MiB, usage fell %" PRIu64 " MiB; cold swapped %.1f of %llu MiB, "
           "hot wrongly swapped %.2f of %llu MiB, THP %" PRIu64 " MiB left\n",
           m.kind == MEMCG_V2 ? "memory.reclaim" : "v1 limit step", asked / MIB, got / MIB,
           o.cold_swapped / (double)MIB, (unsigned long long)(COLD_BYTES / MIB), o.hot_swapped / (double)MIB,
           (unsigned long long)(HOT_BYTES / MIB), anon_huge_bytes(pid) / MIB);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(rfd);
    reclaim_guest_close(&g);
    protect_ledger_unref(pl);
    /* the kernel's LRU took what it was asked for from the cold set ... */
    ck_assert_msg(o.cold_swapped >= 128 * MIB, "only %" PRIu64 " MiB of the cold set swapped",
                  o.cold_swapped / MIB);
    /* ... and kept the hot set */
    ck_assert_msg(o.hot_swapped <= HOT_BYTES / 50, "%" PRIu64 " KiB of the hot set swapped", o.hot_swapped / 1024);
    ck_assert_int_eq(group_oom_kills(&m), 0);
    ck_assert_int_eq(rmdir(m.dir), 0);
    drop_swap();
}
END_TEST

/* A guest that allocates all through the steps (8 MiB every 10 ms,
 * touching every page, holding the last 384 MiB) is reclaimed from,
 * never OOM-killed: on v1 the lowered limit stands only between the two
 * writes, and a write the allocations keep busy ends at its time bound. */
START_TEST(a_guest_allocating_through_memcg_steps_is_not_killed)
{
    char root[256];
    qemu_memcg m = test_group("memcg-alloc", root, sizeof(root));
    if (m.kind == MEMCG_NONE)
        CHECK_SKIP("no memory cgroup controller mounted");
    ensure_swap();
    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(4);
        /* all through the test: 8 MiB touched every 10 ms, the oldest of
         * 48 (384 MiB) let go once there are that many */
        char *ring[48] = { 0 };
        for (size_t n = 0;; n++) {
            char **slot = &ring[n % 48];
            if (*slot)
                munmap(*slot, 8 * MIB);
            *slot = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (*slot == MAP_FAILED)
                _exit(2);
            for (size_t i = 0; i < 8 * MIB; i += 4096)
                (*slot)[i] = (char)(1 + i % 127);
            usleep(10000);
        }
    }
    cleanup_register("kill -9 %d 2>/dev/null", (int)pid);
    close(go[0]);
    join_group(&m, pid);
    ck_assert_int_eq(write(go[1], "x", 1), 1);
    g_autofree char *limit0 = limit_text(&m);
    g_autoptr(GError) err = NULL;
    uint64_t got = 0;
    memcg_step st = { 0 };
    usleep(300000); /* allocating by now */
    for (int step = 0; step < 40; step++) {
        uint64_t one = 0;
        ck_assert_msg(memcg_reclaim(&m, MEMCG_RECLAIM_STEP_MAX, NULL, &st, &one, &err) == 0, "%s",
                      err ? err->message : "");
        ck_assert(!st.pending);
        got += one;
        usleep(50000);
    }
    g_autofree char *limit = limit_text(&m);
    ck_assert_str_eq(limit, limit0);
    ck_assert_msg(kill(pid, 0) == 0, "the allocating guest is gone");
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, WNOHANG), 0); /* still running, not killed */
    ck_assert_int_eq(group_oom_kills(&m), 0);
    printf("memcg  allocating through 40 steps: usage fell %" PRIu64 " MiB in all, no OOM kill\n", got / MIB);
    ck_assert_uint_gt(got, 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ck_assert_int_eq(rmdir(m.dir), 0);
    drop_swap();
}
END_TEST

/* principle 5 on a real v1 cgroup: a balancerd killed between lowering a
 * group's limit and putting it back leaves it recorded, and the next
 * start puts back what the group had. */
START_TEST(a_limit_left_by_a_killed_balancerd_is_put_back)
{
    char root[256], state[64];
    qemu_memcg m = test_group("memcg-kill", root, sizeof(root));
    if (m.kind != MEMCG_V1)
        CHECK_SKIP("no cgroup v1 memory controller: no limit is lowered on v2 (memory.reclaim)");
    snprintf(state, sizeof(state), "/run/membal-test-state-%d", (int)getpid());
    cleanup_register("rm -rf '%s'", state);
    g_autofree char *limit0 = limit_text(&m);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t kid = fork();
    if (kid == 0) {
        /* memcg_reclaim's first write, then a SIGKILL before its second:
         * the group is empty, so the lower limit applies at once */
        g_autofree char *path = g_build_filename(state, PROTECT_LEDGER_FILE, NULL);
        protect_ledger *pl = protect_ledger_new(path);
        uint64_t limit = 0;
        char ok = small_file_read_u64(m.dir, MEMCG_V1_LIMIT, &limit, NULL) == 0;
        memcg_saved before = { .saved = true, .bytes = limit };
        ok = ok && protect_ledger_note_file(pl, &m, MEMCG_V1_LIMIT, &before, 64 * MIB, NULL) == 0 &&
             small_file_write_at(m.dir, MEMCG_V1_LIMIT, "67108864") == 0;
        (void)!write(p[1], &ok, 1);
        pause();
        _exit(0);
    }
    char ok = 0;
    ck_assert_int_eq(read(p[0], &ok, 1), 1);
    ck_assert(ok);
    g_autofree char *lowered = limit_text(&m);
    ck_assert_uint_eq(strtoull(lowered, NULL, 10), 64 * MIB);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    ck_assert_int_eq(balancer_release_leftovers(state), 0);
    g_autofree char *back = limit_text(&m);
    ck_assert_str_eq(back, limit0);
    g_autofree char *ledger = g_build_filename(state, PROTECT_LEDGER_FILE, NULL);
    ck_assert(!g_file_test(ledger, G_FILE_TEST_EXISTS));
    ck_assert_int_eq(rmdir(m.dir), 0);
}
END_TEST

/* One host-reclaim round through host_swap (the daemon's stage) with the
 * given host; returns when it has ended. */
static void memcg_round(host_swap *hs, host_swap_target *tg, const host_meminfo *hm, const watermarks *wm,
                        bool reclaiming)
{
    host_swap_stats before, after;
    host_swap_stats_get(hs, &before);
    host_swap_round r = { .host = hm, .wm = wm, .balloon_reclaim = 0, .reclaiming = reclaiming };
    usleep(1100000); /* scan_interval 1 s: due */
    host_swap_tick(hs, tg, 1, &r);
    for (int i = 0; i < 600; i++) {
        host_swap_stats_get(hs, &after);
        if (after.scans > before.scans)
            return;
        usleep(50000);
    }
    ck_abort_msg("the memcg round did not end within 30 s");
}

/* Issue 49, the daemon's stage: [host_reclaim] source = memcg.  A
 * stand-in QEMU alone in its cgroup (256 MiB, 64 MiB hot); the host 128
 * MiB short of its high watermark: one round reclaims about that much
 * through the group, the kernel's LRU keeping the hot set; then, with the
 * host not short, a proactive round takes Senpai's 1% (when the host's
 * own memory PSI is calm, as the stage requires). */
START_TEST(memcg_source_round_reclaims_through_the_guests_group)
{
    char root[256];
    qemu_memcg m = test_group("memcg-round", root, sizeof(root));
    if (m.kind == MEMCG_NONE)
        CHECK_SKIP("no memory cgroup controller mounted");
    ensure_swap();
    int rfd;
    pid_t pid = guest_in_group(&m, &rfd);

    char state[64];
    snprintf(state, sizeof(state), "/run/membal-test-state-%d", (int)getpid());
    cleanup_register("rm -rf '%s'", state);
    balancer_config c;
    config_defaults(&c);
    c.hr_enabled = true;
    g_free(c.hr_source);
    c.hr_source = g_strdup("memcg");
    c.hr_scan_interval = 1;
    c.hr_proactive = true;
    c.hr_max_swap_out = 256 * MIB; /* a round's allowance is max_swap_out x scan_interval: not the bound here */
    g_free(c.state_dir);
    c.state_dir = g_strdup(state);
    g_autoptr(GError) err = NULL;
    host_swap *hs = host_swap_new(&c, &err);
    ck_assert_msg(hs, "%s", err ? err->message : "");
    guest_view v = { .stats_valid = true, .actual_bytes = RAM, .max_bytes = RAM, .name = "G" };
    vm_policy_default(&v.policy);
    hswap_guest *slot = NULL;
    host_swap_target tg = { .name = "G", .qemu_pid = pid, .view = &v, .state = &slot };
    host_meminfo hm = { .host = { .total_bytes = 8192 * MIB, .available_bytes = 72 * MIB },
                        .swap_total_bytes = 1024 * MIB, .swap_free_bytes = 1024 * MIB };
    watermarks wm = { .min = 50 * MIB, .low = 100 * MIB, .high = 200 * MIB };
    memcg_round(hs, &tg, &hm, &wm, true);
    host_swap_guest_stats gs;
    ck_assert(host_swap_guest_stats_get(slot, &gs));
    uint64_t short_taken = gs.paged_out_bytes;
    reclaim_guest g;
    cold_tunables t;
    cold_tunables_default(&t);
    ck_assert_msg(reclaim_guest_open(&g, pid, RAM, &t, &err) == 0, "%s", err ? err->message : "");
    outcome o;
    count_swapped(&g, SET_NONE, &o);
    /* the host not short: proactive */
    hm.host.available_bytes = 4096 * MIB;
    double psi = -1;
    bool calm = psi_some_avg10(PSI_MEMORY_PATH, &psi) == 0 && psi < 1.0;
    uint64_t proactive_before = gs.proactive_bytes;
    memcg_round(hs, &tg, &hm, &wm, false);
    ck_assert(host_swap_guest_stats_get(slot, &gs));
    printf("memcg  round: the host 128 MiB short: %" PRIu64 " MiB through the group (cold %.1f, hot %.2f MiB "
           "swapped); then proactive: %" PRIu64 " MiB (host PSI some %.2f%%)\n",
           short_taken / MIB, o.cold_swapped / (double)MIB, o.hot_swapped / (double)MIB,
           (gs.proactive_bytes - proactive_before) / MIB, psi);
    ck_assert_msg(short_taken >= 96 * MIB && short_taken <= 160 * MIB, "%" PRIu64 " MiB for a 128 MiB shortfall",
                  short_taken / MIB);
    ck_assert_msg(o.hot_swapped <= HOT_BYTES / 50, "%" PRIu64 " KiB of the hot set swapped", o.hot_swapped / 1024);
    if (calm)
        ck_assert_msg(gs.proactive_bytes > proactive_before, "no proactive reclaim in a round with the host calm");
    ck_assert_str_eq(gs.slo, "within");
    host_swap_guest_free(slot);
    host_swap_free(hs);
    config_clear(&c);
    reclaim_guest_close(&g);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(rfd);
    ck_assert_int_eq(group_oom_kills(&m), 0);
    ck_assert_int_eq(rmdir(m.dir), 0);
    drop_swap();
}
END_TEST

/* A process_madvise that stopped early counts only the chunks it covered. */
START_TEST(partial_pageout_counts_what_was_advised)
{
    guest_ram r = { .bytes = 5 * CHUNK, .page_bytes = 4096 };
    ram_range rr[3] = { { 0, CHUNK }, { 2 * CHUNK, CHUNK }, { 4 * CHUNK, 2 * CHUNK } };
    ck_assert_uint_eq(pageout_covered(&r, rr, 3, 0), 0);
    ck_assert_uint_eq(pageout_covered(&r, rr, 3, CHUNK - 4096), 0);
    ck_assert_uint_eq(pageout_covered(&r, rr, 3, CHUNK), 1);
    ck_assert_uint_eq(pageout_covered(&r, rr, 3, 2 * CHUNK - 1), 1);
    ck_assert_uint_eq(pageout_covered(&r, rr, 3, 2 * CHUNK), 2);
    /* the last range is clipped to the RAM's end, as advised */
    ck_assert_uint_eq(pageout_covered(&r, rr, 3, 3 * CHUNK), 3);
}
END_TEST

START_TEST(maps_lookup)
{
    g_autoptr(GError) err = NULL;
    uintptr_t s;
    uint64_t len;
    const char *maps = "55d0c0000000-55d0c0100000 r-xp 00000000 fe:01 1234 /usr/bin/qemu-system-x86_64\n"
                       "7f0000000000-7f0010000000 rw-p 00000000 00:00 0 \n"
                       "7f0010000000-7f0020000000 rw-p 00000000 00:00 0\n"
                       "7f0020000000-7f0020001000 ---p 00000000 00:00 0\n"
                       "7f1000000000-7f1001000000 rw-p 00000000 00:00 0\n"
                       "7ffd00000000-7ffd40000000 rw-p 00000000 00:00 0 [stack]\n";
    /* two adjacent halves of a split 512 MiB mapping are joined */
    ck_assert_int_eq(guest_ram_find(maps, 512 * MIB, &s, &len, &err), 0);
    ck_assert_uint_eq(s, 0x7f0000000000ULL);
    ck_assert_uint_eq(len, 512 * MIB);
    /* the smallest that fits: 16 MiB for a 16 MiB guest */
    ck_assert_int_eq(guest_ram_find(maps, 16 * MIB, &s, &len, &err), 0);
    ck_assert_uint_eq(s, 0x7f1000000000ULL);
    /* 100 MiB: only the 512 MiB run is large enough, and that is no match */
    ck_assert_int_eq(guest_ram_find(maps, 100 * MIB, &s, &len, &err), -1);
    ck_assert_ptr_nonnull(strstr(err->message, "much larger"));
    g_clear_error(&err);
    ck_assert_int_eq(guest_ram_find(maps, 2048 * MIB, &s, &len, &err), -1);
    ck_assert_ptr_nonnull(strstr(err->message, "no anonymous"));
    g_clear_error(&err);
    /* smaps: two 256 MiB runs, the resident one is the guest's RAM */
    const char *smaps = "7e0000000000-7e0010000000 rw-p 00000000 00:00 0 \n"
                        "Size:             262144 kB\nRss:                   0 kB\n"
                        "7f0000000000-7f0010000000 rw-p 00000000 00:00 0 \n"
                        "Size:             262144 kB\nRss:              200000 kB\n"
                        "7f0010000000-7f0010001000 ---p 00000000 00:00 0 \n"
                        "Size:                  4 kB\nRss:                   0 kB\n";
    ck_assert_int_eq(guest_ram_find(smaps, 256 * MIB, &s, &len, &err), 0);
    ck_assert_uint_eq(s, 0x7f0000000000ULL);
    ck_assert_uint_eq(len, 256 * MIB);
    /* an exact-size entry beats a joined run that contains it (ASan puts
     * its own mappings right next to ours) */
    const char *adjacent = "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
                           "7f0000100000-7f0010100000 rw-p 00000000 00:00 0 \n";
    ck_assert_int_eq(guest_ram_find(adjacent, 256 * MIB, &s, &len, &err), 0);
    ck_assert_uint_eq(s, 0x7f0000100000ULL);
    ck_assert_uint_eq(len, 256 * MIB);
    ck_assert_int_eq(guest_ram_find("", 1, &s, &len, &err), -1);
    g_clear_error(&err);
    ck_assert_int_eq(guest_ram_find("garbage\n\n-\n", 1, &s, &len, &err), -1);
}
END_TEST

START_TEST(node_map_fake_tree)
{
    char dir[] = "/tmp/membal-nodemap-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "cd %s && mkdir -p memory node/node0/memory0 node/node0/memory1 node/node1/memory3 "
             "node/node1/memory3x && printf 8000000 > memory/block_size_bytes",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    node_map m;
    ck_assert_int_eq(node_map_load(&m, dir, 4096), 0);
    uint64_t bp = 0x8000000 / 4096;
    ck_assert_int_eq(node_map_node_of(&m, 0), 0);
    ck_assert_int_eq(node_map_node_of(&m, bp + 5), 0);
    ck_assert_int_eq(node_map_node_of(&m, 2 * bp), -1);
    ck_assert_int_eq(node_map_node_of(&m, 3 * bp), 1);
    ck_assert_int_eq(node_map_node_of(&m, 100 * bp), -1);
    node_map_free(&m);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    /* no sysfs at all: every page unknown */
    ck_assert_int_eq(node_map_load(&m, "/nonexistent", 4096), 0);
    ck_assert_int_eq(node_map_node_of(&m, 0), -1);
    node_map_free(&m);
}
END_TEST

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "\n*** SKIPPED: host reclaim tests need root (swapon, pagemap) ***\n\n");
        return CHECK_SKIP_ALL;
    }
    Suite *s = suite_create("host_reclaim");
    TCase *tc = tcase_create("real_process");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, maps_lookup);
    tcase_add_test(tc, partial_pageout_counts_what_was_advised);
    tcase_add_test(tc, node_map_fake_tree);
    tcase_add_test(tc, real_memcg_protect);
    tcase_add_test(tc, protection_left_by_a_killed_balancerd_is_put_back);
    tcase_add_test(tc, a_limit_left_by_a_killed_balancerd_is_put_back);
    tcase_add_test(tc, memcg_reclaim_takes_cold_keeps_hot);
    tcase_add_test(tc, a_guest_allocating_through_memcg_steps_is_not_killed);
    tcase_add_test(tc, memcg_source_round_reclaims_through_the_guests_group);
    tcase_add_test(tc, no_swap_is_harmless);
    tcase_add_test(tc, probe_scanner_swaps_cold_keeps_hot);
    tcase_add_test(tc, probe_never_splits_huge_pages);
    tcase_add_test(tc, damon_swaps_cold_keeps_hot);
    tcase_add_test(tc, damon_source_on_a_fake_sysfs);
    tcase_add_test(tc, probe_keeps_sparse_chunks_after_one_refault);
    tcase_add_test(tc, refaults_lift_the_cold_age);
    suite_add_tcase(s, tc);
    cleanup_init();
    int rc = check_run_suite(s, CK_FORK);
    cleanup_run_all();
    return rc;
}

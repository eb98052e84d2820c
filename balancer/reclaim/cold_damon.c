/*
 * DAMON as the cold-page source (see cold_source.h).  One kdamond with one
 * "paddr" context watches the physical ranges that hold the guests' RAM
 * (vaddr monitoring is often not built: it is not on this host's kernel).
 * A "stat" scheme matching every region lets us read the regions with
 * their access counts and ages through tried_regions.
 *
 * The ranges come from the guests' pagemap frame numbers, joined across
 * small gaps so there are at most max_regions / 2 of them.  Pages move
 * (swap-in, compaction), so when more than a tenth of the present guest
 * pages lie outside the monitored ranges the kdamond is restarted with
 * fresh ones ("commit" does not refresh tried_regions on 6.18, a restart
 * does).  A page outside every range counts as referenced: new frames
 * were just faulted in, which is an access.
 *
 * The kdamond is recorded in a ledger (kdamond_ledger.h) before it is
 * created and whenever its thread changes, so that one left behind by a
 * balancerd that died is recognised and turned off; at start a leftover
 * the ledger proves ours is taken back first, and any other kdamond is
 * described and never written to.
 */
#include "reclaim/cold_source.h"

#include <glib.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reclaim/kdamond_ledger.h"
#include "util/error.h"
#include "util/log.h"
#include "util/small_file.h"

typedef struct {
    uint64_t start, end;      /* physical byte addresses */
    uint32_t nr_accesses;
    uint32_t age;             /* in aggregation intervals */
} damon_region;

typedef struct {
    cold_source base;
    char dir[256];            /* .../kdamonds/0 */
    char admin[200];
    char *ledger_path;        /* where the kdamond is recorded */
    kdamond_ledger ledger;
    bool created;             /* kdamonds/0 is the one we added */
    damon_params p;
    bool running;
    uint64_t started_us, last_us;
    uint64_t *ranges;         /* monitored [start,end) pairs, sorted, physical bytes */
    size_t n_ranges;
    damon_region *regions;
    size_t n_regions;
    int kdamond_pid;
    double cpu_done;          /* CPU of the kdamonds stopped before this one */
    /* this scan */
    bool blind;               /* nothing to judge by: every chunk counts as used */
    uint64_t need_us;         /* idle this long (a region's age) to count as not referenced */
    uint64_t present, outside;  /* present guest pages, and those outside the ranges */
    uint64_t *acc;            /* runs of present frames seen: [start,end) pairs, ACC_RUNS at most */
    size_t n_acc, n_acc_joined;   /* pairs in acc; the first n_acc_joined are sorted and joined */
} damon_source;

/* Runs of present frames collected per scan before they are sorted and
 * joined down to the region limit: a fixed 1 MiB, whatever guest RAM. */
#define ACC_RUNS 65536

void damon_params_default(damon_params *p)
{
    p->sample_us = 10000;
    p->aggr_us = 200000;
    p->max_regions = 1000;
}

static int wr(const char *dir, const char *file, const char *fmt, ...)
{
    char val[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(val, sizeof(val), fmt, ap);
    va_end(ap);
    return small_file_write_at(dir, file, val);
}

static int rd_u64(const char *dir, const char *file, uint64_t *out)
{
    return small_file_read_u64(dir, file, out, NULL);
}


static double kdamond_cpu(const damon_source *d);

/* The ledger follows the kdamond's thread.  -1 with the reason when it
 * cannot be written: a kdamond the ledger does not describe is one that
 * would leak after a crash. */
static int record(damon_source *d, int kdamond_pid, GError **error)
{
    d->ledger.kdamond_pid = kdamond_pid;
    return kdamond_ledger_save(d->ledger_path, &d->ledger, error);
}

static void damon_stop(damon_source *d)
{
    d->cpu_done += kdamond_cpu(d); /* the next kdamond counts from 0 */
    if (d->running) {
        wr(d->dir, "state", "off");
        g_autoptr(GError) err = NULL;
        if (record(d, 0, &err) < 0) /* (off: a stale pid only makes it look not ours) */
            log_warn("DAMON: %s", err->message);
    }
    d->running = false;
    d->kdamond_pid = 0;
}

/* The context's monitoring attributes, target ranges and stat scheme. */
static int damon_configure(damon_source *d, GError **error)
{
    char ctx[320], path[400];
    snprintf(ctx, sizeof(ctx), "%s/contexts/0", d->dir);
    const damon_params *p = &d->p;
    uint32_t min_regions = d->n_ranges > 10 ? (uint32_t)d->n_ranges : 10;
    snprintf(path, sizeof(path), "%s/targets/0/regions", ctx);
    if (wr(ctx, "operations", "paddr") || wr(ctx, "monitoring_attrs/intervals/sample_us", "%u", p->sample_us) ||
        wr(ctx, "monitoring_attrs/intervals/aggr_us", "%u", p->aggr_us) ||
        wr(ctx, "monitoring_attrs/intervals/update_us", "%u", p->aggr_us * 10) ||
        wr(ctx, "monitoring_attrs/nr_regions/min", "%u", min_regions) ||
        wr(ctx, "monitoring_attrs/nr_regions/max", "%u", p->max_regions > min_regions ? p->max_regions : min_regions) ||
        wr(ctx, "targets/nr_targets", "1") || wr(path, "nr_regions", "%zu", d->n_ranges)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON: configuring %s: %s", ctx, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < d->n_ranges; i++) {
        char reg[450];
        snprintf(reg, sizeof(reg), "%s/%zu", path, i);
        /* end first when growing past the old end keeps start < end */
        if (wr(reg, "start", "0") || wr(reg, "end", "%" PRIu64, d->ranges[2 * i + 1]) ||
            wr(reg, "start", "%" PRIu64, d->ranges[2 * i])) {
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON: region %s: %s", reg, strerror(errno));
            return -1;
        }
    }
    char sch[400];
    snprintf(sch, sizeof(sch), "%s/schemes/0", ctx);
    if (wr(ctx, "schemes/nr_schemes", "1") || wr(sch, "action", "stat") ||
        wr(sch, "access_pattern/sz/min", "0") || wr(sch, "access_pattern/sz/max", "%" PRIu64, UINT64_MAX) ||
        wr(sch, "access_pattern/nr_accesses/min", "0") ||
        wr(sch, "access_pattern/nr_accesses/max", "%u", UINT32_MAX) || wr(sch, "access_pattern/age/min", "0") ||
        wr(sch, "access_pattern/age/max", "%u", UINT32_MAX)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON: scheme %s: %s", sch, strerror(errno));
        return -1;
    }
    return 0;
}

static int cmp_range(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool covered(const damon_source *d, uint64_t addr)
{
    size_t lo = 0, hi = d->n_ranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (addr < d->ranges[2 * mid])
            hi = mid;
        else if (addr >= d->ranges[2 * mid + 1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* Sort r [start,end) pairs, merge the overlapping and adjacent ones, then
 * join across the smallest gaps until at most limit remain.  Returns the
 * count left. */
static size_t join_ranges(uint64_t *rg, size_t r, size_t limit)
{
    qsort(rg, r, 2 * sizeof(*rg), cmp_range);
    size_t w = 0;
    for (size_t i = 0; i < r; i++) {
        if (w && rg[2 * i] <= rg[2 * w - 1]) {
            if (rg[2 * i + 1] > rg[2 * w - 1])
                rg[2 * w - 1] = rg[2 * i + 1];
        } else {
            rg[2 * w] = rg[2 * i];
            rg[2 * w + 1] = rg[2 * i + 1];
            w++;
        }
    }
    r = w;
    while (r > limit) {
        /* smallest gap as the join threshold, doubling until enough go */
        uint64_t min_gap = UINT64_MAX;
        for (size_t i = 1; i < r; i++)
            if (rg[2 * i] - rg[2 * i - 1] < min_gap)
                min_gap = rg[2 * i] - rg[2 * i - 1];
        for (uint64_t thr = min_gap; r > limit; thr *= 2) {
            w = 0;
            for (size_t i = 0; i < r; i++) {
                if (w && rg[2 * i] - rg[2 * w - 1] <= thr) {
                    rg[2 * w - 1] = rg[2 * i + 1];
                } else {
                    rg[2 * w] = rg[2 * i];
                    rg[2 * w + 1] = rg[2 * i + 1];
                    w++;
                }
            }
            r = w;
        }
    }
    return r;
}

static size_t range_limit(const damon_source *d) { return d->p.max_regions / 2 ? d->p.max_regions / 2 : 1; }

/* One run of present frames [start, end) in bytes.  A full buffer is
 * joined down to the limit, which keeps the collection at ACC_RUNS pairs
 * however many runs the guests' RAM has. */
static void acc_add(damon_source *d, uint64_t start, uint64_t end)
{
    if (d->n_acc > d->n_acc_joined && d->acc[2 * d->n_acc - 1] == start) {
        d->acc[2 * d->n_acc - 1] = end;
        return;
    }
    if (d->n_acc == ACC_RUNS)
        d->n_acc = d->n_acc_joined = join_ranges(d->acc, d->n_acc, range_limit(d));
    d->acc[2 * d->n_acc] = start;
    d->acc[2 * d->n_acc + 1] = end;
    d->n_acc++;
}

/* Monitor what this scan collected. */
static int damon_start(damon_source *d, uint64_t now_us, GError **error)
{
    damon_stop(d);
    size_t r = join_ranges(d->acc, d->n_acc, range_limit(d));
    g_free(d->ranges);
    d->ranges = g_memdup2(d->acc, (r ? r : 1) * 2 * sizeof(*d->acc));
    d->n_ranges = r;
    if (!d->n_ranges) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON: no present guest pages to monitor");
        return -1;
    }
    if (damon_configure(d, error) < 0)
        return -1;
    if (wr(d->dir, "state", "on")) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON: starting kdamond: %s", strerror(errno));
        return -1;
    }
    d->running = true;
    d->started_us = now_us;
    uint64_t pid = 0;
    d->kdamond_pid = rd_u64(d->dir, "pid", &pid) == 0 ? (int)pid : 0;
    if (record(d, d->kdamond_pid, error) < 0) {
        /* not left running undescribed */
        wr(d->dir, "state", "off");
        d->running = false;
        d->kdamond_pid = 0;
        return -1;
    }
    return 0;
}

static int cmp_region(const void *a, const void *b)
{
    const damon_region *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int read_regions(damon_source *d, GError **error)
{
    if (wr(d->dir, "state", "update_schemes_tried_regions")) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON: update_schemes_tried_regions: %s", strerror(errno));
        return -1;
    }
    char tried[400];
    snprintf(tried, sizeof(tried), "%s/contexts/0/schemes/0/tried_regions", d->dir);
    DIR *dir = opendir(tried);
    if (!dir) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON: %s: %s", tried, strerror(errno));
        return -1;
    }
    d->n_regions = 0;
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        char *end;
        unsigned long idx = strtoul(de->d_name, &end, 10);
        if (*end || end == de->d_name)
            continue;
        char reg[480];
        snprintf(reg, sizeof(reg), "%s/%lu", tried, idx);
        damon_region r;
        uint64_t acc, age;
        if (rd_u64(reg, "start", &r.start) || rd_u64(reg, "end", &r.end) || rd_u64(reg, "nr_accesses", &acc) ||
            rd_u64(reg, "age", &age) || r.end <= r.start)
            continue;
        r.nr_accesses = acc > UINT32_MAX ? UINT32_MAX : (uint32_t)acc;
        r.age = age > UINT32_MAX ? UINT32_MAX : (uint32_t)age;
        if (d->n_regions == cap) {
            cap = cap ? cap * 2 : 256;
            d->regions = g_renew(damon_region, d->regions, cap);
        }
        d->regions[d->n_regions++] = r;
    }
    closedir(dir);
    qsort(d->regions, d->n_regions, sizeof(*d->regions), cmp_region);
    return 0;
}

static const damon_region *region_of(const damon_source *d, uint64_t addr)
{
    size_t lo = 0, hi = d->n_regions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (addr < d->regions[mid].start)
            hi = mid;
        else if (addr >= d->regions[mid].end)
            lo = mid + 1;
        else
            return &d->regions[mid];
    }
    return NULL;
}

/* A scan starts: the regions DAMON has now, and how long a region must
 * have been idle to count as unreferenced.  Until DAMON runs (or when
 * its regions cannot be read), every resident chunk counts as used and
 * the scan collects the frames to monitor. */
static int damon_begin(cold_source *s, uint64_t now_us, GError **error)
{
    damon_source *d = (damon_source *)s;
    d->present = d->outside = 0;
    d->n_acc = d->n_acc_joined = 0;
    d->blind = !d->running;
    if (d->running && read_regions(d, error) < 0) {
        damon_stop(d);
        d->blind = true;
        return -1;
    }
    /* A region idle for the whole interval since the last scan (or since
     * the start, less two aggregations of warm-up) was not referenced. */
    uint64_t since_last = now_us - d->last_us, since_start = now_us - d->started_us;
    uint64_t warm = 2ULL * d->p.aggr_us;
    d->need_us = since_last;
    if (since_start < since_last + warm)
        d->need_us = since_start > warm ? since_start - warm : 0;
    /* the regions were read now: an access after this shows at the next
     * scan, however long this one takes */
    d->last_us = now_us;
    return 0;
}

static void damon_observe(cold_source *s, cold_target *t, size_t c, const uint64_t *pm, size_t n)
{
    damon_source *d = (damon_source *)s;
    uint64_t page = t->ram->page_bytes;
    /* a paged-out chunk is judged by what comes back (refaults), not by
     * the pages that stayed behind */
    bool judge = !t->obs[c].referenced && t->lru->chunks[c].list != CHUNK_EVICTED;
    for (size_t i = 0; i < n; i++) {
        uint64_t pfn = pm[i] & PM_PFN_MASK;
        if (!(pm[i] & PM_PRESENT) || !pfn)
            continue;
        acc_add(d, pfn * page, (pfn + 1) * page);
        d->present++;
        bool in = d->running && covered(d, pfn * page);
        d->outside += !in;
        if (!judge)
            continue;
        const damon_region *r = in && !d->blind ? region_of(d, pfn * page) : NULL;
        /* a frame outside every region was just faulted in: an access */
        if (!r || r->nr_accesses > 0 || (uint64_t)r->age * d->p.aggr_us < d->need_us) {
            t->obs[c].referenced = true;
            judge = false;
        }
    }
}

/* Pages move (swap-in, compaction): when more than a tenth of the
 * present guest pages lie outside the monitored ranges, the kdamond is
 * restarted with this scan's frames. */
static int damon_end(cold_source *s, uint64_t now_us, GError **error)
{
    damon_source *d = (damon_source *)s;
    if (!d->present)
        return 0; /* no guest scanned: nothing to monitor yet */
    if (!d->running || d->outside > d->present / 10) {
        int rc = damon_start(d, now_us, error);
        d->last_us = now_us;
        return rc;
    }
    return 0;
}

static double kdamond_cpu(const damon_source *d)
{
    if (!d->kdamond_pid)
        return 0;
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d", d->kdamond_pid);
    if (small_file_read_at(path, "stat", buf, sizeof(buf)) < 0)
        return 0;
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double damon_cpu(const cold_source *s)
{
    const damon_source *d = (const damon_source *)s;
    return d->cpu_done + kdamond_cpu(d);
}

static void damon_destroy(cold_source *s)
{
    damon_source *d = (damon_source *)s;
    damon_stop(d);
    d->running = false;
    /* a kdamond that would not go stays in the ledger for the next
     * balancerd or --release-leftovers */
    if (d->ledger_path) {
        if (!d->created || kdamond_turn_off(d->admin, 0) == 0)
            ledger_forget(d->ledger_path);
        else
            log_warn("DAMON: removing the kdamond we created under %s: %s (left in %s)", d->admin, strerror(errno),
                     d->ledger_path);
    }
    g_free(d->ledger_path);
    g_free(d->ranges);
    g_free(d->regions);
    g_free(d->acc);
    g_free(d);
}

static const cold_source_ops damon_ops = {
    .name = "damon",
    .begin = damon_begin,
    .observe = damon_observe,
    .end = damon_end,
    .external_cpu_seconds = damon_cpu,
    .destroy = damon_destroy,
};

damon_state damon_check(const char *admin_dir, GError **error)
{
    uint64_t nr = 0;
    if (rd_u64(admin_dir, "kdamonds/nr_kdamonds", &nr) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "DAMON sysfs not available at %s", admin_dir);
        return DAMON_ABSENT;
    }
    if (nr != 0) {
        g_autofree char *who = kdamond_describe(admin_dir);
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE,
                    "DAMON is in use by %" PRIu64 " kdamond(s) that membal did not create (%s/kdamonds: %s); they "
                    "are not ours to touch, and DAMON's sysfs cannot add another while they exist",
                    nr, admin_dir, who);
        return DAMON_BUSY;
    }
    return DAMON_FREE;
}

/* A kdamond the ledger proves ours, left by a balancerd that is gone, is
 * turned off before DAMON is looked at; what was found is logged.  -1
 * with the reason when the ledger's kdamond is still in use, or would not
 * go. */
static int take_back_leftover(const char *ledger_path, GError **error)
{
    g_autofree char *what = NULL;
    kdamond_leftover r = kdamond_release_leftover(ledger_path, &what);
    if (r == KDAMOND_IN_USE || r == KDAMOND_FAILED) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "DAMON: %s", what);
        return -1;
    }
    if (r == KDAMOND_RELEASED)
        log_info("DAMON: %s", what);
    else if (what)
        log_warn("DAMON: %s", what);
    return 0;
}

cold_source *cold_source_damon_new(const char *admin_dir, const char *ledger_path, const damon_params *p,
                                   GError **error)
{
    if (take_back_leftover(ledger_path, error) < 0 || damon_check(admin_dir, error) != DAMON_FREE)
        return NULL;
    damon_source *d = g_new0(damon_source, 1);
    d->base.ops = &damon_ops;
    d->p = *p;
    d->acc = g_new(uint64_t, 2 * ACC_RUNS);
    snprintf(d->admin, sizeof(d->admin), "%s", admin_dir);
    snprintf(d->dir, sizeof(d->dir), "%s/kdamonds/0", admin_dir);
    /* recorded before it exists: a balancerd killed at any later point
     * leaves a kdamond the ledger names */
    kdamond_ledger_init(&d->ledger, admin_dir, 0, p->sample_us, p->aggr_us);
    if (kdamond_ledger_save(ledger_path, &d->ledger, error) < 0) {
        damon_destroy(&d->base);
        return NULL;
    }
    d->ledger_path = g_strdup(ledger_path);
    char ops[256] = "";
    d->created = wr(admin_dir, "kdamonds/nr_kdamonds", "1") == 0;
    if (d->created) { /* which directory is ours, before anything is written into it */
        kdamond_ledger_note_dir(&d->ledger);
        if (kdamond_ledger_save(ledger_path, &d->ledger, error) < 0) {
            damon_destroy(&d->base);
            return NULL;
        }
    }
    if (!d->created || wr(d->dir, "contexts/nr_contexts", "1") ||
        small_file_read_at(d->dir, "contexts/0/avail_operations", ops, sizeof(ops)) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON: setting up a kdamond under %s: %s", admin_dir,
                    strerror(errno));
        damon_destroy(&d->base);
        return NULL;
    }
    if (!strstr(ops, "paddr")) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "DAMON here has no physical-address monitoring (operations: %s)", ops);
        damon_destroy(&d->base);
        return NULL;
    }
    return &d->base;
}

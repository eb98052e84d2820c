/* The host-reclaim stage of a tick; see host_swap.h. */
#include "host_swap.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "balancer.h"
#include "host_reclaim.h"
#include "log.h"
#include "mono_clock.h"
#include "qemu_memcg.h"
#include "size_parse.h"

#define DAMON_ADMIN_DIR "/sys/kernel/mm/damon/admin"
#define REOPEN_SCANS 10          /* retry a guest that could not be opened */
#define PROTECT_SLACK (16ULL << 20)

typedef struct hswap_guest {
    reclaim_guest rg;
    bool open;
    int pid;
    uint64_t retry_scan;         /* scan number of the next open attempt */
    char error[256];             /* why it is not open, logged once */
    qemu_memcg cg;
    bool cg_own;                 /* the cgroup holds this QEMU alone */
    uint64_t protected_bytes;
} hswap_guest;

typedef struct host_swap {
    cold_source *src;
    node_map nodes;
    int64_t next_scan_ms;
    uint64_t scans, scan_errors, paged_out_bytes;
    double cpu_seconds;
    bool warned_no_swap;
    char last_error[256];
} host_swap;

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void guest_close(hswap_guest *h)
{
    if (h->open)
        reclaim_guest_close(&h->rg);
    h->open = false;
}

void host_swap_guest_release(struct guest *g)
{
    if (!g->hswap)
        return;
    guest_close(g->hswap);
    g_free(g->hswap);
    g->hswap = NULL;
}

void host_swap_teardown(balancer *b)
{
    for (guint i = 0; b->guests && i < b->guests->len; i++)
        host_swap_guest_release(g_ptr_array_index(b->guests, i));
    host_swap *hs = b->hswap;
    if (!hs)
        return;
    if (hs->src)
        hs->src->ops->destroy(hs->src);
    node_map_free(&hs->nodes);
    g_free(hs);
    b->hswap = NULL;
}

int host_swap_setup(balancer *b, char **err)
{
    host_swap_teardown(b);
    if (!b->cfg.hr_enabled)
        return 0;
    host_swap *hs = g_new0(host_swap, 1);
    const char *want = b->cfg.hr_source;
    char why[256] = "";
    if (strcmp(want, "probe") != 0) {
        damon_params dp;
        damon_params_default(&dp);
        hs->src = cold_source_damon_new(DAMON_ADMIN_DIR, &dp, why, sizeof(why));
        if (!hs->src && strcmp(want, "damon") == 0) {
            *err = g_strdup_printf("[host_reclaim] source = damon: %s", why);
            g_free(hs);
            return -1;
        }
    }
    if (!hs->src) {
        hs->src = cold_source_probe_new(b->cfg.hr_probes);
        if (why[0])
            log_info("host reclaim: DAMON not usable (%s); using the probe scanner", why);
    }
    node_map_load(&hs->nodes, "/sys/devices/system", 4096);
    b->hswap = hs;
    log_info("host reclaim: enabled, %s source, scan every %u s, cold after %u-%u scans, up to %llu MiB per guest "
             "per scan",
             hs->src->ops->name, b->cfg.hr_scan_interval, b->cfg.hr_min_cold_age, b->cfg.hr_max_cold_age,
             (unsigned long long)(b->cfg.hr_max_per_scan >> 20));
    return 0;
}

static void tunables(const balancer *b, cold_tunables *t)
{
    cold_tunables_default(t);
    t->min_cold_age = b->cfg.hr_min_cold_age;
    t->max_cold_age = b->cfg.hr_max_cold_age;
    t->max_budget_bytes = b->cfg.hr_max_per_scan;
    t->min_budget_bytes = b->cfg.hr_min_per_scan;
}

/* Open (or re-open after QEMU restarted) what we scan of g. */
static bool ensure_open(balancer *b, guest *g, uint64_t scan)
{
    hswap_guest *h = g->hswap;
    if (!h)
        h = g->hswap = g_new0(hswap_guest, 1);
    int pid = b->backend->qemu_pid ? b->backend->qemu_pid(b, g) : -1;
    if (h->open && pid == h->pid)
        return true;
    guest_close(h);
    if (scan < h->retry_scan)
        return false;
    char err[256];
    if (pid <= 0) {
        snprintf(err, sizeof(err), "QEMU's pid is not known");
    } else if (!g->view.max_bytes) {
        snprintf(err, sizeof(err), "guest memory size not known yet");
    } else {
        cold_tunables t;
        tunables(b, &t);
        if (reclaim_guest_open(&h->rg, pid, g->view.max_bytes, &t, err, sizeof(err)) == 0) {
            h->open = true;
            h->pid = pid;
            h->error[0] = '\0';
            h->cg_own = qemu_memcg_find(pid, &h->cg) == 0 && memcg_sole_owner(&h->cg, pid) == 1;
            log_info("guest %s: host reclaim scans %llu MiB of guest RAM in QEMU pid %d%s%s", g->name,
                     (unsigned long long)(h->rg.ram.bytes >> 20), pid, h->cg_own ? ", cgroup " : "",
                     h->cg_own ? h->cg.dir : "");
            return true;
        }
    }
    if (strcmp(err, h->error) != 0)
        log_warn("guest %s: no host reclaim: %s", g->name, err);
    snprintf(h->error, sizeof(h->error), "%s", err);
    h->retry_scan = scan + REOPEN_SCANS;
    return false;
}

static bool may_page_out(const guest *g)
{
    const guest_view *v = &g->view;
    return !v->thrashing && v->policy.mode != VM_MODE_OFF && !v->policy.protect;
}

/* Streaming guests first, then whoever has the most cold memory. */
static int giving_order(const void *a, const void *b)
{
    const guest *x = *(guest *const *)a, *y = *(guest *const *)b;
    if (x->view.streaming != y->view.streaming)
        return x->view.streaming ? -1 : 1;
    uint64_t cx = x->hswap->rg.cold_bytes, cy = y->hswap->rg.cold_bytes;
    return cx > cy ? -1 : cx < cy;
}

static uint64_t page_out(guest **order, size_t n, uint64_t want, int node)
{
    uint64_t done = 0;
    for (size_t i = 0; i < n && done < want; i++) {
        guest *g = order[i];
        reclaim_guest *rg = &g->hswap->rg;
        uint64_t got = reclaim_guest_pageout(rg, want - done, node);
        if (!got)
            continue;
        done += got;
        char sz[32];
        size_format(got, sz, sizeof(sz));
        log_info("guest %s: paged %s of cold memory out to host swap%s (idle >= %u scans)", g->name, sz,
                 node >= 0 ? " from a short node" : "", rg->lru.cold_age);
    }
    return done;
}

static void protect_working_sets(balancer *b, guest **all, size_t n)
{
    if (!b->cfg.hr_protect)
        return;
    for (size_t i = 0; i < n; i++) {
        hswap_guest *h = all[i]->hswap;
        if (!h->cg_own)
            continue;
        uint64_t hot = h->rg.resident_bytes > h->rg.cold_bytes ? h->rg.resident_bytes - h->rg.cold_bytes : 0;
        uint64_t diff = hot > h->protected_bytes ? hot - h->protected_bytes : h->protected_bytes - hot;
        if (diff < PROTECT_SLACK)
            continue;
        if (memcg_protect(&h->cg, hot) == 0)
            h->protected_bytes = hot;
        else
            log_warn("guest %s: cannot protect its working set in %s: %m", all[i]->name, h->cg.dir);
    }
}

/* How much the host (or node) is short of its high watermark once this
 * tick's balloon moves land; 0 unless it is below low. */
static uint64_t shortfall(uint64_t avail, uint64_t low, uint64_t high, uint64_t coming)
{
    if (avail >= low)
        return 0;
    avail += coming;
    return avail < high ? high - avail : 0;
}

void host_swap_tick(balancer *b, uint64_t balloon_reclaim)
{
    host_swap *hs = b->hswap;
    if (!hs)
        return;
    int64_t now = mono_ms();
    if (now < hs->next_scan_ms)
        return;
    hs->next_scan_ms = now + (int64_t)b->cfg.hr_scan_interval * 1000;
    double cpu0 = cpu_now();
    uint64_t scan = hs->scans++;

    size_t n = b->guests->len, k = 0;
    guest **open = g_new0(guest *, n ? n : 1);
    reclaim_guest **rgs = g_new0(reclaim_guest *, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        guest *g = g_ptr_array_index(b->guests, i);
        if (ensure_open(b, g, scan)) {
            open[k] = g;
            rgs[k++] = &g->hswap->rg;
        }
    }
    bool *failed = g_new0(bool, k ? k : 1);
    char err[256];
    if (host_reclaim_scan(hs->src, rgs, k, &hs->nodes, (uint64_t)now * 1000, failed, err, sizeof(err)) < 0) {
        hs->scan_errors++;
        if (strcmp(err, hs->last_error) != 0)
            log_warn("host reclaim: %s source: %s", hs->src->ops->name, err);
        snprintf(hs->last_error, sizeof(hs->last_error), "%s", err);
    }
    /* a guest whose QEMU went away is re-opened next scan */
    size_t live = 0;
    for (size_t i = 0; i < k; i++) {
        if (failed[i]) {
            guest_close(open[i]->hswap);
            continue;
        }
        open[live] = open[i];
        rgs[live++] = rgs[i];
    }
    k = live;

    guest **givers = g_new0(guest *, k ? k : 1);
    size_t ng = 0;
    for (size_t i = 0; i < k; i++)
        if (may_page_out(open[i]))
            givers[ng++] = open[i];
    qsort(givers, ng, sizeof(*givers), giving_order);

    bool can_swap = b->host.swap_total_bytes > 0;
    if (!can_swap && !hs->warned_no_swap && b->reclaiming)
        log_warn("host reclaim: the host has no swap; nothing can be paged out");
    hs->warned_no_swap = hs->warned_no_swap || (!can_swap && b->reclaiming);
    if (can_swap && !b->dry_run && !b->paused && ng) {
        const host_view *hv = &b->host.host;
        bool per_node = false;
        if (b->host.n_nodes > 1 && hv->total_bytes) {
            /* classzone: each node against its share of the watermarks */
            for (size_t i = 0; i < b->host.n_nodes; i++) {
                const node_meminfo *nm = &b->host.nodes[i];
                double share = (double)nm->total_bytes / (double)hv->total_bytes;
                uint64_t want = shortfall(nm->free_bytes + nm->file_bytes, (uint64_t)(b->wm.low * share),
                                          (uint64_t)(b->wm.high * share), (uint64_t)(balloon_reclaim * share));
                if (want) {
                    per_node = true;
                    hs->paged_out_bytes += page_out(givers, ng, want, nm->node);
                }
            }
        }
        if (!per_node) {
            uint64_t want = shortfall(hv->available_bytes, b->wm.low, b->wm.high, balloon_reclaim);
            if (want)
                hs->paged_out_bytes += page_out(givers, ng, want, -1);
        }
    }
    protect_working_sets(b, open, k);
    host_reclaim_settle(hs->src, rgs, k);
    hs->cpu_seconds += cpu_now() - cpu0;
    g_free(givers);
    g_free(failed);
    g_free(open);
    g_free(rgs);
}

void host_swap_stats_get(const balancer *b, host_swap_stats *out)
{
    memset(out, 0, sizeof(*out));
    const host_swap *hs = b->hswap;
    if (!hs)
        return;
    out->enabled = true;
    out->source = hs->src->ops->name;
    out->scans = hs->scans;
    out->scan_errors = hs->scan_errors;
    out->paged_out_bytes = hs->paged_out_bytes;
    out->cpu_seconds = hs->cpu_seconds;
    out->source_cpu_seconds = hs->src->ops->external_cpu_seconds(hs->src);
}

bool host_swap_guest_stats_get(const struct guest *g, host_swap_guest_stats *out)
{
    memset(out, 0, sizeof(*out));
    const hswap_guest *h = g->hswap;
    if (!h || !h->open)
        return false;
    out->active = true;
    out->resident_bytes = h->rg.resident_bytes;
    out->swapped_bytes = h->rg.swapped_bytes;
    out->cold_bytes = h->rg.cold_bytes;
    out->paged_out_bytes = h->rg.paged_out_bytes;
    out->probe_bytes = h->rg.probe_bytes;
    out->refaults = h->rg.lru.refaults_total;
    out->refault_bytes = h->rg.refault_bytes;
    out->cold_age_scans = h->rg.lru.cold_age;
    out->budget_bytes = h->rg.lru.budget_bytes;
    out->protected_bytes = h->protected_bytes;
    return true;
}

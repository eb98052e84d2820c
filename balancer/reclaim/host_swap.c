/* The host-reclaim stage of a tick; see host_swap.h. */
#include "reclaim/host_swap.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policies/reclaim_plan.h"
#include "reclaim/host_reclaim.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"
#include "reclaim/qemu_memcg.h"
#include "config/size_parse.h"
#include "util/small_file.h"

#define REOPEN_SCANS 10          /* retry a guest that could not be opened */
#define PROTECT_SLACK (16ULL << 20)

struct hswap_guest {
    reclaim_guest rg;
    bool open;
    int pid;
    uint64_t retry_scan;         /* scan number of the next open attempt */
    char error[256];             /* why it is not open, logged once */
    qemu_memcg cg;
    bool cg_own;                 /* the cgroup holds this QEMU alone */
    uint64_t protected_bytes;
    memcg_saved cg_before;       /* its protection before ours, put back at the end */
};

struct host_swap {
    cold_source *src;
    node_map nodes;
    cold_tunables tun;
    unsigned scan_interval;      /* seconds */
    bool protect;                /* protect_working_set */
    int64_t next_scan_ms;
    uint64_t scans, scan_errors, paged_out_bytes;
    uint64_t idle_skips;         /* scan ticks skipped for want of pressure */
    double cpu_seconds;
    bool warned_no_swap;
    char last_error[256];
};

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

void host_swap_guest_free(hswap_guest *h)
{
    if (!h)
        return;
    /* released, host reclaim reconfigured or off, or the daemon stopping:
     * the group gets back the protection it had before us */
    if (h->cg_before.saved && memcg_restore(&h->cg, &h->cg_before) < 0)
        log_warn("cannot restore %s's memory protection: %m", h->cg.dir);
    guest_close(h);
    g_free(h);
}

void host_swap_free(host_swap *hs)
{
    if (!hs)
        return;
    if (hs->src)
        hs->src->ops->destroy(hs->src);
    node_map_free(&hs->nodes);
    g_free(hs);
}

/* The capabilities host reclaim uses, by number (linux/capability.h):
 * pagemap frame numbers; a QEMU of another user (ptrace access, and its
 * /proc/PID/pagemap is mode 0400, owned by that user); process_madvise. */
static const struct { int bit; const char *name; } needed_caps[] = {
    { 21, "CAP_SYS_ADMIN" }, { 19, "CAP_SYS_PTRACE" }, { 2, "CAP_DAC_READ_SEARCH" }, { 23, "CAP_SYS_NICE" },
};

/* The capabilities of needed_caps this process lacks, space separated
 * ("" when it has them all or when /proc does not say). */
static char *missing_caps(void)
{
    g_autofree char *status = small_file_read("/proc/self/status", 16384);
    GString *out = g_string_new("");
    if (!status)
        return g_string_free(out, FALSE);
    const char *line = strstr(status, "\nCapEff:");
    unsigned long long eff = 0;
    if (!line || sscanf(line + 8, "%llx", &eff) != 1)
        return g_string_free(out, FALSE);
    for (size_t i = 0; i < G_N_ELEMENTS(needed_caps); i++)
        if (!(eff & (1ULL << needed_caps[i].bit)))
            g_string_append_printf(out, "%s%s", out->len ? " " : "", needed_caps[i].name);
    return g_string_free(out, FALSE);
}

host_swap *host_swap_new(const balancer_config *cfg, const char *damon_dir, GError **error)
{
    if (!cfg->hr_enabled)
        return NULL;
    g_autofree char *missing = missing_caps();
    if (*missing) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE,
                    "[host_reclaim] needs the capabilities CAP_SYS_ADMIN CAP_SYS_PTRACE CAP_DAC_READ_SEARCH "
                    "CAP_SYS_NICE, this "
                    "process lacks %s (under systemd: install the drop-in host-reclaim.conf from "
                    "/usr/share/doc/membal/examples/ into /etc/systemd/system/balancer.service.d/)",
                    missing);
        return NULL;
    }
    host_swap *hs = g_new0(host_swap, 1);
    cold_tunables_default(&hs->tun);
    hs->tun.min_cold_age = cfg->hr_min_cold_age;
    hs->tun.max_cold_age = cfg->hr_max_cold_age;
    hs->tun.max_budget_bytes = cfg->hr_max_per_scan;
    hs->tun.min_budget_bytes = cfg->hr_min_per_scan;
    hs->scan_interval = cfg->hr_scan_interval;
    hs->protect = cfg->hr_protect;
    const char *want = cfg->hr_source;
    g_autoptr(GError) why = NULL;
    if (strcmp(want, "probe") != 0) {
        damon_params dp;
        damon_params_default(&dp);
        hs->src = cold_source_damon_new(damon_dir, &dp, &why);
        if (!hs->src && strcmp(want, "damon") == 0) {
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "[host_reclaim] source = damon: %s",
                        why->message);
            g_free(hs);
            return NULL;
        }
    }
    if (!hs->src) {
        hs->src = cold_source_probe_new(cfg->hr_probes);
        if (why)
            log_info("host reclaim: DAMON not usable (%s); using the probe scanner", why->message);
    }
    node_map_load(&hs->nodes, "/sys/devices/system", 4096);
    log_info("host reclaim: enabled, %s source, scan every %u s, cold after %u-%u scans, up to %llu MiB per guest "
             "per scan",
             hs->src->ops->name, cfg->hr_scan_interval, cfg->hr_min_cold_age, cfg->hr_max_cold_age,
             (unsigned long long)(cfg->hr_max_per_scan >> 20));
    return hs;
}

/* Open (or re-open after QEMU restarted) what we scan of the guest. */
static bool ensure_open(host_swap *hs, host_swap_target *t, uint64_t scan)
{
    hswap_guest *h = *t->state;
    if (!h)
        h = *t->state = g_new0(hswap_guest, 1);
    int pid = t->qemu_pid;
    if (h->open && pid == h->pid)
        return true;
    guest_close(h);
    if (scan < h->retry_scan)
        return false;
    g_autoptr(GError) err = NULL;
    if (pid <= 0) {
        g_set_error(&err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "QEMU's pid is not known");
    } else if (!t->view->max_bytes) {
        g_set_error(&err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "guest memory size not known yet");
    } else if (reclaim_guest_open(&h->rg, pid, t->view->max_bytes, &hs->tun, &err) == 0) {
        h->open = true;
        h->pid = pid;
        h->error[0] = '\0';
        h->cg_own = qemu_memcg_find(pid, &h->cg) == 0 && memcg_sole_owner(&h->cg, pid) == 1;
        log_info("guest %s: host reclaim scans %llu MiB of guest RAM in QEMU pid %d%s%s", t->name,
                 (unsigned long long)(h->rg.ram.bytes >> 20), pid, h->cg_own ? ", cgroup " : "",
                 h->cg_own ? h->cg.dir : "");
        return true;
    }
    if (strcmp(err->message, h->error) != 0)
        log_warn("guest %s: no host reclaim: %s", t->name, err->message);
    snprintf(h->error, sizeof(h->error), "%s", err->message);
    h->retry_scan = scan + REOPEN_SCANS;
    return false;
}

static uint64_t page_out(host_swap_target **givers, size_t n, uint64_t want, int node)
{
    uint64_t done = 0;
    for (size_t i = 0; i < n && done < want; i++) {
        reclaim_guest *rg = &(*givers[i]->state)->rg;
        uint64_t got = reclaim_guest_pageout(rg, want - done, node);
        if (!got)
            continue;
        done += got;
        char sz[32];
        size_format(got, sz, sizeof(sz));
        log_info("guest %s: paged %s of cold memory out to host swap%s (idle >= %u scans)", givers[i]->name, sz,
                 node >= 0 ? " from a short node" : "", rg->lru.cold_age);
    }
    return done;
}

static void protect_working_sets(const host_swap *hs, host_swap_target **open, size_t n)
{
    if (!hs->protect)
        return;
    for (size_t i = 0; i < n; i++) {
        hswap_guest *h = *open[i]->state;
        if (!h->cg_own)
            continue;
        uint64_t hot = h->rg.resident_bytes > h->rg.cold_bytes ? h->rg.resident_bytes - h->rg.cold_bytes : 0;
        uint64_t diff = hot > h->protected_bytes ? hot - h->protected_bytes : h->protected_bytes - hot;
        if (diff < PROTECT_SLACK)
            continue;
        if (!h->cg_before.saved && memcg_save(&h->cg, &h->cg_before) < 0) {
            log_warn("guest %s: cannot read %s's memory protection, not touching it: %m", open[i]->name, h->cg.dir);
            h->cg_own = false;
            continue;
        }
        if (memcg_protect(&h->cg, hot) == 0)
            h->protected_bytes = hot;
        else
            log_warn("guest %s: cannot protect its working set in %s: %m", open[i]->name, h->cg.dir);
    }
}

/* Page out what reclaim_plan asks for, from the givers in its order. */
/* How much the host (and each NUMA node) is short of its low watermark
 * beyond what ballooning takes this tick: reclaim_plan_wants over this
 * round's host. */
static size_t round_wants(const host_swap_round *r, uint64_t balloon_reclaim, reclaim_want *wants)
{
    const host_meminfo *hm = r->host;
    reclaim_node nodes[HOST_MAX_NODES];
    for (size_t i = 0; i < hm->n_nodes; i++)
        nodes[i] = (reclaim_node){ hm->nodes[i].node, hm->nodes[i].total_bytes,
                                   hm->nodes[i].free_bytes + hm->nodes[i].file_bytes };
    return reclaim_plan_wants(&hm->host, r->wm, nodes, hm->n_nodes, balloon_reclaim, wants);
}

static void page_out_round(host_swap *hs, host_swap_target **open, size_t k, const host_swap_round *r)
{
    g_autofree reclaim_candidate *cand = g_new0(reclaim_candidate, k ? k : 1);
    g_autofree size_t *order = g_new0(size_t, k ? k : 1);
    for (size_t i = 0; i < k; i++)
        cand[i] = (reclaim_candidate){ open[i]->view, (*open[i]->state)->rg.cold_bytes };
    size_t ng = reclaim_plan_givers(cand, k, order);
    if (!ng)
        return;
    g_autofree host_swap_target **givers = g_new0(host_swap_target *, ng);
    for (size_t i = 0; i < ng; i++)
        givers[i] = open[order[i]];
    reclaim_want wants[HOST_MAX_NODES];
    size_t nw = round_wants(r, r->balloon_reclaim, wants);
    for (size_t i = 0; i < nw; i++)
        hs->paged_out_bytes += page_out(givers, ng, wants[i].bytes, wants[i].node);
}

bool host_swap_due(const host_swap *hs)
{
    return hs && mono_ms() >= hs->next_scan_ms;
}

void host_swap_tick(host_swap *hs, host_swap_target *t, size_t n, const host_swap_round *r)
{
    if (!host_swap_due(hs))
        return;
    int64_t now = mono_ms();
    hs->next_scan_ms = now + (int64_t)hs->scan_interval * 1000;
    /* No pressure (the host and every node above low, not reclaiming): no
     * scan at all.  The probe source's probes are pageouts the guests pay
     * for in faults; idle means idle (measured: a guest's wss lost 90% of
     * its throughput to 2 s probe scans in the no-pressure scenario). */
    reclaim_want wants[HOST_MAX_NODES];
    if (!r->reclaiming && round_wants(r, 0, wants) == 0) {
        hs->idle_skips++;
        return;
    }
    double cpu0 = cpu_now();
    uint64_t scan = hs->scans++;

    size_t k = 0;
    g_autofree host_swap_target **open = g_new0(host_swap_target *, n ? n : 1);
    g_autofree reclaim_guest **rgs = g_new0(reclaim_guest *, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        if (ensure_open(hs, &t[i], scan)) {
            open[k] = &t[i];
            rgs[k++] = &(*t[i].state)->rg;
        }
    }
    g_autofree bool *failed = g_new0(bool, k ? k : 1);
    g_autoptr(GError) err = NULL;
    if (host_reclaim_scan(hs->src, rgs, k, &hs->nodes, (uint64_t)now * 1000, failed, &err) < 0) {
        hs->scan_errors++;
        if (strcmp(err->message, hs->last_error) != 0)
            log_warn("host reclaim: %s source: %s", hs->src->ops->name, err->message);
        snprintf(hs->last_error, sizeof(hs->last_error), "%s", err->message);
    }
    /* a guest whose QEMU went away is re-opened next scan */
    size_t live = 0;
    for (size_t i = 0; i < k; i++) {
        if (failed[i]) {
            guest_close(*open[i]->state);
            continue;
        }
        open[live] = open[i];
        rgs[live++] = rgs[i];
    }
    k = live;

    bool can_swap = r->host->swap_total_bytes > 0;
    if (!can_swap && !hs->warned_no_swap && r->reclaiming)
        log_warn("host reclaim: the host has no swap; nothing can be paged out");
    hs->warned_no_swap = hs->warned_no_swap || (!can_swap && r->reclaiming);
    if (can_swap)
        page_out_round(hs, open, k, r);
    protect_working_sets(hs, open, k);
    host_reclaim_settle(hs->src, rgs, k);
    hs->cpu_seconds += cpu_now() - cpu0;
}

void host_swap_stats_get(const host_swap *hs, host_swap_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!hs)
        return;
    out->enabled = true;
    out->source = hs->src->ops->name;
    out->scans = hs->scans;
    out->scan_errors = hs->scan_errors;
    out->idle_skips = hs->idle_skips;
    out->paged_out_bytes = hs->paged_out_bytes;
    out->cpu_seconds = hs->cpu_seconds;
    out->source_cpu_seconds = hs->src->ops->external_cpu_seconds(hs->src);
}

bool host_swap_guest_stats_get(const hswap_guest *h, host_swap_guest_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!h || !h->open)
        return false;
    out->active = true;
    out->resident_bytes = h->rg.resident_bytes;
    out->swapped_bytes = h->rg.swapped_bytes;
    out->cold_bytes = h->rg.cold_bytes;
    out->paged_out_bytes = h->rg.paged_out_bytes;
    out->probe_bytes = h->rg.probe_bytes;
    out->refaults = h->rg.lru.refaults_total;
    out->refault_bytes = h->rg.lru.refault_pages_total * h->rg.ram.page_bytes;
    out->cold_age_scans = h->rg.lru.cold_age;
    out->budget_bytes = h->rg.lru.budget_bytes;
    out->protected_bytes = h->protected_bytes;
    return true;
}

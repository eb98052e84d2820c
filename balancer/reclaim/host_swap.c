/* The host-reclaim stage of a tick; see host_swap.h. */
#include "reclaim/host_swap.h"

#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host/pressure.h"
#include "policies/reclaim_plan.h"
#include "reclaim/host_reclaim.h"
#include "reclaim/kdamond_ledger.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"
#include "reclaim/protect_ledger.h"
#include "reclaim/qemu_memcg.h"
#include "config/size_parse.h"
#include "reclaim/host_swap_priv.h"
#include "util/small_file.h"

double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void guest_close(hswap_guest *h)
{
    if (h->open && !h->by_memcg)
        reclaim_guest_close(&h->rg);
    h->open = h->by_memcg = false;
}

/* The group gets back the protection it had before us, and the ledger
 * forgets it (unless the write failed: then a later balancerd tries). */
static void protection_restore(hswap_guest *h)
{
    if (!h->cg_before.saved)
        return;
    /* done, or nothing to do: the group went with its QEMU */
    bool done = memcg_restore(&h->cg, &h->cg_before) == 0 || errno == ENOENT;
    if (!done)
        log_warn("cannot restore %s's memory protection: %m", h->cg.dir);
    if (done && h->pl)
        protect_ledger_drop(h->pl, &h->cg);
    memset(&h->cg_before, 0, sizeof(h->cg_before));
    h->protected_bytes = 0;
    h->protect_cap = UINT64_MAX;
    h->protect_capped_by[0] = '\0';
}

/* The last reference went: released, host reclaim reconfigured or off, or
 * the daemon stopping. */
static void guest_clear(hswap_guest *h)
{
    /* a v1 limit step whose write-back failed: once more */
    if (h->memcg_step.pending && memcg_step_undo(&h->cg, &h->memcg_step, h->pl) < 0)
        log_warn("cannot put back %s/%s (%llu): %m; the ledger keeps it for the next balancerd", h->cg.dir,
                 MEMCG_V1_LIMIT, (unsigned long long)h->memcg_step.limit);
    protection_restore(h);
    protect_ledger_unref(h->pl);
    guest_close(h);
    g_mutex_clear(&h->lock);
}

static hswap_guest *guest_new(void)
{
    hswap_guest *h = g_atomic_rc_box_new0(hswap_guest);
    g_mutex_init(&h->lock);
    h->protect_cap = UINT64_MAX;
    h->pub.slo = reclaim_slo_name(SLO_WITHIN);
    return h;
}

void host_swap_guest_free(hswap_guest *h)
{
    if (h)
        g_atomic_rc_box_release_full(h, (GDestroyNotify)guest_clear);
}

static void job_free(round_job *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->n; i++) {
        host_swap_guest_free(j->g[i].h);
        g_free(j->g[i].name);
    }
    g_free(j->g);
    g_free(j);
}

static gpointer round_thread(gpointer data);

void host_swap_free(host_swap *hs)
{
    if (!hs)
        return;
    g_mutex_lock(&hs->lock);
    hs->stop = true;
    g_cond_broadcast(&hs->cond);
    g_mutex_unlock(&hs->lock);
    g_thread_join(hs->thread);
    job_free(hs->job);
    if (hs->src)
        hs->src->ops->destroy(hs->src);
    node_map_free(&hs->nodes);
    protect_ledger_unref(hs->pl);
    g_mutex_clear(&hs->lock);
    g_cond_clear(&hs->cond);
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

/* The cold-page source [host_reclaim] source names: NULL for memcg (no
 * source: the kernel's LRU), or with the reason. */
static bool pick_source(const balancer_config *cfg, cold_source **src, GError **error)
{
    *src = NULL;
    const char *want = cfg->hr_source;
    if (strcmp(want, "memcg") == 0)
        return true;
    g_autofree char *missing = missing_caps();
    if (*missing) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE,
                    "[host_reclaim] needs the capabilities CAP_SYS_ADMIN CAP_SYS_PTRACE CAP_DAC_READ_SEARCH "
                    "CAP_SYS_NICE, this "
                    "process lacks %s (under systemd: install the drop-in host-reclaim.conf from "
                    "/usr/share/doc/membal/examples/ into /etc/systemd/system/balancer.service.d/)",
                    missing);
        return false;
    }
    g_autoptr(GError) why = NULL;
    if (strcmp(want, "probe") != 0) {
        damon_params dp;
        damon_params_default(&dp);
        g_autofree char *ledger = g_build_filename(cfg->state_dir, KDAMOND_LEDGER_FILE, NULL);
        *src = cold_source_damon_new(cfg->damon_admin, ledger, &dp, &why);
        if (!*src && strcmp(want, "damon") == 0) {
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "[host_reclaim] source = damon: %s",
                        why->message);
            return false;
        }
    }
    if (!*src) {
        *src = cold_source_probe_new(cfg->hr_probes);
        if (why)
            log_info("host reclaim: DAMON not usable (%s); using the probe scanner", why->message);
    }
    return true;
}

host_swap *host_swap_new(const balancer_config *cfg, GError **error)
{
    if (!cfg->hr_enabled)
        return NULL;
    cold_source *src = NULL;
    if (!pick_source(cfg, &src, error))
        return NULL;
    host_swap *hs = g_new0(host_swap, 1);
    hs->src = src;
    cold_tunables_default(&hs->tun);
    hs->tun.min_cold_age = cfg->hr_min_cold_age;
    hs->tun.max_cold_age = cfg->hr_max_cold_age;
    hs->tun.max_budget_bytes = cfg->hr_max_per_scan;
    hs->tun.min_budget_bytes = cfg->hr_min_per_scan;
    hs->scan_interval = cfg->hr_scan_interval;
    hs->protect = cfg->hr_protect;
    hs->proactive = cfg->hr_proactive;
    hs->proactive_scans = (cfg->hr_proactive_age + cfg->hr_scan_interval - 1) / cfg->hr_scan_interval;
    hs->promotion_budget = cfg->hr_promotion_budget;
    hs->max_cpu = cfg->hr_max_cpu;
    hs->max_swap_out = cfg->hr_max_swap_out;
    g_autofree char *protect_path = g_build_filename(cfg->state_dir, PROTECT_LEDGER_FILE, NULL);
    hs->pl = protect_ledger_new(protect_path);
    node_map_load(&hs->nodes, "/sys/devices/system", 4096);
    g_mutex_init(&hs->lock);
    g_cond_init(&hs->cond);
    hs->thread = g_thread_new("host-reclaim", round_thread, hs);
    char rate[32];
    size_format(cfg->hr_max_swap_out, rate, sizeof(rate));
    if (!src)
        log_info("host reclaim: enabled, memcg source (each guest's own memory cgroup, the kernel's LRU choosing), "
                 "a round every %u s (at most %.0f%% of a core), up to %llu MiB per guest per round and %s/s in all; "
                 "proactive %s; promotion budget %.2f%% a minute",
                 cfg->hr_scan_interval, cfg->hr_max_cpu, (unsigned long long)(cfg->hr_max_per_scan >> 20), rate,
                 cfg->hr_proactive ? "on" : "off", cfg->hr_promotion_budget);
    else
        log_info("host reclaim: enabled, %s source, scan every %u s (at most %.0f%% of a core), cold after %u-%u scans, "
                 "up to %llu MiB per guest per scan and %s/s in all; proactive %s (idle >= %u s); promotion "
                 "budget %.2f%% of the working set per minute",
                 src->ops->name, cfg->hr_scan_interval, cfg->hr_max_cpu, cfg->hr_min_cold_age, cfg->hr_max_cold_age,
                 (unsigned long long)(cfg->hr_max_per_scan >> 20), rate, cfg->hr_proactive ? "on" : "off",
                 cfg->hr_proactive_age, cfg->hr_promotion_budget);
    return hs;
}

/* Open (or re-open after QEMU restarted) what we scan of the guest. */
static bool ensure_open(host_swap *hs, round_guest *t, uint64_t round)
{
    hswap_guest *h = t->h;
    int pid = t->pid;
    if (h->open && pid == h->pid)
        return true;
    /* another QEMU (or the same one again, after it went away): the old
     * cgroup gets back what it had, the new one is read afresh */
    protection_restore(h);
    guest_close(h);
    if (round < h->retry_round)
        return false;
    g_autoptr(GError) err = NULL;
    if (pid <= 0) {
        g_set_error(&err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "QEMU's pid is not known");
    } else if (!t->view.max_bytes) {
        g_set_error(&err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "guest memory size not known yet");
    } else if (reclaim_guest_open(&h->rg, pid, t->view.max_bytes, &hs->tun, &err) == 0) {
        h->open = true;
        h->pid = pid;
        h->error[0] = '\0';
        h->last_round_ms = 0;
        h->majflt_known = false;
        h->cg_own = qemu_memcg_find(pid, &h->cg) == 0 && memcg_sole_owner(&h->cg, pid) == 1;
        log_info("guest %s: host reclaim scans %llu MiB of guest RAM in QEMU pid %d%s%s", t->name,
                 (unsigned long long)(h->rg.ram.bytes >> 20), pid, h->cg_own ? ", cgroup " : "",
                 h->cg_own ? h->cg.dir : "");
        if (h->rg.ram.kpageflags_fd < 0 && hs->src->ops->arm) /* a source that pages out probes */
            log_warn("guest %s: /proc/kpageflags cannot be read: the probe scanner cannot tell host huge pages, "
                     "and its probes may split them", t->name);
        return true;
    }
    if (strcmp(err->message, h->error) != 0)
        log_warn("guest %s: no host reclaim: %s", t->name, err->message);
    snprintf(h->error, sizeof(h->error), "%s", err->message);
    h->retry_round = round + REOPEN_ROUNDS;
    return false;
}

/* Pause after a step that took the CPU since cpu_before, so that the
 * round stays within max_cpu of one core.  false when the daemon stops. */
bool pace(host_swap *hs, double cpu_before)
{
    double pause = (cpu_now() - cpu_before) * (100.0 / hs->max_cpu - 1.0);
    gint64 until = g_get_monotonic_time() + (gint64)(pause * 1e6);
    g_mutex_lock(&hs->lock);
    while (!hs->stop && g_cond_wait_until(&hs->cond, &hs->lock, until))
        ;
    bool go = !hs->stop;
    g_mutex_unlock(&hs->lock);
    return go;
}

typedef int (*step_fn)(host_swap *hs, reclaim_guest *g);

bool writes_held(host_swap *hs)
{
    g_mutex_lock(&hs->lock);
    bool held = hs->held;
    g_mutex_unlock(&hs->lock);
    return held;
}

void host_swap_hold(host_swap *hs, bool hold)
{
    if (!hs)
        return;
    g_mutex_lock(&hs->lock);
    hs->held = hold;
    g_mutex_unlock(&hs->lock);
}

static int scan_step(host_swap *hs, reclaim_guest *g)
{
    return reclaim_guest_scan_step(hs->src, g, &hs->nodes, RECLAIM_BATCH_CHUNKS);
}

/* The new baseline, and the probes unless writes are held (then only the
 * baseline: what the round paged out before the hold is accounted). */
static int settle_step(host_swap *hs, reclaim_guest *g)
{
    return reclaim_guest_settle_step(writes_held(hs) ? NULL : hs->src, g, RECLAIM_BATCH_CHUNKS);
}

/* A scan or a settle of one guest, a batch at a time.  0, -1 when its
 * process is gone, -2 when the daemon stops (the guest's cursor is
 * reset: the next round starts it over). */
static int run_steps(host_swap *hs, reclaim_guest *g, step_fn step)
{
    for (;;) {
        double c = cpu_now();
        int rc = step(hs, g);
        if (rc <= 0)
            return rc;
        if (!pace(hs, c)) {
            g->cursor = 0;
            return -2;
        }
    }
}

/* Page out in slices of this much, pacing between them like the scan:
 * MADV_PAGEOUT's work is done in this thread. */
#define PAGEOUT_SLICE (16ULL << 20)

/* Up to want bytes from the givers in order, each within what is left of
 * its per-scan budget this round.  *go turns false when the daemon stops. */
static uint64_t page_out(host_swap *hs, round_guest **givers, size_t n, uint64_t want, int node, uint32_t min_idle,
                         const char *why, bool *go)
{
    uint64_t done = 0;
    for (size_t i = 0; i < n && done < want && *go; i++) {
        hswap_guest *h = givers[i]->h;
        uint64_t got = 0;
        while (*go) {
            uint64_t left = h->rg.lru.budget_bytes > h->round_paged ? h->rg.lru.budget_bytes - h->round_paged : 0;
            if (min_idle) { /* proactive: only what its balloon cannot take for nothing */
                uint64_t room = reclaim_proactive_room(&givers[i]->view, reclaim_guest_ws_bytes(&h->rg),
                                                       h->rg.cold_bytes, h->rg.swapped_bytes + h->round_paged);
                left = left < room ? left : room;
            }
            uint64_t ask = want - done - got;
            ask = ask < left ? ask : left;
            ask = ask < PAGEOUT_SLICE ? ask : PAGEOUT_SLICE;
            if (!ask || writes_held(hs))
                break;
            double c = cpu_now();
            uint64_t slice = reclaim_guest_pageout(&h->rg, ask, node, min_idle);
            h->round_paged += slice;
            got += slice;
            if (!slice)
                break;
            *go = pace(hs, c);
        }
        if (!got)
            continue;
        done += got;
        if (min_idle)
            h->proactive_bytes += got;
        char sz[32];
        size_format(got, sz, sizeof(sz));
        log_info("guest %s: paged %s of cold memory out to host swap (%s%s, idle >= %u scans)", givers[i]->name, sz,
                 why, node >= 0 ? ", a short node" : "", min_idle > h->rg.lru.cold_age ? min_idle : h->rg.lru.cold_age);
    }
    return done;
}

/* What of a guest's protection its cgroup's ancestors let through, said
 * once each time it becomes capped. */
static void note_protection_cap(hswap_guest *h, const char *name)
{
    char by[sizeof(h->protect_capped_by)];
    uint64_t cap = memcg_protect_cap(&h->cg, by, sizeof(by));
    bool was_capped = h->protect_cap < h->protected_bytes;
    h->protect_cap = cap;
    snprintf(h->protect_capped_by, sizeof(h->protect_capped_by), "%s", cap < h->protected_bytes ? by : "");
    if (cap >= h->protected_bytes || was_capped)
        return;
    char want[32], got[32];
    size_format(h->protected_bytes, want, sizeof(want));
    size_format(cap, got, sizeof(got));
    log_warn("guest %s: its working set's protection (%s in %s/memory.low) takes effect only up to %s: %s has "
             "memory.low %s, and a group's protection never exceeds its parent's. Raise it (with systemd: "
             "systemctl set-property %s MemoryLow=...; README, \"Working-set protection on cgroup v2\")",
             name, want, h->cg.dir, got, by, got, strrchr(by, '/') ? strrchr(by, '/') + 1 : by);
}

static void protect_working_sets(host_swap *hs, round_guest **open, size_t n)
{
    if (!hs->protect || writes_held(hs))
        return;
    for (size_t i = 0; i < n; i++) {
        hswap_guest *h = open[i]->h;
        if (!h->cg_own)
            continue;
        uint64_t hot = reclaim_guest_ws_bytes(&h->rg);
        uint64_t diff = hot > h->protected_bytes ? hot - h->protected_bytes : h->protected_bytes - hot;
        if (diff < PROTECT_SLACK)
            continue;
        if (!h->cg_before.saved && memcg_save(&h->cg, &h->cg_before) < 0) {
            log_warn("guest %s: cannot read %s's memory protection, not touching it: %m", open[i]->name, h->cg.dir);
            h->cg_own = false;
            continue;
        }
        /* written down before it is written, so that it is put back even
         * if balancerd dies before it can do so itself */
        g_autoptr(GError) err = NULL;
        if (!h->pl)
            h->pl = protect_ledger_ref(hs->pl);
        if (protect_ledger_note(h->pl, &h->cg, &h->cg_before, hot, &err) < 0) {
            log_warn("guest %s: not protecting its working set: %s", open[i]->name, err->message);
            continue;
        }
        if (memcg_protect(&h->cg, hot) < 0) {
            log_warn("guest %s: cannot protect its working set in %s: %m", open[i]->name, h->cg.dir);
            continue;
        }
        h->protected_bytes = hot;
        note_protection_cap(h, open[i]->name);
    }
}

/* How much the host (and each NUMA node) is short of its low watermark
 * beyond what ballooning takes this tick: reclaim_plan_wants over this
 * round's host. */
size_t round_wants(const host_swap_round *r, uint64_t balloon_reclaim, reclaim_want *wants)
{
    const host_meminfo *hm = r->host;
    reclaim_node nodes[HOST_MAX_NODES];
    for (size_t i = 0; i < hm->n_nodes; i++)
        nodes[i] = (reclaim_node){ hm->nodes[i].node, hm->nodes[i].total_bytes,
                                   hm->nodes[i].free_bytes + hm->nodes[i].file_bytes };
    return reclaim_plan_wants(&hm->host, r->wm, nodes, hm->n_nodes, balloon_reclaim, wants);
}

/* The guest's SLO after this round's scan: promotions and its QEMU's
 * other major faults, averaged over a minute, against its budget. */
static void judge_slo(hswap_guest *h, const round_guest *t, bool host_short, int64_t now_ms)
{
    reclaim_guest *g = &h->rg;
    uint64_t page = g->ram.page_bytes;
    proc_stat_counts pc = { 0 };
    bool known = proc_stat_counts_read(h->pid, &pc) == 0;
    uint64_t majflt = pc.major_faults;
    double dt = h->last_round_ms ? (double)(now_ms - h->last_round_ms) / 1000.0 : 0;
    if (dt > 0) {
        h->promoted_bps = reclaim_rate_average(h->promoted_bps, (double)(g->promoted_pages * page), dt);
        h->promoted_total += g->promoted_pages * page;
        if (known && h->majflt_known && majflt >= h->majflt) {
            uint64_t ours = g->promoted_pages + g->probe_back_pages, faults = majflt - h->majflt;
            uint64_t foreign = (faults > ours ? faults - ours : 0) * page;
            h->foreign_bps = reclaim_rate_average(h->foreign_bps, (double)foreign, dt);
            h->foreign_total += foreign;
        }
    }
    h->majflt = majflt;
    h->majflt_known = known;
    h->last_round_ms = now_ms;
    uint64_t ws = reclaim_guest_ws_bytes(g);
    reclaim_slo_input in = { ws, h->promoted_bps, t->budget_percent, known ? h->foreign_bps : -1,
                             t->view.agent_fresh, t->view.agent_psi_some, host_short };
    reclaim_slo slo = reclaim_slo_judge(&in, h->slo);
    if (slo != h->slo)
        log_info("guest %s: host reclaim SLO %s (promotions %.1f KiB/s, budget %.2f%% of a %llu MiB working set a "
                 "minute = %.1f KiB/s; other major faults %.1f KiB/s%s)",
                 t->name, reclaim_slo_name(slo), h->promoted_bps / 1024, t->budget_percent,
                 (unsigned long long)(ws >> 20), t->budget_percent / 100 * (double)ws / 60 / 1024,
                 known ? h->foreign_bps / 1024 : 0.0, t->view.agent_fresh ? "; agent PSI counted" : "");
    h->slo = slo;
}

/* Who gives this round, in giving order: may give at all, and inside its
 * SLO. */
static size_t round_givers(round_guest **open, size_t k, round_guest **givers)
{
    g_autofree reclaim_candidate *cand = g_new0(reclaim_candidate, k ? k : 1);
    g_autofree size_t *order = g_new0(size_t, k ? k : 1);
    for (size_t i = 0; i < k; i++)
        cand[i] = (reclaim_candidate){ &open[i]->view, open[i]->h->rg.cold_bytes };
    size_t ng = reclaim_plan_givers(cand, k, order), n = 0;
    for (size_t i = 0; i < ng; i++)
        if (open[order[i]]->h->slo == SLO_WITHIN)
            givers[n++] = open[order[i]];
    return n;
}

/* The round's pageouts; false when the daemon stopped meanwhile. */
static bool page_out_round(host_swap *hs, round_job *j, round_guest **open, size_t k)
{
    bool go = true;
    g_autofree round_guest **givers = g_new0(round_guest *, k ? k : 1);
    size_t ng = round_givers(open, k, givers);
    uint64_t allowance = hs->max_swap_out * hs->scan_interval, done = 0;
    for (size_t i = 0; i < j->n_wants && done < allowance; i++) {
        uint64_t want = j->wants[i].bytes < allowance - done ? j->wants[i].bytes : allowance - done;
        done += page_out(hs, givers, ng, want, j->wants[i].node, 0, "the host is short", &go);
    }
    uint64_t proactive = 0;
    bool host_calm = j->host_psi_some < SLO_HOST_PSI_LIMIT;
    if (hs->proactive && host_calm && done < allowance)
        proactive = page_out(hs, givers, ng, allowance - done, -1, hs->proactive_scans, "proactive", &go);
    g_mutex_lock(&hs->lock);
    hs->paged_out_bytes += done + proactive;
    hs->proactive_bytes += proactive;
    g_mutex_unlock(&hs->lock);
    return go;
}

static void publish_guest(hswap_guest *h)
{
    host_swap_guest_stats p = { 0 };
    if (h->open) {
        const reclaim_guest *g = &h->rg;
        p.active = true;
        p.resident_bytes = g->resident_bytes;
        p.swapped_bytes = g->swapped_bytes;
        p.cold_bytes = g->cold_bytes;
        p.ws_bytes = reclaim_guest_ws_bytes(g);
        /* until chunks could age for the cold age, everything resident
         * counts as used: not yet a measurement */
        p.ws_known = g->lru.scan > g->lru.cold_age;
        p.paged_out_bytes = g->paged_out_bytes;
        p.probe_bytes = g->probe_bytes;
        p.refaults = g->lru.refaults_total;
        p.refault_bytes = g->lru.refault_pages_total * g->ram.page_bytes;
        p.cold_age_scans = g->lru.cold_age;
        p.budget_bytes = g->lru.budget_bytes;
        p.protected_bytes = h->protected_bytes;
        p.protected_effective_bytes = h->protect_cap < h->protected_bytes ? h->protect_cap : h->protected_bytes;
        snprintf(p.protect_capped_by, sizeof(p.protect_capped_by), "%s", h->protect_capped_by);
        p.proactive_bytes = h->proactive_bytes;
        p.promoted_bps = h->promoted_bps;
        p.foreign_fault_bps = h->majflt_known ? h->foreign_bps : -1;
        p.promoted_total = h->promoted_total;
        p.foreign_fault_total = h->foreign_total;
    }
    publish_stats(h, &p);
}

void publish_stats(hswap_guest *h, host_swap_guest_stats *p)
{
    p->slo = reclaim_slo_name(h->slo);
    p->at_ms = mono_ms();
    g_mutex_lock(&h->lock);
    double budget = h->pub.budget_percent; /* the tick's, set when the round was handed over */
    h->pub = *p;
    h->pub.budget_percent = budget;
    g_mutex_unlock(&h->lock);
}

static void run_round(host_swap *hs, round_job *j)
{
    if (!hs->src) {
        memcg_run_round(hs, j);
        return;
    }
    double cpu0 = cpu_now();
    int64_t start = mono_ms();
    uint64_t round = hs->rounds++;
    g_autofree round_guest **open = g_new0(round_guest *, j->n ? j->n : 1);
    g_autofree reclaim_guest **rgs = g_new0(reclaim_guest *, j->n ? j->n : 1);
    size_t k = 0;
    g_autoptr(GError) err = NULL;
    bool failed = reclaim_scan_begin(hs->src, (uint64_t)start * 1000, &err) < 0;
    for (size_t i = 0; i < j->n; i++) {
        j->g[i].h->round_paged = 0;
        if (!ensure_open(hs, &j->g[i], round))
            continue;
        int rc = run_steps(hs, &j->g[i].h->rg, scan_step);
        if (rc == -2)
            goto stopping;
        if (rc < 0) {
            guest_close(j->g[i].h); /* its QEMU went away: re-opened next round */
            continue;
        }
        open[k] = &j->g[i];
        rgs[k++] = &j->g[i].h->rg;
    }
    if (reclaim_scan_end(hs->src, rgs, k, (uint64_t)mono_ms() * 1000, failed ? NULL : &err) < 0)
        failed = true;
    if (failed && strcmp(err->message, hs->last_error) != 0)
        log_warn("host reclaim: %s source: %s", hs->src->ops->name, err->message);
    if (failed)
        snprintf(hs->last_error, sizeof(hs->last_error), "%s", err->message);
    for (size_t i = 0; i < k; i++)
        judge_slo(open[i]->h, open[i], j->reclaiming || j->n_wants > 0, mono_ms());
    if (!j->can_swap && !hs->warned_no_swap && (j->reclaiming || j->n_wants))
        log_warn("host reclaim: the host has no swap; nothing can be paged out");
    hs->warned_no_swap = hs->warned_no_swap || (!j->can_swap && (j->reclaiming || j->n_wants));
    if (j->can_swap && !page_out_round(hs, j, open, k))
        goto stopping;
    protect_working_sets(hs, open, k);
    for (size_t i = 0; i < k; i++) {
        int rc = run_steps(hs, rgs[i], settle_step);
        if (rc == -2)
            goto stopping;
        if (rc < 0)
            guest_close(open[i]->h);
    }
    for (size_t i = 0; i < j->n; i++)
        publish_guest(j->g[i].h);
    g_mutex_lock(&hs->lock);
    hs->scans++;
    hs->scan_errors += failed;
    hs->cpu_seconds += cpu_now() - cpu0;
    hs->last_round_seconds = (double)(mono_ms() - start) / 1000.0;
    g_mutex_unlock(&hs->lock);
    double ext = hs->src->ops->external_cpu_seconds(hs->src); /* the source is the round thread's */
    g_mutex_lock(&hs->lock);
    hs->source_cpu_seconds = ext;
    g_mutex_unlock(&hs->lock);
    return;
stopping:
    for (size_t i = 0; i < j->n; i++)
        j->g[i].h->rg.cursor = 0;
}

static gpointer round_thread(gpointer data)
{
    host_swap *hs = data;
    g_mutex_lock(&hs->lock);
    for (;;) {
        while (!hs->stop && !hs->job)
            g_cond_wait(&hs->cond, &hs->lock);
        if (hs->stop)
            break;
        round_job *j = g_steal_pointer(&hs->job);
        g_mutex_unlock(&hs->lock);
        run_round(hs, j);
        job_free(j);
        g_mutex_lock(&hs->lock);
        hs->busy = false;
    }
    g_mutex_unlock(&hs->lock);
    return NULL;
}

bool host_swap_due(const host_swap *hs)
{
    return hs && mono_ms() >= hs->next_scan_ms;
}

void host_swap_tick(host_swap *hs, host_swap_target *t, size_t n, const host_swap_round *r)
{
    if (!host_swap_due(hs))
        return;
    hs->next_scan_ms = mono_ms() + (int64_t)hs->scan_interval * 1000;
    g_mutex_lock(&hs->lock);
    bool busy = hs->busy;
    hs->busy_skips += busy;
    g_mutex_unlock(&hs->lock);
    if (busy)
        return;
    /* No pressure (the host and every node above low, not reclaiming) and
     * nothing proactive (off, or no swap to page out to): no scan at all.  The probe source's probes are
     * pageouts the guests pay for in faults; idle means idle (measured: a
     * guest's wss lost 90% of its throughput to 2 s probe scans in the
     * no-pressure scenario). */
    reclaim_want wants[HOST_MAX_NODES];
    bool proactive = hs->proactive && r->host->swap_total_bytes > 0;
    if (!proactive && !r->reclaiming && round_wants(r, 0, wants) == 0) {
        g_mutex_lock(&hs->lock);
        hs->idle_skips++;
        g_mutex_unlock(&hs->lock);
        return;
    }
    round_job *j = g_new0(round_job, 1);
    j->g = g_new0(round_guest, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        if (!*t[i].state)
            *t[i].state = guest_new();
        round_guest *g = &j->g[j->n++];
        g->h = g_atomic_rc_box_acquire(*t[i].state);
        g->name = g_strdup(t[i].name);
        g->pid = t[i].qemu_pid;
        g->view = *t[i].view;
        g->view.name = g->name;
        g->view.uuid = NULL;
        double pb = t[i].view->policy.promotion_budget;
        g->budget_percent = pb >= 0 ? pb : hs->promotion_budget;
        g_mutex_lock(&g->h->lock);
        g->h->pub.budget_percent = g->budget_percent;
        g_mutex_unlock(&g->h->lock);
    }
    j->n_wants = round_wants(r, r->balloon_reclaim, j->wants);
    j->can_swap = r->host->swap_total_bytes > 0;
    j->swap_free_bytes = r->host->swap_free_bytes;
    j->reclaiming = r->reclaiming;
    if (psi_some_avg10(PSI_MEMORY_PATH, &j->host_psi_some) < 0)
        j->host_psi_some = -1;
    g_mutex_lock(&hs->lock);
    hs->job = j;
    hs->busy = true;
    g_cond_signal(&hs->cond);
    g_mutex_unlock(&hs->lock);
}

void host_swap_stats_get(const host_swap *hs, host_swap_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!hs)
        return;
    host_swap *m = (host_swap *)hs; /* the lock only */
    out->enabled = true;
    out->source = hs->src ? hs->src->ops->name : "memcg";
    g_mutex_lock(&m->lock);
    out->scans = hs->scans;
    out->scan_errors = hs->scan_errors;
    out->idle_skips = hs->idle_skips;
    out->busy_skips = hs->busy_skips;
    out->paged_out_bytes = hs->paged_out_bytes;
    out->proactive_bytes = hs->proactive_bytes;
    out->cpu_seconds = hs->cpu_seconds;
    out->last_round_seconds = hs->last_round_seconds;
    out->source_cpu_seconds = hs->source_cpu_seconds;
    g_mutex_unlock(&m->lock);
}

bool host_swap_guest_stats_get(const hswap_guest *h, host_swap_guest_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!h)
        return false;
    hswap_guest *m = (hswap_guest *)h; /* the lock only */
    g_mutex_lock(&m->lock);
    *out = h->pub;
    g_mutex_unlock(&m->lock);
    return out->active;
}

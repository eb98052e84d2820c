/*
 * The memcg source's round ([host_reclaim] source = memcg): host reclaim
 * through each guest's own memory cgroup, the kernel's LRU choosing the
 * pages (memcg_reclaim.h), instead of a scan of the guest's RAM.  What a
 * guest gives, and when, is decided as for the chunk sources
 * (policies/reclaim_plan.h):
 *
 *   who      a guest whose QEMU is alone in its memory cgroup (libvirt's
 *            scope; a shared group has no per-guest lever), that may give
 *            (reclaim_may_take) and is inside its SLO; streaming guests
 *            first, then the most cold used memory;
 *   SLO      every major fault charged to its group (memory.stat
 *            pgmajfault: its QEMU's, a KVM async page fault's kworker's
 *            too) counts against its promotion budget, ours or the
 *            kernel's: without a scan we cannot tell them apart, and
 *            either is the guest paying;
 *   how much the host's shortfall, within the per-guest max_per_scan; and,
 *            proactive, Senpai's probe (reclaim_memcg_proactive; no
 *            proactive_age: the kernel's LRU, not an age, picks what
 *            goes);
 *   pace     in slices of MEMCG_SLICE, paused between them to stay
 *            within max_cpu (the kernel's reclaim runs in this thread, and
 *            its CPU is counted); a round asks at most max_swap_out x
 *            scan_interval in all (what is asked counts, not what the
 *            charge fell by: a guest allocating meanwhile must not draw
 *            more), and never more than half the host's free swap
 *            (MEMCG_SWAP_SHARE: a guest charging in the moment of a v1
 *            step must find swap to be reclaimed to, not its OOM killer).
 *
 * Nothing is left set: memory.reclaim is a one-off, and a v1 limit step
 * is put back at once (recorded in the protection ledger meanwhile).  No
 * working-set protection is written: without a scan there is no measured
 * working set to protect.  The classzone (a short NUMA node) cannot be
 * aimed at: memory.reclaim has no node; a node's shortfall is reclaimed
 * host-wide.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/size_parse.h"
#include "host/pressure.h"
#include "host/qemu_touched.h"
#include "reclaim/host_swap_priv.h"
#include "reclaim/memcg_reclaim.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"
#include "util/small_file.h"

#define MEMCG_SLICE (16ULL << 20) /* reclaimed at a time, paced between */
#define MEMCG_SWAP_SHARE 0.5      /* of the host's free swap, the most a round asks for */

/* Find the guest's cgroup (again after its QEMU restarted); true when it
 * can be reclaimed from. */
static bool memcg_open(round_guest *t, uint64_t round)
{
    hswap_guest *h = t->h;
    if (h->open && t->pid == h->pid)
        return true;
    guest_close(h);
    if (round < h->retry_round)
        return false;
    g_autoptr(GError) err = NULL;
    if (t->pid <= 0)
        g_set_error(&err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "QEMU's pid is not known");
    else if (qemu_memcg_find(t->pid, &h->cg) < 0)
        g_set_error(&err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "QEMU pid %d has no memory cgroup", t->pid);
    else if (memcg_sole_owner(&h->cg, t->pid) != 1)
        g_set_error(&err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE,
                    "its memory cgroup %s holds other processes too: the memcg source reclaims a guest only from a "
                    "group of its own (libvirt's machine scope)", h->cg.dir);
    else if (!memcg_can_reclaim(&h->cg))
        g_set_error(&err, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "%s has no %s we may write%s", h->cg.dir,
                    h->cg.kind == MEMCG_V2 ? "memory.reclaim" : MEMCG_V1_LIMIT,
                    h->cg.kind == MEMCG_V2 ? " (Linux 5.19+)" : "");
    if (err) {
        if (strcmp(err->message, h->error) != 0)
            log_warn("guest %s: no host reclaim: %s", t->name, err->message);
        snprintf(h->error, sizeof(h->error), "%s", err->message);
        h->retry_round = round + REOPEN_ROUNDS;
        return false;
    }
    h->open = h->by_memcg = h->cg_own = true;
    h->pid = t->pid; /* (h->error stays until a reclaim succeeds: a failing group is said once) */
    h->last_round_ms = 0;
    h->majflt_known = false;
    log_info("guest %s: host reclaim through its memory cgroup %s (cgroup %s; the kernel's LRU chooses the pages)",
             t->name, h->cg.dir, h->cg.kind == MEMCG_V2 ? "v2, memory.reclaim" : "v1, a restored limit step");
    return true;
}

/* Its QEMU's memory in host swap (VmSwap), 0 when it cannot be read. */
static uint64_t qemu_swapped(int pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    g_autofree char *text = small_file_read(path, 8192);
    unsigned long long kb = 0;
    return text && proc_status_kb(text, "\nVmSwap:", &kb) == 0 ? (uint64_t)kb * 1024 : 0;
}

/* Where the guest stands: its group's charge, what is in host swap, and
 * its SLO.  Its swap-ins (ours and the host kernel's, which cannot be
 * told apart without a scan) are judged as the chunk sources judge
 * faults that are not theirs: against its whole budget while the host
 * is not short -- then they are what proactive reclaim costs it -- and
 * not while it is, when the host kernel's own reclaim swaps the guests
 * with or without us and a step from the right guest (a stream first)
 * is what spares the others (counted then, every guest left its SLO
 * within seconds and host reclaim stood down: bench
 * 2026-12-08-memcg-overcommit).  false when its group or QEMU is gone
 * (re-opened next round). */
static bool memcg_judge(hswap_guest *h, const round_guest *t, bool host_short, int64_t now_ms)
{
    if (memcg_usage(&h->cg, &h->memcg_usage) < 0)
        return false;
    h->memcg_swapped = qemu_swapped(h->pid);
    /* the group's major faults; its QEMU's own where the group does not say */
    uint64_t faults = 0;
    proc_stat_counts pc = { 0 };
    bool known = memcg_swap_ins(&h->cg, &faults) == 0 || (proc_stat_counts_read(h->pid, &pc) == 0 &&
                                                          (faults = pc.major_faults, true));
    double dt = h->last_round_ms ? (double)(now_ms - h->last_round_ms) / 1000.0 : 0;
    if (dt > 0 && known && h->majflt_known && faults >= h->majflt) {
        uint64_t back = (faults - h->majflt) * 4096;
        h->promoted_bps = reclaim_rate_average(h->promoted_bps, (double)back, dt);
        h->promoted_total += back;
    }
    h->majflt = faults;
    h->majflt_known = known;
    h->last_round_ms = now_ms;
    reclaim_slo_input in = { h->memcg_usage, 0, t->budget_percent, known ? h->promoted_bps : -1,
                             t->view.agent_fresh, t->view.agent_psi_some, host_short };
    reclaim_slo slo = reclaim_slo_judge(&in, h->slo);
    if (slo != h->slo)
        log_info("guest %s: host reclaim SLO %s (swap-ins %.1f KiB/s, budget %.2f%% of its %llu MiB a minute = "
                 "%.1f KiB/s%s)",
                 t->name, reclaim_slo_name(slo), h->promoted_bps / 1024, t->budget_percent,
                 (unsigned long long)(h->memcg_usage >> 20), t->budget_percent / 100 * (double)h->memcg_usage / 60 / 1024,
                 t->view.agent_fresh ? "; agent PSI counted" : "");
    h->slo = slo;
    return true;
}

/* What is left of h's per-round budget (max_per_scan). */
static uint64_t budget_left(const host_swap *hs, const hswap_guest *h)
{
    return hs->tun.max_budget_bytes > h->round_paged ? hs->tun.max_budget_bytes - h->round_paged : 0;
}

/* Up to want bytes from g's group, within what is left of its per-round
 * budget, in paced slices; what its charge fell by, and in *asked what
 * was asked (the round's allowance counts that).  *go turns false when
 * the daemon stops.  A failure leaves the guest alone for REOPEN_ROUNDS,
 * said once. */
static uint64_t memcg_take(host_swap *hs, round_guest *g, uint64_t want, const char *why, uint64_t round,
                           uint64_t *asked, bool *go)
{
    hswap_guest *h = g->h;
    uint64_t got = 0;
    while (*go && !writes_held(hs)) {
        uint64_t left = budget_left(hs, h);
        uint64_t ask = want > *asked ? want - *asked : 0;
        ask = ask < left ? ask : left;
        ask = ask < MEMCG_SLICE ? ask : MEMCG_SLICE;
        if (ask < 4096)
            break;
        double c = cpu_now();
        uint64_t slice = 0;
        g_autoptr(GError) err = NULL;
        if (!h->pl)
            h->pl = protect_ledger_ref(hs->pl); /* kept for a step to put back when the guest is let go */
        int rc = memcg_reclaim(&h->cg, ask, h->pl, &h->memcg_step, &slice, &err);
        h->round_paged += ask;
        *asked += ask;
        /* its charge may fall by more meanwhile (the host kernel's own
         * reclaim, the guest freeing): ours is at most what was asked */
        slice = slice < ask ? slice : ask;
        got += slice;
        if (rc < 0) {
            if (strcmp(err->message, h->error) != 0)
                log_warn("guest %s: host reclaim through its cgroup: %s", g->name, err->message);
            snprintf(h->error, sizeof(h->error), "%s", err->message);
            h->retry_round = round + REOPEN_ROUNDS;
            guest_close(h);
            break;
        }
        h->error[0] = '\0';
        if (slice < ask / 4) /* the kernel found little more to take */
            break;
        *go = pace(hs, c);
    }
    if (got) {
        h->memcg_reclaimed += got;
        char sz[32];
        size_format(got, sz, sizeof(sz));
        log_info("guest %s: reclaimed %s through its memory cgroup (%s; the kernel's LRU chose)", g->name, sz, why);
    }
    return got;
}

static void memcg_publish(hswap_guest *h)
{
    host_swap_guest_stats p = { 0 };
    if (h->open) {
        p.active = p.by_memcg = true;
        p.resident_bytes = h->memcg_usage;
        p.swapped_bytes = h->memcg_swapped;
        p.paged_out_bytes = h->memcg_reclaimed;
        p.proactive_bytes = h->proactive_bytes;
        p.promoted_bps = h->promoted_bps;
        p.foreign_fault_bps = -1;
        p.promoted_total = h->promoted_total;
    }
    publish_stats(h, &p);
}

void memcg_run_round(host_swap *hs, round_job *j)
{
    double cpu0 = cpu_now();
    int64_t start = mono_ms();
    uint64_t round = hs->rounds++;
    bool short_ = j->reclaiming || j->n_wants > 0;
    g_autofree round_guest **open = g_new0(round_guest *, j->n ? j->n : 1);
    g_autofree reclaim_candidate *cand = g_new0(reclaim_candidate, j->n ? j->n : 1);
    size_t k = 0;
    for (size_t i = 0; i < j->n; i++) {
        hswap_guest *h = j->g[i].h;
        h->round_paged = 0;
        if (!memcg_open(&j->g[i], round))
            continue;
        if (!memcg_judge(h, &j->g[i], short_, mono_ms())) {
            guest_close(h);
            continue;
        }
        uint64_t room = reclaim_proactive_room(&j->g[i].view, 0, h->memcg_usage, h->memcg_swapped);
        cand[k] = (reclaim_candidate){ &j->g[i].view, room };
        open[k++] = &j->g[i];
    }
    g_autofree size_t *order = g_new0(size_t, k ? k : 1);
    size_t ng = reclaim_plan_givers(cand, k, order);
    bool go = true;
    uint64_t allowance = hs->max_swap_out * hs->scan_interval;
    uint64_t swap_room = (uint64_t)((double)j->swap_free_bytes * MEMCG_SWAP_SHARE);
    allowance = j->can_swap ? (allowance < swap_room ? allowance : swap_room) : 0;
    uint64_t asked = 0, done = 0, proactive = 0, want = 0;
    for (size_t w = 0; w < j->n_wants; w++)
        want += j->wants[w].bytes; /* memory.reclaim has no node: host-wide */
    want = want < allowance ? want : allowance;
    for (size_t i = 0; i < ng && asked < want && go; i++)
        if (open[order[i]]->h->slo == SLO_WITHIN && open[order[i]]->h->open) {
            uint64_t mine = 0;
            done += memcg_take(hs, open[order[i]], want - asked, "the host is short", round, &mine, &go);
            asked += mine;
        }
    bool host_calm = j->host_psi_some < SLO_HOST_PSI_LIMIT;
    for (size_t i = 0; i < ng && hs->proactive && host_calm && asked < allowance && go; i++) {
        round_guest *g = open[order[i]];
        hswap_guest *h = g->h;
        if (h->slo != SLO_WITHIN || !h->open)
            continue;
        uint64_t left = budget_left(hs, h);
        uint64_t ask = reclaim_memcg_proactive(&g->view, h->memcg_usage, h->memcg_swapped, left);
        ask = ask < allowance - asked ? ask : allowance - asked;
        uint64_t mine = 0;
        uint64_t got = memcg_take(hs, g, ask, "proactive", round, &mine, &go);
        asked += mine;
        h->proactive_bytes += got;
        proactive += got;
    }
    for (size_t i = 0; i < j->n; i++)
        memcg_publish(j->g[i].h);
    g_mutex_lock(&hs->lock);
    hs->scans++;
    hs->paged_out_bytes += done + proactive;
    hs->proactive_bytes += proactive;
    hs->cpu_seconds += cpu_now() - cpu0;
    hs->last_round_seconds = (double)(mono_ms() - start) / 1000.0;
    g_mutex_unlock(&hs->lock);
}

/* The balancer core; see balancer.h. */
#include "core/balancer_priv.h"
#include "core/actuate.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/metadata_xml.h"
#include "config/size_parse.h"
#include "host/host_cgroup.h"
#include "host/own_reporting.h"
#include "host/pressure.h"
#include "policies/reclaim_plan.h"
#include "reclaim/kdamond_ledger.h"
#include "reclaim/protect_ledger.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"

/* the backend's hv_guest is the first member of our guest */
G_STATIC_ASSERT(offsetof(guest, hv) == 0);

/* Stats are stale after three missed reports, and not sooner than this:
 * a guest on a busy host answers the stats timer late (a stale guest is
 * held, given nothing and taken nothing from) */
#define STALE_MIN_S 10

void balancer_limits(const balancer_config *c, guest_limits *lim, classify_params *cp)
{
    lim->default_floor_percent = c->default_floor_percent;
    lim->default_floor_min = c->default_floor_min;
    /* three missed reports make stats stale */
    lim->stale_seconds = 3 * c->stats_period + c->tick_seconds;
    if (lim->stale_seconds < STALE_MIN_S)
        lim->stale_seconds = STALE_MIN_S;
    /* need uses the reserve reclaim leaves, and looks at least two ticks
     * ahead: what a guest needs must be there before the next decision */
    classify_params_default(cp);
    classify_params_for_period(cp, c->stats_period);
    cp->need_reserve_percent = c->tun.reserve_percent;
    cp->need_reserve_min = c->tun.reserve_min_bytes;
    if (cp->need_horizon_s < 2.0 * c->tick_seconds)
        cp->need_horizon_s = 2.0 * c->tick_seconds;
}

static void limits_from_config(balancer *b)
{
    balancer_limits(&b->cfg, &b->lim, &b->cp);
    b->hv.connect_uri = b->cfg.connect_uri;
    b->hv.stats_period = b->cfg.stats_period;
}

/* Start the [host_reclaim] stage of b->cfg over (cold ages are relearned):
 * what was scanned is closed and the guests' cgroup protection put back
 * first, since a DAMON source we created would look taken to the new one.
 * -1 with the reason when the new stage cannot start (it stays off). */
static int set_host_reclaim(balancer *b, GError **error)
{
    host_swap_free(b->hswap);
    for (guint i = 0; b->guests && i < b->guests->len; i++) {
        guest *g = g_ptr_array_index(b->guests, i);
        host_swap_guest_free(g->hswap);
        g->hswap = NULL;
    }
    GError *err = NULL;
    b->hswap = host_swap_new(&b->cfg, &err);
    if (err) {
        g_propagate_error(error, err);
        return -1;
    }
    host_swap_hold(b->hswap, b->paused);
    return 0;
}

/* [host_reclaim]'s settings from src into dst; dst's old source string is
 * handed to src, so each config still owns one. */
static void swap_host_reclaim(balancer_config *dst, balancer_config *src)
{
    balancer_config t = *dst;
    dst->hr_enabled = src->hr_enabled;
    dst->hr_source = src->hr_source;
    dst->hr_scan_interval = src->hr_scan_interval;
    dst->hr_min_cold_age = src->hr_min_cold_age;
    dst->hr_max_cold_age = src->hr_max_cold_age;
    dst->hr_max_per_scan = src->hr_max_per_scan;
    dst->hr_min_per_scan = src->hr_min_per_scan;
    dst->hr_probes = src->hr_probes;
    dst->hr_protect = src->hr_protect;
    dst->hr_proactive = src->hr_proactive;
    dst->hr_proactive_age = src->hr_proactive_age;
    dst->hr_promotion_budget = src->hr_promotion_budget;
    dst->hr_max_cpu = src->hr_max_cpu;
    dst->hr_max_swap_out = src->hr_max_swap_out;
    src->hr_source = t.hr_source;
}

static bool same_host_reclaim(const balancer_config *a, const balancer_config *c)
{
    return a->hr_enabled == c->hr_enabled && strcmp(a->hr_source, c->hr_source) == 0 &&
           a->hr_scan_interval == c->hr_scan_interval && a->hr_min_cold_age == c->hr_min_cold_age &&
           a->hr_max_cold_age == c->hr_max_cold_age && a->hr_max_per_scan == c->hr_max_per_scan &&
           a->hr_min_per_scan == c->hr_min_per_scan && a->hr_probes == c->hr_probes &&
           a->hr_protect == c->hr_protect && a->hr_proactive == c->hr_proactive &&
           a->hr_proactive_age == c->hr_proactive_age && a->hr_promotion_budget == c->hr_promotion_budget &&
           a->hr_max_cpu == c->hr_max_cpu && a->hr_max_swap_out == c->hr_max_swap_out;
}

int balancer_replace_config(balancer *b, balancer_config *cfg, GError **error)
{
    bool same = same_host_reclaim(&b->cfg, cfg);
    balancer_config old = b->cfg;
    b->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    /* set at start, from the command line: the kdamond's ledger stays where
     * it was written */
    char *t = b->cfg.state_dir;
    b->cfg.state_dir = old.state_dir;
    old.state_dir = t;
    t = b->cfg.damon_admin;
    b->cfg.damon_admin = old.damon_admin;
    old.damon_admin = t;
    limits_from_config(b);
    int rc = 0;
    if (!same && set_host_reclaim(b, error) < 0) {
        /* a [host_reclaim] that cannot start leaves the one that ran */
        g_prefix_error(error, "reload: ");
        g_autoptr(GError) again = NULL;
        swap_host_reclaim(&b->cfg, &old);
        if (set_host_reclaim(b, &again) < 0)
            log_err("host reclaim: the previous [host_reclaim] does not start again either: %s",
                    again->message);
        rc = -1;
    }
    config_clear(&old);
    b->snap_stale = true;
    return rc;
}

const balancer_config *balancer_config_get(const balancer *b)
{
    return &b->cfg;
}

int balancer_set_policy(balancer *b, const char *name, GError **error)
{
    const policy_ops *p = policy_lookup(name);
    if (!p) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "unknown policy '%s' (known: %s)", name,
                    policy_names());
        return -1;
    }
    void *state = p->state_new ? p->state_new() : NULL;
    if (p->state_new && !state) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "policy %s: cannot set up its state", name);
        return -1;
    }
    if (b->policy && b->policy->state_free)
        b->policy->state_free(b->policy_state);
    b->policy = p;
    b->policy_state = state;
    b->snap_stale = true;
    return 0;
}

static guest *guest_of(hv_guest *h)
{
    return (guest *)h;
}

static hv_guest *inv_find(void *ctx, const char *uuid)
{
    balancer *b = ctx;
    for (guint i = 0; i < b->guests->len; i++) {
        guest *g = g_ptr_array_index(b->guests, i);
        if (strcmp(g->hv.uuid, uuid) == 0)
            return &g->hv;
    }
    return NULL;
}

static hv_guest *inv_add(void *ctx, const char *name, const char *uuid)
{
    balancer *b = ctx;
    guest *g = g_new(guest, 1);
    guest_init(g, name, uuid);
    g->hv.seen = true;
    g_ptr_array_add(b->guests, g);
    b->snap_stale = true;
    log_info("guest %s (%s): now managed", g->hv.name, g->hv.uuid);
    return &g->hv;
}

static void inv_remove(void *ctx, hv_guest *h)
{
    balancer *b = ctx;
    guest *g = guest_of(h);
    if (!b->shutting_down)
        log_info("guest %s (%s): gone", g->hv.name, g->hv.uuid);
    host_swap_guest_free(g->hswap);
    qemu_proc_close(&g->qproc);
    if (b->backend->guest_release)
        b->backend->guest_release(&b->hv, &g->hv);
    g_ptr_array_remove(b->guests, g);
    g_free(g);
    b->snap_stale = true;
}

static size_t inv_count(void *ctx)
{
    return ((balancer *)ctx)->guests->len;
}

static hv_guest *inv_at(void *ctx, size_t i)
{
    return &((guest *)g_ptr_array_index(((balancer *)ctx)->guests, i))->hv;
}

static void apply_policy_xml(balancer *b, guest *g, const char *xml);

static void inv_policy_xml(void *ctx, hv_guest *h, const char *xml)
{
    balancer *b = ctx;
    apply_policy_xml(b, guest_of(h), xml);
    b->snap_stale = true;
}

static const hv_inventory inventory = {
    .find = inv_find,
    .add = inv_add,
    .remove = inv_remove,
    .count = inv_count,
    .at = inv_at,
    .policy_xml = inv_policy_xml,
};

balancer *balancer_new(balancer_config *cfg, const backend_ops *be, char **qmp_sockets, bool dry_run,
                       GError **error)
{
    g_autofree balancer *b = g_new0(balancer, 1);
    b->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    b->backend = be;
    b->hv.inv = &inventory;
    b->hv.inv_ctx = b;
    b->hv.qmp_sockets = qmp_sockets;
    b->dry_run = dry_run;
    b->guests = g_ptr_array_new();
    b->proc_meminfo = "/proc/meminfo";
    b->sys_node_dir = "/sys/devices/system/node";
    classify_params_default(&b->cp);
    limits_from_config(b);
    b->own_reporting = own_free_page_reporting("/sys");
    if (b->own_reporting)
        log_info("host: this host is itself a guest that reports its free memory to its hypervisor "
                 "(virtio-balloon free page reporting): memory a guest gives back and touches again after "
                 "a few seconds or more faults there too, at a cost bare metal does not pay "
                 "(make bench-fault, aged-2m)");
    /* a kdamond a balancerd before us left running is turned off whatever
     * this one's [host_reclaim] says */
    balancer_release_leftovers(b->cfg.state_dir);
    g_autofree char *paused_file = g_build_filename(b->cfg.state_dir, PAUSED_FILE, NULL);
    if (g_file_test(paused_file, G_FILE_TEST_EXISTS)) {
        b->paused = true;
        log_info("starting paused: balancing was paused before this start (%s); balancerctl resume balances "
                 "again", paused_file);
    }
    g_autoptr(GError) hr_err = NULL;
    if (balancer_set_policy(b, b->cfg.policy, error) == 0)
        b->hswap = host_swap_new(&b->cfg, &hr_err);
    if (b->hswap)
        host_swap_hold(b->hswap, b->paused);
    if (!b->policy || hr_err) {
        if (hr_err)
            g_propagate_error(error, g_steal_pointer(&hr_err));
        balancer_free(g_steal_pointer(&b));
        return NULL;
    }
    b->snap = balancer_snapshot_build(b);
    return g_steal_pointer(&b);
}

/* What releasing one ledger found: an error when something of ours could
 * not be undone, what was found and done, or that there was nothing. */
static void say_released(bool failed, const char *prefix, const char *what, const char *nothing, const char *ledger)
{
    if (failed)
        log_err("%s%s", prefix, what);
    else if (what)
        log_info("%s%s", prefix, what);
    else
        log_debug("nothing left behind (no %s recorded in %s)", nothing, ledger);
}

int balancer_release_leftovers(const char *state_dir)
{
    g_autofree char *ledger = g_build_filename(state_dir, KDAMOND_LEDGER_FILE, NULL);
    g_autofree char *what = NULL;
    bool kdamond_failed = kdamond_release_leftover(ledger, &what) == KDAMOND_FAILED;
    say_released(kdamond_failed, "DAMON: ", what, "kdamond", ledger);
    g_autofree char *protect = g_build_filename(state_dir, PROTECT_LEDGER_FILE, NULL);
    g_autofree char *put_back = NULL;
    bool protect_failed = protect_release_leftover(protect, &put_back) == PROTECT_FAILED;
    say_released(protect_failed, "", put_back, "memory protection", protect);
    return kdamond_failed || protect_failed ? -1 : 0;
}

void balancer_free(balancer *b)
{
    if (!b)
        return;
    b->shutting_down = true;
    host_swap_free(b->hswap);
    while (b->guests->len)
        inv_remove(b, inv_at(b, b->guests->len - 1));
    if (b->backend->shutdown)
        b->backend->shutdown(&b->hv);
    g_ptr_array_free(b->guests, TRUE);
    if (b->policy && b->policy->state_free)
        b->policy->state_free(b->policy_state);
    config_clear(&b->cfg);
    snapshot_free(b->snap);
    g_free(b);
}

static void publish_snapshot(balancer *b)
{
    snapshot_free(b->snap);
    b->snap = balancer_snapshot_build(b);
    b->snap_stale = false;
}

const snapshot *balancer_snapshot(balancer *b)
{
    if (b->snap_stale)
        publish_snapshot(b);
    return b->snap;
}

/* The pause outlives this balancerd (a restart, an upgrade) as a file in
 * the state directory; what cannot be written is logged, and the pause
 * holds for this run anyway. */

static void record_pause(const balancer *b, bool paused)
{
    g_autofree char *path = g_build_filename(b->cfg.state_dir, PAUSED_FILE, NULL);
    if (!paused) {
        if (unlink(path) < 0 && errno != ENOENT)
            log_warn("%s: %s: the next balancerd will start paused", path, g_strerror(errno));
        return;
    }
    g_autoptr(GError) err = NULL;
    g_autofree char *text = g_strdup_printf("paused by balancerctl at %lld (Unix time); balancerctl resume "
                                            "balances again\n", (long long)time(NULL));
    if (g_mkdir_with_parents(b->cfg.state_dir, 0700) < 0 || !g_file_set_contents(path, text, -1, &err))
        log_warn("%s: %s: a restarted balancerd will not know it was paused", path,
                 err ? err->message : g_strerror(errno));
}

void balancer_set_paused(balancer *b, bool paused)
{
    b->paused = paused;
    host_swap_hold(b->hswap, paused);
    b->snap_stale = true;
    record_pause(b, paused);
}

unsigned balancer_give_back_all(balancer *b)
{
    balancer_set_paused(b, true);
    unsigned moved = 0;
    for (guint i = 0; i < b->guests->len; i++) {
        guest *g = g_ptr_array_index(b->guests, i);
        if (g->view.policy.mode == VM_MODE_OFF || !g->view.ceiling_bytes)
            continue; /* never ours to move; or not sampled yet */
        uint64_t before = g->balloon_ops;
        /* a virtio-mem guest goes back to its own size, not to all its device could plug */
        uint64_t to = g->vmem_resized && g->home_bytes && g->home_bytes < g->view.ceiling_bytes ? g->home_bytes
                                                                                               : g->view.ceiling_bytes;
        guest_decision d = { .target_bytes = to, .change = true, .reason = REASON_GIVE_BACK };
        actuate(b, g, &d, mono_ms(), true);
        moved += g->balloon_ops != before;
    }
    log_info("give-back: %u guest(s) given their memory back; balancing paused until balancerctl resume", moved);
    return moved;
}

static void describe_policy(const vm_policy *p, char *buf, size_t len)
{
    char mn[32] = "default", mx[32] = "domain max";
    if (p->min_bytes)
        size_format(p->min_bytes, mn, sizeof(mn));
    if (p->max_bytes)
        size_format(p->max_bytes, mx, sizeof(mx));
    snprintf(buf, len, "mode=%s priority=%s shares=%u min=%s max=%s protect=%s",
             vm_mode_name(p->mode), vm_priority_name(p->priority), p->shares, mn, mx,
             p->protect ? "yes" : "no");
}

static void apply_policy_xml(balancer *b, guest *g, const char *xml)
{
    char desc[200];
    if (!xml) {
        bool changed = g->policy_from_metadata;
        vm_policy_default(&g->policy);
        g->policy_from_metadata = false;
        g->policy_error[0] = '\0';
        if (changed) {
            describe_policy(&g->policy, desc, sizeof(desc));
            log_info("guest %s: policy metadata removed; defaults: %s", g->hv.name, desc);
        }
        return;
    }
    vm_policy p;
    g_autoptr(GError) err = NULL;
    g_autofree char *ignored = NULL;
    if (metadata_policy_parse(xml, strlen(xml), &p, &ignored, &err) < 0) {
        snprintf(g->policy_error, sizeof(g->policy_error), "%s", err->message);
        g->policy_errors++;
        b->policy_errors++;
        describe_policy(&g->policy, desc, sizeof(desc));
        log_warn("guest %s: policy metadata rejected: %s; keeping %s policy (%s)", g->hv.name, err->message,
                 g->policy_from_metadata ? "the previous" : "the default", desc);
        return;
    }
    g->policy = p;
    g->policy_from_metadata = true;
    g->policy_error[0] = '\0';
    describe_policy(&p, desc, sizeof(desc));
    log_info("guest %s: policy %s", g->hv.name, desc);
    if (ignored) {
        /* shown by explain with the policy, as a rejection is */
        snprintf(g->policy_error, sizeof(g->policy_error),
                 "attribute(s) %s not known to this balancerd (written by a newer one?): ignored", ignored);
        log_warn("guest %s: policy metadata: %s", g->hv.name, g->policy_error);
    }
}

/* A migration, save or dump holds libvirt's job lock: a balloon change
 * would wait for it (up to 30 s) and change memory under the copy, so the
 * guest is left alone until the job ends. */
static void note_job(guest *g, int64_t job_ms)
{
    if (job_ms >= 0 && g->job_ms < 0)
        log_info("guest %s: libvirt is running a job on it (migration, save or dump): its balloon is left "
                 "alone until the job ends", g->hv.name);
    else if (job_ms < 0 && g->job_ms >= 0)
        log_info("guest %s: the libvirt job ended after %.1f s: balancing it again", g->hv.name,
                 (double)g->job_ms / 1000.0);
    g->job_ms = job_ms;
}

/* The host-reclaim actuator's round.  A dry run and a pause write
 * nothing (probes are pageouts too); guests that may not give (mode=off,
 * protect=yes, thrashing) are not scanned. */
static void host_reclaim_round(balancer *b, uint64_t balloon_reclaim)
{
    if (b->dry_run || b->paused || !host_swap_due(b->hswap))
        return; /* nothing to write, or not a scan tick */
    size_t n = 0;
    g_autofree host_swap_target *t = g_new0(host_swap_target, b->guests->len ? b->guests->len : 1);
    for (guint i = 0; i < b->guests->len; i++) {
        guest *g = g_ptr_array_index(b->guests, i);
        if (!reclaim_may_take(&g->view))
            continue;
        t[n++] = (host_swap_target){ g->hv.name, b->backend->qemu_pid ? b->backend->qemu_pid(&b->hv, &g->hv) : -1,
                                     &g->view, &g->hswap };
    }
    host_swap_round r = { &b->host, &b->wm, balloon_reclaim, b->reclaiming };
    host_swap_tick(b->hswap, t, n, &r);
}

/* A guest's need or thrashing verdict began or ended: said, with what
 * showed it (what it is given then is in the balloon moves that follow). */
static void note_verdicts(const guest *g, bool was_need, bool was_thrashing)
{
    const guest_view *v = &g->view;
    if (v->in_need == was_need && v->thrashing == was_thrashing)
        return; /* nothing to say: no sizes formatted, a guest a tick */
    char used[32], avail[32], growth[32];
    size_format(v->used_bytes, used, sizeof(used));
    size_format(v->available_bytes, avail, sizeof(avail));
    size_format((uint64_t)fabs(v->used_growth_bps), growth, sizeof(growth));
    if (v->in_need != was_need)
        log_info("guest %s: %s (used %s, %s%s/s; %s available)", g->hv.name,
                 v->in_need ? g->cls.need_why : "no longer in need", used, v->used_growth_bps < 0 ? "-" : "+",
                 growth, avail);
    if (v->thrashing != was_thrashing)
        log_info("guest %s: %s (swap-in %.0f KiB/s, %.0f major faults/s)", g->hv.name,
                 v->thrashing ? "thrashing" : "no longer thrashing", v->swap_in_bps / 1024, v->major_faults_ps);
}

/* Collect, the host: its memory (or its memory cgroup's) and the
 * watermarks over it; false when either cannot be read (logged). */
static bool collect_host(balancer *b)
{
    if (host_meminfo_read(b->proc_meminfo, b->sys_node_dir, &b->host) < 0) {
        log_err("cannot read %s: skipping this tick", b->proc_meminfo);
        return false;
    }
    if (b->cfg.memory_cgroup[0]) {
        g_autoptr(GError) cerr = NULL;
        host_view cg;
        if (host_cgroup_read(b->cfg.memory_cgroup, b->host.host.total_bytes, &cg, &cerr) < 0) {
            log_err("%s: skipping this tick", cerr->message);
            return false;
        }
        b->host.host = cg;
    }
    g_autoptr(GError) err = NULL;
    if (config_watermarks(&b->cfg, b->host.host.total_bytes, &b->wm, &err) < 0) {
        log_err("%s: skipping this tick", err->message);
        return false;
    }
    return true;
}

/* Collect: the host, then the guests the hypervisor runs; false when
 * either cannot be reached (logged). */
static bool collect(balancer *b)
{
    if (!collect_host(b))
        return false;
    b->backend_up = b->backend->sync(&b->hv) >= 0;
    return b->backend_up; /* the backend logged why; guests are kept for when it returns */
}

/* A reset is a new boot: it gets its size back (the policy) and is judged afresh. */
static void note_reset(guest *g)
{
    if (g->hv.resets > 0) {
        log_info("guest %s: its machine was reset (a reboot)", g->hv.name);
        guest_rebooted(g);
        g->hv.resets = 0;
    }
}

/* Collect, host truth the backend does not have: what a guest's QEMU
 * touched, its host swap-ins and CPU, its working set by host reclaim. */
static void add_host_truth(balancer *b, guest *g, guest_sample *s)
{
    int pid = b->backend->qemu_pid ? b->backend->qemu_pid(&b->hv, &g->hv) : 0;
    s->rss_bytes = qemu_proc_touched_bytes(&g->qproc, pid, s->max_bytes);
    /* and how often its QEMU waits for host swap, and the CPU it
     * uses, once the pid is known to be the QEMU (its RSS was
     * readable) */
    proc_stat_counts pc;
    bool pc_ok = s->rss_bytes >= 0 && qemu_proc_stat(&g->qproc, &pc) == 0;
    s->qemu_major_faults = pc_ok && pc.major_faults <= INT64_MAX ? (int64_t)pc.major_faults : -1;
    s->qemu_cpu_ms = pc_ok && pc.cpu_ms <= INT64_MAX ? (int64_t)pc.cpu_ms : -1;
    /* and what host reclaim measured of its working set, while that
     * is recent: a guest no longer scanned (in need, paused, no
     * pressure without proactive) has none */
    host_swap_guest_stats hs;
    bool ws_fresh = host_swap_guest_stats_get(g->hswap, &hs) && hs.ws_known &&
                    mono_ms() - hs.at_ms <= 3000 * (int64_t)b->cfg.hr_scan_interval;
    s->host_ws_bytes = ws_fresh ? (int64_t)hs.ws_bytes : -1;
}

/* Collect, a guest: what its agent sent, its stats and the host's truth
 * about it; false when it has no stats this tick (logged). */
static bool collect_guest(balancer *b, guest *g, guest_sample *s)
{
    g_autoptr(GError) serr = NULL;
    if (b->backend->agent_drain)
        b->backend->agent_drain(&b->hv, &g->hv, &g->agent, g->view.actual_bytes);
    if (b->backend->sample(&b->hv, &g->hv, s, &serr) < 0) {
        log_debug("guest %s: no stats this tick: %s", g->hv.name, serr->message);
        return false;
    }
    add_host_truth(b, g, s);
    return true;
}

/* State: a guest's sample into its view (core/guest.c), saying what
 * changed: its virtio-mem device, its verdicts, a libvirt job. */
static void ingest_sample(balancer *b, guest *g, guest_sample *s, int64_t now, bool was_need, bool was_thrashing)
{
    /* a virtio-mem device: the guest's size is its balloon's and the device's */
    note_vmem(b, g, guest_fold_vmem(g, s, b->backend->set_vmem != NULL, (double)mono_ms() / 1000.0));
    guest_ingest(g, s, now, (double)mono_ms() / 1000.0, &b->lim, &b->cp);
    note_verdicts(g, was_need, was_thrashing);
    note_job(g, s->job_ms);
    /* balloon changes are sent without waiting: refusals come back here */
    g->balloon_errors += s->balloon_failures;
    b->backend_errors += s->balloon_failures;
}

/* State: a guest's balloon as the policy sees it, going where it was
 * last sent at tick_ms. */
static void see_balloon(balancer *b, guest *g, int64_t tick_ms)
{
    /* a balloon still on its way counts as done (no overshoot while it
     * moves); one that grew on its own, the guest deflated on OOM
     * (deflate-on-oom / libvirt autodeflate): not fought (under
     * mode=off it is the operator's doing) */
    if (guest_balloon_view(g, balloon_heading(b, g, tick_ms), tick_ms - g->last_grow_ms < reissue_ms(b))) {
        char sz_[32];
        size_format(g->view.self_deflated_bytes, sz_, sizeof(sz_));
        log_info("guest %s: deflated its balloon by %s on its own (deflate-on-oom): not fought", g->hv.name, sz_);
    }
}

/* Collect and state, one guest: the view the policy decides on. */
static guest_view guest_round(balancer *b, guest *g, int64_t now, int64_t tick_ms)
{
    note_reset(g);
    bool was_need = g->view.in_need, was_thrashing = g->view.thrashing;
    guest_sample s;
    if (collect_guest(b, g, &s))
        ingest_sample(b, g, &s, now, was_need, was_thrashing);
    else
        g->view.stats_valid = g->view.stats_fresh = false;
    see_balloon(b, g, tick_ms);
    guest_view v = g->view;
    if (g->job_ms >= 0)
        v.stats_valid = v.stats_fresh = false; /* neither gives nor takes while the job runs */
    return v;
}

/* Decide: the policy over every guest's view; the host's reclaiming
 * state said when it changes. */
static void decide(balancer *b, const guest_view *views, size_t n, guest_decision *dec)
{
    policy_input in = { .now_s = (double)mono_ms() / 1000.0, .host = b->host.host, .wm = b->wm,
                        .tun = b->cfg.tun, .n_guests = n, .guests = views };
    policy_output out = { .decisions = dec };
    b->policy->decide(&in, b->policy_state, &out);
    if (out.reclaiming != b->reclaiming)
        log_info("host %s: %s", out.reclaiming ? "below low watermark, reclaiming" : "back above high watermark",
                 out.summary);
    b->reclaiming = out.reclaiming;
    snprintf(b->summary, sizeof(b->summary), "%s", out.summary);
}

/* Act, the balloons: each guest's decision carried out; returns what the
 * decisions take from the guests' balloons (for host reclaim). */
static uint64_t act_balloons(balancer *b, const guest_view *views, const guest_decision *dec, size_t n,
                             int64_t tick_ms)
{
    uint64_t balloon_reclaim = 0;
    assert(b->guests->len == n); /* guests come and go in the backend's sync only */
    for (size_t i = 0; i < n; i++) {
        guest *g = g_ptr_array_index(b->guests, i);
        assert(views[i].name == g->hv.name); /* views[i] and dec[i] are guest i's */
        actuate(b, g, &dec[i], tick_ms, false);
        /* a reset is answered once the answer could be acted on: not while
         * paused, in a dry run or during a libvirt job */
        if (!b->paused && !b->dry_run && g->job_ms < 0)
            g->reboot_pending = false;
        if (dec[i].change && views[i].policy.mode != VM_MODE_OFF && dec[i].target_bytes < views[i].actual_bytes)
            balloon_reclaim += views[i].actual_bytes - dec[i].target_bytes;
    }
    return balloon_reclaim;
}

/* One round: collect, state, decide, act (ARCHITECTURE.md; the report is
 * balancer_tick's); false if it stopped early (the reason is logged). */
static bool tick_round(balancer *b)
{
    if (!collect(b))
        return false;
    int64_t now = time(NULL);
    int64_t tick_ms = mono_ms(); /* where each balloon is going, for the views and the moves alike */
    size_t n = b->guests->len;
    g_autofree guest_view *views = g_new0(guest_view, n ? n : 1);
    g_autofree guest_decision *dec = g_new0(guest_decision, n ? n : 1);
    for (size_t i = 0; i < n; i++)
        views[i] = guest_round(b, g_ptr_array_index(b->guests, i), now, tick_ms);
    decide(b, views, n, dec);
    uint64_t balloon_reclaim = act_balloons(b, views, dec, n, tick_ms);
    /* last resort after ballooning: host swap of cold guest memory */
    host_reclaim_round(b, balloon_reclaim);
    return true;
}

void balancer_tick(balancer *b)
{
    int64_t t0 = mono_ms();
    b->ticks++;
    bool ran = tick_round(b);
    /* the main loop is alive even when the round found nothing to do it
     * with (libvirtd down): /metrics, served from its own thread, shows this
     * standing still when the loop is wedged */
    b->last_tick_unix = (double)g_get_real_time() / 1e6;
    if (ran) {
        double seconds = (double)(mono_ms() - t0) / 1000.0;
        tick_histogram_observe(&b->tick_hist, seconds);
        log_debug("tick %llu: %s (%.3f s)", (unsigned long long)b->ticks, b->summary, seconds);
    }
    publish_snapshot(b); /* report: what /metrics and the control socket render */
}

#include "core/guest.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* Faster than any real device: a guest claiming more is lying. */
#define MAX_SWAP_BPS (64.0 * 1024 * 1024 * 1024)
#define MAX_FAULTS_PS 1e8
/* a balloon this much above both where it was and where we sent it grew on its own */
#define SELF_DEFLATE_SLACK (4ULL * 1024 * 1024)

void guest_init(guest *g, const char *name, const char *uuid)
{
    memset(g, 0, sizeof(*g));
    qemu_proc_init(&g->qproc);
    snprintf(g->hv.name, sizeof(g->hv.name), "%s", name);
    snprintf(g->hv.uuid, sizeof(g->hv.uuid), "%s", uuid);
    vm_policy_default(&g->policy);
    g->disk_read_bps = -1;
    g->qemu_faults_ps = -1;
    g->qemu_cpu = -1;
    g->job_ms = -1;
    g->vmem_asked = UINT64_MAX;
    vmem_track_init(&g->vtrack);
    g->view.name = g->hv.name;
    g->view.uuid = g->hv.uuid;
    g->view.free_page_reporting = g->view.free_page_reporting_used = g->view.deflate_on_oom = -1;
}

uint64_t guest_shown_target(const guest *g)
{
    return g->decided_target ? g->decided_target : g->view.actual_bytes;
}

void guest_bounds(const vm_policy *p, uint64_t max_bytes, const guest_limits *lim,
                  uint64_t *floor, uint64_t *ceiling)
{
    uint64_t c = max_bytes;
    if (p->max_bytes && p->max_bytes < c)
        c = p->max_bytes;
    uint64_t f = p->min_bytes;
    if (!f) {
        f = (uint64_t)((double)max_bytes * lim->default_floor_percent / 100.0);
        if (f < lim->default_floor_min)
            f = lim->default_floor_min;
    }
    if (f > c)
        f = c; /* a floor above the ceiling cannot be honoured: the ceiling wins */
    *floor = f;
    *ceiling = c;
}

/* A guest-reported size, clamped to [0, cap]; counts clamps. */
static uint64_t clamp_size(guest *g, int64_t v, uint64_t cap)
{
    if (v < 0)
        return 0;
    if ((uint64_t)v > cap) {
        g->clamped_values++;
        return cap;
    }
    return (uint64_t)v;
}

/* Rate of a cumulative guest counter; 0 when unknown or reset. */
static double counter_rate(guest *g, int64_t now_v, int64_t prev_v, double dt, double max)
{
    if (now_v < 0 || prev_v < 0 || dt <= 0)
        return 0;
    if (now_v < prev_v) {
        g->counter_resets++; /* guest reboot, or a lie: no evidence either way */
        return 0;
    }
    double r = (double)(now_v - prev_v) / dt;
    if (r > max) {
        g->clamped_values++;
        return max;
    }
    return r;
}

/* The rate of a host-measured counter (what the guest's disks read, its
 * QEMU's major faults and CPU) over the last window seconds or more of
 * its samples: from the newest sample at least that old, else the oldest
 * held (0: since the last sample); fallback with fewer than two. */
static double host_counter_since(const host_counter *c, double window, double fallback)
{
    unsigned from = c->head;
    for (unsigned k = 1; k < c->n; k++) {
        from = (c->head + HOST_RATE_SLOTS - k) % HOST_RATE_SLOTS;
        if (c->at[c->head] - c->at[from] >= window)
            break;
    }
    return from == c->head ? fallback : (double)(c->v[c->head] - c->v[from]) / (c->at[c->head] - c->at[from]);
}

/* Take the counter's sample v at mono, and return its rate over window
 * (host_counter_since); rate when no time has passed or there is no
 * second sample yet; -1 when it is not measured; 0 when it went backwards
 * (a new QEMU, a replaced disk: its samples start over). */
static double host_counter_rate(host_counter *c, int64_t v, double mono, double rate, double window)
{
    if (v < 0) {
        c->n = 0;
        return -1;
    }
    if (c->n && v < c->v[c->head]) {
        c->n = 0;
        rate = 0;
    }
    if (c->n && mono <= c->at[c->head])
        return rate;
    c->head = (c->head + 1) % HOST_RATE_SLOTS;
    c->v[c->head] = v;
    c->at[c->head] = mono;
    if (c->n < HOST_RATE_SLOTS)
        c->n++;
    return host_counter_since(c, window, rate);
}

static bool went_back(int64_t now_v, int64_t prev_v)
{
    return now_v >= 0 && prev_v >= 0 && now_v < prev_v;
}

/* The report a guest's rates are taken from: the newest before cur at
 * least GUEST_RATE_WINDOW_S older, else the oldest held; NULL none. */
static const guest_sample *rate_base(const guest *g)
{
    const guest_sample *b = NULL;
    for (unsigned k = 0; k < g->past_n; k++) {
        b = &g->past[(g->past_head + GUEST_PAST_SLOTS - k) % GUEST_PAST_SLOTS];
        if (g->cur.last_update - b->last_update >= GUEST_RATE_WINDOW_S)
            break;
    }
    return b;
}

/* A swap-in or a major fault is a read from the guest's disk: the guest
 * cannot claim more of them than its disks, as the host measures them,
 * could have served (with slack for timing).  Guests whose disk reads
 * the host cannot see keep their claims.
 *
 * Except a guest that is short by the host's account: what it has left
 * (its balloon less its used memory, which is clamped to what its QEMU
 * touched) is below its reserve.  Its swap-ins may be served by no disk
 * at all (zram, Fedora's default; zswap; a virtiofs, NFS or iSCSI root
 * the host does not see as a disk), and capping them to zero would leave
 * it thrashing in its own memory forever.  Believing it costs little: a
 * guest that short has no free memory or cache a donor tier would take,
 * and what it is given on its claims is bounded by use (split-lru's
 * need_allowance: two steps, then only as fast as its QEMU touches
 * memory), so a liar gains two steps at most. */
#define DISK_EVIDENCE_SLACK_BPS (64.0 * 1024) /* below the thrash thresholds */
static double backed(guest *g, const guest_view *v, uint64_t reserve, double claimed, double disk_bps,
                     double bytes_each)
{
    if (disk_bps < 0)
        return claimed;
    double cap = (2.0 * disk_bps + DISK_EVIDENCE_SLACK_BPS) / bytes_each;
    if (claimed <= cap)
        return claimed;
    if (v->actual_bytes - v->used_bytes < reserve) {
        g->unbacked_short++;
        return claimed;
    }
    g->unbacked_claims++;
    return cap;
}

/* Used memory in one report: the guest's MemTotal minus its MemAvailable,
 * both from the same report (the balloon size the host knows changes
 * before the guest reports it), bounded by the host's balloon size cap.
 * A guest whose balloon has deflate-on-oom keeps its MemTotal when the
 * balloon inflates (the balloon's pages count as used): once its MemTotal
 * has stayed above the balloon for DOO_REPORTS reports, the balloon size
 * bounds it instead. */
#define DOO_SLACK (64.0 * 1024 * 1024)
#define DOO_REPORTS 3
static double used_of(const guest_sample *s, uint64_t cap, bool doo)
{
    double actual = s->actual_bytes > 0 ? (double)s->actual_bytes : 0;
    double total = s->total_bytes > 0 ? (double)s->total_bytes : actual;
    if (doo && total > actual)
        total = actual;
    if (cap && total > (double)cap)
        total = (double)cap;
    double avail = s->available_bytes > 0 ? (double)s->available_bytes : 0;
    return total > avail ? total - avail : 0;
}

void guest_rebooted(guest *g)
{
    memset(&g->cls, 0, sizeof(g->cls));
    g->have_prev = false;
    g->past_n = 0;
    g->total_above = 0;
    g->reset_report = g->have_cur && g->cur.last_update > 0 ? g->cur.last_update : 1;
    g->reboot_pending = true;
    /* QEMU unplugs all of a virtio-mem device at a reset; the guest's
     * driver plugs the requested size again once it is loaded */
    vmem_track_init(&g->vtrack);
}

vmem_state guest_fold_vmem(guest *g, guest_sample *s, bool resizable, double now)
{
    g->vmem = s->vmem;
    g->vmem_resized = resizable && s->vmem.devices && s->vmem.id[0];
    if (!g->vmem_resized)
        return VMEM_FOLLOWING;
    g->base_bytes = s->max_bytes > 0 ? (uint64_t)s->max_bytes : 0;
    g->balloon_bytes = s->actual_bytes > 0 ? (uint64_t)s->actual_bytes : 0;
    if (!g->home_bytes)
        g->home_bytes = g->base_bytes + s->vmem.requested_bytes;
    vmem_state st = vmem_track_observe(&g->vtrack, s->vmem.plugged_bytes, s->vmem.requested_bytes, now);
    vmem_device d = guest_vmem_device(g, now);
    if (s->actual_bytes > 0)
        s->actual_bytes += (int64_t)s->vmem.plugged_bytes;
    s->max_bytes = (int64_t)vmem_reach(&d);
    return st;
}

vmem_device guest_vmem_device(const guest *g, double now)
{
    return (vmem_device){ .base_bytes = g->base_bytes, .block_bytes = g->vmem.block_bytes,
                          .max_bytes = g->vmem.max_bytes, .plugged_bytes = g->vmem.plugged_bytes,
                          .held = vmem_track_held(&g->vtrack, now) };
}

/* The page cache a guest can drop.  virtio-balloon's disk-caches is the
 * guest's Cached, which counts Shmem (tmpfs, SysV and POSIX shared
 * memory: PostgreSQL's shared_buffers, Oracle's SGA), swap-backed pages
 * that no cache drop frees.  MemAvailable counts the file LRU pages (and
 * reclaimable slab) above the low watermarks and never Shmem, so what it
 * holds beyond MemFree bounds the droppable cache from above and Shmem
 * out; it is a little low (the watermarks), which errs on the side of
 * taking less. */

uint64_t reclaimable_cache(uint64_t cache, uint64_t available, uint64_t free_bytes)
{
    uint64_t beyond_free = available > free_bytes ? available - free_bytes : 0;
    return cache < beyond_free ? cache : beyond_free;
}

/* Host-measured rates: its disk reads (tick to tick), its QEMU's major faults and CPU (over a window). */
static void host_rates(guest *g, const guest_sample *s, double mono)
{
    g->disk_read_bps = host_counter_rate(&g->disk, s->disk_read_bytes, mono, g->disk_read_bps, 0);
    g->qemu_faults_ps = host_counter_rate(&g->qflt, s->qemu_major_faults, mono, g->qemu_faults_ps, HOST_RATE_WINDOW_S);
    /* a QEMU whose CPU time went backwards is a new one: unknown, not idle */
    bool cpu_reset = s->qemu_cpu_ms >= 0 && g->qcpu.n && s->qemu_cpu_ms < g->qcpu.v[g->qcpu.head];
    double cpu_ms_ps = host_counter_rate(&g->qcpu, s->qemu_cpu_ms, mono, g->qemu_cpu < 0 ? -1 : g->qemu_cpu * 1000.0,
                                         HOST_RATE_WINDOW_S);
    g->qemu_cpu = cpu_ms_ps < 0 || cpu_reset ? -1 : cpu_ms_ps / 1000.0;
}

/* Reset detection: the last report becomes the previous; the rate window starts over where reports broke. */
static void keep_previous(guest *g, const guest_sample *s)
{
    /* (a report from before a reset is no "previous" of the booted guest's) */
    if (!g->have_cur || s->last_update <= 0 || (g->reset_report && g->cur.last_update <= g->reset_report))
        return;
    g->prev = g->cur;
    g->have_prev = g->prev.last_update > 0;
    /* the reports rates are taken over run unbroken: they start over
     * at a sample without stats, a clock that went back (a migration
     * to a host behind), or a counter that did (a reboot without a
     * reset event) */
    if (!g->have_prev || s->last_update < g->prev.last_update || went_back(s->swap_in_bytes, g->prev.swap_in_bytes) ||
        went_back(s->swap_out_bytes, g->prev.swap_out_bytes) || went_back(s->major_faults, g->prev.major_faults))
        g->past_n = 0;
    if (g->have_prev) {
        g->past_head = (g->past_head + 1) % GUEST_PAST_SLOTS;
        g->past[g->past_head] = g->prev;
        g->past_n += g->past_n < GUEST_PAST_SLOTS;
    }
}

/* Whether its MemTotal stayed above the balloon for DOO_REPORTS reports (deflate-on-oom: used_of). */
static bool deflate_on_oom_seen(guest *g, const guest_sample *s, bool fresh_report)
{
    if (fresh_report && s->total_bytes > 0 && s->actual_bytes > 0)
        g->total_above = (double)s->total_bytes > (double)s->actual_bytes + DOO_SLACK ? g->total_above + 1 : 0;
    return g->total_above >= DOO_REPORTS;
}

/* Host truth: the balloon's size, the domain maximum, and the floor and ceiling from them. */
static void host_sizes(guest *g, guest_view *v, const guest_sample *s, const guest_limits *lim)
{
    v->actual_bytes = s->actual_bytes > 0 ? (uint64_t)s->actual_bytes : 0;
    v->max_bytes = s->max_bytes > 0 ? (uint64_t)s->max_bytes : v->actual_bytes;
    if (v->actual_bytes > v->max_bytes)
        v->max_bytes = v->actual_bytes;
    v->policy = g->policy;
    guest_bounds(&g->policy, v->max_bytes, lim, &v->floor_bytes, &v->ceiling_bytes);
    /* what the actuator clamps a target to (within_bounds) */
    assert(v->actual_bytes <= v->max_bytes && v->floor_bytes <= v->ceiling_bytes && v->ceiling_bytes <= v->max_bytes);
}

/* Clamp to host truth: the sizes the guest claims, bounded by what the host knows the guest has. */
static void clamp_claims(guest *g, guest_view *v, const guest_sample *s, int64_t now, const guest_limits *lim,
                         bool doo)
{
    bool age_ok = s->last_update > 0 && now - s->last_update <= (int64_t)lim->stale_seconds;
    v->stats_valid = age_ok && s->available_bytes >= 0 && v->actual_bytes > 0;
    /* (MemFree may legitimately exceed MemAvailable: only the balloon
     * size, which the host knows, bounds them) */
    v->available_bytes = clamp_size(g, s->available_bytes, v->actual_bytes);
    v->free_bytes = clamp_size(g, s->free_bytes, v->actual_bytes);
    v->cache_bytes = clamp_size(g, s->cache_bytes, v->actual_bytes);
    v->reclaimable_cache_bytes = reclaimable_cache(v->cache_bytes, v->available_bytes, v->free_bytes);
    v->used_bytes = (uint64_t)used_of(s, v->actual_bytes, doo);
}

/* Clamp to host truth: used memory, to what its QEMU touched; returns what it never touched. */
static uint64_t clamp_to_touched(guest *g, guest_view *v, const guest_sample *s)
{
    /* the host's check: memory its QEMU never touched (neither resident
     * nor swapped out) is not in use, whatever the guest says.  QEMU's
     * own memory makes the bound loose; memory outside the guest's
     * MemTotal (a crashkernel reservation) is left out of it, up to an
     * eighth.  It bounds used memory (need) and swap-in claims below,
     * not what a donor is taken here: zero pages after a migration are
     * untouched and used (split-lru counts untouched free memory as no
     * supply itself, which only takes less) */
    uint64_t untouched = s->rss_bytes > 0 && (uint64_t)s->rss_bytes < v->actual_bytes
                             ? v->actual_bytes - (uint64_t)s->rss_bytes : 0;
    if (untouched && s->total_bytes > 0 && (uint64_t)s->total_bytes < v->actual_bytes) {
        uint64_t outside = v->actual_bytes - (uint64_t)s->total_bytes;
        outside = outside < v->actual_bytes / 8 ? outside : v->actual_bytes / 8;
        untouched = untouched > outside ? untouched - outside : 0;
    }
    if (v->used_bytes > v->actual_bytes - untouched) {
        g->clamped_values++;
        v->used_bytes = v->actual_bytes - untouched;
    }
    /* guest values never exceed what the host measured (backed: actual less used) */
    assert(v->used_bytes <= v->actual_bytes && v->available_bytes <= v->actual_bytes &&
           v->free_bytes <= v->actual_bytes && v->cache_bytes <= v->actual_bytes);
    return untouched;
}

/* What its agent and the host measured, into the view. */
static void measured(guest *g, guest_view *v, const guest_sample *s, double mono, const guest_limits *lim)
{
    v->agent_fresh = agent_fresh(&g->agent, mono, (double)lim->stale_seconds);
    v->agent_refault_ps = v->agent_fresh ? g->agent.refault_anon_ps + g->agent.refault_file_ps : 0;
    v->agent_refault_file_ps = v->agent_fresh ? g->agent.refault_file_ps : 0;
    v->agent_steal_file_ps = v->agent_fresh ? g->agent.pgsteal_file_ps : 0;
    v->agent_psi_some = v->agent_fresh ? g->agent.cur.psi_some_avg10 : -1;
    v->agent_hint_streaming = v->agent_fresh && g->agent.cur.hint_streaming;
    v->disk_read_bps = g->disk_read_bps; /* host-measured: classify reads it */
    v->host_faults_ps = g->qemu_faults_ps;
    v->free_page_reporting = s->free_page_reporting;
    v->free_page_reporting_used = s->free_page_reporting_used;
    v->deflate_on_oom = s->deflate_on_oom;
    v->host_rss_bytes = s->rss_bytes;
    v->host_ws_bytes = s->host_ws_bytes;
}

/* The guest's memory host reclaim found idle for the cold age, or put in host swap. */
static uint64_t idle_bytes(const guest_view *v, const guest_sample *s)
{
    /* host reclaim's view: memory resident but idle for the cold age, or
     * in host swap, is not what a guest short of memory would leave
     * alone.  Half of it idle bounds swap-in claims as untouched memory
     * does (half, not a quarter: the probe source sees a chunk through a
     * few pages and can take a sparsely used one for idle) */
    return s->host_ws_bytes >= 0 && (uint64_t)s->host_ws_bytes < v->actual_bytes
               ? v->actual_bytes - (uint64_t)s->host_ws_bytes : 0;
}

/* Swap-in cross-check: swap-in and fault rates from base, backed by the host's disk reads since. */
static void backed_rates(guest *g, guest_view *v, const guest_sample *base, double wdt, int64_t now,
                         const classify_params *cp)
{
    /* (the disk reads from the base report on, to now: they cover the
     * guest's span, which ends at its last report; with one disk sample
     * held, its rate as the tick took it, -1 unmeasured) */
    double disk_bps = host_counter_since(&g->disk, (double)(now - base->last_update), g->disk_read_bps);
    uint64_t reserve = guest_reserve(v, cp->need_reserve_percent, cp->need_reserve_min);
    v->swap_in_bps = backed(g, v, reserve, counter_rate(g, g->cur.swap_in_bytes, base->swap_in_bytes, wdt, MAX_SWAP_BPS),
                            disk_bps, 1);
    v->swap_out_bps = counter_rate(g, g->cur.swap_out_bytes, base->swap_out_bytes, wdt, MAX_SWAP_BPS);
    v->major_faults_ps = backed(g, v, reserve,
                                counter_rate(g, g->cur.major_faults, base->major_faults, wdt, MAX_FAULTS_PS),
                                disk_bps, 4096);
}

/* Events since its last report: an OOM kill, allocation stalls (its word and its agent's). */
static void event_rates(guest *g, guest_view *v, double dt)
{
    /* the guest's own word, and only that: an OOM kill or a stall makes
     * it in need (policies/classify.c), and what need gets is bounded by
     * use like any claim (split-lru's need_allowance) */
    v->oom_killed = counter_rate(g, g->cur.oom_kills, g->prev.oom_kills, dt, MAX_FAULTS_PS) > 0;
    v->alloc_stalls_ps = counter_rate(g, g->cur.alloc_stalls, g->prev.alloc_stalls, dt, MAX_FAULTS_PS);
    if (v->agent_fresh) { /* the agent says the same from /proc/vmstat (any QEMU) */
        v->oom_killed = v->oom_killed || g->agent.oom_kill_ps > 0;
        v->alloc_stalls_ps = v->alloc_stalls_ps > g->agent.alloc_stall_ps ? v->alloc_stalls_ps
                                                                           : g->agent.alloc_stall_ps;
    }
}

/* Rates over the window of its reports: swap-ins, faults, used memory's growth; events. */
static void window_rates(guest *g, guest_view *v, int64_t now, const classify_params *cp, bool doo,
                         uint64_t untouched, uint64_t idle)
{
    /* rates over GUEST_RATE_WINDOW_S (less for the first reports held),
     * backed by the disk reads the host measured over that span;
     * events since its last report */
    const guest_sample *base = rate_base(g);
    double dt = (double)(g->cur.last_update - g->prev.last_update);
    double wdt = (double)(g->cur.last_update - base->last_update);
    backed_rates(g, v, base, wdt, now, cp);
    event_rates(g, v, dt);
    /* a guest with a quarter of its memory untouched is under no
     * memory pressure: its swap-ins (if any) are not the host's to
     * answer (a cgroup limit inside it, or a lie).  A quarter: a
     * thrashing guest just given a step (10%) is well below it.  Not
     * counted as unbacked: an honest guest's cgroup swaps this way */
    if ((untouched > v->actual_bytes / 4 || idle > v->actual_bytes / 2) &&
        (v->swap_in_bps > 0 || v->major_faults_ps > 0)) {
        v->swap_in_bps = v->major_faults_ps = 0;
    }
    v->used_growth_bps = wdt > 0 ? (used_of(&g->cur, v->max_bytes, doo) - used_of(base, v->max_bytes, doo)) / wdt : 0;
}

/* Classification: its verdicts (classify_update's) into the view. */
static void verdicts(guest *g, guest_view *v, bool fresh_report)
{
    v->thrashing = g->cls.thrashing;
    v->streaming = g->cls.streaming;
    v->filling = g->cls.filling;
    v->in_need = g->cls.need;
    /* a need is granted once, on the report that showed it */
    v->need_bytes = fresh_report ? g->cls.need_bytes : 0;
    v->peak_used_bytes = (uint64_t)g->cls.peak_used;
    v->name = g->hv.name;
    v->uuid = g->hv.uuid;
}

/* After a reset: no stats until the booted guest reports; fresh or not. */
static void judge_after_reset(guest *g, guest_view *v, const guest_sample *s, bool fresh_report)
{
    /* a report from before a reset describes the guest that was: the
     * booting one has none until its balloon driver reports */
    if (g->reset_report && s->last_update <= g->reset_report)
        v->stats_valid = false;
    else
        g->reset_report = 0;
    v->stats_fresh = v->stats_valid && fresh_report;
}

void guest_ingest(guest *g, const guest_sample *s, int64_t now, double mono, const guest_limits *lim,
                  const classify_params *cp)
{
    host_rates(g, s, mono);
    guest_view *v = &g->view;
    bool fresh_report = !g->have_cur || s->last_update != g->cur.last_update;
    if (fresh_report)
        keep_previous(g, s);
    bool doo = deflate_on_oom_seen(g, s, fresh_report);
    g->cur = *s;
    g->have_cur = true;

    host_sizes(g, v, s, lim);
    clamp_claims(g, v, s, now, lim, doo);
    uint64_t untouched = clamp_to_touched(g, v, s);
    measured(g, v, s, mono, lim);
    uint64_t idle = idle_bytes(v, s);

    if (fresh_report && g->have_prev) {
        window_rates(g, v, now, cp, doo, untouched, idle);
        classify_update(&g->cls, v, cp);
    } else if (!v->stats_valid) {
        v->swap_in_bps = v->swap_out_bps = v->major_faults_ps = v->used_growth_bps = v->alloc_stalls_ps = 0;
        v->oom_killed = false;
    } else {
        v->oom_killed = false; /* a kill is an event: told once, on the report that counted it */
    }
    verdicts(g, v, fresh_report);
    judge_after_reset(g, v, s, fresh_report);
}

uint64_t guest_balloon_view(guest *g, uint64_t heading, bool grow_asked_lately)
{
    guest_view *v = &g->view;
    v->pending_target_bytes = heading != v->actual_bytes ? heading : 0;
    v->self_deflated_bytes = 0;
    if (v->stats_valid && g->seen_actual && g->last_target && v->policy.mode != VM_MODE_OFF &&
        !grow_asked_lately && v->actual_bytes > g->seen_actual + SELF_DEFLATE_SLACK &&
        v->actual_bytes > g->last_target + SELF_DEFLATE_SLACK) {
        v->self_deflated_bytes = v->actual_bytes - g->seen_actual;
        g->self_deflations++;
        g->last_target = v->actual_bytes;
        v->pending_target_bytes = 0;
    }
    g->seen_actual = v->actual_bytes;
    v->rebooted = g->reboot_pending;
    return v->self_deflated_bytes;
}

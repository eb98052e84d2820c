/*
 * mom: oVirt MoM's balloon policy as upstream ships it, the baseline we
 * compare split-lru against.  Source: github.com/oVirt/mom, doc/balloon.rules
 * at HEAD (unchanged since commit e0f3d3b, 2013-11-26), its defaults in
 * doc/mom-balloon.conf, mom/Entity.py (StatAvg) and mom/PolicyEngine.py.
 *
 * The rules, quoted (Lisp-like MoM policy language):
 *
 *   (defvar pressure_threshold 0.20)  (defvar pressure_critical 0.05)
 *   (defvar min_guest_free_percent 0.20)
 *   (defvar max_balloon_change_percent 0.05)
 *   (defvar min_balloon_change_percent 0.0025)
 *   (def change_big_enough (guest new_val)
 *       (if (> (abs (- new_val guest.balloon_cur))
 *              (* min_balloon_change_percent guest.balloon_cur)) 1 0))
 *   (def shrink_guest (guest) {
 *       (if (<= host_free_percent pressure_critical)
 *           (defvar guest_free_percent (+ -0.05 host_free_percent))
 *           (defvar guest_free_percent (* min_guest_free_percent
 *                                       (/ host_free_percent pressure_threshold))))
 *       (defvar guest_used_mem (- (guest.StatAvg "balloon_cur") (guest.StatAvg "mem_unused")))
 *       (defvar balloon_min (max guest.balloon_min (+ guest_used_mem
 *                              (* guest_free_percent guest.balloon_cur))))
 *       (defvar balloon_size (* guest.balloon_cur (- 1 max_balloon_change_percent)))
 *       (if (< balloon_size balloon_min) (set balloon_size balloon_min) 0)
 *       (if (and (<= balloon_size guest.balloon_cur) (change_big_enough guest balloon_size))
 *           (guest.Control "balloon_target" balloon_size) 0) })
 *   (def grow_guest (guest) {
 *       (if (< guest.balloon_cur guest.balloon_max) {
 *           (defvar guest_used_mem (- (guest.StatAvg "balloon_cur") (guest.StatAvg "mem_unused")))
 *           (defvar balloon_min (max guest.balloon_min (+ guest_used_mem
 *                                  (* min_guest_free_percent guest.balloon_cur))))
 *           (defvar balloon_size (* guest.balloon_cur (+ 1 max_balloon_change_percent)))
 *           (if (< balloon_size balloon_min) (set balloon_size balloon_min) 0)
 *           (if (> balloon_size guest.balloon_max) (set balloon_size guest.balloon_max) 0)
 *           (if (change_big_enough guest balloon_size)
 *               (guest.Control "balloon_target" balloon_size) 0) } 0) })
 *   (defvar host_free_percent (/ (Host.StatAvg "mem_free") Host.mem_available))
 *   (if (< host_free_percent pressure_threshold)
 *       (with Guests guest (shrink_guest guest))
 *       (with Guests guest (grow_guest guest)))
 *
 * Inputs, as MoM's collectors define them: Host mem_free = MemFree + Buffers
 * + Cached and mem_available = MemTotal (mom/Collectors/HostMemory.py);
 * guest mem_unused = the balloon driver's "unused" (MemFree: page cache
 * counts as used), balloon_cur/balloon_max = current and maximum memory,
 * balloon_min = the guest's guaranteed memory (libvirt <memtune>
 * <min_guarantee>; here the guest's floor).  StatAvg is the mean over the
 * monitor's history of sample-history-length (10) samples; host and guest
 * monitors sample every 5 s and the policy engine sleeps 10 s before each
 * run (doc/mom-balloon.conf: host-monitor-interval 5,
 * guest-monitor-interval 5, policy-engine-interval 10, sample-history-length
 * 10).  This policy keeps that cadence whatever balancerd's tick is: it
 * samples when 5 s have passed (policy_input.now_s) and decides when 10 s
 * have, and between those it asks for no change.  Guests without balloon
 * stats are skipped, as MoM's guest monitor drops them.
 *
 * mom-vdsm: the variant oVirt runs in production, from github.com/oVirt/vdsm
 * static/etc/vdsm/mom.d/ (00-defines.policy, 02-balloon.policy) and
 * static/etc/vdsm/mom.conf.in, at HEAD (fd4b0df, 2026-06).  Differences
 * from doc/balloon.rules, quoted:
 *   - grow_guest scales the free target with host pressure as shrink does:
 *       (if (<= host_free_percent pressure_critical)
 *           (defvar guest_free_percent (+ -0.05 host_free_percent))
 *           (defvar guest_free_percent (* min_guest_free_percent
 *                                       (/ host_free_percent pressure_threshold))))
 *     and uses it in (+ guest_used_mem (* guest_free_percent guest.balloon_cur));
 *   - shrinking is gated by the engine's switch:
 *       (if (and (< host_free_percent pressure_threshold) balloonEnabled)
 *           (shrink_guest g) (grow_guest g))
 *     00-defines.policy sets (defvar balloonEnabled 0) and the oVirt engine
 *     sets it to 1 through setMOMPolicyParameters when the cluster has
 *     "memory balloon optimization" on; this baseline is that cluster
 *     (with it off, MoM-in-vdsm only ever deflates);
 *   - guests without stats are skipped with
 *       (if (valid guest.balloon_cur (guest.Stat "mem_unused")) ...)
 *   - a QoS rule after the balloon rules lifts any guest below its guarantee:
 *       (def guest_qos (quest) { (if (< guest.balloon_cur guest.balloon_min)
 *           (guest.Control "balloon_target" guest.balloon_min) 0) })
 *       (with Guests guest (guest_qos guest))
 *   - mom.conf.in: host-monitor-interval 15, guest-monitor-interval 15,
 *     policy-engine-interval 15, sample-history-length 10.
 * vdsm's mem_unused is libvirt's balloon "unused" as in MoM
 * (lib/vdsm/virt/vmstats.py: mem_stats['mem_unused'] = 'balloon.unused').
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/guest_table.h"
#include "policies/policy.h"

#define MOM_PRESSURE_THRESHOLD 0.20
#define MOM_PRESSURE_CRITICAL 0.05
#define MOM_MIN_GUEST_FREE_PERCENT 0.20
#define MOM_MAX_BALLOON_CHANGE_PERCENT 0.05
#define MOM_MIN_BALLOON_CHANGE_PERCENT 0.0025
#define MOM_HISTORY 10          /* sample-history-length, both variants */
#define MOM_MAX_TRACKED 4096

/* What differs between MoM as upstream ships it and MoM inside vdsm. */
typedef struct {
    const char *name;
    double sample_s;            /* host-/guest-monitor-interval */
    double policy_s;            /* policy-engine-interval */
    bool grow_scales_free;      /* grow_guest uses the pressure-scaled guest_free_percent */
    bool guest_qos;             /* lift a guest below balloon_min back to it */
    decision_reason reasons;    /* its first reason: REASON_MOM_NO_CHANGE or the vdsm twin */
} mom_variant;

static const mom_variant variant_mom = { "mom", 5.0, 10.0, false, false, REASON_MOM_NO_CHANGE };
static const mom_variant variant_vdsm = { "mom-vdsm", 15.0, 15.0, true, true, REASON_MOM_VDSM_NO_CHANGE };

/* A variant's reason: REASON_MOM_<what> for mom, its twin for mom-vdsm. */
static decision_reason mom_reason(const mom_variant *v, decision_reason what)
{
    return v->reasons + (what - REASON_MOM_NO_CHANGE);
}

typedef struct {
    double v[MOM_HISTORY];
    unsigned n, next;
} ring;

typedef struct {
    guest_table_key key;    /* first: the table's */
    ring cur, unused;
} mom_guest;

typedef struct {
    const mom_variant *v;
    ring host_free;
    guest_table guests;     /* mom_guest */
    bool started;
    double next_sample_s, next_policy_s;
} mom_state;

static void ring_push(ring *r, double v)
{
    r->v[r->next] = v;
    r->next = (r->next + 1) % MOM_HISTORY;
    if (r->n < MOM_HISTORY)
        r->n++;
}

static double ring_avg(const ring *r)
{
    double s = 0;
    for (unsigned i = 0; i < r->n; i++)
        s += r->v[i];
    return r->n ? s / r->n : 0;
}

static void *state_new_variant(const mom_variant *v)
{
    mom_state *s = calloc(1, sizeof(mom_state));
    if (s) {
        s->v = v;
        guest_table_init(&s->guests, sizeof(mom_guest), MOM_MAX_TRACKED);
    }
    return s;
}

static void *mom_state_new(void)
{
    return state_new_variant(&variant_mom);
}

static void *vdsm_state_new(void)
{
    return state_new_variant(&variant_vdsm);
}

static void mom_state_free(void *p)
{
    mom_state *s = p;
    if (s)
        guest_table_clear(&s->guests);
    free(s);
}

static bool change_big_enough(double cur, double target)
{
    return fabs(target - cur) > MOM_MIN_BALLOON_CHANGE_PERCENT * cur;
}

/* The monitors: one sample of the host and of every guest with stats. */
static void mom_sample(mom_state *s, const policy_input *in)
{
    ring_push(&s->host_free, (double)(in->host.free_bytes + in->host.cached_bytes));
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        mom_guest *h = guest_table_get(&s->guests, i, guest_key_of(g));
        if (!h)
            continue;
        if (!g->stats_valid)
            continue; /* no row this time; the history stays */
        ring_push(&h->cur, (double)g->actual_bytes);
        ring_push(&h->unused, (double)g->free_bytes);
    }
    guest_table_sweep(&s->guests); /* forget guests that are gone */
}

/* The free memory a guest should keep, scaled by host pressure. */
static double scaled_guest_free_percent(double host_free_percent)
{
    return host_free_percent <= MOM_PRESSURE_CRITICAL
               ? -0.05 + host_free_percent
               : MOM_MIN_GUEST_FREE_PERCENT * (host_free_percent / MOM_PRESSURE_THRESHOLD);
}

/* shrink_guest: the target, or a negative value for no change. */
static double shrink_guest(const guest_view *g, const mom_guest *h, double host_free_percent)
{
    double cur = (double)g->actual_bytes;
    double guest_free_percent = scaled_guest_free_percent(host_free_percent);
    double used = ring_avg(&h->cur) - ring_avg(&h->unused);
    double balloon_min = fmax((double)g->floor_bytes, used + guest_free_percent * cur);
    double balloon_size = cur * (1 - MOM_MAX_BALLOON_CHANGE_PERCENT);
    if (balloon_size < balloon_min)
        balloon_size = balloon_min;
    return balloon_size <= cur && change_big_enough(cur, balloon_size) ? balloon_size : -1;
}

/* grow_guest: the target, or a negative value for no change. */
static double grow_guest(const guest_view *g, const mom_guest *h, double guest_free_percent)
{
    double cur = (double)g->actual_bytes, balloon_max = (double)g->ceiling_bytes;
    if (!(cur < balloon_max))
        return -1;
    double used = ring_avg(&h->cur) - ring_avg(&h->unused);
    double balloon_min = fmax((double)g->floor_bytes, used + guest_free_percent * cur);
    double balloon_size = cur * (1 + MOM_MAX_BALLOON_CHANGE_PERCENT);
    if (balloon_size < balloon_min)
        balloon_size = balloon_min;
    if (balloon_size > balloon_max)
        balloon_size = balloon_max;
    return change_big_enough(cur, balloon_size) ? balloon_size : -1;
}

static void mom_decide(const policy_input *in, void *state, policy_output *out)
{
    mom_state *s = state;
    const mom_variant *v = s->v;
    if (!s->started) {
        s->started = true;
        s->next_sample_s = in->now_s;
        s->next_policy_s = in->now_s + v->policy_s; /* the engine sleeps first */
    }
    /* MoM's threads keep their own intervals; we are called every tick, so
     * each deadline is met at the first tick within CADENCE_SLACK_S of it
     * and the schedule advances by the interval, not from the tick */
    if (cadence_due(&s->next_sample_s, v->sample_s, in->now_s))
        mom_sample(s, in);
    bool run = cadence_due(&s->next_policy_s, v->policy_s, in->now_s);
    double total = (double)in->host.total_bytes;
    double host_free_percent = total > 0 && s->host_free.n ? ring_avg(&s->host_free) / total : 1.0;
    bool pressure = host_free_percent < MOM_PRESSURE_THRESHOLD;
    double grow_free_percent =
        v->grow_scales_free ? scaled_guest_free_percent(host_free_percent) : MOM_MIN_GUEST_FREE_PERCENT;
    for (size_t i = 0; i < in->n_guests; i++) {
        const guest_view *g = &in->guests[i];
        guest_decision *d = &out->decisions[i];
        decision_reason why = mom_reason(v, run ? REASON_MOM_NO_CHANGE : REASON_MOM_BETWEEN_RUNS);
        decision_set(d, g->actual_bytes, g->actual_bytes, 1, why);
        if (g->policy.mode == VM_MODE_OFF) {
            d->reason = REASON_MODE_OFF;
            continue;
        }
        if (!run)
            continue;
        const mom_guest *h = guest_table_lookup(&s->guests, i, guest_key_of(g));
        double target = -1;
        if (h && h->cur.n && g->stats_valid) { /* MoM skips guests without balloon stats */
            target = pressure ? shrink_guest(g, h, host_free_percent) : grow_guest(g, h, grow_free_percent);
            why = mom_reason(v, !pressure                                    ? REASON_MOM_GROW
                                : host_free_percent <= MOM_PRESSURE_CRITICAL ? REASON_MOM_SHRINK_CRITICAL
                                                                             : REASON_MOM_SHRINK);
        }
        /* vdsm's guest_qos runs after the balloon rules; its Control wins */
        if (v->guest_qos && g->actual_bytes < g->floor_bytes) {
            target = (double)g->floor_bytes;
            why = mom_reason(v, REASON_MOM_GUEST_QOS);
        }
        if (target >= 0)
            decision_set(d, g->actual_bytes, (uint64_t)target, 1, why);
    }
    out->reclaiming = pressure;
    snprintf(out->summary, sizeof(out->summary), "%s: host free %.1f%% (%s)", v->name, host_free_percent * 100,
             pressure ? "pressure" : "no pressure");
}

const policy_ops policy_mom = {
    .name = "mom",
    .description = "oVirt MoM's balloon rules and cadence, as upstream ships them (baseline for comparison)",
    .state_new = mom_state_new,
    .state_free = mom_state_free,
    .decide = mom_decide,
};

const policy_ops policy_mom_vdsm = {
    .name = "mom-vdsm",
    .description = "oVirt's production MoM policy (vdsm mom.d, balloon optimization on), 15 s cadence (baseline)",
    .state_new = vdsm_state_new,
    .state_free = mom_state_free,
    .decide = mom_decide,
};

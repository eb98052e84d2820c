/*
 * The balloon actuator (ARCHITECTURE.md, step 4): a decision carried out
 * for one guest, clamped to its floor and ceiling, through its balloon or
 * split with its virtio-mem device; and where a balloon is going
 * meanwhile.  For core's files only.
 */
#include "core/actuate.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "config/size_parse.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"

/* A balloon asked to move counts as on its way there for this long (a
 * target is not asked for again meanwhile, and the policy counts it as
 * arrived): a 512 MiB inflation under TCG takes seconds */
#define REISSUE_S 15LL /* ... or three ticks, when longer */

/* How long a balloon asked to move counts as on its way (REISSUE_S). */
int64_t reissue_ms(const balancer *b)
{
    int64_t ticks3 = 3LL * b->cfg.tick_seconds;
    return (ticks3 > REISSUE_S ? ticks3 : REISSUE_S) * 1000;
}

/* A balloon within this of its target has arrived: QEMU sizes it in
 * pages and libvirt in KiB, so a target in bytes is rarely met exactly
 * (counted as still on its way, it would hold the guest's next move for
 * REISSUE_S). */
#define ARRIVED_SLACK (1024 * 1024)

/* Where the guest's balloon is going at now_ms: the target asked for
 * last, while it may still be on its way, else where it is.  A tick asks
 * this at one moment for both the policy's view and the move it makes:
 * asked twice, a move's REISSUE_S could end between the two, and the
 * policy's "hold where it is going" be sent again as a new move (a dead
 * guest's balloon that stopped short, asked again; check_faults
 * guest_kernel_panics under valgrind). */
uint64_t balloon_heading(const balancer *b, const guest *g, int64_t now_ms)
{
    uint64_t a = g->view.actual_bytes, t = g->last_target;
    bool away = t > a + ARRIVED_SLACK || a > t + ARRIVED_SLACK;
    return t && away && now_ms - g->last_set_ms < reissue_ms(b) ? t : a;
}

/* How a guest's size is set: through its balloon, or, with a virtio-mem
 * device balancerd resizes, split between the two (policies/vmem_plan.h). */
typedef struct {
    uint64_t target;          /* the guest's size asked for */
    bool split;               /* a virtio-mem device takes part: parts says how */
    bool held;                /* ... and it is held: what is plugged stays */
    vmem_split parts;
} resize_plan;

/* How target would be set on g now. */
static resize_plan plan_resize(const guest *g, uint64_t target)
{
    if (!g->vmem_resized)
        return (resize_plan){ .target = target };
    vmem_device dev = guest_vmem_device(g, (double)mono_ms() / 1000.0);
    vmem_split parts = vmem_split_target(target, &dev);
    assert(parts.balloon_bytes <= dev.base_bytes); /* the balloon works within the boot memory */
    return (resize_plan){ .target = target, .split = true, .held = dev.held, .parts = parts };
}

/* The plan as the balloon's log lines say it: "" for the balloon alone. */
static void describe_resize(const resize_plan *r, char *buf, size_t len)
{
    buf[0] = '\0';
    if (!r->split)
        return;
    char plug[32], bal[32];
    size_format(r->parts.requested_bytes, plug, sizeof(plug));
    size_format(r->parts.balloon_bytes, bal, sizeof(bal));
    snprintf(buf, len, " [virtio-mem %s%s, balloon %s]", plug, r->held ? " (held)" : "", bal);
}

/* Set a guest's size as planned; each part is sent only when it changes.
 * -1 with the backend's reason when one cannot be sent. */
static int resize(balancer *b, guest *g, const resize_plan *r, GError **error)
{
    if (!r->split)
        return b->backend->set_target(&b->hv, &g->hv, r->target, error);
    vmem_split p = r->parts;
    bool vmem_moves = p.requested_bytes != g->vmem.requested_bytes ||
                      (g->vmem_asked != UINT64_MAX && g->vmem_asked != p.requested_bytes);
    if (vmem_moves && !r->held) {
        if (b->backend->set_vmem(&b->hv, &g->hv, p.requested_bytes, error) < 0)
            return -1;
        g->vmem_asked = p.requested_bytes;
    }
    if (p.balloon_bytes != g->balloon_bytes || (g->balloon_asked && g->balloon_asked != p.balloon_bytes)) {
        if (b->backend->set_target(&b->hv, &g->hv, p.balloon_bytes, error) < 0)
            return -1;
        g->balloon_asked = p.balloon_bytes;
    }
    return 0;
}

/* What a virtio-mem device's sample said: a device that stopped
 * following is held where it is (asked to stay there, so that the
 * guest's driver stops retrying), and asked again when the hold ends. */
void note_vmem(balancer *b, guest *g, vmem_state st)
{
    char req[32], plug[32];
    size_format(g->vmem.requested_bytes, req, sizeof(req));
    size_format(g->vmem.plugged_bytes, plug, sizeof(plug));
    if (st == VMEM_RELEASED) {
        log_info("guest %s: virtio-mem hold over: it may be resized again", g->hv.name);
        return;
    }
    if (st != VMEM_NOW_HELD)
        return;
    log_warn("guest %s: virtio-mem does not follow: asked for %s, %s plugged, no progress for %.0f s (%s): held "
             "there for %.0f s, the balloon does the rest",
             g->hv.name, req, plug, VMEM_STALL_S,
             g->vtrack.plug_refused ? "the guest plugs nothing: no virtio_mem driver loaded?"
                                    : "the guest cannot unplug: the memory there in use with nowhere to "
                                      "move it, not movable (memory_hotplug.online_policy=auto-movable), or its driver "
                                      "told not to (virtio_mem.unplug_online=0)?",
             g->vtrack.held_until - (double)mono_ms() / 1000.0);
    /* withdrawn while paused too: it moves no memory, it stops a request
     * the guest cannot follow */
    if (b->dry_run || g->policy.mode == VM_MODE_OFF || g->vmem.requested_bytes == g->vmem.plugged_bytes)
        return;
    g_autoptr(GError) err = NULL;
    if (b->backend->set_vmem(&b->hv, &g->hv, g->vmem.plugged_bytes, &err) < 0)
        log_warn("guest %s: virtio-mem %s -> %s failed: %s", g->hv.name, req, plug, err->message);
    else
        g->vmem_asked = g->vmem.plugged_bytes;
}

/* A decision's target within the safety bounds every policy gets:
 * never below the floor, never above the ceiling or domain maximum. */
static uint64_t within_bounds(const guest_view *v, uint64_t target)
{
    /* guest_bounds' floor and ceiling (all 0 before the guest's first sample) */
    assert(v->floor_bytes <= v->ceiling_bytes && v->ceiling_bytes <= v->max_bytes);
    if (target < v->floor_bytes)
        target = v->floor_bytes;
    if (target > v->ceiling_bytes)
        target = v->ceiling_bytes;
    assert(target >= v->floor_bytes && target <= v->ceiling_bytes);
    return target;
}

/* A move sent at now, from where the balloon was heading to target: counted. */
static void count_move(guest *g, uint64_t target, uint64_t heading, int64_t now)
{
    g->balloon_ops++;
    /* counted from where the last move was going: a move called off is given back */
    if (target < heading)
        g->reclaimed_bytes += heading - target;
    else
        g->returned_bytes += target - heading;
    if (target > heading)
        g->last_grow_ms = now;
}

/* Carry out d for g, as seen at now_ms (the tick's moment).  give_back:
 * balancerctl give-back's move, made while paused too (it pauses first),
 * and never shrinking a guest. */
void actuate(balancer *b, guest *g, const guest_decision *d, int64_t now_ms, bool give_back)
{
    const guest_view *v = &g->view;
    const char *why = decision_reason_text(d->reason);
    snprintf(g->last_reason, sizeof(g->last_reason), "%s", why);
    g->decided_target = d->target_bytes;
    g->headroom = d->headroom_bytes;
    g->cache_verdict = d->cache_verdict;
    g->cache_by = d->cache_by;
    g->cache_verdict_age_s = d->cache_verdict_s > 0 ? (double)now_ms / 1000.0 - d->cache_verdict_s : -1;
    if (g->job_ms >= 0) {
        snprintf(g->last_reason, sizeof(g->last_reason), "left alone: a libvirt job (migration, save or dump) runs");
        return;
    }
    if (!d->change || v->policy.mode == VM_MODE_OFF)
        return; /* mode=off: left alone */
    uint64_t target = within_bounds(v, d->target_bytes);
    uint64_t heading = balloon_heading(b, g, now_ms);
    if (target == heading)
        return; /* there, or already asked and on its way; a move on its way elsewhere is
                 * called off, even back to where the balloon still is */
    if (give_back && target < v->actual_bytes)
        return; /* give-back never shrinks a guest (one above its ceiling, lowered since) */
    int64_t now = mono_ms();
    char from[32], to[32], was_to[32] = "";
    size_format(v->actual_bytes, from, sizeof(from));
    size_format(target, to, sizeof(to));
    if (heading != v->actual_bytes)
        size_format(heading, was_to, sizeof(was_to));
    if (b->dry_run || (b->paused && !give_back)) {
        log_info("guest %s: would %s %s -> %s (%s)%s", g->hv.name, g->vmem_resized ? "resize" : "balloon", from, to,
                 why, b->paused ? " [paused]" : " [dry run]");
        return;
    }
    g_autoptr(GError) err = NULL;
    resize_plan plan = plan_resize(g, target);
    char how[96];
    describe_resize(&plan, how, sizeof(how));
    if (resize(b, g, &plan, &err) < 0) {
        g->balloon_errors++;
        b->backend_errors++;
        log_warn("guest %s: %s %s -> %s%s failed: %s", g->hv.name, g->vmem_resized ? "size" : "balloon", from, to,
                 how, err->message);
        return;
    }
    count_move(g, target, heading, now);
    g->last_target = target;
    g->last_set_ms = now;
    log_guest_action(LOG_INFO, g->hv.name, g->hv.uuid, g->vmem_resized ? "resize" : "balloon", why,
                     v->actual_bytes, target, "guest %s: %s %s -> %s%s (%s)%s%s", g->hv.name,
                     g->vmem_resized ? "size" : "balloon", from, to, how, why,
                     was_to[0] ? ", was on its way to " : "", was_to);
}

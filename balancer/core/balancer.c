#include "balancer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_cgroup.h"
#include "host_swap.h"
#include "log.h"
#include "metadata_xml.h"
#include "mono_clock.h"
#include "size_parse.h"

/* A target we set is not repeated for this many ticks while the balloon
 * is still on its way there. */
#define REISSUE_TICKS 3

static void limits_from_config(balancer *b)
{
    b->lim.default_floor_percent = b->cfg.default_floor_percent;
    b->lim.default_floor_min = b->cfg.default_floor_min;
    /* three missed reports make stats stale */
    b->lim.stale_seconds = 3 * b->cfg.stats_period + b->cfg.tick_seconds;
}

static bool same_host_reclaim(const balancer_config *a, const balancer_config *c)
{
    return a->hr_enabled == c->hr_enabled && strcmp(a->hr_source, c->hr_source) == 0 &&
           a->hr_scan_interval == c->hr_scan_interval && a->hr_min_cold_age == c->hr_min_cold_age &&
           a->hr_max_cold_age == c->hr_max_cold_age && a->hr_max_per_scan == c->hr_max_per_scan &&
           a->hr_min_per_scan == c->hr_min_per_scan && a->hr_probes == c->hr_probes &&
           a->hr_protect == c->hr_protect;
}

void balancer_replace_config(balancer *b, balancer_config *cfg)
{
    bool same = same_host_reclaim(&b->cfg, cfg);
    config_clear(&b->cfg);
    b->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    limits_from_config(b);
    char *err = NULL;
    /* a changed [host_reclaim] starts over (cold ages are relearned) */
    if (!same && host_swap_setup(b, &err) < 0) {
        log_err("%s; host reclaim stays off", err);
        g_free(err);
    }
}

int balancer_set_policy(balancer *b, const char *name, char **err)
{
    const policy_ops *p = policy_lookup(name);
    if (!p) {
        *err = g_strdup_printf("unknown policy '%s' (known: %s)", name, policy_names());
        return -1;
    }
    void *state = p->state_new ? p->state_new() : NULL;
    if (p->state_new && !state) {
        *err = g_strdup("out of memory");
        return -1;
    }
    if (b->policy && b->policy->state_free)
        b->policy->state_free(b->policy_state);
    b->policy = p;
    b->policy_state = state;
    return 0;
}

int balancer_init(balancer *b, balancer_config *cfg, const backend_ops *be, char **err)
{
    memset(b, 0, sizeof(*b));
    b->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    b->backend = be;
    b->guests = g_ptr_array_new();
    b->proc_meminfo = "/proc/meminfo";
    b->sys_node_dir = "/sys/devices/system/node";
    classify_params_default(&b->cp);
    limits_from_config(b);
    if (balancer_set_policy(b, b->cfg.policy, err) < 0)
        return -1;
    return host_swap_setup(b, err);
}

void balancer_free(balancer *b)
{
    b->shutting_down = true;
    host_swap_teardown(b);
    while (b->guests && b->guests->len)
        balancer_guest_remove(b, g_ptr_array_index(b->guests, b->guests->len - 1));
    if (b->backend && b->backend->shutdown)
        b->backend->shutdown(b);
    if (b->guests)
        g_ptr_array_free(b->guests, TRUE);
    if (b->policy && b->policy->state_free)
        b->policy->state_free(b->policy_state);
    config_clear(&b->cfg);
    memset(b, 0, sizeof(*b));
}

guest *balancer_guest_find(balancer *b, const char *uuid)
{
    for (guint i = 0; i < b->guests->len; i++) {
        guest *g = g_ptr_array_index(b->guests, i);
        if (strcmp(g->uuid, uuid) == 0)
            return g;
    }
    return NULL;
}

guest *balancer_guest_add(balancer *b, const char *name, const char *uuid)
{
    guest *g = g_new(guest, 1);
    guest_init(g, name, uuid);
    g->seen = true;
    g_ptr_array_add(b->guests, g);
    log_info("guest %s (%s): now managed", g->name, g->uuid);
    return g;
}

void balancer_guest_remove(balancer *b, guest *g)
{
    if (!b->shutting_down)
        log_info("guest %s (%s): gone", g->name, g->uuid);
    host_swap_guest_release(g);
    if (b->backend && b->backend->guest_release)
        b->backend->guest_release(b, g);
    g_ptr_array_remove(b->guests, g);
    g_free(g);
}

void balancer_mark_unseen(balancer *b)
{
    for (guint i = 0; i < b->guests->len; i++)
        ((guest *)g_ptr_array_index(b->guests, i))->seen = false;
}

void balancer_drop_unseen(balancer *b)
{
    for (guint i = b->guests->len; i-- > 0;) {
        guest *g = g_ptr_array_index(b->guests, i);
        if (!g->seen)
            balancer_guest_remove(b, g);
    }
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

void balancer_apply_policy_xml(balancer *b, guest *g, const char *xml)
{
    char desc[200];
    if (!xml) {
        bool changed = g->policy_from_metadata;
        vm_policy_default(&g->policy);
        g->policy_from_metadata = false;
        g->policy_error[0] = '\0';
        if (changed) {
            describe_policy(&g->policy, desc, sizeof(desc));
            log_info("guest %s: policy metadata removed; defaults: %s", g->name, desc);
        }
        return;
    }
    vm_policy p;
    char err[200];
    if (metadata_policy_parse(xml, strlen(xml), &p, err, sizeof(err)) < 0) {
        snprintf(g->policy_error, sizeof(g->policy_error), "%s", err);
        g->policy_errors++;
        b->policy_errors++;
        describe_policy(&g->policy, desc, sizeof(desc));
        log_warn("guest %s: policy metadata rejected: %s; keeping %s policy (%s)", g->name, err,
                 g->policy_from_metadata ? "the previous" : "the default", desc);
        return;
    }
    g->policy = p;
    g->policy_from_metadata = true;
    g->policy_error[0] = '\0';
    describe_policy(&p, desc, sizeof(desc));
    log_info("guest %s: policy %s", g->name, desc);
}

/* Apply one decision within the safety bounds every policy gets:
 * never below the floor, never above the ceiling or domain maximum. */
static void actuate(balancer *b, guest *g, const guest_decision *d)
{
    const guest_view *v = &g->view;
    snprintf(g->last_reason, sizeof(g->last_reason), "%s", d->reason);
    g->decided_target = d->target_bytes;
    if (!d->change || v->policy.mode == VM_MODE_OFF)
        return;
    uint64_t target = d->target_bytes;
    if (target < v->floor_bytes)
        target = v->floor_bytes;
    if (target > v->ceiling_bytes)
        target = v->ceiling_bytes;
    if (target == v->actual_bytes)
        return;
    int64_t now = mono_ms();
    int64_t quiet_ms = (int64_t)REISSUE_TICKS * b->cfg.tick_seconds * 1000;
    if (target == g->last_target && now - g->last_set_ms < quiet_ms)
        return; /* already asked; the balloon is on its way */
    char from[32], to[32];
    size_format(v->actual_bytes, from, sizeof(from));
    size_format(target, to, sizeof(to));
    if (b->dry_run || b->paused) {
        log_info("guest %s: would balloon %s -> %s (%s)%s", g->name, from, to, d->reason,
                 b->paused ? " [paused]" : " [dry run]");
        return;
    }
    char err[256];
    if (b->backend->set_target(b, g, target, err, sizeof(err)) < 0) {
        g->balloon_errors++;
        b->backend_errors++;
        log_warn("guest %s: balloon %s -> %s failed: %s", g->name, from, to, err);
        return;
    }
    g->balloon_ops++;
    if (target < v->actual_bytes)
        g->reclaimed_bytes += v->actual_bytes - target;
    else
        g->returned_bytes += target - v->actual_bytes;
    g->last_target = target;
    g->last_set_ms = now;
    log_info("guest %s: balloon %s -> %s (%s)", g->name, from, to, d->reason);
}

void balancer_tick(balancer *b)
{
    int64_t t0 = mono_ms();
    b->ticks++;
    if (host_meminfo_read(b->proc_meminfo, b->sys_node_dir, &b->host) < 0) {
        log_err("cannot read %s: skipping this tick", b->proc_meminfo);
        return;
    }
    if (b->cfg.memory_cgroup[0]) {
        char cerr[600];
        host_view cg;
        if (host_cgroup_read(b->cfg.memory_cgroup, b->host.host.total_bytes, &cg, cerr, sizeof(cerr)) < 0) {
            log_err("%s: skipping this tick", cerr);
            return;
        }
        b->host.host = cg;
    }
    char *err = NULL;
    if (config_watermarks(&b->cfg, b->host.host.total_bytes, &b->wm, &err) < 0) {
        log_err("%s: skipping this tick", err);
        g_free(err);
        return;
    }
    if (b->backend->sync(b) < 0)
        return; /* the backend logged why; guests are kept for when it returns */

    int64_t now = time(NULL);
    size_t n = b->guests->len;
    guest_view *views = g_new0(guest_view, n ? n : 1);
    guest_decision *dec = g_new0(guest_decision, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        guest *g = g_ptr_array_index(b->guests, i);
        guest_sample s;
        char serr[256];
        if (b->backend->sample(b, g, &s, serr, sizeof(serr)) < 0) {
            log_debug("guest %s: no stats this tick: %s", g->name, serr);
            g->view.stats_valid = false;
        } else {
            guest_ingest(g, &s, now, (double)mono_ms() / 1000.0, &b->lim, &b->cp);
        }
        views[i] = g->view;
    }
    policy_input in = { .host = b->host.host, .wm = b->wm, .tun = b->cfg.tun,
                        .n_guests = n, .guests = views };
    policy_output out = { .decisions = dec };
    b->policy->decide(&in, b->policy_state, &out);
    if (out.reclaiming != b->reclaiming)
        log_info("host %s: %s", out.reclaiming ? "below low watermark, reclaiming" : "back above high watermark",
                 out.summary);
    b->reclaiming = out.reclaiming;
    snprintf(b->summary, sizeof(b->summary), "%s", out.summary);
    uint64_t balloon_reclaim = 0;
    for (size_t i = 0; i < n; i++) {
        actuate(b, g_ptr_array_index(b->guests, i), &dec[i]);
        if (dec[i].change && views[i].policy.mode != VM_MODE_OFF && dec[i].target_bytes < views[i].actual_bytes)
            balloon_reclaim += views[i].actual_bytes - dec[i].target_bytes;
    }
    /* last resort after ballooning: host swap of cold guest memory */
    host_swap_tick(b, balloon_reclaim);
    g_free(views);
    g_free(dec);
    b->last_tick_seconds = (double)(mono_ms() - t0) / 1000.0;
    tick_histogram_observe(&b->tick_hist, b->last_tick_seconds);
    log_debug("tick %llu: %s (%.3f s)", (unsigned long long)b->ticks, b->summary,
              b->last_tick_seconds);
}

/* Build the per-tick snapshot from the core's state; see report/snapshot.h. */
#include "core/balancer_priv.h"

#include <stdio.h>
#include <string.h>

#include "util/mono_clock.h"

/* A guest's virtio-mem device and its balloon, in its row. */
static void vmem_row(const guest *g, snapshot_guest *r)
{
    double now = (double)mono_ms() / 1000.0;
    r->vmem_devices = g->vmem.devices;
    r->vmem_resized = g->vmem_resized;
    r->vmem_held = g->vmem_resized && vmem_track_held(&g->vtrack, now);
    r->vmem_plug_refused = r->vmem_held && g->vtrack.plug_refused;
    r->vmem_held_s = r->vmem_held ? g->vtrack.held_until - now : 0;
    r->vmem_block_bytes = g->vmem.block_bytes;
    r->vmem_max_bytes = g->vmem.max_bytes;
    r->vmem_requested_bytes = g->vmem.requested_bytes;
    r->vmem_plugged_bytes = g->vmem.plugged_bytes;
    r->base_bytes = g->vmem_resized ? g->base_bytes : 0;
    r->balloon_bytes = g->vmem_resized ? g->balloon_bytes : g->view.actual_bytes;
}

/* What a guest's agent reported, in its row. */
static void agent_row(const guest *g, snapshot_guest *r)
{
    const agent_state *a = &g->agent;
    r->agent_refaults_anon = a->have ? a->cur.vmstat[AV_REFAULT_ANON] : -1;
    r->agent_refaults_file = a->have ? a->cur.vmstat[AV_REFAULT_FILE] : -1;
    r->agent_psi_some = g->view.agent_fresh ? a->cur.psi_some_avg10 : -1;
    r->agent_messages = a->messages;
    r->agent_resets = a->resets;
    r->agent_clamped = a->clamped;
    memcpy(r->agent_rejected, a->rejected, sizeof(r->agent_rejected));
}

/* A guest's row: its identity, policy, last decision and counters, device, measures and agent. */
static void guest_row(const guest *g, snapshot_guest *r)
{
    snprintf(r->name, sizeof(r->name), "%s", g->hv.name);
    snprintf(r->uuid, sizeof(r->uuid), "%s", g->hv.uuid);
    r->view = g->view;
    r->view.name = r->name;
    r->view.uuid = r->uuid;
    r->policy = g->policy;
    r->policy_from_metadata = g->policy_from_metadata;
    snprintf(r->policy_error, sizeof(r->policy_error), "%s", g->policy_error);
    r->policy_errors = g->policy_errors;
    r->target_bytes = guest_shown_target(g);
    r->last_set_bytes = g->last_target;
    r->headroom_bytes = g->headroom;
    r->cache_verdict = g->cache_verdict;
    r->cache_by = g->cache_by;
    r->cache_verdict_age_s = g->cache_verdict_age_s;
    snprintf(r->reason, sizeof(r->reason), "%s", g->last_reason);
    r->quiet_samples = g->cls.quiet;
    r->balloon_ops = g->balloon_ops;
    r->balloon_errors = g->balloon_errors;
    r->reclaimed_bytes = g->reclaimed_bytes;
    r->returned_bytes = g->returned_bytes;
    r->clamped_values = g->clamped_values;
    r->counter_resets = g->counter_resets;
    r->unbacked_claims = g->unbacked_claims;
    r->unbacked_short = g->unbacked_short;
    r->self_deflations = g->self_deflations;
    vmem_row(g, r);
    r->disk_read_bps = g->disk_read_bps;
    r->qemu_faults_ps = g->qemu_faults_ps;
    r->qemu_cpu = g->qemu_cpu;
    r->free_page_reporting = g->view.free_page_reporting;
    r->free_page_reporting_used = g->view.free_page_reporting_used;
    r->swap_in_bytes = g->cur.swap_in_bytes;
    r->swap_out_bytes = g->cur.swap_out_bytes;
    r->major_faults = g->cur.major_faults;
    r->oom_kills = g->cur.oom_kills;
    r->alloc_stalls = g->cur.alloc_stalls;
    agent_row(g, r);
    host_swap_guest_stats_get(g->hswap, &r->reclaim);
}

snapshot *balancer_snapshot_build(const balancer *b)
{
    snapshot *s = g_new0(snapshot, 1);
    s->policy_name = b->policy->name;
    s->backend_name = b->backend->name;
    s->ticks = b->ticks;
    s->last_tick_unix = b->last_tick_unix;
    s->tick_seconds = b->cfg.tick_seconds;
    s->backend_up = b->backend_up;
    s->paused = b->paused;
    s->dry_run = b->dry_run;
    s->reclaiming = b->reclaiming;
    s->own_reporting = b->own_reporting;
    snprintf(s->summary, sizeof(s->summary), "%s", b->summary);
    s->host = b->host;
    s->wm = b->wm;
    s->tick_hist = b->tick_hist;
    s->backend_reconnects = b->hv.reconnects;
    s->stats_calls_all = b->hv.stats_calls_all;
    s->stats_calls_one = b->hv.stats_calls_one;
    s->backend_errors = b->backend_errors;
    s->policy_errors = b->policy_errors;
    host_swap_stats_get(b->hswap, &s->reclaim);
    s->n_guests = b->guests->len;
    s->guests = g_new0(snapshot_guest, s->n_guests ? s->n_guests : 1);
    for (size_t i = 0; i < s->n_guests; i++)
        guest_row(g_ptr_array_index(b->guests, i), &s->guests[i]);
    return s;
}

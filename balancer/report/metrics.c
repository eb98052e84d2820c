#include "report/metrics.h"

#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/error.h"


/* Label values are escaped as the exposition format requires. */
static void append_escaped(GString *s, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            g_string_append(s, "\\\\");
        else if (*v == '"')
            g_string_append(s, "\\\"");
        else if (*v == '\n')
            g_string_append(s, "\\n");
        else
            g_string_append_c(s, *v);
    }
}

static void header(GString *s, const char *name, const char *type, const char *help)
{
    g_string_append_printf(s, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef double (*guest_value)(const snapshot_guest *g);

static void guest_family(GString *s, const snapshot *b, const char *name, const char *type,
                         const char *help, guest_value fn)
{
    header(s, name, type, help);
    for (size_t i = 0; i < b->n_guests; i++) {
        const snapshot_guest *g = &b->guests[i];
        g_string_append_printf(s, "%s{domain=\"", name);
        append_escaped(s, g->name);
        g_string_append(s, "\",uuid=\"");
        append_escaped(s, g->uuid);
        g_string_append_printf(s, "\"} %.17g\n", fn(g));
    }
}

/* Guest-reported counters: -1 (not reported) becomes absent, not 0. */
#define GUEST_COUNTER(fn, field) \
    static double fn(const snapshot_guest *g) { return g->field < 0 ? 0 : (double)g->field; }

static double gv_actual(const snapshot_guest *g) { return (double)g->view.actual_bytes; }
static double gv_balloon(const snapshot_guest *g) { return (double)g->balloon_bytes; }
static double gv_vmem_resized(const snapshot_guest *g) { return g->vmem_resized; }
static double gv_vmem_plugged(const snapshot_guest *g) { return (double)g->vmem_plugged_bytes; }
static double gv_vmem_requested(const snapshot_guest *g) { return (double)g->vmem_requested_bytes; }
static double gv_vmem_max(const snapshot_guest *g) { return (double)g->vmem_max_bytes; }
static double gv_vmem_held(const snapshot_guest *g) { return g->vmem_held; }
static double gv_target(const snapshot_guest *g) { return (double)g->target_bytes; }
static double gv_floor(const snapshot_guest *g) { return (double)g->view.floor_bytes; }
static double gv_ceiling(const snapshot_guest *g) { return (double)g->view.ceiling_bytes; }
static double gv_free(const snapshot_guest *g) { return (double)g->view.free_bytes; }
static double gv_avail(const snapshot_guest *g) { return (double)g->view.available_bytes; }
static double gv_cache(const snapshot_guest *g) { return (double)g->view.cache_bytes; }
static double gv_reclaimable_cache(const snapshot_guest *g) { return (double)g->view.reclaimable_cache_bytes; }
GUEST_COUNTER(gv_swap_in, swap_in_bytes)
GUEST_COUNTER(gv_swap_out, swap_out_bytes)
GUEST_COUNTER(gv_majflt, major_faults)
GUEST_COUNTER(gv_oom_kills, oom_kills)
GUEST_COUNTER(gv_alloc_stalls, alloc_stalls)
static double gv_thrash(const snapshot_guest *g) { return g->view.thrashing; }
static double gv_stream(const snapshot_guest *g) { return g->view.streaming; }
static double gv_need(const snapshot_guest *g) { return g->view.in_need; }
static double gv_peak_used(const snapshot_guest *g) { return (double)g->view.peak_used_bytes; }
static double gv_headroom(const snapshot_guest *g) { return (double)g->headroom_bytes; }
static double gv_stale(const snapshot_guest *g) { return !g->view.stats_valid; }
static double gv_cache_stream(const snapshot_guest *g) { return g->cache_verdict == CACHE_STREAM; }
static double gv_cache_reused(const snapshot_guest *g) { return g->cache_verdict == CACHE_REUSED; }
static double gv_reclaimed(const snapshot_guest *g) { return (double)g->reclaimed_bytes; }
static double gv_returned(const snapshot_guest *g) { return (double)g->returned_bytes; }
static double gv_ops(const snapshot_guest *g) { return (double)g->balloon_ops; }
static double gv_errs(const snapshot_guest *g) { return (double)g->balloon_errors; }
static double gv_perrs(const snapshot_guest *g) { return (double)g->policy_errors; }
static double gv_clamped(const snapshot_guest *g) { return (double)g->clamped_values; }
static double gv_off(const snapshot_guest *g) { return g->policy.mode == VM_MODE_OFF; }
static double gv_shares(const snapshot_guest *g) { return g->policy.shares; }
static double gv_priority(const snapshot_guest *g) { return (double)g->policy.priority; }
static double gv_protect(const snapshot_guest *g) { return g->policy.protect; }
static double gv_unbacked(const snapshot_guest *g) { return (double)g->unbacked_claims; }
static double gv_unbacked_short(const snapshot_guest *g) { return (double)g->unbacked_short; }
static double gv_self_deflations(const snapshot_guest *g) { return (double)g->self_deflations; }
static double gv_deflate_on_oom(const snapshot_guest *g) { return g->view.deflate_on_oom; }
GUEST_COUNTER(gv_ref_anon, agent_refaults_anon)
GUEST_COUNTER(gv_ref_file, agent_refaults_file)
static double gv_agent_msgs(const snapshot_guest *g) { return (double)g->agent_messages; }
static double gv_agent_resets(const snapshot_guest *g) { return (double)g->agent_resets; }
static double gv_agent_clamped(const snapshot_guest *g) { return (double)g->agent_clamped; }
static double gv_agent_psi(const snapshot_guest *g) { return g->agent_psi_some >= 0 ? g->agent_psi_some / 100.0 : 0; }
static double gv_agent_up(const snapshot_guest *g) { return g->view.agent_fresh; }

/* Host-side reclaim, per guest (0 for a guest not being scanned). */
#define HSWAP_VALUE(fn, field) \
    static double fn(const snapshot_guest *g) { return (double)g->reclaim.field; }
HSWAP_VALUE(hs_active, active)
HSWAP_VALUE(hs_resident, resident_bytes)
HSWAP_VALUE(hs_swapped, swapped_bytes)
HSWAP_VALUE(hs_cold, cold_bytes)
HSWAP_VALUE(hs_paged, paged_out_bytes)
HSWAP_VALUE(hs_probe, probe_bytes)
HSWAP_VALUE(hs_refaults, refaults)
HSWAP_VALUE(hs_refault_bytes, refault_bytes)
HSWAP_VALUE(hs_age, cold_age_scans)
HSWAP_VALUE(hs_budget, budget_bytes)
HSWAP_VALUE(hs_protected, protected_bytes)
HSWAP_VALUE(hs_protected_effective, protected_effective_bytes)
HSWAP_VALUE(hs_ws, ws_bytes)
HSWAP_VALUE(hs_proactive, proactive_bytes)
HSWAP_VALUE(hs_promoted, promoted_total)
HSWAP_VALUE(hs_foreign, foreign_fault_total)
static double hs_slo_budget(const snapshot_guest *g) { return g->reclaim.budget_percent / 100.0; }
static double hs_slo_ok(const snapshot_guest *g) { return g->reclaim.slo && strcmp(g->reclaim.slo, "within") == 0; }

static void host_reclaim_metrics(GString *s, const snapshot *b)
{
    const host_swap_stats hs = b->reclaim;
    header(s, "balancer_host_reclaim_enabled", "gauge", "1 when host-side reclaim of cold guest memory is on.");
    g_string_append_printf(s, "balancer_host_reclaim_enabled{source=\"%s\"} %d\n", hs.enabled ? hs.source : "",
                           hs.enabled ? 1 : 0);
    if (!hs.enabled)
        return;
    header(s, "balancer_host_reclaim_scans_total", "counter", "Cold-page scans done.");
    g_string_append_printf(s, "balancer_host_reclaim_scans_total %llu\n", (unsigned long long)hs.scans);
    header(s, "balancer_host_reclaim_scan_errors_total", "counter", "Scans whose cold-page source failed.");
    g_string_append_printf(s, "balancer_host_reclaim_scan_errors_total %llu\n", (unsigned long long)hs.scan_errors);
    header(s, "balancer_host_reclaim_idle_skips_total", "counter",
           "Scan ticks skipped because nothing was short of memory (no pressure, no probes).");
    g_string_append_printf(s, "balancer_host_reclaim_idle_skips_total %llu\n", (unsigned long long)hs.idle_skips);
    header(s, "balancer_host_reclaim_busy_skips_total", "counter",
           "Scan ticks skipped because the previous round (in its own thread) had not ended.");
    g_string_append_printf(s, "balancer_host_reclaim_busy_skips_total %llu\n", (unsigned long long)hs.busy_skips);
    header(s, "balancer_host_reclaim_proactive_bytes_total", "counter",
           "Guest RAM paged out proactively (idle for proactive_age, the host not short).");
    g_string_append_printf(s, "balancer_host_reclaim_proactive_bytes_total %llu\n", (unsigned long long)hs.proactive_bytes);
    header(s, "balancer_host_reclaim_round_seconds", "gauge", "Wall time of the last round (scan, pageouts, settle).");
    g_string_append_printf(s, "balancer_host_reclaim_round_seconds %.3f\n", hs.last_round_seconds);
    header(s, "balancer_host_reclaim_cpu_seconds_total", "counter", "CPU balancerd spent scanning and paging out.");
    g_string_append_printf(s, "balancer_host_reclaim_cpu_seconds_total %.6f\n", hs.cpu_seconds);
    header(s, "balancer_host_reclaim_source_cpu_seconds_total", "counter", "CPU of the kernel's DAMON thread since it started.");
    g_string_append_printf(s, "balancer_host_reclaim_source_cpu_seconds_total %.6f\n", hs.source_cpu_seconds);
    guest_family(s, b, "balancer_guest_host_reclaim_active", "gauge", "1 while the guest's RAM is scanned for cold pages.", hs_active);
    guest_family(s, b, "balancer_guest_host_resident_bytes", "gauge", "Guest RAM resident on the host.", hs_resident);
    guest_family(s, b, "balancer_guest_host_swapped_bytes", "gauge", "Guest RAM in host swap.", hs_swapped);
    guest_family(s, b, "balancer_guest_host_cold_bytes", "gauge", "Resident guest RAM idle for at least the cold age.", hs_cold);
    guest_family(s, b, "balancer_guest_host_paged_out_bytes_total", "counter", "Guest RAM paged out to host swap by host reclaim.", hs_paged);
    guest_family(s, b, "balancer_guest_host_probe_bytes_total", "counter", "Guest RAM paged out as access probes (probe source).", hs_probe);
    guest_family(s, b, "balancer_guest_host_refaults_total", "counter", "Paged-out chunks the guest touched again within the refault window.", hs_refaults);
    guest_family(s, b, "balancer_guest_host_refault_bytes_total", "counter", "Guest memory that came back from host swap in chunks that refaulted.", hs_refault_bytes);
    guest_family(s, b, "balancer_guest_host_cold_age_scans", "gauge", "Scans without access before a chunk counts as cold (feedback-controlled).", hs_age);
    guest_family(s, b, "balancer_guest_host_reclaim_budget_bytes", "gauge", "Most host reclaim may page out of the guest per scan (feedback-controlled).", hs_budget);
    guest_family(s, b, "balancer_guest_host_working_set_bytes", "gauge", "Working set as the host measures it: resident guest RAM that is not cold.", hs_ws);
    guest_family(s, b, "balancer_guest_host_proactive_bytes_total", "counter", "Guest RAM paged out proactively.", hs_proactive);
    guest_family(s, b, "balancer_guest_host_promoted_bytes_total", "counter", "Paged-out guest RAM that came back from host swap (promotions; the SLO judges their one-minute rate).", hs_promoted);
    guest_family(s, b, "balancer_guest_host_promotion_budget_ratio", "gauge", "The guest's promotion budget: the share of its working set that may come back per minute (0.002 = 0.2%).", hs_slo_budget);
    guest_family(s, b, "balancer_guest_host_foreign_fault_bytes_total", "counter", "Its QEMU's major faults that are not host reclaim's promotions or probes, in bytes.", hs_foreign);
    guest_family(s, b, "balancer_guest_host_slo_within", "gauge", "1 while the guest is inside its host-reclaim SLO (promotions under budget, no pressure).", hs_slo_ok);
    guest_family(s, b, "balancer_guest_host_protected_bytes", "gauge", "Working set protected in the guest's memory cgroup (memory.low or soft limit).", hs_protected);
    guest_family(s, b, "balancer_guest_host_protected_effective_bytes", "gauge", "Of that protection, what the cgroup's ancestors let the kernel honour (cgroup v2: a group's memory.low never exceeds its parent's).", hs_protected_effective);
}

/* The daemon itself: version, its last round, whether it reaches the hypervisor. */
static void daemon_metrics(GString *s, const snapshot *b)
{
    header(s, "balancer_info", "gauge", "Version and active policy.");
    g_string_append_printf(s, "balancer_info{version=\"%s\",policy=\"%s\",backend=\"%s\"} 1\n",
                           MEMBAL_VERSION, b->policy_name, b->backend_name);
    header(s, "balancer_last_tick_timestamp_seconds", "gauge",
           "When balancerd's main loop last ran a balancing round (Unix time). /metrics is served from its own "
           "thread: a wedged main loop still answers, with this standing still.");
    g_string_append_printf(s, "balancer_last_tick_timestamp_seconds %.3f\n", b->last_tick_unix);
    header(s, "balancer_tick_interval_seconds", "gauge", "The configured time between balancing rounds.");
    g_string_append_printf(s, "balancer_tick_interval_seconds %u\n", b->tick_seconds);
    header(s, "balancer_backend_up", "gauge",
           "1 when the last round reached libvirtd, 0 when it could not: then no guest is sampled or balanced, "
           "whatever its own metrics last said.  Always 1 with --qmp (a socket is one guest's: its "
           "balancer_guest_stats_stale says when it does not answer).");
    g_string_append_printf(s, "balancer_backend_up{backend=\"%s\"} %d\n", b->backend_name, b->backend_up ? 1 : 0);
}

/* Per guest: its size, its balloon and virtio-mem device, the target and its bounds. */
static void guest_size_metrics(GString *s, const snapshot *b)
{
    guest_family(s, b, "balancer_guest_actual_bytes", "gauge",
                 "The guest's current size: its balloon's, and what its virtio-mem device plugged when balancerd "
                 "resizes that too.", gv_actual);
    guest_family(s, b, "balancer_guest_balloon_bytes", "gauge",
                 "Its balloon's size alone (within the memory it booted with).", gv_balloon);
    guest_family(s, b, "balancer_guest_virtio_mem_resized", "gauge",
                 "1 when balancerd resizes the guest through its virtio-mem device (above its boot memory) and its "
                 "balloon (below it); 0 balloon only.", gv_vmem_resized);
    guest_family(s, b, "balancer_guest_virtio_mem_plugged_bytes", "gauge",
                 "What the guest plugged of its (first) virtio-mem device; 0 none.", gv_vmem_plugged);
    guest_family(s, b, "balancer_guest_virtio_mem_requested_bytes", "gauge",
                 "The requested size of its (first) virtio-mem device.", gv_vmem_requested);
    guest_family(s, b, "balancer_guest_virtio_mem_max_bytes", "gauge",
                 "The maximum of its (first) virtio-mem device.", gv_vmem_max);
    guest_family(s, b, "balancer_guest_virtio_mem_held", "gauge",
                 "1 while its virtio-mem device is held: it did not follow a request (no driver, memory not "
                 "movable); asked again after a hold that doubles, 60 s to 16 min.", gv_vmem_held);
    guest_family(s, b, "balancer_guest_target_bytes", "gauge", "Balloon size the policy chose last tick.", gv_target);
    guest_family(s, b, "balancer_guest_floor_bytes", "gauge", "Never ballooned below this.", gv_floor);
    guest_family(s, b, "balancer_guest_ceiling_bytes", "gauge", "Never ballooned above this.", gv_ceiling);
}

/* Per guest: its memory and counters as it reports them (clamped). */
static void guest_memory_metrics(GString *s, const snapshot *b)
{
    guest_family(s, b, "balancer_guest_free_bytes", "gauge", "Guest free memory (clamped guest report).", gv_free);
    guest_family(s, b, "balancer_guest_available_bytes", "gauge", "Guest available memory (clamped guest report).", gv_avail);
    guest_family(s, b, "balancer_guest_cache_bytes", "gauge", "Guest page cache (clamped guest report).", gv_cache);
    guest_family(s, b, "balancer_guest_reclaimable_cache_bytes", "gauge",
                 "The guest page cache it can drop: not Shmem (at most MemAvailable - MemFree).",
                 gv_reclaimable_cache);
    guest_family(s, b, "balancer_guest_swap_in_bytes_total", "counter", "Guest swap-in, as the guest reports it.", gv_swap_in);
    guest_family(s, b, "balancer_guest_swap_out_bytes_total", "counter", "Guest swap-out, as the guest reports it.", gv_swap_out);
    guest_family(s, b, "balancer_guest_major_faults_total", "counter", "Guest major page faults, as the guest reports them.", gv_majflt);
    guest_family(s, b, "balancer_guest_oom_kills_total", "counter", "The guest's own OOM kills, as it reports them (QEMU 9.2+ balloon statistics; absent when not reported).", gv_oom_kills);
    guest_family(s, b, "balancer_guest_alloc_stalls_total", "counter", "The guest's allocations that stalled in direct reclaim, as it reports them (QEMU 9.2+ balloon statistics; absent when not reported).", gv_alloc_stalls);
}

/* Per guest: how the policy classifies it, its used memory and headroom. */
static void guest_class_metrics(GString *s, const snapshot *b)
{
    guest_family(s, b, "balancer_guest_thrashing", "gauge", "1 while the guest is classified as thrashing.", gv_thrash);
    guest_family(s, b, "balancer_guest_streaming", "gauge", "1 while the guest reads like a stream (its reads, a big cache, few faults); balancer_guest_cache_stream says whether it was proven one.", gv_stream);
    guest_family(s, b, "balancer_guest_in_need", "gauge",
                 "1 while the guest's available memory runs out (never a donor, given memory first).", gv_need);
    guest_family(s, b, "balancer_guest_peak_used_bytes", "gauge",
                 "Decaying peak of the guest's used memory (balloon minus available): reclaim leaves this plus its headroom.",
                 gv_peak_used);
    guest_family(s, b, "balancer_guest_headroom_bytes", "gauge",
                 "Free memory the policy leaves the guest above its used memory: its reserve, or the most its used "
                 "memory rose within 5 s in the last hour (twice that after an OOM kill below its size); 0 not said.",
                 gv_headroom);
    guest_family(s, b, "balancer_guest_stats_stale", "gauge", "1 when the guest's balloon stats are missing or stale.", gv_stale);
    guest_family(s, b, "balancer_guest_cache_stream", "gauge",
                 "1 when the guest's page cache was proven a stream (not read again: its agent, or a probe), which "
                 "gives first.", gv_cache_stream);
    guest_family(s, b, "balancer_guest_cache_reused", "gauge",
                 "1 when a take made the guest read its cache again (its refault), need or thrashing, or its agent "
                 "says it re-reads it: not a stream.", gv_cache_reused);
}

/* Per guest: its per-VM policy. */
static void guest_policy_metrics(GString *s, const snapshot *b)
{
    guest_family(s, b, "balancer_guest_mode_off", "gauge", "1 when the guest's policy is mode=off.", gv_off);
    guest_family(s, b, "balancer_guest_shares", "gauge", "The guest's shares (its policy): it gives in inverse proportion.", gv_shares);
    guest_family(s, b, "balancer_guest_priority", "gauge", "The guest's priority (its policy): 0 low, 1 normal, 2 high.", gv_priority);
    guest_family(s, b, "balancer_guest_protect", "gauge", "1 when its policy says protect=yes: never forced below its available memory.", gv_protect);
}

/* Per guest: balloon moves and errors, values the host clamped or found unbacked, deflate-on-oom. */
static void guest_balloon_metrics(GString *s, const snapshot *b)
{
    guest_family(s, b, "balancer_guest_balloon_reclaimed_bytes_total", "counter", "Bytes taken from the guest by ballooning.", gv_reclaimed);
    guest_family(s, b, "balancer_guest_balloon_returned_bytes_total", "counter", "Bytes given back to the guest by ballooning.", gv_returned);
    guest_family(s, b, "balancer_guest_balloon_operations_total", "counter", "Balloon target changes applied.", gv_ops);
    guest_family(s, b, "balancer_guest_balloon_errors_total", "counter", "Balloon target changes that failed.", gv_errs);
    guest_family(s, b, "balancer_guest_policy_errors_total", "counter", "Rejected policy metadata documents.", gv_perrs);
    guest_family(s, b, "balancer_guest_clamped_values_total", "counter", "Guest-reported values outside what the host allows.", gv_clamped);
    guest_family(s, b, "balancer_guest_unbacked_claims_total", "counter", "Swap-in/fault rates the guest's disk reads could not explain (capped).", gv_unbacked);
    guest_family(s, b, "balancer_guest_unbacked_claims_believed_total", "counter", "Swap-in/fault rates no disk read explains, believed: the guest was short by the host's account (zram, zswap, a root the host does not see as a disk).", gv_unbacked_short);
    guest_family(s, b, "balancer_guest_self_deflations_total", "counter",
                 "Times the guest grew its own balloon (deflate-on-oom: it was about to OOM).", gv_self_deflations);
    guest_family(s, b, "balancer_guest_deflate_on_oom", "gauge",
                 "1 when the guest's balloon deflates rather than let it OOM (QEMU deflate-on-oom, libvirt "
                 "autodeflate), 0 when not, -1 unknown.",
                 gv_deflate_on_oom);
}

/* Per guest: the in-guest agent. */
static void guest_agent_metrics(GString *s, const snapshot *b)
{
    guest_family(s, b, "balancer_guest_agent_up", "gauge", "1 while the in-guest agent reports.", gv_agent_up);
    guest_family(s, b, "balancer_guest_refaults_anon_total", "counter", "Anon workingset refaults, as the guest agent reports them.", gv_ref_anon);
    guest_family(s, b, "balancer_guest_refaults_file_total", "counter", "File workingset refaults, as the guest agent reports them.", gv_ref_file);
    guest_family(s, b, "balancer_guest_agent_psi_some_avg10_ratio", "gauge", "Guest memory PSI some avg10 as a ratio (0.1 = 10% of the time some task waited for memory), from the agent.", gv_agent_psi);
    guest_family(s, b, "balancer_guest_agent_messages_total", "counter", "Agent messages accepted.", gv_agent_msgs);
    guest_family(s, b, "balancer_guest_agent_resets_total", "counter", "Agent counters that went backwards.", gv_agent_resets);
    guest_family(s, b, "balancer_guest_agent_clamped_values_total", "counter", "Agent sizes above the guest's memory.", gv_agent_clamped);
    header(s, "balancer_guest_agent_rejected_total", "counter", "Agent messages rejected, by reason.");
    for (size_t i = 0; i < b->n_guests; i++) {
        const snapshot_guest *g = &b->guests[i];
        for (int r = 0; r < AGENT_REJ_COUNT; r++) {
            g_string_append(s, "balancer_guest_agent_rejected_total{domain=\"");
            append_escaped(s, g->name);
            g_string_append(s, "\",uuid=\"");
            append_escaped(s, g->uuid);
            g_string_append_printf(s, "\",reason=\"%s\"} %llu\n", agent_reject_names[r],
                                   (unsigned long long)g->agent_rejected[r]);
        }
    }
}

/* The host: its memory, per NUMA node, the watermarks, the balancer's state. */
static void host_memory_metrics(GString *s, const snapshot *b)
{
    header(s, "balancer_host_memory_bytes", "gauge", "Host memory by kind, from /proc/meminfo.");
    g_string_append_printf(s, "balancer_host_memory_bytes{kind=\"total\"} %llu\n", (unsigned long long)b->host.host.total_bytes);
    g_string_append_printf(s, "balancer_host_memory_bytes{kind=\"free\"} %llu\n", (unsigned long long)b->host.host.free_bytes);
    g_string_append_printf(s, "balancer_host_memory_bytes{kind=\"available\"} %llu\n", (unsigned long long)b->host.host.available_bytes);
    g_string_append_printf(s, "balancer_host_memory_bytes{kind=\"cached\"} %llu\n", (unsigned long long)b->host.host.cached_bytes);
    header(s, "balancer_host_node_free_bytes", "gauge", "Free memory per NUMA node.");
    for (size_t i = 0; i < b->host.n_nodes; i++)
        g_string_append_printf(s, "balancer_host_node_free_bytes{node=\"%d\"} %llu\n", b->host.nodes[i].node,
                               (unsigned long long)b->host.nodes[i].free_bytes);
    header(s, "balancer_host_node_total_bytes", "gauge", "Memory per NUMA node.");
    for (size_t i = 0; i < b->host.n_nodes; i++)
        g_string_append_printf(s, "balancer_host_node_total_bytes{node=\"%d\"} %llu\n", b->host.nodes[i].node,
                               (unsigned long long)b->host.nodes[i].total_bytes);
    header(s, "balancer_watermark_bytes", "gauge", "Host available-memory watermarks.");
    g_string_append_printf(s, "balancer_watermark_bytes{level=\"min\"} %llu\n", (unsigned long long)b->wm.min);
    g_string_append_printf(s, "balancer_watermark_bytes{level=\"low\"} %llu\n", (unsigned long long)b->wm.low);
    g_string_append_printf(s, "balancer_watermark_bytes{level=\"high\"} %llu\n", (unsigned long long)b->wm.high);
    header(s, "balancer_host_reclaiming", "gauge", "1 between falling below low and rising above high.");
    g_string_append_printf(s, "balancer_host_reclaiming %d\n", b->reclaiming ? 1 : 0);
    header(s, "balancer_paused", "gauge", "1 while balancing is paused (balancerctl pause).");
    g_string_append_printf(s, "balancer_paused %d\n", b->paused ? 1 : 0);
    header(s, "balancer_guests", "gauge", "Guests managed.");
    g_string_append_printf(s, "balancer_guests %zu\n", b->n_guests);
}

/* How long rounds take. */
static void tick_metrics(GString *s, const snapshot *b)
{
    header(s, "balancer_tick_duration_seconds", "histogram", "Time one balancing round took.");
    for (int i = 0; i < TICK_BUCKETS; i++)
        g_string_append_printf(s, "balancer_tick_duration_seconds_bucket{le=\"%g\"} %llu\n", tick_bucket_bounds[i],
                               (unsigned long long)b->tick_hist.bucket[i]);
    g_string_append_printf(s, "balancer_tick_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
                           (unsigned long long)b->tick_hist.count);
    g_string_append_printf(s, "balancer_tick_duration_seconds_sum %.9f\n", b->tick_hist.sum);
    g_string_append_printf(s, "balancer_tick_duration_seconds_count %llu\n", (unsigned long long)b->tick_hist.count);
}

/* The hypervisor backend's calls and failures. */
static void backend_metrics(GString *s, const snapshot *b)
{
    header(s, "balancer_backend_reconnects_total", "counter", "Reconnections to libvirt or QMP.");
    g_string_append_printf(s, "balancer_backend_reconnects_total{backend=\"%s\"} %llu\n", b->backend_name,
                           (unsigned long long)b->backend_reconnects);
    header(s, "balancer_backend_stats_calls_total", "counter",
           "Statistics calls to the hypervisor: scope=\"all\" asked every guest at once (libvirt's bulk call), "
           "scope=\"guest\" one guest.");
    g_string_append_printf(s, "balancer_backend_stats_calls_total{backend=\"%s\",scope=\"all\"} %llu\n",
                           b->backend_name, (unsigned long long)b->stats_calls_all);
    g_string_append_printf(s, "balancer_backend_stats_calls_total{backend=\"%s\",scope=\"guest\"} %llu\n",
                           b->backend_name, (unsigned long long)b->stats_calls_one);
    header(s, "balancer_backend_errors_total", "counter", "Failed balloon operations.");
    g_string_append_printf(s, "balancer_backend_errors_total %llu\n", (unsigned long long)b->backend_errors);
    header(s, "balancer_policy_errors_total", "counter", "Rejected policy metadata documents, all guests.");
    g_string_append_printf(s, "balancer_policy_errors_total %llu\n", (unsigned long long)b->policy_errors);
}

GString *metrics_render(const snapshot *b)
{
    GString *s = g_string_sized_new(4096);
    daemon_metrics(s, b);
    guest_size_metrics(s, b);
    guest_memory_metrics(s, b);
    guest_class_metrics(s, b);
    guest_policy_metrics(s, b);
    guest_balloon_metrics(s, b);
    guest_agent_metrics(s, b);
    host_reclaim_metrics(s, b);
    host_memory_metrics(s, b);
    tick_metrics(s, b);
    backend_metrics(s, b);
    return s;
}

/* ---- HTTP ---- */

struct metrics_server {
    struct MHD_Daemon *mhd;
    pthread_mutex_t lock;
    GString *text;
};

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    metrics_server *m = cls;
    struct MHD_Response *r;
    unsigned code;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const char msg[] = "only GET\n";
        r = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        code = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else if (strcmp(url, "/metrics") == 0) {
        pthread_mutex_lock(&m->lock);
        r = MHD_create_response_from_buffer(m->text->len, m->text->str, MHD_RESPMEM_MUST_COPY);
        pthread_mutex_unlock(&m->lock);
        MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
        code = MHD_HTTP_OK;
    } else {
        static const char msg[] = "membal balancerd: metrics are at /metrics\n";
        r = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        code = MHD_HTTP_NOT_FOUND;
    }
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

metrics_server *metrics_start(const char *listen, GError **error)
{
    char *host = g_strdup(listen);
    char *colon = strrchr(host, ':');
    if (!colon || colon == host || !colon[1]) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "metrics address '%s': expected host:port", listen);
        g_free(host);
        return NULL;
    }
    *colon = '\0';
    const char *port = colon + 1;
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']') { /* [::1]:9640 */
        h[strlen(h) - 1] = '\0';
        h++;
    }
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(h, port, &hints, &ai);
    if (gai != 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "metrics address '%s': %s", listen, gai_strerror(gai));
        g_free(host);
        return NULL;
    }
    metrics_server *m = g_new0(metrics_server, 1);
    pthread_mutex_init(&m->lock, NULL);
    m->text = g_string_new("");
    /* poll(2), not select(2): with a thousand guests' sockets open, a
     * scrape's connection is past FD_SETSIZE, which select cannot watch */
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    m->mhd = MHD_start_daemon(flags, 0, NULL, NULL, answer, m, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!m->mhd) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "cannot listen on %s for metrics (address in use?)", listen);
        g_string_free(m->text, TRUE);
        pthread_mutex_destroy(&m->lock);
        g_free(m);
        g_free(host);
        return NULL;
    }
    g_free(host);
    return m;
}

void metrics_publish(metrics_server *m, GString *text)
{
    pthread_mutex_lock(&m->lock);
    GString *old = m->text;
    m->text = text;
    pthread_mutex_unlock(&m->lock);
    g_string_free(old, TRUE);
}

void metrics_stop(metrics_server *m)
{
    if (!m)
        return;
    MHD_stop_daemon(m->mhd);
    g_string_free(m->text, TRUE);
    pthread_mutex_destroy(&m->lock);
    g_free(m);
}

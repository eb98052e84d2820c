#include "policies/classify.h"

#include <math.h>

#define DEFAULT_PERIOD_S 2.0 /* the stats period the defaults' sample counts are for */

void classify_params_default(classify_params *p)
{
    p->swap_in_bps_enter = 256.0 * 1024; /* 64 pages/s */
    p->major_faults_ps_enter = 100.0;
    p->quiet_ticks_exit = 6;
    p->stream_cache_fraction = 0.25;
    p->stream_read_bps = 1024.0 * 1024; /* 1 MiB/s */
    p->fill_free_fraction = 0.1;
    p->agent_refault_ps = 64.0; /* pages/s coming back soon after eviction */
    p->agent_psi_some = 10.0;
    p->need_reserve_percent = 5.0;
    p->need_reserve_min = 32 * MIB;
    p->need_horizon_s = 10.0;
    p->need_quiet_exit = 3;
    p->peak_decay = 0.98;
}

void classify_params_for_period(classify_params *p, double period_s)
{
    if (period_s <= 0)
        return;
    double k = DEFAULT_PERIOD_S / period_s; /* reports now per report then */
    p->quiet_ticks_exit = (unsigned)fmax(1.0, round((double)p->quiet_ticks_exit * k));
    p->need_quiet_exit = (unsigned)fmax(1.0, round((double)p->need_quiet_exit * k));
    p->peak_decay = pow(p->peak_decay, 1.0 / k);
}

/* Need: used memory rising fast enough to eat the available memory above
 * the reserve within the horizon, or, however slowly it rose, having eaten
 * half the reserve already.  Growth smaller than half the reserve over the
 * horizon is noise for the first rule (a reclaim leaves a guest at its
 * reserve: a page of jitter must not read as need); the second catches
 * the slow growth the first lets through, which would otherwise run a
 * squeezed guest out of memory while the host still has some (a swapless
 * guest: its OOM killer).  need_bytes is what would restore the reserve
 * plus the growth over the horizon, measured against the guest's balloon
 * as it is. */
static void need_update(classify_state *st, const guest_view *g, const classify_params *p)
{
    uint64_t used = g->used_bytes;
    st->peak_used = (double)used > st->peak_used * p->peak_decay ? (double)used : st->peak_used * p->peak_decay;
    uint64_t reserve = guest_reserve(g, p->need_reserve_percent, p->need_reserve_min);
    double growth = g->used_growth_bps > 0 ? g->used_growth_bps * p->need_horizon_s : 0;
    double want = (double)reserve + growth;
    /* what it has left by the host's account (used memory is clamped to
     * what its QEMU touched, so a guest cannot claim need by reporting
     * nothing available), and only below its ceiling: a guest at its
     * whole size that runs this full (a database's shared buffers, a JVM
     * sized to its RAM) has nothing to be given and is not in need */
    uint64_t left = g->actual_bytes > used ? g->actual_bytes - used : 0;
    bool eaten = g->actual_bytes < g->ceiling_bytes && (double)left < (double)reserve / 2;
    /* the guest's own direct signals (QEMU 9.2+ balloon statistics): its
     * OOM killer ran, or its allocations stalled in direct reclaim with
     * less reclaimable cache than its reserve left (a stall while clean
     * cache remains is the kernel dropping cache, which is cheap; with none
     * left the guest is out of memory).  Below its ceiling only, like eaten:
     * at its whole size there is nothing to give it */
    bool direct = g->actual_bytes < g->ceiling_bytes &&
                  (g->oom_killed || (g->alloc_stalls_ps > 0 && g->reclaimable_cache_bytes < reserve));
    bool rising = growth >= (double)reserve / 2 && (double)g->available_bytes < want;
    bool need = rising || eaten || direct;
    if (need) {
        st->need_why = direct ? (g->oom_killed ? "its OOM killer ran" : "its allocations stall with no cache left")
                       : eaten ? "it has eaten half its reserve"
                               : "its used memory rises to eat its reserve within the horizon";
        st->need = true;
        st->need_quiet = 0;
    } else if (st->need && ++st->need_quiet >= p->need_quiet_exit) {
        st->need = false;
        st->need_quiet = 0;
    }
    double short_by = want > (double)g->available_bytes ? want - (double)g->available_bytes : 0;
    /* a guest that just ran out gets at least its reserve back (an OOM
     * kill frees memory: its available memory says nothing of the need) */
    if (direct && short_by < (double)reserve)
        short_by = (double)reserve;
    st->need_bytes = need ? (uint64_t)short_by : 0;
}

void classify_update(classify_state *st, const guest_view *g, const classify_params *p)
{
    if (!g->stats_valid)
        return; /* no new evidence: keep the previous verdict */
    need_update(st, g, p);
    bool hot = g->swap_in_bps >= p->swap_in_bps_enter ||
               g->major_faults_ps >= p->major_faults_ps_enter;
    if (hot && g->agent_fresh)
        hot = g->agent_refault_ps >= p->agent_refault_ps || g->agent_psi_some >= p->agent_psi_some;
    if (hot) {
        st->thrashing = true;
        st->quiet = 0;
    } else if (st->thrashing && ++st->quiet >= p->quiet_ticks_exit) {
        st->thrashing = false;
        st->quiet = 0;
    }
    /* Streaming: a large cache that costs nothing to refill (no faults,
     * no swap-in).  Never both: a thrashing guest is not a donor. */
    bool quiet_faults = g->major_faults_ps < p->major_faults_ps_enter / 4 &&
                        g->swap_in_bps < p->swap_in_bps_enter / 4;
    /* A stream reads its disks all the time; a big cache whose guest reads
     * nothing (as the host measures it) is a cache in use or at rest, not
     * a stream: a buffered-IO database's working set looks like this. */
    bool reading = g->disk_read_bps < 0 || g->disk_read_bps >= p->stream_read_bps;
    /* A guest that reads its disks into free memory, its cache growing, is
     * filling its cache:
     * a stream and a database warming up its buffer cache look alike until
     * the cache is full, and its free memory is cache in the making.  It
     * gives nothing until it settles (the host kernel alone balances it,
     * as with no balancer). */
    bool cache_grows = g->reclaimable_cache_bytes > st->cache_prev;
    st->cache_prev = g->reclaimable_cache_bytes;
    st->filling = cache_grows && g->disk_read_bps >= p->stream_read_bps &&
                  g->free_bytes > p->fill_free_fraction * (double)g->actual_bytes;
    st->streaming = !st->thrashing && !st->need &&
                    ((quiet_faults && reading && g->actual_bytes > 0 &&
                      (double)g->reclaimable_cache_bytes >= p->stream_cache_fraction * (double)g->actual_bytes) ||
                     (g->agent_fresh && g->agent_hint_streaming));
}

#include "policies/classify.h"

void classify_params_default(classify_params *p)
{
    p->swap_in_bps_enter = 256.0 * 1024; /* 64 pages/s */
    p->major_faults_ps_enter = 100.0;
    p->quiet_ticks_exit = 6;
    p->stream_cache_fraction = 0.25;
    p->agent_refault_ps = 64.0; /* pages/s coming back soon after eviction */
    p->agent_psi_some = 10.0;
}

void classify_update(classify_state *st, const guest_view *g, const classify_params *p)
{
    if (!g->stats_valid)
        return; /* no new evidence: keep the previous verdict */
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
    st->streaming = !st->thrashing &&
                    ((quiet_faults && g->actual_bytes > 0 &&
                      (double)g->cache_bytes >= p->stream_cache_fraction * (double)g->actual_bytes) ||
                     (g->agent_fresh && g->agent_hint_streaming));
}

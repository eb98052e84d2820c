#include "policies/split_params.h"

#include "policies/policy.h"

void split_params_default(split_params *p)
{
    *p = (split_params){
        .experiment_s = 30.0,
        .keep_s = 300.0,
        .refault_min_bps = 2.0 * 1024 * 1024,
        .refault_factor = 2.0,
        .probe_s = 6.0,
        .probe_reuse_share = 0.25,
        .agent_steal_min_ps = 64.0,
        .agent_stream_share = 0.02,
        .agent_reuse_share = 0.10,
        .pace_half_life_s = 300.0,
        .host_bound_fps = 256.0,
        .pace_watch_s = 60.0,
        .settle_reports = 3,
        .settle_s = 10.0,
        .slowed_after_s = 10.0,
        .slowed_fraction = 0.75,
        .reboot_ack_bytes = MIB,
        .reboot_hold_s = 60.0,
        .jump_hold_s = 3600.0,
        .jump_window_s = 5.0,
        .inflate_grace_s = 5.0,
        .frees_nothing_min_bytes = 64 * MIB,
        .fn_baseline_s = 60.0,
    };
}

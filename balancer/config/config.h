/*
 * balancerd configuration: /etc/balancer/balancer.conf (GKeyFile), then
 * command-line overrides.  Every key is optional; errors name the key and
 * its line.
 */
#ifndef MEMBAL_CONFIG_H
#define MEMBAL_CONFIG_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "policies/policy.h"

#define CONFIG_DEFAULT_PATH "/etc/balancer/balancer.conf"
#define CONTROL_DEFAULT_SOCKET "/run/balancer/control.sock"
/* What balancerd creates outside itself is recorded here (the unit's
 * RuntimeDirectory): see reclaim/kdamond_ledger.h. */
#define STATE_DEFAULT_DIR "/run/balancer"
#define DAMON_DEFAULT_ADMIN "/sys/kernel/mm/damon/admin"

typedef struct {
    char *connect_uri;          /* [balancer] connect */
    char *policy;               /* [balancer] policy */
    unsigned tick_seconds;      /* [balancer] tick */
    unsigned stats_period;      /* [balancer] stats_period (balloon stats polling, s) */
    char *wm_min, *wm_low, *wm_high; /* [watermarks] min/low/high: size or % of MemTotal */
    double default_floor_percent;    /* [guests] default_floor_percent of max memory */
    uint64_t default_floor_min;      /* [guests] default_floor_min */
    policy_tunables tun;        /* [policy] step_percent, step_min, reserve_percent,
                                   reserve_min, comfort_percent, min_change, trim_streams */
    char *metrics_listen;       /* [metrics] listen (host:port, "" = off) */
    char *control_socket;       /* [balancer] control_socket ("" = off) */
    char *memory_cgroup;        /* [host] memory_cgroup: balance this cgroup's limit ("" = the machine) */
    char *state_dir;            /* --state-dir: where what we create is recorded (no key) */
    char *damon_admin;          /* --damon-admin: DAMON's sysfs admin directory (no key) */
    /* [host_reclaim]: paging cold guest memory out from the host */
    bool hr_enabled;            /* enabled */
    char *hr_source;            /* source: auto, damon, probe, memcg */
    unsigned hr_scan_interval;  /* scan_interval (s) */
    unsigned hr_min_cold_age;   /* min_cold_age (scans) */
    unsigned hr_max_cold_age;   /* max_cold_age (scans) */
    uint64_t hr_max_per_scan;   /* max_per_scan (bytes per guest per scan) */
    uint64_t hr_min_per_scan;   /* min_per_scan */
    unsigned hr_probes;         /* probes_per_chunk (probe source) */
    bool hr_protect;            /* protect_working_set (cgroup memory.low / soft limit) */
    bool hr_proactive;          /* proactive: page out long-idle memory without host pressure */
    unsigned hr_proactive_age;  /* proactive_age (s): idle this long before a proactive pageout */
    double hr_promotion_budget; /* promotion_budget (% of a guest's working set per minute) */
    double hr_max_cpu;          /* max_cpu (% of one core for scanning) */
    uint64_t hr_max_swap_out;   /* max_swap_out (bytes per second, all guests) */
} balancer_config;

void config_defaults(balancer_config *c);
void config_clear(balancer_config *c);
/* Load path over the defaults.  A missing file is an error only if
 * must_exist.  Returns 0, or -1 with the error naming path:line, key and
 * value; c is left as it was. */
int config_load(balancer_config *c, const char *path, bool must_exist, GError **error);
/* The same from text already in memory (path names it in errors). */
int config_load_text(balancer_config *c, const char *data, size_t len, const char *path, GError **error);
/* Resolve the watermarks against host MemTotal; checks min < low < high. */
int config_watermarks(const balancer_config *c, uint64_t host_total, watermarks *wm, GError **error);

#endif

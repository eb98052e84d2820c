/*
 * The host-reclaim stage of a tick ([host_reclaim] in balancer.conf): every
 * scan_interval it scans each guest's RAM (host_reclaim.c) and, while the
 * host is below its low watermark by more than this tick's balloon moves
 * cover, pages cold guest memory out to host swap — per NUMA node when
 * the host has several.  Never from a thrashing guest, one with mode=off
 * or protect=yes.
 */
#ifndef MEMBAL_HOST_SWAP_H
#define MEMBAL_HOST_SWAP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct balancer balancer;
struct guest;

/* What /metrics and balancerctl show per guest. */
typedef struct {
    bool active;                 /* scanning this guest */
    uint64_t resident_bytes, swapped_bytes, cold_bytes;
    uint64_t paged_out_bytes;    /* total paged out by host reclaim */
    uint64_t probe_bytes;
    uint64_t refaults;           /* paged-out chunks that came back within the window */
    uint64_t refault_bytes;      /* what came back in them */
    uint32_t cold_age_scans;     /* current threshold */
    uint64_t budget_bytes;       /* current per-scan budget */
    uint64_t protected_bytes;    /* memory.low / soft limit we set, 0 none */
} host_swap_guest_stats;

typedef struct {
    bool enabled;
    const char *source;          /* "damon" or "probe" */
    uint64_t scans, scan_errors, paged_out_bytes;
    double cpu_seconds;          /* balancerd's own scanning CPU */
    double source_cpu_seconds;   /* kdamond CPU (damon) */
} host_swap_stats;

/* (Re)build the stage from b->cfg; tears the old one down.  0, or -1
 * with *err (source = damon but DAMON is not usable). */
int host_swap_setup(balancer *b, char **err);
void host_swap_teardown(balancer *b);
/* balloon_reclaim: bytes this tick's balloon moves take back. */
void host_swap_tick(balancer *b, uint64_t balloon_reclaim);
void host_swap_guest_release(struct guest *g);
void host_swap_stats_get(const balancer *b, host_swap_stats *out);
bool host_swap_guest_stats_get(const struct guest *g, host_swap_guest_stats *out);

#endif

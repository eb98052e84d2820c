/*
 * Host-side reclaim of cold guest memory, the last resort after
 * ballooning: scan each guest's RAM in chunks, age the chunks
 * (policies/cold_lru.c) from what a cold-page source saw (cold_source.h),
 * and page the coldest out with process_madvise(MADV_PAGEOUT) within a
 * byte budget.  A guest whose paged-out chunks come back (refaults) gets a
 * longer cold age and a smaller budget automatically.
 *
 * One round: host_reclaim_scan() -> reclaim_guest_pageout() for whoever
 * should give -> host_reclaim_settle().
 */
#ifndef MEMBAL_HOST_RECLAIM_H
#define MEMBAL_HOST_RECLAIM_H

#include <stdbool.h>
#include <glib.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "policies/cold_lru.h"
#include "reclaim/cold_source.h"
#include "reclaim/guest_ram.h"
#include "host/node_map.h"

#define RECLAIM_CHUNK_BYTES (2ULL * 1024 * 1024)

typedef struct {
    guest_ram ram;
    cold_lru lru;          /* its n_chunks and chunk_bytes describe the split */
    uint64_t *pm;          /* pagemap during a scan (NULL between scans) */
    uint8_t *was_out;      /* bitmap: page swapped after the previous scan's pageouts */
    uint16_t *hint;        /* per chunk, a page the probe source saw in use */
    bool have_prev;
    chunk_obs *obs;
    int16_t *chunk_node;   /* NUMA node of each chunk's memory, -1 unknown */
    /* what the last scan found */
    uint64_t resident_bytes, swapped_bytes, cold_bytes;
    /* totals */
    uint64_t paged_out_bytes;   /* by reclaim, not counting probes */
    uint64_t probe_bytes;       /* paged out as probes (probe source) */
    uint64_t pageout_errors;
} reclaim_guest;

/* Open pid's guest RAM (ram_bytes) for reclaim.  0, or -1 with the reason. */
int reclaim_guest_open(reclaim_guest *g, pid_t pid, uint64_t ram_bytes, const cold_tunables *t, GError **error);
void reclaim_guest_close(reclaim_guest *g);

/* Read every guest's pagemap, find refaults (pages we paged out that are
 * present again), let the source mark references, age the lists.
 * now_us: a monotonic clock.  Guests whose process is gone are reported
 * through failed[i] (may be NULL).  0, or -1 with the reason if the source
 * failed (the lists still aged on what pagemap showed). */
int host_reclaim_scan(cold_source *src, reclaim_guest **g, size_t n, const node_map *nodes, uint64_t now_us,
                      bool *failed, GError **error);

/* Page out up to budget bytes of g's coldest chunks; only chunks on node
 * when node >= 0.  Returns the bytes paged out. */
uint64_t reclaim_guest_pageout(reclaim_guest *g, uint64_t budget, int node);
/* How many of the k ranges, in order, lie wholly within the first
 * `advised` bytes a process_madvise covered (it may stop early when the
 * process exits): only those chunks count as paged out. */
size_t pageout_covered(const guest_ram *r, const ram_range *rr, size_t k, uint64_t advised);

/* After the round's pageouts: the source arms its next observation and
 * the pagemap is re-read as the baseline for the next refault check. */
void host_reclaim_settle(cold_source *src, reclaim_guest **g, size_t n);

#endif

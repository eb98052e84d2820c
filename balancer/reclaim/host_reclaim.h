/*
 * Host-side reclaim of cold guest memory: scan each guest's RAM in chunks,
 * age the chunks (policies/cold_lru.c) from what a cold-page source saw
 * (cold_source.h), and page the coldest out with
 * process_madvise(MADV_PAGEOUT) within a byte budget.  A guest whose
 * paged-out chunks come back (refaults) gets a longer cold age and a
 * smaller budget automatically.
 *
 * A scan is incremental: RECLAIM_BATCH_CHUNKS chunks of pagemap at a time
 * (256 KiB of entries with 4 KiB pages), so the caller can pause between
 * steps and nothing is allocated in proportion to guest RAM during a scan;
 * between scans a guest costs a few dozen bytes per 2 MiB chunk.
 *
 * One round, per guest g:
 *   reclaim_scan_begin(src)
 *   while (reclaim_guest_scan_step(src, g, ...) > 0) ;   for every guest
 *   reclaim_scan_end(src, g...)                            ages the lists
 *   reclaim_guest_pageout(g, budget, node)                 whoever gives
 *   while (reclaim_guest_settle_step(src, g, ...) > 0) ;  the next baseline
 * host_reclaim_scan() and host_reclaim_settle() do the steps in one go.
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
#define RECLAIM_BATCH_CHUNKS 64

typedef struct {
    guest_ram ram;
    cold_lru lru;          /* its n_chunks and chunk_bytes describe the split */
    chunk_obs *obs;        /* per chunk, this scan's observation */
    chunk_base *base;      /* per chunk, the last scan's end */
    int16_t *chunk_node;   /* NUMA node of each chunk's memory, -1 unknown */
    bool have_prev;        /* a scan was settled: base holds */
    size_t cursor;         /* next chunk of the running scan or settle */
    uint64_t scan_resident, scan_swapped;   /* counted so far in this scan */
    uint64_t scan_promoted, scan_probe_back; /* pages back from swap so far: of paged-out chunks, of probes */
    /* what the last complete scan found */
    uint64_t resident_bytes, swapped_bytes, cold_bytes;
    uint64_t promoted_pages;    /* pages of paged-out chunks back in since the scan before */
    uint64_t probe_back_pages;  /* probes (and other pages of resident chunks) back in */
    /* totals */
    uint64_t paged_out_bytes;   /* by reclaim, not counting probes */
    uint64_t probe_bytes;       /* paged out as probes (probe source) */
    uint64_t pageout_errors;
} reclaim_guest;

/* Open pid's guest RAM (ram_bytes) for reclaim.  0, or -1 with the reason. */
int reclaim_guest_open(reclaim_guest *g, pid_t pid, uint64_t ram_bytes, const cold_tunables *t, GError **error);
void reclaim_guest_close(reclaim_guest *g);
/* Its working set as the last scan measured it: resident and not cold. */
static inline uint64_t reclaim_guest_ws_bytes(const reclaim_guest *g)
{
    return g->resident_bytes > g->cold_bytes ? g->resident_bytes - g->cold_bytes : 0;
}
/* Bytes this guest's scan state takes between and during scans. */
size_t reclaim_guest_state_bytes(const reclaim_guest *g);

/* A scan starts (the source's begin).  0, or -1 with the reason: the
 * scan then counts every chunk as used. */
int reclaim_scan_begin(cold_source *src, uint64_t now_us, GError **error);
/* Observe up to max_chunks more chunks of g.  1 while chunks are left, 0
 * when g is done, -1 when its process is gone (its scan is abandoned). */
int reclaim_guest_scan_step(cold_source *src, reclaim_guest *g, const node_map *nodes, size_t max_chunks);
/* Every guest was observed: the source's end, then each of the k guests
 * in g (all scanned to 0) ages its lists.  0, or -1 with the reason. */
int reclaim_scan_end(cold_source *src, reclaim_guest **g, size_t k, uint64_t now_us, GError **error);

/* Page out up to budget bytes of g's coldest chunks: idle for at least
 * min_idle scans (and the guest's cold age), only on node when node >= 0.
 * Returns the bytes paged out. */
uint64_t reclaim_guest_pageout(reclaim_guest *g, uint64_t budget, int node, uint32_t min_idle);
/* How many of the k ranges, in order, lie wholly within the first
 * `advised` bytes a process_madvise covered (it may stop early when the
 * process exits): only those chunks count as paged out. */
size_t pageout_covered(const guest_ram *r, const ram_range *rr, size_t k, uint64_t advised);

/* After the pageouts, up to max_chunks more chunks: the source arms its
 * next observation (probes) and the chunk's baseline is taken.  1 while
 * chunks are left, 0 when done, -1 when the process is gone. */
int reclaim_guest_settle_step(cold_source *src, reclaim_guest *g, size_t max_chunks);

/* All the steps of a scan at once, for n guests; failed[i] (may be NULL)
 * says which guests' processes were gone.  0, or -1 with the source's
 * reason (the lists still aged on what pagemap showed). */
int host_reclaim_scan(cold_source *src, reclaim_guest **g, size_t n, const node_map *nodes, uint64_t now_us,
                      bool *failed, GError **error);
/* All the settle steps at once. */
void host_reclaim_settle(cold_source *src, reclaim_guest **g, size_t n);

#endif

/*
 * Where host-side reclaim learns which chunks of guest RAM were accessed:
 * one small interface, two sources.
 *
 *   damon  DAMON's physical-address monitor through sysfs
 *          (/sys/kernel/mm/damon/admin): the kernel samples the accessed
 *          bits of the guests' page frames; we read its regions
 *          (tried_regions of a "stat" scheme) and map each chunk's frames
 *          into them.  Costs the kdamond thread's CPU, nothing in guests.
 *   probe  our own scanner, for kernels without DAMON: a few pages per
 *          chunk are paged out as probes; a probe faulted back in means
 *          the chunk was accessed.  A chunk whose probes stay out is cold.
 *          A page that came back (a probe, or part of a paged-out chunk)
 *          was seen in use, so the next probes go there first (and the
 *          chunk remembers it): a chunk whose use is a few pages keeps
 *          being watched where it is used.  A chunk none of whose pages
 *          was out at the last scan's end (the kernel did not page its
 *          probes out: pinned, locked, or just faulted-in pages) was not
 *          observed, and counts as used.
 *          Costs one swap-in per probe of a hot chunk per scan (by
 *          default 2 pages of 512) and splits transparent huge pages.
 *
 * Both feed the same aging lists (policies/cold_lru.c).  Pages that we
 * paged out and that are present again are a reference for every source
 * (host_reclaim.c sees that in pagemap before calling the source); for a
 * paged-out chunk that is the only evidence (a refault needs 8 pages
 * back).
 */
#ifndef MEMBAL_COLD_SOURCE_H
#define MEMBAL_COLD_SOURCE_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policies/cold_lru.h"
#include "reclaim/guest_ram.h"

/* Bit page of a one-bit-per-page bitmap (was_out). */
static inline bool page_bitmap_test(const uint8_t *bits, size_t page)
{
    return bits[page / 8] >> (page % 8) & 1;
}

/* One guest's RAM during a scan. */
typedef struct {
    const guest_ram *ram;
    const uint64_t *pagemap;   /* entries read at the start of this scan */
    const uint8_t *was_out;    /* bitmap: swapped at the previous scan's end, NULL if unknown */
    uint16_t *hint;            /* per chunk, a page seen in use (index + 1, 0 none): the probe source's */
    const cold_lru *lru;       /* chunk lists and sizes (evicted chunks need no probes) */
    chunk_obs *obs;            /* the source sets referenced where it saw accesses */
} cold_target;

typedef struct cold_source cold_source;

typedef struct {
    const char *name;
    /* Mark chunks accessed since the previous scan.  now_us is a
     * monotonic timestamp of this scan.  0, or -1 with the reason. */
    int (*observe)(cold_source *s, cold_target *t, size_t n, uint64_t now_us, GError **error);
    /* After this scan's pageouts: arm detection of the next accesses.
     * Returns the bytes the source paged out itself (probes). */
    uint64_t (*settle)(cold_source *s, cold_target *t, size_t n);
    /* CPU seconds the source spent outside this process (kdamond). */
    double (*external_cpu_seconds)(const cold_source *s);
    void (*destroy)(cold_source *s);
} cold_source_ops;

struct cold_source {
    const cold_source_ops *ops;
};

typedef struct {
    uint32_t sample_us, aggr_us;   /* DAMON sampling and aggregation intervals */
    uint32_t max_regions;          /* DAMON region cap (its cost is per region) */
} damon_params;

void damon_params_default(damon_params *p);

typedef enum {
    DAMON_FREE,     /* sysfs present, no kdamond configured: ours to create */
    DAMON_ABSENT,   /* no DAMON sysfs on this kernel */
    DAMON_BUSY,     /* kdamonds exist that we did not create: never touched */
} damon_state;

/* Whether DAMON can be ours, with the reason when it cannot.  Reads
 * only; writes nothing. */
damon_state damon_check(const char *admin_dir, GError **error);

/* NULL with the reason if DAMON's sysfs is absent, has no "paddr" operations, or
 * a kdamond exists that we did not create (someone else's, maybe the
 * machine's own from boot: we never write to it). */
cold_source *cold_source_damon_new(const char *admin_dir, const damon_params *p, GError **error);
cold_source *cold_source_probe_new(unsigned probes_per_chunk);

#endif

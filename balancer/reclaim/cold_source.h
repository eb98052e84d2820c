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
 *          A probe that came back was seen in use, so the next probes go
 *          there first (and the chunk remembers it): a chunk whose use
 *          is a few pages keeps being watched where it is used.  A chunk
 *          none of whose pages was out at the last scan's end (the kernel did not page its
 *          probes out: pinned, locked, or just faulted-in pages) was not
 *          observed, and counts as used.
 *          Costs one swap-in per probe of a hot chunk per scan (by
 *          default 2 pages of 512).  Never probes a page of a host huge
 *          page (that would split it): such chunks count as used.
 *
 * Both feed the same aging lists (policies/cold_lru.c).  Pages that we
 * paged out and that are present again are a reference for every source
 * (host_reclaim.c sees that in pagemap, against the chunk's baseline,
 * before calling the source); for a paged-out chunk that is the only
 * evidence (a refault needs 8 pages back).
 */
#ifndef MEMBAL_COLD_SOURCE_H
#define MEMBAL_COLD_SOURCE_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policies/cold_lru.h"
#include "reclaim/guest_ram.h"

/* Probe pages a chunk remembers (more may be out; these are the ones
 * whose return is noticed page by page). */
#define PROBE_TRACK 4

/* What one chunk looked like at the end of the last scan (after its
 * pageouts and probes): the baseline the next scan compares against.
 * A few bytes a chunk, never a bit a page, so scan state stays
 * O(chunks) whatever the guest's RAM. */
typedef struct {
    uint16_t out_pages;           /* swapped */
    uint16_t resident_pages;      /* present */
    uint16_t hint;                /* a page seen in use, index + 1 (0 none): the probe source's */
    uint16_t paged;               /* 1 while pages host reclaim paged out of it (not probes) are out */
    uint16_t probe[PROBE_TRACK];  /* pages out as probes, index + 1 (0 none) */
} chunk_base;

/* One guest's RAM as a source sees it during a scan. */
typedef struct {
    const guest_ram *ram;
    const cold_lru *lru;       /* chunk lists and sizes (evicted chunks need no probes) */
    chunk_obs *obs;            /* the source sets referenced where it saw accesses */
    chunk_base *base;          /* per chunk, the last scan's baseline */
    bool have_prev;            /* the baseline exists (a scan was settled before) */
} cold_target;

typedef struct cold_source cold_source;

/*
 * A scan, incremental: begin(); observe() for every chunk of every
 * guest, a batch of chunks at a time, each with its pagemap entries only;
 * end().  Then, after the pageouts, arm() chunk by chunk.  No call needs
 * more than one chunk's pagemap at once.
 */
typedef struct {
    const char *name;
    /* A scan starts.  now_us is a monotonic timestamp.  0, or -1 with the
     * reason (the scan then counts every chunk as used). */
    int (*begin)(cold_source *s, uint64_t now_us, GError **error);
    /* Mark chunk c referenced if it was accessed since the previous scan;
     * pm: its n pagemap entries.  host_reclaim.c has already marked
     * chunks whose paged-out pages came back. */
    void (*observe)(cold_source *s, cold_target *t, size_t c, const uint64_t *pm, size_t n);
    /* Every chunk was observed.  0, or -1 with the reason. */
    int (*end)(cold_source *s, uint64_t now_us, GError **error);
    /* After the pageouts: pages of chunk c to page out so the next access
     * shows (probes), into out (room for max_probes); returns the count
     * and notes them in t->base[c].  NULL when the source needs none. */
    size_t (*arm)(cold_source *s, cold_target *t, size_t c, const uint64_t *pm, size_t n, ram_range *out);
    /* CPU seconds the source spent outside this process (kdamond). */
    double (*external_cpu_seconds)(const cold_source *s);
    void (*destroy)(cold_source *s);
} cold_source_ops;

struct cold_source {
    const cold_source_ops *ops;
    unsigned max_probes;          /* arm()'s most ranges per chunk */
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
 * machine's own from boot: we never write to it).  The kdamond is
 * recorded in the ledger at ledger_path (kdamond_ledger.h) before it is
 * created; a leftover that ledger proves ours is taken back first. */
cold_source *cold_source_damon_new(const char *admin_dir, const char *ledger_path, const damon_params *p,
                                   GError **error);
cold_source *cold_source_probe_new(unsigned probes_per_chunk);

#endif

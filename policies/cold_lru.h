/*
 * Cold-chunk aging for host-side reclaim: the split LRU of mm/vmscan.c at
 * the granularity of fixed-size chunks (2 MiB) of one guest's RAM, with the
 * refault feedback of mm/workingset.c.  Pure: no I/O.  The caller observes
 * each chunk once per scan (was it referenced? how many pages are
 * resident?) through whatever cold-page source it has (DAMON or our own
 * probe scanner) and pages out what cold_lru_pick() returns.
 *
 * Lists:
 *   ACTIVE    referenced recently.  Not referenced during a scan -> INACTIVE.
 *   INACTIVE  aging; idle_scans counts scans since the last reference.  A
 *             reference gives a second chance (stays inactive, flag set);
 *             a second reference while flagged promotes it back to ACTIVE.
 *             Chunks idle for >= cold_age scans are reclaim candidates,
 *             oldest first.
 *   EVICTED   paged out by us.  Pages coming back (the source reports the
 *             chunk referenced) is a refault.  A few pages back, too few
 *             for a refault, are still a use: the chunk goes back to
 *             INACTIVE and ages from the start, so what came back is not
 *             paged out again at once.  Pages that never went out (a
 *             partial pageout) keep the age they had.
 *
 * Feedback (a promotion-rate target of zero, as in Google's far-memory
 * tiering): a refault of a chunk whose reuse distance (idle scans before
 * eviction + scans since) is within max_cold_age means the threshold was
 * too short for this guest, so cold_age jumps past that distance and the
 * per-scan budget halves.  After calm_scans scans without a refault the
 * threshold steps back down one scan and the budget grows by a quarter
 * (30 by default: slow, so a guest is not probed with refaults every few
 * scans).
 * A refaulted chunk goes straight to ACTIVE (workingset activation).
 */
#ifndef MEMBAL_COLD_LRU_H
#define MEMBAL_COLD_LRU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { CHUNK_ACTIVE = 0, CHUNK_INACTIVE, CHUNK_EVICTED } chunk_list;

typedef struct {
    uint8_t list;            /* chunk_list */
    bool second_chance;      /* referenced once while inactive */
    uint32_t idle_scans;     /* scans since the last reference */
    uint32_t evicted_at;     /* scan number of the pageout */
    uint32_t idle_at_evict;  /* idle_scans when paged out */
} cold_chunk;

/* What the source saw of one chunk during the last scan. */
typedef struct {
    bool referenced;          /* accessed since the previous scan (or faulted back in) */
    uint32_t resident_pages;  /* present in RAM now */
    uint32_t back_pages;      /* of those, pages we had paged out (they came back) */
} chunk_obs;

typedef struct {
    uint32_t min_cold_age;     /* scans; the threshold never goes below this */
    uint32_t max_cold_age;     /* ... nor above this; also the refault window */
    uint64_t min_budget_bytes; /* per scan; the feedback never cuts below this */
    uint64_t max_budget_bytes; /* per scan */
    uint32_t calm_scans;       /* refault-free scans before relaxing */
} cold_tunables;

typedef struct {
    size_t n_chunks;
    uint64_t chunk_bytes;
    uint64_t page_bytes;
    cold_chunk *chunks;
    cold_tunables tun;
    uint32_t scan;            /* scans done */
    uint32_t cold_age;        /* current threshold (feedback-controlled) */
    uint64_t budget_bytes;    /* current per-scan pageout budget */
    uint32_t calm;            /* scans since the last refault */
    /* totals for metrics */
    uint64_t refaults_total;
    uint64_t refault_pages_total;  /* pages back (obs back_pages) in those refaults */
    uint64_t evictions_total;
    uint64_t evicted_bytes_total;
} cold_lru;

void cold_tunables_default(cold_tunables *t);
/* Returns 0, or -1 if n_chunks is 0 or the sizes are not powers of two. */
int cold_lru_init(cold_lru *l, size_t n_chunks, uint64_t chunk_bytes, uint64_t page_bytes,
                  const cold_tunables *t);
void cold_lru_free(cold_lru *l);

/* Apply one scan's observations (obs has n_chunks entries).  Returns the
 * number of refaults seen in this scan. */
size_t cold_lru_age(cold_lru *l, const chunk_obs *obs);

/* Up to max_out chunk indices to page out now, oldest idle first, whose
 * resident bytes add up to at most budget (and at most the current
 * feedback budget).  Only INACTIVE chunks idle for >= cold_age scans with
 * resident pages qualify.  Returns the count; *bytes gets their resident
 * bytes. */
size_t cold_lru_pick(const cold_lru *l, const chunk_obs *obs, uint64_t budget, size_t *out,
                     size_t max_out, uint64_t *bytes);

/* cold_lru_pick for chunks idle for at least min_idle scans too. */
size_t cold_lru_pick_idle(const cold_lru *l, const chunk_obs *obs, uint32_t min_idle, uint64_t budget, size_t *out,
                          size_t max_out, uint64_t *bytes);

/* The caller paged chunk idx out (resident_bytes of it). */
void cold_lru_mark_evicted(cold_lru *l, size_t idx, uint64_t resident_bytes);

/* Bytes in chunks that are candidates now (idle >= cold_age, resident). */
uint64_t cold_lru_cold_bytes(const cold_lru *l, const chunk_obs *obs);

#endif

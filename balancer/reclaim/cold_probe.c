/*
 * The probe scanner: our own cold-page detection for kernels without
 * DAMON (and without idle page tracking or soft-dirty, like this one).
 * Each resident chunk keeps probes_per_chunk of its pages paged out; the
 * guest touching one faults it back in, which host_reclaim.c sees in
 * pagemap at the next scan as a reference (the chunk's swapped count fell
 * and its present count rose, or a remembered probe is present).  Cold chunks keep their probes
 * out at no further cost; hot chunks pay one swap-in per probe per scan.
 * It never probes a page of a host huge page (THP, hugetlb): paging out
 * part of one splits it, and the guest would lose the huge page behind
 * hot memory for good (measured: a guest's THP-backed memory fell from
 * 314 to 32 MiB after its first scan, and its later 300 MiB allocation
 * took 5.8 s instead of 1.9-3.3 s, faulting 4 KiB pages where huge pages
 * had been).  A chunk in a huge page is therefore never observed, counts
 * as used and is not paged out by this source; DAMON reads accessed bits
 * without splitting.
 */
#include "reclaim/cold_source.h"

#include <glib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct {
    cold_source base;
    uint32_t seed;
} probe_source;

static int probe_begin(cold_source *s, uint64_t now_us, GError **error)
{
    (void)s, (void)now_us, (void)error;
    return 0;
}

static int probe_end(cold_source *s, uint64_t now_us, GError **error)
{
    (void)s, (void)now_us, (void)error;
    return 0;
}

/* Probes that came back were found by host_reclaim.c already.  What is
 * left: a resident chunk with no page out at the last scan's end had no
 * probe watching it, so this scan saw nothing of it: used, not idle (the
 * first scan of a guest is the same case). */
static void probe_observe(cold_source *s, cold_target *t, size_t c, const uint64_t *pm, size_t n)
{
    (void)s, (void)pm, (void)n;
    chunk_obs *o = &t->obs[c];
    if (!t->have_prev || o->referenced || !o->resident_pages || t->lru->chunks[c].list == CHUNK_EVICTED)
        return;
    o->referenced = t->base[c].out_pages == 0;
}

static uint32_t next_rand(probe_source *p)
{
    p->seed = p->seed * 1103515245u + 12345u;
    return p->seed >> 8;
}

/* A page that may be a probe: the guest's own, and not part of a host
 * huge page. */
static bool probe_ok(const cold_target *t, uint64_t entry)
{
    return guest_ram_page_resident(t->ram, entry) && !guest_ram_page_huge(t->ram, entry);
}

/* Page i of the chunk was out at the last scan's end and is back: a
 * remembered probe that is present, or any present page of a chunk that
 * was mostly out then (paged out, and this is what came back of it). */
static bool came_back(const cold_target *t, size_t c, const uint64_t *pm, size_t n, size_t i)
{
    if (!t->have_prev || !guest_ram_page_resident(t->ram, pm[i]))
        return false;
    if ((size_t)t->base[c].out_pages * 2 >= n)
        return true;
    for (size_t k = 0; k < PROBE_TRACK; k++)
        if (t->base[c].probe[k] == i + 1)
            return true;
    return false;
}

static bool is_probe(const ram_range *rr, size_t nr, uint64_t off)
{
    for (size_t k = 0; k < nr; k++)
        if (rr[k].offset == off)
            return true;
    return false;
}

/* One chunk's probes: probes that came back (seen in use) first, else
 * the page the chunk remembers, then random present pages until probes
 * are out.  Offsets within the chunk. */
static size_t probe_arm(cold_source *s, cold_target *t, size_t c, const uint64_t *pm, size_t n, ram_range *rr)
{
    probe_source *p = (probe_source *)s;
    if (t->lru->chunks[c].list == CHUNK_EVICTED)
        return 0;
    uint64_t page = t->ram->page_bytes;
    chunk_base *b = &t->base[c];
    unsigned want = s->max_probes;
    size_t out = 0, present = 0, nr = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        bool resident = guest_ram_page_resident(t->ram, pm[i]);
        out += (pm[i] & PM_SWAPPED) != 0;
        present += resident;
        if (first == n && resident)
            first = i;
    }
    /* a chunk mapped by one huge page: no probe (it would split it) */
    if (first < n && guest_ram_page_huge(t->ram, pm[first]))
        return 0;
    /* where the chunk was used, it is likely used again: a random probe
     * in a chunk whose use is a few pages would miss them */
    for (size_t i = 0; i < n && nr < want; i++)
        if (came_back(t, c, pm, n, i) && probe_ok(t, pm[i])) {
            b->hint = (uint16_t)(i + 1);
            rr[nr++] = (ram_range){ i * page, page };
        }
    /* nothing came back: the remembered page, if it is in (its probe
     * did not go out, or the guest used it again) */
    size_t h = b->hint ? b->hint - 1u : n;
    if (!nr && h < n && probe_ok(t, pm[h]))
        rr[nr++] = (ram_range){ h * page, page };
    present -= nr;
    /* pages still out from earlier probes keep watching */
    for (size_t k = out + nr; k < want && present; k++) {
        size_t start = next_rand(p) % n;
        for (size_t j = 0; j < n; j++) {
            size_t i = (start + j) % n;
            if (probe_ok(t, pm[i]) && !is_probe(rr, nr, i * page)) {
                rr[nr++] = (ram_range){ i * page, page };
                present--;
                break;
            }
        }
    }
    /* remembered: this scan's probes, then earlier ones still out */
    uint16_t keep[PROBE_TRACK] = { 0 };
    size_t kept = 0;
    for (size_t k = 0; k < nr && kept < PROBE_TRACK; k++)
        keep[kept++] = (uint16_t)(rr[k].offset / page + 1);
    for (size_t k = 0; k < PROBE_TRACK && kept < PROBE_TRACK; k++)
        if (b->probe[k] && b->probe[k] <= n && (pm[b->probe[k] - 1] & PM_SWAPPED))
            keep[kept++] = b->probe[k];
    memcpy(b->probe, keep, sizeof(keep));
    return nr;
}

static double probe_cpu(const cold_source *s)
{
    (void)s;
    return 0; /* all of it is in this process */
}

static void probe_destroy(cold_source *s) { g_free(s); }

static const cold_source_ops probe_ops = {
    .name = "probe",
    .begin = probe_begin,
    .observe = probe_observe,
    .end = probe_end,
    .arm = probe_arm,
    .external_cpu_seconds = probe_cpu,
    .destroy = probe_destroy,
};

cold_source *cold_source_probe_new(unsigned probes_per_chunk)
{
    probe_source *p = g_new0(probe_source, 1);
    p->base.ops = &probe_ops;
    p->base.max_probes = probes_per_chunk ? probes_per_chunk : 1;
    p->seed = 2463534242u;
    return &p->base;
}

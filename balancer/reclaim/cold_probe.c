/*
 * The probe scanner: our own cold-page detection for kernels without
 * DAMON (and without idle page tracking or soft-dirty, like this one).
 * Each resident chunk keeps probes_per_chunk of its pages paged out; the
 * guest touching one faults it back in, which host_reclaim.c sees in
 * pagemap at the next scan as a reference.  Cold chunks keep their probes
 * out at no further cost; hot chunks pay one swap-in per probe per scan.
 */
#include "reclaim/cold_source.h"

#include <glib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>

typedef struct {
    cold_source base;
    unsigned probes;
    uint32_t seed;
} probe_source;

static bool was_out(const cold_target *t, size_t page)
{
    return t->was_out && page_bitmap_test(t->was_out, page);
}

static void chunk_pages(const cold_target *t, size_t c, size_t *first, size_t *end)
{
    size_t per_chunk = (size_t)(t->lru->chunk_bytes / t->ram->page_bytes);
    *first = c * per_chunk;
    *end = *first + per_chunk;
    if (*end > t->ram->n_pages)
        *end = t->ram->n_pages;
}

/* Probes that came back were found in pagemap by host_reclaim.c already.
 * What is left: a resident chunk with no page out at the last scan's end
 * had no probe watching it, so this scan saw nothing of it: used, not
 * idle (the first scan of a guest is the same case). */
static int probe_observe(cold_source *s, cold_target *t, size_t n, uint64_t now_us, GError **error)
{
    (void)s, (void)now_us, (void)error;
    for (size_t g = 0; g < n; g++) {
        cold_target *tg = &t[g];
        if (!tg->was_out)
            continue;
        for (size_t c = 0; c < tg->lru->n_chunks; c++) {
            if (tg->obs[c].referenced || !tg->obs[c].resident_pages || tg->lru->chunks[c].list == CHUNK_EVICTED)
                continue;
            size_t first, end;
            chunk_pages(tg, c, &first, &end);
            bool armed = false;
            for (size_t i = first; i < end && !armed; i++)
                armed = was_out(tg, i);
            tg->obs[c].referenced = !armed;
        }
    }
    return 0;
}

static uint32_t next_rand(probe_source *p)
{
    p->seed = p->seed * 1103515245u + 12345u;
    return p->seed >> 8;
}

static bool came_back(const cold_target *t, size_t page)
{
    return was_out(t, page) && guest_ram_page_resident(t->ram, t->pagemap[page]);
}

/* One chunk's probes: pages seen in use (back from swap since the last
 * scan, else the page the chunk remembers) first, then random present
 * pages until probes are out. */
static size_t arm_chunk(probe_source *p, const cold_target *t, size_t c, ram_range *rr)
{
    uint64_t page = t->ram->page_bytes;
    size_t first, end;
    chunk_pages(t, c, &first, &end);
    size_t out = 0, present = 0, nr = 0;
    for (size_t i = first; i < end; i++) {
        out += (t->pagemap[i] & PM_SWAPPED) != 0;
        present += guest_ram_page_resident(t->ram, t->pagemap[i]);
    }
    /* where the chunk was used, it is likely used again: a random probe
     * in a chunk whose use is a few pages would miss them */
    for (size_t i = first; i < end && nr < p->probes; i++)
        if (came_back(t, i)) {
            t->hint[c] = (uint16_t)(i - first + 1);
            rr[nr++] = (ram_range){ i * page, page };
        }
    /* nothing came back: the remembered page, if it is in (its probe
     * did not go out, or the guest used it again) */
    size_t h = t->hint[c] ? first + t->hint[c] - 1 : end;
    if (!nr && h < end && guest_ram_page_resident(t->ram, t->pagemap[h]))
        rr[nr++] = (ram_range){ h * page, page };
    present -= nr;
    /* pages still out from earlier probes keep watching */
    for (size_t k = out + nr; k < p->probes && present; k++) {
        size_t start = next_rand(p) % (end - first);
        for (size_t j = 0; j < end - first; j++) {
            size_t i = first + (start + j) % (end - first);
            if (guest_ram_page_resident(t->ram, t->pagemap[i]) && !came_back(t, i) && i != h) {
                rr[nr++] = (ram_range){ i * page, page };
                present--;
                break;
            }
        }
    }
    return nr;
}

static uint64_t probe_settle(cold_source *s, cold_target *t, size_t n)
{
    probe_source *p = (probe_source *)s;
    uint64_t total = 0;
    for (size_t g = 0; g < n; g++) {
        cold_target *tg = &t[g];
        g_autofree ram_range *rr = g_new(ram_range, tg->lru->n_chunks * p->probes);
        size_t nr = 0;
        for (size_t c = 0; c < tg->lru->n_chunks; c++)
            if (tg->lru->chunks[c].list != CHUNK_EVICTED)
                nr += arm_chunk(p, tg, c, rr + nr);
        int64_t done = nr ? guest_ram_advise(tg->ram, rr, nr, MADV_PAGEOUT) : 0;
        if (done > 0)
            total += (uint64_t)done;
    }
    return total;
}

static double probe_cpu(const cold_source *s)
{
    (void)s;
    return 0; /* all of it is in this process */
}

static void probe_destroy(cold_source *s) { g_free(s); }

static const cold_source_ops probe_ops = {
    .name = "probe",
    .observe = probe_observe,
    .settle = probe_settle,
    .external_cpu_seconds = probe_cpu,
    .destroy = probe_destroy,
};

cold_source *cold_source_probe_new(unsigned probes_per_chunk)
{
    probe_source *p = g_new0(probe_source, 1);
    p->base.ops = &probe_ops;
    p->probes = probes_per_chunk ? probes_per_chunk : 1;
    p->seed = 2463534242u;
    return &p->base;
}

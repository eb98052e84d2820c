/* Host-side reclaim rounds; see host_reclaim.h. */
#include "reclaim/host_reclaim.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "util/error.h"

int reclaim_guest_open(reclaim_guest *g, pid_t pid, uint64_t ram_bytes, const cold_tunables *t, GError **error)
{
    memset(g, 0, sizeof(*g));
    if (guest_ram_open(&g->ram, pid, ram_bytes, error) < 0)
        return -1;
    size_t n_chunks = (size_t)((g->ram.bytes + RECLAIM_CHUNK_BYTES - 1) / RECLAIM_CHUNK_BYTES);
    if (cold_lru_init(&g->lru, n_chunks, RECLAIM_CHUNK_BYTES, g->ram.page_bytes, t) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "guest RAM of %llu bytes cannot be split into chunks",
                 (unsigned long long)g->ram.bytes);
        guest_ram_close(&g->ram);
        return -1;
    }
    /* the pagemap snapshot (8 bytes a page) lives only during a scan;
     * between scans one bit a page remembers what was out */
    g->was_out = g_try_new0(uint8_t, (g->ram.n_pages + 7) / 8);
    g->obs = g_try_new0(chunk_obs, g->lru.n_chunks);
    g->chunk_node = g_try_new0(int16_t, g->lru.n_chunks);
    g->hint = g_try_new0(uint16_t, g->lru.n_chunks);
    if (!g->was_out || !g->obs || !g->chunk_node || !g->hint) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "out of memory");
        reclaim_guest_close(g);
        return -1;
    }
    return 0;
}

void reclaim_guest_close(reclaim_guest *g)
{
    guest_ram_close(&g->ram);
    cold_lru_free(&g->lru);
    g_free(g->pm);
    g_free(g->was_out);
    g_free(g->obs);
    g_free(g->chunk_node);
    g_free(g->hint);
    g->pm = NULL;
    g->was_out = NULL;
    g->obs = NULL;
    g->chunk_node = NULL;
    g->hint = NULL;
}

static size_t pages_per_chunk(const reclaim_guest *g) { return (size_t)(g->lru.chunk_bytes / g->ram.page_bytes); }

/* Pages of a paged-out chunk that must come back before it counts as a
 * refault: the guest kernel touching a stray page (a page-table walk, a
 * free-page check) is not its working set coming back. */
#define REFAULT_MIN_PAGES 8

/* Resident counts, references against the previous baseline (pages we
 * paged out that are present again), chunk nodes. */
static void summarise(reclaim_guest *g, const node_map *nodes)
{
    size_t per = pages_per_chunk(g);
    g->resident_bytes = g->swapped_bytes = 0;
    for (size_t c = 0; c < g->lru.n_chunks; c++) {
        chunk_obs *o = &g->obs[c];
        size_t back = 0;
        o->resident_pages = 0;
        g->chunk_node[c] = -1;
        for (size_t i = c * per; i < (c + 1) * per && i < g->ram.n_pages; i++) {
            uint64_t e = g->pm[i];
            if (guest_ram_page_resident(&g->ram, e)) {
                o->resident_pages++;
                if (g->chunk_node[c] < 0 && nodes)
                    g->chunk_node[c] = (int16_t)node_map_node_of(nodes, e & PM_PFN_MASK);
                back += g->have_prev && page_bitmap_test(g->was_out, i);
            } else if (e & PM_SWAPPED) {
                g->swapped_bytes += g->ram.page_bytes;
            }
        }
        bool evicted = g->lru.chunks[c].list == CHUNK_EVICTED;
        o->back_pages = (uint32_t)back;
        /* the first scan after open has nothing armed to see references
         * with: unknown counts as used, so no chunk ages on a blind scan */
        o->referenced = (!g->have_prev && !evicted) || back >= (evicted ? REFAULT_MIN_PAGES : 1);
        g->resident_bytes += (uint64_t)o->resident_pages * g->ram.page_bytes;
    }
}

static void fill_target(cold_target *t, reclaim_guest *g)
{
    t->ram = &g->ram;
    t->pagemap = g->pm;
    t->was_out = g->have_prev ? g->was_out : NULL;
    t->hint = g->hint;
    t->lru = &g->lru;
    t->obs = g->obs;
}

int host_reclaim_scan(cold_source *src, reclaim_guest **g, size_t n, const node_map *nodes, uint64_t now_us,
                      bool *failed, GError **error)
{
    g_autofree cold_target *t = g_new0(cold_target, n ? n : 1);
    g_autofree reclaim_guest **ok = g_new0(reclaim_guest *, n ? n : 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!g[i]->pm)
            g[i]->pm = g_try_new(uint64_t, g[i]->ram.n_pages); /* 8 bytes a guest page: may fail */
        bool bad = !g[i]->pm || guest_ram_pagemap(&g[i]->ram, g[i]->pm) < 0;
        if (failed)
            failed[i] = bad;
        if (bad)
            continue;
        summarise(g[i], nodes);
        ok[k] = g[i];
        fill_target(&t[k++], g[i]);
    }
    int rc = src ? src->ops->observe(src, t, k, now_us, error) : 0;
    for (size_t i = 0; i < k; i++) {
        cold_lru_age(&ok[i]->lru, ok[i]->obs);
        ok[i]->cold_bytes = cold_lru_cold_bytes(&ok[i]->lru, ok[i]->obs);
    }
    return rc;
}

/* guest_ram_advise clips ranges to the RAM: so does the count. */
size_t pageout_covered(const guest_ram *r, const ram_range *rr, size_t k, uint64_t advised)
{
    uint64_t covered = 0;
    size_t j = 0;
    for (; j < k && rr[j].offset < r->bytes; j++) {
        uint64_t len = rr[j].len < r->bytes - rr[j].offset ? rr[j].len : r->bytes - rr[j].offset;
        if (covered + len > advised)
            break;
        covered += len;
    }
    return j;
}

uint64_t reclaim_guest_pageout(reclaim_guest *g, uint64_t budget, int node)
{
    chunk_obs *obs = g->obs;
    g_autofree chunk_obs *masked = NULL;
    if (node >= 0) {
        masked = g_new(chunk_obs, g->lru.n_chunks);
        for (size_t c = 0; c < g->lru.n_chunks; c++) {
            masked[c] = g->obs[c];
            if (g->chunk_node[c] != node)
                masked[c].resident_pages = 0;
        }
        obs = masked;
    }
    g_autofree size_t *pick = g_new(size_t, g->lru.n_chunks);
    uint64_t bytes = 0;
    size_t k = cold_lru_pick(&g->lru, obs, budget, pick, g->lru.n_chunks, &bytes);
    uint64_t done = 0;
    if (k) {
        g_autofree ram_range *rr = g_new(ram_range, k);
        for (size_t j = 0; j < k; j++)
            rr[j] = (ram_range){ pick[j] * g->lru.chunk_bytes, g->lru.chunk_bytes };
        int64_t got = guest_ram_advise(&g->ram, rr, k, MADV_PAGEOUT);
        if (got < 0) {
            g->pageout_errors++;
            return 0;
        }
        /* the kernel advises the ranges in order and may stop early (the
         * process exiting): only the chunks it covered are out */
        size_t j = pageout_covered(&g->ram, rr, k, (uint64_t)got);
        if (j < k)
            g->pageout_errors++;
        for (size_t c = 0; c < j; c++) {
            uint64_t res = (uint64_t)obs[pick[c]].resident_pages * g->ram.page_bytes;
            cold_lru_mark_evicted(&g->lru, pick[c], res);
            done += res;
        }
        g->paged_out_bytes += done;
        g->cold_bytes = g->cold_bytes > done ? g->cold_bytes - done : 0;
    }
    return done;
}

void host_reclaim_settle(cold_source *src, reclaim_guest **g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (src && g[i]->pm) {
            cold_target t;
            fill_target(&t, g[i]);
            g[i]->probe_bytes += src->ops->settle(src, &t, 1);
        }
        /* the new baseline: what is out now must come back to count */
        g[i]->have_prev = g[i]->pm && guest_ram_pagemap(&g[i]->ram, g[i]->pm) == 0;
        if (g[i]->have_prev) {
            memset(g[i]->was_out, 0, (g[i]->ram.n_pages + 7) / 8);
            for (size_t p = 0; p < g[i]->ram.n_pages; p++)
                if (g[i]->pm[p] & PM_SWAPPED)
                    g[i]->was_out[p / 8] |= (uint8_t)(1u << (p % 8));
        }
        g_free(g[i]->pm);
        g[i]->pm = NULL;
    }
}

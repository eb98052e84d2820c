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
    if (RECLAIM_CHUNK_BYTES / g->ram.page_bytes > UINT16_MAX ||
        cold_lru_init(&g->lru, n_chunks, RECLAIM_CHUNK_BYTES, g->ram.page_bytes, t) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "guest RAM of %llu bytes cannot be split into chunks",
                 (unsigned long long)g->ram.bytes);
        guest_ram_close(&g->ram);
        return -1;
    }
    /* a few bytes a chunk; a scan reads pagemap a batch at a time */
    g->obs = g_try_new0(chunk_obs, g->lru.n_chunks);
    g->base = g_try_new0(chunk_base, g->lru.n_chunks);
    g->chunk_node = g_try_new0(int16_t, g->lru.n_chunks);
    if (!g->obs || !g->base || !g->chunk_node) {
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
    g_clear_pointer(&g->obs, g_free);
    g_clear_pointer(&g->base, g_free);
    g_clear_pointer(&g->chunk_node, g_free);
}

size_t reclaim_guest_state_bytes(const reclaim_guest *g)
{
    return sizeof(*g) + g->lru.n_chunks * (sizeof(cold_chunk) + sizeof(chunk_obs) + sizeof(chunk_base) + sizeof(int16_t));
}

static size_t pages_per_chunk(const reclaim_guest *g) { return (size_t)(g->lru.chunk_bytes / g->ram.page_bytes); }

/* Pages of a paged-out chunk that must come back before it counts as a
 * refault: the guest kernel touching a stray page (a page-table walk, a
 * free-page check) is not its working set coming back. */
#define REFAULT_MIN_PAGES 8

static void chunk_pages(const reclaim_guest *g, size_t c, size_t *first, size_t *n)
{
    size_t per = pages_per_chunk(g);
    *first = c * per;
    *n = *first + per <= g->ram.n_pages ? per : g->ram.n_pages - *first;
}

static void fill_target(cold_target *t, reclaim_guest *g)
{
    *t = (cold_target){ &g->ram, &g->lru, g->obs, g->base, g->have_prev };
}

/* Chunks of the next batch from the cursor: at most RECLAIM_BATCH_CHUNKS
 * and at most left. */
static size_t batch_len(const reclaim_guest *g, size_t left)
{
    size_t k = g->lru.n_chunks - g->cursor;
    k = k < RECLAIM_BATCH_CHUNKS ? k : RECLAIM_BATCH_CHUNKS;
    return k < left ? k : left;
}

/* The pagemap entries of chunks [c, c + k) into buf (room for
 * RECLAIM_BATCH_CHUNKS chunks).  0, or -1 (the process went away). */
static int read_batch(const reclaim_guest *g, size_t c, size_t k, uint64_t *buf)
{
    size_t first, n, last_first, last_n;
    chunk_pages(g, c, &first, &n);
    chunk_pages(g, c + k - 1, &last_first, &last_n);
    return guest_ram_pagemap(&g->ram, first, last_first + last_n - first, buf);
}

/* A chunk's pages that hold guest memory (resident) and that are in swap,
 * from its n pagemap entries. */
static void count_chunk(const guest_ram *r, const uint64_t *pm, size_t n, size_t *resident, size_t *out)
{
    *resident = *out = 0;
    for (size_t i = 0; i < n; i++) {
        *resident += guest_ram_page_resident(r, pm[i]);
        *out += !guest_ram_page_resident(r, pm[i]) && (pm[i] & PM_SWAPPED);
    }
}

/* One chunk's resident count, node and references against its baseline:
 * pages we had out that are present again.  Counted two ways, and the
 * larger wins: the chunk's swapped pages fell while its present pages
 * rose (true of a paged-out chunk coming back, whichever pages), and the
 * remembered probes that are present (true even when the host kernel
 * swapped other pages of the chunk meanwhile). */
static void summarise_chunk(reclaim_guest *g, size_t c, const uint64_t *pm, size_t n, const node_map *nodes)
{
    chunk_obs *o = &g->obs[c];
    const chunk_base *b = &g->base[c];
    size_t resident, out;
    count_chunk(&g->ram, pm, n, &resident, &out);
    g->chunk_node[c] = -1;
    for (size_t i = 0; i < n && nodes && g->chunk_node[c] < 0; i++)
        if (guest_ram_page_resident(&g->ram, pm[i]))
            g->chunk_node[c] = (int16_t)node_map_node_of(nodes, pm[i] & PM_PFN_MASK);
    size_t back = 0, probes = 0;
    if (g->have_prev) {
        size_t left = b->out_pages > out ? b->out_pages - out : 0;
        size_t rose = resident > b->resident_pages ? resident - b->resident_pages : 0;
        back = left < rose ? left : rose;
        for (size_t k = 0; k < PROBE_TRACK; k++)
            probes += b->probe[k] && b->probe[k] <= n && guest_ram_page_resident(&g->ram, pm[b->probe[k] - 1]);
        back = probes > back ? probes : back;
    }
    bool evicted = g->lru.chunks[c].list == CHUNK_EVICTED;
    o->resident_pages = (uint32_t)resident;
    o->back_pages = (uint32_t)back;
    /* the first scan after open has nothing armed to see references
     * with: unknown counts as used, so no chunk ages on a blind scan */
    o->referenced = (!g->have_prev && !evicted) || back >= (evicted ? REFAULT_MIN_PAGES : 1);
    g->scan_resident += resident * g->ram.page_bytes;
    g->scan_swapped += out * g->ram.page_bytes;
    /* promotions: what came back of pages we paged out, whatever list
     * the chunk is on by now; probes are the monitoring's cost; the rest
     * (pages the host kernel swapped) is neither */
    g->scan_probe_back += probes;
    if (b->paged)
        g->scan_promoted += back > probes ? back - probes : 0;
}

int reclaim_scan_begin(cold_source *src, uint64_t now_us, GError **error)
{
    return src ? src->ops->begin(src, now_us, error) : 0;
}

int reclaim_guest_scan_step(cold_source *src, reclaim_guest *g, const node_map *nodes, size_t max_chunks)
{
    if (g->cursor == 0)
        g->scan_resident = g->scan_swapped = g->scan_promoted = g->scan_probe_back = 0;
    size_t per = pages_per_chunk(g);
    g_autofree uint64_t *buf = g_new(uint64_t, RECLAIM_BATCH_CHUNKS * per);
    cold_target t;
    fill_target(&t, g);
    for (size_t done = 0; done < max_chunks && g->cursor < g->lru.n_chunks;) {
        size_t k = batch_len(g, max_chunks - done);
        if (read_batch(g, g->cursor, k, buf) < 0) {
            g->cursor = 0;
            return -1;
        }
        for (size_t j = 0; j < k; j++) {
            size_t c = g->cursor + j, first, n;
            chunk_pages(g, c, &first, &n);
            summarise_chunk(g, c, buf + j * per, n, nodes);
            if (src)
                src->ops->observe(src, &t, c, buf + j * per, n);
        }
        g->cursor += k;
        done += k;
    }
    if (g->cursor < g->lru.n_chunks)
        return 1;
    g->cursor = 0;
    return 0;
}

int reclaim_scan_end(cold_source *src, reclaim_guest **g, size_t k, uint64_t now_us, GError **error)
{
    int rc = src ? src->ops->end(src, now_us, error) : 0;
    for (size_t i = 0; i < k; i++) {
        g[i]->resident_bytes = g[i]->scan_resident;
        g[i]->swapped_bytes = g[i]->scan_swapped;
        g[i]->promoted_pages = g[i]->scan_promoted;
        g[i]->probe_back_pages = g[i]->scan_probe_back;
        cold_lru_age(&g[i]->lru, g[i]->obs);
        g[i]->cold_bytes = cold_lru_cold_bytes(&g[i]->lru, g[i]->obs);
    }
    return rc;
}

int reclaim_guest_settle_step(cold_source *src, reclaim_guest *g, size_t max_chunks)
{
    size_t per = pages_per_chunk(g);
    g_autofree uint64_t *buf = g_new(uint64_t, RECLAIM_BATCH_CHUNKS * per);
    unsigned probes = src && src->ops->arm ? src->max_probes : 0;
    g_autofree ram_range *rr = probes ? g_new(ram_range, (size_t)RECLAIM_BATCH_CHUNKS * probes) : NULL;
    cold_target t;
    fill_target(&t, g);
    for (size_t done = 0; done < max_chunks && g->cursor < g->lru.n_chunks;) {
        size_t k = batch_len(g, max_chunks - done);
        if (probes) {
            if (read_batch(g, g->cursor, k, buf) < 0)
                goto gone;
            size_t nr = 0;
            for (size_t j = 0; j < k; j++) {
                size_t c = g->cursor + j, first, n;
                chunk_pages(g, c, &first, &n);
                size_t got = src->ops->arm(src, &t, c, buf + j * per, n, rr + nr);
                for (size_t r = nr; r < nr + got; r++)
                    rr[r].offset += first * g->ram.page_bytes;
                nr += got;
            }
            int64_t out = nr ? guest_ram_advise(&g->ram, rr, nr, MADV_PAGEOUT) : 0;
            if (out > 0)
                g->probe_bytes += (uint64_t)out;
        }
        /* the new baseline: what is out now must come back to count */
        if (read_batch(g, g->cursor, k, buf) < 0)
            goto gone;
        for (size_t j = 0; j < k; j++) {
            size_t c = g->cursor + j, first, n, out, resident;
            chunk_pages(g, c, &first, &n);
            count_chunk(&g->ram, buf + j * per, n, &resident, &out);
            chunk_base *b = &g->base[c];
            b->out_pages = (uint16_t)out;
            b->resident_pages = (uint16_t)resident;
            /* a probe the kernel did not page out (no swap, a shared or
             * pinned page) watches nothing: forgotten */
            size_t probes_out = 0;
            for (size_t p = 0; p < PROBE_TRACK; p++) {
                if (b->probe[p] && (b->probe[p] > n || !(buf[j * per + b->probe[p] - 1] & PM_SWAPPED)))
                    b->probe[p] = 0;
                probes_out += b->probe[p] != 0;
            }
            /* what we paged out of it is all back (or gone) */
            if (b->paged && out <= (probes_out > probes ? probes_out : probes))
                b->paged = 0;
        }
        g->cursor += k;
        done += k;
    }
    if (g->cursor < g->lru.n_chunks)
        return 1;
    g->cursor = 0;
    g->have_prev = true;
    return 0;
gone:
    g->cursor = 0;
    g->have_prev = false;
    return -1;
}

int host_reclaim_scan(cold_source *src, reclaim_guest **g, size_t n, const node_map *nodes, uint64_t now_us,
                      bool *failed, GError **error)
{
    g_autoptr(GError) begin_err = NULL;
    int rc = reclaim_scan_begin(src, now_us, &begin_err);
    g_autofree reclaim_guest **ok = g_new0(reclaim_guest *, n ? n : 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int step;
        while ((step = reclaim_guest_scan_step(src, g[i], nodes, SIZE_MAX)) > 0)
            ;
        if (failed)
            failed[i] = step < 0;
        if (step == 0)
            ok[k++] = g[i];
    }
    if (reclaim_scan_end(src, ok, k, now_us, begin_err ? NULL : error) < 0)
        rc = -1;
    if (begin_err)
        g_propagate_error(error, g_steal_pointer(&begin_err));
    return rc;
}

void host_reclaim_settle(cold_source *src, reclaim_guest **g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        while (reclaim_guest_settle_step(src, g[i], SIZE_MAX) > 0)
            ;
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

uint64_t reclaim_guest_pageout(reclaim_guest *g, uint64_t budget, int node, uint32_t min_idle)
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
    size_t k = cold_lru_pick_idle(&g->lru, obs, min_idle, budget, pick, g->lru.n_chunks, &bytes);
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
            g->base[pick[c]].paged = 1;
            done += res;
        }
        g->paged_out_bytes += done;
        /* what the last scan found, less what just went out: the working
         * set (resident - cold) does not grow by a pageout */
        g->cold_bytes = g->cold_bytes > done ? g->cold_bytes - done : 0;
        g->resident_bytes = g->resident_bytes > done ? g->resident_bytes - done : 0;
        g->swapped_bytes += done;
    }
    return done;
}

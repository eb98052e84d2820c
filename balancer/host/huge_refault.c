/*
 * The huge-page refault probe (huge_refault.h).
 */
#include "host/huge_refault.h"

#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_BYTES (2UL << 20)

/* The AnonHugePages (kB) of the mapping holding p, -1 if not found. */
static long anon_huge_kb(const void *p)
{
    g_autofree char *smaps = NULL;
    if (!g_file_get_contents("/proc/self/smaps", &smaps, NULL, NULL))
        return -1;
    bool in = false;
    for (char *line = smaps; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        unsigned long lo, hi;
        long kb;
        /* a mapping's header line, as reclaim/guest_ram.c tells them from
         * the field lines ("AnonHugePages: ...") */
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            in = (unsigned long)p >= lo && (unsigned long)p < hi;
        else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            return kb;
        line = next;
    }
    return -1;
}

bool huge_refault_probe(const char **why)
{
    /* 6 MiB, the 2 MiB block probed strictly inside: its neighbours are
     * our own memory without MADV_HUGEPAGE, so its mapping cannot merge
     * with another process mapping's (whose huge pages smaps would count) */
    size_t map_len = 3 * HUGE_BYTES;
    char *raw = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        *why = "the probe could not map 6 MiB";
        return false;
    }
    char *p = (char *)(((unsigned long)raw + HUGE_BYTES) & ~(HUGE_BYTES - 1));
    bool ok = false;
    if (madvise(p, HUGE_BYTES, MADV_HUGEPAGE) != 0) {
        *why = "transparent huge pages are not available (madvise(MADV_HUGEPAGE) failed)";
        goto out;
    }
    ((volatile char *)p)[0] = 1;
    if (anon_huge_kb(p) < (long)(HUGE_BYTES >> 10)) {
        *why = "the probe got no transparent huge page (THP off, or none free)";
        goto out;
    }
    /* a balloon's discard: one 4 KiB page splits the huge page ... */
    madvise(p + 4096, 4096, MADV_DONTNEED);
    /* ... free page reporting's: the whole 2 MiB block */
    madvise(p, HUGE_BYTES, MADV_DONTNEED);
    ((volatile char *)p)[0] = 1;
    ok = anon_huge_kb(p) >= (long)(HUGE_BYTES >> 10);
    if (!ok)
        *why = "memory discarded in 2 MiB blocks after a 4 KiB discard faults back in 4 KiB pages "
               "(the kernel keeps the emptied page table: no CONFIG_PT_RECLAIM)";
out:
    munmap(raw, map_len);
    return ok;
}

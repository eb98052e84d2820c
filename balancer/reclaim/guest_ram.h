/*
 * A guest's RAM as the host sees it: the anonymous mapping in the QEMU
 * process that backs the guest's memory, its pages through
 * /proc/PID/pagemap, and process_madvise() on it.  This is what host-side
 * reclaim (host_reclaim.c) scans and pages out.
 *
 * Needs root (CAP_SYS_ADMIN for pagemap frame numbers, CAP_SYS_NICE and
 * ptrace access for process_madvise on another process; /proc/kpageflags,
 * readable by root, tells pages of huge pages).
 */
#ifndef MEMBAL_GUEST_RAM_H
#define MEMBAL_GUEST_RAM_H

#include <stdbool.h>
#include <glib.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* /proc/PID/pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst) */
#define PM_PRESENT  (1ULL << 63)
#define PM_SWAPPED  (1ULL << 62)
#define PM_PFN_MASK ((1ULL << 55) - 1)

typedef struct {
    pid_t pid;
    int pidfd;           /* pidfd_open(): process_madvise() and no pid reuse */
    int pagemap_fd;
    int kpageflags_fd;   /* /proc/kpageflags, -1 if it cannot be read */
    uintptr_t start;     /* the mapping in QEMU's address space */
    uint64_t bytes;
    uint64_t page_bytes;
    size_t n_pages;
    uint64_t zero_pfn;   /* frame of the kernel's shared zero page, 0 if unknown */
} guest_ram;

/* A page that holds memory of the guest's own: present and not the
 * shared zero page (guest pages only ever read map it; it costs nothing
 * and MADV_PAGEOUT leaves it). */
static inline bool guest_ram_page_resident(const guest_ram *r, uint64_t entry)
{
    return (entry & PM_PRESENT) && !(r->zero_pfn && (entry & PM_PFN_MASK) == r->zero_pfn);
}

/* A present page that is part of a transparent huge page (or any large
 * folio) or a hugetlb page, by its frame's /proc/kpageflags (KPF_THP,
 * KPF_HUGE).  Paging out part of one splits it: the guest loses the host
 * huge page behind that memory for good.  False when it cannot tell (no
 * frame number or no kpageflags). */
bool guest_ram_page_huge(const guest_ram *r, uint64_t entry);

/*
 * Find the guest RAM mapping in /proc/PID/maps or /proc/PID/smaps text:
 * adjacent anonymous private read-write entries are joined (madvise can
 * split one mapping); of the runs at least ram_bytes and at most 1/8
 * longer, the most resident (smaps Rss) wins, then the shortest.  A
 * larger run only is refused as ambiguous.  Returns 0, or -1 with the reason.
 */
int guest_ram_find(const char *maps_text, uint64_t ram_bytes, uintptr_t *start, uint64_t *len,
                   GError **error);

/* Open pid's RAM of ram_bytes.  Returns 0, or -1 with the reason. */
int guest_ram_open(guest_ram *r, pid_t pid, uint64_t ram_bytes, GError **error);
void guest_ram_close(guest_ram *r);

/* Read the pagemap entries of pages [first, first + n) into entries.
 * Returns 0, or -1 (the process went away, no permission, or a range
 * outside the RAM). */
int guest_ram_pagemap(const guest_ram *r, size_t first, size_t n, uint64_t *entries);

/* process_madvise(advice) on the given page-aligned ranges (offsets into
 * the RAM mapping).  Returns the bytes advised, or -1 with errno. */
typedef struct {
    uint64_t offset, len;
} ram_range;
int64_t guest_ram_advise(const guest_ram *r, const ram_range *ranges, size_t n, int advice);

#endif

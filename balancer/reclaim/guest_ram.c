/* A guest's RAM inside its QEMU process; see guest_ram.h. */
#include "reclaim/guest_ram.h"

#include <glib.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/small_file.h"
#include "util/error.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

/* One maps line: "start-end perms offset dev inode [path]".  Anonymous
 * means no path at all (QEMU's RAM; [heap] and [stack] have names).
 * *header says whether the line is a mapping line at all (smaps has
 * "Rss: ..." lines between them). */
static bool parse_anon_rw(const char *line, uintptr_t *s, uintptr_t *e, bool *header)
{
    unsigned long a, b, off, ino;
    char perms[8], dev[16];
    int used = 0;
    *header = sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3;
    if (!*header || sscanf(line, "%lx-%lx %7s %lx %15s %lu%n", &a, &b, perms, &off, dev, &ino, &used) != 6)
        return false;
    const char *rest = line + used;
    while (*rest == ' ' || *rest == '\t')
        rest++;
    if (*rest && *rest != '\n')
        return false;
    if (strncmp(perms, "rw-p", 4) != 0 || ino != 0 || b <= a)
        return false;
    *s = a;
    *e = b;
    return true;
}

/* Rss of an smaps entry, in bytes ("Rss:   1234 kB"). */
static uint64_t rss_line(const char *line)
{
    unsigned long long kb;
    return sscanf(line, "Rss: %llu kB", &kb) == 1 ? (uint64_t)kb * 1024 : 0;
}

typedef struct {
    uintptr_t s, e;
    bool anon_rw;
    uint64_t rss;
} map_entry;

/* Every mapping line, with its Rss when the text is smaps. */
static map_entry *parse_entries(const char *text, size_t *n)
{
    size_t cap = 64, k = 0;
    map_entry *v = g_new(map_entry, cap);
    for (const char *p = text; p && *p;) {
        map_entry m = { 0, 0, false, 0 };
        bool header = false;
        m.anon_rw = parse_anon_rw(p, &m.s, &m.e, &header);
        if (header) {
            if (k == cap)
                v = g_renew(map_entry, v, cap *= 2);
            v[k++] = m;
        } else if (k) {
            v[k - 1].rss += rss_line(p);
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    *n = k;
    return v;
}

/* Better candidate: more resident (the guest's RAM, not a same-sized
 * reservation like ASan's shadow), then shorter. */
static bool better(uint64_t rss, uint64_t len, uint64_t best_rss, uint64_t best_len)
{
    return !best_len || rss > best_rss || (rss == best_rss && len < best_len);
}

int guest_ram_find(const char *maps_text, uint64_t ram_bytes, uintptr_t *start, uint64_t *len,
                   GError **error)
{
    size_t n = 0;
    g_autofree map_entry *v = parse_entries(maps_text ? maps_text : "", &n);
    uintptr_t best_s = 0;
    uint64_t best_len = 0, best_rss = 0, closest = 0;
    /* an entry of exactly the guest's size first (QEMU maps RAM alone) */
    for (size_t i = 0; i < n; i++)
        if (v[i].anon_rw && v[i].e - v[i].s == ram_bytes && better(v[i].rss, ram_bytes, best_rss, best_len)) {
            best_s = v[i].s;
            best_len = ram_bytes;
            best_rss = v[i].rss;
        }
    /* else adjacent entries joined (madvise splits one mapping in pieces),
     * at most 1/8 longer than the guest */
    for (size_t i = 0; !best_len && i < n;) {
        if (!v[i].anon_rw) {
            i++;
            continue;
        }
        size_t j = i;
        uint64_t rss = v[i].rss;
        while (j + 1 < n && v[j + 1].anon_rw && v[j + 1].s == v[j].e)
            rss += v[++j].rss;
        uint64_t rl = v[j].e - v[i].s;
        if (rl >= ram_bytes && (!closest || rl < closest))
            closest = rl;
        if (rl >= ram_bytes && rl - ram_bytes <= ram_bytes / 8 && better(rss, rl, best_rss, best_len)) {
            best_s = v[i].s;
            best_len = rl;
            best_rss = rss;
        }
        i = j + 1;
    }
    for (size_t i = 0; !best_len && !closest && i < n; i++)
        if (v[i].anon_rw && v[i].e - v[i].s >= ram_bytes)
            closest = v[i].e - v[i].s;
    if (!best_len && !closest) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "no anonymous read-write mapping of %" PRIu64 " MiB or more", ram_bytes >> 20);
        return -1;
    }
    if (!best_len) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED,
                 "the closest anonymous mapping (%" PRIu64 " MiB) is much larger than the guest's %" PRIu64
                 " MiB; not guessing",
                 closest >> 20, ram_bytes >> 20);
        return -1;
    }
    *start = best_s;
    *len = best_len;
    return 0;
}


/* The zero page's frame number: read-fault one small-page anonymous page
 * of our own and look it up in our pagemap (frame numbers need root; 0
 * when they are hidden). */
static uint64_t zero_page_pfn(void)
{
    long page = sysconf(_SC_PAGESIZE);
    volatile char *p = mmap(NULL, (size_t)page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    madvise((void *)p, (size_t)page, MADV_NOHUGEPAGE);
    (void)p[0];
    uint64_t e = 0;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (pread(fd, &e, sizeof(e), (off_t)((uintptr_t)p / (uintptr_t)page * sizeof(e))) != sizeof(e))
            e = 0;
        close(fd);
    }
    munmap((void *)p, (size_t)page);
    return (e & PM_PRESENT) ? e & PM_PFN_MASK : 0;
}

int guest_ram_open(guest_ram *r, pid_t pid, uint64_t ram_bytes, GError **error)
{
    memset(r, 0, sizeof(*r));
    r->pidfd = r->pagemap_fd = r->kpageflags_fd = -1;
    r->pid = pid;
    r->page_bytes = (uint64_t)sysconf(_SC_PAGESIZE);
    /* the pidfd first: if pid is reused after this, the maps we read
     * could be someone else's, so re-check the pidfd is alive below */
    r->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (r->pidfd < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "pidfd_open(%d): %s", (int)pid, strerror(errno));
        return -1;
    }
    char path[64];
    /* smaps: the maps lines plus each mapping's Rss, which tells the
     * guest's RAM from same-sized reservations */
    snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
    g_autofree char *maps = small_file_read(path, 256u << 20);
    if (!maps) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s: %s", path, strerror(errno));
        guest_ram_close(r);
        return -1;
    }
    uint64_t len = 0;
    if (guest_ram_find(maps, ram_bytes, &r->start, &len, error) < 0) {
        guest_ram_close(r);
        return -1;
    }
    r->bytes = len;
    r->n_pages = len / r->page_bytes;
    snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
    r->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->pagemap_fd < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s: %s", path, strerror(errno));
        guest_ram_close(r);
        return -1;
    }
    /* the process behind the pidfd is still there, so pid was not reused
     * while we read its maps and opened its pagemap (which stays bound to
     * that process) */
    if (syscall(SYS_pidfd_send_signal, r->pidfd, 0, NULL, 0) < 0 && errno == ESRCH) { /* EPERM: alive */
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "QEMU pid %d exited while it was being opened",
                    (int)pid);
        guest_ram_close(r);
        return -1;
    }
    r->zero_pfn = zero_page_pfn();
    r->kpageflags_fd = open("/proc/kpageflags", O_RDONLY | O_CLOEXEC);
    return 0;
}

void guest_ram_close(guest_ram *r)
{
    if (r->pidfd >= 0)
        close(r->pidfd);
    if (r->pagemap_fd >= 0)
        close(r->pagemap_fd);
    if (r->kpageflags_fd >= 0)
        close(r->kpageflags_fd);
    r->pidfd = r->pagemap_fd = r->kpageflags_fd = -1;
}

/* include/uapi/linux/kernel-page-flags.h */
#define KPF_HUGE 17
#define KPF_THP 22

bool guest_ram_page_huge(const guest_ram *r, uint64_t entry)
{
    uint64_t pfn = entry & PM_PFN_MASK, flags = 0;
    if (r->kpageflags_fd < 0 || !(entry & PM_PRESENT) || !pfn)
        return false;
    if (pread(r->kpageflags_fd, &flags, sizeof(flags), (off_t)(pfn * sizeof(flags))) != sizeof(flags))
        return false;
    return flags & ((1ULL << KPF_THP) | (1ULL << KPF_HUGE));
}

int guest_ram_pagemap(const guest_ram *r, size_t first, size_t n, uint64_t *entries)
{
    if (first > r->n_pages || n > r->n_pages - first)
        return -1;
    size_t want = n * sizeof(uint64_t), got = 0;
    off_t off = (off_t)((r->start / r->page_bytes + first) * sizeof(uint64_t));
    while (got < want) {
        ssize_t k = pread(r->pagemap_fd, (char *)entries + got, want - got, off + (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

int64_t guest_ram_advise(const guest_ram *r, const ram_range *ranges, size_t n, int advice)
{
    enum { BATCH = 512 }; /* well under UIO_MAXIOV */
    struct iovec iov[BATCH];
    int64_t total = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        uint64_t want = 0;
        for (; k < BATCH && i + k < n; k++) {
            const ram_range *rr = &ranges[i + k];
            if (rr->offset >= r->bytes)
                break;
            uint64_t len = rr->len;
            if (len > r->bytes - rr->offset)
                len = r->bytes - rr->offset;
            iov[k].iov_base = (void *)(r->start + rr->offset);
            iov[k].iov_len = len;
            want += len;
        }
        if (!k)
            break;
        long got = syscall(SYS_process_madvise, r->pidfd, iov, k, advice, 0);
        if (got < 0)
            return total ? total : -1;
        total += got;
        if ((uint64_t)got < want)
            break; /* the kernel stopped early (process exiting, ...) */
        i += k;
    }
    return total;
}

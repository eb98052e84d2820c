/* A guest's RAM inside its QEMU process; see guest_ram.h. */
#include "guest_ram.h"

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

#include "small_file.h"

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

int guest_ram_find(const char *maps_text, uint64_t ram_bytes, uintptr_t *start, uint64_t *len,
                   char *err, size_t errlen)
{
    uintptr_t run_s = 0, run_e = 0, best_s = 0;
    uint64_t run_rss = 0, best_len = 0, best_rss = 0, closest = 0;
    bool in_run = false;
    const char *p = maps_text;
    for (;;) {
        uintptr_t s = 0, e = 0;
        bool header = false;
        bool ok = p && *p && parse_anon_rw(p, &s, &e, &header);
        if (p && *p && !header) {
            if (in_run)
                run_rss += rss_line(p); /* smaps detail of the current entry */
        } else if (ok && in_run && s == run_e) {
            run_e = e;
        } else {
            uint64_t rl = run_e - run_s;
            if (in_run && rl >= ram_bytes) {
                if (!closest || rl < closest)
                    closest = rl;
                /* within 1/8 of the size: the most resident one wins (the
                 * guest's RAM, not a reservation like ASan's shadow) */
                if (rl - ram_bytes <= ram_bytes / 8 &&
                    (!best_len || run_rss > best_rss || (run_rss == best_rss && rl < best_len))) {
                    best_s = run_s;
                    best_len = rl;
                    best_rss = run_rss;
                }
            }
            in_run = ok;
            run_s = s;
            run_e = e;
            run_rss = 0;
        }
        if (!p || !*p)
            break;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!closest) {
        snprintf(err, errlen, "no anonymous read-write mapping of %" PRIu64 " MiB or more", ram_bytes >> 20);
        return -1;
    }
    if (!best_len) {
        snprintf(err, errlen,
                 "the closest anonymous mapping (%" PRIu64 " MiB) is much larger than the guest's %" PRIu64
                 " MiB; not guessing",
                 closest >> 20, ram_bytes >> 20);
        return -1;
    }
    *start = best_s;
    *len = best_len;
    return 0;
}


int guest_ram_open(guest_ram *r, pid_t pid, uint64_t ram_bytes, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->pidfd = r->pagemap_fd = -1;
    r->pid = pid;
    r->page_bytes = (uint64_t)sysconf(_SC_PAGESIZE);
    /* the pidfd first: if pid is reused after this, the maps we read
     * could be someone else's, so re-check the pidfd is alive below */
    r->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (r->pidfd < 0) {
        snprintf(err, errlen, "pidfd_open(%d): %s", (int)pid, strerror(errno));
        return -1;
    }
    char path[64];
    /* smaps: the maps lines plus each mapping's Rss, which tells the
     * guest's RAM from same-sized reservations */
    snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
    char *maps = small_file_read(path, 256u << 20);
    if (!maps) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        guest_ram_close(r);
        return -1;
    }
    uint64_t len = 0;
    int rc = guest_ram_find(maps, ram_bytes, &r->start, &len, err, errlen);
    free(maps);
    if (rc < 0) {
        guest_ram_close(r);
        return -1;
    }
    r->bytes = len;
    r->n_pages = len / r->page_bytes;
    snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
    r->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->pagemap_fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        guest_ram_close(r);
        return -1;
    }
    return 0;
}

void guest_ram_close(guest_ram *r)
{
    if (r->pidfd >= 0)
        close(r->pidfd);
    if (r->pagemap_fd >= 0)
        close(r->pagemap_fd);
    r->pidfd = r->pagemap_fd = -1;
}

int guest_ram_pagemap(const guest_ram *r, uint64_t *entries)
{
    size_t want = r->n_pages * sizeof(uint64_t), got = 0;
    off_t off = (off_t)(r->start / r->page_bytes * sizeof(uint64_t));
    while (got < want) {
        ssize_t n = pread(r->pagemap_fd, (char *)entries + got, want - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        got += (size_t)n;
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

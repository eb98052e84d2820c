/*
 * Idle, then burst: a guest that sits on a large page cache doing nothing,
 * then suddenly needs a lot of anonymous memory.
 * Usage: burst CACHE_DEV CACHE_MB IDLE_S BURST_MB [HOLD_S=0 (forever) [JOB_MB=0]]
 *  1. reads the first CACHE_MB of CACHE_DEV sequentially through the page
 *     cache (buffered read(2), 1 MiB blocks; CACHE_MB=0 skips this), keeping
 *     CACHE_DEV open until exit so that the cache stays, and prints
 *       BURST phase=cached mb=<MiB read>
 *  1b. with JOB_MB, runs a job first: maps and touches JOB_MB of anonymous
 *     memory, then unmaps it (the guest's free memory is then memory its
 *     QEMU touched: host memory a balloon can take), and prints
 *       BURST phase=job mb=<JOB_MB> freed
 *  2. prints one line and sleeps, silently, until IDLE_S seconds after the
 *     program started (no sleep if step 1 took longer):
 *       BURST phase=idle until=<IDLE_S>
 *  3. maps and touches BURST_MB of anonymous memory as fast as it can (mmap
 *     of 1 MiB, then one write per 4 KiB page, repeated), printing from the
 *     allocation loop, when at least 1 s passed since the last line (checked
 *     after every MiB, so a stall in the kernel makes the next line late):
 *       BURST phase=alloc t=<s since burst start, 1 decimal> alloc_mb=<MiB touched>
 *     and once every page is touched, exactly once:
 *       BURST phase=done secs=<s from burst start to last page touched, 2 decimals> alloc_mb=<BURST_MB>
 *  4. holds the memory as working set, writing every page once per second,
 *     for HOLD_S seconds (0 = forever), printing every second
 *       BURST phase=hold t=<s since done>
 *     then exits 0.
 * No swap is assumed; if the OOM killer takes it, it just dies.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

#define PAGE 4096
#define MIB (1024 * 1024)

int main(int argc, char **argv)
{
    double prog_start = now_s();
    long cache_mb, idle_s, burst_mb, hold_s = 0, job_mb = 0;
    if (argc < 5 || argc > 7) {
        fprintf(stderr, "usage: burst CACHE_DEV CACHE_MB IDLE_S BURST_MB [HOLD_S [JOB_MB]]\n");
        return 2;
    }
    if (parse_long(argv[2], &cache_mb) || parse_long(argv[3], &idle_s) ||
        parse_long(argv[4], &burst_mb) || burst_mb == 0 ||
        (argc > 5 && parse_long(argv[5], &hold_s)) || (argc > 6 && parse_long(argv[6], &job_mb))) {
        fprintf(stderr, "burst: bad arguments\n");
        return 2;
    }

    /* 1. page cache */
    long cached_mb = 0;
    if (cache_mb > 0) {
        char *buf = malloc(MIB);
        int fd = open(argv[1], O_RDONLY);
        if (!buf || fd < 0) {
            perror("burst: open");
            return 1;
        }
        while (cached_mb < cache_mb) {
            size_t got = 0;
            while (got < MIB) {
                ssize_t n = read(fd, buf + got, MIB - got);
                if (n < 0) {
                    perror("burst: read");
                    return 1;
                }
                if (n == 0)
                    break;
                got += (size_t)n;
            }
            if (got < MIB) {
                fprintf(stderr, "burst: %s ends after %ld MiB\n", argv[1], cached_mb);
                break;
            }
            cached_mb++;
        }
        /* fd stays open to the end: the kernel drops a block device's page
         * cache when its last opener closes it (kill_bdev on last close). */
        free(buf);
    }
    printf("BURST phase=cached mb=%ld\n", cached_mb);
    fflush(stdout);

    /* 1b. a job that uses memory and frees it */
    if (job_mb > 0) {
        size_t len = (size_t)job_mb * MIB;
        unsigned char *job = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (job == MAP_FAILED) {
            perror("burst: job mmap");
            return 1;
        }
        for (size_t off = 0; off < len; off += PAGE)
            job[off] = 1;
        munmap(job, len);
        printf("BURST phase=job mb=%ld freed\n", job_mb);
        fflush(stdout);
    }

    /* 2. idle */
    printf("BURST phase=idle until=%ld\n", idle_s);
    fflush(stdout);
    sleep_until(prog_start + (double)idle_s);

    /* 3. burst: 1 MiB mappings, so that no single big reservation is refused
     * while the guest is ballooned down; the OOM killer is the only limit. */
    unsigned char **chunk = calloc((size_t)burst_mb, sizeof(*chunk));
    if (!chunk) {
        perror("burst: calloc");
        return 1;
    }
    double start = now_s(), last = start;
    for (long m = 0; m < burst_mb; m++) {
        chunk[m] = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (chunk[m] == MAP_FAILED) {
            fprintf(stderr, "burst: mmap after %ld MiB: ", m);
            perror(NULL);
            return 1;
        }
        for (size_t off = 0; off < MIB; off += PAGE)
            chunk[m][off] = 1;
        double t = now_s();
        if (t - last >= 1.0) {
            printf("BURST phase=alloc t=%.1f alloc_mb=%ld\n", t - start, m + 1);
            fflush(stdout);
            last = t;
        }
    }
    double done = now_s();
    printf("BURST phase=done secs=%.2f alloc_mb=%ld\n", done - start, burst_mb);
    fflush(stdout);

    /* 4. hold: touch every page once a second */
    for (;;) {
        for (long m = 0; m < burst_mb; m++)
            for (size_t off = 0; off < MIB; off += PAGE)
                chunk[m][off]++;
        double t = now_s() - done;
        long next = (long)t + 1; /* next whole second after done */
        sleep_until(done + (double)next);
        printf("BURST phase=hold t=%ld\n", next);
        fflush(stdout);
        if (hold_s && next >= hold_s)
            break;
    }
    return 0;
}

/*
 * Buffered-IO database: its working set is page cache, not anonymous
 * memory.  Opens PATH (e.g. /dev/vda) O_RDONLY without O_DIRECT, reads the
 * first SIZE_MB once sequentially (1 MiB blocks) to warm the cache, prints
 *   CACHEDB ready size_mb=<n>
 * then does random 4 KiB-aligned pread()s of 4 KiB within the first SIZE_MB
 * and prints every second
 *   CACHEDB t=<s> ops=<total> ops_s=<rate> size_mb=<n>
 * (t counts from the ready line).  A pread that misses the page cache is a
 * disk read, not a major fault.
 * Usage: cachedb PATH SIZE_MB [SECONDS=0 (forever)]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

#define PAGE 4096
#define MIB (1024 * 1024)

int main(int argc, char **argv)
{
    long size_mb, seconds = 0;
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: cachedb PATH SIZE_MB [SECONDS]\n");
        return 2;
    }
    if (parse_long(argv[2], &size_mb) || size_mb == 0 ||
        (argc > 3 && parse_long(argv[3], &seconds))) {
        fprintf(stderr, "cachedb: bad arguments\n");
        return 2;
    }
    char *buf = malloc(MIB);
    int fd = open(argv[1], O_RDONLY);
    if (!buf || fd < 0) {
        perror("cachedb: open");
        return 1;
    }
    /* warm the cache */
    for (long m = 0; m < size_mb; m++) {
        size_t got = 0;
        while (got < MIB) {
            ssize_t n = read(fd, buf + got, MIB - got);
            if (n < 0) {
                perror("cachedb: read");
                return 1;
            }
            if (n == 0) {
                fprintf(stderr, "cachedb: %s ends after %ld MiB, SIZE_MB is %ld\n", argv[1],
                        m, size_mb);
                return 1;
            }
            got += (size_t)n;
        }
    }
    printf("CACHEDB ready size_mb=%ld\n", size_mb);
    fflush(stdout);

    uint64_t pages = (uint64_t)size_mb * MIB / PAGE;
    uint64_t x = 88172645463325252ULL, ops = 0, last_ops = 0;
    double start = now_s(), last = start;
    for (;;) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17; /* xorshift64 */
        off_t off = (off_t)(x % pages) * PAGE;
        ssize_t n = pread(fd, buf, PAGE, off);
        if (n != PAGE) {
            if (n < 0)
                perror("cachedb: pread");
            else
                fprintf(stderr, "cachedb: short pread at %lld\n", (long long)off);
            return 1;
        }
        ops++;
        double t = now_s();
        if (t - last >= 1.0) {
            printf("CACHEDB t=%.0f ops=%llu ops_s=%.0f size_mb=%ld\n", t - start,
                   (unsigned long long)ops, (double)(ops - last_ops) / (t - last), size_mb);
            fflush(stdout);
            last = t;
            last_ops = ops;
            if (seconds && t - start >= (double)seconds)
                break;
        }
    }
    return 0;
}

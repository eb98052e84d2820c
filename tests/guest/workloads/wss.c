/*
 * Working-set toucher: a database-like load.  Allocates SIZE_MB, writes
 * every page once, then does random read-modify-write operations on a hot
 * subset (HOT_PCT of the pages) and prints its rate every second:
 *   WSS t=<s> ops=<n> ops_s=<rate> size_mb=<m> hot_mb=<h>
 * Usage: wss SIZE_MB [HOT_PCT=60] [SECONDS=0 (forever)]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE 4096

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: wss SIZE_MB [HOT_PCT] [SECONDS]\n");
        return 2;
    }
    long size_mb = atol(argv[1]);
    long hot_pct = argc > 2 ? atol(argv[2]) : 60;
    long seconds = argc > 3 ? atol(argv[3]) : 0;
    if (size_mb <= 0 || hot_pct <= 0 || hot_pct > 100 || seconds < 0) {
        fprintf(stderr, "wss: bad arguments\n");
        return 2;
    }
    size_t pages = (size_t)size_mb * 1024 * 1024 / PAGE;
    size_t hot = pages * (size_t)hot_pct / 100;
    unsigned char *mem = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        perror("wss: mmap");
        return 1;
    }
    for (size_t p = 0; p < pages; p++)
        mem[p * PAGE] = (unsigned char)p;
    printf("WSS ready size_mb=%ld hot_mb=%zu\n", size_mb, hot * PAGE / (1024 * 1024));
    fflush(stdout);

    uint64_t x = 88172645463325252ULL, ops = 0, last_ops = 0;
    double start = now_s(), last = start;
    for (;;) {
        for (int i = 0; i < 4096; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17; /* xorshift64 */
            size_t page = (size_t)(x % hot);
            unsigned char *b = mem + page * PAGE + (size_t)((x >> 40) % (PAGE / 64)) * 64;
            b[0] = (unsigned char)(b[0] + 1);
            ops++;
        }
        double t = now_s();
        if (t - last >= 1.0) {
            printf("WSS t=%.0f ops=%llu ops_s=%.0f size_mb=%ld hot_mb=%zu\n", t - start,
                   (unsigned long long)ops, (double)(ops - last_ops) / (t - last), size_mb,
                   hot * PAGE / (1024 * 1024));
            fflush(stdout);
            last = t;
            last_ops = ops;
            if (seconds && t - start >= (double)seconds)
                break;
        }
    }
    return 0;
}

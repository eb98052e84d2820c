/*
 * Streaming reader: reads PATH sequentially through the page cache (like
 * `dd` or a linear table scan), starting over at its end, and prints
 *   STREAM t=<s> mb_s=<rate> total_mb=<n>
 * every second.  Usage: stream PATH [BLOCK_KB=1024] [SECONDS=0 (forever)]
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "workload.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: stream PATH [BLOCK_KB] [SECONDS]\n");
        return 2;
    }
    long block_kb = argc > 2 ? atol(argv[2]) : 1024;
    long seconds = argc > 3 ? atol(argv[3]) : 0;
    if (block_kb <= 0 || block_kb > 65536 || seconds < 0) {
        fprintf(stderr, "stream: bad arguments\n");
        return 2;
    }
    size_t block = (size_t)block_kb * 1024;
    char *buf = malloc(block);
    int fd = open(argv[1], O_RDONLY);
    if (!buf || fd < 0) {
        perror("stream: open");
        return 1;
    }
    double start = now_s(), last = start;
    unsigned long long total = 0, last_total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, block);
        if (n < 0) {
            perror("stream: read");
            return 1;
        }
        if (n == 0) {
            lseek(fd, 0, SEEK_SET);
            continue;
        }
        total += (unsigned long long)n;
        double t = now_s();
        if (t - last >= 1.0) {
            printf("STREAM t=%.0f mb_s=%.1f total_mb=%llu\n", t - start,
                   (double)(total - last_total) / (1024.0 * 1024.0) / (t - last),
                   total / (1024 * 1024));
            fflush(stdout);
            last = t;
            last_total = total;
            if (seconds && t - start >= (double)seconds)
                break;
        }
    }
    return 0;
}

/*
 * Working-set toucher: a database-like load.  Allocates SIZE_MB, writes
 * every page once, then does random read-modify-write operations on a hot
 * subset (HOT_PCT of the pages) and prints its rate every second:
 *   WSS t=<s> ops=<n> ops_s=<rate> size_mb=<m> hot_mb=<h>
 * (t counts from the "WSS ready" line; size_mb and hot_mb are the current
 * sizes).
 * Usage: wss SIZE_MB [HOT_PCT=60] [SECONDS=0 (forever)] [GROW_AT_S=0 GROW_MB=0 [RATE=0]]
 * Growth (when GROW_AT_S > 0 and GROW_MB > 0): once t reaches GROW_AT_S it
 * maps GROW_MB more, writes every new page once and prints
 *   WSS grew size_mb=<new total> hot_mb=<new hot>
 * From then on the hot set is HOT_PCT of the new total, spanning both
 * regions (all of the first region, then the start of the second).
 * RATE > 0 paces it at RATE operations a second, as a database serving
 * queries at a modest rate rather than one scanning flat out: each page of
 * its hot set is then touched every hot/RATE seconds on average, a
 * lukewarm working set that a host's LRU can take for colder than a
 * stream's page cache (the seed mails' pathology).  Operations a stall
 * made late by up to a second are caught up; behind by more, they are all
 * lost, so a stall longer than a second shows as lost
 * operations.
 * Run as `shmdb` (a link to wss) it keeps all of that in shared memory
 * (MAP_SHARED | MAP_ANONYMOUS: shmem, as a database's shared buffers are),
 * which the guest counts as Shmem and Cached but can only swap, never drop.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "workload.h"

#define PAGE 4096

static int shared; /* run as shmdb */

static unsigned char *map_and_fill(size_t pages)
{
    unsigned char *mem = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE,
                              (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return NULL;
    for (size_t p = 0; p < pages; p++)
        mem[p * PAGE] = (unsigned char)p;
    return mem;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc == 5 || argc > 7) {
        fprintf(stderr, "usage: wss SIZE_MB [HOT_PCT] [SECONDS] [GROW_AT_S GROW_MB [RATE]]\n");
        return 2;
    }
    const char *self = strrchr(argv[0], '/');
    shared = strcmp(self ? self + 1 : argv[0], "shmdb") == 0;
    long size_mb = atol(argv[1]);
    long hot_pct = argc > 2 ? atol(argv[2]) : 60;
    long seconds = argc > 3 ? atol(argv[3]) : 0;
    long grow_at = argc > 5 ? atol(argv[4]) : 0;
    long grow_mb = argc > 5 ? atol(argv[5]) : 0;
    long rate = argc > 6 ? atol(argv[6]) : 0;
    if (size_mb <= 0 || hot_pct <= 0 || hot_pct > 100 || seconds < 0 || grow_at < 0 ||
        grow_mb < 0 || rate < 0) {
        fprintf(stderr, "wss: bad arguments\n");
        return 2;
    }
    size_t pages = (size_t)size_mb * 1024 * 1024 / PAGE;
    size_t hot = pages * (size_t)hot_pct / 100;
    unsigned char *mem = map_and_fill(pages);
    if (!mem) {
        perror("wss: mmap");
        return 1;
    }
    printf("WSS ready size_mb=%ld hot_mb=%zu\n", size_mb, hot * PAGE / (1024 * 1024));
    fflush(stdout);

    /* Second region, mapped at GROW_AT_S: hot pages >= pages1 live there. */
    int grow_pending = grow_at > 0 && grow_mb > 0;
    size_t pages1 = pages;
    unsigned char *mem2 = NULL;

    uint64_t x = 88172645463325252ULL, ops = 0, last_ops = 0;
    double start = now_s(), last = start;
    /* paced: batches of a hundredth of a second's operations, each due at
     * `due`; unpaced: batches of 4096 back to back */
    int batch = rate ? (int)(rate / 100 > 0 ? rate / 100 : 1) : 4096;
    double due = start;
    for (;;) {
        if (rate) {
            double t0 = now_s();
            if (due > t0)
                sleep_until(due);
            else if (t0 - due > 1.0)
                due = t0; /* late by more than a second: those operations are lost */
            due += (double)batch / (double)rate;
        }
        for (int i = 0; i < batch; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17; /* xorshift64 */
            size_t page = (size_t)(x % hot);
            unsigned char *base = page < pages1 ? mem + page * PAGE
                                                : mem2 + (page - pages1) * PAGE;
            unsigned char *b = base + (size_t)((x >> 40) % (PAGE / 64)) * 64;
            b[0] = (unsigned char)(b[0] + 1);
            ops++;
        }
        double t = now_s();
        if (grow_pending && t - start >= (double)grow_at) {
            size_t more = (size_t)grow_mb * 1024 * 1024 / PAGE;
            mem2 = map_and_fill(more);
            if (!mem2) {
                perror("wss: mmap (grow)");
                return 1;
            }
            grow_pending = 0;
            size_mb += grow_mb;
            pages = pages1 + more;
            hot = pages * (size_t)hot_pct / 100;
            printf("WSS grew size_mb=%ld hot_mb=%zu\n", size_mb, hot * PAGE / (1024 * 1024));
            fflush(stdout);
            t = now_s();
        }
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

/*
 * fault_cost: what the host pays when a guest touches memory again after a
 * balloon gave it back to the host, on this host, without QEMU.
 *
 * QEMU gives a ballooned page back to the host one 4 KiB page at a time
 * (hw/virtio/virtio-balloon.c, balloon_inflate_page: a RAM block with 4 KiB
 * pages has each balloon page discarded with ram_block_discard_range, which
 * is madvise(MADV_DONTNEED) for anonymous guest RAM).  Guest RAM that was
 * in transparent huge pages is split by the first discard, and when the
 * guest touches those pages again the host faults them in 4 KiB at a time.
 *
 * For a region of N MiB (the burst's size), each configuration is timed R
 * times, interleaved:
 *   resident   write a byte per 4 KiB page of memory already resident in
 *              huge pages (what a guest that was never ballooned pays)
 *   fresh-huge first touch of never-used memory with MADV_HUGEPAGE
 *   fresh-4k   first touch of never-used memory with MADV_NOHUGEPAGE
 *   pulsed     memory resident in huge pages, discarded a 4 KiB page at a
 *              time as QEMU does (timed apart: "discard"), then touched
 *   pulsed-2m  the same memory discarded a 2 MiB range at a time, as QEMU
 *              does for free page reporting (the guest reports free blocks
 *              of pageblock order, 2 MiB on x86; timed apart: "discard-2m")
 *   healed     discarded a 4 KiB page at a time, then again a 2 MiB range
 *              at a time (what free page reporting does after a balloon
 *              deflates, once the guest's free pages merge), then touched:
 *              on kernels that free empty page tables on MADV_DONTNEED
 *              (6.14+), the touch faults in huge pages again
 *   aged-2m    pulsed-2m, touched --age seconds (default 5) after the
 *              discard instead of at once.  A host that is itself a guest
 *              and reports its own free pages to its hypervisor (virtio-
 *              balloon free page reporting, bit 5 of the balloon's
 *              features; this machine does) hands the freed memory on once
 *              it has been free for about 2 s (mm/page_reporting.c,
 *              PAGE_REPORTING_DELAY), and the touch then faults at the
 *              hypervisor too; on a bare-metal host aged-2m is pulsed-2m
 *   aged-resident  its control: resident memory touched --age seconds
 *              after its first touch, nothing given back in between (what
 *              the sleep alone costs)
 * and the table gives the median and spread in ms, and the huge pages the
 * region held after its touch.
 *
 * Usage: fault_cost [--mib N] [--runs R] [--age S]
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "host/own_reporting.h"

#define PAGE 4096UL
#define HUGE (2UL << 20)

/* the configurations, then the discards two of them time apart */
enum { RESIDENT, FRESH_HUGE, FRESH_4K, PULSED, PULSED_2M, HEALED, AGED_2M, AGED_RESIDENT, N_CONFIGS,
       DISCARD = N_CONFIGS, DISCARD_2M, N_MEASURES };
static const char *const measure_names[N_MEASURES] = {
    "resident", "fresh-huge", "fresh-4k", "pulsed", "pulsed-2m", "healed", "aged-2m", "aged-resident",
    "discard", "discard-2m",
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A region of len bytes aligned to a huge page, with the given advice. */
static char *region_new(size_t len, int advice)
{
    size_t map_len = len + HUGE;
    char *raw = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        fprintf(stderr, "fault_cost: mmap %zu bytes: %s\n", map_len, strerror(errno));
        exit(1);
    }
    char *p = (char *)(((unsigned long)raw + HUGE - 1) & ~(HUGE - 1));
    if (p > raw)
        munmap(raw, p - raw);
    munmap(p + len, raw + map_len - (p + len));
    if (madvise(p, len, advice) != 0) {
        fprintf(stderr, "fault_cost: madvise: %s\n", strerror(errno));
        exit(1);
    }
    return p;
}

/* madvise(MADV_DONTNEED) each `step` bytes of [p, p+len); returns ms. */
static double discard_ms(char *p, size_t len, size_t step)
{
    double t0 = now_ms();
    for (size_t off = 0; off < len; off += step)
        if (madvise(p + off, step, MADV_DONTNEED) != 0) {
            fprintf(stderr, "fault_cost: madvise(MADV_DONTNEED): %s\n", strerror(errno));
            exit(1);
        }
    return now_ms() - t0;
}

static double touch_ms(char *p, size_t len)
{
    double t0 = now_ms();
    for (size_t off = 0; off < len; off += PAGE)
        ((volatile char *)p)[off] = 1;
    return now_ms() - t0;
}

/* The huge pages (MiB) backing [p, p+len), from /proc/self/smaps. */
static long huge_mib(const char *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[256];
    int in = 0;
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (unsigned long)p >= lo && (unsigned long)p < hi;
        else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --name's value text into *out, within [min, max]; false (said) if not. */
static bool parse_long(const char *name, const char *text, long min, long max, long *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*end || end == text || v < min || v > max) {
        fprintf(stderr, "fault_cost: --%s %s: not a number from %ld to %ld\n", name, text, min, max);
        return false;
    }
    *out = v;
    return true;
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: fault_cost [--mib N] [--runs R] [--age S]\n"
                 "Times touching N MiB (default 300) of memory: resident in huge pages; fresh\n"
                 "(huge and 4 KiB); after a balloon-like discard of every 4 KiB page (pulsed);\n"
                 "after a discard in 2 MiB blocks as free page reporting does (pulsed-2m);\n"
                 "after both, in that order (healed); S seconds (default 5) after a 2 MiB\n"
                 "discard (aged-2m: on a host that itself reports its free pages to a\n"
                 "hypervisor, the memory is gone from under it by then); and S seconds after\n"
                 "its first touch with nothing given back (aged-resident, the control).  R runs\n"
                 "each (default 5), interleaved; prints medians, spreads and the fewest huge\n"
                 "pages seen after a touch.\n");
}

/* The options; -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, long *mib, long *runs, long *age)
{
    static const struct option opts[] = {
        {"mib", required_argument, NULL, 'm'},
        {"runs", required_argument, NULL, 'r'},
        {"age", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "m:r:a:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (!parse_long("mib", optarg, 1, 65536, mib))
                return 2;
            break;
        case 'r':
            if (!parse_long("runs", optarg, 1, 100, runs))
                return 2;
            break;
        case 'a':
            if (!parse_long("age", optarg, 0, 600, age))
                return 2;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    return -1;
}

/* Run r of configuration m: a region prepared as m says, then touched;
 * its time into ms[m][r] (and a discard's into its own measure), the
 * fewest huge pages behind it into huge[m]. */
static void measure_one(int m, long r, size_t len, long age, double **ms, long *huge)
{
    char *p = region_new(len, m == FRESH_4K ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
    if (m == RESIDENT || m == PULSED || m == PULSED_2M || m == HEALED || m == AGED_2M || m == AGED_RESIDENT)
        touch_ms(p, len);
    if (m == PULSED)
        ms[DISCARD][r] = discard_ms(p, len, PAGE);
    if (m == PULSED_2M)
        ms[DISCARD_2M][r] = discard_ms(p, len, HUGE);
    if (m == AGED_2M)
        discard_ms(p, len, HUGE);
    if (m == AGED_2M || m == AGED_RESIDENT)
        sleep(age);
    if (m == HEALED) {
        discard_ms(p, len, PAGE);
        discard_ms(p, len, HUGE);
    }
    ms[m][r] = touch_ms(p, len);
    long h = huge_mib(p);
    if (huge[m] < 0 || h < huge[m])
        huge[m] = h;
    munmap(p, len);
}

/* The table: per measure its median, spread, cost per page, huge pages. */
static void report(long mib, long runs, long age, size_t len, double **ms, const long *huge)
{
    printf("touching %ld MiB a 4 KiB page at a time, %ld run(s), interleaved; aged-2m after %ld s\n", mib,
           runs, age);
    printf("this host reports its own free pages to a hypervisor: %s\n",
           own_free_page_reporting("/sys") ? "yes" : "no");
    printf("%-13s %10s %10s %12s %14s\n", "measure", "median ms", "spread ms", "us per 4 KiB",
           "huge MiB (min)");
    for (int m = 0; m < N_MEASURES; m++) {
        qsort(ms[m], runs, sizeof(double), cmp_double);
        double med = runs % 2 ? ms[m][runs / 2] : (ms[m][runs / 2 - 1] + ms[m][runs / 2]) / 2;
        char hbuf[32] = "-";
        if (m < N_CONFIGS)
            snprintf(hbuf, sizeof(hbuf), "%ld", huge[m]);
        printf("%-13s %10.1f %10.1f %12.2f %14s\n", measure_names[m], med, ms[m][runs - 1] - ms[m][0],
               1e3 * med / (len / PAGE), hbuf);
        free(ms[m]);
    }
}

int main(int argc, char **argv)
{
    long mib = 300, runs = 5, age = 5;
    int rc = parse_args(argc, argv, &mib, &runs, &age);
    if (rc >= 0)
        return rc;
    size_t len = (size_t)mib << 20;
    double *ms[N_MEASURES];
    long huge[N_MEASURES]; /* the fewest huge pages behind a region after its touch, over the runs */
    for (int m = 0; m < N_MEASURES; m++) {
        huge[m] = -1;
        ms[m] = calloc(runs, sizeof(double));
        if (!ms[m]) {
            fprintf(stderr, "fault_cost: out of memory\n");
            return 1;
        }
    }

    for (long r = 0; r < runs; r++) {
        for (int k = 0; k < N_CONFIGS; k++) {
            int m = (k + r) % N_CONFIGS; /* rotate the order between runs */
            measure_one(m, r, len, age, ms, huge);
        }
    }

    report(mib, runs, age, len, ms, huge);
    return 0;
}

/*
 * LD_PRELOAD for bench/scale.sh --backend libvirt: balloon statistics for
 * libvirt's test driver.
 *
 * The scale benchmark's libvirt path is a libvirtd of its own (a session
 * daemon) serving a test:///NODE.xml of many domains, so that balancerd
 * lists them and asks their statistics over real RPC, through the one bulk
 * call it uses (virDomainListGetStats).  libvirt 9.0's test driver answers
 * that call with the state group alone: no balloon.* and no block.*
 * (`virsh -c test:///default domstats --balloon` prints nothing).  This
 * shim, preloaded into balancerd only, adds to each record what the QEMU
 * driver gives for a guest with a virtio balloon and no disks: current and
 * maximum, the guest's counters (memory use swinging as tests/faults/
 * fake_qemu's guests do, so that balancerd decides every tick), rss (libvirt
 * asked the guest's QEMU) and block.count 0.  The balloon's current size is
 * the last target balancerd set through virDomainSetMemoryFlags (passed on
 * to the test driver too), the domain's maximum (MEMBAL_SHIM_MIB, 1024)
 * until then.  What the shim cannot give is the XDR decoding of those
 * fields in balancerd (a few hundred bytes a guest), and libvirtd's own
 * work to ask each QEMU, which is not balancerd's.
 */
#include <dlfcn.h>
#include <glib.h>
#include <libvirt/libvirt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*list_stats_fn)(virDomainPtr *, unsigned int, virDomainStatsRecordPtr **, unsigned int);
typedef int (*set_memory_fn)(virDomainPtr, unsigned long, unsigned int);

static GMutex lock;
static GHashTable *targets; /* uuid string -> KiB, the last balloon target set */

static unsigned long long max_kib(void)
{
    const char *s = getenv("MEMBAL_SHIM_MIB");
    unsigned long long mib = s ? strtoull(s, NULL, 10) : 0;
    return (mib ? mib : 1024) * 1024;
}

/* The balloon's size now: the last target, or the maximum. */
static unsigned long long current_kib(const char *uuid, unsigned long long max)
{
    g_mutex_lock(&lock);
    gpointer v = targets ? g_hash_table_lookup(targets, uuid) : NULL;
    g_mutex_unlock(&lock);
    return v ? (unsigned long long)GPOINTER_TO_SIZE(v) : max;
}

int virDomainSetMemoryFlags(virDomainPtr dom, unsigned long memory, unsigned int flags)
{
    static set_memory_fn real;
    if (!real)
        real = (set_memory_fn)dlsym(RTLD_NEXT, "virDomainSetMemoryFlags");
    char uuid[VIR_UUID_STRING_BUFLEN];
    if (virDomainGetUUIDString(dom, uuid) == 0) {
        g_mutex_lock(&lock);
        if (!targets)
            targets = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        g_hash_table_insert(targets, g_strdup(uuid), GSIZE_TO_POINTER((gsize)memory));
        g_mutex_unlock(&lock);
    }
    return real(dom, memory, flags);
}

static void add(virDomainStatsRecordPtr rec, int *cap, const char *field, unsigned long long v)
{
    virTypedParamsAddULLong(&rec->params, &rec->nparams, cap, field, v);
}

/* What the QEMU driver adds for a guest with a balloon, used 30-70% of
 * it, slowly swinging (a phase per guest, from its uuid's last digits). */
static void add_balloon(virDomainStatsRecordPtr rec, unsigned long long max)
{
    char uuid[VIR_UUID_STRING_BUFLEN];
    if (virDomainGetUUIDString(rec->dom, uuid) < 0)
        return;
    unsigned long long cur = current_kib(uuid, max);
    double phase = (double)strtoull(uuid + 24, NULL, 16);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double used = (double)cur * (0.5 + 0.2 * sin((double)ts.tv_sec / 60.0 + phase));
    unsigned long long cache = cur / 8, free_kib = cur > used + cache ? cur - (unsigned long long)used - cache : 0;
    int cap = rec->nparams;
    add(rec, &cap, "balloon.current", cur);
    add(rec, &cap, "balloon.maximum", max);
    add(rec, &cap, "balloon.swap_in", 0);
    add(rec, &cap, "balloon.swap_out", 0);
    add(rec, &cap, "balloon.major_fault", 0);
    add(rec, &cap, "balloon.minor_fault", 0);
    add(rec, &cap, "balloon.unused", free_kib);
    add(rec, &cap, "balloon.available", cur);
    add(rec, &cap, "balloon.usable", free_kib + cache);
    add(rec, &cap, "balloon.last-update", (unsigned long long)time(NULL));
    add(rec, &cap, "balloon.disk_caches", cache);
    add(rec, &cap, "balloon.hugetlb_pgalloc", 0);
    add(rec, &cap, "balloon.hugetlb_pgfail", 0);
    add(rec, &cap, "balloon.rss", cur);
}

int virDomainListGetStats(virDomainPtr *doms, unsigned int stats, virDomainStatsRecordPtr **retStats,
                          unsigned int flags)
{
    static list_stats_fn real;
    if (!real)
        real = (list_stats_fn)dlsym(RTLD_NEXT, "virDomainListGetStats");
    int n = real(doms, stats, retStats, flags);
    unsigned long long max = max_kib();
    for (int i = 0; i < n; i++) {
        virDomainStatsRecordPtr rec = (*retStats)[i];
        if (stats & VIR_DOMAIN_STATS_BALLOON)
            add_balloon(rec, max);
        int cap = rec->nparams;
        if (stats & VIR_DOMAIN_STATS_BLOCK)
            add(rec, &cap, "block.count", 0); /* no disks */
    }
    return n;
}

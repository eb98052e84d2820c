#include "host/qemu_touched.h"

#include <stdio.h>
#include <string.h>

int proc_status_kb(const char *text, const char *key, unsigned long long *kb)
{
    const char *line = strstr(text, key);
    return line && sscanf(line + strlen(key), "%llu", kb) == 1 ? 0 : -1;
}

int64_t qemu_touched_from_status(const char *text, int64_t guest_ram_bytes)
{
    unsigned long long size = 0, rss = 0, swap = 0, huge = 0, shmem = 0;
    if (proc_status_kb(text, "\nVmSize:", &size) < 0 || proc_status_kb(text, "\nVmRSS:", &rss) < 0)
        return -1;
    /* a process that does not even map the guest's RAM is not the one
     * holding it: a wrapper that created the QMP socket, or a reused pid */
    if (guest_ram_bytes > 0 && size * 1024 < (unsigned long long)guest_ram_bytes)
        return -1;
    /* absent lines (no swap, no hugetlb support) are 0 */
    proc_status_kb(text, "\nVmSwap:", &swap);
    proc_status_kb(text, "\nHugetlbPages:", &huge);
    proc_status_kb(text, "\nRssShmem:", &shmem);
    /* guest RAM in shared memory (memfd or file with share=on, as
     * virtiofs and vhost-user need): its swapped-out pages are in no line
     * here, so what it touched cannot be told */
    if (shmem > rss / 2)
        return -1;
    return (int64_t)((rss + swap + huge) * 1024);
}

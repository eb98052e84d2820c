#include "host/host_cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/small_file.h"
#include "util/error.h"

/* v1 reports "no limit" as a page-rounded LONG_MAX */
#define V1_UNLIMITED (1ULL << 62)



int cgroup_stat_field(const char *stat, const char *key, uint64_t *value)
{
    size_t klen = strlen(key);
    for (const char *p = stat; p && *p;) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ') {
            *value = strtoull(p + klen + 1, NULL, 10);
            return 0;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

/* "key value" from memory.stat; 0 if absent. */
static uint64_t stat_field(const char *stat, const char *key)
{
    uint64_t v = 0;
    cgroup_stat_field(stat, key, &v);
    return v;
}

int host_cgroup_read(const char *dir, uint64_t machine_total, host_view *out, GError **error)
{
    uint64_t limit = 0, usage = 0;
    bool unlimited = false, v2;
    char stat[8192] = "";
    char path[512];
    snprintf(path, sizeof(path), "%s/memory.current", dir);
    v2 = access(path, R_OK) == 0;
    if (v2) {
        if (small_file_read_u64(dir, "memory.current", &usage, NULL) < 0 ||
            small_file_read_u64(dir, "memory.max", &limit, &unlimited) < 0) {
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s: cannot read memory.current/memory.max: %s", dir,
                        strerror(errno));
            return -1;
        }
    } else {
        if (small_file_read_u64(dir, "memory.usage_in_bytes", &usage, NULL) < 0 ||
            small_file_read_u64(dir, "memory.limit_in_bytes", &limit, NULL) < 0) {
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE,
                        "%s: not a memory cgroup (no memory.current or memory.usage_in_bytes)", dir);
            return -1;
        }
        unlimited = limit >= V1_UNLIMITED;
    }
    small_file_read_at(dir, "memory.stat", stat, sizeof(stat));
    uint64_t inactive_file = v2 ? stat_field(stat, "inactive_file") : stat_field(stat, "total_inactive_file");
    uint64_t file = v2 ? stat_field(stat, "file") : stat_field(stat, "total_cache");
    if (unlimited || limit > machine_total)
        limit = machine_total;
    memset(out, 0, sizeof(*out));
    out->total_bytes = limit;
    out->free_bytes = limit > usage ? limit - usage : 0;
    out->cached_bytes = file;
    /* what could be had without swapping: headroom plus clean cache */
    out->available_bytes = out->free_bytes + (inactive_file < usage ? inactive_file : usage);
    if (out->available_bytes > limit)
        out->available_bytes = limit;
    return 0;
}

#include "host/host_meminfo.h"

#include <glib.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/small_file.h"

/* Value in bytes of "Key:   N kB" in text; -1 if absent. */
static int64_t field_kb(const char *text, const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *k = p;
        /* node files prefix every line with "Node N " */
        if (strncmp(k, "Node ", 5) == 0) {
            k += 5;
            while (*k >= '0' && *k <= '9')
                k++;
            while (*k == ' ')
                k++;
        }
        if (strncmp(k, key, klen) == 0 && k[klen] == ':') {
            char *end;
            unsigned long long v = strtoull(k + klen + 1, &end, 10);
            if (end == k + klen + 1)
                return -1;
            return (int64_t)(v * 1024);
        }
    }
    return -1;
}

static uint64_t or_zero(int64_t v)
{
    return v < 0 ? 0 : (uint64_t)v;
}

int meminfo_parse(const char *text, host_view *out, uint64_t *swap_total, uint64_t *swap_free)
{
    int64_t total = field_kb(text, "MemTotal");
    if (total <= 0)
        return -1;
    memset(out, 0, sizeof(*out));
    out->total_bytes = (uint64_t)total;
    out->free_bytes = or_zero(field_kb(text, "MemFree"));
    int64_t avail = field_kb(text, "MemAvailable");
    out->cached_bytes = or_zero(field_kb(text, "Buffers")) + or_zero(field_kb(text, "Cached"));
    /* kernels before 3.14 lack MemAvailable: approximate it */
    out->available_bytes = avail >= 0 ? (uint64_t)avail : out->free_bytes + out->cached_bytes;
    if (swap_total)
        *swap_total = or_zero(field_kb(text, "SwapTotal"));
    if (swap_free)
        *swap_free = or_zero(field_kb(text, "SwapFree"));
    return 0;
}

int node_meminfo_parse(const char *text, node_meminfo *out)
{
    int64_t total = field_kb(text, "MemTotal");
    if (total <= 0)
        return -1;
    out->total_bytes = (uint64_t)total;
    out->free_bytes = or_zero(field_kb(text, "MemFree"));
    out->file_bytes = or_zero(field_kb(text, "FilePages"));
    return 0;
}


static int cmp_node(const void *a, const void *b)
{
    return ((const node_meminfo *)a)->node - ((const node_meminfo *)b)->node;
}

int host_meminfo_read(const char *proc_meminfo, const char *sys_node_dir, host_meminfo *out)
{
    memset(out, 0, sizeof(*out));
    g_autofree char *text = small_file_read(proc_meminfo, 1 << 20);
    if (!text || meminfo_parse(text, &out->host, &out->swap_total_bytes, &out->swap_free_bytes) < 0)
        return -1;
    DIR *d = sys_node_dir ? opendir(sys_node_dir) : NULL;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) && out->n_nodes < HOST_MAX_NODES) {
        int id;
        char tail;
        if (sscanf(e->d_name, "node%d%c", &id, &tail) != 1 || id < 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "%s/%s/meminfo", sys_node_dir, e->d_name);
        g_autofree char *nt = small_file_read(path, 1 << 20);
        node_meminfo nm = { .node = id };
        if (nt && node_meminfo_parse(nt, &nm) == 0)
            out->nodes[out->n_nodes++] = nm;
    }
    closedir(d);
    qsort(out->nodes, out->n_nodes, sizeof(out->nodes[0]), cmp_node);
    return 0;
}

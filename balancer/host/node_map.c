/* Page frame -> NUMA node through sysfs memory blocks; see node_map.h. */
#include "host/node_map.h"

#include <glib.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t read_hex_file(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llx", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

static void set_block(node_map *m, size_t block, int node)
{
    if (block >= m->n_blocks) {
        size_t n = block + 1 > m->n_blocks * 2 ? block + 1 : m->n_blocks * 2;
        int16_t *nb = g_renew(int16_t, m->block_node, n);
        for (size_t i = m->n_blocks; i < n; i++)
            nb[i] = -1;
        m->block_node = nb;
        m->n_blocks = n;
    }
    m->block_node[block] = (int16_t)node;
}

int node_map_load(node_map *m, const char *sys_root, uint64_t page_bytes)
{
    memset(m, 0, sizeof(*m));
    char path[512];
    snprintf(path, sizeof(path), "%s/memory/block_size_bytes", sys_root);
    uint64_t block_bytes = read_hex_file(path);
    if (!block_bytes || !page_bytes)
        return 0;
    m->block_pages = block_bytes / page_bytes;
    snprintf(path, sizeof(path), "%s/node", sys_root);
    DIR *nodes = opendir(path);
    if (!nodes)
        return 0;
    struct dirent *nd;
    while ((nd = readdir(nodes))) {
        int node;
        if (sscanf(nd->d_name, "node%d", &node) != 1 || node < 0 || node > 32767)
            continue;
        snprintf(path, sizeof(path), "%s/node/%s", sys_root, nd->d_name);
        DIR *blocks = opendir(path);
        if (!blocks)
            continue;
        struct dirent *bd;
        while ((bd = readdir(blocks))) {
            unsigned long block;
            char tail;
            if (sscanf(bd->d_name, "memory%lu%c", &block, &tail) == 1 && block < (1UL << 24))
                set_block(m, block, node);
        }
        closedir(blocks);
    }
    closedir(nodes);
    return 0;
}

void node_map_free(node_map *m)
{
    g_free(m->block_node);
    memset(m, 0, sizeof(*m));
}

int node_map_node_of(const node_map *m, uint64_t pfn)
{
    if (!m->block_pages)
        return -1;
    uint64_t b = pfn / m->block_pages;
    return b < m->n_blocks ? m->block_node[b] : -1;
}

/*
 * Which NUMA node a physical page frame lives on, from the memory blocks
 * each node lists in sysfs (/sys/devices/system/node/nodeN/memoryM and
 * /sys/devices/system/memory/block_size_bytes).  Host-side reclaim uses it
 * to page out, for a node below its watermark, only guest memory on that
 * node (classzone balancing).
 */
#ifndef MEMBAL_NODE_MAP_H
#define MEMBAL_NODE_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t block_pages;  /* pages per memory block */
    size_t n_blocks;
    int16_t *block_node;   /* node of block i, -1 if none listed */
} node_map;

/* sys_root is normally "/sys/devices/system"; page_bytes the page size.
 * Returns 0 (possibly with no blocks: every page is node -1), -1 on OOM. */
int node_map_load(node_map *m, const char *sys_root, uint64_t page_bytes);
void node_map_free(node_map *m);
/* -1 if unknown (no sysfs, hot-added memory since the load). */
int node_map_node_of(const node_map *m, uint64_t pfn);

#endif

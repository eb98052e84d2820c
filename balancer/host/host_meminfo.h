/*
 * Host memory as the kernel reports it: /proc/meminfo and, per NUMA node,
 * /sys/devices/system/node/nodeN/meminfo.  The sysfs root is a parameter
 * so tests can point it at a fake tree.
 */
#ifndef MEMBAL_HOST_MEMINFO_H
#define MEMBAL_HOST_MEMINFO_H

#include <stddef.h>
#include <stdint.h>

#include "policies/policy.h"

#define HOST_MAX_NODES 64

typedef struct {
    int node;                  /* node id */
    uint64_t total_bytes, free_bytes, file_bytes; /* MemTotal, MemFree, FilePages */
} node_meminfo;

typedef struct {
    host_view host;
    uint64_t swap_total_bytes, swap_free_bytes;
    size_t n_nodes;
    node_meminfo nodes[HOST_MAX_NODES];
} host_meminfo;

/* Parse /proc/meminfo text.  Returns 0, or -1 if MemTotal is missing. */
int meminfo_parse(const char *text, host_view *out, uint64_t *swap_total, uint64_t *swap_free);
/* Parse one node's meminfo ("Node 0 MemTotal: ... kB" lines). */
int node_meminfo_parse(const char *text, node_meminfo *out);
/* Read everything; proc_meminfo and sys_node_dir are normally
 * "/proc/meminfo" and "/sys/devices/system/node".  Node files that are
 * missing or unreadable are skipped (n_nodes may be 0).  Returns 0 or -1. */
int host_meminfo_read(const char *proc_meminfo, const char *sys_node_dir, host_meminfo *out);

#endif

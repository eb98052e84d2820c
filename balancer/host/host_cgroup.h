/*
 * "The host" as a memory cgroup: when guests run confined in a cgroup
 * (libvirt's machine.slice with a limit, or the benchmark's cgroup), the
 * memory to balance is the cgroup's limit, not the machine's RAM.
 * Works with cgroup v2 (memory.max, memory.current) and v1
 * (memory.limit_in_bytes, memory.usage_in_bytes); the directory's files
 * tell which.
 */
#ifndef MEMBAL_HOST_CGROUP_H
#define MEMBAL_HOST_CGROUP_H

#include <glib.h>
#include <stdint.h>

#include "policies/policy.h"

/* Fill *out from the cgroup at dir.  Without a limit ("max", or v1's
 * huge default) total falls back to machine_total.  Returns 0, or -1 with
 * the reason. */
int host_cgroup_read(const char *dir, uint64_t machine_total, host_view *out, GError **error);

/* The value of the line "key value" of memory.stat text (the group's own
 * line: v1's hierarchical ones are "total_key").  0, or -1 if absent. */
int cgroup_stat_field(const char *stat, const char *key, uint64_t *value);

#endif

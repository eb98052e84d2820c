/* Reclaim through a VM's memory cgroup; see memcg_reclaim.h. */
#include "reclaim/memcg_reclaim.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"
#include "util/small_file.h"

#define PAGE_ALIGN_DOWN(x) ((x) & ~(uint64_t)4095)

static const char *usage_file(const qemu_memcg *m)
{
    return m->kind == MEMCG_V2 ? "memory.current" : "memory.usage_in_bytes";
}

int memcg_usage(const qemu_memcg *m, uint64_t *bytes)
{
    if (m->kind == MEMCG_NONE) {
        errno = ENOENT;
        return -1;
    }
    return small_file_read_u64(m->dir, usage_file(m), bytes, NULL);
}

static int fail(GError **error, const qemu_memcg *m, const char *file, const char *what)
{
    g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s/%s: %s: %s", m->dir, file, what, strerror(errno));
    return -1;
}

static int write_u64(const qemu_memcg *m, const char *file, uint64_t v)
{
    char text[32];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    return small_file_write_at(m->dir, file, text);
}

/* v2: one write; EAGAIN says the kernel reclaimed less than asked. */
static int reclaim_v2(const qemu_memcg *m, uint64_t bytes, GError **error)
{
    if (write_u64(m, "memory.reclaim", bytes) < 0 && errno != EAGAIN)
        return fail(error, m, "memory.reclaim", "writing");
    return 0;
}

/* v1: the limit to usage less bytes, and back. */
static int reclaim_v1(const qemu_memcg *m, uint64_t bytes, uint64_t usage, protect_ledger *pl, GError **error)
{
    uint64_t limit = 0;
    if (small_file_read_u64(m->dir, MEMCG_V1_LIMIT, &limit, NULL) < 0)
        return fail(error, m, MEMCG_V1_LIMIT, "reading");
    uint64_t to = PAGE_ALIGN_DOWN(usage - bytes);
    if (to >= limit)
        return 0; /* held there, or lower, already: by its own limit */
    memcg_saved before = { .saved = true, .bytes = limit };
    if (pl && protect_ledger_note_file(pl, m, MEMCG_V1_LIMIT, &before, to, error) < 0)
        return -1;
    /* EBUSY: the kernel could not reclaim down to it, and left the limit
     * as it was; EINTR likewise.  Back in any case. */
    int lowered = write_u64(m, MEMCG_V1_LIMIT, to);
    int lower_errno = errno;
    if (write_u64(m, MEMCG_V1_LIMIT, limit) < 0)
        return fail(error, m, MEMCG_V1_LIMIT, "putting the limit back (the ledger keeps it)");
    if (pl)
        protect_ledger_drop_file(pl, m, MEMCG_V1_LIMIT);
    if (lowered < 0 && lower_errno != EBUSY && lower_errno != EINTR) {
        errno = lower_errno;
        return fail(error, m, MEMCG_V1_LIMIT, "lowering");
    }
    return 0;
}

int memcg_reclaim(const qemu_memcg *m, uint64_t bytes, protect_ledger *pl, uint64_t *reclaimed, GError **error)
{
    *reclaimed = 0;
    bytes = PAGE_ALIGN_DOWN(bytes < MEMCG_RECLAIM_STEP_MAX ? bytes : MEMCG_RECLAIM_STEP_MAX);
    uint64_t before = 0, after = 0;
    if (m->kind == MEMCG_NONE) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "no memory cgroup");
        return -1;
    }
    if (memcg_usage(m, &before) < 0)
        return fail(error, m, usage_file(m), "reading");
    if (!bytes || before <= bytes)
        return 0;
    int r = m->kind == MEMCG_V2 ? reclaim_v2(m, bytes, error) : reclaim_v1(m, bytes, before, pl, error);
    if (r == 0 && memcg_usage(m, &after) == 0 && after < before)
        *reclaimed = before - after;
    return r;
}

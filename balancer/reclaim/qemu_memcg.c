/* A QEMU's memory cgroup: find, protect, reclaim; see qemu_memcg.h. */
#include "reclaim/qemu_memcg.h"

#include <glib.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/small_file.h"

/* Copy the line at *p into line and move *p past it; false at the end.
 * A line too long for line comes back empty (nothing we parse is that
 * long). */
static bool next_line(const char **p, char *line, size_t size)
{
    if (!*p || !**p)
        return false;
    const char *eol = strchr(*p, '\n');
    size_t len = eol ? (size_t)(eol - *p) : strlen(*p);
    if (len >= size)
        len = 0;
    memcpy(line, *p, len);
    line[len] = '\0';
    *p = eol ? eol + 1 : NULL;
    return true;
}

void memcg_mounts(const char *mountinfo, char *v2, size_t v2len, char *v1mem, size_t v1len)
{
    v2[0] = v1mem[0] = '\0';
    char line[1024];
    for (const char *p = mountinfo; next_line(&p, line, sizeof(line));) {
        /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS" */
        char mnt[512], fstype[32], super[512];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1 ||
            sscanf(dash + 3, "%31s %*s %511s", fstype, super) != 2)
            continue;
        if (strcmp(fstype, "cgroup2") == 0 && !v2[0]) {
            snprintf(v2, v2len, "%s", mnt);
        } else if (strcmp(fstype, "cgroup") == 0 && !v1mem[0]) {
            char *save = NULL;
            for (char *o = strtok_r(super, ",", &save); o; o = strtok_r(NULL, ",", &save))
                if (strcmp(o, "memory") == 0)
                    snprintf(v1mem, v1len, "%s", mnt);
        }
    }
}

static bool file_exists(const char *dir, const char *file)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    return access(path, F_OK) == 0;
}

int memcg_resolve(const char *proc_cgroup, const char *v2_mount, const char *v1_mount, qemu_memcg *out)
{
    memset(out, 0, sizeof(*out));
    char v1path[400] = "", v2path[400] = "";
    bool have_v1 = false, have_v2 = false;
    char line[600];
    for (const char *p = proc_cgroup; next_line(&p, line, sizeof(line));) {
        /* "hierarchy-ID:controller-list:path" */
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/')
            continue;
        *c1 = '\0';
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (strcmp(line, "0") == 0 && !*ctrls) {
            snprintf(v2path, sizeof(v2path), "%s", path);
            have_v2 = true;
        } else {
            char list[200];
            snprintf(list, sizeof(list), ",%s,", ctrls);
            if (strstr(list, ",memory,")) {
                snprintf(v1path, sizeof(v1path), "%s", path);
                have_v1 = true;
            }
        }
    }
    if (have_v2 && v2_mount && *v2_mount) {
        snprintf(out->dir, sizeof(out->dir), "%s%s", v2_mount, strcmp(v2path, "/") ? v2path : "");
        if (file_exists(out->dir, "memory.current")) {
            out->kind = MEMCG_V2;
            snprintf(out->mount, sizeof(out->mount), "%s", v2_mount);
            return 0;
        }
    }
    if (have_v1 && v1_mount && *v1_mount) {
        snprintf(out->dir, sizeof(out->dir), "%s%s", v1_mount, strcmp(v1path, "/") ? v1path : "");
        if (file_exists(out->dir, "memory.usage_in_bytes")) {
            out->kind = MEMCG_V1;
            snprintf(out->mount, sizeof(out->mount), "%s", v1_mount);
            return 0;
        }
    }
    out->dir[0] = '\0';
    return -1;
}


int qemu_memcg_find(pid_t pid, qemu_memcg *out)
{
    memset(out, 0, sizeof(*out));
    char path[64], v2[512], v1[512];
    g_autofree char *mi = small_file_read("/proc/self/mountinfo", 1 << 20);
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    g_autofree char *cg = small_file_read(path, 1 << 16);
    if (!mi || !cg)
        return -1;
    memcg_mounts(mi, v2, sizeof(v2), v1, sizeof(v1));
    return memcg_resolve(cg, v2, v1, out);
}

int memcg_sole_owner(const qemu_memcg *m, pid_t pid)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/cgroup.procs", m->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int others = 0, self = 0;
    long v;
    while (fscanf(f, "%ld", &v) == 1) {
        if (v == pid)
            self = 1;
        else
            others++;
    }
    fclose(f);
    return self && !others;
}

static int write_u64(const char *dir, const char *file, uint64_t v)
{
    char text[32];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    return small_file_write_at(dir, file, text);
}

const char *memcg_protect_file(const qemu_memcg *m)
{
    return m->kind == MEMCG_V2 ? "memory.low" : m->kind == MEMCG_V1 ? "memory.soft_limit_in_bytes" : NULL;
}

int memcg_save(const qemu_memcg *m, memcg_saved *out)
{
    memset(out, 0, sizeof(*out));
    const char *file = memcg_protect_file(m);
    if (!file) {
        errno = ENOENT;
        return -1;
    }
    if (small_file_read_u64(m->dir, file, &out->bytes, &out->is_max) < 0)
        return -1;
    out->saved = true;
    return 0;
}

int memcg_restore(const qemu_memcg *m, const memcg_saved *s)
{
    const char *file = memcg_protect_file(m);
    if (!s->saved || !file) {
        errno = ENOENT;
        return -1;
    }
    return s->is_max ? small_file_write_at(m->dir, file, "max") : write_u64(m->dir, file, s->bytes);
}

int memcg_protect(const qemu_memcg *m, uint64_t bytes)
{
    const char *file = memcg_protect_file(m);
    if (!file) {
        errno = ENOENT;
        return -1;
    }
    return write_u64(m->dir, file, bytes);
}

uint64_t memcg_protect_cap(const qemu_memcg *m, char *by, size_t len)
{
    if (len)
        by[0] = '\0';
    if (m->kind != MEMCG_V2)
        return UINT64_MAX;
    size_t root = strlen(m->mount);
    char dir[sizeof(m->dir)];
    snprintf(dir, sizeof(dir), "%s", m->dir);
    uint64_t cap = UINT64_MAX;
    /* each ancestor below the mount (the root group has no memory.low) */
    for (char *slash; (slash = strrchr(dir, '/')) && (size_t)(slash - dir) > root;) {
        *slash = '\0';
        uint64_t low = 0;
        bool is_max = false;
        if (small_file_read_u64(dir, "memory.low", &low, &is_max) < 0 || is_max || low >= cap)
            continue;
        cap = low;
        if (len)
            snprintf(by, len, "%s", dir);
    }
    return cap;
}

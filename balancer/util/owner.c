/* Who made it, and is it gone; see owner.h. */
#include "util/owner.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"
#include "util/log.h"
#include "util/small_file.h"

/* A process's start time in clock ticks after boot (/proc/PID/stat field
 * 22); 0 when there is no such process. */
static unsigned long long proc_start(int pid)
{
    char dir[32], buf[1024];
    snprintf(dir, sizeof(dir), "/proc/%d", pid);
    if (pid <= 0 || small_file_read_at(dir, "stat", buf, sizeof(buf)) < 0)
        return 0;
    const char *p = strrchr(buf, ')');
    unsigned long long start = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                     &start) != 1)
        return 0;
    return start;
}

static void boot_id(char *buf, size_t len)
{
    if (small_file_read_at("/proc/sys/kernel/random", "boot_id", buf, len) < 0)
        buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

void owner_self(owner_id *o)
{
    memset(o, 0, sizeof(*o));
    o->pid = (int)getpid();
    o->start = proc_start(o->pid);
    boot_id(o->boot_id, sizeof(o->boot_id));
}

bool owner_alive(const owner_id *o)
{
    return o->start ? proc_start(o->pid) == o->start : kill(o->pid, 0) == 0;
}

bool owner_this_boot(const owner_id *o)
{
    char here[40];
    boot_id(here, sizeof(here));
    return strcmp(here, o->boot_id) == 0;
}

void owner_to_keyfile(GKeyFile *kf, const char *group, const owner_id *o)
{
    g_key_file_set_int64(kf, group, "owner_pid", o->pid);
    g_key_file_set_uint64(kf, group, "owner_start", o->start);
    g_key_file_set_string(kf, group, "boot_id", o->boot_id);
}

int owner_from_keyfile(GKeyFile *kf, const char *group, owner_id *o, GError **error)
{
    g_autoptr(GError) err = NULL;
    memset(o, 0, sizeof(*o));
    int64_t pid = g_key_file_get_int64(kf, group, "owner_pid", &err);
    uint64_t start = err ? 0 : g_key_file_get_uint64(kf, group, "owner_start", &err);
    g_autofree char *boot = err ? NULL : g_key_file_get_string(kf, group, "boot_id", &err);
    if (err || pid <= 0 || pid > INT32_MAX || strlen(boot) >= sizeof(o->boot_id)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "no owner (%s)", err ? err->message : "out of range");
        return -1;
    }
    o->pid = (int)pid;
    o->start = start;
    snprintf(o->boot_id, sizeof(o->boot_id), "%s", boot);
    return 0;
}

int ledger_save(const char *path, GKeyFile *kf, const char *what, GError **error)
{
    gsize len = 0;
    g_autofree char *text = g_key_file_to_data(kf, &len, NULL);
    g_autofree char *dir = g_path_get_dirname(path);
    GError *err = NULL;
    if (g_mkdir_with_parents(dir, 0700) < 0)
        g_set_error(&err, G_FILE_ERROR, g_file_error_from_errno(errno), "creating %s: %s", dir, strerror(errno));
    if (err || !g_file_set_contents(path, text, (gssize)len, &err)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "recording %s in %s: %s", what, path, err->message);
        g_error_free(err);
        return -1;
    }
    return 0;
}

int ledger_load(const char *path, GKeyFile *kf, GError **error)
{
    g_autoptr(GError) err = NULL;
    if (!g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, &err)) {
        if (g_error_matches(err, G_FILE_ERROR, G_FILE_ERROR_NOENT))
            return 0;
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s: %s", path, err->message);
        return -1;
    }
    return 1;
}

void ledger_forget(const char *path)
{
    if (unlink(path) < 0 && errno != ENOENT)
        log_warn("removing %s: %s", path, strerror(errno));
}

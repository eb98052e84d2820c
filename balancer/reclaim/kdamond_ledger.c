/* The kdamond we create, recorded and taken back; see kdamond_ledger.h. */
#include "reclaim/kdamond_ledger.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/log.h"
#include "util/small_file.h"

#define GROUP "kdamond"

/* dir/file's first line, without its newline; false if unreadable. */
static bool read_word(const char *dir, const char *file, char *buf, size_t len)
{
    if (small_file_read_at(dir, file, buf, len) < 0)
        return false;
    buf[strcspn(buf, "\n")] = '\0';
    return true;
}

static bool read_num(const char *dir, const char *file, long long *out)
{
    char buf[32], *end;
    if (!read_word(dir, file, buf, sizeof(buf)))
        return false;
    errno = 0;
    *out = strtoll(buf, &end, 10);
    return !errno && end != buf && !*end;
}

void kdamond_ledger_init(kdamond_ledger *l, const char *admin, unsigned index, uint32_t sample_us, uint32_t aggr_us)
{
    memset(l, 0, sizeof(*l));
    snprintf(l->admin, sizeof(l->admin), "%s", admin);
    l->index = index;
    owner_self(&l->owner);
    l->sample_us = sample_us;
    l->aggr_us = aggr_us;
}

static uint64_t dir_inode(const char *admin, unsigned index)
{
    char kd[320];
    struct stat st;
    snprintf(kd, sizeof(kd), "%s/kdamonds/%u", admin, index);
    return stat(kd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

void kdamond_ledger_note_dir(kdamond_ledger *l)
{
    l->dir_ino = dir_inode(l->admin, l->index);
}

int kdamond_ledger_save(const char *path, const kdamond_ledger *l, GError **error)
{
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_key_file_set_string(kf, GROUP, "admin", l->admin);
    g_key_file_set_uint64(kf, GROUP, "index", l->index);
    owner_to_keyfile(kf, GROUP, &l->owner);
    g_key_file_set_int64(kf, GROUP, "kdamond_pid", l->kdamond_pid);
    g_key_file_set_uint64(kf, GROUP, "dir_ino", l->dir_ino);
    g_key_file_set_uint64(kf, GROUP, "sample_us", l->sample_us);
    g_key_file_set_uint64(kf, GROUP, "aggr_us", l->aggr_us);
    return ledger_save(path, kf, "the kdamond we create", error);
}

int kdamond_ledger_load(const char *path, kdamond_ledger *l, GError **error)
{
    g_autoptr(GKeyFile) kf = g_key_file_new();
    int r = ledger_load(path, kf, error);
    if (r <= 0)
        return r;
    memset(l, 0, sizeof(*l));
    g_autoptr(GError) err = NULL;
    g_autofree char *admin = g_key_file_get_string(kf, GROUP, "admin", &err);
    uint64_t index = err ? 0 : g_key_file_get_uint64(kf, GROUP, "index", &err);
    int64_t kpid = err ? 0 : g_key_file_get_int64(kf, GROUP, "kdamond_pid", &err);
    uint64_t sample = err ? 0 : g_key_file_get_uint64(kf, GROUP, "sample_us", &err);
    uint64_t aggr = err ? 0 : g_key_file_get_uint64(kf, GROUP, "aggr_us", &err);
    uint64_t ino = err ? 0 : g_key_file_get_uint64(kf, GROUP, "dir_ino", &err);
    if (!err)
        owner_from_keyfile(kf, GROUP, &l->owner, &err);
    if (err || !admin[0] || strlen(admin) >= sizeof(l->admin) || index > 1024 || kpid < 0 || kpid > INT32_MAX ||
        sample > UINT32_MAX || aggr > UINT32_MAX) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s: not a kdamond ledger (%s)", path,
                    err ? err->message : "a value out of range");
        return -1;
    }
    snprintf(l->admin, sizeof(l->admin), "%s", admin);
    l->index = (unsigned)index;
    l->kdamond_pid = (int)kpid;
    l->sample_us = (uint32_t)sample;
    l->aggr_us = (uint32_t)aggr;
    l->dir_ino = ino;
    return 1;
}

/* false, with error saying why the kdamond is not ours. */
static bool not_ours(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static bool not_ours(GError **error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *why = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, why);
    return false;
}

/* Whether the kdamond at kd is the one l recorded: true, or false with
 * error saying why not.  Its directory must be the one created (its
 * inode, once recorded; before that, only a kdamond never configured is
 * taken for ours).  A kdamond that is off may still be unconfigured
 * (balancerd died between creating it and starting it); one that runs
 * must show exactly what we write: one context, paddr, our intervals, one
 * "stat" scheme, and the thread pid recorded when it started. */
static bool kdamond_is_ours(const kdamond_ledger *l, const char *kd, GError **error)
{
    char state[32], ctx[400], word[64];
    long long v;
    if (!read_word(kd, "state", state, sizeof(state)))
        return not_ours(error, "its state cannot be read");
    bool on = strcmp(state, "off") != 0;
    if (l->dir_ino && dir_inode(l->admin, l->index) != l->dir_ino)
        return not_ours(error, "it was removed and made again since");
    if (!l->dir_ino && (!read_num(kd, "contexts/nr_contexts", &v) || v != 0 || on))
        return not_ours(error, "it was configured, and its creation was never recorded");
    if (on && l->kdamond_pid && (!read_num(kd, "pid", &v) || v != l->kdamond_pid))
        return not_ours(error, "it runs as another thread than the pid %d recorded", l->kdamond_pid);
    if (!read_num(kd, "contexts/nr_contexts", &v) || v > 1 || (v == 0 && on))
        return not_ours(error, "its contexts are not ours");
    if (v == 0)
        return true; /* created, never configured */
    snprintf(ctx, sizeof(ctx), "%s/contexts/0", kd);
    long long schemes;
    if (!read_num(ctx, "schemes/nr_schemes", &schemes) || schemes > 1 || (schemes == 0 && on))
        return not_ours(error, "its schemes are not ours");
    if (schemes == 0)
        return true;
    long long sample, aggr;
    if (!read_word(ctx, "operations", word, sizeof(word)) || strcmp(word, "paddr") != 0)
        return not_ours(error, "its operations are not paddr");
    if (!read_word(ctx, "schemes/0/action", word, sizeof(word)) || strcmp(word, "stat") != 0)
        return not_ours(error, "its scheme is not a stat scheme");
    if (!read_num(ctx, "monitoring_attrs/intervals/sample_us", &sample) ||
        !read_num(ctx, "monitoring_attrs/intervals/aggr_us", &aggr) || sample != l->sample_us ||
        aggr != l->aggr_us)
        return not_ours(error, "its intervals are not the %u/%u us recorded", l->sample_us, l->aggr_us);
    return true;
}

int kdamond_turn_off(const char *admin, unsigned index)
{
    char kd[320], state[32];
    snprintf(kd, sizeof(kd), "%s/kdamonds/%u", admin, index);
    if (read_word(kd, "state", state, sizeof(state)) && strcmp(state, "off") != 0 &&
        small_file_write_at(kd, "state", "off") < 0)
        return -1;
    char kds[300];
    snprintf(kds, sizeof(kds), "%s/kdamonds", admin);
    long long nr;
    if (index != 0 || !read_num(kds, "nr_kdamonds", &nr) || nr != 1)
        return 0; /* others were added after ours: off is all that is ours to do */
    /* the kdamond thread takes a moment to exit; until then the
     * directory is busy (EBUSY) */
    int rc;
    for (int i = 0; (rc = small_file_write_at(kds, "nr_kdamonds", "0")) < 0 && errno == EBUSY && i < 100; i++)
        usleep(20000);
    return rc;
}

kdamond_leftover kdamond_release_leftover(const char *path, char **what)
{
    *what = NULL;
    kdamond_ledger l;
    g_autoptr(GError) err = NULL;
    int r = kdamond_ledger_load(path, &l, &err);
    if (r == 0)
        return KDAMOND_NONE;
    if (r < 0) {
        *what = g_strdup_printf("%s: no kdamond is taken back on its word", err->message);
        ledger_forget(path);
        return KDAMOND_NOT_OURS;
    }
    if (!owner_this_boot(&l.owner)) {
        *what = g_strdup_printf("%s is from an earlier boot: its kdamond ended with it", path);
        ledger_forget(path);
        return KDAMOND_NONE;
    }
    char kd[320], kds[300];
    snprintf(kd, sizeof(kd), "%s/kdamonds/%u", l.admin, l.index);
    snprintf(kds, sizeof(kds), "%s/kdamonds", l.admin);
    /* the balancerd that made it runs still: its pid with its start time
     * (a start time not read is no proof either way: the pid alone) */
    if (l.owner.pid != (int)getpid() && owner_alive(&l.owner)) {
        *what = g_strdup_printf("kdamond %u under %s belongs to balancerd pid %d, which still runs", l.index, kds,
                                l.owner.pid);
        return KDAMOND_IN_USE;
    }
    long long nr;
    if (!read_num(kds, "nr_kdamonds", &nr) || nr <= l.index) {
        *what = g_strdup_printf("kdamond %u under %s, created by balancerd pid %d, is gone", l.index, kds, l.owner.pid);
        ledger_forget(path);
        return KDAMOND_NONE;
    }
    g_autoptr(GError) why = NULL;
    if (!kdamond_is_ours(&l, kd, &why)) {
        *what = g_strdup_printf("kdamond %u under %s is not the one balancerd pid %d created (%s): left alone", l.index,
                                kds, l.owner.pid, why->message);
        ledger_forget(path);
        return KDAMOND_NOT_OURS;
    }
    if (kdamond_turn_off(l.admin, l.index) < 0) {
        *what = g_strdup_printf("kdamond %u under %s, left by balancerd pid %d: turning it off: %s", l.index, kds,
                                l.owner.pid, strerror(errno));
        return KDAMOND_FAILED;
    }
    *what = g_strdup_printf("turned off kdamond %u under %s, left running by balancerd pid %d, which is gone", l.index,
                            kds, l.owner.pid);
    ledger_forget(path);
    return KDAMOND_RELEASED;
}

char *kdamond_describe(const char *admin)
{
    char kds[300];
    snprintf(kds, sizeof(kds), "%s/kdamonds", admin);
    long long nr;
    if (!read_num(kds, "nr_kdamonds", &nr) || nr <= 0)
        return g_strdup("");
    GString *out = g_string_new(NULL);
    for (long long i = 0; i < nr && i < 16; i++) {
        char kd[340], ctx[400], state[32] = "?", ops[64] = "?", pid[32] = "?";
        snprintf(kd, sizeof(kd), "%s/%lld", kds, i);
        snprintf(ctx, sizeof(ctx), "%s/contexts/0", kd);
        read_word(kd, "state", state, sizeof(state));
        read_word(kd, "pid", pid, sizeof(pid));
        read_word(ctx, "operations", ops, sizeof(ops));
        g_string_append_printf(out, "%skdamond %lld: %s, pid %s, %s", out->len ? "; " : "", i, state, pid, ops);
        long long schemes = 0, sample, aggr;
        read_num(ctx, "schemes/nr_schemes", &schemes);
        for (long long j = 0; j < schemes && j < 8; j++) {
            char sch[440], action[64] = "?";
            snprintf(sch, sizeof(sch), "%s/schemes/%lld", ctx, j);
            read_word(sch, "action", action, sizeof(action));
            g_string_append_printf(out, "%s%s", j ? "+" : ", scheme ", action);
        }
        if (read_num(ctx, "monitoring_attrs/intervals/sample_us", &sample) &&
            read_num(ctx, "monitoring_attrs/intervals/aggr_us", &aggr))
            g_string_append_printf(out, ", sample %lld ms, aggr %lld ms", sample / 1000, aggr / 1000);
    }
    return g_string_free(out, FALSE);
}

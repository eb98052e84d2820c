/* The memory protection we write, recorded and taken back; see protect_ledger.h. */
#include "reclaim/protect_ledger.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/log.h"
#include "util/owner.h"
#include "util/small_file.h"

#define OWNER_GROUP "owner"
#define ENTRY_PREFIX "cgroup "

typedef struct {
    char dir[sizeof(((qemu_memcg *)0)->dir)];
    char file[32];       /* memory.low / memory.soft_limit_in_bytes / memory.limit_in_bytes */
    memcg_saved before;
    uint64_t wrote;
    uint64_t ino;        /* the group directory's inode */
} entry;

struct protect_ledger {
    GMutex lock;
    char *path;
    owner_id owner;
    GHashTable *entries; /* group directory/file -> entry */
};

protect_ledger *protect_ledger_new(const char *path)
{
    protect_ledger *pl = g_atomic_rc_box_new0(protect_ledger);
    g_mutex_init(&pl->lock);
    pl->path = g_strdup(path);
    owner_self(&pl->owner);
    pl->entries = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    return pl;
}

protect_ledger *protect_ledger_ref(protect_ledger *pl)
{
    return g_atomic_rc_box_acquire(pl);
}

static void ledger_clear(gpointer p)
{
    protect_ledger *pl = p;
    g_hash_table_destroy(pl->entries);
    g_free(pl->path);
    g_mutex_clear(&pl->lock);
}

void protect_ledger_unref(protect_ledger *pl)
{
    if (pl)
        g_atomic_rc_box_release_full(pl, ledger_clear);
}

/* The whole ledger into its file (none when it records nothing).  Called
 * with the lock held. */
static int save_locked(protect_ledger *pl, GError **error)
{
    if (!g_hash_table_size(pl->entries)) {
        ledger_forget(pl->path);
        return 0;
    }
    g_autoptr(GKeyFile) kf = g_key_file_new();
    owner_to_keyfile(kf, OWNER_GROUP, &pl->owner);
    GHashTableIter it;
    gpointer v;
    unsigned n = 0;
    g_hash_table_iter_init(&it, pl->entries);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        const entry *e = v;
        char group[32];
        snprintf(group, sizeof(group), ENTRY_PREFIX "%u", n++);
        g_key_file_set_string(kf, group, "dir", e->dir);
        g_key_file_set_string(kf, group, "file", e->file);
        g_key_file_set_boolean(kf, group, "before_max", e->before.is_max);
        g_key_file_set_uint64(kf, group, "before", e->before.bytes);
        g_key_file_set_uint64(kf, group, "wrote", e->wrote);
        g_key_file_set_uint64(kf, group, "ino", e->ino);
    }
    return ledger_save(pl->path, kf, "the memory protection we write", error);
}

static uint64_t dir_inode(const char *dir)
{
    struct stat st;
    return stat(dir, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

int protect_ledger_note_file(protect_ledger *pl, const qemu_memcg *m, const char *file, const memcg_saved *before,
                             uint64_t wrote, GError **error)
{
    if (!file || !before->saved || strlen(file) >= sizeof(((entry *)0)->file)) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "%s: no file or no value saved", m->dir);
        return -1;
    }
    entry *e = g_new0(entry, 1);
    snprintf(e->dir, sizeof(e->dir), "%s", m->dir);
    snprintf(e->file, sizeof(e->file), "%s", file);
    e->before = *before;
    e->wrote = wrote;
    e->ino = dir_inode(m->dir);
    g_mutex_lock(&pl->lock);
    g_hash_table_replace(pl->entries, g_build_filename(m->dir, file, NULL), e);
    int r = save_locked(pl, error);
    g_mutex_unlock(&pl->lock);
    return r;
}

int protect_ledger_note(protect_ledger *pl, const qemu_memcg *m, const memcg_saved *before, uint64_t wrote,
                        GError **error)
{
    return protect_ledger_note_file(pl, m, memcg_protect_file(m), before, wrote, error);
}

void protect_ledger_drop_file(protect_ledger *pl, const qemu_memcg *m, const char *file)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *key = g_build_filename(m->dir, file, NULL);
    g_mutex_lock(&pl->lock);
    if (g_hash_table_remove(pl->entries, key) && save_locked(pl, &err) < 0)
        log_warn("%s", err->message);
    g_mutex_unlock(&pl->lock);
}

void protect_ledger_drop(protect_ledger *pl, const qemu_memcg *m)
{
    const char *file = memcg_protect_file(m);
    if (file)
        protect_ledger_drop_file(pl, m, file);
}

/* One recorded group: its value back if it is still ours.  false when a
 * write back failed. */
static bool release_entry(GKeyFile *kf, const char *group, GString *what)
{
    g_autoptr(GError) err = NULL;
    g_autofree char *dir = g_key_file_get_string(kf, group, "dir", &err);
    g_autofree char *file = err ? NULL : g_key_file_get_string(kf, group, "file", &err);
    gboolean before_max = err ? FALSE : g_key_file_get_boolean(kf, group, "before_max", &err);
    uint64_t before = err ? 0 : g_key_file_get_uint64(kf, group, "before", &err);
    uint64_t wrote = err ? 0 : g_key_file_get_uint64(kf, group, "wrote", &err);
    uint64_t ino = err ? 0 : g_key_file_get_uint64(kf, group, "ino", &err);
    /* only the files we write: a protection, or memcg_reclaim's lowered v1 limit */
    bool ours = !err && (strcmp(file, "memory.low") == 0 || strcmp(file, "memory.soft_limit_in_bytes") == 0 ||
                         strcmp(file, MEMCG_V1_LIMIT) == 0);
    if (!ours || strlen(dir) >= sizeof(((qemu_memcg *)0)->dir)) {
        g_string_append_printf(what, "%s: not a protection we write (%s): left alone\n", group,
                               err ? err->message : file);
        return true;
    }
    uint64_t now_ino = dir_inode(dir);
    if (!now_ino) {
        g_string_append_printf(what, "%s is gone (its guest with it)\n", dir);
        return true;
    }
    if (now_ino != ino) {
        g_string_append_printf(what, "%s is another group of that name now: left alone\n", dir);
        return true;
    }
    uint64_t now = 0;
    bool now_max = false;
    if (small_file_read_u64(dir, file, &now, &now_max) < 0) {
        g_string_append_printf(what, "%s/%s cannot be read (%s): left alone\n", dir, file, strerror(errno));
        return true;
    }
    if (now_max || now != wrote) {
        g_string_append_printf(what, "%s/%s was changed since balancerd wrote %" PRIu64 ": left alone\n", dir, file,
                               wrote);
        return true;
    }
    char text[32];
    snprintf(text, sizeof(text), "%" PRIu64, before);
    if (small_file_write_at(dir, file, before_max ? "max" : text) < 0) {
        g_string_append_printf(what, "%s/%s: putting back %s: %s\n", dir, file, before_max ? "max" : text,
                               strerror(errno));
        return false;
    }
    g_string_append_printf(what, "%s/%s: put back %s\n", dir, file, before_max ? "max" : text);
    return true;
}

protect_leftover protect_release_leftover(const char *path, char **what)
{
    *what = NULL;
    g_autoptr(GKeyFile) kf = g_key_file_new();
    g_autoptr(GError) err = NULL;
    owner_id owner;
    int r = ledger_load(path, kf, &err);
    if (r == 0)
        return PROTECT_NONE;
    if (r < 0 || owner_from_keyfile(kf, OWNER_GROUP, &owner, &err) < 0) {
        *what = g_strdup_printf("%s: %s: nothing is put back on its word", path, err->message);
        ledger_forget(path);
        return PROTECT_NONE;
    }
    if (!owner_this_boot(&owner)) {
        *what = g_strdup_printf("%s is from an earlier boot: its cgroups ended with it", path);
        ledger_forget(path);
        return PROTECT_NONE;
    }
    if (owner.pid != (int)getpid() && owner_alive(&owner)) {
        *what = g_strdup_printf("the memory protection in %s belongs to balancerd pid %d, which still runs", path,
                                owner.pid);
        return PROTECT_IN_USE;
    }
    GString *out = g_string_new(NULL);
    g_string_append_printf(out, "memory protection left by balancerd pid %d, which is gone:\n", owner.pid);
    bool ok = true;
    gsize n = 0;
    g_auto(GStrv) groups = g_key_file_get_groups(kf, &n);
    for (gsize i = 0; i < n; i++)
        if (g_str_has_prefix(groups[i], ENTRY_PREFIX))
            ok = release_entry(kf, groups[i], out) && ok;
    if (out->len && out->str[out->len - 1] == '\n')
        g_string_truncate(out, out->len - 1);
    *what = g_string_free(out, FALSE);
    if (!ok)
        return PROTECT_FAILED;
    ledger_forget(path);
    return PROTECT_RELEASED;
}

/* Reclaim through a VM's memory cgroup; see memcg_reclaim.h. */
#include "reclaim/memcg_reclaim.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "host/host_cgroup.h"
#include "util/error.h"
#include "util/small_file.h"

#define WRITE_BACK_TRIES 3 /* a signal may interrupt even a write that raises the limit */

static uint64_t page_bytes(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uint64_t)p : 4096;
}

/* The kernel reads a limit back in whole pages: what we write must be one
 * for the ledger to know it again after a crash. */
static uint64_t page_down(uint64_t x)
{
    return x - x % page_bytes();
}

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

int memcg_swap_ins(const qemu_memcg *m, uint64_t *faults)
{
    char text[8192];
    if (m->kind == MEMCG_NONE || small_file_read_at(m->dir, "memory.stat", text, sizeof(text)) < 0)
        return -1;
    /* the group's own line, not v1's hierarchical total_pgmajfault */
    if (cgroup_stat_field(text, "pgmajfault", faults) < 0) {
        errno = ENOENT;
        return -1;
    }
    return 0;
}

bool memcg_can_reclaim(const qemu_memcg *m)
{
    if (m->kind == MEMCG_NONE)
        return false;
    char path[sizeof(m->dir) + 32];
    snprintf(path, sizeof(path), "%s/%s", m->dir, m->kind == MEMCG_V2 ? "memory.reclaim" : MEMCG_V1_LIMIT);
    return access(path, W_OK) == 0;
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

/* ---- a bound on how long the kernel reclaims in our write ----
 * The kernel's loop for either file ends when the amount is reclaimed,
 * when reclaim stops making progress, or on a signal: a guest that
 * allocates (or faults its pages back) as fast as it is reclaimed keeps
 * every pass productive.  A timer of this thread's interrupts the write
 * after MEMCG_WRITE_MAX_MS (EINTR: what was reclaimed by then stays
 * reclaimed). */
#define MEMCG_TIMER_SIGNAL (SIGRTMIN + 7)

static void on_timer(int sig)
{
    (void)sig; /* only to interrupt the write */
}

typedef struct {
    timer_t id;
    bool armed;
} write_timer;

static void timer_arm(write_timer *t)
{
    static gsize installed;
    if (g_once_init_enter(&installed)) {
        struct sigaction sa = { .sa_handler = on_timer }; /* no SA_RESTART: the write returns EINTR */
        sigemptyset(&sa.sa_mask);
        sigaction(MEMCG_TIMER_SIGNAL, &sa, NULL);
        g_once_init_leave(&installed, 1);
    }
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, MEMCG_TIMER_SIGNAL);
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
    struct sigevent sev = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = MEMCG_TIMER_SIGNAL };
    sev._sigev_un._tid = gettid(); /* sigev_notify_thread_id: glibc 2.36 does not name it */
    t->armed = timer_create(CLOCK_MONOTONIC, &sev, &t->id) == 0;
    struct itimerspec its = { .it_value = { .tv_sec = MEMCG_WRITE_MAX_MS / 1000,
                                            .tv_nsec = (MEMCG_WRITE_MAX_MS % 1000) * 1000000L } };
    if (t->armed && timer_settime(t->id, 0, &its, NULL) < 0) {
        timer_delete(t->id);
        t->armed = false;
    }
}

static void timer_disarm(write_timer *t)
{
    if (t->armed)
        timer_delete(t->id);
    t->armed = false;
}

/* A write that reclaims, bounded in time: 0 (done, or interrupted by
 * the bound or a signal), or -1 with errno. */
static int reclaiming_write(const qemu_memcg *m, const char *file, uint64_t v)
{
    write_timer t;
    timer_arm(&t);
    int r = write_u64(m, file, v);
    int e = errno;
    timer_disarm(&t);
    errno = e;
    /* EAGAIN (v2) / EBUSY (v1): less than asked, nothing more to take
     * now; EINTR: the bound */
    return r < 0 && e != EAGAIN && e != EBUSY && e != EINTR ? -1 : 0;
}

/* ---- v1: a limit step, put back ---- */

/* The limit back to what it was before st's step, and the ledger told.
 * Written only when it holds our lowered value: the original (the lower
 * write never applied: EBUSY, EINTR) needs nothing, a value someone set
 * since is theirs, and a group that went with its guest has nothing to
 * put back.  0, or -1 with errno (then st stays pending: the next call
 * tries again first). */
int memcg_step_undo(const qemu_memcg *m, memcg_step *st, protect_ledger *pl)
{
    uint64_t now = 0;
    if (small_file_read_u64(m->dir, MEMCG_V1_LIMIT, &now, NULL) < 0) {
        if (errno != ENOENT)
            return -1;
    } else if (now == st->lowered) {
        int r = -1;
        for (int i = 0; i < WRITE_BACK_TRIES && r < 0; i++)
            r = write_u64(m, MEMCG_V1_LIMIT, st->limit);
        if (r < 0)
            return -1;
    }
    st->pending = false;
    if (pl)
        protect_ledger_drop_file(pl, m, MEMCG_V1_LIMIT);
    return 0;
}

static int reclaim_v1(const qemu_memcg *m, uint64_t bytes, uint64_t usage, protect_ledger *pl, memcg_step *st,
                      GError **error)
{
    if (st->pending && memcg_step_undo(m, st, pl) < 0)
        return fail(error, m, MEMCG_V1_LIMIT, "putting back the limit an earlier step lowered (the ledger keeps it)");
    uint64_t limit = 0;
    if (small_file_read_u64(m->dir, MEMCG_V1_LIMIT, &limit, NULL) < 0)
        return fail(error, m, MEMCG_V1_LIMIT, "reading");
    uint64_t to = page_down(usage - bytes);
    if (to >= limit)
        return 0; /* held there, or lower, already: by its own limit */
    memcg_saved before = { .saved = true, .bytes = limit };
    if (pl && protect_ledger_note_file(pl, m, MEMCG_V1_LIMIT, &before, to, error) < 0)
        return -1;
    *st = (memcg_step){ .pending = true, .limit = limit, .lowered = to };
    int lowered = reclaiming_write(m, MEMCG_V1_LIMIT, to);
    int lower_errno = errno;
    if (memcg_step_undo(m, st, pl) < 0)
        return fail(error, m, MEMCG_V1_LIMIT, "putting the limit back (the ledger keeps it; tried again next time)");
    if (lowered < 0) {
        errno = lower_errno;
        return fail(error, m, MEMCG_V1_LIMIT, "lowering");
    }
    return 0;
}

int memcg_reclaim(const qemu_memcg *m, uint64_t bytes, protect_ledger *pl, memcg_step *st, uint64_t *reclaimed,
                  GError **error)
{
    *reclaimed = 0;
    bytes = page_down(bytes < MEMCG_RECLAIM_STEP_MAX ? bytes : MEMCG_RECLAIM_STEP_MAX);
    uint64_t before = 0, after = 0;
    if (m->kind == MEMCG_NONE) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_UNAVAILABLE, "no memory cgroup");
        return -1;
    }
    if (memcg_usage(m, &before) < 0)
        return fail(error, m, usage_file(m), "reading");
    if (!bytes || before <= bytes)
        return 0;
    int r = m->kind == MEMCG_V2 ? (reclaiming_write(m, "memory.reclaim", bytes) < 0
                                       ? fail(error, m, "memory.reclaim", "writing")
                                       : 0)
                                : reclaim_v1(m, bytes, before, pl, st, error);
    if (r == 0 && memcg_usage(m, &after) == 0 && after < before)
        *reclaimed = before - after;
    return r;
}

/*
 * The kdamond balancerd creates, written down before it exists, so that
 * it is found and turned off after a balancerd that died without doing it
 * itself (SIGKILL, the OOM killer, a crash, systemd's stop timeout): by
 * the next balancerd at start, or by `balancerd --release-leftovers`
 * (the unit's ExecStopPost).  A kdamond keeps running when the process
 * that configured it dies; left alone it scans forever and holds DAMON,
 * whose sysfs cannot add a kdamond while another exists.
 *
 * The ledger is a small key file in balancerd's state directory (the
 * unit's RuntimeDirectory, /run/balancer): which DAMON admin directory and
 * kdamond index, which balancerd made it (pid and start time, so a
 * reused pid is not taken for it), the boot it was made in, the
 * configuration written (operations paddr, one "stat" scheme, the
 * intervals), and the kdamond thread's pid while it runs.
 *
 * A leftover is ours only when all of that matches what sysfs shows now
 * and the balancerd that made it is gone; anything else is left alone,
 * and the reason said: a kdamond we cannot prove is ours is never
 * written to.
 */
#ifndef MEMBAL_KDAMOND_LEDGER_H
#define MEMBAL_KDAMOND_LEDGER_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/owner.h"

/* The ledger's name in the state directory. */
#define KDAMOND_LEDGER_FILE "kdamond.ledger"

typedef struct {
    char admin[256];                /* DAMON's sysfs admin directory */
    unsigned index;                 /* kdamonds/<index> */
    owner_id owner;                 /* the balancerd that created it, and the boot */
    int kdamond_pid;                /* the kdamond thread while it runs, 0 when off or not read */
    uint64_t dir_ino;               /* the inode of kdamonds/<index> once created (sysfs gives a
                                     * directory made again a new one), 0 not yet */
    uint32_t sample_us, aggr_us;    /* the intervals written */
} kdamond_ledger;

/* A ledger for a kdamond this process is about to create. */
void kdamond_ledger_init(kdamond_ledger *l, const char *admin, unsigned index, uint32_t sample_us, uint32_t aggr_us);
/* The inode of l's kdamonds/<index> directory into l->dir_ino (0 when it
 * cannot be read): call once the kdamond is created. */
void kdamond_ledger_note_dir(kdamond_ledger *l);
/* Write l to path (a whole new file, renamed into place).  0, or -1. */
int kdamond_ledger_save(const char *path, const kdamond_ledger *l, GError **error);
/* Read path into l.  1, 0 when there is none, -1 when it cannot be read
 * or parsed. */
int kdamond_ledger_load(const char *path, kdamond_ledger *l, GError **error);

typedef enum {
    KDAMOND_NONE,      /* no ledger, or what it names is gone (the ledger is removed) */
    KDAMOND_RELEASED,  /* ours and its balancerd gone: turned off and removed (so is the ledger) */
    KDAMOND_IN_USE,    /* ours and its balancerd still runs: left alone */
    KDAMOND_NOT_OURS,  /* what sysfs shows is not what the ledger recorded: left alone, ledger removed */
    KDAMOND_FAILED,    /* ours, but sysfs refused to turn it off: the ledger is kept */
} kdamond_leftover;

/* Take back the kdamond the ledger at path names, if it is provably ours
 * and the balancerd that made it is gone.  *what (g_free it) says what
 * was found and done, for the log; NULL with KDAMOND_NONE and no ledger. */
kdamond_leftover kdamond_release_leftover(const char *path, char **what);

/* Turn kdamonds/<index> under admin off, and when it is the only one,
 * remove it (nr_kdamonds 0), waiting up to 2 s for its thread to exit.
 * 0, or -1 with errno. */
int kdamond_turn_off(const char *admin, unsigned index);

/* One line on each kdamond under admin, for an operator: "kdamond 0: on,
 * pid 108, paddr, scheme pageout, sample 500 ms, aggr 5000 ms"; "" when
 * there are none.  g_free it. */
char *kdamond_describe(const char *admin);

#endif

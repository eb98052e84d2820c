/*
 * Who made something outside balancerd, so that a later balancerd can tell
 * whether its maker is gone: a pid with the process's start time (a pid
 * reused by another process is not taken for it) and the boot it was made
 * in (nothing a process wrote to sysfs or cgroupfs outlives a reboot).
 * Recorded in the state directory's ledgers (kdamond_ledger.h,
 * protect_ledger.h), which are written whole and renamed into place.
 */
#ifndef MEMBAL_OWNER_H
#define MEMBAL_OWNER_H

#include <glib.h>
#include <stdbool.h>

typedef struct {
    int pid;
    unsigned long long start; /* /proc/PID/stat field 22; 0 not read */
    char boot_id[40];         /* /proc/sys/kernel/random/boot_id */
} owner_id;

/* This process. */
void owner_self(owner_id *o);
/* The process o names still runs (its pid with its start time; a start
 * time not read is no proof either way: the pid alone). */
bool owner_alive(const owner_id *o);
/* o was recorded in this boot. */
bool owner_this_boot(const owner_id *o);

/* o as owner_pid, owner_start and boot_id in group; read back with
 * owner_from_keyfile: 0, or -1 with error when missing or out of range. */
void owner_to_keyfile(GKeyFile *kf, const char *group, const owner_id *o);
int owner_from_keyfile(GKeyFile *kf, const char *group, owner_id *o, GError **error);

/* kf into path, its directory made if need be, written whole and renamed
 * into place.  what names the record for the error ("the kdamond we
 * create").  0, or -1 with error. */
int ledger_save(const char *path, GKeyFile *kf, const char *what, GError **error);
/* path into kf: 1, 0 when there is no such file, -1 with error. */
int ledger_load(const char *path, GKeyFile *kf, GError **error);
/* Remove path (a missing file is no error; any other is logged). */
void ledger_forget(const char *path);

#endif

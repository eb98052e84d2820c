/* One structured journal entry for an action on a guest (libsystemd's
 * sd_journal_send).  Kept apart from util/log.c: <systemd/sd-journal.h>
 * brings <syslog.h>, whose LOG_* macros would shadow log.h's level names. */
#ifndef MEMBAL_JOURNAL_H
#define MEMBAL_JOURNAL_H

#include <stdint.h>

/* prio: syslog priority (3 err ... 7 debug).  Returns 0, or < 0 when the
 * journal could not take it. */
int journal_guest_action(int prio, const char *message, const char *guest, const char *uuid, const char *action,
                         const char *reason, uint64_t from_bytes, uint64_t to_bytes);

#endif

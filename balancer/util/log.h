/* Logging to stderr (journald adds timestamps under systemd).  Under
 * systemd (stderr connected to the journal: $JOURNAL_STREAM) a guest's
 * actions also go to the journal with fields an operator can filter on:
 *   journalctl -u balancer GUEST=db ACTION=balloon */
#ifndef MEMBAL_LOG_H
#define MEMBAL_LOG_H

typedef enum { LOG_ERR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level;

void log_set_level(log_level lvl);
log_level log_get_level(void);
void log_msg(log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#include <stdint.h>

/* An action on a guest: the same line as log_msg, and under journald the
 * fields GUEST, GUEST_UUID, ACTION, REASON, FROM_BYTES, TO_BYTES. */
void log_guest_action(log_level lvl, const char *guest, const char *uuid, const char *action, const char *reason,
                      uint64_t from_bytes, uint64_t to_bytes, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif

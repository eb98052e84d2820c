#include "util/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "util/journal.h"

static log_level level = LOG_INFO;

void log_set_level(log_level lvl) { level = lvl; }
log_level log_get_level(void) { return level; }

/* Whether stderr is the journal's stream.  Asked of every message, so
 * the environment first (no system call), and the terminal once: a
 * balloon move a guest a tick must not cost two ioctls besides its line. */
static bool to_journal(void)
{
    static int tty = -1;
    if (!getenv("JOURNAL_STREAM"))
        return false;
    if (tty < 0)
        tty = isatty(STDERR_FILENO);
    return !tty;
}

static void emit(log_level lvl, const char *msg)
{
    static const char *const names[] = { "error", "warning", "info", "debug" };
    /* sd-daemon priority prefixes: journald maps them to levels */
    static const char *const prio[] = { "<3>", "<4>", "<6>", "<7>" };
    if (!to_journal()) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        localtime_r(&ts.tv_sec, &tm);
        fprintf(stderr, "%02d:%02d:%02d.%03ld balancerd %s: %s\n", tm.tm_hour, tm.tm_min,
                tm.tm_sec, ts.tv_nsec / 1000000, names[lvl], msg);
    } else {
        fprintf(stderr, "%s%s\n", prio[lvl], msg);
    }
}

void log_msg(log_level lvl, const char *fmt, ...)
{
    if (lvl > level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    emit(lvl, msg);
}

void log_guest_action(log_level lvl, const char *guest, const char *uuid, const char *action, const char *reason,
                      uint64_t from_bytes, uint64_t to_bytes, const char *fmt, ...)
{
    static const int syslog_prio[] = { 3, 4, 6, 7 }; /* err, warning, info, debug */
    if (lvl > level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* the journal's structured entry, else (or if it cannot be sent) the line */
    if (!to_journal() ||
        journal_guest_action(syslog_prio[lvl], msg, guest, uuid, action, reason, from_bytes, to_bytes) < 0)
        emit(lvl, msg);
}

#include "util/log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static log_level level = LOG_INFO;

void log_set_level(log_level lvl) { level = lvl; }
log_level log_get_level(void) { return level; }

void log_msg(log_level lvl, const char *fmt, ...)
{
    static const char *const names[] = { "error", "warning", "info", "debug" };
    /* sd-daemon priority prefixes: journald maps them to levels */
    static const char *const prio[] = { "<3>", "<4>", "<6>", "<7>" };
    if (lvl > level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (isatty(STDERR_FILENO) || getenv("JOURNAL_STREAM") == NULL) {
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

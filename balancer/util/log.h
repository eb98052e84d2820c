/* Logging to stderr (journald adds timestamps under systemd). */
#ifndef MEMBAL_LOG_H
#define MEMBAL_LOG_H

typedef enum { LOG_ERR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level;

void log_set_level(log_level lvl);
log_level log_get_level(void);
void log_msg(log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif

/*
 * Prometheus /metrics.  The text is rendered from the tick's snapshot at
 * the end of every tick (in the main loop) and served from libmicrohttpd's
 * thread out of a mutex-protected copy, so scrapes never touch live state.
 */
#ifndef MEMBAL_METRICS_H
#define MEMBAL_METRICS_H

#include <glib.h>
#include <stdint.h>

#include "report/snapshot.h"

typedef struct metrics_server metrics_server;

/* Render the exposition text for one tick's snapshot. */
GString *metrics_render(const snapshot *s);

/* Listen on "host:port" (IPv4/IPv6 literal or name).  NULL with the reason. */
metrics_server *metrics_start(const char *listen, GError **error);
/* Replace the text served (takes ownership of text). */
void metrics_publish(metrics_server *m, GString *text);
void metrics_stop(metrics_server *m);

#endif

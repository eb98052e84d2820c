/*
 * Prometheus /metrics.  The text is rendered from the balancer's state at
 * the end of every tick (in the main loop) and served from libmicrohttpd's
 * thread out of a mutex-protected copy, so scrapes never touch live state.
 */
#ifndef MEMBAL_METRICS_H
#define MEMBAL_METRICS_H

#include <glib.h>
#include <stdint.h>

typedef struct balancer balancer;
typedef struct metrics_server metrics_server;

/* Buckets of balancer_tick_duration_seconds (upper bounds, seconds). */
#define TICK_BUCKETS 8
extern const double tick_bucket_bounds[TICK_BUCKETS];

typedef struct {
    uint64_t bucket[TICK_BUCKETS]; /* cumulative-ready counts per bound */
    uint64_t count;
    double sum;
} tick_histogram;

void tick_histogram_observe(tick_histogram *h, double seconds);

/* Render the exposition text for b. */
GString *metrics_render(const balancer *b);

/* Listen on "host:port" (IPv4/IPv6 literal or name).  NULL with *err set. */
metrics_server *metrics_start(const char *listen, char **err);
/* Replace the text served (takes ownership of text). */
void metrics_publish(metrics_server *m, GString *text);
void metrics_stop(metrics_server *m);

#endif

/* The host's monotonic clock, the one every interval in balancerd is
 * measured on (wall-clock jumps must not fire or stall a tick). */
#ifndef MEMBAL_MONO_CLOCK_H
#define MEMBAL_MONO_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* whole seconds (truncated) */
static inline int64_t mono_s(void) { return mono_ms() / 1000; }

#endif

/* The control socket balancerctl talks to (see control.c for the protocol). */
#ifndef MEMBAL_CONTROL_H
#define MEMBAL_CONTROL_H

#include <stdbool.h>

#include "report/snapshot.h"

typedef struct control_server control_server;

/* What the socket may ask of the daemon: the latest snapshot (its
 * answers are rendered from it) and pausing. */
typedef struct {
    const snapshot *(*snapshot)(void *ctx);
    void (*set_paused)(void *ctx, bool paused);
    /* every guest its memory back, and pause: how many guests moved */
    unsigned (*give_back)(void *ctx);
} control_ops;

control_server *control_start(const char *path, const control_ops *ops, void *ctx, GError **error);
void control_stop(control_server *s);

#endif

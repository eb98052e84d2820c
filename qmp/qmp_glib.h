/*
 * Drive a qmp_conn from a GLib main loop: input is pumped when the fd is
 * readable and async deadlines are checked on a timer.  on_broken runs
 * once, from the main loop, when the connection breaks; the watch is then
 * gone and the caller may qmp_close() the connection and reconnect.
 * Events queued before attaching are delivered on the first input; call
 * qmp_pump(conn, 0, NULL) after attaching to deliver them at once.
 */
#ifndef MEMBAL_QMP_GLIB_H
#define MEMBAL_QMP_GLIB_H

#include <glib.h>

#include "qmp/qmp.h"

typedef struct qmp_glib_watch qmp_glib_watch;

typedef void (*qmp_broken_cb)(qmp_conn *conn, const qmp_error *why, void *opaque);

qmp_glib_watch *qmp_glib_attach(qmp_conn *conn, GMainContext *ctx,
                                qmp_broken_cb on_broken, void *opaque);
/* Remove the watch (safe after on_broken too); does not close conn. */
void qmp_glib_detach(qmp_glib_watch *w);

#endif

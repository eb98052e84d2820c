/*
 * libqmp internals exposed for the fuzz target and white-box tests only:
 * a connection without a socket that is fed bytes directly, so the whole
 * input path (framing, JSON, dispatch, events) runs in-process.
 */
#ifndef MEMBAL_QMP_INTERNAL_H
#define MEMBAL_QMP_INTERNAL_H

#include "qmp/qmp.h"

qmp_conn *qmp_conn_new_detached(void);
/* Process bytes exactly as if they had been read from the socket. */
void qmp_conn_feed(qmp_conn *conn, const char *data, size_t n);
/* Register a command id as awaiting a reply. */
int qmp_conn_add_pending(qmp_conn *conn, uint64_t id, int timeout_ms, qmp_reply_cb cb,
                         void *opaque);

#endif

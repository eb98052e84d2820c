/*
 * QMP output: each command goes out whole or not at all, and a round of
 * them corked goes out in one write (qmp_cork).  The line is built in the
 * connection's own buffer, kept from one command to the next.
 */
#include "qmp/qmp.h"
#include "qmp/qmp_conn.h"
#include "qmp/qmp_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define OUT_KEEP (64u * 1024u) /* a buffer grown past this (a huge command) is not kept */

/* A command goes out whole at once or not at all: a QEMU whose socket
 * holds a few hundred KiB it has not read is not reading, and waiting for
 * room would block the caller (the daemon's main loop) for as long as it
 * waits; a part sent would leave half a message in the stream.  Either way
 * the connection breaks, with the reason. */
static int write_all(qmp_conn *c, const char *buf, size_t len, qmp_error *err)
{
    size_t sent = 0;
    while (sent < len) {
        ssize_t n = send(c->fd, buf + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        qmp_error e;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            qmp_conn_err(&e, QMP_ERR_IO, "QEMU is not reading its QMP socket (its buffer is full; %zu of %zu bytes sent)",
                    sent, len);
        else if (n < 0 && errno == EPIPE)
            qmp_conn_err(&e, QMP_ERR_CLOSED, "QMP peer closed the connection");
        else
            qmp_conn_err(&e, QMP_ERR_IO, "writing QMP socket: %s", strerror(errno));
        qmp_conn_break(c, &e);
        return qmp_conn_broken(c, err);
    }
    return 0;
}

/* The line and its CR LF at the end of c->out: 0, or -1 (out of memory). */
static int out_append(qmp_conn *c, const char *text, size_t len)
{
    size_t need = c->out_len + len + 2;
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 512;
        while (cap < need)
            cap *= 2;
        char *b = realloc(c->out, cap);
        if (!b)
            return -1;
        c->out = b;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, text, len);
    memcpy(c->out + c->out_len + len, "\r\n", 2);
    c->out_len = need;
    return 0;
}

/* What c->out holds, in one write. */
static int flush(qmp_conn *c, qmp_error *err)
{
    size_t len = c->out_len;
    c->out_len = 0;
    int rc = len ? write_all(c, c->out, len, err) : 0;
    if (c->out_cap > OUT_KEEP) {
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
    }
    return rc;
}

int qmp_execute_async(qmp_conn *c, const char *command, json_object *args,
                      int timeout_ms, qmp_reply_cb cb, void *opaque,
                      qmp_error *err)
{
    if (!c || !command || !*command || !cb) {
        json_object_put(args);
        qmp_conn_err(err, QMP_ERR_ARG, "qmp_execute_async: missing connection, command or callback");
        return -1;
    }
    if (c->state == ST_BROKEN) {
        json_object_put(args);
        return qmp_conn_broken(c, err);
    }
    if (args && !json_object_is_type(args, json_type_object)) {
        json_object_put(args);
        qmp_conn_err(err, QMP_ERR_ARG, "arguments of %s must be a JSON object", command);
        return -1;
    }
    json_object *msg = json_object_new_object();
    if (!msg) {
        json_object_put(args);
        qmp_conn_err(err, QMP_ERR_IO, "out of memory");
        return -1;
    }
    uint64_t id = ++c->next_id;
    json_object_object_add(msg, "execute", json_object_new_string(command));
    if (args)
        json_object_object_add(msg, "arguments", args);
    json_object_object_add(msg, "id", json_object_new_int64((int64_t)id));

    size_t len;
    const char *text = json_object_to_json_string_length(msg, JSON_C_TO_STRING_PLAIN, &len);
    int rc = out_append(c, text, len);
    if (rc < 0)
        qmp_conn_err(err, QMP_ERR_IO, "out of memory");
    else if (!c->corked)
        rc = flush(c, err);
    json_object_put(msg);
    if (rc < 0)
        return -1;
    c->counters.commands_sent++;
    if (qmp_conn_add_pending(c, id, timeout_ms < 0 ? 0 : timeout_ms, cb, opaque) < 0) {
        qmp_conn_err(err, QMP_ERR_IO, "out of memory");
        return -1;
    }
    return 0;
}

int qmp_conn_add_pending(qmp_conn *c, uint64_t id, int timeout_ms, qmp_reply_cb cb,
                         void *opaque)
{
    pending *p = calloc(1, sizeof(*p));
    if (!p)
        return -1;
    p->id = id;
    p->cb = cb;
    p->opaque = opaque;
    p->deadline_ms = qmp_conn_now_ms() + timeout_ms;
    p->next = c->pending;
    c->pending = p;
    return 0;
}

void qmp_cork(qmp_conn *c)
{
    c->corked = true;
}

int qmp_uncork(qmp_conn *c, qmp_error *err)
{
    c->corked = false;
    if (c->state == ST_BROKEN) {
        c->out_len = 0; /* their callbacks ran with the reason */
        return qmp_conn_broken(c, err);
    }
    return flush(c, err);
}

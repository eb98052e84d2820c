/*
 * QMP output: each command goes out whole or not at all, and a round of
 * them corked goes out in one write (qmp_cork).  The line is built in the
 * connection's own buffer, kept from one command to the next.
 */
#include "qmp/qmp.h"
#include "qmp/qmp_conn.h"
#include "qmp/qmp_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
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

/* Room for len more bytes in c->out: 0, or -1 (out of memory). */
static int out_reserve(qmp_conn *c, size_t len)
{
    size_t need = c->out_len + len;
    if (need <= c->out_cap)
        return 0;
    size_t cap = c->out_cap ? c->out_cap : 512;
    while (cap < need)
        cap *= 2;
    char *b = realloc(c->out, cap);
    if (!b)
        return -1;
    c->out = b;
    c->out_cap = cap;
    return 0;
}

/* len bytes at the end of c->out (reserved). */
static void out_put(qmp_conn *c, const char *text, size_t len)
{
    if (len)
        memcpy(c->out + c->out_len, text, len);
    c->out_len += len;
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

/* A command name goes out as it is: QMP's are letters, digits, '-' and
 * '_' (anything else would need escaping, and is no QMP command). */
static bool command_name_ok(const char *command)
{
    if (!*command)
        return false;
    for (const char *p = command; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_'))
            return false;
    return true;
}

/* The command's line, formatted into the output buffer (no JSON object
 * is built: a round of questions a guest a tick is most of what balancerd
 * sends), sent unless corked, pending. */
static int send_command(qmp_conn *c, const char *command, const char *args, int timeout_ms, qmp_reply_cb cb,
                        void *opaque, qmp_error *err)
{
    uint64_t id = ++c->next_id;
    char head[160], tail[40];
    int hn = snprintf(head, sizeof(head), "{\"execute\":\"%s\"%s", command, args ? ",\"arguments\":" : "");
    int tn = snprintf(tail, sizeof(tail), ",\"id\":%llu}", (unsigned long long)id);
    size_t an = args ? strlen(args) : 0;
    if (hn < 0 || (size_t)hn >= sizeof(head)) {
        qmp_conn_err(err, QMP_ERR_ARG, "command name %.40s... is too long", command);
        return -1;
    }
    if (out_reserve(c, (size_t)hn + an + (size_t)tn + 2) < 0) {
        qmp_conn_err(err, QMP_ERR_IO, "out of memory");
        return -1;
    }
    out_put(c, head, (size_t)hn);
    out_put(c, args, an);
    out_put(c, tail, (size_t)tn);
    out_put(c, "\r\n", 2);
    if (!c->corked && flush(c, err) < 0)
        return -1;
    c->counters.commands_sent++;
    if (qmp_conn_add_pending(c, id, timeout_ms < 0 ? 0 : timeout_ms, cb, opaque) < 0) {
        qmp_conn_err(err, QMP_ERR_IO, "out of memory");
        return -1;
    }
    return 0;
}

static int check_command(qmp_conn *c, const char *command, qmp_reply_cb cb, qmp_error *err)
{
    if (!c || !command || !command_name_ok(command) || !cb) {
        qmp_conn_err(err, QMP_ERR_ARG, "qmp_execute_async: missing connection, command (or not a QMP name) or "
                     "callback");
        return -1;
    }
    return c->state == ST_BROKEN ? qmp_conn_broken(c, err) : 0;
}

int qmp_execute_async(qmp_conn *c, const char *command, json_object *args,
                      int timeout_ms, qmp_reply_cb cb, void *opaque,
                      qmp_error *err)
{
    if (check_command(c, command, cb, err) < 0) {
        json_object_put(args);
        return -1;
    }
    if (args && !json_object_is_type(args, json_type_object)) {
        json_object_put(args);
        qmp_conn_err(err, QMP_ERR_ARG, "arguments of %s must be a JSON object", command);
        return -1;
    }
    const char *text = args ? json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN) : NULL;
    int rc = send_command(c, command, text, timeout_ms, cb, opaque, err);
    json_object_put(args);
    return rc;
}

int qmp_execute_async_text(qmp_conn *c, const char *command, const char *args, int timeout_ms, qmp_reply_cb cb,
                           void *opaque, qmp_error *err)
{
    if (check_command(c, command, cb, err) < 0)
        return -1;
    return send_command(c, command, args, timeout_ms, cb, opaque, err);
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

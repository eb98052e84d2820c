/*
 * QMP connection: handshake, command/reply matching by id, event queue.
 * Wire format: see QEMU's docs/interop/qmp-spec.
 */
#include "qmp/qmp.h"
#include "qmp/qmp_framer.h"
#include "qmp/qmp_internal.h"
#include "qmp/qmp_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK 4096
#define READS_PER_PUMP 16 /* 64 KiB, as the guest agent's */
#define MAX_JSON_DEPTH 64

static qmp_conn *conn_new(int fd);

const char *qmp_err_code_name(qmp_err_code code)
{
    switch (code) {
    case QMP_OK: return "ok";
    case QMP_ERR_ARG: return "invalid-argument";
    case QMP_ERR_IO: return "io-error";
    case QMP_ERR_CLOSED: return "closed";
    case QMP_ERR_TIMEOUT: return "timeout";
    case QMP_ERR_PROTOCOL: return "protocol-error";
    case QMP_ERR_TOO_LONG: return "message-too-long";
    case QMP_ERR_COMMAND: return "command-error";
    }
    return "unknown";
}

void qmp_conn_err(qmp_error *err, qmp_err_code code, const char *fmt, ...)
{
    if (!err)
        return;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
}

void qmp_event_free(qmp_event *ev)
{
    if (!ev)
        return;
    free(ev->name);
    json_object_put(ev->data);
    free(ev);
}

/* ---- breaking ---- */

/* Mark the connection unusable and fail every pending command with the
 * reason.  Callbacks may run here, so the list is detached first. */
void qmp_conn_break(qmp_conn *c, const qmp_error *why)
{
    if (c->state == ST_BROKEN)
        return;
    c->state = ST_BROKEN;
    c->broken = *why;
    qmp_reply_cb ready = c->ready;
    c->ready = NULL;
    if (ready) /* broken before the capabilities were even asked */
        ready(c, NULL, why, c->ready_opaque);
    pending *p = c->pending;
    c->pending = NULL;
    while (p) {
        pending *next = p->next;
        p->cb(c, NULL, why, p->opaque);
        free(p);
        p = next;
    }
}

/* ---- incoming messages ---- */

static void queue_event(qmp_conn *c, json_object *msg)
{
    json_object *name = NULL, *data = NULL, *ts = NULL, *v;
    json_object_object_get_ex(msg, "event", &name);
    if (!json_object_is_type(name, json_type_string))
        return;
    qmp_event *ev = calloc(1, sizeof(*ev));
    event_node *node = calloc(1, sizeof(*node));
    if (!ev || !node || !(ev->name = strdup(json_object_get_string(name)))) {
        free(ev ? ev->name : NULL);
        free(ev);
        free(node);
        c->counters.events_dropped++;
        return;
    }
    if (json_object_object_get_ex(msg, "data", &data))
        ev->data = json_object_get(data);
    ev->ts_seconds = ev->ts_useconds = -1;
    if (json_object_object_get_ex(msg, "timestamp", &ts) &&
        json_object_is_type(ts, json_type_object)) {
        if (json_object_object_get_ex(ts, "seconds", &v) &&
            json_object_is_type(v, json_type_int))
            ev->ts_seconds = json_object_get_int64(v);
        if (json_object_object_get_ex(ts, "microseconds", &v) &&
            json_object_is_type(v, json_type_int))
            ev->ts_useconds = json_object_get_int64(v);
    }
    node->ev = ev;
    if (c->ev_tail)
        c->ev_tail->next = node;
    else
        c->ev_head = node;
    c->ev_tail = node;
    c->ev_count++;
    c->counters.events_received++;
    while (c->ev_count > QMP_EVENT_QUEUE_MAX) {
        qmp_event_free(qmp_next_event(c));
        c->counters.events_dropped++;
    }
}

static void parse_greeting(qmp_conn *c, json_object *greeting)
{
    json_object *ver, *qemu, *v;
    if (json_object_object_get_ex(greeting, "version", &ver) &&
        json_object_object_get_ex(ver, "qemu", &qemu) &&
        json_object_is_type(qemu, json_type_object)) {
        if (json_object_object_get_ex(qemu, "major", &v))
            c->ver_major = json_object_get_int(v);
        if (json_object_object_get_ex(qemu, "minor", &v))
            c->ver_minor = json_object_get_int(v);
        if (json_object_object_get_ex(qemu, "micro", &v))
            c->ver_micro = json_object_get_int(v);
    }
}

/* The greeting came: negotiate capabilities; their reply is the handshake's
 * end, handed to ready. */
static void greeted(qmp_conn *c)
{
    qmp_reply_cb ready = c->ready;
    c->ready = NULL;
    if (!ready)
        return;
    /* a full timeout of its own: the greeting may have waited in the
     * socket until the caller's next pump, and what is left of the
     * greeting's would judge QEMU by the caller's cadence */
    qmp_error e;
    if (qmp_execute_async(c, "qmp_capabilities", NULL, c->greet_timeout_ms, ready, c->ready_opaque, &e) < 0)
        ready(c, NULL, &e, c->ready_opaque);
}

static pending *take_pending(qmp_conn *c, uint64_t id)
{
    for (pending **pp = &c->pending; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            pending *p = *pp;
            *pp = p->next;
            return p;
        }
    }
    return NULL;
}

static void handle_reply(qmp_conn *c, json_object *msg, json_object *ret,
                         json_object *error)
{
    json_object *idv = NULL;
    if (!json_object_object_get_ex(msg, "id", &idv) ||
        !json_object_is_type(idv, json_type_int)) {
        c->counters.stray_replies++;
        return;
    }
    pending *p = take_pending(c, (uint64_t)json_object_get_int64(idv));
    if (!p) {
        c->counters.stray_replies++;
        return;
    }
    if (error) {
        json_object *cls = NULL, *desc = NULL;
        json_object_object_get_ex(error, "class", &cls);
        json_object_object_get_ex(error, "desc", &desc);
        qmp_error e;
        qmp_conn_err(&e, QMP_ERR_COMMAND, "%s: %s",
                cls ? json_object_get_string(cls) : "Error",
                desc ? json_object_get_string(desc) : "(no description)");
        p->cb(c, NULL, &e, p->opaque);
    } else {
        p->cb(c, ret, NULL, p->opaque);
    }
    free(p);
}

static void handle_message(qmp_conn *c, json_object *msg)
{
    json_object *ret = NULL, *error = NULL, *greeting = NULL;
    c->counters.messages_in++;
    if (!json_object_is_type(msg, json_type_object)) {
        qmp_error e;
        qmp_conn_err(&e, QMP_ERR_PROTOCOL, "QMP peer sent a %s, not an object",
                json_type_to_name(json_object_get_type(msg)));
        qmp_conn_break(c, &e);
        return;
    }
    if (json_object_object_get_ex(msg, "QMP", &greeting)) {
        parse_greeting(c, greeting);
        if (c->state == ST_GREETING) {
            c->state = ST_READY;
            greeted(c);
        }
        return;
    }
    if (json_object_object_get_ex(msg, "event", NULL)) {
        queue_event(c, msg);
        return;
    }
    bool has_ret = json_object_object_get_ex(msg, "return", &ret);
    bool has_err = json_object_object_get_ex(msg, "error", &error);
    if (has_ret || has_err) {
        handle_reply(c, msg, has_ret ? ret : NULL,
                     has_err ? error : NULL);
        return;
    }
    /* An object of an unknown kind: a newer QEMU may add message types;
     * ignoring them is what the spec asks of clients. */
}

static void handle_line(qmp_conn *c, const char *line, size_t len)
{
    json_tokener_reset(c->tok);
    json_object *msg = json_tokener_parse_ex(c->tok, line, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(c->tok);
    if (!msg || jerr != json_tokener_success ||
        json_tokener_get_parse_end(c->tok) != len) {
        qmp_error e;
        qmp_conn_err(&e, QMP_ERR_PROTOCOL, "QMP peer sent invalid JSON (%s) near: %.40s",
                msg && jerr == json_tokener_success ? "trailing data"
                                                    : json_tokener_error_desc(jerr),
                line);
        json_object_put(msg);
        qmp_conn_break(c, &e);
        return;
    }
    handle_message(c, msg);
    json_object_put(msg);
}

/* Process bytes as if read from the socket: frame, parse, dispatch. */
void qmp_conn_feed(qmp_conn *c, const char *data, size_t n)
{
    if (c->state == ST_BROKEN)
        return;
    if (qmp_framer_feed(&c->framer, data, n) < 0) {
        qmp_error e;
        qmp_conn_err(&e, QMP_ERR_IO, "out of memory buffering QMP input");
        qmp_conn_break(c, &e);
        return;
    }
    const char *line;
    size_t len;
    qmp_frame_result fr = QMP_FRAME_NEED_MORE;
    while (c->state != ST_BROKEN &&
           (fr = qmp_framer_next(&c->framer, &line, &len)) == QMP_FRAME_LINE)
        handle_line(c, line, len);
    if (c->state != ST_BROKEN && fr == QMP_FRAME_TOO_LONG) {
        qmp_error e;
        qmp_conn_err(&e, QMP_ERR_TOO_LONG, "QMP message exceeds the %zu byte limit",
                c->framer.max_line);
        qmp_conn_break(c, &e);
    }
}

/* Read what is available (fd is non-blocking), READS_PER_PUMP chunks at
 * most (a peer that never stops sending does not hold the caller; the rest
 * is read by the next pump), and process whole lines. */
static void read_input(qmp_conn *c)
{
    char chunk[READ_CHUNK];
    for (int i = 0; i < READS_PER_PUMP && c->state != ST_BROKEN; i++) {
        ssize_t n = read(c->fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            qmp_error e;
            if (errno == ECONNRESET) /* it went away with our commands unread */
                qmp_conn_err(&e, QMP_ERR_CLOSED, "QMP peer closed the connection (reset)");
            else
                qmp_conn_err(&e, QMP_ERR_IO, "reading QMP socket: %s", strerror(errno));
            qmp_conn_break(c, &e);
            return;
        }
        if (n == 0) {
            qmp_error e;
            size_t part = qmp_framer_pending(&c->framer);
            if (part)
                qmp_conn_err(&e, QMP_ERR_CLOSED,
                        "QMP peer closed the connection in the middle of a message (%zu bytes)",
                        part);
            else
                qmp_conn_err(&e, QMP_ERR_CLOSED, "QMP peer closed the connection");
            qmp_conn_break(c, &e);
            return;
        }
        qmp_conn_feed(c, chunk, (size_t)n);
        if ((size_t)n < sizeof(chunk))
            return; /* short: the socket is empty now, no read to hear EAGAIN */
    }
}

/* ---- public: pumping ---- */

void qmp_expire(qmp_conn *c)
{
    int64_t now = qmp_conn_now_ms();
    if (c->state == ST_GREETING && c->ready && now >= c->greet_deadline_ms) {
        qmp_error e;
        qmp_conn_err(&e, QMP_ERR_TIMEOUT, "no QMP greeting within %d ms", c->greet_timeout_ms);
        qmp_conn_break(c, &e);
        return;
    }
    /* the expired are taken off the list first: a callback that sends (or
     * breaks the connection) changes the list */
    pending *expired = NULL, **tail = &expired;
    for (pending **pp = &c->pending; *pp;) {
        pending *p = *pp;
        if (p->deadline_ms > now) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        p->next = NULL;
        *tail = p;
        tail = &p->next;
    }
    while (expired) {
        pending *p = expired;
        expired = p->next;
        qmp_error e;
        qmp_conn_err(&e, QMP_ERR_TIMEOUT, "no reply from QEMU within the deadline");
        p->cb(c, NULL, &e, p->opaque);
        free(p);
    }
}

static void deliver_events(qmp_conn *c)
{
    qmp_event *ev;
    while (c->ev_cb && (ev = qmp_next_event(c))) {
        c->ev_cb(c, ev, c->ev_opaque);
        qmp_event_free(ev);
    }
}

/* Wait for input (up to timeout_ms) and process it, without delivering
 * events: used inside blocking calls. */
static int pump_input(qmp_conn *c, int timeout_ms, qmp_error *err)
{
    if (c->state == ST_BROKEN)
        return qmp_conn_broken(c, err);
    /* not waiting: the read itself says whether anything came (a poll
     * first would be a second system call when it did) */
    struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
    int r = timeout_ms <= 0 ? c->fd >= 0 : poll(&pfd, 1, timeout_ms);
    if (r < 0 && errno != EINTR) {
        qmp_error e;
        qmp_conn_err(&e, QMP_ERR_IO, "poll on QMP socket: %s", strerror(errno));
        qmp_conn_break(c, &e);
    } else if (r > 0) {
        read_input(c);
    }
    qmp_expire(c);
    return c->state == ST_BROKEN ? qmp_conn_broken(c, err) : 0;
}

int qmp_pump(qmp_conn *c, int timeout_ms, qmp_error *err)
{
    int r = pump_input(c, timeout_ms, err);
    deliver_events(c);
    return r;
}

qmp_conn *qmp_conn_new_detached(void)
{
    return conn_new(-1);
}

typedef struct {
    bool done;
    json_object *ret;
    qmp_error err;
} sync_result;

static void sync_reply(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    sync_result *r = opaque;
    r->done = true;
    if (err)
        r->err = *err;
    else
        r->ret = json_object_get(ret);
}

int qmp_execute(qmp_conn *c, const char *command, json_object *args,
                json_object **ret, int timeout_ms, qmp_error *err)
{
    sync_result r = { .done = false, .ret = NULL, .err = { QMP_OK, "" } };
    if (ret)
        *ret = NULL;
    if (qmp_execute_async(c, command, args, timeout_ms, sync_reply, &r, err) < 0)
        return -1;
    /* The pending entry carries the deadline: qmp_expire() inside
     * pump_input() completes it with a timeout, so this loop ends. */
    while (!r.done)
        pump_input(c, 100, NULL);
    if (r.err.code != QMP_OK) {
        if (err)
            *err = r.err;
        return -1;
    }
    if (ret)
        *ret = r.ret;
    else
        json_object_put(r.ret);
    return 0;
}

/* ---- public: events ---- */

void qmp_set_event_cb(qmp_conn *c, qmp_event_cb cb, void *opaque)
{
    c->ev_cb = cb;
    c->ev_opaque = opaque;
}

qmp_event *qmp_next_event(qmp_conn *c)
{
    event_node *node = c->ev_head;
    if (!node)
        return NULL;
    c->ev_head = node->next;
    if (!c->ev_head)
        c->ev_tail = NULL;
    c->ev_count--;
    qmp_event *ev = node->ev;
    free(node);
    return ev;
}

size_t qmp_pending_events(const qmp_conn *c)
{
    return c->ev_count;
}

static qmp_event *take_named_event(qmp_conn *c, const char *name)
{
    event_node *prev = NULL;
    for (event_node *n = c->ev_head; n; prev = n, n = n->next) {
        if (strcmp(n->ev->name, name) != 0)
            continue;
        if (prev)
            prev->next = n->next;
        else
            c->ev_head = n->next;
        if (c->ev_tail == n)
            c->ev_tail = prev;
        c->ev_count--;
        qmp_event *ev = n->ev;
        free(n);
        return ev;
    }
    return NULL;
}

qmp_event *qmp_wait_event(qmp_conn *c, const char *name, int timeout_ms, qmp_error *err)
{
    int64_t deadline = qmp_conn_now_ms() + (timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
        qmp_event *ev = take_named_event(c, name);
        if (ev)
            return ev;
        int64_t left = deadline - qmp_conn_now_ms();
        if (left <= 0) {
            qmp_conn_err(err, QMP_ERR_TIMEOUT, "no %s event within %d ms", name, timeout_ms);
            return NULL;
        }
        if (pump_input(c, (int)(left < 100 ? left : 100), err) < 0)
            return NULL;
    }
}

/* ---- public: connection ---- */

static qmp_conn *conn_new(int fd)
{
    qmp_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->tok = json_tokener_new_ex(MAX_JSON_DEPTH);
    if (!c->tok) {
        free(c);
        return NULL;
    }
    c->fd = fd;
    c->state = ST_GREETING;
    qmp_framer_init(&c->framer, QMP_DEFAULT_MAX_MESSAGE);
    return c;
}

/* Take fd and start the handshake: ready runs when it ends. */
static qmp_conn *conn_open(int fd, int timeout_ms, qmp_reply_cb ready, void *opaque, qmp_error *err)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        qmp_conn_err(err, QMP_ERR_ARG, "QMP fd %d: %s", fd, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!ready) {
        qmp_conn_err(err, QMP_ERR_ARG, "qmp_open_fd_async: no ready callback");
        close(fd);
        return NULL;
    }
    qmp_conn *c = conn_new(fd);
    if (!c) {
        qmp_conn_err(err, QMP_ERR_IO, "out of memory");
        close(fd);
        return NULL;
    }
    c->ready = ready;
    c->ready_opaque = opaque;
    c->greet_timeout_ms = timeout_ms < 0 ? 0 : timeout_ms;
    c->greet_deadline_ms = qmp_conn_now_ms() + c->greet_timeout_ms;
    return c;
}

/* A connected, non-blocking socket to path, or -1. */
static int socket_connect(const char *path, qmp_error *err)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (!path || strlen(path) >= sizeof(addr.sun_path)) {
        qmp_conn_err(err, QMP_ERR_ARG, "QMP socket path %s", path ? "is too long" : "is missing");
        return -1;
    }
    strcpy(addr.sun_path, path);
    /* non-blocking from the start: a listener whose backlog is full (a
     * QEMU that never accepts) fails at once instead of blocking */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        qmp_conn_err(err, QMP_ERR_IO, "socket: %s", strerror(errno));
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        if (errno == EAGAIN)
            qmp_conn_err(err, QMP_ERR_IO, "connecting to QMP socket %s: its listen backlog is full (QEMU is not "
                    "accepting)", path);
        else
            qmp_conn_err(err, errno == ENOENT || errno == ECONNREFUSED ? QMP_ERR_CLOSED : QMP_ERR_IO,
                    "connecting to QMP socket %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

qmp_conn *qmp_open_fd_async(int fd, int timeout_ms, qmp_reply_cb ready, void *opaque, qmp_error *err)
{
    return conn_open(fd, timeout_ms, ready, opaque, err);
}

qmp_conn *qmp_connect_unix_async(const char *path, int timeout_ms, qmp_reply_cb ready, void *opaque,
                                 qmp_error *err)
{
    int fd = socket_connect(path, err);
    return fd < 0 ? NULL : conn_open(fd, timeout_ms, ready, opaque, err);
}

/* The blocking handshake: the async one, pumped until ready has run (the
 * greeting's and the capabilities' deadlines end it either way, checked
 * every 20 ms at most). */
qmp_conn *qmp_open_fd(int fd, int timeout_ms, qmp_error *err)
{
    sync_result r = { .done = false, .ret = NULL, .err = { QMP_OK, "" } };
    qmp_conn *c = conn_open(fd, timeout_ms, sync_reply, &r, err);
    if (!c)
        return NULL;
    while (!r.done)
        pump_input(c, 20, NULL);
    json_object_put(r.ret);
    if (r.err.code != QMP_OK) {
        if (err)
            *err = r.err;
        qmp_close(c);
        return NULL;
    }
    return c;
}

qmp_conn *qmp_connect_unix(const char *path, int timeout_ms, qmp_error *err)
{
    int fd = socket_connect(path, err);
    return fd < 0 ? NULL : qmp_open_fd(fd, timeout_ms, err);
}

void qmp_close(qmp_conn *c)
{
    if (!c)
        return;
    qmp_error e;
    qmp_conn_err(&e, QMP_ERR_CLOSED, "QMP connection closed by the client");
    qmp_conn_break(c, &e);
    qmp_event *ev;
    while ((ev = qmp_next_event(c)))
        qmp_event_free(ev);
    if (c->fd >= 0)
        close(c->fd);
    json_tokener_free(c->tok);
    qmp_framer_free(&c->framer);
    free(c->out);
    free(c);
}

int qmp_fd(const qmp_conn *c) { return c->fd; }
bool qmp_is_broken(const qmp_conn *c) { return c->state == ST_BROKEN; }
const qmp_error *qmp_broken_reason(const qmp_conn *c) { return &c->broken; }
const qmp_counters *qmp_get_counters(const qmp_conn *c) { return &c->counters; }

void qmp_qemu_version(const qmp_conn *c, int *major, int *minor, int *micro)
{
    if (major) *major = c->ver_major;
    if (minor) *minor = c->ver_minor;
    if (micro) *micro = c->ver_micro;
}

void qmp_set_max_message(qmp_conn *c, size_t max_bytes)
{
    c->framer.max_line = max_bytes < 256 ? 256 : max_bytes;
}

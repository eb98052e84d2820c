/*
 * A QMP target's connection (see backend_qmp.c for the whole backend):
 * connect without waiting, into the epoll set the ticks read, the
 * greeting and capabilities, then who it is (-name, -uuid, its memory)
 * and the balloon's static facts, each within CONNECT_MS of the pump that
 * read the one before; then the guest it serves, or a retry with backoff
 * (none for a socket nobody listens on yet).  The peer's pid is asked
 * once here, for the connection's life.
 */
#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "hv/qmp_target.h"
#include "util/log.h"
#include "util/mono_clock.h"
#include "qmp/qmp.h"

/* t's new connection into the set: 0, or -1 with why in err. */
static int watch(qmp_state *st, qmp_target *t, qmp_error *err)
{
    if (st->ep < 0)
        st->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = t };
    if (st->ep < 0 || epoll_ctl(st->ep, EPOLL_CTL_ADD, qmp_fd(t->conn), &ev) < 0) {
        err->code = QMP_ERR_IO;
        snprintf(err->msg, sizeof(err->msg), "watching its socket (epoll): %s", g_strerror(errno));
        return -1;
    }
    t->watched = true;
    return 0;
}

void qmp_target_unwatch(qmp_state *st, qmp_target *t)
{
    if (t->watched)
        epoll_ctl(st->ep, EPOLL_CTL_DEL, qmp_fd(t->conn), NULL);
    t->watched = false;
}

/* The peer of a connected unix socket, -1 unknown. */
static int peer_pid(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0 ? (int)cred.pid : -1;
}

static void join_fail(qmp_target *t, const char *what, const qmp_error *err)
{
    if (!t->join_failed)
        snprintf(t->join_error, sizeof(t->join_error), "%s%s%s", what, *what ? ": " : "", err->msg);
    t->join_failed = true;
}

static void join_answer(qmp_target *t)
{
    if (t->join_waiting)
        t->join_waiting--;
}

static void on_size(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    qmp_error perr;
    if (!err && qmp_parse_memory_size_summary(ret, &t->join_base, &t->join_plugged, &perr) < 0)
        err = &perr;
    if (err)
        join_fail(t, "query-memory-size-summary", err);
    join_answer(t);
}

/* Identity from QEMU: -name and -uuid (all-zero uuid when not given:
 * then the socket path stands in for it).  A QEMU that does not answer
 * these is not taken under another identity: the connect fails and is
 * retried. */
static void on_name(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    json_object *v;
    if (err)
        join_fail(t, "query-name", err);
    else if (json_object_object_get_ex(ret, "name", &v) && json_object_get_string_len(v) > 0)
        snprintf(t->join_name, sizeof(t->join_name), "%s", json_object_get_string(v));
    join_answer(t);
}

static void on_uuid(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    json_object *v;
    if (err)
        join_fail(t, "query-uuid", err);
    else if (json_object_object_get_ex(ret, "UUID", &v) && json_object_is_type(v, json_type_string) &&
             strcmp(json_object_get_string(v), "00000000-0000-0000-0000-000000000000") != 0)
        snprintf(t->join_uuid, sizeof(t->join_uuid), "%s", json_object_get_string(v));
    join_answer(t);
}

static void on_polling(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    (void)ret;
    qmp_target *t = opaque;
    if (err && !t->closing)
        log_warn("%s: cannot enable balloon stats: %s", t->path, err->msg);
}

/* The balloon device's free-page-reporting property.  Not part of the
 * join: a QEMU too old to have it (before 5.1), or a balloon under another
 * id, leaves it unknown. */
static void on_free_page_reporting(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    if (!err && json_object_is_type(ret, json_type_boolean))
        t->free_page_reporting = json_object_get_boolean(ret) ? 1 : 0;
}

/* The balloon device's deflate-on-oom property, asked as free page
 * reporting is. */
static void on_deflate_on_oom(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    if (!err && json_object_is_type(ret, json_type_boolean))
        t->deflate_on_oom = json_object_get_boolean(ret) ? 1 : 0;
}

/* Whether the guest's balloon driver took free page reporting
 * (x-query-virtio-status, QEMU 7.2+: unstable, so QEMU's refusal is not an
 * error, only unknown). */
static void on_free_page_reporting_used(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    t->fpr_asking = false;
    int taken;
    if (!err && qmp_parse_virtio_guest_feature(ret, "VIRTIO_BALLOON_F_REPORTING", &taken, NULL) == 0)
        t->free_page_reporting_used = taken;
    else if (err && err->code == QMP_ERR_COMMAND)
        t->fpr_refused = true;
}

/* Asked while the device offers free page reporting, outside the round
 * (its answer is not waited for): often until the guest's driver is
 * ready, then now and then. */
void qmp_target_ask_fpr_used(qmp_target *t)
{
    int64_t now = mono_ms();
    if (t->free_page_reporting != 1 || t->fpr_asking || t->fpr_refused ||
        (t->fpr_asked_ms && now - t->fpr_asked_ms < (t->free_page_reporting_used < 0 ? FPR_READY_MS : FPR_AGAIN_MS)))
        return;
    t->fpr_asked_ms = now;
    t->fpr_asking = true;
    json_object *args = json_object_new_object();
    json_object_object_add(args, "path", json_object_new_string(BALLOON_QOM_PATH "/virtio-backend"));
    qmp_error e;
    if (qmp_execute_async(t->conn, "x-query-virtio-status", args, REQUEST_MS, on_free_page_reporting_used, t, &e) < 0)
        t->fpr_asking = false;
}

/* The handshake ended: ask who it is (and turn its balloon stats on). */
static void on_ready(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)ret;
    qmp_target *t = opaque;
    join_answer(t);
    if (err) {
        /* QEMU serves one QMP client at a time: a second one connects and
         * waits for a greeting that comes when the first leaves */
        t->join_silent = err->code == QMP_ERR_TIMEOUT && c && qmp_get_counters(c)->messages_in == 0;
        join_fail(t, t->join_silent ? "another client may hold the monitor, or QEMU is stopped" : "", err);
        return;
    }
    /* CONNECT_MS of their own, from now: the handshake's answer may have
     * waited in the socket for the next tick */
    static const struct { const char *cmd; qmp_reply_cb cb; } q[] = {
        { "query-memory-size-summary", on_size },
        { "query-name", on_name },
        { "query-uuid", on_uuid },
    };
    qmp_cork(c); /* the join's questions in one write */
    for (size_t i = 0; i < G_N_ELEMENTS(q); i++) {
        qmp_error e;
        t->join_waiting++;
        if (qmp_execute_async(c, q[i].cmd, NULL, CONNECT_MS, q[i].cb, t, &e) < 0) {
            join_answer(t);
            join_fail(t, q[i].cmd, &e);
        }
    }
    qmp_error e;
    if (qmp_set_stats_polling_async(c, BALLOON_QOM_PATH, (int)t->stats_period, CONNECT_MS, on_polling, t, &e) < 0)
        on_polling(c, NULL, &e, t);
    t->free_page_reporting = t->free_page_reporting_used = -1;
    t->fpr_asked_ms = 0;
    t->fpr_asking = t->fpr_refused = false;
    json_object *args = json_object_new_object();
    json_object_object_add(args, "path", json_object_new_string(BALLOON_QOM_PATH));
    json_object_object_add(args, "property", json_object_new_string("free-page-reporting"));
    qmp_execute_async(c, "qom-get", args, REQUEST_MS, on_free_page_reporting, t, &e); /* failed: unknown */
    t->deflate_on_oom = -1;
    args = json_object_new_object();
    json_object_object_add(args, "path", json_object_new_string(BALLOON_QOM_PATH));
    json_object_object_add(args, "property", json_object_new_string("deflate-on-oom"));
    qmp_execute_async(c, "qom-get", args, REQUEST_MS, on_deflate_on_oom, t, &e); /* failed: unknown */
    qmp_uncork(c, &e); /* failed: the callbacks ran with why */
}

void qmp_target_connect(hv_ctx *hv, qmp_state *st, qmp_target *t)
{
    if (mono_s() < t->next_attempt)
        return;
    qmp_error err;
    t->asked_ms = mono_ms();
    t->stats_period = hv->stats_period;
    t->joining = true;
    t->join_failed = t->join_absent = t->join_silent = false;
    t->join_waiting = 1; /* the handshake */
    t->waiting = 0;      /* nothing of the old connection is awaited any more */
    t->stuck = t->expired = t->silence_logged = false;
    snprintf(t->join_name, sizeof(t->join_name), "%s", strrchr(t->path, '/') ? strrchr(t->path, '/') + 1 : t->path);
    snprintf(t->join_uuid, sizeof(t->join_uuid), "qmp:%s", t->path);
    t->conn = qmp_connect_unix_async(t->path, CONNECT_MS, on_ready, t, &err);
    if (t->conn && watch(st, t, &err) < 0) {
        qmp_close(t->conn);
        t->conn = NULL;
    }
    t->pid = t->conn ? peer_pid(qmp_fd(t->conn)) : -1; /* once a connection, not once a tick */
    if (!t->conn) {
        join_fail(t, "", &err);
        t->join_absent = err.code == QMP_ERR_CLOSED; /* ENOENT or ECONNREFUSED */
    }
}

/* Another VM is behind t's socket now.  The guest t served (kept while
 * the join ran) is not sampled nor ballooned through the new QEMU: another
 * socket that serves it too (two QEMUs given one -uuid) takes it over, or
 * it is gone. */
static void hand_over(qmp_state *st, qmp_target *t, hv_guest *g)
{
    g->backend_data = NULL;
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *u = g_ptr_array_index(st->targets, i);
        if (u != t && u->g == g && u->conn && !u->joining) {
            g->backend_data = u;
            return;
        }
    }
    g->seen = false;
}

/* After the gather: a join that ended becomes a guest, or a retry. */
void qmp_target_settle(hv_ctx *hv, qmp_state *st, qmp_target *t)
{
    if (!t->joining)
        return;
    if (t->conn && !t->join_failed)
        qmp_expire(t->conn); /* what missed CONNECT_MS fails the join */
    if (!t->join_failed && t->join_waiting)
        return;
    t->joining = false;
    if (!t->join_failed) {
        t->max_bytes = t->join_base + t->join_plugged;
        hv_guest *before = t->g;
        t->g = hv->inv->find(hv->inv_ctx, t->join_uuid);
        if (!t->g)
            t->g = hv->inv->add(hv->inv_ctx, t->join_name, t->join_uuid);
        if (before && before != t->g && before->backend_data == t)
            hand_over(st, t, before);
        t->g->backend_data = t;
        t->g->seen = true;
        t->warned = t->warned_absent = t->was_absent = false;
        t->backoff = 0;
        t->waiting = 0;
        t->stuck = t->silence_logged = t->expired = false;
        t->last_ms = t->taken_ms = 0;
        t->md_known = false; /* asked in its first round */
        if (t->ever_connected)
            hv->reconnects++;
        t->ever_connected = true;
        return;
    }
    if (t->join_absent || (t->was_absent && t->join_silent)) {
        /* not there yet, or just started (its socket exists before its
         * main loop greets): the next tick */
        t->backoff = 0;
        if (t->join_absent && !t->warned_absent)
            log_warn("%s: %s (no QEMU listens: trying again every tick)", t->path, t->join_error);
        t->warned_absent |= t->join_absent;
    } else {
        t->backoff = t->backoff ? (t->backoff * 2 > RETRY_MAX_S ? RETRY_MAX_S : t->backoff * 2) : RETRY_MIN_S;
        if (!t->warned)
            log_warn("%s: %s (retrying, backing off up to %d s)", t->path, t->join_error, RETRY_MAX_S);
        t->warned = true;
    }
    t->was_absent = t->join_absent;
    t->closing = true; /* what is still pending fails quietly */
    qmp_target_unwatch(st, t);
    qmp_close(t->conn);
    t->closing = false;
    t->conn = NULL;
    t->next_attempt = mono_s() + t->backoff;
}

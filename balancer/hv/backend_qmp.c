/*
 * QMP backend (--qmp SOCKET, repeatable): QEMU processes that libvirt does
 * not manage.  Each socket is one guest, named after its -name (or the
 * socket file).  QEMU allows one QMP client per socket, so a guest that
 * libvirt manages must not be given here.  "--qmp PATH,agent=APATH" also
 * reads the guest agent's virtio-serial port, exposed by QEMU as a unix
 * socket chardev (guest-agent/PROTOCOL.md).  Calls are blocking with a
 * short timeout: the sockets are local and QEMU answers in microseconds.
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "agent/agent_conn.h"
#include "hv/backend.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"
#include "util/small_file.h"
#include "qmp/qmp.h"

#define QMP_TIMEOUT_MS 2000
#define BALLOON_QOM_PATH "/machine/peripheral/balloon0"

typedef struct {
    char *path;
    agent_conn agent;      /* path NULL: no agent */
    qmp_conn *conn;
    hv_guest *g;
    uint64_t max_bytes;
    int64_t next_attempt;
    bool warned;
    bool ever_connected;   /* a later connect is a reconnect */
} qmp_target;

typedef struct {
    GPtrArray *targets; /* qmp_target* */
} qmp_state;

static qmp_state *state_of(hv_ctx *hv)
{
    qmp_state *st = hv->priv;
    if (!st) {
        st = g_new0(qmp_state, 1);
        st->targets = g_ptr_array_new();
        for (char **p = hv->qmp_sockets; p && *p; p++) {
            qmp_target *t = g_new0(qmp_target, 1);
            const char *comma = strstr(*p, ",agent=");
            t->path = comma ? g_strndup(*p, (gsize)(comma - *p)) : g_strdup(*p);
            agent_conn_init(&t->agent, comma ? comma + 7 : NULL);
            g_ptr_array_add(st->targets, t);
        }
        hv->priv = st;
    }
    return st;
}

/* Identity from QEMU: -name and -uuid (all-zero uuid when not given:
 * then the socket path stands in for it). */
static void identify(qmp_target *t, char *name, size_t nlen, char *uuid, size_t ulen)
{
    json_object *ret = NULL, *v;
    snprintf(name, nlen, "%s", strrchr(t->path, '/') ? strrchr(t->path, '/') + 1 : t->path);
    snprintf(uuid, ulen, "qmp:%s", t->path);
    if (qmp_execute(t->conn, "query-name", NULL, &ret, QMP_TIMEOUT_MS, NULL) == 0) {
        if (json_object_object_get_ex(ret, "name", &v) && json_object_get_string_len(v) > 0)
            snprintf(name, nlen, "%s", json_object_get_string(v));
        json_object_put(ret);
    }
    if (qmp_execute(t->conn, "query-uuid", NULL, &ret, QMP_TIMEOUT_MS, NULL) == 0) {
        if (json_object_object_get_ex(ret, "UUID", &v) &&
            strcmp(json_object_get_string(v), "00000000-0000-0000-0000-000000000000") != 0)
            snprintf(uuid, ulen, "%s", json_object_get_string(v));
        json_object_put(ret);
    }
}

static void target_connect(hv_ctx *hv, qmp_target *t)
{
    if (mono_s() < t->next_attempt)
        return;
    qmp_error err;
    t->conn = qmp_connect_unix(t->path, QMP_TIMEOUT_MS, &err);
    uint64_t plugged = 0;
    if (t->conn && qmp_query_memory_size_summary(t->conn, &t->max_bytes, &plugged,
                                                 QMP_TIMEOUT_MS, &err) == 0) {
        t->max_bytes += plugged;
        if (qmp_set_stats_polling(t->conn, BALLOON_QOM_PATH, (int)hv->stats_period,
                                  QMP_TIMEOUT_MS, &err) < 0)
            log_warn("%s: cannot enable balloon stats: %s", t->path, err.msg);
        char name[256], uuid[300];
        identify(t, name, sizeof(name), uuid, sizeof(uuid));
        t->g = hv->inv->find(hv->inv_ctx, uuid);
        if (!t->g)
            t->g = hv->inv->add(hv->inv_ctx, name, uuid);
        t->g->backend_data = t;
        t->warned = false;
        if (t->ever_connected)
            hv->reconnects++;
        t->ever_connected = true;
        return;
    }
    if (!t->warned)
        log_warn("%s: %s (retrying)", t->path, err.msg);
    t->warned = true;
    qmp_close(t->conn);
    t->conn = NULL;
    t->next_attempt = mono_s() + 5;
}

static int q_sync(hv_ctx *hv)
{
    qmp_state *st = state_of(hv);
    hv_mark_unseen(hv);
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        if (t->conn && qmp_is_broken(t->conn)) {
            log_warn("%s: %s", t->path, qmp_broken_reason(t->conn)->msg);
            qmp_close(t->conn);
            t->conn = NULL;
        }
        if (!t->conn)
            target_connect(hv, t);
        if (t->conn && t->g) {
            t->g->seen = true;
            /* nobody consumes events here: drop them so none pile up */
            qmp_pump(t->conn, 0, NULL);
            qmp_event *ev;
            while ((ev = qmp_next_event(t->conn)))
                qmp_event_free(ev);
        }
    }
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        if (t->g && !t->g->seen)
            t->g = NULL; /* the guest is dropped just below */
    }
    hv_drop_unseen(hv);
    return 0;
}

static void q_agent_drain(hv_ctx *hv, hv_guest *g, agent_state *st, uint64_t guest_bytes)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    if (t)
        agent_conn_drain(&t->agent, st, guest_bytes);
}

static int q_qemu_pid(hv_ctx *hv, hv_guest *g);

/* The QEMU process's resident memory, as the host measures it (-1 unknown):
 * a guest touching the memory it was given shows here, a guest that only
 * says it needs memory does not. */
static int64_t qemu_rss_bytes(int pid)
{
    if (pid <= 0)
        return -1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    g_autofree char *text = small_file_read(path, 8192);
    const char *line = text ? strstr(text, "\nVmRSS:") : NULL;
    unsigned long long kb;
    if (!line || sscanf(line + 7, "%llu", &kb) != 1)
        return -1;
    return (int64_t)kb * 1024;
}

static int q_sample(hv_ctx *hv, hv_guest *g, guest_sample *out, GError **error)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    qmp_error e;
    uint64_t actual;
    qmp_guest_stats gs;
    if (!t || !t->conn) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "not connected");
        return -1;
    }
    if (qmp_query_balloon(t->conn, &actual, QMP_TIMEOUT_MS, &e) < 0 ||
        qmp_get_guest_stats(t->conn, BALLOON_QOM_PATH, &gs, QMP_TIMEOUT_MS, &e) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", e.msg);
        return -1;
    }
    out->actual_bytes = (int64_t)actual;
    out->max_bytes = (int64_t)t->max_bytes;
    out->last_update = gs.last_update;
    out->free_bytes = gs.free_memory;
    out->available_bytes = gs.available_memory;
    out->cache_bytes = gs.disk_caches;
    out->total_bytes = gs.total_memory;
    out->swap_in_bytes = gs.swap_in;
    out->swap_out_bytes = gs.swap_out;
    out->major_faults = gs.major_faults;
    out->minor_faults = gs.minor_faults;
    out->rss_bytes = qemu_rss_bytes(q_qemu_pid(hv, g));
    out->job_ms = -1; /* a bare QEMU's migrations are its operator's business */
    uint64_t rd;
    out->disk_read_bytes = qmp_query_blockstats_read(t->conn, &rd, QMP_TIMEOUT_MS, &e) == 0 &&
                                   rd <= INT64_MAX ? (int64_t)rd : -1;
    return 0;
}

static int q_set_target(hv_ctx *hv, hv_guest *g, uint64_t bytes, GError **error)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    qmp_error e;
    if (!t || !t->conn) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "not connected");
        return -1;
    }
    if (qmp_balloon(t->conn, bytes, QMP_TIMEOUT_MS, &e) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", e.msg);
        return -1;
    }
    return 0;
}

/* The QMP socket's peer is the QEMU process itself. */
static int q_qemu_pid(hv_ctx *hv, hv_guest *g)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    if (!t || !t->conn)
        return -1;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(qmp_fd(t->conn), SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid <= 0)
        return -1;
    return (int)cred.pid;
}

static void q_guest_release(hv_ctx *hv, hv_guest *g)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    if (t)
        t->g = NULL;
    g->backend_data = NULL;
}

static void q_shutdown(hv_ctx *hv)
{
    qmp_state *st = hv->priv;
    if (!st)
        return;
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        qmp_close(t->conn);
        agent_conn_clear(&t->agent);
        g_free(t->path);
        g_free(t);
    }
    g_ptr_array_free(st->targets, TRUE);
    g_free(st);
    hv->priv = NULL;
}

const backend_ops backend_qmp = {
    .name = "qmp",
    .sync = q_sync,
    .sample = q_sample,
    .agent_drain = q_agent_drain,
    .set_target = q_set_target,
    .qemu_pid = q_qemu_pid,
    .guest_release = q_guest_release,
    .shutdown = q_shutdown,
};

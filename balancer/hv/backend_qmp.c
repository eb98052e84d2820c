/*
 * QMP backend (--qmp SOCKET, repeatable): QEMU processes that libvirt does
 * not manage.  Each socket is one guest, named after its -name (or the
 * socket file).  QEMU allows one QMP client per socket, so a guest that
 * libvirt manages must not be given here.  "--qmp PATH,agent=APATH" also
 * reads the guest agent's virtio-serial port, exposed by QEMU as a unix
 * socket chardev (guest-agent/PROTOCOL.md).
 *
 * No QEMU can stall the tick.  Each tick sends every guest its questions
 * (query-balloon, the balloon's guest-stats, query-blockstats, and
 * query-memory-devices: every tick for a guest with virtio-mem, else
 * every MEMDEV_AGAIN_MS and after a memory-device event) at once, in one
 * write a guest, without waiting, and then waits at most HV_GATHER_MS for
 * all the answers together, every socket in one epoll set (a socket is
 * read when it has something, never polled on its own); a QEMU that does
 * not answer in time (stopped, hung, its monitor busy) is sampled from
 * whatever it answers later, is not waited for again until it answers,
 * and gets no new questions or balloon
 * changes meanwhile.  Connecting does not wait either (a full listen
 * backlog is an error, not a wait): the greeting, capabilities and the
 * identity questions are answered from the ticks' pumps and gathers,
 * each within CONNECT_MS of the pump that read the one before (what waited
 * in the socket for the next tick is not held against QEMU), or the
 * socket is retried with backoff.  A socket nobody listens on (the path
 * does not exist, or refuses: the VM is not started yet, or was shut
 * down) is tried again every tick instead: connect(2) fails at once, and
 * a VM started after balancerd is managed within a tick of its start (its
 * first silence, a QEMU that made its socket but does not run its main
 * loop yet, is tried again the next tick too).
 */
#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#include <unistd.h>

#include "agent/agent_conn.h"
#include "hv/backend.h"
#include "hv/qmp_target.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"
#include "qmp/qmp.h"

#define SHUTDOWN_MS 1000         /* at stop, balloon changes just sent are waited for this long at most */
#define EVENTS_MAX 256           /* epoll events taken at once */

enum { PART_BALLOON, PART_STATS, PART_DISK, PART_MEMDEV, PARTS }; /* the memory devices last: a round may leave them out */

static qmp_state *state_of(hv_ctx *hv)
{
    qmp_state *st = hv->priv;
    if (!st) {
        st = g_new0(qmp_state, 1);
        st->targets = g_ptr_array_new();
        st->ep = -1;
        for (char **p = hv->qmp_sockets; p && *p; p++) {
            qmp_target *t = g_new0(qmp_target, 1);
            t->free_page_reporting = t->free_page_reporting_used = t->deflate_on_oom = -1;
            t->pid = -1;
            const char *comma = strstr(*p, ",agent=");
            t->path = comma ? g_strndup(*p, (gsize)(comma - *p)) : g_strdup(*p);
            agent_conn_init(&t->agent, comma ? comma + 7 : NULL);
            g_ptr_array_add(st->targets, t);
        }
        hv->priv = st;
    }
    return st;
}

static int left_ms(int64_t deadline)
{
    int64_t l = deadline - mono_ms();
    return l > 0 ? (int)l : 1;
}

/* ---- the sockets' event loop: one epoll set ---- */

/* Read t's socket, which has something.  A connection that broke leaves
 * the set at once: its end of file would wake every wait until the next
 * tick closes it. */
static void pump_one(qmp_state *st, qmp_target *t)
{
    if (!t->conn)
        return;
    qmp_pump(t->conn, 0, NULL);
    if (qmp_is_broken(t->conn))
        qmp_target_unwatch(st, t);
}

/* Read what came since the last tick: every socket with something, and
 * the deadlines of the rest. */
static void pump_all(qmp_state *st)
{
    struct epoll_event ev[EVENTS_MAX];
    int n = EVENTS_MAX;
    for (guint round = 0; n == EVENTS_MAX && round <= st->targets->len / EVENTS_MAX; round++) {
        n = st->ep < 0 ? 0 : epoll_wait(st->ep, ev, EVENTS_MAX, 0);
        for (int k = 0; k < n; k++)
            pump_one(st, ev[k].data.ptr);
    }
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        if (t->conn)
            qmp_expire(t->conn);
    }
}

/* One answer of a round: fill its part of the sample; the round completes
 * with the last one. */
static void round_answer(qmp_target *t, const qmp_error *err, const char *what)
{
    if (err && err->code == QMP_ERR_TIMEOUT && t->conn) {
        /* no answer at all: it stays stuck, and is asked again only once
         * it sends something (unread questions would pile up in its
         * socket until writing to it blocks) */
        t->expired = true;
        t->messages_seen = qmp_get_counters(t->conn)->messages_in;
    }
    if (err && !t->round_failed) {
        t->round_failed = true;
        snprintf(t->round_error, sizeof(t->round_error), "%s: %s", what, err->msg);
    }
    if (t->waiting && --t->waiting == 0 && !t->round_failed) {
        t->last = t->partial;
        t->last_ms = mono_ms();
        if (t->silence_logged)
            log_info("%s: QEMU answers again (after %.1f s)", t->path, (double)(t->last_ms - t->asked_ms) / 1000.0);
        t->stuck = t->silence_logged = false;
    }
    if (!t->waiting && t->round_failed && !t->expired)
        t->stuck = t->silence_logged = false; /* an error is an answer: ask again next tick */
}

static void on_balloon(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    qmp_error perr;
    uint64_t actual = 0;
    if (!err && qmp_parse_query_balloon(ret, &actual, &perr) < 0)
        err = &perr;
    if (!err)
        t->partial.actual_bytes = actual > INT64_MAX ? INT64_MAX : (int64_t)actual;
    round_answer(t, err, "query-balloon");
}

static void on_stats(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    qmp_error perr;
    qmp_guest_stats gs;
    if (!err && qmp_parse_guest_stats(ret, &gs, &perr) < 0)
        err = &perr;
    if (!err) {
        guest_sample *o = &t->partial;
        o->last_update = gs.last_update;
        o->free_bytes = gs.free_memory;
        o->available_bytes = gs.available_memory;
        o->cache_bytes = gs.disk_caches;
        o->total_bytes = gs.total_memory;
        o->swap_in_bytes = gs.swap_in;
        o->swap_out_bytes = gs.swap_out;
        o->major_faults = gs.major_faults;
        o->minor_faults = gs.minor_faults;
        o->oom_kills = gs.oom_kills;
        o->alloc_stalls = gs.alloc_stalls;
    }
    round_answer(t, err, "guest-stats");
}

/* Disk reads are evidence, not a requirement: a QEMU without block
 * devices (or an old one) still gives a sample. */
static void on_disk(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    qmp_error perr;
    uint64_t rd = 0;
    t->partial.disk_read_bytes = !err && qmp_parse_blockstats_read(ret, &rd, &perr) == 0 && rd <= INT64_MAX
                                     ? (int64_t)rd : -1;
    round_answer(t, NULL, "query-blockstats");
}

/* Memory devices: the balloon's range is the boot memory and the DIMMs;
 * a virtio-mem device is resized on its own.  A QEMU that cannot say
 * keeps the range it had at connect and no virtio-mem. */
static void on_memdev(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    qmp_target *t = opaque;
    qmp_memory_devices md;
    t->md_known = !err && qmp_parse_memory_devices(ret, &md, NULL) == 0;
    if (t->md_known) {
        guest_sample *o = &t->partial;
        o->max_bytes = (int64_t)(t->join_base + md.dimm_bytes);
        o->vmem = (vmem_sample){ .devices = md.vmem_devices, .block_bytes = md.vmem_block_bytes,
                                 .max_bytes = md.vmem_max_bytes, .requested_bytes = md.vmem_requested_bytes,
                                 .plugged_bytes = md.vmem_plugged_bytes };
        snprintf(o->vmem.id, sizeof(o->vmem.id), "%s", md.vmem_id);
        t->md_max_bytes = o->max_bytes;
        t->md_vmem = o->vmem;
    }
    round_answer(t, NULL, "query-memory-devices");
}

/* Whether this round asks for the memory devices: what they were is
 * reused between (a guest without virtio-mem, its DIMMs unchanged, gives
 * the same answer every tick). */
static bool memdev_due(const qmp_target *t, int64_t now)
{
    return !t->md_known || t->md_vmem.devices || now - t->md_asked_ms >= MEMDEV_AGAIN_MS;
}

/* Send this tick's questions (none while the last ones are unanswered,
 * nor to a QEMU whose questions expired and that has said nothing since),
 * in one write. */
static void ask(hv_ctx *hv, qmp_target *t)
{
    if (t->waiting)
        return;
    if (t->expired) {
        if (qmp_get_counters(t->conn)->messages_in == t->messages_seen)
            return;
        t->expired = false; /* late answers came: it is alive */
    }
    qmp_cork(t->conn); /* the round in one write */
    qmp_target_ask_fpr_used(t); /* not of a QEMU that does not answer: it would pile up */
    memset(&t->partial, 0xff, sizeof(t->partial)); /* every field -1: not reported */
    t->round_failed = false;
    t->round_error[0] = '\0';
    t->asked_ms = mono_ms();
    bool memdev = memdev_due(t, t->asked_ms);
    /* a QEMU that cannot say keeps the range it had at connect and no virtio-mem */
    t->partial.max_bytes = memdev ? (int64_t)t->max_bytes : t->md_max_bytes;
    t->partial.vmem = memdev ? (vmem_sample){ 0 } : t->md_vmem;
    if (memdev)
        t->md_asked_ms = t->asked_ms;
    hv->stats_calls_one++;
    static const struct { const char *cmd, *args; qmp_reply_cb cb; } q[PARTS] = {
        [PART_BALLOON] = { "query-balloon", NULL, on_balloon },
        [PART_STATS] = { "qom-get", "{\"path\":\"" BALLOON_QOM_PATH "\",\"property\":\"guest-stats\"}", on_stats },
        [PART_DISK] = { "query-blockstats", NULL, on_disk },
        [PART_MEMDEV] = { "query-memory-devices", NULL, on_memdev },
    };
    for (int i = 0; i < (memdev ? PARTS : PART_MEMDEV); i++) {
        qmp_error err;
        t->waiting++;
        if (qmp_execute_async_text(t->conn, q[i].cmd, q[i].args, REQUEST_MS, q[i].cb, t, &err) < 0)
            round_answer(t, &err, q[i].cmd); /* the callback will not run */
    }
    qmp_error err;
    qmp_uncork(t->conn, &err); /* failed: round_answer ran for each with why */
}

/* Whether the gather waits for t: asked this tick and not known stuck,
 * or joining. */
static bool awaited(const qmp_target *t)
{
    return t->conn && ((t->waiting && !t->stuck) || (t->joining && t->join_waiting && !t->join_failed));
}

/* What t's socket brought within the gather: a join that ended becomes a
 * guest (asked at once: its first answers come within this gather) or a
 * retry. */
static void gathered(hv_ctx *hv, qmp_state *st, qmp_target *t)
{
    pump_one(st, t);
    if (t->joining && (t->join_failed || !t->join_waiting)) {
        qmp_target_settle(hv, st, t);
        if (t->conn && t->g && !t->joining)
            ask(hv, t);
    }
}

/* Wait up to HV_GATHER_MS for the answers of every target asked this tick
 * that is not known to be stuck; whoever has not answered by then is.
 * The others' sockets are read too when something comes (late answers,
 * events), as the next tick would. */
static void gather(hv_ctx *hv, qmp_state *st)
{
    int64_t deadline = mono_ms() + HV_GATHER_MS;
    unsigned waiting = 0;
    for (guint i = 0; i < st->targets->len; i++)
        waiting += awaited(g_ptr_array_index(st->targets, i));
    while (waiting && st->ep >= 0) {
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            break;
        struct epoll_event ev[EVENTS_MAX];
        int n = epoll_wait(st->ep, ev, EVENTS_MAX, (int)left);
        if (n < 0 && errno != EINTR)
            break;
        for (int k = 0; k < n; k++) {
            qmp_target *t = ev[k].data.ptr;
            bool was = awaited(t);
            gathered(hv, st, t);
            waiting = waiting - was + awaited(t);
        }
    }
    int64_t now = mono_ms();
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        if (t->joining)
            continue;
        if (t->conn && t->waiting)
            t->stuck = true;
        if (t->stuck && !t->silence_logged && now - t->asked_ms >= HV_STUCK_WARN_MS) {
            t->silence_logged = true;
            log_warn("%s: QEMU has not answered for %d s (stopped or hung?): not waited for until it does", t->path,
                     HV_STUCK_WARN_MS / 1000);
        }
    }
}

static int q_sync(hv_ctx *hv)
{
    qmp_state *st = state_of(hv);
    hv_mark_unseen(hv);
    pump_all(st); /* answers and events that came since the last tick */
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        qmp_target_settle(hv, st, t); /* a join that failed or finished since the last tick */
        if (t->conn && !t->joining && qmp_is_broken(t->conn)) {
            log_warn("%s: %s", t->path, qmp_broken_reason(t->conn)->msg);
            qmp_target_unwatch(st, t);
            qmp_close(t->conn);
            t->conn = NULL;
        }
        if (!t->conn)
            qmp_target_connect(hv, st, t);
        qmp_target_settle(hv, st, t); /* a join that failed at once */
        if (t->g && t->joining)
            t->g->seen = true; /* reconnecting: kept (and its state) while the join runs */
        if (t->conn && t->g && !t->joining) {
            t->g->seen = true;
            /* a reset (the guest rebooted, or was reset) is counted for the
             * core; the other events are dropped so none pile up */
            qmp_event *ev;
            while ((ev = qmp_next_event(t->conn))) {
                if (strcmp(ev->name, "RESET") == 0)
                    t->g->resets++;
                else if (!strcmp(ev->name, "DEVICE_DELETED") || !strcmp(ev->name, "ACPI_DEVICE_OST") ||
                         !strcmp(ev->name, "MEMORY_DEVICE_SIZE_CHANGE"))
                    t->md_known = false; /* a DIMM or virtio-mem device came or went: asked again */
                qmp_event_free(ev);
            }
            ask(hv, t);
        }
    }
    gather(hv, st);
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        qmp_target_settle(hv, st, t);
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
        agent_conn_drain(&t->agent, g->name, st, guest_bytes);
}


/* The answer gathered since the core's last sample. */
static int q_sample(hv_ctx *hv, hv_guest *g, guest_sample *out, GError **error)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    if (!t || !t->conn || t->joining) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, t && t->joining ? "connecting" : "not connected");
        return -1;
    }
    if (t->round_failed && !t->waiting) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", t->round_error);
        return -1;
    }
    if (!t->last_ms || t->last_ms == t->taken_ms) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "QEMU has not answered for %.1f s",
                    (double)(mono_ms() - t->asked_ms) / 1000.0);
        return -1;
    }
    t->taken_ms = t->last_ms;
    *out = t->last;
    out->balloon_failures = t->set_failures;
    t->set_failures = 0;
    out->job_ms = -1; /* a bare QEMU's migrations are its operator's business */
    out->free_page_reporting = t->free_page_reporting;
    out->free_page_reporting_used = t->free_page_reporting == 1 ? t->free_page_reporting_used : -1;
    out->deflate_on_oom = t->deflate_on_oom;
    return 0;
}

static void on_set(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque, const char *what)
{
    (void)c;
    (void)ret;
    qmp_target *t = opaque;
    if (t->sets_unanswered)
        t->sets_unanswered--;
    if (err && !t->closing) {
        log_warn("%s: %s change failed: %s", t->path, what, err->msg);
        t->set_failures++;
    }
}

static void on_balloon_set(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    on_set(c, ret, err, opaque, "balloon");
}

static void on_vmem_set(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    on_set(c, ret, err, opaque, "virtio-mem");
}

/* Sent without waiting; QEMU's refusal is logged when it comes.  A QEMU
 * that does not answer its questions is not given more to queue. */
static int send_set(qmp_target *t, const char *cmd, json_object *args, qmp_reply_cb cb, GError **error)
{
    qmp_error e;
    if (!t || !t->conn || t->joining || t->stuck) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, t && t->stuck ? "QEMU is not answering" : "not connected");
        json_object_put(args);
        return -1;
    }
    if (qmp_execute_async(t->conn, cmd, args, REQUEST_MS, cb, t, &e) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", e.msg);
        return -1;
    }
    t->sets_unanswered++;
    return 0;
}

static int q_set_target(hv_ctx *hv, hv_guest *g, uint64_t bytes, GError **error)
{
    (void)hv;
    if (bytes == 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "balloon target 0 bytes is out of range");
        return -1;
    }
    json_object *args = json_object_new_object();
    json_object_object_add(args, "value", json_object_new_int64(bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes));
    return send_set(g->backend_data, "balloon", args, on_balloon_set, error);
}

/* qom-set of the device's requested-size (what virsh update-memory-device
 * --requested-size does through libvirt). */
static int q_set_vmem(hv_ctx *hv, hv_guest *g, uint64_t bytes, GError **error)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    if (t && !t->last.vmem.id[0]) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_INVALID, "its virtio-mem device has no id: it cannot be addressed");
        return -1;
    }
    char path[96];
    snprintf(path, sizeof(path), QMP_PERIPHERAL_PATH_FMT, t ? t->last.vmem.id : "");
    json_object *args = json_object_new_object();
    json_object_object_add(args, "path", json_object_new_string(path));
    json_object_object_add(args, "property", json_object_new_string("requested-size"));
    json_object_object_add(args, "value", json_object_new_int64(bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes));
    return send_set(t, "qom-set", args, on_vmem_set, error);
}

/* The QMP socket's peer is the QEMU process itself (asked at connect). */
static int q_qemu_pid(hv_ctx *hv, hv_guest *g)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    return t && t->conn ? t->pid : -1;
}

static void q_guest_release(hv_ctx *hv, hv_guest *g)
{
    (void)hv;
    qmp_target *t = g->backend_data;
    if (t && t->g == g) /* it may already serve the guest under a new identity */
        t->g = NULL;
    g->backend_data = NULL;
}

static void q_shutdown(hv_ctx *hv)
{
    qmp_state *st = hv->priv;
    if (!st)
        return;
    /* balloon changes just sent (the last tick's, a give-back's) are
     * answered before the socket closes: QEMU drops the requests of a
     * client that left which it has not run yet (monitor/qmp.c: CHR_EVENT_CLOSED ->
     * monitor_qmp_cleanup_queue_and_resume).  One read may bring only the answers
     * to earlier questions, so each QEMU is read until its balloon changes
     * are all answered, SHUTDOWN_MS for all of them at most; a stuck QEMU
     * is not waited for */
    int64_t deadline = mono_ms() + SHUTDOWN_MS;
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        while (t->conn && !t->stuck && t->sets_unanswered && mono_ms() < deadline)
            if (qmp_pump(t->conn, left_ms(deadline), NULL) < 0)
                break;
    }
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        t->closing = true;
        qmp_close(t->conn);
        agent_conn_clear(&t->agent);
        g_free(t->path);
        g_free(t);
    }
    g_ptr_array_free(st->targets, TRUE);
    if (st->ep >= 0)
        close(st->ep);
    g_free(st);
    hv->priv = NULL;
}

const backend_ops backend_qmp = {
    .name = "qmp",
    .sync = q_sync,
    .sample = q_sample,
    .agent_drain = q_agent_drain,
    .set_target = q_set_target,
    .set_vmem = q_set_vmem,
    .qemu_pid = q_qemu_pid,
    .guest_release = q_guest_release,
    .shutdown = q_shutdown,
};

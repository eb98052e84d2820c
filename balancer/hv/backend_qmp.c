/*
 * QMP backend (--qmp SOCKET, repeatable): QEMU processes that libvirt does
 * not manage.  Each socket is one guest, named after its -name (or the
 * socket file).  QEMU allows one QMP client per socket, so a guest that
 * libvirt manages must not be given here.  "--qmp PATH,agent=APATH" also
 * reads the guest agent's virtio-serial port, exposed by QEMU as a unix
 * socket chardev (guest-agent/PROTOCOL.md).
 *
 * No QEMU can stall the tick.  Each tick sends every guest its questions
 * (query-balloon, the balloon's guest-stats, query-blockstats,
 * query-memory-devices for virtio-mem) at once,
 * without waiting, and then waits at most HV_GATHER_MS for all the answers
 * together; a QEMU that does not answer in time (stopped, hung, its
 * monitor busy) is sampled from whatever it answers later, is not waited
 * for again until it answers, and gets no new questions or balloon
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
#include <poll.h>
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
#include "qmp/qmp.h"

#define CONNECT_MS 500           /* greeting, capabilities and identity of a new connection */
#define REQUEST_MS 10000         /* a question unanswered this long fails (the answer is stray) */
#define SHUTDOWN_MS 1000         /* at stop, balloon changes just sent are waited for this long at most */
#define FPR_READY_MS 5000        /* whether the guest's driver took free page reporting: asked this
                                  * often until its driver is ready ... */
#define FPR_AGAIN_MS 60000       /* ... then this often (the guest may reboot into another kernel) */
#define RETRY_MIN_S 5            /* reconnect backoff, doubling ... */
#define RETRY_MAX_S 60           /* ... up to this */
#define BALLOON_QOM_PATH "/machine/peripheral/balloon0"

enum { PART_BALLOON, PART_STATS, PART_DISK, PART_MEMDEV, PARTS };

typedef struct {
    char *path;
    agent_conn agent;      /* path NULL: no agent */
    qmp_conn *conn;
    hv_guest *g;
    uint64_t max_bytes;    /* the balloon's range when query-memory-devices cannot say */
    int64_t next_attempt;
    unsigned backoff;      /* seconds before the next connect attempt after a failure */
    bool warned;
    bool ever_connected;   /* a later connect is a reconnect */
    /* joining: a new connection's handshake and identity, not a guest yet */
    bool joining;
    unsigned join_waiting; /* answers still to come (the handshake counts as one) */
    bool join_failed;
    bool join_absent;      /* the failure: nobody listens on the socket (no backoff) ... */
    bool join_silent;      /* ... or no greeting at all ... */
    bool was_absent;       /* ... right after it was absent (a QEMU still starting: no backoff once) */
    bool warned_absent;    /* "no QEMU listens" said (other failures are said once on their own) */
    char join_error[400];
    char join_name[256], join_uuid[300];
    uint64_t join_base, join_plugged;
    /* this round of questions */
    unsigned waiting;      /* answers still to come */
    int64_t asked_ms;      /* when they were sent */
    bool round_failed;
    char round_error[300];
    guest_sample partial;  /* being assembled */
    /* the last complete answer */
    guest_sample last;
    int64_t last_ms;       /* when it completed (mono ms), 0 never */
    int64_t taken_ms;      /* last_ms of the sample the core took last, 0 none */
    bool stuck;            /* missed a gather: not waited for until it answers */
    bool silence_logged;   /* its silence was logged */
    bool closing;          /* shutting down: pending commands fail, nothing is wrong */
    bool expired;          /* its questions timed out: asked again only once it shows life */
    uint64_t messages_seen; /* what it had sent when they did */
    unsigned set_failures; /* balloon changes QEMU refused since the last sample */
    unsigned sets_unanswered; /* balloon changes sent and not answered yet */
    unsigned stats_period; /* for the balloon's stats polling, set at each connect */
    int free_page_reporting; /* the balloon's free-page-reporting property: 1, 0, -1 unknown */
    int free_page_reporting_used; /* ... and whether the guest's driver took it: 1, 0, -1 unknown */
    int64_t fpr_asked_ms;    /* when that was last asked, 0 not on this connection */
    bool fpr_asking;         /* ... and the answer is still to come */
    bool fpr_refused;        /* QEMU cannot say (before 7.2, or no such device): not asked again */
    int deflate_on_oom;      /* the balloon's deflate-on-oom property: 1, 0, -1 unknown */
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
            t->free_page_reporting = t->free_page_reporting_used = t->deflate_on_oom = -1;
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

/* ---- joining: connect, handshake, identity ---- */

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
static void ask_free_page_reporting_used(qmp_target *t)
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
}

static void target_connect(hv_ctx *hv, qmp_target *t)
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
    if (!t->conn) {
        join_fail(t, "", &err);
        t->join_absent = err.code == QMP_ERR_CLOSED; /* ENOENT or ECONNREFUSED */
    }
}

/* Another VM is behind t's socket now.  The guest t served (kept while
 * the join ran) is not sampled nor ballooned through the new QEMU: another
 * socket that serves it too (two QEMUs given one -uuid) takes it over, or
 * it is gone. */
static void hand_over(hv_ctx *hv, qmp_target *t, hv_guest *g)
{
    qmp_state *st = state_of(hv);
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
static void join_settle(hv_ctx *hv, qmp_target *t)
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
            hand_over(hv, t, before);
        t->g->backend_data = t;
        t->g->seen = true;
        t->warned = t->warned_absent = t->was_absent = false;
        t->backoff = 0;
        t->waiting = 0;
        t->stuck = t->silence_logged = t->expired = false;
        t->last_ms = t->taken_ms = 0;
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
    qmp_close(t->conn);
    t->closing = false;
    t->conn = NULL;
    t->next_attempt = mono_s() + t->backoff;
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
    if (!err && qmp_parse_memory_devices(ret, &md, NULL) == 0) {
        guest_sample *o = &t->partial;
        o->max_bytes = (int64_t)(t->join_base + md.dimm_bytes);
        o->vmem = (vmem_sample){ .devices = md.vmem_devices, .block_bytes = md.vmem_block_bytes,
                                 .max_bytes = md.vmem_max_bytes, .requested_bytes = md.vmem_requested_bytes,
                                 .plugged_bytes = md.vmem_plugged_bytes };
        snprintf(o->vmem.id, sizeof(o->vmem.id), "%s", md.vmem_id);
    }
    round_answer(t, NULL, "query-memory-devices");
}

/* Send this tick's questions (none while the last ones are unanswered,
 * nor to a QEMU whose questions expired and that has said nothing since). */
static void ask(hv_ctx *hv, qmp_target *t)
{
    if (t->waiting)
        return;
    if (t->expired) {
        if (qmp_get_counters(t->conn)->messages_in == t->messages_seen)
            return;
        t->expired = false; /* late answers came: it is alive */
    }
    ask_free_page_reporting_used(t); /* not of a QEMU that does not answer: it would pile up */
    memset(&t->partial, 0xff, sizeof(t->partial)); /* every field -1: not reported */
    t->partial.max_bytes = (int64_t)t->max_bytes;
    t->partial.vmem = (vmem_sample){ 0 };
    t->round_failed = false;
    t->round_error[0] = '\0';
    t->asked_ms = mono_ms();
    hv->stats_calls_one++;
    json_object *args = json_object_new_object();
    json_object_object_add(args, "path", json_object_new_string(BALLOON_QOM_PATH));
    json_object_object_add(args, "property", json_object_new_string("guest-stats"));
    static const struct { const char *cmd; qmp_reply_cb cb; } q[PARTS] = {
        [PART_BALLOON] = { "query-balloon", on_balloon },
        [PART_STATS] = { "qom-get", on_stats },
        [PART_DISK] = { "query-blockstats", on_disk },
        [PART_MEMDEV] = { "query-memory-devices", on_memdev },
    };
    for (int i = 0; i < PARTS; i++) {
        qmp_error err;
        t->waiting++;
        if (qmp_execute_async(t->conn, q[i].cmd, i == PART_STATS ? args : NULL, REQUEST_MS, q[i].cb, t, &err) < 0)
            round_answer(t, &err, q[i].cmd); /* the callback will not run */
        if (i == PART_STATS)
            args = NULL; /* consumed */
    }
    json_object_put(args);
}

/* Wait up to HV_GATHER_MS for the answers of every target asked this tick
 * that is not known to be stuck; whoever has not answered by then is. */
static void gather(hv_ctx *hv, qmp_state *st)
{
    int64_t deadline = mono_ms() + HV_GATHER_MS;
    g_autofree struct pollfd *fds = g_new(struct pollfd, st->targets->len ? st->targets->len : 1);
    g_autofree qmp_target **who = g_new(qmp_target *, st->targets->len ? st->targets->len : 1);
    for (;;) {
        nfds_t n = 0;
        for (guint i = 0; i < st->targets->len; i++) {
            qmp_target *t = g_ptr_array_index(st->targets, i);
            if (t->conn && ((t->waiting && !t->stuck) || (t->joining && t->join_waiting && !t->join_failed))) {
                fds[n] = (struct pollfd){ .fd = qmp_fd(t->conn), .events = POLLIN };
                who[n++] = t;
            }
        }
        int64_t left = deadline - mono_ms();
        if (!n || left <= 0)
            break;
        if (poll(fds, n, (int)left) < 0 && errno != EINTR)
            break;
        for (nfds_t k = 0; k < n; k++) {
            if (!fds[k].revents)
                continue;
            qmp_target *t = who[k];
            qmp_pump(t->conn, 0, NULL);
            if (t->joining && (t->join_failed || !t->join_waiting)) {
                join_settle(hv, t);
                if (t->conn && t->g && !t->joining)
                    ask(hv, t); /* joined: its first answers come within this gather */
            }
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
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        /* answers and events that came since the last tick */
        if (t->conn)
            qmp_pump(t->conn, 0, NULL);
        join_settle(hv, t); /* a join that failed or finished since the last tick */
        if (t->conn && !t->joining && qmp_is_broken(t->conn)) {
            log_warn("%s: %s", t->path, qmp_broken_reason(t->conn)->msg);
            qmp_close(t->conn);
            t->conn = NULL;
        }
        if (!t->conn)
            target_connect(hv, t);
        join_settle(hv, t); /* a join that failed at once */
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
                qmp_event_free(ev);
            }
            ask(hv, t);
        }
    }
    gather(hv, st);
    for (guint i = 0; i < st->targets->len; i++) {
        qmp_target *t = g_ptr_array_index(st->targets, i);
        join_settle(hv, t);
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

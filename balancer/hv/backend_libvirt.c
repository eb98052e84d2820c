/*
 * libvirt backend: guests are the running domains of one libvirt
 * connection.  Lifecycle events trigger an immediate resync, metadata
 * change events re-read the guest's policy; each tick also resyncs, so a
 * missed event costs at most one tick.  If libvirtd goes away, we
 * reconnect with backoff and keep the guests we knew until then.
 *
 * No libvirt RPC runs on the main loop: libvirt has no timeout for them,
 * and a stopped libvirtd or QEMU answers none.  Two kinds of threads:
 * - the link (one thread, one request at a time) talks to libvirtd alone:
 *   connecting, listing the running domains, reading their policy and
 *   agent channel;
 * - the pool (WORKERS threads) runs the calls that reach a guest's QEMU
 *   (its stats, its balloon), one at a time per guest, and the bulk call.
 * Each tick posts the link's request and one bulk statistics call for all
 * the guests (virDomainListGetStats with NOWAIT: one RPC, and a guest
 * whose job another call holds is answered without its QEMU's stats
 * instead of waited for; such a guest is then asked on its own, also
 * without waiting), then waits at most HV_GATHER_MS for all of them
 * together.  NOWAIT does not keep the bulk call out of a stopped QEMU whose
 * job is free (libvirt 9.0: it then waits for that QEMU's answer, for
 * ever), so when a bulk call that is usually quick is not back by three
 * times its usual time (at most half of the gather), every guest in it is
 * asked on its own at once, and while a bulk call is out at the next
 * tick, every guest is; the stopped QEMU's job is held by the stuck bulk
 * call meanwhile, so its own calls come back at once, unanswered, and say
 * so.  A bulk answer that comes after
 * its gather serves the next tick.  Whatever has not returned by the end
 * of the gather is stuck: not waited for again, given nothing new, and
 * picked up when it returns.  Answers are applied on the main loop, the
 * only place that touches the guest inventory.
 *
 * The backend's files, as libvirt splits qemu_monitor.c from
 * qemu_monitor_json.c:
 * - this one, its main loop's side: the backend_ops, the gather, the
 *   link's answers applied to the inventory, the agents' channels;
 * - libvirt_link.c, the link thread;
 * - libvirt_worker.c, the pool's calls: statistics, and the actuator
 *   (balloon and virtio-mem changes);
 * - libvirt_stats.c, libvirt's statistics records made samples;
 * - libvirt_xml.c, the facts of a domain XML (pure, fuzzed);
 * - libvirt_priv.h, the state the main loop and the pool share.
 */
#include <glib.h>
#include <stdio.h>
#include <string.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "agent/agent_conn.h"
#include "hv/backend.h"
#include "hv/libvirt_priv.h"
#include "hv/libvirt_stats.h"
#include "policies/vm_policy.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"

#define LIBVIRT_QEMU_RUN_DIR "/run/libvirt/qemu"

/* Threads for calls that reach QEMU; a stuck guest holds at most one.
 * libvirtd serves 5 requests of one client at a time (max_client_requests)
 * and stops reading its socket beyond that: 4 workers leave room for the
 * link's one. */
#define WORKERS 4
#define EXIT_WAIT_MS 1000     /* at shutdown, calls still running are waited for this long */

/* libvirt prints every error to stderr unless told otherwise; we log the
 * ones that matter ourselves. */
static void quiet_errors(void *opaque, virErrorPtr e)
{
    (void)opaque;
    (void)e;
}

static void lv_link_work(gpointer data, gpointer user_data);
static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque);
static void on_metadata(virConnectPtr conn, virDomainPtr dom, int type, const char *nsuri, void *opaque);
static void on_reboot(virConnectPtr conn, virDomainPtr dom, void *opaque);

static lv_state *state_of(hv_ctx *hv)
{
    if (!hv->priv) {
        lv_state *st = g_new0(lv_state, 1);
        g_mutex_init(&st->lock);
        g_cond_init(&st->done);
        lv_link_init(&st->link_conn, VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), VIR_DOMAIN_EVENT_CALLBACK(on_metadata),
                     VIR_DOMAIN_EVENT_CALLBACK(on_reboot));
        st->bulk_took_ms = -1;
        st->reread = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        st->pool = g_thread_pool_new(lv_work, st, WORKERS, FALSE, NULL);
        st->link = g_thread_pool_new(lv_link_work, st, 1, FALSE, NULL);
        virSetErrorFunc(NULL, quiet_errors);
        hv->priv = st;
    }
    return hv->priv;
}

/* ---- the agent's channel through libvirtd ----
 *
 * The unit runs balancerd as root without capabilities: libvirt's channel
 * sockets (/var/lib/libvirt/qemu/channel/target, libvirt-qemu's, 0750) are
 * out of its reach, so the link opens the channel through libvirtd instead
 * (virDomainOpenChannel, which needs no capability).  Its events come on
 * the main loop (libvirt-glib's event loop): what arrives is kept, at most
 * AGENT_DRAIN_MAX until the next drain; a guest that sends more is cut off
 * (its agent stays down until its domain restarts), so that it can neither
 * grow balancerd's memory nor keep it busy. */

/* Ending a stream is a call to libvirtd (finish or abort), which may never
 * answer: not made on the main loop, but in a thread of its own. */
static gpointer stream_end(gpointer p)
{
    virStreamPtr s = p;
    if (virStreamAbort(s) < 0)
        virResetLastError(); /* ended already (the domain stopped) */
    virStreamFree(s);
    return NULL;
}

static void agent_stream_close(lv_guest *lg)
{
    if (lg->agent_stream) {
        if (lg->agent_cb)
            virStreamEventRemoveCallback(lg->agent_stream);
        lg->agent_cb = false;
        g_thread_unref(g_thread_new("agent-stream-end", stream_end, lg->agent_stream));
        lg->agent_stream = NULL;
    }
}

static void on_agent_stream(virStreamPtr s, int events, void *opaque)
{
    (void)events;
    lv_guest *lg = opaque;
    char buf[4096];
    for (;;) {
        int n = virStreamRecv(s, buf, sizeof(buf));
        if (n == -2)
            return; /* nothing more for now */
        if (n <= 0) {
            lg->agent_end = n == 0 ? "the channel closed" : "the channel failed";
            break;
        }
        if (lg->agent_in->len + (guint)n > AGENT_DRAIN_MAX) {
            lg->agent_end = "it sent more than 64 KiB between two ticks: cut off until its domain restarts";
            break;
        }
        g_byte_array_append(lg->agent_in, (const guint8 *)buf, (guint)n);
    }
    /* closed now, not at the next drain: libvirt's client queues a
     * stream's data without a bound while its other calls read the
     * connection, so a flooding guest is cut off at once */
    agent_stream_close(lg);
}

static void release(hv_guest *g)
{
    lv_guest *lg = g->backend_data;
    if (!lg)
        return;
    g->backend_data = NULL;
    agent_conn_clear(&lg->agent); /* main loop only: not left to a stuck call */
    agent_stream_close(lg);
    if (lg->agent_in)
        g_byte_array_unref(lg->agent_in);
    lv_guest_unref(lg); /* a call still running keeps it until it returns */
}

/* The link thread's pool function: run one request (libvirt_link.c), post
 * its answer, wake the gather. */
static void lv_link_work(gpointer data, gpointer user_data)
{
    lv_link_req *rq = data;
    lv_state *st = user_data;
    lv_link_answer *a = lv_link_run(&st->link_conn, rq);
    lv_link_req_free(rq);
    g_mutex_lock(&st->lock);
    if (st->link_warned)
        a->stalled_ms = mono_ms() - st->link_asked_ms;
    lv_link_answer_free(st->answer); /* the main loop applies an answer before it posts; only at exit can one be left */
    st->answer = a;
    st->link_busy = st->link_stuck = false;
    st->running--;
    g_cond_broadcast(&st->done);
    g_mutex_unlock(&st->lock);
}

/* ---- the main loop's side of the link ---- */

/* Post a request to the link unless one is running (locked). */
static void link_post(hv_ctx *hv, lv_state *st, bool close)
{
    if (st->link_busy || (st->answer && !close))
        return; /* one at a time, and an answer is applied before the next is asked */
    lv_link_req *rq = g_new0(lv_link_req, 1);
    rq->close = close;
    rq->uri = g_strdup(hv->connect_uri);
    rq->hv = hv;
    rq->known = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    for (size_t i = 0; i < hv->inv->count(hv->inv_ctx); i++) {
        hv_guest *g = hv->inv->at(hv->inv_ctx, i);
        const lv_guest *lg = g->backend_data;
        if (lg)
            g_hash_table_insert(rq->known, g_strdup(g->uuid), g_memdup2(&(guint64){ (guint64)lg->gen << 32 | lg->id },
                                                                       sizeof(guint64)));
    }
    /* the link reads it while the main loop may add to it: a copy */
    rq->reread = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init(&it, st->reread);
    while (g_hash_table_iter_next(&it, &k, &v))
        g_hash_table_insert(rq->reread, g_strdup(k), v);
    st->link_busy = true;
    st->link_stuck = st->link_warned = false;
    st->link_asked_ms = mono_ms();
    st->running++;
    g_thread_pool_push(st->link, rq, NULL);
}

static void attach(hv_ctx *hv, hv_guest *g, lv_found *f, unsigned gen)
{
    lv_state *st = state_of(hv);
    lv_guest *lg = g_new0(lv_guest, 1);
    lg->refs = 1;
    lg->dom = g_steal_pointer(&f->dom);
    lg->gen = gen;
    lg->id = f->id;
    lg->stats_period = hv->stats_period; /* set by its first call: it reaches QEMU */
    lg->free_page_reporting = f->free_page_reporting;
    lg->deflate_on_oom = f->deflate_on_oom;
    lg->has_vmem = f->has_vmem;
    lg->want_vmem = UINT64_MAX;
    lg->job_last = -1; /* asked in the first bulk call (job_next_ms 0) */
    if (f->agent_stream) {
        agent_conn_init(&lg->agent, NULL);
        lg->agent_in = g_byte_array_new();
        lg->agent_stream = g_steal_pointer(&f->agent_stream);
        lg->agent_cb = virStreamEventAddCallback(lg->agent_stream, VIR_STREAM_EVENT_READABLE | VIR_STREAM_EVENT_ERROR |
                                                     VIR_STREAM_EVENT_HANGUP, on_agent_stream, lg, NULL) == 0;
        if (!lg->agent_cb) {
            log_warn("guest %s: its agent's channel through libvirtd cannot be watched: %s", g->name, lv_last_error());
            agent_stream_close(lg);
        }
    } else {
        agent_conn_init(&lg->agent, f->agent_note ? NULL : f->agent_path);
    }
    if (f->agent_note)
        log_info("guest %s: %s", g->name, f->agent_note);
    else if (f->agent_path)
        log_info("guest %s: reading its agent at %s", g->name, f->agent_path);
    g->backend_data = lg;
    g_mutex_lock(&st->lock);
    lv_queue_call(st, lg, CALL_SAMPLE, 0); /* its first sample */
    g_mutex_unlock(&st->lock);
    st->attached++;
}

/* Apply the link's answer, if one came: the inventory follows its domain
 * list.  0 when libvirt's domains are known (now or from the last
 * answer, while a request is still out), -1 when libvirt is unreachable. */
static int link_apply(hv_ctx *hv)
{
    lv_state *st = state_of(hv);
    g_mutex_lock(&st->lock);
    lv_link_answer *a = g_steal_pointer(&st->answer);
    g_mutex_unlock(&st->lock);
    if (!a)
        return st->reachable ? 0 : -1;
    for (guint i = 0; i < a->infos->len; i++)
        log_info("%s", (const char *)g_ptr_array_index(a->infos, i));
    for (guint i = 0; i < a->warnings->len; i++)
        log_warn("%s", (const char *)g_ptr_array_index(a->warnings, i));
    if (a->stalled_ms)
        log_info("libvirtd answers again (after %.1f s)", (double)a->stalled_ms / 1000.0);
    if (a->reconnected)
        hv->reconnects++;
    st->reachable = a->found != NULL;
    if (!a->found) {
        lv_link_answer_free(a);
        return -1;
    }
    hv_mark_unseen(hv);
    for (guint i = 0; i < a->found->len; i++) {
        lv_found *f = g_ptr_array_index(a->found, i);
        hv_guest *g = hv->inv->find(hv->inv_ctx, f->uuid);
        const lv_guest *lg = g ? g->backend_data : NULL;
        if (f->attach || !lg || lg->gen != a->gen) {
            if (!f->attach) { /* cannot happen: the request listed what is attached */
                if (g)
                    g->seen = true;
                continue;
            }
            if (!g)
                g = hv->inv->add(hv->inv_ctx, f->name, f->uuid);
            release(g);
            attach(hv, g, f, a->gen);
        }
        g->seen = true;
        if (f->policy_read) {
            hv->inv->policy_xml(hv->inv_ctx, g, f->policy_xml);
            gpointer seq;
            if (g_hash_table_lookup_extended(st->reread, f->uuid, NULL, &seq) &&
                GPOINTER_TO_UINT(seq) == f->policy_seq)
                g_hash_table_remove(st->reread, f->uuid); /* no change came in after this read */
        }
    }
    hv_drop_unseen(hv);
    /* changes of domains no longer running are not read */
    GHashTableIter it;
    gpointer k;
    g_hash_table_iter_init(&it, st->reread);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        bool listed = false;
        for (guint i = 0; i < a->found->len && !listed; i++)
            listed = strcmp(((lv_found *)g_ptr_array_index(a->found, i))->uuid, k) == 0;
        if (!listed)
            g_hash_table_iter_remove(&it);
    }
    lv_link_answer_free(a);
    return 0;
}

/* Wait until the link and every guest's sample call have returned, or
 * until end (locked). */
static void gather(hv_ctx *hv, lv_state *st, gint64 end, bool samples)
{
    size_t n = hv->inv->count(hv->inv_ctx);
    for (;;) {
        bool waiting = (st->link_busy && !st->link_stuck) || (samples && st->bulk_busy && !st->bulk_stuck);
        for (size_t i = 0; samples && i < n && !waiting; i++) {
            lv_guest *lg = hv->inv->at(hv->inv_ctx, i)->backend_data;
            waiting = lg && lg->busy && !lg->stuck;
        }
        if (!waiting || !g_cond_wait_until(&st->done, &st->lock, end))
            break;
    }
}

/* A link request that missed a gather is stuck; logged once after
 * HV_STUCK_WARN_MS (locked: the message is returned, logged unlocked). */
static bool link_check_stuck(lv_state *st)
{
    if (!st->link_busy)
        return false;
    st->link_stuck = true;
    if (st->link_warned || mono_ms() - st->link_asked_ms < HV_STUCK_WARN_MS)
        return false;
    st->link_warned = true;
    return true;
}

static void warn_link_silent(void)
{
    log_warn("libvirtd has not answered for %d s (stopped or hung?): guests are kept as they were, "
             "not waited for until it answers", HV_STUCK_WARN_MS / 1000);
}

/* After a gather: a guest whose call is still running is stuck (locked). */
static void mark_stuck(hv_ctx *hv)
{
    for (size_t i = 0; i < hv->inv->count(hv->inv_ctx); i++) {
        lv_guest *lg = hv->inv->at(hv->inv_ctx, i)->backend_data;
        if (lg && lg->busy)
            lg->stuck = true;
    }
}

static gboolean resync_idle(gpointer data)
{
    hv_ctx *hv = data;
    lv_state *st = state_of(hv);
    st->resync_source = 0;
    link_apply(hv);
    g_mutex_lock(&st->lock);
    link_post(hv, st, false);
    gather(hv, st, g_get_monotonic_time() + (gint64)HV_GATHER_MS * 1000, false);
    bool late = link_check_stuck(st);
    g_mutex_unlock(&st->lock);
    if (late)
        warn_link_silent();
    link_apply(hv);
    return G_SOURCE_REMOVE;
}

static void schedule_resync(hv_ctx *hv)
{
    lv_state *st = state_of(hv);
    /* coalesce bursts into one resync from the main loop */
    if (!st->resync_source)
        st->resync_source = g_idle_add(resync_idle, hv);
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque)
{
    (void)conn;
    (void)detail;
    log_debug("domain %s: lifecycle event %d", virDomainGetName(dom), event);
    schedule_resync(opaque);
    return 0;
}

static void on_metadata(virConnectPtr conn, virDomainPtr dom, int type, const char *nsuri,
                        void *opaque)
{
    (void)conn;
    hv_ctx *hv = opaque;
    lv_state *st = state_of(hv);
    if (type != VIR_DOMAIN_METADATA_ELEMENT || !nsuri || strcmp(nsuri, VM_POLICY_NS_URI) != 0)
        return;
    char uuid[VIR_UUID_STRING_BUFLEN];
    if (virDomainGetUUIDString(dom, uuid) < 0)
        return;
    /* also for a domain whose first listing is still on its way: its
     * policy may have been read before this change */
    log_info("guest %s: policy metadata changed", virDomainGetName(dom));
    g_hash_table_insert(st->reread, g_strdup(uuid), GUINT_TO_POINTER(++st->meta_seq));
    schedule_resync(hv);
}

/* The guest rebooted (or was reset): counted for the core, which gives it
 * its size back.  On the main loop, as every event callback here. */
static void on_reboot(virConnectPtr conn, virDomainPtr dom, void *opaque)
{
    (void)conn;
    hv_ctx *hv = opaque;
    char uuid[VIR_UUID_STRING_BUFLEN];
    if (virDomainGetUUIDString(dom, uuid) < 0)
        return;
    hv_guest *g = hv->inv->find(hv->inv_ctx, uuid);
    if (g)
        g->resets++;
}

/* This tick's statistics calls (locked).  The bulk call asks the guests
 * with no call of their own running, on the newest connection (one call is
 * one connection's); the others, and all of them while a bulk call is out,
 * are asked one by one.  The guests the bulk call asks (a reference, maybe
 * empty), NULL while one is out. */
static GPtrArray *post_samples(hv_ctx *hv, lv_state *st)
{
    /* a bulk call still out from the last tick is stuck: every guest is
     * asked on its own until it returns */
    if (st->bulk_busy)
        st->bulk_stuck = true;
    size_t n = hv->inv->count(hv->inv_ctx);
    unsigned gen = 0;
    for (size_t i = 0; i < n; i++) {
        const lv_guest *lg = hv->inv->at(hv->inv_ctx, i)->backend_data;
        if (lg)
            gen = MAX(gen, lg->gen);
    }
    GPtrArray *bulk = st->bulk_busy ? NULL : g_ptr_array_new_with_free_func((GDestroyNotify)lv_guest_unref);
    for (size_t i = 0; i < n; i++) {
        lv_guest *lg = hv->inv->at(hv->inv_ctx, i)->backend_data;
        if (!lg)
            continue;
        if (bulk && !lg->busy && lg->gen == gen)
            g_ptr_array_add(bulk, lv_guest_ref(lg));
        else
            lv_queue_call(st, lg, CALL_SAMPLE, 0);
    }
    GPtrArray *asked = bulk ? g_ptr_array_ref(bulk) : NULL;
    if (bulk && bulk->len)
        lv_queue_bulk(st, g_steal_pointer(&bulk));
    g_clear_pointer(&bulk, g_ptr_array_unref);
    return asked;
}

/* A bulk call that is usually quick and is not back by three times its
 * usual time (at most half the gather, from start_us) is in a stopped
 * QEMU, most likely: the guests it asks are asked on their own now, within
 * the tick.  One that is usually slow (many guests) is not: its answer
 * serves the next tick (locked). */
static void bulk_cut(hv_ctx *hv, lv_state *st, const GPtrArray *asked, gint64 start_us)
{
    int64_t usual = st->bulk_took_ms;
    if (!asked || !asked->len || usual < 0 || usual >= HV_GATHER_MS / 2)
        return;
    int64_t cut_ms = MIN(HV_GATHER_MS / 2, MAX(10, 3 * usual));
    gather(hv, st, start_us + cut_ms * 1000, true);
    for (guint j = 0; st->bulk_busy && j < asked->len; j++)
        lv_queue_call(st, g_ptr_array_index(asked, j), CALL_SAMPLE, 0);
}

/* What a gather leaves to log: taken under the lock, logged without it. */
typedef struct {
    bool bulk_late;           /* the bulk call is out for HV_STUCK_WARN_MS now */
    int64_t bulk_back_ms;     /* it returned after a logged stall this long, 0 if not */
    char bulk_failed[sizeof(((lv_state *)0)->bulk_failed)]; /* its error, "" none */
    bool link_late;           /* the link is out for HV_STUCK_WARN_MS now */
    lv_guest **late;          /* the guests stuck for HV_STUCK_WARN_MS now */
    size_t n_late;
} gather_news;

/* Take the news after a gather (locked): each stall is told once. */
static void news_take(hv_ctx *hv, lv_state *st, gather_news *news)
{
    int64_t now = mono_ms();
    news->bulk_late = st->bulk_busy && !st->bulk_warned && now - st->bulk_asked_ms >= HV_STUCK_WARN_MS;
    if (news->bulk_late)
        st->bulk_warned = true;
    news->bulk_back_ms = st->bulk_back_ms;
    st->bulk_back_ms = 0;
    snprintf(news->bulk_failed, sizeof(news->bulk_failed), "%s", st->bulk_failed);
    st->bulk_failed[0] = '\0';
    size_t n = hv->inv->count(hv->inv_ctx);
    news->late = g_new0(lv_guest *, n ? n : 1);
    news->n_late = 0;
    for (size_t i = 0; i < n; i++) {
        lv_guest *lg = hv->inv->at(hv->inv_ctx, i)->backend_data;
        if (!lg || lg->warned)
            continue;
        /* its own call out, or its job held by a call that is (a stuck
         * bulk call in its stopped QEMU) */
        int64_t since = lg->stuck ? lg->asked_ms : lg->jobless_ms;
        if (since && now - since >= HV_STUCK_WARN_MS) {
            lg->warned = true;
            news->late[news->n_late++] = lg;
        }
    }
    news->link_late = link_check_stuck(st);
}

/* Log the news (unlocked), and let them go. */
static void news_log(gather_news *news)
{
    if (news->bulk_late)
        log_warn("libvirt's statistics call for all guests has not returned for %d s (a stopped QEMU?): "
                 "each guest is asked on its own until it does", HV_STUCK_WARN_MS / 1000);
    if (news->bulk_failed[0])
        log_debug("libvirt's statistics call for all guests failed (%s): each was asked on its own",
                  news->bulk_failed);
    if (news->bulk_back_ms)
        log_info("libvirt's statistics call for all guests returned (after %.1f s)",
                 (double)news->bulk_back_ms / 1000.0);
    for (size_t i = 0; i < news->n_late; i++)
        log_warn("domain %s: libvirt has been stuck on its QEMU for %d s (stopped or hung?): not waited for "
                 "until it answers", virDomainGetName(news->late[i]->dom), HV_STUCK_WARN_MS / 1000);
    if (news->link_late)
        warn_link_silent();
    g_clear_pointer(&news->late, g_free);
}

/* The link's request and this tick's statistics calls, then at most
 * HV_GATHER_MS for all of them together; whoever has not returned by
 * then is stuck.  The link's answer (when it came) is applied: a guest new
 * in it is sampled within the same gather. */
static int lv_sync(hv_ctx *hv)
{
    lv_state *st = state_of(hv);
    link_apply(hv); /* an answer that came since the last gather: before it is replaced */
    gather_news news;
    g_mutex_lock(&st->lock);
    link_post(hv, st, false);
    g_autoptr(GPtrArray) asked = post_samples(hv, st);
    gint64 now_us = g_get_monotonic_time();
    gint64 end = now_us + (gint64)HV_GATHER_MS * 1000;
    bulk_cut(hv, st, asked, now_us);
    gather(hv, st, end, true);
    mark_stuck(hv);
    news_take(hv, st, &news);
    hv->stats_calls_all = st->calls_all;
    hv->stats_calls_one = st->calls_one;
    g_mutex_unlock(&st->lock);
    news_log(&news);
    unsigned before = st->attached;
    int rc = link_apply(hv);
    if (st->attached != before) {
        /* guests new in this answer: their first samples within the same
         * gather time, so a first tick (or --once) decides on data */
        g_mutex_lock(&st->lock);
        gather(hv, st, end, true);
        mark_stuck(hv);
        g_mutex_unlock(&st->lock);
    }
    return rc;
}

static void lv_agent_drain(hv_ctx *hv, hv_guest *g, agent_state *st, uint64_t guest_bytes)
{
    (void)hv;
    lv_guest *lg = g->backend_data;
    if (!lg)
        return;
    if (lg->agent_in) { /* through libvirtd */
        if (lg->agent_in->len) {
            agent_conn_feed(&lg->agent, (const char *)lg->agent_in->data, lg->agent_in->len, st, guest_bytes);
            g_byte_array_set_size(lg->agent_in, 0);
        }
        if (lg->agent_end) { /* the stream was closed when it ended */
            log_warn("guest %s: its agent's channel through libvirtd: %s", g->name, lg->agent_end);
            lg->agent_end = NULL;
        }
        return;
    }
    agent_conn_drain(&lg->agent, g->name, st, guest_bytes);
}

/* libvirt's QEMU driver keeps each running domain's pid in its run
 * directory (qemu:///system: /run/libvirt/qemu/NAME.pid). */
static int pid_of(const char *name)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.pid", LIBVIRT_QEMU_RUN_DIR, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int pid = -1;
    if (fscanf(f, "%d", &pid) != 1 || pid <= 0)
        pid = -1;
    fclose(f);
    return pid;
}

/* What the guest's call brought since the core's last sample. */
static int lv_sample(hv_ctx *hv, hv_guest *g, guest_sample *out, GError **error)
{
    lv_state *st = state_of(hv);
    lv_guest *lg = g->backend_data;
    if (!lg) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "not attached");
        return -1;
    }
    char note[256], back_after[32] = "";
    int rc = 0;
    g_mutex_lock(&st->lock);
    snprintf(note, sizeof(note), "%s", lg->note);
    lg->note[0] = '\0';
    if (lg->back) {
        lg->back = false;
        snprintf(back_after, sizeof(back_after), "%.1f", (double)lg->stalled_ms / 1000.0);
    }
    if (lg->have) {
        *out = lg->sample;
        out->free_page_reporting = lg->free_page_reporting;
        out->free_page_reporting_used = -1; /* libvirt does not say what the guest's driver took */
        out->deflate_on_oom = lg->deflate_on_oom;
        out->balloon_failures = lg->set_failures;
        lg->set_failures = 0;
        lg->have = false;
    } else {
        rc = -1;
        if (lg->busy)
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "libvirt has not answered for %.1f s",
                        (double)(mono_ms() - lg->asked_ms) / 1000.0);
        else
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", lg->error[0] ? lg->error : "no sample");
    }
    g_mutex_unlock(&st->lock);
    if (note[0])
        log_warn("guest %s: %s", g->name, note);
    if (back_after[0])
        log_info("guest %s: libvirt answers again (after %s s)", g->name, back_after);
    return rc;
}

/* A balloon target or a virtio-mem requested size: queued, not waited
 * for (behind a slow call of the guest's, if one runs); libvirt's refusal
 * is logged and counted at the next sample.  A stuck guest is given
 * nothing more. */
static int queue_set(hv_ctx *hv, hv_guest *g, lv_call_kind kind, uint64_t bytes, GError **error)
{
    lv_state *st = state_of(hv);
    lv_guest *lg = g->backend_data;
    if (!lg) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "not attached");
        return -1;
    }
    g_mutex_lock(&st->lock);
    bool stuck = lg->stuck;
    if (!stuck && !lv_queue_call(st, lg, kind, bytes)) {
        /* a slow call runs: set right after it */
        if (kind == CALL_VMEM)
            lg->want_vmem = bytes;
        else
            lg->want_bytes = bytes;
    }
    g_mutex_unlock(&st->lock);
    if (stuck) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "its last libvirt call has not returned");
        return -1;
    }
    return 0;
}

static int lv_set_target(hv_ctx *hv, hv_guest *g, uint64_t bytes, GError **error)
{
    return queue_set(hv, g, CALL_BALLOON, bytes, error);
}

static int lv_set_vmem(hv_ctx *hv, hv_guest *g, uint64_t bytes, GError **error)
{
    return queue_set(hv, g, CALL_VMEM, bytes, error);
}

/* Read once a domain's run (a restarted domain is attached anew): a pid
 * file read a guest a tick was four system calls. */
static int lv_qemu_pid(hv_ctx *hv, hv_guest *g)
{
    (void)hv;
    lv_guest *lg = g->backend_data;
    if (!lg)
        return pid_of(g->name);
    if (lg->pid <= 0)
        lg->pid = pid_of(g->name);
    return lg->pid;
}

static void lv_guest_release(hv_ctx *hv, hv_guest *g)
{
    (void)hv;
    release(g);
}

static void lv_shutdown(hv_ctx *hv)
{
    lv_state *st = hv->priv;
    if (!st)
        return;
    if (st->resync_source)
        g_source_remove(st->resync_source);
    /* The link closes the connection; calls still running (a stuck QEMU
     * or libvirtd) are waited for a moment, not for ever: then their
     * state is left to the exiting process. */
    gint64 end = g_get_monotonic_time() + (gint64)EXIT_WAIT_MS * 1000;
    bool closing = false;
    g_mutex_lock(&st->lock);
    for (;;) {
        if (!closing && !st->link_busy) {
            link_post(hv, st, true);
            closing = true;
        }
        if (!st->running || !g_cond_wait_until(&st->done, &st->lock, end))
            break;
    }
    unsigned running = st->running;
    g_mutex_unlock(&st->lock);
    hv->priv = NULL;
    if (running) {
        log_warn("libvirt: %u call(s) still running at exit (a stuck QEMU or libvirtd): not waited for", running);
        g_thread_pool_free(st->pool, TRUE, FALSE);
        g_thread_pool_free(st->link, TRUE, FALSE);
        return; /* st and the connection stay: the stuck calls still use them */
    }
    g_thread_pool_free(st->pool, FALSE, TRUE);
    g_thread_pool_free(st->link, FALSE, TRUE);
    lv_link_answer_free(st->answer);
    g_hash_table_unref(st->reread);
    g_mutex_clear(&st->lock);
    g_cond_clear(&st->done);
    g_free(st);
}

const backend_ops backend_libvirt = {
    .name = "libvirt",
    .sync = lv_sync,
    .sample = lv_sample,
    .agent_drain = lv_agent_drain,
    .set_target = lv_set_target,
    .set_vmem = lv_set_vmem,
    .qemu_pid = lv_qemu_pid,
    .guest_release = lv_guest_release,
    .shutdown = lv_shutdown,
};

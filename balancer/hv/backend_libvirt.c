/*
 * libvirt backend: guests are the running domains of one libvirt
 * connection.  Lifecycle events trigger an immediate resync, metadata
 * change events re-read the guest's policy; each tick also resyncs, so a
 * missed event costs at most one tick.  If libvirtd goes away, we
 * reconnect with backoff and keep the guests we knew until then.
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <libxml/parser.h>
#include <libxml/xpath.h>

#include "agent/agent_conn.h"
#include "hv/backend.h"
#include "policies/vm_policy.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mono_clock.h"

#define LIBVIRT_QEMU_RUN_DIR "/run/libvirt/qemu"

typedef struct {
    virConnectPtr conn;
    bool closed;            /* libvirt told us the connection died */
    int cb_lifecycle, cb_metadata;
    int64_t next_attempt;   /* monotonic s */
    unsigned backoff;
    guint resync_source;
} lv_state;

/* What balancerd attaches to a libvirt guest. */
typedef struct {
    virDomainPtr dom;
    agent_conn agent;
} lv_guest;

static const char *last_error(void)
{
    const char *m = virGetLastErrorMessage();
    return m ? m : "unknown libvirt error";
}

/* libvirt prints every error to stderr unless told otherwise; we log the
 * ones that matter ourselves. */
static void quiet_errors(void *opaque, virErrorPtr e)
{
    (void)opaque;
    (void)e;
}

static lv_state *state_of(hv_ctx *hv)
{
    if (!hv->priv)
        hv->priv = g_new0(lv_state, 1);
    return hv->priv;
}

static virDomainPtr dom_of(const hv_guest *g)
{
    const lv_guest *lg = g->backend_data;
    return lg ? lg->dom : NULL;
}

static void release(hv_guest *g)
{
    lv_guest *lg = g->backend_data;
    if (!lg)
        return;
    virDomainFree(lg->dom);
    agent_conn_clear(&lg->agent);
    g_free(lg);
    g->backend_data = NULL;
}

static void read_policy(hv_ctx *hv, hv_guest *g)
{
    virDomainPtr dom = dom_of(g);
    char *xml = virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, VM_POLICY_NS_URI,
                                     VIR_DOMAIN_AFFECT_LIVE);
    if (!xml && virGetLastErrorCode() != VIR_ERR_NO_DOMAIN_METADATA) {
        log_warn("guest %s: cannot read policy metadata: %s", g->name, last_error());
        return;
    }
    hv->inv->policy_xml(hv->inv_ctx, g, xml);
    free(xml); /* libvirt's allocation */
}


/* The unix socket of <channel type='unix'> whose target is our agent
 * port, from the live domain XML; NULL if the guest has none. */
static char *agent_channel_path(virDomainPtr dom)
{
    char *xml = virDomainGetXMLDesc(dom, 0);
    if (!xml)
        return NULL;
    char *path = NULL;
    xmlDocPtr doc = xmlReadMemory(xml, (int)strlen(xml), "domain.xml", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    xmlXPathContextPtr ctx = doc ? xmlXPathNewContext(doc) : NULL;
    xmlXPathObjectPtr res = ctx ? xmlXPathEvalExpression(
        (const xmlChar *)"/domain/devices/channel[@type='unix'][target/@name='org.membal.agent.0']/source/@path",
        ctx) : NULL;
    if (res && res->nodesetval && res->nodesetval->nodeNr > 0) {
        xmlChar *v = xmlNodeGetContent(res->nodesetval->nodeTab[0]);
        path = v ? g_strdup((const char *)v) : NULL;
        xmlFree(v);
    }
    xmlXPathFreeObject(res);
    xmlXPathFreeContext(ctx);
    xmlFreeDoc(doc);
    free(xml);
    return path;
}

static void track_domain(hv_ctx *hv, virDomainPtr dom)
{
    char uuid[VIR_UUID_STRING_BUFLEN];
    if (virDomainGetUUIDString(dom, uuid) < 0)
        return;
    hv_guest *g = hv->inv->find(hv->inv_ctx, uuid);
    if (g) {
        g->seen = true;
        return;
    }
    const char *name = virDomainGetName(dom);
    g = hv->inv->add(hv->inv_ctx, name ? name : uuid, uuid);
    virDomainRef(dom);
    lv_guest *lg = g_new0(lv_guest, 1);
    lg->dom = dom;
    char *agent = agent_channel_path(dom);
    agent_conn_init(&lg->agent, agent);
    if (agent)
        log_info("guest %s: reading its agent at %s", g->name, agent);
    g_free(agent);
    g->backend_data = lg;
    if (virDomainSetMemoryStatsPeriod(dom, (int)hv->stats_period, VIR_DOMAIN_AFFECT_LIVE) < 0)
        log_warn("guest %s: cannot enable balloon stats (period %u s): %s", g->name, hv->stats_period,
                 last_error());
    read_policy(hv, g);
}

static int resync(hv_ctx *hv)
{
    lv_state *st = state_of(hv);
    virDomainPtr *doms = NULL;
    int n = virConnectListAllDomains(st->conn, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
    if (n < 0) {
        log_warn("listing domains: %s", last_error());
        return -1;
    }
    hv_mark_unseen(hv);
    for (int i = 0; i < n; i++) {
        track_domain(hv, doms[i]);
        virDomainFree(doms[i]);
    }
    free(doms);
    hv_drop_unseen(hv);
    return 0;
}

static gboolean resync_idle(gpointer data)
{
    hv_ctx *hv = data;
    lv_state *st = state_of(hv);
    st->resync_source = 0;
    if (st->conn && !st->closed)
        resync(hv);
    return G_SOURCE_REMOVE;
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque)
{
    (void)conn;
    (void)detail;
    hv_ctx *hv = opaque;
    lv_state *st = state_of(hv);
    log_debug("domain %s: lifecycle event %d", virDomainGetName(dom), event);
    /* coalesce bursts into one resync from the main loop */
    if (!st->resync_source)
        st->resync_source = g_idle_add(resync_idle, hv);
    return 0;
}

static void on_metadata(virConnectPtr conn, virDomainPtr dom, int type, const char *nsuri,
                        void *opaque)
{
    (void)conn;
    hv_ctx *hv = opaque;
    if (type != VIR_DOMAIN_METADATA_ELEMENT || !nsuri || strcmp(nsuri, VM_POLICY_NS_URI) != 0)
        return;
    char uuid[VIR_UUID_STRING_BUFLEN];
    if (virDomainGetUUIDString(dom, uuid) < 0)
        return;
    hv_guest *g = hv->inv->find(hv->inv_ctx, uuid);
    if (g) {
        log_info("guest %s: policy metadata changed", g->name);
        read_policy(hv, g);
    }
}

static void on_close(virConnectPtr conn, int reason, void *opaque)
{
    (void)conn;
    lv_state *st = state_of(opaque);
    st->closed = true;
    log_warn("libvirt connection closed (reason %d); will reconnect", reason);
}

static void disconnect(hv_ctx *hv)
{
    lv_state *st = state_of(hv);
    if (!st->conn)
        return;
    if (st->cb_lifecycle >= 0)
        virConnectDomainEventDeregisterAny(st->conn, st->cb_lifecycle);
    if (st->cb_metadata >= 0)
        virConnectDomainEventDeregisterAny(st->conn, st->cb_metadata);
    virConnectUnregisterCloseCallback(st->conn, on_close);
    /* domain handles keep a reference on the connection: drop them so the
     * guests re-attach to the new connection */
    for (size_t i = 0; i < hv->inv->count(hv->inv_ctx); i++)
        release(hv->inv->at(hv->inv_ctx, i));
    virConnectClose(st->conn);
    st->conn = NULL;
}

static int connect_libvirt(hv_ctx *hv)
{
    lv_state *st = state_of(hv);
    if (st->conn && !st->closed)
        return 0;
    if (st->conn) {
        disconnect(hv);
        hv->reconnects++;
    }
    if (mono_s() < st->next_attempt)
        return -1;
    virSetErrorFunc(NULL, quiet_errors);
    st->conn = virConnectOpen(hv->connect_uri);
    if (!st->conn) {
        st->backoff = st->backoff ? (st->backoff * 2 > 60 ? 60 : st->backoff * 2) : 1;
        st->next_attempt = mono_s() + st->backoff;
        log_warn("cannot connect to %s: %s (retrying in %u s)", hv->connect_uri, last_error(),
                 st->backoff);
        return -1;
    }
    st->closed = false;
    st->backoff = 0;
    /* guests kept from the old connection have no domain handle: forget
     * them and let the resync re-add (and re-read their policy) */
    for (size_t i = hv->inv->count(hv->inv_ctx); i-- > 0;) {
        hv_guest *g = hv->inv->at(hv->inv_ctx, i);
        if (!g->backend_data)
            hv->inv->remove(hv->inv_ctx, g);
    }
    if (virConnectSetKeepAlive(st->conn, 5, 3) < 0)
        log_debug("keepalive not available: %s", last_error());
    virConnectRegisterCloseCallback(st->conn, on_close, hv, NULL);
    st->cb_lifecycle = virConnectDomainEventRegisterAny(
        st->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE, VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), hv, NULL);
    st->cb_metadata = virConnectDomainEventRegisterAny(
        st->conn, NULL, VIR_DOMAIN_EVENT_ID_METADATA_CHANGE, VIR_DOMAIN_EVENT_CALLBACK(on_metadata), hv,
        NULL);
    if (st->cb_lifecycle < 0 || st->cb_metadata < 0)
        log_warn("cannot register for domain events (%s): changes are picked up each tick",
                 last_error());
    log_info("connected to %s", hv->connect_uri);
    return 0;
}

static int lv_sync(hv_ctx *hv)
{
    if (connect_libvirt(hv) < 0)
        return -1;
    int rc = resync(hv);
    lv_state *st = state_of(hv);
    if (rc < 0 && virConnectIsAlive(st->conn) != 1) {
        /* dead without a close event (e.g. keepalive not yet expired):
         * reconnect next tick instead of failing forever */
        st->closed = true;
    }
    return rc;
}

/* Bytes read so far by all of the domain's disks; -1 if unknown. */
static int64_t disk_read_bytes(virDomainPtr dom)
{
    virDomainPtr doms[2] = { dom, NULL };
    virDomainStatsRecordPtr *recs = NULL;
    int64_t sum = -1;
    if (virDomainListGetStats(doms, VIR_DOMAIN_STATS_BLOCK, &recs, 0) == 1) {
        sum = 0;
        for (int i = 0; i < recs[0]->nparams; i++) {
            virTypedParameterPtr p = &recs[0]->params[i];
            unsigned idx;
            char tail[16];
            if (p->type == VIR_TYPED_PARAM_ULLONG &&
                sscanf(p->field, "block.%u.rd.byte%15s", &idx, tail) == 2 && strcmp(tail, "s") == 0 &&
                p->value.ul <= (unsigned long long)(INT64_MAX - sum))
                sum += (int64_t)p->value.ul;
        }
    }
    virDomainStatsRecordListFree(recs);
    return sum;
}

/* How long libvirt has been running a job on the domain (migration,
 * save, dump, snapshot), -1 when none.  Without a job libvirt answers from
 * its own state; with one it asks QEMU under a query job, which a running
 * migration allows.  An incoming migration has no statistics here (libvirt:
 * "migration statistics are available only on the source host"), which
 * says as much. */
static int64_t job_ms(virDomainPtr dom)
{
    virDomainJobInfo ji;
    if (virDomainGetJobInfo(dom, &ji) < 0)
        return virGetLastErrorCode() == VIR_ERR_OPERATION_UNSUPPORTED ? 0 : -1;
    if (ji.type == VIR_DOMAIN_JOB_NONE || ji.type == VIR_DOMAIN_JOB_COMPLETED ||
        ji.type == VIR_DOMAIN_JOB_FAILED || ji.type == VIR_DOMAIN_JOB_CANCELLED)
        return -1;
    return ji.timeElapsed > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)ji.timeElapsed;
}

static void lv_agent_drain(hv_ctx *hv, hv_guest *g, agent_state *st, uint64_t guest_bytes)
{
    (void)hv;
    lv_guest *lg = g->backend_data;
    if (lg)
        agent_conn_drain(&lg->agent, st, guest_bytes);
}

static int lv_sample(hv_ctx *hv, hv_guest *g, guest_sample *out, GError **error)
{
    (void)hv;
    virDomainPtr dom = dom_of(g);
    virDomainInfo info;
    if (!dom || virDomainGetInfo(dom, &info) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", dom ? last_error() : "not attached");
        return -1;
    }
    virDomainMemoryStatStruct st[VIR_DOMAIN_MEMORY_STAT_NR];
    int n = virDomainMemoryStats(dom, st, VIR_DOMAIN_MEMORY_STAT_NR, 0);
    if (n < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", last_error());
        return -1;
    }
    memset(out, 0xff, sizeof(*out)); /* every field -1: not reported */
    out->max_bytes = (int64_t)info.maxMem * 1024;
    out->actual_bytes = (int64_t)info.memory * 1024;
    out->last_update = 0;
    for (int i = 0; i < n; i++) {
        /* libvirt reports sizes in KiB; guest-provided values can be
         * anything: keep them within int64 and let guest_ingest clamp */
        unsigned long long v = st[i].val;
        int64_t kib = v > (unsigned long long)INT64_MAX / 1024 ? INT64_MAX / 1024 : (int64_t)v;
        int64_t cnt = v > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)v;
        switch (st[i].tag) {
        case VIR_DOMAIN_MEMORY_STAT_SWAP_IN: out->swap_in_bytes = kib * 1024; break;
        case VIR_DOMAIN_MEMORY_STAT_SWAP_OUT: out->swap_out_bytes = kib * 1024; break;
        case VIR_DOMAIN_MEMORY_STAT_MAJOR_FAULT: out->major_faults = cnt; break;
        case VIR_DOMAIN_MEMORY_STAT_MINOR_FAULT: out->minor_faults = cnt; break;
        case VIR_DOMAIN_MEMORY_STAT_UNUSED: out->free_bytes = kib * 1024; break;
        case VIR_DOMAIN_MEMORY_STAT_AVAILABLE: out->total_bytes = kib * 1024; break;
        case VIR_DOMAIN_MEMORY_STAT_USABLE: out->available_bytes = kib * 1024; break;
        case VIR_DOMAIN_MEMORY_STAT_DISK_CACHES: out->cache_bytes = kib * 1024; break;
        case VIR_DOMAIN_MEMORY_STAT_ACTUAL_BALLOON: out->actual_bytes = kib * 1024; break;
        case VIR_DOMAIN_MEMORY_STAT_RSS: out->rss_bytes = kib * 1024; break;
        case VIR_DOMAIN_MEMORY_STAT_LAST_UPDATE: out->last_update = cnt; break;
        default: break;
        }
    }
    out->disk_read_bytes = disk_read_bytes(dom);
    out->job_ms = job_ms(dom);
    return 0;
}

static int lv_set_target(hv_ctx *hv, hv_guest *g, uint64_t bytes, GError **error)
{
    (void)hv;
    virDomainPtr dom = dom_of(g);
    if (!dom) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "not attached");
        return -1;
    }
    if (virDomainSetMemoryFlags(dom, (unsigned long)(bytes / 1024), VIR_DOMAIN_AFFECT_LIVE) < 0) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s", last_error());
        return -1;
    }
    return 0;
}

/* libvirt's QEMU driver keeps each running domain's pid in its run
 * directory (qemu:///system: /run/libvirt/qemu/NAME.pid). */
static int lv_qemu_pid(hv_ctx *hv, hv_guest *g)
{
    (void)hv;
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.pid", LIBVIRT_QEMU_RUN_DIR, g->name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int pid = -1;
    if (fscanf(f, "%d", &pid) != 1 || pid <= 0)
        pid = -1;
    fclose(f);
    return pid;
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
    disconnect(hv);
    g_free(st);
    hv->priv = NULL;
}

const backend_ops backend_libvirt = {
    .name = "libvirt",
    .sync = lv_sync,
    .sample = lv_sample,
    .agent_drain = lv_agent_drain,
    .set_target = lv_set_target,
    .qemu_pid = lv_qemu_pid,
    .guest_release = lv_guest_release,
    .shutdown = lv_shutdown,
};

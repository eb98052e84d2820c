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
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <libxml/parser.h>
#include <libxml/xpath.h>

#include "agent/agent_conn.h"
#include "config/size_parse.h"
#include "hv/backend.h"
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
#define RETRY_MAX_S 60        /* reconnect backoff: 1, 2, 4 ... s up to this */
#define JOB_RECHECK_MS 5000   /* a guest's job asked at least this often (every tick while one runs) */

/* One running domain as the link found it. */
typedef struct {
    char uuid[VIR_UUID_STRING_BUFLEN];
    char *name;
    virDomainPtr dom;         /* a reference: the main loop takes it or frees it */
    unsigned id;              /* libvirt's domain id: a new one is a restarted domain */
    bool attach;              /* new on this connection, or restarted: the domain XML read */
    char *agent_path;         /* NULL: no agent channel */
    virStreamPtr agent_stream; /* its channel opened through libvirtd, when its socket is out of reach */
    char *agent_note;         /* how its agent is reached, or why it is not: logged once */
    int free_page_reporting;  /* <memballoon freePageReporting='on'>: 1, 0, -1 unknown */
    int deflate_on_oom;       /* <memballoon autodeflate='on'>: 1, 0, -1 unknown */
    bool has_vmem;            /* it has a <memory model='virtio-mem'> device */
    bool policy_read;         /* policy_xml is the domain's (NULL: it has none) */
    char *policy_xml;
    unsigned policy_seq;      /* the metadata change it answers (0: none asked) */
} lv_found;

/* What the main loop asks of the link. */
typedef struct {
    bool close;               /* at exit: disconnect, nothing else */
    char *uri;
    hv_ctx *hv;               /* for the event callbacks only (they run on the main loop) */
    GHashTable *known;        /* uuid -> (connection generation << 32 | domain id) it is attached as */
    GHashTable *reread;       /* uuid -> metadata change seq: read its policy again */
} lv_link_req;

/* The link's answer. */
typedef struct {
    unsigned gen;             /* the connection it came over */
    bool reconnected;         /* a new connection after an earlier one */
    GPtrArray *found;         /* lv_found*; NULL: no domain list (not connected, or it failed) */
    GPtrArray *warnings;      /* messages to log, from a thread that does not log */
    GPtrArray *infos;
    int64_t stalled_ms;       /* it answered after a logged stall this long, 0 if not */
} lv_link_answer;

typedef struct {
    /* the link thread's alone */
    virConnectPtr conn;
    unsigned gen;             /* bumped at each new connection */
    bool ever_connected;
    int cb_lifecycle, cb_metadata, cb_reboot;
    int64_t next_attempt;     /* monotonic s */
    unsigned backoff;
    gint closed;              /* atomic: libvirt told us the connection died */

    /* the main loop's alone */
    guint resync_source;
    GHashTable *reread;       /* uuid -> seq of its latest metadata change */
    unsigned meta_seq;
    bool reachable;           /* the latest answer had a domain list */
    unsigned attached;        /* guests attached so far (their first sample is queued then) */

    GThreadPool *pool;        /* lv_call*, run by lv_work */
    GThreadPool *link;        /* lv_link_req*, run by lv_link_work, 1 thread */
    GMutex lock;              /* guards the fields marked (locked) */
    GCond done;               /* a call or link request returned */
    unsigned running;         /* calls and link requests queued or running (locked) */
    bool link_busy;           /* (locked) */
    bool link_stuck, link_warned; /* (locked) */
    int64_t link_asked_ms;    /* (locked) */
    bool bulk_busy;           /* the guests' statistics call runs (locked) */
    bool bulk_stuck;          /* it was still out at a tick's start (locked) */
    bool bulk_warned;         /* ... for HV_STUCK_WARN_MS, and that was logged (locked) */
    int64_t bulk_asked_ms;    /* (locked) */
    int64_t bulk_took_ms;     /* how long a bulk call takes (moving average, stalls left out), -1 unknown (locked) */
    int64_t bulk_back_ms;     /* it returned after a logged stall this long, not yet logged (locked) */
    char bulk_failed[256];    /* libvirt's error when it failed, not yet logged (locked) */
    uint64_t calls_all, calls_one; /* statistics calls queued: bulk, one guest (locked) */
    lv_link_answer *answer;   /* not yet applied (locked) */
} lv_state;

/* What balancerd attaches to a libvirt guest; shared with the call that
 * runs for it, hence counted. */
typedef struct {
    gint refs;
    virDomainPtr dom;
    unsigned gen;             /* the connection dom belongs to */
    unsigned id;              /* libvirt's domain id when attached */
    int pid;                  /* its QEMU's, from its pid file once read (main loop only), 0 not yet */
    int64_t job_next_ms;      /* when the bulk call asks its job again, 0 at once (the bulk call's alone) */
    int64_t job_last;         /* what it said (guest_sample.job_ms) */
    agent_conn agent;       /* main loop only */
    virStreamPtr agent_stream; /* its agent's channel through libvirtd, NULL: the socket (main loop only) */
    GByteArray *agent_in;   /* what the stream brought since the last drain, at most AGENT_DRAIN_MAX */
    const char *agent_end;  /* why the stream ended (a static string), NULL: it runs (main loop only) */
    bool agent_cb;          /* its stream's event callback is registered (main loop only) */
    int free_page_reporting; /* from the domain XML when attached: 1, 0, -1 unknown */
    int deflate_on_oom;      /* ... and its autodeflate, the same */
    bool has_vmem;           /* ... and whether it has a virtio-mem device (then read with every sample) */
    unsigned stats_period;  /* to set on the first call */
    bool period_set;        /* worker only */
    bool busy;              /* a call runs for it (locked) */
    bool stuck;             /* its call missed a gather (locked) */
    bool warned;            /* its stuck call was logged (locked) */
    bool back;              /* returned after a logged stall, not yet logged (locked) */
    int64_t jobless_ms;     /* since when libvirt could not get its job to ask its QEMU, 0 not (locked) */
    int64_t stalled_ms;     /* how long that stall lasted (locked) */
    uint64_t want_bytes;    /* a balloon target to set after the running call, 0 none (locked) */
    uint64_t want_vmem;     /* a virtio-mem requested size to set after it, UINT64_MAX none (locked) */
    unsigned set_failures;  /* balloon changes libvirt refused since the last sample (locked) */
    int64_t asked_ms;       /* when its call was queued (locked) */
    bool have;              /* a sample came in since the core took one (locked) */
    guest_sample sample;    /* (locked) */
    char error[256];        /* the last sample call's error, "" none (locked) */
    char note[256];         /* something the worker wants logged, "" none (locked) */
} lv_guest;

typedef enum { CALL_SAMPLE, CALL_BALLOON, CALL_VMEM, CALL_BULK } call_kind;

typedef struct {
    lv_guest *lg;           /* a reference; NULL for CALL_BULK */
    call_kind kind;
    uint64_t bytes;         /* CALL_BALLOON, CALL_VMEM */
    GPtrArray *guests;      /* CALL_BULK: lv_guest references */
} lv_call;

static lv_guest *lg_ref(lv_guest *lg)
{
    g_atomic_int_inc(&lg->refs);
    return lg;
}

static void lg_unref(lv_guest *lg)
{
    if (!g_atomic_int_dec_and_test(&lg->refs))
        return;
    virDomainFree(lg->dom);
    g_free(lg);
}

static const char *last_error(void)
{
    const char *m = virGetLastErrorMessage(); /* thread-local */
    return m ? m : "unknown libvirt error";
}

/* libvirt prints every error to stderr unless told otherwise; we log the
 * ones that matter ourselves. */
static void quiet_errors(void *opaque, virErrorPtr e)
{
    (void)opaque;
    (void)e;
}

static void lv_work(gpointer data, gpointer user_data);
static void lv_link_work(gpointer data, gpointer user_data);

static lv_state *state_of(hv_ctx *hv)
{
    if (!hv->priv) {
        lv_state *st = g_new0(lv_state, 1);
        g_mutex_init(&st->lock);
        g_cond_init(&st->done);
        st->cb_lifecycle = st->cb_metadata = st->cb_reboot = -1;
        st->bulk_took_ms = -1;
        st->reread = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        st->pool = g_thread_pool_new(lv_work, st, WORKERS, FALSE, NULL);
        st->link = g_thread_pool_new(lv_link_work, st, 1, FALSE, NULL);
        virSetErrorFunc(NULL, quiet_errors);
        hv->priv = st;
    }
    return hv->priv;
}

static void found_free(gpointer p)
{
    lv_found *f = p;
    if (f->dom)
        virDomainFree(f->dom);
    g_free(f->name);
    g_free(f->agent_path);
    if (f->agent_stream)
        virStreamFree(f->agent_stream);
    g_free(f->agent_note);
    free(f->policy_xml); /* libvirt's allocation */
    g_free(f);
}

static void answer_free(lv_link_answer *a)
{
    if (!a)
        return;
    if (a->found)
        g_ptr_array_free(a->found, TRUE);
    g_ptr_array_free(a->warnings, TRUE);
    g_ptr_array_free(a->infos, TRUE);
    g_free(a);
}

static void req_free(lv_link_req *rq)
{
    g_free(rq->uri);
    if (rq->known)
        g_hash_table_unref(rq->known);
    if (rq->reread)
        g_hash_table_unref(rq->reread);
    g_free(rq);
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

#define AGENT_PORT "org.membal.agent.0"

/* On the link: the agent's socket when this process may open it, else its
 * channel through libvirtd; f->agent_note says which, or why neither. */
static void agent_channel_open(virConnectPtr conn, lv_found *f)
{
    if (access(f->agent_path, R_OK | W_OK) == 0)
        return; /* agent_conn connects to it on the main loop */
    int err = errno;
    virStreamPtr s = virStreamNew(conn, VIR_STREAM_NONBLOCK);
    if (s && virDomainOpenChannel(f->dom, AGENT_PORT, s, VIR_DOMAIN_CHANNEL_FORCE) == 0) {
        f->agent_stream = s;
        f->agent_note = g_strdup_printf("reading its agent through libvirt's channel API (its socket %s: %s)",
                                        f->agent_path, g_strerror(err));
        return;
    }
    f->agent_note = g_strdup_printf("cannot reach its agent: its socket %s: %s; libvirt's channel API: %s",
                                    f->agent_path, g_strerror(err), last_error());
    if (s)
        virStreamFree(s);
}

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
    lg_unref(lg); /* a call still running keeps it until it returns */
}

/* ---- the link thread ---- */

/* The string an XPath expression finds first in doc; NULL if none. */
static char *xpath_string(xmlXPathContextPtr ctx, const char *expr)
{
    char *out = NULL;
    xmlXPathObjectPtr res = ctx ? xmlXPathEvalExpression((const xmlChar *)expr, ctx) : NULL;
    if (res && res->nodesetval && res->nodesetval->nodeNr > 0) {
        xmlChar *v = xmlNodeGetContent(res->nodesetval->nodeTab[0]);
        out = v ? g_strdup((const char *)v) : NULL;
        xmlFree(v);
    }
    xmlXPathFreeObject(res);
    return out;
}

/* From the live domain XML: the unix socket of <channel type='unix'>
 * whose target is our agent port (NULL if the guest has none), whether
 * its virtio balloon has free page reporting and autodeflate
 * (deflate-on-oom) on (-1 when the XML cannot be read), and whether it
 * has a virtio-mem device. */
static void domain_xml_facts(virDomainPtr dom, char **agent_path, int *free_page_reporting, int *deflate_on_oom,
                             bool *has_vmem)
{
    *agent_path = NULL;
    *free_page_reporting = *deflate_on_oom = -1;
    *has_vmem = false;
    char *xml = virDomainGetXMLDesc(dom, 0);
    if (!xml)
        return;
    xmlDocPtr doc = xmlReadMemory(xml, (int)strlen(xml), "domain.xml", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    xmlXPathContextPtr ctx = doc ? xmlXPathNewContext(doc) : NULL;
    if (ctx) {
        *agent_path = xpath_string(
            ctx, "/domain/devices/channel[@type='unix'][target/@name='org.membal.agent.0']/source/@path");
        g_autofree char *fpr = xpath_string(ctx, "/domain/devices/memballoon[starts-with(@model, 'virtio')]/@freePageReporting");
        *free_page_reporting = fpr && strcmp(fpr, "on") == 0;
        g_autofree char *doo = xpath_string(ctx, "/domain/devices/memballoon[starts-with(@model, 'virtio')]/@autodeflate");
        *deflate_on_oom = doo && strcmp(doo, "on") == 0;
        g_autofree char *vmem = xpath_string(ctx, "/domain/devices/memory[@model='virtio-mem']/@model");
        *has_vmem = vmem != NULL;
    }
    xmlXPathFreeContext(ctx);
    xmlFreeDoc(doc);
    free(xml);
}

/* ---- virtio-mem, from and to the live domain XML ---- */

/* A child element of a <memory> device's <target> (size, block,
 * requested, current), NULL when absent. */
static xmlNodePtr target_child(xmlNodePtr dev, const char *name)
{
    for (xmlNodePtr t = dev->children; t; t = t->next)
        if (t->type == XML_ELEMENT_NODE && !xmlStrcmp(t->name, (const xmlChar *)"target"))
            for (xmlNodePtr c = t->children; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE && !xmlStrcmp(c->name, (const xmlChar *)name))
                    return c;
    return NULL;
}

/* Its value in bytes, read as libvirt reads sizes (its unit, KiB when
 * none is given); 0 when absent or unreadable. */
static uint64_t target_bytes(xmlNodePtr dev, const char *name)
{
    xmlNodePtr c = target_child(dev, name);
    if (!c)
        return 0;
    xmlChar *v = xmlNodeGetContent(c), *unit = xmlGetProp(c, (const xmlChar *)"unit");
    g_autofree char *text = g_strdup_printf("%s%s", v ? (const char *)v : "", unit ? (const char *)unit : "KiB");
    xmlFree(v);
    xmlFree(unit);
    uint64_t bytes;
    return size_parse(text, &bytes) == 0 ? bytes : 0;
}

/* The live domain XML and its virtio-mem devices (a worker thread); NULL
 * when it cannot be read.  The caller frees both. */
static xmlDocPtr vmem_devices(virDomainPtr dom, xmlXPathObjectPtr *devs)
{
    *devs = NULL;
    char *xml = virDomainGetXMLDesc(dom, 0);
    if (!xml)
        return NULL;
    xmlDocPtr doc = xmlReadMemory(xml, (int)strlen(xml), "domain.xml", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    free(xml);
    xmlXPathContextPtr ctx = doc ? xmlXPathNewContext(doc) : NULL;
    if (ctx)
        *devs = xmlXPathEvalExpression((const xmlChar *)"/domain/devices/memory[@model='virtio-mem']", ctx);
    xmlXPathFreeContext(ctx);
    if (!*devs || !(*devs)->nodesetval) {
        xmlXPathFreeObject(*devs);
        *devs = NULL;
        xmlFreeDoc(doc);
        return NULL;
    }
    return doc;
}

/* A sample's virtio-mem part (a worker thread).  libvirt counts its
 * devices in the balloon's figures (balloon.maximum: their maximum,
 * balloon.current: what they plugged); the core wants the balloon's own,
 * within the boot memory, as QMP gives it: they are taken out again. */
static void vmem_sample_read(virDomainPtr dom, guest_sample *s)
{
    xmlXPathObjectPtr devs;
    xmlDocPtr doc = vmem_devices(dom, &devs);
    if (!doc)
        return;
    uint64_t max_all = 0, plugged_all = 0;
    xmlNodeSetPtr set = devs->nodesetval;
    for (int i = 0; i < set->nodeNr; i++) {
        xmlNodePtr dev = set->nodeTab[i];
        uint64_t max = target_bytes(dev, "size"), plugged = target_bytes(dev, "current");
        max_all += max;
        plugged_all += plugged;
        if (i)
            continue;
        s->vmem = (vmem_sample){ .devices = (unsigned)set->nodeNr, .block_bytes = target_bytes(dev, "block"),
                                 .max_bytes = max, .requested_bytes = target_bytes(dev, "requested"),
                                 .plugged_bytes = plugged };
        for (xmlNodePtr c = dev->children; c; c = c->next)
            if (c->type == XML_ELEMENT_NODE && !xmlStrcmp(c->name, (const xmlChar *)"alias")) {
                xmlChar *alias = xmlGetProp(c, (const xmlChar *)"name");
                snprintf(s->vmem.id, sizeof(s->vmem.id), "%s", alias ? (const char *)alias : "");
                xmlFree(alias);
            }
        if (!s->vmem.block_bytes || plugged > max || s->vmem.requested_bytes > max)
            s->vmem = (vmem_sample){ .devices = (unsigned)set->nodeNr }; /* not believed: not resized */
    }
    if (s->max_bytes > 0 && (uint64_t)s->max_bytes > max_all)
        s->max_bytes -= (int64_t)max_all;
    if (s->actual_bytes > 0 && (uint64_t)s->actual_bytes > plugged_all)
        s->actual_bytes -= (int64_t)plugged_all;
    xmlXPathFreeObject(devs);
    xmlFreeDoc(doc);
}

static int job_guard(virDomainPtr dom, GError **error);

/* Set the first virtio-mem device's requested size (a worker), as virsh
 * update-memory-device --requested-size does: the device as the live XML
 * has it, with the new <requested>.  0, or -1 with the reason. */
static int set_vmem(lv_guest *lg, uint64_t bytes, GError **error)
{
    if (job_guard(lg->dom, error) < 0)
        return -1;
    xmlXPathObjectPtr devs;
    xmlDocPtr doc = vmem_devices(lg->dom, &devs);
    if (!doc || devs->nodesetval->nodeNr < 1) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED,
                    "virtio-mem change failed: its device is not in the domain XML: %s", last_error());
        xmlXPathFreeObject(devs);
        xmlFreeDoc(doc);
        return -1;
    }
    xmlNodePtr dev = devs->nodesetval->nodeTab[0], req = target_child(dev, "requested");
    int rc = -1;
    if (!req) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "virtio-mem change failed: its device has no <requested> size");
    } else {
        char kib[32];
        snprintf(kib, sizeof(kib), "%llu", (unsigned long long)(bytes / 1024));
        xmlNodeSetContent(req, (const xmlChar *)kib);
        xmlSetProp(req, (const xmlChar *)"unit", (const xmlChar *)"KiB");
        xmlBufferPtr buf = xmlBufferCreate();
        xmlNodeDump(buf, doc, dev, 0, 0);
        if (virDomainUpdateDeviceFlags(lg->dom, (const char *)xmlBufferContent(buf), VIR_DOMAIN_AFFECT_LIVE) == 0)
            rc = 0;
        else
            g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "virtio-mem change failed: %s", last_error());
        xmlBufferFree(buf);
    }
    xmlXPathFreeObject(devs);
    xmlFreeDoc(doc);
    return rc;
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque);
static void on_metadata(virConnectPtr conn, virDomainPtr dom, int type, const char *nsuri, void *opaque);
static void on_reboot(virConnectPtr conn, virDomainPtr dom, void *opaque);

/* libvirt calls this from whichever thread notices the connection closed
 * (the main loop's event handling, the link or a worker in an RPC): it
 * only flags the link and logs. */
static void on_close(virConnectPtr conn, int reason, void *opaque)
{
    (void)conn;
    lv_state *st = opaque;
    g_atomic_int_set(&st->closed, 1);
    log_warn("libvirt connection closed (reason %d); will reconnect", reason);
}

static void link_disconnect(lv_state *st)
{
    if (!st->conn)
        return;
    if (st->cb_lifecycle >= 0)
        virConnectDomainEventDeregisterAny(st->conn, st->cb_lifecycle);
    if (st->cb_metadata >= 0)
        virConnectDomainEventDeregisterAny(st->conn, st->cb_metadata);
    if (st->cb_reboot >= 0)
        virConnectDomainEventDeregisterAny(st->conn, st->cb_reboot);
    st->cb_lifecycle = st->cb_metadata = st->cb_reboot = -1;
    virConnectUnregisterCloseCallback(st->conn, on_close);
    /* the guests' domain handles keep the old connection until the main
     * loop attaches them to the new one */
    virConnectClose(st->conn);
    st->conn = NULL;
}

static int link_connect(lv_state *st, const lv_link_req *rq, lv_link_answer *a)
{
    if (st->conn && !g_atomic_int_get(&st->closed))
        return 0;
    link_disconnect(st);
    if (mono_s() < st->next_attempt)
        return -1;
    st->conn = virConnectOpen(rq->uri);
    if (!st->conn) {
        st->backoff = st->backoff ? MIN(st->backoff * 2, RETRY_MAX_S) : 1;
        st->next_attempt = mono_s() + st->backoff;
        g_ptr_array_add(a->warnings, g_strdup_printf("cannot connect to %s: %s (retrying in %u s)", rq->uri,
                                                     last_error(), st->backoff));
        return -1;
    }
    g_atomic_int_set(&st->closed, 0);
    st->backoff = 0;
    st->gen++;
    a->reconnected = st->ever_connected;
    st->ever_connected = true;
    if (virConnectSetKeepAlive(st->conn, 5, 3) < 0)
        g_ptr_array_add(a->infos, g_strdup_printf("keepalive not available: %s", last_error()));
    virConnectRegisterCloseCallback(st->conn, on_close, st, NULL);
    st->cb_lifecycle = virConnectDomainEventRegisterAny(
        st->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE, VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), rq->hv, NULL);
    st->cb_metadata = virConnectDomainEventRegisterAny(
        st->conn, NULL, VIR_DOMAIN_EVENT_ID_METADATA_CHANGE, VIR_DOMAIN_EVENT_CALLBACK(on_metadata), rq->hv,
        NULL);
    st->cb_reboot = virConnectDomainEventRegisterAny(
        st->conn, NULL, VIR_DOMAIN_EVENT_ID_REBOOT, VIR_DOMAIN_EVENT_CALLBACK(on_reboot), rq->hv, NULL);
    if (st->cb_lifecycle < 0 || st->cb_metadata < 0 || st->cb_reboot < 0)
        g_ptr_array_add(a->warnings, g_strdup_printf("cannot register for domain events (%s): changes are "
                                                     "picked up each tick", last_error()));
    g_ptr_array_add(a->infos, g_strdup_printf("connected to %s", rq->uri));
    return 0;
}

/* The running domains; for the ones new on this connection their agent
 * channel and policy, for the ones whose metadata changed their policy. */
static void link_list(lv_state *st, const lv_link_req *rq, lv_link_answer *a)
{
    virDomainPtr *doms = NULL;
    int n = virConnectListAllDomains(st->conn, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
    if (n < 0) {
        g_ptr_array_add(a->warnings, g_strdup_printf("listing domains: %s", last_error()));
        /* dead without a close event (keepalive not yet expired):
         * reconnect at the next request instead of failing for ever */
        if (virConnectIsAlive(st->conn) != 1)
            g_atomic_int_set(&st->closed, 1);
        return;
    }
    a->found = g_ptr_array_new_with_free_func(found_free);
    for (int i = 0; i < n; i++) {
        lv_found *f = g_new0(lv_found, 1);
        f->dom = doms[i];
        if (virDomainGetUUIDString(f->dom, f->uuid) < 0) {
            found_free(f);
            continue;
        }
        const char *name = virDomainGetName(f->dom);
        f->name = g_strdup(name ? name : f->uuid);
        f->id = virDomainGetID(f->dom);
        const guint64 *as = g_hash_table_lookup(rq->known, f->uuid);
        gpointer seq = NULL;
        f->attach = !as || *as != ((guint64)st->gen << 32 | f->id);
        bool changed = g_hash_table_lookup_extended(rq->reread, f->uuid, NULL, &seq);
        f->free_page_reporting = f->deflate_on_oom = -1;
        if (f->attach)
            domain_xml_facts(f->dom, &f->agent_path, &f->free_page_reporting, &f->deflate_on_oom, &f->has_vmem);
        if (f->attach && f->agent_path)
            agent_channel_open(st->conn, f);
        if (f->attach || changed) {
            f->policy_seq = changed ? GPOINTER_TO_UINT(seq) : 0;
            f->policy_xml = virDomainGetMetadata(f->dom, VIR_DOMAIN_METADATA_ELEMENT, VM_POLICY_NS_URI,
                                                 VIR_DOMAIN_AFFECT_LIVE);
            f->policy_read = f->policy_xml || virGetLastErrorCode() == VIR_ERR_NO_DOMAIN_METADATA;
            if (!f->policy_read)
                g_ptr_array_add(a->warnings, g_strdup_printf("guest %s: cannot read policy metadata: %s",
                                                             f->name, last_error()));
        }
        g_ptr_array_add(a->found, f);
    }
    free(doms);
}

static void lv_link_work(gpointer data, gpointer user_data)
{
    lv_link_req *rq = data;
    lv_state *st = user_data;
    lv_link_answer *a = g_new0(lv_link_answer, 1);
    a->warnings = g_ptr_array_new_with_free_func(g_free);
    a->infos = g_ptr_array_new_with_free_func(g_free);
    if (rq->close)
        link_disconnect(st);
    else if (link_connect(st, rq, a) == 0)
        link_list(st, rq, a);
    a->gen = st->gen;
    req_free(rq);
    g_mutex_lock(&st->lock);
    if (st->link_warned)
        a->stalled_ms = mono_ms() - st->link_asked_ms;
    answer_free(st->answer); /* the main loop applies an answer before it posts; only at exit can one be left */
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

static bool queue_call(lv_state *st, lv_guest *lg, call_kind kind, uint64_t bytes);

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
            log_warn("guest %s: its agent's channel through libvirtd cannot be watched: %s", g->name, last_error());
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
    queue_call(st, lg, CALL_SAMPLE, 0); /* its first sample */
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
        answer_free(a);
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
    answer_free(a);
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

/* Queue a call for lg (locked).  false when one already runs for it. */
static bool queue_call(lv_state *st, lv_guest *lg, call_kind kind, uint64_t bytes)
{
    if (lg->busy)
        return false;
    lv_call *c = g_new0(lv_call, 1);
    c->lg = lg_ref(lg);
    c->kind = kind;
    c->bytes = bytes;
    lg->busy = true;
    lg->asked_ms = mono_ms();
    if (kind == CALL_SAMPLE)
        st->calls_one++;
    st->running++;
    g_thread_pool_push(st->pool, c, NULL);
    return true;
}

static void queue_bulk(lv_state *st, GPtrArray *gs)
{
    lv_call *c = g_new0(lv_call, 1);
    c->kind = CALL_BULK;
    c->guests = gs;
    st->bulk_busy = true;
    st->bulk_stuck = st->bulk_warned = false;
    st->bulk_asked_ms = mono_ms();
    st->calls_all++;
    st->running++;
    g_thread_pool_push(st->pool, c, NULL);
}

/* The link's request and this tick's statistics calls, then at most
 * HV_GATHER_MS for all of them together; whoever has not returned by
 * then is stuck.  The link's answer (when it came) is applied: a guest new
 * in it is sampled within the same gather. */
static int lv_sync(hv_ctx *hv)
{
    lv_state *st = state_of(hv);
    link_apply(hv); /* an answer that came since the last gather: before it is replaced */
    size_t n = hv->inv->count(hv->inv_ctx);
    g_autofree lv_guest **late = g_new0(lv_guest *, n ? n : 1);
    size_t n_late = 0;
    g_mutex_lock(&st->lock);
    link_post(hv, st, false);
    /* a bulk call still out from the last tick is stuck: every guest is
     * asked on its own until it returns */
    if (st->bulk_busy)
        st->bulk_stuck = true;
    /* the bulk call asks the guests with no call of their own running, on
     * the newest connection (one call is one connection's); the others,
     * and all of them while a bulk call is out, are asked one by one */
    unsigned gen = 0;
    for (size_t i = 0; i < n; i++) {
        const lv_guest *lg = hv->inv->at(hv->inv_ctx, i)->backend_data;
        if (lg)
            gen = MAX(gen, lg->gen);
    }
    GPtrArray *bulk = st->bulk_busy ? NULL : g_ptr_array_new_with_free_func((GDestroyNotify)lg_unref);
    for (size_t i = 0; i < n; i++) {
        lv_guest *lg = hv->inv->at(hv->inv_ctx, i)->backend_data;
        if (!lg)
            continue;
        if (bulk && !lg->busy && lg->gen == gen)
            g_ptr_array_add(bulk, lg_ref(lg));
        else
            queue_call(st, lg, CALL_SAMPLE, 0);
    }
    g_autoptr(GPtrArray) asked = bulk ? g_ptr_array_ref(bulk) : NULL;
    if (bulk && bulk->len)
        queue_bulk(st, g_steal_pointer(&bulk));
    g_clear_pointer(&bulk, g_ptr_array_unref);
    gint64 now_us = g_get_monotonic_time();
    gint64 end = now_us + (gint64)HV_GATHER_MS * 1000;
    /* a bulk call that is usually quick and is not back by three times
     * its usual time (at most half the gather) is in a stopped QEMU, most
     * likely: the others are asked on their own now, within the tick.
     * One that is usually slow (many guests) is not: its answer serves the
     * next tick. */
    int64_t usual = st->bulk_took_ms;
    if (asked && asked->len && usual >= 0 && usual < HV_GATHER_MS / 2) {
        int64_t cut_ms = MIN(HV_GATHER_MS / 2, MAX(10, 3 * usual));
        gather(hv, st, now_us + cut_ms * 1000, true);
        for (guint j = 0; st->bulk_busy && j < asked->len; j++)
            queue_call(st, g_ptr_array_index(asked, j), CALL_SAMPLE, 0);
    }
    gather(hv, st, end, true);
    mark_stuck(hv);
    int64_t now = mono_ms();
    bool bulk_late = st->bulk_busy && !st->bulk_warned && now - st->bulk_asked_ms >= HV_STUCK_WARN_MS;
    if (bulk_late)
        st->bulk_warned = true;
    int64_t bulk_back_ms = st->bulk_back_ms;
    st->bulk_back_ms = 0;
    char bulk_failed[sizeof(st->bulk_failed)];
    snprintf(bulk_failed, sizeof(bulk_failed), "%s", st->bulk_failed);
    st->bulk_failed[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        lv_guest *lg = hv->inv->at(hv->inv_ctx, i)->backend_data;
        if (!lg || lg->warned)
            continue;
        /* its own call out, or its job held by a call that is (a stuck
         * bulk call in its stopped QEMU) */
        int64_t since = lg->stuck ? lg->asked_ms : lg->jobless_ms;
        if (since && now - since >= HV_STUCK_WARN_MS) {
            lg->warned = true;
            late[n_late++] = lg;
        }
    }
    bool link_late = link_check_stuck(st);
    hv->stats_calls_all = st->calls_all;
    hv->stats_calls_one = st->calls_one;
    g_mutex_unlock(&st->lock);
    if (bulk_late)
        log_warn("libvirt's statistics call for all guests has not returned for %d s (a stopped QEMU?): "
                 "each guest is asked on its own until it does", HV_STUCK_WARN_MS / 1000);
    if (bulk_failed[0])
        log_debug("libvirt's statistics call for all guests failed (%s): each was asked on its own", bulk_failed);
    if (bulk_back_ms)
        log_info("libvirt's statistics call for all guests returned (after %.1f s)", (double)bulk_back_ms / 1000.0);
    for (size_t i = 0; i < n_late; i++)
        log_warn("domain %s: libvirt has been stuck on its QEMU for %d s (stopped or hung?): not waited for "
                 "until it answers", virDomainGetName(late[i]->dom), HV_STUCK_WARN_MS / 1000);
    if (link_late)
        warn_link_silent();
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

/* How long libvirt has been running a job on the domain that copies or
 * restores its memory (migration in or out, save, restore, dump,
 * snapshot), -1 when none: a backup job (disks only) does not count.
 * Without a job libvirt answers from its own state; with one it asks
 * QEMU under a query job, which these jobs allow.  An incoming migration
 * has no statistics here (libvirt: "migration statistics are available
 * only on the source host"), which says as much. */
static int64_t job_ms(virDomainPtr dom)
{
    int type = VIR_DOMAIN_JOB_NONE, nparams = 0, op = VIR_DOMAIN_JOB_OPERATION_UNKNOWN;
    virTypedParameterPtr params = NULL;
    if (virDomainGetJobStats(dom, &type, &params, &nparams, 0) < 0)
        return virGetLastErrorCode() == VIR_ERR_OPERATION_UNSUPPORTED ? 0 : -1;
    unsigned long long elapsed = 0;
    virTypedParamsGetInt(params, nparams, VIR_DOMAIN_JOB_OPERATION, &op);
    virTypedParamsGetULLong(params, nparams, VIR_DOMAIN_JOB_TIME_ELAPSED, &elapsed);
    virTypedParamsFree(params, nparams);
    if (type != VIR_DOMAIN_JOB_BOUNDED && type != VIR_DOMAIN_JOB_UNBOUNDED)
        return -1;
    switch (op) {
    case VIR_DOMAIN_JOB_OPERATION_BACKUP:
    case VIR_DOMAIN_JOB_OPERATION_SNAPSHOT_REVERT: /* the guest is stopped meanwhile */
        return -1;
    default: /* migration, save, restore, dump, snapshot, and what libvirt cannot name */
        return elapsed > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)elapsed;
    }
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

/* What a sample is made of: libvirt's bulk statistics of the balloon
 * (guest memory, KiB) and the disks (bytes read). */
#define STATS_WANTED (VIR_DOMAIN_STATS_BALLOON | VIR_DOMAIN_STATS_BLOCK)

/* A guest-provided counter in KiB as bytes, or a count, within int64:
 * guest_ingest clamps what is left. */
static int64_t kib_bytes(unsigned long long v)
{
    return v > (unsigned long long)INT64_MAX / 1024 ? INT64_MAX : (int64_t)v * 1024;
}

static int64_t count_of(unsigned long long v)
{
    return v > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* Fill out from one domain's statistics record.  true when libvirt asked
 * the guest's QEMU for it: it then adds balloon.rss (also without a balloon
 * driver), and leaves balloon.* but .current and .maximum and the disks'
 * counters out when it could not (another call held the domain's job and
 * this one was not to wait for it). */
static bool sample_from_record(const virDomainStatsRecord *rec, guest_sample *out)
{
    memset(out, 0xff, sizeof(*out)); /* every field -1: not reported */
    out->vmem = (vmem_sample){ 0 }; /* none, unless its domain XML says (vmem_sample_read) */
    out->last_update = 0;
    out->rss_bytes = -1; /* the core measures it (libvirt's "rss" is resident only) */
    out->job_ms = -1;
    bool asked = false;
    int64_t disks = -1;
    for (int i = 0; i < rec->nparams; i++) {
        const virTypedParameter *p = &rec->params[i];
        if (p->type != VIR_TYPED_PARAM_ULLONG && p->type != VIR_TYPED_PARAM_UINT)
            continue;
        unsigned long long v = p->type == VIR_TYPED_PARAM_ULLONG ? p->value.ul : p->value.ui;
        unsigned idx;
        char tail[16];
        if (strncmp(p->field, "block.", 6) == 0) {
            /* no disks: nothing read; disks without counters: unknown */
            if (strcmp(p->field, "block.count") == 0)
                disks = (int64_t)MIN(v, (unsigned long long)INT64_MAX);
            else if (sscanf(p->field, "block.%u.rd.byte%15s", &idx, tail) == 2 && strcmp(tail, "s") == 0 &&
                     v <= (unsigned long long)(INT64_MAX - MAX(out->disk_read_bytes, 0)))
                out->disk_read_bytes = MAX(out->disk_read_bytes, 0) + (int64_t)v;
            continue;
        }
        const char *f = p->field;
        if (strcmp(f, "balloon.maximum") == 0) out->max_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.current") == 0) out->actual_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.swap_in") == 0) out->swap_in_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.swap_out") == 0) out->swap_out_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.major_fault") == 0) out->major_faults = count_of(v);
        else if (strcmp(f, "balloon.minor_fault") == 0) out->minor_faults = count_of(v);
        else if (strcmp(f, "balloon.unused") == 0) out->free_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.available") == 0) out->total_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.usable") == 0) out->available_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.disk_caches") == 0) out->cache_bytes = kib_bytes(v);
        else if (strcmp(f, "balloon.last-update") == 0) out->last_update = count_of(v);
        else if (strcmp(f, "balloon.rss") == 0) asked = true;
    }
    if (disks == 0)
        out->disk_read_bytes = 0;
    return asked;
}

/* Statistics of doms (NULL-terminated, one connection) in one call that
 * waits for no domain's job (a worker thread): got[i] when libvirt asked
 * doms[i]'s QEMU, and then samples[i] is its sample, with its job.  The
 * number of records libvirt returned, or -1 with its error in failed. */
static int list_stats(virDomainPtr *doms, guint n, guest_sample *samples, bool *got, const bool *ask_job, char *failed,
                      size_t len)
{
    virDomainStatsRecordPtr *recs = NULL;
    int nrec = virDomainListGetStats(doms, STATS_WANTED, &recs, VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT);
    if (nrec < 0)
        snprintf(failed, len, "%s", last_error());
    guint from = 0; /* the records come in the order of doms: each looked for after the last one found */
    for (int r = 0; r < nrec; r++) {
        unsigned char uuid[VIR_UUID_BUFLEN], want[VIR_UUID_BUFLEN];
        if (virDomainGetUUID(recs[r]->dom, uuid) < 0)
            continue;
        for (guint k = 0; k < n; k++) {
            guint i = (from + k) % n;
            if (got[i] || virDomainGetUUID(doms[i], want) < 0 || memcmp(uuid, want, sizeof(uuid)) != 0)
                continue;
            got[i] = sample_from_record(recs[r], &samples[i]);
            if (got[i] && (!ask_job || ask_job[i]))
                samples[i].job_ms = job_ms(doms[i]);
            from = i + 1;
            break;
        }
    }
    virDomainStatsRecordListFree(recs);
    return nrec;
}

#define SAMPLE_NO_JOB (-2)

/* One guest's sample, straight from libvirt (a worker thread), without
 * waiting for the domain's job: 0, -1 on an error, SAMPLE_NO_JOB when
 * another call holds the job (a balloon change, a job of the operator's,
 * or a call stuck in its stopped QEMU). */
static int sample_now(virDomainPtr dom, guest_sample *out, GError **error)
{
    virDomainPtr doms[2] = { dom, NULL };
    bool got = false;
    char failed[256] = "";
    int n = list_stats(doms, 1, out, &got, NULL, failed, sizeof(failed));
    if (n != 1) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "%s",
                    n < 0 ? failed : "libvirt returned no statistics for the domain");
        return -1;
    }
    if (!got) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED,
                    "libvirt could not ask its QEMU: another call holds the domain's job");
        return SAMPLE_NO_JOB;
    }
    return 0;
}

/* A call for lg returned (locked).  no_job: libvirt could not ask its
 * QEMU, as the job was held by another call, since since_ms: the guest is
 * not answering; anything else is an answer, which ends a logged stall. */
static void note_answer(lv_guest *lg, int64_t since_ms, bool no_job)
{
    if (no_job) {
        if (!lg->jobless_ms)
            lg->jobless_ms = since_ms;
        return;
    }
    if (lg->warned) {
        lg->back = true;
        lg->stalled_ms = mono_ms() - (lg->jobless_ms ? MIN(lg->jobless_ms, since_ms) : since_ms);
    }
    lg->warned = false;
    lg->jobless_ms = 0;
}

/* A change waits for the domain's job, up to 30 s in libvirt and a worker
 * with it: asked first, as the bulk call asks a guest's job every few
 * seconds only.  0, or -1 when a job runs. */
static int job_guard(virDomainPtr dom, GError **error)
{
    int64_t job = job_ms(dom);
    if (job < 0)
        return 0;
    g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED,
                "a libvirt job (migration, save or dump) has run for %.0f s: left alone", (double)job / 1000.0);
    return -1;
}

/* Set the balloon (a worker).  0, or -1 with the reason. */
static int set_balloon(lv_guest *lg, uint64_t bytes, GError **error)
{
    if (job_guard(lg->dom, error) < 0)
        return -1;
    if (virDomainSetMemoryFlags(lg->dom, (unsigned long)(bytes / 1024), VIR_DOMAIN_AFFECT_LIVE) == 0)
        return 0;
    g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "balloon change failed: %s", last_error());
    return -1;
}

/* A worker: one statistics call for all of c's guests, without waiting
 * for any guest's job.  A guest it could not answer is asked on its own
 * (queued here, so a gather still running waits for it too).  An answer
 * that comes after its gather serves the next tick. */
static void bulk_work(lv_state *st, lv_call *c)
{
    GPtrArray *gs = c->guests;
    g_autofree virDomainPtr *doms = g_new0(virDomainPtr, gs->len + 1);
    g_autofree guest_sample *samples = g_new(guest_sample, gs->len);
    g_autofree bool *got = g_new0(bool, gs->len);
    g_autofree bool *ask_job = g_new0(bool, gs->len);
    int64_t now = mono_ms();
    for (guint i = 0; i < gs->len; i++) {
        lv_guest *lg = g_ptr_array_index(gs, i);
        doms[i] = lg->dom;
        /* a call to libvirtd a guest a tick otherwise (some 30 system calls
         * here, libvirt-glib's wakeups most of them): every few seconds,
         * spread, and every tick while one runs */
        ask_job[i] = lg->job_last >= 0 || now >= lg->job_next_ms;
    }
    char failed[256] = "";
    list_stats(doms, gs->len, samples, got, ask_job, failed, sizeof(failed));
    for (guint i = 0; i < gs->len; i++) {
        lv_guest *lg = g_ptr_array_index(gs, i);
        if (got[i] && ask_job[i]) {
            lg->job_last = samples[i].job_ms;
            lg->job_next_ms = now + JOB_RECHECK_MS / 2 + g_random_int_range(0, JOB_RECHECK_MS / 2);
        } else if (got[i]) {
            samples[i].job_ms = lg->job_last;
        }
    }
    for (guint i = 0; i < gs->len; i++)
        if (got[i] && ((lv_guest *)g_ptr_array_index(gs, i))->has_vmem)
            vmem_sample_read(doms[i], &samples[i]);
    g_mutex_lock(&st->lock);
    snprintf(st->bulk_failed, sizeof(st->bulk_failed), "%s", failed);
    int64_t took = mono_ms() - st->bulk_asked_ms;
    if (st->bulk_warned)
        st->bulk_back_ms = took;
    else if (!st->bulk_stuck)
        st->bulk_took_ms = st->bulk_took_ms < 0 ? took : (3 * st->bulk_took_ms + took) / 4;
    for (guint i = 0; i < gs->len; i++) {
        lv_guest *lg = g_ptr_array_index(gs, i);
        if (!got[i]) {
            queue_call(st, lg, CALL_SAMPLE, 0); /* what keeps it from the bulk call is said there */
            continue;
        }
        lg->sample = samples[i];
        lg->have = true;
        lg->error[0] = '\0';
        note_answer(lg, st->bulk_asked_ms, false);
    }
    st->bulk_busy = st->bulk_stuck = st->bulk_warned = false;
    st->running--;
    g_cond_broadcast(&st->done);
    g_mutex_unlock(&st->lock);
    g_ptr_array_unref(gs);
    g_free(c);
}

/* The call's own work (a worker, unlocked): a sample into *s, its failure
 * in *error, or a change; what is to be logged goes in *note.  The call's
 * outcome: 0, -1, or SAMPLE_NO_JOB. */
static int run_call(const lv_call *c, guest_sample *s, GError **error, GError **note)
{
    lv_guest *lg = c->lg;
    if (c->kind == CALL_VMEM)
        return set_vmem(lg, c->bytes, note);
    if (c->kind == CALL_BALLOON)
        return set_balloon(lg, c->bytes, note);
    if (!lg->period_set) {
        lg->period_set = true;
        if (virDomainSetMemoryStatsPeriod(lg->dom, (int)lg->stats_period, VIR_DOMAIN_AFFECT_LIVE) < 0)
            g_set_error(note, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "cannot enable balloon stats (period %u s): %s",
                        lg->stats_period, last_error());
    }
    int rc = sample_now(lg->dom, s, error);
    if (rc == 0 && lg->has_vmem)
        vmem_sample_read(lg->dom, s);
    return rc;
}

/* The changes decided for lg while its call ran, right after it (locked;
 * unlocked around each): the virtio-mem size, then the balloon.  A refused
 * one is counted, and its reason replaces *note.  One decided before the
 * call stalled is stale by now: dropped. */
static void run_wanted(lv_state *st, lv_guest *lg, GError **note)
{
    if (lg->stuck) {
        lg->want_bytes = 0;
        lg->want_vmem = UINT64_MAX;
    }
    while (lg->want_bytes || lg->want_vmem != UINT64_MAX) {
        uint64_t want = lg->want_bytes, want_vmem = lg->want_vmem;
        lg->want_bytes = 0;
        lg->want_vmem = UINT64_MAX;
        g_mutex_unlock(&st->lock);
        g_autoptr(GError) err = NULL;
        bool ok = (want_vmem == UINT64_MAX || set_vmem(lg, want_vmem, &err) == 0) &&
                  (!want || set_balloon(lg, want, &err) == 0);
        g_mutex_lock(&st->lock);
        if (!ok) {
            lg->set_failures++;
            g_clear_error(note);
            *note = g_steal_pointer(&err);
        }
    }
}

/* A worker: run one call, post its outcome, wake the gather. */
static void lv_work(gpointer data, gpointer user_data)
{
    lv_call *c = data;
    lv_state *st = user_data;
    if (c->kind == CALL_BULK) {
        bulk_work(st, c);
        return;
    }
    lv_guest *lg = c->lg;
    g_autoptr(GError) err = NULL;
    g_autoptr(GError) note = NULL;
    guest_sample s;
    int rc = run_call(c, &s, &err, &note);
    g_mutex_lock(&st->lock);
    run_wanted(st, lg, &note);
    if ((c->kind == CALL_BALLOON || c->kind == CALL_VMEM) && rc < 0)
        lg->set_failures++;
    if (c->kind == CALL_SAMPLE) {
        if (rc == 0) {
            lg->sample = s;
            lg->have = true;
            lg->error[0] = '\0';
        } else {
            snprintf(lg->error, sizeof(lg->error), "%s", err->message);
        }
    }
    if (note)
        snprintf(lg->note, sizeof(lg->note), "%s", note->message);
    /* nothing was queued for it while this call ran: asked_ms is its.  A
     * balloon change waits for the job: its return says nothing of a QEMU
     * whose job another call holds */
    if (c->kind == CALL_SAMPLE || !lg->jobless_ms)
        note_answer(lg, lg->asked_ms, c->kind == CALL_SAMPLE && rc == SAMPLE_NO_JOB);
    lg->stuck = false;
    lg->busy = false;
    st->running--;
    g_cond_broadcast(&st->done);
    g_mutex_unlock(&st->lock);
    lg_unref(lg);
    g_free(c);
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
static int queue_set(hv_ctx *hv, hv_guest *g, call_kind kind, uint64_t bytes, GError **error)
{
    lv_state *st = state_of(hv);
    lv_guest *lg = g->backend_data;
    if (!lg) {
        g_set_error(error, MEMBAL_ERROR, MEMBAL_ERROR_FAILED, "not attached");
        return -1;
    }
    g_mutex_lock(&st->lock);
    bool stuck = lg->stuck;
    if (!stuck && !queue_call(st, lg, kind, bytes)) {
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
    answer_free(st->answer);
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

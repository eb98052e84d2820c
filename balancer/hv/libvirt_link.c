/* The libvirt backend's link; see libvirt_link.h. */
#include "hv/libvirt_link.h"

#include <errno.h>
#include <glib.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "hv/libvirt_stats.h"
#include "hv/libvirt_xml.h"
#include "policies/vm_policy.h"
#include "util/log.h"
#include "util/mono_clock.h"

#define RETRY_MAX_S 60        /* reconnect backoff: 1, 2, 4 ... s up to this */

void lv_link_init(lv_link *l, virConnectDomainEventGenericCallback on_lifecycle,
                  virConnectDomainEventGenericCallback on_metadata, virConnectDomainEventGenericCallback on_reboot)
{
    *l = (lv_link){ .on_lifecycle = on_lifecycle, .on_metadata = on_metadata, .on_reboot = on_reboot,
                    .cb_lifecycle = -1, .cb_metadata = -1, .cb_reboot = -1 };
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

void lv_link_answer_free(lv_link_answer *a)
{
    if (!a)
        return;
    if (a->found)
        g_ptr_array_free(a->found, TRUE);
    g_ptr_array_free(a->warnings, TRUE);
    g_ptr_array_free(a->infos, TRUE);
    g_free(a);
}

void lv_link_req_free(lv_link_req *rq)
{
    g_free(rq->uri);
    if (rq->known)
        g_hash_table_unref(rq->known);
    if (rq->reread)
        g_hash_table_unref(rq->reread);
    g_free(rq);
}

/* The agent's socket when this process may open it, else its channel
 * through libvirtd; f->agent_note says which, or why neither.  (The unit
 * runs balancerd as root without capabilities: libvirt's channel sockets
 * are then out of its reach, and virDomainOpenChannel needs none.) */
static void agent_channel_open(virConnectPtr conn, lv_found *f)
{
    if (access(f->agent_path, R_OK | W_OK) == 0)
        return; /* agent_conn connects to it on the main loop */
    int err = errno;
    virStreamPtr s = virStreamNew(conn, VIR_STREAM_NONBLOCK);
    if (s && virDomainOpenChannel(f->dom, LIBVIRT_AGENT_PORT, s, VIR_DOMAIN_CHANNEL_FORCE) == 0) {
        f->agent_stream = s;
        f->agent_note = g_strdup_printf("reading its agent through libvirt's channel API (its socket %s: %s)",
                                        f->agent_path, g_strerror(err));
        return;
    }
    f->agent_note = g_strdup_printf("cannot reach its agent: its socket %s: %s; libvirt's channel API: %s",
                                    f->agent_path, g_strerror(err), lv_last_error());
    if (s)
        virStreamFree(s);
}

/* From the live domain XML (on the link): its agent's socket (NULL if it
 * has none), whether its virtio balloon has free page reporting and
 * autodeflate (deflate-on-oom) on (-1 when the XML cannot be read), and
 * whether it has a virtio-mem device. */
static void found_xml_facts(lv_found *f)
{
    char *xml = virDomainGetXMLDesc(f->dom, 0);
    libvirt_xml_facts facts;
    int rc = xml ? libvirt_xml_facts_parse(xml, strlen(xml), &facts, NULL) : -1;
    free(xml); /* libvirt's allocation */
    if (rc < 0)
        return;
    f->agent_path = g_steal_pointer(&facts.agent_path);
    f->free_page_reporting = facts.free_page_reporting;
    f->deflate_on_oom = facts.deflate_on_oom;
    f->has_vmem = facts.vmem.devices > 0;
    libvirt_xml_facts_clear(&facts);
}

/* libvirt calls this from whichever thread notices the connection closed
 * (the main loop's event handling, the link or a worker in an RPC): it
 * only flags the link and logs. */
static void on_close(virConnectPtr conn, int reason, void *opaque)
{
    (void)conn;
    lv_link *l = opaque;
    g_atomic_int_set(&l->closed, 1);
    log_warn("libvirt connection closed (reason %d); will reconnect", reason);
}

static void link_disconnect(lv_link *l)
{
    if (!l->conn)
        return;
    if (l->cb_lifecycle >= 0)
        virConnectDomainEventDeregisterAny(l->conn, l->cb_lifecycle);
    if (l->cb_metadata >= 0)
        virConnectDomainEventDeregisterAny(l->conn, l->cb_metadata);
    if (l->cb_reboot >= 0)
        virConnectDomainEventDeregisterAny(l->conn, l->cb_reboot);
    l->cb_lifecycle = l->cb_metadata = l->cb_reboot = -1;
    virConnectUnregisterCloseCallback(l->conn, on_close);
    /* the guests' domain handles keep the old connection until the main
     * loop attaches them to the new one */
    virConnectClose(l->conn);
    l->conn = NULL;
}

static int link_connect(lv_link *l, const lv_link_req *rq, lv_link_answer *a)
{
    if (l->conn && !g_atomic_int_get(&l->closed))
        return 0;
    link_disconnect(l);
    if (mono_s() < l->next_attempt)
        return -1;
    l->conn = virConnectOpen(rq->uri);
    if (!l->conn) {
        l->backoff = l->backoff ? MIN(l->backoff * 2, RETRY_MAX_S) : 1;
        l->next_attempt = mono_s() + l->backoff;
        g_ptr_array_add(a->warnings, g_strdup_printf("cannot connect to %s: %s (retrying in %u s)", rq->uri,
                                                     lv_last_error(), l->backoff));
        return -1;
    }
    g_atomic_int_set(&l->closed, 0);
    l->backoff = 0;
    l->gen++;
    a->reconnected = l->ever_connected;
    l->ever_connected = true;
    if (virConnectSetKeepAlive(l->conn, 5, 3) < 0)
        g_ptr_array_add(a->infos, g_strdup_printf("keepalive not available: %s", lv_last_error()));
    virConnectRegisterCloseCallback(l->conn, on_close, l, NULL);
    l->cb_lifecycle = virConnectDomainEventRegisterAny(l->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE, l->on_lifecycle,
                                                       rq->hv, NULL);
    l->cb_metadata = virConnectDomainEventRegisterAny(l->conn, NULL, VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
                                                      l->on_metadata, rq->hv, NULL);
    l->cb_reboot = virConnectDomainEventRegisterAny(l->conn, NULL, VIR_DOMAIN_EVENT_ID_REBOOT, l->on_reboot, rq->hv,
                                                    NULL);
    if (l->cb_lifecycle < 0 || l->cb_metadata < 0 || l->cb_reboot < 0)
        g_ptr_array_add(a->warnings, g_strdup_printf("cannot register for domain events (%s): changes are "
                                                     "picked up each tick", lv_last_error()));
    g_ptr_array_add(a->infos, g_strdup_printf("connected to %s", rq->uri));
    return 0;
}

/* The running domains; for the ones new on this connection their agent
 * channel and policy, for the ones whose metadata changed their policy. */
static void link_list(lv_link *l, const lv_link_req *rq, lv_link_answer *a)
{
    virDomainPtr *doms = NULL;
    int n = virConnectListAllDomains(l->conn, &doms, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
    if (n < 0) {
        g_ptr_array_add(a->warnings, g_strdup_printf("listing domains: %s", lv_last_error()));
        /* dead without a close event (keepalive not yet expired):
         * reconnect at the next request instead of failing for ever */
        if (virConnectIsAlive(l->conn) != 1)
            g_atomic_int_set(&l->closed, 1);
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
        f->attach = !as || *as != ((guint64)l->gen << 32 | f->id);
        bool changed = g_hash_table_lookup_extended(rq->reread, f->uuid, NULL, &seq);
        f->free_page_reporting = f->deflate_on_oom = -1;
        if (f->attach)
            found_xml_facts(f);
        if (f->attach && f->agent_path)
            agent_channel_open(l->conn, f);
        if (f->attach || changed) {
            f->policy_seq = changed ? GPOINTER_TO_UINT(seq) : 0;
            f->policy_xml = virDomainGetMetadata(f->dom, VIR_DOMAIN_METADATA_ELEMENT, VM_POLICY_NS_URI,
                                                 VIR_DOMAIN_AFFECT_LIVE);
            f->policy_read = f->policy_xml || virGetLastErrorCode() == VIR_ERR_NO_DOMAIN_METADATA;
            if (!f->policy_read)
                g_ptr_array_add(a->warnings, g_strdup_printf("guest %s: cannot read policy metadata: %s",
                                                             f->name, lv_last_error()));
        }
        g_ptr_array_add(a->found, f);
    }
    free(doms);
}

lv_link_answer *lv_link_run(lv_link *l, const lv_link_req *rq)
{
    lv_link_answer *a = g_new0(lv_link_answer, 1);
    a->warnings = g_ptr_array_new_with_free_func(g_free);
    a->infos = g_ptr_array_new_with_free_func(g_free);
    if (rq->close)
        link_disconnect(l);
    else if (link_connect(l, rq, a) == 0)
        link_list(l, rq, a);
    a->gen = l->gen;
    return a;
}

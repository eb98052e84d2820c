/*
 * The libvirt backend's link: the one thread that talks to libvirtd alone
 * (one request at a time): connecting, with backoff, listing the running
 * domains, and for each new one reading its domain XML's facts, its
 * agent's channel and its policy metadata.  backend_libvirt.c posts the
 * requests and applies the answers on the main loop.
 */
#ifndef MEMBAL_HV_LIBVIRT_LINK_H
#define MEMBAL_HV_LIBVIRT_LINK_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include <libvirt/libvirt.h>

#include "hv/backend.h"

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
    int64_t stalled_ms;       /* it answered after a logged stall this long, 0 if not (the caller's) */
} lv_link_answer;

/* The link's connection: the link thread's alone. */
typedef struct {
    /* the domain events the main loop handles, given the request's hv */
    virConnectDomainEventGenericCallback on_lifecycle, on_metadata, on_reboot;
    virConnectPtr conn;
    unsigned gen;             /* bumped at each new connection */
    bool ever_connected;
    int cb_lifecycle, cb_metadata, cb_reboot;
    int64_t next_attempt;     /* monotonic s */
    unsigned backoff;
    gint closed;              /* atomic: libvirt told us the connection died */
} lv_link;

void lv_link_init(lv_link *l, virConnectDomainEventGenericCallback on_lifecycle,
                  virConnectDomainEventGenericCallback on_metadata, virConnectDomainEventGenericCallback on_reboot);

/* Run one request on the link thread: its answer. */
lv_link_answer *lv_link_run(lv_link *l, const lv_link_req *rq);

void lv_link_req_free(lv_link_req *rq);
void lv_link_answer_free(lv_link_answer *a);

#endif

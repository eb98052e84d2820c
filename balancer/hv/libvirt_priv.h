/*
 * The libvirt backend's state, shared by its main-loop side
 * (backend_libvirt.c) and its worker pool (libvirt_worker.c), and for
 * those two files only.  The fields marked (locked) are guarded by
 * lv_state.lock; backend_libvirt.c's opening comment says who does what.
 */
#ifndef MEMBAL_HV_LIBVIRT_PRIV_H
#define MEMBAL_HV_LIBVIRT_PRIV_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include <libvirt/libvirt.h>

#include "agent/agent_conn.h"
#include "hv/backend.h"
#include "hv/libvirt_link.h"

typedef struct {
    lv_link link_conn;        /* the link thread's alone */

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

lv_guest *lv_guest_ref(lv_guest *lg);
void lv_guest_unref(lv_guest *lg);

/* ---- the worker pool (libvirt_worker.c) ---- */

typedef enum { CALL_SAMPLE, CALL_BALLOON, CALL_VMEM, CALL_BULK /* lv_queue_bulk's */ } lv_call_kind;

/* Queue a call for lg (locked).  false when one already runs for it. */
bool lv_queue_call(lv_state *st, lv_guest *lg, lv_call_kind kind, uint64_t bytes);

/* Queue one statistics call for the guests of gs (lv_guest references,
 * taken over), on one connection (locked). */
void lv_queue_bulk(lv_state *st, GPtrArray *gs);

/* The pool's function: run one queued call, post its outcome, wake the
 * gather (st->done). */
void lv_work(gpointer data, gpointer user_data);

#endif

/*
 * The QMP backend's own state, for its two files only: backend_qmp.c (the
 * ticks' rounds of questions, the sockets' event loop, balloon changes)
 * and qmp_connect.c (a target's connection: connect, the epoll set, the
 * handshake and identity, the guest it serves, the retries).
 */
#ifndef MEMBAL_HV_QMP_TARGET_H
#define MEMBAL_HV_QMP_TARGET_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/agent_conn.h"
#include "hv/backend.h"
#include "qmp/qmp.h"

#define CONNECT_MS 500           /* greeting, capabilities and identity of a new connection */
#define REQUEST_MS 10000         /* a question unanswered this long fails (the answer is stray) */
#define FPR_READY_MS 5000        /* whether the guest's driver took free page reporting: asked this
                                  * often until its driver is ready ... */
#define FPR_AGAIN_MS 60000       /* ... then this often (the guest may reboot into another kernel) */
#define RETRY_MIN_S 5            /* reconnect backoff, doubling ... */
#define RETRY_MAX_S 60           /* ... up to this */
#define BALLOON_QOM_PATH "/machine/peripheral/balloon0"
#define MEMDEV_AGAIN_MS 10000    /* memory devices (DIMMs, a hotplugged virtio-mem) asked at least this often */

typedef struct {
    char *path;
    agent_conn agent;      /* path NULL: no agent */
    qmp_conn *conn;
    bool watched;          /* conn's socket is in the epoll set */
    int pid;               /* the socket's peer (SO_PEERCRED at connect), -1 unknown */
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
    /* its memory devices (the balloon's range, virtio-mem), asked in a
     * round every tick while it has virtio-mem, else after a memory-device
     * event, a failed answer, or MEMDEV_AGAIN_MS: rounds between reuse the
     * last answer */
    bool md_known;
    int64_t md_asked_ms;
    int64_t md_max_bytes;
    vmem_sample md_vmem;
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
    int ep;             /* every connection's socket, epoll_data.ptr its target; -1 none yet */
} qmp_state;

/* qmp_connect.c.  A connect attempt (none before t->next_attempt): the
 * connection joins from the ticks' pumps and gathers, answering to
 * qmp_target_settle. */
void qmp_target_connect(hv_ctx *hv, qmp_state *st, qmp_target *t);
/* After a pump: a join that ended becomes a guest, or a retry. */
void qmp_target_settle(hv_ctx *hv, qmp_state *st, qmp_target *t);
/* t's socket out of the epoll set (before its connection closes). */
void qmp_target_unwatch(qmp_state *st, qmp_target *t);
/* Whether the guest's driver took free page reporting, asked now and then
 * outside the round. */
void qmp_target_ask_fpr_used(qmp_target *t);

#endif

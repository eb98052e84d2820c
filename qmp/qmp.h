/*
 * libqmp: a small client for the QEMU Machine Protocol over a unix socket.
 *
 * One connection object serves two styles of use:
 *  - blocking: qmp_connect_unix() then qmp_execute() / the typed wrappers,
 *    each with a timeout (tests, the CLI);
 *  - event driven: qmp_connect_unix_async(), qmp_execute_async() plus
 *    qmp_pump(conn, 0) whenever the fd is readable (qmp_glib.h wires that
 *    into a GLib main loop); nothing waits.
 *
 * Every failure is returned as a value (qmp_error) with a readable message;
 * nothing the peer sends can make the library abort.  A peer that sends
 * invalid JSON, a message longer than the configured cap, or closes the
 * socket leaves the connection "broken": pending commands fail with the
 * reason and later calls fail at once with the same reason.  Reconnecting
 * is the caller's decision.
 */
#ifndef MEMBAL_QMP_H
#define MEMBAL_QMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    QMP_OK = 0,
    QMP_ERR_ARG,      /* caller passed something invalid */
    QMP_ERR_IO,       /* socket error (errno text in the message) */
    QMP_ERR_CLOSED,   /* peer closed the connection, or nobody listens (connect: ENOENT, ECONNREFUSED) */
    QMP_ERR_TIMEOUT,  /* no answer before the deadline */
    QMP_ERR_PROTOCOL, /* peer sent something that is not QMP */
    QMP_ERR_TOO_LONG, /* a message exceeded the size cap */
    QMP_ERR_COMMAND,  /* QEMU answered with an "error" reply */
} qmp_err_code;

typedef struct {
    qmp_err_code code;
    char msg[256];
} qmp_error;

const char *qmp_err_code_name(qmp_err_code code);

/* Default cap on one QMP message (one line).  QEMU's answers to the
 * commands we use are a few hundred bytes; 1 MiB leaves room for
 * query-* answers on big machines without letting a peer grow us
 * without bound. */
#define QMP_DEFAULT_MAX_MESSAGE (1024u * 1024u)

/* Events kept while nobody consumes them; the oldest are dropped (and
 * counted) beyond this. */
#define QMP_EVENT_QUEUE_MAX 256

typedef struct qmp_conn qmp_conn;

typedef struct {
    char *name;           /* e.g. "BALLOON_CHANGE" */
    json_object *data;    /* may be NULL; owned by the event */
    int64_t ts_seconds;   /* QEMU's timestamp, -1 if absent */
    int64_t ts_useconds;
} qmp_event;

void qmp_event_free(qmp_event *ev);

typedef void (*qmp_event_cb)(qmp_conn *conn, const qmp_event *ev, void *opaque);

/* Called once per async command: with ret (borrowed, valid during the
 * call) on success, or ret == NULL and err set on failure. */
typedef void (*qmp_reply_cb)(qmp_conn *conn, json_object *ret,
                             const qmp_error *err, void *opaque);

typedef struct {
    uint64_t messages_in;
    uint64_t commands_sent;
    uint64_t events_received;
    uint64_t events_dropped;  /* queue overflow */
    uint64_t stray_replies;   /* replies whose id matched nothing (late after a timeout) */
} qmp_counters;

/* --- connection --- */

/* Connect to a QMP unix socket, read the greeting within timeout_ms and
 * negotiate capabilities within timeout_ms of it.  Returns NULL and fills
 * err on failure. */
qmp_conn *qmp_connect_unix(const char *path, int timeout_ms, qmp_error *err);

/* Take ownership of an already connected stream fd and do the same
 * handshake (used by tests with socketpair()). */
qmp_conn *qmp_open_fd(int fd, int timeout_ms, qmp_error *err);

/* The same without waiting: connect (a listener that is not accepting and
 * whose backlog is full is an error at once), return the connection, and
 * let qmp_pump() / qmp_expire() do the handshake.  ready runs once from
 * them: ret non-NULL when the greeting came within timeout_ms and the
 * capabilities were negotiated within timeout_ms of the pump that read it,
 * else err says why (no greeting, closed, garbage).  Send nothing before
 * ready. */
qmp_conn *qmp_connect_unix_async(const char *path, int timeout_ms, qmp_reply_cb ready, void *opaque,
                                 qmp_error *err);
qmp_conn *qmp_open_fd_async(int fd, int timeout_ms, qmp_reply_cb ready, void *opaque, qmp_error *err);

void qmp_close(qmp_conn *conn);

int qmp_fd(const qmp_conn *conn);
bool qmp_is_broken(const qmp_conn *conn);
/* Why the connection broke (code QMP_OK while it is healthy). */
const qmp_error *qmp_broken_reason(const qmp_conn *conn);
const qmp_counters *qmp_get_counters(const qmp_conn *conn);
/* QEMU version from the greeting, e.g. 7.2.0; zeros if unknown. */
void qmp_qemu_version(const qmp_conn *conn, int *major, int *minor, int *micro);

/* Cap on one incoming message, from now on (the handshake uses the
 * default); values below 256 bytes are raised to 256. */
void qmp_set_max_message(qmp_conn *conn, size_t max_bytes);

/* --- commands --- */

/* Send a command and wait for its reply.  args (may be NULL) is
 * consumed.  On success *ret (if ret != NULL) receives a new reference
 * to the "return" value, which the caller must json_object_put(). */
int qmp_execute(qmp_conn *conn, const char *command, json_object *args,
                json_object **ret, int timeout_ms, qmp_error *err);

/* Send a command; cb runs from qmp_pump() when the reply arrives, or
 * with QMP_ERR_TIMEOUT from qmp_expire() after timeout_ms, or with the
 * breaking error.  cb may send more, but must not qmp_close() the
 * connection.  The command goes out whole at once or the connection
 * breaks: a peer whose socket is full is not reading, and is not waited
 * for.  args is consumed.  Returns 0 or -1 (err filled, cb not called). */
int qmp_execute_async(qmp_conn *conn, const char *command, json_object *args,
                      int timeout_ms, qmp_reply_cb cb, void *opaque,
                      qmp_error *err);

/* The same with the arguments as JSON text (NULL: none), sent as they
 * are: for a caller's own constant arguments, a round of questions asked
 * every tick without building them as objects each time.  The caller
 * vouches that args is one JSON object. */
int qmp_execute_async_text(qmp_conn *conn, const char *command, const char *args, int timeout_ms, qmp_reply_cb cb,
                           void *opaque, qmp_error *err);

/* Hold the commands sent from now on (qmp_execute_async: each is pending
 * at once, its deadline running) and send them together, in one write, at
 * qmp_uncork(): a round of questions to one QEMU costs one system call
 * instead of one a command.  No blocking call in between: its command
 * would wait for the uncork.  What the uncork cannot send breaks the
 * connection, and every held command's callback runs with the reason.
 * qmp_uncork returns 0, or -1 (err filled). */
void qmp_cork(qmp_conn *conn);
int qmp_uncork(qmp_conn *conn, qmp_error *err);

/* Wait up to timeout_ms (0: do not wait) for input, read what is
 * available (64 KiB at most: a peer that never stops sending does not
 * hold the caller), dispatch replies and queue events, then deliver queued
 * events to the event callback if one is set.  Returns 0, or -1 when
 * the connection is (now) broken. */
int qmp_pump(qmp_conn *conn, int timeout_ms, qmp_error *err);

/* Fail async commands whose deadline has passed.  Call periodically
 * in event-driven use; qmp_pump() calls it too. */
void qmp_expire(qmp_conn *conn);

/* --- events --- */

/* With a callback set, qmp_pump() delivers queued events to it.  Without
 * one, events stay queued (bounded) for qmp_next_event(). */
void qmp_set_event_cb(qmp_conn *conn, qmp_event_cb cb, void *opaque);

/* Pop the oldest queued event; NULL if none.  Free with qmp_event_free. */
qmp_event *qmp_next_event(qmp_conn *conn);

/* Wait for an event named name (queued events are searched first;
 * others stay queued).  Returns it, or NULL with err set. */
qmp_event *qmp_wait_event(qmp_conn *conn, const char *name, int timeout_ms,
                          qmp_error *err);

size_t qmp_pending_events(const qmp_conn *conn);

/* --- typed wrappers (qmp_commands.c) --- */

/* Values the guest did not report are -1 (QEMU's convention).  The
 * numbers come from the guest: callers must treat them as untrusted. */
typedef struct {
    int64_t swap_in;          /* bytes swapped in (guest reports pages*4k) */
    int64_t swap_out;
    int64_t major_faults;
    int64_t minor_faults;
    int64_t free_memory;      /* bytes */
    int64_t total_memory;
    int64_t available_memory;
    int64_t disk_caches;
    int64_t htlb_pgalloc;
    int64_t htlb_pgfail;
    /* QEMU 9.2+ with a Linux 6.12+ guest (VIRTIO_BALLOON_S_OOM_KILL ...
     * DIRECT_RECLAIM): cumulative counts of the guest's OOM kills, its
     * allocation stalls (allocstall_*), and the pages its kswapd and its
     * direct reclaim scanned and reclaimed */
    int64_t oom_kills;
    int64_t alloc_stalls;
    int64_t async_scans, direct_scans;
    int64_t async_reclaims, direct_reclaims;
    int64_t last_update;      /* host timestamp (s); 0 = never updated */
} qmp_guest_stats;

int qmp_query_balloon(qmp_conn *conn, uint64_t *actual_bytes, int timeout_ms,
                      qmp_error *err);
int qmp_balloon(qmp_conn *conn, uint64_t target_bytes, int timeout_ms,
                qmp_error *err);
int qmp_set_stats_polling(qmp_conn *conn, const char *qom_path, int seconds,
                          int timeout_ms, qmp_error *err);
int qmp_set_stats_polling_async(qmp_conn *conn, const char *qom_path, int seconds, int timeout_ms,
                                qmp_reply_cb cb, void *opaque, qmp_error *err);
int qmp_get_guest_stats(qmp_conn *conn, const char *qom_path,
                        qmp_guest_stats *out, int timeout_ms, qmp_error *err);
int qmp_query_memory_size_summary(qmp_conn *conn, uint64_t *base_bytes,
                                  uint64_t *plugged_bytes, int timeout_ms,
                                  qmp_error *err);

/* Bytes read by all of the guest's block devices so far (sum of
 * query-blockstats' rd_bytes): host-side evidence of guest I/O. */
int qmp_query_blockstats_read(qmp_conn *conn, uint64_t *rd_bytes, int timeout_ms, qmp_error *err);

/* Pure parsers behind the wrappers, for async users and tests. */
int qmp_parse_blockstats_read(json_object *ret, uint64_t *rd_bytes, qmp_error *err);
int qmp_parse_guest_stats(json_object *ret, qmp_guest_stats *out, qmp_error *err);
int qmp_parse_query_balloon(json_object *ret, uint64_t *actual_bytes, qmp_error *err);
/* x-query-virtio-status (QEMU 7.2+, unstable): whether the guest's driver
 * took the device feature named feature ("VIRTIO_BALLOON_F_REPORTING"):
 * *taken 1 or 0 once the driver is ready (VIRTIO_CONFIG_S_DRIVER_OK),
 * -1 before. */
int qmp_parse_virtio_guest_feature(json_object *ret, const char *feature, int *taken, qmp_error *err);
int qmp_parse_memory_size_summary(json_object *ret, uint64_t *base_bytes,
                                  uint64_t *plugged_bytes, qmp_error *err);

/* A query-memory-devices reply: the DIMMs, and the first virtio-mem
 * device (QEMU 5.1+; hw/virtio/virtio-mem.c: "size" is what the guest has
 * plugged, "requested-size" what it was asked to have).  The balloon's
 * range is the boot memory and the DIMMs, not virtio-mem's memory
 * (get_current_ram_size() in QEMU 7.2's hw/mem/memory-device.c). */
typedef struct {
    uint64_t dimm_bytes;       /* DIMMs and NVDIMMs plugged */
    unsigned vmem_devices;     /* virtio-mem devices; 0: none, and the vmem_ fields are 0 */
    char vmem_id[64];          /* the first one's id ("" none: its QOM path is not known) */
    uint64_t vmem_block_bytes, vmem_max_bytes, vmem_requested_bytes, vmem_plugged_bytes;
} qmp_memory_devices;
/* The QOM path of a device added with id=ID (a balloon, a virtio-mem device). */
#define QMP_PERIPHERAL_PATH_FMT "/machine/peripheral/%s"
int qmp_parse_memory_devices(json_object *ret, qmp_memory_devices *out, qmp_error *err);

#ifdef __cplusplus
}
#endif

#endif

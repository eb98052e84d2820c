/*
 * A QMP connection's state, for libqmp's own files: qmp_client.c (the
 * connection, input, events) and qmp_send.c (output).
 */
#ifndef MEMBAL_QMP_CONN_H
#define MEMBAL_QMP_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "qmp/qmp.h"
#include "qmp/qmp_framer.h"

typedef struct pending {
    struct pending *next;
    uint64_t id;
    int64_t deadline_ms;
    qmp_reply_cb cb;
    void *opaque;
} pending;

typedef struct event_node {
    struct event_node *next;
    qmp_event *ev;
} event_node;

typedef enum { ST_GREETING, ST_READY, ST_BROKEN } conn_state;

struct qmp_conn {
    int fd;
    conn_state state;
    qmp_error broken;
    qmp_framer framer;
    json_tokener *tok;
    uint64_t next_id;
    pending *pending;
    event_node *ev_head, *ev_tail;
    size_t ev_count;
    qmp_event_cb ev_cb;
    void *ev_opaque;
    int ver_major, ver_minor, ver_micro;
    qmp_counters counters;
    /* the handshake of an async open, until ready has run */
    qmp_reply_cb ready;
    void *ready_opaque;
    int64_t greet_deadline_ms;
    int greet_timeout_ms;
    /* output: what goes out in the next write, kept for the one after */
    char *out;
    size_t out_len, out_cap;
    bool corked;             /* qmp_cork(): held until qmp_uncork() */
};

/* err (when given) set to code and the message. */
void qmp_conn_err(qmp_error *err, qmp_err_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Mark the connection unusable and fail every pending command with the
 * reason (callbacks run here). */
void qmp_conn_break(qmp_conn *c, const qmp_error *why);

/* -1 with why the connection broke in err (when given). */
static inline int qmp_conn_broken(const qmp_conn *c, qmp_error *err)
{
    if (err)
        *err = c->broken;
    return -1;
}

static inline int64_t qmp_conn_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif

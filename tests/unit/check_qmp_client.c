/*
 * libqmp against a scripted fake QMP server: the handshake, replies
 * matched by id, events, and every fault the client must survive.
 */
#include <check.h>

#include "check_run.h"
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fake_qmp.h"
#include "qmp/qmp.h"
#include "qmp/qmp_glib.h"
#include "qmp/qmp_internal.h"

#define T_MS 3000

static fake_qmp *server;

static qmp_conn *open_scripted(const fq_step *script)
{
    int fd;
    server = fake_qmp_start(script, &fd);
    ck_assert_ptr_nonnull(server);
    qmp_error err = { 0 };
    qmp_conn *c = qmp_open_fd(fd, T_MS, &err);
    ck_assert_msg(c != NULL, "handshake failed: %s", err.msg);
    return c;
}

static void finish(qmp_conn *c)
{
    qmp_close(c);
    const char *fail = fake_qmp_join(server);
    ck_assert_msg(fail == NULL, "fake server: %s", fail ? fail : "");
    fake_qmp_free(server);
    server = NULL;
}

static double elapsed_s(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

START_TEST(handshake_and_version)
{
    static const fq_step script[] = { FQ_HANDSHAKE, { FQ_END, NULL, 0 } };
    qmp_conn *c = open_scripted(script);
    int maj, min, mic;
    qmp_qemu_version(c, &maj, &min, &mic);
    ck_assert_int_eq(maj, 7);
    ck_assert_int_eq(min, 2);
    ck_assert_int_eq(mic, 0);
    ck_assert(!qmp_is_broken(c));
    finish(c);
}
END_TEST

START_TEST(query_balloon_typed)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_REPLY, "{\"return\": {\"actual\": 536870912}, \"id\": %ID%}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    uint64_t actual = 0;
    qmp_error err = { 0 };
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), 0);
    ck_assert_uint_eq(actual, 536870912ULL);
    finish(c);
}
END_TEST

START_TEST(reply_split_across_reads)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_REPLY, "{\"return\": {\"act", 0 },
        { FQ_SLEEP, NULL, 50 },
        { FQ_SEND, "ual\": 1073741824}, \"i", 0 },
        { FQ_SLEEP, NULL, 50 },
        { FQ_REPLY, "d\": %ID%}\r", 0 },
        { FQ_SLEEP, NULL, 50 },
        { FQ_SEND, "\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    uint64_t actual = 0;
    qmp_error err = { 0 };
    ck_assert_msg(qmp_query_balloon(c, &actual, T_MS, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(actual, 1073741824ULL);
    finish(c);
}
END_TEST

START_TEST(event_and_reply_in_one_read)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "balloon", 0 },
        { FQ_REPLY,
          "{\"timestamp\": {\"seconds\": 1700000000, \"microseconds\": 12}, "
          "\"event\": \"BALLOON_CHANGE\", \"data\": {\"actual\": 402653184}}\r\n"
          "{\"return\": {}, \"id\": %ID%}\r\n"
          "{\"timestamp\": {\"seconds\": 1700000001, \"microseconds\": 0}, "
          "\"event\": \"BALLOON_CHANGE\", \"data\": {\"actual\": 268435456}}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    qmp_error err = { 0 };
    ck_assert_int_eq(qmp_balloon(c, 268435456ULL, T_MS, &err), 0);
    ck_assert_uint_eq(qmp_pending_events(c), 2);
    qmp_event *ev = qmp_wait_event(c, "BALLOON_CHANGE", T_MS, &err);
    ck_assert_ptr_nonnull(ev);
    ck_assert_str_eq(ev->name, "BALLOON_CHANGE");
    ck_assert_int_eq(ev->ts_seconds, 1700000000);
    ck_assert_int_eq(ev->ts_useconds, 12);
    json_object *actual;
    ck_assert(json_object_object_get_ex(ev->data, "actual", &actual));
    ck_assert_int_eq(json_object_get_int64(actual), 402653184);
    qmp_event_free(ev);
    ev = qmp_next_event(c);
    ck_assert_ptr_nonnull(ev);
    ck_assert_int_eq(ev->ts_seconds, 1700000001);
    qmp_event_free(ev);
    ck_assert_ptr_null(qmp_next_event(c));
    finish(c);
}
END_TEST

START_TEST(error_reply_is_a_value)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "balloon", 0 },
        { FQ_REPLY, "{\"id\": %ID%, \"error\": {\"class\": \"DeviceNotActive\", "
                    "\"desc\": \"No balloon device has been activated\"}}\r\n", 0 },
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_REPLY, "{\"return\": {\"actual\": 4096}, \"id\": %ID%}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    qmp_error err = { 0 };
    ck_assert_int_eq(qmp_balloon(c, 1 << 30, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_COMMAND);
    ck_assert_str_eq(err.msg, "DeviceNotActive: No balloon device has been activated");
    /* an error reply does not break the connection */
    ck_assert(!qmp_is_broken(c));
    uint64_t actual;
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), 0);
    ck_assert_uint_eq(actual, 4096);
    finish(c);
}
END_TEST

START_TEST(peer_closes_mid_command)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_SEND, "{\"return\": {\"act", 0 },
        { FQ_CLOSE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    qmp_error err = { 0 };
    uint64_t actual;
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_CLOSED);
    ck_assert_msg(strstr(err.msg, "middle of a message") != NULL, "%s", err.msg);
    ck_assert(qmp_is_broken(c));
    /* later calls fail at once with the same reason */
    qmp_error err2 = { 0 };
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err2), -1);
    ck_assert_int_eq(err2.code, QMP_ERR_CLOSED);
    ck_assert_str_eq(err2.msg, err.msg);
    finish(c);
}
END_TEST

START_TEST(timeout_then_late_reply_is_stray)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_SLEEP, NULL, 600 },
        { FQ_REPLY, "{\"return\": {\"actual\": 1}, \"id\": %ID%}\r\n", 0 },
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_REPLY, "{\"return\": {\"actual\": 2}, \"id\": %ID%}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    qmp_error err = { 0 };
    uint64_t actual = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(qmp_query_balloon(c, &actual, 200, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_TIMEOUT);
    double took = elapsed_s(&t0);
    ck_assert_msg(took >= 0.19 && took < 0.55, "timeout took %.3f s", took);
    ck_assert(!qmp_is_broken(c));
    usleep(700 * 1000);
    /* the late answer (actual 1) must not be taken for the new command */
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), 0);
    ck_assert_uint_eq(actual, 2);
    ck_assert_uint_eq(qmp_get_counters(c)->stray_replies, 1);
    finish(c);
}
END_TEST

START_TEST(garbage_breaks_with_protocol_error)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_SEND, "\x01\x02 this is not json }}}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    qmp_error err = { 0 };
    uint64_t actual;
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_PROTOCOL);
    ck_assert_msg(strstr(err.msg, "invalid JSON") != NULL, "%s", err.msg);
    finish(c);
}
END_TEST

START_TEST(trailing_data_and_non_object)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_SEND, "[1, 2, 3]\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    qmp_error err = { 0 };
    uint64_t actual;
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_PROTOCOL);
    ck_assert_msg(strstr(err.msg, "array") != NULL, "%s", err.msg);
    finish(c);

    static const fq_step script2[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_REPLY, "{\"return\": {\"actual\": 1}, \"id\": %ID%} {\"x\": 1}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    c = open_scripted(script2);
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_PROTOCOL);
    finish(c);
}
END_TEST

static char long_line[300000];

START_TEST(over_long_line_is_capped)
{
    memset(long_line, ' ', sizeof(long_line) - 1);
    long_line[0] = '{';
    long_line[sizeof(long_line) - 1] = '\0';
    const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_SEND, long_line, 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    qmp_set_max_message(c, 65536);
    qmp_error err = { 0 };
    uint64_t actual;
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_TOO_LONG);
    ck_assert_str_eq(err.msg, "QMP message exceeds the 65536 byte limit");
    finish(c);
}
END_TEST

START_TEST(no_greeting_times_out)
{
    static const fq_step script[] = { { FQ_SLEEP, NULL, 800 }, { FQ_END, NULL, 0 } };
    int fd;
    server = fake_qmp_start(script, &fd);
    qmp_error err = { 0 };
    qmp_conn *c = qmp_open_fd(fd, 300, &err);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(err.code, QMP_ERR_TIMEOUT);
    ck_assert_str_eq(err.msg, "no QMP greeting within 300 ms");
    fake_qmp_join(server);
    fake_qmp_free(server);
}
END_TEST

typedef struct {
    int calls;
    bool ok;
    qmp_error err;
} ready_slot;

static void on_ready(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    ready_slot *r = opaque;
    r->calls++;
    r->ok = ret != NULL && !err;
    if (err)
        r->err = *err;
}

/* The async handshake returns at once and ends in qmp_pump(): ready runs
 * exactly once, with success after a greeting, with the timeout without
 * one -- nothing in between waits. */
START_TEST(async_open_waits_for_nothing)
{
    static const fq_step ok_script[] = { FQ_HANDSHAKE, { FQ_END, NULL, 0 } };
    int fd;
    server = fake_qmp_start(ok_script, &fd);
    ready_slot r = { 0 };
    qmp_error err = { 0 };
    qmp_conn *c = qmp_open_fd_async(fd, T_MS, on_ready, &r, &err);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(r.calls, 0);
    for (int i = 0; i < 100 && !r.calls; i++)
        qmp_pump(c, 20, NULL);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_msg(r.ok, "%s", r.err.msg);
    finish(c);

    static const fq_step mute_script[] = { { FQ_SLEEP, NULL, 800 }, { FQ_END, NULL, 0 } };
    server = fake_qmp_start(mute_script, &fd);
    r = (ready_slot){ 0 };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    c = qmp_open_fd_async(fd, 200, on_ready, &r, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_ptr_nonnull(c);
    double waited_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_msg(waited_ms < 50 && r.calls == 0, "the async open waited %.0f ms", waited_ms);
    qmp_pump(c, 0, NULL);
    ck_assert_int_eq(r.calls, 0);
    for (int i = 0; i < 50 && !r.calls; i++)
        qmp_pump(c, 20, NULL);
    ck_assert_int_eq(r.calls, 1);
    ck_assert_int_eq(r.err.code, QMP_ERR_TIMEOUT);
    ck_assert_str_eq(r.err.msg, "no QMP greeting within 200 ms");
    qmp_close(c);
    ck_assert_int_eq(r.calls, 1); /* not again at close */
    fake_qmp_join(server);
    fake_qmp_free(server);
    server = NULL;
}
END_TEST

START_TEST(capabilities_refused)
{
    static const fq_step script[] = {
        { FQ_SEND, FQ_GREETING, 0 },
        { FQ_EXPECT, "qmp_capabilities", 0 },
        { FQ_REPLY, "{\"id\": %ID%, \"error\": {\"class\": \"CommandNotFound\", "
                    "\"desc\": \"Capabilities negotiation is already complete\"}}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    int fd;
    server = fake_qmp_start(script, &fd);
    qmp_error err = { 0 };
    ck_assert_ptr_null(qmp_open_fd(fd, T_MS, &err));
    ck_assert_int_eq(err.code, QMP_ERR_COMMAND);
    ck_assert_ptr_null(fake_qmp_join(server));
    fake_qmp_free(server);
}
END_TEST

START_TEST(event_queue_is_bounded)
{
    static char burst[QMP_EVENT_QUEUE_MAX * 2 * 64];
    size_t o = 0;
    for (int i = 0; i < QMP_EVENT_QUEUE_MAX * 2; i++)
        o += (size_t)snprintf(burst + o, sizeof(burst) - o,
                              "{\"event\": \"E\", \"data\": {\"n\": %d}}\r\n", i);
    const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_SEND, burst, 0 },
        { FQ_REPLY, "{\"return\": {\"actual\": 7}, \"id\": %ID%}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    qmp_error err = { 0 };
    uint64_t actual;
    ck_assert_int_eq(qmp_query_balloon(c, &actual, T_MS, &err), 0);
    ck_assert_uint_eq(qmp_pending_events(c), QMP_EVENT_QUEUE_MAX);
    ck_assert_uint_eq(qmp_get_counters(c)->events_dropped, QMP_EVENT_QUEUE_MAX);
    qmp_event *ev = qmp_next_event(c); /* the oldest kept is number MAX */
    json_object *n;
    ck_assert(json_object_object_get_ex(ev->data, "n", &n));
    ck_assert_int_eq(json_object_get_int(n), QMP_EVENT_QUEUE_MAX);
    qmp_event_free(ev);
    finish(c);
}
END_TEST

/* A peer that sends without pause (1 MiB of events here): one pump reads
 * 64 KiB at most and returns, the next pumps read the rest; nothing is
 * lost but events beyond the queue's bound. */
START_TEST(flood_is_read_a_bounded_amount_per_pump)
{
    enum { LINES = 8192, LINE = 128 };
    static char flood[LINES * LINE + 1];
    for (int i = 0; i < LINES; i++) {
        char *l = flood + (size_t)i * LINE;
        int n = snprintf(l, LINE + 1, "{\"event\": \"E\", \"data\": {\"n\": %d}, \"pad\": \"", i);
        memset(l + n, 'x', LINE - (size_t)n - 4);
        memcpy(l + LINE - 4, "\"}\r\n", 4);
    }
    const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_SLEEP, NULL, 100 }, /* the handshake's pumps are over */
        { FQ_SEND, flood, 0 },
        { FQ_SLEEP, NULL, 200 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    uint64_t before = qmp_get_counters(c)->messages_in;
    usleep(300 * 1000); /* the socket's buffer (about 200 KiB) fills */
    int pumps = 0, most = 0;
    while (qmp_get_counters(c)->messages_in - before < LINES && pumps < 1000) {
        uint64_t was = qmp_get_counters(c)->messages_in;
        ck_assert_int_ge(qmp_pump(c, 1000, NULL), 0);
        int got = (int)(qmp_get_counters(c)->messages_in - was);
        most = got > most ? got : most;
        pumps++;
    }
    fprintf(stderr, "a flood of %d lines: read in %d pumps, at most %d lines in one\n", LINES, pumps, most);
    ck_assert_uint_eq(qmp_get_counters(c)->messages_in - before, LINES);
    ck_assert_int_le(most, 16 * 4096 / LINE + 1);
    ck_assert_uint_eq(qmp_pending_events(c), QMP_EVENT_QUEUE_MAX);
    ck_assert(!qmp_is_broken(c));
    finish(c);
}
END_TEST

typedef struct {
    int calls;
    uint64_t actual;
    qmp_err_code code;
} async_slot;

static void on_reply(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    (void)c;
    async_slot *s = opaque;
    s->calls++;
    if (err) {
        s->code = err->code;
        return;
    }
    qmp_parse_query_balloon(ret, &s->actual, NULL);
}

START_TEST(async_replies_out_of_order)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_EXPECT, "query-balloon", 0 },
        /* answer the second first: ids are 2 and 3 after the handshake */
        { FQ_SEND, "{\"return\": {\"actual\": 333}, \"id\": 3}\r\n", 0 },
        { FQ_SEND, "{\"return\": {\"actual\": 222}, \"id\": 2}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    async_slot a = { 0 }, b = { 0 };
    qmp_error err = { 0 };
    ck_assert_int_eq(qmp_execute_async(c, "query-balloon", NULL, T_MS, on_reply, &a, &err), 0);
    ck_assert_int_eq(qmp_execute_async(c, "query-balloon", NULL, T_MS, on_reply, &b, &err), 0);
    for (int i = 0; i < 50 && (a.calls == 0 || b.calls == 0); i++)
        qmp_pump(c, 100, NULL);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_int_eq(b.calls, 1);
    ck_assert_uint_eq(a.actual, 222);
    ck_assert_uint_eq(b.actual, 333);
    finish(c);
}
END_TEST

START_TEST(async_pending_fail_when_broken)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_CLOSE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    async_slot a = { 0 };
    ck_assert_int_eq(qmp_execute_async(c, "query-balloon", NULL, T_MS, on_reply, &a, NULL), 0);
    for (int i = 0; i < 50 && a.calls == 0; i++)
        qmp_pump(c, 100, NULL);
    ck_assert_int_eq(a.calls, 1);
    ck_assert_int_eq(a.code, QMP_ERR_CLOSED);
    finish(c);
}
END_TEST

/* A QEMU that does not read its socket: commands are sent without ever
 * waiting for room (the daemon's main loop must not block on it); once its
 * buffer is full the connection breaks with the reason, and what was
 * pending fails with it. */
START_TEST(peer_not_reading_breaks_without_blocking)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_SLEEP, NULL, 1000 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    char big[4096];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    async_slot first = { 0 }, rest = { 0 };
    qmp_error err = { 0 };
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int sent = 0;
    for (; sent < 10000; sent++) {
        json_object *args = json_object_new_object();
        json_object_object_add(args, "pad", json_object_new_string(big));
        if (qmp_execute_async(c, "query-balloon", args, T_MS, on_reply, sent ? &rest : &first, &err) < 0)
            break;
    }
    double took = elapsed_s(&t0);
    fprintf(stderr, "a peer not reading: %d commands of 4 KiB sent before the break, in %.3f s\n", sent, took);
    ck_assert_int_lt(sent, 10000);
    ck_assert_int_gt(sent, 0);
    ck_assert_msg(strstr(err.msg, "not reading its QMP socket") != NULL, "%s", err.msg);
    ck_assert(qmp_is_broken(c));
    ck_assert_int_eq(first.calls, 1); /* pending ones failed with the break */
    ck_assert_int_eq(first.code, QMP_ERR_IO);
    ck_assert_int_eq(rest.calls, sent - 1);
    ck_assert_msg(took < 1.0, "sending took %.3f s: it waited for room", took);
    finish(c);
}
END_TEST

/* A connection over a socketpair whose other end the test holds: the
 * greeting and the capabilities' answer (id 1) are there before the
 * handshake starts, and the capabilities line is read off again. */
static qmp_conn *open_raw(int *peer)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    static const char hello[] = FQ_GREETING "{\"return\": {}, \"id\": 1}\r\n";
    ck_assert_int_eq(write(sv[1], hello, strlen(hello)), (ssize_t)strlen(hello));
    qmp_error err = { 0 };
    qmp_conn *c = qmp_open_fd(sv[0], T_MS, &err);
    ck_assert_msg(c != NULL, "handshake failed: %s", err.msg);
    char buf[256];
    ck_assert_int_gt(read(sv[1], buf, sizeof(buf)), 0); /* qmp_capabilities */
    *peer = sv[1];
    return c;
}

/* A corked round goes out at the uncork, in one write: nothing before,
 * and every line at once after; the answers reach each command's
 * callback as ever. */
START_TEST(corked_commands_go_out_in_one_write)
{
    int peer;
    qmp_conn *c = open_raw(&peer);
    async_slot a[3] = { 0 };
    qmp_cork(c);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(qmp_execute_async(c, "query-balloon", NULL, T_MS, on_reply, &a[i], NULL), 0);
    char buf[4096];
    ck_assert_int_eq(recv(peer, buf, sizeof(buf), MSG_DONTWAIT), -1); /* held */
    ck_assert_uint_eq(qmp_get_counters(c)->commands_sent, 4);
    qmp_error err = { 0 };
    ck_assert_int_eq(qmp_uncork(c, &err), 0);
    ssize_t n = recv(peer, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    ck_assert_int_gt(n, 0);
    buf[n] = '\0';
    int lines = 0;
    for (const char *p = buf; (p = strstr(p, "\r\n")); p += 2)
        lines++;
    ck_assert_int_eq(lines, 3); /* all of them in one read: one write */
    ck_assert_ptr_nonnull(strstr(buf, "\"id\":2"));
    ck_assert_ptr_nonnull(strstr(buf, "\"id\":4"));
    static const char answers[] = "{\"return\": {\"actual\": 2}, \"id\": 2}\r\n"
                                  "{\"return\": {\"actual\": 3}, \"id\": 3}\r\n"
                                  "{\"return\": {\"actual\": 4}, \"id\": 4}\r\n";
    ck_assert_int_eq(write(peer, answers, strlen(answers)), (ssize_t)strlen(answers));
    for (int i = 0; i < 50 && a[2].calls == 0; i++)
        qmp_pump(c, 100, NULL);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(a[i].calls, 1);
        ck_assert_uint_eq(a[i].actual, (uint64_t)i + 2);
    }
    /* uncorked again: the next command goes out at once */
    async_slot d = { 0 };
    ck_assert_int_eq(qmp_execute_async(c, "query-balloon", NULL, T_MS, on_reply, &d, NULL), 0);
    ck_assert_int_gt(recv(peer, buf, sizeof(buf), MSG_DONTWAIT), 0);
    qmp_close(c);
    ck_assert_int_eq(d.calls, 1); /* failed with the close */
    close(peer);
}
END_TEST

/* An uncork that cannot send (QEMU went away meanwhile) breaks the
 * connection, and every held command's callback runs with the reason. */
START_TEST(uncork_that_cannot_send_fails_every_held_command)
{
    int peer;
    qmp_conn *c = open_raw(&peer);
    async_slot a[3] = { 0 };
    qmp_cork(c);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(qmp_execute_async(c, "query-balloon", NULL, T_MS, on_reply, &a[i], NULL), 0);
    close(peer);
    qmp_error err = { 0 };
    ck_assert_int_eq(qmp_uncork(c, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_CLOSED);
    ck_assert(qmp_is_broken(c));
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(a[i].calls, 1);
        ck_assert_int_eq(a[i].code, QMP_ERR_CLOSED);
    }
    /* broken while corked: the uncork says so, nothing runs twice */
    qmp_cork(c);
    ck_assert_int_eq(qmp_execute_async(c, "query-balloon", NULL, T_MS, on_reply, &a[0], NULL), -1);
    ck_assert_int_eq(qmp_uncork(c, &err), -1);
    ck_assert_int_eq(a[0].calls, 1);
    qmp_close(c);
}
END_TEST

/* A timeout's callback that breaks the connection (here: it sends, and
 * the send fails) while qmp_expire walks the pending commands: every
 * callback still runs once, and nothing freed is touched (valgrind in
 * make check; the walk used to keep a pointer into a command the break
 * freed). */
static qmp_conn *expiring_conn;

static void send_on_timeout(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    on_reply(c, ret, err, opaque);
    qmp_execute_async(expiring_conn, "query-balloon", NULL, T_MS, on_reply, opaque, NULL);
}

START_TEST(timeout_callback_that_breaks_the_connection)
{
    expiring_conn = qmp_conn_new_detached(); /* no socket: a send breaks it */
    async_slot a = { 0 }, b = { 0 }, c = { 0 };
    /* newest first in the list: a (not due) is walked past before c and b */
    ck_assert_int_eq(qmp_conn_add_pending(expiring_conn, 1, 0, on_reply, &b), 0);
    ck_assert_int_eq(qmp_conn_add_pending(expiring_conn, 2, 0, send_on_timeout, &c), 0);
    ck_assert_int_eq(qmp_conn_add_pending(expiring_conn, 3, 60000, on_reply, &a), 0);
    usleep(2000);
    qmp_expire(expiring_conn);
    ck_assert(qmp_is_broken(expiring_conn));
    ck_assert_int_eq(c.calls, 1); /* its timeout; its own send failed at once (-1, no callback) */
    ck_assert_int_eq(b.calls, 1);
    ck_assert_int_eq(b.code, QMP_ERR_TIMEOUT);
    ck_assert_int_eq(a.calls, 1); /* failed with the break */
    ck_assert_int_ne(a.code, QMP_ERR_TIMEOUT);
    qmp_close(expiring_conn);
    expiring_conn = NULL;
}
END_TEST

START_TEST(guest_stats_parse)
{
    /* as QEMU 7.2 returns it for a Linux guest */
    json_object *ret = json_tokener_parse(
        "{\"stats\": {\"stat-swap-out\": 0, \"stat-available-memory\": 398131200, "
        "\"stat-free-memory\": 402407424, \"stat-minor-faults\": 2791, "
        "\"stat-major-faults\": 3, \"stat-total-memory\": 479657984, "
        "\"stat-swap-in\": 0, \"stat-disk-caches\": 6950912, "
        "\"stat-htlb-pgalloc\": 0, \"stat-htlb-pgfail\": 0}, \"last-update\": 1764748829}");
    qmp_guest_stats st;
    ck_assert_int_eq(qmp_parse_guest_stats(ret, &st, NULL), 0);
    ck_assert_int_eq(st.total_memory, 479657984);
    ck_assert_int_eq(st.free_memory, 402407424);
    ck_assert_int_eq(st.available_memory, 398131200);
    ck_assert_int_eq(st.disk_caches, 6950912);
    ck_assert_int_eq(st.major_faults, 3);
    ck_assert_int_eq(st.minor_faults, 2791);
    ck_assert_int_eq(st.swap_in, 0);
    ck_assert_int_eq(st.htlb_pgfail, 0);
    ck_assert_int_eq(st.last_update, 1764748829);
    ck_assert_int_eq(st.oom_kills, -1); /* QEMU 7.2 has no such statistic */
    ck_assert_int_eq(st.alloc_stalls, -1);
    json_object_put(ret);

    /* QEMU 9.2 with a Linux 6.12 guest adds six (virtio-balloon.c's
     * balloon_stat_names, VIRTIO_BALLOON_S_OOM_KILL ... DIRECT_RECLAIM) */
    ret = json_tokener_parse(
        "{\"stats\": {\"stat-swap-in\": 0, \"stat-available-memory\": 398131200, "
        "\"stat-oom-kills\": 2, \"stat-alloc-stalls\": 17, \"stat-async-scans\": 9000, "
        "\"stat-direct-scans\": 1200, \"stat-async-reclaims\": 8000, \"stat-direct-reclaims\": 900}, "
        "\"last-update\": 1764748830}");
    ck_assert_int_eq(qmp_parse_guest_stats(ret, &st, NULL), 0);
    ck_assert_int_eq(st.oom_kills, 2);
    ck_assert_int_eq(st.alloc_stalls, 17);
    ck_assert_int_eq(st.async_scans, 9000);
    ck_assert_int_eq(st.direct_scans, 1200);
    ck_assert_int_eq(st.async_reclaims, 8000);
    ck_assert_int_eq(st.direct_reclaims, 900);
    json_object_put(ret);

    /* unreported (-1), missing, wrong-typed and negative stats are -1 */
    ret = json_tokener_parse(
        "{\"stats\": {\"stat-swap-in\": -1, \"stat-free-memory\": \"lots\", "
        "\"stat-total-memory\": -77, \"stat-disk-caches\": 1.5}, \"last-update\": 0}");
    ck_assert_int_eq(qmp_parse_guest_stats(ret, &st, NULL), 0);
    ck_assert_int_eq(st.swap_in, -1);
    ck_assert_int_eq(st.free_memory, -1);
    ck_assert_int_eq(st.total_memory, -1);
    ck_assert_int_eq(st.disk_caches, -1);
    ck_assert_int_eq(st.major_faults, -1);
    ck_assert_int_eq(st.last_update, 0);
    json_object_put(ret);

    qmp_error err = { 0 };
    ret = json_tokener_parse("{\"last-update\": 5}");
    ck_assert_int_eq(qmp_parse_guest_stats(ret, &st, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_PROTOCOL);
    json_object_put(ret);
    ck_assert_int_eq(qmp_parse_guest_stats(NULL, &st, &err), -1);
}
END_TEST

START_TEST(memory_size_summary_parse)
{
    json_object *ret = json_tokener_parse("{\"base-memory\": 536870912}");
    uint64_t base = 0, plugged = 99;
    ck_assert_int_eq(qmp_parse_memory_size_summary(ret, &base, &plugged, NULL), 0);
    ck_assert_uint_eq(base, 536870912ULL);
    ck_assert_uint_eq(plugged, 0);
    json_object_put(ret);
    ret = json_tokener_parse("{\"base-memory\": 1, \"plugged-memory\": -5}");
    ck_assert_int_eq(qmp_parse_memory_size_summary(ret, &base, &plugged, NULL), -1);
    json_object_put(ret);
    ret = json_tokener_parse("{\"actual\": -1}");
    ck_assert_int_eq(qmp_parse_query_balloon(ret, &base, NULL), -1);
    json_object_put(ret);
}
END_TEST

START_TEST(memory_devices_parse)
{
    /* QEMU 7.2's answer for a DIMM and two virtio-mem devices (what
     * query-memory-devices printed for the test guest, a DIMM added) */
    json_object *ret = json_tokener_parse(
        "[{\"type\": \"dimm\", \"data\": {\"size\": 134217728, \"id\": \"d0\", \"slot\": 0}},"
        " {\"type\": \"virtio-mem\", \"data\": {\"memdev\": \"/objects/vmem0\", \"memaddr\": 4294967296,"
        " \"block-size\": 2097152, \"size\": 268435456, \"node\": 0, \"max-size\": 1073741824,"
        " \"requested-size\": 268435456, \"id\": \"vmem0dev\"}},"
        " {\"type\": \"virtio-mem\", \"data\": {\"block-size\": 2097152, \"size\": 0, \"max-size\": 2097152,"
        " \"requested-size\": 0}}]");
    qmp_memory_devices md;
    ck_assert_int_eq(qmp_parse_memory_devices(ret, &md, NULL), 0);
    ck_assert_uint_eq(md.dimm_bytes, 134217728ULL);
    ck_assert_uint_eq(md.vmem_devices, 2);
    ck_assert_str_eq(md.vmem_id, "vmem0dev");
    ck_assert_uint_eq(md.vmem_plugged_bytes, 268435456ULL);
    ck_assert_uint_eq(md.vmem_requested_bytes, 268435456ULL);
    ck_assert_uint_eq(md.vmem_max_bytes, 1073741824ULL);
    ck_assert_uint_eq(md.vmem_block_bytes, 2097152ULL);
    json_object_put(ret);
    ret = json_tokener_parse("[]");
    ck_assert_int_eq(qmp_parse_memory_devices(ret, &md, NULL), 0);
    ck_assert_uint_eq(md.vmem_devices, 0);
    ck_assert_uint_eq(md.dimm_bytes, 0);
    json_object_put(ret);
    /* a device plugged beyond its own maximum is not believed */
    ret = json_tokener_parse("[{\"type\": \"virtio-mem\", \"data\": {\"block-size\": 2097152, \"size\": 4194304,"
                             " \"max-size\": 2097152, \"requested-size\": 0, \"id\": \"v\"}}]");
    qmp_error err;
    ck_assert_int_eq(qmp_parse_memory_devices(ret, &md, &err), -1);
    json_object_put(ret);
    ret = json_tokener_parse("[{\"type\": \"virtio-mem\"}]");
    ck_assert_int_eq(qmp_parse_memory_devices(ret, &md, &err), -1);
    json_object_put(ret);
    ret = json_tokener_parse("{\"return\": 1}");
    ck_assert_int_eq(qmp_parse_memory_devices(ret, &md, &err), -1);
    json_object_put(ret);
}
END_TEST

START_TEST(virtio_guest_feature_parse)
{
    /* as QEMU 7.2 answers x-query-virtio-status for a balloon with
     * free-page-reporting=on whose Linux 6.1 driver took it (shortened) */
    const char *used = "{\"name\": \"virtio-balloon\", \"status\": {\"statuses\": "
                       "[\"VIRTIO_CONFIG_S_ACKNOWLEDGE: Valid virtio device found\", "
                       "\"VIRTIO_CONFIG_S_FEATURES_OK: Feature negotiation complete\", "
                       "\"VIRTIO_CONFIG_S_DRIVER_OK: Driver setup and ready\"]}, "
                       "\"guest-features\": {\"unknown-dev-features\": 1099511627776, \"dev-features\": "
                       "[\"VIRTIO_BALLOON_F_REPORTING: Page reporting VQ enabled\", "
                       "\"VIRTIO_BALLOON_F_STATS_VQ: Guest memory stats VQ available\"], \"transports\": []}}";
    json_object *ret = json_tokener_parse(used);
    int taken = 7;
    ck_assert_int_eq(qmp_parse_virtio_guest_feature(ret, "VIRTIO_BALLOON_F_REPORTING", &taken, NULL), 0);
    ck_assert_int_eq(taken, 1);
    ck_assert_int_eq(qmp_parse_virtio_guest_feature(ret, "VIRTIO_BALLOON_F_REPORT", &taken, NULL), 0);
    ck_assert_int_eq(taken, 0); /* a prefix is not the feature */
    json_object_put(ret);
    /* a driver without it */
    ret = json_tokener_parse("{\"status\": {\"statuses\": [\"VIRTIO_CONFIG_S_DRIVER_OK: Driver setup and ready\"]}, "
                             "\"guest-features\": {\"dev-features\": [\"VIRTIO_BALLOON_F_STATS_VQ: x\"]}}");
    ck_assert_int_eq(qmp_parse_virtio_guest_feature(ret, "VIRTIO_BALLOON_F_REPORTING", &taken, NULL), 0);
    ck_assert_int_eq(taken, 0);
    json_object_put(ret);
    /* no driver yet (the guest still boots): not known */
    ret = json_tokener_parse("{\"status\": {\"statuses\": []}, \"guest-features\": {\"dev-features\": []}}");
    ck_assert_int_eq(qmp_parse_virtio_guest_feature(ret, "VIRTIO_BALLOON_F_REPORTING", &taken, NULL), 0);
    ck_assert_int_eq(taken, -1);
    json_object_put(ret);
    /* malformed */
    qmp_error err;
    ret = json_tokener_parse("{\"status\": {\"statuses\": 3}, \"guest-features\": {\"dev-features\": []}}");
    ck_assert_int_eq(qmp_parse_virtio_guest_feature(ret, "VIRTIO_BALLOON_F_REPORTING", &taken, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "statuses"));
    json_object_put(ret);
    ret = json_tokener_parse("{\"status\": {\"statuses\": [1]}, \"guest-features\": {}}");
    ck_assert_int_eq(qmp_parse_virtio_guest_feature(ret, "VIRTIO_BALLOON_F_REPORTING", &taken, &err), -1);
    json_object_put(ret);
    ret = json_tokener_parse("[]");
    ck_assert_int_eq(qmp_parse_virtio_guest_feature(ret, "VIRTIO_BALLOON_F_REPORTING", &taken, NULL), -1);
    json_object_put(ret);
}
END_TEST

START_TEST(blockstats_parse)
{
    /* as QEMU 7.2 answers for a guest with one virtio disk and an empty cdrom */
    json_object *ret = json_tokener_parse(
        "[{\"device\": \"virtio0\", \"node-name\": \"#block123\", \"stats\": "
        "{\"rd_bytes\": 12800, \"rd_operations\": 4, \"wr_bytes\": 0}}, "
        "{\"device\": \"virtio1\", \"stats\": {\"rd_bytes\": 1000}}, {\"device\": \"ide1-cd0\"}]");
    uint64_t rd = 0;
    ck_assert_int_eq(qmp_parse_blockstats_read(ret, &rd, NULL), 0);
    ck_assert_uint_eq(rd, 13800);
    json_object_put(ret);
    ret = json_tokener_parse("[{\"stats\": {\"rd_bytes\": -3}}]");
    ck_assert_int_eq(qmp_parse_blockstats_read(ret, &rd, NULL), -1);
    json_object_put(ret);
    ret = json_tokener_parse("{\"stats\": 1}");
    ck_assert_int_eq(qmp_parse_blockstats_read(ret, &rd, NULL), -1);
    json_object_put(ret);
}
END_TEST

START_TEST(connect_unix_socket)
{
    char dir[] = "/tmp/membal-qmp-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof(path), "%s/qmp.sock", dir);
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-memory-size-summary", 0 },
        { FQ_REPLY, "{\"return\": {\"base-memory\": 1073741824, \"plugged-memory\": 0}, \"id\": %ID%}\r\n", 0 },
        { FQ_END, NULL, 0 },
    };
    server = fake_qmp_start_unix(script, path);
    ck_assert_ptr_nonnull(server);
    qmp_error err = { 0 };
    qmp_conn *c = qmp_connect_unix(path, T_MS, &err);
    ck_assert_msg(c != NULL, "%s", err.msg);
    uint64_t base, plugged;
    ck_assert_int_eq(qmp_query_memory_size_summary(c, &base, &plugged, T_MS, &err), 0);
    ck_assert_uint_eq(base, 1073741824ULL);
    finish(c);
    unlink(path);
    rmdir(dir);

    ck_assert_ptr_null(qmp_connect_unix("/nonexistent/qmp.sock", T_MS, &err));
    ck_assert_int_eq(err.code, QMP_ERR_CLOSED);
    ck_assert_msg(strstr(err.msg, "/nonexistent/qmp.sock") != NULL, "%s", err.msg);
}
END_TEST

typedef struct {
    GMainLoop *loop;
    async_slot slot;
    int events;
    int broken;
    qmp_err_code broken_code;
} glib_ctx;

static void glib_on_event(qmp_conn *c, const qmp_event *ev, void *opaque)
{
    (void)c;
    glib_ctx *g = opaque;
    if (strcmp(ev->name, "BALLOON_CHANGE") == 0)
        g->events++;
}

static void glib_on_reply(qmp_conn *c, json_object *ret, const qmp_error *err, void *opaque)
{
    glib_ctx *g = opaque;
    on_reply(c, ret, err, &g->slot);
}

static void glib_on_broken(qmp_conn *c, const qmp_error *why, void *opaque)
{
    (void)c;
    glib_ctx *g = opaque;
    g->broken++;
    g->broken_code = why->code;
    g_main_loop_quit(g->loop);
}

static gboolean glib_guard(gpointer data)
{
    g_main_loop_quit(data);
    return G_SOURCE_REMOVE;
}

START_TEST(glib_main_loop_integration)
{
    static const fq_step script[] = {
        FQ_HANDSHAKE,
        { FQ_EXPECT, "query-balloon", 0 },
        { FQ_SLEEP, NULL, 100 },
        { FQ_REPLY, "{\"event\": \"BALLOON_CHANGE\", \"data\": {\"actual\": 5}}\r\n"
                    "{\"return\": {\"actual\": 5}, \"id\": %ID%}\r\n", 0 },
        { FQ_SLEEP, NULL, 100 },
        { FQ_CLOSE, NULL, 0 },
        { FQ_END, NULL, 0 },
    };
    qmp_conn *c = open_scripted(script);
    glib_ctx g = { 0 };
    g.loop = g_main_loop_new(NULL, FALSE);
    qmp_set_event_cb(c, glib_on_event, &g);
    qmp_glib_watch *w = qmp_glib_attach(c, NULL, glib_on_broken, &g);
    ck_assert_int_eq(qmp_execute_async(c, "query-balloon", NULL, T_MS, glib_on_reply, &g, NULL), 0);
    guint guard = g_timeout_add(5000, glib_guard, g.loop);
    g_main_loop_run(g.loop);
    g_source_remove(guard);
    ck_assert_int_eq(g.slot.calls, 1);
    ck_assert_uint_eq(g.slot.actual, 5);
    ck_assert_int_eq(g.events, 1);
    ck_assert_int_eq(g.broken, 1);
    ck_assert_int_eq(g.broken_code, QMP_ERR_CLOSED);
    qmp_glib_detach(w);
    g_main_loop_unref(g.loop);
    finish(c);
}
END_TEST

START_TEST(bad_arguments)
{
    static const fq_step script[] = { FQ_HANDSHAKE, { FQ_END, NULL, 0 } };
    qmp_conn *c = open_scripted(script);
    qmp_error err = { 0 };
    ck_assert_int_eq(qmp_balloon(c, 0, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_ARG);
    ck_assert_int_eq(qmp_execute(c, "x", json_object_new_array(), NULL, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_ARG);
    ck_assert_int_eq(qmp_execute(c, "", NULL, NULL, T_MS, &err), -1);
    ck_assert_int_eq(qmp_set_stats_polling(c, NULL, 2, T_MS, &err), -1);
    ck_assert_int_eq(err.code, QMP_ERR_ARG);
    ck_assert(!qmp_is_broken(c));
    finish(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qmp_client");
    TCase *tc = tcase_create("fake_server");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, handshake_and_version);
    tcase_add_test(tc, query_balloon_typed);
    tcase_add_test(tc, reply_split_across_reads);
    tcase_add_test(tc, event_and_reply_in_one_read);
    tcase_add_test(tc, error_reply_is_a_value);
    tcase_add_test(tc, peer_closes_mid_command);
    tcase_add_test(tc, timeout_then_late_reply_is_stray);
    tcase_add_test(tc, garbage_breaks_with_protocol_error);
    tcase_add_test(tc, trailing_data_and_non_object);
    tcase_add_test(tc, over_long_line_is_capped);
    tcase_add_test(tc, no_greeting_times_out);
    tcase_add_test(tc, async_open_waits_for_nothing);
    tcase_add_test(tc, capabilities_refused);
    tcase_add_test(tc, event_queue_is_bounded);
    tcase_add_test(tc, flood_is_read_a_bounded_amount_per_pump);
    tcase_add_test(tc, async_replies_out_of_order);
    tcase_add_test(tc, async_pending_fail_when_broken);
    tcase_add_test(tc, timeout_callback_that_breaks_the_connection);
    tcase_add_test(tc, peer_not_reading_breaks_without_blocking);
    tcase_add_test(tc, corked_commands_go_out_in_one_write);
    tcase_add_test(tc, uncork_that_cannot_send_fails_every_held_command);
    tcase_add_test(tc, guest_stats_parse);
    tcase_add_test(tc, memory_size_summary_parse);
    tcase_add_test(tc, memory_devices_parse);
    tcase_add_test(tc, blockstats_parse);
    tcase_add_test(tc, virtio_guest_feature_parse);
    tcase_add_test(tc, connect_unix_socket);
    tcase_add_test(tc, glib_main_loop_integration);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return check_run_suite(s, CK_FORK);
}

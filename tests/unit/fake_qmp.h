/*
 * A scripted fake QMP server for fault injection.  It runs in its own
 * thread on one end of a socketpair (or a unix socket in a temp dir) and
 * follows a script of steps: send raw bytes, expect a command, reply to
 * it (the text's "%ID%" becomes the command's id), sleep, close.
 */
#ifndef MEMBAL_FAKE_QMP_H
#define MEMBAL_FAKE_QMP_H

typedef enum {
    FQ_END = 0,
    FQ_SEND,   /* text: raw bytes, sent as is */
    FQ_EXPECT, /* text: command name the next client line must execute */
    FQ_EXPECT_SKIPPING, /* text: the same, other commands before it are
                         * answered with an error (a client that may ask
                         * again, as balancerd's backend each tick) */
    FQ_REPLY,  /* text: reply, "%ID%" replaced by the last expected id */
    FQ_SLEEP,  /* ms */
    FQ_CLOSE,
    FQ_ALIVE, /* the client has not closed its end (QEMU runs a request only
               * while its client is there: it drops the rest at close) */
    FQ_GONE,  /* the client has closed its end by now */
    FQ_SILENT, /* the client has sent nothing since the last expected line */
    FQ_ACCEPT, /* close the client's connection and take the next one
                * (unix socket only): another QEMU behind the same path */
} fq_op;

typedef struct {
    fq_op op;
    const char *text;
    int ms;
} fq_step;

#define FQ_GREETING \
    "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": 7}, " \
    "\"package\": \"Debian 1:7.2+dfsg-7\"}, \"capabilities\": [\"oob\"]}}\r\n"

/* Greeting plus the capabilities negotiation, as QEMU does it. */
#define FQ_HANDSHAKE \
    { FQ_SEND, FQ_GREETING, 0 }, { FQ_EXPECT, "qmp_capabilities", 0 }, \
    { FQ_REPLY, "{\"return\": {}, \"id\": %ID%}\r\n", 0 }

typedef struct fake_qmp fake_qmp;

/* Start the server on a socketpair; *client_fd receives the other end. */
fake_qmp *fake_qmp_start(const fq_step *script, int *client_fd);
/* Start the server listening on a unix socket at path (one client). */
fake_qmp *fake_qmp_start_unix(const fq_step *script, const char *path);
/* Wait for the script to finish; returns NULL if every expectation held,
 * else a description of the first failure (static storage in f, valid
 * until fake_qmp_free). */
const char *fake_qmp_join(fake_qmp *f);
void fake_qmp_free(fake_qmp *f);

#endif

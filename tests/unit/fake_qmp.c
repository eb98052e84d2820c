#include "fake_qmp.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct fake_qmp {
    pthread_t thread;
    const fq_step *script;
    int fd;        /* connected peer */
    int listen_fd; /* -1 for socketpair mode */
    char last_id[32];
    char inbuf[65536];
    size_t inlen;
    char failure[512];
};

static void failf(fake_qmp *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(fake_qmp *f, const char *fmt, ...)
{
    if (f->failure[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->failure, sizeof(f->failure), fmt, ap);
    va_end(ap);
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read one line from the client, waiting up to 5 s. */
static int read_line(fake_qmp *f, char *line, size_t cap)
{
    for (;;) {
        char *nl = memchr(f->inbuf, '\n', f->inlen);
        if (nl) {
            size_t n = (size_t)(nl - f->inbuf);
            size_t copy = n < cap - 1 ? n : cap - 1;
            memcpy(line, f->inbuf, copy);
            line[copy] = '\0';
            memmove(f->inbuf, nl + 1, f->inlen - n - 1);
            f->inlen -= n + 1;
            return 0;
        }
        struct pollfd pfd = { .fd = f->fd, .events = POLLIN };
        if (poll(&pfd, 1, 5000) <= 0 || f->inlen == sizeof(f->inbuf))
            return -1;
        ssize_t n = read(f->fd, f->inbuf + f->inlen, sizeof(f->inbuf) - f->inlen);
        if (n <= 0)
            return -1;
        f->inlen += (size_t)n;
    }
}

static bool executes(const char *line, const char *command)
{
    char want[256], want2[256];
    snprintf(want, sizeof(want), "\"execute\":\"%s\"", command);
    /* json-c prints compact JSON; accept the spaced form too */
    snprintf(want2, sizeof(want2), "\"execute\": \"%s\"", command);
    return strstr(line, want) || strstr(line, want2);
}

static void take_id(fake_qmp *f, const char *line)
{
    const char *id = strstr(line, "\"id\":");
    f->last_id[0] = '\0';
    if (id) {
        id += 5;
        while (*id == ' ')
            id++;
        size_t n = strspn(id, "0123456789");
        if (n && n < sizeof(f->last_id)) {
            memcpy(f->last_id, id, n);
            f->last_id[n] = '\0';
        }
    }
    if (!f->last_id[0])
        failf(f, "command without numeric id: %.400s", line);
}

static void do_reply(fake_qmp *f, const char *tmpl)
{
    char out[8192];
    size_t o = 0;
    for (const char *p = tmpl; *p && o < sizeof(out) - 32;) {
        if (strncmp(p, "%ID%", 4) == 0) {
            o += (size_t)snprintf(out + o, sizeof(out) - o, "%s", f->last_id);
            p += 4;
        } else {
            out[o++] = *p++;
        }
    }
    send_all(f->fd, out, o);
}

/* skip: other commands before it are answered with an error */
static void do_expect(fake_qmp *f, const char *command, bool skip)
{
    char line[4096];
    for (;;) {
        if (read_line(f, line, sizeof(line)) < 0) {
            failf(f, "expected command %s, got nothing", command);
            return;
        }
        if (executes(line, command))
            break;
        if (!skip) {
            failf(f, "expected command %s, got: %.400s", command, line);
            break;
        }
        take_id(f, line);
        do_reply(f, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"not in the script\"}, \"id\": %ID%}\r\n");
    }
    take_id(f, line);
}

/* Closed: the socket reads end-of-file now (lines it sent first are
 * read and kept for the next FQ_EXPECT). */
static bool client_closed(fake_qmp *f)
{
    for (;;) {
        struct pollfd p = { .fd = f->fd, .events = POLLIN };
        if (poll(&p, 1, 0) <= 0)
            return false;
        if (f->inlen == sizeof(f->inbuf))
            return false; /* a full buffer: it has not gone yet */
        ssize_t n = recv(f->fd, f->inbuf + f->inlen, sizeof(f->inbuf) - f->inlen, MSG_DONTWAIT);
        if (n == 0)
            return true;
        if (n < 0)
            return errno != EINTR && errno != EAGAIN;
        f->inlen += (size_t)n;
    }
}

static void *run(void *arg)
{
    fake_qmp *f = arg;
    if (f->listen_fd >= 0) {
        f->fd = accept(f->listen_fd, NULL, NULL);
        if (f->fd < 0) {
            failf(f, "accept: %s", strerror(errno));
            return NULL;
        }
    }
    for (const fq_step *s = f->script; s->op != FQ_END; s++) {
        switch (s->op) {
        case FQ_SEND:
            send_all(f->fd, s->text, strlen(s->text));
            break;
        case FQ_EXPECT:
        case FQ_EXPECT_SKIPPING:
            do_expect(f, s->text, s->op == FQ_EXPECT_SKIPPING);
            break;
        case FQ_REPLY:
            do_reply(f, s->text);
            break;
        case FQ_SLEEP:
            usleep((useconds_t)s->ms * 1000);
            break;
        case FQ_CLOSE:
            close(f->fd);
            f->fd = -1;
            break;
        case FQ_ALIVE:
            if (client_closed(f))
                failf(f, "the client closed its end before step %td", s - f->script);
            break;
        case FQ_SILENT: {
            bool closed = client_closed(f); /* reads what is there */
            if (f->inlen)
                failf(f, "step %td: the client sent: %.*s", s - f->script, (int)(f->inlen < 400 ? f->inlen : 400),
                      f->inbuf);
            else if (closed)
                failf(f, "step %td: the client closed its end", s - f->script);
            break;
        }
        case FQ_ACCEPT:
            close(f->fd);
            f->inlen = 0;
            f->fd = f->listen_fd >= 0 ? accept(f->listen_fd, NULL, NULL) : -1;
            if (f->fd < 0)
                failf(f, "step %td: accept: %s", s - f->script, f->listen_fd >= 0 ? strerror(errno) : "no listener");
            break;
        case FQ_GONE:
            if (!client_closed(f))
                failf(f, "the client has not closed its end by step %td", s - f->script);
            break;
        case FQ_END:
            break;
        }
        if (f->fd < 0)
            break;
    }
    return NULL;
}

static fake_qmp *start(fake_qmp *f)
{
    if (pthread_create(&f->thread, NULL, run, f) != 0) {
        free(f);
        return NULL;
    }
    return f;
}

fake_qmp *fake_qmp_start(const fq_step *script, int *client_fd)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return NULL;
    fake_qmp *f = calloc(1, sizeof(*f));
    f->script = script;
    f->fd = sv[0];
    f->listen_fd = -1;
    *client_fd = sv[1];
    return start(f);
}

fake_qmp *fake_qmp_start_unix(const fq_step *script, const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unlink(path);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
        listen(lfd, 1) < 0) {
        if (lfd >= 0)
            close(lfd);
        return NULL;
    }
    fake_qmp *f = calloc(1, sizeof(*f));
    f->script = script;
    f->fd = -1;
    f->listen_fd = lfd;
    return start(f);
}

const char *fake_qmp_join(fake_qmp *f)
{
    pthread_join(f->thread, NULL);
    return f->failure[0] ? f->failure : NULL;
}

void fake_qmp_free(fake_qmp *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->listen_fd >= 0)
        close(f->listen_fd);
    free(f);
}

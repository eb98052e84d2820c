#include "agent/agent_conn.h"

#include <errno.h>
#include <glib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "util/mono_clock.h"

void agent_conn_init(agent_conn *c, const char *path)
{
    c->path = path ? g_strdup(path) : NULL;
    c->fd = -1;
    c->warned = false;
    qmp_framer_init(&c->in, AGENT_LINE_MAX);
}

void agent_conn_clear(agent_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    qmp_framer_free(&c->in);
    g_free(c->path);
    c->path = NULL;
    c->fd = -1;
}

static int try_connect(agent_conn *c)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(c->path) >= sizeof(addr.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(addr.sun_path, c->path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        errno = err;
        return -1;
    }
    c->fd = fd;
    qmp_framer_free(&c->in); /* a fresh stream: no half line from before */
    qmp_framer_init(&c->in, AGENT_LINE_MAX);
    return 0;
}

void agent_conn_feed(agent_conn *c, const char *buf, size_t n, agent_state *st, uint64_t guest_bytes)
{
    double now = mono_seconds();
    qmp_framer_feed(&c->in, buf, n);
    const char *line;
    size_t len;
    unsigned long too_long = 0;
    while (qmp_framer_next_skipping(&c->in, &line, &len, &too_long) == 0)
        agent_feed_line(st, line, len, now, guest_bytes);
    st->rejected[AGENT_REJ_TOO_LONG] += too_long;
}

void agent_conn_drain(agent_conn *c, const char *name, agent_state *st, uint64_t guest_bytes)
{
    if (!c->path)
        return;
    if (c->fd < 0 && try_connect(c) < 0) {
        if (!c->warned)
            log_warn("guest %s: cannot connect to its agent at %s: %s (logged once)", name, c->path,
                     g_strerror(errno));
        c->warned = true;
        return;
    }
    char buf[4096];
    for (size_t got = 0; got < AGENT_DRAIN_MAX;) {
        ssize_t n = read(c->fd, buf, sizeof(buf));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (n <= 0) {
            close(c->fd);
            c->fd = -1;
            break;
        }
        agent_conn_feed(c, buf, (size_t)n, st, guest_bytes);
        got += (size_t)n;
    }
}

/*
 * Many simulated guests in one process, each behind its own QMP socket,
 * for load and soak tests of balancerd (tests/faults/soak.sh).  Speaks
 * enough QMP for balancerd's QMP backend: greeting, qmp_capabilities,
 * query-name, query-uuid, query-memory-size-summary, qom-set, qom-get
 * guest-stats, query-balloon, balloon (with BALLOON_CHANGE),
 * query-blockstats and query-memory-devices (no disks, no memory devices).  Each guest's memory use swings slowly (a different
 * phase per guest) so balancerd keeps deciding.  Every fifth guest lies
 * in its balloon stats: free memory four times its RAM, counters that jump
 * backwards, values near 2^62, and now and then no stats at all; it must
 * not gain from it nor fall below its floor (soak.sh checks).
 *
 * Usage: fake_qemu DIR N [MEM_MIB=1024] [FIRST=0]
 *   creates DIR/fake-00.sock ... and serves them until SIGTERM; the guests
 *   are named fake-FIRST ... (distinct names and uuids for several
 *   instances, e.g. one to SIGSTOP alone).  N has no cap but the fd limit
 *   (two fds a guest; the soft limit is raised to the hard one): one epoll
 *   set serves them all, and each message goes out in one write, so that
 *   at 2000 guests (bench/scale.sh) the fake is not what balancerd waits
 *   for.
 */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024ULL * 1024ULL)
#define LINE_MAX_BYTES 65536

typedef struct {
    int listen_fd, fd;
    char path[300];
    char buf[LINE_MAX_BYTES];
    size_t len;
    uint64_t mem, actual;
    double phase;
    uint64_t majflt;
    bool liar;
    unsigned calls;
} fake_guest;

static volatile sig_atomic_t stop;
static size_t first; /* the first guest's number in names and uuids */
static void on_term(int sig) { (void)sig; stop = 1; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void drop_client(fake_guest *g)
{
    close(g->fd); /* closing takes it out of the epoll set */
    g->fd = -1;
    g->len = 0;
}

/* One message, one write: the line and its CR LF together. */
static void send_obj(fake_guest *g, json_object *o)
{
    size_t n;
    const char *s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &n);
    char *line = malloc(n + 2);
    if (!line) {
        drop_client(g);
        return;
    }
    memcpy(line, s, n);
    memcpy(line + n, "\r\n", 2);
    if (write(g->fd, line, n + 2) != (ssize_t)(n + 2))
        drop_client(g);
    free(line);
}

static void reply(fake_guest *g, json_object *id, json_object *ret)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "return", ret ? ret : json_object_new_object());
    if (id)
        json_object_object_add(o, "id", json_object_get(id));
    send_obj(g, o);
    json_object_put(o);
}

/* What the simulated guest uses: 30-70% of its balloon, slowly swinging. */
static void guest_stats(fake_guest *g, json_object **out)
{
    double t = now_s();
    double used_frac = 0.5 + 0.2 * sin(t / 60.0 + g->phase);
    uint64_t used = (uint64_t)((double)g->actual * used_frac);
    uint64_t cache = g->actual / 8;
    uint64_t free_b = g->actual > used + cache ? g->actual - used - cache : 0;
    g->majflt += 3;
    json_object *stats = json_object_new_object();
    json_object_object_add(stats, "stat-swap-in", json_object_new_int64(0));
    json_object_object_add(stats, "stat-swap-out", json_object_new_int64(0));
    json_object_object_add(stats, "stat-major-faults", json_object_new_int64((int64_t)g->majflt));
    json_object_object_add(stats, "stat-minor-faults", json_object_new_int64((int64_t)g->majflt * 100));
    json_object_object_add(stats, "stat-free-memory", json_object_new_int64((int64_t)free_b));
    json_object_object_add(stats, "stat-total-memory", json_object_new_int64((int64_t)g->actual));
    json_object_object_add(stats, "stat-available-memory", json_object_new_int64((int64_t)(free_b + cache)));
    json_object_object_add(stats, "stat-disk-caches", json_object_new_int64((int64_t)cache));
    json_object_object_add(stats, "stat-htlb-pgalloc", json_object_new_int64(0));
    json_object_object_add(stats, "stat-htlb-pgfail", json_object_new_int64(0));
    if (g->liar) {
        g->calls++;
        int64_t huge = (int64_t)1 << 62;
        json_object_object_add(stats, "stat-free-memory", json_object_new_int64((int64_t)g->actual * 4));
        json_object_object_add(stats, "stat-available-memory",
                               json_object_new_int64(g->calls % 3 ? huge : -5));
        json_object_object_add(stats, "stat-swap-in",
                               json_object_new_int64(g->calls % 2 ? huge : (int64_t)g->calls));
        json_object_object_add(stats, "stat-major-faults",
                               json_object_new_int64((int64_t)(g->calls % 4) * 1000000));
        if (g->calls % 7 == 0) {
            json_object_put(stats);
            stats = json_object_new_object(); /* nothing reported at all */
        }
    }
    json_object *r = json_object_new_object();
    json_object_object_add(r, "stats", stats);
    json_object_object_add(r, "last-update", json_object_new_int64((int64_t)time(NULL)));
    *out = r;
}

static void handle(fake_guest *g, size_t idx, const char *line)
{
    json_object *req = json_tokener_parse(line), *cmd, *id = NULL, *args = NULL;
    if (!req || !json_object_object_get_ex(req, "execute", &cmd)) {
        json_object_put(req);
        return;
    }
    json_object_object_get_ex(req, "id", &id);
    json_object_object_get_ex(req, "arguments", &args);
    const char *c = json_object_get_string(cmd);
    json_object *ret = NULL;
    if (!strcmp(c, "qmp_capabilities") || !strcmp(c, "qom-set")) {
        reply(g, id, NULL);
    } else if (!strcmp(c, "query-name")) {
        char name[32];
        snprintf(name, sizeof(name), "fake-%02zu", first + idx);
        ret = json_object_new_object();
        json_object_object_add(ret, "name", json_object_new_string(name));
        reply(g, id, ret);
    } else if (!strcmp(c, "query-uuid")) {
        char uuid[40];
        snprintf(uuid, sizeof(uuid), "00000000-0000-4000-8000-%012zx", first + idx + 1);
        ret = json_object_new_object();
        json_object_object_add(ret, "UUID", json_object_new_string(uuid));
        reply(g, id, ret);
    } else if (!strcmp(c, "query-memory-size-summary")) {
        ret = json_object_new_object();
        json_object_object_add(ret, "base-memory", json_object_new_int64((int64_t)g->mem));
        json_object_object_add(ret, "plugged-memory", json_object_new_int64(0));
        reply(g, id, ret);
    } else if (!strcmp(c, "qom-get")) {
        json_object *prop;
        if (args && json_object_object_get_ex(args, "property", &prop) &&
            (!strcmp(json_object_get_string(prop), "free-page-reporting") ||
             !strcmp(json_object_get_string(prop), "deflate-on-oom")))
            ret = json_object_new_boolean(0); /* as a QEMU whose balloon does neither */
        else
            guest_stats(g, &ret);
        reply(g, id, ret);
    } else if (!strcmp(c, "query-balloon")) {
        ret = json_object_new_object();
        json_object_object_add(ret, "actual", json_object_new_int64((int64_t)g->actual));
        reply(g, id, ret);
    } else if (!strcmp(c, "query-blockstats") || !strcmp(c, "query-memory-devices")) {
        reply(g, id, json_object_new_array()); /* no disks, no memory devices */
    } else if (!strcmp(c, "balloon")) {
        json_object *v;
        int64_t want = args && json_object_object_get_ex(args, "value", &v) ? json_object_get_int64(v) : 0;
        if (want < (int64_t)(64 * MIB))
            want = (int64_t)(64 * MIB);
        if ((uint64_t)want > g->mem)
            want = (int64_t)g->mem;
        g->actual = (uint64_t)want;
        reply(g, id, NULL);
        json_object *ev = json_object_new_object(), *data = json_object_new_object();
        json_object_object_add(ev, "event", json_object_new_string("BALLOON_CHANGE"));
        json_object_object_add(data, "actual", json_object_new_int64(want));
        json_object_object_add(ev, "data", data);
        if (g->fd >= 0)
            send_obj(g, ev);
        json_object_put(ev);
    } else {
        json_object *o = json_object_new_object(), *err = json_object_new_object();
        json_object_object_add(err, "class", json_object_new_string("CommandNotFound"));
        json_object_object_add(err, "desc", json_object_new_string("The command is not found"));
        json_object_object_add(o, "error", err);
        if (id)
            json_object_object_add(o, "id", json_object_get(id));
        send_obj(g, o);
        json_object_put(o);
    }
    json_object_put(req);
}

static void greet(fake_guest *g)
{
    json_object *o = json_tokener_parse("{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, "
                                        "\"major\": 7}, \"package\": \"fake\"}, \"capabilities\": []}}");
    send_obj(g, o);
    json_object_put(o);
}

static void read_client(fake_guest *g, size_t idx)
{
    ssize_t n = read(g->fd, g->buf + g->len, sizeof(g->buf) - g->len - 1);
    if (n <= 0) {
        drop_client(g);
        return;
    }
    g->len += (size_t)n;
    g->buf[g->len] = '\0';
    char *start = g->buf, *nl;
    while (g->fd >= 0 && (nl = strchr(start, '\n'))) {
        *nl = '\0';
        handle(g, idx, start);
        start = nl + 1;
    }
    if (g->fd < 0)
        return; /* dropped while answering: its buffer went with it */
    g->len -= (size_t)(start - g->buf);
    memmove(g->buf, start, g->len);
    if (g->len >= sizeof(g->buf) - 1)
        g->len = 0; /* an over-long line: drop it */
}

/* Two fds a guest, and a few besides: the soft limit up to the hard one. */
static int fd_room(size_t n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -1;
    rlim_t want = (rlim_t)(2 * n + 16);
    if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur >= want ? 0 : -1;
}

static int watch(int ep, int fd, uint64_t tag)
{
    struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static int listen_at(fake_guest *g, const char *dir, size_t i)
{
    snprintf(g->path, sizeof(g->path), "%s/fake-%02zu.sock", dir, i);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g->path);
    unlink(g->path);
    g->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (g->listen_fd < 0 || bind(g->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(g->listen_fd, 4) < 0) {
        fprintf(stderr, "fake_qemu: %s: %s\n", g->path, strerror(errno));
        return -1;
    }
    return 0;
}

/* An event of guest i: its listener (a new client) or its client. */
static void serve(int ep, fake_guest *g, size_t i, bool listener)
{
    if (listener) {
        int fd = accept4(g->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0 && g->fd >= 0) {
            close(fd); /* one monitor client at a time, like QEMU */
        } else if (fd >= 0) {
            g->fd = fd;
            g->len = 0;
            if (watch(ep, fd, 2 * i + 1) < 0)
                drop_client(g);
            else
                greet(g);
        }
    } else if (g->fd >= 0) {
        read_client(g, i);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fake_qemu DIR N [MEM_MIB] [FIRST]\n");
        return 2;
    }
    size_t n = (size_t)atoi(argv[2]);
    uint64_t mem = (argc > 3 ? (uint64_t)atoi(argv[3]) : 1024) * MIB;
    first = argc > 4 ? (size_t)atoi(argv[4]) : 0;
    if (n == 0 || mem < 128 * MIB) {
        fprintf(stderr, "fake_qemu: N must be at least 1 and MEM_MIB at least 128\n");
        return 2;
    }
    if (fd_room(n) < 0) {
        fprintf(stderr, "fake_qemu: %zu guests need %zu fds, more than RLIMIT_NOFILE allows\n", n, 2 * n + 16);
        return 2;
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    signal(SIGPIPE, SIG_IGN);
    fake_guest *g = calloc(n, sizeof(*g));
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (!g || ep < 0) {
        fprintf(stderr, "fake_qemu: %s\n", strerror(errno));
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        g[i].fd = -1;
        g[i].mem = g[i].actual = mem;
        g[i].phase = (double)i;
        g[i].liar = i % 5 == 4;
        if (listen_at(&g[i], argv[1], i) < 0 || watch(ep, g[i].listen_fd, 2 * i) < 0)
            return 1;
    }
    printf("fake_qemu: %zu guests of %llu MiB ready\n", n, (unsigned long long)(mem / MIB));
    fflush(stdout);
    struct epoll_event evs[256];
    while (!stop) {
        int k = epoll_wait(ep, evs, 256, 500);
        if (k < 0 && errno != EINTR)
            break;
        for (int e = 0; e < k; e++) {
            size_t i = (size_t)(evs[e].data.u64 / 2);
            serve(ep, &g[i], i, evs[e].data.u64 % 2 == 0);
        }
    }
    for (size_t i = 0; i < n; i++) {
        close(g[i].listen_fd);
        if (g[i].fd >= 0)
            close(g[i].fd);
        unlink(g[i].path);
    }
    close(ep);
    free(g);
    return 0;
}

/*
 * balancer-agent: optional in-guest helper for membal's balancerd.
 *
 * Every INTERVAL seconds it reads /proc/vmstat, /proc/meminfo and
 * /proc/pressure/memory and writes one JSON line (protocol v1, see
 * PROTOCOL.md) to the virtio-serial port org.membal.agent.0.  Statically
 * linked, no dependencies: it runs in a busybox initramfs as well as on a
 * full distribution.
 *
 * Usage: balancer-agent [--port PATH] [--interval S] [--once] [--stdout]
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PORT "/dev/virtio-ports/org.membal.agent.0"
#define LINE_MAX_BYTES 4096

typedef struct {
    const char *key;
    long long value;
    int found;
} field;

/* vmstat counters sent, in protocol order */
static field vmstat[] = {
    { "workingset_refault_anon", 0, 0 }, { "workingset_refault_file", 0, 0 },
    { "workingset_activate_anon", 0, 0 }, { "workingset_activate_file", 0, 0 },
    { "pgscan_anon", 0, 0 },  { "pgscan_file", 0, 0 },
    { "pgsteal_anon", 0, 0 }, { "pgsteal_file", 0, 0 },
    { "pswpin", 0, 0 },       { "pswpout", 0, 0 },
    { "pgmajfault", 0, 0 },
    { "oom_kill", 0, 0 },     { "allocstall_dma", 0, 0 },
    { "allocstall_dma32", 0, 0 }, { "allocstall_normal", 0, 0 },
    { "allocstall_movable", 0, 0 },
};

/* meminfo fields (kB), sent with a _kb suffix */
static field meminfo[] = {
    { "MemTotal", 0, 0 },      { "MemAvailable", 0, 0 },    { "Active(anon)", 0, 0 },
    { "Inactive(anon)", 0, 0 }, { "Active(file)", 0, 0 },   { "Inactive(file)", 0, 0 },
    { "Cached", 0, 0 },        { "Dirty", 0, 0 },           { "Writeback", 0, 0 },
    { "SwapCached", 0, 0 },
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void read_fields(const char *path, field *f, size_t n, int colon)
{
    for (size_t i = 0; i < n; i++)
        f[i].found = 0;
    FILE *fp = fopen(path, "r");
    if (!fp)
        return;
    char line[256];
    while (fgets(line, sizeof(line), fp)) {
        for (size_t i = 0; i < n; i++) {
            size_t k = strlen(f[i].key);
            if (strncmp(line, f[i].key, k) != 0 || line[k] != (colon ? ':' : ' '))
                continue;
            f[i].value = strtoll(line + k + 1, NULL, 10);
            f[i].found = 1;
        }
    }
    fclose(fp);
}

/* "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" */
static int read_psi(double *some10, double *full10, long long *some_total)
{
    FILE *fp = fopen("/proc/pressure/memory", "r");
    if (!fp)
        return -1;
    char line[256];
    int got = 0;
    while (fgets(line, sizeof(line), fp)) {
        double a10;
        long long total;
        if (sscanf(line, "some avg10=%lf avg60=%*f avg300=%*f total=%lld", &a10, &total) == 2) {
            *some10 = a10;
            *some_total = total;
            got |= 1;
        } else if (sscanf(line, "full avg10=%lf", &a10) == 1) {
            *full10 = a10;
            got |= 2;
        }
    }
    fclose(fp);
    return got == 3 ? 0 : -1;
}

static long long value_of(const field *f, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].key, key) == 0)
            return f[i].found ? f[i].value : -1;
    return -1;
}

/* JSON key from a meminfo name: "Active(anon)" -> "active_anon_kb" */
static void json_key(const char *name, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = name; *p && o + 4 < len; p++) {
        if (*p == '(')
            out[o++] = '_';
        else if (*p != ')')
            out[o++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    }
    snprintf(out + o, len - o, "_kb");
}

static int compose(char *buf, size_t len, unsigned long long seq, long long prev_refault_file,
                   long long prev_steal_file)
{
    size_t o = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
#define PUT(...) do { int w = snprintf(buf + o, len - o, __VA_ARGS__); if (w < 0 || (size_t)w >= len - o) return -1; o += (size_t)w; } while (0)
    PUT("{\"v\":1,\"seq\":%llu,\"uptime_ms\":%lld,\"vmstat\":{", seq,
        (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    int first = 1;
    for (size_t i = 0; i < N(vmstat); i++) {
        if (!vmstat[i].found)
            continue;
        PUT("%s\"%s\":%lld", first ? "" : ",", vmstat[i].key, vmstat[i].value);
        first = 0;
    }
    PUT("},\"meminfo\":{");
    first = 1;
    for (size_t i = 0; i < N(meminfo); i++) {
        if (!meminfo[i].found)
            continue;
        char key[48];
        json_key(meminfo[i].key, key, sizeof(key));
        PUT("%s\"%s\":%lld", first ? "" : ",", key, meminfo[i].value);
        first = 0;
    }
    PUT("}");
    double s10 = 0, f10 = 0;
    long long stotal = 0;
    if (read_psi(&s10, &f10, &stotal) == 0)
        PUT(",\"psi\":{\"some_avg10\":%.2f,\"full_avg10\":%.2f,\"some_total_us\":%lld}", s10, f10, stotal);
    /* Streaming: the file LRU is being reclaimed steadily while nothing
     * that was evicted comes back (no file refaults). */
    long long rf = value_of(vmstat, N(vmstat), "workingset_refault_file");
    long long sf = value_of(vmstat, N(vmstat), "pgsteal_file");
    if (prev_refault_file >= 0 && rf >= 0 && sf >= 0 && prev_steal_file >= 0) {
        long long drf = rf - prev_refault_file, dsf = sf - prev_steal_file;
        if (dsf > 256 && drf * 50 < dsf)
            PUT(",\"hint\":\"streaming\"");
    }
    PUT("}\n");
#undef PUT
    return (int)o;
}

/* Without udev there is no /dev/virtio-ports/NAME symlink: find the
 * vportNpM device whose sysfs name is ours. */
static int open_port(const char *port)
{
    int fd = open(port, O_WRONLY | O_CLOEXEC);
    if (fd >= 0 || strcmp(port, DEFAULT_PORT) != 0)
        return fd;
    for (int dev = 0; dev < 8; dev++) {
        for (int p = 0; p < 32; p++) {
            char path[96], name[64] = "";
            snprintf(path, sizeof(path), "/sys/class/virtio-ports/vport%dp%d/name", dev, p);
            FILE *f = fopen(path, "r");
            if (!f)
                continue;
            if (!fgets(name, sizeof(name), f))
                name[0] = '\0';
            fclose(f);
            name[strcspn(name, "\n")] = '\0';
            if (strcmp(name, "org.membal.agent.0") == 0) {
                snprintf(path, sizeof(path), "/dev/vport%dp%d", dev, p);
                return open(path, O_WRONLY | O_CLOEXEC);
            }
        }
    }
    errno = ENOENT;
    return -1;
}

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    const char *port = DEFAULT_PORT;
    int interval = 1, once = 0, to_stdout = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = argv[++i];
        else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc)
            interval = atoi(argv[++i]);
        else if (strcmp(argv[i], "--once") == 0)
            once = 1;
        else if (strcmp(argv[i], "--stdout") == 0)
            to_stdout = 1;
        else {
            fprintf(stderr, "usage: balancer-agent [--port PATH] [--interval S] [--once] [--stdout]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (interval < 1 || interval > 3600) {
        fprintf(stderr, "balancer-agent: --interval must be 1..3600\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGPIPE, SIG_IGN);
    int fd = to_stdout ? STDOUT_FILENO : -1;
    unsigned long long seq = 0;
    long long prev_rf = -1, prev_sf = -1;
    while (!stop) {
        if (fd < 0) {
            fd = open_port(port);
            if (fd < 0) {
                /* the port appears when the host wires it; keep trying */
                if (once) {
                    fprintf(stderr, "balancer-agent: %s: %s\n", port, strerror(errno));
                    return 1;
                }
                sleep((unsigned)interval);
                continue;
            }
        }
        read_fields("/proc/vmstat", vmstat, N(vmstat), 0);
        read_fields("/proc/meminfo", meminfo, N(meminfo), 1);
        char line[LINE_MAX_BYTES];
        int n = compose(line, sizeof(line), ++seq, prev_rf, prev_sf);
        prev_rf = value_of(vmstat, N(vmstat), "workingset_refault_file");
        prev_sf = value_of(vmstat, N(vmstat), "pgsteal_file");
        if (n > 0 && write(fd, line, (size_t)n) < 0 && !to_stdout) {
            close(fd); /* host side went away; reopen next time */
            fd = -1;
        }
        if (once)
            break;
        sleep((unsigned)interval);
    }
    return 0;
}

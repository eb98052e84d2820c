/* A QEMU's /proc files kept open; see qemu_proc.h. */
#include "host/qemu_proc.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "host/qemu_touched.h"

/* as small_file_read allowed them: the fields read are in the first 2 KiB */
#define STATUS_MAX 8192
#define STAT_MAX 4096

/* A file is kept open only below half the soft RLIMIT_NOFILE (read once:
 * balancerd raises it before its first guest): above, it is read and
 * closed again, so that the guests' sockets and the host's files never
 * run short for want of a saved system call. */
static int keep_below(void)
{
    static int below = -1;
    struct rlimit rl;
    if (below < 0)
        below = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)INT_MAX ? (int)(rl.rlim_cur / 2) : INT_MAX;
    return below;
}

void qemu_proc_init(qemu_proc *p)
{
    p->pid = 0;
    p->status_fd = p->stat_fd = -1;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void qemu_proc_close(qemu_proc *p)
{
    close_fd(&p->status_fd);
    close_fd(&p->stat_fd);
    p->pid = 0;
}

/* /proc/PID/FILE into buf (NUL-terminated), through *fd, opened when it
 * is not: 0, or -1. */
static int read_file(const qemu_proc *p, int *fd, const char *file, char *buf, size_t len)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (*fd < 0) {
            char path[64];
            snprintf(path, sizeof(path), "/proc/%d/%s", p->pid, file);
            *fd = open(path, O_RDONLY | O_CLOEXEC);
            if (*fd < 0)
                return -1;
        }
        ssize_t n = pread(*fd, buf, len - 1, 0);
        if (n > 0) {
            buf[n] = '\0';
            if (*fd >= keep_below())
                close_fd(fd);
            return 0;
        }
        close_fd(fd); /* its process is gone: the pid's files again, once */
    }
    return -1;
}

int64_t qemu_proc_touched_bytes(qemu_proc *p, int pid, int64_t guest_ram_bytes)
{
    if (pid != p->pid)
        qemu_proc_close(p);
    if (pid <= 0)
        return -1;
    p->pid = pid;
    char text[STATUS_MAX];
    if (read_file(p, &p->status_fd, "status", text, sizeof(text)) < 0)
        return -1;
    return qemu_touched_from_status(text, guest_ram_bytes);
}

int qemu_proc_stat(qemu_proc *p, proc_stat_counts *out)
{
    char text[STAT_MAX];
    if (p->pid <= 0 || read_file(p, &p->stat_fd, "stat", text, sizeof(text)) < 0)
        return -1;
    return proc_stat_counts_parse(text, out);
}

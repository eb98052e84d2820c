/* Helpers for tests against real processes; see test_util.h. */
#include "test_util.h"
#include <glib.h>

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"

const char *test_top(void)
{
    const char *t = getenv("MEMBAL_TOP");
    return t && *t ? t : ".";
}

int test_run(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

bool test_put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The lines of log from line `from` on (NULL-terminated; an unreadable
 * log has none). */
static GStrv log_lines_from(const char *log, int from, char ***all)
{
    g_autofree char *t = NULL;
    *all = g_file_get_contents(log, &t, NULL, NULL) ? g_strsplit(t, "\n", -1) : g_new0(char *, 1);
    return *all + MIN((guint)MAX(from, 0), g_strv_length(*all));
}

int test_count_lines(const char *path, const char *needle)
{
    g_auto(GStrv) all = NULL;
    int n = 0;
    /* split as log_lines_from splits, so that test_count_lines(log, "")
     * is the `from` of the log's next line, however long its lines */
    for (char **l = log_lines_from(path, 0, &all); *l; l++)
        n += (**l || l[1]) && strstr(*l, needle) != NULL; /* not the empty piece after the last newline */
    return n;
}

bool test_wait_line(const char *path, const char *needle, int seconds)
{
    for (int i = 0; i < seconds * 10; i++) {
        if (test_count_lines(path, needle) > 0)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

long long test_anon_huge_bytes(pid_t pid, unsigned long long mapping_size)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/%s", (int)pid, mapping_size ? "smaps" : "smaps_rollup");
    g_autofree char *text = NULL;
    if (!g_file_get_contents(path, &text, NULL, NULL))
        return -1;
    long long huge = -1;
    unsigned long long size_kb = 0;
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++) {
        if (g_str_has_prefix(*l, "Size:"))
            size_kb = g_ascii_strtoull(*l + strlen("Size:"), NULL, 10);
        else if (g_str_has_prefix(*l, "AnonHugePages:") && (!mapping_size || size_kb * 1024 == mapping_size))
            huge = (huge < 0 ? 0 : huge) + (long long)g_ascii_strtoull(*l + strlen("AnonHugePages:"), NULL, 10) * 1024;
    }
    return huge;
}

bool test_have_swap(void)
{
    FILE *f = fopen("/proc/swaps", "r");
    if (!f)
        return false;
    char line[512];
    int lines = 0;
    while (fgets(line, sizeof(line), f))
        lines++;
    fclose(f);
    return lines > 1; /* a header, then one line per swap area */
}

int test_swap_on(const char *path)
{
    if (test_have_swap())
        return 0;
    cleanup_register("swapoff '%s' 2>/dev/null; rm -f '%s'", path, path);
    return test_run("fallocate -l 1G '%s' && chmod 600 '%s' && mkswap -q '%s' >/dev/null && swapon '%s'", path,
                    path, path, path) == 0
               ? 1
               : -1;
}

int test_swap_off(const char *path) { return test_run("swapoff '%s' && rm -f '%s'", path, path); }

const char *test_daemon_prefix;

pid_t test_start_daemon(const char *conf, const char *args, const char *log, bool bare)
{
    pid_t pid = fork();
    if (pid == 0) {
        char cmd[8192];
        /* a checker's failure (valgrind's leak report) shows up as a
         * non-zero exit status */
        const char *wrap = bare ? NULL : getenv("MEMBAL_DAEMON_WRAPPER");
        snprintf(cmd, sizeof(cmd), "exec %s %s '%s/build/balancerd' --config '%s' %s >'%s' 2>&1",
                 test_daemon_prefix ? test_daemon_prefix : "", wrap ? wrap : "", test_top(), conf, args, log);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        cleanup_register("kill -9 %d 2>/dev/null", (int)pid);
    return pid;
}

int test_stop_daemon(pid_t pid)
{
    if (pid <= 0)
        return -1;
    kill(pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        usleep(100 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

double test_longest_tick(const char *log, int from, int *ticks)
{
    g_auto(GStrv) all = NULL;
    double worst = 0;
    *ticks = 0;
    for (char **l = log_lines_from(log, from, &all); *l; l++) {
        const char *paren = strstr(*l, "debug: tick ") ? strrchr(*l, '(') : NULL;
        if (paren) {
            double sec = strtod(paren + 1, NULL);
            (*ticks)++;
            if (sec > worst)
                worst = sec;
        }
    }
    return worst;
}

int test_missed_ticks(const char *log, int from, const char *needle, int *longest_run)
{
    g_auto(GStrv) all = NULL;
    int missed = 0, run = 0;
    bool seen = false;
    *longest_run = 0;
    for (char **l = log_lines_from(log, from, &all); *l; l++) {
        if (strstr(*l, needle))
            seen = true;
        else if (strstr(*l, "debug: tick ")) {
            missed += seen;
            run = seen ? run + 1 : 0;
            *longest_run = MAX(*longest_run, run);
            seen = false;
        }
    }
    if (seen) { /* a last tick whose own line is not written yet */
        missed++;
        *longest_run = MAX(*longest_run, run + 1);
    }
    return missed;
}

bool test_fake_damon(const char *admin)
{
    static const char *const dirs[] = { "monitoring_attrs/intervals", "monitoring_attrs/nr_regions",
                                        "schemes/0/access_pattern/sz", "schemes/0/access_pattern/nr_accesses",
                                        "schemes/0/access_pattern/age", "schemes/0/tried_regions" };
    g_autofree char *ctx = g_strdup_printf("%s/kdamonds/0/contexts/0", admin);
    for (size_t i = 0; i < G_N_ELEMENTS(dirs); i++) {
        g_autofree char *d = g_strdup_printf("%s/%s", ctx, dirs[i]);
        if (g_mkdir_with_parents(d, 0700) < 0)
            return false;
    }
    for (int i = 0; i < 500; i++) {
        g_autofree char *d = g_strdup_printf("%s/targets/0/regions/%d", ctx, i);
        if (g_mkdir_with_parents(d, 0700) < 0)
            return false;
    }
    g_autofree char *nr = g_strdup_printf("%s/kdamonds/nr_kdamonds", admin);
    g_autofree char *ops = g_strdup_printf("%s/avail_operations", ctx);
    g_autofree char *state = g_strdup_printf("%s/kdamonds/0/state", admin);
    return test_put(nr, "0") && test_put(ops, "vaddr fvaddr paddr") && test_put(state, "off");
}

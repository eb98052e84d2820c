/* Memory PSI and major faults; see pressure.h. */
#include "host/pressure.h"

#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/small_file.h"

int psi_some_avg10(const char *path, double *out)
{
    g_autofree char *text = small_file_read(path, 4096);
    if (!text)
        return -1;
    /* "some avg10=0.12 avg60=0.05 avg300=0.01 total=12345" */
    const char *p = strstr(text, "some avg10=");
    return p && sscanf(p + 11, "%lf", out) == 1 ? 0 : -1;
}

int proc_stat_counts_parse(const char *text, proc_stat_counts *out)
{
    /* the command name may hold spaces and parentheses: fields count from
     * the last ')' (majflt is field 12, utime 14, stime 15) */
    const char *p = strrchr(text, ')');
    unsigned long long majflt, utime, stime;
    long hz = sysconf(_SC_CLK_TCK);
    if (!p || hz <= 0 ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %llu %*u %llu %llu", &majflt, &utime, &stime) != 3)
        return -1;
    out->major_faults = majflt;
    out->cpu_ms = (utime + stime) * 1000ULL / (unsigned long long)hz;
    return 0;
}

int proc_stat_counts_read(int pid, proc_stat_counts *out)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    g_autofree char *text = small_file_read(path, 4096);
    return text ? proc_stat_counts_parse(text, out) : -1;
}
